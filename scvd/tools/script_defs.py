"""Script tool definitions: read `<tools dir>/script/<name>/tool.json` into checked data.

Only the user's tools dirs are read (`Paths.tools_dirs`: `$SCV_HOME/tools`, or seed 003's
config dir `tools/` and the data dir's, where scvd read them first); a workspace cannot add
tools. A bad definition becomes a `LoadError` naming the file and the rule, never an
exception: the others load. One name in both dirs is a load error naming both, not a pick.
What would load and then fail every call is a load error too: a `$ref` or
`$dynamicRef` leading outside `parameters` or nowhere, a `required` name that is
no property.
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

from .. import errors, search_paths
from .. import validation_text as vt
from ..passenv import is_allowed
from ..paths import read_regular_file
from ..process import ALWAYS_REMOVED, ALWAYS_REMOVED_PREFIXES
from ..secrets import check_key
from ..text import end_of
from .contract import LoadError

log = logging.getLogger("scvd.tools.script")

PREFIX = "script_"
DEFINITION = "tool.json"
MAX_DEFINITION_BYTES = 256 * 1024
TRUNCATED = "Input data was truncated"  # msgspec's DecodeError for input that ends early, with no place
FOLDER_RE = re.compile(r"[a-z][a-z0-9_]{0,55}")  # script_ + this stays a valid tool name


class ToolJson(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """The fields of a tool.json; a typo is an error naming the field."""

    description: str
    parameters: dict[str, Any] = msgspec.field(default_factory=lambda: {"type": "object", "properties": {}})
    risk: Literal["read_only", "filesystem", "process", "delegate"] = "process"
    concurrent: bool = False
    always_allow: bool = False
    system_use: bool = False
    timeout: float | None = None  # seconds: the script's deadline (dispatch: 5 s more). None: the 15-minute default
    secrets: list[str] = []
    command: str = "./run"


@dataclass(frozen=True)
class ScriptDef:
    """One loaded definition: the tool.json fields plus where it lives."""

    name: str  # the tool's name, script_<folder>
    folder: Path
    real_folder: Path  # where a folder linked in from elsewhere is (the sandbox binds it, SCV_TOOL_DIR names it)
    executable: Path  # the command, resolved inside the folder
    spec: ToolJson
    # the executable as loaded (`identity`): a call refuses another, so what runs is what was loaded
    executable_id: tuple[int, ...] = ()


def script_roots(paths: Any) -> list[Path]:
    """The folders script tools are read from, each once (one may be a link to the other)."""
    roots: dict[str, Path] = {}
    for d in paths.tools_dirs:
        roots.setdefault(os.path.realpath(Path(d) / "script"), Path(d) / "script")
    return list(roots.values())


def load_all(paths: Any) -> tuple[list[ScriptDef], list[LoadError]]:
    """Every definition under the script roots, sorted by name, and the ones that failed."""
    found: dict[str, list[Path]] = {}
    failed: list[LoadError] = []
    for root in script_roots(paths):
        try:
            for folder in _folders(root):
                found.setdefault(folder.name, []).append(folder)
        except OSError as exc:
            failed.append(LoadError(str(root), "", f"cannot list {root}: {exc.strerror}"))
    defs: list[ScriptDef] = []
    for name in sorted(found):
        first, *others = found[name]
        if others:  # which one the user meant is theirs to say: loading either would surprise
            failed.append(LoadError(str(first / DEFINITION), PREFIX + name, _twice(first, others)))
            continue
        try:
            defs.append(load_one(first))
        except DefinitionError as exc:
            failed.append(LoadError(exc.source, PREFIX + name, exc.message))
        except Exception as exc:  # a check's bug must not take scvd (or a reload) down with one folder
            log.exception("checking %s failed", first)
            failed.append(LoadError(str(first / DEFINITION), PREFIX + name,
                                    f"scvd could not check it ({type(exc).__name__}: {exc}); see its log"))
    return defs, failed


def _folders(root: Path) -> list[Path]:
    """The tool folders in `root` (none when it does not exist)."""
    try:
        with os.scandir(root) as entries:
            # a hidden folder (`.git`, when the tools are kept in a repository) is no tool and no error;
            # a link to a folder that is gone is an error, else its tool would vanish without a word
            return [Path(e.path) for e in entries if not e.name.startswith(".")
                    and (e.is_dir(follow_symlinks=True) or _dangling(Path(e.path)))]
    except FileNotFoundError:
        return []


def _twice(first: Path, others: list[Path]) -> str:
    where = " and ".join(str(f) for f in [first, *others])
    return (f"rule 'name': the folder {first.name} is in both {where}, so neither is loaded; keep one "
            "(remove or rename the other), then reload scvd")


DefinitionError = errors.ScriptDefinitionError  # in the one error tree
NESTED_TOO_DEEPLY = "parameters nested too deeply to check; nest them less"


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
        if key in ALWAYS_REMOVED or key.startswith(ALWAYS_REMOVED_PREFIXES):  # else the environment's would do
            raise DefinitionError(path, "secrets", f"{key} is scvd's own or systemd's variable, which no child "
                                                   "gets; remove it")
        if problem := search_paths.from_store_problem(key, "the script"):
            instead = ("the script gets scvd's own already" if is_allowed(key) else "set it in the script "
                       f"itself, or pass scvd's own with pass_env in [tools.script.{folder.name}]")
            raise DefinitionError(path, "secrets", f"{problem}; remove it: {instead}")
    if spec.timeout is not None and not spec.timeout > 0:
        raise DefinitionError(path, "timeout", f"timeout {spec.timeout:g} must be a positive number of seconds")
    real_folder = folder.resolve()  # once: the executable below and every call use this one
    executable, st = _executable(path, folder, real_folder, spec.command)
    return ScriptDef(name=PREFIX + folder.name, folder=folder, real_folder=real_folder,
                     executable=executable, spec=spec, executable_id=identity(st))


def identity(st: os.stat_result) -> tuple[int, ...]:
    """What tells a file's content changed without reading it: a write or a new file changes the
    ctime, which no process sets (os.utime sets the mtime back, and the ctime to now). A hash
    would cost a read of the whole file (a binary may be large) at every call."""
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _decode(path: Path) -> ToolJson:
    try:
        data = read_regular_file(path, MAX_DEFINITION_BYTES)
    except FileNotFoundError:
        if _dangling(path.parent):
            raise DefinitionError(path, "tool.json", f"its folder is a symlink to {os.readlink(path.parent)!r}, "
                                                     "which does not exist; fix the link or remove it") from None
        if path.is_symlink():
            raise DefinitionError(path, "tool.json", f"it is a symlink to {os.readlink(path)!r}, which does not "
                                                     "exist; fix the link or put the file there") from None
        raise DefinitionError(path, "tool.json", "the folder has no tool.json; add one "
                                                 "(docs/tools.md, \"Script tools\", lists its fields)") from None
    except errors.NotARegularFile as exc:  # a FIFO would hold the start, or a reload, for good
        raise DefinitionError(path, "tool.json", f"it is {exc.kind}, not a regular file; make it a file") from None
    except OSError as exc:
        raise DefinitionError(path, "tool.json", f"cannot read it: {exc.strerror}") from None
    if len(data) > MAX_DEFINITION_BYTES:
        raise DefinitionError(path, "tool.json", f"it is larger than {MAX_DEFINITION_BYTES} bytes")
    data = data.removeprefix(b"\xef\xbb\xbf")  # a BOM (Notepad saves one): `invalid character (byte 0)`
    try:
        return msgspec.json.decode(data, type=ToolJson)
    except msgspec.ValidationError as exc:
        raise DefinitionError(path, "tool.json", _explain(exc)) from None
    except msgspec.DecodeError as exc:  # the error's source is the file: not said again
        raise DefinitionError(path, "tool.json", f"not valid JSON: {_at_line(str(exc), data)}") from None
    except RecursionError:  # msgspec's, past Python's recursion limit: it went to the log as a traceback
        raise DefinitionError(path, "tool.json", "not valid JSON: arrays or objects nested too deeply to read; "
                                                 "nest them less") from None


def _at_line(message: str, data: bytes) -> str:
    """msgspec's `(byte N)` with the line and column an editor shows; for a file cut off, where it ends."""
    if message == TRUNCATED:
        text = data.decode("utf-8", "replace")
        if not text.strip():
            empty = "only whitespace" if text else "empty"
            return f"the file is {empty}; write one JSON object (docs/tools.md, \"Script tools\", lists its fields)"
        return f"{message}: the file ends ({end_of(text)}) before its JSON does; close the {{, [ or string left open"
    found = re.search(r"\(byte (\d+)\)$", message)
    if found is None:
        return message
    at = int(found.group(1))
    line = data.count(b"\n", 0, at) + 1
    column = len(data[data.rfind(b"\n", 0, at) + 1:at].decode("utf-8", "replace")) + 1
    return f"{message[:found.start()]}(line {line}, column {column})"


