"""Script tools through the real daemon, its socket and real subprocesses.

Each tool is a folder under $SCV_HOME/tools/script/ with a tool.json and a shell
script, written before the daemon starts (or before SIGHUP), so no test executes
a file it is still writing.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import urllib.parse
from pathlib import Path
from typing import Any

import msgspec
import pytest

from harness import pid_gone, wait_until
from scvd import protocol as p
from scvd.secrets import SecretStore

import daemon_forks
from conftest import ROOT, base_env, wait_pending
from helpers import lockable_keyring
from helpers.probe_tools import wait_event

DESCRIPTION = ("Count the words in a text given as argument.\n"
               "Use for quick statistics; bash for anything else.")
PARAMETERS = {"type": "object", "required": ["text"], "additionalProperties": False, "properties": {
    "text": {"type": "string", "maxLength": 100, "description": "The text to count, from the user's message, e.g. 'a b c'."}}}
# reads the arguments from stdin, answers JSON on stdout, talks on stderr
WORDS = """#!/bin/bash
args=$(cat)
echo "counting" >&2
python3 -c 'import json,sys; a=json.loads(sys.argv[1]); print(json.dumps({"words": len(a["text"].split()), "cwd": __import__("os").getcwd()}))' "$args"
"""


def make_tool(home: Path, name: str, script: str, **spec: Any) -> Path:
    folder = home / "tools" / "script" / name
    folder.mkdir(parents=True, exist_ok=True)
    body = {"description": DESCRIPTION, "parameters": PARAMETERS, **spec}
    (folder / "tool.json").write_text(json.dumps(body))
    run = folder / "run"
    run.write_text(script)
    run.chmod(0o700)
    return folder


def approve(owner: Any, call_id: str) -> p.ApprovalInfo:
    pending = [a for a in wait_pending(owner) if a.call_id == call_id][0]
    owner.request(p.ApprovalDecide, approval_id=pending.approval_id, decision="approve")
    return pending


def test_registered_as_script_name_with_its_schema_and_run_after_approval(make_daemon, scv_home, workspace):
    folder = make_tool(scv_home, "words", WORDS)
    d = make_daemon(home=scv_home)
    with d.client() as c, d.client(name="owner") as owner:
        tools = {t.name: t for t in c.request(p.ToolsList).tools}
        info = tools["script_words"]
        assert info.input_schema == PARAMETERS and info.risk == "process"
        assert info.description == DESCRIPTION and info.flags["timeout_seconds"] is None
        sid = c.open_session(workspace)
        call_id = c.start_call(sid, "script_words", {"text": "one two three"})
        pending = approve(owner, call_id)
        done = c.wait_call(call_id)
    assert done.ok, done.error
    assert done.result == {"words": 3, "cwd": str(workspace.resolve())}  # stdout JSON is the result
    # the approver saw the folder, the command, the arguments and the declared secrets
    assert pending.tool == "script_words" and pending.risk == "process"
    assert pending.details["folder"] == str(folder) and pending.details["command"] == str(folder / "run")
    assert json.loads(pending.details["arguments"]) == {"text": "one two three"}
    assert pending.details["secrets"] == []


@pytest.mark.one_loop
def test_a_bad_argument_is_refused_before_approval_naming_the_field(make_daemon, scv_home, workspace):
    make_tool(scv_home, "words", WORDS)
    d = make_daemon(home=scv_home)
    with d.client() as c:
        sid = c.open_session(workspace)
        done = c.call(sid, "script_words", {"text": 42})
        assert done.error.kind == "invalid_arguments"
        assert "`text`" in done.error.message and "42 is not of type 'string'" in done.error.message
        assert c.request(p.ApprovalsList).approvals == []


@pytest.mark.one_loop
def test_a_misnamed_argument_is_refused_naming_the_one_meant(make_daemon, scv_home, workspace):
    # it said `'text' is a required property`: the model added `text`, kept `txt`, and was refused again
    make_tool(scv_home, "words", WORDS)
    d = make_daemon(home=scv_home)
    with d.client() as c:
        done = c.call(c.open_session(workspace), "script_words", {"txt": "one two"})
    assert done.error.kind == "invalid_arguments"
    assert done.error.message == ("script_words: Additional properties are not allowed ('txt' was "
                                  "unexpected); did you mean 'text'? (properties: text)")


SLOW = "^(a|aa)+$"  # backtracks: against 36 a's and a "!", Python's re spends seconds, holding the GIL


@pytest.mark.parametrize("where", ["pattern", "patternProperties"])
def test_a_pattern_that_backtracks_fails_the_call_and_holds_no_one_else_up(make_daemon, scv_home, workspace, where):
    """re matched a tool.json's `pattern` holding the GIL, with no bound: a catastrophic one against a
    model's argument froze scvd and all its clients. The match has a time bound now, and the call
    fails saying which pattern to fix; a value that merely does not match is refused as before."""
    if where == "pattern":
        parameters = {"type": "object", "required": ["slug"], "properties": {"slug": {
            "type": "string", "pattern": SLOW, "description": "A slug of a's, for the pattern check, e.g. 'aaa'."}}}
        slow, plain = {"slug": "a" * 36 + "!"}, {"slug": "b"}
    else:  # a property name is matched against it too (additionalProperties: false looks there)
        parameters = {"type": "object", "patternProperties": {SLOW: {"type": "string"}},
                      "additionalProperties": False}
        slow, plain = {"a" * 36 + "!": "x"}, {"b": "x"}
    folder = make_tool(scv_home, "slugs", WORDS, parameters=parameters)
    d = make_daemon(home=scv_home)
    with d.client() as c, d.client(name="other") as other:
        sid = c.open_session(workspace)
        call_id = c.start_call(sid, "script_slugs", slow)
        assert other.request(p.Ping)  # served meanwhile
        done = c.wait_call(call_id)
        assert done.error.kind == "failed", done.error
        assert done.error.message == (
            "script_slugs: matching an argument against a `pattern` of its parameters took over 0.5 s (the pattern "
            "backtracks on such text, e.g. a group quantified over characters it also repeats); simplify that "
            f"pattern in {folder / 'tool.json'}")
        refused = c.call(sid, "script_slugs", plain)
        assert refused.error.kind == "invalid_arguments" and ("does not match" in refused.error.message
                                                               or "not allowed" in refused.error.message), refused.error


ECHO = """#!/bin/bash
cat
"""
CHECKOUT = {"type": "object", "required": ["branch"], "additionalProperties": False, "properties": {
    "branch": {"type": "string", "pattern": "^[A-Za-z0-9._-]+$", "description": "The branch to check out, from git branch, e.g. 'main'."},
    "issue": {"type": "string", "pattern": "^\\d+$", "default": "1",
              "description": "The issue number; pass it to override the default, e.g. '42'."},
    "email": {"type": "string", "format": "email", "default": "a@b.c",
              "description": "The author's email; pass it to override the default, e.g. 'a@b.c'."},
    "labels": {"type": "object", "patternProperties": {"^[a-z]+$": {"type": "string"}},
               "additionalProperties": False, "default": {},
               "description": "Labels by name; pass them to override the default, e.g. {\"bug\": \"yes\"}."}}}


@pytest.mark.one_loop
def test_a_pattern_refuses_what_its_json_schema_reading_refuses(make_daemon, scv_home, workspace):
    """JSON Schema patterns are ECMA-262's: `$` is the very end and `\\d` ASCII digits. Python's `$`
    matched before a final newline and its `\\d` any script's digits, so "main\\n" reached a script
    building a command line from a branch name its author's pattern had refused."""
    make_tool(scv_home, "checkout", ECHO, parameters=CHECKOUT, risk="read_only", always_allow=True)
    d = make_daemon(home=scv_home)
    with d.client() as c:
        sid = c.open_session(workspace)
        for arguments, field in (({"branch": "main\n"}, "branch"), ({"branch": "main\n--upload-pack=x"}, "branch"),
                                 ({"branch": "m", "issue": "١٢٣"}, "issue"),
                                 ({"branch": "m", "labels": {"bug\n": "yes"}}, "labels")):
            refused = c.call(sid, "script_checkout", arguments)
            assert refused.error.kind == "invalid_arguments", (arguments, refused)
            assert f"argument `{field}`" in refused.error.message, refused.error
        refused = c.call(sid, "script_checkout", {"branch": "main\n"})
        assert refused.error.message == ("script_checkout: argument `branch`: 'main\\n' does not match "
                                         "'^[A-Za-z0-9._-]+$'"), refused.error
        # `format` is an annotation (JSON Schema 2020-12's default): scvd does not check it
        fine = {"branch": "release-1.2_x", "issue": "123", "email": "not an email", "labels": {"bug": "yes"}}
        done = c.call(sid, "script_checkout", fine)
        assert done.ok and done.result == fine, done.error


WRITTEN_FOR_PYTHON = {"type": "object", "required": ["summary"], "additionalProperties": False, "properties": {
    "summary": {"type": "string", "pattern": "(?s)^.{1,200}$", "description": "A summary for the log, e.g. 'one line'."},
    "names": {"type": "string", "pattern": "(?m)^[a-z]+$", "default": "a",
              "description": "Names, one a line; pass them to override the default, e.g. 'ab'."},
    "title": {"type": "string", "pattern": "^[^]]+$", "default": "t",
              "description": "A title; pass it to override the default, e.g. 'Notes'."},
    "tag": {"type": "string", "pattern": "^[]a-z]+$", "default": "t",
            "description": "A tag; pass it to override the default, e.g. 'todo'."}}}


@pytest.mark.one_loop
def test_a_pattern_written_for_python_takes_what_its_author_meant(make_daemon, scv_home, workspace):
    """tool.json patterns were Python's before scvd read them as ECMA-262's: an inline flag, which
    ECMA has no use for, keeps its meaning (`(?s)` lets `.` take a newline, `(?m)` `$` match at a
    line's end), and a `]` first in a class is a member of it, not ECMA's `[^]` followed by `]`."""
    make_tool(scv_home, "note", ECHO, parameters=WRITTEN_FOR_PYTHON, risk="read_only", always_allow=True)
    d = make_daemon(home=scv_home)
    with d.client() as c:
        sid = c.open_session(workspace)
        fine = {"summary": "line one\nline two", "names": "abc\nxyz", "title": "abc", "tag": "a]b"}
        done = c.call(sid, "script_note", fine)
        assert done.ok and done.result == fine, done.error
        # the `]` is a member: `^[^]]+$` refuses one; the rest of such a pattern is ECMA's, `$` the very end
        for arguments, field in (({"summary": "s", "title": "a]b"}, "title"), ({"summary": "s", "tag": "ab\n"}, "tag")):
            refused = c.call(sid, "script_note", arguments)
            assert refused.error.kind == "invalid_arguments", (arguments, refused)
            assert f"argument `{field}`" in refused.error.message, refused.error


