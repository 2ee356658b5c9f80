"""`approvals.always_ask` globs: their syntax, the defaults, and matching a path against one.

Here, not in always_ask.py, because the configuration checks the globs before READY=1: always_ask.py
judges targets with what the server loads after it (containment, the host's places, git metadata).

Globs: `/`-separated and case-insensitive (on a case-insensitive filesystem
`.GIT/hooks/x` is `.git/hooks/x`). `*`, `?` and `[...]` match within one
component, `**` any number of components (none too, so `.git/**` names a `.git`
file as well), and a trailing `/` means `/**`. A glob matches at any depth
(`.envrc` names `sub/.envrc`, which direnv runs on `cd sub`) unless it starts
with `/`, which anchors it at the workspace root.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Sequence

# git metadata (hooks, config, a `.git` file pointing elsewhere; `.gitmodules`, which says what
# the sandbox's git guard covers), direnv, editor and CI run files
DEFAULT_ALWAYS_ASK = (".git/**", ".gitmodules", ".envrc", ".vscode/**", ".github/workflows/**", ".gitlab-ci.yml")
ANY = "**"


@dataclass(frozen=True)
class Glob:
    """One `approvals.always_ask` entry: its text, and its lower-cased components."""

    text: str
    parts: tuple[str, ...]  # starts with `**` unless the glob is anchored


def glob_problem(text: str) -> str | None:
    """What is wrong with one glob, for the configuration error; None when it is fine."""
    if not isinstance(text, str) or not text.strip("/"):
        return f"{text!r} names no path; give a glob such as '.git/**' or '/Makefile'"
    if "\x00" in text:
        return f"{text!r} contains a NUL byte"
    if any(part in (".", "..") for part in text.strip("/").split("/")):
        return (f"{text!r} has a '.' or '..' component; globs name paths inside the workspace: "
                "'.envrc' (at any depth) or '/.envrc' (at the root only)")
    return None


def parse(text: str) -> Glob:
    """A checked glob as components (raises ValueError with `glob_problem`'s text)."""
    problem = glob_problem(text)
    if problem:
        raise ValueError(problem)
    anchored = text.startswith("/")
    body = text.strip("/") + ("/**" if text.endswith("/") else "")
    parts = tuple(p for p in body.lower().split("/") if p)
    return Glob(text, parts if anchored else (ANY, *parts))


@functools.lru_cache(maxsize=16)
def compile_globs(texts: tuple[str, ...]) -> tuple[Glob, ...]:
    """The globs of one configuration, parsed once (a session's config is frozen)."""
    return tuple(parse(t) for t in texts)


def matches(glob: Glob, path: Sequence[str]) -> bool:
    """Whether the components `path` match `glob`: a set of positions in the glob, stepped per component."""
    pattern, n = glob.parts, len(glob.parts)
    states = _skip_any(pattern, {0})
    for name in path:
        name = name.lower()
        step = set()
        for i in states:
            if i == n:
                continue
            if pattern[i] == ANY:
                step.add(i)  # `**` takes this component and may take more
            elif fnmatchcase(name, pattern[i]):
                step.add(i + 1)
        if not step:
            return False
        states = _skip_any(pattern, step)
    return n in states


def _skip_any(pattern: tuple[str, ...], states: set[int]) -> set[int]:
    """`states` plus the positions reached by letting each `**` match nothing."""
    out = set(states)
    for i in sorted(states):
        while i < len(pattern) and pattern[i] == ANY:
            i += 1
            out.add(i)
    return out
