"""An MCP server's link and a secret stored while it starts: started again only when it read the old value.
And its tools' argument check."""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from types import SimpleNamespace

import pytest

pytest.importorskip("mcp")

from scvd.config import McpServerConfig, SecretRef  # noqa: E402
from scvd.errors import CredentialMissing, InvalidArguments, ScvError  # noqa: E402
from scvd.mcp.link import ServerLink  # noqa: E402
from scvd.mcp.tool import McpTool, ToolSpec  # noqa: E402
from scvd.tools.contract import ToolRisk  # noqa: E402
from scvd import secrets as secrets_mod  # noqa: E402

CFG = McpServerConfig(command="/bin/true", env={"T": SecretRef(secret="K")})


async def until(check, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.001)


class Launches:
    """A launch that finds K missing each time; the second one, once reading, waits for `go`."""

    def __init__(self) -> None:
        self.count = 0
        self.reading, self.go = threading.Event(), threading.Event()

    def __call__(self) -> None:
        self.count += 1
        if self.count == 2:
            self.reading.set()
            self.go.wait(5)
        raise CredentialMissing("mcp.servers.raw.env T needs the secret K, which is not set", keys=("K",))


@pytest.fixture(autouse=True)
def one_secrets_thread(monkeypatch):
    """One thread for secret work (a launch reads the store there): a job holding it keeps the next
    start's read queued, i.e. not begun."""
    secrets_mod.stop_threads()
    monkeypatch.setattr(secrets_mod, "THREADS", 1)
    yield
    secrets_mod.stop_threads()


async def down_once(launches: Launches) -> ServerLink:
    link = ServerLink("raw", CFG, launch=launches, on_tools=lambda *_: None)
    link.start()
    await until(lambda: link.state == "down" and launches.count == 1)
    return link


@pytest.fixture
def backoff_of_an_hour(monkeypatch):
    """A start that comes at all comes at once (for a stored secret), not after its backoff."""
    from scvd.mcp import link as link_mod

    monkeypatch.setattr(link_mod, "BACKOFF_FIRST", 3600.0)
    monkeypatch.setattr(link_mod, "BACKOFF_MAX", 3600.0)


def test_a_secret_stored_before_a_start_reads_it_does_not_start_it_again(backoff_of_an_hour):
    async def scenario() -> tuple[int, str]:
        launches = Launches()
        link = await down_once(launches)
        busy = threading.Event()
        held = secrets_mod.off_loop(busy.wait, 5)
        stored_at = time.monotonic()  # K stored now: the backoff ends
        link.retry_now(stored_at)
        await until(lambda: link.state == "starting")
        # told again (a second key, another server's store) while this start's read waits its turn:
        # it will read what is stored by now, so nothing is to be started again
        link.retry_now(stored_at)
        busy.set()
        await held
        await until(lambda: launches.reading.is_set())
        launches.go.set()
        await until(lambda: link.state == "down" and launches.count == 2)
        await asyncio.sleep(0.3)  # a start again would come at once, not in the hour's backoff
        starts = launches.count
        await link.stop()
        return starts, link.error or ""

    starts, error = asyncio.run(scenario())
    assert starts == 2
    assert "needs the secret K" in error


def test_a_secret_stored_after_a_start_read_the_old_value_starts_it_again_at_once(backoff_of_an_hour):
    async def scenario() -> int:
        launches = Launches()
        link = await down_once(launches)
        link.retry_now(time.monotonic())
        await until(lambda: launches.reading.is_set())  # the second start is reading (the old value)
        link.retry_now(time.monotonic())  # stored since: it must not keep what it read
        launches.go.set()
        await until(lambda: launches.count == 3)  # not after the hour's backoff
        await link.stop()
        return launches.count

    assert asyncio.run(scenario()) == 3


