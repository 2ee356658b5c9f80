"""Approval policies and the approval gate. No I/O and no tool names here.

Rules:
- `policy_verdict()` decides from the policy, the call's planned risk and
  isolation and the session's grants whether a call runs, asks, or is denied.
- A request is PENDING until the first of: a decision, its timeout (denied), the
  call's cancellation, its requester's disconnect, or `screen` refusing it when a
  connection that could decide left (`rescreen()`, denied as a new request would be). `TRANSITIONS` is the whole
  state machine: every move goes through `Approval.move(event)`, and a move the
  table lacks raises `approval_not_found` naming the state and the event (a late
  decision gets exactly that, and a decision on one that ended lately is told
  what became of it: `ENDED_KEPT` are remembered). Every change is reported through `on_event`,
  which the server routes to the owner connection (if it approves) and all watchers.
- The timeout is counted on a clock that goes on while the machine sleeps
  (`awake.clock`; the loop's timers stop then), as the `expires_at` shown to the
  approver does: a decision that comes after it, or a listing, expires the request
  instead, and its `awake.Timer` looks again at least every minute.
- A `session` grant covers one tool at one risk for the rest of one session;
  one given to a sandboxed call covers only sandboxed calls of that tool. The
  session's requests already waiting that it covers are approved with it
  (`approve_covered()`), in the grant's decider's name.
- A call that always asks (a sensitive target, `always_ask.py`) is asked whatever
  grant or policy would run it, and its request is approved once only: a
  `session` scope given to it is recorded as `once`.
- Every pending request, and all of them together (`approvals.list`), fit in
  one server frame: an approver is shown a request whole or it never opens.
- One owner (a connection, whatever sessions it holds) has at most three quarters
  of `max_pending` and of that frame waiting: one runaway client leaves the
  others' calls room to be asked. Past that a request is refused with `limit`.
- A request refused for want of room (`Full`: the whole gate's or its connection's
  share) is told what to do by the `remedy` hook if it says (a chat turn's model
  can neither have requests decided nor send call.cancel), else `REMEDIES`.
"""

from __future__ import annotations

import asyncio
import enum
import functools
import itertools
import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import msgspec

from . import awake, errors
from .always_ask import in_git_dir
from .host_places import HOME_DIR, RUNS, home_place, real_home
from .notify import systemd_cgroup
from .own_places import LOOKUP, ROOT, TOOL, Place, of
from .paths import within
from .text import excerpt, printable, printable_data, quoted_name
from .proctree import read_stat
from .protocol import DEFAULT_SERVER_FRAME_LIMIT, ApprovalInfo, ApprovalResolved, Frame, approval_requested, encode
from .tools.contract import Plan, ToolRisk

POLICIES = ("on-risk", "always", "never", "sandbox-aware")
# the one policy that asks before a read-only call too (no grant, no always_allow); a str compared, not a
# set looked in: policy_verdict runs for every read, and the set cost it about 110 instructions more
READS_ASK_POLICY = "always"


class Verdict(str, enum.Enum):
    RUN = "run"  # runs without asking
    ASK = "ask"  # waits for a person
    DENY = "deny"  # refused by policy, nobody is asked


# an Enum class's members read through EnumType.__getattr__ on 3.11 (about 1k instructions each): once here
_RUN, _ASK, _DENY = Verdict.RUN, Verdict.ASK, Verdict.DENY
_READ_ONLY = ToolRisk.READ_ONLY


class ApprovalState(str, enum.Enum):
    PENDING = "pending"  # waiting for a decision
    APPROVED = "approved"  # a person approved it
    DENIED = "denied"  # a person denied it
    EXPIRED = "expired"  # nobody decided within approvals.timeout_seconds: counts as denied
    CANCELLED = "cancelled"  # the call was cancelled while waiting
    DROPPED = "dropped"  # the requester disconnected


class ApprovalEvent(str, enum.Enum):
    APPROVE = "approve"  # a person approved
    DENY = "deny"  # a person denied
    EXPIRE = "expire"  # approvals.timeout_seconds passed
    CANCEL = "cancel"  # the call was cancelled (call.cancel, session close, shutdown)
    DROP = "drop"  # the requesting client disconnected


