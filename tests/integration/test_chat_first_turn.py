"""A daemon's first chat request imports chat's modules, and its first turn sets up the openai client, on
threads: its clients are served meanwhile."""

from __future__ import annotations

import pytest

from chat_model import model  # noqa: F401 (a fixture)
from chat_model import ScriptedModel, Text
from harness import RawConn, make_wrapped  # noqa: F401 (a fixture)
from test_chat_restart import until_end
from test_lifecycle import hang_point, reached
from scvd import errors, protocol as p


def config(m: ScriptedModel, wire_api: str) -> str:
    return (f'[providers.test]\nmodel = "m"\nbase_url = "{m.base_url}"\nwire_api = "{wire_api}"\n'
            'api_key_env = "SCVD_TEST_MODEL_KEY"\n[chat]\nprovider = "test"\n')


@pytest.mark.parametrize("wire_api, held", [
    ("responses", "openai.resources.responses"),  # the wire API's code, which the client imports at its first request
    ("chat", "openai.resources.chat"),
    ("responses", "anyio._backends._asyncio"),  # the rehearsal's end: its events read, their models built
    ("responses", "httpcore2"),  # the turn's own client: its HTTP stack and TLS context
])
def test_clients_are_served_while_the_first_turn_sets_up_openai(make_wrapped, model, tmp_path, workspace,
                                                                wire_api, held):
    """The first turn imported its wire API's code and built pydantic's models of its events on the event
    loop (3.6 s on a loaded 2-core machine): no ping, approval or other chat was answered meanwhile. The
    import of `held` waits here, as a slow machine makes it."""
    m = model(Text("hello there"))
    with hang_point(tmp_path / "hang") as hang:
        d = make_wrapped(config(m, wire_api), env={"SCVD_TEST_MODEL_KEY": "sk-test", "HARNESS_HANG_IMPORT_OF": held,
                                                   "HARNESS_HANG_IMPORT_WHILE": str(hang)})
        with d.client(name="chat") as c, RawConn(d.socket) as other:
            session = c.request(p.ChatOpen, workspace=str(workspace)).session
            c.request(p.TurnStart, session=session, text="hi")
            reached(hang, f"the first turn's import of {held}")
            assert isinstance(other.hello(), p.Welcome)
            assert isinstance(other.request({"type": "ping"}), p.Pong)
            hang.unlink()
            events = until_end(c)
    assert isinstance(events[-1], p.TurnCompleted), events[-1]
    assert [e.text for e in events if isinstance(e, p.AssistantCompleted)] == ["hello there"]


@pytest.mark.parametrize("first", [p.ChatOpen, p.ChatHistory])
def test_clients_are_served_while_the_first_chat_request_imports_chat(make_wrapped, model, tmp_path, workspace,
                                                                     first):
    """The daemon's first chat request (any: a history of no session too) imported scvd/chat/* on the event
    loop (50-120 ms): no client was served meanwhile. The import of the chat service waits here."""
    with hang_point(tmp_path / "hang") as hang:
        d = make_wrapped(config(model(), "responses"), env={
            "SCVD_TEST_MODEL_KEY": "sk-test", "HARNESS_HANG_IMPORT_OF": "scvd.chat.service",
            "HARNESS_HANG_IMPORT_WHILE": str(hang)})
        with d.client(name="chat") as c, RawConn(d.socket) as other:
            fields = {"workspace": str(workspace)} if first is p.ChatOpen else {"session": "s1-none"}
            sent = c.send(first, **fields)
            reached(hang, "the import of the chat service")
            assert isinstance(other.hello(), p.Welcome)
            assert isinstance(other.request({"type": "ping"}), p.Pong)
            if first is p.ChatOpen:  # answered aside: the connection's own requests are answered meanwhile
                assert isinstance(c.request(p.Ping), p.Pong)
            hang.unlink()
            if first is p.ChatOpen:
                assert isinstance(c.wait_answer(sent.id), p.ChatOpened)
            else:
                with pytest.raises(errors.SessionNotFound):
                    c.wait_answer(sent.id)
