"""TOML text read as tomllib reads it, with nesting too deep for it refused as invalid TOML.

tomllib parses arrays and inline tables by recursion: about 1,000 levels (`a = [[[...]]]`, 2 KB)
raise RecursionError, which no reader of a file expects of a parser (it went uncaught: a traceback,
`internal`). Here it is a TOMLDecodeError like any other malformed file, so each reader's own
message, which names its file, says it. Imported where tomllib would be: at first use.
"""

from __future__ import annotations

import tomllib
from typing import Any

NESTED_TOO_DEEPLY = "arrays or inline tables nested too deeply to read"


class NestedTooDeeply(tomllib.TOMLDecodeError):
    """The text nests deeper than tomllib's recursion reaches; it says no position (tomllib has none)."""

    def __init__(self) -> None:
        # ValueError's own: Python 3.14's TOMLDecodeError wants the document and a position
        ValueError.__init__(self, NESTED_TOO_DEEPLY)


def loads(text: str) -> dict[str, Any]:
    """tomllib.loads(text); TOMLDecodeError for text nested too deeply, as for any malformed text."""
    try:
        return tomllib.loads(text)
    except RecursionError:
        raise NestedTooDeeply() from None


def described(exc: tomllib.TOMLDecodeError) -> str:
    """What `exc` says with no text of the file in it (a decoder message may quote a character of a
    key or value, a token's): `at line 3, column 7`, or that it nests too deeply."""
    if isinstance(exc, NestedTooDeeply):
        return NESTED_TOO_DEEPLY
    _, found, where = str(exc).rpartition("(at ")
    return f"at {where.rstrip(')')}" if found else "at a place tomllib does not say"
