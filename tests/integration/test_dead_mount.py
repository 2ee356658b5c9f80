"""A command whose start hangs on a dead mount (its program, its #! interpreter or its directory on
an NFS or FUSE mount whose server is gone): scvd goes on answering everyone else.

Popen returns once the child has exec'd. It ran on the event loop, so one such call stopped every
client until the mount came back, and its cancel could not even be read.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from conftest import is_guardian
from harness import wait_until
from hung_mount import hung_mount
from scvd import protocol as p
from scvd.proctree import scan_processes


def make_tool(home: Path, name: str, script: str) -> Path:
    """A script tool that runs unasked (read_only), its executable `script`."""
    folder = home / "tools" / "script" / name
    folder.mkdir(parents=True)
    (folder / "tool.json").write_text(json.dumps({
        "description": "Count the words in a text given as argument.\nUse for quick statistics; bash for anything else.",
        "risk": "read_only", "parameters": {"type": "object", "required": ["text"], "properties": {
            "text": {"type": "string", "description": "The text to count, from the user's message, e.g. 'a b c'."}}}}))
    (folder / "run").write_text(script)
    (folder / "run").chmod(0o700)
    return folder


def children(pid: int) -> list[int]:
    """The daemon's children but its guardian: a command being started, or running."""
    return [q.pid for q in scan_processes().values() if q.ppid == pid and not is_guardian(q.pid)]


@pytest.mark.timeout(90)
def test_a_start_hung_on_a_dead_mount_holds_up_no_other_client_and_ends_at_its_cancel_or_timeout(
        make_daemon, scv_home, workspace, tmp_path):
    with hung_mount(tmp_path / "dead") as dead:
        # the script is here; the interpreter its #! line names is below the dead mount
        folder = make_tool(scv_home, "stuck", f"#!{dead.path}/python3\nprint(1)\n")
        (workspace / "a.txt").write_text("hi\n")
        d = make_daemon(home=scv_home)
        with d.client() as c:
            session = c.open_session(workspace)
            call_id = c.start_call(session, "script_stuck", {"text": "x"})
            wait_until(lambda: children(d.proc.pid), what="the script's start")
            with d.client(timeout=5) as other:  # the old runner: no answer at all (DaemonNotAnswering)
                assert other.request(p.Ping) is not None
                read = other.call(other.open_session(workspace), "read", {"path": "a.txt"})
                assert read.ok and read.result["content"] == "hi\n"
            c.request(p.CallCancel, call_id=call_id)
            cancelled = c.wait_call(call_id)
            assert cancelled.error.kind == "cancelled"
            said = cancelled.error.message
            assert said.startswith(f"call {call_id} was cancelled: call.cancel from "), said
            assert (f"; the command could not be started: {folder / 'run'}, its #! interpreter or its working "
                    f"directory {workspace} did not answer for ") in said, said
            # the child stuck in exec got SIGKILL (a killable wait), so its Popen came back and it was reaped
            wait_until(lambda: not children(d.proc.pid), what="the stuck start to be killed and reaped")

            timed = c.call(session, "script_stuck", {"text": "x"}, timeout_seconds=1)
            assert timed.error.kind == "timeout"
            assert timed.error.message == (
                f"the command could not be started: {folder / 'run'}, its #! interpreter or its working directory "
                f"{workspace} did not answer within its timeout of 1 s (a hung NFS or FUSE mount?), so nothing "
                "of it ran"), timed.error
            assert "umount -l" in timed.error.hint
            wait_until(lambda: not children(d.proc.pid), what="the stuck start to be killed and reaped")
        dead.release()
        assert d.stop(signal.SIGTERM) == 0
