r"""Every fixed-step torchsde method, run on the same particle system and the same noise.

torchsde integrates states of shape ``(batch, channels)``; the adapter views ``(B, M, d)`` as
$(B, M\cdot d)$ and drives torchsde's own step functions on the exact grid $t_n = t_0 + n\cdot dt$ with a
Brownian motion that reads the caller's noise source (``torchsde.BrownianInterval``, its default, costs
about 10 ms a step here and cannot share increments with the native solver).

Stratonovich methods (midpoint, heun, euler_heun, reversible_heun, log_ode) solve the Stratonovich SDE;
for an Itô system with diagonal noise the adapter hands them the converted drift
$b - \tfrac12 \sigma \partial \sigma/\partial x$ (computed by autograd), so every method approximates the same Itô solution. For
additive noise the two calculi coincide.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torchsde._brownian import BaseBrownian
from torchsde._core import base_sde, methods

from ...drift.systems import ParticleSystem
from ..brownian import NoiseSource
from .base import Solver, Stepper

__all__ = ["TorchSDE", "TORCHSDE_METHODS"]


@dataclass(frozen=True)
class _Method:
    sde_type: str
    strong: dict[str, float | None]
    weak: float
    levy_area: str = "none"


_ITO_EULER = {"additive": 1.0, "diagonal": 0.5, "general": 0.5}
_STRAT = {"additive": 1.0, "diagonal": 1.0, "general": None}

# Orders as torchsde declares them (torchsde/_core/methods/*.py), per noise type of the Itô system.
TORCHSDE_METHODS: dict[str, _Method] = {
    "euler": _Method("ito", _ITO_EULER, 1.0),
    "milstein": _Method("ito", {"additive": 1.0, "diagonal": 1.0, "general": None}, 1.0),
    "srk": _Method("ito", {"additive": 1.5, "diagonal": 1.5, "general": None}, 1.5, "space-time"),
    "midpoint": _Method("stratonovich", _STRAT, 1.0),
    "heun": _Method("stratonovich", _STRAT, 1.0),
    "euler_heun": _Method("stratonovich", _STRAT, 1.0),
    "reversible_heun": _Method("stratonovich", {"additive": 1.0, "diagonal": 0.5, "general": None}, 1.0),
    "log_ode": _Method("stratonovich", _STRAT, 1.0, "davie"),
}


class TorchSDE(Solver):
    """A torchsde method (``"euler"``, ``"milstein"``, ``"srk"``, ``"midpoint"``, ``"heun"``,
    ``"euler_heun"``, ``"reversible_heun"``, ``"log_ode"``) as a meanfield solver.

    Args:
        method: the torchsde method name.

    Raises:
        ValueError: for an unknown method; at simulation time, for a system whose noise type the method
            cannot handle (e.g. ``"srk"`` with general noise).
    """

    def __init__(self, method: str = "srk") -> None:
        if method not in TORCHSDE_METHODS:
            raise ValueError(f"unknown torchsde method {method!r}; allowed: {sorted(TORCHSDE_METHODS)}")
        self.method = method
        spec = TORCHSDE_METHODS[method]
        self.name = method if method != "euler" else "torchsde_euler"
        self.strong_orders = spec.strong
        self.weak_orders = {k: (spec.weak if v is not None else None) for k, v in spec.strong.items()}

    def stepper(self, system: ParticleSystem, source: NoiseSource, t0: float, dt: float) -> Stepper:
        return _TorchSDEStepper(self.method, system, source, t0, dt)

    def __repr__(self) -> str:
        return f"TorchSDE({self.method!r})"


class _SystemAsSDE:
    r"""A particle system seen by torchsde: ``f``, ``g``, ``g_prod`` on flat states $(B, M\cdot d)$."""

    def __init__(self, system: ParticleSystem, shape: torch.Size, sde_type: str, noise_type: str) -> None:
        self.system, self.shape = system, shape
        self.sde_type, self.noise_type = sde_type, noise_type
        self.convert = sde_type == "stratonovich" and system.noise == "diagonal"

    def f(self, t: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        t, x = float(t), y.view(self.shape)  # (B, M, d)
        b = self.system.drift(t, x)  # (B, M, d)
        if not torch.is_tensor(b) or b.shape != x.shape:
            raise ValueError(
                f"drift(t, x) must return a tensor of the state's shape {tuple(x.shape)}, "
                f"got {tuple(b.shape) if torch.is_tensor(b) else type(b).__name__}"
            )
        if self.convert:  # Itô -> Stratonovich: b − ½ σ ∂σ/∂x, coordinate-wise for diagonal noise
            with torch.enable_grad():
                xg = x.detach().requires_grad_(True)
                sigma = self.system.diffusion(t, xg)  # (B, M, d)
                depends = torch.is_tensor(sigma) and sigma.requires_grad  # σ(x) with no link to x: ∂σ/∂x = 0
                (dsigma,) = torch.autograd.grad(sigma.sum(), xg, allow_unused=True) if depends else (None,)
            if dsigma is not None:
                b = b - 0.5 * sigma.detach() * dsigma
        return b.reshape(y.shape)

    def _sigma(self, t: torch.Tensor, y: torch.Tensor):
        r"""$\sigma(t, x)$, checked to have a shape the noise type allows."""
        sigma = self.system.diffusion(float(t), y.view(self.shape))
        if not torch.is_tensor(sigma):
            return sigma
        if self.system.noise == "general":
            allowed = (*self.shape, self.system.brownian_dim)
            ok = sigma.shape == allowed
        else:
            allowed = tuple(self.shape)
            try:
                ok = torch.broadcast_shapes(sigma.shape, self.shape) == self.shape
            except RuntimeError:
                ok = False
        if not ok:
            raise ValueError(f"diffusion(t, x) must return σ of shape {allowed}, got {tuple(sigma.shape)}")
        return sigma

    def g(self, t: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        sigma = self._sigma(t, y)
        return torch.as_tensor(sigma, dtype=y.dtype, device=y.device).expand(self.shape).reshape(y.shape)

    def g_prod(self, t: torch.Tensor, y: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        sigma = self._sigma(t, y)
        if self.system.noise == "general":
            B, M, _ = self.shape
            return torch.einsum("bmdk,bmk->bmd", sigma, v.view(B, M, -1)).reshape(y.shape)
        if torch.is_tensor(sigma):
            return (sigma * v.view(self.shape)).reshape(y.shape)
        return float(sigma) * v


class _GridBrownian(BaseBrownian):
    """torchsde's Brownian-motion interface over a [`NoiseSource`][meanfield.stepping.brownian.NoiseSource], for steps on the grid only."""

    def __init__(
        self,
        source: NoiseSource,
        t0: float,
        dt: float,
        batch_shape: tuple[int, int],
        dtype: torch.dtype,
        device: torch.device,
        levy_area: str,
    ) -> None:
        self.source, self.t0, self.dt = source, t0, dt
        self._shape, self._dtype, self._device, self._levy = batch_shape, dtype, device, levy_area

    def __call__(self, ta, tb=None, return_U=False, return_A=False):
        n = round((float(ta) - self.t0) / self.dt)
        if tb is None or abs(float(tb) - float(ta) - self.dt) > 1e-3 * self.dt:
            raise RuntimeError(
                f"meanfield's torchsde adapter serves increments over grid steps only, "
                f"asked for [{ta}, {tb}] with dt={self.dt}"
            )
        W = self.source.dW(n).reshape(self._shape)  # (B, M·m)
        out = [W]
        if return_U:  # torchsde's U = ∫(W_s − W_ta) ds = dt·(W/2 + H)
            H = self.source.space_time_area(n).reshape(self._shape)
            out.append(self.dt * (0.5 * W + H))
        if return_A:  # Lévy area: used by torchsde only for general noise, which log_ode refuses here
            out.append(torch.zeros((), dtype=self._dtype, device=self._device))
        return out[0] if len(out) == 1 else tuple(out)

    def __repr__(self) -> str:
        return f"_GridBrownian(shape={self._shape}, dt={self.dt})"

    @property
    def dtype(self):
        return self._dtype

    @property
    def device(self):
        return self._device

    @property
    def shape(self):
        return self._shape

    @property
    def levy_area_approximation(self):
        return self._levy


