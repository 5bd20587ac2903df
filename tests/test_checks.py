"""meanfield._checks: the one-line refusals of bad input, and the memory check before an allocation."""

import pytest

from meanfield import _checks


def test_the_memory_check_reads_the_memory_only_for_a_request_of_64_mib_or_more(monkeypatch):
    """A request under ``UNCHECKED_BYTES`` passes without reading the free memory (a small ``simulate`` call paid
    30 µs for it); one at the bound is refused where the memory is short (the control: the check is not off)."""
    reads = []

    def nothing_free(device):
        reads.append(device)
        return 0, 1 << 40

    monkeypatch.setattr(_checks, "memory_available", nothing_free)
    _checks.check_memory("a small tensor", _checks.UNCHECKED_BYTES - 1, "cpu", "ask for less")
    assert reads == []
    with pytest.raises(ValueError, match=r"a large tensor need 64 MiB, and cpu has 0 B of memory available"):
        _checks.check_memory("a large tensor", _checks.UNCHECKED_BYTES, "cpu", "ask for less")
    assert reads == ["cpu"]
