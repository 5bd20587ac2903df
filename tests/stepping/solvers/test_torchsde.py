"""Tests of :mod:`meanfield.stepping.solvers.torchsde`."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torchsde
from torchsde._core import methods

from meanfield import simulate
from meanfield.drift.systems import SDE
from meanfield.stepping.brownian import BrownianIncrements
from meanfield.stepping.solvers import TorchSDE
from meanfield.stepping.solvers.torchsde import TORCHSDE_METHODS, _GridBrownian, _SystemAsSDE

F64 = torch.float64


def cloud(B=2, M=4, d=2, seed=0, scale=1.0):
    """A seeded float64 ``(B, M, d)`` state."""
    g = torch.Generator().manual_seed(seed)
    return scale * torch.randn(B, M, d, generator=g, dtype=F64)


def close(actual, expected, rtol=1e-12, atol=1e-13):
    """``actual`` (tensor or array) equals ``expected`` in shape and within the tolerances (float64)."""
    a = actual.detach().double().numpy() if torch.is_tensor(actual) else np.asarray(actual, np.float64)
    e = expected.detach().double().numpy() if torch.is_tensor(expected) else np.asarray(expected, np.float64)
    return a.shape == e.shape and np.allclose(a, e, rtol=rtol, atol=atol)


def test_g_prod_general_diagonal_and_additive():
    """``_SystemAsSDE.g_prod`` on flat states ``(B, M·d)``: general noise is ``Σ_k σ_{dk} v_k`` per particle
    (numpy einsum, m = 3 ≠ d = 2), a tensor σ multiplies elementwise (also a broadcast ``(d,)`` σ), a number
    σ scales ``v``; a σ of a wrong shape is refused with the allowed and the returned shapes."""
    B, M, d, m = 2, 4, 2, 3
    shape = torch.Size((B, M, d))
    x = cloud(B, M, d, seed=20)
    y = x.reshape(B, -1)
    S = torch.randn(B, M, d, m, generator=torch.Generator().manual_seed(21), dtype=F64)
    general = SDE(lambda t, x: -x, lambda t, x: S * (1.0 + x[..., :1, None]), noise="general", brownian_dim=m)
    v = torch.randn(B, M * m, generator=torch.Generator().manual_seed(22), dtype=F64)
    sigma = S.numpy() * (1.0 + x.numpy()[..., :1, None])
    expected = np.einsum("bmdk,bmk->bmd", sigma, v.numpy().reshape(B, M, m)).reshape(B, M * d)
    assert close(_SystemAsSDE(general, shape, "ito", "general").g_prod(0.0, y, v), expected)
    w = torch.randn(B, M * d, generator=torch.Generator().manual_seed(23), dtype=F64)
    diagonal = SDE(lambda t, x: -x, lambda t, x: 0.3 + 0.1 * x**2, noise="diagonal")
    expected = ((0.3 + 0.1 * x.numpy() ** 2) * w.numpy().reshape(B, M, d)).reshape(B, M * d)
    assert close(_SystemAsSDE(diagonal, shape, "ito", "diagonal").g_prod(0.0, y, w), expected)
    row = torch.tensor([0.5, 2.0], dtype=F64)
    broadcast = SDE(lambda t, x: -x, lambda t, x: row, noise="additive")
    expected = (np.array([0.5, 2.0]) * w.numpy().reshape(B, M, d)).reshape(B, M * d)
    assert close(_SystemAsSDE(broadcast, shape, "ito", "additive").g_prod(0.0, y, w), expected)
    number = SDE(lambda t, x: -x, lambda t, x: 1.0 + t, noise="additive")
    assert close(
        _SystemAsSDE(number, shape, "ito", "additive").g_prod(torch.tensor(0.5), y, w), 1.5 * w.numpy()
    )
    bad = SDE(lambda t, x: -x, lambda t, x: torch.ones(5, dtype=F64), noise="diagonal")
    with pytest.raises(
        ValueError, match=r"^diffusion\(t, x\) must return σ of shape \(2, 4, 2\), got \(5,\)$"
    ):
        _SystemAsSDE(bad, shape, "ito", "diagonal").g_prod(0.0, y, w)
    bad_general = SDE(lambda t, x: -x, lambda t, x: S[..., :2], noise="general", brownian_dim=m)
    with pytest.raises(
        ValueError, match=r"^diffusion\(t, x\) must return σ of shape \(2, 4, 2, 3\), got \(2, 4, 2, 2\)$"
    ):
        _SystemAsSDE(bad_general, shape, "ito", "general").g_prod(0.0, y, v)


def test_torchsde_euler_general_noise_is_the_hand_step():
    """``torchsde_euler`` with general noise (m = 3), two steps on pre-drawn ``dW``: each step is
    ``x + dt·b + Σ_k σ_{dk}(x) dW_k`` per particle (numpy), the same as the native Euler–Maruyama."""
    dt, B, M, d, m = 0.05, 2, 3, 2, 3
    x0 = cloud(B, M, d, seed=24)
    S = torch.randn(B, M, d, m, generator=torch.Generator().manual_seed(25), dtype=F64)
    dW = torch.randn(2, B, M, m, generator=torch.Generator().manual_seed(26), dtype=F64) * math.sqrt(dt)
    system = SDE(
        lambda t, x: -x, lambda t, x: S * (1.0 + 0.5 * x[..., :1, None]), noise="general", brownian_dim=m
    )
    traj = simulate(
        system, x0, t1=2 * dt, dt=dt, solver="torchsde_euler", brownian=BrownianIncrements(dW, dt)
    )
    x = x0.numpy()
    for n in range(2):
        sigma = S.numpy() * (1.0 + 0.5 * x[..., :1, None])
        x = x - dt * x + np.einsum("bmdk,bmk->bmd", sigma, dW[n].numpy())
    assert close(traj.final, x)


@pytest.mark.parametrize(
    "method, noise, noise_type, sde_type, levy",
    [
        ("srk", "additive", "additive", "ito", "space-time"),
        ("reversible_heun", "additive", "diagonal", "stratonovich", "none"),
        ("heun", "diagonal", "diagonal", "stratonovich", "none"),
        ("euler", "general", "general", "ito", "none"),
    ],
)
def test_torchsde_stepper_builds_a_fixed_step_solver_on_the_grid(method, noise, noise_type, sde_type, levy):
    """``_build``: torchsde's solver class for the method, on the grid step ``dt`` with adaptive stepping
    off, the system presented with the documented noise type (additive σ as diagonal for reversible Heun),
    and a Brownian motion of shape ``(B, M·m)`` with the method's Lévy-area kind."""
    B, M, d, m, dt = 2, 3, 2, 4, 0.1
    if noise == "general":
        system = SDE(
            lambda t, x: -x, lambda t, x: torch.ones(B, M, d, m, dtype=F64), noise="general", brownian_dim=m
        )
        shape = (B, M, m)
    else:
        system = SDE(lambda t, x: -x, lambda t, x: 0.5 + 0 * x, noise=noise)
        shape = (B, M, d)
    source = BrownianIncrements.sample(3, shape, dt, generator=0)
    stepper = TorchSDE(method).stepper(system, source, 0.0, dt)
    stepper._build(cloud(B, M, d))
    solver = stepper._solver
    assert type(solver) is methods.select(method, sde_type)
    assert solver.adaptive is False and solver.dt == dt
    assert solver.sde.noise_type == noise_type and solver.sde.sde_type == sde_type
    assert solver.bm.shape == (B, shape[1] * shape[2]) and solver.bm.levy_area_approximation == levy


