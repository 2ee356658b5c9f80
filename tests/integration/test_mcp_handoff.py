"""`scvctl mcp` hands the host's stdio to scvd (`mcp.attach`): how the handoff ends, and how it is refused."""

from __future__ import annotations

import fcntl
import json
import os
import re
import signal
import socket
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest

from scvd import errors, limits, protocol as p

from conftest import base_env, wait_pending
from harness import RawConn
from test_mcp import McpHost

INIT = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "test-host"}}


def sessions_of(d, client_name: str = "scvctl-mcp") -> list:
    with d.client(name="lister") as c:
        return [s for s in c.request(p.SessionsList).sessions if s.client == client_name]


def until(check, timeout: float = 15.0):
    """Poll `check()` until it is truthy (a state to reach, not a speed)."""
    deadline = time.monotonic() + timeout
    while not (value := check()):
        assert time.monotonic() < deadline, "state not reached"
        time.sleep(0.02)
    return value


def test_the_host_closing_stdin_ends_scvctl_with_0_and_drops_the_session(daemon, workspace):
    h = McpHost(daemon, workspace)
    h.rpc("initialize", INIT)
    [session] = sessions_of(daemon)
    assert session.workspace == str(workspace.resolve())
    assert h.close() == 0
    assert sessions_of(daemon) == []


def host_running(d, workspace: Path, command: str) -> tuple[McpHost, int]:
    """A host whose bash call of `command`, approved by its owner, runs: the host, and the call's request id."""
    h = McpHost(d, workspace)
    h.rpc("initialize", INIT)
    msg_id = h.request("tools/call", {"name": "bash", "arguments": {"command": command}})
    with d.client(name="owner") as owner:
        owner.request(p.ApprovalDecide, approval_id=wait_pending(owner)[0].approval_id, decision="approve")
        until(lambda: owner.status().running_calls == 1)
    return h, msg_id


def test_killing_scvctl_mcp_drops_the_session_and_cancels_its_running_call(daemon, workspace):
    h, msg_id = host_running(daemon, workspace, "sleep 60; touch done")
    h.proc.send_signal(signal.SIGTERM)
    assert h.proc.wait(10) == -signal.SIGTERM
    until(lambda: sessions_of(daemon) == [])
    with daemon.client(name="owner") as owner:
        until(lambda: owner.status().running_calls == 0)
    rest = h.proc.stdout.read()  # scvd let go of the host's stdout: it ends (after what was answered)
    assert all(json.loads(line).get("id") == msg_id for line in rest.splitlines())
    assert not (workspace / "done").exists()
    h.proc.stdout.close()
    h.proc.stderr.close()
    h.proc.stdin.close()


def test_a_host_that_dies_while_its_call_waits_for_approval_leaves_nothing_to_approve(daemon, workspace):
    # both its pipe ends closed (it crashed): scvd took that for a stdin EOF and waited for the
    # call, whose approval, given later, ran the command for nobody
    h = McpHost(daemon, workspace)
    h.rpc("initialize", INIT)
    h.request("tools/call", {"name": "bash", "arguments": {"command": "touch ran_for_a_dead_host"}})
    with daemon.client(name="owner") as owner:
        until(lambda: wait_pending(owner))
        h.proc.stdin.close()
        h.proc.stdout.close()
        until(lambda: owner.request(p.ApprovalsList).approvals == [])
        until(lambda: sessions_of(daemon) == [])
    assert not (workspace / "ran_for_a_dead_host").exists()
    h.proc.wait(10)
    h.proc.stderr.close()


