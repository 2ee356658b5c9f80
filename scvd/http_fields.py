"""What HTTP/1.1 takes as a header field's name and value (RFC 9110 5.1, 5.5): checked where the
user's configuration or a stored secret becomes a header, so the error names the key, not the value.
And a URL as a message names it: without what may be a credential in it."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

_TOKEN_RE = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")


# what a refused name or value breaks, in every message that refuses one
NAME_RULE = "letters, digits and !#$%&'*+-.^_`|~, no space or colon"
VALUE_RULE = "a line break, a control character, or a space or tab at an end"


def name_ok(name: str) -> bool:
    return _TOKEN_RE.fullmatch(name) is not None


def value_ok(value: str) -> bool:
    """No control character but inner tabs, no space or tab at an end."""
    return value == value.strip(" \t") and not any((c < " " and c != "\t") or c == "\x7f" for c in value)


def url_problem(url: object) -> str | None:
    """Why scvd cannot send requests to `url` (an MCP server's, a chat provider's), or None: the one
    rule for such a URL, said where it is configured rather than as a connection error at the first call.
    What it says names no part of the URL (a relay's may hold a key)."""
    if not isinstance(url, str):
        return "is not a text"
    try:
        parts = urlsplit(url)
    except ValueError:  # "http://[x": a malformed host
        return "is no URL a request can go to (its host is malformed); write it as http://HOST:PORT/PATH"
    try:
        parts.port  # noqa: B018 - raises for a port that is not a number of 0-65535
    except ValueError:  # urllib's words quote the port: "user:token@" with no host puts a token there
        return "is no URL a request can go to (its port is not a number of 0-65535); write it as http://HOST:PORT/PATH"
    if parts.scheme not in ("http", "https"):
        return "must start with http:// or https://, e.g. http://127.0.0.1:8080/v1"
    if not parts.hostname:
        return "names no host after its http:// or https://; write it as http://HOST:PORT/PATH"
    return None


def shown_url(url: str) -> str:
    """`url` as a message names it: without user:password@ and the query, where credentials may ride
    (a relay's; a hosted MCP server's `?api_key=`): a turn's failure reaches the chat, a bridge may relay
    it to a group, and an MCP server's url goes to `scvctl status` and the log."""
    try:
        parts = urlsplit(url)
    except ValueError:  # a malformed host ("http://[x"): only the scheme is surely no secret
        return f"{url.partition('://')[0]}://..."
    if "@" not in parts.netloc and not parts.query and not parts.fragment:
        return url  # as typed: geturl() would write `ftp:/x` as `ftp:///x`
    return parts._replace(netloc=parts.netloc.rpartition("@")[2], query="", fragment="").geturl()
