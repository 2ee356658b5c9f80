"""How scvd takes a client's frames: many in one write, a handler that waits, end of stream, a lost peer.

Frames are handled as they arrive (scvd/client_protocol.py): these pin what a peer sees of it.
"""

from __future__ import annotations

import signal
import socket
import time
from pathlib import Path
from typing import Any

import msgspec

from harness import RawConn, make_wrapped, wait_until  # noqa: F401 (fixture)
from scvd import protocol as p


def frame(**fields: Any) -> bytes:
    return msgspec.json.encode(fields) + b"\n"


HELLO = frame(type="hello", id="h", protocol=1, client={"name": "pipeliner"})


def answers(conn: RawConn, count: int) -> list[Any]:
    """The next `count` answers (frames with an id), skipping events."""
    out: list[Any] = []
    while len(out) < count:
        f = conn.frame()
        if getattr(f, "id", None) is not None:
            out.append(f)
    return out


def wait_no_sessions(client: Any) -> None:
    deadline = time.monotonic() + 10
    while client.status().sessions and time.monotonic() < deadline:
        time.sleep(0.02)
    assert client.status().sessions == 0, "the connection's session is still open"


def test_frames_sent_in_one_write_are_answered_in_order_behind_a_handler_that_waits(daemon, workspace: Path):
    """session.open waits (a thread); the frames after it in the same write are answered after it,
    more than one loop turn handles (client_protocol.FRAMES_PER_TURN) included."""
    pings = b"".join(frame(type="ping", id=i) for i in range(3000))
    with RawConn(daemon.socket) as conn:
        conn.send_raw(HELLO + frame(type="session.open", id="o", workspace=str(workspace))
                      + frame(type="sessions.list", id="l") + b"x" * (2 << 20) + b"\n" + pings)
        welcome, opened, listed = answers(conn, 3)
        assert isinstance(welcome, p.Welcome) and isinstance(opened, p.SessionOpened)
        assert [s.session for s in listed.sessions] == [opened.session]  # handled after the open
        too_large = conn.frame()
        assert isinstance(too_large, p.Error) and too_large.code == "frame_too_large"
        assert [a.id for a in answers(conn, 3000)] == list(range(3000))


def test_a_burst_of_tools_lists_does_not_keep_another_clients_frame_waiting_to_its_end(daemon, workspace: Path):
    """1,024 tools.list {lint} in one write were all handled in one loop turn, each building its
    listing anew (seconds): every other client waited for the last. Both clients write while scvd is
    stopped, the burst first, so scvd reads both at once: the other client's session.close comes in
    before the burst's last frame, whose sessions.list no longer shows that session."""
    with RawConn(daemon.socket) as burster, RawConn(daemon.socket) as other:
        burster.hello()
        other.hello()
        opened = other.request({"type": "session.open", "workspace": str(workspace)})
        burst = b"".join(frame(type="tools.list", id=i, lint=True) for i in range(1023))
        daemon.proc.send_signal(signal.SIGSTOP)
        try:
            burster.send_raw(burst + frame(type="sessions.list", id="last"))
            other.send_raw(frame(type="session.close", id="close", session=opened.session))
        finally:
            daemon.proc.send_signal(signal.SIGCONT)
        assert isinstance(other.frame(), p.Ok)
        *listings, last = answers(burster, 1024)
        assert all(isinstance(a, p.Tools) and any(t.name == "read" for t in a.tools) for a in listings)
        assert [a.id for a in listings] == list(range(1023))
        assert last.id == "last" and last.sessions == [], "the other client's frame waited for the whole burst"


def test_calls_sent_in_one_write_are_accepted_in_order_and_all_complete(daemon, workspace: Path):
    (workspace / "a.txt").write_text("hello\n")
    with RawConn(daemon.socket) as conn:
        conn.send_raw(HELLO + frame(type="session.open", id="o", workspace=str(workspace)))
        _, opened = answers(conn, 2)
        calls = b"".join(frame(type="call", id=i, session=opened.session, tool="read",
                               arguments={"path": "a.txt"}, call_id=f"k{i}") for i in range(100))
        conn.send_raw(calls + frame(type="ping", id="last"))
        accepted: list[Any] = []
        completed: dict[str, Any] = {}
        while len(completed) < 100 or len(accepted) < 101:
            f = conn.frame()
            if isinstance(f, p.CallCompleted):
                known = {a.call_id for a in accepted if isinstance(a, p.CallAccepted)}
                assert f.call_id in known, "an event came before its call.accepted"
                completed[f.call_id] = f
            elif getattr(f, "id", None) is not None:
                accepted.append(f)
        assert [a.id for a in accepted] == [*range(100), "last"]
        assert all(isinstance(a, p.CallAccepted) for a in accepted[:100])
        assert all(c.ok and c.result["content"] == "hello\n" for c in completed.values())