ECMA_SYNTAX = {"type": "object", "required": ["span"], "additionalProperties": False, "properties": {
    "span": {"type": "string", "pattern": r"^(?<y>\d{4})-\k<y>$", "description": "A year twice, for the span to note, e.g. '2024-2024'."},
    "name": {"type": "string", "pattern": r"^\p{L}+$", "default": "a",
             "description": "A name, in letters; pass it to override the default, e.g. 'Zoe'."},
    "code": {"type": "string", "pattern": r"^(?i:[a-z]+)-\d+$", "default": "a-1",
             "description": "A code; pass it to override the default, e.g. 'AB-12'."}}}
UNKNOWN_PROPERTY = {"type": "object", "properties": {"word": {
    "type": "string", "pattern": r"^\p{Changes_When_NFKC_Casefolded}+$", "default": "A",
    "description": "A word; pass it to override the default, e.g. 'A'."}}}


@pytest.mark.one_loop
def test_a_pattern_in_ecma_262s_own_syntax_loads_and_refuses_what_ecma_refuses(make_daemon, scv_home, workspace):
    """JSON Schema reads a pattern with ECMA-262's u flag: Python's re refused `(?<y>...)`, `\\k<y>` and
    `\\p{L}`, so such a tool did not load; and a `(?i:...)` made the whole pattern Python's, its `$` letting
    a final newline through. One the regex package cannot read is a load error naming the token."""
    make_tool(scv_home, "dates", ECHO, parameters=ECMA_SYNTAX, risk="read_only", always_allow=True)
    odd = make_tool(scv_home, "odd", ECHO, parameters=UNKNOWN_PROPERTY, risk="read_only", always_allow=True)
    d = make_daemon(home=scv_home)
    with d.client() as c:
        sid = c.open_session(workspace)
        fine = {"span": "2024-2024", "name": "Zoë", "code": "AB-12"}
        done = c.call(sid, "script_dates", fine)
        assert done.ok and done.result == fine, done.error
        for arguments, field in (({"span": "2024-2025"}, "span"), ({"span": "2024-2024", "name": "Zoë1"}, "name"),
                                 ({"span": "2024-2024", "code": "AB-12\n"}, "code")):
            refused = c.call(sid, "script_dates", arguments)
            assert refused.error.kind == "invalid_arguments", (arguments, refused)
            assert f"argument `{field}`" in refused.error.message, refused.error
        (error,) = c.request(p.ToolsList).errors
    assert (error.name, error.source) == ("script_odd", str(odd / "tool.json"))
    assert error.message == (
        "rule 'parameters': the pattern '^\\\\p{Changes_When_NFKC_Casefolded}+$' at properties/word/pattern cannot be "
        "read: `\\p{Changes_When_NFKC_Casefolded}` is no Unicode property the regex package knows; name one it "
        "knows (`\\p{L}`, `\\p{Lu}`, `\\p{Script=Greek}`, `\\p{Alphabetic}`) or list the characters in a class")


@pytest.mark.one_loop
def test_null_for_an_optional_argument_is_left_out_and_for_a_required_one_says_it_is_missing(
        make_daemon, scv_home, workspace):
    # as models send it, and as built-in tools take it (seed 003: handlers defend against nil)
    parameters = {"type": "object", "required": ["text"], "additionalProperties": False, "properties": {
        "text": {"type": "string", "description": "The text to count, from the user's message, e.g. 'a b'."},
        "sep": {"type": "string", "default": " ", "description": "Default ' '; pass it to split on another, e.g. ','."}}}
    make_tool(scv_home, "words", WORDS, parameters=parameters)
    d = make_daemon(home=scv_home)
    with d.client() as c, d.client(name="owner") as owner:
        sid = c.open_session(workspace)
        call_id = c.start_call(sid, "script_words", {"text": "one two", "sep": None})
        pending = approve(owner, call_id)
        assert c.wait_call(call_id).result["words"] == 2
        assert json.loads(pending.details["arguments"]) == {"text": "one two"}  # what the script got
        missing = c.call(sid, "script_words", {"text": None})
        assert missing.error.kind == "invalid_arguments"
        assert missing.error.message == "script_words: 'text' is a required property"
        wrong = c.call(sid, "script_words", {"text": None, "sep": 5})
        assert wrong.error.message == "script_words: 'text' is a required property"


@pytest.mark.one_loop
def test_a_whole_number_sent_as_a_float_reaches_the_script_as_an_integer(make_daemon, scv_home, workspace):
    # JSON Schema's `integer` takes 3.0, as models send it; the script got 3.0, and "x" * 3.0 failed
    parameters = {"type": "object", "required": ["count"], "properties": {
        "count": {"type": "integer", "description": "How many x to print, from 0 up, e.g. 3."}}}
    repeat = "#!/bin/sh\nexec python3 -c 'import json,sys; print(\"x\" * json.load(sys.stdin)[\"count\"])'\n"
    make_tool(scv_home, "repeat", repeat, parameters=parameters, risk="read_only")
    d = make_daemon(home=scv_home)
    with d.client() as c:
        done = c.call(c.open_session(workspace), "script_repeat", {"count": 3.0})
    assert done.ok, done.error
    assert done.result == "xxx\n"


def test_a_bad_argument_is_refused_in_arrival_order_after_the_calls_ahead(make_daemon, scv_home, workspace):
    """A schema check keeps its call's lane place: its refusal comes once the call ahead is done."""
    make_tool(scv_home, "words", WORDS)
    d = make_daemon(home=scv_home)
    with d.client() as c, d.client(name="owner") as owner:
        sid = c.open_session(workspace)
        ahead = c.start_call(sid, "write", {"path": "n.txt", "content": "x", "mode": "create"})
        pending = wait_pending(owner)[0]
        bad = c.start_call(sid, "script_words", {"text": 42})
        c.request(p.Ping)
        assert not [e for e in c.core.events if isinstance(e, p.CallCompleted)], c.core.events
        owner.request(p.ApprovalDecide, approval_id=pending.approval_id, decision="deny")
        assert c.wait_call(ahead).error.kind == "denied"
        assert c.wait_call(bad).error.kind == "invalid_arguments"


COUNT_ROWS = """#!/bin/bash
python3 -c 'import json, sys; print(len(json.load(sys.stdin)["rows"]))'
"""
ROWS = {"type": "object", "required": ["rows"], "properties": {"rows": {
    "type": "array", "description": "The rows to count, from the table, e.g. [{\"a\": 1, \"b\": \"x\"}].", "items": {
        "type": "object", "required": ["a", "b"],
        "properties": {"a": {"type": "integer"}, "b": {"type": "string"}}}}}}


def test_checking_large_arguments_does_not_stall_other_clients(make_daemon, scv_home, workspace):
    """jsonschema over a ~1 MiB argument takes about a second here: on a worker thread, so another
    client's status is answered while it runs (on the loop, that status came only after the check,
    with the call's approval already pending)."""
    make_tool(scv_home, "rows", COUNT_ROWS, parameters=ROWS, risk="read_only")
    d = make_daemon('[server]\nclient_frame_bytes = 4194304\n[approvals]\npolicy = "always"\n', home=scv_home)
    rows = [{"a": i, "b": "x"} for i in range(80_000)]
    with d.client() as c, d.client(name="other") as other, d.client(name="owner") as owner:
        assert "script_rows" in [t.name for t in c.request(p.ToolsList).tools]
        sid = c.open_session(workspace)
        call_id = c.start_call(sid, "script_rows", {"rows": rows})
        status = other.request(p.Status)  # answered while the arguments are being checked
        assert status.running_calls == 1 and status.pending_approvals == 0
        approve(owner, call_id)
        done = c.wait_call(call_id)
        assert done.ok and done.result == 80_000, done.error
        bad = c.call(sid, "script_rows", {"rows": [*rows[:10], {"a": "one", "b": 2}, {"a": None}]})
        assert bad.error.kind == "invalid_arguments"
        assert bad.error.message == "script_rows: argument `rows[10].a`: 'one' is not of type 'integer'"


COUNT_TAGS = """#!/bin/bash
python3 -c 'import json, sys; print(len(json.load(sys.stdin)["tags"]))'
"""
TAGS = {"type": "object", "required": ["tags"], "properties": {"tags": {
    "type": "array", "uniqueItems": True, "description": "Distinct tags to count, from the tree, e.g. [\"a\", 1]."}}}


@pytest.mark.one_loop
def test_unique_items_over_a_hundred_thousand_mixed_items_is_checked_with_json_schema_equality(
        make_daemon, scv_home, workspace):
    """jsonschema compared mixed items (1 and "1" do not sort) pair by pair: 110,000 took about 45
    minutes on one of the two threads that check script tools' arguments. Equal items are still
    JSON Schema's: 1.0 repeats 1, and an object its keys in another order; true is not 1."""
    make_tool(scv_home, "tags", COUNT_TAGS, parameters=TAGS, risk="read_only", always_allow=True)
    d = make_daemon('[server]\nclient_frame_bytes = 4194304\n', home=scv_home)
    tags = [x for i in range(25_000) for x in (i, str(i), [i], {"n": i, "s": "x"})]
    with d.client() as c:
        sid = c.open_session(workspace)
        done = c.call(sid, "script_tags", {"tags": [*tags, True, [False], {"n": 0}]})
        assert done.ok and done.result == 100_003, done.error  # true beside 1, [false] beside [0]
        for repeated in (7.0, [7.0], {"s": "x", "n": 7}):
            tagged = [*tags, repeated]
            refused = c.call(sid, "script_tags", {"tags": tagged})
            assert refused.error.kind == "invalid_arguments", (repeated, refused)
            assert refused.error.message == (  # jsonschema's message, cut as any refused value is
                f"script_tags: argument `tags`: {repr(tagged)[:80]}... (100,001 items) has non-unique elements")


COUNT_BOTH = """#!/bin/bash
python3 -c 'import json, sys; a = json.load(sys.stdin); print(len(a["ids"]) + len(a["counts"]))'
"""
EVALUATED = {"type": "object", "required": ["ids", "counts"], "properties": {
    "ids": {"type": "array", "contains": {"type": "integer"}, "unevaluatedItems": False,
            "description": "Whole numbers only, e.g. [1, 2]."},
    "counts": {"type": "object", "patternProperties": {"^k": {"type": "integer"}}, "unevaluatedProperties": False,
               "description": "Counts by key, for keys starting with k, e.g. {\"k1\": 3}."}}}


