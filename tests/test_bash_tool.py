"""The `bash` tool: schema from config, refusal above the ceiling, plans, real runs, sandboxing."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import msgspec
import pytest

from conftest import is_guardian
from scvd import errors, paths as paths_mod
from scvd.config import Config, SandboxConfig, ToolsConfig
from scvd.proctree import read_stat
from scvd.protocol import ApprovalDecide, ApprovalRequested, ApprovalsList, CallCancel, ToolsList
from scvd.sandbox import ProbeResult, Sandbox, probe
from scvd.tools import build_registry
from scvd.text import SHOWN_CHARS
from scvd.tools.bash import Bash
from scvd.tools.contract import CallContext, ToolRisk, lint


def make_ctx(ws: Path, config: Config | None = None, sandbox=None) -> CallContext:
    config = config or Config()
    fd = os.open(ws, os.O_RDONLY | os.O_DIRECTORY)
    return CallContext(call_id="c1", session_id="s1", workspace=ws, workspace_fd=fd, config=config,
                       paths=None, sandbox=sandbox)


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    path = tmp_path / "ws"
    path.mkdir()
    return path


def call(ws: Path, arguments: dict, *, config: Config | None = None, env=None, sandbox=None):
    """decode -> plan -> run, as the pipeline does (without the approval in between).

    The login shell gets a home without a profile unless `env` says otherwise: what this
    machine's ~/.profile prints, or how long it takes, is not the tool's behaviour."""
    config = config or Config()
    if env is None:
        env = {**os.environ, "HOME": str(ws.parent)}
    tool = Bash(config, env=env)
    ctx = make_ctx(ws, config, sandbox)
    try:
        args = tool.decode(arguments)
        plan = tool.plan(args, ctx)
        return asyncio.run(tool.run(args, plan, ctx))
    finally:
        os.close(ctx.workspace_fd)


def config_with(**tools) -> Config:
    return Config(tools=ToolsConfig(**tools))


# --- definition ---------------------------------------------------------------------


def test_bash_is_registered_and_passes_the_design_rules():
    registry = build_registry(Config(), None)
    tool = registry.get("bash")
    assert isinstance(tool, Bash) and tool.risk is ToolRisk.PROCESS
    lint(tool)


def test_the_schema_advertises_the_configured_default_and_ceiling():
    schema = Bash(config_with(command_timeout_seconds=30, max_timeout_seconds=90)).input_schema()
    timeout = schema["properties"]["timeout_seconds"]
    assert (timeout["default"], timeout["maximum"]) == (30, 90)
    assert schema["required"] == ["command"] and schema["additionalProperties"] is False
    # its example stays within the ceiling: a model copying "e.g. 600" got refused
    assert "e.g. 90 for a long build" in timeout["description"]


def test_a_timeout_above_the_ceiling_is_refused_naming_it():
    tool = Bash(config_with(max_timeout_seconds=90))
    with pytest.raises(errors.InvalidArguments) as caught:
        tool.decode({"command": "make", "timeout_seconds": 91})
    assert "ceiling of 90 s" in caught.value.message and "tools.max_timeout_seconds" in caught.value.message
    assert tool.decode({"command": "make", "timeout_seconds": 90}).timeout_seconds == 90


def test_a_timeout_of_0_is_refused_with_an_example_within_the_ceiling():
    """'must be above 0 (e.g. 60)' under a ceiling of 30: the example given was refused in turn."""
    tool = Bash(config_with(command_timeout_seconds=20, max_timeout_seconds=30))
    with pytest.raises(errors.InvalidArguments) as caught:
        tool.decode({"command": "make", "timeout_seconds": 0})
    assert caught.value.message == "bash: timeout_seconds 0 must be above 0 (e.g. 30)"


def test_plan_also_holds_the_sessions_own_ceiling(ws):
    tool = Bash(Config())  # built with the 1800 s default ...
    args = tool.decode({"command": "make", "timeout_seconds": 600})
    ctx = make_ctx(ws, config_with(max_timeout_seconds=300))  # ... but the session's config says 300
    with pytest.raises(errors.InvalidArguments, match="ceiling of 300 s"):
        tool.plan(args, ctx)


@pytest.mark.parametrize("arguments", [{}, {"command": ""}, {"command": "x", "cwd": "/"},
                                       {"command": "x", "timeout_seconds": 0}])
def test_bad_arguments_are_refused_before_anything_runs(arguments):
    with pytest.raises(errors.InvalidArguments):
        Bash(Config()).decode(arguments)


def test_the_plan_shows_the_command_and_the_timeout_and_a_cut_summary_says_so(ws):
    tool = Bash(Config())
    ctx = make_ctx(ws)
    plan = tool.plan(tool.decode({"command": "cargo test"}), ctx)
    assert plan.risk is ToolRisk.PROCESS and plan.timeout == 120
    assert "cargo test" in plan.summary and "timeout 120 s" in plan.summary
    assert (plan.sandboxed, plan.network, plan.writes_confined) == (False, True, False)
    assert plan.data == ["/bin/bash", "-lc", "cargo test"]
    assert "[cut" not in plan.summary and plan.details["command"] == "cargo test"
    command = "echo fine " + "x" * 10_000 + "; touch pwned"
    long = tool.plan(tool.decode({"command": command, "timeout_seconds": 5}), ctx)
    first = long.summary.splitlines()[0]
    assert first.startswith(f"bash (unsandboxed, timeout 5 s) [cut: {len(command) - SHOWN_CHARS:,} more chars; "
                            "see details]: echo fine xxx")
    assert len(long.summary) < SHOWN_CHARS + 200 and "touch pwned" not in long.summary
    assert long.details["command"] == command  # the approver can see the tail
    assert long.timeout == 5 and long.data[2] == command


# --- running ------------------------------------------------------------------------


def test_a_login_shell_in_the_workspace_with_combined_output(ws):
    r = call(ws, {"command": "shopt -q login_shell && echo login; pwd; echo err >&2; exit 4"})
    assert r["output"] == f"login\n{ws}\nerr\n"
    assert (r["exit_code"], r["signal"], r["timed_out"], r["truncated"]) == (4, None, False, False)
    assert r["bytes_seen"] == r["bytes_kept"] == len(r["output"]) and r["duration_s"] >= 0
    msgspec.json.encode(r)


def test_bash_sees_the_inherited_environment_minus_scvds_variables(ws, monkeypatch):
    for name, value in {"SCV_SOCKET": "/s", "NOTIFY_SOCKET": "@n", "SCVD_X": "1", "SCV_HOME": "/h",
                        "LISTEN_FDS": "1", "MY_PROJECT_TOKEN": "kept"}.items():
        monkeypatch.setenv(name, value)
    r = call(ws, {"command": "env"})
    names = {line.split("=", 1)[0] for line in r["output"].splitlines()}
    assert "MY_PROJECT_TOKEN=kept" in r["output"].splitlines()
    assert not names & {"SCV_SOCKET", "NOTIFY_SOCKET", "SCVD_X", "SCV_HOME", "LISTEN_FDS"}


def test_output_is_capped_by_tools_output_limit_bytes(ws):
    r = call(ws, {"command": "seq 1 100000"}, config=config_with(output_limit_bytes=2048))
    assert r["truncated"] and r["bytes_kept"] == 2048 and r["bytes_seen"] > 500_000
    assert "bytes omitted ..." in r["output"] and r["output"].endswith("100000\n")


def test_a_deadline_is_a_timeout_error_with_the_output_and_how_to_allow_more(ws):
    with pytest.raises(errors.Timeout) as caught:
        call(ws, {"command": "echo started; sleep 1000 & echo $!; sleep 1000", "timeout_seconds": 0.5})
    err = caught.value
    assert err.kind == "timeout" and "timeout of 0.5 s" in err.message and "SIGKILL" in err.message
    assert "at most 1800" in err.hint
    started, pid = err.message.split("follow:\n", 1)[1].split()
    assert started == "started"
    stat = read_stat(int(pid))
    assert stat is None or not stat.alive  # the background sleep went with the group


def test_a_silent_command_past_its_deadline_says_it_printed_nothing(ws):
    """It read `...(SIGKILL); 0 bytes of output, they follow:` and then nothing."""
    with pytest.raises(errors.Timeout) as caught:
        call(ws, {"command": "sleep 1000", "timeout_seconds": 0.5})
    assert caught.value.message.endswith("was killed (SIGKILL); no output"), caught.value.message


def test_a_timeout_at_the_ceiling_does_not_say_to_ask_for_more(ws):
    from scvd.process import RunResult
    from scvd.tools.runs import timeout_error

    r = RunResult(exit_code=None, signal="SIGKILL", output="", truncated=False, bytes_seen=0, bytes_kept=0,
                  timed_out=True, duration_s=1800.0)
    assert "at most 1800" in timeout_error("bash", r, 600, 1800).hint
    both = timeout_error("bash", r, 600, 1800, asked=600, frame=600).hint  # a larger argument alone: cut again
    assert both == "the call frame's timeout_seconds and the argument are both 600 s: raise both (at most 1800), " \
                   "or run less per call", both
    hint = timeout_error("bash", r, 1800, 1800, asked=1800, frame=1800).hint
    assert "larger timeout_seconds" not in hint and "tools.max_timeout_seconds in config.toml" in hint


def test_a_timeout_error_carries_the_head_and_tail_a_result_would(ws):
    """Only the last 4 KiB came: a hung test run's first failures, at its start, were lost."""
    with pytest.raises(errors.Timeout) as caught:
        call(ws, {"command": "seq 1 100000; sleep 1000", "timeout_seconds": 1})
    message = caught.value.message
    head, _, output = message.partition(":\n")
    assert head.endswith("588895 bytes of output, the first and last of them follow (262144 kept)")
    assert output.startswith("1\n2\n3\n") and "bytes omitted" in output and output.endswith("99999\n100000\n")


