"""Benchmark of chat's footprint: the daemon's RSS idle, with a chat open, and after one turn; prints JSON.

The turn runs against a loopback scripted model (tests/chat_model.py) over real
HTTP through the real openai client, so the figure after the turn includes the
lazily imported openai stack. Also: the turn's wall time (turn.start sent to
turn.completed), over --turns turns; the longest answer to a ping another client
sends over and over meanwhile, and during the first chat.open (how long the event
loop was held: the first chat request imports chat's modules, the first turn sets
up the openai client); and how long trimming a 2000-turn history to 120,000
tokens takes (it runs before every model request).

Usage: python bench/chat.py [--turns 20]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from calls import machine  # noqa: E402  (bench/calls.py, next to this file)
from chat_model import ScriptedModel, Text  # noqa: E402
from scvctl.client import Client  # noqa: E402
from scvd import protocol as p  # noqa: E402
from scvd.chat import trim  # noqa: E402
from scvd.chat.items import AssistantReply, ToolCall, ToolOutput, UserText  # noqa: E402


def rss_mib(pid: int) -> dict[str, float]:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = round(int(value.split()[0]) / 1024, 1)
    return fields


def wait_socket(path: Path, proc: subprocess.Popen) -> None:
    for _ in range(600):
        if proc.poll() is not None:
            raise SystemExit(f"scvd exited with {proc.returncode}")
        try:
            Client.connect(path, timeout=2).close()
            return
        except Exception:
            time.sleep(0.05)
    raise SystemExit("scvd did not start")


class Pinger:
    """Another client's pings, one after another: the longest wait for a pong since `longest()` last asked."""

    def __init__(self, sock: Path) -> None:
        self._client = Client.connect(sock, name="pinger", timeout=60)
        self._longest, self._stop, self._pinged = 0.0, threading.Event(), threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.perf_counter()
            self._client.request(p.Ping)
            self._longest = max(self._longest, time.perf_counter() - started)
            self._pinged.set()
            time.sleep(0.001)

    def longest(self) -> float:
        self._pinged.clear()  # the ping in flight (it waited with the request just answered) counts
        self._pinged.wait(60)
        longest, self._longest = self._longest, 0.0
        return round(longest * 1000, 1)

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self._client.close()


def trim_ms(turns: int = 2000) -> float:
    """One read of a 4000-byte file per turn, then a short answer."""
    items = []
    for i in range(turns):
        items += [UserText(text=f"please read file {i}"),
                  AssistantReply(calls=[ToolCall(f"c{i}", "read", '{"path": "x"}')]),
                  ToolOutput(call_id=f"c{i}", name="read", output="x" * 4000),
                  AssistantReply(text="done " * 20)]
    started = time.perf_counter()
    trim.trim(items, 120_000)
    return round((time.perf_counter() - started) * 1000, 1)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=20)
    args = parser.parse_args()
    model = ScriptedModel([Text("a short answer")] * (args.turns + 1))
    with tempfile.TemporaryDirectory() as tmp:
        home, ws = Path(tmp) / "home", Path(tmp) / "ws"
        home.mkdir(mode=0o700)
        ws.mkdir()
        (home / "config.toml").write_text(
            f'[providers.bench]\nmodel = "m"\nbase_url = "{model.base_url}"\nwire_api = "responses"\n'
            '[chat]\nprovider = "bench"\n')
        env = {k: v for k, v in os.environ.items() if not k.startswith("SCV")}
        env.update(SCV_HOME=str(home), PYTHONPATH=str(ROOT))
        # cwd: `-m` puts it first on sys.path, so the bench started from another checkout ran that one's scvd
        proc = subprocess.Popen([sys.executable, "-m", "scvd", "run"], env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, cwd=ROOT)
        try:
            sock = home / "run" / "scvd.sock"
            wait_socket(sock, proc)
            time.sleep(0.5)
            idle = rss_mib(proc.pid)
            with Client.connect(sock, name="bench", timeout=60) as c:
                pinger = Pinger(sock)
                time.sleep(0.2)
                pinger.longest()
                session = c.request(p.ChatOpen, workspace=str(ws)).session
                open_stall = pinger.longest()
                chat_open = rss_mib(proc.pid)
                times, stalls = [], []
                for _ in range(args.turns):
                    pinger.longest()
                    started = time.perf_counter()
                    c.request(p.TurnStart, session=session, text="hi")
                    while not isinstance(c.next_event(), (p.TurnCompleted, p.TurnFailed)):
                        pass
                    times.append((time.perf_counter() - started) * 1000)
                    stalls.append(pinger.longest())
                pinger.close()
                after = rss_mib(proc.pid)
        finally:
            proc.terminate()
            proc.wait(15)
            model.close()
    print(json.dumps({
        "machine": machine(),
        "rss_mib": {"idle": idle, "chat_open_no_turn": chat_open, f"after_{args.turns}_turns": after},
        "turn_ms": {"first": round(times[0], 1), "median_rest": round(statistics.median(times[1:]), 1)
                    if len(times) > 1 else None},
        "longest_ping_ms": {"chat_open": open_stall, "first_turn": stalls[0],
                            "median_rest": round(statistics.median(stalls[1:]), 1) if len(stalls) > 1 else None},
        "trim_2000_turns_ms": trim_ms(),
    }, indent=2))


if __name__ == "__main__":
    main()
