"""Tests of :mod:`meanfield.data.teacher`."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from meanfield import data
from meanfield.data import (
    teacher_student,
)
from meanfield.data.teacher import _directions

NUMBERS = st.one_of(
    st.integers(-3, 5),
    st.sampled_from([0.5, math.nan, math.inf, -math.inf, 2**70, True, "3", None, [2]]),
)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(
    d=NUMBERS,
    n_train=NUMBERS,
    k=NUMBERS,
    label_noise=st.sampled_from([0.0, 0.1, -0.1, math.nan, math.inf, "x"]),
    activation=st.sampled_from(["relu", "he2", "nope", 3]),
    directions=st.sampled_from(["orthonormal", "random", "diagonal", None]),
)
def test_teacher_student_arguments(d, n_train, k, label_noise, activation, directions):
    args = {"k": k, "label_noise": label_noise, "activation": activation, "directions": directions}
    try:
        ts = teacher_student(d, n_train, 4, **args, seed=0)
    except (ValueError, TypeError) as error:
        message = str(error)
        assert any(name in message for name in ("d", "n_train", *args)), message
        return
    assert ts.x_train.shape == (n_train, d) and ts.y_train.shape == (n_train,)
    assert ts.directions.shape == (k, d) and bool(torch.isfinite(ts.y_train).all())


@pytest.fixture
def _private_cache(tmp_path, monkeypatch):
    """Every test caches decoded archives in its own folder, never in the user's ~/.cache."""
    monkeypatch.setenv("MEANFIELD_CACHE", str(tmp_path / "cache"))


def _noise_within(residual: torch.Tensor, sigma: float, z: float = 5.0) -> bool:
    """Whether the sample variance of ``residual`` is within z·SE of σ², SE = σ² sqrt(2/(n−1)) (Gaussian)."""
    n = residual.numel()
    return abs(float(residual.var()) - sigma**2) <= z * sigma**2 * math.sqrt(2 / (n - 1))


@pytest.mark.usefixtures("_private_cache")
def test_teacher_directions_orthonormal_or_random():
    ts = teacher_student(20, 10, 5, k=4, dtype=torch.float64)
    assert ts.directions.shape == (4, 20)
    assert torch.allclose(ts.directions @ ts.directions.T, torch.eye(4, dtype=torch.float64), atol=1e-12)
    rnd = teacher_student(20, 10, 5, k=4, directions="random", dtype=torch.float64)
    assert torch.allclose(rnd.directions.norm(dim=1), torch.ones(4, dtype=torch.float64))
    off_diagonal = (rnd.directions @ rnd.directions.T - torch.eye(4, dtype=torch.float64)).abs().max()
    assert off_diagonal > 1e-3  # independent unit vectors are not orthogonal
    with pytest.raises(ValueError, match="k must be ≤ d"):
        teacher_student(3, 10, 5, k=4)
    assert teacher_student(3, 10, 5, k=4, directions="random").directions.shape == (4, 3)


@pytest.mark.usefixtures("_private_cache")
@pytest.mark.parametrize("activation", sorted(data.ACTIVATIONS))
def test_teacher_targets_follow_the_formula(activation):
    ts = teacher_student(6, 50, 20, k=2, activation=activation, coefficients=[0.5, -2.0], dtype=torch.float64)
    g = {
        "relu": lambda z: z.clamp_min(0),
        "tanh": torch.tanh,
        "sigmoid": lambda z: 1 / (1 + torch.exp(-z)),
        "abs": torch.abs,
        "identity": lambda z: z,
        "he1": lambda z: z,
        "he2": lambda z: z * z - 1,
        "he3": lambda z: z * z * z - 3 * z,
        "he4": lambda z: z**4 - 6 * z * z + 3,
    }[activation]
    for x, y in ((ts.x_train, ts.y_train), (ts.x_test, ts.y_test)):
        expected = sum(c * g(x @ w) for c, w in zip([0.5, -2.0], ts.directions))
        assert torch.allclose(y, expected, atol=1e-10)
    assert ts.coefficients.tolist() == [0.5, -2.0]


