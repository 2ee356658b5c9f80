"""scvctl's commands that ask scvd and print its answer: status, ping, sessions, tools, approvals
(list, show, approve, deny) and call; and the connection and JSON output every command shares.

Errors print as cli.py says (`kind: message`, exit codes): the commands raise scvd's errors.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import signal
import sys
import threading
import time
from typing import Any, Iterator

import msgspec

from scvd import errors, protocol as p
from scvd.text import printable

from . import usage
from .approval_view import format_request, present
from .cli import EXIT_ERROR, EXIT_OK, reader_left
from .client import Client, stopped

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
        if m.state == "disabled":  # never started: no tools or restarts to count, and why
            print(printable(f"mcp server {m.name} ({m.transport}): disabled (enabled = false in its table)"))
            continue
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
        f"{s.session}  {s.workspace}  client={s.client or '?'}  calls_made={s.calls}  "
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
        reload_error = c.status().reload_error  # a failed reload read no tool anew: no listing shows it
    if reload_error:  # on stderr: --json stays the list
        print(printable(_tools_after_failed_reload(reload_error)), file=sys.stderr, flush=True)
    if args.errors:
        # not "no tool failed to load" when the tools just added were not even read
        if answer.errors or args.json or not reload_error:
            _listing(args, answer.errors, "no tool failed to load",
                     lambda e: printable(f"{e.name or '?'}: {e.source}: {e.message}"))
        return EXIT_ERROR if reload_error else EXIT_OK
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


def _tools_after_failed_reload(why: str) -> str:
    return (f"last reload failed: {why}\nthe tools listed are those of the configuration from before it: a "
            "tool added or changed since is not loaded until a reload takes; fix that (`scvd check-config` "
            "checks config.toml), then reload scvd (`systemctl --user reload scvd`, or SIGHUP to scvd)")


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
    import json  # a call's alone (its NaN and 1e400 refused in words); the other commands need none

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
        import json

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

