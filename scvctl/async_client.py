"""`AsyncClient`: scvd's client over asyncio, for bridges; `from scvctl.client import AsyncClient` finds it.

It shares ClientCore (ids, framing, answer matching) and the connect errors with the blocking
Client in client.py; it is a module of its own so that scvctl's commands, which block, never
import asyncio.
"""

from __future__ import annotations

import asyncio
import os
import socket
from pathlib import Path
from typing import Any

import msgspec

from scvd import errors, protocol as p

from .client import (ClientCore, ConnectionClosed, absolute_workspace, default_socket, not_running, not_scvd,
                     open_socket, went_away)


class _Link(asyncio.Protocol):
    """The socket as a protocol: each chunk is handed over as it arrives (no reader task,
    so an answer reaches its waiting coroutine in one turn of the loop), with write flow control."""

    def __init__(self, on_data: Any, on_lost: Any) -> None:
        self.on_data, self.on_lost = on_data, on_lost
        self._paused = False
        self._drained: list[asyncio.Future[None]] = []
        self._lost: BaseException | None = None
        self.closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def data_received(self, data: bytes) -> None:
        self.on_data(data)

    def eof_received(self) -> bool:
        return False  # close our side too; connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = ConnectionClosed("connection lost", detail=str(exc)) if exc else ConnectionClosed()
        self.resume_writing()
        if not self.closed.done():
            self.closed.set_result(None)
        self.on_lost(self._lost)

    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        for waiter in self._drained:
            if not waiter.done():
                waiter.set_result(None)
        self._drained.clear()

    async def drain(self) -> None:
        if self._lost is not None:
            raise self._lost
        if self._paused:
            waiter = asyncio.get_running_loop().create_future()
            self._drained.append(waiter)
            await waiter
            if self._lost is not None:
                raise self._lost


