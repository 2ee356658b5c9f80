"""The calls registry: the one owner of a call's life, for socket clients and in-daemon callers alike.

Nothing here knows a tool by name: tools are reached only through the contract
(`decode`, `plan`, `run`, `flags`, `dispatch_timeout`), and the tool is looked
up once, when the call is submitted.

The API (the server and the chat loop use the same):

    calls = CallRegistry(hub)
    handle = calls.submit(session, "read", {"path": "a"}, requester=decider,
                          call_id=None, timeout_seconds=None, turn=None)
    handle.call_id, handle.background
    ok, result, error = await handle.outcome   # error: ToolErrorInfo | None
    calls.cancel(handle.call_id, "the turn was interrupted")

`submit()` raises only for a chosen `call_id` already in use (`InvalidRequest`; a
generated one skips the ids in the table), for a session that already holds
`server.max_calls_per_session` calls not completed, or a connection (across its
sessions) `server.max_calls_per_connection`, and for a call past the bytes
its connection's calls or all calls may hold (`LimitExceeded`, call_budget.py). Every
other problem (stopping, an unknown tool, a bad timeout, undecodable arguments)
becomes the call's outcome. `cancel()` raises `CallNotFound` for a call that
is not in the table (never was, or already completed).

Rules of a call's life:
- One table (`CallRegistry.table`) holds every call from submit to completion.
- Order: refusal checks and decoding -> the session's lane -> `plan()` ->
  `before_gate()` (a tool's last refusal, e.g. a secret not set) -> for a
  sandboxed call the policy would run unasked, the sandbox's look at the
  workspace's git metadata (`Sandbox.look`, on a worker thread: one it cannot
  keep read-only makes the call ask, `call.unguarded`) -> the
  approval gate -> `call.started` (only if the call waited) -> `run()` under
  the dispatch timeout -> completion. A tool whose `decode_blocks` (a JSON
  Schema check) joins its lane first, so it keeps its place in arrival order,
  and decodes on a worker thread. A plan's `release` (what `plan()` holds
  for `run()`, e.g. an fd) is called once, however the call ends after `plan()`.
- `_complete()` is the only place that sends `call.completed`, resolves the
  handle's outcome and writes the completion audit line: exactly once per call,
  on every path. `write_audit()` is the daemon's only writer of audit lines
  (the gate's decisions through `record_decision()`, and the server's other
  records), with `_record()` for a call's own two (proposal, completion: Structs,
  audit.Record, cheaper than a dict for every call).
- A call's first step runs after `submit()` returns, so the server's
  `call.accepted` always goes out before any event of the call: on a later
  loop turn, or, for a caller that passes `defer` (the server), when it calls
  `start_due()` right after queueing `call.accepted`.
- A running call has one timer (`loop.call_at`): it sends `call.progress`
  every `tools.progress_interval_seconds` and enforces the dispatch timeout.
  A tool may report progress itself through `ctx.progress(message)`: a
  `call.progress` with that message, which stands in for the timer's next one
  (not for the log's `running` line: that keeps its interval).
  A call that finishes before either costs one timer, cancelled at completion,
  and no task besides its own. While it waits for a person, or in its lane behind
  the session's earlier calls, the same `call.timer` sends `call.progress` saying
  so (`waiting for approval <id>`, QUEUED).
- A tool that can often finish without waiting (`Tool.run_now`, e.g. `read` of a
  small local file) has its call's first step run in a callback, not a task: when
  the lane admits it at once, the policy runs it unasked and `run_now()` answers,
  it completes there with no task and no timer. At the first thing that waits
  (the lane, an approval, a denial, `run()`), a task goes on from there. A call
  that has to wait for its lane joins it in that first step, so it keeps its
  place ahead of the calls that arrived after it.
- Closing sessions (`cancel_sessions`, a connection's all at once) cancels their calls at
  once, their approval requests too, and wakes their tasks CANCELS_PER_TURN a loop turn,
  in arrival order: a task that wakes before its turn (the call ahead of it in its lane
  ended, or its request was cancelled) finds its call cancelled and goes no further.
- A `session` grant is judged again for each call of its session waiting at the
  gate (`asking`), as a new call would be; those it now runs are approved with it.
- Events (`call.started`, `call.progress`, `call.completed`) go to the session's
  owner through the hub and carry the call's `turn`, when it has one.
- Books after answers: while the server holds them (`hold_books`, a batch of frames whose
  answers leave in one write), a completion's audit record and the status wait for that write.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import logging
import os
import time
from typing import TYPE_CHECKING, Iterable, NamedTuple, Protocol

import msgspec

from . import errors, tool_names
from .audit import Completion, Proposal, Record
from .always_ask import always_ask_reason, git_dir_reason, places_reason
from .approvals import GIT_LINK_ASKS, Approval, ApprovalGate, Decider, Verdict, exposes_host, git_link, policy_verdict
from .call_budget import FLOOR, CallBudget, until_calls_end
from .own_places import Place
from .protocol import CallCompleted, CallProgress, CallStarted, Frame, ToolErrorInfo
from .sessions import Lane, Owner, Session, Ticket
from .text import excerpt
from .tools.contract import NOT_NOW, CallContext, Plan, Tool, ToolRisk, check_timeout
from .workers import run_check

if TYPE_CHECKING:
    from .paths import Paths
    from .sandbox import Sandbox

log = logging.getLogger("scvd.calls")

# of a tool's progress message (ctx.progress): a status line, and an MCP server's is its own text,
# of any size; cut here, so that every tool's fits in a frame and a client shows a line
PROGRESS_CHARS = 2000
QUEUED = "waiting for this session's earlier calls to end"  # call.progress of a call its lane holds back
# of the calls of closed sessions, the tasks cancelled in one loop turn: a closed connection's 16,384
# calls, all cancelled at once, ran in the next turn, and other clients waited a second (bench/connection_close.py)
CANCELS_PER_TURN = 256
# an Enum class's members read through EnumType.__getattr__ on 3.11 (about 1k instructions each): once here
_RUN, _ASK, _DENY, _READ_ONLY = Verdict.RUN, Verdict.ASK, Verdict.DENY, ToolRisk.READ_ONLY


class AuditSink(Protocol):
    """Where audit lines go (scvd.audit.AuditLog)."""

    def add(self, event: str, fields: dict[str, object]) -> None:
        """One record; `fields` is the caller's dict for it alone."""

    def add_record(self, record: Record) -> None:
        """One record of a call (its proposal, its completion), made for it alone."""