def cloud_2(B=2, M=4, d=2, seed=0, scale=1.0, dtype=F64):
    """A seeded ``(B, M, d)`` state."""
    g = torch.Generator().manual_seed(seed)
    return (scale * torch.randn(B, M, d, generator=g, dtype=F64)).to(dtype)


def close_2(actual, expected, rtol=1e-12, atol=1e-13):
    """``actual`` equals ``expected`` in shape and within the tolerances."""
    a = actual.detach().cpu().numpy() if torch.is_tensor(actual) else np.asarray(actual)
    e = expected.detach().cpu().numpy() if torch.is_tensor(expected) else np.asarray(expected)
    return a.shape == e.shape and np.allclose(a, e, rtol=rtol, atol=atol)


class _RefSDE(torch.nn.Module):
    """A hand-written torchsde SDE on flat states: ``b = 0.1t − 0.5y``, diagonal ``σ = 0.3y + 0.2`` (Itô),
    with the hand Stratonovich drift ``b − ½·σ·0.3`` for Stratonovich methods; or additive ``σ = 0.4 + 0.1t``
    as a ``(B, D, D)`` diagonal matrix."""

    def __init__(self, sde_type, noise_type):
        super().__init__()
        self.sde_type, self.noise_type = sde_type, noise_type

    def f(self, t, y):
        b = 0.1 * t - 0.5 * y
        if self.noise_type == "diagonal" and self.sde_type == "stratonovich":
            b = b - 0.5 * (0.3 * y + 0.2) * 0.3
        return b

    def g(self, t, y):
        if self.noise_type == "diagonal":
            return 0.3 * y + 0.2
        return torch.diag_embed(torch.full_like(y, 1.0) * (0.4 + 0.1 * t))


