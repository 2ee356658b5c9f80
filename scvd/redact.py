"""Secret values taken out of text scvd shows: a script's output, an MCP server's error or stderr.

Rule: every form a value may be printed in reads `[secret KEY]`: as is, or with any of
its characters escaped the way some encoder or `repr` does (`\\/`, `\\n`, `\\u003d` or
`\\u003D`, a surrogate pair, `\\x1b`), so text that is not one JSON document (stderr,
JSON lines, output the cap cut) hides it too; a value inside a longer one goes with it.
"""

from __future__ import annotations

import json
import re

_SHORT = {'"': '\\"', "\\": "\\\\", "/": "\\/", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def redact(text: str, secrets: dict[str, str]) -> str:
    """`text` with every form of each secret's value (as printed, or escaped) as `[secret KEY]`."""
    keys = [(value, key) for key, value in secrets.items() if value]
    if not keys:
        return text
    keys.sort(key=lambda vk: len(vk[0]), reverse=True)  # at one place, the longest value first
    pattern = re.compile("|".join(f"({_pattern(value)})" for value, _ in keys))
    return pattern.sub(lambda m: f"[secret {keys[m.lastindex - 1][1]}]", text)


def forms(secrets: dict[str, str]) -> dict[str, str]:
    """Each secret's value as printed and JSON-escaped, mapped to its stand-in `[secret KEY]`
    (for parts of a value at a cut of the output, where a pattern cannot look)."""
    out = {}
    for key, value in secrets.items():
        for form in (value, json.dumps(value)[1:-1], json.dumps(value, ensure_ascii=False)[1:-1]):
            if form:
                out[form] = f"[secret {key}]"
    return out


def _pattern(value: str) -> str:
    return "".join(_char(c) for c in value)


def _char(c: str) -> str:
    """A regular expression for `c` as printed or escaped by any JSON encoder (or Python's repr)."""
    alts = [re.escape(c)]
    if c in _SHORT:
        alts.append(re.escape(_SHORT[c]))
    cp = ord(c)
    units = [cp] if cp < 0x10000 else [0xD800 + ((cp - 0x10000) >> 10), 0xDC00 + ((cp - 0x10000) & 0x3FF)]
    alts.append("".join(r"\\u" + _hex(u, 4) for u in units))
    if cp < 0x100:
        alts.append(r"\\x" + _hex(cp, 2))
    return "(?:" + "|".join(alts) + ")"


def _hex(n: int, width: int) -> str:
    return "".join(f"[{d}{d.upper()}]" if d.isalpha() else d for d in f"{n:0{width}x}")
