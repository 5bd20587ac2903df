"""A fake of the ``torch.distributed`` calls meanfield makes: W ranks as threads of the test process.

:class:`FakeWorld` runs ``fn(rank)`` on W Python threads, one per rank, with ``torch.distributed``'s functions
(``is_initialized``, ``get_rank``, ``get_world_size``, ``get_global_rank``, ``get_backend``, ``all_reduce``,
``all_gather``, ``gather``, ``isend``, ``recv``, ``barrier``) replaced by ones that talk between those threads:

- collectives meet at a barrier of their group: every rank deposits its input, each then reads all inputs in
  rank order (so every rank computes the same sum, as a real all-reduce does), and a second barrier frees the
  slots; the ranks must call the same collective (kind, op, ``dst``), else every rank fails;
- ``isend``/``recv`` go through one mailbox per (group, source, destination): a message sent on one group is
  never received on another (as with gloo, where each group is its own communicator), so a send or a receive
  on the wrong group hangs, which the fake turns into an error: :class:`Deadlock` as soon as every running
  rank waits and nothing has moved for 0.3 s, an error when a rank waits for one that has finished, and
  ``TimeoutError`` after ``timeout`` seconds in any case;
- groups (:meth:`FakeWorld.new_group`) have their own ranks (``get_rank(group)``) and a map to global ranks;
  ``None`` is the default group of all W ranks. ``dst``/``src`` are global ranks, as in torch.

It is a model of the semantics, not of gloo: tensors are copied, so a result never aliases another rank's input.
The first error on any rank aborts every wait and is raised from :meth:`FakeWorld.run` (the root cause, not the
:class:`Aborted` waits it caused on the other ranks). ``calls`` records what each rank called, for tests of the
communication pattern itself.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.distributed as dist

_OPS = {"SUM": torch.sum, "MIN": torch.amin, "MAX": torch.amax}


class Aborted(RuntimeError):
    """A rank's wait ended because another rank failed (not a root cause)."""


class Deadlock(RuntimeError):
    """Every rank still running waits (a collective or a receive) and none can go on."""


class FakeGroup:
    """The ranks ``members`` (global ranks, in group-rank order) of a :class:`FakeWorld`."""

    def __init__(self, world: FakeWorld, members: Sequence[int]) -> None:
        self.world, self.members = world, tuple(members)
        self.slots: list[Any] = [None] * len(self.members)
        self.arrived, self.generation = 0, 0

    def __repr__(self) -> str:
        return f"FakeGroup{self.members}"


class _Work:
    def wait(self, timeout: Any = None) -> bool:
        return True

    def is_completed(self) -> bool:
        return True


