"""The `scvctl` command: status, sessions, approvals, one-off calls, chat and exec, agents and the service.

Exit codes: 0 success; 1 scvd answered with an error, or the call failed;
2 bad usage; 3 scvd is not running (or accepts but does not answer, or stopped before
it answered or the command was done: the message alone, it says to try again). Errors print as `kind: message`
(a tool error's kind, else the code: errors.shown).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import math
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import msgspec

from scvd import __version__, errors, protocol as p
from scvd.text import printable

from . import usage
from .approval_view import first_lines, format_request, present
from .client import Client, DaemonNotRunning, cut_off, stopped

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_NOT_RUNNING = 0, 1, 2, 3


def shared_options(json: bool = True) -> argparse.ArgumentParser:
    """The options every command takes. One with no JSON output (its `no_json` says why) takes --json
    unlisted in its help (json=False), only to refuse it in words."""
    common = argparse.ArgumentParser(add_help=False)
    # a str: an empty one (an unset variable) is no path, as SCV_SOCKET="" is none ("" as a Path is ".")
    common.add_argument("--socket", default=argparse.SUPPRESS,
                        help="scvd's socket (default: $SCV_SOCKET, else the instance's socket)")
    common.add_argument("--json", action="store_true", default=argparse.SUPPRESS,
                        help="print machine-readable JSON" if json else argparse.SUPPRESS)
    return common


def build_parser() -> argparse.ArgumentParser:
    common = shared_options()
    parser = argparse.ArgumentParser(prog="scvctl", parents=[common],
                                     description="Control scvd: approvals, agents, status.")
    parser.add_argument("--version", action="version", version=f"scvctl {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    cmd = sub.add_parser("status", parents=[common], help="the daemon's state")
    cmd.set_defaults(handler=cmd_status)
    cmd = sub.add_parser("ping", parents=[common], help="check that scvd answers")
    cmd.set_defaults(handler=cmd_ping)
    cmd = sub.add_parser("sessions", parents=[common], help="open sessions")
    cmd.set_defaults(handler=cmd_sessions)
    cmd = sub.add_parser("tools", parents=[common], help="the tools and their schemas")
    cmd.add_argument("--include-system", action="store_true", help="also list system tools")
    cmd.add_argument("--errors", action="store_true",
                     help="list the tools that could not be loaded (a bad tool.json, a failed MCP server)")
    cmd.add_argument("--lint", action="store_true",
                     help="print every tool's findings under the seed 003 design rules, and why each tool "
                          "that failed to load did")
    cmd.set_defaults(handler=cmd_tools)
    _add_approvals(sub, common)
    _add_call(sub, common)
    from . import agents, chat, mcp, secrets, service  # here: they import this module's helpers

    for module in (agents, secrets, service, mcp, chat):
        module.add_parser(sub, common)
    return parser


def _add_approvals(sub: Any, common: argparse.ArgumentParser) -> None:
    approvals = sub.add_parser("approvals", parents=[common], help="list, decide and watch approvals")
    approvals.set_defaults(handler=cmd_approvals_list)
    asub = approvals.add_subparsers(dest="approvals_command", metavar="ACTION")
    cmd = asub.add_parser("list", parents=[common], help="pending approvals (the default)")
    cmd.set_defaults(handler=cmd_approvals_list)
    cmd = asub.add_parser("show", parents=[common], help="one pending request whole (paged on a terminal)")
    cmd.add_argument("approval_id")
    cmd.set_defaults(handler=cmd_approvals_show)
    cmd = asub.add_parser("approve", parents=[common], help="approve one request")
    cmd.add_argument("approval_id")
    cmd.add_argument("--session", action="store_true",
                     help="also approve this tool at this risk for the rest of the session")
    cmd.set_defaults(handler=cmd_approve)
    cmd = asub.add_parser("deny", parents=[common], help="deny one request")
    cmd.add_argument("approval_id")
    cmd.add_argument("--reason", help="told to the agent")
    cmd.set_defaults(handler=cmd_deny)
    cmd = asub.add_parser("watch", parents=[common],
                          help="show requests as they arrive and answer y / n / s(ession)")
    cmd.set_defaults(handler=cmd_watch)


def _add_call(sub: Any, common: argparse.ArgumentParser) -> None:
    cmd = sub.add_parser("call", parents=[common], help="run one tool call through the normal approval gate")
    cmd.add_argument("--workspace", type=Path, default=Path("."), help="the workspace (default: here)")
    cmd.add_argument("--timeout", type=_seconds, help="dispatch timeout in seconds")
    cmd.add_argument("tool")
    cmd.add_argument("arguments", nargs="?", default="{}",
                     help="the arguments as a JSON object, or - to read it from stdin (past the shell's "
                          "limit on one argument: scvctl call write - < args.json)")
    cmd.set_defaults(handler=cmd_call)


def _seconds(text: str) -> float:
    """A finite number of seconds: nan, inf and 1e400 went to scvd as null (no timeout asked);
    a word is said as such, not as argparse's `invalid _seconds value`."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number of seconds, e.g. 30")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    args, _ = parser.parse_known_args(argv)
    if hasattr(args, "extra") and "--" in argv:  # an agent's own arguments: whole, a `--` among them too
        cut = argv.index("--")  # (argparse drops every `--` it sees there, and refuses all after an option)
        args = parser.parse_args(argv[:cut])
        args.extra = [*args.extra, *argv[cut + 1:]]
    else:
        args = parser.parse_args(argv)
    args.json = getattr(args, "json", False)
    socket = getattr(args, "socket", None)  # `~/` as SCV_SOCKET takes it: an MCP host's args reach us unexpanded
    args.socket = Path(os.path.expanduser(socket)) if socket else None
    if args.command != "mcp":  # its stdin and stdout are the MCP host's: it says when one is closed
        closed_stdio_as_devnull()
    if args.json and getattr(args, "no_json", None):  # silently ignored, a script would parse text
        print(f"usage: --json does not apply to {args.no_json}", file=sys.stderr)
        return EXIT_USAGE
    try:
        code = args.handler(args)
    except DaemonNotRunning as exc:
        print(exc.message, file=sys.stderr)
        return EXIT_NOT_RUNNING
    except errors.ConnectionClosed as exc:  # past the welcome: scvd went or dropped us (a watch, a call waiting)
        print(cut_off("the command was done", exc).message, file=sys.stderr)
        return EXIT_NOT_RUNNING
    except errors.UsageError as exc:
        print(f"usage: {exc.message}", file=sys.stderr)
        return EXIT_USAGE
    except errors.ScvError as exc:  # escaped: scvd's message may carry a peer's name or reason
        print(printable(errors.shown(exc)), file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return reader_left(EXIT_OK)
    try:
        if sys.stdout is not None:  # (scvctl mcp's may be closed: it said so)
            sys.stdout.flush()  # what is still buffered: its EPIPE comes here, not at exit ("Exception ignored", 120)
    except BrokenPipeError:
        return reader_left(code)  # the command's own outcome: a failed call stays 1
    return code


def reader_left(code: int) -> int:
    """`scvctl ... | head`: the reader left; exit quietly like other Unix tools (stdout to /dev/null,
    so the interpreter's last flush has nowhere to fail)."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return code


def closed_stdio_as_devnull() -> None:
    """A stream started closed (`<&-`, `>&-`) is None in sys, and the first prompt or JSON line was a
    traceback: read it as /dev/null instead (end of input at a prompt, output dropped as print() drops it)."""
    for name, mode in (("stdin", "r"), ("stdout", "w"), ("stderr", "w")):
        if getattr(sys, name) is None:
            setattr(sys, name, open(os.devnull, mode))


HANDSHAKE_SECONDS = 30.0  # the longest any command waits for scvd's welcome


def connect(args: argparse.Namespace, *, approver: bool = False, timeout: float | None = 30.0,
            answers_secrets: bool = True) -> Client:
    """A connection whose requests wait `timeout` for their answers (None: as long as they take).
    The welcome waits HANDSHAKE_SECONDS when `timeout` is None: a hung scvd (or a failed
    socket-activated one) is then said, exit 3, rather than waited on without end."""
    c = Client.connect(args.socket, name="scvctl", approver=approver, answers_secrets=answers_secrets,
                       timeout=HANDSHAKE_SECONDS if timeout is None else timeout)
    c.sock.settimeout(timeout)
    return c


def emit_json(value: Any) -> None:
    sys.stdout.write(msgspec.json.encode(value).decode() + "\n")
    sys.stdout.flush()


# --- commands ------------------------------------------------------------------


def cmd_status(args: argparse.Namespace) -> int:
    with connect(args) as c:
        st = c.status()
    if args.json:
        emit_json(st)
        return EXIT_OK
    print(f"scvd {st.version} (pid {st.pid}, protocol {st.protocol}) up {_duration(st.uptime_seconds)}")
    print(f"socket: {st.socket}")
    print(f"sessions: {st.sessions}  running calls: {st.running_calls}  "
          f"waiting for approval: {st.pending_approvals}")
    print(f"approval policy: {st.policy}" + (f" ({st.policy_note})" if st.policy_note else ""))
    print(f"sandbox: {st.sandbox}")
    if st.reload_error:  # without systemd's status line, the one place besides the log that says so
        print(printable(f"last reload failed, the configuration from before it runs: {st.reload_error}"))
    for m in st.mcp_servers:
        line = f"mcp server {m.name} ({m.transport}): {m.state}, {m.tools} tool(s)"
        line += f", restarted {m.restarts}x" if m.restarts else ""
        print(printable(line) + (f"\n  {printable(m.error)}" if m.error else ""))
    return EXIT_OK


def cmd_ping(args: argparse.Namespace) -> int:
    started = time.monotonic()
    with connect(args) as c:
        c.request(p.Ping)
    ms = (time.monotonic() - started) * 1000
    emit_json({"ok": True, "ms": round(ms, 3)}) if args.json else print(f"scvd answers ({ms:.1f} ms)")
    return EXIT_OK


def cmd_sessions(args: argparse.Namespace) -> int:
    with connect(args) as c:
        answer = c.request(p.SessionsList)
    code = _listing(args, answer.sessions, "no open sessions", lambda s: printable(  # a peer's name and path
        f"{s.session}  {s.workspace}  client={s.client or '?'}  calls={s.calls}  "
        f"open {_duration(time.time() - s.opened_at)}", keep=""))
    if answer.left_out:  # on stderr: --json stays the list
        print(f"{answer.left_out} more sessions, the newest, are not listed: they did not fit one answer "
              "(server.server_frame_bytes)", file=sys.stderr)
    return code


def _listing(args: argparse.Namespace, items: list[Any], empty: str, row: Any) -> int:
    """Items as JSON, one formatted row each, or a line saying there are none."""
    if args.json:
        emit_json(items)
    else:
        print("\n".join(row(item) for item in items) if items else empty)
    return EXIT_OK


def cmd_tools(args: argparse.Namespace) -> int:
    with connect(args) as c:
        answer = c.request(p.ToolsList, include_system=args.include_system or args.lint, lint=args.lint)
    if args.errors:
        return _listing(args, answer.errors, "no tool failed to load",
                        lambda e: printable(f"{e.name or '?'}: {e.source}: {e.message}"))
    if args.json:
        emit_json(answer.tools)
        return EXIT_OK
    for t in answer.tools:
        if args.lint:
            print(printable(f"{t.name}: " + ("ok" if not t.lint else f"{len(t.lint)} finding(s)")))
            for finding in t.lint:
                print(printable(f"  {finding}"))
        else:
            print(printable(f"{t.name} [{t.risk}]: {t.description.splitlines()[0]}"))
    if args.lint:  # a script tool the lint refused is in no listing: its author looks here
        for e in answer.errors:
            print(printable(f"{e.name or '?'}: not loaded ({e.source})"))
            print(printable(f"  {e.message}"))
    elif answer.errors:
        print(f"({len(answer.errors)} tool(s) failed to load: scvctl tools --errors)", file=sys.stderr)
    return EXIT_OK


def cmd_approvals_list(args: argparse.Namespace) -> int:
    with connect(args) as c:
        pending = c.request(p.ApprovalsList).approvals
    return _listing(args, pending, "no pending approvals", format_request)


def cmd_approvals_show(args: argparse.Namespace) -> int:
    with connect(args) as c:
        pending = c.request(p.ApprovalsList).approvals  # the gate keeps them all within one frame
    found = next((a for a in pending if a.approval_id == args.approval_id), None)
    if found is None:
        raise errors.ApprovalNotFound(f"no pending approval {args.approval_id!r}; it was decided, expired or "
                                      "withdrawn (scvctl approvals lists the pending ones)")
    if args.json:
        emit_json(found)
    else:
        present(format_request(found))
    return EXIT_OK


def cmd_approve(args: argparse.Namespace) -> int:
    return _decide(args, "approve", scope="session" if args.session else "once")


def cmd_deny(args: argparse.Namespace) -> int:
    return _decide(args, "deny", reason=args.reason)


def _decide(args: argparse.Namespace, decision: str, **fields: Any) -> int:
    always = None
    with connect(args) as c:
        if fields.get("scope") == "session":  # an always_ask request is granted once whatever is asked
            listed = c.request(p.ApprovalsList).approvals
            always = next((a.always_ask for a in listed if a.approval_id == args.approval_id), None)
        c.request(p.ApprovalDecide, approval_id=args.approval_id, decision=decision, **fields)
    if args.json:
        emit_json({"approval_id": args.approval_id, "decision": decision,
                   **({"scope": "once", "always_ask": always} if always else {})})
    elif always:
        print(printable(f"approved {args.approval_id} once only, not for the session: it always asks ({always})"))
    else:
        print(f"{decision}d {args.approval_id}" if decision == "approve" else f"denied {args.approval_id}")
    return EXIT_OK


def cmd_watch(args: argparse.Namespace) -> int:
    args.seq = itertools.count(1)  # the JSON lines' own (see _emit_event)
    with connect(args, timeout=None) as c:
        c.request(p.ApprovalsWatch)
        listed = c.request(p.ApprovalsList).approvals
        for pending in listed:  # shaped like the event: one shape for bridges
            _on_request(c, args, p.approval_requested(pending))
        # one that came between watch and list is also an event: shown once
        shown = {pending.approval_id for pending in listed}
        for event in c.events(output=sys.stdout.fileno()):  # `watch | head -1` ends with head
            if isinstance(event, p.ApprovalRequested):
                if event.approval_id not in shown:
                    _on_request(c, args, event)
            elif isinstance(event, p.ApprovalResolved):
                _on_resolved(args, event)
            elif args.json and isinstance(event, (p.SecretRequested, p.SecretResolved)):
                _emit_event(args, event)  # a program reading JSON answers with secret.provide itself
            elif isinstance(event, p.SecretRequested):
                on_secret(c, event)
            elif isinstance(event, p.SecretResolved):
                print(printable(f"  {event.request_id} ({event.key}) {event.state}"
                                + (f" by {event.decided_by}" if event.decided_by else ""), keep=""), flush=True)
    return EXIT_OK  # pragma: no cover - events() only ends by an exception


def _emit_event(args: argparse.Namespace, event: Any) -> None:
    """A line of `watch --json`, its `seq` this output's own, 1, 2, ...: the requests pending when the
    watch began were listed, not pushed, and all went out as seq 0 before the pushed ones' 1, 2, ..."""
    emit_json(msgspec.structs.replace(event, seq=next(args.seq)))


def _on_request(c: Client, args: argparse.Namespace, event: Any) -> None:
    if args.json:
        _emit_event(args, event)
        return
    if _ended(c, event.approval_id):  # it expired or went while an earlier one was asked: no prompt
        print(first_lines(event), flush=True)  # its approval.resolved line follows
        return
    answer = ask_request(event)
    if answer is None:
        raise KeyboardInterrupt
    decide(c, event, answer)


def decide(c: Client, event: Any, answer: str) -> None:
    """Send the person's y, n or s for `event`; one decided elsewhere, or withdrawn, meanwhile is said."""
    try:
        c.request(p.ApprovalDecide, approval_id=event.approval_id, decision="deny" if answer == "n" else "approve",
                  scope="session" if answer == "s" else "once")
    except errors.ApprovalNotFound as exc:  # scvd says which
        print(printable(f"  {exc.message}", keep=""), flush=True)


def _ended(c: Client, approval_id: str) -> bool:
    """Whether the request's approval.resolved has already come (it waits, read, behind the request)."""
    return any(isinstance(e, p.ApprovalResolved) and e.approval_id == approval_id for e in c.core.events)


def ask_request(event: Any) -> str | None:
    """Show a request whole (paged when taller than the terminal), then ask: y, n, s or None at EOF."""
    if present(format_request(event)):  # the pager has closed: say what the prompt is about
        print(f"{first_lines(event)}\n  (the whole request was shown in the pager)", flush=True)
    return _ask(*approve_question(event))


def _on_resolved(args: argparse.Namespace, event: p.ApprovalResolved) -> None:
    if args.json:
        _emit_event(args, event)
        return
    why = f": {event.reason}" if event.reason else ""  # another peer's text: one line, escaped
    print(printable(f"  {event.approval_id} {event.state} by {event.decided_by}{why}", keep=""), flush=True)


def on_secret(c: Client, event: p.SecretRequested) -> None:
    """A tool asks for a secret: read it masked (getpass) on a terminal, else one line of stdin."""
    print(printable(f"[{event.request_id}] secret {event.key} for {event.tool or '?'} "  # the agent's question:
                    f"(session {event.session}): {event.question}", keep=""), flush=True)  # one line, escaped
    while True:
        value = _read_secret(f"value for {event.key} (input hidden; empty to decline): ")
        if value is None:
            raise KeyboardInterrupt
        try:
            if value:
                c.request(p.SecretProvide, request_id=event.request_id, value=value)
            else:
                c.request(p.SecretDecline, request_id=event.request_id, reason="declined at the prompt")
            return
        except errors.ApprovalNotFound as exc:  # answered elsewhere, or timed out (nothing stored): scvd says which
            print(printable(f"  {exc.message}", keep=""), flush=True)
            return
        except errors.InvalidRequest as exc:  # e.g. too long: the request is still pending
            print(f"  not stored: {exc.message}; enter it again", flush=True)
        except errors.ToolError as exc:  # the store refused it (a locked keyring): that request is over, not the watch
            print(printable(f"  not stored: {exc.message}", keep=""), flush=True)
            return


def _read_secret(prompt: str) -> str | None:
    if sys.stdin.isatty():
        try:
            return masked_input(prompt)
        except EOFError:
            return None
    sys.stdout.write(prompt)
    sys.stdout.flush()
    line = sys.stdin.readline()
    end_prompt_line()
    return line.rstrip("\r\n") if line else None


def masked_input(prompt: str) -> str:
    """getpass on the terminal, whose echo stays off across Ctrl-Z and fg: the shell puts its own
    terminal modes back while the command is stopped, and the secret typed after fg showed as typed."""
    import getpass
    import signal
    import termios

    def mask_again(signum: int, frame: Any) -> None:
        try:
            modes = termios.tcgetattr(sys.stdin.fileno())
            modes[3] &= ~termios.ECHO  # lflag, as getpass clears it
            termios.tcsetattr(sys.stdin.fileno(), termios.TCSANOW, modes)
        except termios.error:
            pass

    previous = signal.signal(signal.SIGCONT, mask_again)
    try:
        return getpass.getpass(prompt)
    finally:
        signal.signal(signal.SIGCONT, previous)


def approve_question(event: Any) -> tuple[str, set[str]]:
    """The one-key question; a request that always asks is approved once only: no [s]ession."""
    if getattr(event, "always_ask", None):
        return "approve once? [y]es / [n]o: ", {"y", "n"}
    return "approve? [y]es / [n]o / [s]ession: ", {"y", "n", "s"}


ANSWERS = {"y": "y", "yes": "y", "n": "n", "no": "n", "s": "s", "session": "s"}


def _ask(prompt: str, choices: set[str]) -> str | None:
    """The key chosen: a whole word only (`y`, `yes`, ...); "stop" or "sorry" is asked again, never `s`."""
    drop_typed_ahead()
    while True:
        sys.stdout.write(prompt)
        sys.stdout.flush()
        line = sys.stdin.readline()
        end_prompt_line(printable(line.strip(), keep=""))
        if not line:
            return None
        answer = ANSWERS.get(line.strip().lower())
        if answer in choices:
            return answer


def end_prompt_line(shown: str = "") -> None:
    """After a prompt's answer read from input that is no terminal (a pipe, a file), which nothing
    echoed: end the prompt's line, with `shown` (the answer, never a secret), else the next prompt
    or message went on the same line."""
    if not sys.stdin.isatty():
        print(shown, flush=True)


def drop_typed_ahead() -> None:
    """Forget what was typed on the terminal before this request (or the model's question) was shown:
    a second `y` meant for the one before would otherwise answer this one unread. (getpass drops it
    for secrets itself.)"""
    if sys.stdin.isatty():
        import termios

        termios.tcflush(sys.stdin.fileno(), termios.TCIFLUSH)


@contextlib.contextmanager
def _interrupt_after() -> Iterator[None]:
    """A Ctrl-C in the block raises KeyboardInterrupt once it ends (the call's id is known then, so
    it can be cancelled and said by name); a second one at once. The main thread only (signals)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []

    def held(signum: int, frame: Any) -> None:
        if caught:
            raise KeyboardInterrupt
        caught.append(signum)

    previous = signal.signal(signal.SIGINT, held)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if caught:
        raise KeyboardInterrupt


def cmd_call(args: argparse.Namespace) -> int:
    arguments = _call_arguments(args.arguments)
    # the approver of its own session only: it hears the approval its call waits for, to point at it,
    # and no other session's requests or secrets (it never answers them; a watcher would be asked)
    with connect(args, approver=True, timeout=None, answers_secrets=False) as c:
        session = c.open_session(usage.workspace(args.workspace))
        fields = {"timeout_seconds": args.timeout} if args.timeout is not None else {}  # 0 is scvd's to refuse
        interrupted = False
        try:
            with _interrupt_after():  # a Ctrl-C before call.accepted came exited 130 unsaid
                call_id = c.start_call(session, args.tool, arguments, **fields)
            done = _follow(c, call_id, args)
        except KeyboardInterrupt:
            interrupted = True
            try:
                c.request(p.CallCancel, call_id=call_id)
            except errors.CallNotFound:
                pass  # it completed meanwhile: its call.completed is on the way, print that
            done = _follow(c, call_id, args)
    if interrupted and not done.ok and done.error is not None and done.error.kind == "cancelled":
        if args.json:
            emit_json(done)
        else:  # the server's reason names this connection (`call.cancel from #3 "scvctl" pid=...`)
            print(f"cancelled: Ctrl-C stopped call {call_id}", file=sys.stderr)
        return 130  # as a shell reports an interrupted command
    if not interrupted:
        _unless_scvd_stopped(done, args)
    return _print_completed(done, args)


def _unless_scvd_stopped(done: p.CallCompleted, args: argparse.Namespace) -> None:
    """A call scvd cancelled as it stopped did not fail: said as "run it again" (exit 3), as a
    request scvd stopped on is."""
    err = done.error
    if err is not None and err.reason == errors.STOP_REASON:
        if args.json:
            emit_json(done)
        raise stopped(f"call {done.call_id} was done", err.message)


def _call_arguments(given: str) -> dict[str, Any]:
    """The call's arguments: a JSON object on the command line, or on stdin for `-` (one argument
    longer than 128 KiB is refused by the kernel: "Argument list too long")."""
    if given.startswith("@"):  # no JSON starts so: curl's way to name a file, which was read as JSON
        raise errors.UsageError(f"scvctl reads no @FILE; give the arguments on stdin with -: "
                                f"scvctl call TOOL - < {given[1:] or 'FILE'}")
    source = " (read from stdin)" if given == "-" else ""
    try:
        text = sys.stdin.read() if given == "-" else given
        if given == "-" and not text.strip():
            raise ValueError("stdin was empty; e.g. scvctl call TOOL - < args.json")
        arguments = json.loads(text, parse_float=_finite, parse_constant=_finite)
    except ValueError as exc:  # a JSONDecodeError, a number _finite refused, stdin not UTF-8
        raise errors.UsageError(f"arguments{source} must be a JSON object: {exc}") from None
    if not isinstance(arguments, dict):
        raise errors.UsageError(f"arguments{source} must be a JSON object, e.g. '{{\"path\": \"README.md\"}}'")
    return arguments


def _finite(text: str) -> float:
    """A JSON number; 1e400, and the NaN and Infinity that json.loads takes, went to scvd as null:
    the call ran with the tool's default (a `timeout_seconds` of 120), nothing said."""
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is not a finite number")
    return value


