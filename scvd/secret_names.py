"""The names of scvd's environment that hold a secret: what a child inheriting that environment is not given.

A chat provider takes its key from a variable (`api_key_env`) or the secret store
(`api_key_secret`), and a store that lacks a key takes scvd's variable of that name, so every
key the store is asked for counts too: `config.toml`'s `{secret = "KEY"}` and the keys the
tools use (Tool.secret_keys, a script tool's declared `secrets`). So do the variables the imported
Codex setup takes its credentials from (chat's provider `codex`: its env_key, env_http_headers), but for
the codex agent, whose home holds that setup: its runs need them. A session keeps the
configuration and tools it opened with while scvd's environment is one for all, so the daemon
puts in every session's services (under SERVICE) a callable that answers for its
configuration now and every open session's: a reload's new names reach the sessions opened
before it, and withheld() is what a tool's child is not given of them. Nothing here knows tool names.
"""

from __future__ import annotations

from typing import Any, Iterable

from .config import provider_keys, secret_refs

SERVICE = "secret_names"  # the daemon's `(setup=True) -> frozenset[str]` in a session's services
# the daemon's `() -> dict[str, str]`: provider_keys() of every live configuration, and the imported Codex setup's
PROVIDER_KEYS = "provider_keys"


def named(config: Any, registry: Any = None) -> frozenset[str]:
    """What one configuration names, and the keys its registry's tools use (None: no registry)."""
    names = set(provider_keys(config)) | secret_refs(config)
    return frozenset(names | registry.secret_keys(config) if registry is not None else names)


def named_by_all(states: Iterable[tuple[Any, Any]]) -> frozenset[str]:
    """named() over (config, registry) pairs, each distinct pair once (sessions share their opening's)."""
    distinct = {(id(config), id(registry)): (config, registry) for config, registry in states}
    return frozenset().union(*(named(config, registry) for config, registry in distinct.values()))


def keys_by_all(configs: Iterable[Any]) -> dict[str, str]:
    """provider_keys() over configurations, each name with the first that says where it is."""
    found: dict[str, str] = {}
    for config in configs:
        for name, where in provider_keys(config).items():
            found.setdefault(name, where)
    return found


def withheld(ctx: Any, own_setup: bool = False) -> frozenset[str]:
    """What a call's child is not given of scvd's environment: the names of the session's configuration
    and, through its services, of the daemon's now and every open session's (a session opened before a
    reload keeps its configuration, while scvd's environment is one for all) and of the imported Codex
    setup, unless `own_setup` (the agent whose setup it is). None of the daemon's: an embedder's call,
    the session's alone."""
    own = named(ctx.config)
    everyone = ctx.services.get(SERVICE)
    return own | everyone(setup=not own_setup) if everyone is not None else own


def live_provider_keys(ctx: Any) -> dict[str, str]:
    """The chat providers' key names of the session's configuration and of every live one (as withheld())."""
    everyone = ctx.services.get(PROVIDER_KEYS)
    return {**(everyone() if everyone is not None else {}), **provider_keys(ctx.config)}
