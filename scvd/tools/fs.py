"""The `read` and `write` tools of seed 000, and the blocking file work behind them.

Rule: every path goes through `containment` from the session's directory fd,
following symlinks only while they stay inside. A write replaces the directory
entry (rename), so a hard link's other names keep their old content.
Blocking work runs on a pool thread (`workers`) on a duplicate of that fd (a small
file on a local filesystem is read on the loop: cheaper than the hop) and checks a
cancel flag between chunks and before installing, so a cancelled or killed
write leaves the old file whole; the new content is an unnamed file (O_TMPFILE)
until it is installed, where the filesystem and /proc allow (`write_temp`), so a
killed scvd leaves nothing beside it. `read_file`
and `write_file` are plain functions so scripts and tests can use exactly what
the tools use.
"""

from __future__ import annotations

import ctypes
import errno
import hashlib
import logging
import os
import shlex
import stat
import threading
import time
from typing import Annotated, Any, Callable, Literal

import msgspec

from ..durable import sync_directory
from ..errors import Cancelled, Failed, InvalidArguments, PathMissing
from ..own_places import SERVICE as OWN_PLACES
from ..text import cut_note, printable
from ..workers import inline_ok, run_blocking
from . import containment, write_refused, write_temp
from .entry_locks import EntryLocks
from .git_config_secret import NAMES as GIT_CONFIG_NAMES, reason as git_config_reason
from .containment import show
from .contract import NOT_NOW, CallContext, Plan, Tool, ToolFlags, ToolRisk
from .own_files import own_file_reason
from .procfs import DEVICES as PROCFS, KIND as PROCFS_KIND
from .secret_paths import secret_reason

log = logging.getLogger("scvd.tools.fs")

CHUNK = 1 << 20
DEFAULT_READ_LIMIT = 65536
SUMMARY_LINES = 8  # first lines of a write shown to the approver
SUMMARY_LINE_CHARS = 160
RENAME_NOREPLACE = 1
DIGEST_MIN_BYTES = CHUNK  # a file this big has its sha256 remembered; a smaller one hashes in a millisecond
DIGEST_ENTRIES = 32  # files whose sha256 is remembered, the oldest forgotten first
# read gives no sha256 (null) of a larger file: hashing takes its whole length (minutes for a sparse disk
# image) for a stale-write check that `write` can hardly use there (its content is one frame, ~1 MiB)
HASH_MAX_BYTES = 64 << 20
# A file changed this recently may change again within one tick of its filesystem's timestamps
# (a jiffy; FAT's 2 s) and keep its stat key: its sha256 is not remembered until it is older.
SETTLED_NS = 3 * 10**9
_READ_ONLY, _FILESYSTEM = ToolRisk.READ_ONLY, ToolRisk.FILESYSTEM  # once: EnumType.__getattr__ per read else


class _Never:
    """A cancel flag that is never set."""

    def is_set(self) -> bool:
        return False

    def commit(self) -> bool:
        return True


NEVER = _Never()


def _check_cancel(cancel: Any) -> None:
    if cancel.is_set():
        raise Cancelled("the call was cancelled; nothing was changed")


def _commit(cancel: Any) -> None:
    """_check_cancel() before a step that is not undone: with run_blocking's flag, a cancel after
    this waits for the step, so the call ends with what was done, not as cancelled."""
    if not cancel.commit():
        raise Cancelled("the call was cancelled; nothing was changed")


# --- reading -------------------------------------------------------------------


def read_file(dirfd: int, path: str, offset: int = 0, limit: int = DEFAULT_READ_LIMIT,
              approved: tuple[str, ...] | None = None, cancel: Any = NEVER, *, small_only: bool = False) -> Any:
    """Read bytes [offset, offset+limit) of a workspace file as UTF-8, with the whole file's sha256
    (None over HASH_MAX_BYTES).

    With small_only, None unless the file is small enough to read on the event loop (`inline_ok`).
    `approved`: the real components plan() judged (secret-like or not); a path leading elsewhere now is refused.
    """
    parts = file_parts(path)
    fd, st, real = containment.open_regular(dirfd, parts, path)
    if approved is not None and real != approved:
        os.close(fd)
        raise moved_error(path, approved, real, "since scvd checked it", "nothing was read")
    if small_only and not inline_ok(fd, st):
        os.close(fd)
        return None
    try:
        return read_open(fd, st, path, parts, real, offset, limit, cancel)
    finally:
        os.close(fd)


