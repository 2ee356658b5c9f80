"""Benchmark of how long starting a process holds the thread that starts it (today: the event
loop); prints one JSON object.

- spawn: `process._spawn()` of `/bin/bash -lc true` (the directory look, the pipes, Popen, which
  returns once the child has exec'd), as the daemon runs it (a preexec_fn restoring the open-file
  limit: a fork) and without one (vfork), and under bubblewrap when it works here;
- hop: an empty job on the file pool and back (`workers.run_file`), what moving the spawn off the
  loop would add to each call.

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
    process._RUNS.discard(run)
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
        report["spawn_vfork"] = spawns(ARGV, ws, opts.runs)  # no preexec_fn: before raise_nofile
        limits.raise_nofile()  # as the daemon does at start: children get a preexec_fn, so a fork
        report["spawn_fork"] = spawns(ARGV, ws, opts.runs)
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
