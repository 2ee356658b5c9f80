"""A transcript read back as this version writes it: old builds' notes, turns cut off, the last clear."""

from __future__ import annotations

from scvd.chat.items import AssistantReply, Cleared, Opened, TurnEnded, UserText
from scvd.chat.readback import CANCELLED_NOTE, KILLED_NOTE, read_back


def kinds(records: list) -> list[tuple[str, str]]:
    return [(type(r).__name__, getattr(r, "text", getattr(r, "status", ""))) for r in records]


def test_an_old_cancelled_turns_note_is_scvds_and_the_same_words_typed_as_a_turns_text_the_persons():
    """Old builds wrote the note as a `user` record, after the person's text of its own turn; it was
    told apart by its words alone, so a person who typed that sentence saw it shown as scvd's."""
    back = read_back([
        Opened(workspace="/ws"), UserText(text="delete the logs", turn="t1"),
        UserText(text=CANCELLED_NOTE, turn="t1"), TurnEnded(turn="t1", status="cancelled"),
        UserText(text=CANCELLED_NOTE, turn="t2"), AssistantReply(text="noted", turn="t2"),
        TurnEnded(turn="t2", status="completed")])
    assert kinds(back.records[1:]) == [
        ("UserText", "delete the logs"), ("ScvdNote", CANCELLED_NOTE), ("TurnEnded", "cancelled"),
        ("UserText", CANCELLED_NOTE), ("AssistantReply", "noted"), ("TurnEnded", "completed")]


def test_only_what_follows_the_last_clear_counts_but_the_latest_settings_wherever_they_are():
    back = read_back([Opened(workspace="/ws", system_prompt="terse"), UserText(text="a", turn="t1"),
                      Cleared(), UserText(text="b", turn="t2")])
    assert back.records == [UserText(text="b", turn="t2")]
    assert back.opened.system_prompt == "terse" and back.cut == "t2"
    assert read_back([UserText(text="a", turn="t1"), TurnEnded(turn="t1", status="failed")]).cut == ""


def test_only_a_turn_that_never_ended_gets_the_note_and_the_last_is_left_to_the_caller():
    """A closed session's turn could end after the next turn began (before chat.open waited for it):
    it ended, so it gets no note. The last turn may be running (chat.history during a turn)."""
    back = read_back([UserText(text="a", turn="t1"), UserText(text="b", turn="t2"),
                      TurnEnded(turn="t1", status="cancelled"), TurnEnded(turn="t2", status="completed"),
                      UserText(text="c", turn="t3"), UserText(text="d", turn="t4")])
    assert kinds(back.records) == [("UserText", "a"), ("UserText", "b"), ("TurnEnded", "cancelled"),
                                   ("TurnEnded", "completed"), ("UserText", "c"), ("ScvdNote", KILLED_NOTE),
                                   ("TurnEnded", "failed"), ("UserText", "d")]
    assert back.cut == "t4"
