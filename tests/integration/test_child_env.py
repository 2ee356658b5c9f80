"""Delegated agents and script tools get an allow-list of scvd's environment, through the real daemon.

The daemon's environment holds what a developer's shell usually holds: cloud
keys, git tokens, a database URL, the ssh agent, provider keys. A fake agent and
a script tool, both dumping the environment they were given, see none of it,
but do see a name that config.toml's `pass_env` lists; the approval request
names it and never carries its value. `bash` keeps the inherited environment
(seed 000).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

from adapters_support import make_fake_bin, read_log
from conftest import DaemonProc, base_env, reloaded, wait_pending
from scvd import protocol as p

pytestmark = pytest.mark.one_loop

CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "AKIAPLANTED000000000",
    "AWS_SECRET_ACCESS_KEY": "planted-aws-secret-key",
    "AWS_SESSION_TOKEN": "planted-aws-session-token",
    "GH_TOKEN": "ghp_planted0000",
    "GITHUB_TOKEN": "ghs_planted0000",
    "DATABASE_URL": "postgres://app:planted-db-password@db.internal/app",
    "SSH_AUTH_SOCK": "/tmp/ssh-planted/agent.4242",
    "OPENAI_API_KEY": "sk-planted-openai",
    "ANTHROPIC_API_KEY": "sk-ant-planted",
    "CLAUDE_CODE_OAUTH_TOKEN": "planted-claude-oauth",
    "LC_DEPLOY_TOKEN": "planted-lc-token",  # a locale-like name is not a locale
}
PASSED = {"AWS_PROFILE": "work-profile-7c1f"}  # named in pass_env: passed on purpose


def assert_clean(env: dict[str, str]) -> None:
    assert not set(CREDENTIALS) & set(env), sorted(set(CREDENTIALS) & set(env))
    assert not [k for k, v in env.items() if any(secret in v for secret in CREDENTIALS.values())]


def shows_no_value(frame: msgspec.Struct) -> bool:
    """True when no passed or planted value appears anywhere in a frame, keys and details included."""
    data = msgspec.json.encode(frame).decode()
    return not any(v in data for v in (*CREDENTIALS.values(), *PASSED.values()))


def approve(person, call_id: str) -> p.ApprovalInfo:
    pending = [a for a in wait_pending(person) if a.call_id == call_id][0]
    person.request(p.ApprovalDecide, approval_id=pending.approval_id, decision="approve")
    return pending


def test_an_agent_sees_no_planted_credential_but_its_pass_env_name(make_daemon, tmp_path: Path,
                                                                   workspace: Path) -> None:
    fake_bin = make_fake_bin(tmp_path / "bin")
    log = tmp_path / "agent-log"
    d: DaemonProc = make_daemon(
        '[adapters.claude]\npass_env = ["FAKE_AGENT_LOG", "AWS_PROFILE", "NOT_IN_SCVDS_ENV"]\n',
        env={"PATH": f"{fake_bin}{os.pathsep}{os.environ['PATH']}", "FAKE_AGENT_LOG": str(log),
             "https_proxy": "http://127.0.0.1:3128", "LC_ALL": "C.UTF-8", **CREDENTIALS, **PASSED})
    with d.client(name="bridge") as agent, d.client(name="person") as person:
        call_id = agent.start_call(agent.open_session(workspace), "agent_claude", {"prompt": "go"})
        pending = approve(person, call_id)
        done = agent.wait_call(call_id)
    assert done.ok and done.result["exit_code"] == 0, done
    # the approver saw which names pass (those set in scvd's environment), never a value
    assert pending.details["pass_env"] == ["FAKE_AGENT_LOG", "AWS_PROFILE"]
    assert shows_no_value(pending)
    _, env, _ = read_log(log)
    assert_clean(env)
    assert env["AWS_PROFILE"] == PASSED["AWS_PROFILE"] and "NOT_IN_SCVDS_ENV" not in env
    assert env["https_proxy"] == "http://127.0.0.1:3128" and env["LC_ALL"] == "C.UTF-8"  # the allow-list
    assert env["HOME"] == str(d.home / "adapters" / "claude")


def test_an_agent_without_pass_env_gets_the_allow_list_only(make_daemon, tmp_path: Path,
                                                            workspace: Path) -> None:
    """Without pass_env even the fake agent's own log variable stays behind: it records nothing."""
    fake_bin = make_fake_bin(tmp_path / "bin")
    log = tmp_path / "agent-log"
    d = make_daemon(env={"PATH": f"{fake_bin}{os.pathsep}{os.environ['PATH']}", "FAKE_AGENT_LOG": str(log),
                         **CREDENTIALS})
    with d.client(name="bridge") as agent, d.client(name="person") as person:
        call_id = agent.start_call(agent.open_session(workspace), "agent_pi", {"prompt": "go"})
        pending = approve(person, call_id)
        done = agent.wait_call(call_id)
    assert done.ok and "fake agent done" in done.result["output"]
    assert pending.details["pass_env"] == []
    assert not log.exists()


