"""A `session` grant over the real socket: it also approves what its session already waits for."""

from __future__ import annotations

import json
import os
from typing import Annotated, Any

import msgspec
import pytest

from helpers.probe_tools import Probe, ProbeWait, Rig, WaitArgs, flush, probe_tools, requested, resolved
from scvd import protocol as p
from scvd.tools.contract import CallContext, Plan, ToolFlags, ToolRisk

pytestmark = pytest.mark.one_loop


class RunArgs(WaitArgs, forbid_unknown_fields=True):
    target: Annotated[str, msgspec.Meta(description="Workspace path it says it writes, e.g. '.envrc' "
                                                    "(default: none)")] = ""


class ProbeRun(ProbeWait):
    """A background job at risk process (bash-like): several of a session's calls wait at the gate at once."""

    name = "probe_run"
    description = ("Run in the background until the test opens a gate, at risk process.\n"
                   "Use for grants of pending calls; probe_wait for read-only ones.\n"
                   "Precondition: only in test daemons.")
    Arguments = RunArgs
    risk = ToolRisk.PROCESS
    flags = ToolFlags(background=True)

    def plan(self, args: Any, ctx: CallContext) -> Plan:
        return Plan(risk=ToolRisk.PROCESS, summary=f"probe_run {args.label}",
                    targets=(args.target,) if args.target else ())


@pytest.fixture
def grant_rig(make_inproc: Any) -> Any:
    probe = Probe()
    rg = Rig(make_inproc("", tools=[*probe_tools(probe), ProbeRun(probe)]), probe)
    yield rg
    rg.close()


def pending(w: Any) -> set[str]:
    return {a.approval_id for a in w.request(p.ApprovalsList).approvals}


def decisions(rg: Rig) -> dict[str, dict[str, Any]]:
    lines = (rg.inproc.home / "state" / "audit.log").read_text().splitlines()
    return {r["approval_id"]: r for r in map(json.loads, lines) if r["event"] == "decision"}


def test_a_session_grant_approves_what_its_session_already_waits_for(grant_rig: Rig, workspace: Any) -> None:
    rg = grant_rig
    w = rg.watcher("person")
    owner = rg.client(name="agent")
    sid, other = owner.open_session(workspace), owner.open_session(workspace)
    calls = {name: owner.start_call(s, "probe_run", {"label": name, **extra}) for name, s, extra in (
        ("first", sid, {}), ("second", sid, {}), ("envrc", sid, {"target": ".envrc"}), ("elsewhere", other, {}))}
    asked = {name: requested(w, call_id) for name, call_id in calls.items()}
    rg.probe.loop = rg.inproc.loop  # released up front: an approved call ends at once
    for label in calls:
        rg.probe.release(label)

    w.request(p.ApprovalDecide, approval_id=asked["first"].approval_id, decision="approve", scope="session")
    assert owner.wait_call(calls["first"]).ok
    # the call already waiting in the same session runs without anyone deciding it
    assert asked["second"].approval_id not in pending(w), "the grant left the same call of its session waiting"
    assert owner.wait_call(calls["second"]).ok
    done = resolved(w, asked["second"].approval_id)
    assert (done.state, done.scope) == ("approved", "session")
    assert "person" in done.decided_by and f"pid {os.getpid()}" in done.decided_by
    assert asked["first"].approval_id in done.reason and "session grant" in done.reason
    records = decisions(rg)
    assert records[asked["first"].approval_id]["scope"] == "session", "the audit hides which decision granted"
    record = records[asked["second"].approval_id]
    assert record["decision"] == "approved" and record["decided_by"]["client"] == "person"
    assert record["scope"] == "session"
    assert "session grant" in record["reason"]

    # one that always asks, and one of another session, still wait for a person
    assert pending(w) == {asked["envrc"].approval_id, asked["elsewhere"].approval_id}
    assert not rg.probe.has("start", "envrc") and not rg.probe.has("start", "elsewhere")
    for name in ("envrc", "elsewhere"):
        owner.request(p.ApprovalDecide, approval_id=asked[name].approval_id, decision="deny")
        assert owner.wait_call(calls[name]).error.kind == "denied"
    flush(w)
