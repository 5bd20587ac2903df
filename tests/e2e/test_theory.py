"""Every theory check: its fast preset passes on the numbers it returns, and a broken input fails it.

A check module declares ``BROKEN``: keyword arguments of ``run`` that break the simulated side only
(a wrong temperature, a dropped interaction term, …) while the analytic references stay as they are.
"""

import math

import pytest

from meanfield.studies.validation import discover, load_check

CHECKS = discover()


@pytest.fixture(scope="module", params=sorted(CHECKS))
def check(request):
    return request.param, load_check(CHECKS[request.param])


@pytest.mark.slow
def test_fast_preset_passes(check):
    name, module = check
    result = module.run("fast")
    assert result.name == name and result.claim == module.CLAIM
    assert result.comparisons, "a check must compare something"
    for row in result.comparisons:
        assert math.isfinite(row.value) and math.isfinite(row.reference), row
        assert row.passed, row
    assert any(row.expect == "differ" for row in result.comparisons), "each check carries a negative control"
    module.plot(result)


@pytest.mark.slow
def test_broken_input_fails(check):
    name, module = check
    assert hasattr(module, "BROKEN"), f"{name} declares no BROKEN input"
    assert not module.run("fast", **module.BROKEN).passed
