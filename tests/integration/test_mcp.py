"""`scvctl mcp` as an MCP host sees it: JSON-RPC over the stdio of a real subprocess."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from scvd import protocol as p

from conftest import ROOT, DaemonProc, base_env, reloaded, wait_pending
from harness import wait_until


TOO_DEEP = "not JSON scvd can read: it nests arrays or objects too deeply (at most about 950 levels); send flatter JSON"


class McpHost:
    """Speaks to `scvctl mcp` like an MCP host: one JSON object per line."""

    def __init__(self, daemon: DaemonProc, workspace: Path, *options: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "scvctl", "mcp", "--workspace", str(workspace), *options],
            env=base_env(daemon.home), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True,
        )
        self.next_id = 0

    def send(self, message: dict) -> None:
        self.proc.stdin.write(json.dumps(message) + "\n")
        self.proc.stdin.flush()

    def request(self, method: str, params: dict | None = None) -> int:
        self.next_id += 1
        self.send({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params or {}})
        return self.next_id

    def read(self) -> dict:
        line = self.proc.stdout.readline()
        assert line, f"scvctl mcp exited: {self.proc.stderr.read()}"
        return json.loads(line)

    def read_within(self, seconds: float) -> dict:
        """read(), failing after `seconds` instead of waiting on a message that never comes."""
        got: list[str] = []  # the line only: a reader left behind must not fail once the host ends
        reader = threading.Thread(target=lambda: got.append(self.proc.stdout.readline()), daemon=True)
        reader.start()
        reader.join(seconds)
        assert got, f"scvctl mcp wrote nothing within {seconds:g} s"
        assert got[0], f"scvctl mcp exited: {self.proc.stderr.read()}"
        return json.loads(got[0])

    def rpc(self, method: str, params: dict | None = None) -> dict:
        msg_id = self.request(method, params)
        answer = self.read()
        assert answer["id"] == msg_id
        return answer

    def close(self) -> int:
        self.proc.stdin.close()
        code = self.proc.wait(10)
        self.proc.stdout.close()
        self.proc.stderr.close()
        return code


@pytest.fixture
def host(daemon: DaemonProc, workspace: Path):
    h = McpHost(daemon, workspace)
    init = h.rpc("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                "clientInfo": {"name": "test-host", "version": "1"}})
    assert init["result"]["protocolVersion"] == "2025-06-18"
    h.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    yield h
    if h.proc.poll() is None:
        h.close()


@pytest.mark.one_loop
def test_initialize_offers_tools_and_falls_back_to_our_newest_version(daemon, workspace):
    h = McpHost(daemon, workspace)
    try:
        result = h.rpc("initialize", {"protocolVersion": "1999-01-01", "capabilities": {},
                                      "clientInfo": {"name": "x"}})["result"]
        assert result["protocolVersion"] == "2025-11-25"
        assert result["capabilities"] == {"tools": {"listChanged": True}}
        assert result["serverInfo"]["name"] == "scvd"
    finally:
        assert h.close() == 0


@pytest.mark.one_loop
def test_tools_list_carries_schemas_and_read_only_hints(host):
    tools = {t["name"]: t for t in host.rpc("tools/list")["result"]["tools"]}
    assert {"read", "write"} <= set(tools)
    assert tools["read"]["inputSchema"]["required"] == ["path"]
    assert tools["read"]["annotations"]["readOnlyHint"] is True
    assert tools["write"]["annotations"]["readOnlyHint"] is False
    # read_only to the gate (the person typing it approves), but it stores a value
    assert tools["store_secret"]["annotations"] == {"readOnlyHint": False, "destructiveHint": True}


@pytest.mark.one_loop
def test_store_secret_is_listed_so_a_host_can_heal_a_credential(make_daemon, scv_home, workspace):
    """It was hidden (a system tool), and a host has no find_tools: an agent told by credential_missing
    to call store_secret could not, since hosts call only the tools they were listed."""
    d = make_daemon('[mcp.servers.gh]\ncommand = "/bin/false"\nenv = {T = {secret = "GH_TOKEN"}}\n', home=scv_home)  # a server down for want of GH_TOKEN
    host = McpHost(d, workspace)
    host.rpc("initialize", {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "h"}})
    host.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    tools = {t["name"]: t for t in host.rpc("tools/list")["result"]["tools"]}
    assert "store_secret" in tools and tools["store_secret"]["inputSchema"]["required"] == ["key", "tool"]
    result = host.rpc("tools/call", {"name": "store_secret", "arguments": {"key": "GH_TOKEN", "tool": "mcp__gh"}})
    assert result["result"]["isError"] is True  # nobody here to type it: it says what to do instead
    assert "scvctl secrets set GH_TOKEN" in result["result"]["content"][0]["text"]
    host.close()


@pytest.mark.one_loop
def test_read_call_returns_text_and_structured_content(host, workspace):
    (workspace / "a.txt").write_text("hi\n")
    result = host.rpc("tools/call", {"name": "read", "arguments": {"path": "a.txt"}})["result"]
    assert result["isError"] is False
    assert result["structuredContent"]["content"] == "hi\n"
    assert json.loads(result["content"][0]["text"])["content"] == "hi\n"


@pytest.mark.one_loop
def test_tool_errors_are_results_with_is_error(host):
    result = host.rpc("tools/call", {"name": "read", "arguments": {"path": "../etc/passwd"}})["result"]
    assert result["isError"] is True
    assert result["content"][0]["text"].startswith(("invalid_arguments: ", "failed: "))


@pytest.mark.one_loop
def test_an_unknown_tool_is_a_protocol_error_that_lists_the_tools(host):
    # MCP (2025-06-18 on): unknown tools are JSON-RPC errors, as its example -32602, not tool results
    error = host.rpc("tools/call", {"name": "nope", "arguments": {}})["error"]
    assert error["code"] == -32602
    assert error["message"].startswith("unknown_tool: no tool named 'nope'; tools: ") and "read" in error["message"]


@pytest.mark.one_loop
def test_write_waits_for_the_owner_and_a_denial_is_an_error_result(host, daemon, workspace):
    msg_id = host.request("tools/call", {"name": "write",
                                         "arguments": {"path": "n.txt", "content": "x", "mode": "create"}})
    with daemon.client(name="owner") as owner:
        pending = wait_pending(owner)[0]
        owner.request(p.ApprovalDecide, approval_id=pending.approval_id, decision="deny", reason="no")
    answer = host.read()
    assert answer["id"] == msg_id and answer["result"]["isError"]
    assert "denied" in answer["result"]["content"][0]["text"]
    assert not (workspace / "n.txt").exists()


@pytest.mark.one_loop
def test_a_call_past_the_hosts_share_of_waiting_approvals_is_told_what_a_host_can_do(make_daemon, workspace):
    """The gate's refusal told a host to cancel its calls with call.cancel, a message of scvd's protocol
    that a host cannot send: it is told of its own cancel, and of who decides, instead."""
    d = make_daemon("[approvals]\nmax_pending = 4\n")  # a connection's share: 3, a quarter kept for the rest
    for n in range(4):
        (workspace / f"{n}.env").write_text("KEY=x\n")
    h = McpHost(d, workspace)
    try:
        h.rpc("initialize", {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "x"}})
        for n in range(3):  # reads run together, and a secret-like file's asks
            h.request("tools/call", {"name": "read", "arguments": {"path": f"{n}.env"}})
        with d.client(name="owner") as owner:
            wait_until(lambda: len(owner.request(p.ApprovalsList).approvals) == 3, what="three requests waiting")
        refused = h.rpc("tools/call", {"name": "read", "arguments": {"path": "3.env"}})
    finally:
        h.proc.kill()  # its three calls wait for a decision: a close would wait for them
        h.close()
    text = refused["result"]["content"][0]["text"]
    assert refused["result"]["isError"] and text.startswith("limit: 3 approvals of this connection's sessions "), text
    assert text.endswith("this call was refused without asking: have those decided (`scvctl approvals watch`, or the "
                         "MCP host itself where it asks), or cancel the tool calls you no longer need in the MCP host, "
                         "then call it again"), text


def elicited_write(h: McpHost) -> tuple[int, dict]:
    """A host that elicits calls write: the call's request id, and the question it is asked."""
    h.rpc("initialize", {"protocolVersion": "2025-11-25", "capabilities": {"elicitation": {}},
                         "clientInfo": {"name": "x"}})
    msg_id = h.request("tools/call", {"name": "write",
                                      "arguments": {"path": "e.txt", "content": "x", "mode": "create"}})
    question = h.read()
    assert question["method"] == "elicitation/create"
    return msg_id, question


