"""What HTTP/1.1 takes as a header field's name and value (RFC 9110 5.1, 5.5): checked where the
user's configuration or a stored secret becomes a header, so the error names the key, not the value."""

from __future__ import annotations

import re

_TOKEN_RE = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")


def name_ok(name: str) -> bool:
    return _TOKEN_RE.fullmatch(name) is not None


def value_ok(value: str) -> bool:
    """No control character but inner tabs, no space or tab at an end."""
    return value == value.strip(" \t") and not any((c < " " and c != "\t") or c == "\x7f" for c in value)
