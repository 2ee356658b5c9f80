"""Talking to the systemd service manager: sd_notify messages and inherited (activated) sockets;
and whether a process runs as scvd.service (its cgroup), which decides where its environment is set.

Rule: read the manager's variables once at start, then remove them from
`os.environ`, so no child (a tool's process, an agent) inherits them and
notifies or listens in scvd's name. Outside systemd everything here is a no-op.

Rule: a send never blocks the event loop. Datagrams go out with MSG_DONTWAIT;
when the manager's socket is full, READY=1, RELOADING=1, STOPPING=1 and
WATCHDOG=1 wait in order for room (the loop is told when the socket becomes
writable), while STATUS= keeps only its newest text. STATUS= goes out at most
once per STATUS_INTERVAL and only when it changed. The protocol is one
`send()` of newline-separated assignments: sd_notify(3) in a few lines, so
no library stands in for it.
"""

from __future__ import annotations

import collections
import logging
import math
import os
import socket
import sys
import time
from typing import TYPE_CHECKING, Mapping

if TYPE_CHECKING:
    import asyncio

log = logging.getLogger("scvd.notify")

NOTIFY_VARS = ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID")
LISTEN_VARS = ("LISTEN_FDS", "LISTEN_PID", "LISTEN_FDNAMES")
MANAGER_VARS = NOTIFY_VARS + LISTEN_VARS
LISTEN_FDS_START = 3  # sd_listen_fds(3): the first passed fd
STATUS_INTERVAL = 1.0  # seconds between two STATUS= datagrams, at least
SENT, FULL, FAILED = "sent", "full", "failed"


def scrub_env() -> dict[str, str]:
    """Remove the manager's variables from os.environ; return the ones that were set."""
    return {name: os.environ.pop(name) for name in MANAGER_VARS if name in os.environ}


def _notify_address(value: str) -> str | None:
    """The AF_UNIX address of NOTIFY_SOCKET: a path, or '@name' for the abstract namespace."""
    if value.startswith("/"):
        return value
    if value.startswith("@") and len(value) > 1:
        return "\0" + value[1:]
    return None  # e.g. vsock: addresses, which a user manager never hands out