@pytest.mark.one_loop
def test_unevaluated_items_and_properties_over_150_000_are_checked_in_one_pass(make_daemon, scv_home, workspace):
    """jsonschema looked each index or key up in a list of all those evaluated: minutes a call on a
    checking thread. What is refused, and how it is said, is jsonschema's."""
    make_tool(scv_home, "both", COUNT_BOTH, parameters=EVALUATED, risk="read_only", always_allow=True)
    d = make_daemon('[server]\nclient_frame_bytes = 8388608\n', home=scv_home)
    ids, counts = list(range(150_000)), {f"k{i}": i for i in range(150_000)}
    with d.client() as c:
        sid = c.open_session(workspace)
        done = c.call(sid, "script_both", {"ids": ids, "counts": counts})
        assert done.ok and done.result == 300_000, done.error
        # small: each item costs jsonschema tens of µs (linear), and this is about what it refuses
        refused = c.call(sid, "script_both", {"ids": [1, "x", 2], "counts": {}})
        assert refused.error.message == ("script_both: argument `ids`: Unevaluated items are not allowed "
                                         "('x' was unexpected)"), refused.error
        refused = c.call(sid, "script_both", {"ids": [1], "counts": {"k1": 1, "x": 1}})
        assert refused.error.message == ("script_both: argument `counts`: Unevaluated properties are not "
                                         "allowed ('x' was unexpected)"), refused.error


@pytest.mark.one_loop
def test_approval_follows_the_declared_risk(make_daemon, scv_home, workspace):
    make_tool(scv_home, "peek", "#!/bin/bash\necho plain text, not JSON\n", risk="read_only")
    d = make_daemon(home=scv_home)
    with d.client() as c:
        sid = c.open_session(workspace)
        done = c.call(sid, "script_peek", {"text": "x"})  # read_only under on-risk: no approval
    assert done.ok and done.result == "plain text, not JSON\n"


@pytest.mark.one_loop
def test_the_flags_tool_json_sets_hide_the_tool_and_spare_it_the_gate(make_daemon, scv_home, workspace):
    """Seed 003's flags as a script sets them in tool.json: system_use keeps it out of the ordinary
    listing, always_allow runs it unasked even under policy always."""
    make_tool(scv_home, "peek", "#!/bin/bash\necho seen\n", risk="read_only", system_use=True, always_allow=True,
              concurrent=True)
    d = make_daemon('[approvals]\npolicy = "always"\n', home=scv_home)
    with d.client(approver=True) as c:
        assert "script_peek" not in {t.name for t in c.request(p.ToolsList).tools}
        info = {t.name: t for t in c.request(p.ToolsList, include_system=True).tools}["script_peek"]
        assert [info.flags[k] for k in ("system_use", "always_allow", "concurrent")] == [True, True, True]
        call_id = c.start_call(c.open_session(workspace), "script_peek", {"text": "x"})
        done = wait_event(c, lambda e: isinstance(e, (p.ApprovalRequested, p.CallCompleted)) and e.call_id == call_id)
    assert isinstance(done, p.CallCompleted) and done.ok and done.result == "seen\n", done


@pytest.mark.one_loop
@pytest.mark.parametrize("sandbox", ["off", pytest.param("bwrap", marks=pytest.mark.bwrap)])
@pytest.mark.parametrize("script, why", [
    ("#!/bin/sh\r\necho hi\r\n", "its #! line ends in a carriage return (Windows line endings)"),
    ("#!/usr/bin/python-none\nprint(1)\n", "its #! line names '/usr/bin/python-none', which does not exist"),
])
def test_a_script_whose_interpreter_cannot_start_says_so_not_that_the_file_is_missing(
        make_daemon, scv_home, workspace, sandbox, script, why):
    """A script saved with Windows line endings, or naming an interpreter this system lacks, failed with
    `cannot start .../run: No such file or directory` (bwrap's `execvp ...` in the sandbox) of a file
    that is plainly there."""
    folder = make_tool(scv_home, "words", script, risk="read_only")
    d = make_daemon(f'[sandbox]\nmode = "{sandbox}"\n', home=scv_home)
    with d.client() as c:
        done = c.call(c.open_session(workspace), "script_words", {"text": "x"})
    assert done.error.kind == "failed"
    assert done.error.message.startswith(f"script_words: cannot start {folder / 'run'}: {why}"), done.error.message


@pytest.mark.one_loop
def test_a_failing_script_reports_its_exit_and_the_tails_of_stderr_and_stdout(make_daemon, scv_home, workspace):
    """What the script printed on stdout was dropped from the error: a script that says why it failed
    there (`echo "error: no such repo"; exit 1`) left the person with the exit code alone."""
    make_tool(scv_home, "fails", "#!/bin/bash\necho 'error: no such repo'\necho 'upstream said: 500' >&2\nexit 3\n",
              risk="read_only")
    d = make_daemon(home=scv_home)
    with d.client() as c:
        done = c.call(c.open_session(workspace), "script_fails", {"text": "x"})
    assert done.error.kind == "failed"
    assert done.error.message == "script_fails failed (exit 3); stderr: upstream said: 500; stdout: error: no such repo"


SLEEPER = """#!/bin/bash
sleep 1000 &
echo $! > "$SCV_TOOL_PIDFILE_DIR/child.pid"
echo started
sleep 1000
"""


def test_killed_at_its_own_tool_json_timeout_with_no_process_left(make_daemon, scv_home, workspace, tmp_path):
    make_tool(scv_home, "sleeper", SLEEPER.replace("$SCV_TOOL_PIDFILE_DIR", str(tmp_path)),
              risk="read_only", timeout=1)
    d = make_daemon(home=scv_home)
    with d.client() as c:
        info = {t.name: t for t in c.request(p.ToolsList).tools}["script_sleeper"]
        assert info.flags["timeout_seconds"] == 1
        done = c.call(c.open_session(workspace), "script_sleeper", {"text": "x"})
    assert done.error.kind == "timeout"
    assert "timeout of 1 s (tool.json)" in done.error.message and "tool.json" in done.error.hint
    # what it printed before the kill comes with the error, as bash's does (it was lost)
    assert done.error.message.endswith("(SIGKILL); 8 bytes of output, they follow:\nstarted\n"), done.error.message
    child = int((tmp_path / "child.pid").read_text())
    wait_until(lambda: pid_gone(child), what="the script's background child to be gone")


def test_what_a_script_printed_before_its_timeout_comes_without_its_secret(make_daemon, scv_home, workspace):
    """The output handed back with a timeout's error (as bash's) held the secret the script printed
    (a `curl -v` showing its Authorization header, then a hang): stdout was redacted for results only."""
    make_tool(scv_home, "hangs", "#!/bin/bash\necho \"Authorization: Bearer $API_TOKEN\"\nsleep 1000\n",
              risk="read_only", secrets=["API_TOKEN"], timeout=1)
    d = make_daemon(home=scv_home, env={"API_TOKEN": "tok-4711-secret", **NO_KEYRING})
    with d.client() as c:
        done = c.call(c.open_session(workspace), "script_hangs", {"text": "x"})
    assert done.error.kind == "timeout"
    assert "tok-4711-secret" not in done.error.message
    assert done.error.message.endswith("they follow:\nAuthorization: Bearer [secret API_TOKEN]\n"), done.error.message


@pytest.mark.one_loop
def test_a_timeout_from_the_default_names_tools_default_timeout_seconds_not_tool_json(make_daemon, scv_home,
                                                                                     workspace, tmp_path):
    """It used to blame tool.json, which sets no timeout, so the hint pointed at a field that was not there."""
    make_tool(scv_home, "sleeper", SLEEPER.replace("$SCV_TOOL_PIDFILE_DIR", str(tmp_path)), risk="read_only")
    d = make_daemon("[tools]\ndefault_timeout_seconds = 1\n", home=scv_home)
    with d.client() as c:
        done = c.call(c.open_session(workspace), "script_sleeper", {"text": "x"})
    assert done.error.kind == "timeout"
    assert "timeout of 1 s (tools.default_timeout_seconds; tool.json sets no \"timeout\")" in done.error.message
    assert done.error.hint == (f"set \"timeout\" in {scv_home / 'tools/script/sleeper/tool.json'}, or raise "
                               "tools.default_timeout_seconds in config.toml, or ask for less per call")


def test_a_long_running_script_logs_its_elapsed_time_against_its_own_timeout(make_daemon, scv_home, workspace):
    """Seed 003: a long-running script tool logs `running name=... elapsed=Ys/Zs` every interval, Z being
    its tool.json timeout (the one its author set, not the dispatch grace on top), else the 15-minute default."""
    waits = "#!/bin/bash\nwhile [ ! -e go ]; do sleep 0.05; done\n"  # runs until the test says go
    make_tool(scv_home, "own", waits, risk="read_only", timeout=60)
    make_tool(scv_home, "default", waits, risk="read_only")
    d = make_daemon("[tools]\nprogress_interval_seconds = 0.2\n", home=scv_home)
    with d.client() as c:
        session = c.open_session(workspace)
        for name, limit in (("script_own", 60), ("script_default", 900)):
            call_id = c.start_call(session, name, {"text": "x"})
            progress = next(e for e in c.events() if isinstance(e, p.CallProgress) and e.call_id == call_id)
            assert progress.timeout_s == limit
            (workspace / "go").touch()
            assert c.wait_call(call_id).ok
            (workspace / "go").unlink()
            assert re.search(rf"running name={name} call={call_id} elapsed=\d+s/{limit}s\n", d.log()), d.log()


@pytest.mark.one_loop
@pytest.mark.bwrap
def test_sandboxed_when_the_sandbox_is_on(make_daemon, scv_home, workspace):
    probe = ("#!/bin/bash\ncat >/dev/null\n"
             "test -e \"$SCV_SOCKET_PATH\" && echo socket-visible || echo socket-hidden\n"
             "touch /etc/scv-script-probe 2>/dev/null && echo wrote-etc || echo etc-read-only\n"
             "echo in > inside.txt && echo wrote-workspace\n")
    folder = make_tool(scv_home, "probe", probe.replace("$SCV_SOCKET_PATH", str(scv_home / "run" / "scvd.sock")))
    d = make_daemon('[sandbox]\nmode = "bwrap"\n', home=scv_home)
    with d.client() as c, d.client(name="owner") as owner:
        call_id = c.start_call(c.open_session(workspace), "script_probe", {"text": "x"})
        pending = approve(owner, call_id)
        done = c.wait_call(call_id)
    assert pending.sandboxed is True and pending.details["sandboxed"] is True
    assert done.ok, done.error
    assert done.result.split() == ["socket-hidden", "etc-read-only", "wrote-workspace"]
    assert (workspace / "inside.txt").read_text() == "in\n"
    assert folder.is_dir()


