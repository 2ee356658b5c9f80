"""The tool design-rule lint (seed 003) and the registry: each rule fails once, a valid tool passes."""

from __future__ import annotations

import enum
from typing import Annotated, Any, Literal

import msgspec
import pytest

from scvd.tools.contract import (
    Plan, Registry, Tool, ToolDefinitionError, ToolFlags, ToolRisk, lint, object_root,
)

GOOD_DESCRIPTION = (
    "Read a text file from the workspace.\n"
    "Use for reading source files; write for changing them.\n"
    "Precondition: the path is inside the workspace."
)


def meta(text: str) -> Any:
    return msgspec.Meta(description=text)


class GoodArgs(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    path: Annotated[str, meta("Workspace-relative path of the file, from a listing, e.g. 'src/main.py'")]
    limit: Annotated[int, meta("Most bytes to return, e.g. 65536 (the default)")] = 65536
    mode: Annotated[Literal["text", "bytes"], meta("How to return it, e.g. 'text' for UTF-8; default text")] = "text"
    tags: Annotated[list[str], meta("Labels for the audit log when wanted, e.g. ['ci']")] = []


def make_tool(name: str = "good_tool", description: str = GOOD_DESCRIPTION, arguments: type = GoodArgs,
              risk: Any = ToolRisk.READ_ONLY, flags: ToolFlags = ToolFlags(),
              schema: dict[str, Any] | None = None) -> Tool:
    """A tool class built from parts, so each test breaks exactly one of them."""

    def plan(self: Tool, args: Any, ctx: Any) -> Plan:
        return Plan(risk=self.risk, summary="x")

    async def run(self: Tool, args: Any, plan: Plan, ctx: Any) -> Any:
        return {}

    body: dict[str, Any] = {"name": name, "description": description, "Arguments": arguments,
                            "risk": risk, "flags": flags, "plan": plan, "run": run}
    if schema is not None:
        body["input_schema"] = lambda self: schema
    return type("MadeTool", (Tool,), body)()


def broken_rule(tool: Tool) -> ToolDefinitionError:
    with pytest.raises(ToolDefinitionError) as info:
        lint(tool)
    return info.value


def test_valid_tool_passes_and_registers():
    tool = make_tool()
    lint(tool)
    registry = Registry([tool])
    assert registry.get("good_tool") is tool
    assert registry.names() == ["good_tool"]


@pytest.mark.parametrize("name", ["Read", "read-file", "x", "9read", "", "a" * 65, "read file"])
def test_name_rule(name):
    err = broken_rule(make_tool(name=name))
    assert err.rule == "name"
    assert repr(name) in str(err)


@pytest.mark.parametrize("description", [
    "Read a text file from the workspace, use for reading source files; write for changing them.",
    GOOD_DESCRIPTION + "\nAnd one more line that has no business being here.",
    "Read a text file from the workspace.\n\nUse for reading source files; write for changing them.",
])
def test_three_lines_rule(description):
    err = broken_rule(make_tool(description=description))
    assert err.rule == "three_lines"
    assert "3 lines" in str(err)


@pytest.mark.parametrize("description, said", [
    (GOOD_DESCRIPTION + "\n", "it ends with a newline (an empty last line): remove it"),
    (GOOD_DESCRIPTION + "\nOne more.", "it has 4"),
    ("Read a text file from the workspace.\n\nUse for reading source files; write for it.", "line 2 is empty"),
    # seed 003: the precondition line is left out when there is none
    ("Read a text file from the workspace.\nUse for reading source files; write for changing them.\n"
     "Precondition: none.", "line 3 ('Precondition: none.') says there is no precondition: leave the line out"),
    ("Read a text file from the workspace.\nUse for reading source files; write for changing them.\nN/A",
     "line 3 ('N/A') says there is no precondition: leave the line out"),
])
def test_three_lines_rule_says_what_is_wrong(description, said):
    """A trailing newline used to read "must be 3 lines ... got 3"."""
    err = broken_rule(make_tool(description=description))
    assert str(err).endswith(f"(2 when there is no precondition): {said}"), str(err)


@pytest.mark.parametrize("description", [
    "Read a file.\nUse for reading.\nIt exists.",  # too short
    "Read a text file from the workspace " + "x" * 120 + ".\n"
    "Use for reading source files; write for changing them.\nPrecondition: the file must exist.",  # too long
])
def test_length_rule(description):
    err = broken_rule(make_tool(description=description))
    assert err.rule == "length"
    assert str(len(description)) in str(err)


def test_english_rule_in_description():
    text = GOOD_DESCRIPTION.replace("Read a text file", "读取 a text file")
    err = broken_rule(make_tool(description=text))
    assert err.rule == "english"
    assert "读" in str(err)


def test_english_rule_in_parameter():
    class Args(msgspec.Struct):
        path: Annotated[str, meta("文件路径, e.g. 'a.txt'")]

    err = broken_rule(make_tool(arguments=Args))
    assert err.rule == "english"
    assert "'path'" in str(err) and "路" in str(err)  # which characters: a curly quote is hard to spot


def test_bold_rule():
    text = GOOD_DESCRIPTION.replace("Read a text file", "Read a **text** file")
    err = broken_rule(make_tool(description=text))
    assert err.rule == "no_bold"


def test_when_line_rule():
    text = GOOD_DESCRIPTION.replace("Use for reading source files; write for changing them.",
                                    "Reads bytes and decodes them as UTF-8 text.")
    err = broken_rule(make_tool(description=text))
    assert err.rule == "when_line"
    assert "Reads bytes and decodes them" in str(err)


PASSING_WHEN_LINE = "A passing line: 'Use for counting words in a text; bash for whole files.'"
NO_ALTERNATIVE = ("no alternative: after a ';' name another tool or way and what it is for, or compare with "
                  "'instead', 'rather than', 'not for', 'prefer', 'otherwise', 'unlike' or 'vs'")


@pytest.mark.parametrize("line, said", [
    # seed 003: "a description with only the core action and no trigger signal is treated as incomplete"
    ("Use when asked.", f"no real trigger: 'asked' names no task or situation; and {NO_ALTERNATIVE}"),
    ("Use when needed; write for changing them.", "no real trigger: 'needed' names no task or situation"),
    ("Use it for anything; write for changing them.", "no real trigger: 'anything' names no task or situation"),
    ("Use when the user asks for it; write for changing them.",
     "no real trigger: 'the user asks for it' names no task or situation"),
    # the When line compares with an alternative, as in `use for X; Y for Z`
    ("Use for reading source files.", NO_ALTERNATIVE),
    ("Use for reading source files; it is fast.", NO_ALTERNATIVE),
    ("Reads bytes; write for changing them.",
     "no trigger: say when to use the tool ('Use for <task>', 'Use when <situation>')"),
])
def test_the_when_line_needs_a_real_trigger_and_an_alternative(line, said):
    """`Use when asked.` passed: any line holding `when` did. The finding says what is missing and
    shows a line that passes."""
    err = broken_rule(make_tool(description=GOOD_DESCRIPTION.replace(
        "Use for reading source files; write for changing them.", line)))
    assert err.rule == "when_line"
    assert str(err).endswith(f"line 2 ({line!r}) has {said}. {PASSING_WHEN_LINE}"), str(err)


@pytest.mark.parametrize("line", [
    "Use for reading source files; write for changing them.",
    "Use when a file's text is needed; bash for listing directories.",
    "Use to read source files instead of cat in bash.",
    "Use for reading source files rather than bash.",
    "Use for source files, not for binary ones.",
    "Use on source files; prefer bash for logs.",
    "Use after a search names a file; otherwise bash.",
    "Use for one file (read vs bash).",
    PASSING_WHEN_LINE.split("'")[1],  # the line the finding shows passes
])
def test_when_lines_that_pass(line):
    lint(make_tool(description=GOOD_DESCRIPTION.replace("Use for reading source files; write for changing them.", line)))


def test_param_description_rule():
    class Args(msgspec.Struct):
        path: str

    err = broken_rule(make_tool(arguments=Args))
    assert err.rule == "param_description"
    assert "'path'" in str(err)


def test_param_example_rule():
    class Args(msgspec.Struct):
        path: Annotated[str, meta("The workspace-relative path to read")]

    err = broken_rule(make_tool(arguments=Args))
    assert err.rule == "param_example"
    assert "The workspace-relative path to read" in str(err)


class Colour(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Inner(msgspec.Struct):
    key: str


@pytest.mark.parametrize("annotation", [
    dict[str, str], list[str], Literal["a", "b"], Colour, Inner, list[str] | None,
], ids=["object", "array", "literal-enum", "enum-class", "struct", "optional-array"])
def test_non_trivial_parameter_needs_20_chars(annotation):
    Args = msgspec.defstruct("Args", [("value", Annotated[annotation, meta("e.g. x")])])
    err = broken_rule(make_tool(arguments=Args))
    assert err.rule == "param_detail"
    assert "'value'" in str(err)


@pytest.mark.parametrize("prop", [
    {"type": ["array", "null"]}, {"oneOf": [{"type": "object"}, {"type": "string"}]},
    {"allOf": [{"enum": ["a", "b"]}]},
], ids=["type-list", "one-of", "all-of"])
def test_a_non_trivial_parameter_in_a_hand_written_schema_needs_20_chars(prop):
    """A script tool's tool.json may spell an array as a type list or an alternative: seed 003's rule holds."""
    from scvd.tools.description_lint import parameter_findings

    schema = {"type": "object", "properties": {"rows": {**prop, "description": "Rows, e.g. [1]"}}, "required": ["rows"]}
    assert "param_detail" in [f.rule for f in parameter_findings(schema)]


def test_trivial_parameter_may_be_short():
    class Args(msgspec.Struct):
        n: Annotated[int, meta("Line count for the head, e.g. 3")]

    lint(make_tool(arguments=Args))


def test_optional_without_default_rule():
    # a Struct always gives optional fields a default; a hand-written schema may not
    schema = {"type": "object", "required": [], "properties": {
        "path": {"type": "string", "description": "Path to read when given, e.g. 'a.txt'"}}}
    err = broken_rule(make_tool(schema=schema))
    assert err.rule == "optional_default"
    assert "'path'" in str(err)


@pytest.mark.parametrize("risk", [ToolRisk.FILESYSTEM, ToolRisk.PROCESS, ToolRisk.DELEGATE])
def test_always_allow_only_for_read_only(risk):
    err = broken_rule(make_tool(risk=risk, flags=ToolFlags(always_allow=True)))
    assert err.rule == "always_allow"
    lint(make_tool(risk=ToolRisk.READ_ONLY, flags=ToolFlags(always_allow=True)))


def test_risk_must_be_a_tool_risk():
    err = broken_rule(make_tool(risk="read_only"))
    assert err.rule == "risk"


def test_error_names_tool_rule_and_text():
    err = broken_rule(make_tool(name="named_tool", description=GOOD_DESCRIPTION.replace("\n", " ")))
    assert err.tool == "named_tool"
    assert "named_tool" in str(err) and "three_lines" in str(err)


def test_duplicate_registration_refused():
    registry = Registry([make_tool()])
    with pytest.raises(ToolDefinitionError) as info:
        registry.register(make_tool())
    assert info.value.rule == "unique_name"
    assert "good_tool" in str(info.value)
    assert len(registry) == 1


def test_registry_lints_at_registration():
    with pytest.raises(ToolDefinitionError):
        Registry([make_tool(name="Bad")])


def test_visible_hides_system_use():
    plain = make_tool(name="plain_tool")
    hidden = make_tool(name="hidden_tool", flags=ToolFlags(system_use=True))
    registry = Registry([plain, hidden])
    assert registry.visible() == [plain]
    assert registry.visible(include_system=True) == [plain, hidden]


def test_decode_names_the_field():
    tool = make_tool()
    with pytest.raises(Exception) as info:
        tool.decode({"path": 3})
    assert info.value.kind == "invalid_arguments"
    assert "`path`" in info.value.message
    with pytest.raises(Exception) as info:
        tool.decode({"path": "a", "nope": 1})
    assert "nope" in info.value.message
    with pytest.raises(Exception) as info:
        tool.decode({})
    assert "path" in info.value.message


# --- the dispatch timeout a tool asks for (seed 003 timeout matrix) --------------------------


def test_dispatch_timeout_default_flag_no_timeout_and_own_deadline():
    from scvd.config import Config
    from scvd.tools.contract import NO_TIMEOUT, TIMEOUT_GRACE_SECONDS

    config = Config()
    bare = Plan(risk=ToolRisk.READ_ONLY, summary="x")
    assert make_tool().dispatch_timeout(bare, config) == config.tools.default_timeout_seconds == 900
    assert make_tool(flags=ToolFlags(timeout=30)).dispatch_timeout(bare, config) == 30
    waits_on_a_person = make_tool(flags=ToolFlags(timeout=NO_TIMEOUT))
    assert waits_on_a_person.dispatch_timeout(bare, config) is None
    assert waits_on_a_person.flags.as_dict()["no_timeout"] is True
    assert waits_on_a_person.flags.as_dict()["timeout_seconds"] is None
    own = Plan(risk=ToolRisk.PROCESS, summary="x", timeout=120)
    assert make_tool(flags=ToolFlags(timeout=30)).dispatch_timeout(own, config) == 120 + TIMEOUT_GRACE_SECONDS


# --- the rules seed 003 adds beyond the first version ------------------------------------


def test_the_precondition_line_may_be_omitted():
    two = "Read a text file from the workspace.\nUse for reading source files; write for changing them."
    lint(make_tool(description=two))


@pytest.mark.parametrize("text", [
    'Returns {"path": str, "size": int}.',
    "Returns: path and size of the file.",
    "Gives {path, size} back to the caller.",
])
def test_an_output_schema_dump_is_refused(text):
    err = broken_rule(make_tool(description=GOOD_DESCRIPTION.replace("Precondition: the path is inside the workspace.", text)))
    assert err.rule == "no_schema_dump"


@pytest.mark.parametrize("word", ["simply", "Powerful", "seamlessly", "please", "very"])
def test_filler_is_refused(word):
    err = broken_rule(make_tool(description=GOOD_DESCRIPTION.replace("Read a text", f"Read {word} a text")))
    assert err.rule == "no_filler"
    assert word in str(err)


@pytest.mark.parametrize("risk", [ToolRisk.FILESYSTEM, ToolRisk.PROCESS, ToolRisk.DELEGATE])
def test_concurrent_requires_read_only(risk):
    err = broken_rule(make_tool(risk=risk, flags=ToolFlags(concurrent=True)))
    assert err.rule == "concurrent"
    lint(make_tool(risk=ToolRisk.READ_ONLY, flags=ToolFlags(concurrent=True)))


@pytest.mark.parametrize("timeout", [0, -5, 0.0])
def test_timeout_must_be_positive(timeout):
    err = broken_rule(make_tool(flags=ToolFlags(timeout=timeout)))
    assert err.rule == "timeout"
    assert repr(timeout) in str(err)


def test_a_parameter_description_says_how_before_its_example():
    class Args(msgspec.Struct):
        path: Annotated[str, meta("e.g. 'src/main.py'")]

    err = broken_rule(make_tool(arguments=Args))
    assert err.rule == "param_how"


def test_an_optional_parameter_says_when_or_its_default():
    class Args(msgspec.Struct):
        limit: Annotated[int, meta("Most bytes to return, e.g. 4096")] = 4096

    err = broken_rule(make_tool(arguments=Args))
    assert err.rule == "param_when"
    assert "'limit'" in str(err)


def _param(desc: str, required: bool = True) -> dict[str, Any]:
    prop: dict[str, Any] = {"type": "string", "description": desc}
    return {"type": "object", "properties": {"text": prop if required else {**prop, "default": ""}},
            "required": ["text"] if required else []}


REQUIRED_PASSING = "A passing one: \"File to count, relative to the workspace; for a directory use bash, e.g. 'notes.txt'\""


@pytest.mark.parametrize("desc", [
    "Text words, e.g. 'a b'",  # the reviewer's repro: How and Example, no When
    "The text to count, e.g. 'for a test'",  # a 'for' inside the example says nothing of when
])
def test_a_required_parameter_says_its_when_too(desc):
    """seed 003: every parameter covers How/When/Example; only optional ones were asked for a When."""
    err = broken_rule(make_tool(schema=_param(desc)))
    assert err.rule == "param_when"
    assert str(err).endswith(
        f"required parameter 'text' description must say for what or in which case the value is given, where it "
        f"comes from or what it decides (for, when, if, unless, only, after, before, from, decides, selects, "
        f"chooses): {desc!r}. {REQUIRED_PASSING}"), str(err)


def test_an_optional_parameter_without_when_is_shown_a_passing_one():
    err = broken_rule(make_tool(schema=_param("Text words, e.g. 'a b'", required=False)))
    assert str(err).endswith("(default, omit, when, with, without, if, unless, only, after, for): "
                             "\"Text words, e.g. 'a b'\". A passing one: 'Most lines to count; omit for all of "
                             "them, e.g. 100'"), str(err)


@pytest.mark.parametrize("desc, required", [
    ("File to count, relative to the workspace; for a directory use bash, e.g. 'notes.txt'", True),  # the one shown
    ("The secret's name, from the failing tool's error, e.g. 'GITHUB_TOKEN'", True),
    ("Which log to read; decides the service, e.g. 'nginx'", True),
    ("The branch, e.g. 'main'; only one that exists", True),  # a When after the example counts
    ("Most lines to count; omit for all of them, e.g. 100", False),  # the one shown
    ("Most bytes to return, e.g. 65536 (the default)", False),
])
def test_parameter_whens_that_pass(desc, required):
    lint(make_tool(schema=_param(desc, required)))


def test_the_reviewers_repro_breaks_the_when_rules_and_nothing_else():
    """tool.json of script_wc2, which `scvctl tools --lint` reported ok."""
    tool = make_tool(name="script_wc2", schema=_param("Text words, e.g. 'a b'"),
                     description="Count the words of a text given as the argument here today.\nUse when asked.")
    from scvd.tools.contract import findings

    assert [f.rule for f in findings(tool)] == ["when_line", "param_when"]


def test_findings_lists_every_broken_rule_in_order():
    from scvd.tools.contract import findings

    class Args(msgspec.Struct):
        path: Annotated[str, meta("a path")]

    tool = make_tool(description="Simply reads {things}.", risk=ToolRisk.PROCESS,
                     flags=ToolFlags(concurrent=True), arguments=Args)
    rules = [f.rule for f in findings(tool)]
    assert rules == ["three_lines", "length", "no_schema_dump", "no_filler", "when_line", "concurrent",
                     "param_example", "param_when"]
    assert findings(make_tool()) == []


def test_third_party_tools_register_despite_findings_but_not_with_a_bad_name():
    registry = Registry()
    loose = make_tool(name="mcp_fs_read", description="Reads a file.")
    registry.register(loose, enforce_lint=False)
    assert registry.get("mcp_fs_read") is loose
    with pytest.raises(ToolDefinitionError) as info:
        registry.register(make_tool(name="Bad Name"), enforce_lint=False)
    assert info.value.rule == "name"


def test_load_errors_are_kept_for_the_tools_answer():
    registry = Registry()
    registry.add_error("/x/tool.json", "script_x", "rule 'length': too short")
    assert [(e.source, e.name, e.message) for e in registry.load_errors] == [
        ("/x/tool.json", "script_x", "rule 'length': too short")]


@pytest.mark.parametrize("limit", [1024, 1 << 20, 1 << 24])
def test_every_builtin_tool_passes_the_lint(limit: int) -> None:
    """build_registry() skips the lint for built-ins at start (it costs schema generation): this is their check."""
    from scvd.config import Config, ToolsConfig
    from scvd.tools import builtin_tools

    from scvd.tools.contract import findings

    tools = builtin_tools(Config(tools=ToolsConfig(read_limit_bytes=limit)), None)
    assert len(tools) >= 8
    for tool in tools:
        assert findings(tool) == [], tool.name


def test_every_example_tool_passes_the_lint() -> None:
    """examples/tools/ is what authors copy: it follows the rules it is meant to teach."""
    from pathlib import Path

    from scvd.tools.contract import findings
    from scvd.tools.script import ScriptTool
    from scvd.tools.script_defs import load_one

    folders = sorted((Path(__file__).resolve().parents[1] / "examples" / "tools" / "script").iterdir())
    assert folders
    for folder in folders:
        assert findings(ScriptTool(load_one(folder))) == [], folder.name


@pytest.mark.parametrize("listed, handed_on", [
    ({"type": "object"}, {"type": "object", "properties": {}}),
    ({"type": "object", "properties": None, "required": None}, {"type": "object", "properties": {}}),  # Go's nils
    # a type that is not object (null, "") and names that are not strings: TypeScript SDK hosts refused
    # the whole tools/list over them
    ({"type": None, "properties": {"a": {"type": "string"}}, "required": ["a", 1, None]},
     {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}),
    ({"type": "", "properties": {}, "required": [2]}, {"type": "object", "properties": {}}),
    ({"properties": {"a": {}}, "additionalProperties": False},
     {"type": "object", "properties": {"a": {}}, "additionalProperties": False}),
])
def test_a_schema_is_handed_on_with_an_object_root(listed, handed_on):
    """What an MCP host's tools/list and a model's function parameters get for an MCP server's schema."""
    assert object_root(listed) == handed_on


def test_a_well_formed_schema_is_handed_on_as_it_is():
    schema = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}
    assert object_root(schema) is schema



# the generic core (seed 000: "The loop and TUI do not contain name-specific execution code"): the
# server, the sessions and their lane, the approval gate, the call pipeline, the chat loop and the
# chat and approval views of scvctl. chat/catalog.py is left out: seed 003 has it name store_secret
# in the system prompt's credentials line
GENERIC_CORE = ("scvd/server.py", "scvd/reload.py", "scvd/session_open.py", "scvd/connection.py",
                "scvd/client_protocol.py", "scvd/sessions.py",
                "scvd/tool_listing.py", "scvd/tool_names.py", "scvd/approvals.py", "scvd/always_ask.py", "scvd/ask_globs.py",
                "scvd/secret_requests.py",
                "scvd/calls.py", "scvd/audit.py", "scvd/chat/engine.py", "scvd/chat/pipeline.py", "scvd/chat/service.py",
                "scvd/chat/transcript.py", "scvd/chat/trim.py", "scvctl/chat.py", "scvctl/approval_view.py")
TOOL_PREFIXES = ("agent_", "script_", "mcp__")  # the families of tool names built from data


def _mentions(source: str, names: set[str]) -> list[tuple[int, str]]:
    """(line, text) of each string constant in `source` that is a tool's name; docstrings and
    comments may give one as an example."""
    import ast

    tree = ast.parse(source)
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr)}
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
            and (node.value in names or node.value.startswith(TOOL_PREFIXES))]


def test_the_generic_core_never_names_a_tool() -> None:
    """A tool is data: no `if tool == "bash"` in the server, lane, gate, pipeline, loop or views."""
    from pathlib import Path

    from scvd.config import Config
    from scvd.tools import builtin_tools

    root = Path(__file__).resolve().parents[1]
    names = {tool.name for tool in builtin_tools(Config(), None)}
    assert {"read", "write", "bash", "agent_claude"} <= names
    found = {path: hits for path in GENERIC_CORE if (hits := _mentions((root / path).read_text(), names))}
    assert found == {}, "name-specific code in the generic core; make it a property of the tool instead"
    assert _mentions('"""e.g. read"""\nif tool.name == "bash": pass\nx = f"agent_{name}"\n', names) == [
        (2, "bash"), (3, "agent_")]
