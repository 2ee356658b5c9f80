"""chat.history's pages, kept from what chat.open read: a page never reads the transcript again.

A page is cut from the records chat.history shows (those since the last clear, read back:
readback.py), which chat.open read once, off the loop. Re-reading and decoding the whole file
for each page made every page of a long conversation cost seconds, however few records it asked
for. The records are kept encoded, as a page carries them, in one buffer: the view of a long
conversation costs about its file's size, not its decoded objects'.

The chat's records are added as they are saved. A record this version writes reads back as it
is, so only a `clear` (the view starts afresh) and the records chat.history leaves out need a
look here.
"""

from __future__ import annotations

from array import array
from typing import Any, Iterable

import msgspec

from ..text import json_bytes
from .items import Cleared, NoteArrived, Opened, SchemasLoaded

HIDDEN = (Opened, SchemasLoaded, NoteArrived)  # the model's and scvd's bookkeeping, no one's words
_encoder = msgspec.json.Encoder()


class Pages:
    """A conversation's records as chat.history shows them, oldest first."""

    def __init__(self, records: Iterable[Any] = ()) -> None:
        self._data = bytearray()  # the records' JSON, one after another: no object per record
        self._ends = array("Q")  # where each record's JSON ends in _data
        self.add(records)

    def add(self, records: Iterable[Any]) -> None:
        for record in records:
            if isinstance(record, Cleared):
                self._data, self._ends = bytearray(), array("Q")
            elif not isinstance(record, HIDDEN):
                self._data += json_bytes(_encoder.encode, record)
                self._ends.append(len(self._data))

    def page(self, pending: list[Any], before: int | None, limit: int | None) -> tuple[int, list[msgspec.Raw]]:
        """(the first record's position, the page's records): those before `before`, at most `limit`
        of them; `pending` (records still waiting for a write) comes after those added."""
        tail = Pages(pending)
        kept = 0 if any(isinstance(r, Cleared) for r in pending) else len(self._ends)
        total = kept + len(tail._ends)
        end = total if before is None else min(before, total)
        first = 0 if limit is None else max(0, end - limit)
        rows = [self._row(n) if n < kept else tail._row(n - kept) for n in range(first, end)]
        return first, [msgspec.Raw(row) for row in rows]

    def _row(self, n: int) -> bytes:
        return bytes(self._data[self._ends[n - 1] if n else 0:self._ends[n]])
