"""The 6 × 256 study of issue 27: its configuration (``experiments/particle_attention/scale.toml``), the sweep
script, the bf16/compile task variant, the primary-test report and the step benchmark. Nothing here trains
the study's model: the smoke preset runs in seconds, the full-size models are only built."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from meanfield.runs import load_config, run
from meanfield.runs.loop import build_experiment, check_config, preflight

ROOT = Path(__file__).resolve().parents[2]
HERE = ROOT / "experiments" / "particle_attention"
CONFIG = HERE / "scale.toml"
SCRIPT = HERE / "run_scale.sh"
PRIMARY = ("mha8", "p8", "p8-b1e-3", "p8-cos1e-2", "p16", "p32")
SECONDARY = ("p8-b1e-5", "p8-b1e-4", "p8-b1e-2", "p8-b3e-2", "p8-cos1e-3", "p16-w32", "p32-w32")

# every metric the seed names, as the run logs it: validation loss and perplexity, training-loss smoothness,
# head similarity (and output effective rank), gradient variance, drop-half, corruption robustness
SEED_METRICS = (
    "val_loss",
    "val_ppl",
    "val_bpc",
    "loss_roughness",
    "head_sim",
    "head_sim_l0",
    "head_sim_l1",
    "erank_frac",
    "grad_var_attn",
    "grad_rel_var_attn",
    "half_random_gap",
    "half_importance_gap",
    "half_farthest_gap",
    "half_random_ppl",
    "corrupt_gap",
    "corrupt_loss",
    "corrupt_ppl",
)


def _holm_by_hand(p: list[float]) -> list[float]:
    """Holm's step-down adjustment written out: sort, multiply the k-th smallest by (m − k), running maximum,
    cap at 1; nan stays nan and does not count in m."""
    finite = sorted((q, i) for i, q in enumerate(p) if math.isfinite(q))
    out, running = [math.nan] * len(p), 0.0
    for k, (q, i) in enumerate(finite):
        running = max(running, min(1.0, (len(finite) - k) * q))
        out[i] = running
    return out


def _module(name: str, path: Path):
    sys.path.insert(0, str(path.parent))
    spec = importlib.util.spec_from_file_location(f"scale_{name}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_the_study_configuration_is_the_seeds_model():
    cfg = check_config(load_config(CONFIG))
    assert (cfg.model["d_model"], cfg.model["n_layers"], cfg.model["n_heads"]) == (256, 6, 8)
    assert (cfg.data["block_size"], cfg.train.batch_size) == (128, 16)
    assert cfg.data["dataset"] == "tiny_shakespeare" and cfg.data["train_split"] == "train"
    assert cfg.data["eval_blocks"] == 0 and cfg.data["grad_stats"] and cfg.data["probe_blocks"] > 0
    assert cfg.train.steps >= 2000 and cfg.threads == 1


def test_smoke_preset_runs_and_logs_every_metric_the_seed_names(tmp_path):
    result = run(CONFIG, tmp_path / "run", preset="smoke+p8-b1e-3", quiet=True)
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "finished" and result.step == summary["steps"]
    final = summary["final"]
    for key in SEED_METRICS:
        assert key in final and math.isfinite(final[key]), key
    evaluations = [r for r in result.metrics if "val_loss" in r]
    assert len(evaluations) >= 2  # a curve, not only the end
    groups = result.metrics[-1]["groups"]
    assert groups[0]["noise_rms"] > 0 and groups[-1]["noise_rms"] == 0  # noise on the particles only


@pytest.mark.parametrize("arm", PRIMARY + SECONDARY)
def test_every_arm_builds_at_the_smoke_size(arm):
    preflight(load_config(CONFIG, f"smoke+{arm}"))


def test_the_width_d_over_m_arms_have_the_baselines_parameters_at_full_size():
    """mha8, p8, p16, p32 (width d/M): the same parameter count at 6 × 256; the fixed-width family more."""

    def count(arm: str) -> int:
        cfg = check_config(load_config(CONFIG, arm, ["data.eval_blocks=1"]))
        return sum(p.numel() for p in build_experiment(cfg, torch.device("cpu")).model.parameters())

    equal = {arm: count(arm) for arm in ("mha8", "p8", "p16", "p32")}
    assert len(set(equal.values())) == 1, equal
    assert count("p16-w32") > equal["p8"] and count("p32-w32") > count("p16-w32")


def test_cosine_arm_anneals_to_zero():
    cfg = load_config(CONFIG, "p8-cos1e-2")
    assert cfg["optim"]["beta"] == {"kind": "cosine", "start": 1e-2, "end": 0.0}


@pytest.mark.parametrize(
    "autocast, compile_", [("bf16", False), pytest.param("none", True, marks=pytest.mark.slow)]
)
def test_fast_lm_variant_runs_and_keeps_the_float32_state(tmp_path, monkeypatch, autocast, compile_):
    monkeypatch.syspath_prepend(str(HERE))
    overrides = ["task=fast_lm:TASK", f"model.autocast={autocast}", f"model.compile={str(compile_).lower()}"]
    run(CONFIG, tmp_path / "run", preset="smoke", overrides=overrides, quiet=True)
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "finished" and math.isfinite(summary["final"]["val_loss"])
    state = torch.load(sorted((tmp_path / "run" / "checkpoints").glob("*.pt"))[-1], weights_only=True)[
        "model"
    ]
    assert all(t.dtype == torch.float32 for t in state.values() if t.is_floating_point())
    assert not any("_orig_mod" in k for k in state)  # compiled in place: the plain module's keys


def test_run_scale_refuses_unknown_stages_and_too_few_seeds():
    assert subprocess.run(["bash", str(SCRIPT)], capture_output=True).returncode == 2
    too_few = subprocess.run(["bash", str(SCRIPT), "main", "5"], capture_output=True, text=True)
    assert too_few.returncode == 2 and "at least 8" in too_few.stderr
    bad = subprocess.run(
        ["bash", str(SCRIPT), "pilot"],
        capture_output=True,
        text=True,
        env={**os.environ, "PRECISION": "fp16"},
    )
    assert bad.returncode == 2


def _stubbed_run_scale(tmp_path: Path, *args: str, followers: bool = False, choice: str = "") -> list[list[str]]:
    """The commands ``run_scale.sh ARGS`` runs, with ``meanfield`` and ``python`` stubbed (each logs its argv;
    ``scale_lr.py --choice`` prints ``choice``, the lr-fair points).

    A stubbed ``drop_half_draws.py --every`` follower runs until killed and then logs ``killed``; with
    ``followers`` every stubbed sweep first waits (10 s at most) until as many followers have started as sweeps
    have run, so that the kill is never sent before the follower's trap is set (no sleeping on a race).
    """
    bin_ = tmp_path / "bin"
    bin_.mkdir(parents=True)
    log, started, sweeps = tmp_path / "calls.log", tmp_path / "followers", tmp_path / "sweeps"
    # a table call (--baseline, after the seeds) has no follower: it does not wait
    wait = (f'case "$*" in *--baseline*) exit 0 ;; esac\necho x >> "{sweeps}"\nfor i in $(seq 200); do\n'
            f'  [ "$(cat "{started}" 2>/dev/null | wc -l)" -ge "$(wc -l < "{sweeps}")" ] && break; sleep 0.05\ndone\n'
            if followers else "")  # fmt: skip
    (bin_ / "meanfield").write_text(f'#!/bin/sh\necho "meanfield $*" >> "{log}"\n{wait}')
    (bin_ / "python").write_text(
        f'#!/bin/sh\necho "python $*" >> "{log}"\ncase "$*" in *--choice*) echo "{choice}" ;; *--every*)\n'
        f'  trap \'echo "killed" >> "{log}"; exit 0\' TERM\n  echo x >> "{started}"\n'
        f"  for i in $(seq 4000); do sleep 0.05; done ;;\nesac\n"  # ends within minutes even if never killed
    )
    for name in ("meanfield", "python"):
        (bin_ / name).chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_}:{os.environ['PATH']}"}
    done = subprocess.run(["bash", str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return [line.split() for line in log.read_text().splitlines()]


def test_run_scale_keeps_the_pilot_blind_and_tests_at_n_8(tmp_path):
    """The pilot runs seeds 0, 1, 2 in one pool seed by seed (--order seed: no job idles at a seed's tail), with
    drop_half_draws.py following it (--every, in the background) and once more after it, and no call compares
    (no --baseline, no --detect: the pre-registration's blindness before seed 7); `main 8` runs seeds 3-7 and
    then the one table of seeds 0-7 against p8 with --detect 0.01; wikitext2 measures no draws and ends with
    its P1–P6 report."""
    calls = _stubbed_run_scale(tmp_path / "pilot", "pilot", followers=True)
    killed = [c for c in calls if c == ["killed"]]
    pilot = [c for c in calls if c != ["killed"]]
    sweeps = [c for c in pilot if c[0] == "meanfield"]
    assert [c[c.index("--seeds") + 1] for c in sweeps] == ["0,1,2"]
    assert all(c[c.index("--order") + 1] == "seed" for c in sweeps)
    assert all("--baseline" not in c and "--detect" not in c for c in sweeps)
    followers = [c for c in pilot if c[0] == "python" and "--every" in c]
    finals = [c for c in pilot if c[0] == "python" and "--every" not in c]
    # the background follower's line may land before or after its sweep's; it is killed when its sweep ends
    # (a follower left running would keep the stubbed script waiting until the timeout)
    assert len(followers) == len(finals) == len(killed) == 1
    assert [c[0] for c in pilot if c not in followers] == ["meanfield", "python"]
    assert all(c[1].endswith("drop_half_draws.py") and "--folder" in c for c in followers + finals)
    main = [c for c in _stubbed_run_scale(tmp_path / "main", "main", "8", followers=True) if c[0] == "meanfield"]
    assert [c[c.index("--seeds") + 1] for c in main] == ["3,4,5,6,7", "0,1,2,3,4,5,6,7"]
    assert "--order" in main[0] and "--baseline" not in main[0]
    last = main[-1]
    assert last[last.index("--baseline") + 1] == "preset=p8" and last[last.index("--detect") + 1] == "0.01"
    words = _stubbed_run_scale(tmp_path / "wt2", "wikitext2")
    # negative control: the words stage has no draws; its one python call is its own family's report
    assert not any("drop_half_draws.py" in " ".join(c) for c in words)
    assert words[-1][0] == "python" and words[-1][1].endswith("scale_report.py") and words[-1][2:] == ["--stage", "wikitext2"]
    assert "--baseline" in words[-2] and "wikitext2" in words[-2]


def test_run_scale_table_writes_a_stage_table_and_runs_nothing(tmp_path):
    """`table secondary` and `table wikitext2` are one --table-only sweep each over the stage's arms (secondary:
    with issue 47's β = 3e-3, seeds 0-7; words: seeds 0-2 against p8, with --detect 0.01), with the stage's
    metrics; no draws; anything else is refused."""
    (second,) = _stubbed_run_scale(tmp_path / "s", "table", "secondary")
    assert (
        second[0] == "meanfield"
        and "--table-only" in second
        and second[second.index("--seeds") + 1] == "0,1,2,3,4,5,6,7"
    )
    assert (
        second[second.index("--grid") + 1] == f"preset={','.join(SECONDARY)},p8-b3e-3"
        and "--baseline" not in second
    )
    assert "--metric" in second and second[second.index("--out") + 1].endswith("results/scale/secondary")
    (words,) = _stubbed_run_scale(tmp_path / "w", "table", "wikitext2")
    assert "--table-only" in words and words[words.index("--grid") + 1] == f"preset={','.join(PRIMARY)}"
    assert (
        words[words.index("--preset") + 1] == "wikitext2"
        and words[words.index("--baseline") + 1] == "preset=p8"
    )
    bad = subprocess.run(["bash", str(SCRIPT), "table", "primary"], capture_output=True, text=True)
    assert bad.returncode == 2 and "secondary or wikitext2" in bad.stderr


def test_run_scale_puts_the_primary_arms_first():
    text = SCRIPT.read_text()
    assert f"PRIMARY={','.join(PRIMARY)}" in text and f"SECONDARY={','.join(SECONDARY)}" in text
    assert text.index('sweep "$R/primary"') < text.index('sweep "$R/secondary"')
    # the report's table order is the same list (one is bash, one Python: this keeps them together)
    assert _module("report", HERE / "scale_report.py").ARMS == PRIMARY


def test_checkpoints_stay_out_of_git():
    out = subprocess.run(
        [
            "git",
            "check-ignore",
            "-q",
            "experiments/particle_attention/results/scale/primary/x/checkpoints/a.pt",
        ],
        cwd=ROOT,
    )
    assert out.returncode == 0


def test_primary_report_pairs_by_seed_and_applies_holm(tmp_path):
    report = _module("report", HERE / "scale_report.py")
    folder = tmp_path / "primary"
    values = {"mha8": 2.00, "p8": 2.01, "p8-b1e-3": 1.99, "p8-cos1e-2": 2.02, "p16": 2.03, "p32": 2.05}
    for arm, base in values.items():
        for seed in range(4):
            run_dir = folder / f"preset={arm}_seed={seed}"
            run_dir.mkdir(parents=True)
            (run_dir / "config.toml").write_text(f"seed = {seed}\n")
            (run_dir / "point.json").write_text(json.dumps({"point": {"preset": arm, "seed": seed}}))
            jitter = 0.004 * ((7 * seed + len(arm)) % 5 - 2)  # a paired sd of a few thousandths
            final = {"val_loss": base + 0.001 * seed + jitter, "half_random_gap": 0.3 + 0.01 * seed + jitter}
            (run_dir / "summary.json").write_text(json.dumps({"status": "finished", "final": final}))
    shutil.rmtree(
        folder / "preset=p32_seed=0"
    )  # P5 pairs seeds 1-3 only: pairing is by seed, not by position
    rows = {r["id"]: r for r in report.tests(report.load(folder))}
    jit = {a: [0.004 * ((7 * s + len(a)) % 5 - 2) for s in range(4)] for a in values}

    def mean_diff(a: str, b: str, seeds=range(4)) -> float:
        return values[a] - values[b] + float(np.mean([jit[a][s] - jit[b][s] for s in seeds]))

    assert rows["P1"]["n"] == 4 and rows["P1"]["d"].mean == pytest.approx(mean_diff("p8-b1e-3", "p8"))
    assert rows["P5"]["n"] == 3 and rows["P5"]["d"].mean == pytest.approx(mean_diff("p32", "mha8", (1, 2, 3)))
    assert rows["P6"]["d"].mean == pytest.approx(
        mean_diff("p8-b1e-3", "p8") - (values["p8-b1e-3"] - values["p8"])
    )
    order = ("P1", "P2", "P3", "P4", "P5", "P6")
    assert [rows[k]["holm"] for k in order] == pytest.approx(
        _holm_by_hand([rows[k]["d"].p_value for k in order])
    )
    from scipy import stats as st

    d, fam = rows["P1"]["d"], rows["P1"]["family"]  # Bonferroni over six: the t quantile at 1 − 0.05/12
    half = st.t.ppf(1 - 0.05 / 12, d.n - 1) * d.sd / math.sqrt(d.n)
    assert (fam.lo, fam.hi) == pytest.approx((d.mean - half, d.mean + half))
    text = report.markdown(list(rows.values()), folder)
    assert "Power rule" in text and "| P5 |" in text
    # the power at 0.01: the noncentral t written out (df = n − 1, λ = 0.01·√n / sd, two-sided α = 0.05)
    crit, lam = st.t.ppf(0.975, d.n - 1), 0.01 * math.sqrt(d.n) / d.sd
    power = st.nct.sf(crit, d.n - 1, lam) + st.nct.cdf(-crit, d.n - 1, lam)
    assert f"| {d.detectable():.4f} | {power:.2f} | {report.pairs_needed(0.01, d.sd)} |" in text


def _arms_with_seeds(folder: Path, seeds: int, wall: float = 3600.0) -> dict[str, list[float]]:
    """Finished runs of the six primary arms, seeds 0..seeds-1, val_loss = base + a seed-dependent jitter."""
    values = {}
    for k, arm in enumerate(PRIMARY):
        values[arm] = [2.0 + 0.01 * k + 0.003 * ((5 * s + k) % 7 - 3) for s in range(seeds)]
        for seed, v in enumerate(values[arm]):
            run_dir = folder / f"preset={arm}_seed={seed}"
            run_dir.mkdir(parents=True)
            (run_dir / "config.toml").write_text(f"seed = {seed}\n")
            (run_dir / "point.json").write_text(json.dumps({"point": {"preset": arm, "seed": seed}}))
            final = {"val_loss": v, "half_random_gap": 0.3}
            (run_dir / "environment.json").write_text(json.dumps({"threads": 1}))
            (run_dir / "summary.json").write_text(
                json.dumps({"status": "finished", "final": final, "wall_clock_s": wall})
            )
    return values


def test_primary_report_stays_blind_until_every_arm_has_the_fixed_seeds(tmp_path):
    """With 7 seeds (seed 7 of one arm missing) the report shows the paired sd (the sample sd of the per-seed
    differences, checked against numpy) and no Δ or p; with all 8 it shows the tests (negative control)."""
    report = _module("report", HERE / "scale_report.py")
    folder = tmp_path / "primary"
    values = _arms_with_seeds(folder, report.N_FIXED)
    shutil.rmtree(folder / "preset=p32_seed=7")
    runs = report.load(folder)
    assert report.blind(runs)
    text = report.markdown_blind(report.tests(runs), folder)
    diffs = [a - b for a, b in zip(values["p8-b1e-3"], values["p8"])]
    sd = float(np.std(diffs, ddof=1))
    assert f"| P1 | β = 1e-3 vs β = 0 (M = 8) | val_loss | 8 | {sd:.4f} |" in text
    assert "p (paired t)" not in text and "Holm" not in text and "±" not in text
    report.main(["--folder", str(folder), "--out", str(tmp_path / "t.md")])
    written = (tmp_path / "t.md").read_text()
    assert "blind until" in written and "p (paired t)" not in written
    report.main(["--folder", str(folder), "--out", str(tmp_path / "u.md"), "--unblind"])
    assert "p (paired t)" in (tmp_path / "u.md").read_text()  # the override shows the tests
    _arms_with_seeds(tmp_path / "full", report.N_FIXED)
    assert not report.blind(report.load(tmp_path / "full"))  # negative control: every arm at n = 8


def _run_files(run_dir: Path, summary: dict, environment: dict, arm: str = "p8", seed: int = 0) -> None:
    """A run folder as a sweep leaves it, with only what the reports read."""
    run_dir.mkdir(parents=True)
    (run_dir / "config.toml").write_text(f"seed = {seed}\n")
    (run_dir / "point.json").write_text(json.dumps({"point": {"preset": arm, "seed": seed}}))
    (run_dir / "summary.json").write_text(json.dumps(summary))
    (run_dir / "environment.json").write_text(json.dumps(environment))


def test_primary_report_costs_the_finished_runs_in_cpu_hours(tmp_path):
    """cost() = Σ wall_clock_s × threads / 3600 over finished runs: 2 × 1 h + 0.5 h × 2 threads = 3 h; an
    unfinished run counts nothing."""
    report = _module("report", HERE / "scale_report.py")
    for name, status, wall, threads in (("a", "finished", 3600, 1), ("b", "finished", 3600, 1),
                                        ("c", "finished", 1800, 2), ("d", "running", 9999, 1)):  # fmt: skip
        _run_files(tmp_path / name, {"status": status, "wall_clock_s": wall}, {"threads": threads})
    assert report.cost(tmp_path) == (3, pytest.approx(3.0))
    assert report.cost(tmp_path / "nowhere") == (0, 0.0)


def test_primary_report_costs_by_processor(tmp_path):
    """cost_by_processor() splits the same sum by environment.json's processor; the parts add up to cost()."""
    report = _module("report", HERE / "scale_report.py")
    for name, cpu, wall in (("a", "AMD EPYC", 3600), ("b", "AMD EPYC", 1800), ("c", "Intel Xeon", 900)):
        _run_files(tmp_path / name, {"status": "finished", "wall_clock_s": wall}, {"threads": 1, "processor": cpu})
    per = report.cost_by_processor(tmp_path)
    assert per == {"AMD EPYC": (2, pytest.approx(1.5)), "Intel Xeon": (1, pytest.approx(0.25))}
    assert report.cost(tmp_path) == (3, pytest.approx(1.75))


def test_primary_report_restricts_to_the_pilots_seeds(tmp_path):
    """--seeds 0,1,2 (the pilot's table) pairs and costs only those seeds' runs: 3 pairs, 18 runs of 1 h."""
    report = _module("report", HERE / "scale_report.py")
    folder = tmp_path / "primary"
    values = _arms_with_seeds(folder, 5)
    report.main(["--folder", str(folder), "--out", str(tmp_path / "pilot.md"), "--seeds", "0,1,2"])
    text = (tmp_path / "pilot.md").read_text()
    sd = float(np.std(np.subtract(values["p8-b1e-3"][:3], values["p8"][:3]), ddof=1))
    assert f"| P1 | β = 1e-3 vs β = 0 (M = 8) | val_loss | 3 | {sd:.4f} |" in text
    assert "Cost: 18 finished runs, 18.0 CPU-hours" in text
    _draw_records(
        tmp_path / "drop_half" / "primary", {"p8-b1e-3": [1.0, 1.1, 1.3], "p8": [1.2, 1.2, 1.2]}, range(2, 5)
    )
    report.main(["--folder", str(folder), "--out", str(tmp_path / "pilot.md"), "--seeds", "0,1,2"])
    assert (
        "| E6 | drop-half gap over 32 draws, β = 1e-3 vs β = 0 (M = 8) | 1 (2) |"
        in (tmp_path / "pilot.md").read_text()
    )
    report.main(["--folder", str(folder), "--out", str(tmp_path / "all.md")])
    assert "Cost: 30 finished runs, 30.0 CPU-hours" in (tmp_path / "all.md").read_text()  # control


def _draw_records(draws: Path, means: dict[str, list[float]], seeds: range) -> None:
    draws.mkdir(parents=True)
    for arm, values in means.items():
        for seed, mean in zip(seeds, values, strict=True):
            name = f"preset={arm}_seed={seed}"
            record = {"run": name, "seed": seed, "draws": 32, "mean": mean, "sd": 0.3 + 0.01 * seed}
            (draws / f"{name}.json").write_text(json.dumps(record))


def test_primary_report_adds_the_32_draw_drop_half_comparison_blind_until_n_8(tmp_path):
    """E6 pairs the 32-draw mean gaps of p8-b1e-3 and p8 by seed (numbers checked against numpy and scipy);
    while the study is blind it shows the paired sd only, once every arm has 8 seeds the Δ and raw p; a record
    whose run has no point.json is not counted (its arm is unknown)."""
    from scipy import stats as st

    report = _module("report", HERE / "scale_report.py")
    folder, draws = tmp_path / "primary", tmp_path / "drop_half" / "primary"
    _arms_with_seeds(folder, report.N_FIXED - 1)  # seeds 0-6: blind
    seeds = range(2, 7)
    a = [1.0 + 0.05 * s + 0.02 * (s % 3) for s in seeds]
    b = [1.2 + 0.05 * s for s in seeds]
    _draw_records(draws, {"p8-b1e-3": a, "p8": b, "mha8": [9.0] * 5}, seeds)
    (draws / "preset=p8_seed=9.json").write_text(json.dumps({"run": "preset=p8_seed=9", "seed": 9, "draws": 32,
                                                             "mean": 5.0, "sd": 0.4}))  # fmt: skip
    loaded = report.load_draws(draws, folder)
    assert sorted(loaded["p8"]) == list(seeds)  # seed 9 has no run folder here
    (row,) = report.exploratory(loaded)
    diffs = np.subtract(a, b)
    assert row["n"] == 5 and row["d"].mean == pytest.approx(diffs.mean())
    assert row["d"].sd == pytest.approx(np.std(diffs, ddof=1))
    assert row["d"].p_value == pytest.approx(st.ttest_rel(a, b).pvalue)
    report.main(["--folder", str(folder), "--out", str(tmp_path / "blind.md")])
    text = (tmp_path / "blind.md").read_text()
    assert (
        f"| E6 | drop-half gap over 32 draws, β = 1e-3 vs β = 0 (M = 8) | 5 (2, 3, 4, 5, 6) | {row['d'].sd:.4f} |"
        in text
    )
    assert f"{row['d'].mean:+.4f}" not in text and "p (paired t)" not in text
    assert "15 runs: median 0.340, range 0.320–0.360 nats" in text  # the draw sds of the records
    report.main(["--folder", str(folder), "--out", str(tmp_path / "shown.md"), "--unblind"])
    shown = (tmp_path / "shown.md").read_text()
    assert (
        f"| {row['d'].mean:+.4f} ({row['d'].lo:+.4f} – {row['d'].hi:+.4f}) |"
        in shown
    )


def test_drop_half_draws_reproduces_the_runs_own_draw_and_averages_fresh_ones(tmp_path):
    """drop_half_draws.py on a finished smoke run: draw 0 reproduces the run's logged half_random_gap (the
    model, probe blocks and generator are the run's: an independent code path to the task's probe); the mean
    and sd are those of the gaps; a second call skips the measured run; a run whose latest checkpoint is not
    its final step is not eligible; a tampered logged value makes the check fail (negative control)."""
    draws = _module("drop_half", HERE / "drop_half_draws.py")
    folder = tmp_path / "primary"
    run(CONFIG, folder / "preset=p8_seed=0", preset="smoke+p8", quiet=True)
    summary_path = folder / "preset=p8_seed=0" / "summary.json"
    logged = json.loads(summary_path.read_text())["final"]["half_random_gap"]
    out = (
        tmp_path / "drop_half" / "primary"
    )  # the default: beside the sweep folder, never in the repo's results
    assert draws.main(["--folder", str(folder), "--draws", "4"]) == 0
    result = json.loads((out / "preset=p8_seed=0.json").read_text())
    assert result["gaps"][0] == pytest.approx(logged, abs=1e-6) and len(result["gaps"]) == 4
    assert len(set(result["gaps"])) > 1  # fresh draws differ from the run's
    assert result["mean"] == pytest.approx(float(np.mean(result["gaps"])))
    assert result["sd"] == pytest.approx(float(np.std(result["gaps"], ddof=1)))
    stamp = (out / "preset=p8_seed=0.json").stat().st_mtime_ns
    assert draws.main(["--folder", str(folder), "--out", str(out), "--draws", "4"]) == 0
    assert (out / "preset=p8_seed=0.json").stat().st_mtime_ns == stamp  # measured already: skipped
    checkpoints = sorted((folder / "preset=p8_seed=0" / "checkpoints").glob("step-*.pt"))
    checkpoints[-1].rename(checkpoints[-1].with_name("kept.bak"))
    assert not draws.is_final(folder / "preset=p8_seed=0")  # the final checkpoint is gone: another machine's run
    checkpoints[-1].with_name("kept.bak").rename(checkpoints[-1])
    summary = json.loads(summary_path.read_text())
    summary["final"]["half_random_gap"] = logged + 0.01
    summary_path.write_text(json.dumps(summary))
    assert draws.main(["--folder", str(folder), "--out", str(tmp_path / "again"), "--draws", "2"]) == 1


def _measure_failing_on_a(calls: list[str], error: str):
    """A stand-in for drop_half_draws.measure: records each run it is called on, raises ``error`` for run "a"."""

    def measure(run, n):
        calls.append(run.name)
        if run.name == "a":
            raise RuntimeError(error)
        return {"draws": n, "gaps": [0.1, 0.2], "logged": 0.1, "mean": 0.15, "sd": 0.07}

    return measure


def test_drop_half_draws_measures_the_other_runs_when_one_fails(tmp_path, monkeypatch):
    """A run whose measurement raises (a damaged checkpoint) or whose summary cannot be read is reported with its
    error and the pass goes on to the next run: a --every follower must not end silently and leave later runs
    unmeasured. A run that failed is not reloaded by the same process's later passes (it is reported once)."""
    draws = _module("drop_half_fail", HERE / "drop_half_draws.py")
    for name in ("a", "b", "c"):
        (tmp_path / "s" / name).mkdir(parents=True)
    (tmp_path / "s" / "c" / "summary.json").write_text('{"status": "fini')  # damaged
    monkeypatch.setattr(draws, "is_final", lambda run: run.name != "c" or draws.json.loads(
        (run / "summary.json").read_text()))  # fmt: skip
    calls = []
    monkeypatch.setattr(draws, "measure", _measure_failing_on_a(calls, "PytorchStreamReader failed reading zip archive"))
    failed: dict[str, str] = {}
    bad = draws.measure_folder(tmp_path / "s", tmp_path / "out", 2, failed)
    assert bad[0] == "a: could not be measured: RuntimeError: PytorchStreamReader failed reading zip archive"
    assert len(bad) == 2 and bad[1].startswith("c: could not be measured: JSONDecodeError")
    assert not (tmp_path / "out" / "a.json").exists() and (tmp_path / "out" / "b.json").is_file()
    assert calls == ["a", "b"] and set(failed) == {"a", "c"}
    assert draws.measure_folder(tmp_path / "s", tmp_path / "out", 2, failed) == []  # a, c: not again; b: measured
    assert calls == ["a", "b"]
    assert draws.measure_folder(tmp_path / "s", tmp_path / "out", 2) == bad  # a fresh process tries them again


def test_drop_half_draws_every_reports_a_failing_run_once(tmp_path, monkeypatch, capsys):
    """main --every through a run that keeps failing: measured (and reported) in the first pass only, while a run
    that finishes later is still measured in a later pass."""
    draws = _module("drop_half_every_fail", HERE / "drop_half_draws.py")
    (tmp_path / "s" / "a").mkdir(parents=True)
    calls = []

    class Stop(Exception):
        pass

    sleeps = []

    def sleep(seconds):
        sleeps.append(seconds)
        if len(sleeps) == 1:
            (tmp_path / "s" / "b").mkdir()  # a run that finishes between passes
        if len(sleeps) == 3:
            raise Stop

    monkeypatch.setattr(draws, "is_final", lambda run: True)
    monkeypatch.setattr(draws, "measure", _measure_failing_on_a(calls, "damaged"))
    monkeypatch.setattr(draws.time, "sleep", sleep)
    monkeypatch.setattr(draws.torch, "set_num_threads", lambda n: None)
    with pytest.raises(Stop):
        draws.main(["--folder", str(tmp_path / "s"), "--every", "1"])
    assert calls == ["a", "b"]
    assert capsys.readouterr().err.count("a: could not be measured: RuntimeError: damaged") == 1


def test_a_usable_spread_is_relative_to_the_differences_not_absolute():
    """The gradient variance's paired differences (about −3.3e-8 with an sd of 4e-10, two seeds of β = 1e-2 in
    the secondary stage) have a usable sd; with an absolute floor of 1e-9 their row was blanked. Round-off
    (an sd of 1e-16 on a mean of 1) and no spread at all are still refused."""
    from meanfield.studies.stats import paired_difference

    report = _module("report_spread", HERE / "scale_report.py")
    small = paired_difference([2.2928e-8, 2.5586e-8], [5.6473e-8, 5.8604e-8])
    assert report._spread(small) and small.p_value < 0.05  # (the test itself is n = 2: exploratory)
    assert not report._spread(paired_difference([1.0 + 2e-16, 1.0], [0.0, 0.0]))
    assert not report._spread(paired_difference([1.0, 1.0], [0.5, 0.5]))


def test_drop_half_draws_every_repeats_its_pass_until_stopped(tmp_path, monkeypatch):
    """--every S: a pass over the folder, a sleep of S seconds, again, until stopped (run_scale.sh kills it
    when its sweep ends), so a run finished mid-sweep is measured while its checkpoints are here; a failed
    draw-0 check does not end the follower. Without --every: one pass. --every 0 is refused."""
    draws = _module("drop_half_every", HERE / "drop_half_draws.py")
    passes, sleeps = [], []

    def one_pass(folder, out, n, failed):
        passes.append((folder, out, n))
        return ["bad"] if len(passes) == 1 else []

    class Stop(Exception):
        pass

    def sleep(seconds):
        sleeps.append(seconds)
        if len(sleeps) == 3:
            raise Stop

    threads = []  # the follower takes one core beside a sweep (recorded, not applied: pytest's own torch stays as it is)
    monkeypatch.setattr(draws, "measure_folder", one_pass)
    monkeypatch.setattr(draws.time, "sleep", sleep)
    monkeypatch.setattr(draws.torch, "set_num_threads", threads.append)
    with pytest.raises(Stop):
        draws.main(["--folder", str(tmp_path / "s"), "--every", "7.5"])
    assert len(passes) == 3 and sleeps == [7.5, 7.5, 7.5] and threads == [1]
    assert passes[0] == (tmp_path / "s", tmp_path / "drop_half" / "s", 32)
    passes.clear()
    assert draws.main(["--folder", str(tmp_path / "s")]) == 1  # one pass: the check fails, and it says so
    assert len(passes) == 1 and threads == [1]  # one pass sets no threads
    with pytest.raises(SystemExit):
        draws.main(["--folder", str(tmp_path / "s"), "--every", "0"])


@pytest.mark.slow
def test_lm_step_benchmark_quick_records_its_provenance(tmp_path):
    out = tmp_path / "lm_step.md"
    argv = ["--quick", "--tiny", "--arms", "mha8", "p8", "--out", str(out)]
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "lm_step.py"), *argv],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    text = out.read_text()
    common = _module("common", ROOT / "benchmarks" / "_common.py")
    recorded = common.parse_provenance(text)
    assert recorded["command"].startswith("python benchmarks/lm_step.py --quick")
    assert recorded["load_start"] and recorded["load_end"] and "AVX-512 BF16" in recorded["cpu_flags"]
    assert "not a measurement" in text and "| mha8 |" in text and "| p8 |" in text