@pytest.mark.one_loop
def test_the_question_to_the_host_shows_the_workspace_on_one_escaped_line(daemon, tmp_path):
    """security.md: the host is put the whole escaped request. The header named the workspace raw, so
    a folder name with a line break (or U+202E) showed a second header of its own making."""
    workspace = tmp_path / "proj\nscvd asks for your approval: read (read_only, sandboxed) in \u202eproj"
    workspace.mkdir()
    h = McpHost(daemon, workspace)
    try:
        _, question = elicited_write(h)
        lines = question["params"]["message"].split("\n")
        assert lines[0] == (f"scvd asks for your approval: write (filesystem, unsandboxed) in {tmp_path}/proj\\n"
                            "scvd asks for your approval: read (read_only, sandboxed) in \\u202eproj")
        assert all(line.startswith("  ") for line in lines[1:]), lines
    finally:
        h.proc.kill()
        h.proc.wait()
        for pipe in (h.proc.stdin, h.proc.stdout, h.proc.stderr):
            pipe.close()


@pytest.mark.one_loop
@pytest.mark.parametrize("answer, said", [
    ({"error": {"code": -32603, "message": "no dialog here"}}, '{"code":-32603,"message":"no dialog here"}'),
    # a decision that is no string (a list, an object) was taken for a key of the choices: a
    # TypeError in the log instead of this line
    ({"result": {"action": "accept", "content": {"decision": ["approve"]}}},
     '{"action":"accept","content":{"decision":["approve"]}}'),
])
def test_a_question_the_host_answers_with_an_error_is_logged_and_left_to_the_watchers(daemon, workspace, answer,
                                                                                        said):
    """A host that declares elicitation but fails to ask (a JSON-RPC error, or an answer that is not
    one of the choices): the call waited with no trace anywhere of why nobody had been asked."""
    h = McpHost(daemon, workspace)
    try:
        msg_id, question = elicited_write(h)
        h.send({"jsonrpc": "2.0", "id": question["id"], **answer})
        with daemon.client(name="owner") as owner:
            [pending] = wait_pending(owner)  # still waiting, for the watchers
            deadline = time.monotonic() + 10
            while "no decision" not in daemon.log():
                assert time.monotonic() < deadline, daemon.log()
                time.sleep(0.05)
            owner.request(p.ApprovalDecide, approval_id=pending.approval_id, decision="deny", reason="no")
        assert (f"MCP host of session {pending.session}: its answer to the question on {pending.approval_id} "
                f"is no decision ({said}); the request waits for `scvctl approvals watch`") in daemon.log()
        answer = h.read()
        assert answer["id"] == msg_id and answer["result"]["isError"]
    finally:
        assert h.close() == 0


@pytest.mark.one_loop
def test_a_question_withdrawn_because_its_request_expired_says_so_not_decided_elsewhere(make_daemon, workspace):
    """The host's question is taken back (notifications/cancelled) when its request ends without the
    host: its reason said `decided elsewhere` also when nobody had decided and it expired."""
    d = make_daemon("[approvals]\ntimeout_seconds = 0.5\n")
    h = McpHost(d, workspace)
    try:
        msg_id, question = elicited_write(h)
        withdrawn, answer = h.read(), h.read()
    finally:
        assert h.close() == 0
    assert withdrawn["method"] == "notifications/cancelled" and withdrawn["params"]["requestId"] == question["id"]
    assert withdrawn["params"]["reason"] == "expired: no decision within 0.5 s (approvals.timeout_seconds); denied"
    assert answer["id"] == msg_id and answer["result"]["isError"]


