"""Secret values taken out of text scvd shows: a script's output, an MCP server's result, error or stderr.

Rule: every form a value may be printed in reads `[secret KEY]`: as is, as a `repr` of
the string or of its UTF-8 bytes, or as a JSON string from any common encoder (Python's
`json.dumps` either way, `\\/` for `/` as PHP and Java print it, `<>&='` as `\\u003c`...
as Go and Gson do, upper-case hex), so text that is not one JSON document (stderr, JSON
lines, output the cap cut) hides it too; percent-encoded, as in a URL's query (`/` kept or
not, upper- or lower-case hex); of an Authorization value (`Bearer X`), X alone too. Of a
value of BASE64_MIN bytes or more, also: its JSON string escaped again (a JSON document
carried as a string in another: `\\\\/`, `\\"`); in hex (either case); base64-encoded after
any prefix, as in HTTP Basic (`Basic base64(user:KEY)`) or a JWT: the characters that hold
only the value's bits, at each of base64's three alignments (the one at either end that
shares bits with the user or the padding stays), in the standard and the URL-safe alphabet;
base32-encoded (RFC 4648's alphabet, as `base32` and `b32encode` print it) likewise at its
five alignments. Whitespace may fall anywhere in those (`base64` wraps its lines, a YAML
block indents them, `od` spaces its bytes, `xxd -p` wraps its hex). In a canonical dump
(`hexdump -C`, `xxd`, `od -tx1`: a line starting with DUMP_OFFSET), each line's piece of the value
of DUMP_PIECE_MIN bytes or more too, in hex and in the text column; a shorter piece at
either end of the value shows, as does a dump without its first line (`xxd -s`). Not hidden:
`hexdump`'s default byte-swapped words, `xxd -i`'s `0x61,`, base32hex, lower-case base32.
Base64's, base32's and hex's forms first, then the others, longest first: a value inside a
longer one goes with it. Plain string search (those of base64, base32 and hex in the text
with its whitespace left out): no pattern a script's output could make slow.
"""

from __future__ import annotations

import functools
import re
import threading
from typing import Mapping, NamedTuple
from urllib.parse import quote, quote_plus

_HTML_SAFE = {c: f"\\u{ord(c):04x}" for c in "<>&='"}
_HEX_ESCAPE = re.compile(r"\\u([0-9a-f]{4})")
_PERCENT_HEX = re.compile(r"%[0-9A-F]{2}")
_URL_SAFE = str.maketrans("+/", "-_")  # base64url's alphabet (a JWT's, urlsafe_b64encode's)
# what may fall inside a form searched across it: line breaks (`base64` wraps), the indentation after one
# (a PEM in YAML), the spaces between bytes (`od`, `hexdump -C`)
_GAPS = " \t\r\n"
_NOT_GAP = re.compile(r"[^ \t\r\n]")
# an Authorization header's value, whole in the store (`Bearer ghp_...`): its credentials may be quoted alone
_AUTH_VALUE = re.compile(r"(?:bearer|basic|token|bot) +(\S{8,})", re.IGNORECASE)


def redact(text: str, secrets: dict[str, str]) -> str:
    """`text` with every form of each secret's value (as printed, or escaped) as `[secret KEY]`."""
    return _hidden(text, _ordered(tuple(sorted(secrets.items())))) if secrets else text


Forms = tuple[tuple[str, str], ...]  # (form, stand-in), longest first


class Ordered(NamedTuple):
    """A set of secrets' forms, each group longest first."""

    plain: Forms  # printed as they are
    broken: Forms  # base64's, base32's and hex, which whitespace may fall in
    dump_plain: Forms  # `plain` and the pieces of a value a canonical dump's text column shows
    dump_broken: Forms  # `broken` and those pieces in hex


