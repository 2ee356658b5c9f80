"""The turn engine without HTTP or sockets: model replies and tool results in, actions out."""

from __future__ import annotations

import json

import pytest

from scvd.chat import catalog as cat, trim
from scvd.chat.engine import AskUser, CallModel, Conversation, Fail, Finish, RunTool, Turn, error_output
from scvd.chat.items import (AssistantReply, Cleared, NoteArrived, Opened, ToolCall, ToolOutput, TurnEnded, Usage,
                             UserText)
from scvd.errors import Denied
from scvd.tools.contract import ToolFlags, ToolRisk, lint


def catalog() -> cat.Catalog:
    return cat.Catalog([
        cat.Entry("read", "Read a file.", {"type": "object", "properties": {"path": {"type": "string"}}}),
        cat.Entry("write", "Write a file.", {"type": "object"}),
        cat.Entry("store_secret", "Store a secret.", {"type": "object"}, system_use=True),
        cat.Entry("watch", "Watch in the background.", {"type": "object"}, background=True),
    ])


def turn(conv: Conversation | None = None, **kw) -> Turn:
    conv = conv or Conversation(settings=Opened(workspace="/ws", system_prompt="Be brief."))
    return Turn(conv, catalog(), "t1", max_steps=kw.pop("max_steps", 8),
                context_tokens=kw.pop("context_tokens", 100_000))


def start(t: Turn, text: str, reply_tokens: int = 0) -> list:
    """A turn's first actions, as service.py starts one: the person's text, then the first request."""
    t.said(text)
    return t.ask(reply_tokens)


def call(call_id: str, name: str, **args) -> ToolCall:
    return ToolCall(call_id=call_id, name=name, arguments=json.dumps(args))


def output(t: Turn, call_id: str) -> dict:
    item = next(i for i in t.conv.history if isinstance(i, ToolOutput) and i.call_id == call_id)
    return json.loads(item.output)


def test_text_only_reply_finishes_with_usage():
    t = turn()
    [first] = start(t, "hi")
    assert isinstance(first, CallModel)
    assert [s.name for s in first.request.tools] == ["find_tools", "ask_user"]
    assert "Tools available by name only: read, watch, write." in first.request.instructions  # not store_secret
    assert first.request.instructions.startswith("Be brief.")
    [done] = t.on_reply("hello", [], Usage(10, 2))
    assert done == Finish("hello", {"input_tokens": 10, "output_tokens": 2, "total_tokens": 12, "requests": 1})
    assert isinstance(t.conv.records[-1], TurnEnded) and t.conv.records[-1].status == "completed"


def test_the_instructions_say_where_credentials_live_when_store_secret_is_offered():
    """Seed 003: one short line on credentials stays in the system prompt, so that a 401 or a missing
    key leads the model to store_secret even when the failing tool's error does not name it."""
    [first] = start(turn(), "hi")
    assert "live in scvd's secret store" in first.request.instructions
    # seed 003's auth failures: a tool saying its token expired (kind failed) is healed the same way
    assert "on a missing key, a 401, a 403 or an expired token, load store_secret" in first.request.instructions
    assert "load store_secret with find_tools (query 'store_secret')" in first.request.instructions
    without = cat.Catalog([e for e in catalog().entries.values() if e.name != "store_secret"])
    t = Turn(Conversation(settings=Opened(workspace="/ws")), without, "t1", max_steps=8, context_tokens=100_000)
    [plain] = start(t, "hi")
    assert "store_secret" not in plain.request.instructions and "secret store" not in plain.request.instructions


def test_unloaded_tool_loads_its_schema_and_asks_for_a_second_call():
    t = turn()
    start(t, "read it")
    [again] = t.on_reply("", [call("c1", "read", path="a")], Usage())
    assert output(t, "c1")["result"]["schema_loaded"] == "read"
    assert "read" in [s.name for s in again.request.tools]
    [run] = t.on_reply("", [call("c2", "read", path="a")], Usage())
    assert isinstance(run, RunTool) and run.arguments == {"path": "a"}
    [final] = t.on_result("c2", True, {"text": "A"})
    assert isinstance(final, CallModel)
    assert output(t, "c2") == {"ok": True, "result": {"text": "A"}}


def test_half_a_character_in_a_models_arguments_is_refused_as_the_socket_refuses_it():
    # json.dumps (and JSON.stringify) print half an emoji as a lone surrogate escape; kept, it crashed
    # the tool's path handling or an agent's launch (UnicodeEncodeError); read as U+FFFD, it read or
    # wrote another file (`a\ufffd`) than the one named, without a word
    t = turn()
    start(t, "read it")
    t.on_reply("", [call("c1", "read", path="a")], Usage())
    [again] = t.on_reply("", [call("c2", "read", path="a\ud83d")], Usage())
    assert isinstance(again, CallModel), again  # no RunTool: the model is told why
    error = output(t, "c2")["error"]
    assert error["kind"] == "invalid_arguments"
    assert error["message"].startswith("read: argument `path` holds a lone surrogate U+D83D at character 1 "), error


