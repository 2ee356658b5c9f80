"""`scvctl agents`: sign the delegated agents in, check them, sign them out, import a Codex setup.

login / status / logout ask the daemon for a launch spec (`agents.spec`) and run
the agent's own command from it with this terminal attached, so the command sees
exactly the private home and cleaned environment the daemon's agent_* tools use.
`import codex` is done by the daemon (`agents.import`); this side only resolves
the source directory against the user's shell and prints the report.

With no daemon running, the same answers are computed here by the same code
(scvd.adapters.service) from the same config.toml and paths, with this shell's
environment in place of the daemon's: a user signs agents in before the first start.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator, Protocol

from scvd import config as config_mod, errors, paths as paths_mod, protocol as p, search_paths
from scvd.adapters import service, spec as specs
from scvd.adapters.service import default_codex_home
from scvd.adapters.locate import missing_interpreter
from scvd.adapters.signin import classify_status, missing_program_hint, path_advice
from scvd.notify import runs_as_unit

from .commands import connect, emit_json
from .client import Client

STATUS_TIMEOUT = 60.0  # one agent's status command, when listing all of them
STATUS_OUTPUT_BYTES = 1 << 20  # of its output, head and tail: enough for any verdict


class Answers(Protocol):
    """Where the answers to agents.spec / agents.import come from."""

    def spec(self, agent: str, action: str, extra: list[str]) -> p.AgentsLaunch: ...

    def import_setup(self, agent: str, source: str) -> p.AgentsImported: ...

    def systemd(self) -> bool | None: ...  # whether scvd runs as scvd.service (its PATH the unit's); None: unknown


class FromDaemon:
    """The running daemon answers, from its own environment."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self._systemd: list[bool | None] = []

    def systemd(self) -> bool | None:
        if not self._systemd:  # its cgroup, by the pid its status names
            self._systemd.append(runs_as_unit(self.client.status().pid))
        return self._systemd[0]

    def spec(self, agent: str, action: str, extra: list[str]) -> p.AgentsLaunch:
        return self.client.request(p.AgentsSpec, agent=agent, action=action, extra_args=list(extra))

    def import_setup(self, agent: str, source: str) -> p.AgentsImported:
        return self.client.request(p.AgentsImport, agent=agent, source=source)


class Here:
    """No daemon: the same code answers here, from the instance's config.toml and this environment."""

    def __init__(self) -> None:
        self.paths = paths_mod.resolve()
        self.config = config_mod.load(self.paths.config_file).config
        self.env = search_paths.clean(os.environ)[0]  # as scvd cleans its own at start: the CLIs it would find

    def spec(self, agent: str, action: str, extra: list[str]) -> p.AgentsLaunch:
        return service.answer_spec(agent, action, list(extra), config=self.config, paths=self.paths,
                                   env=self.env, withheld=self._withheld(agent))

    def _withheld(self, agent: str) -> frozenset[str]:
        """What the daemon would withhold, by this configuration and its tools (a script tool's secrets),
        and, but from codex's own sign-in, by the imported Codex setup (its key variables)."""
        from scvd import secret_names, tools  # here: only a sign-in without the daemon loads the tools
        from scvd.adapters.setup_keys import AGENT as SETUP_AGENT, SetupKeys

        registry = tools.build_registry(self.config, self.paths, log_skipped=False)
        names = secret_names.named(self.config, registry)
        return names if agent == SETUP_AGENT else names.union(SetupKeys(self.paths.adapters_dir)())

    def import_setup(self, agent: str, source: str) -> p.AgentsImported:
        return service.answer_import(agent, source, paths=self.paths, env=self.env)

    def systemd(self) -> bool | None:
        return None  # no scvd runs: how the next one starts is not known here


@contextlib.contextmanager
def answers(args: argparse.Namespace) -> Iterator[Answers]:
    """The daemon when it runs, else this process, saying so on stderr."""
    try:
        client = connect(args)
    except (errors.DaemonNotAnswering, errors.NotScvd, errors.SocketGone):
        raise  # a hung scvd (or one whose socket is gone) still owns the homes: working on them here would race it
    except errors.DaemonNotRunning:
        here = Here()
        print(f"scvd is not running; working on {here.paths.adapters_dir} directly, with this "
              "shell's environment cleaned as scvd cleans it", file=sys.stderr)
        yield here
        return
    with client:
        yield FromDaemon(client)


def cmd_attached(args: argparse.Namespace) -> int:
    """login / logout / status AGENT: the agent's own command with this terminal."""
    with answers(args) as side:
        answer = side.spec(args.agent, args.action, args.extra)
        if answer.spec is None:
            print(f"{args.agent}: {_unsupported(side, args.agent, answer.unsupported)}", file=sys.stderr)
            return 1
        systemd = side.systemd()  # for a hint once the agent ran, when this connection is closed
    if answer.spec.note:
        print(answer.spec.note, file=sys.stderr)
    try:
        code = run_attached(answer.spec)
    except OSError as exc:  # found, but no program this host can run: a broken install, another machine's build
        if program := missing_interpreter(answer.spec.argv[0], answer.spec.env):  # ENOENT naming the CLI
            raise errors.Failed(f"cannot run {answer.spec.argv[0]}; nothing ran: "
                                f"{missing_program_hint(specs.ADAPTERS[args.agent], program, systemd)}") from exc
        raise errors.Failed(
            f"cannot run {answer.spec.argv[0]} ({exc.strerror or exc}); nothing ran: reinstall it "
            f"(npm install -g {specs.ADAPTERS[args.agent].package}) or fix the program it names in its first line"
        ) from exc
    program = missing_interpreter(answer.spec.argv[0], answer.spec.env) if code == 127 else None
    if program:  # env said only "No such file or directory": say what to fix
        print(f"{args.agent}: {missing_program_hint(specs.ADAPTERS[args.agent], program, systemd)}", file=sys.stderr)
    return code


