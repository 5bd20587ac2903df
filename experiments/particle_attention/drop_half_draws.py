"""The drop-half gap over many random draws, from the final checkpoints of the 6 × 256 study (exploratory).

    python experiments/particle_attention/drop_half_draws.py             # every finished primary run checkpointed here
    python experiments/particle_attention/drop_half_draws.py --draws 32 --folder runs/scale-smoke/primary
    python experiments/particle_attention/drop_half_draws.py --folder …/secondary --every 120 &   # beside a sweep

**Why.** P6's pre-registered metric, ``half_random_gap``, is the probe loss after *one* seeded draw of half of
every layer's particles minus the undamaged probe loss. At 6 × 256 the pilot's paired sd of P6 was 0.93 nats
(2 pairs; 0.04–0.09 at 2 × 64), so at n = 8 it detects only differences of about a nat. Claim (e) is about the
expected gap over the draw, ``E_S[ℓ(S) − ℓ]``; one draw estimates it with the draw-to-draw spread on top of the
seed-to-seed one. This script measures ``K`` draws per run: their mean (the exploratory metric) and their sd
(how much of P6's spread is the draw). Added on 2026-12-02 after the pilot's paired sds (never its
differences) were seen: exploratory, not in the pre-registered family.

For each finished run whose last checkpoint is the final step (checkpoints are not committed: only runs that
finished on this machine qualify), draw 0 is the run's own draw (generator ``derive_seed(seed, "drop")``, the
task's) and must reproduce its logged ``half_random_gap`` — a check that the model, the probe blocks and the
draw are the run's; draws ``k ≥ 1`` use ``derive_seed(seed, f"drop/{k}")``. Results land, one small JSON a run,
in ``<sweep folder>/../drop_half/<stage>/<run folder>.json`` (for the study ``results/scale/drop_half/primary/``),
written atomically; a run already measured with the same draws is skipped; they are committed with the runs.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

import torch
from tqdm import tqdm

from meanfield import data as _data
from meanfield._io import write_json_atomic
from meanfield.nn import head_metrics as _lm
from meanfield.nn.transformer import drop_particles
from meanfield.runs import Checkpoints, load_model
from meanfield.seeds import derive_seed
from meanfield.tasks.language import lm_splits

HERE = Path(__file__).resolve().parent
FOLDER = HERE / "results" / "scale" / "primary"


def draw_generator(seed: int, k: int) -> torch.Generator:
    """Draw ``k``'s generator: draw 0 is the task's own (``derive_seed(seed, "drop")``)."""
    return torch.Generator().manual_seed(derive_seed(seed, "drop" if k == 0 else f"drop/{k}"))


def probe_blocks(data, batch_size: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The task's probe batches: the first ``probe_blocks`` blocks of the evaluation split, ``batch_size`` a
    batch (``meanfield.tasks.language``: ``mean_loss(model, data.probe_blocks)``)."""
    if data.dataset != "tiny_shakespeare":
        raise ValueError(f"drop_half_draws reads tiny-shakespeare runs, not {data.dataset!r}")
    corpus = _data.tiny_shakespeare(data.root or None)
    held_out = lm_splits(corpus, data)[1]
    tokens = held_out[: data.probe_blocks * data.block_size + 1]  # exactly probe_blocks blocks
    return list(_data.iter_blocks(tokens, data.block_size, batch_size))


@torch.no_grad()
def measure(run: Path, draws: int) -> dict:
    """The drop-half gaps of ``draws`` random draws of one run's final model.

    Returns:
        ``{"run", "seed", "step", "draws", "gaps", "mean", "sd", "logged"}``: ``gaps[k] = ℓ(S_k) − ℓ`` on the
        probe blocks, ``mean``/``sd`` over the draws, ``logged`` the run's own ``half_random_gap``.
    """
    trained = load_model(run)
    model, cfg, data = trained.model, trained.config, trained.data
    blocks = probe_blocks(data, cfg.train.batch_size)
    base = _lm.token_mean_loss(model, blocks)
    first = (
        blocks[0][0][: data.probe_blocks],
        blocks[0][1][: data.probe_blocks],
    )  # the task's idx (unused by "random")
    particles = _lm.as_particle_model(model)
    gaps = []
    for k in tqdm(range(draws), desc=run.name, leave=False, disable=None):
        half = drop_particles(
            particles, 0.5, "random", idx=first[0], targets=first[1], generator=draw_generator(cfg.seed, k)
        )
        gaps.append(_lm.token_mean_loss(half, blocks) - base)
    summary = json.loads((run / "summary.json").read_text())
    return {
        "run": run.name,
        "seed": cfg.seed,
        "step": int(summary["step"]),
        "draws": draws,
        "gaps": gaps,
        "mean": statistics.fmean(gaps),
        "sd": statistics.stdev(gaps) if draws > 1 else math.nan,
        "logged": summary["final"].get("half_random_gap"),
    }


