"""What a configured MCP server becomes, as data: names, environment, sandbox argv, secrets."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

from scvd import http_fields
from scvd.config import ConfigError, McpServerConfig, SecretRef, load
from scvd.errors import CredentialMissing, Failed, Unavailable
from scvd.mcp import spec
from scvd.mcp.tool import OUTPUT_LIMIT, json_size, render
from scvd.search_paths import FALLBACK_PATH

from conftest import ROOT


class Secrets:
    def __init__(self, **values: str) -> None:
        self.values = values

    def get(self, key: str) -> str | None:
        return self.values.get(key)


class FakeSandbox:
    active = True

    def wrap(self, argv, *, workspace, network):
        return ["bwrap", "--bind", str(workspace), str(workspace), *(["--share-net"] if network else []), "--", *argv]


def launch(cfg: McpServerConfig, **kw):
    args = dict(secrets=Secrets(), sandbox=None, network=False, home=Path("/srv/own"),
                base_env={"PATH": "/usr/bin:/bin", "HOME": "/home/u", "OPENAI_API_KEY": "sk", "SCV_HOME": "/x",
                          "NOTIFY_SOCKET": "/run/n", "LANG": "C.UTF-8"})
    args.update(kw)
    return spec.stdio_launch("fs", cfg, **args)


def test_tool_names_carry_the_server_and_stay_usable_as_function_names():
    assert spec.tool_name("fs", "read_text_file") == "mcp__fs__read_text_file"
    assert spec.tool_name("every", "get-sum") == "mcp__every__get_sum"
    assert spec.tool_name("x", "A.b c/d") == "mcp__x__a_b_c_d"
    assert len(spec.tool_name("x", "t" * 100)) == 64


def test_a_stdio_server_gets_the_allow_listed_environment_plus_its_own():
    cfg = McpServerConfig(command="/bin/cat", args=["-u"], env={"MODE": "x", "TOKEN": SecretRef(secret="TOK")})
    planted = {"AWS_SECRET_ACCESS_KEY": "aws", "GH_TOKEN": "gh", "SSH_AUTH_SOCK": "/run/ssh",
               "HTTPS_PROXY": "http://proxy:3128", "SSL_CERT_FILE": "/etc/ca.pem"}
    base = {"PATH": "/usr/bin:/bin", "HOME": "/home/u", "OPENAI_API_KEY": "sk", "SCV_HOME": "/x",
            "NOTIFY_SOCKET": "/run/n", "LANG": "C.UTF-8", **planted}
    got = launch(cfg, secrets=Secrets(TOK="t0k"), base_env=base)
    assert got.argv == ["/bin/cat", "-u"] and got.cwd == "/srv/own" and not got.sandboxed
    assert got.env == {"PATH": "/usr/bin:/bin", "HOME": "/home/u", "LANG": "C.UTF-8", "MODE": "x", "TOKEN": "t0k",
                       "HTTPS_PROXY": "http://proxy:3128", "SSL_CERT_FILE": "/etc/ca.pem"}


def test_the_search_paths_of_a_servers_env_lose_what_it_would_read_against_its_working_directory():
    """`env = {PATH = "/opt/x/bin:", LD_LIBRARY_PATH = "lib"}` reached the server as written: a server whose
    cwd is a workspace (or a program it starts in one) ran a binary or loaded a library planted there."""
    cfg = McpServerConfig(command="/bin/cat", env={"PATH": "/opt/x/bin:", "LD_LIBRARY_PATH": "lib",
                                                   "PYTHONPATH": ".:/opt/py", "XDG_CONFIG_HOME": "rel", "MODE": "."})
    env = launch(cfg).env
    assert env["PATH"] == "/opt/x/bin" and env["PYTHONPATH"] == "/opt/py" and env["MODE"] == "."
    assert "LD_LIBRARY_PATH" not in env and "XDG_CONFIG_HOME" not in env
    assert launch(McpServerConfig(command="/bin/cat", env={"PATH": ""})).env["PATH"] == FALLBACK_PATH
    # a leading `~` is scvd's HOME, as in cwd: `PATH = "~/bin:/usr/bin"` served a bash-run server before
    home = os.path.expanduser("~")
    env = launch(McpServerConfig(command="/bin/cat", cwd="~", env={
        "PATH": "~/bin:/usr/bin", "XDG_CONFIG_HOME": "~/.config", "NODE_PATH": "$HOME/lib"})).env
    assert (env["PATH"], env["XDG_CONFIG_HOME"]) == (f"{home}/bin:/usr/bin", f"{home}/.config")
    assert "NODE_PATH" not in env  # scvd expands no variable


def test_a_command_is_looked_up_on_scvds_path_and_a_missing_one_is_unavailable():
    assert launch(McpServerConfig(command="cat")).argv[0] in ("/usr/bin/cat", "/bin/cat")
    with pytest.raises(Unavailable, match="command 'no-such-mcp' is not on scvd's PATH"):
        launch(McpServerConfig(command="no-such-mcp"))


def test_a_command_and_cwd_under_home_mean_scvds_home(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "srv").write_text("#!/bin/sh\n")
    (tmp_path / "bin" / "srv").chmod(0o755)
    got = launch(McpServerConfig(command="~/bin/srv", cwd="~/work"))
    assert got.argv == [f"{tmp_path}/bin/srv"] and got.cwd == f"{tmp_path}/work"


@pytest.mark.parametrize("made, said", [(None, "does not exist"), (0o644, "is not an executable file")])
def test_a_command_path_that_cannot_run_names_the_key_to_fix(tmp_path, made, said):
    """It was `cannot start the server: No such file or directory: /nonexistent/mcp`, restarting for
    good, with nothing pointing at the setting."""
    command = tmp_path / "mcp"
    if made is not None:
        command.write_text("#!/bin/sh\n")
        command.chmod(made)
    with pytest.raises(Unavailable) as info:
        launch(McpServerConfig(command=str(command)))
    assert info.value.message == f"mcp server fs: command '{command}' {said}; fix mcp.servers.fs.command"


def test_a_missing_secret_is_credential_missing_naming_the_key():
    cfg = McpServerConfig(url="http://127.0.0.1:1/mcp", headers={"Authorization": SecretRef(secret="GH_TOKEN")})
    with pytest.raises(CredentialMissing, match=r"headers Authorization needs the secret GH_TOKEN.*store_secret "
                       r"\(key 'GH_TOKEN', tool 'mcp__gh'\).*scvctl secrets set GH_TOKEN"):
        spec.http_headers("gh", cfg, Secrets())
    assert spec.http_headers("gh", cfg, Secrets(GH_TOKEN="abc")) == {"Authorization": "abc"}



def test_query_values_are_added_to_the_urls_query_encoded():
    cfg = McpServerConfig(url="https://h/mcp?plan=pro", query={"key": SecretRef(secret="H_KEY"), "v": "2"})
    with pytest.raises(CredentialMissing, match=r"mcp.servers.h.query key needs the secret H_KEY"):
        spec.http_launch("h", cfg, Secrets())
    got = spec.http_launch("h", cfg, Secrets(H_KEY="a+b/c=="))
    assert got.url == "https://h/mcp?plan=pro&key=a%2Bb%2Fc%3D%3D&v=2" and got.query == {"key": "a+b/c==", "v": "2"}
    assert spec.http_launch("h", McpServerConfig(url="https://h/mcp"), None).url == "https://h/mcp"
    fragment = McpServerConfig(url="https://h/mcp#top", query={"v": "2"})
    assert spec.http_launch("h", fragment, None).url == "https://h/mcp?v=2#top"


def test_a_secret_held_in_a_keyring_scvd_cannot_use_says_so(tmp_path):
    """secrets.toml lists the key as held in an OS keyring (`scvctl secrets set` in a desktop session)
    that scvd cannot use: "not set; store it with `scvctl secrets set`" sent the user to store it into
    that keyring again, and the server stayed down. A script tool's call said why already."""
    from scvd.secrets import SecretStore

    path = tmp_path / "secrets.toml"
    path.write_text('[keyring]\nnames = ["GH_TOKEN"]\n')
    store = SecretStore(path, env={}, use_keyring=False)
    cfg = McpServerConfig(url="http://127.0.0.1:1/mcp", headers={"Authorization": SecretRef(secret="GH_TOKEN")})
    with pytest.raises(CredentialMissing) as info:
        spec.http_headers("gh", cfg, store)
    assert info.value.message.startswith(
        f"mcp.servers.gh.headers Authorization needs the secret GH_TOKEN: the secret GH_TOKEN was stored in an OS "
        f"keyring ({path} lists it), which this process cannot use (keyring turned off)"), info.value.message
    assert info.value.keys == ("GH_TOKEN",)
    assert info.value.hint == "PYTHON_KEYRING_BACKEND=keyring.backends.null.Keyring scvctl secrets set GH_TOKEN"


