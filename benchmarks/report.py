"""Regenerate ``docs/benchmarks.md`` from the results files: ``python benchmarks/report.py``.

The page is made of this script's prose (what each benchmark measures and its targets: no measured number)
and of the results files in ``benchmarks/results/<machine>/`` (every measured number). For each benchmark
it has one subsection per machine kind that has a results file, which it includes verbatim (the snippet
``--8<--``), so runs on different machines never share a table. The summary at the top lists every
``target`` line of every results file with the machine and the time of its run. A file written before the
benchmarks recorded their provenance (issue 31) is included as it is and marked so.

``--check`` compares the page with what it would write and fails if they differ (the docs are stale).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
RESULTS = BENCH / "results"
PAGE = ROOT / "docs" / "benchmarks.md"
PROVENANCE = re.compile(r"<!-- benchmark-provenance (\{.*\}) -->")


@dataclass(frozen=True)
class Section:
    """One benchmark's part of the page: its heading, the results names it includes, its prose."""

    title: str
    names: tuple[str, ...]
    intro: str


INTRO = """\
# Benchmarks

Speed lives in `benchmarks/`, never in tests: each script times meanfield against the alternative in the
same run, interleaved, and reports medians and ratios (`OMP_WAIT_POLICY=PASSIVE` is set before torch is
imported: with a busy neighbour, torch's default spin-waiting threads slow small matmuls down by an order of
magnitude). Beside each ratio against a peer stands the **floor** of the same work on the same machine
(the two sorts of a 1-D W2, the noise draw of an Euler–Maruyama step, …), so that a ratio can be read on any
machine: `ours/floor` near 1 means there is little left to gain there.

Each script writes its results to `benchmarks/results/<machine>/<name>.md`, `<machine>` being the CPU model
(`amd-epyc`, `intel-xeon`: the two kinds of 2-core machine these sessions get) or the GPU. A results file
is one run on one machine and starts with its provenance: the exact command with every flag, the commit
(and whether the tree was dirty), the CPU model and its AVX-512/AMX/bf16 flags, the thread settings, the
library versions and the machine load at the start and at the end; every table in it is labelled with its
machine. The machines are shared: absolute numbers move with the load (recorded), ratios within one run
much less.

This page is generated from those files by `python benchmarks/report.py` (never edit it by hand; rerun the
command after a benchmark). `bash benchmarks/run_all.sh` reruns every CPU benchmark one at a time with the
commands of the files here, then this page (about 20 minutes on the 2-core machines; run it on a quiet
machine). Files marked *recorded before issue 31* were written before the scripts recorded their provenance:
what they say of their command, machine and load is all there is.
"""

