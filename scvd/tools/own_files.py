"""scvd's own files that a `read` must not do unasked, whatever their names.

A workspace that holds scvd's folders (`~`, or one with `SCV_HOME` inside) would
otherwise show the agent `config.toml` (MCP servers' header tokens in plain
text), the audit log, the chat transcripts and the private homes of the agents
and MCP servers (their sign-in and history): the secret-like name rule misses
most of them. Script tool sources and skills stay unasked. Like that rule, it is a
visibility aid, not a confidentiality boundary: `bash` can read them too.

Judged by place, not name: the paths come from scvd's `Paths`, their folders as
real paths, and each workspace's share of them is worked out once (most hold none,
so an ordinary read pays one dict lookup).
"""

from __future__ import annotations

import os
from typing import Any

from ..paths import within

FILE, PREFIX, FOLDER = 0, 1, 2  # the file itself; files whose name starts so (rotations); all below
# (rel parts, kind, how it matches)
Entry = tuple[tuple[str, ...], str, int]

_cache: dict[str, tuple[Any, tuple[Entry, ...]]] = {}  # workspace -> (paths, its entries)
_CACHE_MAX = 256


def own_file_reason(parts: tuple[str, ...], workspace: str, paths: Any) -> str | None:
    """Why the workspace-relative `parts` is one of scvd's own sensitive files, as a short phrase
    for the approver (as secret_reason gives), or None."""
    try:
        of, entries = _cache[workspace]
    except KeyError:
        of = _cache  # not a Paths, nor the None of an in-memory hub
    if of is not paths:
        entries = _remember(workspace, paths)
    for rel, kind, how in entries:
        n = len(rel)
        if how == FOLDER:
            if parts[:n] == rel and len(parts) > n:
                return f"it is inside {'/'.join(rel)!r}, {kind}" if rel else f"the workspace lies in {kind}"
        elif len(parts) == n and parts[:-1] == rel[:-1] and (
                parts[-1] == rel[-1] if how == FILE else parts[-1].startswith(rel[-1])):
            return f"{parts[-1]!r} is {kind}"
    return None


def _remember(workspace: str, paths: Any) -> tuple[Entry, ...]:
    if len(_cache) >= _CACHE_MAX:
        _cache.clear()
    entries = entries_in(workspace, paths)
    _cache[workspace] = (paths, entries)
    return entries


def sensitive(paths: Any) -> list[tuple[str, str, str, int]]:
    """scvd's sensitive files as (real folder, name or '' for all of it, kind, how)."""
    if paths is None:  # an in-memory hub of the tests
        return []
    real = os.path.realpath
    return [
        (real(paths.config_dir), "config.toml",
         "scvd's configuration, which may hold MCP servers' header tokens in plain text", FILE),
        (real(paths.state_dir), "audit.log", "scvd's audit log (approvals and who decided)", PREFIX),
        (real(paths.chat_dir), "", "scvd's chat transcripts folder (all a conversation said, tool outputs too)", FOLDER),
        (real(paths.adapters_dir), "", "the folder of the agents' private homes (their sign-in and history)", FOLDER),
        (real(paths.mcp_dir), "", "the folder of the MCP servers' private homes (they may keep tokens there)", FOLDER),
    ]


def entries_in(workspace: str, paths: Any) -> tuple[Entry, ...]:
    """The sensitive files below `workspace` (a real path), relative to it. A workspace inside one
    of the folders gets that folder as `()`: every file in it counts."""
    found: list[Entry] = []
    for folder, name, kind, how in sensitive(paths):
        if how == FOLDER and within(workspace, folder):
            found.append(((), kind, FOLDER))
        elif within(folder, workspace):
            rel = tuple(p for p in os.path.relpath(folder, workspace).split("/") if p != ".")
            found.append(((*rel, name) if name else rel, kind, how))
    return tuple(found)

