"""MCP servers as scvd tools: `[mcp.servers.NAME]` becomes tools named `mcp__NAME__TOOL`.

Only `manager.py`, `spec.py` and `tool.py` are imported by the daemon up front, and
they do not import the MCP SDK: `link.py`, `stdio.py` and `skim.py` do, and they are imported
only when a server is configured, so an idle daemon without MCP servers stays small.
"""
