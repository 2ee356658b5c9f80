"""Benchmark of the wire protocol and the daemon's start; prints one JSON object.

- codec_ns_per_op: msgspec encode and decode of a `call` frame and of a
  `call.completed` frame carrying a 4 KiB `read` result (ns per operation);
- status_rtt_ms: `status` sent to `status.result` received, one blocking client,
  p50 / p99 / mean over --requests requests;
- status_per_s: `status` requests answered per second for 1 and 32 clients,
  each with one request in flight (asyncio, one process);
- start_to_ready_ms: `python -m scvd run` spawned to READY=1 received on a real
  NOTIFY_SOCKET datagram socket, over --starts fresh starts (each on a fresh home);
- rss_mib: VmRSS of the daemon from /proc/PID/status when idle after start,
  and idle again after the load above; VmHWM is its peak;
- scvctl_start_ms: `python -m scvctl` spawned to its exit (`--help`, `status`,
  `approvals` against the running daemon), and `scvctl mcp` spawned to its answer
  to `initialize` read; medians over --scvctl-rounds interleaved rounds, each
  with `python -c "import msgspec"` in the same rounds and the ratio to it; the
  CPU each process used (to its exit) too, which the machine's load moves less.

Usage: python bench/protocol.py [--requests 5000] [--clients 32] [--seconds 3] [--starts 5] [--scvctl-rounds 15]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable

import msgspec

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from calls import machine, quantiles  # noqa: E402  (bench/calls.py, next to this file)
from scvctl.client import AsyncClient, Client  # noqa: E402
from scvd import protocol as p  # noqa: E402


def per_op_ns(fn: Callable[[], Any], seconds: float = 0.5) -> float:
    """Median ns per call of `fn` over 5 timed batches sized to take about seconds/5 each."""
    n = 1
    while True:
        start = time.perf_counter_ns()
        for _ in range(n):
            fn()
        took = time.perf_counter_ns() - start
        if took > seconds / 5 * 1e9:
            break
        n *= 2
    batches = []
    for _ in range(5):
        start = time.perf_counter_ns()
        for _ in range(n):
            fn()
        batches.append((time.perf_counter_ns() - start) / n)
    return round(statistics.median(batches), 1)


def codec() -> dict[str, Any]:
    call = p.Call(id=17, session="s1-0123abcd", tool="read", call_id="c17-89abcdef",
                  arguments={"path": "src/module/file.py", "offset": 0, "limit": 4096})
    result = {"content": "0123456789abcde\n" * 256, "total_bytes": 4096, "truncated": False,
              "offset": 0, "sha256": "0" * 64}
    completed = p.CallCompleted(seq=42, call_id="c17-89abcdef", ok=True, result=result)
    call_line, completed_line = p.encode(call), p.encode(completed)
    return {
        "call": {"bytes": len(call_line), "encode": per_op_ns(lambda: p.encode(call)),
                 "decode": per_op_ns(lambda: p.decode_request(call_line))},
        "call.completed": {"bytes": len(completed_line), "encode": per_op_ns(lambda: p.encode(completed)),
                           "decode": per_op_ns(lambda: p.decode_server_frame(completed_line))},
    }


class Started:
    """A daemon spawned with a datagram NOTIFY_SOCKET; `ready_s` is spawn to READY=1."""

    def __init__(self, home: Path) -> None:
        home.mkdir(mode=0o700)
        self.notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.notify.bind(str(home.parent / f"{home.name}.notify"))
        self.notify.settimeout(30)  # to READY=1; afterwards a thread reads it
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SCV", "NOTIFY_", "LISTEN_"))}
        env.update(SCV_HOME=str(home), PYTHONPATH=str(ROOT), NOTIFY_SOCKET=self.notify.getsockname())
        self.socket = home / "run" / "scvd.sock"
        with open(home.parent / f"{home.name}.log", "ab") as log:
            start = time.perf_counter()
            self.proc = subprocess.Popen([sys.executable, "-m", "scvd", "run"], env=env,
                                         stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                         cwd=str(ROOT))  # -m puts the cwd first on sys.path
        try:
            while self.notify.recv(4096) != b"READY=1":
                pass
        except TimeoutError:
            self.stop()
            raise SystemExit(f"scvd sent no READY=1; see {home.parent / f'{home.name}.log'}") from None
        self.ready_s = time.perf_counter() - start
        # keep reading, as the service manager does, so no sd_notify send ever waits
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self) -> None:
        try:
            while self.notify.recv(4096):
                pass
        except OSError:
            pass

    def rss_mib(self, field: str = "VmRSS") -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return round(int(line.split()[1]) / 1024, 1)
        raise KeyError(field)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(15)
        self.notify.close()


def status_round_trip(sock: Path, requests: int) -> dict[str, float]:
    with Client.connect(sock, name="bench-rtt") as c:
        for _ in range(min(500, requests)):  # warm up
            c.status()
        samples = []
        for _ in range(requests):
            start = time.perf_counter()
            c.status()
            samples.append(time.perf_counter() - start)
    return quantiles(samples)


async def status_throughput(sock: Path, clients: int, seconds: float) -> float:
    conns = [await AsyncClient.connect(sock, name=f"bench-{i}") for i in range(clients)]
    count = 0
    stop = time.perf_counter() + seconds

    async def loop(c: AsyncClient) -> None:
        nonlocal count
        while time.perf_counter() < stop:
            await c.request(p.Status)
            count += 1

    start = time.perf_counter()
    await asyncio.gather(*(loop(c) for c in conns))
    elapsed = time.perf_counter() - start
    for c in conns:
        await c.close()
    return round(count / elapsed, 1)


def start_times(tmp: Path, starts: int) -> dict[str, float]:
    samples = []
    for i in range(starts):
        d = Started(tmp / f"start{i}")
        samples.append(d.ready_s * 1e3)
        d.stop()
    return {"median": round(statistics.median(samples), 1), "min": round(min(samples), 1),
            "max": round(max(samples), 1), "n": len(samples)}


SCVCTL_STARTS = {  # what each figure runs; the reference first
    "import msgspec": ["-c", "import msgspec"],
    "--help": ["-m", "scvctl", "--help"],
    "status": ["-m", "scvctl", "status"],
    "approvals": ["-m", "scvctl", "approvals"],
    "mcp to initialize": ["-m", "scvctl", "mcp", "--workspace", "{workspace}"],
}
MCP_INITIALIZE = msgspec.json.encode({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}}) + b"\n"


def scvctl_start_s(args: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Seconds from spawn to exit (for `mcp`, to its answer to `initialize`; then its stdin closes and
    it exits), and the CPU seconds it used in all: under load the wall time is mostly waiting."""
    cpu = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, *args], env=env, cwd=str(ROOT), stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert proc.stdin and proc.stdout
    if "mcp" in args:
        proc.stdin.write(MCP_INITIALIZE)
        proc.stdin.flush()
        answer = proc.stdout.readline()
        took = time.perf_counter() - start
        assert b'"id":1' in answer, answer
    proc.stdin.close()
    proc.stdout.read()
    proc.wait(30)
    if "mcp" not in args:
        took = time.perf_counter() - start
    assert proc.returncode == 0, (args, proc.returncode)
    used = resource.getrusage(resource.RUSAGE_CHILDREN)  # the daemon, a child too, is not reaped yet
    return took, used.ru_utime + used.ru_stime - cpu.ru_utime - cpu.ru_stime


