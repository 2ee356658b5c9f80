"""Benchmark of the call pipeline over the real socket; prints one JSON object.

Starts `python -m scvd run` on a temporary SCV_HOME (default config: on-risk,
no sandbox) and measures, with the real `read` and `write` tools:

- read_rtt_ms: a `read` of a 4 KiB file, `call` sent to `call.completed` received,
  one blocking client, p50 / p99 / mean over --calls calls;
- calls_per_s: `read` calls completed per second by 1 and by 32 clients, each
  client with its own session and one call in flight (asyncio, one process);
- approval_latency_ms: `call` of a `write` sent to `approval.requested` received
  at a watcher on another connection, p50 / p99 (each request is then denied).

Usage: python bench/calls.py [--calls 2000] [--clients 32] [--approvals 300]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scvctl.client import AsyncClient, Client  # noqa: E402
from scvd import protocol as p  # noqa: E402

FILE = "four_k.txt"
READ = {"path": FILE}


def start_daemon(home: Path) -> tuple[subprocess.Popen, Path]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SCV", "NOTIFY_", "LISTEN_"))}
    env.update(SCV_HOME=str(home), PYTHONPATH=str(ROOT))
    log = open(home.parent / "scvd.log", "ab")
    proc = subprocess.Popen([sys.executable, "-m", "scvd", "run"], env=env, stdin=subprocess.DEVNULL,
                            stdout=log, stderr=subprocess.STDOUT, cwd=str(ROOT))  # -m puts the cwd first
    log.close()
    sock = home / "run" / "scvd.sock"
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.connect(str(sock))
            return proc, sock
        except OSError:
            time.sleep(0.05)
        finally:
            probe.close()
    proc.kill()
    raise SystemExit(f"scvd did not start; see {home.parent / 'scvd.log'}")


@contextlib.contextmanager
def scratch_daemon(config: str = "") -> Iterator[tuple[Path, Path]]:
    """(its socket, a workspace) of a daemon on a temporary SCV_HOME with `config`, stopped after."""
    with tempfile.TemporaryDirectory(prefix="scv-bench-") as tmp:
        home, workspace = Path(tmp) / "home", Path(tmp) / "ws"
        home.mkdir(mode=0o700)
        workspace.mkdir()
        (home / "config.toml").write_text(config)
        proc, sock = start_daemon(home)
        try:
            yield sock, workspace
        finally:
            proc.terminate()
            proc.wait(15)


def quantiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    pick = lambda q: ordered[min(len(ordered) - 1, int(q * len(ordered)))]  # noqa: E731
    return {"p50": round(pick(0.50) * 1e3, 3), "p99": round(pick(0.99) * 1e3, 3),
            "mean": round(statistics.fmean(ordered) * 1e3, 3), "n": len(ordered)}


def read_round_trip(sock: Path, workspace: Path, calls: int) -> dict[str, float]:
    with Client.connect(sock, name="bench-rtt") as c:
        session = c.open_session(workspace)
        for _ in range(min(200, calls)):  # warm up
            c.call(session, "read", READ)
        samples = []
        for _ in range(calls):
            start = time.perf_counter()
            done = c.call(session, "read", READ)
            samples.append(time.perf_counter() - start)
            assert done.ok, done.error
    return quantiles(samples)


async def wait_completed(client: AsyncClient, call_id: str) -> p.CallCompleted:
    while True:
        event = await client.next_event()
        if isinstance(event, p.CallCompleted) and event.call_id == call_id:
            return event


async def throughput(sock: Path, workspace: Path, clients: int, seconds: float) -> float:
    conns = [await AsyncClient.connect(sock, name=f"bench-{i}") for i in range(clients)]
    sessions = [await c.open_session(workspace) for c in conns]
    count = 0
    stop = time.perf_counter() + seconds

    async def loop(c: AsyncClient, session: str) -> None:
        nonlocal count
        while time.perf_counter() < stop:
            done = await c.call(session, "read", READ)
            assert done.ok, done.error
            count += 1

    start = time.perf_counter()
    await asyncio.gather(*(loop(c, s) for c, s in zip(conns, sessions)))
    elapsed = time.perf_counter() - start
    for c in conns:
        await c.close()
    return round(count / elapsed, 1)


async def approval_latency(sock: Path, workspace: Path, rounds: int) -> dict[str, float]:
    watcher = await AsyncClient.connect(sock, name="bench-watcher")
    await watcher.request(p.ApprovalsWatch)
    requester = await AsyncClient.connect(sock, name="bench-requester")
    session = await requester.open_session(workspace)
    samples = []
    for i in range(rounds):
        args = {"path": f"w{i}.txt", "content": "x", "mode": "create"}
        start = time.perf_counter()
        accepted = asyncio.ensure_future(requester.request(p.Call, session=session, tool="write", arguments=args))
        while not isinstance(event := await watcher.next_event(), p.ApprovalRequested):
            pass
        samples.append(time.perf_counter() - start)
        call_id = (await accepted).call_id
        await watcher.request(p.ApprovalDecide, approval_id=event.approval_id, decision="deny")
        done = await wait_completed(requester, call_id)
        assert done.error and done.error.kind == "denied", done
    await watcher.close()
    await requester.close()
    return quantiles(samples)


def machine() -> dict[str, Any]:
    return {"python": platform.python_version(), "kernel": platform.release(), "cpus": os.cpu_count(),
            "load_1m": round(os.getloadavg()[0], 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--seconds", type=float, default=3.0, help="per throughput run")
    ap.add_argument("--approvals", type=int, default=300)
    opts = ap.parse_args()
    with scratch_daemon() as (sock, workspace):
        (workspace / FILE).write_bytes(b"0123456789abcde\n" * 256)  # 4096 bytes of text
        report = {
            "machine": machine(),
            "read_rtt_ms": read_round_trip(sock, workspace, opts.calls),
            "calls_per_s": {
                "1": asyncio.run(throughput(sock, workspace, 1, opts.seconds)),
                str(opts.clients): asyncio.run(throughput(sock, workspace, opts.clients, opts.seconds)),
            },
            "approval_latency_ms": asyncio.run(approval_latency(sock, workspace, opts.approvals)),
        }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