def is_final(run: Path) -> bool:
    """Whether ``run`` has finished and its latest checkpoint is its final step (raises on an unreadable
    ``summary.json``)."""
    summary = run / "summary.json"
    if not summary.is_file():
        return False
    s = json.loads(summary.read_text())
    return s.get("status") == "finished" and Checkpoints(run / "checkpoints").latest() == int(s["step"])


def run_folders(folder: Path) -> list[Path]:
    """The run folders under a sweep folder, sorted (none if it does not exist yet)."""
    return sorted(p for p in folder.iterdir() if p.is_dir()) if folder.is_dir() else []


def measure_folder(folder: Path, out: Path, draws: int, failed: dict[str, str] | None = None) -> list[str]:
    """Measure every eligible run of ``folder`` not yet measured with ``draws`` draws into ``out``.

    Args:
        failed: runs that could not be measured in an earlier pass of this process, ``{name: why}``: skipped
            (a ``--every`` follower reports a damaged run once instead of reloading it every pass); this pass's
            failures are added. A fresh process (the sweep's last pass) tries them again.

    Returns:
        One line per run whose draw 0 does not reproduce its logged gap or that could not be measured (an
        exception anywhere: an unreadable summary, a damaged checkpoint, a model that no longer loads); the
        other runs are measured all the same (empty: all agree).
    """
    failed = {} if failed is None else failed
    bad = []
    for run in run_folders(folder):
        if run.name in failed:
            continue
        path = out / f"{run.name}.json"
        try:
            if not is_final(run) or (path.is_file() and json.loads(path.read_text()).get("draws") == draws):
                continue
            result = measure(run, draws)
        except Exception as exc:  # one run's failure must not end the pass (nor a --every follower)
            failed[run.name] = f"{run.name}: could not be measured: {type(exc).__name__}: {exc}"
            bad.append(failed[run.name])
            continue
        if result["logged"] is not None and not math.isclose(
            result["gaps"][0], result["logged"], abs_tol=1e-5
        ):
            bad.append(
                f"{run.name}: draw 0 gives {result['gaps'][0]:.6f}, the run logged {result['logged']:.6f}"
            )
        write_json_atomic(path, result)
        print(f"{run.name}: mean gap {result['mean']:.4f} (sd over {draws} draws {result['sd']:.4f}); "
              f"draw 0 {result['gaps'][0]:.4f} vs logged {result['logged']}", flush=True)  # fmt: skip
    return bad


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--folder", type=Path, default=FOLDER, help="a sweep folder (default: the primary stage)"
    )
    parser.add_argument("--out", type=Path, default=None, help="default FOLDER/../drop_half/<FOLDER's name>")
    parser.add_argument(
        "--draws", type=int, default=32, help="random draws per run (default 32; draw 0 is the run's)"
    )
    parser.add_argument(
        "--every",
        type=float,
        default=None,
        metavar="SECONDS",
        help="repeat the pass every SECONDS until stopped (beside a running sweep: each run is measured "
        "minutes after it finishes, while its checkpoints are on the machine)",
    )
    args = parser.parse_args(argv)
    if args.draws < 2:
        parser.error(f"--draws must be at least 2 (a mean and an sd over draws), got {args.draws}")
    if args.every is not None and not args.every > 0:
        parser.error(f"--every must be a positive number of seconds, got {args.every}")
    out = args.out or args.folder.parent / "drop_half" / args.folder.name
    if args.every is not None:
        torch.set_num_threads(1)  # beside a sweep's runs: take one core at most
    failed: dict[str, str] = {}  # runs this process could not measure: not retried on every --every pass
    while True:
        bad = measure_folder(args.folder, out, args.draws, failed)
        if bad:
            print("runs not measured, or whose draw 0 does not reproduce the run's own measurement:\n  "
                  + "\n  ".join(bad), file=sys.stderr, flush=True)  # fmt: skip
        if args.every is None:
            return 1 if bad else 0
        time.sleep(args.every)


if __name__ == "__main__":
    sys.exit(main())
