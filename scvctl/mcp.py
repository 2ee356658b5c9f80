"""`scvctl mcp`: an MCP server on stdio that forwards an MCP host's tool calls to scvd.

The host starts `scvctl mcp --workspace DIR`; this process opens one scvd
session on DIR and maps `tools/list` to `tools.list` and `tools/call` to `call`.
Approvals stay with scvd: calls that need one wait until a person decides
(`scvctl approvals watch` in a terminal, or a chat bridge). A host that declares
the elicitation capability is asked too, through `elicitation/create`; its answer
becomes an `approval.decide` from this bridge, and the first decision wins.
stdout carries only JSON-RPC; diagnostics go to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import sys
from pathlib import Path
from typing import Any

import msgspec

from scvd import __version__, errors, eventloop, protocol as p

from .client import AsyncClient

SUPPORTED_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS, INTERNAL = -32700, -32600, -32601, -32602, -32603
INSTRUCTIONS = (
    "Tools run on the user's machine through scvd. Calls that are not read-only wait for the "
    "user's approval; a denied call returns an error saying so."
)


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    cmd = sub.add_parser("mcp", parents=[common], help="serve scvd's tools to an MCP host over stdio")
    cmd.add_argument("--workspace", type=Path, default=Path.cwd(), help="the session's workspace (default: here)")
    cmd.set_defaults(handler=cmd_mcp)


def cmd_mcp(args: argparse.Namespace) -> int:
    return eventloop.run(serve(args.socket, args.workspace.resolve()))  # uvloop when installed


async def serve(socket: Path | None, workspace: Path) -> int:
    # an approver, so the session's own approval requests reach us (used only for hosts that elicit)
    client = await AsyncClient.connect(socket, name="scvctl-mcp", approver=True)
    try:
        session = await client.open_session(workspace)
        bridge = Bridge(client, session, _StdoutWriter())
        await bridge.run(sys.stdin)
    finally:
        await client.close()
    return 0


class _StdoutWriter:
    def write(self, message: dict[str, Any]) -> None:
        sys.stdout.buffer.write(msgspec.json.encode(message) + b"\n")
        sys.stdout.buffer.flush()


class _Lines(asyncio.Protocol):
    """stdin as a protocol: each whole line is handed over as it arrives (no reader loop, so a
    request starts one turn of the loop sooner). A line over `limit` is dropped whole, once said."""

    def __init__(self, on_line: Any, on_too_large: Any, limit: int) -> None:
        self.on_line, self.on_too_large, self.limit = on_line, on_too_large, limit
        self.buffer = bytearray()
        self.skipping = False  # inside a line over the limit: drop up to its newline
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        start = 0
        while (end := self.buffer.find(b"\n", start)) >= 0:
            if self.skipping:
                self.skipping = False
            elif end + 1 - start > self.limit:
                self.on_too_large()
            else:
                self.on_line(bytes(self.buffer[start:end + 1]))
            start = end + 1
        del self.buffer[:start]
        if len(self.buffer) > self.limit:
            self.buffer.clear()
            if not self.skipping:
                self.skipping = True
                self.on_too_large()

    def eof_received(self) -> bool:
        if self.buffer and not self.skipping:
            self.on_line(bytes(self.buffer))  # a last line without its newline
        self.buffer.clear()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            self.done.set_result(None)


class Bridge:
    """JSON-RPC messages in, scvd frames out; each request handled in its own task."""

    def __init__(self, client: AsyncClient, session: str, out: Any) -> None:
        self.client, self.session, self.out = client, session, out
        self.calls: dict[Any, str] = {}  # JSON-RPC id -> scvd call_id, for notifications/cancelled
        self.tasks: set[asyncio.Task[Any]] = set()
        self.elicit = False  # the host declared the elicitation capability (form mode)
        self.asked: dict[str, asyncio.Future[dict[str, Any]]] = {}  # our requests to the host, by id
        self.asking: dict[str, str] = {}  # approval_id -> id of the elicitation/create about it
        self._ids = itertools.count(1)

    async def run(self, stdin: Any) -> None:
        """Serve the host's messages from `stdin` (a pipe or file) until it closes."""
        lines = _Lines(self._start, lambda: self._error(None, INVALID_REQUEST, "message too large"),
                       p.DEFAULT_CLIENT_FRAME_LIMIT)
        transport, _ = await asyncio.get_running_loop().connect_read_pipe(lambda: lines, stdin)
        try:
            await lines.done
        finally:
            transport.close()
        if self.tasks:
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
            self._error(None, PARSE_ERROR, f"not JSON: {exc}")
            return
        if not isinstance(message, dict) or not isinstance(message.get("method"), str):
            if isinstance(message, dict) and ("result" in message or "error" in message):
                waiting = self.asked.pop(str(message.get("id")), None)
                if waiting is not None and not waiting.done():
                    waiting.set_result(message)
                return  # else an answer to nothing we asked: ignore
            self._error(message.get("id") if isinstance(message, dict) else None, INVALID_REQUEST,
                        "expected a JSON-RPC request object with a method")
            return
        msg_id, method = message.get("id"), message["method"]
        params = message.get("params") or {}
        if not isinstance(params, dict):  # MCP's params are objects; a host waits for its answer
            if msg_id is not None:
                self._error(msg_id, INVALID_PARAMS, "`params` must be an object")
            return
        if msg_id is None:
            await self._notification(method, params)
            return
        try:
            result = await self._request(method, params, msg_id)
        except errors.JsonRpcError as exc:
            self._error(msg_id, exc.rpc_code, exc.message)
        except errors.ScvError as exc:
            self._error(msg_id, INTERNAL, f"{exc.code}: {exc.message}")
        except Exception as exc:  # a bug here must still answer: the host waits on this id
            print(f"scvctl mcp: {method} failed: {exc!r}", file=sys.stderr)
            self._error(msg_id, INTERNAL, f"internal error in scvctl mcp: {type(exc).__name__}")
        else:
            self.out.write({"jsonrpc": "2.0", "id": msg_id, "result": result})

    async def _request(self, method: str, params: dict[str, Any], msg_id: Any) -> dict[str, Any]:
        if method == "initialize":
            self.elicit = can_elicit(params.get("capabilities"))
            return initialize_result(params)
        if method == "ping":
            return {}
        if method == "tools/list":
            tools = (await self.client.request(p.ToolsList)).tools
            return {"tools": [mcp_tool(t) for t in tools]}
        if method == "tools/call":
            return await self._call(params, msg_id)
        raise errors.JsonRpcError(METHOD_NOT_FOUND, f"method {method!r} is not supported")

    async def _call(self, params: dict[str, Any], msg_id: Any) -> dict[str, Any]:
        name, arguments = params.get("name"), params.get("arguments") or {}
        if not isinstance(name, str) or not isinstance(arguments, dict):
            raise errors.JsonRpcError(INVALID_PARAMS, "tools/call needs `name` (string) and `arguments` (object)")
        meta = params.get("_meta")
        token = meta.get("progressToken") if isinstance(meta, dict) else None
        accepted = await self.client.request(p.Call, session=self.session, tool=name, arguments=arguments)
        self.calls[msg_id] = accepted.call_id
        asked: list[str] = []
        try:
            while True:  # every event of this call is taken, so none piles up in a long host session
                event = await self.client.next_call_event(accepted.call_id)
                if isinstance(event, p.CallCompleted):
                    return call_result(event)
                if isinstance(event, p.CallProgress) and token is not None:
                    self._progress(token, event)
                elif isinstance(event, p.ApprovalRequested) and self.elicit:
                    asked.append(event.approval_id)
                    self._start_task(self._ask_host(event))
                elif isinstance(event, p.ApprovalResolved):
                    self._withdraw(event.approval_id, "decided elsewhere")
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
                        "params": elicitation_params(event)})
        try:
            reply = await answer
        finally:
            self.asked.pop(request_id, None)
            self.asking.pop(event.approval_id, None)
        choice = decision_of(reply)
        if choice is None:
            return  # cancelled or unreadable: the request stays pending for the watchers
        decision, scope = choice
        try:
            await self.client.request(p.ApprovalDecide, approval_id=event.approval_id, decision=decision,
                                      scope=scope, reason="decided in the MCP host")
        except errors.ApprovalNotFound:
            pass  # decided elsewhere first: the first decision wins
        except errors.ScvError as exc:  # e.g. forbidden: this host was started by scvd itself
            print(f"scvctl mcp: the host's decision on {event.approval_id} was refused: "
                  f"{exc.code}: {exc.message}", file=sys.stderr)

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

    def _progress(self, token: Any, event: p.CallProgress) -> None:
        """scvd's call.progress as MCP's notifications/progress, for hosts that asked (progressToken)."""
        params: dict[str, Any] = {"progressToken": token, "progress": event.elapsed_s,
                                  "message": event.message or f"still running after {event.elapsed_s:.0f} s"}
        if event.timeout_s:
            params["total"] = event.timeout_s
        self.out.write({"jsonrpc": "2.0", "method": "notifications/progress", "params": params})

    async def _notification(self, method: str, params: dict[str, Any]) -> None:
        if method == "notifications/cancelled":
            call_id = self.calls.get(params.get("requestId"))
            if call_id:
                try:
                    await self.client.request(p.CallCancel, call_id=call_id)
                except errors.CallNotFound:
                    pass  # it finished first

    def _error(self, msg_id: Any, code: int, message: str) -> None:
        self.out.write({"jsonrpc": "2.0", "id": msg_id, "error": {"code": code, "message": message}})


