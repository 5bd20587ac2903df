"""Value tests for the teacher–student data, the regression and image tasks, sweeps, figures and plotting.

Written for issue 25 (mutation testing): every test compares what the code returns with an independent
answer: the teacher formula and the documented draw order recomputed in numpy, the documented
initialisation law (bounds, Kolmogorov–Smirnov against scipy), a hand-written numpy forward and loss, scipy's
t-test, the bytes a fake script or a fake theory check wrote, the pixel size a PNG header states.

- ``meanfield.data.teacher``: labels, directions, inputs and noise by the documented recipe; the noise level
  by its sample variance (5 SE); defaults; the error messages name the argument;
- ``meanfield.tasks.regression``: ``WideMLP`` parameters (exact draws from the generator, law within bounds),
  forward against numpy; ``particle_metrics``' ``q``/``q_abs_a`` against a numpy projector; the two tasks'
  builds: their data, initialisation, loss, evaluation, dtype, device and description;
- ``meanfield.runs.sweeps``: a stopped worker refuses a point; the worker's signal handlers; ``_run_local`` with a
  pool of threads; ``sweep_runs`` with a fake point runner (metrics, ``sweep.json``, means and paired tests
  against scipy, the Ray branch); adoption of an old folder by its configuration; names, grid, log scale;
- ``meanfield.studies.figures.generate`` with fake theory checks and fake scripts;
- ``meanfield.studies.plotting``: sizes, dpi, grid, spines, axes layout, the saved file's format and pixel size.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import signal
import struct
import sys
import types
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy import stats as st

import meanfield.data as mdata
from meanfield import config as mconfig
from meanfield.config import ConfigError
from meanfield.data import ImageDataset, teacher_student
from meanfield.nn import FeatureParticles
from meanfield.runs import RunInterrupted, sweeps
from meanfield.studies import figures, plotting
from meanfield.studies import summary as summary_module
from meanfield.tasks.regression import (
    IMAGE_CLASSIFICATION,
    TEACHER_STUDENT,
    FeatureModel,
    ImageData,
    ImageModel,
    TeacherStudentData,
    WideMLP,
    particle_metrics,
)

ROOT = Path(__file__).resolve().parents[1]
TEACHER = ROOT / "experiments" / "teacher_student" / "config.toml"
F64 = torch.float64


def _derive(seed: int, stream: str) -> int:
    """The documented stream seed: ``int(sha256(f"{seed}/{stream}"))``, first 8 bytes little-endian, >> 2."""
    return int.from_bytes(hashlib.sha256(f"{seed}/{stream}".encode()).digest()[:8], "little") >> 2


# ----------------------------------------------------------------------------------------------------------
# meanfield.data.teacher
# ----------------------------------------------------------------------------------------------------------


def _np_directions(d: int, k: int, kind: str, seed: int) -> tuple[np.ndarray, torch.Generator]:
    """The teacher directions by the documented recipe (QR in numpy), and the generator after drawing them."""
    g = torch.Generator().manual_seed(seed)
    G = torch.randn(d, k, generator=g, dtype=F64).numpy()  # (d, k)
    if kind == "orthonormal":
        q, r = np.linalg.qr(G)
        s = np.sign(np.diag(r))
        s[s == 0] = 1
        return (q * s).T, g  # (k, d): diag(R) > 0 makes the factorisation unique
    return (G / np.linalg.norm(G, axis=0)).T, g


def test_teacher_labels_inputs_and_directions_follow_the_documented_recipe():
    """``y = Σ_j c_j He3(w*_j·x)`` recomputed in numpy (to 1e-11) from directions made by numpy's QR with
    ``diag(R) > 0`` and inputs drawn in the documented order; the coefficients are kept in float64 exactly.
    Negative control: the He2 teacher on the same inputs is far (> 0.1)."""
    d, n, m, seed, c = 5, 40, 30, 11, [0.1, -0.3, 0.7]
    ts = teacher_student(d, n, m, k=3, activation="he3", coefficients=c, seed=seed, dtype=F64)
    W, g = _np_directions(d, 3, "orthonormal", seed)
    x_train = torch.randn(n, d, generator=g, dtype=F64).numpy()
    x_test = torch.randn(m, d, generator=g, dtype=F64).numpy()
    assert np.abs(ts.directions.numpy() - W).max() < 1e-12
    assert np.array_equal(ts.x_train.numpy(), x_train) and np.array_equal(ts.x_test.numpy(), x_test)
    assert ts.coefficients.dtype == F64 and ts.coefficients.tolist() == c  # no float32 round trip
    cc = np.array(c)
    for x, y in ((x_train, ts.y_train), (x_test, ts.y_test)):
        z = x @ W.T
        assert np.abs(y.numpy() - (z**3 - 3 * z) @ cc).max() < 1e-11
        assert np.abs(y.numpy() - (z**2 - 1) @ cc).max() > 0.1  # negative control
    assert np.abs(ts.teacher(ts.x_test).numpy() - ts.y_test.numpy()).max() == 0.0


def test_teacher_default_coefficients_are_one_over_root_k_in_float64():
    """``c_j = 1/√k`` exactly in float64 (not a float32 value widened); the description says so."""
    ts = teacher_student(4, 6, 3, k=3, dtype=F64, seed=2)
    assert ts.coefficients.dtype == F64 and ts.coefficients.tolist() == [1 / math.sqrt(3)] * 3
    assert "c_j = 1/√3" in ts.description and "3-index" in ts.description


def test_teacher_defaults_are_one_relu_direction_orthonormal_seed_0():
    """The defaults: ``k = 1``, ReLU, orthonormal, seed 0, float32; labels ``relu(w*·x)`` recomputed in numpy
    (float32: to 1e-6); the whole description."""
    ts = teacher_student(4, 10, 5)
    W, g = _np_directions(4, 1, "orthonormal", 0)
    x = torch.randn(10, 4, generator=g).numpy()
    assert ts.directions.shape == (1, 4) and ts.x_train.dtype == torch.float32
    assert np.abs(ts.directions.numpy() - W).max() < 1e-6 and np.array_equal(ts.x_train.numpy(), x)
    assert np.abs(ts.y_train.numpy() - np.maximum(x @ W.T, 0)[:, 0]).max() < 1e-6
    assert ts.description == (
        "teacher–student regression, single-index relu teacher y = Σ_j c_j g(w*_j·x), c = 1, orthonormal "
        "unit directions, x ~ N(0, I_4); 10 train / 5 test samples; no label noise; seed 0"
    )
    assert ts.activation == "relu" and ts.label_noise == 0.0


def test_teacher_k_equal_to_d_is_a_rotation_and_random_directions_are_normalised_draws():
    """``k = d`` orthonormal directions form an orthogonal matrix (``W Wᵀ = I`` to 1e-12), equal to numpy's
    QR; ``k > d`` is refused. Random directions are the Gaussian columns divided by their norms (numpy)."""
    ts = teacher_student(3, 5, 2, k=3, dtype=F64, seed=8)
    W, _ = _np_directions(3, 3, "orthonormal", 8)
    assert np.abs(ts.directions.numpy() @ ts.directions.numpy().T - np.eye(3)).max() < 1e-12
    assert np.abs(ts.directions.numpy() - W).max() < 1e-12
    with pytest.raises(ValueError, match="k must be ≤ d = 3 for orthonormal directions, got k = 4"):
        teacher_student(3, 5, 2, k=4)
    rnd = teacher_student(3, 5, 2, k=6, directions="random", dtype=F64, seed=4)
    R, _ = _np_directions(3, 6, "random", 4)
    assert rnd.directions.shape == (6, 3) and np.abs(rnd.directions.numpy() - R).max() < 1e-15
    assert "random unit directions" in rnd.description


def test_teacher_label_noise_is_sigma_times_the_next_draws_and_has_variance_sigma_squared():
    """The training noise is exactly ``σ ε`` with ``ε`` the generator's next ``n_train`` normals; its sample
    variance is within 5 SE of ``σ²`` (SE = σ²·sqrt(2/(n−1)), n = 20000: detects a 5 % error in σ², 2.5 %
    in σ). Negative control: σ = 0.6 is rejected. The test labels stay noiseless unless ``noisy_test``."""
    sigma, n, m = 0.5, 20000, 4000
    ts = teacher_student(3, n, 50, label_noise=sigma, seed=5, dtype=F64)
    W, g = _np_directions(3, 1, "orthonormal", 5)
    x_train = torch.randn(n, 3, generator=g, dtype=F64).numpy()
    x_test = torch.randn(50, 3, generator=g, dtype=F64).numpy()
    eps = torch.randn(n, generator=g, dtype=F64).numpy()
    resid = ts.y_train.numpy() - np.maximum(x_train @ W.T, 0)[:, 0]
    assert np.abs(resid - sigma * eps).max() < 1e-12
    var, se = resid.var(ddof=1), sigma**2 * math.sqrt(2 / (n - 1))
    assert abs(var - sigma**2) <= 5 * se
    assert abs(var - 0.6**2) > 5 * se  # negative control
    assert np.abs(ts.y_test.numpy() - np.maximum(x_test @ W.T, 0)[:, 0]).max() < 1e-12
    assert ts.label_noise == sigma
    assert ts.description.endswith("; label noise σ = 0.5 on train (test noiseless); seed 5")
    noisy = teacher_student(3, 10, m, label_noise=sigma, noisy_test=True, seed=5, dtype=F64)
    r = (noisy.y_test - noisy.teacher(noisy.x_test)).numpy()
    assert abs(r.var(ddof=1) - sigma**2) <= 5 * sigma**2 * math.sqrt(2 / (m - 1))
    assert noisy.description.endswith("; label noise σ = 0.5 on train and test; seed 5")


def test_teacher_without_noise_gives_the_teacher_bit_for_bit():
    """``label_noise = 0``: ``y_train`` is the teacher's output itself (values and signs of zero), and the
    description says there is no noise."""
    ts = teacher_student(3, 300, 10, coefficients=[-1.0], seed=1, dtype=F64)
    ref = ts.teacher(ts.x_train)
    assert torch.equal(ts.y_train, ref) and torch.equal(torch.signbit(ts.y_train), torch.signbit(ref))
    assert ts.description.endswith("; no label noise; seed 1")


BAD_TEACHER = [
    ("d0", dict(d=0), ValueError, r"^d must be ≥ 1, got 0$"),
    ("dfloat", dict(d=2.0), TypeError, r"^d must be an int, got float$"),
    ("ntrain0", dict(n_train=0), ValueError, r"^n_train must be ≥ 1, got 0$"),
    ("ntest-1", dict(n_test=-1), ValueError, r"^n_test must be ≥ 0, got -1$"),
    ("k0", dict(k=0), ValueError, r"^k must be ≥ 1, got 0$"),
    ("noise-", dict(label_noise=-0.5), ValueError, r"^label_noise must be ≥ 0, got -0.5$"),
    (
        "dtype",
        dict(dtype=torch.int64),
        ValueError,
        r"^dtype must be a floating-point dtype, got torch.int64$",
    ),
    ("kind", dict(directions="grid"), ValueError, r"^directions must be one of \('orthonormal', 'random'\)"),
    ("act", dict(activation="gelu"), ValueError, r"^activation must be one of \["),
]


@pytest.mark.parametrize(
    "kwargs, error, message", [b[1:] for b in BAD_TEACHER], ids=[b[0] for b in BAD_TEACHER]
)
def test_teacher_bad_arguments_are_named_in_the_error(kwargs, error, message):
    """Each bad argument raises its own error naming it (the full message). Control: the same call with
    the good value works."""
    good = dict(d=3, n_train=4, n_test=2)
    assert teacher_student(**good).x_train.shape == (4, 3)
    with pytest.raises(error, match=message):
        teacher_student(**(good | kwargs))


# ----------------------------------------------------------------------------------------------------------
# meanfield.tasks.regression: WideMLP and particle_metrics
# ----------------------------------------------------------------------------------------------------------


def _ks_uniform(values: torch.Tensor, bound: float) -> float:
    """Kolmogorov–Smirnov statistic of ``values`` against U(−bound, bound) (scipy)."""
    return float(
        st.kstest(values.detach().flatten().numpy(), st.uniform(loc=-bound, scale=2 * bound).cdf).statistic
    )


def test_wide_mlp_init_is_torch_default_law_drawn_from_its_generator():
    """With a generator, the weights and biases are ``U(−1/√fan_in, 1/√fan_in)`` drawn from it in the order
    hidden weight, hidden bias, read-out weight, read-out bias (exactly, recomputed draw by draw), every
    value inside its bound, and the hidden layer's samples pass a KS test against scipy's uniform at
    D < 1.95/√n (α = 0.001; n = 16000 weights: detects a 1.5 % shift of the CDF). Negative control: the
    same biases shifted to U(b, 1) fail it."""
    d, M = 4, 4000
    net = WideMLP(d, M, "tanh", generator=torch.Generator().manual_seed(9), dtype=F64)
    g = torch.Generator().manual_seed(9)
    layout = ((d, (M, d)), (d, (M,)), (M, (1, M)), (M, (1,)))
    got = (net.hidden_layer.weight, net.hidden_layer.bias, net.readout.weight, net.readout.bias)
    for (fan_in, shape), value in zip(layout, got):
        bound = 1 / math.sqrt(fan_in)
        want = torch.empty(shape, dtype=F64).uniform_(-bound, bound, generator=g)
        assert value.shape == shape and torch.equal(value.detach(), want)
        assert float(value.detach().abs().max()) <= bound
    for value, fan_in in ((net.hidden_layer.weight, d), (net.hidden_layer.bias, d), (net.readout.weight, M)):
        assert _ks_uniform(value, 1 / math.sqrt(fan_in)) < 1.95 / math.sqrt(value.numel())
    shifted = 0.5 + 0.5 * (net.hidden_layer.bias.detach() + 0.5)  # U(0.5, 1): what bias.uniform_(b) gives
    assert _ks_uniform(shifted, 0.5) > 1.95 / math.sqrt(M)  # negative control
    again = WideMLP(d, M, "tanh", generator=torch.Generator().manual_seed(9), dtype=F64)
    assert torch.equal(again.hidden_layer.weight, net.hidden_layer.weight)


def test_wide_mlp_forward_and_layout_against_numpy():
    """``f(x) = tanh(x Wᵀ + b) Rᵀ + c`` in numpy for vector outputs (k = 3), ``a = Rᵀ`` and ``w = W``;
    without biases ``f(x) = tanh(x Wᵀ) a`` (shape ``(N,)``)."""
    g = torch.Generator().manual_seed(4)
    net = WideMLP(4, 6, "tanh", out_features=3, generator=g, dtype=F64)
    X = torch.randn(7, 4, generator=g, dtype=F64)
    W, b = net.hidden_layer.weight.detach().numpy(), net.hidden_layer.bias.detach().numpy()
    R, c = net.readout.weight.detach().numpy(), net.readout.bias.detach().numpy()
    ref = np.tanh(X.numpy() @ W.T + b) @ R.T + c  # (7, 3)
    assert np.abs(net(X).detach().numpy() - ref).max() < 1e-12
    assert np.array_equal(net.a.detach().numpy(), R.T) and np.array_equal(net.w.detach().numpy(), W)
    plain = WideMLP(4, 6, "tanh", bias=False, generator=g, dtype=F64)
    assert plain.hidden_layer.bias is None and plain.readout.bias is None
    Wp, ap = plain.w.detach().numpy(), plain.a.detach().numpy()
    assert np.abs(plain(X).detach().numpy() - np.tanh(X.numpy() @ Wp.T) @ ap).max() < 1e-12
    with pytest.raises(ValueError, match="unknown activation 'nope'"):
        WideMLP(4, 6, "nope")


def _np_overlaps(w: np.ndarray, a: np.ndarray, teacher: np.ndarray) -> tuple[float, float]:
    """``q = 1/M Σ ‖P ŵ_i‖²`` and its ``‖a_i‖``-weighted mean, ``P`` the projector on the teacher span."""
    q_basis, _ = np.linalg.qr(teacher.T)  # (d, K)
    P = q_basis @ q_basis.T
    u = w / np.linalg.norm(w, axis=1, keepdims=True)
    proj = np.einsum("id,de,ie->i", u, P, u)
    omega = np.linalg.norm(a, axis=1) if a.ndim == 2 else np.abs(a)
    return float(proj.mean()), float((omega * proj).sum() / omega.sum())


@pytest.mark.parametrize("out_features", [None, 3], ids=["scalar", "vector"])
def test_particle_metrics_q_and_its_readout_weighted_mean_against_numpy(out_features):
    """``q`` and ``q_abs_a`` against a numpy projector (to 1e-12), the weights ``|a_i|`` or ``‖a_i‖``
    (norm over the outputs of each unit). Negative control: here the weighting moves q by > 1e-3."""
    g = torch.Generator().manual_seed(3)
    net = FeatureParticles(6, 10, "tanh", out_features=out_features, generator=g, dtype=F64)
    teacher = torch.randn(2, 6, generator=g, dtype=F64)
    spread = torch.linspace(0.2, 3.0, 10, dtype=F64)
    with torch.no_grad():
        net.a.mul_(spread if out_features is None else spread[:, None])
    m = particle_metrics(net, teacher, "tanh")
    q, q_abs = _np_overlaps(net.w.detach().numpy(), net.a.detach().numpy(), teacher.numpy())
    assert abs(m["q"] - q) < 1e-12 and abs(m["q_abs_a"] - q_abs) < 1e-12
    assert abs(q_abs - q) > 1e-3  # negative control: an unweighted mean would be told apart
    norms = net.a.detach().norm(dim=-1) if out_features else net.a.detach().abs()
    assert m["live"] == pytest.approx(float((norms > 0.05 * norms.mean()).double().mean()), abs=1e-6)
    assert set(particle_metrics(net, None, "tanh")) == {"live", "modes", "collapse"}


# ----------------------------------------------------------------------------------------------------------
# meanfield.tasks.regression: the teacher_student task
# ----------------------------------------------------------------------------------------------------------


def _ts(kind="particles", seed=5, data_seed=None, bias=True, device="cpu"):
    data = TeacherStudentData(d=4, k=2, n_train=64, n_test=32, label_noise=0.1, seed=data_seed)
    model = FeatureModel(n_particles=12, activation="tanh", kind=kind, bias=bias)
    exp = TEACHER_STUDENT.build(data, model, batch_size=16, seed=seed, device=torch.device(device), dtype=F64)
    ref = teacher_student(
        4,
        64,
        32,
        k=2,
        label_noise=0.1,
        seed=_derive(seed, "data") if data_seed is None else data_seed,
        dtype=F64,
    )
    return exp, ref


def _np_particles(net: FeatureParticles, x: np.ndarray) -> np.ndarray:
    """``1/M Σ_i a_i tanh(w_i·x + b_i)`` in numpy: ``(N,)`` or ``(N, k)``."""
    w, a = net.w.detach().numpy(), net.a.detach().numpy()
    b = 0.0 if net.b is None else net.b.detach().numpy()
    h = np.tanh(x @ w.T + b)  # (N, M)
    return h @ a / len(w)


def test_teacher_student_build_particles_data_init_loss_and_evaluation():
    """The particle arm: the data are ``teacher_student`` with the run's derived ``"data"`` seed, the layer
    is ``FeatureParticles(d, M, σ)`` drawn from the derived ``"init"`` seed; the loss of a batch is
    ``½ mean (f − y)²`` and ``test_mse``/``test_mse_relative``/``alignment_max`` are recomputed in numpy from
    the reference data (to 1e-12); unit ``samples``, one batch per step, and the description."""
    exp, ref = _ts()
    net = exp.model
    want = FeatureParticles(
        4, 12, "tanh", generator=torch.Generator().manual_seed(_derive(5, "init")), dtype=F64
    )
    assert isinstance(net, FeatureParticles) and net.n_particles == 12
    assert torch.equal(net.w, want.w) and torch.equal(net.a, want.a)
    index = torch.tensor([3, 0, 17, 63, 8])
    x, y = ref.x_train.numpy()[index.numpy()], ref.y_train.numpy()[index.numpy()]
    loss = float(exp.loss(index).detach())
    assert abs(loss - 0.5 * np.mean((_np_particles(net, x) - y) ** 2)) < 1e-12
    assert loss > 0
    with torch.no_grad():
        metrics = exp.evaluate()
    yt = ref.y_test.numpy()
    mse = float(np.mean((_np_particles(net, ref.x_test.numpy()) - yt) ** 2))
    assert abs(metrics["test_mse"] - mse) < 1e-12
    assert abs(metrics["test_mse_relative"] - mse / yt.var(ddof=1)) < 1e-12
    w, t = net.w.detach().numpy(), ref.directions.numpy()
    cos = np.abs(w @ t.T) / np.linalg.norm(w, axis=1)[:, None] / np.linalg.norm(t, axis=1)[None, :]
    assert abs(metrics["alignment_max"] - cos.max(0).mean()) < 1e-12
    q, q_abs = _np_overlaps(w, net.a.detach().numpy(), t)
    assert abs(metrics["q"] - q) < 1e-12 and abs(metrics["q_abs_a"] - q_abs) < 1e-12
    assert exp.unit == "samples" and exp.units_per_step == 16 and exp.batches.batch_size == 16
    assert exp.description == f"{ref.description}; FeatureParticles(M=12, σ=tanh)"
    assert exp.next_batch().shape == (16,)


def test_teacher_student_build_a_fixed_data_seed_and_another_run_seed():
    """``data.seed`` fixes the data whatever the run's seed (the loss is the numpy loss on that data set);
    the run's seed still changes the initialisation (derived ``"init"`` stream)."""
    one, ref = _ts(seed=1, data_seed=123)
    two, _ = _ts(seed=2, data_seed=123)
    idx = torch.arange(64)
    x, y = ref.x_train.numpy(), ref.y_train.numpy()
    for exp in (one, two):
        assert (
            abs(float(exp.loss(idx).detach()) - 0.5 * np.mean((_np_particles(exp.model, x) - y) ** 2)) < 1e-12
        )
    assert not torch.equal(one.model.w, two.model.w)
    other, _ = _ts(seed=1)  # control: the derived data seed gives other data
    assert (
        abs(float(other.loss(idx).detach()) - 0.5 * np.mean((_np_particles(other.model, x) - y) ** 2)) > 1e-6
    )