def test_a_call_names_the_secret_a_down_server_needs_but_not_while_it_starts_again():
    from scvd.errors import Unavailable

    async def scenario() -> tuple[BaseException, BaseException]:
        link = await down_once(Launches())
        with pytest.raises(CredentialMissing) as down:
            await link.call("echo", {}, None)
        link.state = "starting"  # a value stored since: the start under way may well work
        with pytest.raises(Unavailable) as starting:
            await link.call("echo", {}, None)
        await link.stop()
        return down.value, starting.value

    down, starting = asyncio.run(scenario())
    assert down.keys == ("K",) and "it needs K: store a new value with store_secret" in down.message
    assert starting.message.startswith("mcp server raw is starting")


def test_a_call_of_a_server_whose_secret_is_gone_names_store_secret_once_for_that_tool(tmp_path):
    """Its down reason named `scvctl secrets set` only, not store_secret (an agent's own way, seed 003);
    naming it there too, a call of a tool listed before must not say it twice, nor for the server alone."""
    from pathlib import Path

    from scvd.mcp import spec

    quirks = Path(__file__).parent / "helpers" / "mcp_stdio_quirks.py"
    cfg = McpServerConfig(command=sys.executable, args=[str(quirks), "results"], sandbox=False,
                          env={"LEAK_TOKEN": SecretRef(secret="K")})
    stored = {"K": "tok-1"}
    store = SimpleNamespace(get=stored.get)

    def launch() -> spec.StdioLaunch:
        return spec.stdio_launch("raw", cfg, secrets=store, sandbox=None, network=False,
                                 base_env={"PATH": "/usr/bin:/bin"}, home=tmp_path)

    async def scenario() -> tuple[str | None, BaseException]:
        link = ServerLink("raw", cfg, launch=launch, on_tools=lambda *_: None)
        link.start()
        await until(lambda: link.state == "ready", timeout=30)
        del stored["K"]  # `scvctl secrets rm K`: the restart after its crash finds none
        with pytest.raises(ScvError):
            await link.call("crash", {}, nothing)
        await until(lambda: link.state == "down" and link.needs == ("K",), timeout=30)
        error = link.error
        with pytest.raises(ScvError) as call:
            await link.call("echo", {}, nothing)
        await link.stop()
        return error, call.value

    error, call = asyncio.run(scenario())
    said = "credential_missing: mcp.servers.raw.env LEAK_TOKEN needs the secret K, which is not set; store it with "
    assert error == (f"{said}store_secret (key 'K', tool 'mcp__raw'), which starts the server with it at once, or "
                     "`scvctl secrets set K`, which the server's next restart reads"), error
    assert isinstance(call, CredentialMissing) and call.keys == ("K",), call
    assert call.message.startswith(f"mcp server raw is down: {said}store_secret (key 'K', tool 'mcp__raw__echo'), "
                                   "which starts the server with it at once, or `scvctl secrets set K`, which the "
                                   "server's next restart reads; scvd restarts it in "), call.message
    assert call.message.count("store_secret") == 1 and call.message.endswith(", then call the tool again")


# a server that answers initialize with an error, then waits for its stdin's end, or (-32000) exits at once
ANSWERS_INITIALIZE = ("import json, sys; asked = json.loads(sys.stdin.readline()); print(json.dumps({'jsonrpc': "
                      "'2.0', 'id': asked['id'], 'error': {'code': CODE, 'message': 'invalid api key'}}), flush=True); "
                      "CODE == -32000 or sys.stdin.read()")
REFUSALS = {  # what a server says on stderr (or answering initialize) as its start fails; whether it is a refusal
    "Error: 401 Unauthorized: check GITHUB_TOKEN": True, "Error: invalid API key": True,
    "Authentication failed for old": True,  # its token quoted: shown as its key
    "Error: cannot find module 'x'": False, "SyntaxError: invalid token": False,
}
FIX = ("that reads like a refused credential, and mcp server raw is given the secret K: store a new value with "
       "store_secret (key 'K', tool 'mcp__raw') or `scvctl secrets set K`")