# a host's first messages before it dies: its call waits for an approval
DIES_WAITING = ({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": INIT},
                {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                 "params": {"name": "bash", "arguments": {"command": "touch ran_for_a_dead_host"}}})


def left_nothing_to_approve(d, owner, proc, workspace) -> None:
    """The host died: its request, its session and scvctl mcp went, saying why; its call never ran."""
    until(lambda: owner.request(p.ApprovalsList).approvals == [])
    until(lambda: sessions_of(d) == [])
    assert proc.wait(10) == 1
    assert "the MCP host closed its stdout (it exited)" in proc.stderr.read().decode()
    assert not (workspace / "ran_for_a_dead_host").exists()


@pytest.mark.one_loop  # it starts its daemon on each loop itself
@pytest.mark.parametrize("event_loop", ["asyncio", "uvloop"])
def test_a_host_on_sockets_that_dies_while_its_call_waits_leaves_nothing_to_approve(make_daemon, workspace,
                                                                                     event_loop):
    # Node's hosts (child_process) give stdin and stdout a socketpair each: scvd wrote to a socket
    # without seeing its reader leave, so a host that crashed was a stdin EOF, and the call it left
    # waiting ran for nobody once approved (scvctl mcp waited on for it)
    d = make_daemon(env={"SCVD_SERVER__EVENT_LOOP": event_loop})  # the variable wins over config.toml
    (in_host, in_theirs), (out_host, out_theirs) = socket.socketpair(), socket.socketpair()
    proc = subprocess.Popen([sys.executable, "-m", "scvctl", "mcp", "--workspace", str(workspace)],
                            env=d.env, stdin=in_theirs, stdout=out_theirs, stderr=subprocess.PIPE)
    in_theirs.close()
    out_theirs.close()
    answers = out_host.makefile("rb")
    try:
        for message in DIES_WAITING:
            in_host.sendall(json.dumps(message).encode() + b"\n")
        assert json.loads(answers.readline())["id"] == 1
        with d.client(name="owner") as owner:
            until(lambda: wait_pending(owner))
            answers.close()
            in_host.close()
            out_host.close()
            left_nothing_to_approve(d, owner, proc, workspace)
    finally:
        answers.close()
        in_host.close()
        out_host.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stderr.close()


@pytest.mark.one_loop  # it starts its daemon on each loop itself
@pytest.mark.parametrize("event_loop", ["asyncio", "uvloop"])
@pytest.mark.parametrize("kind", ["one socket", "a terminal"])
def test_a_host_on_one_socket_or_terminal_that_dies_while_its_call_waits_leaves_nothing_to_approve(
        make_daemon, workspace, kind, event_loop):
    # stdin and stdout are one file: scvd never reads stdout, so the host's exit showed only as a
    # stdin EOF, and scvd waited for the call (scvctl mcp too), whose approval ran it for nobody
    import pty

    d = make_daemon(env={"SCVD_SERVER__EVENT_LOOP": event_loop})  # the variable wins over config.toml
    if kind == "one socket":
        host, theirs = socket.socketpair()
        host_fd, fd = os.dup(host.fileno()), os.dup(theirs.fileno())
        host.close()
        theirs.close()
    else:
        host_fd, fd = pty.openpty()
        tty_mode = termios.tcgetattr(fd)
        tty_mode[3] &= ~(termios.ECHO | termios.ICANON)  # no echo of the requests back to the host
        termios.tcsetattr(fd, termios.TCSANOW, tty_mode)
    proc = subprocess.Popen([sys.executable, "-m", "scvctl", "mcp", "--workspace", str(workspace)],
                            env=d.env, stdin=fd, stdout=fd, stderr=subprocess.PIPE)
    os.close(fd)
    try:
        for message in DIES_WAITING:
            os.write(host_fd, json.dumps(message).encode() + b"\n")
        seen = b""
        while b'"id":1' not in seen:
            seen += os.read(host_fd, 65536)
        with d.client(name="owner") as owner:
            until(lambda: wait_pending(owner))
            os.close(host_fd)
            host_fd = -1
            left_nothing_to_approve(d, owner, proc, workspace)
    finally:
        if host_fd >= 0:
            os.close(host_fd)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stderr.close()


def test_a_host_on_one_socket_that_only_ends_its_stdin_still_gets_its_answers(daemon, workspace):
    host, theirs = socket.socketpair()
    proc = subprocess.Popen([sys.executable, "-m", "scvctl", "mcp", "--workspace", str(workspace)],
                            env=base_env(daemon.home), stdin=theirs, stdout=theirs, stderr=subprocess.PIPE)
    theirs.close()
    try:
        host.sendall(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                                 "params": {"name": "bash", "arguments": {"command": "echo ran"}}}).encode() + b"\n")
        with daemon.client(name="owner") as owner:
            [pending] = until(lambda: wait_pending(owner))
            host.shutdown(socket.SHUT_WR)  # it still reads
            owner.request(p.ApprovalDecide, approval_id=pending.approval_id, decision="approve")
        answer = json.loads(host.makefile("rb").read())
        assert answer["id"] == 1 and answer["result"]["structuredContent"]["exit_code"] == 0, answer
        assert proc.wait(10) == 0
    finally:
        host.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stderr.close()


