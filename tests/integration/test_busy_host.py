"""A host with thousands of processes and many running calls: scvd goes on answering.

What a running call owns is found by scanning /proc, every process on the host. One scan per
call on the event loop stalled every client (0.5 s with 10,000 processes); the running calls
share one scan, read on a thread of the daemon's own. The loop's thread is the daemon's main
thread, and the kernel counts each thread's reads (/proc/PID/task/TID/io).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Iterator

import pytest

from conftest import is_guardian, wait_pending
from scvd import protocol as p
from scvd.proctree import scan_processes

CROWD = 3000  # sleeping processes besides scvd's
CALLS = 20


@pytest.fixture
def crowd() -> Iterator[int]:
    """CROWD sleeping processes in a process group of their own, killed afterwards."""
    proc = subprocess.Popen(
        ["/bin/sh", "-c", f"i=0; while [ $i -lt {CROWD} ]; do sleep 600 & i=$((i + 1)); done; echo up; wait"],
        stdout=subprocess.PIPE, start_new_session=True)
    try:
        assert proc.stdout.readline() == b"up\n"
        yield proc.pid
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        proc.stdout.close()


def reads(pid: int, tid: int | None = None) -> int:
    """How many read calls the daemon made (one thread's with `tid`)."""
    path = Path(f"/proc/{pid}/io" if tid is None else f"/proc/{pid}/task/{tid}/io")
    return int(path.read_text().split("syscr:")[1].split()[0])


def io_counted(d) -> None:
    if not Path(f"/proc/{d.proc.pid}/task/{d.proc.pid}/io").exists():
        pytest.skip("this kernel keeps no per-thread I/O counts (CONFIG_TASK_IO_ACCOUNTING)")


def test_a_quick_call_is_answered_while_many_long_ones_run_among_thousands_of_processes(
        make_daemon, workspace, crowd):
    d = make_daemon()
    io_counted(d)
    (workspace / "a.txt").write_text("hi\n")
    with d.client(name="bridge") as c, d.client(name="person") as person:
        calls = [c.start_call(c.open_session(workspace), "bash", {"command": "sleep 600"}) for _ in range(CALLS)]
        for pending in wait_pending(person, CALLS):
            person.request(p.ApprovalDecide, approval_id=pending.approval_id, decision="approve")
        started: set[str] = set()
        while len(started) < CALLS:
            event = c.next_event()
            if isinstance(event, p.CallStarted):
                started.add(event.call_id)
        loop_before, all_before = reads(d.proc.pid, d.proc.pid), reads(d.proc.pid)
        while reads(d.proc.pid) - all_before < 2 * CROWD:  # the crowd's stat files read twice over
            time.sleep(0.05)
        loop_reads = reads(d.proc.pid, d.proc.pid) - loop_before
        done = c.call(c.open_session(workspace), "read", {"path": "a.txt"})
        assert done.ok and done.result["content"] == "hi\n"
        assert c.status().running_calls == CALLS  # the long ones still run
        assert loop_reads < CROWD  # the loop read not even one scan's worth

        for call_id in calls:
            c.request(p.CallCancel, call_id=call_id)
        assert all(c.wait_call(call_id).error.kind == "cancelled" for call_id in calls)
    left = [q.pid for q in scan_processes().values() if q.ppid == d.proc.pid and not is_guardian(q.pid)]
    assert left == []  # every call's sleep killed and reaped


def test_the_end_of_each_call_leaves_the_scan_to_the_thread(make_daemon, workspace, crowd):
    """A call's end looks for what it left (a scan) and for exited orphans to reap (one more, on
    the loop, at every end): now only when some child of scvd has exited."""
    d = make_daemon()
    io_counted(d)
    with d.client(name="bridge") as c, d.client(name="person") as person:
        session = c.open_session(workspace)
        first = c.start_call(session, "bash", {"command": "true"})
        pending = wait_pending(person)[0]
        person.request(p.ApprovalDecide, approval_id=pending.approval_id, decision="approve", scope="session")
        assert c.wait_call(first).ok
        before = reads(d.proc.pid, d.proc.pid)
        for _ in range(5):
            assert c.call(session, "bash", {"command": "true"}).ok
        assert reads(d.proc.pid, d.proc.pid) - before < CROWD
