"""Approvals over the real socket: routing, first decision wins, scopes, timeouts, drops, who may decide."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from harness import wait_until
from helpers.probe_tools import flush, requested, resolved, rig, wait_event, wait_idle  # noqa: F401 (rig is a fixture)
from scvd import errors, protocol as p
from scvd.chat.pipeline import NO_APPROVER_BRIDGE, NO_APPROVER_SPAWNED

from conftest import start_child_client

ROOT = Path(__file__).resolve().parents[2]


def decide(client, approval_id: str, decision: str = "approve", **kw):
    return client.request(p.ApprovalDecide, approval_id=approval_id, decision=decision, **kw)


@dataclass
class Pending:
    """A watcher, an owner with a session, and the owner's probe_touch waiting for approval."""

    w: Any
    owner: Any
    session: str
    call_id: str
    request: p.ApprovalRequested


def pending_touch(rg, workspace, path: str = "a", name: str = "pytest") -> Pending:
    w = rg.watcher()
    owner = rg.client(name=name)
    session = owner.open_session(workspace)
    call_id = owner.start_call(session, "probe_touch", {"path": path})
    return Pending(w, owner, session, call_id, requested(w, call_id))


@pytest.mark.one_loop
def test_request_reaches_owner_and_every_watcher_and_the_first_decision_wins(rig, workspace):
    rg = rig()
    w1, w2 = rg.watcher("w1"), rg.watcher("w2")
    bystander = rg.client(name="bystander")
    owner = rg.client(name="owner", approver=True)
    session = owner.open_session(workspace)
    call_id = owner.start_call(session, "probe_touch", {"path": "a.txt"})

    seen = [requested(c, call_id) for c in (owner, w1, w2)]
    assert len({r.approval_id for r in seen}) == 1
    r = seen[0]
    assert (r.tool, r.risk, r.session) == ("probe_touch", "filesystem", session)
    assert r.workspace == os.path.realpath(workspace)
    assert "probe_touch" in r.summary and r.details == {"arguments": {"path": "a.txt", "risk": "filesystem"}}
    assert r.expires_at is not None

    decide(w1, r.approval_id, "approve")
    with pytest.raises(errors.ApprovalNotFound):
        decide(w2, r.approval_id, "deny", reason="too late")
    for c in (owner, w1, w2):
        done = resolved(c, r.approval_id)
        assert (done.state, done.decision, done.call_id) == ("approved", "approve", call_id)
        assert "w1" in done.decided_by and f"pid {os.getpid()}" in done.decided_by
    completed = owner.wait_call(call_id)
    assert completed.ok, completed.error
    assert (workspace / "a.txt").exists()
    assert not [e for e in flush(bystander) if isinstance(e, (p.ApprovalRequested, p.ApprovalResolved))]


@pytest.mark.one_loop
def test_an_owner_that_also_watches_is_told_once(rig, workspace):
    rg = rig()
    owner = rg.client(approver=True)
    owner.request(p.ApprovalsWatch)
    call_id = owner.start_call(owner.open_session(workspace), "probe_touch", {"path": "a"})
    r = requested(owner, call_id)
    decide(owner, r.approval_id, "approve")
    owner.wait_call(call_id)
    events = flush(owner)
    assert [type(e).__name__ for e in events if getattr(e, "approval_id", None) == r.approval_id] == \
        ["ApprovalResolved"], "the request was consumed above; each event must come exactly once"


@pytest.mark.one_loop
def test_owner_that_is_not_an_approver_is_not_asked(rig, workspace):
    rg = rig()
    t = pending_touch(rg, workspace, "a.txt", name="plain")
    w, owner, call_id, r = t.w, t.owner, t.call_id, t.request
    assert not [e for e in flush(owner) if isinstance(e, p.ApprovalRequested)]
    decide(w, r.approval_id, "deny", reason="not in this repo")
    done = owner.wait_call(call_id)
    assert not done.ok and done.error.kind == "denied"
    assert "not in this repo" in done.error.message and "denied" in done.error.message
    assert not (workspace / "a.txt").exists()


@pytest.mark.one_loop
def test_approvals_list_shows_summary_and_details(rig, workspace):
    rg = rig()
    t = pending_touch(rg, workspace, "b.txt")
    w, owner, call_id, r = t.w, t.owner, t.call_id, t.request
    listed = w.request(p.ApprovalsList).approvals
    assert [(a.approval_id, a.summary, a.details) for a in listed] == [(r.approval_id, r.summary, r.details)]
    decide(w, r.approval_id, "deny")
    owner.wait_call(call_id)
    assert w.request(p.ApprovalsList).approvals == []


