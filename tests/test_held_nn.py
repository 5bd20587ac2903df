"""Value tests, written against held-out mutation survivors, of the particle layers and their neighbours.

What is pinned, function by function, against an independent answer (a numpy / closed-form computation, a
generator replayed by hand, or the documented recipe written out):

- the ``mean_field`` task (:meth:`_MeanField.build`: the cloud, its device and dtype, the loss and its gradient,
  the evaluation, the exact variance and when it is reported, the experiment's fields) and
  :func:`stationary_variance` (the closed form and the stability bound ``0 < η(a + k) < 2``);
- :func:`meanfield.optim.step_stats._sums` across ranks (a fake ``torch.distributed``: what is all-reduced, with which
  op, on which device, and how the sums come back), and :func:`aggregate` on top of it;
- :func:`meanfield.optim.noise.add_noise` (both amplitudes, all or some parameters, channels_last preconditioner
  views) and :func:`start_noise` (one draw per (device, dtype), views per bucket, buffers reused or grown);
- :func:`meanfield.optim.drift.precondition` (``t = 1/sqrt(sqrt(v) + ε√bias2/M)``, flat, per parameter, for
  parameters laid out channels_last, and when it does nothing);
- the constructors of :class:`FeatureParticles` and :class:`ParticleCloud` (the initial law replayed from the
  generator, the projection, the activation's name, every error message);
- :meth:`ParticleAttention._load_from_state_dict` (the earlier ``W_Q, W_K, W_V`` layout, and when it is not used);
- :meth:`SelfAttentionDynamics._velocity_fourier` against the direct sum over token pairs (numpy);
- :func:`meanfield.tasks.language._corpus` on small files, :func:`meanfield.data.teacher._directions` against
  numpy's QR, :meth:`ImageDataset.normalized` against numpy, :meth:`TokenBatches.next_batch` against the
  generator's own offsets.

Nothing here is statistical: every comparison is exact or within float64 (float32 where stated) rounding, and
most tests carry a negative control that the same comparison rejects.
"""

from __future__ import annotations

import functools
import math
import re
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.distributed as dist
from scipy import special

from meanfield.data.batches import TokenBatches
from meanfield.data.images import ImageDataset
from meanfield.data.teacher import _directions
from meanfield.drift.potentials import DoubleWell, Quadratic
from meanfield.nn.attention import CausalParticleAttention, ParticleAttention
from meanfield.nn.cloud import ParticleCloud
from meanfield.nn.features import ACTIVATIONS, FeatureParticles
from meanfield.nn.tokens import SelfAttentionDynamics
from meanfield.optim.buckets import Bucket
from meanfield.optim.drift import precondition
from meanfield.optim.noise import add_noise, start_noise
from meanfield.optim.step_stats import Record, _sums, aggregate
from meanfield.seeds import derive_seed
from meanfield.tasks.language import LMData, _corpus
from meanfield.tasks.mean_field import MEAN_FIELD, MeanFieldData, MeanFieldModel, stationary_variance

F64 = torch.float64


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# -- the mean_field task ----------------------------------------------------------------------------------------


def _build(model: MeanFieldModel, *, seed: int = 3, dtype=F64, device="cpu"):
    return MEAN_FIELD.build(
        MeanFieldData(), model, batch_size=7, seed=seed, device=torch.device(device), dtype=dtype
    )


def _np_means(x: np.ndarray, V) -> tuple[float, float, np.ndarray]:
    """(mean V(x_i), mean |x_i|², x̄) of a cloud ``x`` (M, d) in numpy, ``V`` a function of one particle."""
    return float(np.mean([V(p) for p in x])), float(np.mean((x**2).sum(1))), x.mean(0)


@pytest.mark.parametrize(
    ("confinement", "V", "gradV"),
    [
        ("quadratic", lambda p: 0.5 * 1.5 * (p**2).sum(), lambda x: 1.5 * x),
        ("double_well", lambda p: (p**4 / 4 - p**2 / 2).sum(), lambda x: x**3 - x),
    ],
    ids=["quadratic", "double_well"],
)
def test_mean_field_build_is_the_cloud_its_seed_names_with_the_documented_loss_and_evaluation(
    confinement, V, gradV
):
    """The built cloud is ``init_scale·N(0, I)`` from the generator seeded ``derive_seed(seed, "init")``; the
    loss is the mean-field energy ``V̄ + k/2(mean|x|² − |x̄|²)`` (numpy) with gradient
    ``(∇V(x_i) + k(x_i − x̄))/M`` (hand formula); evaluation gives energy, ``(mean|x|² − |x̄|²)/d`` and
    ``|x̄|`` (numpy); the experiment counts particles, has no data and no hooks. Negative control: the gradient
    without the interaction term is rejected."""
    M, d, a, k, scale = 6, 3, 1.5, 0.5, 2.0
    model = MeanFieldModel(n_particles=M, d=d, confinement=confinement, a=a, k=k, init_scale=scale)
    exp = _build(model, seed=3)
    x0 = scale * torch.randn(M, d, generator=_gen(derive_seed(3, "init")), dtype=F64)
    assert exp.model.x.dtype == F64 and exp.model.x.device.type == "cpu"
    torch.testing.assert_close(exp.model.x.detach(), x0, rtol=0, atol=0)
    assert exp.model.k == k and exp.model.d == d and exp.model.n_particles == M
    expected_V = Quadratic(a) if confinement == "quadratic" else DoubleWell()
    assert repr(exp.model.confinement) == repr(expected_V)

    x = x0.numpy()
    v_bar, sq, centre = _np_means(x, V)
    energy = v_bar + 0.5 * k * (sq - (centre**2).sum())
    loss = exp.loss(None)
    assert float(loss.detach()) == pytest.approx(energy, rel=1e-13)
    loss.backward()
    grad = (gradV(x) + k * (x - centre)) / M
    np.testing.assert_allclose(exp.model.x.grad.numpy(), grad, rtol=1e-12, atol=1e-15)
    assert np.abs(exp.model.x.grad.numpy() - gradV(x) / M).max() > 1e-3  # negative control: no interaction

    out = exp.evaluate()
    assert set(out) == {"energy", "variance", "centre"}  # no exact variance without beta and eta
    assert out["energy"] == pytest.approx(energy, rel=1e-13)
    assert out["variance"] == pytest.approx((sq - (centre**2).sum()) / d, rel=1e-13)
    assert out["centre"] == pytest.approx(float(np.linalg.norm(centre)), rel=1e-13)

    assert exp.unit == "particles"
    assert exp.units_per_step == M
    assert exp.next_batch() is None and exp.batches.next() is None
    assert exp.batches.state_dict() == {} and exp.batches.load_state_dict({"any": 1}) is None
    assert exp.on_backward is None and exp.window_metrics is None
    assert exp.higher_is_better == () and exp.nonfinite_metrics == ()
    assert exp.description == f"ParticleCloud(M={M}, d={d}, V={expected_V!r}, W = k/2|z|², k={k})"


