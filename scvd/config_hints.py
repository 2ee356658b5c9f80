"""What to write instead of a configuration value of the wrong type, said from the field's type in
the schema (the Structs config.py passes in): one wording for config.toml's type and parse errors,
its SCVD_* overrides, and secrets.toml's parse errors. It knows no key by name. A value in a table
of names (an MCP server's env or headers) is never repeated: that is where tokens get pasted; nor
one that reads like a credential (a token's body, a URL with a query or a password, an argument
after `--api-key`): the hint goes to the log and `scvctl status`.
"""

from __future__ import annotations

import re
import shlex
import tomllib
from typing import Any, Callable

import msgspec

from . import validation_text as vt
from .secret_like import CREDENTIAL_NAME_RE, TOKEN_RUN_RE
from .toml_write import toml_value

_EXPECTED = re.compile(r"Expected `(\w+)[^`]*`, got `(\w+)`")
_BOUND = re.compile(r"Expected `(?:int|float)` [<>]=? \S+")  # msgspec's word for a number out of its Meta bounds
_WHERE = re.compile(r"\(at line (\d+), column \d+\)")
_HEADER = re.compile(r"\s*\[\s*([^\[\]]+?)\s*\]\s*(?:#.*)?")
# `key = value` with a bare key or dotted bare keys, the value to a comment: what a person types most
_ASSIGNMENT = re.compile(r"\s*([A-Za-z0-9_\-]+(?:\s*\.\s*[A-Za-z0-9_\-]+)*)\s*=\s*([^#]*?)\s*(?:#.*)?")
HIDDEN = '"..."'  # a value not repeated


def expected(msg: str) -> tuple[str, str] | None:
    """(the type msgspec expected, the one it got) of an `Expected X, got Y` message, else None."""
    found = _EXPECTED.fullmatch(msg)
    return (found.group(1), found.group(2)) if found else None


def suggestion(key: str, value: Any, schema: type) -> tuple[str, str | None] | None:
    """(what `key` takes, in words; a TOML value of that type made of what the person wrote, or an
    example, None when neither fits), from the field's type; None for a key the schema lacks."""
    info = vt.type_at(schema, key)
    hide = _in_names_table(schema, key)
    if isinstance(info, msgspec.inspect.LiteralType):
        return (f"one of {', '.join(map(str, info.values))}, in quotes",
                toml_value(value if value in info.values else info.values[0]))
    if isinstance(info, msgspec.inspect.StrType):
        shown = HIDDEN if hide or isinstance(value, (list, dict)) else _shown(key, _text(value))
        return "a text value, in quotes", shown
    if isinstance(info, (msgspec.inspect.IntType, msgspec.inspect.FloatType)):
        whole = isinstance(info, msgspec.inspect.IntType)
        of = key_unit(key)
        words = ("a whole number" if whole else "a number") + (f" of {of}" if of else "")
        words += (" (no fraction)" if whole and isinstance(value, float)
                  else f", without quotes{' or a unit' * bool(of)}")
        return words, number_meant(value, whole, key) or _default(schema, key)
    if isinstance(info, msgspec.inspect.BoolType):
        truthy = value is True or str(value).strip().lower() in ("true", "yes", "on", "1")
        return "true or false, without quotes", "true" if truthy else "false"
    if isinstance(info, msgspec.inspect.ListType):
        items = [_text(i) for i in (list_items(value) if isinstance(value, str) else [value])]
        # an item after a flag named like a credential (`--api-key KEY`) is one
        return "a list", "[" + ", ".join(HIDDEN if hide else _shown(before if before.startswith("-") else "", item)
                                         for before, item in zip(["", *items], items)) + "]"
    if info is None:
        return None
    fields = [f.name for f in getattr(info, "fields", ())]  # a table: its first key shows the shape
    return "a table", f"{{{fields[0]} = ...}}" if fields else "{...}"


