"""The process runner with real processes: groups, deadlines, cancellation, orphans, floods."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scvd import process, proctree
from scvd.process import CappedOutput, child_env, run_process
from scvd.proctree import ProcStat, descendants, read_stat, reap, signal_group, signal_pid

from scan_support import HeldScans

ROOT = Path(__file__).resolve().parents[1]
PATH_ONLY = {"PATH": os.environ.get("PATH", os.defpath)}


def run(script: str, cwd: Path, *, timeout: float | None = 30, limit: int = 64 * 1024,
        env: dict[str, str] | None = None, **kw) -> process.RunResult:
    argv = ["/bin/bash", "-c", script]
    return asyncio.run(run_process(argv, cwd=cwd, env=env or PATH_ONLY, timeout=timeout,
                                   output_limit=limit, **kw))


def dead(pid: int) -> bool:
    stat = read_stat(pid)
    return stat is None or not stat.alive


def wait_file(path: Path, bound: float = 10.0) -> str:
    give_up = time.monotonic() + bound
    while time.monotonic() < give_up:
        if path.exists() and path.read_text().endswith("\n"):
            return path.read_text()
        time.sleep(0.01)
    raise AssertionError(f"{path} was not written")


@pytest.fixture
def subreaper():
    """This test process as a child subreaper, like scvd; switched off afterwards."""
    assert process.set_child_subreaper()
    assert process.is_child_subreaper()
    yield
    process.set_child_subreaper(False)
    process.reap_orphans()


# --- child_env (pure) ------------------------------------------------------------


def test_child_env_strips_scvd_and_systemd_variables():
    base = {
        "PATH": "/bin", "HOME": "/h", "NOTIFY_SOCKET": "@n", "LISTEN_PID": "1", "LISTEN_FDS": "1",
        "LISTEN_FDNAMES": "x", "SCV_SOCKET": "/s", "SCV_HOME": "/sh", "SCVD_TOOLS__X": "1",
        "SCVX": "kept", "MY_SCV_": "kept",
    }
    assert child_env(base) == {"PATH": "/bin", "HOME": "/h", "SCVX": "kept", "MY_SCV_": "kept"}


def test_child_env_removes_and_sets_without_touching_its_input():
    base = {"A": "1", "OPENAI_API_KEY": "k", "ANTHROPIC_X": "y", "SCV_HOME": "/outer"}
    frozen = dict(base)
    env = child_env(base, remove=["OPENAI_API_KEY"], remove_prefixes=["ANTHROPIC_"],
                    set={"SCV_HOME": "/private", "B": "2"})
    assert env == {"A": "1", "SCV_HOME": "/private", "B": "2"}  # `set` wins over the stripping
    assert base == frozen


# --- the capped buffer (pure) -----------------------------------------------------


def test_capped_output_under_the_limit_is_exact():
    out = CappedOutput(10)
    out.feed(b"hello")
    assert (out.text(), out.seen, out.kept, out.truncated) == ("hello", 5, 5, False)


def test_capped_output_keeps_head_and_tail_with_a_marker():
    out = CappedOutput(8)
    out.feed(b"0123456789abcdef")
    assert out.text() == "0123\n... 8 bytes omitted ...\ncdef"
    assert (out.seen, out.kept, out.truncated) == (16, 8, True)


@settings(max_examples=200, deadline=None)
@given(data=st.binary(max_size=300), cuts=st.lists(st.integers(0, 300), max_size=8),
       limit=st.integers(2, 64))
def test_capped_output_is_the_same_however_the_stream_is_chunked(data, cuts, limit):
    out = CappedOutput(limit)
    edges = sorted({0, len(data), *(c for c in cuts if c <= len(data))})
    for a, b in zip(edges, edges[1:]):
        out.feed(data[a:b])
    assert out.seen == len(data)
    if len(data) <= limit:
        assert bytes(out.head + out.tail) == data and not out.truncated
    else:
        assert bytes(out.head) == data[: limit // 2]
        assert bytes(out.tail) == data[len(data) - (limit - limit // 2):]
        assert out.kept == limit and out.truncated


def test_capped_output_does_not_split_a_character():
    text = "é" * 20  # 2 bytes each; a cap of 11 cuts characters at both ends
    out = CappedOutput(11)
    out.feed(text.encode())
    head, marker, tail = out.text().partition("\n... ")
    assert "\ufffd" not in head + tail
    assert set(head) == {"é"} and set(tail.split("\n")[-1]) == {"é"}


# --- /proc helpers ----------------------------------------------------------------


def test_read_stat_survives_a_command_name_with_spaces_and_parentheses(tmp_path):
    proc = subprocess.Popen(["/bin/bash", "-c", "printf 'x) (y z' > /proc/$$/comm; echo; read"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        proc.stdout.readline()
        stat = read_stat(proc.pid)
        assert stat is not None and stat.ppid == os.getpid() and stat.alive
        assert stat.pgid == os.getpgrp() and stat.sid == os.getsid(0)
    finally:
        proc.communicate(b"\n")


def test_descendants_walks_the_tree_below_the_roots():
    def p(pid, ppid):
        return ProcStat(pid, "S", ppid, pid, pid, 0)
    procs = {1: p(1, 0), 10: p(10, 1), 11: p(11, 10), 12: p(12, 11), 20: p(20, 1)}
    assert descendants(procs, [10]) == {11, 12}
    assert descendants(procs, [99]) == set()


def test_group_0_1_and_our_own_are_never_signalled():
    # signal 0 only checks existence: True would mean the guard let it through
    assert signal_group(0, 0) is False
    assert signal_group(1, 0) is False
    assert signal_group(os.getpgrp(), 0) is False
    signal_pid(1, 0)
    signal_pid(os.getpid(), 0)


def test_reaping_leaves_other_children_of_ours_alone():
    proc = subprocess.Popen(["/bin/sh", "-c", "exit 7"])
    while (stat := read_stat(proc.pid)) is not None and stat.alive:
        time.sleep(0.01)
    assert proc.pid not in process.reap_orphans()  # same session as us: not the runner's
    assert reap(os.getpid()) is False  # not a child
    assert proc.wait() == 7


# --- running ----------------------------------------------------------------------


def test_exit_status_and_one_ordered_stream(tmp_path):
    r = run("echo out; echo err >&2; echo out2; exit 3", tmp_path)
    assert (r.exit_code, r.signal, r.timed_out, r.truncated) == (3, None, False, False)
    assert r.output == "out\nerr\nout2\n"
    assert r.bytes_seen == r.bytes_kept == len(r.output)


def test_a_signal_is_reported_by_name(tmp_path):
    r = run("kill -TERM $$", tmp_path)
    assert (r.exit_code, r.signal) == (None, "SIGTERM")


def test_the_child_leads_a_new_session_reads_dev_null_and_gets_only_its_env(tmp_path):
    r = run("cat; readlink /proc/self/fd/0; cut -d' ' -f5,6 /proc/$$/stat; echo $$; pwd; env",
            tmp_path, env={"PATH": PATH_ONLY["PATH"], "ONLY": "this"})
    lines = r.output.splitlines()
    assert lines[0] == "/dev/null"
    assert lines[1] == f"{lines[2]} {lines[2]}"  # pgid and sid are the shell's own pid
    assert lines[3] == str(tmp_path)
    assert "ONLY=this" in lines and not any(line.startswith("HOME=") for line in lines)


def test_a_missing_executable_raises_before_anything_runs(tmp_path):
    with pytest.raises(FileNotFoundError):
        asyncio.run(run_process([str(tmp_path / "nope")], cwd=tmp_path, env=PATH_ONLY,
                                timeout=5, output_limit=1024))
    assert not process._LEADERS and not process._RUNS


FD_EXHAUSTION = """
import ast, asyncio, errno, os, resource, sys
from scvd import process
free, kw = int(sys.argv[1]), ast.literal_eval(sys.argv[2])
loop = asyncio.new_event_loop()  # its own fds first
resource.setrlimit(resource.RLIMIT_NOFILE, (256, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
held = []
try:
    while True:
        held.append(os.open("/dev/null", os.O_RDONLY))
except OSError:
    pass
for _ in range(free):
    os.close(held.pop())
try:
    loop.run_until_complete(process.run_process(["/bin/true"], cwd="/", env={}, timeout=5, output_limit=1024, **kw))
    print("started")
except OSError as exc:
    print(errno.errorcode[exc.errno])
try:  # every slot freed above is free again
    print(len([os.open("/dev/null", os.O_RDONLY) for _ in range(free)]), process._LEADERS, process._RUNS)
except OSError as exc:
    print("leaked:", errno.errorcode[exc.errno])
"""


@pytest.mark.parametrize("free, kw", [(2, {"input": b"x"}), (3, {"stderr_limit": 1024})])
def test_no_fd_leaks_when_the_files_for_a_child_cannot_all_be_made(free, kw):
    """Out of fds (EMFILE), a call whose stdin file or stderr pipe could not be made after its
    output pipe was made failed, and kept that pipe open: every later call made it worse."""
    done = subprocess.run([sys.executable, "-c", FD_EXHAUSTION, str(free), repr(kw)], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert done.stdout.splitlines() == ["EMFILE", f"{free} set() set()"], done.stdout + done.stderr


def test_output_beyond_the_cap_keeps_head_and_tail(tmp_path):
    r = run("seq 1 200000", tmp_path, limit=4096)
    assert r.truncated and r.bytes_kept == 4096
    assert r.bytes_seen == len("".join(f"{i}\n" for i in range(1, 200001)))
    assert r.output.startswith("1\n2\n3\n") and r.output.endswith("199999\n200000\n")
    omitted = r.bytes_seen - 4096
    assert f"\n... {omitted} bytes omitted ...\n" in r.output


def test_the_deadline_kills_the_whole_group_at_once(tmp_path):
    r = run("sleep 1000 & echo $!; sleep 1000", tmp_path, timeout=0.5)
    assert r.timed_out and r.signal == "SIGKILL" and r.exit_code is None
    assert dead(int(r.output.split()[0]))


def test_the_deadline_also_kills_a_descendant_in_its_own_session(tmp_path):
    r = run("setsid sleep 1000 & echo $!; sleep 1000", tmp_path, timeout=0.5)
    assert r.timed_out
    assert dead(int(r.output.split()[0]))


def past_the_deadline_with_scans_held(script: str, pid_file: Path, tmp_path: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> process.RunResult:
    """`script` run to its deadline: the first scan sees the process that writes `pid_file` (the
    scan waits for it), and every later one is held until that process is dead, with a bound."""
    scans = HeldScans(monkeypatch, after=lambda: bool(wait_file(pid_file)),
                      until=lambda: dead(int(pid_file.read_text())))
    r = run(script, tmp_path, timeout=1.0)
    assert r.timed_out and r.signal == "SIGKILL"
    # the next scan (a tick's) was held: the deadline neither waited for it nor needed it to kill
    assert scans.released and all(scans.released)
    assert not process._RUNS and not process._LEADERS
    return r


def test_the_deadline_does_not_wait_for_a_scan_under_way(tmp_path, monkeypatch):
    """A run's periodic scan of /proc waits its turn and reads every process on the host (seconds among
    many): a deadline that passed meanwhile killed only once the scan had come. It kills at its time."""
    pid_file = tmp_path / "leader"
    past_the_deadline_with_scans_held(f"echo $$ > {pid_file}; while :; do sleep 0.05; done", pid_file,
                                      tmp_path, monkeypatch)


def test_the_deadline_kills_a_stray_an_earlier_scan_found_before_the_next_scan_comes(tmp_path, monkeypatch):
    """The deadline killed the group at once, but a child that had left it (setsid), which an earlier
    scan had found, only once a fresh scan of /proc came (seconds among many processes): it ran on past
    the deadline meanwhile. It dies with the group now."""
    pid_file = tmp_path / "stray"
    script = f"setsid bash -c 'echo $$ > {pid_file}; while :; do sleep 0.05; done' & while :; do sleep 0.05; done"
    past_the_deadline_with_scans_held(script, pid_file, tmp_path, monkeypatch)


def test_a_background_child_does_not_hold_the_call_open(tmp_path):
    # the first keeps the pipe open, the second does not; neither may outlive the call
    r = asyncio.run(asyncio.wait_for(run_process(
        ["/bin/bash", "-c", "sleep 1000 & echo $!; sleep 1000 >/dev/null 2>&1 & echo $!; echo done"],
        cwd=tmp_path, env=PATH_ONLY, timeout=None, output_limit=1024), 20))
    first, second, done = r.output.split()
    assert (r.exit_code, r.timed_out, done) == (0, False, "done")
    assert dead(int(first)) and dead(int(second))


def test_a_setsid_double_forked_orphan_is_killed_and_reaped(tmp_path, subreaper):
    pid_file = tmp_path / "pid"
    script = (f"( setsid sh -c 'echo $$ > {pid_file}; exec sleep 1000' & ); "
              f"while [ ! -s {pid_file} ]; do sleep 0.01; done; setsid -f sleep 1000")
    r = run(script, tmp_path)
    assert r.exit_code == 0
    orphan = int(pid_file.read_text())
    assert read_stat(orphan) is None  # killed, and reaped by us: no zombie left
    assert not [p for p in process.scan_processes().values() if p.ppid == os.getpid()
                and p.sid != os.getsid(0)]  # the `setsid -f` one is gone as well


def test_an_orphan_claimed_by_one_call_survives_the_end_of_another(tmp_path, subreaper):
    orphan_file, go_b, go_a, let_go = (tmp_path / n for n in ("orphan", "go-b", "go-a", "let-go"))
    wait_for = "while [ ! -e {0} ]; do sleep 0.01; done"
    # the orphan's parent stays A's until A tracked it: an orphan started after both leaders is
    # either's, and whichever scans first takes it; this one is A's from its first scan
    a_script = (f"( setsid sh -c 'echo $$ > {orphan_file}; exec sleep 1000' & {wait_for.format(let_go)} ); "
                + wait_for.format(go_a))
    b_script = wait_for.format(go_b)

    def claimed_by_a(pid: int) -> bool:
        return any(pid in r.tracked for r in tuple(process._RUNS) if r.popen.args[-1] == a_script)

    async def scenario() -> tuple[int, bool]:
        b = asyncio.ensure_future(run_process(["/bin/bash", "-c", b_script], cwd=tmp_path,
                                              env=PATH_ONLY, timeout=60, output_limit=1024))
        await asyncio.sleep(0.05)  # so the orphan starts after B did: a candidate for B too
        a = asyncio.ensure_future(run_process(["/bin/bash", "-c", a_script], cwd=tmp_path,
                                              env=PATH_ONLY, timeout=60, output_limit=1024))
        orphan = int((await asyncio.to_thread(wait_file, orphan_file)).strip())
        while not claimed_by_a(orphan):  # a descendant of A's leader, seen by its scans
            await asyncio.sleep(0.02)
        let_go.touch()  # its parent exits: re-parented to us, an orphan that B's end could take
        while read_stat(orphan).ppid != os.getpid():
            await asyncio.sleep(0.02)
        go_b.touch()
        await b
        survived = not dead(orphan)
        go_a.touch()
        await a
        return orphan, survived

    orphan, survived = asyncio.run(asyncio.wait_for(scenario(), 30))
    assert survived  # B did not take A's orphan ...
    assert read_stat(orphan) is None  # ... and A killed and reaped it


def stop_service(popen: subprocess.Popen) -> None:
    process.signal_service(popen, signal.SIGKILL)
    for pipe in (popen.stdin, popen.stdout, popen.stderr):
        pipe.close()


def zombies_of_ours(session: int) -> list[int]:
    """Our exited children of that session (not another test's leftovers in pytest's own)."""
    return [p.pid for p in process.scan_processes().values()
            if p.ppid == os.getpid() and not p.alive and p.sid == session]


def test_an_mcp_servers_exited_helpers_are_reaped_while_it_runs(tmp_path, subreaper, run_loop):
    """A stdio MCP server's short-lived background helpers come back to scvd; none stays a
    zombie until some call ends. asyncio's own subprocesses keep their exit status."""
    server = "for i in $(seq 20); do (sleep 0.1 &); done; exec cat"

    async def scenario() -> tuple[list[int], int | None]:
        popen = process.spawn_service(["/bin/sh", "-c", server], tmp_path, PATH_ONLY)
        waiter = asyncio.ensure_future(process.wait_service(popen))
        await asyncio.sleep(2 * process.REAP_SECONDS)
        left = zombies_of_ours(popen.pid)
        child = await asyncio.create_subprocess_exec("/bin/sh", "-c", "sleep 0.2; exit 3")
        code = await child.wait()
        stop_service(popen)
        await waiter
        return left, code

    left, code = run_loop(asyncio.wait_for(scenario(), 30))
    assert left == [] and code == 3


def test_an_mcp_servers_helper_survives_the_end_of_an_unrelated_call(tmp_path, subreaper, run_loop):
    pid_file = tmp_path / "helper"
    server = f"(sleep 1000 & echo $! > {pid_file}); exec cat"

    async def scenario() -> tuple[int, bool]:
        call = asyncio.ensure_future(run_process(["/bin/sleep", "1"], cwd=tmp_path, env=PATH_ONLY,
                                                 timeout=30, output_limit=1024))
        await asyncio.sleep(0.2)  # the helper starts after the call did: a candidate orphan of it
        popen = process.spawn_service(["/bin/sh", "-c", server], tmp_path, PATH_ONLY)
        waiter = asyncio.ensure_future(process.wait_service(popen))
        helper = int((await asyncio.to_thread(wait_file, pid_file)).strip())
        await call
        alive = not dead(helper)
        stop_service(popen)
        await waiter
        return helper, alive

    helper, alive = run_loop(asyncio.wait_for(scenario(), 30))
    assert alive  # the call's end took it for its orphan and killed it
    signal_pid(helper, signal.SIGKILL)


def test_cancel_sends_term_then_kill_to_a_descendant_that_ignores_term(tmp_path):
    pid_file, log = tmp_path / "pid", tmp_path / "log"
    (tmp_path / "stubborn.sh").write_text(
        f"trap 'echo got-term >> {log}' TERM\necho $$ > {pid_file}\n"
        f"while :; do sleep 0.05; echo alive >> {log}; done\n")
    script = "bash stubborn.sh & wait"

    async def scenario() -> int:
        task = asyncio.ensure_future(run_process(["/bin/bash", "-c", script], cwd=tmp_path,
                                                 env=PATH_ONLY, timeout=60, output_limit=1024))
        await asyncio.to_thread(wait_file, pid_file)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return int(pid_file.read_text())

    pid = asyncio.run(scenario())
    lines = log.read_text().split()
    assert "got-term" in lines
    assert "alive" in lines[lines.index("got-term") + 1:]  # it outlived the TERM ...
    assert dead(pid)  # ... and not the KILL
    assert not process._RUNS and not process._LEADERS


def test_a_cancel_terms_the_group_at_once_and_a_stray_after_the_scan(tmp_path, monkeypatch):
    """A cancel's SIGTERM waited for a scan of /proc, which waits its turn and reads every process on
    the host (seconds among many): the command learnt of its cancel only then. The group hears at
    once; a child that left it (setsid) once the scan has found it, and each of them once."""
    log = tmp_path / "log"
    stray = "trap 'echo stray >> log; exit' TERM; echo ok > stray; while :; do sleep 0.05; done"
    script = (f"trap 'echo leader >> log; wait; exit' TERM; echo ok > ready\n"
              f"while [ ! -e go ]; do sleep 0.05; done\nsetsid bash -c \"{stray}\" &\n"
              "while :; do sleep 0.05; done\n")
    scans = HeldScans(monkeypatch, after=(tmp_path / "ready").exists,
                      until=lambda: log.exists() and "leader" in log.read_text())

    async def scenario() -> None:
        task = asyncio.ensure_future(run_process(["/bin/bash", "-c", script], cwd=tmp_path, env=PATH_ONLY,
                                                 timeout=None, output_limit=1024))
        await asyncio.to_thread(scans.wait_holding)  # no scan sees what the command starts from now on
        (tmp_path / "go").touch()
        await asyncio.to_thread(wait_file, tmp_path / "stray")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, 60)

    asyncio.run(scenario())
    assert scans.released and all(scans.released)  # the leader's TERM came while the scan was held
    assert log.read_text().split() == ["leader", "stray"]
    assert not process._RUNS and not process._LEADERS