@pytest.mark.parametrize("value", ["Bearer sk-live-1\n", "Bearer sk-live-1 ", "\tBearer sk-live-1", "Bear\rer x",
                                   "a\x7fb", "a\x00b"])
def test_a_stored_header_secret_http_cannot_send_is_refused_naming_the_key_not_the_value(value):
    cfg = McpServerConfig(url="http://127.0.0.1:1/mcp", headers={"Authorization": SecretRef(secret="GH_TOKEN")})
    with pytest.raises(CredentialMissing) as info:
        spec.http_headers("gh", cfg, Secrets(GH_TOKEN=value))
    assert info.value.keys == ("GH_TOKEN",)  # store_secret heals it
    assert info.value.message == (
        "mcp.servers.gh.headers Authorization: the stored secret GH_TOKEN is not a valid HTTP header value "
        "(a line break, a control character, or a space or tab at an end); store it again without them: "
        "`scvctl secrets set GH_TOKEN`")
    assert "sk-live" not in info.value.message


def test_a_header_value_may_hold_inner_spaces_tabs_and_non_ascii():
    for value in ("Bearer abc", "a\tb", "", "tok\u00e9n"):
        assert http_fields.value_ok(value), value

def test_the_sandbox_wraps_a_server_unless_it_opts_out():
    wrapped = launch(McpServerConfig(command="/bin/cat", cwd="/data"), sandbox=FakeSandbox())
    assert wrapped.argv == ["bwrap", "--bind", "/data", "/data", "--", "/bin/cat"] and wrapped.sandboxed
    plain = launch(McpServerConfig(command="/bin/cat", sandbox=False), sandbox=FakeSandbox())
    assert plain.argv == ["/bin/cat"] and not plain.sandboxed


