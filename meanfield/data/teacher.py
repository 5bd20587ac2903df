r"""Teacher–student regression with Gaussian inputs: single- and multi-index teachers.

Inputs $x \sim N(0, I_d)$; a teacher with unit directions ``w*_1 … w*_k`` and coefficients $c_k$ gives

$$
y = \sum_k c_k g(w^*_k \cdot x) + \sigma \varepsilon, \qquad \varepsilon \sim N(0, 1)
$$

(``k = 1``: the single-index model $y = c_1 g(w^* \cdot x)$). The directions are returned so that a student's
alignment with them can be measured.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from .._checks import check_int, check_nonnegative

__all__ = ["ACTIVATIONS", "TeacherStudent", "teacher_student"]

ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "relu": torch.relu,
    "tanh": torch.tanh,
    "sigmoid": torch.sigmoid,
    "abs": torch.abs,
    "identity": lambda z: z,
    "he1": lambda z: z,
    "he2": lambda z: z**2 - 1,
    "he3": lambda z: z**3 - 3 * z,
    "he4": lambda z: z**4 - 6 * z**2 + 3,
}
r"""Name → ``g``. ``heN`` are the probabilists' Hermite polynomials: $He_1 = z$, $He_2 = z^2 - 1$,
$He_3 = z^3 - 3z$, $He_4 = z^4 - 6z^2 + 3$ (orthogonal under N(0, 1), $\mathbb{E} He_n(z)^2 = n!$)."""

DIRECTIONS = ("orthonormal", "random")


@dataclass
class TeacherStudent:
    """A teacher–student regression data set (see [`teacher_student`][meanfield.data.teacher.teacher_student]).

    Attributes:
        x_train: inputs, shape ``(n_train, d)``.
        y_train: targets (with label noise when ``label_noise > 0``), shape ``(n_train,)``.
        x_test: inputs, shape ``(n_test, d)``.
        y_test: targets, shape ``(n_test,)``: noiseless unless ``noisy_test=True``.
        directions: the teacher's unit directions ``w*_k``, shape ``(k, d)``.
        coefficients: $c_k$, shape ``(k,)``.
        description: how the data were made.
        activation: the name of ``g``.
        label_noise: the standard deviation σ of the Gaussian label noise.
    """

    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    directions: torch.Tensor
    coefficients: torch.Tensor
    description: str
    activation: str = "relu"
    label_noise: float = 0.0

    def teacher(self, x: torch.Tensor) -> torch.Tensor:
        r"""The noiseless teacher $\sum_k c_k g(w^*_k \cdot x)$ at inputs ``x`` of shape ``(n, d)``; shape ``(n,)``."""
        return _teacher(x, self.directions, self.coefficients, ACTIVATIONS[self.activation])


def _teacher(
    x: torch.Tensor,
    directions: torch.Tensor,
    coefficients: torch.Tensor,
    g: Callable[[torch.Tensor], torch.Tensor],
) -> torch.Tensor:
    z = x @ directions.T  # (n, k) projections w*_k · x
    return g(z) @ coefficients  # (n,)


def _directions(d: int, k: int, kind: str, generator: torch.Generator) -> torch.Tensor:
    """``k`` unit vectors of R^d, shape ``(k, d)``, in float64.

    ``"orthonormal"``: Q of the QR factorisation of a Gaussian ``(d, k)`` matrix with the signs fixed by
    ``diag(R) > 0`` (uniform on the Stiefel manifold). ``"random"``: independent Gaussian vectors, each
    normalised (uniform on the sphere, not orthogonal to one another).
    """
    g = torch.randn(d, k, generator=generator, dtype=torch.float64)  # (d, k)
    if kind == "orthonormal":
        q, r = torch.linalg.qr(g)  # (d, k), (k, k)
        signs = torch.sign(torch.diagonal(r))  # (k,)
        signs[signs == 0] = 1
        return (q * signs).T.contiguous()  # (k, d)
    return (g / g.norm(dim=0, keepdim=True)).T.contiguous()  # (k, d)


def teacher_student(
    d: int,
    n_train: int,
    n_test: int,
    *,
    k: int = 1,
    activation: str = "relu",
    directions: str = "orthonormal",
    coefficients: Sequence[float] | torch.Tensor | None = None,
    label_noise: float = 0.0,
    noisy_test: bool = False,
    seed: int = 0,
    dtype: torch.dtype = torch.float32,
) -> TeacherStudent:
    r"""Gaussian inputs and targets of a single-index (``k = 1``) or multi-index teacher.

    $x \sim N(0, I_d)$ and ``y = Σ_{j=1}^{k} c_j g(w*_j · x) + σ ε`` with unit directions ``w*_j``, $\varepsilon \sim N(0, 1)$
    and ``σ = label_noise``.

    The default coefficients are $c_j = 1/\sqrt{k}$: with orthonormal directions the projections $w^*_j \cdot x$
    are independent standard normals, so ``Var(y − σε) = Var g(z)`` whatever k (the target's scale does not
    shrink as indices are added, unlike ``1/k``). ``k = 1`` gives $c_1 = 1$: $y = g(w^* \cdot x)$. (The seed
    experiment's "two-index ReLU teacher" is ``k=2, activation="relu"``.)

    Everything is drawn from one ``torch.Generator`` seeded with ``seed``, in this order: the directions
    (float64), ``x_train``, ``x_test``, the training label noise, the test label noise (only when
    ``noisy_test``). The same arguments give the same tensors.

    Args:
        d: input dimension.
        n_train: number of training samples.
        n_test: number of test samples.
        k: number of teacher directions (indices); $k \le d$ for orthonormal directions.
        activation: ``g``, a name in [`ACTIVATIONS`][meanfield.data.teacher.ACTIVATIONS] (``relu``, ``tanh``, ``sigmoid``, ``abs``,
            ``identity``, Hermite ``he1`` … ``he4``).
        directions: ``"orthonormal"`` (QR of a Gaussian matrix) or ``"random"`` (independent unit vectors).
        coefficients: ``c``, k finite numbers; default $1/\sqrt{k}$ each.
        label_noise: σ ≥ 0, the standard deviation of the Gaussian noise added to ``y_train``.
        noisy_test: add the noise to ``y_test`` too; by default the test targets are noiseless, so the test
            MSE measures the excess risk (its minimum is 0, not σ²).
        seed: seed of the generator.
        dtype: floating dtype of the returned tensors.

    Returns:
        A [`TeacherStudent`][meanfield.data.teacher.TeacherStudent].

    Raises:
        ValueError: a bad size, an unknown activation or kind of directions, ``k > d`` with orthonormal
            directions, coefficients of the wrong length or non-finite, a negative ``label_noise``.
    """
    d = check_int("d", d)
    n_train = check_int("n_train", n_train)
    n_test = check_int("n_test", n_test, minimum=0)
    k = check_int("k", k)
    sigma = check_nonnegative("label_noise", label_noise)
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {activation!r}")
    if directions not in DIRECTIONS:
        raise ValueError(f"directions must be one of {DIRECTIONS}, got {directions!r}")
    if directions == "orthonormal" and k > d:
        raise ValueError(
            f"k must be ≤ d = {d} for orthonormal directions, got k = {k} (use directions='random')"
        )
    if not dtype.is_floating_point:
        raise ValueError(f"dtype must be a floating-point dtype, got {dtype}")
    if coefficients is None:
        c = torch.full((k,), 1 / math.sqrt(k), dtype=torch.float64)  # (k,)
        c_text = f"c_j = 1/√{k}" if k > 1 else "c = 1"
    else:
        c = torch.as_tensor(coefficients, dtype=torch.float64).reshape(-1)  # (k,)
        if c.numel() != k or not bool(torch.isfinite(c).all()):
            raise ValueError(
                f"coefficients must be {k} finite numbers (one per direction), got {coefficients!r}"
            )
        c_text = "c = (" + ", ".join(f"{v:g}" for v in c.tolist()) + ")"

    generator = torch.Generator().manual_seed(seed)
    w = _directions(d, k, directions, generator)  # (k, d) float64
    x_train = torch.randn(n_train, d, generator=generator, dtype=dtype)  # (n_train, d)
    x_test = torch.randn(n_test, d, generator=generator, dtype=dtype)  # (n_test, d)
    w, c = w.to(dtype), c.to(dtype)
    g = ACTIVATIONS[activation]
    y_train = _teacher(x_train, w, c, g)  # (n_train,)
    y_test = _teacher(x_test, w, c, g)  # (n_test,)
    if sigma > 0:
        y_train = y_train + sigma * torch.randn(n_train, generator=generator, dtype=dtype)  # (n_train,)
        if noisy_test:
            y_test = y_test + sigma * torch.randn(n_test, generator=generator, dtype=dtype)  # (n_test,)

    kind = "single-index" if k == 1 else f"{k}-index"
    noise = (
        f"label noise σ = {sigma:g} on train{' and test' if noisy_test else ' (test noiseless)'}"
        if sigma
        else "no label noise"
    )
    description = (
        f"teacher–student regression, {kind} {activation} teacher y = Σ_j c_j g(w*_j·x), {c_text}, {directions} unit "
        f"directions, x ~ N(0, I_{d}); {n_train:,} train / {n_test:,} test samples; {noise}; seed {seed}"
    )
    return TeacherStudent(
        x_train=x_train,
        y_train=y_train,
        x_test=x_test,
        y_test=y_test,
        directions=w,
        coefficients=c,
        description=description,
        activation=activation,
        label_noise=sigma,
    )
