"""The calls registry on its own, h11-style: an in-memory hub, no sockets, no daemon.

Every path a call can take ends in exactly one `call.completed` and exactly one
completion audit line; the tests count both once every outcome has resolved.
"""

from __future__ import annotations

import asyncio
import collections
import os
import re
import threading
from pathlib import Path
from typing import Annotated, Any

import msgspec
import pytest

from scvd import errors, protocol as p
from scvd.approvals import ApprovalGate, Decider
from scvd.audit import Record, _fields_of
from scvd.calls import CallRegistry, Outcome
from scvd.config import ApprovalsConfig, Config, ToolsConfig
from scvd.own_places import SERVICE as OWN_PLACES
from scvd.sessions import Session
from scvd.tools.contract import NO_TIMEOUT, NOT_NOW, CallContext, Plan, Registry, Tool, ToolFlags, ToolRisk

ME = Decider(pid=os.getpid(), uid=os.getuid(), client="test")


class Text(msgspec.Struct, forbid_unknown_fields=True):
    text: Annotated[str, msgspec.Meta(description="Any text, e.g. 'hello'; echoed back (default '')")] = ""


class _Tool(Tool):
    Arguments = Text
    risk = ToolRisk.READ_ONLY

    def __init__(self) -> None:
        self.ran: list[str] = []
        self.gate = asyncio.Event()

    def plan(self, args: Text, ctx: CallContext) -> Plan:
        return Plan(risk=self.risk, summary=f"{self.name} {args.text}")

    async def run(self, args: Text, plan: Plan, ctx: CallContext) -> Any:
        self.ran.append(ctx.call_id)
        return await self.body(args)

    async def body(self, args: Text) -> Any:
        return {"text": args.text}


def _tool(name: str, risk: ToolRisk = ToolRisk.READ_ONLY, flags: ToolFlags = ToolFlags(),
          body: Any = None) -> Tool:
    desc = (f"Test tool {name} for the calls registry.\nUse for registry unit tests; probe tools for daemon tests.\n"
            "Precondition: only in test daemons.")
    attrs: dict[str, Any] = {"name": name, "description": desc, "risk": risk, "flags": flags}
    if body is not None:
        attrs["body"] = body
    return type(name.title(), (_Tool,), attrs)()


async def _hold(self: _Tool, args: Text) -> Any:
    await self.gate.wait()
    return {"held": args.text}


async def _fail(self: _Tool, args: Text) -> Any:
    raise errors.Failed("fail: the thing broke; fix the thing")


async def _crash(self: _Tool, args: Text) -> Any:
    raise ValueError("an internal detail")


async def _bad_result(self: _Tool, args: Text) -> Any:
    return object()


def tools() -> list[Tool]:
    return [
        _tool("echo"),
        _tool("touch", ToolRisk.FILESYSTEM),
        _tool("hold", body=_hold),
        _tool("hold_forever", flags=ToolFlags(timeout=NO_TIMEOUT), body=_hold),
        _tool("fail", body=_fail),
        _tool("crash", body=_crash),
        _tool("bad_result", body=_bad_result),
    ]


class FakeAudit:
    def __init__(self) -> None:
        self.lines: list[dict[str, Any]] = []

    def add(self, event: str, fields: dict[str, object]) -> None:
        self.lines.append({"event": event, **fields})

    def add_record(self, record: Record) -> None:
        self.add(record.event, _fields_of(record))


class FakeHub:
    """The daemon as the registry sees it: a gate, an audit sink and an event list."""

    def __init__(self) -> None:
        self.gate = ApprovalGate(900.0, self._on_approval)
        self.paths: Any = None
        self.own = ()  # no folders of its own
        self.sandbox = None
        self.host: frozenset[Any] = frozenset()  # no places outside whose files run later
        self.audit = FakeAudit()
        self.sent: list[tuple[object, p.Frame]] = []
        self.requests: list[Any] = []
        self.changes = 0
        self.registry: CallRegistry | None = None

    def send_event(self, owner: object, event: p.Frame) -> None:
        self.sent.append((owner, event))

    def calls_changed(self) -> None:
        self.changes += 1

    def not_loaded(self, name: str, registry: Any) -> None:
        return None  # every tool loaded

    def _on_approval(self, kind: str, approval: Any) -> None:
        if kind == "requested":
            self.requests.append(approval)
        elif self.registry is not None:
            self.registry.record_decision(approval)


def kinds(hub: FakeHub, call_id: str) -> list[str]:
    return [type(e).__struct_config__.tag for _, e in hub.sent if getattr(e, "call_id", None) == call_id]


SESSIONS: list[Session] = []


class FakeOwner:
    """A session's owner as the registry sees it (scvd.sessions.Owner)."""

    def __init__(self, client: str) -> None:
        self.client, self.approver, self.sessions, self.call_bytes, self.calls_held = client, True, {}, 0, 0


