"""Chat turns over the real socket, against a scripted model over real HTTP through the real openai client.

The daemon runs in-process (real Unix socket) with two test tools: `chat_gather`
(concurrent: each call waits until two run at once, so a serial lane would
answer `together: false`) and the built-in read/write for the pipeline itself.
"""

from __future__ import annotations

import asyncio
import json
import logging
import shutil
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Annotated, Any

import msgspec
import pytest

from chat_model import model  # noqa: F401 (a fixture)
from chat_model import Calls, Cut, Deltas, Flood, Hang, Status, Text
from conftest import wait_pending
from harness import RawConn
from helpers import lockable_keyring
from scvd import errors, protocol as p
from scvd.chat.readback import CANCELLED_NOTE
from scvd.chat.pipeline import NO_APPROVER, NO_APPROVER_BRIDGE
from scvd.tools.contract import CallContext, Plan, Tool, ToolFlags, ToolRisk

WIRE_APIS = ["responses", "chat"]
END = (p.TurnCompleted, p.TurnCancelled, p.TurnFailed)


class GatherArgs(msgspec.Struct, forbid_unknown_fields=True):
    label: Annotated[str, msgspec.Meta(description="a label to echo back; empty by default, e.g. a")] = ""


class GatherTool(Tool):
    name = "chat_gather"
    description = ("Wait until two calls run at once, then return.\nUse for checking fan-out; "
                   "read for files.\nPrecondition: only in test daemons.")
    Arguments = GatherArgs
    risk = ToolRisk.READ_ONLY
    flags = ToolFlags(always_allow=True, concurrent=True)

    def __init__(self) -> None:
        self.arrived = 0  # never decreases: the first call cannot miss the second
    def plan(self, args: Any, ctx: CallContext) -> Plan:
        return Plan(risk=self.risk, summary="gather")

    async def run(self, args: Any, plan: Plan, ctx: CallContext) -> Any:
        self.arrived += 1
        try:
            async with asyncio.timeout(10):
                while self.arrived < 2:
                    await asyncio.sleep(0.01)
            together = True
        except TimeoutError:  # a serial lane: the second call starts only after this one gives up
            together = False
        return {"label": args.label, "together": together}


class SlowStopTool(Tool):
    """A call that takes a while to stop when cancelled, as a bash command in its kill grace."""

    name = "chat_slow_stop"
    description = ("Run until cancelled, then take a second to stop.\nUse for checking cancellation; "
                   "read for files.\nPrecondition: only in test daemons.")
    Arguments = GatherArgs
    risk = ToolRisk.READ_ONLY
    flags = ToolFlags(always_allow=True)

    def __init__(self, stop_seconds: float = 1.0) -> None:
        self.running = threading.Event()
        self.release = threading.Event()  # set: it stops at once
        self.stop_seconds = stop_seconds

    def plan(self, args: Any, ctx: CallContext) -> Plan:
        return Plan(risk=self.risk, summary="slow stop")

    async def run(self, args: Any, plan: Plan, ctx: CallContext) -> Any:
        self.running.set()
        try:
            await asyncio.sleep(60)
        finally:  # stopping takes its time, cancelled or not
            await asyncio.shield(asyncio.to_thread(self.release.wait, self.stop_seconds))
        return {}


def load(*names: str) -> Calls:
    """The model's first move for a tool known by name only: find_tools, which loads its schema."""
    return Calls(*[("find_tools", {"query": n}) for n in names])


@pytest.fixture
def chat_rig(make_inproc, monkeypatch, model):
    monkeypatch.setenv("SCVD_TEST_MODEL_KEY", "sk-test")
    start_model = model

    def start(*steps: Any, wire_api: str = "responses", extra: str = "", key: str = "SCVD_TEST_MODEL_KEY",
              provider: str = ""):
        model = start_model(*steps)
        config = (f'[providers.test]\nmodel = "m"\nbase_url = "{model.base_url}"\nwire_api = "{wire_api}"\n'
                  f'api_key_secret = "{key}"\n{provider}[chat]\nprovider = "test"\n{extra}')
        inproc = make_inproc(config, tools=[GatherTool()])
        return model, inproc

    return start


def open_chat(c, workspace: Path, **fields: Any) -> p.ChatOpened:
    return c.request(p.ChatOpen, workspace=str(workspace), **fields)


def wait_for(check, seconds: float = 10) -> bool:
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def run_turn(c, session: str, text: str, on_event=None) -> tuple[list[Any], Any]:
    turn = c.request(p.TurnStart, session=session, text=text).turn
    events = []
    while True:
        event = c.next_event()
        events.append(event)
        if on_event:
            on_event(event)
        if isinstance(event, END) and event.turn == turn:
            return events, event


@pytest.mark.parametrize("wire_api", WIRE_APIS)
def test_a_tool_call_its_result_then_the_final_text(chat_rig, workspace, wire_api):
    (workspace / "a.txt").write_text("hello from a\n")
    model, d = chat_rig(load("read"), Calls(("read", {"path": "a.txt"})), Text("it says hello", chunks=3),
                        wire_api=wire_api)
    with d.client(name="pytest", approver=True) as c:
        chat = open_chat(c, workspace)
        events, end = run_turn(c, chat.session, "what is in a.txt?")
    kinds = [type(e).__name__ for e in events]
    assert kinds[0] == "TurnStarted" and kinds[-2:] == ["AssistantCompleted", "TurnCompleted"]
    assert kinds.index("CallCompleted") < kinds.index("AssistantDelta")
    done = next(e for e in events if isinstance(e, p.CallCompleted))
    assert done.ok and done.turn == end.turn and done.call_id.startswith(end.turn)
    assert "".join(e.text for e in events if isinstance(e, p.AssistantDelta)) == "it says hello"
    assert end.usage["input_tokens"] == 33 and end.usage["requests"] == 3
    # lazy schemas: the first request had the core only; find_tools loaded read for the rest
    assert model.tool_names(0) == ["find_tools", "ask_user"]
    assert "read" in model.tool_names(1)
    assert "hello from a" in model.outputs(2)[-1]
    # the turn's three requests shared one connection (one handshake), closed when the turn ended
    assert len(set(model.peers)) == 1
    assert wait_for(lambda: model.peers[0] in model.hung_up_peers), "the turn left its connection open"


@pytest.mark.parametrize("wire_api", WIRE_APIS)
def test_concurrent_calls_run_together(chat_rig, workspace, wire_api):
    model, d = chat_rig(load("chat_gather"),
                        Calls(("chat_gather", {"label": "a"}), ("chat_gather", {"label": "b"})), Text("both"),
                        wire_api=wire_api)
    with d.client(name="pytest") as c:
        chat = open_chat(c, workspace)
        events, end = run_turn(c, chat.session, "gather")
    assert isinstance(end, p.TurnCompleted)
    results = [json.loads(o)["result"] for o in model.outputs(2)[-2:]]
    assert results == [{"label": "a", "together": True}, {"label": "b", "together": True}]


@pytest.mark.one_loop
@pytest.mark.parametrize("wire_api,cap", [("responses", 64), ("chat", 10)])  # the default, and one configured
def test_a_reply_of_a_thousand_calls_runs_a_steps_worth_and_tells_the_model_about_the_rest(chat_rig, workspace,
                                                                                         wire_api, cap):
    """A runaway reply of thousands of calls held the event loop for seconds (each call's id was checked
    against a set rebuilt for it) and every call was made, each output in the transcript. The first
    chat.max_calls_per_step run; each of the rest is answered, not run, and the turn goes on while
    other clients are served."""
    calls = [("chat_gather", {"label": str(i)}) for i in range(1000)]
    model, d = chat_rig(load("chat_gather"), Calls(*calls), Text("done"), wire_api=wire_api,
                        extra="" if cap == 64 else f"max_calls_per_step = {cap}\n")
    pongs: list[str] = []
    with d.client(name="pytest") as c, d.client(name="other") as o:
        session = open_chat(c, workspace).session
        ended = threading.Event()

        def ping() -> None:
            while not ended.is_set():
                pongs.append(type(o.request(p.Ping)).__name__)

        pinger = threading.Thread(target=ping)
        pinger.start()
        try:
            events, end = run_turn(c, session, "gather a thousand")
            answered_meanwhile = len(pongs)
        finally:
            ended.set()
            pinger.join()
        history = c.request(p.ChatHistory, session=session).records
    assert isinstance(end, p.TurnCompleted) and answered_meanwhile > 0 and set(pongs) == {"Pong"}
    assert len([e for e in events if isinstance(e, p.CallCompleted)]) == cap  # only those were made
    outputs = [json.loads(o) for o in model.outputs(2)[-1000:]]
    assert [o["result"]["label"] for o in outputs[:cap]] == [str(i) for i in range(cap)]
    told = (f"this call was not run: one step may make at most {cap} tool calls (chat.max_calls_per_step) and "
            "this reply made 1000; make the ones still needed again, fewer per step")
    assert outputs[cap:] == [{"ok": False, "error": {"kind": "limit", "message": told}}] * (1000 - cap)
    assert len([r for r in history if r["kind"] == "tool"]) == 1 + 1000  # every call answered in the transcript


def test_a_429_is_retried_then_the_turn_completes(chat_rig, workspace):
    model, d = chat_rig(Status(429, "slow down", retry_after_ms=10), Text("fine"))
    with d.client(name="pytest") as c:
        events, end = run_turn(c, open_chat(c, workspace).session, "hi")
    assert isinstance(end, p.TurnCompleted) and len(model.requests) == 2


@pytest.mark.one_loop
@pytest.mark.parametrize("wire_api", WIRE_APIS)
def test_a_401_fails_the_turn_with_reason_auth(chat_rig, workspace, wire_api):
    model, d = chat_rig(Status(401, "invalid api key"), wire_api=wire_api)
    with d.client(name="pytest") as c:
        events, end = run_turn(c, open_chat(c, workspace).session, "hi")
    assert isinstance(end, p.TurnFailed) and end.reason == "auth"
    assert "invalid api key" in end.message
    assert end.hint == "store a valid key with `scvctl secrets set SCVD_TEST_MODEL_KEY`"


@pytest.mark.one_loop
def test_a_missing_key_fails_the_turn_naming_the_secret(chat_rig, workspace):
    model, d = chat_rig(Text("never"), key="SCVD_TEST_NO_SUCH_KEY")
    with d.client(name="pytest") as c:
        events, end = run_turn(c, open_chat(c, workspace).session, "hi")
    assert end.reason == "auth" and "SCVD_TEST_NO_SUCH_KEY" in end.message
    assert "scvctl secrets set SCVD_TEST_NO_SUCH_KEY" in end.hint and model.requests == []


@pytest.mark.one_loop
def test_the_text_of_a_turn_that_failed_for_want_of_a_key_reaches_the_model_with_the_next(chat_rig, workspace,
                                                                                       monkeypatch):
    # it was lost when the key was missing, though kept when the server refused a wrong one
    model, d = chat_rig(Text("deploying"), key="SCVD_TEST_LATE_KEY")
    with d.client(name="pytest") as c:
        session = open_chat(c, workspace).session
        assert run_turn(c, session, "deploy release-7 to staging")[1].reason == "auth"
        monkeypatch.setenv("SCVD_TEST_LATE_KEY", "sk-test")
        assert isinstance(run_turn(c, session, "try again please")[1], p.TurnCompleted)
        history = c.request(p.ChatHistory, session=session).records
    assert [i["content"] for i in model.requests[0]["input"] if i.get("role") == "user"] == [
        "deploy release-7 to staging", "try again please"]
    assert [r["text"] for r in history if r["kind"] == "user"] == ["deploy release-7 to staging", "try again please"]


