"""The wire contract without sockets: frames round-trip, decode errors map to codes, FrameReader bounds."""

from __future__ import annotations

import re

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scvd import errors
from scvd import protocol as p

EXAMPLES: list[p.Frame] = [
    p.Hello(id=1, protocol=1, client=p.PeerInfo(name="bridge", version="2"), approver=True),
    p.Call(id="c", session="s1", tool="read", arguments={"path": "a.txt", "limit": 10},
           call_id="mine", timeout_seconds=5.0),
    p.ApprovalDecide(id=3, approval_id="a1", decision="approve", scope="session"),
    p.Welcome(id=1, protocol=1, server=p.PeerInfo(name="scvd", version="0.1.0"),
              limits=p.Limits(client_frame_bytes=1 << 20, server_frame_bytes=8 << 20)),
    p.StatusResult(id=2, pid=10, version="0.1.0", protocol=1, uptime_seconds=1.5, sessions=0,
                   pending_approvals=0, running_calls=0, policy="on-risk"),
    p.CallCompleted(seq=4, call_id="mine", ok=True, result={"content": "x" * 100, "truncated": False}),
    p.CallCompleted(seq=5, call_id="c2", ok=False,
                    error=p.ToolErrorInfo(kind="denied", message="no", hint="ask")),
    p.ApprovalRequested(seq=6, approval_id="a1", session="s1", call_id="c2", tool="bash", risk="process",
                        workspace="/w", summary="run make", details={"command": "make"}),
    p.Error(code="invalid_json", message="bad"),
]


@pytest.mark.parametrize("frame", EXAMPLES, ids=lambda f: type(f).__struct_config__.tag)
def test_frames_round_trip_as_one_line(frame):
    line = p.encode(frame)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    decode = p.decode_request if isinstance(frame, p.Request.__args__) else p.decode_server_frame
    assert decode(line.rstrip(b"\n")) == frame
    assert msgspec.json.decode(line)["type"] == frame.__struct_config__.tag


def test_defaults_are_left_out_and_ids_echo_any_json_id():
    assert p.encode(p.Error(code="internal", message="m")) == b'{"type":"error","code":"internal","message":"m"}\n'
    for ident in (0, -1, 2**70, "x", ""):
        assert p.decode_request(b'{"type":"ping","id":%s}' % msgspec.json.encode(ident)).id == ident


def test_request_and_server_tags_are_disjoint_and_complete():
    requests = {t.__struct_config__.tag for t in p.Request.__args__}
    server = {t.__struct_config__.tag for t in p.ServerFrame.__args__}
    assert requests == p.REQUEST_TYPES and not requests & server
    for name in ("hello", "status", "session.open", "session.close", "tools.list", "call", "call.cancel",
                 "approvals.watch", "approvals.list", "approval.decide"):
        assert name in requests
    for name in ("welcome", "error", "call.started", "call.progress", "call.completed",
                 "approval.requested", "approval.resolved", "session.opened", "tools"):
        assert name in server


def test_unknown_fields_are_tolerated_both_ways():
    assert p.decode_request(b'{"type":"status","id":1,"new":{"x":[1]}}') == p.Status(id=1)
    assert p.decode_server_frame(b'{"type":"ok","id":1,"new":true}') == p.Ok(id=1)


