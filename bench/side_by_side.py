"""scvd side by side with the MCP reference server and a bare event-loop floor; prints one JSON object.

One run, interleaved rounds, one client, a 4 KiB file (the issue 9 goals):

- latency_us: p50 / p99 / mean of one round trip, blocking client, for
  - scvd_socket: `call` of `read` to `call.completed` on scvd's socket (default loop);
  - scvd_socket_asyncio: the same against a daemon started with `server.event_loop = asyncio`;
  - scvctl_mcp: `tools/call read` through a real `scvctl mcp` subprocess (MCP stdio);
  - reference_mcp: `tools/call read_text_file` on the pinned reference server
    `@modelcontextprotocol/server-filesystem` over stdio (.ci/install-mcp-servers);
  - echo_asyncio / echo_uvloop: a bare JSON-lines echo server (msgspec decode and
    encode of each line) on a Unix socket: the floor for any Python daemon;
- latency_one_cpu_us and one_cpu_ratios (--one-cpu): the same rounds again with the
  client and every server pinned to CPU 0. Unpinned, each hop between two processes
  costs ~25 µs more when the kernel runs them on different CPUs, which it does more
  for a busier server; pinned, the figures show what each side's own work costs;
- calls_per_s: `read` calls completed per second by 1 and by 32 clients (own
  connection and session each, one call in flight each), and the daemon's CPU
  time per call (utime + stime);
- notify_stall: 64 clients x 100 reads against a daemon whose NOTIFY_SOCKET is
  drained and one whose NOTIFY_SOCKET is full and never read;
- start_ms: spawn to READY=1 on a real datagram NOTIFY_SOCKET, against
  `python -c "import msgspec"` to exit, interleaved (scvd's byte-code compiled
  first, as an installed package has it); and spawn to the answer of a `ping`
  sent the moment READY=1 came (READY=1 goes out before the server is loaded:
  that connection waits in the socket's queue until the loop serves it);
- rss_mib: the daemon idle after start (with --before, the older daemon's too),
  after the load, and after a burst of
  large reads from 32 clients at once (the worker threads all busy; with
  --before, the older daemon's too), the last two once scvd has been without
  calls long enough to hand the heap's free pages back (heap.QUIET_SECONDS); what importing the heavy optional
  dependencies (openai, mcp, jsonschema, keyring) would add.

Usage: python bench/side_by_side.py [--rounds 20] [--per-round 100] [--seconds 3] [--one-cpu] [--two-cpus]
                                    [--before CHECKOUT] [--latency-only]
Needs .ci/install-mcp-servers (node and the pinned servers) for reference_mcp.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import signal
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

from scvd import heap  # noqa: E402

QUIET = heap.QUIET_SECONDS + 1  # idle figures: after scvd trims its heap, once quiet
START_SETTLE = 1.0  # a daemon's socket to its RSS after start: the server loads after READY=1

FILE = "four_k.txt"
REFERENCE = ROOT / ".mcp-servers" / "node_modules" / ".bin" / "mcp-server-filesystem"
HEAVY = ("openai", "mcp", "jsonschema", "keyring")
CALL_SIZED = {"type": "call", "id": 0, "session": "s" * 16, "tool": "read", "arguments": {"path": FILE}}


# --- processes ----------------------------------------------------------------------------


def daemon_env(home: Path, root: Path = ROOT, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SCV_", "NOTIFY_", "LISTEN_"))}
    env.update(SCV_HOME=str(home), PYTHONPATH=str(root))
    env.update(extra)
    return env


class Daemon:
    """A real `python -m scvd run` on its own SCV_HOME, optionally with a NOTIFY_SOCKET."""

    def __init__(self, base: Path, name: str, notify: str | None = None, root: Path = ROOT, **env: str) -> None:
        self.home = base / name
        self.home.mkdir(mode=0o700)
        extra = dict(env, **({"NOTIFY_SOCKET": notify} if notify else {}))
        self.socket = self.home / "run" / "scvd.sock"
        self.log = open(base / f"{name}.log", "ab")
        self.proc = subprocess.Popen([sys.executable, "-m", "scvd", "run"], env=daemon_env(self.home, root, **extra),
                                     stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT, cwd=str(root))
        wait_connectable(self.socket, self.proc)

    def rss_mib(self) -> float:
        return rss_mib(self.proc.pid)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(20)
        self.log.close()


def wait_connectable(path: Path, proc: subprocess.Popen, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"{proc.args} exited with {proc.returncode} before listening on {path}")
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(str(path))
            return
        except OSError:
            time.sleep(0.02)
        finally:
            s.close()
    raise SystemExit(f"nothing listens on {path} after {timeout} s")


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    return float("nan")


# --- blocking line peers (the one-client latency) -------------------------------------------


class Lines:
    """A blocking JSON-lines peer over a socket or a subprocess's pipes."""

    def __init__(self, write_fd: int, read_fd: int) -> None:
        self.wfd, self.rfd = write_fd, read_fd
        self.buf = b""

    def send(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(self.wfd, view):]

    def line(self) -> bytes:
        while True:
            nl = self.buf.find(b"\n")
            if nl >= 0:
                line, self.buf = self.buf[:nl], self.buf[nl + 1:]
                return line
            chunk = os.read(self.rfd, 1 << 20)
            if not chunk:
                raise SystemExit("peer closed the stream")
            self.buf += chunk

    def ask(self, data: bytes, done: Callable[[bytes], bool]) -> bytes:
        self.send(data)
        while True:
            line = self.line()
            if done(line):
                return line


