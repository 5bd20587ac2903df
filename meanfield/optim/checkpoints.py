r"""The optimizers' checkpoints: ``state_dict`` as plain data and ``load_state_dict`` for a bit-identical resume.

A state dict of [`Langevin`][meanfield.optim.langevin.Langevin] or [`KineticLangevin`][meanfield.optim.kinetic.KineticLangevin]
is ``torch.optim``'s (``state``, ``param_groups``) with the β schedules and projections as their ``to_dict()``
([`as_data`][meanfield.optim.checkpoints.as_data]) plus ``generators`` (``{device: ByteTensor}``) and ``seed``:
only tensors, numbers, strings, lists, tuples, dicts and ``None``, so ``torch.load(f, weights_only=True)`` reads
it. Loading keeps the loading optimizer's own schedules and projections (the saved ones are data describing them).
"""

from __future__ import annotations

from typing import Any

import torch

from meanfield.drift.schedules import schedule_to_data
from meanfield.optim.groups import CONFIG_KEYS, resolve_defaults

__all__ = ["as_data", "own_copy", "LangevinCheckpoints"]


def as_data(
    state: dict[str, Any], generators: dict[torch.device, torch.Generator], seed: int | None
) -> dict[str, Any]:
    """``torch.optim``'s ``state`` with every group's β and projection as data, plus the generators' states
    and the seed (changed in place and returned).

    Raises:
        TypeError: a group's β is a callable that is not a [`meanfield.drift.schedules`][meanfield.drift.schedules] object.
    """
    for gi, group in enumerate(state["param_groups"]):
        group["beta"] = schedule_to_data(group["beta"], f"the β schedule of param group {gi}")
        if group.get("projection") is not None:
            group["projection"] = group["projection"].to_dict()
    state["generators"] = {str(d): g.get_state() for d, g in generators.items()}
    state["seed"] = seed
    return state


def own_copy(state_dict: dict[str, Any]) -> dict[str, Any]:
    """A shallow copy of ``state_dict`` whose per-parameter tensors are cloned: a live state dict (another
    optimizer's, whose step counts and moments it holds by reference) must not share tensors with the loading
    one, or stepping either would move both."""
    state_dict = dict(state_dict)
    state_dict["state"] = {
        k: {key: v.clone() if torch.is_tensor(v) else v for key, v in entry.items()}
        for k, entry in state_dict.get("state", {}).items()
    }
    return state_dict


class LangevinCheckpoints:
    """``state_dict``/``load_state_dict`` of [`Langevin`][meanfield.optim.langevin.Langevin] (a mixin, before
    ``torch.optim.Optimizer``); the optimizer also keeps ``n_steps`` and forgets its cached layout, noise plan
    and statistics on loading."""

    param_groups: list[dict[str, Any]]
    defaults: dict[str, Any]
    _seed: int | None
    _n_steps: int
    _generators: dict[torch.device, torch.Generator]

    def state_dict(self) -> dict[str, Any]:
        """``torch.optim`` state plus the generators' states (a resumed run draws the same noise), as plain data.

        Everything in it is a tensor, a number, a string, a list, a tuple, a dict or ``None``, so
        ``torch.save(opt.state_dict(), f)`` and ``torch.load(f, weights_only=True)`` (torch's default) work:
        β schedules are stored as their ``to_dict()`` (a constant β as a number), projections as their
        ``to_dict()`` (a [`LayerProjection`][meanfield.optim.layers.LayerProjection] as ``{"kind": "layer", "layer": <class name>}``). Besides
        ``state`` and ``param_groups``: ``generators`` (``{device: ByteTensor}``), ``seed``, ``n_steps``.

        Raises:
            TypeError: a group's β is a callable that is not a [`meanfield.drift.schedules`][meanfield.drift.schedules] object (a lambda):
                it has no data form (use ``Cosine``, ``Linear``, ``Exponential``, ``Step`` or ``Constant``).
        """
        state = as_data(super().state_dict(), self._generators, self._seed)  # type: ignore[misc]
        state["n_steps"] = self._n_steps
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load a [`state_dict`][meanfield.optim.langevin.Langevin.state_dict] (e.g. from ``torch.load(f, weights_only=True)``).

        Moments, per-parameter Adam step counts, group step counts (the schedules' clock), options and the
        generators' states are restored, so the continuation is bit-identical to the uninterrupted run. The β
        schedules and projections of this optimizer are kept (the saved ones are data describing them).
        """
        state_dict = own_copy(state_dict)
        generators = state_dict.pop("generators", {})
        seed = state_dict.pop("seed", self._seed)
        n_steps = state_dict.pop("n_steps", self._n_steps)
        kept = [{key: g[key] for key in CONFIG_KEYS if key in g} for g in self.param_groups]
        defaults = dict(self.defaults)  # torch's __setstate__ adds its own keys (differentiable): not ours
        super().load_state_dict(state_dict)  # type: ignore[misc]
        self.defaults = defaults
        for group, config in zip(self.param_groups, kept):
            for key in CONFIG_KEYS:  # this optimizer's: the saved rank's particle rows are not this rank's
                group.pop(key, None)
            group.update(config)
            for key, value in self.defaults.items():  # options added since the state was saved
                group.setdefault(key, value)
            resolve_defaults(group)
        self._seed = seed
        self._n_steps = n_steps
        if seed is not None:  # the saver's generators: those it had not made yet start from the seed again
            self._generators = {}
        for name, rng_state in generators.items():
            self._generator(torch.device(name)).set_state(rng_state)  # type: ignore[attr-defined]
        self._forget()  # type: ignore[attr-defined]