def ask_and(w, owner, session: str, tool: str, args: dict, decision: str, **kw) -> p.CallCompleted:
    call_id = owner.start_call(session, tool, args)
    r = requested(w, call_id)
    decide(w, r.approval_id, decision, **kw)
    return owner.wait_call(call_id)


def runs_unasked(w, owner, session: str, tool: str, args: dict) -> p.CallCompleted:
    done = owner.call(session, tool, args)
    assert not [e for e in flush(w) if isinstance(e, p.ApprovalRequested)]
    return done


@pytest.mark.one_loop
def test_session_grant_covers_that_tool_at_that_risk_in_that_session_only(rig, workspace):
    rg = rig()
    w = rg.watcher()
    owner = rg.client()
    session = owner.open_session(workspace)
    assert ask_and(w, owner, session, "probe_touch", {"path": "a"}, "approve", scope="session").ok
    flush(w)
    # the same tool at the same risk now runs unasked in this session
    assert runs_unasked(w, owner, session, "probe_touch", {"path": "b"}).ok
    # the same tool at another risk asks
    assert ask_and(w, owner, session, "probe_touch", {"path": "c", "risk": "process"}, "deny").error
    # another tool asks
    assert ask_and(w, owner, session, "probe_sleep", {"seconds": 0}, "deny").error.kind == "denied"
    # another session of the same connection asks
    other = owner.open_session(workspace)
    assert ask_and(w, owner, other, "probe_touch", {"path": "d"}, "deny").error.kind == "denied"
    # another connection's session asks
    stranger = rg.client(name="stranger")
    theirs = stranger.open_session(workspace)
    assert ask_and(w, stranger, theirs, "probe_touch", {"path": "e"}, "deny").error.kind == "denied"
    assert sorted(os.listdir(workspace)) == ["a", "b"]


def test_a_session_grant_holds_when_its_call_is_cancelled_in_the_same_turn(rig, workspace):
    """approval.resolved said scope session: the grant stands though its own call was cancelled
    before it could resume (the decision and the cancel in one write)."""
    rg = rig()
    w = rg.watcher()
    owner = rg.client(approver=True)
    session = owner.open_session(workspace)
    call_id = owner.start_call(session, "probe_touch", {"path": "a"})
    r = requested(w, call_id)
    owner.sock.sendall(p.encode(p.ApprovalDecide(id="d", approval_id=r.approval_id, decision="approve",
                                                 scope="session"))
                       + p.encode(p.CallCancel(id="x", call_id=call_id)))
    assert resolved(w, r.approval_id).scope == "session"
    assert owner.wait_call(call_id).error.kind == "cancelled"
    assert runs_unasked(w, owner, session, "probe_touch", {"path": "b"}).ok
    assert sorted(os.listdir(workspace)) == ["b"]


def test_a_decision_that_comes_after_the_cancel_of_its_call_finds_the_request_gone(rig, workspace):
    """call.cancel, then approval.decide in the same write: the request went with its call, so the
    decision is too late (approval_not_found), grants nothing, and nobody is told it was approved."""
    t = pending_touch(rig(), workspace)
    w, owner, session, call_id, r = t.w, t.owner, t.session, t.call_id, t.request
    owner.sock.sendall(p.encode(p.CallCancel(id="x", call_id=call_id))
                       + p.encode(p.ApprovalDecide(id="d", approval_id=r.approval_id, decision="approve",
                                                   scope="session")))
    with pytest.raises(errors.ApprovalNotFound):
        owner.wait_answer("d")
    done = resolved(w, r.approval_id)
    assert (done.state, done.decided_by) == ("cancelled", "scvd")
    assert owner.wait_call(call_id).error.kind == "cancelled"
    assert ask_and(w, owner, session, "probe_touch", {"path": "b"}, "deny").error.kind == "denied"
    assert os.listdir(workspace) == []


@pytest.mark.one_loop
def test_a_denied_session_scope_grants_nothing(rig, workspace):
    rg = rig()
    t = pending_touch(rg, workspace)
    w, owner, session, call_id, r = t.w, t.owner, t.session, t.call_id, t.request
    decide(w, r.approval_id, "deny", scope="session")
    assert resolved(w, r.approval_id).scope == "once"
    owner.wait_call(call_id)
    assert ask_and(w, owner, session, "probe_touch", {"path": "b"}, "deny").error.kind == "denied"


