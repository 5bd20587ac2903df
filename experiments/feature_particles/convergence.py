"""Convergence in M of trained feature-particle networks (issue 13): the loss excess and the particle law.

Theory (Mei, Montanari & Nguyen 2018; Rotskoff & Vanden-Eijnden 2018): at a fixed training time T the test
loss of an M-particle mean-field network exceeds its M → ∞ limit by O(1/M), and the empirical law of the
particles ``ν_M = 1/M Σ δ_{(a_i, w_i)}`` approaches the limit law.

Set-up (one core, minutes): the teacher–student task of ``teacher_student.toml`` (two-index ReLU teacher,
d = 16, 4,096 training samples, w_i on the sphere, |a_i| ≤ 4), Langevin SGD ×M at lr = 0.5 for T = 1000
steps of batch 256 (t = 500 in mean-field time) at β = 0 and at a constant β > 0, the same batch order for
every M. *Coupled initialisations*: replicate r draws one i.i.d. sequence of M_max particles, and the
M-particle network starts from its first M (so every smaller network's particles are a subset of the larger
one's). The reference is one network of M_ref = 16·M_max particles from an independent draw.

Measured through :func:`meanfield.studies.in_memory.convergence_in_m` (least-squares slope of log mean on log M,
bootstrap percentile CI over the replicates):

- the **loss excess** ``E L_M(T) − L_ref(T)`` (a custom metric of the trained cloud);
- ``E W2²(ν_M(T), ν_ref(T))`` on the particles ``(a_i, w_i) ∈ R^{17}``, as the sliced W2² (256 directions):
  the exact W2² between an empirical law in R^17 and its limit decays only like M^{-2/17} (the curse of
  dimension of empirical measures), which would hide any other rate, while the sliced W2² of M i.i.d. points
  decays like M^{-1} (one-dimensional projections);
- the same W2² **at initialisation** ``E W2²(ν_M(0), ν_ref(0))``: the i.i.d. sampling baseline that the
  trained law cannot beat.

Writes ``OUT/result.json`` (every replicate's numbers, the slopes and CIs) and ``OUT/environment.json``.

    python experiments/feature_particles/convergence.py --out experiments/feature_particles/results/convergence

**The scan** (``--preset scan``, issue 28): the loss excess only, at d ∈ {8, 16, 32} (the task and the particles
``(a_i, w_i) ∈ R^{d+1}`` of that d), M ∈ {16, …, 4096} with 32 coupled replicates each, and R = 3 independent
reference networks of M_ref = 65,536 particles per d (reference j: seed ``REF_SEED + j``; at d = 16, j = 0 and
the replicates r < 5 are the networks of the ``wide`` preset), β = 1e-3 (``--betas 0.001,0`` adds β = 0).
Per d and β, on the test MSE ``L_M`` (:func:`analyse`): the exponent by the estimators ``reference`` (the R
references' mean and SE propagated), ``fit`` (L_∞ free), ``differences`` (reference-free) and ``exact`` (the
naive one, as above); the nested fits ``L_∞ + c/(M + M0)`` against ``L_∞ + c/M`` (:func:`offset_law_fit`),
with and without the references; and, on each reference, the 1/M constant that i.i.d. sampling of its law
alone would give (:func:`iid_constant`); the split of the mean loss into the networks' spread
``E_x Var f_M(x)`` and the error of their mean predictor (:func:`fluctuation`). Two files per network under
``OUT/points`` (its record and its test predictions, written atomically: an interrupted scan resumes at the
first missing network), then ``OUT/result.json`` (the same for a resumed scan as for an
uninterrupted one), ``OUT/timing.json`` (CPU and wall seconds, from the networks' files) and
``OUT/environment.json``.

    python experiments/feature_particles/convergence.py --preset scan --out experiments/feature_particles/results/convergence_scan
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import subprocess
import time
import warnings
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from meanfield import data as _data
from meanfield._io import json_clean, write_atomic, write_json_atomic
from meanfield.metrics.wasserstein import w2_squared
from meanfield.nn import FeatureParticles
from meanfield.optim import Langevin
from meanfield.studies.in_memory import convergence_in_m

D, K, N_TRAIN, N_TEST, BATCH, LR, A = 16, 2, 4096, 2048, 256, 0.5, 4.0
PRESETS = {
    "smoke": dict(Ms=(8, 16, 32), reps=3, ref_factor=4, steps=20, betas=(0.0, 1e-3)),
    "quick": dict(Ms=(16, 64, 256, 1024), reps=5, ref_factor=16, steps=1000, betas=(0.0, 1e-3)),
    "wide": dict(Ms=(16, 64, 256, 1024, 4096), reps=5, ref_factor=16, steps=1000, betas=(1e-3,)),
    "full": dict(Ms=(16, 64, 256, 1024, 4096), reps=10, ref_factor=16, steps=4000, betas=(0.0, 1e-3)),
}


def init_particles(M: int, seed: int, d: int = D) -> tuple[torch.Tensor, torch.Tensor]:
    """An i.i.d. sequence of M particles: ``a_i ~ N(0, 1)`` clipped to [−A, A], ``w_i`` uniform on S^{d−1}.

    Drawn particle by particle from one generator (rows of one ``(M, d + 1)`` normal draw), so the first m
    particles of ``init_particles(M, s)`` are ``init_particles(m, s)`` for every m ≤ M (the coupling).
    """
    g = torch.Generator().manual_seed(seed)
    z = torch.empty(M, d + 1, dtype=torch.float64)
    for i in range(0, M, 1024):  # fixed chunks: the stream does not depend on M
        n = min(1024, M - i)
        z[i : i + n] = torch.randn(1024, d + 1, generator=g, dtype=torch.float64)[:n]
    a = z[:, 0].clamp(-A, A)  # (M,)
    w = z[:, 1:] / z[:, 1:].norm(dim=1, keepdim=True)  # (M, d)
    return a.float(), w.float()


def cloud(layer: FeatureParticles) -> torch.Tensor:
    """The particles ``(a_i, w_i)`` as a cloud ``(M, d + 1)``."""
    return torch.cat([layer.a.detach()[:, None], layer.w.detach()], 1)


def train(a0: torch.Tensor, w0: torch.Tensor, beta: float, steps: int, noise_seed: int, task) -> torch.Tensor:
    """Train the network started at ``(a0 (M,), w0 (M, d))``; return its final cloud ``(M, d + 1)``."""
    M, d = w0.shape
    layer = FeatureParticles(d, M, "relu", A=A, sphere=True)
    with torch.no_grad():
        layer.a.copy_(a0)
        layer.w.copy_(w0)
    opt = Langevin(Langevin.param_groups_for(layer), lr=LR, beta=beta, seed=noise_seed)
    batches = _data.Batches(N_TRAIN, BATCH, seed=12345)  # the same batch order for every M and replicate
    for _ in range(steps):
        idx = batches.next_indices()
        opt.zero_grad()
        (0.5 * F.mse_loss(layer(task.x_train[idx]), task.y_train[idx])).backward()
        opt.step()
    return cloud(layer)


def test_mse(clouds: torch.Tensor, task) -> torch.Tensor:
    """Test MSE of the networks whose particles are ``clouds (B, M, d + 1)``: ``(B,)``."""
    a, w = clouds[..., 0], clouds[..., 1:]  # (B, M), (B, M, d)
    f = torch.relu(task.x_test @ w.transpose(1, 2)) @ a.unsqueeze(-1) / a.shape[1]  # (B, N, 1)
    return (f[..., 0] - task.y_test).square().mean(1)  # (B,)


# --------------------------------------------------------------------------------------------------------
# The scan in d (issue 28): replicated references, every estimator of studies, the law L_∞ + c/(M + M0)

SCAN_PRESETS = {
    "scan": dict(
        ds=(8, 16, 32),
        Ms=(16, 64, 256, 1024, 4096),
        reps=32,
        n_refs=3,
        M_ref=65_536,
        steps=1000,
        betas=(1e-3,),
        n_boot=2000,
    ),
    "scan_smoke": dict(
        ds=(4, 8), Ms=(8, 16, 32, 64), reps=3, n_refs=2, M_ref=256, steps=10, betas=(1e-3,), n_boot=200
    ),
}
"""The scan presets: every d × β × (M × replicate, and ``n_refs`` reference networks of ``M_ref`` particles)."""
REF_SEED = 10_000
"""Reference network j starts from ``init_particles(M_ref, REF_SEED + j, d)`` with noise seed ``REF_SEED + j``
(j = 0 at d = 16 is the reference of the ``wide`` preset; replicate r uses seed r for both, as there)."""
SCAN_ESTIMATORS = ("reference", "fit", "differences", "exact")
LEVEL = 0.95


def iid_constant(clouds: torch.Tensor, task, chunk: int = 4096) -> float:
    r"""``E_x Var_i φ_i(x)``, ``φ_i(x) = a_i relu(w_i·x)``, over the test inputs, for a cloud ``(M, d + 1)``.

    If the M particles of a network were i.i.d. draws of this cloud's law, its expected test MSE would exceed
    the law's by exactly this constant over M (``f_M`` is the mean of M i.i.d. ``φ_i``): the 1/M constant of
    sampling alone, with no correlation built by the dynamics. Accumulated in float64 over particle chunks.
    """
    x = task.x_test  # (N, d)
    s1 = torch.zeros(x.shape[0], dtype=torch.float64)
    s2 = torch.zeros(x.shape[0], dtype=torch.float64)
    for i in range(0, clouds.shape[0], chunk):
        c = clouds[i : i + chunk]  # (m, d + 1)
        phi = (torch.relu(x @ c[:, 1:].T) * c[:, 0]).double()  # (N, m)
        s1 += phi.sum(1)
        s2 += phi.square().sum(1)
    M = clouds.shape[0]
    return float((s2 / M - (s1 / M).square()).mean())


def point_path(out: Path, d: int, beta: float, M: int | None, r: int) -> Path:
    """The file of one network of the scan: replicate r at M, or reference r (``M=None``)."""
    name = f"ref{r}.json" if M is None else f"M{M}_r{r}.json"
    return out / "points" / f"d{d}" / f"beta{float(beta)!r}" / name


def predict(clouds: torch.Tensor, task) -> torch.Tensor:
    """Test predictions ``f(x)`` of the networks ``clouds (B, M, d + 1)``: ``(B, N)`` (as in :func:`test_mse`)."""
    a, w = clouds[..., 0], clouds[..., 1:]  # (B, M), (B, M, d)
    return (torch.relu(task.x_test @ w.transpose(1, 2)) @ a.unsqueeze(-1) / a.shape[1])[..., 0]  # (B, N)


def run_point(
    d: int, beta: float, M: int, r: int, steps: int, task, *, reference: bool
) -> tuple[dict, np.ndarray]:
    """Train one network of the scan and measure it: replicate r at M, or reference r at ``M``.

    Returns its record (test MSE ``loss``, seeds, times; for a reference the i.i.d. constants) and its test
    predictions ``(N,)`` (float32).
    """
    seed = REF_SEED + r if reference else r
    wall, cpu = time.time(), time.process_time()
    a0, w0 = init_particles(M, seed, d)
    cloud_T = train(a0, w0, beta, steps, noise_seed=seed, task=task)  # (M, d + 1)
    rec = dict(
        d=d, beta=beta, M=M, replicate=r, reference=reference, seed=seed, steps=steps,
        loss=float(test_mse(cloud_T[None], task)[0]),
    )  # fmt: skip
    if reference:  # the 1/M constant of i.i.d. sampling, of the trained law and of the initial one
        rec["iid_constant"] = iid_constant(cloud_T, task)
        rec["iid_constant_init"] = iid_constant(torch.cat([a0[:, None], w0], 1), task)
    pred = predict(cloud_T[None], task)[0].numpy()  # (N,)
    rec["wall_time_s"] = time.time() - wall
    rec["cpu_time_s"] = time.process_time() - cpu
    return rec, pred


def _wls_line(x: np.ndarray, m: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Weighted least squares ``m ≈ L + c·x`` along the last axis (``x``, ``m`` broadcast, ``(..., K)``;
    weights ``w (K,)`` = 1/SE²): ``L, c, χ²`` (each ``(...)``), χ² the weighted residual sum of squares."""
    W = w.sum()
    xb = (w * x).sum(-1) / W
    mb = (w * m).sum(-1) / W
    xc = x - xb[..., None]
    c = (w * xc * (m - mb[..., None])).sum(-1) / (w * xc * xc).sum(-1)
    L = mb - c * xb
    chi2 = (w * (m - L[..., None] - c[..., None] * x) ** 2).sum(-1)
    return L, c, chi2


