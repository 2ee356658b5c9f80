"""`scvctl mcp` under a host on the TypeScript SDK (tests/helpers/ts_sdk_host.mjs, Node): the SDK
reads lines of 10 MiB at most and writes a request's `id` last, which raw-line tests do not show."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, DaemonProc, base_env

pytestmark = pytest.mark.slow

SDK = ROOT / ".mcp-servers" / "node_modules" / "@modelcontextprotocol" / "sdk"
HOST = ROOT / "tests" / "helpers" / "ts_sdk_host.mjs"


@pytest.fixture(scope="module", autouse=True)
def installed() -> None:
    if not (SDK / "package.json").exists():
        pytest.skip(f"the MCP TypeScript SDK is not in {SDK.parent}: run bash .ci/install-mcp-servers")


def ts_host(d: DaemonProc, workspace: Path, *calls: dict) -> list[dict]:
    """What the host got for each of `calls`, then for a ping."""
    command = [sys.executable, "-m", "scvctl", "mcp", "--workspace", str(workspace)]
    done = subprocess.run(["node", str(HOST), json.dumps(command), str(SDK)], input=json.dumps(list(calls)),
                          env=base_env(d.home), cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


def test_a_read_of_a_mib_of_control_bytes_reaches_the_host_which_stays_connected(daemon, workspace):
    """Its line was 13.6 MiB (the result twice, escaped): `ReadBuffer exceeded maximum size`, the
    connection closed, and every later request `Not connected`."""
    (workspace / "zeros.dat").write_bytes(bytes(1 << 20))
    read, ping = ts_host(daemon, workspace, {"name": "read", "arguments": {"path": "zeros.dat", "limit": 1 << 20}})
    assert read.get("isError") is False and read["text"].startswith('{"path":"zeros.dat","content":"\\u0000'), read
    assert ping == {"ping": "ok"}


def test_a_request_over_the_limit_is_answered_with_its_id_which_the_sdk_writes_last(daemon, workspace):
    """scvd looked for the id in the line's first 4 KiB only and answered `id: null`, which the SDK
    drops: the call timed out, and the agent never heard that the message was too large."""
    big, ping = ts_host(daemon, workspace, {"name": "read", "arguments": {"path": "x" * (1100 << 10)}})
    assert big == {"error": "McpError: MCP error -32600: message too large: over 1048576 bytes "
                            "(server.client_frame_bytes); send less, or raise it"}
    assert ping == {"ping": "ok"}
