"""The configuration: defaults, sources, errors that name the file and the key, check-config, docs."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import tomllib
import typing
from pathlib import Path
from typing import Any

import msgspec
import pytest

from scvd import config
from scvd.config import Config, load
from scvd.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def cfg_file(tmp_path: Path):
    path = tmp_path / "config.toml"

    def write(text: str) -> Path:
        path.write_text(text)
        return path

    return write


def test_defaults_are_the_seeds(tmp_path):
    loaded = load(tmp_path / "missing.toml", env={})
    c = loaded.config
    assert (c.tools.command_timeout_seconds, c.tools.max_timeout_seconds) == (120, 1800)
    assert (c.tools.agent_timeout_seconds, c.tools.default_timeout_seconds) == (600, 900)
    assert c.tools.progress_interval_seconds == 30  # seed 003: `running name=...` logged every 30 s
    assert c.approvals.policy == "on-risk" and c.approvals.timeout_seconds == 900
    assert c.approvals.always_ask == [".git/**", ".gitmodules", ".envrc", ".vscode/**", ".github/workflows/**",
                                     ".gitlab-ci.yml"]
    assert c.sandbox.mode == "off" and c.log_level == "info"
    assert (c.server.client_frame_bytes, c.server.server_frame_bytes) == (1 << 20, 8 << 20)
    assert loaded.sources == {}
    assert {source for _, _, source in config.effective(loaded)} == {"default"}


def test_sources_default_file_env(cfg_file):
    path = cfg_file('log_level = "debug"\n[tools]\ncommand_timeout_seconds = 60\n'
                    'max_timeout_seconds = 600\n[adapters.codex]\nmodel_args = ["-m", "{model}"]\n')
    env = {"SCVD_TOOLS__MAX_TIMEOUT_SECONDS": "900", "SCVD_APPROVALS__POLICY": "always",
           "SCVD_SANDBOX__NETWORK": "true", "SCVD_UNRELATED": "x", "PATH": "/bin"}
    loaded = load(path, env=env)
    rows = {key: (value, source) for key, value, source in config.effective(loaded)}
    assert rows["log_level"] == ("debug", "file")
    assert rows["tools.command_timeout_seconds"] == (60, "file")
    assert rows["tools.max_timeout_seconds"] == (900, "env:SCVD_TOOLS__MAX_TIMEOUT_SECONDS")  # env wins
    assert rows["approvals.policy"] == ("always", "env:SCVD_APPROVALS__POLICY")
    assert rows["sandbox.network"] == (True, "env:SCVD_SANDBOX__NETWORK")  # read as TOML: a bool
    assert rows["sandbox.mode"] == ("off", "default")
    assert rows["adapters.codex.model_args"] == (["-m", "{model}"], "file")
    assert loaded.config.adapters["codex"].model_args == ["-m", "{model}"]


def test_a_session_cap_above_the_connections_still_loads(cfg_file):
    """A config that raised server.max_calls_per_session above 1024 before server.max_calls_per_connection
    came keeps starting scvd: the lower cap binds first."""
    loaded = load(cfg_file("[server]\nmax_calls_per_session = 2000\n"), env={})
    assert (loaded.config.server.max_calls_per_session, loaded.config.server.max_calls_per_connection) == (2000, 1024)


def test_an_inline_table_override_replaces_the_files_table_and_owns_its_keys(cfg_file):
    """check-config showed the file as the source of keys the variable had replaced (and `default`
    for the ones it set), so nobody could tell where a running value came from."""
    path = cfg_file('[adapters.codex]\nmodel_args = ["-m", "{model}"]\npass_env = ["HTTPS_PROXY"]\n')
    loaded = load(path, env={"SCVD_ADAPTERS__CODEX": '{effort_args = ["-e", "{effort}"], pass_env = ["NO_PROXY"]}'})
    codex = loaded.config.adapters["codex"]
    assert (codex.model_args, codex.effort_args, codex.pass_env) == (None, ["-e", "{effort}"], ["NO_PROXY"])
    rows = {key: (value, source) for key, value, source in config.effective(loaded)}
    assert rows["adapters.codex.effort_args"] == (["-e", "{effort}"], "env:SCVD_ADAPTERS__CODEX")
    assert rows["adapters.codex.pass_env"] == (["NO_PROXY"], "env:SCVD_ADAPTERS__CODEX")
    assert rows["adapters.codex.model_args"] == (None, "default")  # the file's table is replaced whole


def test_a_provider_left_unused_by_the_default_chat_provider_is_a_warning(cfg_file):
    """Adding [providers.local] alone left chat turns on codex (chat.provider's default), and the turn
    failed "no imported Codex setup" with a hint the user had just followed."""
    path = cfg_file('[providers.local]\nmodel = "m"\nbase_url = "http://127.0.0.1:1/v1"\n')
    assert load(path, env={}).warnings == [
        '[providers.local] is configured, but a chat turn that names no provider uses the imported Codex setup '
        '(chat.provider is codex unless set); to make it the default, set provider = "local" in [chat]']
    assert load(cfg_file('[providers.local]\nmodel = "m"\n[chat]\nprovider = "local"\n'), env={}).warnings == []
    assert load(cfg_file('[providers.local]\nmodel = "m"\n[chat]\nprovider = "codex"\n'), env={}).warnings == []


@pytest.mark.parametrize("text, said", [
    ("[tools]\ncomand_timeout_seconds = 60\n",
     "tools.comand_timeout_seconds: unknown key; did you mean command_timeout_seconds? "
     "(docs/configuration.md lists every key)"),
    ("loglevel = 'debug'\n", "loglevel: unknown key; did you mean log_level? (docs/configuration.md lists every key)"),
    ('[mcp.servers.x]\ncommand = "/bin/true"\nriks = "read_only"\n',
     "mcp.servers.x.riks: unknown key; did you mean risk? (docs/configuration.md lists every key)"),
    ("[tools]\nzzz = 1\n", "tools.zzz: unknown key (docs/configuration.md lists every key)"),
    # a key put in the wrong table: the table that has it
    ('[server]\npolicy = "always"\n',
     "server.policy: unknown key; did you mean approvals.policy? (docs/configuration.md lists every key)"),
    ('[chat]\nmodel = "gpt-5"\n',
     "chat.model: unknown key; did you mean providers.<name>.model? (docs/configuration.md lists every key)"),
    ('[server]\nlog_level = "debug"\n', "server.log_level: unknown key; did you mean log_level (at the top, "
     "before any table)? (docs/configuration.md lists every key)"),
    # an empty model was taken, and each chat turn failed with the provider's 404; one of spaces too
    ('[providers.local]\nmodel = ""\n',
     'providers.local.model: empty or only whitespace; name the model a chat turn asks, e.g. "gpt-5"'),
    ('[providers.local]\nmodel = "  "\n',
     'providers.local.model: empty or only whitespace; name the model a chat turn asks, e.g. "gpt-5"'),
    ('[approvals]\npolicy = "sometimes"\n',
     "approvals.policy: Invalid enum value 'sometimes'; use one of: always, never, on-risk, sandbox-aware"),
    ("[chat]\ntranscript_days = -30\n", "chat.transcript_days: Expected `int` >= 0; give the days a chat "
     "transcript not written to is kept, or 0 to keep every transcript"),
])
def test_a_wrong_key_or_value_says_what_was_probably_meant(cfg_file, text, said):
    """A typo'd key got no "did you mean" (a typo'd SCVD_* variable did), nor a bad choice the choices."""
    with pytest.raises(ConfigError) as info:
        load(cfg_file(text), env={})
    assert info.value.message.endswith(said), info.value.message


def test_a_misspelt_log_level_override_names_the_one_without_a_table(tmp_path):
    warnings = load(tmp_path / "missing.toml", env={"SCVD_LOGLEVEL": "debug"}).warnings
    assert warnings == ["SCVD_LOGLEVEL sets no configuration key and is ignored; did you mean SCVD_LOG_LEVEL? "
                        "If it is meant for something else, ignore this"]


def test_env_value_that_is_not_toml_is_a_string(cfg_file):
    loaded = load(cfg_file(""), env={"SCVD_LOG_LEVEL": "warning", "SCVD_SANDBOX__BWRAP": "/opt/bwrap"})
    assert loaded.config.log_level == "warning" and loaded.config.sandbox.bwrap == "/opt/bwrap"
    assert loaded.sources["sandbox.bwrap"] == "env:SCVD_SANDBOX__BWRAP"


ERRORS = [
    # (file text, environment, the key path the message must name, a fragment of the reason)
    pytest.param("[tools]\ncomand_timeout_seconds = 5\n", {}, "tools.comand_timeout_seconds", "unknown key",
                 id="unknown-key"),
    pytest.param("[toolz]\nx = 1\n", {}, "toolz", "unknown key", id="unknown-section"),
    pytest.param("colour = 1\n", {}, "colour", "unknown key", id="unknown-top-level-key"),
    pytest.param('[tools]\ncommand_timeout_seconds = "fast"\n', {}, "tools.command_timeout_seconds",
                 "Expected `float`, got `str`", id="wrong-type"),
    pytest.param("[tools]\ncommand_timeout_seconds = 0\n", {}, "tools.command_timeout_seconds", "> 0.0",
                 id="below-minimum"),
    pytest.param("tools = 5\n", {}, "tools", "Expected `object`", id="section-not-a-table"),
    pytest.param('[approvals]\npolicy = "sometimes"\n', {}, "approvals.policy", "'sometimes'",
                 id="bad-policy"),
    pytest.param('[sandbox]\nmode = "docker"\n', {}, "sandbox.mode", "'docker'", id="bad-sandbox-mode"),
    pytest.param('[approvals]\nalways_ask = [".git/**", "../outside/**"]\n', {}, "approvals.always_ask",
                 "'../outside/**' has a '.' or '..' component; globs name paths inside the workspace",
                 id="always-ask-dotdot"),
    pytest.param('[approvals]\nalways_ask = ["/"]\n', {}, "approvals.always_ask",
                 "'/' names no path; give a glob such as '.git/**'", id="always-ask-empty-glob"),
    pytest.param('[approvals]\nalways_ask = ".envrc"\n', {}, "approvals.always_ask",
                 "Expected `array`", id="always-ask-not-a-list"),
    pytest.param("[tools]\ncommand_timeout_seconds = 2000\n", {}, "tools.command_timeout_seconds",
                 "above tools.max_timeout_seconds (1800)", id="cross-key-rule"),
    pytest.param("[tools]\nmax_timeout_seconds = 300\n", {}, "tools.agent_timeout_seconds",
                 "above tools.max_timeout_seconds (300)", id="cross-key-rule-lowered-ceiling"),
    # a call as large as a frame would be refused for good, told to wait
    pytest.param("[server]\nmax_call_bytes_per_connection = 500000\n", {}, "server.max_call_bytes_per_connection",
                 "500000 is below server.client_frame_bytes (1048576), so a call could be refused for good",
                 id="call-bytes-below-a-frame"),
    pytest.param("[server]\nmax_call_bytes = 2000000\nmax_call_bytes_per_connection = 3000000\n", {},
                 "server.max_call_bytes", "2000000 is below server.max_call_bytes_per_connection (3000000)",
                 id="call-bytes-of-all-below-one-connection"),
    pytest.param("[server]\nmax_calls_per_connection = 0\n", {}, "server.max_calls_per_connection",
                 "Expected `int` >= 1", id="calls-per-connection-zero"),
    # frames of 1 KiB passed the check above, and every call (4 KiB at least) was refused, told to wait
    pytest.param("[server]\nclient_frame_bytes = 1024\nmax_call_bytes_per_connection = 2048\nmax_call_bytes = 2048\n",
                 {}, "server.max_call_bytes_per_connection", "Expected `int` >= 4096", id="call-bytes-below-a-call"),
    pytest.param('[adapters.codex]\nmodel_args = "-m {model}"\n', {}, "adapters.codex.model_args",
                 "Expected `array | null`", id="adapter-wrong-type"),
    pytest.param('[adapters.claude]\nmodel_args = []\n[adapters.pi]\nmodel_flag = []\n', {},
                 "adapters.pi.model_flag", "unknown key", id="adapter-unknown-key"),
    pytest.param('[providers.local]\nmodel = "m"\nwire_api = "grpc"\n', {}, "providers.local.wire_api",
                 "'grpc'", id="provider-bad-wire-api"),
    pytest.param('[providers.local]\nbase_url = "http://x"\n', {}, "providers.local",
                 "missing required field `model`", id="provider-no-model"),
    pytest.param('[chat]\nprovider = "local"\n', {}, "chat.provider",
                 "no provider 'local' (configured: codex)", id="chat-unknown-provider"),
    pytest.param('[adapters.claude]\npass_env = "GH_TOKEN"\n', {}, "adapters.claude.pass_env",
                 "Expected `array`, got `str`", id="pass-env-not-a-list"),
    pytest.param('[adapters.codex]\npass_env = ["AWS_PROFILE", "AWS-REGION"]\n', {}, "adapters.codex.pass_env",
                 "'AWS-REGION' is not an environment variable name (1-128 letters, digits and _, "
                 "not starting with a digit)", id="pass-env-bad-name"),
    pytest.param('[adapters.codex]\npass_env = ["CODEX_HOME"]\n', {}, "adapters.codex.pass_env",
                 "CODEX_HOME is set by scvd itself (the agent's private home); remove it", id="pass-env-private-home"),
    # the user's own ~/.claude: the agent would rotate the tokens of their own login
    pytest.param('[adapters.claude]\npass_env = ["GH_TOKEN", "CLAUDE_CONFIG_DIR"]\n', {}, "adapters.claude.pass_env",
                 "CLAUDE_CONFIG_DIR would point the agent at a configuration and sign-in outside its private home "
                 "(yours, whose tokens it would rotate); remove it: `scvctl agents login` signs the agent in within "
                 "its private home", id="pass-env-home-elsewhere"),
    pytest.param('[adapters.pi]\npass_env = ["SCV_SOCKET"]\n', {}, "adapters.pi.pass_env",
                 "SCV_SOCKET is scvd's own or systemd's variable, which no child gets", id="pass-env-scvd-own"),
    # a chat provider's key goes to that provider only, not to an agent or a script tool
    pytest.param('[providers.local]\nmodel = "m"\napi_key_env = "OPENAI_API_KEY"\n'
                 '[adapters.codex]\npass_env = ["OPENAI_API_KEY"]\n', {}, "adapters.codex.pass_env",
                 "OPENAI_API_KEY is where providers.local.api_key_env takes a chat provider's API key, which scvd "
                 "sends to that provider only; remove it", id="pass-env-provider-key"),
    pytest.param('[providers.local]\nmodel = "m"\napi_key_secret = "LOCAL_KEY"\n'
                 '[tools.script.gh]\npass_env = ["LOCAL_KEY"]\n', {}, "tools.script.gh.pass_env",
                 "LOCAL_KEY is where providers.local.api_key_secret takes", id="script-pass-env-provider-secret"),
    pytest.param('[tools.script.gh]\npass_env = ["GH_HOST", 5]\n', {}, "tools.script.gh.pass_env[1]",
                 "Expected `str`, got `int`", id="script-pass-env-not-names"),
    pytest.param('[tools.script.gh]\npass_env = ["NOTIFY_SOCKET"]\n', {}, "tools.script.gh.pass_env",
                 "NOTIFY_SOCKET is scvd's own or systemd's variable", id="script-pass-env-systemd"),
    pytest.param('[tools.script.Gh-cli]\npass_env = []\n', {}, "tools.script.Gh-cli",
                 "a script tool's folder name is 1-56 chars", id="script-pass-env-bad-tool-name"),
    pytest.param('[sandbox]\nbwrap = "relative/bwrap"\n', {}, "sandbox.bwrap",
                 "'relative/bwrap' is a relative path, which would mean scvd's working directory", id="relative-bwrap"),
    pytest.param('[mcp.servers.fs]\ncommand = "./bin/server"\n', {}, "mcp.servers.fs.command",
                 "give an absolute path or ~/... (or a bare name, looked up on scvd's PATH)", id="relative-mcp-command"),
    pytest.param('[sandbox]\nbwrap = ""\n', {}, "sandbox.bwrap",
                 "'' is empty, which names no file; give an absolute path or ~/... (or a bare name, looked up on "
                 "scvd's PATH)", id="empty-bwrap"),
    pytest.param('[mcp.servers.fs]\ncommand = ""\n', {}, "mcp.servers.fs.command", "'' is empty",
                 id="empty-mcp-command"),
    pytest.param('[mcp.servers.fs]\ncommand = "server"\ncwd = "work"\n', {}, "mcp.servers.fs.cwd",
                 "'work' is a relative path", id="relative-mcp-cwd"),
    pytest.param("[tools]\nread_limit_bytes = 2097152\n", {}, "tools.read_limit_bytes",
                 "2097152 bytes of result can take 12582912 in a JSON frame (a control byte becomes \\u00XX), "
                 "more than server.server_frame_bytes (8388608) carries; set tools.read_limit_bytes to at most "
                 "1395370, or server.server_frame_bytes to at least 12599296", id="read-limit-above-the-frame"),
    pytest.param("[server]\nserver_frame_bytes = 1048576\n", {}, "tools.output_limit_bytes",
                 "set tools.output_limit_bytes to at most 172032", id="frame-lowered-below-the-output-limit"),
    pytest.param("[skills]\nmax_skill_bytes = 2000000\n", {}, "skills.max_skill_bytes",
                 "more than server.server_frame_bytes (8388608) carries", id="skill-limit-above-the-frame"),
    # TOML's inf passed as a positive float: an approval that never expired (shown with no expiry), a
    # shutdown grace systemd had to end with SIGKILL; nan said only `Expected float > 0.0`
    pytest.param("[approvals]\ntimeout_seconds = inf\n", {}, "approvals.timeout_seconds",
                 "inf is not a finite number; give a finite number of seconds (86400 is a day", id="inf-timeout"),
    pytest.param("[server]\nshutdown_grace_seconds = nan\n", {}, "server.shutdown_grace_seconds",
                 "nan is not a number; give a finite number of seconds", id="nan-grace"),
    pytest.param('[mcp.servers.fs]\ncommand = "server"\ntimeout_seconds = +inf\n', {},
                 "mcp.servers.fs.timeout_seconds", "inf is not a finite number", id="inf-mcp-timeout"),
    pytest.param('[providers.local]\nmodel = "m"\ntimeout_seconds = inf\n', {},
                 "providers.local.timeout_seconds", "inf is not a finite number", id="inf-provider-timeout"),
    # the entry of a table of names, not `env[...]`: which of the server's variables to quote
    pytest.param('[mcp.servers.db]\ncommand = "db-mcp"\nenv = {DB_HOST = "h", DB_PORT = 5432}\n', {},
                 "mcp.servers.db.env.DB_PORT", "Expected `str | object`, got `int`", id="mcp-env-value-not-a-string"),
    pytest.param('[mcp.servers.gh]\nurl = "https://x"\ntool_risk = {"repo.search" = "low"}\n', {},
                 'mcp.servers.gh.tool_risk."repo.search"', "Invalid enum value 'low'", id="mcp-tool-risk-bad-value"),
    pytest.param('[mcp.servers.gh]\nurl = "https://x"\nheaders = {Accept = "a", Auth = {secret = 1}}\n', {},
                 "mcp.servers.gh.headers.Auth.secret", "Expected `str`, got `int`", id="mcp-header-secret-not-a-name"),
]


@pytest.mark.parametrize("text, env, key, reason", ERRORS)
def test_file_errors_name_the_file_and_the_key(cfg_file, text, env, key, reason):
    path = cfg_file(text)
    with pytest.raises(ConfigError) as info:
        load(path, env=env)
    message = info.value.message
    assert message.startswith(f"{path}: {key}: "), message
    assert reason in message


ENV_ERRORS = [
    pytest.param({"SCVD_TOOLS__COMMAND_TIMEOUT_SECONDS": "abc"}, "tools.command_timeout_seconds",
                 "Expected `float`, got `str`", id="env-wrong-type"),
    pytest.param({"SCVD_APPROVALS__POLICY": "sometimes"}, "approvals.policy", "'sometimes'", id="env-bad-policy"),
    pytest.param({"SCVD_TOOLS__NOPE": "1"}, "tools.nope", "unknown key", id="env-unknown-key"),
    pytest.param({"SCVD_COLOUR__DEPTH": "1"}, "colour", "unknown key", id="env-unknown-section"),
    pytest.param({"SCVD_TOOLS__COMMAND_TIMEOUT_SECONDS": "5000"}, "tools.command_timeout_seconds",
                 "above tools.max_timeout_seconds", id="env-cross-key-rule"),
    # the file's value is fine; the variable's ceiling is what fails it (the message named the file only)
    pytest.param({"SCVD_TOOLS__MAX_TIMEOUT_SECONDS": "30"}, "tools.command_timeout_seconds",
                 "60 is above tools.max_timeout_seconds (30)", id="env-lowers-the-ceiling-of-a-file-value"),
    pytest.param({"SCVD_ADAPTERS__CODEX__PASS_ENV": '["HOME"]'}, "adapters.codex.pass_env",
                 "HOME is set by scvd itself", id="env-pass-env-private-home"),
    pytest.param({"SCVD_TOOLS__COMMAND_TIMEOUT_SECONDS__X": "1"}, "tools.command_timeout_seconds.x",
                 "tools.command_timeout_seconds is a value, not a table with keys; check the variable's name",
                 id="env-path-through-a-value"),
    pytest.param({"SCVD_ADAPTERS__GEMINI__MODEL_ARGS": "[]"}, "adapters.gemini",
                 "no such agent; known agents: claude, codex, pi", id="env-unknown-agent"),
    pytest.param({"SCVD_ADAPTERS__CODEX__MODEL_ARGS": '["-m"]'}, "adapters.codex.model_args",
                 "never uses {model}", id="env-model-args-without-placeholder"),
    pytest.param({"SCVD_SANDBOX__BWRAP": "bin/bwrap"}, "sandbox.bwrap", "is a relative path",
                 id="env-relative-bwrap"),
    pytest.param({"SCVD_SERVER__SERVER_FRAME_BYTES": "131072"}, "tools.output_limit_bytes",
                 "more than server.server_frame_bytes (131072) carries", id="env-frame-below-the-output-limit"),
    pytest.param({"SCVD_ADAPTERS__CODEX__MODEL_ARGS": '["-m", 5]'}, "adapters.codex.model_args[1]",
                 "Expected `str`, got `int`", id="env-list-item-of-the-wrong-type"),
    pytest.param({"SCVD_APPROVALS__ALWAYS_ASK": "[1]"}, "approvals.always_ask[0]",
                 "Expected `str`, got `int`", id="env-always-ask-item"),
    pytest.param({"SCVD_APPROVALS__TIMEOUT_SECONDS": "inf"}, "approvals.timeout_seconds",
                 "inf is not a finite number; give a finite number of seconds", id="env-inf-timeout"),
    pytest.param({"SCVD_TOOLS__PROGRESS_INTERVAL_SECONDS": "nan"}, "tools.progress_interval_seconds",
                 "nan is not a number", id="env-nan-interval"),
    pytest.param({"SCVD_SERVER__HANDOFF_TIMEOUT_SECONDS": "inf"}, "server.handoff_timeout_seconds",
                 "inf is not a finite number", id="env-inf-handoff"),
    # `Environment=NAME=` blanks a variable under systemd: it was read as "" (Expected `int`, got `str`;
    # for bwrap, "bwrap not found on PATH ()" at start)
    pytest.param({"SCVD_TOOLS__COMMAND_TIMEOUT_SECONDS": ""}, "tools.command_timeout_seconds",
                 "the variable is empty, which is no value for this key; unset it (under systemd: remove its "
                 "Environment= line) to keep the file's value or the default, or give it a value", id="env-empty-int"),
    pytest.param({"SCVD_SANDBOX__BWRAP": ""}, "sandbox.bwrap", "the variable is empty", id="env-empty-bwrap"),
    pytest.param({"SCVD_CHAT__PROVIDER": " "}, "chat.provider", "the variable is empty", id="env-blank-string"),
    pytest.param({"SCVD_ADAPTERS__CODEX": ""}, "adapters.codex", "the variable is empty", id="env-empty-table"),
    # a value that is not TOML is taken as a string: say so, and show the TOML that was likely meant
    pytest.param({"SCVD_ADAPTERS__CLAUDE__PASS_ENV": "GH_TOKEN"}, "adapters.claude.pass_env",
                 "Expected `array`, got `str`; read as the string 'GH_TOKEN', not a TOML value; give one, e.g. "
                 "SCVD_ADAPTERS__CLAUDE__PASS_ENV='[\"GH_TOKEN\"]' (under systemd: "
                 "Environment='SCVD_ADAPTERS__CLAUDE__PASS_ENV=[\"GH_TOKEN\"]')", id="env-bare-word-for-a-list"),
    pytest.param({"SCVD_ADAPTERS__CODEX__MODEL_ARGS": "[-m, {model}]"}, "adapters.codex.model_args",
                 "read as the string '[-m, {model}]', not a TOML value; give one, e.g. "
                 "SCVD_ADAPTERS__CODEX__MODEL_ARGS='[\"-m\", \"{model}\"]'", id="env-list-whose-quotes-systemd-took"),
    pytest.param({"SCVD_SANDBOX__NETWORK": "True"}, "sandbox.network",
                 "Expected `bool`, got `str`; read as the string 'True', not a TOML value; give one, e.g. "
                 "SCVD_SANDBOX__NETWORK=true", id="env-python-bool"),
    pytest.param({"SCVD_TOOLS__COMMAND_TIMEOUT_SECONDS": "60s"}, "tools.command_timeout_seconds",
                 "e.g. SCVD_TOOLS__COMMAND_TIMEOUT_SECONDS=60", id="env-number-with-a-unit"),
    pytest.param({"SCVD_ADAPTERS__CLAUDE__PASS_ENV": "[GH_TOKEN, 'A B']"}, "adapters.claude.pass_env",
                 "e.g. SCVD_ADAPTERS__CLAUDE__PASS_ENV='[\"GH_TOKEN\", \"A B\"]'", id="env-list-split-on-commas-only"),
    pytest.param({"SCVD_ADAPTERS__CLAUDE__PASS_ENV": '["A,B", C]'}, "adapters.claude.pass_env",
                 "e.g. SCVD_ADAPTERS__CLAUDE__PASS_ENV='[\"A,B\", \"C\"]'", id="env-list-quoted-item-kept-whole"),
    pytest.param({"SCVD_MCP__SERVERS__GH": "gh-mcp"}, "mcp.servers.gh",
                 "Expected `object`, got `str`; read as a string (not repeated here: a table's values may be "
                 "secrets), not a TOML value: are its strings quoted?; give one, e.g. "
                 "SCVD_MCP__SERVERS__GH='{command = ...}'", id="env-bare-word-for-a-table"),
    # a variable's name is read in lower case: this set the variable `github_token`, quietly
    pytest.param({"SCVD_MCP__SERVERS__GH__ENV__GITHUB_TOKEN": "x"}, "mcp.servers.gh.env.github_token",
                 "the keys of mcp.servers.gh.env are names, which a variable's name cannot spell: it is read in "
                 "lower case; set it in config.toml, or give mcp.servers.gh.env whole as an inline table, whose "
                 "keys keep their case (it replaces the file's), e.g. SCVD_MCP__SERVERS__GH__ENV='{GITHUB_TOKEN = "
                 "\"...\"}' (under systemd: Environment='SCVD_MCP__SERVERS__GH__ENV={GITHUB_TOKEN = \"...\"}')",
                 id="env-path-through-env-names"),
    pytest.param({"SCVD_MCP__SERVERS__GH__HEADERS__X_API_KEY__SECRET": "K"}, "mcp.servers.gh.headers.x_api_key.secret",
                 "e.g. SCVD_MCP__SERVERS__GH__HEADERS='{X_API_KEY = {secret = \"...\"}}'",
                 id="env-path-through-header-names"),
    pytest.param({"SCVD_MCP__SERVERS__GH__TOOL_RISK__SEARCH": "read_only"}, "mcp.servers.gh.tool_risk.search",
                 "the keys of mcp.servers.gh.tool_risk are names", id="env-path-through-tool-names"),
]


@pytest.mark.parametrize("env, key, reason", ENV_ERRORS)
def test_env_errors_name_the_variable_and_the_key(cfg_file, env, key, reason):
    path = cfg_file("[tools]\ncommand_timeout_seconds = 60\n")
    (name,) = env
    with pytest.raises(ConfigError) as info:
        load(path, env=env)
    message = info.value.message
    assert message.startswith(f"env:{name} (over {path}): {key}: "), message
    assert reason in message


@pytest.mark.parametrize("name, text", [
    ("SCVD_MCP__SERVERS__GH__HEADERS", "{Authorization = Bearer ghp_PASTED}"),
    ("SCVD_MCP__SERVERS__GH", '{url = "https://x/mcp", headers = {Authorization = "Bearer ghp_PASTED"}'),
])
def test_an_override_that_is_no_table_does_not_repeat_its_text(cfg_file, name, text):
    """systemd drops the quotes of an unquoted `Environment=` word, so a table of headers or env set
    that way is no TOML; the error (a start's: it goes to the journal) repeated it, token and all."""
    path = cfg_file('[mcp.servers.gh]\nurl = "https://x/mcp"\n')
    with pytest.raises(ConfigError) as info:
        load(path, env={name: text})
    assert "ghp_PASTED" not in info.value.message
    assert "read as a string (not repeated here: a table's values may be secrets)" in info.value.message


@pytest.mark.parametrize("name", ["SCVD_TOOLS__", "SCVD___COMMAND_TIMEOUT_SECONDS", "SCVD_TOOLS____X"])
def test_an_override_with_an_empty_part_of_its_key_path_says_how_one_is_spelt(cfg_file, name):
    # msgspec called the empty part an unknown field ``, which said nothing a person could act on
    path = cfg_file("")
    with pytest.raises(ConfigError) as info:
        load(path, env={name: "60"})
    assert info.value.message == (
        f"env:{name} (over {path}): the name leaves a part of the key path empty (`__` at an end, or `____`); "
        "an override is SCVD_<TABLE>__<KEY>, e.g. SCVD_TOOLS__COMMAND_TIMEOUT_SECONDS=60")


@pytest.mark.parametrize("name, text, tail", [
    ("SCVD_SERVER__SHUTDOWN_GRACE_SECONDS", "0.5s", "; give one, e.g. SCVD_SERVER__SHUTDOWN_GRACE_SECONDS=0.5"),
    ("SCVD_SERVER__SHUTDOWN_GRACE_SECONDS", "05s", "; give one, e.g. SCVD_SERVER__SHUTDOWN_GRACE_SECONDS=5"),
    ("SCVD_TOOLS__COMMAND_TIMEOUT_SECONDS", "1,000 sec", "; give one, e.g. SCVD_TOOLS__COMMAND_TIMEOUT_SECONDS=1000"),
    # no guess where one would change the meaning: another unit, a fraction for an integer, a word
    ("SCVD_SERVER__SHUTDOWN_GRACE_SECONDS", "1.5m", "; give the seconds as a TOML number, with no unit"),
    ("SCVD_SERVER__SHUTDOWN_GRACE_SECONDS", "half", "; give the seconds as a TOML number, with no unit"),
    ("SCVD_SERVER__SHUTDOWN_GRACE_SECONDS", "0,5", "; give the seconds as a TOML number, with no unit"),
    ("SCVD_AUDIT__MAX_BYTES", "1.5b", "; give the bytes as a TOML integer, with no unit"),
    ("SCVD_TOOLS__OUTPUT_LIMIT_BYTES", "1MiB", "; give the bytes as a TOML integer, with no unit"),
    ("SCVD_AUDIT__KEEP", "three", "; give a TOML integer"),
])
def test_a_number_read_as_a_string_is_guessed_only_where_the_guess_keeps_its_meaning(cfg_file, name, text, tail):
    with pytest.raises(ConfigError) as info:
        load(cfg_file(""), env={name: text})
    assert info.value.message.endswith(f"read as the string {text!r}, not a TOML value{tail}"), info.value.message


def test_every_seconds_key_takes_a_decimal_and_an_integer_key_a_whole_number_written_as_one(cfg_file):
    """tools.*_timeout_seconds took only integers (90.5: `Expected int, got float`) where the other
    *_seconds keys, and a call's timeout_seconds, took decimals; 60.0 for an integer key was refused too."""
    seconds = [key for key, kind in leaf_types().items() if key.endswith("_seconds") and "<name>" not in key]
    assert len(seconds) >= 9 and all(isinstance(leaf_types()[k], msgspec.inspect.FloatType) for k in seconds)
    loaded = load(cfg_file("[tools]\ncommand_timeout_seconds = 90.5\nmax_timeout_seconds = 1800.5\n"
                           "agent_timeout_seconds = 600.5\ndefault_timeout_seconds = 900.5\n"
                           "[approvals]\nmax_pending = 60.0\n"), env={"SCVD_AUDIT__KEEP": "2.0"})
    tools = loaded.config.tools
    assert (tools.command_timeout_seconds, tools.max_timeout_seconds, tools.agent_timeout_seconds,
            tools.default_timeout_seconds) == (90.5, 1800.5, 600.5, 900.5)
    assert (loaded.config.approvals.max_pending, loaded.config.audit.keep) == (60, 2)
    assert type(loaded.config.approvals.max_pending) is int


@pytest.mark.parametrize("text, said", [
    # a bare word is no TOML value: tomllib's message alone said where, not what to write
    ("[approvals]\npolicy = always\n", "not valid TOML: Invalid value (at line 2, column 10); give one of always, "
     'never, on-risk, sandbox-aware, in quotes, e.g. policy = "always"'),
    ("[providers.p]\nmodel = gpt-5\n",
     'not valid TOML: Invalid value (at line 2, column 9); give a text value, in quotes, e.g. model = "gpt-5"'),
    ("sandbox.mode = bwrap\n", "give one of auto, bwrap, off, in quotes, e.g. sandbox.mode = \"bwrap\""),
    ("[approvals]\ntimeout_seconds = 15m\n", "(at line 2, column 21); give a number of seconds, without quotes "
     "or a unit, e.g. timeout_seconds = 900"),
    # a value of the wrong type: msgspec's `Expected X, got Y`, and what the field's type takes
    ('[approvals]\ntimeout_seconds = "15m"\n', "approvals.timeout_seconds: Expected `float`, got `str`; give a "
     "number of seconds, without quotes or a unit, e.g. timeout_seconds = 900"),
    ('[server]\nshutdown_grace_seconds = "2s"\n', "give a number of seconds, without quotes or a unit, e.g. "
     "shutdown_grace_seconds = 2"),
    ('[mcp.servers.fs]\ncommand = "npx"\nargs = "-y @pkg/server ~/src"\n', "mcp.servers.fs.args: Expected `array`, "
     'got `str`; give a list, e.g. args = ["-y", "@pkg/server", "~/src"]'),
    ('[adapters.claude]\npass_env = "GH_TOKEN"\n', "Expected `array`, got `str`; give a list, e.g. "
     'pass_env = ["GH_TOKEN"]'),
    ("[sandbox]\nmode = true\n", "sandbox.mode: Expected `str`, got `bool`; give one of auto, bwrap, off, in quotes, "
     'e.g. mode = "auto"'),
    ('[sandbox]\nnetwork = "yes"\n', "give true or false, without quotes, e.g. network = true"),
    ("[approvals]\nmax_pending = 60.5\n", "approvals.max_pending: Expected `int`, got `float`; give a whole "
     "number (no fraction), e.g. max_pending = 256"),
    ('[tools]\ncommand_timeout_seconds = "90.5s"\n', "give a number of seconds, without quotes or a unit, e.g. "
     "command_timeout_seconds = 90.5"),
    ("[chat]\nprovider = 3\n", 'chat.provider: Expected `str`, got `int`; give a text value, in quotes, e.g. '
     'provider = "3"'),
    # an override that is TOML already (a quoted string) is hinted in its own form
    ("", 'give a list, e.g. SCVD_ADAPTERS__CLAUDE__PASS_ENV=\'["GH_TOKEN"]\''),
])
def test_a_value_of_the_wrong_type_says_what_its_key_takes(cfg_file, text, said):
    """config.toml's type mistakes got bare library messages, where an SCVD_* variable's got a hint."""
    env = {} if text else {"SCVD_ADAPTERS__CLAUDE__PASS_ENV": '"GH_TOKEN"'}
    with pytest.raises(ConfigError) as info:
        load(cfg_file(text), env=env)
    assert said in info.value.message, info.value.message


@pytest.mark.parametrize("text, said", [
    ("a = {x = 1}\na.y = 2\n", "Cannot mutate immutable namespace `a` (at line 2, column 8)"),
    ("[approvals]\ntimeout_seconds = 10\ntimeout_seconds = 20\n", "Cannot overwrite a value (at line 3, column 21)"),
    ("[sandbox]\nnetwork = true\nnetwork = false\n", "Cannot overwrite a value (at line 3, column 16)"),
])
def test_a_line_whose_value_is_toml_gets_no_hint_about_a_bare_word(cfg_file, text, said):
    """`a.y = 2` after the inline table `a = {x = 1}`, or a key set twice, was told `give a text value, in
    quotes, e.g. a.y = "2"` (or `give a number of seconds, ...`): the value was never the problem."""
    with pytest.raises(ConfigError) as info:
        load(cfg_file(text), env={})
    assert info.value.message.endswith(f"not valid TOML: {said}"), info.value.message


@pytest.mark.parametrize("text", ["[mcp.servers.gh]\ncommand = \"gh\"\nenv = {GH_TOKEN = 12345678}\n",
                                  "[mcp.servers.gh.env]\nGH_TOKEN = ghp_PASTED\n",
                                  "[mcp.servers.gh]\nurl = \"https://x\"\nheaders = {Auth = [\"ghp_PASTED\"]}\n"])
def test_the_hint_for_a_value_in_a_table_of_names_does_not_repeat_it(cfg_file, text):
    """An MCP server's env and headers hold tokens; the message goes to the journal and bug reports."""
    with pytest.raises(ConfigError) as info:
        load(cfg_file(text), env={})
    assert "PASTED" not in info.value.message and "12345678" not in info.value.message
    assert 'a text value, in quotes, e.g. ' in info.value.message and '= "..."' in info.value.message


@pytest.mark.parametrize("text, kept", [
    ("[mcp.servers.gh]\nurl = https://api.example.com/mcp?api_key=sk-live-PASTED\n", 'url = "..."'),
    ("[mcp.servers.gh]\ncommand = \"gh\"\nargs = \"--api-key sk-live-PASTED\"\n", 'args = ["--api-key", "..."]'),
    ("[mcp.servers.gh]\ncommand = \"gh\"\nargs = \"--token=ghpPASTED1234567890abc\"\n", 'args = ["--token=..."]'),
    ("[mcp.servers.gh]\ncommand = \"gh\"\nargs = \"--api-key=correcthorsePASTED\"\n", 'args = ["--api-key=..."]'),
    ("[mcp.servers.gh]\ncommand = \"gh\"\nargs = \"-p=PASTED --header='Authorization: Bearer PASTED'\"\n",
     'args = ["-p=...", "--header=..."]'),
    ("[mcp.servers.gh]\ncommand = \"gh\"\nargs = \"-y @scope/server-PASTED\"\n",
     'args = ["-y", "@scope/server-PASTED"]'),  # no credential: repeated, as the person wrote it
])
def test_a_hint_does_not_repeat_what_reads_like_a_credential(cfg_file, text, kept):
    """A bare url with a token in its query, an args string with --api-key: the hint quoted them into
    the log and `scvctl status` (a reload's failure)."""
    with pytest.raises(ConfigError) as info:
        load(cfg_file(text), env={})
    assert kept in info.value.message, info.value.message
    assert "PASTED" not in info.value.message or "server-PASTED" in kept, info.value.message


def test_names_keep_their_case_in_an_inline_table_override(cfg_file):
    """`..._ENV__GITHUB_TOKEN` is refused (read in lower case); the whole table as an inline table works."""
    path = cfg_file('[mcp.servers.gh]\ncommand = "gh-mcp"\nenv = {GH_HOST = "h"}\n')
    loaded = load(path, env={"SCVD_MCP__SERVERS__GH__ENV": '{GITHUB_TOKEN = {secret = "GH"}}'})
    assert loaded.config.mcp.servers["gh"].env == {"GITHUB_TOKEN": config.SecretRef(secret="GH")}
    assert loaded.sources["mcp.servers.gh.env.GITHUB_TOKEN.secret"] == "env:SCVD_MCP__SERVERS__GH__ENV"


def test_an_override_of_a_table_the_file_names_in_capitals_is_refused(cfg_file):
    """It set [providers.myprov] beside the file's [providers.MyProv], which chat turns went on using."""
    path = cfg_file('[providers.MyProv]\nmodel = "m"\n[chat]\nprovider = "MyProv"\n')
    with pytest.raises(ConfigError) as info:
        load(path, env={"SCVD_PROVIDERS__MYPROV__MODEL": "n"})
    assert info.value.message == (
        f"env:SCVD_PROVIDERS__MYPROV__MODEL (over {path}): providers.myprov.model: a variable's name is read in "
        "lower case, so this would set providers.myprov, a table beside the file's providers.MyProv; set it in "
        "config.toml, or give providers whole as an inline table, whose keys keep their case (it replaces the "
        "file's), e.g. SCVD_PROVIDERS='{MyProv = {model = \"...\"}}' (under systemd: "
        "Environment='SCVD_PROVIDERS={MyProv = {model = \"...\"}}')")
    assert load(path, env={"SCVD_PROVIDERS__OTHER__MODEL": "n"}).config.providers["other"].model == "n"


def test_a_whole_top_level_table_overrides_as_the_refusal_above_says(cfg_file):
    """SCVD_PROVIDERS='{MyProv = {...}}', which that error and docs/configuration.md give, was ignored
    as a variable that sets nothing (it has no `__`): the provider kept the file's model."""
    path = cfg_file('[providers.MyProv]\nmodel = "m"\n[chat]\nprovider = "MyProv"\n')
    loaded = load(path, env={"SCVD_PROVIDERS": '{MyProv = {model = "n"}}', "SCVD_SANDBOX": '{mode = "auto"}'})
    assert loaded.config.providers["MyProv"].model == "n" and loaded.config.sandbox.mode == "auto"
    assert (loaded.sources["providers.MyProv.model"], loaded.warnings) == ("env:SCVD_PROVIDERS", [])


def test_an_empty_override_sets_a_string_whose_default_is_empty(cfg_file):
    """"" is a real value there (no system prompt; OpenAI's URL), so blanking the variable sets it."""
    path = cfg_file('[chat]\nsystem_prompt = "Be brief."\n[providers.p]\nmodel = "m"\nbase_url = "http://x"\n')
    loaded = load(path, env={"SCVD_CHAT__SYSTEM_PROMPT": "", "SCVD_PROVIDERS__P__BASE_URL": ""})
    assert (loaded.config.chat.system_prompt, loaded.config.providers["p"].base_url) == ("", "")
    assert loaded.sources["chat.system_prompt"] == "env:SCVD_CHAT__SYSTEM_PROMPT"


def test_invalid_toml_names_the_file_and_line(cfg_file):
    path = cfg_file("[tools\n")
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(path))}: not valid TOML: .*line 1"):
        load(path, env={})


