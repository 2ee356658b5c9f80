"""Helpers for the integration tests: a raw line connection, a notify listener, a wrapped daemon.

`RawConn` speaks bytes, so tests can send frames no client library would build.
`NotifyListener` is a datagram socket standing in for systemd's NOTIFY_SOCKET.
Run as a script (`python harness.py run ...`) this module starts the real
`scvd` CLI with a few test tools added to the registry, so tests can hold a
call in flight in a real daemon process and look at its children's environment;
HARNESS_* variables (SHORTENED) cut a bound or a wait that a test would sit through.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import select
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Annotated, Any, Callable, Iterator

import msgspec
import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
if str(ROOT) not in sys.path:  # run as a script: make scvd importable
    sys.path.insert(0, str(ROOT))

from scvd import protocol as p  # noqa: E402
from scvd.tools.contract import CallContext, Plan, Tool, ToolFlags, ToolRisk  # noqa: E402

HARNESS = str(Path(__file__).resolve())


class RawConn:
    """One Unix stream connection that sends raw bytes and reads server frames line by line."""

    def __init__(self, path: Path | str, timeout: float = 10.0) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        try:
            self.sock.connect(str(path))
        except OSError:
            self.sock.close()
            raise
        self._buf = b""
        self._ids = iter(range(1000, 10**9))

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawConn:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send(self, frame: dict[str, Any] | p.Frame) -> None:
        data = p.encode(frame) if isinstance(frame, p.Frame) else msgspec.json.encode(frame) + b"\n"
        self.sock.sendall(data)

    def line(self) -> bytes | None:
        """The next line the server sent, or None when it closed the connection."""
        while b"\n" not in self._buf:
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                return None
            self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        return line

    def frame(self) -> Any:
        """The next server frame, decoded with the protocol's own decoder (a bad frame fails)."""
        line = self.line()
        assert line is not None, "the server closed the connection"
        return p.decode_server_frame(line)

    def closed_by_server(self) -> bool:
        """True if the server closed its side (EOF, or a reset) before sending anything more."""
        try:
            return self.line() is None
        except ConnectionResetError:
            return True

    def hello(self, protocol: int = p.PROTOCOL_VERSION) -> Any:
        self.send({"type": "hello", "id": "h", "protocol": protocol, "client": {"name": "raw"}})
        return self.frame()

    def request(self, frame: dict[str, Any]) -> Any:
        """Send a frame with a fresh id and return the next frame (events would precede it)."""
        frame = {"id": next(self._ids), **frame}
        self.send(frame)
        return self.frame()

    def status(self) -> p.StatusResult:
        answer = self.request({"type": "status"})
        assert isinstance(answer, p.StatusResult), answer
        return answer


