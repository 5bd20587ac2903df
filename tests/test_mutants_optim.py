"""Value tests of :mod:`meanfield.optim` (conventions, kinetic, langevin, layers) written against mutation testing.

Every check compares the optimizers with an independent answer: one step written out by hand from the
documented formulas (``θ − lr·g + sqrt(2·β·lr)·ξ`` for :class:`Langevin`, the BAOAB kick–drift–friction–drift of
:class:`KineticLangevin`), with the normals ``ξ`` reproduced from a generator seeded as the optimizer's is; the
closed form of :func:`momentum_variance_factor` against a numerical Lyapunov solution (scipy); the documented
structure of :func:`param_groups_for`; the exact wording of the errors and warnings that name an argument.
Nothing here is statistical: the comparisons are exact up to float64 rounding (tolerances ``1e-13`` or tighter,
stated at each assertion), and each hand computation has a negative control (a deliberately wrong convention or
seed) that must be rejected by the same comparison.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import scipy.linalg
import torch
from torch import nn

import meanfield.optim.langevin as langevin_module
from meanfield.drift.schedules import Cosine, Step
from meanfield.nn.sharded import ParticleShard
from meanfield.optim import Clip, KineticLangevin, Langevin, LayerProjection, momentum_variance_factor
from meanfield.optim.layers import param_groups_for
from meanfield.seeds import derive_seed

F64 = torch.float64
TOL = 1e-13  # float64 rounding of a few operations on numbers of order one


def _param(shape, seed: int) -> nn.Parameter:
    return nn.Parameter(torch.randn(shape, dtype=F64, generator=torch.Generator().manual_seed(seed)))


def _grad(shape, seed: int) -> torch.Tensor:
    return torch.randn(shape, dtype=F64, generator=torch.Generator().manual_seed(1000 + seed))


def _max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max())


# ======================================================================================================
# conventions: momentum_variance_factor


def _lyapunov_factor(u: float, beta1: float) -> float:
    """``Var θ/(β/a)`` of the chain ``x' = A x + b ξ`` from scipy's discrete Lyapunov solver (β = a = 1)."""
    A = np.array([[1 - (1 - beta1) * u, -beta1], [(1 - beta1) * u, beta1]])
    h = u  # a = 1: h = u
    Q = np.array([[2 * h, 0.0], [0.0, 0.0]])  # b bᵀ with b = (sqrt(2βh), 0)
    return float(scipy.linalg.solve_discrete_lyapunov(A, Q)[0, 0])


@pytest.mark.parametrize("u, beta1", [(0.3, 0.0), (1.2, 0.5), (0.05, 0.9), (5.9, 0.5)])
def test_momentum_variance_factor_is_the_lyapunov_solution(u, beta1):
    """The closed form against scipy's solution of ``Σ = AΣAᵀ + bbᵀ`` (rel. 1e-9), also close to the
    stability edge (u = 5.9 < 6 at β1 = 0.5). Negative control: the solution at β1 + 0.05 differs by > 0.1 %."""
    assert momentum_variance_factor(u, beta1) == pytest.approx(_lyapunov_factor(u, beta1), rel=1e-9)
    wrong = _lyapunov_factor(u, beta1 + 0.05)
    assert abs(momentum_variance_factor(u, beta1) / wrong - 1) > 1e-3


@pytest.mark.parametrize("u, beta1", [(2.0, 0.0), (6.0, 0.5), (3.0, 0.0), (1e6, 0.9)])
def test_momentum_variance_factor_is_inf_at_and_beyond_the_stability_edge(u, beta1):
    """``u ≥ 2(1 + β1)/(1 − β1)``: the chain is not stable and the factor is ``inf`` (at the edge itself,
    u = 2 at β1 = 0 and u = 6 at β1 = 0.5, the denominator is exactly 0: ``inf``, not a division error).
    Negative control: just inside the edge the factor is finite and equals the Lyapunov solution."""
    assert momentum_variance_factor(u, beta1) == math.inf
    inside = 0.999 * 2 * (1 + beta1) / (1 - beta1)
    assert momentum_variance_factor(inside, beta1) == pytest.approx(_lyapunov_factor(inside, beta1), rel=1e-6)


@pytest.mark.parametrize("beta1", [1.0, 1.5, 2.0, 7.0])
def test_momentum_variance_factor_refuses_beta1_of_one_or_more(beta1):
    """β1 must lie in ``[0, 1)``: 1 itself and anything above are refused with the documented message
    (not answered with ``inf``)."""
    with pytest.raises(ValueError, match=rf"^beta1 must be in \[0, 1\), got {beta1}$"):
        momentum_variance_factor(0.1, beta1)


def test_momentum_variance_factor_names_its_arguments():
    """A negative or non-numeric ``u`` or ``β1`` is refused with a message that names it exactly."""
    with pytest.raises(ValueError, match=r"^u \(η_eff·a\) must be ≥ 0, got -1.0$"):
        momentum_variance_factor(-1.0, 0.0)
    with pytest.raises(TypeError, match=r"^u \(η_eff·a\) must be a real number, got str$"):
        momentum_variance_factor("1", 0.0)
    with pytest.raises(ValueError, match=r"^beta1 must be ≥ 0, got -0.1$"):
        momentum_variance_factor(0.1, -0.1)
    with pytest.raises(TypeError, match=r"^beta1 must be a real number, got NoneType$"):
        momentum_variance_factor(0.1, None)


# ======================================================================================================
# kinetic: KineticLangevin


def _baoab_by_hand(theta, grad, v, *, h, gamma, beta_t, M, wd, xi):
    """One documented step: v ← v − h(M g + λθ); θ ← θ + (h/2)v; v ← c v + sqrt(β_t(1 − c²)) ξ; θ ← θ + (h/2)v."""
    c = math.exp(-gamma * h)
    v = v - h * (M * grad + wd * theta)
    theta = theta + 0.5 * h * v
    v = c * v + math.sqrt(beta_t * (1 - c * c)) * xi
    return theta + 0.5 * h * v, v


def _kinetic_two_groups(seed: int = 7):
    ps = [_param((4, 3), 0), _param((5,), 1), _param((3, 2), 2)]
    groups = [
        {"params": ps[:2], "lr": 0.2, "friction": 1.5, "beta": 0.3, "n_particles": 4, "weight_decay": 0.25},
        {"params": ps[2:], "lr": 0.1, "friction": 0.5, "beta": 0.05, "n_particles": 3,
         "temperature_convention": "loss"},
    ]  # fmt: skip
    return ps, KineticLangevin(groups, lr=1.0, seed=seed)


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
    p, q = _param((6,), 3), _param((6,), 3)
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


KINETIC_GROUP_KEYS = {
    "params", "lr", "friction", "beta", "weight_decay", "n_particles", "mean_field_scaling",
    "temperature_convention", "projection", "step",
}  # fmt: skip


def test_kinetic_groups_hold_exactly_the_documented_options_as_floats():
    """The checked options are stored back as floats (an ``lr`` given as an int or a 0-d tensor becomes the
    float), in the constructor's defaults and in a group added later; a group holds exactly the documented
    keys (no stray spelling of one)."""
    p, q = _param((2,), 0), _param((2,), 1)
    opt = KineticLangevin([p], lr=torch.tensor(0.25, dtype=F64), friction=2, weight_decay=1)
    opt.add_param_group({"params": [q], "lr": 1})
    first, second = opt.param_groups
    assert type(first["lr"]) is float and first["lr"] == 0.25
    assert type(second["lr"]) is float and second["lr"] == 1.0
    assert type(first["friction"]) is float and first["friction"] == 2.0
    assert type(first["weight_decay"]) is float and first["weight_decay"] == 1.0
    assert set(first) == KINETIC_GROUP_KEYS and set(second) == KINETIC_GROUP_KEYS
    assert set(opt.defaults) == KINETIC_GROUP_KEYS - {"params"}


def test_kinetic_errors_name_where_the_bad_option_is():
    """Bad data forms of β or of the projection are refused naming the constructor or the group; a non-bool
    ``mean_field_scaling`` names the type it got."""
    p = _param((2,), 0)
    with pytest.raises(ValueError, match=r"^KineticLangevin: beta: schedule data needs 'kind'"):
        KineticLangevin([p], lr=0.1, beta={"kind": "nope"})
    with pytest.raises(ValueError, match=r"^KineticLangevin: projection: "):
        KineticLangevin([p], lr=0.1, projection={"kind": "nope"})
    with pytest.raises(TypeError, match=r"^KineticLangevin: mean_field_scaling must be a bool, got int$"):
        KineticLangevin([p], lr=0.1, mean_field_scaling=1)
    opt = KineticLangevin([p], lr=0.1)
    with pytest.raises(ValueError, match=r"^param group 1: beta: schedule data needs 'kind'"):
        opt.add_param_group({"params": [_param((2,), 1)], "beta": {"kind": "nope"}})
    with pytest.raises(TypeError, match=r"^param group 1: mean_field_scaling must be a bool, got str$"):
        opt.add_param_group({"params": [_param((2,), 1)], "mean_field_scaling": "yes"})
    assert len(opt.param_groups) == 1  # the refused groups were not kept


def test_kinetic_generator_on_another_device_is_a_clear_error():
    """An optimizer built with a generator (no seed) asked for a generator on another device (a checkpoint
    holding one for ``cuda:0``) says which device and what to pass."""
    opt = KineticLangevin([_param((2,), 0)], lr=0.1, beta=0.1, generator=torch.Generator())
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
    saver = KineticLangevin([_param((5,), 0)], lr=0.2, friction=1.0, beta=0.4, seed=5)
    p = _param((5,), 1)
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
    a, b = _param((4,), 0), _param((4,), 1)
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
    s = _param((3,), 0)
    saver = KineticLangevin([s], lr=0.2, friction=1.0, beta=Step([0.0, 0.4], [1]), seed=3)
    s.grad = torch.zeros(3, dtype=F64)
    saver.step()  # β(0) = 0 and no gradient: the velocity stays 0, no noise drawn
    saved = saver.state_dict()
    fresh = torch.Generator().manual_seed(3).get_state()  # nothing drawn: no generator, or one as seeded
    assert all(torch.equal(state, fresh) for state in saved["generators"].values())
    del saved["state"]
    p = _param((3,), 1)
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
    p = _param((3,), 0)
    opt = KineticLangevin(
        [{"params": [p]}, {"params": [_param((2,), 1)], "projection": None, "beta": 0.5}],
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


# ======================================================================================================
# langevin: Langevin


def test_langevin_step_with_several_groups_is_the_hand_step():
    """Three groups: SGD with M = 4, λ = 0.5, β = 0.3 ("mean_field"); SGD with M = 5, β_s = 0.02 ("loss": the noise
    uses M·β_s); no noise. One step equals ``θ − lr(M g + λθ) + sqrt(2·β·lr)·ξ`` with ONE flat draw ξ for the
    noisy groups in order from ``manual_seed(seed)`` (to 1e-13), and ``θ − lr·g`` for the plain group. The
    recorded stats: step 1, β = the largest given β, η_eff = lr per coordinate (mean, min, max over the noisy
    coordinates), noise and drift RMS of the hand increments (rel. 1e-12). Negative control: the "loss" group
    with β_s unmultiplied is off by > 1e-3."""
    ps = [_param((4, 3), 0), _param((5, 2), 1), _param((3,), 2)]
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
    p = _param((6,), 0)
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
    p = _param((6, 2), 0)
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


def test_langevin_seed_and_generator_errors_are_worded_exactly():
    """A negative seed and a generator that is not a ``torch.Generator`` are refused naming the argument and
    what it got; a checkpoint asking a generator-built optimizer for a generator on another device says
    which devices are involved and what to pass."""
    p = _param((2,), 0)
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


def _warning_site() -> str:
    """The file a warning raised with the optimizer's stacklevel must point at when the optimizer is built in
    this file: this file; behind mutmut's trampolines (two more frames, inside ``mutmut run``) the same stack
    level is the trampoline's wrapper, in mutmut's trampoline module."""
    if hasattr(langevin_module, "_mutmut_mutated"):
        import mutmut.mutation.trampoline as trampoline

        return trampoline.__file__
    return __file__


def test_langevin_warnings_are_worded_exactly_and_point_at_the_caller():
    """The two warnings of the constructor (Adam noise not preconditioned; Adam momentum with noise) start
    with their documented sentence and are attributed to the line that built the optimizer (this file).
    Negative control: no warning for a preconditioned Adam drift without momentum."""
    p = _param((2,), 0)
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
    p, q = _param((3,), 0), _param((2,), 1)
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
    a, b = _param((4,), 0), _param((4,), 1)
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
    a, b, ref = _param((5,), 0), _param((5,), 1), _param((5,), 0)
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
    a, b = _param((4,), 0), _param((4,), 1)
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


# ======================================================================================================
# layers: param_groups_for, LayerProjection


class _Named(nn.Module):
    """A particle layer naming its particle parameters: ``w`` is one, ``c`` (also M rows) is not."""

    particle_parameter_names = ("w",)

    def __init__(self, M: int) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.zeros(M, 2, dtype=F64))
        self.c = nn.Parameter(torch.zeros(M, dtype=F64))
        self.n_particles = M
        self.projected = 0

    def project_(self) -> None:
        self.projected += 1


class _Shaped(nn.Module):
    """A particle layer without names (its parameters with M rows are the particles), sharded: rows [4, 7) of 12."""

    def __init__(self, M: int) -> None:
        super().__init__()
        self.x = nn.Parameter(torch.zeros(M, 2, dtype=F64))
        self.y = nn.Parameter(torch.zeros(M, dtype=F64))
        self.z = nn.Parameter(torch.zeros(M + 1, dtype=F64))
        self.n_particles = M
        self.particle_shard = ParticleShard(4, 4 + M, 12)


class _Frozen(nn.Module):
    """A particle layer whose particles are all frozen (no group)."""

    def __init__(self, M: int) -> None:
        super().__init__()
        self.f = nn.Parameter(torch.zeros(M, dtype=F64), requires_grad=False)
        self.n_particles = M


class _Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Linear(2, 2, dtype=F64)
        self.shaped = _Shaped(3)
        self.frozen = _Frozen(5)
        self.named = _Named(4)
        self.out = nn.Linear(2, 1, dtype=F64)


def test_param_groups_for_builds_the_documented_groups():
    """The groups of a model with a sharded unnamed layer, a frozen layer, a named layer with ``project_()``
    and plain modules before and after them, in model order: one per particle layer with its particles
    (names, or M rows), ``n_particles`` (the shard's total M and its ``particle_rows``), noise, the layer's
    projection, the particle options; the frozen layer none; then every other trainable parameter in one plain
    group with ``others``."""
    model = _Model()
    groups = param_groups_for(model, others={"lr": 0.5}, lr=0.01)
    assert len(groups) == 3
    shaped, named, rest = groups
    assert [id(p) for p in shaped.pop("params")] == [id(model.shaped.x), id(model.shaped.y)]
    assert shaped == {"n_particles": 12, "particle_rows": (4, 7), "noise": True, "lr": 0.01}
    assert [id(p) for p in named.pop("params")] == [id(model.named.w)]
    projection = named.pop("projection")
    assert type(projection) is LayerProjection and projection.layer is model.named
    assert named == {"n_particles": 4, "noise": True, "lr": 0.01}
    plain = [
        model.inp.weight,
        model.inp.bias,
        model.shaped.z,
        model.named.c,
        model.out.weight,
        model.out.bias,
    ]
    assert [id(p) for p in rest.pop("params")] == [id(p) for p in plain]
    assert rest == {"noise": False, "n_particles": 1, "lr": 0.5}
    assert Langevin.param_groups_for(_Model(), others={"lr": 0.5}, lr=0.01)[1]["n_particles"] == 4


def test_param_groups_for_without_other_parameters_and_bad_model():
    """A model of particles only gives no plain group; a model that is not a module is refused, named."""
    layer = _Named(3)
    layer.c.requires_grad_(False)
    groups = param_groups_for(layer)
    assert len(groups) == 1 and [id(p) for p in groups[0]["params"]] == [id(layer.w)]
    with pytest.raises(TypeError, match=r"^model must be a torch.nn.Module, got str$"):
        param_groups_for("model")


def test_layer_projection_calls_the_layer_once_per_step_and_describes_itself():
    """:class:`LayerProjection` calls the layer's ``project_()`` once per step whatever the number of tensors,
    describes itself as ``{"kind": "layer", "layer": <class name>}``, and refuses a module without
    ``project_()``, naming its class."""
    layer = _Named(3)
    projection = LayerProjection(layer)
    projection.project_all_([layer.w, layer.c])
    assert layer.projected == 1
    x = torch.ones(2)
    assert projection.project_(x) is x and layer.projected == 2
    assert projection.to_dict() == {"kind": "layer", "layer": "_Named"}
    assert repr(projection) == "LayerProjection(_Named)"
    with pytest.raises(
        TypeError, match=r"^LayerProjection needs a module with a project_\(\) method, got Linear$"
    ):
        LayerProjection(nn.Linear(1, 1))
    opt = Langevin(param_groups_for(layer), lr=0.1, beta=0.0, seed=0)
    layer.w.grad, layer.c.grad = torch.ones(3, 2, dtype=F64), torch.ones(3, dtype=F64)
    opt.step()
    assert layer.projected == 3  # one step: one call
    assert _max_diff(layer.w.detach(), torch.full((3, 2), -0.3, dtype=F64)) < TOL  # θ − lr·M·g, M = 3
    assert _max_diff(layer.c.detach(), torch.full((3,), -0.1, dtype=F64)) < TOL  # plain group: θ − lr·g


# ======================================================================================================
# regressions: two bugs these tests found


@pytest.mark.parametrize("cls", [Langevin, KineticLangevin])
def test_a_state_saved_before_any_noise_continues_identically_in_a_used_optimizer(cls):
    """The saver has drawn no noise yet (β(0) = 0: no generator in its state); the loader has (its own generator
    advanced). After loading, both continue bit for bit (the documented continuation): the loader's generator
    restarts from the loaded seed, as the saver's will. Before the fix the loader kept its advanced generator.
    Negative control: without the load the two runs differ."""

    def pair(load: bool):
        beta = Step([0.0, 0.5], [1])
        a, b = _param((4,), 0), _param((4,), 1)
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
    opt = Langevin([_param((4,), 0)], lr=0.1, beta=0.1)
    with pytest.warns(UserWarning, match="noise_preconditioned=False") as record:
        opt.add_param_group({"params": [_param((4,), 1)], "drift": "adam", "noise_preconditioned": False})
    assert record[0].filename == _warning_site()
