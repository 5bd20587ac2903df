"""Tests of :mod:`meanfield.optim`: the Langevin optimizer.

Statistical checks use tolerance ``Z·SE`` (``Z = 5``: a correct check fails with probability ≈ 6e-7),
fixed seeds and float64; each states the smallest error it detects and has a negative control that must be
rejected. Exact equivalences (β = 0 is SGD/Adam) are checked to float tolerance.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import os
import re
import warnings

import numpy as np
import pytest
import torch
from helpers.bad_input import call, is_clear, one_bad
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from torch import nn

import meanfield.optim.langevin as langevin_module
from meanfield import _background
from meanfield.drift.projections import Sphere
from meanfield.drift.schedules import Cosine, Linear, Step
from meanfield.nn.particles import (
    Medoids,
    ParticleLayer,
)
from meanfield.nn.transformer import TransformerLM
from meanfield.optim import DRIFTS, Clip, KineticLangevin, Langevin, LangevinStats, LayerProjection
from meanfield.optim.conventions import NOISY_BETAS, NOISY_EPS, PLAIN_BETAS, PLAIN_EPS
from meanfield.seeds import derive_seed
from meanfield.studies.stats import Z, mean_se, whiteness

F64 = torch.float64


def _param(shape, seed=0, scale=1.0, device="cpu") -> nn.Parameter:
    """The same numbers on every device (drawn on the CPU, then moved)."""
    g = torch.Generator().manual_seed(seed)
    return nn.Parameter((scale * torch.randn(shape, generator=g, dtype=F64)).to(device))


def _set_grad(params, grads) -> None:
    for p, g in zip(params, grads):
        p.grad = g.clone()


def _loss(x: torch.Tensor) -> torch.Tensor:
    """A non-quadratic loss, so that Adam's moments and the SGD step are not trivial."""
    return (x**4).sum() / 4 + (torch.sin(3 * x)).sum()


# ----------------------------------------------------------------------------------------------------------
# β = 0 is plain SGD / Adam
# ----------------------------------------------------------------------------------------------------------


def test_beta_zero_sgd_equals_torch_sgd():
    p, q = _param((7, 5)), _param((7, 5))
    opt = Langevin([p], lr=0.01, beta=0.0, drift="sgd", seed=0)
    ref = torch.optim.SGD([q], lr=0.01)
    for _ in range(10):
        for x, o in ((p, opt), (q, ref)):
            o.zero_grad()
            _loss(x).backward()
            o.step()
    torch.testing.assert_close(p, q, rtol=0, atol=1e-15)


