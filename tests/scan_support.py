"""/proc scans held back, as a host with many processes (a slow /proc) holds them: the real scan,
read only once a test's condition holds (or a bound passes, so that the old code fails, not hangs)."""

from __future__ import annotations

import threading
import time
from typing import Callable

import pytest

from scvd import proctree

BOUND = 10.0  # how long held scans wait, all together, for `until`


class HeldScans:
    """Once `after()` holds as a scan starts, that scan runs and every later one waits for `until()`.
    Both run on the scan thread before the scan reads /proc: `after` may wait for the command.
    `released` says, for each scan held, whether `until()` held when it went on (False: the bound)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, after: Callable[[], bool],
                 until: Callable[[], bool]) -> None:
        self.after, self.until = after, until
        self.armed = False  # a scan started with after() true
        self.holding = threading.Event()  # a scan waits for until()
        self.released: list[bool] = []
        self._give_up: float | None = None
        self._real = proctree.scan_processes
        monkeypatch.setattr(proctree, "scan_processes", self._scan)  # procscan's thread reads it there

    def _scan(self) -> dict[int, proctree.ProcStat]:
        if not self.armed:
            self.armed = self.after()
        elif not self.until():
            self._hold()
        return self._real()

    def _hold(self) -> None:
        self.holding.set()
        if self._give_up is None:
            self._give_up = time.monotonic() + BOUND
        while not (met := self.until()) and time.monotonic() < self._give_up:
            time.sleep(0.01)
        self.released.append(met)

    def wait_holding(self) -> None:
        assert self.holding.wait(30), "no scan was held: the call never scanned /proc"
