"""The Langevin optimizer's promises (issue 11): checkpoints as data, a first step that cannot explode, the
stationary law of the Adam/RMSprop drift with and without momentum, the temperature conventions, and the
per-group statistics.

Each of the three defects of the issue is a test here that fails on the code before the fix:
``test_state_dict_round_trips_through_torch_load_weights_only`` (a ``Cosine`` schedule in the state),
``test_first_step_on_a_small_network_cannot_explode`` (``η_eff`` up to 1.5e3 at step 1) and
``test_default_adam_drift_with_noise_samples_the_chain_law`` (the old defaults β1 = 0.9, ε = 1e-8 there:
``⟨η_eff⟩ = 21 × lr``, ``u = 2.1`` instead of 0.1, and momentum). Measured by running this file against the
old ``optim.py``/``schedules.py``/``projections.py``: 14 of its 15 tests fail (all but the closed-form
Lyapunov test).

Statistical checks use tolerance ``Z·SE`` (``Z = 5``), float64 and fixed seeds; each states the smallest error it
detects and has a negative control that must be rejected.
"""

from __future__ import annotations

import dataclasses
import math
import warnings

import pytest
import torch
from torch import nn

from meanfield.drift.schedules import Cosine, Step
from meanfield.nn.transformer import TransformerLM
from meanfield.optim import (
    DRIFTS,
    Clip,
    Langevin,
    LangevinStats,
    LayerProjection,
    Sphere,
    momentum_variance_factor,
)
from meanfield.studies.stats import Z, mean_se

F64 = torch.float64


def _param(shape, seed=0, scale=1.0) -> nn.Parameter:
    g = torch.Generator().manual_seed(seed)
    return nn.Parameter(scale * torch.randn(shape, generator=g, dtype=F64))


def _loss(x: torch.Tensor) -> torch.Tensor:
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


def _run(opt, params, steps):
    for _ in range(steps):
        opt.zero_grad()
        sum(_loss(p) for p in params).backward()
        opt.step()


# ----------------------------------------------------------------------------------------------------------
# checkpoints: plain data, torch.load(weights_only=True), bit-identical resume
# ----------------------------------------------------------------------------------------------------------


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
    ps = [_param((6, 2), 0), _param((4, 3), 1), _param((3,), 2)]
    layer = _Layer()
    opt = Langevin(_groups(ps, layer), lr=0.01, beta=beta, drift=drift, seed=3)
    _run(opt, [*ps, layer.w], 5)
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
    _run(opt, [*ps, layer.w], 5)
    _run(resumed, [*qs, layer2.w], 5)
    for p, q in zip([*ps, layer.w], [*qs, layer2.w]):
        assert torch.equal(p.detach(), q.detach())
    assert resumed.last_stats == opt.last_stats
    assert resumed.last_group_stats == opt.last_group_stats


def test_a_constant_beta_is_saved_as_a_number_and_a_dict_beta_is_accepted(tmp_path):
    p = _param((3,))
    opt = Langevin([p], lr=0.1, beta=0.25, seed=0)
    assert opt.state_dict()["param_groups"][0]["beta"] == 0.25
    q = _param((3,))
    opt = Langevin(
        [q], lr=0.1, beta={"kind": "step", "values": [0.5, 0.1], "boundaries": [3]},
        projection={"kind": "clip", "A": 1.0}, seed=0,
    )  # fmt: skip
    assert opt.param_groups[0]["beta"] == Step([0.5, 0.1], [3])
    assert isinstance(opt.param_groups[0]["projection"], Clip)
    with pytest.raises(ValueError, match="beta.*'kind' in"):
        Langevin([q], lr=0.1, beta={"kind": "cosin", "start": 1, "end": 0, "T": 1})


def test_a_lambda_schedule_cannot_be_saved_and_says_why():
    p = _param((3,))
    opt = Langevin(
        [{"params": [p]}, {"params": [_param((2,))], "beta": lambda k: 0.1}], lr=0.1, beta=0.1, seed=0
    )
    with pytest.raises(
        TypeError, match=r"param group 1.*cannot be saved.*meanfield\.drift\.schedules.*weights_only"
    ):
        opt.state_dict()


# ----------------------------------------------------------------------------------------------------------
# the first step cannot explode
# ----------------------------------------------------------------------------------------------------------


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


# ----------------------------------------------------------------------------------------------------------
# the stationary law of the Adam/RMSprop drift
# ----------------------------------------------------------------------------------------------------------


