"""tools/mutation.py: the fixed samples and the stratified kill rate of docs/testing.md, against hand computations."""

from __future__ import annotations

import hashlib
import importlib.util
import math
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
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


def test_a_suspicious_mutant_is_named_apart_and_left_out_of_the_rate(monkeypatch):
    """A held-out mutant whose test run hung (killed: mutmut's exit code is neither a result nor a timeout) is
    *suspicious*: neither killed nor survived. Ranks 41-50 as 7 killed, 2 survived, 1 suspicious give 7/9 and
    the suspicious one named apart; the control, the same mutant survived, gives 7/10."""
    monkeypatch.setattr(mutation, "equivalent", lambda: {})
    names = [f"meanfield.m.x_f__mutmut_{i}" for i in range(1, 61)]
    ranked = sorted(names, key=lambda n: hashlib.sha256(n.encode()).hexdigest())
    statuses = {n: "killed" for n in ranked}
    for n, s in zip(ranked[40:50], ["killed"] * 7 + ["survived"] * 2 + ["suspicious"]):
        statuses[n] = s
    text = mutation.holdout_table({"meanfield.m": statuses}, 40, 10)
    assert "`meanfield.m` 7/9" in text and "Not measured (1: " in text and f"`{ranked[49]}`" in text
    statuses[ranked[49]] = "survived"
    control = mutation.holdout_table({"meanfield.m": statuses}, 40, 10)
    assert "`meanfield.m` 7/10" in control and "Not measured" not in control
    table = mutation.table({"meanfield.m": {n: "suspicious" if n == ranked[0] else "killed" for n in ranked}}, 30)
    assert "| 100 % |" in table  # the 30-sample: 29 killed, 1 suspicious left out


# the committed record (tools/mutation_results.json): merge, stamps, and the table regenerated from it alone


def _names(module: str, fn: str, n: int) -> list[str]:
    return [f"{module}.{fn}__mutmut_{i}" for i in range(1, n + 1)]


def test_a_mutant_name_names_its_function():
    assert mutation._function("meanfield.studies.stats.x_holm__mutmut_3") == "x_holm"
    assert (
        mutation._function("meanfield.runs.folder.xǁRunFolderǁtruncate__mutmut_12") == "xǁRunFolderǁtruncate"
    )


def test_merged_takes_local_results_first_then_the_record_where_the_function_is_unchanged(monkeypatch):
    """Module m has f (hash 'a', 3 mutants) and g (hash now 'c', recorded as 'b'): f_1 checked here (killed) is
    the local status whatever the record says; f_2 not checked here takes the record's 'survived' (same source);
    g_1 not checked here and recorded under another source is 'not checked' and leaves the record; f_3 is in
    neither. A module only in the record comes back from its function list alone, with its statuses."""
    monkeypatch.setattr(mutation, "in_package", lambda module: True)  # this test's modules are made up
    local = {
        "meanfield.m": {
            "meanfield.m.x_f__mutmut_1": ("killed", "a"),
            "meanfield.m.x_f__mutmut_2": ("not checked", "a"),
            "meanfield.m.x_f__mutmut_3": ("not checked", "a"),
            "meanfield.m.x_g__mutmut_1": ("not checked", "c"),
        }
    }
    record = {
        "modules": {
            "meanfield.m": {"functions": {"x_f": ["a", 3], "x_g": ["b", 1]}},
            "meanfield.r": {"functions": {"x_h": ["h", 2]}},
        },
        "checked": {
            "meanfield.m.x_f__mutmut_1": {"status": "survived", "commit": "old", "date": "2026-11-30"},
            "meanfield.m.x_f__mutmut_2": {"status": "survived", "commit": "old", "date": "2026-11-30"},
            "meanfield.m.x_g__mutmut_1": {"status": "killed", "commit": "old", "date": "2026-11-30"},
            "meanfield.r.x_h__mutmut_2": {"status": "timeout", "commit": "old", "date": "2026-11-29"},
        },
    }
    found, checked = mutation.merged(local, record)
    assert found["meanfield.m"] == {
        "meanfield.m.x_f__mutmut_1": "killed",
        "meanfield.m.x_f__mutmut_2": "survived",
        "meanfield.m.x_f__mutmut_3": "not checked",
        "meanfield.m.x_g__mutmut_1": "not checked",
    }
    assert found["meanfield.r"] == {
        "meanfield.r.x_h__mutmut_1": "not checked",
        "meanfield.r.x_h__mutmut_2": "timeout",
    }
    assert checked["meanfield.m.x_f__mutmut_1"] == {
        "status": "killed",
        "commit": None,
        "date": None,
    }  # new here
    assert checked["meanfield.m.x_f__mutmut_2"]["commit"] == "old"  # carried with its stamp
    assert "meanfield.m.x_g__mutmut_1" not in checked and "meanfield.m.x_f__mutmut_3" not in checked
    # negative control: with f's source changed too, the record's f_2 no longer counts
    record["modules"]["meanfield.m"]["functions"]["x_f"][0] = "z"
    assert mutation.merged(local, record)[0]["meanfield.m"]["meanfield.m.x_f__mutmut_2"] == "not checked"


