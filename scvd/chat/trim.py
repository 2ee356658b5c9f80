"""Fit a request's history into `chat.context_tokens`, the same way every time.

Rules, in order, until the estimate fits:
1. Replace tool outputs with a short marker, oldest first, except the newest
   step's (those after the last assistant reply with calls).
2. Drop whole exchanges, oldest first: an exchange is a user message, or an
   assistant reply together with the outputs of its calls, so a call is never
   separated from its result. The last user message and what follows it stay.
3. Replace the newest step's outputs too (the model hears they were too big).
4. Still too big: the caller fails the turn with reason context_limit.

Tokens are estimated as bytes of JSON / 4, rounded up: no tokenizer, no I/O.
"""

from __future__ import annotations

from typing import Any, Sequence

import msgspec

from .items import AssistantReply, ToolOutput, UserText

TRIMMED = '{"trimmed": "output dropped to fit chat.context_tokens"}'
_encoder = msgspec.json.Encoder()


def estimate(value: Any) -> int:
    """A cheap, deterministic token estimate of anything JSON can hold."""
    data = value.encode() if isinstance(value, str) else _encoder.encode(value)
    return (len(data) + 3) // 4


def trim(items: Sequence[Any], budget: int) -> list[Any] | None:
    """`items` fitted into `budget` tokens by the rules above, or None when they cannot fit."""
    out = list(items)
    if _total(out) <= budget:
        return out
    newest = _last_step(out)
    if _blank_outputs(out, range(newest), budget):
        return out
    groups = _exchanges(out)
    protected = _last_user(out)
    while groups and groups[0][0] < protected and _total(out) > budget:
        start, end = groups.pop(0)
        drop = end - start
        out = out[:start] + out[end:]
        protected, newest = protected - drop, newest - drop
        groups = [(s - drop, e - drop) for s, e in groups]
    if _total(out) <= budget or _blank_outputs(out, range(max(newest, 0), len(out)), budget):
        return out
    return None


def _blank_outputs(out: list[Any], indices: range, budget: int) -> bool:
    """Replace the outputs at `indices` in order until `out` fits; True once it does."""
    for i in indices:
        item = out[i]
        if isinstance(item, ToolOutput) and item.output != TRIMMED:
            out[i] = ToolOutput(call_id=item.call_id, name=item.name, output=TRIMMED, turn=item.turn)
            if _total(out) <= budget:
                return True
    return False


def _total(items: Sequence[Any]) -> int:
    return sum(estimate(item) for item in items)


def _last_step(items: Sequence[Any]) -> int:
    """Index after the last assistant reply that asked for tools: its outputs are the newest step."""
    for i in range(len(items) - 1, -1, -1):
        if isinstance(items[i], AssistantReply) and items[i].calls:
            return i + 1
    return 0


def _last_user(items: Sequence[Any]) -> int:
    for i in range(len(items) - 1, -1, -1):
        if isinstance(items[i], UserText):
            return i
    return len(items)


def _exchanges(items: Sequence[Any]) -> list[tuple[int, int]]:
    """[start, end) of each exchange: a user message, or a reply plus its calls' outputs."""
    groups: list[tuple[int, int]] = []
    i = 0
    while i < len(items):
        end = i + 1
        if isinstance(items[i], AssistantReply):
            ids = {c.call_id for c in items[i].calls}
            while end < len(items) and isinstance(items[end], ToolOutput) and items[end].call_id in ids:
                end += 1
        groups.append((i, end))
        i = end
    return groups