def test_cancel_of_a_polite_command_does_not_wait_out_the_grace(tmp_path, monkeypatch):
    monkeypatch.setattr(process, "TERM_GRACE_SECONDS", 1000.0)

    async def scenario() -> None:
        task = asyncio.ensure_future(run_process(["/bin/bash", "-c", "sleep 1000 & wait"],
                                                 cwd=tmp_path, env=PATH_ONLY, timeout=None,
                                                 output_limit=1024))
        await asyncio.sleep(0.2)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, 20)  # with a 1000 s grace, only an early end passes

    asyncio.run(scenario())




def test_cancel_gives_a_stopped_command_its_term_cleanup(tmp_path, monkeypatch):
    # a stopped process acts on the TERM only once continued: without a SIGCONT it waited out the grace
    monkeypatch.setattr(process, "TERM_GRACE_SECONDS", 1000.0)
    script = "trap 'echo cleaned > cleanup; exit' TERM; echo $$ > pid; kill -STOP $$"

    async def scenario() -> None:
        task = asyncio.ensure_future(run_process(["/bin/bash", "-c", script], cwd=tmp_path, env=PATH_ONLY,
                                                 timeout=None, output_limit=1024))
        pid = int(await asyncio.to_thread(wait_file, tmp_path / "pid"))
        for _ in range(400):
            if (stat := read_stat(pid)) is not None and stat.state == "T":
                break
            await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, 20)  # with a 1000 s grace, only a TERM acted on passes

    asyncio.run(scenario())
    assert (tmp_path / "cleanup").read_text() == "cleaned\n"