@pytest.mark.parametrize("noise", [True, False])
@pytest.mark.parametrize("weight_decay", [0.0, 0.1])
@pytest.mark.parametrize("fused", [True, False])
def test_beta_zero_adam_equals_torch_adam(weight_decay, fused, noise, device):
    """At β = 0 with torch's ``betas`` and ``eps`` given (a group with noise has other defaults), the step is
    torch.optim.Adam's (on CUDA: torch's fused CUDA kernel on both sides, float64, the same tolerance)."""
    p, q = _param((6, 4), device=device), _param((6, 4), device=device)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # β1 > 0 with noise warns (momentum bias), irrelevant at β = 0
        opt = Langevin(
            [p], lr=0.01, beta=0.0, drift="adam", betas=(0.8, 0.99), eps=1e-8, weight_decay=weight_decay,
            noise=noise, seed=0,
        )  # fmt: skip
    ref = torch.optim.Adam([q], lr=0.01, betas=(0.8, 0.99), weight_decay=weight_decay, fused=fused)
    for _ in range(15):
        for x, o in ((p, opt), (q, ref)):
            o.zero_grad()
            _loss(x).backward()
            o.step()
    torch.testing.assert_close(p, q, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(opt.state[p]["exp_avg_sq"], ref.state[q]["exp_avg_sq"], rtol=1e-12, atol=0)


def test_beta_zero_noise_group_and_plain_group_mixed():
    """A noisy group at β = 0 and a plain group: both exactly the deterministic step."""
    p, q = _param((5, 3), 1), _param((4,), 2)
    p0, q0 = p.detach().clone(), q.detach().clone()
    opt = Langevin(
        [{"params": [p]}, {"params": [q], "noise": False, "drift": "adam"}], lr=0.1, beta=0.0, seed=0
    )
    gen = torch.Generator().manual_seed(7)
    g_p, g_q = torch.randn(5, 3, dtype=F64, generator=gen), torch.randn(4, dtype=F64, generator=gen)
    _set_grad([p, q], [g_p, g_q])
    opt.step()
    torch.testing.assert_close(p.detach(), p0 - 0.1 * g_p, rtol=0, atol=1e-15)
    adam_first_step = g_q / (g_q.abs() + 1e-8)  # m̂/(sqrt(v̂) + ε) = g/(|g| + ε) on the first step
    torch.testing.assert_close(q.detach(), q0 - 0.1 * adam_first_step, rtol=1e-12, atol=1e-15)


# ----------------------------------------------------------------------------------------------------------
# mean-field scaling
# ----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("scaling", [True, False])
def test_mean_field_scaling_sgd(scaling):
    M = 16
    p = _param((M, 3))
    p0 = p.detach().clone()
    g = torch.randn(M, 3, dtype=F64)
    opt = Langevin([p], lr=0.05, beta=0.0, n_particles=M, mean_field_scaling=scaling, seed=0)
    _set_grad([p], [g])
    opt.step()
    factor = M if scaling else 1
    torch.testing.assert_close(p.detach(), p0 - 0.05 * factor * g, rtol=0, atol=1e-15)


def test_mean_field_scaling_adam_is_adam_of_M_times_gradient():
    """Adam on ``M·∇L`` (the Wasserstein gradient), with weight decay added after the scaling."""
    M = 32
    p, q = _param((M, 2)), _param((M, 2))
    opt = Langevin([p], lr=0.01, beta=0.0, drift="adam", n_particles=M, eps=1e-3, weight_decay=0.5, seed=0)
    ref = torch.optim.Adam([q], lr=0.01, betas=(0.0, 0.999), eps=1e-3)  # a noisy group's default β1 = 0
    for _ in range(12):
        opt.zero_grad()
        (_loss(p) / M).backward()  # a mean-field loss: O(1/M) per-particle gradient
        opt.step()
        ref.zero_grad()
        _loss(q).backward()  # = M·∂L/∂θ_i
        q.grad.add_(q.detach(), alpha=0.5)  # + λθ
        ref.step()
    torch.testing.assert_close(p, q, rtol=1e-10, atol=1e-13)


# ----------------------------------------------------------------------------------------------------------
# the noise and the temperature contract (statistical)
# ----------------------------------------------------------------------------------------------------------


def test_stationary_variance_is_the_euler_maruyama_chain_value():
    """SGD drift on ``L = a/2 Σθ²``: the chain ``θ ← (1 − ηa)θ + sqrt(2βη) ξ`` has stationary variance
    ``β/(a(1 − ηa/2))``.

    ``n = 200 000`` independent coordinates are the replicas, 200 steps from 0 (the remaining transient
    ``(1 − ηa)^400 ≈ 5e-19`` is negligible). The estimate is ``mean θ²`` (mean known to be 0) with its SE
    (≈ ``σ²·sqrt(2/n)``): the smallest detectable relative error is ``Z·sqrt(2/n) ≈ 1.6 %``. Negative
    control: the continuous-time value ``β/a`` differs by ``ηa/2 / (1 − ηa/2) ≈ 5.3 %`` at ``ηa = 0.1`` and
    must be rejected.
    """
    a, eta, beta, n = 2.0, 0.05, 0.3, 200_000
    theta = nn.Parameter(torch.zeros(n, dtype=F64))
    opt = Langevin([theta], lr=eta, beta=beta, drift="sgd", seed=11)
    for _ in range(200):
        theta.grad = a * theta.detach()  # ∇(a/2 Σθ²)
        opt.step()
    second_moment = mean_se(theta.detach() ** 2)
    discrete = beta / (a * (1 - eta * a / 2))
    assert second_moment.agrees(discrete, Z), (second_moment, discrete)
    assert not second_moment.agrees(beta / a, Z), "negative control: the continuous β/a must be rejected"


def test_noise_variance_per_step_is_2_beta_eta():
    """Zero gradient: each step adds ``sqrt(2βη) ξ``. ``n = 10⁶`` coordinates, variance estimated by
    ``mean Δ²`` (SE ≈ ``2βη·sqrt(2/n)``): detects a relative error of ``Z·sqrt(2/n) ≈ 0.7 %``; the negative
    control ``1.05 × 2βη`` must be rejected. The mean of ``Δ`` is also 0 within ``Z·SE``."""
    eta, beta, n = 0.01, 0.7, 1_000_000
    theta = nn.Parameter(torch.zeros(n, dtype=F64))
    opt = Langevin([theta], lr=eta, beta=beta, seed=3)
    theta.grad = torch.zeros(n, dtype=F64)
    opt.step()
    delta = theta.detach()  # (n,) the increment
    assert mean_se(delta).agrees(0.0, Z)
    variance = mean_se(delta**2)
    assert variance.agrees(2 * beta * eta, Z), variance
    assert not variance.agrees(1.05 * 2 * beta * eta, Z), "negative control: 5 % too much noise"
    stats = opt.last_stats
    assert stats.noise_rms == pytest.approx(delta.square().mean().sqrt().item(), rel=1e-12)
    assert stats.drift_rms == 0.0 and stats.eta_eff_mean == stats.eta_eff_min == stats.eta_eff_max == eta


@pytest.mark.parametrize("preconditioned, M", [(True, 1), (False, 1), (True, 8)])
def test_adam_noise_scales_with_eta_eff(preconditioned, M):
    """Adam drift, first step, constant raw gradient ``g`` of M particles: the Wasserstein gradient is
    ``M·g``, so ``m̂ = M·g``, ``v̂ = M²g²``, ``η_eff = lr/(M|g| + ε)`` and
    ``Δ = −η_eff M g + sqrt(2β s) ξ`` with ``s = η_eff`` (preconditioned) or ``lr``. The standardised
    residual ``r = (Δ + η_eff M g)/sqrt(2β s)`` has ``E r² = 1``; ``n = 10⁶`` coordinates detect a relative
    error of ``Z·sqrt(2/n) ≈ 0.7 %``. Negative control: standardising with the other noise scale (|g| spans
    [0.5, 2], so the two differ by a factor up to 2, and M more with M particles) must be rejected."""
    lr, beta, eps, n = 1e-3, 0.5, 1e-8, 1_000_000
    gen = torch.Generator().manual_seed(5)
    magnitude = 0.5 + 1.5 * torch.rand(n, generator=gen, dtype=F64)  # (n,)
    g = (magnitude * torch.sign(torch.randn(n, generator=gen, dtype=F64))).view(M, n // M)  # (M, n/M)
    theta = nn.Parameter(torch.zeros(M, n // M, dtype=F64))
    options = {"lr": lr, "beta": beta, "drift": "adam", "eps": eps, "n_particles": M, "seed": 4}
    if preconditioned:
        opt = Langevin([theta], **options)
    else:
        with pytest.warns(UserWarning, match="no longer targets the Gibbs law"):
            opt = Langevin([theta], noise_preconditioned=False, **options)
    theta.grad = g.clone()
    opt.step()
    eta_eff = lr / (M * g.abs() + eps)  # (M, n/M)
    g = M * g  # the Wasserstein gradient
    noise = theta.detach() + eta_eff * g  # (M, n/M)
    right, wrong = (eta_eff, torch.full_like(g, lr)) if preconditioned else (torch.full_like(g, lr), eta_eff)
    r2 = mean_se(noise**2 / (2 * beta * right))
    assert r2.agrees(1.0, Z), r2
    assert not mean_se(noise**2 / (2 * beta * wrong)).agrees(1.0, Z), "negative control: wrong noise scale"
    stats = opt.last_stats
    assert stats.eta_eff_min == pytest.approx(eta_eff.min().item(), rel=1e-9)
    assert stats.eta_eff_max == pytest.approx(eta_eff.max().item(), rel=1e-9)
    assert stats.eta_eff_mean == pytest.approx(eta_eff.mean().item(), rel=1e-9)
    assert stats.noise_rms == pytest.approx(noise.square().mean().sqrt().item(), rel=1e-6)
    assert stats.drift_rms == pytest.approx((eta_eff * g).square().mean().sqrt().item(), rel=1e-9)
    assert stats.drift_to_noise == pytest.approx(stats.drift_rms / stats.noise_rms, rel=1e-12)


def test_schedule_is_applied_per_step():
    """β = Step([0, 0.5, 2], boundaries [1, 2]) at steps 0, 1, 2 with zero gradient: no noise at step 0
    (exactly), then variances ``2·0.5·η`` and ``2·2·η`` (``n = 400 000``: relative error ≥ ``Z·sqrt(2/n) ≈
    1.1 %`` detected). Negative control: step 2 must not have the variance of step 1."""
    eta, n = 0.01, 400_000
    theta = nn.Parameter(torch.zeros(n, dtype=F64))
    opt = Langevin([theta], lr=eta, beta=Step([0.0, 0.5, 2.0], [1, 2]), seed=9)
    increments = []
    for _ in range(3):
        before = theta.detach().clone()
        theta.grad = torch.zeros(n, dtype=F64)
        opt.step()
        increments.append(theta.detach() - before)
    assert torch.count_nonzero(increments[0]) == 0
    for delta, beta in zip(increments[1:], (0.5, 2.0)):
        assert mean_se(delta**2).agrees(2 * beta * eta, Z)
    assert not mean_se(increments[2] ** 2).agrees(2 * 0.5 * eta, Z), "negative control: β of the wrong step"


def test_schedule_value_recorded_every_step_and_lr_changes_followed():
    schedule = Linear(1.0, 0.0, T=10)
    theta = nn.Parameter(torch.zeros(1000, dtype=F64))
    opt = Langevin([theta], lr=0.1, beta=schedule, seed=0)
    lr_schedule = torch.optim.lr_scheduler.StepLR(opt, step_size=3, gamma=0.5)
    for k in range(12):
        theta.grad = torch.zeros_like(theta)
        opt.step()
        stats = opt.last_stats
        assert isinstance(stats, LangevinStats) and stats.step == k + 1
        assert stats.beta == schedule(k)
        assert stats.eta_eff_mean == pytest.approx(0.1 * 0.5 ** (k // 3), rel=1e-12)
        lr_schedule.step()
    assert opt.param_groups[0]["step"] == 12


# ----------------------------------------------------------------------------------------------------------
# projections
# ----------------------------------------------------------------------------------------------------------


def test_clip_and_sphere_hold_after_every_step():
    a = _param((50,), 1, scale=3.0)
    w = _param((50, 4), 2)
    heads = _param((6, 3, 2), 3)
    col = _param((5, 8), 4)
    opt = Langevin(
        [
            {"params": [a], "projection": Clip(1.5)},
            {"params": [w], "projection": Sphere()},
            {"params": [heads], "projection": Sphere(dim=(1, 2))},
            {"params": [col], "projection": Sphere(radius=2.0, dim=0)},
        ],
        lr=0.1,
        beta=1.0,
        drift="adam",
        seed=1,
    )
    clipped = 0
    for _ in range(20):
        opt.zero_grad()
        (_loss(a) + _loss(w) + _loss(heads) + _loss(col)).backward()
        opt.step()
        assert a.abs().max() <= 1.5
        clipped += int((a.abs() == 1.5).sum())
        torch.testing.assert_close(w.norm(dim=1), torch.ones(50, dtype=F64), rtol=0, atol=1e-13)
        torch.testing.assert_close(heads.flatten(1).norm(dim=1), torch.ones(6, dtype=F64), rtol=0, atol=1e-13)
        torch.testing.assert_close(col.norm(dim=0), torch.full((8,), 2.0, dtype=F64), rtol=0, atol=1e-13)
    assert clipped > 0  # the clip was active (the test is not vacuous)


def test_sphere_dim_out_of_range_is_a_clear_error():
    with pytest.raises(ValueError, match=r"Sphere dim=\(2,\) is out of range for a tensor of shape \(3, 4\)"):
        Langevin([_param((3, 4))], lr=0.1, beta=0.1, projection=Sphere(dim=2), seed=0)


# ----------------------------------------------------------------------------------------------------------
# param groups from a model with particle layers
# ----------------------------------------------------------------------------------------------------------


class _Particles(nn.Module):
    """A toy particle layer: ``f(x) = 1/M Σ_i a_i tanh(w_i · x)``, with a projection."""

    def __init__(self, M: int, d: int) -> None:
        super().__init__()
        self.a = nn.Parameter(torch.randn(M, dtype=F64))
        self.w = nn.Parameter(torch.randn(M, d, dtype=F64))
        self.projected = 0

    @property
    def n_particles(self) -> int:
        return self.a.shape[0]

    def project_(self) -> None:
        self.projected += 1

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x @ self.w.T) @ self.a / self.n_particles


class _Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Linear(3, 4, dtype=F64)
        self.feat = _Particles(M=10, d=4)
        self.norm = nn.LayerNorm(4, dtype=F64)


def test_param_groups_for_finds_particles():
    model = _Model()
    groups = Langevin.param_groups_for(model, projection=None, others={"lr": 0.5})
    assert len(groups) == 2
    particles, rest = groups
    assert [id(p) for p in particles["params"]] == [id(model.feat.a), id(model.feat.w)]
    assert particles["n_particles"] == 10 and particles["noise"] is True and particles["projection"] is None
    assert {id(p) for p in rest["params"]} == {
        id(p) for p in (*model.inp.parameters(), *model.norm.parameters())
    }
    assert rest["noise"] is False and rest["n_particles"] == 1 and rest["lr"] == 0.5


def test_param_groups_for_uses_the_layer_projection_and_scales_by_M():
    model = _Model()
    groups = Langevin.param_groups_for(model)
    assert isinstance(groups[0]["projection"], LayerProjection)
    opt = Langevin(groups, lr=0.01, beta=0.0, seed=0)
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    grads = {name: torch.randn_like(p) for name, p in model.named_parameters()}
    for name, p in model.named_parameters():
        p.grad = grads[name].clone()
    opt.step()
    assert model.feat.projected == 1
    for name, p in model.named_parameters():
        factor = 10 if name.startswith("feat.") else 1
        torch.testing.assert_close(p.detach(), before[name] - 0.01 * factor * grads[name], rtol=0, atol=1e-15)


def test_param_groups_for_feature_particles_projection():
    """Integration with :class:`meanfield.nn.FeatureParticles`: its own clip and sphere hold."""
    nn_mod = pytest.importorskip("meanfield.nn")
    layer = nn_mod.FeatureParticles(
        3, 20, "tanh", A=1.0, sphere=True, generator=torch.Generator().manual_seed(0)
    )
    layer = layer.double()
    opt = Langevin(Langevin.param_groups_for(layer), lr=0.1, beta=1.0, drift="adam", seed=0)
    x = torch.randn(30, 3, dtype=F64)
    for _ in range(5):
        opt.zero_grad()
        layer(x).square().mean().backward()
        opt.step()
        assert layer.a.abs().max() <= 1.0
        torch.testing.assert_close(layer.w.norm(dim=1), torch.ones(20, dtype=F64), rtol=0, atol=1e-13)


# ----------------------------------------------------------------------------------------------------------
# bad input
# ----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"lr": 0.0}, ValueError, r"lr must be > 0, got 0\.0"),
        ({"lr": -1.0}, ValueError, r"lr must be > 0"),
        ({"lr": float("nan")}, ValueError, r"lr must be finite"),
        ({"beta": -0.1}, ValueError, r"beta \(the temperature\) must be ≥ 0, got -0\.1"),
        ({"beta": "hot"}, TypeError, r"beta must be a number or a schedule"),
        ({"drift": "rmsprop"}, ValueError, r"drift must be one of \('sgd', 'adam'\), got 'rmsprop'"),
        ({"betas": (0.9, 1.0)}, ValueError, r"betas β2 must be in \[0, 1\)"),
        ({"eps": 0.0}, ValueError, r"eps must be > 0"),
        ({"weight_decay": -1.0}, ValueError, r"weight_decay must be ≥ 0"),
        ({"n_particles": 0}, ValueError, r"n_particles must be ≥ 1, got 0"),
        ({"n_particles": 2.5}, TypeError, r"n_particles must be an int"),
        ({"noise": 1}, TypeError, r"noise must be a bool"),
        ({"projection": lambda p: p}, TypeError, r"projection must be None or a Projection"),
        ({"seed": -3}, ValueError, r"seed must be ≥ 0"),
    ],
)
def test_bad_arguments_are_named(kwargs, error, match):
    options = {"lr": 0.1, "beta": 0.1, **kwargs}
    with pytest.raises(error, match=match):
        Langevin([_param((3,))], **options)


def test_bad_group_option_is_named_with_its_group():
    with pytest.raises(ValueError, match=r"param group 1: beta \(the temperature\) must be ≥ 0"):
        Langevin([{"params": [_param((2,))]}, {"params": [_param((2,), 1)], "beta": -1.0}], lr=0.1, beta=0.0)


def test_bad_projection_arguments():
    with pytest.raises(ValueError, match="Clip bound A must be > 0"):
        Clip(0.0)
    with pytest.raises(ValueError, match="Sphere radius must be > 0"):
        Sphere(radius=-1.0)
    with pytest.raises(TypeError, match="Sphere dim"):
        Sphere(dim="rows")
    with pytest.raises(TypeError, match="project_"):
        LayerProjection(nn.Linear(2, 2))


def test_generator_and_seed_together_is_an_error():
    with pytest.raises(ValueError, match="either generator or seed"):
        Langevin([_param((3,))], lr=0.1, beta=0.1, generator=torch.Generator(), seed=1)


def test_negative_schedule_value_names_the_step():
    theta = _param((4,))
    opt = Langevin([theta], lr=0.1, beta=Linear(0.2, -0.2, T=4), seed=0)
    for _ in range(3):
        theta.grad = torch.zeros_like(theta)
        opt.step()
    before = theta.detach().clone()
    theta.grad = torch.zeros_like(theta)
    with pytest.raises(
        ValueError, match=r"β_t must be a finite number ≥ 0, but the β schedule returned -0\.1.* step 3"
    ):
        opt.step()
    assert torch.equal(theta.detach(), before)


@pytest.mark.parametrize("drift", DRIFTS)
@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_non_finite_gradient_is_a_clear_error_and_changes_nothing(drift, bad):
    p, q = _param((3, 2), 0), _param((4,), 1)
    opt = Langevin([{"params": [p]}, {"params": [q], "noise": False}], lr=0.1, beta=0.5, drift=drift, seed=0)
    p.grad = torch.ones_like(p)
    q.grad = torch.ones_like(q)
    q.grad[2] = bad
    before = [p.detach().clone(), q.detach().clone()]
    with pytest.raises(
        ValueError, match=r"gradient of parameter 0 \(shape \(4,\)\) of param group 1 has 1 non-finite"
    ):
        opt.step()
    assert torch.equal(p.detach(), before[0]) and torch.equal(q.detach(), before[1])
    assert opt.last_stats is None  # no step was taken


def test_scalar_noise_with_adam_warns_once():
    with pytest.warns(UserWarning, match="no longer targets the Gibbs law") as record:
        opt = Langevin(
            [{"params": [_param((2,))]}, {"params": [_param((2,), 1)]}],
            lr=0.1,
            beta=0.1,
            drift="adam",
            noise_preconditioned=False,
        )
        opt.add_param_group({"params": [_param((2,), 2)]})
    assert len([w for w in record if "Gibbs" in str(w.message)]) == 1
    if "MUTANT_UNDER_TEST" not in os.environ:  # mutmut's trampolines add stack frames between caller and callee
        assert record[0].filename == __file__  # points at the caller
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Langevin([_param((2,))], lr=0.1, beta=0.1, drift="adam")  # preconditioned: no warning
        Langevin([_param((2,))], lr=0.1, beta=0.1, drift="sgd", noise_preconditioned=False)


# ----------------------------------------------------------------------------------------------------------
# randomness, checkpoints, groups without gradients
# ----------------------------------------------------------------------------------------------------------


def _run(opt: Langevin, params, steps: int) -> None:
    for _ in range(steps):
        opt.zero_grad()
        sum(_loss(p) for p in params).backward()
        opt.step()


@pytest.mark.parametrize("drift", DRIFTS)
def test_same_seed_same_result_and_generator_argument(drift, device):
    """``seed=`` makes one generator per device, seeded alike: the same run as a generator given there."""
    g = torch.Generator(device).manual_seed(7)
    runs = []
    for make in (
        lambda ps: Langevin(ps, lr=0.01, beta=0.2, drift=drift, seed=7),
        lambda ps: Langevin(ps, lr=0.01, beta=0.2, drift=drift, seed=7),
        lambda ps: Langevin(ps, lr=0.01, beta=0.2, drift=drift, generator=g),
        lambda ps: Langevin(ps, lr=0.01, beta=0.2, drift=drift, seed=8),
    ):
        ps = [_param((5, 3), 0, device=device), _param((4,), 1, device=device)]
        _run(make(ps), ps, 5)
        runs.append(torch.cat([p.detach().flatten() for p in ps]))
    assert torch.equal(runs[0], runs[1]) and torch.equal(runs[0], runs[2])
    assert not torch.allclose(runs[0], runs[3])


@pytest.mark.parametrize("drift", DRIFTS)
def test_state_dict_resume_is_exact(drift, device):
    """Save after 4 steps, load into a fresh optimizer (other seed) on copied parameters: the next 4 steps
    (moments, step count, schedule clock and noise) are identical."""
    beta = Linear(0.5, 0.05, T=8)
    ps = [_param((6, 2), 0, device=device), _param((3,), 1, device=device)]
    opt = Langevin(ps, lr=0.01, beta=beta, drift=drift, projection=Clip(2.0), seed=3)
    _run(opt, ps, 4)
    saved = copy.deepcopy(opt.state_dict())
    qs = [nn.Parameter(p.detach().clone()) for p in ps]
    resumed = Langevin(qs, lr=0.01, beta=beta, drift=drift, projection=Clip(2.0), seed=99)
    resumed.load_state_dict(saved)
    assert isinstance(resumed.param_groups[0]["projection"], Clip)
    _run(opt, ps, 4)
    _run(resumed, qs, 4)
    for p, q in zip(ps, qs):
        assert torch.equal(p.detach(), q.detach())
    assert resumed.last_stats == opt.last_stats


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA is not available here")
@pytest.mark.parametrize("drift", DRIFTS)
def test_parameters_on_two_devices_draw_from_one_generator_each(drift):
    """``seed=`` gives each device its own generator seeded alike: with one parameter on the CPU and one on
    CUDA, each follows exactly the run of an optimizer holding it alone (the other device's draws consume
    nothing of its stream); both generators are saved and a resume continues both bit for bit."""

    def trajectory(ps, steps=4, opt=None):
        opt = opt or Langevin(ps, lr=0.01, beta=0.2, drift=drift, seed=5)
        _run(opt, ps, steps)
        return opt

    cpu, gpu = _param((6, 2), 0), _param((5,), 1, device="cuda")
    both = trajectory([cpu, gpu])
    alone_cpu, alone_gpu = _param((6, 2), 0), _param((5,), 1, device="cuda")
    trajectory([alone_cpu])
    trajectory([alone_gpu])
    assert torch.equal(cpu.detach(), alone_cpu.detach()) and torch.equal(gpu.detach(), alone_gpu.detach())
    state = copy.deepcopy(both.state_dict())
    assert sorted(state["generators"]) == ["cpu", "cuda:0"]
    qs = [nn.Parameter(cpu.detach().clone()), nn.Parameter(gpu.detach().clone())]
    resumed = Langevin(qs, lr=0.01, beta=0.2, drift=drift, seed=99)
    resumed.load_state_dict(state)
    trajectory([cpu, gpu], opt=both)
    trajectory(qs, opt=resumed)
    assert all(torch.equal(p.detach(), q.detach()) for p, q in zip([cpu, gpu], qs))
    assert not torch.equal(cpu.detach(), alone_cpu.detach())  # negative control: the run moved on


def test_parameters_without_gradient_are_left_alone():
    p, q, r = _param((4, 3), 0), _param((5,), 1), _param((2, 2), 2)
    opt = Langevin([p, q, r], lr=0.1, beta=1.0, drift="adam", seed=0)
    q0 = q.detach().clone()
    for _ in range(3):
        opt.zero_grad()
        (_loss(p) + _loss(r)).backward()
        opt.step()
        assert q.grad is None and torch.equal(q.detach(), q0)
    assert opt.last_stats.n == p.numel() + r.numel()


def test_sgd_stats_match_the_increments():
    """``last_stats`` for an SGD drift with weight decay and M = 4: drift and noise RMS from the actual step."""
    M, lr, beta, wd = 4, 0.02, 0.3, 0.1
    p = _param((M, 50), 0)
    g = torch.randn(M, 50, dtype=F64)
    opt = Langevin([p], lr=lr, beta=beta, n_particles=M, weight_decay=wd, seed=1)
    p0 = p.detach().clone()
    p.grad = g.clone()
    opt.step()
    drift = lr * (M * g + wd * p0)
    noise = p.detach() - p0 + drift
    stats = opt.last_stats
    assert stats.drift_rms == pytest.approx(drift.square().mean().sqrt().item(), rel=1e-12)
    assert stats.noise_rms == pytest.approx(noise.square().mean().sqrt().item(), rel=1e-9)
    assert stats.beta == beta and stats.n == p.numel()
    assert math.isclose(stats.drift_to_noise, stats.drift_rms / stats.noise_rms)


def test_huge_but_finite_gradient_is_not_an_error():
    """A float32 gradient of norm ~1e30 (its square overflows float32) is finite: the step proceeds."""
    p = nn.Parameter(torch.zeros(4))
    opt = Langevin([p], lr=1e-30, beta=0.0, seed=0)
    p.grad = torch.full((4,), 1e30)
    opt.step()
    torch.testing.assert_close(p.detach(), torch.full((4,), -1.0), rtol=1e-6, atol=0)
    assert opt.last_stats.drift_rms == pytest.approx(1.0, rel=1e-6)


# ----------------------------------------------------------------------------------------------------------
# the background noise draw
# ----------------------------------------------------------------------------------------------------------


def _trace(monkeypatch, overlap_min: int, drift: str, bad_at: int | None = None):
    """Parameters, stats and generator state after 4 steps on float32 + float64 parameters (two draws from
    one generator); with ``bad_at`` the gradient of that step is NaN once (the step raises, then is redone)."""
    from meanfield import _background

    monkeypatch.setattr(_background, "OVERLAP_MIN", overlap_min)
    ps = [_param((300, 3), 0), nn.Parameter(_param((50,), 1).detach().float()), _param((7,), 2)]
    opt = Langevin(
        [{"params": ps[:2]}, {"params": ps[2:], "n_particles": 7}], lr=0.01, beta=0.3, drift=drift, seed=5
    )
    stats = []
    for k in range(4):
        opt.zero_grad()
        sum(_loss(p).double() for p in ps).backward()
        if k == bad_at:
            good = ps[0].grad.clone()
            ps[0].grad[0, 0] = float("nan")
            with pytest.raises(ValueError, match="non-finite"):
                opt.step()
            ps[0].grad.copy_(good)
        opt.step()
        stats.append(opt.last_stats)
    return [p.detach().clone() for p in ps], stats, opt._generator(torch.device("cpu")).get_state()


@pytest.mark.parametrize("drift", DRIFTS)
def test_background_draw_is_the_inline_draw(monkeypatch, drift):
    """The draw in the background thread (threshold 0) and in the caller's thread (threshold ∞) give the same
    parameters, stats and generator state bit for bit; a different seed would not (test_same_seed_...)."""
    inline = _trace(monkeypatch, 10**12, drift)
    background = _trace(monkeypatch, 0, drift)
    assert all(torch.equal(a, b) for a, b in zip(inline[0], background[0]))
    assert inline[1] == background[1]
    assert torch.equal(inline[2], background[2])


@pytest.mark.parametrize("overlap_min", [0, 10**12])
def test_failed_step_leaves_the_generator_unchanged(monkeypatch, overlap_min):
    """A step refused for a NaN gradient draws nothing: redoing it gives the run that never failed."""
    clean = _trace(monkeypatch, overlap_min, "adam")
    failed = _trace(monkeypatch, overlap_min, "adam", bad_at=2)
    assert all(torch.equal(a, b) for a, b in zip(clean[0], failed[0]))
    assert torch.equal(clean[2], failed[2])


def test_refused_step_keeps_the_last_stats(monkeypatch):
    from meanfield import _background

    monkeypatch.setattr(_background, "OVERLAP_MIN", 0)
    p = _param((30, 3))
    opt = Langevin([p], lr=0.01, beta=0.2, drift="adam", seed=1)
    _run(opt, [p], 2)
    before = opt.last_stats
    p.grad[0, 0] = float("nan")
    with pytest.raises(ValueError, match="non-finite"):
        opt.step()
    assert opt.last_stats == before and before.n == 90


def test_an_error_during_the_drift_leaves_no_draw_running_and_the_generator_unchanged(monkeypatch):
    from meanfield import _background

    monkeypatch.setattr(_background, "OVERLAP_MIN", 0)
    p = _param((300, 3))
    opt = Langevin([p], lr=0.01, beta=0.2, seed=1)
    _run(opt, [p], 1)
    state = opt._generator(torch.device("cpu")).get_state()

    def broken(*args, **kwargs):
        raise RuntimeError("drift failed")

    monkeypatch.setattr("meanfield.optim.langevin.apply_drift", broken)
    monkeypatch.setattr("meanfield.optim.langevin.sgd_drift_", broken)  # the SGD fast path's drift (issue 51)
    with pytest.raises(RuntimeError, match="drift failed"):
        opt.step()
    assert torch.equal(opt._generator(torch.device("cpu")).get_state(), state)


@pytest.mark.parametrize("overlap_min", [0, 10**12])
@pytest.mark.parametrize("drift", DRIFTS)
def test_step_equals_an_independent_implementation(monkeypatch, overlap_min, drift, device):
    """The documented step, written out by hand: drift by torch.optim.SGD/Adam on M·g, then ONE flat
    N(0, I) draw per (device, dtype) in the order the kinds first appear (groups in order, parameters in
    order), noise sqrt(2β η_eff) ξ. Float64 and float32 parameters share the generator, so the draw order
    matters; a run with the kinds drawn in another order would not match."""
    from meanfield import _background

    monkeypatch.setattr(_background, "OVERLAP_MIN", overlap_min)
    lr, beta, M, eps = 0.01, 0.3, 4, 1.0  # eps and betas: the defaults of a group with noise
    if device.type != "cpu" and overlap_min == 0:
        pytest.skip("the background draw is for CPU draws only")
    ps = [_param((5, 3), 0, device=device), nn.Parameter(_param((7,), 1, device=device).detach().float())]
    ps.append(_param((2, 2), 2, device=device))
    qs = [nn.Parameter(p.detach().clone()) for p in ps]
    opt = Langevin(
        [{"params": ps[:2]}, {"params": ps[2:]}], lr=lr, beta=beta, drift=drift, n_particles=M, seed=9
    )
    base = (torch.optim.SGD if drift == "sgd" else torch.optim.Adam)(
        qs, lr=lr, **({} if drift == "sgd" else {"eps": eps, "betas": (0.0, 0.999)})
    )
    gen = torch.Generator(device).manual_seed(9)  # the optimizer's seed=9 generator on this device
    for _ in range(3):
        for ps_or_qs in (ps, qs):
            for x in ps_or_qs:
                x.grad = None
            sum(_loss(x).double() for x in ps_or_qs).backward()
        opt.step()
        with torch.no_grad():
            for q in qs:
                q.grad.mul_(M)  # the Wasserstein gradient M·g
            base.step()
            # kinds in order of first appearance: float64 (params 0 and 2), then float32 (param 1)
            xi64 = torch.empty(15 + 4, dtype=torch.float64, device=device).normal_(generator=gen)
            xi32 = torch.empty(7, dtype=torch.float32, device=device).normal_(generator=gen)
            noise = [xi64[:15].view(5, 3), xi32.view(7), xi64[15:].view(2, 2)]
            for q, xi in zip(qs, noise):
                if drift == "sgd":
                    eta = torch.full_like(q, lr)
                else:
                    state = base.state[q]
                    bias2 = 1 - 0.999 ** float(state["step"])
                    eta = lr / (state["exp_avg_sq"].sqrt() / math.sqrt(bias2) + eps)
                q.add_((2 * beta * eta).sqrt() * xi)
    for p, q in zip(ps, qs):
        tol = 1e-12 if p.dtype == torch.float64 else 1e-6
        assert float((p.detach() - q.detach()).abs().max()) <= tol


def test_channels_last_parameters_get_their_own_preconditioner():
    """A channels_last parameter (memory order ≠ logical order) takes exactly the step of the same
    parameter stored contiguously: the Adam moments and η_eff of each coordinate stay with it, and the
    noise ξ of logical coordinate i is the same. A gradient laid out unlike its parameter is handled too."""
    runs = []
    for layout in ("contiguous", "channels_last", "grad contiguous"):
        g = torch.Generator().manual_seed(3)
        p = nn.Parameter(torch.randn(2, 3, 4, 5, generator=g, dtype=F64))
        if layout != "contiguous":
            p = nn.Parameter(p.detach().to(memory_format=torch.channels_last))
        opt = Langevin([p], lr=0.05, beta=0.3, drift="adam", seed=4)
        for k in range(3):
            grad = torch.sin(3 * p.detach()).contiguous() + 0.1 * k  # (2, 3, 4, 5), row-major
            p.grad = grad.to(memory_format=torch.channels_last) if layout == "channels_last" else grad
            opt.step()
        runs.append((p.detach().contiguous(), opt.last_stats))
    for p, stats in runs[1:]:
        assert torch.equal(p, runs[0][0])
        assert math.isclose(stats.noise_rms, runs[0][1].noise_rms, rel_tol=1e-12)
        assert math.isclose(stats.eta_eff_max, runs[0][1].eta_eff_max, rel_tol=1e-12)


def test_a_parameter_with_holes_in_its_memory_is_refused():
    base = torch.zeros(4, 6, dtype=F64)
    p = nn.Parameter(base[:, ::2])  # (4, 3), strides (6, 2): every other number
    p.grad = torch.ones_like(p)
    with pytest.raises(ValueError, match=r"parameter 0 of param group 0 .* does not fill its memory densely"):
        Langevin([p], lr=0.1, beta=0.1, seed=0).step()


def test_loading_a_live_state_dict_shares_no_tensor_with_its_optimizer():
    """B loads A's state dict (not a saved copy: A's step counts and moments by reference), then A steps, then
    B steps with the same gradient: B must make A's step. Before the fix B's Adam step count was A's tensor,
    so A's step advanced B's bias correction too (B then moved 1e-3 away)."""
    g = torch.Generator().manual_seed(0)
    grad = torch.randn(4, 3, generator=g, dtype=torch.float64)
    thetas = [torch.zeros(4, 3, dtype=torch.float64, requires_grad=True) for _ in range(2)]
    opts = [Langevin([t], lr=0.1, beta=0.01, drift="adam", n_particles=4, seed=1) for t in thetas]
    for _ in range(2):  # A has state; B is fresh
        thetas[0].grad = grad.clone()
        opts[0].step()
    with torch.no_grad():
        thetas[1].copy_(thetas[0])
    opts[1].load_state_dict(opts[0].state_dict())
    for t, opt in zip(thetas, opts):
        t.grad = grad.clone()
        opt.step()
    assert torch.equal(thetas[0], thetas[1])


SETTINGS = settings(
    max_examples=50,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large],
)


class _Opaque:
    def __repr__(self) -> str:
        return "<object>"


NONSENSE = st.sampled_from([None, "1", "abc", "", [1.0], (1,), {}, _Opaque(), b"x", 1j, np.array([1.0, 2.0])])


NUMBERS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(-(2**70), 2**70),
    st.booleans(),
    st.sampled_from([torch.tensor(0.5), torch.ones(2), torch.tensor(float("nan")), np.float64(0.25)]),
)


BAD = st.one_of(NUMBERS, NONSENSE)


OPT_POOLS = {
    "lr": BAD,
    "beta": st.one_of(BAD, st.sampled_from([Linear(0.5, -0.5, T=4), lambda s: math.nan, lambda s: "x"])),
    "drift": st.one_of(BAD, st.sampled_from(["sgd", "adam", "SGD", "nope"])),
    "betas": st.one_of(BAD, st.tuples(st.floats(-1, 2), st.floats(-1, 2))),
    "eps": BAD,
    "weight_decay": BAD,
    "n_particles": BAD,
    "seed": BAD,
}


def _known_optim_finding(name, value) -> bool:
    """Inputs of the findings tests below (fixed in meanfield/optim/; kept as explicit cases)."""
    huge = isinstance(value, (int, float)) and not isinstance(value, bool) and abs(value) > 1e200
    not_finite = isinstance(value, float) and not math.isfinite(value)
    nan_tensor = torch.is_tensor(value) and value.numel() == 1 and bool(value.isnan())
    return (
        (name in ("lr", "beta", "weight_decay", "seed") and huge)
        or (name == "beta" and (not_finite or nan_tensor))
        or (name == "drift" and isinstance(value, np.ndarray))
    )


OPTIM_FINDINGS = [
    ({"beta": math.nan}, "Constant's message 'value must be finite' does not name beta"),
    ({"beta": math.inf}, "Constant's message 'value must be finite' does not name beta"),
    (
        {"drift": np.array([1.0, 2.0])},
        "'drift not in DRIFTS' on an array: 'truth value of an array is ambiguous'",
    ),
    ({"weight_decay": 2**70}, "OverflowError 'int too big to convert' in the step"),
    ({"seed": 2**70}, "manual_seed: 'Overflow when unpacking long long' does not name seed"),
    ({"lr": 1e308}, "OverflowError 'Numerical result out of range' in the step"),
    ({"beta": 1e308}, "the step makes the parameters inf silently; the next step blames the gradient"),
]


@pytest.mark.parametrize(
    "bad, why", OPTIM_FINDINGS, ids=[f"{next(iter(b))}={next(iter(b.values()))!r}" for b, _ in OPTIM_FINDINGS]
)
def test_langevin_known_findings(bad, why):
    from meanfield.optim import Langevin

    name = next(iter(bad))
    p = torch.nn.Parameter(torch.ones(3, dtype=torch.float64))
    try:
        opt = Langevin([p], **{"lr": 0.01, "beta": 0.1, "drift": "sgd", "seed": 0, **bad})
        for _ in range(2):
            p.grad = p.detach().clone()
            opt.step()
    except (ValueError, TypeError) as error:
        assert name in str(error), why
        return
    assert bool(torch.isfinite(p).all()), why


@SETTINGS
@given(one_bad({"lr": 0.01, "beta": 0.1, "drift": "sgd", "seed": 0}, OPT_POOLS))
def test_langevin(case):
    """Options of ``Langevin`` and a schedule that goes negative at step 3: refused by name (at construction,
    or at the step that reads the bad value, which then leaves the parameters untouched), or 4 finite steps."""
    from meanfield.optim import Langevin

    name, kw = case
    assume(not _known_optim_finding(name, kw[name]))
    p = torch.nn.Parameter(torch.ones(3, dtype=torch.float64))
    names = (name, "β") if name == "beta" else (name,)
    opt = call(Langevin, names, [p], **kw)
    if opt is None:
        return
    for _ in range(4):
        before = p.detach().clone()
        p.grad = p.detach().clone()
        try:
            opt.step()
        except (ValueError, TypeError) as error:
            assert is_clear(error, names), f"{type(error).__name__}: {error}"
            assert torch.equal(p.detach(), before), "a refused step changed the parameters"
            return
    assert bool(torch.isfinite(p).all())


TOL = 1e-13  # float64 rounding of a few operations on numbers of order one


def _param_2(shape, seed: int) -> nn.Parameter:
    return nn.Parameter(torch.randn(shape, dtype=F64, generator=torch.Generator().manual_seed(seed)))


def _grad(shape, seed: int) -> torch.Tensor:
    return torch.randn(shape, dtype=F64, generator=torch.Generator().manual_seed(1000 + seed))


def _max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max())