# prints its whole environment as the JSON result
DUMPS_ENV = """#!/bin/bash
cat >/dev/null
exec python3 -c 'import json, os; print(json.dumps(dict(os.environ)))'
"""


def make_tool(home: Path, name: str, **spec: object) -> Path:
    folder = home / "tools" / "script" / name
    folder.mkdir(parents=True)
    (folder / "tool.json").write_text(json.dumps({
        "description": "Print the environment this script tool was started with.\n"
                       "Use for checking what a script tool sees; bash for anything else.", **spec}))
    (folder / "run").write_text(DUMPS_ENV)
    (folder / "run").chmod(0o700)
    return folder


def test_a_script_tool_sees_no_planted_credential_but_its_pass_env_name_and_secret(
        make_daemon, scv_home: Path, workspace: Path) -> None:
    make_tool(scv_home, "envdump", secrets=["API_TOKEN"])
    make_tool(scv_home, "plain")
    d = make_daemon('[tools.script.envdump]\npass_env = ["AWS_PROFILE"]\n', home=scv_home, env={
        **CREDENTIALS, **PASSED, "API_TOKEN": "tok-declared-secret",
        "PYTHON_KEYRING_BACKEND": "keyring.backends.null.Keyring"})
    with d.client(name="bridge") as c, d.client(name="person") as person:
        sid = c.open_session(workspace)
        call_id = c.start_call(sid, "script_envdump", {})
        pending = approve(person, call_id)
        done = c.wait_call(call_id)
        other = c.start_call(sid, "script_plain", {})
        other_pending = approve(person, other)
        plain = c.wait_call(other)
    assert done.ok and plain.ok, (done, plain)
    assert pending.details["pass_env"] == ["AWS_PROFILE"] and pending.details["secrets"] == ["API_TOKEN"]
    assert shows_no_value(pending)
    env = done.result
    assert_clean(env)
    assert env["AWS_PROFILE"] == PASSED["AWS_PROFILE"]
    assert env["API_TOKEN"] == "[secret API_TOKEN]"  # its declared secret reached it (redacted in the result)
    assert env["HOME"] == d.env["HOME"]  # a script has no private home: it keeps the user's
    # pass_env is per tool: the other script gets neither the name nor the secret
    assert other_pending.details["pass_env"] == []
    assert_clean(plain.result)
    assert "AWS_PROFILE" not in plain.result and "API_TOKEN" not in plain.result


ECHOES_PASSED = """#!/bin/bash
cat >/dev/null
echo "token=$GH_TOKEN profile=$AWS_PROFILE" >&2
echo "token=$GH_TOKEN hook=$DEPLOY_HOOK profile=$AWS_PROFILE kube=$KUBECONFIG"
echo "proxy=$HTTPS_PROXY db=$DATABASE_URL"
exit "$EXIT"
"""


