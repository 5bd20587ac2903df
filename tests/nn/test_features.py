"""Tests of :mod:`meanfield.nn.features`."""

from __future__ import annotations

import copy
import functools
import hashlib
import math
import re

import numpy as np
import pytest
import torch
from helpers.bad_input import call, tensors
from helpers.fake_dist import FakeWorld
from helpers.layers import assert_close, attention, features, stacked, vector_features, with_particles
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import meanfield.data as mdata
from meanfield.data import ImageDataset
from meanfield.nn import (
    FeatureParticles,
    Medoids,
    ParticleAttention,
)
from meanfield.nn.features import ACTIVATIONS
from meanfield.nn.sharded import (
    ParticleShard,
    shard_particles,
)
from meanfield.tasks.regression import (
    IMAGE_CLASSIFICATION,
    ImageData,
    ImageModel,
)

SETTINGS = settings(
    max_examples=50,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large],
)


FEW = settings(SETTINGS, max_examples=25)


class _Opaque:
    def __repr__(self) -> str:
        return "<object>"


NONSENSE = st.sampled_from([None, "1", "abc", "", [1.0], (1,), {}, _Opaque(), b"x", 1j, np.array([1.0, 2.0])])


NUMBERS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(-(2**70), 2**70),
    st.booleans(),
    st.sampled_from([torch.tensor(0.5), torch.ones(2), torch.tensor(float("nan")), np.float64(0.25)]),
)


BAD = st.one_of(NUMBERS, NONSENSE)


SIZES = st.one_of(
    st.integers(-3, 64),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.sampled_from([torch.tensor(3), np.int64(3)]),
    NONSENSE,
)


DTYPES = [
    torch.float16,
    torch.bfloat16,
    torch.float32,
    torch.float64,
    torch.int64,
    torch.bool,
    torch.complex64,
]


LAYER_VALID = {
    "FeatureParticles": {
        "d_in": 3,
        "n_particles": 4,
        "activation": "tanh",
        "A": None,
        "sphere": False,
        "dtype": None,
    },
    "ParticleAttention": {"d_model": 4, "n_particles": 2, "d_head": None, "dtype": None},
}


@st.composite
def layer_cases(draw):
    kind = draw(st.sampled_from(sorted(LAYER_VALID)))
    valid = LAYER_VALID[kind]
    name = draw(st.sampled_from([*sorted(valid), "X"]))
    pool = st.one_of(SIZES, st.sampled_from([torch.float64, torch.int64, torch.bool, "relu", "nope", print]))
    if name == "X":
        return kind, name, valid, draw(st.one_of(tensors(ranks=(1, 2, 3, 4), size=4), NONSENSE))
    return kind, name, {**valid, name: draw(pool)}, None


FEATURE_BAD_DTYPES = [
    ("dtype=torch.int64", lambda F: F(3, 4, "tanh", dtype=torch.int64), "dtype"),
    ("X float64, layer float32", lambda F: F(3, 4, "tanh")(torch.randn(2, 3, dtype=torch.float64)), "X"),
    ("X int64", lambda F: F(3, 4, "tanh")(torch.ones(2, 3, dtype=torch.long)), "X"),
]


@SETTINGS
@given(layer_cases())
def test_layers(case):
    """Constructor arguments and inputs of the particle layers: refused by name, or a forward pass of the
    right shape that equals the mean of the particle outputs and is finite for a finite input."""
    from meanfield.nn import FeatureParticles, ParticleAttention

    kind, name, kw, X = case
    cls = FeatureParticles if kind == "FeatureParticles" else ParticleAttention
    layer = call(
        cls, (name, "d_model", "n_particles", "d_head"), **kw, generator=torch.Generator().manual_seed(0)
    )
    if layer is None:
        return
    if X is None:
        X = torch.randn(2, 3) if kind == "FeatureParticles" else torch.randn(2, 3, 4)
        X = X.to(layer.particle_features().dtype)
    Y = call(layer, ("X",), X)
    if Y is None:
        return
    expected_shape = (X.shape[0],) if kind == "FeatureParticles" else tuple(X.shape)
    assert tuple(Y.shape) == expected_shape
    assert torch.allclose(Y, layer.particle_outputs(X).mean(1), atol=1e-5, equal_nan=True)
    if bool(torch.isfinite(X).all()):
        assert bool(torch.isfinite(Y).all())


