"""The MCP host's stdio in scvd: the fds handed over a client socket, and reading and writing them.

Rules:
- The fds arrive with SCM_RIGHTS on a dup of the client's socket, whose transport
  is paused first: a plain recv by the frame reader would drop them silently.
  Exactly two are taken (stdin, stdout); any other count is refused and every fd
  that came is closed. No fd message within the timeout is refused too.
- Nothing blocks the loop: stdin and stdout are read and written through pipe
  transports (O_NONBLOCK); a stdout that is a terminal or the socket stdin is too through
  `_FdWriter`, which never reads it (uvloop's pipe transport reads a write fd to see its
  reader leave: on the terminal or socket that is stdin too, it ate the host's requests).
  A stdout socket of its own (Node's hosts give a socketpair each) is a pipe transport's,
  so a host that dies is seen at once, as on a pipe. On one socket for both, or a terminal,
  the end of stdin is what shows it: stdout hung up then too means the host went.
  Only pipes, sockets and terminals are taken: epoll
  refuses regular files and other devices (/dev/null), and uvloop aborts on them.
  A host that stops reading stdout is cut off (connection.Backlog, as a socket client is).
- The fds' file status flags are put back as they came once the transports are
  done with them: a terminal shared with a shell must not stay non-blocking.
"""

from __future__ import annotations

import asyncio
import fcntl
import logging
import os
import select
import socket
import stat
from typing import Any, Callable

import msgspec

from .. import connection, errors
from ..connection import Backlog
from ..text import json_bytes
from .jsonrpc import line_too_large, too_large

log = logging.getLogger("scvd.mcp_host")

MAX_FDS = 8  # room to see (and close) a few fds too many; beyond it the kernel truncates


async def receive_fds(fileno: int, timeout: float) -> tuple[int, int]:
    """The (stdin, stdout) fds of one SCM_RIGHTS message on socket `fileno`, close-on-exec.

    The caller has paused the socket's transport; this reads on a dup of it (a
    transport's fd cannot be watched twice), one data byte and its fds.
    """
    loop = asyncio.get_running_loop()
    with socket.fromfd(fileno, socket.AF_UNIX, socket.SOCK_STREAM) as dup:
        readable: asyncio.Future[None] = loop.create_future()
        loop.add_reader(dup.fileno(), lambda: readable.done() or readable.set_result(None))
        try:
            await asyncio.wait_for(readable, timeout)
        except TimeoutError:
            raise errors.HandoffFailed(
                f"mcp.attach: no fds came within {timeout:g} s (server.handoff_timeout_seconds); after `ok`, "
                "send stdin and stdout with SCM_RIGHTS and one data byte") from None
        finally:
            loop.remove_reader(dup.fileno())
        try:
            data, fds, flags, _ = socket.recv_fds(dup, 1, MAX_FDS, socket.MSG_CMSG_CLOEXEC | socket.MSG_DONTWAIT)
        except OSError as exc:
            raise errors.HandoffFailed(f"mcp.attach: reading the fds failed: {exc.strerror or exc}") from None
    if len(fds) == 2 and not flags & socket.MSG_CTRUNC:
        return fds[0], fds[1]
    for fd in fds:
        os.close(fd)
    if not data:
        raise errors.HandoffFailed("mcp.attach: the connection closed before the fds came")
    if not fds:
        raise errors.HandoffFailed("mcp.attach: bytes came after `ok` but no fds; send one data byte with "
                                   "stdin and stdout as SCM_RIGHTS, and nothing else before mcp.attached")
    got = f"more than {MAX_FDS}" if flags & socket.MSG_CTRUNC else str(len(fds))
    raise errors.HandoffFailed(f"mcp.attach: send exactly 2 fds, stdin then stdout; {got} came")


ENDS = 4096  # bytes of each end of a line over the limit kept to find its id in