@pytest.mark.timeout(60)  # held open by the sleep, the call would last 1000 s
def test_a_background_job_does_not_hold_the_call(ws):
    r = call(ws, {"command": "sleep 1000 & echo $!", "timeout_seconds": 600})
    assert r["exit_code"] == 0 and not r["timed_out"]
    stat = read_stat(int(r["output"]))
    assert stat is None or not stat.alive


def test_a_missing_workspace_is_a_failed_call(tmp_path, ws):
    tool = Bash(Config())
    args = tool.decode({"command": "true"})
    ctx = make_ctx(ws)
    plan = tool.plan(args, ctx)
    ws.rmdir()
    with pytest.raises(errors.Failed, match=f"bash: the workspace {ws} is gone .*open a session on a directory"):
        asyncio.run(tool.run(args, plan, ctx))  # not "cannot start /bin/bash" (or bwrap): the chdir failed
    os.close(ctx.workspace_fd)


NO_ENTRY = """
import asyncio, os, sys
from pathlib import Path
from scvd import errors, paths
from scvd.config import Config
from scvd.tools.bash import Bash
from scvd.tools.contract import CallContext
from scvd.tools.script import ScriptTool
from scvd.tools.script_defs import load_one
ws, home = Path(sys.argv[1]), Path(sys.argv[2])
fd = os.open(ws, os.O_RDONLY | os.O_DIRECTORY)
if sys.argv[3] == "bash":
    tool, arguments = Bash(Config(), env={"PATH": os.defpath, "HOME": str(ws)}), {"command": "true"}
else:
    tool, arguments = ScriptTool(load_one(Path(sys.argv[3]))), {}
ctx = CallContext(call_id="c1", session_id="s1", workspace=ws, workspace_fd=fd, config=Config(),
                  paths=paths.resolve({"SCV_HOME": str(home)}))
args = tool.decode(arguments)
plan = tool.plan(args, ctx)
os.chmod(ws, 0)
try:
    asyncio.run(tool.run(args, plan, ctx))
except errors.Failed as exc:
    print(exc)
finally:
    os.chmod(ws, 0o700)
"""


