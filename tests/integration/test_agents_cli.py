"""`scvctl agents` and the agent_* tools against a real daemon, with the fake agent on its PATH."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from adapters_support import FAKE_AGENT, FAKE_AGENT_CONFIG, make_fake_bin, read_log
import daemon_forks
from conftest import DaemonProc, base_env, wait_pending
from scvd import protocol as p

# the agents' homes, argv and texts: the same whichever loop the daemon runs on (test_agent_reaping.py
# runs an agent's processes on both)
pytestmark = pytest.mark.one_loop

API_KEY = "sk-proj-INTEGRATIONSECRET42"


@pytest.fixture
def agent_daemon(make_daemon, tmp_path: Path) -> DaemonProc:
    """A daemon whose PATH finds the fake claude / codex / pi, with keys planted in its env."""
    fake_bin = make_fake_bin(tmp_path / "bin")
    return make_daemon(FAKE_AGENT_CONFIG, env={
        "PATH": f"{fake_bin}{os.pathsep}{os.environ.get('PATH', os.defpath)}",
        "FAKE_AGENT_LOG": str(tmp_path / "agent-log"),
        "OPENAI_API_KEY": "sk-planted-in-daemon",
        "CLAUDE_CODE_OAUTH_TOKEN": "planted-oauth-in-daemon",
    })


def scvctl(d: DaemonProc, *args: str, cwd: Path | None = None, timeout: float = 30) -> subprocess.CompletedProcess:
    return daemon_forks.scvctl(list(args), base_env(d.home), cwd=cwd, timeout=timeout)


def agent_log(d: DaemonProc) -> Path:
    return Path(d.env["FAKE_AGENT_LOG"])


def test_status_lists_every_agent_one_line_each(agent_daemon: DaemonProc) -> None:
    out = scvctl(agent_daemon, "agents", "status")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["claude  not signed in", "codex   not signed in",
                                       "pi      not signed in"]
    listed = json.loads(scvctl(agent_daemon, "agents", "status", "--json").stdout)
    assert listed == [{"agent": a, "state": "not signed in"} for a in ("claude", "codex", "pi")]


def test_status_of_one_agent_with_json_is_its_row(agent_daemon: DaemonProc) -> None:
    """`agents status codex --json` printed the CLI's own text: --json was dropped without a word.
    It exits as without --json, with the status command's own code (codex's is 1 when not signed in)."""
    out = scvctl(agent_daemon, "agents", "status", "codex", "--json")
    assert json.loads(out.stdout) == {"agent": "codex", "state": "not signed in"}
    assert out.returncode == scvctl(agent_daemon, "agents", "status", "codex").returncode == 1, out.stderr
    out = scvctl(agent_daemon, "agents", "status", "pi", "--json")
    assert (out.returncode, json.loads(out.stdout)) == (0, {"agent": "pi", "state": "not signed in"})


@pytest.mark.parametrize("argv, what", [
    (["agents", "login", "codex"], "scvctl agents login, which runs the agent's own login in this terminal"),
    (["agents", "logout", "pi"], "scvctl agents logout, which runs the agent's own logout in this terminal"),
    (["chat"], "scvctl chat, which is interactive: `scvctl exec --json PROMPT` gives a turn as JSON"),
    (["mcp"], "scvctl mcp, which speaks MCP's JSON-RPC on stdin and stdout"),
])
def test_json_where_it_cannot_apply_is_a_usage_error(agent_daemon: DaemonProc, argv, what) -> None:
    out = scvctl(agent_daemon, *argv, "--json")
    assert (out.returncode, out.stdout) == (2, "")
    assert out.stderr == f"usage: --json does not apply to {what}\n"
    assert not agent_log(agent_daemon).exists()  # no agent ran
    # its help offered [--json]: the option is refused there
    shown = scvctl(agent_daemon, *argv, "--help")
    assert shown.returncode == 0 and shown.stdout.startswith(f"usage: scvctl {argv[0]}"), shown
    assert "--json" not in shown.stdout


@pytest.mark.parametrize("action", ["login", "logout"])
def test_login_without_an_agent_names_only_the_agent_as_missing(tmp_path: Path, action: str) -> None:
    """It said `the following arguments are required: AGENT, extra`: the agent's own arguments are optional."""
    out = scvctl_alone(daemonless_env(tmp_path / "scv", tmp_path), "agents", action)
    assert (out.returncode, out.stdout) == (2, "")
    assert out.stderr.splitlines() == [
        f"usage: scvctl agents {action} [-h] [--socket SOCKET] AGENT [ARG ...]",
        f"scvctl agents {action}: error: the following arguments are required: AGENT"]
    assert not (tmp_path / "agent-log").exists()  # no agent ran


def test_status_without_the_cli_says_how_to_install(make_daemon, tmp_path: Path) -> None:
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    d = make_daemon(env={"PATH": str(empty)})
    out = scvctl(d, "agents", "status")
    assert "claude is not installed: npm install -g @anthropic-ai/claude-code" in out.stdout
    assert "pi is not installed: npm install -g @mariozechner/pi-coding-agent" in out.stdout


def test_a_cli_this_shell_finds_but_the_daemon_does_not_is_said_so(make_daemon, tmp_path: Path) -> None:
    """Under systemd scvd's PATH is the user manager's: `claude is not installed: npm install ...` sent
    a user who had installed it to install it again. An scvd started in a shell (`scvd run`, as the
    README does) has that shell's PATH: `systemctl --user edit scvd` would change nothing there."""
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    fake_bin = make_fake_bin(tmp_path / "bin")
    d = make_daemon(env={"PATH": str(empty)})
    shell = {**base_env(d.home), "PATH": f"{fake_bin}{os.pathsep}{os.environ['PATH']}"}
    said = (f"claude is not on scvd's PATH, but this shell finds it at {fake_bin / 'claude'}: scvd runs outside "
            "systemd, with the PATH of the shell that started it: stop it and start scvd run again from a shell "
            f"whose PATH has {fake_bin}")
    for args in (["status"], ["login", "claude"]):
        out = subprocess.run([sys.executable, "-m", "scvctl", "agents", *args], env=shell, stdin=subprocess.DEVNULL,
                             capture_output=True, text=True, timeout=30)
        assert said in out.stdout + out.stderr, out


def test_a_cli_on_scvds_path_without_its_execute_bit_is_said_so(make_daemon, tmp_path: Path, workspace: Path) -> None:
    """A CLI copied there as mode 0644 (which shutil.which passes over) was `not installed: npm install -g
    @openai/codex, or put it on scvd's PATH`: its owner was sent to install again what was there."""
    folder = tmp_path / "bin"
    folder.mkdir()
    codex = folder / "codex"
    shutil.copyfile(FAKE_AGENT, codex)
    codex.chmod(0o644)
    said = f"{codex} is not executable: chmod +x {codex}"
    d = make_daemon(env={"PATH": str(folder)})
    shell = {**base_env(d.home), "PATH": str(folder)}  # this shell looks where scvd does
    status = scvctl_alone(shell, "agents", "status")
    assert status.stdout.splitlines() == [
        "claude  claude is not installed: npm install -g @anthropic-ai/claude-code, or put it on scvd's PATH",
        f"codex   {said}",
        "pi      pi is not installed: npm install -g @mariozechner/pi-coding-agent, or put it on scvd's PATH"]
    login = scvctl_alone(shell, "agents", "login", "codex")
    assert (login.returncode, login.stderr) == (1, f"codex: {said}\n")
    with d.client(name="agent") as c:
        done = c.call(c.open_session(workspace), "agent_codex", {"prompt": "go"})
    assert (done.error.kind, done.error.message) == ("unavailable", said)
    d.stop()
    alone = scvctl_alone(shell, "agents", "login", "codex")  # no daemon: scvctl looks as scvd would
    assert alone.returncode == 1 and alone.stderr.endswith(f"codex: {said}\n"), alone.stderr


def test_login_runs_the_agents_command_with_the_daemons_home_and_env(agent_daemon: DaemonProc) -> None:
    out = scvctl(agent_daemon, "agents", "login", "codex", "--", "--device-auth")
    assert out.returncode == 0, out.stderr
    assert "--device-auth" in out.stderr  # the note for headless hosts
    argv, env, cwd = read_log(agent_log(agent_daemon))
    home = agent_daemon.home / "adapters" / "codex"
    assert argv == ["login", "--device-auth"]
    assert env["HOME"] == env["CODEX_HOME"] == cwd == str(home)
    assert "OPENAI_API_KEY" not in env and "CLAUDE_CODE_OAUTH_TOKEN" not in env
    assert not any("planted" in v for v in env.values())
    assert not any(k.startswith("SCV_") and k != "SCV_HOME" for k in env)
    assert stat.S_IMODE(home.stat().st_mode) == 0o700


