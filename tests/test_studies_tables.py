"""Observables and tidy tables of ``convergence_in_m`` and ``sweep`` (issue 26, items 1–2 and 5): scalars and
series per replica, one row per point × seed × time, CSV/JSON, labelled plots with bands, and the batched
sweep over the replica axis against closed forms.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest
import scipy.stats
import torch

import meanfield as mf
from meanfield.drift.potentials import Quadratic, QuadraticInteraction
from meanfield.metrics.wasserstein import Uniform
from meanfield.studies.in_memory import SweepResult, Table, batch_seed, convergence_in_m, sweep
from meanfield.studies.plotting import figure
from meanfield.studies.stats import Z

DT = torch.float64
ROOT = Path(__file__).resolve().parents[1]


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# ---------------------------------------------------------------------------------------------------------
# convergence_in_m: observables


def test_a_trajectory_sampler_gives_series_per_replicate_at_the_saved_times():
    """``sample`` returns the trajectory of ``simulate``; an observable is evaluated at every saved state.

    The deterministic flow ``dx = −a x dt`` (β = 0) from x0 = 1: EM gives ``x_n = (1 − a dt)^n`` exactly, so
    the series ``mean`` is that at each saved time, for every replicate and M (tolerance 1e-12)."""
    a, dt = 0.5, 0.1
    system = mf.MeanFieldLangevin(Quadratic(a), QuadraticInteraction(0.0), beta=0.0)

    def sample(M, reps):
        x0 = torch.ones(reps, M, 1, dtype=DT) + 1e-3 * torch.rand(reps, M, 1, generator=gen(M), dtype=DT)
        return mf.simulate(system, x0, t1=1.0, dt=dt, save_every=5, generator=0)

    law = Uniform(0.0, 2.0)
    study = convergence_in_m(sample, [4, 8], reps=3, reference=law, generator=0, progress=False,
                             observables={"mean": lambda x: x.mean((1, 2))})  # fmt: skip
    assert study.times.tolist() == pytest.approx([0.0, 0.5, 1.0])
    assert study.series["mean"].shape == (2, 3, 3)
    exact = torch.tensor([(1 - a * dt) ** n for n in (0, 5, 10)], dtype=DT)
    x0_mean = torch.stack(
        [1 + 1e-3 * torch.rand(3, M, 1, generator=gen(M), dtype=DT).mean((1, 2)) for M in (4, 8)]
    )
    assert torch.allclose(study.series["mean"], x0_mean[..., None] * exact, atol=1e-12, rtol=0)
    curves = study.curves
    assert curves.keys == ("M", "replicate", "t") and curves.values == ("mean",) and len(curves) == 2 * 3 * 3
    assert curves.rows[4] == {"M": 4, "replicate": 1, "t": 0.5, "mean": float(study.series["mean"][0, 1, 1])}
    table = study.table  # the distance per replicate, and the series' final values
    assert table.columns == ("M", "replicate", "w2_squared", "mean") and len(table) == 6
    assert table.column("w2_squared")[5] == float(study.values[1, 2])
    assert table.column("mean")[5] == float(study.series["mean"][1, 2, -1])


def test_a_mapping_sampler_gives_scalars_and_series_and_csv(tmp_path):
    def sample(M, reps):
        g = gen(M)
        x = torch.randn(reps, M, 1, generator=g, dtype=DT)
        loss = (1 / M) * torch.ones(reps, 4, dtype=DT) * torch.arange(1, 5, dtype=DT)  # (reps, T)
        return {"final": x, "t": [0.0, 1.0, 2.0, 3.0], "loss": loss, "m2": x.square().mean((1, 2))}

    study = convergence_in_m(sample, [4, 8, 16], reps=5, reference=mf.metrics.Normal(0.0, 1.0), generator=0,
                             observables={"m1": lambda x: x.mean((1, 2))}, progress=False)  # fmt: skip
    assert set(study.observed) == {"w2_squared", "m2", "m1"} and set(study.series) == {"loss"}
    assert study.table.columns == ("M", "replicate", "w2_squared", "m2", "m1")
    text = study.to_csv(tmp_path / "per_replicate.csv")
    assert text.splitlines()[0] == "M,replicate,w2_squared,m2,m1" and len(text.splitlines()) == 1 + 15
    curves = study.to_csv(curves=True)
    assert curves.splitlines()[0] == "M,replicate,t,loss" and len(curves.splitlines()) == 1 + 3 * 5 * 4
    assert curves.splitlines()[1] == "4,0,0.0,0.25"
    summary = study.curves.summary("t", "loss", hue="M")
    assert [(r["hue"], r["x"]) for r in summary][:2] == [(4, 0.0), (4, 1.0)]
    assert summary[1]["mean"] == pytest.approx(2 / 4) and summary[1]["n"] == 5


def test_sampler_returning_inconsistent_observables_is_refused():
    def sample(M, reps):
        out = {"final": torch.zeros(reps, M, 1, dtype=DT) + 1 / M, "y": torch.ones(reps, dtype=DT)}
        if M == 8:
            out["z"] = torch.ones(reps, dtype=DT)
        return out

    with pytest.raises(ValueError, match="other observables at M = 8"):
        convergence_in_m(sample, [4, 8], reps=2, reference=Uniform(), generator=0, progress=False)
    with pytest.raises(ValueError, match=r"must have shape \(B,\) = \(2,\)"):
        convergence_in_m(lambda M, r: {"y": torch.ones(3)}, [4, 8], reps=2, quantity="y", generator=0,
                         reference=[1.0, 1.0], progress=False)  # fmt: skip
    with pytest.raises(TypeError, match="state tensor .* Trajectory or a mapping"):
        convergence_in_m(lambda M, r: [1.0], [4, 8], reps=2, reference=Uniform(), generator=0, progress=False)


def test_study_plot_takes_a_label_so_two_studies_share_an_axis(tmp_path):
    law = Uniform()
    studies = [
        convergence_in_m(lambda M, reps, s=s: law.sample((reps, M), gen(M + s)), [4, 8, 16], reps=4,
                         reference=law, generator=0, progress=False)
        for s in (0, 100)
    ]  # fmt: skip
    fig, ax = figure()
    studies[0].plot(ax=ax, label="particles")
    studies[1].plot(ax=ax, label="i.i.d.", path=tmp_path / "two.png")
    texts = [t.get_text() for t in ax.get_legend().get_texts()]
    assert any(t.startswith("particles (±1.96 SE)") for t in texts) and any(
        t.startswith("i.i.d.:") for t in texts
    )
    assert any("(exact)" in t for t in texts)  # the estimator of the interval is named
    assert not any(t.startswith("w2_squared") for t in texts)
    assert (tmp_path / "two.png").stat().st_size > 1000


def test_figure_width_is_per_column():
    """``figure(ncols=2, width=4.8)`` is 9.6 inches wide: ``width`` is per column (docstring says so)."""
    fig, axes = figure(ncols=2, nrows=3, width=4.8, height=2.0)
    assert tuple(fig.get_size_inches()) == pytest.approx((9.6, 6.0)) and axes.shape == (3, 2)
    assert "one column" in figure.__doc__ and "one row" in figure.__doc__


# ---------------------------------------------------------------------------------------------------------
# sweep: series


def decay_run(rate: float, seed: int) -> dict:
    """A series ``y(t) = exp(−rate·t) + noise`` at four times, and a scalar."""
    t = torch.tensor([0.0, 0.5, 1.0, 2.0], dtype=DT)
    noise = 0.01 * torch.randn(4, generator=gen(seed), dtype=DT)
    return {"t": t, "y": (-rate * t).exp() + noise, "y_end": float((-rate * 2.0) * 1.0)}


def test_sweep_collects_series_into_a_tidy_curves_table(tmp_path):
    result = sweep(decay_run, {"rate": [0.5, 1.0]}, seeds=3, progress=False)
    assert result.outputs == ("y_end",) and result.series == ("y",) and result.batched == ()
    curves = result.curves
    assert curves.keys == ("rate", "seed", "t") and len(curves) == 2 * 3 * 4
    assert curves.rows[5] == {"rate": 0.5, "seed": 1, "t": 0.5, "y": float(decay_run(0.5, 1)["y"][1])}
    table = curves.summary("t", "y", hue="rate")
    ys = [float(decay_run(1.0, s)["y"][3]) for s in range(3)]
    last = table[-1]
    half = scipy.stats.t.ppf(0.975, 2) * np.std(ys, ddof=1) / math.sqrt(3)
    assert (last["hue"], last["x"], last["n"]) == (1.0, 2.0, 3) and last["mean"] == pytest.approx(np.mean(ys))
    assert last["hi"] - last["mean"] == pytest.approx(half)
    assert result.to_csv(curves=True).splitlines()[0] == "rate,seed,t,y"
    back = SweepResult.from_json(result.to_json(tmp_path / "s.json"))
    assert back.series == ("y",) and back.curve_rows == result.curve_rows
    assert Table.from_json(curves.to_json()).rows == curves.rows
    fig = result.plot("t", "y", hue="rate", label="decay", path=tmp_path / "curves.png")
    texts = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert "decay, rate=0.5 (mean)" in texts and "bands: 95% t-interval of the mean over 3 seeds" in texts


def test_series_without_times_use_the_index_and_mismatched_lengths_fail():
    def run(kind, seed):
        if kind == "index":
            return {"y": [1.0, 2.0, 3.0]}
        if kind == "ragged":
            return {"y": torch.ones(3), "z": torch.ones(4)}
        return {"t": [0.0, 1.0], "y": torch.ones(3)}

    with pytest.warns(RuntimeWarning, match="2 of 3 runs failed"):
        result = sweep(run, {"kind": ["index", "ragged", "t"]}, seeds=1, progress=False)
    assert [r["t"] for r in result.curve_rows] == [0, 1, 2]
    errors = {r["kind"]: r["error"] for r in result.rows}
    assert "share one time axis" in errors["ragged"] and "'t' has 2 times, the series have 3" in errors["t"]


# ---------------------------------------------------------------------------------------------------------
# sweep: batched over the replica axis


def test_batched_sweep_runs_each_replica_at_its_own_parameter_closed_form():
    """The deterministic flow ``dx = −a x dt − k(x − x̄) dt`` (β = 0): the particle mean follows
    ``x̄_n = (1 − a dt)^n x̄_0`` exactly under EM whatever k. One batched call per value of k (k is left
    off the replica axis), a on it: every replica must match its own a (tolerance 1e-12); the negative
    control, the same check with the a's of the replicas reversed, fails."""
    calls = []
    dt, M = 0.05, 16

    def run(a, k, seed):
        calls.append((tuple(a.tolist()), k, list(seed)))
        x0 = torch.stack([torch.rand(M, 1, generator=gen(s), dtype=DT) for s in seed])  # (B, M, 1)
        system = mf.MeanFieldLangevin(Quadratic(a), QuadraticInteraction(k), beta=0.0)
        return mf.simulate(system, x0, t1=1.0, dt=dt, save_every=10, generator=batch_seed(seed))

    grid = {"a": [0.5, 1.0, 2.0], "k": [0.0, 3.0]}
    result = sweep(run, grid, seeds=[7, 8], batch=["a"], max_batch=4, progress=False,
                   observables={"mean": lambda x: x.mean((1, 2))})  # fmt: skip
    assert result.batched == ("a",) and result.series == ("mean",)
    assert [len(c[0]) for c in calls] == [4, 2, 4, 2]  # per k: 6 replicas in chunks of ≤ 4
    assert {c[1] for c in calls} == {0.0, 3.0} and calls[0][2] == [7, 8, 7, 8]
    assert [(r["a"], r["k"], r["seed"]) for r in result.rows] == [
        (a, k, s) for a in grid["a"] for k in grid["k"] for s in (7, 8)
    ]  # rows in grid × seed order, not in call order
    ok, reversed_ok = [], []
    for row in result.curve_rows:
        x0_mean = float(torch.rand(M, 1, generator=gen(row["seed"]), dtype=DT).mean())
        n = round(row["t"] / dt)
        ok.append(abs(row["mean"] - x0_mean * (1 - row["a"] * dt) ** n) < 1e-12)
        other = {0.5: 2.0, 1.0: 1.0, 2.0: 0.5}[row["a"]]
        reversed_ok.append(abs(row["mean"] - x0_mean * (1 - other * dt) ** n) < 1e-12)
    assert all(ok) and not all(reversed_ok)


