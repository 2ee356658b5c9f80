"""`scvctl chat` (a terminal chat, the reference bridge) and `scvctl exec` (one headless turn).

Both use only the public client library and the chat frames: whatever they do,
a bridge can do. `chat` streams the answer, asks approvals, store_secret's
values (masked) and the model's questions inline, and turns Ctrl-C into `turn.cancel`; with its input
piped in it exits 1 when a turn failed. A line that is one `/word` alone is a command of `chat`'s own
(COMMANDS), an unknown one refused here: it never becomes a turn the person pays for. `exec` prints the answer
on stdout and exits 1 when the turn fails; `--yes` makes it approve its own turn's calls (the person who
ran it is the approver). A turn scvd's stop cut off did not fail: both exit 3, saying to run it again.
"""

from __future__ import annotations

import argparse
import re
import sys
from typing import Any, Callable

from scvd import errors, protocol as p
from scvd.text import printable

from . import usage
from .client import stopped
from .cli import EXIT_ERROR, EXIT_OK
from .commands import connect, emit_json
from .prompts import drop_typed_ahead, end_prompt_line
from .watch import ask_request, decide, on_secret

END = (p.TurnCompleted, p.TurnCancelled, p.TurnFailed)
HEADLESS_ANSWER = "(no answer: scvctl exec runs without a person at the terminal; go on without one)"
DECLINED_ANSWER = "(no answer: the person declined to answer (Ctrl-D); go on without one)"

# `chat`'s own commands, each a line alone; parser.py's help for `chat` names them (tests hold it to this)
COMMANDS = {"/help": "this list", "/clear": "forget the conversation's history (what you approved for the "
            "session stays approved)", "/exit": "leave (so does Ctrl-D)", "/quit": "leave, as /exit does"}
# a command is a slash and one word, alone on its line: `/etc/hosts`, `/tmp what is in it?` are prompts
SLASH_WORD = re.compile(r"/[A-Za-z][A-Za-z0-9_-]*")
LINE_RULE = "a line that is one /word alone is a command; any other line goes to the model (/etc/hosts too)"


def _open(c: Any, args: argparse.Namespace, **fields: Any) -> p.ChatOpened:
    if args.provider:
        fields["provider"] = args.provider
    return c.request(p.ChatOpen, workspace=str(usage.workspace(args.workspace)), **fields)


def follow(c: Any, session: str, turn: str, on_event: Callable[[Any], None]) -> tuple[Any, bool]:
    """Hand each event of the turn to `on_event` until its end; Ctrl-C cancels the turn once, also
    at a prompt that `on_event` shows (an approval, a question, a secret). The end event, and
    whether Ctrl-C came."""
    cancelled = False
    while True:
        event = None
        try:
            event = c.next_event()
            on_event(event)
        except KeyboardInterrupt:
            if cancelled:
                raise
            cancelled = True
            print(flush=True)  # off the prompt's line
            if not (isinstance(event, END) and event.turn == turn):  # else it ended already
                try:
                    c.request(p.TurnCancel, session=session, turn=turn)
                except errors.InvalidRequest:  # it ended while the prompt waited: its end event follows
                    pass
                continue
        if isinstance(event, END) and event.turn == turn:
            return event, cancelled


# --- exec -------------------------------------------------------------------------------


def cmd_exec(args: argparse.Namespace) -> int:
    # nobody types here: store_secret asks `scvctl approvals watch`, or fails at once naming the ways out
    with connect(args, approver=args.yes, timeout=None, answers_secrets=False) as c:
        chat = _open(c, args)
        turn = _start(c, chat.session, args.prompt)
        state: dict[str, Any] = {"text": "", "calls": []}
        end, interrupted = follow(c, chat.session, turn, lambda e: _exec_event(c, args, chat.session, e, state))
    if args.json:
        emit_json(_exec_summary(chat, end, state))
    elif isinstance(end, p.TurnCompleted):
        sys.stdout.write("\n" if state["text"] and not state["text"].endswith("\n") else "")
    if not args.json:
        _print_warning(end)
    gone = _scvd_stopped(end)
    if gone is not None:
        if not args.json:
            print(file=sys.stderr)  # off the answer's line, as a failed turn's reason is
        raise gone
    if not args.json and not isinstance(end, p.TurnCompleted):
        _print_end(end)
    if interrupted and isinstance(end, p.TurnCancelled):
        return 130  # as a shell reports an interrupted command, as `scvctl call` does
    return EXIT_OK if isinstance(end, p.TurnCompleted) else EXIT_ERROR


def _start(c: Any, session: str, text: str, resume: str = "") -> str:
    """The turn's id; a turn.start scvd refused as it stops is said as "run it again" (exit 3)."""
    try:
        return c.request(p.TurnStart, session=session, text=text).turn
    except errors.Unavailable as exc:
        if exc.reason == errors.STOP_REASON:
            raise stopped("the turn started", errors.STOPPING + resume) from None
        raise


