"""What of scvd's environment a delegated agent or a script tool gets: an allow-list, not a scrub.

A scrub misses every name it does not know (AWS_SECRET_ACCESS_KEY, GH_TOKEN,
DATABASE_URL, SSH_AUTH_SOCK, ...), so these children start from nothing and get
only what a program needs to run on this host: PATH, the locale, the terminal,
the time zone, who the user is, the temp dir, proxies and CA bundles. A name
the user wants passed on purpose is listed in the instance config's `pass_env`,
never in a workspace file. `bash` is not such a child: seed 000 keeps its
inherited environment. Pure functions, no I/O.
"""

from __future__ import annotations

import re
from typing import Iterable, Mapping

from .process import ALWAYS_REMOVED, ALWAYS_REMOVED_PREFIXES, child_env
from .secret_like import in_urls, picked

# the locale's categories by name, not `LC_*`: any name can start with LC_ (Debian's ssh
# sends and accepts LC_*, so it is used to carry other values, tokens included)
LOCALE_CATEGORIES = (
    "LC_ALL", "LC_CTYPE", "LC_COLLATE", "LC_MESSAGES", "LC_MONETARY", "LC_NUMERIC", "LC_TIME",
    "LC_ADDRESS", "LC_IDENTIFICATION", "LC_MEASUREMENT", "LC_NAME", "LC_PAPER", "LC_TELEPHONE",
)
_PROXIES = ("http_proxy", "https_proxy", "no_proxy", "all_proxy", "ftp_proxy")
ALLOWED = frozenset({
    "PATH", "TERM", "TZ", "TMPDIR", "USER", "LOGNAME", "SHELL",
    "LANG", "LANGUAGE", *LOCALE_CATEGORIES,
    *_PROXIES, *(name.upper() for name in _PROXIES),
    "NODE_USE_ENV_PROXY",  # makes Node's own fetch honour the proxy variables
    "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "NODE_EXTRA_CA_CERTS",
    "GIT_SSL_CAINFO",
})
NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")


def is_allowed(name: str) -> bool:
    """True for a name every such child gets (names are case-sensitive, as the kernel's are)."""
    return name in ALLOWED


def build(base: Mapping[str, str], pass_env: Iterable[str] = (),
          set: Mapping[str, str] | None = None) -> dict[str, str]:  # noqa: A002 - as child_env
    """`base`'s allowed variables and the `pass_env` names it has, plus `set` (which wins)."""
    wanted = frozenset(pass_env)
    kept = {k: v for k, v in base.items() if is_allowed(k) or k in wanted}
    return child_env(kept, set=set)  # scvd's own and systemd's variables never pass


def passed(base: Mapping[str, str], pass_env: Iterable[str]) -> list[str]:
    """The `pass_env` names that `base` has: what an approval request lists (never the values)."""
    return [name for name in pass_env if name in base]


def credentials(base: Mapping[str, str], pass_env: Iterable[str]) -> dict[str, str]:
    """What a child gets that its output must not show, by label: the passed values that read like a
    credential (scvd/secret_like.py), and the password in an allowed one's URL (a proxy's)."""
    named = [name for name in pass_env if name in base]
    allowed = (name for name in sorted(ALLOWED) if name in base and name not in named)
    return {**{k: v for name in allowed for k, v in in_urls(name, base[name]).items()},
            **picked((name, name, base[name]) for name in named)}


def name_problem(name: str, reserved: Iterable[str] = (), elsewhere: Iterable[str] = ()) -> str | None:
    """Why `name` cannot be in a `pass_env` list, or None; `reserved` are names scvd sets itself,
    `elsewhere` names that would move an agent's configuration and sign-in out of its private home."""
    if not NAME_RE.fullmatch(name):
        return (f"{name!r} is not an environment variable name "
                f"(1-128 letters, digits and _, not starting with a digit)")
    if name in ALWAYS_REMOVED or name.startswith(ALWAYS_REMOVED_PREFIXES):
        return f"{name} is scvd's own or systemd's variable, which no child gets; remove it"
    if name in frozenset(reserved):
        return f"{name} is set by scvd itself (the agent's private home); remove it"
    if name in frozenset(elsewhere):
        return (f"{name} would point the agent at a configuration and sign-in outside its private home "
                "(yours, whose tokens it would rotate); remove it: `scvctl agents login` signs the agent in "
                "within its private home")
    return None
