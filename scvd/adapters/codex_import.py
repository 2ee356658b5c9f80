"""`scvctl agents import codex`: copy a user's Codex setup into the private codex home.

Rules (seed 000, "Signing in delegated agents"):
- `config.toml` is copied whole; the model, provider and policies are reported.
- `auth.json` is copied only when it holds an API key. A ChatGPT sign-in (tokens)
  is never copied: its rotating refresh token must stay in one home.
- A provider that reads its key through `env_key` is flagged.
- The provider's base_url and wire_api are checked, and its headers, by the chat turn's rule
  (codex_provider.py): one that fails every agent is refused, a header codex leaves out is warned of.
- Without an auth.json in the source the one in scvd's codex home is kept,
  unless it holds an API key and the new config sends requests to another
  provider or base_url: then it is removed (that key is not the new provider's).
  The other way round, a new API key without a config.toml is for the default
  provider: a config.toml kept from before that points elsewhere is removed.
- The provider is the active `profile`'s `model_provider` when it names one.
- Both files are validated before either is written; the writes (and that
  removal) happen all together or not at all, each file 0600.
- One import at a time per home (a flock on it: the daemon's and a direct
  scvctl's alike), so two never mix their files; each sweeps the staged copies
  an import that died (SIGKILL, power loss) left, a key among them.
- Nothing read here is ever printed or logged except the reported settings.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import time
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import InternalError, InvalidRequest, NotARegularFile
from ..paths import read_regular_file
from .codex_provider import endpoint_problem, header_problem, provider_entry, strings

log = logging.getLogger("scvd.adapters")

MAX_FILE_BYTES = 1 << 20
OPENAI_BASE_URL = "https://api.openai.com/v1"
CONFIG = "config.toml"
AUTH = "auth.json"
LOCK_WAIT_SECONDS = 10.0  # for another import of the same home
REPORTED = ("model", "model_provider", "model_reasoning_effort", "sandbox_mode", "approval_policy")


@dataclass
class ImportPlan:
    """What an import will write, worked out completely before anything is written."""

    files: dict[str, bytes | None] = field(default_factory=dict)  # None: remove the file
    config: dict[str, Any] | None = None  # the source's config.toml, parsed
    report: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


def plan_import(source: Path) -> ImportPlan:
    """Read and validate the source setup; raise InvalidRequest if nothing can be imported."""
    if not source.is_dir():
        what = "is not a directory" if source.exists() else "does not exist"
        raise InvalidRequest(f"{source} {what}; give your Codex home with --from DIR")
    plan = ImportPlan()
    config_raw = _read(source / CONFIG)
    auth_raw = _read(source / AUTH)
    if config_raw is None and auth_raw is None:
        raise InvalidRequest(f"{source} has neither {CONFIG} nor {AUTH}; nothing to import")
    if config_raw is not None:
        config = plan.config = _parse_config(source / CONFIG, config_raw)
        plan.files[CONFIG] = config_raw
        plan.report.update(_report(config))
        _check_endpoint(source / CONFIG, config)
        plan.warnings += _env_key_warnings(config) + _header_warnings(config)
    if auth_raw is not None:
        auth = _parse_auth(source / AUTH, auth_raw)
        verdict, warning = _auth_verdict(auth)
        if verdict == "api key":
            plan.files[AUTH] = auth_raw
        plan.report["auth"] = verdict
        plan.warnings += [warning] if warning else []
    else:
        plan.report["auth"] = "none in the source"
    if not plan.files:
        raise InvalidRequest(
            f"nothing to import from {source}: " + " ".join(plan.warnings)
        )
    return plan


def _read(path: Path) -> bytes | None:
    try:  # a FIFO there would hold the daemon's thread (and the client's request) for good
        data = read_regular_file(path, MAX_FILE_BYTES)
    except FileNotFoundError:
        return None
    except NotARegularFile as exc:
        raise InvalidRequest(f"cannot read {path}: it is {exc.kind}, not a regular file; nothing was written") from None
    except OSError as exc:
        raise InvalidRequest(f"cannot read {path}: {exc.strerror}; nothing was written") from exc
    if len(data) > MAX_FILE_BYTES:
        raise InvalidRequest(f"{path} is larger than {MAX_FILE_BYTES} bytes; nothing was written")
    return data


def _parse_config(path: Path, raw: bytes) -> dict[str, Any]:
    try:
        return tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise InvalidRequest(f"{path} is not UTF-8; nothing was written") from None
    except tomllib.TOMLDecodeError as exc:
        # only the position: some decoder messages quote a character of the file
        where = str(exc).rpartition("(at ")[2].rstrip(")") or "somewhere"
        raise InvalidRequest(f"{path} is not valid TOML (at {where}); fix it, nothing was written") from None


def _parse_auth(path: Path, raw: bytes) -> dict[str, Any]:
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        where = f" at line {exc.lineno}" if isinstance(exc, json.JSONDecodeError) else ""
        raise InvalidRequest(f"{path} is not valid JSON{where}; nothing was written") from None
    if not isinstance(data, dict):
        raise InvalidRequest(f"{path} is not a JSON object; nothing was written")
    return data


def _auth_verdict(auth: dict[str, Any]) -> tuple[str, str | None]:
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


def active_settings(config: dict[str, Any]) -> dict[str, Any]:
    """The settings codex runs with: the top level, under the active `profile`'s (codex's own order)."""
    profiles, name = config.get("profiles"), config.get("profile")
    chosen = profiles.get(name) if isinstance(profiles, dict) and isinstance(name, str) else None
    return {**config, **chosen} if isinstance(chosen, dict) else config


def _report(config: dict[str, Any]) -> dict[str, Any]:
    active = active_settings(config)
    report = {k: active[k] for k in REPORTED if isinstance(active.get(k), (str, int, float, bool))}
    if isinstance(config.get("profile"), str):
        report["profile"] = config["profile"]
    report["model_provider"], provider = _provider(config)
    if provider:
        report["wire_api"] = provider.get("wire_api", "")
        report["requires_openai_auth"] = bool(provider.get("requires_openai_auth", False))
        if provider.get("experimental_bearer_token"):
            report["bearer_token"] = "present (not shown)"
    projects = config.get("projects")
    if isinstance(projects, dict):
        report["projects"] = len(projects)
    return report


def _provider(config: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The id of the provider codex sends requests to, and its table ({} when it has none)."""
    provider_id = str(active_settings(config).get("model_provider") or "openai")
    return provider_id, _providers(config).get(provider_id, {})


