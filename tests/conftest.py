"""Shared fixtures: a real daemon in a subprocess, an in-process daemon with test tools, clients.

`daemon` starts `python -m scvd run` on a temporary SCV_HOME (real signals,
real socket). `inproc` runs the Daemon class on its own event loop in a thread,
so tests can add their own tools; the socket is still a real Unix socket.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
from hypothesis import HealthCheck, settings

import daemon_forks
from no_skip import pytest_make_collect_report, pytest_runtest_makereport  # noqa: F401 (a skip fails .ci/test)
from scvctl.client import Client
from scvd import eventloop

# a loaded 2-core CI machine makes example generation slow; that is not a failure of ours
settings.register_profile("scvd", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("scvd")

ROOT = Path(__file__).resolve().parents[1]
STARTUP_TIMEOUT = 15.0
LOOPS = ("asyncio", "uvloop")
# the loop every daemon of this run uses: .ci/test runs the daemon-level tests once per loop
DAEMON_LOOP = os.environ.get("SCVD_SERVER__EVENT_LOOP", "auto")


def wait_for_socket(path: Path, timeout: float = STARTUP_TIMEOUT, proc: subprocess.Popen | None = None) -> None:
    """Until something accepts on `path`; fail early if `proc` died."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            out = proc.stderr.read().decode() if proc.stderr else ""
            raise AssertionError(f"scvd exited with {proc.returncode} before listening:\n{out}")
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(str(path))
            return
        except OSError:
            time.sleep(0.02)
        finally:
            s.close()
    raise AssertionError(f"nothing listens on {path} after {timeout} s")


def start_child_client(person: Client, workspace: Path, script: str, *args: Any) -> str:
    """Run `python <script> <args>` (a client of scvd: a process scvd started) through an approved
    bash call of `person`'s; return that call's id."""
    from scvd import protocol as p

    command = " ".join([f"PYTHONPATH={ROOT}", sys.executable, script, *map(str, args)])
    runner = person.start_call(person.open_session(workspace), "bash", {"command": command})
    pending = [a for a in wait_pending(person) if a.call_id == runner][0]
    person.request(p.ApprovalDecide, approval_id=pending.approval_id, decision="approve")
    return runner


def wait_pending(c: Client, count: int = 1, timeout: float = 15.0) -> list[Any]:
    """Poll approvals.list until `count` requests are pending; return them."""
    from scvd import protocol as p

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pending = c.request(p.ApprovalsList).approvals
        if len(pending) >= count:
            return pending
        time.sleep(0.05)
    raise AssertionError(f"fewer than {count} approval request(s) after {timeout} s")


def is_guardian(pid: int) -> bool:
    """Whether `pid` is a daemon's guardian (scvd/guardian.py): its one child that outlives every call."""
    from scvd import guardian

    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return guardian.NAME.encode() in f.read().split(b"\0")
    except OSError:
        return False


def base_env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SCV", "NOTIFY_", "LISTEN_"))}
    # a HOME with no profile: bash -l would otherwise run this machine's ~/.profile (pyenv init
    # waits on a lock under load), which is not the daemon's behaviour under test
    user_home = home.parent / f"{home.name}-user-home"
    user_home.mkdir(parents=True, exist_ok=True)
    env.update(SCV_HOME=str(home), PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1", HOME=str(user_home),
               SCVD_SERVER__EVENT_LOOP=DAEMON_LOOP)
    env.update(extra)
    return env


@dataclass
class DaemonProc:
    """A running `scvd run` subprocess."""

    home: Path
    socket: Path
    proc: subprocess.Popen
    env: dict[str, str]
    log_path: Path

    def client(self, **kw: Any) -> Client:
        return Client.connect(self.socket, **kw)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.proc.wait(timeout)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


_PR_SET_PDEATHSIG = 1


