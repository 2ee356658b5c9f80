"""A real `scvd run` process whose transcript writes fail (a full disk, here a directory in the
file's place: every append fails, as ENOSPC's would) or whose transcript holds a damaged line."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest

from chat_model import model  # noqa: F401 (a fixture)
from chat_model import Text
from harness import wait_until
from scvd import protocol as p
from scvd.chat.readback import LOST_NOTE, NEWER_NOTE
from test_chat_restart import ENV, config, resumed, until_end


@contextmanager
def full(path: Path) -> Iterator[None]:
    """Every append to the transcript at `path` fails until the block ends (there is room again)."""
    away = path.with_suffix(".away")
    path.rename(away)
    path.mkdir()
    try:
        yield
    finally:
        path.rmdir()
        away.rename(path)


def turn(c, session: str, text: str):
    c.request(p.TurnStart, session=session, text=text)
    return until_end(c)[-1]


def chat_with_a_lost_turn(d, workspace: Path) -> tuple[str, Path, p.TurnCompleted]:
    """A conversation whose second turn completed while its transcript could not be written; the
    session closed before there was room again. Its id, its transcript, and that turn's end."""
    with d.client(name="pytest") as c:
        opened = c.request(p.ChatOpen, workspace=str(workspace))
        session, conversation = opened.session, opened.conversation
        assert isinstance(turn(c, session, "remember 42"), p.TurnCompleted)
        path = d.home / "state" / "chat" / f"{conversation}.jsonl"
        with full(path):
            end = turn(c, session, "remember 77")
            c.close()
            closed = f"transcript of {conversation}: 3 record(s) still not written as its session closed; kept"
            wait_until(lambda: closed in d.log(), what="the session's close")
    return conversation, path, end


@pytest.mark.one_loop
def test_a_turn_written_on_a_full_disk_says_so_and_is_kept_for_the_next_chat_open(make_daemon, model, scv_home,
                                                                                  workspace):
    """Its records waited in memory for the next write, which never came: the session's close dropped
    them silently, and the resumed conversation (history and model) had only the first turn."""
    m = model(Text("noted 42"), Text("noted 77"), Text("42 and 77"))
    d = make_daemon(config(m), home=scv_home, env=ENV)
    conversation, path, end = chat_with_a_lost_turn(d, workspace)
    assert isinstance(end, p.TurnCompleted)
    assert end.warning.startswith(f"the transcript of conversation {conversation} could not be written (")
    assert "written with the conversation's next write once there is room" in end.warning
    with d.client(name="pytest") as c:
        session, history = resumed(c, workspace, conversation)
        assert [r["text"] for r in history if r["kind"] == "user"] == ["remember 42", "remember 77"]
        assert isinstance(turn(c, session, "what did I say?"), p.TurnCompleted)
    assert [msg["content"] for msg in m.requests[2]["messages"][1:]] == [
        "remember 42", "noted 42", "remember 77", "noted 77", "what did I say?"]
    assert b"remember 77" in path.read_bytes()  # written by the resumed session


def test_records_a_closed_session_kept_are_written_at_scvds_stop_or_logged_as_lost(make_daemon, model, scv_home,
                                                                                    workspace):
    """scvd's stop dropped them without a word: the conversation came back without its turn."""
    m = model(Text("noted 42"), Text("noted 77"), Text("noted 42"), Text("noted 77"))
    d = make_daemon(config(m), home=scv_home, env=ENV)
    kept, kept_path, _ = chat_with_a_lost_turn(d, workspace)  # there is room again before the stop
    lost, lost_path, _ = chat_with_a_lost_turn(d, workspace)
    with full(lost_path):  # and none for this one
        assert d.stop() == 0
    assert b"remember 77" in kept_path.read_bytes()
    assert b"remember 77" not in lost_path.read_bytes()
    assert f"transcript of {lost}: 3 record(s) lost as scvd stops, never written" in d.log()


