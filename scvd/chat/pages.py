"""chat.history's pages: the newest records kept from what chat.open read, older ones read back again.

A page is cut from the records chat.history shows (those since the last clear, read back:
readback.py). chat.open read them once, off the loop; re-reading and decoding the whole file for
each page made every page of a long conversation cost seconds, however few records it asked for.
The newest of them, up to BUDGET_BYTES of their JSON, are kept in one buffer, as a page carries
them (no object per record); a page reaching further back reads the transcript again (`older`,
on a worker), as the records before those kept are let go of: a chat open for months kept every
record since its last clear, whole tool outputs included, and grew with every turn.

The chat's records are added as they are saved. A record this version writes reads back as it
is, so only a `clear` (the view starts afresh) and the records chat.history leaves out need a
look here.
"""

from __future__ import annotations

import sys
from array import array
from typing import Any, Iterable, NamedTuple

import msgspec

from .. import errors
from ..text import json_bytes
from .items import Cleared, NoteArrived, Opened, SchemasLoaded
from .readback import read_back
from .transcript import Transcripts

HIDDEN = (Opened, SchemasLoaded, NoteArrived)  # the model's and scvd's bookkeeping, no one's words
BUDGET_BYTES = 4 << 20  # of the newest records' JSON kept per open chat: pages of a few screens each
_encoder = msgspec.json.Encoder()


class Page(NamedTuple):
    start: int  # the first record's position
    rows: list[msgspec.Raw]  # the records kept in memory, oldest first
    older: range  # positions before `rows` that only the transcript still has (`older`)
    kept_from: int  # the position of the first record kept in memory
    first_kept: bytes | None  # its JSON: the transcript read again must have it there (`older`)


class Pages:
    """A conversation's records as chat.history shows them, oldest first; the newest kept."""

    def __init__(self, records: Iterable[Any] = (), budget: int = BUDGET_BYTES) -> None:
        self.budget = budget
        self.forgotten = 0  # records before the kept ones: a page of them reads the transcript
        self._data = bytearray()  # the kept records' JSON, one after another: no object per record
        self._ends = array("Q")  # where each kept record's JSON ends in _data
        self.add(records)

    @property
    def held(self) -> int:
        """The bytes the kept records take: their JSON and where each ends."""
        return len(self._data) + self._ends.itemsize * len(self._ends)

    def add(self, records: Iterable[Any]) -> None:
        for record in records:
            if isinstance(record, Cleared):
                self._data, self._ends, self.forgotten = bytearray(), array("Q"), 0
            elif not isinstance(record, HIDDEN):
                self._data += json_bytes(_encoder.encode, record)
                self._ends.append(len(self._data))
                if self.held > self.budget:
                    self._forget()

    def page(self, pending: list[Any], before: int | None, limit: int | None) -> Page:
        """The records before `before`, at most `limit` of them; `pending` (records still waiting for
        a write) comes after those added."""
        tail = Pages(pending, budget=sys.maxsize)
        cleared = any(isinstance(r, Cleared) for r in pending)
        gone = 0 if cleared else self.forgotten
        kept = 0 if cleared else len(self._ends)
        total = gone + kept + len(tail._ends)
        end = total if before is None else min(before, total)
        first = 0 if limit is None else max(0, end - limit)
        rows = [self._row(n - gone) if n < gone + kept else tail._row(n - gone - kept)
                for n in range(max(first, gone), end)]
        return Page(first, [msgspec.Raw(row) for row in rows], range(first, min(end, gone)), gone,
                    self._row(0) if kept else None)

    def _row(self, n: int) -> bytes:
        return bytes(self._data[self._ends[n - 1] if n else 0:self._ends[n]])

    def _forget(self) -> None:
        """Let go of the oldest records, down to 3/4 of the budget: one move of the buffer for many."""
        goal, size, count = self.budget * 3 // 4, self._ends.itemsize, len(self._ends)
        n = 0
        while n < count and len(self._data) - self._ends[n] + size * (count - n - 1) > goal:
            n += 1
        cut = self._ends[n]  # records 0..n go
        del self._data[:cut]
        self._ends = array("Q", (e - cut for e in self._ends[n + 1:]))
        self.forgotten += n + 1


def older(transcripts: Transcripts, conversation: str, page: Page) -> list[msgspec.Raw]:
    """The records at `page.older` of chat.history's view, read back from the transcript again
    (blocking: on a worker), for a page before those Pages kept. The transcript must still hold the
    first kept record where memory has it: a file moved away and begun afresh, a clear written since,
    or a torn line read back as a note would give other records at those positions."""
    span = page.older
    try:
        shown = [r for r in read_back(transcripts.read(conversation)).records if not isinstance(r, HIDDEN)]
    except errors.ConversationNotFound:
        shown = []
    at = page.kept_from
    if len(shown) < at or (page.first_kept is not None and (
            len(shown) == at or json_bytes(_encoder.encode, shown[at]) != page.first_kept)):
        raise errors.Unavailable(f"chat.history: records {span.start} to {span.stop - 1} of conversation "
                                 f"{conversation} are no longer held in memory, and its transcript "
                                 f"({transcripts.path(conversation)}) no longer has them as they were (moved "
                                 "away, or cleared since); put the file back to page this far, or page from "
                                 f"record {at} on")
    return [msgspec.Raw(json_bytes(_encoder.encode, r)) for r in shown[span.start:span.stop]]