class NotifyListener:
    """A bound AF_UNIX datagram socket that collects sd_notify messages, as systemd would."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(path))
        self.sock.settimeout(15)

    def close(self) -> None:
        self.sock.close()

    def recv(self) -> str:
        return self.sock.recv(65536).decode()

    def pending(self) -> bool:
        """True when a message is waiting."""
        r, _, _ = select.select([self.sock], [], [], 0)
        return bool(r)

    def until(self, predicate: Any, timeout: float = 15.0) -> list[str]:
        """Every message up to and including the first that satisfies `predicate`."""
        seen: list[str] = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            seen.append(self.recv())
            if predicate(seen[-1]):
                return seen
        raise AssertionError(f"no matching notify message in {timeout} s; got {seen}")


def pid_gone(pid: int) -> bool:
    """True when `pid` no longer runs (a zombie that nobody reaps counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def wait_until(predicate: Any, timeout: float = 15.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"{what} not reached after {timeout} s"
        time.sleep(0.02)


# The service manager's side of socket activation: put the passed fd at 3, name
# ourselves in LISTEN_PID (exec keeps the pid), then exec the daemon.
ACTIVATE = r"""
import os, sys
fd = int(sys.argv[1])
if fd != 3:
    os.dup2(fd, 3)
    os.close(fd)
os.set_inheritable(3, True)
os.environ.update(LISTEN_FDS="1", LISTEN_PID=str(os.getpid()), LISTEN_FDNAMES="scvd.socket")
os.execv(sys.executable, [sys.executable, *sys.argv[2:]])
"""


@contextlib.contextmanager
def scvd_on_a_full_disk(env: dict[str, str]) -> Iterator[subprocess.Popen]:
    """`scvd run` on a disk that refuses every write (RLIMIT_FSIZE 0: Python ignores SIGXFSZ, so a
    write fails with EFBIG, as with ENOSPC); its log goes to a pipe (no file the limit refuses):
    read proc.stderr once it has ended. Killed if the test leaves it running."""
    import resource

    with subprocess.Popen(  # its exit closes the pipe and waits
            [sys.executable, "-m", "scvd", "run"], env=env, stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (0, resource.RLIM_INFINITY))) as proc:
        try:
            yield proc
        finally:
            if proc.poll() is None:
                proc.kill()


def start_wrapped(home: Path, config: str = "", *, env: dict[str, str] | None = None,
                  activate: socket.socket | None = None, args: list[str] | None = None,
                  wait: bool = True, secrets: dict[str, str] | None = None, **popen: Any) -> Any:
    """The real `scvd run` with the test tools, optionally socket-activated with `activate`; `secrets`
    in its secrets.toml before it starts."""
    import subprocess

    import conftest

    home.mkdir(parents=True, exist_ok=True)
    if config:
        (home / "config.toml").write_text(config)
    conftest.stored(home, secrets or {})
    full_env = conftest.base_env(home, **(env or {}))
    argv = [sys.executable, HARNESS, "run", *(args or [])]
    fds: tuple[int, ...] = ()
    if activate is not None:
        fds = (activate.fileno(),)
        argv = [sys.executable, "-c", ACTIVATE, str(activate.fileno()), *argv[1:]]
    log_path = home.parent / f"{home.name}-scvd.log"
    popen["preexec_fn"] = conftest.dying_with_pytest(popen.get("preexec_fn"))
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(argv, env=full_env, stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, pass_fds=fds, **popen)
    sock = Path(activate.getsockname()) if activate is not None else \
        Path(full_env.get("SCV_SOCKET") or home / "run" / "scvd.sock")
    handle = conftest.DaemonProc(home=home, socket=sock, proc=proc, env=full_env, log_path=log_path)
    if wait:
        wait_ready(handle)
    return handle


def wait_ready(handle: Any, timeout: float = 15.0) -> None:
    """Until the daemon answers `status` (an activated socket accepts before anyone serves it)."""
    deadline = time.monotonic() + timeout
    while True:
        if handle.proc.poll() is not None:
            raise AssertionError(f"scvd exited with {handle.proc.returncode}:\n{handle.log()}")
        try:
            with RawConn(handle.socket, timeout=1.0) as conn:
                conn.hello()
                conn.status()
                return
        except (OSError, AssertionError):
            if time.monotonic() > deadline:
                handle.proc.kill()
                raise AssertionError(f"scvd did not answer in {timeout} s:\n{handle.log()}") from None
            time.sleep(0.02)


@pytest.fixture
def make_wrapped(tmp_path: Path) -> Iterator[Callable[..., Any]]:
    """Like conftest's make_daemon, for start_wrapped daemons; import it into a test module."""
    started: list[Any] = []

    def make(config: str = "", home: Path | None = None, **kw: Any) -> Any:
        handle = start_wrapped(home or tmp_path / f"wrapped{len(started)}", config, **kw)
        started.append(handle)
        return handle

    yield make
    for handle in started:
        if handle.proc.poll() is None:
            handle.proc.kill()
        handle.proc.wait(10)


# --- test tools, registered only when this module runs the daemon ----------------------


class SleepArgs(msgspec.Struct, forbid_unknown_fields=True):
    seconds: Annotated[float, msgspec.Meta(description="how long to sleep, e.g. 0.5 (default 3600)")] = 3600.0


class NoArgs(msgspec.Struct, forbid_unknown_fields=True):
    pass


class HarnessTool(Tool):
    """Read-only and always allowed, so no approval stands in the way of a lifecycle test."""

    risk = ToolRisk.READ_ONLY
    flags = ToolFlags(always_allow=True)
    summary = ""

    def plan(self, args: Any, ctx: CallContext) -> Plan:
        return Plan(risk=self.risk, summary=self.summary)


class SleepTool(HarnessTool):
    """Sleeps; on cancellation writes a marker file first, so a test can see cleanup ran."""

    name = "test_sleep"
    description = ("Sleep for a while and return.\nUse for holding a call in flight; test_env for env.\n"
                   "Precondition: only in test daemons.")
    Arguments = SleepArgs
    summary = "sleep"

    async def run(self, args: Any, plan: Plan, ctx: CallContext) -> Any:
        (ctx.workspace / f"started-{ctx.call_id}").write_text("started\n")  # a call that starts at once
        try:                                                                 # sends no call.started
            await asyncio.sleep(args.seconds)
        except asyncio.CancelledError:
            (ctx.workspace / f"cancelled-{ctx.call_id}").write_text("cancelled\n")
            raise
        return {"slept": args.seconds}


class StubbornTool(HarnessTool):
    """Ignores cancellation: the worst a tool can do to a shutdown."""

    name = "test_stubborn"
    description = ("Sleep and ignore every cancellation.\nUse for testing shutdown bounds; test_sleep for "
                   "polite.\nPrecondition: only in test daemons.")
    Arguments = NoArgs
    summary = "sleep forever"

    async def run(self, args: Any, plan: Plan, ctx: CallContext) -> Any:
        (ctx.workspace / f"started-{ctx.call_id}").write_text("started\n")
        while True:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                continue


class EnvTool(HarnessTool):
    """Reports what a plain child of the daemon inherits: variable names and open fds.

    The child is started with close_fds=False, as a careless tool would, so an
    inherited listener without FD_CLOEXEC would show up as a socket fd.
    """

    name = "test_env"
    description = ("List the variables and fds a child process inherits.\nUse for env scrub checks; "
                   "test_sleep for waiting.\nPrecondition: only in test daemons.")
    Arguments = NoArgs
    summary = "run env"

    async def run(self, args: Any, plan: Plan, ctx: CallContext) -> Any:
        script = 'env -0; printf "\\0--fds--\\0"; for f in /proc/$$/fd/*; do readlink "$f"; done'
        proc = await asyncio.create_subprocess_exec(
            "/bin/sh", "-c", script, stdout=asyncio.subprocess.PIPE,
            stdin=asyncio.subprocess.DEVNULL, close_fds=False)
        out, _ = await proc.communicate()
        env, _, fds = out.partition(b"\0--fds--\0")
        names = sorted({item.split(b"=", 1)[0].decode() for item in env.split(b"\0") if item})
        return {"names": names, "fds": fds.decode().split()}


class FdHogTool(HarnessTool):
    """Opens fds until the daemon has none left and holds them until cancelled: a leak in a tool."""

    name = "test_fd_hog"
    description = ("Open files until the daemon runs out of descriptors.\nUse for fd exhaustion checks; "
                   "test_sleep for waiting.\nPrecondition: only in test daemons.")
    Arguments = NoArgs
    summary = "hog fds"

    async def run(self, args: Any, plan: Plan, ctx: CallContext) -> Any:
        import os

        held: list[int] = []
        try:
            while True:
                try:
                    held.append(os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC))
                except OSError:
                    break
            os.close(held.pop())  # one back, for the marker file
            (ctx.workspace / f"started-{ctx.call_id}").write_bytes(b"")
            held.append(os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC))
            await asyncio.sleep(3600)
        finally:
            for fd in held:
                os.close(fd)
        return {"held": len(held)}


