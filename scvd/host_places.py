"""Places outside scvd's own folders whose files decide what runs outside the sandbox later.

approvals.exposes_host judges a workspace by them as by scvd's own places: one at or inside a
RUNS place, or holding one or a directory a lookup of one passes through (LOOKUP: a link on the
way can be replaced), is not run unasked. They are:
- the programs scvd starts and where it finds them: each directory on its PATH (a call that writes
  `bin/bwrap` there has scvd run it in the sandbox's stead; only absolute entries: search_paths.py
  drops the others from scvd's environment), the libraries their loader reads outside the sandbox
  (bwrap's LD_LIBRARY_PATH, LD_PRELOAD and LD_AUDIT; and scvd's working directory, a LOOKUP place
  only, when scvd's own loader reads a relative entry there), the real directory of each program it
  found (bwrap, the agent CLIs, the MCP servers' commands and `cwd`s), and its Python: sys.path
  (scvd's own code and what it imports later; with `python -m scvd`, first the directory it was
  started in, STARTED_IN too: its request says so), sys.prefix and sys.base_prefix;
- the links among the home's dotfiles, and among the entries of its folders whose files run later
  (home_dirs: ~/.config, ~/.local, ~/.local/share, ~/.ssh, XDG_CONFIG_HOME and XDG_DATA_HOME; one
  level): a dotfiles repository that `~/.bashrc`, `~/.config/systemd` or `~/.local/bin` leads into
  runs at the next shell, git call, ssh login or systemd start.
The home's own such places (`home_place`: its dotfiles and dot folders by path, not listed: a
dotfile made later counts; and home_dirs where they lead, HOME_DIR places, and the directories a
lookup of one reads in, LOOKUP) count as well.
`places()` looks programs up on PATH and lists the home: it runs at start and at each reload, off
the event loop (not per call). A link made later counts from the next reload. Nothing here knows
tool names.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Callable, Iterable, Mapping

from . import search_paths
from .own_places import LOOKUP, Place
from .paths import find_program, lookup_dirs, within

RUNS = "runs"  # a real directory (or file) whose contents run outside the sandbox
STARTED_IN = "started_in"  # of the RUNS places, the one only because `python -m scvd` was started there
HOME_DIR = "home_dir"  # one of home_dirs, where it really is: what lies in it runs later (home_place)
# under home, where files run code later outside any sandbox: autostart entries and systemd user
# units (.config), ~/.local/bin on PATH, desktop entries and user units (.local/share, XDG_DATA_HOME's
# default), ~/.ssh/rc and authorized_keys. Each entry that is a link counts too, one level down.
HOME_RUNS_LATER = (".config", ".local", ".local/share", ".ssh")


def places(config: Any, bwrap: str | None, env: Mapping[str, str], home: str) -> frozenset[Place]:
    """The RUNS, HOME_DIR and LOOKUP places for `config` (its agents' and MCP servers' programs),
    the `bwrap` the probe found, scvd's `env` (its PATH, its XDG folders) and `home`. A frozenset:
    its hash is kept, and exposes_host's cache hashes it at every call. Blocking."""
    found = programs(config, bwrap, env)
    start = started_in()
    runs = [*path_dirs(env), *loader_places(env), *sys.path[start is not None:], sys.prefix, sys.base_prefix,
            *cwds(config)]
    runs += [os.path.dirname(os.path.realpath(p)) for p in found]
    links = dotfile_links(home, env)
    named = [os.path.abspath(p) for p in [*runs, *links] if p]
    others = {os.path.realpath(p) for p in named}
    if start is not None:  # it runs later all the same: a module planted there is imported at the next start
        named.append(start)
    dirs = home_dirs(real_home(home), env)
    out = {Place(RUNS, os.path.realpath(p)) for p in named} | {Place(HOME_DIR, os.path.realpath(d)) for d in dirs}
    if start is not None and os.path.realpath(start) not in others:  # what the request says of it
        out.add(Place(STARTED_IN, os.path.realpath(start)))
    own = own_loader_dirs(started_env(), _cwd())  # LOOKUP only: a workspace inside one cannot write in it
    out |= {Place(LOOKUP, d) for p in [*named, *found, *dirs, *own] for d in lookup_dirs(p)}
    return frozenset(out)


def started_in() -> str | None:
    """The directory Python put first on scvd's import path because scvd was started in it
    (`python -m scvd` puts the working directory there), or None: started as a script (its own
    directory comes first) or with -P (nothing does)."""
    if sys.flags.safe_path or not sys.path:
        return None
    first = os.path.abspath(sys.path[0])  # "" is the working directory
    if os.path.realpath(first) == os.path.realpath(os.path.dirname(os.path.abspath(sys.argv[0] or "."))):
        return None
    return first


def path_dirs(env: Mapping[str, str]) -> list[str]:
    """The directories on PATH, as a child and scvd's own lookups read it: search_paths drops the entries
    read against the working directory from scvd's environment at start, as from `env` here."""
    return search_paths.entries(search_paths.clean(env)[0], "PATH")


