"""chat.history's pages, kept from what chat.open read: a page never reads the transcript again.

A page is cut from the records chat.history shows (those since the last clear, read back:
readback.py), which chat.open read once, off the loop. Re-reading and decoding the whole file
for each page made every page of a long conversation cost seconds, however few records it asked
for. Each record is kept encoded, as a page carries it, so the view of a long conversation
costs about its file's size, not its decoded objects'.

The chat's records are added as they are saved. A record this version writes reads back as it
is, so only a `clear` (the view starts afresh) and the records chat.history leaves out need a
look here.
"""

from __future__ import annotations

from typing import Any, Iterable

import msgspec

from ..text import json_bytes
from .items import Cleared, NoteArrived, Opened, SchemasLoaded

HIDDEN = (Opened, SchemasLoaded, NoteArrived)  # the model's and scvd's bookkeeping, no one's words
_encoder = msgspec.json.Encoder()


class Pages:
    """A conversation's records as chat.history shows them, oldest first."""

    def __init__(self, records: Iterable[Any] = ()) -> None:
        self._shown: list[bytes] = []
        self.add(records)

    def add(self, records: Iterable[Any]) -> None:
        self._shown = _shown(self._shown, records)

    def page(self, pending: list[Any], before: int | None, limit: int | None) -> tuple[int, list[msgspec.Raw]]:
        """(the first record's position, the page's records): those before `before`, at most `limit`
        of them; `pending` (records still waiting for a write) comes after those added."""
        shown, tail = self._shown, _shown([], pending)
        if any(isinstance(r, Cleared) for r in pending):
            shown = []
        total = len(shown) + len(tail)
        end = total if before is None else min(before, total)
        first = 0 if limit is None else max(0, end - limit)
        rows = shown[first:end] + tail[max(first - len(shown), 0):max(end - len(shown), 0)]
        return first, [msgspec.Raw(row) for row in rows]


def _shown(shown: list[bytes], records: Iterable[Any]) -> list[bytes]:
    """`shown` with `records` added as chat.history shows them (a clear empties it first)."""
    for record in records:
        if isinstance(record, Cleared):
            shown = []
        elif not isinstance(record, HIDDEN):
            shown.append(json_bytes(_encoder.encode, record))
    return shown
