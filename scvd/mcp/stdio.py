"""The stdio transport of an MCP server, on scvd's process runner (imports the MCP SDK).

The SDK's own `stdio_client` starts the server with anyio and hides the process;
scvd needs it as one of its own children: leading its own process group (so
no call's orphan sweep takes it, see process.py), with stderr kept as a
bounded tail for `scvctl status`, and killed with its group when it stops.
"""

from __future__ import annotations

import asyncio
import signal
from collections import deque
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Callable

import anyio
import mcp_types as types
from mcp.shared.message import SessionMessage

from ..process import signal_group, signal_service, spawn_service, wait_service
from ..procscan import SCANS
from .spec import StdioLaunch
from .not_mcp import NotMcp, answered_off_loop, stand_in
from .skim import CLOSED_CODE_KEPT, MESSAGE_LIMIT, is_log_message, replacement

LINE_LIMIT = MESSAGE_LIMIT  # one JSON-RPC message from the server; a larger one ends the connection
# what scvd reads of a pipe ahead of what it has taken: the reader pauses the pipe past twice this, so a
# server writing faster than scvd takes its messages is held back by the pipe. (A reader of LINE_LIMIT
# read 128 MiB ahead: an answer waited minutes behind a flood of log notifications, scvd's memory grew.)
# A longer line is taken in parts of about this.
READ_AHEAD = 1 << 20
STDERR_TAIL_LINES = 20
# kept of a stderr line; it is shown cut to STDERR_LINE_SHOWN once the secrets are out (a secret a cut
# fell in would no longer match, and its other part would show)
STDERR_LINE_KEPT = 8192
STDERR_LINE_BYTES = 4 * STDERR_LINE_KEPT  # read of a stderr line: its first STDERR_LINE_KEPT chars at most
STDERR_LINE_SHOWN = 500
NOT_MCP_LINES = 5
STDIN_CLOSE_GRACE = 2.0  # MCP's shutdown: close stdin, wait, then SIGTERM, wait, then SIGKILL
TERM_GRACE = 2.0
# for the stderr reader to reach the end of what a stopped server wrote (its last words, often why it
# died); a process outside its group (setsid) may hold the pipe longer: its lines are not waited for
STDERR_DRAIN = 0.5


@dataclass
class ServerProcess:
    """The running server: its process, the exit future and the tail of its stderr."""

    popen: Any
    exited: asyncio.Task[int]
    sandboxed: bool  # the leader is bwrap (see signal_service)
    stderr: deque[str] = field(default_factory=lambda: deque(maxlen=STDERR_TAIL_LINES))
    broken: str | None = None  # why scvd ended the connection (a message above LINE_LIMIT)
    # the last lines on stdout that were not JSON-RPC: a usage text, a banner, a log line
    not_mcp: deque[str] = field(default_factory=lambda: deque(maxlen=NOT_MCP_LINES))
    stderr_read: asyncio.Task[None] | None = None  # ends at its stderr's end
    # the messages of errors the server sent with code -32000, which JSON-RPC leaves to servers and
    # the SDK uses for a closed connection: what tells the server's answer from the SDK's word
    said_closed_code: deque[str] = field(default_factory=lambda: deque(maxlen=CLOSED_CODE_KEPT))

    async def settled(self, timeout: float) -> None:
        """Wait (up to `timeout`) for its exit and the end of its stderr: its stdout closed first."""
        waits = [self.exited] + ([self.stderr_read] if self.stderr_read else [])
        await asyncio.wait(waits, timeout=timeout)

    def stderr_tail(self, hide: Callable[[str], str] = str) -> str:
        """The last lines, each through `hide` (the secrets taken out) before it is cut."""
        return _shown(self.stderr, hide)

    def not_mcp_tail(self, hide: Callable[[str], str] = str) -> str:
        return _shown(self.not_mcp, hide)


def _shown(lines: deque[str], hide: Callable[[str], str]) -> str:
    return "\n".join(hide(line)[:STDERR_LINE_SHOWN] for line in lines)


@asynccontextmanager
async def open_stdio(launch: StdioLaunch) -> AsyncIterator[tuple[Any, Any, ServerProcess]]:
    """Start the server; yield the SDK's stream pair and the process; stop it on exit."""
    loop = asyncio.get_running_loop()
    popen = spawn_service(launch.argv, launch.cwd, launch.env)
    proc = ServerProcess(popen, loop.create_task(wait_service(popen)), launch.sandboxed)
    out = asyncio.StreamReader(limit=READ_AHEAD)
    err = asyncio.StreamReader(limit=READ_AHEAD)
    transports: list[Any] = []
    try:
        for reader, pipe in ((out, popen.stdout), (err, popen.stderr)):
            transport, _ = await loop.connect_read_pipe(lambda r=reader: asyncio.StreamReaderProtocol(r), pipe)
            transports.append(transport)
        wtransport, wproto = await loop.connect_write_pipe(asyncio.streams.FlowControlMixin, popen.stdin)
        transports.append(wtransport)
        stdin = asyncio.StreamWriter(wtransport, wproto, None, loop)
    except BaseException:
        await _stop_and_close(proc, transports)
        raise
    read_send, read_recv = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_send, write_recv = anyio.create_memory_object_stream[SessionMessage](0)
    pumps = [
        loop.create_task(_read_stdout(out, read_send, proc)),
        loop.create_task(_read_stderr(err, proc)),
        loop.create_task(_write_stdin(write_recv, stdin)),
    ]
    proc.stderr_read = pumps[1]
    try:
        yield read_recv, write_send, proc
    finally:
        stdin.close()  # MCP's shutdown begins by closing the server's stdin
        try:
            await _stop_and_close(proc, transports, tuple(pumps))
        finally:
            for stream in (read_send, read_recv, write_send, write_recv):
                stream.close()


