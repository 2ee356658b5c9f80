"""A killed agent leaves nothing behind: after a cancelled or timed-out agent call, no process of it
runs and no zombie child of the daemon waits for the next call to be reaped."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from adapters_support import FAKE_AGENT_CONFIG, make_fake_bin
from conftest import DaemonProc, is_guardian
from harness import wait_until
from scvd import protocol as p
from scvd.proctree import scan_processes


@pytest.fixture
def tree_daemon(make_daemon, tmp_path: Path) -> DaemonProc:
    """A daemon whose fake agents start a tree of helpers that ignore SIGTERM."""
    fake_bin = make_fake_bin(tmp_path / "bin")
    (tmp_path / "agent-log").mkdir()
    return make_daemon(FAKE_AGENT_CONFIG, env={
        "PATH": f"{fake_bin}{os.pathsep}{os.environ.get('PATH', os.defpath)}",
        "FAKE_AGENT_LOG": str(tmp_path / "agent-log"), "FAKE_AGENT_MODE": "tree",
    })


def children(pid: int) -> list[str]:
    """The daemon's child processes, zombies included, as `pid state` (not its guardian)."""
    return [f"{q.pid} {q.state}" for q in scan_processes().values() if q.ppid == pid and not is_guardian(q.pid)]


def approve_until_done(c, call_id: str, pid_file: Path, *, cancel: bool) -> p.CallCompleted:
    while True:
        event = c.next_event()
        if isinstance(event, p.ApprovalRequested) and event.call_id == call_id:
            c.request(p.ApprovalDecide, approval_id=event.approval_id, decision="approve")
        elif isinstance(event, p.CallStarted) and cancel:
            wait_until(lambda: pid_file.exists() and pid_file.read_text(), what="the agent's helpers")
            c.request(p.CallCancel, call_id=call_id)
        elif isinstance(event, p.CallCompleted) and event.call_id == call_id:
            return event


@pytest.mark.parametrize("how", ["cancelled", "timeout"])
def test_a_killed_agent_leaves_no_zombie_and_no_process(tree_daemon: DaemonProc, workspace: Path, how: str):
    log = Path(tree_daemon.env["FAKE_AGENT_LOG"])
    with tree_daemon.client(approver=True) as c:
        session = c.open_session(workspace)
        timeout = 1 if how == "timeout" else 600
        call_id = c.start_call(session, "agent_pi", {"prompt": "go", "timeout_seconds": timeout})
        done = approve_until_done(c, call_id, log / "pid", cancel=how == "cancelled")
        assert not done.ok and done.error.kind == how, done
        agent = int((log / "pid").read_text())
        daemon = tree_daemon.proc.pid
        # no further call comes to reap anything: what is left must go with this call's end
        wait_until(lambda: not children(daemon), what=f"the daemon's children to be reaped: {children(daemon)}")
        assert not os.path.exists(f"/proc/{agent}")
        assert c.status().running_calls == 0