@pytest.mark.parametrize("table, message", [
    ('[mcp.servers.fs]\nargs = ["x"]\n', "set exactly one of `command`"),
    ('[mcp.servers.fs]\ncommand = "a"\nurl = "http://h/"\n', "set exactly one of `command`"),
    ('[mcp.servers.web]\nurl = "ftp://h/"\n', "must start with http:// or https://, e.g. http://127.0.0.1:8080/v1"),
    ('[mcp.servers.web]\nurl = "http://h/"\nenv = {A = "b"}\n', "`args`, `env` and `cwd` are for stdio servers"),
    ('[mcp.servers.a__b]\ncommand = "x"\n', "a server name is 1-32 chars"),
    ('[mcp.servers.fs]\ncommand = "x"\nrisk = "none"\n', "mcp.servers.fs.risk: Invalid enum value 'none'"),
    ('[mcp.servers.fs]\ncommand = "x"\nenv = {A = {key = "B"}}\n', "mcp.servers.fs.env"),
    ('[mcp.servers.fs]\ncommand = "x"\nenv = {A = {secret = "my-token"}}\n',
     "mcp.servers.fs: env A: secret name 'my-token' is not valid: use letters, digits and _"),
    ('[mcp.servers.fs]\ncommand = "x"\nenv = {"A=B" = "c"}\n', "env name 'A=B' is not a variable name"),
    ('[mcp.servers.fs]\ncommand = "x"\nenv = {A = "b\\u0000"}\n', "env A: a value cannot hold a NUL byte"),
    ('[mcp.servers.fs]\ncommand = "x"\nargs = ["a\\u0000"]\n', "holds a NUL byte"),
    # read from the store at each start, a search path was neither checked nor cleaned
    ('[mcp.servers.fs]\ncommand = "x"\nenv = {LD_PRELOAD = {secret = "PRELOAD"}}\n',
     "mcp.servers.fs: env LD_PRELOAD: LD_PRELOAD is a search path, no secret: read from the secret store at each "
     "start, it is neither checked nor shown, and it decides which code the server runs; write its value here, each "
     "directory by its absolute path"),
    ('[mcp.servers.web]\nurl = "http://h/"\nheaders = {"X Token" = "t"}\n',
     "headers: 'X Token' is not an HTTP header name"),
    ('[mcp.servers.web]\nurl = "http://h/"\nheaders = {Authorization = "Bearer t\\n"}\n',
     "headers Authorization: the value is not a valid HTTP header value"),
    ('[mcp.servers.web]\nurl = "http://h/"\nheaders = {Authorization = {secret = "keyring"}}\n',
     "'keyring' is reserved"),
    ('[mcp.servers.web]\nurl = "http://h/"\nquery = {key = {secret = "my-key"}}\n',
     "mcp.servers.web: query key: secret name 'my-key' is not valid"),
    ('[mcp.servers.fs]\ncommand = "x"\nquery = {key = "k"}\n', "`headers` and `query` are for HTTP servers"),
    ('[providers.p]\nmodel = "m"\napi_key_secret = "1KEY"\n',
     "providers.p.api_key_secret: secret name '1KEY' is not valid"),
])
def test_a_wrong_server_table_names_the_key(tmp_path, table, message):
    path = tmp_path / "config.toml"
    path.write_text(table)
    with pytest.raises(ConfigError, match=".*") as caught:
        load(path, env={})
    assert message in caught.value.message and str(path) in caught.value.message


