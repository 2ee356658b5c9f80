"""The real daemon's audit log: buffered while calls run, yet nothing acknowledged is lost on SIGTERM."""

from __future__ import annotations

import signal

import msgspec


def audit_events(home) -> list[tuple[str, str]]:
    path = home / "state" / "audit.log"
    return [(r["event"], r.get("call_id", "")) for r in map(msgspec.json.decode, path.read_bytes().splitlines())]


def test_sigterm_right_after_the_last_answer_keeps_every_record(daemon, workspace):
    (workspace / "notes.txt").write_text("hello\n")
    with daemon.client(name="pytest") as c:
        session = c.open_session(workspace)
        answered = []
        for _ in range(50):
            done = c.call(session, "read", {"path": "notes.txt"})
            assert done.ok, done.error
            answered.append(done.call_id)
        daemon.proc.send_signal(signal.SIGTERM)  # before any flush interval could pass
        assert daemon.proc.wait(15) == 0
    seen = audit_events(daemon.home)
    for call_id in answered:
        assert ("proposal", call_id) in seen and ("completion", call_id) in seen


def test_a_denial_is_in_the_file_before_the_client_hears_of_it(make_daemon, workspace):
    d = make_daemon('[approvals]\npolicy = "never"\n')
    with d.client(name="pytest") as c:
        session = c.open_session(workspace)
        done = c.call(session, "write", {"path": "new.txt", "content": "x", "mode": "create"})
        assert not done.ok and done.error.kind == "denied"
        # still running: no flush interval, no shutdown, yet the denial is on disk
        assert ("proposal", done.call_id) in audit_events(d.home)
    assert d.proc.poll() is None
