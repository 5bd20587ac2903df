"""The pre-registered primary tests of the 6 × 256 study (issue 27) and the pilot's seed count.

    python experiments/particle_attention/scale_report.py            # results/scale/primary → primary_tests.md
    python experiments/particle_attention/scale_report.py --folder runs/scale-smoke/primary --out /tmp/t.md
    python experiments/particle_attention/scale_report.py --seeds 0,1,2 --out …/results/scale/pilot_sds.md   # the pilot
    python experiments/particle_attention/scale_report.py --stage wikitext2   # P1–P6 on words → wikitext2_tests.md

Reads every finished run of the primary sweep (``run_scale.sh pilot`` / ``main``): its arm from
``point.json`` (``point.preset``), its seed from ``config.toml``, its final metrics from ``summary.json``.
The family (docs/experiments/particle_attention.md, "The 6 × 256 study: pre-registration"), each a two-sided
paired t-test over the seeds both arms finished, at α = 0.05 with Holm's step-down correction over the six:

- P1: validation loss at the last step, ``p8-b1e-3 − p8`` (β = 1e-3 vs β = 0 at M = 8);
- P2: validation loss, ``p8-cos1e-2 − p8`` (cosine anneal 1e-2 → 0 vs β = 0);
- P3, P4, P5: validation loss, ``p8 − mha8``, ``p16 − mha8``, ``p32 − mha8`` (width d/M, β = 0);
- P6: the drop-half gap (``half_random_gap``: loss with half of every layer's particles dropped at random,
  minus the undamaged loss), ``p8-b1e-3 − p8``.

It also prints the seed count of the power rule: ``max(8, max over P1–P5 of pairs_needed(0.01, sd))`` at the
observed paired sds (the pilot's, when it is run after the pilot), and what the table's runs cost in CPU-hours
(``Σ wall_clock_s × threads`` of the finished runs: ``summary.json`` and ``environment.json``), in all and per
processor (the study ran on more than one kind of machine: an AMD EPYC, then an Intel Xeon).

**Exploratory, after the family**: E6, P6 measured over 32 draws instead of one (``drop_half_draws.py``'s
``results/scale/drop_half/primary/``: the mean gap over the draws of each run's final model, for the seeds
whose checkpoints were on the machine, 2–7), the same paired t-test, its raw p (not in the Holm family), and
the draw-to-draw sd (how much of P6's paired sd a single draw puts in).

**WikiText-2 words** (``--stage wikitext2``: ``results/scale/wikitext2`` → ``wikitext2_tests.md``): the same six
comparisons on the words runs (``run_scale.sh wikitext2``; the metric is the test-split loss at the last step,
the page's valid/test protocol), Holm over their own six, at the stage's fixed n = 3 seeds (blind before), no
power rule. Exploratory beside them: the same five loss comparisons at each run's best evaluated step
(``summary.json``'s ``best``; raw p) and the mean test-loss curve of each arm over the evaluated steps
(``metrics.jsonl``), which shows where the 500 steps lie against the overfitting turn.

**Blind until n = 8.** The pre-registration fixed n = 8 seeds for every primary arm and computes no comparison
before seed 7 has finished. Until every primary arm has 8 finished seeds the report therefore prints only the
paired sds (with the seeds they would ask for and the δ80 they give at n = 8), never a difference or a p;
``--unblind`` overrides that (a test of the tooling, not the study).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

from meanfield import config as _config
from meanfield.studies.stats import (
    PairedDifference,
    detectable_difference,
    holm,
    interval_cell,
    p_text,
    paired_difference,
    paired_t_power,
    pairs_needed,
    t_interval,
)

HERE = Path(__file__).resolve().parent
ASSETS = HERE.parents[1] / "docs" / "assets"
WORDS_FIGURE = "particle_attention_scale_words.png"
FOLDER = HERE / "results" / "scale" / "primary"
REPO = HERE.parents[1]
ALPHA, DELTA, MIN_SEEDS = 0.05, 0.01, 8
N_FIXED = 8  # decision (ii) of the pre-registration: every primary arm runs seeds 0-7, no look before
N_WORDS = 3  # the WikiText-2 stage: seeds 0-2 of every primary arm (the page's addendum of 2026-12-04)

FAMILY = (
    ("P1", "β = 1e-3 vs β = 0 (M = 8)", "val_loss", "p8-b1e-3", "p8"),
    ("P2", "cosine 1e-2 → 0 vs β = 0 (M = 8)", "val_loss", "p8-cos1e-2", "p8"),
    ("P3", "M = 8 (width d/M), β = 0 vs MHA-8", "val_loss", "p8", "mha8"),
    ("P4", "M = 16 (width d/M), β = 0 vs MHA-8", "val_loss", "p16", "mha8"),
    ("P5", "M = 32 (width d/M), β = 0 vs MHA-8", "val_loss", "p32", "mha8"),
    ("P6", "drop-half gap, β = 1e-3 vs β = 0 (M = 8)", "half_random_gap", "p8-b1e-3", "p8"),
)


# the primary arms, in the tables' order (run_scale.sh's PRIMARY; a test keeps them equal)
ARMS = ("mha8", "p8", "p8-b1e-3", "p8-cos1e-2", "p16", "p32")
# what ``val_loss`` means in the words stage's tables
WORDS_NOTE = ("\n*On words `val_loss` is the test split's loss (the page's protocol: trained on the valid split, "
              "measured on the test split).*\n")  # fmt: skip


class Stage(NamedTuple):
    """A stage's report: its sweep folder, report file, fixed seed count, title, and whether it is the character
    study (the pre-registered family, with its power rule) or the words stage (the same six, exploratory)."""

    folder: Path
    report: str
    n_fixed: int
    title: str
    characters: bool


STAGES = {
    "primary": Stage(FOLDER, "primary_tests.md", N_FIXED, "Primary tests (pre-registered)", True),
    "wikitext2": Stage(FOLDER.parent / "wikitext2", "wikitext2_tests.md", N_WORDS,
                       "P1–P6 on WikiText-2 words (exploratory stage; Holm over its own six)", False),
}  # fmt: skip

EXPLORATORY = (("E6", "drop-half gap over 32 draws, β = 1e-3 vs β = 0 (M = 8)", "p8-b1e-3", "p8"),)


def arm_of(point: dict) -> str:
    """The arm preset of a point (the last of ``a+b``: ``wikitext2+p8`` → ``p8``)."""
    return str(point["point"].get("preset") or point.get("preset") or "").split("+")[-1]


def finished_runs(folder: Path) -> Iterator[tuple[str, int, Path, dict]]:
    """``(arm, seed, run folder, summary)`` of every finished run under ``folder``, in folder order."""
    for run in sorted(p for p in folder.iterdir() if p.is_dir()) if folder.is_dir() else []:
        summary, point = run / "summary.json", run / "point.json"
        if not (summary.is_file() and point.is_file()):
            continue
        s = json.loads(summary.read_text())
        if s.get("status") != "finished":
            continue
        seed = int(_config.load_toml(run / "config.toml")["seed"])
        yield arm_of(json.loads(point.read_text())), seed, run, s


def load(folder: Path) -> dict[str, dict[int, dict]]:
    """``{arm: {seed: final metrics}}`` of the finished runs under ``folder``, with ``best_val_loss`` (the lowest
    evaluated ``val_loss``, ``summary.json``'s ``best``) where the run recorded it."""
    out: dict[str, dict[int, dict]] = {}
    for arm, seed, _, summary in finished_runs(folder):
        final = dict(summary["final"])
        best = summary.get("best", {}).get("val_loss")
        if best is not None:
            final["best_val_loss"] = float(best["value"])
        out.setdefault(arm, {})[seed] = final
    return out


def curves(folder: Path, seeds: set[int] | None = None) -> dict[str, dict[int, list[float]]]:
    """``{arm: {step: [val_loss of each finished run evaluated at step]}}`` from the runs' ``metrics.jsonl`` (of
    ``seeds`` only, when given)."""
    out: dict[str, dict[int, list[float]]] = {}
    for arm, seed, run, _ in finished_runs(folder):
        if seeds is not None and seed not in seeds:
            continue
        for line in (run / "metrics.jsonl").read_text().splitlines() if (run / "metrics.jsonl").is_file() else []:
            record = json.loads(line)
            if "val_loss" in record:
                out.setdefault(arm, {}).setdefault(int(record["step"]), []).append(float(record["val_loss"]))
    return out


def _finished(folder: Path, seeds: set[int] | None = None) -> list[tuple[dict, dict]]:
    """``(summary, environment)`` of every finished run under ``folder`` (of ``seeds`` only, when given)."""
    out = []
    for _, seed, run, summary in finished_runs(folder):
        if seeds is None or seed in seeds:
            env = run / "environment.json"
            out.append((summary, json.loads(env.read_text()) if env.is_file() else {}))
    return out


def cost(folder: Path, seeds: set[int] | None = None) -> tuple[int, float]:
    """``(finished runs, CPU-hours)`` under ``folder``: ``Σ wall_clock_s × threads / 3600`` (``wall_clock_s`` sums a
    run's resumptions; time lost with a machine before a checkpoint is not in it)."""
    per = cost_by_processor(folder, seeds).values()
    return sum(n for n, _ in per), sum(hours for _, hours in per)


def cost_by_processor(folder: Path, seeds: set[int] | None = None) -> dict[str, tuple[int, float]]:
    """``{processor: (finished runs, CPU-hours)}`` under ``folder`` (``environment.json``'s ``processor``)."""
    out: dict[str, tuple[int, float]] = {}
    for summary, env in _finished(folder, seeds):
        name = str(env.get("processor") or "unknown")
        n, hours = out.get(name, (0, 0.0))
        out[name] = (n + 1, hours + float(summary["wall_clock_s"]) * int(env.get("threads", 1)) / 3600)
    return out


def load_draws(folder: Path, sweep: Path) -> dict[str, dict[int, dict]]:
    """``{arm: {seed: record}}`` of ``drop_half_draws.py``'s records under ``folder`` (one JSON a run, its
    ``mean`` and ``sd`` over the draws); the arm is read from the run's ``point.json`` in ``sweep``."""
    out: dict[str, dict[int, dict]] = {}
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        record = json.loads(path.read_text())
        point = sweep / record["run"] / "point.json"
        if point.is_file():
            out.setdefault(arm_of(json.loads(point.read_text())), {})[int(record["seed"])] = record
    return out


def rerun_draws(
    reruns: Path, committed: Path, tol: float = 1e-6
) -> tuple[dict[str, dict[int, dict]], dict[str, dict[int, dict]], list[str]]:
    """The drop-half records of reruns of committed runs (``drop_half/<reruns.name>/``, issue 47's P6 reruns):
    ``(all, reproduced, lines)``: every rerun's record, those of the reruns whose final ``val_loss`` and
    ``half_random_gap`` equal the committed run's to ``tol`` (they stand for the committed run), and one line a
    rerun that says which."""
    records = load_draws(reruns.parent / "drop_half" / reruns.name, reruns)
    new_runs, old_runs = load(reruns), load(committed)
    same: dict[str, dict[int, dict]] = {}
    lines = []
    for arm, by_seed in sorted(records.items()):
        for seed, record in sorted(by_seed.items()):
            new, old = new_runs.get(arm, {}).get(seed), old_runs.get(arm, {}).get(seed)
            if not (new and old):
                continue
            dv = new["val_loss"] - old["val_loss"]
            dg = new["half_random_gap"] - old["half_random_gap"]
            reproduced = abs(dv) <= tol and abs(dg) <= tol
            if reproduced:
                same.setdefault(arm, {})[seed] = record
            verdict = "reproduced" if reproduced else f"not reproduced to {tol:g}: this seed pairs rerun with rerun"
            lines.append(
                f"- `{arm}` seed {seed}: rerun − committed, val_loss {dv:+.2e}, half_random_gap {dg:+.2e} ({verdict})"
            )
    return records, same, lines


def paired(
    by_arm: dict[str, dict[int, dict]], a: str, b: str, key: str, level: float = 0.95
) -> tuple[list[int], PairedDifference | None]:
    """``(seeds, d)``: the seeds where both arms have ``key`` and the paired difference ``a[key] − b[key]`` over
    them, its interval at ``level`` (``None`` below 2 pairs)."""
    a_runs, b_runs = by_arm.get(a, {}), by_arm.get(b, {})
    seeds = sorted(s for s in set(a_runs) & set(b_runs) if key in a_runs[s] and key in b_runs[s])
    if len(seeds) < 2:
        return seeds, None
    return seeds, paired_difference(
        [by_arm[a][s][key] for s in seeds], [by_arm[b][s][key] for s in seeds], level=level
    )


def exploratory(draws: dict[str, dict[int, dict]]) -> list[dict]:
    """E6: the paired difference of the 32-draw mean gaps over the seeds both arms have."""
    rows = []
    for eid, what, a, b in EXPLORATORY:
        seeds, d = paired(draws, a, b, "mean")
        rows.append({"id": eid, "what": what, "n": len(seeds), "seeds": seeds, "d": d})
    return rows


def markdown_exploratory(rows: list[dict], draws: dict[str, dict[int, dict]], shown: bool) -> str:
    """The exploratory rows: Δ, CI and raw p when ``shown`` (unblinded), else the paired sd only; and the
    draw-to-draw sd over every measured run (a property of the measurement, not a comparison)."""
    records = [r for arm in draws.values() for r in arm.values()]
    if not records:
        return ""
    lines = ["", "Exploratory (not in the Holm family; raw p):", ""]
    if shown:
        lines += ["| id | comparison | pairs (seeds) | Δ (95 % CI) | p (paired t) | δ80 |",
                  "|---|---|---|---|---|---|"]  # fmt: skip
    else:
        lines += [
            "| id | comparison | pairs (seeds) | paired sd | δ80 at these pairs |",
            "|---|---|---|---|---|",
        ]
    for r in rows:
        d, seeds = r["d"], f"{r['n']} ({', '.join(map(str, r['seeds']))})" if r["seeds"] else "0"
        if d is None or not _spread(d):
            lines.append(f"| {r['id']} | {r['what']} | {seeds} | — | — |" + (" — |" if shown else ""))
        elif shown:
            lines.append(f"| {r['id']} | {r['what']} | {seeds} | {_cells(d)} | {p_text(d.p_value)} | {d.detectable():.4f} |")
        else:
            lines.append(f"| {r['id']} | {r['what']} | {seeds} | {d.sd:.4f} | {d.detectable():.4f} |")
    sds = sorted(r["sd"] for r in records)
    lines += [
        "",
        f"*Draw-to-draw sd of the gap (over each run's {records[0]['draws']} draws), {len(sds)} runs: median "
        f"{statistics.median(sds):.3f}, range {sds[0]:.3f}–{sds[-1]:.3f} nats; a single draw's gap (P6's metric) "
        "carries that sd on top of the seed-to-seed one.*",
    ]
    return "\n".join(lines) + "\n"


def blind(runs: dict[str, dict[int, dict]], n_fixed: int = N_FIXED) -> bool:
    """Whether some primary arm has fewer than ``n_fixed`` finished seeds (no comparison may be shown yet)."""
    arms = {arm for _, _, _, a, b in FAMILY for arm in (a, b)}
    return any(len(runs.get(arm, {})) < n_fixed for arm in arms)


def best_step(runs: dict[str, dict[int, dict]]) -> list[dict]:
    """B1–B5 (exploratory): P1–P5's loss comparisons at each run's best evaluated step instead of the last."""
    rows = []
    for pid, what, metric, a, b in FAMILY:
        if metric == "val_loss":
            seeds, d = paired(runs, a, b, "best_val_loss")
            rows.append({"id": "B" + pid[1:], "what": what, "n": len(seeds), "seeds": seeds, "d": d})
    return rows


def in_table_order(arms) -> list[str]:
    """``arms`` in ``ARMS``'s order, any other arm after them by name."""
    return sorted(arms, key=lambda a: (ARMS.index(a) if a in ARMS else len(ARMS), a))


def markdown_words_exploratory(runs: dict[str, dict[int, dict]], by_step: dict[str, dict[int, list[float]]]) -> str:
    """The best-step comparisons (raw p) and the mean test-loss curve of every arm over its evaluated steps."""
    lines = ["", "Exploratory (not in the Holm family; raw p): the same loss comparisons at each run's best "
             "evaluated step.", "",
             "| id | comparison | pairs | Δ (95 % CI) | p (paired t) |",
             "|---|---|---|---|---|"]  # fmt: skip
    for r in best_step(runs):
        d = r["d"]
        if d is None or not _spread(d):
            lines.append(f"| {r['id']} | {r['what']} | {r['n']} | — | — |")
        else:
            lines.append(f"| {r['id']} | {r['what']} | {d.n} | {_cells(d)} | {p_text(d.p_value)} |")
    steps = sorted({step for arm in by_step.values() for step in arm})
    if steps:
        lines += ["", "Mean test loss over the finished seeds at each evaluated step (seeds in brackets):", "",
                  "| arm | " + " | ".join(str(s) for s in steps) + " |", "|---|" + "---|" * len(steps)]  # fmt: skip
        for arm in in_table_order(by_step):
            cells = [f"{statistics.fmean(v):.3f} ({len(v)})" if (v := by_step[arm].get(s)) else "—" for s in steps]
            lines.append(f"| {arm} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def words_figure(by_step: dict[str, dict[int, list[float]]], path: Path) -> None:
    """Each arm's mean test loss over its seeds at every evaluated step, ± the 95 % t interval (the curve that
    says where the last step lies against the overfitting turn)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    centre = (len(by_step) - 1) / 2
    for k, arm in enumerate(in_table_order(by_step)):
        steps = sorted(s for s, v in by_step[arm].items() if v)
        ivs = [t_interval(by_step[arm][s]) for s in steps]
        x = [s + 6 * (k - centre) for s in steps]  # side by side at each step, so the intervals do not overlap
        ax.errorbar(x, [iv.mean for iv in ivs], yerr=[iv.half_width for iv in ivs], marker="o", ms=4, capsize=2,
                    label=f"{arm} (n = {max(len(by_step[arm][s]) for s in steps)})")  # fmt: skip
    ax.set_xlabel("step (16 × 128 tokens)")
    ax.set_ylabel("test loss (nats/word)")
    ax.set_title("WikiText-2 words, 6 × 256: mean test loss ± 95 % CI over seeds", fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def tests(runs: dict[str, dict[int, dict]]) -> list[dict]:
    rows = []
    for pid, what, metric, a, b in FAMILY:
        seeds, d = paired(runs, a, b, metric)
        _, family = paired(runs, a, b, metric, level=1 - ALPHA / len(FAMILY))  # Bonferroni: simultaneous
        rows.append({"id": pid, "what": what, "metric": metric, "n": len(seeds), "d": d, "family": family})
    p = [r["d"].p_value if r["d"] is not None else math.nan for r in rows]
    for r, q in zip(rows, holm(p)):
        r["holm"] = float(q)
    return rows


def _cells(d: PairedDifference) -> str:
    """The cell every comparison row shares: ``Δ (lo – hi)``, its 95 % t interval (``meanfield.studies.stats``)."""
    return interval_cell(d.mean, d.lo, d.hi, 4, sign=True)


def _spread(d) -> bool:
    """Whether the differences have a usable sd: relative to their mean, not round-off (which makes the noncentral
    t overflow). Scale-free, so that a metric of size 1e-8 (the gradient variance) keeps its tests."""
    return math.isfinite(d.sd) and d.sd > 1e-9 * abs(d.mean) and d.sd > 0


def shown_path(folder: Path) -> str:
    """``folder`` relative to the repository when it lies inside it (the committed tables name no machine's paths)."""
    try:
        return str(folder.resolve().relative_to(REPO))
    except ValueError:
        return str(folder)


def markdown_blind(rows: list[dict], folder: Path, stage: Stage = STAGES["primary"]) -> str:
    """The interim table: each comparison's pairs, paired sd, the seeds it asks for and its δ80 at the fixed n."""
    n_fixed = stage.n_fixed
    lines = [
        f"{stage.title}, **blind until every primary arm has {n_fixed} seeds**: paired sds only, "
        f"from `{shown_path(folder)}`:",
        "",
        f"| id | comparison | metric | pairs | paired sd | seeds for 0.01 at 80 % power | δ80 at n = {n_fixed} |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        d = r["d"]
        if d is None or not _spread(d):
            lines.append(f"| {r['id']} | {r['what']} | {r['metric']} | {r['n']} | — | — | — |")
            continue
        lines.append(
            f"| {r['id']} | {r['what']} | {r['metric']} | {d.n} | {d.sd:.4f} | {pairs_needed(DELTA, d.sd)} | "
            f"{detectable_difference(d.sd, n_fixed):.4f} |"
        )
    lines += [
        "",
        f"*paired sd: of the per-seed differences (first arm − second); seeds for 0.01: "
        f"`pairs_needed(0.01, sd)`; δ80: the smallest |Δ| {n_fixed} pairs detect with 80 % power at α = 0.05 at "
        "this sd (noncentral t). No difference and no p is shown before the fixed n "
        f"({'the pre-registration' if stage.characters else 'the addendum of 2026-12-04: 3 seeds an arm'}).*",
    ]
    return "\n".join(lines) + "\n"


def markdown(rows: list[dict], folder: Path, stage: Stage = STAGES["primary"]) -> str:
    """The family's table: Δ, intervals (95 % and Bonferroni), raw and Holm p, δ80, the power at 0.01 and a verdict;
    under it the power rule's seed count for the character study (not for the words stage: n fixed at 3)."""
    lines = [
        f"{stage.title}, from `{shown_path(folder)}`:",
        "",
        "| id | comparison | metric | pairs | Δ (95 % CI) | family 95 % CI (Bonferroni) "
        "| p (paired t) | p (Holm, 6) | δ80 | power at 0.01 | seeds for 0.01 at 80 % power | verdict (Holm < 0.05) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        d = r["d"]
        if d is None:
            lines.append(
                f"| {r['id']} | {r['what']} | {r['metric']} | {r['n']} | — | — | — | — | — | — | — | not run |"
            )
            continue
        sd_ok = _spread(d)
        need = pairs_needed(DELTA, d.sd) if sd_ok else "—"
        delta80 = f"{d.detectable():.4f}" if sd_ok else "—"
        power = f"{paired_t_power(DELTA, d.sd, d.n):.2f}" if sd_ok else "—"
        verdict = "—" if not math.isfinite(r["holm"]) else (
            ("**lower**" if d.mean < 0 else "**higher**") if r["holm"] < ALPHA else "not significant")  # fmt: skip
        lines.append(
            f"| {r['id']} | {r['what']} | {r['metric']} | {d.n} | {_cells(d)} | "
            f"({r['family'].lo:+.4f} – {r['family'].hi:+.4f}) | {p_text(d.p_value)} | "
            f"{p_text(r['holm'])} | {delta80} | {power} | {need} | "
            f"{verdict} |"
        )
    needs = [pairs_needed(DELTA, r["d"].sd) for r in rows
             if r["id"] != "P6" and r["d"] is not None and _spread(r["d"])]  # fmt: skip
    if needs and stage.characters:
        lines += ["", f"Power rule: max(8, max over P1–P5 of pairs_needed(0.01, sd)) = **{max(MIN_SEEDS, *needs)}** seeds "
                  f"(per comparison: {', '.join(str(n) for n in needs)})."]  # fmt: skip
    lines += [
        "",
        "*Δ: mean paired difference (first arm − second) over the seeds both finished, in parentheses its 95 % "
        "Student-t interval (df = pairs − 1); family CI: the Bonferroni interval at level 1 − 0.05/6, so that all six cover "
        "their true Δ together with at least 95 % probability (Holm's tests control the same family-wise error); Holm: over the six tests of this table; δ80: the smallest |Δ| these pairs "
        "detect with 80 % power at α = 0.05 if the paired sd is the observed one (noncentral t); power at 0.01: "
        "the probability that this test (unadjusted α = 0.05, these pairs) finds |Δ| = 0.01 at that sd — under Holm "
        "the first comparison is tested at 0.05/6, so less.*",
    ]
    return "\n".join(lines) + "\n"


def _only(by_arm: dict[str, dict[int, dict]], seeds: set[int] | None) -> dict[str, dict[int, dict]]:
    """``by_arm`` with only ``seeds`` (all for ``None``)."""
    if seeds is None:
        return by_arm
    return {arm: {s: v for s, v in by_seed.items() if s in seeds} for arm, by_seed in by_arm.items()}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--stage", choices=sorted(STAGES), default="primary",
                        help="primary: the character study (n = 8, power rule); wikitext2: the words stage (n = 3)")  # fmt: skip
    parser.add_argument("--folder", type=Path, default=None, help="default: the stage's results/scale/<stage>")
    parser.add_argument("--out", type=Path, default=None, help="default: FOLDER/../<stage's report>.md")
    parser.add_argument(
        "--draws",
        type=Path,
        default=None,
        help="drop_half_draws.py's records (default FOLDER/../drop_half/<name>)",
    )
    parser.add_argument("--figure", type=Path, default=None,
                        help=f"wikitext2: the test-loss curve figure (default docs/assets/{WORDS_FIGURE} for the "
                        f"stage's own folder, else FOLDER/../{WORDS_FIGURE}); written once unblinded")  # fmt: skip
    parser.add_argument("--unblind", action="store_true",
                        help="show Δ and p before every arm has the stage's seeds (8; wikitext2: 3)")  # fmt: skip
    parser.add_argument(
        "--seeds",
        default=None,
        help="only these seeds, e.g. 0,1,2 (the pilot's sds); default every finished seed",
    )
    args = parser.parse_args(argv)
    stage = STAGES[args.stage]
    own = args.folder is None
    args.folder = args.folder or stage.folder
    if not args.folder.is_dir():
        parser.error(f"--folder {args.folder} is not a folder: give the {args.stage} sweep's --out (run_scale.sh's "
                     f"results/scale/{stage.folder.name})")  # fmt: skip
    runs = load(args.folder)
    keep = None if args.seeds is None else {int(x) for x in args.seeds.split(",") if x.strip()}
    runs = _only(runs, keep)
    rows = tests(runs)
    shown = not blind(runs, stage.n_fixed) or args.unblind
    text = (markdown if shown else markdown_blind)(rows, args.folder, stage)
    if not stage.characters:
        by_step = curves(args.folder, keep)
        text += WORDS_NOTE + (markdown_words_exploratory(runs, by_step) if shown else "")
        if shown and by_step:
            words_figure(by_step, args.figure or (ASSETS if own else args.folder.parent) / WORDS_FIGURE)
    draws = _only(
        load_draws(args.draws or args.folder.parent / "drop_half" / args.folder.name, args.folder), keep
    )
    text += markdown_exploratory(exploratory(draws), draws, shown)
    by_processor = cost_by_processor(args.folder, keep)  # one scan of the folder; cost() is its sum
    n, hours = sum(k for k, _ in by_processor.values()), sum(h for _, h in by_processor.values())
    per = "; ".join(f"{name}: {k} run{'s' if k != 1 else ''}, {h:.1f}" for name, (k, h) in by_processor.items())
    text += (
        f"\nCost: {n} finished runs, {hours:.1f} CPU-hours (Σ wall_clock_s × threads; by processor: {per}).\n"
    )
    out = args.out or args.folder.parent / stage.report
    out.write_text(text)
    print(text)
    print(f"written: {out}")


if __name__ == "__main__":
    main()