@pytest.mark.one_loop
def test_a_locked_keyring_fails_the_turn_saying_to_unlock_it(chat_rig, workspace, monkeypatch, tmp_path):
    """It used to end the turn as a bug (`internal`) or say the key is not set."""
    monkeypatch.setenv("PYTHON_KEYRING_BACKEND", lockable_keyring.BACKEND)
    monkeypatch.setenv("LOCKABLE_KEYRING", str(tmp_path / "keyring.json"))
    lockable_keyring.lock(tmp_path / "keyring.json")
    model, d = chat_rig(Text("never"), key="SCVD_TEST_NO_SUCH_KEY")
    with d.client(name="pytest") as c:
        events, end = run_turn(c, open_chat(c, workspace).session, "hi")
    assert end.reason == "auth" and "could not read SCVD_TEST_NO_SUCH_KEY (KeyringLocked): unlock it" in end.message
    assert model.requests == []


def until_asked(c, session: str, text: str) -> tuple[str, list[Any]]:
    """Start a turn and read its events up to its first approval.requested: the turn and them."""
    turn = c.request(p.TurnStart, session=session, text=text).turn
    events = [c.next_event()]
    while not isinstance(events[-1], p.ApprovalRequested):
        events.append(c.next_event())
    return turn, events


def test_a_cancelled_turn_ends_after_its_calls(chat_rig, workspace):
    """turn.cancelled is the turn's last event: the call waiting for approval completes (cancelled),
    and its request is withdrawn, before it."""
    write = Calls(("write", {"path": "out.txt", "content": "x", "mode": "create"}))
    model, d = chat_rig(load("write"), write, Text("after"))
    with d.client(name="pytest", approver=True) as c:
        session = open_chat(c, workspace).session
        turn, events = until_asked(c, session, "write it")
        c.request(p.TurnCancel, session=session, turn=turn)
        while not isinstance(events[-1], END):
            events.append(c.next_event())
        kinds = [type(e).__name__ for e in events]
        assert kinds[-3:] == ["ApprovalResolved", "CallCompleted", "TurnCancelled"], kinds
        done = events[-2]
        assert done.turn == turn and done.error.kind == "cancelled"
        _, end = run_turn(c, session, "again")  # the lane is free: the next turn runs
    assert isinstance(end, p.TurnCompleted) and not (workspace / "out.txt").exists()


@pytest.mark.parametrize("then", ["cancel again", "close the session"])
def test_a_turn_cancelled_twice_still_ends_after_its_calls_and_the_model_reads_them_cancelled(
        chat_rig, workspace, then):
    """A stop button pressed twice (or a cancel, then the session closed) cut the wait for the turn's
    calls short: turn.cancelled came before the call.completed of a command still stopping, and the
    model read that the call's outcome was unknown, though it was stopped."""
    stubborn = Calls(("bash", {"command": "trap '' TERM INT HUP; touch started; sleep 40"}))
    model, d = chat_rig(load("bash"), stubborn, Text("after"))
    with d.client(name="pytest", approver=True) as c:
        session = open_chat(c, workspace).session
        turn, events = until_asked(c, session, "run it")
        c.request(p.ApprovalDecide, approval_id=events[-1].approval_id, decision="approve")
        wait_for(lambda: (workspace / "started").exists())
        c.request(p.TurnCancel, session=session, turn=turn)
        if then == "cancel again":
            c.request(p.TurnCancel, session=session, turn=turn)
        else:
            c.request(p.SessionClose, session=session)
        while not isinstance(events[-1], END):
            events.append(c.next_event())
        kinds = [type(e).__name__ for e in events]
        assert kinds[-2:] == ["CallCompleted", "TurnCancelled"], kinds
        assert events[-2].error.kind == "cancelled"
        if then == "cancel again":  # the conversation goes on: the model reads the call as stopped
            run_turn(c, session, "again")
            told = json.dumps(model.requests[-1])
            assert "cancelled" in told and "whether it did its work is unknown" not in told, told


@pytest.mark.parametrize("wire_api", WIRE_APIS)
def test_cancel_mid_stream(chat_rig, workspace, wire_api):
    model, d = chat_rig(Hang("thinking"), Text("after"), wire_api=wire_api)
    with d.client(name="pytest") as c:
        session = open_chat(c, workspace).session
        turn = c.request(p.TurnStart, session=session, text="hi").turn
        while not isinstance(c.next_event(), p.AssistantDelta):
            pass
        with pytest.raises(errors.InvalidRequest, match=f"turn {turn} is still running"):
            c.request(p.TurnStart, session=session, text="and another")
        with pytest.raises(errors.InvalidRequest, match="cancel it"):
            c.request(p.ChatClear, session=session)
        c.request(p.TurnCancel, session=session, turn=turn)
        events = []
        while not isinstance(events[-1:] and events[-1], END):
            events.append(c.next_event())
        assert isinstance(events[-1], p.TurnCancelled)
        assert model.hung_up.wait(10), "the provider's connection stayed open after the cancel"
        # the conversation goes on: the next turn works
        _, end = run_turn(c, session, "again")
    assert isinstance(end, p.TurnCompleted)


def cancel_mid_reply(c, session: str, text: str) -> str:
    """Start a turn, cancel it once its reply streams, and wait for its end; its id."""
    turn = c.request(p.TurnStart, session=session, text=text).turn
    while not isinstance(c.next_event(), p.AssistantDelta):
        pass
    c.request(p.TurnCancel, session=session, turn=turn)
    while not isinstance(c.next_event(), END):
        pass
    return turn


@pytest.mark.one_loop
def test_the_next_turn_tells_the_model_the_last_one_was_cancelled(chat_rig, workspace):
    """A turn cancelled before any reply keeps its text; the next turn's went right after it, so the
    model read "delete the logs" + "what time is it" as two requests and carried out the cancelled one."""
    model, d = chat_rig(Hang("deleting"), Text("noon"), wire_api="chat")
    with d.client(name="pytest") as c:
        session = open_chat(c, workspace).session
        cancel_mid_reply(c, session, "delete the logs")
        run_turn(c, session, "what time is it")
    assert model.requests[1]["messages"][1:] == [
        {"role": "user", "content": f"delete the logs\n\n{CANCELLED_NOTE}\n\nwhat time is it"}]


@pytest.mark.one_loop
def test_history_shows_a_cancelled_turns_note_as_scvds_not_the_persons(chat_rig, workspace):
    """The note was a `user` record: a client showing the history put scvd's words in the person's mouth."""
    model, d = chat_rig(Hang("deleting"), wire_api="chat")
    with d.client(name="pytest") as c:
        session = open_chat(c, workspace).session
        turn = cancel_mid_reply(c, session, "delete the logs")
        records = c.request(p.ChatHistory, session=session).records
    assert [(r["kind"], r.get("text")) for r in records] == [
        ("user", "delete the logs"),
        ("scvd", CANCELLED_NOTE),
        ("turn", None)]
    assert records[1]["turn"] == turn


def test_a_half_closed_client_hears_its_turn_cancelled_before_the_connection_closes(chat_rig, workspace):
    """The end of a client's stream closes its sessions: the connection lingered for their calls'
    call.completed only, and closed before the turn's turn.cancelled, its promised last event."""
    model, d = chat_rig(Hang("thinking"), Text("after"))
    with d.client(name="pytest") as c:
        session = open_chat(c, workspace).session
        turn = c.request(p.TurnStart, session=session, text="hi").turn
        while not isinstance(c.next_event(), p.AssistantDelta):
            pass
        c.sock.shutdown(socket.SHUT_WR)
        events = []
        with pytest.raises(errors.ConnectionClosed):
            while True:
                events.append(c.next_event())
    assert isinstance(events[-1], p.TurnCancelled) and events[-1].turn == turn, events


def two_turns(chat_rig, workspace, *steps: Any, wire_api: str):
    """Two turns of one chat: the model, each turn's (events, end), and the history after them."""
    model, d = chat_rig(*steps, wire_api=wire_api)
    with d.client(name="pytest") as c:
        session = open_chat(c, workspace).session
        first, second = run_turn(c, session, "first"), run_turn(c, session, "second")
        return model, first, second, c.request(p.ChatHistory, session=session).records


@pytest.mark.parametrize("wire_api", WIRE_APIS)
def test_an_answer_cut_short_fails_the_turn_and_is_not_kept_as_the_reply(chat_rig, workspace, wire_api):
    model, (events, end), _, history = two_turns(chat_rig, workspace, Cut("The answer is forty"),
                                                 Text("forty-two"), wire_api=wire_api)
    assert isinstance(end, p.TurnFailed) and end.reason == "provider_error"
    assert "ended before the answer was complete" in end.message
    assert not [e for e in events if isinstance(e, p.AssistantCompleted)]
    assert [(r["kind"], r.get("status")) for r in history][:2] == [("user", None), ("turn", "failed")]
    told = model.requests[1].get("messages") or model.requests[1]["input"]
    assert "forty" not in json.dumps(told)  # the fragment never reaches the model as its own answer


@pytest.mark.parametrize("wire_api", WIRE_APIS)
def test_an_answer_past_max_reply_bytes_fails_the_turn_and_the_daemon_answers_meanwhile(chat_rig, workspace, wire_api):
    """A 131 MB streamed reply was read and kept whole: chat.max_reply_bytes bounds one request's answer;
    what came of it is not kept as the reply, as for a stream cut short."""
    flood = Flood("events", 32 << 20, hold=100_000)
    model, d = chat_rig(flood, Text("forty-two"), wire_api=wire_api, extra="max_reply_bytes = 200000\n")
    with d.client(name="pytest") as c, d.client(name="other") as o:
        session = open_chat(c, workspace).session
        turn = c.request(p.TurnStart, session=session, text="first").turn
        assert flood.midway.wait(10)
        assert isinstance(o.request(p.Ping), p.Pong)  # the answer streams in: other clients are served
        flood.go.set()
        events = []
        while not (events and isinstance(events[-1], END) and events[-1].turn == turn):
            events.append(c.next_event())
        end = events[-1]
        assert isinstance(end, p.TurnFailed) and end.reason == "provider_error"
        assert end.message.endswith("sent more than 200,000 bytes in one answer (chat.max_reply_bytes); scvd stopped "
                                    "reading it"), end.message
        assert not [e for e in events if isinstance(e, p.AssistantCompleted)]
        assert isinstance(run_turn(c, session, "second")[1], p.TurnCompleted)
        history = c.request(p.ChatHistory, session=session).records
    assert [(r["kind"], r.get("status")) for r in history][:2] == [("user", None), ("turn", "failed")]
    told = model.requests[1].get("messages") or model.requests[1]["input"]
    assert "yyyy" not in json.dumps(told)  # what came never reaches the model as its own answer
    assert flood.written < flood.size


@pytest.mark.one_loop
@pytest.mark.parametrize("wire_api", WIRE_APIS)
def test_an_empty_reply_does_not_break_the_next_turn(chat_rig, workspace, wire_api):
    model, (events, end), (_, second), history = two_turns(chat_rig, workspace, Text(""), Text("ok"),
                                                           wire_api=wire_api)
    assert isinstance(end, p.TurnCompleted)
    assert next(e for e in events if isinstance(e, p.AssistantCompleted)).text == ""
    assert isinstance(second, p.TurnCompleted), second
    assert [r.get("text", "") for r in history if r["kind"] == "assistant"] == ["", "ok"]  # kept as it was
    if wire_api == "chat":  # null content without tool_calls is refused by strict servers
        assert {"role": "assistant", "content": ""} in model.requests[1]["messages"]


