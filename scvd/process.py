"""The one process runner: every tool that starts a process goes through `run_process()`.

Rules it keeps (seed 000, DESIGN.md "Process runner"):
- The child leads a new session and process group, reads /dev/null (or the
  caller's `input` bytes, from an in-memory file), and gets an explicit
  environment (`child_env()`, a pure function) and the soft RLIMIT_NOFILE scvd
  started with (`limits.child_nofile()`). With `cwd_fd` (a session's workspace, or a
  directory opened beneath it) it starts in the directory that fd holds, and only while
  `cwd` still names it.
- stdout and stderr share one pipe read into one byte cap that keeps the head and
  the tail; memory stays bounded whatever the child writes. With `stderr_limit`,
  stderr gets its own pipe and cap (script tools: stdout is the result).
- Deadline: SIGKILL to everything of the call at once (the group and what earlier scans found;
  what a fresh scan finds besides, after it). Cancel: SIGTERM (and
  SIGCONT, for a stopped process), up to 2 s, then SIGKILL; the TERM goes to the group and what
  earlier scans found at once, to what a fresh scan finds besides after it, to each once. A
  signal reaches parents before their children (a group at once, at its leader's turn). With
  `wrapper` (argv[0] is the sandbox's bwrap, which dies at SIGTERM and takes what it runs down with it at once) the TERM goes only to
  what runs inside, and bwrap leaves when that does. After the leader exits, whatever is left is killed and the
  pipe is drained for at most `DRAIN_SECONDS`, so `sleep 1000 &` cannot hold a
  call open.
- "Everything of the call" is the leader's process group and session, the
  descendants seen by periodic /proc scans (one shared by all running calls due
  at the same tick, read off the loop: procscan.py), and orphans re-parented to scvd (a
  child subreaper, see `set_child_subreaper()`) that no other run claims and that
  are not in another leader's session or group (a service's helper).
- Process group or pid 0 and 1, and scvd's own group, are never signalled.
- Only pids the runner can attribute are reaped; the leader itself is reaped
  through its pidfd, without asyncio's child watcher. Orphans exit at any time;
  a call's end reaps them, and so does a service's waiter every REAP_SECONDS
  (no SIGCHLD handler: uvloop's libuv needs SIGCHLD for its own subprocesses).

Consequence for the rest of scvd: a child that scvd starts *outside* this
runner in a new session (start_new_session=True) looks exactly like an orphan
of a call, and a call ending meanwhile would kill and reap it. Start such
processes through `run_process` (it may run on another thread's loop) or
without a new session.
"""

from __future__ import annotations

import asyncio
import errno
import fcntl
import os
import re
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Mapping

from . import guardian, limits
from .notify import MANAGER_VARS
from .procscan import SCANS
from .proctree import (  # noqa: F401 - set_child_subreaper and friends are re-exported for the server
    ProcStat,
    descendants,
    is_child_subreaper,
    parents_first,
    read_stat,
    reap,
    reap_zombies,
    scan_processes,
    set_child_subreaper,
    signal_group,
    signal_pid,
)
from .sandbox import close_all, open_binds, workspace_replaced

MAX_ARG_BYTES = 128 * 1024 - 1  # Linux MAX_ARG_STRLEN: one argv string, NUL included
TERM_GRACE_SECONDS = 2.0  # cancel: SIGTERM, this long, then SIGKILL
DRAIN_SECONDS = 0.5  # after the leader exits, read leftovers at most this long
POLL_SECONDS = 0.05  # how often the cancel grace looks whether all are gone
SCAN_FIRST, SCAN_MAX = 0.05, 2.0  # descendant scans back off from first to max
REAP_SECONDS = 1.0  # while a service runs, its exited orphans wait at most this long
READ_CHUNK = 1 << 20
PIPE_SIZE = 1 << 20  # a larger pipe means fewer wake-ups for a flood
CUT_MARKER = re.compile(r"\n\.\.\. \d+ bytes omitted \.\.\.\n")  # CappedOutput.text()'s, where it cut

# no child sees the service manager's variables (it would notify or listen in scvd's name;
# notify.py drops them from os.environ at start, this covers an env handed in) nor scvd's own
ALWAYS_REMOVED = MANAGER_VARS
ALWAYS_REMOVED_PREFIXES = ("SCV_", "SCVD_")


# --- the environment (pure) ---------------------------------------------------