def scvctl_starts(home: Path, workspace: Path, rounds: int) -> dict[str, Any]:
    """Each command once a round, in turn, so the machine's load moves all of them alike."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SCV", "NOTIFY_", "LISTEN_", "PYTHONDONTWRITE"))}
    env.update(SCV_HOME=str(home), PYTHONPATH=str(ROOT))  # bytecode written and read: a person's start
    argvs = {name: [a.format(workspace=workspace) for a in argv] for name, argv in SCVCTL_STARTS.items()}
    wall: dict[str, list[float]] = {name: [] for name in argvs}
    cpu: dict[str, list[float]] = {name: [] for name in argvs}
    for name, argv in argvs.items():  # warm up: bytecode compiled, the page cache filled
        scvctl_start_s(argv, env)
    for _ in range(rounds):
        for name, argv in argvs.items():
            took, used = scvctl_start_s(argv, env)
            wall[name].append(took * 1e3)
            cpu[name].append(used * 1e3)
    floor, cpu_floor = statistics.median(wall["import msgspec"]), statistics.median(cpu["import msgspec"])
    return {name: {"median": round(statistics.median(wall[name]), 1), "min": round(min(wall[name]), 1),
                   "x_import_msgspec": round(statistics.median(wall[name]) / floor, 2),
                   "cpu_median": round(statistics.median(cpu[name]), 1),
                   "cpu_x_import_msgspec": round(statistics.median(cpu[name]) / cpu_floor, 2), "n": rounds}
            for name in argvs}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=5000)
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--seconds", type=float, default=3.0, help="per throughput run")
    ap.add_argument("--starts", type=int, default=5)
    ap.add_argument("--scvctl-rounds", type=int, default=15)
    opts = ap.parse_args()
    report: dict[str, Any] = {"machine": machine(), "codec_ns_per_op": codec()}
    with tempfile.TemporaryDirectory(prefix="scv-bench-") as tmp:
        report["start_to_ready_ms"] = start_times(Path(tmp), opts.starts)
        d = Started(Path(tmp) / "home")
        try:
            time.sleep(1.0)  # let start-up garbage settle
            idle = d.rss_mib()
            report["status_rtt_ms"] = status_round_trip(d.socket, opts.requests)
            report["status_per_s"] = {
                "1": asyncio.run(status_throughput(d.socket, 1, opts.seconds)),
                str(opts.clients): asyncio.run(status_throughput(d.socket, opts.clients, opts.seconds)),
            }
            time.sleep(1.0)
            rss_after_load = d.rss_mib()
            workspace = Path(tmp) / "workspace"
            workspace.mkdir()
            report["scvctl_start_ms"] = scvctl_starts(Path(tmp) / "home", workspace, opts.scvctl_rounds)
            report["rss_mib"] = {"idle_after_start": idle, "idle_after_load": rss_after_load,
                                 "peak": d.rss_mib("VmHWM")}
        finally:
            d.stop()
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
