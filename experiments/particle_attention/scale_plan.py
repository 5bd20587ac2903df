"""The provisional power plan and cost of the 6 × 256 study (issue 27), from the committed 2 × 64 and 4 × 128 runs.

    python experiments/particle_attention/scale_plan.py      # writes results/scale/plan.md

**Provisional.** The pre-registered rule (docs/experiments/particle_attention.md, "The 6 × 256 study") sizes
the study from the *pilot's* paired sds at 6 × 256. Before the pilot has run, this script applies the same
rule to the paired sds of the same comparisons in the committed smaller runs (the quick sweep, 2 × 64, and
nanoGPT's recipe, 4 × 128; three seeds each): a planning number only, since the sd may change with the
model's size and an sd from 3 seeds has a 95 % interval of 0.52–6.3 times itself.

Cost: per-step time of the 6 × 256 model estimated from the committed 4 × 128 runs' recorded ``wall_time_s``
scaled by the training FLOPs per step (``6·N·tokens`` plus attention and the tied head; the larger matmuls
of 6 × 256 are no less efficient, so this leans high), plus the evaluations, and stated next to the one
measurement of ``benchmarks/lm_step.py`` that exists (if any), with its load.
"""

from __future__ import annotations

import re
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import report  # noqa: E402  (the page's loader: runs by seed, values from config.toml)

from meanfield.studies.stats import paired_difference, pairs_needed  # noqa: E402

OUT = HERE / "results" / "scale" / "plan.md"
BENCH = HERE.parents[1] / "benchmarks" / "results"
DELTA = 0.01
MIN_SEEDS = 8
STEPS, EVALS = 2000, 4  # the study's length and evaluations (scale.toml: eval_every = 500)


def primaries() -> list[tuple[str, str, str, dict, dict]]:
    """(id, comparison, setting, a, b) for every primary comparison with committed analogues."""
    q = {
        "mha": report.load_runs("quick_mha"),
        "0": report.load_runs("quick_m8_beta", **{"optim.beta": "0"}),
        "1e-3": report.load_runs("quick_m8_beta", **{"optim.beta": "0.001"}),
        "cos1e-2": report.load_runs("quick_m8_anneal_1e-2"),
        "m16": report.load_runs("quick_m16", **{"model.d_head": "4", "optim.beta": "0"}),
        "m32": report.load_runs("quick_m32", **{"optim.beta": "0"}),
    }
    n = {
        "mha": report.load_runs("nanogpt_mha"),
        "0": report.load_runs("nanogpt_m8", **{"optim.beta": "0"}),
        "1e-3": report.load_runs("nanogpt_m8_beta", **{"optim.beta": "0.001"}),
    }
    Q, N = "2 × 64 (quick)", "4 × 128 (nanoGPT)"
    return [
        ("P1", "β = 1e-3 vs β = 0, M = 8", Q, q["1e-3"], q["0"]),
        ("P1", "β = 1e-3 vs β = 0, M = 8", N, n["1e-3"], n["0"]),
        ("P2", "cosine 1e-2 → 0 vs β = 0, M = 8", Q, q["cos1e-2"], q["0"]),
        ("P3", "M = 8 (d/M), β = 0 vs MHA-8", Q, q["0"], q["mha"]),
        ("P3", "M = 8 (d/M), β = 0 vs MHA-8", N, n["0"], n["mha"]),
        ("P4", "M = 16 (d/M), β = 0 vs MHA-8", Q, q["m16"], q["mha"]),
        ("P5", "M = 32 (d/M), β = 0 vs MHA-8", Q, q["m32"], q["mha"]),
        ("P6", "drop-half gap (random), β = 1e-3 vs β = 0, M = 8", Q, q["1e-3"], q["0"]),
        ("P6", "drop-half gap (random), β = 1e-3 vs β = 0, M = 8", N, n["1e-3"], n["0"]),
    ]


def sd_table() -> tuple[str, dict[str, int]]:
    rows = [
        "| id | comparison | committed setting | pairs | paired sd | seeds for 0.01 at 80 % power "
        "(`pairs_needed(0.01, sd)`) | the same at α = 0.05/6 (Holm's first step, for information) |",
        "|---|---|---|---|---|---|---|",
    ]
    need: dict[str, int] = {}
    for pid, what, setting, a, b in primaries():
        key = "half_random_gap" if pid == "P6" else "val_loss"
        seeds = sorted(set(a) & set(b))
        if len(seeds) < 2:
            continue
        d = paired_difference([a[s]["final"][key] for s in seeds], [b[s]["final"][key] for s in seeds])
        n = pairs_needed(DELTA, d.sd)
        if pid != "P6":
            need[pid] = max(need.get(pid, 0), n)
        strict = pairs_needed(DELTA, d.sd, alpha=0.05 / 6)
        rows.append(f"| {pid} | {what} | {setting} | {d.n} | {d.sd:.4f} | {n} | {strict} |")
    return "\n".join(rows), need


def flops_per_step(d: int, L: int, T: int, B: int, V: int = 65) -> float:
    """Training FLOPs of one step: 3 × forward, forward per token ``2·12·L·d² + 2·L·T·d + 2·d·V``."""
    return 3 * B * T * (2 * 12 * L * d * d + 2 * L * T * d + 2 * d * V)


