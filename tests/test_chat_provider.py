"""The real providers through the real openai client over loopback HTTP, for both wire APIs."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import re
import socket
import threading
import time

import pytest

from chat_model import model  # noqa: F401 (a fixture)
from chat_model import (Calls, Cut, Deltas, Document, Filtered, Flood, Gzipped, Hang, Idle, Limited, Raw, Redirect, Refused,
                        ScriptedModel, Status, Text)
from scvd.chat.items import AssistantReply, CallRequested, ModelRequest, ReplyDone, TextDelta, ToolCall, ToolOutput, ToolSpec, UserText
from scvd.chat.openai_api import cap_field
from scvd.chat.provider import ProviderFailure, Settings, make
from scvd.redact import for_logs

WIRE_APIS = ["responses", "chat"]
ENDPOINTS = {"responses": "responses", "chat": "chat/completions"}  # what scvd appends to base_url


def provider(m: ScriptedModel, wire_api: str, **kw):
    return make(Settings(name="test", model="m", base_url=m.base_url, wire_api=wire_api, api_key="sk-test",
                         key_source=kw.pop("key_source", "secret TEST_KEY"), timeout_seconds=10, **kw))


REQUEST = ModelRequest(
    instructions="be brief",
    items=[UserText(text="hi"), AssistantReply(text="", calls=[ToolCall("c0", "read", '{"path": "a"}')]),
           ToolOutput(call_id="c0", name="read", output='{"ok": true}')],
    tools=[ToolSpec("read", "Read a file.", {"type": "object", "properties": {}})])


async def collect(p, request=REQUEST, close=True):
    """The events of one request; the provider is closed after it, as a turn's end closes it."""
    try:
        return [e async for e in p.stream(request)]
    finally:
        if close:
            await p.aclose()


@pytest.mark.parametrize("wire_api", WIRE_APIS)
def test_text_streams_and_usage_arrives(model, wire_api):
    m = model(Text("hello world", chunks=3))
    events = asyncio.run(collect(provider(m, wire_api)))
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "hello world"
    assert len([e for e in events if isinstance(e, TextDelta)]) == 3
    assert events[-1] == ReplyDone(usage=events[-1].usage) and events[-1].usage.input_tokens == 11
    assert m.tool_names(0) == ["read"]
    assert m.outputs(0) == ['{"ok": true}']  # the history went over in the wire API's own shape


@pytest.mark.parametrize("wire_api", WIRE_APIS)
@pytest.mark.parametrize("count", [11.0, 11.5, None])
def test_usage_counts_that_are_no_whole_numbers_do_not_fail_the_answer(model, wire_api, count):
    """A server that counts tokens as floats (11.0, an average 11.5) or sends null: the whole answer
    had streamed to the chat, then the turn failed as a malformed event (a Responses API count of 11.0
    too, which the client leaves a float)."""
    names = ("prompt_tokens", "completion_tokens") if wire_api == "chat" else ("input_tokens", "output_tokens")
    m = model(Text("hello", usage={names[0]: count, names[1]: 7.0}))
    events = asyncio.run(collect(provider(m, wire_api)))
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "hello"
    usage = events[-1].usage
    assert (usage.input_tokens, usage.output_tokens) == (int(count or 0), 7)
    assert type(usage.input_tokens) is int and type(usage.output_tokens) is int  # turn.completed's usage is ints


@pytest.mark.parametrize("wire_api", WIRE_APIS)
@pytest.mark.parametrize("count", [1e300, -5, 10**300, 1 << 63], ids=["1e300", "negative", "301-digits", "2**63"])
def test_an_absurd_usage_count_is_dropped_not_passed_on(model, wire_api, count, caplog):
    """1e300, a negative count or one of 301 digits went into turn.completed as it came: a bridge in Go or
    Rust, decoding its usage as int64, rejected the frame. Such a figure counts 0, logged once."""
    names = ("prompt_tokens", "completion_tokens") if wire_api == "chat" else ("input_tokens", "output_tokens")
    m = model(Text("hello", usage={names[0]: count, names[1]: 7}), Text("again", usage={names[0]: count, names[1]: 7}))
    p = provider(m, wire_api)

    async def two_requests():
        try:
            return [[e async for e in p.stream(REQUEST)] for _ in range(2)]
        finally:
            await p.aclose()

    with caplog.at_level("WARNING", logger="scvd.chat"):
        replies = asyncio.run(two_requests())
    assert [(r[-1].usage.input_tokens, r[-1].usage.output_tokens) for r in replies] == [(0, 7), (0, 7)]
    assert len([r for r in caplog.records if "token count no request uses" in r.getMessage()]) == 1


@pytest.mark.parametrize("wire_api", WIRE_APIS)
def test_a_number_of_thousands_of_digits_fails_naming_the_provider_not_scvd(model, wire_api):
    """json.loads refuses an integer of more than 4,300 digits with a ValueError: the turn failed as a crash
    inside scvd (`see its log`)."""
    m = model(Raw('{"choices": [], "usage": {"prompt_tokens": ' + "1" * 5000 + ', "input_tokens": 1}}'))
    assert garbled(m, wire_api) == (f"provider 'test' ({m.base_url}) sent an event that is not JSON scvd can read "
                                    "(a number of more than 4,300 digits)")


@pytest.mark.parametrize("wire_api", WIRE_APIS)
def test_a_refusal_is_the_answers_text(model, wire_api):
    """A model that declines streams its refusal (Chat Completions' delta.refusal, the Responses API's
    response.refusal.delta), not text: it was dropped, and the person saw an empty answer."""
    m = model(Refused("I can't help with that.", chunks=3))
    events = asyncio.run(collect(provider(m, wire_api)))
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "I can't help with that."
    assert isinstance(events[-1], ReplyDone)


@pytest.mark.parametrize("wire_api", WIRE_APIS)
def test_parallel_tool_calls_arrive_whole(model, wire_api):
    m = model(Calls(("read", {"path": "a"}), ("read", {"path": "b"})))
    events = asyncio.run(collect(provider(m, wire_api)))
    calls = [e.call for e in events if isinstance(e, CallRequested)]
    assert [(c.name, c.arguments) for c in calls] == [("read", '{"path": "a"}'), ("read", '{"path": "b"}')]
    assert len({c.call_id for c in calls}) == 2


def test_parallel_tool_calls_all_at_index_zero_stay_apart(model):
    """Ollama streams each of several tool calls whole, every one at index 0: a new id starts a new call
    (they were merged into one call of the first's name, its arguments two JSON objects run together)."""
    m = model(Calls(("write", {"path": "a", "content": "x"}), ("read", {"path": "b"}), index_zero=True))
    events = asyncio.run(collect(provider(m, "chat")))
    calls = [e.call for e in events if isinstance(e, CallRequested)]
    assert [(c.name, c.arguments) for c in calls] == [
        ("write", '{"path": "a", "content": "x"}'), ("read", '{"path": "b"}')]
    assert len({c.call_id for c in calls}) == 2


@pytest.mark.parametrize("wire_api", WIRE_APIS)
@pytest.mark.parametrize("cap", [None, 16])
def test_an_answer_cut_at_the_token_limit_fails_saying_which_setting(model, wire_api, cap):
    """Chat Completions took finish_reason length for a whole answer: a tool call cut in its arguments
    went to the model as "arguments must be a JSON object", inviting retries up to the step limit."""
    m = model(Limited())
    with pytest.raises(ProviderFailure) as failed:
        asyncio.run(collect(provider(m, wire_api, max_output_tokens=cap)))
    assert failed.value.reason == "provider_error"
    assert str(failed.value) == f"provider 'test' ({m.base_url}) cut the answer off at its output token limit"
    assert failed.value.hint == ("raise providers.test.max_output_tokens (16 now)" if cap else
                                 "set providers.test.max_output_tokens above the server's default"
                                 ) + ", or ask for less at a time"


