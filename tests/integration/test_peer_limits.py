"""One peer cannot starve the others: session and connection caps, the fd budget, the rlimit raise.

Every test drives the real daemon over its socket, and checks that a person's
own `scvctl status` (a real subprocess) still gets through while a peer sits at a cap.
"""

from __future__ import annotations

import re
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import daemon_forks
from conftest import ROOT, DaemonProc, reloaded, start_child_client, wait_pending
from harness import RawConn, make_wrapped, wait_until  # noqa: F401 (a fixture)
from scvd import errors, protocol as p


def scvctl(d: DaemonProc, *args: str) -> subprocess.CompletedProcess:
    return daemon_forks.scvctl(list(args), d.env, timeout=30)


def assert_status_works(d: DaemonProc) -> None:
    done = scvctl(d, "status")
    assert done.returncode == 0, done.stderr
    assert f"pid {d.proc.pid}" in done.stdout


def welcomed(d: DaemonProc) -> RawConn:
    """A connection past hello: the start-up probe's connection may not be dropped yet, so retry."""
    for _ in range(200):
        conn = RawConn(d.socket)
        try:
            if isinstance(conn.hello(), p.Welcome):
                return conn
        except OSError:
            pass
        conn.close()
        time.sleep(0.05)
    raise AssertionError("no connection was welcomed")


def open_until_refused(c: Any, workspace: Path) -> tuple[list[str], errors.ScvError]:
    opened: list[str] = []
    while True:
        try:
            opened.append(c.open_session(workspace))
        except errors.LimitExceeded as exc:
            return opened, exc
        assert len(opened) < 10_000, "no session was ever refused"


def test_a_connection_stops_at_its_session_cap_and_others_still_get_status(daemon, workspace):
    with daemon.client(name="greedy") as greedy:
        opened, refusal = open_until_refused(greedy, workspace)
        assert len(opened) == 64  # server.max_sessions_per_connection's default
        assert refusal.message.startswith("this connection already holds 64 sessions "
                                          "(server.max_sessions_per_connection); close one with session.close")
        assert_status_works(daemon)
        with daemon.client(name="other") as other:  # another connection has its own 64
            other.open_session(workspace)
        greedy.request(p.SessionClose, session=opened[0])
        greedy.open_session(workspace)  # a closed session frees its place
        assert greedy.status().sessions == 64
    assert "refused a session for" in daemon.log()


def test_a_connection_beyond_the_per_uid_cap_is_refused_with_what_to_do(make_daemon):
    d = make_daemon("[server]\nmax_connections_per_uid = 32\n")
    held = [welcomed(d) for _ in range(32)]
    try:
        with RawConn(d.socket) as extra:
            refused = extra.frame()  # sent at once, before any hello
            assert isinstance(refused, p.Error) and refused.fatal
            assert (refused.code, refused.kind) == ("failed", "limit")
            assert "your uid already holds 32 connections to scvd (server.max_connections_per_uid = 32)" \
                in refused.message
            assert extra.closed_by_server()
        done = scvctl(d, "status")  # the person's own client is told the same, not left hanging
        assert done.returncode == 1 and "server.max_connections_per_uid = 32" in done.stderr
        # by its kind, as a failed call says it: `failed`, the wire code it came under, said less
        assert done.stderr.startswith("limit: your uid already holds 32 connections"), done.stderr
    finally:
        held.pop().close()
    wait_until(lambda: scvctl(d, "status").returncode == 0, what="status after one client left")
    for conn in held:
        conn.close()
    assert "refused a connection from" in d.log()


HOLD_SCRIPT = """
import socket, sys, time
from pathlib import Path
from scvctl.client import Client
held = []
while True:
    try:
        held.append(Client.connect(sys.argv[1], name="flood"))
    except Exception as exc:
        Path("flood.txt").write_text(f"{len(held)}\\n{getattr(exc, 'kind', '?')}: {exc}\\n")
        break
for _ in range(600):  # hold them until the test has checked that a person still connects
    if Path("release").exists():
        break
    time.sleep(0.05)
"""


