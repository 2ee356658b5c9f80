"""The journal of an import's commit into a private home, so that one killed midway is undone or finished.

- `commit_files` (import_files.py) writes `.scvd-import.undo` (the names it changes, and which of them
  had a file, kept as `.NAME.old` from then on) before it stages or changes any; once every new file
  is in place it renames the journal `.scvd-import.done`, removes the kept files, then the journal.
- The next user of the home (an import, an agent's run or sign-in, a chat turn reading it) settles
  a journal left behind, under the import lock: `.undo` puts every old file back and removes each
  new one that had none, `.done` removes the kept files. Both may be killed and done again.
- So a `.NAME.old` without a journal was left by an scvd before this one (or a journal that cannot
  be read): whose each file is cannot be told then (`UNSURE`). Only an import settles that: it marks
  the home `.scvd-import.unsure` before it removes those leftovers, and its commit (`done`) removes the
  mark; until then every other user is refused, even after a kill or a failure between the two.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from ..errors import NotARegularFile
from ..paths import read_regular_file

UNDO = ".scvd-import.undo"
DONE = ".scvd-import.done"
_TMP = ".scvd-import.tmp"  # the journal being written: under the lock, one at a time
UNSURE_MARK = ".scvd-import.unsure"  # an import is settling an UNSURE home: unsure until it commits
MAX_JOURNAL_BYTES = 4096

UNDONE, FINISHED, UNSURE = "undone", "finished", "unsure"  # what `settle` found


def kept(directory: Path, name: str) -> Path:
    """Where the commit keeps the old `name` (a hard link) until it is done or undone."""
    return directory / f".{name}.old"


def begin(directory: Path, had: dict[str, bool]) -> None:
    """Journal the commit of `had`'s names (True: the name has a file now, kept before it changes)."""
    fd = os.open(directory / _TMP, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(json.dumps(had).encode())
        f.flush()
        os.fsync(f.fileno())
    os.replace(directory / _TMP, directory / UNDO)
    _sync(directory)  # on disk before any file it names changes


def done(directory: Path) -> None:
    """Every new file is in place: from here a kill is finished (`end`), not undone."""
    os.replace(directory / UNDO, directory / DONE)
    _sync(directory)
    unlink(directory / UNSURE_MARK)  # after: a kill between is FINISHED, which removes it too


def end(directory: Path, names: list[str]) -> None:
    """Remove what the commit of `names` left (kept files, staged copies: a copy of a key among them),
    then the journal (last: until then a kill is settled again)."""
    for name in leftovers(directory, names):
        unlink(directory / name)
    for path in (directory / _TMP, directory / DONE, directory / UNDO):
        unlink(path)


def leftovers(directory: Path, names: list[str] | tuple[str, ...]) -> list[str]:
    """The kept files and staged copies of `names` in `directory`: what end() removes (an editor's
    `.config.toml.swp` is none of them)."""
    kept_names = {kept(directory, n).name for n in names}
    with os.scandir(directory) as entries:
        return sorted(e.name for e in entries if e.name in kept_names or (
            e.name.endswith(".tmp") and e.name.startswith(tuple(f".{n}." for n in names))))


def roll_back(directory: Path, had: dict[str, bool]) -> None:
    """Put each old file back, and remove each new file that had none. Done twice, it changes nothing
    more: a name that had a file but has no kept one was put back already (or never replaced)."""
    for name, existed in had.items():
        old = kept(directory, name)
        if not existed:
            unlink(directory / name)
        elif os.path.lexists(old):
            os.replace(old, directory / name)


def settle(directory: Path, names: tuple[str, ...]) -> str | None:
    """Undo or finish a commit a kill left (the import lock held), and remove its leftovers and those
    of `names`; UNDONE, FINISHED, None (nothing), or UNSURE: kept files without a readable journal, or
    a home marked unsure, the kept files left as found for an import to settle (`mark_unsure`)."""
    journal = next((j for j in (UNDO, DONE) if os.path.lexists(directory / j)), None)
    if journal is not None:
        had = _read(directory / journal)
        if had is None:
            return UNSURE  # which files changed cannot be told
        if journal == UNDO:
            roll_back(directory, had)
        else:
            unlink(directory / UNSURE_MARK)  # its import committed: the home holds its files alone
        names = (*names, *had)
    elif any(os.path.lexists(kept(directory, n)) for n in names):
        return UNSURE  # an older scvd's
    end(directory, list(names))
    if os.path.lexists(directory / UNSURE_MARK):
        return UNSURE  # the import settling it was killed or failed before its commit
    return {UNDO: UNDONE, DONE: FINISHED}.get(journal or "")


def mark_unsure(directory: Path, names: tuple[str, ...]) -> None:
    """An import settles an UNSURE home: mark it so (on disk first), then remove the leftovers, which
    its own commit would trip over; the mark goes with that commit."""
    fd = os.open(directory / UNSURE_MARK, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    os.close(fd)
    _sync(directory)
    end(directory, list(names))


def interrupted(directory: Path, names: tuple[str, ...]) -> bool:
    """A journal (or one being written), a kept file of `names` or the unsure mark is there: a commit
    is under way or was killed. A few stats: the common case, before each agent run and chat turn."""
    found = [directory / j for j in (UNDO, DONE, _TMP, UNSURE_MARK)] + [kept(directory, n) for n in names]
    return any(os.path.lexists(path) for path in found)


def _read(journal: Path) -> dict[str, bool] | None:
    try:
        had = json.loads(read_regular_file(journal, MAX_JOURNAL_BYTES))
    except (OSError, ValueError, RecursionError, NotARegularFile):  # RecursionError: nested too deeply
        return None
    plain = isinstance(had, dict) and all(  # a name with a slash would reach outside the home
        isinstance(k, str) and isinstance(v, bool) and k == os.path.basename(k) and not k.startswith(".") and k
        for k, v in had.items())
    return had if plain else None


def _sync(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def unlink(path: Path) -> None:
    """Remove `path` if it is there (a kill may have removed it already)."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
