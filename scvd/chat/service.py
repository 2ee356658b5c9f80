"""The daemon side of chat: conversations on sessions, turns as tasks, tool calls through the pipeline.

The server hands chat frames here and knows nothing else of chat. A turn is one
task that performs the engine's actions: it streams the model's reply (deltas go
out as `assistant.delta`), submits tool calls to the same pipeline as socket
calls (lint-checked tools, the approval gate, dispatch timeouts, cancellation;
the call's `turn` is the turn id), asks questions, and sends exactly one of
turn.completed / turn.cancelled / turn.failed. Every record the engine appends
goes to the transcript before the turn's events say it ended.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import secrets
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import msgspec

from .. import errors, protocol as p
from ..secrets import off_loop
from ..text import well_formed
from ..workers import run_transcript
from . import provider as provider_mod, trim as trim_mod
from .catalog import Catalog
from .engine import AskUser, CallModel, Conversation, Fail, Finish, RunTool, Turn, error_output, ok_output
from .items import CallRequested, Cleared, Opened, ReplyDone, TextDelta, ToolCall, Unreadable, Usage
from .pages import Pages, older
from .pipeline import submit
from .readback import read_back
from .transcript import Transcripts, new_id

log = logging.getLogger("scvd.chat")

# how long a turn cut short waits, in all, for its calls to stop (a process's kill grace) before its
# end goes out; one bound from the cancel, whatever the calls do (protocol.md, "Chat turns")
CALLS_END_SECONDS = 10.0
REOPEN_WAIT_SECONDS = CALLS_END_SECONDS + 5  # a closed session's turn ends within this (its one wait)

CALLS_BETWEEN_YIELDS = 256  # of a reply's calls taken in before other clients get the loop again

# the output of a call still running when its turn, cut short, stopped waiting for it (CALLS_END_SECONDS)
NOT_STOPPED = ("the turn ended while this call was still running, and scvd stopped waiting for it: whether it "
               "did its work is unknown; check (e.g. read what it would change) before doing it again")

BACKGROUND_STOPPED = ("its chat session closed (the client disconnected, or scvd stopped) before the call "
                      "finished; call it again if its result is still needed")


@dataclass(eq=False)
class Chat:
    """One chat session: a conversation on a session, and its running turn."""

    session: Any
    conversation: str
    conv: Conversation
    provider: str
    turn: Turn | None = None
    task: asyncio.Task[Any] | None = None
    results: asyncio.Queue[tuple[str, str, Any]] = field(default_factory=asyncio.Queue)
    questions: dict[str, str] = field(default_factory=dict)  # question_id -> the engine's call id
    background: set[asyncio.Task[Any]] = field(default_factory=set)  # outlive their turn
    write_error: str = ""  # why the transcript's last write failed, while records wait in conv.records
    pages: Pages = field(default_factory=Pages)  # what chat.history shows, but conv.records[paged:]
    paged: int = 0  # of conv.records, those in `pages` already (a write failed: they wait for the next)


@dataclass
class Resumed:
    """A transcript read back for chat.open, off the loop."""

    conv: Conversation  # its settings are the latest stored, or a stand-in: chat.open sets them
    stored: Opened | None  # the latest settings stored
    pages: Pages
    notice: str | None  # what damaged lines lost


class ChatService:
    """Every open chat of the daemon, by session id."""

    def __init__(self, daemon: Any) -> None:
        self.daemon = daemon
        self.transcripts = Transcripts(daemon.paths.chat_dir)
        self.chats: dict[str, Chat] = {}
        self._opening: set[str] = set()  # conversations a chat.open is resuming, not yet in chats
        # conversations whose session closed while a turn or background call of theirs still ends:
        # it writes its last records (cancelled outputs, the turn's end) before they can be reopened
        self._ending: dict[str, set[asyncio.Task[Any]]] = {}
        self.stopping = False
        self._turns = itertools.count(1)
        self._closing: set[asyncio.Task[None]] = set()  # providers closing their connections
        # records a closed session could not write (a full disk): its conversation's next chat.open
        # in this daemon writes them first; scvd's stop tries once more, then logs them as lost
        self._unwritten: dict[str, list[Any]] = {}
        self._flushed = False
        self._reading = 0  # chat.open and chat.history reads of a transcript under way

    # --- requests -----------------------------------------------------------------------

    async def open(self, conn: Any, frame: p.ChatOpen) -> p.Frame:
        conversation = frame.conversation
        if conversation:
            await self.daemon.expiry.started()  # the start's pass may remove this transcript: it goes first
            if conversation in self._opening or any(c.conversation == conversation for c in self.chats.values()):
                raise errors.InvalidRequest(f"conversation {conversation!r} is open in another session; it opens "
                                            "here once that session is closed (by its client, or as its client "
                                            "disconnects): try again then")
            self._opening.add(conversation)  # before the first await: a chat.open racing this one is refused
        try:
            with self._reads():
                if conversation in self._ending:
                    await self._wait_ended(conversation)
                return await self._open(conn, frame)
        finally:
            self._opening.discard(conversation)  # opened (now in self.chats) or failed

    def busy(self) -> bool:
        """A turn runs or ends, or a transcript is read: no time to give the heap back (heap.WhenQuiet)."""
        return bool(self._reading or self._ending) or any(
            c.task is not None and not c.task.done() for c in self.chats.values())

    @contextlib.contextmanager
    def _reads(self) -> Iterator[None]:
        """A transcript read back: megabytes of a long conversation, freed once it is in memory."""
        self._reading += 1
        try:
            yield
        finally:
            self._reading -= 1
            self._quiet()

    def _quiet(self) -> None:
        """Chat work ended, freeing what it held: its pages go back once the daemon is quiet (heap.py),
        as a call's do; a bridge that only chats runs no call that would ask."""
        self.daemon.heap_trim.idle()

    def in_use(self) -> set[str]:
        """The conversations open, being opened, whose closed session's turn still ends, or whose
        records wait in memory for a write: kept by chat.transcript_days whatever their age (expiry.py)."""
        return ({c.conversation for c in self.chats.values()} | self._opening | set(self._ending)
                | set(self._unwritten))

    def waits(self, conversation: str) -> bool:
        """True while a chat.open resuming `conversation` would wait: for the start's expiry pass, or
        for the turn of its closed session to end."""
        return bool(conversation) and (not self.daemon.expiry.is_started() or conversation in self._ending)

    async def _open(self, conn: Any, frame: p.ChatOpen) -> p.Frame:
        config = self.daemon.config
        provider = frame.provider or None
        kept = self._unwritten.get(frame.conversation, [])
        resumed = await self._resume(frame.conversation, config.chat, kept, conn.hung_up())
        stored = resumed.stored if resumed else None
        name = provider or (stored.provider if stored else "") or config.chat.provider
        if name not in config.providers and name != provider_mod.CODEX:
            known = ", ".join(sorted(config.providers) + [provider_mod.CODEX])
            if not provider and stored and stored.provider == name:  # the conversation's own, renamed or removed since
                raise errors.InvalidRequest(
                    f"conversation {frame.conversation!r} used provider {name!r}, which is no longer configured "
                    f"(configured: {known}); resume it with another: send `provider` with chat.open")
            raise errors.InvalidRequest(f"no provider {name!r}; configured: {known} ([providers.NAME] in config.toml)")
        tools = frame.tools if frame.tools is not None else stored.tools if stored else "all"
        # only a list the client sends now: a stored one may name a tool not (yet) there, e.g. an MCP
        # server's while it starts; the catalog leaves such a name out until it is
        unknown = sorted(set(tools) - set(self.daemon.registry.names())) if frame.tools not in (None, "all") else []
        if unknown:  # why each is missing where scvd knows (an MCP server starting, down or disabled)
            registry = self.daemon.registry
            said = [f"{name} ({why})" if (why := self.daemon.not_loaded(name, registry)) else name for name in unknown]
            raise errors.InvalidRequest(f"chat.open tools: no tool named {'; '.join(said)}; "
                                        f"tools: {', '.join(registry.names())}; send only those (or \"all\"), "
                                        "or open again once the tool is there")
        opened = await self.daemon.on_session_open(conn, p.SessionOpen(id=frame.id, workspace=frame.workspace))
        session = conn.sessions[opened.session]
        settings = Opened(workspace=str(session.workspace), provider=name, tools=tools,
                          system_prompt=frame.system_prompt if frame.system_prompt is not None else
                          (stored.system_prompt if stored else config.chat.system_prompt))
        conversation = frame.conversation or new_id()
        if resumed and stored is None:
            log.warning("conversation %s has no readable open record; resuming it with this chat.open's settings",
                        frame.conversation)
        conv = resumed.conv if resumed else Conversation(settings=settings)
        conv.settings = settings
        conv.records[:0] = kept  # before what the replay ends (a cut turn): they came first
        if not resumed or settings != stored:
            conv.records.append(settings)
        chat = Chat(session=session, conversation=conversation, conv=conv, provider=name,
                    pages=resumed.pages if resumed else Pages(), paged=len(kept))  # kept: read back with the file
        self._unwritten.pop(conversation, None)  # in conv.records now; no session of it could add any since
        self.chats[session.id] = chat
        self._save(chat)
        return p.ChatOpened(id=frame.id, session=session.id, conversation=conversation,
                            workspace=str(session.workspace), provider=name, resumed=bool(resumed),
                            notice=resumed.notice if resumed else None)

    async def _resume(self, conversation: str, cfg: Any, kept: list[Any], gone: Callable[[], bool]) -> Resumed | None:
        """The conversation read back, or None for a new one: the read, its decoding and the replay
        take seconds for a long transcript, so they run on a worker, not on the loop every client shares."""
        if not conversation:
            return None
        return await run_transcript(lambda: _resumed(self.transcripts, conversation, cfg, kept, gone))

    async def start_turn(self, conn: Any, frame: p.TurnStart) -> p.Frame:
        chat = self._own(conn, frame.session)
        if chat.task is not None and not chat.task.done():
            raise errors.InvalidRequest(f"turn {chat.turn.id if chat.turn else '?'} is still running; "
                                        "wait for it or send turn.cancel")
        if self.stopping:
            # not Stopping (fatal): the connection's other turns are still ending, their events due
            raise errors.Unavailable(f"{errors.STOPPING}; no new turns are accepted: send it again once scvd is back",
                                     reason=errors.STOP_REASON)
        cfg = self.daemon.config.chat  # the daemon's now: a reload's chat.max_steps reaches open chats
        turn_id = f"t{next(self._turns)}-{secrets.token_hex(3)}"
        # the session's tools as they are now: an MCP server's come once it is up, a reload's or a
        # restarted server's change (its registry follows them), so each turn takes them afresh
        chat.turn = Turn(chat.conv, self._catalog(chat), turn_id, max_steps=cfg.max_steps,
                         context_tokens=cfg.context_tokens, max_calls=cfg.max_calls_per_step)
        chat.results = asyncio.Queue()
        chat.task = asyncio.ensure_future(self._run(chat, chat.turn, frame.text))
        return p.TurnAccepted(id=frame.id, turn=turn_id)

    def _catalog(self, chat: Chat) -> Catalog:
        return Catalog.from_registry(chat.session.registry, chat.conv.settings.tools,
                                     self.daemon.mcp.waiting_for_secrets(),
                                     lambda name: self.daemon.not_loaded(name, chat.session.registry))

    async def cancel_turn(self, conn: Any, frame: p.TurnCancel) -> p.Frame:
        chat = self._own(conn, frame.session)
        if chat.turn is None or chat.turn.id != frame.turn or chat.task is None or chat.task.done():
            raise errors.InvalidRequest(f"turn {frame.turn!r} is not running in session {frame.session}")
        if not chat.task.cancelling():  # a second one (a stop button pressed twice): the turn is ending already
            chat.task.cancel("turn.cancel")
        return p.Ok(id=frame.id)

    async def history(self, conn: Any, frame: p.ChatHistory) -> p.Frame:
        chat = self._own(conn, frame.session)
        # with the records still waiting for a write (a full disk): the model reads them too
        page = chat.pages.page(chat.conv.records[chat.paged:], frame.before, frame.limit)
        records = page.rows
        if page.older:  # before those kept in memory: the transcript has them, read back on a worker
            with self._reads():
                records = await run_transcript(lambda: older(self.transcripts, chat.conversation, page)) + records
        answer = p.ChatTranscript(id=frame.id, conversation=chat.conversation, start=page.start, more=page.start > 0,
                                  records=records)  # type: ignore[arg-type]  # each record's JSON, as it goes out
        self._check_fits(answer, conn.server_frame_bytes)
        return answer

    def _check_fits(self, answer: p.ChatTranscript, room: int) -> None:
        """A page one frame cannot carry is the asker's to shrink: `limit`, not `internal`."""
        size = len(p.encode(answer))
        if size <= room:
            return
        one = len(answer.records) == 1
        what = "one record alone makes" if one else f"{len(answer.records)} records make"
        fix = ("raise server.server_frame_bytes to read it" if one else
               "ask for fewer with a smaller `limit`, and page back with `before` set to each answer's `start`")
        raise errors.LimitExceeded(f"chat.history: {what} a {size:,}-byte answer, more than one frame carries "
                                   f"(server.server_frame_bytes = {room:,}); {fix}")

    async def clear(self, conn: Any, frame: p.ChatClear) -> p.Frame:
        chat = self._own(conn, frame.session)
        if chat.task is not None and not chat.task.done():
            raise errors.InvalidRequest("a turn is running; cancel it (turn.cancel) before chat.clear")
        chat.conv.clear()
        self._save(chat)
        return p.Ok(id=frame.id)

    async def answer(self, conn: Any, frame: p.QuestionAnswer) -> p.Frame:
        chat = self._own(conn, frame.session)
        call_id = chat.questions.pop(frame.question_id, None)
        if call_id is None:
            raise errors.InvalidRequest(f"no open question {frame.question_id!r} in session {frame.session}")
        chat.results.put_nowait(("answer", call_id, frame.answer))
        return p.Ok(id=frame.id)

    # --- lifecycle ------------------------------------------------------------------------

    def session_closed(self, session: Any) -> set[asyncio.Task[Any]]:
        """Cancel the chat's turn and background calls; returns those tasks (a turn's last event
        comes as it ends, which a half-closed client still waits for)."""
        chat = self.chats.pop(session.id, None)
        if chat is None:
            return set()
        running = {t for t in [chat.task, *chat.background] if t is not None and not t.done()}
        for task in running:
            task.cancel("session closed")
        if running:
            ending = self._ending.setdefault(chat.conversation, set())
            ending |= running
            for task in running:
                task.add_done_callback(lambda t, c=chat: self._ended(c, t))
        else:
            self._keep(chat)
            self._quiet()  # the conversation's history and pages go with it
        return running

    def _ended(self, chat: Chat, task: asyncio.Task[Any]) -> None:
        ending = self._ending.get(chat.conversation)
        if ending is not None:
            ending.discard(task)
            if not ending:
                del self._ending[chat.conversation]
                self._keep(chat)  # its last records are in
                self._quiet()

    def _keep(self, chat: Chat) -> None:
        """A closed session's records: written now if there is room again, else kept for the
        conversation's next chat.open in this daemon (or, after the stop's last try, lost: logged)."""
        self._save(chat)
        left = chat.conv.take_records()
        if not left:
            return
        if self._flushed:
            self._lost(chat.conversation, left, chat.write_error)
            return
        self._unwritten[chat.conversation] = left
        log.error("transcript of %s: %d record(s) still not written as its session closed; kept in memory "
                  "for its next chat.open while scvd runs (lost if scvd stops before there is room)",
                  chat.conversation, len(left))

    def flush(self) -> None:
        """scvd's stop, once the sessions closed: the last try to write what closed sessions kept."""
        self._flushed = True
        for conversation, records in self._unwritten.items():
            try:
                self.transcripts.append(conversation, records)
            except (OSError, errors.InternalError, errors.Failed) as exc:
                self._lost(conversation, records[exc.written if isinstance(exc, errors.BatchCut) else 0:], str(exc))
        self._unwritten.clear()

    def _lost(self, conversation: str, records: list[Any], why: str) -> None:
        log.error("transcript of %s: %d record(s) lost as scvd stops, never written (%s); the conversation "
                  "resumes without them", conversation, len(records), why)

    async def _wait_ended(self, conversation: str) -> None:
        """A chat.open of a conversation whose last session is still ending waits for its last
        records: two writers would put the old turn's after the new one's (an orphan tool output)."""
        _, left = await asyncio.wait(set(self._ending[conversation]), timeout=REOPEN_WAIT_SECONDS)
        if left:
            raise errors.InvalidRequest(
                f"conversation {conversation!r} is still ending the turn of its closed session "
                f"(its calls did not stop within {REOPEN_WAIT_SECONDS:g} s); try chat.open again later")

    def stop(self) -> list[asyncio.Task[Any]]:
        """Shutdown: cancel every running turn (they end with cancelled_by_shutdown)."""
        self.stopping = True
        tasks = [c.task for c in self.chats.values() if c.task is not None and not c.task.done()]
        for task in tasks:
            task.cancel("scvd is stopping")
        return tasks + list(self._closing)

    # --- one turn ---------------------------------------------------------------------------

    async def _run(self, chat: Chat, turn: Turn, text: str) -> None:
        self._event(chat, p.TurnStarted(seq=0, session=chat.session.id, turn=turn.id))
        calls: dict[str, asyncio.Task[Any]] = {}
        end: p.Frame
        model: Any = None
        cut: bool | None = None  # set when the turn is cancelled: True when scvd's stop did it
        try:
            turn.said(text)  # before the provider is set up: a turn that fails for want of one keeps it
            settings = await self._settings(chat)
            work = turn.ask(settings.max_output_tokens or 0)  # the reply's room: the provider's, as it sends it
            model = provider_mod.make(settings)
            end = await self._drive(chat, turn, model, work, calls)
        except provider_mod.ProviderFailure as exc:
            fail = turn.fail(exc.reason, exc.message, exc.hint)
            end = self._failed(chat, turn, fail)
        except asyncio.CancelledError:
            cut = self.stopping  # as the cancel came; the turn ends once its calls have (below)
        except Exception:  # a bug must still end the turn, once
            log.exception("turn %s crashed", turn.id)
            end = self._failed(chat, turn, turn.fail("provider_error", "the turn failed inside scvd; see its log"))
        finally:
            for task in calls.values():
                task.cancel("the turn ended")
            chat.questions.clear()
        await self._calls_ended(turn.id, calls)
        if cut is not None:
            end = self._cut(chat, turn, calls, cut)
        self._save(chat)
        if chat.conv.records:  # acknowledged yet not on disk: the client hears it, not only the log
            end = msgspec.structs.replace(end, warning=self._unsaved(chat))
        self._event(chat, end)
        self._quiet()  # its requests' and replies' text
        if model is not None:  # after the end, in a task of its own: no turn.cancel can cut it short
            task = asyncio.ensure_future(_close(model))
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)

    async def _calls_ended(self, turn_id: str, calls: dict[str, asyncio.Task[Any]]) -> None:
        """Until the turn's cancelled calls completed, so that their call.completed come before the
        turn's end, as the protocol says, and the lane is free: their tasks (each cancels its call)
        and the calls themselves, in one wait of at most CALLS_END_SECONDS (a wait for the tasks, then
        another for the calls still running, made a call that ignored its cancel hold the end twice
        that). Its background calls go on: they outlive their turn."""
        running = [c.ending() for c in list(self.daemon.calls.table.values())
                   if c.turn == turn_id and not (c.tool and c.tool.flags.background)]
        if not (calls or running):
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + CALLS_END_SECONDS
        while (left := deadline - loop.time()) > 0:
            try:
                await asyncio.wait([*calls.values(), *running], timeout=left)
                return
            except asyncio.CancelledError:  # cancelled again: the end still goes out, once
                if self.stopping:  # scvd's stop cuts the wait short: its own grace bounds the calls
                    return
                # a second turn.cancel, or its session closed: the calls were cancelled already; their
                # call.completed still come before the turn's end, and the model reads how they ended
                current = asyncio.current_task()
                if current is not None:
                    current.uncancel()

    def _cut(self, chat: Chat, turn: Turn, calls: dict[str, asyncio.Task[Any]], stopping: bool) -> p.Frame:
        """The end of a turn cut short, once its calls ended (_calls_ended): each keeps the outcome it
        came to, which for one too far along to stop (a write whose rename had begun) is its result;
        the others get a cancelled output (Turn.cancel, Turn.stopped). An answer to its question
        that question.answer took (`ok`) but the turn had not read yet is ask_user's output: the
        person's words reach the model with the next turn, not nowhere."""
        while not chat.results.empty():
            kind, call_id, value = chat.results.get_nowait()
            if kind == "answer":  # a call's result: its task's, below
                turn.late_answer(call_id, value)
        for call_id, task in calls.items():  # those whose result _drive had not taken
            if not task.done():  # past the wait: its outcome is not known
                turn.late_result(call_id, False, error=_not_stopped())
            elif not task.cancelled() and task.exception() is None:
                turn.late_result(call_id, *task.result())
        if stopping:
            return self._failed(chat, turn, turn.stopped())
        turn.cancel("the turn was cancelled")
        return p.TurnCancelled(seq=0, session=chat.session.id, turn=turn.id, reason="cancelled")

    async def _drive(self, chat: Chat, turn: Turn, model: Any, work: list[Any],
                     calls: dict[str, asyncio.Task[Any]]) -> p.Frame:
        while True:
            while work:
                action = work.pop(0)
                if isinstance(action, CallModel):
                    work += await self._model_step(chat, turn, model, action)
                elif isinstance(action, RunTool) and action.background:
                    task = asyncio.ensure_future(self._tool(chat, turn, action))
                    chat.background.add(task)
                    task.add_done_callback(chat.background.discard)
                elif isinstance(action, RunTool):
                    calls[action.call.call_id] = asyncio.ensure_future(self._tool(chat, turn, action))
                elif isinstance(action, AskUser):
                    self._ask(chat, turn, action)
                elif isinstance(action, Finish):
                    return p.TurnCompleted(seq=0, session=chat.session.id, turn=turn.id, usage=action.usage)
                elif isinstance(action, Fail):
                    return self._failed(chat, turn, action)
            self._save(chat)
            kind, call_id, value = await chat.results.get()
            # the next request's tools as they are now: an MCP server that a store_secret of this
            # turn started lists its tools within it
            turn.catalog = self._catalog(chat)
            if kind == "answer":
                work += turn.on_answer(call_id, value)
            else:
                calls.pop(call_id, None)
                ok, result, error = value
                work += turn.on_result(call_id, ok, result, error)

    async def _model_step(self, chat: Chat, turn: Turn, model: Any, action: CallModel) -> list[Any]:
        self._save(chat)
        parts: list[str] = []
        calls: list[ToolCall] = []
        ids = _CallIds()
        usage = Usage()
        held = ""  # a delta's last character when it is the first half of a surrogate pair
        async for event in model.stream(action.request):
            if isinstance(event, TextDelta):
                shown, held = _whole(held + event.text)
                if shown:  # what went out is the reply: well-formed already, a split pair joined
                    parts.append(shown)
                    self._event(chat, p.AssistantDelta(seq=0, session=chat.session.id, turn=turn.id, text=shown))
            elif isinstance(event, CallRequested):
                calls.append(ids.own(event.call))
                if len(calls) % CALLS_BETWEEN_YIELDS == 0:  # a provider yields a reply's calls at its end, all at once
                    await asyncio.sleep(0)
            elif isinstance(event, ReplyDone):
                usage = event.usage
        if held:
            parts.append(well_formed(held))
            self._event(chat, p.AssistantDelta(seq=0, session=chat.session.id, turn=turn.id, text=parts[-1]))
        text = "".join(parts)
        if text or not calls:
            self._event(chat, p.AssistantCompleted(seq=0, session=chat.session.id, turn=turn.id, text=text))
        return turn.on_reply(text, calls, usage)

    async def _tool(self, chat: Chat, turn: Turn, action: RunTool) -> tuple[bool, Any, Any]:
        """Run one call; its outcome goes to the turn (chat.results) or, a background call's, to the
        conversation. Cancelled with its turn, the outcome it still comes to is the task's result."""
        since = chat.conv.cleared  # a background result goes to the conversation that asked, not past a clear
        try:
            outcome = await submit(self.daemon, chat.session, action.call.name, action.arguments, turn=turn.id,
                                   sent=action.call.arguments)
        except asyncio.CancelledError as exc:
            ending = getattr(exc, "ending", None)  # None: cancelled before the call was taken on
            if action.background:  # the model was promised this result: it, or that the call stopped
                ended = _ended(ending)  # it had finished as the session closed
                stopped = error_output("cancelled", BACKGROUND_STOPPED)
                self._note(chat, action.call, _output(ended) if ended else stopped, since)
            if action.background or ending is None:
                raise
            # the cancel may come too late to stop it: what it did is what the model must hear
            await asyncio.wait({ending}, timeout=CALLS_END_SECONDS)
            return _ended(ending) or (False, None, _not_stopped())
        except Exception as exc:  # a bug must still answer the call: the turn waits for every result
            log.exception("turn %s: call of %s crashed before its outcome", turn.id, action.call.name)
            outcome = (False, None, p.ToolErrorInfo(kind="failed", message=errors.public_message(exc)))
        if action.background:
            self._note(chat, action.call, _output(outcome), since)
        else:
            chat.results.put_nowait(("result", action.call.call_id, outcome))
        return outcome

    def _note(self, chat: Chat, call: ToolCall, output: str, since: int) -> None:
        if chat.conv.cleared != since:  # the model that asked went with the clear: nobody reads it
            log.info("background call %s (%s) of %s ended after chat.clear: its result is not handed to the "
                     "cleared conversation", call.call_id, call.name, chat.conversation)
            return
        chat.conv.background_result(call, output)
        self._save(chat)  # on disk at once: a reopened conversation still hands it over

    def _ask(self, chat: Chat, turn: Turn, action: AskUser) -> None:
        question_id = f"q{secrets.token_hex(4)}"
        chat.questions[question_id] = action.call_id
        self._event(chat, p.QuestionAsked(seq=0, session=chat.session.id, turn=turn.id,
                                          question_id=question_id, question=action.question))

    async def _settings(self, chat: Chat) -> provider_mod.Settings:
        # the daemon's configuration now, not the session's snapshot: a provider fixed in config.toml
        # and reloaded (its base_url, model, key) serves the open chat's next turn
        settings = await off_loop(  # the key may come from the keyring, which may hang; resolving reads files
            provider_mod.resolve, chat.provider, self.daemon.config, self.daemon.paths.adapters_dir,
            getattr(self.daemon, "secrets", None))
        # a wire API's first turn imports openai and builds its models: seconds that held every client
        await asyncio.to_thread(provider_mod.prepare, settings.wire_api)
        return settings

    # --- helpers ---------------------------------------------------------------------------

    def _failed(self, chat: Chat, turn: Turn, fail: Fail) -> p.Frame:
        log.info("turn %s failed (%s): %s", turn.id, fail.reason, fail.message)
        return p.TurnFailed(seq=0, session=chat.session.id, turn=turn.id, reason=fail.reason,
                            message=fail.message, hint=fail.hint)

    def _own(self, conn: Any, session_id: str) -> Chat:
        chat = self.chats.get(session_id)
        if chat is None or chat.session.owner is not conn:
            raise errors.SessionNotFound(f"this connection holds no chat session {session_id!r}; "
                                         "open one with chat.open")
        return chat

    def _event(self, chat: Chat, frame: p.Frame) -> None:
        self.daemon.send_event(chat.session.owner, frame)

    def _save(self, chat: Chat) -> None:
        records = chat.conv.take_records()
        chat.pages.add(records[chat.paged:])  # chat.history shows them, written or waiting for a write
        chat.paged = 0
        try:
            self.transcripts.append(chat.conversation, records)
        except (OSError, errors.InternalError, errors.Failed) as exc:  # a full disk, a symlink in the file's place:
            records = records[exc.written if isinstance(exc, errors.BatchCut) else 0:]  # not those already in the file
            chat.conv.records[:0] = records  # the turn goes on, and the next save writes them, in order
            chat.paged = len(records)
            chat.write_error = str(exc)
            log.error("transcript of %s not written (%d records kept for the next write): %s",
                      chat.conversation, len(records), exc)
        else:
            chat.write_error = ""

    def _unsaved(self, chat: Chat) -> str:
        return (f"the transcript of conversation {chat.conversation} could not be written ({chat.write_error}); "
                f"{len(chat.conv.records)} record(s) of it wait in scvd's memory and are written with the "
                "conversation's next write once there is room (free space where scvd keeps its state); "
                "if scvd stops before there is room, the conversation resumes without them")


