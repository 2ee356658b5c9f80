"""A real `scvd run` process: the transcript survives a restart, shutdown ends a turn, openai stays unloaded,
old transcripts expire (in-process where a pass is made to fail)."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import select
import shutil
import signal
import stat
import subprocess
import sys
import textwrap
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest

from chat_model import model  # noqa: F401 (a fixture)
from chat_model import Calls, Hang, ScriptedModel, Text
from conftest import reloaded
from harness import RawConn, make_wrapped, wait_until  # noqa: F401 (a fixture)
from test_lifecycle import hang_point, reached
from scvd import errors, protocol as p
from scvd.chat.readback import CANCELLED_NOTE, KILLED_NOTE as KILLED, STOPPED_NOTE as STOPPED
from scvd.chat.items import AssistantReply, Opened, TurnEnded, UserText
from scvd.chat.transcript import Transcripts

ROOT = Path(__file__).resolve().parents[2]
END = (p.TurnCompleted, p.TurnCancelled, p.TurnFailed)


def config(m: ScriptedModel) -> str:
    return (f'[providers.test]\nmodel = "m"\nbase_url = "{m.base_url}"\nwire_api = "chat"\n'
            'api_key_env = "SCVD_TEST_MODEL_KEY"\n[chat]\nprovider = "test"\n')


def until_end(c) -> list:
    events = [c.next_event()]
    while not isinstance(events[-1], END):
        events.append(c.next_event())
    return events


def test_the_transcript_survives_a_daemon_restart(make_daemon, model, scv_home, workspace):
    m = model(Text("I will remember 42"), Text("you said 42"))
    env = {"SCVD_TEST_MODEL_KEY": "sk-test"}
    d = make_daemon(config(m), home=scv_home, env=env)
    with d.client(name="pytest") as c:
        opened = c.request(p.ChatOpen, workspace=str(workspace))
        c.request(p.TurnStart, session=opened.session, text="remember 42")
        until_end(c)
    assert d.stop() == 0
    transcript = scv_home / "state" / "chat" / f"{opened.conversation}.jsonl"
    assert stat.S_IMODE(transcript.stat().st_mode) == 0o600

    d2 = make_daemon(home=scv_home, env=env)
    with d2.client(name="pytest") as c:
        again = c.request(p.ChatOpen, workspace=str(workspace), conversation=opened.conversation)
        assert again.resumed and again.conversation == opened.conversation
        history = c.request(p.ChatHistory, session=again.session).records
        assert [r.get("text") for r in history if r["kind"] in ("user", "assistant")] == \
            ["remember 42", "I will remember 42"]
        c.request(p.TurnStart, session=again.session, text="what did I say?")
        assert isinstance(until_end(c)[-1], p.TurnCompleted)
    said = [msg["content"] for msg in m.requests[1]["messages"][1:]]
    assert said == ["remember 42", "I will remember 42", "what did I say?"]


ENV = {"SCVD_TEST_MODEL_KEY": "sk-test"}


def resumed(c, workspace: Path, conversation: str) -> tuple[str, list[dict]]:
    """`conversation` opened again on client `c`: its session, and the history it shows."""
    session = c.request(p.ChatOpen, workspace=str(workspace), conversation=conversation).session
    return session, c.request(p.ChatHistory, session=session).records


@contextmanager
def hung_turn(make_daemon, m: ScriptedModel, home: Path, workspace: Path) -> Iterator[tuple]:
    """A daemon whose turn "delete the logs" waits on the model: (daemon, its client, the conversation)."""
    d = make_daemon(config(m), home=home, env=ENV)
    with d.client(name="pytest") as c:
        opened = c.request(p.ChatOpen, workspace=str(workspace))
        c.request(p.TurnStart, session=opened.session, text="delete the logs")
        assert m.hung.wait(15)
        yield d, c, opened.conversation


def test_shutdown_mid_turn_fails_it_and_the_resumed_conversation_is_told(make_daemon, model, scv_home, workspace):
    """scvd's stop fails a running turn (cancelled_by_shutdown). Its text stayed with no word that it
    went unanswered (a cancelled turn's gets one): the resumed conversation's next turn came right
    after it, and the model took "delete the logs" for a request still to carry out."""
    m = model(Hang("deleting"), Text("noon"))
    with hung_turn(make_daemon, m, scv_home, workspace) as (d, c, conversation):
        d.proc.terminate()
        end = until_end(c)[-1]
    assert isinstance(end, p.TurnFailed) and end.reason == "cancelled_by_shutdown"
    assert d.proc.wait(15) == 0

    d2 = make_daemon(home=scv_home, env=ENV)
    with d2.client(name="pytest") as c:
        session, history = resumed(c, workspace, conversation)
        assert [(r["kind"], r.get("text")) for r in history if r["kind"] != "turn"] == \
            [("user", "delete the logs"), ("scvd", STOPPED)]
        c.request(p.TurnStart, session=session, text="what time is it")
        assert isinstance(until_end(c)[-1], p.TurnCompleted)
    assert m.requests[1]["messages"][1:] == [
        {"role": "user", "content": f"delete the logs\n\n{STOPPED}\n\nwhat time is it"}]


def test_a_turn_cut_off_by_sigkill_gets_scvds_note_when_the_conversation_resumes(make_daemon, model, scv_home,
                                                                                  workspace):
    """A crash or SIGKILL writes no turn end: the resumed conversation closed the turn's open calls but
    said nothing, and the next turn came right after "delete the logs". The note comes at the replay,
    written once: a second restart finds the turn ended."""
    m = model(Calls(("find_tools", {"query": "delete"})), Hang("deleting"), Text("noon"))
    with hung_turn(make_daemon, m, scv_home, workspace) as (d, c, conversation):
        d.proc.kill()
        assert d.proc.wait(15) == -9

    for restart in (1, 2):  # each restart resumes it; the note is there once
        again = make_daemon(home=scv_home, env=ENV)
        with again.client(name="pytest") as c:
            session, history = resumed(c, workspace, conversation)
            assert [(r["kind"], r.get("text")) for r in history if r["kind"] in ("user", "scvd")] == \
                [("user", "delete the logs"), ("scvd", KILLED)]
            assert history[-1]["kind"] == "turn" and history[-1]["status"] == "failed"
            if restart == 2:
                c.request(p.TurnStart, session=session, text="what time is it")
                assert isinstance(until_end(c)[-1], p.TurnCompleted)
        assert again.stop() == 0
    assert m.requests[2]["messages"][-1] == {"role": "user", "content": f"{KILLED}\n\nwhat time is it"}


def test_a_call_that_completed_before_a_sigkill_keeps_its_output_when_the_conversation_resumes(
        make_daemon, model, scv_home, workspace):
    """A step's outputs were written only once its last call ended: SIGKILL during the bash call after a
    write that completed, and the resumed conversation told the model (and chat.history) that the write
    "did not finish", so it would write (or mail) again. Only the call left open is cancelled."""
    m = model(Calls(("find_tools", {"query": "bash write"})),
              Calls(("write", {"path": "note.txt", "content": "written once\n", "mode": "create"}),
                    ("bash", {"command": "echo mailed >> sent.log; sleep 30"})),
              Text("what now?"))
    d = make_daemon(config(m), home=scv_home, env=ENV)
    with d.client(name="pytest", approver=True) as c:
        opened = c.request(p.ChatOpen, workspace=str(workspace))
        c.request(p.TurnStart, session=opened.session, text="write the note, then mail it")
        event = c.next_event()
        while not (isinstance(event, p.CallStarted) and event.tool == "bash"):  # the write completed before it
            if isinstance(event, p.ApprovalRequested):
                c.request(p.ApprovalDecide, approval_id=event.approval_id, decision="approve")
            event = c.next_event()
        wait_until(lambda: (workspace / "sent.log").exists(), what="bash's mail")
        d.proc.kill()
        assert d.proc.wait(15) == -9

    again = make_daemon(home=scv_home, env=ENV)
    with again.client(name="pytest") as c:
        session, history = resumed(c, workspace, opened.conversation)
        outputs = {r["name"]: json.loads(r["output"]) for r in history if r["kind"] == "tool"}
        c.request(p.TurnStart, session=session, text="did it work?")
        assert isinstance(until_end(c)[-1], p.TurnCompleted)
    assert outputs["write"]["ok"] and outputs["write"]["result"]["created"]
    assert outputs["bash"] == {"ok": False, "error": {"kind": "cancelled",
                                                      "message": "scvd stopped before this call finished"}}
    told = [json.loads(msg["content"]) for msg in m.requests[-1]["messages"] if msg["role"] == "tool"][1:]
    assert told == [outputs["write"], outputs["bash"]]  # the model reads them in the calls' order
    assert (workspace / "note.txt").read_text() == "written once\n"


@pytest.mark.parametrize("end", ["turn.cancel", "SIGTERM"])
def test_a_write_that_had_committed_as_its_turn_ended_reaches_the_model_as_done(make_wrapped, model, tmp_path,
                                                                                scv_home, workspace, end):
    """A turn cancelled (or cut off by scvd's stop) while its approved write renamed the file in place
    told the model the write was `cancelled`, which means the file is unchanged, while the file held the
    new content and call.completed and the audit log said ok: the model would take the old file for the
    real one. The write's own outcome goes to the transcript, and the turn's note still follows it."""
    write = Calls(("write", {"path": "m.txt", "content": "version 0\n", "mode": "replace"}))
    m = model(write, write, Text("noted"))  # the first call loads the schema
    (workspace / "m.txt").write_text("orig\n")
    with hang_point(tmp_path / "install") as hang:
        d = make_wrapped(config(m), home=scv_home, env={**ENV, "HARNESS_HANG_INSTALL_WHILE": str(hang)})
        with d.client(name="pytest", approver=True) as c:
            opened = c.request(p.ChatOpen, workspace=str(workspace))
            turn = c.request(p.TurnStart, session=opened.session, text="write m.txt").turn
            asked = c.next_event()
            while not isinstance(asked, p.ApprovalRequested):
                asked = c.next_event()
            c.request(p.ApprovalDecide, approval_id=asked.approval_id, decision="approve")
            reached(hang, "the write's install")
            if end == "turn.cancel":
                c.request(p.TurnCancel, session=opened.session, turn=turn)
            else:
                d.proc.terminate()
                wait_until(lambda: "running call(s) to end" in d.log(), what="the stop to cancel the turn")
            hang.unlink()
            events = until_end(c)
            if end == "SIGTERM":
                assert d.proc.wait(15) == 0
    assert (workspace / "m.txt").read_text() == "version 0\n"
    completed = [e for e in events if isinstance(e, p.CallCompleted)]
    assert [e.ok for e in completed] == [True], completed
    assert isinstance(events[-1], p.TurnCancelled if end == "turn.cancel" else p.TurnFailed), events[-1]

    again = make_wrapped(home=scv_home, env=ENV)
    with again.client(name="pytest") as c:
        session, history = resumed(c, workspace, opened.conversation)
        c.request(p.TurnStart, session=session, text="did it work?")
        assert isinstance(until_end(c)[-1], p.TurnCompleted)
    written = json.loads([r for r in history if r["kind"] == "tool"][-1]["output"])
    assert written["ok"] and written["result"]["bytes_written"] == 10, written
    assert [r.get("text") for r in history if r["kind"] == "scvd"] == [
        CANCELLED_NOTE if end == "turn.cancel" else STOPPED]
    assert json.loads(m.outputs(-1)[-1]) == written  # what the model reads of it


def test_a_call_still_running_after_its_cancelled_turn_ended_reaches_the_model_as_unknown(make_wrapped, model,
                                                                                         scv_home, workspace):
    """The turn's end waits for its calls a bounded time; a call that ignores its cancel is left running,
    and the model hears that its end is unknown, not that it was cancelled (which says nothing was done).
    The bound (CALLS_END_SECONDS, 10 s; shortened here) is one wait from the cancel: a wait for the
    call's task, then another for the call, held turn.cancelled twice as long."""
    bound = 4.0
    m = model(Calls(("test_stubborn", {})), Calls(("test_stubborn", {})), Text("noted"))
    d = make_wrapped(config(m) + "[server]\nshutdown_grace_seconds = 1\n", home=scv_home,
                     env={**ENV, "HARNESS_CALLS_END_SECONDS": str(bound)})
    with d.client(name="pytest") as c:
        opened = c.request(p.ChatOpen, workspace=str(workspace))
        turn = c.request(p.TurnStart, session=opened.session, text="go").turn
        wait_until(lambda: list(workspace.glob("started-*")), what="the stubborn call to start")
        cancelled_at = time.monotonic()
        c.request(p.TurnCancel, session=opened.session, turn=turn)
        assert isinstance(until_end(c)[-1], p.TurnCancelled)
        waited = time.monotonic() - cancelled_at
        assert waited < bound + 2.5, f"turn.cancelled came {waited:.1f} s after the cancel, past its {bound:g} s bound"
        history = c.request(p.ChatHistory, session=opened.session).records
    output = json.loads([r for r in history if r["kind"] == "tool"][-1]["output"])
    assert output == {"ok": False, "error": {"kind": "cancelled", "message": (
        "the turn ended while this call was still running, and scvd stopped waiting for it: whether it did "
        "its work is unknown; check (e.g. read what it would change) before doing it again")}}


@pytest.mark.one_loop
def test_an_older_turn_cut_off_before_notes_came_shows_its_note_in_place(make_daemon, model, scv_home, workspace):
    """A turn SIGKILL cut off, which a build from before the notes resumed (closing its calls, writing
    no end), stayed without a note once later turns came: history showed it unanswered and unended,
    and the model read "delete the logs" as still to carry out."""
    m = model(Text("noon"), Text("ten past"))
    transcripts = Transcripts(scv_home / "state" / "chat")
    transcripts.append("kold", [
        Opened(workspace=str(workspace), provider="test"), UserText(text="delete the logs", turn="t1"),
        UserText(text="hi", turn="t2"), AssistantReply(text="hello", turn="t2"),
        TurnEnded(turn="t2", status="completed")])
    d = make_daemon(config(m), home=scv_home, env={"SCVD_TEST_MODEL_KEY": "sk-test"})
    for _ in range(2):  # chat.history and each replay read it there, once; nothing is written
        with d.client(name="pytest") as c:
            session, history = resumed(c, workspace, "kold")
            assert [(r["kind"], r.get("text") or r.get("status")) for r in history][:5] == [
                ("user", "delete the logs"), ("scvd", KILLED), ("turn", "failed"), ("user", "hi"),
                ("assistant", "hello")]
            c.request(p.TurnStart, session=session, text="what time is it")
            assert isinstance(until_end(c)[-1], p.TurnCompleted)
    assert KILLED not in [getattr(r, "text", "") for r in transcripts.read("kold")]  # read there, never written
    assert m.requests[0]["messages"][1:] == [
        {"role": "user", "content": f"delete the logs\n\n{KILLED}\n\nhi"}, {"role": "assistant", "content": "hello"},
        {"role": "user", "content": "what time is it"}]


@pytest.mark.one_loop
def test_a_cancelled_turns_note_written_as_a_user_record_replays_as_scvds(make_daemon, model, scv_home, workspace):
    """Transcripts from before notes had a kind of their own hold the note as a `user` record: it still
    reaches the model, and history shows it as scvd's. It is told by its place (after the person's text
    of its own turn), not by its words alone: a person who typed them as a turn's text saw them as scvd's."""
    m = model(Text("noon"))
    note = CANCELLED_NOTE  # as such a transcript holds it
    Transcripts(scv_home / "state" / "chat").append("kold", [
        Opened(workspace=str(workspace), provider="test"), UserText(text="delete the logs", turn="t1"),
        UserText(text=note, turn="t1"), TurnEnded(turn="t1", status="cancelled"),
        UserText(text=note, turn="t2"), AssistantReply(text="understood", turn="t2"),
        TurnEnded(turn="t2", status="completed")])
    d = make_daemon(config(m), home=scv_home, env={"SCVD_TEST_MODEL_KEY": "sk-test"})
    with d.client(name="pytest") as c:
        session, history = resumed(c, workspace, "kold")
        assert [(r["kind"], r.get("text")) for r in history] == \
            [("user", "delete the logs"), ("scvd", note), ("turn", None), ("user", note),
             ("assistant", "understood"), ("turn", None)]
        c.request(p.TurnStart, session=session, text="what time is it")
        assert isinstance(until_end(c)[-1], p.TurnCompleted)
    assert m.requests[0]["messages"][1:] == [
        {"role": "user", "content": f"delete the logs\n\n{note}\n\n{note}"},
        {"role": "assistant", "content": "understood"}, {"role": "user", "content": "what time is it"}]


IDLE = textwrap.dedent("""
    import asyncio, sys
    from scvd import config, paths as paths_mod, protocol as p
    from scvd.server import Daemon
    from scvctl.client import AsyncClient

    async def main():
        paths = paths_mod.resolve({"SCV_HOME": sys.argv[1]})
        paths_mod.prepare(paths)
        daemon = Daemon(paths, config.load(paths.config_file, env={}), install_signals=False)
        await daemon.startup([])
        c = await AsyncClient.connect(paths.socket, name="probe")
        opened = await c.request(p.ChatOpen, workspace=sys.argv[2])
        print("after chat.open:", "openai" in sys.modules, flush=True)
        await c.request(p.TurnStart, session=opened.session, text="hi")
        while not isinstance(await c.next_event(), p.TurnCompleted):
            pass
        print("after a turn:", "openai" in sys.modules, flush=True)
        await c.close()
        daemon.request_stop()
        await daemon.shutdown()

    asyncio.run(main())
""")


@pytest.mark.one_loop
def test_the_idle_daemon_does_not_import_openai(model, scv_home, workspace):
    m = model(Text("hi"))
    (scv_home / "config.toml").write_text(config(m))
    env = {**os.environ, "SCVD_TEST_MODEL_KEY": "sk-test", "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", IDLE, str(scv_home), str(workspace)], env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.stdout.splitlines() == ["after chat.open: False", "after a turn: True"], out.stderr


def aged(path: Path, days: float) -> Path:
    when = time.time() - days * 86400
    os.utime(path, (when, when), follow_symlinks=False)
    return path


def written(folder: Path, conversation: str, days: float) -> Path:
    """A transcript last written `days` ago."""
    Transcripts(folder).append(conversation, [Opened(workspace="/", provider="codex"), UserText(text="hi")])
    return aged(folder / f"{conversation}.jsonl", days)


@pytest.mark.one_loop
def test_transcript_days_removes_old_transcripts_at_start_and_nothing_else(make_daemon, scv_home, workspace,
                                                                            tmp_path):
    chat = scv_home / "state" / "chat"
    old, fresh = written(chat, "kold", 31), written(chat, "kfresh", 29)
    elsewhere = written(tmp_path, "kthere", 40)
    (chat / "klink.jsonl").symlink_to(elsewhere)
    link = aged(chat / "klink.jsonl", 40)
    other = chat / "notes.txt"
    other.write_text("mine")
    aged(other, 40)
    d = make_daemon("[chat]\ntranscript_days = 30\n", home=scv_home)
    with d.client(name="pytest") as c:  # a chat.open waits for the start's pass
        with pytest.raises(errors.ConversationNotFound, match=r"no conversation 'kold': its transcript was removed "
                           r"\(chat.transcript_days = 30 .*; start a new one with chat.open without `conversation`"):
            c.request(p.ChatOpen, workspace=str(workspace), conversation="kold")
        assert c.request(p.ChatOpen, workspace=str(workspace), conversation="kfresh").resumed
    out = subprocess.run([sys.executable, "-m", "scvctl", "chat", "--workspace", str(workspace), "--conversation",
                          "kold"], env=d.env, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert out.returncode == 1 and out.stderr.startswith("conversation_not_found: no conversation 'kold'")
    assert out.stderr.endswith("(`scvctl chat` without --conversation)\n"), out.stderr
    assert not old.exists() and fresh.exists()
    assert link.is_symlink() and elsewhere.exists() and other.read_text() == "mine"
    assert "removed 1 chat transcript(s) not written to for over 30 days (chat.transcript_days)" in d.log()


@pytest.mark.one_loop
def test_a_reload_setting_transcript_days_prunes_at_once_but_not_an_open_conversation(make_daemon, scv_home,
                                                                                      workspace):
    chat = scv_home / "state" / "chat"
    gone, held = written(chat, "kgone", 40), written(chat, "kheld", 40)
    d = make_daemon(home=scv_home)  # the default keeps every transcript
    with d.client(name="pytest") as c:
        c.request(p.ChatOpen, workspace=str(workspace), conversation="kheld")
        aged(held, 40)  # the open may have written its settings
        reloaded(d, "[chat]\ntranscript_days = 30\n")
        while gone.exists():  # the pass the reload started (the test's timeout bounds it)
            time.sleep(0.05)
        assert held.exists()


def test_clients_are_served_while_the_starts_pass_runs_and_chat_open_waits_for_it(make_wrapped, tmp_path,
                                                                                  workspace):
    """The start's pass ran before the socket was served: a hung state directory held READY=1 and
    every client. A chat.open resuming a conversation still waits for it: kold goes first."""
    home = tmp_path / "home"
    written(home / "state" / "chat", "kold", 31)
    # the pass's listing of chat/ holds while the hang point exists (a hung mount)
    with hang_point(tmp_path / "hang") as hang:
        d = make_wrapped("[chat]\ntranscript_days = 30\n", home=home, env={"HARNESS_HANG_EXPIRY_WHILE": str(hang)})
        with RawConn(d.socket) as conn:  # make_wrapped waited for `status`: served
            conn.hello()
            reached(hang, "the start's pass to hang")
            conn.send({"type": "chat.open", "id": 7, "workspace": str(workspace), "conversation": "kold"})
            assert conn.request({"type": "ping", "id": 8}).id == 8  # chat.open was taken up, and waits
            hang.unlink()
            answer = conn.frame()
    assert isinstance(answer, p.Error) and answer.id == 7 and answer.code == "conversation_not_found", answer
    assert not (home / "state" / "chat" / "kold.jsonl").exists()


@pytest.mark.one_loop
def test_a_bug_in_an_expiry_pass_is_logged_and_the_later_passes_still_run(make_inproc, monkeypatch, caplog):
    """In-process, a pass made to raise once: the exception ended the background task, so no later
    pass ran (and nothing was logged of it)."""
    from scvd.chat import expiry

    listing, raised = expiry.stale, threading.Event()

    def stale_once_buggy(*args: object) -> list[str]:
        if not raised.is_set():
            raised.set()
            raise RuntimeError("a bug")
        return listing(*args)

    monkeypatch.setattr(expiry, "stale", stale_once_buggy)
    d = make_inproc()  # the default 0: no pass until a reload sets it
    old = written(d.home / "state" / "chat", "kold", 40)

    def reload(days: int) -> None:
        (d.home / "config.toml").write_text(f"[chat]\ntranscript_days = {days}\n")
        asyncio.run_coroutine_threadsafe(d.daemon.reload(), d.loop).result(30)

    reload(30)
    assert raised.wait(15)
    reload(31)  # a pass at once
    wait_until(lambda: not old.exists(), what="the pass after the failed one")
    failures = [r for r in caplog.records if r.name == "scvd.chat" and r.levelno == logging.ERROR]
    assert [r.getMessage() for r in failures] == [
        "chat transcript expiry (chat.transcript_days) failed; it runs again in a day"]
    assert failures[0].exc_info[0] is RuntimeError


@pytest.mark.one_loop
@pytest.mark.bwrap
def test_a_transcript_that_cannot_be_removed_is_logged_and_the_pass_goes_on(make_daemon, scv_home, tmp_path,
                                                                            workspace):
    """A transcript whose unlink fails, here a mount point's (EBUSY, for root too): said in the log,
    and the pass goes on to the next, with scvd serving on."""
    chat = scv_home / "state" / "chat"
    busy, old = written(chat, "kbusy", 40), written(chat, "kold", 40)  # in this order
    mounted = written(tmp_path, "kmounted", 40)  # in kbusy's place, as scvd sees it
    prefix = [shutil.which("bwrap") or "bwrap", "--dev-bind", "/", "/", "--bind", str(mounted), str(busy),
              "--die-with-parent", "--"]
    d = make_daemon("[chat]\ntranscript_days = 30\n", home=scv_home, prefix=prefix)
    with d.client(name="pytest") as c:  # a chat.open waits for the start's pass
        with pytest.raises(errors.ConversationNotFound):
            c.request(p.ChatOpen, workspace=str(workspace), conversation="kold")
        pid = c.status().pid
    assert f"chat transcript {busy} not removed: [Errno 16] Device or resource busy: '{busy}'" in d.log()
    assert "removed 1 chat transcript(s) not written to for over 30 days (chat.transcript_days)" in d.log()
    assert busy.exists() and not old.exists()
    os.kill(pid, signal.SIGTERM)  # scvd itself, not the bwrap around it
    assert d.proc.wait(15) == 0


TURNS = 100_000  # about 30 MB: a chat of months


def long_transcript(path: Path, workspace: Path, turns: int) -> None:
    """`turns` turns written straight in the transcript's format, as months of chat leave it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    opened = {"kind": "open", "workspace": str(workspace), "provider": "test"}
    with path.open("wb") as f:
        f.write(json.dumps(opened).encode() + b"\n")
        for n in range(turns):
            f.write(f'{{"kind":"user","text":"question {n} {"q" * 80}","turn":"t{n}"}}\n'
                    f'{{"kind":"assistant","text":"answer {n} {"a" * 120}","turn":"t{n}"}}\n'
                    f'{{"kind":"turn","turn":"t{n}","status":"completed"}}\n'.encode())


def cpu_ticks(pid: int, tid: int | None = None) -> int:
    """The CPU time (clock ticks, user and system) the daemon used (one thread's with `tid`)."""
    path = Path(f"/proc/{pid}/stat" if tid is None else f"/proc/{pid}/task/{tid}/stat")
    fields = path.read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def test_a_long_transcript_resumes_off_the_loop_and_pages_without_reading_it_on_the_loop(make_daemon, model,
                                                                                          scv_home, workspace):
    """A 30 MB transcript: chat.open read it back and replayed it on the event loop, so every other
    client waited seconds for its answers, and each chat.history page read and decoded the whole file
    again, however few records it asked for (seconds each, the loop stalled again). The newest pages
    come from memory; older ones read the file again, off the loop (memory had held all of it)."""
    d = make_daemon(config(model()), home=scv_home, env=ENV)
    path = d.home / "state" / "chat" / "klong.jsonl"
    long_transcript(path, workspace, TURNS)
    (workspace / "a.txt").write_text("hi\n")
    with d.client(name="pytest") as c, d.client(name="other") as other:
        session = other.open_session(workspace)
        loop, process = cpu_ticks(d.proc.pid, d.proc.pid), cpu_ticks(d.proc.pid)
        sent = c.send(p.ChatOpen, workspace=str(workspace), conversation="klong")
        other.request(p.Ping)
        assert other.call(session, "read", {"path": "a.txt"}).result["content"] == "hi\n"
        assert select.select([c.sock], [], [], 0)[0] == []  # chat.open still works, and the loop serves others
        opened = c.wait_answer(sent.id)
        loop, process = cpu_ticks(d.proc.pid, d.proc.pid) - loop, cpu_ticks(d.proc.pid) - process
        assert opened.resumed
        assert loop * 4 < process, (loop, process)  # the read, its decoding and the replay ran on a worker
        moved = path.rename(path.with_name("moved"))  # the newest pages come from what chat.open read
        last = c.request(p.ChatHistory, session=opened.session, limit=1)
        assert (last.start, last.more) == (3 * TURNS - 1, True)
        assert last.records == [{"kind": "turn", "turn": f"t{TURNS - 1}", "status": "completed"}]
        # older ones, past what a chat keeps in memory (chat/pages.py), from the file again, off the loop
        with pytest.raises(errors.Unavailable, match="records 0 to 1 of conversation klong are no longer held"):
            c.request(p.ChatHistory, session=opened.session, before=2, limit=5)
        moved.rename(path)
        first = c.request(p.ChatHistory, session=opened.session, before=2, limit=5)
        assert [r["text"].split()[:2] for r in first.records] == [["question", "0"], ["answer", "0"]]
        assert (first.start, first.more) == (0, False)


def test_a_session_open_is_answered_while_chat_opens_read_long_transcripts(make_wrapped, tmp_path, workspace):
    """Five chat.opens of long transcripts held a plain session.open back for seconds: their reads
    and its skill walk shared the same four threads."""
    home = tmp_path / "home"
    for n in range(5):
        written(home / "state" / "chat", f"k{n}", 0)
    # each transcript's read holds while the hang point exists (a long read, or a hung mount)
    with hang_point(tmp_path / "hang") as hang:
        d = make_wrapped("", home=home, env={"HARNESS_HANG_TRANSCRIPT_READ_WHILE": str(hang)})
        chats = [RawConn(d.socket) for _ in range(5)]  # a chat.open holds its connection's next frames
        try:
            for n, conn in enumerate(chats):
                conn.hello()
                conn.send({"type": "chat.open", "id": n, "workspace": str(workspace), "conversation": f"k{n}"})
            reached(hang, "the transcripts' reads to hang")
            with RawConn(d.socket) as other:
                other.hello()
                opened = other.request({"type": "session.open", "workspace": str(workspace)})
            assert isinstance(opened, p.SessionOpened), opened
            assert select.select([c.sock for c in chats], [], [], 0)[0] == []  # before any chat.open ended
            hang.unlink()
            answers = [conn.frame() for conn in chats]
        finally:
            for conn in chats:
                conn.close()
    assert [type(a) for a in answers] == [p.ChatOpened] * 5, answers


def test_a_chat_open_whose_client_hung_up_lets_go_of_its_conversation(make_wrapped, tmp_path, workspace):
    """A chat.open whose client left replayed its whole transcript on (seconds for a long one), the
    conversation "open in another session" all that while."""
    home = tmp_path / "home"
    long_transcript(home / "state" / "chat" / "klong.jsonl", workspace, TURNS)
    with hang_point(tmp_path / "hang") as hang:
        d = make_wrapped("", home=home, env={"HARNESS_HANG_TRANSCRIPT_READ_WHILE": str(hang)})
        with RawConn(d.socket) as left:
            left.hello()
            left.send({"type": "chat.open", "id": 1, "workspace": str(workspace), "conversation": "klong"})
            reached(hang, "the transcript's read to hang")
        hang.unlink()
        wait_until(lambda: "chat.open of conversation klong ended: its client hung up" in d.log(),
                   what="the chat.open to stop after its read")
    # its 30 MB read back again: past a raw connection's 10 s on a loaded machine, and not the subject
    with RawConn(d.socket, timeout=60) as again:
        again.hello()
        answer = again.request({"type": "chat.open", "workspace": str(workspace), "conversation": "klong",
                                "provider": "codex"})
    assert isinstance(answer, p.ChatOpened) and answer.resumed, answer