def harness_tools() -> list[Tool]:
    return [SleepTool(), StubbornTool(), EnvTool(), FdHogTool()]


SHORTENED = {  # HARNESS_* variable: the module constant it sets, in seconds
    "HARNESS_RELOAD_READ_SECONDS": ("scvd.reload", "RELOAD_READ_SECONDS"),
    "HARNESS_STORE_SECONDS": ("scvd.secret_requests", "STORE_SECONDS"),
    "HARNESS_STORE_SECRET_WINDOW": ("scvd.tools.store_secret", "WINDOW_SECONDS"),
    "HARNESS_STALL_SECONDS": ("scvd.connection", "STALL_SECONDS"),
    "HARNESS_MCP_BACKOFF_FIRST": ("scvd.mcp.link", "BACKOFF_FIRST"),
    "HARNESS_MCP_DELETE_TIMEOUT": ("scvd.mcp.link", "DELETE_TIMEOUT"),
    "HARNESS_MCP_STDIN_CLOSE_GRACE": ("scvd.mcp.stdio", "STDIN_CLOSE_GRACE"),
    "HARNESS_HEAP_QUIET_SECONDS": ("scvd.heap", "QUIET_SECONDS"),
    "HARNESS_LEFTOVER_SECONDS": ("scvd.cli", "LEFTOVER_SECONDS"),
    "HARNESS_THREAD_SECONDS": ("scvd.cli", "THREAD_SECONDS"),
    "HARNESS_CALLS_END_SECONDS": ("scvd.chat.service", "CALLS_END_SECONDS"),
}