def _dangling(path: Path) -> bool:
    return path.is_symlink() and not path.exists()


# keys that are no typo of a tool.json key but another thing's name (seed 003's flags, tools.list's,
# config.toml's): what to write instead. Looked up lower-case, without `_`
ELSEWHERE = {
    "background": "a script tool's call holds its session's lane until it ends (only a tool written in "
                  "Python can run in the background); leave it out",
    "notimeout": "a script tool always has a deadline; set `timeout` to the seconds it may take",
    "notooltimeout": "a script tool always has a deadline; set `timeout` to the seconds it may take",
    "timeoutseconds": "did you mean `timeout` (seconds)?",
    "passenv": "what of your environment a script tool gets is yours to grant, in config.toml: "
               "[tools.script.<folder>] pass_env = [\"NAME\"]; a stored secret goes in `secrets`",
}
ELSEWHERE["env"] = ELSEWHERE["environment"] = ELSEWHERE["passenv"]


def _explain(exc: msgspec.ValidationError) -> str:
    """msgspec's message, with the key a typo may have meant and the values a field takes."""
    msg, where = vt.split(exc)
    name = vt.unknown_field(msg)
    if name is not None:
        keys = vt.keys_at(ToolJson, "")
        if (instead := ELSEWHERE.get(name.lower().replace("_", ""))) is not None:
            return f"`{name}` is not a tool.json key: {instead} (keys: {', '.join(keys)})"
        close = vt.meant(name, keys, cutoff=0.7)
        meant = f"; did you mean `{close}`?" if close else ""
        return f"`{name}` is not a tool.json key{meant} (keys: {', '.join(keys)})"
    msg = vt.with_values(msg, ToolJson, where)
    if where == "timeout":  # "30s" or "30": `Expected float | null, got str` did not say what it takes
        msg += "; give the seconds as a JSON number, e.g. 300"
    return f"`{where}`: {msg}" if where else msg