class Notifier:
    """sd_notify(3) messages for scvd's lifecycle; a no-op when NOTIFY_SOCKET is unset.

    Each method returns True when its datagram went out now. Failures other
    than a full socket are logged once (a warning), then quietly until a
    message gets through again, so a broken socket cannot flood the log.
    """

    def __init__(self, env: Mapping[str, str] | None = None, *,
                 status_interval: float = STATUS_INTERVAL) -> None:
        env = os.environ if env is None else env
        self.socket_name = env.get("NOTIFY_SOCKET") or None
        self.status_interval = status_interval
        self._watchdog_usec = _watchdog_usec(env)
        self._sock: socket.socket | None = None
        self._failing = False
        self._queue: collections.deque[str] = collections.deque()  # waiting for room, oldest first
        self._status_pending: str | None = None  # the newest STATUS= not sent yet
        self._status_sent: str | None = None
        self._status_at = -math.inf
        self._timer: asyncio.TimerHandle | None = None
        self._waiting: asyncio.AbstractEventLoop | None = None  # loop watching for room
        self._last = FAILED  # what the newest send attempt gave
        if self.socket_name:
            self._connect(self.socket_name)

    @property
    def enabled(self) -> bool:
        """True when a notify socket was named (even if sending to it fails)."""
        return self.socket_name is not None

    @property
    def queued(self) -> list[str]:
        """Messages waiting for room in a full socket, oldest first."""
        return list(self._queue)

    # --- the messages -----------------------------------------------------------------

    def ready(self) -> bool:
        self._status_sent = None  # the manager hears the current status after each READY=1
        return self._lifecycle("READY=1")

    def reloading(self) -> bool:
        """RELOADING=1 with the MONOTONIC_USEC that systemd requires next to it."""
        usec = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        return self._lifecycle(f"RELOADING=1\nMONOTONIC_USEC={usec}")

    def stopping(self) -> bool:
        return self._lifecycle("STOPPING=1")

    def watchdog(self) -> bool:
        if "WATCHDOG=1" in self._queue:
            return False  # one ping waiting for room says as much as two
        return self._lifecycle("WATCHDOG=1")

    def status(self, text: str) -> bool:
        """Say `text` as STATUS=, unless unchanged; at most once per status_interval."""
        # one datagram is newline-separated assignments: a newline would start a new one
        message = "STATUS=" + " ".join(text.splitlines())
        if self._queue and self._queue[-1].startswith("STATUS="):
            self._queue[-1] = message  # not out yet: the newest text takes its place
            return False
        self._status_pending = None if message == self._status_said() else message
        return self._send_status()

    def _status_said(self) -> str | None:
        """The STATUS= the manager will show once the queue is out: the newest queued, else the last sent.

        Against the last sent alone, a text equal to it was dropped while an older one still
        waited in the queue, and the manager kept showing that older one.
        """
        queued = [m for m in self._queue if m.startswith("STATUS=")]
        return queued[-1] if queued else self._status_sent

    def status_wait(self) -> float:
        """Seconds until a STATUS= line may go out (0 now): a caller renders its text no sooner."""
        return max(0.0, self._status_at + self.status_interval - time.monotonic())

    def send(self, *lines: str) -> bool:
        """Send the lines as one datagram now, or not at all; False if it did not go out."""
        return self._send("\n".join(lines)) == SENT

    def retry(self) -> None:
        """Send what waited for room (READY=1 said before any loop could watch the socket)."""
        self._flush()

    def watchdog_interval(self) -> float | None:
        """Seconds between WATCHDOG=1 pings (half of WATCHDOG_USEC), or None when not asked."""
        if self._watchdog_usec is None or self.socket_name is None:
            return None
        return self._watchdog_usec / 2 / 1_000_000

    # --- delivery ---------------------------------------------------------------------

    def _lifecycle(self, message: str) -> bool:
        """Deliver `message` now or, when the socket is full, as soon as it has room."""
        if self.socket_name is None:
            return False
        if self._status_pending is not None:  # an older status goes first, whatever the interval
            self._queue.append(self._status_pending)
            self._status_pending = None
        self._queue.append(message)
        before = len(self._queue)
        sent = self._flush()
        return sent >= before and self._last == SENT

    def _flush(self) -> int:
        """Send what waits, in order; stop at a full socket and wait for room. Returns how many went."""
        if self._waiting is not None:
            return 0  # the loop calls _on_room when there is room
        done = 0
        while self._queue:
            self._last = self._send(self._queue[0])
            if self._last == FULL:
                self._wait_for_room()
                return done
            self._queue.popleft()  # sent, or failed for a reason waiting cannot fix (logged)
            done += 1
        self._send_status()
        return done

    def _send_status(self) -> bool:
        message = self._status_pending
        if message is None or self._queue or self._waiting is not None:
            return False
        wait = self._status_at + self.status_interval - time.monotonic()
        if wait > 0:
            self._call_later(wait)
            return False
        result = self._send(message)
        if result == FULL:
            self._wait_for_room()
            return False
        self._status_pending = None
        return result == SENT

    def _send(self, message: str) -> str:
        if self.socket_name is None:
            return FAILED
        if self._sock is None:
            self._connect(self.socket_name)  # the manager may have come back
            if self._sock is None:
                return FAILED
        try:
            self._sock.send(message.encode("utf-8", "replace"), socket.MSG_DONTWAIT)
        except BlockingIOError:
            return FULL
        except OSError as exc:
            self._disconnect()  # reconnect next time: the manager may rebind its socket
            self._fail(f"sending {message.split('=')[0]} to {self.socket_name} failed: {exc}")
            return FAILED
        if message.startswith("STATUS="):
            self._status_sent, self._status_at = message, time.monotonic()
        if self._failing:
            log.info("sd_notify works again")
            self._failing = False
        return SENT

    # --- waiting, on the running event loop -----------------------------------------------

    def _wait_for_room(self) -> None:
        """Have the loop call back when the socket is writable; without a loop, the next call retries."""
        loop = _running_loop()
        if loop is None or self._sock is None or self._waiting is not None:
            return
        loop.add_writer(self._sock.fileno(), self._on_room)
        self._waiting = loop

    def _on_room(self) -> None:
        self._stop_waiting()
        self._flush()

    def _stop_waiting(self) -> None:
        if self._waiting is not None:
            if self._sock is not None and not self._waiting.is_closed():
                self._waiting.remove_writer(self._sock.fileno())
            self._waiting = None

    def _call_later(self, delay: float) -> None:
        loop = _running_loop()
        if loop is not None and self._timer is None:
            self._timer = loop.call_later(delay, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self._send_status()

    # --- the socket ---------------------------------------------------------------------

    def _connect(self, value: str) -> None:
        address = _notify_address(value)
        if address is None:
            self._fail(f"NOTIFY_SOCKET={value!r} is not an AF_UNIX address")
            return
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_NONBLOCK | socket.SOCK_CLOEXEC)
        try:
            sock.connect(address)
        except OSError as exc:
            sock.close()
            self._fail(f"cannot connect to NOTIFY_SOCKET={value}: {exc}")
            return
        self._sock = sock

    def _fail(self, reason: str) -> None:
        if not self._failing:
            log.warning("sd_notify disabled until it works again: %s", reason)
        else:
            log.debug("sd_notify failed again: %s", reason)
        self._failing = True

    def _disconnect(self) -> None:
        self._stop_waiting()
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def close(self) -> None:
        """Stop waiting; what a full socket still held is tried once more, then dropped."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._stop_waiting()
        while self._queue and self._send(self._queue[0]) != FULL:
            self._queue.popleft()
        if self._queue:
            log.debug("sd_notify: dropped at close (socket full): %s", ", ".join(self._queue))
            self._queue.clear()
        self._disconnect()

    def __enter__(self) -> Notifier:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _running_loop() -> asyncio.AbstractEventLoop | None:
    # READY=1 may go out before asyncio is imported (cli.run): then no loop runs
    asyncio = sys.modules.get("asyncio")
    if asyncio is None:
        return None
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _watchdog_usec(env: Mapping[str, str]) -> int | None:
    """WATCHDOG_USEC when it is meant for this process (WATCHDOG_PID absent or ours)."""
    pid = env.get("WATCHDOG_PID")
    if pid and pid != str(os.getpid()):
        return None
    try:
        usec = int(env.get("WATCHDOG_USEC", ""))
    except ValueError:
        return None
    return usec if usec > 0 else None


def inherited_sockets(env: Mapping[str, str] | None = None) -> list[socket.socket]:
    """The sockets systemd passed (sd_listen_fds): fds from 3, marked close-on-exec.

    LISTEN_* are removed from os.environ whether or not they were meant for us,
    as sd_listen_fds(unset_environment=1) does. Reads `env` when given (e.g.
    what scrub_env() returned), else os.environ.
    """
    env = dict(os.environ if env is None else env)
    for name in LISTEN_VARS:
        os.environ.pop(name, None)
    count = _listen_count(env)
    names = env.get("LISTEN_FDNAMES", "").split(":")
    sockets = []
    for i in range(count):
        fd = LISTEN_FDS_START + i
        name = names[i] if i < len(names) else "unknown"
        try:
            os.set_inheritable(fd, False)  # FD_CLOEXEC: children never get the listener
            sockets.append(socket.socket(fileno=fd))
        except OSError as exc:
            log.warning("ignoring inherited fd %d (%s): %s", fd, name, exc)
    if sockets:
        log.info("socket activation: %d inherited socket(s)", len(sockets))
    return sockets


def _listen_count(env: Mapping[str, str]) -> int:
    if env.get("LISTEN_PID") != str(os.getpid()):
        return 0  # absent, or meant for a parent that exec'd us without clearing it
    try:
        count = int(env.get("LISTEN_FDS", "0"))
    except ValueError:
        log.warning("ignoring LISTEN_FDS=%r: not a number", env.get("LISTEN_FDS"))
        return 0
    return max(count, 0)


SERVICE_UNIT = "scvd.service"  # the user unit `scvctl service install` writes


def runs_as_unit(pid: int | str = "self") -> bool | None:
    """Whether process `pid` runs as scvd.service, as its cgroup says: then its environment (PATH) is
    the unit's, which `systemctl --user edit scvd` changes, not a shell's. None when unreadable."""
    try:
        with open(f"/proc/{pid}/cgroup", "rb") as f:
            return in_unit(f.read().decode(errors="replace"))
    except OSError:
        return None


def environment_advice(change: str, setting: str, shell: str, systemd: bool | None, what: str = "environment") -> str:
    """How to `change` scvd's environment (`add <folder> to scvd's PATH`): in scvd.service's unit when it
    runs as one (`setting`, its line: `Environment=PATH=...`), else from a shell (`shell`: `whose PATH has
    <folder>`) that starts it again; `systemd` None: not known, both ways."""
    if systemd:
        return f"{change} (systemctl --user edit scvd: {setting}), then systemctl --user restart scvd"
    if systemd is False:
        return (f"scvd runs outside systemd, with the {what} of the shell that started it: stop it and start "
                f"scvd run again from a shell {shell}")
    return (f"{change} (under systemd: systemctl --user edit scvd: {setting}; else in the shell that "
            "runs scvd run), then restart scvd")


def in_unit(cgroup: str) -> bool:
    """Whether /proc/PID/cgroup's text puts it in scvd.service (`0::/user.slice/.../scvd.service` on
    cgroup v2, a `name=systemd` line on v1); a shell's `scvd run` is in its terminal's scope."""
    return systemd_cgroup(cgroup).rstrip("/").rsplit("/", 1)[-1] == SERVICE_UNIT


def systemd_cgroup(cgroup: str) -> str:
    """The cgroup systemd placed a process in, from /proc/PID/cgroup's text: the `name=systemd` line's
    path (cgroup v1, and hybrid, where systemd tracks its units there), else the v2 `0::` line's; ""
    for neither. approvals.py's cgroup rule reads it too."""
    paths = {}
    for line in cgroup.splitlines():
        fields = line.split(":", 2)
        if len(fields) == 3:
            paths[fields[1]] = fields[2]
    return paths.get("name=systemd", paths.get("", ""))
