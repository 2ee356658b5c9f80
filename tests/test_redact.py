"""What scvd's own log lines hide (redact.hide_in_logs, for_logs): the values read lately, each key's
newest few, however often a key was rotated. And the encodings of a value redact() hides."""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import re
import textwrap
import urllib.parse

import pytest

from scvd import redact
from scvd.redact import LOG_VALUES_PER_KEY, for_logs, hide_in_logs


def token(i: int) -> str:
    return f"ghp_rotated{i:06d}abcdef"


def line(value: str) -> str:
    return f"GET https://api.example/repos?access_token={value} 200"


def rotate(times: int, start: int = 0) -> None:
    """GH_TOKEN stored again `times` times, each new value read once (store_secret, then a script's run)."""
    for i in range(start, start + times):
        hide_in_logs({"GH_TOKEN": token(i)})


def test_a_rotated_keys_current_and_recent_values_stay_hidden_and_the_oldest_go():
    hide_in_logs({"url query api_key": "mcp-literal-key-1234"})  # read once, when its MCP server was set up
    rotate(4 * LOG_VALUES_PER_KEY)
    newest = 4 * LOG_VALUES_PER_KEY - 1
    assert for_logs(line(token(newest))) == line("[secret GH_TOKEN]")  # the current one
    assert for_logs(line(token(newest - 1))) == line("[secret GH_TOKEN]")  # the one it replaced
    assert for_logs(line(token(newest - LOG_VALUES_PER_KEY + 1))) == line("[secret GH_TOKEN]")
    assert for_logs(line(token(0))) == line(token(0))  # rotated out long ago: no longer looked for
    assert for_logs(line(token(newest - LOG_VALUES_PER_KEY))) == line(token(newest - LOG_VALUES_PER_KEY))
    # another key's value, however many rotations came after it, is still hidden
    assert for_logs(line("mcp-literal-key-1234")) == line("[secret url query api_key]")


def test_what_each_log_line_is_checked_for_stops_growing_at_the_bound():
    rotate(LOG_VALUES_PER_KEY)
    at_bound = sum(map(len, redact._log_forms))  # each form checked in every line, base64's and the others
    rotate(10 * LOG_VALUES_PER_KEY, start=LOG_VALUES_PER_KEY)  # 2,000 cost each line 0.5 ms for good
    assert sum(map(len, redact._log_forms)) == at_bound


def test_a_value_read_again_counts_as_new():
    """Two sources of one key (the environment's GH_TOKEN, the store's) alternate: the one read all
    along stays hidden while the other rotates."""
    rotate(1)
    for i in range(1, 3 * LOG_VALUES_PER_KEY):
        hide_in_logs({"GH_TOKEN": token(i)})
        hide_in_logs({"GH_TOKEN": token(0)})
    assert for_logs(line(token(0))) == line("[secret GH_TOKEN]")
    assert for_logs(line(token(1))) == line(token(1))



def test_a_name_that_many_sources_share_keeps_each_ones_value():
    """Every MCP server's literal query key is `url query api_key`, read once as its server is set
    up: seventeen servers pushed the first one's live key out, and httpx at debug printed it."""
    for i in range(LOG_VALUES_PER_KEY + 1):
        hide_in_logs({"url query api_key": f"mcp-literal-key-{i:04d}"}, f"mcp server s{i}")
    for i in range(LOG_VALUES_PER_KEY + 1):
        assert for_logs(line(f"mcp-literal-key-{i:04d}")) == line("[secret url query api_key]"), i


# --- the forms of a value redact() knows --------------------------------------------------------

PAT = "github_pat_11ABCDEFG0" + "x7Kq9ZpL2mN4vB8cD1fH3jR5tW6yE0uI" * 2 + "s9T_aQ3wE5rT7yU9iO1pA2sD4fG6h"  # 99 chars
SLASHY = "tok/+ab?c>d~Z9=="  # its base64 holds `/` and `+`, its percent-encoding %2F