@pytest.mark.one_loop
def test_the_step_limit_fails_the_turn(chat_rig, workspace):
    model, d = chat_rig(load("read"), load("read"), load("read"), extra="max_steps = 2\n")
    with d.client(name="pytest") as c:
        events, end = run_turn(c, open_chat(c, workspace).session, "loop")
    assert isinstance(end, p.TurnFailed) and end.reason == "step_limit"
    assert "chat.max_steps" in end.message and len(model.requests) == 2


def test_an_approval_inside_a_turn(chat_rig, workspace):
    model, d = chat_rig(load("write"), Calls(("write", {"path": "new.txt", "content": "hi\n", "mode": "create"})),
                        Text("written"))

    with d.client(name="pytest", approver=True) as c:
        session = open_chat(c, workspace).session

        def approve(event: Any) -> None:
            if isinstance(event, p.ApprovalRequested):
                c.request(p.ApprovalDecide, approval_id=event.approval_id, decision="approve")

        events, end = run_turn(c, session, "write new.txt", approve)
    assert isinstance(end, p.TurnCompleted)
    asked = next(e for e in events if isinstance(e, p.ApprovalRequested))
    assert asked.tool == "write" and asked.call_id.startswith(end.turn)
    started = next(e for e in events if isinstance(e, p.CallStarted))  # it waited: call.started says when it ran
    assert started.call_id == asked.call_id and started.turn == end.turn
    assert (workspace / "new.txt").read_text() == "hi\n"


@pytest.mark.one_loop
@pytest.mark.parametrize("wire_api", WIRE_APIS)
def test_a_denied_call_reaches_the_model_as_a_denial(chat_rig, workspace, wire_api):
    model, d = chat_rig(load("write"), Calls(("write", {"path": "x.txt", "content": "x", "mode": "create"})),
                        Text("ok, I will not"), wire_api=wire_api)
    with d.client(name="pytest", approver=True) as c:
        session = open_chat(c, workspace).session

        def deny(event: Any) -> None:
            if isinstance(event, p.ApprovalRequested):
                c.request(p.ApprovalDecide, approval_id=event.approval_id, decision="deny", reason="not today")

        events, end = run_turn(c, session, "write x", deny)
    assert isinstance(end, p.TurnCompleted)
    error = json.loads(model.outputs(2)[-1])["error"]
    assert error["kind"] == "denied" and "not today" in error["message"]
    assert not (workspace / "x.txt").exists()


@pytest.mark.one_loop
@pytest.mark.parametrize("client,advice", [("scvctl", NO_APPROVER), ("my-bridge", NO_APPROVER_BRIDGE)])
def test_without_an_approver_a_call_is_denied_at_once(chat_rig, workspace, client, advice):
    """The advice fits the client: `scvctl exec --yes` is no help to a chat bridge's user."""
    model, d = chat_rig(load("write"), Calls(("write", {"path": "x.txt", "content": "x", "mode": "create"})),
                        Text("understood"))
    with d.client(name=client) as c:  # not an approver, and nobody watches
        events, end = run_turn(c, open_chat(c, workspace).session, "write x")
    assert not any(isinstance(e, p.ApprovalRequested) for e in events)
    error = json.loads(model.outputs(2)[-1])["error"]
    assert error == {"kind": "denied", "message": advice}
    assert "scvctl approvals watch" in advice and ("--yes" in advice) is (client == "scvctl")


def test_a_turn_whose_call_id_a_client_took_still_runs_its_call_and_ends(chat_rig, workspace):
    model, d = chat_rig(load("chat_gather"), Calls(("ask_user", {"question": "go?"})),
                        Calls(("chat_gather", {"label": "a"})), Text("done"))
    with d.client(name="pytest", timeout=15) as c, d.client(name="other") as o:
        session = open_chat(c, workspace).session
        taken = []

        def take_then_answer(event: Any) -> None:  # another client's call takes the id the turn's call would get
            if isinstance(event, p.QuestionAsked):
                taken.append(o.start_call(o.open_session(str(workspace)), "chat_gather", {"label": "x"},
                                          call_id=f"{event.turn}-c1"))
                c.request(p.QuestionAnswer, session=session, question_id=event.question_id, answer="yes")

        events, end = run_turn(c, session, "go", take_then_answer)
    assert isinstance(end, p.TurnCompleted)
    done = next(e for e in events if isinstance(e, p.CallCompleted))
    assert done.ok and done.call_id not in taken and done.call_id.startswith(end.turn)
    assert json.loads(model.outputs(3)[-1])["result"] == {"label": "a", "together": True}


@pytest.mark.one_loop
def test_a_call_of_a_tool_that_failed_to_load_tells_the_model_why(chat_rig, workspace):
    """The model heard "no tool named ... in this conversation" and guessed at other names; a call on
    the socket is told the tool failed to load, and why: the model is told the same words."""
    model, d = chat_rig(Calls(("script_broken", {})), Text("it is broken"))
    broken = d.home / "tools" / "script" / "broken"
    broken.mkdir(parents=True)
    (broken / "tool.json").write_text(json.dumps({
        "description": "Say nothing.\nUse for nothing; bash for anything.", "timeout": -1}))
    (broken / "run").write_text("#!/bin/sh\n")
    (broken / "run").chmod(0o700)
    asyncio.run_coroutine_threadsafe(d.daemon.reload(), d.loop).result(30)
    with d.client(name="pytest") as c:
        _, end = run_turn(c, open_chat(c, workspace).session, "run the broken tool")
    assert isinstance(end, p.TurnCompleted), end
    assert json.loads(model.outputs(1)[-1]) == {"ok": False, "error": {"kind": "unknown_tool", "message": (
        "no tool named 'script_broken' is loaded: it failed to load: rule 'timeout': timeout -1 must be a positive "
        f"number of seconds ({broken / 'tool.json'}); fix that, then reload scvd (`systemctl --user reload scvd`, or SIGHUP to scvd); "
        "`scvctl tools --errors` lists the tools that failed to load")}}


@pytest.mark.one_loop
def test_a_call_that_fails_inside_scvd_reaches_the_model_and_the_turn_ends(chat_rig, workspace, monkeypatch):
    model, d = chat_rig(load("read"), Calls(("read", {"path": "a.txt"})), Text("it broke"))

    def broken(*args: Any, **kw: Any) -> Any:
        raise RuntimeError("a bug in the registry")

    monkeypatch.setattr(d.daemon.calls, "submit", broken)
    with d.client(name="pytest", timeout=15) as c:
        events, end = run_turn(c, open_chat(c, workspace).session, "read a.txt")
    assert isinstance(end, p.TurnCompleted)
    error = json.loads(model.outputs(2)[-1])["error"]
    assert error["kind"] == "failed" and "see the daemon log" in error["message"]


# the step's second call refused before it was taken on: (config, what the model hears, what the log says,
# the length of the first and of the second call's content)
TOO_MUCH = ("this call was not run: the calls not completed of this chat's connection, or of every client, hold as "
            "much as scvd takes on at once (server.max_call_bytes_per_connection, server.max_call_bytes); call it "
            "again once this step's other calls have ended, asking for fewer calls at once")
REFUSED_BEFORE = {
    "session-cap": ("[server]\nmax_calls_per_session = 1\n",
                    "this call was not run: the step asked for more calls at once than one session runs together "
                    "(server.max_calls_per_session = 1, counting calls still running); call it again, asking for "
                    "fewer calls at once", "was refused (limit: this session already holds 1 calls", (1, 1)),
    # a chat's call counts 4 KiB at least
    "connection-bytes": ("[server]\nclient_frame_bytes = 4096\nmax_call_bytes_per_connection = 4096\n", TOO_MUCH,
                         "was refused (limit: this connection's calls that have not completed already hold 4,096", (1, 1)),
    # and its arguments' bytes, as the model sent them: it counted 4 KiB, whatever their size
    "argument-bytes": ("[server]\nclient_frame_bytes = 16384\nmax_call_bytes_per_connection = 16384\n", TOO_MUCH,
                       "was refused (limit: this connection's calls that have not completed already hold 9,242", (9000, 9000)),
    # more than the connection's calls may hold at all (here a frame may carry it): no wait makes room
    "alone": ("[server]\nclient_frame_bytes = 4096\nmax_call_bytes_per_connection = 8192\n",
              "this call was not run: its arguments count 9,242 bytes (call_budget.py), more than the calls of this "
              "chat's connection may hold at once (8,192, server.max_call_bytes_per_connection); call it again with "
              "less in one call", "was refused (limit: this call alone counts 9,242", (1, 9000)),
}


@pytest.mark.one_loop
@pytest.mark.parametrize("why", list(REFUSED_BEFORE))
def test_a_call_refused_before_it_was_taken_on_reaches_the_model_as_a_limit_not_a_crash(chat_rig, workspace, caplog,
                                                                                       why):
    """A step asking for more calls than server.max_calls_per_session lets the session hold, or than
    server.max_call_bytes_per_connection lets the connection's calls hold: the one past it is refused,
    and the turn goes on; it was logged as a crash. The model was told to wait for call.completed or
    send call.cancel, which it cannot: it hears to call it again, fewer at once, and what bound it."""
    extra, refused, logged, (first, second) = REFUSED_BEFORE[why]
    caplog.set_level(logging.INFO, logger="scvd.chat")
    model, d = chat_rig(load("write"), Calls(("write", {"path": "a.txt", "content": "a" * first, "mode": "create"}),
                                             ("write", {"path": "b.txt", "content": "b" * second, "mode": "create"})),
                        Text("one was refused"), extra=extra)
    with d.client(name="pytest", approver=True) as c:
        opened = open_chat(c, workspace)

        def approve(event: Any) -> None:
            if isinstance(event, p.ApprovalRequested):
                c.request(p.ApprovalDecide, approval_id=event.approval_id, decision="approve")

        events, end = run_turn(c, opened.session, "write both", approve)
        history = c.request(p.ChatHistory, session=opened.session).records
    assert isinstance(end, p.TurnCompleted)
    outputs = [json.loads(o) for o in model.outputs(2)[-2:]]
    assert outputs[0]["ok"] and outputs[1] == {"ok": False, "error": {"kind": "limit", "message": refused}}
    assert (workspace / "a.txt").read_text() == "a" * first and not (workspace / "b.txt").exists()
    assert refused in json.dumps([r for r in history if r["kind"] == "tool"])  # the transcript keeps it
    assert "crashed" not in caplog.text and logged in caplog.text