@pytest.mark.parametrize("line, exc, fragment", [
    (b"nope", errors.InvalidJSON, "not valid JSON"),
    (b"\xff", errors.InvalidJSON, "not valid JSON"),
    (b"{}", errors.InvalidRequest, "no `type`"),
    (b"[]", errors.InvalidRequest, "invalid frame"),
    (b'{"type":"warp","id":1}', errors.UnknownType, "'warp'"),
    (b'{"type":"welcome","id":1}', errors.UnknownType, "known types"),  # a server frame is no request
    # the last `type` is a known one: "unknown frame type 'ping'; known types: ..., ping, ..." said
    (b'{"type":"warp","type":"ping","id":1}', errors.InvalidRequest, "`type` more than once"),
    (b'{"type":"ping","type":"status","id":1}', errors.InvalidRequest, "`type` more than once"),
    (b'{"type":"session.open","id":1}', errors.InvalidRequest, "`workspace`"),
    (b'{"type":"call","id":1,"session":"s","tool":"t","arguments":[]}', errors.InvalidRequest, "arguments"),
    (b'{"type":"ping","id":true}', errors.InvalidRequest, "$.id"),
    (b'{"type":"ping","id":1,"x":NaN}', errors.InvalidJSON, "not valid JSON"),  # json.loads takes NaN; a frame may not
    (b'{"type":"ping","id":1,"x":"\\ud83d"', errors.InvalidJSON, "not valid JSON"),
    (b'{"type":"warp","id":1,"x":"\\ud83d"}', errors.UnknownType, "'warp'"),
    (b'{"type":"call","id":1,"x":"\\udcff"}', errors.InvalidRequest, "`session`"),
])
def test_decode_errors_map_to_their_codes(line, exc, fragment):
    with pytest.raises(exc) as info:
        p.decode_request(line)
    assert type(info.value) is exc and fragment in info.value.message


@pytest.mark.parametrize("line, expected", [
    (b'{"type":"x","id":7}', 7), (b'{"id":"a"}', "a"), (b'{"id":true}', None), (b'{"id":1.5}', None),
    (b'{"id":null}', None), (b"[1]", None), (b"not json", None), (b'{"id":[1]}', None),
    (b'{"type":"call","x":1e400,"id":8}', 8), (b'{"id":1e400}', None),
    (b'{"type":"call","x":"\\ud83d","id":9}', 9), (b'{"x":"\\ud83d","id":Infinity}', None),
    # not JSON: the outer object's id, where it stands whole, and named once
    (b'{"id":7,"type":"ping",}', 7), (b'{"id":13,"x":[1,2}', 13), (b'{"x":{"id":3,},"id":"s"}', "s"),
    (b'{"id":1,"type":"ping","id":2,}', None), (b'{"type":"status","id":1', None),
])
def test_request_id_of_a_bad_frame_is_only_a_valid_id(line, expected):
    assert p.request_id(line) == expected


