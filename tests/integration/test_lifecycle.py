"""The daemon's life with real processes and signals: one per instance, sockets, stop, detach, activation."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

import conftest
from conftest import ROOT, shared_dir_for_other_uids
from harness import make_wrapped  # noqa: F401 (fixture)
from harness import HarnessTool, NoArgs, RawConn, pid_gone, scvd_on_a_full_disk, wait_ready, wait_until
from scvd import protocol as p
from scvd.proctree import read_stat, scan_processes
from scvd.tools.contract import CallContext, Plan
from scvctl.client import Client, ConnectionClosed
from scvd import errors

STUBBORN_CONFIG = "[server]\nshutdown_grace_seconds = {grace}\n"
STOPPING = "scvd is stopping and will not answer this request; send it again once scvd is back"


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def clean_log(text: str) -> None:
    """A graceful stop logs no error and no traceback."""
    bad = [line for line in text.splitlines() if " ERROR " in line or "Traceback" in line]
    assert not bad, "\n".join(bad)


def listening(path: Path) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(path))
    s.listen(8)
    return s


def start_call(conn: RawConn, workspace: Path, tool: str, **arguments: object) -> str:
    session = conn.request({"type": "session.open", "workspace": str(workspace)})
    accepted = conn.request({"type": "call", "session": session.session, "tool": tool,
                             "arguments": arguments})
    assert isinstance(accepted, p.CallAccepted), accepted
    # it starts at once, so no call.started comes: the tool's own mark says it runs
    wait_until((workspace / f"started-{accepted.call_id}").exists, what="the call to start")
    return accepted.call_id


# --- one daemon per instance, private files ------------------------------------------------


@pytest.mark.one_loop
def test_socket_lock_and_dirs_are_private(daemon):
    home = daemon.home
    assert mode(home / "run") == 0o700 and mode(home / "state") == 0o700
    assert stat.S_ISSOCK(os.lstat(daemon.socket).st_mode) and mode(daemon.socket) == 0o600
    lock = home / "state" / "scvd.lock"
    # the pid, and the socket it listens on: for a client whose environment computes another path
    assert mode(lock) == 0o600 and lock.read_text() == f"{daemon.proc.pid}\nlistens {daemon.socket}\n"


@pytest.mark.one_loop
def test_a_first_start_under_umask_000_makes_the_users_missing_directories_0700(tmp_path):
    """Under umask 000 a first start left ~/.config, ~/.local, ~/.local/share and ~/.local/state 0777
    (mkdir(parents=True) gives parents the umask's mode): any local user could plant ~/.local/bin/*
    or ~/.config/autostart/*. A directory scvd makes is 0700; one there already keeps its mode."""
    user_home, runtime = tmp_path / "fresh", tmp_path / "runtime"
    user_home.mkdir(mode=0o755)  # the user's own: never scvd's to change
    runtime.mkdir(mode=0o700)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SCV", "XDG_", "NOTIFY_", "LISTEN_"))}
    env.update(HOME=str(user_home), XDG_RUNTIME_DIR=str(runtime), PYTHONPATH=str(ROOT),
               SCVD_SERVER__EVENT_LOOP=conftest.DAEMON_LOOP)
    proc = subprocess.Popen([sys.executable, "-m", "scvd", "run"], env=env, umask=0, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            preexec_fn=conftest.dying_with_pytest())
    try:
        conftest.wait_for_socket(runtime / "scv" / "scvd.sock", proc=proc)
        made = [".config", ".config/scv", ".local", ".local/share", ".local/share/scv", ".local/state",
                ".local/state/scv"]
        assert {d: oct(mode(user_home / d)) for d in made} == {d: "0o700" for d in made}
        assert mode(user_home) == 0o755
    finally:
        proc.terminate()
        proc.communicate(timeout=15)


@pytest.mark.one_loop
def test_second_daemon_on_the_same_home_refuses(daemon, make_daemon):
    second = make_daemon(home=daemon.home, wait=False)
    assert second.proc.wait(15) == 3
    assert f"pid {daemon.proc.pid}" in second.log().split("scvd stopped")[-1]
    with daemon.client() as c:  # the first one is untouched
        assert c.status().pid == daemon.proc.pid


def test_stale_socket_file_is_replaced(make_daemon, scv_home):
    run = scv_home / "run"
    run.mkdir(mode=0o700)
    listening(run / "scvd.sock").close()  # the file stays, nobody listens: a crash leftover
    d = make_daemon(home=scv_home)
    with d.client() as c:
        assert c.status().pid == d.proc.pid
    assert "replacing stale socket file" in d.log()


@pytest.mark.one_loop
@pytest.mark.parametrize("kind", ["file", "directory", "symlink"])
def test_a_path_that_is_not_a_socket_is_never_deleted(make_daemon, tmp_path, kind):
    """A typo'd SCV_SOCKET naming the user's file: refused (exit 3), the file kept as it was."""
    path, notes = tmp_path / "notes.txt", tmp_path / "target.txt"
    notes.write_text("my notes")
    {"file": lambda: path.write_text("my notes"), "directory": path.mkdir,
     "symlink": lambda: path.symlink_to(notes)}[kind]()
    d = make_daemon(home=tmp_path / "separate-home", env={"SCV_SOCKET": str(path)}, wait=False)
    assert d.proc.wait(15) == 3
    assert f"cannot start: {path} exists and is a" in d.log()
    assert "not a socket; scvd leaves it alone: move it away, or set SCV_SOCKET" in d.log()
    assert os.path.lexists(path) and notes.read_text() == "my notes"
    assert kind != "file" or path.read_text() == "my notes"


@pytest.mark.one_loop
def test_a_socket_path_too_long_for_a_unix_socket_says_so(make_daemon, tmp_path):
    deep = tmp_path / ("d" * 100)
    deep.mkdir()
    path = deep / "scvd.sock"
    d = make_daemon(home=tmp_path / "separate-home", env={"SCV_SOCKET": str(path)}, wait=False)
    assert d.proc.wait(15) == 3
    assert f"cannot start: the socket path {path} is {len(str(path))} bytes, more than a Unix socket's 107; " \
        "set SCV_SOCKET to a shorter path" in d.log()


def test_live_socket_is_never_replaced(make_daemon, tmp_path):
    path = tmp_path / "other.sock"
    with listening(path) as other:
        inode = os.stat(path).st_ino
        d = make_daemon(home=tmp_path / "separate-home", env={"SCV_SOCKET": str(path)}, wait=False)
        assert d.proc.wait(15) == 3
        assert f"another server answers on {path}" in d.log()
        assert os.stat(path).st_ino == inode
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
            probe.connect(str(path))  # still the other listener's socket
        other.settimeout(5)
        other.accept()[0].close()


# --- stopping ------------------------------------------------------------------------------


def test_sigterm_stops_gracefully(daemon, workspace):
    with RawConn(daemon.socket) as conn:
        conn.hello()
        conn.request({"type": "session.open", "workspace": str(workspace)})
        daemon.proc.send_signal(signal.SIGTERM)
        assert daemon.proc.wait(15) == 0
        assert conn.closed_by_server()
    assert not daemon.socket.exists()
    log = daemon.log()
    assert "stopping (SIGTERM)" in log and "scvd stopped" in log
    clean_log(log)


def test_sigterm_cancels_calls_in_flight(make_wrapped, workspace):
    d = make_wrapped()
    with RawConn(d.socket) as conn:
        conn.hello()
        call_id = start_call(conn, workspace, "test_sleep", seconds=3600)
        d.proc.send_signal(signal.SIGTERM)
        done = conn.frame()
        assert isinstance(done, p.CallCompleted) and done.call_id == call_id
        assert not done.ok and done.error.kind == "cancelled"
        assert conn.closed_by_server()
    assert d.proc.wait(15) == 0
    assert (workspace / f"cancelled-{call_id}").exists()  # the tool's cleanup ran
    assert not d.socket.exists()
    clean_log(d.log())


def test_a_tool_ignoring_cancellation_cannot_hold_the_exit(make_wrapped, workspace):
    d = make_wrapped(STUBBORN_CONFIG.format(grace=0.3))
    with RawConn(d.socket) as conn:
        conn.hello()
        start_call(conn, workspace, "test_stubborn")
        d.proc.send_signal(signal.SIGTERM)
        assert d.proc.wait(10) == 0
    assert not d.socket.exists()
    assert "did not stop within server.shutdown_grace_seconds" in d.log()


SHARED_GRACE = 4.0  # past the calls' grace, the exit takes cli's two waits on leftovers (cut to 0.1 s): not 4 s more


def test_a_stuck_call_and_a_secret_still_being_stored_share_one_grace(make_wrapped, scv_home, workspace, tmp_path):
    """The stop gave its calls the grace, then a secret being stored the grace again (and chat
    turns a third), one after another: twice server.shutdown_grace_seconds before the audit lines
    were written and systemd's TimeoutStopSec came closer. Once the calls' grace is over, the store
    has what is left of it (nothing): scvd exits at once, well before a second grace."""
    from helpers import slow_keyring
    from helpers.probe_tools import wait_event
    from test_script_tools import SHOWS_TOKEN, make_tool

    make_tool(scv_home, "token", SHOWS_TOKEN, risk="read_only", secrets=["API_TOKEN"])
    writes = tmp_path / "keyring-writes"
    d = make_wrapped(STUBBORN_CONFIG.format(grace=SHARED_GRACE), home=scv_home, env={
        "PYTHON_KEYRING_BACKEND": slow_keyring.BACKEND, "LOCKABLE_KEYRING": str(tmp_path / "keyring.json"),
        "SLOW_KEYRING_SECONDS": "3600", "SLOW_KEYRING_WRITES": str(writes),
        "HARNESS_LEFTOVER_SECONDS": "0.1", "HARNESS_THREAD_SECONDS": "0.1", "PYTHONPATH": f"{ROOT}:{ROOT / 'tests'}"})
    with RawConn(d.socket) as busy, d.client(name="agent") as agent, d.client(name="person") as person:
        busy.hello()
        start_call(busy, workspace, "test_stubborn")
        person.request(p.ApprovalsWatch)
        agent.start_call(agent.open_session(workspace), "store_secret", {"key": "API_TOKEN", "tool": "script_token"})
        asked = wait_event(person, lambda e: isinstance(e, p.SecretRequested))
        person.send(p.SecretProvide, request_id=asked.request_id, value="typed-by-a-person")  # answered once stored
        wait_until(writes.exists, what="the keyring to start storing")
        d.proc.send_signal(signal.SIGTERM)
        wait_until(lambda: "did not stop within server.shutdown_grace_seconds" in d.log(), timeout=SHARED_GRACE * 4,
                   what="the calls' grace to end")
        assert d.proc.wait(SHARED_GRACE * 0.75) == 0  # a second grace for the store: TimeoutExpired
    assert "scvd stopped" in d.log()


def test_no_new_calls_while_stopping_and_second_sigint_forces_exit(make_wrapped, workspace):
    d = make_wrapped(STUBBORN_CONFIG.format(grace=60))
    with RawConn(d.socket) as busy, RawConn(d.socket) as late:
        busy.hello()
        late.hello()
        start_call(busy, workspace, "test_stubborn")
        session = late.request({"type": "session.open", "workspace": str(workspace)}).session
        d.proc.send_signal(signal.SIGINT)
        wait_until(lambda: "stopping (SIGINT)" in d.log(), what="the first SIGINT")
        accepted = late.request({"type": "call", "session": session, "tool": "test_sleep",
                                 "arguments": {"seconds": 0}})
        done = late.frame()
        assert isinstance(accepted, p.CallAccepted) and isinstance(done, p.CallCompleted)
        assert done.error.kind == "cancelled" and "stopping" in done.error.message
        assert d.proc.poll() is None  # still inside its 60 s grace period
        d.proc.send_signal(signal.SIGINT)
        assert d.proc.wait(10) == 1
    assert "second SIGINT" in d.log()


@pytest.mark.parametrize("first", ["SIGINT", "SIGTERM"])
def test_a_stop_waiting_for_a_stubborn_call_says_how_long_and_how_to_stop_now(make_wrapped, workspace, first):
    """The first Ctrl-C of a foreground scvd with a call that ignores its cancel logged `stopping (SIGINT)`,
    then nothing until server.shutdown_grace_seconds ran out. Any SIGINT while it stops exits at once."""
    d = make_wrapped(STUBBORN_CONFIG.format(grace=60))
    with RawConn(d.socket) as busy:
        busy.hello()
        start_call(busy, workspace, "test_stubborn")
        d.proc.send_signal(getattr(signal, first))
        how = ("press Ctrl-C again to stop now" if first == "SIGINT"
               else f"a SIGINT to scvd (kill -INT {d.proc.pid}) stops now")
        said = (f"waiting up to 60 s (server.shutdown_grace_seconds) for 1 running call(s) to end; {how}, killing "
                "their processes")
        wait_until(lambda: said in d.log(), what="the stop to say how long it waits")
        d.proc.send_signal(signal.SIGINT)  # what the line says
        assert d.proc.wait(10) == 1
    assert "second SIGINT: exiting at once" in d.log()


def next_of(client, kind: type):
    while not isinstance(event := client.next_event(), kind):
        pass
    return event


def test_sigterm_stops_a_running_bash_and_the_call_queued_behind_it(daemon, workspace):
    """The real bash tool: its process dies with the stop; the queued call is cancelled too."""
    with daemon.client(approver=True) as c:
        session = c.open_session(workspace)
        running = c.start_call(session, "bash", {"command": "echo $$ > pid; exec sleep 1000"})
        approval = next_of(c, p.ApprovalRequested)
        c.request(p.ApprovalDecide, approval_id=approval.approval_id, decision="approve")
        next_of(c, p.CallStarted)
        wait_until(lambda: (workspace / "pid").exists() and (workspace / "pid").read_text().strip(),
                   what="bash to start")
        shell = int((workspace / "pid").read_text())
        waiting = c.start_call(session, "bash", {"command": "true"})  # queued behind the first
        daemon.proc.send_signal(signal.SIGTERM)
        for call_id in (running, waiting):
            done = c.wait_call(call_id)
            assert not done.ok and done.error.kind == "cancelled", done
    assert daemon.proc.wait(15) == 0
    assert pid_gone(shell)
    clean_log(daemon.log())


def test_disconnect_cancels_that_clients_calls(make_wrapped, workspace):
    d = make_wrapped()
    with RawConn(d.socket) as conn:
        conn.hello()
        call_id = start_call(conn, workspace, "test_sleep", seconds=3600)
    wait_until((workspace / f"cancelled-{call_id}").exists, what="the call's cancellation")
    with d.client() as c:
        assert c.status().running_calls == 0 and c.status().sessions == 0


# --- detaching ----------------------------------------------------------------------------


def test_run_daemon_detaches(scv_home, tmp_path):
    import conftest

    env = conftest.base_env(scv_home)
    with open(tmp_path / "detached.log", "wb") as log:
        parent = subprocess.run([sys.executable, "-m", "scvd", "run", "--daemon"], env=env,
                                stdin=subprocess.DEVNULL, stdout=log, stderr=log, timeout=30)
    assert parent.returncode == 0
    pid_file = scv_home / "state" / "scvd.pid"
    wait_until(pid_file.exists, what="the pid file")
    wait_until(lambda: pid_file.read_text().strip().isdigit(), what="a pid in the pid file")
    pid = int(pid_file.read_text())
    try:
        conftest.wait_for_socket(scv_home / "run" / "scvd.sock")
        with RawConn(scv_home / "run" / "scvd.sock") as conn:
            conn.hello()
            assert conn.status().pid == pid != parent.returncode
        assert os.getsid(pid) != os.getsid(0)  # left our session: no controlling terminal
    finally:
        os.kill(pid, signal.SIGTERM)
    wait_until(lambda: pid_gone(pid), what="the detached daemon's exit")
    assert not (scv_home / "run" / "scvd.sock").exists()
    assert not pid_file.exists()


@pytest.mark.parametrize("closed", ["<&-", ">&-", "2>&-", "<&- >&- 2>&-"])
def test_run_daemon_with_a_closed_std_stream_starts_the_daemon(scv_home, tmp_path, closed):
    """`scvd run --daemon <&-` (or `>&-`) exited 0, and the detached child died in python-daemon's
    redirect of the None stream (a traceback in the log, no daemon); `2>&-` exited 1, saying nothing."""
    log_path, pid_file = tmp_path / "daemon.log", scv_home / "state" / "scvd.pid"
    log = "" if "2>&-" in closed else f" 2>>{log_path}"
    line = " ".join([sys.executable, "-m", "scvd", "run", "--daemon"])
    # the log's redirect first: `closed` then wins for the streams it names
    parent = subprocess.run(["bash", "-c", f"exec {line}{log} {closed}"], env=conftest.base_env(scv_home),
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, timeout=30)
    assert parent.returncode == 0

    def said() -> str:
        return log_path.read_text() if log_path.exists() else ""

    wait_until(lambda: pid_file.exists() and pid_file.read_text().strip().isdigit() or "Traceback" in said(),
               what="the pid file")
    assert "Traceback" not in said(), said()
    serves_then_stops(scv_home, int(pid_file.read_text()))


def serves_then_stops(home: Path, pid: int) -> None:
    """The detached scvd `pid` answers on the instance's socket as itself; then SIGTERM, and its exit."""
    try:
        conftest.wait_for_socket(home / "run" / "scvd.sock")  # a file a crash left there is replaced
        with RawConn(home / "run" / "scvd.sock") as conn:
            conn.hello()
            assert conn.status().pid == pid
    finally:
        os.kill(pid, signal.SIGTERM)
    wait_until(lambda: pid_gone(pid), what="the detached daemon's exit")


def run_detached(home: Path, log_path: Path) -> int:
    import conftest

    with open(log_path, "ab") as log:
        return subprocess.run([sys.executable, "-m", "scvd", "run", "--daemon"], env=conftest.base_env(home),
                              stdin=subprocess.DEVNULL, stdout=log, stderr=log, timeout=30).returncode


@pytest.mark.one_loop
def test_run_daemon_keeps_the_verbose_flag(scv_home, tmp_path):
    import conftest

    log_path = tmp_path / "daemon.log"
    with open(log_path, "ab") as log:
        assert subprocess.run([sys.executable, "-m", "scvd", "run", "--daemon", "-v"],
                              env=conftest.base_env(scv_home), stdin=subprocess.DEVNULL, stdout=log,
                              stderr=log, timeout=30).returncode == 0
    pid_file = scv_home / "state" / "scvd.pid"
    wait_until(lambda: pid_file.exists() and pid_file.read_text().strip().isdigit(), what="the pid file")
    pid = int(pid_file.read_text())
    try:
        wait_until(lambda: " ready on " in log_path.read_text(), what="the ready line")
        assert " DEBUG " in log_path.read_text()  # -v is debug after detaching too
    finally:
        os.kill(pid, signal.SIGTERM)
    wait_until(lambda: pid_gone(pid), what="the detached daemon's exit")


@pytest.mark.one_loop
def test_run_daemon_resolves_relative_paths_before_detaching(scv_home, tmp_path):
    """--daemon changes to /: a relative --config is still the file SIGHUP re-reads, a relative --pid-file lands here."""
    import conftest

    config, pid_file, log_path = tmp_path / "cfg.toml", tmp_path / "scvd.pid", tmp_path / "daemon.log"
    config.write_text('[approvals]\npolicy = "always"\n')
    with open(log_path, "ab") as log:
        assert subprocess.run([sys.executable, "-m", "scvd", "run", "--daemon", "--config", "cfg.toml",
                               "--pid-file", "scvd.pid"], cwd=tmp_path, env=conftest.base_env(scv_home),
                              stdin=subprocess.DEVNULL, stdout=log, stderr=log, timeout=30).returncode == 0
    wait_until(lambda: pid_file.exists() and pid_file.read_text().strip().isdigit(), what="the pid file")
    pid = int(pid_file.read_text())
    try:
        wait_until(lambda: " ready on " in log_path.read_text(), what="the ready line")
        os.kill(pid, signal.SIGHUP)
        wait_until(lambda: "configuration reloaded from" in log_path.read_text(), what="the reload")
        assert f"configuration reloaded from {config}\n" in log_path.read_text()
    finally:
        os.kill(pid, signal.SIGTERM)
    wait_until(lambda: pid_gone(pid), what="the detached daemon's exit")


def test_run_daemon_keeps_a_sighup_that_comes_during_its_start(scv_home, tmp_path):
    """A SIGHUP as soon as the pid file names the daemon killed it (the default action) before its
    loop handled signals; now it is kept, and is a reload once the daemon serves."""
    log_path, pid_file = tmp_path / "daemon.log", scv_home / "state" / "scvd.pid"
    assert run_detached(scv_home, log_path) == 0
    wait_until(lambda: pid_file.exists() and pid_file.read_text().strip().isdigit(), what="the pid file")
    pid = int(pid_file.read_text())
    os.kill(pid, signal.SIGHUP)
    try:
        wait_until(lambda: "configuration reloaded from" in log_path.read_text() or pid_gone(pid),
                   what="the reload")
        assert not pid_gone(pid), log_path.read_text()
    finally:
        if not pid_gone(pid):
            os.kill(pid, signal.SIGTERM)
    wait_until(lambda: pid_gone(pid), what="the detached daemon's exit")


def test_run_daemon_says_cannot_start_for_an_error_after_detaching(scv_home, tmp_path):
    """A socket whose directory cannot be made (a file is in its place) fails only at the claim, after
    detaching: one line, no traceback. (A socket path too long is refused before detaching.)"""
    import conftest

    log_path = tmp_path / "daemon.log"
    (tmp_path / "a-file").write_text("not a directory\n")
    env = conftest.base_env(scv_home, SCV_SOCKET=str(tmp_path / "a-file" / "scvd.sock"))
    with open(log_path, "ab") as log:
        assert subprocess.run([sys.executable, "-m", "scvd", "run", "--daemon"], env=env, stdin=subprocess.DEVNULL,
                              stdout=log, stderr=log, timeout=30).returncode == 0  # detached: the child fails
    pid_file = scv_home / "state" / "scvd.pid"
    wait_until(lambda: " ERROR " in log_path.read_text() and not pid_file.exists(), what="the failed start")
    assert "ERROR scvd: cannot start: " in log_path.read_text()
    assert str(tmp_path / "a-file") in log_path.read_text()
    assert "Traceback" not in log_path.read_text()


@pytest.mark.one_loop
def test_run_daemon_refuses_before_detaching_when_running(daemon, tmp_path):
    assert run_detached(daemon.home, tmp_path / "second.log") == 3
    assert f"pid {daemon.proc.pid}" in (tmp_path / "second.log").read_text()
    with daemon.client() as c:
        assert c.status().pid == daemon.proc.pid


def test_run_daemon_replaces_a_pid_file_left_by_a_crash(scv_home, tmp_path):
    import conftest

    assert run_detached(scv_home, tmp_path / "first.log") == 0
    pid_file = scv_home / "state" / "scvd.pid"
    wait_until(lambda: pid_file.exists() and pid_file.read_text().strip().isdigit(), what="the pid file")
    first = int(pid_file.read_text())
    os.kill(first, signal.SIGKILL)
    wait_until(lambda: pid_gone(first), what="the crash")
    assert pid_file.exists()  # left behind
    assert run_detached(scv_home, tmp_path / "second.log") == 0
    wait_until(lambda: pid_file.exists() and pid_file.read_text().strip() not in ("", str(first)),
               what="a new pid file")
    serves_then_stops(scv_home, int(pid_file.read_text()))  # the crash left a stale socket file too
    assert "removing stale pid file" in (tmp_path / "second.log").read_text()


@pytest.mark.one_loop
def test_a_pid_file_that_could_not_be_written_is_said_and_not_left_to_refuse_the_next_start(scv_home, tmp_path):
    """A full disk (here `ulimit -f 0`: every write fails, EFBIG) as the detached daemon wrote its pid
    file: python-daemon left it empty, with a traceback, and every later start refused it as `not a
    pid file` until the person removed it."""
    import conftest

    pid_file = tmp_path / "scvd.pid"
    # the detached daemon's lines too: run() reads its stderr until the daemon, which keeps it, exits
    done = subprocess.run(["bash", "-c", 'ulimit -f 0; exec "$@"', "-", sys.executable, "-m", "scvd", "run",
                           "--daemon", "--pid-file", str(pid_file)], env=conftest.base_env(scv_home),
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert f"ERROR scvd: cannot start: cannot write the pid file {pid_file} (File too large)" in done.stderr
    assert not pid_file.exists()


@pytest.mark.one_loop
@pytest.mark.parametrize("case", ["home-is-a-file", "state-is-a-file", "socket-under-a-file"])
def test_a_file_where_a_directory_of_scvd_goes_is_named_with_what_to_do(tmp_path, case):
    """SCV_HOME set to the config file, a file where the state dir goes, or SCV_SOCKET under a file
    said `[Errno 20] Not a directory: '.../config.toml'` or `cannot start: [Errno 17] File exists`."""
    afile = tmp_path / "config.toml"
    afile.write_text("")
    home = afile if case == "home-is-a-file" else tmp_path / "home"
    extra = {"SCV_SOCKET": str(afile / "scvd.sock")} if case == "socket-under-a-file" else {}
    if case == "state-is-a-file":
        home.mkdir()
        (home / "state").write_text("")
    done = subprocess.run([sys.executable, "-m", "scvd", "run"], env=conftest.base_env(home, **extra),
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30)
    said = {
        "home-is-a-file": (2, f"scvd: configuration error: {afile}/config.toml: cannot read: {afile} is not a "
                              "directory\n"),
        "state-is-a-file": (3, f"cannot start: cannot create {home / 'state'}, a directory of this scvd: "
                               f"{home / 'state'} is not a directory; move that away, or set SCV_HOME to another "
                               "directory\n"),
        "socket-under-a-file": (3, f"cannot start: cannot create {afile}, the directory of the socket "
                                   f"{afile / 'scvd.sock'}: {afile} is not a directory; set SCV_SOCKET to another "
                                   "path\n"),
    }[case]
    assert done.returncode == said[0] and done.stderr.endswith(said[1]), done.stderr


@pytest.mark.one_loop
def test_a_home_that_cannot_be_made_private_says_the_chmod_failed_not_that_it_cannot_be_created(tmp_path):
    """SCV_HOME there, 0755, on a read-only file system (or root's after a `sudo scvd`): scvd said
    `cannot create <home>, ...: Read-only file system; move that away`, though the directory exists."""
    # a mount namespace of its own (a user namespace too: no root needed) holds the read-only bind
    # mount, so nothing of it outlives the command
    if subprocess.run(["unshare", "-rm", "true"], capture_output=True).returncode != 0:
        pytest.skip("needs unshare -rm (user and mount namespaces) to make a read-only bind mount")
    home = tmp_path / "home"
    home.mkdir(mode=0o755)
    home.chmod(0o755)
    remount = 'mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" && shift && exec "$@"'
    done = subprocess.run(["unshare", "-rm", "sh", "-c", remount, "sh", str(home), sys.executable, "-m", "scvd",
                           "run"], env=conftest.base_env(home), stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, timeout=30)
    assert done.returncode == 3 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.endswith(
        f"cannot start: {home}, a directory of this scvd, is open to others and chmod 0700 failed (Read-only file "
        f"system): make it yours and private (sudo chown -R $USER {home}; chmod 0700 {home}), or set SCV_HOME to "
        "another directory\n"), done.stderr


@pytest.mark.one_loop
def test_a_pid_file_that_is_a_directory_in_one_not_writable_is_called_a_directory(scv_home, tmp_path):
    """`--pid-file /run/user/1000`: its parent is not the user's to write, and scvd said to create or
    fix that parent, not that a directory was given where a file goes."""
    if subprocess.run(["unshare", "-rm", "true"], capture_output=True).returncode != 0:
        pytest.skip("needs unshare -rm (user and mount namespaces) to make a read-only bind mount")
    parent = tmp_path / "run-user"
    (parent / "1000").mkdir(parents=True)
    remount = 'mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" && shift && exec "$@"'
    done = subprocess.run(["unshare", "-rm", "sh", "-c", remount, "sh", str(parent), sys.executable, "-m", "scvd",
                           "run", "--daemon", "--pid-file", str(parent / "1000")], env=conftest.base_env(scv_home),
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30)
    assert done.returncode == 3 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.endswith(f"cannot start: --pid-file {parent / '1000'} is a directory; give the path of a "
                                f"file, e.g. --pid-file {parent / '1000' / 'scvd.pid'}\n"), done.stderr


@pytest.mark.one_loop
@pytest.mark.parametrize("case", ["not-a-pid", "directory", "no-directory", "home-broken", "a-running-pid"])
def test_run_daemon_refuses_before_detaching_what_would_fail_or_cost_a_file(scv_home, tmp_path, case):
    """--pid-file naming another file (a slip of completion: the config) was deleted as "stale";
    a missing directory gave exit 0 and a traceback after detaching; a start failure before it
    (a file where the state dir goes) was a traceback with exit 1, not `cannot start:` and 3."""
    import conftest

    scv_home.mkdir(parents=True, exist_ok=True)
    target = {"not-a-pid": scv_home / "config.toml", "directory": tmp_path / "adir",
              "no-directory": tmp_path / "nodir" / "scvd.pid", "home-broken": None,
              "a-running-pid": tmp_path / "scvd.pid"}[case]
    # a daemon that wrote its pid file and has yet to take the lock (a window of a millisecond):
    # the second start took the file for stale and removed it
    starting = subprocess.Popen(["sleep", "30"]) if case == "a-running-pid" else None
    if starting is not None:
        target.write_text(f"{starting.pid}\n")
    if case == "not-a-pid":
        target.write_text('[approvals]\npolicy = "always"\n')
    elif case == "directory":
        target.mkdir()
    elif case == "home-broken":
        (scv_home / "state").write_text("a file where a directory goes\n")
    log_path = tmp_path / "daemon.log"
    argv = [sys.executable, "-m", "scvd", "run", "--daemon", *(["--pid-file", str(target)] if target else [])]
    with open(log_path, "ab") as log:
        rc = subprocess.run(argv, env=conftest.base_env(scv_home), stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                            timeout=30).returncode
    said = log_path.read_text()
    assert rc == 3 and "ERROR scvd: cannot start: " in said and "Traceback" not in said, said
    if starting is not None:
        starting.kill()
        starting.wait()
    if case == "no-directory":
        expected = f"--pid-file {target}: its directory {tmp_path / 'nodir'} does not exist"
    elif case == "a-running-pid":
        expected = f"--pid-file {target} names pid {starting.pid}, which is running: an scvd starting right now?"
        assert target.read_text() == f"{starting.pid}\n"  # untouched
    elif case == "directory":  # not `exists and is not a pid file ...; remove that file yourself`
        expected = f"--pid-file {target} is a directory; give the path of a file, e.g. --pid-file {target}/scvd.pid\n"
    else:
        expected = (f"cannot create {scv_home / 'state'}, a directory of this scvd: {scv_home / 'state'} is not a "
                    "directory; move that away, or set SCV_HOME to another directory") if case == "home-broken" \
            else f"--pid-file {target} exists and is not a pid file"
    assert expected in said, said
    if case == "not-a-pid":
        assert target.read_text() == '[approvals]\npolicy = "always"\n'  # untouched


# --- socket activation --------------------------------------------------------------------


@pytest.fixture
def shared_dir():
    """A 0755 directory outside pytest's 0700 tmp tree, so another uid can reach a socket in it."""
    path = shared_dir_for_other_uids("scvd-act-")
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_socket_activation(make_wrapped, shared_dir, workspace):
    with listening(shared_dir / "scvd.sock") as sock:
        d = make_wrapped(activate=sock)
        with d.client() as c:
            assert c.status().pid == d.proc.pid
            done = c.call(c.open_session(workspace), "test_env")
        assert done.ok, done.error
        assert not any(n.startswith("LISTEN_") for n in done.result["names"])
        # the listener itself (uvloop gives a child's stdout pipe as a socketpair: other sockets are fine)
        assert f"socket:[{os.fstat(sock.fileno()).st_ino}]" not in done.result["fds"]
        assert not (d.home / "run" / "scvd.sock").exists()  # it served the inherited one only
        assert "socket activation: 1 inherited socket(s)" in d.log()
        assert d.stop() == 0
        assert (shared_dir / "scvd.sock").exists()  # the manager owns the file, not scvd


@pytest.mark.one_loop
@pytest.mark.bwrap
def test_an_activated_socket_of_the_users_choosing_is_masked_in_the_sandbox(make_wrapped, workspace):
    """systemd may hand over a socket at a ListenStream= path outside scvd's runtime dir (hidden in
    the sandbox): the sandbox masked only the default path, so a sandboxed command could connect
    to scvd and run its tools (a read of any file, unasked) outside the sandbox."""
    # under /tmp, which an online call sees as the host's (a private /var/tmp would hide the path)
    where = Path(tempfile.mkdtemp(prefix="scvd-act-", dir="/tmp"))
    path = where / "scvd.sock"
    with listening(path) as sock:
        d = make_wrapped('[sandbox]\nmode = "bwrap"\nnetwork = true\n', activate=sock)  # online: /tmp is the host's
        connect = ("python3 -c 'import socket,sys; socket.socket(socket.AF_UNIX).connect(sys.argv[1]); "
                   f"print(\"REACHED\")' {path}")
        with d.client(approver=True) as c:
            call_id = c.start_call(c.open_session(workspace), "bash", {"command": connect})
            for event in c.events():
                if isinstance(event, p.ApprovalRequested) and event.call_id == call_id:
                    assert event.sandboxed, event
                    c.request(p.ApprovalDecide, approval_id=event.approval_id, decision="approve")
                    break
            done = c.wait_call(call_id)
        assert d.stop() == 0
    assert done.ok and done.result["exit_code"] != 0 and "REACHED" not in done.result["output"], done.result
    assert "Connection refused" in done.result["output"], done.result
    shutil.rmtree(where, ignore_errors=True)


def nobody_python() -> str | None:
    """An interpreter uid 65534 may run (pyenv's lives under 0700 /root)."""
    for exe in (sys.executable, "/usr/bin/python3"):
        probe = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", exe, "-c", ""],
                               capture_output=True)
        if probe.returncode == 0:
            return exe
    return None


PEER = r"""
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.settimeout(10)
s.connect(sys.argv[1])
try:
    s.sendall(b'{"type":"hello","id":1,"protocol":1,"client":{"name":"intruder"}}\n')
except OSError:
    pass
data = b""
while True:
    try:
        chunk = s.recv(65536)
    except ConnectionResetError:  # the server closed with our hello unread
        break
    if not chunk:
        break
    data += chunk
sys.stdout.buffer.write(data)
"""


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root and setpriv")
def test_peer_of_another_uid_is_refused(make_wrapped, shared_dir):
    exe = nobody_python()
    if exe is None:
        pytest.skip("no python that uid 65534 can run")
    path = shared_dir / "scvd.sock"
    with listening(path) as sock:
        path.chmod(0o666)  # only SO_PEERCRED stands between the other uid and scvd
        d = make_wrapped(activate=sock)
        peer = subprocess.run(
            ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", exe, "-c", PEER, str(path)],
            capture_output=True, timeout=30, cwd="/")
        assert peer.returncode == 0, peer.stderr.decode()
        lines = peer.stdout.splitlines()
        assert len(lines) == 1, lines  # one error, then the server closed the connection
        frame = p.decode_server_frame(lines[0])
        assert isinstance(frame, p.Error) and frame.code == "forbidden" and frame.fatal
        assert "uid 65534" in frame.message
        assert "refused peer" in d.log() and "uid=65534" in d.log()
        with d.client() as c:  # our own uid is still served
            assert c.status().pid == d.proc.pid
        assert d.stop() == 0


def test_client_library_sees_the_close(daemon):
    c = daemon.client()
    try:
        daemon.proc.send_signal(signal.SIGTERM)
        assert daemon.proc.wait(15) == 0
        with pytest.raises(ConnectionClosed):  # EPIPE on send: not mistaken for scvctl's own stdout
            c.status()
    finally:
        c.close()


def test_async_client_waiting_for_an_event_sees_the_close(daemon):
    """AsyncClient reads through a protocol: a coroutine waiting on it hears scvd close the connection."""
    import asyncio

    from scvctl.client import AsyncClient

    async def main() -> None:
        c = await AsyncClient.connect(daemon.socket, name="waiter")
        try:
            waiting = asyncio.ensure_future(c.next_event())
            await asyncio.sleep(0.05)
            assert not waiting.done()
            daemon.proc.send_signal(signal.SIGTERM)
            with pytest.raises(ConnectionClosed):
                await asyncio.wait_for(waiting, 15)
            with pytest.raises(ConnectionClosed):
                await c.request(p.Ping)
        finally:
            await c.close()

    asyncio.run(main())
    assert daemon.proc.wait(15) == 0


def test_client_library_reads_a_fatal_error_then_sees_the_close(daemon):
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(10)
    sock.connect(str(daemon.socket))
    with Client(sock) as c:
        hello = c.core.build(p.Hello, protocol=99, client=p.PeerInfo(name="old"))
        pings = b"".join(p.encode(c.core.build(p.Ping)) for _ in range(200))
        sock.sendall(p.encode(hello) + pings)  # frames the server will never read: it resets
        with pytest.raises(errors.VersionMismatch):
            while c.core.take_answer(hello.id) is None:
                c._read()
        with pytest.raises(ConnectionClosed):
            c.request(p.Ping)


# --- reload and failed starts ------------------------------------------------------------------

FAKE_BWRAP = Path(__file__).resolve().parents[1] / "helpers" / "fake-bwrap"


def test_sighups_during_a_reload_wait_and_merge_and_the_probe_matches_the_config(make_daemon, tmp_path):
    """SIGHUP 1 probes config A (held); 2 and 3 come meanwhile. No second probe runs alongside,
    2 and 3 become one reload of the newest file, and its probe is the one that stays."""
    runs_dir = tmp_path / "bwrap-log"
    runs_dir.mkdir()
    runs = runs_dir / "runs"
    bwrap_b = tmp_path / "bwrap-b"
    bwrap_b.symlink_to(FAKE_BWRAP)
    d = make_daemon('[sandbox]\nmode = "off"\n', env={"FAKE_BWRAP_LOG": str(runs_dir)})
    wait_ready(d)  # it answers only once its signal handlers are in place
    config = d.home / "config.toml"

    config.write_text(f'[sandbox]\nmode = "auto"\nbwrap = "{FAKE_BWRAP}"\n')
    d.proc.send_signal(signal.SIGHUP)
    wait_until(lambda: runs.exists() and "start" in runs.read_text(), what="the first probe")
    config.write_text(f'[sandbox]\nmode = "auto"\nbwrap = "{bwrap_b}"\n')
    d.proc.send_signal(signal.SIGHUP)
    wait_until(lambda: "it runs when that one ends" in d.log() or runs.read_text().count("start") > 1,
               what="the second SIGHUP handled")
    assert runs.read_text().count("start") == 1, "a second reload ran alongside the first"
    d.proc.send_signal(signal.SIGHUP)
    wait_until(lambda: "merged into the one waiting to run" in d.log(), what="the third SIGHUP merged")

    (runs_dir / "released").touch()
    wait_until(lambda: d.log().count("configuration reloaded from") == 2, what="both reloads")
    lines = [line.split()[0] for line in runs.read_text().splitlines()]
    assert lines == ["start", "end", "start", "end"]  # one probe at a time, two in all
    with d.client() as c:
        verdict = c.status().sandbox
    assert f"bwrap works at {bwrap_b}" in verdict, verdict
    assert d.stop() == 0
    clean_log(d.log())


def no_temp_directory(writable: Path) -> list[str]:
    """A prefix that runs a command with /, /tmp and /var/tmp read-only and `/` its working
    directory, so Python finds no usable temp directory; only `writable` stays writable."""
    return [shutil.which("bwrap") or "bwrap", "--ro-bind", "/", "/", "--dev-bind", "/dev", "/dev",
            "--bind", "/proc", "/proc", "--bind", str(writable), str(writable), "--chdir", "/", "--"]


@pytest.mark.one_loop
@pytest.mark.bwrap
def test_no_usable_temp_directory_neither_stops_a_start_nor_the_sandbox(make_daemon, tmp_path):
    """The sandbox probe made its empty workspace in the temp directory: with /tmp full or read-only
    and TMPDIR gone, scvd failed to start (exit 3: `No usable temporary directory found`), though
    nothing else needs one. It probes in scvd's own state directory now."""
    prefix, home = no_temp_directory(tmp_path), tmp_path / "home"
    env = {"TMPDIR": str(tmp_path / "gone")}
    home.mkdir()
    (home / "config.toml").write_text('[sandbox]\nmode = "auto"\n')
    # check-config of an instance that never ran has no state directory yet: the verdict says why
    checked = subprocess.run([*prefix, sys.executable, "-m", "scvd", "check-config"],
                             env=conftest.base_env(home, **env), capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0, checked.stderr
    assert ("# sandbox: unsandboxed (sandbox.mode = auto): cannot make an empty directory for the probe in "
            "the temp directory (No usable temporary directory found in") in checked.stdout, checked.stdout
    d = make_daemon(home=home, env=env, prefix=prefix)
    with d.client() as c:
        status = c.status()
    assert status.sandbox.startswith("active: bwrap works at "), status.sandbox
    os.kill(status.pid, signal.SIGTERM)  # scvd itself, not the bwrap around it
    assert d.proc.wait(15) == 0
    assert not list((home / "state").glob("scvd-probe-*"))  # the probe's directory went with it
    clean_log(d.log())


def test_a_failed_start_after_the_bind_leaves_no_socket_and_no_lock(tmp_path):
    """Signal handlers can be installed only from the main thread: a real failure after the bind."""
    import asyncio
    import threading

    from scvd import config as config_mod, paths as paths_mod
    from scvd.instance import acquire_lock
    from scvd.server import Daemon

    paths = paths_mod.resolve({"SCV_HOME": str(tmp_path / "home")})
    paths_mod.prepare(paths)
    daemon = Daemon(paths, config_mod.load(paths.config_file, env={}), install_signals=True)
    failures: list[BaseException] = []

    def main() -> None:
        loop = asyncio.new_event_loop()
        try:
            loop.run_until_complete(daemon.startup([]))
        except BaseException as exc:
            failures.append(exc)
        finally:
            loop.close()

    thread = threading.Thread(target=main)
    thread.start()
    thread.join(30)
    assert len(failures) == 1 and "main thread" in str(failures[0]), failures
    assert daemon.listening_on == str(paths.socket)  # it did bind
    assert not paths.socket.exists()
    os.close(acquire_lock(paths.lock_file))  # and let go of the lock


@pytest.mark.one_loop
def test_a_reload_that_finds_the_config_file_gone_keeps_the_old_configuration(make_daemon):
    """A moved config.toml at SIGHUP would have reset everything to defaults (policy always -> on-risk)."""
    d = make_daemon('[approvals]\npolicy = "always"\n')
    wait_ready(d)
    config = d.home / "config.toml"
    config.rename(d.home / "config.toml.moved")
    d.proc.send_signal(signal.SIGHUP)
    wait_until(lambda: "reload failed" in d.log(), what="the reload")
    why = (f"{config}: no such file; put it back, then reload again (without it every setting would fall "
           "back to its default)")
    assert f"reload failed, keeping the old configuration: {why}" in d.log()
    with d.client() as c:
        assert c.status().policy == "always"
        assert c.status().reload_error == why  # without systemd's status line, a refusal was only in the log
    shown = subprocess.run([sys.executable, "-m", "scvctl", "status"], env=d.env, capture_output=True, text=True,
                           timeout=30)
    assert f"last reload failed, the configuration from before it runs: {why}\n" in shown.stdout
    (d.home / "config.toml.moved").rename(config)
    d.proc.send_signal(signal.SIGHUP)
    wait_until(lambda: "configuration reloaded from" in d.log(), what="the reload after the fix")
    with d.client() as c:
        assert c.status().reload_error == ""


@pytest.mark.one_loop
def test_a_reload_that_finds_the_config_file_empty_keeps_the_old_configuration(make_daemon):
    """`: > config.toml` (or an editor's save cut short) then SIGHUP logged "configuration reloaded" and
    ran on the defaults (policy always -> on-risk), as a gone file did before it was refused."""
    d = make_daemon('[approvals]\npolicy = "always"\n')
    wait_ready(d)
    config = d.home / "config.toml"
    for text, what in (("", "0 bytes"), ("\n  \n", "only whitespace")):
        config.write_text(text)
        failed = d.log().count("reload failed")
        d.proc.send_signal(signal.SIGHUP)
        wait_until(lambda: d.log().count("reload failed") > failed, what="the reload")
        why = (f"{config}: empty ({what}); every setting would fall back to its default: put the settings back, "
               "or, if you mean the defaults, put a comment in it (# defaults), then reload again")
        assert f"reload failed, keeping the old configuration: {why}" in d.log()
        assert "configuration reloaded from" not in d.log()
        with d.client() as c:
            assert (c.status().policy, c.status().reload_error) == ("always", why)
    config.write_text("# defaults\n")  # the way to say "the defaults" that the message gives
    d.proc.send_signal(signal.SIGHUP)
    wait_until(lambda: "configuration reloaded from" in d.log(), what="the reload of the commented file")
    with d.client() as c:
        assert (c.status().policy, c.status().reload_error) == ("on-risk", "")
    config.write_text("")  # the defaults run now: emptying the file changes nothing, so it is no mistake
    d.proc.send_signal(signal.SIGHUP)
    wait_until(lambda: d.log().count("configuration reloaded from") == 2, what="the reload of the empty file")


@pytest.mark.one_loop
def test_a_reload_without_a_config_file_at_start_or_now_runs_on_the_defaults(make_daemon):
    d = make_daemon(env={"SCVD_APPROVALS__POLICY": "never"})
    wait_ready(d)
    d.proc.send_signal(signal.SIGHUP)
    wait_until(lambda: "configuration reloaded from" in d.log(), what="the reload")
    with d.client() as c:
        assert c.status().policy == "never"
    assert d.stop() == 0
    clean_log(d.log())


@contextlib.contextmanager
def hang_point(path: Path) -> Iterator[Path]:
    """A harness hang point (HARNESS_HANG_*_WHILE): the process holds there while `path` exists; it
    is removed on the way out, if the test did not remove it first, so a process that failed the test
    can still end."""
    path.touch()
    try:
        yield path
    finally:
        path.unlink(missing_ok=True)


def reached(point: Path, what: str) -> None:
    """Wait until the process is held at `point` (the harness touches `<point>.hit`)."""
    wait_until(lambda: point.with_name(point.name + ".hit").exists(), what=what)


def open_held(d: Any, workspace: Path, hang: Path, what: str) -> RawConn:
    """A connection whose `session.open` (id 7) is held at the hang point `hang`."""
    conn = RawConn(d.socket)
    conn.hello()
    conn.send({"type": "session.open", "id": 7, "workspace": str(workspace)})
    reached(hang, what)
    return conn


def test_a_thread_stuck_in_a_blocking_call_cannot_hold_the_exit(make_wrapped, tmp_path):
    """A reload's sandbox probe on a hung mount never returns; scvd said "scvd stopped" and then never
    exited (the interpreter's exit joins every thread), until systemd's SIGKILL."""
    with hang_point(tmp_path / "hang") as hang:
        d = make_wrapped("", env={"HARNESS_HANG_PROBE_WHILE": str(hang)})
        (d.home / "config.toml").write_text('[sandbox]\nmode = "auto"\n')  # the reload probes the sandbox
        d.proc.send_signal(signal.SIGHUP)
        reached(hang, "the probe to hang")
        d.proc.send_signal(signal.SIGTERM)
        assert d.proc.wait(15) == 0
    assert "scvd stopped" in d.log()
    assert "exiting without waiting for 1 thread(s) still in a blocking call: " in d.log()


def test_a_session_open_still_waiting_when_scvd_stops_is_told_to_retry(make_wrapped, tmp_path, workspace):
    """A session.open whose skill walk hung (a hung mount) when SIGTERM came got no answer at all:
    its client read a bare end of stream."""
    with hang_point(tmp_path / "hang") as hang:
        d = make_wrapped(env={"HARNESS_HANG_SKILLS_WHILE": str(hang)})
        with open_held(d, workspace, hang, "the session's skill walk to hang") as conn:
            d.proc.send_signal(signal.SIGTERM)
            answer = conn.frame()
            assert conn.closed_by_server()
    assert isinstance(answer, p.Error) and answer.id == 7, answer
    assert (answer.code, answer.kind, answer.fatal, answer.reason) == ("failed", "unavailable", True, "stopping")
    assert answer.message == STOPPING
    assert d.proc.wait(15) == 0
    clean_log(d.log())


def test_requests_read_behind_one_still_waiting_when_scvd_stops_are_told_so_too(make_wrapped, tmp_path, workspace):
    """Pings sent in one write with a session.open whose skill walk hung were read, queued behind it,
    and got nothing as scvd stopped: only the held request was told, then a bare end of stream."""
    with hang_point(tmp_path / "hang") as hang:
        d = make_wrapped(env={"HARNESS_HANG_SKILLS_WHILE": str(hang)})
        with RawConn(d.socket) as conn:
            conn.hello()
            conn.send_raw(msgspec.json.encode({"type": "session.open", "id": 7, "workspace": str(workspace)})
                          + b'\n{"type":"ping","id":8}\n{"type":"ping","id":"nine"}\n')
            reached(hang, "the session's skill walk to hang")
            d.proc.send_signal(signal.SIGTERM)
            answers = [conn.frame() for _ in range(3)]
            assert conn.closed_by_server()
    assert [(type(a), a.id, a.kind, a.reason, a.message) for a in answers] == [
        (p.Error, ident, "unavailable", "stopping", STOPPING) for ident in (7, 8, "nine")], answers
    assert d.proc.wait(15) == 0
    clean_log(d.log())


def test_answers_made_before_a_stop_reach_a_client_that_reads_them_after_it(make_daemon, workspace):
    """A client that had not yet read three 1 MB answers when SIGTERM came read their call.accepted,
    no call.completed, and a frame cut mid-line: scvd closed its loop on what it still held, though
    its audit log said the calls completed."""
    (workspace / "big.txt").write_bytes(b"y" * 1_000_000)
    d = make_daemon()
    with RawConn(d.socket) as conn:
        big_reads_unread(d, conn, workspace)
        d.proc.send_signal(signal.SIGTERM)
        time.sleep(0.3)  # scvd stops meanwhile: its sessions closed, its connections too
        data = b""
        while chunk := conn.sock.recv(1 << 20):
            data += chunk
    lines = data.split(b"\n")
    assert lines[-1] == b"", f"a frame cut after {len(lines[-1])} bytes"
    frames = [p.decode_server_frame(line) for line in lines[:-1]]
    done = [f for f in frames if isinstance(f, p.CallCompleted)]
    assert [type(f) for f in frames].count(p.CallAccepted) == 3 and len(done) == 3, frames
    assert all(f.ok and len(f.result["content"]) == 1_000_000 for f in done)
    assert d.proc.wait(15) == 0


def big_reads_unread(d: Any, conn: RawConn, workspace: Path) -> None:
    """Three reads of workspace/big.txt (1 MB) sent at once, completed (audited), their answers unread."""
    conn.hello()
    session = conn.request({"type": "session.open", "workspace": str(workspace)}).session
    conn.send_raw(b"".join(msgspec.json.encode({
        "type": "call", "id": i, "session": session, "tool": "read",
        "arguments": {"path": "big.txt", "limit": 1_000_000}}) + b"\n" for i in range(3)))
    audit = d.home / "state" / "audit.log"
    wait_until(lambda: audit.exists() and audit.read_text().count('"event":"completion"') == 3,
               what="the three reads to complete, their answers unread")


def test_a_client_that_never_reads_its_last_answers_does_not_hold_the_stop(make_daemon, workspace):
    """scvd waits for its closed connections' peers to read their last answers within the stop's grace
    (a second at least), then drops what is left and says so: a peer that reads nothing holds nobody."""
    (workspace / "big.txt").write_bytes(b"y" * 1_000_000)
    d = make_daemon("[server]\nshutdown_grace_seconds = 1\n")
    with RawConn(d.socket) as conn:
        big_reads_unread(d, conn, workspace)
        d.proc.send_signal(signal.SIGTERM)
        assert d.proc.wait(15) == 0  # while the connection is still open, unread
    assert "did not read its last answers as scvd stopped" in d.log() and "dropping them" in d.log()


def test_the_calls_scvd_cancels_and_refuses_as_it_stops_say_so_in_a_field(make_wrapped, tmp_path, workspace):
    """A client told a call the stop cancelled from one that failed by the words of its message alone:
    the frame carried nothing else. Its error says `reason: stopping`, for a call in flight and for one
    sent in the stop's grace; the words stay as they were."""
    d = make_wrapped("[server]\nshutdown_grace_seconds = 60\n")
    held = tmp_path / "held"
    held.mkdir()
    try:
        with RawConn(d.socket) as busy, RawConn(d.socket) as conn:
            busy.hello()
            start_call(busy, held, "test_stubborn")  # holds the stop in its grace
            conn.hello()
            session = conn.request({"type": "session.open", "workspace": str(workspace)}).session
            running = start_call(conn, workspace, "test_sleep")
            d.proc.send_signal(signal.SIGTERM)
            in_flight = msgspec.json.decode(conn.line())
            late = conn.request({"type": "call", "session": session, "tool": "test_sleep", "arguments": {}})
            refused = msgspec.json.decode(conn.line())
    finally:
        d.proc.kill()
    assert (in_flight["type"], in_flight["call_id"]) == ("call.completed", running), in_flight
    assert in_flight["error"] == {"kind": "cancelled", "message": f"call {running} was cancelled: scvd is stopping",
                                  "reason": "stopping"}
    assert (refused["type"], refused["call_id"]) == ("call.completed", late.call_id), refused
    assert refused["error"] == {"kind": "cancelled", "message": "scvd is stopping; no new calls are accepted",
                                "reason": "stopping"}


def test_scvctl_whose_request_scvd_stopped_on_says_try_again_exit_3(make_wrapped, tmp_path, workspace):
    """It printed the wire code, `failed: scvd is stopping ...`, exit 1: as if the call had failed."""
    with hang_point(tmp_path / "hang") as hang:
        d = make_wrapped(env={"HARNESS_HANG_SKILLS_WHILE": str(hang)})
        scvctl = subprocess.Popen([sys.executable, "-m", "scvctl", "call", "--workspace", str(workspace), "test_sleep"],
                                  env=d.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            reached(hang, "the session's skill walk to hang")
            d.proc.send_signal(signal.SIGTERM)
            out, err = scvctl.communicate(timeout=30)
        finally:
            if scvctl.poll() is None:  # a failed wait must not leave it running
                scvctl.kill()
                scvctl.communicate()
    assert (scvctl.returncode, out) == (3, ""), err
    assert err == STOPPING + "\n"
    assert d.proc.wait(15) == 0


class EndsWithTheStop(HarnessTool):
    """Runs until the stop cancels it; then ends `held`, a request handler's wait, one loop step later."""

    name = "test_ends_with_the_stop"
    description = ("Wait until scvd stops.\nUse for races with the stop; test_sleep for a plain wait.\n"
                   "Precondition: only in test daemons.")
    Arguments = NoArgs
    summary = "wait for the stop"

    def __init__(self, end: Callable[[asyncio.Future[None]], Any]) -> None:
        self.end = end
        self.held: asyncio.Future[None] | None = None
        self.running, self.holding = threading.Event(), threading.Event()

    async def run(self, args: Any, plan: Plan, ctx: CallContext) -> Any:
        self.running.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            # not now: a step later the request's task ends after the stop's wait for this call was
            # woken, so the stop takes its next step (answering waiting requests) before that task is unlisted
            asyncio.get_running_loop().call_soon(self.end, self.held)
            raise
        return {}


@pytest.mark.parametrize("end", ["answered", "cancelled"])
def test_a_request_that_ends_in_the_stops_own_step_gets_one_answer(make_inproc, monkeypatch, workspace, end):
    """The stop tells requests whose handler still waits that no answer comes. A task that ended in the
    step the stop did so (unlisted by its done-callback a step later) was counted as waiting: answered,
    its request got the stop's error as well, two answers to one id; cancelled first, by done() alone,
    none at all."""
    from scvd.server import Daemon

    tool = EndsWithTheStop(lambda held: held.set_result(None) if end == "answered" else held.cancel())
    plain = Daemon.on_ping

    async def held_ping(self: Daemon, conn: Any, frame: p.Ping) -> p.Frame:
        tool.held = asyncio.get_running_loop().create_future()
        tool.holding.set()
        await tool.held
        return plain(self, conn, frame)

    monkeypatch.setattr(Daemon, "on_ping", held_ping)  # a ping waits for the tool's end
    d = make_inproc(tools=[tool])
    with RawConn(d.socket) as conn:
        conn.hello()
        session = conn.request({"type": "session.open", "workspace": str(workspace)})
        conn.request({"type": "call", "session": session.session, "tool": tool.name, "arguments": {}})
        assert tool.running.wait(15)
        conn.send({"type": "ping", "id": 7})
        assert tool.holding.wait(15)
        d.call_soon(d.daemon.request_stop, "test")
        frames = []
        while (line := conn.line()) is not None:
            frames.append(p.decode_server_frame(line))
    answers = [f for f in frames if getattr(f, "id", None) == 7]
    if end == "answered":
        assert [type(a) for a in answers] == [p.Pong], frames
    else:
        assert [(type(a), a.kind) for a in answers] == [(p.Error, "unavailable")], frames
        assert answers[0].message == STOPPING


@pytest.mark.one_loop  # it starts its daemon on each loop itself
@pytest.mark.parametrize("event_loop", ["asyncio", "uvloop"])
def test_a_second_sigint_once_the_loop_has_closed_exits_at_once(make_wrapped, tmp_path, event_loop):
    """Once the loop had closed (scvd waiting for a stuck thread), Ctrl-C again was a KeyboardInterrupt
    traceback on asyncio's loop, and lost on uvloop's: not the exit 1 at once a second Ctrl-C is."""
    with hang_point(tmp_path / "after-loop") as hang:
        d = make_wrapped(env={"HARNESS_HANG_AFTER_LOOP_WHILE": str(hang), "SCVD_SERVER__EVENT_LOOP": event_loop})
        d.proc.send_signal(signal.SIGINT)
        reached(hang, "the event loop to close")
        d.proc.send_signal(signal.SIGINT)
        assert d.proc.wait(15) == 1
    assert "Traceback" not in d.log() and "second SIGINT: exiting at once" in d.log(), d.log()


def test_a_fifo_in_place_of_config_toml_is_refused_not_waited_for(make_daemon, tmp_path):
    """A reload (or a start) reading a FIFO there waited for a writer for good."""
    d = make_daemon("")
    config = d.home / "config.toml"
    config.unlink(missing_ok=True)
    os.mkfifo(config)
    d.proc.send_signal(signal.SIGHUP)
    wait_until(lambda: "reload failed" in d.log(), what="the reload to refuse the FIFO")
    assert (f"reload failed, keeping the old configuration: {config} is a FIFO, not a regular file; put a "
            "config.toml file there (or remove it to run on the defaults)") in d.log()
    assert d.stop() == 0
    start = subprocess.run([sys.executable, "-m", "scvd", "run"], env=d.env, capture_output=True, text=True,
                           timeout=30)
    assert start.returncode == 2
    assert f"{config} is a FIFO, not a regular file" in start.stderr


def test_a_reload_stuck_reading_gives_up_and_a_later_one_runs(make_wrapped, tmp_path):
    """A reload blocked on a hung mount held the reload lock for good: every later SIGHUP merged into
    the one waiting behind it, so nothing was read again until a restart."""
    hang = tmp_path / "hang"
    d = make_wrapped("", env={"HARNESS_RELOAD_READ_SECONDS": "1", "HARNESS_HANG_LOAD_WHILE": str(hang)})
    config = d.home / "config.toml"
    hang.touch()
    d.proc.send_signal(signal.SIGHUP)
    wait_until(lambda: "reload failed" in d.log(), what="the stuck reload to give up")
    assert (f"reload failed, keeping the old configuration: reading {config} and the tool definitions took "
            "longer than 1 s (a file on a hung mount?); fix that, then reload again") in d.log()
    for n in range(2, 5):  # more reloads stuck on it, each on a thread of its own
        d.proc.send_signal(signal.SIGHUP)
        wait_until(lambda: d.log().count("took longer than 1 s") == n, what=f"reload {n} to give up")
    d.proc.send_signal(signal.SIGHUP)  # the fifth is refused at once: four reads hang already
    wait_until(lambda: "never returned" in d.log(), what="the refusal")
    assert (f"the last 4 reloads' reads of {config} and the tool definitions never returned (a hung mount?); "
            "fix that, or restart scvd") in d.log()
    hang.unlink()  # the mount is back: the hung reads return (the harness looks every 50 ms)
    config.write_text('[approvals]\npolicy = "always"\n')

    def reloads() -> bool:  # each SIGHUP is refused (the reads not all back yet) or runs
        outcomes = d.log().count("never returned") + d.log().count("configuration reloaded from")
        d.proc.send_signal(signal.SIGHUP)
        wait_until(lambda: d.log().count("never returned") + d.log().count("configuration reloaded from")
                   > outcomes, what="the reload's outcome")
        return "configuration reloaded from" in d.log()

    wait_until(reloads, what="a reload after the fix")
    with d.client() as c:
        assert c.status().policy == "always"
    assert d.stop() == 0


@pytest.mark.one_loop
def test_a_reload_of_a_setting_read_at_start_only_says_when_it_applies(make_daemon):
    """log_level changed by a reload was taken silently; the daemon went on at the old level."""
    from conftest import reloaded

    d = make_daemon('log_level = "info"\n')
    reloaded(d, 'log_level = "debug"\n[audit]\nkeep = 5\n')
    assert ("reload: log_level, audit.keep changed; it takes effect at the next start of scvd") in d.log()
    # put back as it runs: nothing waits for a start (this was compared with the last reload's file)
    reloaded(d, 'log_level = "info"\n')
    assert d.log().count("it takes effect at the next start of scvd") == 1
    assert d.stop() == 0


def test_a_reload_asking_for_a_missing_uvloop_fails_now_not_at_the_next_start(make_inproc, monkeypatch):
    """It was taken (with "takes effect at the next start"), and the next start, after a reboot,
    failed with a configuration error."""
    d = make_inproc('log_level = "info"\n')
    monkeypatch.delenv("SCVD_SERVER__EVENT_LOOP", raising=False)  # the asyncio pass sets it: it would win over the file
    monkeypatch.setitem(sys.modules, "uvloop", None)  # as on a host without the package
    (d.home / "config.toml").write_text('[server]\nevent_loop = "uvloop"\n')
    asyncio.run_coroutine_threadsafe(d.daemon.reload(), d.loop).result(30)
    assert d.daemon.reload_error.startswith('server.event_loop = "uvloop" but uvloop is not installed: pip install')
    assert d.daemon.config.server.event_loop == "auto" and d.daemon.config.log_level == "info"


def test_a_second_sigint_kills_the_processes_of_running_calls_before_exiting(make_wrapped, workspace):
    # their own sessions: the terminal's Ctrl-C never reaches them, and the grace's SIGKILL never came
    from helpers.probe_tools import requested

    d = make_wrapped(STUBBORN_CONFIG.format(grace=60))
    with Client.connect(d.socket, name="owner", approver=True) as owner:
        session = owner.open_session(workspace)
        call_id = owner.start_call(session, "bash", {"command": "trap '' TERM INT; echo $$ > sleeper.pid; exec sleep 1021"})
        owner.request(p.ApprovalDecide, approval_id=requested(owner, call_id).approval_id, decision="approve")
        wait_until(lambda: (workspace / "sleeper.pid").exists() and (workspace / "sleeper.pid").read_text().strip(),
                   what="the bash call to start")
        sleeper = int((workspace / "sleeper.pid").read_text())
        d.proc.send_signal(signal.SIGINT)
        wait_until(lambda: "stopping (SIGINT)" in d.log(), what="the first SIGINT")
        time.sleep(0.3)  # its SIGTERM is ignored; the grace is 60 s
        assert not pid_gone(sleeper)
        d.proc.send_signal(signal.SIGINT)
        assert d.proc.wait(10) == 1
    wait_until(lambda: pid_gone(sleeper), timeout=5, what="the call's process to be killed")
    assert "second SIGINT: exiting at once (1 process(es) of calls killed)" in d.log()
    records = [msgspec.json.decode(line) for line in (d.home / "state" / "audit.log").read_bytes().splitlines()]
    ended = [(r["event"], r.get("outcome"), r.get("error_kind")) for r in records if r.get("call_id") == call_id]
    assert ended[-1] == ("completion", "error", "cancelled"), ended  # its proposal is not the last word



def test_a_stopping_scvd_leaves_the_socket_another_one_bound_there_since(make_wrapped, make_daemon, workspace,
                                                                        tmp_path):
    # two SCV_HOMEs sharing SCV_SOCKET: the second came up while the first waited out its calls'
    # grace (taking the socket nobody listened on for stale), and the first's exit removed it
    shared = tmp_path / "shared.sock"
    first = make_wrapped(STUBBORN_CONFIG.format(grace=3), env={"SCV_SOCKET": str(shared)})
    with RawConn(shared) as conn:
        conn.hello()
        start_call(conn, workspace, "test_stubborn")
        first.proc.send_signal(signal.SIGTERM)
        wait_until(lambda: "stopping (SIGTERM)" in first.log(), what="the first to stop")
        second = make_daemon(home=tmp_path / "second", env={"SCV_SOCKET": str(shared)})
        assert first.proc.wait(15) == 0  # after its grace
    with Client.connect(shared, name="after") as c:
        assert c.status().pid == second.proc.pid


@pytest.mark.one_loop
@pytest.mark.parametrize("kind, said", [
    ("link", "the audit log {log} is a symbolic link, which scvd does not follow; put the file itself there "
             "(or remove the link)"),
    ("dir", "the audit log {log} is a directory; move it away, so scvd can make the file there"),
    ("socket", "cannot open the audit log {log} (No such device or address); check that it and {log.parent} "
               "are yours and writable"),  # what no open() takes: the advice names the file and its directory
])
def test_an_audit_log_that_cannot_be_opened_says_what_to_fix(make_daemon, tmp_path, kind, said):
    """A link in the audit log's place (kept on another disk, say) read `[Errno 40] Too many levels of
    symbolic links`, as if it were a loop; the start says what is wrong and what to do."""
    home = tmp_path / "home"
    (home / "state").mkdir(parents=True)
    log = home / "state" / "audit.log"
    if kind == "link":
        (tmp_path / "elsewhere.log").write_text("")
        log.symlink_to(tmp_path / "elsewhere.log")
    elif kind == "dir":
        log.mkdir()
    else:
        holder = socket.socket(socket.AF_UNIX)
        holder.bind(str(log))
        holder.close()
    d = make_daemon(home=home, wait=False)
    assert d.proc.wait(30) == 3
    assert f"ERROR scvd: cannot start: {said.format(log=log)}" in d.log()
    assert not d.socket.exists()


@pytest.mark.one_loop
@pytest.mark.parametrize("kind, said", [
    ("dir", "the lock file {lock} is a directory; move it away, so scvd can make the file there"),
    ("link", "the lock file {lock} is a symbolic link, which scvd does not follow; put the file itself there"),
])
def test_a_lock_file_that_cannot_be_opened_says_what_to_fix(make_daemon, tmp_path, kind, said):
    """A directory there read `cannot start: [Errno 21] Is a directory`; a link had the file it points
    to truncated to scvd's pid."""
    home = tmp_path / "home"
    (home / "state").mkdir(parents=True)
    lock = home / "state" / "scvd.lock"
    if kind == "dir":
        lock.mkdir()
    else:
        (tmp_path / "notes.txt").write_text("keep me")
        lock.symlink_to(tmp_path / "notes.txt")
    d = make_daemon(home=home, wait=False)
    assert d.proc.wait(30) == 3
    assert f"ERROR scvd: cannot start: {said.format(lock=lock)}" in d.log()
    assert (tmp_path / "notes.txt").read_text() == "keep me" if kind == "link" else lock.is_dir()


@pytest.mark.one_loop
def test_a_disk_that_refuses_writes_does_not_stop_a_start(make_daemon, tmp_path):
    """A full disk (here RLIMIT_FSIZE: Python ignores SIGXFSZ, so a write fails with EFBIG as with
    ENOSPC): writing the pid into the lock file failed the start (`cannot start: [Errno 28] No space
    left on device`, exit 3, restarted by systemd to its start limit), though the audit log is made
    to run on through a full disk. The lock is what makes the instance exclusive; the pid is a note."""
    first = make_daemon(home=tmp_path / "home")  # a start before the disk filled: the state is there
    assert first.stop() == 0
    with scvd_on_a_full_disk(first.env) as proc:
        conftest.wait_for_socket(first.socket, proc=proc)
        with Client.connect(first.socket) as c:
            assert c.status().pid == proc.pid
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
        err = proc.stderr.read().decode()
        assert f"cannot write this pid into {first.home / 'state' / 'scvd.lock'}" in err


def test_a_killed_scvd_takes_the_processes_of_its_calls_with_it(make_daemon, workspace):
    """SIGKILL (the OOM killer) leaves scvd no time to clean up, and without systemd no cgroup is
    killed after it: its guardian kills what the calls still run. Here a shell that waits for a
    background job of its group; both ran on for good."""
    from helpers.probe_tools import requested

    d = make_daemon('[sandbox]\nmode = "off"\n')  # in the sandbox, bwrap's --die-with-parent does it
    pids = workspace / "pids"
    # connected until the kill: a disconnect cancels the call, and scvd itself ended them before it
    with d.client(name="owner", approver=True) as owner:
        call_id = owner.start_call(owner.open_session(workspace), "bash",
                                   {"command": "sleep 1023 & echo $$ $! > pids.tmp; mv pids.tmp pids; wait"})
        owner.request(p.ApprovalDecide, approval_id=requested(owner, call_id).approval_id, decision="approve")
        wait_until(pids.exists, what="the bash call to start")
        shell, job = map(int, pids.read_text().split())
        guardian = [q.pid for q in scan_processes().values() if q.ppid == d.proc.pid and conftest.is_guardian(q.pid)]
        try:
            os.kill(d.proc.pid, signal.SIGKILL)
            d.proc.wait(10)
            try:
                wait_until(lambda: pid_gone(shell) and pid_gone(job), timeout=10,
                           what="the killed scvd's call processes to end")
            except AssertionError as exc:  # say what was left (shell, job, guardian)
                raise AssertionError(f"{exc}: {[read_stat(pid) for pid in (shell, job, *guardian)]}") from None
        finally:
            for pid in (shell, job):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