class Hub(Protocol):
    """What the registry needs from the daemon around it."""

    gate: ApprovalGate
    paths: Paths
    own: tuple[Place, ...]  # scvd's own places (own_places), from paths, the config file it reads and the tools
    host: frozenset[Place]  # where files run later outside any sandbox (host_places.places())
    sandbox: Sandbox | None
    audit: AuditSink | None

    def send_event(self, owner: Owner, event: Frame) -> None:
        """Push an event to a session's owner (the connection stamps `seq`)."""

    def calls_changed(self) -> None:
        """The number of calls in the table changed."""

    def not_loaded(self, name: str, registry: Any) -> str | None:
        """Why no tool `name` is in `registry` (a session's), when one of that name failed to load (else None)."""


class Outcome(NamedTuple):
    """How a call ended: `ok` with a JSON-ready result, or an error."""

    ok: bool
    result: object
    error: ToolErrorInfo | None


class CallHandle(NamedTuple):  # a NamedTuple: made per call, and cheaper than a frozen dataclass
    """What `submit()` returns: the call's id, and its outcome to await."""

    call_id: str
    background: bool
    call: Call

    @property
    def outcome(self) -> asyncio.Future[Outcome]:
        return self.call.ending()


# a NamedTuple's __new__ is a Python function: a fast call's Outcome and CallHandle are made as the
# tuples it would make, without its frame
_new_tuple = tuple.__new__


class _Begun(NamedTuple):
    """What a call's first step without a task (`_begin`) hands to the task that goes on with it."""

    tool: Tool
    args: object
    ticket: Ticket | None = None
    ctx: CallContext | None = None
    plan: Plan | None = None
    judged: tuple[Verdict, str | None] | None = None


class Call(msgspec.Struct, eq=False):
    """One call from submit to completion: the registry's only record of it (a Struct: made per
    call, in a quarter of a dataclass's time)."""

    call_id: str
    session: Session
    tool_name: str
    tool: Tool | None  # None: no such tool (refused on the first step)
    arguments: object
    requester: Decider
    timeout_override: float | None
    turn: str | None
    # made at the first ending(): a socket client's call is answered by its frames, never awaited
    outcome: asyncio.Future[Outcome] | None = None
    ended: Outcome | None = None  # set at completion
    task: asyncio.Task[None] | None = None
    cost: int = 0  # what it holds of its owner's CallBudget until it completes
    submitted: float = msgspec.field(default_factory=time.monotonic)
    begun: bool = False  # the task's first step ran
    cancel_reason: str | None = None
    timer: asyncio.TimerHandle | None = None
    timeout: float | None = None  # the dispatch timeout, once known
    shown_timeout: float | None = None  # what progress shows: the tool's own deadline, else that
    started_at: float = 0.0  # loop time when run() began
    next_progress: float = 0.0
    # the log's next `running` line once the tool reports its own progress (its frames stand in for the
    # timer's, not for the log's line); None: the line goes with the timer's frame
    next_log: float | None = None
    timed_out: bool = False
    done: bool = False
    # why the sandbox cannot keep the workspace's git metadata read-only (Sandbox.look): it asks instead
    unguarded: str | None = None
    asked: str | None = None  # the approval it waits on at the gate: a cancel takes it back

    def ending(self) -> asyncio.Future[Outcome]:
        """The call's outcome to await (resolved at completion)."""
        outcome = self.outcome
        if outcome is None:
            outcome = self.outcome = asyncio.get_running_loop().create_future()
            if self.ended is not None:
                outcome.set_result(self.ended)
        return outcome


