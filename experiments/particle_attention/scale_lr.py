"""Issue 47's learning-rate-fair architecture comparison at 6 × 256 (docs/experiments/particle_attention.md,
"Issue 47: pre-registration"): the lr of each arm, chosen on a validation split carved from the training text,
then P3–P5 again with each arm at its own lr.

    python experiments/particle_attention/scale_lr.py              # → results/scale/lr_tests.md
    python experiments/particle_attention/scale_lr.py --choice     # the lr-fair stage's points (run_scale.sh)

**The choice** (``results/scale/lr_tune/``, the ``tune`` preset: trained on the train split minus its last
111,540 characters, evaluated on those). For each arm (``mha8``, ``p8``, ``p16``, ``p32``) and lr ∈ ``LRS``,
seeds 0–2; the arm's lr is the one with the lowest mean validation loss at the last step over the three seeds,
once all of the arm's ``len(LRS) × 3`` runs have ended. An lr with a run that diverged or failed is not chosen.
An arm whose runs have not all ended has no choice yet.

**The comparison** (each arm at its lr on the usual split, seeds 0–7: ``results/scale/lr_fair/``, or
``results/scale/primary/`` for an arm whose lr is the base 1e-3, the same configuration). For M = 8, 16, 32:
``pM − mha8``, the final validation loss, paired by seed (the coupled initialisation and the batch order are
the seed's, whatever the lr). Per row: the mean with its 95 % t interval, the two-sided paired t-test (the
decision: Holm over the three rows, fixed; a row not testable counts as p = 1), δ80, Wilcoxon's signed-rank
test (``scipy.stats.wilcoxon``, two-sided, exact at these n) and the mean without the pair of largest
``|Δ|``: the last two say whether one seed carries the sign (the primary P3–P5 rested on one MHA-8 seed). A row
whose mean changes sign without that pair is *carried by one seed* (``row["carried"]``, the seed), whatever its p.

**Left out** (``LEFT_OUT``): P4′ and P5′, M = 16 and 32, were not run for the budget (decided before any run at
a chosen lr, ``results/scale/issue47_plan.md``); their rows say so and count as p = 1 in P3′'s Holm, as
registered for a row not testable.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from scipy import stats as _scipy

from meanfield import config as _config
from meanfield.runs.folder import MetricsLog
from meanfield.studies.stats import holm, interval_cell, p_text, paired_difference

HERE = Path(__file__).resolve().parent
SCALE = HERE / "results" / "scale"
LRS = ("3e-4", "1e-3", "3e-3")
BASE_LR = "1e-3"
ARMS = ("mha8", "p8", "p16", "p32")
PARTICLES = ("p8", "p16", "p32")
LEFT_OUT = (
    "p16",
    "p32",
)  # P4′, P5′: not run, for the budget (results/scale/issue47_plan.md, 2026-12-06 20:45 UTC)
SEEDS_TUNE = (0, 1, 2)
SEEDS_FAIR = tuple(range(8))
EARLY_STEP = (
    450  # the early plateau: where MHA-8 and M = 8 part at lr 1e-3 (a descriptive column, not a test)
)


def runs(folder: Path) -> dict[tuple[str, ...], dict[int, dict]]:
    """``{presets: {seed: summary}}`` of every run folder under ``folder`` that has a ``summary.json``
    (finished or not): ``presets`` is the point's preset split at ``+`` (``("tune", "p8", "lr3e-3")``); each
    summary carries its run's ``folder``."""
    out: dict[tuple[str, ...], dict[int, dict]] = {}
    for run in sorted(p for p in folder.iterdir() if p.is_dir()) if folder.is_dir() else []:
        if not ((run / "summary.json").is_file() and (run / "point.json").is_file()):
            continue
        point = json.loads((run / "point.json").read_text())
        presets = tuple(str(point["point"].get("preset") or point.get("preset") or "").split("+"))
        seed = int(_config.load_toml(run / "config.toml")["seed"])
        out.setdefault(presets, {})[seed] = json.loads((run / "summary.json").read_text()) | {"folder": run}
    return out


def tuning_table(tune: dict[tuple[str, ...], dict[int, dict]]) -> dict[str, dict[str, list[float]]]:
    """``{arm: {lr: [final val_loss of each ended run]}}``; a run that ended without finishing is ``inf``."""
    out: dict[str, dict[str, list[float]]] = {}
    for (_, arm, lr_preset), by_seed in ((k, v) for k, v in tune.items() if len(k) == 3 and k[0] == "tune"):
        lr = lr_preset.removeprefix("lr")
        for seed in SEEDS_TUNE:
            s = by_seed.get(seed)
            if s is None or s.get("status") in ("running", "interrupted"):
                continue
            value = s["final"].get("val_loss", math.inf) if s.get("status") == "finished" else math.inf
            out.setdefault(arm, {}).setdefault(lr, []).append(float(value))
    return out


