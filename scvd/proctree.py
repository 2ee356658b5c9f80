"""Processes as /proc shows them, and the guarded ways scvd signals and reaps them.

Pure readers of /proc plus a few thin OS calls. Guards: process group or pid 0
and 1, and scvd's own group and pid, are never signalled; only a specific pid
is ever waited for (never waitpid(-1), which would steal other waiters' children).
"""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass
from typing import Container, Iterable, Mapping

PR_SET_CHILD_SUBREAPER = 36
PR_GET_CHILD_SUBREAPER = 37


@dataclass(frozen=True)
class ProcStat:
    """The fields of /proc/PID/stat the runner needs."""

    pid: int
    state: str
    ppid: int
    pgid: int
    sid: int
    start: int  # clock ticks after boot; tells a reused pid apart

    @property
    def alive(self) -> bool:
        return self.state not in ("Z", "X")


def read_stat(pid: int, proc: str = "/proc") -> ProcStat | None:
    """Parse /proc/PID/stat (the one parser of it), or None if the process is gone."""
    try:
        with open(f"{proc}/{pid}/stat", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    rest = raw[raw.rfind(b")") + 2:].split()  # comm may hold spaces and parentheses
    return ProcStat(pid, rest[0].decode(), int(rest[1]), int(rest[2]), int(rest[3]), int(rest[19]))


def scan_processes() -> dict[int, ProcStat]:
    """Every process visible in /proc, by pid."""
    found: dict[int, ProcStat] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            stat = read_stat(int(name))
            if stat is not None:
                found[stat.pid] = stat
    return found


def descendants(procs: Mapping[int, ProcStat], roots: Iterable[int]) -> set[int]:
    """Pids below `roots` in the parent tree of `procs` (roots excluded)."""
    children: dict[int, list[int]] = {}
    for p in procs.values():
        children.setdefault(p.ppid, []).append(p.pid)
    found: set[int] = set()
    todo = list(roots)
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def parents_first(procs: Mapping[int, ProcStat], pids: Iterable[int]) -> list[int]:
    """`pids` ordered by their depth in the parent tree of `procs`, shallowest first."""
    def depth(pid: int) -> int:
        n = 0
        while pid in procs and n < len(procs):  # bounded: a snapshot read over time may hold a stale loop
            pid, n = procs[pid].ppid, n + 1
        return n
    return sorted(pids, key=depth)


# --- signalling (guarded) ------------------------------------------------------


def _may_signal_group(pgid: int) -> bool:
    return pgid > 1 and pgid != os.getpgrp()


def _may_signal_pid(pid: int) -> bool:
    return pid > 1 and pid != os.getpid()


def signal_group(pgid: int, sig: int) -> bool:
    """killpg, refusing group 0, 1 and scvd's own; False when the group is gone."""
    if not _may_signal_group(pgid):
        return False
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def signal_pid(pid: int, sig: int) -> None:
    """kill, refusing pid 0, 1 and scvd itself; a process already gone is fine."""
    if _may_signal_pid(pid):
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


# --- subreaper and reaping ------------------------------------------------------


def set_child_subreaper(on: bool = True) -> bool:
    """Make orphaned descendants scvd's children (PR_SET_CHILD_SUBREAPER). False if refused."""
    return _prctl(PR_SET_CHILD_SUBREAPER, int(on)) == 0


def is_child_subreaper() -> bool:
    """Whether orphans of this process's descendants come back to it."""
    value = ctypes.c_int(0)
    return _prctl(PR_GET_CHILD_SUBREAPER, ctypes.addressof(value)) == 0 and value.value == 1


def _prctl(option: int, arg: int) -> int:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(option, ctypes.c_ulong(arg), 0, 0, 0)
    except (OSError, AttributeError):  # not Linux
        return -1


def reap_zombies(procs: Mapping[int, ProcStat] | None = None, *, keep: Container[int] = ()) -> list[int]:
    """Reap zombie children except `keep` (pids someone else waits for); returns their pids.

    Only zombies outside scvd's own session are touched: those descend from a
    runner child (which always leads a new session), never from a subprocess
    something else in scvd started.
    """
    procs = scan_processes() if procs is None else procs
    me, my_sid = os.getpid(), os.getsid(0)
    reaped = []
    for p in procs.values():
        if p.ppid == me and not p.alive and p.sid != my_sid and p.pid not in keep:
            if reap(p.pid):
                reaped.append(p.pid)
    return reaped


def reap(pid: int) -> bool:
    """waitpid(pid, WNOHANG): True if `pid` was a zombie child and is now gone."""
    try:
        return os.waitpid(pid, os.WNOHANG)[0] == pid
    except ChildProcessError:
        return False