def what_to_give(key: str, value: Any, schema: type, write: Callable[[str], str]) -> str:
    """`; give <what key takes>, e.g. <write(a value)>` for `value` of the wrong type; "" for an unknown key."""
    said = suggestion(key, value, schema)
    if said is None:
        return ""
    words, meant = said
    return f"; give {words}" + (f", e.g. {write(meant)}" if meant else "")


def within_bounds(key: str, msg: str, schema: type, write: Callable[[str], str]) -> str:
    """`; give <the numbers key takes>, e.g. <write(its default)>` for msgspec's `Expected `float` > 0.0`
    (which says no unit, nor the other bound); "" for another message."""
    info = vt.type_at(schema, key)
    if not _BOUND.fullmatch(msg) or not isinstance(info, (msgspec.inspect.IntType, msgspec.inspect.FloatType)):
        return ""
    of = key_unit(key)
    words = ("a whole number" if isinstance(info, msgspec.inspect.IntType) else "a number") + (f" of {of}" if of else "")
    return f"; give {words} {_bounds(info)}, e.g. {write(_default(schema, key) or _inside(info))}"


def _bounds(info: msgspec.inspect.IntType | msgspec.inspect.FloatType) -> str:
    """`from 1 to 4096`, `above 0`, `of 1024 or more`: the numbers a Meta lets through, in words."""
    low = (f"of {_number(info.ge)} or more" if info.ge is not None
           else f"above {_number(info.gt)}" if info.gt is not None else "")
    high = (f"up to {_number(info.le)}" if info.le is not None
            else f"below {_number(info.lt)}" if info.lt is not None else "")
    if info.ge is not None and info.le is not None:
        return f"from {_number(info.ge)} to {_number(info.le)}"
    return " and ".join(part for part in (low, high) if part)


def _inside(info: msgspec.inspect.IntType | msgspec.inspect.FloatType) -> str:
    """A number within the bounds, for a field without a default: the lowest one (a step past `gt`)."""
    low = info.ge if info.ge is not None else None if info.gt is None else info.gt + 1
    high = info.le if info.le is not None else None if info.lt is None else info.lt - 1
    return _number(low if low is not None else high if high is not None else 1)


def _number(value: float) -> str:
    return toml_value(int(value) if float(value).is_integer() else value)


def after_parse_error(text: str, error: str, schema: type) -> str:
    """For tomllib's `error` at an assignment of a bare word (`policy = always`, `t = 15m`): `; give
    ..., e.g. ...` from the key's type, with the table of the last [header] above it; else ""."""
    found = bare_assignment(text, error)
    if found is None:
        return ""
    table, written, value = found
    key = ".".join(p for p in (table, written) if p)
    write = lambda v: f"{written} = {v}"  # noqa: E731
    if vt.type_at(schema, key) is None:  # unknown here (a quoted key, a typo): a string is the likeliest
        shown = HIDDEN if _in_names_table(schema, key) else _shown(key, value)
        return f"; give a text value, in quotes, e.g. {write(shown)}"
    return what_to_give(key, value, schema, write)


def bare_assignment(text: str, error: str) -> tuple[str, str, str] | None:
    """(the table of the last [header] above, the key as written, the value's text) of the line
    tomllib's `error` points at, when its value is a bare word (`always`, `15m`, `ghp_x`); else None:
    a line whose value is TOML (`a.y = 2` after `a = {x = 1}`, a key set twice) failed for another reason."""
    where = _WHERE.search(error)
    lines = text.splitlines()
    if where is None or not 0 < int(where.group(1)) <= len(lines):
        return None
    line = int(where.group(1))
    found = _ASSIGNMENT.fullmatch(lines[line - 1])
    if found is None or not found.group(2) or found.group(2)[0] in "\"'[{" or _is_value(found.group(2)):
        return None
    header = next((h for text in reversed(lines[:line - 1]) if (h := _HEADER.fullmatch(text))), None)
    return header.group(1).replace(" ", "") if header else "", re.sub(r"\s*\.\s*", ".", found.group(1)), found.group(2)


def _is_value(text: str) -> bool:
    try:
        tomllib.loads(f"v = {text}")
    except tomllib.TOMLDecodeError:
        return False
    return True