@pytest.mark.one_loop
@pytest.mark.bwrap
def test_a_tool_folder_linked_in_from_elsewhere_finds_its_files_through_scv_tool_dir_in_the_sandbox(
        make_daemon, scv_home, workspace, tmp_path):
    """SCV_TOOL_DIR named the link in scvd's tools dir, which the sandbox hides: only the folder it
    leads to is bound, so a script reading its own data through SCV_TOOL_DIR failed sandboxed only."""
    real = make_tool(tmp_path / "mine", "lookup", "#!/bin/bash\ncat >/dev/null\ncat \"$SCV_TOOL_DIR/data.txt\"\n")
    (real / "data.txt").write_text("from its folder\n")
    (scv_home / "tools" / "script").mkdir(parents=True)
    (scv_home / "tools" / "script" / "lookup").symlink_to(real)
    d = make_daemon('[sandbox]\nmode = "bwrap"\n', home=scv_home)
    with d.client() as c, d.client(name="owner") as owner:
        call_id = c.start_call(c.open_session(workspace), "script_lookup", {"text": "x"})
        assert approve(owner, call_id).sandboxed is True
        done = c.wait_call(call_id)
    assert done.ok, done.error
    assert done.result == "from its folder\n"


def scvctl(home: Path, *args: str) -> subprocess.CompletedProcess:
    return daemon_forks.scvctl(list(args), base_env(home), timeout=60)


@pytest.mark.one_loop
def test_a_bad_tool_json_is_listed_by_scvctl_tools_errors(make_daemon, scv_home):
    make_tool(scv_home, "words", WORDS)
    bad = make_tool(scv_home, "broken", WORDS, timeout=-1)
    d = make_daemon(home=scv_home)
    out = scvctl(scv_home, "tools", "--errors")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == (f"script_broken: {bad / 'tool.json'}: rule 'timeout': "
                                  "timeout -1 must be a positive number of seconds")
    listing = scvctl(scv_home, "tools")
    assert "script_words [process]" in listing.stdout and "script_broken" not in listing.stdout
    assert "1 tool(s) failed to load: scvctl tools --errors" in listing.stderr
    assert f"skipping script tool {bad / 'tool.json'}: rule 'timeout'" in d.log()
    as_json = json.loads(scvctl(scv_home, "--json", "tools", "--errors").stdout)
    assert as_json == [{"source": str(bad / "tool.json"), "name": "script_broken",
                        "message": "rule 'timeout': timeout -1 must be a positive number of seconds"}]


@pytest.mark.one_loop
def test_scvctl_tools_says_the_last_reload_failed_and_errors_exits_1(make_daemon, scv_home):
    """examples/tools/README.md's `scvctl tools --errors  # nothing listed: it loaded`: after a reload
    refused for a typo in config.toml, it said `no tool failed to load` (exit 0) while the tool just
    copied in was never read; the failure was only in the log and `scvctl status`."""
    d = make_daemon('[approvals]\npolicy = "always"\n', home=scv_home)
    (scv_home / "config.toml").write_text("[approvals]\npolicy = always\n")  # a typo made meanwhile
    make_tool(scv_home, "words", WORDS)
    d.proc.send_signal(signal.SIGHUP)
    wait_until(lambda: "reload failed" in d.log(), what="the refused reload")
    with d.client() as c:
        why = c.status().reload_error
    assert why.startswith(str(scv_home / "config.toml")), why
    told = (f"last reload failed: {why}\nthe tools listed are those of the configuration from before it: a tool "
            "added or changed since is not loaded until a reload takes; fix that (`scvd check-config` checks "
            "config.toml), then reload scvd (`systemctl --user reload scvd`, or SIGHUP to scvd)\n")
    out = scvctl(scv_home, "tools", "--errors")
    assert (out.returncode, out.stdout, out.stderr) == (1, "", told)
    as_json = scvctl(scv_home, "--json", "tools", "--errors")
    assert (as_json.returncode, json.loads(as_json.stdout), as_json.stderr) == (1, [], told)
    listing = scvctl(scv_home, "tools")
    assert (listing.returncode, listing.stderr) == (0, told)
    assert "read [read_only]" in listing.stdout and "script_words" not in listing.stdout
    called = scvctl(scv_home, "call", "--workspace", str(scv_home), "script_words", '{"text": "a"}')
    assert (called.returncode, called.stderr) == (1, (
        "unknown_tool: no tool named 'script_words' is loaded: scvd's last reload failed (`scvctl status` says "
        "why), so a tool added or changed since is not loaded: fix the configuration (`scvd check-config`), then "
        "reload scvd (`systemctl --user reload scvd`, or SIGHUP to scvd); `scvctl tools --errors` lists the tools "
        "that failed to load\n")), called.stderr
    (scv_home / "config.toml").write_text('[approvals]\npolicy = "always"\n')  # what it says to do
    d.proc.send_signal(signal.SIGHUP)
    wait_until(lambda: "configuration reloaded from" in d.log(), what="the reload after the fix")
    out = scvctl(scv_home, "tools", "--errors")
    assert (out.returncode, out.stdout, out.stderr) == (0, "no tool failed to load\n", "")
    assert "script_words [process]" in scvctl(scv_home, "tools").stdout


@pytest.mark.one_loop
def test_calling_a_tool_that_failed_to_load_says_why_and_where_they_are_listed(make_daemon, scv_home, workspace):
    bad = make_tool(scv_home, "broken", WORDS, timeout=-1)
    make_daemon(home=scv_home)
    out = scvctl(scv_home, "call", "--workspace", str(workspace), "script_broken", '{"text": "a"}')
    assert out.returncode == 1
    assert out.stderr == (
        f"unknown_tool: no tool named 'script_broken' is loaded: it failed to load: rule 'timeout': timeout -1 must "
        f"be a positive number of seconds ({bad / 'tool.json'}); fix that, then reload scvd (`systemctl --user "
        "reload scvd`, or SIGHUP to scvd); `scvctl tools --errors` lists the tools that failed to load\n")


@pytest.mark.one_loop
def test_a_tool_json_breaking_several_design_rules_lists_them_all(make_daemon, scv_home):
    # only the first was named, and a refused tool is in no --lint: its author fixed one per reload
    params = {"type": "object", "properties": {"n": {"type": "integer", "description": "How many, e.g. 3."}}}
    bad = make_tool(scv_home, "multi", WORDS, description="Count words.\nUse for stats.", parameters=params)
    make_daemon(home=scv_home)
    out = scvctl(scv_home, "tools", "--errors")
    assert out.stdout.strip() == (
        f"script_multi: {bad / 'tool.json'}: tool 'script_multi' breaks rule 'length': description is 27 chars, "
        "must be 60-200; and rule 'when_line': line 2 ('Use for stats.') has no alternative: after a ';' name "
        "another tool or way and what it is for, or compare with 'instead', 'rather than', 'not for', 'prefer', "
        "'otherwise', 'unlike' or 'vs'. A passing line: 'Use for counting words in a text; bash for whole files.'"
        "; and rule 'param_when': optional parameter 'n' description must say when to pass it or its default "
        "(default, omit, when, with, without, if, unless, only, after, for): 'How many, e.g. 3.'. A passing one: "
        "'Most lines to count; omit for all of them, e.g. 100'; and rule 'optional_default': optional parameter "
        "'n' has no default")


@pytest.mark.one_loop
def test_scvctl_tools_lint_shows_a_tool_with_no_trigger_nor_parameter_when_refused_and_why(make_daemon, scv_home):
    """The reviewer's repro: `Use when asked.` and a required parameter without a When printed
    `script_wc2: ok`. The tool is refused at load, as any tool.json breaking a rule is, and --lint,
    where its author looks, says so with what to write instead."""
    d = make_daemon(home=scv_home)
    wc2 = make_tool(scv_home, "wc2", WORDS, description=(
        "Count the words of a text given as the argument here today.\nUse when asked."), parameters={
        "type": "object", "properties": {"text": {"type": "string", "description": "Text words, e.g. 'a b'"}},
        "required": ["text"]})
    with d.client() as c:
        d.proc.send_signal(signal.SIGHUP)
        def reloaded() -> bool:  # loaded, or refused
            answer = c.request(p.ToolsList)
            return bool(answer.errors) or "script_wc2" in {t.name for t in answer.tools}

        wait_until(reloaded, what="script_wc2 after SIGHUP")
    out = scvctl(scv_home, "tools", "--lint")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert "read: ok" in lines and not [line for line in lines if line.startswith("script_wc2: ok")]
    assert lines[-2:] == [f"script_wc2: not loaded ({wc2 / 'tool.json'})", (
        "  tool 'script_wc2' breaks rule 'when_line': line 2 ('Use when asked.') has no real trigger: 'asked' "
        "names no task or situation; and no alternative: after a ';' name another tool or way and what it is "
        "for, or compare with 'instead', 'rather than', 'not for', 'prefer', 'otherwise', 'unlike' or 'vs'. "
        "A passing line: 'Use for counting words in a text; bash for whole files.'; and rule 'param_when': "
        "required parameter 'text' description must say for what or in which case the value is given, where it "
        "comes from or what it decides (for, when, if, unless, only, after, before, from, decides, selects, "
        "chooses): \"Text words, e.g. 'a b'\". A passing one: \"File to count, relative to the workspace; for a "
        "directory use bash, e.g. 'notes.txt'\"")]


