"""Script tools: a folder with a tool.json and an executable becomes the tool `script_<name>`.

The arguments are checked against the tool.json `parameters` JSON Schema (jsonschema,
imported only when a script tool exists) before any approval, on a worker thread
(`decode_blocks`: a large argument takes seconds to check), then arrive on the
script's stdin as one JSON object. stdout is the result: JSON when it parses, else
text. A non-zero exit fails the call with the tails of stderr and stdout; exit 77 means "a
credential was rejected", which is `credential_missing` naming the key a stderr
line `SCV_REJECTED=KEY` gives (a declared one), else the only key, else them all.
A declared secret's value never comes back: wherever the script printed it
(stdout or stderr, plain or JSON-escaped) it reads `[secret KEY]`; so does a
`pass_env` value that reads like a credential (scvd/secret_like.py).

The script runs through the one process runner, in the workspace, inside the
sandbox when it is on (its folder bound read-only). Its executable must be the file
loaded (script_defs.identity): a changed one is refused until a reload. Its environment is the
allow-list of scvd/passenv.py, the user's HOME, the names its
`tools.script.<name>.pass_env` lists in config.toml (not in tool.json, which
often comes from elsewhere), and its declared secrets, fetched from the secret
store just before it starts.
"""

from __future__ import annotations

import asyncio
import errno
import json
import logging
import math
import os
from pathlib import Path
from typing import Any, ClassVar

from .. import passenv, secret_names
from .. import validation_text as vt
from ..errors import (ConfigError, CredentialMissing, Failed, InvalidArguments, NotARegularFile, ScvError, Timeout,
                      Unavailable)
from ..paths import read_regular_file
from ..process import run_process
from ..redact import redact, redact_tree
from ..secrets import SecretStore, off_loop, reads_refused
from ..text import excerpt, well_formed
from .contract import CallContext, LoadError, Plan, Registry, Tool, ToolFlags, ToolRisk, own_deadline, whole_numbers
from .runs import hidden_values, output_so_far, redact_text, workspace_error
from .script_defs import ScriptDef, identity, load_all, script_roots

log = logging.getLogger("scvd.tools.script")

CREDENTIAL_REJECTED = 77  # a script's exit code for "the credential was refused (401/403/expired)"
REJECTED_MARK = "SCV_REJECTED="  # a stderr line `SCV_REJECTED=KEY` says which declared key was refused
STDERR_LIMIT = 64 * 1024  # kept of stderr (head and tail)
TAIL_CHARS = 2000  # of stderr quoted in an error, and of stdout in a failed run's
SECRETS_SERVICE = "secrets"  # ctx.services key of the daemon's SecretStore
SHEBANG_BYTES = 256  # of a command read for its #! line when it did not start
BWRAP_EXEC_FAILED = "bwrap: execvp "  # bwrap's stderr (and exit 1) when it could not start the command
KEPT = ("HOME",)  # besides the allow-list: a script has no private home, so it keeps the user's


