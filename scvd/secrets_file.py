"""secrets.toml's text: read it, write a new one, and edit one in place; no I/O.

Rule: an edit rewrites only the lines of what changed (a key set or deleted, the
[keyring] names), so a person's comments, blank lines and order stay: the file is
plain TOML they may edit by hand. An edit that would not read back as the values
meant (a shape this does not follow, such as an inline [keyring] table) gives way
to a whole new file, which always does.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Mapping

from . import errors
from .text import toml_said
from .toml_write import toml_string

KEY_RE = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,127}")
INDEX_TABLE = "keyring"  # the file's table of names held in the keyring; not a key name

# here, not in secrets.py: the configuration checks names before READY=1 without the store's
# imports (a thread pool, fcntl)
def key_problem(key: str) -> str | None:
    """Why `key` cannot name a secret, or None: an environment-variable-like name (letters, digits,
    `_`, starting with a letter)."""
    if KEY_RE.fullmatch(key or "") and key != INDEX_TABLE:
        return None
    return (f"secret name {key!r} is not valid: use letters, digits and _, starting with a letter "
            f"(at most 128 characters), e.g. GITHUB_TOKEN; {INDEX_TABLE!r} is reserved")


_TABLE = re.compile(r"\s*\[\s*([^\]]*?)\s*\]\s*(?:#.*)?$")
_KEY = re.compile(r"\s*(\"?)([A-Za-z][A-Za-z0-9_]*)\1\s*=")


def render_file(values: Mapping[str, str], keyring_names: list[str]) -> str:
    """The secrets file's text: values at the top, then the names held in the keyring."""
    lines = ["# scv secrets: `scvctl secrets set KEY` writes here when no OS keyring is usable.",
             "# Keep this file 0600. Keys are names like GITHUB_TOKEN; values are strings.", ""]
    lines += [f"{key} = {toml_string(values[key])}" for key in sorted(values)]
    if keyring_names:
        lines += ["", *_index_lines(keyring_names)]
    return "\n".join(lines) + "\n"


def _index_lines(names: list[str]) -> list[str]:
    return [f"[{INDEX_TABLE}]", "# these names' values are in the OS keyring (service \"scv\")", _names_line(names)]


def _names_line(names: list[str]) -> str:
    return "names = [" + ", ".join(toml_string(n) for n in sorted(names)) + "]"


def parse_file(path: Path, text: str) -> tuple[dict[str, str], list[str]]:
    """(values, keyring names) from the file's text; a wrong shape names the key, never a value."""
    import tomllib  # at first use: a start that reads no secrets file parses no TOML

    from . import toml_read

    try:
        data = toml_read.loads(text)
    except tomllib.TOMLDecodeError as exc:
        hint = _unquoted(text, str(exc))
        said = toml_said(str(exc), text)
        raise errors.ConfigError(f"{path}: not valid TOML ({said}){hint}; fix or remove it") from None
    index = data.pop(INDEX_TABLE, {})
    names = index.get("names", []) if isinstance(index, dict) else None
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise errors.ConfigError(f"{path}: [{INDEX_TABLE}] names must be a list of strings")
    for key, value in data.items():
        if not isinstance(value, str) or not KEY_RE.fullmatch(key):
            raise errors.ConfigError(
                f"{path}: {key!r} must be a name (letters, digits, _) set to a string")
    return data, names


def _unquoted(text: str, error: str) -> str:
    """What to write for a value typed without its quotes (`GH_TOKEN = ghp_x`), never the value itself."""
    from .config_hints import bare_assignment  # only on a refusal

    found = bare_assignment(text, error)
    if found is None or found[0]:  # in a table: [keyring] is scvd's, a value's key is at the top
        return ""
    return f"; the value of {found[1]} needs quotes: {found[1]} = \"...\""


def edit_file(path: Path, text: str, values: Mapping[str, str], keyring_names: list[str]) -> str:
    """`text` (the file as it is) made to hold `values` and `keyring_names`, changing only their lines."""
    if text.strip():
        edited = _edited(text, values, keyring_names)
        try:
            if parse_file(path, edited) == (dict(values), sorted(keyring_names)):
                return edited
        except errors.ConfigError:
            pass
    return render_file(values, keyring_names)


def _edited(text: str, values: Mapping[str, str], names: list[str]) -> str:
    from . import toml_read

    lines = text.splitlines(keepends=True)
    lines[-1] = lines[-1].rstrip("\n") + "\n"
    out: list[str] = []
    table: str | None = None
    seen: set[str] = set()
    add_at: int | None = None  # after the last top-level key, else before the first table
    names_at: int | None = None  # after a [keyring] header with no names line under it
    i = 0
    while i < len(lines):
        if header := _TABLE.match(lines[i]):
            table = header.group(1)
            add_at = len(out) if add_at is None else add_at
            names_at = len(out) + 1 if table == INDEX_TABLE else names_at
        key = _KEY.match(lines[i]) if table in (None, INDEX_TABLE) else None
        if not key:
            out.append(lines[i])
            i += 1
            continue
        end = _assignment_end(lines, i)
        name, old = key.group(2), toml_read.loads("".join(lines[i:end])).get(key.group(2))
        if table is None:
            seen.add(name)
            want = values.get(name)
            new = f"{name} = {toml_string(want)}{_comment(lines[i:end])}\n" if want is not None else None
            out += lines[i:end] if old == want else [new] if new else []
            add_at = len(out)
        elif name == "names":
            out += lines[i:end] if old == sorted(names) else [_names_line(names) + _comment(lines[i:end]) + "\n"]
            names_at = None
        else:
            out += lines[i:end]
        i = end
    if names_at is not None:
        out.insert(names_at, _names_line(names) + "\n")
    added = [f"{k} = {toml_string(values[k])}\n" for k in sorted(values) if k not in seen]
    at = len(out) if add_at is None else add_at
    out[at:at] = added
    if names and not any((h := _TABLE.match(line)) and h.group(1) == INDEX_TABLE for line in out):
        out += ["\n", *(line + "\n" for line in _index_lines(names))]
    return "".join(out)


def _comment(assignment: list[str]) -> str:
    """The comment after a one-line assignment's value (`  # the bot account`), kept when the value
    changes; found as the first `#` before which the line still reads as TOML."""
    import tomllib

    from . import toml_read

    line = assignment[0].rstrip("\n")
    if len(assignment) > 1 or "#" not in line:
        return ""
    for at in (i for i, ch in enumerate(line) if ch == "#"):
        try:
            toml_read.loads(line[:at])
        except tomllib.TOMLDecodeError:
            continue
        return "  " + line[at:].strip()
    return ""


def _assignment_end(lines: list[str], start: int) -> int:
    """The line after the assignment that starts at `start`: one line, or more for a multi-line
    string or array, found as the first span that reads as TOML."""
    import tomllib

    from . import toml_read

    for end in range(start + 1, len(lines) + 1):
        try:
            toml_read.loads("".join(lines[start:end]))
            return end
        except tomllib.TOMLDecodeError:
            continue
    return start + 1  # unreadable here: the whole file's parse says where
