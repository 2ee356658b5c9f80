"""scvd.text: what a person reads cannot carry terminal or bidi control characters."""

import re
import time

from scvd import protocol as p
from scvd.text import (NAME_SHOWN_CHARS, cut_middle, format_request, lone_surrogate, printable, printable_cut,
                       printable_data, quoted_name, well_formed)


def test_printable_escapes_controls_and_keeps_what_it_is_told():
    assert printable("plain text") == "plain text"
    assert printable("a\rb\x1b[31mc\u202ed\x00") == "a\\rb\\x1b[31mc\\u202ed\\x00"
    assert printable("line1\n\tline2") == "line1\n\tline2"
    assert printable("a\nb", keep="") == "a\\nb"



def test_a_long_text_escaped_and_cut_reads_as_if_escaped_whole():
    """printable() of a peer's 64 MiB message, cut to 4,096 chars after, held the loop for seconds:
    printable_cut escapes only the ends it keeps, and shows them as the whole text escaped would."""
    text = "\x1b[31m" + "x" * 100_000 + "\u202e the end\r"
    assert printable_cut(text, 10, 16) == cut_middle(printable(text), 10, 16) == (
        "\\x1b[31mxx ... [cut: 99,998 chars] ... \\u202e the end\\r")
    emoji = "\U0001f469\u200d\U0001f4bb"  # its joiner is shown only between the two
    for text in (emoji + "\x1b" * 50 + emoji, "\x1b" + emoji * 20 + "\n"):
        for head, tail in ((1, 1), (2, 2), (3, 0), (4, 5)):
            shown, whole = printable_cut(text, head, tail), cut_middle(printable(text), head, tail)
            assert re.sub(r"\[cut: [\d,]+ chars\]", "", shown) == re.sub(r"\[cut: [\d,]+ chars\]", "", whole)


def test_printable_escapes_what_draws_as_nothing_so_an_argument_cannot_look_empty():
    """Default-ignorable code points and blank-looking letters passed isprintable(): `rm -rf \u3164`
    showed as `rm -rf `, and two paths that differ by a zero-width space looked equal."""
    assert printable("rm -rf \u3164") == "rm -rf \\u3164"
    assert printable("/etc/pass\u200bwd") == "/etc/pass\\u200bwd"
    hidden = ["\u00ad", "\u034f", "\u115f", "\u1160", "\u17b4", "\u180b", "\u180e", "\u2060", "\u2800",
              "\ufe00", "\ufeff", "\uffa0", "\U0001bca0", "\U0001d159", "\U0001d173", "\U00016fe4",
              "\U000e0001", "\U000e0041", "\U000e0100"]
    for c in hidden:
        assert printable(f"a{c}b") == f"a{ascii(c)[1:-1]}b", hex(ord(c))
    assert printable("a\ufe0fb") == "a\\ufe0fb"  # a variation selector on a letter hides in it
    assert printable("a\u200db") == "a\\u200db"  # a joiner between letters too


def test_printable_keeps_ordinary_text_and_emoji_sequences():
    for text in ["caf\u00e9 e\u0301", "\u4e2d\u6587 \ud55c\uad6d\uc5b4", "\u0645\u0631\u062d\u0628\u0627",
                 "\U0001f600", "\u2764\ufe0f", "1\ufe0f\u20e3",
                 "\U0001f469\U0001f3fd\u200d\U0001f4bb",  # a woman, a skin tone, ZWJ, a laptop
                 "\U0001f3f3\ufe0f\u200d\U0001f308",  # a white flag, emoji style, ZWJ, a rainbow
                 "\U0001f468\u200d\U0001f469\u200d\U0001f467"]:
        assert printable(text) == text, ascii(text)
    assert printable("\ufe0f\u20e3") == "\\ufe0f\u20e3"  # no key to cap
    assert printable("\u2800\ufe0f") == "\\u2800\\ufe0f"  # a blank is no emoji


def test_a_quoted_name_cannot_close_its_quotes_and_says_when_it_is_cut():
    assert quoted_name("claude-code mcp host") == '"claude-code mcp host"'
    assert quoted_name('a" (pid 1) "b') == '"a\\" (pid 1) \\"b"'
    assert quoted_name('a\\" b') == '"a\\\\\\" b"'  # its own backslash cannot undo the quote's
    assert quoted_name("x\n\u3164") == '"x\\n\\u3164"'
    assert quoted_name("q" * 1000) == '"' + "q" * NAME_SHOWN_CHARS + '"...'
    assert quoted_name("q" * NAME_SHOWN_CHARS) == '"' + "q" * NAME_SHOWN_CHARS + '"'

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


def test_data_nested_past_the_recursion_limit_is_mended_and_its_lone_surrogate_found():
    """Both walked recursively: the MCP host's bridge met RecursionError in them at some 500 levels."""
    nested: list = ["caf\udce9"]
    for _ in range(5000):
        nested = [nested]
    found = lone_surrogate({"ok": "\U0001f600", "x": nested, "later": "\ud800"})
    assert found == ("x" + "[0]" * 5001, 0xDCE9, 3)
    mended = well_formed({"x": nested, "\ud800": ("a\ud83d", 1)})
    inner = mended["x"]
    for _ in range(5001):
        inner = inner[0]
    assert inner == "caf\ufffd" and mended["\ufffd"] == ["a\ufffd", 1]