def test_batched_sweep_per_replica_temperature_matches_the_stationary_variance():
    """β and a per replica in one call: the EM chain of ``dx = −a x dt + sqrt(2β) dW`` (k = 0) has the
    stationary variance ``β/(a(1 − a dt/2))``; after t = 6 (transient e^{−2at} ≤ 6e-6 of the start) the
    particles' variance of replica (a, β) is that within 5 SE, SE = s²·sqrt(2/(M − 1)) for M = 2000 Gaussian
    particles (≈ 3 % of the variance; a wrong β per replica — the β's of two points swapped — is 2× off)."""
    dt, M = 0.05, 2000

    def run(a, beta, seed):
        x0 = torch.zeros(len(seed), M, 1, dtype=DT)
        system = mf.MeanFieldLangevin(Quadratic(a), QuadraticInteraction(0.0), beta=beta)
        return mf.simulate(system, x0, t1=6.0, dt=dt, generator=batch_seed(seed))

    result = sweep(run, {"a": [1.0, 2.0], "beta": [0.25, 0.5]}, seeds=2, batch=True, progress=False,
                   observables={"var": lambda x: x.var((1, 2))})  # fmt: skip
    assert result.batched == ("a", "beta")
    for row in result.rows:
        s2 = row["beta"] / (row["a"] * (1 - row["a"] * dt / 2))
        assert abs(row["var"] - s2) <= Z * s2 * math.sqrt(2 / (M - 1)), row
        swapped = (0.75 - row["beta"]) / (row["a"] * (1 - row["a"] * dt / 2))
        assert abs(row["var"] - swapped) > Z * swapped * math.sqrt(2 / (M - 1))


