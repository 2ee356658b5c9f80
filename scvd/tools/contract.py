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
import itertools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, ClassVar, Iterable

import msgspec

from .. import validation_text as vt
from ..errors import InvalidArguments, ToolDefinitionError
from .description_lint import Finding, description_findings, parameter_findings

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
NOT_NOW: Any = object()  # Tool.run_now: this call has to wait; run() does it


@dataclass(frozen=True)
class ToolFlags:
    """Behaviour flags of seed 003."""

    always_allow: bool = False  # exempt from the approval gate; read_only tools only
    concurrent: bool = False  # may run together with neighbouring concurrent calls
    background: bool = False  # does not hold the session lane; result comes later
    system_use: bool = False  # hidden from tools.list unless include_system
    # changes something, though read_only to the gate (a person's own input is its approval): an MCP
    # host is not told it is read-only
    modifies: bool = False
    timeout: float | None | _NoTimeout = None  # dispatch timeout; None = the default

    def as_dict(self) -> dict[str, Any]:
        timeout = None if self.timeout is NO_TIMEOUT else self.timeout
        return {
            "always_allow": self.always_allow,
            "concurrent": self.concurrent,
            "background": self.background,
            "system_use": self.system_use,
            "modifies": self.modifies,
            "timeout_seconds": timeout,
            "no_timeout": self.timeout is NO_TIMEOUT,
        }


class Plan:
    """What a call will do, worked out before approval and shown to the approver.

    `summary` and `details` are what the approver sees. A tool whose calls mostly run unasked
    may pass `describe` instead: a function returning (summary, details), called the first time
    either is read, so a call nobody is asked about does not build them."""

    __slots__ = ("risk", "_summary", "_details", "_describe", "sandboxed", "network", "writes_confined",
                 "targets", "folders", "always_ask", "timeout", "data", "release")

    def __init__(self, risk: ToolRisk, summary: str = "", details: dict[str, Any] | None = None, *,
                 sandboxed: bool = False, network: bool = True, writes_confined: bool = False,
                 targets: tuple[str, ...] = (), folders: bool = False, always_ask: str | None = None,
                 timeout: float | None = None,
                 data: Any = None,
                 release: Callable[[], None] | None = None,
                 describe: Callable[[], tuple[str, dict[str, Any]]] | None = None) -> None:
        self.risk = risk
        self._summary = summary
        self._details = {} if details is None else details
        self._describe = describe
        self.sandboxed = sandboxed  # runs inside bubblewrap
        self.network = network  # has network access where it runs
        self.writes_confined = writes_confined  # can write only inside the workspace
        # workspace-relative paths the call reads or writes, as asked and as resolved (a symlink followed):
        # the gate asks for one that approvals.always_ask or the secret-like rule names, whatever grant
        # exists. Empty: none known (bash, scripts and MCP tools can touch any path).
        self.targets = targets
        self.folders = folders  # the targets are folders (a run's directory): no file name among them
        # why the call asks whatever grant exists, from what the tool found in a target that no rule on
        # its path sees (a git config that holds a credential); None: the gate's rules alone decide
        self.always_ask = always_ask
        self.timeout = timeout  # the tool's own deadline, enforced by the tool
        self.data = data  # anything run() needs, computed once here
        self.release = release  # frees what `data` holds (an fd); called once the call ends

    @property
    def summary(self) -> str:
        if self._describe is not None:
            self._described()
        return self._summary

    @property
    def details(self) -> dict[str, Any]:
        if self._describe is not None:
            self._described()
        return self._details

    def _described(self) -> None:
        describe, self._describe = self._describe, None
        assert describe is not None
        self._summary, self._details = describe()

    def __repr__(self) -> str:
        return f"Plan(risk={self.risk!r}, summary={self.summary!r})"


def _no_progress(message: str) -> None:
    pass



def never() -> bool:
    """`session_services`' `gone` where nobody can leave (a direct call)."""
    return False