@pytest.mark.parametrize("said", [*REFUSALS, "initialize=-32001", "initialize=-32000"])
def test_a_stdio_server_that_fails_its_start_saying_its_token_was_refused_names_its_secrets_and_the_fix(said):
    """A server that checks its token at start and exits with `401 Unauthorized` was `down` with that
    stderr and named no key: calls said `unavailable`, and a chat's model was not told to heal it. Its
    needs came, but its error (status, and the call of a server never up) named neither key nor store_secret.
    One answering initialize so was told to check that `command` starts an MCP server, which it does;
    and one answering with -32000 (the SDK's code for a closed connection too) and exiting was only
    `exited with status 0`, its words lost."""
    from scvd.mcp.spec import StdioLaunch

    refusal = REFUSALS.get(said, True)
    code = said.partition("=")[2]
    argv = (["/bin/sh", "-c", f"echo \"{said}\" >&2; exit 1"] if not code
            else [sys.executable, "-c", ANSWERS_INITIALIZE.replace("CODE", code)])

    def launch() -> StdioLaunch:
        return StdioLaunch(argv=argv, env={"T": "old"}, cwd="/", sandboxed=False)

    async def scenario() -> tuple[ServerLink, BaseException]:
        link = ServerLink("raw", CFG, launch=launch, on_tools=lambda *_: None)
        link.start()
        await until(lambda: link.state == "down")
        with pytest.raises(ScvError) as call:  # of a tool it listed before (one never up lists none)
            await link.call("echo", {}, None)
        await link.stop()
        return link, call.value

    link, call = asyncio.run(scenario())
    assert link.needs == (("K",) if refusal else ()), link.error
    shown = said.replace("old", "[secret K]") if not code else "invalid api key"
    assert shown in (link.error or "") and "old" not in (link.error or ""), link.error
    if code:
        assert link.error == f"its initialize was answered with an error: invalid api key (code {code}); {FIX}"
    assert (link.error or "").endswith(FIX) == refusal, link.error
    if refusal:
        assert isinstance(call, CredentialMissing), call
        assert call.message.startswith(f"mcp server raw is down: {link.error.removesuffix(FIX)}"), call.message
        assert call.message.endswith(FIX.replace("'mcp__raw'", "'mcp__raw__echo'") + ", then call the tool again")
    else:
        assert "store_secret" not in call.message, call.message


@pytest.mark.parametrize("said, hinted", [("Error: GITHUB_PERSONAL_ACCESS_TOKEN not set", True),
                                          ("Missing environment variable: BRAVE_API_KEY", True),
                                          ("Error: GH_TOKEN not set", False), ("HTTPS_PROXY_URL is required", False)])
def test_a_stdio_server_saying_a_variable_it_is_not_given_is_unset_is_pointed_at_its_env_table(said, hinted):
    """`GITHUB_PERSONAL_ACCESS_TOKEN not set` from a server scvd started with its secret (as GITHUB_TOKEN,
    say) left a person to guess that the config passes the secret under another name: the error now
    says which names its env gives and the table that would give it the one it reads. No key is wanted
    (its secret is stored: storing it again would not help)."""
    from scvd.mcp.spec import StdioLaunch

    def launch() -> StdioLaunch:
        return StdioLaunch(argv=["/bin/sh", "-c", f"echo '{said}' >&2; exit 1"], env={"GH_TOKEN": "old"}, cwd="/",
                           sandboxed=False)

    async def scenario() -> ServerLink:
        cfg = McpServerConfig(command="/bin/true", env={"GH_TOKEN": SecretRef(secret="K")})
        link = ServerLink("raw", cfg, launch=launch, on_tools=lambda *_: None)
        link.start()
        await until(lambda: link.state == "down")
        await link.stop()
        return link

    link = asyncio.run(scenario())
    var = said.rpartition(" ")[2] if said.startswith("Missing") else said.split()[1]
    hint = (f"; mcp.servers.raw.env gives it GH_TOKEN (secret K), not {var}: if it reads its credential from {var}, pass "
            f"the secret under that name: env = {{{var} = {{secret = \"K\"}}}}")
    assert link.error == f"the server process exited with status 1; stderr: {said}{hint if hinted else ''}"
    assert link.needs == ()


