"""Search paths in scvd's environment: no entry that a process scvd starts reads against its working directory.

An empty or relative entry of a search path (PATH, LD_LIBRARY_PATH, ...) is read against the working
directory of the process that reads it, and what scvd starts starts in a session's workspace, which
an unasked sandboxed call writes: `LD_LIBRARY_PATH=/opt/x/lib:` had bwrap itself, outside the
sandbox, load a libcap.so.2 a call left there, and `PATH=:/usr/bin` had a script tool's
`#!/usr/bin/env python3` run a ./python3 with its secrets. So scvd drops those entries from its own
environment once, at start (`clean_environ()`, before it looks a program up or starts one): every
child inherits the cleaned environment, and scvd's own lookups (bwrap, the agents, MCP commands)
find what the children find. Absolute entries stay; a workspace that holds one asks for every call
(host_places.py). A relative XDG base directory is dropped too (`relative_bases()`): the XDG spec
calls one invalid, to be ignored, as platformdirs does for scvd's own folders, but git takes a
relative XDG_CONFIG_HOME from its working directory, and the `git/config` an unasked call writes
there set a pager that git run later ran. A stdio MCP server's configured `env` is cleaned the same
way at each of its starts (`clean_all()`), and config.load warns of what that drops (`set_by()`,
`table_notes()`): its working directory may be a workspace too, and so may those of the programs it
starts. A leading `~` there is scvd's HOME first (`expand_home()`), as in a configured `cwd`; not in
scvd's own environment, where only bash would expand it (not systemd, execvp, the loader). Pure
functions but `clean_environ()`, the one that changes os.environ; it runs before scvd's own folders
are looked up, which take a relative XDG directory as unset all the same (docs/operations.md).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Iterable, Mapping

# the variables whose entries a common program looks code up in, and what separates the entries.
# Kept short: each is read by what scvd starts (bash, a script's interpreter, an agent's Node, bwrap's
# loader) and resolves a relative entry against the working directory
SEARCH_PATHS = {
    "PATH": ":",  # programs: execvp, bash, env, Python's subprocess
    "LD_LIBRARY_PATH": ":;",  # the dynamic loader's libraries; glibc splits at `;` too
    "LD_PRELOAD": ": ",  # libraries loaded into every program; glibc splits at spaces too
    "LD_AUDIT": ":",  # the loader's audit libraries
    "PYTHONPATH": ":",  # Python's imports
    "NODE_PATH": ":",  # Node's require()
    "PERL5LIB": ":",  # Perl's @INC
    "PERLLIB": ":",
    "RUBYLIB": ":",  # Ruby's $LOAD_PATH
}
# lists of libraries, not of directories: an entry without a slash is a name the loader looks up
# on its library path, not in the working directory
LIBRARY_LISTS = frozenset({"LD_PRELOAD", "LD_AUDIT"})
# the XDG base directories: one names a single absolute directory, and a relative one is unset
XDG_BASES = ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME", "XDG_RUNTIME_DIR")
# the loader's variables: it expands `$ORIGIN` (`${ORIGIN}`) at an entry's start to the folder of the
# program it loads for, an absolute path, not the working directory. `$LIB` and `$PLATFORM` name a
# folder's name, which a relative entry reads against the working directory still
LOADER = frozenset({"LD_LIBRARY_PATH", "LD_PRELOAD", "LD_AUDIT"})
ORIGIN = re.compile(r"\$(?:\{ORIGIN\}|ORIGIN(?![A-Za-z0-9_]))")  # glibc's is_dst: `$ORIGINX` is no token
# a variable an entry names, `$HOME` or `${HOME}`: only the loader expands some, its own (LOADER_TOKENS)
VARIABLE = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)")
LOADER_TOKENS = frozenset({"ORIGIN", "LIB", "PLATFORM"})
# the PATH of a child whose scvd has none left: bash without PATH uses its own default, which ends in `.`
FALLBACK_PATH = "/usr/bin:/bin"


@dataclass(frozen=True)
class Dropped:
    """What clean() took out of one variable: its entries read against the working directory."""

    name: str
    entries: tuple[str, ...]  # "" for the empty entry; () when PATH was unset
    now: str | None  # the variable's value now, None when it is unset


def entries(env: Mapping[str, str], name: str) -> list[str]:
    """The entries of `name` in `env`, empty ones too (an empty value has none)."""
    value = env.get(name, "")
    if not value:
        return []
    for sep in SEARCH_PATHS[name][1:]:
        value = value.replace(sep, SEARCH_PATHS[name][0])
    return value.split(SEARCH_PATHS[name][0])


def read_against_cwd(name: str, entry: str) -> bool:
    """Whether a program reads `entry` of `name` against its working directory: an empty or
    relative one (in a list of libraries: one with a slash that is not absolute), but the loader's
    that starts at `$ORIGIN`."""
    if name in LOADER and ORIGIN.match(entry):
        return False
    if name in LIBRARY_LISTS:
        return "/" in entry and not entry.startswith("/")
    return not entry.startswith("/")


def clean(env: Mapping[str, str]) -> tuple[dict[str, str], list[Dropped]]:
    """`env` with the entries read against the working directory dropped from each SEARCH_PATHS
    variable (left with none: unset), and PATH set to FALLBACK_PATH when it is unset or left with
    none; and what was dropped. A variable with nothing to drop keeps its value as it was."""
    out, dropped = dict(env), []
    for name in SEARCH_PATHS:
        found = entries(env, name)
        gone = tuple(e for e in found if read_against_cwd(name, e))
        if not gone:
            continue
        kept = [e for e in found if e and e not in gone]
        if kept:
            out[name] = ":".join(kept)
        else:
            out.pop(name)
        dropped.append(Dropped(name, gone, None))
    if not out.get("PATH"):
        out["PATH"] = FALLBACK_PATH
        if not any(d.name == "PATH" for d in dropped):
            dropped.append(Dropped("PATH", (), None))
    return out, [Dropped(d.name, d.entries, out.get(d.name)) for d in dropped]


def relative_bases(env: Mapping[str, str]) -> list[Dropped]:
    """The XDG_BASES set relative in `env`, each to be unset (an empty one is unset already, as the
    spec and git read it)."""
    return [Dropped(name, (env[name],), None) for name in XDG_BASES if env.get(name) and not env[name].startswith("/")]


def clean_all(env: Mapping[str, str]) -> tuple[dict[str, str], list[Dropped]]:
    """clean(), and each relative_bases() unset: what a child's environment is cleaned to, scvd's own
    at start and a stdio MCP server's configured `env` at each of its starts."""
    out, dropped = clean(env)
    bases = relative_bases(out)
    for base in bases:
        del out[base.name]
    return out, dropped + bases