def _run_folder(folder: Path, arm: str, seed: int, final: dict, status: str = "finished", curve=()) -> None:
    """One synthetic run: config, point, summary and a metrics.jsonl of ``(step, train_loss)`` records."""
    run_dir = folder / f"preset={arm}_seed={seed}"
    run_dir.mkdir(parents=True)
    (run_dir / "config.toml").write_text(f"seed = {seed}\n")
    (run_dir / "point.json").write_text(json.dumps({"point": {"preset": arm, "seed": seed}}))
    (run_dir / "environment.json").write_text(json.dumps({"threads": 1}))
    summary = {"status": status, "seed": seed, "step": 2000 if status == "finished" else 750, "final": final,
               "wall_clock_s": 1800.0}  # fmt: skip
    (run_dir / "summary.json").write_text(json.dumps(summary))
    (run_dir / "metrics.jsonl").write_text(
        "".join(json.dumps({"step": s, "train_loss": x}) + "\n" for s, x in curve)
    )


def _exploratory_study(tmp_path: Path):
    """Primary arms (seeds 0-3) and the secondary curve arms (seeds 0-2, ``p8-b3e-2`` seed 2 failed): val_loss
    = a per-arm base + a seed jitter; MHA-8's early phase lasts 100·(seed + 1) steps longer than M = 8's and its
    final loss is 0.01 per 100 steps higher (so r(Δ steps, Δ val) is close to +1 for p8)."""
    primary, secondary = tmp_path / "primary", tmp_path / "secondary"
    base = {"mha8": 2.0, "p8": 1.99, "p8-b1e-3": 1.98, "p8-cos1e-2": 2.0, "p16": 1.995, "p32": 2.0,
            "p8-b1e-5": 1.991, "p8-b1e-4": 1.985, "p8-b1e-2": 2.01, "p8-b3e-2": 2.06}  # fmt: skip
    values: dict[str, dict[int, float]] = {}
    for k, (arm, b) in enumerate(base.items()):
        folder, seeds = (primary, range(4)) if arm in PRIMARY else (secondary, range(3))
        for seed in seeds:
            steps = 500 + (100 * (seed + 1) if arm == "mha8" else 10 * ((3 * seed + len(arm)) % 4))
            jitter = 0.001 * ((3 * seed * seed + seed * k + k) % 11 - 5)  # differs from p8's at every seed
            v = b + jitter + (0.01 * (seed + 1) if arm == "mha8" else 0.0)
            failed = arm == "p8-b3e-2" and seed == 2
            curve = [
                (s, 3.0 - s / steps) for s in range(50, 2001, 50)
            ]  # crosses 2.0 at the first step ≥ steps
            final = {} if failed else {"val_loss": v, "loss_roughness": 0.05 + 0.001 * seed, "head_sim": 0.1,
                                       "grad_var_attn": 5e-8, "half_random_gap": 0.4 + 0.01 * seed}  # fmt: skip
            _run_folder(folder, arm, seed, final, "failed" if failed else "finished", curve)
            if not failed:
                values.setdefault(arm, {})[seed] = v
    return primary, secondary, values