@pytest.mark.parametrize("what, make, name", FEATURE_BAD_DTYPES, ids=[f[0] for f in FEATURE_BAD_DTYPES])
def test_feature_particles_dtype_is_named(what, make, name):
    """A non-float dtype failed in torch's ``normal_`` ('not implemented for Long') and an input of another
    dtype in the matmul (RuntimeError): now named."""
    from meanfield.nn import FeatureParticles

    with pytest.raises((ValueError, TypeError), match=name):
        make(FeatureParticles)


@FEW
@given(
    indices=st.one_of(BAD, tensors(ranks=(0, 1, 2), size=5), st.lists(st.integers(-6, 6), max_size=5)),
    k=SIZES,
    strategy=st.one_of(BAD, st.sampled_from(["random", "importance", "farthest", "medoids", "nope"])),
)
def test_prune_and_subsample(indices, k, strategy):
    from meanfield.nn import FeatureParticles

    layer = FeatureParticles(3, 4, "tanh", generator=torch.Generator().manual_seed(0))
    pruned = call(layer.prune, ("indices", "mask", "particle"), indices)
    if pruned is not None:
        assert pruned.n_particles >= 1 and torch.isfinite(pruned.w).all()
    small = call(layer.subsample, ("k", "strategy", "X", "loss", "n_particles"), k, strategy)
    if small is not None:
        assert 1 <= small.n_particles <= 4


F64 = torch.float64


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


class _Softsign:
    """A callable object without ``__name__``."""

    def __call__(self, z):
        return z / (1 + z.abs())


@pytest.mark.parametrize("out_features", [None, 3])
@pytest.mark.parametrize("bias", [False, True])
def test_feature_particles_initial_law_is_a_then_w_from_the_generator(out_features, bias):
    """``a ~ N(0, I_k)`` drawn first, then ``w ~ N(0, I/d_in)`` (the generator replayed by hand: ``randn/√d_in``),
    ``b = 0`` with ``bias``; the particle parameters are ``(a, w[, b])``; the output is
    ``1/M Σ a_i σ(w_i·x + b_i)`` (numpy). Negative control: ``w`` scaled by ``√d_in`` instead."""
    d_in, M = 4, 5
    f = FeatureParticles(d_in, M, "tanh", out_features=out_features, bias=bias, generator=_gen(9), dtype=F64)
    g = _gen(9)
    a = torch.randn(M, *(() if out_features is None else (out_features,)), generator=g, dtype=F64)
    w = torch.randn(M, d_in, generator=g, dtype=F64) / 2.0
    torch.testing.assert_close(f.a.detach(), a, rtol=0, atol=0)
    torch.testing.assert_close(f.w.detach(), w, rtol=1e-15, atol=0)
    assert (f.w.detach() - w * 4.0).abs().max() > 0.1  # negative control: ×√d_in instead of ÷√d_in
    assert f.particle_parameter_names == (("a", "w", "b") if bias else ("a", "w"))
    if bias:
        assert torch.equal(f.b.detach(), torch.zeros(M, dtype=F64)) and isinstance(f.b, torch.nn.Parameter)
    else:
        assert f.b is None
    X = torch.randn(6, d_in, generator=_gen(10), dtype=F64)
    hidden = np.tanh(X.numpy() @ w.numpy().T)
    want = hidden @ a.numpy() / M
    np.testing.assert_allclose(f(X).detach().numpy(), want, rtol=1e-12, atol=1e-15)


def test_feature_particles_parameters_are_in_the_dtype_asked():
    """``dtype`` reaches ``a``, ``w`` and ``b`` (float16 here: the draws are those of a float16 ``randn``,
    replayed by hand); the default is float32 on the CPU."""
    f = FeatureParticles(3, 4, "relu", out_features=2, bias=True, generator=_gen(2), dtype=torch.float16)
    assert all(p.dtype == torch.float16 and p.device.type == "cpu" for p in (f.a, f.w, f.b))
    g = _gen(2)
    a = torch.randn(4, 2, generator=g, dtype=torch.float16)
    w = torch.randn(4, 3, generator=g, dtype=torch.float16) / math.sqrt(3)
    assert torch.equal(f.a.detach(), a) and torch.equal(f.w.detach(), w)
    assert torch.equal(f.b.detach(), torch.zeros(4, dtype=torch.float16))
    cpu = FeatureParticles(3, 4, "relu")
    assert cpu.w.dtype == torch.float32 and cpu.w.device.type == "cpu" and cpu.a.shape == (4,)


