"""The call pipeline over the real socket: refusals before approval, the lane, cancellation in
every state, background calls, the dispatch timeout, progress, and tools.list.

Ordering is read from the probe tools' timestamps; "exactly one call.completed"
is counted over every event the daemon sent once it is idle.
"""

from __future__ import annotations

import collections
import logging
import re
from typing import Any

import pytest

from helpers.probe_tools import flush, requested, resolved, rig, wait_event, wait_idle  # noqa: F401 (rig is a fixture)
from helpers.probe_tools import EchoArgs, Probe, ProbeEcho, Rig
from scvd import errors, protocol as p
from scvd.calls import PROGRESS_CHARS
from scvd.tools.contract import CallContext, Plan

FAST = '[tools]\nprogress_interval_seconds = 0.2\n'


def completions(events) -> collections.Counter:
    return collections.Counter(e.call_id for e in events if isinstance(e, p.CallCompleted))


def settled_events(client) -> list:
    """Every event still queued once the daemon runs no call and waits on no approval."""
    wait_idle(client)
    return flush(client)


def completed_by_id(events) -> dict[str, p.CallCompleted]:
    return {e.call_id: e for e in events if isinstance(e, p.CallCompleted)}


class ProbeLoud(ProbeEcho):
    """Reports its text as one progress message of a megabyte, as an MCP server may."""

    name = "probe_loud"
    description = ("Report the text a megabyte long as progress, then return.\n"
                   "Use for the cap on progress text; probe_sleep for timed progress.\n"
                   "Precondition: only in test daemons.")

    async def run(self, args: EchoArgs, plan: Plan, ctx: CallContext) -> Any:
        ctx.progress(args.text * (1 << 20))
        return {}


# --- refusals before approval ----------------------------------------------------------


@pytest.mark.one_loop
@pytest.mark.parametrize("tool,arguments,needle", [
    ("probe_touch", {"path": 3}, "`path`"),
    ("probe_touch", {}, "`path`"),
    ("probe_touch", {"path": "a", "bogus": 1}, "`bogus`"),
    ("probe_touch", {"path": "a", "risk": "delegate"}, "`risk`"),
    ("probe_touch", {"path": "/etc/passwd"}, "`path`"),  # refused by plan(), still before approval
    ("probe_sleep", {"seconds": "long"}, "`seconds`"),
])
def test_invalid_arguments_name_the_field_before_any_approval(rig, workspace, tool, arguments, needle):
    rg = rig('[approvals]\npolicy = "always"\n')  # anything that got as far as the gate would ask
    w = rg.watcher()
    owner = rg.client(approver=True)
    done = owner.call(owner.open_session(workspace), tool, arguments)
    assert not done.ok and done.error.kind == "invalid_arguments"
    assert needle in done.error.message, done.error.message
    assert not [e for e in flush(w) + flush(owner) if isinstance(e, p.ApprovalRequested)]


@pytest.mark.one_loop
def test_unknown_tool_is_named_before_any_approval(rig, workspace):
    rg = rig('[approvals]\npolicy = "always"\n')
    w = rg.watcher()
    owner = rg.client()
    done = owner.call(owner.open_session(workspace), "no_such_tool", {"x": 1})
    assert done.error.kind == "unknown_tool"
    assert "'no_such_tool'" in done.error.message and "probe_echo" in done.error.message
    assert not [e for e in flush(w) if isinstance(e, p.ApprovalRequested)]


@pytest.mark.one_loop
def test_call_timeout_above_the_ceiling_is_refused_naming_it(rig, workspace):
    rg = rig()
    owner = rg.client()
    done = owner.call(owner.open_session(workspace), "probe_echo", {"text": "x"}, timeout_seconds=99999)
    assert done.error.kind == "invalid_arguments" and "tools.max_timeout_seconds" in done.error.message


@pytest.mark.one_loop
def test_a_crashing_tool_fails_its_call_and_the_daemon_goes_on(rig, workspace):
    rg = rig()
    owner = rg.client()
    session = owner.open_session(workspace)
    done = owner.call(session, "probe_crash", {})
    assert done.error.kind == "failed" and "ValueError" in done.error.message
    assert "probe bug" not in done.error.message  # no internals leak to the peer
    assert owner.call(session, "probe_echo", {"text": "still here"}).ok


