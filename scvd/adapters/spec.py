"""The native agent adapters as data: one record per agent CLI, and the config overlay.

Everything agent-specific lives in the records below: the executable, the fixed
argument vector, how a model and an effort become arguments, the sign-in
commands, the extra variables the agent needs, and the text of its hints.
Generic code (argv.py, env.py, tools.py, signin.py) turns a record into a tool
or a launch spec. Project files never reach these records; only the instance
config may change `model_args` / `effort_args` and add `pass_env`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Mapping

from ..errors import ConfigError

MODEL = "{model}"
EFFORT = "{effort}"


@dataclass(frozen=True)
class Command:
    """One sign-in action (login, status, logout): the arguments after the executable."""

    args: tuple[str, ...]
    note: str = ""  # shown by scvctl before it runs the command


@dataclass(frozen=True)
class Adapter:
    """An agent CLI as data."""

    name: str  # the tool is agent_<name>, the home $SCV_HOME/adapters/<name>
    title: str  # the product name, for descriptions and messages
    executable: str  # resolved through the daemon's PATH
    package: str  # the npm package, for the install hint
    fixed_args: tuple[str, ...]  # after the executable, before model/effort and the prompt
    model_args: tuple[str, ...] = ()  # `{model}` is replaced by the chosen model; () = not offered
    effort_args: tuple[str, ...] = ()  # `{effort}` likewise
    # right before the prompt: codex's `--`, so that a prompt such as "review" or "help" is the task,
    # not `codex exec`'s subcommand (claude and pi take a word after -p as the prompt; pi refuses `--`)
    prompt_args: tuple[str, ...] = ()
    # an argument starting with it is a file to attach, never the task (pi's `@file`): such a prompt is refused
    file_prefix: str = ""
    commands: Mapping[str, Command] = field(default_factory=dict)  # login / status / logout
    set_env: Mapping[str, str] = field(default_factory=dict)  # `{home}` is the private home
    pass_env: tuple[str, ...] = ()  # names of scvd's environment passed on purpose (config only)
    signin_hint: str = ""  # the tool result's hint when the output reads like a missing sign-in
    # (regex, verdict) pairs over the status command's output; first match wins
    status_rules: tuple[tuple[str, str], ...] = ()

    @property
    def tool_name(self) -> str:
        return f"agent_{self.name}"

    def install_hint(self) -> str:
        return (
            f"{self.executable} is not installed: npm install -g {self.package}, "
            f"or put it on scvd's PATH"
        )


CLAUDE = Adapter(
    name="claude",
    title="Claude Code",
    executable="claude",
    package="@anthropic-ai/claude-code",
    fixed_args=("-p",),
    model_args=("--model", MODEL),
    effort_args=("--effort", EFFORT),
    commands={
        "login": Command(
            ("auth", "login"),
            "Claude prints a sign-in URL: open it in any browser, sign in, "
            "and paste the code it shows back here.",
        ),
        "status": Command(("auth", "status")),
        "logout": Command(("auth", "logout")),
    },
    signin_hint=(
        "claude is not signed in for scvd (its own advice, /login, cannot be followed from a chat): "
        "on the scvd host run `scvctl agents login claude`"
    ),
    status_rules=(
        (r'"loggedIn"\s*:\s*true', "signed in"),
        (r'"loggedIn"\s*:\s*false', "not signed in"),
    ),
)

CODEX = Adapter(
    name="codex",
    title="Codex",
    executable="codex",
    package="@openai/codex",
    # scvd's approval is the trust decision, so codex's own git-repository check is skipped
    fixed_args=("exec", "--skip-git-repo-check"),
    model_args=("-m", MODEL),
    effort_args=("-c", f'model_reasoning_effort="{EFFORT}"'),
    prompt_args=("--",),
    commands={
        "login": Command(
            ("login",),
            "On a machine without a browser use `scvctl agents login codex -- --device-auth`.",
        ),
        "status": Command(("login", "status")),
        "logout": Command(("logout",)),
    },
    set_env={"CODEX_HOME": "{home}"},
    signin_hint=(
        "codex is not signed in for scvd: on the scvd host run `scvctl agents login codex` "
        "(add `-- --device-auth` without a browser), or `scvctl agents import codex` "
        "to copy your own API-key or relay setup"
    ),
    status_rules=(
        (r"(?i)not logged in", "not signed in"),
        (r"(?i)api key configured|logged in using an api key", "signed in (API key)"),
        (r"(?i)logged in using chatgpt", "signed in (ChatGPT)"),
        (r"(?i)logged in", "signed in"),
    ),
)

PI = Adapter(
    name="pi",
    title="pi",
    executable="pi",
    package="@mariozechner/pi-coding-agent",
    fixed_args=("-p",),
    file_prefix="@",
    commands={
        "login": Command(
            (),
            "pi has no login command: this opens pi's own window with scvd's private home. "
            "Type /login, pick a provider, finish its sign-in, then quit pi with /quit.",
        ),
        # pi has no status command; listing the models its sign-in unlocks is the nearest
        "status": Command(("--offline", "--list-models")),
        "logout": Command(
            (),
            "pi has no logout command: this opens pi's own window with scvd's private home. "
            "Type /logout, then quit pi with /quit.",
        ),
    },
    signin_hint=(
        "pi is not signed in for scvd: on the scvd host run `scvctl agents login pi`, "
        "which opens pi's own window with scvd's private home; type /login there"
    ),
    status_rules=(
        (r"(?i)no models available", "not signed in"),
        (r"(?m)^provider\s+model\b", "signed in"),
    ),
)

ADAPTERS: dict[str, Adapter] = {a.name: a for a in (CLAUDE, CODEX, PI)}
ACTIONS = ("login", "status", "logout")


def get(name: str) -> Adapter | None:
    return ADAPTERS.get(name)


def configured(adapter: Adapter, config: Any) -> Adapter:
    """The record with the instance config's `adapters.<name>` overrides applied.

    None keeps the default, [] turns the option off, a list must use its placeholder.
    """
    overrides = getattr(config, "adapters", {}) or {}
    over = overrides.get(adapter.name)
    if over is None:
        return adapter
    changes: dict[str, tuple[str, ...]] = {"pass_env": tuple(over.pass_env)}  # checked by config.load
    for key, placeholder in (("model_args", MODEL), ("effort_args", EFFORT)):
        value = getattr(over, key)
        if value is None:
            continue
        if value and not any(placeholder in arg for arg in value):
            raise ConfigError(
                f"adapters.{adapter.name}.{key}: {value!r} never uses {placeholder}; "
                f"add it where the value goes, or set [] to turn the option off"
            )
        changes[key] = tuple(value)
    return dataclasses.replace(adapter, **changes)


def check_config(config: Any) -> None:
    """Refuse `adapters.<name>` sections that name no agent."""
    for name in getattr(config, "adapters", {}) or {}:
        if name not in ADAPTERS:
            raise ConfigError(
                f"adapters.{name}: no such agent; known agents: {', '.join(ADAPTERS)}"
            )