def expand_home(table: Mapping[str, str], home: str) -> dict[str, str]:
    """`table` (an MCP server's `env`) with each search path's and XDG base's entry that is `~` or starts
    with `~/` starting at `home` instead (scvd's HOME), as the config reads `~` in a `cwd`; bash does as
    much for PATH, so `PATH = "~/bin:/usr/bin"` served bash-run servers. `~user` and `$VAR` stay as written:
    read against the working directory, they are dropped."""
    out = dict(table)
    for name in (*SEARCH_PATHS, *XDG_BASES):
        found = entries(table, name) if name in SEARCH_PATHS else [table.get(name, "")]
        if any(_at_home(e) for e in found):
            # as os.path.expanduser() does: a HOME of `/` gives `/bin`, not `//bin`
            out[name] = ":".join((home.rstrip("/") + e[1:]) or "/" if _at_home(e) else e for e in found)
    return out


def _at_home(entry: str) -> bool:
    """Whether `entry` starts at `~`, as the config's paths may (`~user` does not)."""
    return entry == "~" or entry.startswith("~/")


def set_by(table: Mapping[str, str], home: str) -> list[Dropped]:
    """What clean_all() changes of the variables `table` sets (an MCP server's `env`), its `~` expanded
    against `home`: PATH's fallback only when the table sets an empty PATH (one it leaves out is scvd's
    own, cleaned already)."""
    return [d for d in clean_all(expand_home(table, home))[1] if d.name in table]