@pytest.mark.parametrize(
    ("beta", "eta", "confinement", "reported"),
    [
        (0.5, 0.1, "quadratic", True),
        (0.0, 0.1, "quadratic", False),
        (0.5, 0.0, "quadratic", False),
        (0.5, 0.1, "double_well", False),
    ],
)
def test_mean_field_build_reports_the_exact_variance_only_for_a_hot_quadratic_chain(
    beta, eta, confinement, reported
):
    """``variance_exact = β/((a + k)(1 − η(a + k)/2))`` (closed form) and ``variance_ratio = variance/exact``
    are in the evaluation exactly when the confinement is quadratic and β > 0 and η > 0."""
    a, k = 1.25, 0.75
    model = MeanFieldModel(n_particles=5, d=2, confinement=confinement, a=a, k=k, beta=beta, eta=eta)
    out = _build(model).evaluate()
    if reported:
        exact = beta / ((a + k) * (1 - eta * (a + k) / 2))
        assert set(out) == {"energy", "variance", "centre", "variance_exact", "variance_ratio"}
        assert out["variance_exact"] == pytest.approx(exact, rel=1e-15)
        assert out["variance_ratio"] == pytest.approx(out["variance"] / exact, rel=1e-15)
    else:
        assert set(out) == {"energy", "variance", "centre"}


def test_mean_field_build_puts_the_cloud_on_the_device_asked_in_the_dtype_asked():
    """``device`` moves the cloud (the ``meta`` device stands for an accelerator: no data is needed to see
    where the parameter lives); ``dtype`` is the parameter's dtype. Negative control: the CPU build is on the
    CPU."""
    model = MeanFieldModel(n_particles=4, d=2)
    on_meta = _build(model, device="meta", dtype=torch.float32)
    assert on_meta.model.x.device.type == "meta" and on_meta.model.x.dtype == torch.float32
    assert tuple(on_meta.model.x.shape) == (4, 2)
    assert _build(model, device="cpu", dtype=torch.float32).model.x.device.type == "cpu"


@pytest.mark.parametrize(
    ("a", "k", "beta", "eta"),
    [(1.0, 0.0, 0.5, 0.1), (0.5, 3.5, 2.0, 0.4), (0.25, 0.25, 1.0, 2.0), (3.0, -1.0, 0.3, 0.99)],
)
def test_stationary_variance_is_the_fixed_point_of_the_variance_recursion(a, k, beta, eta):
    """``Var = 2βη/(1 − (1 − ηc)²)``, ``c = a + k``: the fixed point of ``s ← (1 − ηc)² s + 2βη`` (iterated to
    convergence here, an independent computation) — including ``c = 0.5, η = 2`` (ηc = 1 but η/c = 4)."""
    c = a + k
    s = 0.0
    for _ in range(20000):
        s = (1 - eta * c) ** 2 * s + 2 * beta * eta
    assert stationary_variance(a, k, beta, eta) == pytest.approx(s, rel=1e-12)
    assert stationary_variance(a, k, beta, eta) == pytest.approx(2 * beta * eta / (1 - (1 - eta * c) ** 2))


@pytest.mark.parametrize(
    ("a", "k", "eta"),
    [(1.0, -1.0, 0.1), (0.5, -1.5, 0.1), (2.0, 2.0, 0.5), (2.0, 2.0, 0.6), (1.0, 1.0, 0.0), (1.0, 1.0, -0.2)],
)
def test_stationary_variance_refuses_an_unstable_or_degenerate_chain_and_says_why(a, k, eta):
    """c = a + k ≤ 0, or ηc outside (0, 2) (ηc = 2: at the bound; ηc = 2.4 with η/c = 0.15 inside it): a
    ``ValueError`` that quotes c and ηc."""
    c = a + k
    message = f"the chain is stationary only for a + k > 0 and 0 < η(a + k) < 2, got {c} and {eta * c}"
    with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
        stationary_variance(a, k, 1.0, eta)


# -- Langevin statistics summed over ranks --------------------------------------------------------------------


def _fake_record(sums, rows, device="cpu", beta_given=0.0):
    bucket = SimpleNamespace(rows=rows, params=[torch.empty(2, device=device)])
    return SimpleNamespace(sums=lambda: sums, bucket=bucket, beta_given=beta_given)