@pytest.mark.parametrize("wire_api", WIRE_APIS)
def test_an_answer_the_content_filter_stopped_fails_the_turn(model, wire_api):
    """Chat Completions took finish_reason content_filter for a whole answer: half a reply was the
    turn's answer, with nothing saying the rest was withheld."""
    m = model(Filtered())
    with pytest.raises(ProviderFailure) as failed:
        asyncio.run(collect(provider(m, wire_api)))
    assert failed.value.reason == "provider_error"
    assert str(failed.value) == (f"provider 'test' ({m.base_url}) withheld the rest of the answer: "
                                 "its content filter stopped it")
    assert failed.value.hint == "rephrase the request, or ask the provider's administrator"


@pytest.mark.parametrize("wire_api", WIRE_APIS)
def test_a_call_with_a_blank_name_goes_back_named(model, wire_api):
    """The engine answers a call whose name is blank as one that named no tool; sent back as `" "`
    it was refused, as an empty name is, and so was every later request of the chat."""
    m = model(Text("ok"))
    blank = ModelRequest(instructions="", tools=REQUEST.tools, items=[
        UserText(text="hi"), AssistantReply(calls=[ToolCall("c0", " ", "{}")]), ToolOutput(call_id="c0", name=" ", output="{}")])
    asyncio.run(collect(provider(m, wire_api), blank))
    [call] = [c for i in m.requests[0].get("input") or m.requests[0]["messages"]
              for c in ([i] if i.get("type") == "function_call" else [t["function"] for t in i.get("tool_calls", [])])]
    assert call["name"] == "unnamed"


@pytest.mark.parametrize("wire_api", WIRE_APIS)
def test_429_is_retried_by_the_client(model, wire_api):
    m = model(Status(429, "slow down", retry_after_ms=10), Text("ok"))
    events = asyncio.run(collect(provider(m, wire_api)))
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "ok"
    assert len(m.requests) == 2


@pytest.mark.parametrize("wire_api", WIRE_APIS)
def test_401_is_an_auth_failure_naming_the_secret(model, wire_api):
    m = model(Status(401, "invalid api key"))
    with pytest.raises(ProviderFailure) as info:
        asyncio.run(collect(provider(m, wire_api)))
    assert info.value.reason == "auth" and "invalid api key" in info.value.message
    assert info.value.hint == "store a valid key with `scvctl secrets set TEST_KEY`"
    assert len(m.requests) == 1  # never retried


@pytest.mark.parametrize("wire_api", WIRE_APIS)
@pytest.mark.parametrize("status", [401, 400])
def test_a_provider_error_quoting_the_key_shows_it_as_a_stand_in(model, wire_api, status):
    """A relay answering `Incorrect API key provided: sk-test`: the key went to turn.failed (the
    person's chat, through a bridge) and to scvd's log."""
    m = model(Status(status, "Incorrect API key provided: sk-test. Find yours at https://example.test"))
    with pytest.raises(ProviderFailure) as info:
        asyncio.run(collect(provider(m, wire_api)))
    assert "Incorrect API key provided: [secret TEST_KEY]. Find yours" in info.value.message
    assert "sk-test" not in info.value.message


@pytest.mark.parametrize("user", ["me", "bob", "user"])  # `USER:` takes each of base64's three alignments
@pytest.mark.parametrize("echo", ["Authorization: Basic {}", "{}"])
def test_a_provider_error_echoing_the_key_as_http_basic_shows_no_base64_of_it(model, user, echo):
    """A relay answering with the Authorization it passed on, `Basic base64(user:KEY)`: the key went to
    turn.failed and the log base64-encoded, which anyone reading it decodes. Only the characters that
    also carry the user's bits or the padding's stay, as the user's own do."""
    key = "sk-relay-0123456789abcdef"
    token = base64.b64encode(f"{user}:{key}".encode()).decode()
    m = model(Status(401, echo.format(token)), Status(400, echo.format(token)))
    for status in (401, 400):
        with pytest.raises(ProviderFailure) as info:
            asyncio.run(collect(make(Settings(name="test", model="m", base_url=m.base_url, wire_api="responses",
                                              api_key=key, key_source="secret TEST_KEY", timeout_seconds=10,
                                              max_retries=0))))
        shown = re.search(r"(\S*)\[secret TEST_KEY\](\S*)", info.value.message)
        assert shown and token not in info.value.message, info.value.message
        # of the token, the user's characters stay, and at most three that hold bits of the key's ends
        assert len(shown.group(1) + shown.group(2)) <= len(base64.b64encode(f"{user}:".encode()).rstrip(b"=")) + 3


@pytest.mark.parametrize("event", [
    {"type": "error", "sequence_number": 1, "code": "invalid_api_key", "param": None, "message": "{quote}"},
    {"type": "response.failed", "sequence_number": 1, "response": {
        "id": "r", "object": "response", "created_at": 0, "model": "m", "status": "failed", "output": [],
        "error": {"code": "server_error", "message": "{quote}"}}},
], ids=["error", "response.failed"])
def test_an_error_event_quoting_the_key_shows_it_as_a_stand_in(model, event):
    """A relay that refuses the key in the stream (an error event of the Responses API, not a 401):
    its text went to turn.failed and the log with the key in it."""
    quote = "Incorrect API key provided: sk-test"
    m = model(Raw(json.dumps(event).replace("{quote}", quote)))
    with pytest.raises(ProviderFailure) as info:
        asyncio.run(collect(provider(m, "responses")))
    assert info.value.message.endswith("ended the answer: Incorrect API key provided: [secret TEST_KEY]")


def _stream_error(wire_api: str, code: object, message: str) -> Raw:
    """An error sent inside a 200's stream: a Chat Completions relay's error chunk (OpenRouter, LiteLLM),
    or the Responses API's response.failed."""
    if wire_api == "chat":
        return Raw(json.dumps({"error": {"message": message, "code": code}}))
    return Raw(json.dumps({"type": "response.failed", "sequence_number": 1, "response": {
        "id": "r", "object": "response", "created_at": 0, "model": "m", "status": "failed", "output": [],
        "error": {"code": code, "message": message}}}))


@pytest.mark.parametrize("wire_api", WIRE_APIS)
@pytest.mark.parametrize("code, reason, hint", [
    (401, "auth", "store a valid key with `scvctl secrets set TEST_KEY`"),
    ("rate_limit_exceeded", "provider_error", "the provider is busy or failed: send the text again later"),
    ("invalid_prompt", "provider_error", "send the text again; if it fails the same way, the provider's message "
                                         "says why (check the model of [providers.test] in config.toml)")])
def test_an_error_inside_the_stream_says_what_to_do_by_its_code(model, wire_api, code, reason, hint):
    """The turn failed with no hint at all, and a relay's refused key (in its stream, after a 200)
    was no `auth` failure pointing at the key."""
    m = model(_stream_error(wire_api, code, "nope"))
    with pytest.raises(ProviderFailure) as info:
        asyncio.run(collect(provider(m, wire_api)))
    assert (info.value.reason, info.value.hint) == (reason, hint) and info.value.message.endswith(": nope")


@pytest.mark.parametrize("wire_api", WIRE_APIS)
@pytest.mark.parametrize("status", [307, 308])
def test_a_redirect_elsewhere_is_not_followed_and_says_where_it_pointed(model, wire_api, status):
    """The client followed a provider's 307/308 to another host, sending it the relay's header (httpx
    drops only Authorization) and the whole conversation, three times; the person saw `answered 500`."""
    elsewhere = model(Text("stolen"))
    m = model(Redirect(status, f"{elsewhere.base_url}/steal?token=abc"))
    p = provider(m, wire_api, headers={"X-Relay-Token": "rel-secret-77"})
    with pytest.raises(ProviderFailure) as info:
        asyncio.run(collect(p))
    assert elsewhere.requests == [] and len(m.requests) == 1  # nothing went there, and no retry here
    assert info.value.reason == "provider_error"
    assert info.value.message == (f"provider 'test' ({m.base_url}) answered {status} -> {elsewhere.base_url}/steal: "
                                  "scvd follows no redirect, as it would send your key there")
    assert info.value.hint == (f"the endpoint moved there, but scvd posts to base_url + /{ENDPOINTS[wire_api]}: "
                               "check the base_url and wire_api of [providers.test] in config.toml")


