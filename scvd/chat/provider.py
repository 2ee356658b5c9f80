"""The model provider: a narrow seam (one method that streams a request's events) and its settings.

    class Provider(Protocol):
        def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]
        async def aclose(self) -> None   # the turn is over: close its connections

The real providers (openai_api.py) wrap the official `openai` client, imported
only when a turn needs one, on a thread (`prepare()`). `resolve()` turns
`[providers.NAME]` (or the imported Codex setup for `provider = "codex"`) and the
secret store into settings; a missing key is a `ProviderFailure(reason="auth")`
naming the fix.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, AsyncIterator, Mapping, Protocol

from .. import errors
from ..adapters.codex_home import IMPORTED, read_auth, read_config
from ..adapters.codex_provider import (active_provider_id, endpoint_problem, provider_entry, provider_headers,
                                      start_problem, strings)
from ..adapters.import_files import reading
from ..config import MAX_REPLY_BYTES
from ..notify import environment_advice, runs_as_unit
from .items import ModelEvent, ModelRequest

CODEX = "codex"
OPENAI_BASE_URL = "https://api.openai.com/v1"


ProviderFailure = errors.ProviderFailure  # in the one error tree


class Provider(Protocol):
    """Made for one turn (`make()`); its requests may share connections until aclose()."""

    def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]: ...

    async def aclose(self) -> None: ...


@dataclass(frozen=True)
class Settings:
    """Everything a provider needs for one turn."""

    name: str
    model: str
    base_url: str
    wire_api: str  # responses | chat (the imported Codex setup's: responses, the one codex speaks)
    api_key: str
    key_source: str  # for hints: `secret KEY`, `env NAME`, a file, or "" (no key configured)
    timeout_seconds: float = 600.0
    max_output_tokens: int | None = None
    max_retries: int = 2
    max_reply_bytes: int = MAX_REPLY_BYTES  # chat.max_reply_bytes: what is read of one request's answer
    # sent with every request: an imported Codex provider's query_params (Azure's api-version) and
    # http_headers/env_http_headers; a value that reads like a credential is taken out of failures and
    # logs like the key
    query: Mapping[str, str] = field(default_factory=dict)
    headers: Mapping[str, str] = field(default_factory=dict)

    def auth_hint(self) -> str:
        if self.key_source.startswith("secret "):
            key = self.key_source.split(" ", 1)[1]
            return f"store a valid key with `scvctl secrets set {key}`"
        if self.key_source.startswith("env "):  # read at scvd's start: setting it later changes nothing
            var = self.key_source.split(" ", 1)[1]
            if self.name == CODEX:  # the imported setup's env_key
                return (f"set a valid key in {var} in scvd's environment and restart scvd, or import a "
                        "setup that carries its key (`scvctl agents import codex`)")
            return (f"set a valid key in {var} in scvd's environment and restart scvd, or keep it as a "
                    f"secret: `scvctl secrets set {var}`, api_key_secret = \"{var}\" in [providers.{self.name}], "
                    "then `systemctl --user reload scvd`")
        if self.key_source:
            return f"the key comes from {self.key_source}: run `scvctl agents import codex` again"
        if self.name == CODEX:  # the imported provider names no key
            return ("the imported Codex setup's provider names no key: give it one (experimental_bearer_token, "
                    "or env_key) in your Codex config.toml and run `scvctl agents import codex` again")
        return (f"configure providers.{self.name}.api_key_secret and store the key with "
                "`scvctl secrets set KEY`")


def resolve(name: str, config: Any, adapters_dir: Path, secrets: Any = None,
            env: Mapping[str, str] | None = None) -> Settings:
    """The settings of provider `name`; raises ProviderFailure when it cannot be used."""
    env = os.environ if env is None else env
    table = config.providers.get(name)
    if table is None and name == CODEX:
        return replace(codex_settings(adapters_dir / CODEX), max_reply_bytes=config.chat.max_reply_bytes)
    if table is None:
        known = ", ".join(sorted(config.providers)) or "none"
        raise ProviderFailure("provider_error", f"no provider {name!r} is configured (providers: {known})",
                              f"add [providers.{name}] to config.toml, or run `scvctl agents import codex` "
                              "and use provider \"codex\"")
    key, source = "unused", ""
    if table.api_key_secret:
        source = f"secret {table.api_key_secret}"
        key = _secret(secrets, env, table.api_key_secret)
    elif table.api_key_env:
        source = f"env {table.api_key_env}"
        key = env.get(table.api_key_env, "")
    settings = Settings(name=name, model=table.model, base_url=table.base_url or OPENAI_BASE_URL,
                        wire_api=table.wire_api, api_key=key, key_source=source,
                        timeout_seconds=table.timeout_seconds, max_output_tokens=table.max_output_tokens,
                        max_reply_bytes=config.chat.max_reply_bytes)
    if not key:
        raise ProviderFailure("auth", f"provider {name!r} has no API key ({source} is not set)",
                              settings.auth_hint())
    return settings


def _secret(secrets: Any, env: Mapping[str, str], key: str) -> str:
    """From the daemon's secret store when it has one, else its environment (the store's last source)."""
    if secrets is not None:
        try:
            return secrets.get(key) or ""
        except errors.ScvError as exc:  # a locked keyring, a broken secrets.toml: fail the turn saying so
            raise ProviderFailure("auth", f"the API key {key} cannot be read: {exc.message}",
                                  getattr(exc, "hint", None)) from None
    return env.get(key, "")


_FIX_CONFIG = "fix it in your Codex config.toml, then run `scvctl agents import codex` again"
_IMPORT_AGAIN = "run `scvctl agents import codex` again: it replaces scvd's copy of your Codex setup"


def codex_settings(home: Path, env: Mapping[str, str] | None = None) -> Settings:
    """The model, provider and API key of an imported Codex setup (`scvctl agents import codex`).

    The key is the provider's `experimental_bearer_token` (it comes first, as in codex), else
    auth.json's OPENAI_API_KEY for a provider that takes OpenAI's login (`openai`, or one that says
    `requires_openai_auth`), else the variable the provider's `env_key` names. As in codex, the
    OpenAI key never goes to another provider's base_url, and a provider of its own that names no
    key at all (a local server's `base_url` only) gets none, as in codex. Codex's own local providers
    (ollama, lmstudio) are its built-in tables: on localhost, no key (codex_provider.local_provider).
    """
    env = os.environ if env is None else env
    hint = ("run `scvctl agents import codex` (a Codex setup with an API key), or add a [providers.NAME] table "
            "and set chat.provider = \"NAME\" in config.toml (chat.provider is codex unless set)")
    config, auth = _imported(home, hint)
    if problem := start_problem(config):  # codex stops at start on it: an agent run fails on it too
        raise ProviderFailure("provider_error", f"the imported Codex setup's {problem}", _FIX_CONFIG)
    provider_id = active_provider_id(config)
    table = provider_entry(config, provider_id, env)
    if problem := endpoint_problem(table):
        raise ProviderFailure("provider_error", f"the imported Codex setup's provider {provider_id!r}: {problem}",
                              _FIX_CONFIG)
    key, source = str(table.get("experimental_bearer_token") or ""), f"{home / 'config.toml'} (its bearer token)"
    if not key and (provider_id == "openai" or table.get("requires_openai_auth") is True):
        key, source = str(auth.get("OPENAI_API_KEY") or ""), str(home / "auth.json")
    if not key and table.get("env_key"):
        key, source = env.get(str(table["env_key"]), ""), f"env {table['env_key']}"
        if not key:  # named: "holds no API key ... or its env_key" left the person to find which variable
            var = str(table["env_key"])
            raise ProviderFailure("auth", f"the imported Codex setup's provider {provider_id!r} takes its API key "
                                  f"from {var} (its env_key), which is not set in scvd's environment",
                                  environment_advice(f"set {var} in scvd's environment", _key_file(var),
                                                     f"where {var} is set (export {var}=...)", runs_as_unit()))
    elif not key and table.get("base_url") and table.get("requires_openai_auth") is not True:
        key, source = "unused", ""  # a provider of its own that names no key (a local server): codex sends none
    if not key:
        raise ProviderFailure("auth", f"the imported Codex setup holds no API key for its provider {provider_id!r} "
                              "(its experimental_bearer_token, auth.json for OpenAI's own login, or its env_key in "
                              "scvd's environment)", hint)
    headers = _headers(provider_id, table, env)
    return Settings(name=CODEX, model=str(config.get("model") or "gpt-5"),
                    base_url=str(table.get("base_url") or OPENAI_BASE_URL),
                    wire_api=str(table.get("wire_api") or "responses"), api_key=str(key), key_source=source,
                    query=strings(table.get("query_params")), headers=headers)


def _key_file(var: str) -> str:
    """The unit's line for an API key: a file of the user's own, not Environment=, whose drop-in is 0644."""
    return (f"EnvironmentFile=%h/.config/scv/keys.env, a file only you can read (chmod 600) holding {var}=...; "
            "not Environment=, whose drop-in others can read")


def _imported(home: Path, hint: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """config.toml and auth.json as one import left them: its lock shared while both are read (an import
    between the two reads paired one's key with the other's endpoint), after one killed midway is settled."""
    try:
        with reading(home, IMPORTED):
            try:  # never blocking: an agent run may have left a FIFO in the codex home
                return read_config(home), read_auth(home)
            except FileNotFoundError as exc:
                raise ProviderFailure("auth", f"no imported Codex setup ({exc.filename} is missing)", hint) from None
            except errors.UnreadableFile as exc:  # scvd's copy: a codex run may write it, its home is its own
                raise ProviderFailure("provider_error", f"the imported Codex setup cannot be read: {exc.message}",
                                      _IMPORT_AGAIN) from None
            except (OSError, errors.NotARegularFile) as exc:
                raise ProviderFailure("provider_error", f"the imported Codex setup cannot be read: {exc}",
                                      hint) from None
    except (errors.InvalidRequest, errors.InternalError) as exc:  # held too long, left unsure, lock or settle failed
        raise ProviderFailure("provider_error", exc.message) from None


def _headers(provider_id: str, table: dict[str, Any], env: Mapping[str, str]) -> dict[str, str]:
    """The provider's http_headers and env_http_headers, each a valid HTTP field: a line break in a
    value failed only at send time, as a connection error naming the base_url."""
    where = f"the imported Codex setup's provider {provider_id!r}"
    headers = provider_headers(table, env)
    for h in headers:
        if not (problem := h.problem):
            continue
        if h.var:  # the value is a credential: never shown
            raise ProviderFailure("provider_error", f"{where}: env_http_headers {h.name!r} (from {h.var} in scvd's "
                                  f"environment) {problem}", f"fix {h.var} in scvd's environment and restart scvd")
        raise ProviderFailure("provider_error", f"{where}: http_headers {h.name!r} {problem}", _FIX_CONFIG)
    return {h.name: h.value for h in headers}


def prepare(wire_api: str) -> None:
    """Import the real providers and rehearse `wire_api`'s first request, once: seconds of imports and
    pydantic models on a loaded machine, so a caller on the event loop runs this on a thread."""
    from . import rehearsal

    rehearsal.rehearse(wire_api)


def make(settings: Settings) -> Provider:
    """The real provider for `settings` (prepare() has imported `openai`)."""
    from . import openai_api

    cls = openai_api.ChatProvider if settings.wire_api == "chat" else openai_api.ResponsesProvider
    return cls(settings)