class Lines(asyncio.Protocol):
    """stdin as a protocol: each whole line is handed over as it arrives (no reader loop, so a
    request starts one turn of the loop sooner). A line over `limit` is dropped whole, and said
    once it ends: `on_too_large` gets its first and last ENDS bytes, where a request's id is (first
    as most hosts write it, last as the TypeScript SDK does)."""

    def __init__(self, on_line: Any, on_too_large: Any, limit: int) -> None:
        self.on_line, self.on_too_large, self.limit = on_line, on_too_large, limit
        self.buffer = bytearray()
        self.head: bytes | None = None  # inside a line over the limit: its start, and drop up to its newline
        self.tail = b""  # its last bytes so far
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def data_received(self, data: bytes) -> None:
        if self.head is not None:
            end = data.find(b"\n")
            self.tail = (self.tail + data[:len(data) if end < 0 else end][-ENDS:])[-ENDS:]
            if end < 0:
                return
            self._dropped()
            data = data[end + 1:]
        self.buffer += data
        start = 0
        while (end := self.buffer.find(b"\n", start)) >= 0:
            if end + 1 - start > self.limit:
                self.on_too_large(bytes(self.buffer[start:start + ENDS]), bytes(self.buffer[max(start, end - ENDS):end]))
            else:
                self.on_line(bytes(self.buffer[start:end + 1]))
            start = end + 1
        del self.buffer[:start]
        if len(self.buffer) > self.limit:
            self.head, self.tail = bytes(self.buffer[:ENDS]), bytes(self.buffer[-ENDS:])
            self.buffer.clear()

    def _dropped(self) -> None:
        head, tail, self.head, self.tail = self.head or b"", self.tail, None, b""
        self.on_too_large(head, tail)

    def eof_received(self) -> bool:
        if self.head is not None:
            self._dropped()
        elif self.buffer:
            self.on_line(bytes(self.buffer))  # a last line without its newline
        self.buffer.clear()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            self.done.set_result(None)


class _Out(asyncio.Protocol):
    """stdout's protocol: knows when the transport has let go of its fd, and tells `on_gone` when
    that was not scvd's doing (the host closed its end: it exited or crashed)."""

    def __init__(self, on_gone: Callable[[], None]) -> None:
        self.lost: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.on_gone = on_gone
        self.closing = False  # scvd closes or aborts it

    def connection_lost(self, exc: Exception | None) -> None:
        if exc is not None:
            log.info("the MCP host's stdout closed: %s", exc)
        if not self.lost.done():
            self.lost.set_result(None)
        if not self.closing:
            self.on_gone()


class HostPipes:
    """The host's stdin and stdout: one transport each, on dups of the fds handed over; the
    originals are kept only to put their file status flags back."""

    def __init__(self, stdin_fd: int, stdout_fd: int, on_cut_off: Callable[[], None]) -> None:
        self.fds = (stdin_fd, stdout_fd)
        self.flags = tuple(fcntl.fcntl(fd, fcntl.F_GETFL) for fd in self.fds)
        self.on_cut_off = on_cut_off
        # the host closed its stdout while scvd served it: nobody hears answers, nor approves for it
        self.on_gone: Callable[[], None] = lambda: None
        self.reader: asyncio.ReadTransport | None = None
        self.writer: asyncio.WriteTransport | None = None
        self.out: _Out | None = None
        self.released = False
        self.backlog: Backlog | None = None

    def check(self, scvd_address: str) -> None:
        """Refuse what the loop cannot watch, and a socket back to scvd's own (`scvd_address`:
        scvd would answer its own lines without end), before any transport is made on them."""
        for name, fd in zip(("stdin", "stdout"), self.fds):
            kind = _unwatchable(fd)
            if kind:
                raise errors.InvalidRequest(
                    f"mcp.attach: the host's stdin and stdout must be pipes, sockets or terminals; its {name} "
                    f"is {kind}: let an MCP host start `scvctl mcp` (it gives it pipes)")
            if _peer_address(fd) == scvd_address:
                raise errors.InvalidRequest(
                    f"mcp.attach: the host's {name} is a connection to scvd's own socket ({scvd_address}); "
                    "scvd would answer itself without end: hand over an MCP host's stdio (let the host "
                    "start `scvctl mcp`)")

    async def connect(self, lines: Lines) -> None:
        """Start reading stdin into `lines`; stdout is writable from now on."""
        loop = asyncio.get_running_loop()
        try:
            self.out = _Out(lambda: self.on_gone())
            if _own_pipe(*self.fds):  # its transport sees the host close it
                self.writer, _ = await loop.connect_write_pipe(lambda: self.out, _dup_file(self.fds[1], "wb"))
            else:
                self.writer = _FdWriter(loop, self.fds[1], self.out)
            self.backlog = Backlog(self.writer.get_write_buffer_size, self._stopped_reading)
            self.reader, _ = await loop.connect_read_pipe(lambda: lines, _dup_file(self.fds[0], "rb"))
            lines.done.add_done_callback(self._stdin_ended)
        except (OSError, ValueError) as exc:
            self.abort()
            raise errors.InvalidRequest(  # check() took their kind: what is left is the system's say
                f"mcp.attach: scvd could not watch the host's stdin and stdout ({exc}); see its log") from None

    def _stdin_ended(self, _: Any) -> None:
        """On one socket for both, or a terminal, scvd never reads stdout: a host that exited shows
        only as the end of its stdin, and would be heard of at the next write. Its stdout hung up
        too: nobody hears the answers (a host that closed only its stdin still reads them)."""
        if not self.released and _hung_up(self.fds[1]):
            self.on_gone()

    def write(self, data: bytes) -> None:
        writer, backlog = self.writer, self.backlog
        if writer is None or backlog is None or writer.is_closing():
            return
        waiting = writer.get_write_buffer_size() + len(data)
        if waiting > connection.WRITE_BUFFER_LIMIT and backlog.over(waiting):
            return
        backlog.sent += len(data)
        writer.write(data)

    def _stopped_reading(self) -> None:
        if self.writer is None or self.writer.is_closing() or self.released:
            return
        log.warning("the MCP host stopped reading its stdout (%d bytes waiting); cutting it off",
                    self.writer.get_write_buffer_size())
        self.abort()
        self.on_cut_off()

    def stop_reading(self) -> None:
        if self.reader is not None:
            self.reader.close()

    async def close(self, grace: float) -> None:
        """Stop reading, let stdout drain for up to `grace` seconds, then let go of both."""
        self.stop_reading()
        if self.writer is not None and self.out is not None:
            self.out.closing = True
            self.writer.close()
            try:
                await asyncio.wait_for(asyncio.shield(self.out.lost), grace)
            except TimeoutError:
                log.warning("the MCP host did not read the last %g s of its stdout; closing it", grace)
        self.abort()

    def abort(self) -> None:
        """Let go at once: no transport writes any more, the flags are put back, our fds are closed."""
        if self.backlog is not None:
            self.backlog.stop()
        if self.out is not None:
            self.out.closing = True
        if self.reader is not None:
            self.reader.close()  # each transport closes its own dup
        writer = self.writer
        if writer is not None and self.out is not None and not self.out.lost.done() and (
                not writer.is_closing() or writer.get_write_buffer_size()):
            # no write after this, whatever was waiting; asyncio's would call connection_lost twice
            # if aborted again, or after a close() that had nothing left to write
            writer.abort()
        if self.released:
            return
        self.released = True
        for fd, flags in zip(self.fds, self.flags):
            try:
                fcntl.fcntl(fd, fcntl.F_SETFL, flags)
            except OSError:
                pass
            os.close(fd)


