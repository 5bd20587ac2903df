"""Tables and figures of docs/experiments/feature_particles.md, rebuilt from the committed run folders.

    python experiments/feature_particles/report.py
    # writes results/tables.md, results/tables/<table>.md (included by the docs page) and
    # docs/assets/feature_particles_*.png

Every number comes from ``results/<table>/<arm>/<point>/summary.json`` and ``metrics.jsonl`` (the run folders
that ``run_all.sh`` writes) or ``results/convergence/result.json``; a point's values (seed, d, β, steps) from
its resolved ``config.toml``, never from its folder name; the wall clock of a table from the runs' recorded
start (``environment.json`` ``started``) and duration (``summary.json`` ``wall_clock_s``, or ``wall_time_s``
where a run did not record it), see :func:`wall_clock`. Means carry Student-t 95 % intervals over
the seeds; paired comparisons use the same seeds (same data, initialisation and batch order) and the paired
t-test (:func:`meanfield.stats.paired_difference`). Test MSEs span orders of magnitude, so arms are compared
on ``log10`` test MSE (a difference of −1 is a 10× smaller error), and each MSE column has, beside the
arithmetic mean, the geometric mean with the t interval of ``ln MSE`` mapped back
(:func:`meanfield.stats.log_interval`). Every paired cell also carries its p-value adjusted by Holm's
step-down procedure over the paired cells of the same table (:func:`meanfield.stats.holm`) and ``δ80``, the
smallest difference the same test with the same pairs detects with 80 % power at α = 0.05 at the observed
paired sd (:func:`meanfield.stats.detectable_difference`, noncentral t).
"""

from __future__ import annotations

import json
import math
from datetime import datetime
from pathlib import Path

import numpy as np

from meanfield.config import load_toml
from meanfield.stats import PairedDifference, holm, log_interval, paired_difference, t_interval

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
ASSETS = HERE.parents[1] / "docs" / "assets"

ARMS = [  # (folder, what it is); every arm: 4000 steps of batch 256 (1,024,000 samples), M = 128
    ("seed_literal", "seed's literal update: SGD, no ×M, λ in loss units, cos 1→1e-3"),
    ("times_M_loss_units", "+ ×M drift (λ still in loss units: mean-field temperature M·λ)"),
    ("mean_field", "+ λ in mean-field units (the mean-field Langevin arm)"),
    ("mf_lambda_min_1e-5", "mean-field, cos 1→1e-5"),
    ("mf_constant_1e-3", "mean-field, constant λ = 1e-3 (no annealing)"),
    ("mf_constant_1e-2", "mean-field, constant λ = 1e-2 (no annealing)"),
    ("mf_beta0", "mean-field, λ = 0 (deterministic SGD ×M)"),
    ("mf_beta0_wd1e-3", "mean-field, λ = 0, weight decay 1e-3"),
    ("mf_beta0_wd1e-2", "mean-field, λ = 0, weight decay 1e-2"),
    ("mf_beta0_wd1e-1", "mean-field, λ = 0, weight decay 1e-1"),
    ("mf_no_sphere", "mean-field, w_i not projected on the sphere"),
    ("mf_no_sphere_lr0.05", "mean-field, w_i not projected, lr 0.05"),
    ("mf_adam_drift", "mean-field, Adam drift (β1 = 0, ε = 1, preconditioned noise)"),
    ("seed_adam", "seed's Adam variant: Adam(0.9, 0.999) + sqrt(2·lr·λ)ξ, no ×M, loss units"),
    ("seed_adam_lr1e-3", "seed's Adam variant at torch's default lr 1e-3"),
    ("adam_particles", "same particle network, deterministic Adam (lr 1e-2)"),
    ("adam_mlp", "ordinary MLP of width M, deterministic Adam (lr 1e-2)"),
    ("sgd_mlp", "ordinary MLP of width M, deterministic SGD (lr 0.2)"),
]


