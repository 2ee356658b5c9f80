"""A streamable-HTTP MCP server (the SDK's own server class) with the quirks real ones have, for tests.

`python mcp_http_quirks.py PORT [hang-delete] [bare-cr] [json] [gzip]`: serves on 127.0.0.1:PORT at /mcp;
answers the optional GET stream with 405, as many servers do; with `hang-delete`, never answers the session
DELETE; with `bare-cr`, ends its SSE lines with a bare CR, which the SSE spec allows; with `json`, answers
a POST with a JSON body, not an SSE stream; with `gzip`, sends every POST's answer gzip-encoded. Its tool
`strict` answers every call with a JSON-RPC error (-32602, invalid params), and `busy` with one of code
-32000 (the MCP SDK's for a closed connection too);
a call of `picky` is answered HTTP 400 with that error in the body, as the spec allows, and a call of `status`
HTTP `code` (a 500, a 404 for a session the server forgot) with a plain text body. `items`
answers `n` text items; `rows` answers `n` rows of structuredContent; `mib` answers a text of `mib`
MiB, written 1 MiB at a time (gzip-encoded, a small body inflating to that). `noresult` is answered with
neither `result` nor `error`, and `deep` with a result whose content nests 100,000 arrays deep. `sent`
answers the Authorization, X-Api-Key and X-Team headers its request came with (an isError result with `fail`).
"""

from __future__ import annotations

import asyncio
import json
import sys
import zlib

import uvicorn
from mcp.server.mcpserver import Context, MCPServer
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult, TextContent

server = MCPServer("quirks")


@server.tool()
def hello(name: str) -> str:
    """Say hello."""
    return f"hello {name}"


@server.tool()
def strict(n: int) -> str:
    """Refuses every n with a JSON-RPC error."""
    raise MCPError(-32602, f"n out of range: {n}")


@server.tool()
def busy() -> str:
    """Refuses every call with a JSON-RPC error of code -32000."""
    raise MCPError(-32000, "rate limited: try in 30 s")


@server.tool()
def picky(n: int) -> str:
    """Never reached: its calls are refused at the HTTP layer."""
    return str(n)


@server.tool()
def status(code: int) -> str:
    """Never reached: its calls are answered with HTTP status `code`."""
    return str(code)


@server.tool()
def items(n: int) -> list[TextContent]:
    """Answers n text items."""
    return [TextContent(type="text", text=str(i)) for i in range(n)]


@server.tool(structured_output=False)
def mib(mib: int) -> str:
    """Never reached: its answer is written at the HTTP layer."""
    return ""


@server.tool()
def noresult() -> str:
    """Never reached: its answer is written at the HTTP layer."""
    return ""


@server.tool()
def deep() -> str:
    """Never reached: its answer is written at the HTTP layer."""
    return ""


@server.tool(structured_output=False)
def rows(n: int) -> CallToolResult:
    """Answers n rows of structured content."""
    return CallToolResult(content=[TextContent(type="text", text=f"{n} rows")],
                          structured_content={"rows": [{"i": i, "name": f"row {i}"} for i in range(n)]})


@server.tool(structured_output=False)
def sent(ctx: Context, fail: bool = False) -> CallToolResult:
    """Answers the credentials its request came with; with `fail`, fails quoting them."""
    headers = ctx.request_context.request.headers
    said = "; ".join(f"{name}: {headers.get(name)}" for name in ("Authorization", "X-Api-Key", "X-Team"))
    return CallToolResult(content=[TextContent(type="text", text=f"refused {said}" if fail else said)], is_error=fail)


async def _body(receive) -> bytes:
    body, more = b"", True
    while more:
        message = await receive()
        body, more = body + message.get("body", b""), message.get("more_body", False)
    return body


def bare_cr(send):
    """`send`, with the line ends of an SSE body made bare CRs."""
    sse = False

    async def sending(message):
        nonlocal sse
        if message["type"] == "http.response.start":
            sse = any(k == b"content-type" and v.startswith(b"text/event-stream") for k, v in message["headers"])
        elif message["type"] == "http.response.body" and sse:
            message = {**message, "body": message.get("body", b"").replace(b"\r\n", b"\r").replace(b"\n", b"\r")}
        await send(message)
    return sending


