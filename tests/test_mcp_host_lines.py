"""A line over the host's message limit is refused with its own id, where its first or last bytes hold it."""

from __future__ import annotations

import json

import pytest

from scvd.lenient_json import top_level_id
from scvd.mcp_host.jsonrpc import request_id
from scvd.mcp_host.pipes import ENDS

PAD = {"pad": "x" * 100}


@pytest.mark.parametrize("message, expected", [
    ({"jsonrpc": "2.0", "id": "big", "method": "ping", "params": PAD}, "big"),
    ({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": PAD}, 7),
    ({"id": -2.5, "method": "ping"}, -2.5),
    ({"jsonrpc": "2.0", "id": 'a "quoted", {id}', "method": "ping"}, 'a "quoted", {id}'),
    # an id inside params is another thing's (answering with it would settle another request)
    ({"method": "tools/call", "params": {"arguments": {"id": 3}}, "id": 9}, 9),
    ({"method": "tools/call", "params": {"arguments": {"id": 3}, "pad": "x"}}, None),
    ({"method": "tools/call", "params": ["id", {"id": 3}], "id": "late"}, "late"),
    ({"jsonrpc": "2.0", "method": "log", "note": "id"}, None),  # "id" as a value, not a key
    ({"jsonrpc": "2.0", "id": None, "method": "ping"}, None),  # not an id a host waits on
    ({"jsonrpc": "2.0", "id": True, "method": "ping"}, None),
])
def test_the_outer_objects_id_is_found(message, expected) -> None:
    assert top_level_id(json.dumps(message).encode()) == expected


def test_a_head_cut_before_the_id_or_a_batch_gives_none() -> None:
    line = json.dumps({"jsonrpc": "2.0", "params": {"pad": "x" * 5000}, "id": 4}).encode()
    assert top_level_id(line[:4096]) is None  # cut inside the long string, before the id
    assert top_level_id(b'  {"id": 12, "method": "tools/call", "params": {"content": "xx') == 12
    assert top_level_id(b'[{"jsonrpc": "2.0", "id": 1, "method": "ping"}]') is None
    assert top_level_id(b"not json at all") is None
    assert top_level_id(b'{"id": 12') is None  # its value may go on past the cut


def ends(message: dict | list) -> tuple[bytes, bytes]:
    """The first and last bytes of `message`'s line, padded past both, as Lines keeps them."""
    line = json.dumps(message, separators=(",", ":")).encode()
    return line[:ENDS], line[-ENDS:]


BIG = {"arguments": {"content": "x" * 3 * ENDS}}


@pytest.mark.parametrize("message, expected", [
    ({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": BIG}, 5),  # most hosts: first
    ({"jsonrpc": "2.0", "method": "tools/call", "params": BIG, "id": 6}, 6),  # the TypeScript SDK's: last
    ({"jsonrpc": "2.0", "method": "tools/call", "params": BIG, "id": 'say "hi", {x}'}, 'say "hi", {x}'),
    ({"id": 1, "method": "tools/call", "params": BIG, "id ": 2}, 1),  # another key
    # an id that is another thing's: inside params, or a key that only ends in `"id`
    ({"method": "tools/call", "params": {**BIG, "id": 3}}, None),
    ({"method": "tools/call", "params": BIG, 'x"id': 4}, None),
    ({"method": "tools/call", "params": BIG, 'x\\"id': 4}, None),
    ({"method": "tools/call", "params": BIG, "id": None}, None),
    ({"method": "tools/call", "params": BIG, "id": True}, None),
])
def test_the_id_of_a_line_over_the_limit_is_found_at_either_end(message, expected) -> None:
    assert request_id(*ends(message)) == expected


def test_a_batch_has_no_one_id_at_either_end() -> None:
    assert request_id(*ends([{"jsonrpc": "2.0", "method": "ping", "params": BIG, "id": 6}])) is None