def config_value(run: Path, key: str):
    """The value of ``key`` (``"data.d"``, ``"seed"``) in a run folder's resolved ``config.toml``."""
    node = load_toml(run / "config.toml")
    for part in key.split("."):
        node = node[part]
    return node


def points(folder: Path) -> list[Path]:
    """The run folders of a sweep folder, finished ones only, sorted by seed (their ``config.toml``)."""
    runs = []
    for p in folder.iterdir():
        s = p / "summary.json"
        if p.is_dir() and s.exists() and json.loads(s.read_text())["status"] == "finished":
            runs.append(p)
    return sorted(runs, key=lambda p: (config_value(p, "seed"), p.name))


def load(folder: Path) -> dict[int, dict]:
    """seed -> {"final": …, "wall": s, "metrics": [records]} for a sweep folder of one arm."""
    out = {}
    for p in points(folder):
        summary = json.loads((p / "summary.json").read_text())
        records = [json.loads(line) for line in (p / "metrics.jsonl").read_text().splitlines() if line]
        out[summary["seed"]] = {"final": summary["final"], "wall": summary["wall_time_s"], "metrics": records}
    return out


def fmt(x: float) -> str:
    if not math.isfinite(x):
        return "—"
    if x == 0:
        return "0"
    return f"{x:.3g}" if 1e-3 <= abs(x) < 1e4 else f"{x:.2e}"


def ci(values) -> str:
    i = t_interval(values)
    if not math.isfinite(i.lo):
        return fmt(i.mean)
    return f"{fmt(i.mean)} ({fmt(i.lo)} – {fmt(i.hi)})"


def gci(values) -> str:
    """The geometric mean and its 95 % interval (t interval of the logs, mapped back) of positive values."""
    v = np.asarray(values, dtype=float)
    if v.size == 0 or not (np.isfinite(v).all() and (v > 0).all()):
        return "—"
    i = log_interval(v)
    if not math.isfinite(i.lo):
        return fmt(i.center)
    return f"{fmt(i.center)} ({fmt(i.lo)} – {fmt(i.hi)})"


_family: list[tuple[PairedDifference, str]] | None = None  # the paired cells of the table being built


def paired_cell(d: PairedDifference, digits: int) -> str:
    """``mean (lo – hi), p = …``, or inside a :func:`holm_table` a placeholder that becomes
    ``mean (lo – hi), p = …, Holm …, δ80 …`` once the table's p-values are known."""
    if _family is not None:
        _family.append((d, digits))
        return f"\x00{len(_family) - 1}\x00"
    return f"{d.mean:+.{digits}f} ({d.lo:+.{digits}f} – {d.hi:+.{digits}f}), p = {d.p_value:.1e}"


LEGEND = (
    "*Intervals in parentheses after a mean: 95 % Student-t intervals over the seeds (df = n − 1); for a "
    "geometric mean, the t interval of the logs mapped back. Paired cells: mean paired difference (95 % t "
    "interval, df = pairs − 1), p of the two-sided paired t-test, Holm: that p adjusted over the {k} paired "
    "cells of this table, δ80: the smallest difference this test with these pairs detects with 80 % power at "
    "α = 0.05 if the paired sd is the observed one (noncentral t).*"
)


LEGEND_MEANS = (
    "*Intervals in parentheses: 95 % Student-t intervals of the mean over the seeds (df = n − 1); for a "
    "geometric mean, the t interval of the logs mapped back.*"
)


