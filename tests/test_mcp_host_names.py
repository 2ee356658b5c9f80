"""Tool names as a host gets them: the long ones shortened within its budget, each still its own tool."""

from __future__ import annotations

import re

from scvd.mcp_host.names import HostNames

PR = "mcp__github__add_pull_request_review_comment_to_pending_review"  # 62: 73 after Claude Code's prefix


def test_names_within_the_budget_stay_and_longer_ones_are_cut_with_a_hash_that_maps_back() -> None:
    names = HostNames(53)
    shown = names.listed(["read", PR, "mcp__github__get_me"])
    assert shown[0] == "read" and shown[2] == "mcp__github__get_me"
    assert re.fullmatch(r"mcp__github__add_pull_request_review_comment_[0-9a-f]{8}", shown[1]) and len(shown[1]) == 53
    assert [names.scvd_name(n) for n in shown] == ["read", PR, "mcp__github__get_me"]
    assert names.scvd_name("mcp__nowhere") == "mcp__nowhere" and names.scvd_name(["x"]) == ["x"]
    assert HostNames(53).listed([PR]) == [shown[1]]  # the same name in every list


def test_two_long_names_of_one_start_and_a_listed_name_like_a_short_one_stay_apart() -> None:
    first, second = PR, PR[:-1] + "x"
    short = HostNames(53).listed([first])[0]
    names = HostNames(53)
    shown = names.listed([short, first, second])  # a tool already named as `first` would be shortened
    assert shown[0] == short and len(set(shown)) == 3 and all(len(n) <= 53 for n in shown)
    assert shown[1].startswith(PR[:43]) and len(shown[1]) == 53 and re.search(r"_[0-9a-f]{9}$", shown[1])
    assert [names.scvd_name(n) for n in shown] == [short, first, second]


def test_names_are_unmapped_until_a_list_and_then_only_a_shortened_one_it_did_not_give() -> None:
    """A host keeps an earlier session's list (Claude Code does) and calls a shortened name first."""
    short = HostNames(53).listed([PR])[0]
    names = HostNames(53)
    assert names.unmapped(short) and names.unmapped("read") and names.scvd_name(short) == short
    names.listed(["read", PR])
    assert not names.unmapped(short) and names.scvd_name(short) == PR
    assert not names.unmapped("read") and not names.unmapped("nope") and not names.unmapped(None)
    stale = short[:-8] + "00000000"  # a hash no list gave: the tools may have changed since
    assert names.unmapped(stale) and not names.unmapped(stale[:-1]) and not names.unmapped(stale + "0")


def test_text_about_tools_names_them_as_the_host_got_them() -> None:
    names = HostNames(53)
    short = names.listed(["read", PR])[1]
    said = f"no tool named {PR[:-1]!r}; closest: {PR}, {PR}x, read; tools: read, mcp__github__* (2 tools)"
    assert names.host_text(said) == (f"no tool named {PR[:-1]!r}; closest: {short}, {PR}x, read; "
                                     "tools: read, mcp__github__* (2 tools)")  # a whole name only
    assert HostNames(53).host_text(said) == said  # nothing shortened: as it was


def test_a_credential_missing_error_names_the_tool_as_the_host_got_it_and_store_secret_takes_that_name() -> None:
    """It named scvd's long name, which the host never listed: told to give it to store_secret, the
    agent gave the name it knows, which scvd then took for a tool it does not have."""
    from scvd.mcp_host.jsonrpc import failure

    names = HostNames(53)
    short = names.listed(["read", "store_secret", PR], system=["store_secret"])[2]
    said = (f"mcp server github: {PR}: 401 Bad credentials; store a new value with store_secret (key 'GH_TOKEN', "
            f"tool '{PR}'), then call the tool again")
    text = failure("credential_missing", said, f"scvctl secrets set GH_TOKEN for {PR}", names.host_text)
    assert text["content"][0]["text"] == (
        f"credential_missing: mcp server github: {short}: 401 Bad credentials; store a new value with store_secret "
        f"(key 'GH_TOKEN', tool '{short}'), then call the tool again\nhint: scvctl secrets set GH_TOKEN for {short}")
    given = {"key": "GH_TOKEN", "tool": short, "question": short + " x", "n": 1}
    assert names.scvd_arguments("store_secret", given) == {**given, "tool": PR}  # a whole argument only
    assert names.scvd_arguments("store_secret", {"tool": "read"}) == {"tool": "read"}


def test_only_a_system_tools_arguments_and_results_name_tools_as_the_host_got_them() -> None:
    """Every tool's argument equal to a shortened name was taken for the long one, and store_secret's
    success still said `call <the long name> again`: a file written or read holding such a name is
    data, a system tool's words name tools."""
    from scvd import protocol as p
    from scvd.mcp_host.jsonrpc import call_result

    names = HostNames(53)
    short = names.listed(["read", "write", "store_secret", PR], system=["store_secret"])[3]
    assert names.scvd_arguments("write", {"path": "a", "content": short}) == {"path": "a", "content": short}
    assert names.speaks("store_secret") and not names.speaks("read")
    stored = {"key": "GH_TOKEN", "stored": True, "next": f"call {PR} again", "mcp_servers": {"github": "ready"}}
    told = call_result(p.CallCompleted(seq=1, call_id="c", ok=True, result=stored), names.host_text, True)
    assert told["structuredContent"] == {**stored, "next": f"call {short} again"}
    assert f"call {short} again" in told["content"][0]["text"] and PR not in told["content"][0]["text"]
    for result in (f"see {PR}\n", {"text": PR}):  # a file's text, a server's object: as they came
        read = call_result(p.CallCompleted(seq=2, call_id="r", ok=True, result=result), names.host_text)
        assert PR in read["content"][0]["text"] and read.get("structuredContent", result) == result
