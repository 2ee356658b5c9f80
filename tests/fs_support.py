"""Helpers shared by the read/write tool tests: a real workspace fd and a hand-built CallContext."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from scvd.config import Config
from scvd.own_places import SERVICE as OWN_PLACES
from scvd.tools import containment, fs
from scvd.tools.contract import CallContext, Plan, Tool

TOOLS: dict[str, Tool] = {t.name: t for t in fs.tools(Config(), None)}


@dataclass
class Workspace:
    root: Path  # the workspace
    outside: Path  # a sibling directory the tools must never touch
    fd: int
    ctx: CallContext

    def plan(self, tool: str, **raw: Any) -> Plan:
        t = TOOLS[tool]
        return t.plan(t.decode(raw), self.ctx)

    def call(self, tool: str, **raw: Any) -> Any:
        """decode -> plan -> run, as the pipeline does (minus approval)."""
        t = TOOLS[tool]
        args = t.decode(raw)
        return asyncio.run(t.run(args, t.plan(args, self.ctx), self.ctx))

    def run_only(self, tool: str, **raw: Any) -> Any:
        """run without plan: what happens if the tree changed after approval."""
        t = TOOLS[tool]
        args = t.decode(raw)
        return asyncio.run(t.run(args, Plan(risk=t.risk, summary=""), self.ctx))

    def outside_listing(self) -> dict[str, bytes]:
        return {p.name: p.read_bytes() for p in sorted(self.outside.iterdir()) if p.is_file()}


def make_workspace(tmp_path: Path) -> Workspace:
    root = tmp_path / "ws"
    outside = tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (outside / "secret.txt").write_text("TOP SECRET\n")
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    ctx = CallContext(call_id="c1", session_id="s1", workspace=root, workspace_fd=fd, config=Config(), paths=None,
                      services={OWN_PLACES: ()})  # no instance, so none of scvd's own places
    return Workspace(root, outside, fd, ctx)


@pytest.fixture
def ws(tmp_path: Path) -> Iterator[Workspace]:
    w = make_workspace(tmp_path)
    yield w
    os.close(w.fd)


@pytest.fixture(params=["openat2", "walk"])
def backend(request: pytest.FixtureRequest) -> Iterator[str]:
    """Run a test once with openat2 and once with the component walk."""
    if request.param == "openat2" and not containment.openat2_available():
        pytest.skip("this kernel has no openat2")
    containment.set_backend(request.param == "openat2")
    yield request.param
    containment.set_backend(None)


IN_OPEN = 0x20  # inotify(7): the file was opened


def opened(path: Path) -> Callable[[], bool]:
    """Whether `path` is opened from now on (by anyone), as inotify reports it: at the open itself."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
    assert fd >= 0 and libc.inotify_add_watch(fd, os.fsencode(path), IN_OPEN) >= 0, os.strerror(ctypes.get_errno())

    def check() -> bool:
        try:
            return bool(os.read(fd, 4096))
        except BlockingIOError:
            return False
        finally:
            os.close(fd)
    return check


@contextlib.contextmanager
def writer_left_waiting(fifo: Path) -> Iterator[None]:
    """A writer waiting in open() on `fifo`; on leaving, asserts nobody opened it meanwhile (which
    releases the writer, then kills it with SIGPIPE as the reader closes) and that it is intact."""
    writer = subprocess.Popen(["bash", "-c", f"echo precious > {shlex.quote(str(fifo))}"])
    try:
        watch = opened(fifo)
        yield
        assert not watch(), f"{fifo} was opened, releasing its writer"
        assert fifo.read_bytes() == b"precious\n"  # the reader it waits for: it writes, then exits
        assert writer.wait() == 0
    finally:
        writer.kill()
        writer.wait()
