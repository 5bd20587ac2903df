"""meanfield.studies.summary: the one table of both sweeps, and the cells of meanfield.studies.stats it prints."""

import math
import warnings

import numpy as np
import pytest
import scipy.stats

from meanfield.runs.sweeps import SweepTable
from meanfield.studies.in_memory import sweep
from meanfield.studies.stats import (
    PairedDifference,
    cost_text,
    holm,
    holm_cell,
    interval_cell,
    mean_cell,
    number_text,
    p_text,
    paired_cell,
    paired_difference,
    t_interval,
)
from meanfield.studies.summary import SummaryTable, TableOptions, summarize

SHIFT = {0.0: 0.0, 0.5: 0.4, 1.0: 1.0}


def _run(beta: float, seed: int) -> dict:
    """A seed's value: a common seed effect (what pairing removes), a shift per β and a little noise."""
    common = np.random.default_rng(seed).normal(0, 1.0)
    noise = np.random.default_rng([seed, int(10 * beta)]).normal(0, 0.05)
    return {"loss": common + SHIFT[beta] + noise, "seconds": 2.0 + seed}


def _memory():
    return sweep(_run, {"beta": [0.0, 0.5, 1.0]}, seeds=6)


def test_the_in_memory_and_run_folder_tables_are_one():
    """The same rows give the same table from ``SweepResult.summarize`` and from the run-folder path
    (``status`` rows), and the sweep folder's table prints the same Markdown."""
    result = _memory()
    options = TableOptions(cost="seconds")
    memory = result.summarize(["loss"], {"beta": 0.0}, options=options)
    folder_rows = [
        {**{k: v for k, v in r.items() if k != "error"}, "status": "finished"} for r in result.rows
    ]
    folder = summarize(folder_rows, ["beta"], ["loss"], {"beta": 0.0}, options=options)
    assert isinstance(memory, SummaryTable) and list(memory) == list(folder)
    table = SweepTable(None, {"beta": [0.0, 0.5, 1.0]}, folder_rows, folder, ["loss"], options)
    assert table.markdown() == memory.markdown()
    assert "cost (h, Σ seconds)" in memory.markdown()


def test_the_paired_cells_are_the_paired_test_of_the_seeds_and_holm_over_the_table():
    """Each point's paired difference is ``paired_difference`` of its seeds against the baseline's, Holm over
    the two tests; the shift 0.4 is found to within its interval (a wrong baseline would not be)."""
    result = _memory()
    table = result.summarize(baseline={"beta": 0.0})
    base = [r["loss"] for r in result.rows if r["beta"] == 0.0]
    ps = []
    for e in table[1:]:
        mine = [r["loss"] for r in result.rows if r["beta"] == e["beta"]]
        d = paired_difference(mine, base)
        assert (e["loss:diff"], e["loss:diff_lo"], e["loss:diff_hi"], e["loss:p"]) == (
            d.mean,
            d.lo,
            d.hi,
            d.p_value,
        )
        assert e["loss:detectable"] == pytest.approx(d.detectable())
        assert e["loss:diff_lo"] <= SHIFT[e["beta"]] <= e["loss:diff_hi"]
        ps.append(d.p_value)
    assert [e["loss:p_holm"] for e in table[1:]] == list(holm(ps))
    assert table[0]["is_baseline"] and "loss:diff" not in table[0]
    wrong = result.summarize(baseline={"beta": 1.0})  # negative control: against another point
    assert not wrong[1]["loss:diff_lo"] <= SHIFT[0.5] <= wrong[1]["loss:diff_hi"]
    assert math.isclose(table[0]["loss"], t_interval(base).mean)


def test_the_title_counts_only_the_tests_it_made():
    """A point with one seed has a difference and no test (p is NaN, Holm leaves it out): the title counts the
    tests made and names the one without (it counted it as a test)."""
    result = _memory()
    rows = [
        {**{k: v for k, v in r.items() if k != "error"}, "status": "finished"}
        for r in result.rows
        if not (r["beta"] == 1.0 and r["seed"] > 0)
    ]
    table = summarize(rows, ["beta"], ["loss"], {"beta": 0.0})
    assert math.isnan(table[2]["loss:p"]) and math.isnan(table[2]["loss:p_holm"])
    assert repr(table).startswith(
        "SummaryTable: 3 points × 1 metrics, 1 paired tests (Holm over the table), 1 with too few pairs or no spread for one\n"
    )


