"""Text a person will read: escape what could fool a terminal or a chat client.

An agent chooses commands, prompts and file contents; shown raw, a carriage
return, an ANSI escape or a bidi override could repaint what an approver sees,
and an invisible character (a zero-width space, a Hangul filler) could make an
argument look empty or two paths look equal.
"""

from __future__ import annotations

import re
import time
from typing import Any, Callable

import msgspec


def well_formed(value: Any) -> Any:
    """JSON-like data whose strings (keys too) are all valid Unicode: a surrogate pair split in two
    joined, a lone surrogate made U+FFFD. Python's json module decodes `"\\udce9"` (what
    `json.dumps(os.listdir())` prints for a Latin-1 file name) to one, which no UTF-8 encoder takes.
    A loop, not a recursion: data nested deeper than Python's recursion limit is mended too."""
    todo: list[tuple[Any, Any]] = []
    top = _mended(value, todo)
    while todo:
        source, copy = todo.pop()
        if isinstance(copy, dict):
            for key, item in source.items():
                copy[_mended(key, todo) if isinstance(key, str) else key] = _mended(item, todo)
        else:
            copy.extend([_mended(item, todo) for item in source])
    return top


def _mended(value: Any, todo: list[tuple[Any, Any]]) -> Any:
    """`value` as well_formed gives it, but a dict or list: its copy, left empty and queued in `todo`."""
    if isinstance(value, str):
        return value if _unicode(value) else value.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    if isinstance(value, dict):
        copy: Any = {}
    elif isinstance(value, (list, tuple)):
        copy = []
    else:
        return value
    todo.append((value, copy))
    return copy


def lone_surrogate(value: Any, where: str = "") -> tuple[str, int, int] | None:
    """The first string of JSON-like `value` (a key too) that holds a lone surrogate: (where, as
    `paths[2]` or `env.NAME`; the surrogate's code point; its character index), or None. A loop, as
    well_formed is; the strings in the order a walk meets them, a key before its value."""
    todo = [(where, value)]
    while todo:
        where, value = todo.pop()
        if isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError as exc:
                return where, ord(value[exc.start]), exc.start
            continue
        items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
        inside = []  # what may hold one: the walk goes on there
        for key, item in items:
            if isinstance(key, str) and not _unicode(key):
                inside.append((f"{where or '(top level)'} (a key)", key))
            if isinstance(item, (dict, list)) or isinstance(item, str) and not _unicode(item):
                inside.append((f"{where}[{key}]" if isinstance(key, int) else f"{where}.{key}" if where else key, item))
        todo.extend(reversed(inside))  # the first on top
    return None


def _unicode(text: str) -> bool:
    """Whether `text` is valid Unicode (no lone surrogate); ASCII is known at once."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def json_bytes(encode: Callable[[Any], bytes], value: Any) -> bytes:
    """`encode(value)`, or, when a string in it holds a lone surrogate, the same with those made valid."""
    try:
        return encode(value)
    except UnicodeEncodeError:
        return encode(well_formed(msgspec.to_builtins(value)))


# Unicode's Default_Ignorable_Code_Point (DerivedCoreProperties.txt, 14.0; unicodedata lacks the
# property): drawn as nothing. The Cf ones among them isprintable() already refuses.
DEFAULT_IGNORABLE = (
    (0x00AD, 0x00AD), (0x034F, 0x034F), (0x061C, 0x061C), (0x115F, 0x1160), (0x17B4, 0x17B5),
    (0x180B, 0x180F), (0x200B, 0x200F), (0x202A, 0x202E), (0x2060, 0x206F), (0x3164, 0x3164),
    (0xFE00, 0xFE0F), (0xFEFF, 0xFEFF), (0xFFA0, 0xFFA0), (0xFFF0, 0xFFF8), (0x1BCA0, 0x1BCA3),
    (0x1D173, 0x1D17A), (0xE0000, 0xE0FFF),
)
# letters and symbols not in that set that a font draws blank: braille blank, null notehead, Khitan filler
BLANK_LOOKING = "\u2800\U0001d159\U00016fe4"
INVISIBLE = re.compile("[%s%s]" % ("".join(f"\\U{lo:08x}-\\U{hi:08x}" for lo, hi in DEFAULT_IGNORABLE),
                                   BLANK_LOOKING))
VARIATION = "\ufe0e\ufe0f"  # text or emoji presentation: part of an emoji (a red heart is U+2764 U+FE0F)
ZWJ = "\u200d"  # joins emoji into one (a woman, ZWJ, a laptop: a woman technologist)
KEYCAP = "\u20e3"


def plain(text: str) -> bool:
    """Whether `text` shows as it is: nothing to escape (no control, format or invisible character)."""
    return text.isprintable() and INVISIBLE.search(text) is None


def printable(text: str, keep: str = "\n\t") -> str:
    """`text` with control, format and invisible characters escaped (`\\x1b`, `\\u202e`, `\\u3164`),
    except those in `keep`; a variation selector or zero-width joiner inside an emoji stays."""
    if plain(text):
        return text
    return "".join(c if c in keep or _shown(text, i, c) else ascii(c)[1:-1] for i, c in enumerate(text))


def _shown(text: str, i: int, c: str) -> bool:
    """Whether `c`, at `i` in `text`, draws as itself: printable and visible, or part of an emoji."""
    if c.isprintable() and not INVISIBLE.match(c):
        return True
    before = text[i - 1] if i else ""
    if c in VARIATION:  # after an emoji, or in a keycap (1, U+FE0F, U+20E3)
        return _emoji(before) or (before != "" and before in "0123456789#*" and text[i + 1:i + 2] == KEYCAP)
    if c == ZWJ:  # between two emoji, the first maybe with its variation selector
        if before and before in VARIATION and i >= 2:
            before = text[i - 2]
        return _emoji(before) and _emoji(text[i + 1:i + 2])
    return False


def _emoji(c: str) -> bool:
    """An emoji, near enough: a visible symbol, or a skin tone modifier."""
    import unicodedata  # here: only a variation selector or a joiner gets this far (~0.1 MiB)

    return len(c) == 1 and ((unicodedata.category(c) == "So" and c not in BLANK_LOOKING)
                            or "\U0001f3fb" <= c <= "\U0001f3ff")



NAME_SHOWN_CHARS = 64  # of a client's name (hello's, any length) where it says who asks or decides


def quoted_name(name: str) -> str:
    """A peer's name in double quotes, its `"` and `\\` escaped as printable() escapes the rest, and
    `...` past the quotes when cut: no name can close the quotes early and pass for what follows
    (`"scvctl (pid 1, uid 1000)" (pid 4242, uid 1000)`)."""
    shown = name[:NAME_SHOWN_CHARS].replace("\\", "\\\\").replace('"', '\\"')
    return f'"{printable(shown, keep="")}"' + ("..." if len(name) > NAME_SHOWN_CHARS else "")


def cut_name(name: str) -> str:
    """A peer's name as data that lists it (sessions.list): its first NAME_SHOWN_CHARS, `...` when cut."""
    return name if len(name) <= NAME_SHOWN_CHARS else name[:NAME_SHOWN_CHARS] + "..."