class CallContext(msgspec.Struct):
    """What the server hands a tool for one call (a Struct: made per call)."""

    call_id: str
    session_id: str
    workspace: Path  # the real path of the session's workspace
    workspace_fd: int  # an O_DIRECTORY fd held open for containment
    config: Any  # scvd.config.Config snapshot of the session
    paths: Any  # scvd.paths.Paths
    sandbox: Any = None  # scvd.sandbox.Sandbox, or None when off
    workspace_given: str = ""  # the workspace as session.open was given it (a link on the way): text only
    services: dict[str, Any] = msgspec.field(default_factory=dict)  # shared helpers (skills map, ...)
    turn: str | None = None  # the chat turn of the call, when it has one
    # the call frame's timeout_seconds, when it set one: a tool with a deadline of its own takes the
    # smaller (`own_deadline`), so that its deadline (KILL, the output so far) is the one that ends it
    timeout: float | None = None
    # a person approved this very call (set after the gate; a session grant or the policy
    # running it unasked does not count): sandbox.wrap(approved=...) relaxes the git guard
    approved: bool = False
    # the workspace's git metadata, found before the gate for a sandboxed call that runs unasked
    # (Sandbox.look): its sandbox keeps that read-only (sandbox.wrap_call reads it); None: found there
    git: list[str] | None = None
    # a tool that knows how far it is sends `call.progress` with its own message (set by the registry)
    progress: Callable[[str], None] = _no_progress

    @property
    def reads_ask(self) -> bool:
        """The session's policy asks before a read-only call too (approvals.policy 'always'): what plan()
        tells before approval must then not give away what only an approved read shows (a hash compared).
        Read where needed, not a field: a read's call would pay for it."""
        from ..approvals import READS_ASK_POLICY  # approvals imports this module

        return self.config.approvals.policy == READS_ASK_POLICY

    def start_dir(self, cwd: Path | None = None, cwd_fd: int | None = None) -> dict[str, Any]:
        """run_process's `cwd` and `cwd_fd` for a command started in the workspace (no `cwd_fd`), or in
        `cwd` below it whose fd (`cwd_fd`) the caller opened beneath workspace_fd: either is entered by
        its fd, so a directory moved or linked in its place (or above it) since is not."""
        if cwd_fd is None:
            return {"cwd": self.workspace, "cwd_fd": self.workspace_fd}
        return {"cwd": cwd, "cwd_fd": cwd_fd}


