"""A numpy oracle for the kinetic splittings, shared by the kinetic tests (``tests/helpers/kinetic_steps.py``).

One step of a splitting word (``"BAOAB"``, ``"OBABO"``, ``"ABOBA"``) applied letter by letter: a letter seen
``k`` times in the word moves by ``τ = h/k``; A is the drift ``x ← x + τ v``, B the kick ``v ← v + τ F(x)``,
O the exact Ornstein–Uhlenbeck map over ``h/2``, ``v ← c v + sqrt(β(1 − c²))·ξ`` with ``c = e^{−γh/2}``. An O
over the whole step is two half steps with ``ξ₊`` then ``ξ₋``, ``ξ± = (ξ_v ± ξ_x)/√2``; two O's take one each.
The last kick's force is kept for the next kick until a drift moves the positions (``cached`` carries it
into the step and out of it), as the stepper documents. With the step's start time ``t``, ``β`` may be a
function of time, read at the step's midpoint ``t + h/2``, and ``force`` one of ``(time, x)``, read at the time
a kick sits at when time advances with the drifts (``t`` plus the drifts' τ before it).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np


def splitting_step(
    word: str,
    x: np.ndarray,
    v: np.ndarray,
    xi: np.ndarray,
    h: float,
    gamma: float,
    beta: float | Callable[[float], float],
    force: Callable[..., np.ndarray],
    cached: np.ndarray | None = None,
    t: float | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """One step of ``word``; x, v: (..., d), xi: (..., 2d) (the ``W_x`` then ``W_v`` slots).

    Returns:
        ``x, v`` after the step and the force carried out (``None`` if the word ends with a drift).
    """
    d = x.shape[-1]
    xi_x, xi_v = xi[..., :d], xi[..., d:]
    halves = [(xi_v + xi_x) / math.sqrt(2), (xi_v - xi_x) / math.sqrt(2)]  # ξ₊, ξ₋
    f, n_o, clock = cached, 0, t
    if callable(beta):
        beta = beta(t + h / 2)
    for letter in word:
        tau = h / word.count(letter)
        if letter == "A":
            x = x + tau * v
            f = None
            clock = None if t is None else clock + tau
        elif letter == "B":
            if f is None:
                f = force(x) if t is None else force(clock, x)
            v = v + tau * f
        else:
            c = math.exp(-gamma * h / 2)
            s = math.sqrt(beta * (1 - c * c))
            for j in (0, 1) if tau == h else (n_o,):
                v = c * v + s * halves[j]
            n_o += 1
    return x, v, f