@pytest.mark.parametrize("tool", ["bash", "script"])
def test_a_workspace_that_cannot_be_entered_says_so_not_that_it_is_gone(tmp_path, tool):
    """`chmod 000` on the workspace (a command may do it to its own) made every later call say that
    the workspace was gone and to open a session on a directory that exists; a script tool's, that
    the script could not start."""
    drop = []  # root passes over file permissions: as uid 0 without those capabilities
    if os.geteuid() == 0:
        if not shutil.which("setpriv"):
            pytest.skip("needs setpriv as root")
        drop = ["setpriv", "--bounding-set=-dac_override,-dac_read_search", "--inh-caps=-all"]
    root = str(Path(__file__).resolve().parents[1])  # scvd of this tree
    ws = tmp_path / "ws"
    ws.mkdir()
    folder = tmp_path / "words"
    folder.mkdir()
    (folder / "tool.json").write_text('{"description": "Say words.", "risk": "read_only"}')
    (folder / "run").write_text("#!/bin/sh\necho hi\n")
    (folder / "run").chmod(0o700)
    out = subprocess.run([*drop, sys.executable, "-c", NO_ENTRY, str(ws), str(tmp_path / "home"),
                          "bash" if tool == "bash" else str(folder)],
                         capture_output=True, text=True, env={**os.environ, "PYTHONPATH": root}, timeout=60)
    name = "bash" if tool == "bash" else "script_words"
    assert out.stdout == (f"{name}: cannot enter the workspace {ws} (Permission denied): give it back its "
                          f"permissions (chmod u+rwx {ws})\n"), out.stdout + out.stderr