def test_a_cancelled_call_is_cancelled_in_scvd_and_never_answered(host, daemon):
    """MCP: the receiver of notifications/cancelled does not answer the request it names."""
    msg_id = host.request("tools/call", {"name": "write",
                                         "arguments": {"path": "c.txt", "content": "x", "mode": "create"}})
    with daemon.client(name="owner") as owner:
        wait_pending(owner)[0]
        host.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": msg_id}})
        deadline = time.monotonic() + 10
        while owner.request(p.ApprovalsList).approvals:  # the call ended in scvd: its approval withdrawn
            assert time.monotonic() < deadline, "the cancelled call still waits for approval"
            time.sleep(0.05)
    for _ in range(2):  # the next lines are the pings' answers: none for the cancelled id in between
        ping = host.request("ping")
        assert host.read_within(10) == {"jsonrpc": "2.0", "id": ping, "result": {}}


@pytest.mark.one_loop
def test_bad_messages_get_json_rpc_errors_and_the_server_goes_on(host):
    host.proc.stdin.write("{not json\n")
    host.proc.stdin.flush()
    assert host.read()["error"]["code"] == -32700
    assert host.rpc("no/such/method")["error"]["code"] == -32601
    assert host.rpc("tools/call", {"name": 5})["error"]["code"] == -32602
    for arguments in ([], "", 0, False):  # were taken for `{}`: read_skill ran, listing the skills
        assert host.rpc("tools/call", {"name": "read_skill", "arguments": arguments})["error"]["code"] == -32602
    assert host.rpc("ping")["result"] == {}


def test_a_message_nested_too_deeply_is_a_parse_error_answering_its_id(host):
    """msgspec raised RecursionError at 100,000 nested arrays: the task reading the message ended (a
    traceback in scvd's log) and its request was never answered, the host waiting on it for good."""
    deep = "[" * 100_000 + "]" * 100_000
    host.proc.stdin.write('{"jsonrpc":"2.0","id":"deep","method":"ping","params":{"x":%s}}\n' % deep)
    host.proc.stdin.flush()
    assert host.read_within(10) == {"jsonrpc": "2.0", "id": "deep", "error": {"code": -32700, "message": TOO_DEEP}}
    assert host.rpc("ping")["result"] == {}


def test_a_deep_message_is_answered_whatever_reads_it(host, daemon):
    """A lone surrogate escape makes msgspec give the message to the json module: its mending, recursive,
    overflowed from some 500 levels on, and the request was never answered ("Task exception was never
    retrieved" in the log); past the json module's depth it was "not JSON" without the id. Arguments as
    deep as msgspec reads overflowed the check for a lone surrogate: "internal error in scvctl mcp"."""
    def answer(msg_id: int, depth: int, method: str, params: str) -> dict:
        params = params.replace("NESTED", "[" * depth + "]" * depth)
        host.proc.stdin.write(f'{{"jsonrpc":"2.0","id":{msg_id},"method":"{method}","params":{params}}}\n')
        host.proc.stdin.flush()
        return host.read_within(10)

    surrogate = '{"note":"\\ud800","x":NESTED}'
    assert answer(1, 600, "ping", surrogate) == {"jsonrpc": "2.0", "id": 1, "result": {}}
    assert answer(2, 100_000, "ping", surrogate) == {"jsonrpc": "2.0", "id": 2, "error": {"code": -32700, "message": TOO_DEEP}}
    call = '{"name":"read","arguments":{"path":"a.txt","x":NESTED}}'
    depth = 1000  # down to the deepest arguments msgspec reads here (the stack under it differs with the loop)
    while (done := answer(3, depth, "tools/call", call)).get("error", {}).get("code") == -32700 and depth > 900:
        depth -= 1
    # refused as the arguments they are (too deep to check, or `x` unknown: whichever check runs first
    # without overflowing), never an internal error
    assert "result" in done and done["result"]["isError"], done
    assert done["result"]["content"][0]["text"].startswith("invalid_arguments: read: "), done
    assert "Traceback" not in daemon.log()


@pytest.mark.one_loop
def test_a_lone_surrogate_escape_is_json_and_its_request_is_answered(host, workspace):
    # what JSON.stringify and json.dumps print for half an emoji: msgspec refused it, and the
    # answer (-32700, id null) settled nothing, so the host waited for request 42 for good;
    # in a call's arguments it is refused as the socket refuses it
    (workspace / "emoji-\ufffd.txt").write_text("half an emoji\n")
    host.proc.stdin.write('{"jsonrpc":"2.0","id":42,"method":"tools/call","params":{"name":"read",'
                          '"arguments":{"path":"emoji-\\ud83d.txt"}}}\n')
    host.proc.stdin.flush()
    answer = host.read()  # read as U+FFFD, it read another file than the one named, without a word
    assert answer["id"] == 42 and answer["result"]["isError"], answer
    assert answer["result"]["content"][0]["text"].startswith(
        "invalid_arguments: argument `path` holds a lone surrogate U+D83D at character 6 "), answer
    host.proc.stdin.write('{"jsonrpc":"2.0","id":44,"method":"ping","params":{"note":"half \\ud83d"}}\n')
    host.proc.stdin.flush()
    assert host.read() == {"jsonrpc": "2.0", "id": 44, "result": {}}  # other text still reads U+FFFD
    for bad in ('{"x":NaN}', '{"x":1e400}'):  # still not JSON, nor a number JSON answers can carry
        host.proc.stdin.write('{"jsonrpc":"2.0","id":43,"method":"ping","params":%s}\n' % bad)
        host.proc.stdin.flush()
        assert host.read()["error"]["code"] == -32700


