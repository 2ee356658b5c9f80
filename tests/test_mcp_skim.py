"""The skim of an MCP server's HTTP answer (scvd/mcp/skim.py): real bytes, a real gzip, through the
response hook scvd gives its HTTP client, read as the SDK reads them."""

from __future__ import annotations

import asyncio
import gzip
import io
import json
import re

import httpx2
import pytest

from scvd.mcp.skim import ITEMS_LIMIT, skim_response
from scvd.mcp.tool import OMITTED_KEY, OUTPUT_LIMIT, TOO_LARGE

CALL = json.dumps({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "items"}}).encode()
NOTIFICATION = json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}).encode()
SSE, JSON = "text/event-stream", "application/json"
MESSAGE_LIMIT = 64 << 20  # of one message from a server, decoded (docs/mcp.md)


def answer(result: dict) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": 7, "result": result}, separators=(",", ":")).encode()


MANY = answer({"content": [{"type": "text", "text": "i"}] * (ITEMS_LIMIT + 1)})
FEW = answer({"content": [{"type": "text", "text": "i"}] * ITEMS_LIMIT})
ITEMS_ERROR = {"code": TOO_LARGE, "message": f"its result has {ITEMS_LIMIT + 1} content items, above scvd's limit "
               f"of {ITEMS_LIMIT}; ask the tool for less"}
SIZE_ERROR = {"code": TOO_LARGE, "message": f"its answer is above {MESSAGE_LIMIT} bytes, scvd's limit of one "
              "message, so scvd stopped reading it; ask the tool for less"}


def error(body: bytes) -> dict:
    """The JSON-RPC error `body` (a JSON body, or an SSE event) answers call 7 with."""
    message = json.loads(body if body.startswith(b"{") else re.search(rb"(?:^|[\r\n])data: ([^\r\n]*)", body)[1])
    assert message["id"] == 7, message
    return message["error"]


def event(data: bytes, end: bytes = b"\n") -> bytes:
    return b"event: message" + end + b"data: " + data + end + end


def as_json(data: bytes) -> bytes:
    return data


class Body(httpx2.AsyncByteStream):
    """A body sent in the chunks given; counts those read."""

    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks, self.read = chunks, 0

    async def __aiter__(self):
        for chunk in self.chunks:
            self.read += 1
            yield chunk


def read(chunks: list[bytes], kind: str, encoding: str | None = None, sent: bytes = CALL) -> list[tuple[int, bytes]]:
    """What the SDK reads of a body sent in `chunks` to request `sent`, skimmed: each piece with how
    many chunks had been read by then."""
    body = Body(chunks)
    headers = {"content-type": kind, **({"content-encoding": encoding} if encoding else {})}
    got = httpx2.Response(200, headers=headers, stream=body,
                          request=httpx2.Request("POST", "http://127.0.0.1/mcp", content=sent))

    async def reading() -> list[tuple[int, bytes]]:
        await skim_response(got)
        return [(body.read, piece) async for piece in got.aiter_bytes() if piece]
    return asyncio.run(reading())


def skimmed(chunks: list[bytes], kind: str, encoding: str | None = None, sent: bytes = CALL) -> bytes:
    return b"".join(piece for _, piece in read(chunks, kind, encoding, sent))


def split(body: bytes, size: int) -> list[bytes]:
    return [body[i:i + size] for i in range(0, len(body), size)]


def gzipped(chunks: list[bytes]) -> bytes:
    """`chunks` as one gzip body, compressed as they come (a large body is never held whole)."""
    out = io.BytesIO()
    with gzip.GzipFile(fileobj=out, mode="wb", compresslevel=1) as writing:
        for chunk in chunks:
            writing.write(chunk)
    return out.getvalue()


@pytest.mark.parametrize("end", [b"\n", b"\r\n", b"\r"], ids=["lf", "crlf", "bare-cr"])
def test_an_sse_result_of_too_many_items_is_answered_with_kind_limit_whatever_its_lines_end_in(end):
    """The SSE spec lets a line end in LF, CRLF or a bare CR: the skim split lines on LF alone, so a
    stream in bare CRs went to the SDK unskimmed, its 10,001 items parsed on the loop."""
    small = event(FEW, end)
    body = skimmed(split(event(MANY, end) + small, 64 << 10), SSE)
    assert body.endswith(small)  # the next event as it came
    first = body.removesuffix(small)
    assert first.startswith(b"event: message" + end) and first.endswith(end + end), first[:40]
    assert error(first.removeprefix(b"event: message" + end).removesuffix(end + end)) == ITEMS_ERROR