_S, _E = ApprovalState, ApprovalEvent
ENDED_KEPT = 256  # requests that ended, remembered (each in at most ENDED_CHARS) to tell a late decider why
ENDED_CHARS = 500
FRAME_ENVELOPE = 1024  # of a frame beside its requests: type, id or seq, brackets
# (state, event) -> next state; only PENDING moves, and only once
TRANSITIONS: dict[tuple[ApprovalState, ApprovalEvent], ApprovalState] = {
    (_S.PENDING, _E.APPROVE): _S.APPROVED,
    (_S.PENDING, _E.DENY): _S.DENIED,
    (_S.PENDING, _E.EXPIRE): _S.EXPIRED,
    (_S.PENDING, _E.CANCEL): _S.CANCELLED,
    (_S.PENDING, _E.DROP): _S.DROPPED,
}


def policy_verdict(
    policy: str,
    plan: Plan,
    *,
    always_allow: bool,
    granted: bool,
    sandbox_active: bool,
    always_asks: bool = False,
) -> Verdict:
    """Whether a planned call runs, asks, or is denied under `policy`."""
    read_only = plan.risk is _READ_ONLY
    if read_only and (always_allow or policy != READS_ASK_POLICY):
        return _RUN
    if policy == "never":
        return _DENY
    if always_asks:
        return _ASK
    if granted:
        return _RUN
    if policy == "sandbox-aware" and sandbox_active and contained(plan):
        return _RUN
    return _ASK


@functools.lru_cache(maxsize=256)  # asked at many calls: one answer per workspace, not a realpath each time
def holds_home(workspace: str, home: str | None = None) -> bool:
    """True when `workspace` is the user's home or a directory above it (`/`, `/home`).

    Its dotfiles run code outside any sandbox later (`.bashrc` at the next shell,
    `.gitconfig`'s core.fsmonitor at every git call, `.config/systemd/user`), so
    sandbox-aware asks for every call there, as the policy does without a sandbox.
    """
    home = real_home(home)
    ws = workspace.rstrip("/") or "/"  # a session's workspace is a real path already
    return home == ws or home.startswith(ws.rstrip("/") + "/")


@functools.lru_cache(maxsize=256)
def exposes_host(workspace: str, own: tuple[Place, ...] = (), home: str | None = None,
                 host: frozenset[Place] = frozenset()) -> bool:
    """True when the files of `workspace` configure scvd or run code outside the sandbox later:
    it holds the home (`holds_home`), or it is at or inside one of the home's places whose files
    run later (host_places.home_place: a dot folder such as .config, .local or .ssh, or one of
    `host`'s HOME_DIR places: those, XDG_CONFIG_HOME and XDG_DATA_HOME where they really are), or
    above one (one that lies outside the home, or a link from the home into a dotfiles repository,
    or any link on the way: `host`'s LOOKUP places), or at or inside one of scvd's own folders (`own`:
    own_places; a config.toml there starts MCP servers unsandboxed) or a folder a loaded tool runs
    from (a script tool's: its `run` runs later, unasked if read_only), or it holds one of them or a
    config file scvd reads (`--config`'s), at any depth, or a link on the way to one: the sandbox
    hides its folders, but a call can rename a directory above them, or replace the link, and
    plant its own where scvd looks at its next start. Likewise the places outside it whose files
    run later (`host`: host_places; scvd's PATH, its Python, bwrap, agent CLIs, MCP commands, the
    home's dotfile links): at or inside one, or holding one or a link on the way. Or it is a git
    directory or inside one (the sandbox guards WS/.git, not the workspace itself: its hooks and
    config). sandbox-aware asks for every call there.
    """
    home = real_home(home)
    if holds_home(workspace, home):
        return True
    ws = workspace.rstrip("/") or "/"
    return (home_place(ws, home, of(host, HOME_DIR)) is not None
            or any(within(ws, d) for d in of(own, ROOT, TOOL) + of(host, RUNS)) or in_git_dir(ws)
            # LOOKUP holds the real path of each ROOT, TOOL, CONFIG, RUNS and HOME_DIR place too (paths.lookup_dirs)
            or any(within(d, ws) for d in of(own, LOOKUP) + of(host, LOOKUP)))


