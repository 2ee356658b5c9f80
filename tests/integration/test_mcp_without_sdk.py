"""MCP servers configured where the optional MCP SDK is not installed (`pip install scvd` without [mcp])."""

from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path

from scvd import protocol as p

from conftest import ROOT, reloaded

QUIRKS = ROOT / "tests" / "helpers" / "mcp_stdio_quirks.py"
TABLE = f'[mcp.servers.echo]\ncommand = "{sys.executable}"\nargs = ["{QUIRKS}", "plain"]\nsandbox = false\n'


def without_sdk(tmp_path: Path) -> Path:
    """A PYTHONPATH entry that hides the installed SDK, as an interpreter without it would."""
    shadow = tmp_path / "no-sdk"
    (shadow / "mcp").mkdir(parents=True)
    (shadow / "mcp" / "__init__.py").write_text(
        'raise ModuleNotFoundError("No module named \'mcp\'", name="mcp")\n')
    return shadow


def echo_state(c) -> p.McpServerStatus:
    return next(s for s in c.request(p.Status).mcp_servers if s.name == "echo")


def test_a_server_without_the_sdk_is_down_saying_how_to_install_it(make_daemon, workspace, tmp_path):
    """scvd exited with a traceback at the start (ModuleNotFoundError) for any configured server."""
    shadow = without_sdk(tmp_path)
    d = make_daemon(TABLE, env={"PYTHONPATH": f"{shadow}:{ROOT}"})
    with d.client() as c:
        status = echo_state(c)
        assert status.state == "down" and status.tools == 0
        assert status.error == (
            f"the MCP SDK is not installed in scvd's Python ({sys.executable}): install it with "
            f"`{sys.executable} -m pip install 'mcp>=2,<3'`, then reload scvd")
        errors = c.request(p.ToolsList).errors
        assert [(e.source, e.message) for e in errors] == [("mcp:echo", status.error)]
        (workspace / "a.txt").write_text("still served\n")
        session = c.open_session(workspace)
        done = c.call(session, "read", {"path": "a.txt"})
        assert done.ok and "still served" in str(done.result), done
    assert "the MCP SDK is not installed" in d.log()

    shutil.rmtree(shadow / "mcp")  # the SDK "installed" since: a reload of the same table starts it
    reloaded(d, TABLE)
    with d.client() as c:
        deadline = time.monotonic() + 30
        while (status := echo_state(c)).state != "ready":
            assert time.monotonic() < deadline, status
            time.sleep(0.1)
        assert status.error is None and "mcp__echo__echo" in [t.name for t in c.request(p.ToolsList).tools]
    assert d.stop() == 0