def test_exploratory_report_pairs_the_beta_curve_and_holms_per_metric(tmp_path):
    """Each β-curve arm pairs with p8 on the seeds both finished: a failed hot-β run removes only its own pair
    (p8-b3e-2 seed 2), not that seed from the other arms; Δ and p checked against numpy/scipy, Holm per metric
    against the step-down rule written out; the failed run is listed, comparisons without pairs are listed by
    metric instead of shown; negative control: with an arm's runs gone its rows have no pairs, the others stay."""
    from scipy import stats as st

    expl = _module("exploratory", HERE / "scale_exploratory.py")
    primary, secondary, values = _exploratory_study(tmp_path)
    runs = expl.load(primary, secondary)
    table = expl.rows(runs)
    val = {r["a"]: r for r in table if r["metric"] == "val_loss" and r["a"] in dict(expl.CURVE)}
    assert val["p8-b3e-2"]["seeds"] == [0, 1] and val["p8-b1e-2"]["seeds"] == [0, 1, 2]
    assert val["p8-b1e-3"]["seeds"] == [0, 1, 2, 3]  # a primary arm: all four seeds
    for arm, r in val.items():
        a, b = [values[arm][s] for s in r["seeds"]], [values["p8"][s] for s in r["seeds"]]
        assert r["d"].mean == pytest.approx(np.mean(np.subtract(a, b)))
        assert r["d"].p_value == pytest.approx(st.ttest_rel(a, b).pvalue)
    for metric in ("val_loss", "head_sim"):  # the curve's rows (and for val_loss the OTHERS', not run: p = 1)
        mine = [r for r in table if r["metric"] == metric]
        p = [r["d"].p_value if r["d"] is not None else math.nan for r in mine]
        padded = _holm_by_hand([1.0 if math.isnan(q) else q for q in p])
        assert [r["holm"] for r in mine] == pytest.approx(
            [math.nan if math.isnan(q) else h for q, h in zip(p, padded)], nan_ok=True
        )
    # The family is fixed by the design: val_loss has 5 curve rows + 5 others (3 of them not run here), so the
    # smallest p is multiplied by 10, not by the 5 or 7 rows that happen to have pairs.
    mine = [r for r in table if r["metric"] == "val_loss"]
    assert len(mine) == len(expl.CURVE) - 1 + len(expl.OTHERS) == 10
    smallest = min((r for r in mine if r["d"] is not None), key=lambda r: r["d"].p_value)
    assert smallest["holm"] == pytest.approx(min(1.0, 10 * smallest["d"].p_value))
    assert all(math.isnan(r["holm"]) for r in mine if r["d"] is None)
    text = expl.markdown(runs, table, expl.unfinished(primary, secondary))
    assert "`p8-b3e-2` seed=2: failed at step 750" in text
    assert "| cosine 1e-3 → 0 vs β = 0 (M = 8) |" not in text  # not run: no row, listed as waiting
    assert "cosine 1e-3 → 0 vs β = 0 (M = 8) (val_loss, 0 pairs)" in text
    assert "β = 0.01 vs β = 0 (M = 8) (val_loss" not in text  # shown, so not listed as waiting
    assert "| `p8-b1e-2` | 0.01 | 0, 1, 2 |" in text  # the per-arm table: its own seeds
    for seed in range(3):
        shutil.rmtree(secondary / f"preset=p8-b1e-4_seed={seed}")
    gone = {(r["a"], r["metric"]): r for r in expl.rows(expl.load(primary, secondary))}
    assert gone[("p8-b1e-4", "val_loss")]["d"] is None  # negative control
    assert gone[("p8-b1e-2", "val_loss")]["seeds"] == [0, 1, 2]