@pytest.mark.one_loop
def test_a_call_past_the_connections_cap_of_calls_reaches_the_model_as_that_limit(chat_rig, workspace, caplog):
    """The connection's calls across its sessions (server.max_calls_per_connection): the model heard of
    the bytes bounds, which did not refuse it."""
    caplog.set_level(logging.INFO, logger="scvd.chat")
    model, d = chat_rig(load("write"), Calls(("write", {"path": "a.txt", "content": "a", "mode": "create"}),
                                             ("write", {"path": "b.txt", "content": "b", "mode": "create"})),
                        Text("one was refused"),
                        extra="[server]\nmax_calls_per_session = 2\nmax_calls_per_connection = 2\n")
    with d.client(name="pytest", approver=True) as c:
        aside = c.start_call(c.open_session(workspace), "write", {"path": "c.txt", "content": "c", "mode": "create"})
        opened = open_chat(c, workspace)

        def approve(event: Any) -> None:  # the chat's calls; the call aside waits on, holding its place
            if isinstance(event, p.ApprovalRequested) and event.call_id != aside:
                c.request(p.ApprovalDecide, approval_id=event.approval_id, decision="approve")

        _, end = run_turn(c, opened.session, "write both", approve)
        c.request(p.CallCancel, call_id=aside)
    assert isinstance(end, p.TurnCompleted)
    outputs = [json.loads(o) for o in model.outputs(2)[-2:]]
    assert outputs[0]["ok"] and outputs[1] == {"ok": False, "error": {"kind": "limit", "message": (
        "this call was not run: this chat's connection already holds as many calls not completed as scvd takes on "
        "from one connection (server.max_calls_per_connection = 2); call it again once this step's other calls "
        "have ended, asking for fewer calls at once")}}
    assert "was refused (limit: this connection already holds 2 calls" in caplog.text


def approve_once_all_are_in(c, calls: int) -> Any:
    """A run_turn callback: approve the turn's requests once all `calls` were asked or refused, so none
    is decided (and makes room) before the last one comes to the gate."""
    asked, refused = [], []

    def on_event(event: Any) -> None:
        if isinstance(event, p.ApprovalRequested):
            asked.append(event.approval_id)
        elif isinstance(event, p.CallCompleted) and not event.ok:
            refused.append(event.error)
        if len(asked) + len(refused) == calls and asked:
            for approval_id in asked:
                c.request(p.ApprovalDecide, approval_id=approval_id, decision="approve")
            asked.clear()

    return on_event


def refusals(model: Any, calls: int) -> list[Any]:
    """The errors of the step's `calls` outputs that the model was given back not ok."""
    outputs = [json.loads(o) for o in model.outputs(2)[-calls:]]
    return [o["error"] for o in outputs if not o["ok"]]


@pytest.mark.one_loop
def test_a_call_past_its_connections_share_of_the_gate_tells_the_model_what_it_can_do(chat_rig, workspace):
    """Four reads at once that all ask, with approvals.max_pending = 4: one connection holds at most 3 of
    them, so the fourth is refused unasked. The model was told to have those decided (scvctl approvals)
    or send call.cancel, neither of which it can: it hears to call it again, fewer at once."""
    for name in "abcd":
        (workspace / f"{name}.txt").write_text(name)
    reads = [("read", {"path": f"{name}.txt"}) for name in "abcd"]
    model, d = chat_rig(load("read"), Calls(*reads), Text("one was refused"),
                        extra='[approvals]\npolicy = "always"\nmax_pending = 4\n')
    with d.client(name="pytest", approver=True) as c:
        _, end = run_turn(c, open_chat(c, workspace).session, "read them all", approve_once_all_are_in(c, 4))
    assert isinstance(end, p.TurnCompleted)
    # which one is refused is up to the order they ask in
    assert refusals(model, 4) == [{"kind": "limit", "message": (
        "3 approvals of this connection's sessions are already waiting, as many as one connection may hold "
        "(approvals.max_pending less a quarter kept for other connections); this call was refused without "
        "asking: call it again, asking for fewer calls that need approval at once")}]


@pytest.mark.one_loop
def test_a_call_the_whole_gate_has_no_room_for_tells_the_model_what_it_can_do(chat_rig, workspace):
    """Another client's two requests wait and approvals.max_pending = 4: of a turn's three reads at once
    that all ask, two are asked and the third is refused unasked, the gate full (not the chat's share).
    The model was told to decide the pending ones first, which it cannot: it hears that the person has
    too many requests waiting, to call it again later or do without it."""
    for name in "abc":
        (workspace / f"{name}.txt").write_text(name)
    reads = [("read", {"path": f"{name}.txt"}) for name in "abc"]
    model, d = chat_rig(load("read"), Calls(*reads), Text("one was refused"),
                        extra='[approvals]\npolicy = "always"\nmax_pending = 4\n')
    with d.client(name="other") as other, d.client(name="pytest", approver=True) as c:
        session = other.open_session(workspace)
        held = [other.start_call(session, "read", {"path": "a.txt"}) for _ in range(2)]
        assert sorted(a.call_id for a in wait_pending(c, 2)) == sorted(held)
        _, end = run_turn(c, open_chat(c, workspace).session, "read them all", approve_once_all_are_in(c, 3))
    assert isinstance(end, p.TurnCompleted)
    assert refusals(model, 3) == [{"kind": "limit", "message": (
        "4 approvals are already waiting (approvals.max_pending); this call was refused without asking: "
        "the person deciding has too many requests waiting; call it again later, or do without it")}]


def test_ask_user_asks_the_chat_and_the_answer_reaches_the_model(chat_rig, workspace):
    model, d = chat_rig(Calls(("ask_user", {"question": "which colour?"})), Text("blue it is"))
    with d.client(name="pytest") as c:
        session = open_chat(c, workspace).session

        def answer(event: Any) -> None:
            if isinstance(event, p.QuestionAsked):
                c.request(p.QuestionAnswer, session=session, question_id=event.question_id, answer="blue")

        events, end = run_turn(c, session, "paint it", answer)
    assert next(e for e in events if isinstance(e, p.QuestionAsked)).question == "which colour?"
    assert json.loads(model.outputs(1)[-1])["result"] == {"answer": "blue"}


def test_an_answer_taken_as_the_turn_was_cut_reaches_the_next_turns_model(chat_rig, workspace):
    """question.answer said `ok`, but a cut in the same loop turn (a stop, a connection cut off, as a
    race has it) ended the turn before it read the answer: ask_user's output said `cancelled` and the
    person's answer was gone. Here the answer's own handler cuts the turn right after taking it."""
    model, d = chat_rig(Calls(("ask_user", {"question": "which colour?"})), Text("noted"), wire_api="chat")
    with d.client(name="pytest") as c:
        session = open_chat(c, workspace).session
        service = d.daemon.chat
        answer = service.answer

        async def answer_then_cut(conn: Any, frame: p.QuestionAnswer) -> p.Frame:
            taken = await answer(conn, frame)
            service.chats[frame.session].task.cancel("turn.cancel")  # as turn.cancel or scvd's stop does
            return taken

        service.answer = answer_then_cut

        def reply(event: Any) -> None:
            if isinstance(event, p.QuestionAsked):
                c.request(p.QuestionAnswer, session=session, question_id=event.question_id, answer="blue")

        _, end = run_turn(c, session, "paint it", reply)
        assert isinstance(end, p.TurnCancelled)
        records = c.request(p.ChatHistory, session=session).records
        run_turn(c, session, "go on")
    kept = {"ok": True, "result": {"answer": "blue"}}
    assert [json.loads(r["output"]) for r in records if r["kind"] == "tool"] == [kept]
    assert [json.loads(o) for o in model.outputs(1)] == [kept]
    assert model.requests[1]["messages"][-1] == {"role": "user", "content": f"{CANCELLED_NOTE}\n\ngo on"}


@pytest.mark.one_loop
def test_history_clear_and_a_second_turn_remembering_the_first(chat_rig, workspace):
    model, d = chat_rig(Text("first answer"), Text("second answer"), Text("fresh"))
    with d.client(name="pytest") as c:
        session = open_chat(c, workspace).session
        run_turn(c, session, "first")
        run_turn(c, session, "second")
        user_texts = [m["content"] for m in model.requests[1]["input"] if m.get("role") == "user"]
        assert user_texts == ["first", "second"]
        history = c.request(p.ChatHistory, session=session).records
        assert [r["kind"] for r in history] == ["user", "assistant", "turn", "user", "assistant", "turn"]
        assert history[2]["usage"]["output_tokens"] == 7
        c.request(p.ChatClear, session=session)
        run_turn(c, session, "third")
        assert [m["content"] for m in model.requests[2]["input"]] == ["third"]


@pytest.mark.one_loop
def test_chat_open_refusals(chat_rig, workspace):
    model, d = chat_rig()
    with d.client(name="pytest") as c:
        with pytest.raises(errors.InvalidRequest, match="no provider 'nope'"):
            open_chat(c, workspace, provider="nope")
        with pytest.raises(errors.InvalidRequest, match="no tool named zap; tools: read, ") as info:
            open_chat(c, workspace, tools=["read", "zap"])
        assert info.value.message.endswith('; send only those (or "all"), or open again once the tool is there')
        with pytest.raises(errors.InvalidRequest, match="not an id"):
            open_chat(c, workspace, conversation="../etc")
        with pytest.raises(errors.SessionNotFound, match="open one with chat.open"):
            c.request(p.TurnStart, session="s0-none", text="hi")


@pytest.mark.one_loop
def test_resuming_a_conversation_whose_provider_was_renamed_says_so_and_how_to_go_on(chat_rig, workspace):
    """A bridge resumes with no `provider` (the conversation's own): after [providers.test] was renamed,
    every resume was refused `no provider 'test'`, which did not say it was the conversation's own."""
    model, d = chat_rig()
    with d.client(name="pytest") as c:
        opened = open_chat(c, workspace)
        c.request(p.SessionClose, session=opened.session)
    config = d.home / "config.toml"
    config.write_text(config.read_text().replace("[providers.test]", "[providers.local]")
                      .replace('provider = "test"', 'provider = "local"'))
    asyncio.run_coroutine_threadsafe(d.daemon.reload(), d.loop).result(30)
    with d.client(name="pytest") as c:
        with pytest.raises(errors.InvalidRequest) as info:
            open_chat(c, workspace, conversation=opened.conversation)
        assert info.value.message == (
            f"conversation {opened.conversation!r} used provider 'test', which is no longer configured "
            "(configured: local, codex); resume it with another: send `provider` with chat.open")
        assert open_chat(c, workspace, conversation=opened.conversation, provider="local").resumed


@pytest.mark.one_loop
def test_chat_open_says_why_a_tool_of_a_disabled_mcp_server_is_not_there(chat_rig, workspace):
    model, d = chat_rig(extra='[mcp.servers.off]\ncommand = "/bin/true"\nenabled = false\n')
    with d.client(name="pytest") as c:
        with pytest.raises(errors.InvalidRequest) as info:
            open_chat(c, workspace, tools=["read", "mcp__off__x"])
    assert info.value.message.startswith(
        "chat.open tools: no tool named mcp__off__x (mcp server off is disabled (enabled = false in its "
        "[mcp.servers.off] table): set enabled = true there, then reload scvd"), info.value.message


def test_a_conversation_resumed_by_two_connections_at_once_opens_in_one(chat_rig, workspace):
    model, d = chat_rig()
    with d.client(name="pytest") as c:
        conversation = open_chat(c, workspace).conversation
    with RawConn(d.socket) as a, RawConn(d.socket) as b:
        a.hello(), b.hello()
        with pytest.raises(errors.InvalidRequest):  # a failed open releases the conversation
            with d.client(name="pytest") as c:
                open_chat(c, workspace, conversation=conversation, provider="nope")
        frame = {"type": "chat.open", "id": 1, "workspace": str(workspace), "conversation": conversation}
        a.send(frame), b.send(frame)
        answers = [a.frame(), b.frame()]
    assert sorted(type(f).__name__ for f in answers) == ["ChatOpened", "Error"]
    refused = next(f for f in answers if isinstance(f, p.Error))
    assert refused.code == "invalid_request" and "open in another session" in refused.message