TERMINAL_ENV = ("TERM", "COLORTERM")


def run_attached(launch: p.LaunchSpec) -> int:
    """Run the spec with inherited stdio and wait; Ctrl+C is the agent's to handle."""
    # the terminal is this one, not the daemon's (none under systemd): its TERM and COLORTERM describe it
    env = {**launch.env, **{k: os.environ[k] for k in TERMINAL_ENV if k in os.environ}}
    try:
        proc = subprocess.Popen(launch.argv, env=env, cwd=launch.cwd)  # OSError: cmd_attached says what to do
        while True:
            try:
                code = proc.wait()
                break
            except KeyboardInterrupt:  # the terminal sent SIGINT to the agent too
                continue
    finally:
        _repair(launch)
    return code if code >= 0 else 128 - code


def _repair(launch: p.LaunchSpec) -> None:
    # the CLI just wrote its sign-in, folders 0755 included; the daemon repairs too, at each use
    home = Path(launch.cwd)
    if home.is_dir() and home.parent.name == "adapters":
        paths_mod.repair_tree(home)


def _unsupported(side: Answers, name: str, why: str | None) -> str:
    """Why the daemon cannot run `name`'s command; when the CLI is merely missing from the daemon's
    PATH (under systemd the user manager's, not this shell's), where this shell finds it, looked up
    as scvd looks (its PATH cleaned: search_paths.py). Found only through an entry scvd drops (a
    relative one), that entry is named by its absolute path: the folder as given is never scvd's."""
    import shutil

    executable = specs.ADAPTERS[name].executable
    found = shutil.which(executable, path=search_paths.clean(os.environ)[0]["PATH"])
    if found and isinstance(side, FromDaemon):
        return (f"{executable} is not on scvd's PATH, but this shell finds it at {found}: "
                f"{path_advice(os.path.dirname(found), side.systemd())}")
    if found or not (found := shutil.which(executable)):  # found here: scvctl alone finds what scvd would
        return why or "unavailable"
    entry = os.path.dirname(found)
    return (f"{executable} is not on scvd's PATH, but this shell finds it at {found}, through the entry {entry!r} "
            "of its PATH, which scvd drops: each process it starts would read that against its working "
            f"directory, a session's workspace; {path_advice(os.path.abspath(entry), side.systemd())}")


def cmd_status(args: argparse.Namespace) -> int:
    if args.agent and not args.json:
        return cmd_attached(args)  # its own status output, in this terminal
    if args.agent and args.extra:
        print("usage: scvctl agents status AGENT --json runs the agent's status command as scvd does; "
              "arguments after -- apply without --json only", file=sys.stderr)
        return 2
    with answers(args) as side:
        rows = [(name, *_status_line(side, name)) for name in ([args.agent] if args.agent else specs.ADAPTERS)]
    if args.json and args.agent:
        name, state, code = rows[0]
        emit_json({"agent": name, "state": state})
        return code  # as without --json: the command's own code, 1 when it could not run
    if args.json:
        emit_json([{"agent": name, "state": state} for name, state, _ in rows])
    else:
        width = max(len(name) for name, _, _ in rows)
        for name, state, _ in rows:
            print(f"{name:<{width}}  {state}")
    return 0


def _status_line(side: Answers, name: str) -> tuple[str, int]:
    """The agent's line, and the exit code `status AGENT` would have: its command's, 1 when it could not run."""
    try:
        answer = side.spec(name, "status", [])
    except errors.Failed as exc:  # its home refused: said on its line, the other agents still listed
        return exc.message, 1
    if answer.spec is None:
        return _unsupported(side, name, answer.unsupported), 1
    launch = answer.spec
    try:
        result = _run_status(launch)
    except OSError as exc:
        program = missing_interpreter(launch.argv[0], launch.env)
        return missing_program_hint(specs.ADAPTERS[name], program, side.systemd()) if program else (
            f"cannot run {launch.argv[0]}: {exc.strerror}"), 1
    finally:
        _repair(launch)
    if result.timed_out:
        return f"unknown (its status command ran past {STATUS_TIMEOUT:.0f} s)", 1
    state = classify_status(specs.ADAPTERS[name], result.exit_code, result.output, home=Path(launch.cwd),
                            signal=result.signal, systemd=side.systemd() if result.exit_code else None)
    code = result.exit_code if result.signal is None else 128 + signal.Signals[result.signal].value
    return state, 1 if code is None else code


def _run_status(launch: p.LaunchSpec) -> Any:
    """Run a status command with scvd's own process runner: in a process group of its own, killed
    whole past STATUS_TIMEOUT or on Ctrl-C (an npm launcher's real CLI is its child), and once it
    exits, its output read for a bounded time only, so a helper it left running in a session of
    its own, holding that output open, cannot keep the listing waiting."""
    import asyncio

    from scvd import process

    return asyncio.run(process.run_process(launch.argv, cwd=launch.cwd, env=launch.env,
                                           timeout=STATUS_TIMEOUT, output_limit=STATUS_OUTPUT_BYTES))


def cmd_import(args: argparse.Namespace) -> int:
    source = args.source or default_codex_home(os.environ)
    source = os.path.abspath(os.path.expanduser(str(source)))
    with answers(args) as side:
        answer = side.import_setup(args.agent, source)
    if args.json:
        emit_json(answer)
        return 0
    print(f"imported {', '.join(answer.copied)} from {source} into scvd's {answer.agent}")
    for key, value in answer.report.items():
        print(f"  {key}: {str(value).lower() if isinstance(value, bool) else value}")  # as config.toml says it
    for warning in answer.warnings:
        print(f"warning: {warning}")
    return 0
