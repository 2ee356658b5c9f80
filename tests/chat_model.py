"""A loopback HTTP server that plays a model, for both wire APIs, with real SSE.

Each request takes the next step of a script (a step may also be a function of
the request body). Every request body is kept, so tests can check what the model
was told. Like a strict server, Chat Completions answers 400 to an assistant message
with neither content nor tool_calls. Steps:

    Text("hi")                         a streamed text answer
    Calls(("read", {"path": "a"}), ...) tool calls (with optional text before them)
    Status(429, retry_after_ms=10)     an HTTP error (delay=2: after 2 s)
    Hang("partial")                    a delta, then hold the stream until the client hangs up
    Refused("I can't help")            the model refuses: a streamed refusal instead of text
    Raw("not json")                    an event whose data is that text, not JSON
    Idle("partial")                    deltas (or none), then only keep-alives until the client hangs up:
                                       SSE comments, or with empty=True events that carry nothing
                                       (empty="usage": usage-only chunks, or empty text deltas)
    Document('{"choices": ...}')       a 200 whose body is one JSON document (or a web page), no stream
    Redirect(308, "http://...")        a redirect elsewhere (an empty body)
    Gzipped(Text("hi"))                the step's stream with content-encoding: gzip (a proxy's compression)
    Flood("events", 1 << 20)           a body of that many bytes, as fast as it is read: text deltas
                                       (then the answer's end), a 400's error JSON ("error") or one SSE
                                       line ("line") that never ends; `written` counts what went out
    Cut("partial")                     deltas, then the body ends cleanly without the closing events
                                       (no response.completed; no finish_reason, usage or [DONE]);
                                       Cut("partial", tail="reset") cuts the connection off instead

Streams are chunked on a kept-alive connection, as a real provider's are (a Hang
closes its connection): `peers` has each request's client address, `hung_up_peers`
each connection the client closed.
"""

from __future__ import annotations

import itertools
import json
import select
import socket
import struct
import sys
import threading
import time
import zlib
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Iterator

import pytest


@dataclass
class Text:
    text: str
    chunks: int = 2
    tail: str = ""  # after the last event: "hang" (SSE comments, never the body's end) or "reset" (RST)
    # Chat Completions only: the tail comes right after the finish_reason chunk, before usage and [DONE]
    early: bool = False
    gap: float = 0.0  # seconds between its events: a slow but steady model
    usage: dict[str, Any] | None = None  # the usage object sent, in the wire API's own names


@dataclass
class Calls:
    calls: tuple[tuple[str, dict[str, Any]], ...]
    text: str = ""
    # Chat Completions only: Ollama's shape (ollama/ollama#15457), every call whole in one chunk at index 0
    index_zero: bool = False

    def __init__(self, *calls: tuple[str, dict[str, Any]], text: str = "", index_zero: bool = False) -> None:
        self.calls, self.text, self.index_zero = calls, text, index_zero


@dataclass
class Refused:
    """The model declines: its refusal streams in Chat Completions' `delta.refusal` (content null), or
    as the Responses API's response.refusal.delta events and one response.refusal.done."""

    refusal: str
    chunks: int = 2
    text: str = ""


@dataclass
class Limited:
    """An answer cut at the output token limit, in a tool call's arguments (Chat Completions'
    finish_reason length; the Responses API's response.incomplete, max_output_tokens)."""

    text: str = "I will write it"
    call: tuple[str, dict[str, Any]] = ("write", {"path": "big.txt", "content": "aaaa"})


@dataclass
class Filtered:
    """An answer the provider's content filter stopped part-way (Chat Completions' finish_reason
    content_filter; the Responses API's response.incomplete, content_filter)."""

    text: str = "Here is the first half"


@dataclass
class Deltas:
    """Chat Completions only: these `delta` objects as they are, one chunk each (shapes Text and
    Calls never make: an emoji's halves in two deltas, two calls with one id, broken arguments)."""

    deltas: list[dict[str, Any]]
    finish: str = "stop"
    text: str = ""
    gap: float = 0.0  # seconds between its events


@dataclass
class Raw:
    """One event whose data line is this text as it is (a server that breaks the wire API)."""

    data: str
    text: str = ""


