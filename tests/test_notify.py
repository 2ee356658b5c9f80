"""sd_notify over a real datagram socket, and socket activation with real inherited fds."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Iterator

import pytest

import scvd
from scvd import notify
from scvd.notify import Notifier, inherited_sockets, scrub_env

REPO = Path(scvd.__file__).resolve().parent.parent


@pytest.fixture
def listener(tmp_path):
    """A bound AF_UNIX datagram socket standing in for systemd's notify socket."""
    path = tmp_path / "notify.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(path))
    sock.settimeout(5)
    yield sock, str(path)
    sock.close()


def received(sock: socket.socket) -> str:
    return sock.recv(65536).decode()


def assert_no_more(sock: socket.socket) -> None:
    sock.setblocking(False)
    with pytest.raises(BlockingIOError):
        sock.recv(65536)
    sock.settimeout(5)


def test_each_message_is_one_datagram_in_order(listener):
    sock, path = listener
    with Notifier({"NOTIFY_SOCKET": path}) as n:
        assert n.enabled
        assert n.ready() and n.status("sessions=2 pending=1") and n.watchdog()
        before = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        assert n.reloading()
        after = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        assert n.ready() and n.stopping()
    assert received(sock) == "READY=1"
    assert received(sock) == "STATUS=sessions=2 pending=1"
    assert received(sock) == "WATCHDOG=1"
    reload_lines = received(sock).split("\n")
    assert reload_lines[0] == "RELOADING=1"
    key, _, value = reload_lines[1].partition("=")
    assert key == "MONOTONIC_USEC" and before <= int(value) <= after
    assert len(reload_lines) == 2
    assert received(sock) == "READY=1"
    assert received(sock) == "STOPPING=1"
    assert_no_more(sock)


def test_abstract_namespace_address():
    name = f"scvd-test-{uuid.uuid4().hex}"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind("\0" + name)
    sock.settimeout(5)
    try:
        with Notifier({"NOTIFY_SOCKET": "@" + name}) as n:
            assert n.ready()
        assert received(sock) == "READY=1"
    finally:
        sock.close()


def test_status_stays_one_assignment_and_utf8(listener):
    sock, path = listener
    with Notifier({"NOTIFY_SOCKET": path}) as n:
        assert n.status("serving /home/zoë\nREADY=1")
    raw = sock.recv(65536)
    assert raw == "STATUS=serving /home/zoë READY=1".encode()


def test_no_notify_socket_is_a_quiet_no_op(caplog):
    n = Notifier({})
    assert not n.enabled
    with caplog.at_level(logging.DEBUG, logger="scvd.notify"):
        assert n.ready() is False
        assert n.watchdog() is False
    assert n.watchdog_interval() is None
    assert caplog.records == []


