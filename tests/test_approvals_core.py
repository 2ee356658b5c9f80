"""Approvals without sockets: the policy table, the gate's transitions, and who may decide."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from typing import Any
from pathlib import Path

import pytest

from scvd import awake, errors
from scvd.approvals import (
    ENDED_KEPT, POLICIES, TRANSITIONS, ApprovalEvent, ApprovalGate, ApprovalState, Decider, Verdict, contained,
    exposes_host, holds_home, is_descendant, policy_note, policy_verdict, spawned_by_daemon,
)
from scvd.config import Config
from scvd.host_places import places
from scvd.own_places import own_places
from scvd.paths import resolve
from scvd.tools.contract import Plan, ToolRisk

RUN, ASK, DENY = Verdict.RUN, Verdict.ASK, Verdict.DENY
PERSON = Decider(pid=4242, uid=1000, client="scvctl")


# --- policy_verdict -------------------------------------------------------------


def plan(risk: ToolRisk, isolated: bool) -> Plan:
    return Plan(risk=risk, summary="s", sandboxed=isolated, network=not isolated, writes_confined=isolated)


# The policies as docs/security.md states them, written out. A column is a situation:
# (read_only?, always_allow, granted, sandbox active, call isolated). `isolated` means
# sandboxed, offline and writes confined to the workspace. The other-risk columns hold for
# filesystem, process and delegate alike; always_allow exists only on read_only tools (the lint).
COLUMNS = {
    "ro":            (True, False, False, False, False),
    "ro allow":      (True, True, False, False, False),
    "ro granted":    (True, False, True, False, False),
    "ro contained":  (True, False, False, True, True),
    "other":         (False, False, False, False, False),
    "granted":       (False, False, True, False, False),
    "contained":     (False, False, False, True, True),
    "no sandbox":    (False, False, False, False, True),   # isolated, but the sandbox is not active
    "not isolated":  (False, False, False, True, False),   # the sandbox is active, the call is not isolated
    "both":          (False, False, True, True, True),
}
VERDICTS = {
    #                 ro   ro allow ro granted ro contained other granted contained no sandbox not isolated both
    "on-risk":       (RUN, RUN,     RUN,       RUN,         ASK,  RUN,    ASK,      ASK,       ASK,         RUN),
    "always":        (ASK, RUN,     RUN,       ASK,         ASK,  RUN,    ASK,      ASK,       ASK,         RUN),
    "never":         (RUN, RUN,     RUN,       RUN,         DENY, DENY,   DENY,     DENY,      DENY,        DENY),
    "sandbox-aware": (RUN, RUN,     RUN,       RUN,         ASK,  RUN,    RUN,      ASK,       ASK,         RUN),
}
OTHER_RISKS = [ToolRisk.FILESYSTEM, ToolRisk.PROCESS, ToolRisk.DELEGATE]
CASES = [
    (policy, column, risk)
    for policy in POLICIES
    for column, (read_only, *_) in COLUMNS.items()
    for risk in ([ToolRisk.READ_ONLY] if read_only else OTHER_RISKS)
]


def test_the_table_covers_every_policy():
    assert set(VERDICTS) == set(POLICIES) and all(len(row) == len(COLUMNS) for row in VERDICTS.values())


@pytest.mark.parametrize("policy,column,risk", CASES)
def test_policy_verdict_table(policy, column, risk):
    _, always_allow, granted, sandbox, isolated = COLUMNS[column]
    got = policy_verdict(policy, plan(risk, isolated), always_allow=always_allow, granted=granted,
                         sandbox_active=sandbox)
    assert got is VERDICTS[policy][list(COLUMNS).index(column)]


@pytest.mark.parametrize("field", ["sandboxed", "network", "writes_confined"])
def test_sandbox_aware_needs_all_three_isolation_facts(field):
    p = plan(ToolRisk.PROCESS, True)
    setattr(p, field, not getattr(p, field))
    assert not contained(p)
    assert policy_verdict("sandbox-aware", p, always_allow=False, granted=False, sandbox_active=True) is ASK


def test_policy_note_says_sandbox_aware_acts_as_on_risk_without_a_sandbox():
    assert "on-risk" in policy_note("sandbox-aware", False)
    assert "sandbox.mode" in policy_note("sandbox-aware", False)
    assert ".envrc" in policy_note("sandbox-aware", True)  # what unasked calls can still change
    assert policy_note("on-risk", False) == ""


# --- ApprovalGate ----------------------------------------------------------------


class Sink:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, ApprovalState]] = []

    def __call__(self, kind: str, approval) -> None:
        self.events.append((kind, approval.id, approval.state))


def new_request(gate: ApprovalGate, owner: object = "owner", call_id: str = "c1"):
    return gate.request(owner, session="s1", call_id=call_id, tool="probe_touch", risk="filesystem",
                        workspace="/ws", summary="touch a", details={"path": "a"})


def test_request_carries_summary_details_and_expiry():
    async def main():
        sink = Sink()
        gate = ApprovalGate(60, sink)
        a = new_request(gate)
        assert a.state is ApprovalState.PENDING
        assert a.info.summary == "touch a" and a.info.details == {"path": "a"}
        assert a.info.expires_at == pytest.approx(a.info.requested_at + 60)
        assert gate.list() == [a.info]
        assert sink.events == [("requested", a.id, ApprovalState.PENDING)]
        gate.cancel(a.id, "test over")

    asyncio.run(main())


def bash_asker(gate: ApprovalGate) -> Any:
    """ask(size, call_id): a bash request whose command is `size` bytes."""
    return lambda size, call_id: gate.request(
        "owner", session="s1", call_id=call_id, tool="bash", risk="process", workspace="/ws",
        summary="bash", details={"command": "x" * size})


def test_a_request_too_big_for_one_frame_never_opens_and_the_pending_ones_fit_a_list_frame():
    """An approver is shown a request whole or not at all: the frame limit bounds one, and all together."""
    async def main():
        sink = Sink()
        gate = ApprovalGate(60, sink, max_bytes=64 * 1024)
        ask = bash_asker(gate)
        with pytest.raises(errors.LimitExceeded) as info:
            ask(64 * 1024, "c0")
        assert "above what one frame carries (server.server_frame_bytes = 65,536)" in info.value.message
        assert "raise server.server_frame_bytes" in info.value.message and info.value.kind == "limit"
        first = ask(40 * 1024, "c1")
        with pytest.raises(errors.LimitExceeded) as info:
            ask(30 * 1024, "c2")
        assert "decide the pending ones first" in info.value.message
        assert sink.events == [("requested", first.id, ApprovalState.PENDING)] and list(gate.pending) == [first.id]
        gate.cancel(first.id, "done")
        ask(30 * 1024, "c3")  # room again once the first one ended
        for a in list(gate.pending.values()):
            gate.cancel(a.id, "test over")

    asyncio.run(main())


def test_a_lowered_limit_denies_the_requests_that_no_longer_fit_and_keeps_the_rest():
    """A reload lowering server_frame_bytes left bigger requests pending: a new approver's
    approvals.list then failed whole (`internal: frame of N bytes exceeds ...`), small ones unseen too."""
    async def main():
        sink = Sink()
        gate = ApprovalGate(60, sink, max_bytes=256 * 1024)
        ask = bash_asker(gate)
        small, big, mid1, mid2 = ask(1024, "c1"), ask(100 * 1024, "c2"), ask(33 * 1024, "c3"), ask(33 * 1024, "c4")
        gate.max_bytes = 64 * 1024
        denied = gate.refit()
        assert [a.id for a in denied] == [big.id, mid2.id]  # too big alone; then the newest until the rest fit
        assert list(gate.pending) == [small.id, mid1.id]
        assert (await big.future, await mid2.future) == (False, False)
        assert big.reason.startswith("this call's approval request is ") and "lowered by a reload" in big.reason
        assert "the newest was denied without a decision: send it again" in mid2.reason
        assert gate.refit() == []  # what is left fits
        for a in list(gate.pending.values()):
            gate.cancel(a.id, "test over")

    asyncio.run(main())


def test_first_decision_wins_and_a_later_one_is_not_found():
    async def main():
        sink = Sink()
        gate = ApprovalGate(60, sink)
        a = new_request(gate)
        gate.decide(a.id, True, decider=PERSON, reason=None, scope="session")
        assert a.state is ApprovalState.APPROVED and a.scope == "session" and a.decided_by == PERSON
        assert await a.future is True
        with pytest.raises(errors.ApprovalNotFound) as info:
            gate.decide(a.id, False, decider=PERSON, reason="too late", scope="once")
        assert a.id in info.value.message and info.value.code == "approval_not_found"
        assert a.state is ApprovalState.APPROVED
        assert [e[0] for e in sink.events] == ["requested", "resolved"]
        assert gate.pending == {}

    asyncio.run(main())


def test_a_decision_on_a_request_that_ended_is_told_what_became_of_it():
    """`approval_not_found` said only "decided, expired or withdrawn", and clients guessed
    "decided elsewhere" of a request whose call had gone away."""
    async def main():
        gate = ApprovalGate(60, Sink())
        a, b = new_request(gate, call_id="c1"), new_request(gate, call_id="c2")
        gate.cancel(a.id, "the call was cancelled: its session was closed")
        gate.decide(b.id, False, decider=PERSON, reason="not now", scope="once")
        for request, ending in [(a, "was cancelled: the call was cancelled: its session was closed"),
                                (b, "was denied by \"scvctl\" (pid 4242, uid 1000): not now")]:
            with pytest.raises(errors.ApprovalNotFound) as info:
                gate.decide(request.id, True, decider=PERSON, reason=None, scope="once")
            assert info.value.message == f"approval {request.id} {ending}; it is no longer pending"
        for n in range(ENDED_KEPT):  # only the latest are remembered
            gate.cancel(new_request(gate, call_id=f"more{n}").id, "gone")
        with pytest.raises(errors.ApprovalNotFound, match="decided, expired or withdrawn"):
            gate.decide(a.id, True, decider=PERSON, reason=None, scope="once")
        assert len(gate.ended) == ENDED_KEPT

    asyncio.run(main())


def test_deny_resolves_false_with_the_reason_and_never_widens_scope():
    async def main():
        gate = ApprovalGate(60, Sink())
        a = new_request(gate)
        gate.decide(a.id, False, decider=PERSON, reason="not now", scope="session")
        assert await a.future is False
        assert a.state is ApprovalState.DENIED and a.reason == "not now" and a.scope == "once"

    asyncio.run(main())


def test_expiry_denies_with_a_reason_naming_the_setting():
    async def main():
        sink = Sink()
        gate = ApprovalGate(0.05, sink)
        a = new_request(gate)
        assert await asyncio.wait_for(a.future, 5) is False
        assert a.state is ApprovalState.EXPIRED
        assert "approvals.timeout_seconds" in a.reason
        assert sink.events[-1] == ("resolved", a.id, ApprovalState.EXPIRED)
        with pytest.raises(errors.ApprovalNotFound):
            gate.decide(a.id, True, decider=PERSON, reason=None, scope="once")

    asyncio.run(main())


def test_a_decision_after_the_expiry_is_refused_though_the_loop_slept_through_it(monkeypatch):
    """The loop's clock stops while the machine sleeps: after a resume a request the approver was
    shown as expired (`expires_at`) was still pending, and a decision approved it hours late."""
    async def main():
        sink = Sink()
        gate = ApprovalGate(60, sink)
        a, b = new_request(gate, call_id="c1"), new_request(gate, call_id="c2")
        slept = awake.clock() + 3600  # an hour of suspend: the boot clock went on, the loop's did not
        monkeypatch.setattr(awake, "clock", lambda: slept)
        with pytest.raises(errors.ApprovalNotFound) as info:
            gate.decide(a.id, True, decider=PERSON, reason=None, scope="session")
        assert info.value.message == (f"approval {a.id} expired before this decision came: "
                                      "no decision within 60 s (approvals.timeout_seconds); denied")
        assert a.state is ApprovalState.EXPIRED and await a.future is False and a.decided_by is None
        assert gate.list() == [] and b.state is ApprovalState.EXPIRED  # a listing shows no expired one
        assert [e[2] for e in sink.events[2:]] == [ApprovalState.EXPIRED, ApprovalState.EXPIRED]

    asyncio.run(main())


def test_a_decision_stops_the_expiry_timer():
    async def main():
        sink = Sink()
        gate = ApprovalGate(0.2, sink)  # a decision past it is refused as expired
        a = new_request(gate)
        gate.decide(a.id, True, decider=PERSON, reason=None, scope="once")
        await asyncio.sleep(0.3)
        assert [e[2] for e in sink.events] == [ApprovalState.PENDING, ApprovalState.APPROVED]

    asyncio.run(main())


def test_drop_owner_drops_only_that_owners_requests():
    async def main():
        sink = Sink()
        gate = ApprovalGate(60, sink)
        mine = [new_request(gate, "alice", "c1"), new_request(gate, "alice", "c2")]
        other = new_request(gate, "bob", "c3")
        dropped = gate.drop_owner("alice")
        assert dropped == mine
        for a in mine:
            assert a.state is ApprovalState.DROPPED and await a.future is False
            assert "disconnected" in a.reason
        assert list(gate.pending) == [other.id]
        assert gate.drop_owner("alice") == []
        gate.cancel(other.id, "test over")
        assert other.state is ApprovalState.CANCELLED

    asyncio.run(main())


def test_cancel_of_a_decided_request_is_a_no_op():
    async def main():
        sink = Sink()
        gate = ApprovalGate(60, sink)
        a = new_request(gate)
        gate.decide(a.id, True, decider=PERSON, reason=None, scope="once")
        gate.cancel(a.id, "late")
        assert a.state is ApprovalState.APPROVED
        assert len(sink.events) == 2

    asyncio.run(main())


@pytest.mark.parametrize("first", list(ApprovalEvent))
def test_only_pending_moves_and_an_illegal_move_names_state_and_event(first):
    async def main():
        a = new_request(ApprovalGate(60, Sink()))
        assert a.move(first) is TRANSITIONS[(ApprovalState.PENDING, first)]
        for event in ApprovalEvent:
            with pytest.raises(errors.ApprovalNotFound) as info:
                a.move(event)
            assert f"is {a.state.value}" in info.value.message and repr(event.value) in info.value.message

    asyncio.run(main())


def test_every_move_of_the_gate_is_a_row_of_the_table():
    """Decide, deny, expire, cancel and drop each take their own row; nothing else moves."""
    async def main():
        gate = ApprovalGate(0.2, Sink())  # the decisions come before it, however slow the machine
        approved, denied, cancelled, dropped = (new_request(gate, call_id=f"c{i}") for i in range(4))
        expired = new_request(gate, owner="other", call_id="c5")
        gate.decide(approved.id, True, decider=PERSON, reason=None, scope="once")
        gate.decide(denied.id, False, decider=PERSON, reason=None, scope="once")
        gate.cancel(cancelled.id, "the call was cancelled")
        gate.drop_owner("owner")
        await expired.future
        states = [a.state for a in (approved, denied, cancelled, dropped, expired)]
        assert states == [ApprovalState.APPROVED, ApprovalState.DENIED, ApprovalState.CANCELLED,
                          ApprovalState.DROPPED, ApprovalState.EXPIRED]
        assert set(states) == set(TRANSITIONS.values())

    asyncio.run(main())


def test_an_expiry_names_the_timeout_the_request_was_made_under_not_a_reloaded_one():
    async def main():
        gate = ApprovalGate(0.05, Sink())
        waiting = new_request(gate)
        gate.timeout_seconds = 500  # a reload meanwhile: it applies to requests made after it
        assert await waiting.future is False
        assert waiting.reason == "no decision within 0.05 s (approvals.timeout_seconds); denied"

    asyncio.run(main())


def test_ids_are_unique():
    async def main():
        gate = ApprovalGate(60, Sink())
        ids = {new_request(gate, call_id=f"c{i}").id for i in range(50)}
        assert len(ids) == 50
        gate.drop_owner("owner")

    asyncio.run(main())


# --- who may decide: real processes ----------------------------------------------


@pytest.fixture
def child():
    proc = subprocess.Popen(["sleep", "30"])
    yield proc
    proc.kill()
    proc.wait()


@pytest.fixture
def grandchild():
    proc = subprocess.Popen(["sh", "-c", "sleep 30 & echo $!; wait"], stdout=subprocess.PIPE, text=True)
    pid = int(proc.stdout.readline())
    yield pid
    os.kill(pid, 9)
    proc.wait()
    proc.stdout.close()


def test_a_child_and_a_grandchild_are_descendants(child, grandchild):
    me = os.getpid()
    assert is_descendant(child.pid, me)
    assert is_descendant(grandchild, me)
    assert spawned_by_daemon(child.pid, me)
    assert spawned_by_daemon(grandchild, me)


def test_an_ancestor_or_a_stranger_is_not_a_descendant(child):
    me = os.getpid()
    assert not is_descendant(os.getppid(), me)
    assert not is_descendant(me, child.pid)
    assert not is_descendant(1, me)
    assert not spawned_by_daemon(me, child.pid) or _in_service_cgroup()


def test_the_daemon_itself_is_not_spawned_by_itself():
    # in-process tests decide from the daemon's own pid; only processes it started are refused
    assert not spawned_by_daemon(os.getpid(), os.getpid())


def test_pid_zero_is_not_spawned():
    assert not spawned_by_daemon(0, os.getpid())


def test_a_peer_that_has_exited_is_refused():
    """The process that connected is gone: whoever holds its socket now cannot be vetted."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    assert not Path(f"/proc/{proc.pid}").exists()
    assert spawned_by_daemon(proc.pid, os.getpid())


