"""The real providers: the official `openai` client over the Responses API or Chat Completions.

The client does the HTTP, the SSE parsing and the retries (429, 5xx and lost
connections, with backoff, honouring Retry-After); this module only translates
history items to the wire API and stream events back, and maps errors to
ProviderFailure (their hints: `provider_errors`). Imported only when a turn runs, so the
idle daemon never loads openai.
"""

from __future__ import annotations

import abc
import asyncio
import json
import logging
import math
from collections.abc import Hashable
from typing import Any, AsyncIterator
from urllib.parse import urlsplit

import openai

from .. import http_fields, lenient_json
from ..redact import hide_in_logs, redact
from ..secret_like import picked
from .items import AssistantReply, CallRequested, ModelRequest, ReplyDone, TextDelta, ToolCall, ToolOutput, Usage
from .provider import ProviderFailure, Settings
from .reply_cap import cap
from .provider_errors import (cause, content_filtered, detail, in_stream, redirected, setting, status_failure, table,
                              token_limit)

log = logging.getLogger("scvd.chat")

DRAIN_SECONDS = 1.0  # how long the end of a completed stream may take to arrive
# a request's answer takes at most this many timeout_seconds in all: parts that keep coming (a drip
# of one "." a second) otherwise held the turn for ever
ANSWER_TIMEOUTS = 10
# a call that came without a name goes back so (its output says so): servers refuse `"name": ""`
NO_NAME = "unnamed"


def _sent_name(name: str) -> str:
    """A call's name as sent back: a blank one (the engine's "named no tool") as NO_NAME."""
    return name if name.strip() else NO_NAME