def test_torchsde_solver_names_orders_and_refusals():
    """``TorchSDE``: default ``"srk"``; ``"euler"`` is named ``torchsde_euler``; the weak order is the
    method's where a strong order is declared, else ``None``; ``repr``; an unknown method lists the allowed."""
    assert TorchSDE().method == "srk" and TorchSDE().name == "srk"
    assert TorchSDE("euler").name == "torchsde_euler" and repr(TorchSDE("heun")) == "TorchSDE('heun')"
    assert TorchSDE("srk").weak_orders == {"additive": 1.5, "diagonal": 1.5, "general": None}
    assert TorchSDE("euler").weak_orders == {"additive": 1.0, "diagonal": 1.0, "general": 1.0}
    assert TorchSDE("reversible_heun").strong_orders == {"additive": 1.0, "diagonal": 0.5, "general": None}
    assert TorchSDE("milstein").strong_order("diagonal") == 1.0
    assert (
        TORCHSDE_METHODS["log_ode"].levy_area == "davie" and TORCHSDE_METHODS["srk"].levy_area == "space-time"
    )
    assert {m: s.sde_type for m, s in TORCHSDE_METHODS.items()} == {
        "euler": "ito",
        "milstein": "ito",
        "srk": "ito",
        "midpoint": "stratonovich",
        "heun": "stratonovich",
        "euler_heun": "stratonovich",
        "reversible_heun": "stratonovich",
        "log_ode": "stratonovich",
    }
    with pytest.raises(
        ValueError,
        match=r"^unknown torchsde method 'rk4'; allowed: \['euler', 'euler_heun', 'heun', 'log_ode', "
        r"'midpoint', 'milstein', 'reversible_heun', 'srk'\]$",
    ):
        TorchSDE("rk4")


def test_grid_brownian_serves_grid_increments_and_their_areas():
    """``_GridBrownian``: ``bm(t_n, t_{n+1})`` is ``dW_n`` flattened to ``(B, M·m)``; ``return_U`` adds
    ``dt·(W/2 + H_n)``, ``return_A`` a zero; an interval that is not one grid step (or no ``tb``) is refused
    naming it; the properties and ``repr``."""
    dt = 0.25
    dW = torch.randn(3, 2, 3, 1, generator=torch.Generator().manual_seed(15), dtype=F64)
    H = torch.randn(3, 2, 3, 1, generator=torch.Generator().manual_seed(16), dtype=F64)
    bm = _GridBrownian(BrownianIncrements(dW, dt, H), 1.0, dt, (2, 3), F64, torch.device("cpu"), "space-time")
    assert torch.equal(bm(torch.tensor(1.5), torch.tensor(1.75)), dW[2].reshape(2, 3))
    W, U = bm(1.25, 1.5, return_U=True)
    assert torch.equal(W, dW[1].reshape(2, 3)) and close_2(U, dt * (0.5 * dW[1] + H[1]).reshape(2, 3))
    W, U, A = bm(1.0, 1.25, return_U=True, return_A=True)
    assert torch.equal(W, dW[0].reshape(2, 3)) and A.shape == () and float(A) == 0.0
    W, A = bm(1.0, 1.25, return_A=True)
    assert torch.equal(W, dW[0].reshape(2, 3)) and float(A) == 0.0
    assert bm(1.0, 1.0 + dt * (1 + 5e-4)).shape == (2, 3)  # within 1e-3·dt of a step
    with pytest.raises(
        RuntimeError,
        match=r"^meanfield's torchsde adapter serves increments over grid steps only, asked for \[1\.0, 1\.5\] "
        r"with dt=0\.25$",
    ):
        bm(1.0, 1.5)
    with pytest.raises(RuntimeError, match=r"asked for \[1\.0, None\] with dt=0\.25$"):
        bm(1.0)
    with pytest.raises(RuntimeError, match=r"grid steps only"):
        bm(1.0, 1.0 + dt * (1 + 2e-3))
    assert (bm.dtype, bm.device, bm.shape, bm.levy_area_approximation) == (
        F64,
        torch.device("cpu"),
        (2, 3),
        "space-time",
    )
    assert repr(bm) == "_GridBrownian(shape=(2, 3), dt=0.25)"