def test_a_disabled_server_and_a_long_timeout_load_as_before(tmp_path):
    """A table parked with enabled = false is not checked for what only a start would need, and an
    MCP server's own timeout above tools.max_timeout_seconds is its ceiling, as a tool.json timeout is."""
    path = tmp_path / "config.toml"
    path.write_text('[mcp.servers.parked]\ncommand = "x"\nenabled = false\nenv = {A = {secret = "not-yet"}}\n'
                    '[mcp.servers.slow]\ncommand = "x"\ntimeout_seconds = 4000\n')
    servers = load(path, env={}).config.mcp.servers
    assert servers["slow"].timeout_seconds == 4000 and not servers["parked"].enabled


def test_output_is_capped_at_one_mib_with_a_marker():
    text, items = render([{"type": "text", "text": "a" * (OUTPUT_LIMIT + 10)},
                          {"type": "image", "data": "QUJD", "mime_type": "image/png"}])
    assert len(text.encode()) < OUTPUT_LIMIT + 100 and "bytes omitted" in text
    assert items == [{"type": "image", "mime_type": "image/png", "base64_chars": 4}]


@pytest.mark.parametrize("value", [{"a": "x\ud800"}, {"n": 1 << 70, "a": "\udce9"}])  # the latter: json's way
def test_a_structured_content_with_a_lone_surrogate_fails_its_call_saying_why(value):
    """msgspec's UnicodeEncodeError went through: a ValueError, which the link took for a broken connection
    (`unavailable`, the server restarted)."""
    with pytest.raises(Failed) as info:
        json_size(value)
    assert info.value.message == ("its structuredContent holds a string that is not valid Unicode (a lone surrogate "
                                  "such as \\ud800, half of a UTF-16 pair), which JSON cannot carry; report it to the "
                                  "server's author")
    assert json_size({"n": 1 << 70, "a": "é"}) == len('{"n":1180591620717411303424,"a":"é"}'.encode())