def test_batched_sweep_chunks_to_a_memory_budget_and_records_a_failed_call():
    """Budget 1700 bytes, 400·M bytes per replica: M = 2 runs 2 replicas a call, M = 3 and 4 one; the group
    M = 3 raises, and its 4 runs carry the error while the others go on."""
    sizes = []

    def run(x, M, seed):
        sizes.append((M, len(x)))
        if M == 3:
            raise ValueError("M = 3 is refused")
        return {"y": x * M, "curve": x[:, None] * torch.ones(len(x), 2, dtype=DT)}

    with pytest.warns(RuntimeWarning, match="4 of 12 runs failed"):
        result = sweep(run, {"x": [1.0, 2.0], "M": [2, 3, 4]}, seeds=2, batch=["x"], progress=False,
                       memory_budget=1700, replica_bytes=lambda p: 400 * p["M"])  # fmt: skip
    assert sizes == [(2, 2), (2, 2)] + [(3, 1)] * 4 + [(4, 1)] * 4
    assert [r["error"] for r in result.rows if r["M"] == 3] == ["ValueError: M = 3 is refused"] * 4
    assert [r["y"] for r in result.rows if r["M"] == 4] == [4.0, 4.0, 8.0, 8.0]
    assert len(result.curve_rows) == 8 * 2 and result.series == ("curve",)
    sweep(run, {"x": [1.0, 2.0], "M": [2]}, seeds=2, batch=["x"], progress=False, max_batch=3)
    assert sizes[-2:] == [(2, 3), (2, 1)]


