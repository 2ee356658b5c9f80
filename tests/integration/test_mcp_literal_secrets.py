"""An MCP server's literal credentials (a token pasted into its `headers` or `env`, not `{secret = ...}`):
never shown in its results, errors, stderr or scvd's log, on a real daemon and real servers."""

from __future__ import annotations

from pathlib import Path

import pytest

from test_mcp_servers import (QUIRKS_SERVER, free_port, leaked, quirks_stdio_table, scvctl, server, start_http_server,
                              stop)

pytestmark = [pytest.mark.slow, pytest.mark.one_loop]

HEADER_TOKEN = "sk-literalHEADERtoken0123456789abcdef"
API_KEY = "literal-xapikey-ABCDEF0123456789"
ENV_TOKEN = "literal-stdio-env-TOKEN-0123456789abcdef"


def test_a_literal_header_credential_never_shows_in_a_result_an_error_or_the_debug_log(make_daemon, workspace):
    """`headers = {Authorization = "Bearer sk-..."}` pasted into the table: a server echoing its request's
    headers handed the token back in a result and an isError text, and `scvd run -v` logged it in the MCP
    SDK's line for each SSE message; a `{secret = ...}` header read `[secret KEY]` in all of them."""
    port = free_port()
    web = start_http_server(port, QUIRKS_SERVER, ())
    try:
        d = make_daemon(f'[mcp.servers.web]\nurl = "http://127.0.0.1:{port}/mcp"\nrisk = "read_only"\n'
                        f'headers = {{Authorization = "Bearer {HEADER_TOKEN}", X-Api-Key = "{API_KEY}", '
                        'X-Team = "blue-team"}\n', args=["-v"])
        with d.client(name="t") as c:
            server(c, "web")
            session = c.open_session(workspace)
            echoed = c.call(session, "mcp__web__sent", {})
            failed = c.call(session, "mcp__web__sent", {"fail": True})
        hidden = "Authorization: [secret header Authorization]; X-Api-Key: [secret header X-Api-Key]; X-Team: blue-team"
        assert echoed.ok and echoed.result["text"] == hidden, echoed
        assert (failed.error.kind, failed.error.message) == ("failed", f"mcp__web__sent: refused {hidden}"), failed
        log = d.log()
        assert "mcp.client.streamable_http: SSE message" in log and "[secret header X-Api-Key]" in log, log
        for shown in (log, scvctl(d, "status")):
            assert "sk-literal" not in shown and "literal-xapikey" not in shown, shown
    finally:
        stop(web)


def test_a_literal_env_credential_never_shows_in_a_result_an_error_stderr_or_the_log(make_daemon, workspace,
                                                                                       tmp_path: Path):
    """`env = {LEAK_TOKEN = "literal-..."}` pasted into a stdio server's table: its value came back in a
    result, an isError text, a progress message and the stderr of its exit (the call's `unavailable`
    error, `scvctl status`, the `is down` log line)."""
    d = make_daemon(quirks_stdio_table("results", tmp_path / "starts")
                    + f'risk = "read_only"\nenv = {{LEAK_TOKEN = "{ENV_TOKEN}", MODE = "plain"}}\n')
    with d.client(name="t") as c:
        failed, echoed, progress, crashed = leaked(c, workspace)
        down = server(c, "raw", "down")
    assert echoed.ok and echoed.result["text"] == "token=[secret env LEAK_TOKEN]", echoed
    assert echoed.result["structured_content"] == {"token": "[secret env LEAK_TOKEN]",
                                                   "[secret env LEAK_TOKEN]": "as a key"}, echoed
    assert (failed.error.kind, failed.error.message) == (
        "failed", "mcp__raw__leak_error: 401 Bad credentials for [secret env LEAK_TOKEN]"), failed
    assert progress == ["mcp__raw__leak_progress: 1 authenticating with [secret env LEAK_TOKEN]"], progress
    assert crashed.error.kind == "unavailable" and crashed.error.message == (
        "mcp server raw went away during the call (crash): the server process exited with status 5; stderr: "
        "fatal: lost my way with [secret env LEAK_TOKEN]; scvd restarts it (see `scvctl status`)"), crashed.error
    assert "fatal: lost my way with [secret env LEAK_TOKEN]" in down.error, down
    log = d.log()
    assert "mcp server raw is down: the server process exited with status 5; stderr: fatal: lost my way with " \
           "[secret env LEAK_TOKEN]" in log, log
    for shown in (log, scvctl(d, "status")):
        assert "literal-stdio" not in shown, shown