def shows(out: str, encoded: str) -> list[str]:
    """The 10-character runs of `encoded` still in `out`, line breaks left out of both: base64 keeps at
    most the few characters that also carry a prefix's bits (`user:` is 7) and the padding."""
    out, encoded = (s.replace("\r", "").replace("\n", "") for s in (out, encoded))
    return [encoded[i:i + 10] for i in range(len(encoded) - 9) if encoded[i:i + 10] in out]


@pytest.mark.parametrize("encode, value", [
    (lambda v: base64.urlsafe_b64encode(v).decode(), SLASHY),
    (lambda v: base64.urlsafe_b64encode(b"user:" + v).decode().rstrip("="), SLASHY),  # a JWT's part: no padding
    (lambda v: base64.encodebytes(b"user:" + v).decode(), PAT),  # wrapped at 76 columns
    (lambda v: base64.encodebytes(v).decode().replace("\n", "\r\n"), PAT),  # MIME's line ends
    (lambda v: "\n".join(textwrap.wrap(base64.b64encode(b"k=" + v).decode(), 64)), PAT),  # openssl base64's 64
    (lambda v: urllib.parse.quote(v), SLASHY),  # `/` kept
    (lambda v: re.sub("%[0-9A-F]{2}", lambda m: m.group().lower(), urllib.parse.quote(v, safe="")), SLASHY),
    (lambda v: v.hex(), PAT),
    (lambda v: v.hex().upper(), SLASHY),
], ids=["base64url", "jwt-part", "encodebytes", "mime", "openssl", "quote", "percent-lower-hex", "hex", "HEX"])
def test_a_value_in_a_common_encoding_shows_none_of_its_own_characters(encode, value):
    """Reproduced by a review: each came back unhidden, a 99-character github_pat in
    `base64.encodebytes(b"user:" + v)` too (its line break fell inside the value's characters)."""
    encoded = encode(value.encode())
    out = redact.redact(f"said: {encoded}\nbye\n", {"K": value})
    assert "[secret K]" in out and not shows(out, encoded), out
    assert out.startswith("said: ") and out.endswith("\nbye\n"), out


def test_a_wrapped_value_takes_the_line_breaks_inside_it_and_leaves_the_others():
    lines = base64.encodebytes(b"user:" + PAT.encode()).decode().splitlines()  # 2 lines of 76, and a third
    text = "\r\n".join(["head", *lines, *lines, "tail"])
    out = redact.redact(text, {"PAT": PAT})
    assert out.count("[secret PAT]") == 2 and not shows(out, "".join(lines)), out
    assert out == "head\r\ndXNlcjp[secret PAT]g=\r\ndXNlcjp[secret PAT]g=\r\ntail", out


def test_of_two_overlapping_base64_values_found_across_a_break_the_longer_goes_whole():
    long, short = base64.b64encode(b"0123456789abcdef").decode(), base64.b64encode(b"89abcdef").decode()
    assert redact.redact(f"x{long[:9]}\n{long[9:]}y", {"A": "0123456789abcdef", "B": "89abcdef"}).startswith(
        "x[secret A]"), long
    assert redact.redact(f"{short}\n{short}", {"B": "89abcdef"}) == "[secret B]Y=\n[secret B]Y="  # padding stays


# --- forms a tool prints a value in with whitespace in it, or escaped twice ---------------------

def run(argv: list[str], data: bytes) -> str:
    if not shutil.which(argv[0]):
        pytest.skip(f"{argv[0]} is not installed")
    return subprocess.run(argv, input=data, capture_output=True, check=True).stdout.decode()


def shown(out: str, encoded: str, n: int = 10) -> list[str]:
    """The `n`-character runs of `encoded` still in `out`, whitespace left out of both."""
    out, encoded = ("".join(s.split()) for s in (out, encoded))
    return [encoded[i:i + n] for i in range(len(encoded) - n + 1) if encoded[i:i + n] in out]


@pytest.mark.parametrize("argv", [["base32"], ["basenc", "--base32"], ["xxd", "-p"], ["od", "-An", "-tx1"]],
                         ids=" ".join)
