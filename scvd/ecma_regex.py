"""JSON Schema `pattern`s, which are ECMA-262 regular expressions, rewritten to mean the same in `regex`.

Python's syntax (the regex package's too) reads an ECMA pattern alike, but some tokens take more
there, so a model's argument passed a pattern its author wrote to refuse it: `$` matched before a
final newline too (`^[a-z]+$` took "main\\n", a newline on a script's command line), `\\d`, `\\w`
and `\\b` took any script's digits and letters (`^\\d+$` took "١٢٣"), `.` took \\r, U+2028 and
U+2029, and `\\s` took \\x1c-\\x1f and U+0085 but not U+FEFF. `translate()` writes those tokens as
ECMA-262 reads them without flags (as JSON Schema does): `$` the end of the text only, `\\d`
[0-9], `\\w` [A-Za-z0-9_], `\\b` between those and the rest, `\\s` ECMA's own list of spaces and
line ends (Unicode's, so not the ASCII flag's five), `.` anything but a line end; in a character
class as well (`[^\\W]`, which no single class of the regex package's syntax holds, becomes
"not a non-word character"). JSON Schema reads a pattern with ECMA's `u` flag, whose escapes the
regex package spells otherwise, or not at all, are written its way: `\\k<name>` (a named group's
backreference) `(?P=name)`, `\\u{1F600}` and a surrogate pair `\\uD83D\\uDE00` one code point
`\\U0001f600`, `\\cJ` the control character `\\x0a`. ES2025's scoped modifiers `(?i:...)`,
`(?m:...)`, `(?s:...)` (`(?i-s:...)`, ...) change what `^`, `$` and `.` mean inside them, as ECMA
says (`m`: at any of its four line ends too). Named groups `(?<name>...)` and property escapes
`\\p{L}` are the regex package's syntax too. Everything else is left as written: a pattern the
regex package cannot read fails as it did.

Two things ECMA-262 has no use for say the author wrote Python (scvd's script tools took Python's
reading until then), and are read as Python reads them: a pattern with a global inline flag
(`(?s)`, `(?m)`, `(?i)`), or a flag ECMA has not (`(?x:...)`, `(?a)`), is matched as written,
since its flags change what `.`, `^` and `$` mean (`(?s)^.{1,200}$` takes "a\\nb"); and a `]`
right after `[` or `[^` is a literal (`^[^]]+$`), ECMA's `[]` (nothing) and `[^]` (any character)
only where Python's reading leaves that class unclosed.
"""

from __future__ import annotations

import functools
import re

SHORTHANDS = {  # ECMA-262's \d, \w and \s, as a character class's contents
    "d": "0-9",
    "w": "A-Za-z0-9_",
    "s": r"\t\n\v\f\r \xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff",
}
BOUNDARIES = {"b": r"(?a:\b)", "B": r"(?a:\B)"}  # the ASCII flag's \w is ECMA's; inside a class \b is a backspace
LINE_ENDS = r"\n\r\u2028\u2029"
OUTSIDE = {"$": r"\Z", ".": f"[^{LINE_ENDS}]"}
SCOPED = {"s": {".": "(?s:.)"}, "m": {"^": f"(?<![^{LINE_ENDS}])", "$": f"(?![^{LINE_ENDS}])"}}  # at a line end too
ANY, NOTHING = "(?s:.)", "(?!)"
Token = tuple[str, bool]  # a class member's text, and whether it stands for a shorthand
FLAGS = re.compile(r"\(\?(?:[aiLmsux]+(?:-[imsx]+)?|-[imsx]+)[:)]")  # Python's inline flags, global or scoped
MODIFIERS = re.compile(r"\(\?([ims]*)(?:-([ims]*))?:")  # ES2025's: scoped, over i, m and s only
LONG_ESCAPES = re.compile(  # the u flag's escapes of more than one character, bar \p{...}, which regex reads
    r"\\(?:k<(\w+)>|u\{([0-9A-Fa-f]+)\}|u([Dd][89ABab][0-9A-Fa-f]{2})\\u([Dd][C-Fc-f][0-9A-Fa-f]{2})|c([A-Za-z]))")


