"""What every benchmark script shares: where its results file goes, the provenance it writes into it, the
machine and device descriptions, and the atomic write.

A results file is one run on one machine. It lives in ``benchmarks/results/<machine>/<name>.md``, where
``<machine>`` is :func:`machine_slug` (the CPU model, e.g. ``amd-epyc``, ``intel-xeon``; on a GPU the device,
e.g. ``nvidia-h200``), so that runs on different kinds of machine never share a file or a table. The file
starts with the run's :class:`Provenance` (the exact command line, the commit, the CPU model and flags, the
thread settings, the library versions, the machine load at the start and at the end), once as a bullet list
for the reader and once as one JSON comment for ``benchmarks/report.py``, and every table in it is labelled
with the machine it ran on (:func:`write_result`).
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import platform
import re
import shlex
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import torch

from meanfield._io import write_text_atomic
from meanfield.runs.environment import _git_commit, _source_hash

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
RESULTS = BENCH / "results"

CPU_FLAGS = {
    "AVX2": "avx2",
    "AVX-512": "avx512f",
    "AVX-512 BF16": "avx512_bf16",
    "AMX": "amx_tile",
    "AMX BF16": "amx_bf16",
}
"""The CPU features that decide the speed of sorts, matmuls and draws here, by their ``/proc/cpuinfo`` flag."""

THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "OMP_WAIT_POLICY")
"""Environment variables that change how many threads a benchmark uses or how they wait."""

PACKAGES = ("meanfield-sde", "torch", "numpy", "scipy", "pot", "torchsde", "geomloss", "pykeops")
"""Library versions recorded with every run (those installed)."""

OUTPUTS = ("benchmarks/results", "docs/benchmarks.md")
"""What the benchmarks write: changes there do not make a run's checkout dirty (else every run after the first
of a series would say so)."""

PROVENANCE_TAG = "benchmark-provenance"
"""The HTML comment ``<!-- benchmark-provenance {json} -->`` that carries a results file's provenance."""


# ----------------------------------------------------------------------------------------------- the machine


def _lscpu() -> dict[str, str]:
    """``lscpu``'s ``key: value`` lines (empty where ``lscpu`` is missing or fails)."""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    pairs = (line.split(":", 1) for line in out.splitlines() if ":" in line)
    return {key.strip(): value.strip() for key, value in pairs}


def cpu_model() -> str:
    """The CPU's model name as ``lscpu`` gives it (``Model name``), else what ``platform`` knows."""
    return _lscpu().get("Model name") or platform.processor() or platform.machine()


def cpu_flags() -> dict[str, bool]:
    """Whether the CPU has each feature of :data:`CPU_FLAGS` (``lscpu``'s ``Flags``, else ``/proc/cpuinfo``)."""
    flags = _lscpu().get("Flags", "")
    if not flags:
        with contextlib.suppress(OSError):
            flags = next(
                (
                    line.split(":", 1)[1]
                    for line in Path("/proc/cpuinfo").read_text().splitlines()
                    if line.startswith("flags")
                ),
                "",
            )
    present = set(flags.split())
    return {name: flag in present for name, flag in CPU_FLAGS.items()}


def slug(text: str) -> str:
    """A file-name form of a machine's name: lower case, letters and digits joined by ``-``.

    ``(R)``, ``(TM)``, the words "Processor" and "CPU" and a clock ("@ 2.10GHz") are dropped:
    ``"Intel(R) Xeon(R) Processor"`` → ``"intel-xeon"``, ``"NVIDIA H200"`` → ``"nvidia-h200"``.
    """
    text = re.sub(r"\((r|tm)\)|@.*$|\b(processor|cpu)\b", " ", text.lower())
    words = "".join(c if c.isalnum() else " " for c in text).split()
    if not words:
        raise ValueError(f"no letters or digits in the machine name {text!r}")
    return "-".join(words)


def device_slug(device: torch.device | str) -> str:
    """A file-name form of the device: ``"cpu"``, or the GPU's name, e.g. ``"nvidia-h200"``."""
    device = torch.device(device)
    return slug(torch.cuda.get_device_name(device)) if device.type == "cuda" else device.type