def read_open(fd: int, st: os.stat_result, path: str, parts: tuple[str, ...], real: tuple[str, ...], offset: int,
              limit: int, cancel: Any = NEVER) -> dict[str, Any]:
    """`read_file` on a file already opened by `containment.open_regular` (fd at offset 0, not closed here;
    `st` its fstat). A big file whose sha256 is remembered (`_digests`), and one over HASH_MAX_BYTES
    (its sha256 None), is read only in its range."""
    key = _digest_key(st)
    digest = _digests.get(key) if key else None
    if digest is not None or st.st_size > HASH_MAX_BYTES:
        return _answer(path, parts, real, offset, *_window(fd, offset, limit, st.st_size), st.st_size, digest)
    started = time.time_ns()
    scanned = _scan(fd, offset, limit, cancel)
    if scanned is None:  # it grew past HASH_MAX_BYTES as it was hashed: read as one that was over it
        size = os.fstat(fd).st_size
        return _answer(path, parts, real, offset, *_window(fd, offset, limit, size), size, None)
    before, data, total, digest = scanned
    if key and total == key[2] and key[4] < started - SETTLED_NS:  # hashed whole; ctime settled before
        _digests.remember(key, digest)
    return _answer(path, parts, real, offset, before, data, total, digest)


def _window(fd: int, offset: int, limit: int, size: int) -> tuple[bytes, bytes]:
    """(before, data) of a file read only in its range: [offset-3, offset+limit), as _scan keeps."""
    lo = max(0, offset - 3)
    window = os.pread(fd, offset + limit - lo, lo)
    split_at = min(offset, size) - lo
    return window[:split_at], window[split_at:]


class _Digests:
    """The whole-file sha256 of the last DIGEST_ENTRIES big files read, by their stat key: later pages
    of an unchanged file skip hashing it all again (paging through a 500 MB log hashed it per page).
    Any write changes the key (size, mtime, ctime; write's rename, the inode). `write` never uses
    it: `expected_sha256` is compared with a hash of the file on disk, and a mismatch forgets it."""

    def __init__(self) -> None:
        self._by_key: dict[tuple[int, ...], str] = {}
        self._lock = threading.Lock()  # reads run on several pool threads

    def get(self, key: tuple[int, ...]) -> str | None:
        return self._by_key.get(key)

    def forget(self, key: tuple[int, ...] | None) -> None:
        with self._lock:
            self._by_key.pop(key, None)  # type: ignore[arg-type]

    def remember(self, key: tuple[int, ...], digest: str) -> None:
        with self._lock:
            self._by_key.pop(key, None)
            self._by_key[key] = digest
            while len(self._by_key) > DIGEST_ENTRIES:
                del self._by_key[next(iter(self._by_key))]


_digests = _Digests()


def _digest_key(st: os.stat_result) -> tuple[int, ...] | None:
    """What identifies a big file's content: (device, inode, size, mtime, ctime); None for a small file."""
    if st.st_size < DIGEST_MIN_BYTES:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def read_small(fd: int, size: int, path: str, parts: tuple[str, ...], real: tuple[str, ...], offset: int,
               limit: int) -> dict[str, Any] | None:
    """`read_open` of a file fstat said holds `size` bytes, in one read(2) of size + 1 bytes; None
    (fd consumed) when it holds more by now: the caller reads it again where a big file may be read."""
    buf = os.read(fd, size + 1)  # a short count is the end of a regular file; one more byte says it grew
    total = len(buf)
    if total > size:
        return None
    lo, hi = max(0, offset - 3), offset + limit
    start = min(offset, total)
    data = buf if start == 0 and hi >= total else buf[start:hi]
    return _answer(path, parts, real, offset, buf[lo:start], data, total, hashlib.sha256(buf).hexdigest())


def _answer(path: str, parts: tuple[str, ...], real: tuple[str, ...], offset: int,
            before: bytes, data: bytes, total: int, digest: str | None) -> dict[str, Any]:
    if offset > total:
        raise Failed(f"offset {offset} is past the end of {show(path)} (total_bytes {total}); use an offset from 0 to {total}")
    try:
        content = data.decode("utf-8")  # decoded once: utf8_problem only says what is wrong
    except UnicodeDecodeError as exc:
        # the limit cut a character in two (a page of a CJK text, two in three): the range stops before
        # it, and `truncated` with `length` says where to go on; anything else is the caller's to fix
        if not (exc.reason == "unexpected end of data" and exc.start > 0 and offset + len(data) < total):
            raise Failed(utf8_problem(path, data, offset, total, before) or "not valid UTF-8") from None
        data = data[:exc.start]
        content = data.decode("utf-8")
    return {
        "path": containment.join(parts),
        **_resolved(parts, real),
        "content": content,
        "offset": offset,
        "length": len(data),
        "total_bytes": total,
        "truncated": offset + len(data) < total,
        "sha256": digest,
    }


def moved_error(path: str, planned: tuple[str, ...], real: tuple[str, ...], since: str, done: str) -> InvalidArguments:
    """A path that now leads to another file than plan() judged (a symlink retargeted or swapped in)."""
    return InvalidArguments(
        f"path {show(path)} changed {since}: it led to {show(containment.join(planned))}, now to "
        f"{show(containment.join(real))} (a symlink changed); {done}: call again")