@pytest.mark.parametrize("id_last", [False, True])
def test_a_message_over_the_limit_is_refused_whole_and_the_next_one_is_answered(host, id_last):
    """Its id first, or last as the TypeScript SDK writes it: that host refused the answer with `id:
    null` and waited 60 s for one, and its agent never heard the message was too large."""
    message = {"jsonrpc": "2.0", "method": "ping", "params": {"pad": "x" * (1 << 20)}}
    big = json.dumps({**message, "id": "big"} if id_last else {"id": "big", **message})
    assert big.endswith('"id": "big"}') == id_last
    for cut in (4096, len(big) // 2):  # arrives in pieces, as through a pipe
        host.proc.stdin.write(big[:cut])
        host.proc.stdin.flush()
        big = big[cut:]
    host.proc.stdin.write(big + "\n")
    host.proc.stdin.flush()
    refused = host.read()
    assert refused["id"] == "big" and refused["error"] == {"code": -32600, "message": (
        "message too large: over 1048576 bytes (server.client_frame_bytes); send less, or raise it")}
    assert host.rpc("ping")["result"] == {}  # nothing of the long line was taken for a message
    host.send({"jsonrpc": "2.0", "id": "last", "method": "ping"})
    host.proc.stdin.close()  # a host that ends: what it sent is still answered
    assert host.read() == {"jsonrpc": "2.0", "id": "last", "result": {}}
    assert host.close() == 0


@pytest.mark.one_loop
def test_a_batch_is_answered_with_an_array_of_its_requests_answers(host, workspace):
    """MCP 2025-03-26 (which scvd agrees to) has JSON-RPC batches: each request in one is answered,
    in one array; a notification in it gets nothing, and an empty batch is refused."""
    (workspace / "b.txt").write_text("batched\n")
    host.send([{"jsonrpc": "2.0", "id": "p", "method": "ping"},
               {"jsonrpc": "2.0", "method": "notifications/initialized"},
               {"jsonrpc": "2.0", "id": "r", "method": "tools/call",
                "params": {"name": "read", "arguments": {"path": "b.txt"}}},
               {"jsonrpc": "2.0", "id": "x", "method": "no/such/method"}])
    answers = {a["id"]: a for a in host.read_within(10)}
    assert set(answers) == {"p", "r", "x"}, answers
    assert answers["p"]["result"] == {}
    assert answers["r"]["result"]["structuredContent"]["content"] == "batched\n"
    assert answers["x"]["error"]["code"] == -32601
    host.send([])
    assert host.read_within(10)["error"] == {"code": -32600, "message": "an empty batch; send at least one message"}
    host.send([{"jsonrpc": "2.0", "method": "notifications/initialized"}])  # nothing to answer
    assert host.rpc("ping")["result"] == {}


def test_a_call_in_a_batch_cancelled_right_after_it_is_cancelled_and_never_answered(host, workspace):
    """A batch's calls began a loop turn after the lines behind it: a cancel in the same read found
    no call, so the call waited for approval (and ran if approved) and was answered after all."""
    host.proc.stdin.write(json.dumps([{"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {
        "name": "write", "arguments": {"path": "c.txt", "content": "x", "mode": "create"}}}]) + "\n" + json.dumps(
        {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 7}}) + "\n")
    host.proc.stdin.flush()
    # the session's next call waits for the write to end: with it waiting for approval, for good
    (workspace / "next.txt").write_text("next\n")
    after = host.request("tools/call", {"name": "read", "arguments": {"path": "next.txt"}})
    answer = host.read_within(10)  # and no answer to 7 before it
    assert answer["id"] == after and answer["result"]["structuredContent"]["content"] == "next\n", answer
    assert not (workspace / "c.txt").exists()


def test_the_message_limit_is_server_client_frame_bytes(make_daemon, workspace):
    """A user who raised the limit (to write a bigger file) has it for the MCP host too."""
    d = make_daemon("[server]\nclient_frame_bytes = 4194304\n")
    h = McpHost(d, workspace)
    try:
        h.rpc("initialize", {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "x"}})
        big = "x" * (2 << 20)
        answer = h.rpc("tools/call", {"name": "read", "arguments": {"path": "none.txt"}, "pad": big})
        assert answer["result"]["isError"] and "none.txt" in answer["result"]["content"][0]["text"], answer
    finally:
        assert h.close() == 0


@pytest.mark.one_loop
def test_a_request_whose_id_is_null_is_refused_not_taken_for_a_notification(host):
    host.send({"jsonrpc": "2.0", "id": None, "method": "ping"})
    assert host.read_within(10) == {"jsonrpc": "2.0", "id": None, "error": {
        "code": -32600, "message": "a request's id must be a string or a number"}}


def test_a_read_that_fits_a_socket_clients_frame_fits_the_mcp_hosts_line_too(host, workspace):
    """MCP sends a result twice (escaped text and structuredContent): a 1 MiB read of control bytes,
    6 bytes each in JSON, is well within the frame a socket client gets, but was one line of 13.6 MiB,
    and hosts on the TypeScript SDK drop the connection on a line past 10 MiB. It comes as text alone."""
    (workspace / "ctl.txt").write_bytes(b"\x01" * (1 << 20))
    msg_id = host.request("tools/call", {"name": "read", "arguments": {"path": "ctl.txt", "limit": 1 << 20}})
    line = host.proc.stdout.readline()
    assert len(line.encode()) <= 8 << 20
    result = json.loads(line)["result"]
    assert result["isError"] is False, result["content"][0]["text"][:300]
    assert "structuredContent" not in result
    assert json.loads(result["content"][0]["text"])["content"] == "\x01" * (1 << 20)
    assert host.rpc("ping")["result"] == {} and host.next_id == msg_id + 1


def test_a_result_too_long_for_a_hosts_line_is_a_limit_error_and_the_host_stays(make_daemon, workspace):
    """With read raised to 2 MiB (and the frame to fit it), its text alone is 14 MiB of JSON."""
    d = make_daemon("[tools]\nread_limit_bytes = 2097152\n[server]\nserver_frame_bytes = 16777216\n")
    (workspace / "zeros.dat").write_bytes(bytes(2 << 20))
    h = McpHost(d, workspace)
    try:
        h.rpc("initialize", {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "x"}})
        msg_id = h.request("tools/call", {"name": "read", "arguments": {"path": "zeros.dat", "limit": 2 << 20}})
        line = h.proc.stdout.readline()
        assert len(line) < 1000
        answer = json.loads(line)
        assert answer["id"] == msg_id and answer["result"]["isError"] is True
        assert re.fullmatch(r"limit: result too large: its line of \d+ bytes is over 8388608, the longest scvd "
                            r"sends an MCP host \(hosts on the TypeScript SDK read 10 MiB at most\); ask for less "
                            r"output at once \(a smaller limit, or the rest from an offset\)",
                            answer["result"]["content"][0]["text"]), answer
        assert h.rpc("ping")["result"] == {}
    finally:
        assert h.close() == 0