@pytest.fixture(autouse=True)
def _close_sessions() -> Any:
    yield
    while SESSIONS:
        SESSIONS.pop().close()


def new_session(config: Config, owner: str = "owner", sid: str = "s1") -> Session:
    fd = os.open("/", os.O_RDONLY | os.O_DIRECTORY)
    session = Session(id=sid, workspace=Path("/"), workspace_fd=fd, owner=FakeOwner(owner), config=config,
                      registry=Registry(tools()))
    SESSIONS.append(session)
    return session


def make(policy: str = "on-risk", **tools_cfg: Any) -> tuple[FakeHub, CallRegistry, Session]:
    hub = FakeHub()
    registry = CallRegistry(hub)
    hub.registry = registry
    config = Config(approvals=ApprovalsConfig(policy=policy), tools=ToolsConfig(**tools_cfg))
    return hub, registry, new_session(config)


def tool(session: Session, name: str) -> Any:
    return session.registry.get(name)


def assert_once_each(hub: FakeHub, call_ids: list[str]) -> None:
    """Exactly one call.completed and one completion audit line per call, nothing for others."""
    sent = collections.Counter(e.call_id for _, e in hub.sent if isinstance(e, p.CallCompleted))
    audited = collections.Counter(line["call_id"] for line in hub.audit.lines if line["event"] == "completion")
    expected = collections.Counter(call_ids)
    assert sent == expected, hub.sent
    assert audited == expected, hub.audit.lines


def completed(hub: FakeHub, call_id: str) -> p.CallCompleted:
    return next(e for _, e in hub.sent if isinstance(e, p.CallCompleted) and e.call_id == call_id)


def audit(hub: FakeHub, call_id: str) -> list[dict[str, Any]]:
    return [line for line in hub.audit.lines if line.get("call_id") == call_id]


async def until(predicate: Any) -> None:
    while not predicate():
        await asyncio.sleep(0)


def run(coro: Any) -> Any:
    return asyncio.run(coro)


# --- refusals: one completion and one audit line, no proposal ------------------------------


@pytest.mark.parametrize("name,arguments,timeout,kind,needle", [
    ("nope", {}, None, "unknown_tool", "no tool named 'nope'; tools: echo, touch"),
    ("echo", {}, 99999.0, "invalid_arguments", "tools.max_timeout_seconds"),
    ("echo", {}, 0.0, "invalid_arguments", "must be above 0"),
    ("echo", {"text": 3}, None, "invalid_arguments", "`text`"),
    ("echo", {"bogus": 1}, None, "invalid_arguments", "`bogus`"),
])
def test_refused_and_undecodable_calls_complete_once_before_the_lane(name, arguments, timeout, kind, needle):
    async def main() -> None:
        hub, calls, session = make(policy="always")
        handle = calls.submit(session, name, arguments, requester=ME, timeout_seconds=timeout)
        ok, result, error = await handle.outcome
        assert not ok and result is None and error.kind == kind and needle in error.message, error
        assert kinds(hub, handle.call_id) == ["call.completed"]
        assert [line["event"] for line in audit(hub, handle.call_id)] == ["completion"]
        assert audit(hub, handle.call_id)[0]["error_kind"] == kind
        assert audit(hub, handle.call_id)[0]["tool"] == name
        assert not hub.requests and len(calls) == 0
        assert_once_each(hub, [handle.call_id])

    run(main())


def test_a_stopping_registry_refuses_new_calls_and_cancels_running_ones():
    async def main() -> None:
        hub, calls, session = make()
        held = calls.submit(session, "hold", {"text": "x"}, requester=ME)
        await until(lambda: tool(session, "hold").ran)
        assert await calls.stop(grace=5) == 0
        late = calls.submit(session, "echo", {}, requester=ME)
        running, refused = await held.outcome, await late.outcome
        assert running.error.kind == "cancelled" and "scvd is stopping" in running.error.message
        assert refused.error.kind == "cancelled" and "no new calls are accepted" in refused.error.message
        assert_once_each(hub, [held.call_id, late.call_id])

    run(main())


# --- cancellation ---------------------------------------------------------------------------


def test_cancel_before_the_first_step_completes_once_and_never_runs_the_tool():
    async def main() -> None:
        hub, calls, session = make()
        handle = calls.submit(session, "echo", {"text": "x"}, requester=ME, call_id="pipelined")
        calls.cancel("pipelined", "call.cancel")  # the same loop turn: a call and its cancel in one write
        ok, _, error = await handle.outcome
        assert not ok and error.kind == "cancelled" and "call.cancel" in error.message
        assert tool(session, "echo").ran == []
        assert kinds(hub, "pipelined") == ["call.completed"]
        assert_once_each(hub, ["pipelined"])
        with pytest.raises(errors.CallNotFound):
            calls.cancel("pipelined", "again")

    run(main())