def test_find_tools_search_loads_matches_and_list_loads_nothing():
    t = turn()
    start(t, "x")
    [nxt] = t.on_reply("", [call("c1", "find_tools", query="write", mode="list")], Usage())
    assert output(t, "c1")["result"]["tools"][0]["name"] == "write"
    assert not t.conv.loaded
    [nxt] = t.on_reply("", [call("c2", "find_tools", query="write file")], Usage())
    assert output(t, "c2")["result"]["schemas_loaded"][0] == "write"
    assert "write" in [s.name for s in nxt.request.tools]
    hidden = t.catalog.find(cat.FindToolsArgs(query="secret"))[0]
    shown = t.catalog.find(cat.FindToolsArgs(query="secret", include_system=True))[0]
    assert hidden == [] and shown[0]["name"] == "store_secret"


def test_find_tools_over_many_mcp_tools_answers_the_best_and_counts_the_rest():
    """A find_tools over a few MCP servers (hundreds of tools, their own descriptions of up to 4 KiB)
    answered every match whole: an output chat.context_tokens then dropped entire ("output dropped to
    fit"), so the model learnt of no tool at all."""
    many = [cat.Entry(f"mcp__gh__issue_{n:03}", "Issue tool. " + "x" * 2000, {"type": "object"})
            for n in range(300)]
    t = Turn(Conversation(settings=Opened(workspace="/ws")), cat.Catalog([*catalog().entries.values(), *many]),
             "t1", max_steps=8, context_tokens=128_000)
    start(t, "x")
    t.on_reply("", [call("c1", "find_tools", mode="list")], Usage())
    answer = output(t, "c1")["result"]
    assert len(json.dumps(answer)) < 40_000, len(json.dumps(answer))
    shown = [tool["name"] for tool in answer["tools"]]
    assert shown[:3] == ["mcp__gh__issue_000", "mcp__gh__issue_001", "mcp__gh__issue_002"]
    assert answer["more"] == (f"{303 - len(shown)} more tools match, not shown; narrow the query (words of the "
                              "name or purpose of the tool you need) to see them")
    t.on_reply("", [call("c2", "find_tools", query="read")], Usage())
    assert "more" not in output(t, "c2")["result"]


def test_find_tools_that_matches_nothing_says_what_to_try_and_which_tools_there_are():
    """An empty list alone: the model guessed other words blind, or gave up on a tool it had."""
    many = [cat.Entry(f"mcp__gh__issue_{n}", "Issue tool.", {"type": "object"}) for n in range(3)]
    t = Turn(Conversation(settings=Opened(workspace="/ws")), cat.Catalog([*catalog().entries.values(), *many]),
             "t1", max_steps=8, context_tokens=100_000)
    start(t, "x")
    t.on_reply("", [call("c1", "find_tools", query="deploy kubernetes")], Usage())
    answer = output(t, "c1")["result"]
    assert answer["tools"] == [] and answer["note"] == (
        "no tool matches 'deploy kubernetes'; try other words (what the tool does, or part of its name), or "
        "find_tools without a query to list every tool; the tools here: mcp__gh__* (3 tools), read, watch, write")
    t.on_reply("", [call("c2", "find_tools", query="write")], Usage())
    assert "note" not in output(t, "c2")["result"]


def test_find_tools_loads_no_schema_for_a_small_word_of_the_query():
    """Words matched as substrings: the "a" of "read a file" is in "watch" and in nearly every
    description, so a search loaded up to 8 unrelated schemas, sent with every later request."""
    t = turn()
    assert t.catalog.find(cat.FindToolsArgs(query="read a file"))[1] == ["read", "write"]
    assert t.catalog.find(cat.FindToolsArgs(query="how to do it"))[1] == []
    assert t.catalog.find(cat.FindToolsArgs(query="fil"))[1] == ["read", "write"]  # and the words it starts


def test_find_tools_matches_a_query_word_with_punctuation_inside_by_its_words():
    """Once descriptions were matched word by word, "SKILL.md" (or "read-skill") was one word that
    no description word equals, so the search found nothing."""
    found = cat.Catalog([cat.Entry("read_skill", "Read a skill's SKILL.md by name.", {"type": "object"}),
                         cat.Entry("read", "Read a file.", {"type": "object"})])
    assert found.find(cat.FindToolsArgs(query="SKILL.md"))[1] == ["read_skill"]
    assert found.find(cat.FindToolsArgs(query="read-skill"))[1] == ["read_skill", "read"]


