"""MCP servers as scvd tools: the real npm reference servers behind scvd's gate, on a real daemon."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from scvd import protocol as p
from scvd.errors import LimitExceeded

import daemon_forks
from conftest import ROOT, DaemonProc, reloaded, wait_pending
from harness import make_wrapped, wait_until  # noqa: F401 (a fixture)

pytestmark = pytest.mark.slow

BIN = ROOT / ".mcp-servers" / "node_modules" / ".bin"
FS, EVERYTHING = BIN / "mcp-server-filesystem", BIN / "mcp-server-everything"


def fs_table(workspace: Path, name: str = "fs") -> str:
    return (f'[mcp.servers.{name}]\ncommand = "{FS}"\nargs = ["{workspace}"]\n'
            f'tool_risk = {{read_text_file = "read_only", list_directory = "read_only"}}\n')


EVERYTHING_TABLE = f'[mcp.servers.every]\ncommand = "{EVERYTHING}"\n'


@pytest.fixture(scope="module", autouse=True)
def installed() -> None:
    missing = [path.name for path in (FS, EVERYTHING) if not path.exists()]
    if missing:
        pytest.skip(f"{', '.join(missing)} not in {BIN}: run bash .ci/install-mcp-servers")


def server(c, name: str, state: str = "ready", timeout: float = 30.0) -> p.McpServerStatus:
    """Poll status until server `name` is in `state`."""
    deadline = time.monotonic() + timeout
    seen = None
    while time.monotonic() < deadline:
        seen = next((s for s in c.request(p.Status).mcp_servers if s.name == name), None)
        if seen is not None and seen.state == state:
            return seen
        time.sleep(0.1)
    raise AssertionError(f"mcp server {name} not {state} after {timeout} s: {seen}")


def _parent(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat[stat.rindex(")") + 2:].split()[1])  # after "(comm)", which may hold spaces


def _descends_from(pid: int, ancestor: int) -> bool:
    while pid > 1:
        if pid == ancestor:
            return True
        try:
            pid = _parent(pid)
        except (OSError, ValueError):
            return False
    return False


def server_pid(name_part: str, daemon_pid: int, runtime: str = "node") -> int:
    """The pid of the `runtime` process under `daemon_pid` whose command line has `name_part`.

    Only that daemon's descendants count: a test on another xdist worker may run the same server."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if name_part in cmdline and runtime in cmdline and _descends_from(int(entry.name), daemon_pid):
                return int(entry.name)
    raise AssertionError(f"no process of scvd (pid {daemon_pid}) runs {name_part}")


def replaced(name_part: str, daemon_pid: int, pid: int, timeout: float = 15.0) -> None:
    """Wait until the server running `name_part` is another process than `pid` (a restart)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if server_pid(name_part, daemon_pid) != pid:
                return
        except AssertionError:  # between the old one's end and the new one's start
            pass
        time.sleep(0.1)
    raise AssertionError(f"the server running {name_part} was not restarted within {timeout:g} s")


@pytest.fixture
def fs_daemon(make_daemon, workspace) -> DaemonProc:
    (workspace / "notes.txt").write_text("hello from the workspace\n")
    return make_daemon(fs_table(workspace))


@pytest.mark.one_loop
def test_filesystem_tools_appear_and_a_read_runs_through_the_gate(make_daemon, workspace):
    (workspace / "notes.txt").write_text("hello from the workspace\n")
    # a cold start (not forked: tests/daemon_forks.py): the MCP SDK imported on a thread, as a real start does
    fs_daemon = make_daemon(fs_table(workspace), fork=False)
    with fs_daemon.client(name="t") as c:
        status = server(c, "fs")
        names = [t.name for t in c.request(p.ToolsList).tools]
        assert status.tools >= 10 and "mcp__fs__read_text_file" in names and "mcp__fs__write_file" in names
        info = next(t for t in c.request(p.ToolsList).tools if t.name == "mcp__fs__write_file")
        assert info.risk == "process" and "path" in info.input_schema["properties"]
        session = c.open_session(workspace)
        done = c.call(session, "mcp__fs__read_text_file", {"path": str(workspace / "notes.txt")})
        assert done.ok, done.error
        assert done.result["text"] == "hello from the workspace\n"
        assert c.request(p.ApprovalsList).approvals == []  # read_only by tool_risk: nobody was asked
        bad = c.call(session, "mcp__fs__read_text_file", {"path": 3})
        assert bad.error.kind == "invalid_arguments"
        assert bad.error.message == "mcp__fs__read_text_file: argument `path`: 3 is not of type 'string'"
        # a refused value is quoted short, as a script tool's is: 50,000 chars came back whole to the agent
        long = c.call(session, "mcp__fs__read_text_file", {"path": ["x" * 50_000]})
        assert long.error.message == ("mcp__fs__read_text_file: argument `path`: "
                                      f"{str(['x' * 50_000])[:80]}... (1 item) is not of type 'string'")


@pytest.mark.one_loop
def test_null_for_an_optional_argument_is_left_out_and_for_a_required_one_refused(fs_daemon, workspace):
    # models send null for an optional argument they mean to leave out; the server's schema says `number`
    with fs_daemon.client(name="t") as c:
        server(c, "fs")
        session = c.open_session(workspace)
        done = c.call(session, "mcp__fs__read_text_file", {"path": str(workspace / "notes.txt"), "head": None})
        assert done.ok, done.error
        assert done.result["text"] == "hello from the workspace\n"
        bad = c.call(session, "mcp__fs__read_text_file", {"path": None, "head": None})
        assert bad.error.kind == "invalid_arguments"
        assert bad.error.message == "mcp__fs__read_text_file: 'path' is a required property"


@pytest.mark.one_loop
def test_a_write_asks_for_approval_and_runs_once_approved(fs_daemon, workspace):
    target = workspace / "out.txt"
    with fs_daemon.client(name="agent") as c, fs_daemon.client(name="me") as me:
        server(c, "fs")
        session = c.open_session(workspace)
        call_id = c.start_call(session, "mcp__fs__write_file", {"path": str(target), "content": "written"})
        (request,) = wait_pending(me)
        assert request.tool == "mcp__fs__write_file" and request.risk == "process"
        assert "MCP server fs: write_file" in request.summary and str(target) in request.summary
        assert "not trusted" in request.details["server_says"]
        assert not target.exists()
        me.request(p.ApprovalDecide, approval_id=request.approval_id, decision="approve")
        done = c.wait_call(call_id)
        assert done.ok, done.error
        assert target.read_text() == "written"


@pytest.mark.one_loop
def test_a_session_grant_ends_when_a_reload_replaces_the_server(make_daemon, workspace):
    """A grant trusted the server as it was; a changed table may run another program, so a session
    opened before the reload is asked again (its tools follow the new server)."""
    d = make_daemon(EVERYTHING_TABLE)
    with d.client(name="agent") as c, d.client(name="me") as me:
        server(c, "every")
        session = c.open_session(workspace)
        call_id = c.start_call(session, "mcp__every__echo", {"message": "one"})
        (request,) = wait_pending(me)
        me.request(p.ApprovalDecide, approval_id=request.approval_id, decision="approve", scope="session")
        assert c.wait_call(call_id).ok
        assert c.call(session, "mcp__every__echo", {"message": "granted"}).ok  # unasked: the grant
        every = server_pid(str(EVERYTHING), d.proc.pid)
        (d.home / "config.toml").write_text(EVERYTHING_TABLE + "timeout_seconds = 60\n")  # a changed table
        d.proc.send_signal(signal.SIGHUP)
        replaced(str(EVERYTHING), d.proc.pid, every)
        server(c, "every")
        call_id = c.start_call(session, "mcp__every__echo", {"message": "asked again"})
        (request,) = wait_pending(me)
        assert request.tool == "mcp__every__echo"
        me.request(p.ApprovalDecide, approval_id=request.approval_id, decision="approve")
        done = c.wait_call(call_id)
        assert done.ok and "asked again" in done.result["text"], done.error


def test_a_call_cut_off_by_a_reload_says_the_reload_stopped_its_server(make_wrapped, workspace):
    """It said "went away during the call; scvd restarts it (see `scvctl status`)": of a server the reload
    removed, which nothing restarts and status no longer lists."""
    long = {"duration": 60, "steps": 60}
    d = make_wrapped(EVERYTHING_TABLE + 'risk = "read_only"\n')
    with d.client(name="t") as c:
        server(c, "every")
        session = c.open_session(workspace)
        for table, why in ((EVERYTHING_TABLE + 'risk = "read_only"\ntimeout_seconds = 100\n',
                            "a reload changed mcp.servers.every; it starts again with it: call again once "
                            "`scvctl status` shows it ready"),
                           ("# no MCP servers\n", "a reload removed mcp.servers.every")):
            server(c, "every")
            call_id = c.start_call(session, "mcp__every__trigger_long_running_operation", long)
            while not isinstance(c.next_event(), p.CallProgress):  # the server runs it
                pass
            (d.home / "config.toml").write_text(table)
            d.proc.send_signal(signal.SIGHUP)
            done = c.wait_call(call_id)
            assert done.error.kind == "unavailable"
            assert done.error.message == ("mcp server every was stopped during the call "
                                          f"(trigger-long-running-operation): {why}"), done.error


@pytest.mark.one_loop
def test_a_denied_write_never_reaches_the_server(fs_daemon, workspace):
    target = workspace / "denied.txt"
    with fs_daemon.client(name="agent") as c, fs_daemon.client(name="me") as me:
        server(c, "fs")
        call_id = c.start_call(c.open_session(workspace), "mcp__fs__write_file",
                               {"path": str(target), "content": "x"})
        (request,) = wait_pending(me)
        me.request(p.ApprovalDecide, approval_id=request.approval_id, decision="deny", reason="no")
        done = c.wait_call(call_id)
        assert done.error.kind == "denied" and not target.exists()


@pytest.mark.one_loop
def test_a_tool_risk_key_naming_no_listed_tool_is_shown_with_the_name_it_resembles(make_daemon, workspace):
    """A typo in tool_risk left the tool at the server's `risk`, silently: the person who vouched for it
    never learned why they are still asked."""
    d = make_daemon(EVERYTHING_TABLE + 'tool_risk = {ecoh = "read_only", zzz_nothing = "read_only"}\n')
    with d.client(name="t") as c:
        server(c, "every")
        errors = [e.message for e in c.request(p.ToolsList).errors if e.source == "mcp:every"]
        tool = next(t for t in c.request(p.ToolsList).tools if t.name == "mcp__every__echo")
    assert "mcp.servers.every.tool_risk names 'ecoh', a tool the server does not list (now): did you mean " \
        "'echo'?" in errors, errors
    assert any(m.startswith("mcp.servers.every.tool_risk names 'zzz_nothing', a tool the server does not list "
                            "(now): it lists ") and "echo" in m for m in errors), errors
    assert tool.risk == "process"  # still the server's risk, as the message explains
    # in the log too, where a person looking at a start or a reload reads (once, not at each restart)
    assert d.log().count("WARNING scvd.mcp: mcp.servers.every.tool_risk names 'ecoh', a tool the server "
                         "does not list (now): did you mean 'echo'?") == 1, d.log()


@pytest.mark.one_loop
def test_a_tool_risk_key_in_another_case_is_shown_with_the_servers_name(make_daemon, workspace):
    """`ECHO` for `echo` resembles it not at all to difflib: the key was said to name no listed tool, with
    no suggestion, though the fix was its case."""
    d = make_daemon(EVERYTHING_TABLE + 'tool_risk = {ECHO = "read_only"}\n')
    with d.client(name="t") as c:
        server(c, "every")
        errors = [e.message for e in c.request(p.ToolsList).errors if e.source == "mcp:every"]
    assert "mcp.servers.every.tool_risk names 'ECHO', a tool the server does not list (now): did you mean 'echo'? " \
        "(a key is the server's name of the tool, its case too)" in errors, errors


def test_progress_notifications_reach_call_progress(make_daemon, workspace):
    d = make_daemon(EVERYTHING_TABLE + 'tool_risk = {trigger-long-running-operation = "read_only"}\n')
    with d.client(name="t") as c:
        server(c, "every")
        call_id = c.start_call(c.open_session(workspace), "mcp__every__trigger_long_running_operation",
                               {"duration": 2, "steps": 4})
        events = []
        while True:
            event = c.next_event()
            events.append(event)
            if isinstance(event, p.CallCompleted) and event.call_id == call_id:
                break
        assert event.ok, event.error
        messages = [e.message for e in events if isinstance(e, p.CallProgress) and e.message]
        assert len(messages) >= 3, events
        assert messages[0].startswith("mcp__every__trigger_long_running_operation: 1/4"), messages


def test_a_long_call_is_cancelled_and_the_server_stays_usable(make_wrapped, workspace):
    # wrapped: its teardown's SIGKILL spares the 2 s the server, still timing the operation, takes to stop
    d = make_wrapped(EVERYTHING_TABLE + 'risk = "read_only"\n')
    with d.client(name="t") as c:
        server(c, "every")
        session = c.open_session(workspace)
        call_id = c.start_call(session, "mcp__every__trigger_long_running_operation",
                               {"duration": 60, "steps": 60})
        while not isinstance(event := c.next_event(), p.CallProgress):
            pass
        c.request(p.CallCancel, call_id=call_id)
        done = c.wait_call(call_id)
        assert done.error.kind == "cancelled"
        again = c.call(session, "mcp__every__echo", {"message": "still here"})
        assert again.ok and "still here" in again.result["text"]
    assert "notifications/cancelled" not in d.log()  # sent quietly; a failure to send would be logged


@pytest.mark.one_loop
def test_an_error_result_becomes_failed_with_the_servers_text(make_daemon, workspace):
    d = make_daemon(EVERYTHING_TABLE + 'risk = "read_only"\n')
    with d.client(name="t") as c:
        server(c, "every")
        done = c.call(c.open_session(workspace), "mcp__every__gzip_file_as_resource",
                      {"name": "x.gz", "data": "http://127.0.0.1:9/nothing"})
        assert done.error.kind == "failed"
        assert done.error.message == "mcp__every__gzip_file_as_resource: fetch failed"


def test_a_killed_server_is_reported_unavailable_and_restarted(fs_daemon, workspace):
    with fs_daemon.client(name="t") as c:
        server(c, "fs")
        session = c.open_session(workspace)
        pid = server_pid(str(workspace), fs_daemon.proc.pid)
        os.kill(pid, signal.SIGKILL)
        down = server(c, "fs", "down")
        assert "the server process was killed by signal 9" in down.error
        errors = c.request(p.ToolsList).errors
        assert any(e.source == "mcp:fs" and "killed by signal 9" in e.message for e in errors), errors
        done = c.call(session, "mcp__fs__read_text_file", {"path": str(workspace / "notes.txt")})
        assert done.error.kind == "unavailable"
        # down for its 1 s backoff, then starting: a call in either says why and does not wait
        assert re.match(r"mcp server fs is (down|starting): the server process was killed by signal 9",
                        done.error.message), done.error
        back = server(c, "fs")
        assert back.restarts == 1 and server_pid(str(workspace), fs_daemon.proc.pid) != pid
        assert c.call(session, "mcp__fs__read_text_file", {"path": str(workspace / "notes.txt")}).ok


@pytest.mark.one_loop
def test_a_server_that_cannot_start_shows_its_stderr(make_daemon, workspace):
    d = make_daemon(f'[mcp.servers.fs]\ncommand = "{FS}"\nargs = ["{workspace}/missing"]\n'
                    f'[mcp.servers.nofile]\ncommand = "{workspace}/no-server"\n'
                    f'[mcp.servers.nocwd]\ncommand = "/bin/cat"\ncwd = "{workspace}/no-dir"\n')
    with d.client(name="t") as c:
        nofile = server(c, "nofile", "down")
        # it named no setting: the key to fix is named now
        assert nofile.error == (f"unavailable: mcp server nofile: command '{workspace}/no-server' does not exist; "
                                "fix mcp.servers.nofile.command"), nofile.error
        nocwd = server(c, "nocwd", "down")
        assert nocwd.error == (f"unavailable: mcp server nocwd: its cwd '{workspace}/no-dir' is not a directory; create it, "
                               "or fix mcp.servers.nocwd.cwd"), nocwd.error
        down = server(c, "fs", "down")
        assert "exited with status 1" in down.error and "stderr:" in down.error, down.error
        assert str(workspace / "missing") in down.error
        errors = {e.source: e.message for e in c.request(p.ToolsList).errors}
        assert errors["mcp:fs"].startswith("the server process exited with status 1; stderr: ")
        # a call of one of its tools says why it has none, not only that no tool has that name
        done = c.call(c.open_session(workspace), "mcp__nofile__read", {})
        assert done.error.kind == "unknown_tool"
        assert re.fullmatch(
            r"no tool named 'mcp__nofile__read' is loaded: mcp server nofile is (down|starting): unavailable: mcp "
            rf"server nofile: command '{re.escape(str(workspace))}/no-server' does not exist; fix "
            r"mcp.servers.nofile.command.*; its tools are listed "
            r"once it is up; `scvctl tools --errors` lists the tools that failed to load", done.error.message), done.error
    status = scvctl(d, "status")
    # between two attempts it is down, during one starting; the last failure shows either way
    assert re.search(r"mcp server fs \(stdio\): (down|starting), 0 tool\(s\), restarted \d+x", status), status
    assert "\n  the server process exited with status 1; stderr: " in status
    assert "fs: mcp:fs: the server process exited with status 1; stderr: " in scvctl(d, "tools", "--errors")


@pytest.mark.one_loop
def test_an_error_answering_initialize_says_so_and_what_to_check(make_daemon):
    """cat echoes scvd's initialize, which scvd answers "Method not found", back: status said only that."""
    d = make_daemon('[mcp.servers.cat]\ncommand = "/bin/cat"\nsandbox = false\n')
    with d.client(name="t") as c:
        down = server(c, "cat", "down")
    assert down.error == ("its initialize was answered with an error: Method not found (code -32601); check that "
                          "`command` and `args` start an MCP server speaking JSON-RPC on its stdin and stdout")


