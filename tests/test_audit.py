"""The audit log: allow-listed fields only, 0600, buffered on the loop but never lost, rotation by size."""

from __future__ import annotations

import asyncio
import datetime
import logging
import os
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import msgspec
import pytest

from scvd import audit as audit_mod
from scvd.audit import FIELDS, MAX_STRING, AuditLog
from scvd.tools.contract import ToolRisk

SECRET = "sk-live-0123456789abcdef"


def lines(path: Path) -> list[dict]:
    return [msgspec.json.decode(line) for line in path.read_bytes().splitlines()]


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def audit(tmp_path):
    with AuditLog(tmp_path / "state" / "audit.log", max_bytes=1 << 20, keep=3) as log:
        yield log


def test_one_json_line_per_record_flushed_at_once(audit):
    audit.record("proposal", tool="read", session="s1", call_id="c1", risk=ToolRisk.FILESYSTEM,
                 policy="on-risk", decision="ask")
    # visible to a reader while the log is still open: no user-space buffer
    first = lines(audit.path)
    assert len(first) == 1
    rec = first[0]
    assert rec.pop("ts").endswith("Z") and rec == {
        "event": "proposal", "tool": "read", "session": "s1", "call_id": "c1",
        "risk": "filesystem", "policy": "on-risk", "decision": "ask",
    }
    audit.record("completion", tool="read", call_id="c1", outcome="ok", duration_s=0.012)
    assert [r["event"] for r in lines(audit.path)] == ["proposal", "completion"]


def test_file_and_directory_are_private_whatever_the_umask(tmp_path):
    old = os.umask(0o022)
    try:
        with AuditLog(tmp_path / "state" / "audit.log", 1 << 20, 3) as log:
            log.record("decision", decision="approved")
    finally:
        os.umask(old)
    assert mode(tmp_path / "state" / "audit.log") == 0o600
    assert mode(tmp_path / "state") == 0o700


def test_an_existing_loose_file_is_tightened_and_appended_to(tmp_path):
    path = tmp_path / "audit.log"
    path.write_text('{"event":"old"}\n')
    path.chmod(0o644)
    with AuditLog(path, 1 << 20, 3) as log:
        log.record("decision", decision="denied")
    assert mode(path) == 0o600
    assert [r["event"] for r in lines(path)] == ["old", "decision"]


def test_fields_outside_the_allow_list_never_reach_the_file(audit, caplog):
    with caplog.at_level(logging.WARNING, logger="scvd.audit"):
        for _ in range(3):
            audit.record(
                "completion", tool="write", outcome="ok",
                content=f"API_KEY={SECRET}\n", arguments={"content": SECRET}, result=SECRET,
                decided_by={"pid": 42, "uid": 1000, "client": "scvctl", "env": SECRET},
            )
    raw = audit.path.read_bytes()
    assert SECRET.encode() not in raw
    rec = lines(audit.path)[0]
    assert set(rec) == {"ts", "event", "tool", "outcome", "decided_by"}
    assert rec["decided_by"] == {"pid": 42, "uid": 1000, "client": "scvctl"}
    warned = sorted(r.getMessage().split("'")[1] for r in caplog.records)
    assert warned == ["arguments", "content", "decided_by.env", "result"]  # once each
    assert all(SECRET not in r.getMessage() for r in caplog.records)


def test_allowed_names_with_structured_values_are_dropped(audit):
    # a list or dict under an allowed name could carry anything: only scalars pass
    audit.record("completion", reason=[SECRET], error_kind={"msg": SECRET}, outcome=b"bytes")
    assert SECRET.encode() not in audit.path.read_bytes()
    assert set(lines(audit.path)[0]) == {"ts", "event"}


