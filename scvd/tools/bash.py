"""The `bash` tool of seed 000: `/bin/bash -lc COMMAND` in the workspace, through the process runner.

The argument Struct is built per configuration, so the timeout ceiling
(`tools.max_timeout_seconds`) is at once the schema's `maximum` and what
decoding refuses. With an active sandbox the command runs inside bubblewrap.
"""

from __future__ import annotations

import os
from typing import Annotated, Any, Callable, Mapping

import msgspec

from .. import secret_names
from ..errors import Failed, InvalidArguments
from ..process import MAX_ARG_BYTES, child_env, run_process
from ..text import excerpt
from .contract import CallContext, Plan, Tool, ToolRisk, check_timeout, own_deadline
from .runs import result_dict, timeout_error, workspace_error

SHELL = "/bin/bash"

DESCRIPTION = (
    "Run a command with /bin/bash -lc in the workspace; returns exit status and output.\n"
    "Use for builds, tests, git, scripts; read/write for one file.\n"
    "Output is capped; raise timeout_seconds for long jobs."
)


def make_arguments(tools_config: Any) -> type[msgspec.Struct]:
    """The Arguments Struct for this configuration: default and ceiling come from tools.*."""
    default = tools_config.command_timeout_seconds
    ceiling = tools_config.max_timeout_seconds
    command = Annotated[str, msgspec.Meta(
        min_length=1,
        description="Shell text for /bin/bash -lc, run in the workspace root, e.g. 'cargo test --workspace'.",
    )]
    timeout = Annotated[float, msgspec.Meta(
        gt=0,
        le=ceiling,
        description=(
            f"Seconds before the command's process group is killed, e.g. {min(600, ceiling):g} for a long build; "
            f"default {default:g}, at most {ceiling:g} (tools.max_timeout_seconds)."
        ),
    )]
    return msgspec.defstruct(
        "BashArguments",
        [("command", command), ("timeout_seconds", timeout, float(default))],
        forbid_unknown_fields=True,
        kw_only=True,
    )


def summarize(command: str, timeout: float, *, sandboxed: bool, network: bool) -> str:
    """The approver's first look: where it runs, its deadline, the command (its head; details has it whole)."""
    where = ("sandboxed, " + ("with network" if network else "no network")) if sandboxed else "unsandboxed"
    shown, note = excerpt(command)
    return f"bash ({where}, timeout {timeout:g} s){note}: {shown}"


def check_command(command: str) -> None:
    """Refuse before approval what the kernel would refuse after it."""
    if "\0" in command:
        raise InvalidArguments("bash: the command contains a NUL byte, which no argument can carry; remove it")
    size = len(command.encode())
    if size > MAX_ARG_BYTES:
        raise InvalidArguments(
            f"bash: the command is {size} bytes, above the kernel's {MAX_ARG_BYTES} for one argument; "
            "write a script into the workspace and run that")


class Bash(Tool):
    """`bash`: one shell command per call."""

    name = "bash"
    description = DESCRIPTION
    risk = ToolRisk.PROCESS

    def __init__(self, config: Any, env: Mapping[str, str] | None = None) -> None:
        self.Arguments = make_arguments(config.tools)
        self.ceiling = float(config.tools.max_timeout_seconds)
        self._env = env  # None: the daemon's environment at each call
        # the secret-store keys its registry's tools use (Registry.secret_keys), set by build_registry
        self.tools_secrets: Callable[[Any], frozenset[str]] | None = None

    def refuse(self, arguments: dict[str, Any]) -> None:
        requested = arguments.get("timeout_seconds")
        if isinstance(requested, (int, float)) and not isinstance(requested, bool):
            check_timeout(requested, self.ceiling, "bash: timeout_seconds")  # its message names the setting

    def withheld(self, ctx: CallContext) -> frozenset[str]:
        """What bash does not inherit (seed 000 keeps the rest): every live configuration's secret names
        (scvd/secret_names.py says which and why) and the keys this registry's tools take from the store."""
        names = secret_names.withheld(ctx)
        return names | self.tools_secrets(ctx.config) if self.tools_secrets is not None else names

    def plan(self, args: Any, ctx: CallContext) -> Plan:
        # the daemon builds a session's tools from its own config; an embedder may not: hold the session's
        check_timeout(args.timeout_seconds, ctx.config.tools.max_timeout_seconds, "bash: timeout_seconds")
        timeout = float(own_deadline(args.timeout_seconds, ctx))
        check_command(args.command)
        argv = [SHELL, "-lc", args.command]
        sandbox, network = ctx.sandbox, True
        sandboxed = sandbox is not None and sandbox.active
        if sandbox is not None:
            sandbox.check()  # sandbox.mode = bwrap with a failed probe: refuse before approval
        if sandboxed:
            network = bool(ctx.config.sandbox.network)
        return Plan(
            risk=ToolRisk.PROCESS,
            summary=summarize(args.command, timeout, sandboxed=sandboxed, network=network),
            details={
                "command": args.command, "timeout_seconds": timeout,  # whole: at most MAX_ARG_BYTES
                "cwd": str(ctx.workspace), "sandboxed": sandboxed, "network": network,
            },
            sandboxed=sandboxed, network=network, writes_confined=sandboxed,
            timeout=timeout, data=argv,
        )

    async def run(self, args: Any, plan: Plan, ctx: CallContext) -> Any:
        tools = ctx.config.tools
        env = child_env(os.environ if self._env is None else self._env, remove=self.withheld(ctx))
        argv = plan.data  # wrapped now: the sandbox's binds depend on whether a person approved
        if plan.sandboxed:
            argv = await ctx.sandbox.wrap_call(argv, ctx, network=plan.network)
        try:
            result = await run_process(
                argv, **ctx.start_dir(), env=env, timeout=plan.timeout,
                output_limit=tools.output_limit_bytes, wrapper=plan.sandboxed,
            )
        except OSError as exc:  # nothing started: a missing shell, bwrap or workspace
            raise workspace_error("bash", exc, ctx.workspace) or Failed(f"bash: cannot start {argv[0]} in {ctx.workspace}: {exc.strerror or exc}") from exc
        if result.timed_out:
            raise timeout_error("bash", result, plan.timeout, float(tools.max_timeout_seconds),
                                asked=args.timeout_seconds, frame=ctx.timeout)
        return result_dict(result)


def tools(config: Any, paths: Any) -> list[Tool]:
    return [Bash(config)]
