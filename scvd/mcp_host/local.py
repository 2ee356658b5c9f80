"""The MCP host's client inside scvd: requests go to the daemon's own dispatch, events come back as Structs.

Rule: the host is the same peer to scvd as the `scvctl mcp` process that handed
it over. `LocalConnection` carries that peer's credentials (pid, uid, gid,
spawned_by_daemon) and hello (client name, approver), so approvals, decider
labels, the spawned-process restrictions, the session cap and `sessions.list`
see what they saw of the old bridge's own connection. Nothing is encoded or
decoded: `send()` hands each Struct to the `LocalClient`.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
from typing import Any

from .. import errors, protocol as p
from ..call_budget import FLOOR
from ..connection import Connection


class LocalConnection(Connection):
    """A Connection without a socket: everything that takes a Connection (handlers, send_event,
    the approval gate) takes this one. Not in the daemon's `connections` (the scvctl
    connection it came through is, and counts for the per-uid cap as before)."""

    def __init__(self, peer: Connection, deliver: Any) -> None:  # no socket: Connection.__init__ is not for us
        self.id = next(Connection._ids)
        self.pid, self.uid, self.gid = peer.pid, peer.uid, peer.gid
        self.spawned_by_daemon = peer.spawned_by_daemon
        self.server_frame_bytes = peer.server_frame_bytes
        self.client, self.approver, self.answers_secrets = peer.client, peer.approver, peer.answers_secrets
        self.initialized, self.watcher, self.closed = True, False, False
        self.sessions: dict[str, Any] = {}
        self.frame_cost, self.call_bytes, self.calls_held = FLOOR, 0, 0  # as a Connection's
        self._seq = itertools.count(1)
        self._deliver = deliver

    def send(self, frame: p.Frame, limit: int) -> None:
        if not self.closed:
            self._deliver(frame)

    def hung_up(self) -> Any:
        return lambda: self.closed  # no socket: the host's detach closes it

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.closed = True


class _CallEvents:
    """One call's events, from its acceptance until its `call.completed` is taken."""

    __slots__ = ("events", "waiter")

    def __init__(self) -> None:
        self.events: collections.deque[Any] = collections.deque()
        self.waiter: asyncio.Future[None] | None = None

    def wake(self) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)


class LocalClient:
    """What the bridge needs of a client (`request`, `next_call_event`), over the daemon's dispatch.

    Events of a call are kept from its `call.accepted` until its `call.completed` is taken; any
    other event (of no call, or of a call nobody waits for) is dropped on arrival, so none piles
    up in a host session that lasts for days.
    """

    def __init__(self, daemon: Any, peer: Connection) -> None:
        self.daemon = daemon
        self.conn = LocalConnection(peer, self._deliver)
        self._ids = itertools.count(1)
        self.calls: dict[str, _CallEvents] = {}

    async def request(self, frame_type: type, cost: int = FLOOR, **fields: Any) -> Any:
        """Run one request through the daemon's handlers; an error is raised as the handler raised it.
        `cost`: what a call holds of the connection's budget, as a socket frame's would
        (call_budget.cost() of the host's line that carried it)."""
        if self.conn.closed:
            raise errors.ConnectionClosed("the MCP host was detached from scvd")
        self.conn.frame_cost = cost  # read by the handler, in this step
        answer = await self.daemon.dispatch(self.conn, frame_type(id=next(self._ids), **fields))
        if isinstance(answer, p.CallAccepted):
            self.calls[answer.call_id] = _CallEvents()  # before the call's first event: see calls.py
        return answer

    async def next_call_event(self, call_id: str) -> Any:
        """The next event of one call (started, progress, approvals, completed), taken off its queue."""
        queue = self.calls.get(call_id)
        if queue is None:
            raise errors.ConnectionClosed("the MCP host was detached from scvd")
        while not queue.events:
            if self.conn.closed:
                raise errors.ConnectionClosed("the MCP host was detached from scvd")
            queue.waiter = asyncio.get_running_loop().create_future()
            try:
                await queue.waiter
            finally:
                queue.waiter = None
        event = queue.events.popleft()
        if isinstance(event, p.CallCompleted):
            del self.calls[call_id]
        return event

    def close(self) -> None:
        """Detached: waiting coroutines take what is queued, then hear ConnectionClosed."""
        self.conn.close()
        for queue in self.calls.values():
            queue.wake()

    def _deliver(self, frame: Any) -> None:
        queue = self.calls.get(getattr(frame, "call_id", None))  # type: ignore[arg-type]
        if queue is not None:
            queue.events.append(frame)
            queue.wake()