def _baoab_by_hand(theta, grad, v, *, h, gamma, beta_t, M, wd, xi):
    """One documented step: v ← v − h(M g + λθ); θ ← θ + (h/2)v; v ← c v + sqrt(β_t(1 − c²)) ξ; θ ← θ + (h/2)v."""
    c = math.exp(-gamma * h)
    v = v - h * (M * grad + wd * theta)
    theta = theta + 0.5 * h * v
    v = c * v + math.sqrt(beta_t * (1 - c * c)) * xi
    return theta + 0.5 * h * v, v


def _kinetic_two_groups(seed: int = 7):
    ps = [_param_2((4, 3), 0), _param_2((5,), 1), _param_2((3, 2), 2)]
    groups = [
        {"params": ps[:2], "lr": 0.2, "friction": 1.5, "beta": 0.3, "n_particles": 4, "weight_decay": 0.25},
        {"params": ps[2:], "lr": 0.1, "friction": 0.5, "beta": 0.05, "n_particles": 3,
         "temperature_convention": "loss"},
    ]  # fmt: skip
    return ps, KineticLangevin(groups, lr=1.0, seed=seed)


KINETIC_GROUP_KEYS = {
    "params", "lr", "friction", "beta", "weight_decay", "n_particles", "mean_field_scaling",
    "temperature_convention", "projection", "step",
}  # fmt: skip


