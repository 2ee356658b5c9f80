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


def test_a_shortened_name_no_list_of_this_session_gave_is_unmapped_until_the_tools_are_mapped() -> None:
    """A host keeps an earlier session's list (Claude Code does) and calls a shortened name first."""
    short = HostNames(53).listed([PR])[0]
    names = HostNames(53)
    assert names.unmapped(short) and names.scvd_name(short) == short
    assert not names.unmapped("read") and not names.unmapped(PR) and not names.unmapped(short[:-1]) and \
        not names.unmapped(None)
    names.listed(["read", PR])
    assert not names.unmapped(short) and names.scvd_name(short) == PR

