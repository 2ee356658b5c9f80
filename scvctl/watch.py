"""`scvctl approvals watch`: requests shown as they come and answered y / n / s(ession), secrets asked
for masked; the request and secret prompts `scvctl chat` shows too."""

from __future__ import annotations

import argparse
import itertools
import sys
from typing import Any

import msgspec

from scvd import errors, protocol as p
from scvd.text import printable

from .approval_view import first_lines, format_request, present
from .cli import EXIT_OK
from .client import Client
from .commands import connect, emit_json
from .prompts import approve_question, ask, read_secret


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
    return ask(*approve_question(event))


def _on_resolved(args: argparse.Namespace, event: p.ApprovalResolved) -> None:
    if args.json:
        _emit_event(args, event)
        return
    why = f": {event.reason}" if event.reason else ""  # another peer's text: one line, escaped
    print(printable(f"  {event.approval_id} {event.state} by {event.decided_by}{why}", keep=""), flush=True)


def on_secret(c: Client, event: p.SecretRequested) -> None:
    """A tool asks for a secret: read it masked on a terminal, else one line of stdin (a PEM or
    OpenSSH key whole, either way: prompts.whole_value)."""
    print(printable(f"[{event.request_id}] secret {event.key} for {event.tool or '?'} "  # the agent's question:
                    f"(session {event.session}): {event.question}", keep=""), flush=True)  # one line, escaped
    while True:
        try:
            value = read_secret(f"value for {event.key} (input hidden; empty to decline): ")
        except errors.UsageError as exc:  # a key cut short: the request still waits
            print(f"  not stored: {exc.message}; enter it again, whole (empty to decline)", flush=True)
            continue
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