def _hidden(text: str, ordered: Ordered) -> str:
    """`text` with base64's, base32's and hex's forms (whitespace in them or not) hidden first, then every
    other form: a short value inside another's base64 would have cut it, and left the rest of it to show.
    A dump's pieces only where a dump's first offset is: they are many (1 MiB, 5 secrets: 0.4 s, not
    15 ms), and a 16-byte piece of a token (its prefix) would hide its siblings in ordinary text."""
    plain, broken = ordered[2:] if DUMP_OFFSET in text and _DUMP_START.search(text) else ordered[:2]
    if broken:
        text = _hide_broken(text, broken) if any(gap in text for gap in _GAPS) else _replaced(text, broken)
    return _replaced(text, plain)


def _replaced(text: str, forms: Forms) -> str:
    for form, standin in forms:
        if form in text:
            text = text.replace(form, standin)
    return text


def _hide_broken(text: str, forms: Forms) -> str:
    """`text` with each form as its stand-in wherever `text` holds it once its whitespace is left out
    (as _replaced() would have, had there been none): the whitespace within an occurrence goes with it."""
    joined = text
    for gap in _GAPS:
        joined = joined.replace(gap, "")
    # each occurrence as `\n`, its form's index, `\n`: `joined` holds no `\n`, and an index is shorter
    # than any form (BASE64_MIN bytes make 10 or more), which holds no `\n` either: none is found in it
    marked = joined
    for i, (form, _) in enumerate(forms):
        if form in marked:
            marked = marked.replace(form, f"\n{i}\n")
    if marked is joined:
        return text
    parts = marked.split("\n")  # what stays, a mark, what stays, ...
    pieces, done, at, place = [], 0, 0, (0, 0)
    for kept, mark in zip(parts[::2], parts[1::2]):
        form, standin = forms[int(mark)]
        first, place = _seek(text, at := at + len(kept), place)
        last, place = _seek(text, (at := at + len(form)) - 1, place)
        pieces += [text[done:first], standin]
        done = last + 1
    return "".join(pieces) + text[done:]


def _seek(text: str, j: int, place: tuple[int, int]) -> tuple[int, tuple[int, int]]:
    """Where in `text` the `j`th character of `text` less its whitespace is, from `place`: a place at
    or before it, and the whitespace before that place (so each seek counts on from the last one)."""
    at, breaks = place
    while (ahead := j + breaks) > at:  # ends once a stretch counted holds no whitespace
        breaks += sum(text.count(gap, at, ahead) for gap in _GAPS)
        at = ahead
    char = _NOT_GAP.search(text, at).start()  # the whitespace right before it is not its own
    return char, (char, breaks + char - at)


# the secret values scvd has read, as (source, key, value), each newest last: hidden in its own log lines
# too, where an HTTP library at debug prints a url with its query; and their forms, longest first, which
# every line is checked for. Rebound, never changed in place: keyring lookups run on worker threads
# while a log line is formatted.
_in_logs: tuple[tuple[str, str, str], ...] = ()
_log_forms: Ordered | tuple[()] = ()
_log_lock = threading.Lock()  # two threads' hide_in_logs at once: neither's values lost
LOG_MIN = 4  # a shorter value would hide ordinary words in every line; no real secret is that short
# a key's newest values kept, per source: each line cost a check of every value a key ever had (2,000
# rotations of a stored key, 0.5 ms a line for the daemon's life); a value rotated out that long ago is
# unlikely in one. Per source: a label such as `url query api_key` is every MCP server's, each value read
# once, as its server is set up; seventeen servers would have pushed out the first one's live key.
LOG_VALUES_PER_KEY = 16


def hide_in_logs(secrets: Mapping[str, str], source: str = "") -> None:
    """Hide these values in every log line from now on; of a key's values from one `source` (an MCP
    server, a chat provider; "" for the secret store's names, which are the keys themselves), the
    LOG_VALUES_PER_KEY newest (a value seen again is newest again): a rotated key's recent old values
    stay hidden too."""
    global _in_logs, _log_forms
    seen = tuple((source, k, v) for k, v in secrets.items() if len(v) >= LOG_MIN)
    if not seen or _in_logs[-len(seen):] == seen:  # the usual: a tool's same values, run after run
        return
    with _log_lock:
        kept = _newest((*(entry for entry in _in_logs if entry not in seen), *seen))
        if set(kept) != set(_in_logs):  # else only their order changed: the forms are the same
            _log_forms = _forms(tuple(sorted({(key, value) for _, key, value in kept})))
        _in_logs = kept