def from_store_problem(name: str, runs: str) -> str | None:
    """Why the variable `name` cannot take its value from the secret store (an MCP server's `{secret = KEY}`,
    a script tool's declared secret), or None: a search path, whose value would reach `runs` unchecked."""
    if name not in SEARCH_PATHS and name not in XDG_BASES:
        return None
    return (f"{name} is a search path, no secret: read from the secret store at each start, it is neither checked "
            f"nor shown, and it decides which code {runs} runs")


def _shown(d: Dropped) -> tuple[str, str]:
    """The dropped entries as a message lists them, and what the variable is now."""
    return ", ".join(repr(e) for e in d.entries), f"it is now {d.now!r}" if d.now is not None else "it is now unset"


def notes(dropped: Iterable[Dropped]) -> list[str]:
    """A log line for each variable clean() changed, with what a user whose tool relied on it does."""
    lines = []
    for d in dropped:
        if not d.entries:
            lines.append(f"scvd's environment has no PATH, and bash without one looks in its working directory "
                         f"(a session's workspace): the processes scvd starts get PATH={FALLBACK_PATH!r}")
            continue
        shown, now = _shown(d)
        # dropped, not expanded, here: bash expands a `~`, but execvp, the loader and the interpreters read `./~`
        tilde = ("; only bash expands a `~` there, and systemd does not: write %h for your home in a unit's "
                 "Environment=" if any(e.startswith("~") for e in d.entries) else "")
        lines.append(f"dropped {shown} from scvd's {d.name} ({now}): each process scvd starts would read it against "
                     f"its working directory, a session's workspace, where unasked calls write; name that "
                     f"directory by its absolute path in scvd's environment instead{tilde} (docs/security.md)")
    return lines


def table_notes(key: str, dropped: Iterable[Dropped], cwd: str | None = None) -> list[str]:
    """A warning for each variable of the configured table `key` (`mcp.servers.NAME.env`) that set_by()
    found, with what to write instead: a relative entry joined to `cwd` (the configured one), which
    is how its author meant it read; not one that names a variable or a `~user`, which meant no such
    path."""
    lines = []
    for d in dropped:
        if not d.entries:
            lines.append(f"{key}.{d.name} is empty, which bash reads as its working directory: the server gets "
                         f"PATH={FALLBACK_PATH!r} instead; name its directories by their absolute paths, or leave "
                         "PATH out to give it scvd's (docs/security.md)")
            continue
        shown, now = _shown(d)
        named = [e for e in d.entries if _variables(d.name, e)]
        meant = [os.path.normpath(os.path.join(cwd, e)) for e in d.entries
                 if e and e not in named and not e.startswith("~")] if cwd else []
        example = f", e.g. {meant[0]!r}" if meant else ""
        what = "file's" if d.name in LIBRARY_LISTS else "directory's"
        values = (f"; scvd expands no variable in env, so write out the path that {', '.join(map(repr, named))} names"
                  if named else "")
        lines.append(f"{key}.{d.name}: dropped {shown} ({now}): the server and each program it starts would read "
                     f"it against their working directory, which can be a session's workspace, where unasked calls "
                     f"write; write the {what} absolute path instead{example}{values} (docs/security.md)")
    return lines


def _variables(name: str, entry: str) -> list[str]:
    """The variables `entry` of `name` names that nobody expands (the loader does its own tokens)."""
    tokens = LOADER_TOKENS if name in LOADER else frozenset()
    return [v for v in VARIABLE.findall(entry) if v not in tokens]


def clean_environ() -> list[Dropped]:
    """clean_all() applied to os.environ (and so to the C library's environment); what it dropped."""
    cleaned, dropped = clean_all(os.environ)
    for name in (*SEARCH_PATHS, *XDG_BASES):
        if name in cleaned:
            os.environ[name] = cleaned[name]
        else:
            os.environ.pop(name, None)
    return dropped