def test_a_conversation_reopened_while_its_closed_sessions_turn_ends_gets_its_records_first(
        make_inproc, monkeypatch, model, workspace):
    """A bridge reconnects during a turn and reopens its conversation (bridges.md): the open waits
    for the old turn to end, so its last records (the call's cancelled output, the turn's end)
    come before the new session's, not after the next turn's reply (an orphan tool output the
    model's API refuses in every later turn)."""
    monkeypatch.setenv("K", "sk-test")
    m = model(load("chat_slow_stop"), Calls(("chat_slow_stop", {})), Text("second turn"))
    slow = SlowStopTool()
    d = make_inproc(f'[providers.test]\nmodel = "m"\nbase_url = "{m.base_url}"\nwire_api = "chat"\n'
                    'api_key_secret = "K"\n[chat]\nprovider = "test"\n', tools=[slow])
    with d.client(name="pytest") as a:
        opened = open_chat(a, workspace)
        a.request(p.TurnStart, session=opened.session, text="go")
        assert slow.running.wait(10)
    # the connection broke; the bridge reopens at once
    with d.client(name="pytest") as b:
        session = open_chat(b, workspace, conversation=opened.conversation).session
        _, end = run_turn(b, session, "hello again")
        assert isinstance(end, p.TurnCompleted)
        records = b.request(p.ChatHistory, session=session).records
    seen = [(r["kind"], r.get("name") or r.get("text") or r.get("status")) for r in records]
    assert [r for r in seen if r == ("tool", "chat_slow_stop")] == [("tool", "chat_slow_stop")], seen
    assert seen.index(("turn", "cancelled")) < seen.index(("user", "hello again")), seen
    assert seen[-2:] == [("assistant", "second turn"), ("turn", "completed")], seen


def until_answer(conn: RawConn, *ids: Any) -> Any:
    """The next answer to one of `ids`, past the events before it."""
    while getattr(frame := conn.frame(), "id", None) not in ids:
        pass
    return frame


@pytest.mark.parametrize("half_close", [False, True])
def test_a_chat_open_waiting_for_its_closed_sessions_turn_holds_no_other_request(
        make_inproc, monkeypatch, model, workspace, half_close):
    """A bridge closes an idle chat's session (its cap of sessions) while that chat's call still
    stops, and reopens it for a new message: the owner's decisions and pings on the same
    connection are answered while the open waits, not after it. A client that ends its stream
    meanwhile still gets the open's answer, and the session it opened closes with it."""
    monkeypatch.setenv("K", "sk-test")
    m = model(load("chat_slow_stop"), Calls(("chat_slow_stop", {})), Text("second turn"))
    held = SlowStopTool(stop_seconds=15)  # below the open's own wait: an scvd that holds the ping answers late
    d = make_inproc(f'[providers.test]\nmodel = "m"\nbase_url = "{m.base_url}"\nwire_api = "chat"\n'
                    'api_key_secret = "K"\n[chat]\nprovider = "test"\n', tools=[held])
    with RawConn(d.socket, timeout=30) as c:
        c.hello()
        opened = c.request({"type": "chat.open", "workspace": str(workspace)})
        c.send({"type": "turn.start", "id": "t", "session": opened.session, "text": "go"})
        assert held.running.wait(10)
        c.send({"type": "session.close", "id": "close", "session": opened.session})
        assert isinstance(until_answer(c, "close"), p.Ok)
        c.send({"type": "chat.open", "id": "reopen", "workspace": str(workspace),
                "conversation": opened.conversation})
        c.send({"type": "ping", "id": "ping"})
        if half_close:
            c.sock.shutdown(socket.SHUT_WR)
        first = until_answer(c, "reopen", "ping")
        held.release.set()
        assert isinstance(first, p.Pong), first
        reopened = until_answer(c, "reopen")
        assert isinstance(reopened, p.ChatOpened) and reopened.resumed, reopened
        if half_close:
            while not c.closed_by_server():
                pass
    if half_close:
        with d.client(name="pytest") as other:
            assert other.status().sessions == 0


@pytest.mark.one_loop
def test_a_provider_fixed_and_reloaded_serves_the_open_chats_next_turn(make_inproc, model, workspace):
    """The turn failed with "check providers.test.base_url"; after fixing it and a reload, the same
    chat kept the old URL until a new chat.open (a bridge's chats stay open for days)."""
    import socket

    m = model(Text("hello"))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]  # nothing listens there once closed

    def config(url: str) -> str:
        return (f'[providers.test]\nmodel = "m"\nbase_url = "{url}"\nwire_api = "chat"\ntimeout_seconds = 5\n'
                '[chat]\nprovider = "test"\n')

    d = make_inproc(config(f"http://127.0.0.1:{dead}/v1"))
    with d.client(name="pytest") as c:
        session = open_chat(c, workspace).session
        _, failed = run_turn(c, session, "hi")
        assert isinstance(failed, p.TurnFailed) and failed.hint == "check providers.test.base_url", failed
        (d.home / "config.toml").write_text(config(m.base_url))
        asyncio.run_coroutine_threadsafe(d.daemon.reload(), d.loop).result(30)
        _, end = run_turn(c, session, "hi again")
    assert isinstance(end, p.TurnCompleted), end
    assert len(m.requests) == 1


def imported_codex(d, config: str, key: str) -> None:
    """What `scvctl agents import codex` leaves in the daemon's codex home."""
    codex = d.home / "adapters" / "codex"
    codex.mkdir(parents=True, exist_ok=True)
    (codex / "config.toml").write_text(config)
    (codex / "auth.json").write_text(json.dumps({"OPENAI_API_KEY": key}))


@pytest.mark.one_loop
def test_provider_codex_reuses_the_imported_codex_setup(chat_rig, workspace):
    model, d = chat_rig(Text("hello from codex's provider"))
    codex = d.home / "adapters" / "codex"
    codex.mkdir(parents=True, exist_ok=True)
    (codex / "config.toml").write_text(
        f'model = "gpt-test"\nmodel_provider = "relay"\n[model_providers.relay]\nname = "relay"\n'
        f'base_url = "{model.base_url}"\nwire_api = "responses"\nrequires_openai_auth = true\n')
    (codex / "auth.json").write_text('{"OPENAI_API_KEY": "sk-codex"}')
    with d.client(name="pytest") as c:
        opened = open_chat(c, workspace, provider="codex")
        assert opened.provider == "codex"
        events, end = run_turn(c, opened.session, "hi")
    assert isinstance(end, p.TurnCompleted)
    assert model.requests[0]["model"] == "gpt-test"


@pytest.mark.one_loop
def test_provider_codex_sends_the_imported_providers_bearer_token(chat_rig, workspace, caplog):
    """`scvctl agents import codex` recommends experimental_bearer_token; provider codex uses it
    (before auth.json, as codex does) and never shows it."""
    model, d = chat_rig(Text("hello"))
    codex = d.home / "adapters" / "codex"
    codex.mkdir(parents=True, exist_ok=True)
    (codex / "config.toml").write_text(
        f'model = "m"\nmodel_provider = "corp"\n[model_providers.corp]\nbase_url = "{model.base_url}"\n'
        'experimental_bearer_token = "tok-CORP-SECRET"\n')
    (codex / "auth.json").write_text('{"OPENAI_API_KEY": "sk-other"}')
    with caplog.at_level(logging.DEBUG), d.client(name="pytest") as c:
        events, end = run_turn(c, open_chat(c, workspace, provider="codex").session, "hi")
    assert isinstance(end, p.TurnCompleted)
    assert model.authorizations == ["Bearer tok-CORP-SECRET"]
    assert "tok-CORP-SECRET" not in caplog.text + repr(events)


@pytest.mark.one_loop
def test_bash_in_a_chat_of_provider_codex_does_not_get_the_imported_setups_key_or_header_token(
        chat_rig, workspace, monkeypatch, caplog):
    """The imported setup's env_key and env_http_headers name variables of scvd's environment that
    go to its base_url only, as a [providers] api_key_env does: bash's `env` printed both to the
    model and the transcript."""
    secrets = {"RELAY_KEY": "sk-relay-VERYSECRET0987654321", "TOKENX": "tok-relay-header-ABCDEF123456"}
    for name, value in secrets.items():
        monkeypatch.setenv(name, value)
    model, d = chat_rig(load("bash"), Calls(("bash", {"command": "env; echo END"})), Text("done"))
    imported_codex(d, f'model = "m"\nmodel_provider = "relay"\n[model_providers.relay]\nbase_url = "{model.base_url}"\n'
                      'env_key = "RELAY_KEY"\nenv_http_headers = { "X-Relay-Token" = "TOKENX" }\n', "sk-openai-only")
    with caplog.at_level(logging.DEBUG), d.client(name="pytest", approver=True) as c:
        opened = open_chat(c, workspace, provider="codex")

        def approve(event: Any) -> None:
            if isinstance(event, p.ApprovalRequested):
                c.request(p.ApprovalDecide, approval_id=event.approval_id, decision="approve")

        events, end = run_turn(c, opened.session, "show env", approve)
    assert isinstance(end, p.TurnCompleted), end
    # the provider still sends both where they belong
    assert model.authorizations[0] == f"Bearer {secrets['RELAY_KEY']}"
    assert model.headers[0]["x-relay-token"] == secrets["TOKENX"]
    output = json.loads(model.outputs(2)[-1])["result"]["output"]
    assert output.endswith("END\n") and "RELAY_KEY=" not in output and "TOKENX=" not in output
    transcript = (d.home / "state" / "chat" / f"{opened.conversation}.jsonl").read_text()
    assert not [v for v in secrets.values() if v in output + transcript + caplog.text + repr(events)]


@pytest.mark.one_loop
def test_provider_codex_serves_an_imported_local_server_that_takes_no_key(chat_rig, workspace):
    """A Codex setup for a local server names a base_url and no key, and codex sends none; provider
    codex failed every turn with `holds no API key` instead."""
    model, d = chat_rig(Text("hello from the local model"))  # codex speaks only Responses to it
    imported_codex(d, f'model = "qwen"\nmodel_provider = "gpu-box"\n[model_providers.gpu-box]\nname = "Ollama"\n'
                      f'base_url = "{model.base_url}"\n', "sk-openai-only")
    with d.client(name="pytest") as c:
        _, end = run_turn(c, open_chat(c, workspace, provider="codex").session, "hi")
    assert isinstance(end, p.TurnCompleted), end
    assert model.requests[0]["model"] == "qwen"
    assert "sk-openai-only" not in model.authorizations[0]  # OpenAI's key stays OpenAI's


@pytest.mark.one_loop
def test_provider_codex_serves_codexs_own_ollama_provider(chat_rig, workspace, monkeypatch):
    """`model_provider = "ollama"` with no table (codex's own provider, on localhost, no key) failed
    every turn with `holds no API key`; CODEX_OSS_BASE_URL in scvd's environment moves it, as in codex."""
    model, d = chat_rig(Text("hello from ollama"))
    monkeypatch.setenv("CODEX_OSS_BASE_URL", model.base_url)
    imported_codex(d, 'model = "gpt-oss:20b"\nmodel_provider = "ollama"\n', "sk-openai-only")
    with d.client(name="pytest") as c:
        _, end = run_turn(c, open_chat(c, workspace, provider="codex").session, "hi")
    assert isinstance(end, p.TurnCompleted), end
    assert (model.paths[0], model.requests[0]["model"]) == ("/v1/responses", "gpt-oss:20b")
    assert "sk-openai-only" not in model.authorizations[0]