class ScriptTool(Tool):
    """One script tool, built from its definition."""

    Arguments: ClassVar[type] = dict
    decode_blocks = True  # jsonschema over arguments of up to client_frame_bytes: seconds, off the loop

    def __init__(self, definition: ScriptDef) -> None:
        spec = definition.spec
        self.definition = definition
        self.name = definition.name  # type: ignore[misc]
        self.description = spec.description  # type: ignore[misc]
        self.risk = ToolRisk(spec.risk)  # type: ignore[misc]
        self.flags = ToolFlags(always_allow=spec.always_allow, concurrent=spec.concurrent,
                               system_use=spec.system_use, timeout=spec.timeout)
        # as linked (a lookup follows the link) and as loaded: the folder each call runs from
        self.runs_from = (str(definition.folder), str(definition.real_folder))
        self._validator: Any = None

    def deadline(self, config: Any) -> float:
        """tool.json's timeout, else the dispatch default (seed 003: 15 minutes)."""
        if self.definition.spec.timeout is not None:
            return float(self.definition.spec.timeout)
        return float(config.tools.default_timeout_seconds)

    def _deadline_source(self, clipped: bool) -> tuple[str, str]:
        """Where the call's deadline came from, and how to raise it: the fix differs."""
        tool_json = self.definition.folder / "tool.json"
        if clipped:
            return "the call's timeout_seconds", "send the call with a larger timeout_seconds"
        if self.definition.spec.timeout is not None:
            return "tool.json", f"raise \"timeout\" in {tool_json}"
        return ("tools.default_timeout_seconds; tool.json sets no \"timeout\"",
                f"set \"timeout\" in {tool_json}, or raise tools.default_timeout_seconds in config.toml")

    def secret_keys(self, config: Any) -> frozenset[str]:
        return frozenset(self.definition.spec.secrets)

    def pass_env(self, config: Any) -> list[str]:
        """The names `tools.script.<folder>.pass_env` grants this tool."""
        granted = config.tools.script.get(self.definition.folder.name)
        return list(granted.pass_env) if granted is not None else []

    def _granted(self, ctx: CallContext) -> list[str]:
        """pass_env (of the configuration the session opened with) less every live configuration's secret
        names but the tool's own declared secrets, which it gets from the store anyway."""
        withheld = secret_names.withheld(ctx) - set(self.definition.spec.secrets)
        return [name for name in self.pass_env(ctx.config) if name not in withheld]

    def input_schema(self) -> dict[str, Any]:
        return self.definition.spec.parameters

    def decode(self, arguments: Any) -> Any:
        """Validate against the tool.json schema; the first error names the field."""
        import jsonschema
        import referencing
        from referencing.exceptions import Unresolvable

        from ..bounded_regex import MATCH_SECONDS, install
        from ..schema_keywords import linear

        if self._validator is None:
            install()  # its patterns matched with a time bound, the loop free meanwhile
            schema = self.definition.spec.parameters
            # an empty registry: a $ref is looked up in the schema, never fetched (script_defs refuses others)
            cls = linear(jsonschema.validators.validator_for(schema))  # uniqueItems in one pass, not pairwise
            self._validator = cls(schema, registry=referencing.Registry())

        def problems_of(arguments: Any) -> list[Any]:
            try:
                return vt.schema_errors(self._validator, arguments)
            except Unresolvable as exc:
                raise Failed(f"{self.name}: a $ref in its parameters cannot be resolved ({exc}); fix "
                             f"{self.definition.folder / 'tool.json'}") from None
            except TimeoutError:
                raise Failed(f"{self.name}: matching an argument against a `pattern` of its parameters took over "
                             f"{MATCH_SECONDS:g} s (the pattern backtracks on such text, e.g. a group quantified "
                             "over characters it also repeats); simplify that pattern in "
                             f"{self.definition.folder / 'tool.json'}") from None

        # a top-level null it refused is left out: the script applies its own default (none is filled in here)
        arguments, wrong = vt.schema_refusal(arguments, problems_of)
        if wrong is not None:
            raise InvalidArguments(f"{self.name}: {wrong}")
        # a model's 3.0 passes an `integer` (JSON Schema counts it one) but broke scripts: Python's
        # range(3.0), a shell's $(( )); the script gets 3, as built-in tools do
        return whole_numbers(arguments)

    def plan(self, args: Any, ctx: CallContext) -> Plan:
        d = self.definition
        self._unchanged()  # before approval: nobody approves a call that would be refused
        timeout = own_deadline(self.deadline(ctx.config), ctx)
        argv = [str(d.executable)]
        sandbox, network = ctx.sandbox, True
        sandboxed = sandbox is not None and sandbox.active
        if sandbox is not None:
            sandbox.check()
        if sandboxed:
            network = bool(ctx.config.sandbox.network)
        arguments = json.dumps(args, ensure_ascii=False)
        shown, note = excerpt(arguments)
        where = ("sandboxed, " + ("with network" if network else "no network")) if sandboxed else "unsandboxed"
        secrets = list(d.spec.secrets)
        providers = secret_names.live_provider_keys(ctx)  # a reload's too: scvd's environment is one for all
        for key in secrets:  # before approval: a provider's key goes to its base_url only, never to a tool
            if key in providers:
                raise Failed(f"{self.name}: its secret {key} is a chat provider's API key ({providers[key]}); "
                             "scvd sends a provider's key to that provider only: store what the tool needs "
                             "under another name (scvctl secrets set NAME) and declare that in its tool.json")
        summary = f"{self.name} ({where}, timeout {timeout:g} s){note}: {d.spec.command} {shown}"
        return Plan(
            risk=self.risk, summary=summary,
            details={"folder": str(d.folder), "command": str(d.executable), "arguments": arguments,
                     "secrets": secrets, "pass_env": passenv.passed(os.environ, self._granted(ctx)),
                     "cwd": str(ctx.workspace), "timeout_seconds": timeout,
                     "sandboxed": sandboxed, "network": network},
            sandboxed=sandboxed, network=network, writes_confined=sandboxed,
            timeout=timeout, data=argv,
        )

    async def before_gate(self, args: Any, plan: Plan, ctx: CallContext) -> None:
        """A declared secret not set fails the call before a person is asked to approve it: the
        agent stores it (store_secret) and calls again, approved once. run() looks them up again."""
        if not self.definition.spec.secrets:
            return
        try:
            async with asyncio.timeout(plan.timeout):  # the call's own deadline, as when run() looked
                await self._secrets(ctx)
        except TimeoutError:
            raise Timeout(
                f"{self.name}: looking up its secrets took longer than its timeout of {plan.timeout:g} s, before "
                "approval (a keyring waiting to be unlocked?)", hint="unlock the keyring, then call again") from None

    async def run(self, args: Any, plan: Plan, ctx: CallContext) -> Any:
        secrets = await self._secrets(ctx)
        # the path the sandbox binds: a folder linked in from elsewhere is hidden (scvd's own dirs) at its link
        folder = str(self.definition.real_folder)
        granted = self._granted(ctx)  # again: a reload since approval may have made one a secret's name
        env = passenv.build(os.environ, [*KEPT, *granted], set={**secrets, "SCV_TOOL_DIR": folder})
        hidden = hidden_values(granted, secrets)
        tools = ctx.config.tools
        argv = plan.data  # wrapped now: the sandbox's binds depend on whether a person approved
        self._unchanged()  # again: it may have changed while the call waited for approval
        if plan.sandboxed:
            argv = await ctx.sandbox.wrap_call(argv, ctx, network=plan.network, ro_binds=[folder])
        try:
            result = await run_process(
                argv, **ctx.start_dir(), env=env, timeout=plan.timeout,
                output_limit=tools.output_limit_bytes, input=json.dumps(args).encode(),
                stderr_limit=STDERR_LIMIT, wrapper=plan.sandboxed,
            )
        except OSError as exc:  # the workspace first: a chdir's ENOENT is no missing interpreter
            raise workspace_error(self.name, exc, ctx.workspace) or self._cannot_start(exc) from exc
        if plan.sandboxed and result.exit_code == 1 and result.stderr.startswith(BWRAP_EXEC_FAILED):
            if problem := _shebang_problem(self.definition.executable):  # else the script's own exit 1
                raise self._cannot_start(why=problem)
        clipped = plan.timeout is not None and plan.timeout < self.deadline(ctx.config)
        return self._answer(redacted(result, hidden), plan, hidden, clipped)

    def _unchanged(self) -> None:
        """Raise Unavailable when the executable is no longer the file scvd loaded: it may have been
        rewritten by a call, and a read_only tool runs unasked. The user reviews it and reloads."""
        d = self.definition
        try:
            now = identity(os.stat(d.executable))
        except OSError:  # gone: run() says it cannot start it
            return
        if now != d.executable_id:
            raise Unavailable(
                f"the script tool {self.name}'s executable {d.executable} changed since scvd loaded it; nothing "
                "ran: to use the new one, its owner reviews it and reloads scvd (`systemctl --user reload scvd`, "
                "or SIGHUP); sessions opened after that use it",
                hint="ask the user to review the change and reload scvd")

    def _cannot_start(self, exc: OSError | None = None, why: str = "") -> Failed:
        """The command did not start (`exc`); its #! line may say why better than the kernel's "No such
        file or directory" for a file that is there (a missing interpreter, a Windows line ending)."""
        if exc is not None:
            code = exc.errno
            why = exc.strerror or str(exc)
            if code in (errno.ENOENT, errno.ENOEXEC):
                why = _shebang_problem(self.definition.executable, code == errno.ENOEXEC) or why
        return Failed(f"{self.name}: cannot start {self.definition.executable}: {why}")

    async def _secrets(self, ctx: CallContext) -> dict[str, str]:
        """The declared secrets' values, or CredentialMissing for the first missing key."""
        store = ctx.services.get(SECRETS_SERVICE) or SecretStore(ctx.paths.secrets_file)
        values: dict[str, str] = {}
        for key in self.definition.spec.secrets:
            try:
                value = await store.get_async(key)
            except ConfigError as exc:  # the file's path and parse detail are for its owner, not the model
                log.warning("%s: cannot look up its secret %s: %s", self.name, key, exc.message)
                raise Unavailable(
                    f"{self.name}: cannot look up its secret {key}: scvd's secrets file cannot be read; its owner "
                    "must fix it (`scvctl secrets list` says what is wrong)",
                    hint="ask the owner to run `scvctl secrets list` and fix what it says") from None
            except CredentialMissing as exc:  # a value no process can be given (a NUL): store it again
                raise CredentialMissing(f"{self.name}: {exc.message}", hint=exc.hint, keys=exc.keys) from None
            except ScvError as exc:  # a locked keyring: the message says what to do
                kind = Unavailable if isinstance(exc, Unavailable) else Failed  # unlock it, not store_secret
                raise kind(f"{self.name}: cannot look up its secret {key}: {exc.message}",
                           hint=getattr(exc, "hint", None)) from None
            if value is None:  # the message reads the file again (a keyring out of reach?): a thread
                missing = await off_loop(store.missing_error, key, f"scvctl secrets set {key}")
                raise CredentialMissing(f"{self.name}: {missing.message}", hint=missing.hint)
            values[key] = value
        return values

    def _answer(self, result: Any, plan: Plan, secrets: dict[str, str], clipped: bool = False) -> Any:
        tail = result.stderr[-TAIL_CHARS:].strip()
        said = f"; stderr: {tail}" if tail else ""
        if result.timed_out:
            source, fix = self._deadline_source(clipped)
            shown = (f"; {output_so_far(result, redact_text(result.output, secrets))}"  # as bash's, secrets out
                     if result.bytes_seen else "")
            raise Timeout(
                f"{self.name} ran past its timeout of {plan.timeout:g} s ({source}) and its process group "
                f"was killed (SIGKILL){said}{shown}", hint=f"{fix}, or ask for less per call")
        if result.exit_code == CREDENTIAL_REJECTED:
            raise self._rejected(result.stderr, said)
        if result.exit_code != 0:
            how = f"exit {result.exit_code}" if result.exit_code is not None else f"signal {result.signal}"
            printed = redact_text(result.output, secrets)[-TAIL_CHARS:].strip()  # many scripts say why there
            said += f"; stdout: {printed}" if printed else ""
            # `gh` or `curl` on a 401 exit 1, not 77: the agent still needs the key's name (seed 003)
            if self.definition.spec.secrets and reads_refused(said):
                raise self._rejected(result.stderr, said, f"{self.name} failed ({how}) with output that reads "
                                                          "like a refused credential")
            raise Failed(f"{self.name} failed ({how}){said}")
        if not result.truncated:
            try:
                return well_formed(parse_redacted(result.output, secrets))
            except ValueError:
                pass
            except RecursionError:  # its escaped text could still hold a secret: not handed back
                if not secrets:  # nothing to hide in it: the text, as for any output that is no JSON here
                    return result.output
                raise Failed(f"{self.name} printed JSON nested too deeply to check for its secrets; "
                             "have it print flatter JSON") from None
        return redact_text(result.output, secrets)

    def _rejected(self, stderr: str, said: str, head: str = "") -> CredentialMissing:
        """Exit 77 (or a failure that reads like one): the key the script named (`SCV_REJECTED=KEY`), or
        its only one; with several and no word which, all of them: guessing one would send store_secret
        after the wrong key."""
        declared = self.definition.spec.secrets
        key = rejected_key(stderr, declared) or (declared[0] if len(declared) == 1 else None)
        head = head or f"{self.name} reported a rejected credential (exit {CREDENTIAL_REJECTED})"
        if key is not None:
            return CredentialMissing(
                f"{head}: its secret {key}; store a new value with store_secret (key {key!r}) or "
                f"`scvctl secrets set {key}`, then call the tool again{said}", hint=f"scvctl secrets set {key}")
        if not declared:  # store_secret refuses a tool that uses no stored secret
            return CredentialMissing(
                f"{head}, but it declares no secrets, so scvd has none to give it: declare the key it needs "
                f"in \"secrets\" of {self.definition.folder / 'tool.json'} and store it with `scvctl secrets "
                f"set KEY`{said}", hint="declare the key in tool.json's \"secrets\"")
        keys = ", ".join(declared)
        return CredentialMissing(
            f"{head} and did not say which (a stderr line `{REJECTED_MARK}KEY` would); its secrets: {keys}; "
            "store a new value for the rejected one with store_secret (its key) or `scvctl secrets set KEY`, "
            f"then call the tool again{said}", hint=f"scvctl secrets set KEY  (one of: {keys})")


