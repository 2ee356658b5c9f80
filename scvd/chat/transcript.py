"""A conversation's transcript: append-only JSON lines, 0600, under `<state dir>/chat/`.

One file per conversation, named by its id. Lines are the Records of items.py;
nothing is ever rewritten (chat.clear appends a `clear` record); expiry.py may remove a
whole file once it is idle for chat.transcript_days. A torn last
line (scvd killed mid-write), like any other line that cannot be read, is read
back as an `Unreadable` record in its place, and the next append ends it first,
so what comes after it is kept. A batch whose write
fails (a full disk) is cut off again and left to the caller to append later, so
the file never holds part of one; should the cut fail too, BatchCut says how many
of its records are in, and the caller keeps only the rest.
"""

from __future__ import annotations

import errno
import logging
import os
import re
import secrets
import stat
from pathlib import Path
from typing import Any, Iterable

import msgspec

from .. import errors
from ..paths import FILE_MODE, ensure_private_dir
from ..text import json_bytes
from .items import AnyRecord, Unreadable

log = logging.getLogger("scvd.chat")

ID_RE = re.compile(r"\A[A-Za-z0-9][A-Za-z0-9_-]{0,63}\Z")  # not `$`: it takes "k1\n" (an id read with its line end)
SUFFIX = ".jsonl"  # a transcript is chat/<id>.jsonl
_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(AnyRecord)


def new_id() -> str:
    return f"k{secrets.token_hex(8)}"


class Transcripts:
    """The directory of transcripts."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def path(self, conversation: str) -> Path:
        if not ID_RE.match(conversation):
            raise errors.InvalidRequest(
                f"conversation {conversation[:80]!r} is not an id scvd gave out (letters, digits, _ and -)")
        return self.root / f"{conversation}{SUFFIX}"

    def append(self, conversation: str, records: Iterable[Any]) -> None:
        data = b"".join(json_bytes(_encoder.encode, r) + b"\n" for r in records)
        if not data:
            return
        ensure_private_dir(self.root)
        fd = self._open(conversation, os.O_RDWR | os.O_APPEND | os.O_CREAT)
        try:
            size = os.fstat(fd).st_size
            lead = b"\n" if _torn(fd, size) else b""  # a crash tore the last line: this batch starts its own
            data = lead + data
            done = 0
            try:
                while done < len(data):  # one write per batch (a crash tears at most the last line)
                    done += os.write(fd, memoryview(data)[done:])
            except OSError as exc:  # a full disk: the caller keeps the batch for the next append, so none of it stays
                _undo(fd, size, exc, data[len(lead):done].count(b"\n"))
                raise
        finally:
            os.close(fd)

    def read(self, conversation: str, days: int = 0) -> list[Any]:
        """Its records; `days` is chat.transcript_days, which a missing transcript may have gone by."""
        path = self.path(conversation)
        try:
            fd = self._open(conversation, os.O_RDONLY)
        except FileNotFoundError:
            why = (f"its transcript was removed (chat.transcript_days = {days} removes one not written to for "
                   f"{days} days), or it was never opened here" if days else
                   "it was never opened here, or its transcript was removed")
            raise errors.ConversationNotFound(f"no conversation {conversation!r}: {why}; start a new one with "
                                              "chat.open without `conversation` (`scvctl chat` without "
                                              "--conversation)") from None
        with open(fd, "rb") as f:
            lines = f.read().splitlines()
        records = []
        for number, line in enumerate(lines, 1):
            try:
                records.append(_decoder.decode(line))
            except msgspec.ValidationError as exc:  # a DecodeError too: first, it is no damage
                log.warning("%s line %d is no record this scvd knows (%s; written by a newer scvd?); a note stands "
                            "in its place", path, number, exc)
                records.append(Unreadable(line=number, newer=True))
            except msgspec.DecodeError:
                log.warning("%s line %d is unreadable; a note stands in its place", path, number)
                records.append(Unreadable(line=number))
        return records

    def _open(self, conversation: str, flags: int) -> int:
        """The transcript's file, never through a symlink: one planted in chat/ would have the
        conversation read from, and written to, a file elsewhere (a FIFO would block the reader)."""
        try:
            fd = os.open(self.path(conversation),
                         flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC, FILE_MODE)
        except OSError as exc:
            if exc.errno == errno.ELOOP:  # O_NOFOLLOW met a symlink
                raise self._refused(conversation, "a symlink") from None
            raise
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise self._refused(conversation, "not a regular file")
        return fd

    def _refused(self, conversation: str, kind: str) -> errors.Failed:
        """`failed`, not `internal` (a bug of scvd's): the user moves the thing away; said in the log too."""
        refused = errors.Failed(f"the transcript of conversation {conversation} ({self.path(conversation)}) is "
                                f"{kind}; scvd keeps a transcript only in a regular file of its own: move it away, "
                                "then retry")
        log.warning("%s", refused.message)
        return refused


def _undo(fd: int, size: int, exc: OSError, written: int) -> None:
    """Cut the file back to `size`; failing that, say how many whole records reached it."""
    try:
        os.ftruncate(fd, size)
    except OSError as undo:
        raise errors.BatchCut(exc.errno or errno.EIO, f"{exc.strerror or exc}; and cutting the part written off failed "
                       f"({undo.strerror or undo}): {written} record(s) of the batch are in the transcript, a "
                       "torn line after them reads back as an unreadable line", written) from exc


def _torn(fd: int, size: int) -> bool:
    """Whether the file ends inside a line (its last byte is no newline)."""
    return size > 0 and os.pread(fd, 1, size - 1) != b"\n"
