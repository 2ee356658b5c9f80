"""A line on a stdio server's stdout that the MCP SDK does not read as JSON-RPC: the call it answers
fails at once, and the line is logged.

The SDK's session drops such a line with a debug message: an answer with neither `result` nor
`error`, or one nested deeper than its parser goes, left its call waiting out the dispatch timeout
(15 min by default), the server `ready` and nothing logged. A line with `jsonrpc` and an `id` at its
top and no `method` answers a request of scvd's: an error answers that request in the server's place
(as skim.py answers a result too large), which fails the call alone; the connection stays. A line with
a `method` is the server's own request or notification: its id is the server's, and fails no call of
scvd's. A line without `jsonrpc` is a log line (`{"level":"info","id":3,...}`), whose id may be the
call's it logs: the answer that follows it is the call's. A line msgspec cannot read (not JSON, or
nested deeper than it walks) is scanned whole for these keys, on a thread when it is long; one over
SCAN_WHOLE at its ends only (its first 64 KiB, and an `id` ending it), as a scan cannot be stopped and
the server's later lines wait for it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Callable

import msgspec
import mcp_types as types
import pydantic
from mcp.shared.message import SessionMessage

from ..errors import NotMcpLine
from ..lenient_json import edge_values, top_level_values
from ..text import printable

log = logging.getLogger("scvd.mcp")

NOT_MCP = -32091  # the JSON-RPC error code scvd answers such an answer with (TOO_LARGE's neighbour)
LOG_INTERVAL = 60.0  # seconds: a server that logs to its stdout writes one warning a minute, not one a line
LINE_KEPT, LINE_LOGGED = 8192, 500  # chars of a line kept, and logged once its secrets are out
SCAN_ON_LOOP = EDGE = 64 << 10  # bytes: a longer line is looked into on a thread; one over SCAN_WHOLE, at its ends
SCAN_WHOLE = 1 << 20  # bytes: a scan takes up to ~0.75 s a MiB, cannot be stopped and holds up the later lines
_KEYS = ("id", "method", "jsonrpc")
_ANSWERS = (("JSONRPCResponse",), ("JSONRPCError",))  # the SDK's names of an answer's shapes


class NotMcp(NotMcpLine):
    """A line the SDK refused (errors.NotMcpLine), its first LINE_KEPT chars kept; `answers` None: not
    known, its middle unread."""

    def __init__(self, line: bytes, answers: bool | None) -> None:
        super().__init__(line, answers, LINE_KEPT)


class _Head(msgspec.Struct):
    id: Any = None
    method: msgspec.Raw = msgspec.Raw()  # its presence alone counts
    jsonrpc: msgspec.Raw = msgspec.Raw()  # so does this one's


_head = msgspec.json.Decoder(_Head)


def answered(line: bytes) -> tuple[int | str | None, bool | None]:
    """The id of the request of scvd's that `line` answers: its outer `id`, when it has `jsonrpc` and
    no `method`; and whether it answers one (None: not known, for none was found in its ends)."""
    whole = True
    try:
        head = _head.decode(line)
        ident, asks, rpc = head.id, len(head.method) > 0, len(head.jsonrpc) > 0
    except (msgspec.DecodeError, RecursionError):  # not JSON, or nested deeper than msgspec walks: scanned
        whole = len(line) <= SCAN_WHOLE  # an `id` after a deep result counts: its call would wait for good
        found = top_level_values(line, _KEYS) if whole else edge_values(line[:EDGE], line[-EDGE:], _KEYS)
        ident, asks, rpc = found["id"], found["method"] is not None, found["jsonrpc"] is not None
        rpc = rpc or not whole and b'"jsonrpc"' in line[-EDGE:]  # after the nesting too, as its id may be
    if asks or not rpc or isinstance(ident, bool) or not isinstance(ident, int | str):
        return None, None if not (whole or asks) else False  # an id of 2.5 is no request's
    return ident, True


async def answered_off_loop(line: bytes) -> tuple[int | str | None, bool | None]:
    """answered(), on a thread for a line longer than SCAN_ON_LOOP."""
    return answered(line) if len(line) <= SCAN_ON_LOOP else await asyncio.to_thread(answered, line)


def stand_in(ident: int | str, line: bytes, exc: pydantic.ValidationError) -> SessionMessage:
    """The error that answers request `ident` in place of `line`, quoted whole: the link hides the
    server's secrets in it, then cuts it."""
    text = line.decode("utf-8", "replace").rstrip()
    said = (f"its answer is not MCP's JSON-RPC ({_why(exc)}): {text}; report it to the server's author")
    return SessionMessage(types.JSONRPCError(jsonrpc="2.0", id=ident, error=types.ErrorData(code=NOT_MCP, message=said)))


def _why(exc: pydantic.ValidationError) -> str:
    """What the SDK found wrong with an answer: its JSON, or the fields of both shapes an answer has."""
    found = exc.errors(include_url=False, include_input=False)
    if bad_json := next((e["msg"] for e in found if e["type"] == "json_invalid"), None):
        return bad_json  # "Invalid JSON: recursion limit exceeded at line 1 column 202"
    missing = {e["loc"] for e in found if e["type"] == "missing"}
    said = ["neither `result` nor `error`"] if {("JSONRPCResponse", "result"), ("JSONRPCError", "error")} <= missing else []
    for e in found:
        where = ".".join(map(str, e["loc"][1:]))
        if e["loc"][:1] in _ANSWERS and not (e["type"] == "missing" and where in ("result", "error")):
            said.append(f"`{where}`: {e['msg']}")
    return "; ".join(dict.fromkeys(said)) or "not an answer"  # each once: both shapes have `jsonrpc`


class Skipped:
    """Logs a server's lines that are not MCP's: the first at once, then one per LOG_INTERVAL at most,
    with how many were not logged since."""

    def __init__(self, name: str) -> None:
        self.name, self._next, self._quiet = name, 0.0, 0

    def heard(self, line: NotMcp, hide: Callable[[str], str]) -> None:
        now = time.monotonic()
        if now < self._next:
            self._quiet += 1
            return
        hidden = hide(line.head)  # before the cut: a secret it fell in would show its other part
        shown = printable(hidden[:LINE_LOGGED])
        if len(hidden) > LINE_LOGGED or line.size > LINE_KEPT:
            shown += f" ... ({line.size:,} bytes in all)"
        more = f" ({self._quiet} more since the last one logged)" if self._quiet else ""
        fate = {True: "the call waiting on its id, if any, fails with it",
                False: "it answers no request of scvd's, and is skipped",
                None: (f"it is over {SCAN_WHOLE >> 20} MiB, read at its ends only, which answer no request of "
                       "scvd's: a call it answers waits out its timeout")}[line.answers]
        log.warning("mcp server %s: a line on its stdout is not MCP's JSON-RPC%s: %s (%s)", self.name, more, shown,
                    fate)
        self._next, self._quiet = now + LOG_INTERVAL, 0