class _FdWriter:
    """A write-only transport on a dup of a terminal or socket that never reads it: the part of
    asyncio's WriteTransport that HostPipes uses. A write that fails (EPIPE: the host went) ends it
    as a lost connection."""

    def __init__(self, loop: asyncio.AbstractEventLoop, fd: int, protocol: asyncio.BaseProtocol) -> None:
        self.loop, self.protocol = loop, protocol
        self.fd = os.dup(fd)
        os.set_blocking(self.fd, False)  # the flags are the host's fd's too: HostPipes puts them back
        self.buffer = bytearray()
        self.closing = self.done = False

    def get_write_buffer_size(self) -> int:
        return len(self.buffer)

    def is_closing(self) -> bool:
        return self.closing

    def write(self, data: bytes) -> None:
        if self.closing:
            return
        if not self.buffer:
            try:
                data = data[os.write(self.fd, data):]
            except BlockingIOError:
                pass
            except OSError as exc:
                return self._end(exc)
            if not data:
                return
            self.loop.add_writer(self.fd, self._writable)
        self.buffer += data

    def _writable(self) -> None:
        try:
            del self.buffer[:os.write(self.fd, self.buffer)]
        except BlockingIOError:
            return
        except OSError as exc:
            return self._end(exc)
        if not self.buffer:
            self.loop.remove_writer(self.fd)
            if self.closing:
                self._end(None)

    def close(self) -> None:
        """Write what is buffered, then let go."""
        if not self.closing:
            self.closing = True
            if not self.buffer:
                self.loop.call_soon(self._end, None)

    def abort(self) -> None:
        self._end(None)

    def _end(self, exc: Exception | None) -> None:
        self.closing = True
        self.buffer.clear()
        if self.done:
            return
        self.done = True
        self.loop.remove_writer(self.fd)
        os.close(self.fd)
        self.protocol.connection_lost(exc)


def _dup_file(fd: int, mode: str) -> Any:
    """A file on a dup of `fd`, for a pipe transport to own and close."""
    dup = os.dup(fd)
    try:
        return os.fdopen(dup, mode, buffering=0)
    except BaseException:
        os.close(dup)  # fdopen does not close an fd it refused
        raise


def _own_pipe(stdin_fd: int, stdout_fd: int) -> bool:
    """stdout is a pipe, or a socket that is not stdin's: nothing the host sends comes on it, so a
    transport that reads it to see the host close it loses nothing."""
    out, into = os.fstat(stdout_fd), os.fstat(stdin_fd)
    if stat.S_ISFIFO(out.st_mode):
        return True
    return stat.S_ISSOCK(out.st_mode) and (out.st_dev, out.st_ino) != (into.st_dev, into.st_ino)