def test_system_as_sde_drift_conversion_and_refusals():
    """``_SystemAsSDE.f``: the Itô drift for Itô methods and for additive noise; ``b − ½σ∂σ/∂x`` (hand
    derivative of ``σ = 0.3x + 0.2``) for a Stratonovich method on diagonal noise; a drift of another shape or
    not a tensor is refused naming the state's shape; ``g`` expands a number to the flat state."""
    shape = torch.Size((2, 3, 1))
    x = cloud_2(2, 3, 1, seed=17)
    y = x.reshape(2, 3)
    diagonal = SDE(lambda t, x: t - x, lambda t, x: 0.3 * x + 0.2, noise="diagonal")
    xn = x.numpy().reshape(2, 3)
    assert close_2(_SystemAsSDE(diagonal, shape, "ito", "diagonal").f(torch.tensor(0.5), y), 0.5 - xn)
    strat = _SystemAsSDE(diagonal, shape, "stratonovich", "diagonal")
    assert strat.convert and close_2(strat.f(torch.tensor(0.5), y), 0.5 - xn - 0.5 * (0.3 * xn + 0.2) * 0.3)
    additive = SDE(lambda t, x: t - x, lambda t, x: 0.4, noise="additive")
    strat_add = _SystemAsSDE(additive, shape, "stratonovich", "additive")
    assert not strat_add.convert and close_2(strat_add.f(torch.tensor(0.5), y), 0.5 - xn)
    assert close_2(strat_add.g(torch.tensor(0.0), y), np.full((2, 3), 0.4))
    wrong = SDE(lambda t, x: x[..., :1, :], lambda t, x: 0.1, noise="additive")
    with pytest.raises(
        ValueError,
        match=r"^drift\(t, x\) must return a tensor of the state's shape \(2, 3, 1\), got \(2, 1, 1\)$",
    ):
        _SystemAsSDE(wrong, shape, "ito", "additive").f(torch.tensor(0.0), y)
    wide = SDE(lambda t, x: -x, lambda t, x: torch.ones(2, 3, 2, dtype=F64), noise="diagonal")
    with pytest.raises(
        ValueError, match=r"^diffusion\(t, x\) must return σ of shape \(2, 3, 1\), got \(2, 3, 2\)$"
    ):
        _SystemAsSDE(wide, shape, "ito", "diagonal").g(torch.tensor(0.0), y)
    row = SDE(lambda t, x: -x, lambda t, x: torch.full((3, 1), 0.5, dtype=F64), noise="diagonal")
    assert close_2(_SystemAsSDE(row, shape, "ito", "diagonal").g(torch.tensor(0.0), y), np.full((2, 3), 0.5))
    number = SDE(lambda t, x: 1.0, lambda t, x: 0.1, noise="additive")
    with pytest.raises(ValueError, match=r"got float$"):
        _SystemAsSDE(number, shape, "ito", "additive").f(torch.tensor(0.0), y)


@pytest.mark.parametrize(
    "method, noise",
    [(m, "diagonal") for m in TORCHSDE_METHODS]
    + [(m, "additive") for m in ("euler", "milstein", "srk", "heun", "midpoint", "reversible_heun")],
)
def test_every_method_equals_torchsde_sdeint_on_the_same_brownian_path(method, noise):
    """Four steps of ``dt = 0.25`` from ``t0 = 0.5``: ``simulate`` with ``solver=method`` driven by the
    increments and space-time areas of a ``torchsde.BrownianInterval`` equals ``torchsde.sdeint`` with the
    same interval on the hand-written SDE, at every step (``H = U/dt − W/2``). Negative control: the run on
    the negated increments differs."""
    t0, dt, n, B, M = 0.5, 0.25, 4, 2, 3
    sde_type = TORCHSDE_METHODS[method].sde_type
    if noise == "diagonal":
        system = SDE(lambda t, x: 0.1 * t - 0.5 * x, lambda t, x: 0.3 * x + 0.2, noise="diagonal")
    else:
        system = SDE(lambda t, x: 0.1 * t - 0.5 * x, lambda t, x: 0.4 + 0.1 * t, noise="additive")
    x0 = cloud_2(B, M, 1, seed=18)
    bm = torchsde.BrownianInterval(
        t0, t0 + n * dt, size=(B, M), dtype=F64, levy_area_approximation="davie", entropy=19
    )
    ts = torch.tensor([t0 + k * dt for k in range(n + 1)], dtype=F64)
    dW, H = [], []
    for k in range(n):
        W, U = bm(ts[k], ts[k + 1], return_U=True)
        dW.append(W.reshape(B, M, 1))
        H.append((U / dt - 0.5 * W).reshape(B, M, 1))
    dW, H = torch.stack(dW), torch.stack(H)
    ref = torchsde.sdeint(_RefSDE(sde_type, noise), x0.reshape(B, M), ts, bm=bm, method=method, dt=dt)
    traj = simulate(
        system,
        x0,
        t0=t0,
        t1=t0 + n * dt,
        dt=dt,
        solver=TorchSDE(method).name,
        brownian=BrownianIncrements(dW, dt, H),
        save_every=1,
    )
    assert traj.solver == TorchSDE(method).name
    assert close_2(traj.states.reshape(n + 1, B, M), ref, rtol=1e-11, atol=1e-12)
    flipped = simulate(
        system,
        x0,
        t0=t0,
        t1=t0 + n * dt,
        dt=dt,
        solver=TorchSDE(method).name,
        brownian=BrownianIncrements(-dW, dt, -H),
    )
    assert not close_2(flipped.final.reshape(B, M), ref[-1], rtol=1e-6, atol=1e-8)