# --- sandbox ------------------------------------------------------------------------


def sandbox_for(tmp_path: Path, mode: str, ok: bool, bwrap: str | None = None) -> Sandbox:
    paths = paths_mod.resolve({"SCV_HOME": str(tmp_path / "home")})
    result = ProbeResult(mode, ok, "test verdict", True, bwrap)
    return Sandbox(result, paths, {"XDG_RUNTIME_DIR": str(tmp_path / "xdg")})


def test_a_required_sandbox_that_failed_its_probe_refuses_before_approval(tmp_path, ws):
    tool = Bash(Config())
    ctx = make_ctx(ws, sandbox=sandbox_for(tmp_path, "bwrap", ok=False))
    with pytest.raises(errors.Unavailable, match="sandbox is required"):
        tool.plan(tool.decode({"command": "true"}), ctx)


def test_auto_mode_without_a_working_sandbox_runs_unsandboxed(tmp_path, ws):
    tool = Bash(Config())
    ctx = make_ctx(ws, sandbox=sandbox_for(tmp_path, "auto", ok=False))
    plan = tool.plan(tool.decode({"command": "true"}), ctx)
    assert not plan.sandboxed and plan.data == ["/bin/bash", "-lc", "true"]


@pytest.fixture
def real_sandbox(tmp_path: Path) -> Sandbox:
    env = {"SCV_HOME": str(tmp_path / "home"), "XDG_RUNTIME_DIR": str(tmp_path / "xdg"),
           "PATH": os.environ.get("PATH", os.defpath)}
    paths = paths_mod.resolve(env)
    paths_mod.prepare(paths)
    config = SandboxConfig(mode="bwrap")
    result = probe(config, paths, env)
    if not result.ok:
        pytest.skip(f"bwrap does not work here: {result.verdict}")
    return Sandbox(result, paths, env)


@pytest.mark.bwrap
def test_with_the_sandbox_on_bash_runs_inside_it(tmp_path, ws, real_sandbox):
    tool = Bash(Config())
    ctx = make_ctx(ws, sandbox=real_sandbox)
    plan = tool.plan(tool.decode({"command": "true"}), ctx)
    assert (plan.sandboxed, plan.network, plan.writes_confined) == (True, False, True)
    assert "sandboxed, no network" in plan.summary and plan.data[-3:] == ["/bin/bash", "-lc", "true"]
    outside = tmp_path / "outside"
    outside.mkdir()
    r = call(ws, {"command": f"echo in > inside.txt; echo out > {outside}/x.txt; echo rc=$?"},
             sandbox=real_sandbox)
    assert (ws / "inside.txt").read_text() == "in\n" and not (outside / "x.txt").exists()
    assert r["output"].rstrip().endswith("rc=1")


@pytest.mark.bwrap
def test_a_sandboxed_background_process_dies_with_the_call(ws, real_sandbox):
    r = call(ws, {"command": "sleep 1000 & echo ok"}, sandbox=real_sandbox)
    assert r["output"].endswith("ok\n") and r["exit_code"] == 0
    assert not [p for p in os.listdir("/proc") if p.isdigit() and _alive_in(p, ws)]


async def _cancel_once_started(tool: Bash, ctx: CallContext, command: str, started: Path) -> None:
    args = tool.decode({"command": command})
    task = asyncio.ensure_future(tool.run(args, tool.plan(args, ctx), ctx))
    for _ in range(4000):
        if started.exists():
            break
        await asyncio.sleep(0.005)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