@pytest.mark.one_loop
def test_a_result_that_cannot_be_encoded_still_completes_the_call_once(rig, workspace):
    rg = rig()
    owner = rg.inproc.client(name="pytest", timeout=10)
    rg.opened.append(owner)
    session = owner.open_session(workspace)
    done = owner.call(session, "probe_bad_result", {})
    assert not done.ok and done.error.kind == "failed" and "probe_bad_result" in done.error.message
    assert completions(settled_events(owner)) == collections.Counter()
    assert owner.call(session, "probe_echo", {"text": "still here"}).ok


@pytest.mark.one_loop
def test_call_errors_on_the_request_itself(rig, workspace):
    rg = rig()
    owner = rg.client()
    session = owner.open_session(workspace)
    with pytest.raises(errors.CallNotFound):
        owner.request(p.CallCancel, call_id="never-was")
    owner.call(session, "probe_echo", {"text": "x"}, call_id="mine")
    assert owner.call(session, "probe_echo", {"text": "y"}, call_id="mine").ok  # reusable once done
    with pytest.raises(errors.SessionNotFound):
        owner.start_call("s0-nope", "probe_echo", {"text": "x"})


@pytest.mark.one_loop
@pytest.mark.parametrize("call_id", ["", "two words", "c1\n[a9-1] read (read_only)", "\x1b[2J", "caf\u00e9", "x" * 129])
def test_a_chosen_call_id_that_is_empty_long_or_not_printable_ascii_is_refused_saying_what_is(
        rig, workspace, call_id):
    """It names the call in approval prompts, the audit log and logs, and is typed back in call.cancel."""
    rg = rig()
    owner = rg.client()
    session = owner.open_session(workspace)
    with pytest.raises(errors.InvalidRequest, match="1-128 printable ASCII characters, no spaces"):
        owner.start_call(session, "probe_echo", {"text": "x"}, call_id=call_id)
    assert not completions(settled_events(owner))  # nothing was accepted
    assert owner.call(session, "probe_echo", {"text": "x"}, call_id="~" * 128).ok


# --- events of one call ------------------------------------------------------------------


def test_started_comes_after_the_approval_and_before_the_completion(rig, workspace):
    rg = rig()
    owner = rg.client(approver=True)
    call_id = owner.start_call(owner.open_session(workspace), "probe_touch", {"path": "a"})
    r = requested(owner, call_id)
    assert not [e for e in flush(owner) if isinstance(e, p.CallStarted)]
    owner.request(p.ApprovalDecide, approval_id=r.approval_id, decision="approve")
    events = settled_events(owner)
    kinds = [type(e).__name__ for e in events if getattr(e, "call_id", None) == call_id]
    assert kinds == ["ApprovalResolved", "CallStarted", "CallCompleted"]
    started = next(e for e in events if isinstance(e, p.CallStarted))
    assert started.tool == "probe_touch"
    seqs = [e.seq for e in events]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)


def test_progress_events_and_the_running_log_line(rig, workspace, caplog):
    caplog.set_level(logging.INFO, logger="scvd.calls")
    rg = rig(FAST)
    owner = rg.client()
    call_id = owner.start_call(owner.open_session(workspace), "probe_sleep",
                               {"seconds": 1.0, "risk": "read_only", "label": "long"})
    events = settled_events(owner)
    progress = [e for e in events if isinstance(e, p.CallProgress) and e.call_id == call_id]
    assert len(progress) >= 2, events
    assert [e.elapsed_s for e in progress] == sorted(e.elapsed_s for e in progress)
    assert {e.timeout_s for e in progress} == {900}
    assert completed_by_id(events)[call_id].ok
    lines = [r.getMessage() for r in caplog.records if r.name == "scvd.calls"]
    assert any(re.search(r"running name=probe_sleep .*elapsed=\d+s/900s", line) for line in lines), lines


def test_a_call_queued_behind_one_that_waits_for_a_person_says_it_waits(rig, workspace):
    """Only a call at the gate sent progress: one queued behind it in its session's lane sent none, so
    an MCP host whose request timeout progress resets gave up on it while the person decided."""
    rg = rig(FAST)
    owner = rg.client(approver=True)
    session = owner.open_session(workspace)
    first = owner.start_call(session, "probe_touch", {"path": "a"})
    r = requested(owner, first)
    second = owner.start_call(session, "probe_touch", {"path": "b"})
    queued = wait_event(owner, lambda e: isinstance(e, p.CallProgress) and e.call_id == second)
    assert queued.message == "waiting for this session's earlier calls to end" and queued.timeout_s is None
    owner.request(p.ApprovalDecide, approval_id=r.approval_id, decision="approve")
    r2 = requested(owner, second)
    owner.request(p.ApprovalDecide, approval_id=r2.approval_id, decision="approve")
    assert {c: d.ok for c, d in completed_by_id(settled_events(owner)).items()} == {first: True, second: True}