def test_a_calls_records_as_structs_are_the_lines_their_dicts_were(audit, run_loop):
    """A call's proposal and completion (audit.Record kinds, formatted without a dict) come out as
    the same bytes as record() of the same fields; a value that is no scalar is dropped as in a dict,
    a string past MAX_STRING cut, and a kind with a name outside FIELDS refused at its first record."""
    proposal = dict(tool="read", session="s1", call_id="c1-ab", risk="read_only", policy="on-risk", decision="run")
    completion = dict(tool="read", session="s1", call_id="c1-ab", outcome="ok", error_kind=None, duration_s=0.25)

    async def main() -> None:
        audit.add_record(audit_mod.Proposal(**proposal))
        audit.add_record(audit_mod.Completion(**completion))
        audit.add_record(audit_mod.Completion(**dict(completion, tool=[SECRET], error_kind=b"bytes")))
        audit.add_record(audit_mod.Completion(**dict(completion, tool="x" * 10_000)))
        audit.flush()

    run_loop(main())
    got = [{k: v for k, v in line.items() if k != "ts"} for line in lines(audit.path)]
    assert got[:2] == [{"event": "proposal", **proposal}, {"event": "completion", **completion}]
    assert list(got[0]) == ["event", *proposal] and list(got[1]) == ["event", *completion]  # the order too
    assert SECRET.encode() not in audit.path.read_bytes() and "tool" not in got[2] and "error_kind" not in got[2]
    assert got[3]["tool"] == "x" * MAX_STRING + "..."

    class Leaky(audit_mod.Record, kw_only=True):
        event: str = "completion"
        content: str

    with pytest.raises(ValueError, match="allowed fields"):
        audit.add_record(Leaky(content=SECRET))


def test_long_strings_are_capped(audit):
    audit.record("decision", reason="x" * 10_000)
    reason = lines(audit.path)[0]["reason"]
    assert len(reason) == MAX_STRING + 3 and reason.endswith("...")


def test_allow_list_is_the_documented_one(tmp_path):
    assert FIELDS == {
        "tool", "session", "call_id", "risk", "decision", "decided_by", "duration_s",
        "outcome", "error_kind", "approval_id", "policy", "reason", "scope",
        "request_id", "key", "state", "source",
    }
    # the log holds no paths (security.md): a workspace named in a record is dropped
    with AuditLog(tmp_path / "audit.log", max_bytes=1 << 20, keep=3) as log:
        log.record("proposal", tool="read", workspace="/home/u/proj")
    assert "workspace" not in lines(tmp_path / "audit.log")[0]


@pytest.mark.parametrize("event", ["", "Decision", "a b", "x" * 65, "call\ncompleted"])
def test_event_names_are_checked(audit, event):
    with pytest.raises(ValueError):
        audit.record(event)
    assert audit.path.read_bytes() == b""


def test_threads_never_interleave_lines(audit):
    def writer(n: int) -> None:
        for i in range(200):
            audit.record("completion", call_id=f"t{n}-{i}", reason="r" * 300)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ids = [r["call_id"] for r in lines(audit.path)]
    assert sorted(ids) == sorted(f"t{n}-{i}" for n in range(4) for i in range(200))


def test_rotation_keeps_n_files_under_the_size(tmp_path):
    path = tmp_path / "audit.log"
    with AuditLog(path, max_bytes=1000, keep=2) as log:
        for i in range(100):
            log.record("completion", call_id=f"c{i:03d}", outcome="ok")
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == ["audit.log", "audit.log.1", "audit.log.2"]
    for name in files:
        assert (tmp_path / name).stat().st_size <= 1000 and mode(tmp_path / name) == 0o600
    newest, older, oldest = (lines(tmp_path / n) for n in files)
    assert newest[-1]["call_id"] == "c099"
    # contiguous history across the kept files, the oldest records gone
    ids = [r["call_id"] for r in oldest + older + newest]
    assert ids == [f"c{i:03d}" for i in range(100 - len(ids), 100)] and len(ids) < 100