async def _read_stdout(out: asyncio.StreamReader, send: Any, proc: ServerProcess) -> None:
    async with send:  # closing it tells the session the connection ended
        while True:
            line, whole = await _read_line(out, LINE_LIMIT)
            if not whole:  # its id unread: no call could be told alone
                proc.broken = (f"the server wrote a message above {LINE_LIMIT} bytes, scvd's limit of one "
                               "message, so scvd closed its connection")
                return
            if not line:
                return
            if not line.strip() or is_log_message(line):  # a log line of the server's: scvd shows none
                continue
            try:
                message = types.jsonrpc_message_adapter.validate_json(replacement(line) or line, by_name=False)
            except ValueError as exc:
                proc.not_mcp.append(_line(line))
                ident, answers = await answered_off_loop(line)
                await send.send(NotMcp(line, answers))  # the link logs it
                if ident is not None:  # the SDK would drop it: its call waited for good
                    await send.send(stand_in(ident, line, exc))
                continue
            if isinstance(message, types.JSONRPCError) and message.error.code == types.CONNECTION_CLOSED:
                proc.said_closed_code.append(message.error.message)
            await send.send(SessionMessage(message))


async def _read_stderr(err: asyncio.StreamReader, proc: ServerProcess) -> None:
    while True:
        line, whole = await _read_line(err, STDERR_LINE_BYTES)
        if not line:
            return
        proc.stderr.append(_line(line))
        while not whole:  # the rest of a long line, dropped
            _, whole = await _read_line(err, STDERR_LINE_BYTES)


async def _read_line(reader: asyncio.StreamReader, limit: int) -> tuple[bytes, bool]:
    """The next line of `reader` (its newline kept; at the pipe's end the last one without one, then b"")
    and whether it is whole: of a line above `limit` bytes, its first `limit`, the rest left unread but
    for the part read last. The reader's own limit (READ_AHEAD) is the part read at a time."""
    parts: list[bytes] = []
    size = 0
    while True:
        try:
            part = await reader.readuntil(b"\n")
        except asyncio.IncompleteReadError as exc:  # the pipe's end
            part = exc.partial
        except asyncio.LimitOverrunError as exc:  # no newline within the reader's limit: a part of a long line
            parts.append(await reader.readexactly(exc.consumed))
            size += exc.consumed
            if size > limit:
                return b"".join(parts)[:limit], False
            continue
        parts.append(part)
        size += len(part) - part.endswith(b"\n")
        line = b"".join(parts)
        return (line, True) if size <= limit else (line[:limit], False)


def _line(line: bytes) -> str:
    return line.decode("utf-8", "replace").rstrip()[:STDERR_LINE_KEPT]


async def _write_stdin(recv: Any, stdin: asyncio.StreamWriter) -> None:
    try:
        async with recv:
            async for message in recv:
                data = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                stdin.write(data.encode() + b"\n")
                await stdin.drain()
    except (ConnectionError, OSError):
        pass  # the server is gone; the stdout side reports it


async def _stop_and_close(proc: ServerProcess, transports: list[Any],
                          pumps: tuple[asyncio.Task[Any], ...] = ()) -> None:
    """_stop, the stderr read to its end (STDERR_DRAIN at most), then the pumps and pipes closed. A
    second cancel (the daemon's stop grace is over) cuts the stop short: the server's group is killed at
    once then, its exit waited for (TERM_GRACE at most) and its pipes closed all the same."""
    try:
        await _stop(proc)
        if proc.stderr_read is not None:  # its group is gone: the pipe's end is near
            await asyncio.wait([proc.stderr_read], timeout=STDERR_DRAIN)
    except BaseException:
        if not proc.exited.done():
            signal_group(proc.popen.pid, signal.SIGKILL)
            # reaped before the connection ends: a loop closed right after the daemon's stop found the
            # exit's wait pending ("Event loop is closed") and the server a zombie
            await asyncio.wait([proc.exited], timeout=TERM_GRACE)
        raise
    finally:
        for task in pumps:
            task.cancel()
        _close(transports, proc.popen)
        await asyncio.gather(*pumps, return_exceptions=True)  # cut short too: no pump outlives it


async def _stop(proc: ServerProcess) -> None:
    """Close stdin, give it a moment, then SIGTERM (and SIGCONT) and at last SIGKILL to its whole group."""
    for sig, grace in ((None, STDIN_CLOSE_GRACE), (signal.SIGTERM, TERM_GRACE), (signal.SIGKILL, TERM_GRACE)):
        if proc.exited.done():
            break
        if sig is not None:
            signal_service(proc.popen, sig, wrapper=proc.sandboxed)
        if sig == signal.SIGTERM:  # a stopped server acts on it once continued, as a cancelled call's command
            signal_service(proc.popen, signal.SIGCONT, wrapper=proc.sandboxed)
        await asyncio.wait([proc.exited], timeout=grace)
    # members the leader left behind (its group outlives it only while one is alive)
    pgid = proc.popen.pid
    try:
        procs = await SCANS.scan()
    except asyncio.CancelledError:  # cut short (the stop's grace ran out): kill them unseen, as a call's are
        signal_group(pgid, signal.SIGKILL)
        raise
    if any(p.pgid == pgid and p.alive for p in procs.values()):
        signal_group(pgid, signal.SIGKILL)


def _close(transports: list[Any], popen: Any) -> None:
    for transport in transports:
        transport.close()
    for pipe in (popen.stdin, popen.stdout, popen.stderr):
        try:
            pipe.close()
        except OSError:
            pass
