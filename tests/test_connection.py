"""A connection writes each loop turn's frames together and in order, and close() sends what is pending."""

from __future__ import annotations

import asyncio
import socket

import msgspec
import pytest
from hypothesis import given, settings, strategies as st

from scvd import connection, protocol as p
from scvd.connection import Connection, fitting_start, too_large

LIMIT = 1 << 20


async def connection_pair() -> tuple[Connection, socket.socket]:
    ours, peer = socket.socketpair()
    transport, _ = await asyncio.get_running_loop().create_unix_connection(asyncio.Protocol, sock=ours)
    peer.setblocking(False)
    return Connection(transport, LIMIT), peer


def available(peer: socket.socket) -> bytes:
    try:
        return peer.recv(1 << 20)
    except BlockingIOError:
        return b""


def ids(data: bytes) -> list[int]:
    return [p.decode_server_frame(line).id for line in data.splitlines()]


def test_frames_of_one_turn_go_out_together_in_order(run_loop):
    async def main() -> None:
        conn, peer = await connection_pair()
        for i in range(3):
            conn.send(p.Pong(id=i, time=0.0), LIMIT)
        assert available(peer) == b""  # nothing yet: the turn may add more
        for _ in range(3):
            await asyncio.sleep(0)
        assert ids(available(peer)) == [0, 1, 2]
        conn.send(p.Pong(id=3, time=0.0), LIMIT)
        await asyncio.sleep(0.01)
        assert ids(available(peer)) == [3]
        conn.close()
        peer.close()

    run_loop(main())


def test_close_sends_the_pending_frames_first(run_loop):
    async def main() -> None:
        conn, peer = await connection_pair()
        conn.send(p.Error(code="version_mismatch", message="bye", fatal=True), LIMIT)
        conn.close()
        await asyncio.sleep(0.01)
        peer.setblocking(True)
        peer.settimeout(5)
        data = b""
        while chunk := peer.recv(1 << 16):
            data += chunk
        assert p.decode_server_frame(data.strip()).code == "version_mismatch"
        conn.send(p.Pong(id=9, time=0.0), LIMIT)  # after close: dropped, no error
        peer.close()

    run_loop(main())


def test_abort_drops_what_is_pending(run_loop):
    async def main() -> None:
        conn, peer = await connection_pair()
        conn.send(p.Pong(id=1, time=0.0), LIMIT)
        conn.abort()
        await asyncio.sleep(0.01)
        peer.setblocking(True)
        peer.settimeout(5)
        assert peer.recv(1 << 16) == b""  # end of stream, and the frame never went out
        peer.close()

    run_loop(main())



def test_answers_held_back_in_one_turn_count_toward_the_cut_off(run_loop, monkeypatch):
    """Many answers completing in one turn: what waits for the turn's write counts as unread."""
    import scvd.connection

    monkeypatch.setattr(scvd.connection, "WRITE_BUFFER_LIMIT", 50_000)
    monkeypatch.setattr(scvd.connection, "HARD_LIMIT", 100_000)

    async def main() -> None:
        conn, peer = await connection_pair()
        for i in range(20):
            conn.send(p.Error(code="failed", message="x" * 10_000, id=i), LIMIT)
        assert conn.closed  # before the turn's write: the peer never gets 200 kB at once
        peer.close()

    run_loop(main())


def burst(conn: Connection, count: int) -> None:
    for i in range(count):
        conn.send(p.Error(code="failed", message="x" * 10_000, id=i), LIMIT)


