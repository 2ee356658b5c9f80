"""SCVD_* environment overrides: each variable read as TOML (else as a string) and set into the raw
configuration before it is validated, with the hints that say how to write one that was meant
otherwise, and a warning for each SCVD_* variable that sets nothing. It knows no key of the
configuration: config.py passes its schema (Config) in, so this module never imports it.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any, Mapping

import msgspec

from . import validation_text as vt
from .errors import ConfigError
from .toml_write import toml_key

ENV_PREFIX = "SCVD_"


def apply_overrides(raw: dict[str, Any], sources: dict[str, str], env: Mapping[str, str],
                    path: Path, schema: type) -> dict[str, tuple[str, str]]:
    """Set each SCVD_* override into `raw` and `sources`; return the keys whose variable was not a
    TOML value, so taken as a string: {key: (variable, its text)}, for the hint of a type error."""
    texts: dict[str, tuple[str, str]] = {}
    for name, value in sorted(env.items()):
        if _is_override(name, schema):
            keys = name[len(ENV_PREFIX):].lower().split("__")
            origin = f"env:{name} (over {path})"
            if "" in keys:  # `SCVD_TOOLS__=`: msgspec would call the empty part an unknown field ``
                raise ConfigError(f"{origin}: the name leaves a part of the key path empty (`__` at an end, or "
                                  f"`____`); an override is {ENV_PREFIX}<TABLE>__<KEY>, e.g. "
                                  f"{ENV_PREFIX}TOOLS__COMMAND_TIMEOUT_SECONDS=60")
            _check_case(name, keys, origin, raw, schema)
            _check_empty(keys, value, origin, schema)
            key = ".".join(keys)
            parsed = _toml_value(value)
            if parsed is None:  # not TOML: the string as it is (`always`, say)
                texts[key] = (name, value)
                parsed = value
            _set_path(raw, keys, parsed, origin)
            # the value replaces the key whole: an inline table replaces the file's table
            for gone in [k for k in sources if k == key or k.startswith(key + ".")]:
                del sources[gone]
            sources[key] = f"env:{name}"
            if isinstance(parsed, dict):
                sources.update({f"{key}.{leaf}": f"env:{name}" for leaf in leaf_keys(parsed)})
    return texts


def _is_override(name: str, schema: type) -> bool:
    """`SCVD_<TABLE>__<KEY>`, or a key of the top with no `__`: `SCVD_LOG_LEVEL`, and a table given
    whole (`SCVD_PROVIDERS='{MyProv = {...}}'`, the one way to name a table in capitals)."""
    if not name.startswith(ENV_PREFIX):
        return False
    return "__" in name or name[len(ENV_PREFIX):].lower() in {f.name for f in msgspec.structs.fields(schema)}


def stray_variables(env: Mapping[str, str], schema: type, named: set[str]) -> list[str]:
    """A warning for each SCVD_* variable that sets no key: a typo, unless it is meant for something
    else (a key's name may be one: tests name secrets SCVD_TEST_...), so not an error."""
    return [_stray_message(name, schema) for name in sorted(env)
            if name.startswith(ENV_PREFIX) and not _is_override(name, schema) and name not in named]


def _stray_message(name: str, schema: type) -> str:
    tail = name[len(ENV_PREFIX):].lower()
    meant = next((f"{ENV_PREFIX}{table.upper()}__{tail[len(table) + 1:].upper()}"
                  for table, keys in _table_keys(schema).items()
                  if tail.startswith(table + "_") and tail[len(table) + 1:] in keys), None)
    if meant is None and vt.meant(tail, ["log_level"], cutoff=0.8):
        meant = f"{ENV_PREFIX}LOG_LEVEL"  # the one key outside a table: no `__` in its override
    form = f"did you mean {meant}?" if meant else f"an override is {ENV_PREFIX}<TABLE>__<KEY>."
    if meant != f"{ENV_PREFIX}LOG_LEVEL":
        form += " (Two underscores between table and key.)"
    return f"{name} sets no configuration key and is ignored; {form} If it is meant for something else, ignore this"


def _table_keys(schema: type) -> dict[str, set[str]]:
    """The keys of each fixed table of the schema (`sandbox`: {"mode", "network", "bwrap"}, ...)."""
    return {f.name: {k.name for k in msgspec.structs.fields(f.type)} for f in msgspec.structs.fields(schema)
            if isinstance(f.type, type) and issubclass(f.type, msgspec.Struct)}


def leaf_keys(raw: Mapping[str, Any], prefix: str = "") -> list[str]:
    """The dotted path of every value in a TOML table: the sources of a file's, or an inline table's, values."""
    keys: list[str] = []
    for k, v in raw.items():
        name = f"{prefix}{k}"
        keys += leaf_keys(v, name + ".") if isinstance(v, dict) else [name]
    return keys


def _set_path(raw: dict[str, Any], keys: list[str], value: Any, origin: str) -> None:
    node = raw
    for i, k in enumerate(keys[:-1]):
        node = node.setdefault(k, {})
        if not isinstance(node, dict):
            table = ".".join(keys[:i + 1])
            raise ConfigError(f"{origin}: {'.'.join(keys)}: {table} is a value, not a table with keys; "
                              "check the variable's name (`__` separates the parts of a key path)")
    node[keys[-1]] = value


def _check_case(name: str, keys: list[str], origin: str, raw: Mapping[str, Any], schema: type) -> None:
    """Refuse a key path that loses a case that matters: a variable's name is read in lower case, so
    `..._ENV__GITHUB_TOKEN` set the variable `github_token`, and `SCVD_PROVIDERS__MYPROV__MODEL` a
    table beside the file's [providers.MyProv], both quietly. An inline table's keys keep their case."""
    node: Any = raw
    for i in range(1, len(keys)):
        node = node.get(keys[i - 1]) if isinstance(node, dict) else None
        info = vt.type_at(schema, ".".join(keys[:i]))
        if not isinstance(info, msgspec.inspect.DictType):
            continue
        table, names = ".".join(keys[:i]), node if isinstance(node, dict) else {}
        spelt = next((n for n in names if n.lower() == keys[i]), None) if keys[i] not in names else None
        if not isinstance(info.value_type, msgspec.inspect.StructType):  # env, headers, tool_risk: names
            why = f"the keys of {table} are names, which a variable's name cannot spell: it is read in lower case"
        elif spelt is not None:  # a table of tables: providers may be named in capitals
            why = (f"a variable's name is read in lower case, so this would set {table}.{keys[i]}, a table "
                   f"beside the file's {table}.{toml_key(spelt)}")
        else:
            continue
        parts = name[len(ENV_PREFIX):].split("__")
        inline = '"..."'
        for part in reversed(keys[i + 1:]):
            inline = f"{{{toml_key(part)} = {inline}}}"
        inline = f"{{{toml_key(spelt or parts[i])} = {inline}}}"
        raise ConfigError(f"{origin}: {'.'.join(keys)}: {why}; set it in config.toml, or give {table} whole as an "
                          "inline table, whose keys keep their case (it replaces the file's), e.g. "
                          f"{assignment(ENV_PREFIX + '__'.join(parts[:i]), inline)}")


def _check_empty(keys: list[str], value: str, origin: str, schema: type) -> None:
    """`Environment=SCVD_X=` blanks a variable under systemd, and is likely meant as "unset"; it
    sets "" only where "" is a key's default meaning (`chat.system_prompt`, a provider's `base_url`)."""
    key = ".".join(keys)
    if value.strip() or vt.type_at(schema, key) is None:  # an unknown key: msgspec says so
        return
    parent = vt.type_at(schema, ".".join(keys[:-1]))
    field = next((f for f in getattr(parent, "fields", ()) if f.name == keys[-1]), None)
    if field is None or field.default != "":
        raise ConfigError(f"{origin}: {key}: the variable is empty, which is no value for this key; unset it "
                          "(under systemd: remove its Environment= line) to keep the file's value or the "
                          "default, or give it a value")


def _toml_value(text: str) -> Any:
    """`text` read as a TOML value, or None when it is not one (TOML has no null)."""
    import tomllib  # only for an override: a start without one parses no TOML

    from . import toml_read

    try:
        return toml_read.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return None


def read_as_string(msg: str, key: str, name: str, text: str, schema: type) -> str:
    """The hint for a variable taken as a string where another type was expected: `GH_TOKEN`
    for a list reads as a string, which is rarely what was meant. "" when msgspec wanted a string."""
    from . import config_hints  # only on a refusal

    types = config_hints.expected(msg)
    said_type = config_hints.suggestion(key, text, schema) if types and types[1] == "str" else None
    if types is None or types[0] == "str" or said_type is None:
        return ""
    write = lambda value: assignment(name, value)  # noqa: E731
    if types[0] == "object":  # an inline table, whose text is not repeated: env or headers hold tokens
        return ("; read as a string (not repeated here: a table's values may be secrets), not a TOML value: "
                f"are its strings quoted?; give one, e.g. {write(said_type[1] or '{...}')}")
    said = f"; read as the string {text!r}, not a TOML value"
    if types[0] in ("int", "float") and config_hints.number_meant(text, types[0] == "int", key) is None:
        unit = config_hints.key_unit(key)  # a guess would change the meaning: say what to give instead
        kind = "integer" if types[0] == "int" else "number"
        return f"{said}; give {f'the {unit} as ' if unit else ''}a TOML {kind}{', with no unit' if unit else ''}"
    return f"{said}; give one, e.g. {write(said_type[1])}" if said_type[1] else said


def unquoted(value: str) -> str:
    """A TOML string as a variable may give it: bare, when bare it is no TOML value (so read as that string)."""
    bare = value[1:-1] if value[:1] == '"' == value[-1:] and len(value) > 1 else None
    return bare if bare and _toml_value(bare) is None and bare.strip() == bare else value


def assignment(name: str, value: str) -> str:
    """`NAME=value` as a shell and a systemd unit take it. systemd drops quotes anywhere in a word
    (`Environment=X=["A"]` sets `[A]`), so there the whole assignment is quoted."""
    quoted = shlex.quote(value)
    if quoted == value:
        return f"{name}={value}"
    return f"{name}={quoted} (under systemd: Environment={shlex.quote(f'{name}={value}')})"