@pytest.mark.one_loop
def test_a_huge_error_answering_initialize_is_cut_and_escaped_in_status_and_tools_list(make_daemon, tmp_path):
    """A server's 1 MB error answering initialize was its error whole: in every status and every
    tools.list (a megabyte a listing, for every client), its escape codes raw."""
    d = make_daemon(quirks_stdio_table("init-error=1000000", tmp_path / "starts"))
    with d.client(name="t") as c:
        error = server(c, "raw", "down").error
        listed = [e.message for e in c.request(p.ToolsList).errors if e.source == "mcp:raw"]
    shown = scvctl(d, "status")
    head = f"its initialize was answered with an error: \\x1b[31mrefused\\x1b[0m {'x' * 958} ... [cut: "
    assert error.startswith(head), error[:200]
    assert re.search(r" \.\.\. \[cut: 99\d,\d{3} chars\] \.\.\. x+ the end \(code -32603\); check that `command` and "
                     "`args` start an MCP server speaking JSON-RPC on its stdin and stdout$", error), error[-300:]
    assert len(error) < 5000 and "\x1b" not in error, len(error)
    assert listed == [error] and error in shown and len(shown) < 10_000, len(shown)


@pytest.mark.one_loop
def test_a_huge_error_answering_a_call_is_cut_and_escaped_in_the_calls_error(make_daemon, workspace, tmp_path):
    """A server's JSON-RPC error answering a call was quoted whole in the call's error (a megabyte to the
    agent, its escape codes and carriage returns raw), where its other errors are escaped and cut."""
    d = make_daemon(quirks_stdio_table("huge-errors=1000000", tmp_path / "starts") + 'risk = "read_only"\n')
    with d.client(name="t") as c:
        server(c, "raw")
        error = c.call(c.open_session(workspace), "mcp__raw__fail", {}).error
    said = "\\x1b[31mrefused\\x1b[0m\nforged line\\r "  # a line break stays, as in a server's stderr
    assert error.kind == "failed" and error.message.startswith(
        f"mcp server raw: fail: {said}{'x' * (1024 - len(said))} ... [cut: "), error.message[:200]
    assert re.search(r" \.\.\. \[cut: 99\d,\d{3} chars\] \.\.\. x{3064} the end$", error.message), error.message[-300:]
    assert "\x1b" not in error.message and "\r" not in error.message



def keyed_huge_errors(make_daemon, n: int, tmp_path: Path) -> DaemonProc:
    """A daemon with the quirks server in `huge-errors=N` mode, given the stored secret LEAK_TOKEN."""
    from conftest import wait_for_socket

    table = quirks_stdio_table(f"huge-errors={n}", tmp_path / "starts") + 'risk = "read_only"\n'
    d = make_daemon(table + 'env = {LEAK_TOKEN = {secret = "LEAK_TOKEN"}}\n', env=NO_KEYRING,
                    secrets={"LEAK_TOKEN": "ghp-revoked-0452"})
    wait_for_socket(d.socket, proc=d.proc)
    return d


@pytest.mark.one_loop
def test_a_refusal_in_the_middle_of_a_long_error_answering_a_call_is_still_credential_missing(
        make_daemon, workspace, tmp_path):
    """The cut of a long JSON-RPC error (what the agent is shown) dropped a `401 Bad credentials` in its
    middle before scvd judged whether the server refused its secret: `failed`, and no auto-heal."""
    d = keyed_huge_errors(make_daemon, 5000, tmp_path)
    with d.client(name="t") as c:
        server(c, "raw")
        error = c.call(c.open_session(workspace), "mcp__raw__refused", {}).error
    assert error.kind == "credential_missing", error
    assert " ... [cut: " in error.message and "401 Bad credentials" not in error.message, error.message[:200]
    assert error.message.endswith("store a new value with store_secret (key 'LEAK_TOKEN', tool "
                                  "'mcp__raw__refused'), then call the tool again (scvd starts the server "
                                  "again with it)"), error.message[-300:]


@pytest.mark.one_loop
def test_a_long_error_from_a_server_given_secrets_is_judged_without_stalling_scvd(make_daemon, workspace, tmp_path):
    """Whether a call's error reads like a refused credential was judged on the loop over the whole
    text: a run of 200,000 spaces took the quoted-source pattern minutes (quadratic), every client
    of scvd waiting; a long error is judged by its head and tail. Completes within the test's timeout."""
    d = keyed_huge_errors(make_daemon, 200_000, tmp_path)
    with d.client(name="t") as c:
        server(c, "raw")
        sid = c.open_session(workspace)
        spaces, refused = c.call(sid, "mcp__raw__spaces", {}).error, c.call(sid, "mcp__raw__refused", {}).error
        assert isinstance(c.request(p.Ping), p.Pong)  # and scvd still answers
    assert spaces.kind == "failed" and spaces.message.startswith("mcp server raw: spaces: table:"), spaces.message[:80]
    # 200,000 characters either side of its `401 Bad credentials`: past the head and tail judged
    assert refused.kind == "failed", refused.message[:80]

@pytest.mark.one_loop
def test_the_servers_working_dirs_and_their_parent_are_private_whatever_the_umask(make_daemon):
    # mkdir(parents=True) gave <data>/mcp the umask's mode (0755): every server's dir name showed
    d = make_daemon('[mcp.servers.cat]\ncommand = "/bin/cat"\nsandbox = false\n', umask=0o022)
    wait_until(lambda: (d.home / "mcp" / "cat").is_dir(), what="the server's working dir")
    assert {stat.S_IMODE((d.home / sub).stat().st_mode) for sub in ("mcp", "mcp/cat")} == {0o700}


STDIO_QUIRKS = ROOT / "tests" / "helpers" / "mcp_stdio_quirks.py"


def quirks_stdio_table(mode: str, starts: Path) -> str:
    return (f'[mcp.servers.raw]\ncommand = "{sys.executable}"\n'
            f'args = ["{STDIO_QUIRKS}", "{mode}", "{starts}"]\nsandbox = false\n')



@pytest.mark.one_loop
def test_a_call_of_a_tool_of_a_server_on_its_first_start_says_it_is_starting(make_daemon, workspace, tmp_path):
    """Until its first start ended (up to initialize's 60 s) such a call was told only "no tool named
    ...; tools: read, write, ...", as for a typo, though docs/tools.md promised why."""
    starts = tmp_path / "starts"
    hold = Path(f"{starts}.hold")
    hold.touch()  # it answers nothing, initialize neither, until the test lets it go
    d = make_daemon(quirks_stdio_table("plain", starts))
    with d.client(name="t") as c:
        wait_until(lambda: starts.exists() and "start" in starts.read_text(), what="the server to start")
        session = c.open_session(workspace)
        try:
            error = c.call(session, "mcp__raw__echo", {}).error
        finally:
            hold.unlink()
        assert error.kind == "unknown_tool"
        assert re.fullmatch(
            r"no tool named 'mcp__raw__echo' is loaded: mcp server raw is starting \(since \d+ s; scvd waits up "
            r"to 60 s for its answer to initialize\); try again in a moment; its tools are listed once it is up "
            r"\(see `scvctl status`\); `scvctl tools --errors` lists the tools that failed to load", error.message), error
        server(c, "raw")
        assert "mcp__raw__echo" in [t.name for t in c.request(p.ToolsList, session=session).tools]

def test_a_server_that_dies_right_after_listing_its_tools_backs_off(make_wrapped, tmp_path):
    """Ready for a moment is not a start that lasted: the wait doubles (1, 2, 4 s; here from 0.5 s), not
    the first wait forever."""
    starts = tmp_path / "starts"
    d = make_wrapped(quirks_stdio_table("die-after-list", starts), env={"HARNESS_MCP_BACKOFF_FIRST": "0.5"})
    waits: list[str] = []
    deadline = time.monotonic() + 60
    while len(waits) < 3:
        assert time.monotonic() < deadline, f"fewer than 3 restarts in 60 s: {waits}"
        waits = re.findall(r"mcp server raw is down: .*; restarting in ([\d.]+) s", d.log())
        time.sleep(0.1)
    assert waits[:3] == ["0.5", "1", "2"], waits
    assert len(starts.read_text().splitlines()) == 3  # the fourth waits its 2 s


@pytest.mark.one_loop
def test_a_server_down_for_good_is_not_logged_at_every_restart(make_inproc, monkeypatch, tmp_path, caplog):
    """Once its wait was at its longest (60 s), a server that never came up logged `is down` at every
    restart: a line a minute in the journal, for as long as it stayed misconfigured."""
    from scvd.mcp import link

    monkeypatch.setattr(link, "BACKOFF_FIRST", 0.01)
    monkeypatch.setattr(link, "BACKOFF_MAX", 0.01)  # the longest wait, from the first failure on
    starts = tmp_path / "starts"
    make_inproc(f'[mcp.servers.gone]\ncommand = "/bin/sh"\nargs = ["-c", "echo start >> {starts}; exit 3"]\n'
                'sandbox = false\n')
    wait_until(lambda: starts.exists() and len(starts.read_text().splitlines()) >= 20, what="20 restarts")
    down = [r.getMessage() for r in caplog.records if " is down: " in r.getMessage()]
    assert len(down) == 1, down  # then once an hour, with how many failed meanwhile
    assert down[0].startswith("mcp server gone is down: the server process exited with status 3"), down


@pytest.mark.one_loop
def test_two_tools_of_one_scvd_name_keep_the_first_and_say_which_was_left_out(make_daemon, tmp_path):
    """`echo` and `Echo` both become mcp__raw__echo: status counted 2 tools for 1, and the error named
    only the scvd name (not which of the server's tools was dropped)."""
    d = make_daemon(quirks_stdio_table("clashing-names", tmp_path / "starts"))
    with d.client(name="t") as c:
        assert server(c, "raw").tools == 1
        listed = c.request(p.ToolsList)
    (tool,) = [t for t in listed.tools if t.name.startswith("mcp__raw__")]
    assert tool.description.startswith("Echo the arguments.")  # the first listed
    (error,) = [e.message for e in listed.errors if e.source == "mcp:raw"]
    assert error == ("Echo: its scvd name mcp__raw__echo is 'echo''s already; the tool is left out (its server's "
                     "other tools are not): rename one of them on the server"), error


@pytest.mark.one_loop
def test_a_server_leaving_out_many_tools_of_long_names_is_told_in_a_few_short_errors(make_daemon, tmp_path):
    """200 tools of 50,000-char names, all one scvd name: 199 errors each quoting two names whole, 20 MB
    that pushed every client's tools.list past server.server_frame_bytes (it failed for all of them)."""
    starts = tmp_path / "starts"
    d = make_daemon(quirks_stdio_table("long-names=200", starts) + 'tool_risk = { zzz = "read_only" }\n')
    with d.client(name="t") as c:
        assert server(c, "raw", timeout=60).tools == 2  # echo, and the first of the long names
        errors = [e.message for e in c.request(p.ToolsList).errors if e.source == "mcp:raw"]
    long = "L" * 64 + "..."
    assert errors[0] == (f"{long}: its scvd name mcp__raw__{'l' * 54} is '{long}''s already; the tool is left out "
                         "(its server's other tools are not): rename one of them on the server"), errors[0]
    assert len(errors) == 7, [e[:200] for e in errors]  # five named, the count of the rest, the tool_risk typo
    assert errors[5] == ("mcp server raw: 195 more of its tools are left out (194 whose scvd name is another's, "
                         "1 whose inputSchema is above scvd's limit); scvd names the first 5: fix them on the server")
    assert errors[6].startswith("mcp.servers.raw.tool_risk names 'zzz', a tool the server does not list (now): "
                                f"it lists H{long[:-4]}..., {long}, "), errors[6][:300]
    assert max(map(len, errors)) < 2000, [len(e) for e in errors]


def test_a_huge_result_fails_its_call_with_kind_limit_saying_why(make_daemon, workspace, tmp_path):
    """A result of a million small items held every client of scvd up for 30 s, parsed on its loop;
    one above 64 MiB ended the connection, the call told only that the server "went away"."""
    starts = tmp_path / "starts"
    d = make_daemon(quirks_stdio_table("huge-results", starts) + 'risk = "read_only"\n')
    with d.client(name="t") as c:
        server(c, "raw")
        sid = c.open_session(workspace)
        many = c.call(sid, "mcp__raw__items", {"n": 10_001})
        assert many.error.kind == "limit", many.error
        assert many.error.message == ("mcp server raw: items: its result has 10001 content items, above scvd's "
                                      "limit of 10000; ask the tool for less")
        fits = c.call(sid, "mcp__raw__items", {"n": 10_000})  # the connection stayed
        assert fits.ok and fits.result["text"].endswith("\n9999"), fits.error
        big = c.call(sid, "mcp__raw__mib", {"mib": 65})
        assert big.error.kind == "limit", big.error
        why = f"the server wrote a message above {64 << 20} bytes, scvd's limit of one message, so scvd closed " \
              "its connection"
        assert big.error.message == (f"mcp server raw: mib: {why}, and restarts the server: if this call asked for a "
                                     "lot, ask the tool for less")
        assert server(c, "raw", "down").error == why
    assert len(starts.read_text().splitlines()) == 1


