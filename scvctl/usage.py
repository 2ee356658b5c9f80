"""The `--workspace` of scvctl's commands, whose default is the shell's directory (which may be gone)."""

from __future__ import annotations

import os
from pathlib import Path

from scvd.errors import UsageError


def workspace(path: Path) -> Path:
    """`--workspace` made absolute, `~/` expanded; its default "." is the shell's directory, which may be gone
    (a removed build or temp dir): say so rather than fail with a traceback. Links are left for scvd to
    resolve: the path as written is how the agent knows the workspace (an absolute `cwd` through
    /home -> /var/home), and scvd keeps it beside the real one."""
    try:  # `~/proj` arrives unexpanded from an MCP host's JSON args (no shell) or a quoted word
        return Path(os.path.expanduser(path)).absolute()
    except FileNotFoundError:
        raise UsageError(f"the current directory no longer exists, so --workspace {path} names nothing: "
                         "cd to the workspace, or pass --workspace DIR") from None
