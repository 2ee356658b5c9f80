"""The agent_* tools: one generic Tool built from each adapter record.

The Arguments Struct is built per adapter and configuration, so the schema
offers `model` / `effort` only where the adapter maps them and advertises the
timeout ceiling as its `maximum`. Everything that can be refused is refused in
`plan()`, before approval, `cwd` included; `cwd` is looked up again when the call runs, so a
directory swapped for a symlink after approval is still caught, and entered by an fd opened
beneath the workspace's, so a swap of any folder on its path (the workspace itself) cannot move the run.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec

from .. import passenv, process, secret_names
from ..errors import Failed, InvalidArguments
from ..notify import runs_as_unit
from ..text import excerpt
from ..tools.containment import show
from ..tools.contract import CallContext, Plan, Tool, ToolFlags, ToolRisk, check_timeout, own_deadline
from ..tools.runs import hidden_values, redact_text, result_dict, timeout_error
from ..workers import run_file
from . import spec as specs
from .argv import EFFORTS, MODEL_PATTERN, bounded, build_argv, check_model, check_start, prompt_pattern
from .env import build_env, passed_names
from .homes import ensure_home, home_dir, repair_home
from .locate import missing_interpreter, open_cwd, resolve_cwd, resolve_executable
from .setup_keys import AGENT as SETUP_AGENT
from .signin import failure_hint, missing_program_hint

Meta = msgspec.Meta
PROMPT_SHOWN = 2000  # characters of the prompt in the summary and in argv; details.prompt has it whole
DELEGATE_WARNING = (
    "delegate risk: {title} acts on its own here; it may read and write files, run commands, "
    "use credentials it can reach, and send workspace content to its model provider"
)


def arguments_struct(adapter: specs.Adapter, config: Any) -> type[msgspec.Struct]:
    """The tool's argument Struct for this adapter and configuration: the single schema source."""
    tools = config.tools
    starts = "'-'" + (f" or {adapter.file_prefix!r}" if adapter.file_prefix else "")
    fields: list[tuple[Any, ...]] = [
        ("prompt", Annotated[str, Meta(min_length=1, pattern=prompt_pattern(adapter), description=(
            f"The task in plain words, passed as one argument; cannot start with {starts}; for a skill's "
            "flow, name the skill. "
            "e.g. Land the fix with the feature-flow skill."))]),
        ("cwd", Annotated[str | None, Meta(description=(
            "Directory inside the workspace to run in, relative or absolute; the agent picks up "
            "its AGENTS.md/CLAUDE.md and skills. Default: the workspace root. e.g. scv"))], None),
        # a number, as bash's: 90.5 was refused (`Expected int`), which a model reads as a wrong value
        ("timeout_seconds", Annotated[float, Meta(ge=1, le=tools.max_timeout_seconds, description=(
            f"Seconds before the agent is killed, up to {tools.max_timeout_seconds:g}; raise it for "
            f"long work such as builds or releases. e.g. {min(1800, tools.max_timeout_seconds):g}"))],
         float(tools.agent_timeout_seconds)),
    ]
    if adapter.model_args:
        model = Annotated[str, Meta(min_length=1, max_length=128, pattern=MODEL_PATTERN)]
        fields.append(("model", Annotated[model | None, Meta(description=(
            "Model for the agent CLI, 1-128 of letters, digits, ._:/@[]-. "
            "Default: the CLI's own choice. e.g. sonnet"))], None))
    if adapter.effort_args:
        fields.append(("effort", Annotated[Literal[EFFORTS] | None, Meta(description=(  # type: ignore[valid-type]
            "Reasoning effort: low, medium, high, xhigh or max. "
            "Default: the CLI's own choice. e.g. medium"))], None))
    name = "".join(p.capitalize() for p in adapter.tool_name.split("_")) + "Arguments"
    return msgspec.defstruct(name, fields, kw_only=True, forbid_unknown_fields=True)


def describe(adapter: specs.Adapter) -> str:
    """The 3-line tool description (What / When / Precondition)."""
    # the command without its flags: the description has 200 characters; the approval shows all
    run = " ".join([adapter.executable, *(a for a in adapter.fixed_args if not a.startswith("-"))])
    return (
        f"Delegate a task to {adapter.title} ({run}) in the workspace or a project dir.\n"
        f"Use for multi-step work an agent should own; bash for one command.\n"
        f"Needs {adapter.executable} installed and signed in on the scvd host."
    )


def cwd_targets(workspace: Path, asked: str | None, cwd: Path) -> tuple[str, ...]:
    """Plan.targets of a run: its directory as asked (when relative) and as resolved. Only the
    directory: the agent itself may go anywhere, so a grant for it covers whatever it does."""
    found = [os.path.normpath(asked)] if asked and not os.path.isabs(asked) else []
    found.append(os.path.relpath(cwd, os.path.realpath(workspace)))
    return tuple(dict.fromkeys(t for t in found if t != "." and t.split("/")[0] != ".."))