class Tool(abc.ABC):
    """Base class of a tool. Subclasses set the class attributes and implement plan/run."""

    name: ClassVar[str]
    description: ClassVar[str]
    Arguments: type[msgspec.Struct]
    risk: ClassVar[ToolRisk]
    flags: ToolFlags = ToolFlags()
    source: str = "builtin"  # where the definition came from, e.g. "mcp:fs"; Registry.replace_source swaps by it
    third_party: bool = False  # written by someone else (an MCP server): the lint reports, never blocks
    # folders holding what the tool runs, wherever the user put them (a script tool's, maybe in a
    # workspace): scvd's own places while it is loaded, so no unasked call rewrites what runs unasked
    runs_from: tuple[str, ...] = ()

    def input_schema(self) -> dict[str, Any]:
        """The JSON Schema of the arguments, generated from the Struct."""
        return inline_schema(self.Arguments)

    def decode(self, arguments: Any) -> Any:
        """Turn the raw arguments into the Struct, or raise InvalidArguments naming the field."""
        try:
            return msgspec.convert(arguments, self.Arguments)
        except msgspec.ValidationError as exc:
            if isinstance(arguments, dict):
                # models send null for an optional argument they mean to leave out (its default), and a
                # whole number as 600.0, which the schema's "integer" takes (JSON has one number type)
                try:
                    return msgspec.convert({k: whole_numbers(v) for k, v in arguments.items() if v is not None},
                                           self.Arguments)
                except msgspec.ValidationError as again:  # what is wrong besides those (or a required null)
                    exc = again
            if isinstance(arguments, dict):
                self.refuse(arguments)
            raise InvalidArguments(f"{self.name}: {vt.arguments_message(exc, self.Arguments)}") from exc

    def refuse(self, arguments: dict[str, Any]) -> None:
        """After arguments failed to decode: raise InvalidArguments that says what to send instead
        (naming the setting behind a bound), or return for the validator's own message."""

    @abc.abstractmethod
    def plan(self, args: Any, ctx: CallContext) -> Plan:
        """Check the call further and describe it for the approver. Runs before approval."""

    @abc.abstractmethod
    async def run(self, args: Any, plan: Plan, ctx: CallContext) -> Any:
        """Do the work; return a msgspec-encodable result or raise a ToolError."""

    # optional: a tool that can often finish without waiting overrides run_now (runs_now is then True)
    runs_now: ClassVar[bool] = False
    # decode() may take long on large arguments (a JSON Schema check of whatever came): the calls
    # registry runs it on a worker thread, so the loop goes on serving every other client
    decode_blocks: ClassVar[bool] = False

    # optional: a tool that can tell before approval that its call cannot run, from a source that
    # may block (a secret store), overrides before_gate (checks_before_gate is then True)
    checks_before_gate: ClassVar[bool] = False

    async def before_gate(self, args: Any, plan: Plan, ctx: CallContext) -> None:
        """After plan(), before a person is asked: raise a ToolError for a call that could not run
        anyway, so nobody approves it in vain. Awaited on the loop: hand blocking work to a thread."""

    def run_now(self, args: Any, plan: Plan, ctx: CallContext) -> Any:
        """run() without waiting, for a call that waited for nothing (no lane, no approval): the
        result, or NOT_NOW to have run() do it. It must not block: it runs on the event loop. Its
        result is sent as it is, so it is JSON-ready already: dicts, lists, str, int, float, bool
        and None only (run()'s goes through msgspec.to_builtins: a copy, 1 us of a 4 KiB read's)."""
        return NOT_NOW

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.runs_now = cls.run_now is not Tool.run_now
        cls.checks_before_gate = cls.before_gate is not Tool.before_gate
        if cls.runs_now and cls.checks_before_gate:  # run_now finishes a call in the step that planned it
            raise TypeError(f"{cls.__name__}: a tool with before_gate cannot have run_now")

    def secret_keys(self, config: Any) -> frozenset[str]:
        """The secret-store keys this tool's calls use (store_secret asks only for one of them)."""
        return frozenset()

    def session_services(self, workspace: Path, config: Any, paths: Any,
                         gone: Callable[[], bool] = never) -> dict[str, Any]:
        """Data this tool prepares once when a session opens (e.g. a skill map); put in ctx.services.
        It runs on a thread; `gone()` turns True once nobody waits for the session (its client
        left, scvd stops): long work should ask it now and then and stop."""
        return {}

    def dispatch_timeout(self, plan: Plan, config: Any) -> float | None:
        """The outer deadline of a call: the tool's own deadline plus grace, else the flag/default."""
        if plan.timeout is not None:
            return plan.timeout + TIMEOUT_GRACE_SECONDS
        if self.flags.timeout is NO_TIMEOUT:
            return None
        if self.flags.timeout is not None:
            return float(self.flags.timeout)
        return float(config.tools.default_timeout_seconds)  # seed 003's DEFAULT_TOOL_TIMEOUT, 900 s

    def timeout_fix(self, config: Any) -> str | None:
        """What gives this tool's calls more time than its dispatch timeout (the hint of a call
        stopped at it), or None when nothing in the configuration sets it."""
        return "raise tools.default_timeout_seconds in config.toml" if self.flags.timeout is None else None


def own_deadline(seconds: float, ctx: CallContext) -> float:
    """A tool's own deadline for this call: its timeout, or the call's timeout_seconds when smaller."""
    return seconds if ctx.timeout is None or seconds <= ctx.timeout else ctx.timeout


