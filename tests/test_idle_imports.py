"""The idle daemon leaves out the standard modules only a rare path needs (issue 9: idle RSS <= 30 MiB).

shutil pulls in bz2, lzma and zlib (with tempfile, difflib and ctypes.util, 10 modules) that a started
daemon never used. They are imported where they are used (a PATH lookup, a refusal's "did you mean",
a Codex import); this test keeps a module-level import of them from creeping back."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from conftest import ROOT
LEFT_OUT = ("shutil", "tempfile", "difflib", "bz2", "lzma", "ctypes.util",
            "scvd.mcp_host.bridge", "scvd.mcp_host.pipes", "scvd.chat.service", "scvd.chat.engine",
            "scvd.chat.transcript",  # chat/expiry.py with chat.transcript_days at its default 0
            "regex", "scvd.bounded_regex",  # with jsonschema only: a tool.json, an MCP server
            "scvd.adapters.import_journal", "scvd.adapters.codex_provider")  # an agent run, a Codex import


def test_a_started_daemon_has_not_imported_what_only_rare_paths_need(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    done = subprocess.run([sys.executable, str(ROOT / "tests" / "helpers" / "started_imports.py"), str(home),
                           *LEFT_OUT], capture_output=True, text=True, cwd=ROOT, timeout=60,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "", f"imported by a started daemon: {done.stdout.strip()}"