def test_the_fds_restored_to_their_flags_after_the_host_leaves(daemon, workspace):
    """scvd makes the host's pipes non-blocking while it serves them; a terminal shared with a shell
    must not stay so: the flags are put back when the host detaches."""
    in_r, in_w = os.pipe()
    out_r, out_w = os.pipe()
    scvd_in, scvd_out = os.dup(in_r), os.dup(out_w)  # the ends scvd holds, seen through our own fds
    proc = subprocess.Popen([sys.executable, "-m", "scvctl", "mcp", "--workspace", str(workspace)],
                            env=base_env(daemon.home), stdin=in_r, stdout=out_w, stderr=subprocess.PIPE)
    os.close(in_r)
    os.close(out_w)
    host_in, host_out = os.fdopen(in_w, "w"), os.fdopen(out_r)
    try:
        host_in.write(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping"}) + "\n")
        host_in.flush()
        assert json.loads(host_out.readline())["id"] == 1  # served: scvd holds the pipes
        assert all(fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_NONBLOCK for fd in (scvd_in, scvd_out))
        host_in.close()
        assert proc.wait(10) == 0
        assert not any(fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_NONBLOCK for fd in (scvd_in, scvd_out))
    finally:
        for f in (host_in, host_out, proc.stderr):
            f.close()
        os.close(scvd_in)
        os.close(scvd_out)


def test_attach_without_fds_is_refused_after_the_timeout_and_the_connection_closed(make_daemon, workspace):
    d = make_daemon("[server]\nhandoff_timeout_seconds = 0.3\n")
    with d.client(name="no-fds") as c:
        cue = c.request(p.McpAttach, workspace=str(workspace))
        assert isinstance(cue, p.Ok)
        with pytest.raises(errors.InvalidRequest, match=r"no fds came within 0\.3 s \(server\.handoff_timeout_seconds\)"):
            c.wait_answer(cue.id)
        with pytest.raises(errors.ConnectionClosed):
            c.request(p.Ping)
    with d.client(name="other") as other:
        assert isinstance(other.request(p.Ping), p.Pong)
    assert sessions_of(d, "no-fds") == []


def test_frames_sent_right_after_attach_are_refused_at_once_with_no_ok(daemon, workspace):
    """A client that pipelines behind `mcp.attach` learns it at once, not after the handoff timeout."""
    with RawConn(daemon.socket) as conn:
        assert isinstance(conn.hello(), p.Welcome)
        conn.send_raw(b'{"type":"mcp.attach","id":2,"workspace":"%s"}\n{"type":"ping","id":3}\n'
                      % str(workspace).encode())
        answer = conn.frame()
        assert isinstance(answer, p.Error) and answer.id == 2 and answer.fatal and answer.code == "invalid_request"
        assert "more bytes came right after it; send nothing between mcp.attach and its fds" in answer.message
        assert conn.closed_by_server()
    assert sessions_of(daemon, "raw") == []


def test_a_frame_instead_of_the_fds_is_refused_at_once(daemon, workspace):
    with daemon.client(name="no-fds") as c:
        cue = c.request(p.McpAttach, workspace=str(workspace))
        assert isinstance(cue, p.Ok)
        c.sock.sendall(b'{"type":"ping","id":99}\n')
        with pytest.raises(errors.InvalidRequest, match="bytes came after `ok` but no fds; send one data byte"):
            c.wait_answer(cue.id)
        with pytest.raises(errors.ConnectionClosed):
            c.request(p.Ping)
    assert sessions_of(daemon, "no-fds") == []


@pytest.mark.parametrize("count", [1, 3])
def test_a_number_of_fds_other_than_2_is_refused_and_each_one_closed(daemon, workspace, count):
    pipes = [os.pipe() for _ in range(count)]
    with daemon.client(name="odd-fds") as c:
        cue = c.request(p.McpAttach, workspace=str(workspace))
        socket.send_fds(c.sock, [b"\0"], [w for _, w in pipes])
        with pytest.raises(errors.InvalidRequest, match=f"send exactly 2 fds, stdin then stdout; {count} came"):
            c.wait_answer(cue.id)
    for r, w in pipes:
        os.close(w)
        assert os.read(r, 1) == b""  # scvd holds no copy of the write end: it closed what came
        os.close(r)
    assert sessions_of(daemon, "odd-fds") == []


@pytest.mark.one_loop
def test_a_bad_workspace_is_refused_as_session_open_refuses_it(daemon, tmp_path):
    out = subprocess.run([sys.executable, "-m", "scvctl", "mcp", "--workspace", str(tmp_path / "missing")],
                         env=base_env(daemon.home), capture_output=True, text=True, timeout=20,
                         stdin=subprocess.PIPE)
    assert out.returncode == 1 and "invalid_request: workspace" in out.stderr and "does not exist" in out.stderr
    assert out.stdout == ""


def test_a_host_that_never_reads_stdout_does_not_stall_other_clients(daemon, workspace):
    (workspace / "big.txt").write_text("x" * 200_000 + "\n")
    h = McpHost(daemon, workspace)  # its stdout is never read until the end: 64 KiB of pipe fill up
    read = {"name": "read", "arguments": {"path": "big.txt"}}
    for _ in range(10):
        h.request("tools/call", read)
    with daemon.client(name="other") as other:
        session = other.open_session(workspace)
        for _ in range(3):
            assert other.call(session, "read", {"path": "big.txt"}).ok
        assert isinstance(other.request(p.Ping), p.Pong)
    answers = [json.loads(h.proc.stdout.readline()) for _ in range(10)]
    assert sorted(a["id"] for a in answers) == list(range(1, 11)) and not any(a["result"]["isError"] for a in answers)
    assert h.close() == 0


def test_a_host_that_reads_through_a_burst_above_the_bound_gets_every_answer(make_inproc, monkeypatch,
                                                                            workspace):
    """Six 1 MiB reads of control bytes make 78 MB of answers at once: a host reading all along was
    cut off past 64 MiB (here the bound is 256 KiB and each answer some 200 KB)."""
    from scvd import connection

    monkeypatch.setattr(connection, "WRITE_BUFFER_LIMIT", 256 * 1024)
    d = make_inproc()
    (workspace / "big.txt").write_text("x" * 100_000 + "\n")
    h = McpHost(d, workspace)
    for _ in range(40):
        h.request("tools/call", {"name": "read", "arguments": {"path": "big.txt"}})
    answers = []
    for _ in range(40):
        answers.append(json.loads(h.proc.stdout.readline()))
        time.sleep(0.02)  # a host that takes its time with each answer
    assert sorted(a["id"] for a in answers) == list(range(1, 41))
    assert not any(a["result"]["isError"] for a in answers)
    assert h.close() == 0


def test_a_host_that_stops_reading_is_cut_off(make_inproc, monkeypatch, workspace):
    from scvd import connection

    monkeypatch.setattr(connection, "WRITE_BUFFER_LIMIT", 256 * 1024)  # the in-process daemon's bounds
    monkeypatch.setattr(connection, "STALL_SECONDS", 1.0)
    d = make_inproc()
    (workspace / "big.txt").write_text("x" * 100_000 + "\n")
    h = McpHost(d, workspace)
    for _ in range(40):
        h.request("tools/call", {"name": "read", "arguments": {"path": "big.txt"}})
    assert h.proc.wait(20) == 1
    assert "stopped reading its stdout" in h.proc.stderr.read()
    assert sessions_of(d) == []
    for f in (h.proc.stdin, h.proc.stdout, h.proc.stderr):
        try:
            f.close()
        except BrokenPipeError:
            pass


def test_a_second_attach_on_the_same_connection_is_refused(daemon, workspace):
    in_r, in_w = os.pipe()
    out_r, out_w = os.pipe()
    with daemon.client(name="twice") as c:
        cue = c.request(p.McpAttach, workspace=str(workspace))
        socket.send_fds(c.sock, [b"\0"], [in_r, out_w])
        assert isinstance(c.wait_answer(cue.id), p.McpAttached)
        with pytest.raises(errors.InvalidRequest, match="already handed over"):
            c.request(p.McpAttach, workspace=str(workspace))
        os.close(in_w)  # the host ends: scvd says so, then closes the connection
        event = c.next_event()
        assert isinstance(event, p.McpDetached) and event.ok and event.reason == "the MCP host closed its stdin"
    for fd in (in_r, out_r, out_w):
        os.close(fd)


def test_scvd_stopping_ends_scvctl_mcp_with_a_message(make_daemon, workspace):
    d = make_daemon()
    h = McpHost(d, workspace)
    h.rpc("initialize", INIT)
    d.stop()
    assert h.proc.wait(10) == 1
    assert "scvd closed the connection while serving session" in h.proc.stderr.read()
    h.proc.stdin.close()
    h.proc.stdout.close()
    h.proc.stderr.close()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["stopped", "killed"])