async def _close(model: Any) -> None:
    """A turn's provider closes its connections once the turn ended; a failure is only logged."""
    try:
        await model.aclose()
    except Exception as exc:
        log.warning("closing the provider's connections failed: %s", exc)


def _resumed(transcripts: Transcripts, conversation: str, cfg: Any, kept: list[Any],
             gone: Callable[[], bool]) -> Resumed | None:
    """The transcript and the records `kept` in memory after it, read back once for both the model
    (the replay) and chat.history (its pages). None when there are none: `kept` waits in memory but
    no write ever succeeded (a conversation begun on a full disk has no file yet). Stops between its
    steps once `gone()` (the client hung up): the conversation is held open until this ends."""
    try:
        records = transcripts.read(conversation, cfg.transcript_days) + kept
    except errors.ConversationNotFound:
        if not kept:
            raise
        records = list(kept)
    if not records:  # an empty file: begun afresh, as a new one is
        return None
    _check_gone(gone, conversation)
    back = read_back(records)
    _check_gone(gone, conversation)
    # no readable `open` record: chat.open's own settings replace the stand-in
    conv = Conversation.from_back(back, back.opened or Opened(workspace=""))
    # no request takes more than chat.context_tokens: the model never reads what lies before that again
    # (the transcript and the pages keep it), and a long chat's history held hundreds of MB
    trim_mod.forget_front(conv.history, cfg.context_tokens, conv.sizes)
    return Resumed(conv=conv, stored=back.opened, pages=Pages(back.records), notice=_unreadable(records))


