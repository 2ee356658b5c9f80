"""What each stage of a call costs, on one CPU; prints one JSON object.

The client, a real `python -m scvd run` (default config) and two floors run
pinned to CPU 0, so no round trip pays for a cross-CPU wake-up (see
docs/performance-history.md, "Where the kernel puts the processes"). Interleaved rounds of one blocking
client each:

- echo_asyncio: the side-by-side bench's JSON-lines echo server (the floor);
- minimal_read: the least a Python read server does (uvloop protocol, decode
  the `call`, open, fstat, read, sha256, encode, write): no session, plan,
  policy, audit or `call.accepted`;
- scvd_ping: a `ping` (frame in, frame out);
- scvd_unknown_tool: a `call` of a tool that does not exist (the call path:
  accepted, audited, completed with an error; no plan, no run);
- scvd_read_small / scvd_read_4k: `read` of a 3-byte and of a 4 KiB file.

Each gets p50 / mean µs per round trip, and the server's CPU µs per call, user
and system apart (utime and stime over the rounds, every thread), and its
context switches per call, voluntary (it waited for the next request) and
involuntary (the woken client took the CPU first).

Usage: python bench/stages.py [--rounds 10] [--per-round 1000]
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parent))
import side_by_side as sbs  # noqa: E402


class _Call(msgspec.Struct, tag_field="type", tag="call"):
    id: int
    session: str
    tool: str
    arguments: dict[str, Any]


class LineServer(asyncio.Protocol):
    """A JSON-lines server in a Protocol: each whole line's answer() is written back."""

    def __init__(self) -> None:
        self.decoder, self.encoder, self.buf = msgspec.json.Decoder(), msgspec.json.Encoder(), b""

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while (nl := self.buf.find(b"\n")) >= 0:
            line, self.buf = self.buf[:nl], self.buf[nl + 1:]
            self.transport.write(self.answer(line) + b"\n")

    def answer(self, line: bytes) -> bytes:
        """The echo floor: decode, encode."""
        return self.encoder.encode(self.decoder.decode(line))


class MinimalRead(LineServer):
    """The least a Python read server does for a `call` of `read` (bench/instructions.py counts it too)."""

    def __init__(self, workspace: str | Path) -> None:
        super().__init__()
        self.decoder = msgspec.json.Decoder(_Call)
        self.dirfd = os.open(workspace, os.O_RDONLY | os.O_DIRECTORY)

    def answer(self, line: bytes) -> bytes:
        call = self.decoder.decode(line)
        fd = os.open(call.arguments["path"], os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=self.dirfd)
        try:
            data = os.read(fd, os.fstat(fd).st_size + 1)
        finally:
            os.close(fd)
        result = {"path": call.arguments["path"], "content": data.decode(), "offset": 0, "length": len(data),
                  "total_bytes": len(data), "truncated": False, "sha256": hashlib.sha256(data).hexdigest()}
        return self.encoder.encode({"type": "call.completed", "call_id": "c1", "ok": True, "result": result})


def minimal_read_server(path: str, workspace: str) -> None:
    import uvloop

    async def main() -> None:
        server = await asyncio.get_running_loop().create_unix_server(lambda: MinimalRead(workspace), path)
        async with server:
            await server.serve_forever()

    uvloop.run(main())


