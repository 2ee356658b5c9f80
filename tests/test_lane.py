"""The session lane on its own: serial order, concurrent runs, background calls, cancellation.

Each call is a task that enters the lane, records "start", waits on its own
event (opened by the test), records "end" and leaves. Ordering is read from the
record, never from timing.
"""

from __future__ import annotations

import asyncio

from scvd.sessions import Lane


class Calls:
    """Tasks in one lane; each holds the lane until the test releases it."""

    def __init__(self) -> None:
        self.lane = Lane()
        self.record: list[tuple[str, str]] = []
        self.gates: dict[str, asyncio.Event] = {}
        self.tasks: dict[str, asyncio.Task[None]] = {}

    def add(self, name: str, *, concurrent: bool = False, background: bool = False) -> None:
        self.gates[name] = asyncio.Event()
        self.tasks[name] = asyncio.create_task(self._call(name, concurrent, background))

    async def _call(self, name: str, concurrent: bool, background: bool) -> None:
        ticket = await self.lane.enter(concurrent=concurrent, background=background)
        try:
            self.record.append(("start", name))
            await self.gates[name].wait()
            self.record.append(("end", name))
        finally:
            self.lane.leave(ticket)

    def running(self) -> set[str]:
        started = {n for kind, n in self.record if kind == "start"}
        ended = {n for kind, n in self.record if kind == "end"}
        return started - ended - {n for n, t in self.tasks.items() if t.cancelled()}

    async def release(self, name: str) -> None:
        self.gates[name].set()
        await settle()

    async def finish(self) -> None:
        for gate in self.gates.values():
            gate.set()
        await asyncio.gather(*self.tasks.values(), return_exceptions=True)


async def settle() -> None:
    """Let every ready task run until nothing changes (a few loop turns)."""
    for _ in range(20):
        await asyncio.sleep(0)


def run(coro) -> None:
    asyncio.run(coro)


def test_serial_calls_run_one_at_a_time_in_arrival_order():
    async def main():
        c = Calls()
        for name in "abc":
            c.add(name)
        await settle()
        assert c.running() == {"a"}
        await c.release("a")
        assert c.running() == {"b"}
        await c.release("b")
        assert c.running() == {"c"}
        await c.release("c")
        assert c.record == [("start", "a"), ("end", "a"), ("start", "b"), ("end", "b"),
                            ("start", "c"), ("end", "c")]
        assert c.lane.depth == 0

    run(main())


def test_consecutive_concurrent_calls_run_together():
    async def main():
        c = Calls()
        for name in "abc":
            c.add(name, concurrent=True)
        await settle()
        assert c.running() == {"a", "b", "c"}
        await c.release("b")  # any order of finishing is fine
        assert c.running() == {"a", "c"}
        await c.finish()

    run(main())


def test_non_concurrent_call_waits_for_all_before_and_holds_back_all_after():
    async def main():
        c = Calls()
        c.add("a", concurrent=True)
        c.add("b", concurrent=True)
        c.add("s")  # serial
        c.add("d", concurrent=True)
        c.add("e", concurrent=True)
        await settle()
        assert c.running() == {"a", "b"}
        await c.release("a")
        assert c.running() == {"b"}, "s must wait for every call before it"
        await c.release("b")
        assert c.running() == {"s"}, "d and e must wait behind s"
        await c.release("s")
        assert c.running() == {"d", "e"}
        await c.finish()

    run(main())


def test_concurrent_call_behind_a_running_serial_call_waits():
    async def main():
        c = Calls()
        c.add("s")
        c.add("a", concurrent=True)
        await settle()
        assert c.running() == {"s"}
        await c.release("s")
        assert c.running() == {"a"}
        await c.finish()

    run(main())


def test_background_call_waits_its_turn_then_does_not_hold_the_lane():
    async def main():
        c = Calls()
        c.add("s")
        c.add("bg", background=True)
        c.add("t")
        await settle()
        assert c.running() == {"s"}, "a background call still waits for its turn"
        await c.release("s")
        assert c.running() == {"bg", "t"}, "once started, the background call lets t run"
        await c.release("t")
        assert c.running() == {"bg"}
        assert c.lane.depth == 0
        await c.finish()

    run(main())


def test_cancel_while_queued_leaves_the_lane():
    async def main():
        c = Calls()
        c.add("a")
        c.add("b")
        c.add("c")
        await settle()
        assert c.lane.depth == 3
        c.tasks["b"].cancel()
        await settle()
        assert c.tasks["b"].cancelled()
        assert c.lane.depth == 2
        await c.release("a")
        assert c.running() == {"c"}, "the cancelled call no longer blocks the one after it"
        assert ("start", "b") not in c.record
        await c.finish()
        assert c.lane.depth == 0

    run(main())


def test_cancel_of_the_running_call_lets_the_next_start():
    async def main():
        c = Calls()
        c.add("a")
        c.add("b")
        await settle()
        c.tasks["a"].cancel()
        await settle()
        assert c.running() == {"b"}
        await c.finish()

    run(main())


def test_cancelled_concurrent_neighbour_does_not_block_a_serial_call():
    async def main():
        c = Calls()
        c.add("a", concurrent=True)
        c.add("b", concurrent=True)
        c.add("s")
        await settle()
        c.tasks["a"].cancel()
        await c.release("b")
        assert c.running() == {"s"}
        await c.finish()

    run(main())


def test_leave_twice_is_harmless():
    async def main():
        lane = Lane()
        ticket = await lane.enter(concurrent=False)
        lane.leave(ticket)
        lane.leave(ticket)
        assert lane.depth == 0
        again = await lane.enter(concurrent=False)
        assert again.started

    run(main())


def test_a_call_cancelled_twice_while_leaving_still_wakes_the_next():
    async def main():
        lane = Lane()

        async def holder():
            ticket = await lane.enter(concurrent=False)
            try:
                await asyncio.sleep(3600)
            finally:
                try:
                    await asyncio.sleep(0.01)  # cleanup that awaits, as a tool's may
                finally:
                    lane.leave(ticket)

        first = asyncio.ensure_future(holder())
        await asyncio.sleep(0)
        second = asyncio.ensure_future(lane.enter(concurrent=False))
        await asyncio.sleep(0)
        first.cancel()
        await asyncio.sleep(0)
        first.cancel()  # a second call.cancel lands during the cleanup
        ticket = await asyncio.wait_for(second, 5)
        assert ticket.started
        assert first.cancelled()

    run(main())