@pytest.mark.parametrize("wire_api", WIRE_APIS)
def test_a_moved_endpoint_names_the_base_url_that_reaches_it_and_that_one_works(model, wire_api):
    """The hint said to set base_url to the Location, the endpoint itself: scvd then posted to
    .../chat/completions/chat/completions; and a move within the same server is no key sent elsewhere."""
    m = model(Redirect(308, f"/v2/{ENDPOINTS[wire_api]}"), Text("moved"))
    origin = m.base_url.removesuffix("/v1")
    with pytest.raises(ProviderFailure) as info:
        asyncio.run(collect(provider(m, wire_api)))
    assert info.value.message == (f"provider 'test' ({m.base_url}) answered 308 -> {origin}/v2/{ENDPOINTS[wire_api]}: "
                                  "the provider moved the endpoint there; scvd follows no redirect")
    assert info.value.hint == f'set providers.test.base_url = "{origin}/v2" if you trust it'
    moved = make(Settings(name="test", model="m", base_url=f"{origin}/v2", wire_api=wire_api, api_key="sk-test",
                          key_source="secret TEST_KEY", timeout_seconds=10))
    assert "".join(e.text for e in asyncio.run(collect(moved)) if isinstance(e, TextDelta)) == "moved"
    assert m.paths[-1] == f"/v2/{ENDPOINTS[wire_api]}"


@pytest.mark.parametrize("wire_api", WIRE_APIS)
def test_a_move_no_base_url_can_reach_says_where_the_endpoint_went(model, wire_api):
    """A server that redirects to the endpoint with a slash added: no base_url makes scvd post there."""
    m = model(Redirect(307, f"/v1/{ENDPOINTS[wire_api]}/"))
    with pytest.raises(ProviderFailure) as info:
        asyncio.run(collect(provider(m, wire_api)))
    assert info.value.message.endswith(f"answered 307 -> {m.base_url}/{ENDPOINTS[wire_api]}/: the provider moved "
                                       "the endpoint there; scvd follows no redirect")
    assert info.value.hint == (f"the endpoint moved there, but scvd posts to base_url + /{ENDPOINTS[wire_api]}: "
                               "check the base_url and wire_api of [providers.test] in config.toml")


@pytest.mark.parametrize("wire_api", WIRE_APIS)
def test_a_huge_error_body_is_read_no_further_than_its_start(model, wire_api):
    """A 300 MB error body was read whole, once per retry (RSS ~950 MB) to quote 300 chars of it."""
    flood = Flood("error", 32 << 20, piece=1 << 16)
    m = model(flood)
    with pytest.raises(ProviderFailure) as info:
        asyncio.run(collect(provider(m, wire_api)))
    assert info.value.reason == "provider_error" and "answered 400" in info.value.message
    assert flood.written < flood.size // 2  # scvd hung up: the server could not write the rest


@pytest.mark.parametrize("wire_api", WIRE_APIS)
def test_an_answer_past_max_reply_bytes_fails_naming_the_setting(model, wire_api):
    """A 131 MB streamed reply was kept whole (one 131 MB transcript line); nothing bounded it."""
    flood = Flood("events", 32 << 20)
    m = model(flood)
    with pytest.raises(ProviderFailure) as info:
        asyncio.run(collect(provider(m, wire_api, max_reply_bytes=200_000)))
    assert info.value.reason == "provider_error"
    assert info.value.message == (f"provider 'test' ({m.base_url}) sent more than 200,000 bytes in one answer "
                                  "(chat.max_reply_bytes); scvd stopped reading it")
    assert info.value.hint == ("ask for less at a time, or raise chat.max_reply_bytes if answers this long are "
                               "expected")
    assert flood.written < flood.size // 2


@pytest.mark.parametrize("wire_api", WIRE_APIS)
def test_a_line_past_a_quarter_of_max_reply_bytes_fails_naming_the_setting(model, wire_api):
    """One 400 MB SSE line that never ended grew scvd by 480 MB, then failed with a wrong explanation."""
    flood = Flood("line", 32 << 20, piece=1 << 16)
    m = model(flood)
    with pytest.raises(ProviderFailure) as info:
        asyncio.run(collect(provider(m, wire_api, max_reply_bytes=200_000)))
    assert info.value.message == (f"provider 'test' ({m.base_url}) sent a line of more than 50,000 bytes (a quarter "
                                  "of chat.max_reply_bytes); scvd stopped reading it")
    assert info.value.hint.startswith("raise chat.max_reply_bytes if the provider's events are that large")
    assert flood.written < flood.size // 2


@pytest.mark.parametrize("wire_api", WIRE_APIS)
def test_a_long_line_that_ends_within_its_chunk_is_bounded_too(model, wire_api):
    """Only what came after a chunk's last line end was counted: a 60 KB line read with its end in one
    chunk passed the line cap."""
    m = model(Raw("z" * 60_000))
    with pytest.raises(ProviderFailure) as info:
        asyncio.run(collect(provider(m, wire_api, max_reply_bytes=200_000)))
    assert "sent a line of more than 50,000 bytes (a quarter of chat.max_reply_bytes)" in info.value.message


@pytest.mark.parametrize("wire_api", WIRE_APIS)
def test_a_gzipped_answer_within_max_reply_bytes_arrives_whole(model, wire_api):
    m = model(Gzipped(Text("z" * 30_000, chunks=30)))
    events = asyncio.run(collect(provider(m, wire_api, max_reply_bytes=200_000)))
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "z" * 30_000
    assert isinstance(events[-1], ReplyDone)


@pytest.mark.parametrize("wire_api", WIRE_APIS)
@pytest.mark.parametrize("step, said", [(Text("z" * 300_000, chunks=300), "more than 200,000 bytes in one answer"),
                                        (Raw("z" * 60_000), "a line of more than 50,000 bytes")],
                         ids=["answer", "line"])
def test_a_gzipped_answer_is_bounded_by_what_it_inflates_to(model, wire_api, step, said):
    """A compressed body of a few KiB inflates to far more: counted as it came, it passed the cap."""
    m = model(Gzipped(step))
    with pytest.raises(ProviderFailure) as info:
        asyncio.run(collect(provider(m, wire_api, max_reply_bytes=200_000)))
    assert info.value.message == f"provider 'test' ({m.base_url}) sent {said}" + (
        " (chat.max_reply_bytes); scvd stopped reading it" if "answer" in said
        else " (a quarter of chat.max_reply_bytes); scvd stopped reading it")


@pytest.mark.parametrize("wire_api", WIRE_APIS)
def test_500_after_retries_is_a_provider_error(model, wire_api):
    m = model(Status(500, "boom", 1), Status(500, "boom", 1), Status(500, "boom", 1))
    with pytest.raises(ProviderFailure) as info:
        asyncio.run(collect(provider(m, wire_api)))
    assert info.value.reason == "provider_error" and "answered 500: boom" in info.value.message
    assert info.value.hint == "the provider failed after scvd's retries: send the text again later"
    assert len(m.requests) == 3


@pytest.mark.parametrize("wire_api", WIRE_APIS)
@pytest.mark.parametrize("status", [429, 503])
def test_a_retry_after_longer_than_scvd_waits_says_the_wait_asked(model, wire_api, status):
    """The client sends nothing again when Retry-After asks more than 2 minutes, yet the hint said "the
    provider failed after scvd's retries" and left out the wait asked."""
    m = model(Status(status, "come back tomorrow", retry_after="100000"), Text("never"))
    with pytest.raises(ProviderFailure) as info:
        asyncio.run(collect(provider(m, wire_api)))
    assert len(m.requests) == 1
    assert info.value.message.endswith(f"answered {status}: come back tomorrow")
    assert info.value.hint == ("the provider asked to wait 27 h (Retry-After), beyond what scvd waits (120 s), so "
                               "scvd did not send it again: try later")


