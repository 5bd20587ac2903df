"""experiments/token_dynamics/{panels,trained_lm}.py --redraw: the docs figures redrawn from the committed results
(nothing simulated or trained), at most 8.4 in wide (plotting.page_layout: readable at the page's width)."""

import importlib.util
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parents[2] / "experiments" / "token_dynamics"


def _script(name):
    spec = importlib.util.spec_from_file_location(f"token_dynamics_{name}_redraw", HERE / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _png_size(path):
    header = path.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n"
    return int.from_bytes(header[16:20], "big"), int.from_bytes(header[20:24], "big")


@pytest.mark.parametrize("name", ["panels", "trained_lm"])
def test_redraw_from_the_committed_results_fits_the_page(name, tmp_path):
    out = tmp_path / f"{name}.png"
    _script(name).main(["--redraw", "--figure", str(out)])
    width, height = _png_size(out)
    assert 8 * 130 <= width <= 8.4 * 130 + 1  # was 2080 (panels) and 1638 px (trained_lm): 16 and 12.6 in
    assert height > width / 2  # the panels wrapped: two a row, not one row


@pytest.mark.parametrize("name, missing", [("panels", "curves.json"), ("trained_lm", "summary.json")])
def test_redraw_without_results_says_what_is_missing_in_one_line(name, missing, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit:
        _script(name).main(["--redraw", "--out", str(tmp_path), "--figure", str(tmp_path / "x.png")])
    assert exit.value.code == 2  # argparse's usage error, no traceback
    message = capsys.readouterr().err.strip().splitlines()[-1]
    assert f"{tmp_path / missing} does not exist" in message and not (tmp_path / "x.png").exists()