def _check_parameters(path: Path, schema: dict[str, Any]) -> None:
    """A JSON Schema object whose top level takes an object (the arguments)."""
    import jsonschema

    if schema.get("type") != "object":
        raise DefinitionError(path, "parameters", 'parameters must be a JSON Schema with "type": "object"')
    if not isinstance(schema.get("$schema", ""), str):  # jsonschema would fail on it with a TypeError
        raise DefinitionError(path, "parameters", "parameters.$schema must be a string naming a draft, e.g. "
                                                  "'https://json-schema.org/draft/2020-12/schema', or be left out")
    from ..bounded_regex import format_checker

    cls = jsonschema.validators.validator_for(schema)
    try:  # its patterns read as they are matched: re refused ECMA-262's `(?<name>...)` and `\\p{L}`
        cls.check_schema(schema, format_checker=format_checker(cls))
        _check_schema(path, schema)
    except RecursionError:  # the checks recurse per level, ~100 levels before msgspec's limit: a traceback
        raise DefinitionError(path, "parameters", NESTED_TOO_DEEPLY) from None
    except jsonschema.SchemaError as exc:
        where = "/".join(str(p) for p in exc.absolute_path) or "(top)"
        if exc.validator == "format" and exc.validator_value == "regex":
            raise DefinitionError(path, "parameters", f"the pattern {exc.instance!r} at {where} cannot be read: "
                                                      f"{exc.cause}") from None
        raise DefinitionError(path, "parameters", f"not a valid JSON Schema at {where}: {exc.message}") from None