def planned_real(plan: Plan) -> tuple[str, ...] | None:
    """The real components plan() resolved the path to (None for a plan without them). Not `split`:
    a real name need not be UTF-8 (a link to a Latin-1 name), and `split` refuses what a caller sends."""
    return tuple(plan.targets[-1].split("/")) if plan.targets else None  # (asked, resolved) or (asked,)


def _resolved(parts: tuple[str, ...], real: tuple[str, ...]) -> dict[str, str]:
    """`resolved_path` when a symlink was followed: the file's real path in the workspace."""
    return {} if real == parts else {"resolved_path": containment.join(real)}


def _scan(fd: int, offset: int, limit: int, cancel: Any) -> tuple[bytes, bytes, int, str] | None:
    """One pass over the file: hash it all, keep [offset-3, offset+limit). Returns (before, data, total, sha);
    None for a file that grew past HASH_MAX_BYTES as it was read (a log being written): the hash stops
    there, and read_open reads it as one that was over it at open."""
    lo, hi = max(0, offset - 3), offset + limit  # 3 bytes before: to find where a split character starts
    digest = hashlib.sha256()
    kept: list[bytes] = []
    pos = 0
    while True:
        _check_cancel(cancel)
        buf = os.read(fd, CHUNK)
        if not buf:
            break
        digest.update(buf)
        a, b = max(lo, pos), min(hi, pos + len(buf))
        if a < b:
            kept.append(buf[a - pos : b - pos])
        pos += len(buf)
        if pos > HASH_MAX_BYTES:
            return None
    window = b"".join(kept)
    split_at = min(offset, pos) - lo
    return window[:split_at], window[split_at:], pos, digest.hexdigest()


def _continuation(byte: int) -> bool:
    return 0x80 <= byte <= 0xBF


def _char_length(lead: int) -> int:
    return 2 if lead < 0xE0 else 3 if lead < 0xF0 else 4


def utf8_problem(path: str, data: bytes, offset: int, total: int, before: bytes) -> str | None:
    """None when `data` is valid UTF-8, else what is wrong and which offset/limit would work."""
    try:
        data.decode("utf-8")
        return None
    except UnicodeDecodeError as exc:
        start, reason = exc.start, exc.reason
    where = (f"the {len(data)} byte{'s' if len(data) != 1 else ''} at offset {offset} of {show(path)} "
             f"{'are' if len(data) != 1 else 'is'} not valid UTF-8")
    if start == 0 and offset > 0 and _continuation(data[0]):
        back = 1
        for byte in reversed(before):
            if not _continuation(byte):
                break
            back += 1
        if back <= len(before) and before[-back] >= 0xC2:
            return (
                f"{where}: offset {offset} falls inside a multi-byte character; "
                f"read again with offset={offset - back}"
            )
    if reason == "unexpected end of data" and offset + len(data) < total:  # a limit below one character
        at = f"{where}: the range ends inside a multi-byte character that starts at byte offset {offset + start}"
        return f"{at}; read again with limit={_char_length(data[0])} or more"
    return (
        f"{where}: byte offset {offset + start} is not text (binary data or another encoding); "
        "read returns UTF-8 text only: pick a range without it, or inspect the bytes with bash (e.g. xxd)"
    )


# --- writing -------------------------------------------------------------------

_entries = EntryLocks()  # scvd's own writes of one file check and install one at a time


def write_file(
    dirfd: int, path: str, data: bytes, mode: str, expected_sha256: str | None = None,
    approved: tuple[str, ...] | None = None, cancel: Any = NEVER,
) -> dict:
    """Atomically create or replace a workspace file with `data`; see docs/tools.md#write.

    `approved`: the real components the approver was shown; a path that leads elsewhere now is refused.
    """
    parts = write_parts(path)
    real = resolve_file(dirfd, parts, path)
    if approved is not None and real != approved:
        raise moved_error(path, approved, real, "since it was approved", "nothing was written")
    parent = open_parent(dirfd, real, path)
    try:
        existing = inspect_target(parent, real, path, mode)
        fd, tmp = _write_temp(parent, data, existing, cancel)
        try:
            # another write of scvd's to this entry checks and installs first: this one's check then
            # sees its result, so two writes with one expected_sha256 cannot both land
            with _entries.hold(parent, real[-1], lambda: _check_cancel(cancel)):
                _check_cancel(cancel)  # it may have been cancelled while it waited
                inspect_target(parent, real, path, mode)  # again, right before install
                if expected_sha256:
                    _check_sha(parent, real, path, expected_sha256, cancel)
                # hashing a big file takes seconds: the call may have ended meanwhile; past this, a
                # cancel waits for the rename (workers.CancelFlag), so `cancelled` means unchanged
                _commit(cancel)
                if not _install(parent, fd, tmp, real[-1], path, mode):  # /proc or the filesystem would not name it
                    named, tmp = _write_temp(parent, data, existing, cancel, named=True)
                    fd, unnamed = named, fd  # first: a failing close must not leave `finally` closing it again
                    os.close(unnamed)
                    write_temp.link_refused(parent)
                    _install(parent, fd, tmp, real[-1], path, mode)
        except BaseException:
            if tmp is not None:
                _unlink_quiet(parent, tmp)
            raise
        finally:
            os.close(fd)
        sync_directory(parent, show(path))
        if stale := write_temp.sweep(parent):
            log.info("removed %s in the directory of %s: temp files a killed write left", ", ".join(stale), show(path))
    except PermissionError as exc:  # the temp file's create or its rename: a directory's bit, or EPERM's flags
        raise write_refused.refused(parent, real, path, exc, mode) from exc
    except OSError as exc:
        raise Failed(f"writing {show(path)} failed: {exc.strerror}; the old file, if any, is unchanged") from exc
    finally:
        os.close(parent)
    return {
        "path": containment.join(parts),
        **_resolved(parts, real),
        "bytes_written": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
        "created": mode == "create",
        # the old file had other names: they keep its old content, only this entry was replaced
        "replaced_link": existing is not None and existing.st_nlink > 1,
    }