@dataclass
class Status:
    status: int
    message: str = "nope"
    retry_after_ms: int | str | None = None  # a Retry-After-Ms header ("inf": as a server may write it)
    code: str | None = None  # the error's code, e.g. OpenAI's insufficient_quota
    delay: float = 0.0  # seconds before answering: a request in flight
    retry_after: str | None = None  # a Retry-After header (seconds, or an HTTP date)
    body: str | None = None  # the body as it is (text/html), not the error JSON


@dataclass
class Redirect:
    status: int
    location: str


@dataclass
class Gzipped:
    step: Any


@dataclass
class Flood:
    kind: str  # events | error | line
    size: int
    piece: int = 8192  # bytes of each write (a text delta's length for "events")
    hold: int = 0  # past this many bytes, `midway` set, wait until the test sets `go`
    written: int = 0
    midway: threading.Event = field(default_factory=threading.Event)
    go: threading.Event = field(default_factory=threading.Event)


@dataclass
class Document:
    """A 200 whose body is one document, not an event stream: a server that ignores stream=true
    (application/json), or a web page at base_url (text/html)."""

    body: str
    content_type: str = "application/json"


@dataclass
class Hang:
    text: str = "partial"


@dataclass
class Idle:
    """The stream opens and sends `text` (if any), then keeps the body open with keep-alives only:
    `: ping` comments, or with `empty` events a proxy or server sends that carry nothing of the answer."""

    text: str = ""
    empty: bool | str = False  # "usage": Chat Completions' usage-only chunks, the Responses API's empty text deltas
    tail: str = "hang"


@dataclass
class Cut:
    text: str = "partial"
    chunks: int = 2
    tail: str = ""  # "reset": a RST instead of the body's end


@dataclass
class ScriptedModel:
    steps: list[Any]
    requests: list[dict[str, Any]] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    authorizations: list[str] = field(default_factory=list)  # each request's Authorization header
    headers: list[dict[str, str]] = field(default_factory=list)  # each request's headers, names in lower case
    hung: threading.Event = field(default_factory=threading.Event)
    hung_up: threading.Event = field(default_factory=threading.Event)
    peers: list[tuple[str, int]] = field(default_factory=list)  # each request's client address
    hung_up_peers: list[tuple[str, int]] = field(default_factory=list)  # connections the client closed
    _count: int = 0

    def __post_init__(self) -> None:
        model = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))))
                model.requests.append(body)
                model.paths.append(self.path)
                model.authorizations.append(self.headers.get("authorization", ""))
                model.headers.append({k.lower(): v for k, v in self.headers.items()})
                model.peers.append(self.client_address)
                chat = self.path.endswith("/chat/completions")
                step = (chat and _refused_message(body)) or _refused_schema(body) or model.next_step(body)
                if callable(step):
                    step = step(body)
                serve(self, step, chat=chat, model=model)

            def log_message(self, *args: Any) -> None:
                pass

            def finish(self) -> None:  # the connection is over: the client closed it (or a Hang did)
                super().finish()
                model.hung_up_peers.append(self.client_address)

        self.server = _Server(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def next_step(self, body: dict[str, Any]) -> Any:
        if self._count >= len(self.steps):
            return Text("(script over)")
        self._count += 1
        return self.steps[self._count - 1]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def outputs(self, index: int) -> list[str]:
        """The tool outputs the model was given in request `index`, for either wire API."""
        body = self.requests[index]
        if "messages" in body:
            return [m["content"] for m in body["messages"] if m.get("role") == "tool"]
        return [i["output"] for i in body["input"] if i.get("type") == "function_call_output"]

    def tool_names(self, index: int) -> list[str]:
        tools = self.requests[index].get("tools") or []
        return [t.get("name") or t["function"]["name"] for t in tools]


class _Server(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], ConnectionError):
            return  # a client that hung up between requests (a reset) is no news
        super().handle_error(request, client_address)  # a bug of the script: its traceback