def test_a_server_flooding_log_notifications_is_held_back_by_the_pipe_and_its_answer_comes(
        make_daemon, workspace, tmp_path):
    """scvd read up to 128 MiB of a server's stdout ahead of what it had taken (its reader's limit was
    64 MiB): an answer behind 300,000 log notifications came 14 s late, one while a server logged all the
    time 121 s, and scvd's memory grew. The server, writing on after a ping, is held back by the pipe: it
    could write only a few MiB past it before scvd took the ping and answered it."""
    d = make_daemon(quirks_stdio_table("flood", tmp_path / "starts") + 'risk = "read_only"\n')
    with d.client(name="t") as c:
        server(c, "raw")
        sid = c.open_session(workspace)
        flooded = c.call(sid, "mcp__raw__flood", {"before": 4, "cap": 32})
        assert flooded.ok, flooded.error
        ahead = json.loads(flooded.result["text"])["ahead"]
        assert ahead < 8 << 20, f"the server wrote {ahead} bytes past its ping before scvd answered it"
        assert c.call(sid, "mcp__raw__echo", {"after": "flood"}).ok  # the connection stayed


def test_a_huge_structured_content_is_left_out_unread_and_scvd_answers_meanwhile(make_daemon, workspace, tmp_path):
    """10 MB of structuredContent held every client up for seconds (the SDK's parse and schema check,
    scvd's walks and size check), only for scvd to leave it out; the note did not say what to do."""
    d = make_daemon(quirks_stdio_table("huge-results", tmp_path / "starts") + 'risk = "read_only"\n')
    with d.client(name="t") as c, d.client(name="other") as other:
        server(c, "raw")
        sid = c.open_session(workspace)
        call_id = c.start_call(sid, "mcp__raw__rows", {"n": 300_000})
        assert other.request(p.Ping)  # served meanwhile
        big = c.wait_call(call_id)
        assert big.ok and big.result["text"] == "300000 rows" and "structured_content" not in big.result, big
        assert big.result["structured_content_omitted"] == (
            "9677790 bytes of JSON, above the 1048576-byte output cap with the text; to have it, ask the tool for less")
        small = c.call(sid, "mcp__raw__rows", {"n": 2})
        assert small.result["structured_content"] == {"rows": [{"i": 0, "name": "row 0"}, {"i": 1, "name": "row 1"}]}


@pytest.mark.one_loop
def test_a_tools_list_scvd_cannot_read_is_why_the_server_is_down(make_daemon, tmp_path):
    """The server exits once scvd gives up on it and closes its stdin: that exit is not the reason
    (it said "the server process exited with status 0")."""
    d = make_daemon(quirks_stdio_table("bad-schema", tmp_path / "starts"))
    with d.client(name="t") as c:
        down = server(c, "raw", "down")
    assert "exited with status" not in down.error and "properties" in down.error, down.error
    assert "Input should be a valid dictionary" in down.error, down.error


@pytest.mark.one_loop
def test_a_servers_pattern_that_backtracks_leaves_the_check_to_the_server(make_daemon, workspace, tmp_path):
    """re matched a server's `pattern` holding the GIL with no bound: a remote server's schema could
    freeze scvd on a model's argument. The match gives up after 0.5 s, as for a schema scvd cannot
    use the server judges, and scvd answers everyone meanwhile."""
    d = make_daemon(quirks_stdio_table("slow-pattern", tmp_path / "starts") + 'risk = "read_only"\n')
    with d.client(name="t") as c, d.client(name="other") as other:
        assert server(c, "raw").tools == 2
        sid = c.open_session(workspace)
        call_id = c.start_call(sid, "mcp__raw__slug", {"slug": "a" * 36 + "!"})
        assert other.request(p.Ping)  # served meanwhile
        done = c.wait_call(call_id)
        assert done.ok and json.loads(done.result["text"]) == {"slug": "a" * 36 + "!"}, done.error
        refused = c.call(sid, "mcp__raw__slug", {"slug": "b"})  # a plain mismatch is still scvd's to refuse
        assert refused.error.kind == "invalid_arguments" and "does not match" in refused.error.message
        # a misnamed argument: the one meant, as a script tool says it, not "'slug' is a required property"
        misnamed = c.call(sid, "mcp__raw__slug", {"slg": "aa"})
        assert misnamed.error.message == ("mcp__raw__slug: Additional properties are not allowed ('slg' was "
                                          "unexpected); did you mean 'slug'? (properties: slug)")


@pytest.mark.one_loop
def test_a_servers_pattern_in_ecma_262s_own_syntax_is_checked_as_ecma_reads_it(make_daemon, workspace, tmp_path):
    """`\\k<y>` (a named group's backreference) failed to compile, and the whole check was left to the
    server: any arguments reached it, a required one missing too. A scoped `(?i:...)` made the whole
    pattern Python's, its `$` letting a final newline through."""
    d = make_daemon(quirks_stdio_table("ecma-pattern", tmp_path / "starts") + 'risk = "read_only"\n')
    with d.client(name="t") as c:
        assert server(c, "raw").tools == 2
        sid = c.open_session(workspace)
        done = c.call(sid, "mcp__raw__dated", {"span": "2024-2024", "code": "Ab"})
        assert done.ok and json.loads(done.result["text"]) == {"span": "2024-2024", "code": "Ab"}, done.error
        for arguments, says in (({"span": "2024-2025"}, "argument `span`: '2024-2025' does not match"),
                                ({"span": "2024-2024", "code": "Ab\n"}, "argument `code`: 'Ab\\n' does not match"),
                                ({}, "'span' is a required property")):
            refused = c.call(sid, "mcp__raw__dated", arguments)
            assert refused.error is not None and refused.error.kind == "invalid_arguments", (arguments, refused)
            assert says in refused.error.message, refused.error


@pytest.mark.one_loop
def test_a_servers_unique_items_over_a_hundred_thousand_mixed_items_is_checked_in_one_pass(
        make_daemon, workspace, tmp_path):
    """jsonschema compared items that do not sort (1 and "1") pair by pair: 110,000 held one of the
    two threads that check arguments for about 45 minutes. Still refused as jsonschema refused it."""
    d = make_daemon(quirks_stdio_table("unique-items", tmp_path / "starts")
                    + 'risk = "read_only"\n[server]\nclient_frame_bytes = 4194304\n')
    tags = [x for i in range(50_000) for x in (i, str(i))]
    with d.client(name="t") as c:
        assert server(c, "raw").tools == 2
        sid = c.open_session(workspace)
        done = c.call(sid, "mcp__raw__tags", {"tags": [*tags, True]})
        assert done.ok, done.error
        refused = c.call(sid, "mcp__raw__tags", {"tags": [*tags, 7.0]})
        assert refused.error.kind == "invalid_arguments", refused.error
        assert refused.error.message == (
            f"mcp__raw__tags: argument `tags`: {repr([*tags, 7.0])[:80]}... (100,001 items) has non-unique elements")


@pytest.mark.one_loop
def test_lint_shows_findings_for_a_schema_with_go_nulls(make_daemon, workspace, tmp_path):
    """`properties: null` and `required: null` (Go's nil map and slice): `scvctl tools --lint` was an
    internal error, every tool's findings lost for one server's schema."""
    d = make_daemon(quirks_stdio_table("go-nulls", tmp_path / "starts") + 'risk = "read_only"\n')
    with d.client(name="t") as c:
        assert server(c, "raw").tools == 2
        lint = {t.name: t.lint for t in c.request(p.ToolsList, lint=True).tools}
        assert lint["mcp__raw__nil"] and lint["read"] == []
    assert "mcp__raw__nil" in scvctl(d, "tools", "--lint")


@pytest.mark.one_loop
def test_lint_of_a_wide_schema_is_capped_and_says_what_it_left_out(make_daemon, tmp_path):
    """One server's tool with 1,000 undescribed arguments made tools.list {lint} carry 1,000 findings
    for it, and three quoting a 30,000-char description whole: a few such tools and the listing no
    longer fit server.server_frame_bytes (every tool's lint lost). Shown: the first 20, each cut."""
    d = make_daemon(quirks_stdio_table("wide-schema", tmp_path / "starts") + 'risk = "read_only"\n')
    with d.client(name="t") as c:
        assert server(c, "raw").tools == 2
        lint = {t.name: t.lint for t in c.request(p.ToolsList, lint=True).tools}["mcp__raw__wide"]
    assert len(lint) == 21 and all(len(line) < 600 for line in lint), [len(line) for line in lint]
    whole = "param_example: parameter 'long' description needs an example (e.g. ...): " + repr("x" * 30_000)
    assert lint[3] == f"{whole[:500]} ... [cut: {len(whole) - 500:,} more chars]"
    assert lint[-2] == "param_description: parameter 'a13' has no description"
    assert lint[-1] == ("left_out: 986 more findings are not shown (at most 20 per tool): "
                        "fix the ones above, then list again")


@pytest.mark.one_loop
def test_a_lint_listing_of_tools_filling_their_share_still_fits_one_frame(make_daemon, tmp_path):
    """A server's tools are held to its share of a tools.list frame without their lint: tools of
    small entries and 20 findings each made tools.list {lint} past server.server_frame_bytes (a
    `limit` error, every tool's lint lost). The lint of the last tools is left out, and said so."""
    d = make_daemon("[server]\nserver_frame_bytes = 65536\n[tools]\noutput_limit_bytes = 8192\n"
                    "read_limit_bytes = 8192\n[skills]\nmax_skill_bytes = 8192\n"
                    + quirks_stdio_table("many-findings=200", tmp_path / "starts")
                    + 'risk = "read_only"\nmax_tools = 4096\n')
    with d.client(name="t") as c:
        taken = server(c, "raw").tools
        listed = c.request(p.ToolsList, lint=True)
    lint = {t.name: t.lint for t in listed.tools if t.name.startswith("mcp__raw__f")}
    assert 30 < len(lint) == taken - 1 < 200, taken  # held to the share: some left out
    shown = [name for name, lines in lint.items() if len(lines) == 21]
    (noted,) = [lines for lines in lint.values() if len(lines) == 1]
    cut = len(lint) - len(shown)
    assert shown and lint[shown[-1]][-1].startswith("left_out: ")
    assert noted == [f"left_out: the lint of this tool and of every tool listed after it is not shown ({cut} tools' "
                     f"lint, {cut * 21} lines): with it this answer would pass server.server_frame_bytes (65,536); "
                     "raise it, or fix the findings shown, then list again"]


def make_script_tool(home: Path, name: str) -> None:
    """A script tool that breaks no design rule (its lint is empty), written before the daemon starts."""
    folder = home / "tools" / "script" / name
    folder.mkdir(parents=True)
    (folder / "tool.json").write_text(json.dumps({
        "description": "Count the words in a text given as argument.\nUse for quick statistics; bash for the rest.",
        "parameters": {"type": "object", "required": ["text"], "additionalProperties": False, "properties": {
            "text": {"type": "string", "maxLength": 100, "description": "The text to count, from the user's message, e.g. 'a b c'."}}}}))
    (folder / "run").write_text("#!/bin/sh\necho '{}'\n")
    (folder / "run").chmod(0o700)


# the smallest frame the limits it bounds allow
SMALL_FRAME = ("[server]\nserver_frame_bytes = 32768\n[tools]\noutput_limit_bytes = 2048\nread_limit_bytes = 2048\n"
               "[skills]\nmax_skill_bytes = 2048\n")


@pytest.mark.one_loop
def test_a_lint_listing_that_does_not_fit_even_without_lint_is_a_limit_error_saying_so(make_daemon, scv_home,
                                                                                       tmp_path):
    """With every tool's lint left out and still no room for the line saying so, tools.list {lint}
    answered the tools without any lint and without a word, or, as here, past the frame: an `internal`
    error that said nothing of the lint."""
    for i in range(40):  # script tools (lint-free: one that breaks a rule is not loaded) fill the frame
        make_script_tool(scv_home, f"pad{i:02d}")
    d = make_daemon(SMALL_FRAME + quirks_stdio_table("many-findings=200", tmp_path / "starts")
                    + 'risk = "read_only"\nmax_tools = 4096\n', home=scv_home)
    with d.client(name="t") as c:
        taken = server(c, "raw").tools
        with pytest.raises(LimitExceeded) as info:
            c.request(p.ToolsList, lint=True)
    assert re.fullmatch(rf"tools.list with lint: with every tool's lint left out \({taken} tools had lint, "
                        r"\d+ lines\), this answer is still [\d,]+ bytes, above server.server_frame_bytes "
                        r"\(32,768\); raise it", info.value.message), info.value.message


@pytest.mark.one_loop
def test_a_listing_past_the_frame_is_a_limit_error_saying_what_to_do(make_daemon, scv_home):
    """Script tools are not bounded to a share of the frame as an MCP server's are: past it, tools.list
    was an `internal` error giving its size alone, `scvctl tools` likewise."""
    for i in range(80):
        make_script_tool(scv_home, f"pad{i:02d}")
    d = make_daemon(SMALL_FRAME, home=scv_home)
    with d.client(name="t") as c:
        with pytest.raises(LimitExceeded) as info:
            c.request(p.ToolsList)
        assert c.request(p.Status).mcp_servers == []  # the connection serves on
    assert re.fullmatch(r"tools.list: this answer \(\d+ tools, 0 load errors\) is [\d,]+ bytes, above "
                        r"server.server_frame_bytes \(32,768\); raise it, or load fewer tools \(script tools, or "
                        r"an MCP server's max_tools\)", info.value.message), info.value.message


# a slow tools/list said "no answer to initialize", whose fix (the server does not speak MCP) is not its own
@pytest.mark.parametrize("mode, awaited", [("slow-start=30", "initialize"), ("slow-list=30", "its tools/list")])
def test_no_answer_to_initialize_says_so_though_the_server_exits_after(make_inproc, monkeypatch, tmp_path,
                                                                       mode, awaited):
    from scvd.mcp import link

    monkeypatch.setattr(link, "CONNECT_TIMEOUT", 1.0)
    d = make_inproc(quirks_stdio_table(mode, tmp_path / "starts"))
    with d.client(name="t") as c:
        down = server(c, "raw", "down")
    assert down.error.startswith(f"no answer to {awaited} within 1 s"), down.error


def test_a_stop_cut_short_leaves_no_server_process_behind(make_inproc, monkeypatch, tmp_path):
    """A stop that cut a server's own stop short (past its grace, or a stop while a start given up on
    was still closing) SIGKILLed the group and ended without its exit: the daemon's loop closed with
    that wait pending ("Event loop is closed") and the server a zombie of scvd's, never reaped."""
    from scvd.mcp import link
    from scvd.proctree import read_stat

    monkeypatch.setattr(link, "STOP_GRACE", 0.2)  # cut short while it still ignores its stdin's end
    starts = tmp_path / "starts"
    Path(f"{starts}.hold").touch()  # it reads nothing: only a signal ends it
    d = make_inproc(quirks_stdio_table("plain", starts))
    wait_until(lambda: starts.exists() and "start" in starts.read_text(), what="the server to start")
    pid = server_pid(str(starts), os.getpid(), runtime=sys.executable)
    d.call_soon(d.daemon.request_stop, "test")
    d.thread.join(30)
    assert not d.thread.is_alive() and not d.errors, d.errors
    assert read_stat(pid) is None  # ended and reaped: no zombie left


WHY_DOWN = {
    # the pages came again for ever, the list growing with them, until initialize's 60 s ran out
    "cursor-loop": ("ValueError: its tools/list repeats the cursor 'again' after 2 tools; ask the server's author "
                    "to fix its pagination"),
    # its stdout was read as MCP and dropped: status said "exited with status 2", and nothing why
    "usage": ("the server process exited with status 2; its stdout had lines that are not MCP's JSON-RPC: "
              "usage: server --root DIR\n  --root DIR  the directory to serve"),
}


@pytest.mark.one_loop
@pytest.mark.parametrize("mode", WHY_DOWN)
def test_why_a_server_is_down(make_daemon, tmp_path, mode):
    d = make_daemon(quirks_stdio_table(mode, tmp_path / "starts"))
    with d.client(name="t") as c:
        down = server(c, "raw", "down")
    assert down.error == WHY_DOWN[mode], down.error


