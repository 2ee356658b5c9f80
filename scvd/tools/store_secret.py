"""`store_secret` (seed 003 credential auto-heal): a person types a secret's value, the agent never sees it.

The call sends `secret.requested` to the approvers; the value comes back in
`secret.provide` and goes straight into the secret store. The result says only
that the key is stored. A turn may ask at most `MAX_ROUNDS` times for one tool
(an MCP server and its tools are one; counted per session and `call.turn`), so a
credential that keeps failing cannot loop on a person. A call without a turn (an MCP
host's, whose session may stay open for days) counts per `WINDOW_SECONDS` from its
first round instead: a token that expires again later can be healed again, and a model
naming tool after tool still gets at most two prompts per tool an hour. Counts that can
refuse nothing any more (an earlier turn's, an hour that passed) are forgotten: a session
lives for days, a turn at a time.
The masked prompt is the approval: the tool is read_only and always_allow.
`tool` must name a tool of the registry the call came through (`known`) that
uses the key (`Tool.secret_keys`), so neither an invented nor another real name
opens a fresh count, or `mcp__NAME` of a configured MCP server that uses it (one
down for want of the key lists no tools to name). When MCP servers
use the key, the result says how each came up with it (waiting up to 10 s).
"""

from __future__ import annotations

from typing import Annotated, Any, Callable

import msgspec

from .. import awake
from ..config import server_secrets
from ..errors import InvalidArguments, LimitExceeded, ScvError, Unavailable
from ..secrets import KEY_RE, check_key
from .contract import NO_TIMEOUT, CallContext, Plan, Tool, ToolFlags, ToolRisk, never

MAX_ROUNDS = 2  # per tool per turn (seed 003)
WINDOW_SECONDS = 3600.0  # a session's calls without a turn: its rounds per tool count for this long
REQUESTS_SERVICE = "secret_requests"  # ctx.services key of the daemon's SecretRequests
MCP_SERVICE = "mcp_servers"  # ctx.services key of the daemon's MCP servers (settle())
MCP_PREFIX = "mcp__"
ROUNDS_SERVICE = "store_secret_rounds"  # ctx.services key: (turn, tool) -> (rounds, first round's time)

DESCRIPTION = (  # seed 003: the lookup order (keyring service scv, account the key's name) and the auth
    # failures that call for it (missing key, 401, 403, expired token), in 200 chars. The order is the
    # store's: a value in secrets.toml is taken before the keyring's (SecretStore._find says why)
    "Have a person type secret KEY, masked; read from secrets.toml, keyring (scv/KEY), env.\n"
    "Use on (credential_missing/401/403/expired token), then retry; not for 404/5xx.\n"
    "Max 2 rounds per tool per turn."
)