@pytest.mark.one_loop
def test_provider_codex_without_an_import_says_how_to_get_one(chat_rig, workspace):
    model, d = chat_rig()
    with d.client(name="pytest") as c:
        events, end = run_turn(c, open_chat(c, workspace, provider="codex").session, "hi")
    assert end.reason == "auth" and "no imported Codex setup" in end.message
    assert "scvctl agents import codex" in end.hint


@pytest.mark.one_loop
def test_store_secret_asks_at_most_twice_per_tool_per_turn(chat_rig, workspace):
    ask = ("store_secret", {"key": "GH_TOKEN", "tool": "mcp__gh"})  # a server down for want of GH_TOKEN
    model, d = chat_rig(Calls(("find_tools", {"query": "store_secret", "include_system": True})),
                        Calls(ask), Calls(ask), Calls(ask), Text("giving up"),
                        Calls(ask), Text("asked once more"),
                        extra='[mcp.servers.gh]\ncommand = "/bin/false"\nenv = {T = {secret = "GH_TOKEN"}}\n')
    with d.client(name="pytest", approver=True) as c:
        session = open_chat(c, workspace).session

        def decline(event: Any) -> None:
            if isinstance(event, p.SecretRequested):
                c.request(p.SecretDecline, request_id=event.request_id, reason="not now")

        events, end = run_turn(c, session, "use gh", decline)
        assert isinstance(end, p.TurnCompleted)
        assert len([e for e in events if isinstance(e, p.SecretRequested)]) == 2
        third = json.loads(model.outputs(4)[-1])["error"]
        assert third["kind"] == "limit" and "at most 2 per tool per turn" in third["message"]
        events, end = run_turn(c, session, "try again", decline)  # a new turn: a new count
        assert len([e for e in events if isinstance(e, p.SecretRequested)]) == 1


@pytest.mark.one_loop
def test_a_long_tool_output_is_trimmed_from_later_requests_the_same_way(chat_rig, workspace):
    (workspace / "big.txt").write_text("x" * 16_000)  # ~4000 tokens: request 2 fits with it whole
    (workspace / "medium.txt").write_text("m" * 6_000)  # request 3 does not fit with both
    model, d = chat_rig(load("read"), Calls(("read", {"path": "big.txt"})), Calls(("read", {"path": "medium.txt"})),
                        Text("done"), extra="context_tokens = 6000\n")
    with d.client(name="pytest") as c:
        session = open_chat(c, workspace, tools=["read"]).session
        events, end = run_turn(c, session, "read both")
    assert isinstance(end, p.TurnCompleted)
    assert "x" * 1000 in model.outputs(2)[-1]  # the newest step's output is whole
    later = model.outputs(3)
    assert json.loads(later[-2]) == {"trimmed": "output dropped to fit chat.context_tokens"}
    assert "m" * 6000 in later[-1]
    assert model.tool_names(3) == ["find_tools", "ask_user", "read"]  # tools=["read"]: nothing else


@pytest.mark.one_loop
def test_a_request_keeps_room_for_the_providers_max_output_tokens(chat_rig, workspace):
    """With chat.context_tokens at the model's window, a request left no room for the reply: the
    provider refused it as longer than its window."""
    (workspace / "big.txt").write_text("x" * 16_000)  # ~4000 tokens: fits 6000, not beside 2000 for the reply
    model, d = chat_rig(load("read"), Calls(("read", {"path": "big.txt"})), Text("done"), Text("again"),
                        extra="context_tokens = 6000\n", provider="max_output_tokens = 2000\n")
    with d.client(name="pytest") as c:
        session = open_chat(c, workspace, tools=["read"]).session
        assert isinstance(run_turn(c, session, "read it")[1], p.TurnCompleted)
        assert isinstance(run_turn(c, session, "and now?")[1], p.TurnCompleted)
    assert model.outputs(3)[-1] == '{"trimmed": "output dropped to fit chat.context_tokens"}'


@pytest.mark.one_loop
def test_a_resumed_conversation_keeps_its_tools_unless_told_all(chat_rig, workspace):
    """Left out, `tools` keeps what the conversation was opened with; `"all"` said widens it again."""
    model, d = chat_rig(load("write"), Text("one"), load("write"), Text("two"), load("write"), Text("three"))
    with d.client(name="pytest") as c:
        opened = open_chat(c, workspace, tools=["read"])
        assert isinstance(run_turn(c, opened.session, "hi")[1], p.TurnCompleted)
    with d.client(name="pytest") as c:
        again = open_chat(c, workspace, conversation=opened.conversation)
        assert again.resumed and isinstance(run_turn(c, again.session, "and?")[1], p.TurnCompleted)
    with d.client(name="pytest") as c:
        widened = open_chat(c, workspace, conversation=opened.conversation, tools="all")
        assert isinstance(run_turn(c, widened.session, "now?")[1], p.TurnCompleted)
    # each turn's second request comes after find_tools("write"): it loads write only where it may be used
    assert "write" not in model.tool_names(1) and "write" not in model.tool_names(3)
    assert "write" in model.tool_names(5)


@pytest.mark.one_loop
def test_resuming_with_a_stored_tool_that_is_gone_works_without_it(make_inproc, monkeypatch, model, workspace):
    """The stored list may name a tool not there now (an MCP server still starting, a script
    removed): the resume the bridge sends, with no `tools`, must not fail on it."""
    monkeypatch.setenv("SCVD_TEST_MODEL_KEY", "sk-test")
    m = model(Text("one"), Text("two"))
    config = (f'[providers.test]\nmodel = "m"\nbase_url = "{m.base_url}"\nwire_api = "responses"\n'
              'api_key_secret = "SCVD_TEST_MODEL_KEY"\n[chat]\nprovider = "test"\n')
    first = make_inproc(config, tools=[GatherTool()])
    with first.client(name="pytest") as c:
        opened = open_chat(c, workspace, tools=["read", "chat_gather"])
        assert isinstance(run_turn(c, opened.session, "hi")[1], p.TurnCompleted)
    second = make_inproc(config)  # the same state, without chat_gather
    shutil.rmtree(second.home / "state" / "chat", ignore_errors=True)
    shutil.copytree(first.home / "state" / "chat", second.home / "state" / "chat")
    with second.client(name="pytest") as c:
        again = open_chat(c, workspace, conversation=opened.conversation)
        assert again.resumed and isinstance(run_turn(c, again.session, "and?")[1], p.TurnCompleted)
        with pytest.raises(errors.InvalidRequest, match="no tool named chat_gather"):
            c.request(p.ChatOpen, workspace=str(workspace), tools=["chat_gather"])  # asked for now: refused


@pytest.mark.one_loop
def test_a_transcript_without_its_open_record_resumes_with_this_open(make_inproc, monkeypatch, model, workspace):
    """Its first write failed (a full disk) or was torn: the rest is still the conversation."""
    monkeypatch.setenv("SCVD_TEST_MODEL_KEY", "sk-test")
    m = model(Text("one"), Text("two"))
    config = (f'[providers.test]\nmodel = "m"\nbase_url = "{m.base_url}"\nwire_api = "responses"\n'
              'api_key_secret = "SCVD_TEST_MODEL_KEY"\n[chat]\nprovider = "test"\n')
    d = make_inproc(config)
    with d.client(name="pytest") as c:
        opened = open_chat(c, workspace)
        assert isinstance(run_turn(c, opened.session, "remember 42")[1], p.TurnCompleted)
    path = d.home / "state" / "chat" / f"{opened.conversation}.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(line for line in lines if b'"kind":"open"' not in line))
    with d.client(name="pytest") as c:
        again = open_chat(c, workspace, conversation=opened.conversation)  # was `internal`
        assert again.resumed and isinstance(run_turn(c, again.session, "what was it?")[1], p.TurnCompleted)
    assert "remember 42" in user_texts(m, 1)


@pytest.mark.one_loop
def test_a_tool_that_comes_after_chat_open_is_there_for_the_next_turn(chat_rig, workspace, tmp_path):
    """An MCP server still starting when the chat opened (every daemon start): its tools reach the
    chat's next turn, as they reach the session."""
    quirks = Path(__file__).resolve().parents[1] / "helpers" / "mcp_stdio_quirks.py"
    server = (f'[mcp.servers.raw]\ncommand = "{sys.executable}"\nargs = ["{quirks}", "slow-start=2", '
              f'"{tmp_path / "starts"}"]\nsandbox = false\nrisk = "read_only"\n')
    model, d = chat_rig(load("echo"), Text("none yet"), load("echo"), Text("there it is"), extra=server)
    with d.client(name="pytest") as c:
        session = open_chat(c, workspace).session
        assert isinstance(run_turn(c, session, "echo?")[1], p.TurnCompleted)
        assert wait_for(lambda: "mcp__raw__echo" in {t.name for t in c.request(p.ToolsList, session=session).tools},
                        30)
        assert isinstance(run_turn(c, session, "echo now?")[1], p.TurnCompleted)
    assert "mcp__raw__echo" not in model.tool_names(1)
    assert "mcp__raw__echo" in model.tool_names(3)


@pytest.mark.one_loop
@pytest.mark.parametrize("wire_api", WIRE_APIS)
def test_an_mcp_tool_without_properties_can_be_loaded(chat_rig, workspace, tmp_path, wire_api):
    """An MCP tool without arguments lists `{"type": "object"}`, a Go server's `properties: null`:
    its schema went to the model as it was, and OpenAI refused the request ("object schema missing
    properties"), so every turn of the conversation with it loaded failed."""
    quirks = Path(__file__).resolve().parents[1] / "helpers" / "mcp_stdio_quirks.py"
    server = (f'[mcp.servers.go]\ncommand = "{sys.executable}"\nargs = ["{quirks}", "go-nulls"]\n'
              'sandbox = false\nrisk = "read_only"\n')
    model, d = chat_rig(load("echo", "nil"), Calls(("mcp__go__nil", {})), Text("done"), extra=server,
                        wire_api=wire_api)
    with d.client(name="pytest") as c:
        assert wait_for(lambda: "mcp__go__nil" in {t.name for t in c.request(p.ToolsList).tools}, 30)
        session = open_chat(c, workspace).session
        events, end = run_turn(c, session, "use them")
        assert isinstance(end, p.TurnCompleted), end
        assert run_turn(c, session, "again")[1].__class__ is p.TurnCompleted
    assert {"mcp__go__echo", "mcp__go__nil"} <= set(model.tool_names(1))


class BackgroundTool(Tool):
    name = "chat_background"
    description = ("Start slow work in the background and report later.\nUse for checking background "
                   "results; chat_gather for fan-out.\nPrecondition: only in test daemons.")
    Arguments = GatherArgs
    risk = ToolRisk.READ_ONLY
    flags = ToolFlags(always_allow=True, background=True)

    def __init__(self) -> None:
        self.release = threading.Event()

    def plan(self, args: Any, ctx: CallContext) -> Plan:
        return Plan(risk=self.risk, summary="background")

    async def run(self, args: Any, plan: Plan, ctx: CallContext) -> Any:
        await asyncio.to_thread(self.release.wait, 30)
        return {"label": args.label, "finished": True}


