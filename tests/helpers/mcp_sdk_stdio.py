"""A stdio MCP server built on the SDK's low-level Server, listing as many tools as argv says, for tests.

`python mcp_sdk_stdio.py TOOLS SCHEMA_BYTES LISTS_FILE`: lists `burst`, `ping` and TOOLS tools `t00000`,
`t00001`, ... in that order, each with a description of about SCHEMA_BYTES in its inputSchema, and
appends a line to LISTS_FILE at each tools/list it is sent. `burst` sends
notifications/tools/list_changed `n` times, and until it has sent them all, a tools/list waits: every
notification of the burst reaches the client before the answer to a tools/list it caused. `ping`
answers once every request sent before it is under way (its LISTS_FILE lines written). Each lists
`after_burst` too once a burst was sent.
"""

from __future__ import annotations

import sys

import anyio
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

count, padding, lists_file = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
SCHEMA = {"type": "object", "description": "x" * padding}
sending: anyio.Event | None = None  # set once the burst under way is sent
burst_sent = False


def tool(name: str) -> types.Tool:
    return types.Tool(name=name, description=f"Tool {name}.", input_schema=SCHEMA)


async def list_tools(ctx, params) -> types.ListToolsResult:
    with open(lists_file, "a") as lists:
        lists.write("list\n")
    if sending is not None:
        await sending.wait()
    names = ["burst", "ping"] + (["after_burst"] if burst_sent else []) + [f"t{i:05d}" for i in range(count)]
    return types.ListToolsResult(tools=[tool(name) for name in names])


async def call_tool(ctx, params) -> types.CallToolResult:
    global sending, burst_sent
    if params.name == "burst":
        sending, burst_sent = anyio.Event(), True
        for _ in range((params.arguments or {}).get("n", 1)):
            await ctx.session.send_tool_list_changed()
        sending.set()
    return types.CallToolResult(content=[types.TextContent(type="text", text=f"{params.name} done")])


server = Server("many", on_list_tools=list_tools, on_call_tool=call_tool)


async def main() -> None:
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


anyio.run(main)
