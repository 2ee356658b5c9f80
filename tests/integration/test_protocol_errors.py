"""Bad frames over a real socket: each gets its error code, and the connection keeps working.

Only `version_mismatch` is fatal. Every answer is decoded with the protocol's own
server-frame decoder, so a malformed answer fails the test too.
"""

from __future__ import annotations

import json
import os
import time

import pytest

from conftest import reloaded
from harness import RawConn
from scvd import protocol as p

MiB = 1 << 20


@pytest.fixture
def conn(daemon):
    with RawConn(daemon.socket) as c:
        assert isinstance(c.hello(), p.Welcome)
        yield c


def assert_error(frame: object, code: str, request_id: object = None) -> p.Error:
    assert isinstance(frame, p.Error), frame
    assert frame.code == code, frame
    assert frame.id == request_id and not frame.fatal, frame
    assert frame.message
    return frame


BAD_FRAMES = [
    # (raw line without its newline, expected code, id the error must echo, a part of its message)
    pytest.param(b"not json", "invalid_json", None, "frame is not valid JSON: ", id="not-json"),
    pytest.param(b'{"type":"status","id":1', "invalid_json", None, "frame is not valid JSON: ", id="truncated-json"),
    pytest.param(b"\xff\xfe{}", "invalid_json", None, "frame is not valid JSON: ", id="not-utf8"),
    # not JSON, but its outer id stands whole: a pipelining peer learns which request failed
    pytest.param(b'{"id":7,"type":"ping",}', "invalid_json", 7, "trailing comma", id="trailing-comma"),
    pytest.param(b'{"id":"b","type":"ping","x":[1,2}', "invalid_json", "b", "expected ',' or ']'",
                 id="bracket-missing"),
    pytest.param(b'{"id":1,"type":"ping","id":2,}', "invalid_json", None, "trailing comma", id="two-ids"),
    pytest.param(b"[1,2,3]", "invalid_request", None, "invalid frame: Expected `object`, got `array`",
                 id="json-array"),
    pytest.param(b'"status"', "invalid_request", None, "invalid frame: Expected `object`, got `str`",
                 id="json-string"),
    pytest.param(b'{"id":3}', "invalid_request", 3, "frame has no `type` field", id="no-type"),
    pytest.param(b'{"type":"frobnicate","id":4}', "unknown_type", 4,
                 "unknown frame type 'frobnicate'; known types: agents.import, ", id="unknown-type"),
    pytest.param(b'{"type":42,"id":"x"}', "invalid_request", "x", "`$.type`", id="type-not-a-string"),
    pytest.param(b'{"type":"session.open","id":5}', "invalid_request", 5,
                 "invalid frame: Object missing required field `workspace`", id="missing-workspace"),
    pytest.param(b'{"type":"call","id":6,"session":"s"}', "invalid_request", 6,
                 "invalid frame: Object missing required field `tool`", id="missing-tool"),
    pytest.param(b'{"type":"status","id":[1]}', "invalid_request", None, "got `array` - at `$.id`",
                 id="id-wrong-type"),
    pytest.param(b'{"type":"status"}', "invalid_request", None, "missing required field `id`", id="missing-id"),
    pytest.param(b'{"type":"approval.decide","id":7,"approval_id":"a","decision":"maybe"}',
                 "invalid_request", 7, "use one of: approve, deny", id="bad-enum"),
    pytest.param(b'{"type":"session.open","id":8,"workspace":"relative/dir"}', "invalid_request", 8,
                 "workspace 'relative/dir' is relative; send an absolute path", id="relative-workspace"),
    pytest.param(b'{"type":"session.open","id":9,"workspace":"/nonexistent/scvd"}', "invalid_request", 9,
                 "workspace '/nonexistent/scvd' does not exist; create it first", id="missing-workspace-dir"),
    pytest.param(b'{"type":"hello","id":10,"protocol":1,"client":{"name":"again"}}', "invalid_request", 10,
                 "this connection already said hello", id="second-hello"),
    pytest.param(b'{"type":"hello","id":15,"protocol":2,"client":{"name":"again"}}', "invalid_request", 15,
                 "this connection already said hello", id="second-hello-other-protocol"),
    pytest.param(b'{"type":"call","id":16,"session":"s","tool":"read","timeout_seconds":1e400}',
                 "invalid_request", 16, "`$.timeout_seconds`", id="number-out-of-range"),
    pytest.param(b'{"type":"session.close","id":11,"session":"nope"}', "session_not_found", 11,
                 "this connection holds no session 'nope'; open one with session.open", id="unknown-session"),
    pytest.param(b'{"type":"call","id":12,"session":"nope","tool":"read"}', "session_not_found", 12,
                 "this connection holds no session 'nope'", id="call-unknown-session"),
    # an empty session (an unset variable in a script) listed the daemon's tools, not its session's
    pytest.param(b'{"type":"tools.list","id":17,"session":""}', "session_not_found", 17,
                 "no session ''", id="tools-of-an-empty-session"),
    pytest.param(b'{"type":"call.cancel","id":13,"call_id":"nope"}', "call_not_found", 13,
                 "no pending or running call 'nope'; it may have completed", id="unknown-call"),
    pytest.param(b'{"type":"approval.decide","id":14,"approval_id":"nope","decision":"deny"}',
                 "approval_not_found", 14, "no pending approval 'nope'; it was decided, expired or withdrawn",
                 id="unknown-approval"),
]