def test_find_tools_takes_null_for_an_argument_as_its_default():
    """Models send null for an optional argument they mean to leave out, and every tool takes it so:
    find_tools answered invalid_arguments and the model spent a step on it."""
    t = turn()
    start(t, "x")
    t.on_reply("", [call("c1", "find_tools", query="write", mode=None, include_system=None)], Usage())
    assert output(t, "c1")["result"]["schemas_loaded"] == ["write"]
    t.on_reply("", [call("c2", "find_tools", query=None, mode="list")], Usage())
    assert [f["name"] for f in output(t, "c2")["result"]["tools"]] == ["read", "watch", "write"]


def test_find_tools_finds_store_secret_by_its_name_as_the_instructions_say():
    """The credentials line says to load store_secret with find_tools, but a search hid every system
    tool without include_system: the model found nothing and gave up on the missing key."""
    t = turn()
    [first] = start(t, "x")
    assert "load store_secret with find_tools (query 'store_secret')" in first.request.instructions
    [nxt] = t.on_reply("", [call("c1", "find_tools", query="store_secret")], Usage())
    assert output(t, "c1")["result"]["schemas_loaded"] == ["store_secret"]
    assert "store_secret" in [s.name for s in nxt.request.tools]
    listed = t.catalog.find(cat.FindToolsArgs(query="store_secret", mode="list"))[0]
    assert listed == []  # the ordinary listing still leaves it out (seed 003)
    # and a listing asked for system tools shows it (seed 003: find_tools(mode=list) asked for them)
    found, load, _ = t.catalog.find(cat.FindToolsArgs(mode="list", include_system=True))
    assert "store_secret" in [f["name"] for f in found] and load == []
    for query in ("'store_secret'", "store_secret.", "store secret", "Store Secret"):  # as a model may copy it
        assert t.catalog.find(cat.FindToolsArgs(query=query))[1] == ["store_secret"], query


def test_a_denial_goes_back_to_the_model_with_its_kind():
    conv = Conversation(settings=Opened(workspace="/ws"), loaded=dict.fromkeys(["write"]))
    t = turn(conv)
    start(t, "write it")
    [run] = t.on_reply("", [call("c1", "write")], Usage())
    [nxt] = t.on_result("c1", False, error=Denied("approval a1 was denied by me"))
    body = [i for i in nxt.request.items if isinstance(i, ToolOutput)][-1]
    assert json.loads(body.output)["error"] == {"kind": "denied", "message": "approval a1 was denied by me"}


def test_all_calls_of_a_step_run_and_outputs_keep_call_order():
    conv = Conversation(settings=Opened(workspace="/ws"), loaded=dict.fromkeys(["read"]))
    t = turn(conv)
    start(t, "x")
    actions = t.on_reply("", [call("c1", "read", path="1"), call("c2", "read", path="2")], Usage())
    assert [a.call.call_id for a in actions] == ["c1", "c2"]
    assert t.on_result("c2", True, 2) == []
    [nxt] = t.on_result("c1", True, 1)
    outputs = [i.call_id for i in nxt.request.items if isinstance(i, ToolOutput)]
    assert outputs == ["c1", "c2"]


def test_each_output_is_a_record_once_in_and_a_replay_cancels_only_the_open_calls():
    """A step's outputs became records only once its last call ended: a crash then cancelled, at the
    replay, a call that had completed (a write the model would make again). Each is a record as it
    comes; the replay puts the step's outputs in the calls' order, the one left open cancelled."""
    conv = Conversation(settings=Opened(workspace="/ws"), loaded=dict.fromkeys(["read", "write"]))
    t = turn(conv)
    start(t, "x")
    t.on_reply("", [call("c1", "read", path="1"), call("c2", "write"), call("c3", "read", path="3")], Usage())
    assert t.on_result("c3", True, 3) == [] and t.on_result("c2", True, 2) == []
    records = conv.take_records()
    assert [r.call_id for r in records if isinstance(r, ToolOutput)] == ["c3", "c2"]  # as they came
    assert not [i for i in conv.history if isinstance(i, ToolOutput)]  # the history takes them with the step's last

    replayed = Conversation.replay(records, conv.settings)  # scvd killed while c1 ran
    assert [(i.call_id, json.loads(i.output)) for i in replayed.history if isinstance(i, ToolOutput)] == [
        ("c1", {"ok": False, "error": {"kind": "cancelled", "message": "scvd stopped before this call finished"}}),
        ("c2", {"ok": True, "result": 2}), ("c3", {"ok": True, "result": 3})]
    assert [r.call_id for r in replayed.records if isinstance(r, ToolOutput)] == ["c1"]  # only it is written back