def _in_service_cgroup() -> bool:
    return Path("/proc/self/cgroup").read_text().strip().endswith(".service")


# --- who may decide: a fake /proc for the cgroup rule ------------------------------

UNIT = "/user.slice/user-1000.slice/user@1000.service/app.slice/scvd.service"


def fake_proc(root: Path, pid: int, ppid: int, cgroup: str, comm: str = "python3") -> None:
    d = root / str(pid)
    d.mkdir()
    rest = [ppid, pid, pid, 0, -1, 4194560, *[0] * 13, 12345, *[0] * 32]  # the kernel's 52 fields
    (d / "stat").write_text(f"{pid} ({comm}) S {' '.join(map(str, rest))}\n")
    (d / "cgroup").write_text(cgroup)


def test_fake_proc_ancestry_survives_odd_command_names(tmp_path):
    fake_proc(tmp_path, 100, 1, "0::/")
    fake_proc(tmp_path, 200, 100, "0::/", comm="a) S 1 (b")
    fake_proc(tmp_path, 300, 200, "0::/", comm="sh -c x")
    assert is_descendant(300, 100, str(tmp_path))
    assert not is_descendant(100, 300, str(tmp_path))


def test_with_scvd_as_pid_1_its_tools_are_spawned_and_a_process_entered_from_outside_is_not(tmp_path):
    """scvd as a container's entry point: everything below pid 1 that it started is its own; a
    `docker exec` process has parent 0 (outside the pid namespace), so it may decide."""
    fake_proc(tmp_path, 1, 0, "0::/\n")
    fake_proc(tmp_path, 40, 1, "0::/\n")  # bash, started by scvd
    fake_proc(tmp_path, 41, 40, "0::/\n")  # scvctl approvals approve, run by that bash
    fake_proc(tmp_path, 50, 0, "0::/\n")  # docker exec ... scvctl approvals approve
    assert spawned_by_daemon(41, 1, proc=str(tmp_path))
    assert spawned_by_daemon(40, 1, proc=str(tmp_path))
    assert not spawned_by_daemon(50, 1, proc=str(tmp_path))
    assert not is_descendant(1, 40, str(tmp_path))


