"""The pre-registered primary tests of the 6 × 256 study (issue 27) and the pilot's seed count.

    python experiments/particle_attention/scale_report.py            # results/scale/primary → primary_tests.md
    python experiments/particle_attention/scale_report.py --folder runs/scale-smoke/primary --out /tmp/t.md

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
(``Σ wall_clock_s × threads`` of the finished runs: ``summary.json`` and ``environment.json``).

**Blind until n = 8.** The pre-registration fixed n = 8 seeds for every primary arm and computes no comparison
before seed 7 has finished. Until every primary arm has 8 finished seeds the report therefore prints only the
paired sds (with the seeds they would ask for and the δ80 they give at n = 8), never a difference or a p;
``--unblind`` overrides that (a test of the tooling, not the study).
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from meanfield import config as _config
from meanfield.stats import detectable_difference, holm, paired_difference, pairs_needed

HERE = Path(__file__).resolve().parent
FOLDER = HERE / "results" / "scale" / "primary"
ALPHA, DELTA, MIN_SEEDS = 0.05, 0.01, 8
N_FIXED = 8  # decision (ii) of the pre-registration: every primary arm runs seeds 0-7, no look before

FAMILY = (
    ("P1", "β = 1e-3 vs β = 0 (M = 8)", "val_loss", "p8-b1e-3", "p8"),
    ("P2", "cosine 1e-2 → 0 vs β = 0 (M = 8)", "val_loss", "p8-cos1e-2", "p8"),
    ("P3", "M = 8 (width d/M), β = 0 vs MHA-8", "val_loss", "p8", "mha8"),
    ("P4", "M = 16 (width d/M), β = 0 vs MHA-8", "val_loss", "p16", "mha8"),
    ("P5", "M = 32 (width d/M), β = 0 vs MHA-8", "val_loss", "p32", "mha8"),
    ("P6", "drop-half gap, β = 1e-3 vs β = 0 (M = 8)", "half_random_gap", "p8-b1e-3", "p8"),
)


def arm_of(point: dict) -> str:
    """The arm preset of a point (the last of ``a+b``: ``wikitext2+p8`` → ``p8``)."""
    return str(point["point"].get("preset") or point.get("preset") or "").split("+")[-1]


def load(folder: Path) -> dict[str, dict[int, dict]]:
    """``{arm: {seed: final metrics}}`` of the finished runs under ``folder``."""
    out: dict[str, dict[int, dict]] = {}
    for run in sorted(p for p in folder.iterdir() if p.is_dir()) if folder.is_dir() else []:
        summary, point = run / "summary.json", run / "point.json"
        if not (summary.is_file() and point.is_file()):
            continue
        s = json.loads(summary.read_text())
        if s.get("status") != "finished":
            continue
        seed = int(_config.load_toml(run / "config.toml")["seed"])
        out.setdefault(arm_of(json.loads(point.read_text())), {})[seed] = s["final"]
    return out


def cost(folder: Path) -> tuple[int, float]:
    """``(finished runs, CPU-hours)`` under ``folder``: ``Σ wall_clock_s × threads / 3600`` (``wall_clock_s`` sums a
    run's resumptions; time lost with a machine before a checkpoint is not in it)."""
    runs, seconds = 0, 0.0
    for summary in sorted(folder.glob("*/summary.json")) if folder.is_dir() else []:
        s = json.loads(summary.read_text())
        if s.get("status") != "finished":
            continue
        env = summary.parent / "environment.json"
        threads = int(json.loads(env.read_text()).get("threads", 1)) if env.is_file() else 1
        runs, seconds = runs + 1, seconds + float(s["wall_clock_s"]) * threads
    return runs, seconds / 3600


def blind(runs: dict[str, dict[int, dict]]) -> bool:
    """Whether some primary arm has fewer than ``N_FIXED`` finished seeds (no comparison may be shown yet)."""
    arms = {arm for _, _, _, a, b in FAMILY for arm in (a, b)}
    return any(len(runs.get(arm, {})) < N_FIXED for arm in arms)


def tests(runs: dict[str, dict[int, dict]]) -> list[dict]:
    rows = []
    for pid, what, metric, a, b in FAMILY:
        seeds = sorted(set(runs.get(a, {})) & set(runs.get(b, {})))
        row = {"id": pid, "what": what, "metric": metric, "n": len(seeds), "d": None}
        if len(seeds) >= 2:
            row["d"] = paired_difference(
                [runs[a][s][metric] for s in seeds], [runs[b][s][metric] for s in seeds]
            )
        rows.append(row)
    p = [r["d"].p_value if r["d"] is not None else math.nan for r in rows]
    for r, q in zip(rows, holm(p)):
        r["holm"] = float(q)
    return rows


def _spread(d) -> bool:
    """Whether the differences have a usable sd (round-off sized ones make the noncentral t overflow)."""
    return math.isfinite(d.sd) and d.sd > 1e-9 * max(1.0, abs(d.mean))


def markdown_blind(rows: list[dict], folder: Path) -> str:
    """The interim table: each comparison's pairs, paired sd, the seeds it asks for and its δ80 at ``N_FIXED``."""
    lines = [
        f"Primary tests (pre-registered), **blind until every primary arm has {N_FIXED} seeds**: paired sds only, "
        f"from `{folder}`:",
        "",
        f"| id | comparison | metric | pairs | paired sd | seeds for 0.01 at 80 % power | δ80 at n = {N_FIXED} |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        d = r["d"]
        if d is None or not _spread(d):
            lines.append(f"| {r['id']} | {r['what']} | {r['metric']} | {r['n']} | — | — | — |")
            continue
        lines.append(
            f"| {r['id']} | {r['what']} | {r['metric']} | {d.n} | {d.sd:.4f} | {pairs_needed(DELTA, d.sd)} | "
            f"{detectable_difference(d.sd, N_FIXED):.4f} |"
        )
    lines += [
        "",
        f"*paired sd: of the per-seed differences (first arm − second); seeds for 0.01: "
        f"`pairs_needed(0.01, sd)`; δ80: the smallest |Δ| {N_FIXED} pairs detect with 80 % power at α = 0.05 at "
        "this sd (noncentral t). No difference and no p is shown before the fixed n (the pre-registration).*",
    ]
    return "\n".join(lines) + "\n"


def markdown(rows: list[dict], folder: Path) -> str:
    lines = [
        f"Primary tests (pre-registered), from `{folder}`:",
        "",
        "| id | comparison | metric | pairs | Δ ± 95 % CI half-width | 95 % CI | p (paired t) | p (Holm, 6) "
        "| δ80 | seeds for 0.01 at 80 % power | verdict (Holm < 0.05) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        d = r["d"]
        if d is None:
            lines.append(
                f"| {r['id']} | {r['what']} | {r['metric']} | {r['n']} | — | — | — | — | — | — | not run |"
            )
            continue
        sd_ok = _spread(d)
        need = pairs_needed(DELTA, d.sd) if sd_ok else "—"
        delta80 = f"{d.detectable():.4f}" if sd_ok else "—"
        verdict = "—" if not math.isfinite(r["holm"]) else (
            ("**lower**" if d.mean < 0 else "**higher**") if r["holm"] < ALPHA else "not significant")  # fmt: skip
        lines.append(
            f"| {r['id']} | {r['what']} | {r['metric']} | {d.n} | {d.mean:+.4f} ± {d.half_width:.4f} | "
            f"[{d.lo:+.4f}, {d.hi:+.4f}] | {d.p_value:.2g} | {r['holm']:.2g} | {delta80} | {need} | "
            f"{verdict} |"
        )
    needs = [pairs_needed(DELTA, r["d"].sd) for r in rows
             if r["id"] != "P6" and r["d"] is not None and _spread(r["d"])]  # fmt: skip
    if needs:
        lines += ["", f"Power rule: max(8, max over P1–P5 of pairs_needed(0.01, sd)) = **{max(MIN_SEEDS, *needs)}** seeds "
                  f"(per comparison: {', '.join(str(n) for n in needs)})."]  # fmt: skip
    lines += [
        "",
        "*Δ: mean paired difference (first arm − second) over the seeds both finished; ±: half-width of its 95 % "
        "Student-t interval (df = pairs − 1); Holm: over the six primary tests; δ80: the smallest |Δ| these pairs "
        "detect with 80 % power at α = 0.05 if the paired sd is the observed one (noncentral t).*",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--folder", type=Path, default=FOLDER)
    parser.add_argument("--out", type=Path, default=None, help="default FOLDER/../primary_tests.md")
    parser.add_argument("--unblind", action="store_true", help="show Δ and p before every arm has 8 seeds")
    args = parser.parse_args(argv)
    runs = load(args.folder)
    rows = tests(runs)
    text = (markdown_blind if blind(runs) and not args.unblind else markdown)(rows, args.folder)
    n, hours = cost(args.folder)
    text += f"\nCost: {n} finished runs, {hours:.1f} CPU-hours (Σ wall_clock_s × threads).\n"
    out = args.out or args.folder.parent / "primary_tests.md"
    out.write_text(text)
    print(text)
    print(f"written: {out}")


if __name__ == "__main__":
    main()