@functools.lru_cache(maxsize=1024)  # the same few patterns, for every argument of every call
def translate(pattern: str) -> str:
    """`pattern` read as ECMA-262 reads it, in the regex package's syntax; as written if it has Python's flags."""
    out, i = [], 0
    flags, scopes = "", []  # the modifiers in force, and those outside each open group
    while i < len(pattern):
        char = pattern[i]
        if char == "(":
            scoped = MODIFIERS.match(pattern, i)
            if scoped is None and FLAGS.match(pattern, i):  # Python's: its flags say what `.` and `$` mean
                return pattern
            scopes.append(flags)
            if scoped is not None:
                added, removed = scoped[1], scoped[2] or ""
                flags = "".join(f for f in "ims" if (f in flags or f in added) and f not in removed)
                out.append(scoped[0])
                i = scoped.end()
                continue
        elif char == ")" and scopes:
            flags = scopes.pop()
        if char == "\\" and i + 1 < len(pattern):
            text, i = _long(pattern, i, backreference=True) or (_escape(pattern[i + 1]), i + 2)
            out.append(text)
        elif char == "[":
            text, i = _class(pattern, i + 1)
            out.append(text)
        else:
            out.append(_scoped(char, flags))
            i += 1
    return "".join(out)


def _scoped(char: str, flags: str) -> str:
    for flag in flags:
        if char in SCOPED.get(flag, {}):
            return SCOPED[flag][char]
    return OUTSIDE.get(char, char)


def _long(pattern: str, i: int, *, backreference: bool) -> tuple[str, int] | None:
    """The escape at `i` if it is one of LONG_ESCAPES, in the regex package's syntax, and where the pattern
    goes on; None if it is not (nor, for a `\\k<name>` in a class, ECMA's)."""
    found = LONG_ESCAPES.match(pattern, i)
    if found is None:
        return None
    name, point, lead, trail, letter = found.groups()
    if name is not None:
        return (f"(?P={name})", found.end()) if backreference else None
    if letter is not None:
        return f"\\x{ord(letter) % 32:02x}", found.end()
    if point is None:  # a surrogate pair, which the u flag reads as the one code point it encodes
        point = f"{0x10000 + (int(lead, 16) - 0xD800) * 0x400 + int(trail, 16) - 0xDC00:x}"
    code = int(point, 16)
    return (f"\\U{code:08x}", found.end()) if code <= 0x10FFFF else None


def _escape(char: str) -> str:
    if char.lower() in SHORTHANDS:
        return ("[^{}]" if char.isupper() else "[{}]").format(SHORTHANDS[char.lower()])
    return BOUNDARIES.get(char, "\\" + char)


def _class(pattern: str, start: int) -> tuple[str, int]:
    """The class opened just before `start`, and where the pattern goes on after it; a `]` first is a
    literal, as Python reads it."""
    negated = pattern.startswith("^", start)
    first = start + negated
    read = _read(pattern, first + 1, [("\\]", False)]) if pattern.startswith("]", first) else None
    read = read or _read(pattern, first, [])  # ECMA's `[]` and `[^]` only where Python's class is unclosed
    if read is None:  # unterminated: as written, for the regex package to refuse
        return pattern[start - 1:], len(pattern)
    tokens, apart, end = read
    return _written(_members(tokens), apart, negated), end


def _read(pattern: str, i: int, tokens: list[Token]) -> tuple[list[Token], list[str], int] | None:
    """A class's members from `i` on, after `tokens`, and where it closes; None if it does not."""
    apart: list[str] = []  # \D, \W, \S: no class holds one beside other members, so an alternative each
    while i < len(pattern) and pattern[i] != "]":
        char = pattern[i]
        if char == "\\" and (long := _long(pattern, i, backreference=False)) is not None:
            tokens.append((long[0], False))
            i = long[1]
        elif char == "\\" and i + 1 < len(pattern):
            escaped = pattern[i + 1]
            if escaped.lower() in SHORTHANDS:
                tokens.append((SHORTHANDS[escaped] if escaped.islower() else "", True))
                if escaped.isupper():
                    apart.append(f"[^{SHORTHANDS[escaped.lower()]}]")
            else:
                tokens.append(("\\" + escaped, False))
            i += 2
        else:
            tokens.append(("\\" + char if char in "[^" else char, False))
            i += 1
    return (tokens, apart, i + 1) if i < len(pattern) else None


def _members(tokens: list[Token]) -> str:
    """A class's contents; a `-` beside a shorthand is itself (ECMA), not a range to or from it."""
    out = []
    for n, (text, shorthand) in enumerate(tokens):
        beside = (n > 0 and tokens[n - 1][1]) or (n + 1 < len(tokens) and tokens[n + 1][1])
        out.append("\\-" if text == "-" and beside else text)
    return "".join(out)


def _written(members: str, apart: list[str], negated: bool) -> str:
    if not apart:
        if not members:
            return ANY if negated else NOTHING
        return f"[{'^' if negated else ''}{members}]"
    either = "|".join(([f"[{members}]"] if members else []) + apart)
    return f"(?:(?!{either}){ANY})" if negated else f"(?:{either})"
