"""tools/import_floors.py: the package's imports go down its floors (docs/design.md); an import up, one sideways
between two pieces of a floor, and one against the base's order are each named (the controls)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("import_floors", ROOT / "tools" / "import_floors.py")
import_floors = importlib.util.module_from_spec(spec)
spec.loader.exec_module(import_floors)


def test_every_import_of_the_package_goes_down(capsys):
    assert import_floors.main() == 0
    assert "goes down or stays in its subpackage" in capsys.readouterr().out


def test_an_import_up_or_sideways_is_named(tmp_path, capsys):
    package = tmp_path / "meanfield"
    for sub in ("drift", "nn", "studies", "stepping"):
        (package / sub).mkdir(parents=True)
        (package / sub / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "_checks.py").write_text("from meanfield import progress\n")  # the base's order: progress is last
    (package / "progress.py").write_text("from . import _checks\n")  # fine: an earlier base module
    (package / "drift" / "potentials.py").write_text("def f():\n    from ..nn import layer\n")  # up, in a function
    (package / "nn" / "layer.py").write_text("from meanfield.studies import stats\nfrom ..drift import potentials\n")
    (package / "studies" / "stats.py").write_text("")
    (package / "stepping" / "simulate.py").write_text("import meanfield.drift.potentials\nfrom . import other\n")
    assert import_floors.breaks(package) == [
        "meanfield._checks -> meanfield.progress (floor 0 -> 0)",
        "meanfield.drift.potentials -> meanfield.nn.layer (floor 1 -> 4)",
        "meanfield.nn.layer -> meanfield.studies.stats (floor 4 -> 4)",
    ]
    assert import_floors.main(package) == 1
    assert capsys.readouterr().out.count("import against the floors") == 3
    (package / "drift" / "potentials.py").write_text("import meanfield.newthing\n")  # a piece with no floor
    assert "meanfield.drift.potentials -> meanfield.newthing: 'newthing' has no floor (add it to FLOORS)" in (
        import_floors.breaks(package)
    )