def printable_data(value: Any) -> Any:
    """`printable()` applied to every string in JSON-like data (keys too)."""
    if isinstance(value, str):
        return printable(value)
    if isinstance(value, dict):
        return {printable_data(k): printable_data(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [printable_data(v) for v in value]
    return value


SHOWN_CHARS = 2000  # of a command, prompt or arguments that a summary shows; details carry them whole


def cut_note(more: int) -> str:
    """What a summary's first line says when it does not show everything: the rest is in details."""
    return f"[cut: {more:,} more chars; see details]"


def excerpt(text: str, limit: int = SHOWN_CHARS) -> tuple[str, str]:
    """(`text` cut to `limit` characters, " " + the cut note or ""): the note goes on the summary's first line."""
    more = len(text) - limit
    if more <= 0:
        return text, ""
    return text[:limit] + " ...", " " + cut_note(more)


def end_of(text: str) -> str:
    """`line L, column C` of the end of `text`, as an editor shows it: where a parser that ran out
    of input (an unclosed bracket or string) stopped, which its message does not say."""
    return f"line {text.count(chr(10)) + 1}, column {len(text) - text.rfind(chr(10))}"


def toml_said(message: str, text: str) -> str:
    """tomllib's error `message` for `text`, its `(at end of document)` (an unclosed `[`, `{` or
    string) with the line and column where that is, and a key it names as a Python tuple
    (`('approvals',)`) as TOML writes it; a table declared twice says what to do about it."""
    twice = _DECLARED_TWICE.fullmatch(message)
    if twice and _dotted(twice[1]) is not None:
        return _declared_twice(twice[1], int(twice[2]), text)
    message = _KEY_TUPLE.sub(lambda m: f"`{_dotted(m[0]) or m[0]}`", message)
    return message.replace("(at end of document)", f"(at end of document: {end_of(text)})")


# a Python str's repr: quoted as '...' or "...", backslash escapes inside (a key holding both quotes)
_PY_STR = r"""(?:'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")"""
_KEY_TUPLE = re.compile(rf"\({_PY_STR}(?:, {_PY_STR})*,?\)")  # tomllib's key: a tuple's repr
_DECLARED_TWICE = re.compile(rf"Cannot declare ({_KEY_TUPLE.pattern}) twice \(at line (\d+), column \d+\)")
_HEADER = re.compile(r"[ \t]*\[(?!\[)(.*?)\][ \t]*(?:#.*)?")  # a `[table]` line; `[[array]]` is none


def _declared_twice(key_tuple: str, line: int, text: str) -> str:
    """tomllib's `Cannot declare KEY twice` at `line` (always by a `[KEY]` header): merge two such
    headers; a table first defined otherwise (`[[KEY]]`, an inline table, dotted keys) is no table
    to merge with."""
    import ast  # only for a refusal

    key, dotted = ast.literal_eval(key_tuple), _dotted(key_tuple)
    if any(_header_key(above) == key for above in text.splitlines()[:line - 1]):
        return f"[{dotted}] is declared twice, the second time at line {line}: merge the two into one"
    return (f"`{dotted}` is defined twice, the second time at line {line} by `[{dotted}]`: put its keys where it is "
            f"first defined (an array of tables `[[{dotted}]]`, an inline table or dotted keys)")


def _header_key(line: str) -> tuple[str, ...] | None:
    """The key of a `[table]` header `line`, as tomllib reads it (`[ "a" . b ]`: ('a', 'b')); None for another line."""
    import tomllib  # only for a refusal

    header = _HEADER.fullmatch(line)
    try:
        table = tomllib.loads(f"[{header[1]}]") if header else None
    except tomllib.TOMLDecodeError:
        return None
    key: list[str] = []
    while isinstance(table, dict) and len(table) == 1:
        name, table = next(iter(table.items()))
        key.append(name)
    return tuple(key) or None


def _dotted(key_tuple: str) -> str | None:
    """`('mcp', 'servers', 'my fs')` as TOML writes the key: mcp.servers."my fs"; None for what
    Python does not read back (the message is then shown as tomllib wrote it)."""
    import ast  # only for a refusal

    from .toml_write import toml_key

    try:
        parts = ast.literal_eval(key_tuple)
    except (ValueError, SyntaxError):
        return None
    return ".".join(toml_key(part) for part in parts)


def cut_middle(text: str, head: int, tail: int, dropped: int = 0) -> str:
    """`text` whole when it is at most `head` + `tail` chars, else its first `head` and last `tail`
    chars with how many were cut between them (a message's start says what, its end often why);
    `dropped` chars already taken out of its middle are counted too."""
    more = len(text) - head - tail
    if more <= 0:
        return text
    return f"{text[:head]} ... [cut: {more + dropped:,} chars]" + (f" ... {text[-tail:]}" if tail else "")


def printable_cut(text: str, head: int, tail: int) -> str:
    """cut_middle(printable(text), head, tail), escaping only the ends it keeps: printable() goes through
    a text char by char in Python (8 MiB took 2 s), and a peer's message may be 64 MiB. The middle it
    drops unescaped counts its chars as they came."""
    if len(text) <= head + tail + 3:
        return cut_middle(printable(text), head, tail)
    # a char's escape depends on its neighbours (an emoji's joiner): one more after the head, two before the tail
    first, last = printable(text[:head + 1]), printable(text[-tail - 2:])
    return cut_middle(first + last, head, tail, dropped=len(text) - head - tail - 3)


def format_request(a: Any) -> str:
    """A pending request (`approval.requested` or an `approvals.list` entry) whole, in lines a person reads."""
    import json  # here: the daemon's start, which logs with printable(), needs no json

    header = (f"[{a.approval_id}] {a.tool} ({a.risk}{', sandboxed' if a.sandboxed else ''}) "
              f"in {a.workspace}")
    lines = [header, *(f"  {line}" for line in a.summary.split("\n"))]
    if getattr(a, "always_ask", None):
        lines.append(f"  always asks, approved once only: {a.always_ask}")
    for key, value in (a.details or {}).items():
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        if "\n" in text:  # a block, each line marked, so its end is plain to see
            count = len(text.splitlines())  # as the summary counts them ("1 line" for "hi\n")
            tail = ", and a newline at the end" if text.endswith("\n") else ""
            lines.append(f"  {key}: ({len(text):,} chars, {count} line{'s' if count != 1 else ''}{tail})")
            lines.extend(f"    | {line}" for line in text.split("\n"))
        else:
            lines.append(f"  {key}: {text}")
    lines.append(f"  requested by {getattr(a, 'requester', '') or '?'} in session {a.session}, call {a.call_id}"
                 + (f"; expires {_clock(a.expires_at)}" if a.expires_at else ""))
    # the header and the last line hold a peer's text (a workspace path, a client's name) that
    # is one line: a line break in it would start what looks like another request
    lines[0], lines[-1] = printable(lines[0], keep=""), printable(lines[-1], keep="")
    return "\n".join(printable(line) for line in lines)


def _clock(at: float) -> str:
    """`at` (Unix seconds) as a local time of day, with its date unless it is today (a large
    approvals.timeout_seconds puts it days ahead); past what the platform's time_t holds (a huge
    one puts it beyond year 9999), how far ahead it is instead."""
    try:
        when = time.localtime(at)
        today = when[:3] == time.localtime()[:3]
        return time.strftime("%H:%M:%S" if today else "%Y-%m-%d %H:%M:%S", when)
    except (OverflowError, OSError, ValueError):
        return f"in {at - time.time():.3g} s"