def early_losses(folder: Path, step: int = EARLY_STEP) -> dict[str, dict[str, list[float]]]:
    """``{arm: {lr: [training loss logged at ``step`` of each finished tuning run]}}``, the tuning grid's runs
    only (arms ``ARMS``, lrs ``LRS``, seeds ``SEEDS_TUNE``; arms in that order): the mean over the log window
    before ``step`` (``metrics.jsonl``), to show how fast each arm leaves the early plateau at each lr.
    Descriptive: no test is registered on it."""
    found: dict[str, dict[str, list[float]]] = {}
    for (_, arm, lr_preset), by_seed in (
        (k, v) for k, v in runs(folder).items() if len(k) == 3 and k[0] == "tune"
    ):
        lr = lr_preset.removeprefix("lr")
        if arm not in ARMS or lr not in LRS:
            continue
        for seed in SEEDS_TUNE:
            if by_seed.get(seed, {}).get("status") != "finished":
                continue
            rows = MetricsLog(by_seed[seed]["folder"] / "metrics.jsonl").read()
            loss = next((r["train_loss"] for r in rows if r.get("step") == step and "train_loss" in r), None)
            if loss is not None:
                found.setdefault(arm, {}).setdefault(lr, []).append(float(loss))
    return {arm: found[arm] for arm in ARMS if arm in found}


def choose(table: dict[str, dict[str, list[float]]]) -> dict[str, str]:
    """The pre-registered choice: per arm whose ``len(LRS) × 3`` tuning runs have all ended, the lr of the
    lowest mean final validation loss (an lr with a diverged or failed run is never chosen)."""
    out = {}
    for arm, by_lr in table.items():
        if all(len(by_lr.get(lr, [])) == len(SEEDS_TUNE) for lr in LRS):
            means = {lr: sum(by_lr[lr]) / len(by_lr[lr]) for lr in LRS}
            finite = {lr: m for lr, m in means.items() if math.isfinite(m)}
            if finite:
                out[arm] = min(finite, key=finite.get)
    return out


def fair_points(chosen: dict[str, str]) -> list[str]:
    """The lr-fair stage's grid points: each chosen arm at its lr, except at the base lr (primary/'s runs)."""
    return [f"{arm}+lr{lr}" for arm, lr in chosen.items() if lr != BASE_LR]


def final_losses(chosen: dict[str, str], fair: Path, primary: Path) -> dict[str, dict[int, float]]:
    """``{arm: {seed: final val_loss}}`` of each chosen arm at its lr (finished runs of seeds 0–7)."""
    out: dict[str, dict[int, float]] = {}
    by_presets = {**{(k[-1],): v for k, v in runs(primary).items()}, **runs(fair)}
    for arm, lr in chosen.items():
        key = (arm,) if lr == BASE_LR else (arm, f"lr{lr}")
        for seed, s in by_presets.get(key, {}).items():
            if s.get("status") == "finished" and seed in SEEDS_FAIR:
                out.setdefault(arm, {})[seed] = float(s["final"]["val_loss"])
    return out


def comparisons(losses: dict[str, dict[int, float]]) -> list[dict]:
    """P3–P5 at the chosen lrs: ``pM − mha8`` per row (see the module's docstring); Holm over the three."""
    rows = []
    for arm in PARTICLES:
        a, b = losses.get(arm, {}), losses.get("mha8", {})
        seeds = sorted(set(a) & set(b))
        row: dict = {"arm": arm, "seeds": seeds, "d": None, "p": 1.0}
        if len(seeds) >= 2:
            diffs = [a[s] - b[s] for s in seeds]
            d = paired_difference([a[s] for s in seeds], [b[s] for s in seeds])
            extreme = max(range(len(diffs)), key=lambda i: abs(diffs[i]))
            rest = diffs[:extreme] + diffs[extreme + 1 :]
            without = sum(rest) / len(rest)
            row.update(
                d=d,
                p=d.p_value if math.isfinite(d.p_value) else 1.0,
                wilcoxon=float(_scipy.wilcoxon(diffs).pvalue),
                without=(seeds[extreme], without),
                carried=seeds[extreme] if math.copysign(1, without) != math.copysign(1, d.mean) else None,
            )
        rows.append(row)
    for row, adjusted in zip(rows, holm([r["p"] for r in rows]), strict=True):
        row["holm"] = float(adjusted)
    return rows


def transfer(chosen: dict[str, str], fair: Path, primary: Path) -> list[dict]:
    """Exploratory, after the registered tests: for each arm whose chosen lr is not the base, that arm at its lr
    minus the same arm at the base lr on the evaluation split, paired by seed (does the holdout's choice hold
    where the comparison is made?)."""
    at_base = final_losses({arm: BASE_LR for arm in chosen}, fair, primary)
    at_chosen = final_losses(chosen, fair, primary)
    rows = []
    for arm, lr in chosen.items():
        a, b = at_chosen.get(arm, {}), at_base.get(arm, {})
        seeds = sorted(set(a) & set(b))
        if lr == BASE_LR or len(seeds) < 2:
            continue
        d = paired_difference([a[s] for s in seeds], [b[s] for s in seeds])
        worse = sum(a[s] > b[s] for s in seeds)
        rows.append({"arm": arm, "lr": lr, "d": d, "worse": worse, "n": len(seeds),
                     "means": (sum(a[s] for s in seeds) / len(seeds), sum(b[s] for s in seeds) / len(seeds))})  # fmt: skip
    return rows


