"""The validation split of ``image_classification`` (``data.n_val``): held out of train, evaluated like test.

A fake data set in memory, ordered by class like the CIFAR-10 JPEG copy, stands in for the loader. Which
images are trained on is read off the task's own loss, one index at a time, and matched against a loss
computed here from the data set's arrays; the validation metrics are recomputed here from the same arrays.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import meanfield.data as mdata
from meanfield.config import ConfigError, from_dict
from meanfield.data import ImageDataset
from meanfield.tasks.regression import IMAGE_CLASSIFICATION, ImageData, ImageModel, validation_split

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
