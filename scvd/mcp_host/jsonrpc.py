"""The MCP side of `scvctl mcp` as data: JSON-RPC answers built from scvd frames, no I/O.

What an MCP host sees of scvd's tools, results, approvals and errors is decided
here; bridge.py moves it over the host's pipes. Nothing here names a tool.
"""

from __future__ import annotations

from typing import Any, Callable

import msgspec

from .. import __version__, errors, protocol as p
from ..approvals import Full
from ..lenient_json import edge_values
from ..text import format_request, json_bytes, printable
from ..tools.contract import object_root

SUPPORTED_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS, INTERNAL = -32700, -32600, -32601, -32602, -32603
INSTRUCTIONS = (
    "Tools run on the user's machine through scvd. Calls that are not read-only wait for the "
    "user's approval; a denied call returns an error saying so."
)

# what a host's call refused for want of room in the approval gate is told to do (McpHosts.remedy, the
# gate's hook): a host sends no call.cancel, which the socket client's words name; its own cancel reaches scvd
FULL = {
    Full.SHARE: ("have those decided (`scvctl approvals watch`, or the MCP host itself where it asks), or cancel "
                 "the tool calls you no longer need in the MCP host, then call it again"),
}

# a call cut off as scvd stops (the wire's reason `stopping`): the host's session ends with scvd, and a
# host does not start `scvctl mcp` again by itself
STOPPED = ("this MCP server stops with it: once scvd runs again (`systemctl --user start scvd`), reconnect the "
           "server in the MCP host (or restart the host), then call again")


def request_id(head: bytes, tail: bytes) -> Any:
    """The id of a request too large to decode, from its line's first and last bytes: last if it
    stands there (where the TypeScript SDK writes it, and where a decoder finds it when named twice),
    else the outer object's in `head`; None when neither holds it."""
    return edge_values(head, tail, ("id",))["id"]


