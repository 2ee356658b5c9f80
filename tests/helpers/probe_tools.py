"""Probe tools for in-process daemon tests, and helpers to read events over a blocking Client.

The tools record what they do into one shared `Probe` (start / end / cancelled
with a monotonic time), so a test can check ordering from timestamps instead of
timing. `probe_wait` and `probe_bg` block on a gate the test opens with
`Probe.release()`, which keeps the tests deterministic.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Annotated, Any, Callable, Iterator, Literal

import msgspec
import pytest

from scvd import errors
from scvd import protocol as p
from scvd.tools.contract import CallContext, Plan, Tool, ToolFlags, ToolRisk

WAIT_LIMIT = 30.0  # a gate nobody opens ends the wait here, so a broken test cannot hang


@dataclass
class Probe:
    """What the probe tools did, shared between the daemon thread and the test."""

    log: list[tuple[str, str, float]] = field(default_factory=list)  # (kind, label, monotonic)
    loop: asyncio.AbstractEventLoop | None = None
    _gates: dict[str, asyncio.Event] = field(default_factory=dict)
    _released: set[str] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, kind: str, label: str) -> None:
        with self._lock:
            self.log.append((kind, label, time.monotonic()))

    def events(self, label: str) -> dict[str, float]:
        with self._lock:
            return {kind: t for kind, lab, t in self.log if lab == label}

    def has(self, kind: str, label: str) -> bool:
        return kind in self.events(label)

    def wait_until(self, kind: str, label: str, timeout: float = 15.0) -> float:
        """Block the test thread until `label` recorded `kind`; return its time."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            got = self.events(label).get(kind)
            if got is not None:
                return got
            time.sleep(0.005)
        raise AssertionError(f"probe {label!r} never recorded {kind!r}; log: {self.log}")

    def release(self, label: str) -> None:
        """Open the gate `label` from the test thread."""
        assert self.loop is not None, "no probe tool has run yet"
        self.loop.call_soon_threadsafe(self._open, label)

    def _open(self, label: str) -> None:
        self._released.add(label)
        if label in self._gates:
            self._gates[label].set()

    async def gate(self, label: str, limit: float) -> None:
        self.loop = asyncio.get_running_loop()
        event = self._gates.setdefault(label, asyncio.Event())
        if label in self._released:
            event.set()
        async with asyncio.timeout(limit):
            await event.wait()


def _desc(text: str) -> Any:
    return msgspec.Meta(description=text)


class _ProbeTool(Tool):
    def __init__(self, probe: Probe) -> None:
        self.probe = probe

    def plan(self, args: Any, ctx: CallContext) -> Plan:
        risk = ToolRisk(getattr(args, "risk", self.risk.value))
        return Plan(risk=risk, summary=f"{self.name} {msgspec.json.encode(args).decode()}",
                    details={"arguments": msgspec.to_builtins(args)})

    async def _timed(self, label: str, body: Callable[[], Any]) -> Any:
        self.probe.loop = asyncio.get_running_loop()
        self.probe.record("start", label)
        try:
            result = await body()
        except asyncio.CancelledError:
            self.probe.record("cancelled", label)
            raise
        self.probe.record("end", label)
        return result


class EchoArgs(msgspec.Struct, forbid_unknown_fields=True):
    text: Annotated[str, _desc("Text to send back unchanged, for a round trip, e.g. 'hello'")]


class ProbeEcho(_ProbeTool):
    name = "probe_echo"
    description = ("Return the given text unchanged.\n"
                   "Use for round trips in tests; probe_touch for writes.\n"
                   "Precondition: only in test daemons.")
    Arguments = EchoArgs
    risk = ToolRisk.READ_ONLY

    async def run(self, args: EchoArgs, plan: Plan, ctx: CallContext) -> Any:
        return {"text": args.text}


class FreeArgs(msgspec.Struct, forbid_unknown_fields=True):
    text: Annotated[str, _desc("Any text, e.g. 'x'; it is echoed back (default '')")] = ""


class ProbeFree(_ProbeTool):
    name = "probe_free"
    description = ("Return the given text; exempt from every approval.\n"
                   "Use for always_allow checks; probe_echo when asking may apply.\n"
                   "Precondition: only in test daemons.")
    Arguments = FreeArgs
    risk = ToolRisk.READ_ONLY
    flags = ToolFlags(always_allow=True)

    async def run(self, args: FreeArgs, plan: Plan, ctx: CallContext) -> Any:
        return {"text": args.text}


