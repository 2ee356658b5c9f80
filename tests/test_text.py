"""scvd.text: what a person reads cannot carry terminal or bidi control characters."""

from scvd.text import printable, printable_data


def test_printable_escapes_controls_and_keeps_what_it_is_told():
    assert printable("plain text") == "plain text"
    assert printable("a\rb\x1b[31mc\u202ed\x00") == "a\\rb\\x1b[31mc\\u202ed\\x00"
    assert printable("line1\n\tline2") == "line1\n\tline2"
    assert printable("a\nb", keep="") == "a\\nb"


def test_printable_data_walks_json_like_values():
    data = {"argv": ["claude", "-p", "go\x1b[2J"], "n": 3, "k\r": {"x": "\u202e"}, "ok": True}
    assert printable_data(data) == {"argv": ["claude", "-p", "go\\x1b[2J"], "n": 3, "k\\r": {"x": "\\u202e"},
                                    "ok": True}
