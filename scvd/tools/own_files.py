"""scvd's own files that a `read` must not do unasked, whatever their names.

A workspace that holds scvd's folders (`~`, or one with `SCV_HOME` inside) or the file
given to `--config` would otherwise show the agent the configuration (MCP servers' header
tokens in plain text), the audit log, the chat transcripts and the private homes of the
agents and MCP servers (their sign-in and history): the secret-like name rule misses most
of them; so would a file-backed keyring's store (not scvd's, but it holds every secret scvd
stored there). Script tool sources and skills stay unasked. Like that rule, it is a visibility
aid, not a confidentiality boundary: `bash` can read them too.

Judged by place, not name: the places are scvd's own (scvd/own_places.py, real paths);
this rule picks the sensitive ones. Each workspace's share of them is worked out once (most
hold none, so an ordinary read pays one dict lookup).
"""

from __future__ import annotations

import os

from ..own_places import ADAPTERS, AUDIT_LOG, CHAT, CONFIG, KEYRING, KEYRING_FILE, MCP, SECRETS, Place
from ..paths import within

FILE, PREFIX, FOLDER = 0, 1, 2  # the file itself; files whose name starts so (rotations); all below
# the places a read asks for: the phrase for the approver, and how a path matches
SENSITIVE = {
    CONFIG: ("scvd's configuration, which may hold MCP servers' header tokens in plain text", FILE),
    SECRETS: ("scvd's secret store", FILE),
    AUDIT_LOG: ("scvd's audit log (approvals and who decided)", PREFIX),
    CHAT: ("scvd's chat transcripts folder (all a conversation said, tool outputs too)", FOLDER),
    ADAPTERS: ("the folder of the agents' private homes (their sign-in and history)", FOLDER),
    MCP: ("the folder of the MCP servers' private homes (they may keep tokens there)", FOLDER),
    KEYRING: ("keyring's folder, where a file-backed keyring keeps every secret stored in it", FOLDER),
    KEYRING_FILE: ("a file-backed keyring's store (KEYRING_PROPERTY_FILE_PATH), which holds every secret "
                   "stored in it", FILE),
}
# (rel parts, kind, how it matches)
Entry = tuple[tuple[str, ...], str, int]

_cache: dict[str, tuple[object, tuple[Entry, ...]]] = {}  # workspace -> (places, its entries)
_CACHE_MAX = 256


def own_file_reason(parts: tuple[str, ...], workspace: str, places: tuple[Place, ...]) -> str | None:
    """Why the workspace-relative `parts` is one of scvd's own sensitive files, as a short phrase
    for the approver (as secret_reason gives), or None. `places`: own_places()."""
    try:
        of, entries = _cache[workspace]
    except KeyError:
        of = _cache  # no tuple of places
    if of is not places:
        entries = _remember(workspace, places)
    for rel, kind, how in entries:
        n = len(rel)
        if how == FOLDER:
            if parts[:n] == rel and len(parts) > n:
                return f"it is inside {'/'.join(rel)!r}, {kind}" if rel else f"the workspace lies in {kind}"
        elif len(parts) == n and parts[:-1] == rel[:-1] and (
                parts[-1] == rel[-1] if how == FILE else parts[-1].startswith(rel[-1])):
            return f"{parts[-1]!r} is {kind}"
    return None


def _remember(workspace: str, places: tuple[Place, ...]) -> tuple[Entry, ...]:
    if len(_cache) >= _CACHE_MAX:
        _cache.clear()
    entries = entries_in(workspace, places)
    _cache[workspace] = (places, entries)
    return entries


def entries_in(workspace: str, places: tuple[Place, ...]) -> tuple[Entry, ...]:
    """The sensitive files below `workspace` (a real path), relative to it. A workspace inside one
    of the folders gets that folder as `()`: every file in it counts."""
    found: list[Entry] = []
    for role, path in places:
        if role not in SENSITIVE:
            continue
        kind, how = SENSITIVE[role]
        if how == FOLDER and within(workspace, path):
            found.append(((), kind, FOLDER))
        elif within(path, workspace) and path != workspace:
            found.append((tuple(os.path.relpath(path, workspace).split("/")), kind, how))
    return tuple(found)