def _inverse_sizes(Ms: np.ndarray, M0: np.ndarray) -> np.ndarray:
    """``1/(M + M0)`` for ``M0 (...)``, ``Ms (K,)`` (``M = ∞`` → 0): shape ``(..., K)``."""
    with np.errstate(divide="ignore"):
        return np.where(np.isinf(Ms), 0.0, 1.0 / (Ms + np.asarray(M0)[..., None]))


def offset_law_fit(
    Ms,
    values,
    references=None,
    *,
    M_ref: float = math.inf,
    n_boot: int = 2000,
    seed: int = 0,
    level: float = LEVEL,
    grid_size: int = 600,
) -> dict:
    r"""Fit ``E L_M = L_∞ + c/(M + M0)`` and the nested ``L_∞ + c/M`` (``M0 = 0``) to replicate values.

    Weighted least squares of the means per M (weights 1/SE², SE of the replicates); with ``references``
    (``R ≥ 2`` independent reference values) their mean is one more point (weight 1/SE_ref²), at ``M_ref``:
    the law is explicit, so a reference of finite size is placed where it is (``M_ref = ∞``: on the limit, as
    the ``"reference"`` estimator of :func:`meanfield.studies.in_memory.convergence_in_m` does). For a given M0 the
    fit is linear in ``(L_∞, c)``; M0 is profiled on a grid of ``u = log((M_min + M0)/M_min)`` (uniform, from
    ``M0 = −0.999 M_min`` to ``100 M_max``), then refined by bounded Brent (the point estimate) or by the
    parabola through the three grid points around the minimum (the bootstrap draws).

    Intervals: percentile intervals of ``n_boot`` bootstrap fits (replicates resampled within each M, the
    reference mean redrawn as ``ȳ_ref + SE_ref·t_{R−1}``; the weights stay those of the data). ``Δχ² =
    χ²(c/M) − χ²(c/(M+M0))`` and its ``χ²_1`` p-value say whether M0 is needed (the SEs are themselves estimated
    from the replicates, so χ² is only approximately χ²-distributed).

    Args:
        Ms: sizes ``(K,)``, increasing; values: ``(K, reps)``; references: ``(R,)`` or ``None``; M_ref: their
        size.

    Returns:
        a dict (JSON-ready): ``c_over_M`` and ``c_over_M_plus_M0`` (estimates, intervals, χ², degrees of
        freedom), ``delta_chi2``, ``p_value``, ``preferred``.
    """
    from scipy import optimize
    from scipy import stats as st

    Ms = np.asarray(Ms, dtype=float)  # (K,)
    v = np.asarray(values, dtype=float)  # (K, reps)
    K, reps = v.shape
    rng = np.random.default_rng(seed)
    m = v.mean(1)
    se2 = v.var(1, ddof=1) / reps
    se2 = np.where(se2 > 0, se2, se2[se2 > 0].min() if (se2 > 0).any() else 1.0)
    boot = np.stack([row[rng.integers(0, reps, (n_boot, reps))].mean(1) for row in v], 1)  # (n_boot, K)
    w = 1 / se2
    M_fit = Ms
    if references is not None:
        ref = np.asarray(references, dtype=float).reshape(-1)
        R = ref.size
        if R < 2:
            raise ValueError(f"references must hold ≥ 2 independent values, got {R}")
        ref_mean, ref_se = float(ref.mean()), float(ref.std(ddof=1) / np.sqrt(R))
        M_fit = np.append(Ms, float(M_ref))
        m = np.append(m, ref_mean)
        w = np.append(w, 1 / ref_se**2 if ref_se > 0 else 1e12 * w.max())
        boot = np.concatenate([boot, (ref_mean + ref_se * rng.standard_t(R - 1, n_boot))[:, None]], 1)
    n = M_fit.size
    M_min, M_max = float(Ms[0]), float(Ms[-1])

    def M0_of(u):
        return M_min * np.expm1(u)

    def chi2_of(u: float) -> float:
        return float(_wls_line(_inverse_sizes(M_fit, M0_of(u)), m, w)[2])

    grid = np.linspace(np.log(1e-3), np.log1p(100 * M_max / M_min), grid_size)  # (G,)
    X = _inverse_sizes(M_fit, M0_of(grid))  # (G, n)
    chi2_grid = _wls_line(X, m, w)[2]  # (G,)
    i = int(chi2_grid.argmin())
    at_edge = i in (0, grid_size - 1)
    lo_u, hi_u = grid[max(i - 1, 0)], grid[min(i + 1, grid_size - 1)]
    u_hat = grid[i] if at_edge else optimize.minimize_scalar(chi2_of, bounds=(lo_u, hi_u), method="bounded").x
    if chi2_of(u_hat) > chi2_grid[i]:
        u_hat = grid[i]
    L1, c1, chi2_1 = _wls_line(_inverse_sizes(M_fit, 0.0), m, w)
    L2, c2, chi2_2 = _wls_line(_inverse_sizes(M_fit, M0_of(u_hat)), m, w)

    # the bootstrap: c/M in closed form, M0 on the grid (parabola through the three points around the minimum)
    Lb1, cb1, _ = _wls_line(_inverse_sizes(M_fit, 0.0), boot, w)  # (n_boot,)
    ub = np.empty(n_boot)
    edges = np.zeros(n_boot, dtype=bool)
    for s in range(0, n_boot, 250):
        chi = _wls_line(X[None], boot[s : s + 250, None, :], w)[2]  # (b, G)
        j = chi.argmin(1)
        edges[s : s + 250] = (j == 0) | (j == grid_size - 1)
        jj = np.clip(j, 1, grid_size - 2)
        rows = np.arange(chi.shape[0])
        f0, f1, f2 = chi[rows, jj - 1], chi[rows, jj], chi[rows, jj + 1]
        curv = f0 - 2 * f1 + f2
        with np.errstate(divide="ignore", invalid="ignore"):
            shift = np.where(curv > 0, 0.5 * (f0 - f2) / curv, 0.0).clip(-1, 1)
        ub[s : s + 250] = np.where(edges[s : s + 250], grid[j], grid[jj] + shift * (grid[1] - grid[0]))
    Lb2, cb2, _ = _wls_line(_inverse_sizes(M_fit, M0_of(ub)), boot, w)
    q = [100 * (1 - level) / 2, 100 * (1 + level) / 2]

    def ci(t: np.ndarray) -> list[float]:
        return [float(x) for x in np.percentile(t, q)]

    delta = float(chi2_1 - chi2_2)
    p = float(st.chi2.sf(max(delta, 0.0), 1))
    return {
        "points": int(n),
        "with_reference": references is not None,
        "reference_at_M": None if references is None or math.isinf(M_ref) else float(M_ref),  # None: ∞
        "c_over_M": dict(
            L_inf=float(L1), c=float(c1), chi2=float(chi2_1), dof=n - 2, L_inf_ci=ci(Lb1), c_ci=ci(cb1)
        ),
        "c_over_M_plus_M0": dict(
            L_inf=float(L2),
            c=float(c2),
            M0=float(M0_of(u_hat)),
            chi2=float(chi2_2),
            dof=n - 3,
            L_inf_ci=ci(Lb2),
            c_ci=ci(cb2),
            M0_ci=ci(M0_of(ub)),
            M0_at_edge=bool(at_edge),
            boot_at_edge=float(edges.mean()),
        ),
        "delta_chi2": delta,
        "p_value": p,
        "preferred": "c/(M+M0)" if p < 1 - level else "c/M",
        "level": level,
    }