def test_exploratory_report_relates_the_architecture_gap_to_the_early_phase(tmp_path):
    """steps_to is the first logged step with train loss ≤ 2 (nan if never: negative control); the early-phase
    tests pair each particle arm with MHA-8 by seed (p16 lacks seed 3 here): Δ steps against numpy, Pearson's r
    and Spearman's ρ against scipy, the leave-one-seed-out range written out, Holm over the three arms against
    the step-down rule, Brown–Forsythe against scipy's levene with the median."""
    from scipy import stats as st

    expl = _module("exploratory", HERE / "scale_exploratory.py")
    primary, secondary, values = _exploratory_study(tmp_path)
    shutil.rmtree(primary / "preset=p16_seed=3")
    del values["p16"][3]
    never = [{"step": s, "train_loss": 2.5} for s in (50, 100)]
    assert math.isnan(expl.steps_to(never))
    early = expl.early_phase(primary)
    assert early["mha8"][2]["steps_to"] == 800.0 and early["mha8"][2]["loss_first"] == pytest.approx(2.9375)
    assert set(early) == {"mha8", "p8", "p16", "p32"}
    rows = {r["arm"]: r for r in expl.early_tests(early)}
    ds = [early["p8"][s]["steps_to"] - early["mha8"][s]["steps_to"] for s in range(4)]
    dv = [values["p8"][s] - values["mha8"][s] for s in range(4)]
    assert rows["p8"]["steps"].mean == pytest.approx(np.mean(ds))
    df = [early["p32"][s]["loss_first"] - early["mha8"][s]["loss_first"] for s in range(4)]
    assert rows["p32"]["first"].mean == pytest.approx(np.mean(df)) and rows["p32"]["first"].mean < 0
    assert (rows["p8"]["r"], rows["p8"]["r_p"]) == pytest.approx(tuple(st.pearsonr(ds, dv))) and rows["p8"][
        "r"
    ] > 0.9
    assert rows["p8"]["rho"] == pytest.approx(st.spearmanr(ds, dv).statistic)
    loo = [np.mean(dv[:k] + dv[k + 1 :]) for k in range(4)]
    assert rows["p8"]["loo_mean"] == pytest.approx((min(loo), max(loo)))
    assert rows["p16"]["seeds"] == [0, 1, 2]
    d16 = [values["p16"][s] - values["mha8"][s] for s in range(3)]
    s16 = [early["p16"][s]["steps_to"] - early["mha8"][s]["steps_to"] for s in range(3)]
    assert rows["p16"]["r"] == pytest.approx(np.corrcoef(s16, d16)[0, 1])
    p = [rows[a]["steps"].p_value for a in ("p8", "p16", "p32")]
    assert [rows[a]["steps_p_holm"] for a in ("p8", "p16", "p32")] == pytest.approx(_holm_by_hand(p))
    assert rows["p16"]["spread_p"] == pytest.approx(
        st.levene(list(values["p16"].values()), list(values["mha8"].values()), center="median").pvalue
    )
    text = expl.markdown_early(early, list(rows.values()))
    assert f"| `p8` | {rows['p8']['spread_p']:.2g} ({rows['p8']['spread_p_holm']:.2g}) |" in text
    expl.main(["--primary", str(primary), "--secondary", str(secondary), "--out", str(tmp_path / "e.md"),
               "--figure", str(tmp_path / "e.png")])  # fmt: skip
    written = (tmp_path / "e.md").read_text()
    assert (
        "Why P3–P5 are wide" in written
        and "Cost of the secondary sweep: 11 finished runs, 5.5 CPU-hours" in written
    )
    assert (tmp_path / "e.png").stat().st_size > 0


