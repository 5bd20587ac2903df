"""Tests of :mod:`meanfield.optim.groups`."""

from __future__ import annotations

import math
import re

import pytest
import torch

from meanfield.drift.schedules import Linear
from meanfield.optim import Clip
from meanfield.optim import groups as G

F64 = torch.float64


def _group(**overrides):
    """A valid param group dict (as ``Langevin.__init__`` builds its defaults)."""
    group = {
        "lr": 0.1,
        "beta": 0.5,
        "drift": "sgd",
        "betas": None,
        "eps": None,
        "weight_decay": 0.0,
        "noise": True,
        "n_particles": 1,
        "mean_field_scaling": True,
        "noise_preconditioned": True,
        "projection": None,
        "temperature_convention": "mean_field",
        "noise_block": 0,
        "step": 0,
    }
    group.update(overrides)
    return group


BAD_GROUPS = [
    ({"lr": 0}, ValueError, "W: lr must be > 0, got 0.0"),
    ({"lr": "x"}, TypeError, "W: lr must be a real number, got str"),
    ({"beta": "x"}, TypeError, "W: beta must be a number or a schedule"),
    ({"beta": -0.1}, ValueError, "W: beta (the temperature) must be ≥ 0, got -0.1"),
    ({"drift": 3}, TypeError, "W: drift must be a string, one of ('sgd', 'adam'), got int"),
    ({"drift": "rms"}, ValueError, "W: drift must be one of ('sgd', 'adam'), got 'rms'"),
    ({"betas": (0.1,)}, TypeError, "W: betas must be None or a pair (β1, β2), got (0.1,)"),
    ({"betas": 0.1}, TypeError, "W: betas must be None or a pair (β1, β2), got 0.1"),
    ({"betas": (0.1, 0.2, 0.3)}, TypeError, "W: betas must be None or a pair (β1, β2), got (0.1, 0.2, 0.3)"),
    ({"betas": (-0.1, 0.5)}, ValueError, "W: betas β1 must be ≥ 0, got -0.1"),
    ({"betas": (0.5, 1.0)}, ValueError, "W: betas β2 must be in [0, 1), got 1.0"),
    ({"betas": (1, 0.5)}, ValueError, "W: betas β1 must be in [0, 1), got 1.0"),
    ({"eps": 0.0}, ValueError, "W: eps must be > 0, got 0.0"),
    (
        {"temperature_convention": "x"},
        ValueError,
        "W: temperature_convention must be one of ('mean_field', 'loss'), got 'x'",
    ),
    ({"weight_decay": -1}, ValueError, "W: weight_decay must be ≥ 0, got -1.0"),
    ({"noise": 1}, TypeError, "W: noise must be a bool, got int"),
    ({"mean_field_scaling": None}, TypeError, "W: mean_field_scaling must be a bool, got NoneType"),
    ({"noise_preconditioned": "y"}, TypeError, "W: noise_preconditioned must be a bool, got str"),
    ({"n_particles": 0}, ValueError, "W: n_particles must be ≥ 1, got 0"),
    ({"n_particles": 2.0}, TypeError, "W: n_particles must be an int, got float"),
    ({"noise_block": -1}, ValueError, "W: noise_block must be ≥ 0, got -1"),
    (
        {"projection": 3},
        TypeError,
        "W: projection must be None or a Projection (Clip, Sphere, LayerProjection), got int",
    ),
    ({"step": -1}, ValueError, "W: step (the group's step count) must be an int ≥ 0, got -1"),
    ({"step": True}, ValueError, "W: step (the group's step count) must be an int ≥ 0, got True"),
    ({"step": 1.0}, ValueError, "W: step (the group's step count) must be an int ≥ 0, got 1.0"),
]


@pytest.mark.parametrize("M, scaling, want", [(5, True, 5.0), (5, False, 1.0), (1, True, 1.0)])
def test_scale_is_M_only_with_the_mean_field_scaling(M, scaling, want):
    """``scale`` is ``float(M)`` with the scaling, 1.0 without (a float, not the int)."""
    value = G.scale(_group(n_particles=M, mean_field_scaling=scaling))
    assert value == want and isinstance(value, float)


@pytest.mark.parametrize(
    "noise, drift, pre, want",
    [
        (True, "adam", False, True),
        (False, "adam", False, False),
        (True, "sgd", False, False),
        (True, "adam", True, False),
    ],
)
def test_not_gibbs_is_noise_and_adam_and_unpreconditioned(noise, drift, pre, want):
    """``not_gibbs`` is true exactly for a noisy Adam group with ``noise_preconditioned=False``."""
    assert bool(G.not_gibbs(_group(noise=noise, drift=drift, noise_preconditioned=pre))) is want