def analyse(
    Ms,
    values,
    references,
    *,
    M_ref: float = math.inf,
    n_boot: int = 2000,
    seed: int = 0,
    level: float = LEVEL,
) -> dict:
    """Every rate estimate of one (d, β) of the scan from the replicate losses ``values (K, reps)`` and the
    ``R`` reference losses ``references (R,)``: the exponent by each of :data:`SCAN_ESTIMATORS`
    (:func:`meanfield.studies.in_memory.convergence_in_m` on the test MSE as ``quantity``), and the laws
    ``c/(M + M0)`` against ``c/M`` without and with the references at ``M_ref`` (:func:`offset_law_fit`)."""
    Ms = [int(M) for M in Ms]
    v = torch.as_tensor(np.asarray(values, dtype=float))  # (K, reps)
    ref = torch.as_tensor(np.asarray(references, dtype=float))  # (R,)
    reps = v.shape[1]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        s = convergence_in_m(
            lambda M, n: {"loss": v[Ms.index(M)]},
            Ms,
            reps=reps,
            reference=ref,
            quantity="loss",
            generator=seed,
            n_boot=n_boot,
            level=level,
            estimator=SCAN_ESTIMATORS,
            progress=False,
        )
    mean, se = v.mean(1), v.std(1) / math.sqrt(reps)
    ref_mean, ref_se = float(ref.mean()), float(ref.std() / math.sqrt(ref.numel()))
    return {
        "loss": {"values": v.tolist(), "mean": mean.tolist(), "se": se.tolist()},
        "reference": {"values": ref.tolist(), "mean": ref_mean, "se": ref_se},
        "excess": {
            "mean": (mean - ref_mean).tolist(),
            "se": (se.square() + ref_se**2).sqrt().tolist(),  # replicates and reference mean, independent
        },
        "estimators": {
            e: dict(slope=r.slope, slope_ci=list(r.slope_ci), limit=r.limit, coefficient=r.coefficient)
            for e, r in s.estimates.items()
        },
        "warnings": sorted({str(w.message) for w in caught}),
        "law": {
            "free": offset_law_fit(Ms, v.numpy(), None, n_boot=n_boot, seed=seed, level=level),
            "with_reference": offset_law_fit(
                Ms, v.numpy(), ref.numpy(), M_ref=M_ref, n_boot=n_boot, seed=seed, level=level
            ),
        },
    }


