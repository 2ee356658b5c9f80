"""Random interleavings of the call lifecycle against a real daemon: the promises of docs/protocol.md hold.

Several raw clients at once: agents that open sessions and send calls (read, write, bash with short
sleeps, an unknown tool, bad arguments, chosen call ids that collide), an approver that approves
(once or for the session), denies or ignores requests, and disruptions: call.cancel of queued,
waiting and running calls, session.close with calls in flight, a client that disconnects abruptly
(mid-frame, or with calls waiting) or half-closes, an approver that leaves while requests wait,
SIGHUP reloads, frames split across writes and many frames in one write.

After the run: every accepted call got exactly one `call.completed` on a connection still open
(a half-closed one too), its events came after its `call.accepted` and none after its completion,
seqs rise by one per connection, no request is listed for a call that had completed, nothing waits
(`status`), each surviving session's lane runs a new call, nothing a call whose request was refused
would have done was done, each approved write wrote what was sent, the audit log has exactly one
completion per accepted call, the daemon logged no error, and its fds are back where they started.

The seed is fixed; `SCVD_STRESS_SEED=N` (and `SCVD_STRESS_STEPS=N`) run another interleaving.
"""

from __future__ import annotations

import json
import os
import random
import re
import select
import signal
import socket
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import msgspec

from harness import wait_until
from scvd import protocol as p

SEED = int(os.environ.get("SCVD_STRESS_SEED", "20261206"))
STEPS = int(os.environ.get("SCVD_STRESS_STEPS", "400"))
CONFIG = """\
[tools]
progress_interval_seconds = 0.15
[server]
shutdown_grace_seconds = 5
[approvals]
timeout_seconds = 2
"""
GENERATED = re.compile(r"c[0-9]+-[0-9a-f]{8}")
# script tools: their arguments are checked off the loop after the call joined its lane (decode_blocks)
SCRIPT = {"description": "Touch the file a text names in the workspace.\nUse for stress tests; write for content.",
          "parameters": {"type": "object", "required": ["text"], "additionalProperties": False, "properties": {
              "text": {"type": "string", "maxLength": 100, "description": "The file name to touch, for the stress run, e.g. 'a.txt'."}}}}
TOUCH = """#!/bin/bash
exec python3 -c 'import json, sys, pathlib; pathlib.Path(json.load(sys.stdin)["text"]).touch(); print("{}")'
"""
WRITTEN = "x€😀"  # what each write sends: multi-byte characters, which a split write may cut in two
EVENTS = (p.CallStarted, p.CallProgress, p.CallCompleted)


class Peer:
    """One raw client connection: what it sent, and every frame it read, in order."""

    serial = 0

    def __init__(self, path: Path, name: str, *, approver: bool = False) -> None:
        Peer.serial += 1
        self.name = f"{name}{Peer.serial}"
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(str(path))
        self.sock.setblocking(False)
        self.buf = b""
        self.frames: list[Any] = []
        self.asked: dict[Any, str] = {}  # request id -> its type
        self.answers: dict[Any, Any] = {}
        self.sessions: list[str] = []
        self.chosen: set[str] = set()  # the call ids it chose
        self.closed_sessions: set[str] = set()
        self.gone = False  # we dropped it (no promise about what it hears)
        self.half_closed = False
        self.eof = False  # the server closed it
        self._ids = iter(range(1, 10**9))
        self.request({"type": "hello", "protocol": 1, "client": {"name": self.name}, "approver": approver})

    def frame(self, fields: dict[str, Any]) -> bytes:
        request_id = f"{self.name}-{next(self._ids)}"
        self.asked[request_id] = fields["type"]
        return msgspec.json.encode({"id": request_id, **fields}) + b"\n"

    def request(self, fields: dict[str, Any]) -> str:
        data = self.frame(fields)
        self.write(data)
        return json.loads(data)["id"]

    def write(self, data: bytes) -> None:
        self.sock.setblocking(True)
        try:
            self.sock.sendall(data)
        finally:
            self.sock.setblocking(False)

    def read(self) -> None:
        while not self.eof:
            try:
                chunk = self.sock.recv(1 << 16)
            except BlockingIOError:
                return
            except ConnectionResetError:
                chunk = b""
            if not chunk:
                self.eof = True
                return
            self.buf += chunk
            *lines, self.buf = self.buf.split(b"\n")
            for line in lines:
                frame = p.decode_server_frame(line)
                self.frames.append(frame)
                if getattr(frame, "id", None) is not None:
                    self.answers[frame.id] = frame

    def close(self) -> None:
        self.gone = True
        self.sock.close()  # again (a half-closed one, at the end) is harmless

    def accepted(self) -> Counter[str]:
        return Counter(f.call_id for f in self.frames if isinstance(f, p.CallAccepted))

    def completed(self) -> Counter[str]:
        return Counter(f.call_id for f in self.frames if isinstance(f, p.CallCompleted))

    def open_calls(self) -> list[str]:
        """The calls accepted and not completed yet (a chosen id may be used again once completed)."""
        return sorted(self.accepted() - self.completed())