@pytest.mark.parametrize("bias", [True, False], ids=["bias", "nobias"])
def test_teacher_student_build_mlp_is_the_wide_mlp_with_its_bias_option(bias):
    """``kind = "mlp"``: a :class:`WideMLP` of width M drawn from the derived ``"init"`` seed, with or without
    biases as asked; its loss is ``½ mean (f − y)²`` with the numpy forward ``tanh(x Wᵀ + b)·a + c``."""
    exp, ref = _ts(kind="mlp", bias=bias)
    net = exp.model
    want = WideMLP(
        4, 12, "tanh", bias=bias, generator=torch.Generator().manual_seed(_derive(5, "init")), dtype=F64
    )
    assert isinstance(net, WideMLP) and net.w.shape == (12, 4)
    assert torch.equal(net.w, want.w) and torch.equal(net.a, want.a)
    assert (net.hidden_layer.bias is not None) == bias and (net.readout.bias is not None) == bias
    W, a = net.w.detach().numpy(), net.a.detach().numpy()
    b = net.hidden_layer.bias.detach().numpy() if bias else 0.0
    c = net.readout.bias.detach().numpy()[0] if bias else 0.0
    idx = torch.arange(20)
    x, y = ref.x_train.numpy()[:20], ref.y_train.numpy()[:20]
    f = np.tanh(x @ W.T + b) @ a + c
    assert abs(float(exp.loss(idx).detach()) - 0.5 * np.mean((f - y) ** 2)) < 1e-12
    assert exp.description == f"{ref.description}; WideMLP(M=12, σ=tanh)"


