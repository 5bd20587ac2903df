r"""Brownian increments on a fixed grid $t_n = t_0 + n\cdot dt$: drawn from a generator, or pre-drawn.

Every solver reads its noise through one of these sources, step by step:

- [`GaussianNoise`][meanfield.stepping.brownian.GaussianNoise] draws $\xi_n \sim N(0, I)$ from the caller's ``torch.Generator`` (into one reused
  buffer, already scaled), so $dW_n = \sqrt{dt}\cdot \xi_n$. Same seed, same path, whichever solver consumes it.
- [`RademacherNoise`][meanfield.stepping.brownian.RademacherNoise] draws $\xi_n \in \{-1, +1\}$ with probability ½ each: the same mean and covariance as
  a Gaussian, so Euler–Maruyama keeps **weak order 1**, but its paths are not Brownian (no strong order,
  no exact one-step laws). It is for expectations only.
- [`BrownianIncrements`][meanfield.stepping.brownian.BrownianIncrements] holds pre-drawn increments ``dW`` of shape ``(N, *noise_shape)`` (and
  optionally the space-time Lévy areas ``H``); [`BrownianIncrements.coarsen`][meanfield.stepping.brownian.BrownianIncrements.coarsen] sums them onto a grid
  ``k`` times coarser, which is how strong-order tests share one Brownian path over nested step sizes.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod

import torch

from .. import _background
from .._checks import check_int, check_positive
from .._display import number
from ..seeds import resolve_generator, warn_if_global_seed

__all__ = ["NoiseSource", "GaussianNoise", "RademacherNoise", "BrownianIncrements"]


class NoiseSource(ABC):
    r"""Increments of the driving noise on the grid $t_n = t_0 + n\cdot dt$.

    ``increment(n, scale)`` is $\mathrm{scale}\cdot \xi_n$ with $\xi_n = dW_n / \sqrt{dt}$ the normalised increment (so
    $\mathrm{increment}(n, \sqrt{dt}) = dW_n$); ``space_time_area(n)`` is
    $H_n = 1/dt \int (W_s - W_{t_n} - (s - t_n)/dt \cdot dW_n) ds$ over the step, ``N(0, dt/12)`` and independent
    of $dW_n$ (only higher-order solvers ask for it).
    """

    gaussian: bool = True

    def __init__(self, shape: tuple[int, ...], dt: float) -> None:
        self.shape, self.dt, self.sqrt_dt = tuple(shape), dt, math.sqrt(dt)

    @abstractmethod
    def increment(self, n: int, scale: float = 1.0) -> torch.Tensor:
        r"""$\mathrm{scale}\cdot \xi_n$, shape ``noise_shape``. The tensor may be reused by the next call: consume it at once."""

    def dW(self, n: int) -> torch.Tensor:
        r"""$dW_n = \sqrt{dt}\cdot \xi_n$."""
        return self.increment(n, self.sqrt_dt)

    @property
    def prefetches(self) -> bool:
        """Whether [`prefetch`][meanfield.stepping.brownian.NoiseSource.prefetch] can do anything in this run (so a stepper can skip preparing hints)."""
        return False

    def will_prefetch(self, n: int) -> bool:
        """Whether [`prefetch`][meanfield.stepping.brownian.NoiseSource.prefetch] ``(n)`` would start a draw now."""
        return False

    def prefetch(self, n: int, scale: float = 1.0) -> None:
        """Hint: step ``n`` is asked for next, as ``increment(n, scale)``; a source may start drawing it now.

        The increments are the same with or without the hint. The default does nothing.
        """
        return None

    def settle(self) -> None:
        """Finish any draw started by [`prefetch`][meanfield.stepping.brownian.NoiseSource.prefetch] (after which nothing runs in the background)."""
        return None

    def space_time_area(self, n: int) -> torch.Tensor:
        raise ValueError(
            f"{type(self).__name__} has no space-time Lévy area; use Gaussian noise from a generator or "
            "BrownianIncrements.sample(..., levy_area=True)"
        )


class _SequentialNoise(NoiseSource):
    """Draws step ``n`` when first asked, in order ``n = 0, 1, 2, …``, already scaled (one pass over the
    buffer); asking again for step ``n`` returns the same increment.

    [`prefetch`][meanfield.stepping.brownian._SequentialNoise.prefetch] (``n`` the step after the current one) draws step ``n`` into a second buffer in the
    background thread of [`meanfield._background`][meanfield._background] when the buffer is on the CPU and holds at least
    ``OVERLAP_MIN`` numbers (and torch may use two threads or more), so that the caller's update of step
    $n - 1$ runs while step ``n`` is drawn. The generator is read in the same order, so the increments
    are the same, bit for bit:

    - a prefetch made with the scale that ``increment(n, scale)`` then asks for is used as drawn; one made
      with scale 1 (when the caller cannot know the scale) is multiplied by it, which for buffers of 16 or
      more numbers is what ``normal_(0, scale)`` gives (any other mismatch is rescaled, equal to rounding);
    - the caller's update must not draw from the same generator while a prefetch runs. Each draw made in
      the caller's thread (the first steps, and the first step after every gap in the prefetching) checks
      that nothing else has drawn from the generator since the previous draw; if something has, this
      source stops prefetching for good. A caller that draws from it only now and then is not detected:
      give it its own generator.
    """

    def __init__(
        self, shape: tuple[int, ...], dt: float, generator: torch.Generator, dtype: torch.dtype, device
    ) -> None:
        super().__init__(shape, dt)
        self.generator = generator
        self._buffer = torch.empty(self.shape, dtype=dtype, device=device)  # (*noise_shape) = scale·ξ_n
        self._spare: torch.Tensor | None = None  # (*noise_shape) the buffer a prefetch draws into
        self._pending: tuple[int, float, _background.Pending] | None = None  # (step, scale, the draw)
        self._scale, self._H, self._n = 1.0, None, -1
        self._state_after: torch.Tensor | None = None  # the generator's state after the last draw
        self._verified = False  # the caller's last update drew nothing from the generator
        self._shared = False  # something else draws from the generator: never prefetch
        self._before_prefetch: torch.Tensor | None = None  # the generator's state when a prefetch started

    @abstractmethod
    def _draw(self, out: torch.Tensor, scale: float) -> None:
        r"""Fill ``out`` with $\mathrm{scale}\cdot \xi$ for a fresh $\xi$."""

    def _advance(self, n: int, scale: float) -> None:
        if n != self._n + 1:
            raise RuntimeError(
                f"noise drawn from a generator must be read in step order: asked for step {n} after step {self._n}"
            )
        watch = self.prefetches and not self._shared
        if self._pending is not None:  # step n was prefetched
            _, drawn_scale, draw = self._pending
            draw.result()
            self._pending = None
            self._buffer, self._spare = self._spare, self._buffer
            if scale != drawn_scale:
                self._buffer.mul_(scale if drawn_scale == 1.0 else scale / drawn_scale)
        else:
            if watch and self._state_after is not None:  # did the update since the last draw use it?
                self._verified = torch.equal(self.generator.get_state(), self._state_after)
                self._shared = not self._verified
            self._draw(self._buffer, scale)
        if watch:
            self._state_after = self.generator.get_state()
        self._scale, self._H, self._n = scale, None, n

    def increment(self, n: int, scale: float = 1.0) -> torch.Tensor:
        if n != self._n:
            self._advance(n, scale)
        elif scale != self._scale:
            return self._buffer * (scale / self._scale)
        return self._buffer

    @property
    def prefetches(self) -> bool:
        b = self._buffer
        exact = b.dtype in (torch.float32, torch.float64)  # where a scale-1 draw times s is normal_(0, s)
        return b.device.type == "cpu" and exact and _background.pays(b.numel())

    def will_prefetch(self, n: int) -> bool:
        return (
            n == self._n + 1
            and self._pending is None
            and self._verified
            and not self._shared
            and self.prefetches
        )

    def prefetch(self, n: int, scale: float = 1.0) -> None:
        if not self.will_prefetch(n):
            return
        if self._spare is None:
            self._spare = torch.empty_like(self._buffer)  # (*noise_shape)
        self._before_prefetch = self.generator.get_state()
        drawn = scale if scale != 0 else 1.0  # a zero draw could not be rescaled if step n asks for another scale
        self._pending = (n, drawn, _background.submit(self._draw, self._spare, drawn))

    def settle(self) -> None:
        """Abandon a prefetched draw that was not read: wait for it and put the generator back, so that it
        is where the serial run would have left it."""
        if self._pending is not None:
            draw, self._pending = self._pending[2], None
            _background.abandon(draw, [(self.generator, self._before_prefetch)])
            self._state_after = self._before_prefetch


class GaussianNoise(_SequentialNoise):
    r"""$\xi_n \sim N(0, I)$ from ``generator`` (``normal_(0, scale)``: the scaling costs nothing);
    $H_n \sim N(0, dt/12)$ drawn after $\xi_n$ when asked for."""

    def _draw(self, out: torch.Tensor, scale: float) -> None:
        out.normal_(0.0, scale, generator=self.generator)

    def space_time_area(self, n: int) -> torch.Tensor:
        if n != self._n:
            self._advance(n, self.sqrt_dt)
        if self._pending is not None:
            raise RuntimeError("the Lévy area of a step must be asked for before the next step is prefetched")
        if self._H is None:
            self._H = torch.empty_like(self._buffer).normal_(
                0.0, math.sqrt(self.dt / 12.0), generator=self.generator
            )
        return self._H


class RademacherNoise(_SequentialNoise):
    r"""$\xi_n$ with independent entries $\pm 1$ (probability ½ each): weak order 1 only.

    Uses one random bit per entry, not a Gaussian draw: $\lceil n/8\rceil$ random bytes, each looked up in a
    $256 \times 8$ table of signs times the scale, ``table[b, j] = scale·(2·bit_j(b) − 1)``, so that the draw
    is one write of the output (entry ``k`` is bit ``k mod 8`` of byte $\lfloor k/8\rfloor$).
    """

    gaussian = False

    def __init__(self, shape, dt, generator, dtype, device) -> None:
        super().__init__(shape, dt, generator, dtype, device)
        n = self._buffer.numel()
        self._bytes = torch.empty((n + 7) // 8, dtype=torch.uint8, device=device)
        bits = (torch.arange(256, device=device)[:, None] >> torch.arange(8, device=device)) & 1  # (256, 8)
        self._signs = (2 * bits - 1).to(dtype)  # (256, 8) ±1
        self._table, self._table_scale = self._signs, 1.0  # (256, 8) ±scale

    def _draw(self, out: torch.Tensor, scale: float) -> None:
        self._bytes.random_(0, 256, generator=self.generator)
        if scale != self._table_scale:
            self._table, self._table_scale = self._signs * scale, scale  # (256, 8) ±scale, exact
        index = self._bytes.long()  # (⌈n/8⌉,)
        flat = (
            out.view(-1)
            if out.is_contiguous()
            else torch.empty(out.numel(), dtype=out.dtype, device=out.device)
        )
        full = flat.numel() // 8
        torch.index_select(self._table, 0, index[:full], out=flat[: 8 * full].view(full, 8))  # (n/8, 8)
        if flat.numel() > 8 * full:  # the last byte's first bits
            flat[8 * full :] = self._table[index[full], : flat.numel() - 8 * full]
        if flat.data_ptr() != out.data_ptr():
            out.copy_(flat.view(out.shape))


class BrownianIncrements(NoiseSource):
    """Pre-drawn Brownian increments ``dW`` on a grid of step ``dt``.

    Args:
        dW: ``(N, *noise_shape)``, the increments $W(t_{n+1}) - W(t_n)$.
        dt: the grid step.
        H: optional ``(N, *noise_shape)``, the space-time Lévy areas (see [`NoiseSource`][meanfield.stepping.brownian.NoiseSource]).
    """

    def __init__(self, dW: torch.Tensor, dt: float, H: torch.Tensor | None = None) -> None:
        dt = check_positive("dt", dt)
        if not torch.is_tensor(dW) or dW.dim() < 2 or not dW.is_floating_point():
            raise ValueError(
                "dW must be a floating-point tensor of shape (N, *noise_shape), "
                f"got {getattr(dW, 'shape', type(dW).__name__)}"
            )
        if H is not None and (not torch.is_tensor(H) or H.shape != dW.shape):
            raise ValueError(f"H must have the shape of dW {tuple(dW.shape)}, got {getattr(H, 'shape', H)}")
        super().__init__(tuple(dW.shape[1:]), dt)
        self.increments, self.H = dW, H

    def __repr__(self) -> str:
        n = self.increments.shape[0]
        areas = ", with Lévy areas" if self.H is not None else ""
        return (f"BrownianIncrements: {n} steps of dt = {number(self.dt)} (t ∈ [0, {number(n * self.dt)}]), noise shape "
                f"{self.shape}, {str(self.increments.dtype).removeprefix('torch.')}{areas}")  # fmt: skip

    @classmethod
    def sample(
        cls,
        n_steps: int,
        shape: tuple[int, ...],
        dt: float,
        *,
        generator: torch.Generator | int,
        dtype: torch.dtype = torch.float64,
        device: str | torch.device = "cpu",
        levy_area: bool = False,
    ) -> BrownianIncrements:
        r"""Draw ``n_steps`` increments $dW_n \sim N(0, dt\cdot I)$ (and $H_n \sim N(0, dt/12\cdot I)$ if ``levy_area``);
        ``generator`` a ``torch.Generator`` on ``device`` or an int seed (Python or numpy integer)."""
        n_steps, dt = check_int("n_steps", n_steps), check_positive("dt", dt)
        generator, seed = resolve_generator(generator, device, allow_none=False)
        warn_if_global_seed(seed, "BrownianIncrements.sample", "generator")
        full = (n_steps, *shape)
        dW = torch.empty(full, dtype=dtype, device=device).normal_(
            0.0, math.sqrt(dt), generator=generator
        )  # (N, ...)
        H = None
        if levy_area:
            H = torch.empty(full, dtype=dtype, device=device).normal_(
                0.0, math.sqrt(dt / 12.0), generator=generator
            )
        return cls(dW, dt, H)

    def __len__(self) -> int:
        return self.increments.shape[0]

    @property
    def path(self) -> torch.Tensor:
        """$W(t_n) - W(t_0)$ for ``n = 0 … N``: ``(N + 1, *noise_shape)``."""
        zero = torch.zeros_like(self.increments[:1])
        return torch.cat([zero, self.increments.cumsum(0)])

    def coarsen(self, k: int) -> BrownianIncrements:
        r"""The same Brownian path on the grid of step $k\cdot dt$: increments summed in blocks of ``k``.

        The space-time areas combine exactly: over a block of sub-steps of length ``h`` with increments
        $w_j$ and areas $H_j$, $\int (W_s - W_{\mathrm{start}}) ds = \sum_j h\cdot(W_{j-1} + w_j/2 + H_j)$ where $W_{j-1}$ is the
        increment accumulated before sub-step ``j``, and $H = \int(\dots)ds/(k\cdot h) - \Delta W/2$.
        """
        k = check_int("k", k)
        N = len(self)
        if N % k:
            raise ValueError(f"cannot coarsen {N} steps by k={k}: k must divide the number of steps")
        blocks = self.increments.reshape(N // k, k, *self.shape)  # (N/k, k, ...)
        dW = blocks.sum(1)  # (N/k, ...)
        H = None
        if self.H is not None:
            h = self.dt
            before = blocks.cumsum(1) - blocks  # (N/k, k, ...) increment accumulated before each sub-step
            sub_H = self.H.reshape(N // k, k, *self.shape)  # (N/k, k, ...)
            integral = (h * (before + 0.5 * blocks + sub_H)).sum(1)  # (N/k, ...)
            H = integral / (k * h) - 0.5 * dW
        return BrownianIncrements(dW, k * self.dt, H)

    def increment(self, n: int, scale: float = 1.0) -> torch.Tensor:
        if scale == self.sqrt_dt:
            return self.increments[n]
        return self.increments[n] * (scale / self.sqrt_dt)

    def space_time_area(self, n: int) -> torch.Tensor:
        if self.H is None:
            return super().space_time_area(n)
        return self.H[n]