class Run:
    """The clients of one stress run, the random choices, and what the checks need."""

    def __init__(self, d: Any, workspace: Path, rng: random.Random, seed: int, steps: int) -> None:
        self.d, self.ws, self.rng, self.seed, self.steps = d, workspace, rng, seed, steps
        self.agents = [Peer(d.socket, "agent", approver=i == 1) for i in range(3)]
        self.dropped: list[Peer] = []
        self.approver: Peer | None = None
        self.join_approver()
        self.effects: dict[str, Path] = {}  # call id -> the file its tool would make
        self.pending_writes: dict[str, Path] = {}  # request id -> that file, until the call id is known
        self.ended_before: dict[str, set[str]] = {}  # approvals.list request id -> the calls ended before it
        self.n = 0
        (workspace / "small.txt").write_text("hello\n")
        (workspace / ".env").write_text("KEY=1\n")
        self.pump(0.2)

    # --- plumbing --------------------------------------------------------------------

    def peers(self) -> list[Peer]:
        return [c for c in [*self.agents, self.approver] if c is not None and not c.gone]

    def pump(self, wait: float = 0.0) -> None:
        live = [c for c in self.peers() if not c.eof]
        if not live:
            return
        readable, _, _ = select.select([c.sock for c in live], [], [], wait)
        for c in live:
            if c.sock in readable:
                c.read()

    def join_approver(self) -> None:
        self.approver = Peer(self.d.socket, "approver")
        self.approver.request({"type": "approvals.watch"})

    def pending(self) -> dict[str, Any]:
        """The approval requests the approver saw that it has not seen resolved."""
        if self.approver is None:
            return {}
        open_: dict[str, Any] = {}
        for f in self.approver.frames:
            if isinstance(f, p.ApprovalRequested):
                open_[f.approval_id] = f
            elif isinstance(f, p.ApprovalResolved):
                open_.pop(f.approval_id, None)
        return open_

    def known_calls(self) -> list[str]:
        return [cid for c in self.agents for cid in c.accepted()]

    def agent(self) -> Peer:
        c = self.rng.choice(self.agents)
        if not c.sessions:
            c.request({"type": "session.open", "workspace": str(self.ws)})
            c.sessions.append("")  # filled once opened
        return c

    def session_of(self, c: Peer) -> str | None:
        opened = self.opened(c)
        return self.rng.choice(opened) if opened else None

    @staticmethod
    def opened(c: Peer) -> list[str]:
        """The sessions `c` opened and did not close."""
        for answer in c.answers.values():
            if isinstance(answer, p.SessionOpened) and answer.session not in c.sessions and \
                    answer.session not in c.closed_sessions:
                c.sessions = [s for s in c.sessions if s] + [answer.session]
        return [s for s in c.sessions if s]

    # --- the random steps --------------------------------------------------------------

    def call_frame(self, c: Peer, session: str) -> bytes:
        self.n += 1
        kind = self.rng.choices(["read", "write", "bash", "unknown", "bad", "collide", "script"],
                                [3, 3, 3, 1, 1, 1, 2])[0]
        fields: dict[str, Any] = {"type": "call", "session": session}
        target: Path | None = None
        if kind == "read":
            # a secret-like file asks, its plan holding the file open while it waits
            fields.update(tool="read", arguments={"path": self.rng.choice(["small.txt", "missing.txt", ".env"])})
        elif kind == "write":
            target = self.ws / f"w{self.n}.txt"
            fields.update(tool="write", arguments={"path": target.name, "content": WRITTEN, "mode": "create"})
        elif kind == "bash":
            target = self.ws / f"b{self.n}.txt"
            sleep = self.rng.choice([0, 0.05, 0.2, 0.5])
            fields.update(tool="bash", arguments={"command": f"sleep {sleep}; touch {target.name}"})
            if self.rng.random() < 0.15:  # some run into their dispatch timeout
                fields["timeout_seconds"] = 0.1
        elif kind == "script":  # one asks, one runs unasked alongside the reads (concurrent)
            target = self.ws / f"s{self.n}.txt"
            fields.update(tool=self.rng.choice(["script_touch", "script_quick"]),
                          arguments={"text": target.name if self.rng.random() < 0.8 else 42})
        elif kind == "unknown":
            fields.update(tool="no_such_tool", arguments={})
        elif kind == "bad":
            fields.update(tool="read", arguments={"path": 5})
        else:  # a chosen id: often one in use (refused), or one that completed (free again)
            known = self.known_calls()
            fields.update(tool="read", arguments={"path": "small.txt"},
                          call_id=self.rng.choice(known) if known and self.rng.random() < 0.7 else f"mine-{self.n}")
        if self.rng.random() < 0.15:  # a turn's call: denied at once when nobody could decide it
            fields["turn"] = f"t{self.n}"
        if "call_id" in fields:
            c.chosen.add(fields["call_id"])
        data = c.frame(fields)
        if target is not None:
            self.pending_writes[json.loads(data)["id"]] = target
        return data

    def step(self) -> None:
        rng = self.rng
        action = rng.choices(
            ["call", "batch", "split", "cancel", "decide", "close_session", "drop", "half_close",
             "approver_leaves", "reload", "wait"],
            [30, 6, 6, 10, 22, 3, 2, 1, 1, 1, 8])[0]
        if action in ("call", "batch", "split"):
            c = self.agent()
            session = self.session_of(c)
            if session is None:
                return
            frames = [self.call_frame(c, session) for _ in range(rng.randint(2, 6) if action == "batch" else 1)]
            if action == "batch" and rng.random() < 0.3:  # a request that waits (a task) amid them
                frames.insert(rng.randrange(len(frames)), c.frame({"type": "session.open", "workspace": str(self.ws)}))
            data = b"".join(frames)
            if action == "split":
                self._split_write(c, data)
            elif rng.random() < 0.1:  # more frames than one loop turn handles of a connection
                pings = [c.frame({"type": "ping"}) for _ in range(1100)]  # their pongs stay under 64 KiB
                cut = rng.randrange(1100)
                c.write(b"".join(pings[:cut]) + data + b"".join(pings[cut:]))
            else:
                c.write(data)
        elif action == "cancel":
            known = self.known_calls()
            if known:
                c = rng.choice(self.agents)
                c.request({"type": "call.cancel", "call_id": rng.choice(known)})
        elif action == "decide" and self.approver is not None:
            pending = self.pending()
            if pending:
                approval = pending[rng.choice(sorted(pending))]
                choice = rng.choices(["approve", "session", "deny", "ignore"], [4, 2, 3, 1])[0]
                if choice != "ignore":
                    frames = [self.approver.frame({
                        "type": "approval.decide", "approval_id": approval.approval_id,
                        "decision": "deny" if choice == "deny" else "approve",
                        "scope": "session" if choice == "session" else "once"})]
                    if rng.random() < 0.2:  # the call is cancelled in the same read, before or after
                        frames.insert(rng.randrange(2), self.approver.frame(
                            {"type": "call.cancel", "call_id": approval.call_id}))
                    self.approver.write(b"".join(frames))
        elif action == "close_session":
            c = rng.choice(self.agents)
            session = self.session_of(c)
            if session is not None:
                c.request({"type": "session.close", "session": session})
                c.sessions.remove(session)
                c.closed_sessions.add(session)
        elif action in ("drop", "half_close"):
            self.replace_agent(rng.randrange(len(self.agents)), action)
        elif action == "approver_leaves" and self.approver is not None:
            self.approver.close()
            self.dropped.append(self.approver)
            self.approver = None
        elif action == "reload":  # max_pending 4 at times: some calls are refused unasked
            # saved whole, as an editor does: a reload still reading after the last SIGHUP would find
            # a file cut short (and refuse it, empty) while write_text() rewrites it in place
            fresh = self.d.home / "config.toml.new"
            fresh.write_text(CONFIG + ("max_pending = 4\n" if rng.random() < 0.5 else ""))
            fresh.replace(self.d.home / "config.toml")
            self.d.proc.send_signal(signal.SIGHUP)
        if self.approver is None and rng.random() < 0.2:
            self.join_approver()
        self.pump(rng.choice([0, 0, 0.01, 0.05]))

    def _split_write(self, c: Peer, data: bytes) -> None:
        cuts = sorted(self.rng.sample(range(1, len(data)), min(3, len(data) - 1)))
        start = 0
        for cut in [*cuts, len(data)]:
            c.write(data[start:cut])
            start = cut
            self.pump(0.005)

    def replace_agent(self, i: int, how: str) -> None:
        c = self.agents[i]
        if how == "drop":
            if self.rng.random() < 0.5:  # mid-frame: half a call, then gone
                session = self.session_of(c) or "s0"
                c.write(self.call_frame(c, session)[:17])
            c.close()
            self.dropped.append(c)
        else:  # half-close: it still reads the cancelled calls' completions, then scvd closes it
            c.sock.shutdown(socket.SHUT_WR)
            c.half_closed = True
            self.dropped.append(c)
        self.agents[i] = Peer(self.d.socket, "agent", approver=self.rng.random() < 0.5)

    # --- the end ----------------------------------------------------------------------

    def settle(self, timeout: float = 60.0) -> None:
        """Decide every request until every open connection has every call completed, and the half-closed
        ones were closed by scvd."""
        if self.approver is None:
            self.join_approver()
        deadline = time.monotonic() + timeout
        decided: set[str] = set()
        while True:
            self.pump(0.05)
            for c in self.dropped:
                if c.half_closed and not c.eof:
                    readable, _, _ = select.select([c.sock], [], [], 0)
                    if readable:
                        c.read()
            open_calls = [cid for c in self.agents for cid in c.open_calls()]
            closing = [c.name for c in self.dropped if c.half_closed and not c.eof]
            unanswered = [r for c in self.peers() for r in c.asked if r not in c.answers]
            if not open_calls and not closing and not unanswered:
                return
            assert time.monotonic() < deadline, (
                f"calls never completed: {open_calls}; never closed: {closing}; unanswered: {unanswered}\n" + "\n".join(
                    f"{c.name}: {f}" for c in [*self.agents, *self.dropped, *self.peers()] for f in c.frames
                    if any(cid in repr(f) for cid in open_calls)) + "\n" + self.d.log()[-3000:])
            # a watcher is told of the requests made after its approvals.watch: list the older ones
            listed = [a.approval_id for answer in self.approver.answers.values()
                      if isinstance(answer, p.Approvals) for a in answer.approvals]
            if not any(kind == "approvals.list" and request_id not in self.approver.answers
                       for request_id, kind in self.approver.asked.items()):
                # no request listed may be of a call that had completed before the list was asked for
                self.ended_before[self.approver.request({"type": "approvals.list"})] = self.ended_calls()
            for approval_id in sorted((set(self.pending()) | set(listed)) - decided):
                decided.add(approval_id)
                self.approver.request({"type": "approval.decide", "approval_id": approval_id,
                                       "decision": self.rng.choice(["approve", "deny"])})

    def ended_calls(self) -> set[str]:
        """The calls read of as completed whose id was used once (a reused one may run again)."""
        accepted = sum((c.accepted() for c in [*self.agents, *self.dropped]), Counter())
        return {cid for c in [*self.agents, *self.dropped] for cid in c.completed() if accepted[cid] == 1}

    def listed_after_their_end(self) -> list[str]:
        """Requests approvals.list showed for calls that had completed before it was sent."""
        return [f"{a.approval_id} of {a.call_id} listed after its call completed"
                for c in [*self.dropped, *self.peers()] for request_id, ended in self.ended_before.items()
                if isinstance(c.answers.get(request_id), p.Approvals)
                for a in c.answers[request_id].approvals if a.call_id in ended]

    def effects_by_call(self) -> dict[str, Path]:
        for c in [*self.agents, *self.dropped]:
            for request_id, target in list(self.pending_writes.items()):
                answer = c.answers.get(request_id)
                if isinstance(answer, p.CallAccepted):
                    self.effects[answer.call_id] = target
        return self.effects