# ----------------------------------------------------------------------------------------------------------
# meanfield.tasks.regression: the image_classification task (a fake data set in memory)
# ----------------------------------------------------------------------------------------------------------


def _fake_images(monkeypatch) -> tuple[ImageDataset, list]:
    """40 train / 24 test random 1×3×2 uint8 images, 10 classes, served as ``fashion_mnist``."""
    rng = np.random.default_rng(0)
    ds = ImageDataset(
        train_x=torch.from_numpy(rng.integers(0, 256, (40, 1, 3, 2), dtype=np.uint8)),
        train_y=torch.from_numpy(rng.integers(0, 10, 40)),
        test_x=torch.from_numpy(rng.integers(0, 256, (24, 1, 3, 2), dtype=np.uint8)),
        test_y=torch.from_numpy(rng.integers(0, 10, 24)),
        classes=[f"c{i}" for i in range(10)],
        description="fake images",
    )
    roots = []
    monkeypatch.setattr(mdata, "fashion_mnist", lambda root: roots.append(root) or ds)
    return ds, roots


def _np_standardised(ds: ImageDataset, x: torch.Tensor) -> np.ndarray:
    """``(x/255 − mean)/std`` with the population mean and sd of the whole training split, flattened."""
    train = ds.train_x.numpy().astype(np.float64) / 255
    mean, sd = train.mean(), train.std()
    return ((x.numpy().astype(np.float64) / 255 - mean) / sd).reshape(len(x), -1)