def test_cgroup_rule_catches_a_process_that_left_the_tree(tmp_path):
    fake_proc(tmp_path, 100, 1, f"0::{UNIT}\n")
    fake_proc(tmp_path, 200, 1, f"0::{UNIT}\n")  # reparented to init, still in scvd's unit
    fake_proc(tmp_path, 300, 1, "0::/user.slice/user-1000.slice/user@1000.service/app.slice/x.service\n")
    assert spawned_by_daemon(200, 100, proc=str(tmp_path))
    assert not spawned_by_daemon(300, 100, proc=str(tmp_path))


def test_cgroup_rule_needs_a_service_of_our_own(tmp_path):
    # outside systemd (a terminal's session scope) everyone in that scope shares our cgroup
    scope = "0::/user.slice/user-1000.slice/session-3.scope\n"
    fake_proc(tmp_path, 100, 1, scope)
    fake_proc(tmp_path, 200, 1, scope)
    assert not spawned_by_daemon(200, 100, proc=str(tmp_path))


def test_cgroup_rule_reads_the_systemd_line_of_cgroup_v1(tmp_path):
    v1 = "12:memory:{}\n3:cpu,cpuacct:/\n1:name=systemd:{}\n"
    fake_proc(tmp_path, 100, 1, v1.format("/", UNIT))
    fake_proc(tmp_path, 200, 1, v1.format("/other", UNIT))
    fake_proc(tmp_path, 300, 1, v1.format("/", "/user.slice/other.service"))
    assert spawned_by_daemon(200, 100, proc=str(tmp_path))
    assert not spawned_by_daemon(300, 100, proc=str(tmp_path))