def initialize_result(params: dict[str, Any]) -> dict[str, Any]:
    """Answer `initialize`: the client's protocol version if we know it, else our newest."""
    asked = params.get("protocolVersion")
    version = asked if asked in SUPPORTED_VERSIONS else SUPPORTED_VERSIONS[-1]
    return {
        "protocolVersion": version,
        "capabilities": {"tools": {"listChanged": False}},
        "serverInfo": {"name": "scvd", "version": __version__},
        "instructions": INSTRUCTIONS,
    }


CHOICES = {"approve": ("approve", "once"), "approve_session": ("approve", "session"), "deny": ("deny", "once")}


def can_elicit(capabilities: Any) -> bool:
    """The host can show a form: `elicitation` declared, with `form` or (before 2025-11-25) as `{}`."""
    if not isinstance(capabilities, dict) or not isinstance(capabilities.get("elicitation"), dict):
        return False
    declared = capabilities["elicitation"]
    return not declared or "form" in declared


def elicitation_params(event: p.ApprovalRequested) -> dict[str, Any]:
    """The approval request as an elicitation form: the request whole (a host shows a summary's cut
    note, so the details it points to come too), and one choice of three."""
    from .approval_view import format_request  # only for hosts that elicit: startup stays light

    where = "sandboxed" if event.sandboxed else "unsandboxed"
    whole = format_request(event).split("\n", 1)[1]  # below our own first line; always_ask included
    message = f"scvd asks for your approval: {event.tool} ({event.risk}, {where}) in {event.workspace}\n{whole}"
    choices = dict(zip(CHOICES, ["Approve", "Approve for this session", "Deny"]))
    if event.always_ask:  # approved once only: a session scope would be recorded as once
        del choices["approve_session"]
    return {
        "message": message,
        "requestedSchema": {
            "type": "object",
            "properties": {"decision": {
                "type": "string", "title": "Decision",
                "description": ("approve once, or deny" if event.always_ask else
                                "approve once, approve this tool at this risk for the session, or deny"),
                "enum": list(choices),
                "enumNames": list(choices.values()),
            }},
            "required": ["decision"],
        },
    }


