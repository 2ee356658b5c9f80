"""Deterministic trimming: oldest tool outputs first, then whole exchanges; a call keeps its result."""

from __future__ import annotations

import random

import pytest

from scvd.chat.items import AssistantReply, ScvdNote, ToolCall, ToolOutput, UserText
from scvd.chat.trim import TRIMMED, Sizes, estimate, last_user, trim


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


def test_what_is_kept_starts_with_a_question():
    """A long question dropped alone left its answer first: strict chat templates refuse a history
    that starts with the assistant."""
    items = [UserText(text="q1 " + "x" * 4000), AssistantReply(text="a1"), AssistantReply(text="a1 again"),
             UserText(text="q2"), AssistantReply(text="a2"), UserText(text="q3")]
    assert trim(items, sum(estimate(i) for i in items[2:])) == items[3:]  # room for "a1 again" too


def test_scvds_note_on_a_dropped_turn_goes_with_it_and_is_never_the_persons_message():
    """A cancelled turn's note was a user message: with the request it speaks of dropped, what was kept
    began "do not carry out the request above" with nothing above, and last_user took it for the person's."""
    note = ScvdNote(text="[this turn was cancelled before it was answered; do not carry out the request above "
                         "unless asked again]", turn="t1")
    items = [UserText(text="delete the logs " + "x" * 4000, turn="t1"), note, UserText(text="what time is it")]
    assert trim(items, estimate(items[1]) + estimate(items[2])) == items[2:]
    assert last_user(items[:2]) == 0


def test_cannot_fit_is_none():
    assert trim(history(), 10) is None


# --- a long conversation -------------------------------------------------------------------


def long_history(turns: int, seed: int) -> list:
    """Turns of one to three steps; a step asks for one to three calls; outputs of varied size."""
    rng = random.Random(seed)
    items: list = []
    for t in range(turns):
        items.append(UserText(text=f"question {t} " * rng.randint(1, 30), turn=f"t{t}"))
        for s in range(rng.randint(0, 3)):
            calls = [ToolCall(f"c{t}-{s}-{k}", "read", '{"path": "a"}') for k in range(rng.randint(1, 3))]
            items.append(AssistantReply(text="looking " * rng.randint(0, 5), calls=calls, turn=f"t{t}"))
            items += [ToolOutput(call_id=c.call_id, name="read", output="x" * rng.randint(0, 6000), turn=f"t{t}")
                      for c in calls]
        items.append(AssistantReply(text="done " * rng.randint(0, 40), turn=f"t{t}"))
    return items


def by_the_rules(items: list, budget: int) -> list | None:
    """The module docstring's rules done the obvious way: re-estimate everything after each change."""
    def total(xs):
        return sum(estimate(x) for x in xs)

    def blank(xs, indices):
        for i in indices:
            if isinstance(xs[i], ToolOutput) and xs[i].output != TRIMMED:
                xs[i] = ToolOutput(call_id=xs[i].call_id, name=xs[i].name, output=TRIMMED, turn=xs[i].turn)
                if total(xs) <= budget:
                    return True
        return False

    out = list(items)
    newest = next((i + 1 for i in range(len(out) - 1, -1, -1)
                   if isinstance(out[i], AssistantReply) and out[i].calls), 0)
    protected = next((i for i in range(len(out) - 1, -1, -1) if isinstance(out[i], UserText)), len(out))
    if newest <= protected:  # no step after the last user message: an earlier turn's outputs are old
        newest = len(out)
    if total(out) <= budget or blank(out, range(newest)):
        return out
    while protected > 0 and total(out) > budget:  # the oldest exchange starts at 0
        end = 1
        if isinstance(out[0], AssistantReply):
            ids = {c.call_id for c in out[0].calls}
            while end < len(out) and isinstance(out[end], ToolOutput) and out[end].call_id in ids:
                end += 1
        out, protected, newest = out[end:], protected - end, newest - end
    while protected > 0 and not isinstance(out[0], UserText):  # what is kept starts with a question
        out, protected, newest = out[1:], protected - 1, newest - 1
    return out if total(out) <= budget or blank(out, range(max(newest, 0), len(out))) else None


@pytest.mark.parametrize("seed", range(3))
def test_a_long_history_trims_by_the_rules(seed):
    items = long_history(30, seed)
    whole = sum(estimate(i) for i in items)
    for budget in (10, 500, 5_000, whole // 20, whole // 4, whole // 2, whole - 1, whole):
        assert trim(items, budget) == by_the_rules(items, budget), budget
    ends_with_a_step = items[:-1]  # the newest step's outputs are the last to go
    for budget in (300, 3_000, whole // 10):
        assert trim(ends_with_a_step, budget) == by_the_rules(ends_with_a_step, budget), budget


def test_trimming_estimates_each_item_a_bounded_number_of_times(monkeypatch):
    """Before every model request: a 2000-turn history once took 13 s (every change re-estimated all)."""
    import scvd.chat.trim as trim_mod

    items = long_history(400, 7)
    counted = [0]

    def counting(value):
        counted[0] += 1
        return estimate(value)

    monkeypatch.setattr(trim_mod, "estimate", counting)
    out = trim_mod.trim(items, 20_000)
    assert out is not None and len(out) < len(items)
    assert counted[0] <= 2 * len(items)


def test_at_a_turns_first_request_the_last_turns_outputs_go_before_any_message():
    """A new turn has no step of its own yet: the previous turn's big output is blanked first,
    not kept while the person's earlier messages are dropped."""
    items = [
        UserText(text="please remember my name is Ada"),
        AssistantReply(calls=[ToolCall("c1", "read")]),
        ToolOutput(call_id="c1", name="read", output="x" * 4000),
        AssistantReply(text="done reading; hello Ada"),
        UserText(text="what is my name?"),
    ]
    blanked = [*items[:2], ToolOutput(call_id="c1", name="read", output=TRIMMED), *items[3:]]
    out = trim(items, sum(estimate(i) for i in blanked) + 10)
    assert out == blanked


def test_a_background_result_handed_over_as_a_note_is_trimmed_like_an_output():
    """A big background result arrives as a note (user text): it was neither blanked nor dropped,
    and the turn failed with context_limit where the same output of an ordinary call was trimmed."""
    note = UserText(text="[result of background call c1 (watch)]: " + "x" * 200_000, turn="t1", note="c1")
    items = [UserText(text="run it", turn="t1"), AssistantReply(calls=[ToolCall("c1", "watch")], turn="t1"),
             ToolOutput(call_id="c1", name="watch", output='{"started": true}', turn="t1"), note,
             AssistantReply(calls=[ToolCall("c2", "read")], turn="t1"),
             ToolOutput(call_id="c2", name="read", output='{"ok": 1}', turn="t1")]
    out = trim(items, 5_000)
    assert out is not None, "the note could not be trimmed"
    assert out[3] == UserText(text=f"[result of background call c1]: {TRIMMED}", turn="t1", note="c1")
    assert out[0] == items[0] and out[5] == items[5]  # the person's message and the newest step stay


def test_each_items_estimate_is_made_once_and_kept_for_the_next_request():
    # an empty Sizes is falsy: `sizes or Sizes()` threw the conversation's away until one request
    # had to drop something, so every request of a chat that fit encoded its whole history again
    sizes, items = Sizes(), history()
    assert trim(items, 10_000, sizes) == items
    assert len(sizes) == len(items)
