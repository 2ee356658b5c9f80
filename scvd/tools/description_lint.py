"""Seed 003's rules for a tool's words: its description and its parameters' descriptions.

Pure functions of text and a JSON Schema, so a rule tests without a tool; contract.py's
`findings()` adds the name, risk and flag rules. Each finding says what is missing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

# line 2, the When: a trigger ("use for <task>", "use when <situation>") and what it names, up to , ; .
TRIGGER_RE = re.compile(
    r"\b(?:use (?:it |this )?(?:for|when|to|if|on|after|before|instead of)|when(?:ever)?)\b\s*([^;,.]*)",
    re.IGNORECASE)
# a trigger that names no task or situation: "use when asked", "use when needed", "use for anything"
VAGUE_TRIGGER_RE = re.compile(
    r"((you|the (user|agent|model|tool)|it|this)\s+)?((is|are)\s+)?"
    r"(asked( to| for( it)?)?|asks?( for it| to)?|needed|needs?( it| to)?|necessary|required|appropriate|"
    r"relevant|useful|helpful|wanted|wants?( it| to)?|applicable|possible|suitable|called( for)?|like|wish|"
    r"it|this|that|anything|everything|nothing|(any|all) (tasks?|purposes?|cases?|needs?|things?)|"
    r"general (use|purposes?))?",
    re.IGNORECASE)
# ... and an alternative: after a ';' another tool or way and what it is for ("; bash for files"), or a
# comparing word
ALTERNATIVE_RE = re.compile(
    r";[^;]*\b(for|to|when|if)\b|\b(instead|rather than|not for|prefer|otherwise|unlike|vs|versus)\b",
    re.IGNORECASE)
WHEN_LINE_EXAMPLE = "Use for counting words in a text; bash for whole files."
EXAMPLE_RE = re.compile(r"\be\.g\.|\bexample\b|\bsuch as\b", re.IGNORECASE)
# a parameter's When. An optional one: when to pass it, or what happens without it
PARAM_WHEN_RE = re.compile(
    r"\b(default|defaults|omit|omitted|when|with|without|if|unless|only|after|for)\b", re.IGNORECASE)
# a required one is always passed: for what or in which case the value is given, where it comes from,
# or what it decides
REQUIRED_WHEN_RE = re.compile(
    r"\b(when|if|unless|only|for|after|before|from|decides|selects|chooses)\b", re.IGNORECASE)
REQUIRED_WHEN_EXAMPLE = "File to count, relative to the workspace; for a directory use bash, e.g. 'notes.txt'"
OPTIONAL_WHEN_EXAMPLE = "Most lines to count; omit for all of them, e.g. 100"
PARAM_HOW_CHARS = 8  # of text before the example: what the value is and how it is used
SCHEMA_DUMP_RE = re.compile(r"[{}]|\breturns?\s*[:\[(]", re.IGNORECASE)
FILLER_RE = re.compile(
    r"\b(simply|basically|powerful|seamless(ly)?|awesome|amazing|robust|comprehensive|"
    r"state[- ]of[- ]the[- ]art|easy[- ]to[- ]use|user[- ]friendly|feel free|please|note that|very|really)\b",
    re.IGNORECASE)


@dataclass(frozen=True)
class Finding:
    """One broken design rule: the rule's name and what is wrong."""

    rule: str
    text: str


def _line_problems(lines: list[str]) -> list[str]:
    """What breaks the three-lines rule, said plainly: a trailing newline counts as an empty
    last line, and "got 3" would not tell anyone that."""
    trailing = len(lines) > 1 and not lines[-1].strip()
    body = lines[:-1] if trailing else lines
    wrong = ["it ends with a newline (an empty last line): remove it"] if trailing else []
    if len(body) not in (2, 3):
        wrong.append(f"it has {len(body)}")
    empty = [str(i) for i, line in enumerate(body, 1) if not line.strip()]
    if empty:
        wrong.append(f"line {', '.join(empty)} {'is' if len(empty) == 1 else 'are'} empty")
    if len(body) == 3 and NO_PRECONDITION_RE.fullmatch(body[2].strip()):  # seed 003: "omit if none"
        wrong.append(f"line 3 ({body[2].strip()!r}) says there is no precondition: leave the line out")
    return wrong


def _non_ascii(text: str) -> str:
    bad = "".join(sorted({c for c in text if not c.isascii()}))
    return f"non-English text {bad!r} (descriptions are ASCII only: straight quotes, plain hyphens)"


NO_PRECONDITION_RE = re.compile(r"(precondition:\s*)?(none|n/a|-)\.?", re.IGNORECASE)


