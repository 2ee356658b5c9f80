"""The real daemon talking to a real datagram NOTIFY_SOCKET, as it would to systemd."""

from __future__ import annotations

import asyncio
import signal
import socket
import time
from pathlib import Path
from typing import Any

import pytest

from scvctl.client import AsyncClient

from harness import NotifyListener, RawConn, make_wrapped, wait_until  # noqa: F401 (fixture)


@pytest.fixture
def listener(tmp_path: Path):
    lst = NotifyListener(tmp_path / "notify.sock")
    yield lst
    lst.close()


def monotonic_usec() -> int:
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000


def test_lifecycle_messages_in_order(make_daemon, listener, workspace):
    d = make_daemon(env={"NOTIFY_SOCKET": str(listener.path)})
    assert listener.recv() == "READY=1"
    assert listener.recv() == "STATUS=sessions=0 pending_approvals=0 running_calls=0"

    with d.client() as c:  # STATUS follows the sessions (connections may repeat it)
        session = c.open_session(workspace)
        listener.until(lambda m: m == "STATUS=sessions=1 pending_approvals=0 running_calls=0")
        # a call waiting for a person is its pending approval, not a running call as well
        c.start_call(session, "write", {"path": "new.txt", "content": "x", "mode": "create"})
        listener.until(lambda m: m == "STATUS=sessions=1 pending_approvals=1 running_calls=0")
    listener.until(lambda m: m == "STATUS=sessions=0 pending_approvals=0 running_calls=0")
    time.sleep(0.1)  # let the STATUS of the dropped connection out before SIGHUP
    while listener.pending():
        assert listener.recv().startswith("STATUS=")

    before = monotonic_usec()
    d.proc.send_signal(signal.SIGHUP)
    reloading = listener.recv()
    after = monotonic_usec()
    first, second = reloading.split("\n")  # one datagram, two assignments
    assert first == "RELOADING=1"
    name, _, usec = second.partition("=")
    assert name == "MONOTONIC_USEC" and before <= int(usec) <= after
    assert listener.recv() == "READY=1"
    assert listener.recv().startswith("STATUS=")

    d.proc.send_signal(signal.SIGTERM)
    assert listener.recv() == "STOPPING=1"
    assert d.proc.wait(15) == 0


@pytest.mark.one_loop
def test_reload_applies_config_to_new_sessions(make_daemon, listener):
    d = make_daemon(env={"NOTIFY_SOCKET": str(listener.path)})
    listener.until(lambda m: m == "READY=1")
    with d.client() as c:
        assert c.status().policy == "on-risk"
        (d.home / "config.toml").write_text('[approvals]\npolicy = "always"\n')
        d.proc.send_signal(signal.SIGHUP)
        listener.until(lambda m: m == "READY=1")
        assert c.status().policy == "always"


def test_broken_config_on_reload_keeps_the_old_one(make_daemon, listener):
    d = make_daemon('[approvals]\npolicy = "always"\n', env={"NOTIFY_SOCKET": str(listener.path)})
    listener.until(lambda m: m == "READY=1")
    (d.home / "config.toml").write_text('[approvals]\npolicy = "sometimes"\n')
    d.proc.send_signal(signal.SIGHUP)
    seen = listener.until(lambda m: m == "READY=1")
    others = [m.split("=")[0] for m in seen if not m.startswith("STATUS=")]
    assert others == ["RELOADING", "READY"]
    failed = [m for m in seen if m.startswith("STATUS=reload failed")]
    assert failed and "approvals.policy" in failed[0]
    time.sleep(0.2)  # the failure stays the status line: nothing overwrites it after READY=1
    later = [listener.recv() for _ in iter(listener.pending, False)]
    assert not [m for m in later if m.startswith("STATUS=")], later
    with d.client() as c:
        assert c.status().policy == "always"
    assert d.stop() == 0
    assert "reload failed, keeping the old configuration" in d.log()


def test_watchdog_pings_when_asked(make_daemon, listener):
    d = make_daemon(env={"NOTIFY_SOCKET": str(listener.path), "WATCHDOG_USEC": "100000"})
    seen = listener.until(lambda m: m == "READY=1")
    pings = 0
    while pings < 3:
        if listener.recv() == "WATCHDOG=1":
            pings += 1
    assert d.stop() == 0
    assert seen == ["READY=1"]