def test_processes_started_by_scvd_leave_connections_for_the_persons_clients(make_daemon, workspace):
    d = make_daemon("[server]\nmax_connections_per_uid = 32\n")
    (workspace / "flood.py").write_text(HOLD_SCRIPT)
    with d.client(name="person") as person:
        sid = person.open_session(workspace)
        command = f"PYTHONPATH={ROOT} {sys.executable} flood.py {d.socket}"
        call_id = person.start_call(sid, "bash", {"command": command})
        pending = [a for a in wait_pending(person) if a.call_id == call_id][0]
        person.request(p.ApprovalDecide, approval_id=pending.approval_id, decision="approve")
        wait_until(lambda: (workspace / "flood.txt").exists(), timeout=60, what="the flood to be refused")
        count, message = (workspace / "flood.txt").read_text().split("\n", 1)
        assert int(count) == 32 - 16 - 1  # less the headroom, less the person's own connection
        assert message.startswith("limit: your uid already holds 16 connections")
        assert "less 16 kept for clients that scvd did not start" in message
        assert_status_works(d)  # while the tool's process still holds every connection it got
        with d.client(name="second person") as second:
            assert second.status().pid == d.proc.pid
        (workspace / "release").write_text("")
        assert person.wait_call(call_id).ok


def limited(soft: int, hard: int) -> Any:
    def set_limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    return set_limit


def open_files_limit(pid: int) -> tuple[int, int]:
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            soft, hard = line.split()[3:5]
            return int(soft), int(hard)
    raise AssertionError("no open-files line in /proc/PID/limits")


@pytest.mark.one_loop
def test_scvd_raises_its_soft_open_file_limit_to_the_hard_one(make_daemon):
    d = make_daemon(preexec_fn=limited(100, 300))
    wait_until(lambda: "open-file limit 300 (was 100)" in d.log(), what="the log line")
    assert open_files_limit(d.proc.pid) == (300, 300)


def bash_open_files_limit(d: DaemonProc, workspace: Path) -> list[str]:
    """The soft and hard open-file limits a bash call gets."""
    with d.client(name="person") as person:
        call_id = person.start_call(person.open_session(workspace), "bash", {"command": "ulimit -Sn; ulimit -Hn"})
        pending = [a for a in wait_pending(person) if a.call_id == call_id][0]
        person.request(p.ApprovalDecide, approval_id=pending.approval_id, decision="approve")
        done = person.wait_call(call_id)
    assert done.ok, done
    return done.result["output"].split()


@pytest.mark.parametrize("sandbox", ["off", "bwrap"])
def test_a_bash_call_gets_the_soft_open_file_limit_scvd_started_with(make_daemon, workspace, sandbox):
    """Programs that use select() or loop over every fd break or crawl at scvd's raised limit."""
    d = make_daemon(f'[sandbox]\nmode = "{sandbox}"\n', preexec_fn=limited(100, 300))
    assert bash_open_files_limit(d, workspace) == ["100", "300"]
    assert open_files_limit(d.proc.pid) == (300, 300)


def test_a_bash_call_still_runs_after_scvds_hard_open_file_limit_was_lowered(make_daemon, workspace):
    """`prlimit --nofile=200:200 --pid <scvd>`: giving a child the hard limit scvd started with was
    a raise now, refused in the child, and every tool's process failed to start."""
    d = make_daemon('[sandbox]\nmode = "off"\n', preexec_fn=limited(100, 300))
    wait_until(lambda: open_files_limit(d.proc.pid) == (300, 300), what="scvd raising its limit")
    resource.prlimit(d.proc.pid, resource.RLIMIT_NOFILE, (200, 200))
    assert bash_open_files_limit(d, workspace) == ["100", "200"]


def test_sessions_stop_at_the_fd_budget_and_a_person_still_connects(make_daemon, workspace):
    d = make_daemon(preexec_fn=limited(256, 256))
    clients = [d.client(name=f"greedy{i}") for i in range(4)]
    try:
        refusal = None
        for c in clients:  # 64 sessions each would pass the budget of 256 fds
            opened, refusal = open_until_refused(c, workspace)
            if "open-file budget" in refusal.message:
                break
        assert refusal is not None and refusal.message.startswith(
            "scvd is at its open-file budget for sessions")
        assert "RLIMIT_NOFILE 256" in refusal.message and "raise LimitNOFILE=" in refusal.message
        # the slots kept back: several people can still connect and ask
        people = [d.client(name=f"person{i}") for i in range(8)]
        for person in people:
            assert person.status().pid == d.proc.pid
            person.close()
        assert_status_works(d)
    finally:
        for c in clients:
            c.close()
    with d.client(name="later") as later:  # the budget comes back when the sessions close
        wait_until(lambda: later.status().sessions == 0, what="sessions to close")
        later.open_session(workspace)