def file_parts(path: str) -> tuple[str, ...]:
    """The components of a path that must name a file: not `dir/`, nor `a.txt/.` (POSIX says ENOTDIR;
    `split` alone would drop the tail and name `a.txt`)."""
    parts = containment.split(path)
    tail = "/" if path.endswith("/") else "/." if path.endswith("/.") else ""
    if parts and tail:
        raise InvalidArguments(
            f"path {show(path)} ends with {tail!r}, so it names a directory; give a file path, without the {tail!r}")
    return parts


def parts_in(workspace: Any, path: str, of: Callable[[str], tuple[str, ...]]) -> tuple[str, ...]:
    """`of(path)`; a refused absolute or `..` path that names a place inside the workspace says the
    relative form to use (scvd itself hands out absolute paths: a bash `pwd`, an agent's cwd)."""
    try:
        return of(path)
    except InvalidArguments as exc:
        # only an absolute path without `..` is named again: a `..` taken away lexically may not
        # be where the path leads (a component before it can be a symlink)
        root = os.fspath(workspace).rstrip("/") + "/"
        if not (isinstance(path, str) and path.startswith(root) and ".." not in path.split("/")):
            raise
        try:
            relative = containment.join(of(path[len(root):].lstrip("/")))  # one the tool takes: not `dir/`
        except InvalidArguments:
            raise exc from None
        raise InvalidArguments(f"{exc.message}: it is inside the workspace, as {show(relative)}") from None


def write_parts(path: str) -> tuple[str, ...]:
    """`file_parts` of a file to write: not the workspace itself either."""
    parts = file_parts(path)
    if not parts:
        raise InvalidArguments("path names the workspace itself; give a file inside it, e.g. 'notes.txt'")
    return parts


def resolve_file(dirfd: int, parts: tuple[str, ...], path: str) -> tuple[str, ...]:
    """The real components of a file to write, symlinks inside the workspace followed."""
    try:
        real = containment.resolve(dirfd, parts, path)
    except PathMissing as exc:
        raise _missing_parent(exc, parts, path) from exc
    if not real:
        raise Failed(f"path {show(path)} resolves to the workspace itself; give a file inside it")
    return real


def open_parent(dirfd: int, real: tuple[str, ...], path: str) -> int:
    """The destination's real directory as an fd; a missing one is an error saying to create it."""
    try:
        return containment.open_dir(dirfd, real[:-1], path)
    except PathMissing as exc:
        raise _missing_parent(exc, real, path) from exc


def _missing_parent(exc: PathMissing, parts: tuple[str, ...], path: str) -> Failed:
    # through a symlink the directories to make are the link target's, not the path's
    directory = exc.directory or containment.join(parts[:-1])
    return Failed(
            f"parent directory {show(exc.missing)} of {show(path)} does not exist; write does not create "
            f"directories: create it first (e.g. bash: mkdir -p {shlex.quote(directory)})"
        )


def inspect_target(parent: int, parts: tuple[str, ...], path: str, mode: str) -> os.stat_result | None:
    """Check the real destination entry against `mode`; return its lstat, or None when absent."""
    st = containment.lstat_entry(parent, parts[-1])
    if st is not None and stat.S_ISLNK(st.st_mode):
        raise containment.changed_error(path)  # resolve() followed every link; this one is new
    if st is not None:
        containment.check_regular(st, path)
    if mode == "create" and st is not None:
        raise Failed(
            f"{show(path)} already exists and mode='create' never overwrites; to change it, read it and "
            "write again with mode='replace' and its sha256 as expected_sha256"
        )
    if mode == "replace" and st is None:
        raise Failed(f"{show(path)} does not exist, so there is nothing to replace; use mode='create' for a new file")
    return st


