"""Opening a workspace-relative path without ever leaving the workspace.

Rule: a path is resolved only from the session's directory fd, never as a
string path. Absolute paths and `..` are refused before any syscall; no
symlink is followed at any component, so one swapped in during a call cannot
redirect it (and /proc magic links are symlinks too); a regular file with more
than one hard link is refused, since its other name may be outside.

Where the kernel has openat2 (Linux 5.6+) one syscall does the resolution with
RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS|RESOLVE_NO_MAGICLINKS; elsewhere a walk
opens one component at a time with O_NOFOLLOW|O_DIRECTORY, holding each fd.
Both give the same answers; only the error text comes from a second look
(`_diagnose`) that names the offending component.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import posixpath
import stat
from dataclasses import dataclass

from ..errors import Failed, InvalidArguments

RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_NO_SYMLINKS = 0x04
RESOLVE_BENEATH = 0x08
RESOLVE = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS
# openat2 has number 437 on every architecture that uses the unified syscall table
_OPENAT2_NR = 437
_OPENAT2_ARCHES = {"x86_64", "aarch64", "arm64", "riscv64", "ppc64le", "ppc64", "s390x", "loongarch64"}
_EAGAIN_RETRIES = 8  # openat2 asks for a retry when a rename raced the lookup

NOFOLLOW_FLAGS = os.O_NOFOLLOW | os.O_CLOEXEC


class Missing(Failed):
    """A component of the path does not exist; `missing` is the first missing prefix."""

    def __init__(self, message: str, *, missing: str, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.missing = missing


# --- lexical checks (pure) ---------------------------------------------------


def show(path: str) -> str:
    """`path` quoted for a message, with control characters escaped (approvers use terminals)."""
    return repr(path) if path.isprintable() else ascii(path)


def split(path: str) -> tuple[str, ...]:
    """The components of a workspace-relative path; raise InvalidArguments for anything else.

    `.` and empty components are dropped (`./a//b` is `a/b`); `()` is the workspace itself.
    """
    if not isinstance(path, str) or path == "":
        raise InvalidArguments("path is empty; give a path relative to the workspace root, e.g. 'src/main.py'")
    if "\x00" in path:
        raise InvalidArguments(f"path {show(path)} contains a NUL byte; give a plain relative path")
    try:
        path.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidArguments(f"path {show(path)} is not valid UTF-8") from exc
    if path.startswith("/"):
        raise InvalidArguments(
            f"path {show(path)} is absolute; scvd only opens paths inside the workspace, "
            "so give it relative to the workspace root, e.g. 'src/main.py'"
        )
    parts = tuple(p for p in path.split("/") if p not in ("", "."))
    if ".." in parts:
        raise InvalidArguments(
            f"path {show(path)} uses '..'; scvd only follows paths inside the workspace, "
            "so name the file from the workspace root instead"
        )
    return parts


def join(parts: tuple[str, ...]) -> str:
    return "/".join(parts) or "."


# --- resolution ---------------------------------------------------------------


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


_libc: ctypes.CDLL | None = None
_openat2_ok: bool | None = None  # None: not probed yet


def _syscall() -> ctypes.CDLL:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
        _libc.syscall.restype = ctypes.c_long
    return _libc


def _openat2(dirfd: int, rel: str, flags: int, mode: int, resolve: int) -> int:
    creates = flags & os.O_CREAT or flags & os.O_TMPFILE == os.O_TMPFILE
    how = _OpenHow(flags | os.O_CLOEXEC, mode if creates else 0, resolve)  # else EINVAL
    libc = _syscall()
    for _ in range(_EAGAIN_RETRIES):
        fd = libc.syscall(
            ctypes.c_long(_OPENAT2_NR), ctypes.c_int(dirfd), ctypes.c_char_p(os.fsencode(rel)),
            ctypes.byref(how), ctypes.c_size_t(ctypes.sizeof(how)),
        )
        if fd >= 0:
            return int(fd)
        err = ctypes.get_errno()
        if err != errno.EAGAIN:
            raise OSError(err, os.strerror(err), rel)
    raise OSError(errno.EAGAIN, "openat2 kept racing a rename; try again", rel)


def openat2_available() -> bool:
    """Whether this kernel (and seccomp policy) lets us use openat2; probed once."""
    global _openat2_ok
    if _openat2_ok is None:
        _openat2_ok = False
        if platform.system() == "Linux" and platform.machine() in _OPENAT2_ARCHES:
            try:
                os.close(_openat2(-100, "/", os.O_PATH, 0, RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS))
                _openat2_ok = True
            except OSError:
                pass  # ENOSYS (old kernel), EPERM (seccomp), EINVAL (no RESOLVE_*): walk instead
    return _openat2_ok


def set_backend(use_openat2: bool | None) -> None:
    """Force the walk (False), openat2 (True) or re-probe (None). Tests run both backends."""
    global _openat2_ok
    _openat2_ok = use_openat2


def _walk(dirfd: int, parts: tuple[str, ...], flags: int, mode: int) -> int:
    """One component at a time: O_PATH|O_DIRECTORY|O_NOFOLLOW for directories, held as fds."""
    if not parts:
        return os.open(".", flags | os.O_CLOEXEC, mode, dir_fd=dirfd)
    cur = dirfd
    try:
        for name in parts[:-1]:
            nxt = os.open(name, os.O_PATH | os.O_DIRECTORY | NOFOLLOW_FLAGS, dir_fd=cur)
            if cur != dirfd:
                os.close(cur)
            cur = nxt
        return os.open(parts[-1], flags | NOFOLLOW_FLAGS, mode, dir_fd=cur)
    finally:
        if cur != dirfd:
            os.close(cur)


def open_raw(dirfd: int, parts: tuple[str, ...], flags: int, mode: int = 0o600) -> int:
    """Open `parts` beneath `dirfd` following no symlink; raises the plain OSError."""
    if openat2_available():
        return _openat2(dirfd, join(parts), flags | os.O_NOFOLLOW, mode, RESOLVE)
    return _walk(dirfd, parts, flags, mode)


# --- errors that name the offending component ----------------------------------


@dataclass(frozen=True)
class _Finding:
    kind: str  # "symlink", "notdir" or "missing"
    prefix: str  # the components up to and including the offending one
    target: str = ""  # a symlink's target


def _diagnose(dirfd: int, parts: tuple[str, ...]) -> _Finding | None:
    """Look again, one lstat per component, for the first symlink / non-directory / missing one."""
    cur = dirfd
    try:
        for i, name in enumerate(parts):
            prefix = join(parts[: i + 1])
            try:
                st = os.stat(name, dir_fd=cur, follow_symlinks=False)
            except FileNotFoundError:
                return _Finding("missing", prefix)
            if stat.S_ISLNK(st.st_mode):
                return _Finding("symlink", prefix, _readlink(name, cur))
            if i == len(parts) - 1:
                return None
            if not stat.S_ISDIR(st.st_mode):
                return _Finding("notdir", prefix)
            nxt = os.open(name, os.O_PATH | os.O_DIRECTORY | NOFOLLOW_FLAGS, dir_fd=cur)
            if cur != dirfd:
                os.close(cur)
            cur = nxt
    except OSError:
        return None  # it changed under us; the caller words a generic error
    finally:
        if cur != dirfd:
            os.close(cur)
    return None


def _readlink(name: str, dirfd: int) -> str:
    try:
        return os.readlink(name, dir_fd=dirfd)
    except OSError:
        return "?"


def symlink_error(path: str, prefix: str, target: str) -> InvalidArguments:
    """The refusal for a path that goes through a symlink."""
    inside = not target.startswith("/") and not posixpath.normpath(
        posixpath.join(posixpath.dirname(prefix), target)
    ).startswith("..")
    how = "goes through" if inside else "leaves the workspace via"
    return InvalidArguments(
        f"path {show(path)} {how} symlink {show(prefix)} (-> {show(target)}); scvd does not follow "
        "symlinks, so paths cannot leave the workspace: name the file by its real path inside the workspace"
    )


def translate(dirfd: int, parts: tuple[str, ...], path: str, exc: OSError) -> Exception:
    """Turn an OSError from resolving `parts` into the ToolError a caller should see."""
    finding = _diagnose(dirfd, parts)
    if finding and finding.kind == "symlink":
        return symlink_error(path, finding.prefix, finding.target)
    if finding and finding.kind == "notdir":
        return Failed(f"{show(finding.prefix)} in path {show(path)} is a file, not a directory; check the path")
    if finding and finding.kind == "missing" or exc.errno == errno.ENOENT:
        missing = finding.prefix if finding else join(parts)
        return Missing(f"{show(missing)} does not exist (path {show(path)}); check the path", missing=missing)
    if exc.errno in (errno.ELOOP, errno.EXDEV, errno.ENOTDIR):
        return InvalidArguments(
            f"path {show(path)} went through a symlink while scvd resolved it (it changed during the "
            "call); scvd only follows paths inside the workspace"
        )
    if exc.errno in (errno.EACCES, errno.EPERM):
        return Failed(f"permission denied opening {show(path)}; scvd runs as your user and cannot open it")
    if exc.errno == errno.ENAMETOOLONG:
        return InvalidArguments(f"path {show(path)} is too long for the filesystem")
    return Failed(f"cannot open {show(path)}: {os.strerror(exc.errno or 0)}")


def open_dir(dirfd: int, parts: tuple[str, ...], path: str) -> int:
    """An O_RDONLY|O_DIRECTORY fd of the directory `parts` (fsync-able, usable as dir_fd)."""
    try:
        return open_raw(dirfd, parts, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as exc:
        raise translate(dirfd, parts, path, exc) from exc


def check_regular(st: os.stat_result, path: str) -> None:
    """Refuse anything but a regular file with one name."""
    if stat.S_ISDIR(st.st_mode):
        raise Failed(f"{show(path)} is a directory; read and write take a file (list directories with bash ls)")
    if not stat.S_ISREG(st.st_mode):
        raise Failed(f"{show(path)} is not a regular file (a FIFO, socket or device); scvd only reads and writes files")
    if st.st_nlink > 1:
        raise InvalidArguments(
            f"{show(path)} has {st.st_nlink} hard links; scvd refuses hard-linked files because another "
            "name may be outside the workspace. If the file is yours, break the link (e.g. cp f f.new && mv f.new f)"
        )


def open_regular(dirfd: int, parts: tuple[str, ...], path: str, flags: int = os.O_RDONLY) -> tuple[int, os.stat_result]:
    """Open an existing regular single-link file beneath `dirfd`; returns (fd, its fstat)."""
    if not parts:
        raise Failed("path names the workspace itself; give a file inside it, e.g. 'README.md'")
    try:
        # O_NONBLOCK: opening a FIFO must not hang; it is refused right after by fstat
        fd = open_raw(dirfd, parts, flags | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError as exc:
        raise translate(dirfd, parts, path, exc) from exc
    try:
        st = os.fstat(fd)
        check_regular(st, path)
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def lstat_entry(parent_fd: int, name: str) -> os.stat_result | None:
    """The lstat of one entry of an open directory, or None when it does not exist."""
    try:
        return os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None