async def _open_socket_async(path: Path, timeout: float | None) -> socket.socket:
    """open_socket() without blocking the loop. asyncio took a full queue's EAGAIN for a connect in
    progress and handed over a socket that was not connected (ConnectionClosed, ENOTCONN, which a
    bridge's retry on DaemonNotRunning did not catch): that rare wait for room runs in a thread."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.setblocking(False)
    try:
        sock.connect(str(path))  # a Unix socket connects at once, or finds the queue full
    except BlockingIOError:
        sock.close()
        return await asyncio.to_thread(open_socket, path, timeout)
    except OSError as exc:
        sock.close()
        raise not_running(path, exc) from None
    return sock


class AsyncClient:
    """The same client over asyncio; many coroutines may use it at once."""

    def __init__(self) -> None:  # connect() makes one
        self.transport: asyncio.WriteTransport
        self.link: _Link
        self.core = ClientCore()
        self.welcome: p.Welcome | None = None
        self._failure: errors.ScvError | None = None
        self._waiting: list[asyncio.Future[None]] = []  # coroutines waiting for frames to arrive

    @classmethod
    async def connect(cls, path: Path | str | None = None, *, name: str = "scvctl",
                      approver: bool = False, answers_secrets: bool = True,
                      timeout: float | None = 30.0) -> AsyncClient:
        """Connect and say hello; `timeout` bounds the welcome (as the blocking client's does):
        a socket that accepts and never answers is DaemonNotAnswering, not a wait without end."""
        path = Path(path) if path else default_socket()
        client = cls()
        link = _Link(client._on_data, client._fail)
        sock = await _open_socket_async(path, timeout)
        transport, _ = await asyncio.get_running_loop().create_unix_connection(lambda: link, sock=sock)
        client.transport, client.link = transport, link  # type: ignore[assignment]
        try:
            async with asyncio.timeout(timeout):
                welcome = await client.request(client.core.hello(name, approver, answers_secrets))
            client.welcome = client.core.welcomed(welcome)
        except TimeoutError:
            transport.close()
            raise errors.DaemonNotAnswering(
                f"scvd accepted the connection on {path} but sent nothing for {timeout:g} s: it may be hung, "
                "or a socket-activated scvd failed to start; see `journalctl --user -u scvd`") from None
        except ConnectionClosed as exc:  # a bridge's reconnect loop waits on DaemonNotRunning: so it retries
            transport.close()
            raise went_away(path, exc) from None
        except errors.NotScvd as exc:
            transport.close()
            raise not_scvd(path, exc.message) from None
        except BaseException:  # refused, or the connection lost: the transport is ours to close
            transport.close()
            raise
        return client

    async def close(self) -> None:
        self.transport.close()  # writes what is buffered first
        await self.link.closed

    async def send(self, frame: p.Frame | type, **fields: Any) -> p.Frame:
        frame = self.core.build(frame, **fields)
        if self._failure is not None:
            raise self._failure
        self.transport.write(p.encode(frame))
        self.core.sent(frame)
        await self.link.drain()
        return frame

    async def request(self, frame: p.Frame | type, **fields: Any) -> Any:
        frame = self.core.build(frame, **fields)
        request_id = frame.id  # type: ignore[attr-defined]
        try:
            await self.send(frame)
            return await self._wait(lambda: self.core.take_answer(request_id))
        except BaseException:  # cancelled (asyncio.timeout), or failed: an answer coming later is nobody's
            self.core.abandon(request_id)
            raise

    async def next_event(self) -> Any:
        return await self._wait(lambda: self.core.events.popleft() if self.core.events else None)

    async def wait_call(self, call_id: str) -> p.CallCompleted:
        """Wait for one call's completion, leaving other events queued."""

        def find() -> p.CallCompleted | None:
            for event in self.core.events:
                if isinstance(event, p.CallCompleted) and event.call_id == call_id:
                    self.core.events.remove(event)
                    return event
            return None

        return await self._wait(find)

    async def next_call_event(self, call_id: str) -> Any:
        """The next event of one call (started, progress, completed), taken off the queue."""

        def find() -> Any:
            for event in self.core.events:
                if getattr(event, "call_id", None) == call_id:
                    self.core.events.remove(event)
                    return event
            return None

        return await self._wait(find)

    async def open_session(self, workspace: str | os.PathLike[str]) -> str:
        """Open a session on `workspace`; a relative path is this process's, as open() takes it."""
        return (await self.request(p.SessionOpen, workspace=absolute_workspace(workspace))).session

    async def call(self, session: str, tool: str, arguments: dict[str, Any] | None = None,
                   **fields: Any) -> p.CallCompleted:
        call_id = (await self.request(p.Call, session=session, tool=tool,
                                      arguments=arguments or {}, **fields)).call_id
        return await self.wait_call(call_id)

    async def _wait(self, ready: Any) -> Any:
        """Until `ready()` gives something; it runs in the waiting coroutine, so nothing it
        takes off a queue is lost when that coroutine is cancelled."""
        while True:
            value = ready()
            if value is not None:
                return value
            if self._failure is not None:
                raise self._failure
            waiter = asyncio.get_running_loop().create_future()
            self._waiting.append(waiter)
            try:
                await waiter
            except asyncio.CancelledError:
                if waiter in self._waiting:
                    self._waiting.remove(waiter)
                raise

    def _wake(self) -> None:
        waiting, self._waiting = self._waiting, []
        for waiter in waiting:
            if not waiter.done():
                waiter.set_result(None)

    def _on_data(self, data: bytes) -> None:
        try:
            self.core.feed(data)
        except (errors.ScvError, msgspec.DecodeError) as exc:
            self._fail(exc if isinstance(exc, errors.ScvError) else ConnectionClosed(f"connection lost: {exc}"))
            self.transport.close()
            return
        self._wake()

    def _fail(self, failure: errors.ScvError) -> None:
        if self._failure is None:
            self._failure = failure
        self._wake()
