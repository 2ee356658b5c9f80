"""`sessions.list`'s answer: every session it may show, within one server frame.

Rules:
- A client's name is shown as everywhere scvd names a peer: its first NAME_SHOWN_CHARS characters,
  `...` after them when cut (hello takes a name of any length: nine sessions of a 1,000,000-char
  name made every client's `sessions.list` fail with `internal`).
- The answer never passes the frame's limit: sessions are listed in the order they opened, and
  those that would take it past are left out, newest first (a flood comes after what was there),
  `left_out` counting them. The caps allow 256 connections x 64 sessions with 4 KiB workspace
  paths: some 70 MB, where a frame carries 8 MiB.
"""

from __future__ import annotations

from typing import Any, Iterable

import msgspec

from . import protocol as p
from .text import cut_name, json_bytes


def listing(sessions: Iterable[Any], request_id: Any, room: int) -> p.Sessions:
    """The answer listing `sessions` (scvd.sessions.Session) in at most `room` bytes."""
    infos = [p.SessionInfo(session=s.id, workspace=str(s.workspace), client=cut_name(s.owner.client),
                           opened_at=s.opened_at, calls=s.call_count) for s in sessions]
    answer = p.Sessions(id=request_id, sessions=infos)
    if len(p.encode(answer)) <= room:
        return answer
    # the envelope as large as it can be (left_out at its most), then each session and its comma
    size = len(p.encode(p.Sessions(id=request_id, sessions=[], left_out=len(infos))))
    kept = 0
    for info in infos:
        size += len(json_bytes(msgspec.json.encode, info)) + (1 if kept else 0)
        if size > room:
            break
        kept += 1
    return p.Sessions(id=request_id, sessions=infos[:kept], left_out=len(infos) - kept)
