"""The call pipeline: plan -> approval gate -> run, with exactly one `call.completed` per call.

Nothing here knows a tool by name: tools are reached only through the contract
(`decode`, `plan`, `run`, `flags`, `dispatch_timeout`). Arguments are decoded by
the server when the call arrives, so invalid input is refused before the call
even queues; everything else happens here, in the session's lane.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any, Protocol

import msgspec

from . import errors
from .approvals import ApprovalGate, Decider, Verdict, policy_verdict
from .protocol import CallCompleted, CallProgress, CallStarted, Frame, ToolErrorInfo
from .sessions import Session
from .tools.contract import CallContext, Plan, Tool

log = logging.getLogger("scvd.calls")


class Hub(Protocol):
    """What the pipeline needs from the server around it."""

    gate: ApprovalGate
    paths: Any
    sandbox: Any
    audit: Any

    def send_event(self, connection: Any, event: Frame) -> None: ...


@dataclass
class CallJob:
    """One accepted call."""

    session: Session
    call_id: str
    tool: Tool
    args: Any
    timeout_override: float | None
    requester: Decider
    turn: str | None = None


def refusal(session: Session, frame: Any, *, stopping: bool) -> errors.ToolError | None:
    """Why a `call` frame is refused before it queues, or None."""
    if stopping:
        return errors.Cancelled("scvd is stopping; no new calls are accepted")
    if session.registry.get(frame.tool) is None:
        known = ", ".join(session.registry.names()) or "none"
        return errors.UnknownTool(f"no tool named {frame.tool!r}; tools: {known}")
    ceiling = session.config.tools.max_timeout_seconds
    t = frame.timeout_seconds
    if t is not None and not 0 < t <= ceiling:
        return errors.InvalidArguments(
            f"call timeout_seconds {t:g} must be above 0 and at most {ceiling} (tools.max_timeout_seconds)")
    return None


async def run_call(hub: Hub, job: CallJob) -> None:
    """The body of a call's task. Sends exactly one call.completed, whatever happens."""
    started = time.monotonic()
    tool = job.tool
    ticket = None
    outcome: tuple[bool, Any, errors.ToolError | None]
    try:
        ticket = await job.session.lane.enter(
            concurrent=tool.flags.concurrent, background=tool.flags.background
        )
        result = _plain(tool, await _plan_gate_run(hub, job))
        outcome = (True, result, None)
    except asyncio.CancelledError:
        outcome = (False, None, errors.Cancelled(f"call {job.call_id} was cancelled"))
    except errors.ToolError as exc:
        outcome = (False, None, exc)
    except Exception as exc:  # a bug in a tool must not kill the daemon or lose the answer
        log.exception("tool %s crashed on call %s", tool.name, job.call_id)
        outcome = (False, None, errors.Failed(f"{tool.name} failed unexpectedly: {type(exc).__name__}"))
    finally:
        if ticket is not None:
            job.session.lane.leave(ticket)
    _complete(hub, job, outcome, time.monotonic() - started)


def _plain(tool: Tool, result: Any) -> Any:
    """The result as JSON-ready data, so that encoding call.completed cannot fail after the fact."""
    try:
        return msgspec.to_builtins(result)
    except (TypeError, ValueError) as exc:  # a tool bug: fail the call rather than never answer it
        log.error("tool %s returned a result that cannot be encoded: %s", tool.name, exc)
        raise errors.Failed(f"{tool.name} returned a result that cannot be encoded ({type(exc).__name__})") from None


async def _plan_gate_run(hub: Hub, job: CallJob) -> Any:
    ctx = _context(hub, job)
    plan = job.tool.plan(job.args, ctx)
    await _gate(hub, job, plan)
    timeout = job.tool.dispatch_timeout(plan, job.session.config)
    if job.timeout_override is not None:
        timeout = job.timeout_override if timeout is None else min(timeout, job.timeout_override)
    hub.send_event(
        job.session.owner,
        CallStarted(seq=0, call_id=job.call_id, session=job.session.id, tool=job.tool.name),
    )
    progress = asyncio.create_task(_progress(hub, job, timeout))
    try:
        async with asyncio.timeout(timeout):
            return await job.tool.run(job.args, plan, ctx)
    except TimeoutError:
        raise errors.Timeout(
            f"{job.tool.name} ran past its dispatch timeout of {timeout:g} s and was stopped"
        ) from None
    finally:
        progress.cancel()


