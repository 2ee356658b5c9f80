"""The turn engine: model replies and tool results in, the next actions out. No I/O.

A `Conversation` is the state across turns (history, loaded schemas); a `Turn`
drives one turn of it. The caller (service.py) performs the actions and feeds
back what happened:

    turn.said(text)               -> the text is in the history (before the provider is set up: a
                                     turn that fails for want of one keeps it)
    turn.ask(reply_tokens)        -> [CallModel] | [Fail]: the first request, keeping room for a reply
                                     of reply_tokens (the provider's max_output_tokens, 0: none set)
    turn.on_reply(text, calls, u) -> [RunTool..., AskUser...] | [CallModel] | [Finish] | [Fail]
    turn.on_result(call_id, ...)  -> [] until the step's last result, then [CallModel] | [Fail]
    turn.on_answer(call_id, text) -> the same as on_result
    turn.late_result(call_id, ...) -> a call's outcome that came once the turn was cut short (cancel
                                     or stopped follows): kept as its output, no next request
    turn.late_answer(call_id, text) -> the same for an answer to ask_user not read before the cut
    turn.cancel(reason)           -> the turn ends; unanswered calls get a cancelled output, and a
                                     note says it was cancelled (the model reads it next turn)
    turn.stopped()                -> [Fail]: the same for scvd's own stop (cancelled_by_shutdown)

Rules:
- Each output is a record as soon as it is in (service.py writes it then: a crash or SIGKILL keeps
  the calls that completed, and only the open ones are cancelled at the replay), but a step's
  outputs join the history together, in the order of the calls, once the last one is in, so a
  call and its output are never apart in the history; a replay puts them in that order too.
- At most `max_calls` calls of one reply are made (chat.max_calls_per_step); the rest are answered
  here, not run, telling the model to make fewer calls per step.
- find_tools, a call to a tool whose schema is not loaded, bad JSON arguments
  and tools outside the conversation's set are answered here, not run.
- A cancelled or stopped turn's note is a `ScvdNote`: the model reads it as user text, but it
  is not the person's message (history shows it as scvd's; trimming never keeps it as one).
  A turn a crash or SIGKILL cut off (no turn-end record) gets its note at the replay (an older
  one that an earlier build resumed without one, in its place: readback.py).
- A `background` tool's output is a placeholder; its result becomes a user-side
  note before the next request (of this turn, or the next turn). The note is a
  record when it arrives, so a conversation reopened (or replayed after a
  restart) still hands over the notes its model has not read.
- At most `max_steps` model requests per turn; then the turn fails (step_limit).
- Each request is trimmed to `context_tokens` less the room kept for the reply
  (`reply_tokens`, the provider's max_output_tokens) and a MARGIN for the estimate's
  error; if it cannot fit: context_limit.
- Loaded schemas past SCHEMA_LIMIT, or past a SCHEMA_SHARE of what a request may take, are
  unloaded before a request, least recently used (loaded, found again or called)
  first: a long chat that keeps loading tools would otherwise leave no room for
  its history. An unloaded tool is listed by name again; calling it loads it again.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import msgspec

from .. import lenient_json, tool_names
from .. import validation_text as vt
from ..config import MAX_CALLS_PER_STEP
from ..errors import UnknownTool
from ..protocol import surrogate_refusal
from ..text import json_bytes
from . import catalog as cat, trim as trim_mod
from .items import (HISTORY, AssistantReply, Cleared, ModelRequest, NoteArrived, Opened, Record, SchemasLoaded,
                    ScvdNote, ToolCall, ToolOutput, ToolSpec, TurnEnded, Usage, UserText)
from .readback import CANCELLED_NOTE, STOPPED_NOTE, Readback, killed, read_back

log = logging.getLogger("scvd.chat")

BACKGROUND_NOTE = "started in the background; its result will be handed to you when it arrives"
# the schemas a conversation keeps loaded: at most SCHEMA_LIMIT, taking at most 1/SCHEMA_SHARE of what a
# request may take (Turn.usable), but always the newest SCHEMA_KEEP (one search's), so a call just loaded can be made
SCHEMA_LIMIT = 32
SCHEMA_SHARE = 4
SCHEMA_KEEP = cat.SEARCH_LIMIT
# the share of chat.context_tokens kept free for the estimate's error (1/MARGIN): bytes / 4 undercounts
# code, whose punctuation and short names are tokens of their own, so a request made to fit the
# model's window to the token was still refused as longer than it
MARGIN = 10
KILLED_CALL = "scvd stopped before this call finished"
# a call whose arguments the next request has no room for (Turn._call_room) is not run, and its arguments
# are not kept: sent back to the model with the history, they failed the turn telling the person to
# ask for less; CALL_SHARE is the share of a request the model's own calls may fill before that names them
CALL_SHARE = 2
CALL_OVERHEAD = 50  # tokens of a reply's call besides its arguments (its id, name, framing)
DROPPED_ARGUMENTS = '{"dropped": "these arguments were too large to keep"}'
TOO_MANY_CALLS = ("this call was not run: one step may make at most {cap} tool calls (chat.max_calls_per_step) and "
                  "this reply made {made}; make the ones still needed again, fewer per step")


def _names(catalog: cat.Catalog, include_system: bool) -> list[str]:
    """The conversation's tool names, sorted (tool_names folds and cuts them)."""
    return sorted(e.name for e in catalog.entries.values() if include_system or not e.system_use)


