"""Old transcripts go: with chat.transcript_days set, one not written to for that many days is removed.

0, the default, keeps every transcript: deleting someone's history by surprise is
worse than a slowly filling disk. Otherwise a pass runs at start, then once a day
(on CLOCK_BOOTTIME: a laptop's sleep counts), and at once after a reload changes
the setting. The start's runs once the socket is served (a slow or hung state
directory delays no client), and a chat.open resuming a conversation waits for it:
the transcript it asks for may be one that pass removes. A pass lists chat/ off
the loop and removes on it, with no await between a file's last check and its
unlink: appends run on the loop too, so none lands in a file as it goes, and a
conversation open, being opened or still ending its turn is kept whatever its age.
Only regular files named `<id>.jsonl` directly in chat/ are removed; a symlink or
any other entry is left alone.
"""

from __future__ import annotations

import asyncio
import logging
import os
import stat
import time
from pathlib import Path
from typing import Callable

from .. import awake

log = logging.getLogger("scvd.chat")

DAY_SECONDS = 86400.0
CHECK_SECONDS = 3600.0  # how often the loop looks whether a day has passed (a woken laptop's is overdue)


def stale(root: Path, days: int, now: float) -> list[str]:
    """The conversations whose transcript in `root` was last written more than `days` days before `now`."""
    # here, not at the top: the daemon imports this module, and with the default 0 never needs
    # transcript.py (nor items.py, its records)
    from .transcript import ID_RE, SUFFIX

    try:
        names = os.listdir(root)
    except FileNotFoundError:  # no chat yet
        return []
    found = [name.removesuffix(SUFFIX) for name in names if name.endswith(SUFFIX)]
    cutoff = now - days * DAY_SECONDS
    return sorted(c for c in found if ID_RE.match(c) and _old(root / f"{c}{SUFFIX}", cutoff))


def remove(root: Path, conversations: list[str], days: int, now: float) -> list[str]:
    """Those of `conversations` whose transcript is still old, removed: one written to since is kept."""
    from .transcript import SUFFIX

    cutoff = now - days * DAY_SECONDS
    removed = []
    for conversation in conversations:
        path = root / f"{conversation}{SUFFIX}"
        if _old(path, cutoff):
            try:
                path.unlink()
            except FileNotFoundError:
                continue
            except OSError as exc:  # one that cannot go (a read-only mount) does not stop the others
                log.warning("chat transcript %s not removed: %s", path, exc)
                continue
            removed.append(conversation)
    return removed


def _old(path: Path, cutoff: float) -> bool:
    """A regular file (not through a symlink) last modified before `cutoff`."""
    try:
        st = path.lstat()
    except FileNotFoundError:
        return False
    return stat.S_ISREG(st.st_mode) and st.st_mtime < cutoff


class Expiry:
    """The daemon's passes over chat/: `days()` is chat.transcript_days now, `in_use()` the
    conversations to keep whatever their age."""

    def __init__(self, root: Path, days: Callable[[], int], in_use: Callable[[], set[str]]) -> None:
        self.root, self._days, self._in_use = root, days, in_use
        self._poked = asyncio.Event()
        self._started = asyncio.Event()  # the start's pass is over

    def poke(self) -> None:
        """Run a pass now (a reload changed the setting)."""
        self._poked.set()

    async def run_once(self) -> int:
        """One pass; how many transcripts it removed. A failure is logged: the next pass tries again."""
        days = self._days()
        if not days:
            return 0
        try:
            now = time.time()  # what st_mtime is on
            old = await asyncio.to_thread(stale, self.root, days, now)
            busy = self._in_use()
            removed = remove(self.root, [c for c in old if c not in busy], days, now)
        except OSError as exc:
            log.error("chat transcripts idle for over %d days (chat.transcript_days) not removed: %s", days, exc)
            return 0
        if removed:
            log.info("removed %d chat transcript(s) not written to for over %d days (chat.transcript_days)",
                     len(removed), days)
            log.debug("removed the transcripts of %s", ", ".join(removed))
        return len(removed)

    def is_started(self) -> bool:
        """Whether the start's pass is over."""
        return self._started.is_set()

    async def started(self) -> None:
        """Until the start's pass is over (at once with the default 0, or once run() was cancelled)."""
        await self._started.wait()

    async def run(self) -> None:
        """The start's pass, then one a day, and one when poked."""
        try:
            await self._logged_pass()
        finally:  # cancelled by a stop during it: nothing waits for ever
            self._started.set()
        last = awake.clock()
        while True:
            try:
                await asyncio.wait_for(self._poked.wait(), CHECK_SECONDS)
            except TimeoutError:
                pass
            if self._poked.is_set() or awake.clock() - last >= DAY_SECONDS:
                self._poked.clear()
                last = awake.clock()
                await self._logged_pass()

    async def _logged_pass(self) -> None:
        """run_once() in the background task: a bug there is logged, not the end of every later pass."""
        try:
            await self.run_once()
        except Exception:
            log.exception("chat transcript expiry (chat.transcript_days) failed; it runs again in a day")
