"""An agent call's looks at files as it starts and fails (the directory it starts in, its CLI's #! line),
through a real daemon: they say what they said, and never on the daemon's loop, where a hung mount
(NFS, FUSE) would hold every client."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from adapters_support import FAKE_AGENT, FAKE_AGENT_CONFIG, make_fake_bin
from conftest import wait_pending
from scvd import protocol as p
from scvd.adapters import tools as agent_tools


@pytest.fixture
def looks(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """(what, the thread it ran on) of each look, the real function doing the looking."""
    seen: list[tuple[str, str]] = []
    for name in ("missing_interpreter", "open_cwd"):
        real = getattr(agent_tools, name)
        monkeypatch.setattr(agent_tools, name, lambda *a, _real=real, _name=name: (
            seen.append((_name, threading.current_thread().name)) or _real(*a)))
    return seen


def call_approved(daemon, workspace: Path, agent: str, **arguments) -> p.CallCompleted:
    with daemon.client(name="bridge") as c, daemon.client(name="person") as person:
        call_id = c.start_call(c.open_session(workspace), f"agent_{agent}", {"prompt": "go", **arguments})
        pending = [a for a in wait_pending(person) if a.call_id == call_id][0]
        person.request(p.ApprovalDecide, approval_id=pending.approval_id, decision="approve")
        return c.wait_call(call_id)


def on_pool(looks: list[tuple[str, str]]) -> bool:
    return all(thread.startswith("scvd-worker") for _, thread in looks)


def test_a_cli_whose_interpreter_is_gone_is_named_by_a_look_off_the_loop(make_inproc, tmp_path, workspace,
                                                                        monkeypatch, looks):
    """Its #! names an absolute node since moved: the exec fails as if the CLI were missing, and the
    look at its first line that says which is missing read it on the daemon's loop, as did the look
    for the directory it starts in."""
    fake_bin = make_fake_bin(tmp_path / "bin")
    (fake_bin / "claude").unlink()
    (fake_bin / "claude").symlink_to(FAKE_AGENT.parent / "needs-a-moved-node")
    monkeypatch.setenv("PATH", f"{fake_bin}{os.pathsep}{os.environ['PATH']}")
    (workspace / "sub").mkdir()
    done = call_approved(make_inproc(FAKE_AGENT_CONFIG), workspace, "claude", cwd="sub")
    assert not done.ok and done.error.kind == "failed", done
    assert done.error.message.startswith(f"agent_claude: cannot start {fake_bin / 'claude'}; nothing ran: claude "
                                         "needs /nonexistent/scvd-test-node/bin/node, which its first line names")
    assert sorted(name for name, _ in looks) == ["missing_interpreter", "open_cwd"]
    assert on_pool(looks), looks


def test_a_failed_run_looks_at_its_clis_first_line_off_the_loop(make_inproc, tmp_path, workspace, monkeypatch,
                                                              looks):
    """A run that fails with nothing its output explains gets its CLI's #! line looked at (a missing
    interpreter is the likeliest cause in the sandbox), once the run has ended."""
    fake_bin = make_fake_bin(tmp_path / "bin")
    monkeypatch.setenv("PATH", f"{fake_bin}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_AGENT_MODE", "fail")
    monkeypatch.setenv("FAKE_AGENT_LOG", str(tmp_path / "agent-log"))
    done = call_approved(make_inproc(FAKE_AGENT_CONFIG), workspace, "pi")
    assert done.ok and done.result["exit_code"] == 2 and "hint" not in done.result, done
    assert [name for name, _ in looks] == ["open_cwd", "missing_interpreter"]
    assert on_pool(looks), looks