@pytest.mark.one_loop
def test_params_that_are_not_an_object_get_an_error_answer(host):
    """Every request gets its answer: a host waiting on one that never comes hangs."""
    for method in ("tools/call", "initialize"):
        for params in (["x"], [], ""):  # an empty one was taken for `{}`
            host.send({"jsonrpc": "2.0", "id": f"bad-{method}", "method": method, "params": params})
            ping = host.request("ping")  # answered at once; the bad request's answer must come first
            answer = host.read()
            assert answer["id"] == f"bad-{method}" and answer["error"]["code"] == -32602, answer
            assert host.read()["id"] == ping
    host.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": ["x"]})
    assert host.rpc("ping")["result"] == {}


@pytest.mark.one_loop
def test_not_running_daemon_exits_3(tmp_path, workspace):
    out = subprocess.run([sys.executable, "-m", "scvctl", "mcp", "--workspace", str(workspace)],
                         env=base_env(tmp_path / "none"), capture_output=True, text=True, timeout=20,
                         stdin=subprocess.DEVNULL)
    assert out.returncode == 3 and "scvd is not running" in out.stderr
    assert out.stdout == ""


@pytest.mark.one_loop
@pytest.mark.parametrize("redirect,closed", [("<&-", "stdin"), (">&-", "stdout"), ("<&- >&-", "stdin and stdout")])
def test_closed_stdio_is_a_usage_error_that_says_which(daemon, workspace, redirect, closed):
    cmd = f"exec {shlex.quote(sys.executable)} -m scvctl mcp --workspace {shlex.quote(str(workspace))} {redirect}"
    out = subprocess.run(["bash", "-c", cmd], env=daemon.env, capture_output=True, text=True,
                         timeout=20)
    assert out.returncode == 2, out.stderr
    assert f"its {closed} " in out.stderr and "let the MCP host start it" in out.stderr
    assert "Traceback" not in out.stderr


@pytest.mark.one_loop
def test_the_host_keeps_no_events_of_calls_it_has_answered(make_inproc, workspace):
    """A host's session lasts for days: call.started / call.progress of answered calls must not pile up."""
    d = make_inproc()
    (workspace / "a.txt").write_text("hello\n")
    h = McpHost(d, workspace)
    try:
        h.rpc("initialize", {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "x"}})
        for _ in range(5):
            assert h.rpc("tools/call", {"name": "read", "arguments": {"path": "a.txt"}})["result"]["isError"] is False
        [host] = d.daemon.mcp_hosts.hosts.values()
        assert host.client.calls == {}  # the daemon's side of the host holds nothing of answered calls
    finally:
        assert h.close() == 0


def call_bash_approved(h: McpHost, d: DaemonProc, command: str, token: str) -> int:
    """A host's bash call with a progressToken, approved by its owner: the request's id."""
    h.rpc("initialize", {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "x"}})
    msg_id = h.request("tools/call", {"name": "bash", "arguments": {"command": command},
                                      "_meta": {"progressToken": token}})
    with d.client(name="owner") as owner:
        owner.request(p.ApprovalDecide, approval_id=wait_pending(owner)[0].approval_id, decision="approve")
    return msg_id


def test_progress_reaches_a_host_that_asked_for_it(make_daemon, workspace):
    d = make_daemon("[tools]\nprogress_interval_seconds = 0.2\n")
    h = McpHost(d, workspace)
    try:
        msg_id = call_bash_approved(h, d, "sleep 1; echo done", "tok-1")
        messages = []
        while not messages or messages[-1].get("id") != msg_id:
            messages.append(h.read())
    finally:
        h.close()
    progress = [m["params"] for m in messages if m.get("method") == "notifications/progress"]
    assert progress and all(m["progressToken"] == "tok-1" for m in progress)
    assert [m["progress"] for m in progress] == sorted(m["progress"] for m in progress)
    # bash's 120 s default, the timeout the person knows (was 125: the dispatch grace added)
    waited = [m for m in progress if m["message"].startswith("waiting for approval")]  # a slow decision's
    ran = progress[len(waited):]
    assert ran[0]["total"] == 120.0 + (waited[-1]["progress"] if waited else 0)  # the run counts on from the wait
    assert messages[-1]["result"]["structuredContent"]["output"].endswith("done\n")
    assert re.search(r"running name=bash call=\S+ elapsed=\d+s/120s", d.log()), d.log()


def test_progress_after_a_wait_for_a_person_stays_within_its_total(make_daemon, workspace):
    """MCP's progress must grow, so a run after a wait of 2.x s went on from there: 2.2 of a `total` of
    2 (a host showed 130 s of 120), standing still a thousandth per notification while the call ran."""
    d = make_daemon("[tools]\nprogress_interval_seconds = 0.2\n")
    h = McpHost(d, workspace)
    try:
        h.rpc("initialize", {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "x"}})
        msg_id = h.request("tools/call", {"name": "bash", "arguments": {"command": "sleep 1", "timeout_seconds": 2},
                                          "_meta": {"progressToken": "t"}})
        waited = [h.read()["params"]]
        while waited[-1]["progress"] <= 2:  # the person takes longer than the call may run
            waited.append(h.read()["params"])
        with d.client(name="owner") as owner:
            owner.request(p.ApprovalDecide, approval_id=wait_pending(owner)[0].approval_id, decision="approve")
        ran = []
        while (message := h.read()).get("id") != msg_id:
            if not message["params"]["message"].startswith("waiting for approval"):  # (one sent meanwhile)
                ran.append(message["params"])
    finally:
        assert h.close() == 0
    assert ran and all(m["progress"] <= m["total"] for m in ran), ran


