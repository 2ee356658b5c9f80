"""The rehearsal of a wire API's first request (chat/rehearsal.py), in-process."""

from __future__ import annotations

import logging

import pytest

from scvd.chat import rehearsal


@pytest.mark.parametrize("wire_api, events", [("responses", "RESPONSES"), ("chat", "CHAT")])
def test_a_failed_rehearsal_is_logged_and_not_the_turns_failure(monkeypatch, caplog, wire_api, events):
    """Only a cost moves to the thread: a rehearsal that a later openai reads otherwise (here an
    error event) must not fail the turn that waits for it, nor be tried again at every turn."""
    monkeypatch.setattr(rehearsal, "_done", set())
    monkeypatch.setattr(rehearsal, events, [{"error": {"message": "boom"}}])
    with caplog.at_level(logging.WARNING, logger="scvd.chat"):
        rehearsal.rehearse(wire_api)
        rehearsal.rehearse(wire_api)
    warned = [r for r in caplog.records if "rehearsal" in r.getMessage()]
    assert [r.getMessage() for r in warned] == [
        f"the rehearsal of a first {wire_api} request failed: the first turn sets up the rest of the openai "
        "client on the event loop"]
    assert "boom" in str(warned[0].exc_info[1])
