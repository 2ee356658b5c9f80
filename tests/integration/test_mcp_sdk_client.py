"""The official MCP SDK's client (`ClientSession` over `stdio_client`) against `scvctl mcp` as a real
subprocess: list and read, writes approved and denied through elicitation, a host without
elicitation decided from `scvctl approvals approve`, and cancellation."""

from __future__ import annotations

import hashlib
import re
import subprocess
import sys
import time
from pathlib import Path

import anyio
import mcp_types as types
import pytest
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.shared.exceptions import MCPError

from scvd import protocol as p

from conftest import ROOT, DaemonProc, base_env, reloaded, wait_pending
from test_mcp import with_quirks_server

pytestmark = pytest.mark.slow

LONG = "mcp__raw__" + "l" * 54  # the quirks server's long-names tool: 64 in scvd, over the host's 53
SHORT = f"{LONG[:44]}_{hashlib.sha256(LONG.encode()).hexdigest()[:8]}"  # as docs/protocol.md shortens it


def params(d: DaemonProc, workspace: Path) -> StdioServerParameters:
    return StdioServerParameters(command=sys.executable, args=["-m", "scvctl", "mcp", "--workspace", str(workspace)],
                                 env=base_env(d.home), cwd=str(ROOT))


async def session_of(d: DaemonProc, workspace: Path, body, *, elicitation=None, on_message=None):
    async with stdio_client(params(d, workspace)) as (read, write):
        async with ClientSession(read, write, elicitation_callback=elicitation, message_handler=on_message) as s:
            await s.initialize()
            return await body(s)


def answering(*answers: types.ElicitResult | None, seen: list | None = None):
    """An elicitation callback giving `answers` in turn (None: wait until cancelled)."""
    queue = list(answers)

    async def callback(context, request):
        if seen is not None:
            seen.append(request)
        answer = queue.pop(0)
        if answer is None:
            try:
                await anyio.sleep_forever()
            finally:
                seen.append("cancelled")
        return answer

    return callback


def text_of(result: types.CallToolResult) -> str:
    return "".join(c.text for c in result.content if isinstance(c, types.TextContent))


@pytest.mark.one_loop
def test_list_and_read(daemon, workspace):
    (workspace / "notes.txt").write_text("read me\n")

    async def body(s):
        names = [t.name for t in (await s.list_tools()).tools]
        return names, await s.call_tool("read", {"path": "notes.txt"})

    names, result = anyio.run(session_of, daemon, workspace, body)
    assert {"read", "write", "bash"} <= set(names)
    assert not result.is_error and "read me" in text_of(result)


@pytest.mark.one_loop
def test_an_unknown_tool_is_a_protocol_error_naming_the_tools(daemon, workspace):
    async def body(s):
        with pytest.raises(MCPError) as refused:
            await s.call_tool("nope", {})
        return refused.value

    error = anyio.run(session_of, daemon, workspace, body)
    assert error.code == -32602  # MCP: an unknown tool is a protocol error, not the tool's result
    assert error.message.startswith("unknown_tool: no tool named 'nope'; tools: ") and "read" in error.message


@pytest.mark.one_loop
def test_a_write_approved_through_elicitation(daemon, workspace):
    seen: list = []
    approve = types.ElicitResult(action="accept", content={"decision": "approve"})
    with daemon.client(name="watcher") as watcher:
        watcher.request(p.ApprovalsWatch)

        async def body(s):
            return await s.call_tool("write", {"path": "out.txt", "content": "from the host", "mode": "create"})

        result = anyio.run(lambda: session_of(daemon, workspace, body, elicitation=answering(approve, seen=seen)))
        events = [watcher.next_event(), watcher.next_event()]
    assert not result.is_error, text_of(result)
    assert (workspace / "out.txt").read_text() == "from the host"
    (request,) = seen
    assert request.message.startswith(f"scvd asks for your approval: write (filesystem, unsandboxed) in {workspace}")
    assert request.requested_schema["properties"]["decision"]["enum"] == ["approve", "approve_session", "deny"]
    requested, resolved = events  # the watchers saw it too, and who decided
    assert isinstance(requested, p.ApprovalRequested) and requested.tool == "write"
    assert isinstance(resolved, p.ApprovalResolved) and resolved.decision == "approve"
    assert "scvctl-mcp" in resolved.decided_by and resolved.reason == "decided in the MCP host"


@pytest.mark.one_loop
def test_a_write_denied_through_elicitation(daemon, workspace):
    async def body(s):
        return await s.call_tool("write", {"path": "out.txt", "content": "x", "mode": "create"})

    deny = types.ElicitResult(action="decline")
    result = anyio.run(lambda: session_of(daemon, workspace, body, elicitation=answering(deny)))
    assert result.is_error and text_of(result).startswith("denied: approval ")
    assert "decided in the MCP host" in text_of(result)
    assert not (workspace / "out.txt").exists()