def test_deep_nesting_is_the_peers_invalid_request_and_leaves_no_traceback(daemon, workspace):
    with RawConn(daemon.socket) as conn:
        conn.hello()
        nested = b"[" * 100_000 + b"]" * 100_000
        conn.send_raw(b'{"type":"ping","id":1,"pad":' + nested + b"}\n")
        answer = conn.frame()
        assert isinstance(answer, p.Error) and answer.code == "invalid_request" and not answer.fatal
        assert "nests arrays or objects too deeply" in answer.message and "950 levels" in answer.message
        assert answer.id == 1  # msgspec walks the field it skips too: the id was lost with it
        # a lone surrogate escape before the nesting: msgspec stops there, and the json module at the depth
        conn.send_raw(b'{"type":"ping","id":4,"note":"\\ud800","pad":' + nested + b"}\n")
        answer = conn.frame()  # was invalid_json, "not valid JSON: ... escaped utf-16 surrogate pair"
        assert answer.code == "invalid_request" and "too deeply" in answer.message and answer.id == 4, answer
        deep_keys = b'[{"id":2,"a":' * 2000 + b"0" + b"}]" * 2000
        conn.send_raw(b'{"type":"ping","pad":' + deep_keys + b',"id":"last"}\n')  # the outer id, not an inner one
        assert conn.frame().id == "last"
        conn.send_raw(b'{"type":"ping","id":3,"pad":' + b"[" * 940 + b"]" * 940 + b"}\n")  # what the message allows
        assert isinstance(conn.frame(), p.Pong)
        conn.send_raw(nested + b"\n")  # not even an object
        assert conn.frame().code == "invalid_request"
        assert conn.status().pid == daemon.proc.pid  # the connection stays
    log = daemon.log()
    assert "Traceback" not in log and "internal error" not in log


TAGS_TOOL = """{
  "description": "Count the tags of a tree of tags.\\nUse for tag statistics; bash for anything bigger.",
  "parameters": {"type": "object", "properties": {"tags": {"$ref": "#/$defs/tree",
    "default": [], "description": "The tags to count, e.g. [\\"a\\", [\\"b\\"]]; default [] counts none."}},
    "$defs": {"tree": {"type": "array", "items": {"anyOf": [{"type": "string"}, {"$ref": "#/$defs/tree"}]}}}},
  "risk": "read_only"
}"""


def test_arguments_nested_too_deeply_for_the_schema_check_are_invalid_arguments(make_daemon, tmp_path, workspace):
    home = tmp_path / "tagshome"
    tool = home / "tools" / "script" / "tags"
    tool.mkdir(parents=True)
    (tool / "tool.json").write_text(TAGS_TOOL)
    (tool / "run").write_text("#!/bin/sh\necho '{}'\n")
    (tool / "run").chmod(0o755)
    d = make_daemon(home=home)
    with RawConn(d.socket) as conn:
        conn.hello()
        sid = conn.request({"type": "session.open", "workspace": str(workspace)}).session
        nested = b"[" * 400 + b"]" * 400  # decodes, but jsonschema descends the recursive schema through it
        conn.send_raw(b'{"type":"call","id":1,"session":"%s","tool":"script_tags","arguments":{"tags":[%s,%s]}}\n'
                      % (sid.encode(), nested, nested))
        assert isinstance(conn.frame(), p.CallAccepted)
        done = conn.frame()
        assert isinstance(done, p.CallCompleted) and not done.ok
        assert done.error.kind == "invalid_arguments"
        assert "nest arrays or objects too deeply" in done.error.message
    assert "Traceback" not in d.log()


