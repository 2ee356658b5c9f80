"""Signing delegated agents in: launch specs for their own commands, and reading their output.

`scvctl agents login|status|logout` asks the daemon for a launch spec (or, with no
daemon running, computes the same one itself) and runs it with the terminal
attached, so the command sees exactly the private home and the cleaned
environment that the agent_* tools use. This module also recognises
output that reads like a missing sign-in and turns it into a hint a remote chat
can act on.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Collection, Mapping

from ..errors import InvalidRequest, Unavailable
from ..notify import environment_advice
from ..protocol import LaunchSpec
from . import spec as specs
from .env import build_env, passed_names
from .homes import ensure_home, forget_leftovers
from .locate import resolve_executable

# What the CLIs print when they have no usable sign-in (checked only when a run failed).
SIGNIN_PATTERNS = re.compile(
    r"not logged in|please run /login|use /login|no api key found|not signed in"
    r"|401 unauthorized|(?:status|http|error)[: ]+401\b|invalid api key|incorrect api key"
    r"|invalid x-api-key"
    r"|authentication_error|oauth token has expired|please log ?in|codex login"
    # a sign-in that expired: codex's refresh token ("... Please log out and sign in again."),
    # pi's OAuth ("Credentials may have expired ... Run '/login anthropic' to re-authenticate.")
    r"|sign in again|run '/login",
    re.IGNORECASE,
)


# The CLIs are node scripts (`#!/usr/bin/env node`): under systemd scvd's PATH may hold the CLI's
# folder but not node's, and env says so (exit 127), in ASCII or typographic quotes; pnpm's shell
# shims say it as sh does (`exec: node: not found`).
MISSING_PROGRAM = re.compile(r"env: ['\u2018\"]?([^\s'\u2019\":]+)['\u2019\"]?: No such file or directory"
                             r"|\bexec: ([^\s:]+): not found")


def failure_hint(adapter: specs.Adapter, output: str, failed: bool, systemd: bool | None = None) -> str | None:
    """The hint for a failed run's output that reads like a missing sign-in, or like a program
    the CLI needs (node) missing from scvd's PATH (`systemd`: see path_advice)."""
    if not failed:
        return None
    if SIGNIN_PATTERNS.search(output):
        return adapter.signin_hint
    program = missing_program(output)
    return missing_program_hint(adapter, program, systemd) if program else None


def missing_program(output: str) -> str | None:
    """The program (node) that env or a shell shim said it could not find, before the CLI started."""
    # the first line only: when node is missing, the CLI never started and env's line is all there is;
    # the same words later are the agent's own work (a command it ran), not its start
    missing = MISSING_PROGRAM.search(output.lstrip().partition("\n")[0])
    return (missing[1] or missing[2]) if missing else None


def missing_program_hint(adapter: specs.Adapter, program: str, systemd: bool | None) -> str:
    """What to do when `program`, which the CLI's first line names, is missing: a bare name from PATH,
    or an absolute path (an npm install made with a node since moved or removed)."""
    if os.path.isabs(program):
        return (f"{adapter.executable} needs {program}, which its first line names and which does not exist: "
                f"reinstall it with the node on scvd's PATH (npm install -g {adapter.package}), or install "
                f"{os.path.basename(program)} at {program}")
    # by its absolute path: scvd drops a relative PATH entry (search_paths.py), and a shell's PATH may have one
    return (f"{adapter.executable} needs {program}, which is not on scvd's PATH: "
            f"{path_advice(f'the absolute path of the folder of `command -v {program}`', systemd)}")


def path_advice(folder: str, systemd: bool | None) -> str:
    """How to put `folder` on scvd's PATH. `systemd`: whether scvd runs as scvd.service (its PATH is the
    unit's), or in the foreground or with --daemon (the PATH of the shell that started it); None: unknown."""
    return environment_advice(f"add {folder} to scvd's PATH", "Environment=PATH=...", f"whose PATH has {folder}",
                              systemd, "PATH")


def classify_status(adapter: specs.Adapter, exit_code: int | None, output: str, home: Path | None = None,
                    signal: str | None = None, systemd: bool | None = None) -> str:
    """One short verdict from a status command's output, never echoing it (it may hold a key).

    "not signed in" is checked against the configuration in `home`: an imported codex setup whose
    provider brings its own key works without any sign-in, though `codex login status` denies one.
    """
    for pattern, verdict in adapter.status_rules:
        if re.search(pattern, output):
            own = own_key(adapter, home) if verdict == "not signed in" and home is not None else None
            return f"needs no sign-in: {own}" if own else verdict
    program = missing_program(output) if exit_code else None
    if program:  # the CLI never started: its status is unknown, and this is what to fix
        return missing_program_hint(adapter, program, systemd)
    how = f"exit {exit_code}" if signal is None else f"signal {signal}"
    return f"unknown ({how}); run `scvctl agents status {adapter.name}` to see its output"


def own_key(adapter: specs.Adapter, home: Path) -> str | None:
    """How the configuration in `home` authenticates without the agent's sign-in, if it does."""
    from .codex_home import provider_own_key  # here: only scvctl's status needs it

    return provider_own_key(home) if adapter.name == "codex" else None


def adapter_or_error(agent: str) -> specs.Adapter:
    adapter = specs.get(agent)
    if adapter is None:
        raise InvalidRequest(f"no agent {agent!r}; known agents: {', '.join(specs.ADAPTERS)}")
    return adapter


def launch_spec(
    agent: str, action: str, extra_args: list[str], *, config: Any, paths: Any, env: Mapping[str, str],
    withheld: Collection[str],
) -> LaunchSpec:
    """argv, env and cwd to run `agent`'s own `action` command in its private home; `withheld`: the
    names of `env` an agent's run is not given (secret_names.py), so its sign-in is not given them either."""
    adapter = specs.configured(adapter_or_error(agent), config)
    if action not in specs.ACTIONS:
        raise InvalidRequest(f"no action {action!r}; use one of {', '.join(specs.ACTIONS)}")
    command = adapter.commands.get(action)
    if command is None:
        raise Unavailable(f"{adapter.title} has no {action} command")
    executable = resolve_executable(adapter, env)
    # a home left unsure refuses all but a logout: removing a sign-in sends no key anywhere
    home = ensure_home(paths, adapter.name, refuse_unsure=action != "logout")
    note = command.note
    if action == "logout" and (removed := forget_leftovers(paths, adapter.name)):  # forget every copy of a key
        said = (f"removed {', '.join(removed)} from {home}: copies of its files (a key among them) that an import "
                f"an older scvd did not finish left; runs stay refused until `scvctl agents import "
                f"{adapter.name}` again")
        note = f"{note}\n{said}" if note else said
    return LaunchSpec(
        argv=[executable, *command.args, *extra_args],
        env=build_env(env, adapter, home, passed_names(adapter, withheld)),
        cwd=str(home),
        note=note,
    )