@pytest.mark.one_loop
def test_approve_for_this_session_covers_the_next_write_but_not_a_sensitive_one(daemon, workspace):
    seen: list = []
    session = types.ElicitResult(action="accept", content={"decision": "approve_session"})
    approve = types.ElicitResult(action="accept", content={"decision": "approve"})

    async def body(s):
        first = await s.call_tool("write", {"path": "a.txt", "content": "1", "mode": "create"})
        second = await s.call_tool("write", {"path": "b.txt", "content": "2", "mode": "create"})
        third = await s.call_tool("write", {"path": ".envrc", "content": "export A=1\n", "mode": "create"})
        return first, second, third

    results = anyio.run(lambda: session_of(daemon, workspace, body,
                                           elicitation=answering(session, approve, seen=seen)))
    assert not any(r.is_error for r in results) and len(seen) == 2
    envrc = seen[1]  # the grant did not cover it, and the host is not offered a session scope for it
    assert "always asks, approved once only: '.envrc' matches approvals.always_ask '.envrc'" in envrc.message
    assert envrc.requested_schema["properties"]["decision"]["enum"] == ["approve", "deny"]


def test_a_decision_from_a_watcher_wins_and_the_hosts_question_is_withdrawn(daemon, workspace):
    seen: list = []

    async def body(s):
        return await s.call_tool("write", {"path": "out.txt", "content": "watcher said yes", "mode": "create"})

    def decide():
        with daemon.client(name="me") as me:
            (request,) = wait_pending(me)
            subprocess.run([sys.executable, "-m", "scvctl", "approvals", "approve", request.approval_id],
                           env=base_env(daemon.home), check=True, capture_output=True, timeout=30)

    async def main():
        async with anyio.create_task_group() as tg:
            tg.start_soon(anyio.to_thread.run_sync, decide)
            return await session_of(daemon, workspace, body, elicitation=answering(None, seen=seen))

    result = anyio.run(main)
    assert not result.is_error, text_of(result)
    assert (workspace / "out.txt").read_text() == "watcher said yes"
    deadline = time.monotonic() + 10
    while "cancelled" not in seen and time.monotonic() < deadline:
        time.sleep(0.05)
    assert seen[-1] == "cancelled"  # scvctl mcp sent notifications/cancelled for its elicitation


