"""MeanFieldLangevin.free_energy: the closed form on Gaussian clouds, the parts, the pair convention, β per replica
and per time, the observable plumbing (simulate, sweep, run), bad input in one line."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

import meanfield as mf
from meanfield.drift.potentials import (
    Alignment,
    DoubleWell,
    GaussianInteraction,
    Interaction,
    LogInteraction,
    Quadratic,
    QuadraticInteraction,
)
from meanfield.drift.projections import Sphere
from meanfield.drift.schedules import Linear
from meanfield.metrics import gaussian_entropy_bias
from meanfield.studies.stats import Z

A, K, BETA = 1.5, 0.5, 0.4


def _gaussian_cloud(B: int, M: int, mean: torch.Tensor, cov: torch.Tensor, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(B, M, mean.numel(), generator=g, dtype=torch.float64)  # (B, M, d)
    return mean + z @ torch.linalg.cholesky(cov).T  # (B, M, d)


def _closed_form(mean: torch.Tensor, cov: torch.Tensor, a: float, k: float, beta: float) -> float:
    """F of N(m, S) for V = a/2|x|², W = k/2|z|²: a/2(|m|² + tr S) + k/2·tr S − β/2·log((2πe)^d det S)."""
    d = mean.numel()
    tr, logdet = float(cov.trace()), float(torch.logdet(cov))
    return (
        0.5 * a * (float(mean @ mean) + tr)
        + 0.5 * k * tr
        - 0.5 * beta * (d * math.log(2 * math.pi * math.e) + logdet)
    )


def test_a_gaussian_cloud_has_the_closed_form_free_energy():
    # 256 replicas of M = 400 exact draws of N(m, S) in d = 2. Each part against its exact mean: E Ĥ = H + the
    # Wishart bias (−0.0038 nats here), so the entropy's mean is within Z·SE of it, SE(mean Ĥ) = 0.0030 (measured):
    # an entropy error of 0.015 nats (0.006 in F) is detected; then F̂ = Ê − βĤ against the closed form with the
    # same bias, SE(mean F̂) = 0.0040, an F error of 0.02 detected. Controls: H off by 0.02 nats, and β·1.1.
    mean, cov = (
        torch.tensor([1.0, -0.5], dtype=torch.float64),
        torch.tensor([[0.6, 0.2], [0.2, 0.3]], dtype=torch.float64),
    )
    B, M = 256, 400
    x = _gaussian_cloud(B, M, mean, cov, seed=1)
    system = mf.MeanFieldLangevin(Quadratic(A), QuadraticInteraction(K), beta=BETA)
    F = mf.free_energy(system, x, entropy="gaussian")
    assert F.value.shape == (B,) and F.method == "gaussian" and (F.M, F.d) == (M, 2)
    H = 0.5 * (2 * math.log(2 * math.pi * math.e) + float(torch.logdet(cov)))
    h, h_tolerance = float(F.entropy.mean()), Z * float(F.entropy.std()) / math.sqrt(B)
    assert abs(h - (H + gaussian_entropy_bias(M, 2))) <= h_tolerance <= 0.016, (h, H, h_tolerance)
    assert abs(h - (H + gaussian_entropy_bias(M, 2) + 0.02)) > h_tolerance  # control: a 0.02-nat error is seen
    estimate, tolerance = float(F.value.mean()), Z * float(F.value.std()) / math.sqrt(B)
    exact = _closed_form(mean, cov, A, K, BETA) - BETA * gaussian_entropy_bias(M, 2)
    assert abs(estimate - exact) <= tolerance <= 0.021, (estimate, exact, tolerance)
    wrong = _closed_form(mean, cov, A, K, 1.1 * BETA) - 1.1 * BETA * gaussian_entropy_bias(M, 2)  # control: wrong β
    assert abs(estimate - wrong) > tolerance
    # the parts against theirs: E V = a/2(|m|² + tr S), ½ E W = k/2·tr S
    conf, inter = float(F.confinement.mean()), float(F.interaction.mean())
    assert abs(conf - 0.5 * A * (float(mean @ mean) + float(cov.trace()))) <= Z * float(
        F.confinement.std()
    ) / math.sqrt(B)
    assert abs(inter - 0.5 * K * float(cov.trace())) <= Z * float(F.interaction.std()) / math.sqrt(B)
    # the reported SE is not smaller than the spread over replicas (energy and −βH are anti-correlated)
    assert float(F.value.std()) <= 1.3 * float(F.se.mean())


def test_the_parts_add_up_and_the_repr_is_short():
    x = _gaussian_cloud(3, 50, torch.zeros(1, dtype=torch.float64), torch.eye(1, dtype=torch.float64), seed=2)
    F = mf.free_energy(mf.MeanFieldLangevin(DoubleWell(), GaussianInteraction(0.5, 1.0), beta=0.3), x)
    assert torch.equal(F.value, F.confinement + F.interaction - F.beta * F.entropy)
    assert torch.equal(F.energy, F.confinement + F.interaction)
    assert torch.allclose(F.se, (F.energy_se.square() + (F.beta * F.entropy_se).square()).sqrt())
    assert (
        "\n" not in repr(F)
        and repr(F).startswith("FreeEnergy (3 replicas): F = ")
        and "<table>" in F._repr_html_()
    )
    html = F._repr_html_()
    assert [name for name, _ in F._fields()] == ["F", "energy", "entropy", "beta"]  # the rows of the HTML table
    assert all(f">{name}<" in html for name in ("F", "energy", "entropy", "beta")), html
    assert "(confinement " in html and ", interaction " in html
    assert not any(c.isascii() and c.isalpha() for c in dict(F._fields())["F"])  # one state: numbers only, no time
    # no interaction: the interaction part is exactly 0
    G = mf.free_energy(mf.MeanFieldLangevin(DoubleWell(), None, beta=0.3), x)
    assert torch.equal(G.interaction, torch.zeros(3, dtype=torch.float64))
    assert torch.equal(G.confinement, F.confinement) and torch.equal(G.entropy, F.entropy)


class _PairGaussian(Interaction):
    """W(x, y) = exp(−|x − y|²) + 0.3, summed with its diagonal (a user class: the generic self-pair path)."""

    def energy(self, x):
        r2 = torch.cdist(x, x).square()  # (B, M, M)
        return (torch.exp(-r2) + 0.3).mean(2)  # (B, M)

    def mean_field_grad(self, x):
        raise NotImplementedError


def _u_statistic(W, x: torch.Tensor) -> torch.Tensor:
    """½·1/(M(M−1)) Σ_{i≠j} W(x_i, x_j) by brute force, (B,)."""
    B, M, _ = x.shape
    pairs = W(x[:, :, None, :], x[:, None, :, :])  # (B, M, M)
    off = ~torch.eye(M, dtype=torch.bool)
    return 0.5 * pairs[:, off].sum(1) / (M * (M - 1))


@pytest.mark.parametrize(
    "interaction, W",
    [
        (QuadraticInteraction(torch.tensor([0.5, 2.0])), lambda x, y: torch.tensor([0.5, 2.0]).view(2, 1, 1) / 2 * (x - y).square().sum(-1)),
        (GaussianInteraction(torch.tensor([1.0, -0.5]), 0.7), lambda x, y: torch.tensor([1.0, -0.5]).view(2, 1, 1) * torch.exp(-(x - y).square().sum(-1) / (2 * 0.49))),
        (Alignment(1.3), lambda x, y: -1.3 * (x * y).sum(-1)),
        (LogInteraction(0.8), lambda x, y: -0.4 * (x - y).square().sum(-1).log()),
        (_PairGaussian(), lambda x, y: torch.exp(-(x - y).square().sum(-1)) + 0.3),
    ],
    ids=["quadratic", "gaussian", "alignment", "log", "user-class"],
)  # fmt: skip
def test_the_interaction_part_is_the_u_statistic_over_distinct_pairs(interaction, W):
    x = _gaussian_cloud(2, 7, torch.zeros(2, dtype=torch.float64), torch.eye(2, dtype=torch.float64), seed=3)
    system = mf.MeanFieldLangevin(Quadratic(1.0), interaction, beta=0.0)
    F = mf.free_energy(system, x, entropy="gaussian")
    assert torch.allclose(F.interaction, _u_statistic(W, x), rtol=1e-12, atol=1e-12)
    # negative control: the drift's 1/M² sum with its diagonal (MeanFieldLangevin.energy) is another number
    v_statistic = system.energy(x) - system.confinement.energy(x).mean(1)  # (B,)
    assert not torch.allclose(F.interaction, v_statistic, rtol=1e-3, atol=0)


def test_beta_per_replica_scheduled_and_along_a_trajectory():
    x = _gaussian_cloud(3, 80, torch.zeros(1, dtype=torch.float64), torch.eye(1, dtype=torch.float64), seed=4)
    betas = torch.tensor([0.1, 0.5, 2.0], dtype=torch.float64)
    F = mf.free_energy(mf.MeanFieldLangevin(Quadratic(1.0), None, beta=betas), x)
    assert torch.equal(F.beta, betas)
    for b in range(3):  # each replica as if alone, with its own β
        alone = mf.free_energy(mf.MeanFieldLangevin(Quadratic(1.0), None, beta=float(betas[b])), x[b : b + 1])
        assert torch.allclose(alone.value, F.value[b : b + 1], rtol=0, atol=1e-12)
    scheduled = mf.MeanFieldLangevin(Quadratic(1.0), None, beta=Linear(1.0, 0.2, T=1.0))
    with pytest.raises(ValueError, match="give the time t"):
        mf.free_energy(scheduled, x)
    assert torch.allclose(
        mf.free_energy(scheduled, x, t=0.5).beta, torch.full((3,), 0.6, dtype=torch.float64)
    )
    traj = mf.simulate(scheduled, x, t1=1.0, dt=0.05, save_every=10, generator=0)
    along = mf.free_energy(scheduled, traj)
    assert along.value.shape == (3, 3) and torch.equal(along.times, traj.times.double())
    assert torch.allclose(along.beta[0], torch.tensor([1.0, 0.6, 0.2], dtype=torch.float64))
    last = mf.free_energy(scheduled, traj.final, t=1.0)
    assert torch.equal(along.value[:, -1], last.value)


@pytest.mark.parametrize(
    "system, x, message",
    [
        (mf.MeanFieldLangevin(Quadratic()), torch.zeros(5, 2), "must have shape (B, M, d)"),
        (mf.MeanFieldLangevin(Quadratic()), torch.zeros(2, 1, 2), "M ≥ 2"),
        (mf.MeanFieldLangevin(Quadratic()), torch.full((1, 3, 1), math.nan), "non-finite"),
        (mf.MeanFieldLangevin(Quadratic()), [[0.0]], "state tensor (B, M, d) or a Trajectory"),
        (mf.MeanFieldLangevin(Quadratic(), projection=Sphere()), torch.randn(1, 4, 2), "sphere"),
        (mf.MeanFieldLangevin(Quadratic(), beta=[0.1, 0.2]), torch.randn(3, 4, 1), "B = 3"),
        (mf.SDE(lambda t, x: -x, lambda t, x: 1.0, noise="additive"), torch.randn(1, 4, 1), "MeanFieldLangevin"),
    ],
)  # fmt: skip
def test_bad_input_is_one_line(system, x, message):
    free_energy = mf.metrics.free_energy.free_energy
    with pytest.raises((TypeError, ValueError)) as info:
        free_energy(system, x)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_free_energy_is_an_observable_of_simulate_and_sweep():
    # the relaxation of an OU cloud from N(2, 0.1): F decreases from the start to the end in every replica
    system = mf.MeanFieldLangevin(Quadratic(1.0), QuadraticInteraction(1.0), beta=0.5)

    def relax(a, seed, M=200):
        g = torch.Generator().manual_seed(seed[0])
        x0 = 2.0 + 0.3 * torch.randn(len(seed), M, 1, generator=g, dtype=torch.float64)  # (B, M, 1)
        local = mf.MeanFieldLangevin(Quadratic(a), QuadraticInteraction(1.0), beta=0.5)
        return mf.simulate(local, x0, t1=2.0, dt=0.02, save_every=50, generator=seed[0])

    result = mf.sweep(relax, {"a": [1.0]}, seeds=2, batch=True, progress=False,
                      observables={"F": lambda x: mf.free_energy(system, x), "Fv": lambda x: mf.free_energy(system, x).value})  # fmt: skip
    curves = result.curves
    F = torch.tensor([row["F"] for row in curves.rows]).view(2, -1)  # (seeds, S)
    assert F.shape[1] == 3 and bool((F[:, 0] > F[:, -1] + 1.0).all())  # F(0) ≈ 2.1, F(2) ≈ −0.2
    assert [row["F"] for row in curves.rows] == [row["Fv"] for row in curves.rows]
    # convergence_in_m takes it too (a scalar observable of the final state)
    traj = relax(1.0, [0, 1])
    assert torch.equal(mf.free_energy(system, traj).value[:, -1], mf.free_energy(system, traj.final).value)


def test_a_run_logs_the_free_energy_when_asked(tmp_path):
    from helpers.tiny_run import TEACHER, TINY

    from meanfield.runs import run

    run(
        TEACHER,
        tmp_path / "on",
        overrides=[*TINY, "train.free_energy=true", "model.n_particles=16"],
        quiet=True,
    )
    lines = [json.loads(s) for s in (tmp_path / "on" / "metrics.jsonl").read_text().splitlines()]
    assert lines and all("free_energy" in r for r in lines)
    for r in lines:  # F = train loss + penalty (0: no weight decay) − Σ β·H, and β·H > 0 at β > 0
        assert r["free_energy"] == pytest.approx(r["train_loss"] - r["entropy_term"], rel=1e-12, abs=1e-15)
        assert r["entropy_term"] != 0.0 and r["free_energy_se"] > 0
    run(TEACHER, tmp_path / "off", overrides=TINY, quiet=True)  # negative control: off by default
    off = [json.loads(s) for s in (tmp_path / "off" / "metrics.jsonl").read_text().splitlines()]
    assert off and not any("free_energy" in r for r in off)


@pytest.mark.slow
def test_the_network_experiment_runs_small(tmp_path, monkeypatch):
    # experiments/free_energy/network.py cut down (M = 200, 3 seeds, T = 3): it draws its figure and its F̂ at the
    # end is within 0.01 of the closed-form F*
    import runpy

    module = runpy.run_path(str(Path(__file__).parents[2] / "experiments" / "free_energy" / "network.py"))
    main = module["main"]
    main.__globals__.update(M=200, SEEDS=3, T=3.0)
    main(str(tmp_path / "network.png"))
    assert (tmp_path / "network.png").stat().st_size > 0
    f = main.__globals__
    F_star = float(f["free_energy"](f["minimiser"]()))
    t, values = f["train"](0)
    assert abs(values[-1] - F_star) < 0.01 and values[0] > F_star + 1.0


@pytest.mark.parametrize("d", [1, 2])
def test_the_combined_se_is_conservative_though_the_knn_entropys_is_not(d):
    # 200 replicas of M = 1000 Gaussian particles under V = |x|²/2, W = |z|² (β = ½): the spread of F̂ over replicas
    # is 0.76 (d = 1) and 0.67 (d = 2) of the mean SE, because energy and −βĤ are anti-correlated; the sd of a ratio
    # of 200 replicas is ≈ 5 %, so the bound 0.9 sits ≥ 3 SE above. Negative control: the k-NN entropy's own SE is
    # optimistic here (sd/se 1.12, 1.15, as its docstring says), so "sd ≤ se" fails for it.
    g = torch.Generator().manual_seed(10 + d)
    x = 1.0 + 0.5 * torch.randn(200, 1000, d, generator=g, dtype=torch.float64)  # (B, M, d)
    F = mf.free_energy(
        mf.MeanFieldLangevin(Quadratic(1.0), QuadraticInteraction(2.0), beta=0.5), x, entropy="knn"
    )
    assert float(F.value.std() / F.se.mean()) < 0.9
    assert float(F.entropy.std() / F.entropy_se.mean()) > 1.0