def test_unanswered_request_expires_as_denied_with_the_reason(rig, workspace):
    rg = rig("[approvals]\ntimeout_seconds = 0.5\n")
    t = pending_touch(rg, workspace)
    w, owner, call_id, r = t.w, t.owner, t.call_id, t.request
    done = resolved(w, r.approval_id)
    assert (done.state, done.decision, done.decided_by) == ("expired", "deny", "scvd")
    assert "approvals.timeout_seconds" in done.reason
    completed = owner.wait_call(call_id)
    assert completed.error.kind == "denied" and "approvals.timeout_seconds" in completed.error.message
    with pytest.raises(errors.ApprovalNotFound):
        decide(w, r.approval_id, "approve")
    assert not (workspace / "a").exists()


def test_a_disconnecting_requester_drops_its_pending_approvals(rig, workspace):
    rg = rig()
    w = rg.watcher()
    owner = rg.client(name="leaver")
    session = owner.open_session(workspace)
    ids = [owner.start_call(owner.open_session(workspace) if i else session, "probe_touch", {"path": f"{i}"})
           for i in range(2)]
    pending = [requested(w, call_id).approval_id for call_id in ids]
    keeper = rg.client(name="keeper")
    kept_call = keeper.start_call(keeper.open_session(workspace), "probe_touch", {"path": "kept"})
    kept = requested(w, kept_call).approval_id
    owner.close()
    for approval_id in pending:
        done = resolved(w, approval_id)
        assert done.state == "dropped" and "disconnected" in done.reason
    assert [a.approval_id for a in w.request(p.ApprovalsList).approvals] == [kept]
    with pytest.raises(errors.ApprovalNotFound):
        decide(w, pending[0], "approve")
    decide(w, kept, "approve")
    assert keeper.wait_call(kept_call).ok


def watchers(daemon: Any) -> int:
    """The daemon's open watching connections (read from the test's thread: a set the loop changes)."""
    try:
        return sum(c.watcher and not c.closed for c in list(daemon.connections))
    except RuntimeError:  # changed size while copied
        return -1


def test_a_turns_request_is_denied_once_the_last_watcher_leaves_and_a_plain_call_keeps_waiting(rig, workspace):
    rg = rig()
    first, last = rg.watcher(name="first"), rg.watcher(name="last")
    owner = rg.client(name="bridge")  # not an approver: only the watchers could decide
    turn_call = owner.start_call(owner.open_session(workspace), "probe_touch", {"path": "t"}, turn="t1")
    plain_call = owner.start_call(owner.open_session(workspace), "probe_touch", {"path": "p"})
    requested(last, turn_call), requested(last, plain_call)
    first.close()  # `last` can still decide: both keep waiting
    wait_until(lambda: watchers(rg.inproc.daemon) == 1, timeout=10, what="the daemon to drop the first watcher")
    assert len(last.request(p.ApprovalsList).approvals) == 2
    last.close()
    done = owner.wait_call(turn_call)
    # advice its user can follow: a bridge's has no `scvctl exec --yes` to run
    assert done.error.kind == "denied" and done.error.message.endswith(f": {NO_APPROVER_BRIDGE}")
    assert owner.status().pending_approvals == 1  # a call without a turn waits for a watcher to come
    assert not (workspace / "t").exists()


def test_cancel_while_pending_tells_the_watchers(rig, workspace):
    rg = rig()
    t = pending_touch(rg, workspace)
    w, owner, call_id, r = t.w, t.owner, t.call_id, t.request
    owner.request(p.CallCancel, call_id=call_id)
    done = resolved(w, r.approval_id)
    # the watcher is told why the request went away: who cancelled it
    assert done.state == "cancelled" and re.fullmatch(r'the call was cancelled: call.cancel from #\d+ "pytest" pid=\d+', done.reason)
    assert owner.wait_call(call_id).error.kind == "cancelled"


def test_a_request_withdrawn_by_its_session_closing_says_so(rig, workspace):
    rg = rig()
    t = pending_touch(rg, workspace)
    t.owner.request(p.SessionClose, session=t.session)
    done = resolved(t.w, t.request.approval_id)
    assert (done.state, done.reason) == ("cancelled", "the call was cancelled: its session was closed")


