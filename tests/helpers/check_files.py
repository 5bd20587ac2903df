"""Files written on the fly for the tests of ``meanfield.studies.validation`` and the CLI: check scripts and a
small run configuration (``CONFIG_TEXT``).

``write_check(folder, name)`` writes ``folder/name.py``: a check whose ``run(preset)`` measures 1.0 against
``reference`` (tolerance 1e-12, so it passes only at ``reference = 1.0``) and records the preset it was given
in its data, then runs ``extra`` (a statement: ``raise …`` to make it fail); its ``plot`` runs ``plot``
(default: a one-line figure).
"""

from __future__ import annotations

from pathlib import Path

CHECK = """
from meanfield.studies.validation import CheckResult
CLAIM = "{claim}"
def run(preset="fast"):
    r = CheckResult("{name}", CLAIM, data={{"preset_seen": preset}})
    r.add("one", 1.0, {reference}, 1e-12)
    {extra}
    return r
def plot(result):
    {plot}
"""

PLOT_OK = (
    "from meanfield.studies.plotting import figure\n    fig, ax = figure(width=1, height=1)\n    ax.plot([0, 1], [0, 1])"
    "\n    return fig"
)


def write_check(
    folder: Path,
    name: str,
    *,
    reference: float = 1.0,
    extra: str = "pass",
    claim: str = "one is one",
    plot: str = PLOT_OK,
) -> Path:
    """Write the check ``folder/name.py`` and return its path."""
    path = folder / f"{name}.py"
    path.write_text(CHECK.format(name=name, reference=reference, extra=extra, claim=claim, plot=plot))
    return path


# a small configuration for the command-line tests (a preset, a comment: --print-config echoes it)
CONFIG_TEXT = """\
# a configuration for the command-line tests
task = "teacher_student"
seed = 1

[train]
steps = 10
lr = 0.5

[presets.smoke]
train.steps = 2
"""
