"""The tool extension contract: what a tool is, the registry, and the design-rule lint.

A tool is data (name, description, argument Struct, risk, flags) plus `plan()`
and `run()`. The server, the session lane and the approval gate only ever see
this interface; nothing outside `scvd/tools/` and `scvd/adapters/` knows a tool
by name.

Per call the pipeline does: decode arguments into `Arguments` (refusing bad
input before any approval) -> `plan()` (more checks, the dynamic risk, the
approval summary; still before approval) -> approval gate -> `run()` under the
dispatch timeout, cancelled through asyncio task cancellation.
"""

from __future__ import annotations

import abc
import enum
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ClassVar, Iterable

import msgspec

from ..errors import InvalidArguments, ScvError

DEFAULT_DISPATCH_TIMEOUT = 15 * 60  # seed 003: DEFAULT_TOOL_TIMEOUT
TIMEOUT_GRACE_SECONDS = 5.0  # a tool with its own deadline gets this much on top of it


class ToolRisk(str, enum.Enum):
    """How much a call can do; decides whether it needs approval."""

    READ_ONLY = "read_only"  # reads inside the workspace
    FILESYSTEM = "filesystem"  # writes, or reads something secret-like
    PROCESS = "process"  # runs a process
    DELEGATE = "delegate"  # hands work to another agent that acts on its own


class _NoTimeout:
    def __repr__(self) -> str:
        return "NO_TIMEOUT"


NO_TIMEOUT: Any = _NoTimeout()  # for tools that wait on a person


@dataclass(frozen=True)
class ToolFlags:
    """Behaviour flags of seed 003."""

    always_allow: bool = False  # exempt from the approval gate; read_only tools only
    concurrent: bool = False  # may run together with neighbouring concurrent calls
    background: bool = False  # does not hold the session lane; result comes later
    system_use: bool = False  # hidden from tools.list unless include_system
    timeout: float | None | _NoTimeout = None  # dispatch timeout; None = the default

    def as_dict(self) -> dict[str, Any]:
        timeout = None if self.timeout is NO_TIMEOUT else self.timeout
        return {
            "always_allow": self.always_allow,
            "concurrent": self.concurrent,
            "background": self.background,
            "system_use": self.system_use,
            "timeout_seconds": timeout,
            "no_timeout": self.timeout is NO_TIMEOUT,
        }


@dataclass
class Plan:
    """What a call will do, worked out before approval and shown to the approver."""

    risk: ToolRisk
    summary: str
    details: dict[str, Any] = field(default_factory=dict)
    sandboxed: bool = False  # runs inside bubblewrap
    network: bool = True  # has network access where it runs
    writes_confined: bool = False  # can write only inside the workspace
    timeout: float | None = None  # the tool's own deadline, enforced by the tool
    data: Any = None  # anything run() needs, computed once here


@dataclass
class CallContext:
    """What the server hands a tool for one call."""

    call_id: str
    session_id: str
    workspace: Path  # the real path of the session's workspace
    workspace_fd: int  # an O_DIRECTORY fd held open for containment
    config: Any  # scvd.config.Config snapshot of the session
    paths: Any  # scvd.paths.Paths
    sandbox: Any = None  # scvd.sandbox.Sandbox, or None when off
    services: dict[str, Any] = field(default_factory=dict)  # shared helpers (skills map, ...)
    turn: str | None = None  # the chat turn of the call, when it has one
    progress: Callable[[str], None] | None = None


class Tool(abc.ABC):
    """Base class of a tool. Subclasses set the class attributes and implement plan/run."""

    name: ClassVar[str]
    description: ClassVar[str]
    Arguments: type[msgspec.Struct]
    risk: ClassVar[ToolRisk]
    flags: ToolFlags = ToolFlags()

    def input_schema(self) -> dict[str, Any]:
        """The JSON Schema of the arguments, generated from the Struct."""
        return inline_schema(self.Arguments)

    def decode(self, arguments: Any) -> Any:
        """Turn the raw arguments into the Struct, or raise InvalidArguments naming the field."""
        try:
            return msgspec.convert(arguments, self.Arguments)
        except msgspec.ValidationError as exc:
            raise InvalidArguments(f"{self.name}: {_explain(exc)}") from exc

    @abc.abstractmethod
    def plan(self, args: Any, ctx: CallContext) -> Plan:
        """Check the call further and describe it for the approver. Runs before approval."""

    @abc.abstractmethod
    async def run(self, args: Any, plan: Plan, ctx: CallContext) -> Any:
        """Do the work; return a msgspec-encodable result or raise a ToolError."""

    def session_services(self, workspace: Path, config: Any, paths: Any) -> dict[str, Any]:
        """Data this tool prepares once when a session opens (e.g. a skill map); put in ctx.services."""
        return {}

    def dispatch_timeout(self, plan: Plan, config: Any) -> float | None:
        """The outer deadline of a call: the tool's own deadline plus grace, else the flag/default."""
        if plan.timeout is not None:
            return plan.timeout + TIMEOUT_GRACE_SECONDS
        if self.flags.timeout is NO_TIMEOUT:
            return None
        if self.flags.timeout is not None:
            return float(self.flags.timeout)
        return float(getattr(config.tools, "default_timeout_seconds", DEFAULT_DISPATCH_TIMEOUT))