def _np_cross_entropy(logits: np.ndarray, y: np.ndarray) -> float:
    top = logits.max(1, keepdims=True)
    lse = np.log(np.exp(logits - top).sum(1)) + top[:, 0]
    return float(np.mean(lse - logits[np.arange(len(y)), y]))


def _images(kind="particles", A=None, n_train=32, n_test=0, seed=3, device="cpu"):
    return IMAGE_CLASSIFICATION.build(
        ImageData(n_train=n_train, n_test=n_test),
        ImageModel(n_particles=8, activation="relu", kind=kind, A=A),
        batch_size=8,
        seed=seed,
        device=torch.device(device),
        dtype=F64,
    )


def test_image_build_particles_init_clip_loss_and_evaluation(monkeypatch):
    """The particle classifier is ``FeatureParticles(d, M, σ, A, out_features=10, bias)`` drawn from the
    derived ``"init"`` seed in the requested dtype, ``|a| ≤ A``; its cross-entropy of a batch and the
    test error and loss are recomputed in numpy from the standardised pixels (to 1e-10); the description
    counts the images used. Control: without ``A`` the same draws exceed 0.4."""
    ds, roots = _fake_images(monkeypatch)
    exp = _images(A=0.4)
    net = exp.model
    assert roots == [None]  # data.root "": the loader's default
    gen = torch.Generator().manual_seed(_derive(3, "init"))
    want = FeatureParticles(6, 8, "relu", A=0.4, out_features=10, bias=True, generator=gen, dtype=F64)
    assert isinstance(net, FeatureParticles) and net.A == 0.4 and net.w.dtype == F64 and net.a.dtype == F64
    assert (
        torch.equal(net.a, want.a) and torch.equal(net.w, want.w) and float(net.a.detach().abs().max()) <= 0.4
    )
    free = FeatureParticles(
        6, 8, "relu", out_features=10, generator=torch.Generator().manual_seed(_derive(3, "init")), dtype=F64
    )
    assert float(free.a.detach().abs().max()) > 0.4  # control: the clip acts on these draws
    x = _np_standardised(ds, ds.train_x[:32])
    w, a, b = net.w.detach().numpy(), net.a.detach().numpy(), net.b.detach().numpy()
    logits = np.maximum(x @ w.T + b, 0) @ a / 8  # (32, 10)
    idx = torch.tensor([0, 5, 31, 2])
    got = float(exp.loss(idx).detach())
    assert abs(got - _np_cross_entropy(logits[idx.numpy()], ds.train_y.numpy()[idx.numpy()])) < 1e-10
    with torch.no_grad():
        metrics = exp.evaluate()
    xt = _np_standardised(ds, ds.test_x)
    lt = np.maximum(xt @ w.T + b, 0) @ a / 8
    error = float(np.mean(lt.argmax(1) != ds.test_y.numpy()))
    assert metrics["test_error"] == error and metrics["accuracy"] == 1 - error
    assert abs(metrics["test_loss"] - _np_cross_entropy(lt, ds.test_y.numpy())) < 1e-10
    assert exp.description == "fake images; 32 train / 24 test; FeatureParticles(M=8, σ=relu, k=10, bias)"
    assert exp.unit == "samples" and exp.units_per_step == 8 and exp.higher_is_better == ("accuracy",)