def test_feature_particles_projection_at_initialisation_clips_a_and_normalises_w():
    """``A``: ``a`` clipped entrywise to ``[−A, A]``; ``sphere``: rows of ``w`` are the drawn rows over their
    norms (the ``1/√d_in`` cancels). Both replayed by hand."""
    f = FeatureParticles(3, 50, "relu", A=0.5, sphere=True, generator=_gen(1), dtype=F64)
    g = _gen(1)
    a = torch.randn(50, generator=g, dtype=F64)
    w = torch.randn(50, 3, generator=g, dtype=F64)
    torch.testing.assert_close(f.a.detach(), a.clamp(-0.5, 0.5), rtol=0, atol=0)
    torch.testing.assert_close(f.w.detach(), w / w.norm(dim=1, keepdim=True), rtol=1e-15, atol=1e-15)
    assert f.A == 0.5 and type(f.A) is float and f.sphere is True
    assert (a.abs() > 0.5).any()  # the clip did something


@pytest.mark.parametrize(
    ("activation", "name", "sigma"),
    [
        ("gelu", "gelu", ACTIVATIONS["gelu"]),
        (torch.sin, "sin", torch.sin),
        (lambda z: 2 * z, "<lambda>", lambda z: 2 * z),
        (_Softsign(), "_Softsign", _Softsign()),
        (functools.partial(torch.clamp, min=0.0), "partial", torch.relu),
    ],
    ids=["name", "function", "lambda", "object", "partial"],
)
def test_feature_particles_activation_and_its_name(activation, name, sigma):
    """A name picks ``ACTIVATIONS[name]``; a callable is used as given and named by its ``__name__``, else by
    its class (an object, a ``functools.partial``); ``extra_repr`` lists every setting."""
    f = FeatureParticles(2, 3, activation, A=2, out_features=4, bias=True, generator=_gen(0), dtype=F64)
    assert f.activation_name == name
    assert f.extra_repr() == (
        f"d_in=2, n_particles=3, activation={name}, A=2.0, sphere=False, out_features=4, bias=True"
    )
    z = torch.linspace(-2, 2, 9, dtype=F64)
    torch.testing.assert_close(f.activation(z), sigma(z), rtol=0, atol=0)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        (
            {"activation": "swish"},
            ValueError,
            "unknown activation 'swish'; allowed: " + str(sorted(ACTIVATIONS)),
        ),
        (
            {"activation": 3},
            TypeError,
            f"activation must be a callable or a name in {sorted(ACTIVATIONS)}, got 3",
        ),
        ({"sphere": 1}, TypeError, "sphere must be a bool, got int"),
        ({"bias": "yes"}, TypeError, "bias must be a bool, got str"),
        ({"A": 0}, ValueError, "A must be > 0, got 0.0"),
        ({"A": -1.5}, ValueError, "A must be > 0, got -1.5"),
        ({"d_in": 0}, ValueError, "d_in must be ≥ 1, got 0"),
        ({"d_in": 2.0}, TypeError, "d_in must be an int, got float"),
        ({"n_particles": 0}, ValueError, "n_particles must be ≥ 1, got 0"),
        ({"out_features": 0}, ValueError, "out_features must be ≥ 1, got 0"),
        ({"dtype": torch.int64}, TypeError, "dtype must be a floating-point torch.dtype"),
    ],
)
def test_feature_particles_refuses_bad_arguments_by_name(kwargs, error, message):
    """Every argument check, word for word."""
    args = {"d_in": 2, "n_particles": 3, "activation": "relu", **kwargs}
    with pytest.raises(error, match="^" + re.escape(message)):
        FeatureParticles(**args)


def _derive(seed: int, stream: str) -> int:
    """The documented stream seed: ``int(sha256(f"{seed}/{stream}"))``, first 8 bytes little-endian, >> 2."""
    return int.from_bytes(hashlib.sha256(f"{seed}/{stream}".encode()).digest()[:8], "little") >> 2


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


DT = torch.float64


TOL = 1e-12


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_features_formula():
    f = features(3, 5, A=1.5)
    X = torch.randn(7, 3, generator=gen(2), dtype=DT)
    ref = sum(f.a[i] * torch.tanh(X @ f.w[i]) for i in range(5)) / 5
    assert_close(f(X), ref)
    assert f.particle_outputs(X).shape == (7, 5)
    assert_close(f(X), f.particle_outputs(X).mean(1))


