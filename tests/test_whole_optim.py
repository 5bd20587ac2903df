"""Whole-behaviour tests of :class:`meanfield.optim.Langevin`, its group options, its gradient check and the particle
layer base class (:mod:`meanfield.optim.langevin`, :mod:`meanfield.optim.groups`, :mod:`meanfield.optim.gradients`,
:mod:`meanfield.nn.particles`).

Every value is checked against an independent answer: several steps of SGD or Adam written out by hand in torch
from the documented update (``θ − η_eff·g + sqrt(2·β_t·η_eff)·ξ``), with the normals ``ξ`` replayed from a generator
seeded as the optimizer's; numpy forwards, importances, distances and greedy selections of a small linear particle
layer defined here; and the exact wording of every error. Nothing is statistical: comparisons are exact up to
float64 rounding (``TOL``), and the hand steps have negative controls (a wrong convention must be rejected).
"""

from __future__ import annotations

import math
import os
import re
import warnings

import numpy as np
import pytest
import torch
from torch import nn

from meanfield.drift.schedules import Linear
from meanfield.nn.particles import (
    SUBSAMPLE_STRATEGIES,
    FarthestPoint,
    Importance,
    Medoids,
    ParticleLayer,
    Random,
    SubsampleStrategy,
    _farthest_points,
    _squared_distances,
    _strategy,
    check_float_dtype,
    check_input_matches,
)
from meanfield.optim import Clip, Langevin
from meanfield.optim import groups as G
from meanfield.optim.conventions import NOISY_BETAS, NOISY_EPS, PLAIN_BETAS, PLAIN_EPS

# mutmut's trampolines add frames: a warning's stack level moves under it
UNDER_MUTMUT = "MUTANT_UNDER_TEST" in os.environ

F64 = torch.float64
TOL = 1e-12  # float64 rounding of a few steps on numbers of order one


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _param(shape, seed: int) -> nn.Parameter:
    return nn.Parameter(torch.randn(shape, dtype=F64, generator=_gen(seed)))


def _grad(shape, seed: int) -> torch.Tensor:
    return torch.randn(shape, dtype=F64, generator=_gen(1000 + seed))


def _diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max())


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


# ======================================================================================================
# groups


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


@pytest.mark.parametrize(
    "noise, betas, eps", [(True, NOISY_BETAS, NOISY_EPS), (False, PLAIN_BETAS, PLAIN_EPS)]
)
def test_resolve_defaults_fills_only_unset_betas_and_eps(noise, betas, eps):
    """Unset ``betas``/``eps`` take the noisy or plain defaults (``(0, 0.999)``, 1 / ``(0.9, 0.999)``, 1e-8); set
    values are kept."""
    assert (
        NOISY_BETAS == (0.0, 0.999) and PLAIN_BETAS == (0.9, 0.999) and NOISY_EPS == 1.0 and PLAIN_EPS == 1e-8
    )
    group = _group(noise=noise)
    G.resolve_defaults(group)
    assert group["betas"] == betas and group["eps"] == eps
    kept = _group(noise=noise, betas=(0.3, 0.4), eps=0.25)
    G.resolve_defaults(kept)
    assert kept["betas"] == (0.3, 0.4) and kept["eps"] == 0.25


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


# ======================================================================================================
# gradients (through Langevin.step, which builds the buckets)


def test_non_finite_entries_are_counted_and_located():
    """A gradient with 2 NaN and 1 Inf entries in parameter 1 of group 1 raises naming them; nothing changes."""
    a, b, c = _param((3,), 0), _param((2, 2), 1), _param((2, 3), 2)
    opt = Langevin([{"params": [a]}, {"params": [b, c]}], lr=0.1, beta=0.1, seed=0)
    before = [p.detach().clone() for p in (a, b, c)]
    a.grad, b.grad = torch.ones(3, dtype=F64), torch.ones(2, 2, dtype=F64)
    c.grad = torch.tensor([[math.nan, 1.0, math.inf], [math.nan, 0.0, 1.0]], dtype=F64)
    message = (
        "the gradient of parameter 1 (shape (2, 3)) of param group 1 has 3 non-finite entries (NaN or Inf); "
        "Langevin needs finite gradients (check the loss, lower lr, or clip the gradients). No parameter was changed."
    )
    with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
        opt.step()
    assert all(torch.equal(p.detach(), q) for p, q in zip((a, b, c), before))
    assert opt.param_groups[0]["step"] == 0 and opt.last_stats is None


def test_an_overflowing_step_is_refused_with_lr_and_norm():
    """``lr·M·‖g‖`` overflowing for SGD raises naming lr and ‖g‖ (= 5 for g = (3, 4)); the same gradient with
    ``lr·‖g‖`` finite but M making it overflow raises too; Adam (no ×M in the bound) takes the step."""
    p = nn.Parameter(torch.zeros(2, dtype=F64))
    opt = Langevin([p], lr=1e308, beta=0.0, seed=0)
    p.grad = torch.tensor([3.0, 4.0], dtype=F64)
    message = (
        "param group 0: the step lr·‖g‖ = 1e+308·5 of parameter 0 (shape (2,)) overflows; lower lr (the parameters "
        "have diverged, or lr is far too large). No parameter was changed."
    )
    with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
        opt.step()
    q = nn.Parameter(torch.zeros(2, dtype=F64))
    opt = Langevin([q], lr=1e300, beta=0.0, n_particles=10**10, seed=0)
    q.grad = torch.tensor([3.0, 4.0], dtype=F64)
    with pytest.raises(ValueError, match=r"^param group 0: the step lr·‖g‖ = 1e\+300·5 of parameter 0"):
        opt.step()
    assert torch.equal(q.detach(), torch.zeros(2, dtype=F64))
    opt = Langevin([q], lr=1e300, beta=0.0, n_particles=10**10, drift="adam", seed=0)
    q.grad = torch.tensor([3.0, 4.0], dtype=F64)
    opt.step()
    assert bool(torch.isfinite(q).all())