def test_a_full_gate_refuses_without_asking():
    async def main():
        events = []
        gate = ApprovalGate(60, lambda kind, a: events.append(kind), max_pending=2)
        first, second = new_request(gate), new_request(gate)
        with pytest.raises(errors.LimitExceeded, match=r"2 approvals are already waiting \(approvals.max_pending\)"):
            new_request(gate)
        assert events == ["requested", "requested"]  # nobody is asked about the third
        gate.cancel(first.id, "done")
        assert new_request(gate).state.value == "pending"  # room again
        assert second.state.value == "pending"

    asyncio.run(main())


def test_one_connection_may_fill_three_quarters_of_the_gate_over_all_its_sessions_and_others_are_still_asked():
    async def main():
        events = []
        gate = ApprovalGate(60, lambda kind, a: events.append(kind), max_pending=8)

        def ask(owner: str, session: str, n: int) -> Any:
            return gate.request(owner, session=session, call_id=f"{session}-{n}", tool="read",
                                risk="filesystem", workspace="/ws", summary="read .env", details={})

        mine = [ask("c1", session, n) for n in range(3) for session in ("s1", "s2")]  # two sessions, one client
        for session in ("s1", "s3"):  # a session it opens next is no way round
            with pytest.raises(errors.LimitExceeded) as info:
                ask("c1", session, 6)
            assert info.value.message == (
                "6 approvals of this connection's sessions are already waiting, as many as one connection may "
                "hold (approvals.max_pending less a quarter kept for other connections); this call was refused "
                "without asking: have those decided (scvctl approvals), or cancel the calls you no longer need "
                "(call.cancel), then send it again")
        ask("c2", "s4", 0), ask("c2", "s4", 1)  # another connection is asked, not refused
        with pytest.raises(errors.LimitExceeded, match=r"8 approvals are already waiting \(approvals.max_pending\)"):
            ask("c3", "s5", 0)
        gate.cancel(mine[0].id, "done")
        ask("c1", "s2", 7)  # its share has room again
        assert events.count("requested") == 9
        for a in list(gate.pending.values()):
            gate.cancel(a.id, "test over")

    asyncio.run(main())


