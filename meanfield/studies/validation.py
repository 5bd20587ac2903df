r"""Theory checks: results, discovery and the ``meanfield validate`` run.

A *check* is a script ``theory/<name>.py`` (installed with the package: [`meanfield.shipped`][meanfield.shipped]) with

- ``CLAIM``: one line, the claim it checks;
- ``run(preset: str = "fast") -> CheckResult``: numbers compared with analytic references;
- ``plot(result: CheckResult) -> matplotlib.figure.Figure``.

A [`CheckResult`][meanfield.studies.validation.CheckResult] is a list of [`Comparison`][meanfield.studies.validation.Comparison] rows: a measured value, the analytic reference,
the tolerance ($z\cdot\operatorname{SE}$ plus any known deterministic bias), the smallest error the comparison can detect,
and whether the two must agree (``expect="agree"``) or must be told apart (``expect="differ"``: a negative
control, or a bias the check is meant to show). The check passes when every row does.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from meanfield._io import write_text_atomic

__all__ = [
    "Comparison",
    "CheckResult",
    "ValidationReport",
    "PRESETS",
    "InputError",
    "NoTheoryFolder",
    "discover",
    "load_check",
    "validate",
]

PRESETS = ("fast", "full")


class InputError(ValueError):
    """A bad argument to [`validate`][meanfield.studies.validation.validate] (a check name, a preset): the command line reports it in one line."""


class NoTheoryFolder(InputError, FileNotFoundError):
    """The folder of theory checks does not exist."""


@dataclass(frozen=True)
class Comparison:
    r"""One measured quantity against its analytic reference.

    Attributes:
        quantity: what is compared (e.g. ``"Var x_T"``).
        value: the measured value.
        reference: the analytic value.
        tolerance: the allowed ``|value − reference|`` ($z\cdot\operatorname{SE} + \text{ bias }$).
        detectable: the smallest ``|value − reference|`` the comparison detects (its power), in the same unit.
        expect: ``"agree"`` (pass iff within tolerance) or ``"differ"`` (pass iff outside it).
        note: how the tolerance was set, in words.
    """

    quantity: str
    value: float
    reference: float
    tolerance: float
    detectable: float | None = None
    expect: str = "agree"
    note: str = ""

    def __post_init__(self) -> None:
        if self.expect not in ("agree", "differ"):
            raise ValueError(f"expect must be 'agree' or 'differ', got {self.expect!r}")

    @property
    def error(self) -> float:
        return abs(self.value - self.reference)

    @property
    def passed(self) -> bool:
        if not (math.isfinite(self.value) and math.isfinite(self.reference)):
            return False
        within = self.error <= self.tolerance
        return within if self.expect == "agree" else not within


@dataclass
class CheckResult:
    """What a theory check measured.

    Attributes:
        name: the check's name (its file stem).
        claim: the claim, one line.
        comparisons: the rows; the check passes iff all pass.
        data: arrays and numbers for ``plot`` (JSON-serialisable).
        preset: ``"fast"`` or ``"full"``.
        seconds: wall time of ``run``.
        error: the traceback if ``run`` raised (then the check fails).
    """

    name: str
    claim: str
    comparisons: list[Comparison] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)
    preset: str = "fast"
    seconds: float = 0.0
    error: str | None = None

    @property
    def passed(self) -> bool:
        return self.error is None and bool(self.comparisons) and all(c.passed for c in self.comparisons)

    def add(
        self, quantity: str, value: float, reference: float, tolerance: float, **kwargs: Any
    ) -> Comparison:
        """Append a [`Comparison`][meanfield.studies.validation.Comparison] and return it."""
        row = Comparison(quantity, float(value), float(reference), float(tolerance), **kwargs)
        self.comparisons.append(row)
        return row

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CheckResult:
        """The inverse of `to_dict` (derived fields such as ``passed`` are recomputed, not read)."""
        fields = ("quantity", "value", "reference", "tolerance", "detectable", "expect", "note")
        rows = [Comparison(**{k: row[k] for k in fields if k in row}) for row in data["comparisons"]]
        return cls(
            data["name"],
            data["claim"],
            rows,
            data.get("data", {}),
            data.get("preset", "fast"),
            data.get("seconds", 0.0),
            data.get("error"),
        )

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["passed"] = self.passed
        for row, c in zip(out["comparisons"], self.comparisons):
            row["passed"] = c.passed
        return out

    def table(self) -> str:
        """The comparisons as a markdown table."""
        lines = [
            "| quantity | measured | reference | tolerance | detects | expect | verdict |",
            "|---|---|---|---|---|---|---|",
        ]
        for c in self.comparisons:
            det = "" if c.detectable is None else f"{c.detectable:.3g}"
            verdict = "pass" if c.passed else "**FAIL**"
            quantity = _escape_markdown(c.quantity)
            lines.append(
                f"| {quantity} | {c.value:.6g} | {c.reference:.6g} | {c.tolerance:.3g} | {det} | {c.expect} | {verdict} |"
            )
        return "\n".join(lines)


def _escape_markdown(text: str) -> str:
    """Escape the characters a markdown table cell would read as markup (``|``, ``*``, ``_``)."""
    for ch in ("\\", "|", "*", "_"):
        text = text.replace(ch, "\\" + ch)
    return text


def default_theory_dir() -> Path:
    """The checks that came with the imported package, wherever the command is started: the installed
    package's ``meanfield/theory/`` (a wheel), else the source checkout's ``theory/`` (a checkout or an
    editable install); see [`meanfield.shipped`][meanfield.shipped].

    Raises:
        NoTheoryFolder: neither exists.
    """
    from meanfield.shipped import NotShipped, theory_dir

    try:
        return theory_dir()
    except NotShipped as error:
        raise NoTheoryFolder(f"{error}, or pass --theory") from None


def discover(theory_dir: str | os.PathLike | None = None) -> dict[str, Path]:
    """The checks in ``theory_dir``: ``{name: path}`` for every ``*.py`` not starting with ``_``, sorted."""
    folder = Path(theory_dir) if theory_dir is not None else default_theory_dir()
    if not folder.is_dir():
        raise NoTheoryFolder(
            f"no theory folder at {folder}: pass --theory the folder of the checks (or omit it for those "
            "installed with the package)"
        )
    return {p.stem: p for p in sorted(folder.glob("*.py")) if not p.stem.startswith("_")}


def load_check(path: str | os.PathLike) -> ModuleType:
    """Import a check script and verify it has ``CLAIM``, ``run`` and ``plot``."""
    path = Path(path)
    spec = importlib.util.spec_from_file_location(f"meanfield_theory_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for attr in ("CLAIM", "run", "plot"):
        if not hasattr(module, attr):
            raise AttributeError(
                f"theory check {path} has no {attr!r}: a check defines CLAIM, run(preset), plot(result)"
            )
    return module


@dataclass
class ValidationReport:
    """The results of a ``validate`` run and where they were written."""

    results: list[CheckResult]
    out: Path

    @property
    def passed(self) -> bool:
        return all(r.passed for r in self.results)

    def summary(self) -> str:
        """The pass/fail table, one row a check."""
        width = max([len(r.name) for r in self.results] + [5])
        lines = [f"{'check':<{width}}  {'verdict':<7}  {'rows':>4}  {'time':>7}  claim"]
        for r in self.results:
            verdict = "pass" if r.passed else ("ERROR" if r.error else "FAIL")
            n_ok = sum(c.passed for c in r.comparisons)
            lines.append(
                f"{r.name:<{width}}  {verdict:<7}  {n_ok:>2}/{len(r.comparisons):<1}  {r.seconds:>6.1f}s  {r.claim}"
            )
        n_pass = sum(r.passed for r in self.results)
        lines.append(f"{n_pass} passed, {len(self.results) - n_pass} failed")
        return "\n".join(lines)


def run_check(name: str, path: Path, preset: str) -> tuple[CheckResult, ModuleType | None]:
    """Run one check, turning an exception into a failed result with its traceback."""
    start = time.perf_counter()
    module = None
    try:
        module = load_check(path)
        result = module.run(preset)
        if not isinstance(result, CheckResult):
            raise TypeError(f"{name}.run returned {type(result).__name__}, not a CheckResult")
    except Exception:  # a failing check is reported, the run goes on
        claim = getattr(module, "CLAIM", "") if module is not None else ""
        result = CheckResult(name=name, claim=claim, preset=preset, error=traceback.format_exc())
    result.seconds = time.perf_counter() - start
    result.preset = preset
    return result, module


def validate(
    names: Sequence[str] | None = None,
    *,
    preset: str = "fast",
    out: str | os.PathLike = "validate-out",
    theory_dir: str | os.PathLike | None = None,
    progress: bool | None = None,
    echo: Callable[[str], None] | None = print,
    resume: bool = False,
) -> ValidationReport:
    """Run the theory checks and write ``report.md``, ``results.json`` and one PNG per check to ``out``.

    ``results.json`` is rewritten (atomically) after every check, so an interrupted run keeps what it has
    done; ``resume=True`` then reuses every result in it that ran with the same preset, finished without an
    error and has its figure, and runs only the rest.

    Args:
        names: the checks to run (file stems in ``theory/``); all when ``None``.
        preset: ``"fast"`` (the whole suite in minutes, what CI runs) or ``"full"`` (paper-quality figures).
        out: the output folder (created).
        theory_dir: where the checks are (default: see [`default_theory_dir`][meanfield.studies.validation.default_theory_dir]).
        progress: show a progress bar over the checks (``None``: when it lasts over a second in a terminal
            or a notebook, [`progress`][meanfield.progress]).
        echo: where to print the summary table (``None``: nowhere).
        resume: reuse the finished results of an earlier run into the same ``out`` (see above).
    """
    from ..progress import progress_bar
    from .plotting import save

    if preset not in PRESETS:
        raise InputError(f"preset must be one of {PRESETS}, got {preset!r}")
    checks = discover(theory_dir)
    if names:
        unknown = [n for n in names if n not in checks]
        if unknown:
            raise InputError(f"unknown check(s) {unknown}; available: {sorted(checks)}")
        checks = {n: checks[n] for n in names}
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise InputError(f"the output folder {out} exists and is not a folder: choose another --out")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise InputError(f"cannot create the output folder {out}: {error}") from None
    done = _finished_results(out, preset) if resume else {}
    results = []
    bar = progress_bar(progress, iterable=checks.items(), desc="validate", unit="check")
    for name, path in bar:
        bar.set_postfix_str(name)
        if name in done:
            results.append(done[name])
            continue
        result, module = run_check(name, path, preset)
        if module is not None and result.error is None:
            try:
                save(module.plot(result), out / f"{name}.png")
            except Exception:
                result.error = "plot failed:\n" + traceback.format_exc()
        results.append(result)
        # written after every check: an interrupted run keeps what it has done
        write_text_atomic(
            out / "results.json", json.dumps([r.to_dict() for r in results], indent=1, default=float)
        )
    report = ValidationReport(results, out)
    write_text_atomic(out / "report.md", _markdown(report))
    if echo is not None:
        echo(report.summary())
        echo(f"report: {(out / 'report.md').resolve()}")
    return report


def _finished_results(out: Path, preset: str) -> dict[str, CheckResult]:
    """The results in ``out/results.json`` that ran with ``preset``, without an error, and have their PNG."""
    path = out / "results.json"
    if not path.exists():
        return {}
    try:
        results = [CheckResult.from_dict(d) for d in json.loads(path.read_text())]
    except (ValueError, KeyError, TypeError, AttributeError) as error:  # JSONDecodeError is a ValueError
        raise InputError(
            f"cannot resume from {path}: it is not a results file of meanfield validate "
            f"({type(error).__name__}: {error}); remove it or choose another --out"
        ) from None
    return {
        r.name: r
        for r in results
        if r.preset == preset and r.error is None and (out / f"{r.name}.png").exists()
    }


def _markdown(report: ValidationReport) -> str:
    parts = ["# meanfield validate\n", "```", report.summary(), "```\n"]
    for r in report.results:
        parts.append(f"## {r.name}: {'pass' if r.passed else 'FAIL'}\n\n{r.claim}\n")
        if r.comparisons:
            parts.append(r.table() + "\n")
        if r.error:
            parts.append("```\n" + r.error + "\n```\n")
        elif (report.out / f"{r.name}.png").exists():
            parts.append(f"![{r.name}]({r.name}.png)\n")
    return "\n".join(parts)


def run_as_script(file: str) -> None:
    """``python theory/<name>.py [--preset full] [--out DIR]``: run one check as ``meanfield validate`` would."""
    import argparse
    import sys

    import matplotlib

    matplotlib.use("Agg")  # a script that writes its figure to a file: no display needed
    path = Path(file).resolve()
    parser = argparse.ArgumentParser(prog=f"python theory/{path.name}", description=load_check(path).CLAIM)
    parser.add_argument("--preset", choices=PRESETS, default="fast")
    parser.add_argument("--out", default="validate-out")
    args = parser.parse_args()
    report = validate([path.stem], preset=args.preset, out=args.out, theory_dir=path.parent, progress=False)
    sys.exit(0 if report.passed else 1)
