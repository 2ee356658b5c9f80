"""store_secret's count of rounds, in process: the real tool and real SecretRequests, a person who declines.

A chat session lives for days, one turn after another: its count must keep two rounds
per tool per turn (an hour per tool without a turn) and still not grow by a turn each turn.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from scvd import awake, errors, protocol as p
from scvd.secret_requests import SecretRequests
from scvd.secrets import SecretStore
from scvd.tools import store_secret
from scvd.tools.contract import CallContext


class Approver:
    closed = False


class Person:
    """The real tool and request table; every prompt it is sent, the person declines."""

    def __init__(self, tmp_path: Path) -> None:
        self.tool = store_secret.StoreSecret()  # no registry: any tool name is taken
        self.requests = SecretRequests(SecretStore(tmp_path / "secrets.toml", env={}, use_keyring=False),
                                       approvers=lambda session: [Approver()], send=self._decline,
                                       timeout=lambda: None, audit=lambda event, **fields: None)
        self.services: dict[str, Any] = {store_secret.REQUESTS_SERVICE: self.requests,
                                          **self.tool.session_services(None, None, None)}
        self.workspace = tmp_path

    @property
    def rounds(self) -> dict[Any, Any]:
        return self.services[store_secret.ROUNDS_SERVICE]

    def _decline(self, conn: Any, event: p.Frame) -> None:
        if isinstance(event, p.SecretRequested):
            asyncio.get_running_loop().call_soon(self.requests.decline, event.request_id, "not now", "person")

    async def ask(self, tool: str, turn: str | None) -> str:
        """How the round ended: `asked` (the person was asked, and declined) or `limit`."""
        ctx = CallContext(call_id="c1", session_id="s1", workspace=self.workspace, workspace_fd=-1, config=None,
                          paths=None, services=self.services, turn=turn)
        args = self.tool.decode({"key": "API_TOKEN", "tool": tool})
        try:
            await self.tool.run(args, self.tool.plan(args, ctx), ctx)
        except errors.Denied:
            return "asked"
        except errors.LimitExceeded:
            return "limit"
        raise AssertionError("the person declines every prompt")


@pytest.fixture
def person(tmp_path: Path) -> Person:
    return Person(tmp_path)


def test_a_chat_that_runs_for_many_turns_keeps_two_rounds_a_turn_and_a_bounded_count(person: Person):
    async def scenario() -> None:
        for n in range(300):
            turn = f"t{n}"
            assert [await person.ask("script_gh", turn) for _ in range(3)] == ["asked", "asked", "limit"]
            assert await person.ask("script_aws", turn) == "asked"  # two per tool, not per turn
            assert set(person.rounds) == {(turn, "script_gh"), (turn, "script_aws")}

    asyncio.run(scenario())


def test_calls_without_a_turn_keep_their_hour_and_are_forgotten_after_it(person: Person,
                                                                          monkeypatch: pytest.MonkeyPatch):
    now = [1000.0]
    monkeypatch.setattr(awake, "clock", lambda: now[0])

    async def scenario() -> None:
        assert [await person.ask("script_gh", None) for _ in range(3)] == ["asked", "asked", "limit"]
        # turns come and go: the hour of the calls without one is not forgotten with them
        for n in range(5):
            assert await person.ask("script_gh", f"t{n}") == "asked"
        now[0] += store_secret.WINDOW_SECONDS - 1
        assert await person.ask("script_gh", None) == "limit"
        assert await person.ask("script_gh", "t4") == "asked"  # nor a turn's count by a call without one
        assert await person.ask("script_gh", "t4") == "limit"
        for n in range(100):  # a model naming tool after tool, an hour's two rounds each
            assert await person.ask(f"script_{n}", None) == "asked"
        now[0] += 1
        assert await person.ask("script_gh", None) == "asked"  # its hour is over
        now[0] += store_secret.WINDOW_SECONDS
        assert await person.ask("script_gh", None) == "asked"
        assert set(person.rounds) == {(None, "script_gh"), ("t4", "script_gh")}

    asyncio.run(scenario())
