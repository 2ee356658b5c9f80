"""scvctl's command line: every command's arguments, and which module's function runs it.

Rule: nothing here imports a module that implements a command. Each handler is named as
(module, function) and imported when its command runs, so `scvctl --help` or `scvctl status`
pays only for its own imports (an MCP host waits for `scvctl mcp`'s start; the test suite starts
scvctl by the hundred). The constants the help texts show are written here, and
tests/test_scvctl_parser.py holds them to their sources.
"""

from __future__ import annotations

import argparse
import importlib
import math
from pathlib import Path
from typing import Any

from scvd import __version__
from scvd.adapters.names import AGENTS

# scvctl.chat's COMMANDS and LINE_RULE, as `scvctl chat --help` tells them
CHAT_DESCRIPTION = ("Chat with the model in this terminal; its tool calls run here, asking you what needs "
                    "approval. Commands, each on a line alone: /help lists them, /clear forgets the history, "
                    "/exit or /quit (or Ctrl-D) leaves; Ctrl-C stops a running turn. A line that is one /word "
                    "alone is a command; any other line goes to the model (/etc/hosts too).")
# scvd.protocol's: the host's tool name budget (64 less Claude Code's `mcp__scvd__`), and its floor
HOST_TOOL_NAME, MIN_HOST_TOOL_NAME = 53, 16


class Handler:
    """A command's function, scvctl.`module`.`name`, imported once the command runs."""

    def __init__(self, module: str, name: str) -> None:
        self.module, self.name = module, name

    def __call__(self, args: argparse.Namespace) -> int:
        return getattr(importlib.import_module(f"scvctl.{self.module}"), self.name)(args)


def shared_options(json: bool = True) -> argparse.ArgumentParser:
    """The options every command takes. One with no JSON output (its `no_json` says why) takes --json
    unlisted in its help (json=False), only to refuse it in words."""
    common = argparse.ArgumentParser(add_help=False)
    # a str: an empty one (an unset variable) is no path, as SCV_SOCKET="" is none ("" as a Path is ".")
    common.add_argument("--socket", default=argparse.SUPPRESS,
                        help="scvd's socket (default: $SCV_SOCKET, else the instance's socket)")
    common.add_argument("--json", action="store_true", default=argparse.SUPPRESS,
                        help="print machine-readable JSON" if json else argparse.SUPPRESS)
    return common