def fluctuation(Ms, preds, M_ref: int, ref_preds: np.ndarray, y: np.ndarray, L_ref: float) -> dict:
    r"""The split of the mean test MSE into the spread of the networks and the error of their mean predictor.

    For the ``n`` replicates at one M (predictions ``f_r (N,)``), exactly (population variance over r):
    ``mean_r L_r = E_x (f̄ − y)² + E_x var_r f``. Reported per M: ``variance`` = ``E_x Var_r f_M(x)``
    (unbiased, ddof 1), ``M × variance`` (constant in M if the networks' spread is O(1/M)), and
    ``bias_squared`` = ``E_x (f̄_M − y)²`` (which holds ``variance/n`` of sampling noise), and
    ``mean_predictor_excess`` = ``bias_squared − variance/n − L_ref`` (unbiased for ``E_x (E f_M − y)² −
    E L_ref``); the same for the R references. The measured excess ``mean_M − L_ref`` is exactly ``variance +
    mean_predictor_excess``: the 1/M constant ``c`` splits into a spread part (the limit of ``M × variance``)
    and a mean-predictor part.

    Args:
        Ms: sizes; preds: per M an array ``(n, N)``; ref_preds: ``(R, N)``; y: test targets ``(N,)``; L_ref: the
        references' mean test MSE.
    """
    y = np.asarray(y, dtype=float).reshape(-1)

    def split(f: np.ndarray) -> tuple[float, float]:
        f = np.asarray(f, dtype=float)
        return float(f.var(0, ddof=1).mean()), float(((f.mean(0) - y) ** 2).mean())

    per_M = [split(f) for f in preds]
    ref_var, ref_bias = split(ref_preds)
    return {
        "variance": [v for v, _ in per_M],
        "M_times_variance": [int(M) * v for M, (v, _) in zip(Ms, per_M)],
        "bias_squared": [b for _, b in per_M],
        "mean_predictor_excess": [b - v / len(f) - L_ref for f, (v, b) in zip(preds, per_M)],
        "reference": {"variance": ref_var, "M_times_variance": M_ref * ref_var, "bias_squared": ref_bias},
    }


