"""What the result objects show in a notebook (``meanfield/_display.py`` and the classes that use it): a repr of
a few lines with the shapes and the numbers that matter, never a tensor or every row; a small, well-formed,
escaped HTML table; ``to_pandas`` (skipped without pandas) and its one-line error without it."""

from __future__ import annotations

import dataclasses
import math
import random
import sys
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
import torch

import meanfield as mf
from meanfield._display import (
    MAX_ROWS,
    dataframe,
    fields_html,
    html_block,
    number,
    paragraph,
    rows_html,
    rows_text,
    seconds,
    shortlist,
)
from meanfield.metrics.wasserstein import Normal, wasserstein
from meanfield.runs.sweeps import SweepTable, summarize
from meanfield.studies.in_memory import Table

VOID = {"br", "hr", "img", "meta", "link", "input", "col", "wbr"}


class _Tags(HTMLParser):
    """Every start tag closed by its own end tag, in order; the cells' text."""

    def __init__(self):
        super().__init__()
        self.open, self.errors, self.tags, self.cells = [], [], [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        if tag not in VOID:
            self.open.append(tag)

    def handle_endtag(self, tag):
        if not self.open or self.open[-1] != tag:
            self.errors.append(f"</{tag}> closes {self.open[-1] if self.open else 'nothing'}")
        else:
            self.open.pop()

    def handle_data(self, data):
        if self.open and self.open[-1] in ("td", "th"):
            self.cells.append(data)


def parsed(text: str) -> _Tags:
    p = _Tags()
    p.feed(text)
    p.close()
    return p


def well_formed(text: str) -> bool:
    p = parsed(text)
    return not p.errors and not p.open and "table" in p.tags


def dataclass_repr(obj) -> str:
    """What the dataclass-generated repr printed (every field's repr): the negative control of the checks."""
    return f"{type(obj).__name__}({', '.join(f'{f.name}={getattr(obj, f.name)!r}' for f in dataclasses.fields(obj))})"


def short(text: str, chars: int, lines: int) -> bool:
    return len(text) <= chars and text.count("\n") + 1 <= lines and "tensor(" not in text


@pytest.fixture(scope="module")
def traj():
    """The issue's case: 201 saved states (a 201-line tensor dump before)."""
    system = mf.MeanFieldLangevin(mf.potentials.DoubleWell(), beta=0.25)
    return mf.simulate(
        system, torch.zeros(2, 50, 1), t1=2.0, dt=0.01, save_every=1, generator=0, progress=False
    )


@pytest.fixture(scope="module")
def study():
    def sample(M, reps):
        return torch.randn(reps, M, 1, generator=torch.Generator().manual_seed(M))  # (reps, M, 1)

    return mf.convergence_in_m(
        sample, [8, 16, 32, 64], reps=6, reference=Normal(0.0, 1.0), generator=0, n_boot=100, progress=False,
        observables={"m2": lambda x: (x**2).mean((1, 2))},
    )  # fmt: skip


@pytest.fixture(scope="module")
def swept():
    def run(beta, seed):
        if beta == 0.5 and seed == 1:
            raise ValueError("<diverged> & stopped")
        return {"y": beta * (seed + 1), "curve": [beta, 2 * beta, 3 * beta]}

    with pytest.warns(RuntimeWarning, match="1 of 12 runs failed"):
        return mf.sweep(run, {"beta": [0.1, 0.2, 0.5]}, seeds=[0, 1, 2, 3], progress=False)


@pytest.fixture(scope="module")
def sweep_table():
    rng = random.Random(0)
    rows = [
        {"lr": lr, "seed": s, "folder": f"lr={lr}-seed={s}", "status": "finished", "val_loss": rng.random()}
        for lr in (0.1, 0.2, 0.3)
        for s in range(4)
    ]
    rows[-1]["status"], rows[-1]["val_loss"] = "failed", None
    return SweepTable(
        Path("runs/x"), {"lr": [0.1, 0.2, 0.3]}, rows, summarize(rows, ["lr"], ["val_loss"]), ["val_loss"]
    )


def test_trajectory_repr_names_shapes_times_and_solver_in_two_lines(traj):
    """201 saved states of (B, M, d) = (2, 50, 1): the repr says ``S=201, B=2, M=50, d=1``, the dtype, the times
    0 … 2, dt = 0.01 over steps 0 … 200, the solver and the seed, in 2 lines under 200 characters. Negative
    control: the dataclass repr it replaces (every tensor printed) fails the same length check."""
    text = repr(traj)
    assert short(text, 200, 2), text
    for part in (
        "S=201, B=2, M=50, d=1",
        "float32",
        "t = 0 … 2",
        "dt = 0.01",
        "0, 1, 2, …, 200",
        "'euler'",
        "seed 0",
    ):
        assert part in text, (part, text)
    assert not short(dataclass_repr(traj), 200, 2)
    html = traj._repr_html_()
    assert well_formed(html) and "S=201, B=2, M=50, d=1" in "".join(parsed(html).cells)


def test_study_result_repr_gives_sizes_slope_interval_and_means(study):
    """The repr names the metric and method, M = 8, 16, 32, 64, the replicates, the slope and its interval
    to 3 digits, each M's mean ± SE, and the observables, in ≤ 5 lines; the HTML has one row per M and one per
    estimator. Negative control: the dataclass repr is over 1000 characters of tensors."""
    text = repr(study)
    assert short(text, 400, 5), text
    lo, hi = study.slope_ci
    assert "w2_squared (law) at M = 8, 16, 32, 64; 6 replicates each" in text
    assert f"slope {number(study.slope, 3)}, 95% CI [{number(lo, 3)}, {number(hi, 3)}] (exact)" in text
    assert f"{number(study.mean[0].item(), 3)} ± {number(study.se[0].item(), 2)}" in text
    assert "observed w2_squared, m2" in text
    assert not short(dataclass_repr(study), 1000, 5)
    p = parsed(study._repr_html_())
    assert not p.errors and not p.open and p.tags.count("tr") == 1 + 4 + 1 + len(study.estimates)
    rate = study.estimates["exact"]
    assert repr(rate) == (
        f"RateEstimate(exact): slope {number(rate.slope, 3)}, 95% CI [{number(lo, 3)}, {number(hi, 3)}], "
        f"limit 0, c {number(rate.coefficient, 3)}"
    )
    assert well_formed(rate._repr_html_())


def test_sweep_result_and_table_show_their_first_rows_and_count_the_rest(swept):
    """12 runs (3 points × 4 seeds), one failed: the title counts them, the text shows the header and the first
    6 rows then ``… 6 more rows``; the error column is shown because a run failed, and its ``<`` and ``&`` are
    escaped in the HTML (read back as text, no ``<diverged>`` tag). A table of 1000 rows shows as much as one of
    12 (not every row). Negative control: the dataclass repr of the 12 rows is longer than both."""
    text = repr(swept)
    assert text.startswith("SweepResult: 12 runs (3 points × 4 seeds), 1 failed; outputs y; series curve")
    assert text.count("\n") == 1 + 1 + 6 and text.endswith("… 6 more rows") and "error" in text
    html = swept._repr_html_()
    p = parsed(html)
    assert well_formed(html) and "diverged" not in p.tags
    assert "ValueError: <diverged> & stopped" in p.cells
    table = swept.table
    assert repr(table).startswith(
        "Table: 12 rows × 4 columns (keys beta, seed; values y, error; replicate 'seed')"
    )
    rows = [{"k": k, "seed": 0, "v": k / 7} for k in range(1000)]
    big = Table(rows, ("k", "seed"), ("v",))
    assert short(repr(big), 300, 9) and repr(big).endswith("… 994 more rows")
    assert well_formed(big._repr_html_()) and parsed(big._repr_html_()).tags.count("tr") == 1 + 12
    assert len(dataclass_repr(swept)) > 2 * len(text) and not short(dataclass_repr(big), 300, 9)


def test_wasserstein_result_repr_gives_the_distance_and_method():
    """A batch of 3: ``W_2 = a, b, c over 3 replicas`` with the values of ``.value``; one pair: ``W_1 = x``; the
    method in brackets. Negative control: the dataclass repr prints a tensor."""
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(3, 20, 2, generator=g), torch.randn(3, 20, 2, generator=g)  # (3, 20, 2)
    batched = wasserstein(x, y, method="exact")
    values = ", ".join(number(v) for v in batched.value.tolist())
    assert repr(batched) == f"WassersteinResult (exact): W_2 = {values} over 3 replicas"
    single = wasserstein(x[0], y[0], p=1, method="exact")
    assert repr(single) == f"WassersteinResult (exact): W_1 = {number(single.value.item())}"
    assert well_formed(single._repr_html_())
    assert "tensor(" in dataclass_repr(single)


def test_sweep_table_shows_the_summary_with_intervals(sweep_table):
    """A sweep folder's table: its folder, 12 runs (3 points × 4 seeds), 11 finished and 1 failed, and one line
    per point with ``n`` and the metric's ``mean (lo – hi)`` (the point with the failure has n = 3)."""
    text = repr(sweep_table)
    assert text.startswith("SweepTable: runs/x, 12 runs (3 points × 4 seeds): 11 finished, 1 failed")
    last = sweep_table.summary[-1]
    assert last["n"] == 3
    assert (
        f"{number(last['val_loss'])} ({number(last['val_loss:lo'])} – {number(last['val_loss:hi'])})" in text
    )
    assert short(text, 400, 5) and well_formed(sweep_table._repr_html_())


def test_to_pandas_round_trips_the_rows(swept, study, sweep_table):
    """``to_pandas`` keeps every row and the column order: the records read back equal the rows where every
    cell is present; a failed run's missing output is NaN beside its error. The curves, a study's table and a
    sweep folder's rows and summary keep their lengths."""
    pandas = pytest.importorskip("pandas")
    df = swept.to_pandas()
    assert list(df.columns) == list(swept.columns) and len(df) == 12
    for row, back in zip(swept.rows, df.to_dict("records"), strict=True):
        present = {k: v for k, v in back.items() if not pandas.isna(v)}  # a missing cell: NaN (or None)
        assert present == {k: v for k, v in row.items() if v is not None}
    assert [pandas.isna(v) for v in df["y"]] == [row["error"] is not None for row in swept.rows]
    assert len(swept.to_pandas(curves=True)) == len(swept.curve_rows) == 11 * 3
    assert study.to_pandas().shape == (4 * 6, 2 + 2) and len(study.to_pandas(curves=True)) == 0
    assert sweep_table.to_pandas()["folder"].tolist() == [r["folder"] for r in sweep_table.rows]
    assert sweep_table.to_pandas(summary=True)["n"].tolist() == [4, 4, 3]


def test_to_pandas_without_pandas_says_how_to_install_it(swept, monkeypatch):
    """Without pandas (its import fails): one line naming the extra to install."""
    monkeypatch.setitem(sys.modules, "pandas", None)  # `import pandas` raises ImportError
    with pytest.raises(
        ModuleNotFoundError, match=r"^to_pandas needs pandas: pip install 'meanfield-sde\[pandas\]'$"
    ):
        swept.table.to_pandas()


def test_the_html_check_fails_on_a_broken_table():
    """Negative control of :func:`well_formed`: an unclosed cell, a crossed tag and no table fail it."""
    assert well_formed("<div><table><tr><td>x</td></tr></table></div>")
    assert not well_formed("<table><tr><td>x</table>")
    assert not well_formed("<div><table></div></table>")
    assert not well_formed("<div>x</div>")


# -- the pieces of ``meanfield/_display.py`` on small inputs: exact strings ------------------------------------


@pytest.mark.parametrize(
    ("value", "digits", "cell"),
    [
        (1 / 3, 4, "0.3333"),  # a float: `digits` significant digits (4 by default)
        (2 / 3, 4, "0.6667"),  # rounded, not cut
        (1 / 3, 2, "0.33"),
        (3.0, 4, "3"),  # a whole float: no trailing ".0"
        (-0.0, 4, "-0"),  # the sign of a negative zero is kept
        (123456.0, 4, "1.235e+05"),  # large: exponent form past `digits` digits
        (1e16, 4, "1e+16"),
        (0.0001234, 4, "0.0001234"),  # small: positional down to 1e-4 …
        (0.00001234, 4, "1.234e-05"),  # … exponent form below
        (math.nan, 4, "nan"),  # not finite: its name, whatever `digits`
        (math.inf, 2, "inf"),
        (-math.inf, 4, "-inf"),
        (np.float32(1 / 3), 4, "0.3333"),  # a numpy float (float32 is no Python float): rounded the same
        (np.float64(-2.5e-7), 2, "-2.5e-07"),
        (-12345678, 2, "-12345678"),  # an integer: every digit, never rounded
        (np.int64(12345678), 2, "12345678"),  # … numpy's too
        (True, 4, "True"),
        (None, 4, ""),  # a missing cell: empty
        ("a<b", 4, "a<b"),  # a string as it is (the HTML escapes it, not `number`)
        (torch.tensor(1 / 3), 4, "0.3333"),  # a one-element tensor: its number, formatted as a float
        (torch.tensor([7]), 4, "7"),  # … an integer one as an integer
        (torch.tensor(math.nan), 4, "nan"),
        (torch.zeros(2, 3), 4, "tensor of shape (2, 3)"),  # a bigger tensor: its shape, never its values
        (torch.zeros(0), 4, "tensor of shape (0,)"),  # an empty one too (0 elements is not 1)
    ],
)
def test_number_formats_one_cell(value, digits, cell):
    """``number``: a float to ``digits`` significant digits (``g`` format: exponent form for large and small
    magnitudes), non-finite floats by name, integers and strings as they are, ``None`` empty, a one-element
    tensor as its number and any other tensor as its shape."""
    assert number(value, digits) == cell
    if digits == 4:
        assert number(value) == cell  # 4 is the default


def test_shortlist_shows_up_to_most_cells_then_the_first_ones_an_ellipsis_and_the_last():
    """``shortlist``: all cells when there are at most ``most`` (6 by default), else the first ``most − 1``,
    ``…`` and the last one, so the list stays ``most`` items long and shows where it ends; ``digits`` reaches
    every cell; an empty list is an empty string."""
    assert MAX_ROWS == 6
    assert shortlist([]) == ""
    assert shortlist([0.5]) == "0.5"
    assert shortlist(range(6)) == "0, 1, 2, 3, 4, 5"  # exactly `most`: no ellipsis
    assert shortlist(range(7)) == "0, 1, 2, 3, 4, …, 6"
    assert shortlist(range(100)) == "0, 1, 2, 3, 4, …, 99"
    assert shortlist(range(3), most=2) == "0, …, 2"
    assert shortlist(range(3), most=3) == "0, 1, 2"
    assert shortlist([1 / 3, None, math.inf], digits=2) == "0.33, , inf"
    assert shortlist([1 / 3, 2 / 3]) == "0.3333, 0.6667"


def test_rows_text_aligns_columns_under_their_header():
    """``rows_text``: the header, then one line per row; every column left-aligned to its widest cell, two
    spaces between columns, no trailing spaces (a missing last cell leaves none), each line indented by
    ``indent`` (two spaces by default); the columns in the order given, not the rows' key order; a key not
    among the columns is not shown."""
    rows = [{"a": 1, "b": 2.5, "hidden": 0}, {"b": math.nan, "a": "long"}, {"a": -0.0}]
    assert rows_text(rows, ["b", "a"]) == "  b    a\n  2.5  1\n  nan  long\n       -0"
    assert rows_text(rows, ["a", "b"], indent="") == "a     b\n1     2.5\nlong  nan\n-0"
    assert rows_text([], ["x", "yy"]) == "  x  yy"  # no rows: the header alone


def test_rows_text_shows_the_first_most_rows_and_counts_the_rest():
    """``rows_text``: at most ``most`` rows (6 by default), the first ones; more rows: one last line
    ``… N more rows`` with N the rows left out (none at exactly ``most``)."""
    rows = [{"k": k} for k in range(8)]
    assert rows_text(rows[:6], ["k"]) == "  k\n  0\n  1\n  2\n  3\n  4\n  5"
    assert rows_text(rows[:7], ["k"]) == "  k\n  0\n  1\n  2\n  3\n  4\n  5\n  … 1 more row"
    assert rows_text(rows, ["k"], most=2, indent="> ") == "> k\n> 0\n> 1\n> … 6 more rows"


def test_rows_html_is_an_escaped_table_of_the_first_most_rows():
    """``rows_html``: ``<table>`` with a ``<thead>`` row of ``<th>`` headers and a ``<tbody>`` row of ``<td>``
    cells per row, in the columns' order, each formatted by ``number`` and HTML-escaped (``<``, ``>``, ``&``,
    quotes, in headers too); no rows: an empty body."""
    rows = [{"x<y": "a & b", "q": 1 / 3}, {"q": None, "x<y": '"c"'}]
    assert rows_html(rows, ["q", "x<y"]) == (
        "<table><thead><tr><th>q</th><th>x&lt;y</th></tr></thead><tbody>"
        "<tr><td>0.3333</td><td>a &amp; b</td></tr>"
        "<tr><td></td><td>&quot;c&quot;</td></tr>"
        "</tbody></table>"
    )
    assert rows_html([], ["a"]) == "<table><thead><tr><th>a</th></tr></thead><tbody></tbody></table>"


def test_rows_html_shows_twice_as_many_rows_as_the_text_and_counts_the_rest():
    """``rows_html``: at most ``most`` rows (12 = 2 × ``MAX_ROWS`` by default), then a paragraph
    ``… N more rows`` after the table (none at exactly ``most``)."""
    rows = [{"k": k} for k in range(14)]
    assert rows_html(rows[:12], ["k"]).count("<tr>") == 1 + 12 and rows_html(rows[:12], ["k"]).endswith(
        "<tr><td>11</td></tr></tbody></table>"
    )
    assert rows_html(rows[:13], ["k"]).endswith("<tr><td>11</td></tr></tbody></table><p>… 1 more row</p>")
    assert rows_html(rows, ["k"], most=1) == (
        "<table><thead><tr><th>k</th></tr></thead><tbody><tr><td>0</td></tr></tbody></table>"
        "<p>… 13 more rows</p>"
    )


def test_fields_paragraph_and_block_are_escaped_html():
    """``fields_html``: one ``<tr><th>name</th><td>value</td></tr>`` per pair; ``paragraph``: ``<p>…</p>``;
    ``html_block``: a ``<div>`` with the title in ``<strong>`` then the parts as given (already HTML, not
    escaped again); every text escaped."""
    assert fields_html([("a<b", "1 & 2"), ("c", "")]) == (
        "<table><tbody><tr><th>a&lt;b</th><td>1 &amp; 2</td></tr><tr><th>c</th><td></td></tr></tbody></table>"
    )
    assert fields_html([]) == "<table><tbody></tbody></table>"
    assert paragraph("x > 'y'") == "<p>x &gt; &#x27;y&#x27;</p>"
    assert html_block("T&C", "<p>a</p>", "<p>b</p>") == "<div><strong>T&amp;C</strong><p>a</p><p>b</p></div>"
    assert html_block("T") == "<div><strong>T</strong></div>"


def test_dataframe_keeps_the_columns_order_and_leaves_missing_cells_empty():
    """``dataframe``: one row per mapping, exactly the given columns in the given order (a key not among them
    is dropped), a missing cell NaN; no rows: an empty frame that still has the columns."""
    pandas = pytest.importorskip("pandas")
    df = dataframe([{"b": 1.5, "a": "x", "extra": 9}, {"a": "y"}], ["a", "b"])
    assert list(df.columns) == ["a", "b"] and df.shape == (2, 2)
    assert df["a"].tolist() == ["x", "y"] and df["b"][0] == 1.5 and pandas.isna(df["b"][1])
    empty = dataframe([], ("p", "q"))
    assert list(empty.columns) == ["p", "q"] and len(empty) == 0


def test_a_duration_keeps_its_digits_below_a_second():
    values = (0.0012, 0.037, 0.5, 0.9996, 1.0, 12.34, 3600.0)
    assert [seconds(v) for v in values] == ["1.2 ms", "0.037 s", "0.5 s", "1.0 s", "1.0 s", "12.3 s", "3600.0 s"]
    # the two boundaries belong above them (mutation survivors: > for >= passed)
    assert [seconds(0.995), seconds(0.01), seconds(0.0099)] == ["1.0 s", "0.01 s", "9.9 ms"]