@pytest.mark.parametrize("wire_api", WIRE_APIS)
@pytest.mark.parametrize("header", ["retry-after", "retry-after-ms"])
def test_a_retry_after_of_infinity_is_retried_as_the_client_does_and_the_hint_says_so(model, wire_api, header):
    """The client takes a literal `inf` for no wait asked and sends it again with its own backoff, yet the
    hint said the provider "asked to wait without end ... so scvd did not send it again"."""
    asked = {"retry_after" if header == "retry-after" else "retry_after_ms": "inf"}
    m = model(*[Status(429, "slow down", **asked)] * 3)
    with pytest.raises(ProviderFailure) as info:
        asyncio.run(collect(provider(m, wire_api)))
    assert len(m.requests) == 3
    assert info.value.hint == "the provider failed after scvd's retries: send the text again later"


@pytest.mark.parametrize("wire_api", WIRE_APIS)
def test_an_error_body_that_is_no_json_is_quoted_escaped(model, wire_api):
    """A proxy's web page read only `answered 500: Error code: 500`: nothing of what it said."""
    page = "<html>oops \x1b[2J sk-test " + "x" * 400
    m = model(*[Status(500, body=page, delay=0)] * 3)
    with pytest.raises(ProviderFailure) as info:
        asyncio.run(collect(provider(m, wire_api)))
    shown = ("<html>oops \\x1b[2J [secret TEST_KEY] " + "x" * 266)  # the key is taken out before the cut
    assert info.value.message == f"provider 'test' ({m.base_url}) answered 500: {shown} ..."
    assert info.value.hint == "the provider failed after scvd's retries: send the text again later"


@pytest.mark.parametrize("wire_api", WIRE_APIS)
@pytest.mark.parametrize("step", [Status(400, "x" * 296 + "sk-test"), Raw("x" * 196 + "sk-test, not json")],
                         ids=["error-status", "garbled-event"])
def test_a_key_cut_in_two_where_a_failure_quotes_the_provider_is_still_hidden(model, wire_api, step):
    """An error's text was cut (300 chars, 200 of a garbled event) before the key was taken out of it: a
    key across the cut showed its first part, `sk-`."""
    m = model(step)
    with pytest.raises(ProviderFailure) as info:
        asyncio.run(collect(provider(m, wire_api)))
    assert "sk-" not in info.value.message and "xxx[sec" in info.value.message


@pytest.mark.parametrize("wire_api", WIRE_APIS)
def test_a_key_in_a_redirects_location_is_hidden_where_it_is_cut_and_in_the_hint(model, wire_api):
    """The Location was cut at 300 characters before the key was taken out of the message: a key across
    the cut showed its first part; the base_url the hint names quotes the Location too."""
    m = model(Redirect(307, "/" + "x" * 272 + f"sk-test/v1/{ENDPOINTS[wire_api]}"))
    with pytest.raises(ProviderFailure) as info:
        asyncio.run(collect(provider(m, wire_api)))
    assert "sk-" not in info.value.message and "xxx[sec" in info.value.message
    assert "sk-" not in info.value.hint and "xxx[sec" in info.value.hint


@pytest.mark.parametrize("wire_api", WIRE_APIS)
def test_a_429_for_an_account_out_of_credit_says_to_add_credit_not_to_wait(model, wire_api):
    """OpenAI's quota error is a 429 that no retry or later message cures; the hint said to send the text
    again later."""
    m = model(*[Status(429, "You exceeded your current quota", 1, code="insufficient_quota")] * 3)
    with pytest.raises(ProviderFailure) as info:
        asyncio.run(collect(provider(m, wire_api)))
    assert "answered 429: You exceeded your current quota" in info.value.message
    assert info.value.hint.startswith("the provider's account has no quota or credit left (sending again will not")


@pytest.mark.parametrize("wire_api", WIRE_APIS)
def test_a_400_says_to_lower_the_context_when_the_input_is_too_long(model, wire_api):
    """The hint said to lower chat.context_tokens "to the model's window": a person who had set it to
    the window was told to change nothing, as scvd's estimate undercounted the provider's tokens."""
    m = model(Status(400, "This model's maximum context length is 8192 tokens"), Status(400, "bad request"))
    with pytest.raises(ProviderFailure) as info:
        asyncio.run(collect(provider(m, wire_api)))
    assert "answered 400: This model's maximum context length is 8192 tokens" in info.value.message
    assert info.value.hint == (
        "the request was longer than the model's window by the provider's count: set chat.context_tokens lower "
        "(scvd trims to its own estimate, with a tenth kept free; code and some languages take more tokens than "
        "it counts), or start afresh with chat.clear")
    with pytest.raises(ProviderFailure) as info:
        asyncio.run(collect(provider(m, wire_api)))
    assert info.value.hint == (
        "if it says the input is too long, lower chat.context_tokens (at or below the model's window), or start "
        "afresh with chat.clear; else check the model and wire_api of [providers.test] in config.toml")


@pytest.mark.parametrize("wire_api, posted", [
    ("chat", "chat/completions)"),
    ("responses", 'responses, the Responses API; for a server with Chat Completions only, set '
                  'providers.test.wire_api = "chat")')])
def test_a_404_says_to_check_base_url_and_model_and_names_the_wire_api(model, wire_api, posted):
    """The default wire_api asks a server with Chat Completions only (llama.cpp, an older Ollama) for
    /responses: its 404 said nothing of wire_api."""
    m = model(Status(404, "404 page not found"))
    with pytest.raises(ProviderFailure) as info:
        asyncio.run(collect(provider(m, wire_api)))
    assert info.value.hint == ("check the base_url and model of [providers.test] in config.toml: the server "
                               f"has no such endpoint or model (scvd posts to {m.base_url}/{posted}")


def test_a_404_on_the_imported_codex_setup_points_at_a_provider_of_scvds_own_for_chat_completions(model):
    """It said to set wire_api = "chat" in the Codex config.toml, which codex refuses at start and so
    the import refuses too: such a server is for a [providers.NAME] of scvd's own."""
    m = model(Status(404, "404 page not found"))
    s = Settings(name="codex", model="m", base_url=m.base_url, wire_api="responses", api_key="k", key_source="",
                 timeout_seconds=10)
    with pytest.raises(ProviderFailure) as info:
        asyncio.run(collect(make(s)))
    assert info.value.hint == (
        "check the base_url and model of the imported Codex setup (`scvctl agents import codex`): the server has no "
        f"such endpoint or model (scvd posts to {m.base_url}/responses, the Responses API; for a server with Chat "
        "Completions only, which codex cannot use, add it as a [providers.NAME] with wire_api = \"chat\" to scvd's "
        "config.toml and set chat.provider to that NAME)")


def test_a_refused_key_from_the_environment_says_a_restart_reads_it_or_a_secret_needs_none(model):
    m = model(Status(401, "invalid api key"))
    with pytest.raises(ProviderFailure) as info:
        asyncio.run(collect(provider(m, "responses", key_source="env MY_KEY")))
    assert info.value.hint == (
        "set a valid key in MY_KEY in scvd's environment and restart scvd, or keep it as a secret: `scvctl "
        "secrets set MY_KEY`, api_key_secret = \"MY_KEY\" in [providers.test], then `systemctl --user reload scvd`")


@pytest.mark.parametrize("wire_api", WIRE_APIS)
def test_cancel_mid_stream_hangs_up(model, wire_api):
    m = model(Hang("par"))

    async def run():
        got: list = []

        async def consume():
            p = provider(m, wire_api)
            try:
                async for e in p.stream(REQUEST):
                    got.append(e)
            finally:
                await p.aclose()

        task = asyncio.ensure_future(consume())
        await asyncio.to_thread(m.hung.wait, 10)
        for _ in range(1000):  # the deltas are on their way: the server sent them before `hung`
            if "".join(e.text for e in got) == "par" or task.done():
                break
            await asyncio.sleep(0.01)
        assert got, task.exception() if task.done() else "no delta within 10 s"
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return got

    got = asyncio.run(run())
    assert "".join(e.text for e in got) == "par"
    assert m.hung_up.wait(10), "the model server never saw the connection close"