def _shebang_problem(executable: Any, enoexec: bool = False) -> str | None:
    """What in the first line of `executable` keeps it from starting, or None when it seems fine."""
    try:  # never opened blocking: a FIFO put in its place would hold the daemon's loop
        head = read_regular_file(Path(executable), SHEBANG_BYTES)[:SHEBANG_BYTES]
    except (OSError, NotARegularFile):
        return None
    if not head.startswith(b"#!"):  # the kernel runs no script without one (a shell would, with sh)
        return "it is no binary and has no #! line naming what runs it; add one, e.g. #!/bin/sh" if enoexec else None
    line = head[2:].partition(b"\n")[0]
    if line.endswith(b"\r"):
        return ("its #! line ends in a carriage return (Windows line endings), so the interpreter it names "
                "does not exist; convert the file to Unix line endings, e.g. dos2unix")
    interpreter = os.fsdecode(next(iter(line.split()), b""))
    if not os.path.isfile(interpreter):
        return f"its #! line names {interpreter!r}, which does not exist; fix that line, e.g. #!/usr/bin/env python3"
    return None


def rejected_key(stderr: str, declared: list[str] | tuple[str, ...]) -> str | None:
    """The last declared key a `SCV_REJECTED=KEY` line of stderr names; an undeclared one is no answer."""
    named = [line.strip()[len(REJECTED_MARK):] for line in stderr.splitlines()
             if line.strip().startswith(REJECTED_MARK)]
    return next((key for key in reversed(named) if key in declared), None)