@pytest.mark.one_loop
def test_a_tools_megabyte_of_progress_text_reaches_the_client_cut(make_inproc, workspace):
    """Uncapped, it went out whole, and past server.server_frame_bytes became an id-less error."""
    probe = Probe()
    rg = Rig(make_inproc("", tools=[ProbeLoud(probe)]), probe)
    try:
        owner = rg.client()
        done = owner.call(owner.open_session(workspace), "probe_loud", {"text": "x"})
        assert done.ok, done.error
        progress = [e for e in settled_events(owner) if isinstance(e, p.CallProgress)]
        assert len(progress) == 1 and progress[0].call_id == done.call_id
        assert progress[0].message.startswith("xxx") and len(progress[0].message) <= PROGRESS_CHARS + 10
    finally:
        rg.close()


# --- the lane --------------------------------------------------------------------------


def test_concurrent_calls_overlap_and_a_serial_call_waits_for_them_and_holds_back_later_ones(rig, workspace):
    rg = rig()
    owner = rg.client()
    session = owner.open_session(workspace)
    ids = [owner.start_call(session, "probe_wait", {"label": "a"}),
           owner.start_call(session, "probe_wait", {"label": "b"}),
           owner.start_call(session, "probe_sleep", {"seconds": 0.1, "risk": "read_only", "label": "s"}),
           owner.start_call(session, "probe_wait", {"label": "d"})]
    probe = rg.probe
    probe.wait_until("start", "a")
    probe.wait_until("start", "b")
    owner.request(p.Ping)  # a loop turn in which a broken lane would start s too
    assert not probe.has("start", "s") and not probe.has("start", "d")
    for label in "abd":
        probe.release(label)
    events = settled_events(owner)
    assert all(completed_by_id(events)[i].ok for i in ids)
    a, b, s, d = (probe.events(label) for label in "absd")
    assert b["start"] < a["end"] and a["start"] < b["end"], "a and b ran together"
    assert s["start"] >= max(a["end"], b["end"]), "s waited for every call before it"
    assert d["start"] >= s["end"], "d waited behind s"


def test_serial_calls_run_in_arrival_order_one_at_a_time(rig, workspace):
    rg = rig()
    owner = rg.client()
    session = owner.open_session(workspace)
    labels = ["x", "y", "z"]
    for label in labels:
        owner.start_call(session, "probe_sleep", {"seconds": 0.05, "risk": "read_only", "label": label})
    settled_events(owner)
    spans = [rg.probe.events(label) for label in labels]
    for earlier, later in zip(spans, spans[1:]):
        assert later["start"] >= earlier["end"]


def test_sessions_have_their_own_lanes(rig, workspace):
    rg = rig()
    owner = rg.client()
    first, second = owner.open_session(workspace), owner.open_session(workspace)
    owner.start_call(first, "probe_wait", {"label": "held"})
    rg.probe.wait_until("start", "held")
    owner.start_call(first, "probe_sleep", {"seconds": 0, "risk": "read_only", "label": "behind"})
    assert owner.call(second, "probe_echo", {"text": "other lane"}).ok
    assert not rg.probe.has("start", "behind")
    rg.probe.release("held")
    settled_events(owner)
    assert rg.probe.has("end", "behind")


def test_background_call_answers_at_once_and_does_not_hold_the_lane(rig, workspace):
    rg = rig()
    owner = rg.client()
    session = owner.open_session(workspace)
    accepted = owner.request(p.Call, session=session, tool="probe_bg", arguments={"label": "bg"})
    assert accepted.background is True
    rg.probe.wait_until("start", "bg")
    assert owner.call(session, "probe_echo", {"text": "meanwhile"}).ok
    assert not rg.probe.has("end", "bg")
    assert owner.status().running_calls == 1
    rg.probe.release("bg")
    done = owner.wait_call(accepted.call_id)
    assert done.ok and done.result == {"label": "bg"}
    foreground = owner.request(p.Call, session=session, tool="probe_echo", arguments={"text": "x"})
    assert foreground.background is False
    owner.wait_call(foreground.call_id)


# --- cancellation -------------------------------------------------------------------------


