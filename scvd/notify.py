"""Talking to the systemd service manager: sd_notify messages and inherited (activated) sockets.

Rule: read the manager's variables once at start, then remove them from
`os.environ`, so no child (a tool's process, an agent) inherits them and
notifies or listens in scvd's name. Outside systemd everything here is a no-op.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from typing import Mapping

from sdnotify import SystemdNotifier

log = logging.getLogger("scvd.notify")

NOTIFY_VARS = ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID")
LISTEN_VARS = ("LISTEN_FDS", "LISTEN_PID", "LISTEN_FDNAMES")
MANAGER_VARS = NOTIFY_VARS + LISTEN_VARS
LISTEN_FDS_START = 3  # sd_listen_fds(3): the first passed fd
SEND_TIMEOUT = 0.25  # sends block the event loop: a stuck manager may stall it this long, no more


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


class _Transport(SystemdNotifier):
    """sdnotify's notifier, connected to an address we read ourselves.

    sdnotify reads NOTIFY_SOCKET from os.environ in its constructor, which
    scrub_env() may already have emptied, hides every error unless debug=True,
    and encodes latin-1 (a STATUS= naming a non-latin-1 path would raise);
    so connect here, send UTF-8, and let errors reach Notifier.
    """

    def __init__(self, address: str) -> None:
        self.debug = True
        self.socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            self.socket.settimeout(SEND_TIMEOUT)
            self.socket.connect(address)
        except OSError:
            self.socket.close()
            raise

    def notify(self, state: str) -> None:
        self.socket.sendall(state.encode("utf-8", "replace"))


class Notifier:
    """sd_notify(3) messages for scvd's lifecycle; a no-op when NOTIFY_SOCKET is unset.

    Failures are logged once (a warning), then quietly until a message gets
    through again, so a broken socket cannot flood the log with watchdog pings.
    """

    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        env = os.environ if env is None else env
        self.socket_name = env.get("NOTIFY_SOCKET") or None
        self._watchdog_usec = _watchdog_usec(env)
        self._transport: _Transport | None = None
        self._failing = False
        if self.socket_name:
            self._connect(self.socket_name)

    @property
    def enabled(self) -> bool:
        """True when a notify socket was named (even if sending to it fails)."""
        return self.socket_name is not None

    def _connect(self, value: str) -> None:
        address = _notify_address(value)
        if address is None:
            self._fail(f"NOTIFY_SOCKET={value!r} is not an AF_UNIX address")
            return
        try:
            self._transport = _Transport(address)
        except OSError as exc:
            self._fail(f"cannot connect to NOTIFY_SOCKET={value}: {exc}")

    def _fail(self, reason: str) -> None:
        if not self._failing:
            log.warning("sd_notify disabled until it works again: %s", reason)
        else:
            log.debug("sd_notify failed again: %s", reason)
        self._failing = True

    def send(self, *lines: str) -> bool:
        """Send the lines as one datagram; False if it did not reach the manager."""
        if self.socket_name is None:
            return False
        if self._transport is None:
            self._connect(self.socket_name)  # the manager may have come back
            if self._transport is None:
                return False
        try:
            self._transport.notify("\n".join(lines))
        except OSError as exc:
            self.close()  # reconnect next time: the manager may rebind its socket
            self._fail(f"sending {lines[0].split('=')[0]} to {self.socket_name} failed: {exc}")
            return False
        if self._failing:
            log.info("sd_notify works again")
            self._failing = False
        return True

    def ready(self) -> bool:
        return self.send("READY=1")

    def status(self, text: str) -> bool:
        # one datagram is newline-separated assignments: a newline would start a new one
        return self.send("STATUS=" + " ".join(text.splitlines()))

    def reloading(self) -> bool:
        """RELOADING=1 with the MONOTONIC_USEC that systemd requires next to it."""
        usec = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        return self.send("RELOADING=1", f"MONOTONIC_USEC={usec}")

    def stopping(self) -> bool:
        return self.send("STOPPING=1")

    def watchdog(self) -> bool:
        return self.send("WATCHDOG=1")

    def watchdog_interval(self) -> float | None:
        """Seconds between WATCHDOG=1 pings (half of WATCHDOG_USEC), or None when not asked."""
        if self._watchdog_usec is None or self.socket_name is None:
            return None
        return self._watchdog_usec / 2 / 1_000_000

    def close(self) -> None:
        if self._transport is not None:
            self._transport.socket.close()
            self._transport = None

    def __enter__(self) -> Notifier:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


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