class AgentTool(Tool):
    """agent_<name>: run one native agent CLI on a prompt, with its private home."""

    risk = ToolRisk.DELEGATE
    flags = ToolFlags()

    def __init__(self, adapter: specs.Adapter, config: Any, paths: Any) -> None:
        self.adapter = adapter
        self.paths = paths
        self.name = adapter.tool_name  # type: ignore[misc]
        self.description = describe(adapter)  # type: ignore[misc]
        self.Arguments = arguments_struct(adapter, config)
        self.ceiling = float(config.tools.max_timeout_seconds)

    def refuse(self, arguments: dict[str, Any]) -> None:
        """What to send instead, not which regex or bound failed."""
        requested, prompt, model = (arguments.get(k) for k in ("timeout_seconds", "prompt", "model"))
        if isinstance(requested, (int, float)) and not isinstance(requested, bool):
            check_timeout(requested, self.ceiling, f"{self.name}: timeout_seconds")  # names the setting
            if requested < 1:  # the schema's minimum: not the validator's `Expected float >= 1.0`
                raise InvalidArguments(f"{self.name}: timeout_seconds {requested:g} is below the least of 1 s; "
                                       f"ask for more, e.g. {min(600, self.ceiling):g}")
        if isinstance(prompt, str) and prompt.startswith("-"):
            raise InvalidArguments(f"{self.name}: the prompt cannot start with '-' (the agent CLI would take it "
                                   "for an option): start it with a word, e.g. 'Fix the failing test'")
        if isinstance(prompt, str):  # pi's '@': the schema's pattern refuses it too
            check_start(self.adapter, prompt)
        if isinstance(model, str) and "model" in self.Arguments.__struct_fields__:
            try:
                check_model(model)
            except InvalidArguments as exc:
                raise InvalidArguments(f"{self.name}: {exc.message}") from None

    def plan(self, args: Any, ctx: CallContext) -> Plan:
        timeout = self._timeout(args, ctx)
        # refused here, before approval; resolved again in run()
        cwd = resolve_cwd(ctx.workspace, ctx.workspace_fd, args.cwd, ctx.workspace_given)
        executable = resolve_executable(self.adapter, os.environ)
        argv = build_argv(self.adapter, executable, args.prompt,
                          model=getattr(args, "model", None), effort=getattr(args, "effort", None))
        sandboxed = False
        if ctx.sandbox is not None:
            ctx.sandbox.check()  # a required but broken sandbox refuses before approval
            sandboxed = bool(ctx.sandbox.active)
        return Plan(
            risk=ToolRisk.DELEGATE,
            summary=self._summary(args, timeout),
            details=self._details(argv, args, timeout, ctx, sandboxed),
            sandboxed=sandboxed,
            network=True,
            writes_confined=False,
            targets=cwd_targets(ctx.workspace, args.cwd, cwd),
            folders=True,
            timeout=float(timeout),
            data={"argv": argv},
        )

    def _timeout(self, args: Any, ctx: CallContext) -> float:
        check_timeout(args.timeout_seconds, ctx.config.tools.max_timeout_seconds, f"{self.name}: timeout_seconds")
        return own_deadline(args.timeout_seconds, ctx)

    def _summary(self, args: Any, timeout: float) -> str:
        shown, note = excerpt(args.prompt, PROMPT_SHOWN)
        return f"{self.name} in {args.cwd or '.'} ({timeout:g}s){note}: {shown}"

    def _details(self, argv: list[str], args: Any, timeout: float, ctx: CallContext,
                 sandboxed: bool) -> dict[str, Any]:
        return {
            "executable": argv[0],
            "argv": [*argv[:-1], bounded(args.prompt, PROMPT_SHOWN)],  # the prompt once whole is enough
            "prompt": args.prompt,  # whole: at most MAX_PROMPT_BYTES, the kernel's limit for one argument
            "prompt_chars": len(args.prompt),
            "cwd": args.cwd or ".",
            "timeout_seconds": timeout,
            "workspace": str(ctx.workspace),
            "home": str(home_dir(self.paths, self.adapter.name)),
            "sandboxed": sandboxed,
            "pass_env": passenv.passed(os.environ, self._pass_env(ctx)),  # names only, never values
            "warning": DELEGATE_WARNING.format(title=self.adapter.title),
        }

    async def run(self, args: Any, plan: Plan, ctx: CallContext) -> Any:
        # looked up again now and held: the run enters this very directory (by its fd), not its path
        cwd, cwd_fd = await _open_cwd(ctx, args.cwd)
        try:
            return await self._run(args, plan, ctx, cwd, cwd_fd)
        finally:
            if cwd_fd is not None:
                os.close(cwd_fd)

    async def _run(self, args: Any, plan: Plan, ctx: CallContext, cwd: Path, cwd_fd: int | None) -> Any:
        home = await asyncio.to_thread(ensure_home, self.paths, self.adapter.name)
        argv = plan.data["argv"]
        if plan.sandboxed:
            argv = await ctx.sandbox.wrap_call(argv, ctx, network=True, rw_binds=[home], chdir=cwd)
        granted = self._pass_env(ctx)  # again: a reload since approval may have made one a secret's name
        # a passed GH_TOKEN the agent prints (a `gh auth status`, a debug line), as a script tool's
        hidden = hidden_values(granted)
        try:
            if cwd_fd is not None:  # the workspace or cwd swapped while the call waited
                await run_file(_check_held, self.name, ctx, args.cwd, cwd, cwd_fd)
            result = await process.run_process(
                argv, **ctx.start_dir(cwd, cwd_fd),
                env=build_env(os.environ, self.adapter, home, granted),
                timeout=plan.timeout, output_limit=ctx.config.tools.output_limit_bytes, wrapper=plan.sandboxed,
            )
        except OSError as exc:  # nothing started: the CLI removed since approval, a cwd scvd may not enter
            # ENOENT naming the CLI itself; its #! line read off the loop, as every look here: a hung mount
            if program := await run_file(missing_interpreter, plan.data["argv"][0], os.environ):
                raise Failed(f"{self.name}: cannot start {argv[0]}; nothing ran: "
                             f"{missing_program_hint(self.adapter, program, runs_as_unit())}") from exc
            where = f"{exc.filename}: " if exc.filename else ""
            raise Failed(f"{self.name}: cannot start {argv[0]} in {cwd} ({where}{exc.strerror or exc}); "
                         "nothing ran: fix that and retry the call") from exc
        finally:
            # the CLIs create 0755 folders; a home grows with sessions, so walk it off the loop
            await asyncio.to_thread(repair_home, self.paths, self.adapter.name)
        result.output = redact_text(result.output, hidden)
        return await self._result(result, cwd, args, plan, ctx)

    def _pass_env(self, ctx: CallContext) -> list[str]:
        """The adapter's pass_env (of the configuration the session opened with) less every live
        configuration's secret names: one a reload made a provider's key stays behind. The imported
        Codex setup's key variables only reach the codex agent, whose setup it is."""
        withheld = secret_names.withheld(ctx, own_setup=self.adapter.name == SETUP_AGENT)
        return passed_names(self.adapter, withheld)

    async def _result(self, result: Any, cwd: Path, args: Any, plan: Plan, ctx: CallContext) -> dict[str, Any]:
        executable = plan.data["argv"][0]
        failed = result.timed_out or result.exit_code != 0
        systemd = runs_as_unit() if failed else None  # where scvd's PATH is set, for a hint that names it
        hint = failure_hint(self.adapter, result.output, failed, systemd)
        if failed and not hint and (program := await run_file(missing_interpreter, executable, os.environ)):
            # bwrap's execvp failed as if the CLI were missing
            hint = missing_program_hint(self.adapter, program, systemd)
        if result.timed_out:  # like bash: a deadline is a `timeout` error carrying the output's end
            ceiling = float(ctx.config.tools.max_timeout_seconds)
            raise timeout_error(self.name, result, plan.timeout, ceiling, asked=args.timeout_seconds,
                                frame=ctx.timeout, hint=hint)
        out: dict[str, Any] = {"agent": self.adapter.name, "cwd": str(cwd), **result_dict(result)}
        out["duration_s"] = round(result.duration_s, 3)
        if hint:
            out["hint"] = hint
        return out


