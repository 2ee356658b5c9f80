"""Script tool definitions: what a tool.json may say, and how a bad one is skipped and reported."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

import pytest

from scvd import errors, paths as paths_mod
from scvd.config import Config
from scvd.tools import build_registry, script_defs
from scvd.tools.script import ScriptTool
from scvd.tools.script_defs import declared_secrets, load_all

DESCRIPTION = ("Count the words in a text given as argument.\n"
               "Use for quick statistics; bash for anything else.")
PARAMETERS = {"type": "object", "required": ["text"], "additionalProperties": False, "properties": {
    "text": {"type": "string", "maxLength": 100, "description": "The text to count, from the user's message, e.g. 'a b c'."},
    "unique": {"type": "boolean", "default": False,
               "description": "Count each word once when true, e.g. true; default false."}}}


def nested(inner: dict[str, Any], depth: int) -> dict[str, Any]:
    """`inner` as the one property of `depth` objects, each inside the one before."""
    for _ in range(depth):
        inner = {"type": "object", "properties": {"a": inner}}
    return inner


def make_tool(home: Path, name: str = "words", *, spec: dict[str, Any] | None = None, raw: str | None = None,
              script: str = "#!/bin/sh\necho 1\n", command: str = "run") -> Path:
    folder = home / "tools" / "script" / name
    folder.mkdir(parents=True, exist_ok=True)
    body = {"description": DESCRIPTION, "parameters": PARAMETERS, **(spec or {})}
    (folder / "tool.json").write_text(raw if raw is not None else json.dumps(body))
    run = folder / command
    run.write_text(script)
    run.chmod(0o700)
    return folder


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "scvhome"


def paths(home: Path) -> Any:
    return paths_mod.resolve({"SCV_HOME": str(home)})


def only_error(home: Path) -> Any:
    defs, failed = load_all(paths(home))
    assert defs == [] and len(failed) == 1, (defs, failed)
    return failed[0]


def test_a_valid_definition_loads_with_its_defaults(home: Path):
    folder = make_tool(home)
    (d,), failed = load_all(paths(home))
    assert failed == []
    assert d.name == "script_words" and d.folder == folder and d.executable == (folder / "run").resolve()
    assert (d.spec.risk, d.spec.timeout, d.spec.secrets, d.spec.command) == ("process", None, [], "./run")
    tool = ScriptTool(d)
    assert tool.input_schema() == PARAMETERS and tool.risk.value == "process"


@pytest.mark.timeout(30)  # reading the FIFO would wait for a writer for good
def test_a_fifo_in_place_of_tool_json_is_a_load_error_not_a_hang(home: Path):
    """scvd's start (or a reload) waited for a writer to that FIFO for good."""
    folder = make_tool(home)
    (folder / "tool.json").unlink()
    os.mkfifo(folder / "tool.json")
    failed = only_error(home)
    assert failed.source == str(folder / "tool.json")
    assert failed.message == "rule 'tool.json': it is a FIFO, not a regular file; make it a file", failed


def test_a_folder_without_tool_json_says_to_add_one(home: Path):
    folder = make_tool(home)
    (folder / "tool.json").unlink()
    failed = only_error(home)
    assert failed.source == str(folder / "tool.json")
    assert failed.message == "rule 'tool.json': the folder has no tool.json; add one (docs/tools.md, " \
                             "\"Script tools\", lists its fields)"


def test_a_dangling_tool_json_symlink_says_where_it_leads(home: Path):
    folder = make_tool(home)
    (folder / "tool.json").unlink()
    (folder / "tool.json").symlink_to("../shared/words.json")
    assert only_error(home).message == ("rule 'tool.json': it is a symlink to '../shared/words.json', which does "
                                        "not exist; fix the link or put the file there")