@pytest.mark.parametrize("wire_api", WIRE_APIS)
def test_a_turns_requests_share_one_connection_until_aclose(model, wire_api):
    m = model(Text("one"), Hang("tw"), Text("three"))

    async def run():
        p = provider(m, wire_api)
        first = await collect(p, close=False)
        task = asyncio.ensure_future(collect(p, close=False))  # cut off mid-stream: its connection is dropped
        await asyncio.to_thread(m.hung.wait, 10)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        third = await collect(p, close=False)  # the same provider goes on, on a fresh connection
        assert len(set(m.peers)) == 2 and m.peers[0] == m.peers[1] != m.peers[2]
        assert m.peers[2] not in m.hung_up_peers
        await p.aclose()
        return first, third

    first, third = asyncio.run(run())
    assert "".join(e.text for e in first if isinstance(e, TextDelta)) == "one"
    assert "".join(e.text for e in third if isinstance(e, TextDelta)) == "three"
    for _ in range(1000):  # the server's thread sees the close a moment later
        if m.peers[2] in m.hung_up_peers:
            break
        time.sleep(0.01)
    assert m.peers[2] in m.hung_up_peers, "aclose() left the connection open"


@pytest.mark.timeout(20)  # the server keeps a "hang" body open for 30 s: reading on until then fails
@pytest.mark.parametrize("tail", ["hang", "reset"])
def test_a_chat_stream_cut_right_after_its_finish_reason_still_answers(model, tail):
    """A finish_reason makes the answer whole; the usage chunk and [DONE] that may follow are waited
    for a moment only: a body kept open or cut off after it loses nothing (it failed the turn)."""
    m = model(Text("all of it", tail=tail, early=True), Text("next"))

    async def run():
        p = provider(m, "chat")
        try:
            return await collect(p, close=False), await collect(p, close=False)
        finally:
            await p.aclose()

    first, second = asyncio.run(run())
    assert "".join(e.text for e in first if isinstance(e, TextDelta)) == "all of it"
    assert isinstance(first[-1], ReplyDone) and first[-1].usage.input_tokens == 0  # no usage chunk came
    assert "".join(e.text for e in second if isinstance(e, TextDelta)) == "next"


@pytest.mark.timeout(20)  # the server keeps a "hang" body open for 30 s: reading on until then fails
@pytest.mark.parametrize("tail", ["hang", "reset"])
@pytest.mark.parametrize("wire_api", ["responses", "chat"])
def test_a_stream_whose_end_never_comes_or_breaks_still_answers(model, tail, wire_api):
    """After the answer's last event (response.completed; the usage chunk) the rest of the body is
    read for the connection's sake, for a moment only: a body kept open (a proxy's comments) or cut
    off (a reset) loses nothing."""
    m = model(Text("all of it", tail=tail), Text("next"))

    async def run():
        p = provider(m, wire_api)
        try:
            first = await collect(p, close=False)
            second = await collect(p, close=False)  # the provider goes on, on a fresh connection
        finally:
            await p.aclose()
        return first, second

    first, second = asyncio.run(run())
    assert "".join(e.text for e in first if isinstance(e, TextDelta)) == "all of it"
    assert isinstance(first[-1], ReplyDone) and first[-1].usage.input_tokens == 11
    assert "".join(e.text for e in second if isinstance(e, TextDelta)) == "next"
    assert m.peers[0] != m.peers[1]


@pytest.mark.parametrize("wire_api", WIRE_APIS)
def test_a_stream_that_ends_before_the_answer_is_complete_fails(model, wire_api):
    """No response.completed (Responses) or finish_reason (Chat Completions): the text so far is a
    fragment, not the answer, even though the body ended cleanly."""
    m = model(Cut("The answer is forty"))
    with pytest.raises(ProviderFailure) as info:
        asyncio.run(collect(provider(m, wire_api)))
    assert info.value.reason == "provider_error"
    assert "the stream ended before the answer was complete" in info.value.message
    assert info.value.hint == "send the text again"


@pytest.mark.parametrize("wire_api", WIRE_APIS)
@pytest.mark.parametrize("body, media", [('{"object": "chat.completion", "choices": []}', "application/json"),
                                         ("<html><body>Open WebUI</body></html>", "text/html")])
def test_an_answer_that_is_no_stream_says_to_check_base_url_not_to_send_again(model, wire_api, body, media):
    """A server that ignores stream=true, or a web page at base_url: the turn failed as a stream cut
    short, with the hint to send the text again, which can never work."""
    m = model(Document(body, media))
    with pytest.raises(ProviderFailure) as info:
        asyncio.run(collect(provider(m, wire_api)))
    assert info.value.message.endswith(f"answered with {media}, not a stream of events (text/event-stream)")
    assert info.value.hint.startswith("check the base_url and wire_api of [providers.test] in config.toml")


@pytest.mark.parametrize("wire_api", WIRE_APIS)
def test_a_connection_reset_mid_answer_is_not_called_unreachable(model, wire_api):
    m = model(Cut("The answer is", tail="reset"))
    with pytest.raises(ProviderFailure) as info:
        asyncio.run(collect(provider(m, wire_api)))
    assert info.value.message.startswith(f"the connection to provider 'test' ({m.base_url}) broke mid-answer: ")
    assert "cannot reach" not in info.value.message and info.value.hint == "send the text again"


def test_unreachable_base_url_names_it(model):
    s = Settings(name="gone", model="m", base_url="http://127.0.0.1:9/v1", wire_api="chat", api_key="k",
                 key_source="", timeout_seconds=5, max_retries=0)
    with pytest.raises(ProviderFailure) as info:
        asyncio.run(collect(make(s)))
    assert info.value.reason == "provider_error" and "127.0.0.1:9" in info.value.message
    assert "providers.gone.base_url" in info.value.hint


@pytest.mark.parametrize("wire_api", WIRE_APIS)
def test_a_base_url_carrying_a_password_or_a_key_is_named_without_them(model, wire_api):
    # a turn's failure goes to the chat (a bridge relays it to a group): user:password@ and a
    # ?key= in base_url are credentials, not where the provider is
    m = model(Status(500, "boom", 1))
    host = m.base_url.split("://", 1)[1]
    s = Settings(name="relay", model="m", base_url=f"http://bob:hunter2@{host}?api-key=q5s7", wire_api=wire_api,
                 api_key="k", key_source="", timeout_seconds=5, max_retries=0)
    with pytest.raises(ProviderFailure) as info:
        asyncio.run(collect(make(s)))
    assert f"provider 'relay' (http://{host})" in info.value.message, info.value.message
    assert "hunter2" not in info.value.message and "q5s7" not in info.value.message


def test_codex_settings_from_an_imported_setup(tmp_path):
    from scvd.chat.provider import codex_settings

    (tmp_path / "config.toml").write_text('model = "o4"\nmodel_provider = "relay"\n[model_providers.relay]\n'
                                          'base_url = "http://relay/v1"\nenv_key = "RELAY_KEY"\n')
    with pytest.raises(ProviderFailure) as info:
        codex_settings(tmp_path, env={})
    assert info.value.reason == "auth" and "from RELAY_KEY (its env_key)" in info.value.message
    assert "RELAY_KEY is set" in info.value.hint  # where scvd's environment comes from: this process's shell
    s = codex_settings(tmp_path, env={"RELAY_KEY": "k1"})
    assert (s.model, s.base_url, s.wire_api, s.api_key, s.key_source) == ("o4", "http://relay/v1", "responses", "k1",
                                                                           "env RELAY_KEY")
    (tmp_path / "auth.json").write_text('{"OPENAI_API_KEY": "k2"}')
    # the OpenAI login's key never goes to another provider's base_url (codex does the same)
    assert codex_settings(tmp_path, env={"RELAY_KEY": "k1"}).api_key == "k1"
    with pytest.raises(ProviderFailure) as info:
        codex_settings(tmp_path, env={})
    assert "provider 'relay' takes its API key from RELAY_KEY" in info.value.message
    # ... unless the provider says it takes that login
    config = (tmp_path / "config.toml").read_text() + "requires_openai_auth = true\n"
    (tmp_path / "config.toml").write_text(config)
    assert codex_settings(tmp_path, env={"RELAY_KEY": "k1"}).api_key == "k2"
    (tmp_path / "config.toml").write_text('model = "o4"\n')  # the built-in openai provider
    s = codex_settings(tmp_path, env={})
    assert (s.base_url, s.api_key, s.key_source) == ("https://api.openai.com/v1", "k2", str(tmp_path / "auth.json"))


