"""Where `write`'s new content lives until it is installed: an unnamed file (O_TMPFILE), named by
`linkat` through /proc/self/fd, or, where either is refused, `.scvd-<16 hex>.tmp` beside the target.

Rule: everything here works in the target's directory through its fd. A filesystem (or a /proc)
that refused to name an unnamed file is remembered by its device for the life of the process, so
only one write there pays the failed attempt. A named one that a kill left behind is removed by a
later write in its directory (`sweep`), and nothing else is.
"""

from __future__ import annotations

import errno
import os
import re
import stat
import time

_TMPFILE_UNSUPPORTED = (errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL)  # the filesystem, or a kernel before 3.11
# linkat through /proc/self/fd refused, where a named file still works: no /proc or a stub one, a
# /proc that hides the fd links, a filesystem or sandbox that refuses the link
_LINK_REFUSED = (errno.ENOENT, errno.EPERM, errno.EXDEV, errno.EOPNOTSUPP, errno.ENOSYS)

# a named temp file nothing touched for this long was left by a killed write: a live one writes
# it chunk by chunk, then hashes at most 64 MiB (expected_sha256) and renames it
STALE_SECONDS = 600
_NAME = re.compile(r"\.scvd-[0-9a-f]{16}\.tmp")  # temp_name()'s

_unlinkable: set[int] = set()  # devices where naming an unnamed file was refused
# directory (st_dev, st_ino) -> when it was last swept: a leftover goes stale once, so a directory is
# listed at most once per STALE_SECONDS, not at every write (one of 100k entries takes tens of ms)
_swept: dict[tuple[int, int], float] = {}
MAX_SWEPT = 4096  # directories remembered; past that the memo starts over


def create(parent: int, named: bool = False) -> tuple[int, str | None]:
    """A new 0600 file in `parent`, open for writing: unnamed (name None) where the filesystem has
    O_TMPFILE and it can be named later, else `.scvd-<hex>.tmp`."""
    if not named and not (_unlinkable and os.fstat(parent).st_dev in _unlinkable):
        try:
            return os.open(".", os.O_TMPFILE | os.O_WRONLY | os.O_CLOEXEC, 0o600, dir_fd=parent), None
        except OSError as exc:
            if exc.errno not in _TMPFILE_UNSUPPORTED:
                raise
    name = temp_name()
    return os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                   dir_fd=parent), name


def temp_name() -> str:
    return f".scvd-{os.urandom(8).hex()}.tmp"


def link(fd: int, parent: int, name: str) -> bool:
    """Give the unnamed file `fd` the name `name` in `parent`; EEXIST if it is taken (never replaces).
    False where it cannot be named: the caller writes the content to a named file instead."""
    try:
        os.link(f"/proc/self/fd/{fd}", name, dst_dir_fd=parent)  # linkat(AT_SYMLINK_FOLLOW)
    except OSError as exc:
        if exc.errno in _LINK_REFUSED:
            return False
        raise
    return True


def link_refused(parent: int) -> None:
    """Remember that `parent`'s filesystem did not name an unnamed file; called once a named one was
    made there (a removed directory's ENOENT is no fault of the link)."""
    _unlinkable.add(os.fstat(parent).st_dev)


def sweep(parent: int) -> list[str]:
    """Remove the named temp files a killed write left in `parent`, and return their names: only a
    regular file of this uid, named as temp_name() names, untouched for STALE_SECONDS (another
    name of it, as create's link-then-unlink can leave, keeps the content). A directory swept less
    than STALE_SECONDS ago is not listed again."""
    try:
        st = os.fstat(parent)
        now, key = time.monotonic(), (st.st_dev, st.st_ino)
        if now - _swept.get(key, now - STALE_SECONDS) < STALE_SECONDS:
            return []
        if len(_swept) >= MAX_SWEPT:
            _swept.clear()
        _swept[key] = now
        with os.scandir(parent) as entries:  # scandir dups the fd
            names = [entry.name for entry in entries if _NAME.fullmatch(entry.name)]
    except OSError:
        return []
    cutoff, removed = time.time() - STALE_SECONDS, []
    for name in names:
        try:
            st = os.stat(name, dir_fd=parent, follow_symlinks=False)
            if stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid() and st.st_mtime < cutoff:
                os.unlink(name, dir_fd=parent)
                removed.append(name)
        except OSError:
            continue  # gone meanwhile, or not ours to remove
    return removed