class _TorchSDEStepper(Stepper):
    def __init__(
        self, method: str, system: ParticleSystem, source: NoiseSource, t0: float, dt: float
    ) -> None:
        self.method, self.system, self.source = method, system, source
        self.t0, self.dt = t0, dt
        self._solver = None
        self._extra = None

    def _build(self, x: torch.Tensor) -> None:
        spec = TORCHSDE_METHODS[self.method]
        noise = self.system.noise
        # torchsde's "additive" type takes g as a (batch, state, noise) matrix in some methods: present the
        # (x-independent) σ as diagonal there, and as additive where only g_prod is used.
        if noise == "additive" and self.method != "reversible_heun":
            noise_type = "additive"
        else:
            noise_type = {"additive": "diagonal", "diagonal": "diagonal", "general": "general"}[noise]
        sde = _SystemAsSDE(self.system, x.shape, spec.sde_type, noise_type)
        B = x.shape[0]
        bm = _GridBrownian(
            self.source,
            self.t0,
            self.dt,
            (B, self.source.shape[1] * self.source.shape[2]),
            x.dtype,
            x.device,
            spec.levy_area,
        )
        solver_cls = methods.select(self.method, spec.sde_type)
        self._solver = solver_cls(
            sde=base_sde.ForwardSDE(sde),
            bm=bm,
            dt=self.dt,
            adaptive=False,
            rtol=1e-5,
            atol=1e-4,
            dt_min=1e-5,
            options={},
        )

    def run(self, x: torch.Tensor, n: int, k: int) -> torch.Tensor:
        y = x.reshape(x.shape[0], -1)  # (B, M·d)
        if self._solver is None:
            self._build(x)
            t_start = torch.tensor(self.t0 + n * self.dt, dtype=x.dtype)
            self._extra = self._solver.init_extra_solver_state(t_start, y)
        for step in range(n, n + k):
            ta = torch.tensor(self.t0 + step * self.dt, dtype=x.dtype)
            tb = torch.tensor(self.t0 + (step + 1) * self.dt, dtype=x.dtype)
            y, self._extra = self._solver.step(ta, tb, y, self._extra)
            if self.system.projection is not None:
                y = self.system.projection.project_(y.reshape(x.shape)).reshape(y.shape)
        return y.reshape(x.shape)