def test_a_recorded_module_that_is_no_longer_in_the_package_is_dropped():
    """A record made before a move keeps the old module (``meanfield.simulate``, now ``meanfield.stepping.simulate``):
    it is not counted beside the new one; a module of the package stays (control)."""
    record = {
        "modules": {
            "meanfield.simulate": {"functions": {"x_simulate": ["h", 2]}},
            "meanfield.stepping.simulate": {"functions": {"x_simulate": ["h", 2]}},
        },
        "checked": {},
    }
    found, _ = mutation.merged({}, record)
    assert list(found) == ["meanfield.stepping.simulate"]
    assert mutation.in_package("meanfield.stepping") and not mutation.in_package("meanfield.simulate")


def test_the_record_round_trips_and_the_documented_table_is_regenerated_from_it(tmp_path, monkeypatch):
    """write_record stamps what was measured here with the commit and date and keeps an unchanged status's first
    stamp; the table rendered from the record alone (a fresh machine: no mutants/) equals the one rendered with
    mutants/ present, write_table puts it in the doc, documented() reads it back, and --check's comparison
    notices a doc edited by hand."""
    monkeypatch.setattr(mutation, "in_package", lambda module: True)  # this test's modules are made up
    monkeypatch.setattr(mutation, "RECORD", tmp_path / "record.json")
    monkeypatch.setattr(mutation, "DOC", tmp_path / "testing.md")
    monkeypatch.setattr(mutation, "equivalent", lambda: {})
    monkeypatch.setattr(mutation, "_tool", lambda: "mutmut 3.8.1")  # CI does not install mutmut
    (tmp_path / "testing.md").write_text("# Testing\n\nprose\n")
    names = _names("meanfield.m", "x_f", 40)
    ranked = sorted(names, key=lambda n: hashlib.sha256(n.encode()).hexdigest())
    local = {"meanfield.m": {n: ("not checked", "a") for n in names}}
    for n in ranked[:30]:
        local["meanfield.m"][n] = ("killed", "a")
    local["meanfield.m"][ranked[0]] = ("survived", "a")
    for n in ranked[30:39]:  # rank 40 stays unchecked: the row is the 30-sample, not "all"
        local["meanfield.m"][n] = ("killed", "a")
    old = {
        "modules": {"meanfield.m": {"functions": {"x_f": ["a", 40]}}},
        "checked": {ranked[5]: {"status": "killed", "commit": "abc1234", "date": "2026-11-30"}},
        "holdout": {"after": 30, "size": 10},
    }
    new = mutation.write_record(local, old, "def5678", "2026-12-02")
    assert new["checked"][ranked[5]] == {"status": "killed", "commit": "abc1234", "date": "2026-11-30"}
    assert new["checked"][ranked[0]] == {"status": "survived", "commit": "def5678", "date": "2026-12-02"}
    assert len(new["checked"]) == 39 and new["holdout"] == {"after": 30, "size": 10}
    assert new["tool"] == "mutmut 3.8.1"
    assert new["modules"]["meanfield.m"]["functions"] == {"x_f": ["a", 40]}
    assert mutation.load_record() == new  # what was written is what is read
    lines = mutation.RECORD.read_text().splitlines()
    assert sum('"status"' in line for line in lines) == 39  # one line per checked mutant: diffs stay readable
    assert (
        mutation._dump({"format": 1, "modules": {}, "checked": {}})
        == '{\n "format": 1,\n "modules": {},\n "checked": {}\n}\n'
    )
    block = mutation.render(mutation.load_record())
    assert (
        mutation.merged(local, new)[0] == mutation.merged({}, new)[0]
    )  # mutants/ adds nothing the record lacks
    # the sample row: 29 of 30 killed (97 %, Wilson 83-99 %); the held-out line: ranks 31-40, 10/10
    assert "| `meanfield.m` | 40 | sample 30 | 29 | 1 | 0 | 0 | 0 | 97 % | 83–99 % |" in block
    assert "ranks 31–40" in block and "`meanfield.m` 9/9" in block
    assert "39 mutants checked: 1 on `abc1234` (2026-11-30), 38 on `def5678` (2026-12-02)" in block
    mutation.write_table(block)
    assert mutation.documented() == block and (tmp_path / "testing.md").read_text().startswith("# Testing")
    mutation.write_table(block)  # a second write replaces, never appends
    assert (tmp_path / "testing.md").read_text().count(mutation.BEGIN) == 1
    (tmp_path / "testing.md").write_text((tmp_path / "testing.md").read_text().replace("97 %", "98 %"))
    assert mutation.documented() != block  # negative control: a hand edit is noticed


def test_the_tool_stamp_names_the_installed_version_or_says_how_to_install_it(monkeypatch):
    """_tool reads the installed distribution's version; without mutmut it says what to install rather than
    failing inside importlib (CI's environment has no mutmut: only measuring needs it)."""
    monkeypatch.setattr(mutation.metadata, "version", lambda name: {"mutmut": "9.9.9"}[name])
    assert mutation._tool() == "mutmut 9.9.9"

    def missing(name):
        raise mutation.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(mutation.metadata, "version", missing)
    with pytest.raises(RuntimeError, match=r"pip install mutmut==3\.8\.1"):
        mutation._tool()


def test_the_committed_docs_table_is_the_committed_records():
    """docs/testing.md's mutation block is exactly what `python tools/mutation.py --table` renders from
    tools/mutation_results.json (CPU rules for cpu_only equivalents)."""
    if not mutation.RECORD.exists():
        pytest.skip("no record committed yet")
    assert mutation.documented() == mutation.render(mutation.load_record())
