"""Real git repositories for tests, with no user or system git configuration read."""

from __future__ import annotations

import json
import os
import subprocess
import sys
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


# gitmeta.find() as scvd runs it, a user's process: with no capabilities, so that the mode bits an
# unasked call sets (chmod 000 app) stop it even when the tests run as root
_FIND_UNPRIVILEGED = """
import ctypes, json, sys
header, data = (ctypes.c_uint32 * 2)(0x20080522, 0), (ctypes.c_uint32 * 6)()  # v3: all sets empty
assert ctypes.CDLL(None, use_errno=True).capset(header, data) == 0, ctypes.get_errno()
from scvd import gitmeta
print(json.dumps(gitmeta.find(sys.argv[1])))
"""


def find_unprivileged(workspace: Path) -> list[str]:
    done = subprocess.run([sys.executable, "-c", _FIND_UNPRIVILEGED, os.path.realpath(workspace)],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)