@pytest.mark.parametrize(
    "noise, drift, beta1, want",
    [
        (True, "adam", 0.5, True),
        (False, "adam", 0.5, False),
        (True, "sgd", 0.5, False),
        (True, "adam", 0.0, False),
    ],
)
def test_momentum_with_noise_is_noise_and_adam_and_positive_beta1(noise, drift, beta1, want):
    """``momentum_with_noise`` is true exactly for a noisy Adam group with ``β1 > 0``."""
    assert bool(G.momentum_with_noise(_group(noise=noise, drift=drift, betas=(beta1, 0.9)))) is want


def test_normalise_turns_data_into_objects_and_prefixes_errors():
    """Dicts become a schedule / a projection equal to the ones they describe; other values are untouched; a bad
    dict raises a ValueError prefixed by ``where`` and the option's name."""
    group = {"beta": Linear(1.0, 0.5, T=4).to_dict(), "projection": {"kind": "clip", "A": 2.0}}
    G.normalise(group, "W")
    assert group["beta"] == Linear(1.0, 0.5, T=4) and group["beta"](2) == pytest.approx(0.75, abs=1e-15)
    assert isinstance(group["projection"], Clip) and group["projection"].A == 2.0
    plain = {"beta": 0.3, "projection": None}
    G.normalise(plain, "W")
    assert plain == {"beta": 0.3, "projection": None}
    G.normalise({}, "W")  # no keys: nothing to do
    with pytest.raises(ValueError, match=r"^W: beta: "):
        G.normalise({"beta": {"kind": "nope"}}, "W")
    with pytest.raises(ValueError, match=r"^W: projection: "):
        G.normalise({"projection": {"kind": "nope"}}, "W")


@pytest.mark.parametrize("bad, error, message", BAD_GROUPS, ids=[f"bad{i}" for i in range(len(BAD_GROUPS))])
def test_check_group_names_the_bad_option_exactly(bad, error, message):
    """Each bad option raises its error type with the exact message, prefixed by ``where``."""
    with pytest.raises(error, match="^" + re.escape(message)):
        G.check_group(_group(**bad), "W")


def test_check_group_accepts_the_boundaries_and_converts_numbers():
    """Boundary values pass (β = 0, betas = (0, 0), λ = 0, noise_block = 0, a callable β, step 0); ``lr`` and
    ``weight_decay`` become floats."""
    group = _group(lr=1, beta=0, betas=[0, 0], weight_decay=2, noise_block=0, step=0)
    G.check_group(group, "W")
    assert group["lr"] == 1.0 and isinstance(group["lr"], float)
    assert group["weight_decay"] == 2.0 and isinstance(group["weight_decay"], float)
    G.check_group(_group(beta=lambda k: -1.0), "W")  # a callable is checked when evaluated, not here
    G.check_group(_group(eps=1e-300, betas=(0.999, 0.999), noise_block=3, step=7), "W")


def test_check_floating_refuses_integer_parameters():
    """An integer parameter raises ``W: parameters must be floating-point tensors, got dtype torch.int64``."""
    G.check_floating({"params": [torch.zeros(2), torch.zeros(2, dtype=F64)]}, "W")
    with pytest.raises(
        TypeError, match=r"^W: parameters must be floating-point tensors, got dtype torch\.int64$"
    ):
        G.check_floating({"params": [torch.zeros(2), torch.zeros(2, dtype=torch.long)]}, "W")


def test_position_finds_the_group_and_parameter_by_identity():
    """``position`` is ``(group index, parameter index)`` by identity (equal tensors are not confused)."""
    a, b, c = torch.zeros(2), torch.zeros(2), torch.zeros(2)
    groups = [{"params": [a]}, {"params": [b, c]}]
    assert G.position(groups, groups[1], c) == (1, 1)
    assert G.position(groups, groups[1], b) == (1, 0)
    assert G.position(groups, groups[0], a) == (0, 0)


def test_beta_value_evaluates_the_schedule_at_the_groups_step():
    """A constant gives itself (as a float), a schedule its value at ``group["step"]``."""
    assert G.beta_value(_group(beta=2, step=9), 0) == 2.0
    group = _group(beta=Linear(1.0, 0.0, T=10), step=3)
    assert G.beta_value(group, 0) == pytest.approx(0.7, abs=1e-15)
    assert G.beta_value(_group(beta=lambda k: 0.0, step=3), 0) == 0.0  # zero is allowed


