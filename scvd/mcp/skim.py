"""A large message from an MCP server, skimmed before the SDK parses it (stdio and HTTP alike).

The SDK parses a message whole, on the loop, and scvd then walks a result item by
item: a million content items held every client of scvd up for 30 s, 10 MB of
structuredContent for seconds. msgspec skims such a message (the items left
unparsed) and scvd answers it in the server's place, or leaves out what it would drop.
An HTTP body is read decoded here (a gzip one too) and bounded at MESSAGE_LIMIT, as a stdio
line is: a larger answer fails its call alone, its bytes dropped as they come. The messages of the
errors of code -32000 a server sends are kept for the link (stdio.py keeps a stdio server's): the SDK says
a connection closed with that code too. Such an error is short: it is looked for in a body or event
under CHECKED_FROM bytes only, so a large result is split into lines once, as the skim does anyway.
A stdio server's log notification is skipped here too (is_log_message), a flood of them unparsed.
"""

from __future__ import annotations

import re
from contextlib import aclosing
from typing import Any, AsyncIterator, Callable, Iterable

import httpx2
import msgspec

from ..config import MCP_TOOLS_CEILING
from .tool import OUTPUT_LIMIT, TOO_LARGE, omitted

# content items of one result: the SDK and scvd take time per item, on the loop, and its text is cut
# at 1 MiB anyway. One with more fails its call.
ITEMS_LIMIT = 10_000
CHECKED_FROM = 3 * ITEMS_LIMIT  # `{},` is the shortest item: a shorter message holds fewer
# one message from a server, decoded: a stdio line, an HTTP body, an SSE event (the SDK's own bound of
# an event, 1 MiB, is raised to it: a 2 MiB result failed as if the server went away)
MESSAGE_LIMIT = 64 << 20
# in a tools/list answer's _meta: how many tools scvd cut off its end unparsed, past MCP_TOOLS_CEILING
TOOLS_OMITTED_KEY = "scvd/toolsOmitted"
_LINE_END = re.compile(rb"(\r\n|\r|\n)")  # an SSE line's end: each of them, as the spec says
_EVENT_END = re.compile(rb"(?:\r\n|\r(?!\n)|\n){2}")  # a line's end, then an empty line's
# JSON-RPC leaves it to servers (a rate limit, say), and the MCP SDK answers a call whose connection closed
# with it: the link tells a server's own from the SDK's by the messages the server sent with it
CLOSED_CODE = -32000
_CLOSED_CODE_BYTES = b"%d" % CLOSED_CODE
CLOSED_CODE_KEPT = 20  # of those messages, per connection


class _Result(msgspec.Struct):
    content: list[msgspec.Raw] = []  # each item skipped over, unparsed
    structured: msgspec.Raw = msgspec.field(default=msgspec.Raw(), name="structuredContent")
    tools: msgspec.Raw = msgspec.Raw()  # a tools/list answer's (Raw: a result's `tools` of another shape is no error)


class _Answer(msgspec.Struct):
    id: int | str | None = None
    result: _Result | None = None


class _Notified(msgspec.Struct):
    jsonrpc: str = ""
    method: str = ""
    id: msgspec.Raw = msgspec.Raw()


_LOG_METHOD = b'"notifications/message"'


def is_log_message(message: bytes) -> bool:
    """Whether `message` is a server's log notification (`notifications/message`), which scvd shows
    nowhere: skipped unparsed, as a flood of them held a call's answer up for minutes behind the
    SDK's parse of each (about 20,000 a second). A request of that method (with an `id`) is not one."""
    if _LOG_METHOD not in message:  # the bytes first: most messages are no log line
        return False
    try:
        notified = msgspec.json.decode(message, type=_Notified)
    except (msgspec.DecodeError, RecursionError):  # not JSON-RPC: the SDK judges it
        return False
    return notified.jsonrpc == "2.0" and notified.method == "notifications/message" and not notified.id