@pytest.mark.parametrize("systemd", [True, None])
def test_a_missing_env_key_under_systemd_goes_in_a_file_only_the_user_reads(tmp_path, monkeypatch, systemd):
    """The hint said `systemctl --user edit scvd: Environment=RELAY_KEY=...`: the key in a drop-in any
    user may read (0644). `systemd`: what the cgroup check found (True: scvd.service; None: not known)."""
    from scvd.chat import provider

    monkeypatch.setattr(provider, "runs_as_unit", lambda: systemd)
    (tmp_path / "config.toml").write_text('model_provider = "relay"\n[model_providers.relay]\n'
                                          'base_url = "http://relay/v1"\nenv_key = "RELAY_KEY"\n')
    with pytest.raises(ProviderFailure) as info:
        provider.codex_settings(tmp_path, env={})
    assert ("systemctl --user edit scvd: EnvironmentFile=%h/.config/scv/keys.env, a file only you can read "
            "(chmod 600) holding RELAY_KEY=...; not Environment=, whose drop-in others can read") in info.value.hint
    assert "Environment=RELAY_KEY" not in info.value.hint


def test_an_imported_azure_setup_sends_its_query_params_and_headers_and_keeps_them_out_of_failures(model, tmp_path):
    """Codex's Azure provider needs `query_params = { api-version = ... }`: scvd dropped it (and the
    provider's http_headers and env_http_headers), so every turn of such a setup failed."""
    from scvd.chat.provider import codex_settings

    m = model(Text("hi"), Status(400, "bad az-secret-1 and rel-77 for api-version 2025-04-01-preview of team blue"))
    (tmp_path / "config.toml").write_text(
        f'model = "gpt-5"\nmodel_provider = "azure"\n[model_providers.azure]\nbase_url = "{m.base_url}"\n'
        'env_key = "AZURE_OPENAI_API_KEY"\nquery_params = { api-version = "2025-04-01-preview" }\n'
        'http_headers = { "X-Team" = "blue" }\n'
        'env_http_headers = { "api-key" = "AZURE_OPENAI_API_KEY", "X-Relay-Token" = "RELAY" }\n')
    s = codex_settings(tmp_path, env={"AZURE_OPENAI_API_KEY": "az-secret-1", "RELAY": "rel-77"})
    s = Settings(**{**s.__dict__, "max_retries": 0})
    assert "".join(e.text for e in asyncio.run(collect(make(s))) if isinstance(e, TextDelta)) == "hi"
    assert m.paths[0] == "/v1/responses?api-version=2025-04-01-preview"
    assert (m.headers[0]["x-team"], m.headers[0]["api-key"]) == ("blue", "az-secret-1")
    with pytest.raises(ProviderFailure) as info:
        asyncio.run(collect(make(s)))
    # no credential but the two: hidden, the version and the team were blotted out there and in every log line
    assert info.value.message.endswith("bad [secret AZURE_OPENAI_API_KEY] and [secret header X-Relay-Token] for "
                                       "api-version 2025-04-01-preview of team blue")
    assert for_logs("api-version 2025-04-01-preview, team blue") == "api-version 2025-04-01-preview, team blue"


@pytest.mark.parametrize("line, env, said, hint", [
    ('http_headers = { "X-Team" = "blue\\nX-Admin: yes" }', {},
     "http_headers 'X-Team' has a value no HTTP header can carry (a line break,",
     "fix it in your Codex config.toml, then run `scvctl agents import codex` again"),
    ('http_headers = { "X Team" = "blue" }', {}, "http_headers 'X Team' is not an HTTP header name", "Codex config.toml"),
    ('env_http_headers = { "api-key" = "AZ_KEY" }', {"AZ_KEY": "az-secret-1\n"},
     "env_http_headers 'api-key' (from AZ_KEY in scvd's environment) has a value no HTTP header can carry",
     "fix AZ_KEY in scvd's environment and restart scvd"),
], ids=["line break", "name", "env value"])
def test_an_imported_header_no_request_can_carry_is_refused_as_the_setup_loads(tmp_path, line, env, said, hint):
    """A header value with a line break failed only as the request went out, as `cannot reach provider
    ... Connection error` with a hint to check the base_url: nothing named the header."""
    from scvd.chat.provider import codex_settings

    (tmp_path / "config.toml").write_text('model = "gpt-5"\nmodel_provider = "azure"\n[model_providers.azure]\n'
                                          f'base_url = "http://127.0.0.1:9/v1"\nenv_key = "K"\n{line}\n')
    with pytest.raises(ProviderFailure) as info:
        codex_settings(tmp_path, env={"K": "k", **env})
    assert info.value.reason == "provider_error"
    assert info.value.message.startswith(f"the imported Codex setup's provider 'azure': {said}")
    assert hint in info.value.hint
    assert "az-secret-1" not in info.value.message


def test_an_env_header_whose_variable_is_blank_is_left_out_as_codex_leaves_it_out(model, tmp_path):
    """codex sends an env_http_headers header only when its variable holds more than blanks; the chat
    failed every turn on RELAY_ORG="  " (a value with a space at an end) instead."""
    from scvd.chat.provider import codex_settings

    m = model(Text("hi"))
    (tmp_path / "config.toml").write_text(
        f'model_provider = "relay"\n[model_providers.relay]\nbase_url = "{m.base_url}"\nenv_key = "K"\n'
        'env_http_headers = { "X-Relay-Org" = "RELAY_ORG", "X-Relay-Team" = "RELAY_TEAM" }\n')
    s = codex_settings(tmp_path, env={"K": "k", "RELAY_ORG": "  ", "RELAY_TEAM": "blue"})
    s = Settings(**{**s.__dict__, "max_retries": 0})
    assert "".join(e.text for e in asyncio.run(collect(make(s))) if isinstance(e, TextDelta)) == "hi"
    assert m.headers[0]["x-relay-team"] == "blue" and "x-relay-org" not in m.headers[0]


@pytest.mark.parametrize("line, said", [
    ('base_url = "bob:s3cr3t@relay.example/v1"', "base_url must start with http:// or https://, e.g. http://127.0.0.1:8080/v1"),
    ('base_url = "http://relay.example:99999/v1"',
     "base_url is no URL a request can go to (its port is not a number of 0-65535); write it as http://HOST:PORT/PATH"),
    ('base_url = "http://127.0.0.1:9/v1"\nwire_api = "completions"',
     "wire_api 'completions' is not one codex knows, and it stops at start on it: set wire_api = \"responses\""),
    # it went out as the key "{'value': 's3cr3t'}"
    ('base_url = "http://127.0.0.1:9/v1"\nexperimental_bearer_token = { value = "s3cr3t" }',
     "experimental_bearer_token is a table, not a text: write it as experimental_bearer_token = \"...\""),
], ids=["no scheme", "bad port", "wire_api", "token"])
def test_an_imported_endpoint_no_request_can_reach_is_refused_as_the_setup_loads(tmp_path, line, said):
    """A base_url without a scheme failed only at send time as a connection error; a wire_api scvd
    does not speak was taken for "responses" without a word."""
    from scvd.chat.provider import codex_settings

    (tmp_path / "config.toml").write_text('model_provider = "relay"\n[model_providers.relay]\nenv_key = "K"\n'
                                          f"{line}\n")
    with pytest.raises(ProviderFailure) as info:
        codex_settings(tmp_path, env={"K": "k"})
    assert info.value.reason == "provider_error"
    assert info.value.message == f"the imported Codex setup's provider 'relay': {said}"
    assert "run `scvctl agents import codex` again" in info.value.hint and "s3cr3t" not in info.value.message


