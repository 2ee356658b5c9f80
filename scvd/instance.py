"""What makes an instance exclusive: its lock file and its listening socket."""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import socket
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from . import errors
from .paths import Paths, ensure_private_dir, make_dirs, unopenable, why_not

log = logging.getLogger("scvd.server")

MAX_SOCKET_PATH = 107  # sun_path is 108 bytes with its NUL
INHERITED = b"socket inherited"  # the lock file's second line: systemd made the socket, scvd cannot make it again
LISTENS = b"listens "  # the line naming the socket it serves: a client in another environment computes another path
LOCK_TEXT = 4096  # what a client reads of a lock file: the pid, those lines and a path


class Holder(NamedTuple):
    """The scvd that holds an instance lock, as its lock file and /proc/locks tell."""

    pid: int
    inherited: bool  # it serves a socket systemd passed it (socket activation)
    socket: str | None = None  # the path it listens on, as it wrote it (None: an scvd that did not)


@dataclass
class Claim:
    """What makes this process the instance's daemon: the held lock and the listening socket.

    `cli.run` claims them before it imports the server, so READY=1 goes out as soon as the socket
    accepts (the kernel queues connections until the loop serves them, as with socket activation).
    """

    lock_fd: int
    sock: socket.socket
    owns_socket: bool  # bound here, so removed at exit; False: inherited from systemd
    socket_id: tuple[int, int] | None = None  # (st_dev, st_ino) of the file bound here: only it is removed
    ready_sent: bool = False  # READY=1 already said: the daemon only retries a queued one
    signals: list[int] = field(default_factory=list)  # SIGTERM/SIGINT/SIGHUP that came before the loop


def claim(paths: Paths, inherited: list[socket.socket]) -> Claim:
    """Take the instance lock, then the inherited socket or a newly bound one."""
    listens = socket_name(inherited[0]) if inherited else str(paths.socket)
    lock_fd = acquire_lock(paths.lock_file, inherited=bool(inherited), socket=listens)
    try:
        if inherited:
            return Claim(lock_fd, inherited[0], owns_socket=False)
        sock, ident = bind_owned(paths)
        return Claim(lock_fd, sock, owns_socket=True, socket_id=ident)
    except BaseException:
        os.close(lock_fd)
        raise


def release(held: Claim, path: Path) -> None:
    """Undo `claim()` for a start that failed before a daemon took the claim over."""
    held.sock.close()
    if held.owns_socket:
        remove_socket(path, held.socket_id)
    os.close(held.lock_fd)


def remove_socket(path: Path, ident: tuple[int, int] | None) -> None:
    """Remove the socket file this process bound, not one another scvd bound there since (sharing
    SCV_SOCKET from another SCV_HOME, it took ours for stale once we stopped listening)."""
    found = file_id(path)
    if found is None:
        return
    if ident is not None and found != ident:
        log.info("left %s in place: another server bound it since this one stopped listening", path)
        return
    path.unlink(missing_ok=True)


def acquire_lock(path: Path, *, inherited: bool = False, socket: str | None = None) -> int:
    """Hold an exclusive flock on the instance lock; refuse naming the pid that holds it. The pid is
    written there, whether the socket is inherited (a client's advice differs: see lock_holder), and
    the socket's path: a client whose XDG_RUNTIME_DIR or SCV_SOCKET differs is told where it is."""
    try:  # not through a link: the pid written below would truncate the file it points to
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    except OSError as exc:  # what to fix, not an errno (a directory there read `[Errno 21]`)
        raise errors.StartupError(unopenable("the lock file", path, exc)) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = written_pid(os.pread(fd, 64, 0)).decode(errors="replace") or "unknown"
        os.close(fd)
        raise errors.StartupError(
            f"scvd is already running on this instance (pid {holder}, lock {path}); "
            "stop it first (systemctl --user stop scvd, or kill that pid)") from None
    except OSError as exc:  # ENOLCK: a network filesystem without locks
        os.close(fd)
        raise errors.StartupError(
            f"cannot lock {path} ({exc.strerror or exc}); give the instance a state directory on a local "
            "filesystem (SCV_HOME, or XDG_STATE_HOME)") from None
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, lock_text(os.getpid(), inherited, socket), 0)
    except OSError as exc:  # a full disk: the lock is what counts (the pid only names us to a second start)
        log.warning("cannot write this pid into %s (%s); a second scvd refused meanwhile names no pid",
                    path, exc.strerror or exc)
    return fd


def lock_text(pid: int, inherited: bool, socket: str | None) -> bytes:
    """What the lock file holds: the pid, then `socket inherited`, then `listens <path>` (a path a line can hold)."""
    text = f"{pid}\n".encode() + (INHERITED + b"\n" if inherited else b"")
    path = os.fsencode(socket or "")
    if path.startswith(b"/") and b"\n" not in path:  # not an abstract socket's name
        text += LISTENS + path + b"\n"
    return text


def written_pid(text: bytes) -> bytes:
    """The pid an scvd wrote into its lock file: the first line (a second may say its socket is inherited)."""
    return text.split(b"\n", 1)[0].strip()


