"""The client library's frame sorting, with no I/O: what an older client makes of a newer scvd."""

from __future__ import annotations

import pytest

from scvctl.client import ClientCore
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


def too_large() -> bytes:
    return p.encode(p.Error(code="frame_too_large", message="frame exceeds 1048576 bytes"))


def test_an_error_without_an_id_goes_to_the_oldest_request_still_waiting():
    """scvd sends frame_too_large without an id. It was raised into whichever request looked first,
    even one whose own answer had come, and the request it was for waited for ever."""
    core = ClientCore()
    ping, big = core.build(p.Ping), core.build(p.Ping)  # big stands for a frame over scvd's limit
    core.feed(p.encode(p.Pong(id=ping.id, time=1.0)) + too_large())  # one chunk, in frame order
    assert core.take_answer(ping.id) == p.Pong(id=ping.id, time=1.0)
    with pytest.raises(errors.FrameTooLarge):
        core.take_answer(big.id)


def test_a_request_answered_later_does_not_take_the_error_of_an_older_one():
    core = ClientCore()
    big, ping = core.build(p.Ping), core.build(p.Ping)
    core.feed(too_large())
    assert core.take_answer(ping.id) is None  # its answer is still to come; the error is big's
    with pytest.raises(errors.FrameTooLarge):
        core.take_answer(big.id)
    core.feed(p.encode(p.Pong(id=ping.id, time=1.0)))
    assert core.take_answer(ping.id) == p.Pong(id=ping.id, time=1.0)