# --- policies --------------------------------------------------------------------


@pytest.mark.one_loop
def test_never_runs_read_only_and_denies_the_rest_without_asking(rig, workspace):
    rg = rig('[approvals]\npolicy = "never"\n')
    w = rg.watcher()
    owner = rg.client(approver=True)
    session = owner.open_session(workspace)
    assert owner.call(session, "probe_echo", {"text": "hi"}).result == {"text": "hi"}
    done = owner.call(session, "probe_touch", {"path": "a"})
    assert done.error.kind == "denied" and "never" in done.error.message
    assert not [e for e in flush(w) + flush(owner) if isinstance(e, p.ApprovalRequested)]
    assert not (workspace / "a").exists()


@pytest.mark.one_loop
def test_always_asks_even_for_read_only_but_not_for_always_allow(rig, workspace):
    rg = rig('[approvals]\npolicy = "always"\n')
    w = rg.watcher()
    owner = rg.client()
    session = owner.open_session(workspace)
    done = ask_and(w, owner, session, "probe_echo", {"text": "hi"}, "approve")
    assert done.result == {"text": "hi"}
    assert runs_unasked(w, owner, session, "probe_free", {"text": "x"}).ok


@pytest.mark.one_loop
def test_on_risk_runs_read_only_and_asks_for_the_rest(rig, workspace):
    rg = rig()
    w = rg.watcher()
    owner = rg.client()
    session = owner.open_session(workspace)
    assert runs_unasked(w, owner, session, "probe_echo", {"text": "hi"}).ok
    assert ask_and(w, owner, session, "probe_sleep", {"seconds": 0}, "approve").ok


@pytest.mark.one_loop
def test_sandbox_aware_without_a_sandbox_acts_as_on_risk_and_status_says_so(rig, workspace):
    rg = rig('[approvals]\npolicy = "sandbox-aware"\n')
    w = rg.watcher()
    owner = rg.client()
    status = owner.status()
    assert status.policy == "sandbox-aware" and "on-risk" in status.policy_note
    session = owner.open_session(workspace)
    assert ask_and(w, owner, session, "probe_touch", {"path": "a"}, "approve").ok


# --- who may decide ----------------------------------------------------------------

DECIDE_SCRIPT = """
import sys
from scvctl.client import Client
from scvd import protocol as p
c = Client.connect(sys.argv[1], name="agent-child")
try:
    c.request(p.ApprovalDecide, approval_id=sys.argv[2], decision="approve")
    print("accepted")
except Exception as exc:
    print(getattr(exc, "code", type(exc).__name__), exc)
"""

# connect, fork a holder of the socket, exit; the holder decides once the connector is gone
FORK_SCRIPT = """
import os, sys, time
from scvctl.client import Client
from scvd import protocol as p
child = os.fork()
if child:
    os.waitpid(child, 0)  # reap the connector, so its pid is gone
    sys.exit(0)
c = Client.connect(sys.argv[1], name="connector")
connector = os.getpid()
if os.fork():
    os._exit(0)
while os.path.exists(f"/proc/{connector}"):
    time.sleep(0.01)
try:
    c.request(p.ApprovalDecide, approval_id=sys.argv[2], decision="approve")
    print("accepted", flush=True)
except Exception as exc:
    print(getattr(exc, "code", type(exc).__name__), exc, flush=True)
"""


def run_script(script: str, *args: str) -> str:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(script), *args], env=env,
                         capture_output=True, text=True, timeout=60)
    assert not out.stderr, out.stderr
    return out.stdout.strip()


@pytest.mark.one_loop
@pytest.mark.parametrize("script", [DECIDE_SCRIPT, FORK_SCRIPT], ids=["child", "socket-outlives-connector"])
def test_a_child_process_of_the_daemon_may_not_decide(rig, workspace, script):
    # in-process the daemon's pid is pytest's: a subprocess of pytest is a child of scvd
    rg = rig()
    t = pending_touch(rg, workspace)
    out = run_script(script, str(rg.inproc.socket), t.request.approval_id)
    assert out.startswith("forbidden") and "started by scvd" in out, out
    assert [a.approval_id for a in t.w.request(p.ApprovalsList).approvals] == [t.request.approval_id]
    decide(t.w, t.request.approval_id, "approve")  # the person still can
    assert t.owner.wait_call(t.call_id).ok


