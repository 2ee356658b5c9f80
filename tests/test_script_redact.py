"""What a script tool hands back of its declared secrets: nothing, however short the value or the output cut."""

from __future__ import annotations

import pytest

from scvd.process import CappedOutput
from scvd.redact import redact
from scvd.tools.runs import redact_text
from scvd.tools.script import parse_redacted

PIN = {"PIN": "4711"}


def test_a_short_secret_in_json_leaves_the_json_whole():
    """Redacting the text first turned `{"pin": 4711}` into text that no longer parsed: the agent got a
    string instead of the object. Decoded first, the number itself is what is taken out."""
    got = parse_redacted('{"pin": 4711, "note": "pin 4711 set", "n": 1, "4711": [47110, 1.5]}', PIN)
    assert got == {"pin": "[secret PIN]", "note": "pin [secret PIN] set", "n": 1,
                   "[secret PIN]": ["[secret PIN]0", 1.5]}


def test_a_number_is_matched_as_the_script_printed_it():
    assert parse_redacted('{"amount": 1234.50, "e": 1e3}', {"K": "1234.50"}) == {"amount": "[secret K]", "e": 1000.0}
    assert parse_redacted('[-7, 0.25]', {"K": "99"}) == [-7, 0.25]  # untouched keep their type


def test_escapes_only_decoding_shows_are_still_caught():
    assert parse_redacted('{"t": "a\\/b\\u0026c"}', {"T": "a/b&c"}) == {"t": "[secret T]"}


def test_text_that_is_not_json_raises_for_the_text_path():
    with pytest.raises(ValueError):
        parse_redacted("pin=4711", PIN)
    assert redact_text("pin=4711", PIN) == "pin=[secret PIN]"


@pytest.mark.parametrize("secrets", [{}, PIN])
@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_nan_and_infinity_are_not_json_so_the_text_is_kept(secrets, constant):
    """json.dumps(float('nan')) prints NaN: taken for JSON, the agent got {"mean": null}."""
    with pytest.raises(ValueError):
        parse_redacted(f'{{"mean": {constant}}}', secrets)


def cut(text: str, limit: int) -> str:
    out = CappedOutput(limit)
    out.feed(text.encode())
    return out.text()


def test_a_secret_cut_in_two_by_the_output_cap_shows_no_part():
    """The cap keeps the head and the tail: a value that straddles either edge left its start before
    the marker or its end after it, out of reach of a whole-value replace."""
    token = "tok-0123456789abcdef"
    text = "a" * 40 + token + "b" * 200 + token + "c" * 40
    capped = cut(text, 100)  # head 50 bytes: 'a' * 40 + 10 of the token; the tail likewise
    assert "tok-012345" in capped and "6789abcdef" in capped  # the cut fell inside both copies
    shown = redact_text(capped, {"TOKEN": token})
    assert "tok-" not in shown and "abcdef" not in shown
    assert shown.startswith("a" * 40 + "[secret TOKEN]\n... ") and shown.endswith(" omitted ...\n[secret TOKEN]" + "c" * 40)


def test_ordinary_text_at_the_cut_is_left_alone():
    """Only a part long enough to matter is taken out, so a lone letter the value starts with stays."""
    capped = cut("x" * 60 + "t" + "y" * 200, 122)
    assert capped.split("\n")[0].endswith("t")
    assert redact_text(capped, {"TOKEN": "tok-0123456789"}) == capped


@pytest.mark.parametrize("printed", [
    'secret":"wJalrXUtnFEMI\\/K7MDENG+bPxRfiCYEXAMPLEKEY=="',   # PHP, Java: \/
    'secret":"wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY\\u003d\\u003d"',   # Gson: \u003d
    'secret":"wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY\\u003D\\u003D"',   # upper-case hex
])
def test_another_encoders_escapes_are_caught_outside_one_json_document(printed):
    # stderr and JSON lines are not decoded: once, only Python's own escaping was caught there
    text = f'{{"request":{{"{printed}}}}}\n{{"page":2}}\n'
    out = redact(text, {"AWS_KEY": "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY=="})
    assert out == '{"request":{"secret":"[secret AWS_KEY]"}}\n{"page":2}\n'


def test_escaped_control_and_astral_characters_and_a_value_inside_a_longer_one():
    secrets = {"A": "tab\there\U0001F511", "B": "tab"}
    assert redact('x "tab\\there\\ud83d\\udd11" y', secrets) == 'x "[secret A]" y'
    assert redact("x b'tab\\there\\xf0\\x9f\\x94\\x91' y", secrets) == "x b'[secret A]' y"  # a bytes repr
    assert redact("a tab, b", secrets) == "a [secret B], b"


def test_of_two_overlapping_values_the_longer_goes_whole():
    assert redact("alongsecret", {"A": "al", "B": "longsecret"}) == "a[secret B]"
    assert redact("1234abcdefgh", {"PIN": "1234", "TOK": "4abcdefgh"}) == "123[secret TOK]"


def test_a_value_of_backslashes_against_a_run_of_them_takes_no_time():
    # a pattern per character backtracked exponentially here: a script's output could stall scvd
    assert redact("\\" * 44 + "Y", {"K": "\\" * 22 + "Z"}) == "\\" * 44 + "Y"


def test_an_authorization_value_is_hidden_also_as_its_credentials_alone():
    """A header secret holds the header's whole value (`Bearer ghp_...`, docs/mcp.md): a server or a
    script that quoted the token alone (`invalid token ghp_...`) showed it."""
    secrets = {"GH": "Bearer ghp_0123456789abcdef", "BASIC": "basic dXNlcjpwYXNz"}
    assert redact("401: token ghp_0123456789abcdef revoked", secrets) == "401: token [secret GH] revoked"
    assert redact("sent Authorization: Bearer ghp_0123456789abcdef", secrets) == "sent Authorization: [secret GH]"
    assert redact('{"auth": "dXNlcjpwYXNz"}', secrets) == '{"auth": "[secret BASIC]"}'
    # a credential too short to tell from ordinary text, or a value of other words, is hidden whole only
    assert redact("about Basic ab", {"K": "Basic ab", "P": "correct horse battery"}) == "about [secret K]"
    assert redact("the horse battery", {"P": "correct horse battery"}) == "the horse battery"
