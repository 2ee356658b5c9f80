"""`scvctl exec` and `scvctl chat` over a scripted client: what it does when the daemon refuses its answers."""

from __future__ import annotations

import argparse
import io
import json
from pathlib import Path
from typing import Any

import pytest

from scvctl import chat
from scvd import errors, protocol as p

SESSION, TURN = "s1", "t1"


class ScriptedClient:
    """Hands out `events` in order; answers chat.open and turn.start, and raises `refusals[type]`
    for the request of that type (as the daemon's error frame would)."""

    def __init__(self, events: list[Any], refusals: dict[type, errors.ScvError], notice: str | None = None) -> None:
        self.events = list(events)
        self.refusals = refusals
        self.notice = notice
        self.sent: list[type] = []

    def __enter__(self) -> ScriptedClient:
        return self

    def __exit__(self, *exc: Any) -> None:
        pass

    def request(self, kind: type, **fields: Any) -> Any:
        self.sent.append(kind)
        if kind in self.refusals:
            raise self.refusals[kind]
        if kind is p.ChatOpen:
            return p.ChatOpened(id=1, session=SESSION, conversation="c1", workspace="/w", provider="fake",
                                notice=self.notice)
        if kind is p.TurnStart:
            return p.TurnAccepted(id=2, turn=TURN)
        return p.Ok(id=3)

    def next_event(self) -> Any:
        return self.events.pop(0)


def exec_with(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, client: ScriptedClient) -> int:
    monkeypatch.setattr(chat, "connect", lambda *a, **kw: client)
    args = argparse.Namespace(workspace=tmp_path, provider=None, yes=True, json=True, prompt="hi")
    return chat.cmd_exec(args)


def approval(always_ask: str | None = None) -> p.ApprovalRequested:
    return p.ApprovalRequested(seq=1, approval_id="a1", session=SESSION, call_id="c1", tool="bash", risk="high",
                               workspace="/w", summary="run it", always_ask=always_ask)


@pytest.mark.parametrize("always_ask", [None, "a git directory"])
def test_exec_yes_goes_on_when_a_person_decided_its_approval_first(monkeypatch, tmp_path, capsys, always_ask):
    client = ScriptedClient(
        [approval(always_ask), p.TurnCompleted(seq=2, session=SESSION, turn=TURN)],
        {p.ApprovalDecide: errors.ApprovalNotFound("no pending approval 'a1'")})
    assert exec_with(monkeypatch, tmp_path, client) == chat.EXIT_OK
    out, err = capsys.readouterr()
    assert json.loads(out)["status"] == "completed"
    assert "no pending approval 'a1'" in err  # scvd's word: decided elsewhere, or withdrawn
    assert p.ApprovalDecide in client.sent


def test_exec_goes_on_when_its_question_closed_before_its_answer(monkeypatch, tmp_path, capsys):
    asked = p.QuestionAsked(seq=1, session=SESSION, turn=TURN, question_id="q1", question="which one?")
    client = ScriptedClient(
        [asked, p.TurnCancelled(seq=2, session=SESSION, turn=TURN, reason="cancelled")],
        {p.QuestionAnswer: errors.InvalidRequest("no open question 'q1' in session s1")})
    assert exec_with(monkeypatch, tmp_path, client) == chat.EXIT_ERROR
    out, err = capsys.readouterr()
    assert json.loads(out)["status"] == "cancelled"
    assert "question q1 was no longer open" in err


def test_chat_goes_on_when_its_question_closed_while_the_person_typed(monkeypatch, tmp_path, capsys):
    """The ask call's dispatch timeout ended the turn while the person typed: QuestionAnswer's
    invalid_request ended `scvctl chat` with a traceback."""
    asked = p.QuestionAsked(seq=1, session=SESSION, turn=TURN, question_id="q1", question="which one?")
    client = ScriptedClient(
        [asked, p.TurnCompleted(seq=2, session=SESSION, turn=TURN)],  # the model went on without the answer
        {p.QuestionAnswer: errors.InvalidRequest("no open question 'q1' in session s1")})
    monkeypatch.setattr(chat, "connect", lambda *a, **kw: client)
    monkeypatch.setattr("sys.stdin", io.StringIO("hi\nthe red one\n/exit\n"))
    args = argparse.Namespace(workspace=tmp_path, provider=None, conversation=None, json=False)
    assert chat.cmd_chat(args) == chat.EXIT_OK
    out, err = capsys.readouterr()
    assert "question q1 was no longer open" in out and not err
    assert client.sent == [p.ChatOpen, p.TurnStart, p.QuestionAnswer]