def _providers(config: dict[str, Any]) -> dict[str, dict[str, Any]]:
    providers = config.get("model_providers")
    if not isinstance(providers, dict):
        return {}
    return {k: v for k, v in providers.items() if isinstance(v, dict)}


def _env_key_warnings(config: dict[str, Any]) -> list[str]:
    warnings = []
    for name, provider in _providers(config).items():
        var = provider.get("env_key")
        if not isinstance(var, str) or not var:
            continue
        warnings.append(
            f"provider {name!r} reads its key through env_key {var}: delegated agents get {var} only "
            f"when adapters.codex.pass_env lists it and scvd's own environment has it (systemctl "
            f"--user edit scvd; the user service does not load your shell profile); prefer "
            f"experimental_bearer_token or an API-key {AUTH}"
        )
    return warnings


def _check_endpoint(path: Path, config: dict[str, Any]) -> None:
    """Refused: a base_url or wire_api no agent can send requests with (codex fails on it too)."""
    provider_id, _ = _provider(config)
    if problem := endpoint_problem(provider_entry(config, provider_id)):
        raise InvalidRequest(f"{path}: provider {provider_id!r}: {problem}; fix it in your Codex config.toml "
                             "and import again; nothing was written")


def _header_warnings(config: dict[str, Any]) -> list[str]:
    """Only warned of: codex leaves a header it cannot send out of its requests, so its agents still run
    with this setup; a chat turn with provider codex fails on it (the chat's own rule, never the value)."""
    provider_id, provider = _provider(config)
    bad = [f"http_headers {name!r} {problem}" for name, value in strings(provider.get("http_headers")).items()
           if (problem := header_problem(name, value))]
    bad += [f"env_http_headers {name!r} {problem} (a turn fails once {var} is set in scvd's environment)"
            for name, var in strings(provider.get("env_http_headers")).items() if (problem := header_problem(name))]
    return [f"provider {provider_id!r}: {what}: codex leaves it out of its requests, and a chat turn with provider "
            "codex fails on it; fix it in your Codex config.toml and import again" for what in bad]