class Arguments(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    key: Annotated[str, msgspec.Meta(
        pattern=f"^{KEY_RE.pattern}$",
        description="The secret's name, from the failing tool's error, e.g. 'GITHUB_TOKEN'; values are "
                    "never exported to you, so an empty printenv proves nothing.")]
    tool: Annotated[str, msgspec.Meta(
        min_length=1, max_length=64,
        description="The tool that failed for want of it, to call again after, e.g. 'script_gh_issues'.")]
    question: Annotated[str, msgspec.Meta(
        max_length=500,
        description="What the person reads when asked, e.g. 'The token was rejected (401)'; "
                    "default: a line naming key and tool.")] = ""


class StoreSecret(Tool):
    name = "store_secret"
    description = DESCRIPTION
    Arguments = Arguments
    risk = ToolRisk.READ_ONLY
    flags = ToolFlags(always_allow=True, system_use=True, modifies=True, timeout=NO_TIMEOUT)  # waits on a person

    def __init__(self) -> None:
        self.known: Callable[[str], Any] | None = None  # the registry's get(), set by build_registry

    def session_services(self, workspace: Any, config: Any, paths: Any,
                         gone: Callable[[], bool] = never) -> dict[str, Any]:
        return {ROUNDS_SERVICE: {}}

    def plan(self, args: Any, ctx: CallContext) -> Plan:
        try:
            check_key(args.key)
        except ScvError as exc:  # the reserved name; the schema's pattern covers the rest
            raise InvalidArguments(f"store_secret: {exc.message}") from None
        if self.known is not None and (args.tool == self.name or self.known(args.tool) is None
                                       and not _configured_server(args.tool, args.key, ctx)):
            raise InvalidArguments(
                f"tool {args.tool!r} is not a tool scvd has: give the name of the tool that failed for want "
                f"of {args.key}, as you called it (e.g. 'script_gh_issues'), or mcp__NAME for an enabled MCP "
                f"server whose env, headers or query use {args.key}")
        failing = self.known(args.tool) if self.known is not None else None
        if failing is not None and args.key not in (uses := failing.secret_keys(ctx.config)):
            # else any tool's name would open a fresh count of rounds, and a wrong key be asked for
            said = (f"its secrets: {', '.join(sorted(uses))}" if uses else
                    "it uses no stored secret, so storing one changes nothing for it")
            raise InvalidArguments(
                f"store_secret: {args.tool} does not use the secret {args.key} ({said}); give the key its "
                "error names, and the tool that failed")
        return Plan(risk=ToolRisk.READ_ONLY, summary=f"ask a person to enter {args.key} for {args.tool}",
                    details={"key": args.key, "tool": args.tool})

    async def run(self, args: Any, plan: Plan, ctx: CallContext) -> Any:
        requests = ctx.services.get(REQUESTS_SERVICE)
        if requests is None:
            raise Unavailable("store_secret needs the scvd daemon's approvers; use `scvctl secrets set "
                              f"{args.key}`")
        rounds = ctx.services.setdefault(ROUNDS_SERVICE, {})
        servers = ctx.services.get(MCP_SERVICE)
        # an MCP server's tools share its secrets: counted as one tool, mcp__NAME (else a server with
        # N tools got 2(N+1) masked prompts in a turn for the one token)
        server = _server_of(args.tool, servers)
        counted = (ctx.turn, f"{MCP_PREFIX}{server}" if server else args.tool)
        # without a turn (an MCP host's session, open for days) the rounds count per window: whether a
        # tool worked since says nothing (a model could name one that works without the key)
        now = awake.clock()  # an hour the machine slept through counts: time.monotonic() stops meanwhile
        _forget_past(rounds, ctx.turn, now)
        used, since = rounds.get(counted, (0, now))
        if ctx.turn is None and now - since >= WINDOW_SECONDS:
            used, since = 0, now
        if used >= MAX_ROUNDS:
            later = "" if ctx.turn is not None else (
                f"; calls without a turn count {_span(WINDOW_SECONDS)} as one turn: it may ask again in "
                f"{_span(since + WINDOW_SECONDS - now)}")
            raise LimitExceeded(
                f"store_secret already asked twice for {counted[1]} in this turn (at most {MAX_ROUNDS} per tool "
                f"per turn, an MCP server's tools counted as one): the credential keeps failing; stop and tell "
                f"the user to check {args.key} (`scvctl secrets set {args.key}`){later}")
        requests.check_approvers(ctx.session_id, args.key)  # none: fail at once, not a round
        rounds[counted] = (used + 1, since)
        try:
            entry = await requests.ask(session=ctx.session_id, call_id=ctx.call_id, key=args.key,
                                       question=args.question, tool=args.tool)
        except Unavailable:  # every approver asked disconnected: nobody answered, so not a round either
            if counted in rounds:  # not forgotten meanwhile (a later turn came): nothing to put back
                rounds[counted] = (used, since)
            raise
        result = {"key": args.key, "stored": True, "where": entry.source, "next": f"call {args.tool} again"}
        if servers is not None and (came := await servers.settle(args.key)):
            result["mcp_servers"] = came  # name -> "ready: N tool(s) ..." or "down: why"
            state = came.get(server or "")
            if state is not None and not state.startswith("ready"):  # a wrong value: calling again fails too
                result["next"] = f"mcp server {server} is not up ({state}); tell the user what it says"
            elif state is not None and args.tool == f"{MCP_PREFIX}{server}":  # it had no tools to call: now it has
                result["next"] = "its tools are listed now (find_tools loads them); call them"
        return result


def _forget_past(rounds: dict[tuple[str | None, str], tuple[int, float]], turn: str | None, now: float) -> None:
    """Drop the counts that can no longer refuse a round, so a session open for days keeps a few.

    A call with a turn ends every other turn's count: a chat's turns run one after another, and
    a client that names turns could name a fresh one anyway. A count without a turn goes once its
    window passed (it would start over then). A call without a turn leaves turns' counts alone."""
    for key, (_used, since) in list(rounds.items()):
        if (turn is not None and key[0] not in (None, turn)) or (key[0] is None and now - since >= WINDOW_SECONDS):
            del rounds[key]


def _span(seconds: float) -> str:
    return f"{max(1, round(seconds / 60))} min" if seconds >= 60 else f"{max(1, round(seconds))} s"


def _server_of(tool: str, servers: Any) -> str | None:
    """NAME for `mcp__NAME` or one of its tools `mcp__NAME__TOOL`, of a server running now; else None."""
    if servers is None or not tool.startswith(MCP_PREFIX):
        return None
    return next((name for name in servers.links
                 if tool == f"{MCP_PREFIX}{name}" or tool.startswith(f"{MCP_PREFIX}{name}__")), None)


def _configured_server(tool: str, key: str, ctx: CallContext) -> bool:
    """`mcp__NAME`: an enabled MCP server that uses `key`, whose tools may not be listed (it is down).
    Any other server's name would only be a fresh count of rounds (seed 003: two per tool per turn).
    The servers running now, not the session's configuration: a reload may have added it since."""
    if not tool.startswith(MCP_PREFIX):
        return False
    name, servers = tool[len(MCP_PREFIX):], ctx.services.get(MCP_SERVICE)
    if servers is not None:
        link = servers.links.get(name)
        cfg = link.cfg if link is not None else None
    else:
        cfg = ctx.config.mcp.servers.get(name)
    return bool(cfg is not None and cfg.enabled and key in server_secrets(cfg))


def tools(config: Any, paths: Any) -> list[Tool]:
    return [StoreSecret()]