def test_cancel_in_every_state_gives_exactly_one_cancelled_completion(rig, workspace):
    rg = rig()
    w = rg.watcher()
    owner = rg.client()
    busy = owner.open_session(workspace)
    running = owner.start_call(busy, "probe_sleep", {"seconds": 30, "risk": "read_only", "label": "run"})
    rg.probe.wait_until("start", "run")
    queued = owner.start_call(busy, "probe_echo", {"text": "queued"})
    waiting = owner.start_call(owner.open_session(workspace), "probe_touch", {"path": "a"})
    approval = requested(w, waiting)

    for call_id in (queued, waiting, running):
        owner.request(p.CallCancel, call_id=call_id)
    events = settled_events(owner)
    assert completions(events) == {queued: 1, waiting: 1, running: 1}
    for call_id, done in completed_by_id(events).items():
        assert not done.ok and done.error.kind == "cancelled", (call_id, done)
    assert rg.probe.has("cancelled", "run") and not rg.probe.has("end", "run")
    assert resolved(w, approval.approval_id).state == "cancelled"
    assert not (workspace / "a").exists()
    with pytest.raises(errors.CallNotFound):
        owner.request(p.CallCancel, call_id=running)


def test_cancel_sent_with_its_call_in_one_write_still_completes_once(rig, workspace):
    rg = rig()
    owner = rg.client()
    session = owner.open_session(workspace)
    call = p.Call(id="c", session=session, tool="probe_sleep", call_id="pipelined",
                  arguments={"seconds": 30, "risk": "read_only", "label": "pipe"})
    owner.sock.sendall(p.encode(call) + p.encode(p.CallCancel(id="x", call_id="pipelined")))
    events = settled_events(owner)
    assert completions(events) == {"pipelined": 1}, events
    assert completed_by_id(events)["pipelined"].error.kind == "cancelled"


def test_a_read_pipelined_before_a_write_behind_a_busy_lane_reads_what_was_there(rig, workspace):
    """Arrival order holds for a call that can finish at once (read) as for any other: sent in one
    write before a write of the same file, while the lane is held, it runs first."""
    rg = rig()
    owner = rg.client(approver=True)
    session = owner.open_session(workspace)
    (workspace / "a.txt").write_text("old\n")
    held = owner.start_call(session, "probe_sleep", {"seconds": 30, "risk": "read_only", "label": "held"})
    rg.probe.wait_until("start", "held")  # a serial call: read, though concurrent, waits behind it
    read = p.Call(id="r", session=session, tool="read", call_id="the-read", arguments={"path": "a.txt"})
    write = p.Call(id="w", session=session, tool="write", call_id="the-write",
                   arguments={"path": "a.txt", "content": "new\n", "mode": "replace"})
    owner.sock.sendall(p.encode(read) + p.encode(write))
    owner.request(p.Ping)  # both are in the lane now
    owner.request(p.CallCancel, call_id=held)
    asked = requested(owner, "the-write")
    owner.request(p.ApprovalDecide, approval_id=asked.approval_id, decision="approve")
    events = settled_events(owner)
    done = [e.call_id for e in events if isinstance(e, p.CallCompleted)]
    assert done.index("the-read") < done.index("the-write"), done
    assert completed_by_id(events)["the-read"].result["content"] == "old\n"
    assert (workspace / "a.txt").read_text() == "new\n"


def test_a_read_pipelined_after_a_write_waits_for_it_and_reads_what_it_wrote(rig, workspace):
    """The other way round, with the lane free: a read sent in one write after a write of the same
    file does not overtake it (the write goes on in a task, the read could finish at once)."""
    rg = rig()
    owner = rg.client(approver=True)
    session = owner.open_session(workspace)
    (workspace / "a.txt").write_text("old\n")
    write = p.Call(id="w", session=session, tool="write", call_id="the-write",
                   arguments={"path": "a.txt", "content": "new\n", "mode": "replace"})
    read = p.Call(id="r", session=session, tool="read", call_id="the-read", arguments={"path": "a.txt"})
    owner.sock.sendall(p.encode(write) + p.encode(read))
    asked = requested(owner, "the-write")
    before = flush(owner)
    assert completions(before) == collections.Counter(), before  # the read waits behind the write
    owner.request(p.ApprovalDecide, approval_id=asked.approval_id, decision="approve")
    events = settled_events(owner)
    done = [e.call_id for e in before + events if isinstance(e, p.CallCompleted)]
    assert done == ["the-write", "the-read"], done
    assert completed_by_id(events)["the-read"].result["content"] == "new\n"