def fds_of(pid: int) -> set[str]:
    return set(os.listdir(f"/proc/{pid}/fd"))


def check_stream(c: Peer, *, whole: bool, answered: bool = True) -> list[str]:
    """What breaks a promise in the frames one connection read; `whole`: it stayed open to the end;
    `answered`: each of its requests was answered (a stop may close it with one still in a handler)."""
    problems = []
    seqs = [f.seq for f in c.frames if getattr(f, "seq", None)]
    if seqs != list(range(1, len(seqs) + 1)):
        problems.append(f"{c.name}: seqs {seqs[:50]}")
    open_: set[str] = set()  # accepted, not completed yet (a chosen id may be used again after that)
    for f in c.frames:
        if isinstance(f, p.CallAccepted):
            if f.call_id in open_:
                problems.append(f"{c.name}: {f.call_id} accepted again while in use")
            open_.add(f.call_id)
        elif isinstance(f, EVENTS):
            if f.call_id not in open_:
                problems.append(f"{c.name}: {type(f).__name__} of {f.call_id} outside its call.accepted .. "
                                "call.completed")
            if isinstance(f, p.CallCompleted):
                open_.discard(f.call_id)
    if whole and open_:
        problems.append(f"{c.name}: accepted but never completed: {sorted(open_)}")
    for request_id, kind in c.asked.items():
        if whole and answered and request_id not in c.answers:
            problems.append(f"{c.name}: {kind} {request_id} never answered")
    return problems


