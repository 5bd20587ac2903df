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
t-test (:func:`meanfield.studies.stats.paired_difference`). Test MSEs span orders of magnitude, so arms are compared
on ``log10`` test MSE (a difference of −1 is a 10× smaller error), and each MSE column has, beside the
arithmetic mean, the geometric mean with the t interval of ``ln MSE`` mapped back
(:func:`meanfield.studies.stats.log_interval`). Every paired cell also carries its p-value adjusted by Holm's
step-down procedure over the paired cells of the same table (:func:`meanfield.studies.stats.holm`) and ``δ80``, the
smallest difference the same test with the same pairs detects with 80 % power at α = 0.05 at the observed
paired sd (:func:`meanfield.studies.stats.detectable_difference`, noncentral t).
"""

from __future__ import annotations

import importlib.util
import json
import math
from datetime import datetime
from pathlib import Path

import numpy as np

from meanfield.config import load_toml
from meanfield.studies.stats import (
    HolmFamily,
    PairedDifference,
    holm,
    holm_cell,
    interval_cell,
    mean_cell,
    number_text,
    p_text,
    paired_difference,
)

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
ASSETS = HERE.parents[1] / "docs" / "assets"

ARMS = [  # (folder, what it is); every arm: 4000 steps of batch 256 (1,024,000 samples), M = 128
    ("seed_literal", "seed's literal update: SGD, no ×M, λ in loss units, cos 1→1e-3"),
    ("times_M_loss_units", "+ ×M drift (λ still in loss units: mean-field temperature M·λ)"),
    ("mean_field", "+ λ in mean-field units (the mean-field Langevin arm)"),
    ("mf_lambda_min_1e-5", "mean-field, cos 1→1e-5"),
    ("mf_lambda_max_0.5", "mean-field, cos 0.5→5e-4 (added in issue 28, after the other arms)"),
    ("mf_lambda_min_1e-2", "mean-field, cos 1→1e-2 (added in issue 28, after the other arms)"),
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


def gci(values) -> str:
    """The geometric mean and its 95 % interval (t interval of the logs, mapped back) of positive values."""
    v = np.asarray(values, dtype=float)
    if v.size == 0 or not (np.isfinite(v).all() and (v > 0).all()):
        return "—"
    return mean_cell(v, log=True)


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


# a table whose paired cells get Holm's adjustment over all of them, and its legend
holm_table = HolmFamily.table(
    holm_cell, lambda text, k: text.rstrip("\n") + "\n\n" + LEGEND.format(k=k) + "\n"
)


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


def log_mse_difference(runs: dict, base: dict) -> PairedDifference | None:
    """``log10`` test MSE of ``runs`` − that of ``base``, paired over their common seeds (``None`` for < 2)."""
    common = [s for s in sorted(runs) if s in base]
    if len(common) < 2:
        return None
    return paired_difference(
        np.log10([runs[s]["final"]["test_mse"] for s in common]),
        np.log10([base[s]["final"]["test_mse"] for s in common]),
    )


def holm_adjusted(compared: dict) -> dict:
    """``{key: (d, p̃)}``: each paired difference of the table being built with its Holm-adjusted p over all of
    them, the ``Holm`` its table prints (they must be the table's whole family: checked)."""
    family = HolmFamily.active()
    if family is not None and len(family) != len(compared):
        raise RuntimeError(f"{len(compared)} comparisons kept, but the table's Holm family has {len(family)}")
    adjusted = holm([d.p_value for d in compared.values()])
    return {key: (d, float(q)) for (key, d), q in zip(compared.items(), adjusted)}


@holm_table
def teacher_table(name: str, baselines: tuple[str, ...] = ("adam_mlp", "mf_beta0")) -> tuple[str, dict]:
    """The teacher–student table of ``results/<name>``, and ``{"runs": {arm: {seed: run}}, "compared":
    {(arm, baseline): (d, Holm p)}}`` (the values of its paired cells, for :func:`glance_table`)."""
    root = RESULTS / name
    arms = {a: load(root / a) for a, _ in ARMS if (root / a).exists()}
    failed = {a: not_finished(root / a) for a, _ in ARMS if (root / a).exists()}
    if not arms:
        return f"*(no runs in results/{name})*\n", {}
    compared: dict[tuple[str, str], PairedDifference] = {}
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
        cells = []
        for b in baselines:
            d = None if arm == b else log_mse_difference(runs, arms.get(b, {}))
            if d is not None:
                compared[(arm, b)] = d
            cells.append("—" if d is None else HolmFamily.paired(d, 2))
        diff = " | ".join(cells)
        steps = max(r["step"] for r in runs[seeds[0]]["metrics"])
        first_eval = (
            min(1000, steps // 4)
            if steps >= 1000
            else min(r["step"] for r in runs[seeds[0]]["metrics"] if "test_mse" in r)
        )
        early = [at_step(runs[s], "test_mse", first_eval) for s in seeds]
        ratio = [drift_to_noise(runs[s], 100) for s in seeds]
        ratio_text = (
            "∞ (no noise)" if all(r == math.inf for r in ratio) else number_text(float(np.mean(ratio)))
        )
        lines.append(
            f"| `{arm}`: {what} | {len(seeds)} | {mean_cell(mse)} | {gci(mse)} | {diff} | {mean_cell(early)} | {mean_cell(get('aligned'))} | "
            f"{mean_cell(get('coverage'))} | {mean_cell(get('modes'))} | {mean_cell(get('collapse'))} | {mean_cell(get('live'))} | "
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
    return "\n".join(lines) + "\n", {"runs": arms, "compared": holm_adjusted(compared)}


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
        lines.append(f"| {table} | `{arm}` | `{other}` | {len(common)} | {HolmFamily.paired(d, 2)} |")
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
            f"| {d} | {beta:g} | {beta * d / 4:.3g} | {len(finals)} | {mean_cell(get('test_mse'))} | "
            f"{gci(get('test_mse'))} | "
            f"{mean_cell(get('alignment_max'))} | {mean_cell(get('aligned'))} | {mean_cell(get('coverage'))} | {mean_cell(get('modes'))} |"
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


# ----------------------------------------------------------------------------------------------------------
# issue 28: intensive order parameters of the λ transition, the M scan, the mean-field prediction
# ----------------------------------------------------------------------------------------------------------
INTENSIVE = ("aligned", "q", "q_abs_a")  # per-particle averages: their mean-field values do not depend on M
STATS = (*INTENSIVE, "coverage")  # coverage: an extreme over particles (does some particle sit on w*_k?)
N_BOOT = 2000
LAW_ANCHOR = 1e-4  # the law's second anchor (its coldest β, 1e-5, is the first): how far "half" depends on it


def power_text(x: float) -> str:
    """A grid β as the page writes it: 1e-4, not 0.0001 or 1e-04."""
    return f"{x:.0e}".replace("e-0", "e-")


def theory_module():
    """``theory/feature_transition.py`` (the mean-field law of the single-index teacher), imported by path."""
    from meanfield.studies.validation import load_check

    return load_check(HERE.parents[1] / "theory" / "feature_transition.py")


def cells(folder: Path, key: str) -> dict[tuple[int, float], dict[int, dict]]:
    """(value of ``key``, β) -> seed -> final metrics, from the finished runs' config.toml and summary.json."""
    out: dict[tuple[int, float], dict[int, dict]] = {}
    for p in points(folder):
        summary = json.loads((p / "summary.json").read_text())
        out.setdefault((int(config_value(p, key)), float(config_value(p, "optim.beta"))), {})[
            int(config_value(p, "seed"))
        ] = summary["final"] | {"_wall": summary["wall_time_s"]}
    return out


def uniform_level(stat: str, d: int, k: int, M: int) -> float:
    """The statistic's value for i.i.d. uniform directions on S^{d−1} (the disordered reference)."""
    if stat in ("q", "q_abs_a"):
        return k / d
    tail = theory_module().uniform_values(d, 1)["aligned"]  # P(|t| ≥ 0.9) for one direction
    if stat == "aligned":
        return k * tail
    return 1 - (1 - tail) ** M  # coverage: P(some of M uniform particles within |cos| ≥ 0.9 of w*_k)


def crossing(betas, values, stat: str, uniform: float) -> float:
    """β where a mean curve crosses its transition level (log-linear interpolation; NaN if it does not).

    Intensive statistics: half way from the uniform-law value to the value at the coldest β of the grid.
    Coverage: 1/2 (the page's earlier definition)."""
    b = np.asarray(betas, dtype=float)
    v = np.asarray(values, dtype=float)
    order = np.argsort(b)
    b, v = b[order], v[order]
    level = 0.5 if stat == "coverage" else uniform + (v[0] - uniform) / 2
    for i in range(len(b) - 1):
        if v[i] >= level > v[i + 1]:
            f = (v[i] - level) / (v[i] - v[i + 1])
            return float(math.exp(math.log(b[i]) + f * (math.log(b[i + 1]) - math.log(b[i]))))
    return math.nan


def crossing_boot(group: dict[float, dict[int, dict]], stat: str, uniform: float, rng) -> np.ndarray:
    """Bootstrap over seeds of the crossing: the seeds (paired across β: same data and initialisation) are
    resampled with replacement, the same resample for every β of the curve."""
    betas = sorted(group)
    seeds = sorted(set.intersection(*(set(group[b]) for b in betas)))
    vals = np.array([[group[b][s][stat] for s in seeds] for b in betas])  # (β, seeds)
    out = np.empty(N_BOOT)
    for i in range(N_BOOT):
        pick = rng.integers(0, len(seeds), len(seeds))
        out[i] = crossing(betas, vals[:, pick].mean(1), stat, uniform)
    return out


def fit_exponent(ds, logs_beta) -> float:
    return float(np.polyfit(np.log(ds), logs_beta, 1)[0])


def transition_table(name: str, key: str, k: int, theory: dict | None = None) -> tuple[str, dict]:
    """Means per (d or M, β) of every statistic; the crossing of each with its bootstrap interval; and, over d,
    the exponent of β_half ∝ d^p (least squares on log–log, bootstrap percentile interval)."""
    root = RESULTS / name
    if not root.exists():
        return "*(not run)*\n", {}
    return _transition(cells(root, key), key, k, theory, [root])


def cold_sensitivity(name: str, k: int, colds=(1e-4, 3e-4)) -> str:
    """The exponent of β_half ∝ d^p when the "cold value" is read at β_cold instead of the coldest grid point
    (the curve restricted to β ≥ β_cold): how much the non-stationary coldest runs decide the exponent."""
    root = RESULTS / name
    if not root.exists():
        return ""
    groups: dict[int, dict[float, dict[int, dict]]] = {}
    for (d, beta), seeds in cells(root, "data.d").items():
        groups.setdefault(d, {})[beta] = seeds
    ds = sorted(groups)
    rng = np.random.default_rng(2)
    lines = [
        "| statistic | " + " | ".join(f"exponent, cold value at β = {c:g} (95 % CI)" for c in colds) + " |",
        "|---|" + "---|" * len(colds),
    ]
    for stat in INTENSIVE:
        row = []
        for cold in colds:
            cs, boots = [], []
            for d in ds:
                grp = {b: v for b, v in groups[d].items() if b >= cold * (1 - 1e-9)}
                betas = sorted(grp)
                uni = uniform_level(stat, d, k, 128)
                cs.append(
                    crossing(betas, [np.mean([f[stat] for f in grp[b].values()]) for b in betas], stat, uni)
                )
                boots.append(crossing_boot(grp, stat, uni, rng))
            if not all(math.isfinite(c) for c in cs):
                row.append("— (no crossing at some d)")
                continue
            b = np.stack(boots, 1)
            ok = np.isfinite(b).all(1)
            lo, hi = np.percentile([fit_exponent(ds, np.log(x)) for x in b[ok]], [2.5, 97.5])
            row.append(f"{fit_exponent(ds, np.log(cs)):.2f} ({lo:.2f} – {hi:.2f})")
        lines.append(f"| {stat} | " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


def transition_table_M() -> tuple[str, dict]:
    """d = 16, k = 2 at M = 32 and 512 (``lambda_M``) and M = 128 (``lambda_q``, the same seeds 0–2)."""
    root = RESULTS / "lambda_M"
    if not root.exists():
        return "*(not run)*\n", {}
    return _transition(m_scan(), "model.n_particles", 2, None, [root])


def m_scan() -> dict[tuple[int, float], dict[int, dict]]:
    """(M, β) -> seed -> final metrics at d = 16, k = 2: ``lambda_M`` (M = 32, 512) and the ``lambda_q`` runs
    of d = 16 (M = 128) restricted to the M scan's seeds."""
    data = cells(RESULTS / "lambda_M", "model.n_particles")
    base = RESULTS / "lambda_q"
    if base.exists():
        seeds_m = {s for v in data.values() for s in v}
        for (d, beta), seeds in cells(base, "data.d").items():
            if d == 16:
                data[(128, beta)] = {s: f for s, f in seeds.items() if s in seeds_m}
    return data


def _transition(data, key, k, theory, roots) -> tuple[str, dict]:
    groups: dict[int, dict[float, dict[int, dict]]] = {}
    for (g, beta), seeds in data.items():
        groups.setdefault(g, {})[beta] = seeds
    label = "d" if key == "data.d" else "M"
    d_fixed = {g: (g if key == "data.d" else 16) for g in groups}
    M_fixed = {g: (128 if key == "data.d" else g) for g in groups}
    lines = [
        f"| {label} | β | β·d/4 | n | test MSE (geometric mean) | aligned | q | q_abs_a | coverage |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for g in sorted(groups):
        for beta in sorted(groups[g]):
            finals = list(groups[g][beta].values())
            get = lambda s, finals=finals: [f[s] for f in finals]  # noqa: E731
            lines.append(
                f"| {g} | {beta:g} | {beta * d_fixed[g] / 4:.3g} | {len(finals)} | {gci(get('test_mse'))} | "
                + " | ".join(mean_cell(get(s)) for s in STATS)
                + " |"
            )
    rng = np.random.default_rng(0)
    result: dict = {"crossings": {}, "boot": {}, "curves": {}}
    lines += [
        "",
        f"Transition temperatures β_half (95 % bootstrap interval over seeds, {N_BOOT} resamples of the seeds, the "
        "same resample at every β of a curve). Intensive statistics: where the mean crosses half way from the "
        "uniform-law value (q: k/d; aligned: k·P(|cos| ≥ 0.9)) to the value at the coldest β of the grid; "
        "coverage: where it crosses 1/2.",
        "",
        f"| statistic | {label} | uniform-law value | cold value (β = {min(min(g) for g in groups.values()):g}) "
        "| β_half (95 % CI) | β_half·d/4 |" + (" mean-field prediction (k = 1) |" if theory else ""),
        "|---|---|---|---|---|---|" + ("---|" if theory else ""),
    ]
    for stat in STATS:
        for g in sorted(groups):
            grp = groups[g]
            betas = sorted(grp)
            means = [float(np.mean([f[stat] for f in grp[b].values()])) for b in betas]
            uni = uniform_level(stat, d_fixed[g], k, M_fixed[g])
            c = crossing(betas, means, stat, uni)
            boot = crossing_boot(grp, stat, uni, rng)
            ok = boot[np.isfinite(boot)]
            lo, hi = np.percentile(ok, [2.5, 97.5]) if len(ok) else (math.nan, math.nan)
            missing = "" if len(ok) == N_BOOT else f" ({N_BOOT - len(ok)} resamples without a crossing)"
            result["crossings"][(stat, g)] = c
            result["boot"][(stat, g)] = boot
            result["curves"][(stat, g)] = (betas, means)
            pred = ""
            if theory:
                tv = theory.get(str(d_fixed[g]), {}).get(stat)
                pred = f" {number_text(tv)} |" if tv is not None and stat != "coverage" else " — |"
            lines.append(
                f"| {stat} | {g} | {number_text(uni)} | {number_text(means[0])} | {interval_cell(c, lo, hi)}{missing} "
                f"| {number_text(c * d_fixed[g] / 4)} |{pred}"
            )
    if key == "data.d" and len(groups) >= 2:
        ds = sorted(groups)
        lines += [
            "",
            "| statistic | exponent p of β_half ∝ d^p (95 % bootstrap CI) | resamples used |",
            "|---|---|---|",
        ]
        result["exponent"] = {}
        for stat in STATS:
            cs = [result["crossings"][(stat, d)] for d in ds]
            if not all(math.isfinite(x) for x in cs):
                lines.append(f"| {stat} | — (no crossing at some d) | — |")
                continue
            boots = np.stack([result["boot"][(stat, d)] for d in ds], 1)  # (N_BOOT, n_d), independent over d
            ok = np.isfinite(boots).all(1)
            slopes = [fit_exponent(ds, np.log(b)) for b in boots[ok]]
            lo, hi = np.percentile(slopes, [2.5, 97.5])
            p = fit_exponent(ds, np.log(cs))
            result["exponent"][stat] = (p, lo, hi)
            lines.append(f"| {stat} | {p:.2f} ({lo:.2f} – {hi:.2f}) | {int(ok.sum())} of {N_BOOT} |")
        if theory:
            lines += ["", "| statistic | mean-field exponent (k = 1, d = 8, 16, 32) |", "|---|---|"]
            for stat in INTENSIVE:
                lines.append(
                    f"| {stat} | {fit_exponent(ds, np.log([theory[str(d)][stat] for d in ds])):.2f} |"
                )
    own = [json.loads((p / "summary.json").read_text())["wall_time_s"] for r in roots for p in points(r)]
    lines += [
        "",
        f"Cost: {sum(own) / 3600:.3f} CPU hours (Σ `wall_time_s` of the {len(own)} runs of "
        + ", ".join(f"`{r.name}`" for r in roots)
        + f", one thread each; rows taken from another folder not counted), {wall_clock(roots)}.",
        "",
        LEGEND_MEANS,
    ]
    return "\n".join(lines) + "\n", result


def level_crossing(betas, vals: np.ndarray, level: float, rng) -> tuple[float, float, float, np.ndarray]:
    """Where the seeds' mean curve ``vals`` (β, seeds) crosses ``level``, and its 95 % bootstrap interval over
    seeds (the same resample at every β): ``(β_cross, lo, hi, the resamples' crossings)``."""
    n = vals.shape[1]
    c = crossing_at(betas, vals.mean(1), level)
    boot = np.array(
        [crossing_at(betas, vals[:, rng.integers(0, n, n)].mean(1), level) for _ in range(N_BOOT)]
    )
    ok = boot[np.isfinite(boot)]
    lo, hi = np.percentile(ok, [2.5, 97.5]) if len(ok) else (math.nan, math.nan)
    return c, lo, hi, boot


def law_half_crossing(law: dict, stat: str, d: int, anchor: float | None = None) -> tuple[float, float]:
    """The level half way from the uniform-law value to a ``mean_field_k2.py`` curve's value at its coldest β
    (or at the β ``anchor`` of its grid), and where that curve crosses it: ``(level, β_cross)``."""
    order = np.argsort(law["beta"])[::-1]
    betas, values = np.array(law["beta"])[order], np.array(law[stat])[order]
    cold = values[-1] if anchor is None else values[np.flatnonzero(np.isclose(betas, anchor, rtol=1e-9, atol=0))[0]]
    uni = uniform_level(stat, d, 2, 128)
    level = uni + (cold - uni) / 2
    return level, crossing_at(betas, values, level)


def law_anchor_sensitivity(curves: dict[int, dict], anchor: float = LAW_ANCHOR) -> tuple[str, dict[str, tuple]]:
    """How much the law's own anchor moves its crossings: per statistic, β_half·d/4 at each d and the exponent of
    β_half ∝ d^p with "half" read at the law's coldest β and at ``anchor``, and the largest relative shift.
    Returns the table and ``{stat: (largest shift, exponent at anchor)}`` (both empty below three d; the shift NaN
    where a curve does not cross at some d)."""
    ds = sorted(curves)
    if len(ds) < 3 or not all(np.isclose(c["beta"], anchor, rtol=1e-9, atol=0).any() for c in curves.values()):
        return "", {}
    shifts: dict[str, tuple] = {}
    cold = min(curves[ds[0]]["beta"])
    lines = [
        f"The law's own anchor: its crossings with \"half\" read at its coldest β ({power_text(cold)}) and at β = {power_text(anchor)}"
        " (β_half·d/4 per d; exponent of β_half ∝ d^p; the largest shift of a crossing between the two):",
        "",
        "| statistic | anchored at | " + " | ".join(f"d = {d}" for d in ds) + " | exponent | largest shift |",
        "|---|---|" + "---|" * len(ds) + "---|---|",
    ]  # fmt: skip
    for stat in INTENSIVE:
        at = {a: [law_half_crossing(curves[d], stat, d, a)[1] for d in ds] for a in (None, anchor)}
        ratios = [w / c for c, w in zip(at[None], at[anchor], strict=True)]
        shift = max(abs(r - 1) for r in ratios) if all(map(math.isfinite, ratios)) else math.nan  # NaN: no crossing at some d
        shifts[stat] = (shift, fit_exponent(ds, np.log(at[anchor])))
        for a, cs in at.items():
            cells_ = " | ".join(number_text(c * d / 4) for c, d in zip(cs, ds, strict=True))
            tail = f"{100 * shift:.1f} %" if a == anchor else ""
            lines.append(f"| {stat} | {power_text(cold if a is None else a)} | {cells_} | {fit_exponent(ds, np.log(cs)):.2f} | {tail} |")
    return "\n".join(lines) + "\n", shifts


def crossing_at(betas, values, level: float) -> float:
    """β where a decreasing-in-β curve first falls below ``level`` going hot (log-linear; NaN if it does not)."""
    b = np.asarray(betas, dtype=float)
    v = np.asarray(values, dtype=float)
    order = np.argsort(b)
    b, v = b[order], v[order]
    for i in range(len(b) - 1):
        if v[i] >= level > v[i + 1]:
            f = (v[i] - level) / (v[i] - v[i + 1])
            return float(math.exp(math.log(b[i]) + f * (math.log(b[i + 1]) - math.log(b[i]))))
    return math.nan


def k1_comparison_table() -> tuple[str, dict]:
    """The single-index runs (``lambda_k1``) against the mean-field law at the same (d, β): every intensive
    statistic, and the β where runs and law cross the same level, half way from the uniform-law value to the
    law's value at β = 1e-5 (a level that does not depend on how far the coldest runs are from equilibrium)."""
    ft = theory_module()
    fine = np.geomspace(1.0, ft.BETA_COLD, 61)

    def law(d, betas):
        return ft.curve(d, np.array(betas)), fine, ft.curve(d, fine)

    return law_comparison_table("lambda_k1", law, k=1)


def k2_comparison_table() -> tuple[str, dict]:
    """The two-index runs (``lambda_q``) against the 2-D mean-field law solved by ``mean_field_k2.py``
    (``results/mean_field_k2/d=D.json``), as :func:`k1_comparison_table`."""
    folder = RESULTS / "mean_field_k2"
    if not folder.exists():
        return "*(not run)*\n", {}
    curves = {
        json.loads(f.read_text())["d"]: json.loads(f.read_text()) for f in sorted(folder.glob("d=*.json"))
    }

    def law(d, betas):
        cur = curves[d]
        index = {round(math.log(b), 9): i for i, b in enumerate(cur["beta"])}
        pick = [index[round(math.log(b), 9)] for b in betas]
        at = {key: [cur[key][i] for i in pick] for key in INTENSIVE}
        order = np.argsort(cur["beta"])[::-1]
        full = {key: [cur[key][i] for i in order] for key in INTENSIVE}
        return at, np.array(cur["beta"])[order], full

    text, out = law_comparison_table("lambda_q", law, k=2, only=set(curves))
    if 16 in curves:
        m_text, out["M"] = k2_M_against_law(curves[16])
        text = text.rstrip("\n") + "\n\n" + m_text
    anchor_text, out["anchor_shift"] = law_anchor_sensitivity(curves)
    text = text.rstrip("\n") + "\n\n" + anchor_text
    text = text.rstrip("\n") + "\n\n" + quadrature_check(curves, folder / "refined")
    cpu = sum(c["cpu_s"] for c in curves.values())
    grid = next(iter(curves.values()))["grid"]
    worst = max(max(c["residual"]) for c in curves.values())
    text = text.rstrip("\n") + (
        f"\n\nMean-field law: {cpu / 60:.1f} CPU minutes for d = {sorted(curves)} "
        f"(grid {grid}; largest fixed-point residual {worst:.1e}).\n"
    )
    return text, out


def quadrature_check(curves: dict[int, dict], refined: Path) -> str:
    """The law's crossings (the law-anchored levels) on the committed grid against a finer one
    (``mean_field_k2.py D refined/d=D.json 4 4 16``), and the largest change of each statistic over β."""
    files = sorted(refined.glob("d=*.json")) if refined.is_dir() else []
    parts = []
    for f in files:
        fine = json.loads(f.read_text())
        base = curves.get(fine["d"])
        if base is None or base["beta"] != fine["beta"]:
            continue
        cells_ = []
        for stat in INTENSIVE:
            crossing_of = [law_half_crossing(cur, stat, fine["d"])[1] for cur in (base, fine)]
            worst = float(np.max(np.abs(np.array(base[stat]) - np.array(fine[stat]))))
            cells_.append(
                f"{stat} {100 * (crossing_of[1] / crossing_of[0] - 1):+.2f} % (largest change {worst:.1e})"
            )
        parts.append(
            f"Quadrature check, d = {fine['d']}: the law on the grid {fine['grid']} ({fine['cpu_s'] / 60:.0f} CPU "
            "minutes) moves its crossings by " + ", ".join(cells_) + "."
        )
    return "\n\n".join(parts) + "\n" if parts else ""


def k2_M_against_law(law: dict) -> tuple[str, dict]:
    """The M scan at d = 16 (``transition_table_M``'s runs: M = 32, 128, 512, seeds 0–2) against the 2-D law
    ``law`` (a ``mean_field_k2.py`` curve at d = 16): where each M's mean curve crosses the level half way from
    the uniform-law value to the law's value at its coldest β, with a bootstrap over seeds. If the runs' excess
    over the law is a finite-M correction, the crossings fall towards the law's as M grows."""
    if not (RESULTS / "lambda_M").exists():
        return "", {}
    data = m_scan()
    rng = np.random.default_rng(2)
    lines = [
        "The M scan (d = 16, seeds 0–2) against the same law, at the same law-anchored levels: where each M's runs "
        f"cross it (95 % bootstrap interval over seeds, {N_BOOT} resamples) and the ratio to the law's crossing:",
        "",
        "| statistic | level | law | M = 32 | M = 128 | M = 512 |",
        "|---|---|---|---|---|---|",
    ]
    out: dict = {}
    for stat in INTENSIVE:
        level, c_law = law_half_crossing(law, stat, 16)
        row = [stat, number_text(level), number_text(c_law)]
        for M in (32, 128, 512):
            grp = {b: seeds for (m, b), seeds in data.items() if m == M}
            betas = sorted(grp)
            seeds = sorted(set.intersection(*(set(grp[b]) for b in betas)))
            vals = np.array([[grp[b][s][stat] for s in seeds] for b in betas])  # (β, seeds)
            c, lo, hi, _ = level_crossing(betas, vals, level, rng)
            out[(stat, M)] = (c, lo, hi, c_law)
            row.append(f"{interval_cell(c, lo, hi)}: {number_text(c / c_law)}×")
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n", out


def law_comparison_table(name: str, law, k: int, only=None) -> tuple[str, dict]:
    """Runs of ``name`` against a mean-field law: ``law(d, betas) -> (values at betas, fine βs, values there)``."""
    root = RESULTS / name
    if not root.exists():
        return "*(not run)*\n", {}
    data = {key: v for key, v in cells(root, "data.d").items() if only is None or key[0] in only}
    groups: dict[int, dict[float, dict[int, dict]]] = {}
    for (d, beta), seeds in data.items():
        groups.setdefault(d, {})[beta] = seeds
    lines = [
        "| d | β | β·d/4 | n | aligned: runs | aligned: mean field | q: runs | q: mean field | q_abs_a: runs "
        "| q_abs_a: mean field |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    rng = np.random.default_rng(1)
    out: dict = {"runs": {}, "law": {}, "cross": {}}
    cross_lines = [
        "",
        "Crossings of the level half way from the uniform-law value to the mean-field value at β = 1e-5, by the "
        f"runs (95 % bootstrap interval over seeds, {N_BOOT} resamples) and by the mean-field law:",
        "",
        "| statistic | d | level | β_cross: runs (95 % CI) | β_cross: mean field | runs / mean field |",
        "|---|---|---|---|---|---|",
    ]
    for d in sorted(groups):
        betas = sorted(groups[d])
        law_at, fine, law_fine = law(d, betas)
        uni = {key: uniform_level(key, d, k, 128) for key in INTENSIVE}
        out["law"][d] = law_at
        for i, beta in enumerate(betas):
            finals = list(groups[d][beta].values())
            cells_ = []
            for stat in INTENSIVE:
                cells_ += [mean_cell([f[stat] for f in finals]), number_text(law_at[stat][i])]
            lines.append(
                f"| {d} | {beta:g} | {beta * d / 4:.3g} | {len(finals)} | " + " | ".join(cells_) + " |"
            )
        seeds = sorted(set.intersection(*(set(groups[d][b]) for b in betas)))
        for stat in INTENSIVE:
            level = uni[stat] + (law_fine[stat][-1] - uni[stat]) / 2
            vals = np.array([[groups[d][b][s][stat] for s in seeds] for b in betas])  # (β, seeds)
            c_runs, lo, hi, boot = level_crossing(betas, vals, level, rng)
            c_law = crossing_at(fine, law_fine[stat], level)
            out["cross"][(stat, d)] = (c_runs, boot, c_law)
            out["runs"][(stat, d)] = (betas, vals.mean(1).tolist())
            cross_lines.append(
                f"| {stat} | {d} | {number_text(level)} | {interval_cell(c_runs, lo, hi)} | {number_text(c_law)} "
                f"| {number_text(c_runs / c_law)} |"
            )
    ds = sorted(groups)
    if len(ds) >= 3:
        cross_lines += [
            "",
            "| statistic | exponent p (β_cross ∝ d^p): runs (95 % bootstrap CI) | mean field |",
            "|---|---|---|",
        ]
    for stat in INTENSIVE if len(ds) >= 3 else ():
        cs = [out["cross"][(stat, d)][0] for d in ds]
        law_cs = [out["cross"][(stat, d)][2] for d in ds]
        if not all(math.isfinite(x) for x in cs + law_cs):
            cross_lines.append(f"| {stat} | — (no crossing at some d) | — |")
            continue
        boots = np.stack([out["cross"][(stat, d)][1] for d in ds], 1)
        ok = np.isfinite(boots).all(1)
        slopes = [fit_exponent(ds, np.log(b)) for b in boots[ok]]
        lo, hi = np.percentile(slopes, [2.5, 97.5])
        cross_lines.append(
            f"| {stat} | {fit_exponent(ds, np.log(cs)):.2f} ({lo:.2f} – {hi:.2f}; {int(ok.sum())} of {N_BOOT} "
            f"resamples) | {fit_exponent(ds, np.log(law_cs)):.2f} |"
        )
    wall = sum(f["_wall"] for seeds in data.values() for f in seeds.values())
    n_runs = sum(len(seeds) for seeds in data.values())
    cross_lines += [
        "",
        f"Cost: {wall / 3600:.3f} CPU hours (Σ `wall_time_s` of {n_runs} runs at one thread), {wall_clock([root])}.",
        "",
        LEGEND_MEANS,
    ]
    return "\n".join(lines + cross_lines) + "\n", out


def rerun_agreement() -> str:
    """How the ``lambda_q`` runs compare with the committed ``lambda_constant`` runs of the same (d, β, seed)."""
    old, new = RESULTS / "lambda_constant", RESULTS / "lambda_q"
    if not (old.exists() and new.exists()):
        return ""
    a = {(int(d), b): seeds for (d, b), seeds in cells(old, "data.d").items()}
    b = cells(new, "data.d")
    pairs = [(a[c][s], b[c][s]) for c in a if c in b for s in a[c] if s in b[c]]
    worst = {
        m: max(abs(x[m] - y[m]) / max(abs(x[m]), 1e-30) for x, y in pairs)
        for m in ("test_mse", "aligned", "coverage", "alignment_max")
    }
    return (
        f"Rerun check: {len(pairs)} runs of this table have the (d, β, seed) of a committed `lambda_constant` run; "
        "largest relative difference of their final values: "
        + ", ".join(f"{m} {number_text(v)}" for m, v in worst.items())
        + "."
    )


def k1_long_table() -> str:
    """Single-index runs at β = 1e-4 after 4,000 (``lambda_k1``) and 16,000 steps (``lambda_k1_long``), same
    seeds, against the mean-field law: do the coldest runs still move towards it?"""
    root, short = RESULTS / "lambda_k1_long", RESULTS / "lambda_k1"
    if not (root.exists() and short.exists()):
        return "*(not run)*\n"
    ft = theory_module()
    runs = {
        (int(config_value(p, "data.d")), int(config_value(p, "train.steps")), int(config_value(p, "seed"))): p
        for folder in (short, root)
        for p in points(folder)
        if math.isclose(config_value(p, "optim.beta"), 1e-4)
    }
    lines = [
        "| d | steps | n | aligned | q | q_abs_a | mean field: aligned, q, q_abs_a |",
        "|---|---|---|---|---|---|---|",
    ]
    wall = 0.0
    for d in sorted({k[0] for k in runs if k[1] == 16000}):
        law = ft.curve(d, np.array([1e-4]))
        for steps in (4000, 16000):
            finals = []
            for seed in (0, 1, 2):
                p = runs.get((d, steps, seed))
                if p is not None:
                    summary = json.loads((p / "summary.json").read_text())
                    finals.append(summary["final"])
                    wall += summary["wall_time_s"] if steps == 16000 else 0.0
            if finals:
                lines.append(
                    f"| {d} | {steps} | {len(finals)} | "
                    + " | ".join(mean_cell([f[s] for f in finals]) for s in INTENSIVE)
                    + f" | {number_text(law['aligned'][0])}, {number_text(law['q'][0])}, {number_text(law['q_abs_a'][0])} |"
                )
    lines += [
        "",
        f"Cost of the 16,000-step runs: {wall / 3600:.3f} CPU hours (Σ `wall_time_s`), {wall_clock([root])}.",
        "",
        LEGEND_MEANS,
    ]
    return "\n".join(lines) + "\n"


def theory_table() -> tuple[str, dict]:
    """The mean-field prediction (single-index teacher, A = 4, c = 1): the order parameters against β, and the
    half-way temperatures, from theory/feature_transition.py (solved here: a few seconds)."""
    ft = theory_module()
    betas = np.geomspace(1.0, ft.BETA_COLD, 61)
    crossings, curves = {}, {}
    lines = [
        "| d | statistic | uniform-law value | value at β = 1e-5 | β_half | β_half·d/4 |",
        "|---|---|---|---|---|---|",
    ]
    for d in (8, 16, 32):
        cur = ft.curve(d, betas)
        uni = ft.uniform_values(d)
        curves[d] = cur
        crossings[str(d)] = {}
        for stat in INTENSIVE:
            b = ft.half_crossing(betas, cur[stat], uni[stat], cur[stat][-1])
            crossings[str(d)][stat] = b
            lines.append(
                f"| {d} | {stat} | {number_text(uni[stat])} | {number_text(cur[stat][-1])} | {number_text(b)} | {number_text(b * d / 4)} |"
            )
    ds = [8, 16, 32]
    lines += ["", "| statistic | exponent of β_half ∝ d^p (mean field, d = 8, 16, 32) |", "|---|---|"]
    for stat in INTENSIVE:
        lines.append(f"| {stat} | {fit_exponent(ds, np.log([crossings[str(d)][stat] for d in ds])):.2f} |")
    lines += [
        "",
        "Screening at the aligned crossing: the self-consistent field h(t) (a particle of amplitude a feels a·h) "
        "near the teacher direction against the bare teacher field −c·κ(t) (c = 1: h(1) = −0.5, slope 0.5); "
        "the slope is the least-squares slope of h on 1 − t over the nodes with t > 0.95, and the spike width "
        "is the mean of 1 − t of a particle at a = A in the linearised field, (d − 1)·β/(2·A·slope):",
        "",
        "| d | β (aligned crossing) | h(1) | slope ∂h/∂(1 − t) near t = 1 | bare slope / slope | spike width E(1 − t) "
        "| β_half(q) / β_half(aligned) |",
        "|---|---|---|---|---|---|---|",
    ]
    for d in (8, 16, 32):
        b_c = crossings[str(d)]["aligned"]
        z = ft.Zonal(d)
        path = np.geomspace(1.0, b_c, 40)
        h, _ = ft.solve(z, 1.0)
        for b0, b1 in zip(path, path[1:]):
            h, _ = ft.solve_path(z, float(b0), float(b1), h)
        near = z.t > 0.95
        slope = float(np.polyfit(1 - z.t[near], h[near], 1)[0])
        width = (d - 1) * b_c / (2 * ft.A_CLIP * slope)
        lines.append(
            f"| {d} | {number_text(b_c)} | {number_text(float(h[np.argmax(z.t)]))} | {number_text(slope)} | {number_text(0.5 * ft.C_TEACHER / slope)} "
            f"| {number_text(width)} | {number_text(crossings[str(d)]['q'] / b_c)} |"
        )
    lines += [
        "",
        f"Largest fixed-point residual over the {len(betas)}·3 solutions: "
        f"{max(max(c['residual']) for c in curves.values()):.1e}.",
    ]
    return "\n".join(lines) + "\n", {"crossings": crossings, "curves": curves}


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
                    f"| {beta:g} | {steps} | {len(finals)} | {mean_cell(get('test_mse'))} | {gci(get('test_mse'))} | "
                    f"{mean_cell(get('alignment_max'))} | {mean_cell(get('coverage'))} |"
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
            f"| {start:g} | {len(finals)} | {mean_cell(get('test_mse'))} | {gci(get('test_mse'))} | "
            f"{mean_cell(get('alignment_max'))} | "
            f"{mean_cell(get('aligned'))} | {mean_cell(get('coverage'))} | {mean_cell(get('modes'))} |"
        )
    lines.append("")
    lines.append(f"Cost: {wall / 3600:.3f} CPU hours (Σ `wall_time_s`), {wall_clock([root])}.")
    lines += ["", LEGEND_MEANS]
    return "\n".join(lines) + "\n"


IMAGE_BASELINES = ("adam_mlp_lr1e-3", "adam_mlp", "mf_beta0")
"""The 5-epoch image tables' baselines: the Adam MLP at the lr of the validation split (issue 28), at the lr
first used (chosen on the test set), and the particle network at λ = 0."""


@holm_table
def image_table(
    name: str, baselines: tuple[str, ...] = ("adam_mlp", "mf_beta0"), seeds: tuple[int, ...] | None = None
) -> tuple[str, dict]:
    """The image table of ``results/<name>`` (every arm's seeds, or only ``seeds``), and ``{"compared":
    {(arm, baseline): (d, Holm p)}}`` (the values of its paired cells, for :func:`glance_table`)."""
    root = RESULTS / name
    if not root.exists():
        return "*(not run)*\n", {}
    arms = {p.name: load(p) for p in sorted(root.iterdir()) if p.is_dir()}
    if seeds is not None:
        arms = {a: {s: r for s, r in runs.items() if s in seeds} for a, runs in arms.items()}
    first_run = next((r for runs in arms.values() for r in runs.values()), None)
    if first_run is None:
        return f"*(no finished runs in results/{name})*\n", {}
    compared: dict[tuple[str, str], PairedDifference] = {}
    first_step = min(r["step"] for r in first_run["metrics"] if "accuracy" in r)
    head = " | ".join(f"accuracy − `{b}` (95 % CI), p, Holm, δ80" for b in baselines)
    lines = [
        f"| arm | n | test accuracy | {head} | accuracy at step {first_step} (the first evaluation) | test loss "
        "| CPU s/run |",
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
            compared[(arm, b)] = d
            diffs.append(HolmFamily.paired(d, 4))
        first_eval = min(r["step"] for r in runs[seeds[0]]["metrics"] if "accuracy" in r)
        early = [at_step(runs[s], "accuracy", first_eval) for s in seeds]
        lines.append(
            f"| `{arm}` | {len(seeds)} | {mean_cell(acc)} | {' | '.join(diffs)} | {mean_cell(early)} | "
            f"{mean_cell([runs[s]['final']['test_loss'] for s in seeds])} | "
            f"{np.mean([runs[s]['wall'] for s in seeds]):.1f} |"
        )
    lines.append("")
    lines.append(
        f"Cost: {cost(arms):.3f} CPU hours (Σ `wall_time_s`), {wall_clock([root / a for a in arms])}."
    )
    return "\n".join(lines) + "\n", {"compared": holm_adjusted(compared)}


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
                f"| {beta} | {number_text(b['L_ref'])} | {label} | {', '.join(number_text(m) for m in s['mean'])} | {slope} |"
            )
    for beta, b in r["betas"].items():  # where a mean excess is ≤ 0, refit over the M before it
        mean = np.array(b["loss_excess"]["mean"])
        if (mean <= 0).any():
            keep = int(np.argmax(mean <= 0))
            if keep >= 3:
                slope, lo, hi = bootstrap_slope(r["Ms"][:keep], b["loss_excess"]["values"][:keep])
                lines.append(
                    f"| {beta} | {number_text(b['L_ref'])} | E L_M − L_ref over M ≤ {r['Ms'][keep - 1]} "
                    f"(M = {r['Ms'][keep]}: mean ≤ 0) | {', '.join(number_text(m) for m in mean[:keep])} | "
                    f"{slope:.3f} ({lo:.3f} – {hi:.3f}) |"
                )
    lines.append("")
    lines.append(f"Cost: {r['wall_time_s'] / 3600:.3f} CPU hours (one process, one thread).")
    return "\n".join(lines) + "\n", r


def bootstrap_slope(Ms, values, n_boot: int = 2000, seed: int = 0) -> tuple[float, float, float]:
    """Least-squares slope of log mean on log M and its 95 % bootstrap percentile interval (replicates
    resampled within each M) as in :func:`meanfield.studies.in_memory.convergence_in_m`, except that resamples with a
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

    from meanfield.studies.plotting import figure, page_layout

    ASSETS.mkdir(parents=True, exist_ok=True)
    if lam.get("curves"):
        with page_layout():  # two panels a row at the page's width, 11-pt text (docs: readable at ≥ 9 pt)
            fig, axes = figure(ncols=3)
        for d, pts in sorted(lam["curves"].items()):
            b = np.array([p[0] for p in pts])
            axes[0].semilogx(b, [p[1] for p in pts], "o-", label=f"d = {d}")
            axes[1].semilogx(b * d / 4, [p[1] for p in pts], "o-", label=f"d = {d}")
            axes[2].semilogx(b * d / 4, [p[2] for p in pts], "o-", label=f"d = {d}")
        axes[0].set_xlabel("β (mean-field units of L = ½ E(f − y)²)")
        for ax in axes[1:]:
            ax.axvline(1.0, color="grey", ls=":", label="λ = βd/4 = 1")
            ax.set_xlabel("λ = β·d/4 (the sphere check's units)")
        for ax, what in zip(axes, ("teacher coverage", "teacher coverage", "mean best |cos| per teacher")):
            ax.set_ylabel(what)
            ax.legend(fontsize=9)
        fig.tight_layout()
        fig.savefig(ASSETS / "feature_particles_lambda.png", dpi=110)
        plt.close(fig)
    if conv.get("betas"):
        with page_layout():
            fig, axes = figure(ncols=2, height=3.6)
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
            ax.legend(fontsize=9)
        fig.tight_layout()
        fig.savefig(ASSETS / "feature_particles_convergence.png", dpi=110)
        plt.close(fig)


def scan_figure() -> None:
    """The scan in d: ``M·(E L_M − L_ref)`` against M per d (flat for an exact ``c/M``, rising to ``c`` for
    ``c/(M + M0)``), with the fitted offset law (with the references) as a line; and the excess itself."""
    path = RESULTS / "convergence_scan" / "result.json"
    if not path.exists():
        return
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    r = json.loads(path.read_text())
    Ms = np.asarray(r["config"]["Ms"], dtype=float)
    grid = np.geomspace(Ms[0], Ms[-1], 100)
    from meanfield.studies.plotting import figure, page_layout

    with page_layout():  # two panels at the page's width, 11-pt text (docs: readable at ≥ 9 pt)
        fig, axes = figure(ncols=2, height=3.8)
    for d, entry in r["scan"].items():
        for beta, a in entry["betas"].items():
            ex, se = np.asarray(a["excess"]["mean"]), np.asarray(a["excess"]["se"])
            off = a["law"]["with_reference"]["c_over_M_plus_M0"]
            label = f"d = {d}" + (f", β = {float(beta):g}" if len(entry["betas"]) > 1 else "")
            line = axes[0].errorbar(Ms, ex, yerr=1.96 * se, fmt="o", label=label)
            axes[0].plot(grid, off["c"] / (grid + off["M0"]), "-", color=line[0].get_color(), alpha=0.6)
            axes[1].errorbar(Ms, Ms * ex, yerr=1.96 * Ms * se, fmt="o", color=line[0].get_color())
            axes[1].plot(
                grid,
                off["c"] * grid / (grid + off["M0"]),
                "-",
                color=line[0].get_color(),
                alpha=0.6,
                label=f"d = {d}: M0 = {off['M0']:.0f}",
            )
    axes[0].set_yscale("log")
    axes[0].set_ylabel("E L_M − L_ref (± 1.96 SE)")
    axes[1].set_ylabel("M·(E L_M − L_ref): flat for c/M")
    for ax in axes:
        ax.set_xscale("log")
        ax.set_xlabel("M")
    axes[0].legend(fontsize=9, loc="lower left")
    axes[1].legend(fontsize=9, loc="upper left", title="c·M/(M + M0)", title_fontsize=9)
    fig.tight_layout()
    fig.savefig(ASSETS / "feature_particles_scan.png", dpi=110)
    plt.close(fig)


def transition_figure(q_res: dict, k1_res: dict, m_res: dict, theory: dict) -> None:
    """docs/assets/feature_particles_intensive.png: q and aligned against β·d/4 (k = 2 and k = 1 with the
    mean-field curves), and every statistic against β at d = 16 for M = 32, 128, 512."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not q_res.get("curves"):
        return
    from matplotlib.lines import Line2D

    from meanfield.studies.plotting import figure, page_layout

    with page_layout():  # 2 + 1 panels at the page's width, 11-pt text (docs: readable at ≥ 9 pt)
        fig, axes = figure(ncols=3, height=3.6)
    for i, d in enumerate((8, 16, 32)):
        for stat, ls in (("q", "-"), ("aligned", "--")):
            if (stat, d) in q_res["curves"]:
                b, v = q_res["curves"][(stat, d)]
                axes[0].semilogx(
                    np.array(b) * d / 4, v, ls, marker="o", ms=3, color=f"C{i}", label=f"{stat}, d = {d}"
                )
            if k1_res.get("curves") and (stat, d) in k1_res["curves"]:
                b, v = k1_res["curves"][(stat, d)]
                axes[1].semilogx(
                    np.array(b) * d / 4, v, ls, marker="o", ms=3, color=f"C{i}", label=f"{stat}, d = {d}"
                )
            cur = theory["curves"][d]
            axes[1].semilogx(np.array(cur["beta"]) * d / 4, cur[stat], ls, color=f"C{i}", alpha=0.4, lw=3)
    for f in sorted((RESULTS / "mean_field_k2").glob("d=*.json")):
        cur = json.loads(f.read_text())
        i = (8, 16, 32).index(cur["d"])
        for stat, ls in (("q", "-"), ("aligned", "--")):
            axes[0].semilogx(
                np.array(cur["beta"]) * cur["d"] / 4, cur[stat], ls, color=f"C{i}", alpha=0.4, lw=3
            )
    axes[0].set_title("k = 2, M = 128", fontsize=11)
    axes[1].set_title("k = 1", fontsize=11)
    for ax in axes[:2]:
        ax.set_xlabel("β·d/4")
        ax.set_ylabel("q (solid), aligned (dashed)")
    # one legend for both, in the blank left of the lone third panel: colour = d, line = statistic
    fig.legend(
        [Line2D([], [], color=f"C{i}") for i in range(3)]
        + [Line2D([], [], color="k", ls=ls) for ls in ("-", "--")]
        + [Line2D([], [], color="k", marker="o", ms=3, lw=0), Line2D([], [], color="k", lw=3, alpha=0.4)],
        [f"d = {d}" for d in (8, 16, 32)] + ["q", "aligned", "runs", "mean field"],
        fontsize=9,
        loc="lower left",
        title="k = 1, 2",
        title_fontsize=9,
    )
    if m_res.get("curves"):
        Ms = sorted({g for (_, g) in m_res["curves"]})
        styles = ["-", "--", ":", "-."]
        for j, stat in enumerate(STATS):
            for i, M in enumerate(Ms):
                b, v = m_res["curves"][(stat, M)]
                axes[2].semilogx(b, v, styles[j], marker="o", ms=3, color=f"C{i}")
        axes[2].set_title("d = 16, k = 2: which statistic moves with M", fontsize=11)
        axes[2].set_xlabel("β")
        fig.legend(  # in the blank right of the lone third panel
            [Line2D([], [], color=f"C{i}") for i in range(len(Ms))]
            + [Line2D([], [], color="k", ls=styles[j]) for j in range(len(STATS))],
            [f"M = {M}" for M in Ms] + list(STATS),
            fontsize=9,
            loc="lower right",
            title="d = 16",
            title_fontsize=9,
        )
    fig.tight_layout()
    fig.savefig(ASSETS / "feature_particles_intensive.png", dpi=110)
    plt.close(fig)


def convergence_offset_table() -> str:
    """The committed convergence studies refitted with ``L_∞ + c/(M + M0)`` against ``L_∞ + c/M``
    (:func:`convergence.offset_law_fit`, reference-free: ``L_∞`` is fitted), and the log-log slope that the fitted
    offset law itself has over the study's M (least squares of ``log(c/(M + M0))`` on ``log M``): what a power
    law fitted to exact ``c/(M + M0)`` data would report."""
    import convergence  # experiments/feature_particles/convergence.py (HERE is on sys.path when run as a script)

    lines = [
        "| study | β | Ms | M0 (95 % CI) | c (95 % CI) | χ² c/(M+M0) (dof) | χ² c/M (dof) | p (Δχ², 1 dof) "
        "| preferred | log-log slope of the fitted c/(M+M0) over the Ms |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name in ("convergence", "convergence_wide"):
        path = RESULTS / name / "result.json"
        if not path.exists():
            continue
        r = json.loads(path.read_text())
        for beta, b in r["betas"].items():
            fit = convergence.offset_law_fit(r["Ms"], np.array(b["loss_excess"]["values"]))
            off, plain = fit["c_over_M_plus_M0"], fit["c_over_M"]
            implied = _implied_slope(r["Ms"], off)
            lines.append(
                f"| {name} | {beta} | {', '.join(str(m) for m in r['Ms'])} | {off['M0']:.1f} "
                f"({off['M0_ci'][0]:.1f} – {off['M0_ci'][1]:.1f}) | {off['c']:.3g} ({off['c_ci'][0]:.3g} – "
                f"{off['c_ci'][1]:.3g}) | {off['chi2']:.2f} ({off['dof']}) | {plain['chi2']:.2f} ({plain['dof']}) | "
                f"{fit['p_value']:.2g} | {fit['preferred']} | {implied:.2f} |"
            )
    return "\n".join(lines) + "\n"


def _implied_slope(Ms, law: dict) -> float:
    """The log-log slope of the fitted ``c/(M + M0)`` itself over ``Ms`` (least squares of its log on log M):
    what a power law fitted to exact offset-law data over these M reports."""
    M = np.asarray(Ms, dtype=float)
    return float(np.polyfit(np.log(M), np.log(law["c"] / (M + law["M0"])), 1)[0])


def _slope_cell(slope: float | None, ci: list | None) -> str:
    """``slope (lo – hi)``, with ``—`` for a value the estimator could not give (NaN, stored as null)."""

    def f(x) -> str:
        return "—" if x is None or not math.isfinite(x) else f"{x:.3f}"

    return f"{f(slope)} ({f(ci[0])} – {f(ci[1])})" if ci else f(slope)


def convergence_scan_tables() -> str:
    """The scan in d (``convergence.py --preset scan``, ``run_all.sh convergence_scan``): per d and β the loss
    excess at each M against the R references, the exponent by every estimator of
    :func:`meanfield.studies.in_memory.convergence_in_m`, the nested laws ``L_∞ + c/(M + M0)`` vs ``L_∞ + c/M``
    (reference-free, and with the references as a point at M_ref), and the 1/M constant against what i.i.d.
    sampling of the references' laws gives and against the networks' spread."""
    import convergence  # experiments/feature_particles/convergence.py (HERE is on sys.path when run as a script)

    path = RESULTS / "convergence_scan" / "result.json"
    if not path.exists():
        return "*(not run: `bash experiments/feature_particles/run_all.sh convergence_scan`)*\n"
    r = json.loads(path.read_text())
    cfg = r["config"]
    Ms = [int(M) for M in cfg["Ms"]]
    timing_path = RESULTS / "convergence_scan" / "timing.json"
    cost = json.loads(timing_path.read_text()) if timing_path.exists() else None
    excess = [
        "| d | β | "
        + " | ".join(f"M = {M}" for M in Ms)
        + f" | L_ref (R = {cfg['n_refs']}, M_ref = {cfg['M_ref']:,}) |",
        "|---|---|" + "---|" * len(Ms) + "---|",
    ]
    slopes = [
        "| d | β | " + " | ".join(f"`{e}`" for e in convergence.SCAN_ESTIMATORS) + " |",
        "|---|---|" + "---|" * len(convergence.SCAN_ESTIMATORS),
    ]
    laws = [
        "| d | β | fit | M0 (95 % CI) | c (95 % CI) | χ² c/(M+M0) (dof) | χ² c/M (dof) | p (Δχ², 1 dof) | preferred "
        "| log-log slope of the fitted c/(M+M0) over the Ms |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    constant = [
        "| d | β | c of c/M (with refs) | c of c/(M+M0) (with refs) | i.i.d. constant of the trained refs "
        "| i.i.d. constant at init | M·E_x Var_r f_M, " + ", ".join(f"M = {M}" for M in Ms) + " |",
        "|---|---|---|---|---|---|---|",
    ]
    for d, entry in r["scan"].items():
        for beta, a in entry["betas"].items():
            ex, se = a["excess"]["mean"], a["excess"]["se"]
            ref = a["reference"]
            excess.append(
                f"| {d} | {float(beta):g} | "
                + " | ".join(f"{number_text(m)} ± {number_text(1.96 * s)}" for m, s in zip(ex, se))
                + f" | {number_text(ref['mean'])} ± {number_text(1.96 * ref['se'])} |"
            )
            est = a["estimators"]
            slopes.append(
                f"| {d} | {float(beta):g} | "
                + " | ".join(
                    _slope_cell(est[e]["slope"], est[e]["slope_ci"]) for e in convergence.SCAN_ESTIMATORS
                )
                + " |"
            )
            for label, fit in (("free L_∞", a["law"]["free"]), ("with refs", a["law"]["with_reference"])):
                off, plain = fit["c_over_M_plus_M0"], fit["c_over_M"]
                laws.append(
                    f"| {d} | {float(beta):g} | {label} | {off['M0']:.1f} ({off['M0_ci'][0]:.1f} – "
                    f"{off['M0_ci'][1]:.1f}) | {off['c']:.3g} ({off['c_ci'][0]:.3g} – {off['c_ci'][1]:.3g}) | "
                    f"{off['chi2']:.2f} ({off['dof']}) | {plain['chi2']:.2f} ({plain['dof']}) | "
                    f"{fit['p_value']:.2g} | {fit['preferred']} | {_implied_slope(Ms, off):.2f} |"
                )
            with_ref = a["law"]["with_reference"]
            iid = a["iid_constant"]
            spread = a["fluctuation"]["M_times_variance"]
            constant.append(
                f"| {d} | {float(beta):g} | {with_ref['c_over_M']['c']:.3g} | {with_ref['c_over_M_plus_M0']['c']:.3g} | "
                f"{gci(iid['trained'])} | {gci(iid['init'])} | "
                + ", ".join(f"{v:.3g}" for v in spread)
                + " |"
            )
    parts = [
        f"Loss excess $\\mathbb{{E}} L_M - L_{{\\mathrm{{ref}}}}$ (mean over {cfg['reps']} replicates ± 1.96 SE, replicates and reference "
        "mean independent) and the references' test MSE:",
        "\n".join(excess),
        "Exponent of the excess by each estimator of `convergence_in_m` (95 % bootstrap interval):",
        "\n".join(slopes),
        "The nested laws (weighted least squares, bootstrap over replicates; *with refs*: the references' mean "
        "as a point at M_ref with its SE):",
        "\n".join(laws),
        "The 1/M constant: fitted, against $\\mathbb{E}_x \\operatorname{Var}_i \\varphi_i(x)$ of the reference networks' particles (the constant "
        "if the M particles were i.i.d. draws of the trained law; geometric mean over the R references, "
        "t interval of the logs) and of the initial law, and the replicates' spread $M\\,\\mathbb{E}_x \\operatorname{Var}_r f_M(x)$:",
        "\n".join(constant),
    ]
    if cost:
        parts.append(
            f"Cost: {cost['cpu_time_s'] / 3600:.2f} CPU hours ({cost['wall_time_s'] / 3600:.2f} h of the networks' "
            "wall time), from the networks' own files (`timing.json`)."
        )
    return "\n\n".join(parts) + "\n"


def images_lr_table() -> str:
    """The learning rates of the image tasks chosen on the validation split (``run_all.sh images_lr``): one
    epoch of the training images left after holding out ``data.n_val``, seed 100 (in no table); per arm and
    lr the validation error and loss (the test set is not looked at), the lowest validation error marked."""
    root = RESULTS / "images_lr"
    if not root.exists():
        return "*(no runs in results/images_lr)*\n"
    lines = [
        "| dataset | arm | lr | validation error | validation loss | CPU s |",
        "|---|---|---|---|---|---|",
    ]
    for ds, label in (("fmnist", "Fashion-MNIST"), ("cifar10", "CIFAR-10")):
        for arm, key in (("mean_field", "optim.lr"), ("adam_mlp", "optim.others.lr")):
            folder = root / ds / arm
            if not folder.exists():
                continue
            rows = []
            for p in sorted(q for q in folder.iterdir() if (q / "summary.json").exists()):
                summary = json.loads((p / "summary.json").read_text())
                lr = json.loads((p / "point.json").read_text())["point"][key]
                if summary["status"] != "finished":
                    rows.append(
                        (lr, math.inf, math.inf, summary.get("wall_time_s", math.nan), summary["status"])
                    )
                    continue
                final = summary["final"]
                rows.append((lr, final["val_error"], final["val_loss"], summary["wall_time_s"], ""))
            best = min(rows, key=lambda r: (r[1], r[2]))[0] if rows else None
            for lr, err, loss, wall, status in sorted(rows):
                if status:
                    lines.append(f"| {label} | `{arm}` | {lr:g} | {status} | — | {wall:.0f} |")
                    continue
                mark = " **(chosen)**" if lr == best else ""
                lines.append(f"| {label} | `{arm}` | {lr:g}{mark} | {err:.4f} | {loss:.4f} | {wall:.0f} |")
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------------------------------------
# At a glance: one row per seed claim, every number taken from the values behind the tables above
# ----------------------------------------------------------------------------------------------------------
EARLY_STEP = 1000  # the "test MSE at step 1000" column of the 4,000-step teacher tables


def short(x: float, significant: int = 2, *, sign: bool = False) -> str:
    """``x`` to ``significant`` digits as the page's prose writes it: trailing zeros kept, a true minus sign,
    an exponent without padding (``−0.37``, ``1.0``, ``4.1e-5``); ``—`` when not finite."""
    if x is None or not math.isfinite(x):
        return "—"
    mantissa, _, exponent = f"{x:{'+' if sign else ''}#.{significant}g}".partition("e")
    text = mantissa.rstrip(".") + (f"e{int(exponent)}" if exponent else "")
    return "−" + text[1:] if text.startswith("-") else text


def _bound(x: float, up: bool) -> str:
    """``x`` rounded outwards to one significant digit (up for a ``≤`` bound, down for ``≥``), as ``2e-4``."""
    e = math.floor(math.log10(x))
    m = (math.ceil if up else math.floor)(x / 10**e)
    return f"{m}e{e}" if e < -2 else f"{m * 10.0**e:g}"


def _runs(table: dict, arm: str) -> dict:
    return table.get("runs", {}).get(arm, {})


def _finals(runs: dict, key: str) -> list[float]:
    return [run["final"][key] for run in runs.values()]


def _pair_counts(counts: dict[int, int], unit: str) -> str:
    """``{k: n}`` as ``"10 pairs (k = 2), 5 (k = 1, 4)"``, the larger n first."""
    by_n: dict[int, list[int]] = {}
    for k, n in sorted(counts.items()):
        by_n.setdefault(n, []).append(k)
    parts = [f"{n} ({'k = ' + ', '.join(map(str, ks))})" for n, ks in sorted(by_n.items(), reverse=True)]
    return parts[0].replace(" (", f" {unit} (", 1) + "".join(", " + p for p in parts[1:]) if parts else "—"


def anchor_constants() -> list[float]:
    """β_half·d/4 of the aligned fraction at every anchor β_a and d, on the 4,000-step runs and with the
    16,000-step runs at β ≤ 1e-4: the constants of ``results/tables/lambda_q_anchor.md``
    (``anchor_sensitivity.table``, imported by path)."""
    if not (RESULTS / "lambda_q").is_dir():
        return []
    spec = importlib.util.spec_from_file_location("fp_anchor_sensitivity", HERE / "anchor_sensitivity.py")
    anchor = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(anchor)
    curves = [anchor.groups(RESULTS / "lambda_q")]
    if (RESULTS / "lambda_q_long").is_dir():
        curves.append(anchor.with_long(curves[0], anchor.groups(RESULTS / "lambda_q_long")))
    return [
        c for grp in curves for row in anchor.table(grp, "aligned") for c, _, _ in row["const"].values()
        if math.isfinite(c)
    ]  # fmt: skip


def law_anchored(k2: dict) -> dict:
    """The aligned fraction's crossings with the level anchored on the 2-D law (``k2_comparison_table``'s result):
    ``{"runs": {d: β}, "law": {d: β}, "exponent": (runs, law), "anchor_shift": the largest shift of the law's
    crossing when anchored at ``LAW_ANCHOR`` (NaN if not measured)}``, or ``{}`` below three d."""
    cross = {d: v for (stat, d), v in k2.get("cross", {}).items() if stat == "aligned"}
    ds = sorted(cross)
    if len(ds) < 3:
        return {}
    runs, law = {d: cross[d][0] for d in ds}, {d: cross[d][2] for d in ds}
    exponent = tuple(fit_exponent(ds, np.log([c[d] for d in ds])) for c in (runs, law))
    shift = k2.get("anchor_shift", {}).get("aligned", (math.nan,))[0]
    return {"runs": runs, "law": law, "exponent": exponent, "anchor_shift": shift}


def glance_table(
    teacher: dict[str, dict],
    images: dict[str, dict],
    lam: dict,
    intensive: list[float],
    law: dict | None = None,
) -> str:
    """The page's "At a glance": per seed claim, the answer and the numbers that decide it, each from the
    values behind the tables above (``teacher``: :func:`teacher_table`'s by table name; ``images``:
    :func:`image_table`'s; ``lam``: :func:`lambda_table`'s; ``intensive``: :func:`anchor_constants`; ``law``:
    :func:`law_anchored` of the 2-D law's comparison), rounded.

    A paired image comparison is worded by the page's rule: Holm p < 0.05 establishes a difference; a 95 % CI
    that excludes 0 without it is "not established"; otherwise "no difference as large as δ80"."""
    k1, k2, k4 = (teacher.get(name, {}) for name in ("ts_k1", "ts_k2", "ts_k4"))
    rows = []
    # §1: the seed's literal update against λ in mean-field units
    lit, mf = _runs(k2, "seed_literal"), _runs(k2, "mean_field")
    if lit and mf:
        rows.append((
            "the toy check's failure shows the method fails", "**no: the implementation failed**",
            f"coverage {number_text(np.mean(_finals(lit, 'coverage')))} (literal update) vs "
            f"{number_text(np.mean(_finals(mf, 'coverage')))} (mean-field units)", "—", "—",
            f"{len(lit)} seeds each" if len(lit) == len(mf) else f"{len(lit)} and {len(mf)} seeds",
        ))  # fmt: skip
    # §1–2: the test MSE at step 1,000, annealed arm against its λ = 0 twin
    early = {}
    for k, t in ((2, k2), (1, k1)):
        noisy, still = _runs(t, "mean_field"), _runs(t, "mf_beta0")
        if noisy and still:
            mean = lambda runs: float(np.mean([at_step(r, "test_mse", EARLY_STEP) for r in runs.values()]))  # noqa: E731
            early[k] = (mean(noisy), mean(still), len(set(noisy) & set(still)))
    if early:
        ks = sorted(early, reverse=True)
        rows.append((
            "faster loss descent at equal width",
            "**no**" if all(a > b for a, b, _ in early.values()) else "not everywhere",
            f"test MSE at {EARLY_STEP:,} steps " + " / ".join(short(early[k][0]) for k in ks) + " vs "
            + " / ".join(short(early[k][1]) for k in ks) + f" (k = {', '.join(map(str, ks))})",
            "—", "—", _pair_counts({k: early[k][2] for k in ks}, "pairs"),
        ))  # fmt: skip
    # §2: every noisy arm (drift/noise finite at step 100) against its λ = 0 twin, log10 MSE
    noisy = []
    for k, t in ((1, k1), (2, k2), (4, k4)):
        for (arm, base), (d, q) in t.get("compared", {}).items():
            if base == "mf_beta0" and all(
                math.isfinite(drift_to_noise(r, 100)) for r in _runs(t, arm).values()
            ):
                noisy.append((k, d, q))
    if noisy:
        worse = all(d.mean > 0 and q < 0.05 for _, d, q in noisy)
        rows.append((
            "lower test error (teacher–student)", "**no**" if worse else "not for every arm",
            f"every noisy arm ≥ 10^{math.floor(10 * min(d.mean for _, d, _ in noisy)) / 10:.1f} × its λ = 0 "
            "twin's MSE", "—", f"≤ {_bound(max(q for _, _, q in noisy), up=True)}",
            _pair_counts({k: min(d.n for kk, d, _ in noisy if kk == k) for k, _, _ in noisy}, "pairs"),
        ))  # fmt: skip
    # §4: the particle MLP (mean_field) against Adam at the validation lr and against λ = 0, accuracy
    for label, name, base, against in (
        ("Fashion-MNIST", "fmnist", "adam_mlp_lr1e-3", "Adam at the validation lr"),
        ("Fashion-MNIST", "fmnist", "mf_beta0", "λ = 0"),
        ("CIFAR-10", "cifar10", "adam_mlp_lr1e-3", "Adam at the validation lr"),
    ):
        got = images.get(name, {}).get("compared", {}).get(("mean_field", base))
        if got is None:
            continue
        d, q = got
        way = "accuracy higher" if d.mean > 0 else "accuracy lower"
        words = (
            f"**{way}**" if q < 0.05 else f"{way}, not established" if d.p_value < 0.05
            else "no difference as large as δ80"
        )  # fmt: skip
        delta = 100 * d.detectable()
        rows.append((
            f"lower test error ({label}, vs {against})", words,
            f"{short(100 * d.mean, sign=True)} points [{short(100 * d.lo, sign=True)}, {short(100 * d.hi, sign=True)}]",
            f"{short(delta)} point{'s' if delta > 1 else ''}", p_text(q), f"{d.n} pairs",
        ))  # fmt: skip
    # §3: coverage at low temperature (λ sweep, every seed up to the coldest β where one seed loses it) and at λ = 0
    curves, crossings = lam.get("curves", {}), lam.get("crossings", {})
    below, seeds = {}, set()
    for d, pts in sorted(curves.items()):
        last = None
        for beta, _, _, coverages in sorted(pts, key=lambda p: p[0]):
            seeds.add(len(coverages))
            if min(coverages) < 1:
                break
            last = beta
        if last is not None and d in crossings:
            below[d] = (crossings[d] / last, min(c for b, _, _, cs in pts if b <= last for c in cs))
    still = [c for t in (k1, k2, k4) for c in _finals(_runs(t, "mf_beta0"), "coverage")]
    if below and still:
        rows.append((
            "low-temperature particles align with the teacher",
            "**yes, and so do deterministic ones**" if min(still) == 1 else "**yes**",
            f"coverage {short(min(c for _, c in below.values()))} in every seed at β ≤ "
            + ", ".join(f"β_c/{short(f)}" for f, _ in below.values())
            + f" (d = {', '.join(map(str, below))}); λ = 0: {short(min(still))} in every seed (k = 1, 2, 4)",
            "—", "—", f"{'–'.join(map(str, sorted(seeds)))} seeds a β; {len(still)} λ = 0 runs",
        ))  # fmt: skip
    # §2: modes of the four-index teacher, annealed to λ_min = 1e-5 and at λ = 0
    annealed, still4 = _runs(k4, "mf_lambda_min_1e-5"), _runs(k4, "mf_beta0")
    if annealed and still4:
        hit = lambda runs: sum(m == 4 for m in _finals(runs, "modes"))  # noqa: E731
        rows.append((
            "several modes survive (k = 4)",
            "**yes at λ_min = 1e-5, as without noise**" if hit(annealed) == len(annealed) and hit(still4) == len(still4)
            else f"{hit(annealed)} of {len(annealed)} seeds",
            f"4 modes in {hit(annealed)} of {len(annealed)} seeds (λ = 0: {hit(still4)} of {len(still4)})",
            "—", "—", f"{len(annealed)} seeds",
        ))  # fmt: skip
    # §3, §3b: the coverage crossover β_c·d/4, and the intensive crossing constant over the anchors
    if crossings:
        effect = (
            "β_c·d/4 ≈ " + ", ".join(number_text(b * d / 4, significant=2) for d, b in sorted(crossings.items()))
            + f" (d = {', '.join(map(str, sorted(crossings)))})"
        )  # fmt: skip
        if intensive:
            effect += (
                f"; the aligned fraction (intensive) crosses half its cold value at β·d/4 ≈ "
                f"{min(intensive):.1g}–{max(intensive):.1g} when the runs anchor it (anchor-dependent, §3b)"
            )
        if law:
            ds = sorted(law["runs"])
            runs = [law["runs"][d] * d / 4 for d in ds]
            mf = [law["law"][d] * d / 4 for d in ds]
            minus = lambda x: f"{x:.2f}".replace("-", "−")  # noqa: E731  (a true minus sign)
            effect += (
                f"; anchored on the mean-field law, {min(runs):.2g}–{max(runs):.2g} in the runs (M = 128; exponent "
                f"{minus(law['exponent'][0])}) and {min(mf):.2g}–{max(mf):.2g} in the law (M → ∞; "
                f"{minus(law['exponent'][1])}"
                + (f"; ≤ {100 * law['anchor_shift']:.1f} % when the law's own anchor moves from its coldest β to {power_text(LAW_ANCHOR)}"
                   if math.isfinite(law.get("anchor_shift", math.nan)) else "")
                + ")"
            )  # fmt: skip
        rows.append((
            "behaviour changes around λ ≈ 1",
            "**a sharp crossover, not at λ ≈ 1**" if max(b * d / 4 for d, b in crossings.items()) < 0.5
            else "**a sharp crossover**",
            effect, "—", "—", f"{'–'.join(map(str, sorted(seeds)))} seeds a point",
        ))  # fmt: skip
    lines = ["| seed claim | answer | effect [95 % CI] | δ80 | Holm p | n |", "|---|---|---|---|---|---|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def main() -> None:
    lam_text, lam = lambda_table()
    conv_text, conv = convergence_table()
    theory_text, theory = theory_table()
    q_text, q_res = transition_table("lambda_q", "data.d", k=2)
    q_text = q_text.rstrip("\n") + "\n\n" + rerun_agreement() + "\n"
    q_text += (
        "\nThe exponent when the cold value is read at a warmer β (the curve restricted to β ≥ that β; read at "
        "the coldest point, β = 1e-5, it is the exponent table above):\n\n" + cold_sensitivity("lambda_q", 2)
    )
    k1_text, k1_res = transition_table("lambda_k1", "data.d", k=1)
    cmp_text, cmp_res = k1_comparison_table()
    m_text, m_res = transition_table_M()
    k2_text, k2_res = k2_comparison_table()
    teacher = {
        name: teacher_table(name)
        for name in (
            "ts_k2",
            "ts_k2_steps500",
            "ts_k1",
            "ts_k4",
            "ts_k2_M8",
            "ts_k2_M2",
            "ts_k2_n256_noise05",
        )
    }
    images = {name: image_table(name, IMAGE_BASELINES) for name in ("fmnist", "cifar10")}
    parts = {
        "ts_k2": ("Teacher–student, two-index ReLU teacher (d = 16, k = 2, M = 128)", teacher["ts_k2"][0]),
        "ts_k2_steps500": ("Two-index teacher at 500 steps (the step budget)", teacher["ts_k2_steps500"][0]),
        "ts_k1": ("Teacher–student, single-index ReLU teacher (d = 16, k = 1, M = 128)", teacher["ts_k1"][0]),
        "ts_k4": ("Teacher–student, four-index ReLU teacher (d = 16, k = 4, M = 128)", teacher["ts_k4"][0]),
        "ts_k2_M8": ("Two-index teacher with M = 8 particles", teacher["ts_k2_M8"][0]),
        "ts_k2_M2": ("Two-index teacher with M = 2 particles", teacher["ts_k2_M2"][0]),
        "ts_k2_n256_noise05": (
            "Two-index teacher, 256 training samples, label noise 0.5",
            teacher["ts_k2_n256_noise05"][0],
        ),
        "lambda_long_d32": ("d = 32 at 4× the steps", lambda_long_table()),
        "pairs": ("Extra paired comparisons", pairs_table()),
        "lambda_constant": ("Constant λ", lam_text),
        "lambda_q": ("Constant λ, intensive order parameters (k = 2)", q_text),
        "lambda_k1": ("Constant λ, single-index teacher, against the mean-field law", k1_text),
        "lambda_M": ("Which statistic moves with M (d = 16, k = 2)", m_text),
        "lambda_k1_theory": ("Single-index runs against the mean-field law", cmp_text),
        "lambda_k1_long": ("Single-index runs at β = 1e-4, 4× the steps", k1_long_table()),
        "lambda_q_theory": ("Two-index runs against the 2-D mean-field law", k2_text),
        "feature_transition": (
            "Mean-field law of the single-index teacher (theory/feature_transition.py)",
            theory_text,
        ),
        "lambda_annealed": ("Annealed λ (the seed's schedule shape)", anneal_table()),
        "fmnist": ("Fashion-MNIST", images["fmnist"][0]),
        "cifar10": ("CIFAR-10 (lossy JPEG-75 copy)", images["cifar10"][0]),
        "cifar10_3seeds": (
            "CIFAR-10, seeds 0–2 only (the first three: seeds 3–4 were added after them)",
            image_table("cifar10", IMAGE_BASELINES, seeds=(0, 1, 2))[0],
        ),
        "cifar10_50ep": (
            "CIFAR-10, 50 epochs (M = 256; lrs from the validation split)",
            image_table("cifar10_50ep")[0],
        ),
        "images_lr": ("Learning rates of the image tasks, chosen on a validation split", images_lr_table()),
        "convergence": ("Convergence in M", conv_text),
        "convergence_wide": (
            "Convergence in M up to 4096 (β = 1e-3)",
            convergence_table("convergence_wide")[0],
        ),
        "convergence_offset": ("The loss excess refitted with c/(M + M0)", convergence_offset_table()),
        "convergence_scan": (
            "The scan in d: the loss excess against three references",
            convergence_scan_tables(),
        ),
        "glance": (
            "At a glance (every number from the tables above)",
            glance_table(
                {name: result for name, (_, result) in teacher.items()},
                {name: result for name, (_, result) in images.items()},
                lam,
                anchor_constants(),
                law_anchored(k2_res),
            ),
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
    transition_figure(q_res, k1_res, m_res, theory)
    scan_figure()
    print(combined)


if __name__ == "__main__":
    main()
