"""An import's writes into a private home: all its files or none, one import at a time.

- Every new file is staged (0600, fsynced) before any is renamed into place; if a step fails the
  old files go back, so a home never holds files from two imports.
- One import at a time per home: a flock on the directory (the daemon's and a direct scvctl's
  alike), waited for up to LOCK_WAIT_SECONDS.
- What an import that died midway staged (a copy of a key among it) is swept by the next.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator
from pathlib import Path

from ..errors import InvalidRequest

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
        _unlink(Path(tmp))
        raise
    return Path(tmp)


def _unlink(path: Path) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def commit_files(directory: Path, files: dict[str, bytes | None]) -> None:
    """Write (bytes) or remove (None) each of `files` in `directory`, all or none.

    Every new file is staged first (a full disk fails here, with nothing changed). Each old
    file is then kept under a hard link while the new ones are renamed into place; if one step
    fails, the old files go back, so config.toml and auth.json never come from two imports."""
    staged: dict[str, Path | None] = {}
    kept: dict[str, Path | None] = {}  # name -> hard link of its old file (None: there was none)
    settled = False  # done or undone; if undoing fails, the old files stay beside as .NAME.old
    try:
        for name, data in files.items():
            staged[name] = None if data is None else _stage(directory, name, data)
        for name, tmp in staged.items():
            kept[name] = _keep(directory, name)
            if tmp is not None:
                os.replace(tmp, directory / name)
            elif kept[name] is not None:
                os.unlink(directory / name)
        settled = True
    except BaseException:
        _restore(directory, kept)
        settled = True
        raise
    finally:
        for path in [*staged.values(), *(kept.values() if settled else ())]:
            if path is not None:
                _unlink(path)


@contextlib.contextmanager
def one_at_a_time(directory: Path) -> Iterator[None]:
    """An exclusive flock on `directory` while one import reads and writes it; waited for up to
    LOCK_WAIT_SECONDS (an import stopped with Ctrl-Z must not hold the next one, nor a worker, for good)."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        deadline = time.monotonic() + LOCK_WAIT_SECONDS
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise InvalidRequest(
                        f"another import into scvd's codex home {directory} has been under way for "
                        f"{LOCK_WAIT_SECONDS:g} s (a `scvctl agents import` stopped with Ctrl-Z?); let it "
                        "finish or end it, then import again") from None
                time.sleep(0.05)
        yield
    finally:
        os.close(fd)


def sweep(directory: Path, names: tuple[str, ...]) -> None:
    """Remove what `_stage` left of an import that died before its end: a copy of a key, too."""
    with os.scandir(directory) as entries:
        stale = [e.path for e in entries
                 if e.name.endswith(".tmp") and e.name.startswith(tuple(f".{n}." for n in names))]
    for path in stale:
        _unlink(Path(path))


def _keep(directory: Path, name: str) -> Path | None:
    link = directory / f".{name}.old"
    _unlink(link)
    try:
        os.link(directory / name, link)
    except FileNotFoundError:
        return None
    return link


def _restore(directory: Path, kept: dict[str, Path | None]) -> None:
    for name, link in kept.items():
        if link is not None:
            os.replace(link, directory / name)
        else:
            _unlink(directory / name)