@pytest.mark.one_loop
def test_a_process_run_by_the_bash_tool_may_not_decide(daemon, workspace):
    """The real daemon: a command run by its bash tool tries to approve another pending call."""
    with daemon.client(name="owner", approver=True) as owner:
        _bash_child_tries_to_decide(daemon, owner, workspace)


@pytest.mark.one_loop
def test_with_scvd_as_pid_1_a_process_run_by_its_bash_tool_may_not_decide(make_daemon, workspace):
    """scvd as a container's entry point (pid 1 of its pid namespace): what its tools run is still
    its own, while a person's client from outside the namespace (pid 0 to scvd) may decide."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare for a private pid namespace")
    daemon = make_daemon(prefix=["unshare", "--pid", "--fork", "--mount-proc", "--kill-child=SIGTERM"])
    with daemon.client(name="owner", approver=True) as owner:
        assert owner.status().pid == 1
        _bash_child_tries_to_decide(daemon, owner, workspace)
    # unshare ignores SIGTERM while it waits: stop scvd, its child, which unshare then exits with
    (scvd,) = Path(f"/proc/{daemon.proc.pid}/task/{daemon.proc.pid}/children").read_text().split()
    os.kill(int(scvd), signal.SIGTERM)
    assert daemon.proc.wait() == 0


def _bash_child_tries_to_decide(daemon, owner, workspace):
    pending_call = owner.start_call(owner.open_session(workspace), "bash", {"command": "true"})
    target = requested(owner, pending_call)
    script = workspace / "decide.py"
    script.write_text(DECIDE_SCRIPT)
    command = f"PYTHONPATH={ROOT} {sys.executable} decide.py {daemon.socket} {target.approval_id}"
    runner = owner.start_call(owner.open_session(workspace), "bash", {"command": command})
    decide(owner, requested(owner, runner).approval_id, "approve")  # pytest is not scvd's child
    done = owner.wait_call(runner)
    assert done.ok, done.error
    assert "forbidden" in done.result["output"], done.result
    assert [a.approval_id for a in owner.request(p.ApprovalsList).approvals] == [target.approval_id]
    assert "refused a decision" in daemon.log()
    decide(owner, target.approval_id, "deny")
    assert owner.wait_call(pending_call).error.kind == "denied"
    wait_idle(owner)


CANCEL_SCRIPT = """
import sys
from scvctl.client import Client
from scvd import protocol as p
c = Client.connect(sys.argv[1], name="agent-child")
try:
    c.request(p.CallCancel, call_id=sys.argv[2])
    print("accepted")
except Exception as exc:
    print(getattr(exc, "code", type(exc).__name__), exc)
"""


@pytest.mark.one_loop
def test_a_process_run_by_the_bash_tool_may_not_cancel_other_calls(daemon, workspace):
    with daemon.client(name="owner", approver=True) as owner:
        victim = owner.start_call(owner.open_session(workspace), "bash", {"command": "true"})
        target = requested(owner, victim)
        (workspace / "cancel.py").write_text(CANCEL_SCRIPT)
        command = f"PYTHONPATH={ROOT} {sys.executable} cancel.py {daemon.socket} {victim}"
        runner = owner.start_call(owner.open_session(workspace), "bash", {"command": command})
        decide(owner, requested(owner, runner).approval_id, "approve")
        done = owner.wait_call(runner)
        assert done.ok, done.error
        assert done.result["output"].strip().splitlines()[-1].startswith("forbidden"), done.result
        assert "may cancel only its own session's calls" in done.result["output"]
        assert [a.approval_id for a in owner.request(p.ApprovalsList).approvals] == [target.approval_id]
        decide(owner, target.approval_id, "deny")
        assert owner.wait_call(victim).error.kind == "denied"


TURN_FROM_A_CHILD = """
import sys
from scvctl.client import Client
from scvd import protocol as p
c = Client.connect(sys.argv[1], name="agent-child", approver=True)
call_id = c.start_call(c.open_session(sys.argv[2]), "bash", {"command": "touch child.txt"}, turn="t1")
for event in c.events():
    if isinstance(event, p.ApprovalRequested) and event.call_id == call_id:
        print("asked: the request waits for a decision this client may not make")
        break
    if isinstance(event, p.CallCompleted) and event.call_id == call_id:
        print(event.error.kind if event.error else "ok", event.error.message if event.error else "")
        break