def test_a_background_result_reaches_the_model_when_it_arrives(make_inproc, monkeypatch, model, workspace):
    monkeypatch.setenv("SCVD_TEST_MODEL_KEY", "sk-test")
    m = model(Calls(("find_tools", {"query": "chat_background"})), Calls(("chat_background", {"label": "job"})),
              Text("started it"), Text("it finished"))
    tool = BackgroundTool()
    d = make_inproc(f'[providers.test]\nmodel = "m"\nbase_url = "{m.base_url}"\napi_key_env = "SCVD_TEST_MODEL_KEY"\n'
                    '[chat]\nprovider = "test"\n', tools=[tool])
    with d.client(name="pytest") as c:
        session = open_chat(c, workspace).session
        events, end = run_turn(c, session, "start the job")
        assert isinstance(end, p.TurnCompleted)  # the turn did not wait for the background call
        assert json.loads(m.outputs(2)[-1])["result"]["background"] is True
        tool.release.set()
        while not isinstance(c.next_event(), p.CallCompleted):
            pass
        run_turn(c, session, "any news?")
    notes = [i["content"] for i in m.requests[3]["input"] if i.get("role") == "user"]
    assert notes[-2].startswith("[result of background call") and '"finished":true' in notes[-2]
    assert notes[-1] == "any news?"


def test_a_background_result_that_comes_after_chat_clear_is_not_handed_to_the_new_conversation(
        make_inproc, monkeypatch, model, workspace):
    monkeypatch.setenv("SCVD_TEST_MODEL_KEY", "sk-test")
    m = model(Calls(("find_tools", {"query": "chat_background"})), Calls(("chat_background", {"label": "project-x"})),
              Text("started it"), Text("hello"))
    tool = BackgroundTool()
    d = make_inproc(background_config(m), tools=[tool])
    with d.client(name="pytest") as c:
        session = open_chat(c, workspace).session
        assert isinstance(run_turn(c, session, "start the job")[1], p.TurnCompleted)
        c.request(p.ChatClear, session=session)
        tool.release.set()
        while not isinstance(c.next_event(), p.CallCompleted):
            pass
        run_turn(c, session, "hello, new topic")
        history = c.request(p.ChatHistory, session=session).records
    assert user_texts(m, 3) == ["hello, new topic"]
    assert [r["kind"] for r in history] == ["user", "assistant", "turn"]


def background_config(m: Any, wire_api: str = "responses") -> str:
    return (f'[providers.test]\nmodel = "m"\nbase_url = "{m.base_url}"\nwire_api = "{wire_api}"\n'
            'api_key_env = "SCVD_TEST_MODEL_KEY"\n[chat]\nprovider = "test"\n')


def start_in_background(make_inproc, monkeypatch, m: Any, workspace: Path, *, finish: bool) -> tuple[Any, str]:
    """Turn 1 starts a background call and ends; the result arrives (or not); the connection closes."""
    monkeypatch.setenv("SCVD_TEST_MODEL_KEY", "sk-test")
    tool = BackgroundTool()
    d = make_inproc(background_config(m), tools=[tool])
    with d.client(name="pytest") as c:
        opened = open_chat(c, workspace)
        assert isinstance(run_turn(c, opened.session, "start the job")[1], p.TurnCompleted)
        if finish:
            tool.release.set()
            while not isinstance(c.next_event(), p.CallCompleted):
                pass
    # the daemon has dropped the closed session and its calls (a cut-off call is cancelled with it)
    assert wait_for(lambda: not d.daemon.chat.chats and len(d.daemon.calls) == 0)
    tool.release.set()
    return d, opened.conversation


def user_texts(m: Any, index: int) -> list[str]:
    return [i["content"] for i in m.requests[index]["input"] if i.get("role") == "user"]


@pytest.mark.parametrize("finish", [True, False], ids=["result", "cut_off"])
def test_a_background_result_between_turns_reaches_the_model_after_a_reconnect(make_inproc, monkeypatch, model,
                                                                              workspace, finish):
    m = model(load("chat_background"), Calls(("chat_background", {"label": "job"})), Text("started it"),
              Text("here it is"), Text("nothing new"))
    d, conversation = start_in_background(make_inproc, monkeypatch, m, workspace, finish=finish)
    with d.client(name="pytest") as c:  # the bridge reconnects and resumes the conversation (bridges.md §5)
        session = open_chat(c, workspace, conversation=conversation).session
        run_turn(c, session, "is it done?")
        run_turn(c, session, "and now?")
        history = c.request(p.ChatHistory, session=session).records
    note, asked = user_texts(m, 3)[-2:]
    assert note.startswith("[result of background call") and asked == "is it done?"
    if finish:
        assert '"finished":true' in note
    else:
        assert '"kind":"cancelled"' in note and "chat session closed" in note
    assert user_texts(m, 4).count(note) == 1  # handed over once, not again in the next turn
    assert [r["text"] for r in history if r.get("note")] == [note]


def test_a_background_result_between_turns_reaches_the_model_after_a_restart(make_inproc, make_daemon, monkeypatch,
                                                                            model, workspace, tmp_path):
    m = model(load("chat_background"), Calls(("chat_background", {"label": "job"})), Text("started it"),
              Text("here it is"))
    d, conversation = start_in_background(make_inproc, monkeypatch, m, workspace, finish=True)
    # a new scvd process over the state the first one left on disk
    home = tmp_path / "restarted"
    (home / "state").mkdir(parents=True)
    shutil.copytree(d.home / "state" / "chat", home / "state" / "chat")
    d2 = make_daemon(background_config(m), home=home, env={"SCVD_TEST_MODEL_KEY": "sk-test"})
    with d2.client(name="pytest") as c:
        session = open_chat(c, workspace, conversation=conversation).session
        assert isinstance(run_turn(c, session, "is it done?")[1], p.TurnCompleted)
    note, asked = user_texts(m, 3)[-2:]
    assert note.startswith("[result of background call") and '"finished":true' in note
    assert asked == "is it done?"


@pytest.mark.one_loop
def test_a_history_longer_than_one_frame_pages_through_whole(make_inproc, monkeypatch, model, workspace):
    monkeypatch.setenv("SCVD_TEST_MODEL_KEY", "sk-test")
    said = [f"message {n}: " + "x" * 4000 for n in range(8)]
    m = model(*[Text(f"answer {n}") for n in range(9)])
    small = ("[server]\nserver_frame_bytes = 24576\n"  # about the smallest the least result limits allow
             "[tools]\noutput_limit_bytes = 1024\nread_limit_bytes = 1024\n[skills]\nmax_skill_bytes = 1024\n")
    d = make_inproc(small + background_config(m))
    with d.client(name="pytest") as c:
        session = open_chat(c, workspace).session
        for text in said:
            run_turn(c, session, text)
        with pytest.raises(errors.LimitExceeded, match="smaller `limit`"):  # whole, it is ~33 KB: not `internal`
            c.request(p.ChatHistory, session=session)
        pages, before = [], None
        while True:
            page = c.request(p.ChatHistory, session=session, limit=3, before=before)
            pages.insert(0, page.records)
            if not page.more:
                break
            before = page.start
        records = [r for chunk in pages for r in chunk]
        assert [r["text"] for r in records if r["kind"] == "user"] == said
        assert [r["kind"] for r in records] == ["user", "assistant", "turn"] * 8
        assert page.start == 0 and len(pages) == 8
        run_turn(c, session, "z" * 30000)
        newest = c.request(p.ChatHistory, session=session, limit=2)
        assert [r["kind"] for r in newest.records] == ["assistant", "turn"] and newest.start == 25 and newest.more
        with pytest.raises(errors.LimitExceeded, match="raise server.server_frame_bytes"):
            c.request(p.ChatHistory, session=session, limit=1, before=newest.start)  # the 30,000-char message


# --- what comes from outside is made fit for the wire, and the history stays well-formed ---


def test_an_emoji_split_across_two_deltas_reaches_the_chat_whole(chat_rig, workspace):
    """A JavaScript server that slices its text by UTF-16 units sends an emoji's halves in two deltas:
    the turn failed "inside scvd" (the halves could not be encoded) and the reply was lost."""
    model, d = chat_rig(Deltas([{"role": "assistant", "content": "smile \ud83d"}, {"content": "\ude00 ok"}]),
                        Deltas([{"content": "lone \ud83d"}]), wire_api="chat")
    with d.client(name="pytest") as c:
        session = open_chat(c, workspace).session
        events, end = run_turn(c, session, "hi")
        lone = run_turn(c, session, "again")[0]
    assert isinstance(end, p.TurnCompleted), end
    assert "".join(e.text for e in events if isinstance(e, p.AssistantDelta)) == "smile \U0001f600 ok"
    assert next(e for e in events if isinstance(e, p.AssistantCompleted)).text == "smile \U0001f600 ok"
    assert next(e for e in lone if isinstance(e, p.AssistantCompleted)).text == "lone \ufffd"


@pytest.mark.one_loop
def test_two_calls_with_one_id_in_a_reply_both_reach_the_model(chat_rig, workspace):
    """A shim that numbers calls per message: the second call's output took the first's place."""
    (workspace / "a.txt").write_text("AAA")
    (workspace / "b.txt").write_text("BBB")
    same = Deltas([{"role": "assistant", "tool_calls": [
        {"index": i, "id": "call_x", "type": "function", "function": {"name": "read", "arguments": json.dumps(a)}}
        for i, a in enumerate([{"path": "a.txt"}, {"path": "b.txt"}])]}], finish="tool_calls")
    model, d = chat_rig(load("read"), same, Text("done"), wire_api="chat")
    with d.client(name="pytest") as c:
        assert isinstance(run_turn(c, open_chat(c, workspace).session, "read both")[1], p.TurnCompleted)
    asked = next(m for m in model.requests[2]["messages"] if m.get("tool_calls") and len(m["tool_calls"]) == 2)
    ids = [t["id"] for t in asked["tool_calls"]]
    answers = {m["tool_call_id"]: m["content"] for m in model.requests[2]["messages"] if m["role"] == "tool"}
    assert len(set(ids)) == 2 and "AAA" in answers[ids[0]] and "BBB" in answers[ids[1]]


@pytest.mark.one_loop
def test_a_call_with_broken_json_goes_back_as_an_object_and_its_output_says_why(chat_rig, workspace):
    """Ollama refuses a request whose history holds a call's arguments that are not a JSON object
    (400 "invalid tool call arguments"): the model never heard that its call failed, and every later
    turn of the chat failed the same way."""
    broken = Deltas([{"role": "assistant", "tool_calls": [{"index": 0, "id": "call_b", "type": "function",
                                                           "function": {"name": "read", "arguments": '{"path": "a'}}]}],
                    finish="tool_calls")
    model, d = chat_rig(load("read"), broken, Text("sorry"), wire_api="chat")
    with d.client(name="pytest") as c:
        assert isinstance(run_turn(c, open_chat(c, workspace).session, "read a")[1], p.TurnCompleted)
    sent = model.requests[2]["messages"]
    call = next(m for m in sent if m.get("tool_calls") and m["tool_calls"][0]["id"] == "call_b")
    assert call["tool_calls"][0]["function"]["arguments"] == "{}"
    output = json.loads(next(m["content"] for m in sent if m.get("tool_call_id") == "call_b"))
    assert output["error"]["message"] == ("arguments of read are not valid JSON (Unterminated string starting at: "
                                          """line 1 column 10 (char 9)); got '{"path": "a'; send the call again """
                                          "with one JSON object")


@pytest.mark.one_loop
def test_a_call_without_a_name_is_answered_with_an_error_and_never_sent_back_nameless(chat_rig, workspace):
    """A server's tool call fragment that named no tool went back as `"name": ""`, which strict
    servers refuse: every later request of the chat failed."""
    nameless = Deltas([{"role": "assistant", "tool_calls": [{"index": 0, "id": "call_u", "type": "function",
                                                             "function": {"arguments": "{}"}}]}], finish="tool_calls")
    model, d = chat_rig(nameless, Text("sorry"), wire_api="chat")
    with d.client(name="pytest") as c:
        assert isinstance(run_turn(c, open_chat(c, workspace).session, "do it")[1], p.TurnCompleted)
    sent = model.requests[1]["messages"]
    call = next(m for m in sent if m.get("tool_calls"))["tool_calls"][0]
    assert call["id"] == "call_u" and call["function"]["name"]
    output = json.loads(next(m["content"] for m in sent if m.get("tool_call_id") == "call_u"))
    assert output["error"]["message"].startswith("this call named no tool; call again with one of its names: ")