def unix_lines(path: Path) -> tuple[Lines, socket.socket]:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(str(path))
    return Lines(s.fileno(), s.fileno()), s


class System:
    """One thing measured: `trip()` does one round trip; `close()` ends it."""

    def __init__(self, name: str, trip: Callable[[], None], close: Callable[[], None],
                 pids: tuple[int, ...] = ()) -> None:
        self.name, self.trip, self.close, self.pids = name, trip, close, pids  # pids: the server side
        self.samples: list[float] = []


def scvd_system(name: str, d: Daemon, workspace: Path) -> System:
    peer, sock = unix_lines(d.socket)
    session = scvd_open(peer, workspace)
    frame = msgspec.json.encode({"type": "call", "id": 7, "session": session, "tool": "read",
                                 "arguments": {"path": FILE}}) + b"\n"
    first = msgspec.json.decode(peer.ask(frame, lambda line: b'"call.completed"' in line))
    assert first["ok"] and len(first["result"]["content"]) == 4096, first

    def trip() -> None:
        peer.ask(frame, lambda line: b'"call.completed"' in line)

    return System(name, trip, sock.close, (d.proc.pid,))


HELLO = b'{"type":"hello","id":1,"protocol":1,"client":{"name":"bench"}}\n'


def scvd_open(peer: Lines, workspace: Path) -> str:
    peer.ask(HELLO, lambda line: b'"welcome"' in line)
    opened = peer.ask(msgspec.json.encode({"type": "session.open", "id": 2, "workspace": str(workspace)}) + b"\n",
                      lambda line: b'"session.opened"' in line)
    return msgspec.json.decode(opened)["session"]