def test_a_session_closed_once_there_is_room_again_writes_what_it_kept(make_daemon, model, scv_home, workspace):
    m = model(Text("noted 42"), Text("noted 77"))
    d = make_daemon(config(m), home=scv_home, env=ENV)
    with d.client(name="pytest") as c:
        opened = c.request(p.ChatOpen, workspace=str(workspace))
        assert isinstance(turn(c, opened.session, "remember 42"), p.TurnCompleted)
        path = d.home / "state" / "chat" / f"{opened.conversation}.jsonl"
        with full(path):
            assert turn(c, opened.session, "remember 77").warning
    wait_until(lambda: b"noted 77" in path.read_bytes(), what="the close's write")


def damage_line_3(d, conversation: str, to: bytes = b"\xff\xfe garbage\n") -> Path:
    """Its transcript's line 3 (the first reply, "A1") made `to` on disk; the transcript's path."""
    path = d.home / "state" / "chat" / f"{conversation}.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    assert b'"text":"A1"' in lines[2]
    lines[2] = to
    path.write_bytes(b"".join(lines))
    return path


@pytest.mark.one_loop
@pytest.mark.parametrize("line, why, note", [
    (b"\xff\xfe garbage\n", "damaged", LOST_NOTE),
    # a kind this scvd does not know (a newer scvd's, read after a downgrade) was told as damage
    (b'{"kind":"hologram","text":"A1"}\n', "written by a newer scvd", NEWER_NOTE),
], ids=["damaged", "newer"])
def test_a_damaged_transcript_line_is_told_and_a_note_keeps_its_neighbours_apart(make_daemon, model, scv_home,
                                                                                  workspace, line, why, note):
    """The line was skipped with only a log line: the turns on either side joined, and the model read
    the person's "U1" and "U2" as one message with nothing between them."""
    m = model(Text("A1"), Text("A2"), Text("A3"))
    d = make_daemon(config(m), home=scv_home, env=ENV)
    with d.client(name="pytest") as c:
        opened = c.request(p.ChatOpen, workspace=str(workspace))
        for text in ("U1", "U2"):
            assert isinstance(turn(c, opened.session, text), p.TurnCompleted)
    path = damage_line_3(d, opened.conversation, line)
    with d.client(name="pytest") as c:
        again = c.request(p.ChatOpen, workspace=str(workspace), conversation=opened.conversation)
        assert again.notice.startswith("1 line(s) of this conversation's transcript could not be read back "
                                       f"(line 3; {why})"), again.notice
        history = c.request(p.ChatHistory, session=again.session).records
        assert [(r["kind"], r["text"]) for r in history if "text" in r] == [
            ("user", "U1"), ("scvd", note), ("user", "U2"), ("assistant", "A2")]
        assert isinstance(turn(c, again.session, "U3"), p.TurnCompleted)
    assert m.requests[2]["messages"][1:] == [
        {"role": "user", "content": f"U1\n\n{note}\n\nU2"}, {"role": "assistant", "content": "A2"},
        {"role": "user", "content": "U3"}]
    assert note.encode() not in path.read_bytes()  # read there, never written


@pytest.mark.one_loop
def test_a_damaged_line_before_a_clear_is_not_told_as_lost(make_daemon, model, scv_home, workspace):
    """The clear dropped that line's turn anyway: the notice said the model reads a note in its place,
    and neither the model nor chat.history did."""
    m = model(Text("A1"), Text("A2"))
    d = make_daemon(config(m), home=scv_home, env=ENV)
    with d.client(name="pytest") as c:
        opened = c.request(p.ChatOpen, workspace=str(workspace))
        assert isinstance(turn(c, opened.session, "U1"), p.TurnCompleted)
        c.request(p.ChatClear, session=opened.session)
        assert isinstance(turn(c, opened.session, "U2"), p.TurnCompleted)
    damage_line_3(d, opened.conversation)
    with d.client(name="pytest") as c:
        again = c.request(p.ChatOpen, workspace=str(workspace), conversation=opened.conversation)
        assert again.notice is None
        history = c.request(p.ChatHistory, session=again.session).records
        assert [(r["kind"], r["text"]) for r in history if "text" in r] == [("user", "U2"), ("assistant", "A2")]