def test_a_peer_that_reads_nothing_past_the_bound_is_cut_off_after_the_stall(run_loop, monkeypatch):
    import scvd.connection

    monkeypatch.setattr(scvd.connection, "WRITE_BUFFER_LIMIT", 100_000)
    monkeypatch.setattr(scvd.connection, "STALL_SECONDS", 0.3)

    async def main() -> None:
        conn, peer = await connection_pair()
        try:
            peer.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            burst(conn, 60)  # 600 kB: more than the socket takes, more than the bound
            await asyncio.sleep(0.1)
            assert not conn.closed  # past the bound, but the stall has not lasted yet (0.3 s)
            deadline = asyncio.get_running_loop().time() + 20  # a loaded machine runs the check late
            while not conn.closed and asyncio.get_running_loop().time() < deadline:
                await asyncio.sleep(0.05)
            assert conn.closed
        finally:  # an open transport with unsent bytes would hold uvloop's loop.close() for good
            conn.abort()
            peer.close()

    run_loop(main())


def test_a_closed_connection_whose_peer_reads_none_of_its_last_answers_lets_go_of_its_socket(
        run_loop, monkeypatch):
    """A peer that half-closed (or got a fatal error) and never reads: close() waited for the
    buffer to flush, so scvd held that socket for as long as the peer lived, outside every cap."""
    import scvd.connection

    monkeypatch.setattr(scvd.connection, "STALL_SECONDS", 0.3)

    async def main() -> None:
        lost = asyncio.get_running_loop().create_future()

        class Watched(asyncio.Protocol):
            def connection_lost(self, exc: Exception | None) -> None:
                if not lost.done():
                    lost.set_result(exc)

        ours, peer = socket.socketpair()
        peer.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        transport, _ = await asyncio.get_running_loop().create_unix_connection(Watched, sock=ours)
        conn = Connection(transport, LIMIT)
        try:
            burst(conn, 60)  # 600 kB: more than the socket takes, far below the bound
            conn.close()
            await asyncio.wait_for(lost, 20)  # a loaded machine runs the check late
        finally:
            conn.transport.abort()
            peer.close()

    run_loop(main())


def test_a_peer_that_reads_on_past_the_bound_gets_everything(run_loop, monkeypatch):
    """A burst above the bound that the peer keeps reading (an MCP host's six 13 MB answers): it
    was cut off at once, losing answers already made."""
    import scvd.connection

    monkeypatch.setattr(scvd.connection, "WRITE_BUFFER_LIMIT", 100_000)
    monkeypatch.setattr(scvd.connection, "STALL_SECONDS", 0.3)

    async def main() -> None:
        conn, peer = await connection_pair()
        try:
            burst(conn, 60)
            got = b""
            deadline = asyncio.get_running_loop().time() + 20
            while got.count(b"\n") < 60 and asyncio.get_running_loop().time() < deadline:
                got += available(peer)
                await asyncio.sleep(0.05)  # slower than the stall's checks: it reads some each time
            assert ids(got) == list(range(60)) and not conn.closed
        finally:
            conn.abort()
            peer.close()
        conn.close()
        peer.close()

    run_loop(main())


@pytest.mark.parametrize("char", ["x", "\x01"])  # "\x01" is six bytes in JSON: the cut counts bytes
def test_an_oversized_progress_event_stays_a_progress_event_with_its_text_cut(char):
    """It became an id-less `internal` error: a gap in the event seqs, and the client raised the
    error into whatever request it waited for."""
    limit = 4096
    event = p.CallProgress(seq=7, call_id="c1", elapsed_s=1.5, turn="t1", message="step 3: " + char * (1 << 20))
    data = p.encode(too_large(event, len(p.encode(event)), limit))
    assert len(data) <= limit
    sent = p.decode_server_frame(data)
    assert isinstance(sent, p.CallProgress) and (sent.seq, sent.call_id, sent.turn) == (7, "c1", "t1")
    assert sent.message.startswith("step 3: " + char * 100)
    assert sent.message.endswith("more chars did not fit server.server_frame_bytes]")


LONG = "x" * 5000


