"""Tests of :mod:`meanfield.data.images`."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from meanfield.data.images import ImageDataset


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@pytest.mark.parametrize("shape", [(6, 3, 3, 2), (5, 3, 4, 2), (4, 1, 2, 3)], ids=["H=C", "H!=C", "C=1"])
def test_normalized_images_use_the_training_channel_statistics(shape):
    """``z = (x/255 − mean_c)/std_c`` with the per-channel population mean and std of the *training* images
    (numpy), for both splits, float32, whatever H and W are (H = C included). Negative control: the test
    split standardised with its own statistics differs."""
    N, C, H, W = shape
    g = _gen(50)
    offsets = torch.tensor([0, 60, 120][:C]).view(1, C, 1, 1)
    train = (torch.randint(0, 120, shape, generator=g) + offsets).to(torch.uint8)
    test = (torch.randint(0, 200, (3, C, H, W), generator=g)).to(torch.uint8)
    ds = ImageDataset(
        train, torch.zeros(N, dtype=torch.int64), test, torch.zeros(3, dtype=torch.int64), ["c"], "toy"
    )
    t = train.numpy() / 255.0
    mean, std = t.mean(axis=(0, 2, 3)), t.std(axis=(0, 2, 3))
    for split, x in (("train", train), ("test", test)):
        z = ds.normalized(split)
        assert z.dtype == torch.float32 and z.shape == x.shape
        want = (x.numpy() / 255.0 - mean[None, :, None, None]) / std[None, :, None, None]
        np.testing.assert_allclose(z.numpy(), want, rtol=1e-5, atol=1e-5)
    own = test.numpy() / 255.0
    own_mean, own_std = own.mean(axis=(0, 2, 3)), own.std(axis=(0, 2, 3))
    own_z = (own - own_mean[None, :, None, None]) / own_std[None, :, None, None]
    assert np.abs(ds.normalized("test").numpy() - own_z).max() > 1e-2  # negative control
    np.testing.assert_allclose(ds.mean.numpy(), mean, rtol=1e-12)
    np.testing.assert_allclose(ds.std.numpy(), std, rtol=1e-12)


def test_normalized_images_refuse_an_unknown_split():
    """Only ``"train"`` and ``"test"``, word for word."""
    x = torch.zeros(2, 1, 2, 2, dtype=torch.uint8)
    ds = ImageDataset(
        x, torch.zeros(2, dtype=torch.int64), x, torch.zeros(2, dtype=torch.int64), ["c"], "toy"
    )
    with pytest.raises(ValueError, match=r"^split must be 'train' or 'test', got 'valid'$"):
        ds.normalized("valid")