def _warning_site() -> str:
    """The file a warning raised with the optimizer's stacklevel must point at when the optimizer is built in
    this file: this file; behind mutmut's trampolines (two more frames, inside ``mutmut run``) the same stack
    level is the trampoline's wrapper, in mutmut's trampoline module."""
    if hasattr(langevin_module, "_mutmut_mutated"):
        import mutmut.mutation.trampoline as trampoline

        return trampoline.__file__
    return __file__


def test_kinetic_step_with_two_groups_is_the_hand_baoab_step():
    """Two groups with their own h, γ, β, λ, M and convention: θ and the stored velocity after one and two steps
    equal the hand BAOAB step (to 1e-13), the normals drawn in order (group 0's parameters, then group 1's) from
    a generator seeded with the optimizer's seed; the "loss" group's noise uses β_t = M·β. Negative control: the
    same hand step with the "loss" β left unmultiplied is off by > 1e-3."""
    ps, opt = _kinetic_two_groups(seed=7)
    gen = torch.Generator().manual_seed(7)
    settings = [dict(h=0.2, gamma=1.5, beta_t=0.3, M=4, wd=0.25)] * 2 + [dict(h=0.1, gamma=0.5, beta_t=0.15, M=3, wd=0.0)]  # fmt: skip
    thetas = [p.detach().clone() for p in ps]
    vs = [torch.zeros_like(t) for t in thetas]
    for step in range(2):
        grads = [_grad(p.shape, 10 * step + k) for k, p in enumerate(ps)]
        for p, g in zip(ps, grads):
            p.grad = g.clone()
        opt.step()
        wrong = None
        for k, (p, g, s) in enumerate(zip(ps, grads, settings)):
            xi = torch.randn(p.shape, dtype=F64, generator=gen)
            if k == 2:
                wrong, _ = _baoab_by_hand(thetas[k], g, vs[k], xi=xi, **{**s, "beta_t": 0.05})
            thetas[k], vs[k] = _baoab_by_hand(thetas[k], g, vs[k], xi=xi, **s)
            assert _max_diff(p.detach(), thetas[k]) < TOL
            assert _max_diff(opt.state[p]["velocity"], vs[k]) < TOL
        assert _max_diff(ps[2].detach(), wrong) > 1e-3  # negative control: the loss convention's ×M matters
    assert [g["step"] for g in opt.param_groups] == [2, 2]


def test_kinetic_default_temperature_is_zero_heavy_ball():
    """Without ``beta`` the optimizer is noise-free: three steps equal the hand β = 0 step and
    ``torch.optim.SGD(lr = h²(1 + μ)/2, momentum = μ = e^{−γh})`` (to 1e-13). Negative control: the hand
    step with β = 1 (noise) differs by > 1e-2."""
    h, gamma = 0.3, 0.8
    mu = math.exp(-gamma * h)
    p, q = _param_2((6,), 3), _param_2((6,), 3)
    opt = KineticLangevin([p], lr=h, friction=gamma, seed=0)
    sgd = torch.optim.SGD([q], lr=h * h * (1 + mu) / 2, momentum=mu)
    theta, v = p.detach().clone(), torch.zeros(6, dtype=F64)
    for step in range(3):
        g = _grad((6,), step)
        p.grad, q.grad = g.clone(), g.clone()
        opt.step()
        sgd.step()
        xi = torch.randn(6, dtype=F64, generator=torch.Generator().manual_seed(step))
        noisy, _ = _baoab_by_hand(theta, g, v, h=h, gamma=gamma, beta_t=1.0, M=1, wd=0.0, xi=xi)
        theta, v = _baoab_by_hand(theta, g, v, h=h, gamma=gamma, beta_t=0.0, M=1, wd=0.0, xi=xi)
        assert _max_diff(p.detach(), theta) < TOL
        assert _max_diff(p.detach(), q.detach()) < TOL
        assert _max_diff(p.detach(), noisy) > 1e-2


def test_kinetic_groups_hold_exactly_the_documented_options_as_floats():
    """The checked options are stored back as floats (an ``lr`` given as an int or a 0-d tensor becomes the
    float), in the constructor's defaults and in a group added later; a group holds exactly the documented
    keys (no stray spelling of one)."""
    p, q = _param_2((2,), 0), _param_2((2,), 1)
    opt = KineticLangevin([p], lr=torch.tensor(0.25, dtype=F64), friction=2, weight_decay=1)
    opt.add_param_group({"params": [q], "lr": 1})
    first, second = opt.param_groups
    assert type(first["lr"]) is float and first["lr"] == 0.25
    assert type(second["lr"]) is float and second["lr"] == 1.0
    assert type(first["friction"]) is float and first["friction"] == 2.0
    assert type(first["weight_decay"]) is float and first["weight_decay"] == 1.0
    assert set(first) == KINETIC_GROUP_KEYS and set(second) == KINETIC_GROUP_KEYS
    assert set(opt.defaults) == KINETIC_GROUP_KEYS - {"params"}


def test_kinetic_generator_on_another_device_is_a_clear_error():
    """An optimizer built with a generator (no seed) asked for a generator on another device (a checkpoint
    holding one for ``cuda:0``) says which device and what to pass."""
    opt = KineticLangevin([_param_2((2,), 0)], lr=0.1, beta=0.1, generator=torch.Generator())
    saved = opt.state_dict()
    assert saved["seed"] is None
    saved["generators"] = {"cuda:0": torch.Generator().get_state()}
    with pytest.raises(
        ValueError,
        match=r"^the generator passed to KineticLangevin is not on the parameters' device cuda:0; "
        r"pass one there, or seed= for one generator per device$",
    ):
        opt.load_state_dict(saved)


def test_kinetic_loading_a_state_restores_the_seed():
    """A state saved before any noise was drawn carries only the seed: the loading optimizer (its own seed
    99) then draws the saver's normals, i.e. its step is the hand step with ξ from ``manual_seed(5)`` (to 1e-13).
    Negative control: ξ from ``manual_seed(99)`` is off by > 1e-3."""
    saver = KineticLangevin([_param_2((5,), 0)], lr=0.2, friction=1.0, beta=0.4, seed=5)
    p = _param_2((5,), 1)
    opt = KineticLangevin([p], lr=0.2, friction=1.0, beta=0.4, seed=99)
    opt.load_state_dict(saver.state_dict())
    assert opt.state_dict()["seed"] == 5
    theta, g = p.detach().clone(), _grad((5,), 0)
    p.grad = g.clone()
    opt.step()
    for seed, close in ((5, True), (99, False)):
        xi = torch.randn(5, dtype=F64, generator=torch.Generator().manual_seed(seed))
        want, _ = _baoab_by_hand(theta, g, torch.zeros(5, dtype=F64), h=0.2, gamma=1.0, beta_t=0.4, M=1, wd=0.0, xi=xi)  # fmt: skip
        assert (_max_diff(p.detach(), want) < TOL) is close


def test_kinetic_state_into_an_optimizer_that_has_stepped_continues_the_saver():
    """A state loaded into an optimizer that already stepped (other seed, its own velocities and generator,
    another step count) continues the saver's run bit for bit; the β schedule reads the loaded step count
    (β = 0 at steps 1 and 2, so the loader, at step 4 before, must take the hand noise-free steps there, to
    1e-13)."""
    beta = Step([0.5, 0.0, 0.5], [1, 3])
    a, b = _param_2((4,), 0), _param_2((4,), 1)
    saver = KineticLangevin([a], lr=0.3, friction=0.7, beta=beta, seed=1)
    loader = KineticLangevin([b], lr=0.3, friction=0.7, beta=beta, seed=2)
    for k in range(4):
        b.grad = _grad((4,), 50 + k)
        loader.step()
    a.grad = _grad((4,), 0)
    saver.step()
    loader.load_state_dict(saver.state_dict())
    with torch.no_grad():
        b.copy_(a)
    theta, v = a.detach().clone(), saver.state[a]["velocity"].clone()
    for k in range(1, 5):
        g = _grad((4,), k)
        a.grad, b.grad = g.clone(), g.clone()
        saver.step()
        loader.step()
        assert torch.equal(a.detach(), b.detach())
        if k < 3:  # β(1) = β(2) = 0: the hand step without noise
            theta, v = _baoab_by_hand(theta, g, v, h=0.3, gamma=0.7, beta_t=0.0, M=1, wd=0.0, xi=0 * g)
            assert _max_diff(b.detach(), theta) < TOL
    assert loader.param_groups[0]["step"] == 5
    assert saver.state[a]["velocity"] is not loader.state[b]["velocity"]