def test_a_tool_folder_linked_from_a_place_that_is_gone_is_an_error_not_a_silent_loss(home: Path, tmp_path: Path):
    """A folder linked in from a repository that was moved was passed over as no folder at all: the
    tool vanished from tools.list with no log line and nothing in `scvctl tools --errors`."""
    (home / "tools" / "script").mkdir(parents=True)
    (home / "tools" / "script" / "words").symlink_to(tmp_path / "moved" / "words")
    error = only_error(home)
    assert error.name == "script_words"
    assert error.message == (f"rule 'tool.json': its folder is a symlink to '{tmp_path / 'moved' / 'words'}', "
                             "which does not exist; fix the link or remove it")


def test_a_hidden_folder_beside_the_tools_is_neither_a_tool_nor_an_error(home: Path):
    """Script tools kept in a git repository: its `.git` was a broken tool ("folder name '.git' must
    be ...") at every start and reload."""
    make_tool(home)
    (home / "tools" / "script" / ".git" / "objects").mkdir(parents=True)
    (d,), failed = load_all(paths(home))
    assert d.name == "script_words" and failed == []


def test_a_tool_json_saved_with_a_byte_order_mark_loads(home: Path):
    """Notepad saves one: the tool was refused as `not valid JSON: ... invalid character (byte 0)`,
    at a character no editor shows."""
    make_tool(home, raw="\ufeff" + json.dumps({"description": DESCRIPTION, "parameters": PARAMETERS}))
    (d,), failed = load_all(paths(home))
    assert failed == [] and d.spec.description == DESCRIPTION


def test_no_tools_dir_is_no_tools_and_no_errors(home: Path):
    assert load_all(paths(home)) == ([], [])


def test_a_config_dir_tools_folder_linked_to_the_data_dirs_is_read_once(tmp_path: Path):
    """Both folders are read (seed 003's config dir, then the data dir); one that leads to the
    other is one folder, not every tool twice."""
    config, data = tmp_path / "cfg", tmp_path / "data"
    make_tool(data, "words")
    config.mkdir()
    (config / "tools").symlink_to(data / "tools")
    xdg = paths_mod.Paths(home=None, config_dir=config, data_dir=data, state_dir=tmp_path / "state",
                          runtime_dir=tmp_path / "run", socket=tmp_path / "run" / "s")
    (d,), failed = load_all(xdg)
    assert failed == [] and d.folder == config / "tools" / "script" / "words"