def test_no_watchdog_for_another_pid(make_daemon, listener):
    d = make_daemon(env={"NOTIFY_SOCKET": str(listener.path), "WATCHDOG_USEC": "100000",
                         "WATCHDOG_PID": "1"})
    listener.until(lambda m: m == "READY=1")
    time.sleep(0.5)  # five intervals: a ping would have come by now
    d.proc.send_signal(signal.SIGTERM)
    rest = listener.until(lambda m: m == "STOPPING=1")
    assert "WATCHDOG=1" not in rest
    assert d.proc.wait(15) == 0


@pytest.mark.one_loop
def test_children_do_not_inherit_the_manager_variables(make_wrapped, listener, workspace):
    env = {"NOTIFY_SOCKET": str(listener.path), "WATCHDOG_USEC": "60000000", "SCVD_LOG_LEVEL": "info"}
    d = make_wrapped(env=env)
    listener.until(lambda m: m == "READY=1")
    with d.client() as c:
        done = c.call(c.open_session(workspace), "test_env")
    assert done.ok, done.error
    names = set(done.result["names"])
    assert names.isdisjoint({"NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"})
    assert "PATH" in names  # the rest of the environment is inherited
    # scvd still notifies after scrubbing its own environment
    d.proc.send_signal(signal.SIGTERM)
    listener.until(lambda m: m == "STOPPING=1")
    assert d.proc.wait(15) == 0


# READY=1 goes out once the socket accepts, before the server is imported (cli.run): whoever
# acts on it at once (a client, systemd's stop or reload) is served when the loop runs.


def test_a_client_connecting_at_ready_is_answered(make_daemon, listener):
    # fork=False here and below: the server's imports after READY=1 are the subject (a fork has them done)
    d = make_daemon(env={"NOTIFY_SOCKET": str(listener.path)}, wait=False, fork=False)
    assert listener.recv() == "READY=1"
    with RawConn(d.socket) as conn:  # no retry: the socket accepts by the time READY=1 is out
        conn.hello()
        assert conn.status().pid == d.proc.pid
    assert d.stop() == 0


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_right_after_ready_is_a_clean_stop(make_daemon, listener, sig):
    d = make_daemon(env={"NOTIFY_SOCKET": str(listener.path)}, wait=False, fork=False)
    assert listener.recv() == "READY=1"
    d.proc.send_signal(sig)
    listener.until(lambda m: m == "STOPPING=1")
    assert d.proc.wait(15) == 0
    assert not d.socket.exists()
    assert "scvd stopped" in d.log()


def reloaded_then_stopped(d: Any, listener: NotifyListener, policy: str) -> None:
    """RELOADING=1, READY=1, the policy the file says now; then a clean stop."""
    listener.until(lambda m: m.startswith("RELOADING=1"))
    listener.until(lambda m: m == "READY=1")
    with RawConn(d.socket) as conn:
        conn.hello()
        assert conn.status().policy == policy
    assert d.stop() == 0


def test_a_reload_right_after_ready_reloads(make_daemon, listener):
    d = make_daemon('[approvals]\npolicy = "always"\n', env={"NOTIFY_SOCKET": str(listener.path)}, wait=False,
                    fork=False)
    assert listener.recv() == "READY=1"
    (d.home / "config.toml").write_text('[approvals]\npolicy = "never"\n')
    d.proc.send_signal(signal.SIGHUP)
    reloaded_then_stopped(d, listener, "never")


def test_a_reload_before_ready_is_kept_and_reloads_once_the_daemon_serves(make_wrapped, listener, tmp_path):
    """The SIGHUP comes while scvd starts, held before its claim (so before READY=1 and long before
    its loop handles signals): not the default action (the daemon dead), not lost, but a reload."""
    hold = tmp_path / "hold-claim"
    hold.touch()
    d = make_wrapped('[approvals]\npolicy = "always"\n', wait=False,
                     env={"NOTIFY_SOCKET": str(listener.path), "HARNESS_HANG_CLAIM_WHILE": str(hold)})
    wait_until(lambda: hold.with_name(hold.name + ".hit").exists() or d.proc.poll() is not None, what="the claim")
    assert not listener.pending()  # no READY=1 yet
    (d.home / "config.toml").write_text('[approvals]\npolicy = "never"\n')
    d.proc.send_signal(signal.SIGHUP)
    hold.unlink()
    wait_until(lambda: listener.pending() or d.proc.poll() is not None, what="READY=1")
    assert d.proc.poll() is None, f"the SIGHUP ended scvd (exit {d.proc.returncode}):\n{d.log()}"
    assert listener.recv() == "READY=1"
    reloaded_then_stopped(d, listener, "never")
    assert d.log().count("configuration reloaded from") == 1