def test_a_host_without_elicitation_waits_for_scvctl_approvals_approve(daemon, workspace):
    def decide():
        with daemon.client(name="me") as me:
            (request,) = wait_pending(me)
        done = subprocess.run([sys.executable, "-m", "scvctl", "approvals", "approve", request.approval_id],
                              env=base_env(daemon.home), capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, done.stderr

    async def body(s):
        async with anyio.create_task_group() as tg:
            tg.start_soon(anyio.to_thread.run_sync, decide)
            return await s.call_tool("write", {"path": "out.txt", "content": "approved in a terminal", "mode": "create"})

    result = anyio.run(session_of, daemon, workspace, body)
    assert not result.is_error, text_of(result)
    assert (workspace / "out.txt").read_text() == "approved in a terminal"


def test_a_call_waiting_for_approval_sends_progress_to_a_host_that_asked(make_daemon, workspace):
    """Nothing reached the host while a call waited for a person: a host whose request timeout only
    progress resets (the TypeScript SDK's resetTimeoutOnProgress, Claude Code) gave up on the call
    although the person was about to decide."""
    d = make_daemon("[tools]\nprogress_interval_seconds = 0.2\n")
    heard: list[tuple[float, str | None]] = []

    def decide() -> str:
        with d.client(name="me") as me:
            (request,) = wait_pending(me)
            me.request(p.ApprovalDecide, approval_id=request.approval_id, decision="approve")
        return request.approval_id

    async def on_progress(progress, total, message):
        heard.append((progress, message))
        if len(heard) == 2:  # the second one: it keeps coming while the call waits
            heard.append((0, await anyio.to_thread.run_sync(decide)))

    async def body(s):
        with anyio.fail_after(60):  # without progress nobody decides: fail rather than wait for ever
            return await s.call_tool("write", {"path": "out.txt", "content": "waited", "mode": "create"},
                                     progress_callback=on_progress)

    result = anyio.run(session_of, d, workspace, body)
    assert not result.is_error, text_of(result)
    (_, first), (_, second), (_, approval_id) = heard[:3]
    assert first == second == f"waiting for approval {approval_id}"
    assert heard[0][0] < heard[1][0]  # MCP's progress grows: seconds waited
    assert (workspace / "out.txt").read_text() == "waited"


def test_cancellation_reaches_scvd(daemon, workspace):
    approve = types.ElicitResult(action="accept", content={"decision": "approve"})

    def running_calls_after_cancel() -> int:
        with daemon.client(name="me") as me:
            deadline = time.monotonic() + 15
            while me.status().running_calls and time.monotonic() < deadline:
                time.sleep(0.1)
            return me.status().running_calls

    async def body(s):
        with anyio.move_on_after(2) as scope:
            await s.call_tool("bash", {"command": "sleep 60"})
        # the host's session is still open: only notifications/cancelled can have stopped the call
        return scope.cancelled_caught, await anyio.to_thread.run_sync(running_calls_after_cancel)

    cancelled, running = anyio.run(lambda: session_of(daemon, workspace, body, elicitation=answering(approve)))
    assert cancelled and running == 0


def test_a_server_added_after_attach_is_announced_and_listed(daemon, workspace):
    quirks = ROOT / "tests" / "helpers" / "mcp_stdio_quirks.py"
    changed = anyio.Event()

    async def on_message(message):
        if isinstance(message, types.ToolListChangedNotification):
            changed.set()

    async def body(s):
        before = [t.name for t in (await s.list_tools()).tools]
        await anyio.to_thread.run_sync(reloaded, daemon, f'[mcp.servers.late]\ncommand = "{sys.executable}"\n'
                                       f'args = ["{quirks}", "plain"]\nsandbox = false\n')
        with anyio.fail_after(15):
            await changed.wait()
        return before, [t.name for t in (await s.list_tools()).tools]

    before, after = anyio.run(lambda: session_of(daemon, workspace, body, on_message=on_message))
    assert "mcp__late__echo" not in before and "mcp__late__echo" in after


@pytest.mark.one_loop
def test_a_host_that_kept_an_earlier_sessions_list_calls_a_shortened_name_without_listing(make_daemon, workspace):
    """Claude Code keeps the tools of an earlier session and calls them before it lists: a shortened
    name was mapped back only after this session's tools/list, and was unknown_tool until then."""
    d = with_quirks_server(make_daemon, "long-names=1", LONG.removeprefix("mcp__raw__"))

    async def body(s):
        return await s.call_tool(SHORT, {"said": "hi"})  # the session's first request after initialize

    result = anyio.run(session_of, d, workspace, body)
    assert not result.is_error and result.structured_content == {"text": '{"said": "hi"}'}, text_of(result)


@pytest.mark.one_loop
def test_an_unknown_tool_is_told_the_closest_names_as_the_host_knows_them(make_daemon, workspace):
    """The closest names were scvd's: a host that knows the tool only as shortened was told a name
    it cannot call (and the Anthropic API would refuse)."""
    d = with_quirks_server(make_daemon, "long-names=1", LONG.removeprefix("mcp__raw__"))
    typo, stale = SHORT[:-9], SHORT[:-8] + "00000000"  # the name cut short; its hash wrong

    async def refused(s, name: str) -> MCPError:
        with pytest.raises(MCPError) as error:
            await s.call_tool(name, {})
        return error.value

    async def body(s):
        first = await refused(s, typo)  # before any tools/list: a host that kept an earlier session's
        listed = [t.name for t in (await s.list_tools()).tools]
        return listed, [first, await refused(s, stale)]

    listed, refused = anyio.run(session_of, d, workspace, body)
    for name, error in zip((typo, stale), refused):
        assert error.code == -32602 and error.message.startswith(f"unknown_tool: no tool named '{name}'; closest: ")
        closest = error.message.split("; closest: ", 1)[1].split("; ", 1)[0].split(", ")
        assert SHORT in closest and set(closest) <= set(listed), error.message


@pytest.mark.one_loop
def test_a_call_past_the_sessions_limit_is_an_error_result_the_model_reads(make_daemon, workspace):
    """A refusal by a limit (server.max_calls_per_session, server.max_call_bytes_per_connection) was
    JSON-RPC error -32603, which hosts show as a crashed server; the model never read what to do. Then it
    read a socket client's `cancel those you no longer need (call.cancel)`, which a host cannot send."""
    d = make_daemon("[server]\nmax_calls_per_session = 1\n")

    def waiting() -> None:
        with d.client(name="me") as me:
            wait_pending(me)

    async def body(s):
        async with anyio.create_task_group() as tg:  # a write waits for approval: the session's one call
            tg.start_soon(s.call_tool, "write", {"path": "out.txt", "content": "never", "mode": "create"})
            await anyio.to_thread.run_sync(waiting)
            refused = await s.call_tool("read", {"path": "notes.txt"})
            tg.cancel_scope.cancel()
        return refused

    refused = anyio.run(session_of, d, workspace, body)
    assert refused.is_error and text_of(refused) == (
        "limit: this session already holds 1 calls that have not completed (server.max_calls_per_session); "
        "wait for earlier tool calls to finish, or cancel them, then call again")  # a host sends no call.cancel
