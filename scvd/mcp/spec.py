"""What a configured MCP server becomes, as data: argv, environment, headers, tool names.

Pure functions of the configuration, the secret store and the sandbox; no I/O
beyond looking the command up on PATH, and no MCP SDK.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence
from urllib.parse import urlencode, urlsplit, urlunsplit

from .. import http_fields, search_paths
from ..config import McpServerConfig, SecretRef, server_secrets
from ..config_checks import locate_command
from ..errors import CredentialMissing, LimitExceeded, Unavailable
from ..secret_like import CREDENTIAL_NAME_RE
from ..secrets import reads_refused
from ..passenv import build as allowed_env

PREFIX = "mcp__"
# a stdio server starts from the agents' allow-list (proxies and CA bundles included) and the
# user's HOME (npm and uv caches live there), plus its own `env`, its search paths cleaned
KEPT_ENV = ("HOME",)
_UNSAFE = re.compile(r"[^a-z0-9_]")
NAME_LIMIT = 64  # the registry's rule for every tool name
NAME_SHOWN = 64  # of a server's own name for a tool, where a message quotes it
_VAR = r"['\"`]?([A-Z][A-Z0-9]*_[A-Z0-9_]*[A-Z0-9])\b['\"`]?"  # with an _: `ERROR` or `HTTP` is no variable
# a server's words that a variable it reads is not set: `GITHUB_PERSONAL_ACCESS_TOKEN not set`,
# `missing environment variable: BRAVE_API_KEY`
_UNSET_VAR = re.compile(
    rf"{_VAR}(?i: (?:environment|env) variable)?(?i: is)? (?i:not set|not defined|undefined|missing|required|"
    rf"must be set|not provided|empty)|(?i:missing|set|provide|requires?) (?i:the )?(?i:(?:environment|env) "
    rf"variable):? {_VAR}")


@dataclass(frozen=True)
class StdioLaunch:
    """How to start a stdio server."""

    argv: list[str]
    env: dict[str, str]
    cwd: str
    sandboxed: bool


@dataclass(frozen=True)
class HttpLaunch:
    """How to connect to an HTTP server: its url with `query` added, its headers."""

    url: str
    headers: dict[str, str]
    query: dict[str, str]  # what was added to the url, secrets read


def tool_name(server: str, tool: str) -> str:
    """`mcp__NAME__TOOL` in the registry's alphabet (a-z, 0-9, _): `get-sum` becomes `get_sum`.

    Cut at 64 characters; two tools that end up with one name are a load error for the second.
    """
    return f"{PREFIX}{server}__{_UNSAFE.sub('_', tool.lower())}"[:NAME_LIMIT]


def named(tool: str) -> str:
    """A server's tool name, of any length, as a message quotes it: cut to NAME_SHOWN characters, `...`
    after a cut (cut before the log or a client escapes it, so no escape is split)."""
    return tool if len(tool) <= NAME_SHOWN else f"{tool[:NAME_SHOWN]}..."


def resolve(values: Mapping[str, str | SecretRef], secrets: Any, server: str, what: str) -> dict[str, str]:
    """`values` (mcp.servers.`server`.`what`) with every `{secret = "KEY"}` read from the store; a missing
    key is credential_missing."""
    out: dict[str, str] = {}
    for name, value in values.items():
        if isinstance(value, SecretRef):
            found = secrets.get(value.secret) if secrets is not None else os.environ.get(value.secret)
            if found is None:
                raise _not_set(server, f"mcp.servers.{server}.{what} {name}", value.secret, secrets)
            out[name] = found
        else:
            out[name] = value
    return out


def secrets_named(keys: list[str]) -> str:
    """`the secret K`, or `one of the secrets A, B` (a refusal does not say which)."""
    return f"the secret {keys[0]}" if len(keys) == 1 else f"one of the secrets {', '.join(keys)}"


def store_how(keys: Sequence[str], tool: str, or_scvctl: bool = True) -> str:
    """store_secret's arguments for a refusal of `keys` (which one, a refusal does not say), `tool` as scvd
    names it; `or_scvctl`: and how a person stores it instead."""
    if len(keys) == 1:
        how = f"(key {keys[0]!r}, tool {tool!r})"
        return f"{how} or `scvctl secrets set {keys[0]}`" if or_scvctl else how
    how = f"(the refused one's key, tool {tool!r})"
    return f"{how} or `scvctl secrets set` with it" if or_scvctl else how


def said_refused(server: str, keys: Sequence[str], tool: str, or_scvctl: bool = True) -> str:
    """What to do when a server given `keys` said, in its own words, that a credential was refused."""
    return (f"that reads like a refused credential, and mcp server {server} is given {secrets_named(keys)}: "
            f"store a new value with store_secret {store_how(keys, tool, or_scvctl)}")


def env_hint(server: str, cfg: McpServerConfig, said: str) -> str | None:
    """When a stdio server given secrets in its `env` says a variable it is not given is not set (its
    config passes the secret under another name, as `GITHUB_TOKEN` for a server reading
    `GITHUB_PERSONAL_ACCESS_TOKEN`): the table that would give it; else None."""
    given = {name: v.secret for name, v in cfg.env.items() if isinstance(v, SecretRef)}
    named = [m.group(1) or m.group(2) for m in _UNSET_VAR.finditer(said)] if given else []
    # a credential's name (not HTTP_PROXY's) the config does not set
    found = next((var for var in named if var not in cfg.env and CREDENTIAL_NAME_RE.search(var)), None)
    if found is None:
        return None
    key = next(iter(given.values())) if len(given) == 1 else "KEY"
    return (f"mcp.servers.{server}.env gives it {', '.join(given)} (secret {', '.join(dict.fromkeys(given.values()))}), "
            f"not {found}: if it reads its credential from {found}, pass the secret under that name: "
            f"env = {{{found} = {{secret = \"{key}\"}}}}")


def refused(server: str, cfg: McpServerConfig, tool: str, said: str,
            whole: str | None = None) -> CredentialMissing | None:
    """A failed call's error (`said`) that reads like a refused credential, from a server that is given
    secrets: credential_missing naming them, so an agent can heal it (store_secret, then the call
    again); None for any other failure. `whole`: the server's words before `said` cut them, judged
    instead (a 401 in the middle of a long trace is still one)."""
    keys = sorted(server_secrets(cfg))
    if not keys or not reads_refused(said if whole is None else whole):
        return None
    return CredentialMissing(
        f"{said}; {said_refused(server, keys, tool_name(server, tool), or_scvctl=False)}, then call the tool "
        "again (scvd starts the server again with it)",
        hint=f"scvctl secrets set {keys[0] if len(keys) == 1 else 'KEY'}, then restart scvd", keys=tuple(keys))


def store_unset(key: str, tool: str) -> str:
    """How to store `key`, which is not set, for `tool` (mcp__NAME, or a tool of it): an agent may itself
    (seed 003), a person with scvctl."""
    return (f"store it with store_secret (key {key!r}, tool {tool!r}), which starts the server with it at once, "
            f"or `scvctl secrets set {key}`, which the server's next restart reads")


def _not_set(server: str, where: str, key: str, secrets: Any) -> CredentialMissing:
    """`key` has no value: how to store it, or, when it sits in a keyring scvd cannot use (its
    name listed in secrets.toml), that storing it there again would not help. Reads the file."""
    if hasattr(secrets, "out_of_reach") and secrets.out_of_reach(key):  # storing it there again is no help
        missing = secrets.missing_error(key, f"scvctl secrets set {key}")
        return CredentialMissing(f"{where} needs the secret {key}: {missing.message}", hint=missing.hint, keys=(key,))
    return CredentialMissing(f"{where} needs the secret {key}, which is not set; "
                             f"{store_unset(key, PREFIX + server)}", keys=(key,))


def stdio_launch(name: str, cfg: McpServerConfig, *, secrets: Any, sandbox: Any, network: bool,
                 base_env: Mapping[str, str], home: Path) -> StdioLaunch:
    """argv, environment and cwd of a stdio server; wrapped in bubblewrap when it is on and not opted out."""
    assert cfg.command is not None
    # config allows a name, /... or ~/..., as for cwd; else `No such file` without the key
    found, why = locate_command(cfg.command, base_env.get("PATH", os.defpath))
    if found is None:
        shown = os.path.expanduser(cfg.command)
        if "/" not in shown:
            raise Unavailable(f"mcp server {name}: command {shown!r} is not on scvd's PATH; "
                              f"give its full path in mcp.servers.{name}.command")
        raise Unavailable(f"mcp server {name}: command {shown!r} {why}; fix mcp.servers.{name}.command")
    command = found
    cwd = os.path.expanduser(cfg.cwd) if cfg.cwd else str(home)
    own = search_paths.expand_home(resolve(cfg.env, secrets, name, "env"), os.path.expanduser("~"))
    # its `env`'s search paths as scvd's own, `~` expanded as in cwd: no entry read against a working
    # directory (config.load warns)
    env = search_paths.clean_all(allowed_env(base_env, KEPT_ENV, set=own))[0]
    argv = [command, *cfg.args]
    sandboxed = bool(cfg.sandbox and sandbox is not None and sandbox.active)
    if cfg.sandbox and sandbox is not None:
        try:
            argv = sandbox.wrap(argv, workspace=Path(cwd), network=network)
        except LimitExceeded as exc:  # it serves many calls: nobody approves them one by one
            raise Unavailable(f"mcp server {name}: {exc.message}", hint=(
                f"set mcp.servers.{name}.cwd to a directory with fewer repositories and files")) from exc
    return StdioLaunch(argv=argv, env=env, cwd=cwd, sandboxed=sandboxed)


def http_launch(name: str, cfg: McpServerConfig, secrets: Any) -> HttpLaunch:
    """The url (its `query` added, `{secret = KEY}` values read) and headers of an HTTP server."""
    assert cfg.url is not None
    headers = http_headers(name, cfg, secrets)
    query = resolve(cfg.query, secrets, name, "query")
    url = cfg.url
    if query:  # into the query, before a #fragment: after it, the server would never see them
        at = urlsplit(url)
        url = urlunsplit(at._replace(query="&".join(q for q in (at.query, urlencode(query)) if q)))
    return HttpLaunch(url=url, headers=headers, query=query)


def http_headers(name: str, cfg: McpServerConfig, secrets: Any) -> dict[str, str]:
    headers = resolve(cfg.headers, secrets, name, "headers")
    for header, ref in cfg.headers.items():
        if isinstance(ref, SecretRef) and not http_fields.value_ok(headers[header]):
            # refused here, naming the key: the HTTP library's own error quotes the value
            raise CredentialMissing(
                f"mcp.servers.{name}.headers {header}: the stored secret {ref.secret} is not a valid HTTP "
                f"header value ({http_fields.VALUE_RULE}); store it again without them: "
                f"`scvctl secrets set {ref.secret}`", keys=(ref.secret,))
    return headers