@pytest.mark.parametrize("configured", [False, True])
def test_the_mcp_sdk_is_imported_only_when_a_server_is_configured(tmp_path, configured):
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    if configured:
        (home / "config.toml").write_text('[mcp.servers.x]\ncommand = "/bin/false"\n')
    done = subprocess.run([sys.executable, str(ROOT / "tests" / "helpers" / "started_imports.py"), str(home),
                           "mcp", "mcp_types", "pydantic", "anyio", "jsonschema"],
                          capture_output=True, text=True, cwd=ROOT, timeout=60,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert done.returncode == 0, done.stderr
    loaded = done.stdout.strip()
    assert (loaded == "") if not configured else ("mcp" in loaded.split(",")), loaded


# --- scvctl mcp's elicitation, as data -----------------------------------------------------

from scvd.mcp_host.jsonrpc import can_elicit, decision_of  # noqa: E402


@pytest.mark.parametrize("capabilities, expected", [
    ({}, False), ({"elicitation": {}}, True), ({"elicitation": {"form": {}}}, True),
    ({"elicitation": {"url": {}}}, False), ({"elicitation": True}, False), (None, False),
])
def test_a_host_elicits_when_it_can_show_a_form(capabilities, expected):
    assert can_elicit(capabilities) is expected


@pytest.mark.parametrize("reply, expected", [
    ({"result": {"action": "accept", "content": {"decision": "approve"}}}, ("approve", "once")),
    ({"result": {"action": "accept", "content": {"decision": "approve_session"}}}, ("approve", "session")),
    ({"result": {"action": "accept", "content": {"decision": "deny"}}}, ("deny", "once")),
    ({"result": {"action": "decline"}}, ("deny", "once")),
    ({"result": {"action": "cancel"}}, None),
    ({"result": {"action": "accept", "content": {"decision": "maybe"}}}, None),
    ({"error": {"code": -32600, "message": "no"}}, None),
])
def test_the_hosts_answer_becomes_a_decision_or_none(reply, expected):
    assert decision_of(reply) == expected


@pytest.mark.parametrize("said, refused", [
    ("401 Bad credentials for x", True), ("HTTP 401", True), ("Error: 403 Forbidden", True),
    ("Incorrect API key provided: sk-...", True), ("API token is invalid", True), ("invalid_auth", True),
    ("The access token expired", True), ("Token has expired", True), ("Authentication required", True),
    # the cloud APIs' own words (Anthropic, Slack, AWS)
    ("invalid x-api-key", True), ('{"type": "authentication_error"}', True), ("not_authed", True),
    ("token_revoked", True), ("An error occurred (ExpiredToken) when calling the GetObject operation", True),
    ("The security token included in the request is invalid.", True),
    # a bare key or token: a re-entered secret would not help, yet the person would be asked for one
    ("SyntaxError: invalid token at line 3", False), ('redis: invalid key "user:1"', False),
    ("cache key expired", False), ("rate limit: 429 Too Many Requests", False),
    # a name in a traceback: the failure may be anything
    ('File "app.py", line 9, in handle_auth_error', False), ("KeyError: 'default_auth_error_handler'", False),
    ("OAuth error: invalid_grant", True), ("AUTH_FAILED", True),
    # an API's snake_case error code, prefixed or not
    ('{"error": {"code": "user_authentication_failed"}}', True), ("error: authentication_failed", True),
    ("code=SSO_AUTH_FAILED", True),
    # a function named so, in a traceback's frame or called
    ('File "hooks.py", line 4, in on_auth_failed', False), ("self.on_auth_failed(request)", False),
    # the source line a traceback quotes under its frame, and Python's message naming what it lacks
    ('Traceback (most recent call last):\n  File "hooks.py", line 4, in <module>\n    callback = on_auth_failed\n'
     "RuntimeError: hooks are not registered", False),
    ("NameError: name 'on_auth_failed' is not defined", False),
    ("AttributeError: module 'hooks' has no attribute 'on_auth_failed'", False),
    # a refusal after a traceback still is one, also where a frame quotes no source
    ('Traceback (most recent call last):\n  File "app.py", line 9, in main\n    resp.raise_for_status()\n'
     "requests.exceptions.HTTPError: 401 Client Error: Unauthorized for url", True),
    ('  File "<frozen runpy>", line 88, in _run_code\nauth: {"code": "user_authentication_failed"}', True),
])
def test_only_an_error_about_a_credential_reads_as_refused(said, refused):
    cfg = McpServerConfig(command="srv", env={"TOKEN": SecretRef(secret="SRV_TOKEN")})
    got = spec.refused("srv", cfg, "run", f"mcp__srv__run: {said}")
    assert (got is not None) is refused, said
    if refused:
        assert got.keys == ("SRV_TOKEN",) and "store_secret (key 'SRV_TOKEN'" in got.message