# --- actions --------------------------------------------------------------------------


@dataclass
class CallModel:
    request: ModelRequest


@dataclass
class RunTool:
    call: ToolCall
    arguments: dict[str, Any]
    background: bool = False  # its result goes to Conversation.background_result, not on_result


@dataclass
class AskUser:
    call_id: str
    question: str


@dataclass
class Finish:
    text: str
    usage: dict[str, int]


@dataclass
class Fail:
    reason: str  # provider_error | auth | step_limit | context_limit | cancelled_by_shutdown
    message: str
    hint: str | None = None


# --- state ------------------------------------------------------------------------------


@dataclass
class Conversation:
    """A conversation's history and loaded schemas; `records` collects what to append to disk."""

    settings: Opened
    history: list[Any] = field(default_factory=list)
    loaded: dict[str, None] = field(default_factory=dict)  # least recently used first
    notes: list[NoteArrived] = field(default_factory=list)  # background results not yet in history
    records: list[Record] = field(default_factory=list)
    cleared: int = 0  # chat.clear's count while open: a background call started before one answers no one
    sizes: trim_mod.Sizes = field(default_factory=trim_mod.Sizes)  # the history's estimates, made once each

    @classmethod
    def replay(cls, records: list[Any], settings: Opened | None = None) -> Conversation:
        """Rebuild from a transcript; a call left without output (a crash) gets a cancelled one, and a
        last turn left without its end gets KILLED_NOTE and an end (both in `records`, to write back).
        `settings` stand in when no `open` record is readable (its write failed or was torn)."""
        return cls.from_back(read_back(records), settings)

    @classmethod
    def from_back(cls, back: Readback, settings: Opened | None = None) -> Conversation:
        """replay() of a transcript read back already (chat.open's pages come from the same walk)."""
        opened = back.opened or settings
        if opened is None:
            raise ValueError("transcript has no `open` record")
        conv = cls(settings=opened)
        for rec in back.records:  # those since the last clear
            if isinstance(rec, SchemasLoaded):
                conv.touch(rec.names)
            elif isinstance(rec, NoteArrived):
                conv.notes.append(rec)
            elif isinstance(rec, HISTORY):
                conv.history.append(rec)
                if isinstance(rec, AssistantReply):  # its calls used their schemas: the order of use again
                    conv.used(rec.calls)
                if isinstance(rec, UserText) and rec.note:  # that note was handed over
                    conv.notes = [n for n in conv.notes if n.call_id != rec.note]
        conv.history = paired(conv.history, "its output was not written to the transcript (a write failed)")
        conv.close_open_calls(KILLED_CALL, back.cut)
        for rec in killed(back.cut) if back.cut else []:  # written back: the next replay finds it ended
            conv.append(rec)
        return conv

    def append(self, record: Record) -> None:
        if isinstance(record, HISTORY):
            self.history.append(record)
        self.records.append(record)

    def take_records(self) -> list[Record]:
        taken, self.records = self.records, []
        return taken

    def load(self, names: list[str]) -> None:
        """Load (or, found again, mark as just used) these schemas; the record keeps the order of use
        for a replay, which unloads the same ones again at its first request."""
        if names and list(self.loaded)[-len(names):] != names:
            self.touch(names)
            self.append(SchemasLoaded(names=names))

    def touch(self, names: list[str]) -> None:
        """These schemas are loaded and the most recently used, in this order."""
        for name in names:
            self.loaded.pop(name, None)
            self.loaded[name] = None

    def used(self, calls: list[ToolCall]) -> None:
        """A reply's calls of loaded tools: the most recently used, before any call loads another (as a
        replay reads them: the reply's record comes before its SchemasLoaded)."""
        self.touch([c.name for c in calls if c.name in self.loaded])

    def unload(self, limit: int, sizes: dict[str, int]) -> list[str]:
        """Unload the least recently used schemas until at most SCHEMA_LIMIT are left and their `sizes`
        fit in `limit` tokens, keeping the newest SCHEMA_KEEP; the names unloaded."""
        total, left, gone = sum(sizes.get(n, 0) for n in self.loaded), len(self.loaded), []
        for name in self.loaded:
            if left <= SCHEMA_KEEP or (left <= SCHEMA_LIMIT and total <= limit):
                break
            gone.append(name)
            total, left = total - sizes.get(name, 0), left - 1
        for name in gone:
            del self.loaded[name]
        return gone

    def clear(self) -> None:
        self.history, self.loaded, self.notes, self.sizes = [], {}, [], trim_mod.Sizes()
        self.cleared += 1
        self.records.append(Cleared())

    def background_result(self, call: ToolCall, output: str) -> None:
        """A background call finished: the model reads it before its next request (kept on disk till then)."""
        note = NoteArrived(call_id=call.call_id,
                           text=f"[result of background call {call.call_id} ({call.name})]: {output}")
        self.notes.append(note)
        self.records.append(note)

    def flush_notes(self, turn: str) -> None:
        for note in self.notes:
            self.append(UserText(text=note.text, turn=turn, note=note.call_id))
        self.notes = []

    def close_open_calls(self, why: str, turn: str = "") -> None:
        """Give the last reply's calls without an output a cancelled one (a record to write), so the
        history stays well-formed: its outputs, in the order of its calls.

        A step's outputs follow its reply, so only the last reply can lack them.
        """
        last = next((i for i in range(len(self.history) - 1, -1, -1)
                     if isinstance(self.history[i], AssistantReply)), None)
        if last is None:
            return
        tail = self.history[last + 1:]
        outputs = {i.call_id: i for i in tail if isinstance(i, ToolOutput)}
        calls = {c.call_id: c for c in self.history[last].calls}
        missing = [ToolOutput(call_id=c.call_id, name=c.name, output=error_output("cancelled", why), turn=turn)
                   for c in calls.values() if c.call_id not in outputs]
        if not missing:
            return
        self.records += missing
        outputs.update((o.call_id, o) for o in missing)
        self.history[last + 1:] = [outputs[i] for i in calls] + [i for i in tail if not isinstance(i, ToolOutput)]

    def answered(self, output: ToolOutput) -> None:
        """A call's output: a record at once, so a crash keeps it; the history takes it with its
        step's others (settle)."""
        self.records.append(output)

    def settle(self, outputs: list[ToolOutput]) -> None:
        """A step's outputs, recorded already (answered), join the history in the order of its calls."""
        self.history += outputs