def _newest(entries: tuple[tuple[str, str, str], ...]) -> tuple[tuple[str, str, str], ...]:
    """`entries` (oldest first) less what is older than each (source, key)'s LOG_VALUES_PER_KEY newest."""
    count: dict[tuple[str, str], int] = {}
    kept = []
    for source, key, value in reversed(entries):
        count[source, key] = count.get((source, key), 0) + 1
        if count[source, key] <= LOG_VALUES_PER_KEY:
            kept.append((source, key, value))
    return tuple(reversed(kept))


def for_logs(text: str) -> str:
    """A log line with every form of the secrets kept for the logs as `[secret KEY]`."""
    return _hidden(text, _log_forms) if _log_forms else text


def redact_tree(value: object, secrets: dict[str, str]) -> object:
    """A parsed JSON value with the secrets taken out of every string in it, keys included."""
    if isinstance(value, str):
        return redact(value, secrets)
    if isinstance(value, list):
        return [redact_tree(v, secrets) for v in value]
    if isinstance(value, dict):
        return {redact(k, secrets): redact_tree(v, secrets) for k, v in value.items()}
    return value


def forms(secrets: dict[str, str]) -> dict[str, str]:
    """Each secret's value in every form it may be printed in, mapped to its stand-in `[secret KEY]`."""
    plain, broken = _ordered(tuple(sorted(secrets.items())))[:2]  # a cut in a dump's piece is not worth it
    return dict(broken + plain)


def _forms(items: tuple[tuple[str, str], ...]) -> Ordered:
    """Every form of each value mapped to its stand-in, longest first: those printed as they are, and
    base64's, base32's and hex, which whitespace may fall in; with a dump's pieces and without."""
    found: tuple[dict[str, str], ...] = ({}, {}, {}, {})
    for key, value in items:
        raw = value.encode("utf-8", "surrogatepass")
        pieces = _dump_pieces(raw) if len(raw) >= BASE64_MIN else (set(), set())
        for group, encoded in zip(found, (*_encodings(value), *pieces)):
            for form in encoded:
                group.setdefault(form, f"[secret {key}]")
    plain, broken, shown, in_hex = found
    plain = {f: s for f, s in plain.items() if f not in broken}
    return Ordered(_longest_first(plain), _longest_first(broken), _longest_first({**shown, **plain}),
                   _longest_first({**in_hex, **broken}))


def _longest_first(found: dict[str, str]) -> Forms:
    return tuple(sorted(found.items(), key=lambda fs: len(fs[0]), reverse=True))


# a JSON result is redacted string by string with the same secrets; the logs' forms are made once apart
_ordered = functools.lru_cache(maxsize=64)(_forms)


BASE64_MIN = 8  # bytes of a value hidden in base64 too: a shorter one's few characters would hide in any text


