"""Benchmark of MCP servers as scvd tools; prints one JSON object.

- idle_rss_kib: the daemon's VmRSS once ready, without MCP servers (the SDK is not
  imported) and with the reference filesystem server configured (the SDK is);
- read_ms: p50 / p99 of `mcp__fs__read_text_file` on a 4 KiB file through scvd's
  gate (call sent to call.completed), against the same read straight from the SDK
  client to the server, so the gate's cost shows.

Usage: python bench/mcp_servers.py [--calls 300]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.calls import start_daemon  # noqa: E402
from scvctl.client import Client  # noqa: E402
from scvd import protocol as p  # noqa: E402

FS = ROOT / ".mcp-servers" / "node_modules" / ".bin" / "mcp-server-filesystem"


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def percentiles(samples: list[float]) -> dict[str, float]:
    samples = sorted(samples)
    return {"p50": round(statistics.median(samples), 3), "p99": round(samples[int(len(samples) * 0.99) - 1], 3)}


def idle(tmp: Path, config: str, name: str) -> int:
    home = tmp / name
    home.mkdir(mode=0o700)
    (home / "config.toml").write_text(config)
    proc, sock = start_daemon(home)
    try:
        with Client.connect(sock, name="bench") as c:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                servers = c.request(p.Status).mcp_servers
                if all(s.state == "ready" for s in servers):
                    break
                time.sleep(0.1)
        time.sleep(1.0)  # settle
        return rss_kib(proc.pid)
    finally:
        proc.terminate()
        proc.wait(15)


def through_gate(tmp: Path, ws: Path, calls: int) -> list[float]:
    home = tmp / "gate"
    home.mkdir(mode=0o700)
    (home / "config.toml").write_text(
        f'[mcp.servers.fs]\ncommand = "{FS}"\nargs = ["{ws}"]\ntool_risk = {{read_text_file = "read_only"}}\n')
    proc, sock = start_daemon(home)
    try:
        with Client.connect(sock, name="bench") as c:
            while not any(s.state == "ready" for s in c.request(p.Status).mcp_servers):
                time.sleep(0.1)
            session = c.open_session(ws)
            args = {"path": str(ws / "four_k.txt")}
            samples = []
            for _ in range(calls):
                t = time.perf_counter()
                done = c.call(session, "mcp__fs__read_text_file", args)
                samples.append((time.perf_counter() - t) * 1000)
                assert done.ok, done.error
            return samples
    finally:
        proc.terminate()
        proc.wait(15)


def direct(ws: Path, calls: int) -> list[float]:
    import anyio
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    async def main() -> list[float]:
        async with stdio_client(StdioServerParameters(command=str(FS), args=[str(ws)])) as (r, w):
            async with ClientSession(r, w) as s:
                await s.initialize()
                samples = []
                for _ in range(calls):
                    t = time.perf_counter()
                    await s.call_tool("read_text_file", {"path": str(ws / "four_k.txt")})
                    samples.append((time.perf_counter() - t) * 1000)
                return samples

    return anyio.run(main)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=300)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        ws = tmp / "ws"
        ws.mkdir()
        (ws / "four_k.txt").write_text("x" * 4096)
        result = {
            "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
            "idle_rss_kib": {
                "without_mcp": idle(tmp, "", "plain"),
                "with_fs_server": idle(tmp, f'[mcp.servers.fs]\ncommand = "{FS}"\nargs = ["{ws}"]\n', "fs"),
            },
            "read_ms": {
                "through_scvd": percentiles(through_gate(tmp, ws, args.calls)),
                "sdk_direct": percentiles(direct(ws, args.calls)),
            },
        }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