def test_a_call_cancelled_in_the_same_write_that_submits_it_completes_as_cancelled(daemon, workspace: Path):
    (workspace / "a.txt").write_text("hello\n")
    with RawConn(daemon.socket) as conn:
        conn.send_raw(HELLO + frame(type="session.open", id="o", workspace=str(workspace)))
        _, opened = answers(conn, 2)
        conn.send_raw(frame(type="call", id=1, session=opened.session, tool="read", arguments={"path": "a.txt"},
                            call_id="gone") + frame(type="call.cancel", id=2, call_id="gone"))
        accepted, cancelled = answers(conn, 2)
        assert isinstance(accepted, p.CallAccepted) and isinstance(cancelled, p.Ok)
        done = conn.frame()
        assert isinstance(done, p.CallCompleted) and done.call_id == "gone"
        assert not done.ok and done.error.kind == "cancelled"


def test_frames_before_the_end_of_stream_are_all_answered_then_the_connection_goes(daemon, client, workspace: Path):
    pings = b"".join(frame(type="ping", id=i) for i in range(50))
    with RawConn(daemon.socket) as conn:
        conn.send_raw(HELLO + frame(type="session.open", id="o", workspace=str(workspace)) + pings)
        conn.sock.shutdown(socket.SHUT_WR)
        got = answers(conn, 52)
        assert isinstance(got[1], p.SessionOpened)
        assert [a.id for a in got[2:]] == list(range(50))
        assert conn.closed_by_server()
    wait_no_sessions(client)


def test_a_half_close_cancels_the_running_calls_and_their_call_completed_comes_before_eof(
        make_wrapped, workspace: Path):
    """Each accepted call gets its call.completed, on the end of the stream too: it cancels the call,
    and the connection closes once the cancelled call has said so (it closed at once, unsaid)."""
    d = make_wrapped()
    with RawConn(d.socket) as conn:
        conn.send_raw(HELLO + frame(type="session.open", id="o", workspace=str(workspace)))
        _, opened = answers(conn, 2)
        conn.send_raw(frame(type="call", id="slow", session=opened.session, tool="test_sleep",
                            arguments={"seconds": 3600}, call_id="slow"))
        accepted = conn.frame()
        assert isinstance(accepted, p.CallAccepted) and accepted.call_id == "slow"
        wait_until((workspace / "started-slow").exists, what="the call to start")
        conn.sock.shutdown(socket.SHUT_WR)
        done = conn.frame()
        assert isinstance(done, p.CallCompleted) and done.call_id == "slow", done
        assert not done.ok and done.error.kind == "cancelled"
        assert conn.closed_by_server()
    assert (workspace / "cancelled-slow").exists()  # the tool's own cleanup ran


def test_a_call_that_ignores_its_cancellation_holds_a_half_closed_connection_only_for_the_grace(
        make_wrapped, workspace: Path):
    d = make_wrapped("[server]\nshutdown_grace_seconds = 0.5\n")
    with RawConn(d.socket) as conn:
        conn.send_raw(HELLO + frame(type="session.open", id="o", workspace=str(workspace)))
        _, opened = answers(conn, 2)
        conn.send_raw(frame(type="call", id="stuck", session=opened.session, tool="test_stubborn",
                            arguments={}, call_id="stuck"))
        assert isinstance(conn.frame(), p.CallAccepted)
        wait_until((workspace / "started-stuck").exists, what="the call to start")
        conn.sock.shutdown(socket.SHUT_WR)
        start = time.monotonic()
        assert conn.closed_by_server()  # no call.completed: the call has not ended
        assert time.monotonic() - start > 0.4  # held for the grace (a hang is pytest-timeout's)
    with RawConn(d.socket) as other:  # still serving
        other.hello()
        assert other.status().pid == d.proc.pid


def test_a_peer_gone_while_its_session_opens_leaves_no_session_behind(daemon, client, workspace: Path):
    for _ in range(5):
        with RawConn(daemon.socket) as conn:
            conn.send_raw(HELLO + frame(type="session.open", id="o", workspace=str(workspace)))
    # every open done: made (the peer gone before its answer), or stopped before the session was made
    def ended() -> int:
        log = daemon.log()
        return log.count(" opened on ") + log.count(" ended without a session: ")
    deadline = time.monotonic() + 10
    while ended() < 5 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert ended() == 5
    wait_no_sessions(client)
    assert client.request(p.Ping).time > 0  # still serving
