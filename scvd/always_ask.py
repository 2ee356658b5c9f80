"""Which planned targets always ask, whatever session grant or policy would run the call unasked.

Rule: a call that is not read-only and whose `Plan.targets` (the workspace paths
it reads or writes, as asked and as resolved) include one named by an
`approvals.always_ask` glob or by the secret-like rule, or one inside a git
directory that is not named `.git` (`git init --separate-git-dir`, a repo tool's
`project.git`: its config and hooks run at the next git command), or any target of
a workspace that is or lies in a git directory (`repo/.git/hooks`), or one of scvd's
own folders or its config file or a file-backed keyring's store (scvd/own_places.py), or a place whose files run later outside any
sandbox (the home's dotfiles, a directory on PATH: scvd/host_places.py), is put to a
person, and that request is approved once only (as is one whose tool found that a target holds
a secret, `Plan.always_ask`: calls.py takes it after these). Pure functions on path strings,
but for `git_dir_reason`, `in_git_dir` and `places_reason`, which look (a few lstats); nothing here knows a tool.

The globs' syntax and matching are ask_globs.py's.
"""

from __future__ import annotations

import os
from typing import Iterable, Sequence

from .ask_globs import compile_globs, matches
from .gitmeta import looks_like_git_dir
from .host_places import HOME_DIR, RUNS, STARTED_IN, home_place, real_home
from .own_places import CONFIG, KEYRING, KEYRING_FILE, ROOT, TOOL, Place, of
from .paths import within
from .tools.containment import show
from .tools.secret_paths import secret_reason


def split(target: str) -> tuple[str, ...]:
    return tuple(p for p in target.split("/") if p not in ("", "."))


def always_ask_reason(targets: Iterable[str], globs: Sequence[str], workspace: str | None = None, *,
                      folders: bool = False) -> str | None:
    """Why a call with these targets always asks (the first target that is sensitive), or None;
    with `workspace` (its real path), secret-like is judged where the targets really are; with
    `folders`, each target is a folder (a run's directory), whose name is judged as a folder's."""
    compiled = compile_globs(tuple(globs))
    for target in targets:
        parts = split(target)
        if not parts:
            continue
        for glob in compiled:
            if matches(glob, parts):
                return f"{show(target)} matches approvals.always_ask {glob.text!r}"
        secret = secret_reason(parts, workspace, folder=folders)
        if secret:
            return f"{show(target)} is secret-like ({secret})"
    return None


def git_dir_reason(workspace: str, targets: Iterable[str]) -> str | None:
    """Why a call with these targets always asks because one lies inside a git directory the
    globs cannot name (it is not called `.git`), or because the workspace is or lies in one, or None.
    A folder with a `HEAD` file and a `config`, `objects` or `refs` is taken for one: a few lstats
    per target, nearest folder first, and per folder above the workspace."""
    for target in targets:
        parts = target.split("/")
        for i in range(len(parts) - 1, 0, -1):
            if ".git" in (p.lower() for p in parts[:i]):
                break  # the `.git/**` glob's, if the configuration keeps it
            if looks_like_git_dir(os.path.join(workspace, *parts[:i])):
                return (f"{show(target)} is inside {show('/'.join(parts[:i]))}, a git directory: its config "
                        "and hooks run at the next git command")
    git_dir = enclosing_git_dir(workspace) if targets else None
    if git_dir is None:
        return None
    # a bare repository or a `.git` opened as the workspace, or a folder of one (`repo/.git/hooks`),
    # where no target's workspace-relative path says so
    where = "itself a git directory" if git_dir == workspace else f"which lies in the git directory {show(git_dir)}"
    return (f"{show(next(iter(targets)))} is inside the workspace, {where}: its config "
            "and hooks run at the next git command")


def in_git_dir(workspace: str) -> bool:
    """Whether `workspace` (a real path) is a git directory or lies inside one (a bare repository, a
    `.git` or a folder of it): its config and hooks run at the next git command there."""
    return enclosing_git_dir(workspace) is not None


