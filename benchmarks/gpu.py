"""Everything that needs a GPU, in one call: the CUDA tests, the GPU rows of the benchmarks, one point of each
experiment's ``full`` preset. Results go to ``benchmarks/results/<device>/`` (e.g. ``nvidia-h200/``).

A lent device gives 15 minutes for everything, machine starts included, so the script plans its time before
it runs anything: each stage (a subprocess) gets a time cap, a share of ``--budget`` (default
:data:`DEFAULT_BUDGET_S` = 300 s) by its weight in :data:`WEIGHTS`, and the caps add up to at most the
budget less :data:`FINISH_S` (the summary and the bundle). The plan is printed first. A stage may also use
what the stages before it left unused, never what is planned for the stages after it. Run it under a
:data:`RUN_LIMIT_S` = 360 s limit: two tries (one retry) and two machine starts fit in the allowance.

Stages, in order:

1. the device: name, memory, capability, torch and CUDA versions, the TF32 flags (printed and written);
2. ``pytest -m cuda tests/``: the CUDA item of every device-parametrised test (``tests/conftest.py``);
3. ``benchmarks/sde.py --device cuda``: the Euler–Maruyama step at M·d = 10⁶ … 10⁸ as numbers/s and as a
   fraction of the memory bandwidth, with the noise draw's share;
4. ``benchmarks/optim.py --device cuda``: the Langevin step against fused Adam (20M parameters);
5. ``benchmarks/attention.py --device cuda``: ParticleAttention against multi-head attention;
6. one point of each experiment at ``--preset full`` on ``device = "cuda"``, its steps capped
   (``train.steps``) so that it takes seconds: throughput and the metrics reached (not the paper numbers,
   which need the full step count); the most informative first (:data:`EXPERIMENT_ORDER`), so that a
   budget cut short loses the least.

A stage that times out is killed with its children and keeps what it printed, stdout and stderr, in the
log. ``results/<device>/gpu.md`` lists every stage with its cap, status, time and file. Safe to rerun:
results are replaced atomically, run folders live in a temporary folder that is removed.

Without CUDA (this machine, CI) the script runs end to end as a **dry run**: it says that CUDA is not
available, skips the CUDA tests, and runs every benchmark and experiment stage on the CPU at smoke sizes
(``--smoke`` / ``--preset smoke``), writing into a temporary folder (``--results`` to keep them), never over
the committed results. ``--dry-run`` forces that mode on a GPU machine too; ``--plan`` prints the plan and
stops.

Usage::

    python benchmarks/gpu.py                      # on the GPU machine (or a dry run here)
    python benchmarks/gpu.py --plan               # the stage caps and their sum, nothing run
    python benchmarks/gpu.py --bundle "$OUT"      # also pack the results into $OUT/gpu-results.tar.gz
    bash benchmarks/gpu.sh                        # the same, after installing carried wheels (see docs)
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse  # noqa: E402
import json  # noqa: E402
import shutil  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tarfile  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402
from _common import Provenance, device_description, device_slug, machine, write_result  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"
RESULTS = BENCH / "results"

DEFAULT_BUDGET_S = 300.0
"""The default ``--budget``: all stages together."""
RUN_LIMIT_S = 360.0
"""The device call's ``timeout_s`` to run the script under (the budget, plus the header, the wheels' install
and the transfers)."""
ALLOWANCE_S = 900.0
"""A lent device's time for a whole task: starts, runs, idle waits, all tries together (15 minutes)."""
START_S = 90.0
"""What a machine start is assumed to cost (the device notes: "a minute or more")."""
FINISH_S = 10.0
"""Kept out of the stages' caps: the summary, the log and the bundle."""
MIN_CAP_S = 5.0
"""No stage is planned with less: a budget too small for that is refused before anything runs."""

WEIGHTS = {
    "CUDA tests": 60.0,
    "benchmarks/sde.py": 40.0,
    "benchmarks/optim.py": 30.0,
    "benchmarks/attention.py": 40.0,
    "experiment particle_attention": 50.0,
    "experiment char_lm": 30.0,
    "experiment teacher_student": 25.0,
    "experiment mean_field": 15.0,
}
"""Each stage's share of the budget (relative; an experiment not named here weighs 20)."""
OTHER_EXPERIMENT_WEIGHT = 20.0

EXPERIMENT_ORDER = ("particle_attention", "char_lm", "teacher_student", "mean_field")
"""The experiments' ``full`` points, most informative first: the seed's 6 × 256 particle-attention language
model is the claim only a GPU can check; the character LM is the second model at GPU size; the
teacher–student and mean-field points are small enough for a CPU. Experiments not named run after these."""