def parse_redacted(output: str, secrets: dict[str, str]) -> Any:
    """stdout as JSON, the secrets taken out of each string and number once decoded (the undecoded text
    is not redacted first: a short value such as a PIN would break the JSON around it). Raises ValueError
    for text that is not JSON, RecursionError for JSON nested too deeply to walk."""
    if not secrets:
        return json.loads(output, parse_float=_finite, parse_constant=_not_json)

    def number(literal: str) -> Any:  # as printed, so `1234.50` is matched as the script wrote it
        hidden = redact(literal, secrets)
        return hidden if hidden != literal else (_finite(literal) if any(c in literal for c in ".eE")
                                                 else int(literal))

    # decoding undoes escapes redact() knows no form of (`\/`, `\u0026`, upper-case hex)
    return redact_tree(json.loads(output, parse_int=number, parse_float=number, parse_constant=_not_json),
                       secrets)


def _finite(literal: str) -> float:
    """A JSON number no double holds (`1e999`) decodes to inf, which goes out as null: such output
    is handed back as the text the script printed, as NaN's is."""
    value = float(literal)
    if math.isinf(value):
        raise ValueError(f"{literal} is out of a double's range")
    return value


def _not_json(constant: str) -> Any:
    """NaN and Infinity are Python's, not JSON's: the result would carry them as null. Such output
    is handed back as the text the script printed."""
    raise ValueError(f"{constant} is not JSON")


