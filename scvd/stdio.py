"""Standard streams a command was started without (`<&-`, `>&-`, `2>&-`), reopened on /dev/null.

Python leaves such a stream None in sys: the first write, flush or fileno() of it was a traceback
(python-daemon's detach, `scvd check-config`'s last flush, an `scvctl` prompt). Each is reopened on
its own descriptor (0, 1, 2): a file or socket opened later must never take that number and be
read or written as stdin, stdout or stderr, by scvd or by the children that inherit them.
"""

from __future__ import annotations

import os
import sys

STREAMS = (("stdin", os.O_RDONLY, "r"), ("stdout", os.O_WRONLY, "w"), ("stderr", os.O_WRONLY, "w"))


def closed_stdio_as_devnull() -> None:
    """Each std stream started closed becomes /dev/null: end of input at a read, output dropped as
    print() drops it when the stream is None."""
    for fd, (name, flags, mode) in enumerate(STREAMS):
        if getattr(sys, name) is None:
            setattr(sys, name, open(_devnull_at(fd, flags), mode))


def _devnull_at(fd: int, flags: int) -> int:
    """/dev/null opened on `fd` (the lowest free number is `fd` itself unless something took it since
    the start: then on another, `fd` left to its taker); inheritable, as a std descriptor is."""
    opened = os.open(os.devnull, flags)
    if opened != fd and not is_open(fd):
        os.dup2(opened, fd)
        os.close(opened)
        opened = fd
    if opened == fd:
        os.set_inheritable(fd, True)
    return opened


def is_open(fd: int) -> bool:
    """Whether `fd` names an open file (a std fd the command was started without does not)."""
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True