def test_ask_user_waits_for_the_answer():
    t = turn()
    start(t, "x")
    [ask] = t.on_reply("", [call("q1", "ask_user", question="which?")], Usage())
    assert ask == AskUser("q1", "which?")
    [nxt] = t.on_answer("q1", "the blue one")
    assert output(t, "q1")["result"] == {"answer": "the blue one"}


def test_an_answer_read_once_the_turn_was_cut_is_kept_as_ask_users_output():
    """The person's answer, taken before the cut but read after it, is not replaced by `cancelled`;
    the turn asks the model nothing more, and the question's siblings are cancelled as before."""
    conv = Conversation(settings=Opened(workspace="/ws"), loaded=dict.fromkeys(["read"]))
    t = turn(conv)
    start(t, "x")
    t.on_reply("", [call("q1", "ask_user", question="which?"), call("c1", "read")], Usage())
    t.late_answer("q1", "the blue one")
    t.cancel("the turn was cancelled")
    assert output(t, "q1") == {"ok": True, "result": {"answer": "the blue one"}}
    assert output(t, "c1")["error"]["kind"] == "cancelled"


def test_background_result_becomes_a_note_before_the_next_request():
    conv = Conversation(settings=Opened(workspace="/ws"), loaded=dict.fromkeys(["watch"]))
    t = turn(conv)
    start(t, "x")
    run, nxt = t.on_reply("", [call("b1", "watch")], Usage())
    assert run.background and isinstance(nxt, CallModel)
    assert output(t, "b1")["result"]["background"] is True
    conv.background_result(run.call, '{"ok": true}')
    [again] = t.on_reply("", [call("c9", "find_tools", query="x", mode="list")], Usage())
    assert any(isinstance(i, UserText) and "background call b1" in i.text for i in again.request.items)


def test_step_limit_fails_the_turn_and_closes_its_calls():
    conv = Conversation(settings=Opened(workspace="/ws"), loaded=dict.fromkeys(["read"]))
    t = turn(conv, max_steps=2)
    start(t, "x")
    t.on_reply("", [call("c1", "read")], Usage())
    [nxt] = t.on_result("c1", True, 1)
    t.on_reply("", [call("c2", "read")], Usage())
    [fail] = t.on_result("c2", True, 2)
    assert isinstance(fail, Fail) and fail.reason == "step_limit" and "chat.max_steps" in fail.message
    assert conv.records[-1].status == "failed" and conv.records[-1].reason == "step_limit"


def test_cancel_gives_waiting_calls_a_cancelled_output():
    conv = Conversation(settings=Opened(workspace="/ws"), loaded=dict.fromkeys(["read"]))
    t = turn(conv)
    start(t, "x")
    t.on_reply("", [call("c1", "read")], Usage())
    t.cancel("turn.cancel")
    assert output(t, "c1")["error"]["kind"] == "cancelled"
    assert t.on_result("c1", True, 1) == []  # a late result is ignored


def test_a_bad_argument_of_find_tools_or_ask_user_says_what_they_take():
    """A model's guess (`text` for ask_user's `question`, mode 'all') got msgspec's "Object contains
    unknown field `text`" / "Invalid enum value 'all'", naming neither the argument nor the values."""
    t = turn()
    start(t, "x")
    t.on_reply("", [call("c1", "ask_user", text="Which branch?"), call("c2", "find_tools", mode="all")], Usage())
    assert output(t, "c1")["error"] == {
        "kind": "invalid_arguments",
        "message": "ask_user: unknown argument `text` (arguments: question)"}
    assert output(t, "c2")["error"] == {
        "kind": "invalid_arguments",
        "message": "find_tools: argument `mode`: Invalid enum value 'all'; use one of: list, search"}


def test_bad_arguments_and_unknown_tools_are_answered_without_running():
    t = turn()
    start(t, "x")
    actions = t.on_reply("", [ToolCall("c1", "read", "{nope"), call("c2", "rm_rf")], Usage())
    assert all(isinstance(a, CallModel) for a in actions)
    assert output(t, "c1")["error"]["kind"] == "invalid_arguments"
    assert output(t, "c2")["error"]["kind"] == "unknown_tool"
    # a system tool stays out of this listing too (seed 003: only find_tools lists them, when asked)
    assert "tools: read" in output(t, "c2")["error"]["message"] and "store_secret" not in output(t, "c2")["error"]["message"]



