"""Chat turns: scvd runs the model loop, so bridges, `scvctl chat` and `scvctl exec` need no model.

    items.py       history items, transcript records, the provider's request and events (Structs)
    engine.py      the turn engine: model replies and tool results in, next actions out; no I/O
    catalog.py     the loop's own tools (find_tools, ask_user) and lazy schemas
    trim.py        deterministic trimming of a request to chat.context_tokens
    transcript.py  the append-only JSONL transcript of a conversation (0600, state dir)
    expiry.py      removes transcripts not written to for chat.transcript_days (off by default)
    provider.py    the provider seam (one method) and its settings; openai_api.py the real providers
    service.py     the daemon side: chat.* / turn.* requests, a turn as a task, its events
    pipeline.py    a turn's tool call through the calls registry, and the no-approver rule

Nothing outside this package knows find_tools or ask_user by name.
"""
