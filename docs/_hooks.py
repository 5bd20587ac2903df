"""mkdocs hook: generate the figures the pages show, by the same code users run, before the build.

Figures are never committed. ``meanfield figures`` (what this hook calls) writes ``docs/figures/*.png``
from every theory check's ``plot()`` (fast preset), the overview (the landing page's picture) and the
quickstart; a figure already there is kept, so ``mkdocs serve`` does not rerun the checks on every edit
(delete ``docs/figures`` to refresh).
"""

from __future__ import annotations

from pathlib import Path


def on_pre_build(config, **kwargs) -> None:
    from meanfield.figures import generate

    generate(Path(config["docs_dir"]) / "figures", preset="fast", keep_existing=True)
