"""A transcript read back as this version writes it, in one walk: what a replay and chat.history read.

Only the records after the last `clear` count, and the latest `open` wherever it is. What older
builds wrote otherwise is read as now:
- A cancelled turn's note was a `user` record. It is scvd's (a ScvdNote) where it follows the
  person's text of its own turn: a turn holds one text of the person's, its first, so the same
  words typed as a turn's text stay the person's.
- A turn that a crash or SIGKILL cut off, resumed by a build that ended no such turn, has no
  note and no end. It gets both right after its records (and the outputs that build gave its
  calls, which name no turn), where a turn cut off now has them: the model and chat.history read
  each turn cut off alike. They are not written: an append would put them after the turns since,
  where "the request above" would be another turn's.
A line that could not be read (`Unreadable`: damaged, or a newer scvd's record) is a scvd note
saying that something is missing there, one per run of such lines.
The last turn is left to the caller when it has no end (`cut`): the replay ends it in the file (a
crash cut it off), while chat.history may be reading a turn still running.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

from .items import HISTORY, Cleared, Opened, ScvdNote, ToolOutput, TurnEnded, Unreadable, UserText

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

# in place of transcript lines that could not be read back: without it the records on either side
# joined (two turns' texts read as one message), and the model never knew
LOST_NOTE = ("[scvd could not read back part of this conversation here (its transcript is damaged): what was "
             "said at this point is missing]")
NEWER_NOTE = ("[scvd could not read back part of this conversation here (a newer scvd wrote it): what was said "
              "at this point is missing]")


@dataclass
class Readback:
    records: list[Any]  # since the last clear, as this version writes them
    opened: Opened | None  # the latest settings
    cut: str  # the last turn's id when it has no end record, else ""


def read_back(records: Iterable[Any]) -> Readback:
    out: list[Any] = []
    opened = None
    ended: set[str] = set()
    ends: dict[str, int] = {}  # where each turn's records end in `out`
    turn = said = ""  # the turn of the last history record; of the person's last text
    for rec in records:
        if isinstance(rec, Unreadable):  # one note for a run of them
            note = NEWER_NOTE if rec.newer else LOST_NOTE
            if not (out and isinstance(out[-1], ScvdNote) and out[-1].text == note):
                out.append(ScvdNote(text=note))
            continue
        if isinstance(rec, Opened):
            opened = rec
        if isinstance(rec, Cleared):
            out, ended, ends, turn, said = [], set(), {}, "", ""
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
        if turn and isinstance(rec, HISTORY) and (rec.turn or isinstance(rec, ToolOutput)):
            ends[turn] = len(out)  # an output naming no turn closed this one's call (an older replay)
    # its end may come after the next turn's records (a closed session's turn, before 69c4139), so only
    # now is a turn known to have none; from the back, so that each index still points where it did
    for old, at in sorted(((t, at) for t, at in ends.items() if t not in ended and t != turn),
                          key=lambda found: -found[1]):
        out[at:at] = killed(old)
    return Readback(out, opened, "" if turn in ended else turn)


def killed(turn: str) -> list[Any]:
    """The note and the end of a turn a crash or SIGKILL cut off, as Turn.stopped() ends one."""
    return [ScvdNote(text=KILLED_NOTE, turn=turn), TurnEnded(turn=turn, status="failed",
                                                             reason="cancelled_by_shutdown")]
