"""`scvctl agents import codex`: copy a user's Codex setup into the private codex home.

Rules (seed 000, "Signing in delegated agents"):
- `config.toml` is copied whole; the model, provider and policies are reported.
- `auth.json` is copied only when it holds an API key. A ChatGPT sign-in (tokens)
  is never copied: its rotating refresh token must stay in one home.
- A provider that reads its key through `env_key` is flagged.
- What the pinned codex stops at start on is refused (codex_provider.start_problem: a `profile`
  line, a table of a built-in provider, a wire_api other than responses, a model_provider that names
  no provider), and so is the provider's base_url when no request can go to it; its headers are
  checked by the chat turn's rule, and a header codex leaves out is warned of.
- The files already in scvd's codex home are kept or removed by codex_home.py's rule.
- A file that is a symbolic link to nothing is refused, not taken as absent: a config.toml missed
  so would send the key beside it to codex's default provider.
- Both files are validated before either is written; the writes (and that removal) happen
  all together or not at all, one import at a time per home (import_files.py); one killed midway is
  undone first (import_journal.py), and the home's endpoint is unknown when that cannot be done
  (which also refuses agent runs and chat turns until an import commits).
- Nothing read here is ever printed or logged except the reported settings.
"""

from __future__ import annotations

import json
import logging
import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import toml_read
from ..errors import InternalError, InvalidRequest, NotARegularFile
from ..paths import read_regular_file
from .codex_home import AUTH, CONFIG, IMPORTED, MAX_FILE_BYTES, auth_verdict, settle_old_files
from .codex_provider import (active_provider, active_provider_id, endpoint_problem, provider_entries, provider_entry,
                             provider_headers, start_problem)
from .import_files import commit_files, one_at_a_time, settle_failed
from .import_journal import UNDONE, UNSURE, mark_unsure, settle

log = logging.getLogger("scvd.adapters")

UNUSED = ", which this config does not use now"
INTERRUPTED = {
    UNDONE: "an earlier import into scvd's codex home was killed midway; its files were put back as they were "
            "before it",
    UNSURE: "an earlier import into scvd's codex home was killed midway and left no journal scvd can undo it by "
            "(an older scvd's, or one that cannot be read), so which provider the files there are for cannot be told: those this import does "
            "not replace are taken as being for another provider",
}
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
        plan.warnings += (_env_key_warnings(config) + _header_warnings(*active_provider(config))
                          + _other_provider_warnings(config))
    if auth_raw is not None:
        auth = _parse_auth(source / AUTH, auth_raw)
        verdict, warning = auth_verdict(auth)
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
        if (target := _link_target(path)) is None:
            return None
        # not absent: a config.toml taken so left the key beside it for codex's default provider
        raise InvalidRequest(f"{path} is a symbolic link to {target}, which does not exist; point it at the file "
                             "or remove it, then import again; nothing was written") from None
    except NotARegularFile as exc:
        raise InvalidRequest(f"cannot read {path}: it is {exc.kind}, not a regular file; nothing was written") from None
    except OSError as exc:
        raise InvalidRequest(f"cannot read {path}: {exc.strerror}; nothing was written") from exc
    if len(data) > MAX_FILE_BYTES:
        raise InvalidRequest(f"{path} is larger than {MAX_FILE_BYTES} bytes; nothing was written")
    return data


def _link_target(path: Path) -> str | None:
    """Where the symbolic link at `path` points (None when there is none)."""
    try:
        return os.readlink(path)
    except OSError:
        return None


def _parse_config(path: Path, raw: bytes) -> dict[str, Any]:
    try:
        return toml_read.loads(raw.decode("utf-8-sig"))  # a BOM first, as codex reads it
    except UnicodeDecodeError:
        raise InvalidRequest(f"{path} is not UTF-8; nothing was written") from None
    except tomllib.TOMLDecodeError as exc:
        raise InvalidRequest(f"{path} is not valid TOML ({toml_read.described(exc)}); fix it, nothing "
                             "was written") from None


def _parse_auth(path: Path, raw: bytes) -> dict[str, Any]:
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        where = f" at line {exc.lineno}" if isinstance(exc, json.JSONDecodeError) else ""
        raise InvalidRequest(f"{path} is not valid JSON{where}; nothing was written") from None
    except RecursionError:  # json's, as tomllib's: not a traceback
        raise InvalidRequest(f"{path} is not valid JSON (arrays or objects nested too deeply to read); "
                             "nothing was written") from None
    if not isinstance(data, dict):
        raise InvalidRequest(f"{path} is not a JSON object; nothing was written")
    return data


