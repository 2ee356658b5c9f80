"""`scvd run` forked from a process that imported scvd and its heavy optional parts once.

Each test's daemon paid its imports anew: scvd's own (0.2-0.3 s of CPU), and with an MCP server the
MCP SDK's (1.4-1.9 s: 550 pydantic models), with a chat provider openai's (about 1 s). The suite
starts over a thousand daemons on two cores: those imports were most of its time. A fork server
per pytest worker (this file, run as a script) imports them once; `start()` asks it for a child
that becomes `python -m scvd run` with the test's environment, folder, umask, argv and log, as
`subprocess.Popen` would start it. What runs is scvd's own code from `scvd/__main__.py` on.

What a fork cannot give, `conftest.start_daemon` starts with Popen as before (`forkable()`): a
`prefix` (unshare, setpriv), a `preexec_fn`, passed fds, or an environment whose interpreter or
loader variables (PYTHON*, LD_*, MALLOC_*, GLIBC_TUNABLES, the locale's, TZ) differ from the fork
server's, since those act before the first import (a PYTHONPATH hiding the MCP SDK, say). A test
whose subject is the start itself or a lazy import (what an idle daemon has imported, an import off
the loop, /proc/<scvd>/environ, absolute memory figures: a forked daemon's RSS holds what the server
imported) passes `fork=False`; `SCVD_TESTS_FORK=0` starts every daemon with Popen. `start_script()`
forks the tests' own Python servers (the HTTP MCP servers built on the SDK) the same way, and
`scvctl()` the `scvctl` commands the tests run with their output captured (their pipes are passed
to the server with the request).

The server is the forked daemon's parent: it reaps it and writes its wait status to a pipe whose
other end the test holds (`ForkedProc`, the part of Popen the tests use). It ends when its worker's
socket closes (the worker's exit, an os._exit by pytest-timeout too), and its daemons get SIGTERM
then (PR_SET_PDEATHSIG), as a Popen'd daemon does when its worker dies (conftest.dying_with_pytest).
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
# imported once by the server: scvd's start and server, and the optional parts a config pulls in
PRELOAD = ("scvd.cli", "scvd.server", "scvd.tools.fs", "scvd.tools.bash", "scvd.tools.skill",
           "scvd.tools.script", "scvd.tools.script_defs", "scvd.adapters.tools", "scvd.mcp.manager",
           "scvd.mcp.link", "scvd.mcp.tool", "scvd.mcp.spec", "scvd.mcp.cap", "scvd.chat.service",
           "scvd.chat.openai_api", "scvd.chat.rehearsal", "jsonschema", "referencing.jsonschema", "openai",
           "mcp.server.mcpserver", "uvicorn",  # the tests' own HTTP MCP servers (start_script)
           "scvctl.cli", "scvctl.commands", "scvctl.client")  # run("scvctl", ...)
# what acts at an interpreter's or the loader's start, before a fork could set it (LANG and LC_*: the
# locale coercion and file system encoding; TZ: the C library's zone, read once)
AT_EXEC = ("PYTHON", "LD_", "MALLOC_", "GLIBC_TUNABLES", "LANG", "LC_", "TZ")
# but read at their first use, after the fork: keyring's backend (the server never imports keyring)
AT_USE = ("PYTHON_KEYRING_BACKEND",)
_PR_SET_PDEATHSIG = 1
_HEADER = struct.Struct("!I")


def enabled() -> bool:
    return os.environ.get("SCVD_TESTS_FORK", "1") != "0"


def server_env() -> dict[str, str]:
    """The fork server's environment: the worker's, as conftest.base_env passes it to a daemon."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SCV", "NOTIFY_", "LISTEN_"))}
    env.update(PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1")
    return env


def forkable(env: dict[str, str]) -> bool:
    """Whether a daemon of `env` starts the same forked as exec'd: no variable read at exec differs
    from the fork server's (the running one's, or the one a start would spawn now)."""
    ours = _server.env if _server is not None and _server.proc.poll() is None else server_env()
    return all(env.get(k) == ours.get(k) for k in {*env, *ours} if k.startswith(AT_EXEC) and k not in AT_USE)


class ForkedProc:
    """A forked daemon, as the tests use a `subprocess.Popen`: pid, poll, wait, signals, returncode."""

    stdin = stdout = stderr = None

    def __init__(self, pid: int, status_fd: int, args: list[str]) -> None:
        self.pid, self.args, self.returncode = pid, args, None
        self._status_fd = status_fd
        self._lock = threading.Lock()

    def _read_status(self, timeout: float | None) -> bool:
        if not self._lock.acquire(timeout=-1 if timeout is None else timeout):
            return False  # another thread waits for it: Popen's poll() does not block either
        try:
            if self.returncode is not None:
                return True
            waiter = select.poll()
            waiter.register(self._status_fd, select.POLLIN)
            if not waiter.poll(None if timeout is None else timeout * 1000):
                return False
            data = b""
            while chunk := os.read(self._status_fd, 64):
                data += chunk
            os.close(self._status_fd)
            if not data:
                raise RuntimeError(f"the fork server died before scvd (pid {self.pid}) ended")
            self.returncode = os.waitstatus_to_exitcode(int(data))
            return True
        finally:
            self._lock.release()

    def poll(self) -> int | None:
        self._read_status(0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if not self._read_status(timeout):
            raise subprocess.TimeoutExpired(self.args, timeout)  # type: ignore[arg-type]
        return self.returncode  # type: ignore[return-value]

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:  # as Popen: never a signal to a pid reaped and maybe reused
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class _Server:
    """The worker's end. The server ends when this socket closes, the worker's exit included (a
    PR_SET_PDEATHSIG would follow the thread that started it, not the worker)."""

    def __init__(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self.env = server_env()
        self.proc = subprocess.Popen([sys.executable, str(Path(__file__)), str(theirs.fileno())],
                                     env=self.env, pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL)
        theirs.close()
        self.sock = ours
        self.lock = threading.Lock()

    def fork(self, request: dict[str, Any], stdio: list[int]) -> tuple[int, int]:
        data = json.dumps(request).encode()
        with self.lock:
            try:
                socket.send_fds(self.sock, [_HEADER.pack(len(data)) + data], stdio)
                msg, fds, _flags, _addr = socket.recv_fds(self.sock, 65536, 1)
            except BaseException:  # a reply left unread would answer the next request
                self.sock.close()
                self.proc.kill()
                raise
        if not msg:
            raise RuntimeError(f"the fork server ended (exit {self.proc.poll()}): its stderr is the test's")
        reply = json.loads(msg)
        if "error" in reply:  # what Popen raises in the test when the child's setup fails
            raise OSError(reply["errno"], reply["error"])
        os.set_inheritable(fds[0], False)  # as Popen's own fds: not for the test's other children
        return reply["pid"], fds[0]


_server: _Server | None = None
_server_lock = threading.Lock()


def start(args: list[str], env: dict[str, str], log_path: Path, cwd: str | os.PathLike[str] | None = None,
          umask: int = -1) -> ForkedProc:
    """`python -m scvd <args>` with `env`, its stdout and stderr appended to `log_path`, stdin /dev/null."""
    return _fork({"module": "scvd", "args": args, "env": env, "log": str(log_path),
                  "cwd": os.path.abspath(cwd or os.getcwd()), "umask": umask}, [sys.executable, "-m", "scvd", *args])


def start_script(script: Path, args: list[str], log_path: Path) -> ForkedProc:
    """`python <script> <args>` (a test's own server built on the MCP SDK, say), as `start()` does
    for scvd, in the fork server's environment."""
    return _fork({"path": str(script), "args": args, "env": server_env(), "log": str(log_path),
                  "cwd": os.getcwd(), "umask": -1}, [sys.executable, str(script), *args])


def run(module: str, args: list[str], env: dict[str, str], *, input: str | None = None,
        cwd: str | os.PathLike[str] | None = None, timeout: float | None = None) -> subprocess.CompletedProcess:
    """As `subprocess.run([python, "-m", module, *args], env=env, input=input, capture_output=True,
    text=True, timeout=timeout)` (stdin /dev/null without `input`), forked: `scvctl`, which the
    tests run some 400 times at 0.2-0.3 s of CPU of imports each."""
    import locale

    argv = [sys.executable, "-m", module, *args]
    ends = [os.pipe(), os.pipe(), os.pipe()]  # stdin, stdout, stderr
    try:
        proc = _fork({"module": module, "args": args, "env": env, "log": None, "umask": -1,
                      "cwd": os.path.abspath(cwd or os.getcwd())}, argv,
                     [ends[0][0], ends[1][1], ends[2][1]])
    except BaseException:
        for pair in ends:
            os.close(pair[0])
            os.close(pair[1])
        raise
    for fd in (ends[0][0], ends[1][1], ends[2][1]):
        os.close(fd)
    writer = threading.Thread(target=_feed, args=(ends[0][1], (input or "").encode()), daemon=True)
    writer.start()
    deadline = None if timeout is None else time.monotonic() + timeout
    got = {ends[1][0]: b"", ends[2][0]: b""}
    waiter = select.poll()
    for fd in got:
        waiter.register(fd, select.POLLIN)
    open_fds = set(got)
    while open_fds:
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            proc.kill()
            proc.wait()
            for fd in got:
                os.close(fd)
            raise subprocess.TimeoutExpired(argv, timeout, got[ends[1][0]], got[ends[2][0]])  # type: ignore[arg-type]
        for fd, _ in waiter.poll(None if left is None else left * 1000):
            chunk = os.read(fd, 65536)
            if chunk:
                got[fd] += chunk
            else:
                waiter.unregister(fd)
                open_fds.discard(fd)
    for fd in got:
        os.close(fd)
    try:  # its output ended; it may not have
        code = proc.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:  # as subprocess.run: killed, then raised
        proc.kill()
        proc.wait()
        raise
    encoding = locale.getpreferredencoding(False)

    def text(data: bytes) -> str:  # as text=True reads a pipe: universal newlines
        return data.decode(encoding).replace("\r\n", "\n").replace("\r", "\n")

    return subprocess.CompletedProcess(argv, code, text(got[ends[1][0]]), text(got[ends[2][0]]))


def scvctl(args: list[str], env: dict[str, str], *, input: str | None = None,
           cwd: str | os.PathLike[str] | None = None, timeout: float | None = None) -> subprocess.CompletedProcess:
    """`python -m scvctl <args>` with its output captured as text: forked where that runs it alike
    (`forkable()`), else as subprocess.run."""
    if enabled() and forkable(env):
        return run("scvctl", args, env, input=input, cwd=cwd, timeout=timeout)
    return subprocess.run([sys.executable, "-m", "scvctl", *args], env=env, input=input, cwd=cwd,
                          stdin=None if input is not None else subprocess.DEVNULL, capture_output=True,
                          text=True, timeout=timeout)


def _feed(fd: int, data: bytes) -> None:
    try:
        while data:
            data = data[os.write(fd, data):]
    except BrokenPipeError:  # it did not read all of it: as communicate(), not an error
        pass
    finally:
        os.close(fd)


def _fork(request: dict[str, Any], argv: list[str], stdio: list[int] | None = None) -> ForkedProc:
    global _server
    with _server_lock:
        if _server is None or _server.proc.poll() is not None:
            _server = _Server()
        server = _server
    pid, status_fd = server.fork(request, stdio or [])
    return ForkedProc(pid, status_fd, argv)


# ---- the fork server (this file as a script) ----

def _recv_exactly(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:  # a SIGCHLD may cut a recv short
        chunk = sock.recv(size - len(data))
        if not chunk:
            return b""
        data += chunk
    return data


def _recv_request(sock: socket.socket) -> tuple[dict[str, Any], list[int]] | None:
    """A request, and the stdin, stdout and stderr it came with (none: /dev/null and its log)."""
    first, fds, _flags, _addr = socket.recv_fds(sock, 65536, 3)
    if len(first) < _HEADER.size:
        first += _recv_exactly(sock, _HEADER.size - len(first)) if first else b""
        if len(first) < _HEADER.size:
            return None
    (size,) = _HEADER.unpack(first[:_HEADER.size])
    body = first[_HEADER.size:]
    return json.loads(body + _recv_exactly(sock, size - len(body))), fds


def _serve(sock: socket.socket) -> tuple[dict[str, Any], list[int], int] | None:
    """Fork a daemon per request until the worker hangs up; in a child, return its request, the fds
    it must close and the one that tells the server its setup's outcome."""
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    statuses: dict[int, int] = {}  # pid -> the write end of its status pipe
    while True:
        try:
            ready = select.select([sock, wake_r], [], [])[0]
        except InterruptedError:
            continue
        if wake_r in ready:
            os.read(wake_r, 512)
            while True:
                try:
                    pid, status = os.waitpid(-1, os.WNOHANG)
                except ChildProcessError:
                    break
                if pid == 0:
                    break
                fd = statuses.pop(pid, None)
                if fd is not None:
                    try:
                        os.write(fd, str(status).encode())
                    except OSError:  # the worker let go of it
                        pass
                    os.close(fd)
        if sock in ready:
            received = _recv_request(sock)
            if received is None:
                return None
            request, stdio = received
            request["stdio"] = stdio
            status_r, status_w = os.pipe()
            setup_r, setup_w = os.pipe()
            try:
                pid = os.fork()
            except OSError as exc:
                _reply(sock, {"error": f"fork: {exc.strerror}", "errno": exc.errno}, [])
                for fd in (status_r, status_w, setup_r, setup_w, *stdio):
                    os.close(fd)
                continue
            if pid == 0:  # detached: the socket object must not close the fd's number again later
                return request, [sock.detach(), wake_r, wake_w, status_r, status_w, setup_r,
                                 *statuses.values()], setup_w
            statuses[pid] = status_w
            os.close(setup_w)
            for fd in stdio:  # the child's now
                os.close(fd)
            failed = b""
            while chunk := os.read(setup_r, 4096):  # until the child runs scvd, or says why it cannot
                failed += chunk
            os.close(setup_r)
            if failed:
                _reply(sock, json.loads(failed), [])
            else:
                _reply(sock, {"pid": pid}, [status_r])
            os.close(status_r)


def _reply(sock: socket.socket, reply: dict[str, Any], fds: list[int]) -> None:
    try:
        socket.send_fds(sock, [json.dumps(reply).encode()], fds)
    except OSError:  # the worker went away: the next recv says so
        pass


def _become_scvd(request: dict[str, Any], inherited: list[int], setup_w: int, server: int) -> None:
    """In the forked child: what Popen and `python -m scvd` would have set up, then scvd's __main__.
    A setup that fails is told to the server (and the test, as Popen raises it) and ends the child."""
    import runpy

    try:
        _set_up(request, inherited, server)
    except OSError as exc:
        os.write(setup_w, json.dumps({"error": f"{exc.strerror}: {exc.filename}", "errno": exc.errno}).encode())
        os._exit(255)
    except BaseException as exc:  # noqa: BLE001  # a bug here: say it where the test sees it
        os.write(setup_w, json.dumps({"error": repr(exc), "errno": 0}).encode())
        os._exit(255)
    os.close(setup_w)
    if "path" in request:
        runpy.run_path(request["path"], run_name="__main__")
    else:
        runpy.run_module(request["module"], run_name="__main__", alter_sys=True)


def _set_up(request: dict[str, Any], inherited: list[int], server: int) -> None:
    import ctypes

    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_SETMASK, [])
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != server:  # the server died before the prctl
        os._exit(1)
    for fd in inherited:
        os.close(fd)
    os.chdir(request["cwd"])  # first: Popen raises FileNotFoundError for a missing cwd
    if request["stdio"]:  # run(): the test's pipes
        for target, fd in enumerate(request["stdio"]):
            os.dup2(fd, target)
        for fd in request["stdio"]:
            if fd > 2:
                os.close(fd)
    else:
        null = os.open(os.devnull, os.O_RDONLY)
        log = os.open(request["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        os.dup2(null, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(null)
        os.close(log)
    if request["umask"] >= 0:
        os.umask(request["umask"])
    os.environ.clear()
    os.environ.update(request["env"])
    if "path" in request:  # as `python script` puts the script's folder first
        sys.path[0] = os.path.dirname(os.path.abspath(request["path"]))
        sys.argv = [request["path"], *request["args"]]
    else:  # as `python -m` puts the working directory first
        sys.path[0] = os.getcwd()
        sys.argv = [sys.argv[0], *request["args"]]


def _main() -> None:
    import gc
    import importlib

    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except ImportError:  # an optional part not installed: its daemons import it (or fail) as they would
            pass
    assert threading.active_count() == 1, "the fork server must not run threads: a fork would copy their locks"
    assert "keyring" not in sys.modules, "keyring imported before the fork would keep the server's PYTHON_KEYRING_BACKEND"
    gc.collect()
    gc.freeze()  # the children's collections then leave the shared pages alone
    server = os.getpid()
    child = _serve(socket.socket(fileno=int(sys.argv[1])))
    if child is None:
        return
    _become_scvd(*child, server)


if __name__ == "__main__":
    _main()
