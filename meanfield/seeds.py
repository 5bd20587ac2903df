"""Independent random streams of one run, derived from its seed; one way to read a seed argument."""

from __future__ import annotations

import hashlib
import numbers
import secrets
import warnings

import torch

__all__ = ["derive_seed", "resolve_generator", "warn_if_global_seed", "SEED_RANGE"]

SEED_RANGE = (-(2**63), 2**64)
"""The seeds ``torch.Generator.manual_seed`` takes: $[-2^{63}, 2^{64})$."""


def derive_seed(seed: int, stream: str) -> int:
    """An independent seed for one random stream (``"init"``, ``"data"``, ``"batches"``, ``"noise"``) of a run.

    ``int(sha256(f"{seed}/{stream}"))`` reduced to 62 bits: the streams of one run, and the same stream of
    two seeds, never share a generator sequence (which ``manual_seed(seed)`` everywhere would: the first
    initialisation draws would equal the first data draws).
    """
    digest = hashlib.sha256(f"{seed}/{stream}".encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 2


def warn_if_global_seed(seed: int | None, who: str, argument: str = "seed", stacklevel: int = 3) -> None:
    """Warn when a noise stream's ``seed`` is the one torch's global generator was last given.

    After ``torch.manual_seed(s)``, a ``torch.Generator().manual_seed(s)`` draws the same numbers as the global
    generator: the noise of a sampler seeded with ``s`` repeats, draw for draw, an initialisation made with
    ``torch.randn`` after that call, so the first steps' noise is the initial state itself (a bias, not an
    independent kick). The remedy is a stream of its own, ``derive_seed(s, "noise")`` (as ``meanfield run``
    does). ``torch.initial_seed()`` is that of the global CPU generator, kept modulo $2^{64}$ (a negative seed
    ``s`` is stored as $2^{64} + s$: the same stream); a seed drawn at random never matches it in practice.
    ``argument`` is the caller's name for the seed (``generator`` for ``simulate``), used in the remedy.
    """
    if seed is not None and seed % 2**64 == torch.initial_seed():
        warnings.warn(
            f"{who}: {argument}={seed} is also the seed of torch's global generator (torch.manual_seed({seed})): its "
            "noise can repeat the global stream's draws, e.g. an initialisation made with torch.randn after that "
            f'call. Pass {argument}=meanfield.seeds.derive_seed({seed}, "noise") for a stream of its own',
            UserWarning,
            stacklevel=stacklevel,
        )


def resolve_generator(
    generator: torch.Generator | int | None,
    device: torch.device | str = "cpu",
    *,
    name: str = "generator",
    allow_none: bool = True,
) -> tuple[torch.Generator, int | None]:
    """The one reading of a seed argument, shared by every entry point that draws random numbers.

    * an ``int`` or a numpy integer (``np.int64(3)``, an element of ``np.arange``): a fresh
      ``torch.Generator(device).manual_seed(seed)``, the seed returned;
    * a ``torch.Generator``: used as it is (it must be on ``device``'s type), seed ``None``;
    * ``None`` (when ``allow_none``): a fresh random seed from `secrets`, returned so the run can be
      repeated.

    ``bool`` (``True`` is an ``int`` to Python) and anything else are refused.

    Args:
        generator: the argument as given.
        device: where the numbers will be drawn (a generator must live on that device type).
        name: the argument's name for the error message.
        allow_none: whether ``None`` means a fresh seed (else it is refused).

    Returns:
        ``(generator, seed)``: the generator to draw from, and the seed it was made from (``None`` for a
        generator passed in).

    Raises:
        TypeError: a type other than the three above (the message lists them).
        ValueError: a seed outside $[-2^{63}, 2^{64})$, or a generator on another device type.
    """
    device = torch.device(device)
    allowed = "a torch.Generator, an int seed (Python or numpy integer)" + (" or None" if allow_none else "")
    if isinstance(generator, torch.Generator):
        if torch.device(generator.device).type != device.type:
            raise ValueError(
                f"{name} is on {generator.device}, but the numbers are drawn on {device}: pass "
                f"torch.Generator(device={str(device)!r}), or an int seed (a generator is made there)"
            )
        return generator, None
    if generator is None and allow_none:
        seed = secrets.randbits(63)
    elif isinstance(generator, numbers.Integral) and not isinstance(generator, bool):
        seed = int(generator)
        if not SEED_RANGE[0] <= seed < SEED_RANGE[1]:
            raise ValueError(f"{name} as an int seed must lie in [−2^63, 2^64), got {seed}")
    else:
        raise TypeError(f"{name} must be {allowed}, got {type(generator).__name__}")
    return torch.Generator(device=device).manual_seed(seed), seed