def test_scvd_going_away_mid_call_tells_the_host_what_happened_and_what_to_do(make_daemon, workspace, sig):
    """Stopped, scvd answers the call it cuts off, and that answer said `scvd is stopping` only, not that
    the host's server went with it nor how it comes back. Killed, it answers nothing: the host's stdout
    ends, and `scvctl mcp` says why on its stderr, which hosts keep in their server log."""
    d = make_daemon()
    h, msg_id = host_running(d, workspace, "sleep 60")
    d.stop(sig)
    assert h.proc.wait(10) == 1
    answers, said = [json.loads(line) for line in h.proc.stdout.read().splitlines()], h.proc.stderr.read()
    for f in (h.proc.stdin, h.proc.stdout, h.proc.stderr):
        f.close()
    if sig == signal.SIGTERM:
        [answer] = answers
        assert answer["id"] == msg_id and answer["result"]["isError"], answer
        text = answer["result"]["content"][0]["text"]
        assert re.fullmatch(r"cancelled: call c1-\w+ was cancelled: scvd is stopping; this MCP server stops with it: "
                            r"once scvd runs again \(`systemctl --user start scvd`\), reconnect the server in the MCP "
                            r"host \(or restart the host\), then call again", text), text
    else:
        assert answers == []  # nothing to read but the end of its stdout
    assert re.fullmatch(r"scvctl mcp: scvd closed the connection while serving session s1-\w+ \(it stopped or failed; "
                        r"see `journalctl --user -u scvd`\); once it runs again, reconnect this server in the MCP host\n",
                        said), said


