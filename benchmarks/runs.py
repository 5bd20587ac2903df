"""What the run machinery costs: ``meanfield.runs.run`` against a bare training loop of the same steps.

Both build the same model, batch sampler and ``Langevin`` optimizer from one configuration (the char-level
LM of ``experiments/char_lm/config.toml``, quick model, or the teacher–student smoke model) and take the
same ``--steps`` steps. The bare loop does only ``next_batch, zero_grad, loss, backward, step, float(loss)``;
the run adds the progress bar (off: ``quiet``), a metrics line every 10 steps (with the optimizer's
statistics), two checkpoints, the summary, and optionally TensorBoard events. No evaluation and no figure
in either (their cost is the model's, not the machinery's). Timed as whole calls, build included, in a
random order per round; the table gives medians over rounds and the median of the per-round ratios.

Usage:
    python benchmarks/runs.py                      # prints the table, writes benchmarks/results/<machine>/runs.md
    python benchmarks/runs.py --rounds 2 --steps 20 --out /tmp/runs.md   # smoke
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse  # noqa: E402
import random  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402
from _common import Provenance, result_path, write_result  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from meanfield import config as _config  # noqa: E402
from meanfield.runs import Checkpoints, build_optimizer, check_config, load_config, run  # noqa: E402
from meanfield.tasks import get_task  # noqa: E402

CONFIGS = {
    "char_lm": (ROOT / "experiments" / "char_lm" / "config.toml", "quick"),
    "teacher_student": (ROOT / "experiments" / "teacher_student" / "config.toml", "quick"),
}


def bare(config: dict) -> float:
    """Seconds for build + the bare loop."""
    start = time.perf_counter()
    cfg = check_config(config)
    task = get_task(cfg.task)
    exp = task.build(
        _config.from_dict(task.Data, cfg.data, "data"),
        _config.from_dict(task.Model, cfg.model, "model"),
        batch_size=cfg.train.batch_size,
        seed=cfg.seed,
        device=torch.device("cpu"),
        dtype=torch.float32,
    )
    opt = build_optimizer(exp.model, cfg)
    for _ in range(cfg.train.steps):
        batch = exp.next_batch()
        opt.zero_grad(set_to_none=True)
        loss = exp.loss(batch)
        loss.backward()
        opt.step()
        float(loss.detach())
    return time.perf_counter() - start


def machinery(config: dict, tensorboard: bool) -> tuple[float, int]:
    """Seconds for ``run`` (and the size of its last checkpoint in bytes)."""
    config = _config.merge(config, {"train": {"tensorboard": tensorboard}})
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        run(config, Path(tmp) / "run", quiet=True)
        spent = time.perf_counter() - start
        checkpoints = Checkpoints(Path(tmp) / "run" / "checkpoints")
        size = checkpoints.path(checkpoints.latest()).stat().st_size
    return spent, size


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", choices=sorted(CONFIGS), default="char_lm")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--out", default=None, help="results file (default results/<machine>/runs.md)")
    args = parser.parse_args(argv)
    provenance = Provenance.start(__file__, argv)
    path, preset = CONFIGS[args.config]
    overrides = [
        f"train.steps={args.steps}",
        "train.log_every=10",
        "train.eval_every=0",
        f"train.checkpoint_every={max(1, args.steps // 2)}",
        "train.figures=false",
    ]
    config = load_config(path, preset, overrides)
    if args.config == "char_lm":
        config["data"]["eval_blocks"] = 1  # the final evaluation: one batch of blocks
    candidates = {
        "bare loop": lambda: (bare(config), 0),
        "meanfield run": lambda: machinery(config, tensorboard=False),
        "meanfield run + TensorBoard": lambda: machinery(config, tensorboard=True),
    }
    times: dict[str, list[float]] = {k: [] for k in candidates}
    size = 0
    rng = random.Random(0)
    for r in range(args.rounds + 1):  # round 0 warms up
        order = list(candidates)
        rng.shuffle(order)
        for name in order:
            spent, bytes_ = candidates[name]()
            size = max(size, bytes_)
            if r:
                times[name].append(spent)
    base = times["bare loop"]
    lines = [
        f"# Run machinery overhead ({args.config}, {args.steps} steps)",
        "",
        "The bare loop is the floor: the same steps of the same model, optimizer and batches, nothing else.",
        "",
        "| | median s | ms / step | vs bare loop (median of per-round ratios) |",
        "|---|---|---|---|",
    ]
    for name, ts in times.items():
        ratio = statistics.median(t / b for t, b in zip(ts, base))
        med = statistics.median(ts)
        lines.append(f"| {name} | {med:.3f} | {1e3 * med / args.steps:.2f} | {ratio:.3f}× |")
    lines += ["", f"Checkpoint size: {size / 1e6:.2f} MB. Build time is included in every row."]
    text = "\n".join(lines) + "\n"
    print(text)
    print(f"written: {write_result(args.out or result_path('runs'), text, provenance)}")


if __name__ == "__main__":
    main()