def test_a_key_pasted_into_the_url_is_hidden_however_the_http_library_prints_the_url():
    """httpx prints a url its own way (`:443` dropped, the host lower-cased): replacing the configured
    url whole missed it, and a redirect's or a status error's message showed the key."""
    cfg = McpServerConfig(url="https://MCP.Example.com:443/mcp?api_key=sk-url-4711&v=2",
                          query={"token": "tok-query-4712", "plan": "pro"})
    link = ServerLink("hosted", cfg, launch=lambda: None, on_tools=lambda *_: None)
    link.error = ("Redirect to https://mcp.example.com/mcp?api_key=sk-url-4711&v=2&token=tok-query-4712&plan=pro "
                  "not followed")
    assert "sk-url-4711" not in link.error and "tok-query-4712" not in link.error, link.error
    assert "[secret url query api_key]" in link.error and "v=2" in link.error and "plan=pro" in link.error


def test_a_url_query_value_is_hidden_by_the_rule_a_chat_providers_query_is():
    """A length test took every value of 8+ characters for a key (an `api-version` was blotted out of
    every log line) and showed a short key; a chat provider's query, the same values, answered otherwise."""
    cfg = McpServerConfig(url="https://mcp.example.com/mcp?api-version=2025-04-01-preview&key=rel-77",
                          query={"team": "blue-team", "X-Relay-Token": "tok-9"})
    link = ServerLink("hosted", cfg, launch=lambda: None, on_tools=lambda *_: None)
    link.error = "401 for api-version 2025-04-01-preview of blue-team: bad key rel-77 or tok-9"
    assert link.error == ("401 for api-version 2025-04-01-preview of blue-team: bad key [secret url query key] "
                          "or [secret url query X-Relay-Token]"), link.error


@pytest.mark.parametrize("name", ["auth", "sig", "session", "access", "Authorization", "proxy-authorization"])
def test_a_url_query_value_under_an_auth_like_name_is_hidden(name):
    """The shared rule knew no auth-like name: `auth=hunterhunter` (hidden by the old length test)
    was shown in status errors and call errors once the rule was shared."""
    cfg = McpServerConfig(url=f"https://mcp.example.com/mcp?{name}=hunterhunter&author=ada-lovelace")
    link = ServerLink("hosted", cfg, launch=lambda: None, on_tools=lambda *_: None)
    link.error = "401 for hunterhunter, as ada-lovelace"
    assert link.error == f"401 for [secret url query {name}], as ada-lovelace", link.error


def test_literal_header_and_env_credentials_are_hidden_by_the_rule_a_url_querys_are():
    """A token pasted into `headers` or `env` (not `{secret = ...}`) was shown in an error quoting it; the
    one rule (secret_like.py) picks them, and leaves a team name, a mode or a path as printed."""
    cfg = McpServerConfig(url="https://mcp.example.com/mcp", headers={
        "Authorization": "Bearer sk-literal-0123456789", "X-Api-Key": "xk-4711", "X-Team": "blue-team"})
    link = ServerLink("hosted", cfg, launch=lambda: None, on_tools=lambda *_: None)
    link.error = "401 for Bearer sk-literal-0123456789 (token sk-literal-0123456789), key xk-4711, team blue-team"
    assert link.error == ("401 for [secret header Authorization] (token [secret header Authorization]), key "
                          "[secret header X-Api-Key], team blue-team"), link.error
    cfg = McpServerConfig(command="/bin/true", env={"LIT_TOKEN": "lit-0451", "DSN": "u:p@Zk3jH8sQ2mP9vX4cB7nW",
                                                    "MODE": "plain", "CACHE": "/var/cache/x"})
    link = ServerLink("raw", cfg, launch=lambda: None, on_tools=lambda *_: None)
    link.error = "bad lit-0451 for u:p@Zk3jH8sQ2mP9vX4cB7nW in plain mode at /var/cache/x"
    assert link.error == "bad [secret env LIT_TOKEN] for [secret env DSN] in plain mode at /var/cache/x", link.error


