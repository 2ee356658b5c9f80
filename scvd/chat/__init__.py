"""Chat turns: scvd runs the model loop, so bridges, `scvctl chat` and `scvctl exec` need no model.

    items.py       history items, transcript records, the provider's request and events (Structs)
    engine.py      the turn engine: model replies and tool results in, next actions out; no I/O
    catalog.py     the loop's own tools (find_tools, ask_user) and lazy schemas
    trim.py        deterministic trimming of a request to chat.context_tokens
    transcript.py  the append-only JSONL transcript of a conversation (0600, state dir)
    provider.py    the provider seam (one method) and its config; openai.py the real providers
    service.py     the daemon side: conversations, turns, and tool calls through the call pipeline

Nothing outside this package knows find_tools or ask_user by name.
"""
