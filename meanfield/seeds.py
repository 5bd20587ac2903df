"""Independent random streams of one run, derived from its seed."""

from __future__ import annotations

import hashlib

__all__ = ["derive_seed"]


def derive_seed(seed: int, stream: str) -> int:
    """An independent seed for one random stream (``"init"``, ``"data"``, ``"batches"``, ``"noise"``) of a run.

    ``int(sha256(f"{seed}/{stream}"))`` reduced to 62 bits: the streams of one run, and the same stream of
    two seeds, never share a generator sequence (which ``manual_seed(seed)`` everywhere would: the first
    initialisation draws would equal the first data draws).
    """
    digest = hashlib.sha256(f"{seed}/{stream}".encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 2
