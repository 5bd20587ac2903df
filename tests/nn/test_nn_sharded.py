"""Tests of :mod:`meanfield.nn.sharded`."""

from __future__ import annotations

import copy

import pytest
import torch
from helpers.fake_dist import FakeWorld
from torch import nn

from meanfield.drift.potentials import Quadratic
from meanfield.nn import ParticleAttention
from meanfield.nn.cloud import ParticleCloud
from meanfield.nn.particles import ParticleLayer
from meanfield.nn.sharded import (
    ParticleShard,
    full_optimizer_state,
    full_state_dict,
    load_full_optimizer_state,
    load_full_state_dict,
    particle_parameter,
    shard_particles,
    sharded_layers,
)
from meanfield.optim import Langevin

DT = torch.float64


WORLD = 2


class Net(nn.Module):
    """Replicated linear maps around two particle attentions (M = 4 and M = 6 heads)."""

    def __init__(self, seed: int) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.inp = nn.Linear(6, 8, dtype=DT)
        self.first = ParticleAttention(8, 4, 3, generator=g, dtype=DT)
        self.mid = nn.Linear(8, 8, dtype=DT)
        self.second = ParticleAttention(8, 6, 2, generator=g, dtype=DT)
        self.out = nn.Linear(8, 1, dtype=DT)
        with torch.no_grad():
            for p in (*self.inp.parameters(), *self.mid.parameters(), *self.out.parameters()):
                p.copy_(torch.randn(p.shape, generator=g, dtype=DT) / 3)

    def forward(self, x):
        return self.out(self.second(self.mid(self.first(self.inp(x)))))  # (B, T, 1)


X = torch.randn(5, 7, 6, generator=torch.Generator().manual_seed(1), dtype=DT)  # (B, T, d_in)


def close(a, b, tol=1e-12):
    return a.shape == b.shape and (a - b).abs().max().item() <= tol * max(1.0, b.abs().max().item())


def rows(r: int, M: int) -> tuple[int, int]:
    m = M // WORLD
    return r * m, (r + 1) * m


def steps(model, k=3, seed=7, rows_kept=True):
    groups = Langevin.param_groups_for(model, drift="adam", beta=0.05)
    if not rows_kept:
        for group in groups:
            group.pop("particle_rows", None)
    opt = Langevin(groups, lr=1e-2, beta=0.05, seed=seed)
    for _ in range(k):
        opt.zero_grad()
        model(X).square().sum().backward()
        opt.step()
    return opt


class Gained(ParticleLayer):
    """A particle layer whose forward takes a second argument: ``gain · 1/M Σ_i tanh(X w_i)``."""

    particle_parameter_names = ("w", "bias", "frozen")

    def __init__(self, M: int, d: int) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(4)
        self.w = nn.Parameter(torch.randn(M, d, generator=g, dtype=DT))
        self.bias = nn.Parameter(torch.randn(M, generator=g, dtype=DT))  # (M,): 1-D per-particle state
        self.frozen = nn.Parameter(torch.randn(M, generator=g, dtype=DT), requires_grad=False)

    def particle_outputs(self, X, gain=1.0):
        return gain * torch.tanh(X @ self.w.mT + self.bias + self.frozen)[:, :, None]  # (B, M, 1)

    def forward(self, X, gain=1.0):
        return self.particle_outputs(X, gain).mean(1)  # (B, 1)


