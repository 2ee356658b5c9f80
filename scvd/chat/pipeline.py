"""A turn's tool call: submitted to the daemon's calls registry exactly as a socket `call` is.

The registry owns the call's life (refusals, lane, plan, approval gate,
dispatch timeout, cancellation, one `call.completed`); the call carries the
turn id, so its events do and per-turn limits count by it.

One rule is the turn's own: a call of a turn that needs a person while nobody
could decide (no `approvals.watch` is open and the chat's connection is no
approver, or a process scvd started, which may not decide) is denied at once
instead of waiting out approvals.timeout_seconds, so a headless turn never
hangs; one already waiting is denied the same way when the last connection
that could decide leaves. `screen()` is hooked into
the approval gate, which applies it to new requests and, on such a departure,
to pending ones (`ApprovalGate.rescreen()`). `remedy()` is hooked there too:
a turn's call refused for want of room in the gate is told what a model can do.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from .. import errors
from ..approvals import Full
from ..call_budget import cost as call_cost
from ..calls import failure
from ..protocol import ToolErrorInfo

log = logging.getLogger("scvd.chat")

NO_APPROVER = ("nobody can approve this call: no `scvctl approvals watch` is running and this client does not "
               "approve its own calls; run `scvctl exec --yes` to approve them yourself, or start "
               "`scvctl approvals watch` in another terminal")
# to any other client (a chat bridge): its user cannot run `scvctl exec`, and the bridge decides whether it approves
NO_APPROVER_BRIDGE = ("nobody can approve this call: no `scvctl approvals watch` is running and this client does "
                      "not approve its own calls (its hello did not say approver: true); have the owner start "
                      "`scvctl approvals watch` on the machine scvd runs on, then ask again")
# to a process scvd started (a tool's, an agent's): its hello's approver: true cannot make it one
NO_APPROVER_SPAWNED = ("nobody can approve this call: no `scvctl approvals watch` is running, and this client was "
                       "started by scvd (a tool or agent), so it may not approve its own calls; have the owner start "
                       "`scvctl approvals watch` on the machine scvd runs on, then ask again")


# a model cannot wait for call.completed or send call.cancel, as a socket client is told to: what it can do
# is ask again, fewer at once (its step's other outputs come back together, so those calls are over by then)
TOO_MANY = ("this call was not run: the step asked for more calls at once than one session runs together "
            "(server.max_calls_per_session = {cap}, counting calls still running); call it again, asking for "
            "fewer calls at once")
# ... or for more calls than its connection holds at once, across its chats
TOO_MANY_HERE = ("this call was not run: this chat's connection already holds as many calls not completed as scvd "
                 "takes on from one connection (server.max_calls_per_connection = {cap}); call it again once this "
                 "step's other calls have ended, asking for fewer calls at once")
# ... or for more than the bytes its connection's calls, or every client's, hold at once (call_budget.py)
TOO_MUCH = ("this call was not run: the calls not completed of this chat's connection, or of every client, hold "
            "as much as scvd takes on at once (server.max_call_bytes_per_connection, server.max_call_bytes); "
            "call it again once this step's other calls have ended, asking for fewer calls at once")
# ... or for more than they may hold at all, alone (a reload lowered the bound)
TOO_LARGE = ("this call was not run: its arguments count {cost:,} bytes (call_budget.py), more than the calls of this "
             "chat's connection may hold at once ({bound:,}, {key}); call it again with less in one call")


# nor can it have approvals decided: a turn's call refused for want of room in the gate hears these instead
FULL = {
    Full.SHARE: "call it again, asking for fewer calls that need approval at once",
    Full.GATE: "the person deciding has too many requests waiting; call it again later, or do without it",
}


def _of_turn(daemon: Any, info: dict[str, Any]) -> bool:
    """Whether the call an approval request is for came from a chat turn."""
    call = daemon.calls.get(info.get("call_id", ""))
    return call is not None and bool(call.turn)


def remedy(daemon: Any, info: dict[str, Any], full: Full) -> str | None:
    """The gate's hook: what a turn's call refused because `full` had no room is told to do."""
    return FULL[full] if _of_turn(daemon, info) else None


def screen(daemon: Any, owner: Any, info: dict[str, Any]) -> None:
    """The gate's hook: refuse a turn's request that no connection could decide."""
    if not _of_turn(daemon, info):
        return
    if any(c.watcher and not c.closed for c in daemon.connections):
        return
    if not owner.approver:
        raise errors.Denied(NO_APPROVER if owner.client == "scvctl" else NO_APPROVER_BRIDGE)
    if not daemon.may_decide(owner):
        raise errors.Denied(NO_APPROVER_SPAWNED)


async def submit(daemon: Any, session: Any, tool: str, arguments: dict[str, Any], *,
                 turn: str, sent: str = "") -> tuple[bool, Any, Any]:
    """Run one call of `turn` to its end; (ok, result, error: ToolErrorInfo | None), a refusal too.
    `sent`: the arguments as the model sent them (JSON text), which the call counts as a socket
    client's call counts its frame (call_budget.py).
    Cancelled, it cancels the call too, and the CancelledError carries the call's outcome future as
    `ending`: done if the call had ended (the same loop turn), else once the cancel has ended it, or,
    for a call too far along to stop (a write whose rename had begun), once its own work has."""
    cost = call_cost(sent.encode(errors="surrogatepass"))
    try:
        handle = daemon.calls.submit(session, tool, arguments, requester=session.owner.decider(),
                                     call_id=_call_id(daemon, session, turn), turn=turn, cost=cost)
    except errors.ToolError as exc:  # refused before it was taken on (server.max_calls_per_session, the
        # call budget): the model is told why, in words it can act on; no crash
        log.info("turn %s: a call of %s was refused (%s)", turn, tool, errors.shown(exc))
        if isinstance(exc, errors.LimitExceeded):
            return False, None, ToolErrorInfo(kind=exc.kind, message=_too_much(daemon, session, cost))
        return failure(exc)
    try:
        return tuple(await asyncio.shield(handle.outcome))
    except asyncio.CancelledError as exc:
        if not handle.outcome.done() and daemon.calls.get(handle.call_id) is not None:
            daemon.calls.cancel(handle.call_id, "the turn was cancelled")
        exc.ending = handle.outcome  # type: ignore[attr-defined]
        raise


def _too_much(daemon: Any, session: Any, cost: int) -> str:
    """What a model is told of a call refused by one of the calls' limits, in the order they are checked."""
    cap = daemon.calls.max_per_session
    if session.held >= cap:
        return TOO_MANY.format(cap=cap)
    cap = daemon.calls.max_per_connection
    if session.owner.calls_held >= cap:
        return TOO_MANY_HERE.format(cap=cap)
    alone = daemon.calls.budget.too_large(cost)
    return TOO_LARGE.format(cost=cost, bound=alone[0], key=alone[1]) if alone else TOO_MUCH


def _call_id(daemon: Any, session: Any, turn: str) -> str:
    """`<turn>-c<N>`, with N past any id a client already chose for a call of its own."""
    n = session.call_count + 1
    while daemon.calls.get(call_id := f"{turn}-c{n}") is not None:
        n += 1
    return call_id