def _write_temp(parent: int, data: bytes, existing: os.stat_result | None, cancel: Any,
                named: bool = False) -> tuple[int, str | None]:
    """Write `data` to a new 0600 file in `parent`, fsynced, with the replaced file's mode; its fd
    (open) and its name: None for an unnamed one (O_TMPFILE), which a SIGKILL cannot leave behind."""
    fd, name = write_temp.create(parent, named)
    try:
        view = memoryview(data)
        while view:
            _check_cancel(cancel)
            written = os.write(fd, view[:CHUNK])
            view = view[written:]
        _keep_metadata(fd, existing)
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        if name is not None:
            _unlink_quiet(parent, name)
        raise
    return fd, name


def _keep_metadata(fd: int, existing: os.stat_result | None) -> None:
    """A replaced file keeps its permission bits (not setuid/setgid) and, where allowed, its owner and group."""
    if existing is None:
        os.fchmod(fd, 0o600)  # the umask may have narrowed it; make it exact
        return
    os.fchmod(fd, stat.S_IMODE(existing.st_mode) & 0o777)
    if (existing.st_uid, existing.st_gid) != (os.geteuid(), os.getegid()):
        try:
            os.fchown(fd, existing.st_uid, existing.st_gid)
        except PermissionError:
            _keep_group(fd, existing.st_gid)  # not root: the new file is ours, as any editor's would be


def _keep_group(fd: int, gid: int) -> None:
    """Give our new file the replaced one's group when we are a member: a shared 0660 file stays shared."""
    if gid == os.getegid():
        return
    try:
        os.fchown(fd, -1, gid)
    except PermissionError:
        pass  # not a member of that group


