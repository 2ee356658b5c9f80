"""The heap a start leaves behind. What the start allocated and freed (byte-code read from .pyc
files, the parsed configuration, the tools' schemas) stays in glibc's heap as free holes that the
resident size still counts; `malloc_trim(0)` hands their pages back (about 1 MiB of an idle
daemon's 30, bench/side_by_side.py's `rss_mib`).

And the heap a burst leaves behind: glibc gives each thread that allocates while another holds the
main heap's lock an arena of its own (up to 8 per CPU), and each keeps a few MiB of freed pages.
The worker threads of a burst of large reads left the daemon at about 60 MiB for good; with one
arena it stays near its idle size. The GIL serialises the threads' allocations anyway.

Even in one arena, a burst's freed chunks sit between live ones, where glibc's own trimming (the
heap's top only) never reaches them: `WhenQuiet` trims once no call has run for QUIET_SECONDS, nor any
chat work (a chat.open reading back a long conversation, a turn), which frees as much and runs no call."""

from __future__ import annotations

import asyncio
import ctypes
import os
import time
from typing import Callable

M_ARENA_MAX = -8  # <malloc.h>
QUIET_SECONDS = 5.0  # after the last work ended; long enough not to trim between an agent's calls


def trim() -> bool:
    """Give the heap's free pages back to the system: True when some were; False where there were
    none, or the C library has no malloc_trim (musl)."""
    try:
        return bool(ctypes.CDLL(None).malloc_trim(0))
    except (OSError, AttributeError):
        return False


def one_arena(environ: dict[str, str] | os._Environ[str] = os.environ) -> bool:
    """Make threads allocate from the main heap, unless the person set MALLOC_ARENA_MAX (or its
    GLIBC_TUNABLES form) themselves (glibc has applied it then); True when set here. Before the
    first thread, as later arenas stay."""
    if "MALLOC_ARENA_MAX" in environ or "glibc.malloc.arena_max" in environ.get("GLIBC_TUNABLES", ""):
        return False
    try:
        return bool(ctypes.CDLL(None).mallopt(M_ARENA_MAX, 1))
    except (OSError, AttributeError):  # no glibc (musl has no arenas to limit)
        return False


class WhenQuiet:
    """`trim()` once `busy()` has been false for QUIET_SECONDS since the last `idle()`: a daemon
    that served a burst goes back to its idle size. One timer at most, none after it trimmed."""

    def __init__(self, busy: Callable[[], bool]) -> None:
        self.busy = busy
        self._since = 0.0
        self._handle: asyncio.TimerHandle | None = None
        self._closed = False

    def idle(self) -> None:
        """Some work just ended: a call, the last running one, or chat work (cheap: called once each)."""
        self._since = time.monotonic()
        if self._handle is None and not self._closed:
            try:
                self._handle = asyncio.get_running_loop().call_later(QUIET_SECONDS, self._due)
            except RuntimeError:  # no loop: nothing runs that could trim
                pass

    def _due(self) -> None:
        self._handle = None
        if self.busy():  # work runs again: the next idle() starts the wait over
            return
        left = self._since + QUIET_SECONDS - time.monotonic()
        if left > 0:  # work came and went since this wait began: wait for the rest
            self._handle = asyncio.get_running_loop().call_later(left, self._due)
            return
        trim()

    def close(self) -> None:
        """The daemon is stopping: no more trims (the calls it cancels end after this)."""
        self._closed = True
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
