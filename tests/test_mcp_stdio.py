"""The stdio transport of an MCP server (scvd/mcp/stdio.py) with a real server process."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

from scvd.mcp.spec import StdioLaunch
from scvd.mcp.stdio import open_stdio

# ignores its stdin's end and SIGTERM, as a hung server does; says its pid once its traps are set
STUBBORN = "trap '' TERM; echo $$ > \"$1\"; while :; do sleep 0.05; done"


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def test_a_second_cancel_during_the_stop_still_kills_the_server_and_closes_its_pipes(tmp_path):
    """The daemon's stop cancels a link, and cancels it again once its grace is over: the second cancel
    cut the transport's stop short, which left the server running and its pipes open (uvloop's close
    then failed EBUSY, and the pipes were unclosed at exit)."""
    pid_file = tmp_path / "pid"
    launch = StdioLaunch(argv=["/bin/sh", "-c", STUBBORN, "sh", str(pid_file)], env=dict(os.environ),
                         cwd=str(tmp_path), sandboxed=False)
    seen: dict[str, object] = {}

    async def connected() -> None:
        async with open_stdio(launch) as (_, _, proc):
            seen["proc"] = proc
            await asyncio.Event().wait()  # until cancelled, as a link's connection is

    async def main() -> None:
        task = asyncio.ensure_future(connected())
        # the server may write its pid before open_stdio hands the connection over: wait for both
        while "proc" not in seen or not pid_file.exists() or not pid_file.read_text().strip():
            await asyncio.sleep(0.01)
        task.cancel()  # the stop: stdin closed, then the grace it gives the server
        await asyncio.sleep(0.3)
        task.cancel()  # the stop's grace is over
        await asyncio.wait([task], timeout=5)
        assert task.done(), "the transport did not end after its second cancel"
        # it left nothing to the loop (the exit's wait, a pump): a loop closed now destroyed them pending
        assert [t for t in asyncio.all_tasks() if t is not asyncio.current_task()] == []

    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(main())
    finally:
        loop.close()
    pid = int(pid_file.read_text())
    popen = seen["proc"].popen  # type: ignore[attr-defined]
    assert popen.stdout.closed and popen.stderr.closed and popen.stdin.closed, "the server's pipes stayed open"
    assert popen.returncode == -signal.SIGKILL, "the server was not killed and reaped with its connection"
    assert not alive(pid)
