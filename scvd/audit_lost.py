"""Audit records lost: counted, and the count kept beside the log for the next start.

Rule: the count must be kept on the full disk that lost the records, where a file's content
needs a data block it cannot get. So it is the target of a symbolic link (`audit.log.lost -> 7`):
a short target lives in the inode (Emacs keeps its lock files so). The next start writes the
count as a `records_lost` line, then removes the link.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import msgspec

log = logging.getLogger("scvd.audit")

CUT_MAX = 64 << 10  # a line cut short longer than this is no record of scvd's (its strings are capped)
LOST_EVENT = b'"event":"records_lost"'


def marker(audit_log: Path) -> Path:
    return audit_log.with_name(audit_log.name + ".lost")


def keep(audit_log: Path, count: int) -> OSError | None:
    """Make the marker say `count`, in place of the one there (never half made); the error when it cannot."""
    path = marker(audit_log)
    scratch = path.with_name(path.name + ".tmp")  # one instance per state directory: a fixed name
    try:
        scratch.unlink(missing_ok=True)
        os.symlink(str(count), scratch)
        os.replace(scratch, path)
    except OSError as exc:
        return exc
    return None


def take(audit_log: Path) -> int:
    """The count the marker holds; 0 without one. The marker stays until clear()."""
    path = marker(audit_log)
    try:
        text = os.readlink(path)
    except FileNotFoundError:
        return 0
    except OSError as exc:  # not a link (EINVAL): not scvd's marker
        log.warning("audit log: %s is not scvd's count of lost records (%s); ignored", path, exc)
        return 0
    if not text.isdecimal():
        log.warning("audit log: %s does not hold a count of lost records (%r); ignored", path, text)
        return 0
    return int(text)


def clear(audit_log: Path) -> None:
    """The count is in the log now."""
    try:
        marker(audit_log).unlink(missing_ok=True)
    except OSError as exc:  # the next start would count those records twice: say so
        log.warning("audit log: cannot remove %s (%s); remove it, its count is in the log", marker(audit_log), exc)


def records_in(lines: list[bytes]) -> int:
    """How many records buffered lines hold: a line is one, a `records_lost` line its count."""
    count = 0
    for line in lines:
        if LOST_EVENT in line:  # never inside a string value: its quotes would be escaped
            try:
                count += msgspec.json.decode(line)["count"]
                continue
            except (msgspec.DecodeError, KeyError, TypeError):  # a tail: the head went out
                pass
        count += line != b"\n"  # a bare newline ends a line cut short, no record
    return count


def last_line_start(fd: int, size: int) -> int | None:
    """Where the last line of a file not ending in a newline starts, if it is short enough to be
    the head of a record scvd wrote; else None."""
    tail = os.pread(fd, CUT_MAX, max(0, size - CUT_MAX))
    start = tail.rfind(b"\n") + 1
    if start or len(tail) == size:
        return size - len(tail) + start
    return None