def _refused_message(body: dict[str, Any]) -> Status | None:
    """The 400 a strict Chat Completions server answers to an assistant message with neither content
    nor tool_calls (OpenAI's own wording); the script's step is not used up."""
    for i, m in enumerate(body.get("messages") or []):
        if m.get("role") == "assistant" and m.get("content") is None and not m.get("tool_calls"):
            return Status(400, f"Invalid value for 'messages[{i}].content': expected a string, got null.")
    return None


def _refused_schema(body: dict[str, Any]) -> Status | None:
    """The 400 OpenAI answers (either wire API) to a function whose parameters have no object
    `properties` (in its own wording); the script's step is not used up."""
    for i, tool in enumerate(body.get("tools") or []):
        function = tool.get("function") or tool
        if not isinstance((function.get("parameters") or {}).get("properties"), dict):
            return Status(400, f"Invalid schema for function '{function.get('name')}': In context=(), "
                               "object schema missing properties.")
    return None


def serve(h: BaseHTTPRequestHandler, step: Any, *, chat: bool, model: ScriptedModel) -> None:
    if isinstance(step, Status):
        time.sleep(step.delay)
        error = json.dumps({"error": {"message": step.message, "type": "test", "code": step.code}})
        body = (error if step.body is None else step.body).encode()
        h.send_response(step.status)
        h.send_header("content-type", "application/json" if step.body is None else "text/html")
        h.send_header("content-length", str(len(body)))
        if step.retry_after_ms is not None:
            h.send_header("retry-after-ms", str(step.retry_after_ms))
        if step.retry_after is not None:
            h.send_header("retry-after", step.retry_after)
        h.end_headers()
        h.wfile.write(body)
        return
    if isinstance(step, Redirect):
        h.send_response(step.status)
        h.send_header("location", step.location)
        h.send_header("content-length", "0")
        h.end_headers()
        return
    if isinstance(step, Flood):
        return _flood(h, step, chat)
    if isinstance(step, Gzipped):
        return _gzipped(h, step.step, chat)
    if isinstance(step, Document):
        body = step.body.encode()
        h.send_response(200)
        h.send_header("content-type", step.content_type)
        h.send_header("content-length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)
        return
    hang = isinstance(step, Hang)
    h.send_response(200)
    h.send_header("content-type", "text/event-stream")
    if hang:
        h.send_header("connection", "close")
        h.close_connection = True
    else:
        h.send_header("transfer-encoding", "chunked")
    h.end_headers()
    events = chat_events(step) if chat else responses_events(step)
    for name, data in events:
        event = _event(name, data)
        h.wfile.write(event if hang else b"%x\r\n%s\r\n" % (len(event), event))
        h.wfile.flush()
        time.sleep(getattr(step, "gap", 0.0))
    tail = getattr(step, "tail", "")
    if hang:
        model.hung.set()
        if _wait_hangup(h, 30):
            model.hung_up.set()
    elif tail == "hang":  # keep the body open with comments until the client hangs up
        h.close_connection = True
        deadline = time.monotonic() + 30
        try:
            ping = _ping(step, chat)
            while time.monotonic() < deadline and not select.select([h.connection], [], [], 0.1)[0]:
                h.wfile.write(b"%x\r\n%s\r\n" % (len(ping), ping))
                h.wfile.flush()
        except OSError:
            pass
        model.hung_up.set()
    elif tail == "reset":  # cut the connection off with a RST instead of the body's end
        h.close_connection = True
        h.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    else:
        h.wfile.write(b"0\r\n\r\n")
        h.wfile.flush()


def _event(name: str, data: Any) -> bytes:
    prefix = f"event: {name}\n" if name else ""
    return f"{prefix}data: {data if isinstance(data, str) else json.dumps(data)}\n\n".encode()


def _flood(h: BaseHTTPRequestHandler, step: Flood, chat: bool) -> None:
    h.send_response(400 if step.kind == "error" else 200)
    h.send_header("content-type", "application/json" if step.kind == "error" else "text/event-stream")
    h.send_header("transfer-encoding", "chunked")
    h.end_headers()
    h.close_connection = True
    if step.kind == "events":
        text = Text("y" * step.size, chunks=max(1, step.size // step.piece))
        events = chat_events(text) if chat else responses_events(text)
        blocks = [_event(name, data) for name, data in events]
    else:
        head = b'{"error": {"message": "' if step.kind == "error" else b"data: "
        blocks = [head, *[b"x" * step.piece] * (step.size // step.piece)]
    try:
        for block in blocks:
            h.wfile.write(b"%x\r\n%s\r\n" % (len(block), block))
            h.wfile.flush()
            step.written += len(block)
            if step.hold and not step.midway.is_set() and step.written >= step.hold:
                step.midway.set()
                step.go.wait(30)
        h.wfile.write(b"0\r\n\r\n")
        h.wfile.flush()
    except OSError:  # the client stopped reading
        pass


def _gzipped(h: BaseHTTPRequestHandler, step: Any, chat: bool) -> None:
    h.send_response(200)
    h.send_header("content-type", "text/event-stream")
    h.send_header("content-encoding", "gzip")
    h.send_header("transfer-encoding", "chunked")
    h.end_headers()
    h.close_connection = True
    packer = zlib.compressobj(wbits=31)  # 31: the gzip format
    body = b"".join(_event(name, data) for name, data in (chat_events(step) if chat else responses_events(step)))
    try:  # each 8 KiB flushed as it comes, as a streaming proxy does: a long line spans several
        for block in [*(packer.compress(body[i:i + 8192]) + packer.flush(zlib.Z_SYNC_FLUSH)
                        for i in range(0, len(body), 8192)), packer.flush()]:
            h.wfile.write(b"%x\r\n%s\r\n" % (len(block), block))
        h.wfile.write(b"0\r\n\r\n")
        h.wfile.flush()
    except OSError:  # the client stopped reading
        pass


def _ping(step: Any, chat: bool) -> bytes:
    """A keep-alive: an SSE comment, or an event with nothing of the answer in it (Idle(empty=True))."""
    if not getattr(step, "empty", False):
        return b": ping\n\n"
    usage = step.empty == "usage"
    if chat and usage:
        return (b'data: {"id": "c1", "object": "chat.completion.chunk", "choices": [], '
                b'"usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6}}\n\n')
    if chat:
        return (b'data: {"id": "c1", "object": "chat.completion.chunk", "choices": [{"index": 0, '
                b'"delta": {"role": "assistant", "content": ""}}]}\n\n')
    if usage:
        return (b'event: response.output_text.delta\ndata: {"type": "response.output_text.delta", "item_id": "m1", '
                b'"output_index": 0, "content_index": 0, "delta": ""}\n\n')
    return b'data: {"type": "keepalive"}\n\n'


def _wait_hangup(h: BaseHTTPRequestHandler, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        r, _, _ = select.select([h.connection], [], [], 0.1)
        try:
            if r and not h.connection.recv(1):
                return True
        except ConnectionResetError:  # a client that closes with our last event unread sends a RST
            return True
    return False


def _split(text: str, n: int) -> list[str]:
    size = max(1, -(-len(text) // max(n, 1)))
    return [text[i:i + size] for i in range(0, len(text), size)] or []


_call_ids = itertools.count(1)  # unique across requests, as a real model's are


def responses_events(step: Any) -> list[tuple[str, Any]]:
    seq = iter(range(10**6))
    resp = {"id": "resp_1", "object": "response", "created_at": 0, "model": "m", "status": "in_progress",
            "output": []}
    out: list[tuple[str, Any]] = [("response.created", {"type": "response.created", "sequence_number": next(seq),
                                                        "response": resp})]
    if isinstance(step, Raw):
        return [*out, ("", step.data)]
    text = step.text
    for piece in _split(text, getattr(step, "chunks", 2)):
        out.append(("response.output_text.delta", {"type": "response.output_text.delta", "item_id": "msg_1",
                                                   "output_index": 0, "content_index": 0, "delta": piece,
                                                   "sequence_number": next(seq), "logprobs": []}))
    if isinstance(step, (Hang, Cut, Idle)):
        return out
    if isinstance(step, Refused):
        where = {"item_id": "msg_1", "output_index": 0, "content_index": 0}
        for piece in _split(step.refusal, step.chunks):
            out.append(("response.refusal.delta", {"type": "response.refusal.delta", **where, "delta": piece,
                                                   "sequence_number": next(seq)}))
        out.append(("response.refusal.done", {"type": "response.refusal.done", **where, "refusal": step.refusal,
                                              "sequence_number": next(seq)}))
    if isinstance(step, (Limited, Filtered)):
        reason = "max_output_tokens" if isinstance(step, Limited) else "content_filter"
        cut = dict(resp, status="incomplete", incomplete_details={"reason": reason})
        out.append(("response.incomplete", {"type": "response.incomplete", "response": cut,
                                            "sequence_number": next(seq)}))
        return out
    for i, (name, args) in enumerate(getattr(step, "calls", ())):
        item = {"type": "function_call", "id": f"fc_{i}", "call_id": f"call_{next(_call_ids)}_{name}", "name": name,
                "arguments": json.dumps(args), "status": "completed"}
        out.append(("response.output_item.done", {"type": "response.output_item.done", "output_index": i + 1,
                                                  "item": item, "sequence_number": next(seq)}))
    usage = getattr(step, "usage", None) or {
        "input_tokens": 11, "output_tokens": 7, "total_tokens": 18,
        "input_tokens_details": {"cached_tokens": 0}, "output_tokens_details": {"reasoning_tokens": 0}}
    done = dict(resp, status="completed", usage=usage)
    out.append(("response.completed", {"type": "response.completed", "response": done,
                                       "sequence_number": next(seq)}))
    return out


def chat_events(step: Any) -> list[tuple[str, Any]]:
    def chunk(delta: dict[str, Any], finish: str | None = None, usage: Any = None) -> tuple[str, Any]:
        choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
        return "", {"id": "c1", "object": "chat.completion.chunk", "created": 0, "model": "m",
                    "choices": choices, "usage": usage}

    out = [chunk({"role": "assistant", "content": piece}) for piece in _split(step.text, getattr(step, "chunks", 2))]
    if isinstance(step, Raw):
        return [("", step.data)]
    if isinstance(step, Deltas):
        return [*(chunk(d) for d in step.deltas), chunk({}, step.finish),
                chunk(None, usage={"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}), ("", "[DONE]")]
    if isinstance(step, (Hang, Cut, Idle)):
        return out
    if isinstance(step, Refused):
        out += [chunk({"role": "assistant", "content": None, "refusal": piece})
                for piece in _split(step.refusal, step.chunks)]
    if isinstance(step, Filtered):
        return [*out, chunk({}, "content_filter"), ("", "[DONE]")]
    if isinstance(step, Limited):
        name, args = step.call
        out.append(chunk({"tool_calls": [{"index": 0, "id": f"call_{next(_call_ids)}_{name}", "type": "function",
                                          "function": {"name": name, "arguments": json.dumps(args)[:20]}}]}))
        return [*out, chunk({}, "length"), ("", "[DONE]")]
    calls = getattr(step, "calls", ())
    for i, (name, args) in enumerate(calls):
        text = json.dumps(args)
        if getattr(step, "index_zero", False):
            out.append(chunk({"tool_calls": [{"index": 0, "id": f"call_{next(_call_ids)}_{name}", "type": "function",
                                              "function": {"name": name, "arguments": text}}]}))
            continue
        half = len(text) // 2
        out.append(chunk({"tool_calls": [{"index": i, "id": f"call_{next(_call_ids)}_{name}", "type": "function",
                                          "function": {"name": name, "arguments": text[:half]}}]}))
        out.append(chunk({"tool_calls": [{"index": i, "function": {"arguments": text[half:]}}]}))
    out.append(chunk({}, "tool_calls" if calls else "stop"))
    if getattr(step, "early", False):
        return out
    out.append(chunk(None, usage=getattr(step, "usage", None) or {"prompt_tokens": 11, "completion_tokens": 7,
                                                                   "total_tokens": 18}))
    out.append(("", "[DONE]"))
    return out


@pytest.fixture
def model() -> Iterator[Callable[..., ScriptedModel]]:
    """Start scripted models; all are shut down after the test. Import it into a test module."""
    models: list[ScriptedModel] = []

    def start(*steps: Any) -> ScriptedModel:
        models.append(ScriptedModel(list(steps)))
        return models[-1]

    yield start
    for m in models:
        m.close()
