"""The real daemon's audit log: buffered while calls run, yet nothing acknowledged is lost on SIGTERM."""

from __future__ import annotations

import os
import signal

import msgspec

import conftest
from harness import scvd_on_a_full_disk, wait_until
from scvctl.client import Client


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


def test_a_fifo_in_the_logs_place_that_nobody_reads_does_not_hang_the_daemon(make_daemon, scv_home, workspace):
    """A log shipper's FIFO at audit.log: once its reader stopped and its buffer (64 KiB) was full, the
    next write blocked the event loop for good, every client with it. It waits in memory as on a full
    disk, and goes out once the FIFO is read again."""
    (scv_home / "state").mkdir(mode=0o700)
    fifo = scv_home / "state" / "audit.log"
    os.mkfifo(fifo, 0o600)
    d = make_daemon(home=scv_home)
    (workspace / "notes.txt").write_text("hello\n")
    with d.client(name="pytest") as c:
        session = c.open_session(workspace)
        for _ in range(400):  # some 150 KiB of records
            done = c.call(session, "read", {"path": "notes.txt"})
            assert done.ok, done.error
        assert c.status().sessions == 1
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    read = bytearray()

    def drained() -> bool:
        try:
            read.extend(os.read(reader, 1 << 16))
        except BlockingIOError:
            pass
        return read.count(f'"call_id":"{done.call_id}"'.encode()) == 2  # its proposal and its completion

    try:
        wait_until(drained, what="the last call's records through the FIFO")
    finally:
        os.close(reader)
    assert d.proc.poll() is None


def test_a_stop_on_a_full_disk_says_how_many_records_it_lost_and_the_next_start_records_it(make_daemon, workspace):
    """A full disk (here RLIMIT_FSIZE: a write fails with EFBIG as with ENOSPC) at SIGTERM: the
    records waiting in memory were dropped with `audit log write failed: ...` alone, and no
    `records_lost` line ever counted them."""
    first = make_daemon(home=workspace.parent / "home")
    assert first.stop() == 0
    (workspace / "notes.txt").write_text("hello\n")
    with scvd_on_a_full_disk(first.env) as proc:
        conftest.wait_for_socket(first.socket, proc=proc)
        with Client.connect(first.socket) as c:
            session = c.open_session(workspace)
            for _ in range(7):
                assert c.call(session, "read", {"path": "notes.txt"}).ok
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
        err = proc.stderr.read().decode()
    audit = first.home / "state" / "audit.log"
    assert f"audit log {audit}: 14 record(s) lost as scvd stops, never written ([Errno 27] File too large); " \
           "the next start counts them in a records_lost line" in err, err
    again = make_daemon(home=first.home)
    with again.client(name="pytest") as c:
        assert c.call(c.open_session(workspace), "read", {"path": "notes.txt"}).ok
    assert again.stop() == 0
    events = [r["event"] for r in map(msgspec.json.decode, audit.read_bytes().splitlines())]
    assert events == ["records_lost", "proposal", "completion"]
    assert msgspec.json.decode(audit.read_bytes().splitlines()[0])["count"] == 14