def redacted(result: Any, secrets: dict[str, str]) -> Any:
    """The run with the secrets' values taken out of its stderr (before any slicing); stdout waits for
    `_answer`, which redacts it as JSON or as text."""
    if secrets:
        result.stderr = redact_text(result.stderr, secrets)
    return result


def register_scripts(registry: Registry, paths: Any, granted: Any = (), log_skipped: bool = True) -> None:
    """Add every valid script tool to `registry`; a bad one is logged once and kept as a load error,
    and so is a `tools.script.<name>` table (`granted`) that names no script tool folder."""
    definitions, failed = load_all(paths)
    folders = {d.folder.name for d in definitions} | {e.name[len("script_"):] for e in failed}
    for name in sorted(set(granted) - folders):
        where = " or ".join(map(str, script_roots(paths)))
        failed.append(LoadError("config.toml", f"script_{name}", f"tools.script.{name}: no script tool folder "
                                f"{name} in {where}, so its pass_env goes to nothing; fix the name"))
    for d in definitions:
        try:
            registry.register(ScriptTool(d))
        except ScvError as exc:  # a lint rule or a duplicate name: skip this one, keep the rest; a refused
            # tool is in no `scvctl tools --lint`, so the message names every rule it breaks
            failed.append(LoadError(str(d.folder / "tool.json"), d.name, exc.message + getattr(exc, "others", "")))
    for error in failed:
        if log_skipped:
            log.warning("skipping script tool %s: %s", error.source, error.message)
        registry.add_error(error.source, error.name, error.message)

