"""A wire API's first request, rehearsed on a thread: the openai client's one-time cost, off the event loop.

The client imports a wire API's code at its first request, and pydantic builds the models of its
events at the first event it reads (the openai package defers them): a first turn held the event
loop for 0.4-1.2 s at load 7 on 2 cores (3.6 s on a busier machine), and no client was served
meanwhile. `rehearse(wire_api)` sends one request of the real provider (its `_open`) through a client
whose transport answers in memory with a short stream, and reads it, once per wire API. The stream
holds an event as OpenAI sends it and one as a lax server does (fields left out): the client types
them by two ways (validation, else the event's `type`), and each builds its own models.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from typing import Any

import anyio
import httpx2
import openai

from .items import ModelRequest, ToolSpec, UserText
from .openai_api import ChatProvider, ResponsesProvider
from .provider import Settings

log = logging.getLogger("scvd.chat")

_done: set[str] = set()
_lock = threading.Lock()  # two first turns at once: one rehearses, the other waits for it

_REQUEST = ModelRequest(instructions="rehearsal", items=[UserText(text="hi")], tools=[ToolSpec(
    "read", "rehearsal", {"type": "object", "properties": {"path": {"type": "string"}}})])
_USAGE = {"input_tokens": 1, "output_tokens": 1, "total_tokens": 2,
          "input_tokens_details": {"cached_tokens": 0}, "output_tokens_details": {"reasoning_tokens": 0}}
_CALL = {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "read", "arguments": "{}",
         "status": "completed"}
_MESSAGE = {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
            "content": [{"type": "output_text", "text": "hi", "annotations": []}]}
_RESPONSE = {"id": "resp_1", "object": "response", "created_at": 0, "model": "m", "status": "completed",
             "output": [_MESSAGE, _CALL], "usage": _USAGE}
RESPONSES = [
    {"type": "response.created", "sequence_number": 0, "response": {"id": "resp_1", "status": "in_progress"}},
    {"type": "response.output_text.delta", "sequence_number": 1, "item_id": "msg_1", "output_index": 0,
     "content_index": 0, "delta": "hi", "logprobs": []},
    {"type": "response.output_text.delta", "item_id": "msg_1", "delta": "!"},
    {"type": "response.output_item.done", "sequence_number": 2, "output_index": 1, "item": _CALL},
    {"type": "response.completed", "sequence_number": 3, "response": _RESPONSE},
]
_CHUNK = {"id": "c1", "object": "chat.completion.chunk", "created": 0, "model": "m"}
CHAT = [
    {**_CHUNK, "choices": [{"index": 0, "delta": {"role": "assistant", "content": "hi"}, "finish_reason": None}]},
    {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                                                        "function": {"name": "read", "arguments": "{}"}}]}}]},
    {**_CHUNK, "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
    {**_CHUNK, "choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}},
]


def rehearse(wire_api: str) -> None:
    """The first request of `wire_api` ("responses" | "chat"), once: call it on a thread. A rehearsal
    that fails (a later openai that reads these events otherwise) is logged, and the turns go on."""
    with _lock:
        if wire_api in _done:
            return
        _done.add(wire_api)
        try:
            asyncio.run(_rehearse(wire_api))  # a loop of this thread's own, ended with it
        except Exception:  # only a cost was to move: the first turn pays what is left of it on the loop
            log.warning("the rehearsal of a first %s request failed: the first turn sets up the rest of the "
                        "openai client on the event loop", wire_api, exc_info=True)


async def _rehearse(wire_api: str) -> None:
    events = CHAT if wire_api == "chat" else RESPONSES
    body = b"".join(b"data: %s\n\n" % json.dumps(e).encode() for e in events) + b"data: [DONE]\n\n"

    def answer(request: Any) -> httpx2.Response:
        return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=body)

    settings = Settings(name="rehearsal", model="m", base_url="http://rehearsal.invalid/v1", wire_api=wire_api,
                        api_key="rehearsal", key_source="")
    provider = (ChatProvider if wire_api == "chat" else ResponsesProvider)(settings)
    http = httpx2.AsyncClient(transport=httpx2.MockTransport(answer), trust_env=False)  # no proxy, no TLS
    async with openai.AsyncOpenAI(api_key="rehearsal", base_url=settings.base_url, max_retries=0,
                                  http_client=http) as client:
        async for _ in await provider._open(client, _REQUEST):
            pass
    await anyio.sleep(0)  # the client's connections run on anyio: its asyncio backend is imported at the first