def scan_config(preset: str, ds=None, betas=None) -> dict:
    """The configuration of a scan (what ``config.json`` holds; a folder resumes only the same one)."""
    p = dict(SCAN_PRESETS[preset])
    if ds is not None:
        p["ds"] = tuple(ds)
    if betas is not None:
        p["betas"] = tuple(betas)
    return dict(
        preset=preset,
        ds=[int(d) for d in p["ds"]],
        Ms=[int(M) for M in p["Ms"]],
        reps=p["reps"],
        n_refs=p["n_refs"],
        M_ref=p["M_ref"],
        steps=p["steps"],
        betas=[float(b) for b in p["betas"]],
        n_boot=p["n_boot"],
        lr=LR,
        batch_size=BATCH,
        n_train=N_TRAIN,
        n_test=N_TEST,
        k=K,
        A=A,
        ref_seed=REF_SEED,
    )


def scan_jobs(config: dict) -> list[tuple[int, float, int, int, bool]]:
    """Every network of a scan as ``(d, β, M, r, reference)``, in the order they are run (the references of a
    (d, β) first, then M increasing)."""
    jobs = []
    for d in config["ds"]:
        for beta in config["betas"]:
            jobs += [(d, beta, config["M_ref"], j, True) for j in range(config["n_refs"])]
            jobs += [(d, beta, M, r, False) for M in config["Ms"] for r in range(config["reps"])]
    return jobs