Risky = Literal["filesystem", "process"]


class TouchArgs(msgspec.Struct, forbid_unknown_fields=True):
    path: Annotated[str, _desc("Workspace-relative file to create, for the write under test, e.g. 'out/a.txt'")]
    risk: Annotated[Risky, _desc("Risk to plan with, e.g. 'process' to test a grant's reach")] = "filesystem"


class ProbeTouch(_ProbeTool):
    name = "probe_touch"
    description = ("Create an empty file in the workspace.\n"
                   "Use for approval tests; probe_echo for calls that never ask.\n"
                   "Precondition: the path is relative and stays inside.")
    Arguments = TouchArgs
    risk = ToolRisk.FILESYSTEM

    def plan(self, args: TouchArgs, ctx: CallContext) -> Plan:
        if os.path.isabs(args.path) or ".." in args.path.split("/"):
            raise errors.InvalidArguments(f"argument `path`: {args.path!r} must stay inside the workspace")
        return super().plan(args, ctx)

    async def run(self, args: TouchArgs, plan: Plan, ctx: CallContext) -> Any:
        fd = os.open(args.path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o600, dir_fd=ctx.workspace_fd)
        os.close(fd)
        return {"path": args.path}


class SleepArgs(msgspec.Struct, forbid_unknown_fields=True):
    seconds: Annotated[float, _desc("How long to sleep, for a call that takes time, e.g. 0.2")]
    label: Annotated[str, _desc("Name in the probe log, e.g. 'c' (default 'sleep')")] = "sleep"
    risk: Annotated[Literal["read_only", "process"],
                    _desc("Risk to plan with, e.g. 'read_only' to run unasked")] = "process"


class ProbeSleep(_ProbeTool):
    name = "probe_sleep"
    description = ("Sleep for a while and record start and end times.\n"
                   "Use for lane ordering; probe_wait for concurrent calls.\n"
                   "Precondition: only in test daemons.")
    Arguments = SleepArgs
    risk = ToolRisk.PROCESS

    async def run(self, args: SleepArgs, plan: Plan, ctx: CallContext) -> Any:
        return await self._timed(args.label, lambda: asyncio.sleep(args.seconds, {"slept": args.seconds}))


class WaitArgs(msgspec.Struct, forbid_unknown_fields=True):
    label: Annotated[str, _desc("Gate to wait on and name in the log, from the test's gate, e.g. 'a'")]
    seconds: Annotated[float, _desc("Longest wait, e.g. 30 (default: the wait limit)")] = WAIT_LIMIT


class ProbeWait(_ProbeTool):
    name = "probe_wait"
    description = ("Wait until the test opens a gate, recording start and end.\n"
                   "Use for concurrent calls; probe_sleep for serial ones.\n"
                   "Precondition: only in test daemons.")
    Arguments = WaitArgs
    risk = ToolRisk.READ_ONLY
    flags = ToolFlags(concurrent=True)

    async def run(self, args: WaitArgs, plan: Plan, ctx: CallContext) -> Any:
        return await self._timed(args.label, lambda: self._wait(args))

    async def _wait(self, args: WaitArgs) -> Any:
        await self.probe.gate(args.label, args.seconds)
        return {"label": args.label}


class ProbeBackground(ProbeWait):
    name = "probe_bg"
    description = ("Wait in the background until the test opens a gate.\n"
                   "Use for background calls; probe_wait for foreground ones.\n"
                   "Precondition: only in test daemons.")
    flags = ToolFlags(background=True)


class SlowArgs(msgspec.Struct, forbid_unknown_fields=True):
    seconds: Annotated[float, _desc("How long to sleep, e.g. 10 (default 10)")] = 10.0


class ProbeSlow(_ProbeTool):
    name = "probe_slow"
    description = ("Sleep past its own small dispatch timeout.\n"
                   "Use for timeout tests; probe_sleep for ordinary sleeps.\n"
                   "Precondition: only in test daemons.")
    Arguments = SlowArgs
    risk = ToolRisk.READ_ONLY
    flags = ToolFlags(timeout=0.3)

    async def run(self, args: SlowArgs, plan: Plan, ctx: CallContext) -> Any:
        return await self._timed("slow", lambda: asyncio.sleep(args.seconds, {}))


