"""A rename made durable: the directory that holds the renamed file synced to disk.

Rule: the new file is in place already when this runs, so a directory that cannot be
synced (VirtualBox shared folders: EINVAL) is logged, never reported as a write that
changed nothing.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

log = logging.getLogger("scvd.durable")


def sync_directory(directory: int | Path, what: str) -> None:
    """fsync `directory` (an open fd, or a path opened here) after `what` was renamed into it."""
    try:
        if isinstance(directory, int):
            os.fsync(directory)
            return
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        log.warning("wrote %s, but its directory could not be synced (%s): the rename may not survive a "
                    "power loss", what, exc.strerror)