def mcp_system(name: str, argv: list[str], env: dict[str, str], tool: str, path: str,
               cwd: Path = ROOT) -> System:
    proc = subprocess.Popen(argv, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, cwd=str(cwd))
    assert proc.stdin and proc.stdout
    peer = Lines(proc.stdin.fileno(), proc.stdout.fileno())
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}}
    peer.ask(msgspec.json.encode(init) + b"\n", lambda line: b'"id":1' in line)
    peer.send(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
    frame = msgspec.json.encode({"jsonrpc": "2.0", "id": 9, "method": "tools/call",
                                 "params": {"name": tool, "arguments": {"path": path}}}) + b"\n"
    first = msgspec.json.decode(peer.ask(frame, lambda line: b'"id":9' in line))
    text = first["result"]["content"][0]["text"]
    assert not first["result"].get("isError") and "x" * 100 in text, first

    def trip() -> None:
        peer.ask(frame, lambda line: b'"id":9' in line)

    def close() -> None:
        proc.stdin.close()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        proc.stdout.close()

    return System(name, trip, close, (proc.pid,))


def echo_system(name: str, base: Path, loop: str) -> System:
    path = base / f"echo-{loop}.sock"
    proc = subprocess.Popen([sys.executable, __file__, "--echo-server", str(path), "--loop", loop])
    wait_connectable(path, proc)
    peer, sock = unix_lines(path)
    frame = msgspec.json.encode(CALL_SIZED) + b"\n"

    def trip() -> None:
        peer.send(frame)
        peer.line()

    def close() -> None:
        sock.close()
        proc.terminate()
        proc.wait(10)

    return System(name, trip, close, (proc.pid,))


def measure_latency(systems: list[System], rounds: int, per_round: int) -> dict[str, Any]:
    for s in systems:  # warm up: imports, caches, JIT of the Node server
        for _ in range(per_round):
            s.trip()
    for r in range(rounds):
        order = systems if r % 2 == 0 else systems[::-1]  # neither side always goes first
        for s in order:
            for _ in range(per_round):
                t0 = time.perf_counter_ns()
                s.trip()
                s.samples.append((time.perf_counter_ns() - t0) / 1000)
    return {s.name: summary_us(s.samples) for s in systems}


def pin(pids: list[int], cpus: set[int]) -> None:
    """Every thread of `pids` onto `cpus` (Node and the daemon have more than one)."""
    for pid in pids:
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                os.sched_setaffinity(int(tid), cpus)
            except (ProcessLookupError, PermissionError):
                pass  # a thread that just ended


def pinned_latency(systems: list[System], rounds: int, per_round: int, client: set[int],
                   servers: set[int]) -> dict[str, Any]:
    """The same rounds with the client on `client` and every server on `servers`.

    Unpinned, where the kernel puts two processes decides a round trip as much as their
    code: on the same CPU a wake-up is a context switch, across CPUs it costs ~25-35 µs
    per hop here (an idle vCPU is woken). The kernel keeps a light ping-pong (the echo
    floor) on one CPU and spreads a busier one, so unpinned ratios mix the two. On one
    CPU every system pays context switches only; on two (client on CPU 0, servers on
    CPU 1) every hop crosses, as it does for an agent host and scvd on different cores."""
    everyone = set(range(os.cpu_count() or 1))
    pids = [pid for s in systems for pid in s.pids]
    for s in systems:
        s.samples = []
    pin([os.getpid()], client)
    pin(pids, servers)
    try:
        return measure_latency(systems, rounds, per_round)
    finally:
        pin([os.getpid(), *pids], everyone)


def summary_us(samples: list[float]) -> dict[str, float]:
    q = statistics.quantiles(samples, n=100)
    return {"p50": round(statistics.median(samples), 1), "p99": round(q[98], 1),
            "mean": round(statistics.fmean(samples), 1), "n": len(samples)}


# --- many clients (asyncio, one process) --------------------------------------------------------


async def async_client(path: Path, workspace: Path) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, bytes]:
    reader, writer = await asyncio.open_unix_connection(str(path), limit=1 << 24)
    writer.write(b'{"type":"hello","id":1,"protocol":1,"client":{"name":"bench"}}\n')
    await reader.readline()
    writer.write(msgspec.json.encode({"type": "session.open", "id": 2, "workspace": str(workspace)}) + b"\n")
    session = msgspec.json.decode(await reader.readline())["session"]
    frame = msgspec.json.encode({"type": "call", "id": 3, "session": session, "tool": "read",
                                 "arguments": {"path": FILE}}) + b"\n"
    return reader, writer, frame


async def one_call(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, frame: bytes) -> None:
    writer.write(frame)
    while b'"call.completed"' not in (line := await reader.readline()):
        if not line:
            raise SystemExit("scvd closed a bench connection")


