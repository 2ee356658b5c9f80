"""Which request a stdout line the SDK refuses answers, and what scvd answers that request with
(scvd/mcp/not_mcp.py); a real server's such lines are in tests/integration/test_mcp_servers.py."""

from __future__ import annotations

import logging

import mcp_types as types
import pydantic
import pytest

from scvd.mcp.not_mcp import NotMcp, Skipped, answered, stand_in

DEEP = b"[" * 100_000 + b"]" * 100_000


@pytest.mark.parametrize("line, ident", [
    (b'{"jsonrpc":"2.0","id":7}', 7),
    (b'{"jsonrpc":"2.0","id":"a7","error":"401"}', "a7"),
    (b'{"jsonrpc":"2.0","id":7,"result":{"content":' + DEEP + b"}}", 7),  # nested deeper than msgspec walks
    # its id after the nesting, within the first 64 KiB
    (b'{"jsonrpc":"2.0","result":{"content":[' + b"[]," * 300 + b"[" * 5000 + b"]" * 5000 + b']},"id":7}', 7),
    # an id past the first 64 KiB of a line nested too deeply: the line is scanned whole
    (b'{"jsonrpc":"2.0","result":{"content":' + DEEP + b'},"id":7}', 7),
    (b'{"result":{"content":' + DEEP + b'},"id":7,"jsonrpc":"2.0"}', 7),
    (b'{"jsonrpc":"2.0","result":{"content":' + DEEP + b'},"id":7,"method":"x"}', None),
    (b'{"jsonrpc":"2.0","result":{"content":' + DEEP + b'},"id":7,"id":8}', None),  # which one?
    # the server's own request or notification: its id is not one of scvd's
    (b'{"jsonrpc":"2.0","id":7,"method":7}', None),
    (b'{"jsonrpc":"2.0","id":7,"method":"sampling/createMessage","params":' + DEEP + b"}", None),
    (b'{"jsonrpc":"2.0","id":7.5}', None),  # no request of scvd's has it
    # no `jsonrpc`: a log line, which may name the call's id (its answer follows)
    (b'{"level":"info","id":7,"msg":"tools/call received"}', None),
    (b'{"level":"info","id":7,"detail":' + DEEP + b"}", None),
    (b'{"id":7,"result":{}}', None),
    (b'{"jsonrpc":"1.0","id":7,"result":{}}', 7),  # JSON-RPC, if not MCP's
    (b'{"jsonrpc":"2.0","id":true}', None),
    (b'{"jsonrpc":"2.0","result":{"id":7}}', None),  # an id inside its result is another thing's
    (b'[{"jsonrpc":"2.0","id":7}]', None),  # a batch: no one id
    (b"{this is not json", None),
])
def test_a_line_answers_the_request_of_its_outer_id_unless_it_has_a_method(line, ident):
    assert answered(line)[0] == ident


WIDE = b"[" * 5000 + b"[]," * (5 << 20) + b"[]" + b"]" * 5000  # 15 MiB of the shape slowest to scan


def test_a_long_answer_nested_too_deeply_is_read_at_its_ends_only_and_its_id_last_still_answers():
    """Such a line was scanned whole, here ~13 s for this one (64 MiB: 90 s), on a thread no stop ends
    while the server's later lines waited."""
    assert answered(b'{"jsonrpc":"2.0","result":' + WIDE + b',"id":7}\n') == (7, True)
    assert answered(b'{"result":' + WIDE + b',"jsonrpc":"2.0","id":7}') == (7, True)
    assert answered(b'{"method":"x","params":' + WIDE + b',"jsonrpc":"2.0","id":7}') == (None, False)
    assert answered(b'{"jsonrpc":"2.0","result":' + WIDE + b',"id":7,"method":"x"}') == (None, None)  # which?
    assert answered(b'{"level":"info","detail":' + WIDE + b',"id":7}') == (None, None)


def test_a_long_line_whose_id_stands_in_its_middle_is_logged_as_not_known_to_answer(caplog):
    """Its call waits out its timeout: the warning says so, not that it answers no request."""
    line = b'{"jsonrpc":"2.0","result":' + WIDE + b',"id":7,"x":' + WIDE + b"}"
    ident, answers = answered(line)
    assert (ident, answers) == (None, None)
    with caplog.at_level(logging.WARNING, "scvd.mcp"):
        Skipped("raw").heard(NotMcp(line, answers), str)
    assert caplog.messages[-1].endswith("bytes in all) (it is over 1 MiB, read at its ends only, which answer no "
                                        "request of scvd's: a call it answers waits out its timeout)"), caplog.messages


def refused(line: bytes) -> pydantic.ValidationError:
    with pytest.raises(pydantic.ValidationError) as caught:
        types.jsonrpc_message_adapter.validate_json(line, by_name=False)
    return caught.value


@pytest.mark.parametrize("line, why", [
    (b'{"jsonrpc":"2.0","id":7}', "neither `result` nor `error`"),
    (b'{"jsonrpc":"1.0","id":7,"result":{}}', "`jsonrpc`: Input should be '2.0'"),
    (b'{"jsonrpc":"2.0","id":7,"error":"401"}', "`error`: Input should be an object"),
    (b'{"jsonrpc":"2.0","id":7,"result":' + DEEP + b"}", "Invalid JSON: recursion limit exceeded at line 1 column 234"),
])
def test_the_error_standing_in_for_an_answer_says_what_is_wrong_with_it_and_quotes_it(line, why):
    message = stand_in(7, line + b"\n", refused(line)).message
    assert isinstance(message, types.JSONRPCError) and message.id == 7, message
    assert message.error.message == (f"its answer is not MCP's JSON-RPC ({why}): {line.decode()}; report it to the "
                                     "server's author")