def check_timeout(seconds: float | None, ceiling: float, what: str) -> None:
    """The one timeout ceiling check (a call's, bash's, an agent's): above 0, at most tools.max_timeout_seconds."""
    if seconds is None:
        return
    if not seconds > 0:
        raise InvalidArguments(f"{what} {_shown(seconds)} must be above 0 (e.g. {min(60, ceiling):g})")
    if seconds > ceiling:
        raise InvalidArguments(
            f"{what} {_shown(seconds)} is above the ceiling of {ceiling:g} s (tools.max_timeout_seconds); "
            f"ask for at most {ceiling:g}, or raise tools.max_timeout_seconds in config.toml")


def _shown(seconds: float) -> str:
    try:
        return f"{seconds:g}"
    except OverflowError:  # an integer argument of 309 digits or more (no float holds it)
        return "of more than 300 digits"


def whole_numbers(value: Any) -> Any:
    """`value` with each float that holds a whole number (600.0) made that int, at any depth; `value`
    itself when it holds none: a copy of a script tool's arguments doubled what its waiting call held."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        made: dict[Any, Any] | None = None  # a copy, from the first item changed on
        for n, (k, v) in enumerate(value.items()):
            w = whole_numbers(v)
            if made is None and w is not v:
                made = dict(itertools.islice(value.items(), n))
            if made is not None:
                made[k] = w
        return value if made is None else made
    if isinstance(value, list):
        copied: list[Any] | None = None
        for n, v in enumerate(value):
            w = whole_numbers(v)
            if copied is None and w is not v:
                copied = value[:n]
            if copied is not None:
                copied.append(w)
        return value if copied is None else copied
    return value


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


def object_root(schema: dict[str, Any]) -> dict[str, Any]:
    """`schema` with the root that a call's arguments, an object, have wherever a schema is handed on
    (an MCP host's inputSchema, a model's function parameters): `type` object, `properties` an object,
    `required` a list of names. An MCP server's schema is not checked: one without arguments lists
    `{"type": "object"}`, a Go server null for none; hosts on the TypeScript SDK refused the whole
    tools/list over one such tool, and OpenAI every request with it ("object schema missing
    properties"). scvd still checks arguments with the schema as the server listed it."""
    required = schema.get("required", [])
    if (schema.get("type") == "object" and isinstance(schema.get("properties"), dict)
            and isinstance(required, list) and all(isinstance(r, str) for r in required)):
        return schema
    fixed = {k: v for k, v in schema.items() if k != "required"}
    fixed["type"] = "object"
    if not isinstance(fixed.get("properties"), dict):
        fixed["properties"] = {}
    if isinstance(required, list) and any(isinstance(r, str) for r in required):
        fixed["required"] = [r for r in required if isinstance(r, str)]
    return fixed


# --- the design-rule lint (seed 003) ------------------------------------------


NAME_RE = re.compile(r"^[a-z][a-z0-9_]{1,63}$")


def lint(tool: Tool) -> None:
    """Raise ToolDefinitionError for the first design rule `tool` breaks."""
    found = findings(tool)
    if found:
        others = "".join(f"; and rule {f.rule!r}: {f.text}" for f in found[1:])
        raise ToolDefinitionError(getattr(tool, "name", ""), found[0].rule, found[0].text, others)


def findings(tool: Tool) -> list[Finding]:
    """Every seed 003 rule `tool` breaks, in a fixed order (name, description, flags, parameters)."""
    name = getattr(tool, "name", "")
    if not NAME_RE.match(name or ""):
        return [Finding("name", f"{name!r} must be 2-64 chars of a-z, 0-9, _")]
    found = description_findings(tool.description)
    if not isinstance(tool.risk, ToolRisk):
        return found + [Finding("risk", f"{tool.risk!r} is not a ToolRisk")]
    found += _flag_findings(tool)
    found += parameter_findings(tool.input_schema())
    return found


def _flag_findings(tool: Tool) -> list[Finding]:
    found: list[Finding] = []
    read_only = tool.risk is ToolRisk.READ_ONLY
    if tool.flags.always_allow and not read_only:
        found.append(Finding("always_allow", "only read_only tools may skip approval"))
    if tool.flags.concurrent and not read_only:
        found.append(Finding("concurrent", "only read_only tools may run concurrently (no side effects)"))
    timeout = tool.flags.timeout
    if timeout is not None and timeout is not NO_TIMEOUT and not timeout > 0:
        found.append(Finding("timeout", f"timeout {timeout!r} must be a positive number of seconds"))
    return found


# --- the registry -------------------------------------------------------------


@dataclass(frozen=True)
class LoadError:
    """A tool definition that was skipped: where it came from, its name, and why."""

    source: str  # e.g. the tool.json path, or "mcp:<server>"
    name: str
    message: str


class Registry:
    """Tools by name. Registration lints the definition and refuses duplicates. A registered tool
    stays as it is (name, description, schema, risk, flags): to change one, replace it."""

    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        self.version = 0  # counts the changes of the tools: what is built from them (tools.list) keys on it
        self.load_errors: list[LoadError] = []
        self._watchers: dict[object, Callable[[], None]] = {}  # see watch()
        for tool in tools:
            self.register(tool)

    def register(self, tool: Tool, *, enforce_lint: bool = True) -> None:
        """Add `tool`; a lint finding refuses it unless `enforce_lint` is off (third-party tools,
        whose text we do not control: `scvctl tools --lint` still shows their findings)."""
        if enforce_lint:
            lint(tool)
        elif not NAME_RE.match(getattr(tool, "name", "") or ""):
            raise ToolDefinitionError(getattr(tool, "name", ""), "name", "a tool name must be 2-64 chars of a-z, 0-9, _")
        if tool.name in self._tools:
            raise ToolDefinitionError(tool.name, "unique_name", "a tool of this name is already registered")
        self._tools[tool.name] = tool
        self.version += 1

    def add_error(self, source: str, name: str, message: str) -> None:
        """A tool that could not be loaded (a bad tool.json, a failed MCP server): shown by
        `scvctl tools --errors`."""
        self.load_errors.append(LoadError(source=source, name=name, message=message))

    def not_loaded(self, name: str) -> str | None:
        """Why no tool `name` is here when one of that name failed to load (else None), for a call of it."""
        failed = next((e for e in self.load_errors if e.name == name), None)
        if failed is None:
            return None
        return (f"it failed to load: {failed.message} ({failed.source}); fix that, then reload scvd "
                "(`systemctl --user reload scvd`, or SIGHUP to scvd)")

    def watch(self, on_change: Callable[[], None]) -> Callable[[], None]:
        """Have `on_change()` called after replace_source changed the tools (an MCP server's came,
        went or were replaced), for those who show the list (an MCP host); returns the unwatch."""
        key = object()
        self._watchers[key] = on_change
        return lambda: self._watchers.pop(key, None)

    def replace_source(self, source: str, tools: Iterable[Tool]) -> list[ToolDefinitionError]:
        """Swap every tool from `source` for `tools`; returns the ones refused (a duplicate name)."""
        gone = [n for n, t in self._tools.items() if t.source == source]
        for name in gone:
            del self._tools[name]
        self.version += bool(gone)
        refused, added = [], False
        for tool in tools:
            try:
                self.register(tool, enforce_lint=not tool.third_party)
                added = True
            except ToolDefinitionError as exc:
                refused.append(exc)
        if gone or added:
            for on_change in list(self._watchers.values()):
                on_change()
        return refused

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def names(self) -> list[str]:
        return list(self._tools)

    def visible(self, include_system: bool = False) -> list[Tool]:
        return [t for t in self._tools.values() if include_system or not t.flags.system_use]

    def secret_keys(self, config: Any) -> frozenset[str]:
        """The secret-store keys its tools' calls use (Tool.secret_keys), each once."""
        return frozenset().union(*(t.secret_keys(config) for t in self._tools.values()))

    def runs_from(self) -> tuple[str, ...]:
        """The folders its tools run from (Tool.runs_from), each once, sorted."""
        return tuple(sorted({d for t in self._tools.values() for d in t.runs_from}))

    def __len__(self) -> int:
        return len(self._tools)
