"""Secret values taken out of text scvd shows: a script's output, an MCP server's error or stderr.

Rule: every form a value may be printed in (as is, or JSON-escaped, as a `repr` of
bytes shows a newline) reads `[secret KEY]`; a value inside a longer one goes with it.
"""

from __future__ import annotations

import json


def redact(text: str, secrets: dict[str, str]) -> str:
    """`text` with every form of each secret's value (as printed, or JSON-escaped) as `[secret KEY]`."""
    found = forms(secrets)
    for form in sorted(found, key=len, reverse=True):  # a value inside a longer one goes with it
        text = text.replace(form, found[form])
    return text


def forms(secrets: dict[str, str]) -> dict[str, str]:
    """Each secret's value as printed and JSON-escaped, mapped to its stand-in `[secret KEY]`."""
    out = {}
    for key, value in secrets.items():
        for form in (value, json.dumps(value)[1:-1], json.dumps(value, ensure_ascii=False)[1:-1]):
            if form:
                out[form] = f"[secret {key}]"
    return out