def _endpoint(config: dict[str, Any]) -> str:
    """Where the config sends requests (and so its key): the provider and its base_url."""
    provider_id, provider = _provider(config)
    base_url = provider.get("base_url")
    default = OPENAI_BASE_URL if provider_id == "openai" else "its default URL"
    return f"provider {provider_id!r} ({base_url or default})"


def _current_endpoint(home: Path) -> str | None:
    """The endpoint of the config already in `home`; None when it cannot be read."""
    try:  # never blocking: a codex run may have left a FIFO in its own home
        return _endpoint(tomllib.loads(read_regular_file(home / CONFIG, MAX_FILE_BYTES).decode("utf-8")))
    except FileNotFoundError:
        return _endpoint({})  # codex's default provider
    except (OSError, ValueError, NotARegularFile):
        return None


def provider_own_key(home: Path) -> str | None:
    """The provider of the config.toml in `home` when it brings its own key, so that codex needs no
    sign-in (`codex login status` still says "Not logged in"); None otherwise."""
    try:
        config = tomllib.loads(read_regular_file(home / CONFIG, MAX_FILE_BYTES).decode("utf-8"))
    except (OSError, ValueError, NotARegularFile):
        return None
    provider_id, provider = _provider(config)
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


def _holds_api_key(path: Path) -> bool:
    try:
        auth = json.loads(read_regular_file(path, MAX_FILE_BYTES).decode("utf-8"))
    except (OSError, ValueError, NotARegularFile):
        return False
    return isinstance(auth, dict) and _auth_verdict(auth)[0] == "api key"


def _old_auth(plan: ImportPlan, home: Path) -> None:
    """Keep the auth.json already in `home` when the source has none, unless its API key would
    go to another endpoint than the one it was for: then the import removes it."""
    if AUTH in plan.files or not (home / AUTH).exists():
        return
    if plan.config is not None and _holds_api_key(home / AUTH):
        old, new = _current_endpoint(home), _endpoint(plan.config)
        if old != new:
            plan.files[AUTH] = None
            bearer = _provider(plan.config)[1].get("experimental_bearer_token")
            then = ("the imported config brings its own key (experimental_bearer_token)" if bearer else
                    f"put the new provider's key in your {AUTH} (OPENAI_API_KEY) or its "
                    "experimental_bearer_token, and import again")
            plan.warnings.append(
                f"the API key in the {AUTH} already in scvd's codex home was for {old or 'an unreadable config'}; "
                f"the imported config sends requests to {new}, so that {AUTH} was removed: {then}")
            return
    plan.warnings.append(f"the {AUTH} already in scvd's codex home was kept")


def _old_config(plan: ImportPlan, home: Path) -> None:
    """The mirror of `_old_auth`: a new API key without a config.toml is for codex's default
    provider; a config.toml already in `home` that sends requests elsewhere is removed with it."""
    if CONFIG in plan.files or not plan.files.get(AUTH) or not (home / CONFIG).exists():
        return
    old, new = _current_endpoint(home), _endpoint({})
    if old == new:
        plan.warnings.append(f"the {CONFIG} already in scvd's codex home was kept")
        return
    plan.files[CONFIG] = None
    plan.warnings.append(
        f"the {CONFIG} already in scvd's codex home sent requests to {old or 'an endpoint it cannot tell'}; "
        f"the imported {AUTH} has no {CONFIG} beside it, so its key is for {new}, and that {CONFIG} was "
        f"removed: import your {CONFIG} with it if the key is for another provider")