def test_a_stop_during_a_reload_sends_nothing_after_stopping(make_daemon, listener, tmp_path):
    """The reload's end sent READY=1 after STOPPING=1 (systemd took the unit for running again), and
    a SIGHUP in the shutdown's grace ran a whole reload (RELOADING=1, READY=1, servers started)."""
    slow = tmp_path / "slow-bwrap"
    slow.write_text("#!/bin/sh\nsleep 2\nexit 1\n")  # the reload's sandbox probe takes a while
    slow.chmod(0o755)
    d = make_daemon(env={"NOTIFY_SOCKET": str(listener.path)}, wait=False)
    assert listener.recv() == "READY=1"
    (d.home / "config.toml").write_text(f'[sandbox]\nmode = "auto"\nbwrap = "{slow}"\n')
    d.proc.send_signal(signal.SIGHUP)
    listener.until(lambda m: m.startswith("RELOADING=1"))
    d.proc.send_signal(signal.SIGTERM)  # while the probe runs
    listener.until(lambda m: m == "STOPPING=1")
    d.proc.send_signal(signal.SIGHUP)  # in the shutdown, or after the loop closed: ignored, not fatal
    assert d.proc.wait(30) == 0  # was -1 at times: SIGHUP's default action once the loop had closed
    after = []
    while listener.pending():
        after.append(listener.recv())
    assert after == [], after


@pytest.mark.parametrize("text, fragment", [
    ('[adapters.gemini]\nmodel_args = ["-m", "{model}"]\n', "adapters.gemini: no such agent"),
    ('[adapters.claude]\nmodel_args = ["--model"]\n', "adapters.claude.model_args: ['--model'] never uses {model}"),
    ('[server]\nevent_loop = "uvloop"\n', None),  # valid here (uvloop is installed): starts
])
def test_settings_the_tools_refuse_fail_the_start_before_ready(make_daemon, listener, text, fragment):
    d = make_daemon(text, env={"NOTIFY_SOCKET": str(listener.path)}, wait=False)
    if fragment is None:
        assert listener.recv() == "READY=1"
        assert d.stop() == 0
        return
    assert d.proc.wait(15) == 2
    assert fragment in d.log() and "configuration error" in d.log()
    assert not listener.pending()  # systemd never heard READY=1
    assert not d.socket.exists()


def test_no_notify_socket_is_fine(daemon):
    """Outside systemd nothing is sent and nothing is logged about it."""
    with RawConn(daemon.socket) as conn:
        conn.hello()
        assert conn.status().pid == daemon.proc.pid
    assert daemon.stop() == 0
    assert "sd_notify" not in daemon.log()


def test_unreachable_notify_socket_warns_once_and_runs(make_daemon, tmp_path):
    d = make_daemon(env={"NOTIFY_SOCKET": str(tmp_path / "nobody-listens.sock"),
                         "WATCHDOG_USEC": "50000"})
    time.sleep(0.3)  # a few watchdog intervals that fail
    with d.client() as c:
        assert c.status().pid == d.proc.pid
    assert d.stop() == 0
    assert d.log().count("sd_notify disabled") == 1


def test_status_is_sent_only_when_it_changes(make_daemon, listener, workspace):
    """Connections come and go all the time; a slow manager must not get a datagram for each."""
    d = make_daemon(env={"NOTIFY_SOCKET": str(listener.path)})
    for _ in range(30):
        with RawConn(d.socket) as conn:
            conn.hello()
            conn.status()
    with d.client() as c:
        c.open_session(workspace)
        seen = listener.until(lambda m: "sessions=1" in m)
    seen += listener.until(lambda m: "sessions=0" in m)
    d.proc.send_signal(signal.SIGTERM)
    seen += listener.until(lambda m: m == "STOPPING=1")
    assert seen == ["READY=1",
                    "STATUS=sessions=0 pending_approvals=0 running_calls=0",
                    "STATUS=sessions=1 pending_approvals=0 running_calls=0",
                    "STATUS=sessions=0 pending_approvals=0 running_calls=0",
                    "STOPPING=1"]
    assert d.proc.wait(15) == 0


