#!/usr/bin/env python3
"""A small chat bridge for scvd: run it, type as if from a chat app, and the agent works on this machine.

The "chat app" is this terminal, so the bridge runs anywhere; a real bridge swaps
`Console` for Slack, Telegram or Feishu and keeps the rest. Input lines:

    CHAT: text              a message in remote chat CHAT (one conversation per chat)
    owner: /approve ID      the owner decides an approval (also /deny ID [reason], /session ID)
    owner: /answer ID text  the owner answers the model's question

Approvals and questions go to the owner only, never to the chat they came from.
Conversation ids are kept in a JSON file, so a restart or a reconnect resumes
every chat where it was.

    .venv/bin/python examples/bridge/bridge.py --workspace ~/project [--state bridge.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import threading
from pathlib import Path
from typing import Any

from scvctl.client import AsyncClient, ConnectionClosed, DaemonNotRunning
from scvd import errors, protocol as p
from scvd.text import format_request, printable

OWNER = "owner"
OWNER_GONE = "the owner's console closed: nobody is left to decide this"


class Console:
    """The chat app: lines in on stdin, messages out on stdout."""

    async def messages(self):
        # read on a thread of its own, not in the loop's executor: asyncio.run waits for that one's
        # threads as it ends, and a readline blocked there kept the bridge alive after Ctrl-C
        loop, lines = asyncio.get_running_loop(), asyncio.Queue()

        def read() -> None:
            while True:
                line = sys.stdin.readline()  # "" once the input closed
                try:
                    loop.call_soon_threadsafe(lines.put_nowait, line)
                except RuntimeError:  # the loop closed (Ctrl-C): nobody reads on
                    return
                if not line:
                    return

        threading.Thread(target=read, daemon=True).start()
        while line := await lines.get():
            chat, sep, text = line.partition(":")
            if sep and text.strip():
                yield chat.strip(), text.strip()

    def send(self, chat: str, text: str) -> None:
        # escaped: the model's text may carry what it read, and an ANSI escape in it could hide the
        # approval printed next in this same terminal
        print(f"[{chat}] {printable(text)}", flush=True)


def approval_message(chat: str, event: p.ApprovalRequested) -> str:
    """The whole request: an approver must see everything they approve (a chat app would attach long
    details as a file). A request with `always_ask` is approved once only, so /session is not offered."""
    ident = event.approval_id
    offers = f"/approve {ident}" + ("" if event.always_ask else f", /session {ident}") + f" or /deny {ident}"
    # below its header, the request as scvctl shows it: a text's lines marked, values as JSON, always_ask
    whole = format_request(event).split("\n", 1)[1]
    return f"{chat} wants {event.tool} ({event.risk}) -> {offers}\n{whole}"


class Bridge:
    def __init__(self, app: Console, workspace: str, state: Path) -> None:
        self.app, self.workspace, self.state = app, workspace, state
        self.conversations: dict[str, str] = json.loads(state.read_text()) if state.exists() else {}
        self.sessions: dict[str, str] = {}  # chat -> session, for this connection
        self.chats: dict[str, str] = {}  # session -> chat
        self.client: AsyncClient | None = None
        self.running: dict[str, str] = {}  # turns not yet ended -> their chat
        self.ended: set[str] = set()  # turns whose end the relay read before their turn.accepted was taken
        self.idle = asyncio.Event()
        self.asked: dict[str, Any] = {}  # approvals and questions waiting for the owner, by their id
        self.owner_gone = False  # input closed: what the owner is asked from now on is declined

    async def connect(self) -> None:
        """(Re)connect; sessions belong to a connection, so chats are reopened lazily."""
        delay = 0.5
        while True:
            try:
                # answers_secrets=False: a chat is no place to type a secret; store_secret asks the watchers
                self.client = await AsyncClient.connect(name="example-bridge", approver=True, answers_secrets=False)
                self.sessions, self.chats = {}, {}
                return
            except errors.NotScvd:  # no scvd there: waiting would not help
                raise
            except DaemonNotRunning as exc:
                print(f"waiting for scvd: {exc.message}", file=sys.stderr)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 30)

    async def session(self, chat: str) -> str:
        if chat in self.sessions:
            self.sessions[chat] = self.sessions.pop(chat)  # the least recently used chats come first
            return self.sessions[chat]
        fields = {"conversation": self.conversations[chat]} if chat in self.conversations else {}
        try:
            opened = await self.open(fields)
        except errors.ConversationNotFound:  # its transcript was removed (chat.transcript_days): a new one
            self.app.send(chat, "(the earlier conversation is gone from scvd; the model starts afresh)")
            opened = await self.open({})
        if opened.notice:  # lines of its transcript scvd could not read back: the model lacks them
            self.app.send(OWNER, f"{chat}: {opened.notice}")
        self.sessions[chat], self.chats[opened.session] = opened.session, chat
        self.conversations[chat] = opened.conversation
        self.save()
        return opened.session

    async def open(self, fields: dict[str, str]) -> Any:
        try:
            return await self.client.request(p.ChatOpen, workspace=self.workspace, **fields)
        except errors.LimitExceeded:  # server.max_sessions_per_connection: an idle chat makes room
            if not await self.close_idle_session():
                raise
            return await self.client.request(p.ChatOpen, workspace=self.workspace, **fields)

    async def close_idle_session(self) -> bool:
        """Close the session of the least recently used chat without a running turn; its conversation
        stays, and its next message reopens it (a background call of its still running is cancelled)."""
        busy = set(self.running.values())
        chat = next((c for c in self.sessions if c not in busy), None)
        if chat is None:
            return False
        session = self.sessions.pop(chat)
        del self.chats[session]
        await self.client.request(p.SessionClose, session=session)
        return True

    def save(self) -> None:
        """Whole or not at all: a write cut short (a full disk) must not lose every chat's conversation."""
        temp = self.state.with_name(self.state.name + ".tmp")
        try:
            temp.write_text(json.dumps(self.conversations))
            temp.replace(self.state)
        except OSError as exc:  # the chats go on; the next chat opened writes them all again
            temp.unlink(missing_ok=True)
            print(f"conversations not saved to {self.state}: {exc}", file=sys.stderr)

    async def on_message(self, chat: str, text: str) -> None:
        if chat == OWNER and text.startswith("/"):
            await self.owner_command(text)
            return
        session = await self.session(chat)
        turn = (await self.client.request(p.TurnStart, session=session, text=text)).turn
        if turn in self.ended:  # it failed at once: its end came in the same read as turn.accepted
            self.ended.discard(turn)
            return
        self.running[turn] = chat
        self.idle.clear()

    async def owner_command(self, text: str) -> None:
        verb, _, rest = text[1:].partition(" ")
        ident, _, extra = rest.partition(" ")
        try:
            if verb in ("approve", "session", "deny"):
                await self.client.request(p.ApprovalDecide, approval_id=ident, reason=extra or None,
                                          decision="deny" if verb == "deny" else "approve",
                                          scope="session" if verb == "session" else "once")
            elif verb == "answer" and "/" in ident:  # the ID as the question showed it: SESSION/QUESTION
                session, question = ident.split("/", 1)
                await self.client.request(p.QuestionAnswer, session=session, question_id=question, answer=extra)
            else:
                self.app.send(OWNER, "commands: /approve ID, /session ID, /deny ID [reason], /answer ID text")
        except Exception as exc:  # a typo in an id must not stop the bridge
            self.app.send(OWNER, f"{type(exc).__name__}: {getattr(exc, 'message', exc)}")

    async def decline(self, event: p.ApprovalRequested | p.QuestionAsked) -> None:
        try:
            if isinstance(event, p.ApprovalRequested):
                await self.client.request(p.ApprovalDecide, approval_id=event.approval_id, decision="deny",
                                          reason=OWNER_GONE)
            else:  # the model hears there is no answer and goes on without one
                await self.client.request(p.QuestionAnswer, session=event.session, question_id=event.question_id,
                                          answer=f"(no answer: {OWNER_GONE})")
        except errors.ScvError:  # decided, or its turn ended, meanwhile
            pass

    async def events(self) -> None:
        """Relay the daemon's events: text to the chat it belongs to, decisions to the owner only."""
        partial: dict[str, list[str]] = {}
        while True:
            try:
                event = await self.client.next_event()
            except ConnectionClosed:  # scvd restarted: the next message reconnects
                print("scvd closed the connection; reconnecting with the next message", file=sys.stderr)
                for chat in self.running.values():  # its sessions, and their turns, ended with it
                    self.app.send(chat, "(scvd went away before answering; send your message again)")
                self.running.clear()
                self.asked.clear()
                self.idle.set()
                return
            chat = self.chats.get(getattr(event, "session", ""), "?")
            if isinstance(event, (p.ApprovalRequested, p.QuestionAsked)):
                self.asked[getattr(event, "approval_id", None) or event.question_id] = event
                if self.owner_gone:
                    await self.decline(event)
            elif isinstance(event, p.ApprovalResolved):
                self.asked.pop(event.approval_id, None)
            if isinstance(event, (p.TurnCompleted, p.TurnCancelled, p.TurnFailed)):
                self.asked = {k: e for k, e in self.asked.items() if getattr(e, "turn", "") != event.turn}
                if self.running.pop(event.turn, None) is None:
                    self.ended.add(event.turn)
                if not self.running:
                    self.idle.set()
                streamed = "".join(partial.pop(event.turn, []))  # a reply that the turn's end cut short
                if event.warning:  # its transcript could not be written (a full disk): the owner can make room
                    self.app.send(OWNER, f"{chat}: {event.warning}")
            if isinstance(event, p.AssistantDelta):
                partial.setdefault(event.turn, []).append(event.text)  # a chat app would edit one message
            elif isinstance(event, p.AssistantCompleted) and event.text:
                partial.pop(event.turn, None)
                self.app.send(chat, event.text)
            elif isinstance(event, p.TurnFailed):
                if streamed:  # not the answer, but the chat would have seen it stream in
                    self.app.send(chat, f"{streamed} (cut short)")
                self.app.send(chat, f"(failed: {event.message})")
                if event.hint:
                    self.app.send(OWNER, f"{chat}: {event.hint}")
            elif isinstance(event, p.ApprovalRequested):
                self.app.send(OWNER, approval_message(chat, event))
            elif isinstance(event, p.QuestionAsked):
                self.app.send(OWNER, f"{chat} asks: {event.question} -> /answer {event.session}/"
                                     f"{event.question_id} your answer")

    async def run(self) -> None:
        await self.connect()
        relay = asyncio.ensure_future(self.events())
        async for chat, text in self.app.messages():
            try:
                try:
                    await self.on_message(chat, text)
                except ConnectionClosed:
                    # it ends too, once it relayed what came before the break and told the chats; an error
                    # it died of earlier must not end the bridge here (a new relay starts below)
                    await asyncio.wait([relay])
                    await self.connect()
                    relay = asyncio.ensure_future(self.events())
                    await self.on_message(chat, text)
            except errors.ScvError as exc:  # a message while its chat's turn runs, say (sent again too)
                self.app.send(chat, f"(not sent: {exc.message})")
        # stdin closed: let the running turns finish, then stop; nobody can approve or answer now, so
        # what waits for the owner is declined (else a turn would wait out the approval timeout, or
        # its question for ever)
        self.owner_gone = True
        for event in list(self.asked.values()):
            await self.decline(event)
        if self.running:
            await self.idle.wait()
        relay.cancel()
        await self.client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workspace", type=Path, default=Path.cwd())
    parser.add_argument("--state", type=Path, default=Path("bridge-conversations.json"))
    args = parser.parse_args()
    try:
        asyncio.run(Bridge(Console(), str(args.workspace.resolve()), args.state).run())
    except errors.NotScvd as exc:
        sys.exit(f"bridge: {exc.message}")
    except KeyboardInterrupt:  # Ctrl-C: the conversations are saved as they go, so no traceback, only 128 + SIGINT
        sys.exit(130)


if __name__ == "__main__":
    main()
