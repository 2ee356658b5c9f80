"""msgspec's validation messages, made to say what to do: the key path, the key a typo
meant, the values a field takes. Shared by config.toml, tool.json and tool arguments."""

from __future__ import annotations

import itertools
import re
from typing import Any, Callable, Iterable

import msgspec

_UNKNOWN_RE = re.compile(r"Object contains unknown field `(.+)`")


def split(exc: msgspec.ValidationError) -> tuple[str, str]:
    """(what is wrong, the key path after `$.`, or "" at the top)."""
    msg, sep, where = str(exc).rpartition(" - at `$.")
    return (msg, where.rstrip("`")) if sep else (str(exc), "")


def unknown_field(msg: str) -> str | None:
    """The key of an "unknown field" message, else None."""
    found = _UNKNOWN_RE.fullmatch(msg)
    return found.group(1) if found else None


def meant(name: str, known: Iterable[str], cutoff: float = 0.75) -> str | None:
    """The known key a typo most likely meant, or None."""
    import difflib  # only on a refusal: the idle daemon stays smaller

    close = difflib.get_close_matches(name, known, n=1, cutoff=cutoff)
    return close[0] if close else None


def type_at(struct: type, key: str) -> Any:
    """msgspec's type info of the key path in `struct` (`approvals.policy`), tables of a dict
    (`adapters[...]`, `mcp.servers.x`) through their value type; None when there is none."""
    info: Any = msgspec.inspect.type_info(struct)
    for part in [p for p in re.split(r"[.\[]", key) if p] if key else []:
        if isinstance(info, msgspec.inspect.DictType):
            info = info.value_type
            continue  # `part` names a table of the dict, or is `...]`
        if isinstance(info, msgspec.inspect.UnionType):
            info = next((t for t in info.types if isinstance(t, msgspec.inspect.StructType)), None)
        fields = {f.name: f.type for f in getattr(info, "fields", ())}
        if part not in fields:
            return None
        info = fields[part]
    if isinstance(info, msgspec.inspect.Metadata):  # an Annotated[..., Meta(...)] field: its type
        info = info.type
    if isinstance(info, msgspec.inspect.UnionType):  # `Literal[...] | None`: the literal
        info = next((t for t in info.types if not isinstance(t, msgspec.inspect.NoneType)), info)
    return info


def keys_at(struct: type, table: str) -> list[str]:
    """The field names of the table at `table` ("" for the top)."""
    return [f.name for f in getattr(type_at(struct, table), "fields", ())]


def tables_with(struct: type, name: str) -> list[str]:
    """The key paths of every table in `struct` that has the key `name` (`approvals.policy` for
    `policy`), a table of a dict named `<name>`: where a key put in the wrong table belongs."""
    found: list[str] = []

    def walk(info: Any, path: str) -> None:
        if isinstance(info, msgspec.inspect.Metadata):
            info = info.type
        if isinstance(info, msgspec.inspect.UnionType):
            info = next((t for t in info.types if isinstance(t, msgspec.inspect.StructType)), None)
        if isinstance(info, msgspec.inspect.DictType):
            walk(info.value_type, f"{path}.<name>")
        for f in getattr(info, "fields", ()):
            if f.name == name:
                found.append(f"{path}.{name}".lstrip("."))
            walk(f.type, f"{path}.{f.name}")

    walk(msgspec.inspect.type_info(struct), "")
    return found


def values_at(struct: type, key: str) -> list[Any] | None:
    """The values a Literal field takes, or None for any other field."""
    values = getattr(type_at(struct, key), "values", None)
    return list(values) if values else None


def with_values(msg: str, struct: type, key: str) -> str:
    """msgspec's message, with the values a Literal field takes when it refused another."""
    values = values_at(struct, key) if msg.startswith("Invalid enum value") else None
    return f"{msg}; use one of: {', '.join(map(str, values))}" if values else msg


def arguments_message(exc: msgspec.ValidationError, struct: type) -> str:
    """msgspec's message for a call's arguments, with the arguments a tool takes for one it does not
    (a model's `file_path` for `path`) and the values an enum takes: what to send instead."""
    msg, where = split(exc)
    name = unknown_field(msg)
    if name is not None:
        keys = keys_at(struct, where)
        close = meant(name, keys, cutoff=0.6)
        return (f"unknown argument `{f'{where}.' if where else ''}{name}`"
                f"{f'; did you mean `{close}`?' if close else ''} (arguments: {', '.join(keys)})")
    msg = with_values(msg, struct, where)
    return f"argument `{where}`: {msg}" if where else msg


