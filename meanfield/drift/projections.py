r"""Projections $\Pi$ applied after every step: $\theta_i \leftarrow \Pi(\theta_i - \eta\cdot\nabla_i + \sqrt{2\beta_t \eta}\cdot \xi_i)$.

One projection serves both steppers: [`meanfield.simulate`][meanfield.stepping.simulate.simulate] applies it to the state ``(B, M, d)``
after every step, [`meanfield.optim.Langevin`][meanfield.optim.langevin.Langevin] to every parameter of a group after every step.
``project_(x)`` projects one tensor in place and returns it; ``project_all_(tensors)`` does a list.

**Projections are data.** ``to_dict()`` gives plain data with a ``"kind"`` (``{"kind": "clip", "A": 2.0}``,
``{"kind": "sphere", "radius": 1.0, "dim": [-1]}``) and [`projection_from_dict`][meanfield.drift.projections.projection_from_dict] rebuilds the
projection ([`PROJECTIONS`][meanfield.drift.projections.PROJECTIONS]: the kinds it knows), for TOML configs and ``weights_only`` checkpoints.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from .._checks import check_positive

__all__ = ["Projection", "Clip", "Sphere", "PROJECTIONS", "projection_from_dict"]


class Projection:
    """Base class: a map onto a constraint set, applied in place."""

    def project_(self, x: torch.Tensor) -> torch.Tensor:
        """Replace ``x`` by its projection, in place; return it."""
        raise NotImplementedError

    def project_all_(self, tensors: Sequence[torch.Tensor]) -> None:
        """Project every tensor of ``tensors`` in place."""
        for x in tensors:
            self.project_(x)

    def check(self, x: torch.Tensor) -> None:
        """Raise ``ValueError`` if the projection cannot apply to a tensor like ``x``."""

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return self.project_(x)

    def to_dict(self) -> dict[str, Any]:
        """The projection as plain data. A subclass without its own ``to_dict`` is described (not rebuilt):
        ``{"kind": "custom", "class": <qualified name>, "repr": repr(self)}``."""
        cls = type(self)
        return {"kind": "custom", "class": f"{cls.__module__}.{cls.__qualname__}", "repr": repr(self)}


class Clip(Projection):
    r"""$\Pi(\theta) = \operatorname{clip}(\theta, -A, A)$ coordinate-wise: the Euclidean projection onto the box $[-A, A]^d$.

    Args:
        A: the bound, ``A > 0``.
    """

    def __init__(self, A: float) -> None:
        self.A = check_positive("Clip bound A", A)

    def project_(self, x: torch.Tensor) -> torch.Tensor:
        return x.clamp_(-self.A, self.A)

    def __repr__(self) -> str:
        return f"Clip(A={self.A})"

    def to_dict(self) -> dict[str, Any]:
        """``{"kind": "clip", "A": A}`` (see [`projection_from_dict`][meanfield.drift.projections.projection_from_dict])."""
        return {"kind": "clip", "A": self.A}


class Sphere(Projection):
    r"""$\Pi(\theta_i) = r\cdot \theta_i/|\theta_i|$: each particle renormalised onto the sphere of radius ``r``.

    A particle's coordinates are the axes ``dim`` (default the last one): for a state ``(B, M, d)`` each
    of the B·M particles lands on $S^{d-1}$; for a stacked parameter ``(M, d)`` each row; pass
    ``dim=(1, 2)`` for a parameter ``(M, d, h)`` whose particle is a whole $d \times h$ block, ``dim=0`` for
    a single vector. A zero particle stays zero.

    With this projection after an Euler–Maruyama step, $x + b\cdot dt + \sqrt{2\beta\cdot dt}\cdot \xi$ then ``x/|x|`` is the
    standard projected scheme for Langevin dynamics on $S^{d-1}$: its invariant law converges to
    $\propto \exp(-V/\beta)$ with respect to the uniform measure on the sphere as $dt \to 0$ (the normalisation
    supplies the Itô drift $-\beta(d-1)\theta$).

    Args:
        radius: ``r > 0``.
        dim: the axis or axes of one particle's coordinates.
    """

    def __init__(self, radius: float = 1.0, dim: int | tuple[int, ...] = -1) -> None:
        self.radius = check_positive("Sphere radius", radius)
        dims = (dim,) if isinstance(dim, int) and not isinstance(dim, bool) else dim
        if (
            not isinstance(dims, tuple)
            or not dims
            or not all(isinstance(k, int) and not isinstance(k, bool) for k in dims)
        ):
            raise TypeError(f"Sphere dim must be an int or a non-empty tuple of ints, got {dim!r}")
        self.dim = dims

    def check(self, x: torch.Tensor) -> None:
        if any(not -x.dim() <= k < x.dim() for k in self.dim):
            raise ValueError(
                f"Sphere dim={self.dim} is out of range for a tensor of shape {tuple(x.shape)}: "
                f"dim names the axes of one particle's coordinates"
            )

    def project_(self, x: torch.Tensor) -> torch.Tensor:
        tiny = torch.finfo(x.dtype).tiny
        # over its largest |coordinate| first: |x| then neither overflows (float32 beyond about 1.3e19: a particle
        # sent to 0) nor underflows (a subnormal particle left inside the sphere); a zero particle stays zero
        x.div_(x.abs().amax(dim=self.dim, keepdim=True).clamp_min_(tiny))  # (…) largest |coordinate| 1
        norm = torch.linalg.vector_norm(x, dim=self.dim, keepdim=True)  # (…, 1, …) in [1, √d], or 0
        return x.mul_(self.radius / norm.clamp_min_(tiny))

    def __repr__(self) -> str:
        return f"Sphere(radius={self.radius}, dim={self.dim if len(self.dim) > 1 else self.dim[0]})"

    def to_dict(self) -> dict[str, Any]:
        """``{"kind": "sphere", "radius": r, "dim": [axes]}`` (see [`projection_from_dict`][meanfield.drift.projections.projection_from_dict])."""
        return {"kind": "sphere", "radius": self.radius, "dim": list(self.dim)}


PROJECTIONS: dict[str, type] = {"clip": Clip, "sphere": Sphere}
"""The projection classes that [`projection_from_dict`][meanfield.drift.projections.projection_from_dict] rebuilds, by the ``"kind"`` of their ``to_dict()``.

