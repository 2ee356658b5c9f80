"""The transcript: append-only JSONL, 0600 in a 0700 directory, read back after a torn line."""

from __future__ import annotations

import os
import stat

import pytest

from scvd import errors
from scvd.chat.engine import Conversation
from scvd.chat.items import AssistantReply, Cleared, Opened, ToolCall, ToolOutput, UserText
from scvd.chat.transcript import Transcripts


def test_round_trip_modes_and_clear(tmp_path):
    t = Transcripts(tmp_path / "chat")
    t.append("k1", [Opened(workspace="/ws", provider="p"), UserText(text="hi"),
                    AssistantReply(text="yo", calls=[ToolCall("c1", "read", '{"path":"a"}')]),
                    ToolOutput(call_id="c1", name="read", output="{}")])
    path = t.path("k1")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    conv = Conversation.replay(t.read("k1"))
    assert [type(i).__name__ for i in conv.history] == ["UserText", "AssistantReply", "ToolOutput"]
    t.append("k1", [Cleared(), UserText(text="again")])
    assert [i.text for i in Conversation.replay(t.read("k1")).history] == ["again"]


def test_a_torn_last_line_is_skipped(tmp_path):
    t = Transcripts(tmp_path)
    t.append("k2", [Opened(workspace="/ws"), UserText(text="hi")])
    with open(t.path("k2"), "ab") as f:
        f.write(b'{"kind":"user","te')
    assert len(t.read("k2")) == 2


def test_what_is_written_after_a_torn_line_is_kept(tmp_path):
    """The next record starts a line of its own: appended onto the torn one, it was lost too
    (here a clear, silently undone)."""
    t = Transcripts(tmp_path)
    t.append("k3", [Opened(workspace="/ws"), UserText(text="hi")])
    with open(t.path("k3"), "ab") as f:
        f.write(b'{"kind":"user","te')
    t.append("k3", [Cleared(), UserText(text="after")])
    assert [type(r).__name__ for r in t.read("k3")] == ["Opened", "UserText", "Cleared", "UserText"]
    assert [i.text for i in Conversation.replay(t.read("k3")).history] == ["after"]


@pytest.mark.parametrize("bad", ["../x", "a/b", "", ".hidden", "x" * 65])
def test_ids_that_are_not_ours_are_refused(tmp_path, bad):
    with pytest.raises(errors.InvalidRequest, match="not an id"):
        Transcripts(tmp_path).path(bad)


def test_unknown_conversation_says_how_to_start_one(tmp_path):
    with pytest.raises(errors.InvalidRequest, match="open one without `conversation`"):
        Transcripts(tmp_path).read("k404")


def test_the_latest_settings_win(tmp_path):
    t = Transcripts(tmp_path)
    t.append("k3", [Opened(workspace="/a", system_prompt="old"), UserText(text="hi"),
                    Opened(workspace="/b", system_prompt="new")])
    conv = Conversation.replay(t.read("k3"))
    assert conv.settings.system_prompt == "new" and [i.text for i in conv.history] == ["hi"]