def child_env(
    base: Mapping[str, str],
    *,
    remove: Iterable[str] = (),
    remove_prefixes: Iterable[str] = (),
    set: Mapping[str, str] | None = None,  # noqa: A002 - the name is the interface
) -> dict[str, str]:
    """`base` minus scvd's own variables and `remove`/`remove_prefixes`, plus `set`."""
    names = frozenset(ALWAYS_REMOVED).union(remove)
    prefixes = ALWAYS_REMOVED_PREFIXES + tuple(remove_prefixes)
    env = {k: v for k, v in base.items() if k not in names and not k.startswith(prefixes)}
    env.update(set or {})
    return env


# --- the bounded output buffer (pure) -------------------------------------------


class CappedOutput:
    """Keeps the first `limit // 2` and the last `limit - limit // 2` bytes of a stream."""

    def __init__(self, limit: int) -> None:
        if limit < 2:
            raise ValueError("output limit must be at least 2 bytes")
        self.head_limit = limit // 2
        self.tail_limit = limit - self.head_limit
        self.head = bytearray()
        self.tail = bytearray()
        self.seen = 0

    def feed(self, data: bytes | memoryview) -> None:
        view = memoryview(data)
        self.seen += len(view)
        room = self.head_limit - len(self.head)
        if room > 0:
            self.head += view[:room]
            view = view[room:]
        if len(view) >= self.tail_limit:
            self.tail[:] = view[-self.tail_limit:]
        elif view:
            self.tail += view
            del self.tail[: max(0, len(self.tail) - self.tail_limit)]

    @property
    def kept(self) -> int:
        return len(self.head) + len(self.tail)

    @property
    def truncated(self) -> bool:
        return self.seen > self.kept

    def text(self) -> str:
        """The output as text; a marker line stands where bytes were dropped."""
        if not self.truncated:
            return (bytes(self.head) + bytes(self.tail)).decode("utf-8", "replace")
        head = _cut_partial_char_end(bytes(self.head))
        tail = _cut_partial_char_start(bytes(self.tail))
        omitted = self.seen - len(head) - len(tail)
        marker = f"\n... {omitted} bytes omitted ...\n"  # CUT_MARKER finds it
        return head.decode("utf-8", "replace") + marker + tail.decode("utf-8", "replace")


def _cut_partial_char_start(data: bytes) -> bytes:
    # drop up to 3 UTF-8 continuation bytes left from a character cut in two
    n = 0
    while n < min(3, len(data)) and 0x80 <= data[n] <= 0xBF:
        n += 1
    return data[n:]


def _cut_partial_char_end(data: bytes) -> bytes:
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte < 0x80:
            return data
        if byte >= 0xC0:  # a lead byte: keep it only if its character is complete
            need = 2 if byte < 0xE0 else 3 if byte < 0xF0 else 4
            return data if need <= back else data[:-back]
    return data


_LEADERS: set[int] = set()  # pids a running call reaps itself through its Popen
_SPAWNING = threading.Lock()  # a Popen and its _LEADERS entry, against a reaper between them
_RUNS: set["_Run"] = set()


def kill_every_run() -> int:
    """SIGKILL every running call's processes now (scvd exits at once: nothing will wait for them,
    and in their own sessions the terminal's Ctrl-C does not reach them); how many were running."""
    procs = scan_processes()
    return sum(run.signal_all(signal.SIGKILL, procs) + (run.popen.returncode is None) for run in tuple(_RUNS))


def reap_orphans(procs: Mapping[int, ProcStat] | None = None) -> list[int]:
    """Reap zombie children of scvd that no run waits for (see `reap_zombies`); callable any time,
    from any thread: a leader being started (another loop's) is in _LEADERS before it can be seen."""
    with _SPAWNING:
        return reap_zombies(procs, keep=_LEADERS)


# --- one run ----------------------------------------------------------------------


@dataclass
class RunResult:
    """What a finished process left: status, bounded output, how it ended."""

    exit_code: int | None
    signal: str | None  # e.g. "SIGKILL"
    output: str
    bytes_seen: int
    bytes_kept: int
    truncated: bool
    timed_out: bool
    duration_s: float
    stderr: str = ""  # only with run_process(stderr_limit=...); else stderr is in `output`