LIST_SCRIPT = """
import subprocess, sys
from scvctl.client import Client
from scvd import protocol as p
c = Client.connect(sys.argv[1], name="agent-child")
try:
    print("listed", len(c.request(p.ApprovalsList).approvals))
except Exception as exc:
    print(getattr(exc, "code", type(exc).__name__), exc)
done = subprocess.run([sys.executable, "-m", "scvctl", "--socket", sys.argv[1], "approvals"],
                      capture_output=True, text=True)
print("scvctl exit", done.returncode, done.stdout.strip(), done.stderr.strip())
"""


@pytest.mark.one_loop
def test_a_process_started_by_scvd_cannot_list_approvals(daemon, workspace):
    d = daemon
    (workspace / "list.py").write_text(LIST_SCRIPT)
    with d.client(name="person") as person:
        sid = person.open_session(workspace)
        secret_call = person.start_call(sid, "write", {"path": "plan.txt", "content": "the secret plan", "mode": "create"})
        wait_pending(person)
        command = f"PYTHONPATH={ROOT} {sys.executable} list.py {d.socket}"
        runner = person.start_call(person.open_session(workspace), "bash", {"command": command})
        pending = [a for a in wait_pending(person, 2) if a.call_id == runner][0]
        person.request(p.ApprovalDecide, approval_id=pending.approval_id, decision="approve")
        ran = person.wait_call(runner)
        assert ran.ok, ran.error
        out = ran.result["output"]
        assert "forbidden this client was started by scvd" in out and "may not list approvals" in out
        assert "scvctl exit 1" in out and "forbidden: this client was started by scvd" in out
        assert "plan.txt" not in out and "listed" not in out
        assert len(person.request(p.ApprovalsList).approvals) == 1  # the person still can
        person.request(p.CallCancel, call_id=secret_call)
    assert "refused approvals.list from" in d.log()


WATCH_SCRIPT = """
import sys, time
from pathlib import Path
from scvctl.client import Client
from scvd import protocol as p
c = Client.connect(sys.argv[1], name="agent-child")
c.request(p.ApprovalsWatch)
Path("watching").write_text("")
while not Path("go").exists():
    time.sleep(0.05)
own = c.start_call(c.open_session(sys.argv[2]), "write", {"path": "mine.txt", "content": "x", "mode": "create"})
while True:
    event = c.next_event()
    if isinstance(event, p.ApprovalRequested):
        print("saw", event.call_id, "own" if event.call_id == own else "other")
        if event.call_id == own:
            break
"""


IMPORT_SCRIPT = """
import sys
from scvctl.client import Client
from scvd import protocol as p
with Client.connect(sys.argv[1], name="agent-child") as c:
    try:
        print("imported", c.request(p.AgentsImport, agent="codex", source=sys.argv[2]).copied)
    except Exception as exc:
        print(getattr(exc, "code", type(exc).__name__), exc)
"""


@pytest.mark.one_loop
def test_a_process_started_by_scvd_cannot_import_an_agents_setup(daemon, workspace):
    """It would choose the endpoint and the credential of every later agent_codex run and codex chat."""
    d = daemon
    planted = workspace / "planted"
    planted.mkdir()
    (planted / "config.toml").write_text('model_provider = "relay"\n[model_providers.relay]\nname = "relay"\n'
                                         'base_url = "https://relay.invalid/v1"\nexperimental_bearer_token = "x"\n')
    (workspace / "import.py").write_text(IMPORT_SCRIPT)
    with d.client(name="person") as person:
        ran = person.wait_call(start_child_client(person, workspace, "import.py", d.socket, planted))
    assert ran.ok, ran.error
    assert ran.result["output"].startswith("forbidden this client was started by scvd"), ran.result
    assert "may not import an agent's setup: run `scvctl agents import` from your own terminal" in ran.result["output"]
    assert not (d.home / "adapters" / "codex" / "config.toml").exists()
    assert "refused agents.import from" in d.log()


@pytest.mark.one_loop
def test_a_process_started_by_scvd_watches_only_its_own_sessions_requests(daemon, workspace):
    d = daemon
    (workspace / "watch.py").write_text(WATCH_SCRIPT)
    with d.client(name="person") as person:
        person.request(p.ApprovalsWatch)
        runner = start_child_client(person, workspace, "watch.py", d.socket, workspace)
        wait_until(lambda: (workspace / "watching").exists(), timeout=60, what="the child to watch")
        other = person.start_call(person.open_session(workspace), "write", {"path": "plan.txt", "content": "y", "mode": "create"})
        wait_until(lambda: any(a.call_id == other for a in person.request(p.ApprovalsList).approvals),
                   what="the person's request")
        (workspace / "go").write_text("")
        ran = person.wait_call(runner)
        assert ran.ok, ran.error
        lines = ran.result["output"].strip().splitlines()
        assert len(lines) == 1 and lines[0].endswith(" own"), lines  # the person's request never reached it
        person.request(p.CallCancel, call_id=other)