def _stationary_adam(betas, *, a=1.0, lr=0.1, beta=1e-4, n=200_000, steps=500, seed=11):
    """Run the Adam drift with noise on ``F = a/2 Σθ²`` (``n`` coordinates, replicas) from the Gibbs law;
    return ``(mean θ², its SE, u = a·⟨η_eff⟩ over the last half)``."""
    theta = nn.Parameter(
        math.sqrt(beta / a) * torch.randn(n, dtype=F64, generator=torch.Generator().manual_seed(seed))
    )
    kwargs = {} if betas is None else {"betas": betas}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        opt = Langevin([theta], lr=lr, beta=beta, drift="adam", seed=seed, **kwargs)
    etas = []
    for k in range(steps):
        theta.grad = a * theta.detach()
        opt.step()
        if k >= steps // 2:
            etas.append(opt.last_stats.eta_eff_mean)
    est = mean_se(theta.detach() ** 2)
    return est, a * sum(etas) / len(etas)


def test_default_adam_drift_with_noise_samples_the_chain_law():
    """Default Adam drift on a group with noise (β1 = 0: RMSprop-preconditioned, pSGLD), ε = 1 ≫
    ``a·sd θ = 0.01``, so ``η_eff ≈ lr/1.01`` is nearly constant: the chain is ``θ ← (1 − u)θ + sqrt(2βh)ξ``
    with stationary variance ``β/(a(1 − u/2))``, ``u = a·η_eff ≈ 0.099``. ``n = 200 000`` replicas: relative SE
    ``sqrt(2/n) = 0.32 %``, smallest detectable error 1.6 %. Negative controls: the continuous β/a (−5 %) and
    the law with the old default momentum β1 = 0.9 (+85 %) are rejected. On the code before the fix (defaults
    β1 = 0.9, ε = 1e-8) this test fails: ``u = 2.1``."""
    a, beta = 1.0, 1e-4
    est, u = _stationary_adam(None, a=a, beta=beta)
    assert 0.098 < u < 0.1
    assert est.agrees(beta / a * momentum_variance_factor(u, 0.0), Z), (est, u)
    assert est.agrees(beta / (a * (1 - u / 2)), Z)
    assert not est.agrees(beta / a, Z), "negative control: the continuous Gibbs value β/a"
    assert not est.agrees(beta / a * momentum_variance_factor(u, 0.9), Z), "negative control: momentum law"


def test_momentum_chain_variance_is_the_lyapunov_solution():
    """With β1 = 0.9 (asked for explicitly: it warns) the stationary variance is the Lyapunov solution
    ``β/a·2(1 − β1² + 2β1u)/((1 − β1)(2(1 + β1) − (1 − β1)u))`` (≈ 1.95 β/a at u = 0.099), far from the
    Gibbs value β/a (negative control) and from the momentum-free chain value."""
    a, beta = 1.0, 1e-4
    with pytest.warns(UserWarning, match="momentum"):
        Langevin([_param((2,))], lr=0.1, beta=beta, drift="adam", betas=(0.9, 0.999))
    est, u = _stationary_adam((0.9, 0.999), a=a, beta=beta)
    assert est.agrees(beta / a * momentum_variance_factor(u, 0.9), Z), (est, u)
    assert not est.agrees(beta / a, Z), "negative control: the Gibbs value"
    assert not est.agrees(beta / a * momentum_variance_factor(u, 0.0), Z), "negative control: no momentum"


def test_momentum_variance_factor_against_a_numerical_lyapunov_solution():
    """The closed form against ``scipy.linalg.solve_discrete_lyapunov`` of the (θ, h·m) recursion."""
    from scipy.linalg import solve_discrete_lyapunov

    for u in (0.01, 0.1, 0.5):
        for r in (0.0, 0.5, 0.9, 0.99):
            A = [[1 - (1 - r) * u, -r], [(1 - r) * u, r]]
            sigma = solve_discrete_lyapunov(A, [[2 * u, 0.0], [0.0, 0.0]])  # β/a = 1: σ² = 2βh = 2u/a
            assert momentum_variance_factor(u, r) == pytest.approx(sigma[0][0], rel=1e-10)
    assert momentum_variance_factor(0.1, 0.0) == pytest.approx(1 / (1 - 0.05), rel=1e-15)
    # beyond the stability limit 2(1 + β1)/(1 − β1) = 38
    assert momentum_variance_factor(38.001, 0.9) == math.inf


# ----------------------------------------------------------------------------------------------------------
# temperature conventions
# ----------------------------------------------------------------------------------------------------------


