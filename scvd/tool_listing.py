"""What `tools.list` answers for a registry, built once per state of its tools.

The tools' JSON schemas and lint take milliseconds per listing (msgspec's schema generation, the
lint's regexes), and one client may ask 1,024 times in one write: built per request, that held
the loop for seconds.

Rules:
- A listing depends on the registry's tools only, which `Registry.version` counts the changes
  of: a reload builds a new registry, an MCP server's tools come and go by `replace_source`, and
  a registered tool does not change. The load errors are not kept here: an MCP server's come and
  go with its state, and they are few.
- A tool's lint shows at most LINT_SHOWN findings of at most LINT_CHARS each, then a line saying
  how many were left out: a third party's schema (up to 64 KiB) can break thousands of rules, each
  quoting a description, and one listing must fit server.server_frame_bytes.
- The lint is not counted in an MCP server's share of the frame (mcp/cap.py): a share filled with
  small entries can carry nearly three times their size in findings. Whatever does not fit one
  frame is left out, the last tools' first, and the first tool left out says so; when that line
  itself cannot fit, the answer is a `limit` error saying so, never a listing silently without lint.
- A listing past the frame without lint is a `limit` error too (the connection's too_large() asks
  too_large() here what to say): MCP servers' tools are bounded to a share of it, script tools are not.
"""

from __future__ import annotations

from weakref import WeakKeyDictionary

import msgspec

from . import protocol as p
from .errors import LimitExceeded
from .tools.contract import Finding, Registry, Tool, findings

LINT_SHOWN = 20  # findings per tool; `scvctl tools --lint` shows the rest once these are fixed
LINT_CHARS = 500  # per finding: the ones that quote a description quote it whole


class Listings:
    """The tool lists (`tools.list`'s `tools`) per registry, include_system and lint. Their
    ToolInfos are shared by every answer (the MCP host's in-process client reads them): read only."""

    def __init__(self) -> None:
        # weak: a registry goes with the last session that kept it (reloads replace it)
        self._kept: WeakKeyDictionary[Registry, tuple[int, dict[tuple[bool, bool], list[p.ToolInfo]]]] = (
            WeakKeyDictionary())

    def tools(self, registry: Registry, include_system: bool, lint: bool) -> list[p.ToolInfo]:
        version, lists = self._kept.get(registry, (-1, {}))
        if version != registry.version:
            lists = {}
            self._kept[registry] = (registry.version, lists)
        key = (include_system, lint)
        listed = lists.get(key)
        if listed is None:
            listed = lists[key] = [info(t, lint) for t in registry.visible(include_system)]
        return list(listed)


def info(tool: Tool, lint: bool) -> p.ToolInfo:
    return p.ToolInfo(name=tool.name, description=tool.description, input_schema=tool.input_schema(),
                      risk=tool.risk.value, flags=tool.flags.as_dict(),
                      lint=shown(findings(tool)) if lint else [])


def shown(found: list[Finding]) -> list[str]:
    """`found` as "rule: text" lines, capped (see the module's rules)."""
    lines = [_cut(f"{f.rule}: {f.text}") for f in found[:LINT_SHOWN]]
    if len(found) > LINT_SHOWN:
        lines.append(f"left_out: {len(found) - LINT_SHOWN} more findings are not shown (at most {LINT_SHOWN} "
                     "per tool): fix the ones above, then list again")
    return lines


def _cut(line: str) -> str:
    more = len(line) - LINT_CHARS
    return line if more <= 0 else f"{line[:LINT_CHARS]} ... [cut: {more:,} more chars]"


def fit_lint(answer: p.Tools, room: int) -> p.Tools:
    """`answer` within `room` bytes: the lint of its last tools left out as far as needed, the first
    tool left out saying how much; LimitExceeded when even every tool's lint left out is not enough."""
    size = len(p.encode(answer))
    if size <= room:
        return answer
    tools, cut, lines = list(answer.tools), 0, 0
    for i in reversed(range(len(tools))):
        if not tools[i].lint:
            continue
        size -= len(msgspec.json.encode(tools[i].lint)) + len(',"lint":')
        cut, lines = cut + 1, lines + len(tools[i].lint)
        note = [f"left_out: the lint of this tool and of every tool listed after it is not shown ({cut} tools' "
                f"lint, {lines} lines): with it this answer would pass server.server_frame_bytes ({room:,}); "
                "raise it, or fix the findings shown, then list again"]
        if size + len(msgspec.json.encode(note)) + len(',"lint":') <= room:
            tools[i] = msgspec.structs.replace(tools[i], lint=note)  # a copy: the kept ToolInfos are shared
            return msgspec.structs.replace(answer, tools=tools)
        tools[i] = msgspec.structs.replace(tools[i], lint=[])
    had = f"with every tool's lint left out ({cut} tools had lint, {lines} lines)"
    if size <= room:
        raise LimitExceeded(f"tools.list with lint: {had}, this answer is {size:,} bytes, too near "
                            f"server.server_frame_bytes ({room:,}) for a line saying so; raise it, or list the "
                            "tools without lint")
    raise LimitExceeded(f"tools.list with lint: {had}, this answer is still {size:,} bytes, above "
                        f"server.server_frame_bytes ({room:,}); raise it")


def too_large(answer: p.Tools, size: int, room: int) -> LimitExceeded:
    """What a client is told of a listing of `size` bytes, past the frame's `room`."""
    return LimitExceeded(f"tools.list: this answer ({len(answer.tools)} tools, {len(answer.errors)} load errors) is "
                         f"{size:,} bytes, above server.server_frame_bytes ({room:,}); raise it, or load fewer "
                         "tools (script tools, or an MCP server's max_tools)")
