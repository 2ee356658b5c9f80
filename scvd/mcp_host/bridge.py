"""An MCP server over the host's pipes: JSON-RPC messages in, scvd requests out, answers back.

The host's messages are read by pipes.Lines and handled here, each request in its
own task; what they mean for scvd is in jsonrpc.py. The client is anything with
`request(frame_type, **fields)` and `next_call_event(call_id)` (local.LocalClient
in scvd); `out` anything with `write(message)`. Diagnostics go to the daemon's log.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from typing import Any

import msgspec

from .. import errors, protocol as p
from ..call_budget import cost as call_cost
from ..lenient_json import NOT_JSON, TOO_DEEP_JSON, lenient, top_level_id
from ..text import well_formed
from .jsonrpc import (INTERNAL, INVALID_PARAMS, INVALID_REQUEST, METHOD_NOT_FOUND, PARSE_ERROR, call_result,
                      can_elicit, decision_of, elicitation_params, error_result, failure, initialize_result,
                      mcp_tool, request_id)
from .names import HostNames
from .pipes import Lines

log = logging.getLogger("scvd.mcp_host")
# a host cannot wait for call.completed or send call.cancel, as a socket client refused by a limit is
# told to: what its model (or the person at it) can do
HOST_RETRY = "wait for earlier tool calls to finish, or cancel them, then call again"
TOO_DEEP = ("not JSON scvd can read: it nests arrays or objects too deeply (at most about 950 levels); "
            "send flatter JSON")


class Bridge:
    """JSON-RPC messages in, scvd frames out; each request handled in its own task."""

    def __init__(self, client: Any, session: str, out: Any, names: HostNames) -> None:
        self.client, self.session, self.out = client, session, out
        self.names = names  # the tools' names as the host got them
        self.calls: dict[Any, str] = {}  # JSON-RPC id -> scvd call_id, for notifications/cancelled
        self.cancelled: set[Any] = set()  # ids the host cancelled: MCP says their answer is not sent
        self.initialized = False  # `initialize` answered: from then on the host may hear of list changes
        self._list_changed_due = False
        self.tasks: set[asyncio.Task[Any]] = set()
        self.elicit = False  # the host declared the elicitation capability (form mode)
        self.asked: dict[str, asyncio.Future[dict[str, Any]]] = {}  # our requests to the host, by id
        self.asking: dict[str, str] = {}  # approval_id -> id of the elicitation/create about it
        self._ids = itertools.count(1)

    def lines(self, limit: int = p.DEFAULT_CLIENT_FRAME_LIMIT) -> Lines:
        """The protocol to read the host's stdin into: each line is one message, of at most
        `limit` bytes (server.client_frame_bytes, as for a socket client's frame)."""
        return Lines(self._start, lambda head, tail: self._error(request_id(head, tail), INVALID_REQUEST, (
            f"message too large: over {limit} bytes (server.client_frame_bytes); send less, or raise it")), limit)

    async def run(self, lines: Lines) -> None:
        """Until the host's stdin (read into `lines`) ends and every request is answered."""
        await lines.done
        while self.tasks:
            await asyncio.wait(self.tasks)

    def _start(self, line: bytes) -> None:
        if line.strip():
            self._start_task(self.handle(line))

    def _start_task(self, work: Any) -> None:
        task = asyncio.ensure_future(work)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def handle(self, line: bytes) -> None:
        try:
            message = msgspec.json.decode(line)  # several times faster than json.loads on a 4 KiB result
        except msgspec.DecodeError as exc:
            message = lenient(line, mend=False)  # a lone surrogate escape (a cut emoji) is JSON, which msgspec refuses
            if message is NOT_JSON:
                self._error(None, PARSE_ERROR, f"not JSON: {exc}")
                return
            if message is not TOO_DEEP_JSON:  # msgspec stopped at the escape, short of the depth the json module met
                message = _mended(message)
        except RecursionError:  # msgspec decodes nested values recursively: the task ended, and the host waited
            message = TOO_DEEP_JSON
        if message is TOO_DEEP_JSON:
            self._error(top_level_id(line[:p.ID_SCAN_BYTES]), PARSE_ERROR, TOO_DEEP)
            return
        if isinstance(message, list):  # a JSON-RPC batch (MCP 2025-03-26): one array of answers
            if not message:
                self._error(None, INVALID_REQUEST, "an empty batch; send at least one message")
                return
            cost = call_cost(line)  # each call of a batch counts the whole line: which part is whose is not known
            answers = [a for a in await asyncio.gather(*(self._message(m, cost) for m in message)) if a is not None]
            if answers:  # notifications and answers to our requests get none
                self.out.write(answers)
            return
        answer = await self._message(message, call_cost(line))
        if answer is not None:
            self.out.write(answer)

    async def _message(self, message: Any, cost: int) -> dict[str, Any] | None:
        """One message of the host's; what to answer it with, if anything. `cost`: what a call in it
        holds of the budget of calls (call_budget.py), as a socket client's frame would."""
        if not isinstance(message, dict) or not isinstance(message.get("method"), str):
            if isinstance(message, dict) and ("result" in message or "error" in message):
                waiting = self.asked.pop(str(message.get("id")), None)
                if waiting is not None and not waiting.done():
                    waiting.set_result(message)
                return None  # else an answer to nothing we asked: ignore
            return error_message(message.get("id") if isinstance(message, dict) else None, INVALID_REQUEST,
                                 "expected a JSON-RPC request object with a method")
        msg_id, method = message.get("id"), message["method"]
        if "id" in message and not is_id(msg_id):  # it would key our tables (null too: MCP ids are never null)
            return error_message(None, INVALID_REQUEST, "a request's id must be a string or a number")
        params = message.get("params")
        if params is None:  # omitted; an empty array or string is no object, refused below
            params = {}
        if not isinstance(params, dict):  # MCP's params are objects; a host waits for its answer
            return error_message(msg_id, INVALID_PARAMS, "`params` must be an object") if msg_id is not None else None
        if msg_id is None:
            await self._notification(method, params)
            return None
        answer = await self._answer(method, params, msg_id, cost)
        if msg_id in self.cancelled:  # the host cancelled it while it ran: it waits for no answer
            self.cancelled.discard(msg_id)
            return None
        return answer

    async def _answer(self, method: str, params: dict[str, Any], msg_id: Any, cost: int) -> dict[str, Any]:
        try:
            result = await self._request(method, params, msg_id, cost)
        except errors.JsonRpcError as exc:
            return error_message(msg_id, exc.rpc_code, exc.message)
        except errors.ScvError as exc:
            return error_message(msg_id, INTERNAL, f"{exc.code}: {exc.message}")
        except Exception as exc:  # a bug here must still answer: the host waits on this id
            log.exception("MCP host of session %s: %s failed", self.session, method)
            return error_message(msg_id, INTERNAL, f"internal error in scvctl mcp: {type(exc).__name__}")
        return {"jsonrpc": "2.0", "id": msg_id, "result": result}

    async def _request(self, method: str, params: dict[str, Any], msg_id: Any, cost: int) -> dict[str, Any]:
        if method == "initialize":
            self.elicit, self.initialized = can_elicit(params.get("capabilities")), True
            return initialize_result(params)
        if method == "ping":
            return {}
        if method == "tools/list":
            # what it calls; system tools too (store_secret): a host has no find_tools to discover them,
            # and a credential_missing error tells its agent to call store_secret
            tools = await self._tools()
            return {"tools": [mcp_tool(t, name) for t, name in zip(tools, self._listed(tools))]}
        if method == "tools/call":
            return await self._call(params, msg_id, cost)
        raise errors.JsonRpcError(METHOD_NOT_FOUND, f"method {method!r} is not supported")

    async def _tools(self) -> list[p.ToolInfo]:
        return (await self.client.request(p.ToolsList, session=self.session, include_system=True)).tools

    def _listed(self, tools: list[p.ToolInfo]) -> list[str]:
        """The tools' names as the host gets them, their system tools' known (HostNames.listed)."""
        return self.names.listed([t.name for t in tools], [t.name for t in tools if t.flags.get("system_use")])

    async def _call(self, params: dict[str, Any], msg_id: Any, cost: int) -> dict[str, Any]:
        if self.names.unmapped(params.get("name")):  # a host that kept an earlier session's list calls unlisted
            self._listed(await self._tools())
        name, arguments = self.names.scvd_name(params.get("name")), params.get("arguments")
        if arguments is None:  # omitted: a tool without required arguments
            arguments = {}
        if not isinstance(name, str) or not isinstance(arguments, dict):
            raise errors.JsonRpcError(INVALID_PARAMS, "tools/call needs `name` (string) and `arguments` (object)")
        arguments = self.names.scvd_arguments(name, arguments)
        if refused := p.surrogate_refusal(arguments):  # as scvd refuses a socket client's call
            return error_result(refused.kind, refused.message)
        meta = params.get("_meta")
        token = meta.get("progressToken") if isinstance(meta, dict) else None
        try:
            accepted = await self.client.request(p.Call, cost, session=self.session, tool=name, arguments=arguments)
        except errors.ToolError as exc:  # refused before it ran (`limit`): the model's to act on, as a failure is
            said = f"{exc.why}; {HOST_RETRY}" if isinstance(exc, errors.LimitExceeded) and exc.why else exc.message
            return failure(exc.kind, said, exc.hint, self.names.host_text, exc.reason)
        self.calls[msg_id] = accepted.call_id
        asked: list[str] = []
        progress = base = 0.0  # the last one sent; where the run's own seconds count from (after a wait)
        try:
            while True:  # every event of this call is taken, so none piles up in a long host session
                event = await self.client.next_call_event(accepted.call_id)
                if isinstance(event, p.CallCompleted):
                    return call_result(event, self.names.host_text, self.names.speaks(name))
                if isinstance(event, p.CallProgress) and token is not None and msg_id not in self.cancelled:
                    progress = self._progress(token, event, progress, base)  # MCP: none for a request its host cancelled
                elif isinstance(event, p.CallStarted):  # after a wait: its elapsed_s counts from 0 again
                    base = progress
                elif isinstance(event, p.ApprovalRequested) and self.elicit:
                    asked.append(event.approval_id)
                    self._start_task(self._ask_host(event))
                elif isinstance(event, p.ApprovalResolved):
                    self._withdraw(event.approval_id, settled(event))
        finally:
            self.calls.pop(msg_id, None)
            for approval_id in asked:
                self._withdraw(approval_id, "the call ended")

    async def _ask_host(self, event: p.ApprovalRequested) -> None:
        """elicitation/create for one approval request; the host's answer is our approval.decide."""
        request_id = f"scvd-elicit-{next(self._ids)}"
        answer: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.asked[request_id], self.asking[event.approval_id] = answer, request_id
        self.out.write({"jsonrpc": "2.0", "id": request_id, "method": "elicitation/create",
                        "params": elicitation_params(event, self.names.shown.get(event.tool))})
        try:
            reply = await answer
        finally:
            self.asked.pop(request_id, None)
            self.asking.pop(event.approval_id, None)
        choice = decision_of(reply)
        if choice is None:  # the request stays pending for the watchers
            result = reply.get("result")
            if not (isinstance(result, dict) and result.get("action") == "cancel"):  # cancel: the person's say
                said = msgspec.json.encode(reply.get("error", result)).decode(errors="replace")
                log.warning("MCP host of session %s: its answer to the question on %s is no decision (%s); "
                            "the request waits for `scvctl approvals watch`", self.session, event.approval_id,
                            said[:300])
            return
        decision, scope = choice
        try:
            await self.client.request(p.ApprovalDecide, approval_id=event.approval_id, decision=decision,
                                      scope=scope, reason="decided in the MCP host")
        except errors.ApprovalNotFound:
            pass  # decided elsewhere first: the first decision wins
        except errors.ScvError as exc:  # e.g. forbidden: this host was started by scvd itself
            log.warning("MCP host of session %s: its decision on %s was refused: %s: %s",
                        self.session, event.approval_id, exc.code, exc.message)

    def _withdraw(self, approval_id: str, reason: str) -> None:
        """The approval was settled without the host: take our question back."""
        request_id = self.asking.pop(approval_id, None)
        if request_id is None:
            return
        waiting = self.asked.pop(request_id, None)
        if waiting is not None and not waiting.done():
            waiting.cancel()
        self.out.write({"jsonrpc": "2.0", "method": "notifications/cancelled",
                        "params": {"requestId": request_id, "reason": reason}})

    def tools_changed(self) -> None:
        """The session's tools changed (an MCP server's came or went): the host lists them again.
        Changes in one loop turn (a server's restart, every registry it is in) make one notification."""
        if self.initialized and not self._list_changed_due:
            self._list_changed_due = True
            asyncio.get_running_loop().call_soon(self._list_changed)

    def _list_changed(self) -> None:
        self._list_changed_due = False
        self.out.write({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})

    def _progress(self, token: Any, event: p.CallProgress, last: float, base: float) -> float:
        """scvd's call.progress as MCP's notifications/progress, for hosts that asked (progressToken).
        MCP's `progress` must grow with each one: seconds elapsed (to 0.1 s), a little past `last` when
        a tool reported more than once within 0.1 s (an MCP server's steps). A call that waited (for a
        person) runs on from the wait's `base`, and so does its `total`: after 130 s of waiting, a run of
        120 s at most was 130/120 and stood still there."""
        progress = max(round(base + event.elapsed_s, 3), round(last + 0.001, 3))
        params: dict[str, Any] = {"progressToken": token, "progress": progress,
                                  "message": event.message or f"still running after {event.elapsed_s:.0f} s"}
        if event.timeout_s:
            params["total"] = round(base + event.timeout_s, 3)
        self.out.write({"jsonrpc": "2.0", "method": "notifications/progress", "params": params})
        return progress

    async def _notification(self, method: str, params: dict[str, Any]) -> None:
        if method == "notifications/cancelled":
            # a batch's calls start in tasks gather() queued before this line ran, and each is accepted
            # in its first step (dispatch answers a call at once): one turn, and a cancel that came
            # right behind the batch finds its call
            await asyncio.sleep(0)
            request_id = params.get("requestId")
            call_id = self.calls.get(request_id) if is_id(request_id) else None
            if call_id:
                self.cancelled.add(request_id)  # still running, so not answered yet: it never will be
                try:
                    await self.client.request(p.CallCancel, call_id=call_id)
                except (errors.CallNotFound, errors.ConnectionClosed):
                    pass  # it finished first, or the host was detached (its calls are cancelled then)

    def _error(self, msg_id: Any, code: int, message: str) -> None:
        self.out.write(error_message(msg_id, code, message))


def settled(event: p.ApprovalResolved) -> str:
    """Why a question to the host was taken back: decided elsewhere, or nobody's to decide any more."""
    if event.state in ("approved", "denied"):
        return f"{event.state} elsewhere, by {event.decided_by}"
    return f"{event.state}: {event.reason}" if event.reason else event.state


def error_message(msg_id: Any, code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": msg_id, "error": {"code": code, "message": message}}


def is_id(value: Any) -> bool:
    """A JSON-RPC request id: a string or a number (not a boolean, which JSON keeps apart)."""
    return isinstance(value, (str, int, float)) and not isinstance(value, bool)


def _mended(message: Any) -> Any:
    """A message the json module read, its lone surrogates made U+FFFD (`well_formed`) but in a
    tools/call's arguments, which `_call` refuses instead: read as U+FFFD they name another file."""
    if isinstance(message, list):  # a batch; a list in it is no message, and nests no deeper here
        return [_mended(m) if isinstance(m, dict) else well_formed(m) for m in message]
    params = message.get("params") if isinstance(message, dict) and message.get("method") == "tools/call" else None
    if not isinstance(params, dict) or "arguments" not in params:
        return well_formed(message)
    rest = well_formed({k: v for k, v in message.items() if k != "params"})
    return {**rest, "params": {**well_formed({k: v for k, v in params.items() if k != "arguments"}),
                               "arguments": params["arguments"]}}
