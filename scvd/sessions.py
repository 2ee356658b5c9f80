"""Sessions and their call lanes. No I/O beyond holding the workspace fd; no tool names.

Rules of a lane:
- Calls start in arrival order.
- A call may start when every earlier call still holding the lane has finished,
  except that consecutive `concurrent` calls run together.
- A `background` call waits for its turn like any other, then stops holding the
  lane as soon as it has started.
- A cancelled call leaves the lane at once, wherever it was.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import msgspec

from . import errors

if TYPE_CHECKING:
    from .config import Config
    from .tools.contract import Registry


class Ticket(msgspec.Struct, eq=False):
    """A call's place in its session's lane."""

    concurrent: bool
    background: bool
    ready: asyncio.Event | None = None  # what enter() waits on; None for a ticket that started at once
    started: bool = False
    waited: bool = False  # it could not start at once: someone held the lane


class Lane:
    """Orders a session's calls: serial, with runs of concurrent calls together.

    Leaving is synchronous on purpose: it runs in `finally` blocks of cancelled
    calls, where another await could be cancelled again and lose the wake-up.
    """

    def __init__(self) -> None:
        self._tickets: list[Ticket] = []

    async def enter(self, *, concurrent: bool, background: bool = False) -> Ticket:
        """Wait for this call's turn; the caller must `leave()` the ticket in a finally."""
        ticket = self.join(concurrent=concurrent, background=background)
        await self.wait(ticket)
        return ticket

    def join(self, *, concurrent: bool, background: bool = False) -> Ticket:
        """enter()'s first half, without waiting: the call's place in arrival order, taken now.
        `wait()` it later; the caller must `leave()` it in a finally either way."""
        ticket = Ticket(concurrent=concurrent, background=background, ready=asyncio.Event())
        self._tickets.append(ticket)
        self._wake()
        ticket.waited = not ticket.ready.is_set()  # type: ignore[union-attr]
        return ticket

    async def wait(self, ticket: Ticket) -> None:
        """enter()'s second half: until the joined `ticket` may start."""
        try:
            await ticket.ready.wait()  # type: ignore[union-attr]
        except BaseException:
            self.leave(ticket)
            raise
        ticket.started = True
        if ticket.background:
            self.leave(ticket)  # a background call does not hold the lane

    def try_enter(self, *, concurrent: bool) -> Ticket | None:
        """enter() for a call that can start at once (not a background one): its ticket, else None
        (and nothing changed: the caller joins now, to keep its place, and waits later)."""
        for other in self._tickets:
            if not (concurrent and other.concurrent):
                return None
        ticket = Ticket(concurrent=concurrent, background=False, started=True)
        self._tickets.append(ticket)
        return ticket

    def leave(self, ticket: Ticket) -> None:
        if ticket in self._tickets:
            self._tickets.remove(ticket)
            self._wake()

    def _wake(self) -> None:
        """Let start the tickets that may: the first, and the concurrent ones right after a concurrent
        first. Those are a run at the front, so the walk ends at the first that may not: a walk of
        the whole lane at each leave made the 256 calls of a closed session cost 32,000 steps."""
        tickets = self._tickets
        if not tickets:  # a read's: it left an empty lane
            return
        first = tickets[0]
        for ticket in tickets:
            if ticket is not first and not (ticket.concurrent and first.concurrent):
                return
            ready = ticket.ready
            if ready is not None and not ready.is_set():
                ready.set()

    @property
    def depth(self) -> int:
        return len(self._tickets)


_session_counter = itertools.count(1)


class Owner(Protocol):
    """Who holds sessions: a client connection, or an in-daemon caller (e.g. the chat loop)."""

    client: str  # a name for listings
    approver: bool  # whether its calls' approval requests go to it
    sessions: dict[str, Any]  # its open sessions, by id
    call_bytes: int  # what its calls not completed count of the call budget (call_budget.py)
    calls_held: int  # its calls not completed, across its sessions: server.max_calls_per_connection