@pytest.mark.usefixtures("_private_cache")
def test_teacher_defaults_seed_and_arguments():
    one = teacher_student(5, 8, 4)
    assert one.coefficients.tolist() == [1.0] and one.x_train.dtype == torch.float32
    assert torch.equal(one.y_train, torch.relu(one.x_train @ one.directions[0]))
    two = teacher_student(5, 8, 4, k=2, seed=3)
    assert torch.allclose(two.coefficients, torch.full((2,), 2**-0.5))
    same = teacher_student(5, 8, 4, k=2, seed=3)
    for name in ("x_train", "y_train", "x_test", "y_test", "directions"):
        assert torch.equal(getattr(two, name), getattr(same, name))
    assert not torch.equal(two.x_train, teacher_student(5, 8, 4, k=2, seed=4).x_train)
    assert "2-index relu" in two.description and "seed 3" in two.description
    with pytest.raises(ValueError, match="coefficients must be 2"):
        teacher_student(5, 8, 4, k=2, coefficients=[1.0])
    with pytest.raises(ValueError, match="activation must be one of"):
        teacher_student(5, 8, 4, activation="gelu")
    with pytest.raises(ValueError, match="label_noise must be ≥ 0"):
        teacher_student(5, 8, 4, label_noise=-1.0)
    with pytest.raises(ValueError, match="n_train must be ≥ 1, got 0"):
        teacher_student(5, 0, 4)


@pytest.mark.usefixtures("_private_cache")
def test_teacher_label_noise_variance():
    """Residual variance = σ² within 5 SE (n = 200,000: SE = 0.32 % of σ², so the test detects an error of
    about 1.6 % in the variance, 0.8 % in σ); the test targets stay noiseless. Negative control: σ×1.05
    (variance +10 %) must fail."""
    sigma = 0.3
    ts = teacher_student(4, 200_000, 1_000, k=2, label_noise=sigma, dtype=torch.float64, seed=7)
    residual = ts.y_train - ts.teacher(ts.x_train)
    assert _noise_within(residual, sigma)
    assert abs(float(residual.mean())) < 5 * sigma / math.sqrt(residual.numel())
    assert not _noise_within(residual, sigma * 1.05)  # negative control
    assert torch.equal(ts.y_test, ts.teacher(ts.x_test))
    noisy = teacher_student(
        4, 10, 2_000, k=2, label_noise=sigma, noisy_test=True, dtype=torch.float64, seed=7
    )
    assert not torch.equal(noisy.y_test, noisy.teacher(noisy.x_test))


F64 = torch.float64


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@pytest.mark.parametrize(("d", "k"), [(5, 3), (4, 4), (3, 1)])
def test_orthonormal_directions_are_the_sign_fixed_q_of_the_gaussian_draw(d, k):
    """``"orthonormal"``: ``Q·sign(diag R)`` of numpy's QR of the ``(d, k)`` Gaussian drawn from the
    generator, transposed to ``(k, d)``, float64, contiguous, orthonormal rows."""
    got = _directions(d, k, "orthonormal", _gen(40))
    G = torch.randn(d, k, generator=_gen(40), dtype=F64).numpy()
    q, r = np.linalg.qr(G)
    want = (q * np.sign(np.diag(r))).T
    assert got.dtype == F64 and got.shape == (k, d) and got.is_contiguous()
    np.testing.assert_allclose(got.numpy(), want, atol=1e-13)
    np.testing.assert_allclose(got.numpy() @ got.numpy().T, np.eye(k), atol=1e-13)


@pytest.mark.parametrize(("d", "k"), [(5, 3), (3, 6), (4, 1)])
def test_random_directions_are_the_normalised_gaussian_columns(d, k):
    """``"random"``: each column of the ``(d, k)`` Gaussian over its norm (numpy), as rows ``(k, d)``, float64,
    contiguous (``k > d`` allowed). Negative control: the rows normalised instead of the columns."""
    got = _directions(d, k, "random", _gen(41))
    G = torch.randn(d, k, generator=_gen(41), dtype=F64).numpy()
    want = (G / np.linalg.norm(G, axis=0, keepdims=True)).T
    assert got.dtype == F64 and got.shape == (k, d) and got.is_contiguous()
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-14, atol=1e-15)
    np.testing.assert_allclose(np.linalg.norm(got.numpy(), axis=1), np.ones(k), rtol=1e-14)
    wrong = G / np.linalg.norm(G, axis=1, keepdims=True)
    assert np.abs(got.numpy() - wrong.T).max() > 1e-3  # negative control


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