def test_a_mistyped_tool_is_told_the_closest_names_first_and_a_servers_tools_as_one():
    """The socket's answer listed every tool; the model's is the same helper (scvd/tool_names.py)."""
    many = [cat.Entry(f"mcp__gh__issue_{n:04d}", "Issue tool.", {"type": "object"}) for n in range(3000)]
    t = Turn(Conversation(settings=Opened(workspace="/ws")), cat.Catalog([*catalog().entries.values(), *many]),
             "t1", max_steps=8, context_tokens=100_000)
    start(t, "x")
    t.on_reply("", [call("c1", "raed"), call("c2", "mcp__gh__isue_0042")], Usage())
    assert output(t, "c1")["error"]["message"] == (
        "no tool named 'raed' in this conversation; closest: read; tools: mcp__gh__* (3000 tools), read, watch, write")
    assert output(t, "c2")["error"]["message"].startswith(
        "no tool named 'mcp__gh__isue_0042' in this conversation; closest: mcp__gh__issue_0042, ")

def test_context_limit_fails_when_nothing_fits():
    """With no schema loaded, chat.clear (which unloads them) changes nothing: it is not offered."""
    t = turn(context_tokens=50)
    [fail] = start(t, "x" * 4000)
    assert isinstance(fail, Fail) and fail.reason == "context_limit"
    assert fail.hint == ("raise chat.context_tokens, or shorten the system prompt (chat.open's system_prompt, or "
                         "chat.system_prompt)")


def test_context_limit_with_schemas_loaded_offers_chat_clear():
    conv = Conversation(settings=Opened(workspace="/ws", system_prompt="Be brief."))
    conv.loaded["read"] = None
    [fail] = start(Turn(conv, catalog(), "t1", max_steps=8, context_tokens=50), "x" * 4000)
    assert isinstance(fail, Fail) and fail.reason == "context_limit"
    assert fail.hint == "start afresh with chat.clear (it unloads the schemas), or raise chat.context_tokens"


def test_a_long_chat_that_keeps_loading_tools_unloads_the_least_recently_used_and_keeps_working():
    """Schemas loaded by find_tools stayed until chat.clear: each search shrank the room for the
    history, until every request of the chat failed context_limit."""
    schema = {"type": "object", "properties": {f"p{n}": {"type": "string", "description": "x" * 60}
                                               for n in range(12)}}  # about 300 tokens
    tools = cat.Catalog([cat.Entry(f"g{g}_t{i}", f"Group{g:02} tool.", schema) for g in range(12) for i in range(8)])
    conv = Conversation(settings=Opened(workspace="/ws"))
    for g in range(12):  # 96 schemas: about 29,000 tokens, far past the budget if all stayed
        t = Turn(conv, tools, f"t{g}", max_steps=8, context_tokens=16_000)
        start(t, f"use group {g}")
        [ask] = t.on_reply("", [call(f"c{g}", "find_tools", query=f"group{g:02}")], Usage())
        assert isinstance(ask, CallModel), ask
        assert {f"g{g}_t{i}" for i in range(8)} <= {s.name for s in ask.request.tools}
        t.on_reply("done", [], Usage())
    assert "g0_t0" in ask.request.instructions  # listed by name again
    t = Turn(conv, tools, "t12", max_steps=8, context_tokens=16_000)
    start(t, "use g0_t0")
    [ask] = t.on_reply("", [call("c99", "g0_t0")], Usage())
    assert output(t, "c99")["result"]["schema_loaded"] == "g0_t0" and "g0_t0" in {s.name for s in ask.request.tools}
    replayed = Conversation.replay(conv.take_records(), conv.settings)  # a restart unloads the same ones
    start(Turn(replayed, tools, "t13", max_steps=8, context_tokens=16_000), "x")
    assert list(replayed.loaded) == list(conv.loaded)


def test_each_schema_of_a_request_is_sized_once(monkeypatch):
    """The loaded schemas (up to 32 of an MCP server's, each kilobytes) were encoded twice before every
    model request: once to pick those to unload, once more for the request's budget."""
    sized: list[str] = []
    real = trim.estimate

    def estimate(value):
        sized.extend(s.name for s in (value if isinstance(value, list) else [value]) if isinstance(s, cat.ToolSpec))
        return real(value)

    monkeypatch.setattr(trim, "estimate", estimate)
    conv = Conversation(settings=Opened(workspace="/ws"), loaded=dict.fromkeys(["read", "write"]))
    [ask] = start(turn(conv), "x")
    names = [s.name for s in ask.request.tools]
    assert "read" in names and sorted(sized) == sorted(names)


def test_a_replayed_chat_orders_its_schemas_by_use_as_the_running_one_did():
    """The order of use picks the schemas unloaded first: a reply calling a loaded tool, then one not
    loaded, then another loaded was ordered otherwise on replay, so a restart unloaded other schemas."""
    t = turn()
    start(t, "x")
    t.conv.load(["read"])
    t.conv.load(["watch"])
    t.on_reply("", [call("c1", "read", path="a"), call("c2", "write"), call("c3", "watch")], Usage())
    replayed = Conversation.replay(t.conv.take_records(), t.conv.settings)
    assert list(replayed.loaded) == list(t.conv.loaded) == ["read", "watch", "write"]


