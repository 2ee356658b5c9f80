"""scvctl imports the command it runs and no other (every start pays for its imports: a person
typing `scvctl approvals approve`, an MCP host waiting for `scvctl mcp`, the suite by the hundred).

Its parser imported every command's module to build itself, so `scvctl status` imported the
agents' adapters, the process runner, the config and asyncio: 252 modules, about 115 ms past a bare
interpreter. parser.py now names each command's module, imported as the command runs; these lists
keep a module-level import from dragging one back."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from conftest import ROOT, DaemonProc, base_env

LEFT_OUT_OF_STATUS = (
    "asyncio", "concurrent.futures", "scvctl.async_client",  # a blocking client: no event loop
    "scvd.adapters.service", "scvd.adapters.signin", "scvd.adapters.spec", "scvd.adapters.env",  # agents
    "scvd.process", "scvd.passenv", "scvd.config", "scvd.notify", "scvd.secrets",  # the daemon's side
    "subprocess", "tomllib",  # status runs nothing and reads no config
    "scvctl.agents", "scvctl.chat", "scvctl.mcp", "scvctl.secrets", "scvctl.service", "scvctl.watch",
)
# --help connects to nothing: not even the protocol's Structs
LEFT_OUT_OF_HELP = (*LEFT_OUT_OF_STATUS, "msgspec", "scvd.protocol", "socket", "scvctl.client", "scvctl.commands")


def imported(env: dict[str, str], tmp_path: Path, *argv: str) -> set[str]:
    """The modules a real `scvctl ARGV` imported, as tests/helpers/scvctl_imports.py reports them."""
    out = tmp_path / "modules"
    done = subprocess.run([sys.executable, str(ROOT / "tests" / "helpers" / "scvctl_imports.py"), str(out), *argv],
                          env=env, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return set(out.read_text().split())


def test_scvctl_status_imports_no_other_command_nor_asyncio(daemon: DaemonProc, tmp_path: Path) -> None:
    modules = imported(base_env(daemon.home), tmp_path, "status")
    assert "scvd.protocol" in modules  # it asked scvd, which answered (the exit was 0)
    dragged = [m for m in LEFT_OUT_OF_STATUS if m in modules]
    assert not dragged, f"scvctl status imported {dragged}"


def test_scvctl_help_imports_no_command(tmp_path: Path) -> None:
    modules = imported(base_env(tmp_path / "home"), tmp_path, "--help")
    dragged = [m for m in LEFT_OUT_OF_HELP if m in modules]
    assert not dragged, f"scvctl --help imported {dragged}"