def _scvd_stopped(end: Any, resume: str = "") -> errors.DaemonNotAnswering | None:
    """A turn scvd's stop cut off did not fail: said as "run it again" (exit 3), as a call scvd
    cancelled as it stopped is (cli.py)."""
    if isinstance(end, p.TurnFailed) and end.reason == "cancelled_by_shutdown":
        return stopped(f"turn {end.turn} was done", end.message + resume)
    return None


def _exec_event(c: Any, args: argparse.Namespace, session: str, event: Any, state: dict[str, Any]) -> None:
    if isinstance(event, p.AssistantDelta) and not args.json:
        if state.pop("replied", False) and state["text"] and not state["text"].endswith("\n"):
            sys.stdout.write("\n")  # a reply before tool calls ("Let me look.") is not glued to the next
        sys.stdout.write(printable(event.text))  # the model's text may come from anything it read
        sys.stdout.flush()
    elif isinstance(event, p.AssistantCompleted):
        state["text"], state["replied"] = event.text, True
    elif isinstance(event, p.ApprovalRequested) and event.session == session and args.yes:
        _exec_decide(c, event)
    elif isinstance(event, p.QuestionAsked):
        try:
            c.request(p.QuestionAnswer, session=session, question_id=event.question_id, answer=HEADLESS_ANSWER)
        except errors.InvalidRequest:  # the turn ended (cancelled, failed) first: its end event follows
            print(f"  question {event.question_id} was no longer open", file=sys.stderr, flush=True)
    elif isinstance(event, p.CallCompleted):
        state["calls"].append({"call_id": event.call_id, "ok": event.ok,
                               **({"error": event.error} if event.error else {})})
        if not event.ok and not args.json:
            print(f"[{event.call_id}] {event.error.kind}: {printable(event.error.message)}", file=sys.stderr)


def _exec_decide(c: Any, event: p.ApprovalRequested) -> None:
    # a person at `scvctl approvals watch` may decide first: that is no reason to end exec (and with
    # it, by its connection closing, the turn)
    try:
        if event.always_ask:  # no grant covers it, and --yes is no person looking at it
            c.request(p.ApprovalDecide, approval_id=event.approval_id, decision="deny", reason=(
                f"scvctl exec --yes approves ordinary requests only; this one always asks a person "
                f"({event.always_ask}): run exec without --yes while `scvctl approvals watch` runs"))
        else:
            c.request(p.ApprovalDecide, approval_id=event.approval_id, decision="approve")
    except errors.ApprovalNotFound as exc:  # decided elsewhere, or withdrawn: scvd says which
        print(printable(f"  {exc.message}", keep=""), file=sys.stderr, flush=True)


def _exec_summary(chat: p.ChatOpened, end: Any, state: dict[str, Any]) -> dict[str, Any]:
    status = {p.TurnCompleted: "completed", p.TurnCancelled: "cancelled"}.get(type(end), "failed")
    summary: dict[str, Any] = {"conversation": chat.conversation, "session": chat.session, "turn": end.turn,
                               "status": status, "text": state["text"], "calls": state["calls"]}
    if isinstance(end, p.TurnCompleted):
        summary["usage"] = end.usage
    if isinstance(end, p.TurnFailed):
        summary.update(reason=end.reason, message=end.message, hint=end.hint)
    if end.warning:
        summary["warning"] = end.warning
    return summary


def _print_warning(end: Any) -> None:
    """What scvd could not keep of the turn (its transcript write failed): the answer came, but a
    resumed conversation may lack it."""
    if end.warning:
        print(f"\nwarning: {printable(end.warning)}", file=sys.stderr, flush=True)


def _print_end(end: Any) -> None:
    if isinstance(end, p.TurnFailed):
        print(f"\nturn failed ({end.reason}): {printable(end.message)}", file=sys.stderr)
        if end.hint:
            print(f"hint: {printable(end.hint)}", file=sys.stderr)
    elif isinstance(end, p.TurnCancelled):
        print("\n(turn cancelled)", file=sys.stderr)


# --- chat -------------------------------------------------------------------------------


def cmd_chat(args: argparse.Namespace) -> int:
    """Exit 0 at the input's end or /exit; with its input piped in, 1 when a turn failed there, or a
    line was an unknown command (a script reads success from it, as from exec), while a person at a
    terminal goes on as before."""
    scripted = not sys.stdin.isatty()
    failed = False
    with connect(args, approver=True, timeout=None) as c:
        fields = {"conversation": args.conversation} if args.conversation else {}
        chat = _open(c, args, **fields)
        verb = "resumed" if chat.resumed else "started"
        print(f"{verb} conversation {chat.conversation} with {chat.provider} in {chat.workspace}\n"
              f"(resume it with --conversation {chat.conversation}; /help lists the commands, /clear forgets, "
              "/exit leaves, Ctrl-C stops a turn)", flush=True)
        if chat.notice:
            print(f"warning: {printable(chat.notice)}", flush=True)
        while True:
            text = _prompt()
            word = None if text is None else command(text)
            if text is None or word in ("/exit", "/quit"):
                return EXIT_ERROR if scripted and failed else EXIT_OK
            if word is not None:
                failed = not _run_command(c, chat.session, word) or failed
            elif text.strip():
                failed = not _chat_turn(c, chat.session, chat.conversation, text) or failed