def test_a_misspelt_argument_of_a_closed_schema_names_the_one_meant():
    """It said `'path' is a required property` (the first error jsonschema gave), where a script tool
    says which name was meant: the model sent `pth`."""
    schema = {"type": "object", "properties": {"path": {"type": "string"}, "head": {"type": "number"}},
              "required": ["path"], "additionalProperties": False}
    tool = McpTool(ServerLink("fs", CFG, launch=lambda: None, on_tools=lambda *_: None),
                   ToolSpec(name="read", description="Reads.", input_schema=schema),
                   risk=ToolRisk.READ_ONLY, risk_from="test", timeout=None)
    with pytest.raises(InvalidArguments) as info:
        tool.decode({"pth": "notes.txt"})
    assert info.value.message == ("mcp__fs__read: Additional properties are not allowed ('pth' was unexpected); "
                                  "did you mean 'path'? (properties: path, head)")


def quirks(mode: str, env: dict[str, str] | None = None):
    """A launch of tests/helpers/mcp_stdio_quirks.py in `mode`, with `env`."""
    import sys
    from pathlib import Path

    from scvd.mcp.spec import StdioLaunch

    script = Path(__file__).parent / "helpers" / "mcp_stdio_quirks.py"
    return lambda: StdioLaunch(argv=[sys.executable, str(script), mode], env=env or {}, cwd="/", sandboxed=False)


async def nothing(*_: object) -> None:
    pass


def test_a_call_answered_with_the_code_the_sdk_gives_a_closed_connection_fails_alone():
    """JSON-RPC leaves -32000 to servers (a rate limit, say); the SDK says a connection closed with it too:
    such an answer was taken for the server gone (`unavailable`, `went away during the call`), and scvd
    dropped the connection and restarted the server, cutting off every other call."""
    from scvd.errors import Failed

    async def scenario() -> tuple[BaseException, str, int, str]:
        starts: list[int] = []
        link = ServerLink("raw", CFG, launch=quirks("closed-code"), on_tools=lambda *_: starts.append(1))
        link.start()
        await until(lambda: link.state == "ready", timeout=30)
        with pytest.raises(ScvError) as info:
            await link.call("busy", {}, nothing)
        after = await link.call("echo", {"still": "here"}, nothing)
        state = link.state
        await link.stop()
        return info.value, after.text, len(starts), state

    failed, text, starts, state = asyncio.run(scenario())
    assert type(failed) is Failed and failed.message == "mcp server raw: busy: rate limited: try in 30 s", failed
    assert (text, starts, state) == ('{"still": "here"}', 1, "ready")


def test_a_stdio_server_that_dies_mid_call_is_reported_with_the_reason_it_wrote_last():
    """Its last stderr line (no newline at its end, a child of it holding the pipe) was in the pipe
    when scvd tore the connection down and cancelled the stderr reader at once: the call and
    `scvctl status` said only `exited with status 6`, not why."""
    from scvd.errors import Unavailable

    async def scenario() -> tuple[str, ServerLink]:
        link = ServerLink("raw", CFG, launch=quirks("dies-mid-call"), on_tools=lambda *_: None)
        link.start()
        await until(lambda: link.state == "ready", timeout=30)
        with pytest.raises(Unavailable) as info:
            await link.call("die", {}, nothing)
        await until(lambda: link.state == "down", timeout=30)
        await link.stop()
        return info.value.message, link

    message, link = asyncio.run(scenario())
    assert message.startswith("mcp server raw went away during the call (die): the server process exited with "
                              "status 6; stderr: fatal: the disk is full; "), message
    assert link.error == "the server process exited with status 6; stderr: fatal: the disk is full", link.error


def test_a_stop_cut_short_returns_once_the_server_is_killed_and_reaped(monkeypatch):
    """Past its grace a stop cut the link short and returned at once: the server's SIGKILL and reaping
    were left to a loop that the daemon's stop closed next ("Event loop is closed", a zombie left)."""
    import signal

    from scvd.mcp import link as link_mod

    monkeypatch.setattr(link_mod, "STOP_GRACE", 0.2)  # while it still ignores its stdin's end

    async def scenario() -> None:
        link = ServerLink("raw", CFG, launch=quirks("slow-start=30"), on_tools=lambda *_: None)
        link.start()
        await until(lambda: link._proc is not None, timeout=30)
        await link.stop()
        assert link._task.done() and link._proc.popen.returncode == -signal.SIGKILL

    asyncio.run(scenario())


