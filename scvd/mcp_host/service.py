"""`mcp.attach`: `scvctl mcp` hands its MCP host's stdio to scvd, which serves MCP on it.

The handoff (docs/protocol.md): `mcp.attach {workspace}` -> scvd stops reading
the connection and answers `ok` -> the client sends stdin and stdout with
SCM_RIGHTS -> scvd reads on again, opens the session for a LocalConnection with
the peer's credentials, connects the pipes -> `mcp.attached {session}`.

Rules of a host's end (one `_end()` per host, whichever comes first):
- the host closes its stdin: what is in flight is answered, then the host is
  dropped; its scvctl connection gets `mcp.detached ok=true` and is closed;
- the scvctl connection closes first (the process was killed, scvd stops): the
  host's calls are cancelled, their answers written, stdout closed;
- the host stops reading its stdout: it is cut off, `mcp.detached ok=false`.
While attached, a change of its session's tools (an MCP server's came or went)
reaches the bridge, which tells the host (notifications/tools/list_changed).
Dropping a host is the daemon's `drop_owner()` on its LocalConnection (sessions
closed, calls cancelled, approvals withdrawn) and its pipes let go, with their
file status flags put back.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from .. import errors, protocol as p
from ..connection import Connection

if TYPE_CHECKING:  # imported by the first mcp.attach: a daemon no MCP host uses does without them
    from ..approvals import Full
    from .bridge import Bridge
    from .local import LocalClient
    from .pipes import HostPipes, Lines

log = logging.getLogger("scvd.mcp_host")

GRACE = 2.0  # seconds a detached host's last answers may take to be written and read
FDS_PER_HOST = 4  # stdin and stdout as handed over (kept to put their flags back), and a dup of each per transport


@dataclass(eq=False)
class Host:
    """One MCP host served on its own pipes."""

    conn: Connection  # the scvctl connection it came through
    client: LocalClient
    pipes: HostPipes
    session: str = ""
    workspace: str = ""
    bridge: Bridge | None = None
    task: asyncio.Task[None] | None = None  # serves until the host's stdin ends
    ended: bool = False
    unwatch: Callable[[], None] = lambda: None  # stops telling the bridge of its session's tool changes


@dataclass(eq=False)
class McpHosts:
    """Every attached MCP host, by the connection that handed it over."""

    daemon: Any
    hosts: dict[Connection, Host] = field(default_factory=dict)
    ending: set[Host] = field(default_factory=set)  # dropped, their pipes not let go of yet
    arriving: int = 0  # hosts between `mcp.attach` and being served: their session's budget check counts them
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)

    def fds_held(self) -> int:
        return FDS_PER_HOST * (len(self.hosts) + len(self.ending) + self.arriving)

    async def attach(self, conn: Connection, frame: p.McpAttach) -> p.Frame:
        from .local import LocalClient, LocalConnection
        from .pipes import HostPipes

        if conn in self.hosts or isinstance(conn, LocalConnection):
            raise errors.InvalidRequest("this connection already handed over an MCP host's stdio; "
                                        "connect again for another")
        self.arriving += 1  # from before the fds come: session.open's budget check then counts them
        try:
            stdin_fd, stdout_fd = await self._receive(conn, frame)
            host = Host(conn=conn, client=LocalClient(self.daemon, conn), pipes=HostPipes(stdin_fd, stdout_fd, None))
            host.pipes.on_cut_off = lambda: self._end_soon(host, "the MCP host stopped reading its stdout")
            # its calls cancelled, its approvals withdrawn: else one approved later would run for nobody
            host.pipes.on_gone = lambda: self._end_soon(host, "the MCP host closed its stdout (it exited)")
            try:
                lines = await self._open(host, frame)
            except BaseException:
                self._drop(host)
                host.pipes.abort()
                raise
        finally:
            self.arriving -= 1
        self.hosts[conn] = host
        host.task = asyncio.ensure_future(self._serve(host, lines))
        log.info("MCP host attached by %s: session %s", conn.label(), host.session)
        return p.McpAttached(id=frame.id, session=host.session, workspace=host.workspace)

    async def _receive(self, conn: Connection, frame: p.McpAttach) -> tuple[int, int]:
        """With the connection not read, say `ok` and take the fds.

        ClientProtocol reads nothing while a handler waits (this one) and reads on once it
        returns, whatever it returns; pausing here once more only says that the fds depend on it.
        """
        conn.pause_reading()
        if conn.input_waiting():  # read already: the fd message, behind them, could not be told apart
            raise errors.HandoffFailed(
                "mcp.attach: more bytes came right after it; send nothing between mcp.attach and its fds "
                "(wait for `ok`, then one data byte with stdin and stdout as SCM_RIGHTS)")
        from .pipes import receive_fds

        conn.send(p.Ok(id=frame.id), self.daemon.config.server.server_frame_bytes)
        return await receive_fds(conn.fileno(), self.daemon.config.server.handoff_timeout_seconds)

    async def _open(self, host: Host, frame: p.McpAttach) -> Lines:
        """The session and the pipes; the bridge reads from the next loop turn on."""
        from .bridge import Bridge
        from .names import HostNames
        from .pipes import MessageWriter

        host.pipes.check(self.daemon.listening_on)
        opened = await self.daemon.on_session_open(host.client.conn, p.SessionOpen(id=0, workspace=frame.workspace))
        host.session, host.workspace = opened.session, opened.workspace
        host.bridge = Bridge(host.client, host.session,
                             MessageWriter(host.pipes, self.daemon.config.server.server_frame_bytes),
                             HostNames(frame.max_tool_name))
        # MCP servers' tools come and go in the session's registry: the host hears of it (list_changed)
        host.unwatch = host.client.conn.sessions[host.session].registry.watch(host.bridge.tools_changed)
        lines = host.bridge.lines(self.daemon.config.server.client_frame_bytes)
        await host.pipes.connect(lines)
        if host.conn.closed:  # the scvctl process went while the session opened
            raise errors.ConnectionClosed("the scvctl connection closed during mcp.attach")
        return lines

    async def _serve(self, host: Host, lines: Lines) -> None:
        assert host.bridge is not None
        await host.bridge.run(lines)
        await self._end(host, ok=True, reason="the MCP host closed its stdin")

    def remedy(self, info: dict[str, Any], full: Full) -> str | None:
        """The approval gate's hook: what a call of a host's session refused because `full` had no room
        for its request is told to do, in a host's words (jsonrpc.FULL); None for any other session's."""
        if not any(host.session == info.get("session") for host in self.hosts.values()):
            return None
        from .jsonrpc import FULL

        return FULL.get(full)

    def connection_dropped(self, conn: Connection) -> None:
        """The scvctl connection is gone: its host goes too (at once when scvd stops)."""
        host = self.hosts.get(conn)
        if host is None:
            return
        if self.daemon.stop_event.is_set():
            self._drop(host)
            host.pipes.abort()
            return
        self._end_soon(host, "the scvctl mcp process closed its connection")

    def close(self) -> None:
        """scvd stops: every host, attached or still ending, lets go of its pipes now."""
        for host in [*self.hosts.values(), *self.ending]:
            if not host.ended:
                self._drop(host)
            host.pipes.abort()
        self.ending.clear()

    def _end_soon(self, host: Host, reason: str) -> None:
        if host.ended:  # already ending (e.g. cut off while its last answers drain)
            return
        if host.task is not None:
            host.task.cancel()
        task = asyncio.ensure_future(self._end(host, ok=False, reason=reason))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _end(self, host: Host, ok: bool, reason: str) -> None:
        if host.ended:
            return
        self._drop(host)
        try:
            # the host's open requests are answered (detached: an error) before its stdout closes
            pending = set(host.bridge.tasks) if host.bridge else set()
            if pending:
                await asyncio.wait(pending, timeout=GRACE)
                for task in pending:
                    task.cancel()
            await host.pipes.close(GRACE)
        finally:
            host.pipes.abort()
            self.ending.discard(host)
            (log.info if ok else log.warning)("MCP host of session %s detached: %s", host.session, reason)
            if not host.conn.closed:  # scvctl mcp exits when it reads this and the connection closes
                self.daemon.send_event(host.conn, p.McpDetached(seq=0, session=host.session, ok=ok, reason=reason))
                host.conn.close()

    def _drop(self, host: Host) -> None:
        """No more requests from the host; its sessions, calls and approvals go."""
        host.ended = True
        host.unwatch()
        if self.hosts.get(host.conn) is host:
            del self.hosts[host.conn]
            self.ending.add(host)
        host.pipes.stop_reading()
        self.daemon.drop_owner(host.client.conn)
        host.client.close()
