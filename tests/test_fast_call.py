"""A fast call costs the daemon one loop turn: its call.accepted and call.completed leave in one write,
before the loop turns again; a call that goes on in a task holds its call.accepted for that task's answer.

The daemon runs in this loop; frames go straight to a ClientProtocol whose transport is one end of
a real socketpair, so what the peer can read right after `data_received` returns is what the
daemon wrote in that turn.
"""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path
from typing import Any

import msgspec

from scvd import config, paths as paths_mod, protocol as p
from scvd.client_protocol import ClientProtocol
from scvd.server import Daemon


def frame(**fields: Any) -> bytes:
    return msgspec.json.encode(fields) + b"\n"


def available(peer: socket.socket) -> list[Any]:
    """The frames the peer can read now, in one recv (one write of the daemon's, or several)."""
    try:
        data = peer.recv(1 << 20)
    except BlockingIOError:
        return []
    return [p.decode_server_frame(line) for line in data.splitlines()]


async def started(tmp_path: Path) -> tuple[Daemon, asyncio.Future[Any], ClientProtocol, socket.socket, str]:
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    paths = paths_mod.resolve({"SCV_HOME": str(home)})
    paths_mod.prepare(paths)
    daemon = Daemon(paths, config.load(paths.config_file, env={}), install_signals=False)
    serving = asyncio.ensure_future(daemon.serve())
    while not paths.socket.exists():
        await asyncio.sleep(0.01)
    ours, peer = socket.socketpair()
    peer.setblocking(False)
    _, protocol = await asyncio.get_running_loop().create_unix_connection(lambda: ClientProtocol(daemon), sock=ours)
    protocol.data_received(frame(type="hello", id=1, protocol=1, client={"name": "fast"}))
    protocol.data_received(frame(type="session.open", id=2, workspace=str(tmp_path / "ws")))
    opened: list[Any] = []
    while not any(isinstance(f, p.SessionOpened) for f in opened):
        await asyncio.sleep(0.01)
        opened += available(peer)
    session = next(f.session for f in opened if isinstance(f, p.SessionOpened))
    return daemon, serving, protocol, peer, session


async def stopped(daemon: Daemon, serving: asyncio.Future[Any], peer: socket.socket) -> None:
    peer.close()
    daemon.request_stop("test over")
    await serving


def test_a_read_is_answered_in_the_turn_that_brought_it(run_loop, tmp_path: Path):
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "a.txt").write_text("hello\n")

    async def main() -> None:
        daemon, serving, protocol, peer, session = await started(tmp_path)
        try:
            for i in range(3):
                protocol.data_received(frame(type="call", id=10 + i, session=session, tool="read",
                                             arguments={"path": "a.txt"}))
                frames = available(peer)  # written before the loop turned again
                assert [type(f) for f in frames] == [p.CallAccepted, p.CallCompleted], frames
                accepted, completed = frames
                assert accepted.id == 10 + i and completed.call_id == accepted.call_id
                assert completed.ok and completed.result["content"] == "hello\n"
        finally:
            await stopped(daemon, serving, peer)

    run_loop(main())


def test_a_call_that_goes_on_in_a_task_sends_call_accepted_with_its_answer(run_loop, tmp_path: Path):
    (tmp_path / "ws").mkdir()

    async def main() -> None:
        daemon, serving, protocol, peer, session = await started(tmp_path)
        try:
            protocol.data_received(frame(type="call", id=20, session=session, tool="no_such_tool", arguments={}))
            assert available(peer) == []  # call.accepted waits for the task's first step
            frames: list[Any] = []
            for _ in range(5):
                await asyncio.sleep(0)
                frames = frames or available(peer)
            assert [type(f) for f in frames] == [p.CallAccepted, p.CallCompleted], frames  # at once, in order
            accepted, completed = frames
            assert accepted.id == 20 and completed.error.kind == "unknown_tool"
            assert "no tool named 'no_such_tool'" in completed.error.message
        finally:
            await stopped(daemon, serving, peer)

    run_loop(main())
