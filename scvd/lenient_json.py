"""JSON that msgspec refuses or cannot finish, read anyway on the error path; no I/O.

Rule: only after msgspec failed. Its decoder stays the fast path (several times
faster than the json module); this is what a peer's frame (socket or MCP host)
falls back to before it is called invalid, and where the id of a frame that
cannot be decoded at all (nested too deeply, cut at the size limit) is found.
"""

from __future__ import annotations

import json
import re
from typing import Any

from .text import well_formed

NOT_JSON = object()
TOO_DEEP_JSON = object()  # JSON nested deeper than the json module reads (Python's recursion limit)


def _not_a_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _finite(literal: str) -> float:
    value = float(literal)
    if value in (float("inf"), float("-inf")):  # 1e400: msgspec would read its id as null
        raise ValueError(f"{literal} is out of range")
    return value


def loads(text: str, *, mend: bool = True) -> Any:
    """`text` decoded by the json module held to JSON: NaN, Infinity and 1e400 (which it reads as
    inf) raise ValueError, as msgspec and every strict peer refuse them; a lone surrogate escape
    (`"\\ud83d"`, what JSON.stringify and json.dumps print for half an emoji, or `"\\udcff"` for a
    file name decoded with surrogateescape) is made U+FFFD, or, without `mend`, left for the
    caller to judge (`text.lone_surrogate` finds it)."""
    value = json.loads(text, parse_constant=_not_a_constant, parse_float=_finite)
    return well_formed(value) if mend else value


def lenient(line: bytes, *, mend: bool = True) -> Any:
    """`line` decoded by `loads`; NOT_JSON when it is not JSON (NaN, Infinity and 1e400 included),
    TOO_DEEP_JSON when it nests too deeply to read (JSON, maybe: not JSON is not what to tell its sender)."""
    try:
        return loads(line.decode("utf-8"), mend=mend)  # UTF-8 only: json.loads would guess UTF-16 or -32 from bytes
    except ValueError:
        return NOT_JSON
    except RecursionError:
        return TOO_DEEP_JSON


# the tokens of JSON text that matter to the outer object's keys: a string (a lone '"': cut
# inside one), a run of opening or of closing brackets, a comma, and anything else in one run
_TOKEN = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|"|[\[{]+|[\]}]+|,|[^"\[\]{},]+')
_ID_VALUE = re.compile(rb'\s*:\s*("[^"\\]*(?:\\.[^"\\]*)*"|-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)\s*[,}]')
# `"id": <string or number>}` ending a line: in a JSON object the last `}` closes the outer one, so
# that id is the outer object's own; the backslashes before its quote must be even (not escaped)
_LAST_ID = re.compile(rb'(\\*)"id"\s*:\s*("(?:[^"\\]|\\.)*"|-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)\s*}\s*\Z')


def top_level_id(text: bytes, key: str = "id") -> Any:
    """The string or number under the outer object's `id` (or other `key`) of `text`, JSON that could
    not be decoded (not JSON, nested too deeply, or cut short at the size limit); None when it has none
    there, or names it twice (a decoder takes the last, which may stand past a cut).

    Only the outer object's keys count: an `id` inside a value is another thing's, and
    answering with it would settle another request. Iterative, so no depth is too deep."""
    return top_level_values(text, (key,))[key]


def top_level_values(text: bytes, keys: tuple[str, ...]) -> dict[str, Any]:
    """top_level_id of each of `keys`, in one pass: linear, ~1-1.5 s a MiB of small alternating brackets."""
    found: dict[str, Any] = dict.fromkeys(keys)
    if not text.lstrip().startswith(b"{"):
        return found  # a batch, or not JSON: there is no one id to answer
    depth, key_next, named, seen = 0, False, {f'"{key}"'.encode(): key for key in keys}, set()
    for token in _TOKEN.finditer(text):
        first, size = token.group()[:1], token.end() - token.start()
        if first == b'"':
            if size == 1:
                break  # cut inside a string
            if depth == 1 and key_next:
                if (key := named.get(token.group())) is not None:
                    value = _ID_VALUE.match(text, token.end())
                    found[key] = None if key in seen or not value else lenient(value.group(1))
                    seen.add(key)
                key_next = False  # its value follows
        elif first in b"[{":
            depth += size
            key_next = depth == 1
        elif first in b"]}":
            depth -= size
            if depth <= 0:
                break  # the outer object ended
        elif first == b"," and depth == 1:
            key_next = True
    return {key: value if isinstance(value, (str, int, float)) else None for key, value in found.items()}


def edge_values(head: bytes, tail: bytes, keys: tuple[str, ...]) -> dict[str, Any]:
    """top_level_values of a line too long to scan whole, from its first and last bytes: its `id` is
    the one ending `tail` if one does (where the TypeScript SDK writes it, and where a decoder finds
    it when named twice), else the outer object's in `head`; each other key's, in `head` only."""
    if not head.lstrip().startswith(b"{"):
        return dict.fromkeys(keys)  # a batch, or not JSON: no one id to answer
    last = _LAST_ID.search(tail) if "id" in keys else None
    if last is None or len(last.group(1)) % 2:
        return top_level_values(head, keys)
    found = top_level_values(head, tuple(key for key in keys if key != "id"))
    value = lenient(last.group(2))
    found["id"] = value if isinstance(value, (str, int, float)) else None  # not 1e400, which JSON-RPC peers refuse
    return found