def test_a_cancelled_call_sends_no_more_progress(make_daemon, workspace):
    """MCP: progress only for a request in progress. A call stopping slowly (TERM ignored, killed
    2 s on; an MCP server's tool may take until its timeout) went on sending notifications/progress
    for a token the host had dropped (the TypeScript SDK reports each as an error)."""
    d = make_daemon("[tools]\nprogress_interval_seconds = 0.2\n")
    h = McpHost(d, workspace)
    try:
        msg_id = call_bash_approved(h, d, "trap '' TERM; sleep 60", "tok")
        assert h.read()["method"] == "notifications/progress"  # it runs
        h.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": msg_id}})
        ping = h.request("ping")  # handled after the cancel: what follows its answer came after it
        while h.read().get("id") != ping:
            pass
        with d.client(name="owner") as owner:
            deadline = time.monotonic() + 15
            while owner.status().running_calls:  # its 2 s of TERM grace, then KILL
                assert time.monotonic() < deadline, "the cancelled call never ended"
                time.sleep(0.05)
        ping = h.request("ping")
        after = []
        while (message := h.read()).get("id") != ping:
            after.append(message)
        assert after == []  # no progress, and no answer to the cancelled request
    finally:
        assert h.close() == 0


QUIRKS = ROOT / "tests" / "helpers" / "mcp_stdio_quirks.py"


def with_quirks_server(make_daemon, mode: str, tool: str) -> DaemonProc:
    """A daemon with the quirks server `raw` (risk read_only) in `mode`, once its `tool` is listed."""
    d = make_daemon(f'[mcp.servers.raw]\ncommand = "{sys.executable}"\nargs = ["{QUIRKS}", "{mode}"]\n'
                    'sandbox = false\nrisk = "read_only"\n')
    return listing(d, tool)


def listing(d: DaemonProc, tool: str) -> DaemonProc:
    """`d`, once the quirks server `raw` lists `tool`."""
    with d.client(name="t") as c:
        deadline = time.monotonic() + 30
        while f"mcp__raw__{tool}" not in [t.name for t in c.request(p.ToolsList).tools]:
            assert time.monotonic() < deadline, "the server's tools never came"
            time.sleep(0.1)
    return d


@pytest.mark.one_loop
@pytest.mark.parametrize("budget", [None, 64])
def test_tool_names_past_the_hosts_budget_are_listed_short_and_called_by_that_name(make_daemon, workspace, budget):
    """Claude Code lists scvd's tools as mcp__scvd__NAME, and the Anthropic API refuses a tool name
    over 64 characters: with an MCP server's tool named up to 64, every request of its session failed."""
    d = with_quirks_server(make_daemon, "long-names=1", "l" * 54)  # 50,000 `L`s and `0`, cut at 64 in all
    h = McpHost(d, workspace, *(["--max-tool-name", str(budget)] if budget else []))
    try:
        h.rpc("initialize", {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "x"}})
        names = [t["name"] for t in h.rpc("tools/list")["result"]["tools"]]
        (long,) = [name for name in names if name.startswith("mcp__raw__l")]
        if budget is None:  # 64 less `mcp__scvd__`
            assert max(map(len, names)) == len(long) == 53 and re.fullmatch(r"mcp__raw__l{34}_[0-9a-f]{8}", long)
        else:
            assert long == "mcp__raw__" + "l" * 54
        assert {"read", "mcp__raw__echo"} <= set(names)  # the others as they are
        # a server's argument that reads as a shortened name is its data, not scvd's tool (as a system tool's is)
        result = h.rpc("tools/call", {"name": long, "arguments": {"said": long}})["result"]
        assert result["isError"] is False, result
        assert result["structuredContent"] == {"text": json.dumps({"said": long})}, result
        assert long in [t["name"] for t in h.rpc("tools/list")["result"]["tools"]]  # the same each time
    finally:
        assert h.close() == 0


@pytest.mark.one_loop
@pytest.mark.parametrize("budget", [None, 64])
def test_the_approval_question_names_the_tool_as_the_host_lists_it_and_as_scvd_does(make_daemon, workspace, budget):
    """The host's form named the tool by scvd's name only, one its host never listed (and its person
    never saw) when that was over the host's budget. scvd's stays below it: the audit log and
    `scvctl approvals watch` use it."""
    scvd_name = "mcp__raw__" + "l" * 54
    d = listing(make_daemon(f'[mcp.servers.raw]\ncommand = "{sys.executable}"\nargs = ["{QUIRKS}", "long-names=1"]\n'
                            'sandbox = false\nrisk = "process"\n'), "l" * 54)  # not read-only: it asks
    h = McpHost(d, workspace, *(["--max-tool-name", str(budget)] if budget else []))
    try:
        h.rpc("initialize", {"protocolVersion": "2025-11-25", "capabilities": {"elicitation": {}},
                             "clientInfo": {"name": "x"}})
        (listed,) = [t["name"] for t in h.rpc("tools/list")["result"]["tools"] if t["name"].startswith("mcp__raw__l")]
        msg_id = h.request("tools/call", {"name": listed, "arguments": {}})
        question = h.read()
        h.send({"jsonrpc": "2.0", "id": question["id"], "result": {"action": "decline"}})
        answer = h.read()
    finally:
        assert h.close() == 0
    lines = question["params"]["message"].split("\n")
    assert lines[0] == f"scvd asks for your approval: {listed} (process, unsandboxed) in {workspace}", lines
    if budget is None:  # shortened: scvd's own name follows
        assert listed != scvd_name and lines[1] == f"  scvd's name for it: {scvd_name}", lines
    else:  # within the budget: named once, as it is
        assert listed == scvd_name and lines[1].startswith("  MCP server raw"), lines
    assert answer["id"] == msg_id and answer["result"]["isError"], answer