def test_image_build_mlp_dtype_init_and_description(monkeypatch):
    """``kind = "mlp"``: ``WideMLP(d, M, σ, 10)`` from the derived ``"init"`` seed in float64; its logits
    ``relu(x Wᵀ + b) Rᵀ + c`` in numpy give the batch loss; all 40 training images when ``n_train = 0``."""
    ds, _ = _fake_images(monkeypatch)
    exp = _images(kind="mlp", n_train=0)
    net = exp.model
    want = WideMLP(6, 8, "relu", 10, generator=torch.Generator().manual_seed(_derive(3, "init")), dtype=F64)
    assert isinstance(net, WideMLP) and net.w.dtype == F64 and net.readout.weight.dtype == F64
    assert torch.equal(net.w, want.w) and torch.equal(net.a, want.a)
    x = _np_standardised(ds, ds.train_x)
    W, b = net.w.detach().numpy(), net.hidden_layer.bias.detach().numpy()
    R, c = net.readout.weight.detach().numpy(), net.readout.bias.detach().numpy()
    logits = np.maximum(x @ W.T + b, 0) @ R.T + c
    idx = torch.tensor([39, 1, 20])
    assert (
        abs(
            float(exp.loss(idx).detach())
            - _np_cross_entropy(logits[[39, 1, 20]], ds.train_y.numpy()[[39, 1, 20]])
        )
        < 1e-10
    )
    assert exp.description == "fake images; 40 train / 24 test; WideMLP(M=8, σ=relu)"


@pytest.mark.parametrize("kind", ["particles", "mlp"])
def test_image_and_teacher_builds_put_everything_on_the_device(monkeypatch, kind):
    """``device`` is where the model lives: on the ``meta`` device every parameter is there (a build that
    left the model on the CPU is told apart without a GPU). Control: a CPU build is on the CPU."""
    _fake_images(monkeypatch)
    for exp in (_images(kind=kind, device="meta"), _ts(kind=kind, device="meta")[0]):
        assert {p.device.type for p in exp.model.parameters()} == {"meta"}
    assert {p.device.type for p in _images(kind=kind).model.parameters()} == {"cpu"}


# ----------------------------------------------------------------------------------------------------------
# meanfield.runs.sweeps
# ----------------------------------------------------------------------------------------------------------


def test_a_stopped_worker_refuses_to_start_a_point(monkeypatch, tmp_path):
    """Once the worker was signalled, ``_run_point`` raises :class:`RunInterrupted` with its message and the
    signal, and writes nothing. Control: the message is the documented one, the signal SIGTERM."""
    monkeypatch.setattr(sweeps, "_worker_stop", int(signal.SIGTERM))
    with pytest.raises(RunInterrupted, match=r"^the sweep was stopped before this point started$") as info:
        sweeps._run_point(str(TEACHER), str(tmp_path / "p"), "smoke", [], None)
    assert info.value.signum == signal.SIGTERM and not (tmp_path / "p").exists()


