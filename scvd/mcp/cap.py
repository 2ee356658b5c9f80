"""How much of one MCP server's tool list scvd takes: the first `max_tools` in the server's order,
within the server's share of a tools.list frame.

A server may list any number of tools: 50,000 held the loop 6 s and pushed every client's
tools.list past server.server_frame_bytes, so that it failed for all of them. Taken in the
server's order, a list is cut where the server put its tools last, and the same list is always
cut the same way. No MCP SDK here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

from .tool import DESCRIPTION_LIMIT, ToolSpec

if TYPE_CHECKING:
    from ..config import Config

# every MCP server's tools together take at most this part of a tools.list frame; the rest is scvd's
# own tools and the load errors; lint findings are not counted: tool_listing.fit_lint cuts them to the frame
SHARE_OF_FRAME = 4
ENTRY_ROOM = 256  # of a tool's tools.list entry beside its description and schema: its name (64), risk, flags, keys
# a server may have thousands of its tools left out, each of a name of any length: its load errors name
# this many of them (each cut: spec.named), and count the rest
LEFT_OUT_NAMED = 5


def share_for(config: Config) -> tuple[int, int]:
    """(the bytes of tools.list one enabled server may fill, how many servers are enabled) by `config`."""
    servers = sum(cfg.enabled for cfg in config.mcp.servers.values())
    return config.server.server_frame_bytes // SHARE_OF_FRAME // max(1, servers), servers


def entry_size(spec: ToolSpec) -> int:
    """The bytes the tool takes in a tools.list frame, as JSON escapes them."""
    return len(msgspec.json.encode([spec.description[:DESCRIPTION_LIMIT], spec.input_schema])) + ENTRY_ROOM


def error_size(message: str) -> int:
    """A load error's bytes in that frame: its message, its source and name."""
    return len(msgspec.json.encode(message)) + ENTRY_ROOM


def left_out(server: str, why: list[tuple[str, str]]) -> list[str]:
    """The load errors of `why`'s tools left out ((the kind, the message naming it) each): the first
    LEFT_OUT_NAMED as they are, then one counting the rest by kind."""
    rest: dict[str, int] = {}
    for kind, _ in why[LEFT_OUT_NAMED:]:
        rest[kind] = rest.get(kind, 0) + 1
    if not rest:
        return [message for _, message in why]
    kinds = ", ".join(f"{n} {kind}" for kind, n in rest.items())
    return [message for _, message in why[:LEFT_OUT_NAMED]] + [
        f"mcp server {server}: {len(why) - LEFT_OUT_NAMED} more of its tools are left out ({kinds}); scvd "
        f"names the first {LEFT_OUT_NAMED}: fix them on the server"]


def over_max(server: str, listed: int, most: int) -> str:
    return (f"mcp server {server} lists {listed} tools, more than mcp.servers.{server}.max_tools ({most}): scvd "
            f"takes the first {most} in the server's order and leaves the other {listed - most} out; raise "
            f"mcp.servers.{server}.max_tools if you need them, or turn tools off on the server")


def over_share(server: str, taken: int, room: int, servers: int) -> str:
    split = f", split among {servers} enabled servers" if servers > 1 else ""
    return (f"mcp server {server}'s tools take more than its share of a tools.list frame ({room} bytes: a quarter "
            f"of server.server_frame_bytes{split}): scvd takes the first {taken} in the server's order and "
            "leaves the rest out; raise server.server_frame_bytes, or turn tools off on the server")