def test_a_request_leaves_room_for_the_reply_and_for_what_the_estimate_undercounts():
    """With chat.context_tokens at the model's window a long chat still got the provider's 400
    ("maximum context length"): no room was kept for the reply (max_output_tokens), and bytes / 4
    counted a Chinese character, a token or more, as three quarters of one."""
    def first_request(output: str, **kw) -> list:
        conv = Conversation(settings=Opened(workspace="/ws"))
        conv.history += [UserText(text="read it"), AssistantReply(calls=[call("c1", "read", path="a")]),
                         ToolOutput(call_id="c1", name="read", output=output), AssistantReply(text="done")]
        [ask] = start(Turn(conv, catalog(), "t1", max_steps=8, context_tokens=10_000), "next", **kw)
        return [i.output for i in ask.request.items if isinstance(i, ToolOutput)]

    assert first_request("x" * 20_000, reply_tokens=4_000) == [trim.TRIMMED]  # 5,000 tokens, and 4,000 for the reply
    assert first_request("x" * 20_000) == ["x" * 20_000]
    assert first_request("漢" * 9_000) == [trim.TRIMMED]  # 9,000 tokens, not 6,750


def test_a_message_too_long_alone_says_to_send_a_shorter_one_and_the_next_turn_has_room():
    """The hint said to start a new conversation (chat.clear, which loses the history) for a pasted log
    too long alone: a shorter message is the fix, and the next turn fits without it."""
    conv = Conversation(settings=Opened(workspace="/ws"))
    [fail] = start(Turn(conv, catalog(), "t1", max_steps=8, context_tokens=4_000), "log " * 5_000)
    assert fail.reason == "context_limit" and fail.message.startswith("the message is about 5010 tokens")
    assert fail.hint.startswith("send a shorter message") and "chat.clear" not in fail.hint
    [ask] = start(Turn(conv, catalog(), "t2", max_steps=8, context_tokens=4_000), "the last lines only")
    assert [i.text for i in ask.request.items] == ["the last lines only"]


def test_replay_rebuilds_and_closes_calls_a_crash_left_open():
    records = [Opened(workspace="/ws"), UserText(text="hi"), AssistantReply(calls=[ToolCall("c1", "read")])]
    conv = Conversation.replay(records)
    assert json.loads(conv.history[-1].output)["error"]["kind"] == "cancelled"


def test_replay_ends_a_turn_a_kill_cut_off_once():
    from scvd.chat.readback import KILLED_NOTE

    records = [Opened(workspace="/ws"), UserText(text="rm it", turn="t1"),
               AssistantReply(calls=[ToolCall("c1", "bash")], turn="t1")]
    conv = Conversation.replay(records)
    written = conv.take_records()
    assert [(type(r).__name__, r.turn) for r in written] == [("ToolOutput", "t1"), ("ScvdNote", "t1"),
                                                              ("TurnEnded", "t1")]
    assert conv.history[-1].text == KILLED_NOTE and written[-1].status == "failed"
    assert Conversation.replay(records + written).take_records() == []  # a second restart adds nothing


def test_an_older_turn_a_kill_cut_off_and_a_build_without_notes_resumed_gets_its_note_in_place():
    """Only the last turn got the note: one that a build from before the notes had resumed (its calls
    closed, no note, no end) stayed without, and the model read its request followed by the next turn's
    as two requests still to carry out. The note goes where it belongs, before the next turn's text;
    nothing is written, so every replay reads it there once."""
    from scvd.chat.readback import KILLED_NOTE

    later = [Opened(workspace="/ws"), UserText(text="rm it", turn="t1"),
             AssistantReply(calls=[ToolCall("c1", "bash")], turn="t1"),
             ToolOutput(call_id="c1", name="bash", output=error_output("cancelled", "scvd stopped")),
             UserText(text="hi", turn="t2"), AssistantReply(text="hello", turn="t2"),
             TurnEnded(turn="t2", status="completed")]
    for records in (later, [*later, UserText(text="and now?", turn="t3"), TurnEnded(turn="t3", status="completed")]):
        conv = Conversation.replay(records)
        assert [getattr(i, "text", i.call_id if isinstance(i, ToolOutput) else "") for i in conv.history][:6] == \
            ["rm it", "", "c1", KILLED_NOTE, "hi", "hello"]
        assert conv.take_records() == []


