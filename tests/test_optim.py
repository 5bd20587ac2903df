"""Tests of :mod:`meanfield.optim`: the Langevin optimizer.

Statistical checks use tolerance ``Z·SE`` (``Z = 5``: a correct check fails with probability ≈ 6e-7),
fixed seeds and float64; each states the smallest error it detects and has a negative control that must be
rejected. Exact equivalences (β = 0 is SGD/Adam) are checked to float tolerance.
"""

from __future__ import annotations

import copy
import math
import os
import warnings

import pytest
import torch
from torch import nn

from meanfield.drift.schedules import Linear, Step
from meanfield.optim import DRIFTS, Clip, Langevin, LangevinStats, LayerProjection, Sphere
from meanfield.studies.stats import Z, mean_se

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