def paired(history: list[Any], why: str) -> list[Any]:
    """`history` with every call's output right after its reply, in the order of its calls (they are
    written as they complete), as every API wants it: an output whose call is not the reply's just
    before is dropped, a call left without one before the next message gets a cancelled one (a
    transcript write lost records: a full disk). The last reply's open calls are close_open_calls'
    (they are written back)."""
    out: list[Any] = []
    calls: dict[str, ToolCall] = {}  # of the reply whose outputs come
    outputs: dict[str, ToolOutput] = {}
    turn = ""  # that reply's

    def close(last: bool) -> None:
        for c in calls.values():
            if c.call_id in outputs:
                out.append(outputs[c.call_id])
            elif not last:
                out.append(ToolOutput(call_id=c.call_id, name=c.name, output=error_output("cancelled", why), turn=turn))

    for item in history:
        if isinstance(item, ToolOutput):
            if item.call_id not in calls or item.call_id in outputs:
                log.warning("transcript: output of call %s has no call before it; left out", item.call_id)
            else:
                outputs[item.call_id] = item
            continue
        close(False)
        calls = {c.call_id: c for c in item.calls} if isinstance(item, AssistantReply) else {}
        outputs, turn = {}, getattr(item, "turn", "")
        out.append(item)
    close(True)
    return out