class _OtherRank:
    """A fake ``torch.distributed`` whose collectives combine this process's tensors with a second rank's."""

    def __init__(self, totals, extremes, backend="gloo", stop=False):
        self.totals = torch.tensor(totals, dtype=F64)
        self.extremes = torch.tensor(extremes, dtype=F64)
        self.backend, self.stop = backend, stop
        self.calls = []

    def install(self, monkeypatch):
        monkeypatch.setattr(dist, "is_available", lambda: True)
        monkeypatch.setattr(dist, "is_initialized", lambda: True)
        monkeypatch.setattr(dist, "get_backend", lambda group=None: self.backend)
        monkeypatch.setattr(dist, "all_reduce", self.all_reduce)
        return self

    def all_reduce(self, tensor, op=dist.ReduceOp.SUM, group=None, async_op=False):
        self.calls.append((op, tensor.device.type, tensor.dtype, tensor.detach().clone()))
        if self.stop:
            raise _Stop
        if op == dist.ReduceOp.MAX:
            tensor.copy_(torch.maximum(tensor, self.extremes))
        elif op == dist.ReduceOp.SUM:
            tensor.add_(self.totals)
        else:
            raise AssertionError(f"unexpected op {op}")


class _Stop(Exception):
    pass


_LOCAL = [(3, 0.5, 0.125, 0.375, 2.0, 0.5), (1, 0.25, 0.25, 0.25, 9.0, 8.0), (2, 0.75, 0.5, 1.5, 1.0, 4.0)]
_OTHER_TOTALS = [[5.0, 1.25, 3.0, 0.25], [4.0, 1.0, 0.5, 2.0]]  # (n, Σ η, Σ noise², Σ drift²) of rank 1
_OTHER_EXTREMES = [[-0.0625, 0.25], [-0.75, 2.0]]  # (−min η, max η) of rank 1


def _three_records(device="cpu"):
    return [
        _fake_record(_LOCAL[0], (0, 2, 4), device, beta_given=0.5),
        _fake_record(_LOCAL[1], None, device, beta_given=0.25),
        _fake_record(_LOCAL[2], (2, 4, 4), device, beta_given=0.125),
    ]


def test_sums_of_sharded_records_are_summed_and_their_extremes_taken_over_the_ranks(monkeypatch):
    """With a process group, the sharded records' ``(n, Σ η, Σ noise², Σ drift²)`` go through one SUM
    all-reduce and ``(−min η, max η)`` through one MAX all-reduce (float64, one row per sharded record, in
    record order); the sums come back combined with the other rank's (hand-computed), ``n`` an int; a
    replicated record's sums are left as they are. Negative control: rank 0's own sums are not the result."""
    world = _OtherRank(_OTHER_TOTALS, _OTHER_EXTREMES).install(monkeypatch)
    out = _sums(_three_records())
    assert out[0] == (8, 1.75, 0.0625, 0.375, 5.0, 0.75)
    assert out[1] == _LOCAL[1]
    assert out[2] == (6, 1.75, 0.5, 2.0, 1.5, 6.0)
    assert type(out[0][0]) is int and type(out[2][0]) is int
    assert out[0] != _LOCAL[0]  # negative control
    assert len(world.calls) == 2
    (op_sum, dev_sum, dt_sum, totals), (op_max, dev_max, dt_max, extremes) = world.calls
    assert op_sum == dist.ReduceOp.SUM and op_max == dist.ReduceOp.MAX
    assert dt_sum == dt_max == F64 and dev_sum == dev_max == "cpu"
    assert torch.equal(totals, torch.tensor([[3.0, 0.5, 2.0, 0.5], [2.0, 0.75, 1.0, 4.0]], dtype=F64))
    assert torch.equal(extremes, torch.tensor([[-0.125, 0.375], [-0.5, 1.5]], dtype=F64))

    stats = aggregate(_three_records(), step=7)  # the statistics of all ranks' coordinates together
    n = 8 + 1 + 6
    assert stats.step == 7 and stats.n == n
    assert stats.eta_eff_mean == pytest.approx((1.75 + 0.25 + 1.75) / n, rel=1e-15)
    assert stats.eta_eff_min == 0.0625 and stats.eta_eff_max == 2.0
    assert stats.noise_rms == pytest.approx(math.sqrt((5.0 + 9.0 + 1.5) / n), rel=1e-15)
    assert stats.drift_rms == pytest.approx(math.sqrt((0.75 + 8.0 + 6.0) / n), rel=1e-15)
    assert stats.drift_to_noise == pytest.approx(stats.drift_rms / stats.noise_rms, rel=1e-15)
    assert stats.beta == 0.5


@pytest.mark.parametrize(
    ("backend", "device", "reduced_on"), [("nccl", "meta", "meta"), ("gloo", "meta", "cpu")]
)
def test_sums_are_reduced_on_the_first_sharded_parameters_device_under_nccl_only(
    monkeypatch, backend, device, reduced_on
):
    """NCCL reduces device tensors: the two tensors go to the device of the first sharded record's parameters
    (here ``meta``, a device other than the CPU); any other backend reduces them on the CPU."""
    world = _OtherRank(_OTHER_TOTALS, _OTHER_EXTREMES, backend=backend, stop=True).install(monkeypatch)
    records = [_fake_record(_LOCAL[1], None, "cpu"), _fake_record(_LOCAL[0], (0, 2, 4), device)]
    records.append(_fake_record(_LOCAL[2], (2, 4, 4), "cpu"))
    with pytest.raises(_Stop):
        _sums(records)
    assert world.calls[0][1] == reduced_on


