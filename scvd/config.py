"""The configuration: `config.toml` decoded into msgspec Structs, with environment overrides.

Config Structs forbid unknown fields, so a typo is an error naming the file and
the key path. Every field has the documented default; `docs/configuration.md`
lists them. Environment overrides look like `SCVD_TOOLS__COMMAND_TIMEOUT_SECONDS=60`
(section and key joined by a double underscore; the value is read as TOML, else
as a string); config_env.py reads them. Any other SCVD_* variable is a warning, not
an error: it may be meant for something else (a secret's name, say).
"""

from __future__ import annotations

import fnmatch
import math
import os
import re
import typing
from pathlib import Path
from typing import Annotated, Any, Callable, Literal, Mapping

import msgspec

from . import config_env, http_fields, search_paths
from . import validation_text as vt
from .ask_globs import DEFAULT_ALWAYS_ASK, glob_problem
from .call_budget import FLOOR
from .config_env import ENV_PREFIX as ENV_PREFIX  # re-exported: a public name of scvd.config
from .errors import ConfigError, NotARegularFile
from .frame_limits import DEFAULT_CLIENT_FRAME_LIMIT, DEFAULT_SERVER_FRAME_LIMIT
from .paths import read_regular_file, why_not
from .secrets_file import key_problem
from .text import toml_said
from .toml_write import toml_key

PositiveInt = Annotated[int, msgspec.Meta(ge=1)]
PositiveFloat = Annotated[float, msgspec.Meta(gt=0)]
# the most tools scvd takes from one MCP server: a bound on its parse and its part of every tools.list
MCP_TOOLS_CEILING = 4096
# chat.max_reply_bytes: bytes read of one model request's answer (a line of it: a quarter), chat/reply_cap.py.
# 128k tokens (the longest reply of today's models) at ~300 bytes of SSE each are ~40 MB
MAX_REPLY_BYTES = 64 << 20
# chat.max_calls_per_step: tool calls one model reply may make; models make a handful (a few dozen reads
# at most), and a quarter of server.max_calls_per_session leaves one step short of filling the session
MAX_CALLS_PER_STEP = 64


