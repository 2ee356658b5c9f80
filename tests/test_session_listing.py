"""sessions.list's answer: within the frame whatever the sessions, the oldest kept, names cut."""

from __future__ import annotations

from types import SimpleNamespace

from scvd import protocol as p
from scvd.session_listing import listing


def sessions(count: int, workspace: str, client: str = "bridge") -> list[SimpleNamespace]:
    owner = SimpleNamespace(client=client)
    return [SimpleNamespace(id=f"s{i}-0123abcd", workspace=workspace, owner=owner, opened_at=1.5, call_count=i)
            for i in range(count)]


def test_an_answer_that_fits_is_whole_and_a_long_name_is_cut():
    answer = listing(sessions(3, "/w", client="N" * 1000), 7, 8 << 20)
    assert answer.left_out == 0 and [s.session for s in answer.sessions] == ["s0-0123abcd", "s1-0123abcd", "s2-0123abcd"]
    assert {s.client for s in answer.sessions} == {"N" * 64 + "..."}
    assert listing(sessions(1, "/w", client="N" * 64), 7, 8 << 20).sessions[0].client == "N" * 64


def test_the_newest_sessions_that_would_pass_the_frame_are_left_out_and_counted():
    # control bytes take six each in JSON, and a lone surrogate (a file name that is not UTF-8) is made valid
    many = sessions(500, "/w/" + "\x01" * 600 + "\udce9")
    room = 64 * 1024
    answer = listing(many, "id", room)
    size = len(p.encode(answer))
    assert size <= room and answer.left_out == 500 - len(answer.sessions) > 0
    assert [s.session for s in answer.sessions] == [s.id for s in many[:len(answer.sessions)]]
    one_more = listing(many[:len(answer.sessions) + 1], "id", 1 << 30)
    assert len(p.encode(one_more)) + len(',"left_out":500') > room  # as many as fit: one more would not


def test_a_frame_too_small_for_any_session_lists_none_and_says_how_many():
    answer = listing(sessions(3, "/" + "w" * 4000), 1, 1024)
    assert answer.sessions == [] and answer.left_out == 3 and len(p.encode(answer)) <= 1024
