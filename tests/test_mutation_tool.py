"""tools/mutation.py: the fixed samples and the stratified kill rate of docs/testing.md, against hand computations."""

from __future__ import annotations

import hashlib
import importlib.util
import math
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("mutation_tool", ROOT / "tools" / "mutation.py")
mutation = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(mutation)


def test_samples_are_digest_ranks_and_the_holdout_is_disjoint():
    """sample(k) is the k smallest SHA-256 digests; sample(h, offset=k) the next h: disjoint, and together the
    (k + h)-sample; a prefix property that makes the 15-sample part of the 30-sample."""
    names = [f"meanfield.m.x_f__mutmut_{i}" for i in range(1, 60)]
    by_digest = sorted(names, key=lambda n: hashlib.sha256(n.encode()).hexdigest())
    assert mutation.sample(names, 30) == by_digest[:30]
    held = mutation.sample(names, 10, offset=30)
    assert held == by_digest[30:40]
    assert not set(held) & set(mutation.sample(names, 30))
    assert mutation.sample(names, 15) == mutation.sample(names, 30)[:15]
    assert mutation.sample(names, 10, offset=55) == by_digest[55:]  # fewer where there are fewer


def test_stratified_rate_and_interval_by_hand():
    """Two modules, N = (100, 300), sampled 10 and 30 with 9 and 15 killed: p = (100·0.9 + 300·0.5)/400 = 0.6,
    Var = (1/4)²·0.09/10·0.9 + (3/4)²·0.25/30·0.9; a module checked in full (n = N) adds no variance."""
    p, low, high = mutation.stratified([(100, 9, 10), (300, 15, 30)])
    assert p == pytest.approx(0.6, abs=1e-12)
    var = (1 / 4) ** 2 * 0.09 / 10 * 0.9 + (3 / 4) ** 2 * 0.25 / 30 * 0.9
    assert high - p == pytest.approx(1.959963984540054 * math.sqrt(var), abs=1e-12)
    assert p - low == pytest.approx(high - p, abs=1e-12)
    p_full, low_full, high_full = mutation.stratified([(20, 15, 20)])
    assert (p_full, low_full, high_full) == (0.75, 0.75, 0.75)
    assert math.isnan(mutation.stratified([(5, 0, 0)])[0])  # nothing scored: no estimate


def test_wilson_interval_matches_scipy():
    """The Wilson interval against scipy.stats.binomtest(...).proportion_ci(method="wilson") at 8/10 and 30/30."""
    from scipy.stats import binomtest

    for k, n in ((8, 10), (30, 30), (1, 15)):
        ref = binomtest(k, n).proportion_ci(method="wilson")
        assert mutation.wilson(k, n) == pytest.approx((ref.low, ref.high), abs=1e-9)
    assert mutation.wilson(0, 0) == (0.0, 1.0)


def test_holdout_table_counts_only_the_ranks_after_the_given_one(monkeypatch):
    """holdout_table(found, 40, 10) scores ranks 41-50 by digest only: one module of 60 mutants where exactly
    those ten are 7 killed, 2 survived and 1 not checked gives 7/9 (a module checked in full: no variance), and
    rank 31-40's statuses (all survived here) do not count; with the default start (after rank 30) they do."""
    monkeypatch.setattr(mutation, "equivalent", lambda: {})
    names = [f"meanfield.m.x_f__mutmut_{i}" for i in range(1, 61)]
    ranked = sorted(names, key=lambda n: hashlib.sha256(n.encode()).hexdigest())
    statuses = {n: "killed" for n in ranked}
    statuses.update({n: "survived" for n in ranked[30:40]})
    for n, s in zip(ranked[40:50], ["killed"] * 7 + ["survived"] * 2 + ["not checked"]):
        statuses[n] = s
    text = mutation.holdout_table({"meanfield.m": statuses}, 40, 10)
    assert "ranks 41–50" in text and "`meanfield.m` 7/9" in text
    assert "`meanfield.m` 0/10" in mutation.holdout_table(
        {"meanfield.m": statuses}, 30, 10
    )  # the older ranks