def test_worker_init_records_the_sweep_in_locks_and_signals_only_mark_the_worker(monkeypatch):
    """``_worker_init`` sets ``lock.SWEEP_PID`` to its parent (the sweep) and installs handlers for SIGINT and
    SIGTERM that record the signal in ``_worker_stop`` (nothing is raised)."""
    from meanfield.runs import lock

    handlers = {}
    monkeypatch.setattr(signal, "signal", lambda signum, handler: handlers.__setitem__(signum, handler))
    monkeypatch.setattr(sweeps, "_worker_stop", None)
    monkeypatch.setattr(lock, "SWEEP_PID", None)
    sweeps._worker_init()
    assert set(handlers) == {signal.SIGINT, signal.SIGTERM} and lock.SWEEP_PID == os.getppid()
    handlers[signal.SIGTERM](signal.SIGTERM, None)
    assert sweeps._worker_stop == signal.SIGTERM
    handlers[signal.SIGINT](signal.SIGINT, None)
    assert sweeps._worker_stop == signal.SIGINT


class _ThreadPool:
    """A stand-in for :class:`meanfield.runs._workers.WorkerPool`: the calls run at once, here, recording the pool's
    arguments."""

    made: list = []

    def __init__(self, jobs, function, init):
        _ThreadPool.made.append((jobs, function, init))
        self.jobs, self.function, self.done, self.stopping = jobs, function, [], False

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        pass

    pids: list = []

    @property
    def running(self):
        return len(self.done)

    @property
    def free(self):
        return len(self.done) < self.jobs

    def submit(self, key, args):
        self.done.append((key, True, self.function(*args)))

    def results(self, timeout=None):
        done, self.done = self.done, []
        yield from done


def _fake_summary(config, folder, preset, overrides, threads):
    return {"status": "finished", "final": {"x": 1.0}, "folder": folder, "threads": threads}


@pytest.mark.parametrize("jobs", [1, 2])
def test_run_local_returns_every_point_by_its_index(monkeypatch, jobs):
    """``_run_local`` runs every point of ``todo`` with its own arguments and files its summary under its
    index, here or (``jobs`` = 2) in a ``WorkerPool`` of ``_run_point`` with ``_worker_init``; the bar counts
    them."""
    from meanfield.runs import _workers

    _ThreadPool.made = []
    monkeypatch.setattr(_workers, "WorkerPool", _ThreadPool)
    monkeypatch.setattr(sweeps, "_run_point", _fake_summary)
    ticks = []
    bar = types.SimpleNamespace(update=ticks.append)
    stop = types.SimpleNamespace(signum=None, pids=list)
    todo = [4, 0, 2, 7, 1]
    got = sweeps._run_local(todo, lambda i: ("c.toml", f"point{i}", None, [f"seed={i}"], 3), jobs, bar, stop)
    assert {i: s["folder"] for i, s in got.items()} == {i: f"point{i}" for i in todo}
    assert all(s["threads"] == 3 for s in got.values()) and ticks == [1] * len(todo)
    assert _ThreadPool.made == ([] if jobs == 1 else [(2, _fake_summary, sweeps._worker_init)])


def _finals(lr: float, seed: int) -> dict:
    loss = 1.0 + lr * (seed + 1) + 0.01 * seed**2
    return {"loss": loss, "acc": 1 - loss / 10, "flag": True, "label": "x"}


def _point_runner(ran: list):
    def run_point(config, folder, preset, overrides, threads):
        values = dict(o.split("=", 1) for o in overrides)
        ran.append((Path(folder).name, preset, threads, config))
        return {"status": "finished", "final": _finals(float(values["optim.lr"]), int(values["seed"]))}

    return run_point


def test_sweep_runs_with_a_fake_point_runner_summarises_against_scipy(monkeypatch, tmp_path):
    """A sweep whose points return known finals: every point runs here once (no threads set), the
    metrics default to the numeric finals (not the seed, a flag or a string), ``sweep.json`` records the
    configuration; the means, t intervals and paired t-test against scipy (to 1e-12)."""
    ran = []
    monkeypatch.setattr(sweeps, "_run_point", _point_runner(ran))
    monkeypatch.setattr(sweeps, "_preflight", lambda names, configs: None)
    out = tmp_path / "sw"
    table = sweeps.sweep_runs(
        TEACHER,
        {"optim.lr": [0.02, 0.05]},
        [0, 1, 2],
        out,
        preset="smoke",
        baseline="optim.lr=0.02",
        quiet=True,
    )
    names = [f"optim.lr={lr}_seed={s}" for lr in (0.02, 0.05) for s in range(3)]
    assert [r[0] for r in ran] == names and {r[1:3] for r in ran} == {("smoke", None)}
    assert {r[3] for r in ran} == {str(TEACHER.resolve())}
    assert table.metrics == ["loss", "acc"]
    spec = json.loads((out / "sweep.json").read_text())
    assert [c["seeds"] for c in spec.pop("commands")] == [spec["seeds"]]
    assert spec == {
        "config": str(TEACHER),
        "preset": "smoke",
        "overrides": [],
        "grid": {"optim.lr": [0.02, 0.05]},
        "seeds": [0, 1, 2],
        "baseline": "optim.lr=0.02",
        "order": "grid",
    }
    base = np.array([_finals(0.02, s)["loss"] for s in range(3)])
    arm = np.array([_finals(0.05, s)["loss"] for s in range(3)])
    first, second = table.summary
    lo, hi = st.t.interval(0.95, 2, loc=base.mean(), scale=st.sem(base))
    assert first["loss"] == pytest.approx(base.mean(), rel=1e-12)
    assert first["loss:lo"] == pytest.approx(lo, rel=1e-12) and first["loss:hi"] == pytest.approx(
        hi, rel=1e-12
    )
    assert second["loss:diff"] == pytest.approx((arm - base).mean(), rel=1e-12)
    assert second["loss:p"] == pytest.approx(st.ttest_rel(arm, base).pvalue, rel=1e-9)
    assert first["is_baseline"] is True and second["is_baseline"] is False


