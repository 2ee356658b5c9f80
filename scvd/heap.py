"""The heap a start leaves behind. What the start allocated and freed (byte-code read from .pyc
files, the parsed configuration, the tools' schemas) stays in glibc's heap as free holes that the
resident size still counts; `malloc_trim(0)` hands their pages back (about 1 MiB of an idle
daemon's 30, bench/side_by_side.py's `rss_mib`)."""

from __future__ import annotations

import ctypes


def trim() -> bool:
    """Give the heap's free pages back to the system: True when some were; False where there were
    none, or the C library has no malloc_trim (musl)."""
    try:
        return bool(ctypes.CDLL(None).malloc_trim(0))
    except (OSError, AttributeError):
        return False