def tools(config: Any, paths: Any) -> list[Tool]:
    """agent_claude, agent_codex and agent_pi for this configuration."""
    specs.check_config(config)
    return [AgentTool(specs.configured(a, config), config, paths) for a in specs.ADAPTERS.values()]


async def _open_cwd(ctx: CallContext, asked: str | None) -> tuple[Path, int | None]:
    """open_cwd on the file pool (a workspace on a hung mount holds a thread there, not the loop),
    beneath a workspace fd of the job's own: a session closed meanwhile cannot pull it away."""
    held = os.dup(ctx.workspace_fd)

    def look() -> tuple[Path, int | None]:
        try:
            return open_cwd(ctx.workspace, held, asked, ctx.workspace_given)
        finally:
            os.close(held)

    return await run_file(look, drop=_close_cwd)


def _close_cwd(found: tuple[Path, int | None]) -> None:
    """The fd open_cwd opened for a call cancelled while it looked."""
    if found[1] is not None:
        os.close(found[1])


def _check_held(tool: str, ctx: CallContext, asked: str, cwd: Path, cwd_fd: int) -> None:
    """Refuse a run whose workspace (said as for any run in it) or `cwd` names another directory than
    the one looked up for it: moved, or a link or another directory put in its place since (run_process
    looks again)."""
    process.check_held(ctx.workspace, ctx.workspace_fd)
    try:
        process.check_held(cwd, cwd_fd)
    except Failed:
        raise Failed(f"{tool}: cwd {show(asked)} was replaced while the call started (moved, or a link or "
                     "another directory put in its place): nothing ran; call again once it is back",
                     hint="a command in another session may be moving it") from None
