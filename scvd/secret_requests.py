"""Secret requests: a call asks approvers for a secret's value, the first answer is stored.

Rules:
- A request goes to the same connections an approval would (every
  `approvals.watch` connection, and the session's own if it said it can
  approve); with none connected it fails at once, naming `scvctl secrets set KEY`
  and `scvctl approvals watch`.
- Who may answer is checked by the server (a process scvd spawned may not).
- The value goes from `secret.provide` straight into the secret store, in a
  thread. It is never logged, audited, put in an event, or handed back to the
  call: the call learns only the key and where it was stored.
- A request ends once: stored, declined, timed_out (approvals.timeout_seconds),
  cancelled (the call went away) or cancelled_no_approver (every approver asked
  left, and no other is connected: one whose watch has just begun is asked
  then); every approver hears `secret.resolved`.
  Its timeout runs on `awake.clock`, which goes on while
  the machine sleeps, as the `expires_at` an approver is shown: an answer after
  it, or a watcher that starts meanwhile, times the request out instead.
- Once a value is taken for storing, only the store ends the request (stored or
  failed): the timeout no longer applies, and the call waits up to
  STORE_SECONDS more for the store; a cancelled call leaves the store's outcome
  to be recorded.
Nothing here knows a tool by name.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from . import awake, errors, protocol as p
from . import secrets as secrets_mod
from .secrets import SecretStore, check_key, check_value
from .text import printable

log = logging.getLogger("scvd.secrets")

MAX_QUESTION_CHARS = 500
STORE_SECONDS = 30.0  # past a D-Bus call's default reply timeout (25 s): a keyring that late is not answering


@dataclass(eq=False)
class SecretRequest:
    """One pending request; `future` gets the stored entry or an exception."""

    id: str
    session: str
    call_id: str
    key: str
    question: str
    tool: str
    targets: list[Any]
    expires_at: float | None
    timeout: float | None = None
    deadline: float = float("inf")  # on awake.clock(): when it times out
    storing: bool = False  # a value was taken: the store, not the timeout, ends the request
    future: asyncio.Future = field(default_factory=lambda: asyncio.get_running_loop().create_future())


class SecretRequests:
    """Pending secret requests of a daemon.

    `approvers(session_id)` lists the connections to ask; `send(conn, event)` pushes
    an event; `timeout()` is approvals.timeout_seconds now; `audit(event, **fields)`
    writes an audit line (never a value).
    """

    def __init__(self, store: SecretStore, *, approvers: Callable[[str], list[Any]],
                 send: Callable[[Any, p.Frame], None], timeout: Callable[[], float | None],
                 audit: Callable[..., None],
                 on_stored: Callable[[str, float], None] = lambda key, stored_at: None) -> None:
        self.store = store
        self._on_stored = on_stored  # told each key stored (MCP servers that wait for it start now)
        self._approvers = approvers
        self._send = send
        self._timeout = timeout
        self._audit = audit
        self.pending: dict[str, SecretRequest] = {}
        self.storing: set[asyncio.Future[Any]] = set()  # stores under way: a stop waits for their records

    async def ask(self, *, session: str, call_id: str, key: str, question: str, tool: str) -> Any:
        """Ask, wait for the answer, return the stored entry; raises a ToolError otherwise."""
        check_key(key)
        targets = self.check_approvers(session, key)
        timeout = self._timeout()
        request = SecretRequest(
            id=f"s-{os.urandom(6).hex()}", session=session, call_id=call_id, key=key,
            # the agent wrote it: escaped like an approval's summary, for terminals and chat bridges alike
            question=printable((question or f"{tool or 'a tool'} needs the secret {key}")[:MAX_QUESTION_CHARS]),
            tool=tool, targets=targets, expires_at=time.time() + timeout if timeout else None, timeout=timeout,
            deadline=awake.clock() + timeout if timeout else float("inf"))
        self.pending[request.id] = request
        log.info("secret request %s: %s for %s (session %s), asked %d approver(s)",
                 request.id, key, tool or "?", session, len(targets))
        self._audit("secret_request", request_id=request.id, key=key, session=session, call_id=call_id,
                    tool=tool)
        for conn in targets:
            self._send(conn, _requested(request))
        try:
            return await self._answer(request)
        except TimeoutError:
            if request.future.done():  # answered in the very turn the time ran out: that answer counts
                return request.future.result()
            self._finish(request, *self._late(request))
            raise request.future.exception() from None  # type: ignore[misc]
        except asyncio.CancelledError:
            if request.storing:  # the store's outcome is still recorded; nobody waits for it
                request.future.add_done_callback(lambda f: f.cancelled() or f.exception())
            else:
                self._finish(request, "cancelled", None, errors.Cancelled("the call was cancelled"))
            raise

    async def _answer(self, request: SecretRequest) -> Any:
        """The stored entry; a value taken for storing before the deadline gets STORE_SECONDS more.
        The loop's clock stops while the machine sleeps: the deadline is on awake.clock."""
        try:
            return await awake.wait(request.future, request.deadline)
        except TimeoutError:
            if not request.storing:
                raise
        async with asyncio.timeout(STORE_SECONDS):
            return await asyncio.shield(request.future)

    def _late(self, request: SecretRequest) -> tuple[str, None, errors.ToolError]:
        """How a request that ran out of time ends: timed_out, or failed if the store never answered."""
        key = request.key
        if request.storing:
            return "failed", None, errors.Timeout(
                f"the secret store had not stored {key} {STORE_SECONDS:g} s after approvals.timeout_seconds ran "
                f"out; it may be stored anyway: check `scvctl secrets list`, else `scvctl secrets set {key}`, "
                "then call again")
        return "timed_out", None, errors.Denied(
            f"nobody entered {key} within approvals.timeout_seconds ({request.timeout:g} s); "
            f"store it with `scvctl secrets set {key}` and call again")

    def check_approvers(self, session: str, key: str) -> list[Any]:
        """The connections to ask, or Unavailable at once when there are none."""
        targets = [c for c in self._approvers(session) if not c.closed]
        if not targets:
            raise errors.Unavailable(
                f"no approver is connected to enter {key}: run `scvctl approvals watch` in a terminal and "
                f"call again, or store it yourself with `scvctl secrets set {key}`",
                hint=f"scvctl secrets set {key}")
        return targets

    async def provide(self, request_id: str, value: str, decided_by: str) -> None:
        """Store the value for a pending request (first answer wins)."""
        request = self._get(request_id)
        value = check_value(value)  # a bad value is the approver's to fix: the request stays pending
        del self.pending[request.id]  # taken: a second answer while storing finds nothing
        request.storing = True
        # its outcome is recorded when the store ends, even when this answer's handler is cancelled
        # first (scvd stopping): a thread cannot be stopped, and the value may be stored after all
        store = secrets_mod.off_loop(self._store, request.key, value)
        self.storing.add(store)
        store.add_done_callback(lambda done: self._stored(request, decided_by, done))
        try:
            await asyncio.shield(store)
        except Exception as exc:  # the approver reads why, as the call does (a config error was `internal`)
            raise errors.Failed(f"{request.key} could not be stored: {_why(exc)}") from None

    def _stored(self, request: SecretRequest, decided_by: str, done: asyncio.Future[Any]) -> None:
        self.storing.discard(done)
        exc = done.exception() if not done.cancelled() else asyncio.CancelledError()
        if exc is not None:  # whatever it is, the call ends now, not at the timeout
            why = _why(exc)
            self._finish(request, "failed", decided_by, errors.Failed(
                f"{request.key} could not be stored: {why}"), reason=why)
            return
        entry, stored_at = done.result()
        self._finish(request, "stored", decided_by, None, entry=entry)
        self._on_stored(request.key, stored_at)

    def _store(self, key: str, value: str) -> tuple[Any, float]:
        """Store it; and when (monotonic) the store held it: a later read finds it."""
        entry = self.store.set(key, value)
        return entry, time.monotonic()

    def decline(self, request_id: str, reason: str | None, decided_by: str) -> None:
        request = self._get(request_id, answer=False)
        why = f": {reason}" if reason else ""
        self._finish(request, "declined", decided_by,
                     errors.Denied(f"{decided_by or 'the approver'} declined to enter {request.key}{why}"),
                     reason=reason)

    def watching(self, conn: Any) -> None:
        """A connection started watching: it is asked too, for every request still pending."""
        for request in list(self.pending.values()):
            if not self._timed_out(request):
                self._ask_also(request, conn)

    def _ask_also(self, request: SecretRequest, conn: Any) -> None:
        if conn not in request.targets and not conn.closed:
            request.targets.append(conn)
            self._send(conn, _requested(request))

    def drop_connection(self, conn: Any) -> None:
        """A connection left: it is no longer asked; a request nobody is left to answer fails."""
        for request in list(self.pending.values()):
            if conn in request.targets:
                request.targets.remove(conn)
                if not request.targets:  # a watcher whose watching() has yet to come is asked now, not lost
                    for other in self._approvers(request.session):
                        if other is not conn:
                            self._ask_also(request, other)
                if not request.targets:  # its secret.resolved reaches nobody: the call's error says it all
                    key = request.key
                    self._finish(request, "cancelled_no_approver", None, errors.Unavailable(
                        f"nobody entered {key}: every approver asked for it disconnected before answering (a "
                        "closed terminal, a bridge that reconnected); run `scvctl approvals watch` in a terminal "
                        f"and call again, or store it yourself with `scvctl secrets set {key}`",
                        hint=f"scvctl secrets set {key}"))

    def _get(self, request_id: str, answer: bool = True) -> SecretRequest:
        request = self.pending.get(request_id)
        if request is None:
            raise errors.ApprovalNotFound(
                f"no pending secret request {request_id!r}; it may have been answered, declined or timed out")
        if self._timed_out(request):
            store = f"; store it with `scvctl secrets set {request.key}`" if answer else ""  # not to who declined
            raise errors.ApprovalNotFound(
                f"secret request {request_id} timed out before this {'answer' if answer else 'decline'} came "
                f"(the machine slept through approvals.timeout_seconds){store}")
        return request

    def _timed_out(self, request: SecretRequest) -> bool:
        """End a request whose deadline passed while the machine slept (the loop's timer is late)."""
        if request.deadline > awake.clock():
            return False
        self._finish(request, *self._late(request))
        return True

    def _finish(self, request: SecretRequest, state: str, decided_by: str | None, error: BaseException | None,
                *, reason: str | None = None, entry: Any = None) -> None:
        self.pending.pop(request.id, None)
        if request.future.done():
            if state == "stored":  # after the call gave up waiting (it ended `failed`): stored all the same
                log.info("secret request %s: %s stored late, after its call ended", request.id, request.key)
                self._audit("secret_resolved", request_id=request.id, key=request.key, session=request.session,
                            call_id=request.call_id, state="stored_late", decided_by=decided_by,
                            source=entry.source if entry is not None else None)
            return
        if error is None:
            request.future.set_result(entry)
        elif state == "cancelled":
            request.future.cancel()  # nobody waits for it any more
        else:
            request.future.set_exception(error)
        log.info("secret request %s: %s %s%s", request.id, request.key, state,
                 f" by {decided_by}" if decided_by else "")
        self._audit("secret_resolved", request_id=request.id, key=request.key, session=request.session,
                    call_id=request.call_id, state=state, decided_by=decided_by,
                    source=entry.source if entry is not None else None)
        event = p.SecretResolved(seq=0, request_id=request.id, key=request.key, state=state, reason=reason,
                                 decided_by=decided_by or "")
        for conn in request.targets:
            self._send(conn, event)


def _why(exc: BaseException) -> str:
    """Why a store failed: our message, else only the exception's type (never a value)."""
    return exc.message if isinstance(exc, errors.ScvError) else type(exc).__name__


def _requested(request: SecretRequest) -> p.SecretRequested:
    return p.SecretRequested(seq=0, request_id=request.id, session=request.session, call_id=request.call_id,
                             key=request.key, question=request.question, tool=request.tool,
                             expires_at=request.expires_at)