@pytest.mark.parametrize("spec,raw,rule,text", [
    ({}, "{not json", "tool.json", "not valid JSON: JSON is malformed"),
    ({}, '{\n  "description": "x",\n}', "tool.json", "trailing comma in object (line 3, column 1)"),  # not (byte 27)
    # a RecursionError: `scvd could not check it` and a traceback of ~200 KB in the log
    ({}, '{"description": "x", "parameters": {"type": "object", "default": ' + "[" * 1200 + "]" * 1200 + "}}",
     "tool.json",
     "not valid JSON: arrays or objects nested too deeply to read; nest them less"),
    # cut off: msgspec's `Input data was truncated` said no place, where docs/tools.md promises one
    ({}, '{\n  "description": "x", "risk": "read_only", ', "tool.json", "not valid JSON: Input data was truncated: the "
     "file ends (line 2, column 44) before its JSON does; close the {, [ or string left open"),
    ({}, "\n", "tool.json", 'not valid JSON: the file is only whitespace; write one JSON object (docs/tools.md, '
     '"Script tools", lists its fields)'),
    ({"descripton": "typo"}, None, "tool.json", "`descripton` is not a tool.json key; did you mean `description`? "
                                                "(keys: description, parameters, risk,"),
    # seed 003's flags, tools.list's and config.toml's names: no typo of a key, so no key was suggested
    ({"background": True}, None, "tool.json", "`background` is not a tool.json key: a script tool's call holds "
                                              "its session's lane until it ends"),
    ({"NoToolTimeout": True}, None, "tool.json", "`NoToolTimeout` is not a tool.json key: a script tool always "
                                                 "has a deadline; set `timeout` to the seconds it may take"),
    ({"timeout_seconds": 30}, None, "tool.json", "`timeout_seconds` is not a tool.json key: did you mean `timeout`"),
    ({"pass_env": ["AWS_PROFILE"]}, None, "tool.json", "in config.toml: [tools.script.<folder>] pass_env"),
    ({"risk": "root"}, None, "tool.json", "`risk`: Invalid enum value 'root'; use one of: delegate, filesystem, "
                                          "process, read_only"),
    ({"parameters": {"type": "string"}}, None, "parameters", '"type": "object"'),
    ({"parameters": {"type": "object", "properties": {"a": {"type": "nope"}}}}, None, "parameters",
     "properties/a/type"),
    ({"timeout": 0}, None, "timeout", "positive"),
    ({"timeout": "30s"}, None, "tool.json", "`timeout`: Expected `float | null`, got `str`; give the seconds as a "
                                            "JSON number, e.g. 300"),
    ({"timeout": -3}, None, "timeout", "positive"),
    ({"secrets": ["not-a-name"]}, None, "secrets", "letters, digits and _"),
    ({"secrets": ["SCV_HOME"]}, None, "secrets", "SCV_HOME is scvd's own or systemd's variable"),
    ({"secrets": ["NOTIFY_SOCKET"]}, None, "secrets", "NOTIFY_SOCKET is scvd's own or systemd's variable"),
    # a search path from the store reached the script as stored, unchecked: `.` ran the workspace's code
    ({"secrets": ["PYTHONPATH"]}, None, "secrets", "PYTHONPATH is a search path, no secret: read from the secret "
     "store at each start, it is neither checked nor shown, and it decides which code the script runs; remove it: "
     "set it in the script itself, or pass scvd's own with pass_env in [tools.script."),
    ({"secrets": ["PATH"]}, None, "secrets", "decides which code the script runs; remove it: the script gets "
                                             "scvd's own already"),
    ({"command": "/bin/true"}, None, "command", "must be a path inside"),
    ({"command": "../../escape"}, None, "command", "leads outside"),
    ({"command": "./missing"}, None, "command", "does not exist"),
    ({"command": "./run --verbose"}, None, "command", "command './run --verbose' is a path, not a command line: it "
                                                      "takes no arguments; set it to './run'"),
    # jsonschema would fetch it, on the event loop, every call: never
    ({"parameters": {"type": "object", "properties": {"a": {"$ref": "https://example.invalid/a.json"}}}},
     None, "parameters", "$ref 'https://example.invalid/a.json' at properties/a points outside tool.json"),
    ({"parameters": {"type": "object", "properties": {"a": {"$ref": "#/$defs/nope"}}}},
     None, "parameters", "$ref '#/$defs/nope' at properties/a leads nowhere in parameters"),
    # these loaded, then every call failed (an unresolvable reference; a required name no caller can know)
    ({"parameters": {"type": "object", "properties": {"a": {"$ref": "#nope"}}}},
     None, "parameters", "$ref '#nope' at properties/a leads nowhere in parameters (no $anchor 'nope')"),
    ({"parameters": {"type": "object", "properties": {"a": {"$dynamicRef": "#/$defs/x"}}}},
     None, "parameters", "$dynamicRef '#/$defs/x' at properties/a leads nowhere in parameters"),
    ({"parameters": {**PARAMETERS, "required": ["text", "txt"]}},
     None, "parameters", "required 'txt' at (top) is not a property (properties: text, unique)"),
    # these loaded, then every call failed blaming the arguments ("nest too deeply", AttributeError)
    ({"parameters": {"type": "object", "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}},
                     "properties": {"x": {"$ref": "#/$defs/a"}}}},
     None, "parameters", "$ref '#/$defs/b' at $defs/a goes round in a loop of references "
                         "(#/$defs/b -> #/$defs/a -> #/$defs/b) that never reaches a schema"),
    ({"parameters": {"type": "object", "required": ["x"], "properties": {"x": {"$ref": "#/required/0"}}}},
     None, "parameters", "$ref '#/required/0' at properties/x points at a str, not a schema"),
    # it crashed scvd at start (and failed a whole reload) with a TypeError
    ({"parameters": {"type": "object", "$schema": 7}}, None, "parameters", "parameters.$schema must be a string"),
    # read as a call reads it (ECMA-262's, by the regex package): the token it cannot read, and what to write
    ({"parameters": {"type": "object", "properties": {"word": {"type": "string", "pattern": r"^\p{Foo}+$"}}}},
     None, "parameters", "the pattern '^\\\\p{Foo}+$' at properties/word/pattern cannot be read: `\\p{Foo}` is no "
                         "Unicode property the regex package knows; name one it knows (`\\p{L}`,"),
    ({"parameters": {"type": "object", "patternProperties": {r"^\q{ab}$": {}}}}, None, "parameters",
     "the pattern '^\\\\q{ab}$' at patternProperties cannot be read: `\\q{...}` is ECMA's v flag's"),
    # ~6 KB that msgspec reads, but jsonschema's check recursed out: `scvd could not check it (RecursionError`
    # and a ~100 KB traceback in the log
    ({"parameters": {"type": "object", "properties": {"a": nested({"type": "string"}, 150)}}}, None, "parameters",
     "parameters nested too deeply to check; nest them less"),
], ids=["json", "json-line-column", "json-too-deep", "json-cut-off", "json-only-whitespace", "unknown-field",
        "seed-flag-background", "seed-flag-no-timeout", "tools-list-name",
        "config-toml-key", "risk", "not-object", "bad-schema", "timeout-0", "timeout-string", "timeout-negative",
        "secret-name", "secret-scvds-own", "secret-systemds", "secret-search-path", "secret-path",
        "absolute-command", "escaping-command", "missing-command",
        "command-with-arguments", "remote-ref", "broken-ref",
        "anchor-nowhere", "dynamic-ref-nowhere", "required-not-a-property", "ref-loop", "ref-to-data",
        "schema-uri-not-a-string", "pattern-unknown-property", "pattern-name-v-flag", "schema-too-deep"])
