"""The daemon's worker threads share one malloc arena (issue 9, idle RSS): with glibc's default of an
arena per thread that met a locked heap, each kept a few MiB of a burst's freed pages, and a burst of
large reads left the idle daemon at about 60 MiB instead of 30 (bench/side_by_side.py's rss_mib)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

ARENA_SPAN = 64 << 20  # a thread arena's heap: 64 MiB of address space, aligned to its size


def thread_arenas(pid: int) -> list[str]:
    """The reserved (---p) tails of thread arenas in the process's maps: each ends at a 64 MiB boundary."""
    found = []
    for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
        fields = line.split()
        start, end = (int(x, 16) for x in fields[0].split("-"))
        if len(fields) == 5 and fields[1] == "---p" and end % ARENA_SPAN == 0 and end - start >= 1 << 20:
            found.append(line)
    return found


def reads(d: Any, workspace: Path, errors: list[BaseException]) -> None:
    try:
        with d.client(name="burst") as c:
            sid = c.open_session(workspace)
            for i in range(4):
                c.call(sid, "read", {"path": f"big{i}.txt", "limit": 65536})
    except BaseException as exc:  # noqa: BLE001  # reported by the test
        errors.append(exc)


def test_a_burst_of_large_reads_leaves_no_arena_per_worker_thread(daemon: Any, workspace: Path) -> None:
    for i in range(4):  # distinct files: none of them is hashed from memory (fs._digests)
        (workspace / f"big{i}.txt").write_text(f"line {i} of text\n" * 200_000)  # 3 MiB each: read by a worker
    errors: list[BaseException] = []
    clients = [threading.Thread(target=reads, args=(daemon, workspace, errors)) for _ in range(12)]
    for t in clients:
        t.start()
    for t in clients:
        t.join()
    assert not errors, errors
    assert thread_arenas(daemon.proc.pid) == [], (
        "the daemon's worker threads made malloc arenas of their own, which keep a burst's freed pages "
        "resident; heap.one_arena() should have run before the first thread")