def usage(pid: int) -> tuple[float, float, int, int]:
    """A server's user and system CPU µs (/proc/PID/stat: every thread, those that ended too), and its
    voluntary and involuntary context switches (per thread: only those still running)."""
    user, system = sbs.cpu_times(pid)
    voluntary = involuntary = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            status = Path(f"/proc/{pid}/task/{tid}/status").read_text().splitlines()
        except FileNotFoundError:  # a thread that just ended
            continue
        for line in status:
            if line.startswith("voluntary_ctxt_switches"):
                voluntary += int(line.split()[1])
            elif line.startswith("nonvoluntary_ctxt_switches"):
                involuntary += int(line.split()[1])
    return user * 1e6, system * 1e6, voluntary, involuntary


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--per-round", type=int, default=1000)
    ap.add_argument("--minimal-read-server", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.minimal_read_server:
        return minimal_read_server(*args.minimal_read_server)

    with tempfile.TemporaryDirectory(prefix="scvd-stages-") as tmp:
        base = Path(tmp)
        workspace = base / "ws"
        workspace.mkdir()
        (workspace / sbs.FILE).write_bytes(b"x" * 4095 + b"\n")
        (workspace / "small.txt").write_bytes(b"hi\n")
        d = sbs.Daemon(base, "main")
        peer, sock = sbs.unix_lines(d.socket)
        session = sbs.scvd_open(peer, workspace)

        def call(tool: str, arguments: dict[str, Any]) -> Any:
            frame = msgspec.json.encode({"type": "call", "id": 7, "session": session, "tool": tool,
                                         "arguments": arguments}) + b"\n"
            return lambda: peer.ask(frame, lambda line: b'"call.completed"' in line)

        minimal_path = base / "minimal.sock"
        minimal = subprocess.Popen([sys.executable, __file__, "--minimal-read-server", str(minimal_path),
                                    str(workspace)])
        sbs.wait_connectable(minimal_path, minimal)
        mpeer, msock = sbs.unix_lines(minimal_path)
        mframe = msgspec.json.encode({"type": "call", "id": 7, "session": "s" * 16, "tool": "read",
                                      "arguments": {"path": sbs.FILE}}) + b"\n"
        echo = sbs.echo_system("echo_asyncio", base, "asyncio")
        daemon = (d.proc.pid,)
        systems = [
            echo,
            sbs.System("minimal_read", lambda: (mpeer.send(mframe), mpeer.line()), msock.close, (minimal.pid,)),
            sbs.System("scvd_ping", lambda: peer.ask(b'{"type":"ping","id":3}\n', lambda line: b'"pong"' in line),
                       lambda: None, daemon),
            sbs.System("scvd_unknown_tool", call("no_such_tool", {}), lambda: None, daemon),
            sbs.System("scvd_read_small", call("read", {"path": "small.txt"}), lambda: None, daemon),
            sbs.System("scvd_read_4k", call("read", {"path": sbs.FILE}), lambda: None, daemon),
        ]
        used = {s.name: [0.0, 0.0, 0, 0] for s in systems}
        everyone = set(range(os.cpu_count() or 1))
        sbs.pin([os.getpid(), d.proc.pid, minimal.pid, *echo.pids], {0})
        try:
            for s in systems:  # warm up
                for _ in range(args.per_round):
                    s.trip()
            for r in range(args.rounds):
                for s in systems if r % 2 == 0 else systems[::-1]:
                    before = usage(s.pids[0])
                    for _ in range(args.per_round):
                        t0 = time.perf_counter_ns()
                        s.trip()
                        s.samples.append((time.perf_counter_ns() - t0) / 1000)
                    for i, (now, then) in enumerate(zip(usage(s.pids[0]), before)):
                        used[s.name][i] += now - then
        finally:
            sbs.pin([os.getpid(), d.proc.pid, minimal.pid, *echo.pids], everyone)
            for s in systems:
                s.close()
            sock.close()
            minimal.terminate()
            minimal.wait(10)
            d.stop()
    out: dict[str, Any] = {"machine": sbs.machine(), "one_cpu_us": {}}
    for s in systems:
        n = len(s.samples)
        user, system, voluntary, involuntary = used[s.name]
        row = {"p50": round(statistics.median(s.samples), 1), "mean": round(statistics.fmean(s.samples), 1),
               "server_user_us_per_call": round(user / n, 1), "server_system_us_per_call": round(system / n, 1),
               "server_switches_per_call": {"voluntary": round(voluntary / n, 2),
                                            "involuntary": round(involuntary / n, 2)}}
        out["one_cpu_us"][s.name] = row
    p50 = {name: row["p50"] for name, row in out["one_cpu_us"].items()}
    out["ratios_to_echo_asyncio"] = {name: round(v / p50["echo_asyncio"], 2) for name, v in p50.items()}
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
