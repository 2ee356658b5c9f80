"""Usage errors of scvctl commands (exit 2), and the one that comes from the shell's directory."""

from __future__ import annotations

from pathlib import Path


class UsageError(Exception):
    """A command line that cannot work: scvctl prints `usage: <message>` and exits 2."""


def workspace(path: Path) -> Path:
    """`--workspace` made absolute; its default "." is the shell's directory, which may be gone
    (a removed build or temp dir): say so rather than fail with a traceback."""
    try:
        return path.resolve()
    except FileNotFoundError:
        raise UsageError(f"the current directory no longer exists, so --workspace {path} names nothing: "
                         "cd to the workspace, or pass --workspace DIR") from None
