"""One /proc scan at a time, shared by every running call that wants one, read off the event loop.

A scan reads /proc/PID/stat of every process on the host (about 0.2 s with
10,000 processes): on the loop, each running call's own scans every few seconds
stalled every client. Rules:
- A caller gets the next scan that *starts* after it asked, never one already
  under way: a kill just sent, or a fork just made, must be in the scan that
  judges it.
- Every caller waiting when a scan starts shares it, whatever loop or thread it
  runs on; a scan starts a turn of the caller's loop after the ask, so calls
  woken by the same tick (process.py aligns them) ask in time for the same one.
- The scan runs on one thread of its own (made at the first ask, then kept),
  not the file-reading pool: reads stuck on a hung filesystem there must not
  hold back a deadline's kill. Without a thread (the host's process limit) it
  runs on the loop, as it did before.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any, Mapping

from . import proctree

Waiter = tuple[asyncio.AbstractEventLoop, "asyncio.Future[Mapping[int, proctree.ProcStat]]"]


class Scanner:
    """Hands out shared scans of /proc; `scans` counts the reads of it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._asked = threading.Condition(self._lock)
        self._waiting: list[Waiter] = []
        self._thread: threading.Thread | None = None
        self.scans = 0

    async def scan(self) -> Mapping[int, proctree.ProcStat]:
        """Every process by pid, as a scan started after this call saw them."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Mapping[int, proctree.ProcStat]] = loop.create_future()
        with self._lock:
            self._waiting.append((loop, future))
        loop.call_soon(self._start)  # after the other callers woken in this turn have asked
        return await future

    def _start(self) -> None:
        with self._lock:
            if self._thread is not None:
                self._asked.notify()
                return
            thread = threading.Thread(target=self._serve, name="scvd-procscan", daemon=True)
            try:
                thread.start()
            except RuntimeError:  # no thread to be had (the process limit): scan here, as before
                thread = None
            self._thread = thread
        if thread is None:
            self._scan_once()

    def _serve(self) -> None:
        while True:
            with self._lock:
                while not self._waiting:
                    self._asked.wait()
            self._scan_once()

    def _scan_once(self) -> None:
        with self._lock:
            batch, self._waiting = self._waiting, []
        if not batch:
            return
        try:
            outcome: tuple[bool, Any] = (True, proctree.scan_processes())
        except Exception as exc:  # /proc unreadable (EMFILE): each waiter gets it, as its own scan did
            outcome = (False, exc)
        self.scans += 1
        for loop, future in batch:
            try:
                loop.call_soon_threadsafe(_settle, future, outcome)
            except RuntimeError:  # that loop has closed; nobody waits there any more
                pass


def _settle(future: asyncio.Future[Any], outcome: tuple[bool, Any]) -> None:
    if not future.done():  # a cancelled waiter
        ok, value = outcome
        (future.set_result if ok else future.set_exception)(value)


SCANS = Scanner()
