"""An import's writes into a private home: all its files or none, one import at a time.

- Every new file is staged (0600, fsynced) before any is renamed into place; if a step fails the
  old files go back, and if the import is killed midway its journal has the next user of the home
  put them back (import_journal.py), so a home never holds files from two imports.
- One import at a time per home: a flock on the directory (the daemon's and a direct scvctl's
  alike), waited for up to LOCK_WAIT_SECONDS. Whoever reads the imported files together (a chat
  turn: the config and the key it pairs) holds it shared meanwhile (`reading`), so no import
  swaps them between two reads.
- An import goes before readers that come after it: flock prefers no one, and readers that
  overlap would keep it waiting past its limit. So each first takes an intent lock, a flock on
  the home's parent folder (shared by readers, exclusive by an import), then the directory's, and
  drops the intent one: readers that come while an import waits for the directory wait behind it.
- What an import that died midway left (a copy of a key among it) is swept by the home's next
  user (import_journal.settle).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import stat
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

from ..errors import Failed, InternalError, InvalidRequest
from . import import_journal

log = logging.getLogger("scvd.adapters")

LOCK_WAIT_SECONDS = 10.0  # for another import of the same home


def _stage(directory: Path, name: str, data: bytes) -> Path:
    """`data` in a 0600 temp file beside `directory/name`, on disk (fsync), ready to be renamed
    over it atomically."""
    import tempfile  # here: it imports shutil, random and more, which the idle daemon does without

    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=directory)
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        import_journal.unlink(Path(tmp))
        raise
    return Path(tmp)


def commit_files(directory: Path, files: dict[str, bytes | None]) -> None:
    """Write (bytes) or remove (None) each of `files` in `directory`, all or none; the caller
    has settled the home first (import_journal.settle).

    The journal (import_journal.py) comes first, then every new file is staged (a full disk fails
    here, with nothing changed), then each old file is kept under a hard link while the new ones
    are renamed into place; if one step fails the old files go back, and if the process is killed
    the next user of the home puts them back: config.toml and auth.json never come from two imports."""
    staged: dict[str, Path | None] = {}
    _refuse_directories(directory, files)
    had = {name: os.path.lexists(directory / name) for name in files}
    import_journal.begin(directory, had)  # first: whatever a kill leaves from here is settled by the next user
    try:
        for name, data in files.items():
            staged[name] = None if data is None else _stage(directory, name, data)
        for name in files:
            _keep(directory, name, had[name])
        for name, tmp in staged.items():
            if tmp is not None:
                os.replace(tmp, directory / name)
            elif had[name]:
                os.unlink(directory / name)
        import_journal.done(directory)
    except BaseException as exc:
        try:
            import_journal.roll_back(directory, had)
        except OSError as undo:  # the journal stays: the home's next user puts them back
            raise InternalError(
                f"cannot write scvd's codex home {directory} ({_why(exc)}), and putting its old files back "
                f"failed too ({_why(undo)}): whoever uses the home next puts them back; free some space or "
                "fix its permissions, then import again") from exc
        with contextlib.suppress(OSError):  # the old files are back; the home's next user tidies the rest
            import_journal.end(directory, list(files))
        raise
    finally:
        for path in staged.values():
            if path is not None:
                import_journal.unlink(path)
    try:  # outside: once done, the kept files are never put back
        import_journal.end(directory, list(files))
    except OSError as exc:  # the import stands; the home's next user removes them (the .done journal)
        log.warning("imported into %s, but its old files' copies are left (%s); the home's next user "
                    "removes them", directory, _why(exc))


def _refuse_directories(directory: Path, names: Iterable[str]) -> None:
    """A directory where a file goes (a codex run may make one: the home is its own) can be neither
    kept under a hard link nor replaced: said naming it, before anything is written."""
    for name in names:
        path = directory / name
        with contextlib.suppress(OSError):  # none there: nothing in the way
            if stat.S_ISDIR(os.lstat(path).st_mode):
                raise Failed(f"{path} is a directory, where the import writes its {name}: move it away "
                             "(scvd never makes one there), then import again; nothing was written")


def settle_failed(directory: Path, exc: OSError) -> InternalError:
    """What the settling of an import killed midway says when it fails (done again by the next user)."""
    return InternalError(f"cannot put back what an import killed midway left in scvd's codex home {directory} "
                         f"({exc.filename or directory}: {_why(exc)}): free some space or fix its permissions, "
                         "then retry")


def _why(exc: BaseException) -> str:
    return (exc.strerror if isinstance(exc, OSError) else None) or str(exc) or type(exc).__name__


def settle_interrupted(directory: Path, names: tuple[str, ...], *, refuse_unsure: bool = True) -> None:
    """Before a home is used: undo or finish an import's commit a kill left, so an agent never runs on
    half of one (an import under way is waited for); refuse a home whose files cannot be told apart
    (unless not `refuse_unsure`)."""
    with reading(directory, names, refuse_unsure=refuse_unsure):
        pass


@contextlib.contextmanager
def reading(directory: Path, names: tuple[str, ...], *, refuse_unsure: bool = True) -> Iterator[None]:
    """The import lock shared while the caller reads `names` (so all from one import), after an import's
    commit a kill left is settled (the lock exclusive then); InvalidRequest for a home an import killed
    midway left unsure (import_journal.UNSURE) or held too long, InternalError when the lock or the
    settling fails. One flock and a few stats when there is nothing to settle."""
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        fd = -1
    except OSError as exc:
        raise _unlockable(directory, exc) from exc
    if fd < 0:  # nothing imported: the reads say so
        yield
        return
    try:
        _take(fd, directory, fcntl.LOCK_SH, "retry")
        if import_journal.interrupted(directory, names):
            # not atomic: an import may run between, settled all the same
            _lock(fd, directory, fcntl.LOCK_EX, "retry", time.monotonic() + LOCK_WAIT_SECONDS)
            try:
                found = import_journal.settle(directory, names)
            except OSError as exc:
                raise settle_failed(directory, exc) from exc
            if found == import_journal.UNSURE and refuse_unsure:
                raise InvalidRequest(
                    f"scvd's codex home {directory} may hold a key for another endpoint: an import into it was "
                    "killed midway (by an older scvd, or its journal cannot be read), so which provider each "
                    "file is for cannot be told; run `scvctl agents import codex` again")
        yield
    finally:
        os.close(fd)


def forget_leftovers(directory: Path, names: tuple[str, ...]) -> list[str]:
    """A logout: what an import killed midway by an older scvd left of `names` in a home it left unsure
    (its kept `.auth.json.old`, a key for one endpoint or the other, staged copies) removed, the home
    marked unsure first, so it stays refused until an import settles it; the names removed."""
    if not import_journal.interrupted(directory, names):  # a few stats: the common case
        return []
    with one_at_a_time(directory, then="retry"):  # an import under way keeps its kept files
        try:
            if import_journal.settle(directory, names) != import_journal.UNSURE:
                return []  # settled: nothing of an import is left
            left = import_journal.leftovers(directory, names)
            import_journal.mark_unsure(directory, names)
        except OSError as exc:
            raise settle_failed(directory, exc) from exc
    return left


@contextlib.contextmanager
def one_at_a_time(directory: Path, then: str = "import again") -> Iterator[None]:
    """An exclusive flock on `directory` while one import reads and writes it (or a logout removes what
    one left); refused saying `then`."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        _take(fd, directory, fcntl.LOCK_EX, then)
        yield
    finally:
        os.close(fd)