def _hung_up(fd: int) -> bool:
    """Whether nobody is left at the other end of `fd` (a socket closed whole, a terminal hung up,
    a pipe's reader gone); not for a socket only shut for writing."""
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    return any(events & (select.POLLHUP | select.POLLERR) for _, events in poller.poll(0))


def _unwatchable(fd: int) -> str | None:
    """What `fd` is when epoll cannot watch it; None for a pipe, a socket or a terminal."""
    mode = os.fstat(fd).st_mode
    if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or (stat.S_ISCHR(mode) and os.isatty(fd)):
        return None
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISREG(mode):
        return "a regular file"
    return "a device that is not a terminal (such as /dev/null)"


def _peer_address(fd: int) -> str | None:
    """The address a Unix socket `fd` is connected to (a listener's path), else None."""
    if not stat.S_ISSOCK(os.fstat(fd).st_mode):
        return None
    dup = os.dup(fd)
    try:
        sock = socket.socket(fileno=dup)  # the family is read off the fd; closing it closes the dup
    except OSError:
        os.close(dup)
        return None
    with sock:
        if sock.family != socket.AF_UNIX:
            return None
        try:
            name = sock.getpeername()
        except OSError:  # not connected: nothing to compare
            return None
    name = name.decode(errors="replace") if isinstance(name, bytes) else str(name)
    return name or None  # a socketpair's end has no name


def _encode(value: Any) -> bytes:
    return json_bytes(msgspec.json.encode, value)  # a lone surrogate in a result: still answered


FRAME_ENVELOPE = 512  # call.completed's fields around its result, and more
# the longest line a host is sent: hosts on the TypeScript SDK drop the whole connection on a line
# past 10 MiB (its ReadBuffer's STDIO_DEFAULT_MAX_BUFFER_SIZE), and every later call fails
HOST_LINE_BYTES = 8 << 20


class MessageWriter:
    """The bridge's `out`: one JSON-RPC message a line on the host's stdout. A tool result over
    `limit` (server.server_frame_bytes) becomes the `limit` error a socket client gets for it. An
    answer whose line is over `line_limit` (HOST_LINE_BYTES), which hosts may not read, is sent
    without its structuredContent, or else as a `limit` error too."""

    def __init__(self, pipes: HostPipes, limit: int, line_limit: int = HOST_LINE_BYTES) -> None:
        self.pipes, self.limit, self.line_limit = pipes, limit, line_limit

    def write(self, message: dict[str, Any] | list[dict[str, Any]]) -> None:
        """One message, or the answers to a batch (each result over `limit` cut down on its own)."""
        if isinstance(message, list):
            data = self._batch(message)
        else:
            data = _encode(message)
            if len(data) + 1 > min(self.limit, self.line_limit):  # a line's size, as a socket client's frame counts it
                data = _encode(self._fitted(message, len(data) + 1))
        self.pipes.write(data + b"\n")

    def _batch(self, answers: list[dict[str, Any]]) -> bytes:
        """The answers as one line; while it is over `line_limit`, its largest answer gives way."""
        fitted = [self._fitted(m, len(_encode(m)) + 1) for m in answers]
        sizes = [len(_encode(m)) for m in fitted]
        while (line := sum(sizes) + len(sizes) + 2) > self.line_limit:  # the commas, brackets and newline
            largest = max(range(len(sizes)), key=sizes.__getitem__)
            fitted[largest] = line_too_large(fitted[largest], line, self.line_limit)
            size = len(_encode(fitted[largest]))
            if size >= sizes[largest]:  # nothing left to shorten
                break
            sizes[largest] = size
        return _encode(fitted)

    def _fitted(self, message: dict[str, Any], size: int) -> dict[str, Any]:
        if size <= min(self.limit, self.line_limit) or not ("result" in message or "error" in message):
            return message  # answers only: a request or notification of ours is sent as it is
        result = message.get("result")
        if isinstance(result, dict) and result.get("content"):
            # the MCP line carries a result twice (escaped in its text, and as structuredContent):
            # measured as the call.completed a socket client gets, which the config's limits fit
            payload = result["structuredContent"] if "structuredContent" in result else result["content"][0].get("text")
            own = len(_encode(payload)) + FRAME_ENVELOPE
            if own > self.limit:
                return too_large(message, own, self.limit)
            if size > self.line_limit and "structuredContent" in result:
                # optional without an outputSchema (scvd lists none): the text carries the same result
                message = {**message, "result": {k: v for k, v in result.items() if k != "structuredContent"}}
                size = len(_encode(message)) + 1
        return message if size <= self.line_limit else line_too_large(message, size, self.line_limit)