@pytest.mark.one_loop
@pytest.mark.parametrize("line, code, request_id, says", BAD_FRAMES)
def test_bad_frame_gets_its_code_and_the_connection_stays(conn, line, code, request_id, says):
    conn.send_raw(line + b"\n")
    assert says in assert_error(conn.frame(), code, request_id).message
    assert conn.status().protocol == p.PROTOCOL_VERSION


@pytest.mark.one_loop
def test_missing_field_is_named(conn):
    conn.send_raw(b'{"type":"session.open","id":1}\n')
    assert "`workspace`" in conn.frame().message
    conn.send_raw(b'{"type":"frobnicate","id":2}\n')
    message = conn.frame().message
    assert "'frobnicate'" in message and "session.open" in message  # names it, lists the known ones


@pytest.mark.one_loop
def test_a_value_a_field_does_not_take_is_answered_with_the_values_it_takes(conn):
    """A bridge's `"decision": "approved"` got only "Invalid enum value 'approved' - at `$.decision`"."""
    conn.send_raw(b'{"type":"approval.decide","id":1,"approval_id":"a1","decision":"approved"}\n')
    err = assert_error(conn.frame(), "invalid_request", 1)
    assert err.message == "invalid frame: `decision`: Invalid enum value 'approved'; use one of: approve, deny"
    conn.send_raw(b'{"type":"approval.decide","id":2,"approval_id":"a1","decision":"deny","scope":"always"}\n')
    err = assert_error(conn.frame(), "invalid_request", 2)
    assert err.message == "invalid frame: `scope`: Invalid enum value 'always'; use one of: once, session"


@pytest.mark.one_loop
def test_request_before_hello_is_not_initialized(daemon):
    with RawConn(daemon.socket) as c:
        c.send_raw(b'{"type":"status","id":"early"}\n')
        err = assert_error(c.frame(), "not_initialized", "early")
        assert '"type":"hello"' in err.message  # it says what to send
        assert isinstance(c.hello(), p.Welcome)
        assert c.status().pid == daemon.proc.pid


def test_wrong_protocol_is_fatal_and_closes(daemon):
    with RawConn(daemon.socket) as c:
        c.send({"type": "hello", "id": 1, "protocol": 2, "client": {"name": "future"}})
        err = c.frame()
        assert isinstance(err, p.Error) and err.code == "version_mismatch" and err.fatal and err.id == 1
        assert "protocol 1" in err.message and "2" in err.message
        assert c.closed_by_server()
    with RawConn(daemon.socket) as c:  # the daemon itself is fine
        c.hello()
        assert c.status().pid == daemon.proc.pid


def test_two_mib_line_is_too_large_and_the_next_frame_is_read(conn):
    conn.send_raw(b'{"type":"status","id":1,"pad":"' + b"x" * (2 * MiB) + b'"}\n{"type":"ping","id":2}\n')
    assert_error(conn.frame(), "frame_too_large", 1)  # it had none: whose was it?
    pong = conn.frame()
    assert isinstance(pong, p.Pong) and pong.id == 2
    assert conn.status().sessions == 0


