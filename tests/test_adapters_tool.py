"""The agent_* tools end to end with the fake agent: real processes, no approval step."""

from __future__ import annotations

import asyncio
import os
import stat
import subprocess
import time
from pathlib import Path

import pytest

from adapters_support import FAKE_AGENT, Harness, harness, fake_bin  # noqa: F401 - fixtures
from scvd.errors import Failed, InvalidArguments, Timeout, Unavailable
from scvd.redact import for_logs

WEIRD_PROMPT = "fix it; $(touch /tmp/pwned) `id` 'q' \"dq\" \\ *\n--model evil\n-p"


def test_argv_boundaries_and_executable_from_path(harness: Harness, fake_bin: Path) -> None:
    result = harness.call("claude", prompt=WEIRD_PROMPT, model="sonnet", effort="high")
    assert result["exit_code"] == 0 and "fake agent done" in result["output"]
    argv, _, _ = harness.recorded()
    assert argv == ["-p", "--model", "sonnet", "--effort", "high", WEIRD_PROMPT]
    assert harness.log.joinpath("argv0").read_text() == str(fake_bin / "claude")


def test_codex_effort_is_one_config_argument(harness: Harness) -> None:
    harness.call("codex", prompt="go", model="gpt-5.1-codex", effort="xhigh")
    argv, env, _ = harness.recorded()
    assert argv == ["exec", "--skip-git-repo-check", "-m", "gpt-5.1-codex", "-c", 'model_reasoning_effort="xhigh"',
                    "--", "go"]
    assert env["CODEX_HOME"] == str(harness.paths.adapters_dir / "codex")


def test_pi_takes_only_the_prompt(harness: Harness) -> None:
    harness.call("pi", prompt="go")
    assert harness.recorded()[0] == ["-p", "go"]