def test_cancel_while_queued_waiting_for_approval_or_running_each_completes_once():
    async def main() -> None:
        hub, calls, session = make()
        running = calls.submit(session, "hold", {}, requester=ME)
        await until(lambda: tool(session, "hold").ran)
        queued = calls.submit(session, "echo", {}, requester=ME)
        other = new_session(session.config, sid="s2")
        waiting = calls.submit(other, "touch", {}, requester=ME)
        await until(lambda: hub.requests)
        for handle in (queued, waiting, running):
            calls.cancel(handle.call_id, "test")
        outcomes = [await h.outcome for h in (queued, waiting, running)]
        assert [o.error.kind for o in outcomes] == ["cancelled"] * 3
        assert hub.requests[0].state.value == "cancelled" and not hub.gate.pending
        assert tool(session, "echo").ran == [] and tool(other, "touch").ran == []
        assert_once_each(hub, [queued.call_id, waiting.call_id, running.call_id])

    run(main())


def test_closing_a_session_cancels_only_its_calls():
    async def main() -> None:
        hub, calls, session = make()
        mine = calls.submit(session, "hold", {}, requester=ME)
        other = new_session(session.config, owner="other", sid="s2")
        theirs = calls.submit(other, "hold", {}, requester=ME)
        await until(lambda: tool(session, "hold").ran and tool(other, "hold").ran)
        calls.cancel_session(session, "its session was closed")
        assert (await mine.outcome).error.kind == "cancelled"
        assert calls.get(theirs.call_id) is not None
        tool(other, "hold").gate.set()
        assert (await theirs.outcome).ok

    run(main())