def open_fds(d) -> int:
    return len(os.listdir(f"/proc/{d.proc.pid}/fd"))


def attach_fds(d, workspace: Path, stdin_fd: int, stdout_fd: int, name: str = "handed"):
    """A client that hands these two fds over as a host's stdin and stdout; its answer (or error)."""
    c = d.client(name=name)
    cue = c.request(p.McpAttach, workspace=str(workspace))
    socket.send_fds(c.sock, [b"\0"], [stdin_fd, stdout_fd])
    return c, cue.id


@pytest.mark.parametrize("kind", ["/dev/null", "a regular file", "a directory"])
def test_stdio_the_loop_cannot_watch_is_refused_and_scvd_lives_on(daemon, workspace, tmp_path, kind):
    """/dev/null and regular files cannot be polled (uvloop aborted the whole daemon on them); a
    directory cannot be read: each is refused, every fd that came is closed, scvd serves on."""
    path = {"/dev/null": os.devnull, "a regular file": tmp_path / "f", "a directory": tmp_path}[kind]
    fd = os.open(path, os.O_RDONLY | (os.O_CREAT if kind == "a regular file" else 0))
    with daemon.client(name="warm") as warm:  # the first session opens what sessions share
        warm.open_session(workspace)
    before = open_fds(daemon)
    for _ in range(3):
        c, cue_id = attach_fds(daemon, workspace, fd, fd)
        with c, pytest.raises(errors.InvalidRequest, match="stdin and stdout must be pipes, sockets or terminals"):
            c.wait_answer(cue_id)
    os.close(fd)
    with daemon.client(name="other") as other:
        assert isinstance(other.request(p.Ping), p.Pong)
    until(lambda: open_fds(daemon) <= before)  # nothing of the refused handoffs is held
    assert sessions_of(daemon, "handed") == []