def test_loss_convention_is_the_seeds_chain_at_corresponding_beta():
    """The seeds write ``θ ← θ − η_s∇L + sqrt(2β_s η_s)ξ`` (raw gradient). With ``n_particles = M`` the
    project's step is ``θ ← θ − lr·M∇L + sqrt(2β·lr)ξ``: the same chain when ``η_s = M·lr`` and
    ``β_s = β/M``. ``temperature_convention="loss"`` takes ``β_s``: the runs at ``β`` (mean-field) and at
    ``β/M`` (loss) are bit-identical (M = 8: the conversion is exact in binary), and both equal the seeds'
    update written out by hand with the same draws."""
    M, lr, beta = 8, 0.01, 0.4
    runs = []
    for convention, b in (("mean_field", beta), ("loss", beta / M)):
        p = _param((M, 5), 0)
        opt = Langevin([p], lr=lr, beta=b, n_particles=M, temperature_convention=convention, seed=2)
        for _ in range(6):
            opt.zero_grad()
            (_loss(p) / M).backward()
            opt.step()
        runs.append(p.detach().clone())
    assert torch.equal(runs[0], runs[1])
    q = _param((M, 5), 0).detach()
    gen = torch.Generator().manual_seed(2)
    eta_s, beta_s = M * lr, beta / M
    for _ in range(6):
        x = q.clone().requires_grad_(True)
        (_loss(x) / M).backward()
        xi = torch.empty(M * 5, dtype=F64).normal_(generator=gen).view(M, 5)
        q = q - eta_s * x.grad + math.sqrt(2 * beta_s * eta_s) * xi
    torch.testing.assert_close(runs[0], q, rtol=0, atol=1e-13)
    wrong = _param((M, 5), 0)
    opt = Langevin([wrong], lr=lr, beta=beta / M, n_particles=M, seed=2)  # β_s read as a mean-field β
    for _ in range(6):
        opt.zero_grad()
        (_loss(wrong) / M).backward()
        opt.step()
    assert not torch.allclose(wrong.detach(), runs[0]), "negative control: the conventions differ by M"


def test_bad_temperature_convention_is_named():
    with pytest.raises(ValueError, match="temperature_convention must be one of"):
        Langevin([_param((2,))], lr=0.1, beta=0.1, temperature_convention="seeds")


# ----------------------------------------------------------------------------------------------------------
# per-group statistics, per-parameter bias correction
# ----------------------------------------------------------------------------------------------------------


def test_per_group_stats_describe_each_group():
    """Two noisy groups with different β, M and lr and a plain Adam group: each group's stats match its own
    increments; ``last_stats`` is the noisy groups together; ``dataclasses.asdict`` gives floats and ints."""
    p, q, r = _param((4, 50), 0), _param((8, 30), 1), _param((20,), 2)
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
    p, q = _param((5,), 0), _param((4,), 1)
    q_ref = nn.Parameter(q.detach().clone())
    opt = Langevin([p, q], lr=0.01, beta=0.0, drift="adam", betas=(0.9, 0.999), eps=1e-8, noise=False, seed=0)
    ref = torch.optim.Adam([q_ref], lr=0.01, betas=(0.9, 0.999), eps=1e-8)
    for _ in range(5):
        opt.zero_grad()
        _loss(p).backward()
        opt.step()
    for _ in range(3):
        opt.zero_grad()
        ref.zero_grad()
        (_loss(p) + _loss(q)).backward()
        _loss(q_ref).backward()
        opt.step()
        ref.step()
        torch.testing.assert_close(q.detach(), q_ref.detach(), rtol=1e-12, atol=1e-14)
    assert int(opt.state[q]["step"]) == 3 and int(opt.state[p]["step"]) == 8


def test_late_parameter_in_a_noisy_group_gets_its_own_preconditioner():
    """Noisy group, defaults (β1 = 0, ε = 1): ``q`` gets its first gradient at step 6. Its step is
    ``−lr·g/(|g| + 1) + sqrt(2β·lr/(|g| + 1))·ξ`` with its own ``v̂ = g²``, ``ξ`` its slice of the step's one
    flat draw (the bucket ``[p, q]``, drawn whole every step), while ``p`` (step count 6) keeps its own."""
    lr, beta = 0.05, 0.3
    p, q = _param((5,), 0), _param((4,), 1)
    opt = Langevin([p, q], lr=lr, beta=beta, drift="adam", seed=4)
    gen = torch.Generator().manual_seed(4)
    for _ in range(5):
        opt.zero_grad()
        _loss(p).backward()
        opt.step()
        torch.empty(9, dtype=F64).normal_(generator=gen)
    q0 = q.detach().clone()
    opt.zero_grad()
    (_loss(p) + _loss(q)).backward()
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
    ps = [_param((6, 2), 0), _param((3,), 1)]
    opt = Langevin(ps, lr=0.01, beta=0.2, drift="adam", seed=3)
    _run(opt, ps, 4)
    state = opt.state_dict()
    for entry in state["state"].values():
        del entry["step"]
    for group in state["param_groups"]:
        del group["temperature_convention"]
    torch.save(state, tmp_path / "old.pt")
    qs = [nn.Parameter(p.detach().clone()) for p in ps]
    resumed = Langevin(qs, lr=0.01, beta=0.2, drift="adam", seed=5)
    resumed.load_state_dict(torch.load(tmp_path / "old.pt", weights_only=True))
    _run(opt, ps, 3)
    _run(resumed, qs, 3)
    for p, q in zip(ps, qs):
        assert torch.equal(p.detach(), q.detach())
    assert resumed.param_groups[0]["temperature_convention"] == "mean_field"