class FakeWorld:
    """``world`` ranks as threads; :meth:`run` calls ``fn(rank)`` on each, with ``torch.distributed`` faked."""

    def __init__(self, world: int, backend: str = "gloo", timeout: float = 20.0) -> None:
        self.size, self.backend, self.timeout = world, backend, timeout
        self.local = threading.local()
        self.cond = threading.Condition()  # every wait of every rank, and every change that can end one
        self.abort = False
        self.progress = 0  # counts barrier releases, messages sent and ranks finished
        self.blocked: set[int] = set()
        self.finished: set[int] = set()
        self.groups: list[FakeGroup] = []
        self.default = self.new_group(range(world))
        self.mailboxes: dict[tuple[int, int, int], collections.deque] = collections.defaultdict(
            collections.deque
        )
        self.calls: list[tuple[str, int, Any]] = []  # (kind, global rank, detail): what each rank called

    # ---- groups and ranks
    def new_group(self, members: Sequence[int]) -> FakeGroup:
        group = FakeGroup(self, members)
        self.groups.append(group)
        return group

    def _group(self, group: FakeGroup | None) -> FakeGroup:
        if group is None:
            return self.default
        if not isinstance(group, FakeGroup) or group.world is not self:
            raise TypeError(f"not a group of this world: {group!r}")
        return group

    @property
    def rank(self) -> int:
        rank = getattr(self.local, "rank", None)
        if rank is None:
            raise RuntimeError("a torch.distributed call from a thread that is not a rank of the FakeWorld")
        return rank

    def get_rank(self, group: FakeGroup | None = None) -> int:
        g = self._group(group)
        return g.members.index(self.rank) if self.rank in g.members else -1

    def get_world_size(self, group: FakeGroup | None = None) -> int:
        return len(self._group(group).members)

    def get_global_rank(self, group: FakeGroup, group_rank: int) -> int:
        if group is None:
            raise ValueError("get_global_rank needs a group")
        return self._group(group).members[group_rank]

    def get_backend(self, group: FakeGroup | None = None) -> str:
        self._group(group)
        return self.backend

    def is_initialized(self) -> bool:
        return True

    def is_available(self) -> bool:
        return True

    # ---- waiting
    def _block(self, done: Callable[[], bool], waits_for: Sequence[int], what: str) -> None:
        """Wait (holding ``self.cond``) until ``done()``; fail on an abort, on a rank in ``waits_for`` that
        has finished, on a deadlock (every running rank waits, nothing moved for 0.3 s) or after the timeout."""
        me, begin = self.rank, time.monotonic()
        seen, still_since = self.progress, begin
        self.blocked.add(me)
        try:
            while not done():
                if self.abort:
                    raise Aborted("another rank failed")
                gone = [r for r in waits_for if r in self.finished]
                if gone:
                    raise RuntimeError(f"rank {me} waits in {what} for rank {gone[0]}, which has finished")
                now = time.monotonic()
                if self.progress != seen:
                    seen, still_since = self.progress, now
                running = set(range(self.size)) - self.finished
                if running <= self.blocked and now - still_since > 0.3:
                    raise Deadlock(f"rank {me} in {what}: every running rank {sorted(running)} waits")
                if now - begin > self.timeout:
                    raise TimeoutError(f"rank {me} waited {self.timeout} s in {what}")
                self.cond.wait(0.02)
        finally:
            self.blocked.discard(me)

    def _barrier(self, g: FakeGroup, what: str) -> None:
        with self.cond:
            generation = g.generation
            g.arrived += 1
            if g.arrived == len(g.members):
                g.arrived, g.generation = 0, g.generation + 1
                self.progress += 1
                self.cond.notify_all()
                return
            self._block(lambda: g.generation != generation, g.members, f"{what} on {g!r}")

    # ---- collectives
    def _meet(self, group: FakeGroup | None, kind: tuple, payload: Any) -> list[Any]:
        """Deposit ``(kind, payload)``, wait for every rank of the group, return every payload in rank order."""
        g = self._group(group)
        if self.rank not in g.members:
            raise RuntimeError(f"rank {self.rank} called {kind[0]} on {g!r}, of which it is not a member")
        g.slots[g.members.index(self.rank)] = (kind, payload)
        self._barrier(g, kind[0])
        entries = list(g.slots)
        self._barrier(g, kind[0])  # everyone has read the slots before any rank writes its next call's input
        kinds = {e[0] for e in entries}
        if len(kinds) != 1:
            raise RuntimeError(f"ranks of {g!r} called different collectives: {sorted(map(str, kinds))}")
        return [e[1] for e in entries]

    def _record(self, kind: str, detail: Any = None) -> None:
        with self.cond:
            self.calls.append((kind, self.rank, detail))

    def all_reduce(
        self, tensor: torch.Tensor, op: Any = dist.ReduceOp.SUM, group: Any = None, async_op=False
    ):
        if not torch.is_tensor(tensor):
            raise TypeError(f"all_reduce needs a tensor, got {type(tensor).__name__}")
        name = next((k for k in _OPS if op == getattr(dist.ReduceOp, k)), None) if op is not None else None
        if name is None:
            raise TypeError(f"all_reduce: unsupported op {op!r}")
        self._record("all_reduce", (name, tensor.device, tuple(tensor.shape)))
        parts = self._meet(group, ("all_reduce", name, tuple(tensor.shape)), tensor.detach().clone())
        if tensor.device.type != "meta":
            tensor.copy_(_OPS[name](torch.stack(parts), 0))
        return _Work() if async_op else None

    def all_gather(
        self, tensor_list: list[torch.Tensor], tensor: torch.Tensor, group: Any = None, async_op=False
    ):
        self._record("all_gather", tuple(tensor.shape))
        parts = self._meet(group, ("all_gather", tuple(tensor.shape)), tensor.detach().clone())
        if len(tensor_list) != len(parts):
            raise ValueError(f"all_gather: {len(tensor_list)} output tensors for a group of {len(parts)}")
        for out, part in zip(tensor_list, parts):
            out.copy_(part)
        return _Work() if async_op else None

    def gather(
        self,
        tensor: torch.Tensor,
        gather_list: list | None = None,
        dst: int = 0,
        group: Any = None,
        async_op=False,
    ):
        g = self._group(group)
        if dst not in g.members:
            raise ValueError(f"gather: dst {dst} (a global rank) is not in {g!r}")
        self._record("gather", dst)
        parts = self._meet(group, ("gather", dst, tuple(tensor.shape)), tensor.detach().clone())
        if self.rank == dst:
            if gather_list is None or len(gather_list) != len(parts):
                raise ValueError("gather: the destination needs a gather_list with one tensor per rank")
            for out, part in zip(gather_list, parts):
                out.copy_(part)
        elif gather_list is not None:
            raise ValueError("gather: gather_list must be None on a rank that is not dst")
        return _Work() if async_op else None

    def barrier(self, group: Any = None, **_: Any) -> None:
        self._meet(group, ("barrier",), None)

    # ---- point to point
    def _mailbox(self, group: Any, src: int, dst: int) -> collections.deque:
        g = self._group(group)
        for r, what in ((src, "source"), (dst, "destination")):
            if r not in g.members:
                raise ValueError(f"the {what} {r} (a global rank) is not in {g!r}")
        return self.mailboxes[(self.groups.index(g), src, dst)]

    def isend(self, tensor: torch.Tensor, dst: int, group: Any = None, tag: int = 0) -> _Work:
        if not torch.is_tensor(tensor):
            raise TypeError(f"isend needs a tensor, got {type(tensor).__name__}")
        if dst == self.rank:
            raise ValueError("isend to itself")
        self._record("isend", dst)
        with self.cond:
            self._mailbox(group, self.rank, dst).append((tag, tensor.detach().clone()))
            self.progress += 1
            self.cond.notify_all()
        return _Work()

    def recv(self, tensor: torch.Tensor, src: int | None = None, group: Any = None, tag: int = 0) -> int:
        if not torch.is_tensor(tensor):
            raise TypeError(f"recv needs a tensor, got {type(tensor).__name__}")
        if src is None or src == self.rank:
            raise ValueError(f"recv: the fake needs an explicit source other than itself, got {src}")
        self._record("recv", src)
        with self.cond:
            box = self._mailbox(group, src, self.rank)
            self._block(lambda: bool(box), (src,), f"recv from {src}")
            got_tag, got = box.popleft()
        if got_tag != tag or got.shape != tensor.shape or got.dtype != tensor.dtype:
            raise RuntimeError(
                f"recv: got tag {got_tag} {tuple(got.shape)} {got.dtype}, expected {tuple(tensor.shape)} {tensor.dtype}"
            )
        tensor.copy_(got)
        return src

    # ---- running
    FAKED = (
        "is_initialized",
        "get_rank",
        "get_world_size",
        "get_global_rank",
        "get_backend",
        "all_reduce",
        "all_gather",
        "gather",
        "isend",
        "recv",
        "barrier",
    )

    def install(self, monkeypatch: Any) -> FakeWorld:
        """Replace ``torch.distributed``'s functions by this world's (every module's ``dist`` is that module)."""
        assert not dist.is_initialized(), "a real process group is up: the fake would hide it"
        for name in self.FAKED:
            monkeypatch.setattr(dist, name, getattr(self, name))
        return self

    def run(self, fn: Callable[[int], Any]) -> list[Any]:
        """``[fn(0), …, fn(W − 1)]``, each on its own thread as rank ``r``; the first root-cause error is raised."""
        results: list[Any] = [None] * self.size
        errors: list[BaseException | None] = [None] * self.size
        with self.cond:  # a world can run several functions one after the other
            if self.abort or any(g.arrived for g in self.groups) or any(self.mailboxes.values()):
                raise RuntimeError(
                    "this FakeWorld was left failed or mid-call by its last run: make a new one"
                )
            self.finished.clear()

        def body(rank: int) -> None:
            self.local.rank = rank
            try:
                results[rank] = fn(rank)
            except BaseException as e:  # noqa: BLE001 - reported by run()
                errors[rank] = e
                with self.cond:
                    self.abort = True
            finally:
                with self.cond:
                    self.finished.add(rank)
                    self.progress += 1
                    self.cond.notify_all()

        threads = [threading.Thread(target=body, args=(r,), daemon=True) for r in range(self.size)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(self.timeout * 2)
        if any(t.is_alive() for t in threads):
            with self.cond:
                self.abort = True
                self.cond.notify_all()
            raise TimeoutError("a rank of the FakeWorld did not finish")
        failed = [e for e in errors if e is not None]
        real = [e for e in failed if not isinstance(e, Aborted)]
        if failed:
            raise (real or failed)[0]
        return results