def test_failure_is_logged_once_then_recovery(tmp_path, caplog):
    path = str(tmp_path / "gone.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    n = Notifier({"NOTIFY_SOCKET": path})
    sock.close()
    os.unlink(path)  # the manager went away after we connected
    with n, caplog.at_level(logging.INFO, logger="scvd.notify"):
        assert [n.watchdog() for _ in range(3)] == [False, False, False]
        warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 1 and path in warnings[0].getMessage()
        back = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        back.bind(path)
        back.settimeout(5)
        try:
            assert n.watchdog()
            assert received(back) == "WATCHDOG=1"
        finally:
            back.close()
    assert any("works again" in r.getMessage() for r in caplog.records)


def test_unusable_address_is_reported_once(caplog):
    with caplog.at_level(logging.WARNING, logger="scvd.notify"):
        n = Notifier({"NOTIFY_SOCKET": "vsock:2:1234"})
        assert n.ready() is False and n.ready() is False
    assert len(caplog.records) == 1
    assert "not an AF_UNIX address" in caplog.records[0].getMessage()


@pytest.mark.parametrize(
    "env, expected",
    [
        ({"WATCHDOG_USEC": "30000000"}, 15.0),
        ({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": str(os.getpid())}, 15.0),
        ({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "1"}, None),
        ({"WATCHDOG_USEC": "soon"}, None),
        ({"WATCHDOG_USEC": "0"}, None),
        ({}, None),
    ],
)
def test_watchdog_interval(listener, env, expected):
    _, path = listener
    with Notifier({"NOTIFY_SOCKET": path, **env}) as n:
        assert n.watchdog_interval() == expected


def test_scrub_env_hides_manager_variables_from_children(listener, monkeypatch):
    sock, path = listener
    manager = {
        "NOTIFY_SOCKET": path,
        "LISTEN_FDS": "1",
        "LISTEN_PID": "1",
        "LISTEN_FDNAMES": "scvd.socket",
        "WATCHDOG_USEC": "30000000",
        "WATCHDOG_PID": str(os.getpid()),
    }
    for name, value in manager.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("SCVD_TEST_KEEP", "yes")
    taken = scrub_env()
    assert taken == manager
    child = subprocess.run(["env"], capture_output=True, text=True, check=True).stdout
    names = {line.split("=", 1)[0] for line in child.splitlines()}
    assert names.isdisjoint(manager) and "SCVD_TEST_KEEP" in names
    with Notifier(taken) as n:  # what was read still reaches the manager
        assert n.watchdog_interval() == 15.0
        assert n.ready() and received(sock) == "READY=1"


# Socket activation. The child script runs inherited_sockets() and reports what it got,
# then serves one connection so the test knows the fd is the very socket it bound.
CHILD = r"""
import json, os, fcntl, socket
from scvd.notify import inherited_sockets
socks = inherited_sockets()
report = {
    "count": len(socks),
    "cloexec": [bool(fcntl.fcntl(s.fileno(), fcntl.F_GETFD) & fcntl.FD_CLOEXEC) for s in socks],
    "fds": [s.fileno() for s in socks],
    "names": [s.getsockname() for s in socks],
    "left": sorted(k for k in os.environ if k.startswith("LISTEN_")),
}
print(json.dumps(report), flush=True)
for s in socks:
    conn, _ = s.accept()
    conn.sendall(s.getsockname().encode())
    conn.close()
"""

# The wrapper puts each passed fd at 3, 4, ... and sets LISTEN_PID to its own pid,
# which exec keeps: exactly what the service manager does for its child.
WRAPPER = r"""
import os, sys
fds = [int(x) for x in sys.argv[1].split(",") if x]
tmp = [os.dup(fd) for fd in fds]  # out of the way before dup2 onto 3, 4, ...
for i, fd in enumerate(tmp):
    os.dup2(fd, 3 + i)
    os.set_inheritable(3 + i, True)  # dup2(3, 3) is a no-op that keeps dup()'s CLOEXEC
os.environ["LISTEN_FDS"] = str(len(fds))
if sys.argv[2] == "own":
    os.environ["LISTEN_PID"] = str(os.getpid())
else:
    os.environ["LISTEN_PID"] = sys.argv[2]
os.execv(sys.executable, [sys.executable, "-c", sys.argv[3]])
"""


def child_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LISTEN_")}
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env.update(extra)
    return env


def listening_socket(path: Path) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(path))
    s.listen(4)
    return s


@contextlib.contextmanager
def activate(fds: list[int], listen_pid: str = "own", **env: str) -> Iterator[subprocess.Popen]:
    arg = ",".join(str(fd) for fd in fds)
    proc = subprocess.Popen(
        [sys.executable, "-c", WRAPPER, arg, listen_pid, CHILD],
        pass_fds=fds,
        env=child_env(**env),
        stdout=subprocess.PIPE,
        text=True,
    )
    with reaped(proc):
        yield proc


@contextlib.contextmanager
def reaped(proc: subprocess.Popen) -> Iterator[subprocess.Popen]:
    """Kill the child if a failed assertion left it waiting in accept()."""
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        for pipe in (proc.stdout, proc.stderr):
            if pipe:
                pipe.close()


def ask(path: Path) -> str:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as c:
        c.settimeout(10)
        c.connect(str(path))
        return c.recv(4096).decode()


def test_inherited_socket_is_the_bound_one(tmp_path):
    path = tmp_path / "scvd.sock"
    with listening_socket(path) as lsock:
        with activate([lsock.fileno()], LISTEN_FDNAMES="scvd.socket") as proc:
            report = json.loads(proc.stdout.readline())
            assert report == {
                "count": 1,
                "cloexec": [True],
                "fds": [3],
                "names": [str(path)],
                "left": [],
            }
            assert ask(path) == str(path)
            assert proc.wait(10) == 0


def test_two_sockets_and_a_non_socket_fd(tmp_path):
    a, b = tmp_path / "a.sock", tmp_path / "b.sock"
    r, w = os.pipe()
    try:
        with listening_socket(a) as sa, listening_socket(b) as sb:
            with activate([sa.fileno(), r, sb.fileno()]) as proc:
                report = json.loads(proc.stdout.readline())
                assert report["count"] == 2 and report["fds"] == [3, 5]
                assert report["names"] == [str(a), str(b)] and report["cloexec"] == [True, True]
                assert ask(a) == str(a) and ask(b) == str(b)
                assert proc.wait(10) == 0
    finally:
        os.close(r)
        os.close(w)


def test_listen_pid_of_another_process_is_ignored_and_unset(tmp_path):
    path = tmp_path / "scvd.sock"
    with listening_socket(path) as lsock:
        with activate([lsock.fileno()], listen_pid="1") as proc:
            report = json.loads(proc.stdout.readline())
            assert report["count"] == 0 and report["left"] == []
            assert proc.wait(10) == 0


def test_without_listen_variables_nothing_is_inherited(monkeypatch):
    for name in notify.LISTEN_VARS:
        monkeypatch.delenv(name, raising=False)
    assert inherited_sockets() == []


@pytest.mark.skipif(not shutil.which("systemd-socket-activate"), reason="needs systemd-socket-activate")
def test_systemd_socket_activate(tmp_path):
    """systemd's own activation tool sets LISTEN_* for the child it starts on first connection."""
    path = tmp_path / "scvd.sock"
    proc = subprocess.Popen(
        ["systemd-socket-activate", "-l", str(path), "--fdname=scvd.socket",
         sys.executable, "-c", CHILD],
        env=child_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    with reaped(proc):
        deadline = time.monotonic() + 10
        while not path.exists():
            assert proc.poll() is None, proc.stderr.read()
            assert time.monotonic() < deadline, "systemd-socket-activate never bound the socket"
            time.sleep(0.02)
        assert ask(path) == str(path)
        report = json.loads(proc.stdout.readline())
        assert report["count"] == 1 and report["fds"] == [3] and report["cloexec"] == [True]
        assert report["left"] == []
        assert proc.wait(10) == 0


# A manager that stops reading: sends never block, lifecycle messages wait for room in
# order, STATUS= keeps only its newest text. The socket is full for real (its queue of
# datagrams is bounded by net.unix.max_dgram_qlen), never faked.


def fill(n: Notifier) -> int:
    """Send until the listener's queue is full; return how many datagrams went in."""
    count = 0
    while n.send(f"X_FILL={count}"):
        count += 1
        assert count < 100_000, "the datagram queue never filled"
    return count


def drain(sock: socket.socket) -> list[str]:
    out = []
    sock.setblocking(False)
    try:
        while True:
            out.append(sock.recv(65536).decode())
    except BlockingIOError:
        pass
    finally:
        sock.settimeout(5)
    return out


async def recv_until(sock: socket.socket, predicate, timeout: float = 10.0) -> list[str]:
    """Datagrams as the loop lets the notifier send them, until one satisfies `predicate`."""
    seen: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        seen += drain(sock)
        if any(predicate(m) for m in seen):
            return seen
        await asyncio.sleep(0.01)
    raise AssertionError(f"no matching message in {timeout} s: {seen}")


def test_full_socket_queues_lifecycle_messages_in_order(listener, run_loop):
    sock, path = listener

    async def main() -> list[str]:
        with Notifier({"NOTIFY_SOCKET": path}, status_interval=0.05) as n:
            filled = fill(n)
            assert n.status("one") is False and n.status("two") is False  # newest only
            assert n.reloading() is False and n.ready() is False
            assert n.watchdog() is False and n.watchdog() is False  # one ping waits, not two
            assert n.stopping() is False
            assert [m.split("=")[0] for m in n.queued] == ["STATUS", "RELOADING", "READY", "WATCHDOG", "STOPPING"]
            n.status("three")  # after the lifecycle messages, under the interval
            await asyncio.sleep(0.1)  # nothing reads: nothing moves, nothing blocks
            assert len(n.queued) == 5
            seen = await recv_until(sock, lambda m: m == "STATUS=three")
            return seen[filled:]

    rest = run_loop(main())
    assert rest[0] == "STATUS=two"
    assert rest[1].startswith("RELOADING=1\nMONOTONIC_USEC=")
    assert rest[2:] == ["READY=1", "WATCHDOG=1", "STOPPING=1", "STATUS=three"]


def test_full_socket_keeps_the_newest_status(listener, run_loop):
    sock, path = listener

    async def main() -> list[str]:
        with Notifier({"NOTIFY_SOCKET": path}, status_interval=0.05) as n:
            filled = fill(n)
            for i in range(50):
                assert n.status(f"running_calls={i}") is False
            seen = await recv_until(sock, lambda m: m == "STATUS=running_calls=49")
            await asyncio.sleep(0.2)
            return (seen + drain(sock))[filled:]

    assert run_loop(main()) == ["STATUS=running_calls=49"]


def test_status_is_coalesced_and_sent_only_when_changed(listener, run_loop):
    sock, path = listener

    async def main() -> list[str]:
        with Notifier({"NOTIFY_SOCKET": path}, status_interval=0.3) as n:
            assert n.status("a") is True  # the first goes out at once
            assert n.status("a") is False  # unchanged: nothing to say
            assert n.status("b") is False and n.status("c") is False  # within the interval
            seen = await recv_until(sock, lambda m: m == "STATUS=c")
            n.status("c")
            await asyncio.sleep(0.4)
            return seen + drain(sock)

    assert run_loop(main()) == ["STATUS=a", "STATUS=c"]


def test_a_status_equal_to_the_last_sent_is_not_dropped_while_an_older_one_is_queued(listener, run_loop):
    """STATUS=b out, "a" queued behind a full socket, then "b" again: "b" was taken for unchanged
    (it equals the last sent) and dropped, and the manager showed "a" once the queue was out."""
    sock, path = listener

    async def main() -> list[str]:
        with Notifier({"NOTIFY_SOCKET": path}, status_interval=0.05) as n:
            assert n.status("b") and received(sock) == "STATUS=b"
            assert n.status("a") is False  # within the interval: pending
            filled = fill(n)
            assert n.watchdog() is False  # the pending "a" goes into the queue ahead of it
            assert n.queued == ["STATUS=a", "WATCHDOG=1"]
            n.status("b")
            seen = await recv_until(sock, lambda m: m == "STATUS=b")  # the manager reads again
            return seen[filled:]

    assert run_loop(main()) == ["STATUS=a", "WATCHDOG=1", "STATUS=b"]


def test_status_before_a_lifecycle_message_is_not_held_back(listener, run_loop):
    """A status set just before READY=1 reaches the manager before it, whatever the interval."""
    sock, path = listener

    async def main() -> None:
        with Notifier({"NOTIFY_SOCKET": path}, status_interval=60) as n:
            assert n.status("first")
            assert n.status("reload failed: x") is False
            assert n.ready()

    run_loop(main())
    assert drain(sock) == ["STATUS=first", "STATUS=reload failed: x", "READY=1"]


@pytest.mark.parametrize("cgroup, unit", [
    ("0::/user.slice/user-1000.slice/user@1000.service/app.slice/scvd.service\n", True),  # cgroup v2
    ("12:pids:/user.slice\n1:name=systemd:/user.slice/user-1000.slice/user@1000.service/scvd.service\n0::/\n", True),
    # `scvd run` in a terminal: the terminal's scope, whose PATH is the shell's
    ("0::/user.slice/user-1000.slice/user@1000.service/app.slice/app-org.gnome.Terminal.slice/vte-spawn-1.scope\n",
     False),
    ("0::/user.slice/user-1000.slice/user@1000.service/app.slice/my-scvd.service\n", False),  # not the unit install writes
    ("0::/\n", False),  # a container without systemd
])
def test_whether_a_process_runs_as_scvd_service_comes_from_its_cgroup(cgroup, unit):
    """Where scvd's PATH is set, for the advice to add a folder to it: scvd.service's unit, or the shell
    that ran `scvd run` (where `systemctl --user edit scvd` changes nothing)."""
    assert notify.in_unit(cgroup) is unit


def test_this_process_is_not_scvd_service():
    assert notify.runs_as_unit() is False
    assert notify.runs_as_unit(2**22 + 1) is None  # no such process: not known
