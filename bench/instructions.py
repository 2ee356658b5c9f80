"""User-space instructions per round trip, counted by valgrind's callgrind; prints one JSON object.

Time on these shared machines moves with their load; an instruction count does
not (the same total to within 0.2% run after run). Each system runs inside one
Python process, under callgrind, with its socket replaced by an in-memory
transport, so what is counted is the server's own work per frame: the kernel
(syscalls, wake-ups) and the client are left out. Each system is run twice, for
--short and --long round trips after the same warm-up, and the difference is
divided by the extra trips, so start-up and imports cancel out.

- echo_floor: an asyncio Protocol that splits a line, decodes it with msgspec and
  writes it back encoded (side_by_side.py's echo server, as a Protocol);
- minimal_read: the least a Python read server does for a `call` of `read`
  (decode, open beneath the workspace fd, fstat, read, sha256, the result, encode);
- sha256_4k: hashlib.sha256 of 4 KiB alone. Valgrind hides the CPU's SHA
  extensions from OpenSSL, which then hashes in plain code: this figure is much
  higher than on the real CPU, and both reads pay it;
- scvd_ping, scvd_unknown_tool, scvd_read_4k: frames handed to scvd's own
  ClientProtocol in a real in-process Daemon (default config), through to the
  answer's write: `ping`; a `call` of a tool that does not exist; a `call` of
  `read` of a 4 KiB file.

Usage: python bench/instructions.py [--short 500] [--long 2500] [--warm 200]
Needs valgrind (Debian's valgrind package).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import re
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable

import msgspec

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from stages import LineServer, MinimalRead  # noqa: E402

FOUR_K = b"x" * 4095 + b"\n"
SYSTEMS = ("echo_floor", "minimal_read", "sha256_4k", "scvd_ping", "scvd_unknown_tool", "scvd_read_4k")


class Transport:
    """An in-memory transport: what a protocol writes resolves the waiting future."""

    def __init__(self, answered: bytes) -> None:
        self.answered = answered  # the bytes that end a round trip
        self.sock, self.peer = socket.socketpair()  # real peer credentials for scvd's Connection
        self.waiting: asyncio.Future[bytes] | None = None

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self.sock if name == "socket" else default

    def write(self, data: bytes) -> None:
        if self.waiting is not None and self.answered in data and not self.waiting.done():
            self.waiting.set_result(data)

    def get_write_buffer_size(self) -> int:
        return 0

    def pause_reading(self) -> None: ...

    def resume_reading(self) -> None: ...

    def is_closing(self) -> bool:
        return False

    def close(self) -> None: ...

    def abort(self) -> None: ...


async def ask(protocol: asyncio.Protocol, transport: Transport, line: bytes) -> bytes:
    transport.waiting = asyncio.get_running_loop().create_future()
    protocol.data_received(line)
    return await transport.waiting


CALL = {"type": "call", "id": 7, "session": "s" * 16, "tool": "read", "arguments": {"path": "four_k.txt"}}


async def floor(name: str, workspace: Path) -> Callable[[], Any]:
    """A round trip of a floor system, ready to repeat."""
    if name == "sha256_4k":
        return lambda: _done(hashlib.sha256(FOUR_K).hexdigest())
    protocol = LineServer() if name == "echo_floor" else MinimalRead(workspace)
    transport = Transport(b"\n")
    protocol.connection_made(transport)
    line = msgspec.json.encode(CALL) + b"\n"
    return lambda: ask(protocol, transport, line)


async def _done(value: Any) -> Any:
    return value


async def scvd(name: str, home: Path, workspace: Path) -> tuple[Callable[[], Any], Callable[[], Any]]:
    """A round trip on a real in-process Daemon, and what stops it."""
    from scvd import config, paths as paths_mod
    from scvd.client_protocol import ClientProtocol
    from scvd.server import Daemon

    paths = paths_mod.resolve({"SCV_HOME": str(home)})
    paths_mod.prepare(paths)
    daemon = Daemon(paths, config.load(paths.config_file, env={}), install_signals=False)
    serving = asyncio.ensure_future(daemon.serve())
    while not paths.socket.exists():
        await asyncio.sleep(0.01)
    transport = Transport(b'"welcome"')
    protocol = ClientProtocol(daemon)
    protocol.connection_made(transport)
    await ask(protocol, transport, b'{"type":"hello","id":1,"protocol":1,"client":{"name":"bench"}}\n')
    transport.answered = b'"session.opened"'
    opened = await ask(protocol, transport, msgspec.json.encode(
        {"type": "session.open", "id": 2, "workspace": str(workspace)}) + b"\n")
    session = msgspec.json.decode(opened.split(b"\n")[0])["session"]
    if name == "scvd_ping":
        line, transport.answered = b'{"type":"ping","id":3}\n', b'"pong"'
    else:
        tool = "read" if name == "scvd_read_4k" else "no_such_tool"
        line = msgspec.json.encode(dict(CALL, session=session, tool=tool)) + b"\n"
        transport.answered = b'"call.completed"'

    async def stop() -> None:
        daemon.request_stop("bench over")
        await serving

    return lambda: ask(protocol, transport, line), stop


async def inner(name: str, trips: int, warm: int) -> None:
    """One system's trips (run under callgrind by main)."""
    with tempfile.TemporaryDirectory(prefix="scvd-instr-") as tmp:
        workspace = Path(tmp) / "ws"
        workspace.mkdir()
        (workspace / "four_k.txt").write_bytes(FOUR_K)
        stop = None
        if name.startswith("scvd_"):
            home = Path(tmp) / "home"
            home.mkdir(mode=0o700)
            trip, stop = await scvd(name, home, workspace)
        else:
            trip = await floor(name, workspace)
        for _ in range(warm + trips):
            await trip()
        if stop is not None:
            await stop()