class _Base(abc.ABC):
    """Error mapping and the client's life; a subclass speaks one wire API (`_open`, `_read`).

    One provider serves one turn: its requests share one client, so the steps of a
    turn reuse its connection (no new TCP and TLS handshake per step, unless it sat
    idle past the client's keep-alive expiry); the turn's end calls aclose(), so
    nothing stays open between turns."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._client: openai.AsyncOpenAI | None = None
        self._refused: tuple[int, str] | None = None  # the last retried answer of this request: status, Retry-After
        self._absurd = False  # a token count was dropped (logged once)

    async def stream(self, request: ModelRequest) -> AsyncIterator[Any]:
        response = None  # set once the provider answered: a connection lost after that broke mid-answer
        try:
            response = await self._answer(request)
            async for event in self._read(_Watched(self, response)):
                yield event
        except openai.APIError as exc:
            raise self._hidden(self._failure(exc, reached=response is not None)) from None
        except ProviderFailure as failure:  # an error event (response.failed) quotes the provider's text too
            raise self._hidden(failure) from None
        except json.JSONDecodeError as exc:  # the client parses each event's data: this is the provider's
            raise self._hidden(self._garbled("JSON", exc.doc)) from None
        except RecursionError:  # the client's json.loads of an event nested 100,000 deep: the provider's, too
            raise self._garbled("JSON scvd can read (it is nested too deeply)") from None
        except ValueError as exc:  # json.loads of a number of more than 4,300 digits
            if "integer string conversion" not in str(exc):
                raise
            raise self._garbled("JSON scvd can read (a number of more than 4,300 digits)") from None
        finally:
            if response is not None:
                await response.close()

    async def _answer(self, request: ModelRequest) -> Any:
        """The answer's stream, within timeout_seconds in all: the client's own timeout holds for
        each attempt, and it retries one that timed out twice, so a provider that never answered
        took three times as long as the failure said."""
        self._refused = None
        try:
            async with asyncio.timeout(self.settings.timeout_seconds):
                return await self._open(await self._connect(), request)
        except TimeoutError:
            raise (self._retries_out() if self._refused else self._timed_out()) from None

    async def _sending(self, request: Any) -> None:
        """An attempt goes out (the client's event hook): a timeout from now on is no refusal's wait."""
        self._refused = None

    async def _heard(self, response: Any) -> None:
        """Each HTTP answer (the client's event hook): its body bounded as it will be read; a 429 or 5xx
        is retried, maybe after its Retry-After."""
        cap(response, self.settings.max_reply_bytes, self._too_large)
        if response.status_code == 429 or response.status_code >= 500:
            h = response.headers
            wait = (f"{h['retry-after-ms']} ms" if "retry-after-ms" in h else
                    f"{h['retry-after']} s" if "retry-after" in h else "")
            self._refused = (response.status_code, wait)

    def _retries_out(self) -> ProviderFailure:
        """timeout_seconds ran out while the client waited to retry a 429 or 5xx: the provider's
        refusal used the time, not a slow model (raising timeout_seconds was the wrong fix)."""
        (status, wait), s = self._refused or (0, ""), self.settings
        asked = f", asking to wait {wait} (Retry-After)" if wait else ""
        message = (f"{self._where()} answered {status}{asked}; timeout_seconds ({s.timeout_seconds:g} s) ran out "
                   "while scvd waited to send it again")
        if status == 429:
            return ProviderFailure("provider_error", message, "the provider limits how often it is asked (a rate "
                                   "limit): send the text again once that wait is over")
        return ProviderFailure("provider_error", message, "the provider is busy or failed: send the text again later")

    def _hidden(self, failure: ProviderFailure) -> ProviderFailure:
        """`failure` with the API key taken out of its text: a provider's error may quote the key it
        refused, and the text goes to turn.failed (a chat bridge, the person's chat) and the log."""
        message = redact(failure.message, self._secrets())
        return failure if message == failure.message else ProviderFailure(failure.reason, message, failure.hint)

    def _secrets(self) -> dict[str, str]:
        """The key (when one is configured: else api_key is a stand-in, "unused"), and the values of the
        headers and query parameters sent that read like a credential (a relay's key)."""
        s = self.settings
        if not s.key_source:
            return _sent(s)
        name = s.key_source.split(" ", 1)[1] if s.key_source.startswith(("secret ", "env ")) else "api_key"
        return {**_sent(s), name: s.api_key}

    def _usage(self, inputs: int | float | None, outputs: int | float | None) -> Usage:
        """The request's usage; an absurd figure is dropped (counts 0), logged once a turn."""
        counts = _tokens(inputs), _tokens(outputs)
        if None in counts and not self._absurd:
            self._absurd = True
            log.warning("%s sent a token count no request uses (%.40r, %.40r): left out of the turn's usage",
                        self._where(), inputs, outputs)
        return Usage(*(c or 0 for c in counts))

    def _too_large(self, what: str, limit: int) -> ProviderFailure:
        """The answer went past chat.max_reply_bytes (or a line of it past a quarter of that)."""
        if what == "line":
            return ProviderFailure("provider_error", f"{self._where()} sent a line of more than {limit:,} bytes "
                                   "(a quarter of chat.max_reply_bytes); scvd stopped reading it",
                                   "raise chat.max_reply_bytes if the provider's events are that large; else check "
                                   f"the base_url and wire_api of {table(self.settings.name)}")
        return ProviderFailure("provider_error", f"{self._where()} sent more than {limit:,} bytes in one answer "
                               "(chat.max_reply_bytes); scvd stopped reading it",
                               "ask for less at a time, or raise chat.max_reply_bytes if answers this long are expected")

    def _garbled(self, what: str, data: str | None = None) -> ProviderFailure:
        shown = "" if data is None else f": {redact(data, self._secrets())[:200]!r}"  # a key cut in two stays hidden
        return ProviderFailure("provider_error", f"{self._where()} sent an event that is not {what}{shown}",
                               "send the text again; if it fails again, check the base_url and wire_api of "
                               f"{table(self.settings.name)}")

    def _timed_out(self, stalled: bool = False, whole: bool = False) -> ProviderFailure:
        s = self.settings
        if whole:
            return ProviderFailure("provider_error", f"{self._where()} was still sending its answer after "
                                   f"{ANSWER_TIMEOUTS * s.timeout_seconds:g} s, {ANSWER_TIMEOUTS} times timeout_seconds "
                                   "(the most one answer may take)", "send the text again, asking for less at "
                                   f"once; for a slow model raise {setting(s.name, 'timeout_seconds')}")
        stall = ("; its stream stayed open, but nothing of the answer came (keep-alive comments and empty "
                 "events are not the answer)" if stalled else "")
        return ProviderFailure("provider_error", f"{self._where()} did not answer within "
                               f"{s.timeout_seconds:g} s (timeout_seconds){stall}",
                               f"send the text again; for a slow model raise {setting(s.name, 'timeout_seconds')}")

    async def _connect(self) -> openai.AsyncOpenAI:
        if self._client is None:
            s = self.settings
            hide_in_logs(_sent(s), f"provider {s.name}")  # httpx at debug logs each request's url, its query too
            # on a thread: its TLS context loads the system's certificates (30-200 ms at every turn) and
            # the first one imports the HTTP stack
            self._client = await asyncio.to_thread(self._new_client)
        return self._client

    def _new_client(self) -> openai.AsyncOpenAI:
        s = self.settings
        return openai.AsyncOpenAI(
            api_key=s.api_key, base_url=s.base_url, timeout=s.timeout_seconds, max_retries=s.max_retries,
            default_query=dict(s.query) or None, default_headers=dict(s.headers) or None,
            http_client=openai.DefaultAsyncHttpxClient(
                follow_redirects=False,  # a redirect would take the key and the conversation elsewhere
                event_hooks={"request": [self._sending], "response": [self._heard]}))

    def _failure(self, exc: openai.APIError, reached: bool) -> ProviderFailure:
        """The client's error as the turn's failure, saying what to do."""
        where, s = self._where(), self.settings
        if isinstance(exc, (openai.AuthenticationError, openai.PermissionDeniedError)):
            return ProviderFailure("auth", f"{where} refused the API key ({exc.status_code}): {detail(exc, self._secrets())}",
                                   s.auth_hint())
        if isinstance(exc, openai.APIStatusError):
            if 300 <= exc.status_code < 400:
                return redirected(where, exc, s, self._secrets())
            return status_failure(where, exc, s, self._secrets())
        if isinstance(exc, openai.APITimeoutError):
            return self._timed_out()
        if isinstance(exc, openai.APIConnectionError) and reached:
            return ProviderFailure("provider_error", f"the connection to {where} broke mid-answer: "
                                   f"{cause(exc)}", "send the text again")
        if isinstance(exc, openai.APIConnectionError):
            return ProviderFailure("provider_error", f"cannot reach {where}: {exc}",
                                   f"check the base_url of {table(s.name)}" if s.name == "codex"
                                   else f"check providers.{s.name}.base_url")
        return in_stream(f"{where} failed mid-answer: {exc.message}", exc.code, s)  # an error chunk

    async def aclose(self) -> None:
        """Close the client and its connections (a stream cut off by a cancel closed its own)."""
        client, self._client = self._client, None
        if client is not None:
            await client.close()

    def _where(self) -> str:
        return f"provider {self.settings.name!r} ({http_fields.shown_url(self.settings.base_url)})"

    @abc.abstractmethod
    async def _open(self, client: openai.AsyncOpenAI, request: ModelRequest) -> Any:
        """Send the request in the wire API's shape; the stream of its answer."""

    @abc.abstractmethod
    def _read(self, stream: Any) -> AsyncIterator[Any]:
        """The answer's stream translated into the engine's events; raises if it ends cut short."""

    def _cut_short(self, stream: _Watched, missing: str) -> ProviderFailure:
        """The answer ended before its closing event came."""
        where, media = self._where(), stream.media
        if not stream.events and media != "text/event-stream":  # no stream at all: sending again cannot help
            return ProviderFailure("provider_error", f"{where} answered with {media or 'no content-type'}, not a "
                                   "stream of events (text/event-stream)", f"check the base_url and wire_api of "
                                   f"{table(self.settings.name)}: scvd asks for a streamed answer, and the server "
                                   "there does not stream (or base_url names a web page)")
        return ProviderFailure("provider_error", f"{where} stopped sending: the stream ended before the answer "
                               f"was complete (no {missing})", "send the text again")

    @staticmethod
    @abc.abstractmethod
    def _progress(event: Any) -> bool:
        """Whether the stream's event carries some of the answer (not a keep-alive or an empty event)."""

    _SHAPE = "an event of the wire API"  # what _garbled says an event with the wrong shape is not

    def _check_shape(self, event: Any) -> None:
        """Raise if the parts of the event that _read takes apart are not the objects, lists and texts
        the wire API has there: the client passes an event on as it came, unchecked."""
        if not self._shaped(event):  # `"choices": "x"` failed the turn as a crash inside scvd
            raise self._garbled(self._SHAPE, json.dumps(event.to_dict(warnings=False)))

    @staticmethod
    @abc.abstractmethod
    def _shaped(event: Any) -> bool:
        """Whether the event has the shape _read and _progress take apart."""


def _sent(s: Settings) -> dict[str, str]:
    """The header and query values each request carries that read like a credential (a relay's key),
    by name: an api-version or a team name is none, and hiding it blotted it out of every log line."""
    return picked([*((f"header {k}", k, v) for k, v in s.headers.items()),
                   *((f"query {k}", k, v) for k, v in s.query.items())])


class _Watched:
    """The answer's stream, failing once timeout_seconds passed with no event that carries some of
    the answer. The client's read timeout starts again at every byte, so a provider (or a proxy
    before it) that sent only keep-alive comments or empty events held the turn open without end."""

    def __init__(self, provider: _Base, stream: Any) -> None:
        self._provider, self._next = provider, stream.__anext__
        # a server that ignores stream=true answers application/json: the SSE parser finds no event in it
        self.media = stream.response.headers.get("content-type", "").split(";")[0].strip().lower()
        self.events = 0
        self._loop = asyncio.get_running_loop()
        self._deadline = self._loop.time() + provider.settings.timeout_seconds
        self._end = self._loop.time() + ANSWER_TIMEOUTS * provider.settings.timeout_seconds

    def __aiter__(self) -> _Watched:
        return self

    async def __anext__(self) -> Any:
        try:
            async with asyncio.timeout_at(min(self._deadline, self._end)):
                event = await self._next()
        except TimeoutError:
            raise self._provider._timed_out(stalled=True, whole=self._end <= self._deadline) from None
        if not isinstance(event, openai.BaseModel):  # JSON, but a string, a number or null: no event
            raise self._provider._garbled("a JSON object", json.dumps(event))
        self.events += 1
        self._provider._check_shape(event)
        if self._provider._progress(event):
            self._deadline = self._loop.time() + self._provider.settings.timeout_seconds
        return event


class ResponsesProvider(_Base):
    """`wire_api = "responses"`."""

    _SHAPE = "a Responses API event"

    async def _open(self, client: openai.AsyncOpenAI, request: ModelRequest) -> Any:
        s = self.settings
        extra = {"max_output_tokens": s.max_output_tokens} if s.max_output_tokens else {}
        return await client.responses.create(
            model=s.model, instructions=request.instructions, input=responses_input(request.items),
            tools=[{"type": "function", "name": t.name, "description": t.description,
                    "parameters": t.parameters, "strict": False} for t in request.tools],
            stream=True, store=False, **extra)

    async def _read(self, stream: Any) -> AsyncIterator[Any]:
        async for event in stream:
            kind = event.type
            if kind in ("response.output_text.delta", "response.refusal.delta"):
                yield TextDelta(event.delta)  # a refusal is the model's answer: shown, not an empty reply
            elif kind == "response.output_item.done" and event.item.type == "function_call":
                item = event.item
                yield CallRequested(ToolCall(item.call_id, item.name, item.arguments or "{}"))
            elif kind == "response.completed":
                u = event.response.usage
                yield ReplyDone(self._usage(u.input_tokens, u.output_tokens) if u else Usage())
                await _drain(stream)
                return
            elif kind == "response.incomplete" and _why(event) == "max_output_tokens":
                raise token_limit(self._where(), self.settings)
            elif kind == "response.incomplete" and _why(event) == "content_filter":
                raise content_filtered(self._where())
            elif kind in ("response.failed", "response.incomplete", "error"):
                raise in_stream(f"{self._where()} ended the answer: {_why(event)}", _code(event), self.settings)
        raise self._cut_short(stream, "response.completed")

    @staticmethod
    def _shaped(event: Any) -> bool:
        return _event_shaped(event)

    @staticmethod
    def _progress(event: Any) -> bool:
        kind = getattr(event, "type", None)  # a proxy's {"type": "keepalive"} or {} is no answer
        if isinstance(kind, str) and kind.endswith(".delta"):  # an empty one adds nothing
            return bool(getattr(event, "delta", None))
        return kind == "error" or (isinstance(kind, str) and kind.startswith("response.")
                                   and kind not in ("response.created", "response.queued", "response.in_progress"))


def _event_shaped(event: Any) -> bool:
    """Whether an event has objects and texts where _read takes it apart."""
    kind = getattr(event, "type", None)
    if kind in ("response.output_text.delta", "response.refusal.delta"):
        return isinstance(getattr(event, "delta", None), str)
    if kind == "response.output_item.done":
        item = getattr(event, "item", None)
        return _fields(item) and (getattr(item, "type", None) != "function_call"
                                  or _fields(item, call_id=str, name=str, arguments=(str, type(None))))
    if kind == "response.completed":
        response = getattr(event, "response", None)
        usage = getattr(response, "usage", None)
        return _fields(response) and (usage is None or _fields(usage, input_tokens=_COUNT, output_tokens=_COUNT))
    return True


async def _drain(stream: Any) -> None:
    """Read what follows response.completed, normally only the end of the body, so that the
    connection can carry the turn's next request. The answer is whole by now: a tail that goes on
    past DRAIN_SECONDS (a proxy's keep-alive comments) or breaks only costs that connection."""
    try:
        async with asyncio.timeout(DRAIN_SECONDS):
            async for _ in stream:
                pass
    except Exception as exc:  # TimeoutError, a reset: nothing of the answer is lost
        log.debug("the end of a Responses stream was not read: %s", exc)


def _code(event: Any) -> Any:
    """The error code of an `error` or `response.failed` event (None for response.incomplete)."""
    error = getattr(getattr(event, "response", None), "error", None)
    return getattr(error, "code", None) or getattr(event, "code", None)


def _why(event: Any) -> str:
    response = getattr(event, "response", None)
    error = getattr(response, "error", None) or getattr(event, "message", None)
    details = getattr(response, "incomplete_details", None)
    return str(getattr(error, "message", error) or getattr(details, "reason", None) or event.type)


def responses_input(items: list[Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for item in items:
        if isinstance(item, AssistantReply):
            if item.text:
                out.append({"role": "assistant", "content": item.text})
            out += [{"type": "function_call", "call_id": c.call_id, "name": _sent_name(c.name),
                     "arguments": c.arguments} for c in item.calls]
        elif isinstance(item, ToolOutput):
            out.append({"type": "function_call_output", "call_id": item.call_id, "output": item.output})
        else:
            out.append({"role": "user", "content": item.text})
    return out


class ChatProvider(_Base):
    """`wire_api = "chat"`: Chat Completions, for OpenAI-compatible servers (vLLM, llama.cpp, Ollama)."""

    _SHAPE = "a Chat Completions chunk"

    async def _open(self, client: openai.AsyncOpenAI, request: ModelRequest) -> Any:
        s = self.settings
        extra: dict[str, Any] = {cap_field(s.base_url): s.max_output_tokens} if s.max_output_tokens else {}
        if request.tools:
            extra["tools"] = [{"type": "function", "function": {
                "name": t.name, "description": t.description, "parameters": t.parameters}} for t in request.tools]
        return await client.chat.completions.create(
            model=s.model, messages=chat_messages(request.instructions, request.items), stream=True,
            stream_options={"include_usage": True}, **extra)

    async def _read(self, stream: Any) -> AsyncIterator[Any]:
        calls: list[dict[str, str]] = []
        at: dict[Any, int] = {}  # a fragment's index -> the call in `calls` it adds to
        usage = Usage()
        finished = False  # a finish_reason came: the answer is whole (the usage chunk may follow)
        limited = False  # ... but cut at the token limit (finish_reason length)
        filtered = False  # ... or stopped by the provider's content filter
        chunks, deadline = stream.__aiter__(), None
        while True:
            try:
                if deadline is None:
                    chunk = await chunks.__anext__()
                else:  # the usage chunk and [DONE] are waited for a moment only, as _drain does
                    async with asyncio.timeout_at(deadline):
                        chunk = await chunks.__anext__()
            except StopAsyncIteration:
                break
            except Exception as exc:
                if deadline is None:
                    raise
                log.debug("the end of a Chat Completions stream was not read: %s", exc)  # nothing is lost
                break
            if chunk.usage:
                usage = self._usage(chunk.usage.prompt_tokens, chunk.usage.completion_tokens)
            for choice in chunk.choices or []:
                finished = finished or bool(choice.finish_reason)
                limited = limited or choice.finish_reason == "length"
                filtered = filtered or choice.finish_reason == "content_filter"
                delta = choice.delta
                if delta and delta.content:
                    yield TextDelta(delta.content)
                if delta and delta.refusal:  # the model's refusal is its answer: shown, not an empty reply
                    yield TextDelta(delta.refusal)
                for part in (delta.tool_calls if delta else None) or []:
                    _merge_call(_call_at(calls, at, part), part)
            if finished and deadline is None:
                deadline = asyncio.get_running_loop().time() + DRAIN_SECONDS
        if not finished:
            raise self._cut_short(stream, "finish_reason")
        if limited:  # as the Responses API's response.incomplete: a call in it would be cut mid-arguments
            raise token_limit(self._where(), self.settings)
        if filtered:
            raise content_filtered(self._where())
        for n, c in enumerate(calls):
            yield CallRequested(ToolCall(c["id"] or f"call_{n}", c["name"], c["arguments"] or "{}"))
        yield ReplyDone(usage)

    @staticmethod
    def _shaped(chunk: Any) -> bool:
        return _chunk_shaped(chunk)

    @staticmethod
    def _progress(chunk: Any) -> bool:
        """Text, a call's fragment, reasoning (a server's own field, such as reasoning_content) or a
        finish_reason; not a chunk without choices, the usage alone (it may come again and again), an
        empty delta or a bare role."""
        return any(choice.finish_reason or (choice.delta and any(v for k, v in choice.delta if k != "role"))
                   for choice in getattr(chunk, "choices", None) or [])


def _chunk_shaped(chunk: Any) -> bool:
    """Whether a chunk has objects, lists and texts where _read and _progress take it apart."""
    choices, usage = getattr(chunk, "choices", None), getattr(chunk, "usage", None)
    if not _objects(choices) or not (usage is None or _fields(usage, prompt_tokens=_COUNT, completion_tokens=_COUNT)):
        return False
    deltas = [getattr(choice, "delta", None) for choice in choices or []]
    if not all(delta is None or _fields(delta, content=_TEXT, refusal=_TEXT) for delta in deltas):
        return False
    calls = [getattr(delta, "tool_calls", None) for delta in deltas if delta is not None]
    if not all(map(_objects, calls)):
        return False
    parts = [part for parts in calls for part in parts or []]
    functions = [getattr(part, "function", None) for part in parts]
    return (all(_fields(part, id=_TEXT, index=Hashable) for part in parts)
            and all(fn is None or _fields(fn, name=_TEXT, arguments=_TEXT) for fn in functions))


def _objects(values: Any, *also: Any) -> bool:
    """Whether `values` is None or a list whose items are each an object of the wire API (or in `also`)."""
    return values is None or (isinstance(values, list)
                              and all(isinstance(v, openai.BaseModel) or v in also for v in values))


_TEXT = (str, type(None))  # a text field the wire API may leave out or send as null
_COUNT = (int, float, type(None))  # a token count: some servers send 11.0 (or an average), or null


# the largest token count of one request taken as true: far above any model's window (~1e7), and a turn's
# sums of them stay within int64, which a Go or Rust bridge decodes turn.completed's usage as
MAX_TOKENS = 1 << 40


def _tokens(count: int | float | None) -> int | None:
    """A usage count as the whole number turn.completed carries (null: 0), or None for one no request
    used: negative, not finite (1e400), or past MAX_TOKENS (1e300, 301 digits)."""
    if count is None:
        return 0
    if isinstance(count, float) and not math.isfinite(count):
        return None
    return int(count) if 0 <= count <= MAX_TOKENS else None


def _fields(value: Any, **types: Any) -> bool:
    """Whether `value` is an object of the wire API whose named fields are of these types."""
    return isinstance(value, openai.BaseModel) and all(isinstance(getattr(value, k, None), t) for k, t in types.items())


def cap_field(base_url: str) -> str:
    """Chat Completions' name for the reply token cap: OpenAI's reasoning models refuse `max_tokens`
    (deprecated there), while llama.cpp and older Ollama and vLLM know only `max_tokens`."""
    host = (urlsplit(base_url).hostname or "").lower()
    return "max_completion_tokens" if host == "api.openai.com" else "max_tokens"


def _call_at(calls: list[dict[str, str]], at: dict[Any, int], part: Any) -> dict[str, str]:
    """The call a fragment belongs to: the one at its index, unless it brings another id (Ollama
    sends every parallel call at index 0, each whole with its own id), which starts a new one."""
    n = at.get(part.index)
    if n is None or (part.id and calls[n]["id"] and part.id != calls[n]["id"]):
        at[part.index] = n = len(calls)
        calls.append({"id": "", "name": "", "arguments": ""})
    return calls[n]


def _merge_call(acc: dict[str, str], part: Any) -> None:
    """Tool calls stream in pieces by index: the id and name once, the arguments in fragments."""
    if part.id:
        acc["id"] = part.id
    fn = part.function
    if fn is not None:
        acc["name"] = acc["name"] or fn.name or ""
        acc["arguments"] += fn.arguments or ""


def chat_messages(instructions: str, items: list[Any]) -> list[dict[str, Any]]:
    """The history as Chat Completions messages, in the shape the strictest servers take: roles
    alternate (Llama's and Mistral's chat templates refuse two user messages in a row, which a turn
    that failed before any reply leaves), and every call's arguments are a JSON object (Ollama
    refuses a request whose history holds a call with broken JSON, so the model could never hear
    that its call failed)."""
    out: list[dict[str, Any]] = [{"role": "system", "content": instructions}]
    for item in items:
        if isinstance(item, AssistantReply):
            # content may be null only beside tool_calls: an empty reply is "", never dropped, so the
            # roles still alternate for servers whose chat template requires it
            message: dict[str, Any] = {"role": "assistant", "content": item.text or (None if item.calls else "")}
            if item.calls:
                message["tool_calls"] = [{"id": c.call_id, "type": "function", "function": {
                    "name": _sent_name(c.name), "arguments": _object_text(c.arguments)}} for c in item.calls]
            out.append(message)
        elif isinstance(item, ToolOutput):
            out.append({"role": "tool", "tool_call_id": item.call_id, "content": item.output})
        elif out[-1]["role"] == "user":
            out[-1]["content"] += "\n\n" + item.text
        else:
            out.append({"role": "user", "content": item.text})
    return out


def _object_text(arguments: str) -> str:
    """The arguments as sent, when they are a JSON object; else "{}" (the call's output says what was wrong)."""
    try:
        return arguments if isinstance(lenient_json.loads(arguments), dict) else "{}"  # NaN is no JSON to send
    except (ValueError, RecursionError):
        return "{}"