def test_limit_is_exact_and_configurable(make_daemon):
    d = make_daemon("[server]\nclient_frame_bytes = 4096\n")
    with RawConn(d.socket) as c:
        welcome = c.hello()
        assert welcome.limits.client_frame_bytes == 4096
        head = b'{"type":"ping","id":1}'
        c.send_raw(head + b" " * (4096 - len(head)) + b"\n")  # exactly the limit: read
        assert isinstance(c.frame(), p.Pong)
        c.send_raw(head + b" " * (4097 - len(head)) + b"\n")  # one byte more: refused
        err = assert_error(c.frame(), "frame_too_large", 1)
        assert "4096" in err.message and "client_frame_bytes" in err.message
        assert c.status().pid == d.proc.pid


def test_client_library_reads_frames_up_to_the_limit_welcome_announces(make_daemon, workspace):
    """A daemon configured for frames above the 8 MiB default: its answers still reach the client."""
    # 64 MiB: a 10 MiB read fits one frame even if every byte were escaped (config.py's rule)
    d = make_daemon(f"[server]\nserver_frame_bytes = {64 * MiB}\n[tools]\nread_limit_bytes = {10 * MiB}\n")
    (workspace / "big.txt").write_text("z" * (10 * MiB))
    with d.client() as c:
        assert c.welcome.limits.server_frame_bytes == 64 * MiB
        done = c.call(c.open_session(workspace), "read", {"path": "big.txt", "limit": 10 * MiB})
    assert done.ok and done.result["length"] == 10 * MiB


def test_oversized_line_split_across_many_writes(conn):
    conn.send_raw(b'{"type":"ping","id":1,"pad":"')
    for _ in range(40):
        conn.send_raw(b"y" * 64 * 1024)
        time.sleep(0.001)
    conn.send_raw(b'"}\n')
    assert_error(conn.frame(), "frame_too_large", 1)
    assert conn.status().pid > 0


def test_an_oversized_line_whose_id_is_past_its_first_4_kib_is_answered_without_one(conn):
    conn.send_raw(b'{"type":"ping","pad":"' + b"x" * (2 * MiB) + b'","id":3}\n')
    assert_error(conn.frame(), "frame_too_large")  # no id in its first 4 KiB


@pytest.mark.one_loop
def test_an_integer_id_too_long_to_read_is_refused_saying_so_and_a_readable_one_is_echoed(conn):
    """scvd cannot echo it: the error has no id, and answers the oldest request unanswered (in order)."""
    for kind in ("frobnicate", "ping"):  # an unknown type was `unknown frame type None`
        conn.send_raw(b'{"type":"%s","id":%s}\n' % (kind.encode(), b"9" * 5000))
        err = assert_error(conn.frame(), "invalid_request")
        assert "`id` is an integer 5,000 characters long" in err.message and "a string" in err.message, err
    conn.send_raw(b'{"type":"ping","id":-%s}\n' % (b"9" * p.id_digits()))  # the sign counts
    assert_error(conn.frame(), "invalid_request")
    conn.send_raw(b'{"type":"ping","id":%s}\n' % (b"9" * p.id_digits()))
    assert conn.frame().id == int("9" * p.id_digits())


@pytest.mark.one_loop
def test_control_characters_of_a_client_name_are_escaped_in_the_log(daemon, workspace):
    """journald ends a record at a NUL and reads `<0>` after it as an emergency's priority."""
    name = "evil\x00<0>scvd.server: approval a1 approved\x1b[2J"
    with RawConn(daemon.socket) as c:
        c.send({"type": "hello", "id": 1, "protocol": 1, "client": {"name": name}})
        assert isinstance(c.frame(), p.Welcome)
        assert isinstance(c.request({"type": "session.open", "workspace": str(workspace)}), p.SessionOpened)
    log = daemon.log()
    assert "\x00" not in log and "\x1b" not in log
    assert "by #" in log and ' "evil\\x00<0>scvd.server: approval a1 approved\\x1b[2J" pid=' in log


def test_pipelined_frames_are_answered_in_order(conn):
    conn.send_raw(b"".join(b'{"type":"ping","id":%d}\n' % i for i in range(50)) + b"oops\n"
                  + b'{"type":"ping","id":"last"}\n')
    assert [conn.frame().id for _ in range(50)] == list(range(50))
    assert_error(conn.frame(), "invalid_json")
    assert conn.frame().id == "last"


def test_frame_sent_one_byte_at_a_time(conn):
    for byte in b'{"type":"ping","id":"slow"}\n':
        conn.send_raw(bytes([byte]))
    assert conn.frame().id == "slow"


