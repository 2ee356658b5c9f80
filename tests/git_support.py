"""Real git repositories for tests, with no user or system git configuration read."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

GIT_ENV = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1",
           "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.org",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.org"}
IDENTITY = {k: v for k, v in GIT_ENV.items() if k.startswith("GIT_")}  # for a daemon's environment


def git(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=cwd, env=GIT_ENV, capture_output=True, text=True, timeout=30)


def repo(path: Path) -> Path:
    """A repository with one commit at `path` (created)."""
    path.mkdir(parents=True, exist_ok=True)
    for args in (["init", "-q"], ["commit", "-q", "--allow-empty", "-m", "first"]):
        done = git(path, *args)
        assert done.returncode == 0, done.stderr
    return path