# keywords whose value is a schema, a list of them, or a map of them (drafts 4 to 2020-12); any
# other value (const, enum, default, examples) is data, where a "$ref" key is no reference
SCHEMA_ONE = {"additionalProperties", "additionalItems", "items", "contains", "propertyNames", "not", "if",
              "then", "else", "unevaluatedItems", "unevaluatedProperties", "contentSchema"}
SCHEMA_LIST = {"allOf", "anyOf", "oneOf", "prefixItems", "items"}
SCHEMA_MAP = {"properties", "patternProperties", "$defs", "definitions", "dependentSchemas", "dependencies"}
SAME_INSTANCE = {"allOf", "anyOf", "oneOf", "not", "if", "then", "else", "dependentSchemas", "dependencies"}
REF_KEYWORDS = ("$ref", "$dynamicRef")


def _subschemas(node: dict[str, Any]) -> Any:
    """(keyword, path below node, subschema) of each schema directly inside `node`."""
    for key, value in node.items():
        if key in SCHEMA_ONE and isinstance(value, dict):
            yield key, (key,), value
        elif key in SCHEMA_LIST and isinstance(value, list):
            yield from ((key, (key, str(i)), v) for i, v in enumerate(value) if isinstance(v, dict))
        elif key in SCHEMA_MAP and isinstance(value, dict):
            yield from ((key, (key, str(k)), v) for k, v in value.items() if isinstance(v, dict))


def _check_schema(path: Path, schema: dict[str, Any]) -> None:
    """Every reference resolves inside `parameters`, then every `required` name is a property:
    either would otherwise load fine and then fail every call."""
    import referencing
    from referencing.jsonschema import DRAFT202012, specification_with

    spec = specification_with(str(schema.get("$schema", "")), default=DRAFT202012)
    resolver = referencing.Registry().resolver_with_root(spec.create_resource(schema))
    nodes = list(_walk(spec, schema, (), resolver, None))
    for node, where, here, _ in nodes:
        for keyword in REF_KEYWORDS:
            if isinstance(node.get(keyword), str):
                _check_ref(path, here, keyword, where, node[keyword])
    for node, where, _, (top, resolver) in nodes:
        if isinstance(node.get("required"), list) and node is top:  # not one under not/anyOf/...: a branch
            _check_required(path, node, where, resolver)


def _walk(spec: Any, node: dict[str, Any], where: tuple[str, ...], resolver: Any, top: Any) -> Any:
    """(schema, where, its resolver, (the first schema on the way that applies to the same value,
    its resolver)) for `node` and every schema inside it."""
    if where:
        resolver = resolver.in_subresource(spec.create_resource(node))  # a nested $id moves the base
    top = top or (node, resolver)
    yield node, "/".join(where) or "(top)", resolver, top
    for keyword, below, sub in _subschemas(node):
        yield from _walk(spec, sub, (*where, *below), resolver, top if keyword in SAME_INSTANCE else None)


def _check_ref(path: Path, resolver: Any, keyword: str, where: str, ref: str) -> None:
    """Only into `parameters` itself: jsonschema would fetch any other, on every call."""
    from referencing.exceptions import Unresolvable

    if not ref.startswith("#"):
        raise DefinitionError(path, "parameters", f"{keyword} {ref!r} at {where} points outside tool.json; scvd "
                                                  "never fetches schemas: put it under $defs, as '#/$defs/NAME'")
    seen: list[str] = []
    while True:
        try:
            resolved = resolver.lookup(ref)
        except Unresolvable:
            what = "nothing is at that pointer" if ref.startswith("#/") else f"no $anchor {ref[1:]!r}"
            raise DefinitionError(path, "parameters", f"{keyword} {ref!r} at {where} leads nowhere in parameters "
                                                      f"({what}); fix the reference or add it") from None
        target = resolved.contents
        if not isinstance(target, (dict, bool)):  # e.g. '#/required/0': every call would fail inside jsonschema
            raise DefinitionError(path, "parameters", f"{keyword} {ref!r} at {where} points at a "
                                                      f"{type(target).__name__}, not a schema; point it at one")
        seen.append(ref)
        ref = target.get("$ref") if isinstance(target, dict) else None
        if not isinstance(ref, str) or not ref.startswith("#"):
            return
        if ref in seen:  # each $ref only leads to the next: validating would recurse until it gives up
            raise DefinitionError(path, "parameters", f"{keyword} {seen[0]!r} at {where} goes round in a loop of "
                                                      f"references ({' -> '.join([*seen, ref])}) that never "
                                                      "reaches a schema; point one of them at a real schema")
        resolver = resolved.resolver


