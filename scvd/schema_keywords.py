"""jsonschema keywords that take quadratic time on a model's argument, replaced by linear ones.

jsonschema's `uniqueItems` compares every pair of items when they do not sort (mixed types: 1
and "1", objects): 110,000 items took about 45 minutes on a thread of the 2-thread pool that
checks tools' arguments, and every other such call waited. `linear()` extends a validator class
through jsonschema's own hook (`jsonschema.validators.extend`) with a check that puts a key per
item in a set: one pass, the same refusal message. A key is equal where JSON Schema's equality
(jsonschema's `equal`) is: 1 and 1.0 alike (Python's == and hash on numbers, as jsonschema's),
true apart from 1, an object's keys in any order.

`unevaluatedItems` and `unevaluatedProperties` looked each index or key up in a list of those
evaluated, which holds them all when `items`, `contains` or `additionalProperties` sit in an
`allOf` beside them: about a minute and a half for a 1 MiB argument. Here the list is a set;
the rest is jsonschema's, messages included. A keyword is replaced only where the class has
jsonschema's own function for it (a draft without it gains none). Imported only with jsonschema.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Iterator

_BOOL, _ARRAY, _OBJECT = object(), object(), object()  # tags no JSON value equals


def json_key(value: Any) -> Any:
    """A hashable key of a decoded JSON value, equal for values JSON Schema calls equal."""
    if isinstance(value, bool):  # before numbers: True == 1 in Python, not in JSON Schema
        return (_BOOL, value)
    if isinstance(value, list):
        return (_ARRAY, *map(json_key, value))
    if isinstance(value, dict):
        return (_OBJECT, frozenset((k, json_key(v)) for k, v in value.items()))
    return value  # a string, a number or null: Python's == is JSON Schema's


def unique_items(validator: Any, wanted: Any, instance: Any, schema: Any) -> Iterator[Any]:
    """jsonschema's `uniqueItems`, with its message, in linear time."""
    if not wanted or not validator.is_type(instance, "array"):
        return
    seen: set[Any] = set()
    for item in instance:
        key = json_key(item)
        if key in seen:
            from jsonschema.exceptions import ValidationError

            yield ValidationError(f"{instance!r} has non-unique elements")
            return
        seen.add(key)


def unevaluated_items(find: Callable[..., list[int]]) -> Callable[..., Iterator[Any]]:
    """jsonschema's `unevaluatedItems`, the indexes `find` gives looked up in a set."""
    def check(validator: Any, unevaluated: Any, instance: Any, schema: Any) -> Iterator[Any]:
        if not validator.is_type(instance, "array"):
            return
        evaluated = set(find(validator, instance, schema))
        extras = [item for index, item in enumerate(instance) if index not in evaluated]
        if extras:
            from jsonschema._utils import extras_msg
            from jsonschema.exceptions import ValidationError

            yield ValidationError("Unevaluated items are not allowed (%s %s unexpected)" % extras_msg(extras))
    return check


def unevaluated_properties(find: Callable[..., list[str]]) -> Callable[..., Iterator[Any]]:
    """jsonschema's `unevaluatedProperties`, the keys `find` gives looked up in a set."""
    def check(validator: Any, unevaluated: Any, instance: Any, schema: Any) -> Iterator[Any]:
        if not validator.is_type(instance, "object"):
            return
        evaluated = set(find(validator, instance, schema))
        extras = [key for key in instance if key not in evaluated  # a key once per error, as jsonschema's
                  for _ in validator.descend(instance[key], unevaluated, path=key, schema_path=key)]
        if not extras:
            return
        from jsonschema._utils import extras_msg
        from jsonschema.exceptions import ValidationError

        if unevaluated is False:
            yield ValidationError("Unevaluated properties are not allowed (%s %s unexpected)"
                                  % extras_msg(sorted(extras, key=str)))
        else:
            yield ValidationError("Unevaluated properties are not valid under the given schema "
                                  "(%s %s unevaluated and invalid)" % extras_msg(extras))
    return check


@functools.cache
def _replacements() -> dict[Any, Callable[..., Iterator[Any]]]:
    """jsonschema's keyword functions (2020-12's, and 2019-09's own) -> their replacements."""
    from jsonschema import _keywords, _legacy_keywords, _utils

    return {
        _keywords.uniqueItems: unique_items,
        _keywords.unevaluatedItems: unevaluated_items(_utils.find_evaluated_item_indexes_by_schema),
        _keywords.unevaluatedProperties: unevaluated_properties(_utils.find_evaluated_property_keys_by_schema),
        _legacy_keywords.unevaluatedItems_draft2019:
            unevaluated_items(_legacy_keywords.find_evaluated_item_indexes_by_schema),
        _legacy_keywords.unevaluatedProperties_draft2019:
            unevaluated_properties(_legacy_keywords.find_evaluated_property_keys_by_schema),
    }


@functools.cache
def linear(cls: Any) -> Any:
    """`cls` (a jsonschema validator class) with those keywords checked in linear time."""
    import jsonschema

    replaced = {name: _replacements()[f] for name, f in cls.VALIDATORS.items() if f in _replacements()}
    return jsonschema.validators.extend(cls, replaced)
