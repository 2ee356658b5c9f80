"""Benchmark of how long starting a process holds the thread that starts it (a thread of the
start pool) and the event loop; prints one JSON object.

- spawn: `process._spawn()` of `/bin/bash -lc true` (the directory look, the pipes, Popen, which
  returns once the child has exec'd), as the daemon runs it (its preexec_fn: a fork), and under
  bubblewrap when it works here: what the start pool's thread is held;
- on_loop: the same start as run_process makes it (`process._started`, on the start pool): the
  event loop's own CPU time per start and the wall time until the start is back;
- loop_lag: how late a 1 ms timer on the loop fires while starts follow each other (2 ms apart),
  the start made on the loop itself (as before the start pool) and on the start pool: what every
  other client waits for (fork holds the GIL, so the pool's starts still cost the loop some);
- hop: an empty job on the file pool and back (`workers.run_file`).

Usage: python bench/spawn.py [--runs 50]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bash import real_sandbox  # noqa: E402
from scvd import limits, process, workers  # noqa: E402

ARGV = ["/bin/bash", "-lc", "true"]
ENV = {"PATH": os.environ.get("PATH", os.defpath)}


def spawn_once(argv: list[str], ws: str, fd: int) -> float:
    """Seconds `_spawn` held its thread; the run is then waited for and forgotten."""
    start = time.perf_counter()
    run, read_fd, _ = process._spawn(argv, ws, ENV, cwd_fd=fd)
    held = time.perf_counter() - start
    run.popen.wait()
    os.close(read_fd)
    process._LEADERS.discard(run.pid)
    return held


def summary(samples: list[float]) -> dict[str, float]:
    ms = sorted(s * 1000 for s in samples)
    return {"median_ms": round(statistics.median(ms), 3), "p90_ms": round(ms[int(len(ms) * 0.9)], 3),
            "max_ms": round(ms[-1], 3)}


def spawns(argv: list[str], ws: str, runs: int) -> dict[str, float]:
    fd = os.open(ws, os.O_RDONLY | os.O_DIRECTORY)
    try:
        spawn_once(argv, ws, fd)  # warm caches
        return summary([spawn_once(argv, ws, fd) for _ in range(runs)])
    finally:
        os.close(fd)


async def on_loop(argv: list[str], ws: str, runs: int) -> dict[str, dict[str, float]]:
    """The loop thread's CPU time and the wall time per start through the start pool."""
    fd = os.open(ws, os.O_RDONLY | os.O_DIRECTORY)
    cpu, wall = [], []
    try:
        for i in range(runs + 1):  # the first starts the pool's thread
            started, used = time.perf_counter(), time.thread_time()
            run, read_fd, _ = await process._started(
                lambda s: process._spawn(argv, ws, ENV, cwd_fd=fd, starting=s), lambda r: None, argv, ws, None)
            if i:
                cpu.append(time.thread_time() - used)
                wall.append(time.perf_counter() - started)
            run.popen.wait()
            os.close(read_fd)
            process._LEADERS.discard(run.pid)
    finally:
        os.close(fd)
    return {"loop_cpu": summary(cpu), "wall": summary(wall)}


async def loop_lag(argv: list[str], ws: str, runs: int, on_pool: bool) -> dict[str, float]:
    fd = os.open(ws, os.O_RDONLY | os.O_DIRECTORY)
    lags: list[float] = []
    done = False

    async def ticker() -> None:
        while not done:
            start = time.perf_counter()
            await asyncio.sleep(0.001)
            lags.append(time.perf_counter() - start - 0.001)

    ticks = asyncio.ensure_future(ticker())
    try:
        for _ in range(runs):
            if on_pool:
                run, read_fd, _ = await process._started(
                    lambda s: process._spawn(argv, ws, ENV, cwd_fd=fd, starting=s), lambda r: None, argv, ws, None)
            else:
                run, read_fd, _ = process._spawn(argv, ws, ENV, cwd_fd=fd)
            await asyncio.sleep(0.002)
            run.popen.wait()
            os.close(read_fd)
            process._LEADERS.discard(run.pid)
    finally:
        done = True
        await ticks
        os.close(fd)
    return summary(lags)


async def hops(runs: int) -> dict[str, float]:
    await workers.run_file(lambda: None)  # the pool's first thread
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        await workers.run_file(lambda: None)
        samples.append(time.perf_counter() - start)
    return summary(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=50)
    opts = parser.parse_args()
    report: dict[str, Any] = {"python": sys.version.split()[0], "cpus": os.cpu_count(),
                              "loadavg": os.getloadavg()[0]}
    with tempfile.TemporaryDirectory(prefix="scvd-bench-") as tmp:
        ws = os.path.realpath(tmp)
        limits.raise_nofile()  # as the daemon does at start
        report["spawn_fork"] = spawns(ARGV, ws, opts.runs)
        report["start_on_pool"] = asyncio.run(on_loop(ARGV, ws, opts.runs))
        report["loop_lag_start_on_loop"] = asyncio.run(loop_lag(ARGV, ws, opts.runs, on_pool=False))
        report["loop_lag_start_on_pool"] = asyncio.run(loop_lag(ARGV, ws, opts.runs, on_pool=True))
        sandbox = real_sandbox(ws)
        if isinstance(sandbox, str):
            report["spawn_bwrap"] = {"skipped": sandbox}
        else:
            wrapped = sandbox.wrap(ARGV, workspace=Path(ws), network=False)
            report["spawn_bwrap"] = spawns(wrapped, ws, opts.runs)
        report["pool_hop"] = asyncio.run(hops(opts.runs))
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