def test_blank_lines_and_unknown_fields_are_fine(conn):
    conn.send_raw(b"\n  \n\r\n" + b'{"type":"status","id":"s","from_the_future":{"x":1}}\n')
    answer = conn.frame()
    assert isinstance(answer, p.StatusResult) and answer.id == "s"


def test_peer_vanishing_mid_frame_leaves_the_daemon_serving(daemon):
    for payload in (b'{"type":"status",', b'{"type":"status","pad":"' + b"z" * (2 * MiB)):
        with RawConn(daemon.socket) as c:
            c.hello()
            c.send_raw(payload)
    with RawConn(daemon.socket) as c:
        c.hello()
        assert c.status().sessions == 0
    assert daemon.proc.poll() is None


def test_a_connection_keeps_the_frame_limits_its_welcome_announced(make_daemon, workspace):
    """A reload that lowers server_frame_bytes: a session opened before it still gets the reads its
    tools.read_limit_bytes allows (they were `limit: result too large`), and new connections hear
    of the new limits."""
    d = make_daemon(f"[tools]\nread_limit_bytes = {MiB}\n")
    (workspace / "big.txt").write_text("z" * MiB)
    with d.client() as c:
        session = c.open_session(workspace)
        reloaded(d, "[server]\nserver_frame_bytes = 524288\nclient_frame_bytes = 65536\n"
                    "[tools]\nread_limit_bytes = 32768\noutput_limit_bytes = 16384\n")
        with d.client() as later:
            assert later.welcome.limits.server_frame_bytes == 524288
            assert later.welcome.limits.client_frame_bytes == 65536
        done = c.call(session, "read", {"path": "big.txt", "limit": MiB})
        assert done.ok, done.error
        assert done.result["length"] == MiB


def test_a_last_frame_without_its_newline_before_the_end_of_the_stream_is_answered(daemon):
    """`printf '{"type":"hello",...}' | socat - UNIX-CONNECT:...`: the last frame got no answer."""
    import socket

    with RawConn(daemon.socket) as c:
        c.send_raw(b'{"type":"hello","id":1,"protocol":1,"client":{"name":"printf"}}\n{"type":"ping","id":2}')
        c.sock.shutdown(socket.SHUT_WR)
        assert isinstance(c.frame(), p.Welcome)
        assert c.frame().id == 2
        assert c.closed_by_server()


@pytest.mark.one_loop
def test_a_call_whose_arguments_hold_a_lone_surrogate_is_refused_naming_the_argument(conn, workspace):
    """json.dumps writes a name decoded with surrogateescape (a Latin-1 file name) as "\\udce9", and half
    an emoji as "\\ud83d": read as U+FFFD, `read notes-\\ud800.txt` read another file, `notes-\\ufffd.txt`,
    and `write` wrote U+FFFD where the client sent something else, without a word. Such a call is refused,
    with its id; other frames' text still reads U+FFFD."""
    (workspace / "notes-\ufffd.txt").write_text("another file than the one named\n")
    session = conn.request({"type": "session.open", "workspace": str(workspace)}).session
    conn.send_raw(json.dumps({"type": "call", "id": "latin1", "session": session, "tool": "read",
                              "arguments": {"path": "notes-\ud800.txt"}}).encode() + b"\n")
    refused = assert_error(conn.frame(), "invalid_request", "latin1")
    assert refused.kind == "invalid_arguments", refused
    assert refused.message.startswith("argument `path` holds a lone surrogate U+D800 at character 6 "), refused
    assert "nothing was run; send well-formed text" in refused.message
    conn.send_raw(json.dumps({"type": "call", "id": 4, "session": session, "tool": "write",
                              "arguments": {"path": "new.txt", "content": "caf\udce9", "mode": "create"}}).encode()
                  + b"\n")
    refused = assert_error(conn.frame(), "invalid_request", 4)
    assert (refused.kind, refused.message.split(" holds")[0]) == ("invalid_arguments", "argument `content`")
    assert not (workspace / "new.txt").exists()
    conn.send_raw(json.dumps({"type": "ping", "id": 5, "note": "half an emoji: \ud83d"}).encode() + b"\n")
    pong = conn.frame()
    assert isinstance(pong, p.Pong) and pong.id == 5, pong
