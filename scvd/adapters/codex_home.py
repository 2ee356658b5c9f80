"""scvd's codex home as it stands: what its files hold, and what an import does with them.

- An auth.json may be copied only when it holds an API key (a ChatGPT sign-in never is).
- Without an auth.json in the source the one in the home is kept, unless it holds an API key
  and the new config sends requests to another provider or base_url: then it is removed (that
  key is not the new provider's). The other way round, a new API key without a config.toml is
  for the default provider: a config.toml kept from before that points elsewhere is removed.
- The home's own files are read without blocking (here and by the chat's provider `codex`):
  a codex run may have left a FIFO there.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

from .. import toml_read
from ..errors import NotARegularFile, UnreadableFile
from ..paths import read_regular_file
from .codex_provider import active_provider

MAX_FILE_BYTES = 1 << 20
OPENAI_BASE_URL = "https://api.openai.com/v1"
CONFIG = "config.toml"
AUTH = "auth.json"
IMPORTED = (CONFIG, AUTH)  # what an import writes, and what a reader pairs: under the import lock


def auth_verdict(auth: dict[str, Any]) -> tuple[str, str | None]:
    """("api key", None) when the file may be copied, else a verdict and why it was not."""
    key = auth.get("OPENAI_API_KEY")
    chatgpt = auth.get("tokens") or str(auth.get("auth_mode", "")).lower().startswith("chatgpt")
    if chatgpt:
        return "not copied (ChatGPT sign-in)", (
            f"{AUTH} holds a ChatGPT sign-in, which is never copied (its rotating refresh token "
            f"must stay in one home); run `scvctl agents login codex` to sign scvd's codex in"
        )
    if isinstance(key, str) and key.strip():
        return "api key", None
    return "not copied (no API key)", (
        f"{AUTH} holds no API key, so it was not copied; run `scvctl agents login codex` "
        f"if the provider needs a sign-in"
    )


def _endpoint(config: dict[str, Any]) -> str:
    """Where the config sends requests (and so its key): the provider and its base_url."""
    provider_id, provider = active_provider(config)
    base_url = provider.get("base_url")
    default = OPENAI_BASE_URL if provider_id == "openai" else "its default URL"
    return f"provider {provider_id!r} ({base_url or default})"


def read_config(home: Path) -> dict[str, Any]:
    """The config.toml in `home`; raises what reading raises (NotARegularFile for a FIFO), and
    UnreadableFile for text that is not UTF-8 or TOML, nested too deeply included."""
    path = home / CONFIG
    data = read_regular_file(path, MAX_FILE_BYTES)
    try:
        return toml_read.loads(data.decode("utf-8-sig"))  # a BOM first, as codex reads it
    except UnicodeDecodeError:
        raise UnreadableFile(f"{path} is not UTF-8") from None
    except tomllib.TOMLDecodeError as exc:
        raise UnreadableFile(f"{path} is not valid TOML ({toml_read.described(exc)})") from None


def read_auth(home: Path) -> dict[str, Any]:
    """The auth.json in `home` ({} when there is none or it cannot be read)."""
    try:
        auth = json.loads(read_regular_file(home / AUTH, MAX_FILE_BYTES).decode("utf-8"))
    except (OSError, ValueError, RecursionError, NotARegularFile):  # RecursionError: nested too deeply
        return {}
    return auth if isinstance(auth, dict) else {}


def _current_endpoint(home: Path) -> str | None:
    """The endpoint of the config already in `home`; None when it cannot be read, or has a `profile` line
    (an older scvd imported it, when codex ran the profile's provider: which one its key is for is not told now)."""
    try:
        config = read_config(home)
    except FileNotFoundError:
        return _endpoint({})  # codex's default provider
    except (OSError, NotARegularFile, UnreadableFile):
        return None
    return None if "profile" in config else _endpoint(config)


def provider_own_key(home: Path) -> str | None:
    """The provider of the config.toml in `home` when it brings its own key, so that codex needs no
    sign-in (`codex login status` still says "Not logged in"); None otherwise."""
    try:
        config = read_config(home)
    except (OSError, NotARegularFile, UnreadableFile):
        return None
    provider_id, provider = active_provider(config)
    env_key = provider.get("env_key")
    if provider.get("experimental_bearer_token"):
        how = "its experimental_bearer_token"
    elif isinstance(env_key, str) and env_key:
        how = f"the key in ${env_key} (adapters.codex.pass_env must list it)"
    elif provider and not provider.get("requires_openai_auth"):
        how = "no key"
    else:
        return None
    return f"config.toml's provider {provider_id!r} uses {how}"


def settle_old_files(files: dict[str, bytes | None], config: dict[str, Any] | None, home: Path, *,
                     known: bool = True) -> list[str]:
    """Add to `files` (what an import writes; None removes) the removal of a file already in `home`
    that the new ones make wrong; returns the warnings saying what became of each. Not `known`: an
    import killed midway may have left one file of its own beside one from before, so the home's
    endpoint is not taken from its config.toml."""
    old = _current_endpoint(home) if known else None
    return _old_auth(files, config, home, old) + _old_config(files, home, old)


def _old_auth(files: dict[str, bytes | None], config: dict[str, Any] | None, home: Path, old: str | None) -> list[str]:
    """Keep the auth.json already in `home` when the source has none, unless its API key would
    go to another endpoint than the one it was for (`old`; None: unknown): then the import removes it."""
    if AUTH in files or not (home / AUTH).exists():
        return []
    if config is not None and auth_verdict(read_auth(home))[0] == "api key":
        new = _endpoint(config)
        if old != new:
            files[AUTH] = None
            bearer = active_provider(config)[1].get("experimental_bearer_token")
            then = ("the imported config brings its own key (experimental_bearer_token)" if bearer else
                    f"put the new provider's key in your {AUTH} (OPENAI_API_KEY) or its "
                    "experimental_bearer_token, and import again")
            return [f"the API key in the {AUTH} already in scvd's codex home was for "
                    f"{old or 'an endpoint scvd cannot tell'}; the imported config sends requests to {new}, "
                    f"so that {AUTH} was removed: {then}"]
    return [f"the {AUTH} already in scvd's codex home was kept"]


def _old_config(files: dict[str, bytes | None], home: Path, old: str | None) -> list[str]:
    """The mirror of `_old_auth`: a new API key without a config.toml is for codex's default
    provider; a config.toml already in `home` that sends requests elsewhere (or to `old` None:
    somewhere unknown) is removed with it."""
    if CONFIG in files or not files.get(AUTH) or not (home / CONFIG).exists():
        return []
    new = _endpoint({})
    if old == new:
        return [f"the {CONFIG} already in scvd's codex home was kept"]
    files[CONFIG] = None
    return [f"the {CONFIG} already in scvd's codex home sent requests to {old or 'an endpoint scvd cannot tell'}; "
            f"the imported {AUTH} has no {CONFIG} beside it, so its key is for {new}, and that {CONFIG} was "
            f"removed: import your {CONFIG} with it if the key is for another provider"]