def test_a_cancel_while_the_sandbox_is_set_up_kills_at_once(tmp_path, monkeypatch):
    # bwrap before its command runs: only the wrapper's own program (bash stands in for it). A TERM
    # then ended the real one before its child armed --die-with-parent: that child went on to start
    # the command, which ran for the whole grace although the call was cancelled
    monkeypatch.setattr(process, "TERM_GRACE_SECONDS", 1000.0)
    (tmp_path / "setup.sh").write_text("trap '' TERM; echo ready > ready; while [ ! -e go ]; do :; done\n")

    async def scenario() -> None:
        task = asyncio.ensure_future(run_process(["/bin/bash", "setup.sh"], cwd=tmp_path, env=PATH_ONLY,
                                                 timeout=None, output_limit=1024, wrapper=True))
        await asyncio.to_thread(wait_file, tmp_path / "ready")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, 20)  # with a 1000 s grace, only a kill at once passes

    asyncio.run(scenario())
    assert not process._RUNS

def test_concurrent_runs_keep_their_own_output(tmp_path):
    async def both():
        argv = lambda word: ["/bin/bash", "-c", f"for i in 1 2 3; do echo {word}; sleep 0.05; done"]  # noqa: E731
        return await asyncio.gather(*(
            run_process(argv(w), cwd=tmp_path, env=PATH_ONLY, timeout=30, output_limit=1024)
            for w in ("left", "right")))

    left, right = asyncio.run(both())
    assert left.output == "left\n" * 3 and right.output == "right\n" * 3