def test_sums_without_a_process_group_or_sharded_records_reduce_nothing(monkeypatch):
    """No collective (and the sums as each record computed them) when ``torch.distributed`` is unavailable,
    when no process group is initialised, or when no record is sharded."""
    world = _OtherRank(_OTHER_TOTALS, _OTHER_EXTREMES).install(monkeypatch)

    def never():
        raise AssertionError("is_initialized asked although torch.distributed is unavailable")

    monkeypatch.setattr(dist, "is_available", lambda: False)
    monkeypatch.setattr(dist, "is_initialized", never)
    assert _sums(_three_records()) == _LOCAL
    monkeypatch.setattr(dist, "is_available", lambda: True)
    monkeypatch.setattr(dist, "is_initialized", lambda: False)
    assert _sums(_three_records()) == _LOCAL
    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    plain = [_fake_record(_LOCAL[0], None), _fake_record(_LOCAL[2], None)]
    assert _sums(plain) == [_LOCAL[0], _LOCAL[2]]
    assert world.calls == []


# -- noise: add_noise and start_noise -----------------------------------------------------------------------------


def _channels_last(seed: int) -> torch.Tensor:
    return torch.randn(2, 3, 2, 2, generator=_gen(seed), dtype=F64).to(memory_format=torch.channels_last)


def _logical(flat24: torch.Tensor) -> torch.Tensor:
    """A (2, 3, 2, 2) channels_last tensor's memory ``flat24`` read at logical (n, c, h, w): memory order is
    (n, h, w, c)."""
    return flat24.reshape(2, 2, 2, 3).permute(0, 3, 1, 2)


def _noise_bucket():
    p0, p1 = _channels_last(1), torch.randn(5, generator=_gen(2), dtype=F64)
    b = Bucket([p0, p1], [0, 24], 29)
    t = torch.rand(29, generator=_gen(3), dtype=F64) + 0.5  # (n,) the preconditioner t, memory order
    b.rsqrt, b.rsqrt_views = t, b.views(t, range(2), strided=True)
    return b, p0.clone(), p1.clone(), t


def test_add_noise_without_preconditioner_adds_root_2_beta_lr_times_xi():
    """``θ ← θ + sqrt(2β lr)·ξ`` (hand formula), ``ξ`` read in each parameter's logical order from its bucket
    offset; only the record's parameters move; the record keeps ``ξ``. Negative control: ``sqrt(β lr)``."""
    lr, beta = 0.1, 0.3
    b, p0, p1, _ = _noise_bucket()
    xi = torch.randn(29, generator=_gen(4), dtype=F64)
    record = Record(b, [0, 1], "sgd", lr, beta, 1.0, None, False)
    add_noise(record, xi)
    amp = math.sqrt(2 * beta * lr)
    torch.testing.assert_close(b.params[0], p0 + amp * xi[:24].reshape(2, 3, 2, 2), rtol=1e-15, atol=1e-15)
    torch.testing.assert_close(b.params[1], p1 + amp * xi[24:], rtol=1e-15, atol=1e-15)
    assert record.noise is xi
    assert (b.params[1] - (p1 + math.sqrt(beta * lr) * xi[24:])).abs().max() > 1e-3  # negative control

    b, p0, p1, _ = _noise_bucket()
    record = Record(b, [1], "adam", lr, beta, 4.0, None, False, bias2=0.19)  # not preconditioned: lr
    add_noise(record, xi)
    assert torch.equal(b.params[0], p0)
    torch.testing.assert_close(b.params[1], p1 + amp * xi[24:], rtol=1e-15, atol=1e-15)


@pytest.mark.parametrize("index", [[0, 1], [0], [1], [1, 0]])
def test_add_noise_with_preconditioner_adds_the_amplitude_times_t_times_xi(index):
    """With ``rsqrt_ready``: ``θ ← θ + sqrt(2β lr √bias2/M)·t ⊙ ξ`` (hand formula), ``t`` the bucket's
    preconditioner read at each parameter's memory layout (channels_last here: (n, h, w, c) memory order),
    for all parameters or some, in any order (``[1, 0]``: every parameter, not in the bucket's order); the
    others do not move. Negative control: the unpreconditioned amplitude."""
    lr, beta, scale, bias2 = 0.05, 0.4, 4.0, 0.19
    b, p0, p1, t = _noise_bucket()
    xi = torch.randn(29, generator=_gen(5), dtype=F64)
    record = Record(b, index, "adam", lr, beta, scale, None, True, eps=1e-8, bias2=bias2, rsqrt_ready=True)
    add_noise(record, xi)
    amp = math.sqrt(2 * beta * lr * math.sqrt(bias2) / scale)
    want0 = p0 + amp * _logical(t[:24]) * xi[:24].reshape(2, 3, 2, 2) if 0 in index else p0
    want1 = p1 + amp * t[24:] * xi[24:] if 1 in index else p1
    torch.testing.assert_close(b.params[0], want0, rtol=1e-15, atol=1e-15)
    torch.testing.assert_close(b.params[1], want1, rtol=1e-15, atol=1e-15)
    assert record.noise is xi
    plain = math.sqrt(2 * beta * lr)
    if 1 in index:
        assert (b.params[1] - (p1 + plain * xi[24:])).abs().max() > 1e-3  # negative control
    else:
        assert (b.params[0] - (p0 + plain * xi[:24].reshape(2, 3, 2, 2))).abs().max() > 1e-3