def test_a_socket_back_to_scvd_itself_is_refused_and_scvd_lives_on(daemon, workspace):
    """Handed over as the host's stdio, a connection to scvd's own socket would have scvd answer
    its own lines for ever (a hot loop): refused, and scvd serves on."""
    with daemon.client(name="warm") as warm:  # the daemon is up: what it holds from now on is counted
        warm.request(p.Ping)
    before = open_fds(daemon)
    loop_sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    loop_sock.connect(str(daemon.socket))
    c, cue_id = attach_fds(daemon, workspace, loop_sock.fileno(), loop_sock.fileno())
    with c, pytest.raises(errors.InvalidRequest) as info:
        c.wait_answer(cue_id)
    assert str(info.value) == (
        f"mcp.attach: the host's stdin is a connection to scvd's own socket ({daemon.socket}); scvd would "
        "answer itself without end: hand over an MCP host's stdio (let the host start `scvctl mcp`)")
    loop_sock.close()
    with daemon.client(name="other") as other:
        assert isinstance(other.request(p.Ping), p.Pong)
        until(lambda: other.status().sessions == 0)
    until(lambda: open_fds(daemon) <= before)
    assert sessions_of(daemon, "handed") == []


def test_a_terminal_is_served_and_left_blocking(daemon, workspace):
    import pty

    master, tty = pty.openpty()
    try:
        c, cue_id = attach_fds(daemon, workspace, tty, tty)
        with c:
            assert isinstance(c.wait_answer(cue_id), p.McpAttached)
            os.write(master, json.dumps({"jsonrpc": "2.0", "id": 7, "method": "ping"}).encode() + b"\n")
            seen = b""
            while b'"id":7' not in seen:
                seen += os.read(master, 4096)
            assert fcntl.fcntl(tty, fcntl.F_GETFL) & os.O_NONBLOCK
        until(lambda: not fcntl.fcntl(tty, fcntl.F_GETFL) & os.O_NONBLOCK)  # scvctl's connection went
    finally:
        os.close(master)
        os.close(tty)


@pytest.mark.parametrize("kind", ["one socket", "a terminal"])
def test_stdio_on_one_socket_or_terminal_loses_no_request(daemon, workspace, kind):
    # uvloop's write transport read the stdout fd to see its reader leave, and threw away what it
    # read: on the socket or terminal that is stdin too, some requests (often the first) vanished
    import pty

    if kind == "one socket":
        host, theirs = socket.socketpair()
        host_fd, fd = host.fileno(), theirs.fileno()
    else:
        host_fd, fd = pty.openpty()
        tty_mode = termios.tcgetattr(fd)
        tty_mode[3] &= ~(termios.ECHO | termios.ICANON)  # no echo of the requests back to the host
        termios.tcsetattr(fd, termios.TCSANOW, tty_mode)
    try:
        lines = [json.dumps({"jsonrpc": "2.0", "id": i, "method": "ping"}).encode() + b"\n" for i in range(51)]
        os.write(host_fd, lines[0])  # hosts send initialize's like at once, before the handoff
        c, cue_id = attach_fds(daemon, workspace, fd, fd)
        with c:
            assert isinstance(c.wait_answer(cue_id), p.McpAttached)
            for line in lines[1:]:
                os.write(host_fd, line)
            seen = b""
            while seen.count(b'"result"') < 51:
                seen += os.read(host_fd, 65536)
            answered = {json.loads(line)["id"] for line in seen.replace(b"\r", b"").splitlines() if line.strip()}
            assert answered == set(range(51))
    finally:
        if kind == "one socket":
            host.close()
            theirs.close()
        else:
            os.close(host_fd)
            os.close(fd)


def test_a_terminal_is_left_blocking_when_scvd_dies_while_serving_it(make_daemon, workspace):
    # scvd puts the flags back when the host leaves; killed, it could not, and the shell sharing the
    # terminal got EAGAIN on its reads
    import pty

    d = make_daemon()
    master, tty = pty.openpty()
    try:
        proc = subprocess.Popen([sys.executable, "-m", "scvctl", "mcp", "--workspace", str(workspace)],
                                stdin=tty, stdout=tty, stderr=subprocess.PIPE, env=d.env)
        os.write(master, json.dumps({"jsonrpc": "2.0", "id": 7, "method": "ping"}).encode() + b"\n")
        seen = b""
        while b'"id":7' not in seen:
            seen += os.read(master, 4096)
        assert fcntl.fcntl(tty, fcntl.F_GETFL) & os.O_NONBLOCK
        d.proc.kill()
        _, err = proc.communicate(timeout=15)
        assert proc.returncode == 1 and "scvd closed the connection" in err.decode()
        assert not fcntl.fcntl(tty, fcntl.F_GETFL) & os.O_NONBLOCK
    finally:
        os.close(master)
        os.close(tty)


