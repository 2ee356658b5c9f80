"""What scvd's own log lines hide (redact.hide_in_logs, for_logs): the values read lately, each key's
newest few, however often a key was rotated."""

from __future__ import annotations

from scvd import redact
from scvd.redact import LOG_VALUES_PER_KEY, for_logs, hide_in_logs


def token(i: int) -> str:
    return f"ghp_rotated{i:06d}abcdef"


def line(value: str) -> str:
    return f"GET https://api.example/repos?access_token={value} 200"


def rotate(times: int, start: int = 0) -> None:
    """GH_TOKEN stored again `times` times, each new value read once (store_secret, then a script's run)."""
    for i in range(start, start + times):
        hide_in_logs({"GH_TOKEN": token(i)})


def test_a_rotated_keys_current_and_recent_values_stay_hidden_and_the_oldest_go():
    hide_in_logs({"url query api_key": "mcp-literal-key-1234"})  # read once, when its MCP server was set up
    rotate(4 * LOG_VALUES_PER_KEY)
    newest = 4 * LOG_VALUES_PER_KEY - 1
    assert for_logs(line(token(newest))) == line("[secret GH_TOKEN]")  # the current one
    assert for_logs(line(token(newest - 1))) == line("[secret GH_TOKEN]")  # the one it replaced
    assert for_logs(line(token(newest - LOG_VALUES_PER_KEY + 1))) == line("[secret GH_TOKEN]")
    assert for_logs(line(token(0))) == line(token(0))  # rotated out long ago: no longer looked for
    assert for_logs(line(token(newest - LOG_VALUES_PER_KEY))) == line(token(newest - LOG_VALUES_PER_KEY))
    # another key's value, however many rotations came after it, is still hidden
    assert for_logs(line("mcp-literal-key-1234")) == line("[secret url query api_key]")


def test_what_each_log_line_is_checked_for_stops_growing_at_the_bound():
    rotate(LOG_VALUES_PER_KEY)
    at_bound = len(redact._log_forms)
    rotate(10 * LOG_VALUES_PER_KEY, start=LOG_VALUES_PER_KEY)  # 2,000 cost each line 0.5 ms for good
    assert len(redact._log_forms) == at_bound


def test_a_value_read_again_counts_as_new():
    """Two sources of one key (the environment's GH_TOKEN, the store's) alternate: the one read all
    along stays hidden while the other rotates."""
    rotate(1)
    for i in range(1, 3 * LOG_VALUES_PER_KEY):
        hide_in_logs({"GH_TOKEN": token(i)})
        hide_in_logs({"GH_TOKEN": token(0)})
    assert for_logs(line(token(0))) == line("[secret GH_TOKEN]")
    assert for_logs(line(token(1))) == line(token(1))



def test_a_name_that_many_sources_share_keeps_each_ones_value():
    """Every MCP server's literal query key is `url query api_key`, read once as its server is set
    up: seventeen servers pushed the first one's live key out, and httpx at debug printed it."""
    for i in range(LOG_VALUES_PER_KEY + 1):
        hide_in_logs({"url query api_key": f"mcp-literal-key-{i:04d}"}, f"mcp server s{i}")
    for i in range(LOG_VALUES_PER_KEY + 1):
        assert for_logs(line(f"mcp-literal-key-{i:04d}")) == line("[secret url query api_key]"), i