class ProbeSystem(_ProbeTool):
    name = "probe_system"
    description = ("Internal bookkeeping probe, hidden from listings.\n"
                   "Use for include_system checks; probe_echo for visible tools.\n"
                   "Precondition: only in test daemons.")
    Arguments = FreeArgs
    risk = ToolRisk.READ_ONLY
    flags = ToolFlags(system_use=True)

    async def run(self, args: FreeArgs, plan: Plan, ctx: CallContext) -> Any:
        return {}


class ProbeCrash(_ProbeTool):
    name = "probe_crash"
    description = ("Raise an unexpected exception inside run.\n"
                   "Use for checking a tool bug becomes kind failed; probe_echo otherwise.\n"
                   "Precondition: only in test daemons.")
    Arguments = FreeArgs
    risk = ToolRisk.READ_ONLY

    async def run(self, args: FreeArgs, plan: Plan, ctx: CallContext) -> Any:
        raise ValueError("probe bug")


class ProbeBadResult(_ProbeTool):
    name = "probe_bad_result"
    description = ("Return a result that cannot be encoded as JSON.\n"
                   "Use for checking a bad result still completes the call; probe_crash for raising.\n"
                   "Precondition: only in test daemons.")
    Arguments = FreeArgs
    risk = ToolRisk.READ_ONLY

    async def run(self, args: FreeArgs, plan: Plan, ctx: CallContext) -> Any:
        return {"handle": object()}  # a tool bug: not msgspec-encodable


ALL = (ProbeEcho, ProbeFree, ProbeTouch, ProbeSleep, ProbeWait, ProbeBackground, ProbeSlow,
       ProbeSystem, ProbeCrash, ProbeBadResult)


def probe_tools(probe: Probe) -> list[Tool]:
    return [cls(probe) for cls in ALL]


# --- an in-process daemon with the probe tools, and its clients ----------------------


@dataclass
class Rig:
    """An in-process daemon with the probe tools; clients made here are closed at teardown."""

    inproc: Any
    probe: Probe
    opened: list[Any] = field(default_factory=list)

    def client(self, name: str = "pytest", approver: bool = False) -> Any:
        c = self.inproc.client(name=name, approver=approver)
        self.opened.append(c)
        return c

    def watcher(self, name: str = "watcher") -> Any:
        c = self.client(name=name)
        c.request(p.ApprovalsWatch)
        return c

    def close(self) -> None:
        for c in self.opened:
            c.close()


@pytest.fixture
def rig(make_inproc: Any) -> Iterator[Callable[[str], Rig]]:
    """make(config) -> Rig. Import this fixture into a test module to use it."""
    made: list[Rig] = []

    def make(config: str = "") -> Rig:
        probe = Probe()
        made.append(Rig(make_inproc(config, tools=probe_tools(probe)), probe))
        return made[-1]

    yield make
    for r in made:
        r.close()


# --- events over a blocking Client ------------------------------------------------


def wait_event(client: Any, predicate: Callable[[Any], bool]) -> Any:
    """The first queued or arriving event matching `predicate`; others stay queued, in order."""
    skipped: list[Any] = []
    try:
        while True:
            event = client.next_event()
            if predicate(event):
                return event
            skipped.append(event)
    finally:
        client.core.events.extendleft(reversed(skipped))


def requested(client: Any, call_id: str | None = None) -> p.ApprovalRequested:
    return wait_event(client, lambda e: isinstance(e, p.ApprovalRequested)
                      and (call_id is None or e.call_id == call_id))


def resolved(client: Any, approval_id: str) -> p.ApprovalResolved:
    return wait_event(client, lambda e: isinstance(e, p.ApprovalResolved) and e.approval_id == approval_id)


def flush(client: Any) -> list[Any]:
    """Every event the daemon sent this client before answering a ping; the queue is emptied."""
    client.request(p.Ping)
    events = list(client.core.events)
    client.core.events.clear()
    return events


def wait_idle(client: Any, timeout: float = 15.0) -> None:
    """Until the daemon runs no call and waits on no approval."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = client.status()
        if status.running_calls == 0 and status.pending_approvals == 0:
            return
        time.sleep(0.01)
    raise AssertionError("the daemon still has calls or approvals in flight")