def test_closing_sessions_of_many_calls_leaves_the_loop_to_others_between_their_cancels():
    # a closed connection's 16,384 calls (one waiting for approval in each session, the rest queued behind
    # it) were all cancelled at once and their tasks ran in the next loop turn: other clients waited a second
    async def main() -> None:
        hub, calls, first = make()
        second = new_session(first.config, sid="s2")
        calls.max_per_session = calls.max_per_connection = 1100
        handles = []
        # the second session's calls: past the first few hundred, whose cancels come first
        for session, queued in ((first, 999), (second, 99)):
            handles.append(calls.submit(session, "touch", {}, requester=ME))
            await until(lambda: len(hub.requests) == len(handles) // 1000 + 1)
            handles += [calls.submit(session, "echo", {}, requester=ME) for _ in range(queued)]
        await until(lambda: all(calls.get(h.call_id).begun for h in handles))
        left_when_others_ran: list[int] = []
        calls.cancel_session(first, "its session was closed")
        calls.cancel_session(second, "its session was closed")
        asyncio.get_running_loop().call_soon(lambda: left_when_others_ran.append(len(calls)))  # a frame read next
        outcomes = [await h.outcome for h in handles]
        assert left_when_others_ran[0] > 0, "the close's calls all ran before what came after it"
        # none went on meanwhile: one woken by the end of the call before it, or by its request's cancel
        assert {o.error.kind for o in outcomes} == {"cancelled"}, {o.error.message for o in outcomes}
        assert [r.state.value for r in hub.requests] == ["cancelled"] * 2 and not hub.gate.pending
        assert [tool(session, name).ran for session in (first, second) for name in ("echo", "touch")] == [[]] * 4
        ids = [h.call_id for h in handles]
        for session, came in ((first, ids[:1000]), (second, ids[1000:])):  # each session's in the order they came
            assert [line["call_id"] for line in hub.audit.lines
                    if line["event"] == "completion" and line["session"] == session.id] == came
        assert_once_each(hub, ids)

    run(main())


# --- the approval gate -------------------------------------------------------------------------


def test_denied_by_a_person_audits_proposal_decision_and_completion():
    async def main() -> None:
        hub, calls, session = make()
        handle = calls.submit(session, "touch", {"text": "a"}, requester=ME)
        await until(lambda: hub.requests)
        hub.gate.decide(hub.requests[0].id, False, decider=ME, reason="not today", scope="once")
        ok, _, error = await handle.outcome
        assert not ok and error.kind == "denied" and "not today" in error.message
        assert [line["event"] for line in audit(hub, handle.call_id)] == ["proposal", "decision", "completion"]
        assert audit(hub, handle.call_id)[0]["decision"] == "ask"
        assert kinds(hub, handle.call_id) == ["call.completed"]
        assert tool(session, "touch").ran == []
        assert_once_each(hub, [handle.call_id])

    run(main())


def test_denied_by_policy_never_asks_nobody():
    async def main() -> None:
        hub, calls, session = make(policy="never")
        handle = calls.submit(session, "touch", {}, requester=ME)
        error = (await handle.outcome).error
        assert error.kind == "denied" and "approvals.policy is 'never'" in error.message
        assert not hub.requests
        assert [line["event"] for line in audit(hub, handle.call_id)] == ["proposal", "completion"]
        assert_once_each(hub, [handle.call_id])

    run(main())


def test_an_approved_call_says_started_then_completes():
    async def main() -> None:
        hub, calls, session = make()
        handle = calls.submit(session, "touch", {"text": "a"}, requester=ME, turn="t1")
        await until(lambda: hub.requests)
        hub.gate.decide(hub.requests[0].id, True, decider=ME, reason=None, scope="once")
        assert (await handle.outcome).ok
        assert kinds(hub, handle.call_id) == ["call.started", "call.completed"]
        assert {e.turn for _, e in hub.sent} == {"t1"}
        assert_once_each(hub, [handle.call_id])

    run(main())


def test_an_approval_decided_but_not_acted_on_when_the_tool_is_revoked_neither_runs_nor_grants():
    # the decision and an MCP server's redefinition of the tool in one loop turn: the request was
    # resolved, so withdraw() no longer finds it, and the call's task has not gone on yet
    async def main() -> None:
        hub, calls, session = make()
        handle = calls.submit(session, "touch", {"text": "a"}, requester=ME)
        await until(lambda: hub.requests)
        approval = hub.requests[0]
        hub.gate.decide(approval.id, True, decider=ME, reason=None, scope="session")
        why = "mcp server fs redefined touch while this call waited, so the request no longer shows what would run"
        session.revoke({"touch"}, why)
        assert hub.gate.withdraw({"touch"}, why) == []
        ok, _, error = await handle.outcome
        assert not ok and error.kind == "denied"
        assert error.message == f"approval {approval.id} was approved by {ME.label()}, but {why}"
        assert tool(session, "touch").ran == []
        assert not session.granted("touch", "filesystem")
        later = calls.submit(session, "touch", {"text": "b"}, requester=ME)  # asks again
        await until(lambda: len(hub.requests) == 2)
        hub.gate.decide(hub.requests[1].id, True, decider=ME, reason=None, scope="session")
        assert (await later.outcome).ok and session.granted("touch", "filesystem")
        assert_once_each(hub, [handle.call_id, later.call_id])

    run(main())


# --- running: ok, failed, crashed, timed out -----------------------------------------------------


def test_a_fast_call_sends_only_its_completion_and_leaves_no_timer():
    async def main() -> None:
        hub, calls, session = make()
        handle = calls.submit(session, "echo", {"text": "hi"}, requester=ME, turn="t9")
        call = calls.get(handle.call_id)
        outcome = await handle.outcome
        assert outcome == Outcome(True, {"text": "hi"}, None)
        assert kinds(hub, handle.call_id) == ["call.completed"]
        assert completed(hub, handle.call_id).turn == "t9"
        assert [owner for owner, _ in hub.sent] == [session.owner]  # events go to the session's owner
        assert call.timer is not None and call.timer.cancelled()
        assert [line["event"] for line in audit(hub, handle.call_id)] == ["proposal", "completion"]
        assert audit(hub, handle.call_id)[1]["outcome"] == "ok"
        assert hub.changes == 2 and len(calls) == 0  # submitted, completed
        assert_once_each(hub, [handle.call_id])

    run(main())


def test_a_call_that_waited_in_the_lane_says_started():
    async def main() -> None:
        hub, calls, session = make()
        first = calls.submit(session, "hold", {}, requester=ME)
        second = calls.submit(session, "echo", {}, requester=ME)
        await until(lambda: tool(session, "hold").ran)
        tool(session, "hold").gate.set()
        await first.outcome, await second.outcome
        assert kinds(hub, first.call_id) == ["call.completed"]
        assert kinds(hub, second.call_id) == ["call.started", "call.completed"]

    run(main())


@pytest.mark.parametrize("name,kind,needle", [
    ("fail", "failed", "the thing broke"),
    ("crash", "failed", "crash failed unexpectedly: ValueError"),
    ("bad_result", "failed", "bad_result returned a result that cannot be encoded"),
])
def test_failing_and_crashing_tools_complete_once(name, kind, needle):
    async def main() -> None:
        hub, calls, session = make()
        handle = calls.submit(session, name, {}, requester=ME)
        error = (await handle.outcome).error
        assert error.kind == kind and needle in error.message, error
        assert "an internal detail" not in error.message
        assert audit(hub, handle.call_id)[-1]["error_kind"] == kind
        assert_once_each(hub, [handle.call_id])
        ok = calls.submit(session, "echo", {}, requester=ME)  # the registry goes on
        assert (await ok.outcome).ok

    run(main())


def test_the_dispatch_timeout_stops_a_call_and_names_the_limit():
    async def main() -> None:
        hub, calls, session = make()
        handle = calls.submit(session, "hold", {}, requester=ME, timeout_seconds=0.05)
        ok, _, error = await handle.outcome
        assert not ok and error.kind == "timeout" and "dispatch timeout of 0.05 s" in error.message
        assert audit(hub, handle.call_id)[-1]["error_kind"] == "timeout"
        assert_once_each(hub, [handle.call_id])

    run(main())


def test_progress_comes_only_from_a_call_running_past_the_interval():
    async def main() -> None:
        hub, calls, session = make(progress_interval_seconds=0.01)
        handle = calls.submit(session, "hold_forever", {}, requester=ME, turn="t2")
        await until(lambda: len([e for _, e in hub.sent if isinstance(e, p.CallProgress)]) >= 2)
        assert len(asyncio.all_tasks()) == 2  # this test and the call: no progress task
        tool(session, "hold_forever").gate.set()
        assert (await handle.outcome).ok
        progress = [e for _, e in hub.sent if isinstance(e, p.CallProgress)]
        assert all(e.timeout_s is None and e.turn == "t2" for e in progress)
        assert [e.elapsed_s for e in progress] == sorted(e.elapsed_s for e in progress)
        assert_once_each(hub, [handle.call_id])

    run(main())


class _Reporting(_Tool):
    """Reports its own progress far more often than the interval, as an MCP server may, until the
    daemon log shows the call (or, failing, for a while)."""

    name = "reporting"
    description = ("Report progress many times a second until the log shows the call.\n"
                   "Use for the log's running line; hold for a call without reports.")

    def __init__(self, caplog: Any) -> None:
        super().__init__()
        self.caplog = caplog

    def logged(self) -> bool:
        return any("running name=reporting" in r.getMessage() for r in self.caplog.records)

    async def run(self, args: Text, plan: Plan, ctx: CallContext) -> Any:
        loop = asyncio.get_running_loop()
        give_up = loop.time() + 5  # only a run that never logs gets there
        while not self.logged() and loop.time() < give_up:
            ctx.progress("step")
            await asyncio.sleep(0.001)
        return {}


def test_a_tool_reporting_its_own_progress_still_gets_the_logs_running_line(caplog):
    """Seed 003: a long run is logged as `running name=... elapsed=Ys/Zs` every interval, for visibility.
    A tool's own progress reset the timer, so an MCP server reporting every few seconds was never logged."""
    caplog.set_level("INFO", logger="scvd.calls")

    async def main() -> None:
        hub, calls, session = make(progress_interval_seconds=0.2)  # 200 reports in one interval
        session.registry = Registry([*tools(), _Reporting(caplog)])
        handle = calls.submit(session, "reporting", {}, requester=ME)
        assert (await handle.outcome).ok
        assert any(e.message == "step" for _, e in hub.sent if isinstance(e, p.CallProgress))

    run(main())
    lines = [r.getMessage() for r in caplog.records if "running name=reporting" in r.getMessage()]
    assert lines and all(re.fullmatch(r"running name=reporting call=\S+ elapsed=\d+s/900s", line) for line in lines)


# --- the request itself ---------------------------------------------------------------------------


def test_a_call_id_in_use_is_refused_and_reusable_once_done():
    async def main() -> None:
        hub, calls, session = make()
        first = calls.submit(session, "hold", {}, requester=ME, call_id="mine")
        with pytest.raises(errors.InvalidRequest, match="already in use"):
            calls.submit(session, "echo", {}, requester=ME, call_id="mine")
        tool(session, "hold").gate.set()
        await first.outcome
        again = calls.submit(session, "echo", {}, requester=ME, call_id="mine")
        assert (await again.outcome).ok
        with pytest.raises(errors.CallNotFound):
            calls.cancel("never-was", "test")

    run(main())


# --- what plan() holds for run() is freed on every path ----------------------------------


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.parametrize("decision", ["approve", "deny", "cancel"])
def test_read_reads_the_file_plan_opened_and_frees_it_on_every_path(tmp_path: Path, decision: str):
    """A secret-like read waits for a person: the path is swapped meanwhile, and the approved file is what is read."""
    from scvd.tools.fs import ReadTool

    (tmp_path / ".env").write_text("APPROVED\n")
    (tmp_path / "other").write_text("SWAPPED IN\n")

    async def main() -> None:
        hub = FakeHub()
        calls = CallRegistry(hub)
        hub.registry = calls
        fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
        session = Session(id="s1", workspace=tmp_path, workspace_fd=fd, owner=FakeOwner("owner"), config=Config(),
                          registry=Registry([ReadTool(65536)]), services={OWN_PLACES: hub.own})  # as the daemon's
        SESSIONS.append(session)
        before = _fds()
        handle = calls.submit(session, "read", {"path": ".env"}, requester=ME)
        await until(lambda: hub.requests)
        assert _fds() == before + 1  # plan() holds the file it showed the approver
        os.replace(tmp_path / "other", tmp_path / ".env")
        if decision == "cancel":
            calls.cancel(handle.call_id, "changed my mind")
        else:
            hub.gate.decide(hub.requests[0].id, decision == "approve", decider=ME, reason="", scope="once")
        ok, result, error = await handle.outcome
        if decision == "approve":
            assert ok and result["content"] == "APPROVED\n", error
        else:
            assert not ok and error.kind == ("denied" if decision == "deny" else "cancelled")
        assert _fds() == before
        assert_once_each(hub, [handle.call_id])

    run(main())


# --- tools that may finish without waiting (Tool.run_now): no task unless something waits -------


class _Now(_Tool):
    """run_now() answers at once, unless the text says 'later' (then run() does, in a task)."""

    name = "now"
    description = ("Test tool now for the calls registry.\nUse for registry unit tests; probe tools for daemon tests.\n"
                   "Precondition: only in test daemons.")
    risk = ToolRisk.READ_ONLY
    flags = ToolFlags(concurrent=True)

    def __init__(self) -> None:
        super().__init__()
        self.released = 0
        self.ran_now: list[str] = []

    def plan(self, args: Text, ctx: CallContext) -> Plan:
        risk = ToolRisk.FILESYSTEM if args.text == "ask" else self.risk
        return Plan(risk=risk, summary=f"now {args.text}", release=self._release)

    def _release(self) -> None:
        self.released += 1

    def run_now(self, args: Text, plan: Plan, ctx: CallContext) -> Any:
        self.ran_now.append(ctx.call_id)
        if args.text == "boom":
            raise errors.Failed("now: it broke; fix it")
        return NOT_NOW if args.text == "later" else {"now": args.text}


def make_now(policy: str = "on-risk") -> tuple[FakeHub, CallRegistry, Session]:
    hub, calls, session = make(policy)
    session.registry = Registry([*tools(), _Now()])
    return hub, calls, session


def test_a_call_its_tool_finishes_at_once_runs_without_a_task_or_timer():
    async def main() -> None:
        hub, calls, session = make_now()
        handle = calls.submit(session, "now", {"text": "hi"}, requester=ME)
        call = calls.get(handle.call_id)
        assert await handle.outcome == Outcome(True, {"now": "hi"}, None)
        assert call.task is None and call.timer is None
        assert kinds(hub, handle.call_id) == ["call.completed"]
        assert [line["event"] for line in audit(hub, handle.call_id)] == ["proposal", "completion"]
        assert tool(session, "now").released == 1 and tool(session, "now").ran == []
        assert session.lane.depth == 0
        assert_once_each(hub, [handle.call_id])

    run(main())


def test_a_deferred_call_awaited_only_after_it_completed_still_gives_its_outcome():
    """The server never awaits its calls (its frames answer them): their outcome is made only when
    someone asks, and one asked for after the call completed (a connection's end) is that outcome."""
    async def main() -> None:
        hub, calls, session = make_now()
        handle = calls.submit(session, "now", {"text": "hi"}, requester=ME, defer=True)
        assert calls.start_due() is False  # it finished in its first step, in this turn
        assert kinds(hub, handle.call_id) == ["call.completed"] and calls.get(handle.call_id) is None
        assert handle.outcome.done() and await handle.outcome == Outcome(True, {"now": "hi"}, None)

    run(main())


def test_a_call_its_tool_cannot_finish_at_once_goes_on_in_a_task_under_the_timer():
    async def main() -> None:
        hub, calls, session = make_now()
        handle = calls.submit(session, "now", {"text": "later"}, requester=ME)
        call = calls.get(handle.call_id)
        assert await handle.outcome == Outcome(True, {"text": "later"}, None)  # run()'s answer
        assert call.task is not None and call.timer is not None and call.timer.cancelled()
        now = tool(session, "now")
        assert now.ran_now == now.ran == [handle.call_id] and now.released == 1
        assert [line["event"] for line in audit(hub, handle.call_id)] == ["proposal", "completion"]
        assert kinds(hub, handle.call_id) == ["call.completed"] and session.lane.depth == 0

    run(main())


def test_a_call_that_waits_for_its_lane_or_a_person_then_runs_says_started():
    async def main() -> None:
        hub, calls, session = make_now()
        first = calls.submit(session, "hold", {}, requester=ME)  # serial: holds the lane
        queued = calls.submit(session, "now", {"text": "q"}, requester=ME)
        asked = calls.submit(session, "now", {"text": "ask"}, requester=ME)
        await until(lambda: tool(session, "hold").ran)
        tool(session, "hold").gate.set()
        await until(lambda: hub.requests)
        hub.gate.decide(hub.requests[0].id, True, decider=ME, reason="", scope="once")
        outcomes = [await h.outcome for h in (first, queued, asked)]
        assert [o.result for o in outcomes] == [{"held": ""}, {"text": "q"}, {"text": "ask"}]  # run(), in a task
        assert kinds(hub, queued.call_id) == kinds(hub, asked.call_id) == ["call.started", "call.completed"]
        assert [line["event"] for line in audit(hub, asked.call_id)] == ["proposal", "decision", "completion"]
        assert tool(session, "now").released == 2 and session.lane.depth == 0
        assert_once_each(hub, [first.call_id, queued.call_id, asked.call_id])

    run(main())


def test_calls_of_a_tool_that_finishes_at_once_cancelled_before_their_first_step_or_in_the_lane():
    async def main() -> None:
        hub, calls, session = make_now()
        early = calls.submit(session, "now", {"text": "x"}, requester=ME)
        calls.cancel(early.call_id, "call.cancel")  # in the turn that accepted it
        first = calls.submit(session, "hold", {}, requester=ME)
        queued = calls.submit(session, "now", {"text": "q"}, requester=ME)
        await until(lambda: tool(session, "hold").ran)
        await asyncio.sleep(0)
        calls.cancel(queued.call_id, "test")  # waiting in the lane behind `hold`
        tool(session, "hold").gate.set()
        outcomes = [await h.outcome for h in (early, first, queued)]
        assert [o.ok for o in outcomes] == [False, True, False]
        assert outcomes[0].error.kind == outcomes[2].error.kind == "cancelled"
        assert tool(session, "now").ran_now == [] and session.lane.depth == 0
        assert_once_each(hub, [early.call_id, first.call_id, queued.call_id])

    run(main())


def test_books_held_for_a_batch_come_after_its_answers_in_order_and_the_status_once():
    """While the server holds the books (a batch of frames whose answers leave in one write), a fast
    call's `call.completed` is sent at once and its audit records wait for the write; then they come
    in the order they were made, and the status is updated once for the whole batch."""
    async def main() -> None:
        hub, calls, session = make_now()
        calls.hold_books()
        first = calls.submit(session, "now", {"text": "a"}, requester=ME, defer=True)
        second = calls.submit(session, "now", {"text": "b"}, requester=ME, defer=True)
        assert calls.start_due() is False
        assert kinds(hub, first.call_id) == kinds(hub, second.call_id) == ["call.completed"]
        assert hub.audit.lines == [] and hub.changes == 0 and len(calls) == 0
        calls.books_after_answers()
        assert [(line["event"], line["call_id"]) for line in hub.audit.lines] == [
            ("proposal", first.call_id), ("completion", first.call_id),
            ("proposal", second.call_id), ("completion", second.call_id)]
        assert hub.changes == 1
        assert_once_each(hub, [first.call_id, second.call_id])
        later = calls.submit(session, "now", {"text": "c"}, requester=ME)  # not held: at once, as before
        await later.outcome
        assert [line["event"] for line in audit(hub, later.call_id)] == ["proposal", "completion"]
        assert hub.changes == 3

    run(main())


def test_a_denial_is_audited_before_its_answer_even_while_books_are_held():
    """The audit log writes a denial at once, before the client hears of it: holding the books for
    a batch must not put a denied call's completion after its `call.completed`."""
    async def main() -> None:
        hub, calls, session = make_now(policy="never")
        calls.hold_books()
        denied = calls.submit(session, "now", {"text": "ask"}, requester=ME, defer=True)
        calls.start_due()
        assert (await denied.outcome).error.kind == "denied"  # still held: books_after_answers() not yet
        assert [line["event"] for line in audit(hub, denied.call_id)] == ["proposal", "completion"]
        calls.books_after_answers()
        assert_once_each(hub, [denied.call_id])

    run(main())


def test_a_call_that_asks_is_audited_before_its_approval_request_even_while_books_are_held():
    async def main() -> None:
        hub, calls, session = make()
        calls.hold_books()
        asks = calls.submit(session, "touch", {"text": "x"}, requester=ME, defer=True)
        calls.start_due()
        await until(lambda: hub.requests)
        assert [(line["event"], line["decision"]) for line in audit(hub, asks.call_id)] == [("proposal", "ask")]
        calls.books_after_answers()
        calls.cancel(asks.call_id, "test over")
        await asks.outcome
        assert_once_each(hub, [asks.call_id])

    run(main())


def test_a_tool_that_fails_at_once_or_a_denial_by_policy_completes_once_and_frees_its_plan():
    async def main() -> None:
        hub, calls, session = make_now(policy="never")
        boom = calls.submit(session, "now", {"text": "boom"}, requester=ME)
        denied = calls.submit(session, "now", {"text": "ask"}, requester=ME)
        failed, refused = await boom.outcome, await denied.outcome
        assert failed.error.kind == "failed" and "it broke" in failed.error.message
        assert refused.error.kind == "denied" and not hub.requests
        assert tool(session, "now").released == 2 and session.lane.depth == 0
        assert_once_each(hub, [boom.call_id, denied.call_id])

    run(main())


def test_stopping_completes_calls_that_have_not_taken_their_first_step():
    async def main() -> None:
        hub, calls, session = make_now()
        handle = calls.submit(session, "now", {"text": "x"}, requester=ME)
        assert await calls.stop(grace=5) == 0
        assert handle.outcome.done() and handle.outcome.result().error.kind == "cancelled"
        assert tool(session, "now").ran_now == []
        assert_once_each(hub, [handle.call_id])

    run(main())


def test_a_call_cancelled_between_its_first_step_and_its_task_frees_its_lane_slot_and_plan():
    """The first step entered the lane and planned, then handed over to a task (run_now said not
    now); a cancel that lands before that task's first step must still let go of both."""
    async def main() -> None:
        hub, calls, session = make_now()
        handle = calls.submit(session, "now", {"text": "later"}, requester=ME)
        await asyncio.sleep(0)  # the first step runs, and makes the task
        call = calls.get(handle.call_id)
        assert call.task is not None and not call.begun
        calls.cancel(handle.call_id, "call.cancel")
        outcome = await handle.outcome
        assert outcome.error.kind == "cancelled"
        assert tool(session, "now").released == 1 and session.lane.depth == 0
        after = calls.submit(session, "echo", {"text": "next"}, requester=ME)  # serial: needs an empty lane
        assert (await asyncio.wait_for(after.outcome, 5)).result == {"text": "next"}
        assert_once_each(hub, [handle.call_id, after.call_id])

    run(main())


def test_a_call_that_can_finish_at_once_keeps_its_place_behind_a_busy_lane():
    """`now` arrives before `echo` while `hold` holds the lane: `now` runs first, though its first
    step (a callback) hands over to a task and `echo` had a task from the start."""
    async def main() -> None:
        hub, calls, session = make_now()
        first = calls.submit(session, "hold", {}, requester=ME)
        await until(lambda: tool(session, "hold").ran)
        now = calls.submit(session, "now", {"text": "later"}, requester=ME)  # run_now says not now: run()
        echo = calls.submit(session, "echo", {"text": "e"}, requester=ME)
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        tool(session, "hold").gate.set()
        for handle in (first, now, echo):
            assert (await asyncio.wait_for(handle.outcome, 5)).ok
        done = [e.call_id for _, e in hub.sent if isinstance(e, p.CallCompleted)]
        assert done == [first.call_id, now.call_id, echo.call_id]
        assert session.lane.depth == 0
        assert_once_each(hub, [first.call_id, now.call_id, echo.call_id])

    run(main())


class _SlowCheck(_Tool):
    """Its arguments' check blocks (a JSON Schema over a large argument) until `checking` is set."""

    name = "slow_check"
    description = ("Test tool slow_check for the calls registry.\nUse for registry unit tests; probe tools for daemon tests.\n"
                   "Precondition: only in test daemons.")
    decode_blocks = True

    def __init__(self) -> None:
        super().__init__()
        self.checking = threading.Event()
        self.threads: list[str] = []

    def decode(self, arguments: Any) -> Any:
        self.threads.append(threading.current_thread().name)
        assert self.checking.wait(10), "the test never let the check finish"
        return super().decode(arguments)


def slow_check_then_echo() -> tuple[FakeHub, CallRegistry, Session, _SlowCheck, Any, Any]:
    """A session with a call of slow_check (its check held) submitted, then one of echo."""
    hub, calls, session = make()
    slow = _SlowCheck()
    session.registry.register(slow, enforce_lint=False)
    first = calls.submit(session, "slow_check", {"text": "big"}, requester=ME)
    echo = calls.submit(session, "echo", {"text": "e"}, requester=ME)
    return hub, calls, session, slow, first, echo


def test_a_call_whose_check_blocks_keeps_its_lane_place_and_checks_off_the_loop():
    """`slow_check` arrives before `echo`: `echo` runs only after it, though its decode took the
    loop no time; meanwhile the loop goes on (the check is on a worker thread)."""
    async def main() -> None:
        hub, calls, session, slow, first, echo = slow_check_then_echo()
        while not slow.threads:  # the loop goes on while the check starts and runs: it is not on the loop
            await asyncio.sleep(0.001)  # (20 turns of sleep(0) were not always enough for the thread to start)
        assert slow.threads[0].startswith("scvd-check")
        assert not tool(session, "echo").ran and not first.outcome.done()
        slow.checking.set()
        for handle in (first, echo):
            assert (await asyncio.wait_for(handle.outcome, 5)).ok
        done = [e.call_id for _, e in hub.sent if isinstance(e, p.CallCompleted)]
        assert done == [first.call_id, echo.call_id]
        assert session.lane.depth == 0
        assert_once_each(hub, [first.call_id, echo.call_id])

    run(main())


def test_a_call_cancelled_during_its_blocking_check_completes_once_and_frees_its_lane_place():
    async def main() -> None:
        hub, calls, session, slow, first, echo = slow_check_then_echo()
        await until(lambda: slow.threads)
        calls.cancel(first.call_id, "the client gave up")
        outcome = await asyncio.wait_for(first.outcome, 5)
        assert not outcome.ok and outcome.error.kind == "cancelled"
        assert "the client gave up" in outcome.error.message
        assert (await asyncio.wait_for(echo.outcome, 5)).ok  # the lane went on without waiting for the check
        slow.checking.set()
        assert not slow.ran and session.lane.depth == 0
        assert_once_each(hub, [first.call_id, echo.call_id])

    run(main())