def test_replay_hands_over_the_background_notes_the_model_has_not_read():
    records = [Opened(workspace="/ws"), NoteArrived(call_id="b1", text="[result of b1]"),
               UserText(text="[result of b1]", turn="t2", note="b1"), TurnEnded(turn="t2", status="completed"),
               NoteArrived(call_id="b2", text="[result of b2]")]
    conv = Conversation.replay(records)
    assert [n.call_id for n in conv.notes] == ["b2"]  # b1 was handed over before the restart
    conv.flush_notes("t3")
    assert [(i.text, i.note) for i in conv.history] == [("[result of b1]", "b1"), ("[result of b2]", "b2")]
    assert Conversation.replay([*records, Cleared()]).notes == []  # chat.clear forgets them, as in memory


def test_the_loops_own_tools_follow_the_design_rules():
    class Spec:
        risk, flags = ToolRisk.READ_ONLY, ToolFlags()

        def __init__(self, spec):
            self.name, self.description, self.schema = spec.name, spec.description, spec.parameters

        def input_schema(self):
            return self.schema

    for spec in cat.CORE:
        lint(Spec(spec))  # raises naming the rule broken


def test_a_call_id_the_model_reuses_in_a_later_step_still_gets_its_output():
    conv = Conversation(settings=Opened(workspace="/ws"), loaded=dict.fromkeys(["read"]))
    t = turn(conv)
    start(t, "x")
    t.on_reply("", [call("same", "read")], Usage())
    t.on_result("same", True, 1)
    t.on_reply("", [call("same", "read")], Usage())
    [nxt] = t.on_result("same", True, 2)
    assert [json.loads(i.output)["result"] for i in nxt.request.items if isinstance(i, ToolOutput)] == [1, 2]


