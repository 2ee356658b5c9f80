"""chat.history's pages: cut from what chat.open read and the chat saved since, never the file."""

from __future__ import annotations

import msgspec

from scvd.chat.items import AssistantReply, Cleared, NoteArrived, Opened, SchemasLoaded, TurnEnded, UserText
from scvd.chat.pages import Pages


def texts(page: tuple[int, list[msgspec.Raw]]) -> tuple[int, list[str]]:
    start, rows = page
    return start, [msgspec.json.decode(row).get("text", msgspec.json.decode(row)["kind"]) for row in rows]


def test_pages_show_what_history_shows_and_page_back_from_the_newest():
    pages = Pages([Opened(workspace="/ws"), UserText(text="U1", turn="t1"), SchemasLoaded(names=["read"]),
                   AssistantReply(text="A1", turn="t1"), TurnEnded(turn="t1", status="completed")])
    pages.add([NoteArrived(call_id="c1", text="done"), UserText(text="U2", turn="t2")])
    assert texts(pages.page([], None, None)) == (0, ["U1", "A1", "turn", "U2"])
    assert texts(pages.page([], None, 2)) == (2, ["turn", "U2"])
    assert texts(pages.page([], 2, 5)) == (0, ["U1", "A1"])
    assert texts(pages.page([], 9, 1)) == (3, ["U2"])


def test_records_waiting_for_a_write_come_last_and_a_clear_among_them_starts_afresh():
    pages = Pages([UserText(text="U1", turn="t1")])
    waiting = [AssistantReply(text="A1", turn="t1")]
    assert texts(pages.page(waiting, None, None)) == (0, ["U1", "A1"])
    assert texts(pages.page(waiting, None, 1)) == (1, ["A1"])
    assert texts(pages.page([*waiting, Cleared(), UserText(text="U2", turn="t2")], None, None)) == (0, ["U2"])
    pages.add([Cleared(), UserText(text="U3", turn="t3")])
    assert texts(pages.page([], None, None)) == (0, ["U3"])