def dying_with_pytest(then: Callable[[], None] | None = None) -> Callable[[], None]:
    """A preexec_fn: the child gets SIGTERM when the pytest process that started it dies (before `then`).
    pytest-timeout's thread method ends a worker with os._exit: no fixture's teardown runs, and each
    daemon a timed-out test started ran on, orphaned, for hours."""
    import ctypes

    parent = os.getpid()

    def preexec() -> None:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != parent:  # it died before the prctl
            os.kill(os.getpid(), signal.SIGTERM)
        if then is not None:
            then()

    return preexec


def start_daemon(home: Path, config: str = "", *, env: dict[str, str] | None = None,
                 args: list[str] | None = None, wait: bool = True, prefix: list[str] | None = None,
                 fork: bool = True, secrets: dict[str, str] | None = None, **popen: Any) -> DaemonProc:
    """`scvd run` on `home`; `prefix` runs it under another command (unshare, setpriv). Forked from
    a process that imported scvd and its optional parts once (daemon_forks.py) where that starts it
    alike; `fork=False` when the test's subject is the start's own imports. `secrets` are in its
    secrets.toml before it starts (a forked start reads them at once)."""
    home.mkdir(parents=True, exist_ok=True)
    if config:
        (home / "config.toml").write_text(config)
    stored(home, secrets or {})
    full_env = base_env(home, **(env or {}))
    log_path = home.parent / f"{home.name}-scvd.log"
    log_file = open(log_path, "ab")
    argv = ["run", *(args or [])]
    proc: Any
    if (fork and not prefix and set(popen) <= {"cwd", "umask"} and daemon_forks.enabled()
            and daemon_forks.forkable(full_env)):
        log_file.close()
        umask = popen.get("umask", -1)
        if umask < 0:  # Popen's child gets the worker's umask as it is now
            umask = os.umask(0o077)
            os.umask(umask)
        proc = daemon_forks.start(argv, full_env, log_path, cwd=popen.get("cwd"), umask=umask)
    else:
        popen["preexec_fn"] = dying_with_pytest(popen.get("preexec_fn"))
        with log_file:
            proc = subprocess.Popen(
                [*(prefix or []), sys.executable, "-m", "scvd", *argv],
                env=full_env, stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT, **popen,
            )
    sock = Path(full_env.get("SCV_SOCKET") or home / "run" / "scvd.sock")
    handle = DaemonProc(home=home, socket=sock, proc=proc, env=full_env, log_path=log_path)
    if wait:
        try:
            wait_for_socket(sock, proc=proc)
        except AssertionError:
            proc.kill()
            raise AssertionError(f"scvd did not start:\n{handle.log()}") from None
    return handle


def stored(home: Path, secrets: dict[str, str]) -> None:
    """`secrets` in the secrets.toml of a daemon on `home`, before it starts."""
    if secrets:
        from scvd.paths import resolve
        from scvd.secrets import SecretStore

        store = SecretStore(resolve({"SCV_HOME": str(home)}).secrets_file, env={}, use_keyring=False)
        for key, value in secrets.items():
            store.set(key, value)


def reloaded(d: DaemonProc, config: str) -> None:
    """Write the config, SIGHUP, and wait for the reload's end (unbounded: the test's timeout is the bound)."""
    done, failed = d.log().count("configuration reloaded from"), d.log().count("reload failed")
    (d.home / "config.toml").write_text(config)
    d.proc.send_signal(signal.SIGHUP)
    while d.log().count("configuration reloaded from") == done:
        assert d.log().count("reload failed") == failed, d.log()
        time.sleep(0.1)


SHARED_BASES = ("/tmp", "/var/tmp", "/dev/shm")


def shared_dir_for_other_uids(prefix: str) -> Path:
    """A fresh 0755 directory that other uids can reach: outside pytest's 0700 tmp tree, under the
    first of SHARED_BASES every uid may traverse (some machines make /tmp itself 0700)."""
    import tempfile

    for base in SHARED_BASES:
        chain = [Path(base), *Path(base).parents]
        if all(p.is_dir() and p.stat().st_mode & 0o001 for p in chain):
            path = Path(tempfile.mkdtemp(prefix=prefix, dir=base))
            path.chmod(0o755)
            return path
    pytest.fail(f"none of {', '.join(SHARED_BASES)} can be traversed by other uids")


