"""Private agent homes: $SCV_HOME/adapters/<name>, directories 0700 and files 0600.

The daemon creates a home before each use and repairs it after each run, because
the real CLIs create their own folders 0755 and files 0644. Repairs are logged. An
import into the home killed midway is undone before its next use (import_journal.py), and a
home left so that it cannot be is refused until an import settles it.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from .. import paths as scv_paths
from ..errors import Failed, InternalError, InvalidRequest
from .env import home_layout

log = logging.getLogger("scvd.adapters")

# the homes an import writes into (`scvctl agents import`): only theirs settle one, under its lock, so
# an import that waits for codex's home holds up no other agent
IMPORTED_HOMES = frozenset({"codex"})


def home_dir(paths: Any, name: str) -> Path:
    """Where agent `name` keeps its sign-in and state."""
    return Path(paths.adapters_dir) / name


def ensure_home(paths: Any, name: str, *, settle: bool = True, refuse_unsure: bool = True) -> Path:
    """Create the home and its XDG / SCV_HOME folders 0700, repair loose modes; return it.

    A home scvd cannot make or make private is refused, naming the path and why: no agent
    runs with its sign-in readable by others. Not `settle`: for an import, which settles the
    home itself (and is the one user a home left unsure does not refuse). Not `refuse_unsure`: a
    logout, which only removes a sign-in (settled first, so no kept key comes back after it).
    """
    home = home_dir(paths, name)
    try:
        _ensure_home(paths, name, home)
    except OSError as exc:  # a file owned by someone else (root, after a `sudo`), a full disk
        where = exc.filename or home
        raise Failed(
            f"cannot make the {name} home {home} private ({where}: {exc.strerror or exc}); "
            "give that path back to your user (chown) or move it away, then retry"
        ) from exc
    if settle and name in IMPORTED_HOMES:
        _settle_import(home, refuse_unsure)
    return home


def _settle_import(home: Path, refuse_unsure: bool) -> None:
    """An import killed midway left one file of its own beside one from before (a new provider's
    config beside the old one's key): put the old ones back before anything reads the home."""
    from .codex_home import IMPORTED  # here: the idle daemon does not load the import's modules
    from .import_files import settle_interrupted

    try:
        settle_interrupted(home, IMPORTED, refuse_unsure=refuse_unsure)
    except (InvalidRequest, InternalError) as exc:  # held too long, left unsure, the lock or settling failed
        raise Failed(exc.message) from None


def forget_leftovers(paths: Any, name: str) -> list[str]:
    """A logout: remove the copies of a home's files (a key among them) that an import killed midway by an
    older scvd left (the home stays refused until an import settles it); the names removed, logged."""
    if name not in IMPORTED_HOMES:
        return []
    from .codex_home import IMPORTED
    from .import_files import forget_leftovers as forget

    home = home_dir(paths, name)
    try:
        removed = forget(home, IMPORTED)
    except (InvalidRequest, InternalError) as exc:  # held too long, the lock or the removal failed
        raise Failed(exc.message) from None
    if removed:
        log.info("logout: removed %s from the %s home, left by an import an older scvd did not finish",
                 ", ".join(removed), name)
    return removed


def _ensure_home(paths: Any, name: str, home: Path) -> Path:
    for d in (Path(paths.data_dir), Path(paths.adapters_dir)):  # SCV_HOME too: scvctl may come before scvd
        scv_paths.ensure_private_dir(d)
    if home.is_symlink() or (home.exists() and not home.is_dir()):
        raise Failed(
            f"the {name} home {home} must be a directory owned by scvd, not a link or a file; "
            "move it away and retry"
        )
    linked: list[Path] = []  # folders the user linked elsewhere: theirs, neither made nor tightened
    # parents first: mkdir(parents=True) would create `.local` with the umask's mode
    for d in sorted({home, home / ".local", *home_layout(home).values()}):
        if any(d.is_relative_to(link) for link in linked):
            continue
        if d.is_symlink() or (d.exists() and not d.is_dir()):
            if d.is_symlink() and d.is_dir():
                linked.append(d)
                continue
            what = "a link to nothing" if d.is_symlink() and not d.exists() else "not a directory"
            raise Failed(f"{d} in the {name} home is {what}; move it away (or link it to a directory) and retry")
        d.mkdir(mode=scv_paths.DIR_MODE, exist_ok=True)
    # one there already is tightened by the walk, which never follows a folder swapped for a
    # symlink since the look above (by another run of the agent); a chmod by path would
    notes = scv_paths.repair_tree(home)
    _log_repairs(name, notes)
    return home


def repair_home(paths: Any, name: str) -> list[str]:
    """Tighten everything under the home to 0700 / 0600; log and return what changed.

    It runs after a run, which has its result: a path it cannot fix is logged, not raised
    (the result would be lost), and ensure_home() refuses the next run until it is fixed.
    """
    try:
        notes = scv_paths.repair_tree(home_dir(paths, name))
    except OSError as exc:
        log.warning("cannot make %s in the %s home private (%s); its next run is refused until it is fixed",
                    exc.filename, name, exc.strerror or exc)
        return []
    _log_repairs(name, notes)
    return notes


def _log_repairs(name: str, notes: list[str]) -> None:
    # one line per repair pass: a codex run alone creates dozens of 0644 files
    if notes:
        log.info("repaired %d loose modes in the %s home, e.g. %s", len(notes), name, notes[0])