def test_a_frame_nested_too_deeply_is_invalid_request_answered_with_its_outer_id():
    deep = b"[" * 2000 + b"]" * 2000
    line = b'{"id":14,"type":"ping","x":' + deep + b"}"
    with pytest.raises(errors.InvalidRequest, match="too deeply"):
        p.decode_request(line)
    assert p.request_id(line) == 14
    assert p.request_id(b'{"type":"ping","x":' + deep + b',"id":"after"}') == "after"
    inner = b'{"a":' * 2000 + b'{"id":1}' + b"}" * 2000  # only the outer object's id is the frame's
    assert p.request_id(b'{"type":"ping","x":' + inner + b"}") is None
    assert p.request_id(b'{"type":"ping","x":' + inner + b',"id":2}') == 2
    assert p.request_id(b'{"x":' + deep + b',"id":true}') is None
    assert p.request_id(b'{"id":1,"x":' + deep + b',"id":2}') is None  # a decoder would take the last
    # looked for in the first 64 KiB only: a 1 MiB frame of `[{"a":` held the loop for 0.3 s
    branchy = b'[{"a":' * (p.ID_SCAN_BYTES // 6) + b"0" + b"}]" * (p.ID_SCAN_BYTES // 6)
    assert p.request_id(b'{"id":3,"x":' + branchy + b"}") == 3
    assert p.request_id(b'{"x":' + branchy + b',"id":4}') is None
    assert p.request_id(deep) is None


def test_a_lone_surrogate_escape_is_json_and_reads_u_fffd_but_in_a_calls_arguments():
    """What json.dumps writes for half an emoji, or for a file name decoded with surrogateescape: U+FFFD
    in a frame's text, but a call's arguments would name another file or write other text: refused."""
    assert p.decode_request(b'{"type":"ping","id":5,"x":"\\ud83d"}') == p.Ping(id=5)
    call = p.decode_request(b'{"type":"call","id":6,"session":"s\\ud83d","tool":"read","arguments":{"path":"a"}}')
    assert call == p.Call(id=6, session="s\ufffd", tool="read", arguments={"path": "a"})
    for arguments, where in (('{"path":"caf\\udce9"}', "path"), ('{"paths":["a","\\ud800"]}', "paths[1]"),
                             ('{"env":{"K\\udc80":"v"}}', "env (a key)"), ('{"a":{"b":"\\ud83d!"}}', "a.b")):
        with pytest.raises(errors.InvalidArguments, match=rf"^argument `{re.escape(where)}` holds a lone surrogate"):
            p.decode_request(b'{"type":"call","id":6,"session":"s","tool":"t","arguments":%s}' % arguments.encode())


# --- FrameReader ---------------------------------------------------------------------------


def test_reader_splits_lines_across_chunks_and_skips_blank_ones():
    r = p.FrameReader(100)
    assert r.feed(b'{"a":') == []
    assert r.feed(b'1}\n\n  \n{"b"') == [b'{"a":1}']
    assert r.feed(b":2}\r\n") == [b'{"b":2}\r']  # JSON decoders accept the trailing \r
    assert r.feed(b"x\ny\nz") == [b"x", b"y"]


def test_reader_reports_an_oversized_line_once_then_carries_on():
    r = p.FrameReader(10)
    assert r.feed(b"0123456789\n") == [b"0123456789"]  # exactly the limit
    assert r.feed(b"0123456789A") == [p.TooLarge(b"0123456789A")]  # reported as soon as it is too long
    assert r.overflowed
    assert r.feed(b"B" * 10_000) == []  # the rest streams past, not buffered
    assert len(r._buf) == 0
    assert r.feed(b"C\nok\n") == [b"ok"]
    assert not r.overflowed


def test_reader_too_large_then_next_line_in_one_chunk():
    r = p.FrameReader(4)
    assert r.feed(b"123456\n12\n") == [p.TooLarge(b"12345"), b"12"]


def test_reader_keeps_the_first_4_kib_of_an_oversized_line_for_its_id():
    """frame_too_large went out without an id: a client with two requests out could not tell
    whose it was."""
    r = p.FrameReader(1 << 20)
    line = b'{"type":"call","id":"c-7","session":"s","tool":"write","arguments":{"text":"'
    assert r.feed(line) == []
    [too_large] = r.feed(b"x" * (1 << 20) + b'"}}\n')
    assert too_large.head == (line + b"x" * 4096)[:4096] and too_large.id == "c-7"
    assert p.TooLarge(b'{"type":"ping","pad":"' + b"x" * 5000).id is None  # its id beyond the head
    assert p.TooLarge(b'{"type":"ping","id":true,"pad":"xx').id is None  # no Id


LINES = st.one_of(st.binary(max_size=40), st.sampled_from([b"", b" ", b" " * 35, b"{}"]))


@settings(max_examples=300, deadline=None)
@given(lines=st.lists(LINES.map(lambda b: b.replace(b"\n", b"")), max_size=12),
       cuts=st.lists(st.integers(0, 600), max_size=10), limit=st.integers(1, 30))
def test_reader_is_independent_of_chunking(lines, cuts, limit):
    """However the stream is cut, the reader yields the same lines, never buffering past the limit."""
    stream = b"".join(line + b"\n" for line in lines)
    expected = [p.TooLarge(line[:limit + 1]) if len(line) > limit else line
                for line in lines if len(line) > limit or line.strip()]  # even a long blank line is too long
    r = p.FrameReader(limit)
    got: list[object] = []
    start = 0
    for cut in sorted(c for c in cuts if c <= len(stream)) + [len(stream)]:
        got += r.feed(stream[start:cut])
        assert len(r._buf) <= limit
        start = max(start, cut)
    assert got == expected
