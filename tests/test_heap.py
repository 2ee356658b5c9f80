"""heap.trim(): pages the start allocated and freed go back to the system (issue 9, idle RSS)."""

from __future__ import annotations

import re
from pathlib import Path

from scvd import heap


def resident_mib() -> float:
    return int(re.search(r"VmRSS:\s+(\d+)", Path("/proc/self/status").read_text()).group(1)) / 1024


def test_freed_heap_pages_are_given_back() -> None:
    held = [bytes(16 << 10) for _ in range(2000)]  # 32 MiB from the C heap (each below the mmap threshold)
    keep = bytes(16 << 10)  # allocated after them: the heap's top stays in use, so free() cannot shrink it
    del held  # freed into the heap below `keep`: malloc keeps their pages until asked
    before = resident_mib()
    assert heap.trim() is True
    assert before - resident_mib() > 24, "most of the 32 MiB freed should have left the resident set"
    assert len(keep) == 16 << 10


def test_one_arena_leaves_a_malloc_arena_max_the_person_set_to_glibc() -> None:
    assert heap.one_arena({"MALLOC_ARENA_MAX": "4"}) is False  # glibc read it at start; theirs stands
    assert heap.one_arena({"GLIBC_TUNABLES": "glibc.malloc.check=0:glibc.malloc.arena_max=4"}) is False
    assert heap.one_arena({}) is True  # glibc: mallopt(M_ARENA_MAX, 1) took