def test_an_agents_arguments_after_the_double_dash_go_through_whole(agent_daemon: DaemonProc) -> None:
    """argparse dropped every `--` after the first: `-- --config -- x` ran `codex login --config x`."""
    out = scvctl(agent_daemon, "agents", "login", "codex", "--", "--config", "--", "x")
    assert out.returncode == 0, out.stderr
    argv, _, _ = read_log(agent_log(agent_daemon))
    assert argv == ["login", "--config", "--", "x"]


def test_an_option_before_the_double_dash_keeps_the_agents_arguments(agent_daemon: DaemonProc) -> None:
    """`login codex --socket S -- --device-auth` was `unrecognized arguments: -- --device-auth` (exit 2):
    argparse had taken AGENT and its empty arguments before the option, and refused what followed."""
    out = scvctl(agent_daemon, "agents", "login", "codex", "--socket", str(agent_daemon.socket), "--",
                 "--device-auth")
    assert out.returncode == 0, out.stderr
    argv, _, _ = read_log(agent_log(agent_daemon))
    assert argv == ["login", "--device-auth"]
    out = scvctl(agent_daemon, "agents", "status", "codex", "--json", "--", "--verbose")
    assert out.returncode == 2 and "arguments after -- apply without --json only" in out.stderr, out.stderr