def test_kinetic_a_state_without_velocities_loads():
    """A state dict holding only ``param_groups`` (no ``state`` entry: no velocities) loads; the velocities then
    start from 0 and the step count is the saved one (β schedule: β(1) = 0.4 is used, not β(0) = 0), so the
    next step is the hand step from v = 0 with ξ from ``manual_seed(3)`` (the saved seed; no noise was drawn
    at step 0), to 1e-13."""
    s = _param_2((3,), 0)
    saver = KineticLangevin([s], lr=0.2, friction=1.0, beta=Step([0.0, 0.4], [1]), seed=3)
    s.grad = torch.zeros(3, dtype=F64)
    saver.step()  # β(0) = 0 and no gradient: the velocity stays 0, no noise drawn
    saved = saver.state_dict()
    fresh = torch.Generator().manual_seed(3).get_state()  # nothing drawn: no generator, or one as seeded
    assert all(torch.equal(state, fresh) for state in saved["generators"].values())
    del saved["state"]
    p = _param_2((3,), 1)
    opt = KineticLangevin([p], lr=0.2, friction=1.0, beta=Step([0.0, 0.4], [1]), seed=3)
    opt.load_state_dict(saved)
    assert opt.state_dict()["state"] == {} and opt.param_groups[0]["step"] == 1
    theta, g = p.detach().clone(), _grad((3,), 0)
    p.grad = g.clone()
    opt.step()
    xi = torch.randn(3, dtype=F64, generator=torch.Generator().manual_seed(3))
    want, _ = _baoab_by_hand(theta, g, torch.zeros(3, dtype=F64), h=0.2, gamma=1.0, beta_t=0.4, M=1, wd=0.0, xi=xi)  # fmt: skip
    assert _max_diff(p.detach(), want) < TOL


def test_kinetic_state_dict_is_plain_data(tmp_path):
    """``state_dict`` stores the projection and the β schedule as their data forms (``to_dict()``), so that
    ``torch.load(weights_only=True)`` reads it back."""
    p = _param_2((3,), 0)
    opt = KineticLangevin(
        [{"params": [p]}, {"params": [_param_2((2,), 1)], "projection": None, "beta": 0.5}],
        lr=0.1,
        beta=Cosine(1.0, 0.1, T=10),
        projection=Clip(0.5),
        seed=0,
    )
    p.grad = _grad((3,), 0)
    opt.step()
    saved = opt.state_dict()
    first, second = saved["param_groups"]
    assert first["projection"] == {"kind": "clip", "A": 0.5}
    assert first["beta"] == {"kind": "cosine", "start": 1.0, "end": 0.1, "T": 10.0}
    assert second["projection"] is None and second["beta"] == 0.5
    torch.save(saved, tmp_path / "k.pt")
    back = torch.load(tmp_path / "k.pt", weights_only=True)
    assert back["param_groups"][0]["projection"] == {"kind": "clip", "A": 0.5}


def test_langevin_step_with_several_groups_is_the_hand_step():
    """Three groups: SGD with M = 4, λ = 0.5, β = 0.3 ("mean_field"); SGD with M = 5, β_s = 0.02 ("loss": the noise
    uses M·β_s); no noise. One step equals ``θ − lr(M g + λθ) + sqrt(2·β·lr)·ξ`` with ONE flat draw ξ for the
    noisy groups in order from ``manual_seed(seed)`` (to 1e-13), and ``θ − lr·g`` for the plain group. The
    recorded stats: step 1, β = the largest given β, η_eff = lr per coordinate (mean, min, max over the noisy
    coordinates), noise and drift RMS of the hand increments (rel. 1e-12). Negative control: the "loss" group
    with β_s unmultiplied is off by > 1e-3."""
    ps = [_param_2((4, 3), 0), _param_2((5, 2), 1), _param_2((3,), 2)]
    groups = [
        {"params": [ps[0]], "lr": 0.01, "beta": 0.3, "n_particles": 4, "weight_decay": 0.5},
        {"params": [ps[1]], "lr": 0.02, "beta": 0.02, "n_particles": 5, "temperature_convention": "loss"},
        {"params": [ps[2]], "lr": 0.1, "noise": False},
    ]
    opt = Langevin(groups, lr=1.0, beta=0.0, seed=12)
    thetas = [p.detach().clone() for p in ps]
    grads = [_grad(p.shape, k) for k, p in enumerate(ps)]
    for p, g in zip(ps, grads):
        p.grad = g.clone()
    opt.step()
    xi = torch.empty(12 + 10, dtype=F64).normal_(generator=torch.Generator().manual_seed(12))
    drift0 = 0.01 * (4 * grads[0] + 0.5 * thetas[0])
    drift1 = 0.02 * 5 * grads[1]
    noise0 = math.sqrt(2 * 0.3 * 0.01) * xi[:12].view(4, 3)
    noise1 = math.sqrt(2 * 5 * 0.02 * 0.02) * xi[12:].view(5, 2)
    assert _max_diff(ps[0].detach(), thetas[0] - drift0 + noise0) < TOL
    assert _max_diff(ps[1].detach(), thetas[1] - drift1 + noise1) < TOL
    assert _max_diff(ps[2].detach(), thetas[2] - 0.1 * grads[2]) < TOL
    wrong = thetas[1] - drift1 + math.sqrt(2 * 0.02 * 0.02) * xi[12:].view(5, 2)
    assert _max_diff(ps[1].detach(), wrong) > 1e-3
    stats = opt.last_stats
    assert stats.step == 1 and stats.n == 22 and stats.beta == 0.3
    assert stats.eta_eff_mean == pytest.approx((12 * 0.01 + 10 * 0.02) / 22, rel=1e-12)
    assert stats.eta_eff_min == 0.01 and stats.eta_eff_max == 0.02
    noise_sq = float(noise0.square().sum() + noise1.square().sum())
    drift_sq = float(drift0.square().sum() + drift1.square().sum())
    assert stats.noise_rms == pytest.approx(math.sqrt(noise_sq / 22), rel=1e-12)
    assert stats.drift_rms == pytest.approx(math.sqrt(drift_sq / 22), rel=1e-12)
    per_group = opt.last_group_stats
    assert per_group[1].beta == 0.02  # the β as given, in its convention
    assert per_group[1].eta_eff_mean == pytest.approx(0.02, rel=1e-12)
    assert per_group[2].noise_rms == 0.0 and per_group[2].n == 3


def test_langevin_noise_comes_from_the_generator_passed():
    """With ``generator=`` (a seeded CPU generator) the step is the hand step with ξ drawn from a generator
    seeded alike (to 1e-13); the optimizer keeps no seed then. Negative control: the global RNG's draw (what
    a seed drawn at construction would give) is off by > 1e-3."""
    p = _param_2((6,), 0)
    opt = Langevin([p], lr=0.05, beta=0.2, generator=torch.Generator().manual_seed(31))
    assert opt.state_dict()["seed"] is None
    theta, g = p.detach().clone(), _grad((6,), 0)
    p.grad = g.clone()
    opt.step()
    xi = torch.empty(6, dtype=F64).normal_(generator=torch.Generator().manual_seed(31))
    assert _max_diff(p.detach(), theta - 0.05 * g + math.sqrt(2 * 0.2 * 0.05) * xi) < TOL
    other = torch.empty(6, dtype=F64).normal_(generator=torch.Generator().manual_seed(32))
    assert _max_diff(p.detach(), theta - 0.05 * g + math.sqrt(2 * 0.2 * 0.05) * other) > 1e-3


def test_langevin_noise_blocks_are_counter_based_per_block_and_step():
    """``noise_block = 2`` on a (6, 2) parameter: the noise of particles ``[2j, 2j + 2)`` at the group's step
    ``t`` is drawn from ``manual_seed(derive_seed(seed, f"noise/0/{j}/{t}"))`` (hand step to 1e-13 at t = 0 and
    1). Negative control: the shared draw from ``manual_seed(seed)`` is off by > 1e-3."""
    p = _param_2((6, 2), 0)
    opt = Langevin([p], lr=0.1, beta=0.5, n_particles=6, noise_block=2, seed=21)
    amplitude = math.sqrt(2 * 0.5 * 0.1)
    for t in range(2):
        theta, g = p.detach().clone(), _grad((6, 2), t)
        p.grad = g.clone()
        opt.step()
        xi = torch.cat([
            torch.empty(2, 2, dtype=F64).normal_(generator=torch.Generator().manual_seed(derive_seed(21, f"noise/0/{j}/{t}")))
            for j in range(3)
        ])  # fmt: skip
        assert _max_diff(p.detach(), theta - 0.1 * 6 * g + amplitude * xi) < TOL
        shared = torch.empty(12, dtype=F64).normal_(generator=torch.Generator().manual_seed(21)).view(6, 2)
        assert _max_diff(p.detach(), theta - 0.1 * 6 * g + amplitude * shared) > 1e-3