@dataclass(eq=False)
class Session:
    """A workspace held open by one connection, with its own lane, grants and config."""

    id: str
    workspace: Path
    workspace_fd: int
    owner: Owner  # the connection that opened it: the session's events go to it
    config: Config  # the config snapshot in force when it opened
    registry: Registry  # the tool registry built from that config
    # `workspace` as session.open was given it, never resolved: a link on the way (/home -> /var/home)
    # is how the client knows it, and writes paths in it (an agent's absolute cwd); "" when unknown
    given: str = ""
    opened_at: float = field(default_factory=time.time)
    lane: Lane = field(default_factory=Lane)
    # (tool, risk, sandboxed) granted for the session: a grant made for a sandboxed call does not
    # cover the same tool unsandboxed (a reload may turn the sandbox off under an open session)
    grants: set[tuple[str, str, bool]] = field(default_factory=set)
    call_count: int = 0
    held: int = 0  # calls accepted and not completed yet (queued, waiting or running): server.max_calls_per_session
    # revoke()s so far, and each tool's last with why: a decision made before one must not grant or run
    revision: int = 0
    revoked: dict[str, tuple[int, str]] = field(default_factory=dict)
    services: dict[str, Any] = field(default_factory=dict)
    closed: bool = False
    identity: tuple[int, int] = field(init=False, default=(0, 0))  # (st_dev, st_ino) of the directory held open
    where: str = field(init=False, default="")  # `workspace` as a str: every call stats it (no Path.__fspath__)

    def __post_init__(self) -> None:
        held = os.fstat(self.workspace_fd)
        self.identity = (held.st_dev, held.st_ino)
        self.where = os.fspath(self.workspace)

    def check_workspace(self) -> None:
        """Refuse a call once `workspace` names another directory than the one held open (moved away,
        or deleted and made again): file tools would use the old one, processes the new one."""
        try:
            now = os.stat(self.where)
        except OSError:
            now = None
        if now is None or (now.st_dev, now.st_ino) != self.identity:
            what = "is gone" if now is None else "is another directory now"
            raise errors.Failed(
                f"the workspace {self.workspace} {what}: it was moved, or deleted and made again, since "
                "this session opened; open a new session on it (session.open) to work there",
                hint="a file tool would use the old directory and a command the new one")

    def grant(self, tool: str, risk: str, sandboxed: bool = False) -> None:
        self.grants.add((tool, risk, sandboxed))

    def revoke(self, tools: set[str], why: str) -> None:
        """Drop the grants of these tools (their MCP server was replaced: another program now)."""
        self.grants = {g for g in self.grants if g[0] not in tools}
        self.revision += 1
        for tool in tools:
            self.revoked[tool] = (self.revision, why)

    def revoked_since(self, tool: str, revision: int) -> str | None:
        """Why `tool` was revoked after `revision` (a decision made before that is void), or None."""
        found = self.revoked.get(tool)
        return found[1] if found is not None and found[0] > revision else None

    def granted(self, tool: str, risk: str, sandboxed: bool = False) -> bool:
        """Whether a grant covers the call: one made unsandboxed covers it sandboxed too, not the reverse."""
        return (tool, risk, False) in self.grants or (sandboxed and (tool, risk, True) in self.grants)

    def close(self) -> None:
        """Release the workspace fd (the calls registry cancels the session's calls first)."""
        if self.closed:
            return
        self.closed = True
        try:
            os.close(self.workspace_fd)
        except OSError:
            pass


def open_workspace(workspace: str) -> tuple[Path, int]:
    """Validate a workspace path and open it as a directory fd; refuse with the reason."""
    if not workspace:
        raise errors.InvalidRequest("session.open needs `workspace`: an absolute path to a directory")
    path = Path(workspace)
    if not path.is_absolute():
        # scvd's own directory (~ under systemd, / as --daemon) is not the client's: never guess from it
        raise errors.InvalidRequest(f"workspace {workspace!r} is relative; send an absolute path (resolve it "
                                    "against the client's own current directory before sending)")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise errors.InvalidRequest(f"workspace {workspace!r} does not exist; create it first") from None
    except NotADirectoryError:
        raise errors.InvalidRequest(f"workspace {workspace!r} is not a directory") from None
    except PermissionError:
        raise errors.InvalidRequest(
            f"workspace {workspace!r} is not readable by scvd (Permission denied): give the user scvd runs as "
            "read and search permission on it and the folders above it, or choose another directory") from None
    except (OSError, ValueError) as exc:  # a NUL byte, a symlink loop, a name too long: the peer's path
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise errors.InvalidRequest(f"workspace {workspace!r} cannot be opened: {reason}") from None
    return Path(os.path.realpath(path)), fd


def new_session_id() -> str:
    return f"s{next(_session_counter)}-{os.urandom(4).hex()}"