@pytest.fixture(autouse=True)
def _log_redaction_of_this_test_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """The values scvd hides in its log are process-wide (redact.hide_in_logs): a test's must not
    make a later test's check pass (or a `nothing hidden` check fail) on the same worker."""
    import scvd.redact

    monkeypatch.setattr(scvd.redact, "_in_logs", ())
    monkeypatch.setattr(scvd.redact, "_log_forms", ())


@pytest.fixture
def scv_home(tmp_path: Path) -> Path:
    home = tmp_path / "scvhome"
    home.mkdir(mode=0o700)
    return home


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    return ws


@pytest.fixture
def make_daemon(tmp_path: Path) -> Iterator[Callable[..., DaemonProc]]:
    started: list[DaemonProc] = []

    def make(config: str = "", home: Path | None = None, **kw: Any) -> DaemonProc:
        d = start_daemon(home or tmp_path / f"scvhome{len(started)}", config, **kw)
        started.append(d)
        return d

    yield make
    for d in started:
        if d.proc.poll() is None:
            d.proc.terminate()
            try:
                d.proc.wait(10)
            except subprocess.TimeoutExpired:
                d.proc.kill()
                d.proc.wait()


@pytest.fixture
def daemon(make_daemon: Callable[..., DaemonProc], scv_home: Path) -> DaemonProc:
    return make_daemon(home=scv_home)


@pytest.fixture
def client(daemon: DaemonProc) -> Iterator[Client]:
    with daemon.client(name="pytest") as c:
        yield c


@dataclass
class InProc:
    """A Daemon on its own event loop in a thread, with extra tools."""

    daemon: Any
    loop: asyncio.AbstractEventLoop
    thread: threading.Thread
    socket: Path
    home: Path
    errors: list[BaseException] = field(default_factory=list)

    def client(self, **kw: Any) -> Client:
        return Client.connect(self.socket, **kw)

    def call_soon(self, fn: Callable[..., Any], *args: Any) -> None:
        self.loop.call_soon_threadsafe(fn, *args)


@pytest.fixture
def make_inproc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., InProc]]:
    from scvd import config as config_mod, paths as paths_mod
    from scvd.server import Daemon

    running: list[InProc] = []

    def make(config: str = "", tools: list[Any] | None = None) -> InProc:
        home = tmp_path / f"inproc{len(running)}"
        home.mkdir(mode=0o700)
        if config:
            (home / "config.toml").write_text(config)
        paths = paths_mod.resolve({"SCV_HOME": str(home)})
        paths_mod.prepare(paths)
        loaded = config_mod.load(paths.config_file, env={})
        loop = eventloop.new_event_loop(DAEMON_LOOP)
        daemon = Daemon(paths, loaded, extra_tools=tools, install_signals=False)
        handle = InProc(daemon=daemon, loop=loop, thread=None, socket=paths.socket, home=home)  # type: ignore[arg-type]

        def main() -> None:
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(daemon.serve())
            except BaseException as exc:  # surfaced by the fixture's teardown
                handle.errors.append(exc)
            finally:
                loop.close()

        handle.thread = threading.Thread(target=main, name="scvd-inproc", daemon=True)
        handle.thread.start()
        wait_for_socket(paths.socket)
        running.append(handle)
        return handle

    yield make
    for h in running:
        try:
            h.loop.call_soon_threadsafe(h.daemon.request_stop, "test over")
        except RuntimeError:  # the test stopped it: its loop is closed
            pass
        h.thread.join(15)
        assert not h.thread.is_alive(), "in-process daemon did not stop"
        assert not h.errors, h.errors


@pytest.fixture(params=LOOPS)
def run_loop(request: pytest.FixtureRequest) -> Callable[[Any], Any]:
    """Run a coroutine to its end on a new loop, once per kind (asyncio and uvloop)."""

    def run(coro: Any) -> Any:
        loop = eventloop.new_event_loop(request.param)
        assert eventloop.name(loop) == request.param
        try:
            return loop.run_until_complete(coro)
        finally:
            loop.close()

    return run