def gzipped(send):
    """`send`, with each body gzip-encoded as it goes (an SSE event reaches the client when sent)."""
    packer = zlib.compressobj(1, zlib.DEFLATED, zlib.MAX_WBITS | 16)

    async def sending(message):
        if message["type"] == "http.response.start":
            headers = [(k, v) for k, v in message["headers"] if k != b"content-length"]
            message = {**message, "headers": headers + [(b"content-encoding", b"gzip")]}
        elif message["type"] == "http.response.body":
            body = packer.compress(message.get("body", b""))
            more = message.get("more_body", False)
            message = {**message, "body": body + packer.flush(zlib.Z_SYNC_FLUSH if more else zlib.Z_FINISH)}
        await send(message)
    return sending


async def answer_mib(request: dict, json_body: bool, send) -> None:
    """The answer of a call of `mib`: its text written 1 MiB at a time, never held whole."""
    head = json.dumps({"jsonrpc": "2.0", "id": request["id"], "result": {"content": [
        {"type": "text", "text": "TEXT"}]}}).encode()
    before, after = head.split(b"TEXT")
    kind = b"application/json" if json_body else b"text/event-stream"
    if not json_body:
        before, after = b"event: message\r\ndata: " + before, after + b"\r\n\r\n"
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", kind)]})
    await send({"type": "http.response.body", "body": before, "more_body": True})
    for _ in range(request["params"]["arguments"]["mib"]):
        await send({"type": "http.response.body", "body": b"x" * (1 << 20), "more_body": True})
    await send({"type": "http.response.body", "body": after})


async def answer_badly(request: dict, json_body: bool, send) -> None:
    """The answer of a call of `noresult` or `deep`, which the SDK's parser refuses."""
    ident = json.dumps(request["id"]).encode()
    if request["params"]["name"] == "noresult":
        body = b'{"jsonrpc":"2.0","id":' + ident + b"}"
    else:
        body = b'{"jsonrpc":"2.0","id":' + ident + b',"result":{"content":' + b"[" * 100_000 + b"]" * 100_000 + b"}}"
    kind = b"application/json" if json_body else b"text/event-stream"
    if not json_body:
        body = b"event: message\r\ndata: " + body + b"\r\n\r\n"
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", kind)]})
    await send({"type": "http.response.body", "body": body})


def quirky(app, hang_delete: bool, cr: bool, json_body: bool = False, gzip: bool = False):
    async def asgi(scope, receive, send):
        if cr:
            send = bare_cr(send)
        if gzip and scope["type"] == "http" and scope["method"] == "POST":
            send = gzipped(send)
        if scope["type"] == "http" and scope["method"] == "POST":
            body = await _body(receive)
            request = json.loads(body or b"null")
            if isinstance(request, dict) and request.get("method") == "tools/call" \
                    and request.get("params", {}).get("name") == "mib":
                await answer_mib(request, json_body, send)
                return
            if isinstance(request, dict) and request.get("method") == "tools/call" \
                    and request.get("params", {}).get("name") in ("noresult", "deep"):
                await answer_badly(request, json_body, send)
                return
            if isinstance(request, dict) and request.get("method") == "tools/call" \
                    and request.get("params", {}).get("name") == "picky":
                error = {"jsonrpc": "2.0", "id": request.get("id"),
                         "error": {"code": -32602, "message": "refused at the HTTP layer"}}
                await send({"type": "http.response.start", "status": 400,
                            "headers": [(b"content-type", b"application/json")]})
                await send({"type": "http.response.body", "body": json.dumps(error).encode()})
                return
            if isinstance(request, dict) and request.get("method") == "tools/call" \
                    and request.get("params", {}).get("name") == "status":
                await send({"type": "http.response.start", "status": request["params"]["arguments"]["code"],
                            "headers": [(b"content-type", b"text/plain")]})
                await send({"type": "http.response.body", "body": b"the server broke"})
                return
            replayed = False

            async def replay():  # the app reads the body this wrapper already took
                nonlocal replayed
                if replayed:
                    return await receive()
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            await app(scope, replay, send)
            return
        if scope["type"] == "http" and scope["method"] == "GET":
            await send({"type": "http.response.start", "status": 405, "headers": [(b"allow", b"POST, DELETE")]})
            await send({"type": "http.response.body", "body": b""})
            return
        if scope["type"] == "http" and scope["method"] == "DELETE" and hang_delete:
            await asyncio.sleep(3600)
        await app(scope, receive, send)
    return asgi


if __name__ == "__main__":
    modes = sys.argv[2:]
    app = quirky(server.streamable_http_app(json_response="json" in modes), "hang-delete" in modes,
                 "bare-cr" in modes, "json" in modes, "gzip" in modes)
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning", lifespan="on")