SECTIONS = (
    Section(
        "Euler–Maruyama: native vs torchsde",
        ("sde",),
        """\
Targets: ≥ 100× torchsde's default at M = 1e3, d = 1; ≥ 1.0× torchsde with a supplied Brownian motion
everywhere; at M = 1e5, d = 10 the native Gaussian step ≤ 1.2× the time of drawing the noise alone. The
floors are the draw alone (reachable only when the update overlaps the draw) and the draw followed by one
fused pass over the state. At small M a step is Python overhead, not arithmetic: torchsde's default
`BrownianInterval` costs far less per step than the 100× target assumed, so that target needs a whole native
step within a few microseconds.""",
    ),
    Section(
        "Wasserstein distances: meanfield vs POT",
        ("wasserstein",),
        """\
Targets: 1-D exact at n = 1e5 ≤ 3 ms and n = 1e6 < 0.5 s; sliced ≥ 10× POT's at equal projections with the
same value. The floors: the two sorts (1-D), the projections' matrix products plus the sorts (sliced), the
network simplex on a ready cost matrix (exact). The speed of a sort differs between the two CPU kinds
(NumPy's AVX-512 sort where the CPU has it), which moves the 1-D and sliced ratios against POT; the
`ours/floor` column does not depend on it as much. The sort primitives are timed side by side:
`meanfield.metrics.wasserstein` sorts with NumPy, which was faster than `torch.sort` at every n measured,
with identical results.""",
    ),
    Section(
        "Optimal transport at large n",
        ("sinkhorn",),
        """\
Issue 16: POT (exact `emd2`; the plain Sinkhorn `wasserstein(method="sinkhorn")` ran before), GeomLoss
(tensorized, online) and meanfield's debiased Sinkhorn divergence, each case in a fresh process (time, peak
memory over the inputs, value). Targets: at n = 2000, d = 10 at least 100× faster than the Sinkhorn before
(143 s in the issue); at n = 1e4, d = 10 within 1 % of the ε → 0 value (exact W2²) in ≤ 1 minute; no
slower than GeomLoss at equal accuracy; memory O(n). Which method to use when:
[Wasserstein](wasserstein.md#large-clouds-which-method-when). GeomLoss and KeOps are optional
(`pip install -e ".[keops]"`): a run without them says so in their rows (`skipped: failed:
ModuleNotFoundError`), and the "no slower than GeomLoss" target is then not measured.""",
    ),
    Section(
        "Entropy and KL estimators",
        ("entropy",),
        """\
`meanfield.metrics.entropy` and `kl` (issue 48): the bias of the k-NN, weighted and Gaussian estimators
against M and d on a Gaussian with a full covariance, how the replica-to-replica sd compares with `se` and
`se_jackknife`, KL against the Gaussian closed form, and the time of one `entropy` call at M = 1e4, 1e5 in
d = 2, 10 (wall and CPU). Read with [Entropy and KL](entropy.md#bias-against-m-and-d-calibration-time).""",
    ),
    Section(
        "Large M: interactions and noise",
        ("kernels",),
        """\
The drift of a pairwise interaction per step against the dense M × M kernel; the two backends of the
soft-minimum (the crossover behind `meanfield.drift.pairwise.resolve_backend`); the Rademacher noise per
Euler–Maruyama step (target: near the ~1 ms a bit-per-entry draw plus one pass over the state costs at
M = 1e5, d = 10), whose floor is the draw alone. The KeOps rows need the optional `pykeops`
(`pip install -e ".[keops]"`); without it they are skipped and the table says so.""",
    ),
    Section(
        "Particle attention vs multi-head attention",
        ("attention",),
        """\
Targets: ≥ 1.0× SDPA multi-head attention at M = 8; ≥ 2× a loop over per-head modules at M = 32. The floor
is the same multi-head attention computing the same function (its output weight divided by M): the same
kernels, so parity with it means the particle layout costs nothing.""",
    ),
    Section(
        "Langevin optimizer vs fused Adam",
        ("optim",),
        """\
Target: a Langevin step ≤ 1.3× (fused Adam + one flat normal draw) on a 20M-parameter model; that reference
is the floor (the noise must be drawn somehow, and on a CPU the draw dominates).""",
    ),
    Section(
        "meanfield against its peers",
        ("peers",),
        """\
Issue 51: the Euler–Maruyama step and the SGLD step against diffrax, torchsde, BlackJAX and posteriors, each
engine in its own environment and one thread, every answer checked against meanfield's within Monte Carlo
error before its ratio is given (`benchmarks/peers.py`'s docstring has the problems, the engines and the
method). Targets: `Langevin` ≤ 1.2× the hand-written SGLD loop at d = 20, one chain; the opt-in captured
SGLD block (`meanfield.stepping.captured.sgld_block`, `torch.compile`) ≤ 3× BlackJAX's `lax.scan`; the
compile time is the setup column.""",
    ),
    Section(
        "Run machinery vs a bare training loop",
        ("runs",),
        """\
Target (issue 10): the machinery should cost little next to the steps. What `meanfield run` adds (a metrics
line every 10 steps with the optimizer's statistics, two atomic checkpoints, the summary, optionally
TensorBoard) to the same steps of the same model, optimizer and batches, build included; the bare loop is
the floor. The per-round ratios are paired in the same round, which is what makes them usable on a loaded
machine; the absolute times are not.""",
    ),
    Section(
        "Sharded particle systems and parallel particle models",
        ("distributed", "parallel_lm"),
        """\
One particle system over 1 and 2 gloo processes (strong and weak scaling, the collectives' share), and the
particle models data-parallel against particles sharded over ranks ([Scaling out](scaling.md)). On a 2-core
machine two processes also compete with everything else running: read the load in each file.""",
    ),
    Section(
        "The Euler–Maruyama step on a device",
        ("sde-device",),
        """\
`python benchmarks/sde.py --device cpu` (or `cuda`): the step of `simulate` at M·d = 10⁵ … 10⁸ as steps/s,
numbers/s and a fraction of the memory bandwidth (measured in the same run by a copy), with the noise draw's
share, and a run that saves every 8 steps with the finiteness check of before issue 18 (`isfinite(x).all()`)
against the present one (one `aminmax` pass).""",
    ),
    Section(
        "On a GPU",
        ("gpu", "gpu-runs"),
        """\
**One call does everything.** `benchmarks/gpu.py` (through `benchmarks/gpu.sh`) prints the device, runs
the CUDA tests (`pytest -m cuda tests/`: the `cuda` item of every device-parametrised test), the GPU rows of
`sde.py`, `optim.py` and `attention.py`, and one point of each experiment at `--preset full` with
`device = "cuda"` and its steps capped (throughput and the metrics reached, not the experiments' results),
the most informative first (the particle-attention language model, the paper's GPU-sized claim). Each stage
is a subprocess with its own time cap; the caps are planned before anything runs and add up to at most
`--budget` (300 s by default, so that a run under a 360 s limit leaves time for one retry inside a lent
device's 15 minutes, starts included), and the plan is printed first. A stage that times out keeps its
stdout and stderr in the log. `benchmarks/results/<device>/gpu.md` lists each stage's status, time and
file. Without CUDA it is a dry run on the CPU at smoke sizes, into a temporary folder
(`tests/e2e/test_gpu_script.py`).

```bash
bash benchmarks/gpu_prepare.sh             # here, once: .gpu/ (git-ignored) gets tiny-shakespeare and the
                                           # wheels the GPU image may lack: pure-Python ones, and POT's for
                                           # the image's Python (--python, default 3.12; 33 MB a wheel)
bash benchmarks/gpu_prepare.sh --dry-run   # what it would fetch, where, and what is there already
bash benchmarks/gpu.sh --dry-run           # the whole script on this CPU: the stage caps, their sum, smoke runs
```

then, with the device tool, `run(command="bash benchmarks/gpu.sh", carry=[".gpu"], timeout_s=360)`, and
here `tar xzf <files_at>/gpu-results.tar.gz -C benchmarks/results/` (it unpacks into `<device>/`) and
`python benchmarks/report.py`.

**The Euler–Maruyama step on CUDA**, per step of `simulate` (float32, n numbers): the noise is drawn into
one reused buffer with the scale folded in (`normal_(0, std)` with $\\mathrm{std} = \\sigma\\sqrt{dt}$: writes 4 B a
number); the affine drift of `MeanFieldLangevin` with `Quadratic` is one fused pass $x \\leftarrow (1 - a\\,dt)\\,x + \\mathrm{noise}$
(`torch.add(noise, x, alpha=…, out=x)`: reads 8 B, writes 4 B); a `QuadraticInteraction` adds the particle
mean and one more pass (12 B). Nothing in the step reads a number back to the host: the state's finiteness
is checked every `check_every` = 64 steps and at saved states with one reduction (`aminmax`), and off the
CPU those flags are read together every `check_every` steps. The least a step must move is read x and write
x (8 B); the step moves 16 B (28 B with the interaction), so by this count it can reach at most 50 % (29 %)
of the bandwidth, the rest being the noise buffer's round trip. Fusing the draw into the update would be
the next step; torch has no such kernel, and it would change the numbers drawn.

**TF32.** meanfield never changes `torch.backends.cuda.matmul.allow_tf32` or
`torch.backends.cudnn.allow_tf32` (a library should not change a process's numerics on import): float32
matmuls run in full float32 unless the caller opts in, and `gpu.md` records the flags of the run. The tests
pin both off (`tests/conftest.py`); `test_tf32_matmuls_stay_within_the_stated_tolerance` turns TF32 on and
states its tolerance. To train faster in float32 on a GPU, set `torch.backends.cuda.matmul.allow_tf32 = True`
(or `torch.set_float32_matmul_precision("high")`) in your own script.""",
    ),
)