GIT_LINK_ASKS = ("{git} is a symbolic link: the sandbox keeps where it leads read-only, not the link, which a call "
                 "could replace with a .git of its own (a core.fsmonitor your next `git status` there runs); so "
                 "every call there asks")


def git_link(workspace: str) -> bool:
    """True when WS/.git is a symbolic link. The sandbox keeps read-only where it leads, not the link: an
    entry of the writable workspace, which a call can replace with a `.git` of its own (a core.fsmonitor
    that the user's next `git status` there runs). One lstat, per call: a link made since counts at once."""
    return os.path.islink(os.path.join(workspace, ".git"))


def contained(plan: Plan) -> bool:
    """A call the sandbox-aware policy may run unasked: sandboxed, offline, writes in the workspace.

    Such a call gets the workspace's git metadata read-only (sandbox.build_argv), but can
    still change workspace files that other tools run later (.envrc, .vscode/, build scripts).
    """
    return plan.sandboxed and not plan.network and plan.writes_confined


SANDBOX_AWARE_LEAVES = (
    "unasked sandboxed calls keep git metadata read-only but can still change workspace files "
    "that tools run later (.envrc, .vscode/, build scripts)"
)


def policy_note(policy: str, sandbox_active: bool) -> str:
    """A line for `status` when a policy does less than its name says."""
    if policy == "sandbox-aware" and not sandbox_active:
        return "sandbox-aware acts as on-risk: the sandbox is not active (set sandbox.mode)"
    if policy == "sandbox-aware":
        return SANDBOX_AWARE_LEAVES
    return ""


@dataclass(frozen=True)
class Decider:
    """Who asked or decided: the peer's pid and uid, the client name it gave, and whether scvd started it."""

    pid: int
    uid: int
    client: str
    spawned: bool = False  # a tool's or agent's process: it may ask, never decide

    def label(self) -> str:
        """`"scvctl" (pid 4242, uid 1000)`: the name is the peer's own words, so it is quoted."""
        name = quoted_name(self.client) if self.client else "a client with no name"
        started = ", a process scvd started" if self.spawned else ""
        return f"{name} (pid {self.pid}, uid {self.uid}{started})"


@dataclass
class Approval:
    """One request for a person's decision."""

    info: ApprovalInfo
    owner: Any  # the requesting connection; opaque here
    future: asyncio.Future[bool]
    state: ApprovalState = ApprovalState.PENDING
    reason: str | None = None
    scope: str = "once"
    decided_by: Decider | None = None
    covered_by: str | None = None  # approved by another request's session grant: no person saw this one
    timer: awake.Timer | None = None  # its expiry
    size: int = 0  # bytes of `info` on the wire

    @property
    def id(self) -> str:
        return self.info.approval_id

    def move(self, event: ApprovalEvent) -> ApprovalState:
        """Take `event` per TRANSITIONS; a move the table lacks raises, naming state and event."""
        new = TRANSITIONS.get((self.state, event))
        if new is None:
            raise errors.ApprovalNotFound(
                f"approval {self.id} is {self.state.value}; it cannot take {event.value!r} "
                "(only a pending approval moves, once)"
            )
        self.state = new
        return new

    def ending(self) -> str:
        """What became of it, as the call and a late decider are told: `approval a1-... was denied by
        "scvctl" (pid 4242, uid 1000): not now`."""
        who = f" by {self.decided_by.label()}" if self.decided_by else ""
        why = f": {self.reason}" if self.reason else ""
        return f"approval {self.id} was {self.state.value}{who}{why}"


class Full(str, enum.Enum):
    """What had no room for a request."""

    GATE = "gate"  # approvals.max_pending, or one approvals.list frame
    SHARE = "share"  # its connection's three quarters of either


# what a socket client refused for want of room is told to do
REMEDIES = {
    Full.GATE: "decide the pending ones first",
    Full.SHARE: ("have those decided (scvctl approvals), or cancel the calls you no longer need (call.cancel), "
                 "then send it again"),
}

EventSink = Callable[[str, Approval], None]  # ("requested" | "resolved", approval)


