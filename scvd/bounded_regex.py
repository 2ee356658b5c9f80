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

A schema's own check (`check_schema`, at a tool.json's load) compiled its patterns with `re`,
which refused ECMA-262's `(?<name>...)` and `\\p{L}`: `format_checker()` has it read them as
they are matched, and `unreadable()` says what in one the regex package cannot read.
"""

from __future__ import annotations

import re
from typing import Any

from .ecma_regex import translate

MATCH_SECONDS = 0.5  # per search: a pattern's match on a model's argument takes microseconds
PROPERTY = re.compile(r"\\[pP]\{[^}]*\}")  # a property escape, `\p{L}`, `\P{Script=Greek}`


def search(pattern: Any, string: str, flags: int = 0) -> Any:
    """`regex.search` of `pattern` read as ECMA-262 reads it, ending in TimeoutError after MATCH_SECONDS."""
    import regex

    if isinstance(pattern, str):  # else regex refuses it, as re did
        pattern = translate(pattern)
    return regex.search(pattern, string, flags, timeout=MATCH_SECONDS, concurrent=True)


class _BoundedRe:
    """`re`, but for a `search` that ends in TimeoutError after MATCH_SECONDS."""

    search = staticmethod(search)

    def __getattr__(self, name: str) -> Any:
        return getattr(re, name)


def install() -> None:
    """Have jsonschema match patterns with the time bound (idempotent)."""
    from jsonschema import _keywords, _legacy_keywords, _utils

    for module in (_keywords, _legacy_keywords, _utils):
        if not isinstance(module.re, _BoundedRe):
            module.re = _BoundedRe()


def unreadable(pattern: str) -> str | None:
    """What in `pattern` the regex package cannot read, as scvd matches it, and what to write instead;
    None when it reads it."""
    said = _refusal(translate(pattern))  # its position is in the translated pattern: the token is named instead
    if said is None:
        return None
    if said.startswith("unknown property"):
        token = next((found[0] for found in PROPERTY.finditer(pattern) if _refusal(found[0])), r"\p{...}")
        return (f"`{token}` is no Unicode property the regex package knows; name one it knows (`\\p{{L}}`, "
                r"`\p{Lu}`, `\p{Script=Greek}`, `\p{Alphabetic}`) or list the characters in a class")
    if said == r"bad escape \q":
        return (r"`\q{...}` is ECMA's v flag's, which JSON Schema does not use; write its strings as "
                "alternatives, (?:ab|c)")
    return f"the regex package says \"{said}\"; write it as ECMA-262 (with its u flag) reads it, as JSON Schema does"


def _refusal(pattern: str) -> str | None:
    """The regex package's message refusing `pattern`, without its position; None if it reads it."""
    import regex

    try:
        regex.compile(pattern)
    except regex.error as exc:
        return exc.msg
    return None


def format_checker(validator: Any) -> Any:
    """The `validator` class's format checker, but for `regex` (a schema's `pattern`s, checked by
    `check_schema`), read as it is matched; a ValueError saying what cannot be read is its cause."""
    from jsonschema import FormatChecker

    checker = FormatChecker(())
    for name, (check, raises) in validator.FORMAT_CHECKER.checkers.items():
        checker.checks(name, raises)(check)
    checker.checks("regex", raises=ValueError)(_readable)
    return checker


def _readable(pattern: object) -> bool:
    if isinstance(pattern, str) and (why := unreadable(pattern)) is not None:
        raise ValueError(why)
    return True