@pytest.mark.one_loop
def test_scvd_check_config_prints_a_script_tool_that_fails_to_load(scv_home):
    make_tool(scv_home, "words", WORDS)
    bad = make_tool(scv_home, "broken", WORDS, timeout=-1)
    done = subprocess.run([sys.executable, "-m", "scvd", "check-config"], env=base_env(scv_home),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr  # the daemon would start, without that tool
    lines = done.stdout.splitlines()
    assert any(line.startswith("# tools: ") and line.endswith(", 1 skipped:") for line in lines), lines
    assert (f"#   script_broken: {bad / 'tool.json'}: rule 'timeout': "
            "timeout -1 must be a positive number of seconds") in lines
    assert done.stderr == ""  # not a bare 'skipping script tool ...' line besides the listing


@pytest.mark.one_loop
def test_a_detached_daemon_logs_a_script_tool_that_fails_to_load_once(scv_home, tmp_path):
    """The check before detaching built the registry too, before logging was set up: its warning
    came out as a bare stderr line, then the daemon's own build logged it again."""
    bad = make_tool(scv_home, "broken", WORDS, timeout=-1)
    log_path, pid_file = tmp_path / "daemon.log", scv_home / "state" / "scvd.pid"
    with open(log_path, "ab") as log:
        assert subprocess.run([sys.executable, "-m", "scvd", "run", "--daemon"], env=base_env(scv_home),
                              stdin=subprocess.DEVNULL, stdout=log, stderr=log, timeout=30).returncode == 0
    wait_until(lambda: pid_file.exists() and pid_file.read_text().strip().isdigit(), what="the pid file")
    pid = int(pid_file.read_text())
    try:
        wait_until(lambda: " ready on " in log_path.read_text(), what="the ready line")
    finally:
        os.kill(pid, signal.SIGTERM)
    wait_until(lambda: pid_gone(pid), what="the detached daemon's exit")
    skipped = [line for line in log_path.read_text().splitlines() if "skipping script tool" in line]
    assert len(skipped) == 1 and f"skipping script tool {bad / 'tool.json'}: rule 'timeout'" in skipped[0], skipped


@pytest.mark.one_loop
def test_scvctl_tools_lint_prints_findings_for_every_tool(make_daemon, scv_home):
    d = make_daemon(home=scv_home)
    out = scvctl(d.home, "tools", "--lint")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert "bash: ok" in lines and "store_secret: ok" in lines  # system tools too


@pytest.mark.one_loop
def test_sighup_reloads_the_definitions_and_a_workspace_cannot_add_tools(make_daemon, scv_home, workspace):
    make_tool(workspace, "planted", WORDS)  # a workspace's own tools/script/ is never read
    d = make_daemon(home=scv_home)
    with d.client() as c:
        names = {t.name for t in c.request(p.ToolsList).tools}
        assert not {n for n in names if n.startswith("script_")}
        before = c.open_session(workspace)
        make_tool(scv_home, "words", WORDS)
        d.proc.send_signal(signal.SIGHUP)
        wait_until(lambda: "script_words" in {t.name for t in c.request(p.ToolsList).tools},
                   what="script_words after SIGHUP")
        old = c.call(before, "script_words", {"text": "a b"})  # a session keeps the tools it opened with
        assert old.error.kind == "unknown_tool" and old.error.message == (
            "no tool named 'script_words' in this session: it came with a reload after the session opened, "
            "and a session keeps the tools it opened with; open a new session to use it"), old.error
        fresh = c.open_session(workspace)
        assert "script_words" in {t.name for t in c.request(p.ToolsList, session=fresh).tools}
        assert "script_words" not in {t.name for t in c.request(p.ToolsList, session=before).tools}
        assert "script_planted" not in {t.name for t in c.request(p.ToolsList).tools}
        (scv_home / "tools" / "script" / "words" / "tool.json").write_text("{broken")
        d.proc.send_signal(signal.SIGHUP)
        wait_until(lambda: c.request(p.ToolsList).errors, what="the broken definition after SIGHUP")
        assert "script_words" not in {t.name for t in c.request(p.ToolsList).tools}


@pytest.mark.one_loop
def test_the_listing_a_client_saw_follows_a_reload_that_changes_a_tool(make_daemon, scv_home, workspace):
    """tools.list is built once per state of a registry's tools (scvd/tool_listing.py): after a reload
    that rewrites a tool, the same client asking the same way sees the new one; a session opened
    before still lists its own."""
    make_tool(scv_home, "words", WORDS)
    d = make_daemon(home=scv_home)
    with d.client() as c:
        def description(**ask: Any) -> str:
            return next(t.description for t in c.request(p.ToolsList, lint=True, **ask).tools
                        if t.name == "script_words")

        before = c.open_session(workspace)
        assert description() == description(session=before) == DESCRIPTION
        changed = "Count the words and lines in a text given as argument.\nUse for quick statistics; bash for more."
        make_tool(scv_home, "words", WORDS, description=changed)
        d.proc.send_signal(signal.SIGHUP)
        wait_until(lambda: description() == changed, what="the new description after SIGHUP")
        assert description(session=before) == DESCRIPTION
        assert description(session=c.open_session(workspace)) == changed


# --- secrets in script tools ------------------------------------------------------------------

NO_KEYRING = {"PYTHON_KEYRING_BACKEND": "keyring.backends.null.Keyring"}
SHOWS_TOKEN = """#!/bin/bash
cat >/dev/null
python3 -c 'import hashlib,json,os; v=os.environ.get("API_TOKEN"); print(json.dumps({"sha256": v and hashlib.sha256(v.encode()).hexdigest(), "leaked": sorted(k for k in os.environ if k.endswith("_API_KEY") or k.startswith(("SCV_HOME","OPENAI_")))}))'
"""


@pytest.mark.one_loop
def test_scvctl_secrets_set_then_the_script_gets_it_in_its_environment(make_daemon, scv_home, workspace):
    make_tool(scv_home, "token", SHOWS_TOKEN, risk="read_only", secrets=["API_TOKEN"])
    d = make_daemon(home=scv_home, env={"PYTHON_KEYRING_BACKEND": "keyring.backends.null.Keyring",
                                        "OPENAI_API_KEY": "daemon-only", "OTHER_API_KEY": "daemon-only"})
    env = dict(d.env)
    out = subprocess.run([sys.executable, "-m", "scvctl", "secrets", "set", "API_TOKEN"], env=env,
                         input="tok-123\n", capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    with d.client() as c:
        done = c.call(c.open_session(workspace), "script_token", {"text": "x"})
    assert done.ok, done.error
    assert done.result["sha256"] == hashlib.sha256(b"tok-123").hexdigest()
    assert done.result["leaked"] == []  # scrubbed like an agent's environment
    assert d.stop() == 0
    assert "exiting without waiting" not in d.log()  # the lookup's idle thread does not hold up the exit


@pytest.mark.one_loop
def test_a_secrets_toml_edited_by_hand_with_a_bom_or_in_latin_1(make_daemon, scv_home, workspace):
    # a BOM made the file `not valid TOML`, failing every secret; Latin-1 handed the script U+FFFD
    make_tool(scv_home, "token", SHOWS_TOKEN, risk="read_only", secrets=["API_TOKEN"])
    d = make_daemon(home=scv_home, env=NO_KEYRING)
    secrets_toml = scv_home / "secrets.toml"
    with d.client() as c:
        sid = c.open_session(workspace)
        secrets_toml.write_bytes("\ufeffAPI_TOKEN = \"tok-123\"\n".encode())
        done = c.call(sid, "script_token", {"text": "x"})
        assert done.ok and done.result["sha256"] == hashlib.sha256(b"tok-123").hexdigest(), done.error
        secrets_toml.write_bytes("# keys\nAPI_TOKEN = \"p\u00e4ss\"\n".encode("latin-1"))
        done = c.call(sid, "script_token", {"text": "x"})
    assert done.error.kind == "unavailable" and "secrets file cannot be read" in done.error.message
    assert f"{secrets_toml}: not UTF-8 text at line 2; save it as UTF-8" in d.log()


@pytest.mark.one_loop
def test_a_value_set_by_hand_loses_the_whitespace_around_it_as_a_stored_one_does(make_daemon, scv_home, workspace):
    """`scvctl secrets set` dropped a pasted token's line break; the same token written into secrets.toml
    or scvd's environment by hand reached the script with it, and its API answered 401."""
    make_tool(scv_home, "token", SHOWS_TOKEN, risk="read_only", secrets=["API_TOKEN"])
    d = make_daemon(home=scv_home, env={"API_TOKEN": " tok-env\n", **NO_KEYRING})
    pem = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjE=\n-----END OPENSSH PRIVATE KEY-----\n"
    secrets_toml = scv_home / "secrets.toml"
    sha = {}
    with d.client() as c:
        sid = c.open_session(workspace)
        for written, value in ((None, "env"), ('"tok-file\\r\\n"', "file"), ('"""\n' + pem + '"""', "pem")):
            if written is not None:
                secrets_toml.write_text(f"API_TOKEN = {written}\n")
            done = c.call(sid, "script_token", {"text": "x"})
            assert done.ok, done.error
            sha[value] = done.result["sha256"]
    assert sha == {"env": hashlib.sha256(b"tok-env").hexdigest(), "file": hashlib.sha256(b"tok-file").hexdigest(),
                   "pem": hashlib.sha256(pem.encode()).hexdigest()}  # several lines: whole, its last break too


@pytest.mark.one_loop
def test_a_secret_another_tool_declares_is_not_inherited_from_scvds_environment(make_daemon, scv_home, workspace):
    make_tool(scv_home, "token", SHOWS_TOKEN, risk="read_only")  # declares nothing
    make_tool(scv_home, "other", SHOWS_TOKEN, risk="read_only", secrets=["API_TOKEN"])
    d = make_daemon(home=scv_home, env={"API_TOKEN": "for-other-only", **NO_KEYRING})
    with d.client() as c:
        sid = c.open_session(workspace)
        mine = c.call(sid, "script_token", {"text": "x"})
        theirs = c.call(sid, "script_other", {"text": "x"})
    assert mine.ok and mine.result["sha256"] is None
    assert theirs.ok and theirs.result["sha256"] == hashlib.sha256(b"for-other-only").hexdigest()


@pytest.mark.one_loop
def test_a_chat_providers_key_is_no_script_secret(make_daemon, scv_home, workspace, tmp_path):
    """Declaring the name a provider's key comes from would hand that key to the script (the
    environment is the lookup's last source): refused before the script starts, value unsaid."""
    marker = tmp_path / "ran"
    make_tool(scv_home, "token", f"#!/bin/bash\ntouch {marker}\n", risk="read_only", secrets=["OPENAI_API_KEY"])
    config = '[providers.work]\nmodel = "m"\nbase_url = "http://127.0.0.1:9/v1"\napi_key_env = "OPENAI_API_KEY"\n'
    d = make_daemon(config, home=scv_home, env={"OPENAI_API_KEY": "sk-provider-only", **NO_KEYRING})
    with d.client() as c:
        done = c.call(c.open_session(workspace), "script_token", {"text": "x"})
    assert not done.ok and done.error.kind == "failed", done.error
    assert done.error.message.startswith(
        "script_token: its secret OPENAI_API_KEY is a chat provider's API key (providers.work.api_key_env)")
    assert "sk-provider-only" not in done.error.message
    assert not marker.exists()


@pytest.mark.one_loop
def test_a_missing_secret_is_credential_missing_before_the_script_starts(make_daemon, scv_home, workspace, tmp_path):
    marker = tmp_path / "ran"
    make_tool(scv_home, "token", f"#!/bin/bash\ntouch {marker}\n", risk="read_only", secrets=["API_TOKEN"])
    d = make_daemon(home=scv_home, env={"PYTHON_KEYRING_BACKEND": "keyring.backends.null.Keyring"})
    with d.client() as c:
        done = c.call(c.open_session(workspace), "script_token", {"text": "x"})
    assert done.error.kind == "credential_missing"
    assert "API_TOKEN" in done.error.message and "scvctl secrets set API_TOKEN" in done.error.message
    assert "store_secret" in done.error.message
    assert not marker.exists()


@pytest.mark.one_loop
def test_a_missing_secret_fails_the_call_before_anyone_is_asked(make_daemon, scv_home, workspace, tmp_path):
    """Approving a call that could not run would be in vain: the agent stores the secret first,
    and the call it makes then is the one a person approves."""
    marker = tmp_path / "ran"
    make_tool(scv_home, "token", f"#!/bin/bash\ntouch {marker}\n", risk="process", secrets=["API_TOKEN"])
    d = make_daemon(home=scv_home, env=NO_KEYRING)
    with d.client(name="agent") as c, d.client(name="me") as me:
        sid = c.open_session(workspace)
        done = c.call(sid, "script_token", {"text": "x"})
        assert done.error.kind == "credential_missing" and "API_TOKEN" in done.error.message, done.error
        assert me.request(p.ApprovalsList).approvals == [] and not marker.exists()
        SecretStore(scv_home / "secrets.toml", env={}).set("API_TOKEN", "tok")
        call_id = c.start_call(sid, "script_token", {"text": "x"})
        (request,) = wait_pending(me)
        assert request.call_id == call_id and request.details["secrets"] == ["API_TOKEN"]
        me.request(p.ApprovalDecide, approval_id=request.approval_id, decision="approve")
        assert c.wait_call(call_id).ok and marker.exists()


@pytest.mark.one_loop
def test_under_policy_never_a_call_missing_its_secret_is_denied_not_sent_to_store_secret(make_daemon, scv_home,
                                                                                          workspace):
    """credential_missing would send the agent to store_secret: a person typing a secret for a call
    the policy refuses anyway."""
    make_tool(scv_home, "token", "#!/bin/bash\n", risk="process", secrets=["API_TOKEN"])
    d = make_daemon('[approvals]\npolicy = "never"\n', home=scv_home, env=NO_KEYRING)
    with d.client() as c:
        done = c.call(c.open_session(workspace), "script_token", {"text": "x"})
    assert done.error.kind == "denied" and "approvals.policy is 'never'" in done.error.message, done.error


def test_a_secret_lookup_that_outlasts_the_tools_timeout_ends_the_call_before_anyone_is_asked(
        make_daemon, scv_home, workspace, tmp_path):
    """A keyring waiting to be unlocked held the call (and its session's lane) with no deadline."""
    make_tool(scv_home, "token", "#!/bin/bash\n", risk="process", secrets=["API_TOKEN"], timeout=1)
    d = make_daemon(home=scv_home, env={
        "PYTHON_KEYRING_BACKEND": "helpers.slow_keyring.Keyring", "LOCKABLE_KEYRING": str(tmp_path / "kr.json"),
        "SLOW_KEYRING_READ_SECONDS": "30", "SLOW_KEYRING_READS": str(tmp_path / "reads"),
        "PYTHONPATH": f"{ROOT}:{ROOT / 'tests'}"})
    with d.client(name="agent") as c, d.client(name="me") as me:
        sid = c.open_session(workspace)
        done = c.call(sid, "script_token", {"text": "x"})
        assert me.request(p.ApprovalsList).approvals == []
        again = c.call(sid, "script_token", {"text": "x"})  # the agent retries while the keyring still hangs
    assert again.error.kind == "timeout", again.error
    # the retry waited on the lookup under way: one thread held by the hung keyring, not one per call
    assert (tmp_path / "reads").read_text() == "API_TOKEN\n"
    assert done.error.kind == "timeout" and done.error.message == (
        "script_token: looking up its secrets took longer than its timeout of 1 s, before approval (a keyring "
        "waiting to be unlocked?)"), done.error
    assert done.error.hint == "unlock the keyring, then call again"


@pytest.mark.one_loop
def test_a_locked_keyring_is_unavailable_saying_to_unlock_it_not_a_missing_secret(make_daemon, scv_home, workspace,
                                                                                  tmp_path):
    """It used to read "not set", sending auto-heal to store_secret, whose set failed on the same lock."""
    make_tool(scv_home, "token", SHOWS_TOKEN, risk="read_only", secrets=["API_TOKEN"])
    kr = tmp_path / "keyring.json"
    d = make_daemon(home=scv_home, env={"PYTHON_KEYRING_BACKEND": lockable_keyring.BACKEND,
                                        "LOCKABLE_KEYRING": str(kr), "PYTHONPATH": f"{ROOT}:{ROOT / 'tests'}"})
    out = subprocess.run([sys.executable, "-m", "scvctl", "secrets", "set", "API_TOKEN"], env=dict(d.env),
                         input="tok-123", capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "in the keyring" in out.stdout, out.stderr
    lockable_keyring.lock(kr)
    with d.client() as c:
        sid = c.open_session(workspace)
        locked = c.call(sid, "script_token", {"text": "x"})
        lockable_keyring.lock(kr, False)
        unlocked = c.call(sid, "script_token", {"text": "x"})
    assert locked.error.kind == "unavailable", locked.error
    assert locked.error.message.startswith(
        "script_token: cannot look up its secret API_TOKEN: the keyring helpers.lockable_keyring.Keyring "
        "could not read API_TOKEN (KeyringLocked): unlock it"), locked.error.message
    assert "store_secret" not in locked.error.message
    assert unlocked.ok and unlocked.result["sha256"] == hashlib.sha256(b"tok-123").hexdigest()


@pytest.mark.one_loop
def test_a_broken_secrets_file_tells_the_model_to_ask_the_owner_and_the_log_why(make_daemon, scv_home,
                                                                                 workspace, tmp_path):
    """The model read the file's full path and TOML parse detail, which are no business of its (and
    which it cannot fix): those go to scvd's log and `scvctl secrets list`."""
    marker = tmp_path / "ran"
    make_tool(scv_home, "token", f"#!/bin/bash\ntouch {marker}\n", risk="read_only", secrets=["API_TOKEN"])
    secrets_file = scv_home / "secrets.toml"
    secrets_file.write_text('API_TOKEN = "tok\n')
    secrets_file.chmod(0o600)
    d = make_daemon(home=scv_home, env={"PYTHON_KEYRING_BACKEND": "keyring.backends.null.Keyring"})
    with d.client() as c:
        done = c.call(c.open_session(workspace), "script_token", {"text": "x"})
    assert done.error.kind == "unavailable"
    assert done.error.message == (
        "script_token: cannot look up its secret API_TOKEN: scvd's secrets file cannot be read; its owner must "
        "fix it (`scvctl secrets list` says what is wrong)")
    assert done.error.hint == "ask the owner to run `scvctl secrets list` and fix what it says"
    assert f"{secrets_file}: not valid TOML (" in d.log()
    listed = subprocess.run([sys.executable, "-m", "scvctl", "secrets", "list"], env=dict(d.env),
                            capture_output=True, text=True, timeout=60)
    assert f"{secrets_file}: not valid TOML (" in listed.stderr
    assert not marker.exists()



@pytest.mark.one_loop
def test_a_secret_holding_a_nul_is_credential_missing_naming_it_until_stored_again(make_daemon, scv_home,
                                                                                   workspace, tmp_path):
    """A NUL written into secrets.toml by hand (`\\u0000`; scvd never stores one): each call of a tool
    given it failed `failed unexpectedly: ValueError`, an MCP server given it was down for ever with
    `ValueError: embedded null byte`, and `scvctl secrets list` showed it as any other."""
    marker = tmp_path / "ran"
    make_tool(scv_home, "token", f"#!/bin/bash\ntouch {marker}\n", risk="read_only", secrets=["API_TOKEN"])
    secrets_file = scv_home / "secrets.toml"
    secrets_file.write_text('API_TOKEN = "ab\\u0000cd"\n')
    secrets_file.chmod(0o600)
    quirks = ROOT / "tests" / "helpers" / "mcp_stdio_quirks.py"
    config = (f'[mcp.servers.raw]\ncommand = "{sys.executable}"\nargs = ["{quirks}", "plain"]\nsandbox = false\n'
              'env = {REV_KEY = {secret = "API_TOKEN"}}\n')
    d = make_daemon(config, home=scv_home, env={"PYTHON_KEYRING_BACKEND": "keyring.backends.null.Keyring"})
    said = (f"the secret API_TOKEN in {secrets_file} holds a NUL character, which no program's environment can "
            "carry: store it again as text (e.g. its base64) with `scvctl secrets set API_TOKEN`, or let the agent "
            "call store_secret with key 'API_TOKEN'")
    with d.client() as c:
        session = c.open_session(workspace)
        done = c.call(session, "script_token", {"text": "x"})
        assert (done.error.kind, done.error.message, done.error.hint) == (
            "credential_missing", f"script_token: {said}", "scvctl secrets set API_TOKEN")
        wait_until(lambda: any(s.name == "raw" and s.error and said in s.error
                               for s in c.request(p.Status).mcp_servers), what="the server down saying why")
        listed = subprocess.run([sys.executable, "-m", "scvctl", "secrets", "list"], env=dict(d.env),
                                capture_output=True, text=True, timeout=60)
        assert listed.stdout == f"API_TOKEN  unusable  {said}\n", listed
        subprocess.run([sys.executable, "-m", "scvctl", "secrets", "set", "API_TOKEN"], env=dict(d.env),
                       input="tok\n", text=True, timeout=60, check=True)
        assert c.call(session, "script_token", {"text": "x"}).ok and marker.exists()
    assert "embedded null byte" not in d.log()

@pytest.mark.one_loop
def test_exit_77_is_a_rejected_credential_naming_its_key(make_daemon, scv_home, workspace):
    make_tool(scv_home, "token", "#!/bin/bash\necho '401 Unauthorized' >&2\nexit 77\n", risk="read_only",
              secrets=["API_TOKEN"])
    d = make_daemon(home=scv_home, env={"API_TOKEN": "stale", "PYTHON_KEYRING_BACKEND": "keyring.backends.null.Keyring"})
    with d.client() as c:
        done = c.call(c.open_session(workspace), "script_token", {"text": "x"})
    assert done.error.kind == "credential_missing"
    assert "rejected credential (exit 77)" in done.error.message and "API_TOKEN" in done.error.message
    assert "store_secret" in done.error.message and "401 Unauthorized" in done.error.message


@pytest.mark.one_loop
def test_exit_77_from_a_tool_declaring_no_secrets_says_to_declare_one_not_to_call_store_secret(make_daemon, scv_home,
                                                                                               workspace):
    """store_secret refuses a tool that uses no stored secret: pointing the agent at it was a dead end."""
    folder = make_tool(scv_home, "token", "#!/bin/bash\necho '401 Unauthorized' >&2\nexit 77\n", risk="read_only")
    d = make_daemon(home=scv_home, env=NO_KEYRING)
    with d.client() as c:
        done = c.call(c.open_session(workspace), "script_token", {"text": "x"})
    assert done.error.kind == "credential_missing" and "store_secret" not in done.error.message
    assert done.error.message.startswith(
        "script_token reported a rejected credential (exit 77), but it declares no secrets, so scvd has none to "
        f"give it: declare the key it needs in \"secrets\" of {folder / 'tool.json'}"), done.error.message


@pytest.mark.one_loop
def test_exit_77_with_several_keys_names_them_all_unless_a_stderr_line_says_which(make_daemon, scv_home,
                                                                                 workspace):
    """It used to name the first declared key, sending store_secret after GH_USER when GH_TOKEN was refused."""
    says = "#!/bin/bash\necho '401 Bad credentials' >&2\n[ -n \"$WHICH\" ] && echo \"SCV_REJECTED=$WHICH\" >&2\nexit 77\n"
    make_tool(scv_home, "gh", says.replace("$WHICH", ""), risk="read_only", secrets=["GH_USER", "GH_TOKEN"])
    make_tool(scv_home, "gh_says", says.replace("$WHICH", "GH_TOKEN"), risk="read_only",
              secrets=["GH_USER", "GH_TOKEN"])
    make_tool(scv_home, "gh_lies", says.replace("$WHICH", "PATH"), risk="read_only", secrets=["GH_USER", "GH_TOKEN"])
    d = make_daemon(home=scv_home, env={"GH_USER": "me", "GH_TOKEN": "stale", **NO_KEYRING})
    with d.client() as c:
        sid = c.open_session(workspace)
        silent, said, lied = (c.call(sid, f"script_{n}", {"text": "x"}) for n in ("gh", "gh_says", "gh_lies"))
    for done in (silent, lied):  # an undeclared key named is no answer
        assert done.error.kind == "credential_missing"
        assert "did not say which (a stderr line `SCV_REJECTED=KEY` would); its secrets: GH_USER, GH_TOKEN" \
            in done.error.message, done.error.message
        assert "key 'GH_USER'" not in done.error.message and done.error.hint.startswith("scvctl secrets set KEY")
    assert said.error.kind == "credential_missing"
    assert "(exit 77): its secret GH_TOKEN; store a new value with store_secret (key 'GH_TOKEN')" \
        in said.error.message, said.error.message
    assert said.error.hint == "scvctl secrets set GH_TOKEN"


@pytest.mark.one_loop
def test_a_failure_that_reads_like_a_refused_credential_names_the_key_for_store_secret(make_daemon, scv_home,
                                                                                        workspace):
    """Seed 003's agent takes the key's name from the error; a script that did not exit 77 (`gh`, `curl`
    exit 1 on a 401) failed naming none, as an MCP server's such error now does not."""
    refused = "#!/bin/bash\necho 'HTTP 401: Bad credentials (https://api.github.com/user)' >&2\nexit 1\n"
    make_tool(scv_home, "gh", refused, risk="read_only", secrets=["GH_TOKEN"])
    make_tool(scv_home, "gh_down", "#!/bin/bash\necho 'HTTP 502: Bad gateway' >&2\nexit 1\n", risk="read_only",
              secrets=["GH_TOKEN"])
    make_tool(scv_home, "no_secrets", refused, risk="read_only")
    make_tool(scv_home, "aws", "#!/bin/bash\necho 'An error occurred (ExpiredToken) when calling the GetObject "
              "operation: The security token included in the request is expired' >&2\nexit 254\n", risk="read_only", secrets=["GH_TOKEN"])
    d = make_daemon(home=scv_home, env={"GH_TOKEN": "stale", **NO_KEYRING})
    with d.client() as c:
        sid = c.open_session(workspace)
        gh, down, plain, aws = (c.call(sid, f"script_{n}", {"text": "x"})
                                for n in ("gh", "gh_down", "no_secrets", "aws"))
    assert aws.error.kind == "credential_missing", aws.error  # the aws CLI's words, exit 254
    assert gh.error.kind == "credential_missing", gh.error
    assert gh.error.message == (
        "script_gh failed (exit 1) with output that reads like a refused credential: its secret GH_TOKEN; store a "
        "new value with store_secret (key 'GH_TOKEN') or `scvctl secrets set GH_TOKEN`, then call the tool again; "
        "stderr: HTTP 401: Bad credentials (https://api.github.com/user)")
    assert down.error.kind == plain.error.kind == "failed"  # another failure; or no stored key to heal


@pytest.mark.one_loop
def test_the_example_tool_works(make_daemon, scv_home, workspace):
    """examples/tools/ holds a working script tool: copy it in and call it."""
    import shutil

    example = Path(__file__).resolve().parents[2] / "examples" / "tools" / "script" / "word_count"
    shutil.copytree(example, scv_home / "tools" / "script" / "word_count")
    d = make_daemon(home=scv_home)
    with d.client() as c:
        assert not c.request(p.ToolsList).errors
        done = c.call(c.open_session(workspace), "script_word_count", {"text": "to be or not to be"})
    assert done.ok, done.error
    assert done.result == {"words": 6, "unique": 4}


# prints its secret every way a careless script might: a JSON result, plain text, stderr, with quoting
ECHOES_TOKEN = """#!/bin/bash
cat >/dev/null
python3 - <<'PY'
import json, os, sys
v = os.environ["API_TOKEN"]
print("debug: Authorization: Bearer " + v, file=sys.stderr)
if os.environ.get("SCV_TOOL_DIR", "").endswith("as_text"):
    print("token=" + v)
elif os.environ.get("SCV_TOOL_DIR", "").endswith("as_go"):  # Go's and PHP's escapes: slash, upper-case hex
    print('{"echo": "%s"}' % "".join("\\\\/" if ch == "/" else "\\\\u%04X" % ord(ch) if ord(ch) > 127 or ch in '<>&"\\\\'
                                     else ch for ch in v))
else:
    print(json.dumps({"echo": v, "n": 1}))  # escaped: \\" and \\u00e9
sys.exit(1 if os.environ.get("SCV_TOOL_DIR", "").endswith("fails") else 0)
PY
"""


@pytest.mark.one_loop
def test_a_script_that_prints_its_secret_never_hands_the_value_back(make_daemon, scv_home, workspace):
    """A declared secret's value is replaced by [secret KEY] in the result and in the error."""
    value = 'tok-"quoted"\\é/<&>-123'
    for name in ("as_json", "as_text", "fails", "as_go"):
        make_tool(scv_home, name, ECHOES_TOKEN, risk="read_only", secrets=["API_TOKEN"])
    d = make_daemon(home=scv_home, env={"API_TOKEN": value,
                                        "PYTHON_KEYRING_BACKEND": "keyring.backends.null.Keyring"})
    with d.client() as c:
        sid = c.open_session(workspace)
        as_json = c.call(sid, "script_as_json", {"text": "x"})
        as_text = c.call(sid, "script_as_text", {"text": "x"})
        fails = c.call(sid, "script_fails", {"text": "x"})
        as_go = c.call(sid, "script_as_go", {"text": "x"})  # only decoding the JSON shows the value
    assert as_json.result["echo"] == "[secret API_TOKEN]" and as_json.result["n"] == 1
    assert as_go.result == {"echo": "[secret API_TOKEN]"}
    assert as_text.result == "token=[secret API_TOKEN]\n"
    assert fails.error.kind == "failed" and "Bearer [secret API_TOKEN]" in fails.error.message
    assert fails.error.message.endswith('stdout: {"echo": "[secret API_TOKEN]", "n": 1}')  # its stdout, redacted
    texts = list(strings(msgspec.to_builtins([as_json, as_text, fails, as_go])))
    assert texts and not [t for t in texts if "tok-" in t]  # no form of the value, escaped or not


# prints API_TOKEN in the encoding its `text` names, on stdout and (as a failure) on stderr
ENCODES_TOKEN = """#!/usr/bin/env python3
import base64, json, os, sys, urllib.parse
mode, v = json.load(sys.stdin)["text"], os.environ["API_TOKEN"].encode()
print({"base64url": lambda: base64.urlsafe_b64encode(b"user:" + v).decode().rstrip("="),
       "wrapped": lambda: base64.encodebytes(b"user:" + v).decode(),
       "quoted": lambda: urllib.parse.quote(v),
       "hex": lambda: v.hex()}[mode](), file=sys.stderr if os.environ["SCV_TOOL_DIR"].endswith("fails") else sys.stdout)
sys.exit(1 if os.environ["SCV_TOOL_DIR"].endswith("fails") else 0)
"""
# 99 characters: wrapped at 76, a line break falls in its base64; its base64 holds `/` (`_` in base64url)
ENCODED_KEY = ("wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY/aws+secret?key>~0123456789abcdefghijklmnopqrstuvwxyz"
               "ABCDEF")


@pytest.mark.one_loop
def test_a_script_printing_its_secret_base64url_wrapped_percent_or_hex_encoded_hands_none_back(
        make_daemon, scv_home, workspace):
    """A review's script tool printed its 99-character key as a JWT's base64url, wrapped as
    `base64.encodebytes` does, as quote() does (`/` kept) and in hex: each came back as it was, in
    its result and in its failure's stderr."""
    for name in ("encodes", "fails"):
        make_tool(scv_home, name, ENCODES_TOKEN, risk="read_only", secrets=["API_TOKEN"])
    d = make_daemon(home=scv_home, env={"API_TOKEN": ENCODED_KEY, **NO_KEYRING})
    with d.client() as c:
        sid = c.open_session(workspace)
        done = {mode: (c.call(sid, "script_encodes", {"text": mode}), c.call(sid, "script_fails", {"text": mode}))
                for mode in ("base64url", "wrapped", "quoted", "hex")}
    for mode, (printed, failed) in done.items():
        assert printed.ok and "[secret API_TOKEN]" in printed.result, (mode, printed)
        assert failed.error.kind == "failed" and "[secret API_TOKEN]" in failed.error.message, (mode, failed)
    texts = "".join(strings(msgspec.to_builtins(list(done.values())))).replace("\n", "")
    v = ENCODED_KEY.encode()
    for encoded in (base64.urlsafe_b64encode(b"user:" + v).decode(), base64.b64encode(b"user:" + v).decode(),
                    urllib.parse.quote(v), v.hex()):  # what each printed, its line breaks left out
        assert not [encoded[i:i + 10] for i in range(len(encoded) - 9) if encoded[i:i + 10] in texts], texts


# prints API_TOKEN through the tool its `text` names, or in YAML (base64, indented), or escaped twice
# (`\/` as PHP escapes `/`) in a log line: text, not one JSON document, so scvd does not decode it
DUMPS_TOKEN = """#!/bin/bash
mode=$(python3 -c 'import json, sys; print(json.load(sys.stdin)["text"])')
case "$mode" in
  yaml) printf 'auth: |\n'; printf 'user:%s' "$API_TOKEN" | base64 | sed 's/^/    /' ;;
  json) python3 -c 'import json, os; print("sent:", json.dumps({"body": json.dumps({"t": os.environ["API_TOKEN"]}).replace("/", chr(92) + "/")}))' ;;
  *) printf 'k=%s\n' "$API_TOKEN" | $mode ;;
esac
"""


@pytest.mark.one_loop
def test_a_script_piping_its_secret_through_base32_or_a_hex_dump_hands_none_back(make_daemon, scv_home, workspace):
    """base32, `xxd -p`, `od` and `hexdump -C` output, base64 indented in YAML, JSON in JSON: each
    came back with the value in it."""
    make_tool(scv_home, "dumps", DUMPS_TOKEN, risk="read_only", secrets=["API_TOKEN"])
    d = make_daemon(home=scv_home, env={"API_TOKEN": ENCODED_KEY, **NO_KEYRING})
    modes = ("base32", "xxd -p", "od -An -tx1", "hexdump -C", "yaml", "json")
    with d.client() as c:
        sid = c.open_session(workspace)
        done = {mode: c.call(sid, "script_dumps", {"text": mode}) for mode in modes}
    for mode, printed in done.items():
        assert printed.ok and "[secret API_TOKEN]" in printed.result, (mode, printed)
    texts = "".join("".join(printed.result.split()) for printed in done.values())
    v = ENCODED_KEY.encode()
    for encoded in (base64.b32encode(b"k=" + v).decode(), v.hex(), base64.b64encode(b"user:" + v).decode()):
        assert not [encoded[i:i + 16] for i in range(len(encoded) - 15) if encoded[i:i + 16] in texts], texts
    assert "EXAMPLEKEY" not in texts
    assert done["json"].result == 'sent: {"body": "{\\"t\\": \\"[secret API_TOKEN]\\"}"}\n'


PRINTS_PIN = """#!/bin/bash
cat >/dev/null
python3 -c 'import json, os; print(json.dumps({"pin": int(os.environ["PIN"]), "ok": True, "note": "set " + os.environ["PIN"]}))'
"""


@pytest.mark.one_loop
def test_a_short_secret_in_a_json_result_keeps_the_result_json(make_daemon, scv_home, workspace):
    """A 4-digit PIN printed as a number: the agent gets the object with the PIN taken out, not a
    string of JSON broken by the stand-in."""
    make_tool(scv_home, "pin", PRINTS_PIN, risk="read_only", secrets=["PIN"])
    d = make_daemon(home=scv_home, env={"PIN": "4711", **NO_KEYRING})
    with d.client() as c:
        done = c.call(c.open_session(workspace), "script_pin", {"text": "x"})
    assert done.ok, done.error
    assert done.result == {"pin": "[secret PIN]", "ok": True, "note": "set [secret PIN]"}


@pytest.mark.one_loop
def test_a_number_no_double_holds_keeps_the_output_as_text_not_null(make_daemon, scv_home, workspace):
    """`1e999` is JSON's grammar, but no double holds it: Python decoded it to inf, which the wire
    carries as null, so the agent got {"big": null} (with or without secrets), and the value was lost."""
    printed = '{"big": 1e999, "small": -2e400, "n": 3}'
    make_tool(scv_home, "big", f"#!/bin/bash\ncat >/dev/null\necho '{printed}'\n", risk="read_only")
    make_tool(scv_home, "big_pin", f"#!/bin/bash\ncat >/dev/null\necho '{printed}'\n", risk="read_only",
              secrets=["PIN"])
    d = make_daemon(home=scv_home, env={"PIN": "4711", **NO_KEYRING})
    with d.client() as c:
        sid = c.open_session(workspace)
        plain, with_secret = c.call(sid, "script_big", {"text": "x"}), c.call(sid, "script_big_pin", {"text": "x"})
    assert plain.ok and plain.result == printed + "\n", plain
    assert with_secret.ok and with_secret.result == printed + "\n", with_secret


DEEP_JSON = """#!/bin/bash
cat >/dev/null
python3 -c 'import os; v = os.environ["API_TOKEN"].replace("/", "\\\\/"); print("[" * 900 + "\\"" + v + "\\"" + "]" * 900)'
"""


def test_a_result_nested_too_deeply_to_check_for_secrets_fails_saying_so(make_daemon, scv_home, workspace):
    """json.loads takes it, walking it for secrets would not: the escaped text (`\\/`) could hold
    the value, so it is not handed back, and the error blames the output, not the arguments."""
    make_tool(scv_home, "deep", DEEP_JSON, risk="read_only", secrets=["API_TOKEN"])
    d = make_daemon(home=scv_home, env={"API_TOKEN": "tok/deep-1", **NO_KEYRING})
    with d.client() as c:
        done = c.call(c.open_session(workspace), "script_deep", {"text": "x"})
    assert not done.ok and done.error.kind == "failed", done.error
    assert "nested too deeply to check for its secrets" in done.error.message
    assert "deep-1" not in done.error.message


def test_a_result_nested_too_deeply_from_a_tool_without_secrets_comes_back_as_text(make_daemon, scv_home,
                                                                                  workspace):
    """It failed blaming "its secrets" (a tool that has none): there is nothing to check, so the
    text comes back, as any output that is no JSON to scvd does (past msgspec's depth); JSON as deep
    as msgspec reads, where scvd's own checks could overflow, comes back too."""
    for name, depth in (("deep", 3000), ("deepish", 900)):
        make_tool(scv_home, name, f"#!/bin/sh\nexec python3 -c 'print(\"[\" * {depth} + \"]\" * {depth})'\n",
                  risk="read_only")
    d = make_daemon(home=scv_home)
    with d.client() as c:
        sid = c.open_session(workspace)
        deep, deepish = c.call(sid, "script_deep", {"text": "x"}), c.call(sid, "script_deepish", {"text": "x"})
    assert deep.ok and deepish.ok, (deep.error, deepish.error)
    assert deep.result == "[" * 3000 + "]" * 3000 + "\n"


def strings(value: Any) -> Any:
    """Every string in a decoded frame, keys included."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield k
            yield from strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from strings(v)


LISTS_NAMES = """#!/bin/bash
cat >/dev/null
python3 -c 'import json, os; print(json.dumps({"files": sorted(os.listdir(".")), "face": "\\ud83d"}))'
"""


@pytest.mark.one_loop
def test_a_result_with_a_file_name_that_is_not_utf8_completes(make_daemon, scv_home, workspace):
    """Python's json.dumps(os.listdir()) prints a Latin-1 name's byte as "\\udce9", which json.loads
    takes: the call never completed (the encoder refused the frame) and the call stayed in flight."""
    os.close(os.open(bytes(workspace) + b"/caf\xe9.txt", os.O_CREAT | os.O_WRONLY, 0o600))
    (workspace / "ok.txt").write_text("fine")
    make_tool(scv_home, "names", LISTS_NAMES, risk="read_only")
    d = make_daemon(home=scv_home)
    with d.client() as c:
        sid = c.open_session(workspace)
        done = c.call(sid, "script_names", {"text": "x"})
        assert done.ok, done.error
        assert done.result == {"files": ["caf\ufffd.txt", "ok.txt"], "face": "\ufffd"}
        assert c.call(sid, "read", {"path": "ok.txt"}).result["content"] == "fine"  # the lane moved on
    assert "Traceback" not in d.log()


def test_a_hung_keyring_holding_threads_for_many_secrets_does_not_stall_session_opens(make_daemon, scv_home,
                                                                                     workspace, tmp_path):
    """Each secret's lookup held a thread of the loop's default executor (6 on two CPUs): with six
    lookups hung, session.open (which reads its services there) waited for the keyring too."""
    keys = [f"TOKEN_{i}" for i in range(8)]
    for i, key in enumerate(keys):
        make_tool(scv_home, f"t{i}", "#!/bin/bash\n", risk="process", secrets=[key], timeout=1)
    d = make_daemon(home=scv_home, env={
        "PYTHON_KEYRING_BACKEND": "helpers.slow_keyring.Keyring", "LOCKABLE_KEYRING": str(tmp_path / "kr.json"),
        "SLOW_KEYRING_READ_SECONDS": "600", "SLOW_KEYRING_READS": str(tmp_path / "reads"),
        "PYTHONPATH": f"{ROOT}:{ROOT / 'tests'}"})
    with d.client(name="agent") as c:
        sessions = [c.open_session(workspace) for _ in keys]  # a lane each: the lookups hang together
        calls = [c.start_call(sid, f"script_t{i}", {"text": "x"}) for i, sid in enumerate(sessions)]
        assert all(c.wait_call(call_id).error.kind == "timeout" for call_id in calls)
        assert sorted((tmp_path / "reads").read_text().split()) == keys  # every lookup still hangs
        (workspace / "notes.txt").write_text("still served\n")
        with d.client(name="other", timeout=10) as other:  # it waited for the keyring: 600 s
            done = other.call(other.open_session(workspace), "read", {"path": "notes.txt"})
    assert done.ok and done.result["content"] == "still served\n", done.error