class CallRegistry:
    """Every call of the daemon: submit, cancel, stop; one table, one completion."""

    def __init__(self, hub: Hub) -> None:
        self.hub = hub
        self.table: dict[str, Call] = {}
        self.asking: dict[str, tuple[Call, Tool, Plan]] = {}  # by approval id: the calls waiting at the gate
        self.stopping = False
        self.due: list[Call] = []  # submitted with `defer`: started by the caller's start_due()
        # while held (hold_books): the audit records of calls that run now, and whether the calls
        # changed, kept for books_after_answers(); None: done at once
        self._books: list[Record] | None = None
        self._changed = False
        self.unwoken: collections.deque[Call] = collections.deque()  # cancelled, tasks not yet: cancel_sessions()
        self.max_per_session = 256  # server.max_calls_per_session: the calls one session holds at once
        self.max_per_connection = 1024  # server.max_calls_per_connection: ... one owner, across its sessions
        self.budget = CallBudget()  # server.max_call_bytes(_per_connection): what calls hold, by connection
        self._ids = itertools.count(1)
        # one random tag per daemon keeps ids unique across restarts (the audit log outlives a run);
        # a getrandom per call cost more than the rest of the id
        self._tag = os.urandom(4).hex()

    def __len__(self) -> int:
        return len(self.table)

    def running(self) -> int:
        """The calls not waiting for a person's decision (one queued behind its session's earlier calls
        counts: it runs next): status and STATUS= show those apart from the pending approvals."""
        return len(self.table) - sum(1 for approval_id in self.asking if approval_id in self.hub.gate.pending)

    def get(self, call_id: str) -> Call | None:
        return self.table.get(call_id)

    # --- the API ----------------------------------------------------------------

    def submit(self, session: Session, tool_name: str, arguments: object, *, requester: Decider,
               call_id: str | None = None, timeout_seconds: float | None = None,
               turn: str | None = None, defer: bool = False, cost: int = FLOOR) -> CallHandle:
        """Accept a call; its outcome comes through the handle and `call.completed`.

        With `defer`, the call starts when the caller calls `start_due()`, once its answer
        (`call.accepted`) is queued: a call that may finish without waiting takes its first step
        there, in the same loop turn, so a fast call costs the daemon one turn, not two. `cost`: what
        it holds of the CallBudget (call_budget.cost() of the frame that carried it)."""
        if call_id is None:
            call_id = self._new_id()
        elif call_id in self.table:
            raise errors.InvalidRequest(f"call_id {call_id!r} is already in use; choose another")
        if session.held >= self.max_per_session:  # before the call holds anything: its arguments go with the frame
            raise until_calls_end(f"this session already holds {session.held} calls that have not completed "
                                  "(server.max_calls_per_session)")
        owner = session.owner
        if owner.calls_held >= self.max_per_connection:  # an int on the owner, as call_bytes: a read's path
            raise until_calls_end(f"this connection already holds {owner.calls_held} calls that have not "
                                  "completed, across its sessions (server.max_calls_per_connection)")
        # the last refusal (nothing after it fails): CallBudget's take, here, as is its give in _complete,
        # with what the owner holds an int on it (a dict by owner and two calls cost a read 3,500 instructions)
        budget = self.budget
        mine = owner.call_bytes + cost
        if mine > budget.per_owner or budget.held + cost > budget.total:
            raise budget.refusal(owner.call_bytes, cost)
        owner.call_bytes = mine
        budget.held += cost
        tool = session.registry.get(tool_name)
        call = Call(call_id=call_id, session=session, tool_name=tool_name, tool=tool,
                    arguments=arguments, requester=requester, timeout_override=timeout_seconds,
                    turn=turn, cost=cost)
        session.call_count += 1
        session.held += 1
        owner.calls_held += 1
        self.table[call_id] = call
        if defer:  # no loop asked for (a getpid(2) each): start_due() starts it
            self.due.append(call)
        elif _steps_now(tool):  # a task only once something waits
            asyncio.get_running_loop().call_soon(self._begin, call)
        else:
            call.task = asyncio.get_running_loop().create_task(self._life(call))
        if defer or self._books is not None:  # the status once for the batch: start_due() or the books
            self._changed = True
        else:
            self.hub.calls_changed()
        background = bool(tool is not None and tool.flags.background)
        return _new_tuple(CallHandle, (call_id, background, call))

    def start_due(self) -> bool:
        """The first steps of the calls submitted with `defer`, in the order they came; True when
        one of them goes on in a task instead (its first step comes on the next loop turn)."""
        due, self.due = self.due, []
        tasked = False
        for call in due:
            if not _steps_now(call.tool):
                call.task = asyncio.get_running_loop().create_task(self._life(call))
                tasked = True
            elif tasked:  # after the task's first step, which takes its lane place: arrival order
                asyncio.get_running_loop().call_soon(self._begin, call)
            else:
                self._begin(call)
        if self._changed and self._books is None:  # else books_after_answers() tells it
            self._changed = False
            self.hub.calls_changed()
        return tasked

    def hold_books(self) -> None:
        """Until books_after_answers(): a call the policy runs keeps its proposal's audit record for then,
        and its completion's, and the status; its `call.completed` goes out at once. The server holds
        them while it handles a batch of frames whose answers it writes together at the batch's end: the
        client is woken first, and reads on another CPU while scvd keeps its books. A call that asks is
        audited at once (the gate's records come after its proposal), and a denial too (written before
        its answer, as the audit log promises)."""
        if self._books is None:  # one not given back (a batch that raised): its records still come, later
            self._books = []

    def books_after_answers(self) -> None:
        """What hold_books() kept back: the records, in order, and the status once."""
        books, self._books = self._books, None
        changed, self._changed = self._changed, False
        if books:
            for record in books:
                self._record(record)
        if changed:
            self.hub.calls_changed()

    def _new_id(self) -> str:
        """A generated call id not in the table (a client may have chosen the next one)."""
        while (call_id := f"c{next(self._ids)}-{self._tag}") in self.table:
            pass
        return call_id

    def cancel(self, call_id: str, reason: str) -> None:
        """Cancel a queued, waiting or running call; it completes as `cancelled`."""
        call = self.table.get(call_id)
        if call is None:
            raise errors.CallNotFound(f"no pending or running call {call_id!r}; it may have completed")
        self._cancel(call, reason)

    def cancel_session(self, session: Session, reason: str) -> None:
        self.cancel_sessions((session,), reason)

    def cancel_sessions(self, sessions: Iterable[Session], reason: str) -> None:
        """Cancel the calls of these sessions (a closed connection's: one walk of the table for all). Each
        is cancelled now, so none goes on (its approval request goes too), and complete as such; their
        tasks are woken CANCELS_PER_TURN a loop turn, in the order the calls came, so that other
        clients' frames are handled between (a call woken meanwhile, as the one before it in its lane
        ended, finds it was cancelled)."""
        closed = set(sessions)
        unwoken = self.unwoken
        waking = bool(unwoken)
        unwoken.extend(c for c in list(self.table.values()) if c.session in closed and self._mark(c, reason))
        if unwoken and not waking:
            asyncio.get_running_loop().call_soon(self._wake_cancelled)

    def _wake_cancelled(self, most: int = CANCELS_PER_TURN) -> None:
        """Cancel the tasks of up to `most` calls cancel_sessions() cancelled; the rest on the next loop turn."""
        unwoken = self.unwoken
        for _ in range(min(most, len(unwoken))):
            call = unwoken.popleft()
            if call.begun and call.task is not None:  # not begun: its first step sees cancel_reason
                call.task.cancel(call.cancel_reason)
        if unwoken:
            asyncio.get_running_loop().call_soon(self._wake_cancelled)

    async def stop(self, grace: float) -> int:
        """Refuse new calls, cancel every call, wait up to `grace`; return how many did not stop."""
        self.stopping = True
        calls = list(self.table.values())
        for call in calls:
            self._cancel(call, errors.STOPPING)
        self._wake_cancelled(len(self.unwoken))  # those of closed sessions too: all are awaited below
        self.start_due()  # they end as cancelled
        if any(c.task is None for c in calls):
            await asyncio.sleep(0)  # first steps not taken yet (_begin) take it now: they end as cancelled
        tasks = [c.task for c in calls if c.task is not None]
        if not tasks:
            return 0
        _, stuck = await asyncio.wait(tasks, timeout=grace)
        return len(stuck)

    def record_cut_off(self) -> None:
        """The completion records of every call still in the table, as scvd exits at once (no task will
        complete them): `cancelled`, so the audit log holds no proposal without its end."""
        for call in list(self.table.values()):
            if not call.done:
                call.done = True
                self._record(Completion(tool=call.tool_name, session=call.session.id, call_id=call.call_id,
                                        outcome="error", error_kind=errors.Cancelled.kind,
                                        duration_s=round(time.monotonic() - call.submitted, 3)))

    def record_decision(self, approval: Approval) -> None:
        """The audit line of a gate decision (approved, denied, expired, cancelled, dropped)."""
        d = approval.decided_by
        info = approval.info
        self.write_audit(
            "decision", approval_id=approval.id, call_id=info.call_id, tool=info.tool,
            session=info.session, risk=info.risk, decision=approval.state.value, scope=approval.scope,
            reason=approval.reason, decided_by={"pid": d.pid, "uid": d.uid, "client": d.client} if d else None)

    # --- a call's life ------------------------------------------------------------

    def _cancel(self, call: Call, reason: str) -> None:
        if self._mark(call, reason) and call.begun and call.task is not None:
            call.task.cancel(reason)
        # not begun: the first step sees cancel_reason and completes the call as cancelled

    def _mark(self, call: Call, reason: str) -> bool:
        """Cancel `call` but for its task (woken by the caller): False if it already ended or was cancelled."""
        if call.done or call.cancel_reason is not None or call.timed_out:
            return False
        call.cancel_reason = reason
        # its request goes now, not when the task resumes: a decision read after this cancel (the
        # same batch of frames) finds it gone, rather than approve (and grant) for a cancelled call
        if call.asked is not None:
            self.hub.gate.cancel(call.asked, _cancelled(call))
        return True

    def _begin(self, call: Call) -> None:
        """The first step of a call whose tool may finish without waiting (`Tool.run_now`), in a
        callback rather than a task: admitted, in the lane, planned, judged and run, then completed.
        At the first thing that has to wait (the lane, an approval, a denial, `run()`), the call
        goes on in a task (`_life`) from there, with what this step made."""
        ticket = plan = None
        try:
            tool, args = self._admit(call)
            lane, flags = call.session.lane, tool.flags
            if not flags.background:  # a background call leaves the lane as it starts: wait() does that
                ticket = lane.try_enter(concurrent=flags.concurrent)
            if ticket is None:  # its place in arrival order is taken now, in this step; the task waits
                ticket = _join(lane, tool)
                begun = _Begun(tool, args, ticket)
                ticket = None  # the task's now
                return self._go_on(call, begun)
            ctx = self._context(call)
            plan = tool.plan(args, ctx)
            judged = self._judge(call, tool, plan)
            runs = judged[0] is _RUN and not self._guarded(plan, ctx)  # else its git metadata is looked at first
            result = tool.run_now(args, plan, ctx) if runs else NOT_NOW
            if result is NOT_NOW:
                begun = _Begun(tool, args, ticket, ctx, plan, judged)
                ticket = plan = None  # the task's now
                return self._go_on(call, begun)
            outcome = _new_tuple(Outcome, (True, result, None))  # JSON-ready as it is (Tool.run_now)
        except Exception as exc:
            outcome = self._failed(call, exc)
        finally:
            if plan is not None and plan.release is not None:
                plan.release()
            if ticket is not None:
                call.session.lane.leave(ticket)
        self._complete(call, outcome)

    def _go_on(self, call: Call, begun: _Begun) -> None:
        call.task = asyncio.get_running_loop().create_task(self._life(call, begun))

    async def _life(self, call: Call, begun: _Begun | None = None) -> None:
        call.begun = True
        ticket = plan = None
        try:
            lane = call.session.lane
            if begun is None:
                tool = self._admitted(call)
                if tool.decode_blocks:  # its lane place first: calls sent later must not pass a slow check
                    ticket = _join(lane, tool)
                    try:
                        args = await run_check(tool.decode, call.arguments)
                    except errors.ToolError:
                        if not ticket.started:  # refused in its place: once the calls ahead are done
                            await lane.wait(ticket)
                        raise
                    self._still_wanted(call)  # cancelled (or scvd stopping) meanwhile
                else:
                    args = tool.decode(call.arguments)
                judged = ctx = None
            else:  # from _begin(), which joined or entered the lane, maybe planned and judged: ours to free
                tool, args, ticket, ctx, plan, judged = begun
                self._still_wanted(call)  # cancelled (or scvd stopping) since that step
            if ticket is None:
                ticket = _join(lane, tool)
            if not ticket.started:
                self._waiting(call, QUEUED)
                try:
                    await lane.wait(ticket)
                finally:
                    call.timer.cancel()  # type: ignore[union-attr]  # _waiting's
                self._still_wanted(call)  # its session closed: woken by the call before it, not yet by its cancel
            if ctx is None:
                ctx = self._context(call)
            if plan is None:
                plan = tool.plan(args, ctx)
            # a call the policy refuses is told that, not this; unaudited: _gate judges (and audits) it after
            if tool.checks_before_gate and (judged or self._verdict(call, tool, plan))[0] is not Verdict.DENY:
                await tool.before_gate(args, plan, ctx)
                self._still_wanted(call)  # cancelled (or scvd stopping) while it checked
                judged = None  # judged now: a grant may have come meanwhile
            if self._guarded(plan, ctx):
                judged = await self._look(call, tool, plan, ctx, judged)
            asked, approved = await self._gate(call, tool, plan, judged)
            result = await self._run(call, tool, args, plan, ctx, waited=ticket.waited or asked, approved=approved)
            outcome = Outcome(True, _plain(tool, result), None)
        except asyncio.CancelledError:
            outcome = failure(self._stopped_why(call))
        except Exception as exc:
            outcome = self._failed(call, exc)
        finally:
            if plan is not None and plan.release is not None:  # denied, cancelled or done: freed
                plan.release()
            if call.timer is not None:
                call.timer.cancel()
            if ticket is not None:
                call.session.lane.leave(ticket)
        self._complete(call, outcome)

    def _failed(self, call: Call, exc: Exception) -> Outcome:
        """The outcome of a call that raised `exc` (anything but a cancellation)."""
        if isinstance(exc, errors.ToolError):
            return failure(exc)
        if isinstance(exc, RecursionError):  # the peer's arguments nest deeper than a checker recurses
            log.warning("call %s of %s: its arguments nest too deeply", call.call_id, call.tool_name)
            return failure(errors.InvalidArguments(
                f"{call.tool_name}: the arguments nest arrays or objects too deeply to check; send flatter JSON"))
        # a bug in a tool must not kill the daemon or lose the answer
        log.error("tool %s crashed on call %s", call.tool_name, call.call_id, exc_info=exc)
        return failure(errors.Failed(f"{call.tool_name} failed unexpectedly: {type(exc).__name__}"))

    def _admit(self, call: Call) -> tuple[Tool, object]:
        """The refusals before a call queues, then its decoded arguments."""
        tool = self._admitted(call)
        return tool, tool.decode(call.arguments)

    def _admitted(self, call: Call) -> Tool:
        """The refusals before a call's arguments are decoded; its tool."""
        self._still_wanted(call)
        session, tool = call.session, call.tool
        if tool is None:
            current = getattr(self.hub, "registry", None)
            if current is not None and current is not session.registry and current.get(call.tool_name):
                # a session keeps the tools of its opening: a reload since added this one
                raise errors.UnknownTool(
                    f"no tool named {call.tool_name!r} in this session: it came with a reload after the session "
                    "opened, and a session keeps the tools it opened with; open a new session to use it")
            why = self.hub.not_loaded(call.tool_name, session.registry)
            if why is not None:
                raise errors.UnknownTool.not_loaded(call.tool_name, why)
            names = (t.name for t in session.registry.visible())  # system tools stay unlisted
            raise errors.UnknownTool(tool_names.unknown(call.tool_name, names))
        if call.timeout_override is not None:  # most calls send none: no call, no config lookups
            check_timeout(call.timeout_override, session.config.tools.max_timeout_seconds, "call timeout_seconds")
        return tool

    def _still_wanted(self, call: Call) -> None:
        if call.cancel_reason is not None:  # cancelled before its first step
            raise _cancelled_error(call)
        if self.stopping:
            raise errors.Cancelled(f"{errors.STOPPING}; no new calls are accepted", reason=errors.STOP_REASON)

    async def _run(self, call: Call, tool: Tool, args: object, plan: Plan, ctx: CallContext, *,
                   waited: bool, approved: bool) -> object:
        ctx.approved = approved
        override = call.timeout_override
        if override is not None and plan.timeout is not None and plan.timeout > override:
            plan.timeout = override  # a tool that did not take ctx.timeout: its own deadline still ends it
        timeout = tool.dispatch_timeout(plan, call.session.config)
        if override is not None and plan.timeout is None:  # else its deadline (plus grace) is within it
            timeout = override if timeout is None else min(timeout, override)
        if waited:  # a call that started at once is running since call.accepted
            self.hub.send_event(call.session.owner, CallStarted(
                seq=0, call_id=call.call_id, session=call.session.id, tool=tool.name, turn=call.turn))
        # progress shows the timeout the person set (bash's 120 s, a tool.json's), not it plus the grace
        call.shown_timeout = plan.timeout if plan.timeout is not None else timeout
        self._arm(call, timeout)
        ctx.progress = lambda message: self._report(call, message)
        return await tool.run(args, plan, ctx)

    @staticmethod
    def _guarded(plan: Plan, ctx: CallContext) -> bool:
        """Whether the plan runs in the sandbox, which keeps the workspace's git metadata read-only
        in a call nobody approved (the call's own sandbox, as its run wraps with: a reload may
        have replaced the daemon's since)."""
        return plan.sandboxed and ctx.sandbox is not None and ctx.sandbox.active

    async def _look(self, call: Call, tool: Tool, plan: Plan, ctx: CallContext,
                    judged: tuple[Verdict, str | None] | None) -> tuple[Verdict, str | None] | None:
        """For a sandboxed call the policy would run unasked, the git metadata its sandbox keeps
        read-only, found off the loop before the gate (ctx.git); where it cannot all be kept so,
        the call asks instead (call.unguarded), and is judged again. Returns the verdict, judged
        once (a proposal audited once) unless it must be judged again (None)."""
        sandbox = ctx.sandbox
        assert sandbox is not None  # _guarded(plan, ctx)
        verdict = judged or self._verdict(call, tool, plan)
        if verdict[0] is not Verdict.RUN:
            return judged or self._judge(call, tool, plan, verdict)  # asked: a call a person approves needs no guard
        if git_link(ctx.workspace):  # under a session grant too, not only where the policy decides
            call.unguarded = GIT_LINK_ASKS.format(git=os.path.join(ctx.workspace, ".git"))
            return None
        try:
            ctx.git = await asyncio.to_thread(sandbox.look, ctx.workspace, plan.network)
        except errors.LimitExceeded as exc:
            call.unguarded = f"{exc.message}: so every call there asks; {exc.hint}"
        self._still_wanted(call)  # cancelled (or scvd stopping) while it looked
        if call.unguarded is not None:
            return None  # judged again: it asks now
        return judged or self._judge(call, tool, plan, verdict)

    def _judge(self, call: Call, tool: Tool, plan: Plan,
               found: tuple[Verdict, str | None] | None = None) -> tuple[Verdict, str | None]:
        """The policy's verdict on a planned call and the always_ask reason (`found`: _verdict()'s,
        worked out just before); audited as its proposal."""
        verdict, always = found or self._verdict(call, tool, plan)
        record = Proposal(tool=call.tool_name, session=call.session.id, call_id=call.call_id,
                          risk=plan.risk._value_, policy=call.session.config.approvals.policy,
                          decision=verdict._value_)
        books = self._books
        if books is not None and verdict is _RUN:  # held too: nothing else is said of it before they are kept
            books.append(record)
        else:  # one that asks (the gate's records follow it) or is denied (written before its answer)
            self._record(record)
        return verdict, always

    def _verdict(self, call: Call, tool: Tool, plan: Plan) -> tuple[Verdict, str | None]:
        """The policy's verdict on a planned call now, with the session's grants, and the always_ask reason."""
        session = call.session
        cfg = session.config.approvals
        risk = plan.risk._value_  # the documented sunder name: .value is two Python calls on 3.11
        sandbox = self.hub.sandbox
        workspace = session.where
        # only calls that are not read-only: a plain read of .git is harmless; a secret-like one (a git
        # config holding a credential too) is filesystem risk, so it is judged here
        always = None
        if plan.targets and plan.risk is not _READ_ONLY:
            always = (always_ask_reason(plan.targets, cfg.always_ask, workspace, folders=plan.folders)
                      or places_reason(workspace, plan.targets, self.hub.own, self.hub.host)
                      or git_dir_reason(workspace, plan.targets)
                      or plan.always_ask)  # what the tool found a target holds: no rule on paths sees it
        verdict = policy_verdict(
            cfg.policy, plan, always_allow=tool.flags.always_allow,
            granted=session.granted(tool.name, risk, plan.sandboxed),
            # looked at only where it decides: a read does without the stat and the places' walk
            sandbox_active=(cfg.policy == "sandbox-aware" and plan.risk is not _READ_ONLY
                            and bool(sandbox and sandbox.active)
                            and not exposes_host(workspace, self.hub.own, host=self.hub.host)
                            and not sandbox.reaches_hidden(workspace)),
            always_asks=always is not None)
        if verdict is _RUN and call.unguarded is not None and cfg.policy != "never":
            return _ASK, call.unguarded  # whatever grant: each such call, approved once
        return verdict, always

    async def _gate(self, call: Call, tool: Tool, plan: Plan,
                    judged: tuple[Verdict, str | None] | None = None) -> tuple[bool, bool]:
        """Run, ask or deny under the policy (judged now unless `judged`): whether it waited for a
        decision, and whether a person approved this very call (not another's grant covering it)."""
        verdict, always = judged or self._judge(call, tool, plan)
        session = call.session
        risk = plan.risk._value_
        if verdict is _RUN:
            return False, False
        if verdict is _DENY:
            raise errors.Denied(
                f"approvals.policy is 'never': {risk} calls are refused without asking "
                "(change approvals.policy to on-risk to be asked)")
        revision = session.revision
        approval = self.hub.gate.request(
            session.owner, session=session.id, call_id=call.call_id, tool=tool.name, risk=risk,
            workspace=str(session.workspace), summary=plan.summary, details=plan.details,
            sandboxed=plan.sandboxed, always_ask=always, requester=call.requester.label())
        self.asking[approval.id] = (call, tool, plan)
        call.asked = approval.id
        self._waiting(call, f"waiting for approval {approval.id}")
        try:
            approved = await asyncio.shield(approval.future)
            if call.cancel_reason is not None:  # its session closed: its task's cancel comes in a later turn
                raise asyncio.CancelledError
        except asyncio.CancelledError:
            self.hub.gate.cancel(approval.id, _cancelled(call))
            if (approval.future.done() and approval.future.result()
                    and session.revoked_since(tool.name, revision) is None):
                self._grant(approval, session, tool.name, risk, plan.sandboxed)  # decided before the cancel came
            raise
        finally:
            del self.asking[approval.id]
            call.asked = None
            call.timer.cancel()  # type: ignore[union-attr]  # _waiting's; run() gets its own
        if not approved:
            raise errors.Denied(approval.ending())
        # approved, then revoked (a redefined MCP tool) before this task went on: the person saw another tool
        revoked = session.revoked_since(tool.name, revision)
        if revoked is not None:
            raise errors.Denied(f"{approval.ending()}, but {revoked}")
        self._grant(approval, session, tool.name, risk, plan.sandboxed)
        return True, approval.covered_by is None  # covered: it runs as a call under the grant would

    def _waiting(self, call: Call, message: str, since: float | None = None) -> None:
        """Every tools.progress_interval_seconds while a call waits (for a person, or behind its
        session's earlier calls; from `since`), a call.progress saying so: a client whose own timeout
        a progress notification resets (an MCP host) waits on with it."""
        loop = asyncio.get_running_loop()
        if since is None:
            since = loop.time()
        else:
            self._progress(call, loop.time() - since, message)
        call.timer = loop.call_later(call.session.config.tools.progress_interval_seconds,
                                     self._waiting, call, message, since)

    def _grant(self, approval: Approval, session: Session, tool: str, risk: str, sandboxed: bool) -> None:
        """An approval with scope session (as approval.resolved said): its like calls run unasked."""
        if approval.scope == "session":  # never for a request that always asks (recorded as once)
            session.grant(tool, risk, sandboxed)
            self.hub.gate.approve_covered(approval, self._covered)

    def held_while_asking(self) -> int:
        """The fds plans hold while their calls wait for a person (one per plan with a `release`): a
        read holds the file it showed the approver, up to approvals.max_pending of them."""
        return sum(1 for _, _, plan in self.asking.values() if plan.release is not None)

    def _covered(self, approval: Approval) -> bool:
        """Whether the call waiting on `approval` would run unasked now (a grant came since it asked)."""
        waiting = self.asking.get(approval.id)
        return waiting is not None and self._verdict(*waiting)[0] is Verdict.RUN

    def _stopped_why(self, call: Call) -> errors.ToolError:
        task = call.task
        if task is not None:
            task.uncancel()  # the cancel is answered here; nothing above this task waits on it
        if call.timed_out:
            fix = ("send the call with a larger timeout_seconds" if call.timeout == call.timeout_override
                   else call.tool.timeout_fix(call.session.config) if call.tool is not None else None)
            return errors.Timeout(
                f"{call.tool_name} ran past its dispatch timeout of {call.timeout:g} s and was stopped",
                hint=f"{fix}, or ask for less per call" if fix else "ask for less per call")
        return _cancelled_error(call)

    # --- the one timer of a running call ---------------------------------------------

    def _arm(self, call: Call, timeout: float | None) -> None:
        loop = asyncio.get_running_loop()
        call.timeout = timeout
        call.started_at = loop.time()
        call.next_progress = call.started_at + call.session.config.tools.progress_interval_seconds
        self._schedule(call, loop)

    def _schedule(self, call: Call, loop: asyncio.AbstractEventLoop) -> None:
        when = call.next_progress if call.next_log is None else min(call.next_progress, call.next_log)
        if call.timeout is not None:
            when = min(when, call.started_at + call.timeout)
        call.timer = loop.call_at(when, self._tick, call)

    def _tick(self, call: Call) -> None:
        if call.done:
            return
        loop = asyncio.get_running_loop()
        now = loop.time()
        elapsed = now - call.started_at
        if call.timeout is not None and elapsed >= call.timeout:
            if call.cancel_reason is None and call.task is not None:
                call.timed_out = True
                call.task.cancel("dispatch timeout")
            return
        interval = call.session.config.tools.progress_interval_seconds
        if call.next_log is not None and now >= call.next_log:
            self._log_running(call, elapsed)
            call.next_log += interval
        if now >= call.next_progress:
            self._progress(call, elapsed)
            call.next_progress += interval
        self._schedule(call, loop)

    def _progress(self, call: Call, elapsed: float, message: str | None = None) -> None:
        timeout = call.shown_timeout
        if message is None and call.next_log is None:
            self._log_running(call, elapsed)
        self.hub.send_event(call.session.owner, CallProgress(
            seq=0, call_id=call.call_id, elapsed_s=round(elapsed, 1), timeout_s=timeout, turn=call.turn,
            message=message))

    def _log_running(self, call: Call, elapsed: float) -> None:
        limit = f"{call.shown_timeout:.0f}s" if call.shown_timeout else "none"
        log.info("running name=%s call=%s elapsed=%.0fs/%s", call.tool_name, call.call_id, elapsed, limit)

    def _report(self, call: Call, message: str) -> None:
        """A tool's own progress (ctx.progress): sent now, and it stands in for the timer's next frame;
        the log's `running` line keeps its cadence (a server reporting every few seconds hid its call)."""
        if call.done:
            return
        if call.next_log is None:
            call.next_log = call.next_progress
        now = asyncio.get_running_loop().time()
        self._progress(call, now - call.started_at, excerpt(message, PROGRESS_CHARS)[0])
        call.next_progress = now + call.session.config.tools.progress_interval_seconds

    # --- completion and audit: the only places ----------------------------------------

    def _complete(self, call: Call, outcome: Outcome) -> None:
        if call.done:  # pragma: no cover - _life completes once; kept as the rule's guard
            return
        call.done = True
        self.table.pop(call.call_id, None)
        session = call.session
        session.held -= 1
        owner = session.owner
        owner.calls_held -= 1
        owner.call_bytes -= call.cost  # given back (see submit)
        self.budget.held -= call.cost
        error = outcome.error
        error_kind = error.kind if error else None
        record = Completion(tool=call.tool_name, session=session.id, call_id=call.call_id,
                            outcome="ok" if outcome.ok else "error", error_kind=error_kind,
                            duration_s=round(time.monotonic() - call.submitted, 3))
        books = self._books
        if books is None or error_kind == errors.Denied.kind:
            self._record(record)
        else:
            books.append(record)
        try:
            self.hub.send_event(owner, CallCompleted(
                seq=0, call_id=call.call_id, ok=outcome.ok, result=outcome.result, error=error, turn=call.turn))
        finally:  # whatever the send does, who waits on the call (a chat turn) hears of its end
            call.ended = outcome
            if call.outcome is not None and not call.outcome.done():
                call.outcome.set_result(outcome)
            if books is None:
                self.hub.calls_changed()
            else:
                self._changed = True

    def write_audit(self, event: str, **fields: object) -> None:
        """Append one audit line; a failed write is logged, never raised (a full disk must not stop calls)."""
        audit = self.hub.audit
        try:
            if audit is not None:
                audit.add(event, fields)
        except OSError as exc:  # a full disk must not stop calls; say so in the log
            log.error("audit log write failed: %s", exc)

    def _record(self, record: Record) -> None:
        """write_audit() of a call's own record (its proposal, its completion): a Struct, not a dict."""
        audit = self.hub.audit
        try:
            if audit is not None:
                audit.add_record(record)
        except OSError as exc:
            log.error("audit log write failed: %s", exc)

    def _context(self, call: Call) -> CallContext:
        session = call.session
        session.check_workspace()
        return CallContext(
            call_id=call.call_id, session_id=session.id, workspace=session.workspace, workspace_given=session.given,
            workspace_fd=session.workspace_fd, config=session.config, paths=self.hub.paths,
            sandbox=self.hub.sandbox, services=session.services, turn=call.turn, timeout=call.timeout_override)


