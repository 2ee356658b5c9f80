"""JSON Schema `pattern`s matched with a time bound, the interpreter free meanwhile.

jsonschema matches `pattern` and `patternProperties` (and through them `additionalProperties`
and `unevaluatedProperties`) with `re.search`, which holds the GIL for the whole match and has
no time bound: a pattern that backtracks catastrophically (in a tool.json, or in the schema a
remote MCP server sends) against a model's argument froze every client of scvd, SIGTERM
unanswered. Those searches go through the `regex` package here, with `timeout` and
`concurrent=True` (the GIL released while it matches): a slow one raises TimeoutError after
MATCH_SECONDS, on the checking thread, and the loop runs on meanwhile. A pattern is read as JSON
Schema says, as an ECMA-262 one (scvd/ecma_regex.py: `$` the end only, `\\d` ASCII digits, ...).

jsonschema has no hook for its regex engine: `install()` gives its three modules that call
`re.search` (2019-09's `unevaluatedProperties` has its own) this module's stand-in for `re`
(everything but `search` is `re`'s own). A
jsonschema that moved those calls elsewhere fails tests/integration/test_script_tools.py's
slow-pattern test, not silently. Imported only with jsonschema (a tool.json, an MCP server).
"""

from __future__ import annotations

import re
from typing import Any

from .ecma_regex import translate

MATCH_SECONDS = 0.5  # per search: a pattern's match on a model's argument takes microseconds


class _BoundedRe:
    """`re`, but for a `search` that ends in TimeoutError after MATCH_SECONDS."""

    def search(self, pattern: Any, string: str, flags: int = 0) -> Any:
        import regex

        if isinstance(pattern, str):  # else regex refuses it, as re did
            pattern = translate(pattern)
        return regex.search(pattern, string, flags, timeout=MATCH_SECONDS, concurrent=True)

    def __getattr__(self, name: str) -> Any:
        return getattr(re, name)


def install() -> None:
    """Have jsonschema match patterns with the time bound (idempotent)."""
    from jsonschema import _keywords, _legacy_keywords, _utils

    for module in (_keywords, _legacy_keywords, _utils):
        if not isinstance(module.re, _BoundedRe):
            module.re = _BoundedRe()