def _check_required(path: Path, node: dict[str, Any], where: str, resolver: Any) -> None:
    """In a closed object, a required name must be a property, else no arguments can ever pass:
    with additionalProperties false one of its own; with unevaluatedProperties false one of the
    schemas applying to the value (refs followed). An open object may require any name."""
    if node.get("additionalProperties") is False:
        names, patterns = set(_keys(node, "properties")), _keys(node, "patternProperties")
    elif node.get("unevaluatedProperties") is False:
        names, patterns = _declared(node, resolver, set())
    else:
        return
    for name in node["required"]:
        if isinstance(name, str) and name not in names and not any(_matches(p, name) for p in patterns):
            known = ", ".join(sorted(names)) or "none"
            raise DefinitionError(path, "parameters", f"required {name!r} at {where} is not a property "
                                                      f"(properties: {known}); define it under properties "
                                                      "or drop it from required")


def _declared(node: dict[str, Any], resolver: Any, seen: set[int]) -> tuple[set[str], list[str]]:
    """The property names and patterns a value may have under `node`: its own, and those of the
    schemas that apply to the same value (allOf, if/then, a $ref, ...)."""
    if id(node) in seen:
        return set(), []
    seen.add(id(node))
    from referencing.exceptions import Unresolvable

    names, patterns = set(_keys(node, "properties")), _keys(node, "patternProperties")
    subs = [sub for keyword, _, sub in _subschemas(node) if keyword in SAME_INSTANCE]
    for keyword in REF_KEYWORDS:
        if isinstance(node.get(keyword), str):
            try:
                subs.append(resolver.lookup(node[keyword]).contents)
            except Unresolvable:  # resolves only from a nested $id's base: allow any name ("" matches all)
                patterns.append("")
    for sub in subs:
        if isinstance(sub, dict):
            more, more_patterns = _declared(sub, resolver, seen)
            names |= more
            patterns += more_patterns
    return names, patterns


def _keys(node: dict[str, Any], keyword: str) -> list[str]:
    value = node.get(keyword)
    return list(value) if isinstance(value, dict) else []


def _matches(pattern: str, name: str) -> bool:
    """As a call matches it (ECMA-262's reading; the pattern was read at the schema's check)."""
    import regex

    from ..bounded_regex import search

    try:
        return search(pattern, name) is not None
    except (TimeoutError, regex.error):  # slow on the name, or unread (draft 4): the benefit of the doubt
        return True


def _executable(path: Path, folder: Path, real_folder: Path, command: str) -> tuple[Path, os.stat_result]:
    """The command as a path inside the folder (symlinks resolved), a regular executable file, and its stat."""
    if not command or Path(command).is_absolute():
        raise DefinitionError(path, "command", f"command {command!r} must be a path inside {folder}, e.g. ./run")
    target = (real_folder / command).resolve()
    if real_folder not in target.parents:
        raise DefinitionError(path, "command", f"command {command!r} leads outside {folder}")
    try:
        st = target.stat()
    except FileNotFoundError:
        first = command.split()[0] if command.split() else ""
        if first != command and (real_folder / first).is_file():  # "./run --verbose": no command line
            raise DefinitionError(path, "command", f"command {command!r} is a path, not a command line: it "
                                                   f"takes no arguments; set it to {first!r} and give the "
                                                   "arguments in that script") from None
        raise DefinitionError(path, "command", f"command {command!r} does not exist in {folder}") from None
    if not stat.S_ISREG(st.st_mode) or not os.access(target, os.X_OK):
        raise DefinitionError(path, "command", f"command {command!r} is not an executable file "
                                               f"(chmod +x {target})")
    return target, st


def declared_secrets(paths: Any) -> list[str]:
    """Every key some script tool declares (for `scvctl secrets list`); bad definitions are skipped."""
    defs, _ = load_all(paths)
    return sorted({key for d in defs for key in d.spec.secrets})