def test_an_attached_sign_in_gets_this_terminals_term(make_daemon, tmp_path: Path) -> None:
    """Under systemd the daemon has no TERM: the sign-in window (pi's TUI) was told of no terminal."""
    fake_bin = make_fake_bin(tmp_path / "bin")
    d = make_daemon(FAKE_AGENT_CONFIG, env={"PATH": f"{fake_bin}{os.pathsep}{os.environ.get('PATH', os.defpath)}",
                                            "FAKE_AGENT_LOG": str(tmp_path / "agent-log"), "TERM": "dumb"})
    out = subprocess.run([sys.executable, "-m", "scvctl", "agents", "login", "pi"], stdin=subprocess.DEVNULL,
                         env={**base_env(d.home), "TERM": "xterm-256color", "COLORTERM": "truecolor"},
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    _, env, _ = read_log(tmp_path / "agent-log")
    assert (env["TERM"], env["COLORTERM"]) == ("xterm-256color", "truecolor")


def test_status_of_one_agent_shows_its_own_output_and_exit_code(agent_daemon: DaemonProc) -> None:
    out = scvctl(agent_daemon, "agents", "status", "claude")
    assert out.returncode == 1
    assert '"loggedIn": false' in out.stdout


def test_pi_login_explains_its_slash_login(agent_daemon: DaemonProc) -> None:
    out = scvctl(agent_daemon, "agents", "login", "pi")
    assert out.returncode == 0
    assert "/login" in out.stderr
    argv, env, _ = read_log(agent_log(agent_daemon))
    assert argv == [] and env["HOME"] == str(agent_daemon.home / "adapters" / "pi")


def test_import_codex_reports_and_never_prints_the_key(agent_daemon: DaemonProc, tmp_path: Path) -> None:
    src = tmp_path / "user" / ".codex"
    src.mkdir(parents=True)
    (src / "config.toml").write_text('model = "gpt-5"\nmodel_provider = "relay"\n'
                                     '[model_providers.relay]\nname = "relay"\n'
                                     'base_url = "http://127.0.0.1:9/v1"\nenv_key = "RELAY_API_KEY"\n')
    (src / "auth.json").write_text(json.dumps({"OPENAI_API_KEY": API_KEY}))
    out = scvctl(agent_daemon, "agents", "import", "codex", "--from", ".codex", cwd=src.parent)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(f"imported config.toml, auth.json from {src} into scvd's codex")
    assert "  model: gpt-5" in out.stdout and "  model_provider: relay" in out.stdout
    assert "  requires_openai_auth: false" in out.stdout  # as config.toml spells it, not Python's False
    assert "warning: provider 'relay' reads its key through env_key RELAY_API_KEY" in out.stdout
    home = agent_daemon.home / "adapters" / "codex"
    assert json.loads((home / "auth.json").read_text()) == {"OPENAI_API_KEY": API_KEY}
    assert stat.S_IMODE((home / "auth.json").stat().st_mode) == 0o600
    assert API_KEY not in out.stdout + out.stderr + agent_daemon.log()


def test_a_codex_logout_removes_the_key_an_older_scvds_unfinished_import_left(agent_daemon: DaemonProc,
                                                                             tmp_path: Path) -> None:
    """An import by an scvd before the journal, killed once it had swapped auth.json, left the old key as
    .auth.json.old: `agents logout codex` (allowed in a home left so) kept it until the next import."""
    src = tmp_path / "user-codex"
    src.mkdir()
    (src / "config.toml").write_text('model = "gpt-5"\n')
    (src / "auth.json").write_text(json.dumps({"OPENAI_API_KEY": API_KEY}))
    assert scvctl(agent_daemon, "agents", "import", "codex", "--from", str(src)).returncode == 0
    home = agent_daemon.home / "adapters" / "codex"
    os.link(home / "auth.json", home / ".auth.json.old")  # as that import kept it, then swapped the file
    (home / "auth.json").write_text(json.dumps({"OPENAI_API_KEY": "sk-for-another-endpoint"}))
    (home / ".config.toml.swp").write_text("an editor's")  # no import's: neither removed nor said to be
    out = scvctl(agent_daemon, "agents", "logout", "codex")
    assert out.returncode == 0, out.stderr
    assert ".swp" not in out.stderr and (home / ".config.toml.swp").exists(), out.stderr
    assert (f"removed .auth.json.old from {home}: copies of its files (a key among them) that an import an older "
            "scvd did not finish left; runs stay refused until `scvctl agents import codex` again"
            in out.stderr.splitlines()), out.stderr
    assert not (home / ".auth.json.old").exists()
    assert read_log(agent_log(agent_daemon))[0] == ["logout"]  # codex's own logout ran after
    assert "logout: removed .auth.json.old from the codex home" in agent_daemon.log()
    refused = scvctl(agent_daemon, "agents", "login", "codex")  # still unsure: the key in auth.json may be either's
    assert refused.returncode == 1 and "may hold a key for another endpoint" in refused.stderr, refused.stderr
    assert scvctl(agent_daemon, "agents", "logout", "codex").stderr.count("removed ") == 0  # nothing left


def test_status_after_importing_a_relay_with_its_own_key_says_no_sign_in_is_needed(agent_daemon: DaemonProc,
                                                                                   tmp_path: Path) -> None:
    src = tmp_path / "user-codex"
    src.mkdir()
    (src / "config.toml").write_text('model_provider = "relay"\n[model_providers.relay]\n'
                                     f'base_url = "http://127.0.0.1:9/v1"\nexperimental_bearer_token = "{API_KEY}"\n')
    assert scvctl(agent_daemon, "agents", "import", "codex", "--from", str(src)).returncode == 0
    out = scvctl(agent_daemon, "agents", "status")  # the fake codex says "Not logged in", as the real one does
    assert "codex   needs no sign-in: config.toml's provider 'relay' uses its experimental_bearer_token" in \
        out.stdout.splitlines()
    assert API_KEY not in out.stdout + out.stderr


def test_the_next_delegated_call_after_an_import_uses_it_without_a_restart(make_daemon, tmp_path: Path,
                                                                          workspace: Path) -> None:
    home = tmp_path / "scvhome"
    fake_bin = make_fake_bin(tmp_path / "bin")  # FAKE_AGENT_MODE=read: the agent prints its own config
    d = make_daemon(FAKE_AGENT_CONFIG, home=home, env={
        "PATH": f"{fake_bin}{os.pathsep}{os.environ['PATH']}", "FAKE_AGENT_LOG": str(tmp_path / "agent-log"),
        "FAKE_AGENT_MODE": "read", "FAKE_AGENT_READ": str(home / "adapters" / "codex" / "config.toml")})
    src = tmp_path / "user-codex"
    src.mkdir()
    (src / "config.toml").write_text('model = "gpt-5-imported"\n')
    with d.client(name="bridge") as agent, d.client(name="person") as person:
        sid = agent.open_session(workspace)

        def delegated_output() -> str:
            call_id = agent.start_call(sid, "agent_codex", {"prompt": "Show your config."})
            pending = wait_pending(person)[0]
            person.request(p.ApprovalDecide, approval_id=pending.approval_id, decision="approve")
            done = agent.wait_call(call_id)
            assert done.ok, done.error
            return done.result["output"]

        assert "gpt-5-imported" not in delegated_output()
        assert scvctl(d, "agents", "import", "codex", "--from", str(src)).returncode == 0
        assert 'model = "gpt-5-imported"' in delegated_output()  # the same daemon, the same session
    assert d.proc.poll() is None


def test_import_errors_exit_1_with_what_to_do(agent_daemon: DaemonProc, tmp_path: Path) -> None:
    src = tmp_path / "broken"
    src.mkdir()
    (src / "config.toml").write_text("model = \n")
    out = scvctl(agent_daemon, "agents", "import", "codex", "--from", str(src))
    assert out.returncode == 1
    assert out.stderr.startswith("invalid_request: ") and "not valid TOML" in out.stderr


RELAY = 'model_provider = "relay"\n[model_providers.relay]\nexperimental_bearer_token = "bearer-1"\n'
DEEP = "a = " + "[" * 1000 + "]" * 1000 + "\n"  # 2 KB: past tomllib's recursion


def test_a_config_nested_too_deeply_is_invalid_toml_naming_it(agent_daemon: DaemonProc, tmp_path: Path) -> None:
    """tomllib's RecursionError went uncaught: `internal: internal error in scvd` and a traceback of
    ~200 KB in the log; without the daemon, scvctl's own traceback."""
    src = tmp_path / "deep"
    src.mkdir()
    (src / "config.toml").write_text(DEEP)
    said = (f"invalid_request: {src / 'config.toml'} is not valid TOML (arrays or inline tables nested too deeply "
            "to read); fix it, nothing was written")
    out = scvctl(agent_daemon, "agents", "import", "codex", "--from", str(src))
    assert (out.returncode, out.stderr) == (1, said + "\n")
    assert "Traceback" not in agent_daemon.log()
    alone = scvctl_alone(daemonless_env(tmp_path / "scv", tmp_path), "agents", "import", "codex", "--from", str(src))
    assert (alone.returncode, alone.stderr.splitlines()[-1]) == (1, said), alone.stderr


def test_scvds_own_codex_config_nested_too_deeply_is_said_so_and_an_import_replaces_it(
        agent_daemon: DaemonProc, tmp_path: Path, workspace: Path) -> None:
    """An agent_codex run may write its home's config.toml. Nested too deeply, it made every later import
    fail with `internal` (the old config is read for its endpoint), `agents status` end in a traceback
    without the claude and pi lines, and a chat turn fail naming no file."""
    good = tmp_path / "good"
    good.mkdir()
    (good / "config.toml").write_text(RELAY + 'base_url = "http://127.0.0.1:9/v1"\n')
    assert scvctl(agent_daemon, "agents", "import", "codex", "--from", str(good)).returncode == 0
    config = agent_daemon.home / "adapters" / "codex" / "config.toml"
    config.write_text(DEEP)
    status = scvctl(agent_daemon, "agents", "status")
    assert status.returncode == 0 and [line.split()[0] for line in status.stdout.splitlines()] == \
        ["claude", "codex", "pi"], status.stdout + status.stderr
    turn = scvctl(agent_daemon, "exec", "--workspace", str(workspace), "hi")
    assert turn.returncode == 1 and (
        f"turn failed (provider_error): the imported Codex setup cannot be read: {config} is not valid TOML (arrays "
        "or inline tables nested too deeply to read)") in turn.stderr, turn.stderr
    assert "hint: run `scvctl agents import codex` again: it replaces scvd's copy of your Codex setup" in turn.stderr
    again = scvctl(agent_daemon, "agents", "import", "codex", "--from", str(good))
    assert again.returncode == 0, again.stderr
    assert config.read_text() == (good / "config.toml").read_text()
    assert "Traceback" not in agent_daemon.log()


def test_json_nested_too_deeply_in_a_codex_setup_is_unreadable_not_internal(agent_daemon: DaemonProc, tmp_path: Path,
                                                                            workspace: Path) -> None:
    """json's RecursionError went uncaught as tomllib's did: a source auth.json failed the import as
    `internal`; in scvd's codex home (an agent_codex run writes there) an import journal failed the next
    import so, and an auth.json every chat turn."""
    deep = "[" * 1000 + "]" * 1000
    src = tmp_path / "src"
    src.mkdir()
    (src / "auth.json").write_text(deep)
    out = scvctl(agent_daemon, "agents", "import", "codex", "--from", str(src))
    assert (out.returncode, out.stderr) == (1, f"invalid_request: {src / 'auth.json'} is not valid JSON (arrays or "
                                               "objects nested too deeply to read); nothing was written\n")
    (src / "auth.json").unlink()
    (src / "config.toml").write_text('model_provider = "openai"\n')
    assert scvctl(agent_daemon, "agents", "import", "codex", "--from", str(src)).returncode == 0
    home = agent_daemon.home / "adapters" / "codex"
    (home / "auth.json").write_text(deep)
    turn = scvctl(agent_daemon, "exec", "--workspace", str(workspace), "hi")
    assert "turn failed (auth): the imported Codex setup holds no API key for its provider 'openai'" in turn.stderr, \
        turn.stderr
    (home / ".scvd-import.undo").write_text(deep)
    out = scvctl(agent_daemon, "agents", "import", "codex", "--from", str(src))
    assert out.returncode == 0 and "left no journal scvd can undo it by" in out.stdout, out.stdout + out.stderr
    assert "Traceback" not in agent_daemon.log()


def test_a_turn_on_an_imported_relay_without_its_env_key_names_the_variable(agent_daemon: DaemonProc, tmp_path: Path,
                                                                           workspace: Path) -> None:
    """`holds no API key for its provider 'relay' (..., or its env_key in scvd's environment)` left the
    person to find which variable in their Codex config, and where scvd's environment comes from."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "config.toml").write_text('model_provider = "relay"\n[model_providers.relay]\n'
                                     'base_url = "http://127.0.0.1:9/v1"\nenv_key = "RELAY_KEY"\n')
    assert scvctl(agent_daemon, "agents", "import", "codex", "--from", str(src)).returncode == 0
    turn = scvctl(agent_daemon, "exec", "--workspace", str(workspace), "hi")
    assert turn.returncode == 1 and turn.stderr.splitlines()[-2:] == [
        "turn failed (auth): the imported Codex setup's provider 'relay' takes its API key from RELAY_KEY (its "
        "env_key), which is not set in scvd's environment",
        "hint: scvd runs outside systemd, with the environment of the shell that started it: stop it and start "
        "scvd run again from a shell where RELAY_KEY is set (export RELAY_KEY=...)"], turn.stderr


def test_a_directory_in_the_place_of_an_imported_file_is_named(agent_daemon: DaemonProc, tmp_path: Path) -> None:
    """It failed as `internal: cannot write scvd's codex home ... (Operation not permitted) ... free some space
    or fix its permissions`: no path, and the wrong fix (the old file's hard link fails on a directory)."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "config.toml").write_text(RELAY + 'base_url = "http://127.0.0.1:9/v1"\n')
    assert scvctl(agent_daemon, "agents", "import", "codex", "--from", str(src)).returncode == 0
    config = agent_daemon.home / "adapters" / "codex" / "config.toml"
    config.unlink()
    config.mkdir()
    out = scvctl(agent_daemon, "agents", "import", "codex", "--from", str(src))
    assert (out.returncode, out.stderr) == (1, f"failed: {config} is a directory, where the import writes its "
                                               "config.toml: move it away (scvd never makes one there), then import "
                                               "again; nothing was written\n")
    config.rmdir()
    assert scvctl(agent_daemon, "agents", "import", "codex", "--from", str(src)).returncode == 0


def test_import_warns_of_a_header_no_request_can_carry_and_never_shows_it(agent_daemon: DaemonProc,
                                                                         tmp_path: Path) -> None:
    """Such a header failed the first chat turn, not the import. Codex itself leaves it out of its
    requests, so its agents still run with this setup: imported, with a warning per header."""
    src = tmp_path / "user-codex"
    src.mkdir()
    (src / "config.toml").write_text(RELAY + 'base_url = "http://127.0.0.1:9/v1"\n'
                                     'http_headers = { "X-Relay-Token" = "tok-77\\nX-Admin: yes", "X Team" = "blue" }\n'
                                     'env_http_headers = { "X:Org" = "RELAY_ORG" }\n')
    out = scvctl(agent_daemon, "agents", "import", "codex", "--from", str(src))
    assert out.returncode == 0, out.stderr
    then = ("codex leaves it out of its requests, and a chat turn with provider codex fails on it; "
            "fix it in your Codex config.toml and import again")
    assert f"warning: provider 'relay': http_headers 'X-Relay-Token' has a value no HTTP header can carry " \
           f"(a line break, a control character, or a space or tab at an end): {then}" in out.stdout
    assert "warning: provider 'relay': http_headers 'X Team' is not an HTTP header name" in out.stdout
    assert "warning: provider 'relay': env_http_headers 'X:Org' is not an HTTP header name (letters, digits and " \
           "!#$%&'*+-.^_`|~, no space or colon) (a turn fails once RELAY_ORG is set in scvd's environment)" in out.stdout
    assert "tok-77" not in out.stdout + out.stderr + agent_daemon.log()
    assert (agent_daemon.home / "adapters" / "codex" / "config.toml").read_text() == (src / "config.toml").read_text()


@pytest.mark.parametrize("line, said", [
    ('base_url = "relay.example/v1"', "base_url must start with http:// or https://, e.g. http://127.0.0.1:8080/v1"),
    ('base_url = "http://127.0.0.1:9/v1"\nwire_api = "completions"',
     "wire_api 'completions' is not one codex knows, and it stops at start on it: set wire_api = \"responses\""),
    ('base_url = "http://127.0.0.1:9/v1"\nenv_key = 5', "env_key is an integer, not a text: write it as env_key = \"...\""),
], ids=["no scheme", "wire_api", "env_key"])
def test_import_refuses_an_endpoint_no_agent_can_reach_and_keeps_the_last_import(agent_daemon: DaemonProc,
                                                                                 tmp_path: Path, line, said) -> None:
    """Codex fails on both too (a wire_api it does not know stops it at start): the import took the
    setup, and the first chat turn or delegated call failed on it."""
    good, bad = tmp_path / "good", tmp_path / "bad"
    good.mkdir(), bad.mkdir()
    (good / "config.toml").write_text(RELAY + 'base_url = "http://127.0.0.1:9/v1"\n')
    assert scvctl(agent_daemon, "agents", "import", "codex", "--from", str(good)).returncode == 0
    (bad / "config.toml").write_text(RELAY + line + "\n")
    (bad / "auth.json").write_text(json.dumps({"OPENAI_API_KEY": API_KEY}))
    out = scvctl(agent_daemon, "agents", "import", "codex", "--from", str(bad))
    assert (out.returncode, out.stderr) == (1, f"invalid_request: {bad / 'config.toml'}: provider 'relay': {said}; "
                                               "fix it in your Codex config.toml and import again; nothing was written\n")
    home = agent_daemon.home / "adapters" / "codex"
    assert (home / "config.toml").read_text() == (good / "config.toml").read_text()
    assert not (home / "auth.json").exists()


OPENAI_SETUP = 'model = "gpt-5"\n'
NAMED_RELAY = ('model_provider = "relay"\n[model_providers.relay]\nname = "relay"\nbase_url = "http://127.0.0.1:9/v1"\n'
               'experimental_bearer_token = "bearer-1"\n')  # codex 0.171 refuses a provider table without a name
FIX = "; fix it in your Codex config.toml and import again; nothing was written"
# what codex 0.171 (.ci/install-agents) stops at start on, each checked against it offline: its words, then ours
STOPS_CODEX = {
    # legacy `profile = "work"` config is no longer supported; use `--profile work` with `work.config.toml` instead
    "profile": ('profile = "work"\n' + NAMED_RELAY + '[profiles.work]\nmodel = "o3"\n',
                'profile = "work" is no longer supported by codex, which stops at start on it (it takes --profile NAME '
                "with NAME.config.toml instead, which scvd's agent runs do not pass): move the settings of "
                "[profiles.work] you want to the top level and remove the profile line"),
    # model_providers contains reserved built-in provider IDs: `openai`. Built-in providers cannot be overridden.
    "openai table": ('[model_providers.openai]\nname = "openai"\nbase_url = "https://evil.example/v1"\n',
                     "model_providers has a table of codex's built-in openai, and codex stops at start on it (built-in "
                     "providers cannot be overridden): rename [model_providers.openai] (e.g. to [model_providers."
                     "openai-custom]) and set model_provider to the new name, or remove it to use codex's own"),
    "ollama and lmstudio tables": (
        'model_provider = "ollama"\n[model_providers.ollama]\nname = "mine"\nbase_url = "http://10.1.2.3:9999/v1"\n'
        '[model_providers.lmstudio]\nname = "mine too"\nbase_url = "http://10.1.2.3:9998/v1"\n',
        "model_providers has a table of codex's built-in ollama, lmstudio, and codex stops at start on it (built-in "
        "providers cannot be overridden): rename each (e.g. to [model_providers.ollama-custom]) and set "
        "model_provider to the new name, or remove it to use codex's own"),
    # `wire_api = "chat"` is no longer supported. How to fix: set `wire_api = "responses"` in your provider config.
    "wire_api chat": (NAMED_RELAY + 'wire_api = "chat"\n',
                      'provider \'relay\': wire_api = "chat" is no longer supported by codex, which stops at start on '
                      'it: set wire_api = "responses" (for a server with Chat Completions only, give scvd\'s chat a '
                      '[providers.NAME] with wire_api = "chat" in scvd\'s config.toml instead)'),
    "wire_api chat unused": (OPENAI_SETUP + '[model_providers.old]\nname = "old"\nbase_url = "http://127.0.0.1:9/v1"\n'
                             'wire_api = "chat"\n',
                             'provider \'old\': wire_api = "chat" is no longer supported by codex, which stops at start '
                             'on it: set wire_api = "responses" (for a server with Chat Completions only, give scvd\'s '
                             'chat a [providers.NAME] with wire_api = "chat" in scvd\'s config.toml instead)'),
    # Model provider `nope` not found
    "unknown provider": ('model_provider = "nope"\n',
                         'model_provider = "nope" names no provider, and codex stops at start on it (Model provider '
                         "`nope` not found): add a [model_providers.nope] table, name one of codex's own (openai, "
                         "ollama, lmstudio, amazon-bedrock), or remove the line for openai"),
}


def import_openai_with_key(d: DaemonProc, tmp_path: Path) -> Path:
    """scvd's codex home after an import of OpenAI's own provider with an API key; returns the home."""
    good = tmp_path / "good"
    good.mkdir()
    (good / "config.toml").write_text(OPENAI_SETUP)
    (good / "auth.json").write_text(json.dumps({"OPENAI_API_KEY": API_KEY}))
    assert scvctl(d, "agents", "import", "codex", "--from", str(good)).returncode == 0
    return d.home / "adapters" / "codex"


@pytest.mark.parametrize("config, said", STOPS_CODEX.values(), ids=STOPS_CODEX)
def test_import_refuses_what_codex_stops_at_start_on_and_keeps_the_last_import(agent_daemon: DaemonProc,
                                                                              tmp_path: Path, config, said) -> None:
    """Each was imported ("imported config.toml"), then every agent_codex run failed (exit 1) on it; the
    unknown provider's import even removed the API-key auth.json the last import had stored."""
    home = import_openai_with_key(agent_daemon, tmp_path)
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "config.toml").write_text(config)
    out = scvctl(agent_daemon, "agents", "import", "codex", "--from", str(bad))
    assert (out.returncode, out.stderr) == (1, f"invalid_request: {bad / 'config.toml'}: {said}{FIX}\n")
    assert (home / "config.toml").read_text() == OPENAI_SETUP
    assert json.loads((home / "auth.json").read_text()) == {"OPENAI_API_KEY": API_KEY}


@pytest.mark.parametrize("config, said", STOPS_CODEX.values(), ids=STOPS_CODEX)
def test_a_turn_on_a_codex_home_codex_stops_at_start_on_fails_saying_why(agent_daemon: DaemonProc, tmp_path: Path,
                                                                        workspace: Path, config, said) -> None:
    """An older scvd's import left it (or an agent run wrote it): a chat turn with provider codex took it
    as codex no longer does, sending the OpenAI key to a [model_providers.openai]'s base_url, a profile's
    provider or a Chat Completions endpoint."""
    home = import_openai_with_key(agent_daemon, tmp_path)
    (home / "config.toml").write_text(config)
    turn = scvctl(agent_daemon, "exec", "--workspace", str(workspace), "hi")
    assert turn.returncode == 1 and turn.stderr.splitlines()[-2:] == [
        f"turn failed (provider_error): the imported Codex setup's {said}",
        "hint: fix it in your Codex config.toml, then run `scvctl agents import codex` again"], turn.stderr


@pytest.mark.parametrize("with_key", [True, False], ids=["beside a key", "alone"])
def test_a_config_link_whose_target_moved_is_refused_and_the_last_import_stays(agent_daemon: DaemonProc,
                                                                              tmp_path: Path, with_key) -> None:
    """Taken as no config.toml: the key beside it was imported alone and the relay's config.toml removed
    ("the imported auth.json has no config.toml beside it"), so the key went to api.openai.com; without
    a key it said "has neither config.toml nor auth.json"."""
    good = tmp_path / "good"
    good.mkdir()
    (good / "config.toml").write_text(NAMED_RELAY)
    (good / "auth.json").write_text(json.dumps({"OPENAI_API_KEY": API_KEY}))
    assert scvctl(agent_daemon, "agents", "import", "codex", "--from", str(good)).returncode == 0
    src, target = tmp_path / "src", tmp_path / "dotfiles" / "codex-config.toml"
    src.mkdir()
    (src / "config.toml").symlink_to(target)
    if with_key:
        (src / "auth.json").write_text(json.dumps({"OPENAI_API_KEY": "sk-proj-the-relays-new-key"}))
    out = scvctl(agent_daemon, "agents", "import", "codex", "--from", str(src))
    assert (out.returncode, out.stderr) == (1, f"invalid_request: {src / 'config.toml'} is a symbolic link to "
                                               f"{target}, which does not exist; point it at the file or remove it, "
                                               "then import again; nothing was written\n")
    home = agent_daemon.home / "adapters" / "codex"
    assert (home / "config.toml").read_text() == (good / "config.toml").read_text()
    assert json.loads((home / "auth.json").read_text()) == {"OPENAI_API_KEY": API_KEY}


def test_a_config_that_starts_with_a_bom_is_read_as_codex_reads_it(agent_daemon: DaemonProc, tmp_path: Path) -> None:
    """Refused as "not valid TOML (at line 1, column 1)", which codex reads (an editor on Windows writes one)."""
    src = tmp_path / "src"
    src.mkdir()
    text = "\ufeff" + NAMED_RELAY
    (src / "config.toml").write_text(text, encoding="utf-8")
    out = scvctl(agent_daemon, "agents", "import", "codex", "--from", str(src))
    assert out.returncode == 0 and "  model_provider: relay" in out.stdout.splitlines(), out.stderr
    home = agent_daemon.home / "adapters" / "codex"
    assert (home / "config.toml").read_text(encoding="utf-8") == text  # copied whole, its BOM too
    status = scvctl(agent_daemon, "agents", "status")  # scvd's own reading of its codex home
    assert "codex   needs no sign-in: config.toml's provider 'relay' uses its experimental_bearer_token" in \
        status.stdout.splitlines(), status.stdout + status.stderr


def test_import_from_a_missing_or_empty_codex_home_says_so(agent_daemon: DaemonProc, tmp_path: Path) -> None:
    """With no ~/.codex (codex never run as this user) the import said it "is not a directory"."""
    user_home = Path(base_env(agent_daemon.home)["HOME"])
    out = scvctl(agent_daemon, "agents", "import", "codex")
    assert (out.returncode, out.stderr) == (1, f"invalid_request: {user_home / '.codex'} does not exist; "
                                               "give your Codex home with --from DIR\n")
    (tmp_path / "file").write_text("x")
    out = scvctl(agent_daemon, "agents", "import", "codex", "--from", str(tmp_path / "file"))
    assert out.stderr == f"invalid_request: {tmp_path / 'file'} is not a directory; give your Codex home with --from DIR\n"
    # `--from "$CODEX_HOME"` with the variable unset: it imported whatever config.toml the current directory held
    (tmp_path / "config.toml").write_text('model = "a project setting"\n')
    out = scvctl(agent_daemon, "agents", "import", "codex", "--from", "", cwd=tmp_path)
    assert (out.returncode, out.stderr) == (1, f"invalid_request: {user_home / '.codex'} does not exist; "
                                               "give your Codex home with --from DIR\n")
    (tmp_path / "empty").mkdir()
    out = scvctl(agent_daemon, "agents", "import", "codex", "--from", str(tmp_path / "empty"))
    assert out.stderr == (f"invalid_request: {tmp_path / 'empty'} has neither config.toml nor auth.json; "
                          "nothing to import\n")


def test_a_tool_error_outside_a_call_reaches_the_client_as_itself(agent_daemon: DaemonProc,
                                                                  tmp_path: Path) -> None:
    """agents.spec / agents.import raise tool errors (a broken home): code `failed`, never `internal`."""
    from scvd.errors import Failed

    home = agent_daemon.home / "adapters" / "codex"
    if home.is_dir():
        home.rmdir()
    home.write_text("not a directory")
    with agent_daemon.client() as c:
        with pytest.raises(Failed, match="must be a directory owned by scvd"):
            c.request(p.AgentsSpec, agent="codex", action="login")
        with pytest.raises(Failed, match="must be a directory owned by scvd"):
            c.request(p.AgentsImport, agent="codex", source=str(tmp_path))
    out = scvctl(agent_daemon, "agents", "login", "codex")
    assert out.returncode == 1
    assert out.stderr.startswith(f"failed: the codex home {home} must be a directory owned by scvd"), out.stderr
    assert "internal error" not in agent_daemon.log()


def test_unknown_agent_is_an_invalid_request(agent_daemon: DaemonProc) -> None:
    from scvd.errors import InvalidRequest

    with agent_daemon.client() as c, pytest.raises(InvalidRequest, match="known agents"):
        c.request(p.AgentsSpec, agent="gemini", action="login")


def test_agent_call_over_the_socket_shows_details_and_hints(make_daemon, tmp_path: Path,
                                                           workspace: Path) -> None:
    fake_bin = make_fake_bin(tmp_path / "bin")
    d = make_daemon(FAKE_AGENT_CONFIG, env={"PATH": f"{fake_bin}{os.pathsep}{os.environ['PATH']}",
                                            "FAKE_AGENT_LOG": str(tmp_path / "agent-log"), "FAKE_AGENT_MODE": "signin"})
    (workspace / "proj").mkdir()
    with d.client(name="bridge") as agent, d.client(name="person") as person:
        sid = agent.open_session(workspace)
        call_id = agent.start_call(sid, "agent_claude", {"prompt": "Fix the bug.", "cwd": "proj",
                                                         "model": "sonnet", "timeout_seconds": 120})
        pending = wait_pending(person)[0]
        assert pending.tool == "agent_claude" and pending.risk == "delegate"
        assert pending.workspace == str(workspace)
        details = pending.details
        assert details["executable"] == str(fake_bin / "claude")
        assert details["argv"] == [str(fake_bin / "claude"), "-p", "--model", "sonnet", "Fix the bug."]
        assert details["cwd"] == "proj" and details["timeout_seconds"] == 120
        assert "delegate risk" in details["warning"]
        person.request(p.ApprovalDecide, approval_id=pending.approval_id, decision="approve")
        done = agent.wait_call(call_id)
    assert done.ok, done.error
    assert done.result["exit_code"] == 1
    assert "scvctl agents login claude" in done.result["hint"]
    assert read_log(tmp_path / "agent-log")[2] == str(workspace / "proj")


def test_a_timeout_in_fractions_of_a_second_is_taken_as_bash_takes_it(agent_daemon: DaemonProc,
                                                                      workspace: Path) -> None:
    """`timeout_seconds: 90.5` was refused (`Expected int, got float`) where bash takes any number."""
    with agent_daemon.client(name="bridge") as agent, agent_daemon.client(name="person") as person:
        call_id = agent.start_call(agent.open_session(workspace), "agent_pi",
                                   {"prompt": "go", "timeout_seconds": 90.5})
        (pending,) = wait_pending(person)
        assert pending.details["timeout_seconds"] == 90.5 and "(90.5s)" in pending.summary
        person.request(p.ApprovalDecide, approval_id=pending.approval_id, decision="approve")
        done = agent.wait_call(call_id)
    assert done.ok and done.result["exit_code"] == 0, done


def test_an_agent_cut_by_the_call_frames_timeout_says_that_one_gives_it_more_time(make_daemon, tmp_path: Path,
                                                                                  workspace: Path) -> None:
    """As bash's: its hint said to pass a larger timeout_seconds, which the argument (600) already was."""
    fake_bin = make_fake_bin(tmp_path / "bin")
    d = make_daemon(FAKE_AGENT_CONFIG, env={"PATH": f"{fake_bin}{os.pathsep}{os.environ['PATH']}",
                                            "FAKE_AGENT_LOG": str(tmp_path / "agent-log"), "FAKE_AGENT_MODE": "sleep"})
    with d.client(name="bridge") as agent, d.client(name="person") as person:
        call_id = agent.start_call(agent.open_session(workspace), "agent_pi", {"prompt": "go", "timeout_seconds": 600},
                                   timeout_seconds=1)
        (pending,) = wait_pending(person)
        person.request(p.ApprovalDecide, approval_id=pending.approval_id, decision="approve")
        done = agent.wait_call(call_id)
    assert done.error.kind == "timeout" and "agent_pi: the command ran past its timeout of 1 s" in done.error.message
    assert done.error.hint == ("the call's own timeout_seconds (1 s, in the call frame) cut the run before the "
                               "argument's 600 s: send the call with a larger timeout_seconds (at most 1800) or "
                               "none, or run less per call"), done.error.hint


def fifo_in_place_of(program: Path) -> None:
    program.unlink()
    os.mkfifo(program)
    program.chmod(0o755)


def test_an_executable_fifo_in_the_agents_place_fails_the_call_and_scvd_answers(agent_daemon: DaemonProc,
                                                                                workspace: Path, tmp_path: Path) -> None:
    """Its exec failed, and scvd opened it to read a #! line on its loop: the open waited for a writer,
    so no client was answered again (under systemd the watchdog killed scvd)."""
    pi = tmp_path / "bin" / "pi"
    fifo_in_place_of(pi)
    with agent_daemon.client(name="bridge") as agent, agent_daemon.client(name="person") as person:
        call_id = agent.start_call(agent.open_session(workspace), "agent_pi", {"prompt": "x"})
        (pending,) = wait_pending(person)
        person.request(p.ApprovalDecide, approval_id=pending.approval_id, decision="approve")
        done = agent.wait_call(call_id)
        person.request(p.Ping)
    assert not done.ok and done.error.message == (f"agent_pi: cannot start {pi} in {workspace} ({pi}: Permission "
                                                  "denied); nothing ran: fix that and retry the call"), done


@pytest.mark.parametrize("cwd", [None, "sub"])
def test_an_agent_whose_workspace_a_link_replaced_while_it_waited_does_not_run_there(
        agent_daemon: DaemonProc, workspace: Path, tmp_path: Path, cwd: str | None) -> None:
    """The run's cwd was the workspace's path resolved again as it started: a link put there since the
    call's check (here while it waited for approval) ran the agent where the link led. With a `cwd`
    it still did (its directory found beneath the held workspace, then entered by its path)."""
    target = tmp_path / "target"
    (target / "sub").mkdir(parents=True)
    (workspace / "sub").mkdir()
    with agent_daemon.client(name="bridge") as agent, agent_daemon.client(name="person") as person:
        call_id = agent.start_call(agent.open_session(workspace), "agent_pi", {"prompt": "go", "cwd": cwd})
        (pending,) = wait_pending(person)
        workspace.rename(workspace.with_name("ws.old"))
        workspace.symlink_to(target)
        person.request(p.ApprovalDecide, approval_id=pending.approval_id, decision="approve")
        done = agent.wait_call(call_id)
    assert not done.ok and done.error.message.startswith(f"the workspace {workspace} was replaced"), done
    assert not agent_log(agent_daemon).exists()  # the agent never started


def test_an_absolute_cwd_through_the_linked_path_the_session_was_opened_on_runs_there(
        agent_daemon: DaemonProc, tmp_path: Path) -> None:
    """A session opened on /home/me/proj where /home -> /var/home (Fedora Atomic): an absolute cwd the
    client wrote from the path it knows was refused, `outside the workspace /var/home/me/proj`."""
    real = tmp_path / "var" / "home" / "me" / "proj"
    (real / "src").mkdir(parents=True)
    (tmp_path / "home").symlink_to("var/home")
    opened = tmp_path / "home" / "me" / "proj"
    with agent_daemon.client(name="bridge") as agent, agent_daemon.client(name="person") as person:
        sid = agent.open_session(opened)
        call_id = agent.start_call(sid, "agent_pi", {"prompt": "go", "cwd": f"{opened}/src"})
        (pending,) = wait_pending(person)
        person.request(p.ApprovalDecide, approval_id=pending.approval_id, decision="approve")
        done = agent.wait_call(call_id)
        # still lexical: a `..` after it is taken beneath the workspace, never past its root
        climbs = agent.call(sid, "agent_pi", {"prompt": "go", "cwd": f"{opened}/../proj"})
        outside = agent.call(sid, "agent_pi", {"prompt": "go", "cwd": str(opened.parent)})
    assert done.ok and done.result["cwd"] == str(real / "src"), done
    assert read_log(agent_log(agent_daemon))[2] == str(real / "src")
    assert not climbs.ok and "climbs above the workspace root" in climbs.error.message, climbs
    assert outside.error.message.startswith(f"cwd {str(opened.parent)!r} is outside the workspace {real} "
                                            f"(opened as {opened}); give a directory inside it"), outside



def test_scvctl_sends_the_workspace_as_written_so_an_absolute_cwd_through_its_link_runs(
        agent_daemon: DaemonProc, tmp_path: Path) -> None:
    """scvctl resolved --workspace before session.open, so scvd knew only the real path: an absolute
    cwd written through the link the person gave (/home -> /var/home) was refused before approval."""
    real = tmp_path / "var" / "home" / "me" / "proj"
    (real / "src").mkdir(parents=True)
    (tmp_path / "home").symlink_to("var/home")
    opened = tmp_path / "home" / "me" / "proj"
    # given whole, and as the default `.` in the shell's directory, which $PWD names through the link
    for workspace, env in ((str(opened), {}), (".", {"PWD": str(opened)})):
        call = subprocess.Popen([sys.executable, "-m", "scvctl", "call", "--workspace", workspace, "agent_pi",
                                 json.dumps({"prompt": "go", "cwd": f"{opened}/src"})],
                                env={**base_env(agent_daemon.home), **env}, cwd=opened, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            with agent_daemon.client(name="person") as person:
                (pending,) = wait_pending(person)
                person.request(p.ApprovalDecide, approval_id=pending.approval_id, decision="approve")
            out, err = call.communicate(timeout=30)
        finally:
            call.kill()
        assert call.returncode == 0, (workspace, err)
        assert read_log(agent_log(agent_daemon))[2] == str(real / "src")
        agent_log(agent_daemon).joinpath("cwd").unlink()  # the next run writes its own

def test_too_long_timeout_refused_before_approval(agent_daemon: DaemonProc, workspace: Path) -> None:
    with agent_daemon.client(name="bridge") as c:
        sid = c.open_session(workspace)
        done = c.call(sid, "agent_codex", {"prompt": "go", "timeout_seconds": 99999})
        assert c.request(p.ApprovalsList).approvals == []
    assert not done.ok and done.error.kind == "invalid_arguments"
    assert "1800" in done.error.message
    assert not agent_log(agent_daemon).exists()


@pytest.mark.parametrize("cwd,needle", [
    ("missing", "not an existing directory"),
    ("notes.txt", "not an existing directory"),
    ("..", "climbs above the workspace root"),
    ("/", "is outside the workspace"),
    ("escape", "leaves the workspace via symlink 'escape'"),  # a symlink leading out
    ("/proc/self/exe", "is outside the workspace"),  # never resolved: the message does not say scvd's python
])
def test_bad_cwd_refused_with_no_approval_request(make_daemon, tmp_path: Path,
                                                  workspace: Path, cwd: str, needle: str) -> None:
    # were a request sent, nobody answers it: the call ends `denied` after 5 s and the test fails
    fake_bin = make_fake_bin(tmp_path / "bin")
    agent_daemon = make_daemon(FAKE_AGENT_CONFIG + "[approvals]\ntimeout_seconds = 5\n", env={
        "PATH": f"{fake_bin}{os.pathsep}{os.environ['PATH']}", "FAKE_AGENT_LOG": str(tmp_path / "agent-log")})
    (workspace / "notes.txt").write_text("x")
    (workspace / "escape").symlink_to(tmp_path)
    with agent_daemon.client(name="person") as watcher, agent_daemon.client(name="bridge") as c:
        watcher.request(p.ApprovalsWatch)
        sid = c.open_session(workspace)
        done = c.call(sid, "agent_codex", {"prompt": "go", "cwd": cwd})
        watcher.request(p.Ping)  # every event sent before this answer is now queued
        seen = [e for e in [*watcher.core.events, *c.core.events] if isinstance(e, p.ApprovalRequested)]
    assert not done.ok and done.error.kind == "invalid_arguments"
    assert needle in done.error.message and "cwd" in done.error.message
    assert os.path.basename(os.path.realpath("/proc/self/exe")) not in done.error.message
    assert seen == []
    assert not agent_log(agent_daemon).exists()


# --- no daemon running: the same spec, computed by scvctl ----------------------------------


def daemonless_env(home: Path, tmp_path: Path) -> dict[str, str]:
    """What agent_daemon's daemon gets, for a scvctl with no daemon at all."""
    fake_bin = tmp_path / "bin"
    if not fake_bin.exists():
        make_fake_bin(fake_bin)
    home.mkdir(mode=0o700, exist_ok=True)
    (home / "config.toml").write_text(FAKE_AGENT_CONFIG)
    return base_env(home, PATH=f"{fake_bin}{os.pathsep}{os.environ.get('PATH', os.defpath)}",
                    FAKE_AGENT_LOG=str(tmp_path / "agent-log"), OPENAI_API_KEY="sk-planted-in-shell",
                    CLAUDE_CODE_OAUTH_TOKEN="planted-oauth-in-shell")


def test_a_cli_this_shell_finds_through_a_relative_path_entry_is_named_by_its_absolute_folder(
        make_daemon, tmp_path: Path) -> None:
    """`PATH=bin:...`, scvd started from the folder that holds bin/claude: scvd drops `bin`, and the
    advice said to start scvd again from a shell whose PATH has `bin`, the entry it had just dropped."""
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    make_fake_bin(tmp_path / "bin")
    path = f"bin{os.pathsep}{empty}"
    d = make_daemon(env={"PATH": path}, cwd=tmp_path)
    assert "dropped 'bin' from scvd's PATH" in d.log()
    dropped = ("claude is not on scvd's PATH, but this shell finds it at bin/claude, through the entry 'bin' of its "
               "PATH, which scvd drops: each process it starts would read that against its working directory, "
               "a session's workspace; ")
    said = (f"{dropped}scvd runs outside systemd, with the PATH of the shell that started it: stop it and start "
            f"scvd run again from a shell whose PATH has {tmp_path / 'bin'}")
    for args in (["status"], ["login", "claude"]):
        out = scvctl_alone({**base_env(d.home), "PATH": path}, "agents", *args, cwd=tmp_path)
        assert said in out.stdout + out.stderr, out
    d.stop()
    # without scvd, scvctl looks the CLI up as scvd would: not through `bin`, which it would drop
    env = {**daemonless_env(tmp_path / "scv", tmp_path), "PATH": path}
    out = scvctl_alone(env, "agents", "login", "claude", cwd=tmp_path)
    assert (out.returncode, out.stderr.splitlines()[-1]) == (1, (
        f"claude: {dropped}add {tmp_path / 'bin'} to scvd's PATH (under systemd: systemctl --user edit scvd: "
        "Environment=PATH=...; else in the shell that runs scvd run), then restart scvd")), out.stderr
    assert not (tmp_path / "agent-log").exists()  # it ran the CLI found through `bin`


def scvctl_alone(env: dict[str, str], *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "scvctl", *args], env=env, cwd=cwd,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30)


NOT_RUNNING = "scvd is not running; working on {adapters} directly, with this shell's environment " \
    "cleaned as scvd cleans it"


def test_login_without_the_daemon_uses_the_same_home_and_env(tmp_path: Path) -> None:
    home = tmp_path / "scv"  # never started: a user signs in before the first start
    env = daemonless_env(home, tmp_path)
    out = scvctl_alone(env, "agents", "login", "codex", "--", "--device-auth")
    assert out.returncode == 0, out.stderr
    assert out.stderr.splitlines()[0] == NOT_RUNNING.format(adapters=home / "adapters")
    assert "--device-auth" in out.stderr  # the same note for headless hosts
    argv, agent_env, cwd = read_log(tmp_path / "agent-log")
    codex_home = home / "adapters" / "codex"
    assert argv == ["login", "--device-auth"]
    assert agent_env["HOME"] == agent_env["CODEX_HOME"] == cwd == str(codex_home)
    assert not any("planted" in v for v in agent_env.values())
    assert not any(k.startswith("SCV_") and k != "SCV_HOME" for k in agent_env)
    assert stat.S_IMODE(codex_home.stat().st_mode) == 0o700
    assert not (home / "run" / "scvd.sock").exists()


def test_a_cli_found_that_cannot_start_is_one_line_not_a_traceback(tmp_path: Path) -> None:
    """An npm CLI whose #! names an interpreter that is gone (node moved by an nvm upgrade): `status`
    said `cannot run ...`, `login` and `logout` died with a FileNotFoundError traceback; then all said
    `No such file or directory` of a codex that is there, where a missing `env node` got a hint."""
    home = tmp_path / "scv"
    env = daemonless_env(home, tmp_path)
    broken = tmp_path / "broken-bin"
    broken.mkdir()
    (broken / "codex").write_text("#!/nonexistent/node\n")
    (broken / "codex").chmod(0o755)
    env["PATH"] = f"{broken}{os.pathsep}{env['PATH']}"
    hint = ("codex needs /nonexistent/node, which its first line names and which does not exist: reinstall it "
            "with the node on scvd's PATH (npm install -g @openai/codex), or install node at /nonexistent/node")
    for action in ("login", "logout", "status"):
        out = scvctl_alone(env, "agents", action, "codex")
        assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr
        assert out.stderr.splitlines()[-1] == f"failed: cannot run {broken / 'codex'}; nothing ran: {hint}", out.stderr
    assert f"codex   {hint}" in scvctl_alone(env, "agents", "status").stdout.splitlines()


def test_the_daemon_and_scvctl_alone_launch_the_same_command(make_daemon, tmp_path: Path) -> None:
    """Same config, same environment: what the fake agent records is identical both ways."""
    home = tmp_path / "scv"
    env = daemonless_env(home, tmp_path)
    recorded = []
    for running in (False, True):
        d = make_daemon(home=home, env={k: env[k] for k in ("PATH", "FAKE_AGENT_LOG", "OPENAI_API_KEY")}) \
            if running else None
        out = scvctl_alone(env, "agents", "logout", "claude")
        assert (NOT_RUNNING.split(";")[0] in out.stderr) is not running
        recorded.append(read_log(tmp_path / "agent-log"))
        if d:
            d.stop()
    (argv0, env0, cwd0), (argv1, env1, cwd1) = recorded
    assert argv0 == argv1 == ["auth", "logout"] and cwd0 == cwd1
    assert {k: v for k, v in env0.items() if k != "CLAUDE_CODE_OAUTH_TOKEN"} == \
        {k: v for k, v in env1.items() if k != "CLAUDE_CODE_OAUTH_TOKEN"}
    assert "CLAUDE_CODE_OAUTH_TOKEN" not in env0 | env1


def test_a_cli_that_cannot_be_run_is_said_so_by_login_and_status(tmp_path: Path) -> None:
    """`scvctl agents login` ended in a Python traceback (OSError: Exec format error)."""
    home = tmp_path / "scv"
    env = daemonless_env(home, tmp_path)
    claude = tmp_path / "bin" / "claude"
    claude.unlink()
    claude.symlink_to(FAKE_AGENT.parent / "not-a-program")
    out = scvctl_alone(env, "agents", "login", "claude")
    assert out.returncode == 1
    assert "Traceback" not in out.stderr
    assert out.stderr.splitlines()[-1] == (
        f"failed: cannot run {claude} (Exec format error); nothing ran: reinstall it "
        "(npm install -g @anthropic-ai/claude-code) or fix the program it names in its first line")
    status = scvctl_alone(env, "agents", "status")
    assert f"claude  cannot run {claude}: Exec format error" in status.stdout.splitlines()
    row = scvctl_alone(env, "agents", "status", "claude", "--json")  # it exited 0: 1 as without --json
    assert (row.returncode, json.loads(row.stdout)) == (
        1, {"agent": "claude", "state": f"cannot run {claude}: Exec format error"})


def test_an_executable_fifo_in_the_clis_place_is_said_so_by_login_and_status(tmp_path: Path) -> None:
    """scvctl read the #! line of the CLI it could not run, and waited for good on the FIFO's open."""
    env = daemonless_env(tmp_path / "scv", tmp_path)
    pi = tmp_path / "bin" / "pi"
    fifo_in_place_of(pi)
    out = scvctl_alone(env, "agents", "login", "pi")
    assert (out.returncode, out.stderr.splitlines()[-1]) == (
        1, f"failed: cannot run {pi} (Permission denied); nothing ran: reinstall it "
           "(npm install -g @mariozechner/pi-coding-agent) or fix the program it names in its first line")
    assert f"pi      cannot run {pi}: Permission denied" in scvctl_alone(env, "agents", "status").stdout.splitlines()


def test_a_cli_whose_node_is_missing_is_said_so_by_status_and_login(tmp_path: Path) -> None:
    """With node missing from scvd's PATH, `agents status` said `unknown (exit 127)`, and `agents
    status pi` / `agents login pi` printed only env's `No such file or directory`: nothing said what to fix."""
    home = tmp_path / "scv"
    env = daemonless_env(home, tmp_path)
    pi = tmp_path / "bin" / "pi"
    pi.unlink()
    pi.symlink_to(FAKE_AGENT.parent / "needs-a-missing-node")
    hint = ("pi needs scvd-test-node-nowhere, which is not on scvd's PATH: add the absolute path of the folder of "
            "`command -v scvd-test-node-nowhere` to scvd's PATH (under systemd: systemctl --user edit scvd: "
            "Environment=PATH=...; else in the shell that runs scvd run), then restart scvd")
    out = scvctl_alone(env, "agents", "status")
    assert out.stdout.splitlines()[2] == f"pi      {hint}", out.stdout
    for action in ("status", "login"):
        out = scvctl_alone(env, "agents", action, "pi")
        assert out.returncode == 127
        assert "No such file or directory" in out.stderr  # env's own line, from the terminal's stderr
        assert out.stderr.splitlines()[-1] == f"pi: {hint}", out.stderr


def test_status_lists_every_agent_when_one_home_is_refused(tmp_path: Path) -> None:
    """One home scvd refuses (a link, a path it cannot make private) ended `agents status` with that
    one error: the other agents' lines were never printed."""
    home = tmp_path / "scv"
    env = daemonless_env(home, tmp_path)
    (home / "adapters").mkdir(mode=0o700)
    (tmp_path / "elsewhere").mkdir()
    (home / "adapters" / "claude").symlink_to(tmp_path / "elsewhere")
    out = scvctl_alone(env, "agents", "status")
    assert out.stdout.splitlines() == [
        f"claude  the claude home {home / 'adapters' / 'claude'} must be a directory owned by scvd, not a link "
        "or a file; move it away and retry",
        "codex   not signed in", "pi      not signed in"], out.stderr


def test_status_and_import_without_the_daemon(tmp_path: Path) -> None:
    home = tmp_path / "scv"
    env = daemonless_env(home, tmp_path)
    out = scvctl_alone(env, "agents", "status")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["claude  not signed in", "codex   not signed in", "pi      not signed in"]
    assert out.stderr.strip() == NOT_RUNNING.format(adapters=home / "adapters")
    listed = json.loads(scvctl_alone(env, "agents", "status", "--json").stdout)
    assert [row["state"] for row in listed] == ["not signed in"] * 3

    src = tmp_path / "user-codex"
    src.mkdir()
    (src / "auth.json").write_text(json.dumps({"OPENAI_API_KEY": API_KEY}))
    out = scvctl_alone(env, "agents", "import", "codex", "--from", str(src))
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(f"imported auth.json from {src} into scvd's codex")
    assert json.loads((home / "adapters" / "codex" / "auth.json").read_text()) == {"OPENAI_API_KEY": API_KEY}
    assert API_KEY not in out.stdout + out.stderr


def test_a_status_command_past_its_timeout_is_killed_with_its_children(tmp_path: Path, monkeypatch, capsys) -> None:
    """npm's launchers run the real CLI as a child: on the timeout only the launcher was killed,
    and the CLI went on in the background, holding the private home."""
    from scvctl import agents, cli

    home, bin_dir, pids = tmp_path / "scv", tmp_path / "hang-bin", tmp_path / "pids"
    home.mkdir(mode=0o700)
    bin_dir.mkdir()
    hang = bin_dir / "codex"
    hang.write_text(f"#!/bin/bash\nsleep 60 &\necho $! > {pids}\nwait\n")  # a launcher and its child
    hang.chmod(0o755)
    for key, value in base_env(home, PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', os.defpath)}").items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(agents, "STATUS_TIMEOUT", 1.0)
    assert cli.main(["agents", "status"]) == 0  # one line per agent (one agent alone runs attached)
    assert "unknown (its status command ran past 1 s)" in capsys.readouterr().out
    wait_dead(int(pids.read_text()))


def test_ctrl_c_during_status_kills_the_status_command_too(tmp_path: Path) -> None:
    """The status command runs in a session of its own, so the terminal's SIGINT reaches scvctl alone:
    scvctl exited 130 and left the command (and the CLI under npm's launcher) running."""
    env = {**daemonless_env(tmp_path / "scv", tmp_path), "FAKE_AGENT_MODE": "hang"}
    proc = subprocess.Popen([sys.executable, "-m", "scvctl", "agents", "status"], env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    pid_file = tmp_path / "agent-log" / "pid"
    deadline = time.monotonic() + 30
    while not pid_file.exists() or not pid_file.read_text().endswith("\n"):  # claude's status hangs
        assert time.monotonic() < deadline and proc.poll() is None, "the status command never started"
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)  # Ctrl-C: the terminal signals scvctl's process group, not the command's
    assert proc.wait(timeout=30) == 130
    wait_dead(int(pid_file.read_text()))


def test_a_helper_holding_the_status_output_does_not_hold_the_listing(tmp_path: Path) -> None:
    """A status command that left a helper in a session of its own, its stdout still open, kept
    `scvctl agents status` waiting for good: past the timeout the command's group was killed, but
    the helper, outside that group, kept the pipe open and scvctl read on."""
    env = {**daemonless_env(tmp_path / "scv", tmp_path), "FAKE_AGENT_MODE": "detach"}
    pids = tmp_path / "agent-log" / "pids"
    try:
        out = scvctl_alone(env, "agents", "status")  # the old code never returned (a TimeoutExpired here)
    finally:
        for pid in pids.read_text().split() if pids.exists() else []:
            kill_if_running(int(pid), "sleep")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["claude  not signed in", "codex   not signed in", "pi      not signed in"]


def kill_if_running(pid: int, program: str) -> None:
    """SIGKILL `pid` when it still runs `program` (not a pid reused since)."""
    try:
        if Path(f"/proc/{pid}/comm").read_text().strip() == program:
            os.kill(pid, signal.SIGKILL)
    except (FileNotFoundError, ProcessLookupError):
        pass


def wait_dead(pid: int) -> None:
    """Wait until `pid` has exited (killed at once; init reaps the orphan in its own time)."""
    stat_file = Path(f"/proc/{pid}/stat")
    deadline = time.monotonic() + 10
    while stat_file.exists() and stat_file.read_text().rpartition(")")[2].split()[0] != "Z":
        assert time.monotonic() < deadline, f"the status command's child {pid} is still running"
        time.sleep(0.05)


def test_errors_without_the_daemon_read_as_with_it(tmp_path: Path) -> None:
    home = tmp_path / "scv"
    env = daemonless_env(home, tmp_path)
    out = scvctl_alone({**env, "PATH": str(tmp_path / "nothing")}, "agents", "login", "claude")
    assert out.returncode == 1
    assert "claude: claude is not installed: npm install -g @anthropic-ai/claude-code" in out.stderr
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.toml").write_text("model = \n")
    out = scvctl_alone(env, "agents", "import", "codex", "--from", str(broken))
    assert out.returncode == 1 and "invalid_request: " in out.stderr and "not valid TOML" in out.stderr
    home.mkdir(exist_ok=True)
    (home / "config.toml").write_text('[approvals]\npolicy = "sometimes"\n')
    out = scvctl_alone(env, "agents", "status")
    assert out.returncode == 1 and out.stderr.startswith("config: ") and "approvals.policy" in out.stderr


def test_scvctl_alone_under_umask_000_makes_the_missing_parents_of_scv_home_0700(tmp_path: Path) -> None:
    """`scvctl agents status` with no daemon made each missing folder above SCV_HOME with the umask's mode:
    under umask 000 SCV_HOME=.../a/b/home left a and a/b 0777, where another user could swap the home."""
    env = daemonless_env(tmp_path / "scv", tmp_path)
    home = tmp_path / "a" / "b" / "home"
    out = subprocess.run([sys.executable, "-m", "scvctl", "agents", "status"], env={**env, "SCV_HOME": str(home)},
                         umask=0, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    made = [tmp_path / "a", tmp_path / "a" / "b", home, home / "adapters", home / "adapters" / "codex"]
    assert {str(d): oct(stat.S_IMODE(d.stat().st_mode)) for d in made} == {str(d): "0o700" for d in made}


def test_an_import_waiting_for_the_codex_home_holds_neither_claude_nor_pi(tmp_path: Path) -> None:
    """Every home settled codex's imports under their intent lock, a flock on the shared adapters/ folder
    that a waiting import holds: a stopped `scvctl agents import codex` failed claude's sign-in and
    runs after 10 s with `... has held scvd's codex home .../adapters/claude`. Only codex has imports."""
    home = tmp_path / "scv"
    env = daemonless_env(home, tmp_path)
    codex_home = home / "adapters" / "codex"
    codex_home.mkdir(mode=0o700, parents=True)
    src = tmp_path / "user-codex"
    src.mkdir()
    (src / "auth.json").write_text(json.dumps({"OPENAI_API_KEY": API_KEY}))
    under_way = os.open(codex_home, os.O_RDONLY | os.O_DIRECTORY)
    fcntl.flock(under_way, fcntl.LOCK_EX)  # an import under way
    waiting = subprocess.Popen([sys.executable, "-m", "scvctl", "agents", "import", "codex", "--from", str(src)],
                               env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    try:
        adapters = os.open(home / "adapters", os.O_RDONLY | os.O_DIRECTORY)
        try:  # until the second import waits, holding the intent lock; stopped, it holds it for good
            while not _held(adapters):
                assert waiting.poll() is None, "the waiting import ended"
                time.sleep(0.05)
        finally:
            os.close(adapters)
        waiting.send_signal(signal.SIGSTOP)
        for agent in ("claude", "pi"):
            out = scvctl_alone(env, "agents", "status", agent)
            assert "held" not in out.stderr and "Traceback" not in out.stderr, out.stderr
            assert read_log(tmp_path / "agent-log")[2] == str(home / "adapters" / agent)  # it ran, in its home
    finally:
        waiting.kill()
        waiting.wait()
        os.close(under_way)


def _held(directory_fd: int) -> bool:
    """Whether another process holds an exclusive flock on the directory open as `directory_fd`."""
    try:
        fcntl.flock(directory_fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    fcntl.flock(directory_fd, fcntl.LOCK_UN)
    return False