def test_a_bucket_covers_an_index_only_when_it_is_every_parameter_in_order():
    """``Bucket.covers``: ``[0, 1, 2]`` and ``range(3)`` are the whole bucket; a subset, a permutation of all
    (``[1, 0, 2]``: its flat buffer is not the index's concatenation) and a longer index are not; ``gather`` of
    the permutation is the hand concatenation in the index's order, of the whole index the buffer itself."""
    params = [torch.zeros(2, dtype=F64), torch.zeros(3, dtype=F64), torch.zeros(1, dtype=F64)]
    b = Bucket(params, [0, 2, 5], 6)
    assert b.covers([0, 1, 2]) and b.covers(range(3))
    assert (
        not b.covers([0, 1]) and not b.covers([1, 0, 2]) and not b.covers([0, 1, 2, 3]) and not b.covers([])
    )
    flat = torch.arange(6, dtype=F64)
    assert b.gather(flat, [0, 1, 2]) is flat
    assert b.gather(flat, [1, 0, 2]).tolist() == [2.0, 3.0, 4.0, 0.0, 1.0, 5.0]  # control: not the buffer


def _bucket(shape, dtype=F64, rows=None, block=0):
    p = torch.zeros(shape, dtype=dtype)
    return Bucket([p], [0], p.numel(), rows=rows, block=block)


def test_start_noise_draws_one_flat_normal_per_kind_split_in_views_and_reuses_a_large_enough_buffer():
    """One flat ``N(0, 1)`` draw per (device, dtype), in order of first appearance, from the optimizer's
    generator (replayed by hand with ``normal_``); the views: ``n`` numbers for a bucket, the ``(M, …)`` draw
    for a sharded bucket (6 particles × 3 here), none for block noise. A buffer that is large enough is
    reused (the same tensor, the views at its start); a missing or too small one is replaced by one of the
    exact size. ``undo`` puts the generator back. Negative control: another seed gives other numbers."""
    b64 = _bucket((10,))
    b32 = _bucket((3,), dtype=torch.float32)
    sharded = _bucket((2, 3), rows=(2, 4, 6))
    blocks = _bucket((4, 1), block=2)
    noisy = [(b64, [0], 0, 0), (b32, [0], 1, 0), (sharded, [0], 2, 0), (blocks, [0], 3, 0)]
    k64, k32 = (torch.device("cpu"), F64), (torch.device("cpu"), torch.float32)
    big = torch.full((40,), -1.0, dtype=F64)
    small = torch.zeros(1, dtype=torch.float32)
    buffers = {k64: big, k32: small}
    g = _gen(11)
    asked = []

    def generator(device):
        asked.append(device)
        return g

    draw = start_noise(noisy, buffers, generator)
    draw.wait()
    ref = _gen(11)
    ref64 = torch.empty(28, dtype=F64).normal_(generator=ref)
    ref32 = torch.empty(3, dtype=torch.float32).normal_(generator=ref)
    views = draw.views
    assert [v.numel() for v in views] == [10, 3, 18, 0]
    assert torch.equal(views[0], ref64[:10]) and torch.equal(views[2], ref64[10:28])
    assert torch.equal(views[1], ref32)
    assert buffers[k64] is big and views[0].data_ptr() == big.data_ptr()
    assert views[2].data_ptr() == big.data_ptr() + 10 * big.element_size()
    assert torch.equal(big[28:], torch.full((12,), -1.0, dtype=F64))  # beyond the draw: untouched
    assert buffers[k32] is not small and buffers[k32].numel() == 3 and buffers[k32].dtype == torch.float32
    assert views[1].data_ptr() == buffers[k32].data_ptr()
    assert asked == [torch.device("cpu"), torch.device("cpu")]
    other = torch.empty(28, dtype=F64).normal_(generator=_gen(12))
    assert not torch.equal(views[0], other[:10])  # negative control

    grown = buffers[k32]  # exactly the size of its draw now
    again = start_noise(noisy, buffers, lambda device: g)  # the grown buffers are reused the next step
    again.wait()
    assert buffers[k64] is big and buffers[k32] is grown
    assert again.views[1].data_ptr() == grown.data_ptr()
    state = g.get_state()
    fresh = {}
    third = start_noise(noisy[1:2], fresh, lambda device: g)  # no buffer yet: one of the exact size
    third.undo()
    assert fresh[k32].numel() == 3 and list(fresh) == [k32]
    assert torch.equal(g.get_state(), state)


# -- drift: precondition ----------------------------------------------------------------------------------------


def _adam_bucket():
    p0, p1 = _channels_last(6), torch.randn(5, generator=_gen(7), dtype=F64)
    b = Bucket([p0, p1], [0, 24], 29)
    b.exp_avg = torch.zeros(29, dtype=F64)
    b.exp_avg_sq = torch.rand(29, generator=_gen(8), dtype=F64) * 2 + 1e-4  # (n,) memory order
    return b


def _t(v: np.ndarray, eps: float, bias2: float, scale: float) -> np.ndarray:
    return 1 / np.sqrt(np.sqrt(v) + eps * math.sqrt(bias2) / scale)


def test_precondition_of_all_parameters_fills_a_new_flat_buffer_with_t():
    """``t = 1/sqrt(sqrt(v) + ε·√bias2/M)`` elementwise over the flat ``v`` (numpy), in a buffer allocated like
    the moments with per-parameter views in their own layout; ``rsqrt_ready`` is set. Negative control:
    ``ε`` without the ``√bias2/M`` factor."""
    eps, bias2, scale = 0.5, 0.19, 4.0
    b = _adam_bucket()
    record = Record(b, [0, 1], "adam", 0.01, 0.1, scale, None, True, eps=eps, bias1=0.1, bias2=bias2)
    precondition(record)
    assert record.rsqrt_ready is True
    assert b.rsqrt.shape == (29,) and b.rsqrt.dtype == F64
    want = _t(b.exp_avg_sq.numpy(), eps, bias2, scale)
    np.testing.assert_allclose(b.rsqrt.numpy(), want, rtol=1e-14)
    assert np.abs(b.rsqrt.numpy() - _t(b.exp_avg_sq.numpy(), eps, 1.0, 1.0)).max() > 1e-3  # negative control
    v0, v1 = b.rsqrt_views
    assert v0.shape == (2, 3, 2, 2) and v0.stride() == b.params[0].stride() and v1.shape == (5,)
    assert v0.data_ptr() == b.rsqrt.data_ptr() and v1.data_ptr() == b.rsqrt.data_ptr() + 24 * 8
    torch.testing.assert_close(v0, _logical(torch.from_numpy(want[:24])), rtol=1e-14, atol=0)