@pytest.mark.one_loop
def test_a_credential_missing_error_names_the_tool_as_the_host_lists_it_and_store_secret_takes_that_name(
        make_daemon, workspace):
    """It named scvd's long name, which the host never listed; given the name the host knows, as told,
    store_secret said it was no tool scvd has. Once a person typed the value, it said to call the
    long name again."""
    from test_mcp_servers import enter_secret, keyed_daemon

    d = keyed_daemon(make_daemon, f'[mcp.servers.raw]\ncommand = "{sys.executable}"\nargs = ["{QUIRKS}", '
                     '"long-names=1"]\nsandbox = false\nrisk = "read_only"\nenv = {LEAK_TOKEN = {secret = "K"}}\n',
                     "K", "old")
    h = McpHost(listing(d, "l" * 54), workspace)
    try:
        h.rpc("initialize", {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "x"}})
        (long,) = [t["name"] for t in h.rpc("tools/list")["result"]["tools"] if t["name"].startswith("mcp__raw__l")]
        refused = h.rpc("tools/call", {"name": long, "arguments": {"refuse": True}})["result"]
        told = re.search(r"store_secret \(key 'K', tool '(\w+)'\)", refused["content"][0]["text"])
        healing = h.rpc("tools/call", {"name": "store_secret", "arguments": {"key": "K", "tool": told[1]}})["result"]
        with d.client(name="me") as me:
            me.request(p.ApprovalsWatch)
            msg_id = h.request("tools/call", {"name": "store_secret", "arguments": {"key": "K", "tool": told[1]}})
            enter_secret(me, "new")
            while (healed := h.read()).get("id") != msg_id:  # the server's restart: tools/list_changed
                pass
    finally:
        assert h.close() == 0
    healed = healed["result"]
    assert not healed["isError"] and healed["structuredContent"]["next"] == f"call {long} again", healed
    assert f"call {long} again" in healed["content"][0]["text"] and "l" * 54 not in healed["content"][0]["text"]
    assert refused["content"][0]["text"].startswith(f"credential_missing: {long}: 401 Bad credentials; "), refused
    assert told[1] == long and "mcp__raw__" + "l" * 54 not in refused["content"][0]["text"], refused
    assert healing["isError"] and "scvctl secrets set K" in healing["content"][0]["text"], healing  # nobody to type it
    assert "is not a tool scvd has" not in healing["content"][0]["text"], healing


@pytest.mark.one_loop
def test_a_tool_name_budget_too_small_for_a_hash_is_a_usage_error(daemon, workspace):
    done = subprocess.run([sys.executable, "-m", "scvctl", "mcp", "--workspace", str(workspace), "--max-tool-name",
                           "12"], env=base_env(daemon.home), capture_output=True, text=True, timeout=30)
    assert done.returncode == 2 and ("argument --max-tool-name: '12' is not a length of at least 16 (a name's "
                                     "start, `_` and 8 hex digits)") in done.stderr, done.stderr


def test_tools_a_server_changes_while_its_first_tools_list_runs_come_without_another_notice(make_daemon):
    """Its list_changed came before scvd was ready to relist: the tools stayed as first listed until
    the server sent another, which it may never do."""
    d = with_quirks_server(make_daemon, "changes-while-listing", "later")
    with d.client(name="t") as c:
        assert {"mcp__raw__echo", "mcp__raw__later"} <= {t.name for t in c.request(p.ToolsList).tools}


@pytest.mark.one_loop
def test_an_mcp_call_stopped_at_its_timeout_says_which_setting_gives_it_more_time(make_daemon, workspace):
    """It said only that the call ran past its dispatch timeout, with no hint: nothing told the
    person that the server's timeout_seconds (or tools.default_timeout_seconds) sets it."""
    server = f'command = "{sys.executable}"\nargs = ["{QUIRKS}", "hang"]\nsandbox = false\nrisk = "read_only"\n'
    d = make_daemon(f"[tools]\ndefault_timeout_seconds = 1\n[mcp.servers.raw]\n{server}"
                    f"[mcp.servers.own]\n{server}timeout_seconds = 1.5\n")
    with d.client(name="t") as c:
        wait_until(lambda: {"mcp__raw__hang", "mcp__own__hang"} <= {t.name for t in c.request(p.ToolsList).tools},
                   what="both servers' tools")
        # at once, a session each: the three timeouts run out together
        started = [c.start_call(c.open_session(workspace), tool, {}, **fields) for tool, fields in (
            ("mcp__raw__hang", {}), ("mcp__own__hang", {}), ("mcp__own__hang", {"timeout_seconds": 1}))]
        default, own, lowered = (c.wait_call(call_id) for call_id in started)
    assert default.error.message == "mcp__raw__hang ran past its dispatch timeout of 1 s and was stopped"
    assert default.error.hint == ("set mcp.servers.raw.timeout_seconds, or raise tools.default_timeout_seconds, "
                                  "in config.toml, or ask for less per call")
    assert own.error.kind == "timeout" and "timeout of 1.5 s" in own.error.message
    assert own.error.hint == "raise mcp.servers.own.timeout_seconds in config.toml, or ask for less per call"
    assert lowered.error.hint == "send the call with a larger timeout_seconds, or ask for less per call"


def test_progress_grows_with_each_notification_though_a_tool_reports_at_once(make_daemon, workspace):
    """An MCP server sending steps within 0.1 s: each went on with the same `progress` (seconds,
    to 0.1 s), and MCP says it must increase with each notification."""
    d = with_quirks_server(make_daemon, "steps", "steps")
    h = McpHost(d, workspace)
    try:
        h.rpc("initialize", {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "x"}})
        msg_id = h.request("tools/call", {"name": "mcp__raw__steps", "arguments": {},
                                          "_meta": {"progressToken": "steps"}})
        progress = []
        while (message := h.read()).get("id") != msg_id:
            progress.append(message["params"])
        assert [m["message"] for m in progress] == [f"mcp__raw__steps: {n}/3" for n in (1, 2, 3)]
        values = [m["progress"] for m in progress]
        assert values == sorted(set(values)), values
    finally:
        assert h.close() == 0


def test_the_host_hears_when_an_mcp_servers_tools_come_and_go(host, daemon):
    """A server started after attach (scvd starts them in the background) reaches the host's session."""
    assert not [t for t in host.rpc("tools/list")["result"]["tools"] if t["name"].startswith("mcp__")]
    reloaded(daemon, f'[mcp.servers.late]\ncommand = "{sys.executable}"\nargs = ["{QUIRKS}", "plain"]\n'
                   'sandbox = false\nrisk = "read_only"\n')
    assert host.read_within(10) == {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}
    assert "mcp__late__echo" in [t["name"] for t in host.rpc("tools/list")["result"]["tools"]]
    result = host.rpc("tools/call", {"name": "mcp__late__echo", "arguments": {"a": 1}})["result"]
    assert result["isError"] is False, result
    reloaded(daemon, "# no MCP servers\n")  # the server removed: its tools go from the open session too
    assert host.read_within(10) == {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}
    assert "mcp__late__echo" not in [t["name"] for t in host.rpc("tools/list")["result"]["tools"]]


