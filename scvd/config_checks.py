"""Warnings about what a configuration names on this machine, not about its text: a stdio MCP server's
command that is not there (an absolute path missing, a name not on PATH), a `cwd` that is no directory,
an argument starting with `~` (passed as it is: no shell runs the server to expand it).

Warnings, not errors: a server can be installed after the check, and `scvd check-config` runs with the
shell's PATH where scvd under systemd has the unit's. config.load adds them to Loaded.warnings: logged
at start and by a reload that brings them, printed by check-config (`--strict` fails on them).
"""

from __future__ import annotations

import os
from typing import Any, Mapping

from .paths import find_program


def mcp_warnings(servers: Mapping[str, Any], env: Mapping[str, str]) -> list[str]:
    """One line per problem of each enabled stdio server, naming its key."""
    found: list[str] = []
    for name, server in sorted(servers.items()):
        if server.command is None or not server.enabled:
            continue
        key = f"mcp.servers.{name}"
        why = _command_problem(server.command, env)
        if why:
            found.append(f"{key}.command: {why}; the server cannot start, and scvd retries it with a growing "
                         "backoff (at most a minute apart)")
        cwd = os.path.expanduser(server.cwd) if server.cwd else None
        if cwd is not None and not os.path.isdir(cwd):
            found.append(f"{key}.cwd: {server.cwd!r} is not a directory; create it, or fix the path")
        for i, arg in enumerate(server.args):
            if arg == "~" or arg.startswith("~/"):
                found.append(f"{key}.args[{i}]: {arg!r} starts with ~, which is passed as it is (no shell runs "
                             f"the server to expand it); write the full path, e.g. {os.path.expanduser(arg)!r}")
    return found


def locate_command(command: str, path: str) -> tuple[str | None, str]:
    """Where a server's `command` (a name, /... or ~/...) runs from on `path` (a PATH value), or None and
    why not: `does not exist`, `is not an executable file`, `is not on PATH`. One rule for the check
    and the launch (mcp/spec.py)."""
    expanded = os.path.expanduser(command)
    if "/" not in expanded:
        found = find_program(expanded, path)
        return (found, "") if found else (None, "is not on PATH")
    if os.path.isfile(expanded) and os.access(expanded, os.X_OK):
        return expanded, ""
    return None, "is not an executable file" if os.path.exists(expanded) else "does not exist"


def _command_problem(command: str, env: Mapping[str, str]) -> str | None:
    found, why = locate_command(command, env.get("PATH", os.defpath))
    if found is not None:
        return None
    if why == "is not on PATH":
        return (f"{command!r} is not on PATH; give its full path, or install it there (under systemd, scvd's "
                "PATH is the unit's, not your shell's)")
    return f"{command!r} {why}"