def _base64_core(raw: bytes, shift: int) -> str:
    """`raw` base64-encoded after `shift` bytes of anything (mod 3), less the characters that carry
    some bits of those bytes or of what follows: what any such encoding of it holds."""
    import base64

    encoded = base64.b64encode(bytes(shift) + raw).decode("ascii")
    first = (8 * shift + 5) // 6  # a character is 6 bits: the first with none of the shift's 8 * shift
    return encoded[first:8 * (shift + len(raw)) // 6]


def _base32_cores(raw: bytes) -> set[str]:
    """`raw` base32-encoded (RFC 4648, as `base32` and b32encode print it) after anything, at each of
    its five alignments: the characters that hold only its bits, as _base64_core() keeps base64's."""
    import base64

    cores = set()
    for shift in range(5):
        encoded = base64.b32encode(bytes(shift) + raw).decode("ascii")
        cores.add(encoded[(8 * shift + 4) // 5:8 * (shift + len(raw)) // 5])  # a character is 5 bits
    return cores


DUMP_OFFSET = "0000000"  # a canonical dump's first line starts so (`od`'s 7 digits, the others' 8)
# that offset at a line's start, then `hexdump -C`'s two spaces, `xxd`'s colon or `od`'s space: a
# number such as 10000000 in a large result is no dump (its pieces' search costs 25x a plain one)
_DUMP_START = re.compile(r"^0{7,8}(?::| )", re.MULTILINE)
DUMP_LINE = 16  # bytes a line of `hexdump -C`, `xxd`, `od` shows
DUMP_PIECE_MIN = 8  # bytes of a value's piece on one line of a dump hidden: a shorter one is too common


def _dump_pieces(raw: bytes) -> tuple[set[str], set[str]]:
    """The pieces of `raw` one line of a canonical dump (`hexdump -C`, `xxd`) shows, wherever the value
    starts in it: in its text column (`.` for what is not printable ASCII) and in hex. The offset and
    the text column cut the value's hex at each line's end, out of reach of one search for the whole."""
    n = len(raw)
    pieces = {raw[i:i + DUMP_LINE] for i in range(n - DUMP_LINE + 1)}  # a line the value fills
    for k in range(DUMP_PIECE_MIN, min(DUMP_LINE, n)):  # the first line's piece, the last one's
        pieces |= {raw[:k], raw[n - k:]}
    shown = {"".join(chr(b) if 32 <= b < 127 else "." for b in piece) for piece in pieces}
    return shown, {piece.hex() for piece in pieces}


def _percent(raw: bytes) -> set[str]:
    """`raw` percent-encoded: as urlencode does (an MCP server's `query` secret in its url), as quote()
    does by default (`/` kept), each with its hex upper- or lower-case (`%2f`, as some encoders write)."""
    quoted = {quote(raw, safe=""), quote_plus(raw, safe=""), quote(raw)}
    return quoted | {_PERCENT_HEX.sub(lambda m: m.group().lower(), q) for q in quoted}


def _encodings(value: str) -> tuple[set[str], set[str]]:
    """The forms of `value` printed as they are, and those whitespace may fall in (base64's, base32's, hex)."""
    if not value:
        return set(), set()
    raw = value.encode("utf-8", "surrogatepass")  # a value from the environment may hold a surrogate
    out = {value, repr(value)[1:-1], repr(raw)[2:-1], *_percent(raw), *_json_strings(value)}
    broken: set[str] = set()
    if auth := _AUTH_VALUE.fullmatch(value):
        out, broken = (mine | theirs for mine, theirs in zip((out, broken), _encodings(auth.group(1))))
    if len(raw) >= BASE64_MIN:
        cores = {_base64_core(raw, shift) for shift in range(3)}
        broken |= cores | {core.translate(_URL_SAFE) for core in cores} | _base32_cores(raw)
        broken |= {raw.hex(), raw.hex().upper()}
        out |= {twice for once in _json_strings(value) for twice in _json_strings(once)}  # JSON in JSON
    out.discard("")
    return out - broken, broken


def _json_strings(value: str) -> set[str]:
    """`value` inside a JSON string, as any common encoder escapes it."""
    import json  # here: the start, which logs through for_logs(), needs no json before READY=1

    out = set()
    for dumped in (json.dumps(value)[1:-1], json.dumps(value, ensure_ascii=False)[1:-1]):
        for styled in (dumped, "".join(_HTML_SAFE.get(c, c) for c in dumped)):
            for slashed in (styled, styled.replace("/", "\\/")):
                out.add(slashed)
                out.add(_HEX_ESCAPE.sub(lambda m: "\\u" + m.group(1).upper(), slashed))
    return out
