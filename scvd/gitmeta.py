"""Where a workspace's git metadata lives, for the sandbox to keep read-only.

Rule: `find()` only looks (a listing, an lstat per subdirectory, two small
reads); it never runs git. The listing has no cap: the workspace's entries
are the agent's to add, and a cap let a call push an existing child project
past it with a few thousand empty directories, leaving its `.git` writable to
the next unasked call. It reports the `.git` of the workspace and of each direct
subdirectory (child projects), and for a `.git` file (a linked worktree or a
submodule: `gitdir: PATH`) the git dir it names and that dir's `commondir` (the
main repository's git dir, where config and hooks are read). Paths are real
paths (symlinks resolved) and may lie anywhere; sandbox.build_argv() decides
which of them need a read-only bind.
"""

from __future__ import annotations

import os
import re
import stat

MAX_POINTER_BYTES = 4096  # a `.git` file or a `commondir` file is one short line
MAX_GITMODULES_BYTES = 1 << 20
MAX_SUBMODULES = 4096  # looked into; only a person's call can add one (.gitmodules is guarded)
_PATH_LINE = re.compile(r"^\s*path\s*=(.*)$", re.MULTILINE)


def find(workspace: str) -> list[str]:
    """The git metadata of `workspace` (a real path) and its direct subdirectories that exist now,
    and of every submodule their `.gitmodules` list (recursively)."""
    found: list[str] = []
    roots = [workspace, *_children(workspace)]
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
        if not name or os.path.isabs(name) or not sub.startswith(workspace + os.sep) or not os.path.isdir(sub):
            continue
        (populated if os.path.lexists(os.path.join(sub, ".git")) else empty).append(sub)
    return empty, populated


def _children(workspace: str) -> list[str]:
    out: list[str] = []
    try:
        with os.scandir(workspace) as entries:
            for entry in entries:
                if entry.name != ".git" and entry.is_dir(follow_symlinks=False):
                    out.append(entry.path)
    except OSError:
        return []
    return out


def _metadata(entry: str) -> list[str]:
    """`entry` (a `.git`) resolved, plus the git dir a `.git` file names and its commondir."""
    if not os.path.lexists(entry):
        return []
    real = os.path.realpath(entry)
    if os.path.isdir(real):
        return [real, *_pointer(real, "commondir", relative_to=real)]
    if not os.path.isfile(real):
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
    return [target] if os.path.isdir(target) else []


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
