"""Benchmark of the `bash` tool; prints one JSON object.

- overhead: the tool (decode, plan, run through the process runner) against a raw
  `subprocess.run(["/bin/bash", "-lc", "true"])`, as the median of per-run ratios
  over --runs interleaved pairs; the same with bubblewrap when it works here,
  against a raw run of the same bwrap argv.
- flood: `head -c 1G /dev/zero` through the tool in a fresh interpreter: wall
  time, and peak RSS before and after (the cap is tools.output_limit_bytes).

Usage: python bench/bash.py [--runs 30] [--flood-bytes 1G] [--no-flood]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scvd import paths as paths_mod  # noqa: E402
from scvd.config import Config, SandboxConfig  # noqa: E402
from scvd.sandbox import Sandbox, probe  # noqa: E402
from scvd.tools.bash import Bash  # noqa: E402
from scvd.tools.contract import CallContext  # noqa: E402

FLOOD = """
import asyncio, json, os, resource, sys, time
sys.path.insert(0, {root!r})
from scvd.config import Config
from scvd.tools.bash import Bash
from scvd.tools.contract import CallContext
tool = Bash(Config())
ctx = CallContext("c", "s", {ws!r}, os.open({ws!r}, os.O_RDONLY), Config(), None)
args = tool.decode({{"command": "head -c {size} /dev/zero", "timeout_seconds": 600}})
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t = time.perf_counter()
r = asyncio.run(tool.run(args, tool.plan(args, ctx), ctx))
wall = time.perf_counter() - t
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({{"wall_s": round(wall, 3), "rss_before_mib": round(before / 1024, 1),
                  "peak_rss_mib": round(after / 1024, 1), "bytes_seen": r["bytes_seen"],
                  "bytes_kept": r["bytes_kept"], "mib_per_s": round(r["bytes_seen"] / wall / 2**20)}}))
"""


def timed(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def raw_runner(argv: list[str], ws: str) -> Callable[[], Any]:
    return lambda: subprocess.run(argv, cwd=ws, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.STDOUT, check=True)


def tool_runner(ws: str, sandbox: Sandbox | None, loop: asyncio.AbstractEventLoop) -> Callable[[], Any]:
    config = Config()
    tool = Bash(config)
    ctx = CallContext("bench", "bench", Path(ws), os.open(ws, os.O_RDONLY), config, None, sandbox=sandbox)

    def once() -> None:
        args = tool.decode({"command": "true"})
        result = loop.run_until_complete(tool.run(args, tool.plan(args, ctx), ctx))
        assert result["exit_code"] == 0, result

    return once


def compare(tool: Callable[[], Any], raw: Callable[[], Any], runs: int) -> dict[str, Any]:
    tool(), raw()  # warm caches
    pairs = [(timed(tool), timed(raw)) for _ in range(runs)]
    return {
        "runs": runs,
        "median_ratio": round(statistics.median(t / r for t, r in pairs), 3),
        "median_extra_ms": round(statistics.median(t - r for t, r in pairs) * 1000, 2),
        "tool_median_ms": round(statistics.median(t for t, _ in pairs) * 1000, 2),
        "raw_median_ms": round(statistics.median(r for _, r in pairs) * 1000, 2),
    }


def real_sandbox(tmp: str) -> Sandbox | str:
    env = {"SCV_HOME": f"{tmp}/home", "XDG_RUNTIME_DIR": f"{tmp}/xdg", "PATH": os.environ.get("PATH", "")}
    paths = paths_mod.resolve(env)
    paths_mod.prepare(paths)
    config = SandboxConfig(mode="bwrap")
    result = probe(config, paths, env)
    return Sandbox(result, paths, env) if result.ok else result.verdict


def flood(ws: str, size: str) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-c", FLOOD.format(root=str(ROOT), ws=ws, size=size)],
                          capture_output=True, text=True, check=True)
    return {"bytes": size, **json.loads(done.stdout)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--flood-bytes", default="1G")
    parser.add_argument("--no-flood", action="store_true")
    opts = parser.parse_args()
    report: dict[str, Any] = {"python": sys.version.split()[0], "cpus": os.cpu_count()}
    with tempfile.TemporaryDirectory(prefix="scvd-bench-") as tmp:
        ws = os.path.realpath(tmp)
        loop = asyncio.new_event_loop()
        try:
            raw = raw_runner(["/bin/bash", "-lc", "true"], ws)
            report["overhead"] = compare(tool_runner(ws, None, loop), raw, opts.runs)
            sandbox = real_sandbox(ws)
            if isinstance(sandbox, str):
                report["overhead_bwrap"] = {"skipped": sandbox}
            else:
                wrapped = sandbox.wrap(["/bin/bash", "-lc", "true"], workspace=Path(ws), network=False)
                report["overhead_bwrap"] = compare(tool_runner(ws, sandbox, loop), raw, opts.runs)
                report["overhead_bwrap_vs_raw_bwrap"] = compare(
                    tool_runner(ws, sandbox, loop), raw_runner(wrapped, ws), opts.runs)
        finally:
            loop.close()
        if not opts.no_flood:
            report["flood"] = flood(ws, opts.flood_bytes)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
