"""MCP servers configured where the optional MCP SDK is not installed (`pip install scvd` without [mcp])."""

from __future__ import annotations

import shutil
import signal
import sys
import time
from pathlib import Path

import pytest

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


def slow_sdk(tmp_path: Path, gate: Path) -> Path:
    """A PYTHONPATH entry whose `mcp` takes until `gate` exists to import (then is missing): an SDK
    import as slow as the test wants."""
    shadow = tmp_path / "slow-sdk"
    (shadow / "mcp").mkdir(parents=True)
    (shadow / "mcp" / "__init__.py").write_text(
        f"import os, time\nwhile not os.path.exists({str(gate)!r}):\n    time.sleep(0.01)\n"
        'raise ModuleNotFoundError("No module named \'mcp\'", name="mcp")\n')
    return shadow


def echo_state(c) -> p.McpServerStatus:
    return next(s for s in c.request(p.Status).mcp_servers if s.name == "echo")


def echo_reaches(c, state: str) -> p.McpServerStatus:
    """The server's status once it is `state` (the SDK is imported on a thread: `starting` until then)."""
    from test_mcp_servers import server

    return server(c, "echo", state)


@pytest.mark.one_loop
def test_a_server_without_the_sdk_is_down_saying_how_to_install_it(make_daemon, workspace, tmp_path):
    """scvd exited with a traceback at the start (ModuleNotFoundError) for any configured server."""
    shadow = without_sdk(tmp_path)
    d = make_daemon(TABLE, env={"PYTHONPATH": f"{shadow}:{ROOT}"})
    with d.client() as c:
        status = echo_reaches(c, "down")
        assert status.tools == 0
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
        assert echo_reaches(c, "ready").error is None and "mcp__echo__echo" in [t.name for t in c.request(p.ToolsList).tools]
    assert d.stop() == 0


def test_clients_are_served_while_the_sdk_is_imported(make_daemon, workspace, tmp_path):
    """The SDK's import (about a second of pydantic models) ran on the event loop, at the start and at
    a reload that added the first server: no client was answered until it was done."""
    gate = tmp_path / "gate"
    d = make_daemon(TABLE, env={"PYTHONPATH": f"{slow_sdk(tmp_path, gate)}:{ROOT}"})
    try:
        with d.client(timeout=10) as c:  # the import still waits for the gate
            assert echo_state(c).state == "starting"
            (workspace / "a.txt").write_text("served meanwhile\n")
            done = c.call(c.open_session(workspace), "read", {"path": "a.txt"})
            assert done.ok and "served meanwhile" in str(done.result), done
    finally:
        gate.touch()
    with d.client() as c:
        assert "the MCP SDK is not installed" in echo_reaches(c, "down").error
    assert d.stop() == 0


def test_store_secret_waits_for_a_server_whose_sdk_is_still_being_imported(make_daemon, workspace, tmp_path):
    """Its key, entered while the server was `starting` for its SDK's import, was answered with no word
    of the server and `call mcp__echo again` (no such tool): store_secret waited only for servers up
    already. It waits for this one's start too, and says how it came out."""
    gate = tmp_path / "gate"
    table = TABLE.replace("[mcp.servers.echo]\n", '[mcp.servers.echo]\nenv = {ECHO_TOKEN = {secret = "ECHO_TOKEN"}}\n')
    d = make_daemon(table, env={"PYTHONPATH": f"{slow_sdk(tmp_path, gate)}:{ROOT}",
                                "PYTHON_KEYRING_BACKEND": "keyring.backends.null.Keyring"})
    try:
        with d.client(name="agent") as c, d.client(name="me") as me:
            assert echo_state(c).state == "starting"
            me.request(p.ApprovalsWatch)
            session = c.open_session(workspace)
            healing = c.start_call(session, "store_secret", {"key": "ECHO_TOKEN", "tool": "mcp__echo"})
            asked = me.next_event()
            while not isinstance(asked, p.SecretRequested):
                asked = me.next_event()
            me.request(p.SecretProvide, request_id=asked.request_id, value="tok")
            gate.touch()  # the import ends (the SDK missing) while store_secret waits
            healed = c.wait_call(healing)
            down = f"down: {echo_reaches(c, 'down').error}"
    finally:
        gate.touch()
    assert healed.ok, healed.error
    assert healed.result["mcp_servers"] == {"echo": down}, healed.result
    assert healed.result["next"] == f"mcp server echo is not up ({down}); tell the user what it says"



def test_a_reload_while_the_start_imports_the_sdk_is_applied_after_it(make_daemon, tmp_path):
    """The start's apply waited for the import while a reload's ran: the reload found no server yet
    to remove, then the start added it from the older configuration, left running until a next reload."""
    gate = tmp_path / "gate"
    d = make_daemon(TABLE, env={"PYTHONPATH": f"{slow_sdk(tmp_path, gate)}:{ROOT}"})
    with d.client() as c:
        assert echo_state(c).state == "starting"
    (d.home / "config.toml").write_text("# no MCP servers\n")  # echo removed (an empty file would be refused)
    d.proc.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 2  # time for a reload that does not wait for the start's apply to end
    while "configuration reloaded from" not in d.log() and time.monotonic() < deadline:
        time.sleep(0.05)
    gate.touch()
    deadline = time.monotonic() + 30
    while "configuration reloaded from" not in d.log():
        assert time.monotonic() < deadline, d.log()
        time.sleep(0.05)
    with d.client() as c:
        assert c.request(p.Status).mcp_servers == []
    assert d.stop() == 0
