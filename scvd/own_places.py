"""scvd's own places: the one list both own-file rules judge by.

Built from the instance's Paths, the config file it reads, which `scvd --config PATH`
may put anywhere (in a workspace, too): while each rule kept its own list of places, both
missed that file; and the folders the loaded tools run from (a script tool's may be linked
in from a workspace: its `run` is what a read_only call runs unasked later). Real paths, as
both rules compare real paths. Each rule keeps its own decision: a write at or below a ROOT
or a TOOL, or to a CONFIG, always asks (always_ask.places_reason); a read of the places it
counts sensitive asks (tools/own_files.py: a file-backed keyring's store too, not scvd's but
holding what scvd stores, scvd/keyring_files.py); a workspace at or in a ROOT or TOOL, or holding
one, a CONFIG or a link on the way to them (LOOKUP), exposes the host (approvals.exposes_host);
the sandbox keeps a TOOL read-only (sandbox.Sandbox's `keep`).
Nothing here knows tool names.
"""

from __future__ import annotations

import functools
import os
from typing import Any, NamedTuple

from .paths import lookup_dirs

SERVICE = "own_places"  # the daemon's places in a session's services, where the tools find them

ROOT = "root"  # where scvd keeps everything: Paths.roots()
CONFIG = "config"  # a config file: the one scvd reads (`--config`'s) and the instance's config.toml
SECRETS = "secrets"  # secrets.toml, the secret store
AUDIT_LOG = "audit_log"  # audit.log; its rotations add a suffix to the name
CHAT = "chat"  # the chat transcripts folder
ADAPTERS = "adapters"  # the folder of the agents' private homes
MCP = "mcp"  # the folder of the MCP servers' private homes
TOOL = "tool"  # a folder a loaded tool runs from (Tool.runs_from): a script tool's, linked in from anywhere
KEYRING = "keyring"  # a file-backed keyring's folder, python_keyring: the secrets scvd stores there
KEYRING_FILE = "keyring_file"  # the file KEYRING_PROPERTY_FILE_PATH gives a file-backed keyring
LOOKUP = "lookup"  # a real directory a lookup of a ROOT, CONFIG or TOOL reads in (paths.lookup_dirs), or it itself


class Place(NamedTuple):
    role: str
    path: str  # a real path


@functools.lru_cache(maxsize=16)
def own_places(paths: Any, config_file: str | None = None, tools: tuple[str, ...] = ()) -> tuple[Place, ...]:
    """scvd's own places for `paths` (none for the None of an in-memory hub), the config file
    it reads (default: its config.toml) and the folders its loaded tools run from (`tools`: they
    change at a reload). Cached, so equal arguments give the very same tuple: the read rule keeps
    its per-workspace work by that identity."""
    if paths is None:
        return ()
    found = [(ROOT, d) for d in paths.roots()] + [(TOOL, d) for d in tools]
    found += [(CONFIG, config_file or paths.config_file), (CONFIG, paths.config_file)]
    found += [(SECRETS, paths.secrets_file), (AUDIT_LOG, paths.audit_log), (CHAT, paths.chat_dir),
              (ADAPTERS, paths.adapters_dir), (MCP, paths.mcp_dir)]
    found += [(role, p) for role, p in ((KEYRING, paths.keyring_dir), (KEYRING_FILE, paths.keyring_file)) if p]
    places = [Place(role, os.path.realpath(p)) for role, p in found]
    # as named, not resolved: a link on the way in a workspace can be swapped for the call's own folder
    places += [Place(LOOKUP, d) for role, p in found if role in (ROOT, CONFIG, TOOL)
               for d in sorted(lookup_dirs(p))]
    return tuple(dict.fromkeys(places))  # one of each


def of(places: tuple[Place, ...], *roles: str) -> tuple[str, ...]:
    """The paths of `places` in these roles."""
    return tuple(place.path for place in places if place.role in roles)