def lock_holder(path: Path) -> Holder | None:
    """The scvd holding the instance lock at `path`, or None: read from /proc/locks, never by taking
    the lock (a client's shared flock, however brief, made an scvd starting then refuse)."""
    try:  # a FIFO put there must not hold a client: opened without waiting, read only if a file
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            st = os.fstat(fd)
            written = os.pread(fd, LOCK_TEXT, 0) if stat.S_ISREG(st.st_mode) else b""
        finally:
            os.close(fd)
        with open("/proc/locks", "rb") as f:
            table = f.read()
    except OSError:
        return None
    dev = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}".encode()
    for line in table.splitlines():  # `1: FLOCK  ADVISORY  WRITE <pid> <maj>:<min>:<inode> 0 EOF`
        fields = line.split()
        if len(fields) < 6 or fields[1] != b"FLOCK" or fields[3] != b"WRITE":  # "->": a waiter
            continue
        where = fields[5].rsplit(b":", 1)
        # the device as stat says it (btrfs's differs), else the pid scvd wrote there
        pid = fields[4]
        if where[-1] == str(st.st_ino).encode() and (where[0] == dev or pid == written_pid(written)):
            return _holder(pid, written) if pid.isdigit() else None
    return None


def _holder(pid: bytes, written: bytes) -> Holder:
    """The holder `pid`; the lines after the first are its only if it wrote the first (not an scvd
    that held the lock before)."""
    lines = written.split(b"\n")
    if lines[0] != pid:
        return Holder(int(pid), False)
    listens = [line[len(LISTENS):] for line in lines[1:-1] if line.startswith(LISTENS)]
    return Holder(int(pid), lines[1:2] == [INHERITED], os.fsdecode(listens[0]) if listens else None)


def bind_owned(paths: Paths) -> tuple[socket.socket, tuple[int, int]]:
    """bind_socket(), and the (st_dev, st_ino) of the file it made: what this process may remove."""
    sock = bind_socket(paths)
    try:
        st = os.lstat(paths.socket)
    except OSError:
        sock.close()
        raise
    return sock, (st.st_dev, st.st_ino)


def file_id(path: Path) -> tuple[int, int] | None:
    """The (st_dev, st_ino) of the file at `path` (not where a link points), None when none is found
    there (a file in place of a directory on the way too)."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def bind_socket(paths: Paths) -> socket.socket:
    """Listen on the instance's socket, 0600 from birth; replace a stale file, never a live one."""
    path = paths.socket
    if path.parent == paths.runtime_dir:
        ensure_private_dir(path.parent)
    elif not path.parent.is_dir():
        try:
            make_dirs(path.parent)
        except OSError as exc:
            raise errors.StartupError(f"cannot create {path.parent}, the directory of the socket {path}: "
                                      f"{why_not(path.parent, exc)}; set SCV_SOCKET to another path") from exc
    check_socket_path(path)
    clear_stale(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)  # the socket is born 0600: no window where others may connect
    try:
        sock.bind(str(path))
    except OSError as exc:
        sock.close()
        raise errors.StartupError(
            f"cannot listen on {path}: {exc.strerror or exc}; check that its directory is yours and "
            "writable, or set SCV_SOCKET to another path") from exc
    finally:
        os.umask(old)
    os.chmod(path, 0o600)
    sock.listen(128)
    return sock


def check_socket_path(path: Path, remedy: str = "set SCV_SOCKET to a shorter path (or a shorter SCV_HOME)") -> None:
    """Refuse a path too long to bind; `check-config` and `run --daemon` ask before the bind would."""
    if len(os.fsencode(path)) > MAX_SOCKET_PATH:
        raise errors.StartupError(
            f"the socket path {path} is {len(os.fsencode(path))} bytes, more than a Unix socket's "
            f"{MAX_SOCKET_PATH}; {remedy}")


def clear_stale(path: Path) -> None:
    """Remove a socket file a crash left at `path`; refuse a live socket and anything not a socket."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(mode):  # a typo'd SCV_SOCKET must never cost the user a file
        raise errors.StartupError(
            f"{path} exists and is {file_kind(mode)}, not a socket; scvd leaves it alone: move it away, "
            "or set SCV_SOCKET to another path")
    failure = probe(path)
    if failure is None:
        raise errors.StartupError(
            f"another server answers on {path}; stop it, or set SCV_SOCKET to another path")
    if failure.errno == errno.ENOENT:  # gone since the lstat
        return
    if failure.errno != errno.ECONNREFUSED:  # not provably dead (EACCES: maybe someone else's)
        raise errors.StartupError(
            f"cannot tell whether {path} is in use ({failure.strerror or failure}); remove it if it is "
            "stale, or set SCV_SOCKET to another path")
    log.warning("replacing stale socket file %s", path)
    path.unlink(missing_ok=True)


def file_kind(mode: int) -> str:
    """What a file of `mode` is, in words ("a regular file")."""
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    return "a directory" if stat.S_ISDIR(mode) else "a regular file" if stat.S_ISREG(mode) else "a special file"


def socket_name(sock: socket.socket) -> str:
    name = sock.getsockname()
    return name.decode(errors="replace") if isinstance(name, bytes) else str(name)


def probe(path: Path) -> OSError | None:
    """Connect to `path`: None when something accepts, else why it failed."""
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(str(path))
        return None
    except OSError as exc:
        return exc
    finally:
        conn.close()
