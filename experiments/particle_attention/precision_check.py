"""Does a faster way of training leave the science unchanged? float32 against bf16 autocast or ``torch.compile``,
paired over seeds (issue 27: "show that its loss curves agree with fp32 within seed noise before the study
uses it; otherwise keep fp32").

For each seed, one arm of ``scale.toml`` is trained twice, identically but for the alternative (same
initialisation, batch order and noise streams: the seed fixes them all): once with the built-in ``lm`` task in
float32, once through ``fast_lm.py`` (``model.autocast = "bf16"`` or ``model.compile = true``). Compared, paired
by seed (``meanfield.studies.stats.paired_difference``):

- the final validation loss (the study's primary metric; evaluated in float32 in both runs);
- the training loss averaged over the last third of the logged curve;
- the whole curve: at every logged step, the mean paired difference of the training loss against the
  between-seed sd of the float32 runs at that step (seed noise), and the largest ratio of the two.

Verdict (fixed before running): the alternative leaves the science unchanged when the 95 % interval of the
paired difference of the final validation loss lies inside ``±margin`` (default 0.01 nats, the study's
target resolution: an equivalence test, two one-sided tests at 2.5 % each) and the curve's mean paired
difference stays below the between-seed sd at every logged step after the first. "Not shown" otherwise
(too few seeds to exclude a difference of ``margin``), "changed" when the interval excludes 0 and its mean
exceeds ``margin``.

    python experiments/particle_attention/precision_check.py --size tiny --alt bf16     # minutes (done now)
    python experiments/particle_attention/precision_check.py --size study --alt bf16 --seeds 0 1 2 3   # hours

``--size tiny`` is a 2 × 32 model (context 32, batch 8, 400 steps): it checks the machinery and shows the
size of the effect on a small model, not on the study's; ``--size study`` is the study's 6 × 256 with
``--steps`` (default 500). The table goes to ``results/scale/precision_<alt>_<size>.md``; the run folders to
``--runs`` (default a temporary folder).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # fast_lm

import fast_lm  # noqa: E402

from meanfield.runs import run  # noqa: E402
from meanfield.studies.stats import cost_text, number_text, paired_cell, paired_difference  # noqa: E402

CONFIG = HERE / "scale.toml"
RESULTS = HERE / "results" / "scale"

SIZES = {
    "tiny": (
        "smoke",
        [
            "model.d_model=32",
            "model.n_layers=2",
            "model.n_heads=8",
            "data.block_size=32",
            "data.eval_blocks=64",
            "data.probe_blocks=8",
            "data.min_context=8",
            "train.batch_size=8",
            "train.log_every=20",
            "train.eval_every=0",
            "train.checkpoint_every=0",
        ],
    ),
    "study": (None, ["train.eval_every=0", "train.checkpoint_every=0"]),
}


def overrides_for(alt: str) -> list[str]:
    if alt == "bf16":
        return ["task=fast_lm:TASK", "model.autocast=bf16"]
    if alt == "compile":
        return ["task=fast_lm:TASK", "model.compile=true"]
    raise ValueError(f"--alt must be bf16 or compile, got {alt!r}")


def curve(folder: Path) -> dict[int, float]:
    lines = [json.loads(x) for x in (folder / "metrics.jsonl").read_text().splitlines() if x.strip()]
    return {r["step"]: r["train_loss"] for r in lines if "train_loss" in r}


def final(folder: Path) -> dict:
    return json.loads((folder / "summary.json").read_text())


def num(x: float) -> str:
    """4 decimals, or 2 significant digits in scientific notation below 1e-3 (round-off sized differences)."""
    return f"{x:+.4f}" if abs(x) >= 1e-3 or x == 0 else f"{x:+.1e}"


def compare(runs: dict[int, dict[str, Path]], margin: float) -> tuple[str, str]:
    """The table and the verdict of the paired comparison alternative − float32."""
    seeds = sorted(runs)
    val = {k: [final(runs[s][k])["final"]["val_loss"] for s in seeds] for k in ("fp32", "alt")}
    curves = {k: [curve(runs[s][k]) for s in seeds] for k in ("fp32", "alt")}
    steps = sorted(set.intersection(*(set(c) for c in curves["fp32"] + curves["alt"])))
    late = [t for t in steps if t > steps[-1] / 3 * 2]
    tail = {k: [float(np.mean([c[t] for t in late])) for c in curves[k]] for k in ("fp32", "alt")}
    d_val = paired_difference(val["alt"], val["fp32"])
    d_tail = paired_difference(tail["alt"], tail["fp32"])
    ratios = []
    for t in steps[1:]:
        a = np.array([c[t] for c in curves["alt"]])
        b = np.array([c[t] for c in curves["fp32"]])
        seed_sd = float(np.std(b, ddof=1)) if len(b) > 1 else math.nan
        ratios.append((t, float(np.mean(a - b)), seed_sd))
    worst = max(ratios, key=lambda r: abs(r[1]) / r[2] if r[2] > 0 else math.inf)
    worst_ratio = abs(worst[1]) / worst[2] if worst[2] > 0 else math.inf
    seed_sd_val = float(np.std(val["fp32"], ddof=1))
    inside = -margin < d_val.lo and d_val.hi < margin
    if inside and worst_ratio < 1:
        verdict = (
            f"**unchanged**: the 95 % interval of the final validation loss difference lies inside ±{margin:g} "
            f"nats and the curves' mean paired difference stays below the seed sd at every logged step"
        )
    elif (d_val.lo > 0 or d_val.hi < 0) and abs(d_val.mean) > margin:
        verdict = f"**changed**: the final validation loss differs by more than {margin:g} nats (interval excludes 0)"
    else:
        verdict = (
            f"**not shown**: with {len(seeds)} seeds the interval ({number_text(d_val.lo, 4, sign=True)} – "
            f"{number_text(d_val.hi, 4, sign=True)}) is not inside "
            f"±{margin:g} nats"
            + (
                ""
                if worst_ratio < 1
                else f", or the curves differ by more than the seed sd at step {worst[0]}"
            )  # fmt: skip
        )
    rows = [
        "| quantity | float32 (mean over seeds) | alternative | paired Δ = alt − fp32 (95 % CI), p (paired t) "
        "| paired sd | seed sd of float32 |",
        "|---|---|---|---|---|---|",
        f"| final val loss (nats) | {np.mean(val['fp32']):.4f} | {np.mean(val['alt']):.4f} | {paired_cell(d_val)} "
        f"| {num(d_val.sd)[1:]} | {seed_sd_val:.4f} |",
        f"| train loss, mean over steps {late[0]}–{late[-1]} | {np.mean(tail['fp32']):.4f} | {np.mean(tail['alt']):.4f} "
        f"| {paired_cell(d_tail)} | {num(d_tail.sd)[1:]} | {float(np.std(tail['fp32'], ddof=1)):.4f} |",
        "",
        "Per seed (val loss fp32 → alt): "
        + ", ".join(f"{s}: {a:.4f} → {b:.4f}" for s, a, b in zip(seeds, val["fp32"], val["alt"])),
        "",
        f"Curve: at the {len(ratios)} logged steps after the first, the largest |mean paired Δ train loss| / "
        f"seed sd is {worst_ratio:.2g} (step {worst[0]}: Δ {num(worst[1])}, seed sd {worst[2]:.4f}).",
    ]
    return "\n".join(rows), verdict


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--alt", choices=("bf16", "compile"), default="bf16")
    parser.add_argument("--size", choices=sorted(SIZES), default="tiny")
    parser.add_argument("--arm", default="p8-b1e-3", help="an arm preset of scale.toml (default p8-b1e-3)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3])
    parser.add_argument("--steps", type=int, default=None, help="train.steps (default: 400 tiny, 500 study)")
    parser.add_argument("--margin", type=float, default=0.01, help="equivalence margin, nats (default 0.01)")
    parser.add_argument("--runs", type=Path, default=None, help="run folders (default: a temporary folder)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.alt == "bf16" and not fast_lm.bf16_supported():
        raise SystemExit("this CPU has no bf16 instructions (avx512_bf16 / amx_bf16): nothing to check")
    size_preset, size_overrides = SIZES[args.size]
    steps = args.steps or (400 if args.size == "tiny" else 500)
    base = [*size_overrides, f"train.steps={steps}"]
    preset = "+".join(p for p in (size_preset, args.arm) if p)
    started = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        root = args.runs or Path(tmp)
        runs: dict[int, dict[str, Path]] = {}
        for seed in args.seeds:
            runs[seed] = {}
            for kind, extra in (("fp32", []), ("alt", overrides_for(args.alt))):
                folder = root / f"{args.alt}-{args.size}" / f"{kind}_seed={seed}"
                if not (folder / "summary.json").exists() or final(folder)["status"] != "finished":
                    run(CONFIG, folder, preset=preset, overrides=[*base, f"seed={seed}", *extra], quiet=True,
                        resume=folder.exists())  # fmt: skip
                runs[seed][kind] = folder
            print(f"seed {seed} done ({time.time() - started:.0f} s)", flush=True)
        table, verdict = compare(runs, args.margin)
        wall = sum(final(f)["wall_clock_s"] for r in runs.values() for f in r.values())
    command = shlex.join(
        ["python", "experiments/particle_attention/precision_check.py", *(argv or sys.argv[1:])]
    )
    text = "\n".join(
        [
            f"# Science unchanged? float32 against {args.alt} ({args.size} size, arm {args.arm})",
            "",
            f"`{command}` — {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(started))}, load average "
            f"{os.getloadavg()[0]:.1f} at the end; {len(args.seeds)} seeds × 2 runs, {steps} steps each, "
            f"{cost_text(wall)} of runs in all (one thread each). Preset `{preset}` of `scale.toml`, overrides "
            f"`{' '.join(base)}`.",
            "",
            table,
            "",
            f"Verdict (margin ±{args.margin:g} nats, fixed before running): {verdict}.",
            "",
        ]
    )
    out = args.out or RESULTS / f"precision_{args.alt}_{args.size}.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    print(text)
    print(f"written: {out}")


if __name__ == "__main__":
    main()