def replacement(message: bytes) -> bytes | None:
    """What the SDK reads in place of `message`: the error that answers a result of more than
    ITEMS_LIMIT content items; a tools/list answer cut to MCP_TOOLS_CEILING tools; the result without a
    structuredContent above OUTPUT_LIMIT, which scvd leaves out anyway (its size in _meta); None for any
    other message, read as it is."""
    if len(message) < CHECKED_FROM:
        return None
    try:
        answer = msgspec.json.decode(message, type=_Answer)
    except msgspec.DecodeError:  # not a tool's result: the SDK judges it
        return None
    except RecursionError:  # msgspec walks what it skips: nested too deeply, which the SDK refuses as JSON
        return None  # (raised, it ended the reading of a stdio server's stdout, or an HTTP connection)
    if answer.id is None or answer.result is None:
        return None
    if len(answer.result.content) > ITEMS_LIMIT:
        return msgspec.json.encode({"jsonrpc": "2.0", "id": answer.id, "error": {
            "code": TOO_LARGE, "message": f"its result has {len(answer.result.content)} content items, above "
            f"scvd's limit of {ITEMS_LIMIT}; ask the tool for less"}})
    if len(answer.result.tools) > MCP_TOOLS_CEILING and len(tools := _items(answer.result.tools)) > MCP_TOOLS_CEILING:
        return _tools_cut(message, tools)  # (the bytes first: fewer bytes hold fewer tools)
    if len(answer.result.structured) > OUTPUT_LIMIT:  # its compact JSON is no longer: one within is kept unmeasured
        return _left_out(message, len(msgspec.json.format(answer.result.structured, indent=-1)))
    return None


def _left_out(message: bytes, size: int) -> bytes | None:
    """The result `message` without its structuredContent of `size` bytes, its _meta as tool.omitted
    says; None when that rule keeps it."""
    answer = msgspec.json.decode(message, type=dict[str, msgspec.Raw])
    result = msgspec.json.decode(answer["result"], type=dict[str, msgspec.Raw])
    meta = msgspec.json.decode(result.get("_meta", b"null")) or {}
    if (marked := omitted(size, meta)) is None:
        return None
    del result["structuredContent"]
    result["_meta"] = msgspec.Raw(msgspec.json.encode(marked))
    answer["result"] = msgspec.Raw(msgspec.json.encode(result))
    return msgspec.json.encode(answer)


def _items(raw: msgspec.Raw) -> list[msgspec.Raw]:
    try:
        return msgspec.json.decode(raw, type=list[msgspec.Raw])
    except msgspec.DecodeError:  # not a list: the SDK judges it
        return []


def _tools_cut(message: bytes, tools: list[msgspec.Raw]) -> bytes:
    """The tools/list answer `message` with its first MCP_TOOLS_CEILING tools, the number of those left out
    under TOOLS_OMITTED_KEY in its _meta: the SDK parses each tool on the loop (50,000 took a second), and
    scvd takes no more than that many from a server anyway."""
    answer = msgspec.json.decode(message, type=dict[str, msgspec.Raw])
    result = msgspec.json.decode(answer["result"], type=dict[str, msgspec.Raw])
    meta = msgspec.json.decode(result.get("_meta", b"null"))
    result["tools"] = msgspec.Raw(b"[" + b",".join(tools[:MCP_TOOLS_CEILING]) + b"]")
    left = len(tools) - MCP_TOOLS_CEILING
    result["_meta"] = msgspec.Raw(msgspec.json.encode({**(meta if isinstance(meta, dict) else {}),
                                                       TOOLS_OMITTED_KEY: left}))
    answer["result"] = msgspec.Raw(msgspec.json.encode(result))
    return msgspec.json.encode(answer)


class _ErrorData(msgspec.Struct):
    code: int
    message: str


class _Erred(msgspec.Struct):
    error: _ErrorData | None = None


def said_closed_code(messages: Iterable[bytes]) -> list[str]:
    """The messages of the errors of code CLOSED_CODE among `messages` (JSON bodies, SSE events' data).
    Such an error is a short message: one of CHECKED_FROM bytes or more (a large result holding the
    bytes in its text) is not looked at, so its bytes are not split or decoded a second time."""
    said = []
    for message in messages:
        if len(message) >= CHECKED_FROM or _CLOSED_CODE_BYTES not in message:  # most: one look for the bytes
            continue
        try:
            erred = msgspec.json.decode(message, type=_Erred)
        except (msgspec.DecodeError, RecursionError):  # not one error message: the SDK judges it
            continue
        if erred.error is not None and erred.error.code == CLOSED_CODE:
            said.append(erred.error.message)
    return said


def _event_data(lines: list[bytes]) -> list[bytes]:
    """The data of each SSE event of `lines` (without their ends): its `data:` lines' values joined by
    LFs, as a client reads it; an event of CHECKED_FROM bytes or more is left out, its lines not copied."""
    events: list[bytes] = []
    data: list[bytes] = []
    size = 0  # of the event's data lines so far: 0 while it has none
    for line in lines:
        if line.startswith(b"data:"):
            size += len(line)
            if size < CHECKED_FROM:
                data.append(line[6:] if line.startswith(b"data: ") else line[5:])
        elif not line and size:  # an empty line ends the event
            if size < CHECKED_FROM:
                events.append(b"\n".join(data))
            data, size = [], 0
    return events + [b"\n".join(data)] if 0 < size < CHECKED_FROM else events


