"""Why the kernel refused `write` its temp file or its rename, and what to do about it.

Rule: EACCES is a permission bit on the directory; EPERM is not one, so the advice differs: an
immutable or append-only flag (chattr +i, +a) on the file or its directory, read here with
FS_IOC_GETFLAGS (read-only, through fds beneath the directory's), or, where none is set, the
usual other causes. A filesystem or kernel that cannot tell the flags gets that advice too.
"""

from __future__ import annotations

import errno
import fcntl
import os
import shlex
import struct
import sys

from ..errors import Failed
from . import containment
from .containment import show

IMMUTABLE, APPEND = 0x10, 0x20  # FS_IMMUTABLE_FL, FS_APPEND_FL
FS_IOC_GETFLAGS = (2 << 30) | (struct.calcsize("l") << 16) | (ord("f") << 8) | 1  # _IOR('f', 1, long)
_UNCHANGED = "the old file is unchanged"
_NOT_CREATED = "nothing was created"  # mode "create": there was no old file


def refused(parent: int, real: tuple[str, ...], path: str, exc: PermissionError, mode: str) -> Failed:
    """The error for `write` of `path` (its real components `real`, `parent` their directory's fd) in
    `mode`: a create had no old file, and nothing to rename over or change in place."""
    where = containment.join(real[:-1])
    if mode == "create":
        return _create_refused(parent, path, where, exc)
    if exc.errno != errno.EPERM:
        return Failed(
            f"writing {show(path)} failed: {exc.strerror} in its directory {show(where)}; write puts a temp file "
            "beside the file and renames it over, so it needs write permission on the directory, not only on the "
            f"file: make the directory writable (chmod u+w {shlex.quote(where)}), or change the file in place "
            f"with bash; {_UNCHANGED}")
    file, directory = flags(parent, real[-1]), flags(parent, ".")
    target, folder = shlex.quote(containment.join(real)), shlex.quote(where)
    if file & IMMUTABLE:
        return Failed(f"writing {show(path)} failed: the file is immutable (chattr +i; lsattr {target} shows an "
                      "'i'), so nothing can change, replace or remove it, bash included, until root clears the "
                      f"flag (sudo chattr -i {target}); {_UNCHANGED}")
    if file & APPEND:
        return Failed(f"writing {show(path)} failed: the file is append-only (chattr +a; lsattr {target} shows an "
                      f"'a'), so it can only grow, and write replaces it; append with bash (cat >> {target}), or "
                      f"have root clear the flag (sudo chattr -a {target}); {_UNCHANGED}")
    if directory & (IMMUTABLE | APPEND):
        flag, kind, so = (("i", "immutable", "no file in it can be added, renamed or removed")
                          if directory & IMMUTABLE else ("a", "append-only", "files can be added to it, but none "
                                                         "renamed or removed"))
        return Failed(f"writing {show(path)} failed: its directory {show(where)} is {kind} (chattr +{flag}; "
                      f"lsattr -d {folder} shows an '{flag}'), so {so}, and write renames a temp file over the "
                      f"file; change a file there in place with bash, or have root clear the flag "
                      f"(sudo chattr -{flag} {folder}); {_UNCHANGED}")
    return Failed(
        f"writing {show(path)} failed: {exc.strerror} in its directory {show(where)}; that is no missing permission "
        "bit: in a sticky directory (chmod +t, as /tmp) only the file's owner may replace it, and a security "
        "policy (SELinux, AppArmor) can refuse the temp file or the rename over the file; change the file in "
        f"place with bash; {_UNCHANGED}")


def _create_refused(parent: int, path: str, where: str, exc: PermissionError) -> Failed:
    """refused() for a new file: the directory's permission bit, its immutable flag, or a security policy."""
    folder = shlex.quote(where)
    if exc.errno != errno.EPERM:
        return Failed(f"writing {show(path)} failed: {exc.strerror} in its directory {show(where)}; a new file needs "
                      f"write permission on its directory: make it writable (chmod u+w {folder}); {_NOT_CREATED}")
    if flags(parent, ".") & IMMUTABLE:  # an append-only directory takes a new file
        return Failed(f"writing {show(path)} failed: its directory {show(where)} is immutable (chattr +i; "
                      f"lsattr -d {folder} shows an 'i'), so no file can be added to it; have root clear "
                      f"the flag (sudo chattr -i {folder}); {_NOT_CREATED}")
    return Failed(f"writing {show(path)} failed: {exc.strerror} in its directory {show(where)}; that is no missing "
                  "permission bit: a security policy (SELinux, AppArmor) can refuse a new file there; "
                  f"{_NOT_CREATED}")


def flags(dirfd: int, name: str) -> int:
    """The inode flags of `name` in `dirfd` ("." for the directory); 0 where they cannot be read."""
    try:
        fd = dirfd if name == "." else os.open(
            name, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dirfd)
    except OSError:  # no read permission, or gone: the caller names every cause
        return 0
    try:
        return int.from_bytes(fcntl.ioctl(fd, FS_IOC_GETFLAGS, bytes(8))[:4], sys.byteorder)  # the kernel writes an int
    except OSError:  # ENOTTY: a filesystem without these flags
        return 0
    finally:
        if fd != dirfd:
            os.close(fd)
