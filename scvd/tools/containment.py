"""Opening a workspace-relative path without ever leaving the workspace.

Rule: a path is resolved only from the session's directory fd, never as a
string path. Absolute paths and `..` are refused before any syscall. A symlink
is followed only while it stays inside the workspace: one that is absolute or
climbs past the root with `..` is refused, and so are /proc magic links (their
targets are absolute). Hard-linked files may be read; `write` replaces their
directory entry, never writing through the link (fs.py).

Two steps. `resolve()` finds the real path: one lstat per component from the
session fd, expanding in-workspace symlinks itself (a `..` in a link's target
drops a directory it holds, never asking the kernel for `..`). Then the real
path is opened following no symlink at all: openat2 with RESOLVE_BENEATH|
RESOLVE_NO_SYMLINKS|RESOLVE_NO_MAGICLINKS where the kernel has it (Linux 5.6+),
else a walk opening one component at a time with O_NOFOLLOW|O_DIRECTORY. A
symlink swapped in between the two steps is therefore refused, never followed;
both backends give the same answers.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import stat
from collections.abc import Callable
from dataclasses import dataclass

from ..errors import Failed, InvalidArguments, PathMissing
from ..text import plain

RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_NO_SYMLINKS = 0x04
RESOLVE_BENEATH = 0x08
RESOLVE = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS
# openat2 has number 437 on every architecture that uses the unified syscall table
_OPENAT2_NR = 437
_OPENAT2_ARCHES = {"x86_64", "aarch64", "arm64", "riscv64", "ppc64le", "ppc64", "s390x", "loongarch64"}
_EAGAIN_RETRIES = 8  # openat2 asks for a retry when a rename raced the lookup
MAX_SYMLINKS = 40  # Linux's own limit on links followed in one lookup
_CHANGED = {errno.ENOENT, errno.ELOOP, errno.ENOTDIR, errno.EXDEV, errno.EINVAL}

NOFOLLOW_FLAGS = os.O_NOFOLLOW | os.O_CLOEXEC


# --- lexical checks (pure) ---------------------------------------------------


def show(path: str) -> str:
    """`path` quoted for a message, with control, bidi and invisible characters escaped (approvers
    use terminals: a path holding U+3164 must not look like one without)."""
    return repr(path) if plain(path) else ascii(path)


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
    names = path.split("/")
    if "" in names or "." in names:  # most paths have neither: no generator per call
        names = [p for p in names if p not in ("", ".")]
    parts = tuple(names)
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
    if len(parts) == 1 and parts[0] not in (".", "..") and "/" not in parts[0]:
        # one plain name in dirfd: O_NOFOLLOW alone refuses what RESOLVE_* would (a symlink,
        # a magic link; `..` cannot occur), without openat2's ctypes call (~10 us of a read)
        return os.open(parts[0], flags | NOFOLLOW_FLAGS, mode, dir_fd=dirfd)
    if openat2_available():
        return _openat2(dirfd, join(parts), flags | os.O_NOFOLLOW, mode, RESOLVE)
    return _walk(dirfd, parts, flags, mode)


# --- following symlinks that stay inside ------------------------------------------


@dataclass(frozen=True)
class _Link:
    """The symlink a component came from: its real path in the workspace and its target."""

    prefix: str
    target: str


def resolve(dirfd: int, parts: tuple[str, ...], path: str) -> tuple[str, ...]:
    """The real components of `parts` beneath `dirfd`, following symlinks that stay inside.

    A missing last component is kept (write may create it); a missing earlier one
    raises PathMissing. Raises InvalidArguments for a symlink that leads outside. A `..` in
    `parts` (an agent's cwd; `split` refuses it) drops the real directory before it, never the root.
    """
    todo: list[tuple[str, _Link | None]] = [(name, None) for name in reversed(parts)]
    real: list[str] = []
    held: list[int] = []  # an O_PATH fd of each directory in `real`
    links = 0
    try:
        while todo:
            name, via = todo.pop()
            if name == "..":
                if not real:
                    raise outside_error(path, via.prefix, via.target) if via else climb_error(path)
                real.pop()
                os.close(held.pop())
                continue
            cur = held[-1] if held else dirfd
            try:
                st = os.stat(name, dir_fd=cur, follow_symlinks=False)
            except FileNotFoundError:
                if todo:
                    missing = join((*real, name))
                    rest = [n for n, _ in reversed(todo)][:-1]  # nothing beyond exists: no more links
                    directory = None if ".." in rest else join((*real, name, *rest))
                    raise PathMissing(f"{show(missing)} does not exist (path {show(path)}); check the path",
                                      missing=missing, directory=directory) from None
                real.append(name)
                break
            if stat.S_ISLNK(st.st_mode):
                links += 1
                link = _Link(join((*real, name)), os.readlink(name, dir_fd=cur))
                _check_link(path, link, links)
                todo.extend((p, link) for p in reversed(link.target.split("/")) if p not in ("", "."))
                continue
            real.append(name)
            if not todo:
                break
            if not stat.S_ISDIR(st.st_mode):
                raise Failed(f"{show(join(tuple(real)))} in path {show(path)} is a file, not a directory; check the path")
            held.append(os.open(name, os.O_PATH | os.O_DIRECTORY | NOFOLLOW_FLAGS, dir_fd=cur))
    except OSError as exc:
        if exc.errno in _CHANGED:  # a component changed between lstat and readlink/open
            raise changed_error(path) from exc
        raise translate(dirfd, (), path, exc) from exc
    finally:
        for fd in held:
            os.close(fd)
    return tuple(real)


def _check_link(path: str, link: _Link, count: int) -> None:
    if count > MAX_SYMLINKS:
        raise InvalidArguments(
            f"path {show(path)} goes through more than {MAX_SYMLINKS} symlinks (a loop at "
            f"{show(link.prefix)}?); name it by its real path inside the workspace"
        )
    if link.target.startswith("/"):
        raise outside_error(path, link.prefix, link.target)


def outside_error(path: str, prefix: str, target: str) -> InvalidArguments:
    """The refusal for a path that leaves the workspace through a symlink."""
    return InvalidArguments(
        f"path {show(path)} leaves the workspace via symlink {show(prefix)} (-> {show(target)}); scvd "
        "follows symlinks only while they stay inside the workspace, so paths cannot leave it: name "
        "it by its real path inside the workspace"
    )


def climb_error(path: str) -> InvalidArguments:
    return InvalidArguments(
        f"path {show(path)} climbs above the workspace root with '..'; scvd only follows paths inside "
        "the workspace, so name it from the workspace root instead"
    )


def changed_error(path: str) -> InvalidArguments:
    return InvalidArguments(
        f"path {show(path)} changed while scvd resolved it (a directory became a symlink during the "
        "call); scvd only follows paths inside the workspace: try again"
    )


# --- errors that name the offending component ----------------------------------


def translate(dirfd: int, parts: tuple[str, ...], path: str, exc: OSError) -> Exception:
    """Turn an OSError from opening the real `parts` (no symlinks) into the ToolError a caller should see."""
    if exc.errno == errno.ENOENT:
        missing = _first_missing(dirfd, parts)
        return PathMissing(f"{show(missing)} does not exist (path {show(path)}); check the path", missing=missing)
    if exc.errno in (errno.ELOOP, errno.EXDEV, errno.ENOTDIR):
        return changed_error(path)  # resolve() saw no symlink or file here a moment ago
    if exc.errno in (errno.EACCES, errno.EPERM):
        return Failed(f"permission denied opening {show(path)}; scvd runs as your user and cannot open it")
    if exc.errno == errno.ENXIO:  # open(2) of a Unix socket, or of a FIFO with no reader
        return not_regular_error(path)
    if exc.errno == errno.ENAMETOOLONG:
        return InvalidArguments(f"path {show(path)} is too long for the filesystem")
    return Failed(f"cannot open {show(path)}: {os.strerror(exc.errno or 0)}")


def _first_missing(dirfd: int, parts: tuple[str, ...]) -> str:
    """The shortest prefix of `parts` that does not exist (all of it when that cannot be told)."""
    for i in range(1, len(parts)):
        try:
            os.stat(join(parts[:i]), dir_fd=dirfd, follow_symlinks=False)
        except FileNotFoundError:
            return join(parts[:i])
        except OSError:
            break
    return join(parts)


def open_dir(dirfd: int, parts: tuple[str, ...], path: str) -> int:
    """An O_RDONLY|O_DIRECTORY fd of the real directory `parts` (fsync-able, usable as dir_fd)."""
    try:
        return open_raw(dirfd, parts, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as exc:
        raise translate(dirfd, parts, path, exc) from exc


def check_regular(st: os.stat_result, path: str) -> None:
    """Refuse anything but a regular file."""
    if stat.S_ISDIR(st.st_mode):
        raise Failed(f"{show(path)} is a directory; read and write take a file (list directories with bash ls)")
    if not stat.S_ISREG(st.st_mode):
        raise not_regular_error(path)


def not_regular_error(path: str) -> Failed:
    return Failed(f"{show(path)} is not a regular file (a FIFO, socket or device); scvd only reads and writes files")


def open_leaf(dirfd: int, parts: tuple[str, ...], path: str, flags: int,
              check: Callable[[os.stat_result, str], None] = check_regular) -> int:
    """Open `parts` following no symlink, from its directory's fd, once an lstat there passed
    `check` (a regular file): open(2) itself acts on a FIFO (a writer waiting in open() goes on,
    then dies of SIGPIPE as we close) or a device. Raises the plain OSError (a symlink: ELOOP),
    or what `check` raises, unopened."""
    parent = dirfd if len(parts) == 1 else open_raw(dirfd, parts[:-1], os.O_PATH | os.O_DIRECTORY)
    try:
        st = os.stat(parts[-1], dir_fd=parent, follow_symlinks=False)
        if not stat.S_ISLNK(st.st_mode):  # a symlink: the open below refuses it
            check(st, path)
        return open_raw(parent, parts[-1:], flags)
    finally:
        if parent != dirfd:
            os.close(parent)


def open_regular(dirfd: int, parts: tuple[str, ...], path: str,
                 flags: int = os.O_RDONLY) -> tuple[int, os.stat_result, tuple[str, ...]]:
    """Open an existing regular file beneath `dirfd`, following in-workspace symlinks.

    Returns (fd, its fstat, its real components).
    """
    # O_NONBLOCK, O_NOCTTY: a FIFO or terminal swapped in after open_leaf's lstat still cannot
    # hang the call or become its terminal, and the fstat below refuses it
    flags |= os.O_NONBLOCK | os.O_NOCTTY
    fd = -1
    if parts:
        # Most paths hold no symlink: then the open that follows none (as below) is the whole
        # resolution and `real` is `parts`. Anything else (a symlink on the way, a missing
        # component) fails it, and the walk below finds the real path or says what is wrong.
        try:
            fd, real = open_leaf(dirfd, parts, path, flags), parts
        except OSError:
            fd = -1
    if fd < 0:
        real = resolve(dirfd, parts, path)
        if not real:
            raise Failed("path names the workspace itself; give a file inside it, e.g. 'README.md'")
        try:
            fd = open_leaf(dirfd, real, path, flags)
        except OSError as exc:
            raise translate(dirfd, real, path, exc) from exc
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):  # a regular file passes check_regular: no call for it
            check_regular(st, path)
    except BaseException:
        os.close(fd)
        raise
    return fd, st, real


def lstat_entry(parent_fd: int, name: str) -> os.stat_result | None:
    """The lstat of one entry of an open directory, or None when it does not exist."""
    try:
        return os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None