@dataclass
class ApprovalGate:
    """Pending approvals; decisions resolve the waiting call's future."""

    timeout_seconds: float
    on_event: EventSink
    max_pending: int = 256
    max_bytes: int = DEFAULT_SERVER_FRAME_LIMIT  # what one frame to every approver may carry
    max_bytes_from: str = "server.server_frame_bytes"  # where max_bytes comes from, for the messages
    # called with (owner, info) before a request opens; may raise Denied (the chat loop refuses
    # a turn's request that no connection could decide, rather than let it wait unseen)
    screen: Callable[[Any, dict[str, Any]], None] | None = None
    # called with a request's info and what was full: what to do instead of REMEDIES[full], or None
    # (a chat turn's model can neither have requests decided nor send call.cancel)
    remedy: Callable[[dict[str, Any], Full], str | None] | None = None
    pending: dict[str, Approval] = field(default_factory=dict)
    ended: dict[str, str] = field(default_factory=dict)  # the last ENDED_KEPT that ended: Approval.ending()
    _counter: Any = field(default_factory=lambda: itertools.count(1))

    def request(self, owner: Any, **info: Any) -> Approval:
        """Open a request; the caller awaits `approval.future` (True = approved)."""
        if self.screen is not None:
            self.screen(owner, info)
        self._sweep()
        if len(self.pending) >= self.max_pending:
            raise errors.LimitExceeded(  # a limit, as the connection's share below: no person denied it
                f"{len(self.pending)} approvals are already waiting (approvals.max_pending); "
                f"this call was refused without asking: {self._remedy(info, Full.GATE)}")
        # one runaway connection (a model asking for hundreds of reads at once, in one session or
        # several) leaves a quarter of the room, in count and in bytes, to the other connections:
        # their calls are still asked, not refused
        mine = [a for a in self.pending.values() if a.owner is owner]
        if len(mine) >= self.max_pending - self.max_pending // 4:
            raise errors.LimitExceeded(
                f"{len(mine)} approvals of this connection's sessions are already waiting, as many as one "
                "connection may hold (approvals.max_pending less a quarter kept for other connections); this "
                f"call was refused without asking: {self._remedy(info, Full.SHARE)}")
        loop = asyncio.get_running_loop()
        now = time.time()
        approval_id = f"a{next(self._counter)}-{os.urandom(3).hex()}"
        # every tool's summary and details, escaped here once, for scvctl and chat bridges alike
        info["summary"] = printable(info.get("summary", ""))
        info["details"] = printable_data(info.get("details", {}))
        record = ApprovalInfo(
            approval_id=approval_id, requested_at=now, expires_at=now + self.timeout_seconds, **info
        )
        size = len(encode(record))
        self._check_room(size, mine, info)
        approval = Approval(info=record, owner=owner, future=loop.create_future(), size=size)
        approval.timer = awake.Timer(awake.clock() + self.timeout_seconds, functools.partial(self._expire, approval_id))
        self.pending[approval_id] = approval
        self.on_event("requested", approval)
        return approval

    def decide(
        self, approval_id: str, approve: bool, *, decider: Decider, reason: str | None, scope: str
    ) -> Approval:
        """Apply a person's decision; the first one wins. One that comes after the request's expiry
        (the machine slept through it) expires it instead, and is refused."""
        approval = self._get(approval_id)
        if approval.timer is not None and approval.timer.due():
            self._expire(approval_id)
            raise errors.ApprovalNotFound(
                f"approval {approval_id} expired before this decision came: {approval.reason}")
        approval.decided_by = decider
        approval.scope = scope if approve and not approval.info.always_ask else "once"
        return self._resolve(approval, ApprovalEvent.APPROVE if approve else ApprovalEvent.DENY, reason)

    def approve_covered(self, grant: Approval, covers: Callable[[Approval], bool]) -> list[Approval]:
        """`grant` gave a `session` scope: approve its session's pending requests that `covers` (the
        check a new request goes through) now lets run, as decided by `grant`'s decider."""
        self._sweep()
        covered = [a for a in self.pending.values()
                   if a.info.session == grant.info.session and not a.info.always_ask and covers(a)]
        for approval in covered:
            approval.decided_by, approval.scope, approval.covered_by = grant.decided_by, "session", grant.id
            self._resolve(approval, ApprovalEvent.APPROVE, f"covered by the session grant of approval {grant.id}")
        return covered

    def cancel(self, approval_id: str, reason: str) -> None:
        """The call went away while waiting (cancel or session close)."""
        if approval_id in self.pending:
            self._resolve(self.pending[approval_id], ApprovalEvent.CANCEL, reason)

    def drop_owner(self, owner: Any) -> list[Approval]:
        """The requester disconnected: drop all its pending approvals."""
        mine = [a for a in self.pending.values() if a.owner is owner]
        for approval in mine:
            self._resolve(approval, ApprovalEvent.DROP, "the requesting client disconnected")
        return mine

    def refit(self) -> list[Approval]:
        """Deny the pending requests that no longer fit `max_bytes` (a reload lowered it): those too
        big for a frame, then the newest until the rest fit one approvals.list, as a new request would be."""
        room = self.max_bytes - FRAME_ENVELOPE
        limit = f"{self.max_bytes_from} = {self.max_bytes:,}, lowered by a reload"
        denied = [self._resolve(a, ApprovalEvent.DENY, (
            f"this call's approval request is {a.size:,} bytes, above what one frame now carries ({limit}), "
            "so a new approver could not see it whole; it was denied without a decision: send less"))
            for a in list(self.pending.values()) if a.size > room]
        for approval in reversed(list(self.pending.values())):
            waiting = sum(a.size + 1 for a in self.pending.values())
            if waiting <= room:
                break
            denied.append(self._resolve(approval, ApprovalEvent.DENY, (
                f"the pending approval requests take {waiting:,} bytes, more than one approvals.list frame now "
                f"carries ({limit}); the newest was denied without a decision: send it again")))
        return denied

    def withdraw(self, tools: set[str], reason: str) -> list[Approval]:
        """Deny the pending requests of these tools without a decision: what the approver was shown
        no longer describes what would run (an MCP server redefined or replaced the tool)."""
        return [self._resolve(a, ApprovalEvent.DENY, reason)
                for a in list(self.pending.values()) if a.info.tool in tools]

    def rescreen(self) -> list[Approval]:
        """Deny the pending requests `screen` would refuse now (a connection that could decide left),
        rather than let them wait out approvals.timeout_seconds; the screen's message is the reason."""
        if self.screen is None:
            return []
        denied = []
        for approval in list(self.pending.values()):
            try:
                self.screen(approval.owner, msgspec.structs.asdict(approval.info))
            except errors.Denied as exc:
                denied.append(self._resolve(approval, ApprovalEvent.DENY, exc.message))
        return denied

    def _remedy(self, info: dict[str, Any], full: Full) -> str:
        """What a call refused because `full` had no room for its request is told to do."""
        return (self.remedy and self.remedy(info, full)) or REMEDIES[full]

    def _check_room(self, size: int, mine: list[Approval], info: dict[str, Any]) -> None:
        """Refuse a request that one frame could not carry whole, alone or with those already waiting,
        or with its connection's (`mine`) more than three quarters of it."""
        room = self.max_bytes - FRAME_ENVELOPE
        if size > room:
            raise errors.LimitExceeded(
                f"this call's approval request is {size:,} bytes, above what one frame carries "
                f"({self.max_bytes_from} = {self.max_bytes:,}), so no approver could see it whole; "
                "send less (split the write or the arguments), or raise server.server_frame_bytes"
                + ("" if self.max_bytes_from == "server.server_frame_bytes"
                   else " and reconnect the clients opened before the last reload"))
        waiting = sum(a.size + 1 for a in self.pending.values())
        if waiting + size > room:
            raise errors.LimitExceeded(
                f"the approval requests already waiting take {waiting:,} bytes, and with this one's {size:,} "
                f"they would not fit in one approvals.list frame ({self.max_bytes_from} = {self.max_bytes:,}); "
                f"this call was refused without asking: {self._remedy(info, Full.GATE)}")
        own = sum(a.size + 1 for a in mine)
        if mine and own + size > room - room // 4:  # a connection's first request may take it all
            raise errors.LimitExceeded(
                f"this connection's approval requests already waiting take {own:,} bytes, and with this one's "
                f"{size:,} they would take more than three quarters of one approvals.list frame "
                f"({self.max_bytes_from} = {self.max_bytes:,}), the rest kept for other connections; this call "
                f"was refused without asking: {self._remedy(info, Full.SHARE)}")

    def list(self) -> list[ApprovalInfo]:
        self._sweep()
        return [a.info for a in self.pending.values()]

    def _sweep(self) -> None:
        """Expire the requests whose time ran out while the machine slept (their timers are late)."""
        for approval in [a for a in self.pending.values() if a.timer is not None and a.timer.due()]:
            self._expire(approval.id)

    def _expire(self, approval_id: str) -> None:
        approval = self.pending.get(approval_id)
        if approval is not None:  # its own timeout: a reload since changes only later requests'
            waited = round(approval.info.expires_at - approval.info.requested_at, 6)
            reason = f"no decision within {waited:g} s (approvals.timeout_seconds); denied"
            self._resolve(approval, ApprovalEvent.EXPIRE, reason)

    def _get(self, approval_id: str) -> Approval:
        approval = self.pending.get(approval_id)
        if approval is None:
            ended = self.ended.get(approval_id)
            raise errors.ApprovalNotFound(
                f"{ended}; it is no longer pending" if ended else
                f"no pending approval {approval_id!r}; it was decided, expired or withdrawn "
                "(scvctl approvals lists the pending ones)"
            )
        return approval

    def _resolve(self, approval: Approval, event: ApprovalEvent, reason: str | None) -> Approval:
        state = approval.move(event)
        approval.reason = reason
        if approval.timer:
            approval.timer.cancel()
        del self.pending[approval.id]
        self.ended[approval.id] = excerpt(approval.ending(), ENDED_CHARS)[0]
        if len(self.ended) > ENDED_KEPT:
            del self.ended[next(iter(self.ended))]
        if not approval.future.done():
            approval.future.set_result(state is ApprovalState.APPROVED)
        self.on_event("resolved", approval)
        return approval


