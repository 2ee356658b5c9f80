"""A JSON Schema `pattern` takes what ECMA-262 (a browser's RegExp, node's) takes, through jsonschema as
scvd runs it: the answers below are node's `new RegExp(pattern).test(text)`."""

from __future__ import annotations

import jsonschema
import pytest

from scvd.bounded_regex import format_checker, install, unreadable

CASES = [  # (pattern, text, whether ECMA-262 finds a match)
    ("^[A-Za-z0-9._-]+$", "main", True), ("^[A-Za-z0-9._-]+$", "main\n", False),  # $ is the end, no more
    (r"^a$|^b$", "b\n", False), (r"^\$$", "$", True), (r"^[$]$", "$", True), (r"^\\$", "\\\n", False),
    (r"^\d+$", "123", True), (r"^\d+$", "١٢٣", False), (r"^\w+$", "a_1", True), (r"^\w+$", "é", False),
    (r"^[\w ]+$", "Grüße", False),
    (r"\bx", "éx", True), (r"\Bx", "ax", True), (r"^\W$", "é", True),
    (r"^\s$", "\u3000", True), (r"^\s$", "\x85", False), (r"^\S+$", "a\ufeffb", False), (r"^\S+$", "a\x1cb", True),
    (r"^.$", "\r", False), (r"^.$", "\u2028", False), (r"^.$", "é", True), (r"^[.]$", "a", False),
    # in a class: ASCII too, a negated shorthand beside other members, a `-` beside a shorthand
    (r"^[\d]$", "٣", False), (r"^[\W]$", "é", True), (r"^[^\W]$", "a", True), (r"^[^\W]$", "é", False),
    (r"^[a\D]$", "5", False), (r"^[a\D]$", "a", True), (r"^[^a\S]$", " ", True), (r"^[^a\S]$", "a", False),
    (r"^[\d-z]$", "-", True), (r"^[\d-z]$", "m", False), (r"^[a-\d]$", "b", False), (r"^[^^\W]$", "^", False),
    (r"^[\b]$", "\b", True), ("^[^]$", "\n", True), ("^a[]", "a", False), (r"^[[]$", "[", True),
    (r"^\(?s\).$", "s)x\n", False),  # an escaped `(` opens no flags
]

PYTHONS = [  # (pattern, text, whether it matches): what ECMA-262 has no use for is read as Python reads it
    # an inline flag: the whole pattern as Python reads it, its `.`, `^` and `$` what its flags make them
    ("(?s)^.{1,200}$", "line one\nline two", True), ("(?m)^[a-z]+$", "abc\n123", True),
    ("(?x) ^ [a-z]+ $  # letters [only", "abc", True), ("(?i)^[a-z]+$", "Main\n", True), (r"(?i)^\w+$", "Naïve", True),
    ("(?x:^ [a-z]+ $)", "abc\n", True),  # a scoped flag ECMA has not is Python's too
    # a `]` first in a class is one of its members; the rest is read as ECMA-262 reads it
    ("^[^]]+$", "abc", True), ("^[^]]+$", "a]b", False), ("^[]a-z]+$", "a]b", True), ("^[]a-z]+$", "a]b\n", False),
    (r"^[]\d]+$", "]٣", False),
]


@pytest.mark.parametrize(("pattern", "text", "matches"), CASES)
def test_a_pattern_takes_what_ecma_262_takes(pattern, text, matches):
    install()
    assert jsonschema.Draft202012Validator({"pattern": pattern}).is_valid(text) is matches


UNICODE = [  # what ECMA-262's u flag (JSON Schema's) reads that Python's re does not: node's answers too
    (r"^(?<y>\d{4})-\k<y>$", "2024-2024", True), (r"^(?<y>\d{4})-\k<y>$", "2024-2025", False),
    (r"^(?<a>x)\1$", "xx", True),
    (r"^\p{L}+$", "Grüße", True), (r"^\p{L}+$", "ab1", False), (r"^\p{L}+$", "Grüße\n", False),
    (r"^\P{L}+$", "12", True), (r"^[\p{Lu}\d]+$", "A1", True), (r"^[\p{Lu}\d]+$", "a1", False),
    (r"^[^\P{L}]+$", "é", True), (r"^\p{Script=Greek}+$", "αβ", True),
    (r"^\u{1F600}$", "😀", True), (r"^[\u{1F600}-\u{1F64F}]$", "😃", True),
    (r"^[\uD83D\uDE00-\uD83D\uDE4F]$", "😃", True),  # a surrogate pair is the one code point it encodes
    (r"^\cJ$", "\n", True), (r"^[\cI]$", "\t", True),
]
MODIFIERS = [  # ES2025's scoped modifiers, as its spec reads them (node 20 has none): the rest is still ECMA's
    ("^(?i:ab)c$", "ABc", True), ("^(?i:ab)c$", "ABC", False), ("^(?i:[a-z]+)$", "Main\n", False),
    (r"^(?i:[a-z])\d$", "a٣", False), ("^(?i:[a-z])$", "ſ", True),
    ("^(?m:a$)", "a\rb", True), ("^(?m:a$)b", "a\nb", False), ("(?m:^b)", "a\u2028b", True), ("(?m:^b)", "ab", False),
    ("^(?s:.+)$", "a\nb", True), ("^(?s:(?-s:.))$", "\n", False), ("^(?s:a).$", "a\n", False),
    ("^(?i-s:a.)$", "A\n", False),
]