def holm_table(build):
    """Build a table whose paired cells get Holm's adjustment over all of them, and its legend."""

    def wrapped(*args, **kwargs):
        global _family
        _family = []
        try:
            result = build(*args, **kwargs)
            family = _family
        finally:
            _family = None
        text, rest = (result[0], result[1:]) if isinstance(result, tuple) else (result, ())
        adjusted = holm([d.p_value for d, _ in family])
        for i, ((d, digits), q) in enumerate(zip(family, adjusted)):
            cell = (
                f"{d.mean:+.{digits}f} ({d.lo:+.{digits}f} – {d.hi:+.{digits}f}), p = {d.p_value:.1e}, "
                f"Holm {q:.1e}, δ80 {d.detectable():.{digits}f}"
            )
            text = text.replace(f"\x00{i}\x00", cell)
        text = text.rstrip("\n") + "\n\n" + LEGEND.format(k=len(family)) + "\n"
        return (text, *rest) if rest else text

    wrapped.__name__, wrapped.__doc__ = build.__name__, build.__doc__
    return wrapped


def at_step(run: dict, key: str, step: int) -> float:
    for r in run["metrics"]:
        if r["step"] == step and key in r:
            return float(r[key])
    return math.nan


def drift_to_noise(run: dict, step: int) -> float:
    for r in run["metrics"]:
        if r["step"] == step and r.get("optim"):
            value = r["optim"]["drift_to_noise"]
            return math.inf if value is None else float(value)  # None: no noise (β = 0)
    return math.nan


def cost(arms: dict[str, dict]) -> float:
    """CPU hours: Σ ``wall_time_s`` / 3600 over the finished runs (one thread each)."""
    total = sum(run["wall"] for runs in arms.values() for run in runs.values())
    return total / 3600


def wall_clock(folders: list[Path], what: str = "") -> str:
    """``"0.62 h wall clock (…)"``: from the first start to the last end of the finished runs of ``folders``,
    as the runs recorded them: start = ``environment.json`` ``started``, end = start + ``summary.json``
    ``wall_clock_s`` (the whole run: steps, evaluation, checkpoints), or + ``wall_time_s`` (the steps only)
    for a run that did not record ``wall_clock_s``. The text says which were used."""
    spans, without = [], 0
    for f in folders:
        for p in points(f) if f.exists() else []:
            summary = json.loads((p / "summary.json").read_text())
            start = datetime.fromisoformat(json.loads((p / "environment.json").read_text())["started"])
            if "wall_clock_s" not in summary:
                without += 1
            spans.append((start.timestamp(), summary.get("wall_clock_s", summary["wall_time_s"])))
    if not spans:
        return f"— h wall clock{what} (no finished run)"
    hours = (max(t + d for t, d in spans) - min(t for t, _ in spans)) / 3600
    if without == len(spans):
        duration = "`wall_time_s` of the runs; they did not record `wall_clock_s`"
    elif without:
        duration = (
            f"`wall_clock_s` of the runs, or `wall_time_s` for the {without} of {len(spans)} without it"
        )
    else:
        duration = "`wall_clock_s` of the runs"
    return (
        f"{hours:.2f} h wall clock{what} (from the earliest `environment.json` `started` to the latest "
        f"`started` + {duration})"
    )


def not_finished(folder: Path) -> list[str]:
    """``status (error)`` of the runs of a sweep folder that did not finish."""
    out = []
    for p in sorted(folder.iterdir()):
        s = p / "summary.json"
        if p.is_dir() and s.exists():
            summary = json.loads(s.read_text())
            if summary["status"] != "finished":
                out.append(f"{summary['status']} ({summary.get('error', '')})")
    return out


def paired_log_mse(runs: dict, base: dict) -> str:
    common = [s for s in sorted(runs) if s in base]
    if len(common) < 2:
        return "—"
    d = paired_difference(
        np.log10([runs[s]["final"]["test_mse"] for s in common]),
        np.log10([base[s]["final"]["test_mse"] for s in common]),
    )
    return paired_cell(d, 2)


