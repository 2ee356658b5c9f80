"""A client's incoming frames: split where they arrive and handled in order, most without a task.

Rules:
- Frames are split in `data_received` (the frame limit and `frame_too_large` as before,
  `protocol.FrameReader`) and handed to the server one at a time, in order.
- A handler that answers without waiting answers at once, in the same loop turn: no reader
  task, no wake-up of one. The answers to the frames of one read go out in one write at its
  end (`Connection.holding`), after the calls they submitted took their first step
  (`frames_handled`): a fast call's `call.accepted` and `call.completed` leave together,
  before its audit records are kept (`answers_written`).
- A handler that waits (an awaitable) runs as a task, and the frames after it, and further
  reading, wait until it is done: answers keep their frames' order.
- Backpressure: reading pauses while the peer does not read its answers (`pause_writing`)
  and while a handler waits; `Connection.send` still cuts off a peer that stopped reading (connection.Backlog).
- Fairness: at most FRAMES_PER_TURN frames of one connection are handled in one loop turn, and
  no more once TURN_SECONDS went by (the clock read every CLOCK_EVERY frames); the rest wait for
  the next turn (reading paused), so a flood or a burst of dear frames does not hold the loop
  from every other client.
- End of stream: frames that came before it are handled first, then the connection is
  dropped (its sessions closed, their calls cancelled); a half-closed peer still reads, so it
  closes once those calls have sent their `call.completed` (within
  server.shutdown_grace_seconds). A lost connection drops what it had not handled and is
  dropped at once, though a handler still runs (one that never returns, on a hung mount,
  must not keep its calls and approvals); what that handler opens is dropped when it returns.
  Reading is paused while a handler waits, so its end of stream is seen then only when a
  write to it fails (an event): a peer that just closes waits for the handler.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from typing import Any, Protocol

from . import protocol as p
from .connection import Connection

FRAMES_PER_TURN = 256  # a multiple of CLOCK_EVERY
TURN_SECONDS = 0.005  # a connection's frames in one loop turn: other clients wait that long for theirs
CLOCK_EVERY = 4  # frames between two reads of the clock (a few ns each; a frame costs microseconds)
# Server.frames_handled(): no call started (nothing held); calls started, their books held until
# answers_written(); and one of them goes on in a task next turn (its answer may join the batch's)
NOTHING_STARTED, STARTED, GOES_ON = 0, 1, 2

class Server(Protocol):
    """What a client's protocol needs from the daemon."""

    def open_connection(self, transport: asyncio.Transport) -> Connection | None:
        """A Connection for a new client, or None when it was refused (told why and closed)."""

    def handle_frame(self, conn: Connection, line: bytes) -> asyncio.Future[Any] | None:
        """Answer one frame; the task that answers it when the answer has to wait (the daemon
        cancels it at shutdown)."""

    def frame_too_large(self, conn: Connection, request_id: Any) -> None:
        """Answer a line over the limit (`request_id`: its id, when its first bytes hold it)."""

    def frames_handled(self) -> int:
        """A batch of frames was handled: what they started takes its first step now, and what the
        daemon does after an answer (a call's audit records, the status) waits for answers_written().
        NOTHING_STARTED, STARTED, or GOES_ON when something goes on next turn (a call's task), whose
        answer should go out with theirs."""

    def answers_written(self) -> None:
        """The batch's answers were written (or queued for the end of the turn): what frames_handled() held."""

    def connection_done(self, conn: Connection, lost: bool) -> None:
        """The peer is gone (`lost`) or ended its stream: drop the connection and its sessions.
        After an end of stream the connection closes once the calls it cancelled have sent their
        `call.completed` (bounded); when lost, at once. Again after a handler that waited returns
        (what it opened since goes too), and when a peer is lost while its connection lingers."""