def test_a_long_chat_holds_old_trimmed_outputs_as_markers_and_sends_what_it_always_sent():
    """Every output of every turn was held whole as long as the chat was open (116 MiB after 2,000
    turns of 60 KB reads), and encoded again before each request."""
    import random

    from scvd.chat import trim as trim_mod

    rng = random.Random(7)
    conv = Conversation(settings=Opened(workspace="/ws"), loaded=dict.fromkeys(["read", "watch"]))
    shadow: list = []  # the history as the transcript has it: nothing ever blanked

    def sent(actions: list) -> list:
        shadow.extend(r for r in conv.take_records() if isinstance(r, (UserText, AssistantReply, ToolOutput)))
        [request] = [a.request for a in actions if isinstance(a, CallModel)]
        budget = 3_600 - trim_mod.estimate(request.instructions) - sum(map(trim_mod.estimate, request.tools))
        assert request.items == trim_mod.trim(shadow, budget)  # as if nothing had been compacted
        return request.items

    for n in range(60):
        t = Turn(conv, catalog(), f"t{n}", max_steps=8, context_tokens=4_000)
        sent(start(t, f"question {n}"))
        calls = [call(f"c{n}-{k}", "read", path=str(k)) for k in range(rng.randint(1, 3))]
        t.on_reply("", calls, Usage())
        for c in calls[:-1]:
            t.on_result(c.call_id, True, {"content": "x" * rng.choice([10, 500, 3000])})
        sent(t.on_result(calls[-1].call_id, True, {"content": "y" * rng.choice([10, 500, 3000])}))
        t.on_reply(f"answer {n}", [], Usage())
    held = sum(len(i.output) for i in conv.history if isinstance(i, ToolOutput))
    whole = sum(len(i.output) for i in shadow if isinstance(i, ToolOutput))
    assert held < whole / 10
    assert {i.output for i in conv.history[:len(conv.history) // 2] if isinstance(i, ToolOutput)} == {trim_mod.TRIMMED}
    assert len(conv.history) < len(shadow) / 2  # the front no request can send any more is gone
    assert len(conv.sizes) <= len(conv.history)  # and the estimates hold nothing it let go of
    last = max(i for i, item in enumerate(conv.history) if isinstance(item, UserText))
    assert {i.output for i in conv.history[:last] if isinstance(i, ToolOutput)} == {trim_mod.TRIMMED}


def test_a_resumed_long_chat_holds_only_what_a_request_can_send_and_sends_what_it_always_sent():
    """A resumed chat held every turn since its last clear (258 MB for a 73 MB transcript) though no
    request could ever send more than chat.context_tokens of it."""
    records: list = [Opened(workspace="/ws")]
    for n in range(500):
        records += [UserText(text=f"question {n} " + "q" * 200, turn=f"t{n}"),
                    AssistantReply(calls=[call(f"c{n}", "read", path="a")], turn=f"t{n}"),
                    ToolOutput(call_id=f"c{n}", name="read", output="x" * 400, turn=f"t{n}"),
                    AssistantReply(text=f"answer {n}", turn=f"t{n}"), TurnEnded(turn=f"t{n}", status="completed")]
    whole, held = Conversation.replay(records), Conversation.replay(records)
    trim.forget_front(held.history, 4_000, held.sizes)
    assert 0 < len(held.history) < len(whole.history) // 10
    asked = [start(Turn(conv, catalog(), "t500", max_steps=8, context_tokens=4_000), "and now?")
             for conv in (whole, held)]
    assert asked[0][0].request == asked[1][0].request


def test_a_call_too_large_to_send_back_is_not_run_and_the_model_hears_why():
    """A model's 5 MB argument failed the turn with "this turn's requests grew past
    chat.context_tokens ... ask for less at a time", as if the person had asked too much."""
    conv = Conversation(settings=Opened(workspace="/ws"), loaded=dict.fromkeys(["read", "write"]))
    t = turn(conv, context_tokens=4_000)
    start(t, "write the report")
    huge = call("c1", "write", path="r.txt", content="x" * 20_000)
    [read] = t.on_reply("", [huge, call("c2", "read", path="a")], Usage())  # the write is answered here
    assert read.call.name == "read"
    [request] = t.on_result("c2", True, {"content": "a"})
    reply = next(i for i in request.request.items if isinstance(i, AssistantReply))
    assert reply.calls[0].arguments == '{"dropped": "these arguments were too large to keep"}'
    error = output(t, "c1")["error"]
    assert error["kind"] == "limit"
    assert error["message"].startswith("this call of write was not run: its arguments were about 5008 tokens, "
                                       "more than the ")
    assert "the next request to you has room for (chat.context_tokens, less the instructions" in error["message"]
    assert output(t, "c2") == {"ok": True, "result": {"content": "a"}}


def test_a_turn_the_models_own_calls_overfill_fails_naming_them():
    conv = Conversation(settings=Opened(workspace="/ws"), loaded=dict.fromkeys(["write"]))
    t = turn(conv, context_tokens=4_000)
    start(t, "write the reports")
    calls = [call(f"c{n}", "write", path=f"{n}.txt", content="x" * 5_000) for n in range(3)]
    assert [type(a) for a in t.on_reply("", calls, Usage())] == [RunTool] * 3
    t.on_result("c0", True, {})
    t.on_result("c1", True, {})
    [fail] = t.on_result("c2", True, {})
    assert fail.reason == "context_limit"
    assert fail.message.startswith("the model's own reply calling write in this turn is about 3826 tokens")
    assert fail.hint == "send the text again, asking for the work in smaller steps, or raise chat.context_tokens"


def test_a_call_the_next_request_can_hold_runs_and_one_it_cannot_is_dropped():
    """A 45 KB write (about 12,000 tokens) with a 32k window and 8k for the reply was refused as
    more than half of the 20,800 a request may hold, though the next request had room for it."""
    code = "def f():\n    return 'x'\n" * 5_000
    for kb, runs in ((45, True), (90, False)):
        conv = Conversation(settings=Opened(workspace="/ws"), loaded=dict.fromkeys(["read", "write"]))
        t = turn(conv, context_tokens=32_000)
        start(t, "write the module", reply_tokens=8_000)
        actions = t.on_reply("", [call("c1", "write", path="m.py", content=code[:kb * 1000])], Usage())
        assert [type(a) for a in actions] == ([RunTool] if runs else [CallModel])
        if runs:
            [request] = t.on_result("c1", True, {"written": True})
            assert output(t, "c1") == {"ok": True, "result": {"written": True}}
        else:
            error = output(t, "c1")["error"]
            assert error["kind"] == "limit"
            assert error["message"].startswith("this call of write was not run: its arguments were about 24383 tokens, "
                                               "more than the 20268 the next request to you has room for")

def test_late_in_a_long_turn_a_small_call_still_runs():
    """The room was this turn counted whole, where a request blanks its older outputs: after three
    outputs of ~7.5k tokens in a 32k window every call, a 5-token read too, was refused until
    max_steps. Half of a request stays a call's due."""
    conv = Conversation(settings=Opened(workspace="/ws"), loaded=dict.fromkeys(["read", "write"]))
    t = turn(conv, context_tokens=32_000)
    start(t, "summarise the ten files", reply_tokens=8_000)
    for n in range(7):  # chat.max_steps (8) ends the turn at the eighth
        actions = t.on_reply("", [call(f"c{n}", "read", path=f"f{n}.txt")], Usage())
        assert [type(a) for a in actions] == [RunTool], (n, output(t, f"c{n}"))
        assert [type(a) for a in t.on_result(f"c{n}", True, {"content": "word " * 6000})] == [CallModel]