def test_vector_output_features_formula():
    f = vector_features(3, 5, 4, seed=3)
    assert f.particle_parameter_names == ("a", "w", "b") and f.a.shape == (5, 4) and f.b.shape == (5,)
    X = torch.randn(7, 3, generator=gen(2), dtype=DT)
    ref = sum(f.a[i] * torch.tanh(X @ f.w[i] + f.b[i])[:, None] for i in range(5)) / 5  # (7, 4)
    assert_close(f(X), ref)
    assert f.particle_outputs(X).shape == (7, 5, 4)
    assert_close(f(X), f.particle_outputs(X).mean(1))
    # a transformer MLP expansion: tokens (B, T, d) map token by token, particle axis at dimension 1
    T = torch.randn(2, 6, 3, generator=gen(4), dtype=DT)
    assert_close(f(T), torch.stack([f(T[b]) for b in range(2)]))
    assert f.particle_outputs(T).shape == (2, 5, 6, 4)
    assert_close(f.particle_outputs(T).mean(1), f(T))
    # negative control: without the biases the output differs
    no_bias = with_particles(f, a=f.a.detach(), w=f.w.detach(), b=torch.zeros(5, dtype=DT))
    assert float((no_bias(X) - f(X)).detach().abs().max()) > 1e-3


def test_one_output_is_the_scalar_layer_with_a_trailing_axis():
    """``out_features=1`` draws the same init as the scalar layer and computes the same function."""
    scalar, one = features(4, 9, seed=5), features(4, 9, seed=5, out_features=1)
    assert scalar.a.shape == (9,) and one.a.shape == (9, 1)
    assert torch.equal(one.a[:, 0], scalar.a) and torch.equal(one.w, scalar.w)
    X = torch.randn(11, 4, generator=gen(6), dtype=DT)
    assert one(X).shape == (11, 1) and scalar(X).shape == (11,)
    assert_close(one(X)[:, 0], scalar(X))
    assert_close(one.particle_outputs(X)[..., 0], scalar.particle_outputs(X))


def test_project_clips_and_normalises():
    f = features(3, 50, A=0.7, sphere=True)
    assert float(f.a.detach().abs().max()) <= 0.7
    assert_close(f.w.norm(dim=1), torch.ones(50, dtype=DT))
    with torch.no_grad():
        f.a.mul_(10)
        f.w.mul_(3)
    assert f.project_() is f
    assert float(f.a.detach().abs().max()) == pytest.approx(0.7)
    assert_close(f.w.norm(dim=1), torch.ones(50, dtype=DT))
    free = features(3, 50, seed=1)
    before = stacked(free)
    free.project_()
    assert torch.equal(free.a, before["a"]) and torch.equal(free.w, before["w"])
    assert float(free.a.detach().abs().max()) > 0.7  # negative control: nothing was clipped without A


@pytest.mark.parametrize(
    ("call", "error", "words"),
    [
        (lambda: ParticleAttention(10, 3), ValueError, "not divisible by n_particles"),
        (lambda: ParticleAttention(8, 0), ValueError, "n_particles"),
        (lambda: ParticleAttention(8, 2.0), TypeError, "n_particles must be an int"),
        (lambda: ParticleAttention(8, 2, 0), ValueError, "d_head"),
        (lambda: attention()(torch.randn(2, 5, 7, dtype=DT)), ValueError, "d_model=12"),
        (lambda: attention()(torch.randn(5, 12, dtype=DT)), ValueError, "(B, T, d_model=12)"),
        (lambda: attention().attention_maps([1.0]), TypeError, "torch.Tensor"),
        (lambda: features()(torch.randn(5, 3, dtype=DT)), ValueError, "(N, d_in=4)"),
        (lambda: FeatureParticles(3, 4, "swish"), ValueError, "allowed"),
        (lambda: FeatureParticles(3, 4, 3.0), TypeError, "activation must be a callable"),
        (lambda: FeatureParticles(3, 4, "tanh", A=0.0), ValueError, "A must be > 0"),
        (lambda: FeatureParticles(3, 4, "tanh", sphere=1), TypeError, "sphere must be a bool"),
        (lambda: FeatureParticles(3, 4, "tanh", bias=1), TypeError, "bias must be a bool"),
        (lambda: FeatureParticles(3, 4, "tanh", out_features=0), ValueError, "out_features"),
        (lambda: features(out_features=2)(torch.randn(5, 3, dtype=DT)), ValueError, "(…, d_in=4)"),
        (lambda: features().subsample(7), ValueError, "k must be ≤ n_particles = 6"),
        (lambda: features().subsample(0), ValueError, "k must be ≥ 1"),
        (lambda: features().subsample(2.5), TypeError, "k must be an int"),
        (lambda: features().subsample(2, "best"), ValueError, "allowed: ['farthest', 'importance'"),
        (lambda: features().subsample(2, "importance"), ValueError, "needs X"),
        (
            lambda: features().importance(torch.randn(3, 4, dtype=DT), "mse"),
            TypeError,
            "loss must be a callable",
        ),
        (lambda: features().importance(torch.randn(3, 4, dtype=DT), lambda Y: Y), ValueError, "scalar"),
        (lambda: features().prune([]), ValueError, "at least one particle"),
        (lambda: features().prune([0, 6]), ValueError, "[0, 6)"),
        (lambda: features().prune([-1]), ValueError, "[0, 6)"),
        (lambda: features().prune(torch.tensor([0.0, 1.0])), TypeError, "integers or a boolean mask"),
        (lambda: features().prune(torch.tensor([True, False])), ValueError, "shape (6,)"),
        (lambda: features().prune(torch.tensor([[0, 1]])), ValueError, "1-D"),
        (lambda: features().prune("01"), TypeError, "sequence of ints"),
        (lambda: features().prune([0, True]), TypeError, "ints"),
        (lambda: Medoids(max_iter=0), ValueError, "max_iter"),
    ],
)
def test_bad_input_is_named(call, error, words):
    with pytest.raises(error) as info:
        call()
    assert words in str(info.value), str(info.value)