def test_noise_blocks_of_two_dtypes_in_one_group_are_independent():
    """A float64 and a float32 (64, 3) parameter in one group with ``noise_block = 2`` fall in two buckets: the
    second draws from ``noise/0/{j}/{t}/param1`` (its first parameter's index), the first keeps
    ``noise/0/{j}/{t}``. Their noises' correlation is within 5/sqrt(n) of 0 (n = 192; before, one key gave both
    the same numbers: correlation 1 - 2e-16, the control below)."""
    M = 64
    a = torch.nn.Parameter(torch.zeros(M, 3, dtype=F64))
    b = torch.nn.Parameter(torch.zeros(M, 3, dtype=torch.float32))
    opt = Langevin([a, b], lr=0.5, beta=1.0, n_particles=M, noise_block=2, seed=3)
    a.grad, b.grad = torch.zeros_like(a), torch.zeros_like(b)
    opt.step()
    x, y = a.detach().flatten(), b.detach().double().flatten()
    assert abs(float(torch.corrcoef(torch.stack([x, y]))[0, 1])) < 5 / math.sqrt(x.numel())
    first = torch.cat([
        torch.empty(2, 3, dtype=F64).normal_(generator=torch.Generator().manual_seed(derive_seed(3, f"noise/0/{j}/0")))
        for j in range(M // 2)
    ])  # fmt: skip
    assert torch.equal(a.detach(), first)  # lr·2β = 1: θ = ξ
    same_key = torch.cat([
        torch.empty(2, 3, dtype=torch.float32).normal_(generator=torch.Generator().manual_seed(derive_seed(3, f"noise/0/{j}/0")))
        for j in range(M // 2)
    ]).double().flatten()  # fmt: skip
    assert float(torch.corrcoef(torch.stack([x, same_key]))[0, 1]) > 0.999  # the old key: b's noise would be a's
    assert not torch.allclose(y, same_key)


def test_langevin_seed_and_generator_errors_are_worded_exactly():
    """A negative seed and a generator that is not a ``torch.Generator`` are refused naming the argument and
    what it got; a checkpoint asking a generator-built optimizer for a generator on another device says
    which devices are involved and what to pass."""
    p = _param_2((2,), 0)
    with pytest.raises(ValueError, match=r"^seed must be ≥ 0, got -1$"):
        Langevin([p], lr=0.1, beta=0.1, seed=-1)
    with pytest.raises(TypeError, match=r"^generator must be a torch.Generator or None, got int$"):
        Langevin([p], lr=0.1, beta=0.1, generator=42)
    opt = Langevin([p], lr=0.1, beta=0.1, generator=torch.Generator())
    saved = opt.state_dict()
    saved["generators"] = {"cuda:0": torch.Generator().get_state()}
    with pytest.raises(
        ValueError,
        match=r"^the generator passed to Langevin is on cpu but noisy parameters are on cuda:0; pass a "
        r"generator on the parameters' device, or seed= for one generator per device$",
    ):
        opt.load_state_dict(saved)


def test_langevin_warnings_are_worded_exactly_and_point_at_the_caller():
    """The two warnings of the constructor (Adam noise not preconditioned; Adam momentum with noise) start
    with their documented sentence and are attributed to the line that built the optimizer (this file).
    Negative control: no warning for a preconditioned Adam drift without momentum."""
    p = _param_2((2,), 0)
    with pytest.warns(UserWarning) as record:
        Langevin([p], lr=0.1, beta=0.1, drift="adam", noise_preconditioned=False)
    assert len(record) == 1
    assert str(record[0].message).startswith(
        "Langevin: an Adam drift with noise_preconditioned=False gets the noise sqrt(2·β·lr)·ξ while its drift"
    )
    assert record[0].filename == _warning_site()
    with pytest.warns(UserWarning) as record:
        Langevin([p], lr=0.1, beta=0.1, drift="adam", betas=(0.9, 0.999))
    assert len(record) == 1
    assert str(record[0].message).startswith(
        "Langevin: a group with noise has an Adam drift with momentum β1 > 0: the chain's stationary law is "
        "biased beyond the Euler–Maruyama O(η) bias"
    )
    assert record[0].filename == _warning_site()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Langevin([p], lr=0.1, beta=0.1, drift="adam")


def test_langevin_state_dict_is_plain_data(tmp_path):
    """``state_dict``: a β schedule as its ``to_dict()``, a constant β as a float, a projection as its
    ``to_dict()`` and no projection as ``None``; it reads back with ``torch.load(weights_only=True)``."""
    p, q = _param_2((3,), 0), _param_2((2,), 1)
    opt = Langevin(
        [{"params": [p], "beta": Cosine(1.0, 0.1, T=10), "projection": Clip(2.0)}, {"params": [q]}],
        lr=0.1,
        beta=0.25,
        seed=0,
    )
    p.grad, q.grad = _grad((3,), 0), _grad((2,), 1)
    opt.step()
    saved = opt.state_dict()
    first, second = saved["param_groups"]
    assert first["beta"] == {"kind": "cosine", "start": 1.0, "end": 0.1, "T": 10.0}
    assert first["projection"] == {"kind": "clip", "A": 2.0}
    assert second["beta"] == 0.25 and type(second["beta"]) is float and second["projection"] is None
    assert "BETA" not in first and saved["n_steps"] == 1 and saved["seed"] == 0
    torch.save(saved, tmp_path / "l.pt")
    back = torch.load(tmp_path / "l.pt", weights_only=True)
    assert back["param_groups"][0]["beta"] == first["beta"]


def test_langevin_state_without_a_step_count_keeps_the_loaders_count():
    """A state dict without ``n_steps`` (an older checkpoint) leaves the loader's own count: a loader that took
    2 steps and then loads one reports ``last_stats.step == 3`` after its next step, whose θ is the hand step
    with the saver's generator (to 1e-13)."""
    a, b = _param_2((4,), 0), _param_2((4,), 1)
    saver = Langevin([a], lr=0.05, beta=0.1, seed=4)
    loader = Langevin([b], lr=0.05, beta=0.1, seed=8)
    for k in range(2):
        b.grad = _grad((4,), k)
        loader.step()
    a.grad = _grad((4,), 5)
    saver.step()
    saved = saver.state_dict()
    del saved["n_steps"]
    loader.load_state_dict(saved)
    theta, g = b.detach().clone(), _grad((4,), 6)
    b.grad = g.clone()
    loader.step()
    assert loader.last_stats.step == 3
    gen = torch.Generator().manual_seed(4)
    torch.empty(4, dtype=F64).normal_(generator=gen)  # the saver's first step
    xi = torch.empty(4, dtype=F64).normal_(generator=gen)
    assert _max_diff(b.detach(), theta - 0.05 * g + math.sqrt(2 * 0.1 * 0.05) * xi) < TOL


def test_langevin_adam_state_with_integer_step_counts_resumes_exactly():
    """Adam state entries whose ``step`` is a Python int (older checkpoints) load: the continuation equals the
    uninterrupted run bit for bit, and its first Adam step uses the bias correction of step 2: equal to
    ``torch.optim.Adam`` (β1 = 0, ε = 1, two steps) plus the hand noise (to 1e-13)."""
    a, b, ref = _param_2((5,), 0), _param_2((5,), 1), _param_2((5,), 0)
    saver = Langevin([a], lr=0.05, beta=0.1, drift="adam", seed=6)
    adam = torch.optim.Adam([ref], lr=0.05, betas=(0.0, 0.999), eps=1.0)  # a noisy group's defaults
    gen = torch.Generator().manual_seed(6)

    def reference_step(g: torch.Tensor) -> None:
        ref.grad = g.clone()
        adam.step()
        state = adam.state[ref]
        bias2 = 1 - 0.999 ** float(state["step"])
        eta = 0.05 / (state["exp_avg_sq"].sqrt() / math.sqrt(bias2) + 1.0)  # η_eff = lr/(sqrt(v̂) + ε)
        with torch.no_grad():
            ref.add_((2 * 0.1 * eta).sqrt() * torch.empty(5, dtype=F64).normal_(generator=gen))

    g = _grad((5,), 0)
    a.grad = g.clone()
    saver.step()
    reference_step(g)
    saved = saver.state_dict()
    for entry in saved["state"].values():
        entry["step"] = int(entry["step"])
    loader = Langevin([b], lr=0.05, beta=0.1, drift="adam", seed=9)
    loader.load_state_dict(saved)
    with torch.no_grad():
        b.copy_(a)
    g = _grad((5,), 1)
    a.grad, b.grad = g.clone(), g.clone()
    saver.step()
    loader.step()
    reference_step(g)
    assert torch.equal(a.detach(), b.detach())
    assert _max_diff(b.detach(), ref.detach()) < 1e-12  # torch's Adam rounds in another order


def test_langevin_stats_after_loading_describe_no_step_yet():
    """Right after loading a state saved at step 2, ``last_stats`` reports the loaded count and no coordinates
    (``step == 2``, ``n == 0``: no step has been taken since), and ``last_group_stats`` is ``[None]``; the next
    step is described fully (step 3, η_eff = lr on all 4 coordinates)."""
    a, b = _param_2((4,), 0), _param_2((4,), 1)
    saver = Langevin([a], lr=0.05, beta=0.1, seed=4)
    for k in range(2):
        a.grad = _grad((4,), k)
        saver.step()
    loader = Langevin([b], lr=0.05, beta=0.1, seed=8)
    loader.load_state_dict(saver.state_dict())
    stats = loader.last_stats
    assert stats is not None and stats.step == 2 and stats.n == 0
    assert loader.last_group_stats == [None]
    b.grad = _grad((4,), 3)
    loader.step()
    assert loader.last_stats.step == 3 and loader.last_stats.n == 4 and loader.last_stats.eta_eff_mean == 0.05


@pytest.mark.parametrize("cls", [Langevin, KineticLangevin])
def test_a_state_saved_before_any_noise_continues_identically_in_a_used_optimizer(cls):
    """The saver has drawn no noise yet (β(0) = 0: no generator in its state); the loader has (its own generator
    advanced). After loading, both continue bit for bit (the documented continuation): the loader's generator
    restarts from the loaded seed, as the saver's will. Before the fix the loader kept its advanced generator.
    Negative control: without the load the two runs differ."""

    def pair(load: bool):
        beta = Step([0.0, 0.5], [1])
        a, b = _param_2((4,), 0), _param_2((4,), 1)
        saver = cls([a], lr=0.1, beta=beta, seed=1)
        loader = cls([b], lr=0.1, beta=0.5, seed=2)
        b.grad = torch.ones(4, dtype=F64)
        loader.step()  # draws noise: the loader's generator exists and has moved
        a.grad = torch.ones(4, dtype=F64)
        saver.step()  # β(0) = 0: no noise, no generator
        if load:
            loader.load_state_dict(saver.state_dict())
        loader.param_groups[0]["beta"] = beta  # a load keeps the loader's own β: give it the saver's
        with torch.no_grad():
            b.copy_(a)
        for _ in range(3):
            a.grad = torch.ones(4, dtype=F64)
            b.grad = torch.ones(4, dtype=F64)
            saver.step()
            loader.step()
        return a.detach(), b.detach()

    a, b = pair(load=True)
    assert torch.equal(a, b)
    a, b = pair(load=False)
    assert not torch.equal(a, b)


def test_a_warning_from_add_param_group_points_at_its_caller():
    """The not-Gibbs warning raised by add_param_group names the line that called it (stacklevel), not the
    caller's caller (before the fix: pytest's own python.py)."""
    opt = Langevin([_param_2((4,), 0)], lr=0.1, beta=0.1)
    with pytest.warns(UserWarning, match="noise_preconditioned=False") as record:
        opt.add_param_group({"params": [_param_2((4,), 1)], "drift": "adam", "noise_preconditioned": False})
    assert record[0].filename == _warning_site()


def _param_3(shape, seed=0, scale=1.0) -> nn.Parameter:
    g = torch.Generator().manual_seed(seed)
    return nn.Parameter(scale * torch.randn(shape, generator=g, dtype=F64))


def _loss_2(x: torch.Tensor) -> torch.Tensor:
    return (x**4).sum() / 4 + (torch.sin(3 * x)).sum()


class _Layer(nn.Module):
    """A particle layer with its own projection (counts its calls)."""

    n_particles = 6

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(6, 3, dtype=F64, generator=torch.Generator().manual_seed(1)))

    def project_(self) -> None:
        with torch.no_grad():
            self.w.clamp_(-1.5, 1.5)


def _groups(ps, layer):
    return [
        {"params": [ps[0]], "projection": Clip(2.0)},
        {"params": [ps[1]], "projection": Sphere(dim=-1), "n_particles": 4},
        {"params": [layer.w], "projection": LayerProjection(layer), "n_particles": 6},
        {"params": [ps[2]], "noise": False},
    ]


def _run_2(opt, params, steps):
    for _ in range(steps):
        opt.zero_grad()
        sum(_loss_2(p) for p in params).backward()
        opt.step()


def _plain(x) -> bool:
    if isinstance(x, dict):
        return all(isinstance(k, (str, int)) and _plain(v) for k, v in x.items())
    if isinstance(x, (list, tuple)):
        return all(_plain(v) for v in x)
    return x is None or isinstance(x, (bool, int, float, str, torch.Tensor))


@pytest.mark.parametrize("drift", DRIFTS)
def test_state_dict_round_trips_through_torch_load_weights_only(tmp_path, drift):
    """Save after 5 steps to a real file, load it with ``weights_only=True`` into a fresh optimizer (another
    seed) on copies of the parameters: the next 5 steps equal the uninterrupted run bit for bit (moments,
    per-parameter step counts, the schedule's clock, the generator), and so do the statistics."""
    beta = Cosine(0.5, 0.01, T=10)
    ps = [_param_3((6, 2), 0), _param_3((4, 3), 1), _param_3((3,), 2)]
    layer = _Layer()
    opt = Langevin(_groups(ps, layer), lr=0.01, beta=beta, drift=drift, seed=3)
    _run_2(opt, [*ps, layer.w], 5)
    state = opt.state_dict()
    assert _plain(state), "state_dict must hold only tensors, numbers, strings, lists, dicts, None"
    torch.save(state, tmp_path / "opt.pt")
    loaded = torch.load(tmp_path / "opt.pt", weights_only=True)
    groups = loaded["param_groups"]
    assert groups[0]["beta"] == {"kind": "cosine", "start": 0.5, "end": 0.01, "T": 10.0}
    assert groups[0]["projection"] == {"kind": "clip", "A": 2.0}
    assert groups[1]["projection"] == {"kind": "sphere", "radius": 1.0, "dim": [-1]}
    assert groups[2]["projection"] == {"kind": "layer", "layer": "_Layer"}

    qs = [nn.Parameter(p.detach().clone()) for p in ps]
    layer2 = _Layer()
    with torch.no_grad():
        layer2.w.copy_(layer.w)
    resumed = Langevin(_groups(qs, layer2), lr=0.01, beta=beta, drift=drift, seed=99)
    resumed.load_state_dict(loaded)
    assert resumed.param_groups[2]["projection"].layer is layer2  # the optimizer's own objects are kept
    _run_2(opt, [*ps, layer.w], 5)
    _run_2(resumed, [*qs, layer2.w], 5)
    for p, q in zip([*ps, layer.w], [*qs, layer2.w]):
        assert torch.equal(p.detach(), q.detach())
    assert resumed.last_stats == opt.last_stats
    assert resumed.last_group_stats == opt.last_group_stats


def test_a_constant_beta_is_saved_as_a_number_and_a_dict_beta_is_accepted(tmp_path):
    p = _param_3((3,))
    opt = Langevin([p], lr=0.1, beta=0.25, seed=0)
    assert opt.state_dict()["param_groups"][0]["beta"] == 0.25
    q = _param_3((3,))
    opt = Langevin(
        [q], lr=0.1, beta={"kind": "step", "values": [0.5, 0.1], "boundaries": [3]},
        projection={"kind": "clip", "A": 1.0}, seed=0,
    )  # fmt: skip
    assert opt.param_groups[0]["beta"] == Step([0.5, 0.1], [3])
    assert isinstance(opt.param_groups[0]["projection"], Clip)
    with pytest.raises(ValueError, match="beta.*'kind' in"):
        Langevin([q], lr=0.1, beta={"kind": "cosin", "start": 1, "end": 0, "T": 1})


def test_a_lambda_schedule_cannot_be_saved_and_says_why():
    p = _param_3((3,))
    opt = Langevin(
        [{"params": [p]}, {"params": [_param_3((2,))], "beta": lambda k: 0.1}], lr=0.1, beta=0.1, seed=0
    )
    with pytest.raises(
        TypeError, match=r"param group 1.*cannot be saved.*meanfield\.drift\.schedules.*weights_only"
    ):
        opt.state_dict()


def test_first_step_on_a_small_network_cannot_explode():
    """A one-layer causal LM with ``CausalParticleAttention(M=16)``, β = lr = 1e-3, ``drift="adam"`` and
    every other argument at its default. Before the fix (ε = 1e-8, bias-corrected ``v̂₁ = g₁²``) the first
    step had ``η_eff`` mean 1.2 (1,200 × lr) and max 1.5e3, and kicked a weight by 1.55 (5.6 × the weights'
    RMS). Now ``η_eff ≤ lr/ε = lr`` and the noise/drift ratio is the SGD chain's ``sqrt(2β/(lr·⟨g²⟩))``
    (``g`` the Wasserstein gradient) within 10 % (measured: 146 vs 144)."""
    lr, beta = 1e-3, 1e-3
    gen = torch.Generator().manual_seed(0)
    model = TransformerLM(64, 32, 64, 1, 16, attention="particle", generator=gen)
    idx = torch.randint(0, 64, (16, 33), generator=gen)
    groups = Langevin.param_groups_for(model)
    opt = Langevin(groups, lr=lr, beta=beta, drift="adam", seed=0)
    particles = groups[0]["params"]
    before = [p.detach().clone() for p in particles]
    logits = model(idx[:, :-1])  # (B, T, V)
    nn.functional.cross_entropy(logits.flatten(0, 1), idx[:, 1:].flatten()).backward()
    M = groups[0]["n_particles"]
    mean_g2 = torch.cat([(M * p.grad).flatten() for p in particles]).square().mean().item()
    opt.step()
    stats = opt.last_stats
    assert stats.eta_eff_max <= lr * (1 + 1e-12)
    ratio = stats.noise_rms / stats.drift_rms
    assert ratio == pytest.approx(math.sqrt(2 * beta / (lr * mean_g2)), rel=0.1)
    kick = max(float((p.detach() - b).abs().max()) for p, b in zip(particles, before))
    scale = float(torch.cat([b.flatten() for b in before]).square().mean().sqrt())
    assert kick < 0.05 * scale, (kick, scale)


def test_eta_eff_is_bounded_by_lr_over_eps_whatever_the_gradient():
    """Gradients down to 1e-30 (and exactly 0): with the default ε = 1 of a group with noise,
    ``η_eff = lr/(M·sqrt(v̂) + ε) ≤ lr``, so the noise variance per coordinate is at most ``2β·lr``."""
    lr, beta, M = 0.01, 0.5, 8
    theta = nn.Parameter(torch.zeros(M, 1000, dtype=F64))
    opt = Langevin([theta], lr=lr, beta=beta, drift="adam", n_particles=M, seed=1)
    g = torch.logspace(-30, 0, 1000, dtype=F64).repeat(M, 1)  # (M, 1000)
    g[:, 0] = 0.0
    theta.grad = g
    opt.step()
    stats = opt.last_stats
    assert stats.eta_eff_max <= lr * (1 + 1e-12) and stats.eta_eff_min >= lr / (M + 1) * (1 - 1e-12)
    assert stats.noise_rms <= math.sqrt(2 * beta * lr)


def _convention_run(beta: float, convention: str, drift: str = "sgd", M: int = 8, lr: float = 0.01) -> torch.Tensor:
    """Six steps of ``Langevin(n_particles=M, seed=2)`` on ``_loss_2/M`` from ``_param_3((M, 5), 0)``: the state."""
    p = _param_3((M, 5), 0)
    opt = Langevin([p], lr=lr, beta=beta, drift=drift, n_particles=M, temperature_convention=convention, seed=2)
    for _ in range(6):
        opt.zero_grad()
        (_loss_2(p) / M).backward()
        opt.step()
    return p.detach().clone()


def test_loss_convention_with_an_adam_drift_is_the_same_chain_too():
    """With ``drift="adam"`` (preconditioned noise sqrt(2·M·β_s·η_eff)) the runs at β (mean-field) and β/M (loss)
    are bit-identical (M = 8, exact in binary); control: β/M read as a mean-field β gives another chain."""
    M, beta = 8, 0.4
    run = _convention_run(beta, "mean_field", "adam")
    assert torch.equal(run, _convention_run(beta / M, "loss", "adam"))
    assert not torch.allclose(_convention_run(beta / M, "mean_field", "adam"), run)


def test_loss_convention_is_the_seeds_chain_at_corresponding_beta():
    """The seeds write ``θ ← θ − η_s∇L + sqrt(2β_s η_s)ξ`` (raw gradient). With ``n_particles = M`` the
    project's step is ``θ ← θ − lr·M∇L + sqrt(2β·lr)ξ``: the same chain when ``η_s = M·lr`` and
    ``β_s = β/M``. ``temperature_convention="loss"`` takes ``β_s``: the runs at ``β`` (mean-field) and at
    ``β/M`` (loss) are bit-identical (M = 8: the conversion is exact in binary), and both equal the seeds'
    update written out by hand with the same draws."""
    M, lr, beta = 8, 0.01, 0.4
    runs = [_convention_run(beta, "mean_field"), _convention_run(beta / M, "loss")]
    assert torch.equal(runs[0], runs[1])
    q = _param_3((M, 5), 0).detach()
    gen = torch.Generator().manual_seed(2)
    eta_s, beta_s = M * lr, beta / M
    for _ in range(6):
        x = q.clone().requires_grad_(True)
        (_loss_2(x) / M).backward()
        xi = torch.empty(M * 5, dtype=F64).normal_(generator=gen).view(M, 5)
        q = q - eta_s * x.grad + math.sqrt(2 * beta_s * eta_s) * xi
    torch.testing.assert_close(runs[0], q, rtol=0, atol=1e-13)
    wrong = _convention_run(beta / M, "mean_field")  # β_s read as a mean-field β
    assert not torch.allclose(wrong, runs[0]), "negative control: the conventions differ by M"


def test_bad_temperature_convention_is_named():
    with pytest.raises(ValueError, match="temperature_convention must be one of"):
        Langevin([_param_3((2,))], lr=0.1, beta=0.1, temperature_convention="seeds")


def test_per_group_stats_describe_each_group():
    """Two noisy groups with different β, M and lr and a plain Adam group: each group's stats match its own
    increments; ``last_stats`` is the noisy groups together; ``dataclasses.asdict`` gives floats and ints."""
    p, q, r = _param_3((4, 50), 0), _param_3((8, 30), 1), _param_3((20,), 2)
    opt = Langevin(
        [
            {"params": [p], "n_particles": 4, "beta": 0.2},
            {"params": [q], "n_particles": 8, "beta": 0.05, "lr": 0.002},
            {"params": [r], "noise": False},
        ],
        lr=0.01, beta=0.1, seed=1, drift="sgd",
    )  # fmt: skip
    opt.param_groups[2]["drift"] = "adam"
    assert opt.last_group_stats == [None, None, None]
    before = [x.detach().clone() for x in (p, q, r)]
    grads = [torch.randn_like(x) for x in (p, q, r)]
    for x, g in zip((p, q, r), grads):
        x.grad = g.clone()
    opt.step()
    gs = opt.last_group_stats
    assert len(gs) == 3 and all(isinstance(s, LangevinStats) for s in gs)
    for s, x, x0, g, M, lr, beta in (
        (gs[0], p, before[0], grads[0], 4, 0.01, 0.2),
        (gs[1], q, before[1], grads[1], 8, 0.002, 0.05),
    ):
        drift = lr * M * g
        noise = x.detach() - x0 + drift
        assert s.beta == beta and s.n == x.numel() and s.eta_eff_mean == lr
        assert s.drift_rms == pytest.approx(drift.square().mean().sqrt().item(), rel=1e-12)
        assert s.noise_rms == pytest.approx(noise.square().mean().sqrt().item(), rel=1e-9)
    plain = gs[2]
    assert plain.noise_rms == 0.0 and plain.beta == 0.0 and plain.drift_to_noise == math.inf
    assert plain.drift_rms == pytest.approx((r.detach() - before[2]).square().mean().sqrt().item(), rel=1e-9)
    assert opt.last_stats.n == p.numel() + q.numel() and opt.last_stats.beta == 0.2
    assert opt.last_stats.eta_eff_min == 0.002 and opt.last_stats.eta_eff_max == 0.01
    assert all(isinstance(v, (int, float)) for v in dataclasses.asdict(gs[0]).values())


def test_a_parameter_that_joins_late_gets_its_own_bias_correction():
    """``q`` has no gradient for 5 steps, then one: its first Adam step is torch's first step
    (``m̂ = g``, ``v̂ = g²``), not one bias-corrected with the group's step count 6 (which would make
    ``v̂ = 0.001·g²/(1 − 0.999⁶)`` ≈ 0.17 g² and the step 2.4× too long)."""
    p, q = _param_3((5,), 0), _param_3((4,), 1)
    q_ref = nn.Parameter(q.detach().clone())
    opt = Langevin([p, q], lr=0.01, beta=0.0, drift="adam", betas=(0.9, 0.999), eps=1e-8, noise=False, seed=0)
    ref = torch.optim.Adam([q_ref], lr=0.01, betas=(0.9, 0.999), eps=1e-8)
    for _ in range(5):
        opt.zero_grad()
        _loss_2(p).backward()
        opt.step()
    for _ in range(3):
        opt.zero_grad()
        ref.zero_grad()
        (_loss_2(p) + _loss_2(q)).backward()
        _loss_2(q_ref).backward()
        opt.step()
        ref.step()
        torch.testing.assert_close(q.detach(), q_ref.detach(), rtol=1e-12, atol=1e-14)
    assert int(opt.state[q]["step"]) == 3 and int(opt.state[p]["step"]) == 8


def test_late_parameter_in_a_noisy_group_gets_its_own_preconditioner():
    """Noisy group, defaults (β1 = 0, ε = 1): ``q`` gets its first gradient at step 6. Its step is
    ``−lr·g/(|g| + 1) + sqrt(2β·lr/(|g| + 1))·ξ`` with its own ``v̂ = g²``, ``ξ`` its slice of the step's one
    flat draw (the bucket ``[p, q]``, drawn whole every step), while ``p`` (step count 6) keeps its own."""
    lr, beta = 0.05, 0.3
    p, q = _param_3((5,), 0), _param_3((4,), 1)
    opt = Langevin([p, q], lr=lr, beta=beta, drift="adam", seed=4)
    gen = torch.Generator().manual_seed(4)
    for _ in range(5):
        opt.zero_grad()
        _loss_2(p).backward()
        opt.step()
        torch.empty(9, dtype=F64).normal_(generator=gen)
    q0 = q.detach().clone()
    opt.zero_grad()
    (_loss_2(p) + _loss_2(q)).backward()
    g = q.grad.clone()
    opt.step()
    xi = torch.empty(9, dtype=F64).normal_(generator=gen)[5:]  # q's slice
    eta = lr / (g.abs() + 1.0)
    expected = q0 - eta * g + (2 * beta * eta).sqrt() * xi
    torch.testing.assert_close(q.detach(), expected, rtol=1e-12, atol=1e-14)
    assert int(opt.state[q]["step"]) == 1 and int(opt.state[p]["step"]) == 6
    stats = opt.last_stats
    assert stats.n == 9 and stats.eta_eff_max <= lr


def test_a_state_saved_before_per_parameter_counts_still_resumes_exactly(tmp_path):
    """A state dict of the earlier layout (no per-parameter ``step``, no ``temperature_convention``) loads;
    the per-parameter counts are taken from the group's, and the continuation equals the uninterrupted run."""
    ps = [_param_3((6, 2), 0), _param_3((3,), 1)]
    opt = Langevin(ps, lr=0.01, beta=0.2, drift="adam", seed=3)
    _run_2(opt, ps, 4)
    state = opt.state_dict()
    for entry in state["state"].values():
        del entry["step"]
    for group in state["param_groups"]:
        del group["temperature_convention"]
    torch.save(state, tmp_path / "old.pt")
    qs = [nn.Parameter(p.detach().clone()) for p in ps]
    resumed = Langevin(qs, lr=0.01, beta=0.2, drift="adam", seed=5)
    resumed.load_state_dict(torch.load(tmp_path / "old.pt", weights_only=True))
    _run_2(opt, ps, 3)
    _run_2(resumed, qs, 3)
    for p, q in zip(ps, qs):
        assert torch.equal(p.detach(), q.detach())
    assert resumed.param_groups[0]["temperature_convention"] == "mean_field"


N_DRAWS = 2500


def _setup(beta2=0.2):
    g = torch.Generator().manual_seed(0)
    a = torch.nn.Parameter(torch.randn(3, 4, generator=g, dtype=torch.float64))
    b = torch.nn.Parameter(torch.randn(5, generator=g, dtype=torch.float64))
    c = torch.nn.Parameter(torch.randn(4, generator=g, dtype=torch.float32))  # a second (device, dtype) draw
    e = torch.nn.Parameter(torch.randn(2, 3, generator=g, dtype=torch.float64))
    groups = [
        {"params": [a, b, c], "lr": 0.01, "beta": 0.5},
        {"params": [e], "lr": 0.04, "beta": beta2, "n_particles": 3},
    ]
    scales = [math.sqrt(2 * 0.5 * 0.01)] * 3 + [math.sqrt(2 * 0.2 * 0.04)]  # the oracle's β·lr per group
    return [a, b, c, e], groups, scales


def _increments(params, opt, scales, n_steps):
    rows = []
    for _ in range(n_steps):
        before = [p.detach().double().clone() for p in params]
        for p in params:
            p.grad = torch.zeros_like(p)
        opt.step()
        rows.append(
            torch.cat([((p.detach().double() - q) / s).flatten() for p, q, s in zip(params, before, scales)])
        )
    return torch.stack(rows)  # (n, 27)


@pytest.mark.parametrize("background", [False, True], ids=["inline draw", "background draw"])
def test_optimizer_noise_is_white_across_parameters_groups_and_steps(monkeypatch, background):
    if background:
        monkeypatch.setattr(_background, "OVERLAP_MIN", 0)
    params, groups, scales = _setup()
    opt = Langevin(groups, lr=0.1, beta=1.0, drift="sgd", seed=4)
    xi = _increments(params, opt, scales, 2 * N_DRAWS)  # (2n, 27)
    rows = xi.reshape(N_DRAWS, -1)  # (n, 54): steps 2j and 2j+1 side by side
    # float32 coordinates: θ + δ rounds θ to 2^-24 relative, ≈ 1e-7/0.1 = 1e-6 relative to δ: negligible
    check = whiteness(rows)
    assert check.passed, check.failures
    assert check.detectable_variance < 0.035
    assert check.detectable_mean_correlation < 0.004 and check.detectable_pair_correlation < 0.13

    # negative controls, on the same draws
    shared = rows.clone()
    shared[:, 21:27] = shared[:, 0:6]  # group 1 given group 0's noise
    assert not whiteness(shared).passed
    repeated = xi.clone()
    repeated[1::2] = repeated[0::2]  # every other step repeats the one before
    assert not whiteness(repeated.reshape(N_DRAWS, -1)).passed


def test_a_wrong_group_temperature_is_caught():
    """Negative control: the oracle's scale assumes β = 0.2 for group 1; a run at β = 0.2 × 1.05² (noise
    5 % too large on the 6 coordinates of group 1) fails the variance statistic."""
    params, groups, scales = _setup(beta2=0.2 * 1.05**2)
    opt = Langevin(groups, lr=0.1, beta=1.0, drift="sgd", seed=4)
    xi = _increments(params, opt, scales, 2 * N_DRAWS)
    assert not whiteness(xi[:, 21:27].reshape(N_DRAWS, -1)).passed


def test_a_schedule_scales_the_noise_of_each_step():
    """``β_t`` from a schedule: the increments of step ``t`` divided by ``sqrt(2·β_t·lr)`` are white."""
    g = torch.Generator().manual_seed(1)
    p = torch.nn.Parameter(torch.randn(20, generator=g, dtype=torch.float64))
    beta = Linear(1.0, 0.25, T=2 * N_DRAWS)
    opt = Langevin([p], lr=0.02, beta=beta, seed=5)
    rows = []
    for t in range(2 * N_DRAWS):
        before = p.detach().clone()
        p.grad = torch.zeros_like(p)
        opt.step()
        rows.append((p.detach() - before) / math.sqrt(2 * beta(t) * 0.02))
    rows = torch.stack(rows)
    check = whiteness(rows.reshape(N_DRAWS, -1))
    assert check.passed, check.failures
    wrong = torch.stack(
        [r * math.sqrt(beta(t) / beta(t + 1)) for t, r in enumerate(rows)]
    )  # schedule off by one step
    # an off-by-one step changes β by 0.0075 % per step: too small to see; a constant-β reading is not
    constant = torch.stack([r * math.sqrt(beta(t) / 1.0) for t, r in enumerate(rows)])
    assert not whiteness(constant.reshape(N_DRAWS, -1)).passed
    assert whiteness(wrong.reshape(N_DRAWS, -1)).passed  # stated limit: the check cannot see an off-by-one


def test_a_nan_after_an_overflowing_finite_gradient_is_still_found():
    """The norm of a huge finite gradient overflows float32 and is recomputed in float64; the check must go on
    to the next parameter, whose NaN it names."""
    from meanfield.optim import Langevin

    a, b = torch.nn.Parameter(torch.zeros(4)), torch.nn.Parameter(torch.zeros(3))
    opt = Langevin([a, b], lr=1e-3, beta=0.0)
    a.grad = torch.full((4,), 3e38)  # finite; ‖a.grad‖ overflows in float32
    b.grad = torch.tensor([0.0, float("nan"), 0.0])
    with pytest.raises(ValueError) as caught:
        opt.step()
    assert str(caught.value) == (
        "the gradient of parameter 1 (shape (3,)) of param group 0 has 1 non-finite entries (NaN or Inf); "
        "Langevin needs finite gradients (check the loss, lower lr, or clip the gradients). No parameter was "
        "changed."
    )
    assert torch.equal(a.detach(), torch.zeros(4)) and torch.equal(b.detach(), torch.zeros(3))


def test_an_overflowing_step_says_what_to_do():
    from meanfield.optim import Langevin

    p = torch.nn.Parameter(torch.zeros(2))
    opt = Langevin([p], lr=1e30, beta=0.0)
    p.grad = torch.full((2,), 1e20)
    with pytest.raises(ValueError, match=r"lower lr \(the parameters have diverged, or lr is far too large\)\. "
                       r"No parameter was changed\.$"):  # fmt: skip
        opt.step()


def test_the_momentum_warning_says_why_and_what_to_do():
    from meanfield.optim import Langevin

    p = torch.nn.Parameter(torch.zeros(2))
    with pytest.warns(UserWarning, match=r"^Langevin: a group with noise has an Adam drift with momentum β1 > 0: "
                      r"the chain's stationary law is biased .* for the Gibbs law\.$"):  # fmt: skip
        Langevin([p], lr=1e-2, beta=0.1, drift="adam", betas=(0.9, 0.999))


def test_langevin_accepts_an_empty_parameter_and_refuses_a_strided_one():
    """The public path: an empty parameter next to a real one steps (the real one by the SGD rule, β = 0); a
    slice with holes in the second group is refused when the layout is built (the first step), naming it."""
    w = torch.nn.Parameter(torch.tensor([1.0, -2.0], dtype=F64))
    empty = torch.nn.Parameter(torch.zeros(0, dtype=F64))
    opt = Langevin([w, empty], lr=0.1, beta=0.0, seed=0)
    (w.square().sum() + empty.sum()).backward()
    opt.step()
    torch.testing.assert_close(
        w.detach(), torch.tensor([1.0, -2.0], dtype=F64) * (1 - 0.2), rtol=0, atol=1e-15
    )
    assert empty.shape == (0,)
    holes = torch.zeros(4, 4, dtype=F64)[:, :2].requires_grad_()  # a leaf whose memory has holes
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(
            ValueError, match=r"^parameter 0 of param group 1 \(shape \(4, 2\), strides \(4, 1\)\)"
        ):
            strided = Langevin([{"params": [w]}, {"params": [holes]}], lr=0.1, beta=0.0, seed=0)
            holes.sum().backward()
            strided.step()  # the layout is built at the first step


# mutmut's trampolines add frames: a warning's stack level moves under it
UNDER_MUTMUT = "MUTANT_UNDER_TEST" in os.environ


TOL_2 = 1e-12  # float64 rounding of a few steps on numbers of order one


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _param_4(shape, seed: int) -> nn.Parameter:
    return nn.Parameter(torch.randn(shape, dtype=F64, generator=_gen(seed)))


def _grad_2(shape, seed: int) -> torch.Tensor:
    return torch.randn(shape, dtype=F64, generator=_gen(1000 + seed))


def _diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max())


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