def cpu_times(pid: int) -> tuple[float, float]:
    """utime and stime of a process in seconds, from /proc/PID/stat (every thread, ended ones too)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def cpu_seconds(pid: int) -> float:
    return sum(cpu_times(pid))


async def for_seconds(path: Path, workspace: Path, clients: int, seconds: float) -> tuple[float, int]:
    conns = [await async_client(path, workspace) for _ in range(clients)]
    stop = time.perf_counter() + seconds
    counts = [0] * clients

    async def run(i: int) -> None:
        reader, writer, frame = conns[i]
        while time.perf_counter() < stop:
            await one_call(reader, writer, frame)
            counts[i] += 1

    t0 = time.perf_counter()
    await asyncio.gather(*(run(i) for i in range(clients)))
    elapsed = time.perf_counter() - t0
    for _, writer, _ in conns:
        writer.close()
    return sum(counts) / elapsed, sum(counts)


async def fixed_calls(path: Path, workspace: Path, clients: int, calls: int) -> float:
    """`clients` connections opened at once, `calls` reads each; calls per second over the whole."""
    t0 = time.perf_counter()
    conns = await asyncio.gather(*(async_client(path, workspace) for _ in range(clients)))

    async def run(reader: Any, writer: Any, frame: bytes) -> None:
        for _ in range(calls):
            await one_call(reader, writer, frame)
        writer.close()

    await asyncio.gather(*(run(*c) for c in conns))
    return clients * calls / (time.perf_counter() - t0)


async def large_reads(path: Path, workspace: Path, clients: int = 32, calls: int = 4) -> None:
    """A burst that keeps the worker threads busy at once: each client reads 64 KiB of its own 3 MiB
    file (a first read hashes all of it, on a worker), `calls` times."""
    async def run(i: int) -> None:
        reader, writer, first = await async_client(path, workspace)
        session = msgspec.json.decode(first)["session"]
        frame = msgspec.json.encode({"type": "call", "id": 3, "session": session, "tool": "read",
                                     "arguments": {"path": f"large{i}.txt", "limit": 65536}}) + b"\n"
        for _ in range(calls):
            await one_call(reader, writer, frame)
        writer.close()

    for i in range(clients):
        (workspace / f"large{i}.txt").write_bytes(f"line {i} of a large file\n".encode() * 120_000)
    await asyncio.gather(*(run(i) for i in range(clients)))


def new_loop() -> asyncio.AbstractEventLoop:
    """The bench's own clients run on uvloop when it is installed, as scvd does."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def throughput(daemons: dict[str, Daemon], workspace: Path, seconds: float, runs: int = 2) -> dict[str, Any]:
    """calls/s of each daemon with 1 and 32 clients, the daemons taking turns."""
    loop = new_loop()
    out: dict[str, list[float]] = {}
    cpu: dict[str, list[float]] = {}
    try:
        for _ in range(runs):
            for clients in (1, 32):
                for name, d in daemons.items():
                    key = f"{name}clients_{clients}"
                    before = cpu_seconds(d.proc.pid)
                    rate, calls = loop.run_until_complete(for_seconds(d.socket, workspace, clients, seconds))
                    out.setdefault(key, []).append(round(rate))
                    cpu.setdefault(key, []).append((cpu_seconds(d.proc.pid) - before) / calls * 1e6)
    finally:
        loop.close()
    return {k: {"median": statistics.median(v), "runs": v,
                "daemon_cpu_us_per_call": round(statistics.median(cpu[k]))} for k, v in out.items()}


# --- sd_notify: drained against full ---------------------------------------------------------------


class NotifyDrain:
    """A NOTIFY_SOCKET read by a thread as fast as messages come (a healthy manager)."""

    def __init__(self, path: Path) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(path))
        self.sock.settimeout(0.2)
        self.messages = 0
        self.stopped = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stopped:
            try:
                self.sock.recv(4096)
                self.messages += 1
            except (TimeoutError, OSError):
                pass

    def close(self) -> None:
        self.stopped = True
        self.thread.join(2)
        self.sock.close()


def full_notify_socket(path: Path) -> tuple[socket.socket, int]:
    """A NOTIFY_SOCKET whose queue is full and that nobody reads (a stuck manager)."""
    sink = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sink.bind(str(path))
    sender = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sender.connect(str(path))
    sender.setblocking(False)
    count = 0
    try:
        while True:
            sender.send(b"X_FILL=1")
            count += 1
    except BlockingIOError:
        pass
    sender.close()
    return sink, count