def test_one_connections_requests_may_take_three_quarters_of_the_list_frame_and_others_are_still_asked():
    async def main():
        gate = ApprovalGate(60, lambda kind, a: None, max_bytes=64 * 1024)

        def ask(owner: str, session: str, size: int, n: int) -> Any:
            return gate.request(owner, session=session, call_id=f"{session}-{n}", tool="bash", risk="process",
                                workspace="/ws", summary="bash", details={"command": "x" * size})

        ask("c1", "s1", 40 * 1024, 0)  # a connection's first request may take it all
        with pytest.raises(errors.LimitExceeded) as info:
            ask("c1", "s2", 10 * 1024, 1)  # in another of its sessions too
        assert info.value.message.startswith("this connection's approval requests already waiting take ")
        assert ("would take more than three quarters of one approvals.list frame (server.server_frame_bytes = "
                "65,536), the rest kept for other connections") in info.value.message
        ask("c2", "s3", 10 * 1024, 0)  # another connection is asked
        for a in list(gate.pending.values()):
            gate.cancel(a.id, "test over")

    asyncio.run(main())


def test_a_call_refused_for_want_of_room_in_bytes_hears_what_the_remedy_hook_says():
    """The hook (the chat's gives a turn's call words a model can act on) is told what ran out of room,
    its connection's share of the approvals.list frame or the whole frame; other calls keep the socket
    client's words (scvctl approvals, call.cancel; decide the pending ones)."""
    async def main():
        gate = ApprovalGate(60, lambda kind, a: None, max_bytes=64 * 1024)

        def turns_words(info: dict[str, Any], full: Any) -> str | None:  # a turn's call ids start with t here
            return f"the {full.value} is full: a turn's words" if info["call_id"].startswith("t") else None

        gate.remedy = turns_words

        def ask(owner: str, call_id: str, size: int) -> Any:
            return gate.request(owner, session=owner, call_id=call_id, tool="bash", risk="process",
                                workspace="/ws", summary="bash", details={"command": "x" * size})

        ask("c1", "c-0", 40 * 1024)
        share = ("the rest kept for other connections", "the share is full: a turn's words",
                 "have those decided (scvctl approvals), or cancel the calls you no longer need (call.cancel), "
                 "then send it again")
        frame = ("they would not fit in one approvals.list frame (server.server_frame_bytes = 65,536)",
                 "the gate is full: a turn's words", "decide the pending ones first")
        for owner, size, (said, *remedies) in (("c1", 10 * 1024, share), ("c2", 30 * 1024, frame)):
            for call_id, remedy in zip(("t-1", "c-1"), remedies):
                with pytest.raises(errors.LimitExceeded) as info:
                    ask(owner, call_id, size)
                assert info.value.message.endswith(f"{said}; this call was refused without asking: {remedy}")
        for a in list(gate.pending.values()):
            gate.cancel(a.id, "test over")

    asyncio.run(main())