@pytest.mark.parametrize(("pattern", "text", "matches"), UNICODE + MODIFIERS)
def test_a_pattern_in_ecma_262s_own_syntax_loads_and_takes_what_it_takes(pattern, text, matches):
    """Python's re refused all but the modifiers when a tool.json loaded (`(?<name>...)` and `\\p{L}` too); the
    regex package refused `\\k<name>`, `\\u{...}` and `\\cJ`, and read `\\uD83D\\uDE00` as two surrogates;
    any `(?i:...)` made the whole pattern Python's (`$` before a final newline too)."""
    install()
    cls = jsonschema.Draft202012Validator
    cls.check_schema({"pattern": pattern}, format_checker=format_checker(cls))  # a tool.json with it loads
    assert cls({"pattern": pattern}).is_valid(text) is matches


@pytest.mark.parametrize(("pattern", "says"), [
    (r"^\p{Changes_When_NFKC_Casefolded}+$", "`\\p{Changes_When_NFKC_Casefolded}` is no Unicode property the regex "
                                             "package knows; name one it knows"),
    (r"^(?:\q{ab}|c)$", "`\\q{...}` is ECMA's v flag's, which JSON Schema does not use; write its strings as "
                         "alternatives, (?:ab|c)"),
    (r"^\k<nope>$", 'the regex package says "unknown group"; write it as ECMA-262 (with its u flag) reads it'),
])
def test_a_pattern_the_regex_package_cannot_read_says_what_and_what_to_write(pattern, says):
    assert says in unreadable(pattern)


@pytest.mark.parametrize(("pattern", "text", "matches"), PYTHONS)
def test_what_only_python_reads_is_read_as_python_reads_it(pattern, text, matches):
    """scvd's script tools read patterns as Python did until they were ECMA-262's: inline flags
    and a `]` first in a class (which ECMA has no use for) mean what their author meant then."""
    install()
    cls = jsonschema.Draft202012Validator
    cls.check_schema({"pattern": pattern}, format_checker=format_checker(cls))  # a tool.json with it loads
    assert jsonschema.Draft202012Validator({"pattern": pattern}).is_valid(text) is matches


@pytest.mark.parametrize(("pattern", "text", "matches"), [("^[a-z]+$", "a\n", False), (r"^\d$", "٣", False),
                                                          (r"^\d$", "3", True)])
def test_a_property_name_is_matched_so_too(pattern, text, matches):
    """patternProperties, and additionalProperties: false beside it, which looks at all of them at once."""
    install()
    typed = {"patternProperties": {pattern: {"type": "integer"}}}
    assert jsonschema.Draft202012Validator(typed).is_valid({text: "x"}) is not matches
    closed = {"patternProperties": {pattern: {}, "^z$": {}}, "additionalProperties": False}
    assert jsonschema.Draft202012Validator(closed).is_valid({text: 1}) is matches


def test_draft_2019_09s_unevaluated_properties_reads_a_pattern_so_too():
    """2019-09's unevaluatedProperties looks up the names patternProperties took with its own re.search:
    Python's reading there took "k1\\n" as evaluated, with no time bound either."""
    from scvd.schema_keywords import linear

    install()
    schema = {"$schema": "https://json-schema.org/draft/2019-09/schema",
              "patternProperties": {r"^k\d$": {"type": "integer"}}, "unevaluatedProperties": False}
    validator = linear(jsonschema.validators.validator_for(schema))(schema)
    assert validator.is_valid({"k1": 1})
    assert not validator.is_valid({"k1\n": 1}) and not validator.is_valid({"k١": 1})