async def _gate(hub: Hub, job: CallJob, plan: Plan) -> None:
    session, tool = job.session, job.tool
    cfg = session.config.approvals
    risk = plan.risk.value
    verdict = policy_verdict(
        cfg.policy,
        plan,
        always_allow=tool.flags.always_allow,
        granted=session.granted(tool.name, risk, plan.sandboxed),
        sandbox_active=bool(hub.sandbox and hub.sandbox.active),
    )
    _audit(hub, "proposal", job, risk=risk, policy=cfg.policy, decision=verdict.value)
    if verdict is Verdict.RUN:
        return
    if verdict is Verdict.DENY:
        raise errors.Denied(
            f"approvals.policy is 'never': {risk} calls are refused without asking "
            "(change approvals.policy to on-risk to be asked)"
        )
    approval = hub.gate.request(
        session.owner,
        session=session.id,
        call_id=job.call_id,
        tool=tool.name,
        risk=risk,
        workspace=str(session.workspace),
        summary=plan.summary,
        details=plan.details,
        sandboxed=plan.sandboxed,
    )
    try:
        approved = await asyncio.shield(approval.future)
    except asyncio.CancelledError:
        hub.gate.cancel(approval.id, "the call was cancelled")
        raise
    if not approved:
        raise errors.Denied(_denial(approval))
    if approval.scope == "session":
        session.grant(tool.name, risk, plan.sandboxed)


def _denial(approval: Any) -> str:
    who = f" by {approval.decided_by.label()}" if approval.decided_by else ""
    why = f": {approval.reason}" if approval.reason else ""
    return f"approval {approval.id} was {approval.state.value}{who}{why}"


async def _progress(hub: Hub, job: CallJob, timeout: float | None) -> None:
    interval = job.session.config.tools.progress_interval_seconds
    started = time.monotonic()
    while True:
        await asyncio.sleep(interval)
        elapsed = time.monotonic() - started
        limit = f"{timeout:.0f}s" if timeout else "none"
        log.info("running name=%s call=%s elapsed=%.0fs/%s", job.tool.name, job.call_id, elapsed, limit)
        hub.send_event(
            job.session.owner,
            CallProgress(seq=0, call_id=job.call_id, elapsed_s=round(elapsed, 1), timeout_s=timeout),
        )


def _context(hub: Hub, job: CallJob) -> CallContext:
    session = job.session
    return CallContext(
        call_id=job.call_id,
        session_id=session.id,
        workspace=session.workspace,
        workspace_fd=session.workspace_fd,
        config=session.config,
        paths=hub.paths,
        sandbox=hub.sandbox,
        services=session.services,
        turn=job.turn,
    )


def _complete(hub: Hub, job: CallJob, outcome: tuple[bool, Any, Any], duration: float) -> None:
    ok, result, error = outcome
    info = None
    if error is not None:
        info = ToolErrorInfo(kind=error.kind, message=error.message, hint=error.hint)
    _audit(
        hub,
        "completion",
        job,
        outcome="ok" if ok else "error",
        error_kind=error.kind if error else None,
        duration_s=round(duration, 3),
    )
    frame = CallCompleted(seq=0, call_id=job.call_id, ok=ok, result=result, error=info)
    hub.send_event(job.session.owner, frame)


def _audit(hub: Hub, event: str, job: CallJob, **fields: Any) -> None:
    if hub.audit is None:
        return
    try:
        hub.audit.record(
            event, tool=job.tool.name, session=job.session.id, call_id=job.call_id, **fields
        )
    except OSError as exc:  # a full disk must not stop calls; say so in the log
        log.error("audit log write failed: %s", exc)
