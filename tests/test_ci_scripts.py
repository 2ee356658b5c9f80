"""The setup scripts a new colleague runs first: what they say where a part is missing."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import ROOT


def bare_path(tmp_path: Path) -> str:
    """A PATH with the few commands the scripts use, and no node, npm or apt-get."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("bash", "dirname", "basename", "id", "mkdir"):
        os.symlink(shutil.which(name), bin_dir / name)
    return str(bin_dir)


@pytest.mark.parametrize("script", ["install-agents", "install-mcp-servers"])
def test_without_node_the_npm_installers_say_what_is_missing_and_setup_goes_on(tmp_path, script):
    """They failed under `set -e` (apt-get not found, or not root), and with them .ci/setup, so the
    README's first command never started scvd on a machine without node."""
    (tmp_path / ".ci").mkdir()
    shutil.copy(ROOT / ".ci" / script, tmp_path / ".ci" / script)
    done = subprocess.run(["bash", str(tmp_path / ".ci" / script)], capture_output=True, text=True,
                          env={"PATH": bare_path(tmp_path)}, timeout=30)
    assert done.returncode == 0, done.stderr
    assert done.stderr == (f"{script}: node and npm are missing: install them (sudo apt-get install nodejs npm), "
                           f"then run bash .ci/{script} again; the tests that need them skip until then\n")
    assert not (tmp_path / (".agents-cli" if script == "install-agents" else ".mcp-servers")).exists()


def test_setup_refuses_an_argument_it_does_not_know():
    done = subprocess.run(["bash", str(ROOT / ".ci" / "setup"), "--deamon"], capture_output=True, text=True,
                          timeout=30)
    assert done.returncode == 2
    assert done.stderr == ("setup: unknown argument --deamon: use no argument (daemon and tests) "
                           "or --daemon (the daemon only)\n")
