"""Issue 47's tests at 6 × 256 (docs/experiments/particle_attention.md, "Issue 47: pre-registration") and the
verdict table, one row per seed claim, from the committed run folders as they stand.

    python experiments/particle_attention/scale_issue47.py     # → results/scale/issue47_tests.md

- **H1–H3, the hot end** (claim f): ``p8-b3e-3``, ``p8-b1e-2``, ``p8-b3e-2`` − ``p8``, the final validation
  loss, paired by seed over seeds 0–7 (the arms' runs in ``secondary/``, ``p8``'s in ``primary/``), two-sided
  paired t, Holm over the three rows (fixed: a row with < 2 pairs counts as p = 1). No verdict before a row has
  its 8 pairs: the table says how many have landed.
- **P6′**: ``p8-b1e-3`` − ``p8``, the drop-half gap averaged over 32 draws (``drop_half_draws.py``): seeds 2–7
  from the primary runs' records, seeds 0–1 from both arms' reruns (``p6/``, their records in
  ``drop_half/p6/``), with the reruns' reproduction of the committed runs (final ``val_loss`` and logged
  ``half_random_gap``) beside it. One test, two-sided paired t.
- **P3′–P5′**: ``scale_lr.py`` (the lr choice and the comparison at each arm's lr).
- **The verdict table**: every seed claim's rows (P1–P6 from ``scale_report.py``'s family; H1–H3; P6′; the
  exploratory metrics of the primary sweep against ``p8``, with Holm per metric over the sweep table's five
  rows, as ``results/scale/primary/summary.md``), each with Δ (95 % CI), δ80, n, Holm p and a verdict in the
  words the seeds can carry: "k of 8 pairs landed: no verdict yet"; "established" (Holm p < 0.05); "seen
  (raw p < 0.05), not established after Holm"; otherwise "no difference as large as δ80 (n pairs)".
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import scale_lr as _lr  # noqa: E402
import scale_report as _primary  # noqa: E402  (load, paired, tests, load_draws)

from meanfield.studies.stats import holm, interval_cell, p_text  # noqa: E402

HERE = Path(__file__).resolve().parent
SCALE = HERE / "results" / "scale"
N_PLANNED = 8
HOT = (("H1", "p8-b3e-3", "β = 3e-3"), ("H2", "p8-b1e-2", "β = 1e-2"), ("H3", "p8-b3e-2", "β = 3e-2"))
# the primary sweep table's rows against p8 (results/scale/primary/summary.md): Holm per metric over these
SWEEP_ROWS = ("mha8", "p8-b1e-3", "p8-cos1e-2", "p16", "p32")
REPRODUCE_TOL = 1e-6


def verdict(d, holm_p: float, n: int, planned: int = N_PLANNED, unit: str = "nats") -> str:
    """The plain verdict of one row (see the module's docstring)."""
    if d is None or n < planned:
        return f"{n} of {planned} pairs landed: no verdict yet"
    sign = "higher" if d.mean > 0 else "lower"
    if holm_p < 0.05:
        return f"established: {sign} (Holm p < 0.05, {n} pairs)"
    if d.p_value < 0.05:
        return f"seen ({sign}, raw p = {p_text(d.p_value)}), not established after Holm ({n} pairs)"
    return f"no difference as large as δ80 = {d.detectable():.3g}{' ' + unit if unit else ''} ({n} pairs)"


def exploratory_verdict(d, holm_p: float, n: int, unit: str = "nats") -> str:
    """An exploratory row's words: :func:`verdict`'s, except that a difference below Holm 0.05 within its own
    sweep table is not called "established" (no registered test stands behind it)."""
    words = verdict(d, holm_p, n, unit=unit)
    if words.startswith("established: "):
        sign = "higher" if d.mean > 0 else "lower"
        return f"exploratory: {sign} (Holm p < 0.05 within the sweep table, {n} pairs; not a registered test)"
    return "exploratory: " + words


def lr_verdict(row: dict, n: int, planned: int = N_PLANNED) -> str:
    """P3′–P5′'s verdict: :func:`verdict`, except that a row of its planned pairs whose mean changes sign without
    its most extreme pair is "carried by one seed", whatever its p (the pre-registration)."""
    if n >= planned and row.get("carried") is not None:
        seed, rest = row["without"]
        return f"carried by one seed: {row['d'].mean:+.4f}, without seed {seed} {rest:+.4f} ({n} pairs)"
    return verdict(row["d"], row["holm"], n)


def hot_rows(primary: dict, secondary: dict) -> list[dict]:
    """H1–H3 over the seeds both arms finished, Holm over the three (fixed family)."""
    runs = {**secondary, "p8": primary.get("p8", {})}
    rows = []
    for hid, arm, what in HOT:
        seeds, d = _primary.paired(runs, arm, "p8", "val_loss")
        rows.append({"id": hid, "arm": arm, "what": what, "seeds": seeds, "d": d})
    p = [r["d"].p_value if r["d"] is not None and math.isfinite(r["d"].p_value) else 1.0 for r in rows]
    for r, q in zip(rows, holm(p), strict=True):
        r["holm"] = float(q)
    return rows


def p6_prime(scale: Path) -> tuple[list[int], object, list[str], dict[str, float]]:
    """P6′'s seeds, paired difference (``None`` below 2 pairs), the reruns' reproduction lines and each arm's
    gap (the mean over the paired seeds of the 32-draw means)."""
    primary_draws = _primary.load_draws(scale / "drop_half" / "primary", scale / "primary")
    rerun_draws, _, lines = _primary.rerun_draws(scale / "p6", scale / "primary", REPRODUCE_TOL)
    draws: dict[str, dict[int, dict]] = {}
    for arm in ("p8", "p8-b1e-3"):  # both arms' seeds 0–1 are reruns: they pair rerun with rerun in any case
        draws[arm] = {s: r for s, r in primary_draws.get(arm, {}).items() if s >= 2}
        draws[arm].update(rerun_draws.get(arm, {}))
    seeds, d = _primary.paired(draws, "p8-b1e-3", "p8", "mean")
    means = {arm: sum(draws[arm][s]["mean"] for s in seeds) / len(seeds) for arm in draws} if seeds else {}
    return seeds, d, lines, means


def primary_family_with_p6_prime(family: dict[str, dict], p6) -> str:
    """For information (the pre-registration): Holm over the primary family with P6 replaced by P6′."""
    if p6 is None:
        return "In the primary family with P6 replaced by P6′ (Holm over six, for information): not testable yet."
    ids = ("P1", "P2", "P3", "P4", "P5")
    raw = [family[i]["d"].p_value for i in ids] + [p6.p_value]
    adjusted = holm([p if math.isfinite(p) else 1.0 for p in raw])
    cells = ", ".join(f"{i} {p_text(q)}" for i, q in zip((*ids, "P6′"), adjusted, strict=True))
    return f"In the primary family with P6 replaced by P6′ (Holm over six, for information): {cells}."


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def _ci(d) -> str:
    return interval_cell(d.mean, d.lo, d.hi, 4, sign=True) if d is not None else "—"


def _d80(d) -> str:
    return f"{d.detectable():.3g}" if d is not None and _primary._spread(d) else "—"


def exploratory_rows(primary: dict) -> list[dict]:
    """β = 1e-3 − β = 0 on the exploratory metrics, Holm per metric over the sweep table's five rows."""
    out = []
    for claim, metric, unit in (("(a, d) head similarity", "head_sim", ""),
                                ("(a, d) output effective rank / M", "erank_frac", ""),
                                ("(c) loss on 10 %-corrupted text", "corrupt_loss", "nats"),
                                ("smoothness (training-loss roughness)", "loss_roughness", "")):  # fmt: skip
        ds = {arm: _primary.paired(primary, arm, "p8", metric)[1] for arm in SWEEP_ROWS}
        p = [d.p_value if d is not None and math.isfinite(d.p_value) else 1.0 for d in ds.values()]
        adjusted = dict(zip(ds, holm(p), strict=True))
        out.append(
            {
                "claim": claim,
                "metric": metric,
                "unit": unit,
                "d": ds["p8-b1e-3"],
                "holm": float(adjusted["p8-b1e-3"]),
            }
        )
    return out


def issue47_runs(scale: Path):
    """``(stage, summary, environment)`` of every finished run issue 47 added: the hot arms' seeds that issue 27
    did not run (β = 3e-3; seeds 3–7 of 1e-2 and 3e-2), the P6 reruns, the lr choice and the lr-fair runs."""
    for stage in ("secondary", "p6", "lr_tune", "lr_fair"):
        for arm, seed, run, summary in _primary.finished_runs(scale / stage):
            if stage == "secondary" and not (
                arm == "p8-b3e-3" or (arm in ("p8-b1e-2", "p8-b3e-2") and seed >= 3)
            ):
                continue
            env = run / "environment.json"
            yield stage, summary, json.loads(env.read_text()) if env.is_file() else {}


def cost_line(scale: Path) -> str:
    """Σ ``wall_clock_s`` × threads of issue 47's finished runs, per stage (``scale_report.cost``'s measure)."""
    per: dict[str, list[float]] = {}
    for stage, summary, env in issue47_runs(scale):
        per.setdefault(stage, []).append(float(summary["wall_clock_s"]) * int(env.get("threads", 1)) / 3600)
    if not per:
        return "Cost: no issue-47 run of the 6 × 256 model has finished yet.\n"
    cells = ", ".join(f"{stage} {len(h)} runs {sum(h):.1f} h" for stage, h in per.items())
    total = sum(sum(h) for h in per.values())
    return f"Cost: {total:.1f} CPU-hours for issue 47's finished 6 × 256 runs ({cells}; Σ wall_clock_s × threads).\n"


def markdown(scale: Path) -> str:
    primary = _primary.load(scale / "primary")
    secondary = _primary.load(scale / "secondary")
    hot = hot_rows(primary, secondary)
    p6_seeds, p6, repro, p6_means = p6_prime(scale)
    family = {r["id"]: r for r in _primary.tests(primary)}
    lines = [
        "**H1–H3: the hot end** (final validation loss minus β = 0's, M = 8; seeds 0–7 planned; Holm over the three)",
        "",
        "| id | β | pairs landed (seeds) | Δ (95 % CI) | p (paired t) | Holm p (3) | δ80 | verdict |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in hot:
        d = r["d"]
        lines.append(_row([r["id"], r["what"], f"{len(r['seeds'])} of 8 ({', '.join(map(str, r['seeds']))})", _ci(d),
                           p_text(d.p_value) if d else "—", p_text(r["holm"]), _d80(d),
                           verdict(d, r["holm"], len(r["seeds"]))]))  # fmt: skip
    lines += [
        "",
        "**P6′: the drop-half gap over 32 draws** (β = 1e-3 − β = 0, M = 8; seeds 0–7 planned; one test)",
        "",
        "| pairs landed (seeds) | Δ (95 % CI) | p (paired t) | δ80 | verdict |",
        "|---|---|---|---|---|",
        _row([f"{len(p6_seeds)} of 8 ({', '.join(map(str, p6_seeds))})", _ci(p6),
              p_text(p6.p_value) if p6 else "—", _d80(p6), verdict(p6, p6.p_value if p6 else 1.0, len(p6_seeds))]),
    ]  # fmt: skip
    if p6_means:
        lines += ["", "The gap itself (mean over the pairs of each run's 32-draw mean): "
                  + ", ".join(f"`{arm}` {v:.3f} nats" for arm, v in p6_means.items()) + "."]  # fmt: skip
    lines += ["", primary_family_with_p6_prime(family, p6)]
    if repro:
        lines += ["", "Reruns of seeds 0–1 (`results/scale/p6/`) against the committed runs:", "", *repro]
    lines += ["", "**P3′–P5′: each arm at its own learning rate** (`scale_lr.py`)", ""]
    table = _lr.tuning_table(_lr.runs(scale / "lr_tune"))
    chosen = _lr.choose(table)
    rows = _lr.comparisons(_lr.final_losses(chosen, scale / "lr_fair", scale / "primary"))
    transferred = _lr.transfer(chosen, scale / "lr_fair", scale / "primary")
    lines.append(_lr.markdown(table, chosen, rows, _lr.early_losses(scale / "lr_tune"), transferred))
    lines += [
        VERDICTS_START,  # a snippet section: the page opens with this table (docs/experiments/particle_attention.md)
        "**Verdicts, one row per seed claim** (6 × 256, tiny-shakespeare characters, final step; Δ first arm − "
        "second; nats unless said)",
        "",
        "| seed claim | comparison | n | Δ (95 % CI) | δ80 | Holm p (family) | verdict |",
        "|---|---|---|---|---|---|---|",
    ]
    for pid, claim in (("P1", "(b) the noise lowers the loss"), ("P2", "(b) annealed noise lowers the loss"),
                       ("P3", "(b) particles beat MHA-8, lr 1e-3"), ("P4", "(b) particles beat MHA-8, lr 1e-3"),
                       ("P5", "(b) particles beat MHA-8, lr 1e-3"), ("P6", "(e) noise makes half droppable")):  # fmt: skip
        r = family[pid]
        lines.append(_row([claim, f"{pid}: {r['what']}", str(r["n"]), _ci(r["d"]), _d80(r["d"]),
                           f"{p_text(r['holm'])} (P1–P6)", verdict(r["d"], r["holm"], r["n"])]))  # fmt: skip
    lines.append(_row(["(e) noise makes half droppable", "P6′: the same, mean of 32 draws", str(len(p6_seeds)),
                       _ci(p6), _d80(p6), f"{p_text(p6.p_value)} (one test)" if p6 else "—",
                       verdict(p6, p6.p_value if p6 else 1.0, len(p6_seeds))]))  # fmt: skip
    for i, r in enumerate(rows):  # P3′–P5′, as in the table above
        n = len(r["seeds"])
        lines.append(_row(["(b) particles beat MHA-8, lr per arm", f"P{3 + i}′: {r['arm']} − mha8 at their lrs",
                           str(n), _ci(r["d"]), _d80(r["d"]), f"{p_text(r['holm'])} (P3′–P5′)",
                           lr_verdict(r, n) if chosen.get(r["arm"]) and chosen.get("mha8")
                           else "left out for the budget: not run" if r["arm"] in _lr.LEFT_OUT
                           else "lr not chosen yet: no verdict"]))  # fmt: skip
    for r in hot:
        n = len(r["seeds"])
        lines.append(_row(["(f) too much diffusion raises the loss", f"{r['id']}: {r['what']} − β = 0", str(n),
                           _ci(r["d"]), _d80(r["d"]), f"{p_text(r['holm'])} (H1–H3)", verdict(r["d"], r["holm"], n)]))  # fmt: skip
    for r in exploratory_rows(primary):
        d = r["d"]
        lines.append(_row([r["claim"] + " (exploratory)", f"`{r['metric']}`, β = 1e-3 − β = 0", str(d.n), _ci(d),
                           _d80(d), f"{p_text(r['holm'])} (sweep table, per metric)",
                           exploratory_verdict(d, r["holm"], d.n, unit=r["unit"])]))  # fmt: skip
    lines.append(VERDICTS_END)
    return "\n".join(lines) + "\n\n" + cost_line(scale)


VERDICTS_START = "<!-- --8<-- [start:verdicts] -->"
VERDICTS_END = "<!-- --8<-- [end:verdicts] -->"
"""The verdict table's snippet markers (pymdownx.snippets sections): the page includes
``issue47_tests.md:verdicts`` at its top, the whole file in its results section."""


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", type=Path, default=SCALE)
    parser.add_argument("--out", type=Path, default=SCALE / "issue47_tests.md")
    args = parser.parse_args(argv)
    text = markdown(args.scale)
    args.out.write_text(text)
    sys.stdout.write(text)


if __name__ == "__main__":
    main()
