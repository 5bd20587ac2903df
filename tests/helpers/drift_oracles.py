"""The independent drift oracle: an energy written with explicit pair sums over all ``(i, j)``, its autograd drift
``b = −∇_x (M · E)``, and the systems it checks."""

from __future__ import annotations

import torch

from meanfield import MeanFieldLangevin
from meanfield.drift.potentials import (
    Alignment,
    DoubleWell,
    GaussianInteraction,
    Quadratic,
    QuadraticInteraction,
    RadialInteraction,
)


def _V(name, params):
    if name == "quadratic":
        (a,) = params
        return lambda x: 0.5 * a * (x * x).sum(-1)
    if name == "double_well":
        return lambda x: (x**4 / 4 - x**2 / 2).sum(-1)
    raise KeyError(name)


def _W(name, params):
    """W(x_i, x_j) on pairs: x_i (B, M, 1, d), x_j (B, 1, M, d) -> (B, M, M)."""
    if name == "quadratic":
        (k,) = params
        return lambda xi, xj: 0.5 * k * ((xi - xj) ** 2).sum(-1)
    if name == "alignment":
        (kappa,) = params
        return lambda xi, xj: -kappa * (xi * xj).sum(-1)
    if name == "gaussian":
        c, length = params
        return lambda xi, xj: c * torch.exp(-((xi - xj) ** 2).sum(-1) / (2 * length**2))
    if name == "soft_coulomb":
        return lambda xi, xj: 1.0 / (1.0 + ((xi - xj) ** 2).sum(-1))
    raise KeyError(name)


def total_energy(V, W, x):
    """``Σ_i V(x_i) + 1/(2M) Σ_{i,j} W(x_i, x_j)`` per replica, (B,): M times the free energy per particle."""
    M = x.shape[1]
    e = V(x).sum(-1)  # (B,)
    if W is not None:
        e = e + W(x[:, :, None, :], x[:, None, :, :]).sum((-1, -2)) / (2 * M)
    return e


def autograd_drift(V, W, x):
    """``−∇_x (M · E)(x)`` by autograd: (B, M, d)."""
    y = x.detach().clone().requires_grad_(True)
    (g,) = torch.autograd.grad(total_energy(V, W, y).sum(), y)
    return -g


CONFINEMENTS = {
    "Quadratic(1.3)": (Quadratic(1.3), ("quadratic", (1.3,))),
    "Quadratic(0)": (Quadratic(0.0), ("quadratic", (0.0,))),
    "DoubleWell": (DoubleWell(), ("double_well", ())),
}


INTERACTIONS = {
    "none": (None, None),
    "QuadraticInteraction(0.7)": (QuadraticInteraction(0.7), ("quadratic", (0.7,))),
    "QuadraticInteraction(-0.4)": (QuadraticInteraction(-0.4), ("quadratic", (-0.4,))),
    "Alignment(0.9)": (Alignment(0.9), ("alignment", (0.9,))),
    "GaussianInteraction(0.8,0.6)": (GaussianInteraction(0.8, 0.6), ("gaussian", (0.8, 0.6))),
    "GaussianInteraction chunked": (
        GaussianInteraction(-1.1, 1.5, max_elements=20),
        ("gaussian", (-1.1, 1.5)),
    ),
    "RadialInteraction soft Coulomb": (
        RadialInteraction(lambda r2: 1 / (1 + r2), lambda r2: -1 / (1 + r2) ** 2, max_elements=7),
        ("soft_coulomb", ()),
    ),
}


def system_and_oracle(c, i, beta=0.3, projection=None):
    conf, (vname, vpar) = CONFINEMENTS[c]
    inter, wspec = INTERACTIONS[i]
    V = _V(vname, vpar)
    W = None if wspec is None else _W(*wspec)
    return MeanFieldLangevin(conf, inter, beta=beta, projection=projection), V, W
