"""Which named values read like a credential, and what of them to hide: one rule for all of scvd.

It picks the values kept out of output and log lines that no one declared a secret: a
`pass_env` variable (a script tool's or an agent's) and a proxy URL's password, a header or
query value sent to a chat provider, a literal query, header or env value of an MCP server. A value it
leaves alone is shown as printed, so it errs towards ordinary text: hiding a profile name
or a path would blot it out of every line it occurs in. Pure functions, no I/O.
"""

from __future__ import annotations

import re
from typing import Iterable
from urllib.parse import unquote

from .redact import LOG_MIN

# a name that reads like a credential's (GH_TOKEN, AWS_SECRET_ACCESS_KEY, DB_PASS, GITLAB_PAT, api-key,
# Proxy-Authorization), as a whole part (GIT_AUTHOR_NAME is none); and a url's or header's auth=, sig=
# (a SAS signature), session=, access= as the whole name: SSH_AUTH_SOCK or XDG_SESSION_TYPE are none
CREDENTIAL_NAME_RE = re.compile(r"TOKEN|SECRET|PASSWORD|PASSWD|PASSPHRASE|CREDENTIAL|COOKIE|APIKEY"
                                r"|(?:^|_)(?:KEY|PASS|PAT|AUTHORIZATION)(?:_|$)"
                                r"|^(?:AUTH|SIG|SIGNATURE|SESSION|ACCESS)$", re.IGNORECASE)
# a token's or a base64 key's body: a run this long of these characters; `-`, `_` and `/` end a run, so a
# name such as work-profile-7c1f, a UUID or a URL's path (/api/v1/projects/42) is none
TOKEN_RUN_RE = re.compile(r"[A-Za-z0-9+=]{16,}")
# a URL's password (scheme://user:PASSWORD@host), as urlsplit reads it: up to the authority's last `@`.
# From the `://` on: a scheme before it, looked for at every letter of a long run of them, cost N^2
# steps (64 KiB of letters in a git config: 8 s on the loop); text with `://` and no scheme is hidden too
URL_PASSWORD_RE = re.compile(r"://[^/?#@:\s]*:([^/?#\s]+)@")


def picked(named: Iterable[tuple[str, str, str]]) -> dict[str, str]:
    """What to hide of these (label, name, value), by label: each one's `to_hide`."""
    return {label: part for one in named for label, part in to_hide(*one).items()}


def to_hide(label: str, name: str, value: str) -> dict[str, str]:
    """What of `value` (under `name`) to hide, by its stand-in's label (`[secret LABEL]`): the value
    whole when its name says credential (with 4+ characters) or it holds a token's body (16+ letters,
    digits, `+=`, both letters and digits) and is no path (/, ~, .); and a URL's password in it, alone
    (`in_urls`)."""
    found = in_urls(label, value)
    if len(value) < LOG_MIN:  # a shorter value would blot out ordinary text wherever it occurs
        return found
    if CREDENTIAL_NAME_RE.search(name.replace("-", "_")):  # a header's `api-key` reads as API_KEY
        return {label: value, **found}
    if value.startswith(("/", "~", ".")):  # KUBECONFIG, a socket: printed often, no secret
        return found
    if holds_token(value):
        return {label: value, **found}
    return found


def holds_token(value: str) -> bool:
    """Whether `value` holds a token's body: a TOKEN_RUN_RE run with both letters and digits."""
    return any(re.search(r"[A-Za-z]", run) and re.search(r"[0-9]", run) for run in TOKEN_RUN_RE.findall(value))


def in_urls(label: str, value: str) -> dict[str, str]:
    """The passwords of the URLs in `value`, as written and decoded where that differs (a program may
    print either), by label `LABEL password` (`LABEL password 2`, ...): HTTPS_PROXY=http://user:PASSWORD@proxy
    then still shows its user and proxy. One shorter than 4 characters would blot out ordinary text."""
    forms = (form for raw in URL_PASSWORD_RE.findall(value) for form in (raw, unquote(raw)))
    found = [p for p in dict.fromkeys(forms) if len(p) >= LOG_MIN]
    return {f"{label} password" + (f" {i + 1}" if i else ""): p for i, p in enumerate(found)}