STEPS = {"teacher_student": 2000, "char_lm": 300, "particle_attention": 300}
"""``train.steps`` of each experiment's ``full`` point on the GPU (seconds each on an H200); others: 200."""


@dataclass
class Stage:
    name: str
    cap: float = 0.0
    status: str = "not run"
    seconds: float = 0.0
    files: list[str] = field(default_factory=list)


class Budget:
    """The time left of ``seconds``, counted from its creation."""

    def __init__(self, seconds: float) -> None:
        self.end = time.perf_counter() + seconds

    def left(self) -> float:
        return self.end - time.perf_counter()


# ------------------------------------------------------------------------------------------------ the plan


def experiment_names(only: list[str] | None = None) -> list[str]:
    """The experiments with an ``experiments/<name>/config.toml``, in :data:`EXPERIMENT_ORDER` (then sorted),
    only those in ``only`` if given (an unknown name is an error)."""
    found = sorted(c.parent.name for c in ROOT.glob("experiments/*/config.toml"))
    if only:
        unknown = sorted(set(only) - set(found))
        if unknown:
            raise SystemExit(
                f"--experiments: no experiments/<name>/config.toml for {unknown}; known: {found}"
            )
        found = [name for name in found if name in only]
    rank = {name: i for i, name in enumerate(EXPERIMENT_ORDER)}
    return sorted(found, key=lambda name: (rank.get(name, len(rank)), name))


def stage_names(skip: list[str], experiments: list[str]) -> list[str]:
    """The stages that will run, in order."""
    names = []
    for key, name in (("tests", "CUDA tests"), ("sde", "benchmarks/sde.py"), ("optim", "benchmarks/optim.py"),
                      ("attention", "benchmarks/attention.py")):  # fmt: skip
        if key not in skip:
            names.append(name)
    if "experiments" not in skip:
        names += [f"experiment {name}" for name in experiments]
    return names


def plan_caps(budget: float, names: list[str]) -> dict[str, float]:
    """Each stage's time cap: ``budget − FINISH_S`` shared by :data:`WEIGHTS`, in whole seconds rounded down,
    so that the caps add up to at most ``budget − FINISH_S``.

    Raises:
        ValueError: a budget that leaves a stage less than :data:`MIN_CAP_S`, or no stage to plan.
    """
    if not names:
        raise ValueError("no stage to plan: everything is skipped")
    usable = budget - FINISH_S
    weights = {name: WEIGHTS.get(name, OTHER_EXPERIMENT_WEIGHT) for name in names}
    total = sum(weights.values())
    caps = {name: float(int(usable * w / total)) for name, w in weights.items()}
    if min(caps.values()) < MIN_CAP_S:
        need = FINISH_S + MIN_CAP_S * total / min(weights.values())
        raise ValueError(
            f"--budget {budget:.0f} s is too small for {len(names)} stages: each needs at least "
            f"{MIN_CAP_S:.0f} s (give at least {need:.0f} s, or --skip some)"
        )
    return caps


def plan_text(caps: dict[str, float], budget: float) -> str:
    """The plan as printed: one line a stage, then the sum against the budget."""
    lines = ["time plan (seconds):"]
    lines += [f"  {name:<36} cap {cap:5.0f}" for name, cap in caps.items()]
    total = sum(caps.values())
    lines.append(
        f"  {'sum of the stage caps':<36}     {total:5.0f} ≤ budget {budget:.0f} − {FINISH_S:.0f} for the "
        f"summary (run it under a {RUN_LIMIT_S:.0f} s limit)"
    )
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------ a stage


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH", "")]))
    env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _text(data: bytes | str | None) -> str:
    return data.decode(errors="replace") if isinstance(data, bytes) else (data or "")