def _result_output(result: Any, error: Any) -> str:
    """A run call's output: its error (a ToolErrorInfo), else its result."""
    if error is not None:
        return error_output(error.kind, error.message, getattr(error, "hint", None))
    return ok_output(result)


def ok_output(result: Any) -> str:
    return json_bytes(msgspec.json.encode, {"ok": True, "result": result}).decode()


def error_output(kind: str, message: str, hint: str | None = None) -> str:
    error = {"kind": kind, "message": message, **({"hint": hint} if hint else {})}
    return json_bytes(msgspec.json.encode, {"ok": False, "error": error}).decode()


# --- one turn -----------------------------------------------------------------------------


class Turn:
    """One turn of a conversation; see the module docstring for the protocol."""

    def __init__(self, conv: Conversation, catalog: cat.Catalog, turn_id: str, *,
                 max_steps: int, context_tokens: int, max_calls: int = MAX_CALLS_PER_STEP) -> None:
        self.conv, self.catalog, self.id = conv, catalog, turn_id
        self.max_steps, self.context_tokens, self.max_calls = max_steps, context_tokens, max_calls
        self.reply_tokens = 0  # ask()'s: the provider's Settings say it, once they are resolved
        self.steps = 0
        self.usage = Usage()
        self.outputs: dict[str, ToolOutput | None] = {}  # this step's call_id -> output (None: waiting)
        self.calls: dict[str, ToolCall] = {}
        self.flushed = False  # this step's outputs are in the history
        self.done = False

    @property
    def usable(self) -> int:
        """What a request may take of the window: the reply and the margin are kept free."""
        return max(self.context_tokens - self.context_tokens // MARGIN - self.reply_tokens, 0)

    def said(self, text: str) -> None:
        self.conv.flush_notes(self.id)  # background results that came between turns came first
        self.conv.append(UserText(text=text, turn=self.id))

    def ask(self, reply_tokens: int = 0) -> list[Any]:
        self.reply_tokens = reply_tokens
        return self._next_request()

    def on_reply(self, text: str, calls: list[ToolCall], usage: Usage) -> list[Any]:
        self.usage = Usage(self.usage.input_tokens + usage.input_tokens,
                           self.usage.output_tokens + usage.output_tokens)
        room = self._call_room(text)
        large = {c.call_id: size for c in calls if (size := trim_mod.estimate(c.arguments)) > room}
        self.conv.append(AssistantReply(text=text, turn=self.id, calls=[
            ToolCall(c.call_id, c.name, DROPPED_ARGUMENTS) if c.call_id in large else c for c in calls]))
        if not calls:
            return self._end(Finish(text=text, usage=self.usage_dict()), "completed")
        self.outputs = {c.call_id: None for c in calls}
        self.calls = {c.call_id: c for c in calls}
        self.flushed = False
        self.conv.used(calls)
        actions: list[Any] = []
        for call in calls[:self.max_calls]:
            actions += self._too_large(call, large[call.call_id], room) if call.call_id in large else self._dispatch(call)
        excess = error_output("limit", TOO_MANY_CALLS.format(cap=self.max_calls, made=len(calls)))
        for call in calls[self.max_calls:]:
            self._local(call, excess)
        return actions + self._step_done()

    def on_result(self, call_id: str, ok: bool, result: Any = None, error: Any = None) -> list[Any]:
        return self._answer(call_id, _result_output(result, error))

    def late_result(self, call_id: str, ok: bool, result: Any = None, error: Any = None) -> None:
        """A call's outcome that came after the turn was cut short, before cancel() or stopped(): kept
        as its output in place of theirs, as a call too far along to stop (a write whose rename had
        begun) did its work, and the model must not take it for undone. The turn asks nothing more."""
        if not self.done and call_id in self.outputs and self.outputs[call_id] is None:
            self._keep(call_id, _result_output(result, error))

    def on_answer(self, call_id: str, answer: str) -> list[Any]:
        return self._answer(call_id, ok_output({"answer": answer}))

    def late_answer(self, call_id: str, answer: str) -> None:
        """An answer the person gave before the turn was cut short, read only after: kept as ask_user's
        output, as late_result keeps a call's (the person was told it was taken)."""
        self.late_result(call_id, True, {"answer": answer})

    def cancel(self, why: str) -> None:
        """The turn stops here (turn.cancel, its session closed): unanswered calls get a cancelled
        output, and the model reads CANCELLED_NOTE before the next turn's text."""
        self._stop(why, "cancelled", "", CANCELLED_NOTE)

    def fail(self, reason: str, message: str, hint: str | None = None) -> Fail:
        """The turn cannot go on (the provider failed, a limit): it ends with `reason`."""
        self._stop(message, "failed", reason)
        return Fail(reason, message, hint)

    def stopped(self) -> Fail:
        """scvd is stopping: the turn fails (cancelled_by_shutdown), and the model reads STOPPED_NOTE
        before the next turn's text, after the restart too."""
        message = "scvd stopped during the turn"
        self._stop(message, "failed", "cancelled_by_shutdown", STOPPED_NOTE)
        return Fail("cancelled_by_shutdown", message, "send the text again")

    def usage_dict(self) -> dict[str, int]:
        u = self.usage
        return {"input_tokens": u.input_tokens, "output_tokens": u.output_tokens,
                "total_tokens": u.input_tokens + u.output_tokens, "requests": self.steps}

    # --- internals ---------------------------------------------------------------------------

    def _dispatch(self, call: ToolCall) -> list[Any]:
        """What one requested call becomes: an action, or an answer given here at once."""
        if not call.name.strip():  # a server's fragment that never named its tool
            return self._local(call, error_output(
                "unknown_tool", "this call named no tool; call again with one of its names: "
                f"{tool_names.folded(_names(self.catalog, False))}"))
        try:
            args = lenient_json.loads(call.arguments or "{}", mend=False)  # NaN refused, as on the socket
        except (ValueError, RecursionError) as exc:
            return self._local(call, error_output(
                "invalid_arguments", f"arguments of {call.name} are not valid JSON ({exc}); got "
                f"{call.arguments[:200]!r}; send the call again with one JSON object"))
        if not isinstance(args, dict):
            return self._local(call, error_output(
                "invalid_arguments", f"arguments of {call.name} must be a JSON object; got {call.arguments[:200]!r}"))
        if refused := surrogate_refusal(args):  # as on the socket: read as U+FFFD, another file or other text
            return self._local(call, error_output(refused.kind, f"{call.name}: {refused.message}"))
        if call.name == cat.FIND_TOOLS:
            return self._find_tools(call, args)
        if call.name == cat.ASK_USER:
            try:
                question = msgspec.convert(args, cat.AskUserArgs).question
            except msgspec.ValidationError as exc:
                return self._local(call, error_output("invalid_arguments",
                                                      f"ask_user: {vt.arguments_message(exc, cat.AskUserArgs)}"))
            return [AskUser(call.call_id, question)]
        entry = self.catalog.entries.get(call.name)
        if entry is None:
            if (why := self.catalog.not_loaded(call.name)) is not None:  # as a call on the socket is told
                return self._local(call, error_output("unknown_tool", UnknownTool.not_loaded(call.name, why).message))
            return self._local(call, error_output(
                "unknown_tool", tool_names.unknown(call.name, _names(self.catalog, False), " in this conversation")))
        if call.name not in self.conv.loaded:
            self.conv.load([call.name])
            return self._local(call, ok_output({"schema_loaded": call.name,
                                                "note": "the schema is loaded now; call the tool again"}))
        if entry.background:
            self._local(call, ok_output({"background": True, "status": BACKGROUND_NOTE}))
        return [RunTool(call, args, entry.background)]

    def _too_large(self, call: ToolCall, size: int, room: int) -> list[Any]:
        return self._local(call, error_output(
            "limit", f"this call of {call.name} was not run: its arguments were about {size} tokens, more than the "
            f"{room} the next request to you has room for (chat.context_tokens, less the instructions, the tool "
            "schemas and this turn so far), so they were dropped; do the same in smaller calls (a long text in "
            "parts), or ask the person what to do"))

    def _call_room(self, text: str) -> int:
        """The most a call's arguments may take: what the next request has left beside this reply's text
        (a 45 KB write that fit a 32k window was refused as more than half of it), and never less than
        half of a request: this turn is counted whole, where a request blanks its older outputs (trim),
        so late in a long turn every call was refused."""
        specs = self.catalog.specs(self.conv.loaded)
        instructions = self.catalog.instructions(self.conv.settings.system_prompt, self.conv.loaded)
        history = self.conv.history
        turn = sum(self.conv.sizes.of(item) for item in history[trim_mod.last_user(history):])
        left = (self.usable - trim_mod.estimate(instructions) - sum(trim_mod.estimate(s) for s in specs) - turn
                - trim_mod.estimate(text) - CALL_OVERHEAD)
        return max(self.usable // CALL_SHARE, left)

    def _find_tools(self, call: ToolCall, args: dict[str, Any]) -> list[Any]:
        try:  # every argument is optional: null means its default, as for every tool's (Tool.decode)
            parsed = msgspec.convert({k: v for k, v in args.items() if v is not None}, cat.FindToolsArgs)
        except msgspec.ValidationError as exc:
            return self._local(call, error_output("invalid_arguments",
                                                  f"find_tools: {vt.arguments_message(exc, cat.FindToolsArgs)}"))
        found, load, more = self.catalog.find(parsed)
        self.conv.load(load)
        answer: dict[str, Any] = {"tools": found, "schemas_loaded": load}
        if more:
            answer["more"] = (f"{more} more tools match, not shown; narrow the query (words of the name or "
                              "purpose of the tool you need) to see them")
        if not found and parsed.query.strip():  # an empty list alone left the model to guess again blind
            answer["note"] = (f"no tool matches {parsed.query.strip()!r}; try other words (what the tool does, "
                              "or part of its name), or find_tools without a query to list every tool; the tools "
                              f"here: {tool_names.folded(_names(self.catalog, parsed.include_system))}")
        return self._local(call, ok_output(answer))

    def _local(self, call: ToolCall, output: str) -> list[Any]:
        self._keep(call.call_id, output)
        return []

    def _answer(self, call_id: str, output: str) -> list[Any]:
        if self.done or call_id not in self.outputs or self.outputs[call_id] is not None:  # not waited for (any more)
            return []
        self._keep(call_id, output)
        return self._step_done()

    def _keep(self, call_id: str, output: str) -> None:
        kept = ToolOutput(call_id=call_id, name=self.calls[call_id].name, output=output, turn=self.id)
        self.outputs[call_id] = kept
        self.conv.answered(kept)

    def _step_done(self) -> list[Any]:
        if any(o is None for o in self.outputs.values()):
            return []
        self._flush_outputs()
        return self._next_request()

    def _flush_outputs(self) -> None:
        if self.flushed or not self.outputs:
            return
        self.flushed = True
        self.conv.settle([o for o in self.outputs.values() if o is not None])  # in the calls' order: the dict's

    def _next_request(self) -> list[Any]:
        if self.steps >= self.max_steps:
            return [self.fail("step_limit", f"the model asked for tools after {self.steps} requests in one turn "
                              "(chat.max_steps); the turn stopped", "raise chat.max_steps or split the task")]
        self.conv.flush_notes(self.id)
        specs = self.catalog.specs(self.conv.loaded)
        sizes = {s.name: trim_mod.estimate(s) for s in specs}  # once each: unloading and the budget share them
        tools = self._unload_schemas(specs, sizes)
        instructions = self.catalog.instructions(self.conv.settings.system_prompt, self.conv.loaded)
        budget = self.usable - trim_mod.estimate(instructions) - sum(sizes[s.name] for s in tools)
        items = trim_mod.trim(self.conv.history, budget, self.conv.sizes)
        if items is None:
            return [self.fail("context_limit", *self._too_big(budget))]
        trim_mod.compact(self.conv.history, items, budget, self.conv.sizes)
        self.steps += 1
        return [CallModel(ModelRequest(instructions=instructions, items=items, tools=tools))]

    def _unload_schemas(self, tools: list[ToolSpec], sizes: dict[str, int]) -> list[ToolSpec]:
        """`tools` (catalog.specs, their estimates `sizes`) without the schemas unloaded now, least
        recently used first."""
        gone = self.conv.unload(self.usable // SCHEMA_SHARE, sizes)
        if not gone:
            return tools
        log.debug("chat: unloaded the schemas of %d tools used least recently: %s", len(gone), ", ".join(gone))
        return [s for s in tools if s.name not in gone]

    def _too_big(self, budget: int) -> tuple[str, str]:
        """What does not fit, and its fix: chat.clear only where it helps (it loses the history, while
        a message that is too long alone fits nowhere, and this turn's own steps go at the next)."""
        limit = f"chat.context_tokens ({self.context_tokens})"
        history = self.conv.history
        last = trim_mod.last_user(history)
        size = trim_mod.estimate(history[last]) if last < len(history) else 0
        if self.reply_tokens > self.context_tokens // 2:  # the reply's room leaves little for the request
            return (f"the provider's max_output_tokens ({self.reply_tokens}) keeps more than half of {limit} "
                    "free for the reply", "lower the provider's max_output_tokens, or raise chat.context_tokens")
        if budget < self.usable // 2:  # most of it went to the instructions and the loaded schemas
            said = (f"the instructions and the schemas of the {len(self.conv.loaded)} tools this conversation "
                    f"loaded take about {self.usable - budget} tokens of the {self.usable} {limit} leaves for a "
                    "request")
            if not self.conv.loaded:  # the instructions alone: chat.clear would change nothing
                return said, ("raise chat.context_tokens, or shorten the system prompt (chat.open's "
                              "system_prompt, or chat.system_prompt)")
            return said, "start afresh with chat.clear (it unloads the schemas), or raise chat.context_tokens"
        if size > budget:
            return (f"the message is about {size} tokens: more than the {budget} that {limit} leaves beside "
                    "the instructions, the tool schemas and the room kept for the reply",
                    "send a shorter message (a long text can go in a file of the workspace, for the model to "
                    "read in parts), or raise chat.context_tokens")
        replies = [i for i in history[last:] if isinstance(i, AssistantReply) and i.calls]
        largest = max(replies, key=self.conv.sizes.of, default=None)
        if largest is not None and self.conv.sizes.of(largest) > budget // CALL_SHARE:  # the model's own doing
            names = ", ".join(sorted({c.name for c in largest.calls}))
            return (f"the model's own reply calling {names} in this turn is about {self.conv.sizes.of(largest)} "
                    f"tokens (the calls' arguments): with the rest of the turn, more than {limit} lets a request hold",
                    "send the text again, asking for the work in smaller steps, or raise chat.context_tokens")
        return (f"this turn's requests grew past {limit} even after trimming",
                "ask for less at a time, or raise chat.context_tokens; the next turn has room again")

    def _stop(self, why: str, status: str, reason: str, note: str = "") -> None:
        if self.done:
            return
        for call_id, output in self.outputs.items():
            if output is None:
                self._keep(call_id, error_output("cancelled", why))
        self._flush_outputs()
        self.conv.close_open_calls(why, self.id)
        if note:
            self.conv.append(ScvdNote(text=note, turn=self.id))
        self.done = True
        self.conv.append(TurnEnded(turn=self.id, status=status, usage=self.usage_dict(), reason=reason))

    def _end(self, action: Any, status: str) -> list[Any]:
        self.done = True
        self.conv.append(TurnEnded(turn=self.id, status=status, usage=self.usage_dict()))
        return [action]