def test_the_reports_refuse_a_missing_primary_folder(tmp_path, capsys):
    """A mistyped folder is an error naming it, not an empty table; a missing secondary folder is allowed (the
    secondary sweep may not have started)."""
    report = _module("report", HERE / "scale_report.py")
    expl = _module("exploratory", HERE / "scale_exploratory.py")
    with pytest.raises(SystemExit):
        report.main(["--folder", str(tmp_path / "nope"), "--out", str(tmp_path / "t.md")])
    assert "--folder" in capsys.readouterr().err and not (tmp_path / "t.md").exists()
    with pytest.raises(SystemExit):
        expl.main(["--primary", str(tmp_path / "nope"), "--out", str(tmp_path / "e.md")])
    assert "is not a folder" in capsys.readouterr().err
    primary, _, _ = _exploratory_study(tmp_path)
    expl.main(["--primary", str(primary), "--secondary", str(tmp_path / "none"), "--out", str(tmp_path / "e.md"),
               "--figure", str(tmp_path / "e.png")])  # fmt: skip
    assert "Why P3–P5 are wide" in (tmp_path / "e.md").read_text()


def test_words_report_tests_at_n_3_without_the_power_rule_and_adds_the_best_step_and_curve(tmp_path):
    """--stage wikitext2: blind below 3 seeds of every arm, then P1–P6 with Holm over six (no power rule: n is
    fixed at 3), B1–B5 on summary.json's best val_loss (paired by seed, checked against numpy), and each arm's
    mean test-loss curve read from metrics.jsonl."""
    report = _module("report", HERE / "scale_report.py")
    folder = tmp_path / "wikitext2"
    values = _arms_with_seeds(folder, report.N_WORDS)
    best = {}
    for arm, finals in values.items():
        for seed, v in enumerate(finals):
            run_dir = folder / f"preset={arm}_seed={seed}"
            summary = json.loads((run_dir / "summary.json").read_text())
            best[arm, seed] = v - 0.02 - 0.001 * seed * len(arm)  # best < last, a spread that differs by arm
            summary["best"] = {"val_loss": {"value": best[arm, seed], "step": 400}}
            (run_dir / "summary.json").write_text(json.dumps(summary))
            curve = [{"step": 100, "val_loss": v + 0.3}, {"step": 50, "train_loss": 9.0}, {"step": 500, "val_loss": v}]
            (run_dir / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in curve) + "\n")
    out = tmp_path / "w.md"
    report.main(["--stage", "wikitext2", "--folder", str(folder), "--out", str(out)])
    text = out.read_text()
    assert text.startswith("P1–P6 on WikiText-2 words (exploratory stage; Holm over its own six)")
    assert "p (Holm, 6)" in text and "Power rule" not in text and "blind" not in text
    diffs = [best["p8-b1e-3", s] - best["p8", s] for s in range(3)]
    assert f"| B1 | β = 1e-3 vs β = 0 (M = 8) | 3 | {np.mean(diffs):+.4f} (" in text
    assert f"| p16 | {np.mean(values['p16']) + 0.3:.3f} (3) | {np.mean(values['p16']):.3f} (3) |" in text
    figure = tmp_path / report.WORDS_FIGURE  # beside the sweep folder (docs/assets only for the stage's own)
    assert figure.read_bytes().startswith(b"\x89PNG")
    # --seeds restricts the curve as it restricts the tests; a run without a best step is left out of B1 only
    report.main(["--stage", "wikitext2", "--folder", str(folder), "--out", str(out), "--seeds", "0,1", "--unblind"])
    assert f"| p16 | {np.mean(values['p16'][:2]) + 0.3:.3f} (2) |" in out.read_text()
    summary_path = folder / "preset=p8_seed=2" / "summary.json"
    summary = json.loads(summary_path.read_text())
    del summary["best"]
    summary_path.write_text(json.dumps(summary))
    report.main(["--stage", "wikitext2", "--folder", str(folder), "--out", str(out)])
    text = out.read_text()
    assert "| B1 | β = 1e-3 vs β = 0 (M = 8) | 2 |" in text and "| P1 | β = 1e-3 vs β = 0 (M = 8) | val_loss | 3 |" in text
    # negative control: one arm with 2 seeds keeps the whole stage blind (paired sds, δ80 at n = 3)
    shutil.rmtree(folder / "preset=mha8_seed=2")
    figure.unlink()
    report.main(["--stage", "wikitext2", "--folder", str(folder), "--out", str(out)])
    text = out.read_text()
    assert "blind until every primary arm has 3 seeds" in text and "| B1 |" not in text and "δ80 at n = 3" in text
    assert not figure.exists()  # blind: no curve either
    assert "test split's loss" in text and "(the pre-registration)" not in text