@pytest.mark.parametrize("end", [b"\r\n", b"\r", b"\n"], ids=["crlf", "bare-cr", "lf"])
def test_an_sse_event_reaches_the_sdk_once_its_end_arrives_however_the_end_is_split(end):
    """A progress notification reaches the client while the call runs: each event is passed on once it
    ends, before the stream's next bytes are read, though its end (CRLF CRLF) comes in two chunks.
    Split on LF alone, a stream in bare CRs was held until it closed."""
    first, second = event(MANY, end), event(b'{"jsonrpc":"2.0","method":"notifications/progress"}', end)
    for cut in range(len(first) - 2 * len(end), len(first) + 1):
        pieces = read([first[:cut], first[cut:], second], SSE)
        before_second = b"".join(piece for chunks_read, piece in pieces if chunks_read < 3)
        assert before_second.rstrip(b"\r\n").endswith(b"}"), (cut, before_second[-40:])  # the whole first event
        assert error(before_second) == ITEMS_ERROR, cut
        assert b"".join(piece for _, piece in pieces).endswith(second), cut


@pytest.mark.parametrize("framed", [event, as_json], ids=["sse", "json"])
def test_a_gzip_answer_is_skimmed_as_a_plain_one(framed):
    """A gzip-encoded body went to the SDK unskimmed: its 10,001 items parsed on the loop."""
    kind = SSE if framed is event else JSON
    assert error(skimmed(split(gzip.compress(framed(MANY)), 4096), kind, "gzip")) == ITEMS_ERROR
    small = framed(FEW)
    assert skimmed(split(gzip.compress(small), 4096), kind, "gzip") == small  # inflated for the SDK to read


def test_a_json_body_is_skimmed_whole_however_it_is_split():
    assert error(skimmed(split(MANY, 1000), JSON)) == ITEMS_ERROR
    assert skimmed(split(FEW, 1000), JSON) == FEW


@pytest.mark.parametrize("kind", [SSE, JSON])
def test_an_answer_nested_too_deeply_for_msgspec_reaches_the_sdk_as_it_came(kind):
    """msgspec's RecursionError went up through the SDK's read of the body: the connection ended."""
    deep = b'{"jsonrpc":"2.0","id":7,"result":{"content":' + b"[" * 100_000 + b"]" * 100_000 + b"}}"
    framed = event(deep) if kind == SSE else deep
    assert skimmed(split(framed, 1 << 16), kind) == framed  # the SDK refuses it: its parse error answers the call