X = torch.randn(5, 7, 6, generator=torch.Generator().manual_seed(1), dtype=DT)  # (B, T, d_in)


def close(a, b, tol=1e-12):
    return a.shape == b.shape and (a - b).abs().max().item() <= tol * max(1.0, b.abs().max().item())


def test_feature_particles_sharded_equal_the_unsharded_layer(monkeypatch):
    """FeatureParticles averages over its local M: the output, times m/M and summed, is the average of all."""
    fake = FakeWorld(3).install(monkeypatch)
    f_ref = FeatureParticles(6, 9, "tanh", generator=torch.Generator().manual_seed(2), dtype=DT)
    z = X[:, 0]  # (B, d_in)
    y_ref = f_ref(z)

    def rank_fn(r):
        f = shard_particles(copy.deepcopy(f_ref))
        assert f.particle_shard == ParticleShard(3 * r, 3 * r + 3, 9)
        y = f(z)
        y.sum().backward()
        return y, {k: p.grad for k, p in f.named_parameters()}

    out = fake.run(rank_fn)
    assert all(close(y, y_ref) for y, _ in out)
    y_ref.sum().backward()
    for k, p in f_ref.named_parameters():
        assert close(torch.cat([g[k] for _, g in out], 0), p.grad), k


def test_importance_pruning_names_what_it_needs():
    from meanfield.nn import FeatureParticles

    layer = FeatureParticles(3, 4, "tanh")
    with pytest.raises(
        ValueError,
        match=r"^strategy 'importance' needs X \(layer inputs\) and loss \(a callable: layer output -> scalar\)$",
    ):
        layer.select(2, "importance")


def test_vector_feature_particles_need_a_batch_axis_for_their_particle_outputs():
    # a single input (d_in,) gave (M, k), the particle axis at 0 where every caller reads it at 1: select() then
    # returned duplicates and importance() k values for M particles. It is refused in one line; X[None] gives
    # (1, M, k), whose mean over the particles is forward(x) (the contract), and forward still takes (d_in,).
    from meanfield.nn import FeatureParticles

    layer = FeatureParticles(3, 6, "tanh", out_features=4)
    x = torch.randn(3)
    with pytest.raises(ValueError, match=r"^particle_outputs needs a batch axis .*got \(3,\); pass X\[None\] for one input$"):
        layer.particle_outputs(x)
    out = layer.particle_outputs(x[None])  # (1, M, k)
    expected = torch.tanh(layer.w @ x + (layer.b if layer.b is not None else 0))[:, None] * layer.a  # (M, k)
    assert out.shape == (1, 6, 4) and torch.allclose(out[0], expected, atol=1e-6)
    assert torch.allclose(out.mean(1)[0], layer(x), atol=1e-6)
    assert sorted(layer.select(5, "farthest", X=x[None]).tolist()) == sorted(set(layer.select(5, "farthest", X=x[None]).tolist()))
