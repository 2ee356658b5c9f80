"""scvd as an MCP server on an MCP host's own stdio, handed over by `scvctl mcp` (`mcp.attach`).

    jsonrpc.py   JSON-RPC answers built from scvd frames: data only, no I/O
    names.py     tool names as the host can take them: the long ones shortened, and mapped back
    bridge.py    the MCP server: the host's messages to requests, events to messages
    local.py     the host's client in scvd: the daemon's dispatch, no socket, the peer's credentials
    pipes.py     the fds handed over, and reading and writing them without blocking the loop
    service.py   `mcp.attach` and a host's end

Nothing here names a tool.
"""