def machines(results: Path = RESULTS) -> list[str]:
    """The machine folders under ``results`` (sorted), each one kind of machine."""
    return sorted(p.name for p in results.iterdir() if p.is_dir()) if results.is_dir() else []


def clean_sources(results: Path = RESULTS) -> set[tuple[str, str]]:
    """``(commit, meanfield source sha256)`` of every results file recorded from a clean tree: a dirty run
    with the same pair ran meanfield exactly as committed (its tree differed elsewhere, e.g. in the results
    files an earlier benchmark of the same series had written)."""
    pairs = set()
    for path in sorted(results.glob("*/*.md")) if results.is_dir() else []:
        found = PROVENANCE.search(path.read_text())
        if found is not None:
            info = json.loads(found.group(1))
            if info.get("dirty") is False:
                pairs.add((info.get("commit"), info.get("source_sha256")))
    return pairs


def recorded(text: str, clean: set[tuple[str, str]] = frozenset()) -> str:
    """When and how a results file was recorded, in a few words; ``clean`` from :func:`clean_sources`."""
    found = PROVENANCE.search(text)
    if found is None:
        return "recorded before issue 31 (provenance incomplete: see its header)"
    info = json.loads(found.group(1))
    load = f"1-minute load {info['load_start'][0]:.2f}"
    if info.get("load_end"):
        load += f" → {info['load_end'][0]:.2f}"
    dirty = ""
    if info.get("dirty"):
        same = (info.get("commit"), info.get("source_sha256")) in clean
        dirty = ", dirty tree (meanfield source as committed)" if same else ", dirty tree"
    return f"{info['started']}, commit {str(info.get('commit'))[:10]}{dirty}, {load}"


