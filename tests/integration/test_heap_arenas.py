"""The daemon's worker threads share one malloc arena (issue 9, idle RSS): with glibc's default of an
arena per thread that met a locked heap, each kept a few MiB of a burst's freed pages, and a burst of
large reads left the idle daemon at about 60 MiB instead of 30 (bench/side_by_side.py's rss_mib). And the
pages such a burst freed in the one heap go back once the daemon is quiet again."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from harness import make_wrapped  # noqa: F401 (a fixture)

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


def burst(daemon: Any, workspace: Path) -> None:
    """12 clients at once, each reading 64 KiB of each of four 3 MiB files (hashed whole on a worker)."""
    for i in range(4):  # distinct files: none of them is hashed from memory (fs._digests)
        (workspace / f"big{i}.txt").write_text(f"line {i} of text\n" * 200_000)  # 3 MiB each: read by a worker
    errors: list[BaseException] = []
    clients = [threading.Thread(target=reads, args=(daemon, workspace, errors)) for _ in range(12)]
    for t in clients:
        t.start()
    for t in clients:
        t.join()
    assert not errors, errors


def test_a_burst_of_large_reads_leaves_no_arena_per_worker_thread(daemon: Any, workspace: Path) -> None:
    burst(daemon, workspace)
    assert thread_arenas(daemon.proc.pid) == [], (
        "the daemon's worker threads made malloc arenas of their own, which keep a burst's freed pages "
        "resident; heap.one_arena() should have run before the first thread")


def heap_rss_kib(pid: int) -> int:
    """The resident part of the brk heap, where malloc keeps what the workers' reads freed."""
    smaps = Path(f"/proc/{pid}/smaps").read_text().split("\n")
    for i, line in enumerate(smaps):
        if line.endswith("[heap]"):
            return next(int(x.split()[1]) for x in smaps[i + 1:] if x.startswith("Rss:"))
    return 0


def test_the_pages_a_burst_freed_go_back_once_no_call_has_run_for_a_while(make_wrapped: Any, workspace: Path) -> None:
    daemon = make_wrapped(env={"HARNESS_HEAP_QUIET_SECONDS": "6"})  # the sample below comes first, even under load
    burst(daemon, workspace)
    after_burst = heap_rss_kib(daemon.proc.pid)  # the burst freed 0.5-6 MiB of it; malloc keeps them
    deadline = time.monotonic() + 20
    while heap_rss_kib(daemon.proc.pid) > after_burst - 128 and time.monotonic() < deadline:
        time.sleep(0.1)
    now = heap_rss_kib(daemon.proc.pid)
    assert now <= after_burst - 128, (
        f"the daemon's heap stayed at {now} KiB resident ({after_burst} KiB right after the burst): the pages "
        "its calls freed were not given back once no call had run for QUIET_SECONDS (heap.WhenQuiet)")