@pytest.mark.one_loop
def test_a_responses_call_without_a_name_is_answered_with_an_error_and_sent_back_named(chat_rig, workspace):
    """The same over the Responses API: a function_call item whose name is empty."""
    model, d = chat_rig(Calls(("", {})), Text("sorry"), wire_api="responses")
    with d.client(name="pytest") as c:
        assert isinstance(run_turn(c, open_chat(c, workspace).session, "do it")[1], p.TurnCompleted)
    sent = model.requests[1]["input"]
    call = next(i for i in sent if i.get("type") == "function_call")
    assert call["name"] == "unnamed"
    output = json.loads(next(i["output"] for i in sent if i.get("type") == "function_call_output"
                             and i["call_id"] == call["call_id"]))
    assert output["error"]["kind"] == "unknown_tool"
    assert output["error"]["message"].startswith("this call named no tool; call again with one of its names: ")


@pytest.mark.one_loop
@pytest.mark.parametrize("number", ["NaN", "Infinity", "1e400"])
def test_a_call_with_a_number_json_has_not_is_refused_and_goes_back_as_an_object(chat_rig, workspace, number):
    """The json module reads NaN, Infinity and 1e400 (as inf): a script tool was handed `NaN` on its
    stdin, which jq and every strict parser refuse, and the call went back to the provider as sent,
    which a strict one refuses for every later turn of the chat."""
    (workspace / "a.txt").write_text("AAA")
    odd = Deltas([{"role": "assistant", "tool_calls": [{"index": 0, "id": "call_n", "type": "function", "function": {
        "name": "read", "arguments": '{"path": "a.txt", "offset": %s}' % number}}]}], finish="tool_calls")
    model, d = chat_rig(load("read"), odd, Text("sorry"), wire_api="chat")
    with d.client(name="pytest") as c:
        assert isinstance(run_turn(c, open_chat(c, workspace).session, "read a")[1], p.TurnCompleted)
    sent = model.requests[-1]["messages"]
    call = next(m for m in sent if m.get("tool_calls") and m["tool_calls"][0]["id"] == "call_n")
    assert call["tool_calls"][0]["function"]["arguments"] == "{}"
    output = json.loads(next(m["content"] for m in sent if m.get("tool_call_id") == "call_n"))
    assert output["error"]["kind"] == "invalid_arguments"
    assert output["error"]["message"].startswith(f"arguments of read are not valid JSON ({number} ")


@pytest.mark.one_loop
def test_a_turn_that_failed_before_any_reply_keeps_the_roles_alternating(chat_rig, workspace):
    """Llama's and Mistral's chat templates refuse two user messages in a row ("roles must
    alternate"): one failed turn broke every later one."""
    model, first, second, _ = two_turns(chat_rig, workspace, Status(400, "bad"), Text("hello"), wire_api="chat")
    assert isinstance(first[1], p.TurnFailed) and isinstance(second[1], p.TurnCompleted)
    assert [(m["role"], m["content"]) for m in model.requests[1]["messages"][1:]] == [("user", "first\n\nsecond")]


@pytest.mark.one_loop
def test_a_turn_whose_transcript_writes_failed_is_written_by_the_next_save(chat_rig, workspace, caplog):
    """A full disk for a moment: the records of the failed writes were dropped (a resumed chat lost
    that turn, or kept an output without its call, which the APIs refuse)."""
    (workspace / "a.txt").write_text("AAA")
    model, d = chat_rig(load("read"), Calls(("read", {"path": "a.txt"})), Text("it says AAA"), Text("yes"))
    with d.client(name="pytest") as c:
        opened = open_chat(c, workspace)
        path = d.home / "state" / "chat" / f"{opened.conversation}.jsonl"
        assert wait_for(path.exists)
        path.rename(path.with_suffix(".away"))
        path.mkdir()  # every append fails now (EISDIR), as a full disk's would
        assert isinstance(run_turn(c, opened.session, "what is in a.txt?")[1], p.TurnCompleted)
        path.rmdir()
        path.with_suffix(".away").rename(path)
        assert isinstance(run_turn(c, opened.session, "sure?")[1], p.TurnCompleted)
    assert "records kept for the next write" in caplog.text
    with d.client(name="pytest") as c:
        again = open_chat(c, workspace, conversation=opened.conversation)
        kinds = [(r["kind"], r.get("text") or r.get("call_id", "")[:0]) for r in
                 c.request(p.ChatHistory, session=again.session).records if r["kind"] != "turn"]
    assert kinds == [("user", "what is in a.txt?"), ("assistant", ""), ("tool", ""), ("assistant", ""), ("tool", ""),
                     ("assistant", "it says AAA"), ("user", "sure?"), ("assistant", "yes")]


@pytest.mark.one_loop
def test_a_server_down_for_a_missing_secret_is_named_to_the_model_which_heals_it(chat_rig, workspace, tmp_path,
                                                                              monkeypatch):
    """An MCP server whose secret was never stored lists no tools, so no failed call of theirs could
    name the key: the model never heard of the server, and seed 003's auto-heal could not start."""
    monkeypatch.setenv("PYTHON_KEYRING_BACKEND", "keyring.backends.null.Keyring")  # secrets.toml
    quirks = Path(__file__).resolve().parents[1] / "helpers" / "mcp_stdio_quirks.py"
    server = (f'[mcp.servers.raw]\ncommand = "{sys.executable}"\nargs = ["{quirks}", "plain", '
              f'"{tmp_path / "starts"}"]\nsandbox = false\nrisk = "read_only"\n'
              'env = {RAW_TOKEN = {secret = "RAW_TOKEN"}}\n')
    heal = ("store_secret", {"key": "RAW_TOKEN", "tool": "mcp__raw"})
    model, d = chat_rig(load("store_secret"), Calls(heal), load("echo"), Text("echo is there"), extra=server)
    with d.client(name="pytest", approver=True) as c:
        assert wait_for(lambda: [s.state for s in c.request(p.Status).mcp_servers] == ["down"])
        session = open_chat(c, workspace).session

        def enter(event: Any) -> None:
            if isinstance(event, p.SecretRequested):
                c.request(p.SecretProvide, request_id=event.request_id, value="t0ken")

        events, end = run_turn(c, session, "echo through raw", enter)
        assert isinstance(end, p.TurnCompleted), end
    told = ("MCP server raw is down until the secret 'RAW_TOKEN' is stored, and lists no tools till then: to use "
            "it, call store_secret with that key and tool 'mcp__raw', then find_tools again.")
    assert told in model.requests[0]["instructions"]
    healed = json.loads(model.outputs(2)[-1])
    assert healed["ok"] and healed["result"]["mcp_servers"] == {"raw": "ready: 1 tool(s)"}, healed
    assert healed["result"]["next"] == "its tools are listed now (find_tools loads them); call them"
    assert told not in model.requests[2]["instructions"]
    found = json.loads(model.outputs(3)[-1])["result"]  # within the same turn: the server's tools came
    assert found["schemas_loaded"] == ["mcp__raw__echo"], found
    assert "mcp__raw__echo" in model.tool_names(3)


@pytest.mark.one_loop
def test_a_server_up_before_and_down_for_a_secret_now_gone_is_named_with_its_tools_still_listed(
        chat_rig, workspace, tmp_path, monkeypatch):
    """The model's line said the server "lists no tools till then", as of one never up: one that was up
    keeps its tools listed (their calls fail with credential_missing), so the model was told its tools
    were gone while it saw them, and to find_tools again for tools it had."""
    monkeypatch.setenv("PYTHON_KEYRING_BACKEND", "keyring.backends.null.Keyring")  # secrets.toml
    monkeypatch.setenv("RAW_TOKEN", "t0ken")  # the store reads scvd's environment last: gone once unset
    quirks = Path(__file__).resolve().parents[1] / "helpers" / "mcp_stdio_quirks.py"
    server = (f'[mcp.servers.raw]\ncommand = "{sys.executable}"\nargs = ["{quirks}", "results", '
              f'"{tmp_path / "starts"}"]\nsandbox = false\nrisk = "read_only"\n'
              'env = {LEAK_TOKEN = {secret = "RAW_TOKEN"}}\n')
    model, d = chat_rig(Text("noted"), extra=server)
    with d.client(name="pytest") as c:
        assert wait_for(lambda: [s.state for s in c.request(p.Status).mcp_servers] == ["ready"])
        monkeypatch.delenv("RAW_TOKEN")
        assert c.call(c.open_session(str(workspace)), "mcp__raw__crash", {}).error.kind == "unavailable"
        assert wait_for(lambda: "RAW_TOKEN, which is not set" in (c.request(p.Status).mcp_servers[0].error or ""))
        assert c.request(p.Status).mcp_servers[0].tools == 6  # still listed
        events, end = run_turn(c, open_chat(c, workspace).session, "what now?")
        assert isinstance(end, p.TurnCompleted), end
    told = ("MCP server raw is down until the secret 'RAW_TOKEN' is stored; its tools stay listed, but a call of "
            "one fails till then: to use them, call store_secret with that key and tool 'mcp__raw' first.")
    assert told in model.requests[0]["instructions"], model.requests[0]["instructions"]
    assert "lists no tools" not in model.requests[0]["instructions"]


def test_a_turn_started_while_scvd_stops_is_told_to_send_it_again_once_scvd_is_back(
        make_inproc, monkeypatch, model, workspace, tmp_path):
    """A turn.start in the stop's grace (a call still stopping) was refused as invalid_request, a
    request at fault: `scvctl exec` exited 1 and a bridge could not tell it from its own mistake. It is
    unavailable, and not fatal: the connection's other turns still send their ends."""
    monkeypatch.setenv("K", "sk-test")
    m = model(load("chat_slow_stop"), Calls(("chat_slow_stop", {})), Text("never"))
    slow = SlowStopTool(stop_seconds=60)  # holds the stop's grace open until released
    d = make_inproc(f'[providers.test]\nmodel = "m"\nbase_url = "{m.base_url}"\nwire_api = "chat"\n'
                    'api_key_secret = "K"\n[chat]\nprovider = "test"\n[server]\nshutdown_grace_seconds = 60\n',
                    tools=[slow])
    other = tmp_path / "other"
    other.mkdir()
    with d.client(name="busy") as a, d.client(name="late") as b:
        a.request(p.TurnStart, session=open_chat(a, workspace).session, text="go")
        assert slow.running.wait(10)
        late = open_chat(b, other).session
        d.call_soon(d.daemon.request_stop, "test")
        assert wait_for(lambda: d.daemon.chat.stopping)
        try:
            with pytest.raises(errors.Unavailable) as refused:
                b.request(p.TurnStart, session=late, text="hello")
            assert isinstance(b.request(p.Ping), p.Pong)  # not fatal: the connection's other turns end on it
        finally:
            slow.release.set()
    assert type(refused.value) is errors.Unavailable
    assert str(refused.value) == "scvd is stopping; no new turns are accepted: send it again once scvd is back"
    assert refused.value.reason == "stopping"  # what a bridge tells the stop by, not the words