def _take(fd: int, directory: Path, how: int, then: str) -> None:
    """flock `how` on `directory` (open as `fd`) behind the intent lock, both within LOCK_WAIT_SECONDS:
    an import that waits holds the intent lock exclusive, so readers that come later wait behind it."""
    deadline = time.monotonic() + LOCK_WAIT_SECONDS
    try:
        intent = os.open(directory.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise _unlockable(directory, exc) from exc
    try:
        _lock(intent, directory, how, then, deadline)
        _lock(fd, directory, how, then, deadline)
    finally:
        os.close(intent)  # the intent lock goes with it: held only while waiting for the directory's


def _lock(fd: int, directory: Path, how: int, then: str, deadline: float) -> None:
    """flock `how`, waited for until `deadline` (an import stopped with Ctrl-Z must not hold the
    next one, nor a worker, for good); refused saying `then` (what the waiter does after)."""
    while True:
        try:
            fcntl.flock(fd, how | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise InvalidRequest(  # an import, or readers when an import or a settle waits
                    f"an import or a reader of it has held scvd's codex home {directory} for "
                    f"{LOCK_WAIT_SECONDS:g} s (a `scvctl agents import` stopped with Ctrl-Z?); let it "
                    f"finish or end it, then {then}") from None
            time.sleep(0.05)
        except OSError as exc:  # ENOLCK, EOPNOTSUPP: a file system without flock
            raise _unlockable(directory, exc) from exc


def _unlockable(directory: Path, exc: OSError) -> InternalError:
    return InternalError(f"cannot lock or open scvd's codex home {directory} ({_why(exc)}): fix its permissions "
                         "or move it to a file system with flock, then retry")


def _keep(directory: Path, name: str, existed: bool) -> None:
    if existed:  # a hard link: the old file stays whole while its name gets the new one
        os.link(directory / name, import_journal.kept(directory, name), follow_symlinks=False)
