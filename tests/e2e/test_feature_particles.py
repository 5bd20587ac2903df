"""Tests of the feature-particles experiment (issue 13): its configs run, its arms mean what the docs say.

- the smoke presets of ``experiments/feature_particles/*.toml`` run through ``meanfield.runs.run`` (particles
  and the ordinary network, teacher–student and images on tiny idx files) and evaluate the new metrics;
- the arms of the table: the seed's literal update (no ×M, λ in loss units) adds noise of variance
  ``2·lr·λ`` and drift ``lr·∇L``; ×M in loss units multiplies both by M; mean-field units give ``2·lr·λ``
  with drift ``lr·M·∇L`` (negative controls: the other arms' values are rejected);
- the ordinary network (``kind = "mlp"``) is a plain ``nn.Linear`` network outside every noisy group;
- the metrics of a constructed network (every unit on the teacher; all on one direction) have known values;
- the coupled initialisations of ``convergence.py`` are nested.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from meanfield.nn import FeatureParticles
from meanfield.optim import Langevin
from meanfield.runs import run
from meanfield.tasks import TASKS
from meanfield.tasks.regression import WideMLP, particle_metrics

EXP = Path(__file__).resolve().parents[2] / "experiments" / "feature_particles"
FINAL = ("test_mse", "alignment_max", "aligned", "coverage", "modes", "collapse", "live", "q", "q_abs_a")


@pytest.mark.parametrize("kind", ["particles", "mlp"])
def test_teacher_student_smoke_preset_runs_and_reports_the_metrics(tmp_path, kind):
    result = run(
        EXP / "teacher_student.toml",
        tmp_path / kind,
        preset="smoke",
        overrides=[f"model.kind={kind}"],
        quiet=True,
    )
    assert result.status == "finished" and result.step == 20
    for key in FINAL:
        assert key in result.final and math.isfinite(result.final[key]), key
    assert 0 <= result.final["coverage"] <= 1 and result.final["modes"] >= 0


def _idx(array: np.ndarray) -> bytes:
    header = bytes([0, 0, 0x08, array.ndim]) + np.array(array.shape, dtype=">u4").tobytes()
    return header + array.astype(np.uint8).tobytes()


def test_images_smoke_preset_runs_on_tiny_idx_files(tmp_path):
    rng = np.random.default_rng(0)
    folder = tmp_path / "fashion-mnist"
    folder.mkdir()
    for split, n in (("train", 64), ("t10k", 32)):
        (folder / f"{split}-images-idx3-ubyte.gz").write_bytes(
            gzip.compress(_idx(rng.integers(0, 256, (n, 5, 4), dtype=np.uint8)))
        )
        (folder / f"{split}-labels-idx1-ubyte.gz").write_bytes(
            gzip.compress(_idx(rng.integers(0, 10, n, dtype=np.uint8)))
        )
    for kind in ("particles", "mlp"):
        result = run(
            EXP / "images.toml",
            tmp_path / kind,
            preset="smoke",
            overrides=[f"data.root={tmp_path}", f"model.kind={kind}"],
            quiet=True,
        )
        assert result.status == "finished"
        assert 0 <= result.final["accuracy"] <= 1
        assert result.final["accuracy"] == pytest.approx(1 - result.final["test_error"])
    # the particle classifier: logits (N, 10) from a FeatureParticles layer with vector outputs and biases
    from meanfield.tasks.regression import ImageData, ImageModel

    exp = TASKS["image_classification"].build(
        ImageData(root=str(tmp_path)),
        ImageModel(n_particles=8),
        batch_size=16,
        seed=0,
        device=torch.device("cpu"),
        dtype=torch.float32,
    )
    assert isinstance(exp.model, FeatureParticles) and exp.model.a.shape == (8, 10)
    assert exp.model.b is not None and exp.model.w.shape == (8, 20)


def _one_step(M: int, lr: float, beta: float, grad: float, **options) -> torch.Tensor:
    """The increments of one Langevin step on M particles in R^400 whose raw gradient is the constant ``grad``."""
    theta = nn.Parameter(torch.zeros(M, 400, dtype=torch.float64))
    opt = Langevin([{"params": [theta], "n_particles": M}], lr=lr, beta=beta, seed=1, **options)
    theta.grad = torch.full_like(theta, grad)
    opt.step()
    return theta.detach()


ARMS = {  # name: (options, noise variance / (2·lr·λ), drift / (lr·∇L))
    "seed_literal": (dict(mean_field_scaling=False, temperature_convention="loss"), 1, 1),
    "times_M_loss_units": (dict(temperature_convention="loss"), "M", "M"),
    "mean_field": (dict(temperature_convention="mean_field"), 1, "M"),
}


@pytest.mark.parametrize("arm", sorted(ARMS))
def test_each_arm_has_the_noise_and_drift_of_its_formula(arm):
    """Variance within 5 SE (SE = var·sqrt(2/n), n = 32·400 entries: 1.25 %); the other arms' variances,
    a factor M = 32 away, are rejected (negative controls). The drift is exact."""
    options, noise, drift = ARMS[arm]
    M, lr, lam = 32, 0.1, 0.3
    factor = {1: 1.0, "M": float(M)}
    x = _one_step(M, lr, lam, 0.0, **options)
    var, n = float(x.var()), x.numel()
    target = 2 * lr * lam * factor[noise]
    assert abs(var - target) <= 5 * target * math.sqrt(2 / n), (var, target)
    for other in {1.0, float(M)} - {factor[noise]}:
        assert abs(var - 2 * lr * lam * other) > 5 * 2 * lr * lam * other * math.sqrt(2 / n)
    y = _one_step(M, lr, 0.0, 0.01, **options)  # β = 0: the drift alone
    assert torch.allclose(y, torch.full_like(y, -lr * 0.01 * factor[drift]))


def test_wide_mlp_is_a_plain_network_in_no_noisy_group():
    g = torch.Generator().manual_seed(0)
    net = WideMLP(5, 7, "relu", generator=g, dtype=torch.float64)
    X = torch.randn(9, 5, dtype=torch.float64)
    ref = (torch.relu(X @ net.w.T + net.hidden_layer.bias) @ net.a) + net.readout.bias  # (9,)
    assert torch.allclose(net(X), ref)
    groups = Langevin.param_groups_for(net)
    assert len(groups) == 1 and groups[0]["noise"] is False
    particle_groups = Langevin.param_groups_for(FeatureParticles(5, 7, "relu"))
    assert particle_groups[0]["noise"] is True and particle_groups[0]["n_particles"] == 7
    vec = WideMLP(5, 7, "relu", out_features=3, generator=g)
    assert vec.a.shape == (7, 3) and vec(torch.randn(2, 5)).shape == (2, 3)


def test_particle_metrics_of_constructed_networks():
    teacher = torch.eye(6)[:2]  # (K=2, d=6)
    net = FeatureParticles(6, 8, "relu")
    with torch.no_grad():
        net.w.copy_(torch.cat([teacher[0].repeat(4, 1), -teacher[1].repeat(4, 1)]))
        net.a.fill_(1.0)
    m = particle_metrics(net, teacher, "relu")
    assert (m["aligned"], m["coverage"], m["modes"], m["live"]) == (1.0, 1.0, 2.0, 1.0)
    assert m["collapse"] == 1.0  # four copies of each direction
    with torch.no_grad():  # every unit on one direction: aligned stays 1, coverage halves
        net.w.copy_(teacher[0].repeat(8, 1))
    m = particle_metrics(net, teacher, "relu")
    assert (m["aligned"], m["coverage"], m["modes"]) == (1.0, 0.5, 1.0)
    with torch.no_grad():  # the units on the first direction die: coverage counts the live ones only
        net.w.copy_(torch.cat([teacher[0].repeat(4, 1), teacher[1].repeat(4, 1)]))
        net.a[:4] = 0.0
    m = particle_metrics(net, teacher, "relu")
    assert (m["coverage"], m["live"], m["modes"]) == (0.5, 0.5, 1.0)
    assert m["q"] == 1.0 and m["q_abs_a"] == 1.0  # every unit in the teacher span
    # half the units orthogonal to the teacher: q = 1/2; |a|-weighted: the weights decide
    with torch.no_grad():
        net.w.copy_(torch.cat([teacher[0].repeat(4, 1), torch.eye(6)[5].repeat(4, 1)]))
        net.a.copy_(torch.tensor([3.0, 3.0, 3.0, 3.0, -1.0, -1.0, -1.0, -1.0]))
    m = particle_metrics(net, teacher, "relu")
    assert math.isclose(m["q"], 0.5, abs_tol=1e-7) and math.isclose(m["q_abs_a"], 0.75, abs_tol=1e-7)
    assert m["aligned"] == 0.5  # the threshold statistic agrees here; q needs no threshold


def test_convergence_initialisations_are_nested():
    spec = importlib.util.spec_from_file_location("fp_convergence", EXP / "convergence.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    a_big, w_big = module.init_particles(1500, 3)
    for m in (1, 16, 1024, 1100):
        a, w = module.init_particles(m, 3)
        assert torch.equal(a, a_big[:m]) and torch.equal(w, w_big[:m])
    a_other, _ = module.init_particles(16, 4)
    assert not torch.equal(a_other, a_big[:16])  # another replicate: another sequence
    assert torch.allclose(w_big.norm(dim=1), torch.ones(1500)) and float(a_big.abs().max()) <= module.A


def test_the_cifar50_guard_refuses_a_folder_begun_at_another_lr(tmp_path):
    """run_all.sh's cifar50 guard (its inline Python, run here as the script runs it): a sweep.json all of whose
    recorded commands carry the lr passes; one where an earlier command ran another lr, or a legacy file
    without "commands" at another lr, is refused (exit status 1)."""
    import re
    import subprocess
    import sys

    script = (Path(__file__).resolve().parents[2] / "experiments" / "feature_particles" / "run_all.sh").read_text()
    (guard,) = re.findall(r"python -c '(.*?)' \"\$dir/sweep.json\" \"\$3\"", script, re.S)
    lr = "optim.lr=3e-3"

    def verdict(spec: dict) -> int:
        path = tmp_path / "sweep.json"
        path.write_text(json.dumps(spec))
        return subprocess.run([sys.executable, "-c", guard, str(path), lr]).returncode

    same = {"overrides": ["data.dataset=cifar10", lr]}
    other = {"overrides": ["data.dataset=cifar10", "optim.lr=1e-2"]}
    assert verdict({**same, "commands": [same, same]}) == 0 and verdict(same) == 0
    assert verdict({**same, "commands": [other, same]}) == 1  # begun at another lr, resumed at this one
    assert verdict(other) == 1


def test_anchor_sensitivity_reads_the_crossing_half_way_to_each_anchor(monkeypatch):
    """``anchor_sensitivity.table`` on hand-made curves (every seed equal, so the bootstrap is exact): at d the
    aligned fraction is u + 2, u + 1.5, u + 0.5 at β = 1e-5, 1e-4, 1e-3 (u the uniform-law level), so anchored
    at 1e-5 the level u + 1 is crossed half way (in log β) between 1e-4 and 1e-3: β_half = 10^−3.5 at every d,
    exponent 0. Anchored at 1e-4 the level is u + 1 − 0.25 = u + 0.75: crossed at 1e-4·10^(0.75) (fraction 3/4).
    The control: an anchor that is not on the grid gives no crossing."""
    monkeypatch.syspath_prepend(str(EXP))
    spec = importlib.util.spec_from_file_location("fp_anchor", EXP / "anchor_sensitivity.py")
    anchor = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(anchor)
    monkeypatch.setattr(anchor, "ANCHORS", (1e-5, 1e-4, 3e-5))
    monkeypatch.setattr(anchor._report, "N_BOOT", 20)  # the bootstrap is exact here (equal seeds): keep it short
    curves = {}
    for d in (8, 16, 32):
        u = anchor._report.uniform_level("aligned", d, anchor.K, anchor.M)
        curves[d] = {b: {s: {"aligned": u + v} for s in range(3)} for b, v in ((1e-5, 2.0), (1e-4, 1.5), (1e-3, 0.5))}
    rows = anchor.table(curves, "aligned")
    for d in (8, 16, 32):
        assert rows[0]["const"][d][0] == pytest.approx(10**-3.5 * d / 4, rel=1e-9)
        assert rows[1]["const"][d][0] == pytest.approx(1e-4 * 10**0.75 * d / 4, rel=1e-9)
    assert rows[0]["p"][0] == pytest.approx(0.0, abs=1e-9) and rows[1]["p"][0] == pytest.approx(0.0, abs=1e-9)
    assert rows[2]["const"] == {} and rows[2]["p"] is None  # control: 3e-5 is not a β of these curves


def _report(monkeypatch, name: str = "fp_report_glance"):
    monkeypatch.syspath_prepend(str(EXP))
    spec = importlib.util.spec_from_file_location(name, EXP / "report.py")
    report = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(report)
    return report


def test_glance_words_an_image_comparison_by_the_pages_rule(monkeypatch):
    """``report.glance_table``'s image rows: a difference whose Holm p is < 0.05 is established (bold), one
    whose CI excludes 0 only before Holm is "not established", a CI that contains 0 is "no difference as large
    as δ80"; the numbers are the accuracy difference ×100 to 2 significant digits with a true minus sign.
    Control: the same difference at Holm 0.062 is not written as established."""
    from meanfield.studies.stats import PairedDifference

    report = _report(monkeypatch)
    lower = PairedDifference(mean=-0.03222, lo=-0.05102, hi=-0.01342, n=5, p_value=0.0089, sd=0.0151)
    null = PairedDifference(mean=-0.00018, lo=-0.00347, hi=0.00311, n=5, p_value=0.89, sd=0.00265)

    def row(d, q, base="adam_mlp_lr1e-3"):
        images = {"cifar10": {"compared": {("mean_field", base): (d, q)}}}
        (line,) = [x for x in report.glance_table({}, images, {}, []).splitlines() if x.startswith("| lower")]
        return line

    assert "| **accuracy lower** | −3.2 points [−5.1, −1.3] |" in row(lower, 0.01)
    assert "| accuracy lower, not established | −3.2 points [−5.1, −1.3] |" in row(lower, 0.062)
    assert "**" not in row(lower, 0.062) and "| 0.062 | 5 pairs |" in row(lower, 0.062)  # the control
    assert "| no difference as large as δ80 | −0.018 points [−0.35, +0.31] |" in row(null, 1.0)


def test_glance_reuses_the_paired_cells_of_the_committed_image_table(monkeypatch):
    """``image_table`` returns the values of its paired cells: each (difference, Holm p) renders to a cell that
    is in the table's own text, so the At-a-glance row quotes the table's Holm p, not a recomputed one. Control:
    a Holm p of another cell of the table does not render to a cell of this comparison."""
    report = _report(monkeypatch)
    if not (report.RESULTS / "fmnist").is_dir():
        pytest.skip("no committed results/fmnist")
    text, result = report.image_table("fmnist", report.IMAGE_BASELINES)
    compared = result["compared"]
    assert len(compared) == 12  # the table's legend: Holm over the 12 paired cells
    for d, q in compared.values():
        assert report.holm_cell(d, q, 4) in text
    d, q = compared[("mean_field", "adam_mlp_lr1e-3")]
    _, q_other = compared[("seed_schedule", "adam_mlp_lr1e-3")]
    assert report.holm_cell(d, q_other, 4) not in text


def test_law_anchored_reads_the_aligned_crossings_and_their_exponents(monkeypatch):
    """``report.law_anchored``: from ``k2_comparison_table``'s crossings, the aligned fraction's (runs, law) per d
    and the slopes of log β against log d — exact here (β ∝ d^−1.5 and d^−1); q's crossings are not read (a
    control: they would give another slope), and fewer than three d give nothing."""
    report = _report(monkeypatch, "fp_report_law")
    cross = {("aligned", d): (0.1 * d**-1.5, None, 0.2 / d) for d in (8, 16, 32)}
    cross |= {("q", d): (1.0, None, 1.0) for d in (8, 16, 32)}
    got = report.law_anchored({"cross": cross})
    assert got["runs"] == {d: pytest.approx(0.1 * d**-1.5) for d in (8, 16, 32)}
    assert got["exponent"] == (pytest.approx(-1.5), pytest.approx(-1.0))
    assert math.isnan(got["anchor_shift"])  # not measured: no anchor sensitivity in the result
    assert report.law_anchored({"cross": cross, "anchor_shift": {"aligned": (0.07, -1.3)}})["anchor_shift"] == 0.07
    del cross[("aligned", 32)]
    assert report.law_anchored({"cross": cross}) == {} and report.law_anchored({}) == {}


def test_law_anchor_sensitivity_reads_half_at_both_anchors(monkeypatch):
    """``report.law_anchor_sensitivity``: hand-made laws, flat at uniform + 2h from β = 1e-5 up to a crossing β
    (0.1, 1e-2, 1e-3 for d = 8, 16, 32) where they equal uniform + h, lower beyond: both anchors (1e-5, 1e-4)
    read the same half level, met exactly at the crossing β, so no shift and the exponent log(0.1)/log(2) =
    −3.32. Control: raising the coldest value alone by h/2 moves the crossing read from it to 10^−0.25 of the
    grid point (log-linear interpolation), so the shift is exactly 10^0.25 − 1 while the 1e-4 exponent stays."""
    report = _report(monkeypatch, "fp_report_law_anchor")
    betas, h = [1.0, 0.3, 0.1, 1e-2, 1e-3, 1e-4, 1e-5], 0.1
    cross_at = {8: 0.1, 16: 1e-2, 32: 1e-3}

    def law(d, bump=0.0):
        curve = {"beta": betas, "d": d}
        for stat in report.INTENSIVE:
            u = report.uniform_level(stat, d, 2, 128)
            curve[stat] = [u + (h if b == cross_at[d] else 2 * h if b < cross_at[d] else h / 3) for b in betas]
            curve[stat][-1] += bump
        return curve

    text, shifts = report.law_anchor_sensitivity({d: law(d) for d in cross_at})
    ascending = {d: {k: (v[::-1] if isinstance(v, list) else v) for k, v in law(d).items()} for d in cross_at}
    assert report.law_anchor_sensitivity(ascending) == (text, shifts)  # the grid's order does not matter
    eight = " | ".join(report.number_text(c * d / 4) for d, c in cross_at.items())
    assert f"| aligned | 1e-5 | {eight} | -3.32 |  |" in text and f"| aligned | 1e-4 | {eight} | -3.32 | 0.0 % |" in text
    assert set(shifts) == set(report.INTENSIVE) and shifts["q"] == (pytest.approx(0, abs=1e-12), pytest.approx(-3.3219, abs=1e-4))
    _, moved = report.law_anchor_sensitivity({d: law(d, bump=h / 2) for d in cross_at})
    assert moved["q"][0] == pytest.approx(10**0.25 - 1) and moved["q"][1] == pytest.approx(shifts["q"][1])
    assert report.law_anchor_sensitivity({8: law(8), 16: law(16)}) == ("", {})  # fewer than three d


def test_glance_states_the_laws_anchor_shift_unrounded_down(monkeypatch):
    """The λ ≈ 1 row of ``report.glance_table`` gives the law's own anchor shift to a tenth of a percent (0.0725
    reads "≤ 7.2 %", never a "≤ 7 %" that the shift exceeds) and leaves the phrase out when the shift is NaN."""
    report = _report(monkeypatch, "fp_report_glance_law")
    law = {"runs": {8: 0.0021, 16: 0.00095, 32: 0.00043}, "law": {8: 0.002, 16: 0.00074, 32: 0.00031},
           "exponent": (-1.16, -1.34), "anchor_shift": 0.0725}  # fmt: skip
    lam = {"crossings": {8: 0.055, 16: 0.010, 32: 0.0015}}

    def row(law):
        text = report.glance_table({}, {}, lam, [], law=law)
        return next(x for x in text.splitlines() if x.startswith("| behaviour changes"))

    assert "≤ 7.2 % when the law's own anchor moves from its coldest β to 1e-4" in row(law)
    assert "anchor moves" not in row(law | {"anchor_shift": math.nan})
