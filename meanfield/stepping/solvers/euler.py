"""The native Euler–Maruyama scheme."""

from __future__ import annotations

import torch

from ...drift.systems import ParticleSystem
from ..brownian import NoiseSource
from .base import Solver, Stepper

__all__ = ["EulerMaruyama"]


class EulerMaruyama(Solver):
    r"""Euler–Maruyama: $x_{n+1} = x_n + b(t_n, x_n)\cdot dt + \sigma(t_n, x_n)\cdot\sqrt{dt}\cdot \xi_n$.

    Strong order 1 under additive noise (the Milstein correction vanishes), ½ otherwise; weak order 1.
    One step costs one drift evaluation, one noise draw (scaled as it is drawn, into a reused buffer) and
    two passes over the state, or one for the affine drifts of [`MeanFieldLangevin`][meanfield.drift.systems.MeanFieldLangevin] (see
    [`euler_update_`][meanfield.drift.systems.ParticleSystem.euler_update_]). With ``noise="rademacher"`` it keeps weak order 1.
    """

    name = "euler"
    strong_orders = {"additive": 1.0, "diagonal": 0.5, "general": 0.5}
    weak_orders = {"additive": 1.0, "diagonal": 1.0, "general": 1.0}
    needs_gaussian = False

    def stepper(self, system: ParticleSystem, source: NoiseSource, t0: float, dt: float) -> Stepper:
        return _EulerStepper(system, source, t0, dt)


class _EulerStepper(Stepper):
    def __init__(self, system: ParticleSystem, source: NoiseSource, t0: float, dt: float) -> None:
        self.system, self.source, self.t0, self.dt = system, source, t0, dt
        self.sqrt_dt = dt**0.5

    def _next_scale(self, t_next: float, x: torch.Tensor, sigma: object) -> float:
        r"""The scale the next step will ask the noise for, when it can be known now: $\sqrt{dt}$ for a
        tensor σ, ``σ(t_next)·sqrt(dt)`` for additive noise (σ depends on t only). Otherwise 1: the
        prefetched draw is then multiplied by the scale when read (the same numbers)."""
        if torch.is_tensor(sigma):
            return self.sqrt_dt
        if self.system.noise == "additive":
            sigma_next = self.system.diffusion(t_next, x)
            if not torch.is_tensor(sigma_next) and sigma_next != 0:
                return sigma_next * self.sqrt_dt
        return 1.0

    def run(self, x: torch.Tensor, n: int, k: int) -> torch.Tensor:
        system, source, t0, dt, sqrt_dt = self.system, self.source, self.t0, self.dt, self.sqrt_dt
        general, projection, update = system.noise == "general", system.projection, system.euler_update_
        last = n + k - 1 if source.prefetches else -1  # prefetch only within this segment
        for step in range(n, n + k):
            t = t0 + step * dt
            sigma = system.diffusion(t, x)
            if general:  # σ: (B, M, d, m), dW: (B, M, m)
                if not torch.is_tensor(sigma) or sigma.shape != (*x.shape, source.shape[-1]):
                    _bad_sigma(sigma, f"{(*x.shape, source.shape[-1])} (noise='general')")
                noise = torch.einsum("bmdk,bmk->bmd", sigma, source.increment(step, sqrt_dt))
            elif torch.is_tensor(sigma):  # σ: (B, M, d) or broadcastable
                try:
                    noise = sigma * source.increment(step, sqrt_dt)
                except RuntimeError:  # σ does not broadcast against (B, M, d) at all
                    noise = None
                if noise is None or noise.shape != x.shape:
                    _bad_sigma(sigma, f"{tuple(x.shape)} or one that broadcasts to it")
            else:  # a number: the scaling is folded into the draw
                noise = source.increment(step, sigma * sqrt_dt)  # (B, M, d)
            if step < last and source.will_prefetch(step + 1):  # drawn in the background during this update
                source.prefetch(step + 1, self._next_scale(t0 + (step + 1) * dt, x, sigma))
            x = update(t, x, dt, noise)
            if projection is not None:
                x = projection.project_(x)
        return x


def _bad_sigma(sigma: object, allowed: str) -> None:
    got = tuple(sigma.shape) if torch.is_tensor(sigma) else type(sigma).__name__
    raise ValueError(f"diffusion(t, x) must return σ of shape {allowed}, got {got}")