def description_findings(text: str) -> list[Finding]:
    """Every rule the description `text` breaks: ASCII, 2-3 lines, 60-200 chars, no bold, no output
    schema, no filler, a When line."""
    found: list[Finding] = []
    if not text.isascii():
        found.append(Finding("english", f"description has {_non_ascii(text)}"))
    lines = text.split("\n")
    wrong = _line_problems(lines)
    if wrong:
        found.append(Finding(
            "three_lines",
            f"description must be 3 lines What/When/Precondition (2 when there is no precondition): "
            f"{'; '.join(wrong)}"))
    size = len(text)
    if not 60 <= size <= 200:
        found.append(Finding("length", f"description is {size} chars, must be 60-200"))
    if "**" in text:
        found.append(Finding("no_bold", "description must not use bold"))
    if SCHEMA_DUMP_RE.search(text):
        found.append(Finding("no_schema_dump",
                             "description must not dump an output schema (braces, 'Returns {'); "
                             "the caller sees the result"))
    filler = FILLER_RE.search(text)
    if filler:
        found.append(Finding("no_filler", f"description has filler {filler.group(0)!r}; say what and when"))
    second = lines[1] if len(lines) > 1 else ""
    missing = _when_line_problems(second)
    if missing:
        found.append(Finding("when_line", f"line 2 ({second!r}) has {'; and '.join(missing)}. "
                                          f"A passing line: {WHEN_LINE_EXAMPLE!r}"))
    return found


def _when_line_problems(line: str) -> list[str]:
    """What seed 003's When line lacks: a trigger that names a task or situation, and an alternative."""
    missing = []
    triggers = [m.group(1).strip() for m in TRIGGER_RE.finditer(line)]
    if not triggers:
        missing.append("no trigger: say when to use the tool ('Use for <task>', 'Use when <situation>')")
    elif all(VAGUE_TRIGGER_RE.fullmatch(t) for t in triggers):
        missing.append(f"no real trigger: {repr(triggers[0]) if triggers[0] else 'nothing after it'} names no "
                       "task or situation")
    if not ALTERNATIVE_RE.search(line):
        missing.append("no alternative: after a ';' name another tool or way and what it is for, or compare "
                       "with 'instead', 'rather than', 'not for', 'prefer', 'otherwise', 'unlike' or 'vs'")
    return missing


def parameter_findings(schema: dict[str, Any]) -> list[Finding]:
    """Every rule the parameters of the object schema `schema` break, parameter by parameter."""
    found: list[Finding] = []
    # an MCP server's schema is not checked: `"required": null` and `"properties": null` (Go's nil
    # slice and map) mean none
    listed, properties = schema.get("required"), schema.get("properties")
    required = {r for r in listed if isinstance(r, str)} if isinstance(listed, list) else set()
    for param, prop in (properties.items() if isinstance(properties, dict) else ()):
        found += _one_parameter(param, prop if isinstance(prop, dict) else {}, param in required)
    return found


def _one_parameter(param: str, prop: dict[str, Any], required: bool) -> list[Finding]:
    desc = prop.get("description", "")
    if not isinstance(desc, str) or not desc:
        return [Finding("param_description", f"parameter {param!r} has no description")]
    found: list[Finding] = []
    if not desc.isascii():  # which characters: a curly quote or a dash is hard to spot in a long one
        found.append(Finding("english", f"parameter {param!r} description has {_non_ascii(desc)}"))
    example = EXAMPLE_RE.search(desc)
    if not example:
        found.append(Finding(
            "param_example", f"parameter {param!r} description needs an example (e.g. ...): {desc!r}"))
    if _non_trivial(prop) and len(desc) < 20:
        found.append(Finding(
            "param_detail", f"parameter {param!r} is an object/array/enum; describe it in 20+ chars"))
    if example and len(desc[:example.start()].strip(" ,;:.")) < PARAM_HOW_CHARS:
        found.append(Finding(
            "param_how", f"parameter {param!r} description must say what the value is and how it is "
                         f"used before its example: {desc!r}"))
    # the When is said outside the example, which runs to the next ';' or '(': "e.g. 'for x'" says nothing
    said = desc[:example.start()] + re.sub(r"^[^;(]*", "", desc[example.end():]) if example else desc
    if not (REQUIRED_WHEN_RE if required else PARAM_WHEN_RE).search(said):
        found.append(Finding("param_when", _no_when(param, desc, required)))
    if not required and "default" not in prop:
        found.append(Finding("optional_default", f"optional parameter {param!r} has no default"))
    return found


def _no_when(param: str, desc: str, required: bool) -> str:
    if required:
        return (f"required parameter {param!r} description must say for what or in which case the value is "
                f"given, where it comes from or what it decides (for, when, if, unless, only, after, before, "
                f"from, decides, selects, chooses): {desc!r}. A passing one: {REQUIRED_WHEN_EXAMPLE!r}")
    return (f"optional parameter {param!r} description must say when to pass it or its default (default, omit, "
            f"when, with, without, if, unless, only, after, for): {desc!r}. A passing one: {OPTIONAL_WHEN_EXAMPLE!r}")


def _non_trivial(prop: dict[str, Any]) -> bool:
    """An object, array or enum, also as one of its alternatives or one of a list of types."""
    kinds = [prop] + [k for key in ("anyOf", "oneOf", "allOf") if isinstance(prop.get(key), list)
                      for k in prop[key] if isinstance(k, dict)]
    # msgspec puts Enum classes and nested Structs under $defs: a $ref is always an enum or object
    return any("enum" in k or "$ref" in k or bool({"object", "array"} & _types(k)) for k in kinds)


def _types(schema: dict[str, Any]) -> set[str]:
    """A schema's `type`: one name, or a list of them (`["array", "null"]`)."""
    kind = schema.get("type")
    if isinstance(kind, str):
        return {kind}
    return {t for t in kind if isinstance(t, str)} if isinstance(kind, list) else set()