def test_sharded_layers_equal_the_unsharded_model(monkeypatch):
    """Rows, forward, gradients, Langevin steps, full state and optimizer state, and a resume from them: each
    rank's numbers are the unsharded model's (its rows of the particle parameters)."""
    fake = FakeWorld(WORLD).install(monkeypatch)
    ref = Net(0)
    ref_grads = None
    y_ref = ref(X)
    y_ref.square().sum().backward()
    ref_grads = {k: p.grad.clone() for k, p in ref.named_parameters()}
    ref_stepped = Net(0)
    ref_opt = steps(ref_stepped)
    ref_state, ref_opt_state = ref_stepped.state_dict(), ref_opt.state_dict()
    next_ref = copy.deepcopy(ref_stepped)
    next_opt = Langevin(
        Langevin.param_groups_for(next_ref, drift="adam", beta=0.05), lr=1e-2, beta=0.05, seed=7
    )
    next_opt.load_state_dict(ref_opt.state_dict())
    next_opt.zero_grad()
    next_ref(X).square().sum().backward()
    next_opt.step()

    def rank_fn(r):
        a, b = rows(r, 4), rows(r, 6)
        net = Net(0)
        assert shard_particles(net) is net
        assert net.first.particle_shard == ParticleShard(
            *a, 4
        ) and net.second.particle_shard == ParticleShard(*b, 6)
        assert (net.first.n_particles, net.second.n_particles) == (2, 3)
        assert sharded_layers(net) == [net.first, net.second] and sharded_layers(Net(0)) == []
        for layer, ref_layer, (lo, hi) in ((net.first, ref.first, a), (net.second, ref.second, b)):
            for name in layer.particle_parameter_names:
                p = getattr(layer, name)
                assert isinstance(p, nn.Parameter) and p.requires_grad
                assert torch.equal(p.detach(), getattr(ref_layer, name).detach()[lo:hi])
        assert torch.equal(net.inp.weight.detach(), ref.inp.weight.detach())  # replicated: untouched
        with pytest.raises(
            ValueError, match=r"^the model is already sharded \(shard_particles was called on it before\)$"
        ):
            shard_particles(net)

        y = net(X)
        assert close(y, y_ref)
        y.square().sum().backward()
        for k, p in net.named_parameters():
            lo, hi = a if k.startswith("first.") else b if k.startswith("second.") else (None, None)
            assert close(p.grad, ref_grads[k][lo:hi]), k  # replicated: the whole gradient, summed over ranks

        stepped = Net(0)
        shard_particles(stepped)
        opt = steps(stepped)
        full, full_opt = full_state_dict(stepped), full_optimizer_state(opt)
        assert full.keys() == ref_state.keys() and all(close(full[k], ref_state[k]) for k in ref_state)
        assert full_opt["state"].keys() == ref_opt_state["state"].keys()
        for i, entry in ref_opt_state["state"].items():
            assert entry.keys() == full_opt["state"][i].keys()
            for key, v in entry.items():
                got = full_opt["state"][i][key]
                assert close(got, v) if torch.is_tensor(v) else got == v, (i, key)
        assert torch.equal(particle_parameter(stepped.second, "W_O"), full["second.W_O"])
        assert torch.equal(particle_parameter(stepped.first, "W_QKV"), full["first.W_QKV"])

        again = shard_particles(Net(5))  # another initialisation, then the full checkpoint
        opt_again = Langevin(
            Langevin.param_groups_for(again, drift="adam", beta=0.05), lr=1e-2, beta=0.05, seed=3
        )
        load_full_state_dict(again, full)
        load_full_optimizer_state(opt_again, full_opt)
        assert all(torch.equal(v, stepped.state_dict()[k]) for k, v in again.state_dict().items())
        opt_again.zero_grad()
        again(X).square().sum().backward()
        opt_again.step()
        after = full_state_dict(again)
        return all(close(after[k], v, 1e-11) for k, v in next_ref.state_dict().items())

    assert fake.run(rank_fn) == [True, True]
    # negative control: a rank's own heads alone are another layer
    half = copy.deepcopy(ref.first).prune([0, 1])
    assert not close(ref.out(ref.second(ref.mid(half(ref.inp(X))))), y_ref, 1e-3)


def test_noise_drawn_per_rank_is_another_chain(monkeypatch):
    """Negative control of the step check: without ``particle_rows`` each rank draws its own rows' noise."""
    fake = FakeWorld(WORLD).install(monkeypatch)
    ref = Net(0)
    steps(ref)

    def rank_fn(r):
        net = shard_particles(Net(0))
        steps(net, rows_kept=False)
        return full_state_dict(net)["first.W_QKV"]

    out = fake.run(rank_fn)
    assert torch.equal(out[0], out[1]) and not close(out[0], ref.first.W_QKV.detach(), 1e-3)


def test_a_model_that_does_not_split_is_refused_and_one_rank_is_no_sharding(monkeypatch):
    with monkeypatch.context() as patch:
        fake = FakeWorld(3).install(patch)

        def rank_fn(r):
            with pytest.raises(
                ValueError, match=r"ParticleAttention has M = 4 particles, which do not split into 3"
            ):
                shard_particles(Net(0))
            return r

        assert fake.run(rank_fn) == [0, 1, 2]
    with monkeypatch.context() as patch:
        one = FakeWorld(1).install(patch)
        net = Net(0)
        assert one.run(lambda r: shard_particles(net))[0] is net and sharded_layers(net) == []


