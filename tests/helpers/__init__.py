"""Helpers shared by the tests (imported as ``from helpers.x import ...``: ``tests/`` is on ``sys.path`` through
``tests/conftest.py``, pytest's rootdir conftest). Oracles and fakes, never tests themselves."""
