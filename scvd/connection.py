"""One client connection: its peer's credentials, handshake state, sessions and event sequence.

Rule: frames are written once per loop turn, in order: a call that completes in
the turn that accepted it reaches the peer as one write (one wake-up), not one
write per frame. The answers to the frames of one read go out once they are
handled (client_protocol's `holding`); other frames at the end of the turn.
The peer that stops reading is cut off (Backlog): more than WRITE_BUFFER_LIMIT
waits for it and it read nothing for STALL_SECONDS, or HARD_LIMIT waits; once closed, any
byte waiting does (a half-closed peer that never reads must not keep the fd for good).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import select
import socket
import struct
from typing import Any, Callable

import msgspec

from . import protocol as p, tool_listing
from .approvals import Decider, spawned_by_daemon
from .call_budget import FLOOR
from .text import quoted_name, well_formed

log = logging.getLogger("scvd.server")

WRITE_BUFFER_LIMIT = 64 << 20  # past this, a peer that reads nothing for STALL_SECONDS is cut off
HARD_LIMIT = 4 * WRITE_BUFFER_LIMIT  # past this, a peer is cut off however it reads
STALL_SECONDS = 10.0


class Backlog:
    """Whether a peer stopped reading what is written to it: cut_off() once more than
    WRITE_BUFFER_LIMIT bytes wait and it took none for STALL_SECONDS, or HARD_LIMIT wait. A peer
    that reads on through a burst (six 13 MB MCP answers at once) keeps its answers."""

    def __init__(self, buffered: Callable[[], int], cut_off: Callable[[], None]) -> None:
        self.buffered, self.cut_off = buffered, cut_off  # buffered(): what the transport holds
        self.bound = WRITE_BUFFER_LIMIT  # what may wait unread for good: none once the connection closed
        self.sent = 0  # bytes handed to the transport, counted by its writer
        self._taken = 0  # bytes the peer had taken when the watch began
        self._watch: asyncio.TimerHandle | None = None

    def over(self, waiting: int) -> bool:
        """With `waiting` > WRITE_BUFFER_LIMIT bytes for the peer: True once it is cut off."""
        if waiting > HARD_LIMIT:
            self.cut_off()
            return True
        if self._watch is None:
            self._start()
        return False

    def stop(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None

    def closing(self) -> None:
        """The connection closed with bytes still waiting: cut it off once the peer reads none for STALL_SECONDS."""
        self.stop()
        self.bound = 0
        self._start()

    def _start(self) -> None:
        self._taken = self.sent - self.buffered()
        self._watch = asyncio.get_running_loop().call_later(STALL_SECONDS, self._check)

    def _check(self) -> None:
        self._watch = None
        buffered = self.buffered()
        if buffered <= self.bound:
            return
        if self.sent - buffered > self._taken:  # it read some: watch on
            self._start()
        else:
            self.cut_off()


class Connection:
    """One client connection: its peer, handshake state, sessions and event sequence."""

    _ids = itertools.count(1)
    _decider: Decider | None = None  # decider()'s, made on first use (a subclass may skip __init__)
    queued: Callable[[], int] = staticmethod(lambda: 0)  # frames read, not yet handled (client_protocol's)
    # those frames, taken from the reader (client_protocol's): as scvd stops, each is answered that it will not be
    take_queued: Callable[[], list[Any]] = staticmethod(lambda: [])
    # what its welcome announced: the peer sized its reader by it, and its sessions' result limits
    # were checked against it, so a reload changes it for connections made after it only
    server_frame_bytes: int = p.DEFAULT_SERVER_FRAME_LIMIT
    hello_timer: asyncio.TimerHandle | None = None  # the server's: closes it if no hello comes in time

    def __init__(self, transport: asyncio.Transport, limit: int) -> None:
        self.id = next(self._ids)
        self.transport = transport  # frames come in through client_protocol.ClientProtocol
        self.frames = p.FrameReader(limit)
        self.pid, self.uid, self.gid = peer_credentials(transport.get_extra_info("socket"))
        # checked now as well as at each decision: by then the pid may belong to someone else
        self.spawned_by_daemon = spawned_by_daemon(self.pid)
        self.client = ""
        self.approver = False
        self.answers_secrets = False  # hello's: whether store_secret's requests may be put to it
        self.initialized = False
        self.watcher = False
        self.closed = False
        self.sessions: dict[str, Any] = {}
        # what a call in the frame being handled counts (the server's: call_budget.cost()), what its calls
        # not completed count, and how many they are; set here, so that they share the keys of the others:
        # 200 instructions a read
        self.frame_cost, self.call_bytes, self.calls_held = FLOOR, 0, 0
        self._seq = itertools.count(1)
        self._out: list[bytes] = []  # frames of this loop turn, written together by _flush()
        self._out_bytes = 0
        # set while client_protocol handles the frames of one read: it calls flush() at the end,
        # so their answers go out in that turn, without a callback of their own
        self.holding = False
        self._loop = asyncio.get_running_loop()
        self.backlog = Backlog(self.transport.get_write_buffer_size, self._stopped_reading)

    def decider(self) -> Decider:
        decider = self._decider  # one per connection (every call carries it), made again if hello renamed it
        if decider is None or decider.client != self.client:
            decider = self._decider = Decider(pid=self.pid, uid=self.uid, client=self.client,
                                              spawned=self.spawned_by_daemon)
        return decider

    def send(self, frame: p.Frame, limit: int) -> None:
        if self.closed:
            return
        data = p.encode(frame)
        size = len(data)
        if size > limit:
            data = p.encode(too_large(frame, size, limit))
            size = len(data)
        # what this turn holds back counts too: many answers may complete in one turn
        waiting = self.transport.get_write_buffer_size() + self._out_bytes + size
        if waiting > WRITE_BUFFER_LIMIT and self.backlog.over(waiting):
            return
        out = self._out
        out.append(data)
        self._out_bytes += size
        if not self.holding and len(out) == 1:
            self._loop.call_soon(self._flush)

    def flush(self, soon: bool = False) -> None:
        """At the end of a batch of frames read (see `holding`): write what is held now, or with
        `soon` at the end of the turn (a call's task may add its answer first)."""
        if not soon:
            self._flush()
        elif self._out:
            self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        """Write what this loop turn produced at once: one wake-up of the peer, not one per frame."""
        if self._out and not self.closed:
            out, self._out, self.backlog.sent = self._out, [], self.backlog.sent + self._out_bytes
            self._out_bytes = 0
            self.transport.write(b"".join(out))  # one frame: join hands back that very bytes object

    def _stopped_reading(self) -> None:
        if not self.closed:
            log.warning("client %s stopped reading (%d bytes wait for it); closing its connection",
                        self.label(), self.transport.get_write_buffer_size() + self._out_bytes)
            self.abort()
        elif self.backlog.bound == 0:  # closed: its last answers never left
            log.warning("client %s stopped reading its last answers (%d bytes wait for it); dropping them",
                        self.label(), self.transport.get_write_buffer_size())
            self.transport.abort()

    def pause_reading(self) -> None:
        """Take no bytes off the socket (`mcp.attach`'s fds come next); client_protocol reads on."""
        self.transport.pause_reading()

    def input_waiting(self) -> bool:
        """True when bytes after the frame being handled were already read: whole frames that
        wait their turn (client_protocol sets `queued`) or part of one."""
        return self.queued() > 0 or self.frames.pending

    def fileno(self) -> int:
        return self.transport.get_extra_info("socket").fileno()

    def hung_up(self) -> Callable[[], bool]:
        """A check, for another thread (a session.open's preparation), that turns True once this
        connection closed or its peer closed its socket. Reading is paused while a handler waits,
        so the loop itself would hear of the hang-up only when it writes the answer."""
        fd = self.fileno()

        def hung_up() -> bool:
            # a poll object of its own each time: one shared by the walk's thread and the loop
            # refuses a second poll() at once (RuntimeError)
            watch = select.poll()
            watch.register(fd, 0)  # POLLHUP and POLLERR come unasked; a half-closed peer still reads
            # `closed` is set before the fd is closed, so a poll of a number reused since can only
            # come once the answer is True anyway
            return bool(watch.poll(0))

        return lambda: self.closed or hung_up()

    def next_seq(self) -> int:
        return next(self._seq)

    def close(self) -> None:
        if not self.closed:
            self._flush()
            self.closed = True
            self.backlog.stop()
            self.transport.close()  # after what is buffered went out
            if self.transport.get_write_buffer_size():
                self.backlog.closing()  # ... which a peer that reads none of it must not hold back for good

    def abort(self) -> None:
        """Close at once, dropping what the peer has not read.

        close() waits for the buffer to flush, so a peer that never reads would
        keep the connection, its sessions and the buffer alive for good.
        """
        if not self.closed:
            self.closed = True
            self.backlog.stop()
            self.transport.abort()

    def label(self) -> str:
        return f"#{self.id} {quoted_name(self.client) if self.client else '?'} pid={self.pid}"


# frames whose size is one text's: over the limit, that text is cut and the frame stays itself, with
# its seq or id (an id-less `internal` error in its place left a gap in the seqs, a turn that never
# ended for its client, and clients raised it into whichever request waited)
LONG_TEXT = {p.CallProgress: "message", p.AssistantDelta: "text", p.AssistantCompleted: "text",
             p.QuestionAsked: "question", p.TurnFailed: "message", p.TurnCancelled: "reason",
             p.McpDetached: "reason", p.SecretRequested: "question", p.SecretResolved: "reason",
             p.ApprovalResolved: "reason", p.Error: "message"}


def too_large(frame: p.Frame, size: int, limit: int) -> p.Frame:
    message = f"frame of {size} bytes exceeds server.server_frame_bytes ({limit})"
    if isinstance(frame, p.CallCompleted):
        error = p.ToolErrorInfo(kind="limit", message=f"result too large: {message}; ask for less output")
        return p.CallCompleted(seq=frame.seq, call_id=frame.call_id, ok=False, error=error, turn=frame.turn)
    if isinstance(frame, p.Tools):  # no one text to cut: more tools than one frame holds
        exc = tool_listing.too_large(frame, size, limit)
        return p.Error(code=exc.code, message=exc.message, id=frame.id, kind=exc.kind)
    field = LONG_TEXT.get(type(frame))
    cut = _cut_text(frame, field, limit) if field else None
    if cut is not None:
        return cut
    return p.Error(code="internal", message=message, id=getattr(frame, "id", None))


def _cut_text(frame: p.Frame, field: str, limit: int) -> p.Frame | None:
    """`frame` with its text `field` cut to fit in `limit` bytes, saying how much went; None if none fits."""
    text = well_formed(getattr(frame, field))  # once: a lone surrogate made every encode below slow
    if not text:  # the frame is large for another reason
        return None

    def note(more: int) -> str:
        return f" ... [cut: {more:,} more chars did not fit server.server_frame_bytes]"

    room = limit - len(p.encode(msgspec.structs.replace(frame, **{field: note(len(text))})))  # the longest note
    if room < 0:
        return None
    kept = fitting_start(text, room)
    return msgspec.structs.replace(frame, **{field: kept + note(len(text) - len(kept))})


def fitting_start(text: str, room: int) -> str:
    """The longest start of `text` that is at most `room` bytes as a JSON string (its quotes aside).

    One encode and one decode, whatever the text: JSON writes each char on its own, so the JSON
    of `text[:room]` (no char takes less than a byte) cut at `room` bytes, moved back to the
    start of the char it cut (out of a UTF-8 sequence, out of an escape), is the answer's JSON.
    Guessing a length from the bytes per char of the part kept so far took ~30 encodes of the
    whole when escapes crowd the start and ASCII the rest."""
    body = msgspec.json.encode(text[:room])[1:-1]
    if len(body) <= room:
        return text[:room]
    cut = room
    while 0x80 <= body[cut] < 0xC0:  # inside a UTF-8 sequence (escapes are ASCII)
        cut -= 1
    slash = body.rfind(b"\\", max(0, cut - 5), cut)  # an escape cut in two started in the last 5 bytes
    if slash >= 0:
        run = len(body[:slash + 1].rstrip(b"\\"))  # a run of backslashes is escapes from its first on
        start = slash if (slash - run) % 2 == 0 else slash - 1  # else that one ends a `\\`
        if start + (6 if body[start + 1:start + 2] == b"u" else 2) > cut:
            cut = start
    return msgspec.json.decode(b'"' + body[:cut] + b'"', type=str)


def peer_credentials(sock: socket.socket | None) -> tuple[int, int, int]:
    """(pid, uid, gid) of a Unix socket peer via SO_PEERCRED."""
    if sock is None:
        return 0, -1, -1
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return struct.unpack("3i", creds)
