"""store_secret end to end: a real daemon, a requester, and a real approver answering secret.provide.

The value must reach the secret store and the script tool, and nothing else: not
a frame the requester got, not the daemon log, not the audit log.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from helpers import lockable_keyring, slow_keyring
from helpers.probe_tools import wait_event
from scvd import errors, protocol as p, secrets

from conftest import ROOT, start_child_client, wait_pending
from harness import RawConn, make_wrapped  # noqa: F401 (a fixture)
from test_script_tools import SHOWS_TOKEN, make_tool

VALUE = "sup3r-s3cret-VALUE-9f1c"
NO_KEYRING = {"PYTHON_KEYRING_BACKEND": "keyring.backends.null.Keyring"}


def recording(client: Any) -> list[bytes]:
    """Every byte the daemon sends this client, kept as it arrives."""
    seen: list[bytes] = []
    feed = client.core.feed

    def keep(data: bytes) -> None:
        seen.append(bytes(data))
        feed(data)

    client.core.feed = keep
    return seen


def secret_requested(watcher: Any, key: str) -> p.SecretRequested:
    return wait_event(watcher, lambda e: isinstance(e, p.SecretRequested) and e.key == key)


def start_watch(d: Any, answers: str) -> subprocess.Popen:
    """`scvctl approvals watch` with `answers` (a line per prompt) waiting in its stdin."""
    watch = subprocess.Popen([sys.executable, "-m", "scvctl", "approvals", "watch"], env=d.env,
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    watch.stdin.write(answers)
    watch.stdin.flush()
    return watch


def store_secret_once_watched(agent: Any, sid: str) -> Any:
    """store_secret for API_TOKEN, called again until the watcher has connected (before, nobody is asked)."""
    deadline = time.monotonic() + 30
    while True:
        done = agent.call(sid, "store_secret", {"key": "API_TOKEN", "tool": "script_token"})
        if done.ok or "no approver" not in done.error.message:
            return done
        assert time.monotonic() < deadline, "scvctl approvals watch never connected"
        time.sleep(0.1)


def answered_by_watch(d: Any, workspace: Path, answers: str) -> tuple[str, str]:
    """What `scvctl approvals watch` printed (stdout, stderr) after storing API_TOKEN from `answers`."""
    watch = start_watch(d, answers)
    try:
        with d.client(name="agent") as agent:
            done = store_secret_once_watched(agent, agent.open_session(workspace))
            assert done.ok, done.error
    finally:
        watch.terminate()
        out, err = watch.communicate(timeout=15)
    return out, err


@pytest.fixture
def setup(make_daemon, scv_home, workspace):
    make_tool(scv_home, "token", SHOWS_TOKEN, risk="read_only", secrets=["API_TOKEN"])
    d = make_daemon(home=scv_home, env=NO_KEYRING)
    return d


@pytest.mark.one_loop
def test_the_store_secret_flow_end_to_end_and_the_value_goes_nowhere_else(setup, workspace):
    d = setup
    with d.client(name="agent") as agent, d.client(name="person") as watcher:
        raw = recording(agent)
        watcher.request(p.ApprovalsWatch)
        sid = agent.open_session(workspace)
        first = agent.call(sid, "script_token", {"text": "x"})
        assert first.error.kind == "credential_missing" and "API_TOKEN" in first.error.message
        # the agent asks; a person enters the value; the agent hears only that it is stored
        call_id = agent.start_call(sid, "store_secret", {"key": "API_TOKEN", "tool": "script_token",
                                                         "question": "The API token is missing"}, turn="t1")
        request = secret_requested(watcher, "API_TOKEN")
        assert (request.session, request.call_id, request.tool) == (sid, call_id, "script_token")
        assert request.question == "The API token is missing"
        assert watcher.request(p.SecretProvide, request_id=request.request_id, value=VALUE).__class__ is p.Ok
        done = agent.wait_call(call_id)
        assert done.ok, done.error
        assert done.result == {"key": "API_TOKEN", "stored": True, "where": "file",
                               "next": "call script_token again"}
        resolved = wait_event(watcher, lambda e: isinstance(e, p.SecretResolved))
        assert (resolved.request_id, resolved.state) == (request.request_id, "stored")
        again = agent.call(sid, "script_token", {"text": "x"})
        assert again.ok and again.result["sha256"] == hashlib.sha256(VALUE.encode()).hexdigest()
        agent.request(p.Status)
    assert VALUE in (d.home / "secrets.toml").read_text()  # stored (no keyring here)
    assert VALUE.encode() not in b"".join(raw)
    assert VALUE not in d.log()
    audit = (d.home / "state" / "audit.log").read_text()
    assert "secret_resolved" in audit and "API_TOKEN" in audit and VALUE not in audit


@pytest.mark.one_loop
def test_store_secret_is_a_system_tool_whose_description_holds_the_lookup_order(setup):
    """Seed 003: a system_use tool, hidden from the ordinary listing; its own description holds the
    lookup order (keyring with account = the key's name, the secrets file, the environment), that
    an empty printenv proves nothing, and the auth failures it heals (an expired token among them). The keyring named must be the one the store uses."""
    with setup.client() as c:
        assert "store_secret" not in {t.name for t in c.request(p.ToolsList).tools}
        tool = {t.name: t for t in c.request(p.ToolsList, include_system=True).tools}["store_secret"]
    assert tool.flags["system_use"] and tool.flags["always_allow"] and tool.flags["no_timeout"]
    # in the order the store takes them: a value in the file before the keyring's (it was said the other way)
    assert f"read from secrets.toml, keyring ({secrets.SERVICE}/KEY), env." in tool.description
    # and when to call it, as seed 003 lists the auth failures: an MCP host's agent reads only this
    assert "(credential_missing/401/403/expired token)" in tool.description
    assert "an empty printenv proves nothing" in tool.input_schema["properties"]["key"]["description"]


@pytest.mark.one_loop
def test_the_third_round_in_a_turn_is_refused_and_a_new_turn_may_ask(setup, workspace):
    d = setup
    with d.client(name="agent") as agent, d.client(name="person") as watcher:
        watcher.request(p.ApprovalsWatch)
        sid = agent.open_session(workspace)
        args = {"key": "API_TOKEN", "tool": "script_token"}
        for n in range(2):
            call_id = agent.start_call(sid, "store_secret", args, turn="t1")
            request = secret_requested(watcher, "API_TOKEN")
            watcher.request(p.SecretProvide, request_id=request.request_id, value=f"{VALUE}-{n}")
            assert agent.wait_call(call_id).ok
        third = agent.call(sid, "store_secret", args, turn="t1")
        assert third.error.kind == "limit"
        assert "asked twice for script_token in this turn" in third.error.message
        assert "at most 2 per tool per turn" in third.error.message
        # another tool in the same turn, or the same tool in the next turn, may ask again
        call_id = agent.start_call(sid, "store_secret", args, turn="t2")
        request = secret_requested(watcher, "API_TOKEN")
        watcher.request(p.SecretDecline, request_id=request.request_id, reason="not now")
        declined = agent.wait_call(call_id)
        assert declined.error.kind == "denied" and "not now" in declined.error.message


def test_a_request_whose_every_approver_disconnected_is_not_a_round(setup, workspace):
    """The person's terminal closed (or the bridge reconnected) before anyone typed: nobody
    answered, so the agent may ask again in the same turn rather than be told the
    credential keeps failing."""
    d = setup
    with d.client(name="agent") as agent:
        sid = agent.open_session(workspace)
        args = {"key": "API_TOKEN", "tool": "script_token"}
        for _ in range(2):
            with d.client(name="person") as watcher:
                watcher.request(p.ApprovalsWatch)
                call_id = agent.start_call(sid, "store_secret", args, turn="t1")
                secret_requested(watcher, "API_TOKEN")
            gone = agent.wait_call(call_id)
            # it read `every approver asked for API_TOKEN disconnected; ... or `scvctl secrets set
            # API_TOKEN``: not that nobody had entered it, nor what the second command does
            assert (gone.error.kind, gone.error.hint) == ("unavailable", "scvctl secrets set API_TOKEN")
            assert gone.error.message == (
                "nobody entered API_TOKEN: every approver asked for it disconnected before answering (a closed "
                "terminal, a bridge that reconnected); run `scvctl approvals watch` in a terminal and call "
                "again, or store it yourself with `scvctl secrets set API_TOKEN`")
        unasked = agent.call(sid, "store_secret", args, turn="t1")  # nobody there now: no limit reached
        assert unasked.error.kind == "unavailable", unasked.error
        with d.client(name="person") as watcher:
            watcher.request(p.ApprovalsWatch)
            call_id = agent.start_call(sid, "store_secret", args, turn="t1")
            request = secret_requested(watcher, "API_TOKEN")
            watcher.request(p.SecretProvide, request_id=request.request_id, value=VALUE)
            done = agent.wait_call(call_id)
            assert done.ok, done.error


@pytest.mark.one_loop
def test_the_two_rounds_are_per_tool_so_a_turn_heals_each_failing_tool(make_daemon, scv_home, workspace):
    """Seed 003: at most two rounds per tool per turn, not per turn: the two tools a turn used, each
    failing for its own key, may both be healed."""
    make_tool(scv_home, "gh", SHOWS_TOKEN, risk="read_only", secrets=["GH_TOKEN"])
    make_tool(scv_home, "aws", SHOWS_TOKEN, risk="read_only", secrets=["AWS_KEY"])
    d = make_daemon(home=scv_home, env=NO_KEYRING)
    with d.client(name="agent") as agent:
        agent.request(p.ApprovalsWatch)  # asked itself: a refused round completes instead of asking
        sid = agent.open_session(workspace)
        for n, (key, tool) in enumerate([("GH_TOKEN", "script_gh")] * 2 + [("AWS_KEY", "script_aws")] * 2):
            call_id = agent.start_call(sid, "store_secret", {"key": key, "tool": tool}, turn="t1")
            asked = wait_event(agent, lambda e: isinstance(e, (p.SecretRequested, p.CallCompleted))
                               and e.call_id == call_id)
            assert isinstance(asked, p.SecretRequested), (n, asked)
            agent.request(p.SecretProvide, request_id=asked.request_id, value=f"{VALUE}-{n}")
            assert agent.wait_call(call_id).ok
        for key, tool in (("GH_TOKEN", "script_gh"), ("AWS_KEY", "script_aws")):
            third = agent.call(sid, "store_secret", {"key": key, "tool": tool}, turn="t1")
            assert third.error.kind == "limit" and f"asked twice for {tool} in this turn" in third.error.message


# exits 77 (the credential was refused) unless API_TOKEN is the value in its folder's `valid`
ROTATING = '#!/bin/bash\ncat >/dev/null\n[ "$API_TOKEN" = "$(cat "$SCV_TOOL_DIR/valid")" ] || exit 77\necho ok\n'


@pytest.mark.one_loop
@pytest.mark.parametrize("turn", [None, "t1"], ids=["no-turn", "one-turn"])
def test_without_a_turn_the_rounds_start_over_once_the_window_passed(make_wrapped, scv_home, workspace, turn):
    """An MCP host (no turn) counted two rounds per tool for the whole session: once its token expired
    a second time, the tool could not be healed again until a restart. A success of the tool does not
    start the count over (a model could name a tool that works without the key): a window does; a
    turn keeps its two rounds. The window is cut to 2 s here (an hour by default)."""
    folder = make_tool(scv_home, "token", ROTATING, risk="read_only", secrets=["API_TOKEN"])
    d = make_wrapped(home=scv_home, env={**NO_KEYRING, "HARNESS_STORE_SECRET_WINDOW": "2"})
    with d.client(name="agent") as agent:
        agent.request(p.ApprovalsWatch)  # asked itself
        sid = agent.open_session(workspace)

        def heal(value: str) -> p.CallCompleted:
            call_id = agent.start_call(sid, "store_secret", {"key": "API_TOKEN", "tool": "script_token"}, turn=turn)
            asked = wait_event(agent, lambda e: isinstance(e, (p.SecretRequested, p.CallCompleted))
                               and e.call_id == call_id)
            if isinstance(asked, p.CallCompleted):  # refused: nobody asked
                return asked
            agent.request(p.SecretProvide, request_id=asked.request_id, value=value)
            return agent.wait_call(call_id)

        def works() -> bool:
            return agent.call(sid, "script_token", {"text": "x"}, turn=turn).ok

        (folder / "valid").write_text("token-1")
        assert heal("wrong").ok and heal("token-1").ok and works()  # healed in two rounds
        (folder / "valid").write_text("token-2")  # expired again
        third = heal("token-2")  # the tool's success did not start the count over
        assert third.error.kind == "limit" and "asked twice for script_token" in third.error.message
        if turn is not None:
            assert "turn count" not in third.error.message
            time.sleep(2.5)  # past the window: a turn's rounds stay counted whatever the time
            assert heal("token-2").error.kind == "limit"
            return
        assert "calls without a turn count 2 s as one turn: it may ask again in " in third.error.message
        time.sleep(2.5)  # past the window
        assert heal("token-2").ok and works()


@pytest.mark.one_loop
def test_a_bad_key_or_value_is_refused_and_the_request_stays_pending(setup, workspace):
    d = setup
    with d.client(name="agent") as agent, d.client(name="person") as watcher:
        watcher.request(p.ApprovalsWatch)
        sid = agent.open_session(workspace)
        for key in ("keyring", "not-a-name"):
            bad = agent.call(sid, "store_secret", {"key": key, "tool": "script_token"})
            assert bad.error.kind == "invalid_arguments" and "key" in bad.error.message
        call_id = agent.start_call(sid, "store_secret", {"key": "API_TOKEN", "tool": "script_token"})
        request = secret_requested(watcher, "API_TOKEN")
        with pytest.raises(errors.InvalidRequest, match="NUL"):
            watcher.request(p.SecretProvide, request_id=request.request_id, value="a\x00b")
        with pytest.raises(errors.InvalidRequest, match="only whitespace"):
            watcher.request(p.SecretProvide, request_id=request.request_id, value=" \n")
        # pasted with a line break and spaces around it: the token alone is stored, not a 401 to come
        watcher.request(p.SecretProvide, request_id=request.request_id, value=f"  {VALUE}\r\n")
        assert agent.wait_call(call_id).ok
        used = agent.call(sid, "script_token", {"text": "x"})
    assert used.result["sha256"] == hashlib.sha256(VALUE.encode()).hexdigest()


@pytest.mark.one_loop
def test_the_round_limit_cannot_be_dodged_by_naming_a_tool_that_does_not_exist(setup, workspace):
    """`tool` must name a registered tool: an invented name (a fresh count) is refused, nobody is asked."""
    d = setup
    with d.client(name="agent") as agent, d.client(name="person") as watcher:
        watcher.request(p.ApprovalsWatch)
        sid = agent.open_session(workspace)
        for tool in ("script_token_2", "store_secret"):
            done = agent.call(sid, "store_secret", {"key": "API_TOKEN", "tool": tool}, turn="t1")
            assert done.error.kind == "invalid_arguments"
            assert f"tool {tool!r} is not a tool" in done.error.message
            assert "the tool that failed for want of API_TOKEN" in done.error.message
        watcher.request(p.Ping)
        assert not [e for e in watcher.core.events if isinstance(e, p.SecretRequested)]


@pytest.mark.one_loop
def test_the_round_limit_cannot_be_dodged_by_naming_a_tool_that_uses_no_such_secret(setup, workspace):
    """Every real tool's name was a fresh count of two prompts; and a key the tool does not use would
    be stored in vain. Refused before anyone is asked, saying which keys the tool does use."""
    d = setup
    with d.client(name="agent") as agent, d.client(name="person") as watcher:
        watcher.request(p.ApprovalsWatch)
        sid = agent.open_session(workspace)
        bash = agent.call(sid, "store_secret", {"key": "API_TOKEN", "tool": "bash"}, turn="t1")
        wrong = agent.call(sid, "store_secret", {"key": "GITHUB_TOKEN", "tool": "script_token"}, turn="t1")
        watcher.request(p.Ping)
        assert not [e for e in watcher.core.events if isinstance(e, p.SecretRequested)]
    assert bash.error.kind == "invalid_arguments" and bash.error.message == (
        "store_secret: bash does not use the secret API_TOKEN (it uses no stored secret, so storing one changes "
        "nothing for it); give the key its error names, and the tool that failed")
    assert wrong.error.kind == "invalid_arguments" and wrong.error.message.startswith(
        "store_secret: script_token does not use the secret GITHUB_TOKEN (its secrets: API_TOKEN)")


@pytest.mark.one_loop
def test_mcp_name_counts_only_for_an_enabled_server_that_uses_the_key(make_daemon, workspace):
    """Any configured server's name would be a fresh count of rounds: two more prompts per server."""
    d = make_daemon('[mcp.servers.other]\ncommand = "/bin/false"\nenv = {T = {secret = "OTHER_KEY"}}\n'
                    '[mcp.servers.off]\ncommand = "/bin/false"\nenabled = false\nenv = {T = {secret = "API_TOKEN"}}\n',
                    env=NO_KEYRING)
    with d.client(name="agent") as agent, d.client(name="person") as watcher:
        watcher.request(p.ApprovalsWatch)
        sid = agent.open_session(workspace)
        for tool in ("mcp__other", "mcp__off", "mcp__nosuch"):
            done = agent.call(sid, "store_secret", {"key": "API_TOKEN", "tool": tool}, turn="t1")
            assert done.error.kind == "invalid_arguments", (tool, done)
            assert done.error.message.endswith("or mcp__NAME for an enabled MCP server whose env, headers or query use "
                                               "API_TOKEN")
        watcher.request(p.Ping)
        assert not [e for e in watcher.core.events if isinstance(e, p.SecretRequested)]

@pytest.mark.one_loop
def test_no_approver_connected_fails_at_once_naming_both_ways_out(setup, workspace):
    d = setup
    with d.client(name="agent") as agent:
        sid = agent.open_session(workspace)
        # no timing: were it to wait for an approver, the 900 s approvals timeout would outlast pytest's
        done = agent.call(sid, "store_secret", {"key": "API_TOKEN", "tool": "script_token"})
    assert done.error.kind == "unavailable"
    assert "no approver is connected" in done.error.message
    assert "scvctl secrets set API_TOKEN" in done.error.message
    assert "scvctl approvals watch" in done.error.message


@pytest.mark.one_loop
def test_an_approver_with_nobody_to_type_is_not_asked_a_watcher_is(setup, workspace):
    """hello's answers_secrets: false (scvctl exec, scvctl mcp): the request is not sent there,
    where it would wait out approvals.timeout_seconds; with a watcher, the watcher is asked."""
    d = setup
    with d.client(name="headless", approver=True, answers_secrets=False) as agent:
        sid = agent.open_session(workspace)
        done = agent.call(sid, "store_secret", {"key": "API_TOKEN", "tool": "script_token"})
        assert done.error.kind == "unavailable" and "no approver is connected" in done.error.message
        with d.client(name="person") as watcher:
            watcher.request(p.ApprovalsWatch)
            call_id = agent.start_call(sid, "store_secret", {"key": "API_TOKEN", "tool": "script_token"})
            request = secret_requested(watcher, "API_TOKEN")
            watcher.request(p.SecretProvide, request_id=request.request_id, value=VALUE)
            assert agent.wait_call(call_id).ok
        assert not [e for e in agent.core.events if isinstance(e, p.SecretRequested)]


@pytest.mark.one_loop
def test_a_watcher_that_says_nobody_types_here_is_not_asked(setup, workspace):
    """A bridge relaying approvals has no private input for a secret: with answers_secrets false its
    watch brings it approvals only, and with nobody else to ask, store_secret fails at once saying how."""
    d = setup
    with d.client(name="bridge", answers_secrets=False) as bridge:
        bridge.request(p.ApprovalsWatch)
        with d.client(name="agent") as agent:
            sid = agent.open_session(workspace)
            done = agent.call(sid, "store_secret", {"key": "API_TOKEN", "tool": "script_token"})
            assert done.error.kind == "unavailable" and "no approver is connected" in done.error.message
            with d.client(name="person") as watcher:  # one that may answer: asked, and the bridge still not
                watcher.request(p.ApprovalsWatch)
                call_id = agent.start_call(sid, "store_secret", {"key": "API_TOKEN", "tool": "script_token"})
                request = secret_requested(watcher, "API_TOKEN")
                watcher.request(p.SecretProvide, request_id=request.request_id, value=VALUE)
                assert agent.wait_call(call_id).ok
        bridge.request(p.Ping)  # whatever it was sent has arrived
        assert not [e for e in bridge.core.events if isinstance(e, p.SecretRequested)]


STORE_FROM_A_CHILD = """
import sys
from scvctl.client import Client
c = Client.connect(sys.argv[1], name="agent-child", approver=True)
done = c.call(c.open_session(sys.argv[2]), "store_secret", {"key": "API_TOKEN", "tool": "script_token"})
print(done.error.kind if done.error else "ok", done.error.message if done.error else "")
"""


@pytest.mark.one_loop
def test_a_process_spawned_by_scvd_is_not_asked_for_its_own_secret_and_hears_so_at_once(setup, workspace):
    """It may not answer (it could plant a credential), so it does not count as the approver there is:
    with nobody else, its store_secret fails at once instead of waiting out the 900 s timeout."""
    d = setup
    with d.client(name="person", approver=True) as person:
        (workspace / "store.py").write_text(STORE_FROM_A_CHILD)
        runner = start_child_client(person, workspace, "store.py", d.socket, workspace)
        ran = person.wait_call(runner)
    assert ran.ok, ran.error
    assert ran.result["output"].startswith("unavailable no approver is connected to enter API_TOKEN"), ran.result


PROVIDE_SCRIPT = """
import sys
from scvctl.client import Client
from scvd import errors, protocol as p
c = Client.connect(sys.argv[1], name="agent-child")
try:
    c.request(p.SecretProvide, request_id=sys.argv[2], value="planted-by-a-child")
    print("accepted")
except Exception as exc:
    print(getattr(exc, "code", type(exc).__name__), exc)
"""


@pytest.mark.one_loop
def test_a_process_spawned_by_scvd_cannot_provide_a_secret(setup, workspace):
    d = setup
    with d.client(name="agent") as agent, d.client(name="person", approver=True) as person:
        person.request(p.ApprovalsWatch)
        call_id = agent.start_call(agent.open_session(workspace), "store_secret",
                                   {"key": "API_TOKEN", "tool": "script_token"})
        request = secret_requested(person, "API_TOKEN")
        (workspace / "provide.py").write_text(PROVIDE_SCRIPT)
        runner = start_child_client(person, workspace, "provide.py", d.socket, request.request_id)
        ran = person.wait_call(runner)
        assert ran.ok, ran.error
        assert ran.result["output"].strip().splitlines()[-1].startswith("forbidden"), ran.result
        assert "may not answer secret requests" in ran.result["output"]
        assert "refused an answer to secret request" in d.log()
        person.request(p.SecretProvide, request_id=request.request_id, value=VALUE)  # the person still can
        assert agent.wait_call(call_id).ok
    assert "planted-by-a-child" not in (d.home / "secrets.toml").read_text()


@pytest.mark.one_loop
def test_scvctl_approvals_watch_asks_for_the_value_and_never_prints_it(setup, workspace):
    d = setup
    out, err = answered_by_watch(d, workspace, f"{VALUE}\n")  # waiting in the pipe (not a terminal)
    assert "secret API_TOKEN for script_token" in out and "input hidden" in out
    # the prompt's line ends though nothing echoed the answer (what follows went on it)
    assert "value for API_TOKEN (input hidden; empty to decline): \n" in out, out
    assert VALUE not in out + err
    assert VALUE in (d.home / "secrets.toml").read_text()


@pytest.mark.one_loop
def test_scvctl_approvals_watch_reads_a_piped_key_whole(setup, workspace):
    """A key piped to the watch was stored as its first line (`-----BEGIN ... KEY-----`), and its other
    lines were left in the pipe, to be read as the answers to the prompts that came next."""
    d = setup
    key = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----\n"
    out, err = answered_by_watch(d, workspace, key)
    assert secrets.SecretStore(d.home / "secrets.toml", env={}).get("API_TOKEN") == key
    assert "b3BlbnNzaC1rZXktdjEAAAAA" not in out + err


@pytest.mark.one_loop
def test_a_value_typed_after_the_request_timed_out_is_not_said_to_be_answered_elsewhere(make_daemon, scv_home,
                                                                                        workspace):
    """scvctl said `... was already answered elsewhere` to a person whose value came after the request timed
    out: they took it for stored, and the next call failed again for want of it. It prints scvd's word."""
    make_tool(scv_home, "token", SHOWS_TOKEN, risk="read_only", secrets=["API_TOKEN"])
    d = make_daemon("[approvals]\ntimeout_seconds = 0.5\n", home=scv_home, env=NO_KEYRING)
    watch = start_watch(d, "")  # nobody types in time
    try:
        with d.client(name="agent") as agent:
            done = store_secret_once_watched(agent, agent.open_session(workspace))
        assert done.error.kind == "denied" and done.error.message.startswith("nobody entered API_TOKEN"), done
        watch.stdin.write(f"{VALUE}\n")  # typed now, once the request has timed out
        watch.stdin.flush()
        said = next(line for line in watch.stdout if "no pending secret request" in line or "elsewhere" in line)
    finally:
        watch.terminate()
        out, err = watch.communicate(timeout=15)
    assert "  no pending secret request 's-" in said and "timed out" in said, said
    assert VALUE not in out + err and not (d.home / "secrets.toml").exists()


@pytest.mark.one_loop
def test_a_value_the_keyring_refuses_leaves_scvctl_approvals_watch_watching_and_says_why(
        make_daemon, scv_home, workspace, tmp_path):
    """The store's refusal came back as the answer's error, and `scvctl approvals watch` (and `scvctl chat`)
    exited on it: nobody was left to ask, for secrets or approvals."""
    make_tool(scv_home, "token", SHOWS_TOKEN, risk="read_only", secrets=["API_TOKEN"])
    kr = tmp_path / "keyring.json"
    d = make_daemon(home=scv_home, env={"PYTHON_KEYRING_BACKEND": lockable_keyring.BACKEND,
                                        "LOCKABLE_KEYRING": str(kr), "PYTHONPATH": f"{ROOT}:{ROOT / 'tests'}"})
    lockable_keyring.lock(kr)
    watch = start_watch(d, f"refused-{VALUE}\n{VALUE}\n")  # an answer for each request
    try:
        with d.client(name="agent") as agent:
            sid = agent.open_session(workspace)
            done = store_secret_once_watched(agent, sid)
            assert done.error.kind == "failed" and "(KeyringLocked): unlock it" in done.error.message, done
            lockable_keyring.lock(kr, False)
            again = agent.call(sid, "store_secret", {"key": "API_TOKEN", "tool": "script_token"})
            assert again.ok and again.result["where"] == "keyring", again.error
    finally:
        watch.terminate()
        out, err = watch.communicate(timeout=15)
    assert ("not stored: API_TOKEN could not be stored: the keyring helpers.lockable_keyring.Keyring could not store "
            "API_TOKEN (KeyringLocked): unlock it") in out, out + err
    assert VALUE in kr.read_text() and VALUE not in out + err


@pytest.mark.one_loop
def test_the_agents_question_reaches_approvers_with_control_characters_escaped(setup, workspace):
    """Like an approval's summary: an ANSI escape or a bidi override cannot repaint a bridge's or terminal's text."""
    d = setup
    with d.client(name="agent") as agent, d.client(name="person") as watcher:
        watcher.request(p.ApprovalsWatch)
        call_id = agent.start_call(agent.open_session(workspace), "store_secret", {
            "key": "API_TOKEN", "tool": "script_token", "question": "\x1b[2K\rEnter your \u202egnp.\nPIN"})
        request = secret_requested(watcher, "API_TOKEN")
        assert request.question == "\\x1b[2K\\rEnter your \\u202egnp.\nPIN"
        watcher.request(p.SecretDecline, request_id=request.request_id)
        assert agent.wait_call(call_id).error.kind == "denied"


def test_a_watcher_that_arrives_later_is_asked_too_and_the_first_answer_wins(setup, workspace):
    d = setup
    with d.client(name="agent") as agent, d.client(name="early") as early, d.client(name="late") as late:
        early.request(p.ApprovalsWatch)
        call_id = agent.start_call(agent.open_session(workspace), "store_secret",
                                   {"key": "API_TOKEN", "tool": "script_token"})
        first = secret_requested(early, "API_TOKEN")
        late.request(p.ApprovalsWatch)
        assert secret_requested(late, "API_TOKEN").request_id == first.request_id
        late.request(p.SecretProvide, request_id=first.request_id, value=VALUE)
        assert agent.wait_call(call_id).ok
        with pytest.raises(errors.ApprovalNotFound, match="no pending secret request"):
            early.request(p.SecretProvide, request_id=first.request_id, value="too late")
        told = wait_event(early, lambda e: isinstance(e, p.SecretResolved))
        assert told.state == "stored" and "late" in told.decided_by


@pytest.mark.one_loop
def test_with_a_keyring_the_daemon_stores_there_and_the_script_reads_it_back(make_daemon, scv_home, workspace,
                                                                              tmp_path):
    """keyrings.alt's file backend, chosen as a user would (PYTHON_KEYRING_BACKEND): no mocks."""
    make_tool(scv_home, "token", SHOWS_TOKEN, risk="read_only", secrets=["API_TOKEN"])
    data = tmp_path / "xdg-data"
    d = make_daemon(home=scv_home, env={"PYTHON_KEYRING_BACKEND": "keyrings.alt.file.PlaintextKeyring",
                                        "XDG_DATA_HOME": str(data), "XDG_CONFIG_HOME": str(tmp_path / "xdg-config")})
    with d.client(name="agent") as agent, d.client(name="person") as watcher:
        watcher.request(p.ApprovalsWatch)
        sid = agent.open_session(workspace)
        call_id = agent.start_call(sid, "store_secret", {"key": "API_TOKEN", "tool": "script_token"})
        watcher.request(p.SecretProvide, request_id=secret_requested(watcher, "API_TOKEN").request_id, value=VALUE)
        done = agent.wait_call(call_id)
        assert done.ok and done.result["where"] == "keyring", done
        again = agent.call(sid, "script_token", {"text": "x"})
        assert again.ok and again.result["sha256"] == hashlib.sha256(VALUE.encode()).hexdigest()
    assert (data / "python_keyring" / "keyring_pass.cfg").exists()
    index = (d.home / "secrets.toml").read_text()
    assert "API_TOKEN" in index and VALUE not in index  # only the name, for `scvctl secrets list`
    assert "secret store: keyring keyrings.alt.file.PlaintextKeyring" in d.log()


def test_a_value_still_being_stored_when_the_timeout_comes_ends_stored_not_timed_out(make_daemon, scv_home,
                                                                                       workspace, tmp_path):
    """A keyring answering late used to leave the call `denied` (timed out) with the value stored anyway."""
    make_tool(scv_home, "token", SHOWS_TOKEN, risk="read_only", secrets=["API_TOKEN"])
    d = make_daemon("[approvals]\ntimeout_seconds = 1\n", home=scv_home, env={
        "PYTHON_KEYRING_BACKEND": slow_keyring.BACKEND, "LOCKABLE_KEYRING": str(tmp_path / "keyring.json"),
        "SLOW_KEYRING_SECONDS": "2.5", "PYTHONPATH": f"{ROOT}:{ROOT / 'tests'}"})
    with d.client(name="agent") as agent, d.client(name="person") as watcher:
        watcher.request(p.ApprovalsWatch)
        sid = agent.open_session(workspace)
        call_id = agent.start_call(sid, "store_secret", {"key": "API_TOKEN", "tool": "script_token"})
        request = secret_requested(watcher, "API_TOKEN")
        watcher.request(p.SecretProvide, request_id=request.request_id, value=VALUE)  # answers once stored
        done = agent.wait_call(call_id)
        assert done.ok and done.result["where"] == "keyring", done.error
        told = wait_event(watcher, lambda e: isinstance(e, p.SecretResolved))
        assert (told.request_id, told.state) == (request.request_id, "stored")
    assert VALUE in (tmp_path / "keyring.json").read_text()
    records = [json.loads(line) for line in (d.home / "state" / "audit.log").read_text().splitlines()]
    assert [r["state"] for r in records if r["event"] == "secret_resolved"] == ["stored"]


def test_an_approver_storing_a_value_goes_on_deciding_meanwhile(setup, workspace):
    """The store may wait (a keyring over D-Bus, secrets.toml's lock held by a `scvctl secrets set`
    that waits on it): the approver's connection answers its other requests meanwhile, so a
    bridge's owner can still approve and deny its other chats' calls."""
    d = setup
    with d.client(name="agent") as agent, RawConn(d.socket) as watcher:
        watcher.hello()
        assert isinstance(watcher.request({"type": "approvals.watch"}), p.Ok)
        sid = agent.open_session(workspace)
        call_id = agent.start_call(sid, "store_secret", {"key": "API_TOKEN", "tool": "script_token"})
        while not isinstance(request := watcher.frame(), p.SecretRequested):
            pass
        lock = os.open(d.home, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)  # the store waits for it
            watcher.send({"type": "secret.provide", "id": "provide", "request_id": request.request_id,
                          "value": VALUE})
            watcher.send({"type": "ping", "id": "ping"})
            while (first := watcher.frame()).__class__ not in (p.Pong, p.Ok):
                pass
        finally:
            os.close(lock)
        assert isinstance(first, p.Pong), first
        while getattr(answer := watcher.frame(), "id", None) != "provide":
            pass
        assert isinstance(answer, p.Ok), answer
        assert agent.wait_call(call_id).ok


@pytest.mark.slow
def test_a_value_stored_after_its_call_gave_up_is_audited_as_stored_late(make_wrapped, scv_home, workspace, tmp_path):
    """The call ends `failed` (the store took past the timeout and STORE_SECONDS more, 1 s here
    instead of 30); when the store then finishes, the audit log says the value is stored after all,
    not only that it failed. The store waits on secrets.toml's lock, as it does while a
    `scvctl secrets set` waits on a silent keyring."""
    make_tool(scv_home, "token", SHOWS_TOKEN, risk="read_only", secrets=["API_TOKEN"])
    d = make_wrapped("[approvals]\ntimeout_seconds = 1\n", home=scv_home, env={
        "PYTHON_KEYRING_BACKEND": slow_keyring.BACKEND, "LOCKABLE_KEYRING": str(tmp_path / "keyring.json"),
        "SLOW_KEYRING_SECONDS": "0", "PYTHONPATH": f"{ROOT}:{ROOT / 'tests'}", "HARNESS_STORE_SECONDS": "1"})
    with d.client(name="agent") as agent, d.client(name="person") as watcher:
        watcher.request(p.ApprovalsWatch)
        sid = agent.open_session(workspace)
        call_id = agent.start_call(sid, "store_secret", {"key": "API_TOKEN", "tool": "script_token"})
        request = secret_requested(watcher, "API_TOKEN")
        lock = os.open(scv_home, os.O_RDONLY | os.O_DIRECTORY)
        fcntl.flock(lock, fcntl.LOCK_EX)
        watcher.send(p.SecretProvide, request_id=request.request_id, value=VALUE)  # its answer waits for the store
        done = agent.wait_call(call_id)
        os.close(lock)
        assert not done.ok and "it may be stored anyway" in done.error.message, done
        deadline = time.monotonic() + 30
        keyring = tmp_path / "keyring.json"
        while not (keyring.exists() and VALUE in keyring.read_text()):
            assert time.monotonic() < deadline, "the slow keyring never stored the value"
            time.sleep(0.1)
    assert d.stop() == 0  # the audit log is flushed at exit
    records = [json.loads(line) for line in (d.home / "state" / "audit.log").read_text().splitlines()]
    states = [r["state"] for r in records if r["event"] == "secret_resolved"]
    assert states == ["failed", "stored_late"], states
    assert VALUE not in (d.home / "state" / "audit.log").read_text()


@pytest.mark.one_loop
def test_a_start_removes_the_copy_of_the_secrets_a_killed_write_left(make_daemon, scv_home):
    """A write of secrets.toml killed before its rename (SIGKILL, the OOM killer) left every secret in
    `.secrets.toml.<pid>.tmp` until the next set or delete; a restart kept it. Only that name, a
    regular file of ours, is removed."""
    left = scv_home / ".secrets.toml.4242.tmp"
    left.write_text(f'API_TOKEN = "{VALUE}"\n')
    left.chmod(0o600)
    others = [scv_home / ".secrets.toml.mine.tmp", scv_home / ".secrets.toml.77.tmp.swp"]
    for path in others:
        path.write_text("not a temp file of scvd's\n")
    (scv_home / ".secrets.toml.78.tmp").symlink_to(others[0])
    d = make_daemon(home=scv_home)
    with d.client(name="pytest") as c:
        c.status()  # served: the start is over
    assert not left.exists()
    assert all(path.exists() for path in others) and (scv_home / ".secrets.toml.78.tmp").is_symlink()
    assert (f"removed .secrets.toml.4242.tmp beside {scv_home / 'secrets.toml'}: left by a write of secrets "
            "that was killed, each held the secrets of its time") in d.log()
    assert VALUE not in d.log()