def _explain(exc: msgspec.ValidationError) -> str:
    text = str(exc)
    msg, sep, where = text.rpartition(" - at `$.")
    if sep:
        return f"argument `{where.rstrip('`')}`: {msg}"
    return text


def inline_schema(struct: type) -> dict[str, Any]:
    """msgspec's schema for a Struct with the top-level $ref resolved."""
    schema = msgspec.json.schema(struct)
    ref = schema.get("$ref", "")
    defs = schema.get("$defs", {})
    name = ref.rsplit("/", 1)[-1]
    if name in defs:
        top = dict(defs.pop(name))
        if defs:
            top["$defs"] = defs
        return top
    return schema


# --- the design-rule lint (seed 003) ------------------------------------------


class ToolDefinitionError(ScvError):
    """A tool definition breaks one of the tool design rules."""

    code = "tool_definition"

    def __init__(self, tool: str, rule: str, text: str) -> None:
        super().__init__(f"tool {tool!r} breaks rule {rule!r}: {text}")
        self.tool = tool
        self.rule = rule


NAME_RE = re.compile(r"^[a-z][a-z0-9_]{1,63}$")
WHEN_RE = re.compile(r"\buse (for|when|to|it|this|instead)\b|\bwhen\b", re.IGNORECASE)
EXAMPLE_RE = re.compile(r"\be\.g\.|\bexample\b|\bsuch as\b", re.IGNORECASE)


def lint(tool: Tool) -> None:
    """Raise ToolDefinitionError for the first design rule `tool` breaks."""
    name = getattr(tool, "name", "")
    if not NAME_RE.match(name or ""):
        raise ToolDefinitionError(name, "name", f"{name!r} must be 2-64 chars of a-z, 0-9, _")
    _lint_description(name, tool.description)
    if not isinstance(tool.risk, ToolRisk):
        raise ToolDefinitionError(name, "risk", f"{tool.risk!r} is not a ToolRisk")
    if tool.flags.always_allow and tool.risk is not ToolRisk.READ_ONLY:
        raise ToolDefinitionError(name, "always_allow", "only read_only tools may skip approval")
    _lint_parameters(name, tool.input_schema())


def _lint_description(name: str, text: str) -> None:
    if not text.isascii():
        bad = "".join(sorted({c for c in text if not c.isascii()}))
        raise ToolDefinitionError(name, "english", f"description has non-English text {bad!r}")
    lines = text.split("\n")
    if len(lines) != 3 or not all(line.strip() for line in lines):
        raise ToolDefinitionError(
            name, "three_lines", f"description must be 3 lines What/When/Precondition, got {len(lines)}"
        )
    size = len(text)
    if not 60 <= size <= 200:
        raise ToolDefinitionError(name, "length", f"description is {size} chars, must be 60-200")
    if "**" in text:
        raise ToolDefinitionError(name, "no_bold", "description must not use bold")
    if not WHEN_RE.search(lines[1]):
        raise ToolDefinitionError(
            name, "when_line", f"line 2 must give a trigger such as 'use for X; Y for Z': {lines[1]!r}"
        )


def _lint_parameters(name: str, schema: dict[str, Any]) -> None:
    required = set(schema.get("required", []))
    for param, prop in schema.get("properties", {}).items():
        desc = prop.get("description", "")
        if not desc:
            raise ToolDefinitionError(name, "param_description", f"parameter {param!r} has no description")
        if not desc.isascii():
            raise ToolDefinitionError(name, "english", f"parameter {param!r} description is not English")
        if not EXAMPLE_RE.search(desc):
            raise ToolDefinitionError(
                name, "param_example", f"parameter {param!r} description needs an example (e.g. ...): {desc!r}"
            )
        if _non_trivial(prop) and len(desc) < 20:
            raise ToolDefinitionError(
                name, "param_detail", f"parameter {param!r} is an object/array/enum; describe it in 20+ chars"
            )
        if param not in required and "default" not in prop:
            raise ToolDefinitionError(name, "optional_default", f"optional parameter {param!r} has no default")


def _non_trivial(prop: dict[str, Any]) -> bool:
    kinds = [prop] + list(prop.get("anyOf", []))
    # msgspec puts Enum classes and nested Structs under $defs: a $ref is always an enum or object
    return any("enum" in k or "$ref" in k or k.get("type") in ("object", "array") for k in kinds)


# --- the registry -------------------------------------------------------------


class Registry:
    """Tools by name. Registration lints the definition and refuses duplicates."""

    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        for tool in tools:
            self.register(tool)

    def register(self, tool: Tool) -> None:
        lint(tool)
        if tool.name in self._tools:
            raise ToolDefinitionError(tool.name, "unique_name", "a tool of this name is already registered")
        self._tools[tool.name] = tool

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def names(self) -> list[str]:
        return list(self._tools)

    def visible(self, include_system: bool = False) -> list[Tool]:
        return [t for t in self._tools.values() if include_system or not t.flags.system_use]

    def __len__(self) -> int:
        return len(self._tools)