def command(text: str) -> str | None:
    """The command a line is (a `/word` alone on it, spaces around it aside), or None: a prompt."""
    line = text.strip()
    return line if SLASH_WORD.fullmatch(line) else None


def _run_command(c: Any, session: str, word: str) -> bool:
    """Run one of `chat`'s commands but a leaving one; False for an unknown `/word`, which is refused
    here, never sent to the model as a prompt."""
    if word == "/clear":
        c.request(p.ChatClear, session=session)
        print("(history cleared)", flush=True)
    elif word == "/help":
        print("commands, each on a line alone:", flush=True)
        for name, what in COMMANDS.items():
            print(f"  {name:<7}{what}", flush=True)
        print(f"{LINE_RULE}; Ctrl-C stops a running turn", flush=True)
    else:
        print(f"unknown command {word}: nothing was sent to the model; the commands are "
              f"{', '.join(COMMANDS)} ({LINE_RULE})", file=sys.stderr, flush=True)
        return False
    return True


def _prompt() -> str | None:
    while True:
        try:
            sys.stdout.write("you> ")
            sys.stdout.flush()
            line = sys.stdin.readline()
        except KeyboardInterrupt:
            print("\n(no turn is running; /exit leaves)", flush=True)
            continue
        end_prompt_line(_echo(line))  # piped in: `you> LINE`, and `model> ` on the next line
        return line.rstrip("\n") if line else None


def _echo(line: str) -> str:
    """A line read from a pipe as shown after its prompt: one line, escaped (it may come from any file)."""
    return printable(line.rstrip("\r\n"), keep="")


def _chat_turn(c: Any, session: str, conversation: str, text: str) -> bool:
    """Run one turn; False when it failed: refused, turn.failed, or cancelled by another than this
    person's Ctrl-C (as `exec` takes them)."""
    resume = f"; resume the conversation with --conversation {conversation}"
    try:
        turn = _start(c, session, text, resume)
    except errors.InvalidRequest as exc:
        print(printable(errors.shown(exc)), flush=True)
        return False
    sys.stdout.write("model> ")
    sys.stdout.flush()
    end, interrupted = follow(c, session, turn, lambda e: _chat_event(c, session, e))
    gone = _scvd_stopped(end, resume)
    if isinstance(end, p.TurnCompleted) or gone is not None:
        print(flush=True)  # off the answer's line
    _print_warning(end)
    if gone is not None:
        raise gone
    if not isinstance(end, p.TurnCompleted):
        _print_end(end)
    return isinstance(end, p.TurnCompleted) or (interrupted and isinstance(end, p.TurnCancelled))


def _chat_event(c: Any, session: str, event: Any) -> None:
    if isinstance(event, p.AssistantDelta):
        # escaped: a model that read a hostile file could otherwise hide the approval printed next
        sys.stdout.write(printable(event.text))
        sys.stdout.flush()
    elif isinstance(event, p.ApprovalRequested) and event.session == session:
        print(flush=True)
        decide(c, event, ask_request(event) or "n")  # Ctrl-D at the prompt: no
    elif isinstance(event, p.SecretRequested) and event.session == session:
        print(flush=True)
        on_secret(c, event)  # masked, as `scvctl approvals watch` asks
    elif isinstance(event, p.QuestionAsked):
        print(f"\nquestion: {printable(event.question)}", flush=True)
        drop_typed_ahead()  # a line typed during the turn (a `y` meant for an approval) is no answer to it
        sys.stdout.write("answer> ")
        sys.stdout.flush()
        line = sys.stdin.readline()
        answer = line.rstrip("\n")
        if line:
            end_prompt_line(_echo(line))
        else:  # Ctrl-D (or the input's end): no answer, not an empty one the model would act on
            answer = DECLINED_ANSWER
            print("(declined)", flush=True)
        try:
            c.request(p.QuestionAnswer, session=session, question_id=event.question_id, answer=answer)
        except errors.InvalidRequest:  # the turn ended (timed out, cancelled) while the person typed
            print(f"  question {event.question_id} was no longer open", flush=True)
    elif isinstance(event, p.CallStarted):
        print(f"\n  [{event.tool}] running", flush=True)
    elif isinstance(event, p.CallCompleted):
        status = "ok" if event.ok else f"{event.error.kind}: {printable(event.error.message)}"
        print(f"  [{event.call_id}] {status}", flush=True)
