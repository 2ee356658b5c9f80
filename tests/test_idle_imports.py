"""The idle daemon leaves out the standard modules only a rare path needs (issue 9: idle RSS <= 30 MiB).

shutil pulls in bz2, lzma and zlib (with tempfile, difflib and ctypes.util, 10 modules) that a started
daemon never used. They are imported where they are used (a PATH lookup, a refusal's "did you mean",
a Codex import); this test keeps a module-level import of them from creeping back. The same for what
`scvd run` imports before READY=1 (issue 9: READY=1 within 1.5x `python -c "import msgspec"`)."""

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
            "scvd.mcp.spec", "scvd.mcp.tool", "scvd.mcp.cap",  # an MCP server configured
            "scvd.adapters.import_journal", "scvd.adapters.codex_provider",  # an agent run, a Codex import
            "tomllib",  # with a config.toml, a secrets.toml or an SCVD_* override only
            "unicodedata",  # text.py's emoji check: a variation selector or a joiner in a shown text
            "secrets", "random", "hmac")  # ids take os.urandom(n).hex(): secrets.token_hex without them
# not before READY=1 (issue 9: spawn to READY=1 within 1.5x `python -c "import msgspec"`): the server
# imports them after it, while a client that connected waits in the socket's backlog
LEFT_OUT_BEFORE_READY = ("scvd.secrets", "concurrent.futures",  # the secret store and its thread pool
                         "scvd.always_ask", "scvd.tools.containment", "ctypes",  # the config's globs need neither
                         "json")  # the log formatter's printable() and for_logs() need none


def loaded(helper: str, tmp_path: Path, modules: tuple[str, ...]) -> str:
    """Which of `modules` a real start had imported, as tests/helpers/`helper` reports them."""
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    done = subprocess.run([sys.executable, str(ROOT / "tests" / "helpers" / helper), str(home), *modules],
                          capture_output=True, text=True, cwd=ROOT, timeout=60,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_a_started_daemon_has_not_imported_what_only_rare_paths_need(tmp_path: Path) -> None:
    found = loaded("started_imports.py", tmp_path, LEFT_OUT)
    assert found == "", f"imported by a started daemon: {found}"


def test_scvd_run_says_ready_before_importing_what_only_the_server_needs(tmp_path: Path) -> None:
    found = loaded("ready_imports.py", tmp_path, LEFT_OUT_BEFORE_READY)
    assert found == "", f"imported before READY=1: {found}"