def test_a_bad_definition_names_the_file_and_the_rule(home: Path, spec, raw, rule, text, caplog):
    folder = make_tool(home, spec=spec, raw=raw)
    error = only_error(home)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]  # what is wrong is the file's, not scvd's
    assert error.source.endswith("tool.json") and str(folder) in error.source
    assert error.name == "script_words"
    assert f"rule {rule!r}" in error.message and text in error.message, error.message
    assert str(folder / "tool.json") not in error.message  # the error's source names the file


def test_a_local_ref_is_fine_and_validates(home: Path):
    params = {"type": "object", "$defs": {"n": {"type": "integer"}}, "properties": {
        "count": {"$ref": "#/$defs/n", "default": 1, "description": "How many to count, e.g. 3; default 1."}}}
    make_tool(home, spec={"parameters": params})
    (d,), failed = load_all(paths(home))
    assert failed == []
    with pytest.raises(errors.InvalidArguments, match="argument `count`: 'x' is not of type 'integer'"):
        ScriptTool(d).decode({"count": "x"})


def test_a_ref_key_in_const_or_enum_data_is_data_not_a_reference(home: Path):
    """Such data used to be refused as a reference to fetch."""
    params = {"type": "object", "properties": {"link": {
        "enum": [{"$ref": "https://example.invalid/a.json"}, "none"],
        "description": "A JSON Reference object to pass on, e.g. 'none'; default none.", "default": "none"}},
        "not": {"const": {"$ref": "#nowhere"}}}
    make_tool(home, spec={"parameters": params})
    (d,), failed = load_all(paths(home))
    assert failed == []
    assert ScriptTool(d).decode({"link": {"$ref": "https://example.invalid/a.json"}})
    with pytest.raises(errors.InvalidArguments, match="argument `link`"):
        ScriptTool(d).decode({"link": {"$ref": "#elsewhere"}})


