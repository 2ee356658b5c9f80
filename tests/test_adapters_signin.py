"""Launch specs for the agents' own sign-in commands, status verdicts and failure hints."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from adapters_support import fake_bin  # noqa: F401 - fixture
from scvd import paths as paths_mod
from scvd.adapters import service, spec
from scvd.adapters.signin import classify_status, failure_hint, missing_program_hint
from scvd.config import Config
from scvd.errors import InvalidRequest, Unavailable


@pytest.fixture
def paths(tmp_path: Path) -> paths_mod.Paths:
    return paths_mod.resolve({"SCV_HOME": str(tmp_path / "scv")})


def env_with(fake_bin: Path, **extra: str) -> dict[str, str]:
    return {"PATH": f"{fake_bin}:/usr/bin:/bin", "LANG": "C.UTF-8", **extra}


@pytest.mark.parametrize("agent,action,args", [
    ("claude", "login", ["auth", "login"]), ("claude", "status", ["auth", "status"]),
    ("claude", "logout", ["auth", "logout"]), ("codex", "login", ["login"]),
    ("codex", "status", ["login", "status"]), ("codex", "logout", ["logout"]),
    ("pi", "login", []), ("pi", "status", ["--offline", "--list-models"]), ("pi", "logout", []),
])
def test_launch_spec_runs_the_agents_own_command(paths, fake_bin, agent, action, args) -> None:
    env = env_with(fake_bin, OPENAI_API_KEY="sk-planted", CLAUDE_CODE_OAUTH_TOKEN="planted")
    launch = service.launch_spec(agent, action, [], config=Config(), paths=paths, env=env, withheld=())
    home = paths.adapters_dir / agent
    assert launch.argv == [str(fake_bin / agent), *args]
    assert launch.cwd == str(home)
    assert launch.env["HOME"] == str(home) and launch.env["LANG"] == "C.UTF-8"
    assert "OPENAI_API_KEY" not in launch.env and "CLAUDE_CODE_OAUTH_TOKEN" not in launch.env
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    if agent == "pi" and action != "status":
        assert "/login" in launch.note or "/logout" in launch.note


def test_extra_args_pass_through(paths, fake_bin) -> None:
    launch = service.launch_spec("codex", "login", ["--device-auth"], config=Config(), paths=paths,
                                 env=env_with(fake_bin), withheld=())
    assert launch.argv[1:] == ["login", "--device-auth"]
    assert launch.env["CODEX_HOME"] == str(paths.adapters_dir / "codex")


def test_same_env_as_the_tool(paths, fake_bin) -> None:
    """The launch spec and the agent_* tool build the env with the same function and home."""
    from scvd.adapters.env import build_env
    from scvd.adapters.homes import home_dir

    env = env_with(fake_bin, ANTHROPIC_API_KEY="x")
    launch = service.launch_spec("claude", "status", [], config=Config(), paths=paths, env=env, withheld=())
    assert launch.env == build_env(env, spec.CLAUDE, home_dir(paths, "claude"))


def test_unknown_agent_or_action(paths, fake_bin) -> None:
    with pytest.raises(InvalidRequest, match="known agents: claude, codex, pi"):
        service.launch_spec("gemini", "login", [], config=Config(), paths=paths, env=env_with(fake_bin), withheld=())
    with pytest.raises(InvalidRequest, match="no action"):
        service.launch_spec("claude", "reset", [], config=Config(), paths=paths, env=env_with(fake_bin), withheld=())


def test_missing_cli_is_unavailable(paths, tmp_path) -> None:
    with pytest.raises(Unavailable, match="npm install -g @openai/codex"):
        service.launch_spec("codex", "login", [], config=Config(), paths=paths,
                            env={"PATH": str(tmp_path)}, withheld=())


@pytest.mark.parametrize("agent,code,output,verdict", [
    ("claude", 1, '{\n  "loggedIn": false,\n  "authMethod": "none"\n}', "not signed in"),
    ("claude", 0, '{"loggedIn": true, "authMethod": "claude.ai"}', "signed in"),
    ("codex", 1, "Not logged in\n", "not signed in"),
    ("codex", 0, "API key configured - sk-test-***p1234\n", "signed in (API key)"),
    ("codex", 0, "Logged in using ChatGPT\n", "signed in (ChatGPT)"),
    ("pi", 0, "No models available. Use /login to log into a provider", "not signed in"),
    ("pi", 0, "provider   model   context\nanthropic  claude-x  200K\n", "signed in"),
])
def test_status_verdicts(agent, code, output, verdict) -> None:
    assert classify_status(spec.ADAPTERS[agent], code, output) == verdict


RELAY = '[model_providers.relay]\nbase_url = "http://127.0.0.1:9/v1"\n'


@pytest.mark.parametrize("config,verdict", [
    (f'model_provider = "relay"\n{RELAY}experimental_bearer_token = "sk-relay"\n',
     "needs no sign-in: config.toml's provider 'relay' uses its experimental_bearer_token"),
    (f'model_provider = "relay"\n{RELAY}env_key = "RELAY_KEY"\n',
     "needs no sign-in: config.toml's provider 'relay' uses the key in $RELAY_KEY "
     "(adapters.codex.pass_env must list it)"),
    (f'model_provider = "relay"\n{RELAY}', "needs no sign-in: config.toml's provider 'relay' uses no key"),
    (f'model_provider = "relay"\n{RELAY}requires_openai_auth = true\n', "not signed in"),
    (f'{RELAY}experimental_bearer_token = "sk-relay"\n', "not signed in"),  # not the provider in use
    ("model_provider = [", "not signed in"),
    (None, "not signed in"),
])
def test_an_imported_provider_with_its_own_key_needs_no_sign_in(tmp_path: Path, config, verdict) -> None:
    """`codex login status` says "Not logged in" beside a relay config.toml that carries its key: the
    setup operations.md recommends for import was reported `not signed in`, though it works."""
    if config is not None:
        (tmp_path / "config.toml").write_text(config)
    assert classify_status(spec.CODEX, 1, "Not logged in\n", home=tmp_path) == verdict


def test_unknown_status_never_echoes_output() -> None:
    verdict = classify_status(spec.CODEX, 2, "weird sk-secret-output")
    assert "sk-secret" not in verdict and "scvctl agents status codex" in verdict


@pytest.mark.parametrize("output", [
    "Not logged in · Please run /login",
    "No API key found for the selected model.\n\nUse /login to log into a provider",
    "ERROR: unexpected status 401 Unauthorized: Incorrect API key provided, url: http://x/v1",
    'API Error: 401 {"type":"error","error":{"type":"authentication_error"}}',
    # signed in once, the sign-in since expired: codex's and pi's own words
    "ERROR: Your access token could not be refreshed because your refresh token has expired. "
    "Please log out and sign in again.",
    "ERROR: Your access token could not be refreshed because your refresh token was already used. "
    "Please log out and sign in again.",
    'Authentication failed for "anthropic". Credentials may have expired or network is unavailable. '
    "Run '/login anthropic' to re-authenticate.",
])
def test_signin_hint_on_failure(output) -> None:
    for adapter in spec.ADAPTERS.values():
        hint = failure_hint(adapter, output, failed=True)
        assert hint and f"scvctl agents login {adapter.name}" in hint
        assert failure_hint(adapter, output, failed=False) is None


@pytest.mark.parametrize("said", [
    "/usr/bin/env: 'node': No such file or directory",  # env's quotes in the C locale
    "/usr/bin/env: \u2018node\u2019: No such file or directory",  # and in a UTF-8 one
    "/home/me/.local/share/pnpm/pi: 12: exec: node: not found",  # a pnpm shim run by dash
])
def test_node_missing_from_scvds_path_gets_its_own_hint(said: str) -> None:
    hint = failure_hint(spec.PI, f"{said}\n", failed=True)
    assert hint and hint.startswith("pi needs node, which is not on scvd's PATH: add the absolute path of the "
                                    "folder of `command -v node`")


def test_a_missing_program_the_agent_met_in_its_work_is_not_its_own() -> None:
    output = "Running the build...\n/bin/sh: 1: exec: make: not found\nThe build failed.\n"
    assert failure_hint(spec.CLAUDE, output, failed=True) is None


@pytest.mark.parametrize("output", ["error: 3 tests failed", "line 401: syntax error", "done"])
def test_no_hint_for_other_output(output) -> None:
    assert failure_hint(spec.CLAUDE, output, failed=True) is None


@pytest.mark.parametrize("systemd, advice", [
    (True, "add the absolute path of the folder of `command -v node` to scvd's PATH (systemctl --user edit scvd: "
           "Environment=PATH=...), then systemctl --user restart scvd"),
    (False, "scvd runs outside systemd, with the PATH of the shell that started it: stop it and start scvd run "
            "again from a shell whose PATH has the absolute path of the folder of `command -v node`"),
    (None, "add the absolute path of the folder of `command -v node` to scvd's PATH (under systemd: systemctl "
           "--user edit scvd: Environment=PATH=...; else in the shell that runs scvd run), then restart scvd"),
])
def test_a_missing_node_is_fixed_where_scvds_path_comes_from(systemd, advice):
    """The advice named `systemctl --user edit scvd` for an scvd started in a shell too (the README's
    `scvd run`), where only the shell's PATH counts."""
    assert missing_program_hint(spec.PI, "node", systemd) == f"pi needs node, which is not on scvd's PATH: {advice}"
