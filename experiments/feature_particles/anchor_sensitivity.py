"""How the aligned fraction's crossing depends on the cold run that anchors "half the cold value" (issue 47).

    python experiments/feature_particles/anchor_sensitivity.py     # → results/tables/lambda_q_anchor.md

§3b of docs/experiments/feature_particles.md reads the transition temperature of an intensive statistic as
the β where the mean over seeds crosses half way from the uniform-law value to its value at the coldest β of
the grid (``report.crossing``), and fits ``β_half ∝ d^p`` over d = 8, 16, 32. The coldest runs (β = 1e-5) are
not stationary, so the level, the constant ``β_half·d/4`` and the exponent p depend on which β anchors it.
For every anchor β_a, the curve is restricted to β ≥ β_a and its cold value is the mean at β_a (what
``report.cold_sensitivity`` does for the exponent); this table gives, per anchor, the constant at each d with
its bootstrap interval, and the exponent with its interval (``report.N_BOOT`` resamples of the seeds, the same
resample at every β of a curve; independent over d). Exploratory: no test.

``--long FOLDER`` replaces the two-index runs at β ≤ 1e-4 by their 16,000-step reruns (``run_all.sh
lambda_q_long``, when they exist), keeping the 4,000-step runs at β ≥ 3e-4 (stationary by the page's test), and
adds, per anchor, whether the longer runs moved: the paired difference (same seeds) of the anchor's value.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import report as _report  # noqa: E402  (the page's report: cells, crossing, the bootstrap, the uniform level)

from meanfield.studies.stats import interval_cell, number_text, paired_cell, paired_difference  # noqa: E402

RESULTS = _report.RESULTS
ANCHORS = (1e-5, 3e-5, 1e-4, 3e-4)
STATS = ("aligned", "q")
K = 2  # the two-index teacher of lambda_q
M = 128


def groups(folder: Path) -> dict[int, dict[float, dict[int, dict]]]:
    """``{d: {β: {seed: final metrics}}}`` of a λ sweep folder."""
    out: dict[int, dict[float, dict[int, dict]]] = {}
    for (d, beta), seeds in _report.cells(folder, "data.d").items():
        out.setdefault(d, {})[beta] = seeds
    return out


def anchored(grp: dict[float, dict[int, dict]], anchor: float) -> dict[float, dict[int, dict]]:
    return {b: v for b, v in grp.items() if b >= anchor * (1 - 1e-9)}


def table(curves: dict[int, dict[float, dict[int, dict]]], stat: str, seed: int = 47) -> list[dict]:
    """Per anchor: ``{"anchor", "cold": {d: mean}, "const": {d: (c, lo, hi)}, "p": (p, lo, hi)}``."""
    rng = np.random.default_rng(seed)
    ds = sorted(curves)
    rows = []
    for anchor in ANCHORS:
        row: dict = {"anchor": anchor, "cold": {}, "const": {}, "p": None}
        cs, boots = [], []
        for d in ds:
            grp = anchored(curves[d], anchor)
            betas = sorted(grp)
            if not betas or abs(betas[0] - anchor) > 1e-9 * anchor:
                break
            uni = _report.uniform_level(stat, d, K, M)
            means = [float(np.mean([f[stat] for f in grp[b].values()])) for b in betas]
            c = _report.crossing(betas, means, stat, uni)
            boot = _report.crossing_boot(grp, stat, uni, rng)
            ok = boot[np.isfinite(boot)]
            lo, hi = np.percentile(ok, [2.5, 97.5]) if len(ok) else (math.nan, math.nan)
            row["cold"][d] = means[0]
            row["const"][d] = (c * d / 4, lo * d / 4, hi * d / 4)
            cs.append(c)
            boots.append(boot)
        if len(cs) == len(ds) and all(math.isfinite(c) for c in cs):
            b = np.stack(boots, 1)
            ok = np.isfinite(b).all(1)
            lo, hi = np.percentile([_report.fit_exponent(ds, np.log(x)) for x in b[ok]], [2.5, 97.5])
            row["p"] = (_report.fit_exponent(ds, np.log(cs)), lo, hi)
        rows.append(row)
    return rows


def with_long(short: dict, long: dict) -> dict[int, dict[float, dict[int, dict]]]:
    """The curves of ``short`` with their points at β ≤ 1e-4 replaced by the 16,000-step runs of ``long``."""
    return {d: {**{b: v for b, v in short[d].items() if b > 1e-4 * (1 + 1e-9)}, **long.get(d, {})}
            for d in short}  # fmt: skip


def moved(short: dict, long: dict) -> list[str]:
    """Per (d, β) held by both: the paired difference long − short of the aligned fraction and q (same seeds),
    its 95 % t interval and the paired t-test's p (``paired_cell``)."""
    lines = ["| d | β | aligned: 16,000 − 4,000 steps (paired) | q: 16,000 − 4,000 steps (paired) | n |",
             "|---|---|---|---|---|"]  # fmt: skip
    for d in sorted(long):
        for beta in sorted(long[d]):
            a, b = long[d][beta], short.get(d, {}).get(beta, {})
            seeds = sorted(set(a) & set(b))
            if len(seeds) < 2:
                continue
            cells = []
            for stat in STATS:
                x = paired_difference([a[s][stat] for s in seeds], [b[s][stat] for s in seeds])
                cells.append(paired_cell(x, 4))
            lines.append(f"| {d} | {beta:g} | " + " | ".join(cells) + f" | {len(seeds)} |")
    return lines


def markdown(curves: dict, title: str) -> str:
    ds = sorted(curves)
    lines = [title, ""]
    for stat in STATS:
        lines += [
            f"**{stat}** (half way from the uniform-law value to the value at the anchor β_a; the curve at β ≥ β_a)",
            "",
            "| anchor β_a | " + " | ".join(f"cold value, d = {d}" for d in ds) + " | "
            + " | ".join(f"β_half·d/4, d = {d} (95 % CI)" for d in ds) + " | exponent p (95 % CI) |",
            "|---|" + "---|" * (2 * len(ds) + 1),
        ]
        for row in table(curves, stat):
            cold = [number_text(row["cold"][d], 3) if d in row["cold"] else "—" for d in ds]
            const = [interval_cell(*row["const"][d], significant=2) if d in row["const"] else "—" for d in ds]
            p = row["p"]
            pcell = interval_cell(*p, 2) if p else "— (no crossing at some d)"
            lines.append(f"| {row['anchor']:g} | " + " | ".join(cold + const) + f" | {pcell} |")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--short", type=Path, default=RESULTS / "lambda_q")
    parser.add_argument("--long", type=Path, default=RESULTS / "lambda_q_long")
    parser.add_argument("--out", type=Path, default=RESULTS / "tables" / "lambda_q_anchor.md")
    args = parser.parse_args(argv)
    short = groups(args.short)
    text = markdown(short, "*The committed 4,000-step runs (`results/lambda_q`, 5 seeds):*")
    long = groups(args.long) if args.long.is_dir() else {}
    if long:
        merged = with_long(short, long)
        text += "\n" + markdown(merged, "*β ≤ 1e-4 from the 16,000-step runs (`results/lambda_q_long`), β ≥ 3e-4 "
                                "from the 4,000-step runs:*")  # fmt: skip
        text += "\n*Did 4× the steps move the cold runs?* (paired over the seeds both have)\n\n"
        text += "\n".join(moved(short, long)) + "\n"
    stamp = "<!-- generated by experiments/feature_particles/anchor_sensitivity.py from the committed run folders -->\n"
    args.out.write_text(stamp + text)
    sys.stdout.write(text)


if __name__ == "__main__":
    main()
