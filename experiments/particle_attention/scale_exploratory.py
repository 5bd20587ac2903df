"""The exploratory analyses of the 6 × 256 study (issue 27): why the architecture comparisons P3–P5 are wide
(the early phase), the stability-versus-exploration curve in β, the second anneal and the mean-field
(fixed-width) family, against the primary sweep's β = 0 arms.

    python experiments/particle_attention/scale_exploratory.py      # → results/scale/exploratory_tests.md + figure
    python experiments/particle_attention/scale_exploratory.py --primary runs/s/primary --secondary runs/s/secondary \\
        --out /tmp/t.md --figure /tmp/t.png

Everything here is **exploratory** (docs/experiments/particle_attention.md, the pre-registration): not in the
Holm family of P1–P6. Each row is a two-sided paired t-test of ``first − second`` over the seeds both arms
finished (a seed fixes the batch order and noise streams, and the initialisation within one architecture:
every β of M = 8 shares ``p8``'s weights at step 0), with its raw p and Holm's p over the table's planned rows
of the same metric (the family fixed by the design: a row not testable yet counts as p = 1, so the family's
size does not grow as runs land), and δ80 (the smallest |Δ| the pairs detect with
80 % power at the observed sd).

- **The early phase** (primary arms at β = 0: MHA-8 and M = 8, 16, 32 at width d/M). The seed-to-seed spread of
  the final validation loss per arm, Brown–Forsythe's test (Levene's with the median) of MHA-8's spread against
  each particle arm's; the first logged training loss (the mean over the first log window) and the first logged
  step at which the training loss is at most ``THRESHOLD`` nats, each paired against MHA-8; and, over the seeds,
  Pearson's r and Spearman's ρ of the paired difference in final validation loss (P3–P5's per-seed values) with
  the paired difference in that step: whether the architecture comparisons measure how long a run's early phase
  lasted. Holm over the three arms of each test. Leave-one-seed-out ranges of the mean Δ and of r show whether
  one seed carries them.
- **The β curve** (M = 8, width d/M, constant β ∈ {1e-5, 1e-4, 1e-3, 1e-2, 3e-2} against β = 0): each arm paired
  with ``p8`` on the seeds both finished (an arm's failed runs remove only its own pairs): the final validation
  loss (what the noise costs or buys), the training-loss roughness ``loss_roughness`` (stability: the RMS of the
  logged training loss's second difference), the head similarity ``head_sim`` (exploration: the mean |cos|
  between particles' outputs), the attention-gradient variance ``grad_var_attn`` and the drop-half gap,
  single-draw (``half_random_gap``) and over 32 draws (``drop_half_32``, ``drop_half_draws.py``, where
  recorded: ``p8``'s own records exist for seeds 2–7; seeds 0–1 take those of their bit-for-bit reruns,
  issue 47's ``p6/``, so every curve arm pairs with it on all its seeds; the per-arm table shows each arm over
  its own seeds).
- **Anneals**: cosine 1e-3 → 0 against β = 0 (``p8-cos1e-2`` is primary, P2).
- **The mean-field family** at the fixed width d/8 = 32: ``p16-w32`` and ``p32-w32`` against ``p8`` (more particles
  at equal width: the mean-field limit's direction), and each against its equal-parameter arm of width d/M
  (``p16``, ``p32``: what the width buys at equal M).

Runs that did not finish (``summary.json`` status ``diverged``, ``failed``, ``interrupted`` or still ``running``)
are listed per arm: hot β may not be stable, and that is part of the curve.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

from scipy import stats as _scipy

sys.path.insert(0, str(Path(__file__).resolve().parent))
import scale_report as _primary  # noqa: E402  (the sibling script: load, paired, _spread, cost, load_draws)

from meanfield.studies.stats import holm, interval_cell, mean_cell, p_text, t_interval  # noqa: E402

HERE = Path(__file__).resolve().parent
SCALE = HERE / "results" / "scale"
ASSETS = HERE.parents[1] / "docs" / "assets"

EARLY = ("p8", "p16", "p32")  # against mha8 (P3, P4, P5)
THRESHOLD = 2.0  # nats/char: every run crosses it, the slowest after about 1,000 of its 2,000 steps
CURVE = (("p8", 0.0), ("p8-b1e-5", 1e-5), ("p8-b1e-4", 1e-4), ("p8-b1e-3", 1e-3), ("p8-b1e-2", 1e-2),
         ("p8-b3e-2", 3e-2))  # fmt: skip
MIN_FIGURE_ARMS = 4  # of the six β values with ≥ 2 finished seeds before the figure is drawn
# the figure adds issue 47's β = 3e-3 (tested in its family H, scale_issue47.py; not a row of this stage's tables)
FIGURE_CURVE = tuple(sorted((*CURVE, ("p8-b3e-3", 3e-3)), key=lambda arm: arm[1]))
CURVE_METRICS = ("val_loss", "loss_roughness", "head_sim", "grad_var_attn", "half_random_gap", "drop_half_32")
OTHERS = (
    ("cosine 1e-3 → 0 vs β = 0 (M = 8)", "p8-cos1e-3", "p8"),
    ("M = 16, width 32 vs M = 8, width 32", "p16-w32", "p8"),
    ("M = 32, width 32 vs M = 8, width 32", "p32-w32", "p8"),
    ("M = 16: width 32 vs width d/M = 16", "p16-w32", "p16"),
    ("M = 32: width 32 vs width d/M = 8", "p32-w32", "p32"),
)


def load(primary: Path, secondary: Path, reruns: Path | None = None) -> dict[str, dict[int, dict]]:
    """``{arm: {seed: final metrics}}`` of both sweeps' finished runs, each with ``drop_half_32`` (the 32-draw
    mean gap of ``drop_half_draws.py``) where it was recorded: for a primary run without a record of its own,
    that of its rerun in ``reruns`` (issue 47's ``p6/``) if the rerun reproduced it (``scale_report.rerun_draws``)."""
    runs: dict[str, dict[int, dict]] = {}
    reproduced = _primary.rerun_draws(reruns, primary)[1] if reruns is not None and reruns.is_dir() else {}
    for folder in (primary, secondary):
        draws = _primary.load_draws(folder.parent / "drop_half" / folder.name, folder)
        if folder == primary:
            draws = {arm: {**reproduced.get(arm, {}), **draws.get(arm, {})} for arm in {*draws, *reproduced}}
        for arm, by_seed in _primary.load(folder).items():
            for seed, final in by_seed.items():
                record = draws.get(arm, {}).get(seed)
                runs.setdefault(arm, {})[seed] = {
                    **final,
                    **({"drop_half_32": record["mean"]} if record else {}),
                }
    return runs


def steps_to(records: list[dict], threshold: float = THRESHOLD) -> float:
    """The first logged step whose ``train_loss`` (the mean over its log window) is at most ``threshold``, over a
    run's ``metrics.jsonl`` records (nan if none)."""
    for record in records:
        if "train_loss" in record and record["train_loss"] <= threshold:
            return float(record["step"])
    return math.nan


def early_phase(primary: Path) -> dict[str, dict[int, dict]]:
    """``{arm: {seed: {"val_loss", "steps_to", "loss_first"}}}`` of the finished β = 0 architecture arms:
    the final validation loss, :func:`steps_to` and the first logged training loss."""
    out: dict[str, dict[int, dict]] = {}
    for arm, seed, run, summary in _primary.finished_runs(primary):
        if arm not in ("mha8", *EARLY):
            continue
        path = run / "metrics.jsonl"
        records = [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []
        first = records[0] if records else {}
        out.setdefault(arm, {})[seed] = {"val_loss": summary["final"]["val_loss"],
                                         "steps_to": steps_to(records),
                                         "loss_first": first.get("train_loss", math.nan),
                                         "step_first": first.get("step")}  # fmt: skip
    return out


def _leave_one_out(ds: list[float], dv: list[float]) -> tuple[tuple[float, float], tuple[float, float]]:
    """``((min, max) of mean(dv), (min, max) of r(ds, dv))`` over the subsets leaving one seed out."""
    means, rs = [], []
    for k in range(len(dv)):
        dv_k, ds_k = dv[:k] + dv[k + 1 :], ds[:k] + ds[k + 1 :]
        means.append(statistics.fmean(dv_k))
        if len(dv_k) >= 3 and min(ds_k) < max(ds_k) and min(dv_k) < max(dv_k):
            rs.append(float(_scipy.pearsonr(ds_k, dv_k).statistic))
    return (min(means), max(means)), ((min(rs), max(rs)) if rs else (math.nan, math.nan))


def early_tests(early: dict[str, dict[int, dict]]) -> list[dict]:
    """Per particle arm against MHA-8: Brown–Forsythe on the final val loss's spread (``spread_p``); the paired
    Δ of the first logged training loss (``first``) and of :func:`steps_to` (``steps``); Pearson's r and
    Spearman's ρ of the per-seed Δ val loss with the per-seed Δ steps (``r``, ``r_p``, ``rho``, ``rho_p``); the
    leave-one-seed-out ranges of mean Δ val loss and of r (``loo_mean``, ``loo_r``); each p with Holm over the
    arms (``*_holm``)."""
    rows = []
    for arm in EARLY:
        a, b = early.get(arm, {}), early.get("mha8", {})
        seeds = sorted(set(a) & set(b))
        row = {"arm": arm, "seeds": seeds, "spread_p": math.nan, "steps": None, "first": None, "r": math.nan,
               "r_p": math.nan, "rho": math.nan, "rho_p": math.nan, "loo_mean": (math.nan, math.nan),
               "loo_r": (math.nan, math.nan)}  # fmt: skip
        if len(a) >= 2 and len(b) >= 2:
            row["spread_p"] = float(_scipy.levene([v["val_loss"] for v in a.values()],
                                                  [v["val_loss"] for v in b.values()], center="median").pvalue)  # fmt: skip
        if len(seeds) >= 3:
            _, row["steps"] = _primary.paired(early, arm, "mha8", "steps_to")
            _, row["first"] = _primary.paired(early, arm, "mha8", "loss_first")
            dv = [a[s]["val_loss"] - b[s]["val_loss"] for s in seeds]
            ds = [a[s]["steps_to"] - b[s]["steps_to"] for s in seeds]
            if min(dv) < max(dv) and min(ds) < max(ds) and all(map(math.isfinite, ds)):
                fit, rank = _scipy.pearsonr(ds, dv), _scipy.spearmanr(ds, dv)
                row["r"], row["r_p"] = float(fit.statistic), float(fit.pvalue)
                row["rho"], row["rho_p"] = float(rank.statistic), float(rank.pvalue)
                row["loo_mean"], row["loo_r"] = _leave_one_out(ds, dv)
        rows.append(row)
    p_of = {
        "spread_p": lambda r: r["spread_p"],
        "steps_p": lambda r: r["steps"].p_value if r["steps"] is not None else math.nan,
        "first_p": lambda r: r["first"].p_value if r["first"] is not None else math.nan,
        "r_p": lambda r: r["r_p"],
        "rho_p": lambda r: r["rho_p"],
    }
    for key, p in p_of.items():
        for r, q in zip(rows, holm([p(r) for r in rows])):
            r[key + "_holm"] = float(q)
    return rows


def markdown_early(early: dict[str, dict[int, dict]], table: list[dict]) -> str:
    """The early-phase table: per arm, then the three tests against MHA-8."""
    lines = [
        f"**Why P3–P5 are wide: the early phase** (β = 0, width d/M; mean (95 % CI) over the seeds; "
        f"steps to ≤ {THRESHOLD:g}: the first logged step whose training loss is at most {THRESHOLD:g} nats).",
        "",
        "| arm | seeds | final val loss | its sd over seeds | first logged training loss (step) | steps to ≤ "
        f"{THRESHOLD:g} |",
        "|---|---|---|---|---|---|",
    ]
    for arm in ("mha8", *EARLY):
        by = early.get(arm, {})
        if not by:
            continue
        val = [v["val_loss"] for v in by.values()]
        sd = statistics.stdev(val) if len(val) > 1 else math.nan
        first = [v["loss_first"] for v in by.values()]
        step = next(iter(by.values()))["step_first"]
        lines.append(f"| `{arm}` | {len(by)} | {mean_cell(val, 4)} | {sd:.4f} | {mean_cell(first, 3)} ({step}) | "
                     f"{mean_cell([v['steps_to'] for v in by.values()], 0)} |")  # fmt: skip
    lines += [
        "",
        "Against MHA-8 (Holm over the three arms of each column):",
        "",
        "| arm − `mha8` | spread of val loss: Brown–Forsythe p (Holm) | Δ first logged training loss (95 % CI) "
        f"| paired p (Holm) | Δ steps to ≤ {THRESHOLD:g} (95 % CI) | paired p (Holm) "
        "| r(Δ steps, Δ val loss) over seeds | p (Holm) | Spearman ρ | p (Holm) | leave one seed out: mean Δ val loss "
        "| leave one seed out: r |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in table:
        d, f = r["steps"], r["first"]
        steps = "— | —" if d is None or not _primary._spread(d) else (
            f"{interval_cell(d.mean, d.lo, d.hi, 0, sign=True)} | {p_text(d.p_value)} ({p_text(r['steps_p_holm'])})")  # fmt: skip
        first = "— | —" if f is None or not _primary._spread(f) else (
            f"{interval_cell(f.mean, f.lo, f.hi, 3, sign=True)} | {p_text(f.p_value)} ({p_text(r['first_p_holm'])})")  # fmt: skip
        corr = (
            "— | —" if not math.isfinite(r["r"]) else f"{r['r']:+.2f} | {p_text(r['r_p'])} ({p_text(r['r_p_holm'])})"
        )
        rank = (
            "— | —"
            if not math.isfinite(r["rho"])
            else f"{r['rho']:+.2f} | {p_text(r['rho_p'])} ({p_text(r['rho_p_holm'])})"
        )
        (m0, m1), (r0, r1) = r["loo_mean"], r["loo_r"]
        loo = f"{m0:+.4f} … {m1:+.4f} | {r0:+.2f} … {r1:+.2f}" if math.isfinite(m0) else "— | —"
        lines.append(
            f"| `{r['arm']}` | {p_text(r['spread_p'])} ({p_text(r['spread_p_holm'])}) | {first} | {steps} | {corr} | {rank} "
            f"| {loo} |"
        )
    return "\n".join(lines) + "\n"


def unfinished(*folders: Path) -> dict[str, list[str]]:
    """``{arm: ["seed=s: status", …]}`` of the runs under ``folders`` whose summary is not ``finished``."""
    out: dict[str, list[str]] = {}
    for folder in folders:
        for summary in sorted(folder.glob("*/summary.json")) if folder.is_dir() else []:
            s = json.loads(summary.read_text())
            if s.get("status") != "finished":
                point = summary.parent / "point.json"
                arm = (
                    _primary.arm_of(json.loads(point.read_text())) if point.is_file() else summary.parent.name
                )
                out.setdefault(arm, []).append(
                    f"seed={s.get('seed')}: "
                    + (
                        f"running (started at step {s.get('step')})"
                        if s.get("status") == "running"
                        else f"{s.get('status')} at step {s.get('step')}"
                    )
                )
    return out


def rows(runs: dict[str, dict[int, dict]]) -> list[dict]:
    """Every exploratory comparison: ``{what, metric, a, b, seeds, d}`` with ``holm``, Holm's p over all the
    planned rows of its metric (``m`` = that count; a row not testable yet enters as p = 1 and gets ``holm`` nan);
    each pairs its two arms on the seeds both finished with that metric recorded."""
    out = []
    for metric in CURVE_METRICS:
        on = {a: {s: v for s, v in runs.get(a, {}).items() if metric in v} for a, _ in CURVE}
        for arm, beta in CURVE[1:]:
            s, d = _primary.paired(on, arm, "p8", metric)
            out.append({"what": f"β = {beta:g} vs β = 0 (M = 8)", "metric": metric, "a": arm, "b": "p8",
                        "seeds": s, "d": d})  # fmt: skip
    for what, a, b in OTHERS:
        s, d = _primary.paired(runs, a, b, "val_loss")
        out.append({"what": what, "metric": "val_loss", "a": a, "b": b, "seeds": s, "d": d})
    for metric in {r["metric"] for r in out}:
        mine = [r for r in out if r["metric"] == metric]
        raw = [r["d"].p_value if r["d"] is not None else math.nan for r in mine]
        # The family is every planned row of the metric, fixed by the design: a row without a test yet (too few
        # pairs, no spread) counts as p = 1, so m does not grow as runs land and an adjusted p never drops
        # because a comparison is still missing.
        for r, p, q in zip(mine, raw, holm([1.0 if math.isnan(p) else p for p in raw])):
            r["holm"] = math.nan if math.isnan(p) else float(q)
    return out


def markdown(runs: dict[str, dict[int, dict]], table: list[dict], failed: dict[str, list[str]]) -> str:
    lines = [
        "**Exploratory** (not in the P1–P6 family). The β curve at M = 8: per-arm mean (95 % CI) over "
        "each arm's own finished seeds (a cell's seed count in parentheses where it has fewer).",
        "",
        "| arm | β | seeds | val loss | loss roughness | head sim | grad var (attn) | drop-half, 1 draw "
        "| drop-half, 32 draws |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for arm, beta in CURVE:
        by = list(runs.get(arm, {}).values())
        cells = []
        for m in CURVE_METRICS:
            scale, digits, unit = (1e8, 2, " ×1e-8") if m == "grad_var_attn" else (1.0, 3, "")
            values = [v[m] * scale for v in by if m in v]
            cells.append(mean_cell(values, digits) + (unit if values else "") + (
                f" ({len(values)})" if values and len(values) < len(by) else ""))  # fmt: skip
        seeds = ", ".join(map(str, sorted(runs.get(arm, {})))) or "none"
        lines.append(f"| `{arm}` | {beta:g} | {seeds} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "Paired differences (first − second) over the seeds both finished; Holm over all the planned rows of each "
        "metric (a row not testable yet counts as p = 1):",
        "",
        "| comparison | metric | pairs | Δ (95 % CI) | p (paired t) | p (Holm, metric) | δ80 |",
        "|---|---|---|---|---|---|---|",
    ]
    waiting = [f"{r['what']} ({r['metric']}, {len(r['seeds'])} pair{'s' if len(r['seeds']) != 1 else ''})"
               for r in table if r["d"] is None]  # fmt: skip
    for r in table:
        d, n = r["d"], len(r["seeds"])
        scale, unit = (1e8, " ×1e-8") if r["metric"] == "grad_var_attn" else (1.0, "")
        if d is None:
            continue  # fewer than 2 pairs: listed below the table
        if not _primary._spread(d):
            lines.append(f"| {r['what']} | {r['metric']} | {n} | — | — | — | — |")
            continue
        lines.append(
            f"| {r['what']} | {r['metric']} | {n} | "
            f"{interval_cell(d.mean * scale, d.lo * scale, d.hi * scale, 4, sign=True)}{unit} | "
            f"{p_text(d.p_value)} | {p_text(r['holm'])} | {d.detectable() * scale:.4f}{unit} |"
        )
    if waiting:
        lines += ["", "Fewer than 2 pairs yet (not shown): " + "; ".join(waiting) + "."]
    lines += ["", "Runs not finished (their last summary's status): " + (
        "; ".join(f"`{a}` {', '.join(v)}" for a, v in sorted(failed.items())) if failed else "none") + "."]  # fmt: skip
    return "\n".join(lines) + "\n"


def figure(runs: dict[str, dict[int, dict]], path: Path) -> bool:
    """Four panels against β (β = 0 drawn at 3e-6): the Δ val loss vs β = 0 paired per arm on the seeds it shares
    with ``p8``, the loss roughness, the head similarity and the 32-draw drop-half gap over each arm's own seeds;
    mean ± 95 % CI with each seed's value (or pair's difference) beside it, points with fewer than 2 values left
    out. Returns whether a figure was written (not before
    ``MIN_FIGURE_ARMS`` curve arms have 2 seeds: a curve, not two points)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if sum(len(runs.get(arm, {})) >= 2 for arm, _ in CURVE) < MIN_FIGURE_ARMS:
        return False
    from meanfield.studies.plotting import figure as panels_figure
    from meanfield.studies.plotting import page_layout

    with page_layout():  # two panels a row at the page's width, 11-pt text (docs: readable at ≥ 9 pt)
        fig, axes = panels_figure(ncols=4)
    panels = (("val_loss", "Δ val loss vs β = 0 (nats/char)", True), ("loss_roughness", "training-loss roughness", False),
              ("head_sim", "head similarity (mean |cos|)", False), ("drop_half_32", "drop-half gap, 32 draws (nats)", False))  # fmt: skip
    for ax, (metric, label, diff) in zip(axes, panels):
        xs, means, halves, dots = [], [], [], ([], [])
        for arm, beta in FIGURE_CURVE:
            by, base = runs.get(arm, {}), runs.get("p8", {})
            x = beta if beta > 0 else 3e-6
            if diff and arm == "p8":  # the reference: Δ = 0 by definition
                mean, half = 0.0, 0.0
            else:
                v = ([by[s][metric] - base[s][metric] for s in sorted(set(by) & set(base))] if diff
                     else [r[metric] for r in by.values() if metric in r])  # fmt: skip
                if len(v) < 2:
                    continue
                iv = t_interval(v)
                mean, half = iv.mean, iv.half_width
                dots[0].extend([x * 1.12] * len(v))  # each seed (or pair), beside its mean
                dots[1].extend(v)
            xs.append(x)
            means.append(mean)
            halves.append(half)
        ax.errorbar(xs, means, yerr=halves, marker="o", capsize=3, label="mean ± 95 % CI")
        ax.plot(*dots, "k.", ms=4, alpha=0.6, label="one seed" + (" pair" if diff else ""))
        if diff:
            ax.axhline(0.0, color="gray", lw=0.8)
        ax.set_xscale("log")
        ax.set_xlabel("β (β = 0 drawn at 3e-6)")
        ax.set_ylabel(label)
        if diff:
            ax.legend(fontsize=8, loc="upper left")
    fig.suptitle("6 × 256, M = 8, 2000 steps: stability vs exploration in β\n(each arm over its own seeds; "
                 "mean ± 95 % CI; exploratory)", fontsize=11)  # fmt: skip
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--primary", type=Path, default=SCALE / "primary")
    parser.add_argument("--secondary", type=Path, default=SCALE / "secondary")
    parser.add_argument("--reruns", type=Path, default=SCALE / "p6", help="reruns of primary runs (issue 47's P6)")
    parser.add_argument("--out", type=Path, default=SCALE / "exploratory_tests.md")
    parser.add_argument("--figure", type=Path, default=ASSETS / "particle_attention_scale_beta.png")
    args = parser.parse_args(argv)
    if not args.primary.is_dir():  # the secondary sweep may not have started: its folder may be missing
        parser.error(f"--primary {args.primary} is not a folder: give the primary sweep's --out")
    runs = load(args.primary, args.secondary, args.reruns)
    early = early_phase(args.primary)
    text = "<!-- generated by experiments/particle_attention/scale_exploratory.py; do not edit -->\n"
    text += markdown_early(early, early_tests(early)) + "\n"
    text += markdown(runs, rows(runs), unfinished(args.primary, args.secondary))
    n, hours = _primary.cost(args.secondary)
    text += f"\nCost of the secondary sweep: {n} finished runs, {hours:.1f} CPU-hours (Σ wall_clock_s × threads).\n"
    args.out.write_text(text)
    drawn = figure(runs, args.figure)
    print(text)
    print(
        f"written: {args.out}"
        + (
            f", {args.figure}"
            if drawn
            else f" (no figure yet: fewer than {MIN_FIGURE_ARMS} curve arms with 2 seeds)"
        )
    )


if __name__ == "__main__":
    main()
