"""The client library's frame sorting, with no I/O: what an older client makes of a newer scvd."""

from __future__ import annotations

import asyncio
import socket

import pytest

from scvctl.client import AsyncClient, Client, ClientCore
from scvd import errors, protocol as p


def test_an_event_this_client_does_not_know_is_skipped_and_the_next_frames_still_come():
    """A newer scvd's event type raised msgspec.ValidationError out of feed(): `scvctl approvals
    watch` or a bridge died with a traceback."""
    core = ClientCore()
    core.feed(b'{"type":"call.teleported","seq":4,"call_id":"c1"}\n'
              + p.encode(p.Ok(id=7)))
    assert list(core.events) == [] and core.take_answer(7) == p.Ok(id=7)


def test_an_answer_this_client_cannot_read_is_that_requests_error():
    core = ClientCore()
    core.feed(b'{"type":"status.v2","id":3,"whatever":1}\n')
    with pytest.raises(errors.InternalError, match="scvd answered with a frame this client cannot read"):
        core.take_answer(3)


def sent(core: ClientCore, frame: type) -> p.Frame:
    built = core.build(frame)
    core.sent(built)
    return built


def too_large() -> bytes:
    return p.encode(p.Error(code="frame_too_large", message="frame exceeds 1048576 bytes"))


def test_an_error_without_an_id_goes_to_the_oldest_request_still_waiting():
    """scvd sends frame_too_large without an id. It was raised into whichever request looked first,
    even one whose own answer had come, and the request it was for waited for ever."""
    core = ClientCore()
    ping, big = sent(core, p.Ping), sent(core, p.Ping)  # big stands for a frame over scvd's limit
    core.feed(p.encode(p.Pong(id=ping.id, time=1.0)) + too_large())  # one chunk, in frame order
    assert core.take_answer(ping.id) == p.Pong(id=ping.id, time=1.0)
    with pytest.raises(errors.FrameTooLarge):
        core.take_answer(big.id)


def test_a_request_answered_later_does_not_take_the_error_of_an_older_one():
    core = ClientCore()
    big, ping = sent(core, p.Ping), sent(core, p.Ping)
    core.feed(too_large())
    assert core.take_answer(ping.id) is None  # its answer is still to come; the error is big's
    with pytest.raises(errors.FrameTooLarge):
        core.take_answer(big.id)
    core.feed(p.encode(p.Pong(id=ping.id, time=1.0)))
    assert core.take_answer(ping.id) == p.Pong(id=ping.id, time=1.0)


def test_a_request_only_sent_does_not_keep_the_next_from_its_error():
    """A send()-only request stayed the oldest waiting for ever: an error without an id was never
    the next request's, so it waited for ever (scvctl exec has no timeout)."""
    ours, scvd = socket.socketpair()
    ours.settimeout(2)
    with Client(ours) as c, scvd:
        c.send(p.Ping)  # nobody waits for its answer
        scvd.sendall(too_large() * 2)  # both frames were over scvd's limit
        with pytest.raises(errors.FrameTooLarge):
            c.request(p.Ping)


def test_a_request_whose_waiter_gave_up_does_not_keep_the_next_from_its_error(tmp_path):
    """A request cancelled by asyncio.timeout (as examples/bridge waits) stayed the oldest waiting."""
    path = tmp_path / "scvd.sock"
    served: list[asyncio.Task[None]] = []

    async def scvd(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        hello = p.decode_request(await reader.readline())
        writer.write(p.encode(p.Welcome(id=hello.id, protocol=p.PROTOCOL_VERSION, server=p.PeerInfo(name="scvd"),
                                         limits=p.Limits(client_frame_bytes=1 << 20, server_frame_bytes=8 << 20))))
        await reader.readline()  # the first request: its answer is late
        await reader.readline()
        writer.write(too_large() * 2)  # both were over the limit
        await reader.read()
        writer.close()
        await writer.wait_closed()

    async def main() -> None:
        server = await asyncio.start_unix_server(lambda r, w: served.append(asyncio.create_task(scvd(r, w))), path)
        async with server:
            c = await AsyncClient.connect(path, timeout=2)
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(0.05):
                    await c.request(p.Ping)
            try:
                async with asyncio.timeout(2):  # it waited for ever
                    with pytest.raises(errors.FrameTooLarge):
                        await c.request(p.Ping)
                assert not c.core.answers  # the first one's error is nobody's: dropped
            finally:
                await c.close()
                await asyncio.gather(*served)

    asyncio.run(main())


def test_an_answer_that_comes_after_its_waiter_gave_up_is_dropped():
    core = ClientCore()
    late, ping = sent(core, p.Ping), sent(core, p.Ping)
    core.abandon(late.id)
    core.feed(p.encode(p.Pong(id=late.id, time=1.0)) + too_large())
    assert late.id not in core.answers
    with pytest.raises(errors.FrameTooLarge):
        core.take_answer(ping.id)


def test_a_server_frame_over_the_limit_is_the_error_of_the_request_it_answers():
    core = ClientCore(frame_limit=1024)
    first, second = sent(core, p.Status), sent(core, p.Ping)
    core.feed(p.encode(p.Error(id=first.id, code="failed", message="x" * 2000)) + p.encode(p.Pong(id=second.id, time=1.0)))
    with pytest.raises(errors.FrameTooLarge):
        core.take_answer(first.id)
    assert core.take_answer(second.id) == p.Pong(id=second.id, time=1.0)


def test_a_request_scvd_answers_aside_stands_outside_the_order():
    """A chat.open waiting for its conversation's closed session is answered after the pings sent
    behind it: its id counted as lost at the first of those answers, so its waiter's timeout left
    the late chat.opened in `answers` for good, and an error without an id for a later request
    (frame_too_large) was raised into the chat.open."""
    core = ClientCore()
    opening = core.build(p.ChatOpen, workspace="/ws", conversation="c")
    core.sent(opening)
    ping, big = sent(core, p.Ping), sent(core, p.Ping)
    core.feed(p.encode(p.Pong(id=ping.id, time=1.0)) + too_large())
    assert core.take_answer(opening.id) is None  # still to come
    with pytest.raises(errors.FrameTooLarge):
        core.take_answer(big.id)
    core.abandon(opening.id)  # its waiter gave up
    core.feed(p.encode(p.ChatOpened(id=opening.id, session="s1", conversation="c", workspace="/ws", provider="codex")))
    assert opening.id not in core.answers


def test_a_connection_cut_off_keeps_what_the_socket_said():
    """A reset (scvd died with our frame unread) and a plain close (scvd stopped, or dropped this
    client) read alike: the detail the socket gave was dropped from the line."""
    from scvctl.client import AGAIN, cut_off

    said = {}
    for unread in (True, False):
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        with Client(ours) as client:
            ping = client.send(p.Ping)
            if not unread:
                theirs.recv(1 << 16)
            theirs.close()  # with our ping unread: a reset
            with pytest.raises(errors.ConnectionClosed) as closed:
                client.wait_answer(ping.id)
        said[unread] = cut_off("the command was done", closed.value).message
    assert said[True] == ("scvd closed the connection before the command was done (Connection reset by peer; "
                          f"it stopped, or dropped this client: its log says which): {AGAIN}")
    assert said[False] == ("scvd closed the connection before the command was done (it stopped, or dropped "
                           f"this client: its log says which): {AGAIN}")
