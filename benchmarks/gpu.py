"""Everything that needs a GPU, in one call: the CUDA tests, the GPU rows of the benchmarks, one point of each
experiment's ``full`` preset. Results go to ``benchmarks/results/`` with the device in their names.

Stages, each a subprocess with its own time limit, inside one overall budget (``--budget``, default 450 s,
so the whole script stays under 8 minutes on an H200; a stage that would start with less than 20 s left is
skipped and says so):

1. the device: name, memory, capability, torch and CUDA versions, the TF32 flags (printed and written);
2. ``pytest -m cuda tests/``: the CUDA item of every device-parametrised test (``tests/conftest.py``);
3. ``benchmarks/sde.py --device cuda``: the Euler–Maruyama step at M·d = 10⁶ … 10⁸ as numbers/s and as a
   fraction of the memory bandwidth, with the noise draw's share;
4. ``benchmarks/optim.py --device cuda``: the Langevin step against fused Adam (20M parameters);
5. ``benchmarks/attention.py --device cuda``: ParticleAttention against multi-head attention;
6. one point of each ``experiments/*/config.toml`` at ``--preset full`` on ``device = "cuda"``, its steps
   capped (``train.steps``) so that it takes seconds: throughput and the metrics reached (not the paper
   numbers, which need the full step count).

``benchmarks/results/gpu-<device>.md`` lists every stage with its status, time and file. Safe to rerun:
results are replaced atomically, run folders live in a temporary folder that is removed.

Without CUDA (this machine, CI) the script runs end to end in seconds as a **dry run**: it says that CUDA is
not available, skips the CUDA tests, and runs every benchmark and experiment stage on the CPU at smoke sizes
(``--smoke`` / ``--preset smoke``), writing into a temporary folder (``--results`` to keep them), never over
the committed results. ``--dry-run`` forces that mode on a GPU machine too.

Usage::

    python benchmarks/gpu.py                      # on the GPU machine (or a dry run here)
    python benchmarks/gpu.py --bundle "$OUT"      # also pack the results into $OUT/gpu-results.tar.gz
    bash benchmarks/gpu.sh                        # the same, after installing carried wheels (see docs)
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse  # noqa: E402
import datetime  # noqa: E402
import json  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tarfile  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402
from _common import device_description, device_slug, machine, write_result  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"
RESULTS = BENCH / "results"
RESERVE_S = 20.0
"""A stage is not started with less than this left of the budget."""

STEPS = {"teacher_student": 2000, "char_lm": 300, "particle_attention": 300}
"""``train.steps`` of each experiment's ``full`` point on the GPU (seconds each on an H200); others: 200."""


@dataclass
class Stage:
    name: str
    status: str = "not run"
    seconds: float = 0.0
    files: list[str] = field(default_factory=list)
    note: str = ""


class Budget:
    def __init__(self, seconds: float) -> None:
        self.end = time.perf_counter() + seconds

    def left(self) -> float:
        return self.end - time.perf_counter()


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH", "")]))
    env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _run(stage: Stage, argv: list[str], budget: Budget, cap: float, log: list[str]) -> str:
    """Run ``argv`` from the repository root within ``min(cap, budget left − reserve)`` seconds; record the
    outcome on ``stage``; return the output (stdout and stderr)."""
    limit = min(cap, budget.left() - RESERVE_S)
    if limit <= 0:
        stage.status = "skipped: the time budget is spent"
        print(f"[{stage.name}] {stage.status}", flush=True)
        return ""
    print(f"[{stage.name}] $ {' '.join(argv)}   (limit {limit:.0f} s)", flush=True)
    start = time.perf_counter()
    try:
        done = subprocess.run(
            argv, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=limit, check=False
        )
        output, code = done.stdout + done.stderr, done.returncode
        stage.status = "ok" if code == 0 else f"failed (exit {code})"
    except subprocess.TimeoutExpired as error:
        output = (error.stdout or b"").decode() if isinstance(error.stdout, bytes) else (error.stdout or "")
        stage.status = f"timed out after {limit:.0f} s"
    stage.seconds += time.perf_counter() - start
    print(output[-4000:], flush=True)
    print(f"[{stage.name}] {stage.status} in {stage.seconds:.0f} s", flush=True)
    log.append(f"## {stage.name}: {stage.status}\n$ {' '.join(argv)}\n{output[-20000:]}\n")
    return output


