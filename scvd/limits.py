"""How many connections and sessions scvd takes on, so one peer cannot starve the others.

Rules (each a pure function here; the server asks them before it takes on an fd):
- A connection holds at most `server.max_sessions_per_connection` sessions.
- One uid holds at most `server.max_connections_per_uid` connections.
- Connections and sessions (one fd each) share a budget: the soft RLIMIT_NOFILE,
  raised to the hard limit at start, minus the fds open at start, minus a reserve
  for tools' pipes and files and for accepting one more connection.
- Children get the soft limit scvd started with (`child_nofile()`), not the raised one:
  programs that use select() or loop over every possible fd break or crawl above 1024
  (systemd.exec's advice for LimitNOFILE=).
- HEADROOM connection slots are kept for peers scvd did not start: sessions and
  processes started by scvd (tools, agents) never take them, so an approver's
  `scvctl status` or `scvctl approvals` still connects when the rest is full.
  scvd cannot tell one of the user's own terminals from another before it has
  read a frame, so their own clients share what is left.
"""

from __future__ import annotations

import logging
import os
import resource
from dataclasses import dataclass
from functools import partial
from typing import Callable

log = logging.getLogger("scvd.server")

RESERVE_MIN = 64  # fds never given to connections or sessions, whatever the limit
HEADROOM = 16  # connection slots only peers that scvd did not start may take


@dataclass(frozen=True)
class FdBudget:
    """The fds that connections and sessions may hold together."""

    limit: int  # the soft RLIMIT_NOFILE in force
    base: int  # fds open before the first client (listener, lock, log, loop, ...)

    @property
    def reserve(self) -> int:
        """Kept for tools' pipes and files and for accepting (and refusing) one more connection."""
        return max(RESERVE_MIN, self.limit // 8)

    @property
    def size(self) -> int:
        return max(2 * HEADROOM, self.limit - self.base - self.reserve)

    def describe(self) -> str:
        return (f"{self.size} fds for connections and sessions (RLIMIT_NOFILE {self.limit}, "
                f"{self.base} open at start, {self.reserve} kept in reserve)")


def refuse_connection(budget: FdBudget, used: int, of_uid: int, max_per_uid: int, spawned: bool) -> str | None:
    """Why one more connection is refused, or None. `used`: connections and sessions held; `of_uid`: its uid's."""
    keep = HEADROOM if spawned else 0
    kept = f", less {HEADROOM} kept for clients that scvd did not start" if spawned else ""
    if of_uid >= max_per_uid - keep:
        return (f"your uid already holds {of_uid} connections to scvd (server.max_connections_per_uid = "
                f"{max_per_uid}{kept}); close clients you no longer use (`scvctl sessions` lists who holds "
                "sessions), or raise server.max_connections_per_uid")
    if used >= budget.size - keep:
        return (f"scvd is at its open-file budget: {used} connections and sessions hold {budget.describe()}"
                f"{kept}; close sessions or clients you no longer use, or raise LimitNOFILE= of the scvd unit")
    return None


def refuse_session(budget: FdBudget, used: int, held: int, max_per_connection: int) -> str | None:
    """Why this connection may not open one more session, or None."""
    if held >= max_per_connection:
        return (f"this connection already holds {held} sessions (server.max_sessions_per_connection); "
                "close one with session.close, or open another connection")
    if used >= budget.size - HEADROOM:
        return (f"scvd is at its open-file budget for sessions: {used} connections and sessions hold "
                f"{budget.describe()}, less {HEADROOM} connection slots kept for approvers; close sessions "
                "you no longer use, or raise LimitNOFILE= of the scvd unit")
    return None


class RefusalLog:
    """Logs refusals at most once per `interval` seconds, with how many were not logged: a flood stays one line."""

    def __init__(self, interval: float = 10.0) -> None:
        self.interval = interval
        self._next = 0.0
        self._quiet = 0

    def refused(self, what: str, now: float) -> None:
        if now < self._next:
            self._quiet += 1
            return
        more = f" ({self._quiet} more refused since the last line)" if self._quiet else ""
        log.warning("refused %s%s", what, more)
        self._next, self._quiet = now + self.interval, 0


# --- the OS side ------------------------------------------------------------------


def child_nofile(started: int, soft: int) -> int | None:
    """The soft RLIMIT_NOFILE a child is to get, or None to leave it what scvd has: what scvd
    started with (`started`), when scvd raised its soft limit (`soft`) since. The hard limit is
    the child's own (see _lower_soft)."""
    return started if started < soft else None


_child_limit: int | None = None  # set once scvd raised its soft limit


def restore_in_child() -> Callable[[], None] | None:
    """A preexec_fn that gives a child the soft limit scvd started with; None when there is
    nothing to restore (then Popen keeps its vfork, a preexec_fn forces a fork: ~2 ms a spawn)."""
    if _child_limit is None:
        return None
    return partial(_lower_soft, _child_limit)


def _lower_soft(soft: int) -> None:
    """In the child: the soft limit `soft`, under the hard limit it has now, not the one scvd started
    with (a `prlimit --pid` may have lowered scvd's since; raising it is refused, and every spawn failed)."""
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft if hard == resource.RLIM_INFINITY else min(soft, hard), hard))
    except (OSError, ValueError):  # a limit left high must not keep the tool from running at all
        pass


def raise_nofile() -> tuple[int, int]:
    """Raise the soft RLIMIT_NOFILE to the hard limit; (soft before, soft now). From then on,
    `restore_in_child()` gives children the soft limit from before."""
    global _child_limit
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard
    if hard == resource.RLIM_INFINITY:  # Linux refuses more than fs.nr_open
        target = _nr_open() or soft
    if target > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError) as exc:
            log.warning("cannot raise the open-file limit from %d to %d: %s", soft, target, exc)
            return soft, soft
    now = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    _child_limit = child_nofile(soft, now) or _child_limit  # a second start keeps the first's
    return soft, now


def measure() -> FdBudget:
    """The budget now: call it once the listener and the log are open."""
    return FdBudget(limit=resource.getrlimit(resource.RLIMIT_NOFILE)[0], base=open_fds())


def open_fds() -> int:
    try:
        return len(os.listdir("/proc/self/fd")) - 1  # less the directory's own fd
    except OSError:
        return 32  # no /proc: a guess at what a started daemon holds


def _nr_open() -> int | None:
    try:
        with open("/proc/sys/fs/nr_open") as f:
            return int(f.read())
    except (OSError, ValueError):
        return None