def test_run_scale_issue47_runs_hot_then_p6_then_the_lr_choice(tmp_path):
    """`issue47` (the plan's order): the hot end into secondary/ (β = 3e-3, 1e-2, 3e-2 over seeds 0-7 in one
    seed-major pool: the finished seeds 0-2 are skipped by the sweep) followed by the drop-half draws and the
    whole secondary table; then p8 and p8-b1e-3 seeds 0-1 into p6/ with their draws; then MHA-8 and M = 8 at the
    three lrs on the carved split (tune), seeds 0-2, without draws; then the lr choice is asked for (lr-fair).
    `lr-fair` runs nothing while no lr is chosen."""
    calls = [c for c in _stubbed_run_scale(tmp_path / "i", "issue47", followers=True) if c != ["killed"]]
    sweeps = [c for c in calls if c[0] == "meanfield" and "--order" in c]
    grids = [(c[c.index("--grid") + 1], c[c.index("--seeds") + 1], c[c.index("--out") + 1].split("/")[-1])
             for c in sweeps]  # fmt: skip
    tune = ",".join(f"tune+{a}+lr{lr}" for a in ("mha8", "p8") for lr in ("3e-4", "1e-3", "3e-3"))
    assert grids == [
        ("preset=p8-b3e-3,p8-b1e-2,p8-b3e-2", "0,1,2,3,4,5,6,7", "secondary"),
        ("preset=p8,p8-b1e-3", "0,1", "p6"),
        (f"preset={tune}", "0,1,2", "lr_tune"),
    ]
    tables = [c for c in calls if c[0] == "meanfield" and "--order" not in c]
    assert "--table-only" in tables[0] and tables[0][tables[0].index("--out") + 1].endswith("secondary")
    draws = [c[c.index("--folder") + 1].split("/")[-1] for c in calls if "--folder" in c and "--every" not in c]
    assert draws == ["secondary", "p6"]  # negative control: no draws of the tuning runs (no probes there)
    assert calls[-1] == ["python", "experiments/particle_attention/scale_lr.py", "--choice"]  # lr-fair, last
    fair = _stubbed_run_scale(tmp_path / "f", "lr-fair")
    assert fair == [["python", "experiments/particle_attention/scale_lr.py", "--choice"]]
    fair = [c for c in _stubbed_run_scale(tmp_path / "g", "lr-fair", choice="mha8+lr3e-4") if c[0] == "meanfield"]
    grid = [(c[c.index("--grid") + 1], c[c.index("--seeds") + 1], c[c.index("--out") + 1].split("/")[-1])
            for c in fair if "--order" in c]  # fmt: skip
    assert grid == [("preset=mha8+lr3e-4", "0,1,2,3,4,5,6,7", "lr_fair")]  # a chosen lr ≠ 1e-3: its 8 seeds run