def _in_names_table(schema: type, key: str) -> bool:
    """The key is an entry of a table of names (env, headers, query, tool_risk), whose values may be secrets."""
    parts = key.split(".")
    return any(isinstance(info := vt.type_at(schema, ".".join(parts[:n])), msgspec.inspect.DictType)
               and not isinstance(info.value_type, msgspec.inspect.StructType) for n in range(1, len(parts)))


def _shown(name: str, text: str) -> str:
    """`text` as a TOML value, or HIDDEN when it may be a credential: `name` (its key, or the argument
    before it) says so, or it holds a token's body, a URL's query or password."""
    flag, eq, value = text.partition("=")
    if eq and flag.startswith("-"):  # --api-key=KEY, -p=PASS, --header=Authorization: ...: the flag is kept
        return toml_value(f"{flag}=...")
    named = _credential_name(name.rsplit(".", 1)[-1])
    token = any(re.search(r"\d", run) and re.search(r"[A-Za-z]", run) for run in TOKEN_RUN_RE.findall(text))
    if named or token or ("://" in text and ("?" in text or "@" in text)):
        return HIDDEN
    return toml_value(text)


def _credential_name(name: str) -> bool:
    return CREDENTIAL_NAME_RE.search(name.lstrip("-").replace("-", "_")) is not None


def _text(value: Any) -> str:
    return toml_value(value) if isinstance(value, bool) else str(value)


def _default(schema: type, key: str) -> str | None:
    """The field's default number as TOML, for an example of the kind of value it takes."""
    table, _, name = key.rpartition(".")
    field = next((f for f in getattr(vt.type_at(schema, table), "fields", ()) if f.name == name), None)
    default = getattr(field, "default", None)
    if isinstance(default, float) and default.is_integer():
        default = int(default)  # 900 reads as seconds more plainly than 900.0; either is taken
    return toml_value(default) if isinstance(default, (int, float)) and not isinstance(default, bool) else None


# an item is quoted whole (keeping its spaces and commas) or runs to the next comma
_LIST_ITEM = re.compile(r"""\s*(?:(["'])(.*?)\1|([^,]*?))\s*(?:,|$)""")


def list_items(text: str) -> list[str]:
    """The items of `[GH_TOKEN, 'A B']`, split on commas; with neither commas nor brackets, the words
    as a shell splits them (`-y pkg`, an MCP server's args). `[A]` is what systemd leaves of ["A"]."""
    text = text.strip()
    if "," not in text and not text.startswith("["):
        try:
            return shlex.split(text)
        except ValueError:  # an unclosed quote
            return [text]
    items = [quoted if quote else bare.strip("'\"")
             for quote, quoted, bare in _LIST_ITEM.findall(text.strip("[]"))]
    return [item for item in items if item]


_NUMBER = re.compile(r"(\d+(?:\.\d+)?)\s*([a-z]*)")
_UNIT_WORDS = {"seconds": ("s", "sec", "secs", "second", "seconds"), "bytes": ("b", "byte", "bytes")}


def key_unit(key: str) -> str:
    """The unit a key's name gives its value (`seconds` for `tools.command_timeout_seconds`), or ""."""
    unit = key.rsplit("_", 1)[-1]
    return unit if unit in _UNIT_WORDS else ""


def number_meant(value: Any, whole: bool, key: str) -> str | None:
    """The number in `60s`, `0.5s`, `1,000` or 256.0; None when a guess could change the meaning: a
    word, a fraction where a whole number is wanted, or another unit than the key's (`1.5m` for seconds)."""
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else None
    if not isinstance(value, str):
        return None
    plain = re.sub(r"(?<=\d)[,_](?=\d{3}(?!\d))", "", value.strip().lower())  # thousands, not `0,5`
    found = _NUMBER.fullmatch(plain)
    if found is None or (whole and "." in found.group(1)):
        return None
    number, unit = found.groups()
    if unit and unit not in _UNIT_WORDS.get(key_unit(key), ()):
        return None
    return str(float(number)) if "." in number else str(int(number))  # `05` is no TOML number