def test_a_layer_with_more_arguments_and_a_frozen_parameter(monkeypatch):
    """Every argument reaches the layer (only the first, the input, goes through the shard's entry), a
    frozen stacked parameter stays frozen after sharding, the root module itself can be the sharded layer,
    and the optimizer state of a 1-D stacked parameter (Adam's moments of shape (M,)) is gathered and split."""
    fake = FakeWorld(WORLD).install(monkeypatch)
    ref, z = Gained(6, 6), X[:, 0]  # (B, d)
    y_ref = ref(z, 2.5)
    state = ref.state_dict()

    def adam(layer):
        opt = Langevin(Langevin.param_groups_for(layer, drift="adam", beta=0.05), lr=1e-2, beta=0.05, seed=2)
        for _ in range(2):
            opt.zero_grad()
            layer(z, 2.5).square().sum().backward()
            opt.step()
        return opt

    stepped = Gained(6, 6)
    ref_opt = adam(stepped).state_dict()["state"]
    assert any(
        v.dim() == 1 and v.shape[0] == 6 for e in ref_opt.values() for v in e.values() if torch.is_tensor(v)
    )

    def rank_fn(r):
        layer = shard_particles(Gained(6, 6))
        assert layer.particle_shard == ParticleShard(3 * r, 3 * r + 3, 6)
        assert layer.w.requires_grad and not layer.frozen.requires_grad
        full = full_state_dict(layer)  # the root's keys have no prefix
        assert full.keys() == state.keys() and all(torch.equal(full[k], state[k]) for k in state)
        y = layer(z, 2.5)
        opt = adam(shard_particles(Gained(6, 6)))
        full_opt = full_optimizer_state(opt)["state"]
        for i, entry in ref_opt.items():
            for key, v in entry.items():
                assert close(full_opt[i][key], v) if torch.is_tensor(v) else full_opt[i][key] == v, (i, key)
        again = shard_particles(Gained(6, 6))
        opt_again = Langevin(Langevin.param_groups_for(again, drift="adam", beta=0.05), lr=1e-2, beta=0.05)
        load_full_optimizer_state(opt_again, full_optimizer_state(opt))
        mine = opt.state_dict()["state"]
        for i, entry in opt_again.state_dict()["state"].items():  # each rank holds its rows again
            assert all(
                torch.equal(v, mine[i][k]) if torch.is_tensor(v) else v == mine[i][k]
                for k, v in entry.items()
            )
        return y

    out = fake.run(rank_fn)
    assert all(close(y, y_ref) for y in out)
    assert not close(y_ref, ref(z), 1e-3)  # control: the gain matters


def test_a_layer_without_input_sums_its_particles_over_the_ranks(monkeypatch):
    """ParticleCloud's forward takes no input: its average of (V, |x|², x) is the average over all M."""
    fake = FakeWorld(WORLD).install(monkeypatch)

    def make():
        return ParticleCloud(
            8, 2, Quadratic(1.3), k=0.5, generator=torch.Generator().manual_seed(3), dtype=DT
        )

    ref = make()
    y_ref = ref()
    ref.energy(y_ref).backward()

    def rank_fn(r):
        cloud = shard_particles(make())
        y = cloud()
        cloud.energy(y).backward()
        return y, cloud.x.grad

    out = fake.run(rank_fn)
    assert all(close(y, y_ref) for y, _ in out)
    assert close(torch.cat([g for _, g in out], 0), ref.x.grad)


def test_unsharded_layers_are_left_alone(monkeypatch):
    """Without a process group nothing is sharded; with one, a layer that was not sharded is not gathered."""
    net = Net(0)
    assert shard_particles(net) is net and sharded_layers(net) == []
    assert not hasattr(net.first, "particle_shard")
    assert torch.equal(particle_parameter(net.first, "W_O"), net.first.W_O.detach())
    assert full_state_dict(net).keys() == net.state_dict().keys()
    fake = FakeWorld(WORLD).install(monkeypatch)
    out = fake.run(lambda r: particle_parameter(Net(0).second, "W_QKV"))
    assert all(torch.equal(o, net.second.W_QKV.detach()) for o in out)  # (M, …), not world copies of it