@dataclass
class _Told:
    """Whom one signal of a cancel reached: process groups by id, processes by (pid, start)."""

    groups: set[int] = field(default_factory=set)
    procs: set[tuple[int, int]] = field(default_factory=set)

    def reached(self, p: ProcStat) -> bool:
        return p.pgid in self.groups or (p.pid, p.start) in self.procs

    def copy(self) -> _Told:
        return _Told(set(self.groups), set(self.procs))


@dataclass(eq=False)
class _Run:
    """The processes of one call: the leader, its group and session, what scans saw."""

    popen: subprocess.Popen
    start: int  # the leader's start time, in clock ticks
    adopts: bool = True  # takes orphans re-parented to scvd for its own (a call's; see _orphans)
    tracked: dict[int, int] = field(default_factory=dict)  # pid -> start time
    last_scan: Mapping[int, ProcStat] = field(default_factory=dict)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def track(self, procs: Mapping[int, ProcStat]) -> None:
        """Remember every live process that belongs to this call now."""
        self.last_scan = procs
        members = {p.pid for p in procs.values() if self.pid in (p.pgid, p.sid)}
        if self.popen.returncode is None:
            members |= descendants(procs, [self.pid])
        if self.adopts:
            members |= self._orphans(procs)
        # only tracked pids that are still the process we saw: a reused one is somebody else's,
        # and so are its children
        members |= descendants(procs, members | set(self.live(procs)))
        for pid in members - {self.pid}:
            if procs[pid].alive:
                self.tracked[pid] = procs[pid].start  # ours now, also where the pid was another's before

    def _orphans(self, procs: Mapping[int, ProcStat]) -> set[int]:
        # re-parented to scvd, started after our leader, claimed by no other live run, and not
        # in another leader's session or group (an MCP server's helper: the server is no run)
        me, my_sid = os.getpid(), os.getsid(0)
        others = [r for r in tuple(_RUNS) if r is not self]  # a copy: runs may start in other threads
        with _SPAWNING:  # a leader the scan saw mid-Popen (another thread's) is in _LEADERS once we hold it
            every = set(_LEADERS)
        leaders = every - {self.pid}
        return {
            p.pid for p in procs.values()
            if p.ppid == me and p.alive and p.sid != my_sid and p.pid not in every
            and p.sid not in leaders and p.pgid not in leaders
            and p.start >= self.start and not any(r.claims(p) for r in others)
        }

    def claims(self, p: ProcStat) -> bool:
        return p.pid in self.tracked or self.pid in (p.pgid, p.sid)

    def live(self, procs: Mapping[int, ProcStat]) -> list[int]:
        """Tracked pids still running (and still the same process)."""
        return [
            pid for pid, start in self.tracked.items()
            if pid in procs and procs[pid].start == start and procs[pid].alive
        ]

    def signal_all(self, sig: int, procs: Mapping[int, ProcStat] | None = None, *,
                   wrapper: tuple[int, int] | None = None, told: _Told | None = None) -> int:
        """Signal the group and every tracked member still running; returns how many run.
        `wrapper`: the leader's executable (bwrap's file id), whose group is spared while a member
        runs another program (the command it started; see run_process). `told`: what an earlier
        call already sent `sig` to, spared now and added to (a handler must not run twice)."""
        procs = scan_processes() if procs is None else procs
        self.track(procs)
        live = self.live(procs)
        inside = wrapper is not None and self.runs_other(wrapper, procs)
        told = _Told() if told is None else told
        before = told.copy()
        # the group id outlives its leader only while a member holds it; else the pid may be reused
        if (self.popen.returncode is None or live) and not inside and self.pid not in before.groups:
            signal_group(self.pid, sig)
            told.groups.add(self.pid)
        # parents before children: a shell whose child got a TERM first saw it end and exited 0
        # before its own TERM came, its trap never run (set order put the child first)
        for pid in parents_first(procs, live):
            p = procs[pid]
            if before.reached(p):
                continue
            if p.pgid == pid:  # a group of its own (setsid; bwrap's inside): its newest forks are in it
                signal_group(pid, sig)
                told.groups.add(pid)
            signal_pid(pid, sig)
            told.procs.add((pid, p.start))
        return len(live)

    def known(self) -> dict[int, ProcStat]:
        """The leader (while not reaped) and the processes earlier scans found, as /proc shows
        them now: a read of each, no scan of the host."""
        pids = [*self.tracked, *([self.pid] if self.popen.returncode is None else [])]
        return {pid: stat for pid in pids if (stat := read_stat(pid)) is not None}

    def runs_other(self, wrapper: tuple[int, int], procs: Mapping[int, ProcStat]) -> bool:
        """Whether a member runs another program than `wrapper` (the command bwrap started)."""
        return any(_file_id(f"/proc/{pid}/exe") != wrapper for pid in self.live(procs))

    def reap_tracked(self) -> None:
        for pid, start in list(self.tracked.items()):
            now = read_stat(pid)
            if now is None or now.start != start:  # gone, or the pid is another process's now: not ours
                del self.tracked[pid]
            elif reap(pid):
                del self.tracked[pid]