@pytest.mark.parametrize("code", [0, 1])
def test_a_passed_credential_never_comes_back_in_the_output(make_daemon, scv_home: Path, workspace: Path,
                                                            code: int) -> None:
    """A GH_TOKEN granted through pass_env was echoed back to the model as is; a profile name and a
    path, which the rule leaves alone, still read as printed."""
    folder = make_tool(scv_home, "echoes", risk="read_only")
    (folder / "run").write_text(ECHOES_PASSED)
    passed = {"GH_TOKEN": "ghp_planted0000", "DEPLOY_HOOK": "https://hooks.example.com/T0/Zk3jH8sQ2mP9vX4cB7nW",
              **PASSED, "KUBECONFIG": "/home/me/.kube/config", "EXIT": str(code)}
    # a URL's password under a name that says nothing: passed, or a proxy's, which every child gets
    passed["DATABASE_URL"] = "postgres://app:planted-db-password@db.internal/app"
    d = make_daemon(f'[tools.script.echoes]\npass_env = {json.dumps(list(passed))}\n', home=scv_home,
                    env={**passed, "HTTPS_PROXY": "http://user:s3cretpass@proxy.internal:3128"})
    with d.client() as c:
        done = c.call(c.open_session(workspace), "script_echoes", {})
    text = done.result if code == 0 else done.error.message
    assert ("token=[secret GH_TOKEN] hook=[secret DEPLOY_HOOK] profile=work-profile-7c1f "
            "kube=/home/me/.kube/config") in text
    assert ("proxy=http://user:[secret HTTPS_PROXY password]@proxy.internal:3128 "
            "db=postgres://app:[secret DATABASE_URL password]@db.internal/app") in text
    assert code == 0 or "stderr: token=[secret GH_TOKEN] profile=work-profile-7c1f" in text
    assert "ghp_" not in text and "Zk3j" not in text and "s3cret" not in text and "planted" not in text


def test_a_pass_env_table_for_no_script_tool_is_a_listed_load_error(make_daemon, scv_home: Path) -> None:
    make_tool(scv_home, "envdump")
    d = make_daemon('[tools.script.evndump]\npass_env = ["AWS_PROFILE"]\n', home=scv_home)
    with d.client() as c:
        errors = c.request(p.ToolsList).errors
    assert [(e.name, e.message) for e in errors] == [(
        "script_evndump", f"tools.script.evndump: no script tool folder evndump in "
                          f"{scv_home / 'tools' / 'script'}, so its pass_env goes to nothing; fix the name")]


@pytest.mark.parametrize("name", ["GH_TOKEN", "SSH_AUTH_SOCK"])
def test_bash_keeps_the_inherited_environment(make_daemon, workspace: Path, name: str) -> None:
    """Seed 000: bash is the user's shell, unsandboxed unless the sandbox is on; only an approval stands."""
    d = make_daemon(env=CREDENTIALS)
    with d.client(name="bridge") as c, d.client(name="person") as person:
        call_id = c.start_call(c.open_session(workspace), "bash", {"command": f"printenv {name}"})
        approve(person, call_id)
        done = c.wait_call(call_id)
    assert done.ok and done.result["output"].strip() == CREDENTIALS[name]


def test_bash_does_not_get_the_chat_providers_key(make_daemon, workspace: Path) -> None:
    """The provider's key goes to its base_url only (docs/security.md), though bash inherits the rest:
    unasked under sandbox-aware, `env` printed it back to the agent. A secret's name counts too: a
    store that lacks it takes the variable of that name."""
    config = ('[providers.local]\nmodel = "m"\nbase_url = "http://127.0.0.1:9"\napi_key_env = "OPENAI_API_KEY"\n'
              '[providers.other]\nmodel = "m"\napi_key_secret = "ANTHROPIC_API_KEY"\n')
    d = make_daemon(config, env=CREDENTIALS)
    with d.client(name="bridge") as c, d.client(name="person") as person:
        call_id = c.start_call(c.open_session(workspace), "bash", {"command": "env; echo END"})
        approve(person, call_id)
        done = c.wait_call(call_id)
    assert done.ok and done.result["output"].endswith("END\n"), done
    output = done.result["output"]
    assert "sk-planted-openai" not in output and "sk-ant-planted" not in output
    assert CREDENTIALS["GH_TOKEN"] in output  # the rest stays (seed 000)


def test_bash_does_not_get_a_secret_a_tool_takes_from_scvds_environment(make_daemon, scv_home: Path,
                                                                       workspace: Path) -> None:
    """A store that lacks a declared secret takes scvd's variable of that name: the script gets it,
    hidden in its output, and bash printed it whole. An MCP server's secret is such a key too."""
    make_tool(scv_home, "envdump", secrets=["API_TOKEN"])
    config = '[mcp.servers.notes]\nenabled = false\nurl = "http://127.0.0.1:9/mcp"\n' \
             'headers = {Authorization = {secret = "NOTES_TOKEN"}}\n'
    d = make_daemon(config, home=scv_home, env={
        **CREDENTIALS, "API_TOKEN": "tok-declared-secret", "NOTES_TOKEN": "tok-notes-secret",
        "PYTHON_KEYRING_BACKEND": "keyring.backends.null.Keyring"})
    with d.client(name="bridge") as c, d.client(name="person") as person:
        sid = c.open_session(workspace)
        call_id = c.start_call(sid, "bash", {"command": "env; echo END"})
        approve(person, call_id)
        shell = c.wait_call(call_id)
        call_id = c.start_call(sid, "script_envdump", {})
        approve(person, call_id)
        script = c.wait_call(call_id)
    assert shell.ok and shell.result["output"].endswith("END\n"), shell
    output = shell.result["output"]
    assert "API_TOKEN=" not in output and "tok-declared-secret" not in output
    assert "NOTES_TOKEN=" not in output and "tok-notes-secret" not in output
    assert CREDENTIALS["GH_TOKEN"] in output  # the rest stays (seed 000)
    assert script.ok and script.result["API_TOKEN"] == "[secret API_TOKEN]"  # still its to use


