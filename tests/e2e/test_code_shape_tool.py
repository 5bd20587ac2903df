"""tools/code_shape.py: the design's length limits (no class over 400 lines, no function over 150) hold for the
package, and a piece over its limit is named and fails (the control)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("code_shape", ROOT / "tools" / "code_shape.py")
code_shape = importlib.util.module_from_spec(spec)
spec.loader.exec_module(code_shape)


@pytest.mark.skipif(
    ROOT.name == "mutants", reason="mutmut's copy of the package: its trampolines lengthen every class"
)
def test_the_package_keeps_its_pieces_short(capsys):
    assert code_shape.main(["--top", "1"]) == 0
    out = capsys.readouterr().out
    assert "longest classes (limit 400 lines):" in out and "longest functions (limit 150 lines):" in out


def test_a_piece_over_its_limit_is_named(tmp_path, capsys):
    package = tmp_path / "pkg"
    package.mkdir()
    body = "\n".join(f"    x{i} = {i}" for i in range(150))
    (package / "long.py").write_text(f"class Short:\n    def f(self):\n        pass\n\n\ndef g():\n{body}\n")
    assert {(k, n, lines) for k, n, lines in code_shape.pieces(package)} == {
        ("class", "pkg.long.Short", 3), ("function", "pkg.long.Short.f", 2), ("function", "pkg.long.g", 151)
    }
    assert code_shape.main([], root=package) == 1
    assert "over the limit: pkg.long.g has 151 lines (limit 150)" in capsys.readouterr().err
