"""chat.history's pages: cut from what chat.open read and the chat saved since, the newest kept in
memory, older ones read back from the transcript."""

from __future__ import annotations

import msgspec

import pytest

from scvd import errors
from scvd.chat.items import (AssistantReply, Cleared, NoteArrived, Opened, SchemasLoaded, ToolOutput, TurnEnded,
                             UserText)
from scvd.chat.pages import BUDGET_BYTES, Page, Pages, older
from scvd.chat.transcript import Transcripts


def texts(page: Page) -> tuple[int, list[str]]:
    assert not page.older  # all of it in memory
    return page.start, shown(page.rows)


def shown(rows: list[msgspec.Raw]) -> list[str]:
    return [msgspec.json.decode(row).get("text", msgspec.json.decode(row)["kind"]) for row in rows]


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


def test_a_long_chat_keeps_only_its_newest_records_and_older_pages_come_from_the_transcript(tmp_path):
    """Pages kept the JSON of every record since the last clear, whole tool outputs included, for as
    long as the chat was open: a chat open for months grew with every turn."""
    transcripts = Transcripts(tmp_path)
    records: list = [Opened(workspace="/ws")]
    for n in range(300):  # 30 MB of tool outputs
        records += [UserText(text=f"U{n}", turn=f"t{n}"),
                    ToolOutput(call_id=f"c{n}", name="read", output="x" * 100_000, turn=f"t{n}"),
                    TurnEnded(turn=f"t{n}", status="completed")]
    transcripts.append("k1", records)
    pages = Pages(records[:300])  # chat.open's, then the chat's own as they are saved
    for record in records[300:]:
        pages.add([record])
        assert pages.held <= BUDGET_BYTES
    assert pages.forgotten > 700  # of 900
    newest = pages.page([], None, 3)
    assert (newest.start, shown(newest.rows), newest.older) == (897, ["U299", "tool", "turn"], range(897, 897))
    oldest = pages.page([], 3, 3)
    assert (oldest.start, oldest.rows, oldest.older) == (0, [], range(0, 3))
    assert shown(older(transcripts, "k1", oldest)) == ["U0", "tool", "turn"]
    gone = pages.forgotten
    across = pages.page([], gone + 1, 2)  # one record read back, one kept
    assert (across.older, len(across.rows)) == (range(gone - 1, gone), 1)
    view = [text for n in range(300) for text in (f"U{n}", "tool", "turn")]
    assert shown(older(transcripts, "k1", across) + across.rows) == view[gone - 1:gone + 1]


def test_an_older_page_of_a_transcript_moved_away_says_what_to_do(tmp_path):
    pages = Pages([UserText(text="U1", turn="t1"), UserText(text="U2", turn="t2")], budget=90)
    page = pages.page([], None, None)
    assert (page.start, shown(page.rows), page.older) == (0, ["U2"], range(0, 1))
    with pytest.raises(errors.Unavailable, match=r"records 0 to 0 of conversation k1 are no longer held in memory, "
                       r"and its transcript \(.*k1\.jsonl\) no longer has them .*page from record 1 on"):
        older(Transcripts(tmp_path), "k1", page)


def test_an_older_page_of_a_transcript_begun_afresh_is_refused_not_other_records(tmp_path):
    """Moved away while the chat went on, the next save began a new k1.jsonl: once it held enough
    records, an older page gave its records at the old positions (U10 for U0). Nor is the message's
    record one not in memory either."""
    transcripts = Transcripts(tmp_path)
    old = [UserText(text=f"U{n}", turn=f"t{n}") for n in range(10)]
    pages = Pages(old, budget=120)
    fresh = [UserText(text=f"U{n}", turn=f"t{n}") for n in range(10, 30)]
    transcripts.append("k1", fresh)  # the file the chat's saves began after the move
    pages.add(fresh)
    page = pages.page([], 4, 4)
    assert page.older == range(0, 4) and pages.forgotten > 4
    with pytest.raises(errors.Unavailable, match=rf"page from record {pages.forgotten} on$"):
        older(transcripts, "k1", page)
