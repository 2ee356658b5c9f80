"""Deterministic trimming: oldest tool outputs first, then whole exchanges; a call keeps its result."""

from __future__ import annotations

from scvd.chat.items import AssistantReply, ToolCall, ToolOutput, UserText
from scvd.chat.trim import TRIMMED, estimate, trim


def history() -> list:
    big = "x" * 2000
    return [
        UserText(text="first question"),
        AssistantReply(calls=[ToolCall("c1", "read")]),
        ToolOutput(call_id="c1", name="read", output=big),
        AssistantReply(text="first answer"),
        UserText(text="second question"),
        AssistantReply(calls=[ToolCall("c2", "read")]),
        ToolOutput(call_id="c2", name="read", output=big),
    ]


def test_fits_unchanged():
    items = history()
    assert trim(items, 10_000) == items


def test_oldest_tool_output_goes_first_and_the_newest_step_stays():
    items = history()
    out = trim(items, sum(estimate(i) for i in items) - 100)
    assert out[2].output == TRIMMED and out[2].call_id == "c1"
    assert out[6].output == "x" * 2000
    assert len(out) == len(items)


def test_then_whole_exchanges_go_and_calls_keep_their_results():
    items = history()
    out = trim(items, sum(estimate(i) for i in items[4:]) + 2)
    assert out is not None
    kept_calls = {c.call_id for i in out if isinstance(i, AssistantReply) for c in i.calls}
    kept_outputs = {i.call_id for i in out if isinstance(i, ToolOutput)}
    assert kept_calls == kept_outputs == {"c2"}
    assert out[0] == UserText(text="second question")


def test_same_input_same_output():
    assert trim(history(), 600) == trim(history(), 600)


def test_the_newest_output_goes_last_when_nothing_else_is_left():
    items = [UserText(text="q"), AssistantReply(calls=[ToolCall("c1", "read")]),
             ToolOutput(call_id="c1", name="read", output="y" * 8000)]
    out = trim(items, 100)
    assert out is not None and out[2].output == TRIMMED and out[:2] == items[:2]


def test_cannot_fit_is_none():
    assert trim(history(), 10) is None