@pytest.mark.parametrize("providers", ['model_providers.relay = "x"', 'model_providers = "x"'])
def test_an_imported_provider_that_is_no_table_fails_the_turn_saying_so(tmp_path, providers):
    """It failed with an AttributeError ('str' object has no attribute 'get')."""
    from scvd.chat.provider import codex_settings

    (tmp_path / "config.toml").write_text(f'model_provider = "relay"\n{providers}\n')
    with pytest.raises(ProviderFailure) as info:
        codex_settings(tmp_path, env={})
    if "relay" in providers:
        assert info.value.message == ("the imported Codex setup's provider 'relay': its model_providers entry is "
                                      "not a table: write it as [model_providers.NAME] with its keys")
    else:  # codex stops at start on it (expected a map)
        assert info.value.message == ("the imported Codex setup's model_providers is a text, not a table, and codex "
                                      "stops at start on it: write each provider as [model_providers.NAME] with its keys")


@pytest.mark.parametrize("config, said", [
    ('model_provider = ""\n', "model_provider is empty, and codex stops at start on it"),
    ('model_provider = ["relay"]\n', "model_provider is an array, not a provider's name"),
], ids=["top level", "no text"])
def test_an_imported_model_provider_that_names_no_provider_fails_the_turn_saying_so(tmp_path, config, said):
    """`model_provider = ""` was looked up as a provider "" and failed as `holds no API key for its
    provider ''` (the import took it for openai); `["relay"]` failed with a TypeError."""
    from scvd.chat.provider import codex_settings

    (tmp_path / "config.toml").write_text(config + '[model_providers.relay]\nbase_url = "http://127.0.0.1:9/v1"\n')
    (tmp_path / "auth.json").write_text('{"OPENAI_API_KEY": "sk-openai"}')
    with pytest.raises(ProviderFailure) as info:
        codex_settings(tmp_path, env={})
    assert info.value.reason == "provider_error"
    assert info.value.message.startswith(f"the imported Codex setup's {said}")
    assert "run `scvctl agents import codex` again" in info.value.hint


@pytest.mark.timeout(10)
def test_a_fifo_an_agent_run_left_in_the_codex_home_fails_the_turn_at_once(tmp_path):
    """The chat read the codex home's config.toml plainly (the import does not): a FIFO there, which
    an agent run may leave (its home is writable), held the turn and a worker thread for good."""
    from scvd.chat.provider import codex_settings

    os.mkfifo(tmp_path / "config.toml")
    with pytest.raises(ProviderFailure) as info:
        codex_settings(tmp_path, env={})
    assert info.value.reason == "provider_error"
    assert info.value.message == (f"the imported Codex setup cannot be read: {tmp_path / 'config.toml'} is a FIFO, "
                                  "not a regular file")
    (tmp_path / "config.toml").unlink()
    (tmp_path / "config.toml").write_text('model = "gpt-5"\n')
    os.mkfifo(tmp_path / "auth.json")
    with pytest.raises(ProviderFailure) as info:  # OpenAI's key is read from there: none
        codex_settings(tmp_path, env={})
    assert info.value.reason == "auth" and "holds no API key" in info.value.message


@pytest.mark.parametrize("local, port", [("ollama", 11434), ("lmstudio", 1234)])
def test_codexs_own_local_providers_need_no_key_and_no_table(model, tmp_path, local, port):
    """`model_provider = "ollama"` (codex --oss's setup) names no table and no key: the chat failed
    with `holds no API key` where codex sends its built-in provider on localhost no key."""
    from scvd.chat.provider import codex_settings

    (tmp_path / "config.toml").write_text(f'model = "qwen3"\nmodel_provider = "{local}"\n')
    (tmp_path / "auth.json").write_text('{"OPENAI_API_KEY": "sk-openai-only"}')
    s = codex_settings(tmp_path, env={})
    assert (s.base_url, s.wire_api, s.key_source) == (f"http://localhost:{port}/v1", "responses", "")
    assert codex_settings(tmp_path, env={"CODEX_OSS_PORT": "8080"}).base_url == "http://localhost:8080/v1"
    m = model(Text("hi from the local model"))
    s = codex_settings(tmp_path, env={"CODEX_OSS_BASE_URL": m.base_url, "CODEX_OSS_PORT": "8080"})
    s = Settings(**{**s.__dict__, "max_retries": 0})
    assert "".join(e.text for e in asyncio.run(collect(make(s))) if isinstance(e, TextDelta)) == "hi from the local model"
    assert (m.paths, m.requests[0]["model"]) == (["/v1/responses"], "qwen3")
    assert "sk-openai-only" not in m.authorizations[0]  # OpenAI's key stays OpenAI's


def test_chat_completions_names_the_token_cap_for_its_server(model):
    """OpenAI's reasoning models refuse `max_tokens` ("use max_completion_tokens"); llama.cpp, older
    Ollama and vLLM know only `max_tokens`, which a loopback server gets."""
    m = model(Text("done"))
    asyncio.run(collect(provider(m, "chat", max_output_tokens=64)))
    assert m.requests[0]["max_tokens"] == 64 and "max_completion_tokens" not in m.requests[0]
    openai_ = ("https://api.openai.com/v1", "https://API.openai.com:443/v1/")
    assert [cap_field(url) for url in openai_] == ["max_completion_tokens"] * 2
    assert cap_field("http://127.0.0.1:11434/v1") == cap_field("https://openrouter.ai/api/v1") == "max_tokens"


@pytest.mark.timeout(20)
def test_no_answer_within_timeout_seconds_says_which_setting_to_raise(model):
    m = model(Hang(""))
    s = Settings(name="slow", model="m", base_url=m.base_url, wire_api="chat", api_key="k", key_source="",
                 timeout_seconds=0.5, max_retries=0)
    with pytest.raises(ProviderFailure) as info:
        asyncio.run(collect(make(s)))
    assert "did not answer within 0.5 s" in info.value.message
    assert info.value.hint == "send the text again; for a slow model raise providers.slow.timeout_seconds"


@pytest.mark.timeout(20)
def test_a_rate_limit_that_outlasts_timeout_seconds_is_named_as_the_429_it_is(model):
    """The client waits out a 429's Retry-After before trying again: with a shorter timeout_seconds the
    turn failed as a model that `did not answer`, and the hint said to raise timeout_seconds."""
    m = model(Status(429, "slow down", retry_after_ms=5000))
    s = Settings(name="busy", model="m", base_url=m.base_url, wire_api="chat", api_key="k", key_source="",
                 timeout_seconds=0.5)
    with pytest.raises(ProviderFailure) as info:
        asyncio.run(collect(make(s)))
    assert info.value.message.endswith("answered 429, asking to wait 5000 ms (Retry-After); timeout_seconds (0.5 s) "
                                       "ran out while scvd waited to send it again"), info.value.message
    assert "rate limit" in info.value.hint and "timeout_seconds" not in info.value.hint
    # sent again in time, the second answer never in time: a slow model (1.5 s leaves the first
    # attempt and the 10 ms retry time to happen even on a loaded machine)
    m = model(Status(429, "slow down", retry_after_ms=10), Status(500, delay=6))
    with pytest.raises(ProviderFailure) as info:
        asyncio.run(collect(make(Settings(**{**s.__dict__, "base_url": m.base_url, "timeout_seconds": 1.5}))))
    assert "did not answer within 1.5 s" in info.value.message


@pytest.mark.timeout(20)  # the server sends keep-alives for 30 s: a turn that waits them out fails
@pytest.mark.parametrize("idle", [Idle(), Idle(empty=True), Idle("The answer is", empty=True),
                                  Idle("The answer is", empty="usage")],
                         ids=["comments", "empty-events", "empty-events-after-text", "usage-or-empty-deltas"])