def fill_datagram_queue(path: Path) -> int:
    """Send to `path` until its queue is full (EAGAIN): a manager that stopped reading."""
    sender = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sender.connect(str(path))
    sender.setblocking(False)
    count = 0
    try:
        while True:
            sender.send(b"X_FILL=1")
            count += 1
            assert count < 100_000
    except BlockingIOError:
        return count
    finally:
        sender.close()


@pytest.mark.slow
def test_a_notify_socket_nobody_reads_does_not_stall_sessions_or_calls(make_daemon, listener, workspace):
    """Full before scvd starts and never read while 16 clients open sessions and call:
    every send would block the loop if sends could block. READY=1 is not lost: it
    arrives once the manager reads again."""
    filled = fill_datagram_queue(listener.path)
    d = make_daemon(env={"NOTIFY_SOCKET": str(listener.path)})
    (workspace / "notes.txt").write_text("hello\n")

    async def one_client(i: int) -> int:
        c = await AsyncClient.connect(d.socket, name=f"flood{i}")
        try:
            session = await c.open_session(workspace)
            ok = 0
            for _ in range(25):
                ok += (await c.call(session, "read", {"path": "notes.txt"})).ok
            return ok
        finally:
            await c.close()

    async def flood() -> list[int]:
        return await asyncio.gather(*(one_client(i) for i in range(16)))

    assert asyncio.run(flood()) == [25] * 16
    assert listener.pending()  # nothing was read meanwhile: the queue is still full
    seen = listener.until(lambda m: m == "READY=1")  # retried once there was room, not dropped
    assert len(seen) == filled + 1 and not [m for m in seen[:-1] if not m.startswith("X_FILL")]
    d.proc.send_signal(signal.SIGTERM)
    assert "STOPPING=1" in listener.until(lambda m: m == "STOPPING=1")
    assert d.proc.wait(15) == 0


def test_closing_sessions_in_the_shutdown_sends_no_status_after_stopping(make_daemon, listener, workspace):
    """Sessions closed by the stop changed the counts, and their STATUS= line went out after
    STOPPING=1 (a manager may take a status after the stop for a unit that runs on)."""
    d = make_daemon(env={"NOTIFY_SOCKET": str(listener.path)})
    clients = [d.client() for _ in range(4)]
    for c in clients:
        c.__enter__()
        c.open_session(workspace)
    listener.until(lambda m: "sessions=4" in m)
    time.sleep(1.2)  # past the notifier's interval: the next line may go at once
    d.proc.send_signal(signal.SIGTERM)
    listener.until(lambda m: m == "STOPPING=1")
    assert d.proc.wait(15) == 0
    after = []
    while listener.pending():
        after.append(listener.recv())
    assert after == [], after
    for c in clients:
        c.__exit__(None, None, None)


def test_a_stopping_queued_on_a_full_socket_goes_out_if_there_is_room_before_the_exit(make_wrapped, listener,
                                                                                     tmp_path):
    """The notifier was never closed: a STOPPING=1 that waited for room when the event loop closed
    vanished with the process, though the manager read its socket again before the exit."""
    hang = tmp_path / "after-loop"
    hang.touch()
    d = make_wrapped(env={"NOTIFY_SOCKET": str(listener.path), "HARNESS_HANG_AFTER_LOOP_WHILE": str(hang)})
    listener.until(lambda m: m == "READY=1")
    filled = fill_datagram_queue(listener.path)
    d.proc.send_signal(signal.SIGTERM)
    wait_until(lambda: (tmp_path / "after-loop.hit").exists(), what="the event loop to close")
    seen = [listener.recv() for _ in range(filled)]  # the manager reads again, too late for the loop
    hang.unlink()
    assert d.proc.wait(15) == 0
    while listener.pending():
        seen.append(listener.recv())
    assert [m for m in seen if not m.startswith(("X_FILL", "STATUS="))] == ["STOPPING=1"], seen