def test_the_host_is_not_told_of_a_change_when_a_server_lists_the_same_tools_again(make_daemon, workspace, tmp_path):
    """Every tools/list after a server's list_changed told the host its tools changed, though they had
    not: a server sending list_changed each millisecond made `scvctl mcp` send its host ~800 a second."""
    lists = tmp_path / "lists"
    d = make_daemon(f'[mcp.servers.raw]\ncommand = "{sys.executable}"\nargs = ["{QUIRKS}", "relists", "{lists}"]\n'
                    'sandbox = false\nrisk = "read_only"\n')
    listing(d, "announce")
    h = McpHost(d, workspace)
    try:
        h.rpc("initialize", {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "x"}})
        h.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        heard = []

        def answer(method: str, params: dict) -> dict:
            msg_id = h.request(method, params)
            while (message := h.read()).get("id") != msg_id:
                heard.append(message)
            return message["result"]

        for n in range(1, 6):  # each list_changed, scvd lists the tools again: the same ones
            assert answer("tools/call", {"name": "mcp__raw__announce", "arguments": {}})["isError"] is False
            wait_until(lambda: lists.read_text().count("list") == 1 + n, what=f"tools/list {1 + n}")
        time.sleep(0.5)  # scvd takes the last list's answer
        assert "mcp__raw__announce" in [t["name"] for t in answer("tools/list", {})["tools"]]
        assert heard == [], heard
    finally:
        assert h.close() == 0


@pytest.mark.one_loop
def test_a_go_servers_null_properties_do_not_cost_the_host_its_tools_list(make_daemon, workspace):
    """A Go MCP server lists a tool without arguments as `properties: null, required: null` (a nil
    map and slice). Passed on as it was, hosts on the TypeScript SDK (most editors and desktop apps)
    refused the whole tools/list: none of scvd's tools could be called. MCP gives the root an
    object `properties` and a list `required`."""
    d = with_quirks_server(make_daemon, "go-nulls", "nil")
    h = McpHost(d, workspace)
    try:
        h.rpc("initialize", {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "x"}})
        tools = {t["name"]: t for t in h.rpc("tools/list")["result"]["tools"]}
        assert tools["mcp__raw__nil"]["inputSchema"] == {"type": "object", "properties": {}}
        for tool in tools.values():
            schema = tool["inputSchema"]
            assert schema["type"] == "object" and isinstance(schema.get("properties", {}), dict), tool
            assert isinstance(schema.get("required", []), list), tool
        result = h.rpc("tools/call", {"name": "mcp__raw__nil", "arguments": {}})["result"]
        assert result["isError"] is False, result  # called as before: scvd checks with the server's own schema
    finally:
        assert h.close() == 0


@pytest.mark.one_loop
def test_tools_list_is_the_sessions_own_after_a_reload(host, daemon, workspace):
    """A host's session keeps the tools of its opening; tools/list shows those it can call."""
    shutil.copytree(ROOT / "examples" / "tools" / "script" / "word_count",
                    daemon.home / "tools" / "script" / "word_count")
    daemon.proc.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 15
    while "configuration reloaded from" not in daemon.log():
        assert time.monotonic() < deadline, "the reload never ended"
        time.sleep(0.05)
    with daemon.client(name="t") as c:
        assert "script_word_count" in [t.name for t in c.request(p.ToolsList).tools]  # new sessions have it
    listed = [t["name"] for t in host.rpc("tools/list")["result"]["tools"]]
    assert "script_word_count" not in listed and "read" in listed
    error = host.rpc("tools/call", {"name": "script_word_count", "arguments": {"text": "a b"}})["error"]
    assert error["code"] == -32602 and "open a new session to use it" in error["message"], error


@pytest.mark.one_loop
def test_a_result_with_a_name_that_is_not_utf8_is_answered(daemon, workspace, tmp_path):
    """A script tool printing json.dumps(os.listdir()) for a Latin-1 file name: the host got
    -32603 "internal error in scvctl mcp" (the lone surrogate could not be encoded)."""
    import os

    folder = daemon.home / "tools" / "script" / "names"
    folder.mkdir(parents=True)
    (folder / "tool.json").write_text(json.dumps({
        "description": "List the names in the workspace.\nUse for a test; read for files.", "risk": "read_only",
        "parameters": {"type": "object", "properties": {}, "additionalProperties": False}}))
    (folder / "run").write_text("#!/bin/bash\ncat >/dev/null\n"
                                "python3 -c 'import json, os; print(json.dumps({\"files\": os.listdir(\".\")}))'\n")
    (folder / "run").chmod(0o700)
    reloaded(daemon, "# no MCP servers\n")
    os.close(os.open(bytes(workspace) + b"/caf\xe9.txt", os.O_CREAT | os.O_WRONLY, 0o600))
    h = McpHost(daemon, workspace)
    try:
        h.rpc("initialize", {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t"}})
        result = h.rpc("tools/call", {"name": "script_names", "arguments": {}})["result"]
        assert result["isError"] is False, result
        assert result["structuredContent"] == {"files": ["caf\ufffd.txt"]}
    finally:
        h.close()


def test_a_killed_scvd_takes_a_stdio_server_that_outlives_its_stdin_with_it(make_daemon):
    """SIGKILL leaves scvd no time to stop its servers; one that does not exit when its stdin ends
    ran on for good, with its secrets, unless systemd killed the unit's cgroup: the guardian kills it."""
    from harness import pid_gone
    from scvd.proctree import scan_processes

    d = with_quirks_server(make_daemon, "stubborn", "echo")
    server = [q.pid for q in scan_processes().values() if q.ppid == d.proc.pid and q.pid == q.pgid]
    assert len(server) == 1, server  # the server leads its own group; the guardian is in scvd's
    try:
        d.proc.kill()
        d.proc.wait(10)
        wait_until(lambda: pid_gone(server[0]), timeout=10, what="the killed scvd's stdio server to end")
    finally:
        if not pid_gone(server[0]):
            os.kill(server[0], signal.SIGKILL)