@pytest.mark.bwrap
def test_a_cancelled_sandboxed_command_gets_its_sigterm_cleanup(ws, real_sandbox):
    # bwrap dies at SIGTERM and its --die-with-parent SIGKILLs the sandbox: the TERM must go inside
    script = "trap 'sleep 0.2; echo cleaned > cleanup.txt; exit' TERM; touch started; sleep 1000 & wait"
    tool = Bash(Config(), env={**os.environ, "HOME": str(ws.parent)})
    ctx = make_ctx(ws, sandbox=real_sandbox)
    try:
        asyncio.run(_cancel_once_started(tool, ctx, script, ws / "started"))
    finally:
        os.close(ctx.workspace_fd)
    assert (ws / "cleanup.txt").read_text() == "cleaned\n"  # as unsandboxed: TERM, then up to 2 s


@pytest.mark.bwrap
def test_a_cancelled_sandboxed_command_gets_its_sigterm_before_its_child(ws, real_sandbox):
    # the TERM went to the sandbox's processes one by one, in a set's order: the `sleep` got it
    # first, bash saw its `wait` end, exited 0 and never ran its trap. On one CPU the woken
    # processes run before the next kill, which made that common (about 1 start in 10).
    tool = Bash(Config(), env={**os.environ, "HOME": str(ws.parent)})
    ctx = make_ctx(ws, sandbox=real_sandbox)
    cpus = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(cpus)})  # this thread starts the processes: they inherit it
    try:
        for i in range(20):
            script = f"trap 'echo cleaned > cleanup{i}; exit' TERM; touch started{i}; sleep 1000 & wait"
            asyncio.run(_cancel_once_started(tool, ctx, script, ws / f"started{i}"))
    finally:
        os.sched_setaffinity(0, cpus)
        os.close(ctx.workspace_fd)
    assert sorted(p.name for p in ws.glob("cleanup*")) == sorted(f"cleanup{i}" for i in range(20))


def _alive_in(pid: str, ws: Path) -> bool:
    stat = read_stat(int(pid))
    try:
        return stat is not None and stat.alive and os.readlink(f"/proc/{pid}/cwd") == str(ws)
    except OSError:
        return False


@pytest.mark.bwrap
def test_sandbox_network_setting_reaches_the_plan(ws, real_sandbox):
    tool = Bash(Config(sandbox=SandboxConfig(mode="bwrap", network=True)))
    ctx = make_ctx(ws, config=Config(sandbox=SandboxConfig(mode="bwrap", network=True)), sandbox=real_sandbox)
    plan = tool.plan(tool.decode({"command": "true"}), ctx)
    assert plan.sandboxed and plan.network
    # the sandbox shares the host's network namespace: more interfaces than a fresh loopback
    r = call(ws, {"command": "tail -n +3 /proc/net/dev | wc -l"}, config=ctx.config, sandbox=real_sandbox)
    host = len(Path("/proc/net/dev").read_text().splitlines()) - 2
    assert int(r["output"].split()[-1]) == host


# --- over the socket ----------------------------------------------------------------


def test_over_the_socket_a_ceiling_breach_is_refused_without_asking(daemon, workspace):
    with daemon.client(name="agent", approver=True) as c:
        tools = {t.name: t for t in c.request(ToolsList).tools}
        assert tools["bash"].input_schema["properties"]["timeout_seconds"]["maximum"] == 1800
        sid = c.open_session(workspace)
        done = c.call(sid, "bash", {"command": "touch nope", "timeout_seconds": 1801})
        assert not done.ok and done.error.kind == "invalid_arguments"
        assert "ceiling of 1800 s" in done.error.message
        assert c.request(ApprovalsList).approvals == []
    assert not (workspace / "nope").exists()


def test_over_the_socket_an_approved_call_runs_and_cleans_up(daemon, workspace):
    script = ("echo SCV_HOME=${SCV_HOME-unset}; sleep 1000 & echo $!; "
              "setsid -f sh -c 'echo $$ > orphan; exec sleep 1000'; "
              "while [ ! -s orphan ]; do sleep 0.01; done; cat orphan; exit 3")
    with daemon.client(name="agent", approver=True) as c:
        sid = c.open_session(workspace)
        call_id = c.start_call(sid, "bash", {"command": script, "timeout_seconds": 60})
        event = c.next_event()
        while not isinstance(event, ApprovalRequested):
            event = c.next_event()
        assert event.risk == "process" and "setsid -f sh" in event.summary
        c.request(ApprovalDecide, approval_id=event.approval_id, decision="approve")
        done = c.wait_call(call_id)
    assert done.ok, done.error
    lines = done.result["output"].splitlines()
    assert done.result["exit_code"] == 3 and lines[0] == "SCV_HOME=unset"
    for pid in lines[1:3]:  # the background job and the `setsid -f` orphan
        stat = read_stat(int(pid))
        assert stat is None or not stat.alive
    # scvd is a subreaper: the orphan came back to it, was killed and reaped (no zombie)
    children = [p for p in os.listdir("/proc") if p.isdigit() and _ppid(p) == daemon.proc.pid
                and not is_guardian(int(p))]
    assert children == []


