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
  and idle again after the load above; VmHWM is its peak.

Usage: python bench/protocol.py [--requests 5000] [--clients 32] [--seconds 3] [--starts 5]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable

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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=5000)
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--seconds", type=float, default=3.0, help="per throughput run")
    ap.add_argument("--starts", type=int, default=5)
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
            report["rss_mib"] = {"idle_after_start": idle, "idle_after_load": d.rss_mib(),
                                 "peak": d.rss_mib("VmHWM")}
        finally:
            d.stop()
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