"""


@pytest.mark.one_loop
def test_a_turns_call_from_a_process_scvd_started_is_denied_at_once_when_nobody_else_could_decide(
        daemon, workspace):
    """A process scvd started may not decide, so its hello's approver: true makes it no approver there is:
    with no watcher, its turn's request is denied at once, as store_secret's is, not left to expire."""
    with daemon.client(name="person") as person:  # no watcher anywhere
        (workspace / "turn.py").write_text(TURN_FROM_A_CHILD)
        runner = start_child_client(person, workspace, "turn.py", daemon.socket, workspace)
        ran = person.wait_call(runner)
        assert ran.ok, ran.error
        assert ran.result["output"] == f"denied {NO_APPROVER_SPAWNED}\n", ran.result
        assert person.request(p.ApprovalsList).approvals == []
    assert not (workspace / "child.txt").exists()


@pytest.mark.one_loop
def test_approval_requests_reach_bridges_with_control_characters_escaped(daemon, workspace):
    """A command that would repaint a terminal or reorder a chat line is shown escaped, for every tool."""
    command = "echo safe\r\x1b[2Krm -rf ~ \u202e"
    with daemon.client(name="bridge", approver=True) as bridge:
        sid = bridge.open_session(workspace)
        call_id = bridge.start_call(sid, "bash", {"command": command})
        event = requested(bridge, call_id)
        assert "\r" not in event.summary and "\x1b" not in event.summary and "\u202e" not in event.summary
        assert "\\r\\x1b[2Krm -rf ~ \\u202e" in event.summary
        assert event.details["command"] == "echo safe\\r\\x1b[2Krm -rf ~ \\u202e"
        bridge.request(p.CallCancel, call_id=call_id)
        assert bridge.wait_call(call_id).error.kind == "cancelled"


FORGED_NAME = 'scvctl (pid 1, uid 1000) in session s1-0000" (pid 1, uid 1000)'


@pytest.mark.one_loop
def test_a_requesters_own_name_cannot_pass_for_who_asks(daemon, workspace):
    """hello's client name is the peer's own words: `requester` showed it bare, so a client could call
    itself `scvctl (pid 1, uid 1000) in session ...` and the approver read the rest as scvd's."""
    with daemon.client(name="person") as person, daemon.client(name=FORGED_NAME) as forger:
        person.request(p.ApprovalsWatch)
        call_id = forger.start_call(forger.open_session(workspace), "bash", {"command": "true"})
        event = requested(person, call_id)
        assert event.requester == ('"scvctl (pid 1, uid 1000) in session s1-0000\\" (pid 1, uid 1000)" '
                                   f"(pid {os.getpid()}, uid {os.getuid()})")
        decide(person, event.approval_id, "deny")
        assert forger.wait_call(call_id).error.kind == "denied"


ASK_FROM_A_CHILD = """
import sys
from scvctl.client import Client
c = Client.connect(sys.argv[1], name="scvctl")
done = c.wait_call(c.start_call(c.open_session(sys.argv[2]), "bash", {"command": "true"}))
print(done.error.kind if done.error else "ok")
"""


@pytest.mark.one_loop
def test_a_request_from_a_process_scvd_started_says_so(daemon, workspace):
    """A tool's child may connect and ask under any name (here scvctl's): the approver is told it is no
    client of theirs but a process scvd started."""
    with daemon.client(name="person") as person:
        person.request(p.ApprovalsWatch)
        (workspace / "ask.py").write_text(ASK_FROM_A_CHILD)
        runner = start_child_client(person, workspace, "ask.py", daemon.socket, workspace)
        event = wait_event(person, lambda e: isinstance(e, p.ApprovalRequested) and e.call_id != runner)
        assert re.fullmatch(rf'"scvctl" \(pid \d+, uid {os.getuid()}, a process scvd started\)', event.requester), \
            event.requester
        decide(person, event.approval_id, "deny")
        ran = person.wait_call(runner)
        assert ran.ok and ran.result["output"] == "denied\n", ran