def test_env_scrubbed_home_private(harness: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-planted-openai")
    monkeypatch.setenv("CLAUDE_CODE_OAUTH_TOKEN", "planted-oauth")
    monkeypatch.setenv("SCV_SOCKET", "/planted.sock")
    monkeypatch.setenv("NOTIFY_SOCKET", "/planted-notify")
    harness.call("codex", prompt="go")
    _, env, _ = harness.recorded()
    assert "OPENAI_API_KEY" not in env and "CLAUDE_CODE_OAUTH_TOKEN" not in env
    assert not any("planted" in v for v in env.values())
    home = harness.paths.adapters_dir / "codex"
    assert env["HOME"] == env["CODEX_HOME"] == str(home)
    assert env["XDG_CONFIG_HOME"] == str(home / ".config")
    assert env["XDG_DATA_HOME"] == str(home / ".local/share")
    assert env["XDG_STATE_HOME"] == str(home / ".local/state")
    assert env["SCV_HOME"] == str(home / ".scv")


@pytest.mark.parametrize("agent", ["claude", "codex", "pi"])
def test_stdin_is_dev_null_not_scvds(harness: Harness, agent: str) -> None:
    """codex reads "additional input" from a non-terminal stdin: scvd's own must never reach it."""
    read_end, write_end = os.pipe()
    saved = os.dup(0)
    os.dup2(read_end, 0)  # scvd's stdin is now a pipe that would feed the agent
    try:
        harness.call(agent, prompt="go")
    finally:
        os.dup2(saved, 0)
        for fd in (saved, read_end, write_end):
            os.close(fd)
    assert harness.log.joinpath("stdin").read_text().strip() == "/dev/null"


def test_a_pi_prompt_starting_with_at_is_refused_before_approval(harness: Harness) -> None:
    """pi reads an argument starting with '@' as a file to attach: `pi -p '@alice asked: fix the bug'`
    failed with `Error: File not found: <workspace>/alice asked: fix the bug`, the task never read."""
    prompt = "@alice asked: fix the bug"
    with pytest.raises(InvalidArguments) as info:
        harness.plan("pi", prompt=prompt)
    assert info.value.message == (
        "a prompt for agent_pi cannot start with '@' (pi would read it as a file to attach, not as the task); "
        "start it with a word, e.g. 'Read README.md and fix the failing test'")
    assert not harness.log.exists()
    for agent in ("claude", "codex"):  # they take it as the prompt
        harness.call(agent, prompt=prompt)
        assert harness.recorded()[0][-1] == prompt


def test_runs_in_workspace_root_by_default(harness: Harness) -> None:
    result = harness.call("claude", prompt="go")
    assert harness.recorded()[2] == str(harness.workspace)
    assert result["cwd"] == str(harness.workspace)


@pytest.mark.parametrize("cwd", ["proj", "proj/sub/..", "PROJ_ABS", "inner-link", "inner-link/sub/..", "up/.."])
def test_cwd_inside_workspace(harness: Harness, cwd: str) -> None:
    proj = harness.workspace / "proj"
    (proj / "sub").mkdir(parents=True)
    (harness.workspace / "inner-link").symlink_to("proj")  # relative: as read, an absolute link is refused
    (harness.workspace / "up").symlink_to("proj/sub")  # `..` leaves the directory the link led to, as cd -P
    cwd = str(proj) if cwd == "PROJ_ABS" else cwd
    harness.call("claude", prompt="go", cwd=cwd)
    assert harness.recorded()[2] == str(proj)


@pytest.mark.parametrize("cwd", ["..", "/", "escape", "escape/deeper", "missing", "file.txt", "PARENT_ABS"])
def test_cwd_outside_or_missing_launches_nothing(harness: Harness, tmp_path: Path, cwd: str) -> None:
    outside = tmp_path / "outside"
    (outside / "deeper").mkdir(parents=True)
    (harness.workspace / "escape").symlink_to(outside)
    (harness.workspace / "file.txt").write_text("x")
    cwd = str(tmp_path) if cwd == "PARENT_ABS" else cwd
    with pytest.raises(InvalidArguments, match="cwd"):
        harness.plan("claude", prompt="go", cwd=cwd)  # refused by plan(), so before any approval
    assert not harness.log.exists()


def test_a_cwd_that_cannot_be_looked_up_is_refused_saying_why(harness: Harness) -> None:
    """A name too long for the filesystem escaped plan() as an OSError: the call failed
    `failed unexpectedly: OSError`, logged as a crash of the tool."""
    with pytest.raises(InvalidArguments) as info:
        harness.plan("claude", prompt="go", cwd="x" * 300)
    assert info.value.message == f"cwd {'x' * 300!r} is too long for the filesystem"
    assert not harness.log.exists()


@pytest.mark.parametrize("cwd", ["LINK", "FD"])
def test_an_absolute_cwd_outside_never_says_where_it_leads(harness: Harness, tmp_path: Path, cwd: str) -> None:
    """The refusal quoted realpath(): `cwd '/proc/self/fd/3' resolves to <scvd's lock file>`,
    `/etc/alternatives/editor` its target: what a link leads to, which read keeps from the model."""
    hidden = tmp_path / "hidden-target"
    hidden.mkdir()
    (tmp_path / "link").symlink_to(hidden)
    fd = os.open(hidden, os.O_RDONLY | os.O_DIRECTORY)  # one of scvd's own fds
    try:
        asked = str(tmp_path / "link") if cwd == "LINK" else f"/proc/self/fd/{fd}"
        with pytest.raises(InvalidArguments) as info:
            harness.plan("claude", prompt="go", cwd=asked)
    finally:
        os.close(fd)
    assert info.value.message == (f"cwd {asked!r} is outside the workspace {harness.workspace}; give a directory "
                                  "inside it, relative to the workspace root, e.g. 'src'")
    assert not harness.log.exists()


def test_an_absolute_cwd_outside_is_refused_without_looking_it_up(harness: Harness) -> None:
    """A cwd's host path was resolved on the event loop before approval: one on a dead NFS mount
    froze scvd for every client, and one whose link cannot be read (another user's
    /proc/1/cwd: EACCES; here an exited child's /proc/PID/cwd: ENOENT) crashed the call
    (`failed unexpectedly: PermissionError`). Refused by its name alone, it is neither."""
    child = subprocess.Popen(["true"])  # exited, not reaped until wait(): its cwd link reads ENOENT
    try:
        while Path(f"/proc/{child.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
            time.sleep(0.01)
        with pytest.raises(InvalidArguments, match="is outside the workspace"):
            harness.plan("claude", prompt="go", cwd=f"/proc/{child.pid}/cwd")
    finally:
        child.wait()
    assert not harness.log.exists()


@pytest.mark.parametrize("cwd,said", [
    ("..", "cwd '..' climbs above the workspace root with '..'; scvd only follows paths inside the workspace, "
           "so name it from the workspace root instead"),
    ("WS_ABS/../ws/proj", "climbs above the workspace root"),  # lexically inside, but never past the root
    ("escape/deeper", "cwd 'escape/deeper' leaves the workspace via symlink 'escape' (-> 'OUTSIDE'); scvd follows "
                      "symlinks only while they stay inside the workspace, so paths cannot leave it: name it by its "
                      "real path inside the workspace"),
])
def test_a_cwd_is_refused_as_read_refuses_a_path(harness: Harness, tmp_path: Path, cwd: str, said: str) -> None:
    outside = tmp_path / "outside"
    (outside / "deeper").mkdir(parents=True)
    (harness.workspace / "proj").mkdir()
    (harness.workspace / "escape").symlink_to(outside)
    with pytest.raises(InvalidArguments) as info:
        harness.plan("claude", prompt="go", cwd=cwd.replace("WS_ABS", str(harness.workspace)))
    assert said.replace("OUTSIDE", str(outside)) in info.value.message


def test_cwd_resolved_when_the_call_runs(harness: Harness, tmp_path: Path) -> None:
    """A symlink swapped between approval and run is caught at run time."""
    t = harness.tool("claude")
    args = t.decode({"prompt": "go", "cwd": "proj"})
    (harness.workspace / "proj").mkdir()
    plan = t.plan(args, harness.ctx())
    (harness.workspace / "proj").rmdir()
    (harness.workspace / "proj").symlink_to(tmp_path)
    with pytest.raises(InvalidArguments, match="leaves the workspace via symlink 'proj'"):
        asyncio.run(t.run(args, plan, harness.ctx()))
    assert not harness.log.exists()



def test_a_cwd_replaced_as_the_run_starts_is_named_not_the_workspace(harness: Harness,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """`sub` renamed away and made again between the run's look-up and the start (another session's
    command, while the home was prepared): the refusal said the workspace was replaced, and to open
    a new session, where the workspace stands and calling again is what helps."""
    from scvd.adapters import tools as agent_tools

    (harness.workspace / "sub").mkdir()
    ensure_home = agent_tools.ensure_home

    def moved_meanwhile(*args: object) -> object:
        (harness.workspace / "sub").rename(harness.workspace / "sub.old")
        (harness.workspace / "sub").mkdir()
        return ensure_home(*args)

    monkeypatch.setattr(agent_tools, "ensure_home", moved_meanwhile)
    with pytest.raises(Failed) as info:
        harness.call("pi", prompt="go", cwd="sub")
    assert info.value.message == ("agent_pi: cwd 'sub' was replaced while the call started (moved, or a link or "
                                  "another directory put in its place): nothing ran; call again once it is back")
    assert not harness.log.exists()

def test_timeout_ceiling_refused_before_approval(harness: Harness) -> None:
    t = harness.tool("codex")
    with pytest.raises(InvalidArguments, match="1800"):
        t.decode({"prompt": "go", "timeout_seconds": 1801})
    assert t.plan(t.decode({"prompt": "go"}), harness.ctx()).timeout == 600
    assert t.plan(t.decode({"prompt": "go", "timeout_seconds": 1800}), harness.ctx()).timeout == 1800


@pytest.mark.parametrize("arguments, message", [
    ({"prompt": "go", "timeout_seconds": 1801},
     "agent_claude: timeout_seconds 1801 is above the ceiling of 1800 s (tools.max_timeout_seconds); ask for at "
     "most 1800, or raise tools.max_timeout_seconds in config.toml"),
    # an integer no float holds: formatting it raised OverflowError, and the call "failed unexpectedly"
    ({"prompt": "go", "timeout_seconds": 10 ** 400},
     "agent_claude: timeout_seconds of more than 300 digits is above the ceiling of 1800 s "
     "(tools.max_timeout_seconds); ask for at most 1800, or raise tools.max_timeout_seconds in config.toml"),
    ({"prompt": "go", "timeout_seconds": 0.5},
     "agent_claude: timeout_seconds 0.5 is below the least of 1 s; ask for more, e.g. 600"),
    ({"prompt": "--help"}, "agent_claude: the prompt cannot start with '-' (the agent CLI would take it for an "
                           "option): start it with a word, e.g. 'Fix the failing test'"),
    ({"prompt": "go", "model": "@latest"}, "agent_claude: model '@latest' is not a model name: 1-128 letters, "
                                           "digits or ._:/@[]-, not starting with - or @ (e.g. sonnet, gpt-5.1-codex)"),
])
def test_argument_refusals_say_what_to_send(harness: Harness, arguments, message) -> None:
    """They were the validator's text ("Expected `str` matching regex '^[^-]'"), which the model reads."""
    with pytest.raises(InvalidArguments) as info:
        harness.tool("claude").decode(arguments)
    assert info.value.message == message


def test_the_timeout_example_stays_within_a_lowered_ceiling(harness: Harness) -> None:
    """"e.g. 1800" stood in the schema under max_timeout_seconds = 600: a model copying it was refused."""
    from adapters_support import load_config
    from scvd.adapters import tools as agent_tools

    config = load_config("[tools]\nmax_timeout_seconds = 600\nagent_timeout_seconds = 300\n")
    codex = {t.name: t for t in agent_tools.tools(config, harness.paths)}["agent_codex"]
    timeout = codex.input_schema()["properties"]["timeout_seconds"]
    assert timeout["maximum"] == 600 and timeout["description"].endswith("e.g. 600")


def test_a_timeout_of_whole_seconds_sent_as_a_float_runs(harness: Harness) -> None:
    """`timeout_seconds: 600.0` was refused (`Expected int, got float`) where bash takes it (seed 000:
    timeouts behave as bash's), though the schema's `integer` takes 600.0."""
    assert harness.call("pi", prompt="go", timeout_seconds=600.0)["exit_code"] == 0
    assert harness.plan("pi", prompt="go", timeout_seconds=600.0).timeout == 600


@pytest.mark.timeout(30)  # the fake agent sleeps for an hour: only the deadline kill ends it
def test_deadline_kills_the_agent(harness: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_AGENT_MODE", "sleep")
    with pytest.raises(Timeout) as info:  # as bash reports a deadline (seed 000)
        harness.call("pi", prompt="go", timeout_seconds=1)
    assert info.value.kind == "timeout"
    assert "agent_pi: the command ran past its timeout of 1 s" in info.value.message
    assert "timeout_seconds (at most 1800)" in info.value.hint


PASSED = {"GH_TOKEN": "ghp_agentplanted42", "AWS_PROFILE": "work-profile-7c1f",
          "DATABASE_URL": "postgres://app:planted-db-pass@db.internal/app"}
SHOWN = ("GH_TOKEN=[secret GH_TOKEN]\nAWS_PROFILE=work-profile-7c1f\n"
         "DATABASE_URL=postgres://app:[secret DATABASE_URL password]@db.internal/app\n"
         "HTTPS_PROXY=http://user:[secret HTTPS_PROXY password]@proxy.internal:3128\n")


def passing(harness: Harness, monkeypatch: pytest.MonkeyPatch, mode: str) -> None:
    """The agents get PASSED through pass_env, a proxy with a password through the allow-list, and
    the fake agent prints them all."""
    from adapters_support import FAKE_AGENT_VARS, load_config, passing_env

    harness.config = load_config(passing_env([*FAKE_AGENT_VARS, *PASSED]))
    for name, value in {**PASSED, "HTTPS_PROXY": "http://user:s3cretpass@proxy.internal:3128"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("FAKE_AGENT_PRINT", " ".join([*PASSED, "HTTPS_PROXY"]))
    monkeypatch.setenv("FAKE_AGENT_MODE", mode)


@pytest.mark.parametrize("mode", ["ok", "fail"])
def test_a_passed_credential_the_agent_prints_comes_back_hidden(harness: Harness, monkeypatch: pytest.MonkeyPatch,
                                                                mode: str) -> None:
    """A GH_TOKEN passed to an agent came back in its output as is, where a script tool's reads
    `[secret GH_TOKEN]`; a profile name, and a URL's user and host, still read as printed."""
    passing(harness, monkeypatch, mode)
    result = harness.call("claude", prompt="go")
    assert result["output"].startswith(SHOWN), result["output"]
    assert "planted" not in result["output"] and "s3cret" not in result["output"]
    # and in scvd's own log, should a line quote it
    assert for_logs("token ghp_agentplanted42 in use") == "token [secret GH_TOKEN] in use"


@pytest.mark.timeout(30)  # the fake agent sleeps for an hour: only the deadline kill ends it
def test_a_passed_credential_is_hidden_in_the_output_a_deadline_reports(harness: Harness,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    passing(harness, monkeypatch, "sleep")
    with pytest.raises(Timeout) as info:
        harness.call("pi", prompt="go", timeout_seconds=3)  # time to print, on a loaded machine too
    assert SHOWN in info.value.message and "planted" not in info.value.message


def test_cancel_terminates_and_repairs_home(harness: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_AGENT_MODE", "sleep")
    t = harness.tool("claude")
    args = t.decode({"prompt": "go"})
    home = harness.paths.adapters_dir / "claude"

    async def scenario() -> None:
        task = asyncio.create_task(t.run(args, t.plan(args, harness.ctx()), harness.ctx()))
        while not harness.log.joinpath("cwd").exists():
            await asyncio.sleep(0.02)
        os.chmod(home, 0o755)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(scenario())
    assert stat.S_IMODE(home.stat().st_mode) == 0o700


def test_modes_repaired_after_each_run(harness: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_AGENT_MODE", "untidy")
    harness.call("claude", prompt="go")
    home = harness.paths.adapters_dir / "claude"
    for p in [home, home / ".agent", home / ".agent/state"]:
        assert stat.S_IMODE(p.stat().st_mode) == 0o700, p
    assert stat.S_IMODE((home / ".agent/state/file").stat().st_mode) == 0o600


def test_a_file_another_run_renames_away_during_the_repair_keeps_the_result(harness: Harness,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Two sessions run the same agent: one's repair walks the home while the other's CLI renames its
    temp file into place (claude writes .claude.json so). That was `agent_claude failed unexpectedly:
    FileNotFoundError`, the finished run's result lost."""
    monkeypatch.setenv("FAKE_AGENT_MODE", "untidy")
    real_lstat = os.lstat

    def renamed_right_after(path, *args, **kwargs):  # the other run's rename, between look and chmod
        st = real_lstat(path, *args, **kwargs)
        if str(path).endswith(".agent/state/file"):
            os.rename(path, f"{path}.renamed")
        return st

    monkeypatch.setattr(os, "lstat", renamed_right_after)
    result = harness.call("claude", prompt="go")
    assert result["exit_code"] == 0 and "left state behind" in result["output"]


@pytest.mark.parametrize("agent", ["claude", "codex", "pi"])
def test_missing_signin_gives_hint(harness: Harness, monkeypatch: pytest.MonkeyPatch, agent: str) -> None:
    monkeypatch.setenv("FAKE_AGENT_MODE", "signin")
    result = harness.call(agent, prompt="go")
    assert result["exit_code"] == 1
    assert f"scvctl agents login {agent}" in result["hint"]


def test_other_failures_get_no_hint(harness: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_AGENT_MODE", "fail")
    result = harness.call("claude", prompt="go")
    assert result["exit_code"] == 2 and "hint" not in result


def test_a_cli_whose_node_is_not_on_scvds_path_gets_a_hint_saying_so(harness: Harness, fake_bin: Path) -> None:
    """The CLIs are `#!/usr/bin/env node` scripts: under systemd scvd's PATH may find the CLI but not
    node. The result said only `exit_code: 127`, env's line, and no hint."""
    (fake_bin / "claude").unlink()
    (fake_bin / "claude").symlink_to(FAKE_AGENT.parent / "needs-a-missing-node")
    result = harness.call("claude", prompt="go")
    assert result["exit_code"] == 127
    assert "scvd-test-node-nowhere" in result["output"] and "No such file or directory" in result["output"]
    assert result["hint"] == (  # this process runs outside systemd, as a `scvd run` in a shell does
        "claude needs scvd-test-node-nowhere, which is not on scvd's PATH: scvd runs outside systemd, with the "
        "PATH of the shell that started it: stop it and start scvd run again from a shell whose PATH has the "
        "absolute path of the folder of `command -v scvd-test-node-nowhere`")


MOVED_NODE_HINT = (
    "claude needs /nonexistent/scvd-test-node/bin/node, which its first line names and which does not exist: "
    "reinstall it with the node on scvd's PATH (npm install -g @anthropic-ai/claude-code), or install node at "
    "/nonexistent/scvd-test-node/bin/node")


def test_a_cli_whose_absolute_node_is_gone_gets_the_hint_naming_it(harness: Harness, fake_bin: Path) -> None:
    """An npm install made with /usr/local/bin/node names it in its first line: with that node gone, the
    call failed saying only `claude: No such file or directory`, of a CLI that is there."""
    (fake_bin / "claude").unlink()
    (fake_bin / "claude").symlink_to(FAKE_AGENT.parent / "needs-a-moved-node")
    with pytest.raises(Failed) as info:
        harness.call("claude", prompt="go")
    assert info.value.message == (f"agent_claude: cannot start {fake_bin / 'claude'}; nothing ran: "
                                  + MOVED_NODE_HINT)


def test_missing_executable_unavailable_before_approval(harness: Harness, monkeypatch: pytest.MonkeyPatch,
                                                        tmp_path: Path) -> None:
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    with pytest.raises(Unavailable) as info:
        harness.plan("claude", prompt="go")
    assert info.value.message == (
        "claude is not installed: npm install -g @anthropic-ai/claude-code, or put it on scvd's PATH")


def test_a_cli_that_which_passes_over_though_its_mode_allows_running_is_said_so(tmp_path: Path) -> None:
    """Where shutil.which finds no codex though a file whose mode has the execute bits is there (another
    user's 0700, a noexec mount), `chmod +x` would change nothing: the message says what can."""
    from scvd.adapters import locate, spec

    elsewhere = tmp_path / "other-bin"
    elsewhere.mkdir()
    (elsewhere / "codex").mkdir()  # no regular file: passed over, as which does
    folder = tmp_path / "bin"
    folder.mkdir()
    (folder / "codex").write_text("#!/bin/sh\n")
    (folder / "codex").chmod(0o700)
    said = locate.not_executable(spec.CODEX, f"{elsewhere}{os.pathsep}{folder}")
    assert said == (f"{folder / 'codex'} is not executable for scvd's user (mode 0700, owner uid {os.getuid()}; "
                    f"or its file system is mounted noexec): make it executable for uid {os.getuid()}, or install "
                    "it where scvd can run it: npm install -g @openai/codex")
    assert locate.not_executable(spec.CODEX, str(elsewhere)) is None  # then: not installed


def test_a_cli_removed_while_the_call_waited_fails_saying_so(harness: Harness, fake_bin: Path) -> None:
    """It was `agent_claude failed unexpectedly: FileNotFoundError`, logged as a crash of the tool."""
    t = harness.tool("claude")
    args = t.decode({"prompt": "go"})
    plan = t.plan(args, harness.ctx())  # the approval shows this executable
    (fake_bin / "claude").unlink()  # uninstalled (or mid-update) before the approval came
    with pytest.raises(Failed) as info:
        asyncio.run(t.run(args, plan, harness.ctx()))
    assert info.value.message == (
        f"agent_claude: cannot start {fake_bin / 'claude'} in {harness.workspace} ({fake_bin / 'claude'}: "
        "No such file or directory); nothing ran: fix that and retry the call")
    assert not harness.log.exists()


def test_approval_details(harness: Harness, fake_bin: Path) -> None:
    long_prompt = "Land the fix. " + "x" * 5000
    (harness.workspace / "scv").mkdir()
    plan = harness.plan("codex", prompt=long_prompt, cwd="scv", timeout_seconds=900, model="gpt-5")
    d = plan.details
    assert plan.risk.value == "delegate" and plan.timeout == 900 and plan.network
    assert d["executable"] == str(fake_bin / "codex")
    assert d["argv"][:5] == [str(fake_bin / "codex"), "exec", "--skip-git-repo-check", "-m", "gpt-5"]
    assert d["prompt"] == long_prompt  # whole: the approver can read all of it
    assert len(d["argv"][-1]) < 2100 and "more characters" in d["argv"][-1]
    assert d["prompt_chars"] == len(long_prompt)
    assert d["cwd"] == "scv" and d["timeout_seconds"] == 900
    assert d["workspace"] == str(harness.workspace)
    assert "delegate risk" in d["warning"]
    assert plan.summary.startswith("agent_codex in scv (900s) [cut: 3,014 more chars; see details]: Land the fix.")
    assert plan.summary.endswith("x ...") and len(plan.summary) < 2100
    short = harness.plan("claude", prompt="Fix it.\nThen run the tests.")
    assert short.summary == "agent_claude in . (600s): Fix it.\nThen run the tests."


@pytest.mark.parametrize("field,value,what", [
    ("prompt", "Fix the \ud83d bug", "the prompt holds a lone surrogate U+D83D at character 8"),
    ("cwd", "proj\ud800", "cwd holds a lone surrogate U+D800 at character 4"),
])
def test_half_a_character_is_refused_before_approval(harness: Harness, field: str, value: str, what: str) -> None:
    """A chat model's JSON may carry half a surrogate pair (json.loads keeps it): the prompt passed
    the plan, was approved, and the run failed as `agent_claude failed unexpectedly: UnicodeEncodeError`
    (a cwd: at once, the same way)."""
    with pytest.raises(InvalidArguments) as info:
        harness.plan("claude", **{"prompt": "go", field: value})
    assert info.value.message == (
        f"{what} (half of a character such as an emoji), which is not valid UTF-8; send it again as valid text")


@pytest.mark.parametrize("field,value,message", [
    ("prompt", "Fix\x00it", "the prompt contains a NUL character, which no argument can carry; remove it"),
    ("cwd", "proj\x00", "cwd contains a NUL character, which no path can hold; remove it"),
])
def test_a_nul_character_is_refused_before_approval_saying_what_to_do(harness: Harness, field: str, value: str,
                                                                      message: str) -> None:
    """It said only "a prompt cannot contain a NUL character" (a cwd: "cwd contains a NUL character")."""
    (harness.workspace / "proj").mkdir()
    with pytest.raises(InvalidArguments) as info:
        harness.plan("claude", **{"prompt": "go", field: value})
    assert info.value.message == message
    assert not harness.log.exists()


def test_oversized_prompt_refused(harness: Harness) -> None:
    with pytest.raises(InvalidArguments, match="limit of one argument"):
        harness.plan("claude", prompt="x" * (128 * 1024))


def use_bwrap(harness: Harness) -> None:
    from scvd.config import SandboxConfig
    from scvd.sandbox import Sandbox, probe

    result = probe(SandboxConfig(mode="bwrap"), harness.paths, os.environ)
    assert result.ok, result.verdict
    harness.sandbox = Sandbox(result, harness.paths)


@pytest.mark.bwrap
def test_sandboxed_run_sees_its_home_but_not_the_instance(harness: Harness,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    use_bwrap(harness)
    harness.log = harness.workspace / ".agent-log"  # the one place besides its home it may write
    monkeypatch.setenv("FAKE_AGENT_LOG", str(harness.log))
    harness.paths.config_file.write_text("# instance config\n")
    assert harness.plan("claude", prompt="go").sandboxed
    monkeypatch.setenv("FAKE_AGENT_MODE", "untidy")
    assert harness.call("claude", prompt="go")["exit_code"] == 0
    assert (harness.paths.adapters_dir / "claude/.agent/state/file").read_text() == "state\n"
    monkeypatch.setenv("FAKE_AGENT_MODE", "read")
    monkeypatch.setenv("FAKE_AGENT_READ", str(harness.paths.config_file))
    out = harness.call("claude", prompt="go")["output"]
    assert "instance config" not in out and "cannot read" in out


@pytest.mark.bwrap
def test_a_sandboxed_cli_whose_absolute_node_is_gone_gets_the_hint_naming_it(harness: Harness,
                                                                            fake_bin: Path) -> None:
    """In the sandbox bwrap's execvp fails instead (`bwrap: execvp ...claude: No such file or directory`)."""
    use_bwrap(harness)
    (fake_bin / "claude").unlink()
    (fake_bin / "claude").symlink_to(FAKE_AGENT.parent / "needs-a-moved-node")
    out = harness.call("claude", prompt="go")
    assert out["exit_code"] != 0 and "No such file or directory" in out["output"], out
    assert out["hint"] == MOVED_NODE_HINT


@pytest.mark.bwrap
def test_a_sandboxed_cli_that_is_an_executable_fifo_fails_without_waiting_on_it(harness: Harness,
                                                                                 fake_bin: Path) -> None:
    """bwrap's execvp failed, and the hint's look at the CLI's #! line waited for a writer on the FIFO."""
    use_bwrap(harness)
    (fake_bin / "claude").unlink()
    os.mkfifo(fake_bin / "claude")
    (fake_bin / "claude").chmod(0o755)
    out = harness.call("claude", prompt="go")
    assert out["exit_code"] != 0 and "Permission denied" in out["output"], out