def _fake_run(folder: Path, preset: str, seed: int, val_loss: float | None) -> None:
    folder.mkdir(parents=True)
    (folder / "config.toml").write_text(f"seed = {seed}\n")
    (folder / "point.json").write_text(json.dumps({"point": {"preset": preset}}))
    status = {"status": "finished", "final": {"val_loss": val_loss}} if val_loss is not None else {"status": "diverged", "final": {}}
    (folder / "summary.json").write_text(json.dumps(status))


def test_scale_lr_chooses_by_the_rule_and_reports_p3_to_p5_with_wilcoxon(tmp_path):
    """The lr choice: the lowest mean over seeds 0-2 (hand-made losses), an lr with a diverged run never chosen,
    no choice while a run is missing; P3′ pairs each arm at its own lr (from lr_fair/, or primary/ at 1e-3),
    with the exact Wilcoxon p of 8 positive differences (2/2^8 = 0.0078) and the mean without the largest."""
    lr = _module("lr", HERE / "scale_lr.py")
    tune = tmp_path / "lr_tune"
    losses = {("mha8", "3e-4"): 1.8, ("mha8", "1e-3"): 1.7, ("mha8", "3e-3"): 1.6,
              ("p8", "3e-4"): 1.9, ("p8", "1e-3"): 1.65, ("p8", "3e-3"): 1.5}  # fmt: skip
    for (arm, rate), v in losses.items():
        for seed in (0, 1, 2):
            bad = arm == "p8" and rate == "3e-3" and seed == 1  # the best mean, but one run diverged
            _fake_run(tune / f"{arm}{rate}_{seed}", f"tune+{arm}+lr{rate}", seed, None if bad else v + 0.01 * seed)
    _fake_run(tune / "p16_0", "tune+p16+lr1e-3", 0, 1.0)  # p16: one run of nine, no choice yet
    chosen = lr.choose(lr.tuning_table(lr.runs(tune)))
    assert chosen == {"mha8": "3e-3", "p8": "1e-3"}
    assert lr.fair_points(chosen) == ["mha8+lr3e-3"]
    fair, primary = tmp_path / "lr_fair", tmp_path / "primary"
    diffs = [0.01, 0.02, 0.03, 0.04, 0.05, 0.06, 0.07, 0.30]
    for seed, d in enumerate(diffs):
        _fake_run(fair / f"m{seed}", "mha8+lr3e-3", seed, 1.6)
        _fake_run(primary / f"p{seed}", "p8", seed, 1.6 + d)
        _fake_run(primary / f"mha{seed}", "mha8", seed, 9.0)  # mha8 at 1e-3: not its chosen lr (control)
    rows = lr.comparisons(lr.final_losses(chosen, fair, primary))
    p8 = rows[0]
    assert p8["arm"] == "p8" and p8["d"].n == 8 and p8["d"].mean == pytest.approx(sum(diffs) / 8)
    assert p8["wilcoxon"] == pytest.approx(2 / 2**8) and p8["without"] == (7, pytest.approx(0.04))
    assert [r["d"] for r in rows[1:]] == [None, None] and [r["holm"] for r in rows[1:]] == [1.0, 1.0]
    assert p8["holm"] == pytest.approx(min(1.0, 3 * p8["d"].p_value))
    assert p8["carried"] is None  # without seed 7 the mean is still +0.04
    # P4′, P5′ were left out for the budget: their rows and the tuning table say so, not "not testable"
    text = lr.markdown(lr.tuning_table(lr.runs(tune)), chosen, rows)
    for row in ("P4′ p16", "P5′ p32"):
        assert f"| {row} − mha8 | ? / 3e-3 | 0 | left out (budget): not run |" in text
    assert "| left out (budget) |" in text and "| 1e-3 |" in text  # p16's choice cell; p8's chosen lr
    assert "not testable" in lr.markdown({}, {}, [{"arm": "p8", "seeds": [], "d": None}])  # control: p8 is not left out
    chosen_after_all = lr.markdown({"p16": {}}, {"p16": "3e-4"}, [])  # a left-out arm that was chosen after all
    assert "| p16 | — | — | — | 3e-4 |" in chosen_after_all and "| p32 | — | — | — | left out (budget) |" in chosen_after_all


def test_scale_lr_calls_a_row_whose_sign_one_seed_sets_carried_by_one_seed(tmp_path):
    """The pre-registered rule: a row whose mean changes sign without its pair of largest |Δ| is "carried by one
    seed", whatever its p (the primary P3's MHA-8 seed 4 is the case): seven pairs at +0.01 and one at −0.30
    give a mean of −0.029 and +0.01 without it; the same seven with +0.30 keep their sign (control)."""
    lr = _module("lr", HERE / "scale_lr.py")
    v = _module("issue47", HERE / "scale_issue47.py").lr_verdict
    chosen = {"mha8": "1e-3", "p8": "1e-3"}
    for sign, carried in ((-1, 7), (+1, None)):
        primary = tmp_path / f"primary{sign}"
        for seed in range(8):
            _fake_run(primary / f"m{seed}", "mha8", seed, 1.6)
            _fake_run(primary / f"p{seed}", "p8", seed, 1.6 + (0.01 if seed < 7 else sign * 0.30))
        row = lr.comparisons(lr.final_losses(chosen, tmp_path / "none", primary))[0]
        assert row["carried"] == carried and row["without"] == (7, pytest.approx(0.01))
        words = v(row, 8)
        assert words.startswith("carried by one seed") == (carried is not None)
        assert "carried" not in v(row, 5)  # below the planned pairs: no verdict yet, as every row
        text = lr.markdown({}, chosen, [row])
        assert ("carried by one seed" in text) == (carried is not None)


def test_scale_issue47_verdict_words_follow_the_rows_numbers():
    """The verdict table's words: no verdict below the planned 8 pairs; "established" only at Holm < 0.05;
    "seen … not established" at raw p < 0.05 above it; otherwise the δ80 of the row (hand-made differences)."""
    v = _module("issue47", HERE / "scale_issue47.py").verdict
    from meanfield.studies.stats import paired_difference

    up = paired_difference([1.1, 1.2, 1.15, 1.12, 1.18, 1.11, 1.16, 1.14], [1.0] * 8)  # every pair +0.1 to +0.2
    flat = paired_difference([1.01, 0.99, 1.02, 0.98, 1.0, 1.01, 0.99, 1.0], [1.0] * 8)
    assert v(up, 0.01, 3) == "3 of 8 pairs landed: no verdict yet"
    assert v(up, 0.01, 8) == "established: higher (Holm p < 0.05, 8 pairs)"
    assert v(up, 0.2, 8).startswith("seen (higher, raw p = ") and v(up, 0.2, 8).endswith("not established after Holm (8 pairs)")
    assert v(flat, 1.0, 8) == f"no difference as large as δ80 = {flat.detectable():.3g} nats (8 pairs)"
    assert v(None, 1.0, 0) == "0 of 8 pairs landed: no verdict yet"
    # an exploratory row is never "established": a Holm p < 0.05 within its sweep table is said to be only that
    e = _module("issue47", HERE / "scale_issue47.py").exploratory_verdict
    assert e(up, 0.01, 8) == "exploratory: higher (Holm p < 0.05 within the sweep table, 8 pairs; not a registered test)"
    assert e(flat, 1.0, 8) == "exploratory: " + v(flat, 1.0, 8) and "established" not in e(up, 0.01, 8)
    down = paired_difference([1.0] * 8, [1.1, 1.2, 1.15, 1.12, 1.18, 1.11, 1.16, 1.14])
    assert e(down, 0.01, 8).startswith("exploratory: lower (")


def test_scale_issue47_puts_p6_prime_in_the_primary_family_for_information():
    """P6 replaced by P6′ in the primary family, Holm over six (the pre-registration's "for information" line):
    raw p 0.001, 0.2, 0.3, 0.4, 0.5 and P6′ 0.01 give Holm 0.006, 0.8, 0.9, 0.9, 0.9 and 0.05 (by hand: 6·0.001,
    5·0.01, 4·0.2, 3·0.3, then the step-down's running maximum); without P6′ it says it is not testable yet."""
    from types import SimpleNamespace

    f = _module("issue47", HERE / "scale_issue47.py").primary_family_with_p6_prime
    family = {f"P{i}": {"d": SimpleNamespace(p_value=p)} for i, p in zip(range(1, 6), (0.001, 0.2, 0.3, 0.4, 0.5))}
    line = f(family, SimpleNamespace(p_value=0.01))
    assert line.endswith("P1 0.006, P2 0.8, P3 0.9, P4 0.9, P5 0.9, P6′ 0.05.")
    assert f(family, None).endswith("not testable yet.")