@holm_table
def teacher_table(name: str, baselines: tuple[str, ...] = ("adam_mlp", "mf_beta0")) -> str:
    root = RESULTS / name
    arms = {a: load(root / a) for a, _ in ARMS if (root / a).exists()}
    failed = {a: not_finished(root / a) for a, _ in ARMS if (root / a).exists()}
    if not arms:
        return f"*(no runs in results/{name})*\n"
    head = " | ".join(f"log10 MSE − `{b}` (95 % CI), p, Holm, δ80" for b in baselines)
    first_eval = 1000
    lines = [
        f"| arm | n | test MSE: arithmetic mean (95 % CI) | test MSE: geometric mean (95 % CI, log scale) | {head} "
        "| test MSE at step {first} | aligned | coverage | modes | collapse | live | drift/noise at step 100 "
        "| CPU s/run |",
        "|---|---|---|---|" + "---|" * len(baselines) + "---|---|---|---|---|---|---|---|",
    ]
    for arm, what in ARMS:
        runs = arms.get(arm)
        if failed.get(arm):
            lines.append(
                f"| `{arm}`: {what} | {len(failed[arm])} | **did not finish**: {failed[arm][0]} "
                f"({len(failed[arm])} of {len(failed[arm]) + len(runs or {})} runs) |"
                + " |"
                * (len(baselines) + 9)
            )
        if not runs:
            continue
        seeds = sorted(runs)
        get = lambda k, runs=runs, seeds=seeds: [runs[s]["final"][k] for s in seeds]  # noqa: E731
        mse = np.array(get("test_mse"))
        diff = " | ".join("—" if arm == b else paired_log_mse(runs, arms.get(b, {})) for b in baselines)
        steps = max(r["step"] for r in runs[seeds[0]]["metrics"])
        first_eval = (
            min(1000, steps // 4)
            if steps >= 1000
            else min(r["step"] for r in runs[seeds[0]]["metrics"] if "test_mse" in r)
        )
        early = [at_step(runs[s], "test_mse", first_eval) for s in seeds]
        ratio = [drift_to_noise(runs[s], 100) for s in seeds]
        ratio_text = "∞ (no noise)" if all(r == math.inf for r in ratio) else fmt(float(np.mean(ratio)))
        lines.append(
            f"| `{arm}`: {what} | {len(seeds)} | {ci(mse)} | {gci(mse)} | {diff} | {ci(early)} | {ci(get('aligned'))} | "
            f"{ci(get('coverage'))} | {ci(get('modes'))} | {ci(get('collapse'))} | {ci(get('live'))} | "
            f"{ratio_text} | {np.mean([runs[s]['wall'] for s in seeds]):.1f} |"
        )
    lines[0] = lines[0].replace("{first}", str(first_eval))
    cpu = cost(arms)
    clock = wall_clock([root / a for a in arms], " for the whole table")
    lines.append("")
    lines.append(
        f"Cost: {cpu:.3f} CPU hours (Σ `wall_time_s` of {sum(len(r) for r in arms.values())} runs at one "
        f"thread), {clock}."
    )
    return "\n".join(lines) + "\n"


PAIRS = [  # (table, arm, against): extra paired comparisons quoted on the docs page
    ("ts_k2_n256_noise05", "mf_constant_1e-2", "mf_beta0_wd1e-2"),
    ("ts_k2_n256_noise05", "mean_field", "mf_beta0_wd1e-2"),
    ("ts_k2_M2", "mf_lambda_min_1e-5", "adam_mlp"),
]


@holm_table
def pairs_table() -> str:
    lines = [
        "| table | arm | against | n | log10 MSE difference (95 % CI), p, Holm, δ80 |",
        "|---|---|---|---|---|",
    ]
    for table, arm, other in PAIRS:
        if not (RESULTS / table / arm).exists() or not (RESULTS / table / other).exists():
            continue
        a, b = load(RESULTS / table / arm), load(RESULTS / table / other)
        common = sorted(set(a) & set(b))
        if len(common) < 2:
            continue
        d = paired_difference(
            np.log10([a[s]["final"]["test_mse"] for s in common]),
            np.log10([b[s]["final"]["test_mse"] for s in common]),
        )
        lines.append(f"| {table} | `{arm}` | `{other}` | {len(common)} | {paired_cell(d, 2)} |")
    return "\n".join(lines) + "\n"


def lambda_table() -> tuple[str, dict]:
    root = RESULTS / "lambda_constant"
    if not root.exists():
        return "*(not run)*\n", {}
    rows: dict[tuple[int, float], list[dict]] = {}
    wall = 0.0
    for p in points(root):
        d, beta = config_value(p, "data.d"), config_value(p, "optim.beta")
        summary = json.loads((p / "summary.json").read_text())
        wall += summary["wall_time_s"]
        rows.setdefault((int(d), float(beta)), []).append(summary["final"])
    lines = [
        "| d | λ (β, mean-field units) | λ·d/4 | n | test MSE | test MSE: geometric mean (log scale) "
        "| alignment_max | aligned | coverage | modes |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    curves: dict[int, list] = {}
    for (d, beta), finals in sorted(rows.items()):
        get = lambda k, finals=finals: [f[k] for f in finals]  # noqa: E731
        lines.append(
            f"| {d} | {beta:g} | {beta * d / 4:.3g} | {len(finals)} | {ci(get('test_mse'))} | "
            f"{gci(get('test_mse'))} | "
            f"{ci(get('alignment_max'))} | {ci(get('aligned'))} | {ci(get('coverage'))} | {ci(get('modes'))} |"
        )
        curves.setdefault(d, []).append(
            (beta, float(np.mean(get("coverage"))), float(np.mean(get("alignment_max"))), get("coverage"))
        )
    crossings = {}
    for d, pts in curves.items():
        pts.sort()
        for (b0, c0, *_), (b1, c1, *_) in zip(pts, pts[1:]):
            if c0 >= 0.5 > c1:  # log-linear interpolation of the coverage = 1/2 crossing
                t = (c0 - 0.5) / (c0 - c1)
                crossings[d] = math.exp(math.log(b0) + t * (math.log(b1) - math.log(b0)))
                break
    lines.append("")
    lines.append(
        "Transition (mean coverage crosses 1/2, log-linear interpolation between grid points): "
        + ", ".join(
            f"d = {d}: β_c ≈ {b:.3g} (β_c·d/4 = {b * d / 4:.3g})" for d, b in sorted(crossings.items())
        )
    )
    lines.append("")
    lines.append(f"Cost: {wall / 3600:.3f} CPU hours (Σ `wall_time_s`), {wall_clock([root])}.")
    lines.append("")
    lines.append(LEGEND_MEANS)
    return "\n".join(lines) + "\n", {"curves": curves, "crossings": crossings}


def lambda_long_table() -> str:
    """The d = 32 constant-λ points at 16,000 steps next to the same points at 4,000 (same seeds)."""
    root, short = RESULTS / "lambda_long_d32", RESULTS / "lambda_constant"
    if not root.exists():
        return "*(not run)*\n"
    lines = [
        "| β | steps | n | test MSE | test MSE: geometric mean (log scale) | alignment_max | coverage |",
        "|---|---|---|---|---|---|---|",
    ]
    wall = 0.0
    runs = {  # (steps, β, seed) -> the finished run folder, by its config.toml
        (config_value(p, "train.steps"), config_value(p, "optim.beta"), config_value(p, "seed")): p
        for folder in (short, root)
        for p in points(folder)
        if config_value(p, "data.d") == 32
    }
    for beta in (3e-4, 1e-3, 3e-3):
        for steps in (4000, 16000):
            finals = []
            for seed in (0, 1, 2):
                p = runs.get((steps, beta, seed))
                if p is not None:
                    summary = json.loads((p / "summary.json").read_text())
                    finals.append(summary["final"])
                    wall += summary["wall_time_s"] if steps == 16000 else 0.0
            if finals:
                get = lambda k, finals=finals: [f[k] for f in finals]  # noqa: E731
                lines.append(
                    f"| {beta:g} | {steps} | {len(finals)} | {ci(get('test_mse'))} | {gci(get('test_mse'))} | "
                    f"{ci(get('alignment_max'))} | {ci(get('coverage'))} |"
                )
    lines.append("")
    lines.append(
        f"Cost of the 16,000-step runs: {wall / 3600:.3f} CPU hours (Σ `wall_time_s`), {wall_clock([root])}."
    )
    lines += ["", LEGEND_MEANS]
    return "\n".join(lines) + "\n"


def anneal_table() -> str:
    root = RESULTS / "lambda_annealed"
    if not root.exists():
        return "*(not run)*\n"
    rows: dict[float, list[dict]] = {}
    wall = 0.0
    for p in points(root):
        cfg = json.loads((p / "summary.json").read_text())
        wall += cfg["wall_time_s"]
        beta = load_toml(p / "config.toml")["optim"]["beta"]
        rows.setdefault(float(beta["start"]), []).append(cfg["final"])
    lines = [
        "| λ_max (cosine to λ_max/1000) | n | test MSE | test MSE: geometric mean (log scale) | alignment_max "
        "| aligned | coverage | modes |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for start, finals in sorted(rows.items()):
        get = lambda k, finals=finals: [f[k] for f in finals]  # noqa: E731
        lines.append(
            f"| {start:g} | {len(finals)} | {ci(get('test_mse'))} | {gci(get('test_mse'))} | "
            f"{ci(get('alignment_max'))} | "
            f"{ci(get('aligned'))} | {ci(get('coverage'))} | {ci(get('modes'))} |"
        )
    lines.append("")
    lines.append(f"Cost: {wall / 3600:.3f} CPU hours (Σ `wall_time_s`), {wall_clock([root])}.")
    lines += ["", LEGEND_MEANS]
    return "\n".join(lines) + "\n"


@holm_table
def image_table(name: str, baselines: tuple[str, ...] = ("adam_mlp", "mf_beta0")) -> str:
    root = RESULTS / name
    if not root.exists():
        return "*(not run)*\n"
    arms = {p.name: load(p) for p in sorted(root.iterdir()) if p.is_dir()}
    head = " | ".join(f"accuracy − `{b}` (95 % CI), p, Holm, δ80" for b in baselines)
    lines = [
        f"| arm | n | test accuracy | {head} | accuracy after 1 epoch | test loss | CPU s/run |",
        "|---|---|---|" + "---|" * len(baselines) + "---|---|---|",
    ]
    for arm, runs in arms.items():
        seeds = sorted(runs)
        if not seeds:
            continue
        acc = [runs[s]["final"]["accuracy"] for s in seeds]
        diffs = []
        for b in baselines:
            base = arms.get(b, {})
            common = [s for s in seeds if s in base]
            if arm == b or len(common) < 2:
                diffs.append("—")
                continue
            d = paired_difference(
                [runs[s]["final"]["accuracy"] for s in common], [base[s]["final"]["accuracy"] for s in common]
            )
            diffs.append(paired_cell(d, 4))
        first_eval = min(r["step"] for r in runs[seeds[0]]["metrics"] if "accuracy" in r)
        early = [at_step(runs[s], "accuracy", first_eval) for s in seeds]
        lines.append(
            f"| `{arm}` | {len(seeds)} | {ci(acc)} | {' | '.join(diffs)} | {ci(early)} | "
            f"{ci([runs[s]['final']['test_loss'] for s in seeds])} | "
            f"{np.mean([runs[s]['wall'] for s in seeds]):.1f} |"
        )
    lines.append("")
    lines.append(
        f"Cost: {cost(arms):.3f} CPU hours (Σ `wall_time_s`), {wall_clock([root / a for a in arms])}."
    )
    return "\n".join(lines) + "\n"


def convergence_table(name: str = "convergence") -> tuple[str, dict]:
    path = RESULTS / name / "result.json"
    if not path.exists():
        return "*(not run)*\n", {}
    r = json.loads(path.read_text())
    lines = [
        f"M ∈ {r['Ms']}, {r['reps']} coupled replicates, reference M_ref = {r['M_ref']}, T = {r['steps']} steps "
        f"(lr {r['lr']}, batch {r['batch_size']}).",
        "",
        "| β | L_ref | quantity | mean per M | slope (95 % bootstrap CI) |",
        "|---|---|---|---|---|",
    ]
    for beta, b in r["betas"].items():
        for q, label in (
            ("loss_excess", "E L_M − L_ref"),
            ("w2_trained", "E sliced W2²(ν_M(T), ν_ref(T))"),
            ("w2_init", "E sliced W2²(ν_M(0), ν_ref(0)) (i.i.d. baseline)"),
        ):
            s = b[q]
            slope = f"{s['slope']:.3f} ({s['slope_ci'][0]:.3f} – {s['slope_ci'][1]:.3f})"
            lines.append(
                f"| {beta} | {fmt(b['L_ref'])} | {label} | {', '.join(fmt(m) for m in s['mean'])} | {slope} |"
            )
    for beta, b in r["betas"].items():  # where a mean excess is ≤ 0, refit over the M before it
        mean = np.array(b["loss_excess"]["mean"])
        if (mean <= 0).any():
            keep = int(np.argmax(mean <= 0))
            if keep >= 3:
                slope, lo, hi = bootstrap_slope(r["Ms"][:keep], b["loss_excess"]["values"][:keep])
                lines.append(
                    f"| {beta} | {fmt(b['L_ref'])} | E L_M − L_ref over M ≤ {r['Ms'][keep - 1]} "
                    f"(M = {r['Ms'][keep]}: mean ≤ 0) | {', '.join(fmt(m) for m in mean[:keep])} | "
                    f"{slope:.3f} ({lo:.3f} – {hi:.3f}) |"
                )
    lines.append("")
    lines.append(f"Cost: {r['wall_time_s'] / 3600:.3f} CPU hours (one process, one thread).")
    return "\n".join(lines) + "\n", r


def bootstrap_slope(Ms, values, n_boot: int = 2000, seed: int = 0) -> tuple[float, float, float]:
    """Least-squares slope of log mean on log M and its 95 % bootstrap percentile interval (replicates
    resampled within each M) as in :func:`meanfield.studies.convergence_in_m`, except that resamples with a
    mean ≤ 0 are dropped instead of clamped."""
    x = np.log(np.asarray(Ms, dtype=float))
    v = np.asarray(values, dtype=float)  # (K, reps)
    rng = np.random.default_rng(seed)

    def fit(means: np.ndarray) -> float:
        return float(np.polyfit(x, np.log(means), 1)[0])

    boots = []
    for _ in range(n_boot):
        means = np.array([row[rng.integers(0, len(row), len(row))].mean() for row in v])
        if (means > 0).all():
            boots.append(fit(means))
    lo, hi = np.percentile(boots, [2.5, 97.5])
    return fit(v.mean(1)), float(lo), float(hi)


def figures(lam: dict, conv: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ASSETS.mkdir(parents=True, exist_ok=True)
    if lam.get("curves"):
        fig, axes = plt.subplots(1, 3, figsize=(14, 3.8))
        for d, pts in sorted(lam["curves"].items()):
            b = np.array([p[0] for p in pts])
            axes[0].semilogx(b, [p[1] for p in pts], "o-", label=f"d = {d}")
            axes[1].semilogx(b * d / 4, [p[1] for p in pts], "o-", label=f"d = {d}")
            axes[2].semilogx(b * d / 4, [p[2] for p in pts], "o-", label=f"d = {d}")
        axes[0].set_xlabel("β (mean-field temperature of L = ½ E(f − y)²)")
        for ax in axes[1:]:
            ax.axvline(1.0, color="grey", ls=":", label="λ = βd/4 = 1")
            ax.set_xlabel("λ = β·d/4 (the sphere check's normalisation)")
        for ax, what in zip(axes, ("teacher coverage", "teacher coverage", "mean best |cos| per teacher")):
            ax.set_ylabel(what)
            ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(ASSETS / "feature_particles_lambda.png", dpi=110)
        plt.close(fig)
    if conv.get("betas"):
        fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
        Ms = np.array(conv["Ms"])
        for beta, b in conv["betas"].items():
            for ax, q in zip(axes, ("loss_excess", "w2_trained")):
                s = b[q]
                ax.errorbar(
                    Ms,
                    s["mean"],
                    yerr=1.96 * np.array(s["se"]),
                    fmt="o-",
                    label=f"β = {beta}: slope {s['slope']:.2f}",
                )
        s = next(iter(conv["betas"].values()))["w2_init"]  # the same initial clouds for every β
        axes[1].plot(Ms, s["mean"], "k--", alpha=0.5, label=f"at initialisation: slope {s['slope']:.2f}")
        top = max(b["loss_excess"]["mean"][0] for b in conv["betas"].values())
        axes[0].plot(Ms, top * Ms[0] / Ms, ":", color="grey", label="∝ 1/M")
        axes[0].set_ylabel("E L_M(T) − L_ref(T)")
        axes[1].set_ylabel("E sliced W2²(ν_M, ν_ref)")
        for ax in axes:
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlabel("M")
            ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(ASSETS / "feature_particles_convergence.png", dpi=110)
        plt.close(fig)


def main() -> None:
    lam_text, lam = lambda_table()
    conv_text, conv = convergence_table()
    parts = {
        "ts_k2": ("Teacher–student, two-index ReLU teacher (d = 16, k = 2, M = 128)", teacher_table("ts_k2")),
        "ts_k2_steps500": (
            "Two-index teacher at 500 steps (the step budget)",
            teacher_table("ts_k2_steps500"),
        ),
        "ts_k1": (
            "Teacher–student, single-index ReLU teacher (d = 16, k = 1, M = 128)",
            teacher_table("ts_k1"),
        ),
        "ts_k4": (
            "Teacher–student, four-index ReLU teacher (d = 16, k = 4, M = 128)",
            teacher_table("ts_k4"),
        ),
        "ts_k2_M8": ("Two-index teacher with M = 8 particles", teacher_table("ts_k2_M8")),
        "ts_k2_M2": ("Two-index teacher with M = 2 particles", teacher_table("ts_k2_M2")),
        "ts_k2_n256_noise05": (
            "Two-index teacher, 256 training samples, label noise 0.5",
            teacher_table("ts_k2_n256_noise05"),
        ),
        "lambda_long_d32": ("d = 32 at 4× the steps", lambda_long_table()),
        "pairs": ("Extra paired comparisons", pairs_table()),
        "lambda_constant": ("Constant λ", lam_text),
        "lambda_annealed": ("Annealed λ (the seed's schedule shape)", anneal_table()),
        "fmnist": ("Fashion-MNIST", image_table("fmnist")),
        "cifar10": ("CIFAR-10 (lossy JPEG-75 copy)", image_table("cifar10")),
        "convergence": ("Convergence in M", conv_text),
        "convergence_wide": (
            "Convergence in M up to 4096 (β = 1e-3)",
            convergence_table("convergence_wide")[0],
        ),
    }
    tables = RESULTS / "tables"
    tables.mkdir(parents=True, exist_ok=True)
    stamp = "<!-- generated by experiments/feature_particles/report.py from the committed run folders -->\n"
    for name, (_, text) in parts.items():
        (tables / f"{name}.md").write_text(stamp + text)
    combined = stamp + "\n".join(f"### {title}\n\n{text}" for title, text in parts.values())
    (RESULTS / "tables.md").write_text(combined)
    figures(lam, conv)
    print(combined)


if __name__ == "__main__":
    main()