def test_batched_sweep_bad_input():
    def run(x, seed):
        return {"y": x}

    with pytest.raises(ValueError, match="not in the grid"):
        sweep(run, {"x": [1.0]}, seeds=1, batch=["z"], progress=False)
    with pytest.raises(TypeError, match="numbers only"):
        sweep(run, {"x": ["a"]}, seeds=1, batch=["x"], progress=False)
    with pytest.raises(ValueError, match="apply with batch= only"):
        sweep(run, {"x": [1.0]}, seeds=1, max_batch=2, progress=False)
    with pytest.raises(ValueError, match="go together"):
        sweep(run, {"x": [1.0]}, seeds=1, batch=True, memory_budget=10, progress=False)
    with pytest.raises(RuntimeError, match=r"must have shape \(B,\) = \(2,\)"):
        sweep(lambda x, seed: {"y": torch.ones(3)}, {"x": [1.0, 2.0]}, seeds=1, batch=True, progress=False)


def test_batch_seed_is_a_pure_function_of_the_chunk():
    assert batch_seed([1, 2, 3]) == batch_seed((1, 2, 3)) == batch_seed(np.array([1, 2, 3]))
    assert batch_seed([1, 2, 3]) != batch_seed([3, 2, 1]) and 0 <= batch_seed([0]) < 2**62


# ---------------------------------------------------------------------------------------------------------
# the docs example


def test_getting_started_batched_sweep_example_runs(tmp_path, monkeypatch, capsys):
    """The getting-started page's batched sweep (4 values of a × 4 seeds, two calls of 8 replicas), run in this
    process from the page's text: it writes its CSV and figure, and prints x̄(2) per a within 2 half-widths of
    its printed 95 % interval of the exact EM mean 2(1 − a·dt)^100 (a t interval with 3 degrees of freedom:
    2 half-widths = 6.4 SE)."""
    text = (ROOT / "docs" / "getting-started.md").read_text()
    blocks = [b for b in re.findall(r"```python\n(.*?)```", text, flags=re.S) if "batch=True" in b]
    assert len(blocks) == 1, "the getting-started page shows one batched sweep"
    monkeypatch.chdir(tmp_path)
    exec(compile(blocks[0], "getting-started.md", "exec"), {"__name__": "__main__"})
    out = capsys.readouterr().out
    lines = re.findall(r"a=([\d.]+): mean x̄\(2\) = (-?[\d.]+) ± ([\d.]+) .* EM exact (-?[\d.]+)", out)
    assert len(lines) == 4, out
    for a, mean, half, exact in lines:
        assert abs(float(mean) - float(exact)) <= 2 * float(half), (a, mean, half, exact)
    assert (tmp_path / "relax.png").stat().st_size > 1000
    assert (tmp_path / "relax.csv").read_text().splitlines()[0] == "a,seed,t,mean,var"
