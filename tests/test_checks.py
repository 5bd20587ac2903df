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


def test_asked_bytes_reads_both_of_torchs_messages():
    """The bytes a failed allocation asked for: the CPU allocator's "allocate N bytes" and the CUDA caching
    allocator's "Tried to allocate 2.50 GiB" (value × 1024^unit); None when the message names no size."""
    cpu = RuntimeError("[enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: not enough memory: you tried to allocate 123456 bytes.")
    assert _checks.asked_bytes(cpu) == 123456
    cuda = RuntimeError("CUDA out of memory. Tried to allocate 2.50 GiB (GPU 0; 79.15 GiB total capacity)")
    assert _checks.asked_bytes(cuda) == int(2.5 * 1024**3)
    assert _checks.asked_bytes(RuntimeError("tried to allocate 512 KiB")) == 512 * 1024
    assert _checks.asked_bytes(RuntimeError("Tried to allocate 7 B")) == 7
    assert _checks.asked_bytes(MemoryError("out of memory")) is None