def test_sweep_runs_on_ray_hands_the_points_to_ray_with_one_thread(monkeypatch, tmp_path):
    """``backend = "ray"``: the points go to ``_run_on_ray`` (with the address), each with one torch thread,
    and nothing runs locally."""
    ran, calls = [], []
    runner = _point_runner(ran)

    def on_ray(todo, args, address, bar):
        calls.append((list(todo), address))
        return {i: runner(*args(i)) for i in todo}

    def local(*a):
        raise AssertionError("ran locally")

    monkeypatch.setattr(sweeps, "_run_on_ray", on_ray)
    monkeypatch.setattr(sweeps, "_run_local", local)
    monkeypatch.setattr(sweeps, "_preflight", lambda names, configs: None)
    table = sweeps.sweep_runs(
        TEACHER, {"optim.lr": [0.02]}, [0, 1], tmp_path / "ray", backend="ray", address="host:1", quiet=True
    )
    assert calls == [([0, 1], "host:1")] and [r[2] for r in ran] == [1, 1]
    assert [r["loss"] for r in table.rows] == [_finals(0.02, s)["loss"] for s in (0, 1)]


def test_adopt_old_folders_by_legacy_name_and_by_configuration(tmp_path, capsys):
    """A missing point's folder is found under its former name or by its ``config.toml`` (renamed, one line
    each); an unrelated folder is left alone."""
    points = [{"a": 1, "seed": 0}, {"a": 2, "seed": 0}]
    names = [sweeps.point_name(p) for p in points]
    configs = [{"seed": 0, "x": {"a": 1}}, {"seed": 0, "x": {"a": 2}}]
    (tmp_path / "a=1,seed=0").mkdir()
    (tmp_path / "anything").mkdir()
    (tmp_path / "anything" / "config.toml").write_text(mconfig.to_toml(configs[1]))
    (tmp_path / "unrelated").mkdir()
    (tmp_path / "unrelated" / "config.toml").write_text(mconfig.to_toml({"seed": 1}))
    sweeps._adopt_old_folders(tmp_path, points, names, configs)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a=1_seed=0", "a=2_seed=0", "unrelated"]
    assert capsys.readouterr().out.count("renamed the run folder") == 2


def test_expand_names_and_log_scale_summary_against_hand_and_scipy():
    """``expand`` is the product in key order with the seed fastest; names by hand (a list value is
    spelled with ``-`` and hashed: the SHA-256 recomputed here); a log-scale metric's paired difference is
    the mean difference of the logs, its p the paired t-test of the logs (scipy), its mean the geometric
    one; the Markdown table marks the baseline row."""
    assert sweeps.expand({"b": [1, 2], "a": ["x"]}, [5, 6]) == [
        {"b": 1, "a": "x", "seed": 5},
        {"b": 1, "a": "x", "seed": 6},
        {"b": 2, "a": "x", "seed": 5},
        {"b": 2, "a": "x", "seed": 6},
    ]
    with pytest.raises(ConfigError, match="at least one seed"):
        sweeps.expand({"b": [1]}, [])
    assert sweeps.point_name({"a": 1, "seed": 0}) == "a=1_seed=0"
    digest = hashlib.sha256(b"opt.betas=[0.9, 0.999]\nseed=0").hexdigest()[:8]
    assert (
        sweeps.point_name({"opt.betas": [0.9, 0.999], "seed": 0}) == f"opt.betas=0.9-0.999_seed=0_h{digest}"
    )
    base = np.array([1.0, 2.0, 4.0, 3.0])
    arm = np.array([1.5, 2.2, 5.0, 3.9])
    rows = [
        {"lr": lr, "seed": s, "status": "finished", "mse": float(v)}
        for lr, values in ((1, base), (2, arm))
        for s, v in enumerate(values)
    ]
    options = sweeps.TableOptions(log_metrics=("mse",))
    first, second = sweeps.summarize(rows, ["lr"], ["mse"], {"lr": 1}, options=options)
    assert first["mse"] == pytest.approx(st.gmean(base), rel=1e-12) and first["mse:scale"] == "log"
    la, lb = np.log(arm), np.log(base)
    assert second["mse:diff_scale"] == "log" and second["mse:diff"] == pytest.approx(
        (la - lb).mean(), rel=1e-12
    )
    assert second["mse:p"] == pytest.approx(st.ttest_rel(la, lb).pvalue, rel=1e-9)
    assert second["mse:p"] != pytest.approx(st.ttest_rel(arm, base).pvalue, rel=1e-3)  # control: not linear
    text = summary_module._markdown([first, second], ["lr"], ["mse"], options)
    base_line, arm_line = text.splitlines()[2:4]
    assert "| baseline |" in base_line and "| baseline |" not in arm_line


# ----------------------------------------------------------------------------------------------------------
# meanfield.studies.figures
# ----------------------------------------------------------------------------------------------------------

SCRIPT = (
    "import sys\nfrom pathlib import Path\nif __name__ == '__main__':\n"
    "    Path(sys.argv[1]).write_text('{stem} ' + sys.argv[0])\n"
)


def _fake_checks(monkeypatch, tmp_path, scripts=("overview.py", "quickstart.py")):
    """Three fake theory checks (alpha draws, beta fails, gamma makes no plot) and a source root with
    ``experiments/<scripts>`` that write ``"<stem> <argv[0]>"`` to their argument."""
    monkeypatch.chdir(tmp_path)  # a wrong relative path lands here, not in the checkout
    theory, root = tmp_path / "theory", tmp_path / "root"
    (root / "experiments").mkdir(parents=True)
    for script in scripts:
        (root / "experiments" / script).write_text(SCRIPT.replace("{stem}", Path(script).stem))
    calls = []

    def validate(
        names=None, *, preset="fast", out="validate-out", theory_dir=None, progress=True, echo=print
    ):
        calls.append(
            dict(names=list(names), preset=preset, theory_dir=theory_dir, progress=progress, echo=echo)
        )
        folder = Path(out)
        assert folder.is_dir()
        results = []
        for name in names:
            if name == "alpha":
                (folder / "alpha.png").write_bytes(b"alpha figure")
            results.append(types.SimpleNamespace(name=name, error="boom" if name == "beta" else None))
        return types.SimpleNamespace(results=results)

    monkeypatch.setattr(figures, "default_theory_dir", lambda: theory)
    monkeypatch.setattr(
        figures, "discover", lambda folder: {n: folder / f"{n}.py" for n in ("alpha", "beta", "gamma")}
    )
    monkeypatch.setattr(figures, "validate", validate)
    monkeypatch.setattr(figures, "source_root", lambda: root)
    return calls, theory, root