def test_no_answer_to_a_tools_list_after_list_changed_keeps_the_tools_and_says_so(make_inproc, monkeypatch,
                                                                                   workspace, tmp_path, caplog):
    # the re-list had no deadline: a server that never answered held its task for good
    from scvd.mcp import link

    monkeypatch.setattr(link, "CONNECT_TIMEOUT", 1.0)
    d = make_inproc(quirks_stdio_table("relist-hangs", tmp_path / "starts") + 'risk = "read_only"\n')
    with d.client(name="t") as c:
        server(c, "raw")
        sid = c.open_session(workspace)
        assert c.call(sid, "mcp__raw__announce", {}).ok
        wait_until(lambda: "no answer to tools/list after list_changed within 1 s; its tools stay as they were"
                   in caplog.text, what="the re-list to give up")
        assert c.call(sid, "mcp__raw__echo", {"n": 1}).ok
    assert d.daemon.mcp.links["raw"]._relist_task.done()


@pytest.mark.one_loop
def test_a_huge_error_answering_a_relist_is_logged_cut_and_escaped(make_inproc, workspace, tmp_path, caplog):
    """The warning of a tools/list after list_changed that failed quoted the server's error whole: a
    megabyte into the journal at each list_changed, where its other errors are escaped and cut."""
    d = make_inproc(quirks_stdio_table("huge-errors=1000000", tmp_path / "starts") + 'risk = "read_only"\n')
    failed = "mcp server raw: tools/list after list_changed failed: "
    with d.client(name="t") as c:
        server(c, "raw")
        assert c.call(c.open_session(workspace), "mcp__raw__announce", {}).ok
        wait_until(lambda: failed in caplog.text, what="the relist to fail")
    (logged,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith(failed)]
    assert logged.startswith(f"{failed}\\x1b[31mrefused\\x1b[0m\nforged line\\r xxx"), logged[:200]
    assert re.search(r" \.\.\. \[cut: 99\d,\d{3} chars\] \.\.\. x+ the end$", logged), logged[-300:]
    assert len(logged) < 5000 and "\x1b" not in logged, len(logged)


@pytest.mark.one_loop
def test_a_session_grant_outlives_a_relist_of_a_schema_holding_nan(make_daemon, workspace, tmp_path):
    """NaN != NaN: a tool whose inputSchema holds NaN (Python's json writes it, and the SDK reads it)
    compared unequal to itself at every tools/list, so each list_changed revoked its session grants
    and the person was asked again for a tool the server never changed."""
    d = make_daemon("[approvals]\ntimeout_seconds = 10\n"  # a revoked grant: denied in 10 s, not 900
                    + quirks_stdio_table("nan-schema", tmp_path / "starts") + 'tool_risk = { announce = "read_only" }\n')
    with d.client(name="agent") as c, d.client(name="me") as me:
        server(c, "raw")
        session = c.open_session(workspace)
        call_id = c.start_call(session, "mcp__raw__odd", {})
        (request,) = wait_pending(me)
        me.request(p.ApprovalDecide, approval_id=request.approval_id, decision="approve", scope="session")
        assert c.wait_call(call_id).ok
        assert c.call(session, "mcp__raw__announce", {}).ok  # its list_changed: scvd lists the tools again
        wait_until(lambda: "mcp__raw__later" in [t.name for t in c.request(p.ToolsList).tools], what="the relist")
        done = c.call(session, "mcp__raw__odd", {})  # unasked: the grant
        assert done.ok, done.error
    assert "was redefined by its server" not in d.log()


@pytest.mark.one_loop
def test_a_tools_list_scvd_fails_to_take_leaves_the_server_no_tools_saying_why(make_inproc, monkeypatch, workspace,
                                                                               tmp_path, caplog):
    """An exception turning a tools/list into tools (a bug of scvd's: no list the SDK accepts raises one
    now, so one is put in the size of `later`, listed after a list_changed) left the server `ready` with
    its tools as before and not a word anywhere: it went into the relist's task, never read."""
    from scvd.mcp import cap

    entry_size = cap.entry_size

    def broken(spec):
        if spec.name == "later":
            raise TypeError("a shape scvd did not expect")
        return entry_size(spec)

    monkeypatch.setattr(cap, "entry_size", broken)
    d = make_inproc(quirks_stdio_table("changes-while-listing", tmp_path / "starts") + 'risk = "read_only"\n')
    why = ("scvd could not take the tools of its tools/list (TypeError: a shape scvd did not expect), a bug in "
           "scvd: it lists none of them until a tools/list it can take (the server's restart, or its "
           "list_changed); report it with the traceback in scvd's log")
    with d.client(name="t") as c:
        wait_until(lambda: server(c, "raw").error is not None, what="the relist")
        status = server(c, "raw")
        assert (status.tools, status.error) == (0, why), status  # the tools of its first list are gone too
        errors = [e.message for e in c.request(p.ToolsList).errors if e.source == "mcp:raw"]
        assert errors == [f"mcp server raw: {why}"], errors
        sid = c.open_session(workspace)
        done = c.call(sid, "mcp__raw__echo", {})
    assert done.error.kind == "unknown_tool" and f"is loaded: mcp server raw: {why}" in done.error.message, done.error
    (logged,) = [r for r in caplog.records if "could not take the tools" in r.getMessage()]
    assert logged.exc_info and "a shape scvd did not expect" in str(logged.exc_info[1])


@pytest.mark.one_loop
def test_a_tool_with_a_huge_schema_is_a_load_error_and_the_rest_stay(make_daemon, workspace, tmp_path):
    d = make_daemon(quirks_stdio_table("huge-schema", tmp_path / "starts") + 'risk = "read_only"\n')
    with d.client(name="t") as c:
        assert server(c, "raw").tools == 1
        listed = c.request(p.ToolsList)  # was `internal` for every client: a 9 MB schema in the frame
        names = [t.name for t in listed.tools]
        assert "mcp__raw__echo" in names and "mcp__raw__big" not in names
        (error,) = [e for e in listed.errors if e.source == "mcp:raw"]
        assert re.match(r"big: its inputSchema is \d+ bytes of JSON, above scvd's limit of 65536; the tool is "
                        r"left out", error.message), error
        assert c.call(c.open_session(workspace), "mcp__raw__echo", {"a": 1}).ok
    assert "raw: mcp:raw: big: its inputSchema is " in scvctl(d, "tools", "--errors")


@pytest.mark.one_loop
def test_a_schema_ref_elsewhere_is_never_fetched(make_daemon, workspace, tmp_path):
    """A server's inputSchema may point a $ref at any URL: checking arguments before approval
    must not make scvd fetch it (a request from the user's machine that the server chose)."""
    import http.server
    import threading

    fetched: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            fetched.append(self.path)
            body = b'{"type": "string"}'
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None: ...

    web = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=web.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{web.server_address[1]}/schema.json"
        d = make_daemon(quirks_stdio_table(f"remote-ref={url}", tmp_path / "starts") + 'risk = "read_only"\n')
        with d.client(name="t") as c:
            assert server(c, "raw").tools == 2
            done = c.call(c.open_session(workspace), "mcp__raw__refd", {"x": 3})
    finally:
        web.shutdown()
        web.server_close()
    assert fetched == []
    # the $ref cannot be resolved here, so the server judges its own arguments (echo answers)
    assert done.ok, done.error
    assert '"x": 3' in done.result["text"]


def scvctl(d: DaemonProc, *args: str) -> str:
    from conftest import base_env

    done = daemon_forks.scvctl(list(args), base_env(d.home), timeout=30)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_server_runs_in_its_own_group_with_a_scrubbed_environment(make_daemon, workspace):
    d = make_daemon(EVERYTHING_TABLE + 'risk = "read_only"\nenv = {FROM_CONFIG = "yes"}\n',
                    env={"SECRET_OF_THE_DAEMON": "leak", "OPENAI_API_KEY": "sk-leak"})
    with d.client(name="t") as c:
        server(c, "every")
        done = c.call(c.open_session(workspace), "mcp__every__get_env", {})
        assert done.ok, done.error
        assert '"FROM_CONFIG": "yes"' in done.result["text"]
        assert "leak" not in done.result["text"] and "SCV_HOME" not in done.result["text"]
        pid = server_pid(str(EVERYTHING), d.proc.pid)
        assert os.getpgid(pid) == pid != os.getpgid(d.proc.pid)
    assert d.stop() == 0
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # stopped with the daemon