def device_header(device: torch.device) -> str:
    lines = [
        f"host: {machine()}",
        f"device: {device_description(device)}",
        f"torch {torch.__version__}, CUDA available: {torch.cuda.is_available()}"
        + (
            f", {torch.cuda.device_count()} device(s), CUDA {torch.version.cuda}"
            if torch.cuda.is_available()
            else ""
        ),
        f"TF32: torch.backends.cuda.matmul.allow_tf32 = {torch.backends.cuda.matmul.allow_tf32}, "
        f"torch.backends.cudnn.allow_tf32 = {torch.backends.cudnn.allow_tf32}, "
        f"float32 matmul precision {torch.get_float32_matmul_precision()!r} (meanfield never changes them)",
    ]
    return "\n".join(lines)


def experiment_points(
    budget: Budget,
    out_dir: Path,
    runs_dir: Path,
    slug: str,
    dry: bool,
    log: list[str],
    only: list[str] | None,
) -> Stage:
    stage = Stage("experiments")
    rows = []
    configs = sorted(ROOT.glob("experiments/*/config.toml"))
    if only:
        configs = [c for c in configs if c.parent.name in only]
    for config in configs:
        name = config.parent.name
        steps = STEPS.get(name, 200)
        if dry:
            argv_tail = ["--preset", "smoke", "--set", "device=cpu", "--set", "train.steps=4"]
        else:
            argv_tail = ["--preset", "full", "--set", "device=cuda", "--set", f"train.steps={steps}"]
            argv_tail += ["--set", f"train.checkpoint_every={steps}", "--set", f"train.eval_every={steps}"]
        folder = runs_dir / name
        shutil.rmtree(folder, ignore_errors=True)
        sub = Stage(f"experiment {name}")
        argv = [
            sys.executable,
            "-m",
            "meanfield.cli",
            "run",
            str(config),
            *argv_tail,
            "--out",
            str(folder),
            "--quiet",
        ]
        _run(sub, argv, budget, 150.0, log)
        stage.seconds += sub.seconds
        summary_path = folder / "summary.json"
        summary = json.loads(summary_path.read_text()) if summary_path.is_file() else {}
        unit = summary.get("unit", "samples")
        final = summary.get("final", {})
        numbers = [
            (k, v) for k, v in final.items() if isinstance(v, (int, float)) and not isinstance(v, bool)
        ]
        shown = ", ".join(f"{k} = {v:.4g}" for k, v in numbers[:6])  # the first six (losses come first)
        rate = summary.get(f"{unit}_per_s")
        rows.append(
            f"| {name} | {sub.status} | {summary.get('step', '—')} | "
            f"{summary.get('wall_time_s', float('nan')):.2f} | {f'{rate:,.0f} {unit}/s' if rate else '—'} | "
            f"{shown or '—'} |"
        )
    text = "\n".join(
        [
            f"# One point of each experiment's {'smoke (dry run)' if dry else 'full'} preset on {slug}",
            "",
            f"- {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC; "
            + (
                "`--preset smoke --set device=cpu --set train.steps=4`"
                if dry
                else "`meanfield run experiments/<name>/config.toml --preset full --set device=cuda --set train.steps=N "
                "--set train.checkpoint_every=N --set train.eval_every=N`"
            ),
            "- the steps are capped (N below): throughput and the metrics reached, not the full runs' results",
            "",
            "| experiment | status | steps | wall s (steps) | throughput | final metrics |",
            "|---|---|---|---|---|---|",
            *rows,
            "",
        ]
    )
    path = write_result(out_dir / f"gpu-{slug}-runs.md", text)
    stage.files.append(str(path))
    failed = [r for r in rows if "| ok |" not in r]
    stage.status = "ok" if not failed else f"{len(failed)} of {len(rows)} failed"
    print(text, flush=True)
    return stage


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--budget", type=float, default=450.0, help="seconds for all stages (default 450)")
    parser.add_argument(
        "--dry-run", action="store_true", help="the CPU smoke mode even where CUDA is available"
    )
    parser.add_argument(
        "--results",
        type=Path,
        default=None,
        help="results folder (default benchmarks/results; a temporary folder in a dry run)",
    )
    parser.add_argument("--bundle", type=Path, default=None, help="also write BUNDLE/gpu-results.tar.gz")
    parser.add_argument(
        "--skip", nargs="*", default=[], choices=["tests", "sde", "optim", "attention", "experiments"]
    )
    parser.add_argument(
        "--experiments", nargs="*", default=None, help="only these experiments (folder names)"
    )
    args = parser.parse_args(argv)
    started = time.perf_counter()
    budget = Budget(args.budget)
    cuda = torch.cuda.is_available()
    dry = args.dry_run or not cuda
    device = torch.device("cuda" if cuda and not dry else "cpu")
    slug = device_slug(device) if not dry else "cpu-dry-run"
    scratch = Path(tempfile.mkdtemp(prefix="meanfield-gpu-"))
    out_dir = args.results or (scratch / "results" if dry else RESULTS)
    out_dir.mkdir(parents=True, exist_ok=True)
    header = device_header(device)
    print(header, flush=True)
    if dry:
        print(
            "CUDA is not available here" if not cuda else "--dry-run",
            "→ DRY RUN on the CPU: the CUDA tests are skipped, every benchmark and experiment stage runs at "
            f"smoke sizes, results go to {out_dir} (the committed results are not touched)",
            flush=True,
        )
    log: list[str] = [f"# gpu.py log\n\n{header}\n"]
    stages: list[Stage] = []
    py = sys.executable

    if "tests" not in args.skip:
        stage = Stage("CUDA tests")
        if dry:
            stage.status = "skipped: CUDA is not available (pytest -m cuda would only report skips)"
            print(f"[{stage.name}] {stage.status}", flush=True)
        else:
            output = _run(
                stage,
                [py, "-m", "pytest", "-m", "cuda", "-q", "-p", "no:cacheprovider", "-rfEsx", "tests/"],
                budget,
                180.0,
                log,
            )
            path = write_result(
                out_dir / f"gpu-{slug}-tests.txt",
                f"{header}\n\n$ pytest -m cuda -q tests/\n\n{output[-30000:]}",
            )
            stage.files.append(str(path))
        stages.append(stage)

    benches = {
        "sde": (
            ["sde.py", "--device", "cuda", "--repeats", "5", "--out", str(out_dir / f"sde-{slug}.md")],
            ["sde.py", "--device", "cpu", "--smoke", "--out", str(out_dir / "sde-cpu-dry-run.md")],
            120.0,
        ),
        "optim": (
            ["optim.py", "--device", "cuda", "--out", str(out_dir / f"optim-{slug}.md")],
            [
                "optim.py",
                "--device",
                "cpu",
                "--params",
                "0.05",
                "--rounds",
                "2",
                "--warmup",
                "1",
                "--out",
                str(out_dir / "optim-cpu-dry-run.md"),
            ],
            90.0,
        ),
        "attention": (
            [
                "attention.py",
                "--device",
                "cuda",
                "--batch",
                "32",
                "--seq",
                "256",
                "--repeats",
                "15",
                "--out",
                str(out_dir / f"attention-{slug}.md"),
            ],
            [
                "attention.py",
                "--device",
                "cpu",
                "--M",
                "8",
                "--batch",
                "1",
                "--seq",
                "16",
                "--repeats",
                "1",
                "--warmup",
                "1",
                "--out",
                str(out_dir / "attention-cpu-dry-run.md"),
            ],
            120.0,
        ),
    }
    for name, (gpu_args, dry_args, cap) in benches.items():
        if name in args.skip:
            continue
        stage = Stage(f"benchmarks/{name}.py")
        chosen = dry_args if dry else gpu_args
        _run(stage, [py, str(BENCH / chosen[0]), *chosen[1:]], budget, cap, log)
        target = Path(chosen[chosen.index("--out") + 1])
        if target.is_file():
            stage.files.append(str(target))
        stages.append(stage)

    if "experiments" not in args.skip:
        stages.append(experiment_points(budget, out_dir, scratch / "runs", slug, dry, log, args.experiments))

    total = time.perf_counter() - started
    table = ["| stage | status | seconds | file |", "|---|---|---|---|"]
    for s in stages:
        files = ", ".join(Path(f).name for f in s.files) or "—"
        table.append(f"| {s.name} | {s.status} | {s.seconds:.0f} | {files} |")
    summary = "\n".join(
        [
            f"# benchmarks/gpu.py on {slug}",
            "",
            f"- {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC; total {total:.0f} s of a "
            f"{args.budget:.0f} s budget",
            *(f"- {line}" for line in header.splitlines()),
            "",
            *table,
            "",
        ]
    )
    summary_path = write_result(out_dir / f"gpu-{slug}.md", summary)
    write_result(out_dir / f"gpu-{slug}-log.md", "\n".join(log))
    print(summary, flush=True)
    if args.bundle is not None:
        args.bundle.mkdir(parents=True, exist_ok=True)
        bundle = args.bundle / "gpu-results.tar.gz"
        with tarfile.open(bundle, "w:gz") as tar:
            for path in sorted(
                {summary_path, out_dir / f"gpu-{slug}-log.md", *(Path(f) for s in stages for f in s.files)}
            ):
                tar.add(path, arcname=path.name)
        print(f"bundle: {bundle} (unpack into benchmarks/results/)", flush=True)
    shutil.rmtree(scratch, ignore_errors=True)  # run folders (and a dry run's results: printed above)
    ok = all(s.status == "ok" or s.status.startswith("skipped: CUDA") for s in stages)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