def test_the_largest_bash_command_fits_a_default_frame_even_escaped():
    """A command is one argv string (MAX_ARG_BYTES); DEL escapes to `\\x7f` (5 bytes in JSON) and still fits."""
    from scvd.process import MAX_ARG_BYTES
    from scvd.tools.bash import summarize

    async def main():
        gate = ApprovalGate(60, Sink())  # server.server_frame_bytes at its default, 8 MiB
        command = "\x7f" * MAX_ARG_BYTES
        a = gate.request("owner", session="s1", call_id="c1", tool="bash", risk="process", workspace="/ws",
                         summary=summarize(command, 120, sandboxed=False, network=True),
                         details={"command": command})
        assert a.info.details["command"] == "\\x7f" * MAX_ARG_BYTES and a.size > 5 * MAX_ARG_BYTES
        gate.cancel(a.id, "test over")

    asyncio.run(main())


@pytest.mark.parametrize(("workspace", "holds"), [
    ("/home/u", True), ("/home", True), ("/", True), ("/home/u/project", False),
    ("/home/u2", False), ("/home/u/", True), ("/srv", False),
])
def test_a_workspace_holds_the_home_when_it_is_the_home_or_above_it(workspace: str, holds: bool):
    assert holds_home(workspace, "/home/u") is holds