def _check_sha(parent: int, parts: tuple[str, ...], path: str, expected: str, cancel: Any,
               small_only: bool = False) -> None:
    """Compare the file as it is now with the sha256 the caller read (stopping at a cancel); with
    `small_only` (plan() on the loop), only a file `inline_ok` lets the loop read."""
    try:
        fd = containment.open_raw(parent, parts[-1:], os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError as exc:
        raise containment.translate(parent, parts[-1:], path, exc) from exc
    try:
        st = os.fstat(fd)
        containment.check_regular(st, path)
        if st.st_size > HASH_MAX_BYTES:  # read gives no sha256 here: none can match, so hash none
            raise Failed(
                f"{show(path)} is over {HASH_MAX_BYTES >> 20} MiB, so read gives no sha256 for it and "
                "expected_sha256 cannot match; replace it without expected_sha256 (nothing then checks that "
                "it did not change since it was read), or change it with bash")
        current = _small_sha(fd, st) if small_only else _sha(fd, cancel)
    finally:
        os.close(fd)
    if current is not None and current != expected.lower():
        # a filesystem whose timestamps missed a change would hand the same stale sha256 to every read again
        _digests.forget(_digest_key(st))
        raise Failed(  # not the current sha256: a write's approval is no read's (a secret-like file)
            f"{show(path)} changed since it was read: its sha256 is no longer {expected[:16]}...; "
            "read it again and pass its sha256 as expected_sha256"
        )


def _sha(fd: int, cancel: Any) -> str:
    digest = hashlib.sha256()
    while buf := os.read(fd, CHUNK):
        _check_cancel(cancel)
        digest.update(buf)
    return digest.hexdigest()


def _small_sha(fd: int, st: os.stat_result) -> str | None:
    """The sha256 of a file the loop may read whole, else None (too big, not local, or it grew)."""
    if not inline_ok(fd, st):
        return None
    data = os.read(fd, st.st_size + 1)  # a short count is the end of a regular file
    return None if len(data) > st.st_size else hashlib.sha256(data).hexdigest()


def _install(parent: int, fd: int, tmp: str | None, leaf: str, path: str, mode: str) -> bool:
    """Put the new file in place: rename over for replace, a no-replace link (or rename) for create.
    An unnamed file gets a temp name only for the rename's moment, so a kill leaves nothing there;
    False, nothing done, when it cannot be named (`write_temp.link`)."""
    try:
        if tmp is None and mode == "create":
            return write_temp.link(fd, parent, leaf)
        elif tmp is None:
            tmp = write_temp.temp_name()
            if not write_temp.link(fd, parent, tmp):
                return False
            try:
                os.rename(tmp, leaf, src_dir_fd=parent, dst_dir_fd=parent)
            except BaseException:
                _unlink_quiet(parent, tmp)
                raise
        elif mode == "replace":
            os.rename(tmp, leaf, src_dir_fd=parent, dst_dir_fd=parent)
        elif not _rename_noreplace(parent, tmp, leaf):
            os.link(tmp, leaf, src_dir_fd=parent, dst_dir_fd=parent, follow_symlinks=False)
            _unlink_quiet(parent, tmp)
        return True
    except FileExistsError as exc:
        raise Failed(
            f"{show(path)} appeared while writing and mode='create' never overwrites; read it, then write "
            "with mode='replace' and its sha256 as expected_sha256"
        ) from exc
    except IsADirectoryError as exc:
        raise Failed(f"{show(path)} became a directory while writing; nothing was written") from exc


_renameat2: Callable[..., int] | None | bool = None  # None: not looked up; False: libc lacks it


def _rename_noreplace(parent: int, src: str, dst: str) -> bool:
    """renameat2(RENAME_NOREPLACE); False when libc or the filesystem does not offer it."""
    global _renameat2
    if _renameat2 is None:
        libc = ctypes.CDLL(None, use_errno=True)
        _renameat2 = getattr(libc, "renameat2", False)
    if _renameat2 is False:
        return False
    rc = _renameat2(parent, os.fsencode(src), parent, os.fsencode(dst), ctypes.c_uint(RENAME_NOREPLACE))
    if rc == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False  # e.g. a filesystem without RENAME_NOREPLACE: link() gives the same guarantee
    raise OSError(err, os.strerror(err), dst)


def _unlink_quiet(parent: int, name: str) -> None:
    try:
        os.unlink(name, dir_fd=parent)
    except FileNotFoundError:
        pass


# --- the tools -------------------------------------------------------------------


def _read_arguments(max_limit: int) -> type[msgspec.Struct]:
    """read's Struct; built per config because `limit`'s maximum is tools.read_limit_bytes."""
    path = Annotated[str, msgspec.Meta(
        min_length=1,
        description="File path relative to the workspace root; for a directory use bash, e.g. 'src/main.py'.")]
    offset = Annotated[int, msgspec.Meta(
        ge=0, description="Byte offset to start at; to continue after a truncated read, its offset + length "
                          "(a page may stop short of limit before a cut character), e.g. 65536.")]
    limit = Annotated[int, msgspec.Meta(
        ge=0, le=max_limit,
        description=f"Bytes to return at most (up to {max_limit}), e.g. {min(4096, max_limit)}; 0 returns only the sha256 (null for a file over {HASH_MAX_BYTES >> 20} MiB).")]
    return msgspec.defstruct(
        "ReadArguments",
        [("path", path), ("offset", offset, 0), ("limit", limit, min(DEFAULT_READ_LIMIT, max_limit))],
        kw_only=True, forbid_unknown_fields=True, module=__name__,
    )


Sha256 = Annotated[str, msgspec.Meta(pattern=r"^[0-9a-fA-F]{64}$(?!\n)")]  # $ alone lets a last newline by


class WriteArguments(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """Arguments of write."""

    path: Annotated[str, msgspec.Meta(
        min_length=1,
        description="File path relative to the workspace root; for a new file its parent must exist, e.g. 'src/main.py'.")]
    content: Annotated[str, msgspec.Meta(
        description="The whole new file content as text, also for a one-line change, e.g. 'print(1)\\n'.")]
    mode: Annotated[Literal["create", "replace"], msgspec.Meta(
        description="'create' for a new file (fails if it exists) or 'replace' for an existing one, e.g. 'create'.")]
    expected_sha256: Annotated[Sha256 | None, msgspec.Meta(
        description="With replace: the sha256 that read returned, e.g. '9f86d0...'; refuses a stale write.",
    )] = None


def _secret_reason(parts: tuple[str, ...], real: tuple[str, ...], ctx: CallContext) -> str | None:
    """The secret-like rule, and scvd's own sensitive files (its config file, the audit log, ...),
    on the requested path and on the one it resolves to (`notes -> .env`)."""
    workspace = str(ctx.workspace)
    places = ctx.services[OWN_PLACES]  # the daemon's: they know the config file it reads (--config)
    reason = secret_reason(parts, workspace) or own_file_reason(parts, workspace, places)
    if reason is None and real != parts and (
            found := secret_reason(real, workspace) or own_file_reason(real, workspace, places)):
        reason = f"it resolves to {show(containment.join(real))}: {found}"
    return reason


def _git_config_named(parts: tuple[str, ...], real: tuple[str, ...]) -> bool:
    """Whether the requested or the resolved name is one the git config rule (the one secret-like
    rule that looks at content) judges: any other file pays this comparison only."""
    return parts[-1].lower() in GIT_CONFIG_NAMES or real is not parts and real[-1].lower() in GIT_CONFIG_NAMES


def _replaced_git_config_reason(parent: int, parts: tuple[str, ...], real: tuple[str, ...],
                                ctx: CallContext) -> str | None:
    """The git config rule on the file a write replaces (`real`'s entry in `parent`), as read judges
    it: a write must tell nothing unasked of a file whose read asks. One it cannot open is judged by
    its path, as read judges one it cannot read."""
    if not _git_config_named(parts, real):
        return None
    try:
        fd = containment.open_raw(parent, real[-1:], os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError:
        return None
    try:
        return git_config_reason(fd, parts, real, str(ctx.workspace))
    finally:
        os.close(fd)


def _content_always_asks(parts: tuple[str, ...], reason: str | None) -> str | None:
    """Plan.always_ask of a file the git config rule found a credential in, or one on procfs (`reason`):
    the gate's rules judge paths only, and a session grant must not cover it, as it covers no secret-like name."""
    return None if reason is None else f"{show(containment.join(parts))} is secret-like ({reason})"


def _secret_details(reason: str | None) -> dict[str, Any]:
    if reason is None:
        return {"secret_like": False}
    return {"secret_like": True, "why": f"filesystem risk: the path looks secret-like: {reason}"}


def _targets(parts: tuple[str, ...], real: tuple[str, ...]) -> tuple[str, ...]:
    """Plan.targets: the path as asked and, when a symlink led elsewhere, where it leads."""
    asked = containment.join(parts)
    return (asked,) if real == parts else (asked, containment.join(real))


def _shown_path(parts: tuple[str, ...], real: tuple[str, ...]) -> str:
    """The path for an approver, with where a symlink leads."""
    path = show(containment.join(parts))
    return path if real == parts else f"{path} (-> {show(containment.join(real))})"


class ReadTool(Tool):
    name = "read"
    description = (
        "Read a UTF-8 text file in the workspace, whole or a byte range.\n"
        "Use for viewing files; write to change them, bash to list directories.\n"
        "Path is workspace-relative; in-workspace symlinks are followed."
    )
    risk = ToolRisk.READ_ONLY
    flags = ToolFlags(concurrent=True)

    def __init__(self, max_limit: int) -> None:
        self.Arguments = _read_arguments(max_limit)
        self.max_limit = max_limit

    def refuse(self, arguments: dict[str, Any]) -> None:
        limit = arguments.get("limit")  # past the ceiling: which setting, and how to go on
        if type(limit) is int and limit > self.max_limit:
            raise InvalidArguments(
                f"read: limit {limit} is above the {self.max_limit} bytes one read returns "
                "(tools.read_limit_bytes): read in pages, each from the offset where the last one "
                "ended (offset + length)")

    def plan(self, args: Any, ctx: CallContext) -> Plan:
        parts = parts_in(ctx.workspace, args.path, file_parts)
        fd, st, real = containment.open_regular(ctx.workspace_fd, parts, args.path)  # refuse escapes before approval
        try:
            secret = _secret_reason(parts, real, ctx)
            inside = None
            if st.st_dev in PROCFS:  # by what it is: no name tells (a session on /proc/<pid>, a bind mount)
                secret = inside = PROCFS_KIND
            # the one rule that looks at content, through this fd: any other file pays a name compared
            # (_git_config_named's test, written out: an ordinary read pays no call for it)
            elif secret is None and (parts[-1].lower() in GIT_CONFIG_NAMES
                                     or real is not parts and real[-1].lower() in GIT_CONFIG_NAMES):
                secret = inside = git_config_reason(fd, parts, real, str(ctx.workspace))
        except BaseException:
            os.close(fd)
            raise
        held: _Held | None = None
        if inline_ok(fd, st):
            held = _Held(fd, st.st_size, parts, real)
        else:
            os.close(fd)
        size = st.st_size

        def describe() -> tuple[str, dict[str, Any]]:  # what an approver sees, made only if one is asked
            what = "read" if secret is None else "read secret-like file"
            end = min(args.offset + args.limit, max(size, args.offset))  # what is there to read, not the limit
            summary = f"{what} {_shown_path(parts, real)}, bytes {args.offset}..{end} of {size}"
            return summary, {"path": containment.join(parts), **_resolved(parts, real), "offset": args.offset,
                             "limit": args.limit, "size": size, **_secret_details(secret)}

        plan = Plan(risk=_READ_ONLY if secret is None else _FILESYSTEM, describe=describe,
                    network=False, writes_confined=True, targets=_targets(parts, real), data=held,
                    release=held.close if held else None)
        if inside is not None:  # only then: an ordinary read pays no call and no keyword for it
            plan.always_ask = _content_always_asks(parts, inside)
        return plan

    def run_now(self, args: Any, plan: Plan, ctx: CallContext) -> Any:
        held = plan.data
        # The file plan() opened (and the approver saw) is read on the loop: no second resolution,
        # no thread hop. One read(2) of one byte more than plan()'s fstat saw tells whether it grew
        # since (then the pool reads it, as a big one), without a second fstat.
        if held is None or held.fd < 0:
            return NOT_NOW
        try:
            result = read_small(held.fd, held.size, args.path, held.parts, held.real, args.offset, args.limit)
        finally:
            held.close()
        return NOT_NOW if result is None else result

    async def run(self, args: Any, plan: Plan, ctx: CallContext) -> Any:
        result = self.run_now(args, plan, ctx)
        if result is not NOT_NOW:
            return result
        # resolved again there: it must still lead to the file whose risk plan() judged
        return await run_blocking(read_file, ctx.workspace_fd, args.path, args.offset, args.limit, planned_real(plan))


class _Held(msgspec.Struct, gc=False):  # a Struct: made per read without a Python __init__; no cycles
    """The fd of a small local file opened by read's plan(), owned until run() or the call's end."""

    fd: int
    size: int
    parts: tuple[str, ...]
    real: tuple[str, ...]

    def close(self) -> None:
        fd, self.fd = self.fd, -1
        if fd >= 0:
            os.close(fd)


class WriteTool(Tool):
    name = "write"
    description = (
        "Create or replace a UTF-8 text file in the workspace atomically.\n"
        "Use for new files (create) or rewrites (replace); bash for mv or rm.\n"
        "Parent directory must exist; in-workspace symlinks are followed."
    )
    risk = ToolRisk.FILESYSTEM
    Arguments = WriteArguments

    def plan(self, args: Any, ctx: CallContext) -> Plan:
        parts = parts_in(ctx.workspace, args.path, write_parts)
        if args.expected_sha256 and args.mode == "create":
            raise InvalidArguments("expected_sha256 applies to mode='replace' only; a created file has no prior content")
        try:
            data = args.content.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise InvalidArguments(f"content is not valid UTF-8 text at character {exc.start}") from exc
        real = resolve_file(ctx.workspace_fd, parts, args.path)  # fail before approval where we can
        secret = _secret_reason(parts, real, ctx)
        parent = open_parent(ctx.workspace_fd, real, args.path)
        try:
            existing = inspect_target(parent, real, args.path, args.mode)
            inside = None
            if secret is None and existing is not None:
                secret = inside = _replaced_git_config_reason(parent, parts, real, ctx)
            # a stale hash fails before anyone is asked, where hashing costs less than a thread hop
            # (a small file on a local filesystem); run() checks it again just before the rename.
            # Not that of a file whose read asks (secret-like, or every read under the policy): unasked,
            # pass or fail would say whether a guess is its content
            if args.expected_sha256 and existing is not None and secret is None and not ctx.reads_ask:
                _check_sha(parent, real, args.path, args.expected_sha256, NEVER, small_only=True)
        finally:
            os.close(parent)
        linked = existing is not None and existing.st_nlink > 1
        return Plan(
            risk=ToolRisk.FILESYSTEM, summary=write_summary(_shown_path(parts, real), args.mode, args.content, data),
            details={"path": containment.join(parts), **_resolved(parts, real), "mode": args.mode,
                     "bytes": len(data), "content": args.content,  # whole: the approver sees what lands
                     "expected_sha256": args.expected_sha256,
                     "replaces_link": linked, **_secret_details(secret)},
            network=False, writes_confined=True, targets=_targets(parts, real), data=data,
            always_ask=_content_always_asks(parts, inside),
        )

    async def run(self, args: Any, plan: Plan, ctx: CallContext) -> Any:
        data = plan.data if plan.data is not None else args.content.encode("utf-8")
        return await run_blocking(write_file, ctx.workspace_fd, args.path, data, args.mode, args.expected_sha256,
                                  planned_real(plan))  # the file the approver saw


def write_summary(shown: str, mode: str, content: str, data: bytes) -> str:
    """What the approver sees first: mode, path (already quoted), size and the first lines, bounded and
    terminal-safe; when that is not all of it, the first line says so (details.content has it whole)."""
    lines = content.splitlines(keepends=True)
    head = [f"  | {_shown_line(line.splitlines()[0])}" for line in lines[:SUMMARY_LINES]]
    more = len(lines) - SUMMARY_LINES
    if more > 0:
        head.append(f"  | ... {more} more lines")
    hidden = len(content) - sum(_shown_chars(line) for line in lines[:SUMMARY_LINES])
    note = f" {cut_note(hidden)}" if hidden > 0 else ""
    count = f"{len(lines)} line" if len(lines) == 1 else f"{len(lines)} lines"
    return "\n".join([f"write ({mode}) {shown}: {len(data)} bytes, {count}{note}", *head])


def _shown_chars(line: str) -> int:
    """Characters of one line (its break included) that the summary shows."""
    body = line.splitlines()[0]
    return min(len(body), SUMMARY_LINE_CHARS) + len(line) - len(body)


def _shown_line(line: str) -> str:
    """One line, cut to SUMMARY_LINE_CHARS with a note when cut: a hidden tail must not pass for the end."""
    cut = len(line) - SUMMARY_LINE_CHARS
    return printable(line[:SUMMARY_LINE_CHARS], keep="\t") + (f" ... ({cut} more chars)" if cut > 0 else "")


def tools(config: Any, paths: Any) -> list[Tool]:
    return [ReadTool(config.tools.read_limit_bytes), WriteTool()]