class _Request(msgspec.Struct):
    id: int | str | None = None


async def skim_response(response: Any, said: Callable[[str], Any] | None = None) -> None:
    """An httpx response hook: a POST's body (JSON, or an SSE stream's events) decoded, bounded and
    skimmed as it is read; `said` is given each message of an error of code CLOSED_CODE in it."""
    kind = response.headers.get("content-type", "")
    sse = kind.startswith("text/event-stream")
    if response.request.method != "POST" or not (sse or kind.startswith("application/json")):
        return
    # decoded here, so that a compressed body is bounded by what it inflates to: the response itself
    # then has nothing left to decode
    decoded = httpx2.Response(response.status_code, headers=response.headers.copy(), stream=response.stream)
    response.headers.pop("content-encoding", None)
    response.stream = _Skimmed(decoded, sse=sse, answering=_request_id(response.request), said=said)


def _request_id(request: Any) -> int | str | None:
    """The id of the JSON-RPC request a POST sent (its answer is in the body), or None."""
    try:
        return msgspec.json.decode(request.content, type=_Request).id
    except (msgspec.DecodeError, httpx2.RequestNotRead):  # a batch, or not a request
        return None


class _Skimmed(httpx2.AsyncByteStream):
    """A body held whole (JSON) or an event at a time (SSE), and skimmed then; a message above
    MESSAGE_LIMIT is read no further, and its request answered with a TOO_LARGE error in its place."""

    def __init__(self, decoded: Any, *, sse: bool, answering: int | str | None,
                 said: Callable[[str], Any] | None = None) -> None:
        self._decoded, self._sse, self._answering, self._said = decoded, sse, answering, said

    async def __aiter__(self) -> AsyncIterator[bytes]:
        pending = bytearray()  # the body, or the stream's event not yet complete
        async with aclosing(self._decoded.aiter_bytes()) as chunks:
            async for chunk in chunks:
                start = max(0, len(pending) - 3)  # an event's end may begin in what came before
                pending += chunk
                # an event's end ends with a CR or LF of this chunk: the regex (~20 ms a MiB) only then
                if self._sse and (b"\n" in chunk or b"\r" in chunk) and (end := _events_end(pending, start)):
                    yield self._fixed(bytes(pending[:end]))
                    del pending[:end]
                if len(pending) > MESSAGE_LIMIT:
                    yield self._too_large()
                    return
        if pending:
            yield self._fixed(bytes(pending))

    def _too_large(self) -> bytes:
        if self._answering is None:  # a notification's POST: the SDK reads no answer
            return b""
        error = msgspec.json.encode({"jsonrpc": "2.0", "id": self._answering, "error": {
            "code": TOO_LARGE, "message": f"its answer is above {MESSAGE_LIMIT} bytes, scvd's limit of one "
            "message, so scvd stopped reading it; ask the tool for less"}})
        return b"data: " + error + b"\n\n" if self._sse else error

    def _fixed(self, block: bytes) -> bytes:
        if not self._sse:
            self._heard([block])
            return block if len(block) < CHECKED_FROM else replacement(block) or block
        if len(block) < CHECKED_FROM and _CLOSED_CODE_BYTES not in block:  # most events: nothing to split for
            return block
        parts = _LINE_END.split(block)  # the lines, each followed by its end as it was: once (~20 ms a MiB)
        self._heard(_event_data(parts[::2]))
        for i in range(0, len(parts), 2):
            line = parts[i]
            if len(line) >= CHECKED_FROM and line.startswith(b"data:"):
                if (fixed := replacement(line[5:].strip())) is not None:
                    parts[i] = b"data: " + fixed
        return b"".join(parts)

    def _heard(self, messages: Iterable[bytes]) -> None:
        if self._said is not None:
            for message in said_closed_code(messages):
                self._said(message)

    async def aclose(self) -> None:
        await self._decoded.aclose()


def _events_end(pending: bytearray, start: int) -> int:
    """Where the last complete event in `pending` ends (0: none), searched from `start`."""
    end = 0
    for end_of_event in _EVENT_END.finditer(pending, start):
        end = end_of_event.end()
    return end