def test_scvd_gone_during_the_handoff_says_so_and_what_to_do(tmp_path, workspace):
    """An scvd that closes the connection after reading mcp.attach (it stopped just then): scvctl
    mcp printed `connection_closed: scvd closed the connection`, which names neither the handoff nor
    where to look."""
    import threading

    sock_path = tmp_path / "fake.sock"
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(sock_path))
    listener.listen(1)
    attach_seen: list[bytes] = []

    def fake_scvd() -> None:
        conn, _ = listener.accept()
        with conn, conn.makefile("rb") as lines:
            hello = json.loads(lines.readline())
            conn.sendall(p.encode(p.Welcome(id=hello["id"], protocol=1, server=p.PeerInfo(name="scvd", version="0"),
                                            limits=p.Limits(client_frame_bytes=1 << 20, server_frame_bytes=1 << 23))))
            attach_seen.append(lines.readline())  # then it stops: the connection closes

    server = threading.Thread(target=fake_scvd, daemon=True)
    server.start()
    try:
        out = subprocess.run([sys.executable, "-m", "scvctl", "mcp", "--workspace", str(workspace)],
                             env=base_env(tmp_path / "home", SCV_SOCKET=str(sock_path)), input=b"",
                             capture_output=True, timeout=30)
    finally:
        server.join(10)
        listener.close()
    assert b'"mcp.attach"' in attach_seen[0]
    err = out.stderr.decode()
    assert out.returncode == 1, err
    assert err.startswith("scvctl mcp: scvd closed the connection before it took over the MCP host's stdio ("), err
    assert "journalctl --user -u scvd" in err and "start scvctl mcp again" in err


@pytest.mark.one_loop
def test_a_request_id_that_is_not_a_string_or_number_is_refused_before_anything_runs(daemon, workspace):
    """JSON-RPC ids are strings or numbers: an object id must not start a call the host is then told failed."""
    h = McpHost(daemon, workspace)
    h.rpc("initialize", INIT)
    call = {"name": "bash", "arguments": {"command": "touch made"}}
    h.send({"jsonrpc": "2.0", "id": {"x": 1}, "method": "tools/call", "params": call})
    answer = h.read()
    assert answer["id"] is None and answer["error"]["code"] == -32600 and "string or a number" in answer["error"]["message"]
    h.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": [1]}})
    assert h.rpc("ping")["result"] == {}
    with daemon.client(name="watcher") as w:
        assert w.request(p.ApprovalsList).approvals == []
    assert h.close() == 0
    assert "Traceback" not in daemon.log()


def test_scvd_stopping_with_a_host_attached_logs_no_error(make_daemon, workspace):
    d = make_daemon()
    h = McpHost(d, workspace)
    h.rpc("initialize", INIT)
    assert d.stop() == 0
    assert h.proc.wait(10) == 1
    assert " ERROR " not in d.log()
    for f in (h.proc.stdin, h.proc.stdout, h.proc.stderr):
        f.close()


def test_attached_hosts_stop_at_the_open_file_budget_and_leave_its_reserve(make_daemon, workspace):
    """Each host holds four fds (the two handed over and a dup of each for its transport): counted as
    two, hosts ate the reserve kept for tools' pipes until an attach itself failed with EMFILE."""
    import resource

    limit = 256
    d = make_daemon(preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit)))
    hosts = []
    try:
        while True:
            in_r, in_w = os.pipe()
            out_r, out_w = os.pipe()
            c, cue_id = attach_fds(d, workspace, in_r, out_w)
            os.close(in_r)
            os.close(out_w)
            hosts.append((c, in_w, out_r))
            try:
                c.wait_answer(cue_id)
            except errors.ScvError as exc:
                refusal = exc
                break
            assert len(hosts) < limit, "never refused"
        assert "open-file budget" in str(refusal), refusal
        reserve = limits.FdBudget(limit=limit, base=0).reserve
        assert open_fds(d) <= limit - reserve  # the reserve for tools' pipes and one more accept is whole
        with d.client(name="approver") as other:  # and the headroom for a person's client
            assert isinstance(other.request(p.Ping), p.Pong)
    finally:
        for c, in_w, out_r in hosts:
            c.close()
            os.close(in_w)
            os.close(out_r)
