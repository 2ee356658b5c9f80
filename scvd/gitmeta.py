"""Where a workspace's git metadata lives, for the sandbox to keep read-only.

Rule: `find()` only looks (a listing per directory, two small reads per
repository); it never runs git. It walks the whole workspace, except what the
sandbox hides (`skip`) and symlinked directories, and reports every `.git`
(a directory, or a file: a linked worktree or a submodule, `gitdir: PATH`,
with the git dir it names and that dir's `commondir`, the main repository's
git dir, where config and hooks are read), every directory that is a git dir
itself (a bare repository, a local remote: a push into it runs its hooks), and
of each repository its `.gitmodules` and the listed submodule directories that
have no `.git` yet. Paths are real paths (symlinks resolved) and may lie
anywhere; sandbox.build_argv() decides which of them need a read-only bind.

The walk has a budget (`MAX_ENTRIES` entries listed, `.gitmodules` lines
included), not a cap on what it reports: past the budget it raises
`LimitExceeded`, and the call cannot be guarded (it asks a person instead).
A cap that ended the look quietly let a call push an existing child project
past it with a few thousand empty directories, leaving its `.git` writable.

A place it cannot look into (EACCES, EPERM: an unasked call may `chmod 000 app`
so that the next look misses `app/.git`) is reported as the directory that
stopped the look, kept read-only whole: what `find()` cannot see is never less
guarded than what it can. Other errors (not there, a symlink loop) mean nothing git
could use either.
"""

from __future__ import annotations

import errno
import itertools
import os
import re
import stat
from collections.abc import Callable, Collection

from .errors import LimitExceeded

MAX_POINTER_BYTES = 4096  # a `.git` file or a `commondir` file is one short line
MAX_GITMODULES_BYTES = 1 << 20
# entries listed before the look gives up: about 0.6 s on a warm cache here (docs/security.md)
MAX_ENTRIES = 200_000
# [ \t], not \s: \s took newlines too, N^2 steps on a .gitmodules of blank lines (1 MiB: minutes, the GIL
# held, every client of scvd waiting); a key of any case, as git reads it (`Path = m`)
_PATH_LINE = re.compile(r"^[ \t]*path[ \t]*=(.*)$", re.MULTILINE | re.IGNORECASE)
_DENIED = (errno.EACCES, errno.EPERM)
_GIT_DIR_MARKS = ("config", "objects", "refs")  # beside a HEAD file: what git takes for a git dir

# what a call whose git metadata cannot all be kept read-only needs: then it keeps only .git/hooks and
# .git/config read-only, as every approved call does
UNGUARDED_FIX = ("approve the call itself (a session grant does not do), or open the session on a project "
                 "inside the workspace")


def find(workspace: str, *, skip: Collection[str] = (), budget: int | None = None) -> list[str]:
    """The git metadata of `workspace` (a real path) and of every directory below it, but those
    in `skip` (real paths) and symlinked ones; raises LimitExceeded past `budget` entries (MAX_ENTRIES)."""
    look = _Look(workspace, frozenset(skip), MAX_ENTRIES if budget is None else budget)
    look.walk()
    return list(look.found)


class _Look:
    """One walk: what it found (in the order found, once each) and what it may still list."""

    def __init__(self, workspace: str, skip: frozenset[str], budget: int) -> None:
        self.workspace, self.skip, self.budget, self.left = workspace, skip, budget, budget
        self.found: dict[str, None] = {}

    def add(self, paths: list[str]) -> None:
        self.found.update(dict.fromkeys(paths))

    def spend(self, count: int) -> None:
        self.left -= count
        if self.left < 0:
            raise LimitExceeded(
                f"{self.workspace} holds more than {self.budget:,} files, directories and submodule entries: "
                "too many to find each git repository in it and keep its config and hooks read-only",
                hint=UNGUARDED_FIX)

    def walk(self) -> None:
        pending = [self.workspace]
        while pending:
            folder = pending.pop()
            subdirs = self._visit(folder)
            pending += reversed(subdirs)  # depth first, in directory order

    def _visit(self, folder: str) -> list[str]:
        """Report `folder`'s git metadata; its subdirectories to look into next."""
        listing = _listing(folder, self.left + 1)
        if listing is None:  # cannot be listed: a repository could hide in it; and its own .git
            self.add([folder])  # may still name a git dir elsewhere (looked into below)
        self.spend(len(listing or ()))
        names = {entry.name for entry in listing or ()}
        # `app.git`: kept whole, not entered (the listing first: a HEAD is rare, a look costs syscalls)
        if folder != self.workspace and "HEAD" in names and looks_like_git_dir(folder):
            self.add([folder])
            return []
        meta = _metadata(os.path.join(folder, ".git")) if ".git" in names or listing is None else []
        if meta:
            self.add(meta)
            self.add(self._submodules(folder))
        return [e.path for e in listing or () if e.name != ".git" and e.path not in self.skip and _is_dir(e)]

    def _submodules(self, repo: str) -> list[str]:
        """`repo`'s `.gitmodules` and the submodule directories it names that have no `.git` yet.

        `git status` in `repo` runs git inside every submodule that has a `.git`, with that
        `.git`'s config (core.fsmonitor), so an unasked call must not create one in an empty
        (not initialised) submodule directory: that directory is kept read-only whole. One
        that has a `.git` is found by the walk. `.gitmodules` itself is kept read-only, so a
        call cannot hide an entry from the next call's look (git finds submodules in the index,
        which is guarded).
        """
        listing = os.path.join(repo, ".gitmodules")
        text = _head(listing, MAX_GITMODULES_BYTES)
        if text is None:
            return []
        empty = [os.path.realpath(listing)]
        for match in _PATH_LINE.finditer(text):
            self.spend(1)
            name = match.group(1).strip().strip('"')
            sub = os.path.realpath(os.path.join(repo, name))
            if not name or os.path.isabs(name) or not sub.startswith(self.workspace + os.sep):
                continue
            mode = _mode(sub, os.stat)
            if isinstance(mode, str):
                empty.append(mode)  # cannot be looked at: kept read-only, as an empty one is
            elif mode is not None and stat.S_ISDIR(mode):
                git = _mode(os.path.join(sub, ".git"), os.lstat)
                if git is None or isinstance(git, str):
                    empty.append(sub)
        return empty


