"""A transcript read back as this version writes it, in one walk: what a replay and chat.history read.

Only the records after the last `clear` count, and the latest `open` wherever it is. What older
builds wrote otherwise is read as now:
- A cancelled turn's note was a `user` record. It is scvd's (a ScvdNote) where it follows the
  person's text of its own turn: a turn holds one text of the person's, its first, so the same
  words typed as a turn's text stay the person's.
The last turn is left to the caller when it has no end (`cut`): the replay ends it in the file (a
crash cut it off), while chat.history may be reading a turn still running.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

from .items import HISTORY, Cleared, Opened, ScvdNote, TurnEnded, UserText

# after a cancelled turn's text, which stays (as a failed turn's does): the next turn's came right after
# it, and the model took the cancelled request for one still to carry out
CANCELLED_NOTE = ("[this turn was cancelled before it was answered; do not carry out the request above unless "
                  "asked again]")
# the same after scvd's own stop (SIGTERM mid-turn): the conversation resumed after the restart redid it
STOPPED_NOTE = ("[scvd stopped during this turn, before it was answered; do not carry out the request above "
                "unless asked again]")
# the same for a turn that a crash or SIGKILL cut off: no turn-end record, so the note comes at the replay
KILLED_NOTE = ("[scvd stopped unexpectedly during this turn (it crashed or was killed), before it was answered; "
               "do not carry out the request above unless asked again]")


@dataclass
class Readback:
    records: list[Any]  # since the last clear, as this version writes them
    opened: Opened | None  # the latest settings
    cut: str  # the last turn's id when it has no end record, else ""


def read_back(records: Iterable[Any]) -> Readback:
    out: list[Any] = []
    opened = None
    ended: set[str] = set()
    turn = said = ""  # the turn of the last history record; of the person's last text
    for rec in records:
        if isinstance(rec, Opened):
            opened = rec
        if isinstance(rec, Cleared):
            out, ended, turn, said = [], set(), "", ""
            continue
        if isinstance(rec, TurnEnded):
            ended.add(rec.turn)
        elif isinstance(rec, HISTORY) and rec.turn:
            if isinstance(rec, UserText) and not rec.note:
                if rec.turn == said and rec.text == CANCELLED_NOTE:
                    rec = ScvdNote(text=rec.text, turn=rec.turn)
                else:
                    said = rec.turn
            turn = rec.turn
        out.append(rec)
    return Readback(out, opened, "" if turn in ended else turn)


def killed(turn: str) -> list[Any]:
    """The note and the end of a turn a crash or SIGKILL cut off, as Turn.stopped() ends one."""
    return [ScvdNote(text=KILLED_NOTE, turn=turn), TurnEnded(turn=turn, status="failed",
                                                             reason="cancelled_by_shutdown")]