def test_a_float32_gradient_whose_norm_overflows_is_recomputed_and_stepped():
    """Entries 2e38 (finite float32, norm overflows float32) are not an error: the step is θ − lr·g."""
    p = nn.Parameter(torch.zeros(2))
    opt = Langevin([p], lr=1e-38, beta=0.0, seed=0)
    p.grad = torch.full((2,), 2e38)
    opt.step()
    assert torch.allclose(p.detach(), torch.full((2,), -2.0), rtol=1e-6, atol=0)


# ======================================================================================================
# Langevin: constructor and groups


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        ({"generator": 3}, TypeError, "generator must be a torch.Generator or None, got int"),
        ({"seed": -1}, ValueError, "seed must be ≥ 0, got -1"),
        ({"seed": 1.0}, TypeError, "seed must be an int, got float"),
        (
            {"seed": 2**63},
            ValueError,
            "seed must be < 2**63 (a torch.Generator seed is a 64-bit integer), got 9223372036854775808",
        ),
        ({"seed": 1, "generator": torch.Generator()}, ValueError, "pass either generator or seed, not both"),
        ({"lr": -1.0}, ValueError, "Langevin: lr must be > 0, got -1.0"),
        ({"drift": "x"}, ValueError, "Langevin: drift must be one of ('sgd', 'adam'), got 'x'"),
        ({"beta": {"kind": "nope"}}, ValueError, "Langevin: beta: "),
    ],
    ids=["generator", "seed-neg", "seed-float", "seed-big", "both", "lr", "drift", "beta-data"],
)
def test_constructor_errors_are_worded_exactly(kwargs, error, message):
    """Each bad constructor argument raises its exact message (group options prefixed ``Langevin:``)."""
    options = {"lr": 0.1, "beta": 0.1}
    options.update(kwargs)
    with pytest.raises(error, match="^" + re.escape(message)):
        Langevin([nn.Parameter(torch.zeros(2))], **options)


def test_largest_seed_and_a_drawn_seed():
    """``seed = 2**63 − 1`` is accepted; without seed or generator the seed is ``randint(0, 2**62)`` from torch's
    global generator, and the noise is drawn from ``manual_seed(seed)``."""
    Langevin([nn.Parameter(torch.zeros(2))], lr=0.1, beta=0.1, seed=2**63 - 1)
    torch.manual_seed(77)
    want = int(torch.randint(0, 2**62, (1,)))
    torch.manual_seed(77)
    p = nn.Parameter(torch.zeros(4, dtype=F64))
    opt = Langevin([p], lr=0.5, beta=0.25)
    assert opt.state_dict()["seed"] == want
    p.grad = torch.zeros(4, dtype=F64)
    opt.step()
    xi = torch.empty(4, dtype=F64).normal_(generator=_gen(want))
    assert _diff(p.detach(), math.sqrt(2 * 0.25 * 0.5) * xi) < TOL


def test_add_param_group_checks_resolves_and_removes_a_refused_group():
    """An added group is checked (its error names ``param group 1``, and the group is removed again), gets the
    defaults of a plain group, and an integer parameter or a data projection is handled."""
    opt = Langevin([nn.Parameter(torch.zeros(2))], lr=0.1, beta=0.1, seed=0)
    with pytest.raises(ValueError, match=r"^param group 1: lr must be > 0, got -2\.0$"):
        opt.add_param_group({"params": [nn.Parameter(torch.zeros(2))], "lr": -2.0})
    assert len(opt.param_groups) == 1
    with pytest.raises(
        TypeError, match=r"^param group 1: parameters must be floating-point tensors, got dtype torch\.int64$"
    ):
        opt.add_param_group({"params": [torch.zeros(2, dtype=torch.long)]})
    assert len(opt.param_groups) == 1
    with pytest.raises(ValueError, match=r"^param group 1: projection: "):
        opt.add_param_group({"params": [nn.Parameter(torch.zeros(2))], "projection": {"kind": "nope"}})
    assert len(opt.param_groups) == 1
    opt.add_param_group(
        {"params": [nn.Parameter(torch.zeros(2))], "noise": False, "projection": {"kind": "clip", "A": 1.5}}
    )
    g = opt.param_groups[1]
    assert g["betas"] == PLAIN_BETAS and g["eps"] == PLAIN_EPS and g["step"] == 0
    assert isinstance(g["projection"], Clip) and g["projection"].A == 1.5
    assert opt.param_groups[0]["betas"] == NOISY_BETAS and opt.param_groups[0]["eps"] == NOISY_EPS