def _steps_now(tool: Tool | None) -> bool:
    """Whether a call's first step runs in a callback (`_begin`), not a task: its tool may finish
    without waiting (`run_now`) and checks its arguments on the loop."""
    return tool is not None and tool.runs_now and not tool.decode_blocks


def _join(lane: Lane, tool: Tool) -> Ticket:
    """The call's place in its session's lane, in arrival order (Lane.join)."""
    return lane.join(concurrent=tool.flags.concurrent, background=tool.flags.background)


def failure(exc: errors.ToolError) -> Outcome:
    """A refusal or failure as a call's outcome (its kind, message, hint and reason)."""
    return Outcome(False, None, ToolErrorInfo(kind=exc.kind, message=exc.message, hint=exc.hint, reason=exc.reason))


def _cancelled_error(call: Call) -> errors.Cancelled:
    """How a cancelled call ends; one that stop() cancelled (its one source of STOPPING as a
    reason) says so on the wire too, so that a client need not read the words."""
    why = call.cancel_reason or "cancelled"
    return errors.Cancelled(f"call {call.call_id} was cancelled: {why}",
                            reason=errors.STOP_REASON if why == errors.STOPPING else None)


def _plain(tool: Tool, result: object) -> object:
    """The result as JSON-ready data, so that encoding call.completed cannot fail after the fact."""
    try:
        return msgspec.to_builtins(result)
    except (TypeError, ValueError) as exc:  # a tool bug: fail the call rather than never answer it
        log.error("tool %s returned a result that cannot be encoded: %s", tool.name, exc)
        raise errors.Failed(f"{tool.name} returned a result that cannot be encoded ({type(exc).__name__})") from None


def _cancelled(call: Call) -> str:
    """The reason a cancelled call's approval request went away."""
    return f"the call was cancelled: {call.cancel_reason or 'cancelled'}"
