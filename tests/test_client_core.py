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