def notify_stall(base: Path, workspace: Path, clients: int, calls: int, runs: int = 2) -> dict[str, Any]:
    drain = NotifyDrain(base / "drained.notify")
    sink, filled = full_notify_socket(base / "full.notify")
    drained_d = Daemon(base, "notify-drained", notify=str(base / "drained.notify"))
    full_d = Daemon(base, "notify-full", notify=str(base / "full.notify"))
    loop = new_loop()
    out: dict[str, list[float]] = {"drained": [], "full": []}
    try:
        for r in range(runs):
            pairs = [("drained", drained_d), ("full", full_d)]
            for name, d in pairs if r % 2 == 0 else pairs[::-1]:
                out[name].append(round(loop.run_until_complete(fixed_calls(d.socket, workspace, clients, calls))))
    finally:
        loop.close()
        drained_d.stop()
        full_d.stop()
        drain.close()
        sink.close()
    drained, full = statistics.median(out["drained"]), statistics.median(out["full"])
    return {"clients": clients, "calls_each": calls, "datagrams_filling_the_socket": filled,
            "calls_per_s_drained": out["drained"], "calls_per_s_full": out["full"],
            "full_vs_drained": round(full / drained, 3), "messages_the_drained_manager_got": drain.messages}


# --- start and memory ------------------------------------------------------------------------------


def start_times(base: Path, runs: int, before: Path | None = None) -> dict[str, Any]:
    ready, answered, bare, before_ready, before_answered = [], [], [], [], []
    for i in range(runs):
        bare.append(time_msgspec())
        r, a = time_ready(base, f"{i}")
        ready.append(r)
        answered.append(a)
        if before:
            r, a = time_ready(base, f"before{i}", before)
            before_ready.append(r)
            before_answered.append(a)
    r, b = statistics.median(ready), statistics.median(bare)
    out = {"ready_ms": summary_ms(ready), "first_answer_ms": summary_ms(answered),
           "python_import_msgspec_ms": summary_ms(bare), "ready_vs_msgspec": round(r / b, 2),
           "first_answer_vs_msgspec": round(statistics.median(answered) / b, 2)}
    if before:
        out.update(before_ready_ms=summary_ms(before_ready), before_first_answer_ms=summary_ms(before_answered),
                   before_ready_vs_msgspec=round(statistics.median(before_ready) / b, 2))
    return out


def time_msgspec() -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import msgspec"], check=True)
    return (time.perf_counter() - t0) * 1000


def time_ready(base: Path, i: str, root: Path = ROOT) -> tuple[float, float]:
    """Spawn to READY=1, and spawn to the answer of a `ping` sent the moment READY=1 came."""
    listen = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    path = base / f"ready{i}.notify"
    listen.bind(str(path))
    listen.settimeout(30)
    home = base / f"ready{i}"
    home.mkdir(mode=0o700)
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "scvd", "run"],
                            env=daemon_env(home, root, NOTIFY_SOCKET=str(path)), cwd=str(root),
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while listen.recv(4096) != b"READY=1":
            pass
        ready = (time.perf_counter() - t0) * 1000
        peer, sock = unix_lines(home / "run" / "scvd.sock")  # READY=1 says it accepts: no retry
        try:
            peer.ask(HELLO, lambda line: b'"welcome"' in line)
            peer.ask(b'{"type":"ping","id":2}\n', lambda line: b'"pong"' in line)
        finally:
            sock.close()
        return ready, (time.perf_counter() - t0) * 1000
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(20)
        listen.close()


def summary_ms(samples: list[float]) -> dict[str, float]:
    return {"median": round(statistics.median(samples), 1), "min": round(min(samples), 1),
            "max": round(max(samples), 1)}


HEAVY_PROBE = r"""
import json, sys
def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
import scvd.cli, scvd.server, scvd.tools  # what `scvd run` imports before it serves
out = {"daemon_imports": rss(), "heavy_loaded_by_daemon_imports": [m for m in %r if m in sys.modules]}
for name in %r:
    __import__(name)
    out["after_" + name] = rss()
print(json.dumps(out))
"""


def heavy_imports() -> dict[str, Any]:
    code = HEAVY_PROBE % (HEAVY, HEAVY)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env=dict(os.environ, PYTHONPATH=str(ROOT)))
    return json.loads(out.stdout)


# --- the echo floor (this script in server mode) ---------------------------------------------------