def test_a_large_keep_rotates_the_generations_there_are(tmp_path):
    """Rotation looked at every number up to audit.keep: 10 million took minutes per rotation, on the
    event loop (past the watchdog). It moves the files that exist; the oldest are kept in order."""
    path = tmp_path / "audit.log"
    with AuditLog(path, max_bytes=300, keep=10_000_000) as log:
        for i in range(12):
            log.record("completion", call_id=f"c{i:02d}", reason="x" * 120)
    names = ["audit.log"] + [f"audit.log.{n}" for n in range(1, len(list(tmp_path.iterdir())))]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(names)  # .1, .2, ... with no gap
    ids = [r["call_id"] for n in reversed(names) for r in lines(tmp_path / n)]
    assert ids == [f"c{i:02d}" for i in range(12)]  # nothing lost, oldest in the highest number


def test_keep_zero_truncates_in_place(tmp_path):
    path = tmp_path / "audit.log"
    with AuditLog(path, max_bytes=500, keep=0) as log:
        for i in range(50):
            log.record("completion", call_id=f"c{i:03d}")
    assert [p.name for p in tmp_path.iterdir()] == ["audit.log"]
    assert lines(path)[-1]["call_id"] == "c049" and path.stat().st_size <= 500


def test_a_record_larger_than_max_bytes_is_still_written(tmp_path):
    with AuditLog(tmp_path / "audit.log", max_bytes=100, keep=1) as log:
        log.record("decision", reason="y" * 300)
        log.record("decision", reason="z" * 300)
    assert lines(tmp_path / "audit.log")[0]["reason"].startswith("z")
    assert lines(tmp_path / "audit.log.1")[0]["reason"].startswith("y")


def test_a_symlink_in_place_of_the_log_is_refused(tmp_path):
    target = tmp_path / "elsewhere"
    target.write_text("")
    (tmp_path / "audit.log").symlink_to(target)
    with pytest.raises(OSError):
        AuditLog(tmp_path / "audit.log", 1000, 1)
    assert target.read_text() == ""


def test_record_after_close_is_an_error(tmp_path):
    log = AuditLog(tmp_path / "audit.log", 1000, 1)
    log.close()
    with pytest.raises(ValueError, match="closed"):
        log.record("decision")


def test_a_failed_rotation_does_not_close_the_log_for_good(tmp_path):
    """A rotation that cannot rename (a directory in audit.log.1's place) fails that write only."""
    path = tmp_path / "audit.log"
    with AuditLog(path, max_bytes=400, keep=1) as log:
        log.record("completion", call_id="c0", reason="x" * 200)
        (tmp_path / "audit.log.1").mkdir()
        (tmp_path / "audit.log.1" / "in-the-way").write_text("")
        with pytest.raises(OSError):
            log.record("completion", call_id="c1", reason="y" * 150)  # rotation: audit.log.1 is taken
        (tmp_path / "audit.log.1" / "in-the-way").unlink()
        (tmp_path / "audit.log.1").rmdir()
        log.record("completion", call_id="c2")
    # the record whose write failed stayed buffered and went out with the next one: not lost
    assert [r["call_id"] for r in lines(path)] == ["c1", "c2"]
    assert [r["call_id"] for r in lines(path.with_name("audit.log.1"))] == ["c0"]
    assert mode(path) == 0o600


@pytest.mark.parametrize("how", ["deleted", "moved"])
def test_a_log_removed_or_moved_away_is_made_again_at_its_path(tmp_path, caplog, how):
    """Records went on into the file that was gone (deleted: lost to anyone; moved: into the old
    name) until the next rotation, and the rotation itself then failed."""
    path = tmp_path / "audit.log"
    with AuditLog(path, max_bytes=1 << 20, keep=2) as log:
        log.record("completion", call_id="c0")
        if how == "deleted":  # e.g. an operator cleaning up the state directory
            path.unlink()
        else:  # a log rotator without copytruncate
            path.rename(tmp_path / "audit.log-20261204")
        with caplog.at_level(logging.WARNING, logger="scvd.audit"):
            log.record("completion", call_id="c1")
            log.record("completion", call_id="c2")
    assert [r["call_id"] for r in lines(path)] == ["c1", "c2"] and mode(path) == 0o600
    if how == "moved":
        assert [r["call_id"] for r in lines(tmp_path / "audit.log-20261204")] == ["c0"]
    warned = [r.getMessage() for r in caplog.records]
    assert warned == [f"audit log {path} was removed or moved away; writing to a new one there"]


