"""What `tools.list` answers for a registry, built once per state of its tools.

The tools' JSON schemas and lint take milliseconds per listing (msgspec's schema generation, the
lint's regexes), and one client may ask 1,024 times in one write: built per request, that held
the loop for seconds.

Rules:
- A listing depends on the registry's tools only, which `Registry.version` counts the changes
  of: a reload builds a new registry, an MCP server's tools come and go by `replace_source`, and
  a registered tool does not change. The load errors are not kept here: an MCP server's come and
  go with its state, and they are few.
"""

from __future__ import annotations

from weakref import WeakKeyDictionary

from . import protocol as p
from .tools.contract import Registry, Tool, findings


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
                      lint=[f"{f.rule}: {f.text}" for f in findings(tool)] if lint else [])
