"""Secret values taken out of text scvd shows: a script's output, an MCP server's result, error or stderr.

Rule: every form a value may be printed in reads `[secret KEY]`: as is, as a `repr` of
the string or of its UTF-8 bytes, or as a JSON string from any common encoder (Python's
`json.dumps` either way, `\\/` for `/` as PHP and Java print it, `<>&='` as `\\u003c`...
as Go and Gson do, upper-case hex), so text that is not one JSON document (stderr, JSON
lines, output the cap cut) hides it too; percent-encoded, as in a URL's query (`/` kept or
not, upper- or lower-case hex); of an Authorization value (`Bearer X`), X alone too; of a
value of BASE64_MIN bytes or more, in hex (either case), and base64-encoded after any prefix,
as in HTTP Basic (`Basic base64(user:KEY)`) or a JWT: the characters that hold only the
value's bits, at each of base64's three alignments (the one at either end that shares bits
with the user or the padding stays), in the standard and the URL-safe alphabet, with line
breaks anywhere in them (`base64` and `openssl base64` wrap their lines). Base64's forms
first, then the others, longest first: a value inside a longer one goes with it. Plain string
search (base64's in the text with its line breaks left out): no pattern a script's output
could make slow.
"""

from __future__ import annotations

import functools
import re
import threading
from typing import Mapping
from urllib.parse import quote, quote_plus

_HTML_SAFE = {c: f"\\u{ord(c):04x}" for c in "<>&='"}
_HEX_ESCAPE = re.compile(r"\\u([0-9a-f]{4})")
_PERCENT_HEX = re.compile(r"%[0-9A-F]{2}")
_URL_SAFE = str.maketrans("+/", "-_")  # base64url's alphabet (a JWT's, urlsafe_b64encode's)
_NOT_BREAK = re.compile(r"[^\r\n]")
# an Authorization header's value, whole in the store (`Bearer ghp_...`): its credentials may be quoted alone
_AUTH_VALUE = re.compile(r"(?:bearer|basic|token|bot) +(\S{8,})", re.IGNORECASE)


def redact(text: str, secrets: dict[str, str]) -> str:
    """`text` with every form of each secret's value (as printed, or escaped) as `[secret KEY]`."""
    return _hidden(text, _ordered(tuple(sorted(secrets.items())))) if secrets else text


Forms = tuple[tuple[str, str], ...]  # (form, stand-in), longest first


def _hidden(text: str, ordered: tuple[Forms, Forms]) -> str:
    """`text` with base64's forms (line breaks in them or not) hidden first, then every other form:
    a short value inside another's base64 would have cut it, and left the rest of it to show."""
    plain, broken = ordered
    if broken:
        text = _hide_broken(text, broken) if "\n" in text or "\r" in text else _replaced(text, broken)
    return _replaced(text, plain)


def _replaced(text: str, forms: Forms) -> str:
    for form, standin in forms:
        if form in text:
            text = text.replace(form, standin)
    return text


def _hide_broken(text: str, forms: Forms) -> str:
    """`text` with each form as its stand-in wherever `text` holds it once its line breaks are left out
    (as _replaced() would have, had there been none): the breaks within an occurrence go with it."""
    joined = text.replace("\r", "").replace("\n", "")
    # each occurrence as `\n`, its form's index, `\n`: `joined` holds no `\n`, and an index is shorter
    # than any form (BASE64_MIN bytes make 10 characters), which holds no `\n` either: none is found in it
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
    """Where in `text` the `j`th character of `text` less its line breaks is, from `place`: a place at
    or before it, and the breaks before that place (so each seek counts on from the last one)."""
    at, breaks = place
    while (ahead := j + breaks) > at:  # ends once a stretch counted holds no break
        breaks += text.count("\n", at, ahead) + text.count("\r", at, ahead)
        at = ahead
    char = _NOT_BREAK.search(text, at).start()  # the breaks right before it are not its own
    return char, (char, breaks + char - at)


# the secret values scvd has read, as (source, key, value), each newest last: hidden in its own log lines
# too, where an HTTP library at debug prints a url with its query; and their forms, longest first, which
# every line is checked for. Rebound, never changed in place: keyring lookups run on worker threads
# while a log line is formatted.
_in_logs: tuple[tuple[str, str, str], ...] = ()
_log_forms: tuple[Forms, Forms] | tuple[()] = ()
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
    plain, broken = _ordered(tuple(sorted(secrets.items())))
    return dict(broken + plain)


def _forms(items: tuple[tuple[str, str], ...]) -> tuple[Forms, Forms]:
    """Every form of each value mapped to its stand-in, longest first: those printed as they are, and
    base64's, which line breaks may fall in."""
    plain: dict[str, str] = {}
    broken: dict[str, str] = {}
    for key, value in items:
        for found, encoded in zip((plain, broken), _encodings(value)):
            for form in encoded:
                found.setdefault(form, f"[secret {key}]")
    return _longest_first({f: s for f, s in plain.items() if f not in broken}), _longest_first(broken)


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


def _percent(raw: bytes) -> set[str]:
    """`raw` percent-encoded: as urlencode does (an MCP server's `query` secret in its url), as quote()
    does by default (`/` kept), each with its hex upper- or lower-case (`%2f`, as some encoders write)."""
    quoted = {quote(raw, safe=""), quote_plus(raw, safe=""), quote(raw)}
    return quoted | {_PERCENT_HEX.sub(lambda m: m.group().lower(), q) for q in quoted}


def _encodings(value: str) -> tuple[set[str], set[str]]:
    """The forms of `value` printed as they are, and those a line break may fall in (base64's)."""
    import json  # here: the start, which logs through for_logs(), needs no json before READY=1

    if not value:
        return set(), set()
    raw = value.encode("utf-8", "surrogatepass")  # a value from the environment may hold a surrogate
    out = {value, repr(value)[1:-1], repr(raw)[2:-1], *_percent(raw)}
    broken: set[str] = set()
    if auth := _AUTH_VALUE.fullmatch(value):
        out, broken = (mine | theirs for mine, theirs in zip((out, broken), _encodings(auth.group(1))))
    if len(raw) >= BASE64_MIN:
        out |= {raw.hex(), raw.hex().upper()}
        cores = {_base64_core(raw, shift) for shift in range(3)}
        broken |= cores | {core.translate(_URL_SAFE) for core in cores}
    for dumped in (json.dumps(value)[1:-1], json.dumps(value, ensure_ascii=False)[1:-1]):
        for styled in (dumped, "".join(_HTML_SAFE.get(c, c) for c in dumped)):
            for slashed in (styled, styled.replace("/", "\\/")):
                out.add(slashed)
                out.add(_HEX_ESCAPE.sub(lambda m: "\\u" + m.group(1).upper(), slashed))
    out.discard("")
    return out - broken, broken