def target_lines(text: str) -> list[str]:
    """The bullet lines of a results file that state a target and what was measured against it."""
    return [line[2:].strip() for line in text.splitlines() if line.startswith("- ") and "target" in line]


def summary(results: Path = RESULTS, clean: set[tuple[str, str]] | None = None) -> list[str]:
    """The summary table: every target line of every results file, with its machine and run."""
    lines = [
        "| benchmark | machine | run | target and measured (from the results file) |",
        "|---|---|---|---|",
    ]
    clean = clean_sources(results) if clean is None else clean
    for section in sections(results):
        for machine in machines(results):
            for name in section.names:
                path = results / machine / f"{name}.md"
                if not path.is_file():
                    continue
                text = path.read_text()
                targets = target_lines(text) or ["(no target line in this file)"]
                for target in targets:
                    cell = target.replace("|", "\\|")
                    lines.append(
                        f"| [{name}](#{anchor(section.title)}) | {machine} | {recorded(text, clean)} | {cell} |"
                    )
    return lines


def anchor(title: str) -> str:
    """The anchor mkdocs gives a heading (lower case, punctuation dropped, spaces as ``-``)."""
    kept = "".join(c for c in title.lower() if c.isalnum() or c in " -_")
    return "-".join(kept.split())


def section_text(
    section: Section, results: Path = RESULTS, clean: set[tuple[str, str]] | None = None
) -> list[str]:
    """One section: heading, prose, then each machine's results files included."""
    lines = [f"## {section.title}", "", section.intro, ""]
    found = False
    clean = clean_sources(results) if clean is None else clean
    for machine in machines(results):
        for name in section.names:
            path = results / machine / f"{name}.md"
            if not path.is_file():
                continue
            found = True
            rel = f"benchmarks/results/{machine}/{name}.md"  # where the snippet finds it
            lines += [f"### {name} on {machine}", "", f"`{rel}`: {recorded(path.read_text(), clean)}.", ""]
            lines += [f'--8<-- "{rel}"', ""]
    if not found:
        lines += ["No results file yet: no run of this benchmark has been recorded on any machine.", ""]
    return lines


def other_section(results: Path = RESULTS) -> Section | None:
    """A section for the results files no section of :data:`SECTIONS` names (a new benchmark), so that the page
    holds every results file; ``None`` when there are none. Its prose is each file's title."""
    known = {name for section in SECTIONS for name in section.names}
    names = sorted({p.stem for m in machines(results) for p in (results / m).glob("*.md")} - known)
    if not names:
        return None
    titles = []
    for name in names:
        path = next(
            results / m / f"{name}.md" for m in machines(results) if (results / m / f"{name}.md").is_file()
        )
        titles.append(f"- `{name}`: {path.read_text().partition(chr(10))[0].lstrip('# ').strip()}")
    intro = (
        "Benchmarks this page has no prose for yet (add a `Section` to `benchmarks/report.py`):\n\n"
        + "\n".join(titles)
    )
    return Section("Other benchmarks", tuple(names), intro)


def sections(results: Path = RESULTS) -> tuple[Section, ...]:
    """The page's sections: :data:`SECTIONS`, then :func:`other_section` if there are unnamed results files."""
    other = other_section(results)
    return SECTIONS if other is None else (*SECTIONS, other)


def render(results: Path = RESULTS) -> str:
    """The whole page."""
    clean = clean_sources(results)  # read once: the summary and every section label their runs with it
    lines = [INTRO, "## Summary: every target, by machine", ""]
    lines += [
        "Each row is a target line of a results file, as the benchmark wrote it (met or **missed**, with the",
        "floor where the benchmark measures one); rows of different machines are different runs.",
        "",
        *summary(results, clean),
        "",
    ]
    for section in sections(results):
        lines += section_text(section, results, clean)
    return "\n".join(lines).rstrip("\n") + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="fail if docs/benchmarks.md is not up to date")
    parser.add_argument(
        "--out", type=Path, default=PAGE, help="the page to write (default docs/benchmarks.md)"
    )
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = args.out.read_text() if args.out.is_file() else ""
        if current != text:
            print(f"{args.out} is stale: run python benchmarks/report.py", file=sys.stderr)
            return 1
        print(f"{args.out} is up to date")
        return 0
    sys.path.insert(0, str(ROOT))
    from meanfield._io import write_text_atomic

    print(f"written: {write_text_atomic(args.out, text)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