def audit_completions(home: Path) -> Counter[str]:
    path = home / "state" / "audit.log"
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return Counter(r["call_id"] for r in records if r.get("event") == "completion")


def daemon_with_scripts(make_daemon: Any, home: Path) -> Any:
    for name, spec in (("touch", {}), ("quick", {"concurrent": True, "always_allow": True, "risk": "read_only"})):
        folder = home / "tools" / "script" / name
        folder.mkdir(parents=True)
        (folder / "tool.json").write_text(json.dumps({**SCRIPT, **spec}))
        (folder / "run").write_text(TOUCH)
        (folder / "run").chmod(0o700)
    return make_daemon(CONFIG, home=home)


def log_errors(d: Any) -> list[str]:
    return [f"daemon log: {line}" for line in d.log().splitlines() if " ERROR " in line or "Traceback" in line]


def run_stress(make_daemon: Any, home: Path, workspace: Path, seed: int, steps: int) -> None:
    d = daemon_with_scripts(make_daemon, home)
    rng = random.Random(seed)
    probe = Peer(d.socket, "probe")
    probe.request({"type": "status"})
    wait_until(lambda: (probe.read(), any(isinstance(f, p.StatusResult) for f in probe.frames))[1])
    with_probe = len(fds_of(d.proc.pid))
    probe.close()
    wait_until(lambda: len(fds_of(d.proc.pid)) < with_probe, what="the probe's connection closed")
    fds_before = fds_of(d.proc.pid)

    run = Run(d, workspace, rng, seed, steps)
    try:
        check_run(d, run, fds_before)
    finally:
        for c in [*run.agents, *run.dropped, *([run.approver] if run.approver else [])]:
            c.sock.close()
    assert d.stop() == 0, d.log()


