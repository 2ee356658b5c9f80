"""Which of scvd's children a reaper must leave alone: the leaders whose runs wait for them, and
those still being started.

A leader is started on a pool thread (process.py): Popen returns only once the child has
exec'd, which never happens while its program, #! interpreter or directory sits on a
hung mount. No lock is held across Popen, so a start stuck for hours holds up neither the
event loop nor other starts nor any reaper. Instead, rule: a starting child writes its own
pid into a slot of a page shared across fork *before* it leaves scvd's session (its
preexec_fn, `Start.begin()`); reapers take only children outside scvd's session
(proctree.reap_zombies, process._Run._orphans), so one that sees a leader mid-start, in a
scan read before it asks `kept()`, finds its pid here. `Start.became()` moves the pid from
its slot to RUNNING under the same lock `kept()` reads both under.
"""

from __future__ import annotations

import errno
import mmap
import os
import signal
import threading
from typing import Callable

from .proctree import read_stat, signal_pid

SLOTS = 512  # one page of pids; starts run on a small pool, so far fewer are ever taken
PID_BYTES = 8

RUNNING: set[int] = set()  # pids a running call or service reaps itself through its Popen
_PAGE = mmap.mmap(-1, SLOTS * PID_BYTES)  # anonymous and MAP_SHARED: a forked child's write is seen here
_lock = threading.Lock()  # held for a few set and slot operations, never across a Popen
_free = list(range(SLOTS))
_taken: set[int] = set()


class Abandoned(Exception):
    """The start was abandoned (its call timed out or was cancelled) before it began."""


class Start:
    """One process start: its slot, filled by the child with its pid until Popen has returned; a
    context manager that ends it (frees the slot) on leaving."""

    def __init__(self) -> None:
        self.abandoned = False
        with _lock:
            if not _free:
                raise OSError(errno.EAGAIN, f"{SLOTS} process starts are under way already; try again later")
            self._slot: int | None = _free.pop()
            _taken.add(self._slot)

    def begin(self, then: Callable[[], None] | None) -> Callable[[], None]:
        """The preexec_fn of its Popen: the pid into the slot, a new session, then `then()`.
        Raises Abandoned once nobody waits for the start (a call that stopped while it queued)."""
        if self.abandoned or self._slot is None:
            raise Abandoned("the start was abandoned before it began")
        offset = self._slot * PID_BYTES

        def in_child() -> None:
            _PAGE[offset:offset + PID_BYTES] = os.getpid().to_bytes(PID_BYTES, "little")
            os.setsid()  # after the pid is known: a reaper takes none of scvd's own session
            if then is not None:
                then()

        return in_child

    def __enter__(self) -> Start:
        return self

    def __exit__(self, *exc: object) -> None:
        self.end()

    def became(self, pid: int) -> None:
        """Popen returned: the pid is a leader (RUNNING) from now on, no longer a slot's."""
        with _lock:
            RUNNING.add(pid)
            self._give_back()

    def end(self) -> None:
        """The start is over, whatever came of it; the slot is free again."""
        with _lock:
            self._give_back()

    def abandon(self) -> None:
        """Nobody waits for this start any more: it does not begin, and a child it made that is
        still starting (stuck in exec on a hung mount, a killable wait) gets SIGKILL, so that its
        Popen returns and nothing of it runs later."""
        self.abandoned = True
        with _lock:
            _kill_starting(self._pid())

    def _pid(self) -> int:
        if self._slot is None:
            return 0
        offset = self._slot * PID_BYTES
        return int.from_bytes(_PAGE[offset:offset + PID_BYTES], "little")

    def _give_back(self) -> None:  # under _lock
        if self._slot is not None:
            offset = self._slot * PID_BYTES
            _PAGE[offset:offset + PID_BYTES] = bytes(PID_BYTES)
            _taken.discard(self._slot)
            _free.append(self._slot)
            self._slot = None


def kept() -> set[int]:
    """The pids no reaper may take: leaders, and children being started. Ask it after the scan
    the reaper judges by was read (a child that left scvd's session by then is in its slot)."""
    with _lock:
        return RUNNING | _starting()


def kill_starting() -> None:
    """SIGKILL every child still being started: scvd exits at once, and the guardian does not
    know them yet (one stuck in exec would run its command once the mount came back)."""
    with _lock:
        for pid in _starting():
            _kill_starting(pid)


def _starting() -> set[int]:  # under _lock
    return {int.from_bytes(_PAGE[i * PID_BYTES:(i + 1) * PID_BYTES], "little") for i in _taken} - {0}


def _kill_starting(pid: int) -> None:  # under _lock: its slot holds it, so no reaper has taken it
    stat = read_stat(pid) if pid else None
    if stat is not None and stat.ppid == os.getpid() and stat.alive:  # not reaped by its Popen: still ours
        signal_pid(pid, signal.SIGKILL)


def forget(pid: int) -> None:
    """Its run has reaped it (or never will): no longer a leader."""
    with _lock:
        RUNNING.discard(pid)