def approval_event(kind: str, approval: Approval) -> Frame:
    """The event a gate change becomes on the wire (`seq` is stamped per connection)."""
    info = approval.info
    if kind == "requested":
        return approval_requested(info)
    decider = approval.decided_by
    return ApprovalResolved(
        seq=0, approval_id=info.approval_id, call_id=info.call_id,
        decision="approve" if approval.state is ApprovalState.APPROVED else "deny",
        state=approval.state.value, reason=approval.reason, scope=approval.scope,
        decided_by=decider.label() if decider else "scvd")


# --- who may decide -------------------------------------------------------------


def is_descendant(pid: int, ancestor: int, proc: str = "/proc") -> bool:
    """True if `pid` is `ancestor` or below it in the process tree (via /proc/PID/stat ppid)."""
    seen = set()
    while pid > 0 and pid not in seen:  # 0: the parent is outside our pid namespace (docker exec)
        if pid == ancestor:  # scvd may be pid 1 itself: a container's entry point
            return True
        if pid == 1:
            return False
        seen.add(pid)
        stat = read_stat(pid, proc)
        pid = stat.ppid if stat else 0
    return False


def cgroup_of(pid: int, proc: str = "/proc") -> str:
    """The cgroup path systemd placed `pid` in (notify.systemd_cgroup); "" when unreadable."""
    try:
        with open(f"{proc}/{pid}/cgroup", encoding="utf-8") as f:
            return systemd_cgroup(f.read())
    except OSError:
        return ""


def spawned_by_daemon(peer_pid: int, daemon_pid: int | None = None, proc: str = "/proc") -> bool:
    """Whether a peer is a process scvd started (an agent must not approve its own calls).

    Ancestry catches children and orphans reparented to scvd (it is a subreaper).
    Under systemd scvd has a cgroup of its own (`….service`): anything else in it
    was started by scvd, even if it escaped the tree. A peer whose process has
    exited is refused too: its socket may now be held by anyone it forked.
    The daemon's own pid is not "spawned" (in-process embedders and tests decide
    from it); pid 0 is a peer in a pid namespace scvd cannot see, so not one of its children.
    """
    daemon_pid = os.getpid() if daemon_pid is None else daemon_pid
    if peer_pid <= 0 or peer_pid == daemon_pid:
        return False
    if not os.path.exists(f"{proc}/{peer_pid}"):
        return True
    if is_descendant(peer_pid, daemon_pid, proc):
        return True
    own = cgroup_of(daemon_pid, proc)
    return own.endswith(".service") and cgroup_of(peer_pid, proc) == own