def check_run(d: Any, run: Run, fds_before: set[str]) -> None:
    for _ in range(run.steps):
        run.step()
    run.settle()

    problems = run.listed_after_their_end()
    for c in run.agents:
        problems += check_stream(c, whole=True)
    for c in run.dropped:
        problems += check_stream(c, whole=c.half_closed)
    if run.approver is not None:
        problems += check_stream(run.approver, whole=True)

    # every surviving session's lane runs a new call
    for c in run.agents:
        for session in run.opened(c):
            c.request({"type": "call", "session": session, "tool": "read", "arguments": {"path": "small.txt"},
                       "call_id": f"last-{session}"})
    last = {f"last-{s}": c for c in run.agents for s in run.opened(c)}
    deadline = time.monotonic() + 30
    while any(call_id not in c.completed() for call_id, c in last.items()) and time.monotonic() < deadline:
        run.pump(0.05)
    for call_id, c in last.items():
        if call_id not in c.completed():
            answer = [a for a in c.answers.values() if getattr(a, "call_id", None) == call_id or
                      isinstance(a, p.Error) and call_id[5:] in a.message]
            problems.append(f"{c.name}: the session's new call {call_id} never completed: {answer}")
    for c in run.agents:
        for f in c.frames:
            if isinstance(f, p.CallCompleted) and f.call_id.startswith("last-") and not f.ok:
                problems.append(f"{c.name}: last call {f.call_id} failed: {f.error}")

    # nothing a call whose request was denied, expired, cancelled or dropped would have done was done
    resolved: dict[str, set[str]] = defaultdict(set)
    for c in [*run.agents, *run.dropped, *([run.approver] if run.approver else [])]:
        for f in c.frames:
            if isinstance(f, p.ApprovalResolved):
                resolved[f.call_id].add(f.state)
    outcomes = {f.call_id: f for c in [*run.agents, *run.dropped] for f in c.frames if isinstance(f, p.CallCompleted)}
    used = sum((c.accepted() for c in [*run.agents, *run.dropped]), Counter())
    for call_id, target in run.effects_by_call().items():
        states = resolved.get(call_id, set())
        if states and "approved" not in states and target.exists():
            problems.append(f"{call_id}: its request ended {sorted(states)}, yet {target.name} exists")
        done = outcomes.get(call_id) if used[call_id] == 1 else None  # a reused id: which call ended how?
        if done is not None and done.ok and target.name.startswith("w") and \
                (target.read_text() if target.exists() else None) != WRITTEN:
            problems.append(f"{call_id}: {target.name} does not hold what was sent")

    # nothing waits; the audit log has one completion per accepted call
    status = Peer(d.socket, "status")
    deadline = time.monotonic() + 15  # the calls of dropped connections may still be stopping
    while True:
        status_id = status.request({"type": "status"})
        wait_until(lambda: (status.read(), status_id in status.answers)[1])
        st = status.answers[status_id]
        if not (st.running_calls or st.pending_approvals) or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    open_sessions = sum(len(run.opened(c)) for c in run.agents)
    if st.running_calls or st.pending_approvals or st.sessions != open_sessions:
        problems.append(f"status after the run: {st.running_calls} running calls, {st.pending_approvals} pending "
                        f"approvals, {st.sessions} sessions ({open_sessions} open)")
    accepted = sum((c.accepted() for c in [*run.agents, *run.dropped]), Counter())
    # a connection dropped abruptly may have had calls accepted that it never read of
    unseen = {cid for c in run.dropped if not c.half_closed for cid in c.chosen} | {"generated"}
    wait_until(lambda: not accepted - audit_completions(d.home), 10, "the audit log's completions")
    audit = audit_completions(d.home)
    for call_id in set(accepted) | set(audit):
        maybe_more = call_id in unseen or (call_id not in accepted and GENERATED.fullmatch(call_id))
        if audit[call_id] != accepted[call_id] and not (maybe_more and audit[call_id] > accepted[call_id]):
            problems.append(f"{call_id}: accepted {accepted[call_id]} time(s), {audit[call_id]} completion record(s)")

    status.close()
    for c in [*run.agents, *run.dropped, *([run.approver] if run.approver else [])]:
        c.close()
    deadline = time.monotonic() + 15
    while not fds_of(d.proc.pid) <= fds_before and time.monotonic() < deadline:
        time.sleep(0.05)
    if not fds_of(d.proc.pid) <= fds_before:
        left = {fd: os.readlink(f"/proc/{d.proc.pid}/fd/{fd}") for fd in fds_of(d.proc.pid) - fds_before
                if os.path.exists(f"/proc/{d.proc.pid}/fd/{fd}")}
        problems.append(f"fds left open: {left}")
    problems += log_errors(d)
    assert not problems, f"seed {run.seed}:\n" + "\n".join(problems[:40])