def test_a_structured_content_above_the_output_limit_is_left_out_its_size_in_the_meta():
    rows = {"rows": [{"i": i, "name": f"row {i}"} for i in range(OUTPUT_LIMIT // 16)]}
    big = answer({"content": [], "structuredContent": rows, "_meta": {"kept": 1}})
    result = json.loads(skimmed(split(big, 1 << 16), JSON))["result"]
    size = len(json.dumps(rows, separators=(",", ":")))
    assert result == {"content": [], "_meta": {"kept": 1, OMITTED_KEY: size}} and size > OUTPUT_LIMIT


def test_a_tools_list_of_more_than_4096_tools_reaches_the_sdk_cut_how_many_left_out_in_its_meta():
    # the SDK parsed each of 50,000 tools on the loop for a second; scvd takes at most 4096 from a server
    tools = [{"name": f"t{i}", "inputSchema": {"type": "object"}} for i in range(5000)]
    listing = answer({"tools": tools, "_meta": {"kept": 1}})
    result = json.loads(skimmed(split(listing, 1 << 16), JSON))["result"]
    assert result == {"tools": tools[:4096], "_meta": {"kept": 1, "scvd/toolsOmitted": 904}}
    whole = answer({"tools": tools[:4096]})
    assert skimmed([whole], JSON) == whole


def huge(framed) -> list[bytes]:
    """An answer of a 128 MiB text, 1 MiB a chunk (the one same object: little memory)."""
    head, tail = framed(answer({"content": [{"type": "text", "text": "|"}]})).split(b"|")
    return [head, *[b"x" * (1 << 20)] * (2 * MESSAGE_LIMIT >> 20), tail]


# an SSE body is split into events as it comes, a JSON one is not: the gzip decoder sits below both
@pytest.mark.parametrize("framed, encoding", [(event, None), (as_json, None), (as_json, "gzip")],
                         ids=["sse", "json", "json-gzip"])
def test_an_answer_above_64_mib_once_decoded_is_read_no_further_and_fails_its_call_alone(framed, encoding):
    """The bound counts the bytes the SDK would read: a gzip body of a few hundred KB on the wire was
    inflated whole by the SDK, and a plain one had no bound at all."""
    chunks = split(gzipped(huge(framed)), 4096) if encoding else huge(framed)
    pieces = read(chunks, SSE if framed is event else JSON, encoding)
    assert error(b"".join(piece for _, piece in pieces)) == SIZE_ERROR
    assert pieces[-1][0] < len(chunks)  # its bytes dropped as they came: the rest never read


def test_an_answer_above_64_mib_to_a_notification_is_dropped_without_an_answer():
    """A notification's POST is answered by no message: the SDK reads nothing there."""
    assert skimmed(huge(as_json), JSON, sent=NOTIFICATION) == b""


def heard(body: bytes, kind: str, chunk: int = 7) -> list[str]:
    """The messages of errors of code -32000 the skim tells the link of in `body`, sent `chunk` bytes at
    a time; the body passed on as it came."""
    told: list[str] = []
    got = httpx2.Response(200, headers={"content-type": kind}, stream=Body(split(body, chunk)),
                          request=httpx2.Request("POST", "http://127.0.0.1/mcp", content=CALL))

    async def reading() -> bytes:
        await skim_response(got, said=told.append)
        return b"".join([piece async for piece in got.aiter_bytes()])
    assert asyncio.run(reading()) == body
    return told


def erred(code: int, message: str) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": 7, "error": {"code": code, "message": message}}).encode()


@pytest.mark.parametrize("end", [b"\n", b"\r\n", b"\r"], ids=["lf", "crlf", "bare-cr"])
def test_a_servers_own_errors_of_code_32000_are_told_to_the_link(end):
    """The MCP SDK answers a call whose connection closed with -32000, the code JSON-RPC leaves to
    servers: the link tells the server's own from it by their messages, which the skim passes on."""
    busy, other = erred(-32000, "rate limited: try in 30 s"), erred(-32603, "-32000 apples")
    assert heard(busy, JSON) == ["rate limited: try in 30 s"]
    assert heard(other, JSON) == heard(answer({"content": [{"type": "text", "text": "-32000"}]}), JSON) == []
    cut = busy.index(b' "error"')  # one message on two data lines: read joined by a LF, in place of that space
    split_data = b"data: " + busy[:cut] + end + b"data: " + busy[cut + 1:] + end + end
    stream = event(other, end) + split_data + event(erred(-32000, "second"), end)[:-len(end)]  # the last unended
    assert heard(stream, SSE) == ["rate limited: try in 30 s", "second"]


def test_a_large_event_holding_32000_in_its_text_is_split_into_lines_once(monkeypatch):
    """Looking for a server's -32000 error split a large event into lines a second time, on the loop:
    a 52 MiB result holding those bytes stalled every client twice as long. Such an error is short."""
    from scvd.mcp import skim

    class Counted:  # skim's line splitter, counting the bytes of each block it splits
        def __init__(self, pattern: re.Pattern[bytes]) -> None:
            self.pattern, self.sizes = pattern, []

        def split(self, block: bytes) -> list[bytes]:
            self.sizes.append(len(block))
            return self.pattern.split(block)

    lines = Counted(skim._LINE_END)
    monkeypatch.setattr(skim, "_LINE_END", lines)
    large = event(answer({"content": [{"type": "text", "text": "-32000 " + "x" * (1 << 20)}]}))
    body = large + event(erred(-32000, "busy"))  # the server's own, in the same block: still told
    assert heard(body, SSE, chunk=len(body)) == ["busy"]
    assert [size for size in lines.sizes if size >= len(large)] == [len(body)]


@pytest.mark.parametrize(("message", "skipped"), [
    ({"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": "x"}}, True),
    ({"jsonrpc": "2.0", "id": 3, "method": "notifications/message", "params": {}}, False),  # a request: answered
    ({"method": "notifications/message", "params": {}}, False),  # not JSON-RPC: logged as such
    ({"jsonrpc": "2.0", "method": "notifications/progress",
      "params": {"progressToken": 1, "progress": 1, "message": '"notifications/message"'}}, False),
])
def test_only_a_servers_log_notification_is_skipped_before_the_sdk_parses_it(message, skipped):
    """A flood of log notifications, which scvd shows nowhere, held a call's answer up behind the
    SDK's parse of each; what is not one still reaches the SDK."""
    from scvd.mcp.skim import is_log_message

    assert is_log_message(json.dumps(message).encode()) is skipped
    assert is_log_message(b'{"jsonrpc": "2.0", "method": "notifications/message"') is False  # cut short
