"""Wording shared by the argument checks: a script tool and an MCP tool with the same schema refuse
the same arguments in the same words."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from scvd import paths as paths_mod
from scvd.config import McpServerConfig
from scvd.errors import InvalidArguments
from scvd.mcp.tool import McpTool, ToolSpec
from scvd.tools.contract import ToolRisk
from scvd.tools.script import ScriptTool
from scvd.tools.script_defs import load_all

ROWS = {"type": "object", "required": ["rows"], "properties": {
    "rows": {"type": "array", "description": "The rows, e.g. [{\"a\": 1}].",
             "items": {"type": "object", "properties": {"a": {"type": "integer"}}}},
    "note": {"type": "string", "description": "A note, e.g. 'x'."}}}


def script_tool(home: Path) -> ScriptTool:
    folder = home / "tools" / "script" / "rows"
    folder.mkdir(parents=True)
    (folder / "tool.json").write_text(json.dumps({
        "description": "Count the rows given as argument.\nUse for quick counts; bash for anything else.",
        "parameters": ROWS}))
    (folder / "run").write_text("#!/bin/sh\necho 1\n")
    (folder / "run").chmod(0o700)
    (d,), failed = load_all(paths_mod.resolve({"SCV_HOME": str(home)}))
    assert failed == []
    return ScriptTool(d)


def mcp_tool() -> McpTool:
    link = SimpleNamespace(name="srv", cfg=McpServerConfig(command="/bin/true"))
    return McpTool(link, ToolSpec(name="rows", description="Counts rows.", input_schema=ROWS),  # type: ignore[arg-type]
                   risk=ToolRisk.READ_ONLY, risk_from="test", timeout=None)


def refused(tool: Any, arguments: dict[str, Any]) -> str:
    with pytest.raises(InvalidArguments) as info:
        tool.decode(arguments)
    return info.value.message.removeprefix(f"{tool.name}: ")


BAD_ROWS = [{"a": 1}, {"a": 2}, {"a": "two"}, *[{"a": i} for i in range(7)], {"a": "ten"}]


@pytest.mark.parametrize("arguments, said", [
    # the MCP tool reported the item at 10 first (its paths sorted as text) and wrote `rows/10/a`
    ({"rows": BAD_ROWS}, "argument `rows[2].a`: 'two' is not of type 'integer'"),
    # the script tool said `arguments: 'rows' is ...`, the MCP tool (and a built-in one) no `arguments:`
    ({"note": "x"}, "'rows' is a required property"),
    ({"rows": None, "note": None}, "'rows' is a required property"),
])
def test_a_script_tool_and_an_mcp_tool_with_one_schema_refuse_alike(tmp_path, arguments, said):
    script, mcp = script_tool(tmp_path / "home"), mcp_tool()
    assert (refused(script, arguments), refused(mcp, arguments)) == (said, said)