def test_running_calls_share_each_scan_of_proc_and_none_is_read_on_the_loop(tmp_path, monkeypatch, run_loop):
    """A running call wants /proc scanned every few seconds, and a scan reads every process on the
    host (0.2 s with 10,000): one per call, on the loop, stalled every client. Calls due together
    share one scan, read on another thread."""
    calls = 20
    reads: list[int] = []  # the thread of each read of /proc
    real = proctree.scan_processes
    counted = lambda: reads.append(threading.get_ident()) or real()  # noqa: E731
    monkeypatch.setattr(proctree, "scan_processes", counted)
    monkeypatch.setattr(process, "scan_processes", counted)
    monkeypatch.setattr(process, "SCAN_MAX", 0.2)  # each call wants one at least 5 times a second
    go = tmp_path / "go"

    async def scenario() -> list[int]:
        runs = [asyncio.ensure_future(run_process(
            ["/bin/sh", "-c", f"while [ ! -e {go} ]; do sleep 0.05; done"], cwd=tmp_path, env=PATH_ONLY,
            timeout=60, output_limit=1024)) for _ in range(calls)]
        await asyncio.sleep(0.5)  # past the first, quicker scans
        first = len(reads)
        await asyncio.sleep(1.0)
        window = reads[first:]
        go.touch()
        assert all(r.exit_code == 0 for r in await asyncio.gather(*runs))
        return window

    window = run_loop(asyncio.wait_for(scenario(), 30))
    assert window and len(window) < calls  # alone, each call would have read it 5 times
    assert threading.get_ident() not in window  # the loop's thread


