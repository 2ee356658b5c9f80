"""jsonschema keywords that take quadratic time on a model's argument, replaced by linear ones.

jsonschema's `uniqueItems` compares every pair of items when they do not sort (mixed types: 1
and "1", objects): 110,000 items took about 45 minutes on a thread of the 2-thread pool that
checks tools' arguments, and every other such call waited. `linear()` extends a validator class
through jsonschema's own hook (`jsonschema.validators.extend`) with a check that puts a key per
item in a set: one pass, the same refusal message. A key is equal where JSON Schema's equality
(jsonschema's `equal`) is: 1 and 1.0 alike (Python's == and hash on numbers, as jsonschema's),
true apart from 1, an object's keys in any order. Imported only with jsonschema.
"""

from __future__ import annotations

import functools
from typing import Any, Iterator

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


@functools.cache
def linear(cls: Any) -> Any:
    """`cls` (a jsonschema validator class) with `uniqueItems` checked in linear time."""
    import jsonschema

    return jsonschema.validators.extend(cls, {"uniqueItems": unique_items})
