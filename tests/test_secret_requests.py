"""SecretRequests without sockets (h11-style): a real SecretStore, connections as plain objects.

A request must end once and at once whatever storing the value does: an answer
that cannot be stored fails the call now, never leaves it waiting for a timeout.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest

from scvd import awake, errors, protocol as p
from scvd.secret_requests import SecretRequests
from scvd.secrets import SecretStore


class Conn:
    closed = False


def requests_for(store: SecretStore, sent: list[tuple[Any, p.Frame]], audit: list[dict]) -> SecretRequests:
    conn = Conn()
    return SecretRequests(store, approvers=lambda session: [conn], send=lambda c, e: sent.append((c, e)),
                          timeout=lambda: 3600, audit=lambda event, **f: audit.append({"event": event, **f}))


def test_an_answer_that_cannot_be_stored_fails_the_call_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("PYTHON_KEYRING_BACKEND", "keyring.backends.null.Keyring")
    path = tmp_path / "conf" / "secrets.toml"
    path.mkdir(parents=True)  # a directory where the file belongs: reading and writing it fail
    sent: list[tuple[Any, p.Frame]] = []
    audit: list[dict] = []
    requests = requests_for(SecretStore(path, env={}), sent, audit)

    async def scenario() -> tuple[BaseException | None, BaseException | None]:
        ask = asyncio.create_task(requests.ask(session="s1", call_id="c1", key="API_TOKEN", question="", tool="t"))
        while not sent:
            await asyncio.sleep(0)
        request_id = sent[0][1].request_id
        provided = None
        try:
            await requests.provide(request_id, "typed-value-77", decided_by="person")
        except BaseException as exc:  # noqa: BLE001 - the test looks at it
            provided = exc
        for _ in range(3):
            await asyncio.sleep(0)
        if not ask.done():  # it would wait for the 3600 s timeout
            ask.cancel()
            return provided, None
        return provided, ask.exception()

    provided, asked = asyncio.run(scenario())
    assert isinstance(provided, errors.Failed) and provided.message.startswith(f"API_TOKEN could not be stored: {path}")
    assert isinstance(asked, errors.Failed) and "API_TOKEN could not be stored" in asked.message
    assert str(path) in asked.message and "typed-value-77" not in asked.message
    resolved = [e for _, e in sent if isinstance(e, p.SecretResolved)]
    assert [e.state for e in resolved] == ["failed"] and not requests.pending
    assert [a["state"] for a in audit if a["event"] == "secret_resolved"] == ["failed"]
    assert "typed-value-77" not in repr(sent) + repr(audit)


class SlowStore(SecretStore):
    """A real store whose `set` waits until the test lets it go on (a keyring answering late)."""

    def __init__(self, path: Path) -> None:
        super().__init__(path, env={}, use_keyring=False)
        self.go_on = threading.Event()

    def set(self, key: str, value: str) -> Any:
        assert self.go_on.wait(10)
        return super().set(key, value)


def test_a_call_cancelled_while_its_value_is_stored_leaves_the_stored_outcome_recorded(tmp_path: Path):
    store = SlowStore(tmp_path / "secrets.toml")
    sent: list[tuple[Any, p.Frame]] = []
    audit: list[dict] = []
    requests = requests_for(store, sent, audit)

    async def scenario() -> None:
        ask = asyncio.create_task(requests.ask(session="s1", call_id="c1", key="API_TOKEN", question="", tool="t"))
        while not sent:
            await asyncio.sleep(0)
        provide = asyncio.create_task(requests.provide(sent[0][1].request_id, "typed-value-77", decided_by="p"))
        await asyncio.sleep(0.05)  # the value is in the store's hands
        ask.cancel()
        with pytest.raises(asyncio.CancelledError):
            await ask
        store.go_on.set()
        await provide

    asyncio.run(scenario())
    assert "typed-value-77" in (tmp_path / "secrets.toml").read_text()
    assert [a["state"] for a in audit if a["event"] == "secret_resolved"] == ["stored"]
    assert [e.state for _, e in sent if isinstance(e, p.SecretResolved)] == ["stored"]


def test_an_answer_after_the_expiry_is_refused_though_the_loop_slept_through_it(tmp_path: Path, monkeypatch):
    """The loop's clock stops while the machine sleeps: after a resume a request its approver was
    shown as expired (`expires_at`) stayed pending for up to its whole timeout again, and an answer
    then was stored and the call went on hours late. It times out instead, as an approval does."""
    sent: list[tuple[Any, p.Frame]] = []
    audit: list[dict] = []
    conn = Conn()
    requests = SecretRequests(SecretStore(tmp_path / "secrets.toml", env={}, use_keyring=False),
                              approvers=lambda session: [conn], send=lambda c, e: sent.append((c, e)),
                              timeout=lambda: 60, audit=lambda event, **f: audit.append({"event": event, **f}))

    async def scenario() -> tuple[BaseException, BaseException | None, list[p.Frame]]:
        asks = [asyncio.create_task(requests.ask(session="s1", call_id=f"c{i}", key=f"TOKEN_{i}", question="",
                                                 tool="t")) for i in (1, 2)]
        while len(sent) < 2:
            await asyncio.sleep(0)
        first = sent[0][1]
        slept = awake.clock() + 3600  # an hour of suspend: the boot clock went on, the loop's did not
        monkeypatch.setattr(awake, "clock", lambda: slept)
        with pytest.raises(errors.ApprovalNotFound) as info:
            await requests.provide(first.request_id, "typed-value-77", decided_by="person")
        watcher = Conn()
        before = len(sent)
        requests.watching(watcher)  # a watcher starting now is not asked for the other one either
        asked_watcher = [e for c, e in sent[before:] if c is watcher]
        done = await asyncio.gather(*asks, return_exceptions=True)
        return info.value, done[0], asked_watcher + [done[1]]

    refused, first_call, rest = asyncio.run(scenario())
    assert refused.message.startswith("secret request s-") and "timed out before this answer came" in refused.message
    assert "scvctl secrets set TOKEN_1" in refused.message
    assert isinstance(first_call, errors.Denied)
    assert first_call.message.startswith("nobody entered TOKEN_1 within approvals.timeout_seconds (60 s)")
    assert len(rest) == 1 and isinstance(rest[0], errors.Denied)  # no secret.requested to the watcher
    assert not (tmp_path / "secrets.toml").exists() and not requests.pending
    assert [e.state for _, e in sent if isinstance(e, p.SecretResolved)] == ["timed_out", "timed_out"]
    assert [a["state"] for a in audit if a["event"] == "secret_resolved"] == ["timed_out", "timed_out"]


def test_the_last_approver_leaving_as_another_starts_watching_leaves_the_request_to_the_new_one(tmp_path: Path):
    """The server marks a connection a watcher at once and asks it for the pending requests a loop turn
    later: the last approver asked leaving in between (a bridge reconnecting) failed the call with a
    watcher connected."""
    live = [Conn()]
    sent: list[tuple[Any, p.Frame]] = []
    requests = SecretRequests(SecretStore(tmp_path / "secrets.toml", env={}, use_keyring=False),
                              approvers=lambda session: list(live), send=lambda c, e: sent.append((c, e)),
                              timeout=lambda: 3600, audit=lambda event, **f: None)

    async def scenario() -> None:
        ask = asyncio.create_task(requests.ask(session="s1", call_id="c1", key="API_TOKEN", question="", tool="t"))
        while not sent:
            await asyncio.sleep(0)
        old, new = live[0], Conn()
        live[:] = [new]  # the new watcher is listed; its watching() has not run yet
        requests.drop_connection(old)
        requests.watching(new)
        assert not ask.done() and [(c, type(e)) for c, e in sent[1:]] == [(new, p.SecretRequested)]
        await requests.provide(sent[1][1].request_id, "typed", decided_by="person")
        assert (await ask).source == "file"

    asyncio.run(scenario())