SHOWN_VALUE_CHARS = 80  # of a refused value that a schema error quotes
SCHEMA_MESSAGE_CHARS = 1000  # of a whole schema error message
BOUNDS = ("maxLength", "minLength", "maxItems", "minItems", "maxProperties", "minProperties")


def schema_message(error: Any) -> str:
    """jsonschema's message for `error` (a ValidationError), made to say what to do: the refused value
    it quotes cut short (a 1 MiB argument came back whole, to the agent), the bound a too long or too
    short value broke (`'...' is too long` does not say it), and JSON's null for Python's None."""
    message, instance = error.message, error.instance
    quoted = repr(instance)
    if len(quoted) > SHOWN_VALUE_CHARS and quoted in message:
        unit = _UNITS.get(type(instance))
        size = f" ({len(instance):,} {unit}{'s' * (len(instance) != 1)})" if unit else ""
        message = message.replace(quoted, f"{quoted[:SHOWN_VALUE_CHARS]}...{size}", 1)
    elif instance is None:
        message = message.replace("None is not", "null is not", 1)
    if error.validator in BOUNDS:
        message += f" ({error.validator} {error.validator_value})"
    message += _meant_property(error)
    return message if len(message) <= SCHEMA_MESSAGE_CHARS else message[:SCHEMA_MESSAGE_CHARS] + " ..."


_UNITS = {str: "character", list: "item", dict: "key"}


MAX_SCHEMA_ERRORS = 64  # of the arguments' schema errors looked at, for nulls to leave out and the first to report


def schema_errors(validator: Any, instance: Any) -> list[Any]:
    """The first MAX_SCHEMA_ERRORS of jsonschema's errors for `instance` (a huge array of bad items
    made an error each), sorted by path: an index by its number (`rows[2]` before `rows[10]`)."""
    found = itertools.islice(validator.iter_errors(instance), MAX_SCHEMA_ERRORS)
    return sorted(found, key=lambda e: [(isinstance(p, str), p) for p in e.absolute_path])


def schema_refusal(arguments: Any, errors_of: Callable[[Any], list[Any]]) -> tuple[Any, str | None]:
    """(`arguments` without the top-level nulls their schema refused, what is still wrong with them
    or None), for a script or MCP tool alike. Models send null for an optional argument they mean to
    leave out (as built-in tools take it): left out, the tool applies its own default; a required one
    is then said to be missing."""
    errors = errors_of(arguments)
    nulls = {e.absolute_path[0] for e in errors if len(e.absolute_path) == 1 and e.instance is None}
    if nulls and isinstance(arguments, dict):
        arguments = {k: v for k, v in arguments.items() if k not in nulls}
        errors = errors_of(arguments)
    if not errors:
        return arguments, None
    error = first_error(errors)  # a typo'd name: said as such with the one meant, not as a missing one
    where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path).removeprefix(".")
    return arguments, (f"argument `{where}`: " if where else "") + schema_message(error)  # as msgspec's paths


def first_error(errors: list[Any]) -> Any:
    """Of jsonschema errors sorted by path, the one to report: the first, or an unexpected property
    at its path (a model's `txt` for `text`), which can name the property meant."""
    first = errors[0]
    return next((e for e in errors if e.validator == "additionalProperties"
                 and e.absolute_path == first.absolute_path), first)


def _meant_property(error: Any) -> str:
    """For a property `additionalProperties: false` refused: the one it may have meant, and those
    the object takes (jsonschema names only the refused one)."""
    schema, instance = error.schema, error.instance
    if (error.validator != "additionalProperties" or error.validator_value is not False
            or not isinstance(instance, dict) or not isinstance(schema.get("properties"), dict)
            or schema.get("patternProperties")):
        return ""
    known = [str(k) for k in schema["properties"]]
    extra = next((k for k in instance if k not in schema["properties"]), None)
    close = meant(extra, known, cutoff=0.6) if isinstance(extra, str) else None
    said = f"; did you mean {close!r}?" if close else ""
    return f"{said} (properties: {', '.join(known) or 'none'})"