@pytest.mark.parametrize(
    "value, error, message",
    [
        ("x", TypeError, "param group 2: the β schedule returned 'x' at step 4; it must return a number"),
        (None, TypeError, "param group 2: the β schedule returned None at step 4; it must return a number"),
        (
            -0.5,
            ValueError,
            "param group 2: the temperature β_t must be a finite number ≥ 0, but the β schedule returned -0.5 at step 4",
        ),
        (
            math.nan,
            ValueError,
            "param group 2: the temperature β_t must be a finite number ≥ 0, but the β schedule returned nan at step 4",
        ),
        (
            math.inf,
            ValueError,
            "param group 2: the temperature β_t must be a finite number ≥ 0, but the β schedule returned inf at step 4",
        ),
    ],
    ids=["str", "none", "negative", "nan", "inf"],
)
def test_beta_value_refuses_a_bad_schedule_value(value, error, message):
    """A schedule value that is not a number, or negative, or not finite, raises with the group and step."""
    with pytest.raises(error, match="^" + re.escape(message) + "$"):
        G.beta_value(_group(beta=lambda k: value, step=4), 2)


def test_beta_at_refuses_an_overflowing_noise_variance():
    """``2·β·lr`` overflowing raises with both numbers and the step (also where ``β·lr`` alone is finite); well below
    the overflow passes."""
    assert G.beta_at(_group(beta=1e300, lr=1e7, step=5), 1) == 1e300
    with pytest.raises(
        ValueError, match=r"^param group 0: the noise variance 2·beta·lr = 2·1e\+300·1\.5e\+08 overflows"
    ):
        G.beta_at(_group(beta=1e300, lr=1.5e8, step=0), 0)  # β·lr = 1.5e308 is finite, 2·β·lr is not
    with pytest.raises(
        ValueError,
        match=r"^param group 1: the noise variance 2·beta·lr = 2·1e\+300·1e\+10 overflows at step 5; lower beta or lr$",
    ):
        G.beta_at(_group(beta=1e300, lr=1e10, step=5), 1)
    # the "loss" convention's noise is 2·M·β_s·lr: M = 8 overflows where β_s alone would not; control: M = 1
    loss = dict(beta=5e307, lr=1.0, n_particles=8, temperature_convention="loss")
    with pytest.raises(ValueError, match=r"^param group 0: the noise variance 2·M·beta·lr = 2·8·5e\+307·1 overflows"):
        G.beta_at(_group(**loss), 0)
    assert G.beta_at(_group(**{**loss, "beta": 5e306}), 0) == 5e306
    assert G.beta_at(_group(**{**loss, "mean_field_scaling": False}), 0) == 5e307  # the factor is 1 then


def test_noise_beta_is_the_loss_conventions_beta_times_the_gradients_factor():
    """The noise's temperature: β itself in the mean-field convention; s·β_s for "loss", s = M with the scaling
    and 1 without (M = 8)."""
    cases = [("mean_field", True, 0.5), ("mean_field", False, 0.5), ("loss", True, 4.0), ("loss", False, 0.5)]
    for convention, scaled, want in cases:
        group = _group(n_particles=8, mean_field_scaling=scaled, temperature_convention=convention)
        assert G.noise_beta(group, 0.5) == want


def test_mean_field_beta_is_the_temperature_of_the_law_the_group_samples():
    """β of exp(−M·L/β): β_t with the scaling in the mean-field convention, M·β_t for "loss" (noise M·β_t, gradient
    factor M) and without the scaling (noise β_t, factor 1); M = 8, β_t = 0.5. A layer's own M overrides the
    group's (a group built by hand with n_particles = 1 holding an 8-particle layer: β = 8·0.5, not 0.5)."""
    cases = [("mean_field", True, 0.5), ("mean_field", False, 4.0), ("loss", True, 4.0), ("loss", False, 4.0)]
    for convention, scaled, want in cases:
        group = _group(n_particles=8, mean_field_scaling=scaled, temperature_convention=convention)
        assert G.mean_field_beta(group, 0.5) == want
    by_hand = _group(n_particles=1, mean_field_scaling=True, temperature_convention="mean_field")
    assert G.mean_field_beta(by_hand, 0.5) == 0.5
    assert G.mean_field_beta(by_hand, 0.5, n_particles=8) == 4.0