def build_parser() -> argparse.ArgumentParser:
    common = shared_options()
    parser = argparse.ArgumentParser(prog="scvctl", parents=[common],
                                     description="Control scvd: approvals, agents, status.")
    parser.add_argument("--version", action="version", version=f"scvctl {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    cmd = sub.add_parser("status", parents=[common], help="the daemon's state")
    cmd.set_defaults(handler=Handler("commands", "cmd_status"))
    cmd = sub.add_parser("ping", parents=[common], help="check that scvd answers")
    cmd.set_defaults(handler=Handler("commands", "cmd_ping"))
    cmd = sub.add_parser("sessions", parents=[common], help="open sessions")
    cmd.set_defaults(handler=Handler("commands", "cmd_sessions"))
    cmd = sub.add_parser("tools", parents=[common], help="the tools and their schemas")
    cmd.add_argument("--include-system", action="store_true", help="also list system tools")
    cmd.add_argument("--errors", action="store_true",
                     help="list the tools that could not be loaded (a bad tool.json, a failed MCP server); "
                          "exit 1 when scvd's last reload failed, which read no tool anew")
    cmd.add_argument("--lint", action="store_true",
                     help="print every tool's findings under the seed 003 design rules, and why each tool "
                          "that failed to load did")
    cmd.set_defaults(handler=Handler("commands", "cmd_tools"))
    _add_approvals(sub, common)
    _add_call(sub, common)
    for add in (_add_agents, _add_secrets, add_service, _add_mcp, _add_chat):
        add(sub, common)
    return parser


def _add_approvals(sub: Any, common: argparse.ArgumentParser) -> None:
    approvals = sub.add_parser("approvals", parents=[common], help="list, decide and watch approvals")
    approvals.set_defaults(handler=Handler("commands", "cmd_approvals_list"))
    asub = approvals.add_subparsers(dest="approvals_command", metavar="ACTION")
    cmd = asub.add_parser("list", parents=[common], help="pending approvals (the default)")
    cmd.set_defaults(handler=Handler("commands", "cmd_approvals_list"))
    cmd = asub.add_parser("show", parents=[common], help="one pending request whole (paged on a terminal)")
    cmd.add_argument("approval_id")
    cmd.set_defaults(handler=Handler("commands", "cmd_approvals_show"))
    cmd = asub.add_parser("approve", parents=[common], help="approve one request")
    cmd.add_argument("approval_id")
    cmd.add_argument("--session", action="store_true",
                     help="also approve this tool at this risk for the rest of the session")
    cmd.set_defaults(handler=Handler("commands", "cmd_approve"))
    cmd = asub.add_parser("deny", parents=[common], help="deny one request")
    cmd.add_argument("approval_id")
    cmd.add_argument("--reason", help="told to the agent")
    cmd.set_defaults(handler=Handler("commands", "cmd_deny"))
    cmd = asub.add_parser("watch", parents=[common],
                          help="show requests as they arrive and answer y / n / s(ession)")
    cmd.set_defaults(handler=Handler("watch", "cmd_watch"))


def _add_call(sub: Any, common: argparse.ArgumentParser) -> None:
    cmd = sub.add_parser("call", parents=[common], help="run one tool call through the normal approval gate")
    cmd.add_argument("--workspace", type=Path, default=Path("."), help="the workspace (default: here)")
    cmd.add_argument("--timeout", type=_seconds, help="dispatch timeout in seconds")
    cmd.add_argument("tool")
    cmd.add_argument("arguments", nargs="?", default="{}",
                     help="the arguments as a JSON object, or - to read it from stdin (past the shell's "
                          "limit on one argument: scvctl call write - < args.json)")
    cmd.set_defaults(handler=Handler("commands", "cmd_call"))


def _seconds(text: str) -> float:
    """A finite number of seconds: nan, inf and 1e400 went to scvd as null (no timeout asked);
    a word is said as such, not as argparse's `invalid _seconds value`."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number of seconds, e.g. 30")
    return value


def _add_agents(sub: Any, common: argparse.ArgumentParser) -> None:
    agents = sub.add_parser("agents", parents=[common], help="sign delegated agents in and out",
                            description="Sign the delegated agents (claude, codex, pi) in, out, "
                                        "check them, or import your own Codex setup.")
    agents.set_defaults(handler=Handler("agents", "cmd_status"), agent=None, extra=[])
    asub = agents.add_subparsers(dest="agents_command", metavar="ACTION")
    names = ", ".join(AGENTS)
    for action, text in (("login", "sign an agent in (its own login, terminal attached)"),
                         ("logout", "sign an agent out")):
        cmd = asub.add_parser(action, parents=[shared_options(json=False)], help=text)
        cmd.add_argument("agent", choices=list(AGENTS), metavar="AGENT", help=names)
        _add_extra(cmd)
        cmd.set_defaults(handler=Handler("agents", "cmd_attached"), action=action,
                         no_json=f"scvctl agents {action}, which runs the agent's own {action} in this terminal")
    cmd = asub.add_parser("status", parents=[common],
                          help="each agent's sign-in state, one line each; with AGENT its own output")
    cmd.add_argument("agent", nargs="?", choices=list(AGENTS), metavar="AGENT", help=names)
    _add_extra(cmd)
    cmd.set_defaults(handler=Handler("agents", "cmd_status"), action="status")
    cmd = asub.add_parser("import", parents=[common], help="copy your own Codex setup into scvd's codex")
    cmd.add_argument("agent", choices=["codex"], metavar="AGENT", help="codex")
    # a str: an empty one ("$CODEX_HOME" unset) is the default, not "." (whatever config.toml is here)
    cmd.add_argument("--from", dest="source",
                     help="your Codex home (default: $CODEX_HOME, else ~/.codex)")
    cmd.set_defaults(handler=Handler("agents", "cmd_import"))


def _add_extra(cmd: argparse.ArgumentParser) -> None:
    # a default: without one argparse counts a "*" positional as required, and named it
    # ("required: AGENT, extra") when AGENT alone was missing
    cmd.add_argument("extra", nargs="*", default=[], metavar="ARG",
                     help="arguments for the agent's own command, after -- (e.g. -- --device-auth)")


def _add_secrets(sub: Any, common: argparse.ArgumentParser) -> None:
    secrets = sub.add_parser("secrets", parents=[common], help="set, list and delete secrets for tools",
                             description="Secrets for script tools, MCP servers and chat providers: the OS "
                                         "keyring (service scv) when one is usable, else secrets.toml (0600) "
                                         "in the config dir; scvd falls back to its own environment.")
    secrets.set_defaults(handler=Handler("secrets", "cmd_list"))
    ssub = secrets.add_subparsers(dest="secrets_command", metavar="ACTION")
    cmd = ssub.add_parser("set", parents=[common],
                          help="store a value: masked prompt on a terminal, else read from stdin")
    cmd.add_argument("key", help="the name, e.g. GITHUB_TOKEN")
    cmd.set_defaults(handler=Handler("secrets", "cmd_set"))
    cmd = ssub.add_parser("list", parents=[common],
                          help="names and where each is found; those tool.json or config.toml name and no "
                               "store holds show as missing (the default)")
    cmd.set_defaults(handler=Handler("secrets", "cmd_list"))
    cmd = ssub.add_parser("delete", parents=[common], help="remove a stored value")
    cmd.add_argument("key")
    cmd.set_defaults(handler=Handler("secrets", "cmd_delete"))


def add_service(subparsers: Any, common: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    """Mount `service install|uninstall`; each sets `handler(args) -> exit code`.

    `common` is scvctl's shared options parser (it brings --json); without it
    (`python -m scvctl.service`) the commands add their own --json.
    """
    parents = [common] if common is not None else []
    parser = subparsers.add_parser("service", parents=parents, help="install scvd as a systemd user service")
    sub = parser.add_subparsers(dest="service_command", metavar="ACTION", required=True)
    inst = sub.add_parser("install", parents=parents, help="write the user units and enable them")
    inst.add_argument("--socket-activated", action="store_true",
                      help="enable scvd.socket: systemd listens and starts scvd on the first connection")
    inst.set_defaults(handler=Handler("service", "cmd_install"))
    uninst = sub.add_parser("uninstall", parents=parents, help="disable and remove the user units")
    uninst.set_defaults(handler=Handler("service", "cmd_uninstall"))
    for p in (inst, uninst):
        p.add_argument("--dry-run", action="store_true", help="print what would be written and run")
        if common is None:
            # SUPPRESS: a --json given earlier on the line must not be reset by this default
            p.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print JSON")
    return parser


def _add_mcp(sub: Any, common: argparse.ArgumentParser) -> None:
    cmd = sub.add_parser("mcp", parents=[shared_options(json=False)], help="serve scvd's tools to an MCP host over stdio")
    # a str: an empty one (an unset variable in the host's command) must not read as "." (here, maybe /)
    cmd.add_argument("--workspace", help="the session's workspace (default: here, unless here is /)")
    cmd.add_argument("--max-tool-name", type=_tool_name_budget, default=HOST_TOOL_NAME, metavar="N", help=(
        f"shorten tool names longer than N for the host (default {HOST_TOOL_NAME}: 64 less the `mcp__scvd__` "
        "Claude Code puts before them; 64 less your host's own prefix)"))
    cmd.set_defaults(handler=Handler("mcp", "cmd_mcp"),
                     no_json="scvctl mcp, which speaks MCP's JSON-RPC on stdin and stdout")


def _tool_name_budget(text: str) -> int:
    if not text.isdigit() or int(text) < MIN_HOST_TOOL_NAME:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a length of at least {MIN_HOST_TOOL_NAME} (a name's start, `_` and 8 hex "
            "digits), e.g. 53: 64 less the prefix the host puts before scvd's tool names")
    return int(text)


def _add_chat(sub: Any, common: argparse.ArgumentParser) -> None:
    cmd = sub.add_parser("chat", parents=[shared_options(json=False)], help="chat with the model in this terminal; tools run here",
                         description=CHAT_DESCRIPTION)
    cmd.add_argument("--workspace", type=Path, default=Path("."), help="the workspace (default: here)")
    cmd.add_argument("--conversation", help="resume a conversation by its id")
    cmd.add_argument("--provider", help="a [providers.NAME] or codex (default: chat.provider)")
    cmd.set_defaults(handler=Handler("chat", "cmd_chat"), no_json="scvctl chat, which is interactive: "
                                                                 "`scvctl exec --json PROMPT` gives a turn as JSON")
    cmd = sub.add_parser("exec", parents=[common], help="one headless turn; the answer goes to stdout")
    cmd.add_argument("--workspace", type=Path, default=Path("."), help="the workspace (default: here)")
    cmd.add_argument("--provider", help="a [providers.NAME] or codex (default: chat.provider)")
    cmd.add_argument("--yes", action="store_true", help="approve this turn's calls yourself, without asking")
    cmd.add_argument("prompt")
    cmd.set_defaults(handler=Handler("chat", "cmd_exec"))
