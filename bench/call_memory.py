"""What calls waiting in their lane hold of scvd's memory, against what they cost of its budget; prints JSON.

For each shape of arguments (text, empty arrays, objects, short strings, numbers, ...),
starts `python -m scvd run` on a temporary SCV_HOME with a script tool whose schema takes
any object (`{"type": "object"}`, risk `process`: its calls ask), sends one call that waits
for approval and then --calls calls of that shape, each in a frame of about --frame-bytes,
which queue behind it. Once scvd's RSS settles, it reports per call:

- frame_bytes: the `call` frame's length;
- cost: what the call counts of server.max_call_bytes_per_connection (call_budget.cost());
- held: the growth of scvd's RSS (VmRSS), divided by the calls;
- held_per_cost, held_per_frame_byte: how far the budget, and the frame's bytes, bound it.

Usage: python bench/call_memory.py [--calls 8] [--frame-bytes 1000000] [--only text,empty_arrays]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import msgspec

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from calls import machine, start_daemon  # noqa: E402
from scvctl.client import Client  # noqa: E402
from scvd import protocol as p  # noqa: E402
from scvd.call_budget import cost  # noqa: E402


def chains(n: int) -> list[Any]:
    """n objects of one key each, nested 500 deep (msgspec decodes to about 950 levels)."""
    out: list[Any] = []
    while len(out) * 500 < n:
        chain: dict[str, Any] = {}
        for _ in range(500):
            chain = {"a": chain}
        out.append(chain)
    return out


# each makes arguments of n items
SHAPES: dict[str, Callable[[int], dict[str, Any]]] = {
    "text": lambda n: {"x": "x" * n},
    "astral_text": lambda n: {"x": "x" * n + "\U0001f600"},  # one character past U+FFFF: 4 bytes a character
    "empty_arrays": lambda n: {"x": [[] for _ in range(n)]},
    "empty_objects": lambda n: {"x": [{} for _ in range(n)]},
    "one_key_objects": lambda n: {"x": [{"a": 0} for _ in range(n)]},
    "nested_objects": lambda n: {"x": chains(n)},
    "short_strings": lambda n: {"x": ["ab"] * n},
    "floats": lambda n: {"x": [1.5] * n},
    "small_ints": lambda n: {"x": [1] * n},
}

TOOL = {"description": "Holds what it is given, for bench/call_memory.py.\nUse for benchmarks of scvd only; bash "
                       "for anything real.",
        "parameters": {"type": "object"}, "risk": "process", "timeout": 60}


def frame(arguments: dict[str, Any]) -> bytes:
    return msgspec.json.encode(p.Call(id=1_000_000, session="s" * 11, tool="script_hold", arguments=arguments))


def sized(shape: Callable[[int], dict[str, Any]], most: int) -> dict[str, Any]:
    """The arguments of this shape with the most items whose frame is at most `most` bytes."""
    low, high = 1, 2
    while len(frame(shape(high))) <= most:
        low, high = high, high * 2
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if len(frame(shape(mid))) <= most else (low, mid)
    return shape(low)


def rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def settled(pid: int) -> int:
    """RSS once it stayed within 1% for a second (script tools decode on a worker thread)."""
    last, still = rss(pid), 0
    while still < 5:
        time.sleep(0.2)
        now = rss(pid)
        still = still + 1 if abs(now - last) <= last // 100 else 0
        last = now
    return last


def measure(tmp: Path, name: str, calls: int, most: int) -> dict[str, Any]:
    home, workspace = tmp / name / "home", tmp / name / "ws"
    tool = home / "tools" / "script" / "hold"
    tool.mkdir(parents=True)
    home.chmod(0o700)
    workspace.mkdir()
    (tool / "tool.json").write_text(json.dumps(TOOL))
    (tool / "run").write_text("#!/bin/sh\ncat >/dev/null\necho ok\n")
    (tool / "run").chmod(0o755)
    (home / "config.toml").write_text("[server]\nmax_call_bytes_per_connection = 1073741824\n"
                                      "max_call_bytes = 2147483648\n")
    arguments = sized(SHAPES[name], most)
    sent = frame(arguments)
    proc, sock = start_daemon(home)
    try:
        with Client.connect(sock, name="bench-memory") as c:
            session = c.open_session(workspace)
            c.start_call(session, "script_hold", {})  # waits for approval: the rest queue behind it
            before = settled(proc.pid)
            for _ in range(calls):
                c.start_call(session, "script_hold", arguments)
            held = (settled(proc.pid) - before) // calls
            if c.status().running_calls < calls:  # the tool failed to load, or its calls did not wait
                raise SystemExit(f"the calls of {name} did not wait; see {home.parent / 'scvd.log'}")
    finally:
        proc.terminate()
        proc.wait(15)
    charged = cost(sent)
    return {"frame_bytes": len(sent), "cost": charged, "held": held,
            "held_per_cost": round(held / charged, 2), "held_per_frame_byte": round(held / len(sent), 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=8)
    ap.add_argument("--frame-bytes", type=int, default=1_000_000, help="at most server.client_frame_bytes")
    ap.add_argument("--only", default="", help="comma-separated shapes")
    opts = ap.parse_args()
    names = opts.only.split(",") if opts.only else list(SHAPES)
    with tempfile.TemporaryDirectory(prefix="scv-bench-") as tmp:
        shapes = {name: measure(Path(tmp), name, opts.calls, opts.frame_bytes) for name in names}
    print(json.dumps({"machine": machine(), "calls": opts.calls, "shapes": shapes}, indent=2))


if __name__ == "__main__":
    main()
