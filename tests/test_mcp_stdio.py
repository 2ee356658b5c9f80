"""The stdio transport of an MCP server (scvd/mcp/stdio.py) with a real server process."""

from __future__ import annotations

import asyncio
import os
import signal
import time
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


def test_a_cancel_during_the_stops_last_look_still_kills_what_the_server_left(tmp_path, monkeypatch):
    """The stop looks (a /proc scan, slow on a host of many processes) for what the server's group left
    after its leader went; the stop's second cancel landing in that look skipped the kill, and a helper
    that ignores SIGTERM outlived scvd."""
    from scvd import procscan
    from scvd.mcp import stdio
    from scvd.process import spawn_service, wait_service

    real_scan = procscan.Scanner.scan
    looking = asyncio.Event()

    async def slow_scan(self):  # the look takes a while, as among ten thousand processes
        looking.set()
        await asyncio.sleep(0.5)
        return await real_scan(self)

    monkeypatch.setattr(procscan.Scanner, "scan", slow_scan)
    monkeypatch.setattr(stdio, "STDIN_CLOSE_GRACE", 0.1)
    pid_file = tmp_path / "helper"
    helper = 0

    async def main() -> None:
        nonlocal helper
        # the leader ends on TERM; its helper, in the same group, ignores it
        popen = spawn_service(["sh", "-c", f'(trap "" TERM; exec sleep 300) & echo $! > {pid_file}; wait'],
                              str(tmp_path), dict(os.environ))
        while not pid_file.exists() or not pid_file.read_text().strip():
            await asyncio.sleep(0.01)
        helper = int(pid_file.read_text())
        proc = stdio.ServerProcess(popen=popen, exited=asyncio.ensure_future(wait_service(popen)), sandboxed=False)
        task = asyncio.ensure_future(stdio._stop_and_close(proc, []))
        while not (proc.exited.done() and looking.is_set()):
            await asyncio.sleep(0.01)
        task.cancel()  # the stop's grace is over
        await asyncio.wait([task], timeout=5)

    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(main())
    finally:
        loop.close()
    try:
        deadline = 50
        while alive(helper) and deadline:
            time.sleep(0.1)
            deadline -= 1
        assert not alive(helper), "the server's helper outlived its stop"
    finally:
        if alive(helper):
            os.kill(helper, signal.SIGKILL)