def loader_places(env: Mapping[str, str]) -> list[str]:
    """Where bwrap's dynamic loader finds libraries, outside the sandbox and in the workspace: on the
    LD_LIBRARY_PATH of `env` (scvd's, cleaned: search_paths.py), in its LD_PRELOAD and LD_AUDIT. An
    entry naming $LIB, $PLATFORM or $ORIGIN counts from the directory above the first of them."""
    cleaned = search_paths.clean(env)[0]
    named = [e for name in ("LD_LIBRARY_PATH", "LD_PRELOAD", "LD_AUDIT") for e in search_paths.entries(cleaned, name)]
    return [_before_tokens(e) for e in named if e.startswith("/")]  # a library's bare name: on those dirs


def own_loader_dirs(started: Mapping[str, str], cwd: str) -> list[str]:
    """Where scvd's own loader looks for a library in its working directory `cwd`: at each empty or
    relative entry of the LD_LIBRARY_PATH scvd `started` with, which the loader read then and keeps
    (cleaning os.environ changes the children's, not its); a module imported later loads its
    libraries (ssl's libssl.so.3) there. A call can put one there from a workspace at or above it."""
    found = search_paths.entries(started, "LD_LIBRARY_PATH")
    return [os.path.join(cwd, e) for e in found if cwd and search_paths.read_against_cwd("LD_LIBRARY_PATH", e)]


def _before_tokens(entry: str) -> str:
    """`entry` cut at its first component that the loader expands (`$LIB`, `${ORIGIN}`)."""
    if "$" not in entry:
        return entry
    return os.path.dirname(entry[:entry.index("$")]) or "/"


def _cwd() -> str:
    try:
        return os.getcwd()
    except OSError:  # removed: a relative entry finds nothing there
        return ""


def started_env() -> dict[str, str]:
    """The environment scvd was started with, as its loader read it (/proc/self/environ: os.environ
    is cleaned since, the loader's search path is not); empty if unreadable."""
    try:
        with open("/proc/self/environ", "rb") as f:
            raw = f.read()
    except OSError:
        return {}
    pairs = (item.decode("utf-8", "surrogateescape").partition("=") for item in raw.split(b"\0") if item)
    return {k: v for k, _, v in pairs}


def programs(config: Any, bwrap: str | None, env: Mapping[str, str]) -> list[str]:
    """The absolute paths of the programs scvd would start outside the sandbox, where found now."""
    from .adapters.spec import ADAPTERS

    names = [a.executable for a in ADAPTERS.values()]
    names += [os.path.expanduser(s.command) for s in config.mcp.servers.values() if s.command and s.enabled]
    path = ":".join(path_dirs(env))
    found = [p if "/" in p else find_program(p, path) for p in names]
    return [os.path.abspath(p) for p in [bwrap, *found] if p]


def cwds(config: Any) -> list[str]:
    """The MCP servers' own working directories: `npx` and the like load code from there."""
    return [os.path.expanduser(s.cwd) for s in config.mcp.servers.values() if s.cwd and s.command and s.enabled]


def real_home(home: str | None = None) -> str:
    """The real path of `home`, else of scvd's HOME."""
    return os.path.realpath(home or os.environ.get("HOME") or os.path.expanduser("~"))


def home_dirs(home: str, env: Mapping[str, str]) -> list[str]:
    """The home's folders whose files run later, as named: its HOME_RUNS_LATER, and XDG_CONFIG_HOME
    and XDG_DATA_HOME (absolute ones only, as the XDG spec reads them), which may lie elsewhere."""
    xdg = [env.get("XDG_CONFIG_HOME"), env.get("XDG_DATA_HOME")]
    return [os.path.join(home, d) for d in HOME_RUNS_LATER] + [d for d in xdg if d and os.path.isabs(d)]


def home_place(path: str, home: str, dirs: Iterable[str]) -> str | None:
    """The place in the home whose files run code later outside any sandbox that `path` (real) is at
    or inside, or None: a top-level dotfile or dot folder of `home` (real; `.bashrc` at the next
    shell, `.gitconfig`'s core.fsmonitor at every git call, `.vim/plugin`, `.kube/config`'s exec
    credentials), or one of `dirs`, home_dirs where they really are (the HOME_DIR places: a linked
    .config, XDG_CONFIG_HOME elsewhere; the outermost of two). No I/O: the dotfile rule holds for a
    file made since, a home folder made a link since counts from the next reload."""
    if path != home and within(path, home):
        first = path[len(home):].lstrip("/").split("/", 1)[0]
        if first.startswith("."):
            return os.path.join(home, first)
    return min((d for d in dirs if within(path, d)), default=None)


def dotfile_links(home: str, env: Mapping[str, str]) -> list[str]:
    """The links among home's dotfiles and the entries of its home_dirs, by name."""
    found = _links(home, lambda name: name.startswith("."))
    for d in home_dirs(home, env):
        found += _links(d)
    return found


def _links(folder: str, wanted: Callable[[str], bool] = lambda name: True) -> list[str]:
    try:
        with os.scandir(folder) as entries:
            return [e.path for e in entries if wanted(e.name) and e.is_symlink()]
    except OSError:  # none there, or not ours to list
        return []