def _run_3(opt, params, steps, offset):
    for t in range(steps):
        for k, p in enumerate(params):
            p.grad = _grad_2(p.shape, offset + 10 * t + k)
        opt.step()


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


def _np_sq(F):
    F = np.asarray(F, dtype=np.float64)
    return ((F[:, None, :] - F[None, :, :]) ** 2).sum(2)


def _np_farthest(D, k):
    chosen = [int(np.argmin(D.sum(1)))]
    nearest = D[chosen[0]].copy()
    for _ in range(k - 1):
        nearest[chosen] = -1
        nxt = int(np.argmax(nearest))
        chosen.append(nxt)
        nearest = np.minimum(nearest, D[nxt])
    return chosen


def test_non_finite_entries_are_counted_and_located():
    """A gradient with 2 NaN and 1 Inf entries in parameter 1 of group 1 raises naming them; nothing changes."""
    a, b, c = _param_4((3,), 0), _param_4((2, 2), 1), _param_4((2, 3), 2)
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
    assert _diff(p.detach(), math.sqrt(2 * 0.25 * 0.5) * xi) < TOL_2


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


def test_three_sgd_steps_with_two_groups_a_schedule_and_a_clip_are_the_hand_steps():
    """Group 0: SGD, M = 3, λ = 0.2, β = Linear(0.4 → 0.1, T = 2), Clip(1.2); group 1: M = 2 without the scaling,
    β = 0.05 in the "loss" convention (noise uses scale·β_s = 1·0.05: the ×M of that convention is the
    group's scale, off here). Each step's noise is ONE draw of 6 + 4 normals
    from the continuing generator ``manual_seed(5)``, group 0 first. Matches the hand steps to 1e-12; the recorded
    statistics (step, β the largest, η_eff, RMS of the noise and drift increments) and the groups' step counts
    match too. Negative controls: the noise of the groups in the other order, and β_s multiplied by M = 2 although the
    scaling is off, are off by > 1e-3."""
    a, b = _param_4((3, 2), 0), _param_4((2, 2), 1)
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
        ga, gb = _grad_2((3, 2), t), _grad_2((2, 2), 10 + t)
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
        assert _diff(a.detach(), ta) < TOL_2 and _diff(b.detach(), tb) < TOL_2
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
    p = _param_4((3, 2), 3)
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
        g = _grad_2((3, 2), 20 + t)
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
    assert _diff(p.detach(), want) < TOL_2
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
    p, q = _param_4((4,), 0), _param_4((2,), 1)
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
    assert _diff(p.detach(), theta) < TOL_2 and torch.equal(q.detach(), q0)
    assert [g["step"] for g in opt.param_groups] == [1, 0]
    assert opt.last_group_stats[1] is None and opt.last_group_stats[0].noise_rms == 0.0
    assert opt.last_stats.beta == 0.0
    assert opt.step(closure) is not None
    xi = torch.empty(4, dtype=F64).normal_(generator=_gen(4))
    theta = theta - 0.1 * theta + math.sqrt(2 * 0.3 * 0.1) * xi
    assert _diff(p.detach(), theta) < TOL_2
    assert opt.step() is None