def machine_slug(device: torch.device | str = "cpu") -> str:
    """The machine kind a run's results are filed under: the CPU model (``amd-epyc``), or the GPU (``nvidia-h200``)
    when the benchmark runs on CUDA."""
    return device_slug(device) if torch.device(device).type == "cuda" else slug(cpu_model())


def result_path(name: str, device: torch.device | str = "cpu") -> Path:
    """``benchmarks/results/<machine>/<name>.md``: the default results file of benchmark ``name`` here."""
    if not name or "/" in name or name.endswith(".md"):
        raise ValueError(f"a results name is a bare word such as 'wasserstein', got {name!r}")
    return RESULTS / machine_slug(device) / f"{name}.md"


def machine() -> str:
    """CPU model, core count, torch version and its thread count, e.g. for a one-line host description."""
    return f"{cpu_model()}, {os.cpu_count()} cores, torch {torch.__version__} ({torch.get_num_threads()} threads)"


def device_description(device: torch.device | str) -> str:
    """The device a benchmark ran on, e.g. ``NVIDIA H200, 139 GiB, 132 SMs, capability 9.0, CUDA 13.0``
    (``"cpu"`` on the CPU: see :func:`machine`). Records the TF32 setting of float32 matmuls too."""
    device = torch.device(device)
    if device.type != "cuda":
        return str(device)
    p = torch.cuda.get_device_properties(device)
    tf32 = "on" if torch.backends.cuda.matmul.allow_tf32 else "off"
    return (
        f"{p.name}, {p.total_memory / 2**30:.0f} GiB, {p.multi_processor_count} SMs, capability "
        f"{p.major}.{p.minor}, torch {torch.__version__} (CUDA {torch.version.cuda}), TF32 matmuls {tf32}"
    )


# -------------------------------------------------------------------------------------------- the provenance


def command_line(script: str | os.PathLike, argv: list[str]) -> str:
    """The command that reruns a benchmark: ``python benchmarks/<script> <argv>``, each argument quoted as a
    shell needs it (``shlex.join``), every flag as it was given."""
    path = Path(script).resolve()
    try:
        shown = path.relative_to(ROOT).as_posix()
    except ValueError:
        shown = path.as_posix()
    return shlex.join(["python", shown, *argv])


def _versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for name in PACKAGES:
        with contextlib.suppress(metadata.PackageNotFoundError):
            versions[name] = metadata.version(name)
    return versions


def _load() -> list[float]:
    """The 1-, 5- and 15-minute load averages (NaN where the system has none)."""
    return list(os.getloadavg()) if hasattr(os, "getloadavg") else [float("nan")] * 3


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