def _check_gone(gone: Callable[[], bool], conversation: str) -> None:
    if gone():
        log.info("chat.open of conversation %s ended: its client hung up while it was read back", conversation)
        raise errors.Cancelled("chat.open was cancelled: its client hung up while the conversation was being "
                               "read back; open it again")


def _unreadable(records: list[Any]) -> str | None:
    """What a resumed conversation lost to damaged transcript lines, for the person to hear; only
    those after its last clear: read_back drops what came before, so nothing was lost there."""
    start = max((i + 1 for i, r in enumerate(records) if isinstance(r, Cleared)), default=0)
    lost = [r for r in records[start:] if isinstance(r, Unreadable)]
    if not lost:
        return None
    groups = [([r.line for r in lost if r.newer == newer], said)
              for newer, said in ((False, "damaged"), (True, "written by a newer scvd"))]
    why = " and ".join(_lines(lines, said) for lines, said in groups if lines)
    return (f"{len(lost)} line(s) of this conversation's transcript could not be read back ({why}): what they "
            "said is missing, and the model and chat.history read a note in their place")


def _lines(lines: list[int], why: str) -> str:
    shown = ", ".join(map(str, lines[:5])) + (f" and {len(lines) - 5} more" if len(lines) > 5 else "")
    return f"line {shown}; {why}"