def _follow(c: Client, call_id: str, args: argparse.Namespace) -> p.CallCompleted:
    """Print this call's events until it completes; point at the approval it waits for."""
    while True:
        event = c.next_event()
        if getattr(event, "call_id", call_id) != call_id:
            continue
        if isinstance(event, p.CallCompleted):
            return event
        if args.json:
            emit_json(event)
        elif isinstance(event, p.ApprovalRequested):
            print(f"waiting for approval {event.approval_id}: decide with `scvctl approvals approve "
                  f"{event.approval_id}` (or deny) in another terminal", file=sys.stderr, flush=True)
        elif isinstance(event, p.CallProgress):  # a tool's own message is its text: one line, escaped
            doing = printable(event.message, keep="") if event.message else "still running"
            print(f"... {doing} ({event.elapsed_s:.0f} s)", file=sys.stderr, flush=True)


def _print_completed(done: p.CallCompleted, args: argparse.Namespace) -> int:
    if args.json:
        try:
            emit_json(done)  # it flushes: a reader that left is seen here, and the call's outcome is the exit's
        except BrokenPipeError:
            return reader_left(EXIT_OK if done.ok else EXIT_ERROR)
    elif done.ok:
        result = done.result
        text = result if isinstance(result, str) else json.dumps(result, indent=2, ensure_ascii=False)
        # a terminal would run what a file or tool put there (JSON escapes C0 only): a C1 CSI, OSC 52's
        # clipboard write, a bidi override; a pipe gets the text as it is
        print(printable(text) if sys.stdout.isatty() else text)
    else:
        err = done.error  # escaped, as scvctl chat does: a timeout's message carries the command's output
        print(f"{err.kind}: {printable(err.message)}", file=sys.stderr)
        if err.hint:
            print(f"hint: {printable(err.hint)}", file=sys.stderr)
    return EXIT_OK if done.ok else EXIT_ERROR


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