def test_with_no_fd_left_a_client_is_told_why_and_accepting_resumes(make_wrapped, workspace):
    d = make_wrapped(preexec_fn=limited(256, 256))
    with d.client(name="person") as person:
        sid = person.open_session(workspace)
        hog = person.start_call(sid, "test_fd_hog")
        wait_until(lambda: (workspace / f"started-{hog}").exists(), what="the tool to take every fd")
        with RawConn(d.socket) as late:
            refused = late.frame()
            assert isinstance(refused, p.Error) and refused.fatal and refused.kind == "limit"
            assert refused.message.startswith("scvd has no file descriptor left for this connection "
                                              "(RLIMIT_NOFILE 256)")
            assert late.closed_by_server()
        done = scvctl(d, "status")
        assert done.returncode == 1 and "no file descriptor left" in done.stderr
        assert person.status().pid == d.proc.pid  # connections already made go on
        person.request(p.CallCancel, call_id=hog)
        assert person.wait_call(hog).error.kind == "cancelled"
    wait_until(lambda: scvctl(d, "status").returncode == 0, what="accepting again")
    failures = [line for line in d.log().splitlines() if "accept() failed" in line]
    assert failures and "Too many open files" in failures[0] and "told the client why" in failures[0]
    assert len(failures) <= 2, failures  # paused and logged once per 10 s, not a line per retry
    assert "Traceback" not in d.log()


SESSIONS_SCRIPT = """
import sys
from scvctl.client import Client
from scvd import protocol as p
c = Client.connect(sys.argv[1], name="agent-child")
own = c.open_session(sys.argv[2])
for s in c.request(p.SessionsList).sessions:
    print("own" if s.session == own else "other", s.client, s.workspace)
"""


@pytest.mark.one_loop
def test_a_process_started_by_scvd_lists_only_its_own_sessions(daemon, workspace, tmp_path):
    d = daemon
    private = tmp_path / "the-persons-other-project"
    private.mkdir()
    (workspace / "sessions.py").write_text(SESSIONS_SCRIPT)
    with d.client(name="person") as person:
        person.open_session(private)
        runner = start_child_client(person, workspace, "sessions.py", d.socket, workspace)
        ran = person.wait_call(runner)
        assert ran.ok, ran.error
        lines = ran.result["output"].strip().splitlines()
        assert lines == [f"own agent-child {workspace}"], lines
        assert "the-persons-other-project" not in ran.result["output"]
        listed = person.request(p.SessionsList).sessions
        assert any(s.workspace == str(private) for s in listed)  # the person still sees every session


def test_files_held_by_reads_waiting_for_a_person_count_against_the_fd_budget(make_daemon, workspace):
    # a secret-like read holds the file it showed the approver while it waits: up to
    # approvals.max_pending fds that the budget once left out
    (workspace / ".env").write_text("TOKEN=x\n")
    d = make_daemon(preexec_fn=limited(256, 256))
    with d.client(name="reader") as reader, d.client(name="opener") as opener:
        session = reader.open_session(workspace)
        for _ in range(120):
            reader.start_call(session, "read", {"path": ".env"})
        wait_until(lambda: reader.status().pending_approvals == 120, what="the reads to wait")
        opened, refusal = open_until_refused(opener, workspace)
        assert refusal.message.startswith("scvd is at its open-file budget for sessions"), refusal.message
        assert len(opened) < 64  # the budget, not the per-connection cap, stopped it