@pytest.mark.parametrize("params", [
    {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["b"]},  # open: b may come
    {**PARAMETERS, "not": {"required": ["zzz"]}},  # "zzz must be absent", not a property to declare
    {"type": "object", "unevaluatedProperties": False, "properties": {"text": PARAMETERS["properties"]["text"]},
     "allOf": [{"properties": {"b": {"type": "string"}}}], "required": ["text", "b"]},
], ids=["open-object", "required-under-not", "unevaluated-from-allof"])
def test_a_required_name_that_arguments_can_satisfy_loads(home: Path, params):
    make_tool(home, spec={"parameters": params})
    assert load_all(paths(home))[1] == []


def test_a_required_name_from_a_shared_ref_or_a_parent_is_fine(home: Path):
    params = {"type": "object", "$defs": {"base": {"properties": {"text": PARAMETERS["properties"]["text"]}}},
              "allOf": [{"$ref": "#/$defs/base"}], "properties": {"mode": {
                  "enum": ["words", "lines"], "description": "What to count, e.g. 'lines'; default words.",
                  "default": "words"}},
              "oneOf": [{"required": ["text"]}, {"required": ["mode"]}]}
    make_tool(home, spec={"parameters": params})
    assert load_all(paths(home))[1] == []


def test_a_pattern_in_ecma_262s_syntax_loads_and_checks_as_it_reads(home: Path):
    """Python's re refused `(?<name>...)`, `\\k<name>` and `\\p{L}` (JSON Schema's patterns are ECMA-262's):
    such a tool.json did not load. A required name is matched against patternProperties so too."""
    params = {"type": "object", "required": ["span", "Größe"], "additionalProperties": False, "properties": {
        "span": {"type": "string", "pattern": r"^(?<y>\d{4})-\k<y>$",
                 "description": "A year twice, e.g. '2024-2024'."}},
        "patternProperties": {r"^\p{Lu}\p{Ll}+$": {"type": "string", "pattern": r"^\p{L}+$"}}}
    make_tool(home, spec={"parameters": params})
    (d,), failed = load_all(paths(home))
    assert failed == []
    tool = ScriptTool(d)
    assert tool.decode({"span": "2024-2024", "Größe": "Straße"})
    for bad, field in (({"span": "2024-2025", "Größe": "a"}, "`span`"),
                       ({"span": "2024-2024", "Größe": "a1"}, "`Größe`")):
        with pytest.raises(errors.InvalidArguments, match=field):
            tool.decode(bad)
    make_tool(home, spec={"parameters": {**params, "required": ["span", "GRÖSSE"]}})
    assert "required 'GRÖSSE' at (top) is not a property" in only_error(home).message


def test_a_command_that_is_not_executable_says_how_to_fix_it(home: Path):
    folder = make_tool(home)
    (folder / "run").chmod(0o600)
    assert "chmod +x" in only_error(home).message


def test_a_folder_name_that_makes_no_tool_name_is_refused(home: Path):
    make_tool(home, name="Bad-Name")
    error = only_error(home)
    assert "rule 'name'" in error.message and "Bad-Name" in error.message


def test_lint_failures_and_good_tools_side_by_side_in_the_registry(home: Path, caplog):
    make_tool(home, "good")
    make_tool(home, "one_line", spec={"description": "Counts words."})
    make_tool(home, "fanout", spec={"concurrent": True})  # process risk: concurrent needs read_only
    make_tool(home, "allow", spec={"always_allow": True})
    with caplog.at_level(logging.WARNING, logger="scvd.tools.script"):
        registry = build_registry(Config(), paths(home))
    assert "script_good" in registry.names()
    errors_by_name = {e.name: e.message for e in registry.load_errors}
    assert set(errors_by_name) == {"script_one_line", "script_fanout", "script_allow"}
    assert "'three_lines'" in errors_by_name["script_one_line"]
    assert "'concurrent'" in errors_by_name["script_fanout"]
    assert "'always_allow'" in errors_by_name["script_allow"]
    # one log line per skipped definition, naming the file and the rule
    lines = [r.getMessage() for r in caplog.records if "skipping script tool" in r.getMessage()]
    assert len(lines) == 3 and all("tool.json" in line and "rule '" in line for line in lines)


