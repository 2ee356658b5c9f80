"""The names of scvd's environment that hold a secret: what a child inheriting that environment is not given.

A chat provider takes its key from a variable (`api_key_env`) or the secret store
(`api_key_secret`), and a store that lacks a key takes scvd's variable of that name, so every
key the store is asked for counts too: `config.toml`'s `{secret = "KEY"}` and the keys the
tools use (Tool.secret_keys, a script tool's declared `secrets`). A session keeps the
configuration and tools it opened with while scvd's environment is one for all, so the daemon
puts in every session's services (under SERVICE) a callable that answers for its
configuration now and every open session's: a reload's new names reach the sessions opened
before it. Nothing here knows tool names.
"""

from __future__ import annotations

from typing import Any, Iterable

from .config import provider_keys, secret_refs

SERVICE = "secret_names"  # the daemon's `() -> frozenset[str]` in a session's services


def named(config: Any, registry: Any = None) -> frozenset[str]:
    """What one configuration names, and the keys its registry's tools use (None: no registry)."""
    names = set(provider_keys(config)) | secret_refs(config)
    return frozenset(names | registry.secret_keys(config) if registry is not None else names)


def named_by_all(states: Iterable[tuple[Any, Any]]) -> frozenset[str]:
    """named() over (config, registry) pairs, each distinct pair once (sessions share their opening's)."""
    distinct = {(id(config), id(registry)): (config, registry) for config, registry in states}
    return frozenset().union(*(named(config, registry) for config, registry in distinct.values()))
