"""How long the loop stalls while a connection holding many calls closes; prints one JSON object.

Starts `python -m scvd run` on a temporary SCV_HOME (default config, plus --config) and
opens one connection with --sessions sessions, each sent --calls `bash` calls: the
first waits for approval, the rest queue behind it (calls past a limit are refused
and counted). A second connection pings scvd in a loop while the first closes:

- held: the calls the first connection held when it closed (refused: those it was refused);
- close_s: from its close until scvd's status shows none of its calls left;
- ping_max_ms, ping_p50_ms, pings: the round trips of the second connection's pings
  in that time (the longest is about the longest the loop did nothing else).

Usage: python bench/connection_close.py [--sessions 64] [--calls 256] [--config "[server]..."]
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from calls import machine, quantiles, scratch_daemon  # noqa: E402
from scvctl.client import Client  # noqa: E402
from scvd import errors, protocol as p  # noqa: E402


def fill(c: Client, workspace: Path, sessions: int, calls: int) -> tuple[int, int]:
    """(held, refused): each session's calls sent in one write, then their answers read."""
    held = refused = 0
    for _ in range(sessions):
        sid = c.open_session(workspace)
        frames = [c.core.build(p.Call, session=sid, tool="bash", arguments={"command": "true"})
                  for _ in range(calls)]
        c.sock.sendall(b"".join(p.encode(f) for f in frames))
        for frame in frames:
            c.core.sent(frame)
        for frame in frames:
            try:
                c.wait_answer(frame.id)  # type: ignore[attr-defined]
                held += 1
            except errors.LimitExceeded:
                refused += 1
    return held, refused


def pings(sock: Path, stop: threading.Event, rtts: list[float]) -> None:
    with Client.connect(sock, name="bench-pinger") as c:
        while not stop.is_set():
            start = time.perf_counter()
            c.request(p.Ping)
            rtts.append(time.perf_counter() - start)


def measure(sock: Path, workspace: Path, sessions: int, calls: int) -> dict[str, object]:
    holder = Client.connect(sock, name="bench-holder")
    held, refused = fill(holder, workspace, sessions, calls)
    stop, rtts = threading.Event(), []  # type: ignore[var-annotated]
    pinger = threading.Thread(target=pings, args=(sock, stop, rtts))
    with Client.connect(sock, name="bench-status") as status:
        pinger.start()
        time.sleep(0.2)  # the pinger is going
        rtts.clear()
        start = time.perf_counter()
        holder.close()
        while status.status().running_calls:
            time.sleep(0.001)
        close_s = time.perf_counter() - start
        stop.set()
        pinger.join()
    return {"held": held, "refused": refused, "close_s": round(close_s, 3),
            "ping_max_ms": round(max(rtts) * 1e3, 1), "ping_p50_ms": quantiles(rtts)["p50"], "pings": len(rtts)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sessions", type=int, default=64)
    ap.add_argument("--calls", type=int, default=256, help="per session")
    ap.add_argument("--config", default="", help="config.toml text")
    opts = ap.parse_args()
    with scratch_daemon(opts.config) as (sock, workspace):
        report = {"machine": machine(), "sessions": opts.sessions, "calls": opts.calls,
                  **measure(sock, workspace, opts.sessions, opts.calls)}
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
