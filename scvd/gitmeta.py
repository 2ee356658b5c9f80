"""Where a workspace's git metadata lives, for the sandbox to keep read-only.

Rule: `find()` only looks (a listing, an lstat per subdirectory, two small
reads); it never runs git. The listing has no cap: the workspace's entries
are the agent's to add, and a cap let a call push an existing child project
past it with a few thousand empty directories, leaving its `.git` writable to
the next unasked call. It reports the `.git` of the workspace and of each direct
subdirectory (child projects), a direct subdirectory that is a git dir itself (a
bare repository, a local remote: a push into it runs its hooks), and for a `.git` file (a linked worktree or a
submodule: `gitdir: PATH`) the git dir it names and that dir's `commondir` (the
main repository's git dir, where config and hooks are read). Paths are real
paths (symlinks resolved) and may lie anywhere; sandbox.build_argv() decides
which of them need a read-only bind.

A place it cannot look into (EACCES, EPERM: an unasked call may `chmod 000 app`
so that the next look misses `app/.git`) is reported as the directory that
stopped the look, kept read-only whole: what `find()` cannot see is never less
guarded than what it can. Other errors (not there, a symlink loop) mean nothing git
could use either.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from collections.abc import Callable

MAX_POINTER_BYTES = 4096  # a `.git` file or a `commondir` file is one short line
MAX_GITMODULES_BYTES = 1 << 20
MAX_SUBMODULES = 4096  # looked into; only a person's call can add one (.gitmodules is guarded)
_PATH_LINE = re.compile(r"^\s*path\s*=(.*)$", re.MULTILINE)
_DENIED = (errno.EACCES, errno.EPERM)


def find(workspace: str) -> list[str]:
    """The git metadata of `workspace` (a real path) and its direct subdirectories that exist now,
    and of every submodule their `.gitmodules` list (recursively)."""
    found: list[str] = []
    children = _children(workspace)
    if children is None:  # cannot be listed: a child project could hide in it; and its own .git
        found, children = [workspace], []  # may still name a git dir elsewhere (look into that below)
    found += [os.path.realpath(child) for child in children if looks_like_git_dir(child)]  # `app.git`
    roots = [workspace, *children]
    seen, submodules = set(roots), 0
    for root in roots:  # grows: a submodule with a `.git` is looked into in turn
        meta = _metadata(os.path.join(root, ".git"))
        listed, populated = _submodules(root, workspace) if meta else ([], [])
        for sub in populated:
            if sub not in seen and submodules < MAX_SUBMODULES:
                seen.add(sub)
                roots.append(sub)
                submodules += 1
        for path in meta + listed:
            if path not in found:
                found.append(path)
    return found


def looks_like_git_dir(folder: str) -> bool:
    """A `HEAD` file beside `config`, `objects` or `refs`: what git takes for a git dir."""
    try:
        if not stat.S_ISREG(os.lstat(os.path.join(folder, "HEAD")).st_mode):
            return False
    except OSError:
        return False
    return any(os.path.lexists(os.path.join(folder, name)) for name in ("config", "objects", "refs"))


def _submodules(repo: str, workspace: str) -> tuple[list[str], list[str]]:
    """(`repo`'s `.gitmodules` and the submodule directories it names that have no `.git` yet,
    the ones that have one).

    `git status` in `repo` runs git inside every submodule that has a `.git`, with that
    `.git`'s config (core.fsmonitor), so an unasked call must not create one in an empty
    (not initialised) submodule directory: that directory is kept read-only whole. One
    that has a `.git` is guarded like a child project. `.gitmodules` itself is kept
    read-only, so a call cannot hide an entry from the next call's look (git finds
    submodules in the index, which is guarded).
    """
    listing = os.path.join(repo, ".gitmodules")
    text = _head(listing, MAX_GITMODULES_BYTES)
    if text is None:
        return [], []
    empty, populated = [os.path.realpath(listing)], []
    for match in _PATH_LINE.finditer(text):
        name = match.group(1).strip().strip('"')
        sub = os.path.realpath(os.path.join(repo, name))
        if not name or os.path.isabs(name) or not sub.startswith(workspace + os.sep):
            continue
        mode = _mode(sub, os.stat)
        if isinstance(mode, str):
            empty.append(mode)  # cannot be looked at: kept read-only, as an empty one is
        elif mode is not None and stat.S_ISDIR(mode):
            git = _mode(os.path.join(sub, ".git"), os.lstat)
            (empty if git is None or isinstance(git, str) else populated).append(sub)
    return empty, populated


def _children(workspace: str) -> list[str] | None:
    """The direct subdirectories of `workspace`; None if it exists but cannot be listed."""
    out: list[str] = []
    try:
        with os.scandir(workspace) as entries:
            for entry in entries:
                if entry.name != ".git" and _is_dir(entry):
                    out.append(entry.path)
    except OSError as exc:
        return None if exc.errno in _DENIED else []
    return out


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
    have left a FIFO there, and this runs on scvd's loop before each such call."""
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