def test_a_log_emptied_in_place_counts_its_size_afresh(tmp_path):
    """logrotate's copytruncate: scvd counted the old size on and rotated a near-empty file."""
    path = tmp_path / "audit.log"
    with AuditLog(path, max_bytes=1000, keep=2) as log:
        while path.stat().st_size < 800:
            log.record("completion", call_id="before", reason="x" * 50)
        os.truncate(path, 0)
        log.record("completion", call_id="after", reason="x" * 200)  # past 1000 with the old size
    assert sorted(p.name for p in tmp_path.iterdir()) == ["audit.log"]
    assert [r["call_id"] for r in lines(path)] == ["after"]


def test_a_lowered_keep_drops_the_generations_past_it(tmp_path):
    path = tmp_path / "audit.log"
    for n in range(1, 6):  # left by audit.keep = 5
        (tmp_path / f"audit.log.{n}").write_text(f'{{"gen": {n}}}\n')
    with AuditLog(path, max_bytes=200, keep=2) as log:
        log.record("completion", call_id="c0", reason="x" * 150)
        log.record("completion", call_id="c1", reason="x" * 150)  # one rotation
    assert sorted(p.name for p in tmp_path.iterdir()) == ["audit.log", "audit.log.1", "audit.log.2"]
    assert lines(tmp_path / "audit.log.2") == [{"gen": 1}]
    assert [r["call_id"] for r in lines(tmp_path / "audit.log.1")] == ["c0"]


# On the event loop: records wait in memory (a call never waits on the file), decisions
# and denials do not, and nothing buffered is lost at close.


def events(path: Path) -> list[str]:
    return [f"{r['event']}:{r.get('call_id', '')}" for r in lines(path)] if path.exists() else []


def test_on_the_loop_records_are_buffered_then_written_within_the_interval(audit, run_loop):
    async def main() -> None:
        audit.record("proposal", call_id="c1", decision="run")
        audit.record("completion", call_id="c1", outcome="ok")
        assert events(audit.path) == []  # nothing written while the call answers
        for _ in range(1000):
            if events(audit.path):
                break
            await asyncio.sleep(0.01)
        assert events(audit.path) == ["proposal:c1", "completion:c1"]

    run_loop(main())


@pytest.mark.parametrize("event, fields", [
    ("decision", {"decision": "approved"}),
    ("secret_resolved", {}),
    ("proposal", {"decision": "deny"}),
    ("completion", {"error_kind": "denied", "outcome": "error"}),
])
def test_decisions_and_denials_are_written_at_once_after_what_came_before(audit, run_loop, event, fields):
    async def main() -> None:
        audit.record("proposal", call_id="c1", decision="ask")
        audit.record(event, call_id="c2", **fields)
        assert events(audit.path) == ["proposal:c1", f"{event}:c2"]

    run_loop(main())


def test_close_writes_what_is_buffered(tmp_path, run_loop):
    log = AuditLog(tmp_path / "audit.log", 1 << 20, 1)

    async def main() -> None:
        for i in range(5):
            log.record("completion", call_id=f"c{i}", outcome="ok")
        assert events(log.path) == []
        log.close()  # what shutdown does on SIGTERM

    run_loop(main())
    assert events(log.path) == [f"completion:c{i}" for i in range(5)]


def test_a_full_buffer_is_written_without_waiting(audit, run_loop):
    async def main() -> int:
        count = 0
        while not events(audit.path):
            audit.record("completion", call_id=f"c{count}", reason="r" * 400)
            count += 1
            assert count < 10_000
        return count

    count = run_loop(main())
    assert count > 1 and audit.path.stat().st_size >= audit_mod.BUFFER_BYTES  # held until full