def test_chat_ctrl_c_at_a_prompt_of_a_turn_that_ended_meanwhile_keeps_the_chat(monkeypatch, tmp_path, capsys):
    """The person stepped away from an approval prompt; `scvctl approvals watch` decided it and the
    turn completed; Ctrl-C at the stale prompt sent turn.cancel, whose invalid_request (the turn is
    not running) ended `scvctl chat` instead of only that prompt."""
    def interrupted(event: Any) -> str:
        raise KeyboardInterrupt

    client = ScriptedClient(
        [approval(), p.AssistantDelta(seq=2, session=SESSION, turn=TURN, text="written"),
         p.TurnCompleted(seq=3, session=SESSION, turn=TURN)],
        {p.TurnCancel: errors.InvalidRequest(f"turn {TURN!r} is not running in session {SESSION}")})
    monkeypatch.setattr(chat, "connect", lambda *a, **kw: client)
    monkeypatch.setattr(chat, "ask_request", interrupted)
    monkeypatch.setattr("sys.stdin", io.StringIO("write it\n/exit\n"))
    args = argparse.Namespace(workspace=tmp_path, provider=None, conversation=None, json=False)
    assert chat.cmd_chat(args) == chat.EXIT_OK
    out, _ = capsys.readouterr()
    assert "written" in out
    assert client.sent == [p.ChatOpen, p.TurnStart, p.TurnCancel]


def test_exec_prints_a_reply_before_tool_calls_on_a_line_of_its_own(monkeypatch, tmp_path, capsys):
    """A model that says what it will do before its calls: that text and the answer were printed
    as one run-on line ("Let me look.It says hi.")."""
    def reply(seq: int, text: str) -> list[Any]:
        return [p.AssistantDelta(seq=seq, session=SESSION, turn=TURN, text=text),
                p.AssistantCompleted(seq=seq, session=SESSION, turn=TURN, text=text)]

    done = p.CallCompleted(seq=3, call_id="t1-c1", ok=True, result={}, turn=TURN)
    client = ScriptedClient([*reply(1, "Let me look."), done, *reply(4, "It says hi."),
                             p.TurnCompleted(seq=6, session=SESSION, turn=TURN)], {})
    monkeypatch.setattr(chat, "connect", lambda *a, **kw: client)
    args = argparse.Namespace(workspace=tmp_path, provider=None, yes=False, json=False, prompt="what is in a?")
    assert chat.cmd_exec(args) == chat.EXIT_OK
    assert capsys.readouterr().out == "Let me look.\nIt says hi.\n"


@pytest.mark.parametrize("json_out", [True, False])
def test_exec_tells_of_a_turn_its_transcript_could_not_keep(monkeypatch, tmp_path, capsys, json_out):
    """The answer came, but a full disk kept it from the transcript: a resumed chat may lack it."""
    warning = "the transcript of conversation c1 could not be written ([Errno 28] No space left on device); ..."
    client = ScriptedClient([p.TurnCompleted(seq=1, session=SESSION, turn=TURN, warning=warning)], {})
    monkeypatch.setattr(chat, "connect", lambda *a, **kw: client)
    args = argparse.Namespace(workspace=tmp_path, provider=None, yes=False, json=json_out, prompt="hi")
    assert chat.cmd_exec(args) == chat.EXIT_OK
    out, err = capsys.readouterr()
    if json_out:
        assert json.loads(out)["warning"] == warning
    else:
        assert f"warning: {warning}" in err


def test_chat_tells_of_transcript_lines_the_resumed_conversation_lost(monkeypatch, tmp_path, capsys):
    notice = "1 line(s) of this conversation's transcript could not be read back (line 3; damaged): ..."
    client = ScriptedClient([], {}, notice=notice)
    monkeypatch.setattr(chat, "connect", lambda *a, **kw: client)
    monkeypatch.setattr("sys.stdin", io.StringIO("/exit\n"))
    args = argparse.Namespace(workspace=tmp_path, provider=None, conversation="c1", json=False)
    assert chat.cmd_chat(args) == chat.EXIT_OK
    assert f"warning: {notice}" in capsys.readouterr().out