def echo_server(path: str, loop_kind: str) -> None:
    decoder, encoder = msgspec.json.Decoder(), msgspec.json.Encoder()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while line := await reader.readline():
            writer.write(encoder.encode(decoder.decode(line)) + b"\n")
            await writer.drain()
        writer.close()

    async def main() -> None:
        server = await asyncio.start_unix_server(handle, path)
        async with server:
            await server.serve_forever()

    if loop_kind == "uvloop":
        import uvloop

        uvloop.run(main())
    else:
        asyncio.run(main())


# --- the run --------------------------------------------------------------------------------------


def machine() -> dict[str, Any]:
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), platform.processor())
    return {"nproc": os.cpu_count(), "cpu": model, "python": platform.python_version(),
            "kernel": platform.release(), "msgspec": msgspec.__version__, "load_1m": os.getloadavg()[0]}


def goals(lat: dict[str, Any], tput: dict[str, Any], start: dict[str, Any], rss: dict[str, Any],
          stall: dict[str, Any]) -> dict[str, Any]:
    scvd, mcp, ref = lat["scvd_socket"], lat["scvctl_mcp"], lat.get("reference_mcp")
    rows = {
        "scvd_p50_vs_echo_asyncio_p50": (scvd["p50"] / lat["echo_asyncio"]["p50"], "<=", 2.0),
        "scvd_p99_ms": (scvd["p99"] / 1000, "<=", 1.0),
        "calls_per_s_32_clients": (tput["clients_32"]["median"], ">=", 5000),
        "ready_vs_python_import_msgspec": (start["ready_vs_msgspec"], "<=", 1.5),
        "idle_rss_mib": (rss["daemon_idle_after_start"], "<=", 30),
        "notify_full_vs_drained": (stall["full_vs_drained"], ">=", 0.8),
    }
    if ref:
        rows["reference_p50_vs_scvd_p50"] = (ref["p50"] / scvd["p50"], ">=", 3.0)
        rows["reference_p50_vs_scvctl_mcp_p50"] = (ref["p50"] / mcp["p50"], ">=", 1.5)
    return {name: {"value": round(v, 3), "goal": f"{op} {target}", "met": v <= target if op == "<=" else v >= target}
            for name, (v, op, target) in rows.items()}