def _report(config: dict[str, Any]) -> dict[str, Any]:
    report = {k: config[k] for k in REPORTED if isinstance(config.get(k), (str, int, float, bool))}
    report["model_provider"], provider = active_provider(config)
    if provider:
        report["wire_api"] = provider.get("wire_api", "")
        report["requires_openai_auth"] = bool(provider.get("requires_openai_auth", False))
        if provider.get("experimental_bearer_token"):
            report["bearer_token"] = "present (not shown)"
    projects = config.get("projects")
    if isinstance(projects, dict):
        report["projects"] = len(projects)
    return report


def _env_key_warnings(config: dict[str, Any]) -> list[str]:
    warnings = []
    for name, provider in provider_entries(config).items():
        var = provider.get("env_key") if isinstance(provider, dict) else None
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
    """Refused: what codex stops at start on, and a base_url no agent can send requests to (codex fails on it too)."""
    if problem := start_problem(config):
        raise InvalidRequest(f"{path}: {problem}; fix it in your Codex config.toml and import again; nothing was written")
    provider_id = active_provider_id(config)
    if problem := endpoint_problem(provider_entry(config, provider_id)):
        raise InvalidRequest(f"{path}: provider {provider_id!r}: {problem}; fix it in your Codex config.toml "
                             "and import again; nothing was written")


def _header_warnings(provider_id: str, provider: dict[str, Any], unused: str = "") -> list[str]:
    """Only warned of: codex leaves a header it cannot send out of its requests, so its agents still run
    with this setup; a chat turn with provider codex fails on it (the chat's own rule, never the value)."""
    warnings = []
    for h in (h for h in provider_headers(provider, None) if h.problem):
        when = f" (a turn fails once {h.var} is set in scvd's environment)" if h.var else ""
        warnings.append(f"provider {provider_id!r}{unused}: {h.field} {h.name!r} {h.problem}{when}: codex leaves it out of "
                        "its requests, and a chat turn with provider codex fails on it; fix it in your Codex "
                        "config.toml and import again")
    return warnings


def _other_provider_warnings(config: dict[str, Any]) -> list[str]:
    """The providers this config does not use now, by the active one's base_url and header rules but only
    warned of: codex fails on one only once model_provider (or a --profile's, an agent's `-c`) picks it."""
    active_id = active_provider_id(config)
    warnings = []
    for name, entry in provider_entries(config).items():
        if name == active_id:
            continue
        if problem := endpoint_problem(entry):
            warnings.append(f"provider {name!r}{UNUSED}: {problem}; a model_provider that picks it fails: fix it "
                            "in your Codex config.toml and import again")
        else:
            warnings += _header_warnings(name, entry, UNUSED)
    return warnings


def _settle(home: Path) -> str | None:
    """What an import killed midway left, settled before this one (import_journal.settle)."""
    try:
        found = settle(home, IMPORTED)
        if found == UNSURE:  # this import settles it: other users are refused until it commits
            mark_unsure(home, IMPORTED)
    except OSError as exc:
        raise settle_failed(home, exc) from exc
    return found


def import_codex(source: Path, home: Path) -> dict[str, Any]:
    """Validate, then copy; returns {copied, report, warnings} with no secret in it."""
    if source.resolve() == home.resolve():
        raise InvalidRequest(f"{source} is scvd's own codex home; give your Codex home instead")
    plan = plan_import(source)
    try:
        with one_at_a_time(home):
            found = _settle(home)
            plan.warnings += [INTERRUPTED[found]] if found in INTERRUPTED else []
            plan.warnings += settle_old_files(plan.files, plan.config, home, known=found != UNSURE)
            commit_files(home, plan.files)
    except OSError as exc:
        raise InternalError(f"cannot write scvd's codex home {home} ({exc.strerror or exc}); it was left as "
                            "it was: free some space or fix its permissions, then import again") from exc
    copied = [name for name, data in plan.files.items() if data is not None]
    log.info("imported codex setup from %s: copied %s", source, ", ".join(copied))
    return {"copied": copied, "report": plan.report, "warnings": plan.warnings}