DEEP = "a = " + "[" * 1000 + "]" * 1000 + "\n"  # 2 KB


def test_a_config_nested_too_deeply_names_the_file_not_a_recursion_error(cfg_file):
    """tomllib's RecursionError went uncaught: a traceback at start, `reload failed` with one at a reload."""
    path = cfg_file(DEEP)
    with pytest.raises(ConfigError) as info:
        load(path, env={})
    assert info.value.message == f"{path}: not valid TOML: arrays or inline tables nested too deeply to read"


def test_an_override_nested_too_deeply_is_read_as_text(cfg_file):
    """Read as a TOML value first, it raised RecursionError; as text, the key's type refuses it by name."""
    with pytest.raises(ConfigError) as info:
        load(cfg_file(""), env={"SCVD_TOOLS__COMMAND_TIMEOUT_SECONDS": DEEP[4:]})
    assert info.value.message.endswith("]\\n', not a TOML value; give the seconds as a TOML number, with no unit")


def test_a_file_cut_off_names_the_line_and_column_where_it_ends(cfg_file):
    """tomllib says only `(at end of document)` of an unclosed list or string."""
    path = cfg_file('[approvals]\nalways_ask = ["*.pem",\n  "*.key"\n')
    with pytest.raises(ConfigError) as info:
        load(path, env={})
    assert info.value.message == f"{path}: not valid TOML: Unclosed array (at end of document: line 4, column 1)"


