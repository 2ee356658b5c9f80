"""Which provider a Codex config sends requests to, and what in it no request can use: one rule for two readers.

`scvctl agents import codex` reads it to refuse or warn before anything is written, and a chat
turn with provider `codex` reads it to fail naming the field, not later as a connection error.
What codex (0.171, .ci/install-agents pins it) stops at start on is start_problem's, in codex's
words and with what to change. Each returns a problem as text, never a header's value (it may be
a credential); the caller wraps it in its own error with its own fix.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from .. import http_fields
from ..toml_write import toml_key, toml_string

WIRE_APIS = ("responses",)  # codex refuses any other at its start, "chat" included (no longer supported)
DEFAULT_PROVIDER = "openai"  # codex's when model_provider is not set
# codex's own providers for a server on this host (its --oss): no key; CODEX_OSS_BASE_URL, else
# CODEX_OSS_PORT, in its environment moves it
LOCAL_PORTS = {"ollama": 11434, "lmstudio": 1234}
# codex's built-in providers, which model_provider may name without a table; a model_providers table of a
# RESERVED one stops codex at start (amazon-bedrock's may change some of its fields: not scvd's to check)
RESERVED = (DEFAULT_PROVIDER, *LOCAL_PORTS)
BUILT_IN = (*RESERVED, "amazon-bedrock")


def active_provider_id(config: dict[str, Any]) -> str:
    """The id of the provider codex sends requests to (a `profile` line, which codex no longer reads, is
    start_problem's)."""
    value = config.get("model_provider", DEFAULT_PROVIDER)
    return value if isinstance(value, str) else repr(value)  # model_provider_problem's to name


def active_provider(config: dict[str, Any], env: Mapping[str, str] | None = None) -> tuple[str, dict[str, Any]]:
    """The id of the provider codex sends requests to, and its table ({} when it has none, or its
    entry is no table: provider_entry gives the entry as written)."""
    provider_id = active_provider_id(config)
    entry = provider_entry(config, provider_id, env)
    return provider_id, entry if isinstance(entry, dict) else {}


def local_provider(provider_id: str, env: Mapping[str, str] | None = None) -> dict[str, Any] | None:
    """Codex's built-in table of a local provider (None for any other id); `env` is the reader's
    environment (scvd's for the chat; an import leaves it out: the user's shell is not scvd's)."""
    if provider_id not in LOCAL_PORTS:
        return None
    env = env or {}
    port = env.get("CODEX_OSS_PORT", "").strip()
    port = port if port.isdigit() and int(port) < 65536 else str(LOCAL_PORTS[provider_id])
    base_url = env.get("CODEX_OSS_BASE_URL", "").strip() or f"http://localhost:{port}/v1"
    return {"base_url": base_url, "wire_api": "responses"}


def start_problem(config: dict[str, Any]) -> str:
    """What in `config` codex stops at start on, whichever provider is active ("" when nothing): a
    `profile` line, model_providers that is no table or has a table of a built-in provider, a provider
    entry codex cannot read, a model_provider that names no provider."""
    if problem := _profile_problem(config):
        return problem
    providers = config.get("model_providers", {})
    if not isinstance(providers, dict):
        return (f"model_providers is {toml_kind(providers)}, not a table, and codex stops at start on it: "
                "write each provider as [model_providers.NAME] with its keys")
    if reserved := [name for name in providers if name in RESERVED]:
        which = f"[model_providers.{reserved[0]}]" if len(reserved) == 1 else "each"
        return (f"model_providers has a table of codex's built-in {', '.join(reserved)}, and codex stops at start on "
                f"it (built-in providers cannot be overridden): rename {which} (e.g. to [model_providers."
                f"{reserved[0]}-custom]) and set model_provider to the new name, or remove it to use codex's own")
    for name, entry in providers.items():
        if problem := entry_problem(entry):
            return f"provider {name!r}: {problem}"
    return model_provider_problem(config)


def _profile_problem(config: dict[str, Any]) -> str:
    """A top-level `profile`: codex 0.171 refuses it (legacy `profile = ...` config is no longer supported)
    and reads a profile from NAME.config.toml with --profile NAME, which scvd's agent runs do not pass."""
    if "profile" not in config:
        return ""
    name = config["profile"]
    line = f"profile = {toml_string(name[:40])}" if isinstance(name, str) else f"profile ({toml_kind(name)})"
    tables = f"[profiles.{toml_key(name[:40])}]" if isinstance(name, str) else "the profile's table"
    return (f"{line} is no longer supported by codex, which stops at start on it (it takes --profile NAME with "
            f"NAME.config.toml instead, which scvd's agent runs do not pass): move the settings of {tables} you "
            "want to the top level and remove the profile line")


def model_provider_problem(config: dict[str, Any]) -> str:
    """Why model_provider names no provider at all ("" when it names one): codex looks its value up among
    its built-in providers and model_providers and stops at start when it is not there (an empty one is
    not the default provider: Model provider `` not found)."""
    value = config.get("model_provider", DEFAULT_PROVIDER)
    if not isinstance(value, str):
        return f"model_provider is {toml_kind(value)}, not a provider's name: write it as model_provider = \"NAME\""
    if not value.strip():
        return (f"model_provider is empty, and codex stops at start on it (Model provider `{value}` not found): "
                f"remove it for codex's default provider, {DEFAULT_PROVIDER}, or name a provider")
    if value not in BUILT_IN and value not in _model_providers(config):
        return (f"model_provider = {toml_string(value[:40])} names no provider, and codex stops at start on it (Model "
                f"provider `{value[:40]}` not found): add a [model_providers.{toml_key(value[:40])}] table, name one "
                f"of codex's own ({', '.join(BUILT_IN)}), or remove the line for {DEFAULT_PROVIDER}")
    return ""


def _model_providers(config: dict[str, Any]) -> dict[str, Any]:
    """model_providers as written ({} when it is no table)."""
    providers = config.get("model_providers")
    return providers if isinstance(providers, dict) else {}


def provider_entries(config: dict[str, Any]) -> dict[str, Any]:
    """model_providers' entries of providers of the config's own, by id, as written (one named like a
    built-in provider is start_problem's; one that is no table, entry_problem's to name)."""
    return {k: v for k, v in _model_providers(config).items() if k not in RESERVED}


def strings(table: Any) -> dict[str, str]:
    """A Codex table of names to texts (query_params, http_headers); other values left out, as codex refuses them."""
    return {str(k): v for k, v in table.items() if isinstance(v, str)} if isinstance(table, dict) else {}


@dataclass(frozen=True)
class Header:
    """One header a provider table asks for: from http_headers, or (`var` set) from env_http_headers."""

    name: str
    value: str  # "" for an env header whose value the reader does not know (the import's)
    var: str = ""  # the variable an env_http_headers header reads

    @property
    def field(self) -> str:
        return "env_http_headers" if self.var else "http_headers"

    @property
    def problem(self) -> str:
        """Why it cannot go out as an HTTP header ("" when it can); never shows the value (a credential)."""
        return header_problem(self.name, self.value)


def provider_headers(table: dict[str, Any], env: Mapping[str, str] | None) -> list[Header]:
    """The headers `table` asks for: http_headers, then each env_http_headers header whose variable is
    set in `env` to more than blanks (codex leaves the others out); with no `env` (the import: the
    user's shell is not scvd's) every env header, its value unknown."""
    headers = [Header(name, value) for name, value in strings(table.get("http_headers")).items()]
    for name, var in strings(table.get("env_http_headers")).items():
        if env is None or env.get(var, "").strip():
            headers.append(Header(name, "" if env is None else env[var], var))
    return headers


def credential_vars(config: dict[str, Any]) -> dict[str, str]:
    """The variables of the reader's environment a provider of `config` takes a credential from, each
    with the field that names it: `env_key` and each `env_http_headers` header's (a relay's token).
    Every provider's, not only the active one's (a --profile, or an agent run's `-c`, picks another), and
    a table of a built-in provider's too: codex refuses one, but the key it names is a key all the same."""
    found: dict[str, str] = {}
    for provider_id, table in _model_providers(config).items():
        if not isinstance(table, dict):
            continue
        if isinstance(key := table.get("env_key"), str) and key:
            found.setdefault(key, f"model_providers.{provider_id}.env_key")
        for header, var in strings(table.get("env_http_headers")).items():
            if var:
                found.setdefault(var, f"model_providers.{provider_id}.env_http_headers.{header}")
    return found


def header_problem(name: str, value: str = "") -> str:
    """Why `name: value` cannot go out as an HTTP header ("" when it can)."""
    if not http_fields.name_ok(name):
        return f"is not an HTTP header name ({http_fields.NAME_RULE})"
    if not http_fields.value_ok(value):
        return f"has a value no HTTP header can carry ({http_fields.VALUE_RULE})"
    return ""


def provider_entry(config: dict[str, Any], provider_id: str, env: Mapping[str, str] | None = None) -> Any:
    """Provider `provider_id`'s entry as codex uses it: its own table for a local provider, else the
    one in model_providers as written ({} when there is none; one that is no table is endpoint_problem's
    to name)."""
    if (local := local_provider(provider_id, env)) is not None:
        return local
    return _model_providers(config).get(provider_id, {})


def endpoint_problem(table: Any) -> str:
    """Why requests cannot go to the active provider's base_url with its wire_api and key ("" when they
    can). Codex fails on all of them too, so no agent loses a setup it could use when the import refuses one."""
    if not isinstance(table, dict):
        return entry_problem(table)
    base_url = table.get("base_url")
    if base_url is not None and (problem := http_fields.url_problem(base_url)):  # names no part of it: a relay's
        return f"base_url {problem}"  # may hold a key
    return entry_problem(table)


def entry_problem(table: Any) -> str:
    """Why codex cannot read this model_providers entry ("" when it can): it stops at start on one in any
    provider, the active one or not (a wire_api other than responses, a key field that is no text)."""
    if not isinstance(table, dict):
        return "its model_providers entry is not a table: write it as [model_providers.NAME] with its keys"
    wire_api = table.get("wire_api", "responses")
    if wire_api == "chat":
        return ('wire_api = "chat" is no longer supported by codex, which stops at start on it: set wire_api = '
                '"responses" (for a server with Chat Completions only, give scvd\'s chat a [providers.NAME] with '
                'wire_api = "chat" in scvd\'s config.toml instead)')
    if wire_api not in WIRE_APIS:
        shown = repr(wire_api[:40]) if isinstance(wire_api, str) else toml_kind(wire_api)
        return f"wire_api {shown} is not one codex knows, and it stops at start on it: set wire_api = \"responses\""
    for name in ("env_key", "experimental_bearer_token"):  # a table here went out as the key "{'a': 1}"
        if name in table and not isinstance(table[name], str):
            return f"{name} is {toml_kind(table[name])}, not a text: write it as {name} = \"...\""
    return ""


def toml_kind(value: Any) -> str:
    """What a TOML value is, in TOML's words (a user reads it, not Python's type names)."""
    kinds = {str: "a text", bool: "a boolean", int: "an integer", float: "a float", dict: "a table", list: "an array"}
    return kinds.get(type(value), "a date or time")