def _pipe() -> tuple[int, int]:
    read_fd, write_fd = os.pipe()
    try:
        fcntl.fcntl(read_fd, 1031, PIPE_SIZE)  # F_SETPIPE_SZ; only a speed-up
    except OSError:
        pass
    os.set_blocking(read_fd, False)
    return read_fd, write_fd


def _input_file(data: bytes) -> int:
    """An in-memory file holding `data`, positioned at its start: stdin that never blocks us."""
    fd = os.memfd_create("scvd-input", os.MFD_CLOEXEC)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.lseek(fd, 0, os.SEEK_SET)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _spawn(argv: list[str], cwd: str | Path, env: Mapping[str, str], *, input: bytes | None = None,
           split_stderr: bool = False, cwd_fd: int | None = None) -> tuple[_Run, int, int | None]:
    """Start the leader in a new session; returns the run and the pipes' read ends (stderr's or None)."""
    start = cwd if cwd_fd is None else _held_dir(cwd, cwd_fd)
    argv, bind_fds = open_binds(argv)
    try:
        read_fd, write_fd = _pipe()
    except BaseException:
        close_all(bind_fds)
        raise
    err_read, err_write, stdin_fd = None, write_fd, None
    try:  # every fd made here is closed if a later one cannot be made (EMFILE), or Popen fails
        if split_stderr:
            err_read, err_write = _pipe()
        if input is not None:
            stdin_fd = _input_file(input)
        with _SPAWNING:  # a leader that exits at once is a leader before any reaper can see it
            popen = subprocess.Popen(
                argv, cwd=start, env=dict(env), stdin=subprocess.DEVNULL if stdin_fd is None else stdin_fd,
                stdout=write_fd, stderr=err_write, start_new_session=True, close_fds=True, pass_fds=bind_fds,
                preexec_fn=limits.restore_in_child(),  # bwrap, when it is the child, passes it on
            )
            _LEADERS.add(popen.pid)  # so no run's orphan sweep (see _orphans) nor reaper takes it
            guardian.watch(popen.pid)  # its group dies with scvd, should scvd die first
    except BaseException as exc:
        os.close(read_fd)
        if err_read is not None:
            os.close(err_read)
        if isinstance(exc, OSError) and start != cwd and exc.filename == start:
            exc.filename = str(cwd)  # the workspace could not be entered: say which, as the caller named it
        raise
    finally:
        os.close(write_fd)
        if err_write != write_fd:
            os.close(err_write)
        if stdin_fd is not None:
            os.close(stdin_fd)
        close_all(bind_fds)
    stat = read_stat(popen.pid)
    run = _Run(popen, stat.start if stat else 0)
    _RUNS.add(run)
    return run, read_fd, err_read


def _held_dir(cwd: str | Path, fd: int) -> str:
    """Where a child starts that must start in the directory `fd` holds (a session's workspace, or a
    directory an agent's `cwd` named opened beneath it, which `cwd` names): refused if `cwd` is gone or
    names another now, as a sandboxed call's bind is; entered by the fd, which the child inherits until
    exec, so that a swap after this look changes nothing. By path, a link put there since the call's
    check ran the command where it led."""
    check_held(cwd, fd)
    return f"/proc/self/fd/{fd}"


def check_held(path: str | Path, fd: int) -> None:
    """Raise workspace_replaced unless `path` still names the directory `fd` holds (a missing
    `path`: the OSError names it)."""
    now, held = os.stat(path), os.fstat(fd)
    if (now.st_dev, now.st_ino) != (held.st_dev, held.st_ino):
        raise workspace_replaced(str(path))