@pytest.mark.parametrize("event", [
    p.TurnFailed(seq=4, session="s1", turn="t1", reason="provider_error", message=LONG, hint="check the model"),
    p.TurnCancelled(seq=4, session="s1", turn="t1", reason=LONG),
    p.McpDetached(seq=4, session="s1", ok=False, reason=LONG),
    p.SecretRequested(seq=4, request_id="r1", session="s1", call_id="c1", key="API_KEY", question=LONG),
    p.SecretResolved(seq=4, request_id="r1", key="API_KEY", state="declined", reason=LONG),
    p.ApprovalResolved(seq=4, approval_id="a1", call_id="c1", decision="deny", state="denied", reason=LONG),
    p.Error(code="failed", message=LONG, id="req-9", kind="invalid_arguments"),
], ids=lambda e: type(e).__name__)
def test_an_oversized_event_with_one_long_text_keeps_its_type_seq_and_id(event):
    """A provider's 5 KB error over a 4 KiB server_frame_bytes became an id-less `internal` error:
    the client's turn never ended, and the error was raised into whatever request waited."""
    limit = 4096
    data = p.encode(too_large(event, len(p.encode(event)), limit))
    assert len(data) <= limit
    sent = p.decode_server_frame(data)
    assert type(sent) is type(event)
    assert getattr(sent, "seq", None) == getattr(event, "seq", None) and getattr(sent, "id", None) == getattr(event, "id", None)
    text = next(v for v in msgspec.structs.astuple(sent) if isinstance(v, str) and v.startswith("x" * 100))
    assert text.endswith("more chars did not fit server.server_frame_bytes]")


def test_an_oversized_text_is_cut_in_a_bounded_number_of_encodes(monkeypatch):
    """Escapes at the front and ASCII behind: guessing the length from the bytes per char kept so
    far took 28 encodes of megabytes (0.85 s of the event loop) for this delta."""
    limit = 8 << 20
    event = p.AssistantDelta(seq=3, session="s1", turn="t1", text="\x01" * 1_400_000 + "a" * 10_000_000)
    size = len(p.encode(event))
    calls: list[str] = []

    def counted(name: str, fn):
        return lambda *a, **kw: calls.append(name) or fn(*a, **kw)

    monkeypatch.setattr(connection.p, "encode", counted("p.encode", p.encode))
    monkeypatch.setattr(msgspec.json, "encode", counted("json.encode", msgspec.json.encode))
    monkeypatch.setattr(msgspec.json, "decode", counted("json.decode", msgspec.json.decode))
    cut = too_large(event, size, limit)
    assert len(calls) <= 3, calls
    monkeypatch.undo()
    data = p.encode(cut)
    assert limit - 64 < len(data) <= limit  # fits, and little room went unused
    sent = p.decode_server_frame(data)
    assert isinstance(sent, p.AssistantDelta) and sent.seq == 3
    assert sent.text.startswith("\x01" * 1_000_000)


CHARS = st.sampled_from(["a", "\\", '"', "\x01", "\n", "u", "0", "\xe9", "\u20ac", "\U0001f600"])


@settings(max_examples=300, deadline=None)
@given(text=st.lists(CHARS, max_size=40).map("".join), room=st.integers(0, 120))
def test_the_start_kept_is_the_longest_that_fits(text, room):
    def size(s: str) -> int:
        return len(msgspec.json.encode(s)) - 2

    kept = fitting_start(text, room)
    assert text.startswith(kept) and size(kept) <= room
    assert kept == text or size(text[:len(kept) + 1]) > room


def test_the_hang_up_check_answers_from_two_threads_at_once_and_hears_the_peer_go(run_loop):
    """A session.open's walk asks from its thread while the loop asks when the open ends: one shared
    poll object refused the second poll() (RuntimeError), which skipped the open's cleanup."""
    import threading

    async def main() -> None:
        conn, peer = await connection_pair()
        gone = conn.hung_up()
        failures: list[BaseException] = []

        def ask() -> None:
            try:
                for _ in range(20_000):
                    gone()
            except BaseException as exc:  # noqa: BLE001 (what the test reports)
                failures.append(exc)

        threads = [threading.Thread(target=ask) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert failures == [] and not gone()
        peer.close()
        assert gone()
        conn.abort()

    run_loop(main())
