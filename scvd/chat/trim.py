"""Fit a request's history into `chat.context_tokens`, the same way every time.

Rules, in order, until the estimate fits:
1. Replace tool outputs with a short marker, oldest first, except the newest
   step's (those after the last assistant reply with calls, when it came after
   the last user message: at a turn's first request, none are spared). A
   background call's result, handed over as a note, is an output here too.
2. Drop whole exchanges, oldest first: an exchange is a user message, or an
   assistant reply together with the outputs of its calls, so a call is never
   separated from its result. What is kept starts with a user message (an
   answer kept without its question breaks strict chat templates; scvd's note
   on a dropped turn goes with it). The last user message and what follows it stay.
3. Replace the newest step's outputs too (the model hears they were too big).
4. Still too big: the caller fails the turn with reason context_limit.

Tokens are estimated as the JSON's ASCII bytes / 4, rounded up, plus one per other
character (a Chinese character is a token or more, not the three quarters its three
bytes / 4 made): no tokenizer, no I/O. The caller keeps a margin beside it (engine.py).
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
    if data.isascii():
        return (len(data) + 3) // 4
    ascii_bytes = len(data.translate(None, _NOT_ASCII))
    return (ascii_bytes + 3) // 4 + len(data) - len(data.translate(None, _LEAD_BYTES))


_NOT_ASCII = bytes(range(0x80, 0x100))
_LEAD_BYTES = bytes(range(0xC0, 0x100))  # each starts one non-ASCII character in UTF-8


class Sizes:
    """Estimates of the items a conversation holds, by identity: made once per item, not per request
    (a long chat's thousands of items were encoded again before each). What `compact` lets go of
    goes from here too."""

    def __init__(self) -> None:
        self._by_id: dict[int, tuple[Any, int]] = {}  # the item is held: its id cannot be reused meanwhile

    def of(self, item: Any) -> int:
        found = self._by_id.get(id(item))
        if found is not None and found[0] is item:
            return found[1]
        size = estimate(item)
        self._by_id[id(item)] = (item, size)
        return size

    def forget(self, items: Sequence[Any]) -> None:
        for item in items:
            found = self._by_id.get(id(item))
            if found is not None and found[0] is item:
                del self._by_id[id(item)]

    def __len__(self) -> int:
        return len(self._by_id)


def trim(items: Sequence[Any], budget: int, sizes: Sizes | None = None) -> list[Any] | None:
    """`items` fitted into `budget` tokens by the rules above, or None when they cannot fit."""
    h = _Sized(items, Sizes() if sizes is None else sizes)  # not `or`: an empty Sizes is falsy
    if h.total <= budget:
        return h.items
    newest = _last_step(h.items)
    if newest <= last_user(h.items):  # a turn's first request: the last step was an earlier turn's
        newest = len(h.items)
    if h.blank_until(range(newest), budget):
        return h.items
    cut = _exchanges_to_drop(h, last_user(h.items), budget)
    h.drop_front(cut)
    if h.total <= budget or h.blank_until(range(max(newest - cut, 0), len(h.items)), budget):
        return h.items
    return None


def compact(history: list[Any], sent: Sequence[Any], budget: int, sizes: Sizes) -> None:
    """Leave in `history` only what later requests can send, as they will send it, after `sent`
    (`history` trimmed to `budget`): a chat open for months must not hold every output whole (the
    transcript keeps them). Exact while the budget does not grow (a reload raising context_tokens,
    a tool or a server's note leaving the catalog: then older items stay as trimmed, or gone)."""
    # outputs blanked before the person's last message: rule 1 blanks oldest first and the history
    # only grows, so every later request blanks them again; those of a front rule 2 dropped too
    # (it runs only once rule 1 blanked all before the newest step, which the front precedes)
    offset, asked = len(history) - len(sent), last_user(history)
    for j in range(offset):
        blank = _blanked(history[j])
        if blank is not history[j]:
            sizes.forget([history[j]])
            history[j] = blank
    for j, item in enumerate(sent[:max(asked - offset, 0)]):
        if item is not history[offset + j]:
            sizes.forget([history[offset + j]])
            history[offset + j] = item
    if offset:  # else the whole history fits blanked as it is: so does every part of it
        forget_front(history, budget, sizes)


def forget_front(history: list[Any], budget: int, sizes: Sizes) -> None:
    """Drop the front before a user message whose rest, every output blanked, still does not fit in
    `budget`: every later request drops it whole (rule 2) and keeps what follows as it would have.
    Only the newest items are estimated, until they pass `budget`."""
    least, asked = 0, last_user(history)
    for i in range(len(history) - 1, 0, -1):
        blank = _blanked(history[i])
        least += sizes.of(blank) if blank is history[i] else estimate(blank)  # a blank made here is not kept
        if least > budget and i <= asked and isinstance(history[i], UserText):
            sizes.forget(history[:i])
            del history[:i]
            return


def _blanked(item: Any) -> Any:
    """`item` as rule 1 or 3 leaves it: an output or a note replaced by its marker."""
    if isinstance(item, ToolOutput) and item.output != TRIMMED:
        return ToolOutput(call_id=item.call_id, name=item.name, output=TRIMMED, turn=item.turn)
    if isinstance(item, UserText) and item.note and item.text != _trimmed_note(item):
        return UserText(text=_trimmed_note(item), turn=item.turn, note=item.note)
    return item


class _Sized:
    """Items with their estimates and a running total, so each change costs only its own item:
    trimming a long conversation stays linear (it runs before every model request)."""

    def __init__(self, items: Sequence[Any], sizes: Sizes) -> None:
        self.items = list(items)
        self.sizes = [sizes.of(item) for item in self.items]
        self.total = sum(self.sizes)

    def blank_until(self, indices: range, budget: int) -> bool:
        """Replace the outputs at `indices` in order until the total fits; True once it does."""
        for i in indices:
            item = _blanked(self.items[i])
            if item is self.items[i]:
                continue
            self.items[i] = item
            size = estimate(self.items[i])
            self.total += size - self.sizes[i]
            self.sizes[i] = size
            if self.total <= budget:
                return True
        return False

    def drop_front(self, count: int) -> None:
        self.total -= sum(self.sizes[:count])
        del self.items[:count], self.sizes[:count]


def _exchanges_to_drop(h: _Sized, protected: int, budget: int) -> int:
    """How many leading items whole exchanges, oldest first, take until the rest fits; none at or
    after the `protected` index go."""
    total, cut = h.total, 0
    for start, end in _exchanges(h.items):
        if start >= protected or total <= budget:
            break
        total -= sum(h.sizes[start:end])
        cut = end
    while 0 < cut < protected and not isinstance(h.items[cut], UserText):  # the answers of a question dropped
        cut += 1
    return cut


def _last_step(items: Sequence[Any]) -> int:
    """Index after the last assistant reply that asked for tools: its outputs are the newest step."""
    for i in range(len(items) - 1, -1, -1):
        if isinstance(items[i], AssistantReply) and items[i].calls:
            return i + 1
    return 0


def last_user(items: Sequence[Any]) -> int:
    """Index of the person's last message (a background result's note, or scvd's, is not one)."""
    for i in range(len(items) - 1, -1, -1):
        if isinstance(items[i], UserText) and not items[i].note:
            return i
    return len(items)


def _trimmed_note(note: UserText) -> str:
    return f"[result of background call {note.note}]: {TRIMMED}"


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
