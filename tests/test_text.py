"""scvd.text: what a person reads cannot carry terminal or bidi control characters."""

import time

from scvd import protocol as p
from scvd.text import format_request, printable, printable_data


def test_printable_escapes_controls_and_keeps_what_it_is_told():
    assert printable("plain text") == "plain text"
    assert printable("a\rb\x1b[31mc\u202ed\x00") == "a\\rb\\x1b[31mc\\u202ed\\x00"
    assert printable("line1\n\tline2") == "line1\n\tline2"
    assert printable("a\nb", keep="") == "a\\nb"


def test_printable_data_walks_json_like_values():
    data = {"argv": ["claude", "-p", "go\x1b[2J"], "n": 3, "k\r": {"x": "\u202e"}, "ok": True}
    assert printable_data(data) == {"argv": ["claude", "-p", "go\\x1b[2J"], "n": 3, "k\\r": {"x": "\\u202e"},
                                    "ok": True}


def test_a_request_that_expires_another_day_shows_the_date():
    """A large approvals.timeout_seconds puts the expiry days ahead: `expires 10:15:00` read as today."""
    def expiry(at: float) -> str:
        a = p.ApprovalRequested(seq=0, approval_id="a1-3e9f01", session="s1", call_id="c1", tool="bash",
                                risk="process", workspace="/w", summary="bash: ls", expires_at=at)
        return format_request(a).rsplit("; ", 1)[1]

    later = time.time() + 3 * 86400
    assert expiry(later) == f"expires {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(later))}"
    now = time.time()
    assert expiry(now) == f"expires {time.strftime('%H:%M:%S', time.localtime(now))}"