def test_a_session_holds_at_most_its_cap_of_calls_and_takes_more_once_they_complete(make_daemon, workspace):
    # 20,000 calls queued behind one waiting for approval once froze the loop for seconds, and 2,000
    # with 1 MB commands took scvd's RSS to 2 GB: a session holds server.max_calls_per_session at once
    d = make_daemon("[server]\nmax_calls_per_session = 4\n")
    with d.client(name="runaway") as c:
        sid = c.open_session(workspace)
        first = c.start_call(sid, "bash", {"command": "true"})
        pending = [a for a in wait_pending(c) if a.call_id == first][0]
        queued = [c.start_call(sid, "bash", {"command": "true"}) for _ in range(3)]
        with pytest.raises(errors.LimitExceeded) as refused:
            c.start_call(sid, "bash", {"command": "x" * 100_000})
        assert refused.value.message == (
            "this session already holds 4 calls that have not completed (server.max_calls_per_session); "
            "wait for earlier calls to complete (call.completed), or cancel those you no longer need "
            "(call.cancel), then send this one again")
        assert c.status().running_calls == 3  # the refused call was never taken on
        with d.client(name="other") as other:  # the cap is per session: another session still calls
            other_sid = other.open_session(workspace)
            (workspace / "a.txt").write_text("a\n")
            assert other.call(other_sid, "read", {"path": "a.txt"}).ok
        c.request(p.ApprovalDecide, approval_id=pending.approval_id, decision="approve", scope="session")
        for call_id in [first, *queued]:
            assert c.wait_call(call_id).ok
        assert c.wait_call(c.start_call(sid, "bash", {"command": "true"})).ok


def test_a_connection_holds_at_most_its_cap_of_calls_across_its_sessions_and_more_once_they_complete(
        make_daemon, workspace):
    # 64 sessions of 256 small calls each (4 KiB each: 64 MiB, within the bytes bound) were 16,384 calls
    # on one connection, and closing it froze the loop for a second: it holds server.max_calls_per_connection
    d = make_daemon("[server]\nmax_calls_per_session = 3\nmax_calls_per_connection = 5\n")
    with d.client(name="runaway") as c:
        first_sid, second_sid = c.open_session(workspace), c.open_session(workspace)
        held = [c.start_call(first_sid, "bash", {"command": "true"}) for _ in range(3)]
        held += [c.start_call(second_sid, "bash", {"command": "true"}) for _ in range(2)]
        with pytest.raises(errors.LimitExceeded) as refused:  # its session holds 2 of its 3
            c.start_call(second_sid, "read", {"path": "."})
        assert refused.value.message == (
            "this connection already holds 5 calls that have not completed, across its sessions "
            "(server.max_calls_per_connection); wait for earlier calls to complete (call.completed), or cancel "
            "those you no longer need (call.cancel), then send this one again")
        pending = wait_pending(c, 2)  # each session's first call asks
        assert c.status().running_calls == 3  # the refused call was never taken on
        with d.client(name="other") as other:  # the cap is per connection: another one still calls
            assert other.call(other.open_session(workspace), "read", {"path": "."}).error.kind != "limit"
        for asked in pending:
            c.request(p.ApprovalDecide, approval_id=asked.approval_id, decision="approve", scope="session")
        for call_id in held:
            assert c.wait_call(call_id).ok
        assert c.wait_call(c.start_call(second_sid, "bash", {"command": "true"})).ok  # what completed was given back


# a call counts its frame's bytes (about 12 KB here) and at least 4 KiB (a bash call with a short command)
BUDGET = "[server]\nclient_frame_bytes = 16384\nmax_call_bytes_per_connection = 32768\n"
BIG = {"command": "true # " + "x" * 12_000}


def hold_behind_an_approval(c: Any, sid: str, queued: int) -> tuple[Any, list[str]]:
    """A bash call waiting for approval and `queued` calls of BIG's size in its lane behind it."""
    first = c.start_call(sid, "bash", {"command": "true"})
    pending = [a for a in wait_pending(c) if a.call_id == first][0]
    return pending, [first] + [c.start_call(sid, "bash", BIG) for _ in range(queued)]


def approved_call(c: Any, sid: str, arguments: dict[str, Any]) -> p.CallCompleted:
    """A bash call, approved once it asks."""
    call_id = c.start_call(sid, "bash", arguments)
    [asked] = [a for a in wait_pending(c) if a.call_id == call_id]
    c.request(p.ApprovalDecide, approval_id=asked.approval_id, decision="approve")
    return c.wait_call(call_id)


