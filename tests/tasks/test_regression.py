"""Tests of :mod:`meanfield.tasks.regression`."""

from __future__ import annotations

import dataclasses
import hashlib
import math
import re
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from scipy import stats as st
from torch import nn

import meanfield.data as mdata
from meanfield import config as cfg
from meanfield.config import ConfigError, from_dict
from meanfield.data import ImageDataset, teacher_student
from meanfield.metrics import diversity as dv
from meanfield.nn import FeatureParticles
from meanfield.tasks import regression as rg
from meanfield.tasks.regression import (
    IMAGE_CLASSIFICATION,
    TEACHER_STUDENT,
    FeatureModel,
    ImageData,
    ImageModel,
    TeacherStudentData,
    WideMLP,
    particle_metrics,
    validation_split,
)

F64 = torch.float64


N_TRAIN, N_TEST = 40, 12


@pytest.fixture
def fake(monkeypatch) -> ImageDataset:
    """40 train / 12 test random 1×3×2 uint8 images, 10 classes, the training labels sorted (4 per class)."""
    g = torch.Generator().manual_seed(0)
    ds = ImageDataset(
        train_x=torch.randint(0, 256, (N_TRAIN, 1, 3, 2), generator=g, dtype=torch.uint8),
        train_y=torch.arange(10).repeat_interleave(N_TRAIN // 10),
        test_x=torch.randint(0, 256, (N_TEST, 1, 3, 2), generator=g, dtype=torch.uint8),
        test_y=torch.randint(0, 10, (N_TEST,), generator=g),
        classes=[f"c{i}" for i in range(10)],
        description="fake images",
    )
    monkeypatch.setattr(mdata, "fashion_mnist", lambda root: ds)
    return ds


def _build(kind="particles", **data):
    return IMAGE_CLASSIFICATION.build(
        ImageData(**data),
        ImageModel(n_particles=8, activation="relu", kind=kind),
        batch_size=4,
        seed=3,
        device=torch.device("cpu"),
        dtype=F64,
    )


def _standardised(ds: ImageDataset, x: torch.Tensor) -> torch.Tensor:
    """``(x/255 − mean)/sd`` with the population mean and sd of the whole training split (1 channel)."""
    train = ds.train_x.to(F64) / 255
    return ((x.to(F64) / 255 - train.mean()) / train.std(correction=0)).flatten(1)  # (N, 6)


def _logits(net, kind: str, x: torch.Tensor) -> torch.Tensor:
    """The network's logits written out from its weights (not by calling it)."""
    with torch.no_grad():
        if kind == "mlp":
            h = torch.relu(x @ net.hidden_layer.weight.T + net.hidden_layer.bias)
            return h @ net.readout.weight.T + net.readout.bias  # (N, 10)
        return torch.relu(x @ net.w.T + net.b) @ net.a / net.w.shape[0]  # (N, 10): 1/M Σ a_i relu(·)


def _train(exp, steps=6) -> None:
    opt = torch.optim.SGD(exp.model.parameters(), lr=0.5)
    for _ in range(steps):
        opt.zero_grad()
        exp.loss(exp.next_batch()).backward()
        opt.step()


def _trained_on(exp, ds: ImageDataset, kind: str) -> list[int]:
    """The data set's index of each training example of ``exp``, in order: the loss of index ``i`` alone is
    matched with the cross-entropy of each of the data set's training images (exactly one must match)."""
    logits = _logits(exp.model, kind, _standardised(ds, ds.train_x))  # (40, 10)
    per_image = F.cross_entropy(logits, ds.train_y, reduction="none")  # (40,)
    found = []
    with torch.no_grad():
        for i in range(exp.batches.n):
            got = exp.loss(torch.tensor([i]))
            match = ((per_image - got).abs() < 1e-12).nonzero()[:, 0].tolist()
            assert len(match) == 1, (i, match)
            found.append(match[0])
    return found


@pytest.mark.parametrize("kind", ["particles", "mlp"])
def test_the_validation_images_are_never_trained_on_and_are_scored_like_test(fake, kind):
    """``n_train = 32, n_val = 8``: the 24 images trained on are, in their original order, the first 32
    less the 8 validation ones; after training, ``val_loss``/``val_error`` are the cross-entropy and error of
    the trained net's logits (written out from its weights) on exactly those 8; ``test_*`` are unchanged in
    meaning. The held-out images are not the last 8 (the labels are sorted by class: that would be 2
    classes) but a spread over the classes."""
    exp = _build(kind, n_train=32, n_val=8)
    assert exp.batches.n == 24
    _train(exp)
    used = _trained_on(exp, fake, kind)
    val = sorted(set(range(32)) - set(used))
    assert used == sorted(used) and len(set(used)) == 24 and max(used) < 32  # images 32–39 never used
    assert len(val) == 8 and not set(val) & set(used)
    assert val == validation_split(32, 8)[0].tolist()
    assert val != list(range(24, 32)) and len(set(fake.train_y[val].tolist())) > 2
    with torch.no_grad():
        metrics = exp.evaluate()
    lv = _logits(exp.model, kind, _standardised(fake, fake.train_x[val]))  # (8, 10)
    yv = fake.train_y[val]
    assert metrics["val_loss"] == pytest.approx(float(F.cross_entropy(lv, yv)), abs=1e-12)
    assert metrics["val_error"] == float((lv.argmax(1) != yv).double().mean())
    lt = _logits(exp.model, kind, _standardised(fake, fake.test_x))
    assert metrics["test_loss"] == pytest.approx(float(F.cross_entropy(lt, fake.test_y)), abs=1e-12)
    assert metrics["val_loss"] != pytest.approx(metrics["test_loss"])  # control: a different set of images
    assert "32 train" not in exp.description and "24 train / 8 validation (held out of train) / 12 test" in (
        exp.description
    )


def test_no_split_by_default_trains_on_all_and_reports_no_val_keys(fake):
    """``n_val = 0`` (the default): every image of ``n_train`` is trained on, in order, and ``evaluate()``
    has no ``val_*`` key; the same run seed with and without a split starts from the same weights."""
    exp = _build(n_train=32)
    assert exp.batches.n == 32 and _trained_on(exp, fake, "particles") == list(range(32))
    with torch.no_grad():
        metrics = exp.evaluate()
    assert not [k for k in metrics if k.startswith("val_")] and {"test_loss", "test_error"} <= set(metrics)
    assert exp.description == "fake images; 32 train / 12 test; FeatureParticles(M=8, σ=relu, k=10, bias)"
    assert torch.equal(exp.model.w, _build(n_train=32, n_val=8).model.w)


def test_the_split_is_the_same_for_every_run_seed_and_uniform_without_replacement():
    """``validation_split`` is a fixed partition of ``range(n)`` into sorted halves; over the 50,000 CIFAR
    training images 5,000 land in every tenth (one class of the JPEG copy) within ±5 SE (SE ≈ 20)."""
    val, kept = validation_split(50_000, 5_000)
    again, _ = validation_split(50_000, 5_000)
    assert torch.equal(val, again) and len(val) == 5_000 and len(kept) == 45_000
    assert torch.equal(torch.sort(torch.cat([val, kept])).values, torch.arange(50_000))
    assert torch.all(val[1:] > val[:-1]) and torch.all(kept[1:] > kept[:-1])
    per_class = torch.bincount(val // 5_000, minlength=10)  # (10,)
    assert int((per_class - 500).abs().max()) < 5 * 20


@pytest.mark.parametrize("bad", [-1, -5, True, 1.5, "3"])
def test_a_bad_n_val_is_refused_naming_the_key(bad):
    """Not an integer ≥ 0: refused by the dataclass (the Python API) and by the configuration reader."""
    with pytest.raises((ValueError, ConfigError), match="n_val must be"):
        ImageData(n_val=bad)
    with pytest.raises(ConfigError, match=r"data(\.|: )n_val must be"):
        from_dict(ImageData, {"n_val": bad}, "data")


@pytest.mark.parametrize(("n_train", "n_val", "n"), [(32, 32, 32), (32, 33, 32), (0, 40, 40), (0, 100, 40)])
def test_n_val_must_leave_a_training_image(fake, n_train, n_val, n):
    """``n_val`` ≥ the number of training images (after ``n_train``) is refused at build, with that number."""
    with pytest.raises(
        ConfigError, match=rf"data\.n_val must be ≥ 1 and < the number of training images \({n},"
    ):
        _build(n_train=n_train, n_val=n_val)


def _derive(seed: int, stream: str) -> int:
    """The documented stream seed: ``int(sha256(f"{seed}/{stream}"))``, first 8 bytes little-endian, >> 2."""
    return int.from_bytes(hashlib.sha256(f"{seed}/{stream}".encode()).digest()[:8], "little") >> 2


def _ks_uniform(values: torch.Tensor, bound: float) -> float:
    """Kolmogorov–Smirnov statistic of ``values`` against U(−bound, bound) (scipy)."""
    return float(
        st.kstest(values.detach().flatten().numpy(), st.uniform(loc=-bound, scale=2 * bound).cdf).statistic
    )


def _np_overlaps(w: np.ndarray, a: np.ndarray, teacher: np.ndarray) -> tuple[float, float]:
    """``q = 1/M Σ ‖P ŵ_i‖²`` and its ``‖a_i‖``-weighted mean, ``P`` the projector on the teacher span."""
    q_basis, _ = np.linalg.qr(teacher.T)  # (d, K)
    P = q_basis @ q_basis.T
    u = w / np.linalg.norm(w, axis=1, keepdims=True)
    proj = np.einsum("id,de,ie->i", u, P, u)
    omega = np.linalg.norm(a, axis=1) if a.ndim == 2 else np.abs(a)
    return float(proj.mean()), float((omega * proj).sum() / omega.sum())


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


DT = torch.float64


def t(x: Any, dtype: torch.dtype = DT) -> torch.Tensor:
    """A float64 tensor from nested lists."""
    return torch.tensor(x, dtype=dtype)


def unit_at(deg: float) -> list[float]:
    """The unit vector of the plane at angle ``deg`` degrees."""
    r = math.radians(deg)
    return [math.cos(r), math.sin(r)]


def exact(pattern: str) -> str:
    """An anchored regex for a whole error message."""
    return "^" + re.escape(pattern) + "$"


class _Units(nn.Module):
    """A bare layer with ``w`` and ``a`` (what ``particle_metrics`` reads)."""

    def __init__(self, w: torch.Tensor, a: torch.Tensor) -> None:
        super().__init__()
        self.w = nn.Parameter(w)
        self.a = nn.Parameter(a)


def _ts_build(data: rg.TeacherStudentData, model: rg.FeatureModel, seed: int = 5, batch_size: int = 8):
    return rg.TEACHER_STUDENT.build(
        data, model, batch_size=batch_size, seed=seed, device=torch.device("cpu"), dtype=DT
    )


def _fake_images_2(n_train: int = 20, n_test: int = 7):
    """An ImageDataset of 2-channel 2×1 images, 3 classes, from a fixed generator."""
    from meanfield.data.images import ImageDataset

    g = torch.Generator().manual_seed(21)
    return ImageDataset(
        train_x=torch.randint(0, 256, (n_train, 2, 2, 1), generator=g, dtype=torch.uint8),
        train_y=torch.randint(0, 3, (n_train,), generator=g),
        test_x=torch.randint(0, 256, (n_test, 2, 2, 1), generator=g, dtype=torch.uint8),
        test_y=torch.randint(0, 3, (n_test,), generator=g),
        classes=["a", "b", "c"],
        description="FAKE",
    )


@pytest.fixture
def fake_loaders(monkeypatch):
    """Replace both loaders; record (which, root) of each call."""
    calls: list[tuple[str, Any]] = []
    ds = _fake_images_2()

    def loader(name):
        def load(root):
            calls.append((name, root))
            return ds

        return load

    monkeypatch.setattr(rg._data, "fashion_mnist", loader("fashion"))
    monkeypatch.setattr(rg._data, "cifar10", loader("cifar"))
    return ds, calls


def _np_standardise(ds, x: torch.Tensor) -> torch.Tensor:
    """Independent standardisation: per-channel population mean/std of ALL training pixels in [0, 1]."""
    tr = ds.train_x.double().numpy() / 255
    mean = tr.mean(axis=(0, 2, 3))
    std = tr.std(axis=(0, 2, 3))
    z = (x.double().numpy() / 255 - mean[None, :, None, None]) / std[None, :, None, None]
    return torch.from_numpy(z.reshape(len(x), -1))


def _img_build(data, model, seed=3, batch_size=4):
    return rg.IMAGE_CLASSIFICATION.build(
        data, model, batch_size=batch_size, seed=seed, device=torch.device("cpu"), dtype=DT
    )


def test_wide_mlp_unknown_activation():
    """An unknown activation name lists the allowed ones (sorted)."""
    allowed = sorted(["relu", "tanh", "sigmoid", "gelu", "erf", "identity"])
    with pytest.raises(ValueError, match=exact(f"unknown activation 'swish'; allowed: {allowed}")):
        rg.WideMLP(3, 4, "swish")


def test_wide_mlp_generator_init_is_uniform_kaiming_in_layer_order():
    """With a generator: weight then bias of each layer ~ U(±1/√fan_in), drawn in that order (reference
    draws from a twin generator); float64 dtype honoured; w and a expose the layouts."""
    net = rg.WideMLP(3, 5, "relu", generator=torch.Generator().manual_seed(11), dtype=DT)
    g = torch.Generator().manual_seed(11)
    W1 = torch.empty(5, 3, dtype=DT).uniform_(-1 / math.sqrt(3), 1 / math.sqrt(3), generator=g)
    b1 = torch.empty(5, dtype=DT).uniform_(-1 / math.sqrt(3), 1 / math.sqrt(3), generator=g)
    W2 = torch.empty(1, 5, dtype=DT).uniform_(-1 / math.sqrt(5), 1 / math.sqrt(5), generator=g)
    b2 = torch.empty(1, dtype=DT).uniform_(-1 / math.sqrt(5), 1 / math.sqrt(5), generator=g)
    assert torch.equal(net.hidden_layer.weight, W1) and torch.equal(net.hidden_layer.bias, b1)
    assert torch.equal(net.readout.weight, W2) and torch.equal(net.readout.bias, b2)
    assert net.w is net.hidden_layer.weight and net.w.shape == (5, 3)
    assert net.a.shape == (5,) and torch.equal(net.a, W2[0])
    assert not hasattr(net, "n_particles") and net.out_features is None


def test_wide_mlp_without_bias_and_vector_output():
    """bias=False: no biases and the readout draws follow the hidden weights directly; out_features k gives
    ``a`` of shape (M, k) = readout.weight.T and outputs (N, k)."""
    net = rg.WideMLP(2, 3, "tanh", 4, bias=False, generator=torch.Generator().manual_seed(12), dtype=DT)
    g = torch.Generator().manual_seed(12)
    W1 = torch.empty(3, 2, dtype=DT).uniform_(-1 / math.sqrt(2), 1 / math.sqrt(2), generator=g)
    W2 = torch.empty(4, 3, dtype=DT).uniform_(-1 / math.sqrt(3), 1 / math.sqrt(3), generator=g)
    assert net.hidden_layer.bias is None and net.readout.bias is None
    assert torch.equal(net.hidden_layer.weight, W1) and torch.equal(net.readout.weight, W2)
    assert net.a.shape == (3, 4) and torch.equal(net.a, W2.T) and net.out_features == 4
    X = torch.randn(6, 2, generator=torch.Generator().manual_seed(13), dtype=DT)
    assert torch.allclose(net(X), torch.tanh(X @ W1.T) @ W2.T)
    assert len(list(net.parameters())) == 2


@pytest.mark.parametrize("activation", ["relu", "tanh", "sigmoid", "erf", "identity"])
def test_wide_mlp_forward_formula(activation):
    """``f(x) = Σ_i a_i σ(w_i·x + b_i) + c`` (scalar output, shape (N,)) for each activation."""
    net = rg.WideMLP(3, 4, activation, generator=torch.Generator().manual_seed(14), dtype=DT)
    X = torch.randn(5, 3, generator=torch.Generator().manual_seed(15), dtype=DT)
    sigma = {"relu": torch.relu, "tanh": torch.tanh, "sigmoid": torch.sigmoid, "erf": torch.erf}.get(
        activation, lambda z: z
    )
    ref = sigma(X @ net.w.T + net.hidden_layer.bias) @ net.a + net.readout.bias
    out = net(X)
    assert out.shape == (5,) and torch.allclose(out, ref)


def test_wide_mlp_default_init_without_generator_uses_torch_default():
    """Without a generator the layers keep torch's own init (bounded by 1/√fan_in), in float32 by default."""
    torch.manual_seed(3)
    net = rg.WideMLP(4, 6, "gelu")
    torch.manual_seed(3)
    ref = nn.Linear(4, 6)
    assert torch.equal(net.hidden_layer.weight, ref.weight) and net.w.dtype == torch.float32


def test_particle_metrics_hand_built_units():
    """Units e1, e1, e2, −e1 (all live) and a dead 20° unit against teacher e1: every metric by hand."""
    w = torch.stack([t(unit_at(d)) for d in (0.0, 0.0, 90.0, 180.0, 20.0)])
    a = t([1.0, -2.0, 1.0, 1.0, 0.01])  # mean |a| = 1.002: the last is below 5 % of it
    teacher = t([[1.0, 0.0]])
    relu = rg.particle_metrics(_Units(w, a), teacher, "relu")
    c20 = math.cos(math.radians(20)) ** 2
    assert relu == pytest.approx(
        {
            "live": 4 / 5,
            "modes": 1.0,  # {0, 1}; 90° and 180° alone (sign-aware)
            "collapse": 2 / 4,
            "aligned": 3 / 4,  # |cos| with the teacher: 0, 1, 3
            "coverage": 1.0,
            "q": (1 + 1 + 0 + 1 + c20) / 5,
            "q_abs_a": (1 + 2 + 0 + 1 + 0.01 * c20) / 5.01,
        }
    )
    assert all(type(v) is float for v in relu.values())
    tanh = rg.particle_metrics(_Units(w, a), teacher, "tanh")
    assert tanh["modes"] == 1.0 and tanh["collapse"] == pytest.approx(3 / 4)  # −e1 joins e1
    assert {k: v for k, v in tanh.items() if k not in ("modes", "collapse")} == pytest.approx(
        {k: v for k, v in relu.items() if k not in ("modes", "collapse")}
    )
    loose = rg.particle_metrics(_Units(w, a * t([1, 1, 1, 1, 100.0])), teacher, "relu", threshold=0.9)
    assert loose["aligned"] == pytest.approx(4 / 5) and loose["live"] == 1.0  # 20°: cos 0.94 ≥ 0.9
    strict = rg.particle_metrics(_Units(w, a * t([1, 1, 1, 1, 100.0])), teacher, "relu", threshold=0.95)
    assert strict["aligned"] == pytest.approx(3 / 5)


@pytest.mark.parametrize(
    ("activation", "odd"),
    [("tanh", True), ("erf", True), ("identity", True), ("relu", False), ("gelu", False), ("sigmoid", False)],
)
def test_particle_metrics_sign_symmetry_follows_odd_activations(activation, odd):
    """Only tanh, erf, identity treat w and −w as one unit in ``modes`` and ``collapse``."""
    w = torch.stack([t(unit_at(d)) for d in (0.0, 180.0, 90.0)])
    m = rg.particle_metrics(_Units(w, t([1.0, 1.0, 1.0])), None, activation)
    assert set(m) == {"live", "modes", "collapse"}
    assert m["collapse"] == pytest.approx(2 / 3 if odd else 0.0)
    assert m["modes"] == (1.0 if odd else 0.0)
    assert rg.ODD_ACTIVATIONS == ("tanh", "erf", "identity")


def test_particle_metrics_vector_outputs_use_row_norms():
    """(M, k) read-out weights: live and the q weighting use ``‖a_i‖`` over the output axis."""
    w = torch.stack([t(unit_at(d)) for d in (0.0, 90.0, 45.0)])
    a = t([[3.0, 4.0], [0.0, 1.0], [0.0, 0.1]])  # norms 5, 1, 0.1: mean 6.1/3
    m = rg.particle_metrics(_Units(w, a), t([[1.0, 0.0]]), "relu")
    assert m["live"] == pytest.approx(2 / 3)  # 0.1 < 0.05 · 6.1/3 = 0.1017
    assert m["q_abs_a"] == pytest.approx((5 * 1 + 1 * 0 + 0.1 * 0.5) / 6.1)
    assert m["q"] == pytest.approx(0.5)
    assert m["aligned"] == pytest.approx(1 / 2) and m["coverage"] == 1.0


def test_task_dataclass_defaults():
    """The documented defaults of the four ``[data]``/``[model]`` tables."""
    assert dataclasses.asdict(rg.TeacherStudentData()) == {
        "d": 16,
        "k": 1,
        "activation": "relu",
        "directions": "orthonormal",
        "n_train": 4096,
        "n_test": 2048,
        "label_noise": 0.0,
        "seed": None,
    }
    assert dataclasses.asdict(rg.FeatureModel()) == {
        "n_particles": 256,
        "activation": "relu",
        "A": None,
        "sphere": False,
        "kind": "particles",
        "bias": True,
    }
    assert dataclasses.asdict(rg.ImageData()) == {
        "dataset": "fashion_mnist",
        "root": "",
        "n_train": 0,
        "n_test": 0,
        "n_val": 0,
    }
    assert dataclasses.asdict(rg.ImageModel()) == {
        "n_particles": 256,
        "activation": "relu",
        "kind": "particles",
        "A": None,
    }
    assert rg.TEACHER_STUDENT.Data is rg.TeacherStudentData and rg.TEACHER_STUDENT.Model is rg.FeatureModel
    assert rg.IMAGE_CLASSIFICATION.Data is rg.ImageData and rg.IMAGE_CLASSIFICATION.Model is rg.ImageModel
    assert rg.VAL_SPLIT_SEED == 20_281


@pytest.mark.parametrize("bad", [-1, True, 1.5, "3", None])
def test_image_data_refuses_bad_n_val(bad):
    """``n_val`` must be a non-bool int ≥ 0 (message with the repr of the value)."""
    msg = f"n_val must be an integer ≥ 0 (the training images held out for validation; 0: none), got {bad!r}"
    with pytest.raises(ValueError, match=exact(msg)):
        rg.ImageData(n_val=bad)
    assert rg.ImageData(n_val=0).n_val == 0 and rg.ImageData(n_val=5).n_val == 5


def test_validation_split_reference_permutation():
    """Held-out = sorted first n_val of randperm(n) from a generator seeded 20281; kept = the sorted rest."""
    for n, n_val in [(10, 3), (7, 6), (5, 1)]:
        perm = torch.randperm(n, generator=torch.Generator().manual_seed(20281))
        val, kept = rg.validation_split(n, n_val)
        assert val.tolist() == sorted(perm[:n_val].tolist())
        assert kept.tolist() == sorted(perm[n_val:].tolist())
        assert val.dtype == torch.int64 and kept.dtype == torch.int64


@pytest.mark.parametrize(("n", "n_val"), [(10, 0), (10, 10), (10, 11), (10, -1), (1, 1)])
def test_validation_split_refuses_out_of_range(n, n_val):
    """Unless 0 < n_val < n: the ConfigError names data.n_val, n and the value."""
    msg = (
        f"data.n_val must be ≥ 1 and < the number of training images ({n}, after data.n_train), "
        f"got {n_val}: at least one image must be left to train on"
    )
    with pytest.raises(cfg.ConfigError, match=exact(msg)):
        rg.validation_split(n, n_val)


def test_teacher_student_build_wires_data_init_batches_loss_and_evaluate():
    """Against a second code path: the data from ``teacher_student`` with the derived data seed and every
    [data] field, the net from ``FeatureParticles`` with the derived init seed, the batches from the
    derived batch seed, the loss ½·MSE, and each evaluation metric recomputed."""
    from meanfield import data as mdata
    from meanfield.nn import FeatureParticles
    from meanfield.seeds import derive_seed

    data = rg.TeacherStudentData(
        d=4, k=2, activation="tanh", directions="random", n_train=32, n_test=16, label_noise=0.3
    )
    model = rg.FeatureModel(n_particles=6, activation="relu", A=0.5, sphere=True)
    exp = _ts_build(data, model)
    ts = mdata.teacher_student(
        4,
        32,
        16,
        k=2,
        activation="tanh",
        directions="random",
        label_noise=0.3,
        seed=derive_seed(5, "data"),
        dtype=DT,
    )
    ref = FeatureParticles(
        4,
        6,
        "relu",
        A=0.5,
        sphere=True,
        generator=torch.Generator().manual_seed(derive_seed(5, "init")),
        dtype=DT,
    )
    net = exp.model
    assert isinstance(net, FeatureParticles) and net.A == 0.5 and net.sphere is True and net.b is None
    assert torch.equal(net.w, ref.w) and torch.equal(net.a, ref.a)
    assert float(net.a.detach().abs().max()) <= 0.5 and torch.allclose(
        net.w.norm(dim=1), torch.ones(6, dtype=DT)
    )
    bref = mdata.Batches(32, 8, seed=derive_seed(5, "batches"))
    idx = exp.next_batch()
    assert torch.equal(idx, bref.next_indices()) and idx.shape == (8,)
    with torch.no_grad():
        loss = exp.loss(idx)
        assert float(loss) == pytest.approx(
            0.5 * float(((ref(ts.x_train[idx]) - ts.y_train[idx]) ** 2).mean())
        )
        m = exp.evaluate()
        mse = float(((ref(ts.x_test) - ts.y_test) ** 2).mean())
    cos = torch.abs(dv.teacher_alignment(ref.w.detach(), ts.directions))  # (M, K)
    assert m["test_mse"] == pytest.approx(mse)
    assert m["test_mse_relative"] == pytest.approx(mse / float(ts.y_test.var()))
    assert m["alignment_max"] == pytest.approx(float(cos.max(0).values.mean()))
    assert set(m) == {
        "test_mse",
        "test_mse_relative",
        "alignment_max",
        "live",
        "modes",
        "collapse",
        "aligned",
        "coverage",
        "q",
        "q_abs_a",
    }
    pm = rg.particle_metrics(ref, ts.directions, "relu")
    assert {k: m[k] for k in pm} == pytest.approx(pm)
    assert exp.unit == "samples" and exp.units_per_step == 8
    assert exp.description == f"{ts.description}; FeatureParticles(M=6, σ=relu)"
    assert exp.batches.n == 32 and exp.batches.batch_size == 8


def test_teacher_student_explicit_data_seed_and_run_seed_independence():
    """``data.seed`` given: the data come from it, whatever the run seed; None: from the run seed."""
    from meanfield import data as mdata

    data = rg.TeacherStudentData(d=3, n_train=16, n_test=8, seed=42)
    model = rg.FeatureModel(n_particles=4)
    ts = mdata.teacher_student(3, 16, 8, k=1, activation="relu", directions="orthonormal", seed=42, dtype=DT)
    for run_seed in (0, 1):
        exp = _ts_build(data, model, seed=run_seed, batch_size=16)
        idx = torch.arange(16)
        with torch.no_grad():
            ref = 0.5 * float(((exp.model(ts.x_train) - ts.y_train) ** 2).mean())
            assert float(exp.loss(idx)) == pytest.approx(ref)
    e0 = _ts_build(rg.TeacherStudentData(d=3, n_train=16, n_test=8), model, seed=0)
    e1 = _ts_build(rg.TeacherStudentData(d=3, n_train=16, n_test=8), model, seed=1)
    assert not torch.equal(e0.model.w, e1.model.w)


def test_teacher_student_mlp_kind():
    """``kind = "mlp"``: a WideMLP with the derived init seed and ``bias`` passed; description says so."""
    from meanfield.seeds import derive_seed

    data = rg.TeacherStudentData(d=3, n_train=16, n_test=8)
    for bias in (True, False):
        exp = _ts_build(
            data, rg.FeatureModel(n_particles=5, activation="tanh", kind="mlp", bias=bias), seed=2
        )
        ref = rg.WideMLP(
            3, 5, "tanh", bias=bias, generator=torch.Generator().manual_seed(derive_seed(2, "init")), dtype=DT
        )
        assert isinstance(exp.model, rg.WideMLP)
        sd, rsd = exp.model.state_dict(), ref.state_dict()
        assert sd.keys() == rsd.keys() and all(torch.equal(sd[k], rsd[k]) for k in sd)
        assert exp.description.endswith("; WideMLP(M=5, σ=tanh)")
        assert exp.model.w.dtype == DT
        with torch.no_grad():
            m = exp.evaluate()
        assert m["modes"] >= 0 and "q_abs_a" in m


def test_image_classification_standardises_slices_and_evaluates(fake_loaders):
    """n_train/n_test slice the splits (stats from the whole train split), the default loader and root
    ``""`` → None, the FeatureParticles net (k outputs, bias, A) from the derived init seed, cross-entropy
    loss, test metrics recomputed, description, higher_is_better."""
    from meanfield import data as mdata
    from meanfield.nn import FeatureParticles
    from meanfield.seeds import derive_seed

    ds, calls = fake_loaders
    exp = _img_build(
        rg.ImageData(n_train=12, n_test=5), rg.ImageModel(n_particles=6, activation="tanh", A=0.7)
    )
    assert calls == [("fashion", None)]
    ref = FeatureParticles(
        4,
        6,
        "tanh",
        A=0.7,
        out_features=3,
        bias=True,
        generator=torch.Generator().manual_seed(derive_seed(3, "init")),
        dtype=DT,
    )
    sd, rsd = exp.model.state_dict(), ref.state_dict()
    assert sd.keys() == rsd.keys() and all(torch.equal(sd[k], rsd[k]) for k in sd)
    assert exp.model.A == 0.7 and exp.model.out_features == 3
    x_train = _np_standardise(ds, ds.train_x[:12])
    x_test = _np_standardise(ds, ds.test_x[:5])
    idx = exp.next_batch()
    assert torch.equal(idx, mdata.Batches(12, 4, seed=derive_seed(3, "batches")).next_indices())
    with torch.no_grad():
        assert float(exp.loss(idx)) == pytest.approx(
            float(nn.functional.cross_entropy(ref(x_train[idx]), ds.train_y[idx]))
        )
        m = exp.evaluate()
        logits = ref(x_test)
    err = float((logits.argmax(1) != ds.test_y[:5]).double().mean())
    assert m["test_loss"] == pytest.approx(float(nn.functional.cross_entropy(logits, ds.test_y[:5])))
    assert m["test_error"] == pytest.approx(err) and m["accuracy"] == pytest.approx(1 - err)
    assert set(m) == {"test_loss", "test_error", "accuracy", "live", "modes", "collapse"}
    assert exp.description == "FAKE; 12 train / 5 test; FeatureParticles(M=6, σ=tanh, k=3, bias)"
    assert exp.higher_is_better == ("accuracy",) and exp.unit == "samples" and exp.units_per_step == 4


def test_image_classification_all_images_by_default_and_cifar_root(fake_loaders):
    """n_train = n_test = 0 keep every image; dataset cifar10 calls the CIFAR loader with the root."""
    ds, calls = fake_loaders
    exp = _img_build(
        rg.ImageData(dataset="cifar10", root="/some/where"), rg.ImageModel(n_particles=3), batch_size=20
    )
    assert calls == [("cifar", "/some/where")]
    assert exp.description == "FAKE; 20 train / 7 test; FeatureParticles(M=3, σ=relu, k=3, bias)"
    x_train = _np_standardise(ds, ds.train_x)
    with torch.no_grad():
        got = float(exp.loss(torch.arange(20)))
        assert got == pytest.approx(float(nn.functional.cross_entropy(exp.model(x_train), ds.train_y)))
        m = exp.evaluate()
        logits = exp.model(_np_standardise(ds, ds.test_x))
    assert m["test_loss"] == pytest.approx(float(nn.functional.cross_entropy(logits, ds.test_y)))


def test_image_classification_validation_split(fake_loaders):
    """n_val: held-out images from ``validation_split`` of the first n_train, removed from training (the
    batches cover the rest), val_loss / val_error recomputed, description counts both."""
    from meanfield import data as mdata
    from meanfield.seeds import derive_seed

    ds, _ = fake_loaders
    exp = _img_build(rg.ImageData(n_train=12, n_val=4), rg.ImageModel(n_particles=5), seed=4, batch_size=8)
    val, kept = rg.validation_split(12, 4)
    x_all = _np_standardise(ds, ds.train_x[:12])
    y_all = ds.train_y[:12]
    idx = exp.next_batch()
    assert torch.equal(idx, mdata.Batches(8, 8, seed=derive_seed(4, "batches")).next_indices())
    with torch.no_grad():
        assert float(exp.loss(idx)) == pytest.approx(
            float(nn.functional.cross_entropy(exp.model(x_all[kept][idx]), y_all[kept][idx]))
        )
        m = exp.evaluate()
        vl = exp.model(x_all[val])
    assert m["val_loss"] == pytest.approx(float(nn.functional.cross_entropy(vl, y_all[val])))
    assert m["val_error"] == pytest.approx(float((vl.argmax(1) != y_all[val]).double().mean()))
    assert set(m) == {
        "test_loss",
        "test_error",
        "accuracy",
        "val_loss",
        "val_error",
        "live",
        "modes",
        "collapse",
    }
    assert (
        exp.description
        == "FAKE; 8 train / 4 validation (held out of train) / 7 test; FeatureParticles(M=5, σ=relu, k=3, bias)"
    )
    with pytest.raises(
        cfg.ConfigError,
        match=re.escape(
            "data.n_val must be ≥ 1 and < the number of training images (12, after data.n_train), got 12"
        ),
    ):
        _img_build(rg.ImageData(n_train=12, n_val=12), rg.ImageModel(n_particles=5))


def test_image_classification_mlp_kind(fake_loaders):
    """``kind = "mlp"``: WideMLP(d, M, σ, k) from the derived init seed; description says WideMLP."""
    from meanfield.seeds import derive_seed

    exp = _img_build(rg.ImageData(), rg.ImageModel(n_particles=4, activation="gelu", kind="mlp"), seed=6)
    ref = rg.WideMLP(
        4, 4, "gelu", 3, generator=torch.Generator().manual_seed(derive_seed(6, "init")), dtype=DT
    )
    sd, rsd = exp.model.state_dict(), ref.state_dict()
    assert sd.keys() == rsd.keys() and all(torch.equal(sd[k], rsd[k]) for k in sd)
    assert exp.description == "FAKE; 20 train / 7 test; WideMLP(M=4, σ=gelu)"
    with torch.no_grad():
        m = exp.evaluate()
    assert set(m) == {"test_loss", "test_error", "accuracy", "live", "modes", "collapse"}