def test_over_the_socket_cancel_ends_the_whole_call(daemon, workspace):
    with daemon.client(name="agent", approver=True) as c:
        sid = c.open_session(workspace)
        call_id = c.start_call(sid, "bash", {"command": "sleep 1000 & echo $! > bg; wait"})
        event = c.next_event()
        while not isinstance(event, ApprovalRequested):
            event = c.next_event()
        c.request(ApprovalDecide, approval_id=event.approval_id, decision="approve")
        bg = workspace / "bg"
        give_up = time.monotonic() + 20
        while not bg.exists() or not bg.read_text().endswith("\n"):
            assert time.monotonic() < give_up, "the command did not start"
            time.sleep(0.01)
        c.request(CallCancel, call_id=call_id)
        done = c.wait_call(call_id)
    assert not done.ok and done.error.kind == "cancelled"
    stat = read_stat(int(bg.read_text()))
    assert stat is None or not stat.alive


def test_a_calls_timeout_below_bashs_own_is_bashs_deadline(daemon, workspace):
    """A call frame's timeout_seconds under the command's own: the approver is shown it, and it
    ends the run as bash's deadline does (KILL at once, the output so far, how to allow more).
    It was a cancel (TERM, a 2 s grace) with no output, under a summary that said 120 s. Its hint
    said to pass a larger timeout_seconds, which the argument already was: the frame's cut it."""
    with daemon.client(name="agent", approver=True) as c:
        sid = c.open_session(workspace)
        call_id = c.start_call(sid, "bash", {"command": "echo started; trap '' TERM; sleep 30",
                                             "timeout_seconds": 600}, timeout_seconds=1)
        event = c.next_event()
        while not isinstance(event, ApprovalRequested):
            event = c.next_event()
        assert "timeout 1 s" in event.summary and event.details["timeout_seconds"] == 1, event.summary
        c.request(ApprovalDecide, approval_id=event.approval_id, decision="approve")
        done = c.wait_call(call_id)
    assert not done.ok and done.error.kind == "timeout"
    assert done.error.message.startswith("bash: the command ran past its timeout of 1 s and its process group "
                                         "was killed (SIGKILL)"), done.error.message
    assert done.error.message.endswith("they follow:\nstarted\n"), done.error.message
    assert done.error.hint == ("the call's own timeout_seconds (1 s, in the call frame) cut the run before the "
                               "argument's 600 s: send the call with a larger timeout_seconds (at most 1800) or "
                               "none, or run less per call"), done.error.hint


def _ppid(pid: str) -> int | None:
    stat = read_stat(int(pid))
    return stat.ppid if stat else None


def test_tools_list_follows_the_configured_ceiling(make_daemon, workspace):
    d = make_daemon("[tools]\nmax_timeout_seconds = 90\ncommand_timeout_seconds = 30\n"
                    "agent_timeout_seconds = 60\ndefault_timeout_seconds = 90\n")
    with d.client(name="agent") as c:
        tools = {t.name: t for t in c.request(ToolsList).tools}
    timeout = tools["bash"].input_schema["properties"]["timeout_seconds"]
    assert (timeout["maximum"], timeout["default"]) == (90, 30)


@pytest.mark.parametrize("command, message", [
    ("echo a\0b", "contains a NUL byte"),
    ("echo " + "x" * (128 * 1024), "write a script into the workspace"),
])
def test_commands_the_kernel_would_refuse_are_refused_before_approval(ws, command, message):
    tool = Bash(Config())
    ctx = make_ctx(ws, Config(), None)
    try:
        with pytest.raises(errors.InvalidArguments, match=message):
            tool.plan(tool.decode({"command": command}), ctx)  # plan() runs before approval
    finally:
        os.close(ctx.workspace_fd)