def decision_of(reply: dict[str, Any]) -> tuple[str, str] | None:
    """(decision, scope) from the host's answer; None leaves the request to other approvers."""
    result = reply.get("result")
    if not isinstance(result, dict):
        return None
    if result.get("action") == "decline":
        return ("deny", "once")
    content = result.get("content")
    if result.get("action") == "accept" and isinstance(content, dict):
        return CHOICES.get(content.get("decision"))  # type: ignore[arg-type]
    return None


def mcp_tool(tool: p.ToolInfo) -> dict[str, Any]:
    """An scvd tool as MCP lists it."""
    read_only = tool.risk == "read_only"
    return {
        "name": tool.name,
        "description": tool.description,
        "inputSchema": tool.input_schema,
        "annotations": {"readOnlyHint": read_only, "destructiveHint": not read_only},
    }


def call_result(done: p.CallCompleted) -> dict[str, Any]:
    """A call.completed as an MCP tool result: text for every host, structured where it is an object."""
    if done.ok:
        payload = msgspec.to_builtins(done.result)
        text = payload if isinstance(payload, str) else msgspec.json.encode(payload).decode("utf-8")
        result: dict[str, Any] = {"content": [{"type": "text", "text": text}], "isError": False}
        if isinstance(payload, dict):
            result["structuredContent"] = payload
        return result
    err = done.error
    text = f"{err.kind}: {err.message}" + (f"\nhint: {err.hint}" if err.hint else "")
    return {"content": [{"type": "text", "text": text}], "isError": True}