def test_arguments_are_validated_by_the_schema_naming_the_field(home: Path):
    make_tool(home)
    (d,), _ = load_all(paths(home))
    tool = ScriptTool(d)
    assert tool.decode({"text": "a b"}) == {"text": "a b"}
    for bad, field in (({"text": 3}, "`text`"), ({"text": "x" * 101}, "`text`"),
                       ({"text": "a", "unique": "yes"}, "`unique`"), ({}, ": 'text' is a required"),
                       ({"text": "a", "extra": 1}, ": Additional properties")):
        with pytest.raises(errors.InvalidArguments) as info:
            tool.decode(bad)
        assert info.value.kind == "invalid_arguments" and field in info.value.message, info.value.message
        assert info.value.message.startswith("script_words: ")


def test_a_refused_long_argument_is_quoted_short_with_the_bound_it_broke(home: Path):
    """jsonschema's message quotes the value whole: a 50 KB text sent past `maxLength` came back
    whole in the error (to the agent, twice in its context), and `... is too long` never said how
    long it may be."""
    make_tool(home)
    (d,), _ = load_all(paths(home))
    with pytest.raises(errors.InvalidArguments) as info:
        ScriptTool(d).decode({"text": "word " * 10_000})
    assert info.value.message == ("script_words: argument `text`: '" + ("word " * 16)[:79] + "... (50,000 "
                                  "characters) is too long (maxLength 100)")


def test_declared_secrets_across_tools(home: Path):
    make_tool(home, "a", spec={"secrets": ["B_TOKEN", "A_TOKEN"]})
    make_tool(home, "b", spec={"secrets": ["A_TOKEN"]})
    make_tool(home, "broken", raw="{")
    assert declared_secrets(paths(home)) == ["A_TOKEN", "B_TOKEN"]


def test_a_symlinked_command_inside_the_folder_is_fine(home: Path):
    folder = make_tool(home, command="real")
    os.symlink("real", folder / "run")
    (d,), _ = load_all(paths(home))
    assert d.executable == (folder / "real").resolve()


LAZY = """
import sys
from pathlib import Path
from scvd import config, paths
from scvd.server import Daemon
p = paths.resolve({"SCV_HOME": sys.argv[1]})
paths.prepare(p)
daemon = Daemon(p, config.load(p.config_file, env={}), install_signals=False)
print(len(daemon.registry), "jsonschema" in sys.modules, "keyring" in sys.modules)
"""


def test_jsonschema_and_keyring_are_imported_only_when_used(home: Path):
    """An idle daemon without script tools imports neither; a script tool brings jsonschema only."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(root)}

    def started() -> list[str]:
        out = subprocess.run([sys.executable, "-c", LAZY, str(home)], env=env, capture_output=True,
                             text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        return out.stdout.split()

    home.mkdir(parents=True)
    count, jsonschema, keyring = started()
    assert (jsonschema, keyring) == ("False", "False")
    make_tool(home)
    more, jsonschema, keyring = started()
    assert int(more) == int(count) + 1 and (jsonschema, keyring) == ("True", "False")


def test_a_check_that_breaks_on_one_folder_leaves_the_others_loaded(home: Path, monkeypatch, caplog):
    """A bug in a check (a definition no rule foresaw) fails that tool's load, not scvd's start or reload."""
    make_tool(home, "fine")
    make_tool(home, "odd", spec={"description": DESCRIPTION + " Odd."})
    real = script_defs._check_schema

    def breaks_on_odd(path, schema):
        if "odd" in str(path):
            raise TypeError("unhashable type: 'dict'")  # a depth it cannot check is no bug: a rule says so
        return real(path, schema)

    monkeypatch.setattr(script_defs, "_check_schema", breaks_on_odd)
    (d,), (failed,) = load_all(paths(home))
    assert d.name == "script_fine" and failed.name == "script_odd"
    assert failed.message == "scvd could not check it (TypeError: unhashable type: 'dict'); see its log"
    assert "checking" in caplog.text and "odd" in caplog.text
