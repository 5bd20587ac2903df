"""The ``mean_field`` task: the Langevin optimizer on a ParticleCloud is the Euler–Maruyama chain of the
McKean–Vlasov system, checked against its exact solutions (the code path ``meanfield run`` takes).

Oracles: at β = 0 the chain is linear, ``x̄_T = (1 − ηa)^T x̄_0`` and ``x_i − x̄ = (1 − η(a + k))^T (x_i − x̄)_0``
exactly; at β > 0 the per-coordinate variance of ``x_i − x̄`` has the stationary value
``(1 − 1/M)·β/((a + k)(1 − η(a + k)/2))`` exactly (finite M and η: the chain ``u ← (1 − ηc)u + sqrt(2βη)(ξ_i − ξ̄)``).
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from meanfield.drift.potentials import Quadratic
from meanfield.nn.cloud import ParticleCloud
from meanfield.optim import Langevin
from meanfield.runs import RunResult, run
from meanfield.tasks.mean_field import stationary_variance

DT = torch.float64
ROOT = Path(__file__).resolve().parents[1]


def cloud(M=512, d=3, a=1.0, k=2.0, seed=0, scale=3.0):
    return ParticleCloud(
        M, d, Quadratic(a), k, init_scale=scale, generator=torch.Generator().manual_seed(seed), dtype=DT
    )


def steps(c, T, *, lr, beta, noise_block=0, seed=0):
    opt = Langevin([c.x], lr=lr, beta=beta, n_particles=c.n_particles, noise_block=noise_block, seed=seed)
    for _ in range(T):
        opt.zero_grad()
        c.energy(c()).backward()
        opt.step()
    return opt


def test_without_noise_the_run_is_the_exact_linear_flow_of_the_chain():
    a, k, eta, T = 1.0, 2.0, 0.05, 30
    c = cloud(a=a, k=k)
    x0 = c.x.detach().clone()
    steps(c, T, lr=eta, beta=0.0)
    centre = x0.mean(0)  # (d,)
    expected = (1 - eta * a) ** T * centre + (1 - eta * (a + k)) ** T * (x0 - centre)  # (M, d)
    torch.testing.assert_close(c.x.detach(), expected, rtol=1e-12, atol=1e-12)
    wrong = (1 - eta * a) ** T * centre + (1 - eta * (a + 1.9)) ** T * (
        x0 - centre
    )  # negative control: k = 1.9
    assert (c.x.detach() - wrong).abs().max() > 1e-3


@pytest.mark.parametrize("noise_block", [0, 128])
def test_the_stationary_variance_is_the_discrete_chains(noise_block):
    """Variance of x_i − x̄ per coordinate, sampled every 50 steps (the deviations decorrelate by
    (1 − ηc)^{50} = 5e-3) after 300 steps of burn-in from the stationary scale: mean of 40 samples within
    4·SE of ``(1 − 1/M)σ²_η`` (SE from the samples, ≈ 0.3 % here: the smallest detectable error is ≈ 1.2 %).
    Negative control: the prediction at β·1.05 is rejected."""
    a, k, beta, eta, M, d = 1.0, 1.0, 0.5, 0.05, 2048, 4
    exact = (1 - 1 / M) * stationary_variance(a, k, beta, eta)
    c = cloud(M=M, d=d, a=a, k=k, scale=math.sqrt(exact))
    opt = Langevin([c.x], lr=eta, beta=beta, n_particles=M, noise_block=noise_block, seed=3)
    samples = []
    for t in range(300 + 40 * 50):
        opt.zero_grad()
        c.energy(c()).backward()
        opt.step()
        if t >= 300 and (t - 300) % 50 == 49:
            x = c.x.detach()
            samples.append(float((x - x.mean(0)).square().mean()))
    s = torch.tensor(samples, dtype=DT)
    mean, se = float(s.mean()), float(s.std() / math.sqrt(len(s)))
    assert abs(mean - exact) <= 4 * se, (mean, exact, se)
    assert 4 * se < 0.012 * exact  # the test can see a 1.2 % error
    assert abs(mean - 1.05 * exact) > 4 * se  # negative control: a 5 % wrong temperature


def test_block_noise_is_counter_based_and_refuses_bad_blocks():
    kw = {"lr": 0.05, "beta": 0.3, "noise_block": 64, "seed": 9}
    c1, c2, c3 = cloud(M=256), cloud(M=256), cloud(M=256)
    steps(c1, 3, **kw)
    steps(c2, 3, **kw)
    assert torch.equal(c1.x, c2.x)  # the same seed: the same chain
    first = steps(
        c3, 2, **kw
    )  # two steps, then a new optimizer from the state dict: the third step is the same
    again = Langevin([c3.x], lr=0.05, beta=0.3, n_particles=256, noise_block=64, seed=1)
    again.load_state_dict(first.state_dict())
    again.zero_grad()
    c3.energy(c3()).backward()
    again.step()
    assert torch.equal(c3.x, c1.x)
    c4 = cloud(M=256)
    steps(c4, 3, **{**kw, "noise_block": 128})  # other blocks: other numbers (the same law)
    assert not torch.equal(c1.x, c4.x)
    with pytest.raises(ValueError, match="whole blocks"):
        steps(cloud(M=200), 1, **kw)
    c = cloud(M=64)
    opt = Langevin([c.x], lr=0.1, beta=1.0, n_particles=64, noise_block=8, generator=torch.Generator())
    c.energy(c()).backward()
    with pytest.raises(ValueError, match="seed"):
        opt.step()
    with pytest.raises(ValueError, match="noise_block"):
        Langevin([cloud().x], lr=0.1, beta=1.0, noise_block=-1)


def test_meanfield_run_of_the_smoke_preset_reports_the_exact_variance(tmp_path):
    result: RunResult = run(
        ROOT / "experiments" / "mean_field" / "config.toml",
        tmp_path / "run",
        preset="smoke",
        overrides=["train.figures=false"],
        quiet=True,
    )
    assert result.summary["status"] == "finished"
    final = result.final
    assert final["variance_exact"] == pytest.approx(0.5 / (2 * (1 - 0.05)), rel=1e-12)
    assert (
        abs(final["variance_ratio"] - 1) < 0.05
    )  # 40 steps from N(0, 9): within 5 % already (burn-in 0.9^40)