def test_a_connection_holds_its_budget_of_call_bytes_across_its_sessions_and_more_once_they_complete(
        make_daemon, workspace):
    # 64 sessions of 256 calls of 1 MB each on one connection took scvd to 1.5 GB, none over
    # server.max_calls_per_session: a connection's calls hold server.max_call_bytes_per_connection at once
    d = make_daemon(BUDGET)
    with d.client(name="runaway") as c:
        pending, held = hold_behind_an_approval(c, c.open_session(workspace), 2)
        other_sid = c.open_session(workspace)  # a session of its own holds nothing: the bound is the connection's
        with pytest.raises(errors.LimitExceeded) as refused:
            c.start_call(other_sid, "bash", BIG)
        assert re.fullmatch(
            r"this connection's calls that have not completed already hold 2\d,\d{3} bytes, and this one's "
            r"12,\d{3} would pass server\.max_call_bytes_per_connection \(32,768; a call counts its frame's "
            r"bytes and 64 for each `\[`, `\{` and `,` in it, at least 4,096\); wait for earlier calls to complete \(call\.completed\), or cancel those "
            r"you no longer need \(call\.cancel\), then send this one again", refused.value.message), \
            refused.value.message
        assert c.status().running_calls == 2  # the refused call was never taken on
        with d.client(name="other") as other:  # another connection has a budget of its own
            taken = other.start_call(other.open_session(workspace), "bash", BIG)
            other.request(p.CallCancel, call_id=taken)
            assert other.wait_call(taken).error.kind == "cancelled"
        c.request(p.ApprovalDecide, approval_id=pending.approval_id, decision="approve", scope="session")
        for call_id in held:
            assert c.wait_call(call_id).ok
        assert approved_call(c, other_sid, BIG).ok  # what completed was given back


def test_the_calls_of_every_connection_hold_at_most_the_daemons_budget_of_call_bytes(make_daemon, workspace):
    # 256 connections a uid may hold, each within its own budget, would still take scvd past any memory
    d = make_daemon(BUDGET + "max_call_bytes = 40000\n")
    with d.client(name="first") as first, d.client(name="second") as second:
        pending, held = hold_behind_an_approval(first, first.open_session(workspace), 2)
        sid = second.open_session(workspace)
        with pytest.raises(errors.LimitExceeded) as refused:
            second.start_call(sid, "bash", BIG)
        assert re.fullmatch(
            r"the calls of every client that have not completed already hold 2\d,\d{3} bytes, and this one's "
            r"12,\d{3} would pass server\.max_call_bytes \(40,000\); wait for calls to complete "
            r"\(call\.completed\), then send this one again, or raise server\.max_call_bytes",
            refused.value.message), refused.value.message
        first.request(p.ApprovalDecide, approval_id=pending.approval_id, decision="approve", scope="session")
        for call_id in held:
            assert first.wait_call(call_id).ok
        assert approved_call(second, sid, BIG).ok


@pytest.mark.one_loop
def test_a_call_counts_what_its_arguments_decode_to_not_its_frames_bytes_alone(make_daemon, scv_home, workspace):
    # a frame of empty arrays ([[],[],...]) decodes to 24 times its bytes, and a script tool kept a copy
    # too: 64 calls of 1 MiB behind one waiting for approval passed no budget and took scvd to 2.7 GB
    from test_script_tools import make_tool

    make_tool(scv_home, "hold", "#!/bin/sh\ncat >/dev/null\necho ok\n", parameters={"type": "object"})
    d = make_daemon("[server]\nclient_frame_bytes = 16384\nmax_call_bytes_per_connection = 524288\n", home=scv_home)
    arrays = {"x": [[] for _ in range(3000)]}  # a frame of 9 KB
    with d.client(name="runaway") as c:
        sid = c.open_session(workspace)
        first = c.start_call(sid, "script_hold", {})
        [pending] = wait_pending(c)
        held = c.start_call(sid, "script_hold", arrays)
        with pytest.raises(errors.LimitExceeded) as refused:
            c.start_call(sid, "script_hold", arrays)
        assert re.fullmatch(
            r"this connection's calls that have not completed already hold 30\d,\d{3} bytes, and this one's "
            r"29\d,\d{3} would pass server\.max_call_bytes_per_connection \(524,288; .*", refused.value.message), \
            refused.value.message
        c.request(p.ApprovalDecide, approval_id=pending.approval_id, decision="approve", scope="session")
        assert c.wait_call(first).ok and c.wait_call(held).ok