def test_summarize_of_a_sweep_result_refuses_what_is_not_there():
    result = _memory()
    assert result.summarize().metrics == ("loss", "seconds")
    with pytest.raises(KeyError, match="no output 'acc'"):
        result.summarize(["acc"])
    with pytest.raises(ValueError, match=r"baseline names \['gamma'\]"):
        result.summarize(baseline={"gamma": 1})


def test_the_table_prints_itself():
    table = _memory().summarize(["loss"], {"beta": 0.0}, options=TableOptions(cost="seconds"))
    text = repr(table)
    assert text.startswith("SummaryTable: 3 points × 1 metrics, 2 paired tests (Holm over the table)")
    e = table[1]
    assert f"{e['loss:diff']:+.4g} ({e['loss:diff_lo']:+.4g} – {e['loss:diff_hi']:+.4g}), p = " in text
    assert "baseline" in text and cost_text(sum(2.0 + s for s in range(6))) in text
    assert "<table>" in table._repr_html_()
    assert table.to_csv().splitlines()[0].startswith("beta,n,loss,loss:lo,loss:hi,cost,is_baseline")


def test_the_cells_have_one_format():
    """interval ``c (lo – hi)``, paired ``+Δ (lo – hi), p = …``, Holm ``…, Holm …, δ80 …``, cost in hours."""
    assert interval_cell(1.0, 0.5, 1.5) == "1 (0.5 – 1.5)"
    assert interval_cell(1.0, math.nan, math.nan) == "1" and interval_cell(math.nan, 0, 1) == "— (0 – 1)"
    assert interval_cell(0.01234, -0.5, 1.0, 3, sign=True) == "+0.012 (-0.500 – +1.000)"
    assert mean_cell([1.0, 2.0, 3.0], 2) == "2.00 (-0.48 – 4.48)" and mean_cell([]) == "—"
    assert mean_cell([1.0, 100.0], log=True).startswith("10 (")
    assert p_text(0.001234) == "0.0012" and p_text(3.4e-7) == "3.4e-07" and p_text(math.nan) == "—"
    assert number_text(None) == "—" and number_text(12345.0) == "1.23e+04" and number_text(2, 1) == "2.0"
    d = PairedDifference(0.1, 0.05, 0.15, 4, 0.002, sd=0.03)
    assert paired_cell(d, 2) == "+0.10 (+0.05 – +0.15), p = 0.002"
    assert paired_cell(d, 1, scale=100) == "+10.0 (+5.0 – +15.0), p = 0.002"
    assert holm_cell(d, 0.004, 2) == f"+0.10 (+0.05 – +0.15), p = 0.002, Holm 0.004, δ80 {d.detectable():.2f}"
    assert cost_text(5400) == "1.50 h"


def test_a_log_scale_metric_shows_its_paired_ratio():
    """``log_metrics``: the paired cell of a positive metric is the ratio ×exp(Δ) of the paired difference of
    the logs, in the printed table (every seed pair here is exactly ×2) and in the Markdown's ratio column."""
    rows = [{"beta": b, "seed": s, "status": "finished", "mse": (2.0 if b else 1.0) * (1 + 0.01 * s)}
            for b in (0.0, 1.0) for s in range(4)]  # fmt: skip
    table = summarize(rows, ["beta"], ["mse"], {"beta": 0.0}, options=TableOptions(log_metrics=("mse",)))
    assert table[1]["mse:diff_scale"] == "log" and table[1]["mse:diff"] == pytest.approx(math.log(2.0))
    assert "  ×2 (2 – 2), p = " in repr(table)
    assert "| ×2 (2 – 2) |" in table.markdown() and "mse ratio vs baseline" in table.markdown()