# an imported Codex setup whose provider takes its key and a header's token from scvd's environment
RELAY_SETUP = ('model = "m"\nmodel_provider = "relay"\n[model_providers.relay]\nbase_url = "http://127.0.0.1:9/v1"\n'
               'env_key = "RELAY_KEY"\nenv_http_headers = { "X-Relay-Token" = "TOKENX" }\n')
RELAY_VALUES = {"RELAY_KEY": "sk-relay-planted0987654321", "TOKENX": "tok-relay-header-ABCDEF123456"}


def import_codex(d: DaemonProc, tmp_path: Path) -> None:
    """`scvctl agents import codex` of RELAY_SETUP, through the daemon."""
    src = tmp_path / "user-codex"
    src.mkdir()
    (src / "config.toml").write_text(RELAY_SETUP)
    done = subprocess.run([sys.executable, "-m", "scvctl", "agents", "import", "codex", "--from", str(src)],
                          env=base_env(d.home), stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr


def test_the_imported_codex_setups_key_variables_reach_the_codex_agent_only(
        make_daemon, tmp_path: Path, workspace: Path) -> None:
    """Chat's provider `codex` sends the variables the imported setup names (env_key, env_http_headers)
    to its base_url only, as a [providers] key: bash printed both back to the model (unasked under
    sandbox-aware), and another agent listing them in pass_env got them. The codex agent, whose setup
    it is, still gets what its pass_env lists. The import counts at once, in a session opened before it too."""
    fake_bin = make_fake_bin(tmp_path / "bin")
    log = tmp_path / "agent-log"
    passing = '["FAKE_AGENT_LOG", "RELAY_KEY", "TOKENX"]'
    d = make_daemon(f'[adapters.claude]\npass_env = {passing}\n[adapters.codex]\npass_env = {passing}\n',
                    env={"PATH": f"{fake_bin}{os.pathsep}{os.environ['PATH']}", "FAKE_AGENT_LOG": str(log),
                         **CREDENTIALS, **RELAY_VALUES})
    with d.client(name="bridge") as c, d.client(name="person") as person:
        sid = c.open_session(workspace)
        shells = []
        for step in ("before", "after"):  # before the import nothing names them: bash keeps them (seed 000)
            if step == "after":
                import_codex(d, tmp_path)
            call_id = c.start_call(sid, "bash", {"command": "env; echo END"})
            approve(person, call_id)
            shells.append(c.wait_call(call_id))
        agents = {}
        for agent in ("claude", "codex"):
            call_id = c.start_call(sid, f"agent_{agent}", {"prompt": "go"})
            pending = approve(person, call_id)
            assert c.wait_call(call_id).ok
            agents[agent] = pending.details["pass_env"], read_log(log)[1]
        # a sign-in gets what the agent's run gets (passed_names): codex its setup's, claude none
        specs = {agent: c.request(p.AgentsSpec, agent=agent, action="status", extra_args=[]).spec.env
                 for agent in ("claude", "codex")}
    assert not set(RELAY_VALUES) & set(specs["claude"])
    assert {k: specs["codex"][k] for k in RELAY_VALUES} == RELAY_VALUES
    before, after = (shell.result["output"] for shell in shells)
    assert after.endswith("END\n") and "RELAY_KEY=" not in after, after
    assert not [v for v in RELAY_VALUES.values() if v in after] and CREDENTIALS["GH_TOKEN"] in after
    assert all(v in before for v in RELAY_VALUES.values())
    (claude_passed, claude_env), (codex_passed, codex_env) = agents["claude"], agents["codex"]
    assert claude_passed == ["FAKE_AGENT_LOG"] and not set(RELAY_VALUES) & set(claude_env)
    assert codex_passed == ["FAKE_AGENT_LOG", "RELAY_KEY", "TOKENX"]  # its own provider's: codex needs them
    assert {k: codex_env[k] for k in RELAY_VALUES} == RELAY_VALUES


@pytest.mark.parametrize("broken", ['model_provider = "relay"\n[model_providers.relay\n', 'model = "\xff"\n'],
                         ids=["not-toml", "not-utf8"])
def test_a_broken_codex_home_config_keeps_bash_running_and_its_keys_withheld(
        make_daemon, tmp_path: Path, workspace: Path, broken: str) -> None:
    """A codex run may write its home's config.toml: one that could not be read failed every bash call,
    script tool and other agent as `failed unexpectedly: UnreadableFile` (`internal` for agents.spec).
    The names read last stay withheld, so breaking the file hands bash no key."""
    fake_bin = make_fake_bin(tmp_path / "bin")
    d = make_daemon('[adapters.claude]\npass_env = ["RELAY_KEY", "TOKENX"]\n',
                    env={"PATH": f"{fake_bin}{os.pathsep}{os.environ['PATH']}", **CREDENTIALS, **RELAY_VALUES})
    import_codex(d, tmp_path)
    config = d.home / "adapters" / "codex" / "config.toml"
    with d.client(name="bridge") as c, d.client(name="person") as person:
        sid = c.open_session(workspace)
        call_id = c.start_call(sid, "bash", {"command": "echo before"})  # the setup's names read once
        approve(person, call_id)
        assert c.wait_call(call_id).ok
        config.write_bytes(broken.encode("latin-1"))
        call_id = c.start_call(sid, "bash", {"command": "env; echo END"})
        approve(person, call_id)
        done = c.wait_call(call_id)
        spec = c.request(p.AgentsSpec, agent="claude", action="status", extra_args=[]).spec
    assert done.ok, done.error
    output = done.result["output"]
    assert output.endswith("END\n") and not [v for v in RELAY_VALUES.values() if v in output], output
    assert not set(RELAY_VALUES) & set(spec.env)


def test_a_script_tool_may_not_declare_a_variable_the_imported_codex_setup_sends(
        make_daemon, scv_home: Path, tmp_path: Path, workspace: Path) -> None:
    """A store that lacks a declared secret takes scvd's variable of that name: the relay's token
    reached the script, as a [providers] key would not."""
    make_tool(scv_home, "keyed", secrets=["TOKENX"], risk="read_only")  # runs unasked if not refused
    d = make_daemon(home=scv_home, env={**RELAY_VALUES, "PYTHON_KEYRING_BACKEND": "keyring.backends.null.Keyring"})
    import_codex(d, tmp_path)
    with d.client() as c:
        keyed = c.call(c.open_session(workspace), "script_keyed", {})
    assert not keyed.ok and keyed.error.message.startswith(
        "script_keyed: its secret TOKENX is a chat provider's API key (the imported Codex setup's "
        "model_providers.relay.env_http_headers.X-Relay-Token)")


def test_no_open_sessions_bash_gets_a_secret_another_ones_tools_take(make_daemon, scv_home: Path,
                                                                     workspace: Path) -> None:
    """A session keeps the config and tools it opened with, but every bash inherits scvd's one
    environment: a secret a reload's tools take stays out of the bash of a session opened before it
    (a chat session stays open for long), and one the reload dropped, which the old session's
    tools still take, out of a new session's."""
    server = '[mcp.servers.{0}]\nenabled = false\nurl = "http://127.0.0.1:9/mcp"\n' \
             'headers = {{Authorization = {{secret = "{1}"}}}}\n'
    d = make_daemon(server.format("gone", "GONE_TOKEN"), home=scv_home, env={
        **CREDENTIALS, "API_TOKEN": "tok-declared-secret", "NOTES_TOKEN": "tok-notes-secret",
        "GONE_TOKEN": "tok-gone-secret", "PYTHON_KEYRING_BACKEND": "keyring.backends.null.Keyring"})
    with d.client(name="bridge") as c, d.client(name="person") as person:
        old = c.open_session(workspace)
        make_tool(scv_home, "envdump", secrets=["API_TOKEN"])
        reloaded(d, server.format("notes", "NOTES_TOKEN"))
        new = c.open_session(workspace)
        shells = {}
        for name, sid in (("old", old), ("new", new)):
            call_id = c.start_call(sid, "bash", {"command": "env; echo END"})
            approve(person, call_id)
            shells[name] = c.wait_call(call_id)
    for name, shell in shells.items():
        assert shell.ok and shell.result["output"].endswith("END\n"), (name, shell)
        output = shell.result["output"]
        for key in ("API_TOKEN", "NOTES_TOKEN", "GONE_TOKEN"):
            assert f"{key}=" not in output, (name, key)
        assert not [v for v in ("tok-declared-secret", "tok-notes-secret", "tok-gone-secret") if v in output], name
        assert CREDENTIALS["GH_TOKEN"] in output  # the rest stays (seed 000)


def test_a_session_opened_before_a_reload_passes_no_name_the_reload_made_a_providers_key(
        make_daemon, scv_home: Path, tmp_path: Path, workspace: Path) -> None:
    """An agent and a script tool keep the pass_env of the configuration their session opened with:
    a name a reload made a chat provider's key still reached them, and a script tool declaring a secret
    the reload made a provider's key still got it, though the provider's key goes to its base_url only."""
    fake_bin = make_fake_bin(tmp_path / "bin")
    log = tmp_path / "agent-log"
    make_tool(scv_home, "envdump")
    make_tool(scv_home, "keyed", secrets=["SHARED_KEY"], risk="read_only")  # runs unasked if not refused
    before = ('[adapters.claude]\npass_env = ["FAKE_AGENT_LOG", "AWS_PROFILE", "X_KEY"]\n'
              '[tools.script.envdump]\npass_env = ["AWS_PROFILE", "X_KEY"]\n')
    d = make_daemon(before, home=scv_home, env={
        "PATH": f"{fake_bin}{os.pathsep}{os.environ['PATH']}", "FAKE_AGENT_LOG": str(log), **PASSED,
        "X_KEY": "planted-x-key", "SHARED_KEY": "planted-shared-key",
        "PYTHON_KEYRING_BACKEND": "keyring.backends.null.Keyring"})
    with d.client(name="bridge") as c, d.client(name="person") as person:
        old = c.open_session(workspace)
        reloaded(d, '[adapters.claude]\npass_env = ["FAKE_AGENT_LOG"]\n'
                    '[providers.p]\nmodel = "m"\napi_key_env = "X_KEY"\n'
                    '[providers.q]\nmodel = "m"\napi_key_secret = "SHARED_KEY"\n')
        runs = {}
        for tool in ("agent_claude", "script_envdump"):
            call_id = c.start_call(old, tool, {"prompt": "go"} if tool == "agent_claude" else {})
            runs[tool] = approve(person, call_id), c.wait_call(call_id)
        keyed = c.call(old, "script_keyed", {})
    (agent_pending, agent), (script_pending, script) = runs["agent_claude"], runs["script_envdump"]
    assert agent.ok and script.ok, (agent, script)
    _, env, _ = read_log(log)
    assert "X_KEY" not in env and "X_KEY" not in script.result
    assert not [v for v in (*env.values(), *script.result.values()) if "planted" in v]
    assert agent_pending.details["pass_env"] == ["FAKE_AGENT_LOG", "AWS_PROFILE"]  # what passes, no more
    assert script_pending.details["pass_env"] == ["AWS_PROFILE"]
    assert env["AWS_PROFILE"] == script.result["AWS_PROFILE"] == PASSED["AWS_PROFILE"]  # the rest still passes
    assert not keyed.ok and keyed.error.message == (
        "script_keyed: its secret SHARED_KEY is a chat provider's API key (providers.q.api_key_secret); scvd "
        "sends a provider's key to that provider only: store what the tool needs under another name "
        "(scvctl secrets set NAME) and declare that in its tool.json")


SIGN_IN_CONFIG = ('[adapters.codex]\npass_env = ["FAKE_AGENT_LOG", "GH_TOKEN", "AWS_PROFILE", "API_TOKEN"]\n'
                  '[mcp.servers.gh]\ncommand = "/bin/true"\nenabled = false\n'
                  'env = {GITHUB_TOKEN = {secret = "GH_TOKEN"}}\n')


def test_a_sign_in_gets_no_name_the_agents_run_is_not_given(make_daemon, scv_home: Path, tmp_path: Path,
                                                           workspace: Path) -> None:
    """GH_TOKEN in codex's pass_env and an MCP server's secret: agent_codex's run went without it, but
    `agents.spec` put its value in the spec's env for any local client (an approved bash that had it
    removed printed it so), and `scvctl agents login codex` ran codex with it. One rule for both now."""
    fake_bin = make_fake_bin(tmp_path / "bin")
    log = tmp_path / "agent-log"
    make_tool(scv_home, "envdump", secrets=["API_TOKEN"])
    d = make_daemon(SIGN_IN_CONFIG, home=scv_home, env={
        "PATH": f"{fake_bin}{os.pathsep}{os.environ['PATH']}", "FAKE_AGENT_LOG": str(log), **CREDENTIALS,
        **PASSED, "API_TOKEN": "tok-declared-secret", "PYTHON_KEYRING_BACKEND": "keyring.backends.null.Keyring"})
    with d.client(name="bridge") as c, d.client(name="person") as person:
        spec = c.request(p.AgentsSpec, agent="codex", action="status", extra_args=[]).spec
        call_id = c.start_call(c.open_session(workspace), "agent_codex", {"prompt": "go"})
        approve(person, call_id)
        assert c.wait_call(call_id).ok
    _, run_env, _ = read_log(log)
    login = subprocess.run([sys.executable, "-m", "scvctl", "agents", "login", "codex"], env=d.env,
                           stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30)
    assert login.returncode == 0, login.stderr
    _, sign_in_env, _ = read_log(log)
    for env in (spec.env, sign_in_env, run_env):
        assert_clean(env)
        assert "API_TOKEN" not in env and not [v for v in env.values() if "tok-declared" in v]
        assert env["AWS_PROFILE"] == PASSED["AWS_PROFILE"]  # what pass_env passes still goes
    assert spec.env == {k: v for k, v in sign_in_env.items() if k in spec.env}


def test_a_sign_in_without_the_daemon_gets_no_name_the_agents_run_is_not_given(scv_home: Path,
                                                                               tmp_path: Path) -> None:
    """With no daemon scvctl builds the spec itself, from this shell's environment: the same names stay
    behind, a script tool's declared secret among them, and the imported Codex setup's key variables
    from every agent but codex (claude's sign-in got them, where the daemon's answer withheld them)."""
    fake_bin = make_fake_bin(tmp_path / "bin")
    log = tmp_path / "agent-log"
    make_tool(scv_home, "envdump", secrets=["API_TOKEN"])
    relay = '"RELAY_KEY", "TOKENX"]'
    (scv_home / "config.toml").write_text(SIGN_IN_CONFIG.replace('"API_TOKEN"]', f'"API_TOKEN", {relay}')
                                          + f'[adapters.claude]\npass_env = ["FAKE_AGENT_LOG", {relay}\n')
    env = base_env(scv_home, PATH=f"{fake_bin}{os.pathsep}{os.environ['PATH']}", FAKE_AGENT_LOG=str(log),
                   **CREDENTIALS, **PASSED, **RELAY_VALUES, API_TOKEN="tok-declared-secret",
                   PYTHON_KEYRING_BACKEND="keyring.backends.null.Keyring")
    (tmp_path / "user-codex").mkdir()
    (tmp_path / "user-codex" / "config.toml").write_text(RELAY_SETUP)
    scvctl = [sys.executable, "-m", "scvctl", "agents"]
    done = subprocess.run([*scvctl, "import", "codex", "--from", str(tmp_path / "user-codex")], env=env,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    sign_in = {}
    for agent in ("codex", "claude"):
        login = subprocess.run([*scvctl, "login", agent], env=env, stdin=subprocess.DEVNULL, capture_output=True,
                               text=True, timeout=30)
        assert login.returncode == 0 and "scvd is not running" in login.stderr, login.stderr
        sign_in[agent] = read_log(log)[1]
    for sign_in_env in sign_in.values():
        assert_clean(sign_in_env)
        assert "API_TOKEN" not in sign_in_env
    assert sign_in["codex"]["AWS_PROFILE"] == PASSED["AWS_PROFILE"]
    assert {k: sign_in["codex"][k] for k in RELAY_VALUES} == RELAY_VALUES  # its own provider's: codex needs them
    assert not set(RELAY_VALUES) & set(sign_in["claude"])