FLOOD = """
import asyncio, json, resource, sys
from scvd.process import run_process
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
r = asyncio.run(run_process(["/bin/bash", "-c", "head -c 1G /dev/zero"], cwd="/", env={},
                            timeout=None, output_limit=256 * 1024))
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"before_kib": before, "after_kib": after, "seen": r.bytes_seen,
                  "kept": r.bytes_kept, "truncated": r.truncated, "exit": r.exit_code}))
"""


@pytest.mark.slow
def test_a_gigabyte_of_output_stays_within_the_cap_and_memory_stays_bounded(tmp_path):
    done = subprocess.run([sys.executable, "-c", FLOOD], cwd=ROOT, capture_output=True, text=True,
                          env={**PATH_ONLY, "PYTHONPATH": str(ROOT)}, timeout=110, check=True)
    got = json.loads(done.stdout)
    assert (got["seen"], got["kept"], got["truncated"], got["exit"]) == (1 << 30, 256 * 1024, True, 0)
    assert got["after_kib"] - got["before_kib"] < 32 * 1024  # a 1 GiB flood; the cap is 256 KiB


def test_a_server_that_forks_as_it_is_killed_leaves_no_worker(tmp_path, subreaper):
    """A daemon of its own session forking workers without pause: a child forked between the last
    scan and the kill used to survive the call (no signal reached it)."""
    sid_file = tmp_path / "sid"
    script = (f"setsid bash -c 'echo $$ > {sid_file}; while :; do sleep 77 & sleep 0.002; done' "
              "</dev/null >/dev/null 2>&1 & sleep 1; echo leader-exits")
    r = run(script, tmp_path, timeout=10)
    assert r.exit_code == 0 and r.output.strip() == "leader-exits"
    sid = int(sid_file.read_text())
    time.sleep(0.3)
    left = [p.pid for p in process.scan_processes().values() if p.sid == sid and p.alive]
    for pid in left:  # never leave them running, whatever the outcome
        os.kill(pid, 9)
    assert left == []


def test_a_pid_reused_by_another_process_is_not_killed_with_the_call():
    """A helper of the call exits and its pid goes to an unrelated process (forced through
    ns_last_pid in a private pid namespace): the call's end must neither kill that process's
    child nor reap the process."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare for a private pid namespace")
    helper = Path(__file__).parent / "helpers" / "pid_reuse.py"
    done = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", sys.executable, str(helper)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["reused"] and seen["call_output"] == "leader-done", seen
    assert seen["other_alive"] and seen["child_alive"], seen