@pytest.mark.parametrize("index", [[0], [1]])
def test_precondition_of_some_parameters_fills_only_their_segments_in_their_layout(index):
    """Some parameters only: their segments of the existing buffer get ``t`` of their own ``v`` elementwise in
    memory order (a channels_last parameter included, numpy), the rest of the buffer is untouched, and the
    buffer is not reallocated."""
    eps, bias2, scale = 1e-3, 0.36, 2.0
    b = _adam_bucket()
    buf = torch.full((29,), -7.0, dtype=F64)
    b.rsqrt, b.rsqrt_views = buf, b.views(buf, range(2), strided=True)
    record = Record(b, index, "adam", 0.01, 0.1, scale, None, True, eps=eps, bias2=bias2)
    precondition(record)
    assert b.rsqrt is buf and record.rsqrt_ready is True
    want = _t(b.exp_avg_sq.numpy(), eps, bias2, scale)
    lo, hi = (0, 24) if index == [0] else (24, 29)
    np.testing.assert_allclose(buf.numpy()[lo:hi], want[lo:hi], rtol=1e-14)
    rest = np.r_[buf.numpy()[:lo], buf.numpy()[hi:]]
    assert (rest == -7.0).all()


@pytest.mark.parametrize(("drift", "preconditioned"), [("sgd", True), ("sgd", False), ("adam", False)])
def test_precondition_does_nothing_for_sgd_or_unpreconditioned_noise(drift, preconditioned):
    """An SGD drift or ``noise_preconditioned=False``: no buffer, ``rsqrt_ready`` stays false."""
    b = _adam_bucket()
    record = Record(b, [0, 1], drift, 0.01, 0.1, 1.0, None, preconditioned, eps=1e-8)
    precondition(record)
    assert b.rsqrt is None and b.rsqrt_views is None and record.rsqrt_ready is False


# -- FeatureParticles and ParticleCloud constructors ------------------------------------------------------------


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


def test_particle_cloud_initial_particles_are_init_scale_times_standard_normals():
    """``x = init_scale·N(0, I)`` from the generator (replayed by hand), in the dtype asked; ``k`` kept as a
    float, the confinement as given; on the device asked (``meta``). Negative control: another seed."""
    V = DoubleWell()
    cloud = ParticleCloud(7, 3, V, 2, init_scale=0.5, generator=_gen(4), dtype=F64)
    x = 0.5 * torch.randn(7, 3, generator=_gen(4), dtype=F64)
    torch.testing.assert_close(cloud.x.detach(), x, rtol=0, atol=0)
    assert isinstance(cloud.x, torch.nn.Parameter) and cloud.x.dtype == F64
    assert cloud.k == 2.0 and type(cloud.k) is float and cloud.d == 3 and cloud.confinement is V
    assert cloud.n_particles == 7
    assert cloud.extra_repr() == "n_particles=7, d=3, confinement=DoubleWell(), k=2.0"
    assert not torch.equal(cloud.x, ParticleCloud(7, 3, V, 2, init_scale=0.5, generator=_gen(5), dtype=F64).x)
    default = ParticleCloud(4, 2, Quadratic(1.0), generator=_gen(4))
    torch.testing.assert_close(default.x.detach(), torch.randn(4, 2, generator=_gen(4)), rtol=0, atol=0)
    assert default.k == 0.0 and default.x.dtype == torch.float32
    meta = ParticleCloud(4, 2, Quadratic(1.0), generator=_gen(4), device="meta")
    assert meta.x.device.type == "meta" and tuple(meta.x.shape) == (4, 2)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"n_particles": 0}, ValueError, "n_particles must be ≥ 1, got 0"),
        ({"n_particles": 2.0}, TypeError, "n_particles must be an int, got float"),
        ({"n_particles": True}, TypeError, "n_particles must be an int, got bool"),
        ({"d": 0}, ValueError, "d must be ≥ 1, got 0"),
        ({"d": "2"}, TypeError, "d must be an int, got str"),
        (
            {"confinement": "quadratic"},
            TypeError,
            "confinement must be a meanfield.drift.potentials.Confinement, got 'quadratic'",
        ),
        ({"k": math.inf}, ValueError, "k must be finite, got inf"),
        ({"k": "1"}, TypeError, "k must be a real number, got str"),
        ({"init_scale": math.nan}, ValueError, "init_scale must be finite, got nan"),
        ({"dtype": torch.int32}, TypeError, "dtype must be a floating-point torch.dtype"),
    ],
)
def test_particle_cloud_refuses_bad_arguments_by_name(kwargs, error, message):
    """Every argument check of the constructor, word for word (case included)."""
    args = {"n_particles": 3, "d": 2, "confinement": Quadratic(1.0), **kwargs}
    with pytest.raises(error, match="^" + re.escape(message)):
        ParticleCloud(**args)


# -- ParticleAttention: state dicts of the earlier layout ---------------------------------------------------------


def _old_maps(M=2, d=4, h=3, seed=20):
    g = _gen(seed)
    return [torch.randn(M, d, h, generator=g, dtype=F64) for _ in range(3)]


