"""benchmarks/entropy.py --redraw: the bias figure redrawn from a committed results file, without rerunning."""

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks"
RESULTS = BENCH / "results" / "amd-epyc" / "entropy.md"


def _entropy_script():
    if str(BENCH) not in sys.path:
        sys.path.append(str(BENCH))  # for its `from _common import …`
    spec = importlib.util.spec_from_file_location("benchmarks_entropy_redraw", BENCH / "entropy.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_bias_table_is_read_back_cell_by_cell():
    entropy = _entropy_script()
    data, dims, sizes = entropy.bias_from_results(RESULTS)
    assert dims == entropy.DIMENSIONS and sizes == entropy.SIZES
    assert len(data) == len(dims) * len(sizes) * len(entropy.METHODS)  # every M > d: gaussian everywhere
    # the file's first row: | 1 | 1e+02 | 200 | knn | 3 | -0.0139 ± 0.0081 | ...
    assert data[(1, 100, "knn")] == {"bias": -0.0139, "bias_se": 0.0081}


def test_redraw_writes_a_page_width_figure(tmp_path):
    entropy = _entropy_script()
    out = tmp_path / "bias.png"
    entropy.main(["--redraw", str(RESULTS), "--figure", str(out)])
    width = int.from_bytes(out.read_bytes()[16:20], "big")  # the PNG's IHDR width
    assert 0 < width <= 8.4 * 130  # four panels, two a row, at most 8.4 in (was 12.8 in, 1408 px)


def test_a_file_without_a_bias_table_is_refused_in_one_line(tmp_path):
    entropy = _entropy_script()
    empty = tmp_path / "other.md"
    empty.write_text("# not an entropy result\n| a | b |\n")
    with pytest.raises(SystemExit, match="no bias table"):
        entropy.bias_from_results(empty)


def test_redraw_of_a_missing_file_is_refused_in_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit:
        _entropy_script().main(["--redraw", str(tmp_path / "none.md"), "--figure", str(tmp_path / "x.png")])
    assert exit.value.code == 2  # argparse's usage error, no traceback
    assert "none.md: no such results file" in capsys.readouterr().err and not (tmp_path / "x.png").exists()