def test_a_huge_text_result_is_capped_and_a_secret_the_cap_cuts_reads_as_its_key():
    """The whole text (up to 64 MiB) was walked for the secrets before the 1 MiB cap cut it: the cap comes
    first now, and a value it cuts in two reads `[secret KEY]` on each side of the marker, as a script
    tool's output does (it read `[secr`: the stand-in was cut, not the value)."""
    from scvd.mcp.tool import OUTPUT_LIMIT

    token, half = "ghp-cut-0451-abcdef", OUTPUT_LIMIT // 2
    cfg = McpServerConfig(command="/bin/true", env={"LEAK_TOKEN": SecretRef(secret="LEAK_TOKEN")})
    size = 3 << 20
    # one in the head, one across the head's end, one dropped, one across the tail's start
    token_at = [100, half - 6, size // 2, size - half - 6]

    async def scenario() -> str:
        link = ServerLink("raw", cfg, launch=quirks("huge-results", {"LEAK_TOKEN": token}), on_tools=lambda *_: None)
        tool = McpTool(link, ToolSpec(name="mib", description="Answers mib MiB.", input_schema={"type": "object"}),
                       risk=ToolRisk.READ_ONLY, risk_from="test", timeout=None)
        link.start()
        await until(lambda: link.state == "ready", timeout=30)
        result = await tool.run({"mib": 3, "token_at": token_at}, None, SimpleNamespace(progress=None))
        await link.stop()
        return result["text"]

    text = asyncio.run(scenario())
    head, marker, tail = text.partition(f"\n... {size - OUTPUT_LIMIT} bytes omitted ...\n")
    assert marker and len(text.encode()) < OUTPUT_LIMIT + 100, text[:200]
    assert head == "x" * 100 + "[secret LEAK_TOKEN]" + "x" * (half - 6 - 100 - len(token)) + "[secret LEAK_TOKEN]"
    assert tail == "[secret LEAK_TOKEN]" + "x" * (half - len(token) + 6)


def test_a_stdio_server_that_exits_saying_its_token_was_revoked_mid_life_names_its_secret(backoff_of_an_hour,
                                                                                           tmp_path):
    """A server that checks its token at each API call, not at start, and exits `401 Unauthorized` when
    it was revoked: the call was `unavailable` (`went away`, scvd restarts it), and the server down
    with its exit and stderr only, naming no key; its restart comes up with the revoked token."""
    valid = tmp_path / "valid"
    valid.write_text("new")
    cfg = McpServerConfig(command="/bin/true", env={"LEAK_TOKEN": SecretRef(secret="K")})
    launch = quirks(f"revocable={valid}", env={"LEAK_TOKEN": "old"})

    async def scenario() -> tuple[ServerLink, BaseException, BaseException]:
        link = ServerLink("raw", cfg, launch=launch, on_tools=lambda *_: None)
        link.start()
        await until(lambda: link.state == "ready", timeout=30)
        with pytest.raises(ScvError) as died:
            await link.call("api", {}, nothing)
        await until(lambda: link.state == "down", timeout=30)
        with pytest.raises(ScvError) as down:
            await link.call("api", {}, nothing)
        await link.stop()
        return link, died.value, down.value

    link, died, down = asyncio.run(scenario())
    said = "the server process exited with status 1; stderr: Error: 401 Unauthorized (token [secret K])"
    assert isinstance(died, CredentialMissing) and died.keys == ("K",), died
    assert died.message == (
        f"mcp server raw went away during the call (api): {said}; scvd restarts it (see `scvctl status`); that "
        "reads like a refused credential, and mcp server raw is given the secret K: store a new value with "
        "store_secret (key 'K', tool 'mcp__raw__api'), then call the tool again (scvd starts the server again "
        "with it)"), died.message
    assert link.needs == ("K",) and link.error == f"{said}; {FIX}", link.error
    assert isinstance(down, CredentialMissing) and down.message == (
        f"mcp server raw is down: {said}; {FIX.replace('mcp__raw', 'mcp__raw__api')}, then call the tool again")
