"""Tests of :mod:`meanfield.seeds`."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

from meanfield import BrownianIncrements, MeanFieldLangevin, simulate
from meanfield.drift.potentials import (
    Quadratic,
)
from meanfield.seeds import resolve_generator

F64 = torch.float64
UNDER_MUTMUT = "MUTANT_UNDER_TEST" in os.environ


B, M, D = 4, 30, 2


A = torch.tensor([0.5, 1.0, 2.0, 3.5], dtype=F64)


BETA = torch.tensor([0.05, 0.2, 0.5, 1.0], dtype=F64)


def state(B=B, M=M, d=D, seed=0, dtype=F64):
    return torch.randn(B, M, d, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def test_one_seed_resolver_for_int_numpy_integer_and_generator():
    ref = torch.randn(5, generator=torch.Generator().manual_seed(7))
    for given in (7, np.int64(7), np.uint32(7), torch.Generator().manual_seed(7)):
        g, seed = resolve_generator(given)
        assert torch.equal(torch.randn(5, generator=g), ref), given
        assert seed == (None if isinstance(given, torch.Generator) else 7)
    g, seed = resolve_generator(None)
    assert isinstance(seed, int) and torch.equal(
        torch.randn(3, generator=g), torch.randn(3, generator=torch.Generator().manual_seed(seed))
    )
    for bad in (True, np.bool_(True), 7.0, "7", np.float64(7.0)):
        with pytest.raises(TypeError, match="must be a torch.Generator, an int seed"):
            resolve_generator(bad)
    with pytest.raises(ValueError, match=r"\[−2\^63, 2\^64\)"):
        resolve_generator(2**64)
    with pytest.raises(TypeError):
        resolve_generator(None, allow_none=False)


def test_every_entry_point_reads_a_seed_the_same_way():
    """simulate, BrownianIncrements.sample, Law1d.sample and the sliced distance's seed: a numpy integer is the
    int it holds (the same numbers); a float or a bool is refused (negative controls)."""
    from meanfield.metrics.wasserstein import Normal, wasserstein

    system = MeanFieldLangevin(Quadratic(A), beta=BETA)
    runs = [
        simulate(system, state(), t1=0.05, dt=0.01, generator=g).final
        for g in (5, np.int64(5), torch.Generator().manual_seed(5))
    ]
    assert torch.equal(runs[0], runs[1]) and torch.equal(runs[0], runs[2])
    paths = [
        BrownianIncrements.sample(3, (2, 2), 0.1, generator=g).increments
        for g in (9, np.uint16(9), torch.Generator().manual_seed(9))
    ]
    assert torch.equal(paths[0], paths[1]) and torch.equal(paths[0], paths[2])
    assert torch.equal(Normal().sample(4, np.int32(2)), Normal().sample(4, 2))
    x, y = state(B=1, d=3)[0], state(B=1, d=3, seed=1)[0]
    sliced = [wasserstein(x, y, method="sliced", seed=s).cost for s in (3, np.int64(3))]
    assert torch.equal(sliced[0], sliced[1])
    assert not torch.equal(sliced[0], wasserstein(x, y, method="sliced", seed=4).cost)
    for bad in (5.0, True):
        with pytest.raises(TypeError, match="int seed"):
            simulate(system, state(), t1=0.05, dt=0.01, generator=bad)
        with pytest.raises(TypeError, match="int seed"):
            BrownianIncrements.sample(3, (2, 2), 0.1, generator=bad)


def test_a_noise_seed_equal_to_the_global_one_is_warned_of_because_its_noise_repeats_the_init():
    """``warn_if_global_seed``: after ``torch.manual_seed(7)`` an initialisation drawn with ``torch.randn`` and
    ``Langevin(seed=7)``'s first noise are the same numbers (ξ = (θ₁ − θ₀)/√(2βη) on a zero gradient equals θ₀
    exactly): the warning is about a real correlation. It is given once, at the caller's line, by ``Langevin``,
    ``KineticLangevin``, ``simulate(generator=7)`` (naming its own argument in the remedy) and
    ``BrownianIncrements.sample``, also for a negative seed (torch keeps it modulo 2^64). Controls:
    ``derive_seed(7, "noise")`` and another seed draw other numbers and do not warn, nor does a Langevin group
    whose noise is block-seeded (``noise_block``) or absent."""
    import warnings

    from meanfield.optim import KineticLangevin, Langevin
    from meanfield.seeds import derive_seed

    def first_noise(seed):
        torch.manual_seed(7)
        theta = torch.nn.Parameter(torch.randn(6, 3, dtype=F64))
        theta0 = theta.detach().clone()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            opt = Langevin([theta], lr=0.01, beta=0.5, seed=seed)
        theta.grad = torch.zeros_like(theta)
        opt.step()
        return theta0, (theta.detach() - theta0) / (2 * 0.5 * 0.01) ** 0.5, caught

    theta0, xi, caught = first_noise(7)
    assert torch.allclose(xi, theta0, rtol=0, atol=1e-12)  # the footgun itself
    assert len(caught) == 1 and "is also the seed of torch's global generator" in str(caught[0].message)
    assert (UNDER_MUTMUT or caught[0].filename == __file__) and 'derive_seed(7, "noise")' in str(caught[0].message)
    for other in (derive_seed(7, "noise"), 8):
        theta0, xi, caught = first_noise(other)
        assert not caught and (xi - theta0).abs().max() > 0.1
    torch.manual_seed(7)
    with pytest.warns(UserWarning, match="KineticLangevin: seed=7 is also the seed"):
        KineticLangevin([torch.nn.Parameter(torch.zeros(3))], lr=0.1, friction=1.0, beta=0.1, seed=7)
    with pytest.warns(UserWarning, match="simulate: generator=7 is also the seed") as record:
        simulate(MeanFieldLangevin(Quadratic(A), beta=BETA), state(), t1=0.02, dt=0.01, generator=7)
    assert UNDER_MUTMUT or record[0].filename == __file__  # mutmut's trampolines add frames
    assert 'Pass generator=meanfield.seeds.derive_seed(7, "noise")' in str(record[0].message)  # simulate's argument
    torch.manual_seed(-5)  # stored as 2**64 − 5: the same stream as a generator seeded −5
    with pytest.warns(UserWarning, match=r"BrownianIncrements.sample: generator=-5 is also the seed"):
        BrownianIncrements.sample(3, (2, 2), 0.1, generator=-5)
    torch.manual_seed(7)
    with warnings.catch_warnings(record=True) as caught:  # controls: no noise from the seed's own stream
        warnings.simplefilter("always")
        Langevin([torch.nn.Parameter(torch.zeros(4, 2))], lr=0.1, beta=0.5, seed=7, noise_block=2)  # derived seeds
        Langevin([torch.nn.Parameter(torch.zeros(4, 2))], lr=0.1, beta=0.5, seed=7, noise=False)  # no noise at all
    assert not [w for w in caught if "global generator" in str(w.message)]