def test_generate_copies_the_checks_figures_and_runs_the_scripts(monkeypatch, tmp_path, capsys):
    """Into a new nested folder: the checks' PNGs copied byte for byte, one line for each check without a
    figure (why), the scripts run as ``__main__`` with ``argv = [script, out/<stem>.png]``, ``sys.argv``
    restored; the returned list is every PNG in the folder, sorted."""
    calls, theory, root = _fake_checks(monkeypatch, tmp_path)
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "deep" / "figs"
    argv = list(sys.argv)
    got = figures.generate(out, preset="full", progress=False)
    assert calls == [
        dict(names=["alpha", "beta", "gamma"], preset="full", theory_dir=theory, progress=False, echo=None)
    ]
    assert (out / "alpha.png").read_bytes() == b"alpha figure"
    printed = capsys.readouterr().out.splitlines()
    assert printed == [
        "meanfield figures: beta made no figure (error)",
        "meanfield figures: gamma made no figure (no plot)",
    ]
    for stem in ("overview", "quickstart"):
        assert (out / f"{stem}.png").read_text() == f"{stem} {root / 'experiments' / f'{stem}.py'}"
    assert sys.argv == argv and not (tmp_path / "None").exists()
    assert got == [out / "alpha.png", out / "overview.png", out / "quickstart.png"]


def test_generate_keep_existing_skips_what_is_there(monkeypatch, tmp_path):
    """``keep_existing``: the checks and scripts whose PNG exists are skipped (their files untouched), the
    others run, into an existing folder; with ``keep_existing=False`` everything reruns."""
    calls, _, _ = _fake_checks(monkeypatch, tmp_path)
    out = tmp_path / "figs"
    out.mkdir()
    (out / "alpha.png").write_bytes(b"old alpha")
    (out / "overview.png").write_text("old overview")
    got = figures.generate(out, keep_existing=True, progress=False)
    assert calls[-1]["names"] == ["beta", "gamma"] and calls[-1]["preset"] == "fast"
    assert (out / "alpha.png").read_bytes() == b"old alpha" and (
        out / "overview.png"
    ).read_text() == "old overview"
    assert (out / "quickstart.png").read_text().startswith("quickstart ")
    assert got == sorted(out.glob("*.png")) and len(got) == 3
    figures.generate(out, progress=False)
    assert calls[-1]["names"] == ["alpha", "beta", "gamma"]
    assert (out / "alpha.png").read_bytes() == b"alpha figure" and (
        out / "overview.png"
    ).read_text() != "old overview"


def test_generate_default_folder_and_a_missing_script(monkeypatch, tmp_path):
    """The default folder is ``docs/figures`` under the working directory (created with its parents); a
    script that is not there is skipped and the next one still runs; no source root: no scripts."""
    _fake_checks(monkeypatch, tmp_path, scripts=("quickstart.py",))
    monkeypatch.chdir(tmp_path)
    got = figures.generate(progress=False)
    out = Path("docs") / "figures"
    assert sorted(p.name for p in (tmp_path / out).iterdir()) == ["alpha.png", "quickstart.png"]
    assert [p.name for p in got] == ["alpha.png", "quickstart.png"]
    monkeypatch.setattr(figures, "source_root", lambda: None)
    assert [p.name for p in figures.generate(tmp_path / "wheel", progress=False)] == ["alpha.png"]


# ----------------------------------------------------------------------------------------------------------
# meanfield.studies.plotting
# ----------------------------------------------------------------------------------------------------------


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


def test_figure_single_axes_in_the_style():
    """``figure()``: one Axes (not an array), 4.2 × 3.2 inches at the style's 110 dpi, grid on at alpha 0.3,
    top and right spines hidden, and no warning."""
    import matplotlib.pyplot as plt
    from matplotlib.axes import Axes

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fig, ax = plotting.figure()
    try:
        assert isinstance(ax, Axes) and len(fig.axes) == 1
        assert tuple(fig.get_size_inches()) == pytest.approx((4.2, 3.2)) and fig.dpi == 110
        line = ax.xaxis.get_gridlines()[0]
        assert line.get_visible() and line.get_alpha() == 0.3
        assert not ax.spines["top"].get_visible() and not ax.spines["right"].get_visible()
        assert ax.spines["left"].get_visible()
    finally:
        plt.close(fig)


def test_figure_grid_of_axes_scales_by_columns_and_rows():
    """``figure(2, 3, width=2, height=1.5)`` is 4 × 4.5 inches with a (3, 2) array of axes;
    ``figure(3)`` a (3,) array; keyword arguments reach ``subplots``."""
    import matplotlib.pyplot as plt

    fig, axes = plotting.figure(ncols=2, nrows=3, width=2.0, height=1.5, sharex=True)
    assert tuple(fig.get_size_inches()) == pytest.approx((4.0, 4.5)) and axes.shape == (3, 2)
    assert axes[0, 0].get_shared_x_axes().joined(axes[0, 0], axes[2, 1])
    plt.close(fig)
    fig, axes = plotting.figure(3)
    assert axes.shape == (3,) and tuple(fig.get_size_inches()) == pytest.approx((12.6, 3.2))
    plt.close(fig)


def test_save_writes_the_format_of_the_suffix_at_the_style_dpi_and_closes(tmp_path):
    """A ``.png`` is 4.2·130 × 3.2·130 pixels (the style's savefig dpi, not the figure's 110); no suffix
    gives a PNG too; ``.svg`` an SVG document; the figure is closed and the path returned."""
    import matplotlib.pyplot as plt

    for name in ("a.png", "b"):
        fig, ax = plotting.figure()
        ax.plot([0, 1], [1, 0])
        path = plotting.save(fig, tmp_path / name)
        assert path == tmp_path / name and not plt.fignum_exists(fig.number)
        assert _png_size(path) == (546, 416)
    fig, _ = plotting.figure()
    text = plotting.save(fig, str(tmp_path / "c.svg")).read_text()
    assert text.lstrip().startswith("<?xml") and "<svg" in text
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.png", "b", "c.svg"]  # no temporary left