@pytest.mark.parametrize(("workspace", "exposed"), [
    ("/home/u", True), ("/", True),  # holds the home
    ("/home/u/.config", True), ("/home/u/.config/git", True), ("/home/u/.local/share/app", True),
    ("/home/u/.ssh", True), ("/srv/scv", True), ("/srv/scv/tools", True), ("/cfg/x", True),
    ("/etc", True), ("/etc/scvd", True),  # holds the config file read (--config), which the sandbox shows
    ("/srv", True),  # holds scvd's folder: the sandbox hides it, but rename-proof only as a mount point
    ("/home/u/.vim/plugin", True), ("/home/u/.configs", True),  # any dot folder of the home: .vim/plugin runs
    ("/home/u/project", False), ("/home/u/configs", False), ("/home/u2/.vim", False), ("/srv/scvx", False),
    ("/etc/scvd/conf.d", False),
])
def test_a_workspace_exposes_the_host_at_or_inside_home_config_and_scvds_own_folders(workspace, exposed):
    exposes_host.cache_clear()
    own = own_places(resolve({"SCV_HOME": "/srv/scv"}), "/etc/scvd/run.toml")
    host = places(Config(), None, {"PATH": "/usr/bin", "XDG_CONFIG_HOME": "/cfg"}, "/home/u")
    assert exposes_host(workspace, own, "/home/u", host) is exposed
    exposes_host.cache_clear()