def count(name: str, trips: int, warm: int) -> int:
    """Instructions of a whole inner run of `trips` round trips."""
    out = subprocess.run(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable, __file__,
         "--inner", name, "--trips", str(trips), "--warm", str(warm)],
        capture_output=True, text=True, check=False)
    found = re.search(r"Collected : (\d+)", out.stderr)
    if out.returncode != 0 or not found:
        raise SystemExit(f"{name} under callgrind failed (exit {out.returncode}):\n{out.stderr[-2000:]}")
    return int(found.group(1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--short", type=int, default=500)
    ap.add_argument("--long", type=int, default=2500)
    ap.add_argument("--warm", type=int, default=200)
    ap.add_argument("--only", choices=SYSTEMS, action="append", help="measure only these systems")
    ap.add_argument("--inner", choices=SYSTEMS, help=argparse.SUPPRESS)
    ap.add_argument("--trips", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.inner:
        from scvd import eventloop

        loop = eventloop.new_event_loop("uvloop")
        loop.run_until_complete(inner(args.inner, args.trips, args.warm))
        loop.close()
        return
    if shutil.which("valgrind") is None:
        raise SystemExit("bench/instructions.py needs valgrind: apt-get install valgrind")
    per_trip = {}
    for name in args.only or SYSTEMS:
        extra = count(name, args.long, args.warm) - count(name, args.short, args.warm)
        per_trip[name] = round(extra / (args.long - args.short))
    out: dict[str, Any] = {
        "machine": {"python": sys.version.split()[0], "msgspec": msgspec.__version__,
                    "valgrind": subprocess.run(["valgrind", "--version"], capture_output=True,
                                               text=True).stdout.strip()},
        "instructions_per_trip": per_trip,
    }
    if "echo_floor" in per_trip:
        echo = per_trip["echo_floor"]
        out["ratios_to_echo_floor"] = {name: round(v / echo, 2) for name, v in per_trip.items()}
    if {"scvd_read_4k", "minimal_read", "sha256_4k"} <= per_trip.keys():
        sha = per_trip["sha256_4k"]
        out["read_without_sha256"] = {
            "scvd_read_4k": per_trip["scvd_read_4k"] - sha, "minimal_read": per_trip["minimal_read"] - sha,
            "scvd_vs_minimal": round((per_trip["scvd_read_4k"] - sha) / (per_trip["minimal_read"] - sha), 2)}
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
