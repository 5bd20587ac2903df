"""Tests of the scan in d of ``experiments/feature_particles/convergence.py`` (issue 28).

- the nested fit ``L_∞ + c/(M + M0)`` against ``L_∞ + c/M`` (``offset_law_fit``) recovers known (L_∞, c, M0):
  exactly from means on the law, and within its 95 % bootstrap intervals from means moved by up to 1 SE;
  negative control: data from ``c/M`` give an M0 interval holding 0 and do not prefer the nested law;
- the reference-aware paths use the R reference values: shifting the references' set (by changing one value)
  moves the limits exactly as the linear algebra predicts, and the reference-free fits not at all;
- the report's tables show the numbers of ``result.json`` (smoke sizes);
- a scan interrupted after some networks and rerun writes the same ``result.json`` as an uninterrupted one,
  and the rerun trains only the missing networks (smoke sizes).
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

EXP = Path(__file__).resolve().parents[2] / "experiments" / "feature_particles"
MS = np.array([16, 64, 256, 1024, 4096], dtype=float)
SD = np.array([2e-3, 3e-4, 2.6e-4, 8.3e-5, 7e-5])  # the replicate SDs of the committed wide study, per M
REPS = 32
TRUE = dict(L=3.3e-3, c=0.15, M0=20.0)  # about what the committed wide study fits at d = 16


@pytest.fixture(scope="module")
def conv():
    spec = importlib.util.spec_from_file_location("fp_convergence_scan", EXP / "convergence.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def synthetic(L: float, c: float, M0: float, offsets, seed: int = 0) -> np.ndarray:
    """Replicates ``(K, REPS)`` whose sample mean is exactly ``L + c/(M + M0) + offsets_k·SE_k`` and whose
    sample SD is exactly ``SD_k`` (``SE_k = SD_k/√REPS``)."""
    xi = np.random.default_rng(seed).standard_normal((MS.size, REPS))
    xi = (xi - xi.mean(1, keepdims=True)) / xi.std(1, ddof=1, keepdims=True)
    law = L + c / (MS + M0)
    return (law + np.asarray(offsets) * SD / np.sqrt(REPS))[:, None] + SD[:, None] * xi


# the means' offsets from the law, in SEs: |offset| ≤ z = 1, signs alternating (the hardest case for M0)
OFFSETS = np.array([0.8, -1.0, 0.6, -0.7, 1.0])


def test_offset_law_fit_recovers_a_known_law_exactly(conv):
    fit = conv.offset_law_fit(MS, synthetic(**TRUE, offsets=np.zeros(5)), n_boot=200)
    m0 = fit["c_over_M_plus_M0"]
    assert m0["M0"] == pytest.approx(TRUE["M0"], rel=1e-3)
    assert m0["c"] == pytest.approx(TRUE["c"], rel=1e-4) and m0["L_inf"] == pytest.approx(TRUE["L"], rel=1e-6)
    assert m0["chi2"] < 1e-6 and m0["dof"] == 2 and not m0["M0_at_edge"]
    # the nested c/M cannot absorb M0 = 20 at these SEs: rejected
    assert fit["c_over_M"]["chi2"] > 30 and fit["p_value"] < 1e-6 and fit["preferred"] == "c/(M+M0)"


def test_offset_law_fit_covers_the_truth_from_means_within_one_se(conv):
    fit = conv.offset_law_fit(MS, synthetic(**TRUE, offsets=OFFSETS), n_boot=2000)
    m0 = fit["c_over_M_plus_M0"]
    for key, true in (("M0", "M0"), ("c", "c"), ("L_inf", "L")):
        lo, hi = m0[f"{key}_ci"]
        assert lo < TRUE[true] < hi, (key, lo, hi)
        assert lo <= m0[key] <= hi
    # the smallest error this test detects: an M0 outside [lo, hi], i.e. off by more than about ±10 here
    lo, hi = m0["M0_ci"]
    assert 5 < lo and hi < 40
    assert fit["preferred"] == "c/(M+M0)"
    assert m0["chi2"] < 5  # 2 degrees of freedom, offsets of ≤ 1 SE


def test_offset_law_fit_negative_control_data_from_c_over_M(conv):
    fit = conv.offset_law_fit(MS, synthetic(TRUE["L"], TRUE["c"], 0.0, offsets=OFFSETS), n_boot=2000)
    lo, hi = fit["c_over_M_plus_M0"]["M0_ci"]
    assert lo < 0 < hi
    assert fit["p_value"] > 0.05 and fit["preferred"] == "c/M"
    assert fit["c_over_M"]["c"] == pytest.approx(TRUE["c"], rel=0.05)
    assert fit["c_over_M"]["c_ci"][0] < TRUE["c"] < fit["c_over_M"]["c_ci"][1]


def test_the_reference_aware_paths_use_every_reference(conv):
    values = synthetic(**TRUE, offsets=OFFSETS)
    mu, s = TRUE["L"], 2e-5
    refs = np.array([mu - s, mu, mu + s])
    moved = np.array([mu - s, mu, mu - 2 * s])  # one value changed: the set shifted by −s, the same SD
    a, b = (conv.analyse(MS, values, r, n_boot=400) for r in (refs, moved))
    assert b["reference"]["mean"] - a["reference"]["mean"] == pytest.approx(-s, rel=1e-9)
    assert b["reference"]["se"] == pytest.approx(a["reference"]["se"], rel=1e-9)
    # the naive estimator takes the reference mean as the limit
    exact = b["estimators"]["exact"]["limit"] - a["estimators"]["exact"]["limit"]
    assert exact == pytest.approx(-s, rel=1e-9)
    # the propagated one: its limit follows the reference, part of the way (the replicates pull too)
    shift = b["estimators"]["reference"]["limit"] - a["estimators"]["reference"]["limit"]
    assert -s <= shift < -0.05 * s
    # the reference-free ones do not see the references at all
    for e in ("fit", "differences"):
        assert b["estimators"][e] == a["estimators"][e]
    assert b["law"]["free"] == a["law"]["free"]
    # the c/M fit with the reference point is linear with fixed weights: L_∞ and c move by the hat-matrix
    # entries of the point M = ∞ times −s, and so do their bootstrap intervals (the same draws)
    se2 = values.var(1, ddof=1) / REPS
    w = np.append(1 / se2, 1 / a["reference"]["se"] ** 2)
    X = np.stack([np.ones(6), np.append(1 / MS, 0.0)], 1)  # (K + 1, 2)
    hat = np.linalg.solve(X.T @ (w[:, None] * X), X.T * w)  # (2, K + 1): (L_∞, c) per unit of each mean
    fa, fb = a["law"]["with_reference"]["c_over_M"], b["law"]["with_reference"]["c_over_M"]
    assert fb["L_inf"] - fa["L_inf"] == pytest.approx(-s * hat[0, -1], rel=1e-6)
    assert fb["c"] - fa["c"] == pytest.approx(-s * hat[1, -1], rel=1e-6)
    assert np.allclose(np.subtract(fb["L_inf_ci"], fa["L_inf_ci"]), -s * hat[0, -1], rtol=1e-6, atol=1e-12)
    assert 0.1 < hat[0, -1] < 1  # the test has power: the reference carries a real share of L_∞
    # a reference of finite size sits at its M: the same prediction with x = 1/M_ref for that point
    fa, fb = (conv.offset_law_fit(MS, values, r, M_ref=65_536, n_boot=400)["c_over_M"] for r in (refs, moved))
    X[-1, 1] = 1 / 65_536
    hat = np.linalg.solve(X.T @ (w[:, None] * X), X.T * w)
    assert fb["L_inf"] - fa["L_inf"] == pytest.approx(-s * hat[0, -1], rel=1e-6)
    assert fb["c"] - fa["c"] == pytest.approx(-s * hat[1, -1], rel=1e-6)
    # every reference counts, the first as well as the last
    c = conv.analyse(MS, values, refs + np.array([s, 0, 0]), n_boot=400)
    assert c["reference"]["mean"] != a["reference"]["mean"]
    assert c["law"]["with_reference"] != a["law"]["with_reference"]
    with pytest.raises(ValueError, match="≥ 2"):
        conv.offset_law_fit(MS, values, refs[:1])


def test_an_interrupted_scan_resumes_to_the_same_result(conv, tmp_path, monkeypatch):
    config = conv.scan_config("scan_smoke")
    total = len(conv.scan_jobs(config))
    whole = conv.run_scan(tmp_path / "whole", config, progress=False)
    assert set(whole["scan"]) == {str(d) for d in config["ds"]}

    calls = []
    run_point = conv.run_point

    def interrupted(*args, **kwargs):
        if len(calls) == 5:
            raise KeyboardInterrupt
        calls.append(args)
        return run_point(*args, **kwargs)

    monkeypatch.setattr(conv, "run_point", interrupted)
    with pytest.raises(KeyboardInterrupt):
        conv.run_scan(tmp_path / "parts", config, progress=False)
    points = sorted((tmp_path / "parts" / "points").rglob("*.json"))
    assert len(points) == 5 and not (tmp_path / "parts" / "result.json").exists()
    assert not list((tmp_path / "parts").rglob("*.tmp"))  # no half-written file

    calls.clear()
    monkeypatch.setattr(conv, "run_point", lambda *a, **k: calls.append(a) or run_point(*a, **k))
    conv.run_scan(tmp_path / "parts", config, progress=False)
    assert len(calls) == total - 5  # only the missing networks were trained
    result = (tmp_path / "parts" / "result.json").read_bytes()
    assert result == (tmp_path / "whole" / "result.json").read_bytes()
    r = json.loads((tmp_path / "whole" / "result.json").read_text())
    a = r["scan"]["4"]["betas"]["0.001"]
    assert len(a["reference"]["values"]) == config["n_refs"] and len(a["loss"]["values"]) == len(config["Ms"])
    assert set(a["estimators"]) == {"reference", "fit", "differences", "exact"}
    # the split of the mean loss is exact: mean_r L_r = E_x (f̄ − y)² + E_x var_r f (population variance)
    n = config["reps"]
    split = np.add(a["fluctuation"]["bias_squared"], np.multiply(a["fluctuation"]["variance"], (n - 1) / n))
    assert np.allclose(split, a["loss"]["mean"], rtol=1e-5)
    parts = np.add(a["fluctuation"]["variance"], a["fluctuation"]["mean_predictor_excess"])
    assert np.allclose(parts, a["excess"]["mean"], rtol=1e-4, atol=1e-7)  # excess = spread + mean predictor
    assert len(list((tmp_path / "whole" / "points").rglob("*.npy"))) == total
    # a folder resumes only its own configuration
    with pytest.raises(SystemExit, match="another configuration"):
        conv.run_scan(tmp_path / "parts", {**config, "steps": config["steps"] + 1}, progress=False)


def test_report_tables_show_the_scan_result_numbers(conv, tmp_path, monkeypatch):
    """``report.convergence_scan_tables`` on a smoke scan: each cell is the number of ``result.json`` it names
    (the excess ± 1.96 SE, the exponent of every estimator, M0 and c of both nested fits, the i.i.d.
    constant), rows for every d; a folder without a scan says so instead of failing."""
    monkeypatch.syspath_prepend(str(EXP))  # report.py imports convergence.py by name, as when run as a script
    spec = importlib.util.spec_from_file_location("fp_report_scan", EXP / "report.py")
    report = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(report)
    monkeypatch.setattr(report, "RESULTS", tmp_path)
    assert "not run" in report.convergence_scan_tables()
    config = conv.scan_config("scan_smoke")
    r = conv.run_scan(tmp_path / "convergence_scan", config, progress=False)
    text = report.convergence_scan_tables()
    for d in config["ds"]:
        a = r["scan"][str(d)]["betas"]["0.001"]
        mean, se = a["excess"]["mean"][0], a["excess"]["se"][0]
        assert f"| {d} | 0.001 | {report.number_text(mean)} ± {report.number_text(1.96 * se)} |" in text
        slope = a["estimators"]["reference"]["slope"]
        assert f"| {d} | 0.001 | {slope:.3f} (" in text
        for label, key in (("free L_∞", "free"), ("with refs", "with_reference")):
            off = a["law"][key]["c_over_M_plus_M0"]
            assert f"| {d} | 0.001 | {label} | {off['M0']:.1f} (" in text
        assert report.gci(a["iid_constant"]["trained"]) in text
    assert "M = 8 | M = 16 | M = 32 | M = 64" in text
