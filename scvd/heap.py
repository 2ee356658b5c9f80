"""The heap a start leaves behind. What the start allocated and freed (byte-code read from .pyc
files, the parsed configuration, the tools' schemas) stays in glibc's heap as free holes that the
resident size still counts; `malloc_trim(0)` hands their pages back (about 1 MiB of an idle
daemon's 30, bench/side_by_side.py's `rss_mib`).

And the heap a burst leaves behind: glibc gives each thread that allocates while another holds the
main heap's lock an arena of its own (up to 8 per CPU), and each keeps a few MiB of freed pages.
The worker threads of a burst of large reads left the daemon at about 60 MiB for good; with one
arena it stays near its idle size. The GIL serialises the threads' allocations anyway."""

from __future__ import annotations

import ctypes
import os

M_ARENA_MAX = -8  # <malloc.h>


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
