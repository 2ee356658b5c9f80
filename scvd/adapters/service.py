"""The answers to `agents.spec` and `agents.import`: the daemon's, and scvctl's when no daemon runs.

Both sides call the same functions with the same config, paths and code, so a
sign-in done before scvd's first start lands in the very home, with the very
environment, that the agent_* tools use later.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Collection, Mapping

from ..errors import InvalidRequest, Unavailable
from ..protocol import AgentsImported, AgentsLaunch, Id, LaunchSpec
from . import signin
from .codex_import import import_codex
from .homes import ensure_home, repair_home

IMPORTERS = {"codex": import_codex}


def launch_spec(
    agent: str, action: str, extra_args: list[str], *, config: Any, paths: Any, env: Mapping[str, str],
    withheld: Collection[str],
) -> LaunchSpec:
    """How to run `agent`'s own login / status / logout exactly as the agent_* tool would; `withheld`:
    the names of `env` that hold a secret (secret_names.py), which neither gets."""
    return signin.launch_spec(agent, action, list(extra_args), config=config, paths=paths, env=env,
                              withheld=withheld)


def answer_spec(
    agent: str, action: str, extra_args: list[str], *, config: Any, paths: Any, env: Mapping[str, str],
    withheld: Collection[str], id: Id | None = None,
) -> AgentsLaunch:
    """The `agents.launch` answer: a spec, or why this agent has no such command. Blocking."""
    try:
        spec = launch_spec(agent, action, extra_args, config=config, paths=paths, env=env, withheld=withheld)
    except Unavailable as exc:
        return AgentsLaunch(id=id, agent=agent, action=action, unsupported=exc.message)
    return AgentsLaunch(id=id, agent=agent, action=action, spec=spec)


def answer_import(agent: str, source: str | None, *, paths: Any, env: Mapping[str, str],
                  id: Id | None = None) -> AgentsImported:
    """The `agents.imported` answer. Blocking."""
    return AgentsImported(id=id, agent=agent, **import_setup(agent, source, paths=paths, env=env))


def import_setup(agent: str, source: str | None, *, paths: Any, env: Mapping[str, str]) -> dict[str, Any]:
    """Copy the user's own setup of `agent` into its private home; {copied, report, warnings}.

    `source` must be absolute (scvctl resolves `--from` and the default against the
    user's shell); without it the daemon's own $CODEX_HOME or ~/.codex is used.
    """
    adapter = signin.adapter_or_error(agent)
    importer = IMPORTERS.get(adapter.name)
    if importer is None:
        raise InvalidRequest(
            f"{adapter.title} has no import; sign it in with `scvctl agents login {adapter.name}`"
        )
    if source is None:
        source = default_codex_home(env)
    if not os.path.isabs(source):
        raise InvalidRequest(f"source {source!r} must be an absolute path")
    home = ensure_home(paths, adapter.name, settle=False)  # the importer settles it, under its lock
    try:
        return importer(Path(source), home)
    finally:
        repair_home(paths, adapter.name)


def default_codex_home(env: Mapping[str, str]) -> str:
    """$CODEX_HOME, else ~/.codex, as codex itself finds its home."""
    if env.get("CODEX_HOME"):
        return os.path.abspath(os.path.expanduser(env["CODEX_HOME"]))
    home = env.get("HOME") or os.path.expanduser("~")
    return os.path.join(home, ".codex")
