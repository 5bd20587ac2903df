"""Particle models over 1 and 2 gloo processes: data parallel against particles sharded over ranks.

``meanfield run experiments/char_lm/config.toml`` (tiny-shakespeare, float32, one torch thread per process) at two
benchmark sizes, and the particle system ``experiments/mean_field/config.toml`` (M = 2^20 particles in R^4, float64),
each a fresh launch, in one run of this script:

- one process;
- ``torchrun --nproc_per_node=2 … --set parallel=data``: each rank half of the batch rows, every parameter
  replicated, one all-reduce of all gradients per step (``P`` numbers);
- ``torchrun --nproc_per_node=2 … --set parallel=particles``: each rank half of the heads of every layer and the
  whole batch, two all-reduces of ``B·T·d`` numbers per particle layer and step (the output forward, the input's
  gradient backward); for the particle system one all-reduce of its ``2 + d`` averages, each rank stepping
  ``M/2`` particles and drawing only their noise (``optim.noise_block``).

Reported: the steps' wall time (``summary.json``'s ``wall_time_s``, evaluation and checkpoints excluded) per step,
the speed-up over one process, the numbers all-reduced per step and rank (from the model), and the final training
loss (the three runs make the same steps up to round-off: ``tests/e2e/test_sharded_particles.py``,
``tests/e2e/test_runs_distributed.py``).

Usage:
    python benchmarks/parallel_lm.py                   # writes benchmarks/results/<machine>/parallel_lm.md
    python benchmarks/parallel_lm.py --smoke --out /tmp/parallel_lm.md
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse  # noqa: E402
import json  # noqa: E402
import shutil  # noqa: E402
import socket  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402

from _common import Provenance, result_path, write_result  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "experiments" / "char_lm" / "config.toml"
LM_CONFIG, SYSTEM_CONFIG = CONFIG, ROOT / "experiments" / "mean_field" / "config.toml"
CASES = {  # name: (config, overrides of its quick preset, launches)
    "LM: d = 64, 2 layers, M = 8 heads, B = 32, T = 64": (
        LM_CONFIG,
        [
            "model.d_model=64",
            "model.n_layers=2",
            "model.n_heads=8",
            "train.batch_size=32",
            "data.block_size=64",
        ],
        (None, "data", "particles"),
    ),
    "LM: d = 128, 2 layers, M = 32 heads of width 16, B = 16, T = 128": (
        LM_CONFIG,
        [
            "model.d_model=128",
            "model.n_layers=2",
            "model.n_heads=32",
            "model.d_head=16",
            "train.batch_size=16",
            "data.block_size=128",
        ],
        (None, "data", "particles"),
    ),
    "particle system: M = 2^20, d = 4 (mean_field)": (
        SYSTEM_CONFIG,
        ["model.n_particles=1048576", "train.eval_every=0"],
        (None, "particles"),
    ),
}


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _launch(folder: Path, config: Path, overrides: list[str], mode: str | None) -> dict:
    args = ["-m", "meanfield", "run", str(config), "--out", str(folder)]
    for o in overrides:
        args += ["--set", o]
    if mode is None:
        command = [sys.executable, *args]
    else:
        command = [
            sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", f"--master_port={_port()}",
            *args, "--set", f"parallel={mode}",
        ]  # fmt: skip
    env = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE", "PYTHONPATH": str(ROOT)}
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT, timeout=1800)
    if done.returncode:
        raise RuntimeError(f"{' '.join(command)} failed:\n{done.stderr[-3000:]}")
    return json.loads((folder / "summary.json").read_text())


def _numbers_moved(config: Path, overrides: list[str], mode: str | None) -> int:
    """Numbers all-reduced per step and rank: all gradients (data), 2·B·T·d per particle layer (particles;
    for the particle system its 2 + d averages)."""
    sys.path.insert(0, str(ROOT))
    from meanfield import config as _config

    resolved = _config.resolve(_config.load_toml(config), "quick", list(overrides))
    model = resolved["model"]
    if resolved["task"] == "mean_field":
        return 0 if mode is None else 2 + model["d"]
    B, T, d, L = (
        resolved["train"]["batch_size"],
        resolved["data"]["block_size"],
        model["d_model"],
        model["n_layers"],
    )
    if mode == "particles":
        return 2 * L * B * T * d
    if mode == "data":
        from meanfield.nn import TransformerLM

        net = TransformerLM(  # tiny-shakespeare's 65 characters
            65, T, d, L, model["n_heads"], "particle", d_head=model.get("d_head")
        )
        return sum(p.numel() for p in net.parameters())
    return 0


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument(
        "--smoke", action="store_true", help="a few steps of the first size: checks that it runs"
    )
    parser.add_argument("--out", default=None, help="results file (default results/<machine>/parallel_lm.md)")
    args = parser.parse_args(argv)
    provenance = Provenance.start(__file__, argv)
    steps = 4 if args.smoke else args.steps
    cases = dict(list(CASES.items())[:1]) if args.smoke else CASES
    lines = [
        "| model | launch | ms per step | speed-up | all-reduced per step and rank | final train loss |",
        "|---|---|---:|---:|---:|---:|",
    ]
    tmp = Path(tempfile.mkdtemp(prefix="parallel_lm_"))
    try:
        for name, (config, size, launches) in cases.items():
            overrides = [
                *size, "threads=1", f"train.steps={steps}", f"train.log_every={steps}", "train.eval_every=0",
                "train.checkpoint_every=0", "train.figures=false", "train.tensorboard=false",
                *(["data.eval_blocks=4"] if config == LM_CONFIG else []),
            ]  # fmt: skip
            base = None
            for mode in launches:
                label = "1 process" if mode is None else f"2 ranks, {mode}"
                summary = _launch(tmp / f"{len(lines)}", config, overrides, mode)
                ms = 1e3 * summary["wall_time_s"] / summary["step"]
                base = ms if base is None else base
                moved = _numbers_moved(config, size, mode)
                line = (
                    f"| {name} | {label} | {ms:.1f} | {base / ms:.2f} | "
                    f"{moved:,} ({moved * (8 if config == SYSTEM_CONFIG else 4) / 2**20:.2f} MiB) | {summary['final']['train_loss']:.5f} |"
                )
                lines.append(line)
                print(line, flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    text = "\n".join(
        [
            "# Particle models on 1 and 2 processes: data parallel against sharded particles",
            "",
            f"One torch thread per process; the LM in float32, the particle system in float64; {steps} steps per "
            "launch (the steps' wall time only; on a shared machine two processes also compete with everything "
            "else running).",
            "",
            *lines,
            "",
            "Speed-up: one process's time per step over this launch's (ideal 2). The runs of one model make the "
            "same steps up to round-off (their final losses agree to float32 round-off).",
            "",
        ]
    )
    out = write_result(args.out or result_path("parallel_lm"), text, provenance)
    print(f"written: {out}")
    return text


if __name__ == "__main__":
    main()