class ClientProtocol(asyncio.Protocol):
    """One client socket: frames in, to `server`, in order."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.conn: Connection | None = None
        self.transport: asyncio.Transport | None = None
        self._lines: deque[Any] = deque()  # frames read but not handled yet (behind a waiting one)
        self._waiting: asyncio.Future[Any] | None = None  # the handler that waits
        self._next_turn = False  # FRAMES_PER_TURN were handled, or TURN_SECONDS went by: the rest in the next turn
        self._write_paused = False
        self._reading = True
        self._ended = False  # end of stream or connection lost: drop once the handled frames are done
        self._lost = False  # connection lost: nothing written reaches the peer any more
        self._done = False
        self._started = NOTHING_STARTED  # the last batch's frames_handled(): GOES_ON holds its answers a turn

    # --- asyncio.Protocol ------------------------------------------------------------

    def connection_made(self, transport: Any) -> None:  # uvloop's transports are no asyncio.Transport
        self.transport = transport
        self.conn = self.server.open_connection(transport)
        if self.conn is None:
            self._done = True
        else:
            self.conn.queued = self._lines.__len__
            self.conn.take_queued = self._take_queued

    def data_received(self, data: bytes) -> None:
        conn = self.conn
        if conn is None or conn.closed or self._done:
            return
        lines = conn.frames.feed(data)
        if self._idle():
            conn.holding = True  # their answers go out together below, not a turn later
            try:
                self._handle(lines)  # the common case: no deque in between
            finally:
                conn.holding = False
                try:
                    conn.flush(soon=self._started == GOES_ON)
                finally:
                    if self._started:  # the calls' books after their answers: the client is woken first
                        self.server.answers_written()
        else:
            self._lines.extend(lines)

    def _take_queued(self) -> list[Any]:
        """The frames read but not handled (behind a handler that waits, or for the next turn), taken:
        none of them is handled after this."""
        lines = list(self._lines)
        self._lines.clear()
        return lines

    def eof_received(self) -> bool:
        conn = self.conn
        if conn is not None and conn.frames.pending:  # a last frame without its newline (`printf ... | socat`)
            self.data_received(b"\n")
        self._ended = True
        if self._idle():
            self._finish()
        return True  # keep the transport for the answers still to go out; _finish closes it

    def connection_lost(self, exc: Exception | None) -> None:
        self._ended = self._lost = True
        self._lines.clear()  # nobody hears their answers
        if self._waiting is None and not self._done:
            self._finish()
        elif self.conn is not None and (self._waiting is not None or not self.conn.closed):
            # now: a handler still waits (_finish comes again, for what it opens meanwhile; scvd may
            # have cut the connection itself), or an end of stream came first and the connection
            # waits for its cancelled calls, unheard now
            self.server.connection_done(self.conn, lost=True)

    def pause_writing(self) -> None:
        self._write_paused = True
        self._update_reading()

    def resume_writing(self) -> None:
        self._write_paused = False
        self._update_reading()

    # --- frames in order -----------------------------------------------------------------

    def _idle(self) -> bool:
        return self._waiting is None and not self._next_turn and not self._lines

    def _handle(self, lines: list[Any]) -> None:
        """Handle `lines` in order; the rest waits in the deque behind a handler that waits, or
        for the next turn after FRAMES_PER_TURN or TURN_SECONDS."""
        conn, server = self.conn, self.server
        assert conn is not None
        try:
            self._handle_each(conn, server, lines)
        finally:
            self._started = server.frames_handled()

    def _handle_each(self, conn: Connection, server: Server, lines: list[Any]) -> None:
        started = time.monotonic() if len(lines) > CLOCK_EVERY else 0.0  # a read of a few reads no clock
        for i, line in enumerate(lines):
            if conn.closed:
                return
            if i and not i % CLOCK_EVERY:
                if i == FRAMES_PER_TURN or time.monotonic() - started > TURN_SECONDS:
                    self._lines.extend(lines[i:])
                    self._next_turn = True
                    asyncio.get_running_loop().call_soon(self._go_on)
                    self._update_reading()
                    return
            if isinstance(line, p.TooLarge):
                server.frame_too_large(conn, line.id)
                continue
            waiting = server.handle_frame(conn, line)
            if waiting is not None:
                self._lines.extend(lines[i + 1:])
                self._wait_for(waiting)
                return

    def _wait_for(self, waiting: asyncio.Future[Any]) -> None:
        self._waiting = waiting
        waiting.add_done_callback(self._waited)
        self._update_reading()

    def _waited(self, _: asyncio.Future[Any]) -> None:
        self._waiting = None
        self._drain()

    def _go_on(self) -> None:
        self._next_turn = False
        self._drain()

    def _drain(self) -> None:
        """Handle the frames that waited, then read again (or finish after the end of stream)."""
        if self._done:
            return
        if self._lines and self._waiting is None and not self._next_turn:
            batch = list(self._lines)
            self._lines.clear()
            try:
                self._handle(batch)
            finally:
                if self._started:  # its answers go out at the turn's end: its books need not wait for them
                    self.server.answers_written()
        if self._waiting is not None or self._next_turn:
            return
        if self._ended:
            self._finish()
        else:
            self._update_reading()

    def _update_reading(self) -> None:
        """Read while the peer reads its answers and no handler waits."""
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        want = not self._write_paused and self._waiting is None and not self._next_turn
        if want != self._reading:
            self._reading = want
            if want:
                transport.resume_reading()
            else:
                transport.pause_reading()

    def _finish(self) -> None:
        if self._done:
            return
        self._done = True
        if self.conn is not None:
            self.server.connection_done(self.conn, lost=self._lost)