def test_bytes_that_are_not_utf8_name_the_file_and_the_line(cfg_file):
    path = cfg_file("")
    path.write_bytes(b"[tools]\n# caf\xe9, saved as Latin-1\ncommand_timeout_seconds = 60\n")
    with pytest.raises(ConfigError) as info:
        load(path, env={})
    assert info.value.message == (f"{path}: not UTF-8 text at line 2 (byte 0xe9); TOML files are UTF-8: "
                                  "save it as UTF-8")


def test_a_config_toml_linked_to_a_file_gone_is_refused_not_read_as_the_defaults(tmp_path):
    # dotfiles that link config.toml: a moved target must not quietly turn sandbox and policy to their defaults
    path = tmp_path / "config.toml"
    path.symlink_to(tmp_path / "dotfiles" / "scv.toml")
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(path))}: a symbolic link to .*dotfiles/scv.toml, "
                       r"which does not exist; fix the link \(or remove it to run on the defaults\)$"):
        load(path, env={})


def test_a_file_saved_with_a_byte_order_mark_reads_as_without(cfg_file):
    """An editor's "UTF-8 with BOM": the file failed as `not valid TOML: Invalid statement (at line 1,
    column 1)`, at a character the editor does not show."""
    path = cfg_file("")
    path.write_bytes(b'\xef\xbb\xbf[tools]\ncommand_timeout_seconds = 60\n')
    assert load(path, env={}).config.tools.command_timeout_seconds == 60


