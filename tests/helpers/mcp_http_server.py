"""A streamable-HTTP MCP server built with the SDK's own server class, for tests.

`python mcp_http_server.py PORT TOKEN`: serves on 127.0.0.1:PORT at /mcp and
answers 401 to any request without `Authorization: Bearer TOKEN` (or `key=TOKEN` in its query, as
hosted servers take an API key).
"""

from __future__ import annotations

import sys
from urllib.parse import parse_qsl

import anyio
import uvicorn
from mcp.server.mcpserver import Context, MCPServer

server = MCPServer("notes")


@server.tool()
def add(a: int, b: int) -> str:
    """Add two integers."""
    return f"{a} + {b} = {a + b}"


@server.tool()
async def wait(seconds: float) -> str:
    """Answers after `seconds`."""
    await anyio.sleep(seconds)
    return f"waited {seconds:g} s"


@server.tool()
def fail(reason: str) -> str:
    """Always fails with the reason."""
    raise ValueError(reason)


@server.tool()
async def grow(name: str, ctx: Context, description: str = "added at run time") -> str:
    """Adds a tool called `name` (or replaces it) and says so with notifications/tools/list_changed."""
    def extra() -> str:
        return f"I am {name}"

    if name in {t.name for t in await server.list_tools()}:
        server.remove_tool(name)
    server.add_tool(extra, name=name, description=description)
    await ctx.session.send_tool_list_changed()
    return "grown"


def guarded(app, token: str):
    async def asgi(scope, receive, send):
        if scope["type"] == "http":
            headers = dict(scope["headers"])
            in_query = ("key", token) in parse_qsl(scope["query_string"].decode())
            if headers.get(b"authorization") != f"Bearer {token}".encode() and not in_query:
                await send({"type": "http.response.start", "status": 401,
                            "headers": [(b"content-type", b"text/plain")]})
                await send({"type": "http.response.body", "body": b"no"})
                return
        await app(scope, receive, send)
    return asgi


if __name__ == "__main__":
    port, token = int(sys.argv[1]), sys.argv[2]
    app = guarded(server.streamable_http_app(), token)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