def test_a_workspace_that_holds_scvds_folders_or_a_link_on_the_way_exposes_the_host(tmp_path):
    """The sandbox hides SCV_HOME with a tmpfs, which makes only that folder a mount point: from a
    workspace two levels up, `mv a b; mkdir -p a/scv` planted the config.toml scvd read next (its MCP
    servers start unsandboxed), and a link on the way (`ws/link -> elsewhere`) could be replaced
    from one level up, as could the one to a --config file."""
    ws, elsewhere, home = tmp_path / "ws", tmp_path / "elsewhere", str(tmp_path / "user")
    (ws / "a").mkdir(parents=True)
    (elsewhere / "cfg").mkdir(parents=True)
    (ws / "link").symlink_to(elsewhere)
    (tmp_path / "srv-scv").symlink_to(ws / "link/scv")  # a link whose target passes through the workspace
    (ws / "beside").mkdir()
    exposes_host.cache_clear()
    try:
        for scv_home, config in [(ws / "a/b/scv", None), (ws / "a/scv", None), (ws / "link/scv", None),
                                 (tmp_path / "srv-scv", None), (elsewhere / "scv", ws / "link/cfg/scvd.toml")]:
            own = own_places(resolve({"SCV_HOME": str(scv_home)}), config and str(config))
            assert exposes_host(str(ws), own, home) is True, (scv_home, config)
            assert exposes_host(str(ws / "beside"), own, home) is False, (scv_home, config)
        own = own_places(resolve({"SCV_HOME": str(ws / "a/b/scv")}))
        assert exposes_host(str(ws / "a/b"), own, home) is True and exposes_host(str(ws / "a/b/scv/x"), own, home)
    finally:
        exposes_host.cache_clear()


def test_a_workspace_above_a_config_dir_outside_the_home_exposes_the_host(tmp_path):
    """A dotfiles repository that ~/.config links into, or a directory above XDG_CONFIG_HOME, holds
    systemd/user and autostart: unasked, a sandboxed bash there planted what ran at the next login."""
    home, dotfiles = tmp_path / "home", tmp_path / "dotfiles"
    (dotfiles / "config").mkdir(parents=True)
    home.mkdir()
    (home / ".config").symlink_to(dotfiles / "config")
    env = {"PATH": "/usr/bin", "XDG_CONFIG_HOME": "/data/cfg"}
    exposes_host.cache_clear()
    try:
        host = places(Config(), None, env, str(home))
        assert exposes_host(str(dotfiles), (), str(home), host) is True
        assert exposes_host("/data", (), str(home), host) is True
        assert exposes_host(str(tmp_path / "project"), (), str(home), host) is False
        # ~/.config -> project/dots/config, itself a link elsewhere: replaceable from project
        (dotfiles / "config").rename(tmp_path / "config")
        (tmp_path / "project" / "dots").mkdir(parents=True)
        (tmp_path / "project" / "dots" / "config").symlink_to(tmp_path / "config")
        (home / ".config").unlink()
        (home / ".config").symlink_to(tmp_path / "project" / "dots" / "config")
        exposes_host.cache_clear()
        host = places(Config(), None, env, str(home))  # listed again, as a reload does
        assert exposes_host(str(tmp_path / "project"), (), str(home), host) is True
    finally:
        exposes_host.cache_clear()


def test_a_workspace_at_or_holding_a_loaded_tools_folder_or_a_link_to_it_exposes_the_host(tmp_path):
    """A script tool's folder linked in from elsewhere: its `run` is what a read_only call runs
    unasked, so a workspace that could rewrite it, or swap a link on the way to it, is the host's."""
    ws, elsewhere, home = tmp_path / "ws", tmp_path / "elsewhere", str(tmp_path / "user")
    (elsewhere / "mytools" / "leak").mkdir(parents=True)
    (ws / "beside").mkdir(parents=True)
    (ws / "link").symlink_to(elsewhere / "mytools")
    paths = resolve({"SCV_HOME": str(tmp_path / "scv")})
    (tmp_path / "scv" / "tools" / "script").mkdir(parents=True)
    named = tmp_path / "scv" / "tools" / "script" / "leak"
    named.symlink_to(ws / "link" / "leak")
    exposes_host.cache_clear()
    try:
        own = own_places(paths, None, (str(named), os.path.realpath(named)))
        for exposed in (ws, elsewhere, elsewhere / "mytools" / "leak", elsewhere / "mytools" / "leak" / "sub"):
            assert exposes_host(str(exposed), own, home) is True, exposed
        assert exposes_host(str(ws / "beside"), own, home) is False
        assert exposes_host(str(ws), own_places(paths), home) is False  # no tool loaded from there
    finally:
        exposes_host.cache_clear()