def cost() -> tuple[str, float]:
    times = []
    for sweep in ("nanogpt_mha", "nanogpt_m8", "nanogpt_m8_beta"):
        for r in report.load_runs(sweep).values():
            times.append(r["final"]["wall_time_s"] / r["summary"]["steps"])
    step_small = statistics.median(times)
    scale = flops_per_step(256, 6, 128, 16) / flops_per_step(128, 4, 64, 12)
    step = step_small * scale
    # one evaluation: the whole validation split forward (111,488 tokens) + probes (5 losses on 16,384 tokens,
    # importance and diversity: about 2 more), as training-step equivalents (a forward is 1/3 of a step)
    eval_steps = (111_488 + 7 * 16_384) / (16 * 128) / 3
    run_s = step * (STEPS + EVALS * eval_steps)
    lines = [
        f"- committed 4 × 128 runs (context 64, batch 12; {len(times)} runs, one thread, load 2–4 from other "
        f"jobs): median {1e3 * step_small:.1f} ms a step (`wall_time_s / steps`)",
        f"- × {scale:.1f} (training FLOPs per step of 6 × 256, context 128, batch 16, over 4 × 128's) = "
        f"**{step:.2f} s a step** (fp32, one thread; width-d/M arms: the same FLOPs)",
        f"- one run: {STEPS} steps + {EVALS} evaluations (≈ {eval_steps:.0f} step-equivalents each) ≈ "
        f"**{run_s / 60:.0f} min = {run_s / 3600:.2f} CPU-hours**",
    ]
    measured = BENCH / "amd-epyc" / "lm_step.md"
    if measured.is_file():
        text = measured.read_text()
        quick = "--quick" in text.split("\n", 3)[2]
        load = re.search(r"load average \(1 / 5 / 15 min\): ([\d.]+)", text)
        lines.append(
            f"- `benchmarks/results/amd-epyc/lm_step.md` ({'a --quick check, 3 rounds' if quick else 'a measurement'}"
            f", 1-minute load {load.group(1) if load else '?'} at its start): see that file; "
            + ("not used for the estimate (taken under load, too few rounds)" if quick else "compare its time a step with the estimate above")
        )
    return "\n".join(lines), run_s / 3600


def main() -> None:
    table, need = sd_table()
    cost_text, run_h = cost()
    by_family = {
        "the within-architecture primaries P1, P2 (same initialisation, batch order and noise)": max(
            need.get("P1", 0), need.get("P2", 0)
        ),
        "the architecture primaries P3–P5 (another initialisation: only the batch order is shared)": max(
            need.get(p, 0) for p in ("P3", "P4", "P5")
        ),
    }
    seeds_all = max(MIN_SEEDS, *need.values())
    seeds_within = max(MIN_SEEDS, by_family[next(iter(by_family))])
    arms = 6  # MHA-8, p8, p8-b1e-3, p8-cos1e-2, p16, p32
    lines = [
        "<!-- generated by experiments/particle_attention/scale_plan.py; do not edit -->",
        "",
        "**Provisional** (from the committed 2 × 64 and 4 × 128 runs, 3 seeds each; the pilot at 6 × 256 replaces "
        "these sds before the main sweep):",
        "",
        table,
        "",
        "*paired sd: the sd of the per-seed differences (ddof = 1) of the validation loss at the last step "
        "(P6: of the drop-half gap, which is not used to size the study). Seeds: "
        "`meanfield.studies.stats.pairs_needed(0.01, sd)`, noncentral t, two-sided α = 0.05, 80 % power.*",
        "",
        "By the rule (the largest over the validation-loss primaries, at least 8):",
        "",
        *[f"- {name}: **{n}** seeds" for name, n in by_family.items()],
        f"- all primaries: **{seeds_all}** seeds; the within-architecture primaries alone: **{seeds_within}**",
        "",
        "Cost (an estimate from recorded wall clocks, not a measurement at 6 × 256):",
        "",
        cost_text,
        f"- the {arms} primary arms × 3 pilot seeds = {3 * arms} runs ≈ **{3 * arms * run_h:.0f} CPU-hours** "
        f"(≈ {3 * arms * run_h / 2:.0f} h of wall time as two one-thread runs side by side)",
        f"- the primary arms at {seeds_within} seeds: {seeds_within * arms} runs ≈ "
        f"{seeds_within * arms * run_h:.0f} CPU-hours (the pilot's 3 seeds included); at {seeds_all} seeds: "
        f"{seeds_all * arms * run_h:.0f} CPU-hours",
        f"- with 8 seeds and every other arm at 3: the 7 secondary arms (β 1e-5, 1e-4, 1e-2, 3e-2, cosine 1e-3, "
        f"width d/8 at M = 16 and 32, × 1.33 and × 2 the FLOPs) add ≈ "
        f"{3 * run_h * (5 + 4 / 3 + 2):.0f} CPU-hours",
    ]
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"written: {OUT}")


if __name__ == "__main__":
    main()
