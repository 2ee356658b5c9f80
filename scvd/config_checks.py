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


def _command_problem(command: str, env: Mapping[str, str]) -> str | None:
    path = os.path.expanduser(command)
    if "/" in path:
        if not os.path.exists(path):
            return f"{command!r} does not exist"
        return None if _runnable(path) else f"{command!r} is not an executable file"
    dirs = [d for d in env.get("PATH", os.defpath).split(os.pathsep) if d]
    if any(_runnable(os.path.join(d, path)) for d in dirs):
        return None
    return (f"{command!r} is not on PATH; give its full path, or install it there (under systemd, scvd's PATH "
            "is the unit's, not your shell's)")


def _runnable(path: str) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)
