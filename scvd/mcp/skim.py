"""A large message from an MCP server, skimmed before the SDK parses it (stdio and HTTP alike).

The SDK parses a message whole, on the loop, and scvd then walks a result item by
item: a million content items held every client of scvd up for 30 s, 10 MB of
structuredContent for seconds. msgspec skims such a message (the items left
unparsed) and scvd answers it in the server's place, or leaves out what it would drop.
"""

from __future__ import annotations

import re
from typing import Any, AsyncIterator

import httpx2
import msgspec

from .tool import OMITTED_KEY, OUTPUT_LIMIT, TOO_MANY_ITEMS

# content items of one result: the SDK and scvd take time per item, on the loop, and its text is cut
# at 1 MiB anyway. One with more fails its call.
ITEMS_LIMIT = 10_000
CHECKED_FROM = 3 * ITEMS_LIMIT  # `{},` is the shortest item: a shorter message holds fewer
_LINE_END = re.compile(rb"(\r\n|\r|\n)")  # an SSE line's end: each of them, as the spec says


class _Result(msgspec.Struct):
    content: list[msgspec.Raw] = []  # each item skipped over, unparsed
    structured: msgspec.Raw = msgspec.field(default=msgspec.Raw(), name="structuredContent")


class _Answer(msgspec.Struct):
    id: int | str | None = None
    result: _Result | None = None


def replacement(message: bytes) -> bytes | None:
    """What the SDK reads in place of `message`: the error that answers a result of more than
    ITEMS_LIMIT content items; the result without a structuredContent above OUTPUT_LIMIT, which scvd
    leaves out anyway (its size in _meta); None for any other message, read as it is."""
    if len(message) < CHECKED_FROM:
        return None
    try:
        answer = msgspec.json.decode(message, type=_Answer)
    except msgspec.DecodeError:  # not a tool's result: the SDK judges it
        return None
    if answer.id is None or answer.result is None:
        return None
    if len(answer.result.content) > ITEMS_LIMIT:
        return msgspec.json.encode({"jsonrpc": "2.0", "id": answer.id, "error": {
            "code": TOO_MANY_ITEMS, "message": f"its result has {len(answer.result.content)} content items, above "
            f"scvd's limit of {ITEMS_LIMIT}; ask the tool for less"}})
    if len(answer.result.structured) > OUTPUT_LIMIT:
        size = len(msgspec.json.format(answer.result.structured, indent=-1))  # as compact JSON
        if size > OUTPUT_LIMIT:
            return _left_out(message, size)
    return None


def _left_out(message: bytes, size: int) -> bytes:
    """The result `message` without its structuredContent, its size under OMITTED_KEY in the _meta."""
    answer = msgspec.json.decode(message, type=dict[str, msgspec.Raw])
    result = msgspec.json.decode(answer["result"], type=dict[str, msgspec.Raw])
    del result["structuredContent"]
    meta = msgspec.json.decode(result.get("_meta", b"null")) or {}
    if isinstance(meta, dict):  # else the SDK refuses the result, as it would have
        result["_meta"] = msgspec.Raw(msgspec.json.encode({**meta, OMITTED_KEY: size}))
    answer["result"] = msgspec.Raw(msgspec.json.encode(result))
    return msgspec.json.encode(answer)


async def skim_response(response: Any) -> None:
    """An httpx response hook: a POST's body (JSON, or an SSE stream's data lines) skimmed as it is read."""
    kind = response.headers.get("content-type", "")
    if response.request.method != "POST" or response.headers.get("content-encoding", "identity") != "identity":
        return  # a compressed body is the SDK's alone: it is read decoded
    if kind.startswith("application/json") or kind.startswith("text/event-stream"):
        response.stream = _Skimmed(response.stream, sse=kind.startswith("text/event-stream"))


class _Skimmed(httpx2.AsyncByteStream):
    def __init__(self, inner: Any, *, sse: bool) -> None:
        self._inner, self._sse = inner, sse

    async def __aiter__(self) -> AsyncIterator[bytes]:
        pending = bytearray()
        async for chunk in self._inner:
            end = max(chunk.rfind(b"\n"), chunk.rfind(b"\r")) if self._sse else -1
            if end < 0:  # a JSON body is skimmed whole; an event's line once it is complete
                pending += chunk
                continue
            pending += chunk[:end + 1]
            yield self._fixed(bytes(pending))
            pending = bytearray(chunk[end + 1:])
        if pending:
            yield self._fixed(bytes(pending))

    def _fixed(self, block: bytes) -> bytes:
        if len(block) < CHECKED_FROM:
            return block
        if not self._sse:
            return replacement(block) or block
        parts = _LINE_END.split(block)  # the lines, each followed by its end as it was
        for i in range(0, len(parts), 2):
            line = parts[i]
            if len(line) >= CHECKED_FROM and line.startswith(b"data:"):
                if (fixed := replacement(line[5:].strip())) is not None:
                    parts[i] = b"data: " + fixed
        return b"".join(parts)

    async def aclose(self) -> None:
        await self._inner.aclose()