def test_rotation_applies_to_buffered_records_line_by_line(tmp_path, run_loop):
    path = tmp_path / "audit.log"
    log = AuditLog(path, max_bytes=500, keep=5)

    async def main() -> None:
        for i in range(40):
            log.record("completion", call_id=f"c{i:03d}", outcome="ok")
        log.close()

    run_loop(main())
    files = [path] + [path.with_name(f"audit.log.{i}") for i in range(1, 6)]
    assert all(f.stat().st_size <= 500 for f in files if f.exists())
    kept = [r["call_id"] for f in reversed(files) if f.exists() for r in lines(f)]
    assert kept == [f"c{i:03d}" for i in range(40)][-len(kept):]  # oldest files dropped, order kept


def test_unbuffer_writes_the_buffer_and_every_later_record_at_once(audit, run_loop):
    async def main() -> None:
        audit.record("completion", call_id="c1", outcome="ok")
        assert events(audit.path) == []
        audit.unbuffer()
        assert events(audit.path) == ["completion:c1"]
        audit.record("completion", call_id="c2", outcome="ok")
        assert events(audit.path) == ["completion:c1", "completion:c2"]

    run_loop(main())


def test_a_record_formatted_later_keeps_the_time_it_was_made(audit, run_loop):
    """On the loop a record is formatted later, after the call's answer went out (here: by the
    flush); its `ts` is still when record() was called."""
    async def main() -> tuple[float, float]:
        before = time.time()
        audit.record("completion", call_id="c1", outcome="ok")
        after = time.time()
        time.sleep(0.3)  # this turn goes on for a while before the loop formats the record
        await asyncio.sleep(0)
        audit.flush()
        return before, after

    before, after = run_loop(main())
    [record] = lines(audit.path)
    ts = datetime.datetime.strptime(record["ts"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(
        tzinfo=datetime.timezone.utc).timestamp()
    assert int(before * 1000) <= round(ts * 1000) <= int(after * 1000) + 1


def test_timestamps_are_utc_to_the_millisecond():
    from scvd.audit import _timestamp

    assert _timestamp(1700000000.123) == "2023-11-14T22:13:20.123Z"
    assert _timestamp(1700000000.0) == "2023-11-14T22:13:20.000Z"
    assert _timestamp(1700000001.9999) == "2023-11-14T22:13:21.999Z"
    assert _timestamp(1699999999.5) == "2023-11-14T22:13:19.500Z"  # a clock set back: its own second
    assert _timestamp(1700000002.0005) == "2023-11-14T22:13:22.000Z"


def test_records_made_on_the_loop_are_written_in_order_by_the_flush(audit, run_loop):
    """Formatted in batches of their own (FORMAT_BATCH, or the flush): none lost, none reordered."""
    async def main() -> None:
        for i in range(300):
            audit.record("completion", call_id=f"c{i}", outcome="ok")
            if i % 7 == 0:
                await asyncio.sleep(0)
        audit.flush()

    run_loop(main())
    assert [r["call_id"] for r in lines(audit.path)] == [f"c{i}" for i in range(300)]


# A full disk (here RLIMIT_FSIZE; Python ignores SIGXFSZ, so write() fails with EFBIG as with
# ENOSPC) cuts a write short: the file then holds the head of a record.
FULL_DISK = r"""
import os, resource, sys
from scvd.audit import AuditLog
path, limit = sys.argv[1], int(sys.argv[2])
with AuditLog(path, max_bytes=1 << 20, keep=1) as log:
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))
    failed = 0
    for i in range(8):
        try:
            log.record("completion", call_id=f"c{i}", reason="r" * 100)
        except OSError:
            failed += 1
    assert failed and os.path.getsize(path) == limit, (failed, os.path.getsize(path))
    if sys.argv[3] == "freed":
        resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
        log.record("completion", call_id="c8")
    else:
        log._buffer.clear()  # the daemon killed: what was buffered is gone
"""


def test_a_write_cut_short_by_a_full_disk_is_ended_when_there_is_room(tmp_path):
    path = tmp_path / "audit.log"
    run = subprocess.run([sys.executable, "-c", FULL_DISK, str(path), "300", "freed"],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    # every record once and whole: the cut one's tail went out first, nothing written twice
    assert [r["call_id"] for r in lines(path)] == [f"c{i}" for i in range(9)]


def test_a_line_left_cut_short_is_taken_out_and_counted_at_the_next_start(tmp_path):
    """The head of a record a kill left was ended with a newline and kept: `jq` stops at that
    line (`Invalid string ... at line N`), so it never showed the records after it."""
    path = tmp_path / "audit.log"
    run = subprocess.run([sys.executable, "-c", FULL_DISK, str(path), "300", "lost"],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    whole = path.read_bytes().splitlines()[:-1]
    with AuditLog(path, max_bytes=1 << 20, keep=1) as log:  # the next start
        log.record("completion", call_id="next")
    raw = path.read_bytes().splitlines()
    assert raw[:len(whole)] == whole
    assert [(r["event"], r.get("count"), r.get("call_id")) for r in lines(path)[len(whole):]] == [
        ("records_lost", 1, None), ("completion", None, "next")]


START_ON_A_FULL_DISK = r"""
import os, resource, sys
from scvd.audit import AuditLog
path = sys.argv[1]
resource.setrlimit(resource.RLIMIT_FSIZE, (os.path.getsize(path), resource.RLIM_INFINITY))
log = AuditLog(path, max_bytes=1 << 20, keep=1)  # its first act, ending the cut line, fails
try:
    log.record("completion", call_id="while-full")
except OSError:
    pass
else:
    raise AssertionError("the write went through")
resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
log.record("completion", call_id="with-room")
log.close()
"""


def test_a_start_on_a_disk_still_full_runs_and_counts_the_cut_line_once_there_is_room(tmp_path):
    """scvd did not start at all: ending the line left cut short raised out of AuditLog()."""
    path = tmp_path / "audit.log"
    path.write_bytes(b'{"event":"completion","call_id":"before"}\n{"event":"compl')
    run = subprocess.run([sys.executable, "-c", START_ON_A_FULL_DISK, str(path)],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert [(r["event"], r.get("count"), r.get("call_id")) for r in lines(path)] == [
        ("completion", None, "before"), ("records_lost", 1, None),
        ("completion", None, "while-full"), ("completion", None, "with-room")]


FULL_DISK_UNDER_LOAD = r"""
import asyncio, json, logging, os, resource, sys
from scvd.audit import AuditLog
logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(levelname)s %(message)s")
path, extra = sys.argv[1], json.loads(sys.argv[2])

async def main():
    with AuditLog(path, max_bytes=1 << 30, keep=1) as audit:
        audit.add("completion", {"call_id": "before"})
        audit.flush()
        resource.setrlimit(resource.RLIMIT_FSIZE, (os.path.getsize(path) + 100, resource.RLIM_INFINITY))
        for i in range(3000):  # as calls.py records them: an error is logged, the call goes on
            try:
                audit.add("completion", {"call_id": f"c{i}", "reason": "r" * 100, **extra})
            except OSError as exc:
                logging.getLogger("scvd.calls").error("audit log write failed: %s", exc)
            if i % 100 == 0:
                await asyncio.sleep(0)
        await asyncio.sleep(1.2)  # the timer tries again, quietly
        resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
        await asyncio.sleep(1.0)  # and writes the backlog once there is room, with no record to prompt it
        print(sum(1 for _ in open(path)), flush=True)

asyncio.run(main())
"""


@pytest.mark.parametrize("extra", ["{}", '{"error_kind": "denied"}'], ids=["buffered", "denials"])
def test_a_full_disk_is_logged_once_retried_on_the_timer_and_the_backlog_written_once_there_is_room(tmp_path, extra):
    # every record past BUFFER_BYTES wrote the whole backlog again and logged an error: 34,388 lines,
    # and ever slower calls, on a full disk; so did every denial (written at once: policy never denies
    # every call), though the failure is said once
    path = tmp_path / "audit.log"
    run = in_a_process(FULL_DISK_UNDER_LOAD, path, extra)
    assert run.stderr.count("audit log write failed") == 1, run.stderr[-2000:]
    assert "is written again: the records kept meanwhile are in it" in run.stderr
    assert run.stdout.strip() == "3001"  # before the backlog was written and the process ended
    assert [r["call_id"] for r in lines(path)] == ["before", *(f"c{i}" for i in range(3000))]


URGENT_ON_A_FULL_DISK = r"""
import asyncio, os, resource, sys
from scvd.audit import AuditLog
path = sys.argv[1]

async def main():
    with AuditLog(path, max_bytes=1 << 30, keep=1) as audit:  # no record before: no timer is running
        resource.setrlimit(resource.RLIMIT_FSIZE, (10, resource.RLIM_INFINITY))
        try:
            audit.add("decision", {"call_id": "decided", "decision": "approve"})  # written at once: fails
        except OSError:
            pass
        else:
            raise AssertionError("the write went through")
        resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
        await asyncio.sleep(1.0)  # no other record comes: the timer writes it
        print(open(path).read().count("decided"), flush=True)

asyncio.run(main())
"""


def test_a_decision_a_full_disk_refused_is_written_by_the_timer_once_there_is_room(tmp_path):
    assert in_a_process(URGENT_ON_A_FULL_DISK, tmp_path / "audit.log").stdout.strip() == "1"


def in_a_process(script: str, path: Path, *args: str) -> subprocess.CompletedProcess:
    """`script` run by a Python of its own (RLIMIT_FSIZE is the process's), which must succeed."""
    run = subprocess.run([sys.executable, "-c", script, str(path), *args], capture_output=True, text=True,
                         timeout=60)
    assert run.returncode == 0, run.stderr
    return run


BACKLOG_ON_A_FULL_DISK = r"""
import asyncio, logging, os, resource, sys
from scvd import audit as audit_mod
logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(levelname)s %(message)s")
audit_mod.BUFFER_BYTES, audit_mod.BACKLOG_MAX = 4_000, 20_000  # 64 KiB and 16 MiB in the daemon
path = sys.argv[1]

async def main():
    with audit_mod.AuditLog(path, max_bytes=1 << 30, keep=1) as audit:
        resource.setrlimit(resource.RLIMIT_FSIZE, (10, resource.RLIM_INFINITY))
        for i in range(1000):  # about 100 bytes a record: some 200 fit in the backlog
            try:
                audit.add("completion", {"call_id": f"c{i}", "outcome": "ok"})
            except OSError:
                pass
            if i % 50 == 0:
                await asyncio.sleep(0)
        await asyncio.sleep(0)  # a format turn under way runs now, before the late records come
        audit._format_locked()
        print(len(audit._buffer), audit._buffered, flush=True)
        for i in range(10):  # not formatted yet when there is room again: kept, not counted lost
            audit.add("completion", {"call_id": f"late{i}"})
        resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
        await asyncio.sleep(1.0)  # the timer writes the backlog, then the count of what it dropped
        audit.add("completion", {"call_id": "after"})

asyncio.run(main())
"""


def test_a_backlog_on_a_full_disk_stops_growing_and_the_log_says_how_many_records_it_lost(tmp_path):
    # records waited in memory without a cap for as long as the disk stayed full
    path = tmp_path / "audit.log"
    run = in_a_process(BACKLOG_ON_A_FULL_DISK, path)
    kept_lines, kept_bytes = map(int, run.stdout.split())
    assert kept_bytes < 20_000 + 200 and kept_lines < 300
    assert run.stderr.count("audit log backlog reached 0 MiB while") == 1, run.stderr[-2000:]
    assert "later records are counted, not kept, until it can (free space on its disk)" in run.stderr
    records = lines(path)
    assert [r["call_id"] for r in records[:-12]] == [f"c{i}" for i in range(kept_lines)]
    assert records[-12]["event"] == "records_lost" and records[-12]["count"] == 1000 - kept_lines
    assert [r["call_id"] for r in records[-11:]] == [f"late{i}" for i in range(10)] + ["after"]
    assert f"a records_lost line counts the {1000 - kept_lines} dropped" in run.stderr


STOP_ON_A_FULL_DISK = r"""
import asyncio, logging, os, resource, sys
from scvd.audit import AuditLog
logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(levelname)s %(message)s")
path = sys.argv[1]

async def main():
    audit = AuditLog(path, max_bytes=1 << 30, keep=1)
    audit.add("completion", {"call_id": "before"})
    audit.flush()
    # room for the head of the first record only: its write is cut short
    resource.setrlimit(resource.RLIMIT_FSIZE, (os.path.getsize(path) + 40, resource.RLIM_INFINITY))
    for i in range(7):  # buffered on the loop, as the calls' proposals and completions are
        audit.add("completion", {"call_id": f"c{i}", "outcome": "ok"})
    audit.unbuffer()  # the server's stop
    audit.add("completion", {"call_id": "late"})  # a call past the grace period
    print(os.path.getsize(path), flush=True)

asyncio.run(main())
"""


def test_a_stop_on_a_full_disk_says_what_it_lost_and_the_next_start_counts_it(tmp_path):
    """A stop's flush on a full disk dropped the records waiting in memory without a word of how
    many (`audit log write failed: [Errno 28] ...` alone), and left the head of one in the file."""
    path = tmp_path / "audit.log"
    run = in_a_process(STOP_ON_A_FULL_DISK, path)
    said = f"ERROR audit log {path}: {{}} record(s) lost as scvd stops, never written ([Errno 27] File too large); " \
           "the next start counts them in a records_lost line"
    assert said.format(7) in run.stderr and said.format(1) in run.stderr, run.stderr
    assert [r["call_id"] for r in lines(path)] == ["before"]  # a whole line: no record's head left behind
    assert int(run.stdout) == path.stat().st_size
    assert os.readlink(tmp_path / "audit.log.lost") == "8"
    with AuditLog(path, max_bytes=1 << 20, keep=1) as log:  # the next start, with room
        log.record("completion", call_id="next")
    assert [(r["event"], r.get("count"), r.get("call_id")) for r in lines(path)] == [
        ("completion", None, "before"), ("records_lost", 8, None), ("completion", None, "next")]
    assert not os.path.lexists(tmp_path / "audit.log.lost")
    with AuditLog(path, max_bytes=1 << 20, keep=1):  # counted once
        pass
    assert len(lines(path)) == 3


START_AND_STOP_ON_A_FULL_DISK = r"""
import os, resource, sys
from scvd.audit import AuditLog
path = sys.argv[1]
resource.setrlimit(resource.RLIMIT_FSIZE, (os.path.getsize(path), resource.RLIM_INFINITY))
audit = AuditLog(path, max_bytes=1 << 30, keep=1)  # its records_lost line cannot be written
audit.unbuffer()
audit.add("completion", {"call_id": "c1"})
"""


def test_a_count_a_start_could_not_write_is_kept_with_the_stops(tmp_path):
    path = tmp_path / "audit.log"
    path.write_bytes(b'{"event":"completion","call_id":"before"}\n')
    os.symlink("5", tmp_path / "audit.log.lost")
    run = in_a_process(START_AND_STOP_ON_A_FULL_DISK, path)
    assert "5 record(s) lost as scvd stops" in run.stderr and "1 record(s) lost as scvd stops" in run.stderr
    assert os.readlink(tmp_path / "audit.log.lost") == "6"
    AuditLog(path, max_bytes=1 << 20, keep=1).close()
    assert [(r["event"], r.get("count")) for r in lines(path)] == [("completion", None), ("records_lost", 6)]