def _whole(text: str) -> tuple[str, str]:
    """(what can go out, a trailing high surrogate to hold back): a provider that splits its text by
    UTF-16 units (a JavaScript server) sends an emoji's halves in two deltas; made whole, the rest
    of a lone surrogate becomes U+FFFD."""
    if text and "\ud800" <= text[-1] <= "\udbff":
        return well_formed(text[:-1]), text[-1]
    return well_formed(text), ""


class _CallIds:
    """The ids of one reply's calls so far: each call gets valid text and an id of its own (of two
    calls with one id, a shim that numbers calls per message, the second's output would take the
    first's place). One set for the reply, and a number that only grows: a reply of thousands of
    calls took seconds on the loop when each rebuilt the set."""

    def __init__(self) -> None:
        self.taken: set[str] = set()
        self.n = 0  # past the ids given here

    def own(self, call: ToolCall) -> ToolCall:
        call = ToolCall(call_id=well_formed(call.call_id), name=well_formed(call.name),
                        arguments=well_formed(call.arguments))
        if not call.call_id or call.call_id in self.taken:
            self.n = max(self.n, len(self.taken))
            while f"call_{self.n}" in self.taken:
                self.n += 1
            call = ToolCall(call_id=f"call_{self.n}", name=call.name, arguments=call.arguments)
        self.taken.add(call.call_id)
        return call


def _ended(ending: asyncio.Future[Any] | None) -> tuple[bool, Any, Any] | None:
    """A call's outcome (submit's `ending`), if it has one yet."""
    if ending is None or not ending.done() or ending.cancelled() or ending.exception() is not None:
        return None
    return tuple(ending.result())  # type: ignore[return-value]


def _not_stopped() -> p.ToolErrorInfo:
    return p.ToolErrorInfo(kind="cancelled", message=NOT_STOPPED)


def _output(outcome: tuple[bool, Any, Any]) -> str:
    ok, result, error = outcome
    return ok_output(result) if ok else error_output(error.kind, error.message, error.hint)
