import math

import pytest

from meanfield.schedules import Constant, Cosine, Exponential, Linear, Step, as_schedule


def test_cosine_formula_endpoints_and_clamp():
    s = Cosine(start=2.0, end=0.5, T=100)
    assert s(0) == 2.0 and s(100) == 0.5 and s(1e9) == 0.5 and s(-5) == 2.0
    for t in (10, 37, 50, 90):
        assert s(t) == pytest.approx(0.5 + 0.5 * 1.5 * (1 + math.cos(math.pi * t / 100)), rel=1e-15)
    values = [s(t) for t in range(101)]
    assert all(b <= a for a, b in zip(values, values[1:]))  # monotone anneal


def test_linear_exponential_step_constant():
    assert Linear(1.0, 3.0, 4)(1) == pytest.approx(1.5)
    e = Exponential(1.0, 1e-2, 10)
    assert e(5) == pytest.approx(0.1) and e(10) == pytest.approx(1e-2)
    st = Step([1.0, 0.5, 0.1], [10, 20])
    assert [st(0), st(9.9), st(10), st(19), st(20), st(100)] == [1.0, 1.0, 0.5, 0.5, 0.1, 0.1]
    assert Constant(3.0)(123) == 3.0
    assert as_schedule(0.5, "beta")(7) == 0.5


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: Cosine(1.0, 0.1, 0), "T"),
        (lambda: Linear(float("nan"), 0.1, 10), "start"),
        (lambda: Exponential(0.0, 0.1, 10), "start"),
        (lambda: Step([1.0], [5]), "len"),
        (lambda: Step([1.0, 2.0, 3.0], [5, 5]), "increasing"),
        (lambda: as_schedule("hot", "beta"), "beta"),
    ],
)
def test_bad_schedules_raise(make, match):
    with pytest.raises((ValueError, TypeError), match=match):
        make()
