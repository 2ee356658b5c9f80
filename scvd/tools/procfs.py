"""Which files are procfs's: a `read` of one asks, always, whatever its path.

procfs shows the processes of scvd's user: their environment (`environ`: scvd's own, a chat
provider's key among it; an MCP server's, with the secrets scvd gave it), command lines and
memory (`maps`, `mem`). No name tells: a session on `/` reads `proc/self/environ`, one on
`/proc/<pid>` reads `environ`, and a bind mount of /proc may be called anything. So a file is
judged by its device: the st_dev of each procfs mounted in scvd's mount namespace when this
module is loaded (/proc/self/mountinfo, and /proc's own), compared with the fstat a read has
anyway: one set lookup per read, no system call. A procfs mounted there later (only root can)
is not seen; the name rule (`environ`, scvd/tools/secret_paths.py) is the second line.
"""

from __future__ import annotations

import os

KIND = ("a file of procfs, which shows processes' environments, command lines and memory (scvd's, "
        "with the secrets it holds or gives its MCP servers and tools)")


def procfs_devices(mountinfo: str = "/proc/self/mountinfo", proc: str = "/proc/self") -> frozenset[int]:
    """The st_dev of every procfs mount listed in `mountinfo`, and of `proc` (an entry only procfs has)."""
    found: set[int] = set()
    try:
        with open(mountinfo, encoding="utf-8", errors="replace") as lines:
            for line in lines:
                # `ID PARENT MAJOR:MINOR ROOT POINT OPTIONS [OPTIONAL...] - TYPE SOURCE ...`
                fields, _, rest = line.partition(" - ")
                if rest.split(" ", 1)[0] == "proc":
                    major, _, minor = fields.split(" ")[2].partition(":")
                    found.add(os.makedev(int(major), int(minor)))
    except (OSError, ValueError, IndexError):
        pass  # /proc's own below still counts
    try:
        found.add(os.stat(proc, follow_symlinks=False).st_dev)
    except OSError:
        pass  # no procfs at /proc
    return frozenset(found)


DEVICES = procfs_devices()
