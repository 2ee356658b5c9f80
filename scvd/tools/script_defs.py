"""Script tool definitions: read `<tools dir>/script/<name>/tool.json` into checked data.

Only the user's tools dir is read (`Paths.tools_dir`: `$SCV_HOME/tools`, or the
data dir's `tools/`); a workspace cannot add tools. A bad definition becomes a
`LoadError` naming the file and the rule, never an exception: the others load.
jsonschema is imported only here and in script.py, and only when a tool.json exists.
"""

from __future__ import annotations

import logging
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import msgspec

from .. import errors
from ..secrets import check_key
from .contract import LoadError

log = logging.getLogger("scvd.tools.script")

PREFIX = "script_"
DEFINITION = "tool.json"
MAX_DEFINITION_BYTES = 256 * 1024
FOLDER_RE = re.compile(r"[a-z][a-z0-9_]{0,55}")  # script_ + this stays a valid tool name


class ToolJson(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """The fields of a tool.json; a typo is an error naming the field."""

    description: str
    parameters: dict[str, Any] = msgspec.field(default_factory=lambda: {"type": "object", "properties": {}})
    risk: Literal["read_only", "filesystem", "process", "delegate"] = "process"
    concurrent: bool = False
    always_allow: bool = False
    system_use: bool = False
    timeout: float | None = None  # seconds; also the dispatch timeout. None: the 15-minute default
    secrets: list[str] = []
    command: str = "./run"


@dataclass(frozen=True)
class ScriptDef:
    """One loaded definition: the tool.json fields plus where it lives."""

    name: str  # the tool's name, script_<folder>
    folder: Path
    executable: Path  # the command, resolved inside the folder
    spec: ToolJson


def script_root(paths: Any) -> Path:
    return Path(paths.tools_dir) / "script"


def load_all(paths: Any) -> tuple[list[ScriptDef], list[LoadError]]:
    """Every definition under the script root, sorted by name, and the ones that failed."""
    root = script_root(paths)
    try:
        with os.scandir(root) as entries:
            folders = sorted((e for e in entries if e.is_dir(follow_symlinks=True)), key=lambda e: e.name)
    except FileNotFoundError:
        return [], []
    except OSError as exc:
        return [], [LoadError(str(root), "", f"cannot list {root}: {exc.strerror}")]
    defs: list[ScriptDef] = []
    failed: list[LoadError] = []
    for entry in folders:
        try:
            defs.append(load_one(Path(entry.path)))
        except DefinitionError as exc:
            failed.append(LoadError(exc.source, PREFIX + entry.name, exc.message))
    return defs, failed


DefinitionError = errors.ScriptDefinitionError  # in the one error tree


def load_one(folder: Path) -> ScriptDef:
    """One folder's definition, checked; raises DefinitionError naming the file and the rule."""
    path = folder / DEFINITION
    if not FOLDER_RE.fullmatch(folder.name):
        raise DefinitionError(folder, "name", f"folder name {folder.name!r} must be 1-56 chars of a-z, 0-9, _ "
                                              "starting with a letter (the tool is script_<folder>)")
    spec = _decode(path)
    _check_parameters(path, spec.parameters)
    for key in spec.secrets:
        try:
            check_key(key)
        except errors.InvalidRequest as exc:
            raise DefinitionError(path, "secrets", exc.message) from None
    if spec.timeout is not None and not spec.timeout > 0:
        raise DefinitionError(path, "timeout", f"timeout {spec.timeout:g} must be a positive number of seconds")
    return ScriptDef(name=PREFIX + folder.name, folder=folder, executable=_executable(path, folder, spec.command),
                     spec=spec)


def _decode(path: Path) -> ToolJson:
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_DEFINITION_BYTES + 1)
    except FileNotFoundError:
        raise DefinitionError(path, "tool.json", f"{path} is missing") from None
    except OSError as exc:
        raise DefinitionError(path, "tool.json", f"cannot read {path}: {exc.strerror}") from None
    if len(data) > MAX_DEFINITION_BYTES:
        raise DefinitionError(path, "tool.json", f"{path} is larger than {MAX_DEFINITION_BYTES} bytes")
    try:
        return msgspec.json.decode(data, type=ToolJson)
    except msgspec.DecodeError as exc:
        raise DefinitionError(path, "tool.json", f"{path}: {exc}") from None


def _check_parameters(path: Path, schema: dict[str, Any]) -> None:
    """A JSON Schema object whose top level takes an object (the arguments)."""
    import jsonschema

    if schema.get("type") != "object":
        raise DefinitionError(path, "parameters", 'parameters must be a JSON Schema with "type": "object"')
    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except jsonschema.SchemaError as exc:
        where = "/".join(str(p) for p in exc.absolute_path) or "(top)"
        raise DefinitionError(path, "parameters", f"not a valid JSON Schema at {where}: {exc.message}") from None
    for where, ref in _refs(schema, ()):
        _check_ref(path, schema, "/".join(where) or "(top)", ref)


def _refs(node: Any, where: tuple[str, ...]) -> Any:
    """(where, target) of every `$ref` in a schema."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str):
                yield where, value
            else:
                yield from _refs(value, (*where, str(key)))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _refs(value, (*where, str(i)))


def _check_ref(path: Path, schema: dict[str, Any], where: str, ref: str) -> None:
    """Only a pointer into `parameters` itself: jsonschema would fetch any other, on every call."""
    if not ref.startswith("#"):
        raise DefinitionError(path, "parameters", f"$ref {ref!r} at {where} points outside tool.json; scvd "
                                                  "never fetches schemas: put it under $defs, as '#/$defs/NAME'")
    if ref.startswith("#/") or ref == "#":
        node: Any = schema
        for part in ref[2:].split("/") if ref != "#" else []:
            part = part.replace("~1", "/").replace("~0", "~")
            if isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            elif isinstance(node, dict) and part in node:
                node = node[part]
            else:
                raise DefinitionError(path, "parameters", f"$ref {ref!r} at {where} leads nowhere in parameters")


def _executable(path: Path, folder: Path, command: str) -> Path:
    """The command as a path inside the folder (symlinks resolved), a regular executable file."""
    if not command or Path(command).is_absolute():
        raise DefinitionError(path, "command", f"command {command!r} must be a path inside {folder}, e.g. ./run")
    real_folder = folder.resolve()
    target = (folder / command).resolve()
    if real_folder not in target.parents:
        raise DefinitionError(path, "command", f"command {command!r} leads outside {folder}")
    try:
        st = target.stat()
    except FileNotFoundError:
        raise DefinitionError(path, "command", f"command {command!r} does not exist in {folder}") from None
    if not stat.S_ISREG(st.st_mode) or not os.access(target, os.X_OK):
        raise DefinitionError(path, "command", f"command {command!r} is not an executable file "
                                               f"(chmod +x {target})")
    return target


def declared_secrets(paths: Any) -> list[str]:
    """Every key some script tool declares (for `scvctl secrets list`); bad definitions are skipped."""
    defs, _ = load_all(paths)
    return sorted({key for d in defs for key in d.spec.secrets})