Two other kinds exist only as descriptions: ``"layer"`` ([`meanfield.optim.LayerProjection`][meanfield.optim.layers.LayerProjection], which holds
a module: its owner rebuilds it, e.g. [`meanfield.optim.Langevin.param_groups_for`][meanfield.optim.langevin.Langevin.param_groups_for]) and ``"custom"``.
"""

_PROJECTION_FIELDS = {"clip": ("A",), "sphere": ("radius", "dim")}


def projection_from_dict(data: Mapping[str, Any]) -> Projection:
    """Rebuild a projection from its ``to_dict()``: ``{"kind": "clip", "A": …}`` or
    ``{"kind": "sphere", "radius": …, "dim": [...]}`` (``dim`` an int or a list of ints).

    Raises:
        TypeError: ``data`` is not a mapping.
        ValueError: an unknown kind (the message lists [`PROJECTIONS`][meanfield.drift.projections.PROJECTIONS]; ``"layer"`` and ``"custom"``
            say who rebuilds them), a missing or extra field, or a field value the projection refuses.
    """
    if not isinstance(data, Mapping):
        raise TypeError(f"a projection's data must be a dict with a 'kind', got {type(data).__name__}")
    kind = data.get("kind")
    if kind in ("layer", "custom"):
        raise ValueError(
            f"a projection of kind {kind!r} ({dict(data)!r}) cannot be rebuilt from data: it belongs to "
            "an object (a layer's project_(), a user class); its owner rebuilds it "
            "(e.g. Langevin.param_groups_for(model))"
        )
    if kind not in PROJECTIONS:
        raise ValueError(
            f"projection data needs 'kind' in {sorted(PROJECTIONS)}, got {kind!r} (in {dict(data)!r})"
        )
    fields = _PROJECTION_FIELDS[kind]
    given = set(data) - {"kind"}
    missing, extra = [f for f in fields if f not in given], sorted(given - set(fields))
    if missing or extra:
        raise ValueError(
            f"projection data of kind {kind!r} needs exactly the fields {list(fields)}; "
            f"missing {missing}, unexpected {extra} (in {dict(data)!r})"
        )
    kwargs = {f: data[f] for f in fields}
    if kind == "sphere" and isinstance(kwargs["dim"], list):
        kwargs["dim"] = tuple(kwargs["dim"])
    try:
        return PROJECTIONS[kind](**kwargs)
    except (TypeError, ValueError) as error:
        raise ValueError(f"projection data {dict(data)!r}: {error}") from None