def test_a_file_far_larger_than_any_configuration_is_refused_unread(cfg_file):
    """`--config` given a log or an image was read whole and parsed: the memory of its size, at a
    reload inside the running daemon too."""
    mib = 1 << 20  # docs/configuration.md: at most 1 MiB
    path = cfg_file('log_level = "info"\n' + "# padding\n" * (mib // 10))
    with pytest.raises(ConfigError) as info:
        load(path, env={})
    assert info.value.message == (f"{path}: larger than {mib} bytes, which no configuration "
                                  "needs; is it the right file?")
    path.write_text('log_level = "info"\n' + "# padding\n" * (mib // 20))
    assert load(path, env={}).file_read


@pytest.mark.parametrize("kind", ["fifo", "dangling link"])
def test_removing_a_bad_config_file_is_offered_only_where_no_file_means_the_defaults(tmp_path, kind):
    path = tmp_path / "config.toml"
    os.mkfifo(path) if kind == "fifo" else path.symlink_to(tmp_path / "gone.toml")
    with pytest.raises(ConfigError) as info:
        load(path, env={})
    assert info.value.message.endswith("(or remove it to run on the defaults)")
    # --config's file, or one a reload read before: gone, it is an error too, so removing it is no way out
    with pytest.raises(ConfigError) as info:
        load(path, env={}, missing="check the path given to --config")
    assert "remove it" not in info.value.message
    assert info.value.message.endswith("put a config.toml file there" if kind == "fifo" else "fix the link")


# --- scvd check-config ---------------------------------------------------------------------


def check_config(home: Path, text: str | None, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    import os

    home.mkdir(exist_ok=True)
    if text is not None:
        (home / "config.toml").write_text(text)
    full = {k: v for k, v in os.environ.items() if not k.startswith("SCV")}
    full.update(SCV_HOME=str(home), PYTHONPATH=str(ROOT), **env)
    return subprocess.run([sys.executable, "-m", "scvd", *(args or ["check-config"])], env=full,
                          capture_output=True, text=True, timeout=60)


def test_check_config_says_what_to_write_for_a_number_out_of_bounds_and_a_table_declared_twice(tmp_path):
    """`Expected `float` > 0.0` said no unit nor an example (a wrong type said both), and a table
    written twice was `Cannot declare ('approvals',) twice`: a Python tuple, and no way out."""
    done = check_config(tmp_path / "home", "[tools]\ncommand_timeout_seconds = 0\n")
    assert (done.returncode, done.stderr) == (2, (
        f"scvd: configuration error: {tmp_path / 'home' / 'config.toml'}: tools.command_timeout_seconds: Expected "
        "`float` > 0.0; give a number of seconds above 0, e.g. command_timeout_seconds = 120\n"))
    done = check_config(tmp_path / "home", '[approvals]\npolicy = "always"\n[approvals]\ntimeout_seconds = 60\n')
    assert (done.returncode, done.stderr) == (2, (
        f"scvd: configuration error: {tmp_path / 'home' / 'config.toml'}: not valid TOML: [approvals] is declared "
        "twice, the second time at line 3: merge the two into one\n"))


def _bounded_numbers(info: Any, path: str = "") -> typing.Iterator[tuple[str, Any]]:
    """(key path, type) of every number of the configuration that has bounds; a table of a dict as `x`."""
    for field in getattr(info, "fields", ()):
        kind, key = field.type, f"{path}.{field.name}" if path else field.name
        if isinstance(kind, msgspec.inspect.UnionType):  # `PositiveInt | None`
            kind = next(t for t in kind.types if not isinstance(t, msgspec.inspect.NoneType))
        if isinstance(kind, msgspec.inspect.DictType):
            kind, key = kind.value_type, f"{key}.x"
        if isinstance(kind, (msgspec.inspect.IntType, msgspec.inspect.FloatType)):
            if (kind.ge, kind.gt, kind.le, kind.lt) != (None,) * 4:
                yield key, kind
        elif isinstance(kind, msgspec.inspect.StructType):
            yield from _bounded_numbers(kind, key)


NEEDED = {"providers.x": 'model = "m"\n', "mcp.servers.x": 'command = "/bin/true"\n'}  # what such a table needs


def test_every_number_out_of_its_bounds_says_what_to_give_with_an_example_that_loads(cfg_file):
    """Not only tools.command_timeout_seconds: each bounded number, below its least (or above its most)."""
    found = list(_bounded_numbers(msgspec.inspect.type_info(Config)))
    assert len(found) > 30
    for key, kind in found:
        table, _, name = key.rpartition(".")
        low = kind.ge - 1 if kind.ge is not None else kind.gt if kind.gt is not None else None
        wrong = low if low is not None else (kind.le + 1 if kind.le is not None else kind.lt)
        head = f"[{table}]\n{NEEDED.get(table, '')}" if table else ""
        with pytest.raises(ConfigError) as info:
            load(cfg_file(f"{head}{name} = {wrong!r}\n"), env={})
        said = info.value.message
        assert re.search(rf": {re.escape(key)}: Expected `(int|float)` [<>]=? \S+; give ", said), said
        example = re.search(rf", e\.g\. ({re.escape(name)} = \S+)$", said)
        assert example or key in config.HINTS, said
        if example:
            load(cfg_file(f"{head}{example[1]}\n"), env={})  # the example is a value it takes


def test_an_override_out_of_bounds_says_what_to_give_as_a_variable(cfg_file):
    with pytest.raises(ConfigError) as info:
        load(cfg_file(""), env={"SCVD_TOOLS__COMMAND_TIMEOUT_SECONDS": "0"})
    assert info.value.message.endswith("tools.command_timeout_seconds: Expected `float` > 0.0; give a number of "
                                       "seconds above 0, e.g. SCVD_TOOLS__COMMAND_TIMEOUT_SECONDS=120")


@pytest.mark.parametrize("text, said", [
    ('[mcp.servers."my fs"]\ncommand = "x"\n[mcp.servers."my fs"]\n',
     '[mcp.servers."my fs"] is declared twice, the second time at line 3: merge the two into one'),
    ("a = {x = 1}\na.y = 2\n", "Cannot mutate immutable namespace `a` (at "),  # no tuple in the text
    # a `[a]` after an array of tables or an inline table was `[a] is declared twice ...: merge the two`
    ("[[a]]\nx = 1\n[a]\n", "`a` is defined twice, the second time at line 3 by `[a]`: put its keys where it is "
                            "first defined (an array of tables `[[a]]`, an inline table or dotted keys)"),
    ("[x]\na = {b = 1}\n[x.a]\n", "`x.a` is defined twice, the second time at line 3 by `[x.a]`: "),
    ('[ "a" . b ] # [c]\n[a.b]\n', "[a.b] is declared twice, the second time at line 2: merge the two into one"),
    # a key with both quotes: Python's repr escapes the ', which ended the key's match there (a traceback)
    ('[mcp.servers."\'),\\""]\ncommand = "x"\n[mcp.servers."\'),\\""]\ncommand = "x"\n',
     '[mcp.servers."\'),\\""] is declared twice, the second time at line 3: merge the two into one'),
    ('"\'\\"" = {x = 1}\n"\'\\"".y = 2\n', 'Cannot mutate immutable namespace `"\'\\""` (at '),
])
def test_a_key_tomllib_names_is_said_as_toml_writes_it(cfg_file, text, said):
    with pytest.raises(ConfigError) as info:
        load(cfg_file(text), env={})
    assert said in info.value.message and "('" not in info.value.message, info.value.message


def test_check_config_prints_values_and_sources(tmp_path):
    done = check_config(tmp_path / "home", "[tools]\ncommand_timeout_seconds = 60\n",
                        SCVD_APPROVALS__POLICY="always")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert f"# config file: {tmp_path / 'home' / 'config.toml'}" in lines
    assert "tools.command_timeout_seconds = 60.0  # file" in lines
    assert 'approvals.policy = "always"  # env:SCVD_APPROVALS__POLICY' in lines
    assert "tools.max_timeout_seconds = 1800.0  # default" in lines
    assert f"# socket: {tmp_path / 'home' / 'run' / 'scvd.sock'}" in lines
    assert any(line.startswith("# sandbox: off") for line in lines)
    assert "# tools: " in done.stdout
    for key in leaf_keys():
        if "<name>" not in key:
            assert any(line.startswith((f"{key} = ", f"# {key} is not set")) for line in lines), key
    # the lines read as TOML (booleans were Python's False, which config.toml refuses)
    settings = [line.split("  # ")[0] for line in lines if not line.startswith("#")]
    assert "sandbox.network = false" in settings
    for line in settings:
        key, _, value = line.partition(" = ")
        tomllib.loads(f"v = {value}")


def test_check_config_lines_read_back_as_the_same_configuration(tmp_path):
    """`tool_risk = {"repo.search" = "read_only"}` printed as `...tool_risk.repo.search = "read_only"`,
    which config.toml reads as a table `repo` holding `search`: a key part that is not bare is quoted."""
    text = ('[mcp.servers.gh]\ncommand = "gh-mcp"\nenv = {GITHUB_TOKEN = {secret = "GH"}, "MY VAR" = "x"}\n'
            'tool_risk = {"repo.search" = "read_only", "get-issue" = "read_only", "Ünï" = "filesystem"}\n'
            '[providers."My Prov"]\nmodel = "m"\n')
    done = check_config(tmp_path / "home", text)
    assert done.returncode == 0, done.stderr
    lines = [line.rsplit("  # ", 1)[0] for line in done.stdout.splitlines() if not line.startswith("#")]
    assert 'mcp.servers.gh.tool_risk."repo.search" = "read_only"' in lines
    assert 'mcp.servers.gh.tool_risk.get-issue = "read_only"' in lines  # bare where it may be
    assert '# mcp.servers.gh.env."MY VAR" = <a literal value, not shown>  # file' in done.stdout
    expected = msgspec.to_builtins(load(tmp_path / "home" / "config.toml", env={}).config)
    del expected["mcp"]["servers"]["gh"]["env"]["MY VAR"]  # a literal env value is not shown
    assert tomllib.loads("\n".join(lines)) == _without_none(expected)


def test_check_config_does_not_print_the_literal_values_of_mcp_env_and_headers(tmp_path):
    """A token pasted into an MCP server's headers or env was printed whole by check-config, whose
    output goes to terminals, logs and bug reports; a {secret = KEY} reference still shows."""
    text = ('[mcp.servers.gh]\nurl = "https://mcp.example.com/mcp"\n'
            'headers = {Authorization = "Bearer ghp_PASTED", X-Api-Key = {secret = "GH_KEY"}}\n'
            'query = {api_key = "q_PASTED"}\n'
            '[mcp.servers.db]\ncommand = "db-mcp"\nenv = {DB_PASSWORD = "hunter2"}\nenabled = false\n')
    done = check_config(tmp_path / "home", text,
                        SCVD_MCP__SERVERS__FS='{command = "fs-mcp", env = {FS_TOKEN = "tok_FROM_ENV"}}')
    assert done.returncode == 0, done.stderr
    for value in ("ghp_PASTED", "hunter2", "tok_FROM_ENV", "q_PASTED"):
        assert value not in done.stdout
    lines = done.stdout.splitlines()
    assert "# mcp.servers.gh.headers.Authorization = <a literal value, not shown>  # file" in lines
    assert "# mcp.servers.db.env.DB_PASSWORD = <a literal value, not shown>  # file" in lines
    assert ("# mcp.servers.fs.env.FS_TOKEN = <a literal value, not shown>  # env:SCVD_MCP__SERVERS__FS"
            in lines)
    assert 'mcp.servers.gh.headers.X-Api-Key.secret = "GH_KEY"  # file' in lines


def test_check_config_does_not_print_a_key_in_a_providers_base_url(tmp_path):
    """An OpenAI-compatible gateway that takes its key in the query (`?api-key=`, Azure's style) had
    it printed whole by check-config, as MCP urls had."""
    text = '[providers.gw]\nmodel = "m"\nbase_url = "https://gw.example/v1?api-key=az_PASTED"\n'
    done = check_config(tmp_path / "home", text)
    assert done.returncode == 0, done.stderr
    assert "az_PASTED" not in done.stdout
    assert ('# providers.gw.base_url = "https://gw.example/v1"  (its query and user:password@ not shown)  # file'
            in done.stdout.splitlines()), done.stdout


def _without_none(value: Any) -> Any:
    """TOML has no null: check-config prints an unset optional key as a comment."""
    if isinstance(value, dict):
        return {k: _without_none(v) for k, v in value.items() if v is not None}
    return value


def test_check_config_into_a_reader_that_left_exits_quietly(tmp_path):
    """`scvd check-config | head -1` ended in a BrokenPipeError traceback (and exit 1)."""
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith("SCV")}
    env.update(SCV_HOME=str(tmp_path), PYTHONPATH=str(ROOT))
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the first line: EPIPE on every write, deterministically
    try:
        done = subprocess.run([sys.executable, "-m", "scvd", "check-config"], env=env, stdout=write,
                              stderr=subprocess.PIPE, text=True, timeout=60)
    finally:
        os.close(write)
    assert (done.returncode, done.stderr) == (0, "")


@pytest.mark.parametrize("strict", [False, True])
def test_check_config_with_stdout_closed_exits_as_the_check_says_not_in_a_traceback(tmp_path, strict):
    """`scvd check-config >&-` (a supervisor that closes it): sys.stdout was None, and the last flush
    an AttributeError traceback, exit 1, whatever the check found."""
    import os

    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "config.toml").write_text('[mcp.servers.fs]\ncommand = "/nonexistent/srv"\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCV")}
    env.update(SCV_HOME=str(tmp_path / "home"), PYTHONPATH=str(ROOT))
    argv = " ".join([sys.executable, "-m", "scvd", "check-config", *(["--strict"] if strict else [])])
    done = subprocess.run(["bash", "-c", f"exec {argv} >&-"], env=env, capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stderr) == (
        (2, "scvd: check-config --strict: 1 warning(s), the `# warning:` lines\n") if strict else (0, ""))


def test_paths_in_config_are_absolute_or_under_home(tmp_path):
    """A relative path meant the shell's cwd in the foreground but / with --daemon and ~ under systemd."""
    text = '[sandbox]\nbwrap = "./bwrap"\n[mcp.servers.fs]\ncommand = "srv"\ncwd = "work"\n'
    done = check_config(tmp_path / "home", text)
    assert done.returncode == 2
    assert "sandbox.bwrap: './bwrap' is a relative path" in done.stderr and "give an absolute path" in done.stderr
    fine = '[sandbox]\nbwrap = "~/bin/bwrap"\n[mcp.servers.fs]\ncommand = "/usr/bin/srv"\ncwd = "~/work"\n' \
        '[mcp.servers.gh]\ncommand = "gh-mcp"\ncwd = "/srv"\n'
    done = check_config(tmp_path / "home", fine)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("table, said", [
    ('[mcp.servers.b]\nurl = "http://"\n',
     "mcp.servers.b: url 'http://' names no host after its http:// or https://; write it as http://HOST:PORT/PATH"),
    ('[mcp.servers.b]\nurl = "http://h:99999/mcp"\n',
     "mcp.servers.b: url 'http://h:99999/mcp' is no URL a request can go to (its port is not a number of 0-65535); "
     "write it as http://HOST:PORT/PATH"),
    ('[providers.x]\nmodel = "m"\nbase_url = "ftp:/x"\n',
     "providers.x.base_url 'ftp:/x' must start with http:// or https://, e.g. http://127.0.0.1:8080/v1"),
    ('[providers.x]\nmodel = "m"\nbase_url = "127.0.0.1:11434/v1"\n',
     "providers.x.base_url '127.0.0.1:11434/v1' must start with http:// or https://, e.g. http://127.0.0.1:8080/v1"),
], ids=["mcp-no-host", "mcp-bad-port", "provider-ftp", "provider-no-scheme"])
def test_check_config_refuses_a_url_no_request_can_go_to(tmp_path, table, said):
    """They passed, and the first request failed blaming the scheme (`UnsupportedProtocol: Request URL
    is missing an 'http://' or 'https://' protocol`) or as a connection error."""
    done = check_config(tmp_path / "home", table)
    assert done.returncode == 2 and said in done.stderr, done.stderr


def test_result_limits_that_fit_one_frame_exactly_are_accepted(cfg_file):
    most = (1 << 20) - 16 * 1024  # room for the rest of the frame
    text = (f"[server]\nserver_frame_bytes = {1 << 20}\n[tools]\noutput_limit_bytes = {most // 6}\n"
            f"read_limit_bytes = {most // 6}\n[skills]\nmax_skill_bytes = {most // 6}\n")
    assert load(cfg_file(text), env={}).config.tools.read_limit_bytes == most // 6
    with pytest.raises(ConfigError, match=f"tools.read_limit_bytes: {most // 6 + 1} bytes"):
        load(cfg_file(text.replace(f"read_limit_bytes = {most // 6}", f"read_limit_bytes = {most // 6 + 1}")), env={})


def test_a_daemon_whose_reads_could_not_fit_one_frame_does_not_start(tmp_path):
    """It started, and a read of control bytes within read_limit_bytes then failed with kind `limit`."""
    text = "[server]\nserver_frame_bytes = 131072\n[tools]\nread_limit_bytes = 65536\noutput_limit_bytes = 4096\n"
    done = check_config(tmp_path / "home", text, "run")
    assert done.returncode == 2
    assert "tools.read_limit_bytes: 65536 bytes of result can take 393216 in a JSON frame" in done.stderr
    assert "set tools.read_limit_bytes to at most 19114" in done.stderr


def test_check_config_without_a_file_says_so(tmp_path):
    done = check_config(tmp_path / "home", None)
    assert done.returncode == 0, done.stderr
    assert "(missing: defaults)" in done.stdout.splitlines()[0]


def test_a_misspelt_override_is_a_warning_with_the_name_it_probably_meant(tmp_path):
    """SCVD_SANDBOX_MODE (one underscore) set nothing, silently; an SCVD_* name the file uses is fine."""
    text = '[providers.p]\nmodel = "m"\napi_key_env = "SCVD_MY_KEY"\n[chat]\nprovider = "p"\n'
    done = check_config(tmp_path / "home", text, SCVD_SANDBOX_MODE="bwrap", SCVD_TOOL="3", SCVD_MY_KEY="k")
    assert done.returncode == 0, done.stderr
    warnings = [line for line in done.stdout.splitlines() if line.startswith("# warning: ")]
    assert warnings == [
        "# warning: SCVD_SANDBOX_MODE sets no configuration key and is ignored; did you mean "
        "SCVD_SANDBOX__MODE? (Two underscores between table and key.) If it is meant for something else, "
        "ignore this",
        "# warning: SCVD_TOOL sets no configuration key and is ignored; an override is SCVD_<TABLE>__<KEY>. "
        "(Two underscores between table and key.) If it is meant for something else, ignore this"]


def test_the_daemon_logs_a_misspelt_override_at_start(make_daemon):
    d = make_daemon(env={"SCVD_APPROVALS_POLICY": "never"})
    with d.client() as c:
        assert c.status().policy == "on-risk"
    assert ("WARNING scvd.config: SCVD_APPROVALS_POLICY sets no configuration key and is ignored; "
            "did you mean SCVD_APPROVALS__POLICY?") in d.log()


def test_a_reload_logs_the_warnings_the_edit_brought_and_not_the_starts_again(make_daemon):
    """A [providers.X] added with chat.provider left at codex was a warning at start and in check-config,
    but a reload took it without a word: the user editing a running daemon's file never heard of it."""
    from conftest import reloaded

    d = make_daemon("", env={"SCVD_APPROVALS_POLICY": "never"})
    stray = "SCVD_APPROVALS_POLICY sets no configuration key"
    assert d.log().count(stray) == 1
    reloaded(d, '[providers.local]\nmodel = "m"\nbase_url = "http://127.0.0.1:9/v1"\n')
    assert ("WARNING scvd.config: [providers.local] is configured, but a chat turn that names no provider uses "
            "the imported Codex setup") in d.log()
    assert d.log().count(stray) == 1
    assert d.stop() == 0


def test_check_config_warns_of_an_mcp_server_that_cannot_start_and_strict_fails_on_it(tmp_path):
    """`command = "/nonexistent/mcp"` or a cwd not there passed check-config without a word, then the
    server restarted for good; a `~` in args is passed as it is. The check cannot know systemd's PATH,
    so it warns; --strict (CI on the machine that runs scvd) exits 2 on a warning."""
    home = tmp_path / "home"
    text = ('[mcp.servers.fs]\ncommand = "/nonexistent/mcp"\ncwd = "~/no/such/dir"\nargs = ["-y", "~/src"]\n'
            '[mcp.servers.gh]\ncommand = "no-such-mcp-server"\n'
            '[mcp.servers.off]\ncommand = "/nonexistent/mcp"\nenabled = false\n'
            '[mcp.servers.ok]\ncommand = "true"\ncwd = "/"\n')
    done = check_config(home, text, HOME=str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert [line for line in done.stdout.splitlines() if line.startswith("# warning: ")] == [
        "# warning: mcp.servers.fs.command: '/nonexistent/mcp' does not exist; the server cannot start, and scvd "
        "retries it with a growing backoff (at most a minute apart)",
        "# warning: mcp.servers.fs.cwd: '~/no/such/dir' is not a directory; create it, or fix the path",
        "# warning: mcp.servers.fs.args[1]: '~/src' starts with ~, which is passed as it is (no shell runs the "
        f"server to expand it); write the full path, e.g. '{tmp_path}/src'",
        "# warning: mcp.servers.gh.command: 'no-such-mcp-server' is not on PATH; give its full path, or install it "
        "there (under systemd, scvd's PATH is the unit's, not your shell's); the server cannot start, and scvd "
        "retries it with a growing backoff (at most a minute apart)"]
    strict = check_config(home, None, "check-config", "--strict", HOME=str(tmp_path))
    assert (strict.returncode, strict.stderr) == (2, "scvd: check-config --strict: 4 warning(s), the `# warning:` "
                                                     "lines\n")
    assert strict.stdout == done.stdout
    assert check_config(home, '[mcp.servers.ok]\ncommand = "true"\n', "check-config", "--strict").returncode == 0


def test_check_config_prints_what_the_start_drops_from_scvds_own_search_paths(tmp_path):
    """The start logs `dropped '' from scvd's PATH`; check-config, run with the unit's Environment=, said
    nothing of it. --strict counts them as the warnings they are."""
    path = os.environ["PATH"]
    done = check_config(tmp_path / "home", None, "check-config", "--strict", PATH=f"{path}:", NODE_PATH="lib")
    assert done.returncode == 2 and "2 warning(s)" in done.stderr, done.stderr
    assert [line for line in done.stdout.splitlines() if line.startswith("# warning: ")] == [
        f"# warning: dropped '' from scvd's PATH (it is now {path!r}): each process scvd starts would read it against "
        "its working directory, a session's workspace, where unasked calls write; name that directory by its absolute "
        "path in scvd's environment instead (docs/security.md)",
        "# warning: dropped 'lib' from scvd's NODE_PATH (it is now unset): each process scvd starts would read it "
        "against its working directory, a session's workspace, where unasked calls write; name that directory by its "
        "absolute path in scvd's environment instead (docs/security.md)"]


def test_check_config_warns_of_what_a_servers_start_drops_from_the_search_paths_of_its_env(tmp_path):
    """`env = {LD_LIBRARY_PATH = "lib:"}` reached a server whose cwd may be a workspace as written; now each
    start drops what it would read against its working directory, and check-config says so, with the
    absolute path the relative entry meant."""
    text = (f'[mcp.servers.fs]\ncommand = "true"\ncwd = "{tmp_path}"\n'
            'env = {LD_LIBRARY_PATH = "lib:", TOKEN = "lib:", PATH = "~/bin:/usr/bin", NODE_PATH = "$HOME/lib"}\n')
    done = check_config(tmp_path / "home", text, HOME=str(tmp_path))
    assert done.returncode == 0, done.stderr
    # `~/bin` is HOME's, as bash read it: no warning. `$HOME/lib` was told `e.g. '<cwd>/$HOME/lib'`
    assert [line for line in done.stdout.splitlines() if line.startswith("# warning: ")] == [
        "# warning: mcp.servers.fs.env.LD_LIBRARY_PATH: dropped 'lib', '' (it is now unset): the server and each "
        "program it starts would read it against their working directory, which can be a session's workspace, "
        f"where unasked calls write; write the directory's absolute path instead, e.g. '{tmp_path}/lib' "
        "(docs/security.md)",
        "# warning: mcp.servers.fs.env.NODE_PATH: dropped '$HOME/lib' (it is now unset): the server and each "
        "program it starts would read it against their working directory, which can be a session's workspace, "
        "where unasked calls write; write the directory's absolute path instead; scvd expands no variable in env, "
        "so write out the path that '$HOME/lib' names (docs/security.md)"]


def test_check_config_warns_when_the_required_sandbox_is_unavailable(tmp_path):
    """sandbox.mode = "bwrap" with no bwrap exited 0, and every bash call then failed `unavailable`."""
    done = check_config(tmp_path / "home", '[sandbox]\nmode = "bwrap"\nbwrap = "/nonexistent/bwrap"\n')
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-2:] == [
        '# warning: sandbox.mode = "bwrap" and the sandbox is unavailable (below): every bash call, script tool, '
        "agent and sandboxed stdio MCP server fails `unavailable` until it works",
        "# sandbox: unavailable (sandbox.mode = bwrap, sandboxed calls fail): bwrap not found at /nonexistent/bwrap "
        "(sandbox.bwrap): install bubblewrap (apt install bubblewrap) or fix sandbox.bwrap; fix it and reload or "
        "restart scvd, or set sandbox.mode = auto"]
    assert check_config(tmp_path / "home", None, "check-config", "--strict").returncode == 2


def test_a_device_given_to_config_is_told_to_give_a_file(tmp_path):
    """`--config /dev/null` was told to `put a config.toml file there`."""
    done = check_config(tmp_path / "home", None, "--config", "/dev/null", "check-config")
    assert (done.returncode, done.stderr) == (2, "scvd: configuration error: /dev/null is a device, not a regular "
                                                 "file; give the path of a config.toml file\n")


def test_a_reload_logs_a_server_that_cannot_start_and_a_file_that_is_not_there(make_daemon):
    """A reload that brought `command = "/nonexistent/mcp"` logged success, then the restarts began; one
    with no file logged `configuration reloaded from <file>` for a file that does not exist."""
    from conftest import reloaded

    d = make_daemon("")
    d.proc.send_signal(signal.SIGHUP)
    while "configuration reloaded from" not in d.log():  # the test's timeout is the bound
        time.sleep(0.1)
    assert f"configuration reloaded from {d.home / 'config.toml'} (missing: defaults)\n" in d.log()
    reloaded(d, '[mcp.servers.fs]\ncommand = "/nonexistent/mcp"\n')
    assert ("WARNING scvd.config: mcp.servers.fs.command: '/nonexistent/mcp' does not exist; the server cannot "
            "start") in d.log()
    assert f"configuration reloaded from {d.home / 'config.toml'}\n" in d.log()
    while "mcp server fs is down" not in d.log():
        time.sleep(0.1)
    assert ("mcp server fs is down: unavailable: mcp server fs: command '/nonexistent/mcp' does not exist; fix "
            "mcp.servers.fs.command; restarting in 1 s") in d.log()
    assert d.stop() == 0


@pytest.mark.parametrize("command", ["check-config", "run"])
def test_a_config_file_named_by_option_must_exist(tmp_path, command):
    """A misspelt --config is an error naming it, never a daemon quietly on the defaults."""
    typo = tmp_path / "tset.toml"
    done = check_config(tmp_path / "home", None, command, "--config", str(typo))
    assert done.returncode == 2, done.stderr
    assert done.stderr == (f"scvd: configuration error: {typo}: no such file; check the path given to "
                           f"--config (without it scvd reads {tmp_path / 'home' / 'config.toml'})\n")


def test_a_config_error_under_journald_carries_the_error_priority(tmp_path):
    """It had no `<N>` prefix, unlike the log lines: `journalctl -p warning` hid why the unit failed.
    Under journald is stderr being the stream JOURNAL_STREAM names; a terminal's shell may have the
    variable too (inherited from a terminal run as a user unit), and there `<3>` is noise."""
    import os

    def run(stream_of: Path) -> tuple[int, str]:
        err = tmp_path / "stderr"
        with open(err, "w") as out:
            named = os.stat(stream_of)
            done = subprocess.run(
                [sys.executable, "-m", "scvd", "run"], stderr=out, stdout=subprocess.DEVNULL, timeout=60,
                env={**{k: v for k, v in os.environ.items() if not k.startswith("SCV")}, "SCV_HOME": str(home),
                     "PYTHONPATH": str(ROOT), "JOURNAL_STREAM": f"{named.st_dev}:{named.st_ino}"})
        return done.returncode, err.read_text()

    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text('[approvals]\npolicy = "sometimes"\n')
    code, stderr = run(tmp_path / "stderr")
    assert code == 2, stderr
    assert stderr.startswith("<3>scvd: configuration error: "), stderr
    assert "approvals.policy: Invalid enum value 'sometimes'" in stderr
    code, stderr = run(home / "config.toml")  # another stream's: not journald's
    assert code == 2 and stderr.startswith("scvd: configuration error: "), stderr


def test_a_socket_path_too_long_fails_check_config_and_run_daemon_as_it_fails_run(tmp_path):
    """check-config said all was well (exit 0) and `run --daemon` detached (exit 0) where `run`
    refused the socket path (exit 3): the three now say the same, before anything starts."""
    home = tmp_path / ("h" * 100)
    socket_path = home / "run" / "scvd.sock"
    said = (f"cannot start: the socket path {socket_path} is {len(str(socket_path))} bytes, more than a "
            "Unix socket's 107; set SCV_SOCKET to a shorter path (or a shorter SCV_HOME)")
    runs = check_config(home, None, "run")
    assert runs.returncode == 3 and said in runs.stderr, runs.stderr
    checked = check_config(home, None)
    assert (checked.returncode, checked.stderr, checked.stdout) == (3, f"scvd: {said}\n", "")
    detached = check_config(home, None, "run", "--daemon")
    assert detached.returncode == 3 and said in detached.stderr, detached.stderr
    assert not (home / "state" / "scvd.pid").exists()  # refused before detaching: no daemon started


@pytest.mark.parametrize("text, env, fragment", [
    ('[approvals]\npolicy = "sometimes"\n', {}, "config.toml: approvals.policy: Invalid enum value 'sometimes'"),
    ("", {"SCVD_TOOLS__MAX_TIMEOUT_SECONDS": "ten"},
     "env:SCVD_TOOLS__MAX_TIMEOUT_SECONDS (over "),
    # settings that tools check when they are built are checked here too, naming the file
    ('[adapters.gemini]\nmodel_args = ["-m", "{model}"]\n', {},
     "config.toml: adapters.gemini: no such agent; known agents: claude, codex, pi"),
    ('[adapters.claude]\nmodel_args = ["--model"]\n', {},
     "config.toml: adapters.claude.model_args: ['--model'] never uses {model}"),
    ("", {"SCVD_APPROVALS__ALWAYS_ASK": '["./.envrc"]'},
     "env:SCVD_APPROVALS__ALWAYS_ASK (over "),
    ('[adapters.claude]\npass_env = ["GH TOKEN"]\n', {},
     "config.toml: adapters.claude.pass_env: 'GH TOKEN' is not an environment variable name"),
    ("", {"SCVD_ADAPTERS__CODEX__PASS_ENV": '["HOME"]'},
     "env:SCVD_ADAPTERS__CODEX__PASS_ENV (over "),
])
def test_check_config_exits_2_on_an_error(tmp_path, text, env, fragment):
    done = check_config(tmp_path / "home", text, **env)
    assert done.returncode == 2
    assert fragment in done.stderr and "configuration error" in done.stderr
    assert done.stdout == ""


@pytest.mark.parametrize("text", [
    '[adapters.gemini]\nmodel_args = ["-m", "{model}"]\n',
    '[adapters.claude]\nmodel_args = ["--model"]\n',
    '[adapters.codex]\neffort_args = ["--effort"]\n',
])
def test_loading_refuses_what_building_the_tools_refuses(tmp_path, text):
    """config.load (before READY=1) refuses the adapters that building the registry (after it)
    would, naming where the value came from; a Config made without load() is checked there too."""
    from scvd import paths as paths_mod, tools

    path = tmp_path / "config.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as loaded:
        load(path, env={})
    cfg = msgspec.convert(tomllib.loads(text), Config)
    with pytest.raises(ConfigError) as built:
        tools.build_registry(cfg, paths_mod.resolve({"SCV_HOME": str(tmp_path)}))
    assert loaded.value.message == f"{path}: {built.value.message}"


# --- docs/configuration.md cannot drift ----------------------------------------------------


def leaf_keys(struct: type = Config, prefix: str = "") -> dict[str, Any]:
    """Every key path of the config Structs with its default; dict tables as `<name>`."""
    keys: dict[str, Any] = {}
    hints = typing.get_type_hints(struct, include_extras=True)
    for f in msgspec.structs.fields(struct):
        name = prefix + f.encode_name
        if f.required:  # a key of a table that has no default (providers.<name>.model)
            keys[name] = REQUIRED
            continue
        default = f.default_factory() if f.default is msgspec.NODEFAULT else f.default
        kind = hints[f.name]
        if isinstance(default, msgspec.Struct):
            keys.update(leaf_keys(type(default), name + "."))
        elif typing.get_origin(kind) is dict and _is_struct(typing.get_args(kind)[1]):
            keys.update(leaf_keys(typing.get_args(kind)[1], name + ".<name>."))
        else:
            keys[name] = default
    return keys


REQUIRED = object()


def _is_struct(kind: Any) -> bool:
    return isinstance(kind, type) and issubclass(kind, msgspec.Struct)


def toml_default(value: Any) -> str:
    if value is None:
        return "unset"
    if value is REQUIRED:
        return "required"
    return msgspec.json.encode(value).decode() if not isinstance(value, float) else repr(value)


def documented_rows(whole: bool = False, cell: int = 3, everywhere: bool = False) -> dict[str, str]:
    """`key -> default cell` (or its whole row, or another cell) of the table under "## Every key" in
    docs/configuration.md (of every key table in it: `everywhere`), whose columns are key, type, default, meaning."""
    text = (ROOT / "docs" / "configuration.md").read_text()
    section = text if everywhere else text.split("\n## Every key\n", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        m = re.match(r"\| `([^`]+)` \| ([^|]+) \| ([^|]+) \|", line)
        if m and "." in m.group(1) or m and m.group(1) == "log_level":
            rows[m.group(1)] = line if whole else m.group(cell).strip()
    return rows


def documented_type(kind: Any) -> str:
    """The type column's word for a key of msgspec type `kind`."""
    words = {msgspec.inspect.IntType: "integer", msgspec.inspect.FloatType: "number",
             msgspec.inspect.StrType: "string", msgspec.inspect.LiteralType: "string",
             msgspec.inspect.BoolType: "boolean", msgspec.inspect.ListType: "list of strings"}
    return words.get(type(kind), "table")


def test_every_config_key_has_its_type_documented():
    """Whole or decimal was implied by the default's spelling (`120` took no 90.5, `900.0` did)."""
    documented, types = documented_rows(cell=2, everywhere=True), leaf_types()
    # `env.<name>.`: an entry of the table `env`
    types = {key.removesuffix(".<name>."): None if key.endswith(".<name>.") else kind for key, kind in types.items()}
    assert len(documented) >= len(types) >= 50 and set(documented) <= set(types)
    for key, cell in documented.items():
        assert cell == documented_type(types[key]), f"docs/configuration.md: the type of {key} is {cell!r}"


def test_every_config_key_is_documented_with_its_default():
    rows = documented_rows()
    keys = leaf_keys()
    assert len(keys) >= 20
    missing = sorted(set(keys) - set(rows))
    stale = sorted(set(rows) - set(keys))
    assert not missing, f"add these keys to docs/configuration.md: {missing}"
    assert not stale, f"docs/configuration.md documents keys that do not exist: {stale}"
    for key, default in keys.items():
        want = toml_default(default)
        cell = rows[key]
        assert (f"`{want}`" in cell if want not in ("unset", "required") else want in cell), (key, want, cell)


def leaf_types(info: Any = None, prefix: str = "") -> dict[str, Any]:
    """`key -> its msgspec.inspect type` for every leaf key of the config Structs (an optional one's
    `... | None` as the type it takes besides None)."""
    info = info or msgspec.inspect.type_info(Config)
    types: dict[str, Any] = {}
    for f in info.fields:
        kind = f.type
        if isinstance(kind, msgspec.inspect.UnionType):  # an optional value: `... | None`
            kind = next(t for t in kind.types if not isinstance(t, msgspec.inspect.NoneType))
        if isinstance(kind, msgspec.inspect.DictType):
            kind, name = kind.value_type, f"{prefix}{f.encode_name}.<name>."
        else:
            name = prefix + f.encode_name
        if isinstance(kind, msgspec.inspect.StructType):
            types.update(leaf_types(kind, name if name.endswith(".") else name + "."))
        else:
            types[name] = kind
    return types


def lower_bounds() -> dict[str, float]:
    """`key -> its lower bound` (msgspec's ge, or gt) for every number key of the config Structs."""
    return {name: kind.ge if kind.ge is not None else kind.gt for name, kind in leaf_types().items()
            if isinstance(kind, (msgspec.inspect.IntType, msgspec.inspect.FloatType))}


def test_every_config_bound_is_documented():
    """A number above 0 goes without saying (the text above the table says so); any other bound is in its row."""
    text = (ROOT / "docs" / "configuration.md").read_text()
    assert "A number must be above\n0 unless its row gives another bound" in text
    rows, bounds = documented_rows(whole=True), lower_bounds()
    assert set(bounds) <= set(rows) and len(bounds) >= 20
    for key, bound in bounds.items():
        if bound not in (0, 1) or key == "audit.keep":
            want = f"At least {bound}" if bound else "`0`"
            assert want in rows[key], f"docs/configuration.md: say {want!r} in the row of {key}"


def test_every_config_choice_is_documented():
    """A key that takes one of fixed values (`sandbox.mode`) names each in its row."""
    rows = documented_rows(whole=True)
    choices = {name: kind.values for name, kind in leaf_types().items()
               if isinstance(kind, msgspec.inspect.LiteralType) and name in rows}
    assert len(choices) >= 6
    for key, values in choices.items():
        missing = [v for v in values if f"`{v}`" not in rows[key]]
        assert not missing, f"docs/configuration.md: name {missing} in the row of {key}"


def toml_examples() -> list[Any]:
    """Every ```toml block of README.md, docs/ and examples/, as (where, text)."""
    files = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "examples").rglob("*.md"))]
    return [pytest.param(m.group(1), id=f"{f.name}:{f.read_text()[:m.start()].count(chr(10)) + 1}")
            for f in files for m in re.finditer(r"```toml\n(.*?)```", f.read_text(), re.S)]


@pytest.mark.parametrize("text", toml_examples())
def test_every_toml_example_of_the_docs_loads(tmp_path, text):
    """A user copies them into config.toml (the secrets.toml example into secrets.toml)."""
    from scvd.secrets import SecretStore

    if "[keyring]" in text:
        store = SecretStore(tmp_path / "secrets.toml", env={})
        store.path.write_text(text)
        store.path.chmod(0o600)
        assert store.get("GITHUB_TOKEN") and {e.name for e in store.list()} >= {"GITHUB_TOKEN", "OPENAI_API_KEY"}
        return
    (tmp_path / "config.toml").write_text(text)
    assert load(tmp_path / "config.toml", env={}).config.log_level


def test_an_environment_error_names_the_file_once(tmp_path):
    done = check_config(tmp_path / "home", "", SCVD_TOOLS__MAX_TIMEOUT_SECONDS="ten")
    assert done.returncode == 2
    assert done.stderr.count(str(tmp_path / "home" / "config.toml")) == 1, done.stderr
