"""The ``mean_field`` task: the Langevin optimizer on a ParticleCloud is the Euler–Maruyama chain of the
McKean–Vlasov system, checked against its exact solutions (the code path ``meanfield run`` takes).

Oracles: at β = 0 the chain is linear, ``x̄_T = (1 − ηa)^T x̄_0`` and ``x_i − x̄ = (1 − η(a + k))^T (x_i − x̄)_0``
exactly; at β > 0 the per-coordinate variance of ``x_i − x̄`` has the stationary value
``(1 − 1/M)·β/((a + k)(1 − η(a + k)/2))`` exactly (finite M and η: the chain ``u ← (1 − ηc)u + sqrt(2βη)(ξ_i − ξ̄)``).
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from meanfield.drift.potentials import DoubleWell, Quadratic
from meanfield.nn.cloud import ParticleCloud
from meanfield.optim import Langevin
from meanfield.runs import RunResult, run
from meanfield.seeds import derive_seed
from meanfield.tasks.mean_field import MEAN_FIELD, MeanFieldData, MeanFieldModel, stationary_variance

DT = torch.float64
ROOT = Path(__file__).resolve().parents[2]


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


F64 = torch.float64


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _build(model: MeanFieldModel, *, seed: int = 3, dtype=F64, device="cpu"):
    return MEAN_FIELD.build(
        MeanFieldData(), model, batch_size=7, seed=seed, device=torch.device(device), dtype=dtype
    )


def _np_means(x: np.ndarray, V) -> tuple[float, float, np.ndarray]:
    """(mean V(x_i), mean |x_i|², x̄) of a cloud ``x`` (M, d) in numpy, ``V`` a function of one particle."""
    return float(np.mean([V(p) for p in x])), float(np.mean((x**2).sum(1))), x.mean(0)


@pytest.mark.parametrize(
    ("confinement", "V", "gradV"),
    [
        ("quadratic", lambda p: 0.5 * 1.5 * (p**2).sum(), lambda x: 1.5 * x),
        ("double_well", lambda p: (p**4 / 4 - p**2 / 2).sum(), lambda x: x**3 - x),
    ],
    ids=["quadratic", "double_well"],
)
def test_mean_field_build_is_the_cloud_its_seed_names_with_the_documented_loss_and_evaluation(
    confinement, V, gradV
):
    """The built cloud is ``init_scale·N(0, I)`` from the generator seeded ``derive_seed(seed, "init")``; the
    loss is the mean-field energy ``V̄ + k/2(mean|x|² − |x̄|²)`` (numpy) with gradient
    ``(∇V(x_i) + k(x_i − x̄))/M`` (hand formula); evaluation gives energy, ``(mean|x|² − |x̄|²)/d`` and
    ``|x̄|`` (numpy); the experiment counts particles, has no data and no hooks. Negative control: the gradient
    without the interaction term is rejected."""
    M, d, a, k, scale = 6, 3, 1.5, 0.5, 2.0
    model = MeanFieldModel(n_particles=M, d=d, confinement=confinement, a=a, k=k, init_scale=scale)
    exp = _build(model, seed=3)
    x0 = scale * torch.randn(M, d, generator=_gen(derive_seed(3, "init")), dtype=F64)
    assert exp.model.x.dtype == F64 and exp.model.x.device.type == "cpu"
    torch.testing.assert_close(exp.model.x.detach(), x0, rtol=0, atol=0)
    assert exp.model.k == k and exp.model.d == d and exp.model.n_particles == M
    expected_V = Quadratic(a) if confinement == "quadratic" else DoubleWell()
    assert repr(exp.model.confinement) == repr(expected_V)

    x = x0.numpy()
    v_bar, sq, centre = _np_means(x, V)
    energy = v_bar + 0.5 * k * (sq - (centre**2).sum())
    loss = exp.loss(None)
    assert float(loss.detach()) == pytest.approx(energy, rel=1e-13)
    loss.backward()
    grad = (gradV(x) + k * (x - centre)) / M
    np.testing.assert_allclose(exp.model.x.grad.numpy(), grad, rtol=1e-12, atol=1e-15)
    assert np.abs(exp.model.x.grad.numpy() - gradV(x) / M).max() > 1e-3  # negative control: no interaction

    out = exp.evaluate()
    assert set(out) == {"energy", "variance", "centre"}  # no exact variance without beta and eta
    assert out["energy"] == pytest.approx(energy, rel=1e-13)
    assert out["variance"] == pytest.approx((sq - (centre**2).sum()) / d, rel=1e-13)
    assert out["centre"] == pytest.approx(float(np.linalg.norm(centre)), rel=1e-13)

    assert exp.unit == "particles"
    assert exp.units_per_step == M
    assert exp.next_batch() is None and exp.batches.next() is None
    assert exp.batches.state_dict() == {} and exp.batches.load_state_dict({"any": 1}) is None
    assert exp.on_backward is None and exp.window_metrics is None
    assert exp.higher_is_better == () and exp.nonfinite_metrics == ()
    assert exp.description == f"ParticleCloud(M={M}, d={d}, V={expected_V!r}, W = k/2|z|², k={k})"


@pytest.mark.parametrize(
    ("beta", "eta", "confinement", "reported"),
    [
        (0.5, 0.1, "quadratic", True),
        (0.0, 0.1, "quadratic", False),
        (0.5, 0.0, "quadratic", False),
        (0.5, 0.1, "double_well", False),
    ],
)
def test_mean_field_build_reports_the_exact_variance_only_for_a_hot_quadratic_chain(
    beta, eta, confinement, reported
):
    """``variance_exact = β/((a + k)(1 − η(a + k)/2))`` (closed form) and ``variance_ratio = variance/exact``
    are in the evaluation exactly when the confinement is quadratic and β > 0 and η > 0."""
    a, k = 1.25, 0.75
    model = MeanFieldModel(n_particles=5, d=2, confinement=confinement, a=a, k=k, beta=beta, eta=eta)
    out = _build(model).evaluate()
    if reported:
        exact = beta / ((a + k) * (1 - eta * (a + k) / 2))
        assert set(out) == {"energy", "variance", "centre", "variance_exact", "variance_ratio"}
        assert out["variance_exact"] == pytest.approx(exact, rel=1e-15)
        assert out["variance_ratio"] == pytest.approx(out["variance"] / exact, rel=1e-15)
    else:
        assert set(out) == {"energy", "variance", "centre"}


def test_mean_field_build_puts_the_cloud_on_the_device_asked_in_the_dtype_asked():
    """``device`` moves the cloud (the ``meta`` device stands for an accelerator: no data is needed to see
    where the parameter lives); ``dtype`` is the parameter's dtype. Negative control: the CPU build is on the
    CPU."""
    model = MeanFieldModel(n_particles=4, d=2)
    on_meta = _build(model, device="meta", dtype=torch.float32)
    assert on_meta.model.x.device.type == "meta" and on_meta.model.x.dtype == torch.float32
    assert tuple(on_meta.model.x.shape) == (4, 2)
    assert _build(model, device="cpu", dtype=torch.float32).model.x.device.type == "cpu"


@pytest.mark.parametrize(
    ("a", "k", "beta", "eta"),
    [(1.0, 0.0, 0.5, 0.1), (0.5, 3.5, 2.0, 0.4), (0.25, 0.25, 1.0, 2.0), (3.0, -1.0, 0.3, 0.99)],
)
def test_stationary_variance_is_the_fixed_point_of_the_variance_recursion(a, k, beta, eta):
    """``Var = 2βη/(1 − (1 − ηc)²)``, ``c = a + k``: the fixed point of ``s ← (1 − ηc)² s + 2βη`` (iterated to
    convergence here, an independent computation) — including ``c = 0.5, η = 2`` (ηc = 1 but η/c = 4)."""
    c = a + k
    s = 0.0
    for _ in range(20000):
        s = (1 - eta * c) ** 2 * s + 2 * beta * eta
    assert stationary_variance(a, k, beta, eta) == pytest.approx(s, rel=1e-12)
    assert stationary_variance(a, k, beta, eta) == pytest.approx(2 * beta * eta / (1 - (1 - eta * c) ** 2))


@pytest.mark.parametrize(
    ("a", "k", "eta"),
    [(1.0, -1.0, 0.1), (0.5, -1.5, 0.1), (2.0, 2.0, 0.5), (2.0, 2.0, 0.6), (1.0, 1.0, 0.0), (1.0, 1.0, -0.2)],
)
def test_stationary_variance_refuses_an_unstable_or_degenerate_chain_and_says_why(a, k, eta):
    """c = a + k ≤ 0, or ηc outside (0, 2) (ηc = 2: at the bound; ηc = 2.4 with η/c = 0.15 inside it): a
    ``ValueError`` that quotes c and ηc."""
    c = a + k
    message = f"the chain is stationary only for a + k > 0 and 0 < η(a + k) < 2, got {c} and {eta * c}"
    with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
        stationary_variance(a, k, 1.0, eta)


def _build_2(model: MeanFieldModel, *, seed: int = 5, dtype=torch.float64):
    return MEAN_FIELD.build(
        MeanFieldData(), model, batch_size=1, seed=seed, device=torch.device("cpu"), dtype=dtype
    )


def test_the_task_starts_from_the_cloud_its_seed_names_in_the_dtype_asked():
    model = MeanFieldModel(n_particles=16, d=3, a=1.5, k=0.5, init_scale=2.0)
    experiment = _build_2(model, seed=5)
    expected = ParticleCloud(
        16, 3, Quadratic(1.5), 0.5, init_scale=2.0,
        generator=torch.Generator().manual_seed(derive_seed(5, "init")), dtype=torch.float64,
    )  # fmt: skip
    assert experiment.model.x.dtype == torch.float64
    assert torch.equal(experiment.model.x, expected.x)
    other = _build_2(model, seed=6)  # negative control: another seed, another cloud
    assert not torch.equal(other.model.x, expected.x)
    assert _build_2(model, dtype=torch.float32).model.x.dtype == torch.float32
    assert experiment.description == "ParticleCloud(M=16, d=3, V=Quadratic(a=1.5), W = k/2|z|², k=0.5)"


def test_the_exact_variance_is_reported_for_the_quadratic_chain_only():
    quadratic = _build_2(MeanFieldModel(n_particles=8, d=2, a=1.0, k=1.0, beta=0.5, eta=0.1)).evaluate()
    assert quadratic["variance_exact"] == pytest.approx(0.5 / (2.0 * (1 - 0.1 * 2.0 / 2)), rel=1e-15)
    assert quadratic["variance_ratio"] == pytest.approx(quadratic["variance"] / quadratic["variance_exact"])
    well = _build_2(
        MeanFieldModel(n_particles=8, d=2, confinement="double_well", beta=0.5, eta=0.1)
    ).evaluate()
    assert "variance_exact" not in well and "variance_ratio" not in well  # no closed form for the double well
    cold = _build_2(MeanFieldModel(n_particles=8, d=2, beta=0.0, eta=0.1)).evaluate()
    assert "variance_exact" not in cold
    assert repr(DoubleWell()) in _build_2(MeanFieldModel(confinement="double_well")).description


@pytest.mark.parametrize(
    ("a", "k", "eta"), [(0.0, 0.0, 0.05), (1.0, -1.0, 0.05), (0.5, -1.0, 0.05), (1.0, 1.0, 1.0)]
)
def test_a_chain_without_a_stationary_law_builds_and_reports_no_exact_variance(a, k, eta):
    """Free diffusion (a = k = 0), a + k ≤ 0 and η(a + k) ≥ 2 have no stationary variance: the task builds and
    its evaluation leaves the exact variance out (it refused the whole run since β and η come from [optim]).
    Control: a + k = 2 at η = 0.05 reports it."""
    model = MeanFieldModel(n_particles=8, d=2, a=a, k=k, beta=0.5, eta=eta)
    assert set(_build_2(model).evaluate()) == {"energy", "variance", "centre"}
    stable = _build_2(MeanFieldModel(n_particles=8, d=2, a=1.0, k=1.0, beta=0.5, eta=0.05)).evaluate()
    assert stable["variance_exact"] == pytest.approx(0.5 / (2.0 * (1 - 0.05)), rel=1e-15)


@pytest.mark.parametrize("eta", [2.0, 2.5, 0.0, -0.1])
def test_the_chain_is_stationary_only_for_a_step_inside_its_stability_bound(eta):
    """η(a + k) must lie in (0, 2): at 2 the chain oscillates for ever, above it diverges."""
    with pytest.raises(ValueError, match=rf"0 < η\(a \+ k\) < 2, got 1.0 and {eta * 1.0}$"):
        stationary_variance(0.5, 0.5, 1.0, eta)
    assert stationary_variance(0.5, 0.5, 1.0, 1.99) == pytest.approx(1.0 / (1.0 * (1 - 1.99 / 2)))