def looks_like_git_dir(folder: str) -> bool:
    """A `HEAD` file beside `config`, `objects` or `refs`: what git takes for a git dir."""
    try:
        if not stat.S_ISREG(os.lstat(os.path.join(folder, "HEAD")).st_mode):
            return False
    except OSError:
        return False
    return any(os.path.lexists(os.path.join(folder, name)) for name in _GIT_DIR_MARKS)


def _listing(folder: str, limit: int) -> list[os.DirEntry] | None:
    """The entries of `folder`, at most `limit`; None if it exists but cannot be listed."""
    try:
        with os.scandir(folder) as entries:
            return list(itertools.islice(entries, limit))
    except OSError as exc:
        return None if exc.errno in _DENIED else []


def _is_dir(entry: os.DirEntry) -> bool:
    try:
        return entry.is_dir(follow_symlinks=False)
    except OSError:
        return True  # cannot tell: looked into as a child project, which reports what stops it


def _mode(path: str, how: Callable[[str], os.stat_result]) -> int | str | None:
    """`path`'s st_mode by `how` (os.stat or os.lstat), or None; if permission is denied, the
    directory that stopped the look (the deepest one above `path` that can be lstat'ed)."""
    try:
        return how(path).st_mode
    except OSError as exc:
        if exc.errno not in _DENIED:
            return None
    blocker = os.path.dirname(path)
    while blocker != os.path.dirname(blocker):
        try:
            os.lstat(blocker)
            break
        except OSError:
            blocker = os.path.dirname(blocker)
    return blocker


def _metadata(entry: str) -> list[str]:
    """`entry` (a `.git`) resolved, plus the git dir a `.git` file names and its commondir."""
    if isinstance(there := _mode(entry, os.lstat), str):
        return [there]
    if there is None:
        return []
    real = os.path.realpath(entry)
    mode = _mode(real, os.stat)
    if isinstance(mode, str):
        return [mode]
    if mode is not None and stat.S_ISDIR(mode):
        return [real, *_pointer(real, "commondir", relative_to=real)]
    if mode is None or not stat.S_ISREG(mode):
        return []
    gitdir = _pointer(real, None, relative_to=os.path.dirname(real))
    return [real, *gitdir, *(p for g in gitdir for p in _pointer(g, "commondir", relative_to=g))]


def _pointer(where: str, name: str | None, *, relative_to: str) -> list[str]:
    """The existing directory named by the file `where/name` (or the `.git` file `where`)."""
    path = os.path.join(where, name) if name else where
    text = _head(path, MAX_POINTER_BYTES)
    if text is None:
        return []
    line = text.splitlines()[0].strip() if text.strip() else ""
    if name is None:  # a .git file: "gitdir: PATH"
        if not line.startswith("gitdir:"):
            return []
        line = line.removeprefix("gitdir:").strip()
    if not line:
        return []
    target = os.path.realpath(os.path.join(relative_to, line))
    mode = _mode(target, os.stat)
    if isinstance(mode, str):
        return [mode]
    return [target] if mode is not None and stat.S_ISDIR(mode) else []


def _head(path: str, limit: int) -> str | None:
    """The first `limit` bytes of a regular file, or None. Never blocks: an unasked call may
    have left a FIFO there, and this runs (on a worker thread) before each such call."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return os.read(fd, limit).decode("utf-8", "replace")
    except OSError:
        return None
    finally:
        os.close(fd)