def initialize_result(params: dict[str, Any]) -> dict[str, Any]:
    """Answer `initialize`: the client's protocol version if we know it, else our newest."""
    asked = params.get("protocolVersion")
    version = asked if asked in SUPPORTED_VERSIONS else SUPPORTED_VERSIONS[-1]
    return {
        "protocolVersion": version,
        "capabilities": {"tools": {"listChanged": True}},  # MCP servers' tools come and go
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


def elicitation_params(event: p.ApprovalRequested, listed_as: str | None = None) -> dict[str, Any]:
    """The approval request as an elicitation form: the request whole (a host shows a summary's cut
    note, so the details it points to come too), and one choice of three. `listed_as`: the tool's
    name as the host listed it, where scvd's was too long for the host (names.HostNames.shown)."""
    where = "sandboxed" if event.sandboxed else "unsandboxed"
    whole = format_request(event).split("\n", 1)[1]  # below our own first line; always_ask included
    # one line, escaped as format_request's own: a line break in the workspace would start a second header
    header = printable(f"scvd asks for your approval: {listed_as or event.tool} ({event.risk}, {where}) in "
                       f"{event.workspace}", keep="")
    if listed_as:  # scvd's own name too: `scvctl approvals watch`, the audit log and a script's summary show it
        header += f"\n  scvd's name for it: {event.tool}"
    message = f"{header}\n{whole}"
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
        decision = content.get("decision")
        return CHOICES.get(decision) if isinstance(decision, str) else None  # a list is no key
    return None


def mcp_tool(tool: p.ToolInfo, name: str) -> dict[str, Any]:
    """An scvd tool as MCP lists it, under `name` (names.HostNames': its own, or shortened)."""
    read_only = tool.risk == "read_only" and not tool.flags.get("modifies")  # MCP's: changes nothing
    return {
        "name": name,
        "description": tool.description,
        "inputSchema": object_root(tool.input_schema),
        "annotations": {"readOnlyHint": read_only, "destructiveHint": not read_only},
    }


def call_result(done: p.CallCompleted, named: Callable[[str], str] = str, system: bool = False) -> dict[str, Any]:
    """A call.completed as an MCP tool result: text for every host, structured where it is an object;
    a failure's as `failure` has it. A system tool's result (`system`: scvd's words, store_secret's
    `next` naming the tool to call again) has its text, or its object's strings, passed through
    `named` too; any other tool's is data (a file read, a server's answer) and goes as it came, a
    tool's name in it too."""
    if done.ok:
        payload = msgspec.to_builtins(done.result)
        if system:
            payload = _named(payload, named)
        text = payload if isinstance(payload, str) else json_bytes(msgspec.json.encode, payload).decode("utf-8")
        result: dict[str, Any] = {"content": [{"type": "text", "text": text}], "isError": False}
        if isinstance(payload, dict):
            result["structuredContent"] = payload
        return result
    return failure(done.error.kind, done.error.message, done.error.hint, named, done.error.reason)


def _named(payload: Any, named: Callable[[str], str]) -> Any:
    """`payload` as text, or an object's string values (store_secret's `next`), passed through `named`."""
    if isinstance(payload, str):
        return named(payload)
    if isinstance(payload, dict):
        return {k: named(v) if isinstance(v, str) else v for k, v in payload.items()}
    return payload


def failure(kind: str, message: str, hint: str | None = None, named: Callable[[str], str] = str,
            reason: str | None = None) -> dict[str, Any]:
    """A call that failed or was refused, as the isError result the host's model reads and can act on;
    JsonRpcError -32602 for a tool the session does not have. The tool names in its message and hint are
    passed through `named` (to the host's own: names.HostNames.host_text): an unknown tool's closest
    names, the tool store_secret is to be told (credential_missing), are called by those. One that scvd's
    stop cut off (`reason` stopping) says what brings the host's server back."""
    message, hint = named(message), named(hint) if hint else hint
    if reason == errors.STOP_REASON:
        message = f"{message}; {STOPPED}"
    if kind == "unknown_tool":  # MCP: an unknown tool is a protocol error, not the tool's result
        raise errors.JsonRpcError(INVALID_PARAMS, _error_text(kind, message, hint))
    return error_result(kind, message, hint)


def error_result(kind: str, message: str, hint: str | None = None) -> dict[str, Any]:
    """A failed call as an MCP tool result (isError): its kind, message and hint as text."""
    return {"content": [{"type": "text", "text": _error_text(kind, message, hint)}], "isError": True}


def _error_text(kind: str, message: str, hint: str | None) -> str:
    return f"{kind}: {message}" + (f"\nhint: {hint}" if hint else "")


def too_large(message: dict[str, Any], size: int, limit: int) -> dict[str, Any]:
    """A tool result over server.server_frame_bytes, as the `limit` error a socket client gets for it."""
    return {"jsonrpc": "2.0", "id": message.get("id"), "result": error_result(
        "limit", f"result too large: frame of {size} bytes exceeds server.server_frame_bytes ({limit}); "
        "ask for less output")}


def line_too_large(message: dict[str, Any], size: int, limit: int) -> dict[str, Any]:
    """An answer whose line is longer than a host is sent (`limit`): a tool result as the `limit`
    error its agent can act on, any other answer as a JSON-RPC error; the host stays connected."""
    said = (f"its line of {size} bytes is over {limit}, the longest scvd sends an MCP host (hosts on the "
            "TypeScript SDK read 10 MiB at most)")
    result = message.get("result")
    if isinstance(result, dict) and "content" in result:
        return {"jsonrpc": "2.0", "id": message.get("id"), "result": error_result(
            "limit", f"result too large: {said}; ask for less output at once (a smaller limit, or the rest "
            "from an offset)")}
    return {"jsonrpc": "2.0", "id": message.get("id"), "error": {"code": INTERNAL, "message": f"answer too large: {said}"}}