def test_reruns_lend_their_drop_half_records_only_where_they_reproduce_the_committed_run(tmp_path):
    """Issue 47's P6 reruns stand for a committed primary run in the exploratory tables only if the rerun's final
    val_loss and half_random_gap equal the committed run's to 1e-6: ``p8`` seed 0 (identical finals) gets its
    rerun's 32-draw mean, seed 1 (val_loss off by 1e-4: the negative control) does not, and a run's own record
    is never replaced by a rerun's."""
    expl = _module("exploratory", HERE / "scale_exploratory.py")
    report = _module("report", HERE / "scale_report.py")
    primary, secondary, values = _exploratory_study(tmp_path)
    reruns = tmp_path / "p6"
    for seed, shift in ((0, 0.0), (1, 1e-4), (2, 0.0)):
        final = {"val_loss": values["p8"][seed] + shift, "half_random_gap": 0.4 + 0.01 * seed}
        _run_folder(reruns, "p8", seed, final, "finished", [(50, 3.0)])
        (tmp_path / "drop_half" / "p6").mkdir(parents=True, exist_ok=True)
        record = {"run": f"preset=p8_seed={seed}", "seed": seed, "mean": 0.9 + seed, "sd": 0.3}
        (tmp_path / "drop_half" / "p6" / f"preset=p8_seed={seed}.json").write_text(json.dumps(record))
    own = {"run": "preset=p8_seed=2", "seed": 2, "mean": 7.0, "sd": 0.3}  # seed 2 has a record of its own
    (tmp_path / "drop_half" / "primary").mkdir(parents=True)
    (tmp_path / "drop_half" / "primary" / "preset=p8_seed=2.json").write_text(json.dumps(own))
    everything, same, lines = report.rerun_draws(reruns, primary)
    assert sorted(everything["p8"]) == [0, 1, 2] and sorted(same["p8"]) == [0, 2]
    assert [line.endswith("(reproduced)") for line in lines] == [True, False, True]
    runs = expl.load(primary, secondary, reruns)
    assert runs["p8"][0]["drop_half_32"] == 0.9 and "drop_half_32" not in runs["p8"][1]
    assert runs["p8"][2]["drop_half_32"] == 7.0  # its own record, not the rerun's 2.9
    assert "drop_half_32" not in expl.load(primary, secondary)["p8"][0]  # without reruns: none


def test_half_error_is_the_finite_population_variance_of_a_random_half():
    """``drop_half_why.half_error``: E_S‖Y_S − Y‖² over all C(4, 2) = 6 halves of M = 4 particles, enumerated,
    equals σ²/(M − 1) per token to round-off (float64); the relative one is that over ‖Y‖². Negative control:
    the with-replacement variance σ²/k is 1.5 times larger here."""
    import itertools

    why = _module("why", HERE / "drop_half_why.py")
    g = torch.Generator().manual_seed(0)
    v = torch.randn(2, 4, 3, 5, generator=g, dtype=torch.float64) + 0.3  # (B, M, T, d), a shared part
    Y = v.mean(1)
    halves = list(itertools.combinations(range(4), 2))
    exact = sum((v[:, list(S)].mean(1) - Y).pow(2).sum(-1) for S in halves) / len(halves)  # (B, T)
    absolute, relative = why.half_error(v)
    torch.testing.assert_close(absolute, exact, rtol=1e-12, atol=0)
    torch.testing.assert_close(relative, exact / Y.pow(2).sum(-1), rtol=1e-12, atol=0)
    sigma2 = (v - Y.unsqueeze(1)).pow(2).sum(-1).mean(1)
    assert ((sigma2 / 2) / exact).min() > 1.49  # with replacement: σ²/k, not the half's error


def test_drop_half_why_table_groups_the_curve_by_beta_and_ranks_the_gap(tmp_path):
    """``drop_half_why.table``: one row per β of the M = 8 curve with the means over its runs, an arm off the
    curve (``p16``) and a run without a 32-draw record left out; Spearman's ρ of the gap with the relative
    spread equals scipy's on the kept runs (hand-made records: a gap that rises with the relative spread, ρ = 1);
    the weights' RMS predicted from β = 0's and the noise's walk adds the two in quadrature."""
    from scipy import stats as st

    why = _module("why", HERE / "drop_half_why.py")
    scale, out = tmp_path / "scale", tmp_path / "why"
    out.mkdir()
    runs = [("p8", 0, 0.80, 0.9), ("p8", 1, 0.82, 1.0), ("p8-b1e-2", 3, 0.92, 1.3), ("p8-b1e-2", 4, 0.90, 1.2),
            ("p8-b3e-2", 3, 0.88, 1.1), ("p16", 0, 0.5, 9.9), ("p8-b3e-2", 4, 0.99, None)]  # fmt: skip
    for arm, seed, relative, gap in runs:
        name = f"preset={arm}_seed={seed}"
        record = {"run": name, "seed": seed, "arm": arm, "relative": relative, "spread": 10 * relative,
                  "check": 1.0, "val_loss": 1.7, "rms_qkv": 0.05 if arm == "p8" else 0.3,
                  "rms_o": 0.06 if arm == "p8" else 0.3, "noise_walk_rms": 0.0 if arm == "p8" else 0.12}  # fmt: skip
        (out / f"{name}.json").write_text(json.dumps(record))
        if gap is not None:
            stage = "p6" if arm == "p8" else "secondary"
            (scale / stage / name).mkdir(parents=True)
            (scale / stage / name / "point.json").write_text(json.dumps({"point": {"preset": arm}}))
            (scale / "drop_half" / stage).mkdir(parents=True, exist_ok=True)
            (scale / "drop_half" / stage / f"{name}.json").write_text(json.dumps({"run": name, "seed": seed, "mean": gap}))
    text = why.table(out, scale)
    assert "| 0 | 2 (0, 1) | 1.700 | 0.950 | 8.1000 | 0.810 |" in text
    assert "| 0.01 | 2 (3, 4) | 1.700 | 1.250 | 9.1000 | 0.910 |" in text
    assert "| 0.03 | 1 (3) |" in text and "9.9" not in text  # seed 4 has no record; p16 is off the curve
    # learned ⊕ walk: β = 0's RMS (not the row's own 0.3) and the walk add in quadrature (√(0.05² + 0.12²) = 0.13,
    # not their sum 0.17)
    assert "| 0.1200 | 0.1300, 0.1342 |" in text and "| 0.0000 | 0.0500, 0.0600 |" in text
    kept = [r for r in runs if r[0] != "p16" and r[3] is not None]
    rho = st.spearmanr([r[3] for r in kept], [r[2] for r in kept]).statistic
    assert rho == pytest.approx(1.0) and f"relative spread over the 5 runs: {rho:+.2f}" in text


def test_scale_lr_early_losses_read_each_finished_tuning_runs_loss_at_the_plateau(tmp_path):
    """``scale_lr.early_losses``: the training loss logged at step 450 of each finished tuning run, by arm and lr
    (hand-made ``metrics.jsonl``: the value at step 450, not its neighbours'); a diverged run and runs off the
    tuning grid (another lr, seed or arm, or not a tuning run: controls) are left out; ``markdown`` prints it as
    its own descriptive table."""
    lr = _module("lr", HERE / "scale_lr.py")
    tune = tmp_path / "lr_tune"
    for name, preset, seed, loss in (("a", "tune+mha8+lr3e-4", 0, 2.26), ("b", "tune+mha8+lr3e-4", 1, 2.28),
                                     ("c", "tune+p8+lr1e-3", 0, 2.05), ("d", "tune+p8+lr3e-3", 0, None),
                                     ("e", "p8", 0, 9.0), ("f", "tune+p8+lr1e-2", 0, 9.1),
                                     ("g", "tune+p8+lr1e-3", 5, 9.2), ("h", "tune+p99+lr1e-3", 0, 9.3)):  # fmt: skip
        _fake_run(tune / name, preset, seed, 1.6 if loss is not None else None)
        steps = [{"step": 400, "train_loss": 7.0}, {"step": 450, "train_loss": loss if loss is not None else 8.0},
                 {"step": 450, "val_loss": 5.0}, {"step": 500, "train_loss": 6.0}]  # fmt: skip
        (tune / name / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in steps) + "\n")
    early = lr.early_losses(tune)  # off the grid, left out: an lr (1e-2), a seed (5), an arm (p99), not tuning (p8)
    assert early == {"mha8": {"3e-4": [2.26, 2.28]}, "p8": {"1e-3": [2.05]}} and list(early) == ["mha8", "p8"]
    text = lr.markdown({}, {}, [], early)
    assert "| mha8 | 2.270 [2.260, 2.280] (n=2) | — | — |" in text and "| p8 | — | 2.050 [2.050, 2.050] (n=1) | — |" in text
    assert "Training loss at step" not in lr.markdown({}, {}, [])  # no runs: no table