def test_warnings_are_given_once_each():
    """An unpreconditioned Adam group warns ("no longer targets the Gibbs law") and a β1 > 0 noisy group warns
    ("momentum β1 > 0") once each, at construction or when added; plain or SGD groups do not warn."""
    p = [nn.Parameter(torch.zeros(2)) for _ in range(4)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        opt = Langevin([p[0]], lr=0.1, beta=0.1, seed=0, drift="adam", betas=(0.5, 0.9))
        opt.add_param_group({"params": [p[1]], "betas": (0.3, 0.9)})
        opt.add_param_group({"params": [p[2]], "noise_preconditioned": False})
        opt.add_param_group({"params": [p[3]], "noise_preconditioned": False, "noise": False})
    texts = [str(w.message) for w in caught]
    assert len(texts) == 2
    assert texts[0].startswith("Langevin: a group with noise has an Adam drift with momentum β1 > 0")
    assert texts[1].startswith("Langevin: an Adam drift with noise_preconditioned=False")
    assert UNDER_MUTMUT or all(w.filename == __file__ for w in caught)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Langevin(
            [nn.Parameter(torch.zeros(2))],
            lr=0.1,
            beta=0.1,
            drift="adam",
            betas=(0.5, 0.9),
            noise=False,
            seed=0,
        )
        Langevin(
            [nn.Parameter(torch.zeros(2))],
            lr=0.1,
            beta=0.1,
            betas=(0.5, 0.9),
            noise_preconditioned=False,
            seed=0,
        )


# ======================================================================================================
# Langevin: steps against hand-written SGD / Adam with the noise replayed


def _hand_sgd(theta, grad, *, lr, beta, M, wd, xi, clip=None):
    new = theta - lr * (M * grad + wd * theta) + math.sqrt(2 * beta * lr) * xi
    return new.clamp(-clip, clip) if clip is not None else new


def test_three_sgd_steps_with_two_groups_a_schedule_and_a_clip_are_the_hand_steps():
    """Group 0: SGD, M = 3, λ = 0.2, β = Linear(0.4 → 0.1, T = 2), Clip(1.2); group 1: M = 2 without the scaling,
    β = 0.05 in the "loss" convention (noise uses scale·β_s = 1·0.05: the ×M of that convention is the
    group's scale, off here). Each step's noise is ONE draw of 6 + 4 normals
    from the continuing generator ``manual_seed(5)``, group 0 first. Matches the hand steps to 1e-12; the recorded
    statistics (step, β the largest, η_eff, RMS of the noise and drift increments) and the groups' step counts
    match too. Negative controls: the noise of the groups in the other order, and β_s multiplied by M = 2 although the
    scaling is off, are off by > 1e-3."""
    a, b = _param((3, 2), 0), _param((2, 2), 1)
    opt = Langevin(
        [
            {
                "params": [a],
                "n_particles": 3,
                "weight_decay": 0.2,
                "beta": Linear(0.4, 0.1, T=2),
                "projection": Clip(1.2),
            },
            {
                "params": [b],
                "n_particles": 2,
                "mean_field_scaling": False,
                "beta": 0.05,
                "temperature_convention": "loss",
                "lr": 0.03,
            },
        ],
        lr=0.02,
        beta=1.0,
        seed=5,
    )
    ta, tb = a.detach().clone(), b.detach().clone()
    ref = _gen(5)
    swapped = None
    for t in range(3):
        ga, gb = _grad((3, 2), t), _grad((2, 2), 10 + t)
        a.grad, b.grad = ga.clone(), gb.clone()
        opt.step()
        xi = torch.empty(10, dtype=F64).normal_(generator=ref)
        beta_t = 0.4 + (0.1 - 0.4) * min(t, 2) / 2
        drift_a = 0.02 * (3 * ga + 0.2 * ta)
        na = math.sqrt(2 * beta_t * 0.02) * xi[:6].view(3, 2)
        nb = math.sqrt(2 * 0.05 * 0.03) * xi[6:].view(2, 2)
        if t == 0:
            swapped = (tb - 0.03 * gb + math.sqrt(2 * 0.05 * 0.03) * xi[:4].view(2, 2)).clone()
        ta = (ta - drift_a + na).clamp(-1.2, 1.2)
        tb = tb - 0.03 * gb + nb
        assert _diff(a.detach(), ta) < TOL and _diff(b.detach(), tb) < TOL
        if t == 0:
            assert _diff(b.detach(), swapped) > 1e-3
            assert _diff(b.detach(), tb - nb + math.sqrt(2) * nb) > 1e-3
        stats = opt.last_stats
        assert stats.step == t + 1 and stats.n == 10
        assert stats.beta == pytest.approx(max(beta_t, 0.05), abs=1e-15)
        assert stats.eta_eff_min == 0.02 and stats.eta_eff_max == 0.03
        noise_sq = float(na.square().sum() + nb.square().sum())
        drift_sq = float(drift_a.square().sum() + (0.03 * gb).square().sum())
        assert stats.noise_rms == pytest.approx(math.sqrt(noise_sq / 10), rel=1e-12)
        assert stats.drift_rms == pytest.approx(math.sqrt(drift_sq / 10), rel=1e-12)
        assert stats.drift_to_noise == pytest.approx(math.sqrt(drift_sq / noise_sq), rel=1e-12)
        group_stats = opt.last_group_stats
        assert group_stats[0].beta == pytest.approx(beta_t, abs=1e-15) and group_stats[1].beta == 0.05
        assert group_stats[0].n == 6 and group_stats[1].n == 4
    assert [g["step"] for g in opt.param_groups] == [3, 3]


def _hand_adam(theta, grads, *, lr, betas, eps, M, wd, beta, xis, preconditioned):
    """``len(grads)`` Adam-Langevin steps written out: moments of ``M g + λθ``, bias corrections by step."""
    b1, b2 = betas
    m = torch.zeros_like(theta)
    v = torch.zeros_like(theta)
    for t, (g, xi) in enumerate(zip(grads, xis), start=1):
        d = M * g + wd * theta
        m = b1 * m + (1 - b1) * d
        v = b2 * v + (1 - b2) * d * d
        m_hat = m / (1 - b1**t)
        v_hat = v / (1 - b2**t)
        eta = lr / (v_hat.sqrt() + eps)
        amp = (2 * beta * eta).sqrt() if preconditioned else math.sqrt(2 * beta * lr)
        theta = theta - eta * m_hat + amp * xi
    return theta


@pytest.mark.parametrize(
    "betas, eps, preconditioned",
    [(None, None, True), ((0.5, 0.9), 0.1, True), (None, 0.3, False)],
    ids=["defaults", "momentum", "unpreconditioned"],
)
def test_three_adam_steps_are_the_hand_adam_langevin_steps(betas, eps, preconditioned):
    """Adam drift, M = 4, λ = 0.3, β = 0.2: three steps equal the hand Adam (moments of ``M g + λθ``, bias
    corrections, ``η_eff = lr/(sqrt(v̂) + ε)``) plus ``sqrt(2β η_eff)ξ`` (or ``sqrt(2β lr)ξ`` unpreconditioned) with
    ξ replayed; ``None`` betas/eps are ``(0, 0.999)`` and 1. ``last_stats.eta_eff_*`` are those of the last step.
    Negative control: the hand step with the plain defaults ``(0.9, 0.999)``, 1e-8 is off by > 1e-3."""
    p = _param((3, 2), 3)
    theta0 = p.detach().clone()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        opt = Langevin(
            [p],
            lr=0.05,
            beta=0.2,
            drift="adam",
            betas=betas,
            eps=eps,
            n_particles=4,
            weight_decay=0.3,
            noise_preconditioned=preconditioned,
            seed=9,
        )
    ref = _gen(9)
    grads, xis = [], []
    for t in range(3):
        g = _grad((3, 2), 20 + t)
        # gradients are taken as given, but the weight decay uses the current θ: replay needs the iterate
        grads.append(g)
        p.grad = g.clone()
        opt.step()
        xis.append(torch.empty(3, 2, dtype=F64).normal_(generator=ref))
    use_betas = NOISY_BETAS if betas is None else betas
    use_eps = NOISY_EPS if eps is None else eps
    want = _hand_adam(
        theta0,
        grads,
        lr=0.05,
        betas=use_betas,
        eps=use_eps,
        M=4,
        wd=0.3,
        beta=0.2,
        xis=xis,
        preconditioned=preconditioned,
    )
    assert _diff(p.detach(), want) < TOL
    wrong = _hand_adam(
        theta0,
        grads,
        lr=0.05,
        betas=PLAIN_BETAS,
        eps=PLAIN_EPS,
        M=4,
        wd=0.3,
        beta=0.2,
        xis=xis,
        preconditioned=preconditioned,
    )
    assert _diff(p.detach(), wrong) > 1e-3
    # the last step's η_eff from the hand moments
    b1, b2 = use_betas
    theta, v = theta0, torch.zeros_like(theta0)
    m = torch.zeros_like(theta0)
    for t, (g, xi) in enumerate(zip(grads, xis), start=1):
        d = 4 * g + 0.3 * theta
        m = b1 * m + (1 - b1) * d
        v = b2 * v + (1 - b2) * d * d
        eta = 0.05 / ((v / (1 - b2**t)).sqrt() + use_eps)
        amp = (2 * 0.2 * eta).sqrt() if preconditioned else math.sqrt(2 * 0.2 * 0.05)
        theta = theta - eta * m / (1 - b1**t) + amp * xi
    stats = opt.last_stats
    assert stats.eta_eff_mean == pytest.approx(float(eta.mean()), rel=1e-12)
    assert stats.eta_eff_min == pytest.approx(float(eta.min()), rel=1e-12)
    assert stats.eta_eff_max == pytest.approx(float(eta.max()), rel=1e-12)


def test_zero_temperature_draws_no_noise_and_a_group_without_gradients_does_not_step():
    """A schedule with β(0) = 0 draws nothing at step 0 (step 1 then uses the generator's FIRST normals); a group
    whose parameters have no gradient keeps its step count 0 and has ``None`` group stats; the closure's loss is
    returned, computed with gradients enabled."""
    p, q = _param((4,), 0), _param((2,), 1)
    opt = Langevin([{"params": [p]}, {"params": [q]}], lr=0.1, beta=lambda k: 0.0 if k == 0 else 0.3, seed=4)
    theta, q0 = p.detach().clone(), q.detach().clone()

    def closure():
        p.grad = None
        loss = 0.5 * (p**2).sum()
        loss.backward()
        return loss

    loss = opt.step(closure)
    assert loss.requires_grad and float(loss.detach()) == pytest.approx(
        0.5 * float((theta**2).sum()), rel=1e-14
    )
    theta = theta - 0.1 * theta
    assert _diff(p.detach(), theta) < TOL and torch.equal(q.detach(), q0)
    assert [g["step"] for g in opt.param_groups] == [1, 0]
    assert opt.last_group_stats[1] is None and opt.last_group_stats[0].noise_rms == 0.0
    assert opt.last_stats.beta == 0.0
    assert opt.step(closure) is not None
    xi = torch.empty(4, dtype=F64).normal_(generator=_gen(4))
    theta = theta - 0.1 * theta + math.sqrt(2 * 0.3 * 0.1) * xi
    assert _diff(p.detach(), theta) < TOL
    assert opt.step() is None


def test_stats_before_any_step_and_for_groups_added_since():
    """Before a step ``last_stats`` is None and ``last_group_stats`` is ``[None]`` per group; a group added after a
    step gets a trailing ``None``."""
    p = _param((2,), 0)
    opt = Langevin([p], lr=0.1, beta=0.1, seed=0)
    assert opt.last_stats is None and opt.last_group_stats == [None]
    p.grad = torch.ones(2, dtype=F64)
    opt.step()
    opt.add_param_group({"params": [_param((2,), 1)]})
    stats = opt.last_group_stats
    assert len(stats) == 2 and stats[1] is None and stats[0].n == 2
    assert opt.last_stats is opt.last_stats  # cached


def test_sparse_gradients_are_refused_by_group():
    """A sparse gradient raises ``param group 1: Langevin does not support sparse gradients``."""
    p, q = _param((3,), 0), _param((3,), 1)
    opt = Langevin([{"params": [p]}, {"params": [q]}], lr=0.1, beta=0.1, seed=0)
    p.grad = torch.ones(3, dtype=F64)
    q.grad = torch.ones(3, dtype=F64).to_sparse()
    with pytest.raises(ValueError, match=r"^param group 1: Langevin does not support sparse gradients$"):
        opt.step()


# ======================================================================================================
# Langevin: checkpoints


def _run(opt, params, steps, offset):
    for t in range(steps):
        for k, p in enumerate(params):
            p.grad = _grad(p.shape, offset + 10 * t + k)
        opt.step()


def test_state_dict_loaded_into_a_used_optimizer_continues_the_saver_exactly():
    """Optimizer A (Adam + SGD groups, schedule, clip) runs 3 steps and is saved; B (another seed) runs 2 steps on a
    copy, then loads A's state: from there both take 2 identical-gradient steps and end bit-identical. The state is
    plain data (β schedule as its dict, the clip as its dict, seed, n_steps); B keeps its own schedule object."""

    def build(seed, params):
        return Langevin(
            [
                {
                    "params": [params[0]],
                    "drift": "adam",
                    "beta": Linear(0.3, 0.1, T=4),
                    "projection": Clip(2.0),
                },
                {"params": [params[1]], "n_particles": 3},
            ],
            lr=0.05,
            beta=0.2,
            seed=seed,
        )

    pa = [_param((3, 2), 0), _param((4,), 1)]
    A = build(11, pa)
    _run(A, pa, 3, 0)
    state = A.state_dict()
    assert state["seed"] == 11 and state["n_steps"] == 3
    assert state["param_groups"][0]["beta"] == Linear(0.3, 0.1, T=4).to_dict()
    assert state["param_groups"][0]["projection"] == {"kind": "clip", "A": 2.0}
    assert state["param_groups"][1]["beta"] == 0.2 and state["param_groups"][1]["projection"] is None
    assert list(state["generators"]) == ["cpu"]
    pb = [nn.Parameter(_param((3, 2), 5)), nn.Parameter(_param((4,), 6))]
    B = build(99, pb)
    schedule = B.param_groups[0]["beta"]
    _run(B, pb, 2, 500)
    for x, y in zip(pb, pa):
        x.data.copy_(y.data)
    B.load_state_dict(state)
    assert B.param_groups[0]["beta"] is schedule
    assert isinstance(B.param_groups[0]["projection"], Clip)
    assert [g["step"] for g in B.param_groups] == [3, 3]
    assert B.state_dict()["seed"] == 11 and B.state_dict()["n_steps"] == 3
    _run(A, pa, 2, 100)
    _run(B, pb, 2, 100)
    assert all(torch.equal(x.detach(), y.detach()) for x, y in zip(pa, pb))
    assert B.last_stats.step == 5 and A.last_stats.step == 5


def test_a_lambda_schedule_cannot_be_saved():
    """``state_dict`` of a group whose β is a lambda raises a TypeError naming the group's schedule."""
    opt = Langevin([_param((2,), 0)], lr=0.1, beta=lambda k: 0.1, seed=0)
    with pytest.raises(TypeError, match=r"^the β schedule of param group 0 is <function "):
        opt.state_dict()


# ======================================================================================================
# particles: a small linear particle layer, its numpy forward


class Lin(ParticleLayer):
    """``φ_i(X) = (X·w_i + c_i, c_i·ΣX)`` of shape (N, M, 2); ``forward = mean over particles``."""

    particle_parameter_names = ("w", "c")

    def __init__(self, w: torch.Tensor, c: torch.Tensor) -> None:
        super().__init__()
        self.w = nn.Parameter(w.clone())
        self.c = nn.Parameter(c.clone())
        self.extra = [1, 2]

    def particle_outputs(self, X):
        first = X @ self.w.T + self.c  # (N, M)
        second = self.c * X.sum(1, keepdim=True)  # (N, M)
        return torch.stack([first, second], 2)

    def forward(self, X):
        return self.particle_outputs(X).mean(1)


def _np_phi(X, w, c):
    X, w, c = (np.asarray(t.detach(), dtype=np.float64) for t in (X, w, c))
    first = X @ w.T + c
    second = c[None, :] * X.sum(1)[:, None]
    return np.stack([first, second], 2)


def _layer(M=5, d=3, seed=0):
    g = _gen(seed)
    return Lin(torch.randn(M, d, dtype=F64, generator=g), torch.randn(M, dtype=F64, generator=g))


def test_base_class_methods_that_subclasses_implement():
    """``ParticleLayer.particle_outputs`` and ``SubsampleStrategy.select`` raise NotImplementedError;
    ``n_particles`` is the leading axis of the first stacked parameter."""
    with pytest.raises(NotImplementedError):
        ParticleLayer().particle_outputs(torch.zeros(1))
    with pytest.raises(NotImplementedError):
        SubsampleStrategy().select(_layer(), 1)
    assert _layer(M=7).n_particles == 7


def test_check_float_dtype():
    """None and floating dtypes pass; an integer dtype or a string raise with its repr."""
    for ok in (None, torch.float16, torch.float32, F64):
        check_float_dtype(ok)
    with pytest.raises(
        TypeError,
        match=r"^dtype must be a floating-point torch\.dtype \(e\.g\. torch\.float32\) or None, got torch\.int64$",
    ):
        check_float_dtype(torch.int64)
    with pytest.raises(TypeError, match=r"got 'float32'$"):
        check_float_dtype("float32")


def test_check_input_matches_dtype_outside_autocast():
    """Another dtype raises naming the layer's and the input's dtype and device; under CPU autocast it passes."""
    weight = torch.zeros(2, dtype=F64)
    check_input_matches("X", torch.zeros(2, dtype=F64), weight)
    message = (
        "X must have the layer's dtype and device (torch.float64 on cpu), got torch.float32 on cpu; "
        "convert it with X.to(...) or the layer with .to(...)"
    )
    with pytest.raises(TypeError, match="^" + re.escape(message) + "$"):
        check_input_matches("X", torch.zeros(2), weight)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        check_input_matches("X", torch.zeros(2), weight)


def test_prune_copies_the_chosen_particles_and_everything_else():
    """``prune([3, 0, 3])`` gives a layer with those rows (repeats duplicate) as fresh parameters, keeping
    ``requires_grad``, a deep copy of other attributes, and the numpy forward of the kept particles."""
    layer = _layer()
    layer.c.requires_grad_(False)
    new = layer.prune([3, 0, 3])
    assert new.n_particles == 3 and isinstance(new, Lin)
    assert torch.equal(new.w.detach(), layer.w.detach()[[3, 0, 3]]) and torch.equal(
        new.c.detach(), layer.c.detach()[[3, 0, 3]]
    )
    assert new.w.requires_grad and not new.c.requires_grad
    assert new.w.data_ptr() != layer.w.data_ptr() and new.extra == [1, 2] and new.extra is not layer.extra
    with torch.no_grad():
        new.w.add_(1.0)
    assert not torch.equal(new.w.detach()[1], layer.w.detach()[0] + 0)  # a copy
    X = torch.randn(4, 3, dtype=F64, generator=_gen(1))
    new2 = layer.prune(torch.tensor([True, False, False, True, True]))
    want = _np_phi(X, layer.w, layer.c)[:, [0, 3, 4]].mean(1)
    assert np.max(np.abs(new2(X).detach().numpy() - want)) < TOL
    assert layer.n_particles == 5


BAD_INDICES = [
    ("abc", TypeError, "indices must be a sequence of ints or a 1-D integer/boolean tensor, got str"),
    ({1, 2}, TypeError, "indices must be a sequence of ints or a 1-D integer/boolean tensor, got set"),
    ([1, True], TypeError, "indices must be ints, got ['int', 'bool']"),
    ([1.0], TypeError, "indices must be ints, got ['float']"),
    (torch.tensor([True, False]), ValueError, "a boolean mask of particles must have shape (5,), got (2,)"),
    (torch.tensor([1.0]), TypeError, "indices must be integers or a boolean mask, got dtype torch.float32"),
    (torch.tensor([1j]), TypeError, "indices must be integers or a boolean mask, got dtype torch.complex64"),
    (torch.tensor([[1, 2]]), ValueError, "indices must be 1-D, got shape (1, 2)"),
    (torch.tensor(1), ValueError, "indices must be 1-D, got shape ()"),
    ([], ValueError, "indices must select at least one particle, got none"),
    (torch.zeros(5, dtype=torch.bool), ValueError, "indices must select at least one particle, got none"),
    ([-1, 2], ValueError, "indices must lie in [0, 5) (n_particles = 5), got min -1, max 2"),
    ([0, 5], ValueError, "indices must lie in [0, 5) (n_particles = 5), got min 0, max 5"),
]


@pytest.mark.parametrize(
    "indices, error, message", BAD_INDICES, ids=[f"bad{i}" for i in range(len(BAD_INDICES))]
)
def test_prune_refuses_bad_indices_exactly(indices, error, message):
    """Each bad ``indices`` raises its error with the exact message."""
    with pytest.raises(error, match="^" + re.escape(message) + "$"):
        _layer().prune(indices)


def test_prune_accepts_the_boundaries_and_tuples():
    """Indices 0 and M − 1, a tuple, and an int32 tensor are accepted."""
    layer = _layer()
    assert torch.equal(layer.prune((0, 4)).c.detach(), layer.c.detach()[[0, 4]])
    assert torch.equal(layer.prune(torch.tensor([4], dtype=torch.int32)).c.detach(), layer.c.detach()[[4]])


def test_select_checks_k_and_sorts():
    """``k`` must be an int in ``[1, M]`` (exact messages); the result is sorted; ``k = M`` keeps every particle."""
    layer = _layer()
    with pytest.raises(
        ValueError, match=r"^k must be ≤ n_particles = 5 \(a subsample of the particles\), got 6$"
    ):
        layer.select(6)
    with pytest.raises(ValueError, match=r"^k must be ≥ 1, got 0$"):
        layer.select(0)
    with pytest.raises(TypeError, match=r"^k must be an int, got float$"):
        layer.select(2.0)
    assert layer.select(5, generator=_gen(0)).tolist() == [0, 1, 2, 3, 4]
    chosen = layer.select(3, generator=_gen(3))
    assert chosen.tolist() == sorted(torch.randperm(5, generator=_gen(3))[:3].tolist())


def test_random_uses_the_generator_or_the_global_one():
    """``Random`` is ``randperm(M)[:k]`` from the generator, or from torch's global generator without one."""
    layer = _layer(M=9)
    assert (
        Random().select(layer, 4, generator=_gen(8)).tolist()
        == torch.randperm(9, generator=_gen(8))[:4].tolist()
    )
    torch.manual_seed(123)
    want = torch.randperm(9)[:4].tolist()
    torch.manual_seed(123)
    assert Random().select(layer, 4).tolist() == want


def _np_importance(X, layer, target):
    phi = _np_phi(X, layer.w, layer.c)  # (N, M, 2)
    Y = phi.mean(1)
    dY = 2 * (Y - target)  # d/dY of Σ (Y − target)²
    M = phi.shape[1]
    return np.abs((dY[:, None, :] * phi).sum(2) / M).sum(0)


def test_importance_is_the_numpy_mask_gradient_and_importance_selects_its_top_k():
    """``importance`` equals ``Σ_n |1/M ⟨∂L/∂Y_n, φ_i(X)_n⟩|`` computed in numpy (1e-12), touches no gradient; the
    "importance" strategy keeps the top-k of it (sorted)."""
    layer = _layer(M=6, seed=2)
    X = torch.randn(5, 3, dtype=F64, generator=_gen(4))
    target = torch.randn(5, 2, dtype=F64, generator=_gen(5))

    def loss(Y):
        return ((Y - target) ** 2).sum()

    got = layer.importance(X, loss)
    want = _np_importance(X, layer, target.numpy())
    assert np.max(np.abs(got.numpy() - want)) < TOL
    assert layer.w.grad is None and layer.c.grad is None
    top = sorted(np.argsort(-want)[:3].tolist())
    assert layer.select(3, "importance", X=X, loss=loss).tolist() == top
    assert layer.select(3, Importance(), X=X, loss=loss).tolist() == top


def test_importance_errors():
    """A non-callable loss, a non-scalar loss, a non-tensor loss and a missing X or loss raise exactly."""
    layer = _layer()
    X = torch.randn(2, 3, dtype=F64)
    with pytest.raises(TypeError, match=r"^loss must be a callable Y -> scalar tensor, got int$"):
        layer.importance(X, 3)
    with pytest.raises(
        ValueError, match=r"^loss must return a scalar tensor, got Tensor torch\.Size\(\[2, 2\]\)$"
    ):
        layer.importance(X, lambda Y: Y)
    with pytest.raises(ValueError, match=r"^loss must return a scalar tensor, got float $"):
        layer.importance(X, lambda Y: 1.0)
    message = "strategy 'importance' needs X (layer inputs) and loss (a callable: layer output -> scalar)"
    for kwargs in ({"X": X}, {"loss": lambda Y: Y.sum()}):
        with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
            layer.select(2, "importance", **kwargs)


def test_particle_features_are_parameters_or_outputs_flattened():
    """Without X: ``[w_i, c_i]`` per row; with X: ``φ_i(X)`` flattened example-major, from the numpy forward."""
    layer = _layer()
    want = np.concatenate([layer.w.detach().numpy(), layer.c.detach().numpy()[:, None]], 1)
    assert np.array_equal(layer.particle_features().numpy(), want)
    X = torch.randn(3, 3, dtype=F64, generator=_gen(7))
    phi = _np_phi(X, layer.w, layer.c)  # (N, M, 2)
    want = np.transpose(phi, (1, 0, 2)).reshape(5, -1)
    got = layer.particle_features(X)
    assert got.shape == (5, 6) and np.max(np.abs(got.numpy() - want)) < TOL and not got.requires_grad


def _np_sq(F):
    F = np.asarray(F, dtype=np.float64)
    return ((F[:, None, :] - F[None, :, :]) ** 2).sum(2)


def test_squared_distances_are_the_pairwise_numpy_distances_clamped_at_zero():
    """``_squared_distances`` equals numpy's ``Σ (φ_i − φ_j)²`` (to 1e-12 of the largest) and is ≥ 0 for a
    near-duplicate pair whose Gram-matrix formula rounds below 0 (checked: the unclamped formula is < 0 there).

    Whether it rounds below 0 depends on the matmul kernel's summation order (one seed did on an AMD EPYC and
    not on an Intel Xeon): the first of 64 seeds that does is taken; about a third do on either machine, so
    that none does has probability about (2/3)^64 < 1e-11."""

    def near_duplicates(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
        F = torch.randn(6, 4, dtype=F64, generator=_gen(seed)) * 1e3
        F[3] = F[0] * (1 + 1e-15) + 1e-12
        gram = F @ F.T
        return F, gram.diagonal()[:, None] + gram.diagonal()[None, :] - 2 * gram  # (6, 4), (6, 6)

    F, raw = next((c for c in map(near_duplicates, range(64)) if float(c[1].min()) < 0.0), (None, None))
    assert F is not None  # the case the clamp is for
    got = _squared_distances(F).numpy()
    assert np.max(np.abs(got - _np_sq(F))) < 1e-12 * np.max(_np_sq(F)) and got.min() >= 0.0


def _np_farthest(D, k):
    chosen = [int(np.argmin(D.sum(1)))]
    nearest = D[chosen[0]].copy()
    for _ in range(k - 1):
        nearest[chosen] = -1
        nxt = int(np.argmax(nearest))
        chosen.append(nxt)
        nearest = np.minimum(nearest, D[nxt])
    return chosen


def test_farthest_points_start_at_the_medoid_and_add_the_farthest():
    """On 1-D points ``[0, 1, 2, 10, 20]`` (by hand: squared-distance sums 505, …, 393, 345, … make 10 the medoid;
    then 0 and 20 tie at 100 and the first, 0, wins; then 20 (100), then 2 (4)) the order is [3, 0, 4, 2]; on random
    features the numpy greedy gives the same list; the strategy returns it sorted."""
    pts = torch.tensor([[0.0], [1.0], [2.0], [10.0], [20.0]], dtype=F64)
    D = _squared_distances(pts)
    assert _farthest_points(D, 4).tolist() == [3, 0, 4, 2]
    assert _farthest_points(D, 1).tolist() == [3]
    F = torch.randn(8, 3, dtype=F64, generator=_gen(3))
    assert _farthest_points(_squared_distances(F), 5).tolist() == _np_farthest(_np_sq(F), 5)
    layer = Lin(pts, torch.zeros(5, dtype=F64))  # features [w_i, 0]
    assert layer.select(3, "farthest").tolist() == [0, 3, 4]
    assert layer.select(3, FarthestPoint()).tolist() == [0, 3, 4]
    dup = torch.tensor([[0.0], [0.0], [5.0]], dtype=F64)
    assert sorted(_farthest_points(_squared_distances(dup), 3).tolist()) == [0, 1, 2]


def test_medoids_move_to_the_cluster_medoids_and_their_quantisation_error():
    """Two clusters ``{0, 1, 2, 3.5}`` and ``{10, 11, 12}``: the selected pair is the global k-medoids optimum
    found by brute force over all pairs in numpy; ``quantisation_error`` is ``1/M Σ_i min_j D_ij`` (numpy) and is
    lower than that of the pair (0, 12); ``max_iter`` must be ≥ 1 and defaults to 100."""
    x = np.array([0.0, 1.0, 2.0, 3.5, 10.0, 11.0, 12.0])
    pts = torch.tensor(x[:, None], dtype=F64)
    layer = Lin(pts, torch.zeros(7, dtype=F64))
    D = _np_sq(x[:, None])
    best = min(((i, j) for i in range(7) for j in range(i + 1, 7)), key=lambda s: D[:, list(s)].min(1).sum())
    got = layer.select(2, "medoids")
    assert tuple(got.tolist()) == best
    assert Medoids(max_iter=50).select(layer, 2).sort().values.tolist() == list(best)
    err = Medoids.quantisation_error(layer.particle_features(), got)
    assert float(err) == pytest.approx(D[:, list(best)].min(1).mean(), rel=1e-12)
    assert float(err) < float(Medoids.quantisation_error(layer.particle_features(), torch.tensor([0, 6])))
    with pytest.raises(ValueError, match=r"^max_iter must be ≥ 1, got 0$"):
        Medoids(max_iter=0)
    assert Medoids().max_iter == 100


def test_one_medoid_round_from_the_farthest_start():
    """With ``max_iter=1`` one Voronoi/medoid round is made from the farthest-point start (numpy replay); on points
    ``[0, 1, 2, 3, 20, 21, 22]`` and k = 2, in the farthest-point order (not sorted)."""
    x = np.array([0.0, 1.0, 2.0, 3.0, 20.0, 21.0, 22.0])
    D = _np_sq(x[:, None])
    S = _np_farthest(D, 2)
    cell = D[:, S].argmin(1)
    cell[S] = np.arange(2)
    new = list(S)
    for j in range(2):
        members = np.nonzero(cell == j)[0]
        new[j] = int(members[D[np.ix_(members, members)].sum(0).argmin()])
    layer = Lin(torch.tensor(x[:, None], dtype=F64), torch.zeros(7, dtype=F64))
    got = Medoids(max_iter=1).select(layer, 2)
    assert S == [3, 6] and new == [1, 5]  # by hand: cell sums 6, 6 (tie: the first, 1) and 21 (index 5)
    assert got.tolist() == new


def test_strategy_lookup_and_registry():
    """The registry holds the four strategies by name; an instance is returned as is; unknown names raise."""
    assert sorted(SUBSAMPLE_STRATEGIES) == ["farthest", "importance", "medoids", "random"]
    assert type(SUBSAMPLE_STRATEGIES["random"]) is Random and type(SUBSAMPLE_STRATEGIES["medoids"]) is Medoids
    assert (
        type(SUBSAMPLE_STRATEGIES["farthest"]) is FarthestPoint
        and type(SUBSAMPLE_STRATEGIES["importance"]) is Importance
    )
    mine = Medoids(3)
    assert _strategy(mine) is mine and _strategy("random") is SUBSAMPLE_STRATEGIES["random"]
    message = (
        "unknown subsample strategy 'best'; allowed: ['farthest', 'importance', 'medoids', 'random'] "
        "or a SubsampleStrategy instance"
    )
    with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
        _strategy("best")
    with pytest.raises(ValueError, match=r"^unknown subsample strategy 3; "):
        _layer().select(2, 3)


def test_subsample_is_prune_of_select():
    """``subsample(k, strategy, …)`` is the layer of the selected particles (numpy forward of those rows)."""
    layer = _layer(M=6, seed=9)
    X = torch.randn(4, 3, dtype=F64, generator=_gen(2))
    chosen = torch.randperm(6, generator=_gen(6))[:3].sort().values.tolist()
    new = layer.subsample(3, generator=_gen(6))
    want = _np_phi(X, layer.w, layer.c)[:, chosen].mean(1)
    assert np.max(np.abs(new(X).detach().numpy() - want)) < TOL
    far = layer.subsample(2, "farthest", X=X)
    assert torch.equal(far.c.detach(), layer.c.detach()[layer.select(2, "farthest", X=X)])


@pytest.mark.parametrize(
    "kwargs, start",
    [
        (
            {"drift": "adam", "noise_preconditioned": False},
            "Langevin: an Adam drift with noise_preconditioned=False",
        ),
        (
            {"drift": "adam", "betas": (0.5, 0.9)},
            "Langevin: a group with noise has an Adam drift with momentum",
        ),
    ],
    ids=["not-gibbs", "momentum"],
)
def test_a_constructor_warning_is_given_once_and_points_at_the_caller(kwargs, start):
    """Constructing an optimizer with one such group warns exactly once, with the caller's file as its location."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        Langevin([nn.Parameter(torch.zeros(2))], lr=0.1, beta=0.1, seed=0, **kwargs)
    assert len(caught) == 1 and str(caught[0].message).startswith(start)
    assert (UNDER_MUTMUT or caught[0].filename == __file__) and caught[0].category is UserWarning


def test_a_plain_group_ignores_its_beta_schedule_and_reports_beta_zero():
    """A ``noise=False`` group never evaluates its β (a schedule returning −1 does not raise) and its group stats
    have ``beta = 0`` and ``noise_rms = 0``; its step is ``θ − lr·g``."""
    p = _param((3,), 0)
    theta = p.detach().clone()
    opt = Langevin([p], lr=0.1, beta=lambda k: -1.0, noise=False, seed=0)
    p.grad = torch.ones(3, dtype=F64)
    opt.step()
    assert _diff(p.detach(), theta - 0.1) < TOL
    stats = opt.last_group_stats[0]
    assert stats.beta == 0.0 and stats.noise_rms == 0.0 and opt.param_groups[0]["step"] == 1


def test_a_state_saved_before_any_step_resets_the_loaders_generators_and_fills_missing_options():
    """A state saved before any noise (no generators in it) loaded into an optimizer that has stepped: the loader's
    generator restarts from the saver's seed (its next step equals the saver's first), and options missing from
    the saved groups (an older checkpoint) take the loader's defaults."""
    pa, pb = _param((4,), 0), _param((4,), 0)
    A = Langevin([pa], lr=0.1, beta=0.2, seed=21)
    state = A.state_dict()
    assert state["generators"] == {}
    del state["param_groups"][0]["noise_block"]
    del state["param_groups"][0]["temperature_convention"]
    B = Langevin([pb], lr=0.1, beta=0.2, seed=21)
    for _ in range(2):
        pb.grad = torch.ones(4, dtype=F64)
        B.step()
    pb.data.copy_(pa.data)
    B.load_state_dict(state)
    assert (
        B.param_groups[0]["noise_block"] == 0 and B.param_groups[0]["temperature_convention"] == "mean_field"
    )
    pa.grad, pb.grad = torch.ones(4, dtype=F64), torch.ones(4, dtype=F64)
    A.step()
    B.step()
    assert torch.equal(pa.detach(), pb.detach())


def test_add_param_group_checks_the_projection_against_every_parameter():
    """A projection that does not fit a parameter of the added group (``Sphere(dim=1)`` on a 1-D tensor, the
    group's second parameter) raises its ValueError and the group is removed; one that fits is kept."""
    from meanfield.optim import Sphere

    opt = Langevin([nn.Parameter(torch.zeros(2))], lr=0.1, beta=0.1, seed=0)
    bad = {
        "params": [nn.Parameter(torch.ones(2, 3)), nn.Parameter(torch.ones(3))],
        "projection": Sphere(dim=1),
    }
    with pytest.raises(ValueError, match=r"^Sphere dim=\(1,\) is out of range for a tensor of shape \(3,\)"):
        opt.add_param_group(bad)
    assert len(opt.param_groups) == 1
    opt.add_param_group({"params": [nn.Parameter(torch.ones(2, 3))], "projection": Sphere(dim=1)})
    assert len(opt.param_groups) == 2