@dataclass
class Provenance:
    """Where and how a benchmark ran: enough to rerun it and to tell machines apart.

    Attributes:
        command: the exact command line (:func:`command_line`).
        machine: the machine kind (:func:`machine_slug`): the folder the results file is in.
        cpu: the CPU model (``lscpu``'s model name) and its core count.
        cpu_flags: :data:`CPU_FLAGS` present or not.
        device: where the timed work ran (``cpu``, or the GPU's description).
        threads: torch's intra- and inter-op threads and :data:`THREAD_VARIABLES` (``None``: unset).
        versions: Python and :data:`PACKAGES`.
        commit: the git commit of the checkout, ``dirty`` whether tracked files other than the benchmarks'
            own outputs (:data:`OUTPUTS`) differ from it, and
            ``source_sha256`` a hash of meanfield's own source (pins the code of a dirty tree).
        started, finished: UTC times; ``load_start``, ``load_end``: the 1/5/15-minute load averages then.
    """

    command: str
    machine: str
    cpu: str
    cpu_flags: dict[str, bool]
    device: str
    threads: dict[str, Any]
    versions: dict[str, str]
    commit: str | None
    dirty: bool | None
    source_sha256: str
    started: str
    load_start: list[float]
    finished: str | None = None
    load_end: list[float] | None = field(default=None)

    @classmethod
    def start(
        cls, script: str | os.PathLike, argv: list[str] | None = None, device: torch.device | str = "cpu"
    ) -> Provenance:
        """Record the run of ``script`` with arguments ``argv`` (default ``sys.argv[1:]``) on ``device`` now."""
        argv = sys.argv[1:] if argv is None else [str(a) for a in argv]
        git = _git_commit(exclude=OUTPUTS)
        return cls(
            command=command_line(script, argv),
            machine=machine_slug(device),
            cpu=f"{cpu_model()}, {os.cpu_count()} cores",
            cpu_flags=cpu_flags(),
            device=device_description(device),
            threads={
                "torch": torch.get_num_threads(),
                "torch interop": torch.get_num_interop_threads(),
                **{name: os.environ.get(name) for name in THREAD_VARIABLES},
            },
            versions=_versions(),
            commit=git["commit"],
            dirty=git["dirty"],
            source_sha256=_source_hash(),
            started=_now(),
            load_start=_load(),
        )

    def finish(self) -> Provenance:
        """Record the end of the run (time and load) once; later calls keep the first end."""
        if self.finished is None:
            self.finished, self.load_end = _now(), _load()
        return self

    def label(self) -> str:
        """The one line put above every table: machine, CPU, start time and the 1-minute load."""
        end = f" → {self.load_end[0]:.2f}" if self.load_end else ""
        return (
            f"_on {self.machine} ({self.cpu}), {self.started}, 1-minute load {self.load_start[0]:.2f}{end}_"
        )

    def markdown(self) -> str:
        """The provenance as a bullet list, followed by the same as one JSON comment (for ``report.py``)."""
        flags = ", ".join(f"{name} {'yes' if on else 'no'}" for name, on in self.cpu_flags.items())
        threads = ", ".join(f"{k} {'unset' if v is None else v}" for k, v in self.threads.items())
        versions = ", ".join(f"{k} {v}" for k, v in self.versions.items())
        dirty = {
            None: "unknown",
            True: "yes (uncommitted changes to tracked files other than the results)",
            False: "no",
        }[self.dirty]
        load = lambda xs: " / ".join(f"{x:.2f}" for x in xs)  # noqa: E731
        end = f"{load(self.load_end)} at the end ({self.finished})" if self.load_end else "end not recorded"
        lines = [
            f"- command: `{self.command}`",
            f"- machine: {self.machine} — {self.cpu}; {flags}",
            f"- device: {self.device}",
            f"- code: commit {self.commit or 'unknown'}, dirty: {dirty}; meanfield source sha256 "
            f"{self.source_sha256[:16]}…",
            f"- threads: {threads}",
            f"- versions: {versions}",
            f"- load average (1 / 5 / 15 min): {load(self.load_start)} at the start ({self.started}), {end} "
            "(a shared machine: compare the ratios within one run)",
            "",
            f"<!-- {PROVENANCE_TAG} {json.dumps(asdict(self), sort_keys=True)} -->",
        ]
        return "\n".join(lines)


def parse_provenance(text: str) -> dict[str, Any] | None:
    """The provenance recorded in a results file's text, or ``None`` for a file written before it was recorded."""
    found = re.search(rf"<!-- {PROVENANCE_TAG} (\{{.*\}}) -->", text)
    return json.loads(found.group(1)) if found else None


def label_tables(body: str, label: str) -> str:
    """``body`` with ``label`` and a blank line put before every Markdown table (a run of lines opening with ``|``)."""
    out: list[str] = []
    previous = ""
    for line in body.splitlines():
        if line.startswith("|") and not previous.startswith("|"):
            if previous.strip():
                out.append("")
            out += [label, ""]
        out.append(line)
        previous = line
    return "\n".join(out) + ("\n" if body.endswith("\n") else "")


def write_result(path: str | os.PathLike, text: str, provenance: Provenance | None = None) -> Path:
    """Write ``text`` to ``path`` atomically (a temporary file, then a rename) and return the path.

    With ``provenance``, the run is finished (:meth:`Provenance.finish`), its block goes after the file's
    first line (the title) and every table is labelled with the machine (:func:`label_tables`).
    """
    if provenance is not None:
        provenance.finish()
        title, _, rest = text.partition("\n")
        text = (
            f"{title}\n\n{provenance.markdown()}\n\n{label_tables(rest.lstrip(chr(10)), provenance.label())}"
        )
    return write_text_atomic(path, text)