def test_random_interleavings_keep_the_protocol_promises(make_daemon: Any, scv_home: Path, workspace: Path) -> None:
    run_stress(make_daemon, scv_home, workspace, SEED, STEPS)


def test_a_stop_amid_random_interleavings_completes_every_call_first(make_daemon: Any, scv_home: Path,
                                                                      workspace: Path) -> None:
    """SIGTERM with calls queued, waiting for a person and running: every connection still open hears
    each accepted call's `call.completed` before scvd closes it."""
    d = daemon_with_scripts(make_daemon, scv_home)
    run = Run(d, workspace, random.Random(SEED + 1), SEED + 1, STEPS // 2)
    try:
        for _ in range(run.steps):
            run.step()
        d.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 30
        while any(not c.eof for c in run.peers()) and time.monotonic() < deadline:
            run.pump(0.05)
        problems = [f"{c.name}: not closed by scvd's stop" for c in run.peers() if not c.eof]
        for c in run.peers():
            problems += check_stream(c, whole=True, answered=False)
        for c in run.dropped:
            problems += check_stream(c, whole=False)
        assert d.proc.wait(15) == 0, d.log()
        problems += log_errors(d)
        assert not problems, f"seed {run.seed}:\n" + "\n".join(problems[:40])
        accepted = sum((c.accepted() for c in [*run.agents, *run.dropped]), Counter())
        assert not accepted - audit_completions(d.home), "a completion record is missing after a clean stop"
    finally:
        for c in [*run.agents, *run.dropped, *([run.approver] if run.approver else [])]:
            c.sock.close()
