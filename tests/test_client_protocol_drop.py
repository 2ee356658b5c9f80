"""A connection scvd cuts itself (a client that stopped reading) while one of its handlers waits is
dropped at once: its sessions, calls and approvals do not wait for a handler that may never return."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

from scvd import errors
from scvd.adapters import service
from test_fast_call import frame, started, stopped


def test_a_connection_scvd_cut_while_a_handler_hangs_is_dropped_at_once(run_loop, tmp_path: Path, monkeypatch):
    (tmp_path / "ws").mkdir()
    hung, entered = threading.Event(), threading.Event()

    def hangs(*args: Any, **kw: Any) -> Any:  # an agent's home on a hung mount
        entered.set()
        hung.wait(30)
        raise errors.Unavailable("the agent's home could not be read")

    monkeypatch.setattr(service, "answer_spec", hangs)

    async def main() -> None:
        daemon, serving, protocol, peer, session = await started(tmp_path)
        try:
            assert session in daemon.sessions
            protocol.data_received(frame(type="agents.spec", id=5, agent="claude", action="status"))
            while not entered.is_set():
                await asyncio.sleep(0.01)
            protocol.conn.abort()  # as Connection._stopped_reading does
            for _ in range(100):
                if not daemon.sessions:
                    break
                await asyncio.sleep(0.01)
            assert daemon.sessions == {}, "the cut connection kept its session while its handler hung"
        finally:
            hung.set()
            await stopped(daemon, serving, peer)

    run_loop(main())
