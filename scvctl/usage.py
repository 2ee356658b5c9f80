"""The `--workspace` of scvctl's commands, whose default is the shell's directory (which may be gone)."""

from __future__ import annotations

import os
from pathlib import Path

from scvd.errors import UsageError

from .client import absolute


def workspace(path: Path) -> Path:
    """`--workspace` made absolute (client.absolute: `~/` expanded, links left for scvd, a relative one
    from $PWD); its default "." is the shell's directory, which may be gone (a removed build or temp
    dir): say so rather than fail with a traceback."""
    try:  # `~/proj` arrives unexpanded from an MCP host's JSON args (no shell) or a quoted word
        return Path(absolute(os.fspath(path)))
    except FileNotFoundError:
        raise UsageError(f"the current directory no longer exists, so --workspace {path} names nothing: "
                         "cd to the workspace, or pass --workspace DIR") from None