def pinned_ratios(lat: dict[str, Any]) -> dict[str, float]:
    """The goals' latency ratios with every process pinned: the same placement for every system."""
    scvd, ref = lat["scvd_socket"]["p50"], lat.get("reference_mcp", {}).get("p50")
    out = {"scvd_p50_vs_echo_asyncio_p50": round(scvd / lat["echo_asyncio"]["p50"], 3)}
    if ref:
        out["reference_p50_vs_scvd_p50"] = round(ref / scvd, 3)
        out["reference_p50_vs_scvctl_mcp_p50"] = round(ref / lat["scvctl_mcp"]["p50"], 3)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--per-round", type=int, default=100)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--starts", type=int, default=7)
    ap.add_argument("--stall-clients", type=int, default=64)
    ap.add_argument("--stall-calls", type=int, default=100)
    ap.add_argument("--no-asyncio-daemon", action="store_true",
                    help="skip scvd_socket_asyncio (a checkout older than server.event_loop)")
    ap.add_argument("--before", type=Path, metavar="CHECKOUT",
                    help="also measure another checkout: its daemon, scvctl mcp and start (scvd_socket_before, scvctl_mcp_before, before_clients_N, before_ready_ms)")
    ap.add_argument("--one-cpu", action="store_true",
                    help="also measure the latencies with the client and every server pinned to CPU 0 (latency_one_cpu_us)")
    ap.add_argument("--two-cpus", action="store_true",
                    help="also measure them with the client on CPU 0 and every server on CPU 1 (latency_two_cpus_us)")
    ap.add_argument("--latency-only", action="store_true",
                    help="only the latency rounds and their ratios (no throughput, notify, start or RSS)")
    ap.add_argument("--echo-server", help=argparse.SUPPRESS)
    ap.add_argument("--loop", default="asyncio", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.echo_server:
        return echo_server(args.echo_server, args.loop)

    # byte-code as an installed package has it: with PYTHONDONTWRITEBYTECODE set (as on CI) an
    # editable checkout would otherwise compile every module at every start
    for root in (ROOT, *([args.before.resolve()] if args.before else [])):
        subprocess.run([sys.executable, "-m", "compileall", "-q", "scvd", "scvctl"], cwd=root, check=True,
                       stdout=subprocess.DEVNULL)
    result: dict[str, Any] = {"machine": machine()}
    with tempfile.TemporaryDirectory(prefix="scvd-side-") as tmp:
        base = Path(tmp)
        workspace = base / "ws"
        workspace.mkdir()
        (workspace / FILE).write_bytes(b"x" * 4095 + b"\n")
        d = Daemon(base, "main")
        d_asyncio = None if args.no_asyncio_daemon else \
            Daemon(base, "main-asyncio", SCVD_SERVER__EVENT_LOOP="asyncio")
        d_before = Daemon(base, "before", root=args.before.resolve()) if args.before else None
        time.sleep(START_SETTLE)  # each answers its socket before it loads the server (READY=1 first)
        rss: dict[str, Any] = {"daemon_idle_after_start": d.rss_mib()}
        if d_before:
            rss["before_daemon_idle_after_start"] = d_before.rss_mib()
        systems = [
            scvd_system("scvd_socket", d, workspace),
            *([scvd_system("scvd_socket_asyncio", d_asyncio, workspace)] if d_asyncio else []),
            *([scvd_system("scvd_socket_before", d_before, workspace)] if d_before else []),
            mcp_system("scvctl_mcp", [sys.executable, "-m", "scvctl", "--socket", str(d.socket), "mcp",
                                      "--workspace", str(workspace)], daemon_env(d.home), "read", FILE),
            *([mcp_system("scvctl_mcp_before", [sys.executable, "-m", "scvctl", "--socket", str(d_before.socket),
                                                "mcp", "--workspace", str(workspace)],
                          daemon_env(d_before.home, args.before.resolve()), "read", FILE, args.before.resolve())]
              if d_before else []),
            echo_system("echo_asyncio", base, "asyncio"),
            echo_system("echo_uvloop", base, "uvloop"),
        ]
        if REFERENCE.exists():
            systems.append(mcp_system("reference_mcp", [str(REFERENCE), str(workspace)], dict(os.environ),
                                      "read_text_file", str(workspace / FILE)))
        else:
            result["reference_mcp_missing"] = f"{REFERENCE} not found: run bash .ci/install-mcp-servers"
        try:
            result["latency_us"] = measure_latency(systems, args.rounds, args.per_round)
            if args.one_cpu:
                one = result["latency_one_cpu_us"] = pinned_latency(systems, args.rounds, args.per_round, {0}, {0})
                result["one_cpu_ratios"] = pinned_ratios(one)
            if args.two_cpus and (os.cpu_count() or 1) >= 2:
                two = result["latency_two_cpus_us"] = pinned_latency(systems, args.rounds, args.per_round, {0}, {1})
                result["two_cpus_ratios"] = pinned_ratios(two)
        finally:
            for s in systems:
                s.close()
        if args.latency_only:
            for daemon in (d, d_asyncio, d_before):
                if daemon:
                    daemon.stop()
            result["ratios"] = pinned_ratios(result["latency_us"])
            print(json.dumps(result, indent=2))
            return
        result["calls_per_s"] = throughput({"": d, **({"before_": d_before} if d_before else {})},
                                           workspace, args.seconds)
        time.sleep(QUIET)
        rss["daemon_idle_after_load"] = d.rss_mib()
        for daemon in (d, d_before):
            if daemon:
                loop = new_loop()
                try:
                    loop.run_until_complete(large_reads(daemon.socket, workspace))
                finally:
                    loop.close()
        time.sleep(QUIET)
        for key, daemon in (("", d), ("before_", d_before)):
            if daemon:
                rss[f"{key}daemon_idle_after_large_reads"] = daemon.rss_mib()
        d.stop()
        for other in (d_asyncio, d_before):
            if other:
                other.stop()
        rss["imports"] = heavy_imports()
        result["rss_mib"] = rss
        result["notify_stall"] = notify_stall(base, workspace, args.stall_clients, args.stall_calls)
        result["start_ms"] = start_times(base, args.starts, args.before.resolve() if args.before else None)
    result["goals"] = goals(result["latency_us"], result["calls_per_s"], result["start_ms"], rss,
                            result["notify_stall"])
    result["machine"]["load_1m_after"] = os.getloadavg()[0]
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