class Section(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """Base of config sections: unknown keys are errors."""


class ServerConfig(Section):
    """The socket server."""

    client_frame_bytes: Annotated[int, msgspec.Meta(ge=1024)] = DEFAULT_CLIENT_FRAME_LIMIT
    server_frame_bytes: Annotated[int, msgspec.Meta(ge=1024)] = DEFAULT_SERVER_FRAME_LIMIT
    shutdown_grace_seconds: PositiveFloat = 5.0
    event_loop: Literal["auto", "uvloop", "asyncio"] = "auto"  # auto: uvloop when installed
    max_sessions_per_connection: PositiveInt = 64  # one peer cannot hold every fd (see limits.py)
    max_calls_per_session: PositiveInt = 256  # accepted and not completed; more is a runaway client
    # the same, of one connection across its sessions: 64 sessions x 256 calls held 16,384 small calls
    # (the bytes bound lets them: 4 KiB each), and closing that connection stalled the loop for a second
    max_calls_per_connection: PositiveInt = 1024
    # the bytes of the frames of calls not completed, of one connection and of all (call_budget.py): 64 sessions
    # of 256 calls of 1 MiB each on one connection took scvd to 1.5 GiB
    # at least what one call counts (4 KiB): below it, every call was refused and told to wait
    max_call_bytes_per_connection: Annotated[int, msgspec.Meta(ge=FLOOR)] = 64 << 20
    max_call_bytes: Annotated[int, msgspec.Meta(ge=FLOOR)] = 512 << 20
    max_connections_per_uid: Annotated[int, msgspec.Meta(ge=32)] = 256  # above limits.HEADROOM twice
    handoff_timeout_seconds: PositiveFloat = 10.0  # mcp.attach: how long scvd waits for the fds
    # a connection without hello by then is closed: bare connects held every slot; below 1 s a loaded
    # machine's own scvctl could miss it
    hello_seconds: Annotated[float, msgspec.Meta(ge=1)] = 10.0
    # how often scvd checks that its socket file is still there (a logout's cleanup of /run/user, a /tmp
    # cleaner), binding it again if not: one lstat per interval
    socket_check_seconds: PositiveFloat = 30.0


class ScriptToolConfig(Section):
    """`[tools.script.NAME]`: what the instance grants the script tool `script_NAME`."""

    pass_env: list[str] = []  # names of scvd's environment it gets besides the allow-list


class ToolsConfig(Section):
    """Timeouts and output limits shared by the tools."""

    # seconds take fractions everywhere, as a call's timeout_seconds does (90.5 was `Expected int`)
    command_timeout_seconds: PositiveFloat = 120.0
    max_timeout_seconds: PositiveFloat = 1800.0
    agent_timeout_seconds: PositiveFloat = 600.0
    default_timeout_seconds: PositiveFloat = 900.0
    output_limit_bytes: Annotated[int, msgspec.Meta(ge=1024)] = 256 * 1024
    read_limit_bytes: Annotated[int, msgspec.Meta(ge=1024)] = 1 << 20
    progress_interval_seconds: PositiveFloat = 30.0
    script: dict[str, ScriptToolConfig] = {}


class SkillsConfig(Section):
    """Skill discovery limits."""

    max_skills: PositiveInt = 64
    max_skill_bytes: PositiveInt = 64 * 1024
    max_walk_entries: PositiveInt = 10_000  # directory entries one session.open's discovery reads: a second or a few


class ApprovalsConfig(Section):
    """When calls ask a person, and for how long a request waits."""

    policy: Literal["on-risk", "always", "never", "sandbox-aware"] = "on-risk"
    timeout_seconds: PositiveFloat = 900.0
    max_pending: PositiveInt = 256  # more is a runaway client; also keeps approvals.list within a frame
    # workspace paths whose writes always ask, whatever grant or policy (always_ask.py, ask_globs.py; secret-like too)
    always_ask: list[str] = msgspec.field(default_factory=lambda: list(DEFAULT_ALWAYS_ASK))


class SandboxConfig(Section):
    """The optional bubblewrap wrapper."""

    mode: Literal["off", "auto", "bwrap"] = "off"
    network: bool = False
    bwrap: str = "bwrap"


class AuditConfig(Section):
    """The append-only audit log."""

    max_bytes: PositiveInt = 10 * 1024 * 1024
    keep: Annotated[int, msgspec.Meta(ge=0)] = 3


class AdapterConfig(Section):
    """Per-agent overrides: how a chosen model and effort become CLI arguments, and extra variables.

    `{model}` and `{effort}` in the lists are replaced by the chosen value, one
    argument each. An empty list turns the option off. `pass_env` names
    variables of scvd's environment the agent gets besides the allow-list.
    """

    model_args: list[str] | None = None
    effort_args: list[str] | None = None
    pass_env: list[str] = []


class ProviderConfig(Section):
    """A model provider for chat turns (`[providers.NAME]`)."""

    model: str  # not empty nor only whitespace (_check_chat): such a one failed each turn (the provider's 404)
    base_url: str = ""  # empty: https://api.openai.com/v1
    wire_api: Literal["responses", "chat"] = "responses"
    api_key_secret: str | None = None  # a key in the secret store (`scvctl secrets set KEY`)
    api_key_env: str | None = None  # else a variable of scvd's environment
    timeout_seconds: PositiveFloat = 600.0
    max_output_tokens: PositiveInt | None = None


class ChatConfig(Section):
    """Chat turns: the default provider and the loop's limits."""

    provider: str = "codex"  # a [providers.NAME], or "codex": the imported Codex setup
    max_steps: PositiveInt = 32
    context_tokens: Annotated[int, msgspec.Meta(ge=1000)] = 128_000
    system_prompt: str = ""
    transcript_days: Annotated[int, msgspec.Meta(ge=0)] = 0  # 0: keep every transcript (chat/expiry.py)
    max_reply_bytes: Annotated[int, msgspec.Meta(ge=4096)] = MAX_REPLY_BYTES
    max_calls_per_step: PositiveInt = MAX_CALLS_PER_STEP  # the rest of a reply's calls are answered, not run


class SecretRef(Section):
    """`{secret = "KEY"}`: the value comes from scvd's secret store (`scvctl secrets set KEY`)."""

    secret: Annotated[str, msgspec.Meta(min_length=1)]


RiskName = Literal["read_only", "filesystem", "process", "delegate"]


class McpServerConfig(Section):
    """One MCP server whose tools become `mcp__NAME__TOOL`: stdio (`command`) or streamable HTTP (`url`)."""

    command: str | None = None
    args: list[str] = []
    env: dict[str, str | SecretRef] = {}
    cwd: str | None = None
    url: str | None = None
    headers: dict[str, str | SecretRef] = {}
    query: dict[str, str | SecretRef] = {}  # added to url's query: where hosted servers take their key
    risk: RiskName = "process"  # of every tool the user has not vouched for in tool_risk
    tool_risk: dict[str, RiskName] = {}
    timeout_seconds: PositiveFloat | None = None  # None: tools.default_timeout_seconds
    enabled: bool = True
    sandbox: bool = True  # false: a stdio server runs outside bubblewrap even when it is on
    # the first this many in the server's order; the rest are left out, with a load error saying so
    max_tools: Annotated[int, msgspec.Meta(ge=1, le=MCP_TOOLS_CEILING)] = 256


class McpConfig(Section):
    """MCP servers scvd consumes."""

    servers: dict[str, McpServerConfig] = {}


class Config(Section):
    """The whole configuration of an instance."""

    log_level: Literal["debug", "info", "warning", "error"] = "info"
    server: ServerConfig = msgspec.field(default_factory=ServerConfig)
    tools: ToolsConfig = msgspec.field(default_factory=ToolsConfig)
    skills: SkillsConfig = msgspec.field(default_factory=SkillsConfig)
    approvals: ApprovalsConfig = msgspec.field(default_factory=ApprovalsConfig)
    sandbox: SandboxConfig = msgspec.field(default_factory=SandboxConfig)
    audit: AuditConfig = msgspec.field(default_factory=AuditConfig)
    adapters: dict[str, AdapterConfig] = {}
    providers: dict[str, ProviderConfig] = {}
    chat: ChatConfig = msgspec.field(default_factory=ChatConfig)
    mcp: McpConfig = msgspec.field(default_factory=McpConfig)


class Loaded(msgspec.Struct):
    """A configuration and where each value came from: `default`, `file` or `env:NAME`."""

    config: Config
    path: str
    sources: dict[str, str]
    file_read: bool  # False: there was no file, so the defaults (and overrides)
    # SCVD_* variables that set nothing, an unused provider, an MCP command missing (config_checks.py):
    # logged at start and by a reload that brings them, printed by check-config
    warnings: list[str] = []


def load(path: Path, env: Mapping[str, str] | None = None, *, missing: str = "", empty: str = "") -> Loaded:
    """Read `path`, apply environment overrides, validate.

    A missing file means the defaults, unless `missing` says why it must exist (what to do
    then): a file named by --config, or one a reload finds gone. So does an empty one (only
    whitespace), unless `empty` says why it must hold something: one a reload finds emptied.
    """
    env = os.environ if env is None else env
    found = _read(path, defaults_if_gone=not missing, empty=empty)
    if found is None and missing:
        raise ConfigError(f"{path}: no such file; {missing}")
    raw = found or {}
    sources = {key: "file" for key in config_env.leaf_keys(raw)}
    texts = config_env.apply_overrides(raw, sources, env, path, Config)
    _check_finite(raw, path, sources)
    _whole_numbers(raw)
    try:
        config = msgspec.convert(raw, Config)
    except msgspec.ValidationError as exc:
        raise ConfigError(_explain(path, exc, sources, raw, texts)) from exc
    _check(config, path, sources)
    _check_adapters(config, path, sources)
    _check_chat(config, path, sources)
    return Loaded(config=config, path=str(path), sources=sources, file_read=found is not None,
                  warnings=config_env.stray_variables(env, Config, _names_in(config))
                  + _unused_providers(config, sources) + _host_warnings(config, env) + _search_path_warnings(config))


def _host_warnings(config: Config, env: Mapping[str, str]) -> list[str]:
    """What the configuration names that this machine lacks (config_checks.py): an MCP server's command."""
    if not config.mcp.servers:
        return []
    from .config_checks import mcp_warnings  # only with MCP servers

    return mcp_warnings(config.mcp.servers, env)


def _search_path_warnings(config: Config) -> list[str]:
    """What each start of an enabled stdio server drops from the search paths its `env` sets (mcp/spec.py):
    a warning, not an error, so a trailing `:` that worked before does not keep scvd from starting."""
    found: list[str] = []
    for name, server in sorted(config.mcp.servers.items()):
        if server.command is None or not server.enabled:
            continue
        literal = {k: v for k, v in server.env.items() if isinstance(v, str)}  # secret ones: _mcp_value_problem
        cwd = os.path.expanduser(server.cwd) if server.cwd else None
        dropped = search_paths.set_by(literal, os.path.expanduser("~"))  # `~` as in cwd
        found += search_paths.table_notes(f"mcp.servers.{name}.env", dropped, cwd)
    return found


def _unused_providers(config: Config, sources: Mapping[str, str]) -> list[str]:
    """A provider table with chat.provider left at its default (codex): chat turns do not use it."""
    if "chat.provider" in sources or not config.providers:
        return []
    names = sorted(config.providers)
    return [f"[providers.{names[0]}] is configured, but a chat turn that names no provider uses the imported "
            f"Codex setup (chat.provider is codex unless set); to make it the default, set provider = \"{names[0]}\" "
            "in [chat]"
            + (f" (configured: {', '.join(names)})" if len(names) > 1 else "")]


def _names_in(config: Config) -> set[str]:
    """Variable and secret names the configuration itself uses: SCVD_* ones are not typos."""
    names = {n for a in config.adapters.values() for n in a.pass_env}
    names |= {n for t in config.tools.script.values() for n in t.pass_env}
    names |= {n for p in config.providers.values() if (n := p.api_key_env)}
    return names | secret_refs(config)


def provider_keys(config: Config) -> dict[str, str]:
    """The names chat providers take their API keys from, each with where the config says so: a
    variable of scvd's environment (api_key_env), or a secret (api_key_secret), which a store that
    lacks it takes from the variable of that name. No tool or agent gets one (docs/security.md)."""
    found: dict[str, str] = {}
    for name, provider in config.providers.items():
        for field in ("api_key_secret", "api_key_env"):
            key = getattr(provider, field)
            if key:
                found.setdefault(key, f"providers.{name}.{field}")
    return found


def secret_refs(config: Config) -> set[str]:
    """The secret-store keys the configuration names: providers' api_key_secret, MCP env and headers."""
    names = {n for p in config.providers.values() if (n := p.api_key_secret)}
    return names.union(*(server_secrets(m) for m in config.mcp.servers.values()))


def server_secrets(server: McpServerConfig) -> frozenset[str]:
    """The keys of an MCP server's `{secret = KEY}` values, in `env`, `headers` and `query`."""
    values = (*server.env.values(), *server.headers.values(), *server.query.values())
    return frozenset(v.secret for v in values if isinstance(v, SecretRef))


MAX_FILE_BYTES = 1 << 20  # a config.toml is a few KiB; a long chat.system_prompt fits many times over


def _read(path: Path, defaults_if_gone: bool, empty: str = "") -> dict[str, Any] | None:
    """The file's TOML, or None when there is no file. `defaults_if_gone`: no file would mean the
    defaults, so removing a bad one is a way out (not for --config's file, nor one a reload read before).
    `empty`: why a file of only whitespace is refused, and what to do."""
    remove = " (or remove it to run on the defaults)" if defaults_if_gone else ""
    try:
        data = read_regular_file(path, MAX_FILE_BYTES)
        if len(data) > MAX_FILE_BYTES:  # read whole and parsed, a wrong file took the memory of its size, twice
            raise ConfigError(f"{path}: larger than {MAX_FILE_BYTES} bytes, which no configuration needs; "
                              "is it the right file?")
        # -sig: a leading BOM (some editors save one) was `Invalid statement (at line 1, column 1)`
        text = data.decode("utf-8-sig")
        if empty and not text.strip():
            raise ConfigError(f"{path}: empty ({'only whitespace' if text else '0 bytes'}); {empty}")
        return _parsed(path, text)
    except FileNotFoundError:
        if path.is_symlink():  # a link whose target moved: its settings must not quietly become the defaults
            raise ConfigError(f"{path}: a symbolic link to {os.readlink(path)}, which does not exist; fix the "
                              f"link{remove}") from None
        return None
    except NotARegularFile as exc:  # a FIFO would hold the start, or every reload, for good
        # `--config /dev/null`: nothing is put at a device's path
        fix = "give the path of a config.toml file" if exc.kind == "a device" else "put a config.toml file there"
        raise ConfigError(f"{exc}; {fix}{remove}") from None
    except UnicodeDecodeError as exc:  # the codec's `position 5` is no place an editor shows
        line = exc.object.count(b"\n", 0, exc.start) + 1
        raise ConfigError(f"{path}: not UTF-8 text at line {line} (byte 0x{exc.object[exc.start]:02x}); "
                          "TOML files are UTF-8: save it as UTF-8") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {why_not(path, exc)}") from exc


def _parsed(path: Path, text: str) -> dict[str, Any]:
    import tomllib  # here: a start without a config file parses no TOML (~4 ms and 0.5 MiB, issue 9)

    from . import toml_read

    try:
        return toml_read.loads(text)
    except tomllib.TOMLDecodeError as exc:
        from . import config_hints  # only on a refusal

        hint = config_hints.after_parse_error(text, str(exc), Config)
        raise ConfigError(f"{path}: not valid TOML: {toml_said(str(exc), text)}{hint}") from exc


def _explain(path: Path, exc: msgspec.ValidationError, sources: Mapping[str, str],
             raw: Mapping[str, Any], texts: Mapping[str, tuple[str, str]]) -> str:
    """`<file or env var>: <key path>: <what is wrong>` from msgspec's message."""
    from . import config_hints  # only on a refusal

    msg, key = vt.split(exc)
    name = vt.unknown_field(msg)
    if name is not None:  # msgspec names the table; the key path is more use
        table = key
        key = f"{table}.{name}" if table else name
        close = vt.meant(name, vt.keys_at(Config, table)) or _elsewhere(name, table)
        msg = (f"unknown key{f'; did you mean {close}?' if close else ''} "
               "(docs/configuration.md lists every key)")
    elif msg.startswith("Invalid enum value"):  # say what it may be
        values = vt.values_at(Config, key)
        if values:
            msg += f"; use one of: {', '.join(map(str, values))}"
    for table, struct in (("adapters", AdapterConfig), ("providers", ProviderConfig)):
        if key.startswith(f"{table}[...]"):  # msgspec does not say which table of the dict
            key = f"{table}.{_bad_table(raw, table, struct)}" + key[len(table) + 5:]
    if key.startswith("tools.script[...]"):
        scripts = f"tools.script.{_bad_table(raw.get('tools') or {}, 'script', ScriptToolConfig)}"
        key = scripts + key[len("tools.script[...]"):]
    if key.startswith("mcp.servers[...]"):
        servers = f"mcp.servers.{_bad_table(raw.get('mcp') or {}, 'servers', McpServerConfig)}"
        key = servers + key[len("mcp.servers[...]"):]
    key = _name_the_entry(key, raw)
    hint = next((h for pattern, h in HINTS.items() if fnmatch.fnmatchcase(key, pattern)), None)
    if hint:
        msg += f"; {hint}"
    if key in texts:
        msg += config_env.read_as_string(msg, key, *texts[key], Config)
    elif (value := _raw_at(raw, key)) is not _ABSENT:
        msg += _what_to_give(msg, key, value, sources)
    msg += config_hints.within_bounds(key, msg, Config, _writer(key, sources))  # a number out of its bounds
    return f"{_place(path, key, sources)}: {key}: {msg}"


_ABSENT = object()


def _what_to_give(msg: str, key: str, value: Any, sources: Mapping[str, str]) -> str:
    """For msgspec's `Expected X, got Y`: what the key takes, as the file or the variable writes it."""
    from . import config_hints  # only on a refusal

    if config_hints.expected(msg) is None:
        return ""
    return config_hints.what_to_give(key, value, Config, _writer(key, sources))


def _writer(key: str, sources: Mapping[str, str]) -> Callable[[str], str]:
    """How a value of `key` is written where it came from: `KEY = value`, or SCVD_...=value."""
    origin = sources.get(key, "")
    if origin.startswith("env:"):
        return lambda v: config_env.assignment(origin[4:], config_env.unquoted(v))
    return lambda v: f"{toml_key(key.rpartition('.')[2])} = {v}"


def _raw_at(raw: Mapping[str, Any], key: str) -> Any:
    """The value the file or an override gave `key`, else _ABSENT (a quoted part, an item of a list)."""
    value: Any = raw
    for part in key.split("."):
        if not isinstance(value, dict) or part not in value:
            return _ABSENT
        value = value[part]
    return value


def _elsewhere(name: str, table: str) -> str | None:
    """The keys of that name in other tables (`[server] policy`: approvals.policy), or None."""
    here = table.replace("[...]", ".<name>")
    keys = [k if "." in k else f"{k} (at the top, before any table)" for k in vt.tables_with(Config, name)
            if k.rpartition(".")[0] != here]
    return " or ".join(keys[:3]) or None


HINTS = {  # what to give, where msgspec's message alone (`Expected `int` >= 0`) does not say
    "chat.transcript_days": "give the days a chat transcript not written to is kept, or 0 to keep every transcript",
}



def _check_finite(raw: Mapping[str, Any], path: Path, sources: Mapping[str, str]) -> None:
    """TOML's `inf` and `nan`, refused by key: msgspec takes inf as a positive float (a wait that never
    ends: an approval shown with no expiry, a shutdown that systemd has to kill) and says of nan only
    `Expected float > 0.0`."""
    for parts, value in _flatten(raw):
        if isinstance(value, float) and not math.isfinite(value):
            key = ".".join(toml_key(part) for part in parts)
            what = "is not a number" if math.isnan(value) else "is not a finite number"
            give = ("a finite number of seconds (86400 is a day; no setting waits without end)"
                    if key.endswith("_seconds") else "a finite number")
            raise ConfigError(f"{_place(path, '.'.join(parts), sources)}: {key}: {value} {what}; give {give}")


def _whole_numbers(raw: dict[str, Any]) -> None:
    """60.0 where a whole number is wanted (`max_pending`) is 60: msgspec said `Expected int, got float`."""
    for parts, value in _flatten(raw):
        if isinstance(value, float) and value.is_integer() and isinstance(
                vt.type_at(Config, ".".join(parts)), msgspec.inspect.IntType):
            table = raw
            for part in parts[:-1]:
                table = table[part]
            table[parts[-1]] = int(value)


def _name_the_entry(key: str, raw: Mapping[str, Any]) -> str:
    """`mcp.servers.x.env[...]` -> `mcp.servers.x.env.PORT`: the entry of a table of names (an MCP
    server's env, headers, tool_risk) that msgspec does not name, found as the first that fails."""
    head, sep, tail = key.partition("[...]")
    if not sep:
        return key
    table: Any = raw
    value_type: Any = Config
    for part in head.split("."):
        table = table.get(part) if isinstance(table, dict) else None
        if typing.get_origin(value_type) is dict:
            value_type = typing.get_args(value_type)[1]
        elif isinstance(value_type, type) and issubclass(value_type, msgspec.Struct):
            value_type = {f.name: f.type for f in msgspec.structs.fields(value_type)}.get(part)
    if not isinstance(table, dict) or typing.get_origin(value_type) is not dict:
        return key
    return f"{head}.{toml_key(_bad_table({'t': table}, 't', typing.get_args(value_type)[1]))}{tail}"


def _place(path: Path, key: str, sources: Mapping[str, str], *also: str) -> str:
    """The file, or the environment variable that set `key` (else one of the keys `also` that a
    rule spanning keys names), a key under it or a value it is in."""
    for name in (key, *also):
        base = re.sub(r"\[[^\]]*\]", "", name)  # `model_args[1]`: the item of a list the variable set whole
        parents = [".".join(base.split(".")[:n]) for n in range(base.count(".") + 1, 0, -1)]
        origin = next((sources[k] for k in parents if k in sources), None) or next(
            (src for k, src in sources.items() if k.startswith(base + ".") and src != "file"), "file")
        if origin != "file":
            return f"{origin} (over {path})"
    return f"{path}"


def _bad_table(raw: Mapping[str, Any], section: str, struct: type) -> str:
    for name, table in (raw.get(section) or {}).items():
        try:
            msgspec.convert(table, struct)
        except msgspec.ValidationError:
            return name
    return "<name>"


def _check_adapters(config: Config, path: Path, sources: Mapping[str, str]) -> None:
    """`adapters.<name>` names an agent, and its option lists use their placeholders."""
    from .adapters import spec  # the agents as data: it needs nothing of scvd but errors

    try:
        spec.check_config(config)
        for adapter in spec.ADAPTERS.values():
            spec.configured(adapter, config)
    except ConfigError as exc:  # its message starts with the key path; say where the value came from
        key = exc.message.split(":", 1)[0]
        raise ConfigError(f"{_place(path, key, sources)}: {exc.message}") from None


def _check(config: Config, path: Path, sources: Mapping[str, str]) -> None:
    """Rules that span keys."""
    t = config.tools
    for key in ("command_timeout_seconds", "agent_timeout_seconds", "default_timeout_seconds"):
        if getattr(t, key) > t.max_timeout_seconds:
            raise ConfigError(
                f"{_place(path, 'tools.' + key, sources, 'tools.max_timeout_seconds')}: tools.{key}: {getattr(t, key):g} is "
                f"above tools.max_timeout_seconds ({t.max_timeout_seconds:g}); lower it or raise the ceiling"
            )
    for glob in config.approvals.always_ask:
        problem = glob_problem(glob)
        if problem:
            key = "approvals.always_ask"
            raise ConfigError(f"{_place(path, key, sources)}: {key}: {problem}")
    for name, server in config.mcp.servers.items():
        problem = _mcp_problem(name, server)
        if problem:
            key = f"mcp.servers.{name}"
            raise ConfigError(f"{_place(path, key, sources)}: {key}: {problem}")
    _check_pass_env(config, path, sources)
    _check_paths(config, path, sources)
    _check_result_limits(config, path, sources)
    _check_call_bytes(config, path, sources)


ESCAPED_BYTE = 6  # the most one byte of a result takes in a JSON frame: a control byte becomes \u00XX
RESULT_ROOM = 16 * 1024  # the rest of a call.completed frame: ids, the other fields, a marker line, a hint
RESULT_LIMITS = ("tools.output_limit_bytes", "tools.read_limit_bytes", "skills.max_skill_bytes")


def _check_result_limits(config: Config, path: Path, sources: Mapping[str, str]) -> None:
    """Each result a limit lets through fits one server frame however its bytes escape, so no
    call the limits allow ends with kind `limit` (connection.py's frame check)."""
    frame = config.server.server_frame_bytes
    most = (frame - RESULT_ROOM) // ESCAPED_BYTE
    for key in RESULT_LIMITS:
        table, name = key.split(".")
        value = getattr(getattr(config, table), name)
        if value > most:
            culprit = key if key in sources else "server.server_frame_bytes"  # the one the user set
            raise ConfigError(
                f"{_place(path, culprit, sources)}: {key}: {value} bytes of result can take {value * ESCAPED_BYTE} "
                f"in a JSON frame (a control byte becomes \\u00XX), more than server.server_frame_bytes "
                f"({frame}) carries; set {key} to at most {most}, or server.server_frame_bytes to at least "
                f"{value * ESCAPED_BYTE + RESULT_ROOM}")


def _check_call_bytes(config: Config, path: Path, sources: Mapping[str, str]) -> None:
    """A call as large as a frame may be fits what one connection's calls hold, and that what all hold:
    else a call would be refused for good. (A frame of many arrays counts up to 33 times its bytes:
    such a call is refused as too large alone, call_budget.py.) server.max_calls_per_connection below
    server.max_calls_per_session is allowed: the lower binds first (a config that raised the session's
    cap above 1024 before the connection's cap came keeps loading)."""
    server = config.server
    refused = "so a call could be refused for good"
    pairs = [("server.max_call_bytes_per_connection", server.max_call_bytes_per_connection,
              "server.client_frame_bytes", server.client_frame_bytes, refused),
             ("server.max_call_bytes", server.max_call_bytes,
              "server.max_call_bytes_per_connection", server.max_call_bytes_per_connection, refused)]
    for key, value, floor_key, floor, why in pairs:
        if value < floor:
            raise ConfigError(f"{_place(path, key, sources, floor_key)}: {key}: {value} is below {floor_key} ({floor}), "
                              f"{why}; raise {key}, or lower {floor_key}")


def _path_keys(config: Config) -> list[tuple[str, str | None, bool]]:
    """(key, value, a bare name is looked up on PATH) of every path-valued key."""
    keys: list[tuple[str, str | None, bool]] = [("sandbox.bwrap", config.sandbox.bwrap, True)]
    for name, server in config.mcp.servers.items():
        keys += [(f"mcp.servers.{name}.command", server.command, True), (f"mcp.servers.{name}.cwd", server.cwd, False)]
    return keys


def _check_paths(config: Config, path: Path, sources: Mapping[str, str]) -> None:
    """A relative path would mean scvd's working directory, which differs by how scvd was started."""
    for key, value, names_ok in _path_keys(config):
        if value is None or value.startswith("/") or value == "~" or value.startswith("~/"):
            continue
        if names_ok and value and "/" not in value:
            continue
        bare = " (or a bare name, looked up on scvd's PATH)" if names_ok else ""
        what = ("is empty, which names no file" if not value else "is a relative path, which would mean scvd's "
                "working directory (the shell's in the foreground, / with --daemon, ~ under systemd)")
        raise ConfigError(f"{_place(path, key, sources)}: {key}: {value!r} {what}; "
                          f"give an absolute path or ~/...{bare}")


SCRIPT_NAME_RE = re.compile(r"[a-z][a-z0-9_]{0,55}")  # a script tool's folder (tools/script_defs.py)


def _check_pass_env(config: Config, path: Path, sources: Mapping[str, str]) -> None:
    """Every `pass_env` entry is a variable name that scvd does not own or set itself."""
    lists = [(f"adapters.{name}.pass_env", a.pass_env, "agent") for name, a in config.adapters.items()]
    for name, script in config.tools.script.items():
        if not SCRIPT_NAME_RE.fullmatch(name):
            key = f"tools.script.{name}"
            raise ConfigError(f"{_place(path, key, sources)}: {key}: a script tool's folder name is 1-56 chars "
                              f"of a-z, 0-9 and _, starting with a letter (the tool is script_<name>)")
        lists.append((f"tools.script.{name}.pass_env", script.pass_env, "script"))
    if not any(names for _, names, _ in lists):
        return
    from .adapters.env import OTHER_HOME_NAMES, PRIVATE_HOME_NAMES
    from .passenv import name_problem

    providers = provider_keys(config)
    for key, names, kind in lists:
        for entry in names:
            problem = (name_problem(entry, PRIVATE_HOME_NAMES, OTHER_HOME_NAMES) if kind == "agent"
                       else name_problem(entry)) or _provider_key_problem(entry, providers)
            if problem:
                raise ConfigError(f"{_place(path, key, sources)}: {key}: {problem}")


def _provider_key_problem(name: str, providers: Mapping[str, str]) -> str | None:
    if name not in providers:
        return None
    return (f"{name} is where {providers[name]} takes a chat provider's API key, which scvd sends to that "
            "provider only; remove it (an agent signs in within its private home: `scvctl agents login`), or give "
            "the provider its key under another name")


MCP_NAME_RE = re.compile(r"^[a-z0-9](?:[a-z0-9]|_(?!_))*$")


def _mcp_problem(name: str, server: McpServerConfig) -> str | None:
    """What is wrong with one [mcp.servers.NAME] table, or None."""
    if not MCP_NAME_RE.match(name) or name.endswith("_") or len(name) > 32:
        return "a server name is 1-32 chars of a-z, 0-9 and single _ (its tools are mcp__NAME__TOOL)"
    if (server.command is None) == (server.url is None):
        return "set exactly one of `command` (a stdio server) or `url` (a streamable HTTP server)"
    if server.url is not None and (problem := http_fields.url_problem(server.url)):
        return f"url {http_fields.shown_url(server.url)!r} {problem}"
    if server.url is not None and (server.args or server.env or server.cwd):
        return "`args`, `env` and `cwd` are for stdio servers; an HTTP server takes `headers`"
    if server.command is not None and (server.headers or server.query):
        return "`headers` and `query` are for HTTP servers; a stdio server takes `env`"
    return _mcp_value_problem(server) if server.enabled else None  # a parked table is not started


def _mcp_value_problem(server: McpServerConfig) -> str | None:
    """Names and literal values a process or an HTTP request would refuse at start, said at load."""
    for arg in server.args:
        if "\0" in arg:
            return f"args: {arg!r} holds a NUL byte, which no program argument can"
    for name, value in server.env.items():
        if not name or "=" in name or "\0" in name:
            return f"env name {name!r} is not a variable name (empty, or holds = or a NUL byte)"
        if isinstance(value, str) and "\0" in value:
            return f"env {name}: a value cannot hold a NUL byte"
        if isinstance(value, SecretRef) and (problem := key_problem(value.secret)):
            return f"env {name}: {problem}"
        if isinstance(value, SecretRef) and (problem := search_paths.from_store_problem(name, "the server")):
            return f"env {name}: {problem}; write its value here, each directory by its absolute path"
    for name, value in server.headers.items():
        if not http_fields.name_ok(name):
            return f"headers: {name!r} is not an HTTP header name ({http_fields.NAME_RULE})"
        if isinstance(value, str) and not http_fields.value_ok(value):
            return f"headers {name}: the value is not a valid HTTP header value ({http_fields.VALUE_RULE})"
        if isinstance(value, SecretRef) and (problem := key_problem(value.secret)):
            return f"headers {name}: {problem}"
    for name, value in server.query.items():
        if isinstance(value, SecretRef) and (problem := key_problem(value.secret)):
            return f"query {name}: {problem}"
    return None


def _check_chat(config: Config, path: Path, sources: Mapping[str, str]) -> None:
    name = config.chat.provider
    if name != "codex" and name not in config.providers:
        known = ", ".join(sorted(config.providers) + ["codex"])
        raise ConfigError(f"{_place(path, 'chat.provider', sources)}: chat.provider: no provider {name!r} "
                          f"(configured: {known}); add [providers.{name}] or pick one of those")
    for name, provider in config.providers.items():
        if not provider.model.strip():  # "  " as much as "": no provider has such a model
            key = f"providers.{name}.model"
            raise ConfigError(f"{_place(path, key, sources)}: {key}: empty or only whitespace; "
                              'name the model a chat turn asks, e.g. "gpt-5"')
        problem = provider.api_key_secret and key_problem(provider.api_key_secret)
        if problem:
            key = f"providers.{name}.api_key_secret"
            raise ConfigError(f"{_place(path, key, sources)}: {key}: {problem}")
        if provider.base_url and (problem := http_fields.url_problem(provider.base_url)):  # empty: OpenAI's
            key = f"providers.{name}.base_url"
            raise ConfigError(f"{_place(path, key, sources)}: {key} {http_fields.shown_url(provider.base_url)!r} "
                              f"{problem}")


HIDDEN = object()  # effective()'s value of a literal it does not show


class Masked(str):
    """effective()'s value of a url shown without its query and user:password@ (http_fields.shown_url)."""


def effective(loaded: Loaded) -> list[tuple[str, Any, str]]:
    """Every leaf setting as (key, value, source), for `scvd check-config`. The key is a TOML dotted
    key, to paste into config.toml: a part that is not a bare key is quoted (`tool_risk."repo.search"`).
    A literal value of an MCP server's `env`, `headers` or `query` is HIDDEN: that is where tokens get pasted,
    and check-config's output goes to terminals, logs and bug reports (a `{secret = KEY}` shows). An MCP
    url or a provider's base_url with a query or a user:password@ is Masked (hosted ones take their key
    in the query)."""
    rows: list[tuple[str, Any, str]] = []
    for parts, value in _flatten(msgspec.to_builtins(loaded.config)):
        key = ".".join(toml_key(part) for part in parts)
        if parts[:2] == ("mcp", "servers") and len(parts) == 5 and parts[3] in ("env", "headers", "query"):
            value = HIDDEN  # a {secret = KEY} is one part longer: parts[5] is `secret`
        elif (parts[:2] == ("mcp", "servers") and parts[3:] == ("url",)
              or parts[:1] == ("providers",) and parts[2:] == ("base_url",)) and value:
            shown = http_fields.shown_url(value)  # hosted servers (an Azure deployment) take their key in the query
            value = Masked(shown) if shown != value else value
        rows.append((key, value, loaded.sources.get(".".join(parts), "default")))
    return rows


def _flatten(value: Any, parts: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    if isinstance(value, dict) and value:
        out: list[tuple[tuple[str, ...], Any]] = []
        for k, v in value.items():
            out += _flatten(v, (*parts, k))
        return out
    return [(parts, value)]
