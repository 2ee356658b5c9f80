"""How much of a provider's answer scvd reads: bounded as it comes, before the client parses it.

The openai client reads an error body whole (once per retry), keeps a stream's line until it ends
and hands on every event: a hostile or broken provider's 300 MB error, endless line or endless
answer grew scvd by as much. `cap()` (an httpx response hook) puts a counting stream in the body's
place, decoded first so that a compressed body is counted at the size it inflates to:
- an error answer (not 2xx) is cut at ERROR_BODY_LIMIT, silently: its start says what went wrong;
- an answer past `limit` bytes, or a line of it past a quarter of that (an SSE event's data is one
  line), raises the provider's failure for it, `too_large("answer" | "line", limit)`.
"""

from __future__ import annotations

import re
from contextlib import aclosing
from typing import Any, AsyncIterator, Callable

import httpx2

ERROR_BODY_LIMIT = 64 << 10
_LINE_END = re.compile(rb"\r\n|\r|\n")


def line_limit(limit: int) -> int:
    """The longest line of an answer of at most `limit` bytes."""
    return max(1, limit // 4)


TooLarge = Callable[[str, int], Exception]


def cap(response: Any, limit: int, too_large: TooLarge) -> None:
    """Bound what will be read of `response` (an httpx response, its body not read yet)."""
    decoded = httpx2.Response(response.status_code, headers=response.headers.copy(), stream=response.stream)
    response.headers.pop("content-encoding", None)  # decoded here: nothing is left to decode
    response.stream = _Counted(decoded, limit, too_large, error=not response.is_success)


class _Counted(httpx2.AsyncByteStream):
    def __init__(self, decoded: Any, limit: int, too_large: TooLarge, *, error: bool) -> None:
        self._decoded, self._limit, self._too_large, self._error = decoded, limit, too_large, error
        self._begun = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        if self._begun:  # the client drains the body's end after [DONE], so that the connection is reused:
            async for chunk in self._decoded.stream:  # the rest of the raw body, dropped as it comes
                yield chunk
            return
        self._begun = True
        total, line, longest = 0, 0, line_limit(self._limit)  # line: the bytes since the last line end
        async with aclosing(self._decoded.aiter_bytes()) as chunks:
            async for chunk in chunks:
                if self._error:
                    yield chunk[:ERROR_BODY_LIMIT - total]
                    total += len(chunk)
                    if total >= ERROR_BODY_LIMIT:
                        return
                    continue
                total += len(chunk)
                if total > self._limit:
                    raise self._too_large("answer", self._limit)
                if b"\n" in chunk or b"\r" in chunk:  # every line it ends or holds whole counts, not its tail only
                    parts = _LINE_END.split(chunk)
                    if line + len(parts[0]) > longest or max(map(len, parts[1:-1]), default=0) > longest:
                        raise self._too_large("line", longest)
                    line = len(parts[-1])
                else:
                    line += len(chunk)
                if line > longest:
                    raise self._too_large("line", longest)
                yield chunk

    async def aclose(self) -> None:
        await self._decoded.aclose()
