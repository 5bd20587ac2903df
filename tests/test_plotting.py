"""Importing meanfield leaves matplotlib's backend as the user chose it (``meanfield/plotting.py`` switched it to
Agg at import, after ``%matplotlib inline`` too); the command line, which only writes files, picks Agg."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PROBE = """
import matplotlib
matplotlib.use("svg")  # the user's choice, made before meanfield is imported (as %matplotlib inline is)
import meanfield, meanfield.plotting, meanfield.studies, meanfield.validation, meanfield.figures
import meanfield.runs, meanfield.sweeps, meanfield.cli
print(matplotlib.get_backend())
meanfield.plotting.save(meanfield.plotting.figure()[0], "probe.png")  # drawing a file needs no backend switch
print(matplotlib.get_backend())
meanfield.cli.main(["solvers"])
print(matplotlib.get_backend())
"""


def test_import_keeps_the_users_backend_and_the_command_line_picks_agg(tmp_path):
    """With the backend set to ``svg`` before the import, every drawing module imported and a figure written,
    ``get_backend()`` is still ``svg``; after ``meanfield.cli.main`` it is ``agg``, which shows that the probe
    sees a switch (the negative control: the old ``matplotlib.use("Agg")`` at import printed ``agg`` first)."""
    env = {k: v for k, v in os.environ.items() if k != "MPLBACKEND"}
    env["PYTHONPATH"] = str(ROOT)
    out = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    backends = [line.lower() for line in out.stdout.splitlines() if line.lower() in ("svg", "agg")]
    assert backends == ["svg", "svg", "agg"], out.stdout
    assert (tmp_path / "probe.png").stat().st_size > 0