def range_cell(values: list[float], digits: int) -> str:
    """``mean [min, max] (n=…)`` of one table cell, ``—`` when empty."""
    if not values:
        return "—"
    return f"{sum(values) / len(values):.{digits}f} [{min(values):.{digits}f}, {max(values):.{digits}f}] (n={len(values)})"


def markdown(
    table: dict[str, dict[str, list[float]]],
    chosen: dict[str, str],
    rows: list[dict],
    early: dict[str, dict[str, list[float]]] | None = None,
    transferred: list[dict] | None = None,
) -> str:
    lines = [
        "**The lr choice** (validation loss at step 2000 on the last 111,540 training characters, seeds 0–2; "
        "mean [min, max]; `inf`: diverged or failed)",
        "",
        "| arm | " + " | ".join(f"lr {lr}" for lr in LRS) + " | chosen |",
        "|---|" + "---|" * (len(LRS) + 1),
    ]
    for arm in ARMS:
        by_lr = table.get(arm, {})
        cells = [range_cell(by_lr.get(lr, []), 4) for lr in LRS]
        choice = "left out (budget)" if arm in LEFT_OUT and arm not in chosen else chosen.get(arm, "not yet")
        lines.append(f"| {arm} | " + " | ".join(cells) + f" | {choice} |")
    if early:
        lines += [
            "",
            f"Training loss at step {EARLY_STEP} of the same runs (mean over the log window before it; mean [min, max]:"
            " how fast each arm leaves the early plateau; descriptive, not a test)",
            "",
            "| arm | " + " | ".join(f"lr {lr}" for lr in LRS) + " |",
            "|---|" + "---|" * len(LRS),
        ]  # fmt: skip
        for arm, by_lr in early.items():
            cells = [range_cell(by_lr.get(lr, []), 3) for lr in LRS]
            lines.append(f"| {arm} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "**P3–P5 at each arm's lr** (final validation loss, seeds 0–7, pM − mha8; Holm over the three rows)",
        "",
        "| row | lrs | n | Δ (95 % CI) | paired t p | Holm p | δ80 | Wilcoxon p | Δ without the most extreme pair |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for i, r in enumerate(rows):
        lrs = f"{chosen.get(r['arm'], '?')} / {chosen.get('mha8', '?')}"
        d = r["d"]
        if d is None:
            why = "left out (budget): not run" if r["arm"] in LEFT_OUT else "not testable"
            lines.append(f"| P{3 + i}′ {r['arm']} − mha8 | {lrs} | {len(r['seeds'])} | {why} | | | | | |")
            continue
        seed, rest = r["without"]
        lines.append(
            f"| P{3 + i}′ {r['arm']} − mha8 | {lrs} | {d.n} | {interval_cell(d.mean, d.lo, d.hi, 4, sign=True)} | "
            f"{p_text(d.p_value)} | {p_text(r['holm'])} | {d.detectable():.3f} | {p_text(r['wilcoxon'])} | "
            f"{rest:+.4f} (seed {seed} left out{'; the sign changes: carried by one seed' if r['carried'] is not None else ''}) |"
        )
    if transferred:
        lines += [
            "",
            "Exploratory, post hoc: does the holdout's choice hold on the evaluation split? (each arm at its chosen lr "
            f"minus the same arm at {BASE_LR}, final validation loss, paired by seed; not a registered test)",
            "",
            "| arm | chosen − base lr | n | means | Δ (95 % CI) | paired t p | δ80 | pairs worse at the chosen lr |",
            "|---|---|---|---|---|---|---|---|",
        ]  # fmt: skip
        for r in transferred:
            d = r["d"]
            lines.append(
                f"| {r['arm']} | {r['lr']} − {BASE_LR} | {r['n']} | {r['means'][0]:.4f} vs {r['means'][1]:.4f} | "
                f"{interval_cell(d.mean, d.lo, d.hi, 4, sign=True)} | {p_text(d.p_value)} | {d.detectable():.3f} | "
                f"{r['worse']} of {r['n']} |"
            )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tune", type=Path, default=SCALE / "lr_tune")
    parser.add_argument("--fair", type=Path, default=SCALE / "lr_fair")
    parser.add_argument("--primary", type=Path, default=SCALE / "primary")
    parser.add_argument(
        "--choice", action="store_true", help="print the lr-fair stage's grid points and stop"
    )
    parser.add_argument("--out", type=Path, default=SCALE / "lr_tests.md")
    args = parser.parse_args(argv)
    table = tuning_table(runs(args.tune))
    chosen = choose(table)
    if args.choice:
        print(",".join(fair_points(chosen)))
        return
    text = markdown(
        table,
        chosen,
        comparisons(final_losses(chosen, args.fair, args.primary)),
        early_losses(args.tune),
        transfer(chosen, args.fair, args.primary),
    )
    args.out.write_text(text)
    sys.stdout.write(text)


if __name__ == "__main__":
    main()