def run_scan(out: str | os.PathLike, config: dict, *, progress: bool = True) -> dict:
    """Run (or resume) a scan into ``out``: one JSON file per network under ``out/points`` (written atomically,
    so an interrupted scan restarts at the first missing network), then ``out/result.json`` (deterministic:
    the same for a resumed scan as for an uninterrupted one), ``out/timing.json`` and ``out/environment.json``.
    """
    out = Path(out)
    cfg_path = out / "config.json"
    if cfg_path.exists():
        old = json.loads(cfg_path.read_text())
        if old != json_clean(config):
            raise SystemExit(
                f"{out} holds a scan of another configuration ({cfg_path}); use another --out or remove it"
            )
    else:
        write_json_atomic(cfg_path, config)
    jobs = scan_jobs(config)
    done = [point_path(out, d, b, None if ref else M, r).exists() for d, b, M, r, ref in jobs]
    tasks: dict[int, object] = {}

    def task_of(d: int):
        if d not in tasks:
            tasks[d] = _data.teacher_student(d, N_TRAIN, N_TEST, k=K, activation="relu", seed=2026)
        return tasks[d]

    bar = tqdm(
        total=sum(j[2] for j in jobs),
        initial=sum(j[2] for j, ok in zip(jobs, done) if ok),
        unit="particle",
        unit_scale=True,
        desc="scan (particles trained)",
        disable=not progress,
    )
    for (d, beta, M, r, ref), ok in zip(jobs, done):
        if ok:
            continue
        bar.set_postfix_str(f"d={d} β={beta:g} {'ref' if ref else 'M'}={M} r={r}")
        rec, pred = run_point(d, beta, M, r, config["steps"], task_of(d), reference=ref)
        path = point_path(out, d, beta, None if ref else M, r)
        write_atomic(path.with_suffix(".npy"), lambda f, pred=pred: np.save(f, pred))  # before: the JSON
        write_json_atomic(path, rec)  # marks the network done
        bar.update(M)
    bar.close()

    result: dict = {"config": config, "scan": {}}
    timing = {"cpu_time_s": 0.0, "wall_time_s": 0.0, "by_d": {}}
    for d in config["ds"]:
        for beta in config["betas"]:
            load = [
                [json.loads(point_path(out, d, beta, M, r).read_text()) for r in range(config["reps"])]
                for M in config["Ms"]
            ]
            refs = [
                json.loads(point_path(out, d, beta, None, j).read_text()) for j in range(config["n_refs"])
            ]
            a = analyse(
                config["Ms"],
                [[p["loss"] for p in row] for row in load],
                [p["loss"] for p in refs],
                M_ref=config["M_ref"],
                n_boot=config["n_boot"],
            )
            a["iid_constant"] = {
                "trained": [p["iid_constant"] for p in refs],
                "init": [p["iid_constant_init"] for p in refs],
            }
            preds = [
                np.stack(
                    [
                        np.load(point_path(out, d, beta, M, r).with_suffix(".npy"))
                        for r in range(config["reps"])
                    ]
                )
                for M in config["Ms"]
            ]  # per M: (reps, N)
            ref_preds = np.stack(
                [
                    np.load(point_path(out, d, beta, None, j).with_suffix(".npy"))
                    for j in range(config["n_refs"])
                ]
            )  # (R, N)
            a["fluctuation"] = fluctuation(
                config["Ms"],
                preds,
                config["M_ref"],
                ref_preds,
                task_of(d).y_test.numpy(),
                a["reference"]["mean"],
            )
            result["scan"].setdefault(str(d), {"task": task_of(d).description, "betas": {}})["betas"][
                repr(float(beta))
            ] = a
            points = [p for row in load for p in row] + refs
            t = timing["by_d"].setdefault(str(d), {"cpu_time_s": 0.0, "wall_time_s": 0.0})
            for key in ("cpu_time_s", "wall_time_s"):
                s = sum(p[key] for p in points)
                t[key] += s
                timing[key] += s
    write_json_atomic(out / "result.json", result)
    write_json_atomic(out / "timing.json", timing)
    commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    env = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "git_commit": commit,
        "platform": platform.platform(),
        "command": f"convergence.py --preset {config['preset']}",
    }
    write_json_atomic(out / "environment.json", env)
    return result