@pytest.mark.parametrize("cls", [ParticleAttention, CausalParticleAttention])
def test_attention_loads_the_earlier_separate_query_key_value_layout(cls):
    """A state dict with ``W_Q, W_K, W_V`` (``(M, d, h)``) and no ``W_QKV`` loads strictly into
    ``W_QKV[:, j] = W_jᵀ``: the properties give the maps back; also under a prefix (a submodule)."""
    layer = cls(4, 2, 3, dtype=F64)
    Wq, Wk, Wv = _old_maps()
    WO = torch.randn(2, 3, 4, generator=_gen(21), dtype=F64)
    result = layer.load_state_dict({"W_Q": Wq, "W_K": Wk, "W_V": Wv, "W_O": WO})
    assert result.missing_keys == [] and result.unexpected_keys == []
    for j, W in enumerate((Wq, Wk, Wv)):
        assert torch.equal(layer.W_QKV[:, j], W.transpose(-1, -2))
    assert torch.equal(layer.W_Q, Wq) and torch.equal(layer.W_K, Wk) and torch.equal(layer.W_V, Wv)
    assert torch.equal(layer.W_O, WO)

    outer = torch.nn.ModuleDict({"attn": cls(4, 2, 3, dtype=F64)})
    outer.load_state_dict({"attn.W_Q": Wq, "attn.W_K": Wk, "attn.W_V": Wv, "attn.W_O": WO})
    assert torch.equal(outer["attn"].W_V, Wv) and torch.equal(outer["attn"].W_Q, Wq)


def test_attention_keeps_w_qkv_when_the_state_has_it_and_ignores_an_incomplete_old_layout():
    """With ``W_QKV`` present the old keys are not converted (non-strict: ``W_QKV`` as saved, the old keys
    reported unexpected; strict: an error); with only some of the old keys nothing is converted (``W_QKV``
    missing, the layer unchanged)."""
    layer = ParticleAttention(4, 2, 3, dtype=F64)
    Wq, Wk, Wv = _old_maps()
    WQKV = torch.randn(2, 3, 3, 4, generator=_gen(22), dtype=F64)
    WO = torch.randn(2, 3, 4, generator=_gen(23), dtype=F64)
    state = {"W_QKV": WQKV, "W_Q": Wq, "W_K": Wk, "W_V": Wv, "W_O": WO}
    result = layer.load_state_dict(state, strict=False)
    assert torch.equal(layer.W_QKV, WQKV)
    assert sorted(result.unexpected_keys) == ["W_K", "W_Q", "W_V"] and result.missing_keys == []
    with pytest.raises(RuntimeError, match="Unexpected key"):
        ParticleAttention(4, 2, 3, dtype=F64).load_state_dict(state)

    fresh = ParticleAttention(4, 2, 3, dtype=F64)
    before = fresh.W_QKV.detach().clone()
    result = fresh.load_state_dict({"W_Q": Wq, "W_K": Wk, "W_O": WO}, strict=False)
    assert result.missing_keys == ["W_QKV"] and sorted(result.unexpected_keys) == ["W_K", "W_Q"]
    assert torch.equal(fresh.W_QKV, before)


# -- token dynamics on the circle: the Fourier velocity ------------------------------------------------------------


def _circle(B=2, n=7, seed=30, radius=1.0):
    theta = torch.rand(B, n, generator=_gen(seed), dtype=F64) * 2 * math.pi
    return radius * torch.stack((theta.cos(), theta.sin()), -1)


def _direct_velocity(x: np.ndarray, beta: float, normalized: bool, causal: bool) -> np.ndarray:
    """``Σ_j e^{β⟨x_i, x_j⟩} x_j / Z_i`` over ``j`` (``j ≤ i`` if causal), ``Z_i`` the sum of the weights (SA)
    or ``n`` (USA), for unit tokens: the definition, summed pair by pair."""
    B, n, _ = x.shape
    out = np.zeros_like(x)
    for b in range(B):
        for i in range(n):
            js = range(i + 1) if causal else range(n)
            w = np.array([math.exp(beta * float(x[b, i] @ x[b, j])) for j in js])
            z = w.sum() if normalized else n
            out[b, i] = sum(wj * x[b, j] for wj, j in zip(w, js)) / z
    return out


@pytest.mark.parametrize("beta", [0.0, 0.7, 9.0])
@pytest.mark.parametrize("normalized", [True, False])
@pytest.mark.parametrize("causal", [False, True])
def test_fourier_velocity_is_the_sum_over_token_pairs(beta, normalized, causal):
    """``method="fourier"`` (modes in blocks of 8: β = 9 needs several blocks, β = 0 one mode) equals the
    direct pairwise sum (numpy) for SA and USA, causal or not, to 1e-12 relative; tokens off the unit circle
    are taken at their angle (radius 2 gives the unit-circle answer). Negative control: the answer at
    another β differs."""
    system = SelfAttentionDynamics.identity(
        2, inverse_temperature=beta, sphere=True, normalized=normalized, causal=causal, method="fourier"
    )
    x = _circle()
    want = _direct_velocity(x.numpy(), beta, normalized, causal)
    got = system.velocity(x)
    assert got.dtype == F64 and got.shape == x.shape
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-12, atol=1e-12 * np.abs(want).max())
    np.testing.assert_allclose(
        system.velocity(2 * x).numpy(), want, rtol=1e-12, atol=1e-12 * np.abs(want).max()
    )
    other = _direct_velocity(x.numpy(), beta + 0.5, normalized, causal)
    assert np.abs(got.numpy() - other).max() > 1e-3  # negative control