def enclosing_git_dir(workspace: str) -> str | None:
    """The git directory `workspace` (a real path) is or lies in, nearest first, or None."""
    path = workspace
    while True:
        if os.path.basename(path).lower() == ".git" or looks_like_git_dir(path):
            return path
        parent = os.path.dirname(path)
        if parent == path:
            return None
        path = parent


def places_reason(workspace: str, targets: Iterable[str], own: Sequence[Place], host: frozenset[Place],
                  home: str | None = None) -> str | None:
    """Why a call with these targets always asks because one is scvd's own (`own`: own_places()) or
    where files run code later outside any sandbox (`host`: host_places.places(); `home`, scvd's own
    by default), or None. Each target is judged as named and where it really is (a link on the way
    followed, one realpath): a link in the workspace to a tool's folder leads into it as surely."""
    where = []
    for target in targets:
        named = os.path.normpath(os.path.join(workspace, target))
        where.append((target, named, os.path.realpath(named)))
    return _own_files(where, own) or _runs_later(where, host, real_home(home))


_Where = Sequence[tuple[str, str, str]]  # (target, its path as named, its real path)


def _own_files(where: _Where, own: Sequence[Place]) -> str | None:
    """A target inside scvd's folders (config.toml, a script tool's tool.json, the audit log), a folder
    a loaded tool runs from (a script tool's linked in from elsewhere) or the config file it reads
    (`--config`'s, wherever it is): a grant to write in a workspace that holds them must not let the
    agent change what scvd runs or records; or a file-backed keyring's store, as a secret-like file."""
    roots, tools, configs, keyrings = of(own, ROOT), of(own, TOOL), of(own, CONFIG), of(own, KEYRING, KEYRING_FILE)
    # all as named, then where they lead: fs and agent tools list a link's target as a target of its own,
    # which the reason then names
    for target, path in [(t, named) for t, named, _ in where] + [(t, real) for t, _, real in where]:
        for folder in roots:
            if within(path, folder):
                return f"{show(target)} is inside scvd's own folder {folder} (its configuration, tools or state)"
        for folder in tools:
            if within(path, folder):
                return (f"{show(target)} is inside {folder}, the folder of a tool scvd loaded (what it runs, "
                        "maybe unasked)")
        if path in configs:
            return f"{show(target)} is the configuration file scvd reads, {path} (it starts MCP servers unsandboxed)"
        for place in keyrings:
            if within(path, place):
                return f"{show(target)} is in {place}, where a file-backed keyring keeps every secret stored in it"
    return None


def _runs_later(where: _Where, host: frozenset[Place], home: str) -> str | None:
    """A target in the home's dotfiles (host_places.home_place: `home` and `host`'s HOME_DIR places)
    or at or inside a RUNS place of `host` (a directory on PATH or LD_LIBRARY_PATH, scvd's Python, a program scvd starts,
    a dotfile's link target), judged where it really is: a session grant to write in the home must
    not cover `.bashrc`."""
    started, dirs = of(host, STARTED_IN), of(host, HOME_DIR)
    runs = [d for d in of(host, RUNS) if d not in started] + list(started)  # the other reasons first
    for target, named, path in where:
        # the name too: `.bashrc` linked into a dotfiles repository is still what the next shell reads
        place = home_place(path, home, dirs) or home_place(named, home, dirs)
        if place is not None:
            return (f"{show(target)} is in the home's {show(place)}, whose files run code later "
                    "outside any sandbox (at the next shell, login, git command or service start)")
        found = next((d for d in runs if within(path, d)), None)
        if found in started:
            return (f"{show(target)} is inside {show(found)}, the directory scvd was started in, which "
                    "`python -m scvd` put on scvd's import path: a module written there runs outside any sandbox "
                    "at scvd's next start; start scvd as installed (its `scvd` command, e.g. `.venv/bin/scvd "
                    "run`, or the systemd unit) and this directory is not one")
        if found is not None:
            return (f"{show(target)} is inside {show(found)}, whose files run outside any sandbox later "
                    "(a directory on PATH, a library the loader outside the sandbox reads, scvd's Python, a program "
                    "scvd starts or a dotfile's link target)")
    return None