def test_a_value_a_tool_printed_in_base32_or_in_spaced_or_wrapped_hex_shows_none_of_its_characters(argv):
    """base32 wraps at 76 columns, `xxd -p` at 60, `od` puts a space before each byte: none was hidden."""
    encoded = run(argv, b"k=" + PAT.encode() + b"\n")  # its base32 after `k=`: the value at an odd alignment
    out = redact.redact(f"said:\n{encoded}bye\n", {"K": PAT})
    assert "[secret K]" in out and not shown(out, encoded), out
    assert out.startswith("said:\n") and out.endswith("\nbye\n"), out


def test_a_value_base32_encoded_by_python_at_each_alignment_is_hidden():
    for prefix in ("", "u", "us", "use", "user"):
        encoded = base64.b32encode(prefix.encode() + SLASHY.encode()).decode()
        out = redact.redact(f"x {encoded} y", {"K": SLASHY})
        assert "[secret K]" in out and not shown(out, encoded), (prefix, out)


def test_base64_indented_after_each_line_break_is_hidden_as_wrapped_base64_is():
    """A PEM or base64 blob in YAML, or in an indented document: `\\n    ` between its lines."""
    blob = textwrap.indent(base64.encodebytes(b"user:" + PAT.encode()).decode(), "    ")
    for text in (f"auth: |\n{blob}next: 1\n", f"auth:\n\t{blob.strip()}\n\tnext"):
        out = redact.redact(text, {"PAT": PAT})
        assert out.count("[secret PAT]") == 1 and not shown(out, blob), out
        assert out.startswith("auth:") and "next" in out, out


@pytest.mark.parametrize("argv", [["hexdump", "-C"], ["xxd"], ["od", "-tx1"]], ids=" ".join)
def test_a_canonical_dump_shows_only_the_pieces_of_a_value_under_8_bytes_a_line(argv):
    """A dump's offsets and its text column cut the value's hex at every line: each line's piece, in
    hex and as text, is hidden unless it is shorter than DUMP_PIECE_MIN (here the last line's)."""
    data = b"k=" + PAT.encode() + b"\n"
    out = redact.redact(run(argv, data), {"PAT": PAT})
    assert out.count("[secret PAT]") >= 7, out
    assert not shown(out, PAT, redact.DUMP_PIECE_MIN) and not shown(out, PAT.encode().hex(), 16), out
    last = PAT[-(len(data) % 16 - 1):].encode()  # 4 bytes, too common to look for
    assert shown(out, PAT.encode().hex(), 2 * len(last)) == [last.hex()], out


def test_a_dumps_pieces_are_looked_for_only_in_text_that_holds_a_dump():
    """A 16-byte piece of a token is its prefix, which its siblings share: hidden everywhere, it cut them."""
    value, sibling = "ghp_" + "A" * 12 + "0123456789", "ghp_" + "A" * 12 + "9876543210"
    assert redact.redact(f"old {sibling}", {"K": value}) == f"old {sibling}"
    # a number of many zeros is no dump: the pieces are looked for only below a dump's first offset
    for text in (f"took 100000000 ns, then {sibling}", f"id 0000000042 {sibling}"):
        assert redact.redact(text, {"K": value}) == text


@pytest.mark.parametrize("inner", [
    lambda v: json.dumps(v),
    lambda v: json.dumps(v).replace("/", "\\/"),  # PHP, Java
    lambda v: json.dumps(v).replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026"),  # Go
], ids=["python", "php", "go"])
def test_a_json_document_carried_as_a_string_in_another_hides_the_value_escaped_twice(inner):
    value = 'p"ss/w<rd>&\\x-0123'
    for outer in (json.dumps({"body": '{"token": ' + inner(value) + "}"}),
                  json.dumps({"body": '{"token": ' + inner(value) + "}"}).replace("/", "\\/")):
        out = redact.redact(f"{outer}\n", {"K": value})
        assert out == '{"body": "{\\"token\\": \\"[secret K]\\"}"}\n', out
