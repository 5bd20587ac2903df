import math

import pytest

from meanfield.drift.schedules import (
    SCHEDULES,
    Constant,
    Cosine,
    Exponential,
    Linear,
    Step,
    as_schedule,
    schedule_from_dict,
    schedule_to_data,
)


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


# ----------------------------------------------------------------------------------------------------------
# schedules as data
# ----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "schedule",
    [
        Constant(0.3),
        Cosine(1.0, 0.001, 1000),
        Linear(0.5, 0.0, 10),
        Exponential(1.0, 0.01, 50),
        Step([1.0, 0.5], [7]),
    ],
)
def test_schedule_round_trips_through_its_dict(schedule):
    data = schedule.to_dict()
    assert data["kind"] in SCHEDULES and SCHEDULES[data["kind"]] is type(schedule)
    assert all(isinstance(v, (str, float, list)) for v in data.values())
    rebuilt = schedule_from_dict(data)
    assert rebuilt == schedule and [rebuilt(s) for s in (0, 3, 7, 2000)] == [
        schedule(s) for s in (0, 3, 7, 2000)
    ]
    assert as_schedule(data, "beta") == schedule
    assert schedule_to_data(schedule) == data


def test_cosine_dict_is_the_documented_one():
    assert Cosine(1.0, 0.001, 1000.0).to_dict() == {"kind": "cosine", "start": 1.0, "end": 0.001, "T": 1000.0}
    assert schedule_to_data(0.5) == 0.5 and isinstance(schedule_to_data(2), float)


@pytest.mark.parametrize(
    "data, match",
    [
        ({"kind": "cos", "start": 1, "end": 0, "T": 1}, r"'kind' in \['constant', 'cosine'"),
        ({"start": 1, "end": 0, "T": 1}, "'kind' in"),
        ({"kind": "cosine", "start": 1.0, "end": 0.1}, r"fields \['start', 'end', 'T'\]; missing \['T'\]"),
        ({"kind": "constant", "value": 1.0, "T": 3}, r"unexpected \['T'\]"),
        ({"kind": "cosine", "start": 1.0, "end": 0.1, "T": -1}, "T .* must be > 0"),
        ({"kind": "exponential", "start": 0.0, "end": 0.1, "T": 1}, "start > 0"),
    ],
)
def test_bad_schedule_data_is_named(data, match):
    with pytest.raises(ValueError, match=match):
        schedule_from_dict(data)
    with pytest.raises(ValueError, match="beta: "):
        as_schedule(data, "beta")


def test_a_callable_has_no_data_form():
    with pytest.raises(
        TypeError, match=r"param group 0: beta .*cannot be saved: only numbers and meanfield\.drift\.schedules"
    ):
        schedule_to_data(lambda s: 0.1, "param group 0: beta")
    with pytest.raises(TypeError, match="must be a dict"):
        schedule_from_dict([("kind", "constant")])