def run_limited(argv: list[str], limit: float) -> tuple[str, str, int | None]:
    """Run ``argv`` from the repository root for at most ``limit`` seconds: ``(stdout, stderr, exit code)``,
    the code ``None`` when it timed out. A process that times out is killed with its whole process group
    (pytest's and torchrun's children too), and what it printed until then, stdout and stderr, is kept."""
    process = subprocess.Popen(
        argv,
        cwd=ROOT,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        out, err = process.communicate(timeout=limit)
        return _text(out), _text(err), process.returncode
    except subprocess.TimeoutExpired:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        out, err = process.communicate()
        return _text(out), _text(err), None


def _run(stage: Stage, argv: list[str], budget: Budget, later: float, log: list[str]) -> str:
    """Run ``argv`` within what is left of the budget less ``later`` (the caps of the stages after this one)
    and at least nothing; record the outcome on ``stage``; return the output (stdout, then stderr)."""
    limit = budget.left() - FINISH_S - later
    if limit < 1:
        stage.status = "skipped: the time budget is spent"
        print(f"[{stage.name}] {stage.status}", flush=True)
        return ""
    print(f"[{stage.name}] $ {' '.join(argv)}   (cap {stage.cap:.0f} s, limit now {limit:.0f} s)", flush=True)
    start = time.perf_counter()
    out, err, code = run_limited(argv, limit)
    stage.seconds += time.perf_counter() - start
    if code is None:
        stage.status = f"timed out after {limit:.0f} s"
    else:
        stage.status = "ok" if code == 0 else f"failed (exit {code})"
    output = out + (f"\n--- stderr ---\n{err}" if err.strip() else "")
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


# ------------------------------------------------------------------------------------------- the stages


def bench_argv(name: str, out: Path, dry: bool) -> list[str]:
    """The command of benchmark stage ``name`` (``sde``, ``optim``, ``attention``), its results in ``out``."""
    py, script = sys.executable, str(BENCH / f"{name}.py")
    gpu = {
        "sde": ["--device", "cuda", "--repeats", "3", "--seconds", "0.1"],
        "optim": ["--device", "cuda"],
        "attention": ["--device", "cuda", "--batch", "32", "--seq", "256", "--repeats", "15"],
    }
    smoke = {
        "sde": ["--device", "cpu", "--smoke"],
        "optim": ["--device", "cpu", "--params", "0.05", "--rounds", "2", "--warmup", "1"],
        "attention": ["--device", "cpu", "--M", "8", "--batch", "1", "--seq", "16", "--repeats", "1",
                      "--warmup", "1"],
    }  # fmt: skip
    return [py, script, *(smoke if dry else gpu)[name], "--out", str(out)]


def experiment_row(name: str, stage: Stage, folder: Path) -> str:
    """The table row of one experiment point from its run folder's ``summary.json``."""
    summary_path = folder / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.is_file() else {}
    unit = summary.get("unit", "samples")
    final = summary.get("final", {})
    numbers = [(k, v) for k, v in final.items() if isinstance(v, (int, float)) and not isinstance(v, bool)]
    shown = ", ".join(f"{k} = {v:.4g}" for k, v in numbers[:6])  # the first six (losses come first)
    rate = summary.get(f"{unit}_per_s")
    return (
        f"| {name} | {stage.status} | {summary.get('step', '—')} | "
        f"{summary.get('wall_time_s', float('nan')):.2f} | {f'{rate:,.0f} {unit}/s' if rate else '—'} | "
        f"{shown or '—'} |"
    )


def experiment_argv(name: str, folder: Path, dry: bool) -> list[str]:
    """``meanfield run`` of experiment ``name``'s point: ``full`` on CUDA with capped steps, or a CPU smoke."""
    if dry:
        tail = ["--preset", "smoke", "--set", "device=cpu", "--set", "train.steps=4"]
    else:
        steps = STEPS.get(name, 200)
        tail = ["--preset", "full", "--set", "device=cuda", "--set", f"train.steps={steps}",
                "--set", f"train.checkpoint_every={steps}", "--set", f"train.eval_every={steps}"]  # fmt: skip
    config = ROOT / "experiments" / name / "config.toml"
    return [sys.executable, "-m", "meanfield.cli", "run", str(config), *tail, "--out", str(folder), "--quiet"]


def experiments_table(rows: list[str], slug: str, dry: bool, provenance: Provenance, path: Path) -> Path:
    """Write the experiments' table (``gpu-runs.md``)."""
    how = (
        "`--preset smoke --set device=cpu --set train.steps=4`"
        if dry
        else "`meanfield run experiments/<name>/config.toml --preset full --set device=cuda --set train.steps=N "
        "--set train.checkpoint_every=N --set train.eval_every=N`"
    )
    text = "\n".join(
        [
            f"# One point of each experiment's {'smoke (dry run)' if dry else 'full'} preset on {slug}",
            "",
            f"- {how}; the most informative first",
            "- the steps are capped (N below): throughput and the metrics reached, not the full runs' results",
            "",
            "| experiment | status | steps | wall s (steps) | throughput | final metrics |",
            "|---|---|---|---|---|---|",
            *rows,
            "",
        ]
    )
    print(text, flush=True)
    return write_result(path, text, provenance)


def summary_text(stages: list[Stage], total: float, budget: float, header: str) -> str:
    table = ["| stage | cap s | status | seconds | file |", "|---|---|---|---|---|"]
    for s in stages:
        files = ", ".join(Path(f).name for f in s.files) or "—"
        table.append(f"| {s.name} | {s.cap:.0f} | {s.status} | {s.seconds:.0f} | {files} |")
    return "\n".join(
        [
            "# benchmarks/gpu.py: every stage",
            "",
            f"- total {total:.0f} s of a {budget:.0f} s budget; the caps add up to "
            f"{sum(s.cap for s in stages):.0f} s",
            *(f"- {line}" for line in header.splitlines()),
            "",
            *table,
            "",
        ]
    )


def bundle(target: Path, out_dir: Path, paths: set[Path]) -> Path:
    """Pack ``paths`` into ``target/gpu-results.tar.gz``, named relative to ``out_dir`` (``<device>/<file>``)."""
    target.mkdir(parents=True, exist_ok=True)
    tar_path = target / "gpu-results.tar.gz"
    with tarfile.open(tar_path, "w:gz") as tar:
        for path in sorted(p for p in paths if p.is_file()):
            tar.add(path, arcname=path.relative_to(out_dir).as_posix())
    return tar_path


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--budget",
        type=float,
        default=DEFAULT_BUDGET_S,
        help=f"seconds for all stages (default {DEFAULT_BUDGET_S:.0f}; run under a {RUN_LIMIT_S:.0f} s limit)",
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="the CPU smoke mode even where CUDA is available"
    )
    parser.add_argument("--plan", action="store_true", help="print the stage caps and their sum, run nothing")
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
    if args.budget <= FINISH_S:
        parser.error(f"--budget must exceed {FINISH_S:.0f} s, got {args.budget:g}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    experiments = experiment_names(args.experiments)
    try:
        caps = plan_caps(args.budget, stage_names(args.skip, experiments))
    except ValueError as error:
        raise SystemExit(str(error)) from None
    print(plan_text(caps, args.budget), flush=True)
    if args.plan:
        return 0
    started = time.perf_counter()
    budget = Budget(args.budget)
    cuda = torch.cuda.is_available()
    dry = args.dry_run or not cuda
    device = torch.device("cuda" if cuda and not dry else "cpu")
    provenance = Provenance.start(__file__, argv, device=device)
    slug = device_slug(device) if not dry else "cpu-dry-run"
    scratch = Path(tempfile.mkdtemp(prefix="meanfield-gpu-"))
    out_root = args.results or (scratch / "results" if dry else RESULTS)
    out_dir = out_root / slug
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
    log: list[str] = [f"# gpu.py log\n\n{header}\n\n```\n{plan_text(caps, args.budget)}\n```\n"]
    stages = [Stage(name, cap) for name, cap in caps.items()]
    later = lambda i: sum(s.cap for s in stages[i + 1 :])  # noqa: E731
    rows = []
    for i, stage in enumerate(stages):
        if stage.name == "CUDA tests":
            if dry:
                stage.status = "skipped: CUDA is not available (pytest -m cuda would only report skips)"
                print(f"[{stage.name}] {stage.status}", flush=True)
                continue
            argv_ = [
                sys.executable,
                "-m",
                "pytest",
                "-m",
                "cuda",
                "-q",
                "-p",
                "no:cacheprovider",
                "-rfEsx",
                "tests/",
            ]
            output = _run(stage, argv_, budget, later(i), log)
            path = write_result(
                out_dir / "gpu-tests.txt", f"{header}\n\n$ pytest -m cuda -q tests/\n\n{output[-30000:]}"
            )
            stage.files.append(str(path))
        elif stage.name.startswith("benchmarks/"):
            name = Path(stage.name).stem
            target = out_dir / f"{'sde-device' if name == 'sde' else name}.md"
            _run(stage, bench_argv(name, target, dry), budget, later(i), log)
            if target.is_file():
                stage.files.append(str(target))
        else:
            name = stage.name.removeprefix("experiment ")
            folder = scratch / "runs" / name
            _run(stage, experiment_argv(name, folder, dry), budget, later(i), log)
            rows.append(experiment_row(name, stage, folder))
    if rows:
        path = experiments_table(rows, slug, dry, provenance, out_dir / "gpu-runs.md")
        stages[-1].files.append(str(path))

    total = time.perf_counter() - started
    summary_path = write_result(
        out_dir / "gpu.md", summary_text(stages, total, args.budget, header), provenance
    )
    log_path = write_result(out_dir / "gpu-log.md", "\n".join(log))
    print(summary_path.read_text(), flush=True)
    if args.bundle is not None:
        paths = {summary_path, log_path, *(Path(f) for s in stages for f in s.files)}
        print(f"bundle: {bundle(args.bundle, out_root, paths)} (unpack into benchmarks/results/)", flush=True)
    shutil.rmtree(scratch, ignore_errors=True)  # run folders (and a dry run's results: printed above)
    ok = all(s.status == "ok" or s.status.startswith("skipped: CUDA") for s in stages)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