def _main(argv: list[str]) -> int:
    """`scvd` itself, with the test tools added to every registry it builds."""
    import scvd.tools
    from scvd import cli

    builtin = scvd.tools.builtin_tools
    scvd.tools.builtin_tools = lambda config, paths: builtin(config, paths) + harness_tools()
    import importlib

    import scvd.reload

    # a bound or a wait a test would otherwise sit through (30 s for a reload or a store, ...)
    for variable, (module, name) in SHORTENED.items():
        if variable in os.environ:
            setattr(importlib.import_module(module), name, float(os.environ[variable]))
    # a hung mount: a reload's read of config.toml, or its sandbox probe, blocks while that file exists
    if "HARNESS_HANG_LOAD_WHILE" in os.environ:
        scvd.reload.load = _hanging(scvd.reload.load, Path(os.environ["HARNESS_HANG_LOAD_WHILE"]))
    if "HARNESS_HANG_SKILLS_WHILE" in os.environ:  # a session.open's skill walk under a hung mount
        import scvd.skills

        scvd.skills.discover = _hanging(scvd.skills.discover, Path(os.environ["HARNESS_HANG_SKILLS_WHILE"]))
    if "HARNESS_HANG_SKILL_LOAD_WHILE" in os.environ:  # a walk under way: each skill directory it looks at waits
        import scvd.skills

        scvd.skills.load_skill = _hanging(scvd.skills.load_skill, Path(os.environ["HARNESS_HANG_SKILL_LOAD_WHILE"]))
    if "HARNESS_HANG_EXPIRY_WHILE" in os.environ:  # chat.transcript_days' listing of chat/ on a hung mount
        import scvd.chat.expiry

        scvd.chat.expiry.stale = _hanging(scvd.chat.expiry.stale, Path(os.environ["HARNESS_HANG_EXPIRY_WHILE"]))
    if "HARNESS_HANG_TRANSCRIPT_READ_WHILE" in os.environ:  # a chat transcript read on a hung mount
        import scvd.chat.transcript

        transcripts = scvd.chat.transcript.Transcripts
        transcripts.read = _hanging(transcripts.read, Path(os.environ["HARNESS_HANG_TRANSCRIPT_READ_WHILE"]))
    if "HARNESS_HANG_INSTALL_WHILE" in os.environ:  # a write's rename on a slow filesystem, once it committed
        import scvd.tools.fs

        scvd.tools.fs._install = _hanging(scvd.tools.fs._install, Path(os.environ["HARNESS_HANG_INSTALL_WHILE"]))
    if "HARNESS_HANG_PROBE_WHILE" in os.environ:
        import scvd.sandbox

        scvd.sandbox.probe = _hanging(scvd.sandbox.probe, Path(os.environ["HARNESS_HANG_PROBE_WHILE"]))
    # the start, before the claim and READY=1: cli.run's handlers keep the signals that come meanwhile
    if "HARNESS_HANG_CLAIM_WHILE" in os.environ:
        import scvd.instance

        scvd.instance.claim = _hanging(scvd.instance.claim, Path(os.environ["HARNESS_HANG_CLAIM_WHILE"]))
    # a slow import (openai's on a loaded machine): the module HARNESS_HANG_IMPORT_OF waits while that file exists
    if "HARNESS_HANG_IMPORT_WHILE" in os.environ:
        sys.meta_path.insert(0, _HeldImport(os.environ["HARNESS_HANG_IMPORT_OF"],
                                            Path(os.environ["HARNESS_HANG_IMPORT_WHILE"])))
    # the moment after the event loop has closed, before the process exits
    if "HARNESS_HANG_AFTER_LOOP_WHILE" in os.environ:
        wait = _hanging(lambda: None, Path(os.environ["HARNESS_HANG_AFTER_LOOP_WHILE"]))
        serve = cli.serve
        cli.serve = lambda *args: (serve(*args), wait())[0]
    return cli.main(argv)


def _hanging(fn: Callable[..., Any], marker: Path) -> Callable[..., Any]:
    """`fn`, which waits while `marker` exists first; `<marker>.hit` says a call is waiting."""
    def hung(*args: Any, **kwargs: Any) -> Any:
        if marker.exists():
            marker.with_name(marker.name + ".hit").touch()
        while marker.exists():
            time.sleep(0.05)
        return fn(*args, **kwargs)
    return hung


class _HeldImport:
    """A finder that finds nothing: it only holds the import of `name` at `marker` (as _hanging does)."""

    def __init__(self, name: str, marker: Path) -> None:
        self.name, self.wait = name, _hanging(lambda: None, marker)

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if name == self.name:
            self.wait()


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