def test_closing_a_session_cancels_its_running_and_queued_calls(rig, workspace):
    rg = rig()
    owner = rg.client()
    session = owner.open_session(workspace)
    running = owner.start_call(session, "probe_sleep", {"seconds": 30, "risk": "read_only", "label": "r"})
    rg.probe.wait_until("start", "r")
    queued = owner.start_call(session, "probe_echo", {"text": "q"})
    owner.request(p.SessionClose, session=session)
    events = settled_events(owner)
    assert completions(events) == {running: 1, queued: 1}
    assert {e.error.kind for e in completed_by_id(events).values()} == {"cancelled"}


def test_a_generated_call_id_skips_one_a_client_chose_so_closing_cancels_both(rig, workspace):
    rg = rig()
    owner = rg.client()
    session = owner.open_session(workspace)
    n, tag = owner.start_call(session, "probe_echo", {"text": "x"})[1:].split("-")  # c<N>-<tag>
    chosen = owner.start_call(session, "probe_wait", {"label": "A"}, call_id=f"c{int(n) + 1}-{tag}")
    generated = owner.start_call(session, "probe_wait", {"label": "B"})  # the daemon's next id is taken
    assert generated != chosen
    rg.probe.wait_until("start", "A"), rg.probe.wait_until("start", "B")
    assert owner.status().running_calls == 2
    owner.request(p.SessionClose, session=session)
    rg.probe.wait_until("cancelled", "A"), rg.probe.wait_until("cancelled", "B")
    wait_idle(owner)


def test_a_disconnect_cancels_the_clients_running_calls(rig, workspace):
    rg = rig()
    leaver = rg.client(name="leaver")
    leaver.start_call(leaver.open_session(workspace), "probe_sleep",
                      {"seconds": 30, "risk": "read_only", "label": "orphan"})
    rg.probe.wait_until("start", "orphan")
    leaver.close()
    rg.probe.wait_until("cancelled", "orphan")
    wait_idle(rg.client())


# --- the dispatch timeout -------------------------------------------------------------------


def test_a_tools_own_dispatch_timeout_stops_it(rig, workspace):
    rg = rig()
    owner = rg.client()
    done = owner.call(owner.open_session(workspace), "probe_slow", {"seconds": 30})
    assert done.error.kind == "timeout" and "0.3 s" in done.error.message
    assert rg.probe.has("cancelled", "slow")


def test_a_calls_timeout_seconds_lowers_the_dispatch_timeout(rig, workspace):
    rg = rig()
    owner = rg.client()
    done = owner.call(owner.open_session(workspace), "probe_sleep",
                      {"seconds": 30, "risk": "read_only", "label": "capped"}, timeout_seconds=0.3)
    assert done.error.kind == "timeout" and "0.3 s" in done.error.message
    assert rg.probe.has("cancelled", "capped")


# --- tools.list --------------------------------------------------------------------------------


@pytest.mark.one_loop
def test_tools_list_hides_system_use_unless_asked(rig):
    rg = rig()
    c = rg.client()
    plain = {t.name: t for t in c.request(p.ToolsList).tools}
    every = {t.name: t for t in c.request(p.ToolsList, include_system=True).tools}
    assert "probe_system" not in plain and "probe_system" in every
    assert set(every) - set(plain) == {"probe_system", "store_secret"}
    assert every["probe_system"].flags["system_use"] is True
    touch = plain["probe_touch"]
    assert touch.risk == "filesystem" and touch.input_schema["required"] == ["path"]
    assert touch.input_schema["properties"]["risk"]["default"] == "filesystem"
    assert touch.description.count("\n") == 2
    assert plain["probe_wait"].flags["concurrent"] is True
    assert plain["probe_bg"].flags["background"] is True
    assert plain["probe_slow"].flags["timeout_seconds"] == 0.3
    assert plain["probe_free"].flags["always_allow"] is True


@pytest.mark.one_loop
def test_calls_still_complete_after_the_audit_log_failed_to_rotate(rig, workspace):
    r = rig("[audit]\nmax_bytes = 1024\n")
    c = r.inproc.client(name="pytest", timeout=10)
    r.opened.append(c)
    session = c.open_session(workspace)
    assert c.call(session, "probe_echo", {"text": "first"}).ok
    (r.inproc.home / "state" / "audit.log").unlink()  # the next rotation has nothing to rename
    for i in range(12):  # well past max_bytes: one rotation fails, the others must not
        done = c.call(session, "probe_echo", {"text": f"t{i}"})
        assert done.ok and done.result == {"text": f"t{i}"}
    assert completions(settled_events(c)) == collections.Counter()
