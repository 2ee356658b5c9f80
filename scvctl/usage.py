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
        given = Path(os.path.expanduser(path))
        return given if given.is_absolute() else Path(_here()) / given
    except FileNotFoundError:
        raise UsageError(f"the current directory no longer exists, so --workspace {path} names nothing: "
                         "cd to the workspace, or pass --workspace DIR") from None


def _here() -> str:
    """The current directory as the shell shows it: $PWD while it names this very directory (`pwd -L`,
    through /home -> /var/home), else the kernel's real path."""
    here, shown = os.stat("."), os.environ.get("PWD", "")
    try:
        if os.path.isabs(shown) and os.path.samestat(os.stat(shown), here):
            return shown
    except OSError:  # $PWD names nothing now
        pass
    return os.getcwd()
