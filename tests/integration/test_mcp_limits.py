"""What one MCP server may cost everyone else: how many tools scvd takes from it, how often it relists them.

Real daemons, with a stdio server built on the MCP SDK (tests/helpers/mcp_sdk_stdio.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from scvd import protocol as p

from conftest import ROOT, reloaded, wait_pending
from harness import wait_until
from test_mcp import McpHost

pytestmark = pytest.mark.slow

SDK_SERVER = ROOT / "tests" / "helpers" / "mcp_sdk_stdio.py"


def sdk_table(tools: int, schema_bytes: int, lists: Path, more: str = "", name: str = "many") -> str:
    return (f'[mcp.servers.{name}]\ncommand = "{sys.executable}"\n'
            f'args = ["{SDK_SERVER}", "{tools}", "{schema_bytes}", "{lists}"]\nsandbox = false\nrisk = "read_only"\n'
            + more)


def ready(c) -> p.McpServerStatus:
    wait_until(lambda: any(s.name == "many" and s.state == "ready" for s in c.request(p.Status).mcp_servers),
               timeout=60, what="mcp server many ready")
    return next(s for s in c.request(p.Status).mcp_servers if s.name == "many")


def mcp_names(listed: p.Tools) -> list[str]:
    return [t.name.removeprefix("mcp__many__") for t in listed.tools if t.name.startswith("mcp__many__")]


@pytest.mark.one_loop
def test_a_server_listing_5000_tools_gives_its_first_256_and_says_what_to_do(make_daemon, workspace, tmp_path):
    d = make_daemon(sdk_table(5000, 10, tmp_path / "lists"))
    with d.client(name="t") as c:
        assert ready(c).tools == 256
        listed = c.request(p.ToolsList)
        assert mcp_names(listed) == ["burst", "ping"] + [f"t{i:05d}" for i in range(254)]  # the server's order
        (error,) = [e.message for e in listed.errors if e.source == "mcp:many"]
        assert error == ("mcp server many lists 5002 tools, more than mcp.servers.many.max_tools (256): scvd takes "
                         "the first 256 in the server's order and leaves the other 4746 out; raise "
                         "mcp.servers.many.max_tools if you need them, or turn tools off on the server")
        session = c.open_session(workspace)
        assert c.call(session, "mcp__many__t00253", {}).ok
        assert c.call(session, "mcp__many__t00254", {}).error.kind == "unknown_tool"
    assert error in d.log()  # the warning


@pytest.mark.one_loop
def test_max_tools_sets_how_many_are_taken(make_daemon, tmp_path):
    d = make_daemon(sdk_table(50, 10, tmp_path / "lists", "max_tools = 10\n"))
    with d.client(name="t") as c:
        assert ready(c).tools == 10
        assert mcp_names(c.request(p.ToolsList))[-1] == "t00007"


@pytest.mark.one_loop
def test_tools_past_the_servers_share_of_a_frame_are_left_out_and_tools_list_works(make_daemon, tmp_path):
    # 200 tools of 60 KB each: 12 MB, past the 8 MiB frame; every client's tools.list failed with `limit`
    d = make_daemon(sdk_table(200, 60_000, tmp_path / "lists"))
    with d.client(name="t") as c:
        taken = ready(c).tools
        listed = c.request(p.ToolsList)
        assert 0 < taken < 200 and len(mcp_names(listed)) == taken
        (error,) = [e.message for e in listed.errors if e.source == "mcp:many"]
        assert error == (f"mcp server many's tools take more than its share of a tools.list frame (2097152 bytes: a "
                         f"quarter of server.server_frame_bytes): scvd takes the first {taken} in the server's order "
                         "and leaves the rest out; raise server.server_frame_bytes, or turn tools off on the server")


@pytest.mark.one_loop
def test_a_reload_that_enables_another_server_takes_a_running_servers_tools_again_within_its_new_share(
        make_daemon, tmp_path):
    first = sdk_table(200, 60_000, tmp_path / "lists")
    d = make_daemon(first)
    with d.client(name="t") as c:
        alone = ready(c).tools
        reloaded(d, first + sdk_table(1, 10, tmp_path / "other", name="other"))
        listed = c.request(p.ToolsList)  # with the other's tools, it fits one frame still
        now = len(mcp_names(listed))
        assert 0 < now < alone and ready(c).tools == now
        (error,) = [e.message for e in listed.errors if e.source == "mcp:many"]
        assert error.startswith("mcp server many's tools take more than its share of a tools.list frame (1048576 "
                                "bytes: a quarter of server.server_frame_bytes, split among 2 enabled servers): "
                                f"scvd takes the first {now} in the server's order"), error


@pytest.mark.one_loop
def test_a_call_waiting_for_a_tool_a_reload_leaves_past_its_share_is_told_so(make_daemon, workspace, tmp_path):
    """It was told the server "redefined or stopped listing the tool", which the server never did."""
    first = sdk_table(200, 60_000, tmp_path / "lists", 'tool_risk = { t00020 = "process" }\n')
    d = make_daemon(first)
    with d.client(name="agent") as c, d.client(name="me") as me:
        ready(c)
        assert "mcp__many__t00020" in [t.name for t in c.request(p.ToolsList).tools]
        call_id = c.start_call(c.open_session(workspace), "mcp__many__t00020", {})
        wait_pending(me)
        reloaded(d, first + sdk_table(1, 10, tmp_path / "other", name="other"))
        assert "mcp__many__t00020" not in [t.name for t in c.request(p.ToolsList).tools]
        done = c.wait_call(call_id)
        assert done.error.kind == "denied" and ("mcp server many's tool was left out: past its share of a "
                                                "tools.list frame after a reload while this call waited"
                                                in done.error.message), done.error


def test_a_burst_of_list_changed_notifications_is_a_few_tools_lists(make_daemon, workspace, tmp_path):
    lists = tmp_path / "lists"
    d = make_daemon(sdk_table(3, 10, lists))
    with d.client(name="t") as c:
        ready(c)
        session = c.open_session(workspace)
        assert c.call(session, "mcp__many__burst", {"n": 1000}).ok
        wait_until(lambda: "mcp__many__after_burst" in [t.name for t in c.request(p.ToolsList).tools],
                   what="the tools listed after the burst")
        assert c.call(session, "mcp__many__ping", {}).ok  # the server has been sent every tools/list by then
        # the first list, one for the burst's first notification, one for those that came while it ran
        assert len(lists.read_text().splitlines()) <= 3, "a tools/list per notification"


@pytest.mark.one_loop
def test_an_unknown_tool_among_thousands_is_told_the_closest_names_and_a_folded_list(make_daemon, workspace, tmp_path):
    """It was told every tool's name: with one server of 4,096 tools, one typo's answer was 250 KB,
    through `scvctl mcp` a JSON-RPC error read whole into a host model's context."""
    d = make_daemon(sdk_table(4096, 10, tmp_path / "lists", "max_tools = 4096\n"))
    listed = ("tools: read, write, read_skill, bash, agent_claude, agent_codex, agent_pi, "
              "mcp__many__* (4096 tools)")
    with d.client(name="t") as c:
        assert ready(c).tools == 4096
        session = c.open_session(workspace)
        error = c.call(session, "bsah", {"command": "ls"}).error
        assert (error.kind, error.message) == ("unknown_tool", f"no tool named 'bsah'; closest: bash; {listed}")
        error = c.call(session, "mcp__mny__t00123", {}).error
        assert error.message.startswith("no tool named 'mcp__mny__t00123'; closest: mcp__many__t00123, "), error
        assert error.message.endswith(listed)
    host = McpHost(d, workspace)
    host.rpc("initialize", {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "host"}})
    error = host.rpc("tools/call", {"name": "bsah", "arguments": {}})["error"]
    assert error["message"] == f"unknown_tool: no tool named 'bsah'; closest: bash; {listed}"
    host.close()
