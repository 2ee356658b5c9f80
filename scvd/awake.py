"""Deadlines that run on while the machine sleeps.

Rule: the event loop's clock (monotonic) stops during a suspend; the wall-clock
`expires_at` a person is shown does not. A request whose time ran out while a
laptop was closed is over when it wakes: `clock()` is CLOCK_BOOTTIME, and a
`Timer` or `wait()` looks at it at least every CHECK_SECONDS, so the loop's late
timers cannot keep it pending for its whole timeout again.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Callable

CHECK_SECONDS = 60.0  # the longest a deadline is overdue after the machine wakes, unless looked at sooner


def clock() -> float:
    """Seconds on a monotonic clock that also counts the time the machine slept."""
    return time.clock_gettime(time.CLOCK_BOOTTIME)


class Timer:
    """`callback()` once `clock()` reaches `deadline`, on the running loop; cancel() stops it."""

    def __init__(self, deadline: float, callback: Callable[[], None]) -> None:
        self.deadline, self._callback = deadline, callback
        self._handle: asyncio.TimerHandle | None = None
        self._arm()

    def due(self) -> bool:
        return self.deadline <= clock()

    def cancel(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _arm(self) -> None:
        left = max(0.0, self.deadline - clock())
        self._handle = asyncio.get_running_loop().call_later(min(left, CHECK_SECONDS), self._fire)

    def _fire(self) -> None:
        if not self.due():  # woken early, or the loop's clock ran behind: look again
            self._arm()
            return
        self._handle = None
        self._callback()


async def wait(future: asyncio.Future[Any], deadline: float) -> Any:
    """`future`'s result once it is done, or TimeoutError once `clock()` passes `deadline`; the
    future itself is shielded (a timeout leaves it be)."""
    while (left := deadline - clock()) > 0:
        try:
            async with asyncio.timeout(min(left, CHECK_SECONDS)):
                return await asyncio.shield(future)
        except TimeoutError:
            pass
    raise TimeoutError