def test_a_metric_with_non_finite_values_says_how_many_runs_its_mean_has():
    """Two of four seeds with a NaN or inf loss: the mean and interval are of the other two (scipy's t interval),
    ``loss:n`` = 2 and the cell says "[2 of 4 finite]"; a metric every run has keeps no count (control)."""
    rows = [{"p": 1, "seed": s, "status": "finished", "loss": v, "acc": 0.5 + s / 10}
            for s, v in enumerate([1.4, float("nan"), 1.6, float("inf")])]  # fmt: skip
    table = summarize(rows, ["p"], ["loss", "acc"])
    (e,) = table
    ci = scipy.stats.t.interval(0.95, 1, loc=1.5, scale=scipy.stats.sem([1.4, 1.6]))
    assert e["n"] == 4 and e["loss:n"] == 2 and "acc:n" not in e
    assert e["loss"] == pytest.approx(1.5) and (e["loss:lo"], e["loss:hi"]) == pytest.approx(ci)
    assert "[2 of 4 finite]" in repr(table) and repr(table).count("finite]") == 1


def test_a_seed_given_twice_for_a_point_is_refused():
    """Two finished rows of point p = 1 with seed 0 would count that run twice (n = 4, a narrower interval):
    refused in one line naming the point and the seed; the same seed at two points is a pairing (control), and
    an unfinished repeat (a run restarted) does not count."""
    rows = [
        {"p": p, "seed": s, "status": "finished", "loss": 1.0 + p + s / 10} for p in (0, 1) for s in range(3)
    ]
    with pytest.raises(
        ValueError,
        match=r"^summarize: two finished runs of the point \(p=1\) have seed 0; give each seed once$",
    ):
        summarize([*rows, {**rows[3]}], ["p"], ["loss"])
    table = summarize([*rows, {**rows[3], "status": "running"}], ["p"], ["loss"], baseline={"p": 0})
    assert [e["n"] for e in table] == [3, 3] and table[1]["loss:pairs"] == 3


def test_a_baseline_that_matches_no_run_warns():
    """A float32 grid's stored 1e-3 is 0.0010000000474974513: ``baseline={"beta": 1e-3}`` matches nothing, and
    the table (no paired column) comes with a warning; the stored value gives the comparison (control)."""
    stored = 0.0010000000474974513
    rows = [{"beta": b, "seed": s, "status": "finished", "loss": 1.0 + b + s / 100}
            for b in (0.0, stored) for s in range(3)]  # fmt: skip
    with pytest.warns(RuntimeWarning, match="matches no finished run"):
        table = summarize(rows, ["beta"], ["loss"], baseline={"beta": 1e-3})
    assert not table.paired
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert summarize(rows, ["beta"], ["loss"], baseline={"beta": stored}).paired


def test_the_paired_interval_has_the_tables_level():
    """``TableOptions(level=0.9)``: the paired difference's interval is scipy's ``ttest_rel`` interval at 0.9
    (control: the 0.95 one is wider)."""
    rows = [{"x": x, "seed": s, "status": "finished", "m": v}
            for x, vals in ((0, [1.0, 1.3, 0.9, 1.1]), (1, [1.2, 1.6, 1.0, 1.5])) for s, v in enumerate(vals)]  # fmt: skip
    table = summarize(rows, ["x"], ["m"], baseline={"x": 0}, options=TableOptions(level=0.9))
    e = next(e for e in table if e["x"] == 1)
    ci = scipy.stats.ttest_rel([1.2, 1.6, 1.0, 1.5], [1.0, 1.3, 0.9, 1.1]).confidence_interval(0.9)
    assert (e["m:diff_lo"], e["m:diff_hi"]) == pytest.approx((ci.low, ci.high), abs=1e-12)
    wide = scipy.stats.ttest_rel([1.2, 1.6, 1.0, 1.5], [1.0, 1.3, 0.9, 1.1]).confidence_interval(0.95)
    assert wide.high - wide.low > e["m:diff_hi"] - e["m:diff_lo"] + 0.01
