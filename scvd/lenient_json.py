"""JSON that msgspec refuses, read anyway on the error path; no I/O.

Rule: only after msgspec failed. Its decoder stays the fast path (several times
faster than the json module); this is what a peer's frame (socket or MCP host)
falls back to before it is called invalid.
"""

from __future__ import annotations

import json
from typing import Any

from .text import well_formed

NOT_JSON = object()


def _not_a_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _finite(literal: str) -> float:
    value = float(literal)
    if value in (float("inf"), float("-inf")):  # 1e400: msgspec would read its id as null
        raise ValueError(f"{literal} is out of range")
    return value


def lenient(line: bytes) -> Any:
    """`line` decoded by the json module, which takes a lone surrogate escape (`"\\ud83d"`, what
    JSON.stringify and json.dumps print for half an emoji, or `"\\udcff"` for a file name decoded
    with surrogateescape), made U+FFFD; NOT_JSON otherwise (NaN, Infinity and 1e400 included)."""
    try:
        # UTF-8 only: json.loads would guess UTF-16 or -32 from the first bytes of `bytes`
        return well_formed(json.loads(line.decode("utf-8"), parse_constant=_not_a_constant, parse_float=_finite))
    except (ValueError, RecursionError):
        return NOT_JSON