def test_a_peer_found_gone_while_a_handler_hangs_loses_its_calls_and_approvals_at_once(rig, workspace,
                                                                                      monkeypatch):
    # a handler that never returns (an agent home on a hung mount) must not keep a departed peer's
    # approval waiting, to be approved and run in nobody's name. Its reading is paused while the
    # handler waits: scvd finds it gone when an event to it fails (another client's request here).
    from scvd.adapters import service

    hung, entered = threading.Event(), threading.Event()

    def hangs(*args: Any, **kw: Any) -> Any:
        entered.set()
        hung.wait(60)
        raise errors.Unavailable("the agent's home could not be read")

    monkeypatch.setattr(service, "answer_spec", hangs)
    rg = rig()
    w = rg.watcher()
    leaver = rg.watcher("leaver")
    call_id = leaver.start_call(leaver.open_session(workspace), "probe_touch", {"path": "left.txt"})
    approval_id = requested(w, call_id).approval_id
    leaver.send(p.AgentsSpec, agent="claude", action="status")
    assert entered.wait(10)
    leaver.close()
    other = rg.client(name="other")
    other_call = other.start_call(other.open_session(workspace), "probe_touch", {"path": "other.txt"})
    try:
        requested(w, other_call)
        wait_until(lambda: w.status().pending_approvals == 1, timeout=10)  # the other client's only
        done = resolved(w, approval_id)
        assert done.state == "dropped" and "disconnected" in done.reason
        with pytest.raises(errors.ApprovalNotFound):
            decide(w, approval_id, "approve")
        assert w.status().sessions == 1  # the other client's only, while the handler still hangs
    finally:
        hung.set()
    decide(w, [a.approval_id for a in w.request(p.ApprovalsList).approvals if a.call_id == other_call][0], "deny")
    wait_idle(w)
    assert not (workspace / "left.txt").exists()


def test_a_session_a_handler_opens_after_its_peer_was_found_gone_is_closed_when_it_returns(rig, workspace,
                                                                                          monkeypatch):
    from scvd import session_open

    go, entered = threading.Event(), threading.Event()
    real = session_open.session_services

    def slow(*args: Any) -> Any:
        entered.set()
        go.wait(60)
        return real(*args)

    rg = rig()
    w = rg.watcher()
    other = rg.client(name="other")
    other_session = other.open_session(workspace)
    monkeypatch.setattr(session_open, "session_services", slow)
    leaver = rg.watcher("leaver")
    leaver.send(p.SessionOpen, workspace=str(workspace))
    assert entered.wait(10)
    leaver.close()
    other_call = other.start_call(other_session, "probe_touch", {"path": "other.txt"})  # an event to the leaver
    try:
        decide(w, requested(w, other_call).approval_id, "deny")
        wait_until(lambda: len(rg.inproc.daemon.connections) == 2)  # w and other: the leaver went
    finally:
        go.set()
    wait_until(lambda: w.status().sessions == 1)  # the session it opened after is gone too


def test_a_connection_asking_for_many_secret_like_reads_at_once_leaves_room_for_other_connections(rig, workspace):
    # read is concurrent and a secret-like read asks: one session once filled approvals.max_pending,
    # then one connection with two sessions did, and every other client's call was refused without asking
    rg = rig("[approvals]\nmax_pending = 8\n")
    (workspace / ".env").write_text("TOKEN=x\n")
    w = rg.watcher()
    runaway = rg.client(name="runaway")
    first, second = runaway.open_session(workspace), runaway.open_session(workspace)
    ids = [runaway.start_call(first, "read", {"path": ".env"}) for _ in range(4)]
    asked = [requested(w, call_id) for call_id in ids]
    ids += [runaway.start_call(second, "read", {"path": ".env"}) for _ in range(4)]
    other = rg.client(name="other")
    other_call = other.start_call(other.open_session(workspace), "probe_touch", {"path": "b.txt"})
    # the next three asked: the second session's first two and the other connection's, never a third
    later = [wait_event(w, lambda e: isinstance(e, p.ApprovalRequested) and e.call_id in [*ids[4:], other_call])
             for _ in range(3)]
    assert sorted(r.call_id for r in later) == sorted([*ids[4:6], other_call])
    for call_id in ids[6:]:
        error = runaway.wait_call(call_id).error
        assert error.kind == "limit" and error.message.startswith(
            "6 approvals of this connection's sessions are already waiting, as many as one connection may hold "
            "(approvals.max_pending less a quarter kept for other connections)")
    asked += [r for r in later if r.call_id != other_call]
    decide(w, next(r for r in later if r.call_id == other_call).approval_id, "approve")
    assert other.wait_call(other_call).ok and (workspace / "b.txt").exists()
    decide(w, asked[0].approval_id, "approve")
    assert runaway.wait_call(ids[0]).result["content"] == "TOKEN=x\n"
    for r in asked[1:]:
        decide(w, r.approval_id, "deny")
    wait_idle(w)