class _PipeReader:
    """Reads the shared stdout/stderr pipe into a CappedOutput from the event loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop, fd: int, out: CappedOutput) -> None:
        self.loop, self.fd, self.out = loop, fd, out
        self.eof = loop.create_future()
        loop.add_reader(fd, self._on_readable)

    def _on_readable(self) -> None:
        for _ in range(8):  # a bounded batch per wake-up keeps the loop fair
            try:
                data = os.read(self.fd, READ_CHUNK)
            except BlockingIOError:
                return
            except OSError as exc:
                if exc.errno == errno.EINTR:
                    continue
                data = b""
            if not data:
                self.close()
                return
            self.out.feed(data)

    async def drain(self, bound: float) -> None:
        """Wait for end of file, at most `bound` seconds."""
        try:
            await asyncio.wait_for(asyncio.shield(self.eof), bound)
        except asyncio.TimeoutError:
            pass

    def close(self) -> None:
        if not self.eof.done():
            self.loop.remove_reader(self.fd)
            os.close(self.fd)
            self.eof.set_result(None)


async def _wait_exit(popen: subprocess.Popen) -> int:
    """Wait for the leader through its pidfd (no child watcher involved), then reap it."""
    loop = asyncio.get_running_loop()
    try:
        pidfd = os.pidfd_open(popen.pid)
    except (OSError, AttributeError):  # old kernel: poll instead
        while popen.poll() is None:
            await asyncio.sleep(POLL_SECONDS)
        return popen.returncode
    exited = loop.create_future()
    loop.add_reader(pidfd, lambda: exited.done() or exited.set_result(None))
    try:
        await exited
    finally:
        loop.remove_reader(pidfd)
        os.close(pidfd)
    return popen.wait()


async def run_process(
    argv: list[str],
    *,
    cwd: str | Path,
    env: Mapping[str, str],
    timeout: float | None,
    output_limit: int,
    input: bytes | None = None,  # noqa: A002 - subprocess's name for it
    stderr_limit: int | None = None,
    wrapper: bool = False,
    cwd_fd: int | None = None,
) -> RunResult:
    """Run `argv` to the end under the rules in this module's docstring (`wrapper`: argv is
    Sandbox.wrap()'s, a cancel's SIGTERM spares bwrap itself; `cwd_fd`: a session's workspace fd
    or one opened beneath it, the directory to start in, which `cwd` only names)."""
    loop = asyncio.get_running_loop()
    out = CappedOutput(output_limit)
    err = CappedOutput(stderr_limit) if stderr_limit is not None else None
    started = time.monotonic()
    run, read_fd, err_fd = _spawn(argv, cwd, env, input=input, split_stderr=err is not None, cwd_fd=cwd_fd)
    readers = [_PipeReader(loop, read_fd, out)]
    if err is not None and err_fd is not None:
        readers.append(_PipeReader(loop, err_fd, err))
    exit_task = loop.create_task(_wait_exit(run.popen))
    try:
        timed_out = await _supervise(run, exit_task, started, timeout)
        # the leader is gone: kill what is left, read what is buffered, both bounded
        if run.signal_all(signal.SIGKILL, await SCANS.scan()):
            await _settle(run, exit_task, DRAIN_SECONDS, kill=True)
        await asyncio.gather(*(reader.drain(DRAIN_SECONDS) for reader in readers))
    except asyncio.CancelledError:
        await _terminate(run, exit_task, wrapper=wrapper)
        raise
    finally:
        for reader in readers:
            reader.close()
        _release(run, exit_task)
    result = _result(run.popen.returncode, out, timed_out, time.monotonic() - started)
    if err is not None:
        result.stderr = err.text()
    return result


async def _supervise(run: _Run, exit_task: asyncio.Task, started: float, timeout: float | None) -> bool:
    """Wait for the leader; track descendants, enforce the deadline. A scan under way holds back
    neither: it waits its turn and reads every process on the host (seconds among many)."""
    loop = asyncio.get_running_loop()  # its clock: timers set for one instant fire in one turn
    deadline = None if timeout is None else loop.time() + started + timeout - time.monotonic()
    gap = SCAN_FIRST
    next_scan = _next_tick(loop.time(), gap)
    scan: asyncio.Future | None = None
    try:
        while True:
            now = loop.time()
            if deadline is not None and now >= deadline:
                await _kill_all(run)
                await asyncio.shield(exit_task)
                return True
            if scan is None and now >= next_scan:
                scan = asyncio.ensure_future(SCANS.scan())
            wake = [t for t in (deadline, next_scan if scan is None else None) if t is not None]
            await asyncio.wait([exit_task, *([scan] if scan else [])], return_when=asyncio.FIRST_COMPLETED,
                               timeout=max(0.0, min(wake) - now) if wake else None)
            if exit_task.done():
                return False
            if scan is not None and scan.done():
                run.track(scan.result())
                scan = None
                gap = min(gap * 2, SCAN_MAX)
                next_scan = _next_tick(loop.time(), gap)
    finally:
        if scan is not None and not scan.cancel() and not scan.cancelled():
            scan.exception()  # done meanwhile: retrieved, so a failure there is not reported as lost


def _next_tick(now: float, gap: float) -> float:
    """The next multiple of `gap`: runs with the same gap wake together and share one scan."""
    return (now // gap + 1) * gap


async def _kill_all(run: _Run) -> None:
    """SIGKILL everything of the run, as a fresh shared scan shows it. A cancel that cuts the wait
    short kills with a scan of its own, on the loop: nothing after it would."""
    # at once to what is known (the group, what earlier scans found, a setsid stray among them):
    # the scan waits for its turn and reads every process on the host
    run.signal_all(signal.SIGKILL, run.known())
    try:
        procs = await SCANS.scan()
    except asyncio.CancelledError:
        run.signal_all(signal.SIGKILL)
        raise
    run.signal_all(signal.SIGKILL, procs)


async def _settle(run: _Run, exit_task: asyncio.Task, bound: float, *, kill: bool = False) -> bool:
    """Reap the run's processes as they die; True once the leader and all tracked are gone.
    With `kill`, SIGKILL again what each scan finds alive: a process that forked between the
    last scan and the kill left a child that no signal reached yet."""
    give_up = time.monotonic() + bound
    while True:
        run.reap_tracked()
        procs = await SCANS.scan()
        if kill:
            run.signal_all(signal.SIGKILL, procs)  # tracks them too
        else:
            run.track(procs)
        if exit_task.done() and not run.live(procs):
            run.reap_tracked()
            return True
        if time.monotonic() >= give_up:
            return False
        await asyncio.sleep(POLL_SECONDS)


async def _terminate(run: _Run, exit_task: asyncio.Task, *, wrapper: bool = False) -> None:
    """Cancel: SIGTERM to all, up to TERM_GRACE_SECONDS for them to go, then SIGKILL. A wrapper
    leader (bwrap) gets no TERM once the command it started runs: it would die at once, and its
    --die-with-parent would SIGKILL the whole sandbox before any TERM handler in it ran."""
    wrapper_id = _file_id(run.popen.args[0]) if wrapper else None
    told = {signal.SIGTERM: _Told(), signal.SIGCONT: _Told()}
    settled = False
    try:
        # at once to what is known (the group, what earlier scans found): a scan waits for its turn and
        # reads every process on the host; it then finds the strays (setsid) that left the group
        _tell(run, run.known(), wrapper_id, told)
        # still setting the sandbox up: nothing in it to clean up, and a TERM would end bwrap before its
        # child armed --die-with-parent, which then started the command and ran it for the whole grace
        if _tell(run, await SCANS.scan(), wrapper_id, told):
            settled = await _settle(run, exit_task, TERM_GRACE_SECONDS)
    except BaseException:  # a second cancel: kill at once, no more waiting
        run.signal_all(signal.SIGKILL)
        raise
    await _kill_all(run)
    if not settled:
        await _settle(run, exit_task, DRAIN_SECONDS, kill=True)


def _tell(run: _Run, procs: Mapping[int, ProcStat], wrapper_id: tuple[int, int] | None,
          told: Mapping[int, _Told]) -> bool:
    """A cancel's SIGTERM and SIGCONT to what `procs` shows of the run and `told` does not hold yet;
    False (nothing sent) while a wrapper runs only itself (bwrap setting the sandbox up)."""
    run.track(procs)
    if wrapper_id is not None and not run.runs_other(wrapper_id, procs):
        return False
    for sig in (signal.SIGTERM, signal.SIGCONT):  # a stopped process acts on the TERM once continued
        run.signal_all(sig, procs, wrapper=wrapper_id, told=told[sig])
    return True


def _file_id(path: str) -> tuple[int, int] | None:
    """(st_dev, st_ino) of the file at `path` (/proc/PID/exe: the program a process runs), or None."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _release(run: _Run, exit_task: asyncio.Task) -> None:
    """Forget the run; a leader not reaped yet (a second cancel) is left to its exit task."""
    run.reap_tracked()
    _RUNS.discard(run)
    if exit_task.done():
        _forget_leader(run.popen)
        if not exit_task.cancelled():
            exit_task.exception()  # retrieved, so a failure there is not reported as lost
    else:
        run.signal_all(signal.SIGKILL)
        _PENDING.add(exit_task)
        exit_task.add_done_callback(lambda t: (_PENDING.discard(t), _forget_leader(run.popen)))
    # a fresh scan, not the run's last one: a process killed since that scan (an agent's helper,
    # bwrap's child) is a zombie of ours by now and is reaped with its call, not at the next one;
    # only when some child is a zombie: a scan on the loop at every call's end stalled it
    if _zombie_child():
        reap_orphans()