def summary_lines(result: dict) -> list[str]:
    """One line per (d, β): the exponent by every estimator, M0 and c of both laws."""
    lines = []
    for d, entry in result["scan"].items():
        for beta, a in entry["betas"].items():
            est = ", ".join(
                f"{e} {r['slope']:.3f} [{r['slope_ci'][0]:.3f}, {r['slope_ci'][1]:.3f}]"
                for e, r in a["estimators"].items()
            )
            law = a["law"]["free"]
            m0 = law["c_over_M_plus_M0"]
            lines.append(
                f"d={d} β={beta}: slopes {est}; c/M: c={law['c_over_M']['c']:.4g} χ²={law['c_over_M']['chi2']:.3g}"
                f"; c/(M+M0): M0={m0['M0']:.3g} [{m0['M0_ci'][0]:.3g}, {m0['M0_ci'][1]:.3g}] c={m0['c']:.4g} "
                f"χ²={m0['chi2']:.3g} (p={law['p_value']:.3g})"
            )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--preset", default="quick", choices=sorted({**PRESETS, **SCAN_PRESETS}))
    parser.add_argument(
        "--ds", help="scan presets: input dimensions, comma-separated (default: the preset's)"
    )
    parser.add_argument("--betas", help="scan presets: temperatures, comma-separated (default: the preset's)")
    args = parser.parse_args()
    torch.set_num_threads(int(os.environ.get("THREADS", "1")))
    if args.preset in SCAN_PRESETS:
        config = scan_config(
            args.preset,
            ds=None if args.ds is None else [int(x) for x in args.ds.split(",")],
            betas=None if args.betas is None else [float(x) for x in args.betas.split(",")],
        )
        print("\n".join(summary_lines(run_scan(args.out, config))), flush=True)
        return
    if args.ds is not None or args.betas is not None:
        parser.error("--ds and --betas apply to the scan presets only")
    p = PRESETS[args.preset]
    Ms, reps, steps = list(p["Ms"]), p["reps"], p["steps"]
    M_ref = p["ref_factor"] * Ms[-1]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    task = _data.teacher_student(D, N_TRAIN, N_TEST, k=K, activation="relu", seed=2026)
    start = time.time()
    result: dict = {
        "preset": args.preset,
        "Ms": Ms,
        "reps": reps,
        "M_ref": M_ref,
        "steps": steps,
        "lr": LR,
        "batch_size": BATCH,
        "task": task.description,
        "betas": {},
    }
    inits = [init_particles(Ms[-1], seed) for seed in range(reps)]  # replicate r: one i.i.d. sequence
    a_ref0, w_ref0 = init_particles(M_ref, 10_000)
    ref0 = torch.cat([a_ref0[:, None], w_ref0], 1)  # (M_ref, d + 1)
    for beta in p["betas"]:
        t0 = time.time()
        ref = train(a_ref0, w_ref0, beta, steps, noise_seed=10_000, task=task)  # (M_ref, d + 1)
        L_ref = float(test_mse(ref[None], task)[0])
        trained = {
            M: torch.stack(
                [train(a[:M], w[:M], beta, steps, noise_seed=r, task=task) for r, (a, w) in enumerate(inits)]
            )
            for M in Ms
        }  # M -> (reps, M, d + 1)
        init = {M: torch.stack([torch.cat([a[:M, None], w[:M]], 1) for a, w in inits]) for M in Ms}

        def excess(x: torch.Tensor, y: torch.Tensor, L_ref: float = L_ref) -> torch.Tensor:
            return test_mse(x, task) - L_ref  # (B,)

        excess.__name__ = "loss_excess"

        def sliced(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return w2_squared(x, y, method="sliced", n_projections=256, seed=0)

        sliced.__name__ = "sliced_w2_squared"
        g = torch.Generator().manual_seed(0)  # shared by the three studies, drawn from in this order
        cases = {  # name: (clouds by M, reference cloud, metric)
            "loss_excess": (trained, ref, excess),
            "w2_trained": (trained, ref, sliced),
            "w2_init": (init, ref0, sliced),
        }
        studies = {
            name: convergence_in_m(
                lambda M, n, clouds=clouds: clouds[M],
                Ms,
                reps=reps,
                reference=reference,
                generator=g,
                metric=metric,
                progress=False,
            )
            for name, (clouds, reference, metric) in cases.items()
        }
        result["betas"][str(beta)] = {
            "L_ref": L_ref,
            "wall_time_s": time.time() - t0,
            **{
                name: {
                    "values": s.values.tolist(),
                    "mean": s.mean.tolist(),
                    "se": s.se.tolist(),
                    "floor": s.floor.tolist(),
                    "slope": s.slope,
                    "slope_ci": list(s.slope_ci),
                    "method": s.method,
                }
                for name, s in studies.items()
            },
        }
        print(
            f"beta={beta}: L_ref={L_ref:.4g}, "
            + ", ".join(
                f"{n} slope {s.slope:.3f} [{s.slope_ci[0]:.3f}, {s.slope_ci[1]:.3f}]"
                for n, s in studies.items()
            ),
            flush=True,
        )
    result["wall_time_s"] = time.time() - start
    (out / "result.json").write_text(json.dumps(result, indent=1))
    commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    env = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "git_commit": commit,
        "platform": platform.platform(),
        "command": f"convergence.py --preset {args.preset}",
    }
    (out / "environment.json").write_text(json.dumps(env, indent=1))


if __name__ == "__main__":
    main()