def test_sighup_applies_added_removed_and_changed_servers_only(make_daemon, workspace, tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    d = make_daemon(fs_table(workspace) + fs_table(other, "gone"))
    with d.client(name="t") as c:
        server(c, "fs")
        server(c, "gone")
        before = c.open_session(workspace)  # keeps the registry of the config before the reload
        assert c.call(before, "mcp__gone__list_directory", {"path": str(other)}).ok
        kept, gone = server_pid(str(workspace), d.proc.pid), server_pid(str(other), d.proc.pid)
        (d.home / "config.toml").write_text(fs_table(workspace) + EVERYTHING_TABLE)
        d.proc.send_signal(signal.SIGHUP)
        server(c, "every")
        deadline = time.monotonic() + 15
        while any(s.name == "gone" for s in c.request(p.Status).mcp_servers) and time.monotonic() < deadline:
            time.sleep(0.1)
        names = [t.name for t in c.request(p.ToolsList).tools]
        assert "mcp__every__echo" in names and "mcp__fs__read_text_file" in names
        assert not any(n.startswith("mcp__gone__") for n in names)
        # MCP tools follow the running servers in a session opened before the reload too
        removed = c.call(before, "mcp__gone__list_directory", {"path": str(other)})
        assert removed.error.kind == "unknown_tool", removed.error
        assert c.call(before, "mcp__fs__list_directory", {"path": str(workspace)}).ok
        added = c.call(before, "mcp__every__echo", {})  # known: its arguments are checked (no message)
        assert added.error.kind == "invalid_arguments", added.error
        assert server_pid(str(workspace), d.proc.pid) == kept  # untouched
        with pytest.raises(ProcessLookupError):
            os.kill(gone, 0)
        # a changed table restarts that server only
        (d.home / "config.toml").write_text(fs_table(workspace) + EVERYTHING_TABLE + 'risk = "read_only"\n')
        every = server_pid(str(EVERYTHING), d.proc.pid)
        d.proc.send_signal(signal.SIGHUP)
        replaced(str(EVERYTHING), d.proc.pid, every)
        server(c, "every")
        info = next(t for t in c.request(p.ToolsList).tools if t.name == "mcp__every__echo")
        assert info.risk == "read_only"
        assert server_pid(str(workspace), d.proc.pid) == kept


def stubborn_table(name: str, tag: str, mode: str = "stubborn") -> str:
    """A stdio server that ignores its stdin's end: stopping it takes the 2 s grace, then SIGTERM."""
    return quirks_stdio_table(mode, Path(tag)).replace("[mcp.servers.raw]", f"[mcp.servers.{name}]")


def running_with(tag: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and tag.encode() in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def test_a_stop_during_a_reload_leaves_no_server_running_and_starts_none(make_daemon, tmp_path):
    # the reload's stop of the changed server was cut off by scvd's exit (the server never got its
    # SIGTERM), and the reload went on to start servers after scvd had stopped them all
    tag = str(tmp_path / "stubborn")  # in each server's argv (its starts file)
    old = Path(f"{tag}-old")  # the old server records its start, and its SIGTERM (`cleaned`)
    d = make_daemon(stubborn_table("slow", str(old), "trap-term") + fs_table(tmp_path, "kept"))
    with d.client(name="t") as c:
        server(c, "slow")
        server(c, "kept")
    assert running_with(str(old))
    (d.home / "config.toml").write_text(stubborn_table("slow", f"{tag}-new") + fs_table(tmp_path, "kept")
                                        + stubborn_table("added", f"{tag}-added"))
    d.proc.send_signal(signal.SIGHUP)
    # its stdin closed: the reload now waits in its stop (the 2 s grace before the SIGTERM)
    wait_until(Path(f"{old}.closed").exists, what="the reload to begin stopping the old server")
    assert d.stop() == 0
    log = d.log()
    stopped_at = log.index("stopping (")
    # else scvd's stop came after the reload's stop had ended, and this test proved nothing
    assert "mcp server slow: stopped" not in log[:stopped_at], "scvd's stop missed the reload's stop"
    assert old.read_text() == "start\ncleaned\n", log[-3000:]  # not left to the guardian's SIGKILL
    assert "mcp server added: starting" not in log[stopped_at:], log[stopped_at:]
    assert running_with(tag) == [], log[-3000:]


# --- a streamable HTTP server, written with the SDK's own server class ------------------------

HTTP_SERVER = ROOT / "tests" / "helpers" / "mcp_http_server.py"
QUIRKS_SERVER = ROOT / "tests" / "helpers" / "mcp_http_quirks.py"  # GET 405; `hang-delete`


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_http_server(port: int, script: Path = HTTP_SERVER, args: tuple[str, ...] = ("s3cret",)) -> Any:
    """tests/helpers/mcp_http_server.py (its token), or `script`, on 127.0.0.1:`port`, once it accepts
    connections. Forked as the daemons are (daemon_forks.py: the SDK's server and uvicorn imported
    once); its output goes to a file, shown if it exits before it listens."""
    fd, log = tempfile.mkstemp(prefix="mcp-http-server-", suffix=".log")
    os.close(fd)
    proc = daemon_forks.start_script(script, [str(port), *args], Path(log))
    proc.log = Path(log)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return proc
        except OSError:
            assert proc.poll() is None, proc.log.read_text(errors="replace")
            time.sleep(0.1)
    raise AssertionError("the HTTP server did not start")


def stop(proc: Any) -> None:
    proc.kill()
    proc.wait(10)
    proc.log.unlink(missing_ok=True)


@pytest.fixture
def http_server():
    port = free_port()
    proc = start_http_server(port)
    yield f"http://127.0.0.1:{port}/mcp"
    stop(proc)


def http_table(url: str) -> str:
    return (f'[mcp.servers.notes]\nurl = "{url}"\nheaders = {{Authorization = {{secret = "NOTES_TOKEN"}}}}\n'
            'tool_risk = {add = "read_only", grow = "read_only", extra_tool = "read_only"}\n')


def store_secret(d: DaemonProc, key: str, value: str) -> None:
    """`value` stored as `key` in the secrets.toml of a daemon running already."""
    from conftest import stored

    stored(d.home, {key: value})


NO_KEYRING = {"PYTHON_KEYRING_BACKEND": "keyring.backends.null.Keyring"}


def keyed_daemon(make_daemon, config: str, key: str, value: str) -> DaemonProc:
    """A daemon of `config` with `value` stored as `key` (in secrets.toml) before it starts its servers."""
    from conftest import wait_for_socket

    d = make_daemon(config, env=NO_KEYRING, secrets={key: value})
    wait_for_socket(d.socket, proc=d.proc)
    return d


def http_daemon(make_daemon, url: str, token: str, monkeypatch, env: dict[str, str] | None = None) -> DaemonProc:
    """A daemon consuming the HTTP server, with `token` stored (in secrets.toml) before it starts."""
    from conftest import wait_for_socket

    monkeypatch.setenv("PYTHON_KEYRING_BACKEND", NO_KEYRING["PYTHON_KEYRING_BACKEND"])
    d = make_daemon(http_table(url), env={**NO_KEYRING, **(env or {})}, secrets={"NOTES_TOKEN": token})
    wait_for_socket(d.socket, proc=d.proc)
    return d


@pytest.mark.one_loop
def test_an_http_server_is_consumed_with_a_header_secret(make_daemon, workspace, http_server, monkeypatch):
    d = http_daemon(make_daemon, http_server, "Bearer s3cret", monkeypatch)
    with d.client(name="t") as c:
        status = server(c, "notes")
        assert status.transport == "http" and status.tools == 4
        session = c.open_session(workspace)
        done = c.call(session, "mcp__notes__add", {"a": 2, "b": 3})
        assert done.ok, done.error
        assert done.result["text"] == "2 + 3 = 5"
        assert c.request(p.ApprovalsList).approvals == []
        call_id = c.start_call(session, "mcp__notes__fail", {"reason": "out of paper"})
        (request,) = wait_pending(c)  # risk "process" by default: it asks
        c.request(p.ApprovalDecide, approval_id=request.approval_id, decision="approve")
        failed = c.wait_call(call_id)
        assert (failed.error.kind, failed.error.message) == ("failed", "mcp__notes__fail: Error executing tool fail")


@pytest.mark.one_loop
def test_calls_to_an_http_server_add_no_line_per_request_to_the_log(make_daemon, workspace, http_server,
                                                                     monkeypatch):
    """At `info` the HTTP library logged every request of every call (`HTTP Request: POST ...`) and the
    SDK each session's id, none of which docs/operations.md lists; `scvd run -v` still shows them."""
    d = http_daemon(make_daemon, http_server, "Bearer s3cret", monkeypatch)
    with d.client(name="t") as c:
        server(c, "notes")
        session = c.open_session(workspace)
        for n in range(3):
            assert c.call(session, "mcp__notes__add", {"a": n, "b": 1}).ok
    log = d.log()
    assert "mcp server notes ready: 4 tool(s)" in log
    assert "HTTP Request" not in log and "session ID" not in log, log


@pytest.mark.one_loop
def test_a_missing_header_secret_is_credential_missing_naming_the_key(make_daemon, http_server):
    d = make_daemon(http_table(http_server), env=NO_KEYRING)
    with d.client(name="t") as c:
        down = server(c, "notes", "down")
        # store_secret too: the way an agent heals it itself (seed 003)
        assert down.error == ("credential_missing: mcp.servers.notes.headers Authorization needs the secret "
                              "NOTES_TOKEN, which is not set; store it with store_secret (key 'NOTES_TOKEN', tool "
                              "'mcp__notes'), which starts the server with it at once, or `scvctl secrets set "
                              "NOTES_TOKEN`, which the server's next restart reads"), down.error


@pytest.mark.one_loop
def test_a_wrong_header_secret_shows_the_http_status(make_daemon, http_server, monkeypatch):
    d = http_daemon(make_daemon, http_server, "Bearer wrong", monkeypatch)
    with d.client(name="t") as c:
        down = server(c, "notes", "down")
        assert down.error.startswith(f"HTTP status 401 from {http_server}"), down.error



@pytest.mark.one_loop
def test_a_server_refused_at_its_first_connect_names_the_key_and_store_secret_heals_it(make_daemon, workspace,
                                                                                       http_server, monkeypatch):
    """A stale stored token refused at the first connect read "HTTP status 401 ...: Server returned an error
    response" everywhere (the unknown_tool of a call of its tools, status, the log), naming no key: seed 003's
    auto-heal (the key from the error, store_secret, the call again) could not start."""
    d = http_daemon(make_daemon, http_server, "Bearer stale", monkeypatch)
    fix = ("the server refused the secret NOTES_TOKEN sent in its headers; store a new value with store_secret "
           "(key 'NOTES_TOKEN', tool 'mcp__notes') or `scvctl secrets set NOTES_TOKEN`")
    with d.client(name="agent") as c, d.client(name="me") as me:
        down = server(c, "notes", "down")
        assert down.error.startswith(f"HTTP status 401 from {http_server}: {fix}"), down.error
        session = c.open_session(workspace)
        done = c.call(session, "mcp__notes__add", {"a": 1, "b": 2})
        assert done.error.kind == "unknown_tool", done.error
        assert f"mcp server notes is down: HTTP status 401 from {http_server}: {fix}" in done.error.message, \
            done.error.message
        assert fix in " ".join(e.message for e in c.request(p.ToolsList).errors)
        for shown in (scvctl(d, "status"), scvctl(d, "tools", "--errors"), d.log()):
            assert fix in shown, shown
        me.request(p.ApprovalsWatch)
        healing = c.start_call(session, "store_secret", {"key": "NOTES_TOKEN", "tool": "mcp__notes"})
        enter_secret(me, "Bearer s3cret")
        healed = c.wait_call(healing)
        assert healed.ok and healed.result["mcp_servers"] == {"notes": "ready: 4 tool(s)"}, healed
        assert c.call(session, "mcp__notes__add", {"a": 1, "b": 2}).result["text"] == "1 + 2 = 3"


@pytest.mark.one_loop
def test_a_key_in_the_urls_query_is_never_shown(make_daemon, http_server, tmp_path):
    """Hosted servers document `url = ".../mcp?api_key=..."`: the key was printed wherever the url was
    (the log's start line, `scvctl status`, the down message, check-config)."""
    refused = f"{http_server}?api_key=sk-url-4711&plan=pro"  # no Authorization header: 401
    closed = f"http://127.0.0.1:{free_port()}/mcp?token=sk-url-4712"  # nothing listens
    d = make_daemon(f'[mcp.servers.notes]\nurl = "{refused}"\n[mcp.servers.gone]\nurl = "{closed}"\n')
    with d.client(name="t") as c:
        notes, gone = server(c, "notes", "down"), server(c, "gone", "down")
    assert notes.error.startswith(f"HTTP status 401 from {http_server}: "), notes.error
    assert gone.error.startswith(f"cannot connect to {closed.split('?')[0]}: "), gone.error
    from conftest import base_env

    checked = subprocess.run([sys.executable, "-m", "scvd", "check-config"], env=base_env(d.home),
                             capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0, checked.stderr
    assert (f'# mcp.servers.notes.url = "{http_server}"  (its query and user:password@ not shown)  '
            "# file") in checked.stdout.splitlines(), checked.stdout
    for shown in (scvctl(d, "status"), scvctl(d, "tools", "--errors"), d.log(), checked.stdout):
        assert "sk-url-471" not in shown, shown


def query_key_daemon(make_daemon, url: str, key: str, monkeypatch, args: list[str] | None = None) -> DaemonProc:
    """A daemon consuming the HTTP server at `url`, its key sent in the query from the store (NOTES_KEY)."""
    from conftest import wait_for_socket

    monkeypatch.setenv("PYTHON_KEYRING_BACKEND", NO_KEYRING["PYTHON_KEYRING_BACKEND"])
    d = make_daemon(f'[mcp.servers.notes]\nurl = "{url}"\nquery = {{key = {{secret = "NOTES_KEY"}}}}\n'
                    'risk = "read_only"\n', env=NO_KEYRING, args=args, secrets={"NOTES_KEY": key})
    wait_for_socket(d.socket, proc=d.proc)
    return d


def added_through_the_query(c, workspace: Path) -> str:
    """A call that the server answers only with the right key; the session it was made in."""
    server(c, "notes")
    session = c.open_session(workspace)
    assert c.call(session, "mcp__notes__add", {"a": 2, "b": 3}).result["text"] == "2 + 3 = 5"
    return session


@pytest.mark.one_loop
def test_a_secret_in_the_url_query_is_sent_named_when_refused_and_never_shown(make_daemon, workspace, monkeypatch):
    """A key the server takes in its url's query could only be pasted into `url`, in plain text, with
    no auto-heal (seed 003) when it was refused: `query = {key = {secret = "KEY"}}` sends it from the
    store, and a 401 names it."""
    from conftest import wait_for_socket

    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    web = start_http_server(port, args=("s3cr+t/==",))  # one urlencode changes
    try:
        d = query_key_daemon(make_daemon, f"{url}?plan=pro", "s3cr+t/==", monkeypatch)
        with d.client(name="t") as c:
            session = added_through_the_query(c, workspace)
            stop(web)
            web = start_http_server(port, args=("n3w",))  # the key was rotated on the server's side
            done = c.call(session, "mcp__notes__add", {"a": 1, "b": 1})
            assert done.error.kind == "credential_missing", done.error
            assert done.error.message.startswith(
                f"mcp server notes: add: HTTP status 401 from {url}: the server refused the secret NOTES_KEY "
                "sent in its url's query; store a new value with store_secret (key 'NOTES_KEY', "), done.error
        for shown in (scvctl(d, "status"), d.log()):
            assert "s3cr" not in shown, shown
    finally:
        stop(web)


@pytest.mark.one_loop
def test_debug_logging_hides_a_key_in_the_urls_query(make_daemon, workspace, monkeypatch):
    """`scvd run -v` logs each HTTP request with its url (the HTTP library, at debug): a key sent in the
    url's query, from the store or pasted into `url`, showed there in plain text, in a log a user
    pastes into a bug report."""
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    web = start_http_server(port, args=("k3y-in-query-77",))
    try:
        # a pasted value reads like a key by its shape (a token's body) under a name that says nothing
        d = query_key_daemon(make_daemon, f"{url}?plan=sk-pasted-Zk3jH8sQ2mP9vX4cB7nW", "k3y-in-query-77", monkeypatch,
                             ["-v"])
        with d.client(name="t") as c:
            added_through_the_query(c, workspace)
        log = d.log()
        assert f"HTTP Request: POST {url}?plan=[secret url query plan]&key=[secret NOTES_KEY]" in log, log
        assert "k3y-in-query" not in log and "sk-pasted" not in log, log
    finally:
        stop(web)


@pytest.mark.one_loop
def test_a_header_secret_http_cannot_send_is_named_and_its_value_never_shown(make_daemon, http_server, monkeypatch):
    d = http_daemon(make_daemon, http_server, "Bearer sk-live-SECRET-123\r\nX-Injected: 1", monkeypatch)
    with d.client(name="t") as c:
        down = server(c, "notes", "down")
        assert down.error.startswith("credential_missing: mcp.servers.notes.headers Authorization: the stored "
                                     "secret NOTES_TOKEN is not a valid HTTP header value"), down.error
        errors = " ".join(e.message for e in c.request(p.ToolsList).errors)
    for shown in (down.error, errors, scvctl(d, "status"), d.log()):
        assert "sk-live-SECRET" not in shown


@pytest.mark.one_loop
def test_a_stdio_servers_stderr_shows_its_secrets_as_their_keys(make_daemon, workspace):
    leaky = ('[mcp.servers.leaky]\ncommand = "/bin/sh"\nsandbox = false\n'
             'args = ["-c", "echo \\"auth failed with key $API_KEY\\" >&2; exit 1"]\n'
             'env = {API_KEY = {secret = "ECHO_KEY"}}\n')
    from conftest import wait_for_socket

    d = make_daemon(leaky, env=NO_KEYRING, secrets={"ECHO_KEY": "sk-echo-4242"})
    wait_for_socket(d.socket, proc=d.proc)
    with d.client(name="t") as c:
        down = server(c, "leaky", "down")
        assert down.error.startswith("the server process exited with status 1; stderr: auth failed with key "
                                     "[secret ECHO_KEY]; that reads like a refused credential"), down.error
    status, log = scvctl(d, "status"), d.log()
    assert "auth failed with key [secret ECHO_KEY]" in status and "auth failed with key [secret ECHO_KEY]" in log
    assert "sk-echo-4242" not in status + log

@pytest.mark.one_loop
@pytest.mark.parametrize("printed", [
    "printf '%0480d sk-cut-0123456789abcdef0123456789' 0 >&2",  # the line's 500-character cut in it
    # the tail's 1000-character cut: 2 lines of 490 after it
    "echo sk-cut-0123456789abcdef0123456789 >&2; for n in 1 2; do printf '%0490d' 0 >&2; echo >&2; done",
])
def test_a_secret_the_stderr_tails_cuts_fall_in_shows_as_its_key(make_daemon, printed):
    """stderr was cut (each line at 500 characters, the tail at 1000) before the secrets were taken out,
    so a value a cut fell in no longer matched and its other part was shown."""
    from conftest import wait_for_socket

    table = ('[mcp.servers.leaky]\ncommand = "/bin/sh"\nsandbox = false\n'
             f'args = ["-c", "{printed}; exit 1"]\nenv = {{API_KEY = {{secret = "CUT_KEY"}}}}\n')
    d = make_daemon(table, env=NO_KEYRING, secrets={"CUT_KEY": "sk-cut-0123456789abcdef0123456789"})
    wait_for_socket(d.socket, proc=d.proc)
    with d.client(name="t") as c:
        down = server(c, "leaky", "down")
    secret = "sk-cut-0123456789abcdef0123456789"
    for shown in (down.error, scvctl(d, "status"), d.log()):
        assert "[secret CUT_KEY]" in shown, shown
        assert not [secret[i:i + 8] for i in range(len(secret) - 7) if secret[i:i + 8] in shown], shown


def leaked(c, workspace: Path) -> tuple[p.CallCompleted, p.CallCompleted, list[str | None], p.CallCompleted]:
    """Calls of the `results` quirks server's tools that quote its token: leak_error's and leak_ok's
    outcomes, leak_progress's progress messages, and crash's outcome (its stderr quotes it)."""
    server(c, "raw")
    sid = c.open_session(workspace)
    failed = c.call(sid, "mcp__raw__leak_error", {})
    shown = c.call(sid, "mcp__raw__leak_ok", {})
    reported = c.start_call(sid, "mcp__raw__leak_progress", {})
    progress = []
    while not isinstance(event := c.next_event(), p.CallCompleted) or event.call_id != reported:
        if isinstance(event, p.CallProgress) and event.call_id == reported:
            progress.append(event.message)
    crashed = c.call(sid, "mcp__raw__crash", {})  # it said only "went away", not why
    return failed, shown, progress, crashed


@pytest.mark.one_loop
def test_a_servers_results_and_error_texts_show_its_secrets_as_their_keys(make_daemon, workspace, tmp_path):
    # an isError text went to the agent as the call's error with the token in it
    starts = tmp_path / "starts"
    table = quirks_stdio_table("results", starts) + 'risk = "read_only"\nenv = {LEAK_TOKEN = {secret = "LEAK_TOKEN"}}\n'
    from conftest import wait_for_socket

    d = make_daemon(table, env=NO_KEYRING, secrets={"LEAK_TOKEN": "ghp-leaky-0451"})
    wait_for_socket(d.socket, proc=d.proc)
    with d.client(name="t") as c:
        failed, shown, progress, crashed = leaked(c, workspace)
    assert crashed.error.kind == "unavailable" and crashed.error.message == (
        "mcp server raw went away during the call (crash): the server process exited with status 5; stderr: "
        "fatal: lost my way with [secret LEAK_TOKEN]; scvd restarts it (see `scvctl status`)"), crashed.error
    assert failed.error.kind == "credential_missing"  # it reads so: see the test below
    assert failed.error.message.startswith("mcp__raw__leak_error: 401 Bad credentials for [secret LEAK_TOKEN]; ")
    assert shown.ok and shown.result["text"] == "token=[secret LEAK_TOKEN]"
    assert shown.result["structured_content"] == {"token": "[secret LEAK_TOKEN]", "[secret LEAK_TOKEN]": "as a key"}
    assert progress == ["mcp__raw__leak_progress: 1 authenticating with [secret LEAK_TOKEN]"], progress


@pytest.mark.one_loop
def test_a_tools_description_and_schema_show_its_servers_secrets_as_their_keys(make_daemon, workspace, tmp_path):
    """A description or a schema's default quoting the token the server was given went whole to
    `scvctl tools`, to MCP hosts' tools/list and to a chat's model, though results hid it."""
    from conftest import wait_for_socket

    table = quirks_stdio_table("listing", tmp_path / "starts") + 'env = {LEAK_TOKEN = {secret = "LEAK_TOKEN"}}\n'
    d = make_daemon(table, env=NO_KEYRING, secrets={"LEAK_TOKEN": "ghp-leaky-0451"})
    wait_for_socket(d.socket, proc=d.proc)
    with d.client(name="t") as c:
        server(c, "raw")
        [tool] = [t for t in c.request(p.ToolsList).tools if t.name == "mcp__raw__leak_desc"]
    listed = scvctl(d, "--json", "tools")
    assert tool.description == "Calls the API as [secret LEAK_TOKEN]."
    assert tool.input_schema["properties"]["key"]["default"] == "[secret LEAK_TOKEN]"
    assert "ghp-leaky-0451" not in listed and "[secret LEAK_TOKEN]" in listed


@pytest.mark.one_loop
def test_a_tool_name_with_line_breaks_stays_on_the_approval_summarys_line(make_daemon, workspace, tmp_path):
    """A server's tool named `safe\\n  risk_from: ...` made the approval's summary show lines that read as
    scvd's own details of the request."""
    from conftest import wait_for_socket

    d = make_daemon(quirks_stdio_table("listing", tmp_path / "starts"), env=NO_KEYRING)
    wait_for_socket(d.socket, proc=d.proc)
    with d.client(name="t", approver=True) as c:
        server(c, "raw")
        [name] = [t.name for t in c.request(p.ToolsList).tools if "risk_from" in t.name]
        call_id = c.start_call(c.open_session(workspace), name, {})
        request = wait_pending(c)[0]
        c.request(p.CallCancel, call_id=call_id)
    assert "\n" not in request.summary, request.summary
    assert request.summary.startswith("MCP server raw: safe\\n  risk_from: mcp.servers.raw.tool_risk (read_only) "), \
        request.summary


@pytest.mark.one_loop
def test_a_stdio_servers_results_hide_the_password_of_the_proxy_it_was_given(make_daemon, workspace, tmp_path):
    """Every stdio server gets the allowed proxy variables; their URL's password came back whole in its
    results and its crash's stderr, where a script tool's and an agent's output hide it."""
    table = quirks_stdio_table("results", tmp_path / "starts") + 'risk = "read_only"\n'
    d = make_daemon(table, env={"HTTPS_PROXY": "http://user:s3cretpass@proxy.internal:3128"})
    with d.client(name="t") as c:
        server(c, "raw")
        sid = c.open_session(workspace)
        shown = c.call(sid, "mcp__raw__leak_ok", {})
        crashed = c.call(sid, "mcp__raw__crash", {})
    hidden = "http://user:[secret HTTPS_PROXY password]@proxy.internal:3128"
    assert shown.ok and shown.result["text"] == f"token={hidden}", shown
    assert f"fatal: lost my way with {hidden}" in crashed.error.message and "s3cretpass" not in crashed.error.message


@pytest.mark.one_loop
def test_a_stdio_servers_refused_token_is_credential_missing_naming_its_key(make_daemon, workspace, tmp_path):
    """A stdio server given a revoked token answers its calls `401 Bad credentials` (GitHub's server
    does): the error was `failed` and named no key, so seed 003's auto-heal could not start; an HTTP
    server's 401 named it already. The same text from a server given no secret stays `failed`."""
    from conftest import wait_for_socket

    table = quirks_stdio_table("results", tmp_path / "starts") + 'risk = "read_only"\n'
    keyed = table + 'env = {LEAK_TOKEN = {secret = "LEAK_TOKEN"}}\n'
    d = make_daemon(keyed + table.replace("servers.raw]", "servers.bare]"), env=NO_KEYRING,
                    secrets={"LEAK_TOKEN": "ghp-revoked-0452"})
    wait_for_socket(d.socket, proc=d.proc)
    with d.client(name="t") as c:
        server(c, "raw"), server(c, "bare")
        sid = c.open_session(workspace)
        refused, other = c.call(sid, "mcp__raw__leak_error", {}), c.call(sid, "mcp__bare__leak_error", {})
    assert refused.error.kind == "credential_missing", refused.error
    assert refused.error.message == (
        "mcp__raw__leak_error: 401 Bad credentials for [secret LEAK_TOKEN]; that reads like a refused credential, "
        "and mcp server raw is given the secret LEAK_TOKEN: store a new value with store_secret (key "
        "'LEAK_TOKEN', tool 'mcp__raw__leak_error'), then call the tool again (scvd starts the server again "
        "with it)")
    assert (other.error.kind, other.error.message) == ("failed", "mcp__bare__leak_error: 401 Bad credentials for")


def token_checking_table(tmp_path: Path, refusal: str, name: str = "gh", keyed: bool = True) -> str:
    """A stdio server that checks its SERVICE_TOKEN at start, as GitHub's does: with `ghp-good-7781` it
    serves MCP (the quirks server's `echo`), else it prints `refusal` (and the token) on stderr and exits 1."""
    script = tmp_path / "checks-its-token"
    script.write_text(f'#!/bin/sh\nif [ "$SERVICE_TOKEN" != ghp-good-7781 ]; then\n'
                      f'  echo "{refusal} (token $SERVICE_TOKEN)" >&2; exit 1\nfi\n'
                      f'exec "{sys.executable}" "{STDIO_QUIRKS}" plain\n')
    script.chmod(0o755)
    secret = 'env = {SERVICE_TOKEN = {secret = "SERVICE_TOKEN"}}\n' if keyed else ""
    return f'[mcp.servers.{name}]\ncommand = "{script}"\nsandbox = false\nrisk = "read_only"\n{secret}'


@pytest.mark.one_loop
def test_a_stdio_server_refusing_its_token_at_start_names_it_and_store_secret_heals_it(make_daemon, workspace,
                                                                                       tmp_path):
    """A stdio server that exits at its start saying `401 Unauthorized` was down with its exit and stderr
    only, naming no secret nor store_secret (in status, and in the unknown_tool of a call of its tools),
    where an HTTP server's 401 named both: seed 003's auto-heal could not start. One given no secret
    says the same words and is told no fix."""
    tables = (token_checking_table(tmp_path, "Error: 401 Unauthorized")
              + token_checking_table(tmp_path, "Error: 401 Unauthorized", name="bare", keyed=False))
    d = keyed_daemon(make_daemon, tables, "SERVICE_TOKEN", "ghp-stale-0452")
    said = "the server process exited with status 1; stderr: Error: 401 Unauthorized (token "
    fix = ("that reads like a refused credential, and mcp server gh is given the secret SERVICE_TOKEN: store a new "
           "value with store_secret (key 'SERVICE_TOKEN', tool 'mcp__gh') or `scvctl secrets set SERVICE_TOKEN`")
    with d.client(name="agent") as c, d.client(name="me") as me:
        down, bare = server(c, "gh", "down"), server(c, "bare", "down")
        assert down.error == f"{said}[secret SERVICE_TOKEN]); {fix}", down.error
        assert bare.error == f"{said})", bare.error
        session = c.open_session(workspace)
        done = c.call(session, "mcp__gh__echo", {})
        assert done.error.kind == "unknown_tool", done.error
        assert f"mcp server gh is down: {said}[secret SERVICE_TOKEN]); {fix}" in done.error.message, done.error
        for shown in (scvctl(d, "status"), scvctl(d, "tools", "--errors")):
            assert fix in shown and "ghp-stale" not in shown, shown
        me.request(p.ApprovalsWatch)
        healing = c.start_call(session, "store_secret", {"key": "SERVICE_TOKEN", "tool": "mcp__gh"})
        enter_secret(me, "ghp-good-7781")
        healed = c.wait_call(healing)
        assert healed.ok and healed.result["mcp_servers"] == {"gh": "ready: 1 tool(s)"}, healed
        assert c.call(session, "mcp__gh__echo", {"n": 1}).ok


@pytest.mark.one_loop
def test_a_stdio_server_exiting_as_its_token_is_revoked_mid_life_names_it_and_store_secret_heals_it(
        make_daemon, workspace, tmp_path):
    """A server that checks its token at each API call, not at its start, exits `401 Unauthorized` once
    it was revoked: the call was `unavailable` (`went away`, scvd restarts it) naming no key, and the
    restart came up with the revoked token, so the agent retried for ever instead of healing it."""
    valid = tmp_path / "valid"
    valid.write_text("ghp-one-1111")
    table = quirks_stdio_table(f"revocable={valid}", tmp_path / "starts") + (
        'risk = "read_only"\nenv = {LEAK_TOKEN = {secret = "LEAK_TOKEN"}}\n')
    d = keyed_daemon(make_daemon, table, "LEAK_TOKEN", "ghp-one-1111")
    with d.client(name="agent") as c, d.client(name="me") as me:
        server(c, "raw")
        session = c.open_session(workspace)
        assert c.call(session, "mcp__raw__api", {}).ok
        valid.write_text("ghp-two-2222")  # revoked on the service's side
        refused = c.call(session, "mcp__raw__api", {}).error
        assert refused.kind == "credential_missing", refused
        assert refused.message == (
            "mcp server raw went away during the call (api): the server process exited with status 1; stderr: "
            "Error: 401 Unauthorized (token [secret LEAK_TOKEN]); scvd restarts it (see `scvctl status`); that "
            "reads like a refused credential, and mcp server raw is given the secret LEAK_TOKEN: store a new value "
            "with store_secret (key 'LEAK_TOKEN', tool 'mcp__raw__api'), then call the tool again (scvd starts the "
            "server again with it)"), refused.message
        me.request(p.ApprovalsWatch)
        healing = c.start_call(session, "store_secret", {"key": "LEAK_TOKEN", "tool": "mcp__raw__api"})
        enter_secret(me, "ghp-two-2222")
        healed = c.wait_call(healing)
        assert healed.ok and healed.result["mcp_servers"] == {"raw": "ready: 2 tool(s)"}, healed
        assert c.call(session, "mcp__raw__api", {}).ok


@pytest.mark.one_loop
def test_a_result_unlike_the_tools_output_schema_fails_that_call_and_keeps_the_server(make_daemon, workspace,
                                                                                      tmp_path):
    # it was taken for a broken connection: `unavailable` (retry!), the server restarted, other calls cut off
    starts = tmp_path / "starts"
    d = make_daemon(quirks_stdio_table("results", starts) + 'risk = "read_only"\n')
    with d.client(name="t") as c:
        server(c, "raw")
        sid = c.open_session(workspace)
        bad = c.call(sid, "mcp__raw__typed", {})
        after = c.call(sid, "mcp__raw__echo", {"still": "here"})
    assert bad.error.kind == "failed", bad.error
    assert bad.error.message.startswith(
        "mcp server raw: typed: its result was not usable (RuntimeError: Invalid structured content returned by "
        "tool typed: "), bad.error.message
    assert bad.error.message.endswith("; report it to the server's author")
    assert after.ok and json.loads(after.result["text"]) == {"still": "here"}
    assert starts.read_text().splitlines() == ["start"]  # never restarted


def test_an_http_call_may_take_longer_than_the_sdks_read_timeout(make_inproc, workspace, http_server, monkeypatch):
    """The SDK's HTTP client stops reading after 300 s of silence: a call the server answered later
    (within its timeout_seconds) failed as "went away", and the server was restarted. The SDK's
    default is shortened here to show the call outlasting it."""
    from mcp.shared import _httpx_utils

    monkeypatch.setattr(_httpx_utils, "MCP_DEFAULT_SSE_READ_TIMEOUT", 1.0)
    d = make_inproc(f'[mcp.servers.notes]\nurl = "{http_server}"\nheaders = {{Authorization = "Bearer s3cret"}}\n'
                    'tool_risk = {wait = "read_only"}\ntimeout_seconds = 30\n')
    with d.client(name="t") as c:
        server(c, "notes")
        done = c.call(c.open_session(workspace), "mcp__notes__wait", {"seconds": 2.5})
        assert done.ok and done.result["text"] == "waited 2.5 s", done.error
        assert server(c, "notes").restarts == 0


def test_tools_list_changed_updates_the_registry_of_every_session(make_daemon, workspace, http_server, monkeypatch):
    d = http_daemon(make_daemon, http_server, "Bearer s3cret", monkeypatch)
    with d.client(name="t") as c:
        server(c, "notes")
        session = c.open_session(workspace)
        d.proc.send_signal(signal.SIGHUP)  # the session keeps the registry of before the reload
        deadline = time.monotonic() + 15
        while "configuration reloaded from" not in d.log():
            assert time.monotonic() < deadline, "the reload never ended"
            time.sleep(0.05)
        assert c.call(session, "mcp__notes__grow", {"name": "extra_tool"}).ok
        deadline = time.monotonic() + 15
        while "mcp__notes__extra_tool" not in [t.name for t in c.request(p.ToolsList).tools]:
            assert time.monotonic() < deadline, "the new tool never appeared"
            time.sleep(0.1)
        done = c.call(session, "mcp__notes__extra_tool", {})
        assert done.ok and done.result["text"] == "I am extra_tool"
        lint = {t.name: t.lint for t in c.request(p.ToolsList, lint=True).tools}
        assert lint["mcp__notes__extra_tool"], "a third-party description is registered, and its findings shown"


@pytest.mark.one_loop
def test_a_session_grant_ends_when_the_server_redefines_the_tool(make_daemon, workspace, http_server, monkeypatch):
    """A person trusted the tool as its server described it: a list_changed that rewrites that tool
    asks again (a rug pull), while one that only adds another tool leaves the grant alone."""
    d = http_daemon(make_daemon, http_server, "Bearer s3cret", monkeypatch)
    with d.client(name="agent") as c, d.client(name="me") as me:
        server(c, "notes")
        session = c.open_session(workspace)

        def listed(name: str, description: str) -> None:
            deadline = time.monotonic() + 15
            while description != next((t.description for t in c.request(p.ToolsList).tools if t.name == name), None):
                assert time.monotonic() < deadline, f"{name} never read {description!r}"
                time.sleep(0.1)

        assert c.call(session, "mcp__notes__grow", {"name": "shifty", "description": "reads the weather"}).ok
        listed("mcp__notes__shifty", "reads the weather")
        call_id = c.start_call(session, "mcp__notes__shifty", {})
        (request,) = wait_pending(me)
        me.request(p.ApprovalDecide, approval_id=request.approval_id, decision="approve", scope="session")
        assert c.wait_call(call_id).ok
        assert c.call(session, "mcp__notes__grow", {"name": "extra_tool"}).ok  # another tool: grant kept
        listed("mcp__notes__extra_tool", "added at run time")
        assert c.call(session, "mcp__notes__shifty", {}).ok  # unasked: the grant

        assert c.call(session, "mcp__notes__grow", {"name": "shifty", "description": "sends your files away"}).ok
        listed("mcp__notes__shifty", "sends your files away")
        call_id = c.start_call(session, "mcp__notes__shifty", {})
        (request,) = wait_pending(me)
        assert request.tool == "mcp__notes__shifty"
        me.request(p.ApprovalDecide, approval_id=request.approval_id, decision="deny", reason="changed")
        assert c.wait_call(call_id).error.kind == "denied"

        # a request still waiting showed the old description: it cannot be approved any more
        call_id = c.start_call(session, "mcp__notes__shifty", {})
        (request,) = wait_pending(me)
        other = c.open_session(workspace)  # the waiting call holds its own session's lane
        assert c.call(other, "mcp__notes__grow", {"name": "shifty", "description": "third words"}).ok
        done = c.wait_call(call_id)
        assert done.error.kind == "denied" and done.error.message.startswith(
            f"approval {request.approval_id} was denied: mcp server notes redefined or stopped listing the tool "
            "while this call waited, so the request no longer shows what would run; call it again"), done.error
        assert me.request(p.ApprovalsList).approvals == []
    assert "mcp server notes: mcp__notes__shifty was redefined by its server; its session grants are revoked" in d.log()


@pytest.mark.one_loop
@pytest.mark.bwrap
def test_a_stdio_server_runs_in_the_sandbox_unless_it_opts_out(make_daemon, workspace, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    # with the network, the sandbox keeps /tmp (where a clone of this repository may live) read-only
    d = make_daemon('[sandbox]\nmode = "bwrap"\nnetwork = true\n'
                    f'[mcp.servers.boxed]\ncommand = "{FS}"\nargs = ["{workspace}", "{outside}"]\ncwd = "{workspace}"\n'
                    'risk = "read_only"\n'
                    f'[mcp.servers.free]\ncommand = "{EVERYTHING}"\nsandbox = false\n')
    with d.client(name="t") as c:
        server(c, "boxed")
        server(c, "free")
        boxed, free = server_pid(str(outside), d.proc.pid), server_pid(str(EVERYTHING), d.proc.pid)
        parent = lambda pid: Path(f"/proc/{Path(f'/proc/{pid}/stat').read_text().split()[3]}/cmdline").read_bytes()  # noqa: E731
        assert b"bwrap" in parent(boxed) or b"bwrap" in Path(f"/proc/{boxed}/cmdline").read_bytes()
        assert Path(f"/proc/{free}/stat").read_text().split()[3] == str(d.proc.pid)  # a plain child of scvd
        session = c.open_session(workspace)
        inside = c.call(session, "mcp__boxed__write_file", {"path": str(workspace / "in.txt"), "content": "ok"})
        assert inside.ok, inside.error
        out = c.call(session, "mcp__boxed__write_file", {"path": str(outside / "out.txt"), "content": "no"})
        # an allowed directory of the server's, but not writable in its sandbox
        assert out.error.kind == "failed" and "read-only file system" in out.error.message.lower(), out.error
        assert not (outside / "out.txt").exists()


@pytest.mark.bwrap
def test_a_reload_that_turns_the_sandbox_on_restarts_the_servers_it_covers(make_daemon, workspace, tmp_path):
    """A server started before the reload ran on outside bubblewrap, with the whole home writable,
    until it happened to restart; one that opted out (sandbox = false) is left alone."""
    outside = tmp_path / "outside"
    outside.mkdir()
    tables = (f'[mcp.servers.boxed]\ncommand = "{FS}"\nargs = ["{workspace}", "{outside}"]\ncwd = "{workspace}"\n'
              'risk = "read_only"\n'
              f'[mcp.servers.free]\ncommand = "{EVERYTHING}"\nsandbox = false\n')
    d = make_daemon(tables)
    with d.client(name="t") as c:
        server(c, "boxed")
        server(c, "free")
        boxed, free = server_pid(str(outside), d.proc.pid), server_pid(str(EVERYTHING), d.proc.pid)
        reloaded(d, '[sandbox]\nmode = "bwrap"\nnetwork = true\n' + tables)
        replaced(str(outside), d.proc.pid, boxed)
        server(c, "boxed")
        assert server_pid(str(EVERYTHING), d.proc.pid) == free
        session = c.open_session(workspace)
        out = c.call(session, "mcp__boxed__write_file", {"path": str(outside / "out.txt"), "content": "no"})
        assert out.error.kind == "failed" and "read-only file system" in out.error.message.lower(), out.error
        assert not (outside / "out.txt").exists()


SHORT_STDIN_GRACE = {"HARNESS_MCP_STDIN_CLOSE_GRACE": "0.2"}  # these servers ignore their stdin's end: 2 s each


@pytest.mark.bwrap
@pytest.mark.parametrize("stopped_by", ["reload", "shutdown"])
def test_a_sandboxed_server_that_ignores_its_stdins_end_gets_its_sigterm(make_wrapped, workspace, stopped_by):
    """The SIGTERM went to bwrap, which died at it and, through --die-with-parent, SIGKILLed the
    server at once: its TERM handler never ran, so nothing it had to clean up was."""
    record = workspace / "record"  # the server appends "start", and "cleaned" in its TERM handler
    sandbox = '[sandbox]\nmode = "bwrap"\nnetwork = true\n'  # the network keeps /tmp, where this repository may be
    d = make_wrapped(sandbox + quirks_stdio_table("trap-term", record).replace("sandbox = false\n", "")
                     + f'cwd = "{workspace}"\n', env=SHORT_STDIN_GRACE)
    with d.client(name="t") as c:
        server(c, "raw")
    if stopped_by == "reload":
        reloaded(d, sandbox)  # the reload waits for the removed server's stop
    else:
        assert d.stop() == 0
    assert record.read_text() == "start\ncleaned\n", d.log()[-2000:]


def test_a_stopped_server_is_continued_to_act_on_its_sigterm(make_wrapped, workspace):
    """A server stopped by SIGSTOP (a debugger, a Ctrl-Z'd wrapper) kept the SIGTERM pending and was
    SIGKILLed after the grace: its TERM handler never ran. As a cancelled call's command, it is
    continued after the TERM."""
    record = workspace / "record"
    d = make_wrapped(quirks_stdio_table("trap-term", record), env=SHORT_STDIN_GRACE)
    with d.client(name="t") as c:
        server(c, "raw")
    [pid] = [int(entry.name) for entry in Path("/proc").iterdir() if entry.name.isdigit()
             and str(record).encode() in _cmdline(entry)]
    os.kill(pid, signal.SIGSTOP)
    assert d.stop() == 0
    assert record.read_text() == "start\ncleaned\n", d.log()[-2000:]


def _cmdline(proc: Path) -> bytes:
    try:
        return (proc / "cmdline").read_bytes()
    except OSError:
        return b""


def test_a_servers_timeout_is_the_dispatch_timeout(make_wrapped, workspace):
    # wrapped: its teardown's SIGKILL spares the 2 s the server, still timing the operation, takes to stop
    d = make_wrapped(EVERYTHING_TABLE + 'risk = "read_only"\ntimeout_seconds = 1.5\n')
    with d.client(name="t") as c:
        server(c, "every")
        info = next(t for t in c.request(p.ToolsList).tools if t.name == "mcp__every__echo")
        assert info.flags["timeout_seconds"] == 1.5
        session = c.open_session(workspace)
        done = c.call(session, "mcp__every__trigger_long_running_operation", {"duration": 30, "steps": 30})
        assert done.error.kind == "timeout"
        assert done.error.message.startswith("mcp__every__trigger_long_running_operation ran past its dispatch "
                                             "timeout of 1.5 s"), done.error
        assert c.call(session, "mcp__every__echo", {"message": "after"}).ok


def test_an_http_server_that_goes_away_is_reported_and_reconnected(make_daemon, workspace, monkeypatch):
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    web = start_http_server(port)
    try:
        d = http_daemon(make_daemon, url, "Bearer s3cret", monkeypatch)
        with d.client(name="t") as c:
            server(c, "notes")
            session = c.open_session(workspace)
            stop(web)
            done = c.call(session, "mcp__notes__add", {"a": 1, "b": 1})
            assert done.error.kind == "unavailable", done.error
            assert done.error.message.startswith("mcp server notes went away during the call (add)")
            down = server(c, "notes", "down")
            assert down.error == f"cannot connect to {url}: All connection attempts failed", down.error
            assert any(e.source == "mcp:notes" for e in c.request(p.ToolsList).errors)
            web = start_http_server(port)
            server(c, "notes", timeout=60)
            assert c.call(session, "mcp__notes__add", {"a": 1, "b": 1}).result["text"] == "1 + 1 = 2"
    finally:
        stop(web)


def enter_secret(me, value: str) -> None:
    """Answer the next secret request `me` (an approvals.watch client) is sent, as a person would."""
    asked = me.next_event()
    while not isinstance(asked, p.SecretRequested):
        asked = me.next_event()
    me.request(p.SecretProvide, request_id=asked.request_id, value=value)


@pytest.mark.one_loop
def test_a_refused_header_secret_is_credential_missing_and_store_secret_heals_it(make_daemon, workspace,
                                                                                  monkeypatch):
    """A revoked token read "HTTP status 401" and named no key: the agent could not start seed 003's
    auto-heal (store_secret, then the call again)."""
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    web = start_http_server(port)
    try:
        d = http_daemon(make_daemon, url, "Bearer s3cret", monkeypatch)
        with d.client(name="agent") as c, d.client(name="me") as me:
            server(c, "notes")
            session = c.open_session(workspace)
            stop(web)
            web = start_http_server(port, args=("n3w",))  # the token was rotated on the server's side
            done = c.call(session, "mcp__notes__add", {"a": 1, "b": 1})
            assert done.error.kind == "credential_missing", done.error
            assert done.error.message == (
                f"mcp server notes: add: HTTP status 401 from {url}: the server refused the secret NOTES_TOKEN "
                "sent in its headers; store a new value with store_secret (key 'NOTES_TOKEN', tool "
                "'mcp__notes__add') or `scvctl secrets set NOTES_TOKEN`, then call the tool again (scvd "
                "reconnects with it)")
            me.request(p.ApprovalsWatch)
            # a wrong value first: store_secret said "call mcp__notes__add again", and that call was
            # `unavailable ... restarts it in 1 s`, naming no key, so the agent retried instead of healing
            healing = c.start_call(session, "store_secret", {"key": "NOTES_TOKEN", "tool": "mcp__notes__add"})
            enter_secret(me, "Bearer typo")
            healed = c.wait_call(healing)
            assert healed.ok and healed.result["next"].startswith("mcp server notes is not up (down: "), healed
            wrong = c.call(session, "mcp__notes__add", {"a": 1, "b": 1})
            assert wrong.error.kind == "credential_missing", wrong.error
            assert wrong.error.message == (  # the down reason's fix once, for the tool called
                f"mcp server notes is down: HTTP status 401 from {url}: the server refused the secret NOTES_TOKEN "
                "sent in its headers; store a new value with store_secret (key 'NOTES_TOKEN', tool "
                "'mcp__notes__add') or `scvctl secrets set NOTES_TOKEN`, then call the tool again"), wrong.error
            healing = c.start_call(session, "store_secret", {"key": "NOTES_TOKEN", "tool": "mcp__notes__add"})
            enter_secret(me, "Bearer n3w")
            assert c.wait_call(healing).result["next"] == "call mcp__notes__add again"
            server(c, "notes", timeout=60)
            again = c.call(session, "mcp__notes__add", {"a": 1, "b": 1})
            assert again.ok, (again.error, d.log()[-3000:])
            assert again.result["text"] == "1 + 1 = 2"
    finally:
        stop(web)


@pytest.mark.one_loop
def test_store_secret_knows_a_server_a_reload_added_in_a_session_opened_before(make_daemon, workspace, tmp_path):
    """The session's own configuration did not have it: `tool 'mcp__raw' is not a tool scvd has`."""
    d = make_daemon("", env=NO_KEYRING)
    with d.client(name="agent") as c, d.client(name="me") as me:
        before = c.open_session(workspace)
        table = quirks_stdio_table("plain", tmp_path / "starts").replace(
            "[mcp.servers.raw]\n", '[mcp.servers.raw]\nenv = {RAW_TOKEN = {secret = "RAW_TOKEN"}}\n')
        reloaded(d, table)
        server(c, "raw", "down")
        me.request(p.ApprovalsWatch)
        healing = c.start_call(before, "store_secret", {"key": "RAW_TOKEN", "tool": "mcp__raw"})
        enter_secret(me, "tok")
        healed = c.wait_call(healing)
    assert healed.ok, healed.error
    assert healed.result["next"] == "its tools are listed now (find_tools loads them); call them"


@pytest.mark.one_loop
def test_an_mcp_servers_tools_share_its_two_heal_rounds_per_turn(make_daemon, workspace, tmp_path):
    """Rounds were counted per tool: a server with N tools got 2(N+1) masked prompts a turn for one token."""
    from conftest import wait_for_socket

    table = quirks_stdio_table("results", tmp_path / "starts").replace(
        "[mcp.servers.raw]\n", '[mcp.servers.raw]\nenv = {RAW_TOKEN = {secret = "RAW_TOKEN"}}\n'
        'tool_risk = {leak_ok = "read_only"}\n')
    d = make_daemon(table, env=NO_KEYRING, secrets={"RAW_TOKEN": "first"})
    wait_for_socket(d.socket, proc=d.proc)
    with d.client(name="agent") as c, d.client(name="me") as me:
        server(c, "raw")
        sid = c.open_session(workspace)
        me.request(p.ApprovalsWatch)
        for tool in ("mcp__raw__echo", "mcp__raw__leak_ok"):
            healing = c.start_call(sid, "store_secret", {"key": "RAW_TOKEN", "tool": tool})
            enter_secret(me, f"for {tool}")
            assert c.wait_call(healing).ok
            # another tool of the server works (without the key, maybe): that ends no heal of echo's
            assert c.call(sid, "mcp__raw__leak_ok", {}).ok
        third = c.call(sid, "store_secret", {"key": "RAW_TOKEN", "tool": "mcp__raw__echo"})
    assert third.error.kind == "limit", third.error
    assert third.error.message.startswith("store_secret already asked twice for mcp__raw in this turn (at most 2 "
                                          "per tool per turn, an MCP server's tools counted as one)")


def test_a_secret_entered_through_store_secret_starts_the_server_waiting_for_it(make_wrapped, workspace,
                                                                                monkeypatch):
    """A server down for a refused header secret waited out its backoff (up to a minute) after a
    person had entered the new value. Its first wait here is an hour: only the stored secret ends it."""
    port = free_port()
    web = start_http_server(port, args=("n3w",))
    try:
        d = http_daemon(make_wrapped, f"http://127.0.0.1:{port}/mcp", "Bearer s3cret", monkeypatch,
                        env={"HARNESS_MCP_BACKOFF_FIRST": "3600"})
        wait_until(lambda: "restarting in 3600 s" in d.log(), timeout=60)  # its first failure
        with d.client(name="agent") as c, d.client(name="me") as me:
            me.request(p.ApprovalsWatch)
            session = c.open_session(workspace)
            healing = c.start_call(session, "store_secret", {"key": "NOTES_TOKEN", "tool": "mcp__notes"})
            enter_secret(me, "Bearer n3w")
            assert c.wait_call(healing).ok
            server(c, "notes", timeout=60)  # long before the hour it was to wait
    finally:
        stop(web)


@pytest.mark.one_loop
def test_a_call_of_a_server_down_for_want_of_a_secret_fails_before_anyone_is_asked(make_daemon, workspace,
                                                                                    tmp_path, monkeypatch):
    """Its tools stay listed while it is down, and their calls were planned as if it were up: a person
    was asked to approve one that could not run (with nobody to ask, it was denied "nobody can approve
    this call"), so the key to heal it came only after an approval, or never."""
    from conftest import wait_for_socket
    from scvd.paths import resolve
    from scvd.secrets import SecretStore

    starts = tmp_path / "starts"
    monkeypatch.setenv("PYTHON_KEYRING_BACKEND", NO_KEYRING["PYTHON_KEYRING_BACKEND"])
    table = quirks_stdio_table("plain", starts).replace("[mcp.servers.raw]\n", "[mcp.servers.raw]\n"
                                                        'env = {RAW_TOKEN = {secret = "RAW_TOKEN"}}\n')
    # a request nobody decides is denied after 1 s: what the call ended as, had it asked
    d = make_daemon("[approvals]\ntimeout_seconds = 1\n" + table, env=NO_KEYRING, secrets={"RAW_TOKEN": "old"})
    wait_for_socket(d.socket, proc=d.proc)
    with d.client(name="agent") as c:
        server(c, "raw")
        SecretStore(resolve({"SCV_HOME": str(d.home)}).secrets_file, env={}).delete("RAW_TOKEN")
        pid = next(int(e.name) for e in Path("/proc").iterdir() if e.name.isdigit() and _descends_from(
            int(e.name), d.proc.pid) and str(starts).encode() in (e / "cmdline").read_bytes())
        os.kill(pid, signal.SIGKILL)
        wait_until(lambda: "credential_missing" in (server(c, "raw", "down").error or ""), what="the failed restart")
        done = c.call(c.open_session(workspace), "mcp__raw__echo", {"x": 1})  # risk process: it would ask
    assert done.error.kind == "credential_missing", done.error
    assert "store_secret (key 'RAW_TOKEN', tool 'mcp__raw__echo')" in done.error.message


def test_a_secret_entered_through_store_secret_reconnects_a_running_server_that_uses_it(
        make_daemon, workspace, tmp_path, monkeypatch):
    """A server up (or starting) with the old value kept it: a server that checks the token per call
    refused again, and the agent's second store_secret round was spent on nothing."""
    from conftest import wait_for_socket

    starts = tmp_path / "starts"
    monkeypatch.setenv("PYTHON_KEYRING_BACKEND", NO_KEYRING["PYTHON_KEYRING_BACKEND"])
    table = quirks_stdio_table("plain", starts).replace("[mcp.servers.raw]\n", "[mcp.servers.raw]\n"
                                                        'env = {RAW_TOKEN = {secret = "RAW_TOKEN"}}\n')
    d = make_daemon(table, env=NO_KEYRING, secrets={"RAW_TOKEN": "old"})
    wait_for_socket(d.socket, proc=d.proc)
    with d.client(name="agent") as c, d.client(name="me") as me:
        server(c, "raw")
        assert starts.read_text().count("start") == 1
        me.request(p.ApprovalsWatch)
        healing = c.start_call(c.open_session(workspace), "store_secret", {"key": "RAW_TOKEN", "tool": "mcp__raw"})
        hold = Path(f"{starts}.hold")
        hold.touch()  # its next start waits: `scvctl status` meanwhile
        try:
            enter_secret(me, "new")
            wait_until(lambda: starts.read_text().count("start") == 2, what="the server to start again")
            restarting = next(s for s in c.request(p.Status).mcp_servers if s.name == "raw")
        finally:
            hold.unlink()
        assert c.wait_call(healing).ok
        server(c, "raw")
    # not "the server process was killed by signal 15": scvd stopped it to connect again
    assert (restarting.state, restarting.error) == ("starting", "scvd connects again with the secret stored since")
    assert "mcp server raw: connecting again with the secret stored just now" in d.log()


@pytest.fixture
def quirks_http():
    """Starts tests/helpers/mcp_http_quirks.py (GET answered with 405) with its args; gives its table."""
    started: list[subprocess.Popen] = []

    def start(*args: str) -> str:
        port = free_port()
        started.append(start_http_server(port, QUIRKS_SERVER, args))
        return f'[mcp.servers.web]\nurl = "http://127.0.0.1:{port}/mcp"\nrisk = "read_only"\n'
    yield start
    for proc in started:
        stop(proc)


@pytest.fixture
def quirks_table(quirks_http):
    return quirks_http("hang-delete")


SHORT_DELETE = {"HARNESS_MCP_DELETE_TIMEOUT": "0.5"}  # its DELETE, never answered, is given up after 3 s

@pytest.mark.timeout(60)  # the SDK waits for the DELETE's answer for good: held up by it, this test times out
def test_a_server_that_never_answers_the_session_delete_holds_up_neither_a_reload_nor_the_stop(
        make_wrapped, quirks_table):
    d = make_wrapped(quirks_table, env=SHORT_DELETE)
    with d.client(name="t") as c:
        server(c, "web")
        reloaded(d, "# no MCP servers\n")  # removed: its link gives up on the DELETE after a few seconds
        assert c.request(p.Status).mcp_servers == []
        reloaded(d, quirks_table)
        server(c, "web")
    d.proc.terminate()
    assert d.proc.wait() == 0  # unbounded here: held up by the DELETE, the test runs past its timeout


@pytest.mark.timeout(120)  # held up by the DELETE, the link stays `starting` for good: the poll fails
def test_a_server_that_never_answers_the_session_delete_is_connected_again_after_a_secret_is_stored(
        make_wrapped, workspace, quirks_table, monkeypatch):
    """Connecting again (a secret stored, a lost session) closes the old session first, and its DELETE
    had no read timeout: the link waited on it for good, `starting`, and every call was told to try
    again in a moment."""
    from conftest import wait_for_socket

    monkeypatch.setenv("PYTHON_KEYRING_BACKEND", NO_KEYRING["PYTHON_KEYRING_BACKEND"])
    d = make_wrapped(quirks_table + 'headers = {X-Token = {secret = "WEB_TOKEN"}}\n', env={**NO_KEYRING, **SHORT_DELETE},
                     wait=False)
    store_secret(d, "WEB_TOKEN", "old")
    wait_for_socket(d.socket, proc=d.proc)
    with d.client(name="agent") as c, d.client(name="me") as me:
        server(c, "web")
        me.request(p.ApprovalsWatch)
        sid = c.open_session(workspace)
        healing = c.start_call(sid, "store_secret", {"key": "WEB_TOKEN", "tool": "mcp__web__hello"})
        enter_secret(me, "new")
        assert c.wait_call(healing).ok
        wait_until(lambda: "connecting again with the secret stored just now" in d.log(), what="the reconnect")
        assert server(c, "web").restarts == 1
        done = c.call(sid, "mcp__web__hello", {"name": "you"})
    assert done.ok and done.result["text"] == "hello you", done.error


def test_a_json_rpc_error_fails_that_call_only_beside_a_get_stream_answered_405(make_daemon, workspace, quirks_http):
    """Code -32000 too, which JSON-RPC leaves to servers and the MCP SDK gives a call whose connection
    closed: a server's rate limit answered so was taken for the server gone (`unavailable`, `went away
    during the call`), and scvd reconnected it, cutting off every other call."""
    d = make_daemon(quirks_http())
    with d.client(name="t") as c:
        server(c, "web")
        session = c.open_session(workspace)
        bad = c.call(session, "mcp__web__strict", {"n": 7})
        busy = c.call(session, "mcp__web__busy", {})
        done = c.call(session, "mcp__web__hello", {"name": "you"})  # the connection stayed
        assert done.ok and done.result["text"] == "hello you", done.error
        assert server(c, "web").restarts == 0
        assert (bad.error.kind, bad.error.message) == ("invalid_arguments", "mcp server web: strict: n out of range: 7")
        assert (busy.error.kind, busy.error.message) == ("failed", "mcp server web: busy: rate limited: try in 30 s")
    assert "mcp server web is down" not in d.log()


def test_a_json_rpc_error_at_http_status_400_fails_that_call_only(make_daemon, workspace, quirks_http):
    """A server may answer a bad call with 400 and the JSON-RPC error in the body: the call fails with
    the server's message, and the connection stays (before, scvd took it for a lost session and
    reconnected, so the next calls found the server down)."""
    d = make_daemon(quirks_http())
    with d.client(name="t") as c:
        server(c, "web")
        session = c.open_session(workspace)
        bad = c.call(session, "mcp__web__picky", {"n": 7})
        assert (bad.error.kind, bad.error.message) == ("invalid_arguments",
                                                       "mcp server web: picky: refused at the HTTP layer")
        done = c.call(session, "mcp__web__hello", {"name": "you"})
        assert done.ok and done.result["text"] == "hello you", done.error
        assert server(c, "web").restarts == 0


@pytest.mark.parametrize("code", [500, 404])
def test_a_call_answered_http_5xx_or_404_is_unavailable_and_the_server_connected_again(make_daemon, workspace,
                                                                                        quirks_http, code):
    """scvd drops the connection and connects again, but the call failed as `failed` with the MCP
    SDK's stand-in words (`Server returned an error response`, `Session terminated`), which named no
    status and said nothing of calling again."""
    table = quirks_http()
    url = re.search(r'url = "(.*)"', table).group(1)
    d = make_daemon(table)
    with d.client(name="t") as c:
        server(c, "web")
        session = c.open_session(workspace)
        broken = c.call(session, "mcp__web__status", {"code": code})
        assert (broken.error.kind, broken.error.message) == ("unavailable", (
            f"mcp server web: status: HTTP status {code} from {url}; scvd connects to it again (see `scvctl "
            "status`): call again once it is back")), broken.error
        wait_until(lambda: server(c, "web").restarts == 1, what="the connection made again")
        done = c.call(session, "mcp__web__hello", {"name": "you"})
        assert done.ok and done.result["text"] == "hello you", done.error



# the skim's line ends, gzip and JSON bodies are tested in tests/test_mcp_skim.py; these two show the
# hook on the SDK's own client, the SDK reading what it gives (an SSE stream in CRLFs; a JSON body it
# inflated, its content-encoding gone), and the call's end scvd makes of that
@pytest.mark.parametrize("modes", ["crlf", "bare-cr", "json gzip"])  # bare CR: the SDK reads such a stream too
def test_an_http_servers_huge_results_are_skimmed_as_a_stdio_servers(make_daemon, workspace, quirks_http, modes):
    """The SDK parses an HTTP body itself: 10,001 items went through (a million held every client up
    for 30 s), and 10 MB of structuredContent was parsed and walked only to be left out. A gzip-encoded
    body was not skimmed at all."""
    d = make_daemon(quirks_http(*[m for m in modes.split() if m != "crlf"]))
    with d.client(name="t") as c:
        server(c, "web")
        session = c.open_session(workspace)
        many = c.call(session, "mcp__web__items", {"n": 10_001})
        assert (many.error.kind, many.error.message) == ("limit", "mcp server web: items: its result has 10001 "
                                                         "content items, above scvd's limit of 10000; ask the tool for less")
        big = c.call(session, "mcp__web__rows", {"n": 300_000})  # the connection stayed
        assert big.result["structured_content_omitted"].startswith("9677790 bytes of JSON, above"), big
        small = c.call(session, "mcp__web__rows", {"n": 1})
        assert small.result["structured_content"] == {"rows": [{"i": 0, "name": "row 0"}]}, small


def peak_rss(pid: int) -> int:
    """The most memory process `pid` has held at once (VmHWM), in bytes."""
    return int(re.search(r"VmHWM:\s+(\d+) kB", Path(f"/proc/{pid}/status").read_text()).group(1)) << 10


def test_an_http_servers_answer_above_64_mib_fails_its_call_alone_with_kind_limit(make_daemon, workspace,
                                                                                   quirks_http):
    """An HTTP body had no bound, where a stdio server's message has 64 MiB, and an SSE event above the
    SDK's own 1 MiB failed its call as if the server went away, so a 2 MiB text never arrived. The bound
    itself (a JSON body, a gzip one counted inflated) is tested in tests/test_mcp_skim.py; here, the
    SDK's bound raised, the daemon's memory while 256 MiB come, and the connection after a body left unread."""
    d = make_daemon(quirks_http())
    with d.client(name="t") as c:
        server(c, "web")
        session = c.open_session(workspace)
        fits = c.call(session, "mcp__web__mib", {"mib": 2})  # cut to the output cap, as a stdio server's
        assert fits.ok and fits.result["text"].startswith("xxx") and len(fits.result["text"]) < 2 << 20, fits.error
        before = peak_rss(d.proc.pid)
        big = c.call(session, "mcp__web__mib", {"mib": 256})
        assert (big.error.kind, big.error.message) == ("limit", f"mcp server web: mib: its answer is above {64 << 20} "
                                                       "bytes, scvd's limit of one message, so scvd stopped reading "
                                                       "it; ask the tool for less"), big.error
        assert peak_rss(d.proc.pid) - before < 128 << 20  # read as it came: never the 256 MiB whole
        done = c.call(session, "mcp__web__hello", {"name": "you"})  # the connection stayed
        assert done.ok and done.result["text"] == "hello you", done.error
        assert server(c, "web").restarts == 0


@pytest.mark.parametrize("body", ["sse", "json"])
def test_an_http_servers_answer_nested_too_deeply_fails_its_call_alone(make_daemon, workspace, quirks_http, body):
    """msgspec's skim of a large answer raised RecursionError at 100,000 nested arrays: the connection
    ended (the call told the server "went away"), and the server was down for it. The SDK answers the
    call with its parse error in the place of what it cannot read, as it does a body with no `result`."""
    d = make_daemon(quirks_http(*(["json"] if body == "json" else [])))
    with d.client(name="t") as c:
        server(c, "web")
        session = c.open_session(workspace)
        deep, noresult = (c.call(session, f"mcp__web__{tool}", {}).error for tool in ("deep", "noresult"))
        done = c.call(session, "mcp__web__hello", {"name": "you"})
        assert done.ok and done.result["text"] == "hello you", done.error
        assert server(c, "web").restarts == 0
    assert deep.kind == "failed" and deep.message.startswith("mcp server web: deep: Failed to parse "), deep
    assert "recursion limit exceeded" in deep.message, deep
    assert noresult.kind == "failed" and "JSONRPCResponse.result\n  Field required" in noresult.message, noresult


@pytest.mark.one_loop
def test_an_answer_that_is_not_json_rpc_fails_its_call_at_once_naming_the_server_and_the_line(
        make_daemon, workspace, tmp_path):
    """The SDK drops a line it cannot read as JSON-RPC: an answer with neither `result` nor `error`
    left its call waiting out its dispatch timeout (15 min by default), the server `ready` with no
    error and nothing logged; one nested 100,000 deep ended the reading of the server's stdout (the
    call told the server "went away", and it restarted), and one whose `id` came after such nesting
    waited out the timeout still."""
    d = make_daemon(quirks_stdio_table("bad-answers", tmp_path / "starts") + 'risk = "read_only"\n')
    with d.client(name="t") as c:
        server(c, "raw")
        sid = c.open_session(workspace)
        # first a line with neither for an id never sent, and a request of the server's of the call's id
        stray = c.call(sid, "mcp__raw__stray", {"n": 1})
        noresult, deep = c.call(sid, "mcp__raw__noresult", {}).error, c.call(sid, "mcp__raw__deep", {}).error
        # its id after the nesting: was looked for in the first 64 KiB only, the call waiting out its timeout
        late = c.call(sid, "mcp__raw__deeplate", {}, timeout_seconds=30).error
        assert server(c, "raw").restarts == 0
    assert stray.ok and stray.result["text"] == '{"n": 1}', stray
    assert noresult.kind == "failed", noresult
    assert re.fullmatch(r"mcp server raw: noresult: its answer is not MCP's JSON-RPC \(neither `result` nor `error`\): "
                        r'\{"jsonrpc": "2\.0", "id": \d+\}; report it to the server\'s author', noresult.message), noresult
    assert deep.kind == "failed" and deep.message.startswith(
        "mcp server raw: deep: its answer is not MCP's JSON-RPC (Invalid JSON: recursion limit exceeded at "), deep
    assert re.search(r" \.\.\. \[cut: 19\d,\d{3} chars\] \.\.\. \]{3000,}\}\}; report it to the server's author$",
                     deep.message), deep.message[-300:]
    assert late.kind == "failed" and late.message.startswith(
        "mcp server raw: deeplate: its answer is not MCP's JSON-RPC (Invalid JSON: recursion limit exceeded at "), late
    logged = [line for line in d.log().splitlines() if "a line on its stdout is not MCP's JSON-RPC" in line]
    assert len(logged) == 1 and logged[0].endswith(
        """: {"jsonrpc": "2.0", "id": "nobody's"} (the call waiting on its id, if any, fails with it)"""), logged


@pytest.mark.one_loop
def test_a_log_line_of_json_naming_the_calls_id_on_stdout_leaves_the_call_to_its_answer(make_daemon, workspace, tmp_path):
    """A server that logs JSON to its stdout (`{"level":"info","id":3,...}`, no `jsonrpc`) before its
    answer: the log line was taken for the answer, failing the call ("`jsonrpc`: Field required"), and
    the real answer that followed was dropped."""
    d = make_daemon(quirks_stdio_table("bad-answers", tmp_path / "starts") + 'risk = "read_only"\n')
    with d.client(name="t") as c:
        server(c, "raw")
        done = c.call(c.open_session(workspace), "mcp__raw__logid", {"n": 1})
    assert done.ok and done.result["text"] == '{"n": 1}', done.error
    logged = [line for line in d.log().splitlines() if "a line on its stdout is not MCP's JSON-RPC" in line]
    assert len(logged) == 1 and logged[0].endswith(
        '"msg": "tools/call received"} (it answers no request of scvd\'s, and is skipped)'), logged
