"""Secret values taken out of text scvd shows: a script's output, an MCP server's result, error or stderr.

Rule: every form a value may be printed in reads `[secret KEY]`: as is, as a `repr` of
the string or of its UTF-8 bytes, or as a JSON string from any common encoder (Python's
`json.dumps` either way, `\\/` for `/` as PHP and Java print it, `<>&='` as `\\u003c`...
as Go and Gson do, upper-case hex), so text that is not one JSON document (stderr, JSON
lines, output the cap cut) hides it too; percent-encoded, as in a URL's query; of an Authorization value (`Bearer X`), X alone
too; base64-encoded after any prefix, as in HTTP Basic (`Basic base64(user:KEY)`): the
characters that hold only the value's bits, at each of base64's three alignments (the one
at either end that shares bits with the user or the padding stays). Longest forms
first: a value inside a longer one goes with it. Plain string replacement: no pattern a
script's output could make slow.
"""

from __future__ import annotations

import functools
import re
import threading
from typing import Mapping
from urllib.parse import quote, quote_plus

_HTML_SAFE = {c: f"\\u{ord(c):04x}" for c in "<>&='"}
_HEX_ESCAPE = re.compile(r"\\u([0-9a-f]{4})")
# an Authorization header's value, whole in the store (`Bearer ghp_...`): its credentials may be quoted alone
_AUTH_VALUE = re.compile(r"(?:bearer|basic|token|bot) +(\S{8,})", re.IGNORECASE)


def redact(text: str, secrets: dict[str, str]) -> str:
    """`text` with every form of each secret's value (as printed, or escaped) as `[secret KEY]`."""
    return _hidden(text, _ordered(tuple(sorted(secrets.items())))) if secrets else text


def _hidden(text: str, ordered: tuple[tuple[str, str], ...]) -> str:
    for form, standin in ordered:
        if form in text:
            text = text.replace(form, standin)
    return text


# the secret values scvd has read, as (source, key, value), each newest last: hidden in its own log lines
# too, where an HTTP library at debug prints a url with its query; and their forms, longest first, which
# every line is checked for. Rebound, never changed in place: keyring lookups run on worker threads
# while a log line is formatted.
_in_logs: tuple[tuple[str, str, str], ...] = ()
_log_forms: tuple[tuple[str, str], ...] = ()
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
    return dict(_ordered(tuple(sorted(secrets.items()))))


def _forms(items: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    """Every form of each value, mapped to its stand-in, longest first."""
    found: dict[str, str] = {}
    for key, value in items:
        for form in _encodings(value):
            found.setdefault(form, f"[secret {key}]")
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


def _encodings(value: str) -> set[str]:
    import json  # here: the start, which logs through for_logs(), needs no json before READY=1

    if not value:
        return set()
    raw = value.encode("utf-8", "surrogatepass")  # a value from the environment may hold a surrogate
    out = {value, repr(value)[1:-1], repr(raw)[2:-1]}
    out |= {quote(raw, safe=""), quote_plus(raw, safe="")}  # an MCP server's `query` secret in its url
    if auth := _AUTH_VALUE.fullmatch(value):
        out |= _encodings(auth.group(1))
    if len(raw) >= BASE64_MIN:
        out |= {_base64_core(raw, shift) for shift in range(3)}
    for dumped in (json.dumps(value)[1:-1], json.dumps(value, ensure_ascii=False)[1:-1]):
        for styled in (dumped, "".join(_HTML_SAFE.get(c, c) for c in dumped)):
            for slashed in (styled, styled.replace("/", "\\/")):
                out.add(slashed)
                out.add(_HEX_ESCAPE.sub(lambda m: "\\u" + m.group(1).upper(), slashed))
    out.discard("")
    return out