_PENDING: set[asyncio.Task] = set()  # exit tasks that outlived their run (kept from GC)


def _forget_leader(popen: subprocess.Popen) -> None:
    """Nothing waits for the leader any more. Reaped, its pid (and group id) may be reused: the
    guardian forgets it; not reaped (its wait cancelled at scvd's exit), its group stays guarded."""
    _LEADERS.discard(popen.pid)
    if popen.returncode is not None:
        guardian.forget(popen.pid)


# --- long-lived children (MCP stdio servers) ---------------------------------------


def spawn_service(argv: list[str], cwd: str | Path, env: Mapping[str, str]) -> subprocess.Popen:
    """A long-lived child on pipes (stdin, stdout, stderr), leading its own session and group.

    It counts as a leader from the moment it exists, so no call's orphan sweep
    takes it for its own; `wait_service()` reaps it and forgets it.
    """
    argv, bind_fds = open_binds(argv)
    try:
        with _SPAWNING:
            popen = subprocess.Popen(
                argv, cwd=cwd, env=dict(env), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, start_new_session=True, close_fds=True, pass_fds=bind_fds,
                preexec_fn=limits.restore_in_child(),
            )
            _LEADERS.add(popen.pid)
            guardian.watch(popen.pid)
    finally:
        close_all(bind_fds)
    return popen


