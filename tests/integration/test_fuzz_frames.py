"""Random frames against a live daemon: it never dies, and every line gets an error or a valid answer.

Each example opens a connection (said hello or not), sends one random line and
then a `ping` with an id no generated frame uses. Everything the server sends
until that `pong` is decoded with the protocol's own decoder, so a malformed
answer fails; and a non-blank line must get exactly one answer. An `mcp.attach`
that decodes is refused then (fatal, the connection closed): the ping right
behind it stands where its fds must come.
"""

from __future__ import annotations

import itertools
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness import RawConn
from scvd import protocol as p

EVENTS = (p.CallStarted, p.CallProgress, p.CallCompleted, p.ApprovalRequested, p.ApprovalResolved)
SYNC = "fuzz-sync"
SETTINGS = settings(max_examples=200, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

_serial = itertools.count()

# values that reach the handlers' own checks: paths, agent and tool names, odd numbers
interesting_text = st.sampled_from(["/", "/tmp", "relative/dir", "", "-", "read", "bash", "codex", "pi",
                                    "claude", "login", "status", "approve", "deny", "session", "once",
                                    "\x00", "\u2603", "..", "/proc/self/root"])
scalars = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70),
                    st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=30), interesting_text)
json_values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=10), inner, max_size=4)), max_leaves=12)


def no_newline(data: bytes) -> bytes:
    return data.replace(b"\n", b" ")


random_bytes = st.binary(max_size=2048).map(no_newline)
random_objects = st.dictionaries(st.text(max_size=12), json_values, max_size=6).map(msgspec.json.encode)


@st.composite
def validish_frames(draw: Any) -> bytes:
    """A known frame type with a random subset of its real fields, random values, maybe extras."""
    frame_type = draw(st.sampled_from(p.Request.__args__))
    fields = [f.encode_name for f in msgspec.structs.fields(frame_type)]
    frame: dict[str, Any] = {"type": frame_type.__struct_config__.tag}
    for name in draw(st.lists(st.sampled_from(fields), unique=True)):
        frame[name] = draw(json_values)
    if draw(st.booleans()):
        frame["id"] = draw(st.one_of(st.integers(-2**63, 2**63 - 1), st.text(max_size=8)))
    frame.update(draw(st.dictionaries(st.text(max_size=8), json_values, max_size=2)))
    if frame.get("id") == SYNC:
        frame["id"] = "not-sync"
    return msgspec.json.encode(frame)


def exchange(path: Any, hello: bool, line: bytes) -> tuple[list[Any], bool]:
    """Send `line` (after hello if asked), then a sync ping; return the frames before the pong."""
    with RawConn(path) as conn:
        if hello:
            assert isinstance(conn.hello(), p.Welcome)
        sync = f"{SYNC}-{next(_serial)}"
        conn.send_raw(line + b"\n" + b'{"type":"ping","id":"%s"}\n' % sync.encode())
        frames: list[Any] = []
        while True:
            raw = conn.line()
            if raw is None:
                return frames, True
            frame = p.decode_server_frame(raw)  # a malformed answer raises here
            if isinstance(frame, p.Pong) and frame.id == sync:
                return frames, False
            if isinstance(frame, p.Error) and frame.code == "not_initialized" and frame.id == sync:
                return frames, False  # the sync ping itself, on a connection that never said hello
            frames.append(frame)


def check(path: Any, hello: bool, line: bytes) -> None:
    frames, closed = exchange(path, hello, line)
    answers = [f for f in frames if not isinstance(f, EVENTS)]
    if not line.strip():
        assert answers == [] and not closed
        return
    assert len(answers) == 1, answers
    answer = answers[0]
    if closed:  # only a fatal error may close the connection: a protocol mismatch, or a refused handoff
        assert isinstance(answer, p.Error) and answer.fatal, answer
        assert answer.code == "version_mismatch" or (
            answer.code == "invalid_request" and msgspec.json.decode(line)["type"] == "mcp.attach"), answer
    if isinstance(answer, p.Error):
        assert answer.code != "internal", (line, answer)
    else:
        assert hello or isinstance(answer, p.Welcome), answer  # before the handshake: only hello works
        assert answer.id == msgspec.json.decode(line)["id"]


@pytest.fixture
def live(daemon):
    yield daemon
    assert daemon.proc.poll() is None, "the daemon died"
    with daemon.client() as c:
        assert c.status().pid == daemon.proc.pid
    assert "Traceback" not in daemon.log()


@SETTINGS
@given(hello=st.booleans(), line=random_bytes)
def test_random_bytes(live, hello, line):
    check(live.socket, hello, line)


@SETTINGS
@given(hello=st.booleans(), line=random_objects)
def test_random_json_objects(live, hello, line):
    check(live.socket, hello, line)


@SETTINGS
@given(hello=st.booleans(), line=validish_frames())
def test_random_fields_of_real_frame_types(live, hello, line):
    check(live.socket, hello, line)