def test_stats_before_any_step_and_for_groups_added_since():
    """Before a step ``last_stats`` is None and ``last_group_stats`` is ``[None]`` per group; a group added after a
    step gets a trailing ``None``."""
    p = _param_4((2,), 0)
    opt = Langevin([p], lr=0.1, beta=0.1, seed=0)
    assert opt.last_stats is None and opt.last_group_stats == [None]
    p.grad = torch.ones(2, dtype=F64)
    opt.step()
    opt.add_param_group({"params": [_param_4((2,), 1)]})
    stats = opt.last_group_stats
    assert len(stats) == 2 and stats[1] is None and stats[0].n == 2
    assert opt.last_stats is opt.last_stats  # cached


def test_sparse_gradients_are_refused_by_group():
    """A sparse gradient raises ``param group 1: Langevin does not support sparse gradients``."""
    p, q = _param_4((3,), 0), _param_4((3,), 1)
    opt = Langevin([{"params": [p]}, {"params": [q]}], lr=0.1, beta=0.1, seed=0)
    p.grad = torch.ones(3, dtype=F64)
    q.grad = torch.ones(3, dtype=F64).to_sparse()
    with pytest.raises(ValueError, match=r"^param group 1: Langevin does not support sparse gradients$"):
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

    pa = [_param_4((3, 2), 0), _param_4((4,), 1)]
    A = build(11, pa)
    _run_3(A, pa, 3, 0)
    state = A.state_dict()
    assert state["seed"] == 11 and state["n_steps"] == 3
    assert state["param_groups"][0]["beta"] == Linear(0.3, 0.1, T=4).to_dict()
    assert state["param_groups"][0]["projection"] == {"kind": "clip", "A": 2.0}
    assert state["param_groups"][1]["beta"] == 0.2 and state["param_groups"][1]["projection"] is None
    assert list(state["generators"]) == ["cpu"]
    pb = [nn.Parameter(_param_4((3, 2), 5)), nn.Parameter(_param_4((4,), 6))]
    B = build(99, pb)
    schedule = B.param_groups[0]["beta"]
    _run_3(B, pb, 2, 500)
    for x, y in zip(pb, pa):
        x.data.copy_(y.data)
    B.load_state_dict(state)
    assert B.param_groups[0]["beta"] is schedule
    assert isinstance(B.param_groups[0]["projection"], Clip)
    assert [g["step"] for g in B.param_groups] == [3, 3]
    assert B.state_dict()["seed"] == 11 and B.state_dict()["n_steps"] == 3
    _run_3(A, pa, 2, 100)
    _run_3(B, pb, 2, 100)
    assert all(torch.equal(x.detach(), y.detach()) for x, y in zip(pa, pb))
    assert B.last_stats.step == 5 and A.last_stats.step == 5


def test_a_lambda_schedule_cannot_be_saved():
    """``state_dict`` of a group whose β is a lambda raises a TypeError naming the group's schedule."""
    opt = Langevin([_param_4((2,), 0)], lr=0.1, beta=lambda k: 0.1, seed=0)
    with pytest.raises(TypeError, match=r"^the β schedule of param group 0 is <function "):
        opt.state_dict()


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
    assert np.max(np.abs(new2(X).detach().numpy() - want)) < TOL_2
    assert layer.n_particles == 5


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


def test_particle_features_are_parameters_or_outputs_flattened():
    """Without X: ``[w_i, c_i]`` per row; with X: ``φ_i(X)`` flattened example-major, from the numpy forward."""
    layer = _layer()
    want = np.concatenate([layer.w.detach().numpy(), layer.c.detach().numpy()[:, None]], 1)
    assert np.array_equal(layer.particle_features().numpy(), want)
    X = torch.randn(3, 3, dtype=F64, generator=_gen(7))
    phi = _np_phi(X, layer.w, layer.c)  # (N, M, 2)
    want = np.transpose(phi, (1, 0, 2)).reshape(5, -1)
    got = layer.particle_features(X)
    assert got.shape == (5, 6) and np.max(np.abs(got.numpy() - want)) < TOL_2 and not got.requires_grad


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


def test_subsample_is_prune_of_select():
    """``subsample(k, strategy, …)`` is the layer of the selected particles (numpy forward of those rows)."""
    layer = _layer(M=6, seed=9)
    X = torch.randn(4, 3, dtype=F64, generator=_gen(2))
    chosen = torch.randperm(6, generator=_gen(6))[:3].sort().values.tolist()
    new = layer.subsample(3, generator=_gen(6))
    want = _np_phi(X, layer.w, layer.c)[:, chosen].mean(1)
    assert np.max(np.abs(new(X).detach().numpy() - want)) < TOL_2
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
    p = _param_4((3,), 0)
    theta = p.detach().clone()
    opt = Langevin([p], lr=0.1, beta=lambda k: -1.0, noise=False, seed=0)
    p.grad = torch.ones(3, dtype=F64)
    opt.step()
    assert _diff(p.detach(), theta - 0.1) < TOL_2
    stats = opt.last_group_stats[0]
    assert stats.beta == 0.0 and stats.noise_rms == 0.0 and opt.param_groups[0]["step"] == 1


def test_a_state_saved_before_any_step_resets_the_loaders_generators_and_fills_missing_options():
    """A state saved before any noise (no generators in it) loaded into an optimizer that has stepped: the loader's
    generator restarts from the saver's seed (its next step equals the saver's first), and options missing from
    the saved groups (an older checkpoint) take the loader's defaults."""
    pa, pb = _param_4((4,), 0), _param_4((4,), 0)
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


def test_a_loaded_state_does_not_bring_the_savers_particle_rows():
    """``particle_rows`` (a sharded rank's rows of the particle axis) is this optimizer's configuration, like β
    and the projection: loading a state saved by a rank holding rows 0–8 (its shard) into an optimizer of the whole layer
    (no ``particle_rows``) leaves it without them, and its own β; the moments and step count are the saver's."""
    import warnings

    def make(**group):
        p = torch.nn.Parameter(torch.zeros(8, 3, dtype=torch.float64))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return p, Langevin([{"params": [p], **group}], lr=0.1, beta=0.5, n_particles=8, seed=0)

    p, saver = make(particle_rows=(0, 8), beta=0.2)
    p.grad = torch.ones_like(p)
    saver.step()
    p2, loader = make()
    loader.load_state_dict(saver.state_dict())
    group = loader.param_groups[0]
    assert "particle_rows" not in group and group["beta"] == 0.5
    assert loader.state_dict()["n_steps"] == saver.state_dict()["n_steps"] == 1