async def wait_service(popen: subprocess.Popen) -> int:
    """Its exit status, once it has exited (reaped through its pidfd).

    Meanwhile its orphans come back to scvd (the subreaper) and no call's end may come
    to reap them: every REAP_SECONDS, exited ones are reaped here.
    """
    exit_task = asyncio.ensure_future(_wait_exit(popen))
    try:
        while True:
            await asyncio.wait([exit_task], timeout=REAP_SECONDS)
            if _zombie_child():  # a scan only then: this runs every second per service
                reap_orphans()
            if exit_task.done():
                return exit_task.result()
    finally:
        exit_task.cancel()
        _forget_leader(popen)


def _zombie_child() -> bool:
    """Whether some child of scvd has exited and waits to be reaped; reaps none (WNOWAIT)."""
    try:
        return os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return False


def signal_service(popen: subprocess.Popen, sig: int, *, wrapper: bool = False) -> None:
    """Signal its whole process group while the leader is not reaped (the group id is still ours).
    `wrapper` (argv is Sandbox.wrap()'s): as in a cancelled run, bwrap itself is spared once the
    server inside runs, and its descendants get `sig`; a TERM to bwrap would end it, and its
    --die-with-parent SIGKILL the whole sandbox before the server's TERM handler ran."""
    if popen.returncode is not None:
        return
    if not wrapper:
        signal_group(popen.pid, sig)
        return
    stat = read_stat(popen.pid)  # a service's orphans are no call's: the run adopts none
    _Run(popen, stat.start if stat else 0, adopts=False).signal_all(sig, wrapper=_file_id(popen.args[0]))


def _result(code: int | None, out: CappedOutput, timed_out: bool, duration: float) -> RunResult:
    sig = None
    if code is not None and code < 0:
        try:
            sig = signal.Signals(-code).name
        except ValueError:
            sig = f"SIG{-code}"
        code = None
    return RunResult(
        exit_code=code, signal=sig, output=out.text(), bytes_seen=out.seen,
        bytes_kept=out.kept, truncated=out.truncated, timed_out=timed_out,
        duration_s=round(duration, 3),
    )
