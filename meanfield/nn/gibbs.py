r"""The free energy of a network whose particle layers are trained by [`Langevin`][meanfield.optim.Langevin].

A particle layer computes ``1/M Σ_i φ_{θ_i}(X)``, so the loss is a functional ``L(ρ)`` of the particle law
``ρ = 1/M Σ_i δ_{θ_i}``. One Langevin step with an SGD drift on a layer's group (``n_particles = M``,
weight decay ``λ``, temperature ``β`` in the mean-field convention) is Euler–Maruyama for the Wasserstein
gradient flow of

$$F(\rho) = L(\rho) + \sum_\ell \Big(\frac{\lambda_\ell}{2}\,\mathbb{E}_{\rho_\ell}|\theta|^2
          - \beta_\ell\, H(\rho_\ell)\Big),$$

one term per particle layer ``ℓ`` (Mei–Montanari–Nguyen 2018; Chizat 2022; Nitanda–Wu–Suzuki 2022): the
gradient ``M·∇_{θ_i} L = ∇ δL/δρ(θ_i)`` plus ``λθ_i`` is the drift, ``sqrt(2β·lr)`` the noise. A group
without the factor ``M`` (``mean_field_scaling=False``: drift ``∇_{θ_i} L + λ_g θ_i``, noise ``sqrt(2β_g·lr)``)
runs the same chain as ``β = M·β_g``, ``λ = M·λ_g`` with it (at ``lr/M``), and those are its layer's ``β`` and
``λ`` in ``F``.

**The particles** of a layer are its rows: particle ``i`` is the concatenation of row ``i`` of every stacked
parameter named in ``particle_parameter_names`` (``particle_features``), e.g.
``θ_i = (a_i, w_i, b_i) ∈ R^{k + d_in + 1}`` for ``FeatureParticles``; ``H(ρ_ℓ)`` is the
differential entropy of those M points in ``R^D`` (``meanfield.metrics.entropy``). The k-NN estimators'
bias grows with ``D`` (see their docs): the number is meaningful for small ``D`` (a teacher–student network
on a few inputs), a trend at best for wide inputs. Particles constrained to a sphere (``sphere=True``) have
no density on ``R^D`` and are refused. With an Adam drift the same ``F`` is the free energy of the Gibbs law,
which the preconditioned chain targets only while its preconditioner barely moves (docs/optim.md, "The
temperature contract"), and need not decrease step by step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import nn

from meanfield._display import fields_html, html_block, number
from meanfield.metrics.information import entropy as estimate_entropy
from meanfield.nn.particles import ParticleLayer

if TYPE_CHECKING:
    from meanfield.optim import Langevin

__all__ = ["free_energy", "NetworkFreeEnergy", "LayerEntropy"]


@dataclass(frozen=True)
class LayerEntropy:
    """One particle layer's terms of the free energy.

    Attributes:
        name: the layer's name in the model (``""`` for the model itself).
        M: its particles; ``D``: the dimension of one particle.
        beta: its mean-field temperature ``β`` (0 for a layer without noise; ``M`` times its group's ``β`` for a
            group with ``temperature_convention="loss"``, or in the mean-field convention without the scaling).
        weight_decay: its ``λ`` in ``F`` (``M`` times its group's for a group without the mean-field scaling);
            ``penalty`` is ``λ/2 · 1/M Σ_i |θ_i|²``.
        entropy: the estimate of ``H(ρ)``, with ``entropy_se`` and the estimator's ``method``.
    """

    name: str
    M: int
    D: int
    beta: float
    weight_decay: float
    penalty: float
    entropy: float
    entropy_se: float
    method: str


@dataclass(frozen=True)
class NetworkFreeEnergy:
    """``F = loss + penalty − Σ_ℓ β_ℓ·H_ℓ`` of a network (module docstring).

    Attributes:
        value: ``F``.
        loss: ``L(ρ)`` as given.
        penalty: ``Σ_ℓ λ_ℓ/2 · E_{ρ_ℓ}|θ|²`` (0 without weight decay).
        entropy_term: ``Σ_ℓ β_ℓ·H_ℓ`` (``F = loss + penalty − entropy_term``).
        se: ``sqrt(Σ_ℓ β_ℓ²·SE(H_ℓ)²)``: the entropy estimates' error (the loss is taken as exact).
        layers: one [`LayerEntropy`][meanfield.nn.gibbs.LayerEntropy] per particle layer, in model order.
    """

    value: float
    loss: float
    penalty: float
    entropy_term: float
    se: float
    layers: tuple[LayerEntropy, ...]

    def _fields(self) -> list[tuple[str, str]]:
        rows = [("F", f"{number(self.value)} ± {number(self.se, 2)}"), ("loss", number(self.loss)),
                ("penalty", number(self.penalty)), ("Σ β·H", number(self.entropy_term))]  # fmt: skip
        for t in self.layers:
            rows.append((f"layer {t.name or 'model'}", f"M = {t.M}, D = {t.D}, β = {number(t.beta)}, "
                         f"H = {number(t.entropy)} ± {number(t.entropy_se, 2)} ({t.method})"))  # fmt: skip
        return rows

    def __repr__(self) -> str:
        return "NetworkFreeEnergy: " + "; ".join(f"{name} {value}" for name, value in self._fields())

    def _repr_html_(self) -> str:
        return html_block("NetworkFreeEnergy", fields_html(self._fields()))


def _group_of(optimizer: torch.optim.Optimizer, p: torch.Tensor) -> tuple[int, dict] | None:
    for gi, group in enumerate(optimizer.param_groups):
        if any(q is p for q in group["params"]):
            return gi, group
    return None


def _temperature(optimizer, layer: ParticleLayer, name: str) -> tuple[float, float]:
    r"""``(β, λ)`` of ``F`` for ``layer``'s ``M`` particles, from the param group that holds them.

    The group's step is $\theta_i \leftarrow \theta_i - \mathrm{lr}(s\,\nabla_{\theta_i} L + \lambda_g\theta_i)
    + \sqrt{2\beta_g\,\mathrm{lr}}\,\xi_i$ with $s$ its gradient factor (``M`` with the mean-field scaling, 1 without)
    and $\beta_g$ its noise's temperature ($s\cdot\beta_s$ for ``temperature_convention="loss"``). Its
    law is $\propto \exp(-(s L + \tfrac{\lambda_g}{2}\sum_i|\theta_i|^2)/\beta_g)
    = \exp(-M\,(L + \tfrac{\lambda}{2}\mathbb{E}_\rho|\theta|^2)/\beta)$ with $\beta = \beta_g M/s$ and
    $\lambda = \lambda_g M/s$: the group's own $(\beta_g, \lambda_g)$ with the scaling, $M$ times them without it.
    """
    from meanfield.optim.groups import beta_value, mean_field_beta, scale

    found = _group_of(optimizer, getattr(layer, layer.particle_parameter_names[0]))
    if found is None:
        raise ValueError(
            f"the optimizer does not hold the particles of layer {name or type(layer).__name__!r}: build it "
            "from this model (Langevin(param_groups_for(model), ...))"
        )
    gi, group = found
    M, s = layer.n_particles, scale(group)
    lam = float(group["weight_decay"]) * M / s
    if not group["noise"]:
        return 0.0, lam
    return mean_field_beta(group, beta_value(group, gi), M), lam


def free_energy(
    model: nn.Module,
    loss: float | torch.Tensor,
    beta: float | Langevin,
    *,
    entropy: str = "auto",
    k: int | None = None,
) -> NetworkFreeEnergy:
    r"""``F = L(ρ) + Σ_ℓ (λ_ℓ/2·E|θ|² − β_ℓ·H(ρ_ℓ))`` over the particle layers of ``model`` (module docstring).

    Args:
        model: a module with ``ParticleLayer`` submodules (or one itself).
        loss: ``L(ρ)``, a number or a one-element tensor: the loss of the whole network at its particles (a
            full-batch or large-batch loss: a minibatch loss carries its sampling noise into ``F``).
        beta: the temperature: a number ``β ≥ 0`` in the mean-field convention (every layer, no weight
            decay), or the [`Langevin`][meanfield.optim.Langevin] optimizer training the model: each layer then
            takes its group's ``β_t`` at the step about to be taken and its weight decay, as the chain's
            mean-field values: ``M·β_s`` for ``temperature_convention="loss"`` (with or without the scaling),
            ``M·β`` and ``M·λ`` for a mean-field group without the scaling, and ``β = 0`` for a group without noise.
        entropy: the method of ``meanfield.metrics.entropy``.
        k: the neighbour order of the k-NN estimators (``None``: their default).

    Raises:
        TypeError, ValueError: no particle layer, a non-finite loss or β, particles on a sphere, an optimizer
            that does not hold the model's particles.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module with particle layers, got {type(model).__name__}")
    try:
        loss = float(loss.detach() if torch.is_tensor(loss) else loss)
    except (TypeError, ValueError, RuntimeError):
        raise TypeError(
            f"loss must be a number or a one-element tensor (L at the particles), got {loss!r}"
        ) from None
    if not math.isfinite(loss):
        raise ValueError(f"loss must be finite, got {loss}")
    if isinstance(beta, torch.optim.Optimizer):
        optimizer = beta
    else:
        optimizer = None
        try:
            beta = float(beta)
        except (TypeError, ValueError, RuntimeError):
            raise TypeError(
                f"beta must be a number ≥ 0 or the Langevin optimizer training the model, got {type(beta).__name__}"
            ) from None
        if not (math.isfinite(beta) and beta >= 0):
            raise ValueError(f"beta must be a finite number ≥ 0, got {beta}")
    layers = [(name, m) for name, m in model.named_modules() if isinstance(m, ParticleLayer)]
    if not layers:
        raise ValueError(
            f"{type(model).__name__} has no particle layer (meanfield.nn.ParticleLayer, e.g. FeatureParticles)"
        )
    terms = []
    for name, layer in layers:
        if getattr(layer, "particle_shard", None) is not None:
            raise ValueError(
                f"layer {name or 'model'!r} holds only this process's rows of its particles (meanfield.nn.sharded): "
                "their entropy needs all of them; gather the layer on one process first"
            )
        if getattr(layer, "sphere", False):
            raise ValueError(
                f"layer {name or 'model'!r} keeps its particles on a sphere (sphere=True): they have no density "
                "on R^D, so their entropy (and F) is not defined there"
            )
        theta = layer.particle_features().to(torch.float64)  # (M, D)
        M, D = theta.shape
        b, lam = (beta, 0.0) if optimizer is None else _temperature(optimizer, layer, name)
        if M < 2:
            raise ValueError(f"layer {name or 'model'!r} has M = {M} particle: the entropy needs M ≥ 2")
        h = estimate_entropy(theta, method=entropy, **({} if k is None else {"k": k}))
        penalty = 0.5 * lam * float(theta.square().sum(1).mean())
        terms.append(LayerEntropy(name, M, D, b, lam, penalty, float(h.value), float(h.se), h.method))
    penalty = sum(t.penalty for t in terms)
    entropy_term = sum(t.beta * t.entropy for t in terms)
    se = math.sqrt(sum((t.beta * t.entropy_se) ** 2 for t in terms))
    return NetworkFreeEnergy(loss + penalty - entropy_term, loss, penalty, entropy_term, se, tuple(terms))
