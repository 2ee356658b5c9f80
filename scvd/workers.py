"""The bounded pools of threads that run blocking work off the event loop: file I/O,
argument checks that may take seconds (`run_check`), what a session prepares as it
opens (`run_opening`), and chat transcripts read back (`run_transcript`).

Rule: threads are made once and reused, never one per call: at most
MAX_WORKERS, started only when no idle one is free; past that, work waits its
turn in arrival order. Threads are daemonic, so a read stuck on a hung
filesystem cannot keep the process from exiting.

Rule: a small regular file on a local filesystem is read on the loop itself
(`inline_ok`): reading and hashing INLINE_BYTES costs less than the hop to a
thread and back (two wake-ups, measured in docs/performance-history.md). Network and
FUSE filesystems, where a read may hang, always go to the pool.
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
import os
import queue
import stat
import threading
import time
from typing import Any, Callable

log = logging.getLogger("scvd.workers")

MAX_WORKERS = 16  # a few huge reads hashing whole files must not hold back every small one
CHECK_WORKERS = 2  # argument checks (run_check): CPU-bound under the GIL, more threads would not help
OPEN_WORKERS = 4  # session opens' preparation (run_opening): a slow walk queues opens, not file reads
# chat transcripts read back (run_transcript): a few chat.opens of huge transcripts held every
# session.open's skill walk back for seconds while they shared OPEN_WORKERS
TRANSCRIPT_WORKERS = 2
INLINE_BYTES = 64 << 10  # hashed in well under 100 us: less than the thread hop it saves
# statfs(2) f_type of local, in-kernel filesystems: ext2/3/4, xfs, btrfs, tmpfs, overlay,
# zfs, f2fs, bcachefs, ramfs. Anything else (nfs, cifs, fuse, 9p, ...) may block: pool.
LOCAL_FILESYSTEMS = frozenset({
    0xEF53, 0x58465342, 0x9123683E, 0x01021994, 0x794C7630, 0x2FC12FC1, 0xF2F52010, 0xCA451A4E, 0x858458F6,
})


class Pool:
    """Up to `size` daemon threads taking jobs from one queue."""

    def __init__(self, size: int = MAX_WORKERS, name: str = "scvd-worker") -> None:
        self.size = size
        self.name = name
        self._jobs: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads = 0
        self._idle = 0  # threads waiting for a job and not yet promised one

    @property
    def threads(self) -> int:
        return self._threads

    def submit(self, job: Callable[[], None]) -> None:
        """Run `job()` on a pool thread; it must catch its own exceptions."""
        with self._lock:
            if self._idle:
                self._idle -= 1
                spawn = False
            else:
                spawn = self._threads < self.size
                self._threads += spawn
        self._jobs.put(job)
        if spawn:
            threading.Thread(target=self._work, name=f"{self.name}-{self._threads}", daemon=True).start()

    def _work(self) -> None:
        while True:
            job = self._jobs.get()
            try:
                job()
            except BaseException:  # a job's own bug: keep the thread for the next one
                log.exception("a blocking job raised past its own handler")
            del job  # not held while idle: its closure keeps its result (a whole resumed conversation)
            with self._lock:
                self._idle += 1


_pool = Pool()
_check_pool = Pool(size=CHECK_WORKERS, name="scvd-check")
_open_pool = Pool(size=OPEN_WORKERS, name="scvd-open")
_transcript_pool = Pool(size=TRANSCRIPT_WORKERS, name="scvd-transcript")


class CancelFlag:
    """run_blocking()'s cancel flag. A job stops at it between steps; before a step it will not
    undo (a write's rename) it commits, and a cancel after that comes too late: the call then
    ends with what the job did, not as cancelled while the file changed."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._set = self._committed = False

    def is_set(self) -> bool:
        return self._set

    def commit(self) -> bool:
        """The job's last step begins; False (stop, nothing done) when cancelled already."""
        with self._lock:
            self._committed = not self._set
            return self._committed

    def cancel(self) -> bool:
        """Set the flag; False when the job had committed (its own end is the call's)."""
        with self._lock:
            self._set = not self._committed
            return self._set


async def run_blocking(fn: Callable[..., Any], workspace_fd: int, *args: Any) -> Any:
    """Run fn(dup_of_workspace_fd, *args, cancel=flag) on a pool thread.

    The job owns a duplicate of the fd (closing the session cannot pull it
    away mid-call) and always runs to its end; on cancellation the flag makes
    it stop at the next chunk and before any install. A cancel that comes once
    the job has committed (`CancelFlag.commit`: a write's rename is under way)
    waits for its end, and the call ends with its result.
    """
    cancel = CancelFlag()
    fd = os.dup(workspace_fd)

    def job() -> Any:
        try:
            return fn(fd, *args, cancel=cancel)
        finally:
            os.close(fd)

    done = _submit(_pool, job)
    try:  # shielded: a cancel must not drop the outcome of a job that has committed
        ok, value = await asyncio.shield(done)
    except asyncio.CancelledError:
        if cancel.cancel():
            raise
        ok, value = await done  # a second cancel (scvd stopping) still ends the wait
    if ok:
        return value
    raise value


async def run_check(fn: Callable[..., Any], *args: Any) -> Any:
    """fn(*args), a check of a call's arguments that may take seconds (a JSON Schema over a
    large argument), on a small pool of its own: a client that sends many large arguments
    queues behind itself, not in front of file reads. A cancel stops the wait, not the check."""
    return await _on(_check_pool, lambda: fn(*args))


async def run_opening(fn: Callable[[], Any]) -> Any:
    """fn(), what a session prepares as it opens (a skill walk), on a small pool of its own: walks
    over huge trees wait behind each other, not in front of file reads or asyncio's default
    executor. A cancel stops the wait, not fn: fn asks its own `gone` and stops."""
    return await _on(_open_pool, fn)


async def run_transcript(fn: Callable[[], Any]) -> Any:
    """fn(), a chat transcript read back and replayed (chat.open, an older chat.history page), on a
    small pool of its own: long transcripts wait behind each other, not in front of session.open.
    A cancel stops the wait, not fn."""
    return await _on(_transcript_pool, fn)


async def run_file(fn: Callable[..., Any], *args: Any, drop: Callable[[Any], None] | None = None) -> Any:
    """fn(*args), a look at files that may sit on a hung mount (an agent CLI's #! line, the directory
    it starts in), on the file-reading pool: a stuck one holds a thread there, not the loop. A cancel
    stops the wait, not fn; what fn returns after it goes to `drop` (an fd it opened, to close)."""
    done = _submit(_pool, lambda: fn(*args))
    try:
        ok, value = await asyncio.shield(done)
    except asyncio.CancelledError:
        if drop is not None:
            done.add_done_callback(lambda f: _drop(f.result(), drop))
        raise
    if ok:
        return value
    raise value


def _drop(outcome: tuple[bool, Any], drop: Callable[[Any], None]) -> None:
    ok, value = outcome
    if ok:
        drop(value)


async def _on(pool: Pool, job: Callable[[], Any]) -> Any:
    """job() on a thread of `pool`: its result, or its exception raised here."""
    ok, value = await _submit(pool, job)
    if ok:
        return value
    raise value


def _submit(pool: Pool, job: Callable[[], Any]) -> asyncio.Future[tuple[bool, Any]]:
    """job() on a thread of `pool`; the future's result is (True, its value) or (False, what it raised)."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[tuple[bool, Any]] = loop.create_future()

    def settle(outcome: tuple[bool, Any]) -> None:
        if not done.done():
            done.set_result(outcome)

    def work() -> None:
        try:
            outcome = (True, job())
        except BaseException as exc:  # handed to the awaiting task
            outcome = (False, exc)
        try:
            loop.call_soon_threadsafe(settle, outcome)
        except RuntimeError:
            pass  # the loop is gone (shutdown); nobody waits for this result

    pool.submit(work)
    return done


def in_own_thread(fn: Callable[[], Any], name: str) -> tuple[asyncio.Future[Any], threading.Thread]:
    """`fn()` on a daemon thread of its own, its outcome in the future: for a read that may never
    return (a hung mount), which must hold neither a pool's thread nor the process's exit."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()

    def settle(ok: bool, value: Any) -> None:
        if not future.done():  # a caller that stopped waiting cancelled it
            (future.set_result if ok else future.set_exception)(value)

    def work() -> None:
        try:
            outcome = (True, fn())
        except BaseException as exc:
            outcome = (False, exc)
        try:
            loop.call_soon_threadsafe(settle, *outcome)
        except RuntimeError:  # the loop closed while it ran
            pass

    thread = threading.Thread(target=work, name=name, daemon=True)
    thread.start()
    return future, thread


# --- small local files, read inline ----------------------------------------------------------

DEVICE_SECONDS = 10.0  # how long a device's filesystem type is trusted: an unmounted tmpfs's number
# may come back as an NFS mount's, and a read there must not run on the loop
_local_devices: dict[int, tuple[bool, float]] = {}  # st_dev -> (local, until)
_libc: ctypes.CDLL | None | bool = None  # None: not looked up; False: unusable


def inline_ok(fd: int, st: os.stat_result) -> bool:
    """True for a regular file of at most INLINE_BYTES on a local filesystem (cached per device)."""
    if not stat.S_ISREG(st.st_mode) or st.st_size > INLINE_BYTES:
        return False
    known = _local_devices.get(st.st_dev)
    now = time.monotonic()
    if known is None or known[1] < now:
        known = _local_devices[st.st_dev] = (_fs_type(fd) in LOCAL_FILESYSTEMS, now + DEVICE_SECONDS)
    return known[0]


def _fs_type(fd: int) -> int | None:
    """statfs(2) f_type of the filesystem holding `fd`, or None when it cannot be asked."""
    global _libc
    if _libc is None:
        try:
            _libc = ctypes.CDLL(None, use_errno=True)  # libc is loaded; ctypes.util would run ldconfig
        except OSError:
            _libc = False
    if not _libc:
        return None
    buf = ctypes.create_string_buffer(256)  # struct statfs is 120 bytes on 64-bit Linux; f_type comes first
    if _libc.fstatfs(fd, buf) != 0:
        return None
    return ctypes.c_long.from_buffer(buf).value & 0xFFFFFFFF