@pytest.mark.parametrize("wire_api", WIRE_APIS)
def test_a_stream_of_keep_alives_only_fails_after_timeout_seconds(model, wire_api, idle):
    """Every byte starts the client's read timeout again: a provider (or a proxy before it) that sent
    `: ping` comments or empty events, and nothing of the answer, held the turn open until turn.cancel.
    Chunks of only `usage`, or empty text deltas, counted as the answer: a turn waited 45 s and more."""
    m = model(idle)
    s = Settings(name="slow", model="m", base_url=m.base_url, wire_api=wire_api, api_key="k", key_source="",
                 timeout_seconds=1, max_retries=0)
    with pytest.raises(ProviderFailure) as info:
        asyncio.run(collect(make(s)))
    assert info.value.reason == "provider_error"
    assert info.value.message == (f"provider 'slow' ({m.base_url}) did not answer within 1 s (timeout_seconds); "
                                  "its stream stayed open, but nothing of the answer came (keep-alive comments "
                                  "and empty events are not the answer)")
    assert info.value.hint == "send the text again; for a slow model raise providers.slow.timeout_seconds"
    assert m.hung_up.wait(10), "the model server never saw the connection close"


@pytest.mark.parametrize(("wire_api", "step", "text"), [
    ("responses", Text("a slow but steady answer", chunks=8, gap=0.3), "a slow but steady answer"),
    ("chat", Text("a slow but steady answer", chunks=8, gap=0.3), "a slow but steady answer"),
    ("chat", Deltas([{"reasoning_content": "thinking"}] * 6 + [{"content": "done"}], gap=0.3), "done")],
    ids=["responses", "chat", "chat-reasoning"])
def test_a_slow_answer_whose_parts_keep_coming_is_not_cut_off(model, wire_api, step, text):
    """timeout_seconds bounds the wait for each next part, not the whole answer; a reasoning model's
    own field (reasoning_content) is a part of it too."""
    m = model(step)
    s = Settings(name="slow", model="m", base_url=m.base_url, wire_api=wire_api, api_key="k", key_source="",
                 timeout_seconds=1.5, max_retries=0)
    events = asyncio.run(collect(make(s)))
    assert isinstance(events[-1], ReplyDone)
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == text


@pytest.mark.timeout(30)
@pytest.mark.parametrize("wire_api", WIRE_APIS)
def test_an_answer_that_keeps_dripping_ends_after_ten_timeouts_in_all(model, wire_api):
    """Each "." came well within timeout_seconds, so a provider dripping one a second held the turn
    for as long as it liked."""
    m = model(Text("." * 500, chunks=500, gap=0.05))  # 25 s in all, a part every 1/20 of timeout_seconds
    s = Settings(name="slow", model="m", base_url=m.base_url, wire_api=wire_api, api_key="k", key_source="",
                 timeout_seconds=1, max_retries=0)
    with pytest.raises(ProviderFailure) as info:
        asyncio.run(collect(make(s)))
    assert info.value.message == (f"provider 'slow' ({m.base_url}) was still sending its answer after 10 s, 10 "
                                  "times timeout_seconds (the most one answer may take)")
    assert info.value.hint == ("send the text again, asking for less at once; for a slow model raise "
                               "providers.slow.timeout_seconds")


@pytest.mark.timeout(20)
@pytest.mark.parametrize("wire_api", WIRE_APIS)
def test_a_provider_that_never_answers_is_asked_once_per_timeout_seconds(wire_api):
    """The client's timeout holds for each attempt and it retries one that timed out twice: a
    provider that accepted the connection and never answered took three timeouts (30 minutes by
    default) while the failure said it waited one."""
    listener = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []

    def accept() -> None:
        with contextlib.suppress(OSError):
            while True:
                accepted.append(listener.accept()[0])

    threading.Thread(target=accept, daemon=True).start()
    s = Settings(name="silent", model="m", base_url=f"http://127.0.0.1:{listener.getsockname()[1]}/v1",
                 wire_api=wire_api, api_key="k", key_source="", timeout_seconds=0.5)  # the default 2 retries
    try:
        with pytest.raises(ProviderFailure) as info:
            asyncio.run(collect(make(s)))
    finally:
        listener.close()
        for conn in accepted:
            conn.close()
    assert "did not answer within 0.5 s" in info.value.message
    assert len(accepted) == 1, "the request was sent again after timeout_seconds had passed"


def garbled(m: ScriptedModel, wire_api: str) -> str:
    """The message of the failure a malformed event gives: the provider's, with the same hint whatever it was."""
    with pytest.raises(ProviderFailure) as info:
        asyncio.run(collect(provider(m, wire_api)))
    assert info.value.reason == "provider_error"
    assert info.value.hint == ("send the text again; if it fails again, check the base_url and wire_api of "
                               "[providers.test] in config.toml")
    return info.value.message


@pytest.mark.parametrize("data", ['"upstream busy"', "5", "null"])
@pytest.mark.parametrize("wire_api", WIRE_APIS)
def test_an_event_that_is_json_but_no_object_fails_naming_the_provider_not_scvd(model, wire_api, data):
    """A string, a number or null is JSON, so the client passed it on as it was: reading it as an
    event failed the turn as a crash inside scvd (`see its log`), with a traceback in the log."""
    m = model(Raw(data))
    assert garbled(m, wire_api) == f"provider 'test' ({m.base_url}) sent an event that is not a JSON object: {data!r}"


@pytest.mark.parametrize("wire_api", WIRE_APIS)
def test_an_event_nested_too_deeply_fails_naming_the_provider_not_scvd(model, wire_api):
    """The client's json.loads of an event nested 100,000 deep raised RecursionError: the turn failed as a
    crash inside scvd (`see its log`), with a traceback in the log."""
    kind = '"choices": []' if wire_api == "chat" else '"type": "response.output_text.delta", "delta": "a"'
    m = model(Raw("{" + kind + ', "x": ' + "[" * 100_000 + "]" * 100_000 + "}"))
    assert garbled(m, wire_api) == (f"provider 'test' ({m.base_url}) sent an event that is not JSON scvd can read "
                                    "(it is nested too deeply)")


SHAPES = {"chat": "a Chat Completions chunk", "responses": "a Responses API event"}


@pytest.mark.parametrize("wire_api, data", [
    *(("chat", data) for data in ['{"choices": "x"}', '{"choices": [1]}', '{"choices": [{"delta": "x"}]}',
                                  '{"choices": [{"delta": {"tool_calls": [1]}}]}', '{"choices": [], "usage": 5}',
                                  '{"choices": [{"delta": {"content": 5}, "finish_reason": "stop"}]}',
                                  '{"choices": [{"delta": {"refusal": 5}, "finish_reason": "stop"}]}',
                                  '{"choices": [{"delta": {"tool_calls": [{"index": 0, "function": {"name": "read", '
                                  '"arguments": 5}}]}, "finish_reason": "stop"}]}']),
    *(("responses", data) for data in [
        '{"type": "response.output_text.delta", "delta": 5}', '{"type": "response.refusal.delta", "delta": 5}',
        '{"type": "response.output_item.done", "item": "x"}',
        '{"type": "response.output_item.done", "item": {"type": "function_call", "call_id": "c", "name": "read", '
        '"arguments": 5}}', '{"type": "response.completed", "response": "x"}',
        '{"type": "response.completed", "response": {"usage": {"input_tokens": "a", "output_tokens": 1}}}'])])
def test_an_event_whose_fields_have_the_wrong_type_fails_naming_the_provider_not_scvd(model, wire_api, data):
    """The client passes an event on as it came: reading `"choices": "x"` or an `item` that is no object
    failed the turn as a crash inside scvd (`see its log`), as an event that is no JSON object did; a
    delta or arguments that were no text went on into the turn, to crash it there."""
    m = model(Raw(data))
    assert garbled(m, wire_api).startswith(f"provider 'test' ({m.base_url}) sent an event that is not "
                                           f"{SHAPES[wire_api]}: '{{")


@pytest.mark.parametrize("wire_api", WIRE_APIS)
def test_an_event_that_is_not_json_fails_naming_the_provider_not_scvd(model, wire_api):
    """The client parses each event's data as JSON: a server (or a proxy before it) that sends other
    text failed the turn as a crash inside scvd (`see its log`), with a traceback in the log."""
    m = model(Raw("upstream busy, retry later"))
    assert garbled(m, wire_api) == (f"provider 'test' ({m.base_url}) sent an event that is not JSON: "
                                    "'upstream busy, retry later'")