def _stage(directory: Path, name: str, data: bytes) -> Path:
    """`data` in a 0600 temp file beside `directory/name`, on disk (fsync), ready to be renamed
    over it atomically."""
    import tempfile  # here: it imports shutil, random and more, which the idle daemon does without

    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=directory)
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        _unlink(Path(tmp))
        raise
    return Path(tmp)


def _unlink(path: Path) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def commit_files(directory: Path, files: dict[str, bytes | None]) -> None:
    """Write (bytes) or remove (None) each of `files` in `directory`, all or none.

    Every new file is staged first (a full disk fails here, with nothing changed). Each old
    file is then kept under a hard link while the new ones are renamed into place; if one step
    fails, the old files go back, so config.toml and auth.json never come from two imports."""
    staged: dict[str, Path | None] = {}
    kept: dict[str, Path | None] = {}  # name -> hard link of its old file (None: there was none)
    settled = False  # done or undone; if undoing fails, the old files stay beside as .NAME.old
    try:
        for name, data in files.items():
            staged[name] = None if data is None else _stage(directory, name, data)
        for name, tmp in staged.items():
            kept[name] = _keep(directory, name)
            if tmp is not None:
                os.replace(tmp, directory / name)
            elif kept[name] is not None:
                os.unlink(directory / name)
        settled = True
    except BaseException:
        _restore(directory, kept)
        settled = True
        raise
    finally:
        for path in [*staged.values(), *(kept.values() if settled else ())]:
            if path is not None:
                _unlink(path)


@contextlib.contextmanager
def _one_at_a_time(directory: Path) -> Iterator[None]:
    """An exclusive flock on `directory` while one import reads and writes it; waited for up to
    LOCK_WAIT_SECONDS (an import stopped with Ctrl-Z must not hold the next one, nor a worker, for good)."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        deadline = time.monotonic() + LOCK_WAIT_SECONDS
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise InvalidRequest(
                        f"another import into scvd's codex home {directory} has been under way for "
                        f"{LOCK_WAIT_SECONDS:g} s (a `scvctl agents import` stopped with Ctrl-Z?); let it "
                        "finish or end it, then import again") from None
                time.sleep(0.05)
        yield
    finally:
        os.close(fd)


def _sweep(directory: Path, names: tuple[str, ...]) -> None:
    """Remove what `_stage` left of an import that died before its end: a copy of a key, too."""
    with os.scandir(directory) as entries:
        stale = [e.path for e in entries
                 if e.name.endswith(".tmp") and e.name.startswith(tuple(f".{n}." for n in names))]
    for path in stale:
        _unlink(Path(path))


def _keep(directory: Path, name: str) -> Path | None:
    link = directory / f".{name}.old"
    _unlink(link)
    try:
        os.link(directory / name, link)
    except FileNotFoundError:
        return None
    return link


def _restore(directory: Path, kept: dict[str, Path | None]) -> None:
    for name, link in kept.items():
        if link is not None:
            os.replace(link, directory / name)
        else:
            _unlink(directory / name)


def import_codex(source: Path, home: Path) -> dict[str, Any]:
    """Validate, then copy; returns {copied, report, warnings} with no secret in it."""
    if source.resolve() == home.resolve():
        raise InvalidRequest(f"{source} is scvd's own codex home; give your Codex home instead")
    plan = plan_import(source)
    try:
        with _one_at_a_time(home):
            _old_auth(plan, home)
            _old_config(plan, home)
            _sweep(home, (CONFIG, AUTH))
            commit_files(home, plan.files)
    except OSError as exc:
        raise InternalError(f"cannot write scvd's codex home {home} ({exc.strerror or exc}); it was left as "
                            "it was: free some space or fix its permissions, then import again") from exc
    copied = [name for name, data in plan.files.items() if data is not None]
    log.info("imported codex setup from %s: copied %s", source, ", ".join(copied))
    return {"copied": copied, "report": plan.report, "warnings": plan.warnings}