def test_fourier_velocity_in_float32_and_for_a_large_cloud():
    """float32 tokens give float32 velocities within 1e-5 of the float64 direct sum; n = 300 tokens (the
    size ``method="auto"`` switches at) agree with the pairwise method to 1e-10."""
    x = _circle(B=1, n=9, seed=31)
    system = SelfAttentionDynamics.identity(2, inverse_temperature=2.5, sphere=True, method="fourier")
    got = system.velocity(x.float())
    assert got.dtype == torch.float32
    np.testing.assert_allclose(got.double().numpy(), _direct_velocity(x.numpy(), 2.5, True, False), atol=1e-5)
    big = _circle(B=1, n=300, seed=32)
    auto = SelfAttentionDynamics.identity(2, inverse_temperature=4.0, sphere=True, normalized=False)
    assert auto.resolved_method(300) == "fourier"
    pairwise = SelfAttentionDynamics.identity(2, inverse_temperature=4.0, sphere=True, normalized=False, method="pairwise")
    scale = float(special.i0(4.0))
    np.testing.assert_allclose(
        auto.velocity(big).numpy(), pairwise.velocity(big).numpy(), rtol=1e-10, atol=1e-12 * scale
    )


# -- the lm task's corpus -----------------------------------------------------------------------------------------


def _wikitext(tmp_path):
    folder = tmp_path / "wikitext-2"
    folder.mkdir()
    (folder / "valid.txt").write_text("a b\nc a\n", encoding="utf-8")
    (folder / "test.txt").write_text("b c\n", encoding="utf-8")
    return folder


def test_corpus_loads_the_wikitext_splits_named_for_training_and_evaluation(tmp_path):
    """WikiText-2: exactly the train and eval splits are loaded (ids by first appearance over them: hand
    computed); the same split twice loads it once; the other splits are ``None``."""
    root = _wikitext(tmp_path)
    both = _corpus(LMData(dataset="wikitext2", root=str(root), train_split="valid", eval_split="test"))
    assert both.vocab == ["a", "b", "<eos>", "c"]
    assert both.valid.tolist() == [0, 1, 2, 3, 0, 2] and both.test.tolist() == [1, 3, 2]
    assert both.train is None
    one = _corpus(LMData(dataset="wikitext2", root=str(root), train_split="valid", eval_split="valid"))
    assert one.valid.tolist() == [0, 1, 2, 3, 0, 2] and one.test is None and one.train is None
    swapped = _corpus(LMData(dataset="wikitext2", root=str(root), train_split="test", eval_split="valid"))
    assert swapped.vocab == ["a", "b", "<eos>", "c"]  # read in train, valid, test order whatever is asked


def test_corpus_passes_root_and_splits_to_the_loaders(monkeypatch, tmp_path):
    """``root = ""`` means the default (``None``); ``tiny_shakespeare`` gets only the root; ``wikitext2`` the
    root and the de-duplicated ``(train_split, eval_split)``. The real loader reads a small ``input.txt``."""
    from meanfield import data as _data

    text = tmp_path / "input.txt"
    text.write_text("abcabcabca", encoding="utf-8")
    corpus = _corpus(LMData(dataset="tiny_shakespeare", root=str(text)))
    assert corpus.train.tolist() == [0, 1, 2, 0, 1, 2, 0, 1, 2] and corpus.valid.tolist() == [0]
    calls = []
    monkeypatch.setattr(_data, "tiny_shakespeare", lambda root: calls.append(("ts", root)) or "TS")
    monkeypatch.setattr(_data, "wikitext2", lambda root, splits: calls.append(("wt", root, splits)) or "WT")
    assert _corpus(LMData(dataset="tiny_shakespeare")) == "TS"
    assert _corpus(LMData(dataset="tiny_shakespeare", root="/r")) == "TS"
    assert _corpus(LMData(dataset="wikitext2", root="/w", train_split="valid", eval_split="test")) == "WT"
    assert _corpus(LMData(dataset="wikitext2", train_split="test", eval_split="test")) == "WT"
    assert calls == [("ts", None), ("ts", "/r"), ("wt", "/w", ("valid", "test")), ("wt", None, ("test",))]


# -- teacher directions, image standardisation, token windows -----------------------------------------------------


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


@pytest.mark.parametrize("dtype", [torch.int32, torch.uint8, torch.int16, torch.int64])
def test_token_batches_are_the_windows_at_the_generators_offsets_as_int64(dtype):
    """``x[b] = tokens[i_b : i_b + L]``, ``y[b] = tokens[i_b + 1 : i_b + 1 + L]`` with
    ``i ~ randint(n − L, (B, 1))`` from the sampler's generator (replayed by hand), batch after batch, as
    int64 whatever the tokens' integer dtype; ``step`` counts the batches. Negative control: another seed."""
    tokens = ((torch.arange(23) * 7) % 19).to(dtype)
    L, B = 4, 5
    batches = TokenBatches(tokens, L, B, seed=8)
    g = _gen(8)
    ref = tokens.to(torch.int64)
    for step in range(1, 4):
        x, y = batches.next_batch()
        offsets = torch.randint(23 - L, (B, 1), generator=g).flatten().tolist()
        assert x.dtype == torch.int64 and y.dtype == torch.int64 and x.shape == (B, L) and y.shape == (B, L)
        assert x.tolist() == [ref[i : i + L].tolist() for i in offsets]
        assert y.tolist() == [ref[i + 1 : i + 1 + L].tolist() for i in offsets]
        assert batches.step == step
    x_other, _ = TokenBatches(tokens, L, B, seed=9).next_batch()
    first = TokenBatches(tokens, L, B, seed=8).next_batch()[0]
    assert not torch.equal(x_other, first)  # negative control
    whole = TokenBatches(tokens, 22, 2, seed=0)  # block_size = n − 1: the only window
    x, y = next(whole)
    assert x.tolist() == [ref[:-1].tolist()] * 2 and y.tolist() == [ref[1:].tolist()] * 2