@pytest.mark.one_loop
def test_a_call_larger_than_a_reload_lets_calls_hold_is_told_to_send_less_not_to_wait(make_daemon, workspace):
    # a connection keeps the frame limit of its welcome: after a reload lowered the budget under it, its
    # 100 KB call was refused for good while told to wait for calls to complete (it held none)
    d = make_daemon()
    with d.client(name="older") as c:
        sid = c.open_session(workspace)
        reloaded(d, "[server]\nclient_frame_bytes = 16384\nmax_call_bytes_per_connection = 65536\n")
        with pytest.raises(errors.LimitExceeded) as refused:
            c.start_call(sid, "bash", {"command": "true # " + "x" * 100_000})
        assert re.fullmatch(
            r"this call alone counts 100,\d{3} bytes, more than server\.max_call_bytes_per_connection \(65,536\) "
            r"lets calls hold at once \(a call counts its frame's bytes and 64 for each `\[`, `\{` and `,` in it, at "
            r"least 4,096\); send less in one call, or raise server\.max_call_bytes_per_connection",
            refused.value.message), refused.value.message
        assert c.wait_call(c.start_call(sid, "read", {"path": "."})).error.kind != "limit"  # a smaller one is taken


def test_an_mcp_hosts_calls_count_their_lines_as_a_socket_clients_calls_count_their_frames(make_daemon, workspace):
    # through `scvctl mcp` every call counted 4 KiB, whatever its size: 19 calls of 1 MiB behind one
    # waiting for approval were all taken on, and scvd went from 36 MB to 1 GB
    from test_mcp import McpHost

    d = make_daemon(BUDGET)
    host = McpHost(d, workspace)
    try:
        host.rpc("initialize", {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "h"}})
        first = host.request("tools/call", {"name": "bash", "arguments": {"command": "true"}})
        with d.client(name="watcher", approver=True) as c:
            [pending] = wait_pending(c)
            held = [host.request("tools/call", {"name": "bash", "arguments": BIG}) for _ in range(2)]
            past = host.request("tools/call", {"name": "bash", "arguments": BIG})
            host.request("ping")  # answered behind the refusal, as its line came behind the call's
            refused = host.read()
            assert refused["id"] == past, refused
            assert refused["result"]["isError"] is True, refused  # its model reads it: no -32603, no crashed server
            assert re.fullmatch(
                r"limit: this connection's calls that have not completed already hold 2\d,\d{3} bytes, and this "
                r"one's 12,\d{3} would pass server\.max_call_bytes_per_connection .*",
                refused["result"]["content"][0]["text"])
            assert host.read()["result"] == {}  # the ping
            c.request(p.ApprovalDecide, approval_id=pending.approval_id, decision="approve", scope="session")
            answers = {a["id"]: a for a in (host.read() for _ in range(3))}
        assert set(answers) == {first, *held} and not any(a["result"]["isError"] for a in answers.values())
        assert host.close() == 0
    finally:
        if host.proc.poll() is None:  # failed with calls left waiting: the host would wait for them
            host.proc.kill()
            host.proc.wait()


def test_a_connection_that_says_no_hello_is_closed_and_one_that_did_stays(make_wrapped):
    # 300 connections that never said anything once held every slot of the uid, and `scvctl status`
    # was refused for as long as they stayed: one without hello goes after server.hello_seconds (1 s here)
    d = make_wrapped("[server]\nhello_seconds = 1\n")
    served = welcomed(d)  # connected first: its deadline is over before the silent one's
    with RawConn(d.socket, timeout=30) as silent:
        told = silent.frame()
        assert isinstance(told, p.Error) and told.fatal and told.code == "not_initialized"
        assert told.message.startswith(
            "no hello within 1 s of connecting (server.hello_seconds); connect again and send `hello` first")
        assert silent.closed_by_server()
    assert served.status().pid == d.proc.pid  # said hello in time: still served past the deadline
    served.close()
    assert_status_works(d)
    assert "no hello within 1 s" in d.log()
