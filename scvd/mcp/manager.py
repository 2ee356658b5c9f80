"""The daemon's MCP servers: start, stop and replace links as the configuration says, and keep
their tools in the registry, and in the registries of open sessions.

No MCP SDK here: `link.py` (which imports it) is imported only once a server is
enabled, so an idle daemon without servers never loads it, and then on a thread: its
pydantic models take about a second to build, during which the loop would answer
no client. A server starts in the background; the daemon never waits for one.
spec.py, tool.py and cap.py are imported by the functions that need a server too.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import os
import sys
from typing import TYPE_CHECKING, Any, Protocol

from .. import validation_text as vt
from ..config import Config, McpServerConfig, server_secrets
from ..errors import Unavailable
from ..protocol import McpServerStatus, ToolLoadError
from ..text import cut_middle
from ..tools.contract import Registry, ToolRisk

if TYPE_CHECKING:
    from .tool import McpTool, ToolSpec

log = logging.getLogger("scvd.mcp")
SETTLE_SECONDS = 10.0  # store_secret waits this long for the servers its key starts
SETTLE_POLL = 0.05
DISABLED = "disabled"  # status's state of a server that `enabled = false` keeps parked (never a link's)
HINT_NAMES = 20  # of a server's tools named where a tool_risk key names none of them
BUG_SHOWN = 1000  # chars of an exception taking a server's tools: its text may quote what the server sent


class Host(Protocol):
    """What the manager needs from the daemon."""

    registry: Registry
    sandbox: Any
    paths: Any

    @property
    def config(self) -> Config: ...

    def session_registries(self) -> list[Registry]:
        """The registries open sessions hold (one opened before a reload keeps the old one)."""

    def revoke_grants(self, tools: set[str], why: str) -> None:
        """Drop open sessions' grants of these tools, and deny their waiting requests saying `why`."""


class WithoutSdk:
    """A configured server while the optional MCP SDK cannot be imported: down, saying how to fix it."""

    state = "down"
    failures = 0
    needs: tuple[str, ...] = ()

    def __init__(self, name: str, cfg: McpServerConfig, exc: ImportError) -> None:
        self.name, self.cfg = name, cfg
        python = sys.executable or "python3"
        if exc.name in ("mcp", "mcp_types"):
            self.error = (f"the MCP SDK is not installed in scvd's Python ({python}): install it with "
                          f"`{python} -m pip install 'mcp>=2,<3'`, then reload scvd")
        else:  # installed, but something it needs is missing or broken
            self.error = (f"the MCP SDK cannot be imported ({exc}): reinstall it with "
                          f"`{python} -m pip install --force-reinstall 'mcp>=2,<3'`, then reload scvd")

    async def stop(self, why: str | None = None) -> None:
        pass

    def started_since(self, stored_at: float) -> bool:
        return True  # it never starts: its state is final

    def retry_now(self, stored_at: float) -> None:
        pass  # a reload retries the import


class Loading:
    """An added server while the SDK is imported on a thread: `starting`, until _add replaces it."""

    state = "starting"
    failures = 0
    error = None
    needs: tuple[str, ...] = ()

    def __init__(self, name: str, cfg: McpServerConfig) -> None:
        self.name, self.cfg = name, cfg

    async def stop(self, why: str | None = None) -> None:
        pass

    def started_since(self, stored_at: float) -> bool:
        return False  # settle() waits for the link that replaces it

    def retry_now(self, stored_at: float) -> None:
        pass  # its start reads the secrets stored by then


async def _load_sdk() -> None:
    """Import link.py (the MCP SDK) and the argument checker's jsonschema on a thread, once.
    A missing SDK is _add's to report, server by server."""
    def load() -> None:
        for module in (f"{__package__}.link", "jsonschema", "referencing"):
            try:
                importlib.import_module(module)
            except ImportError:
                return

    if f"{__package__}.link" not in sys.modules or "jsonschema" not in sys.modules:
        await asyncio.to_thread(load)


class McpServers:
    """Links by server name; the tools each one listed last."""

    def __init__(self, host: Host) -> None:
        self.host = host
        self.links: dict[str, Any] = {}  # name -> link.ServerLink
        self.tools: dict[str, list[McpTool]] = {}
        self.refused: dict[str, list[str]] = {}  # name -> tools the registry refused (duplicate names)
        self.left_out: dict[str, list[str]] = {}  # name -> why tools it listed were left out
        self.unread: dict[str, str] = {}  # name -> why scvd could not take the tools of its last list
        self._listed: dict[str, tuple[list[ToolSpec], int]] = {}  # name -> its last list (cut at max_tools), its length
        self._share: dict[str, int] = {}  # name -> the bytes of tools.list its tools were taken within
        self._sandboxed_by: dict[str, tuple[Any, bool]] = {}  # name -> _sandbox_now() at its start
        self._stored: dict[str, float] = {}  # secret key -> when (monotonic) store_secret last stored it
        # stops of the servers a reload removed: tasks of their own, so that neither cancelling the reload
        # nor scvd's stop (close() waits for them) leaves one running
        self._stopping: set[asyncio.Future[None]] = set()
        self._closed = False  # scvd is stopping: a reload under way starts nothing more
        self._applying = asyncio.Lock()

    async def apply(self, config: Config) -> None:
        """Start added servers, stop removed ones, restart changed ones; leave the rest alone."""
        # one at a time: the start's apply waits for the SDK's import, and a reload's meanwhile would
        # find no link yet, then see its changes overwritten by the start's older configuration
        async with self._applying:
            await self._apply(config)

    async def _apply(self, config: Config) -> None:
        wanted = {n: c for n, c in config.mcp.servers.items() if c.enabled}
        if any(isinstance(link, WithoutSdk) for link in self.links.values()):
            importlib.invalidate_caches()  # the SDK may have been installed since: a reload tries again
        sandbox = self._sandbox_now()
        stops = [self._remove(name, why) for name, link in list(self.links.items())
                 if (why := self._replaced(name, link, config, sandbox)) is not None]
        if stops:  # together: each may take its stop's grace
            await asyncio.shield(asyncio.gather(*stops, return_exceptions=True))
        if self._closed:
            return
        if added := {name: cfg for name, cfg in wanted.items() if name not in self.links}:
            self.links.update((name, Loading(name, cfg)) for name, cfg in added.items())
            await _load_sdk()
            if self._closed:
                return
        for name, cfg in added.items():
            if isinstance(self.links.get(name), Loading):  # the apply lock keeps others off it
                self._add(name, cfg)
        self._retake(config)

    def _retake(self, config: Config) -> None:
        """Servers left running whose share of a tools.list frame a reload changed (more servers, another
        server_frame_bytes) take their tools again within it: together they must still fit one frame."""
        if not self._share:  # no server listed tools yet
            return
        from . import cap

        room = cap.share_for(config)[0]
        for name in [n for n, was in self._share.items() if was != room and n in self._listed]:
            self._take(self.links[name], f"mcp server {name}'s tool was left out: past its share of a tools.list "
                                         "frame after a reload")

    def _replaced(self, name: str, link: Any, config: Config, sandbox: tuple[Any, bool]) -> str | None:
        """Why a reload to `config` stops the running `link` (what its cut-off calls are told), or None."""
        cfg = config.mcp.servers.get(name)
        again = "; it starts again with it: call again once `scvctl status` shows it ready"
        if cfg is None or not cfg.enabled:
            return f"a reload {'removed' if cfg is None else 'disabled'} mcp.servers.{name}"
        if cfg != link.cfg or isinstance(link, WithoutSdk):
            return f"a reload changed mcp.servers.{name}{again}"
        if self._sandboxed_by.get(name, sandbox) != sandbox:
            return f"a reload changed [sandbox] (or whether bubblewrap works){again}"
        return None

    def _add(self, name: str, cfg: McpServerConfig) -> None:
        try:
            from .link import ServerLink  # the MCP SDK, only now that a server is configured
        except ImportError as exc:  # an optional extra: the server is down, scvd and its other tools run
            self.links[name] = WithoutSdk(name, cfg, exc)
            log.error("mcp server %s: %s", name, self.links[name].error)
            return
        link = ServerLink(name, cfg, launch=lambda: self._launch(name, cfg), on_tools=self._on_tools)
        self.links[name] = link
        if cfg.command and cfg.sandbox:  # a [sandbox] change restarts it; sandbox = false ones never
            self._sandboxed_by[name] = self._sandbox_now()
        link.start()
        log.info("mcp server %s: starting (%s)", name, "stdio" if cfg.command else link.url)

    def _sandbox_now(self) -> tuple[Any, bool]:
        """What a sandboxed stdio server's launch depends on: the [sandbox] table and the probe."""
        sandbox = self.host.sandbox
        return self.host.config.sandbox, bool(sandbox is not None and sandbox.active)

    def _remove(self, name: str, why: str) -> asyncio.Future[None]:
        """Take the server out now; its stop runs in a task of its own (returned)."""
        link = self.links.pop(name)
        self._sandboxed_by.pop(name, None)
        # a grant was a person's trust in this server; a changed table may run another program
        self.host.revoke_grants({t.name for t in self.tools.pop(name, [])},
                                f"a reload changed or removed mcp.servers.{name}")
        for held in (self.refused, self.left_out, self.unread, self._listed, self._share):
            held.pop(name, None)
        self._register_everywhere(name)  # none left: gone from every session too
        stop = asyncio.ensure_future(self._stop(link, why))
        self._stopping.add(stop)
        stop.add_done_callback(self._stopping.discard)
        return stop

    @staticmethod
    async def _stop(link: Any, why: str) -> None:
        await link.stop(why)
        log.info("mcp server %s: stopped", link.name)

    def secret_stored(self, key: str, stored_at: float) -> None:
        """A person just entered `key` (store_secret): a server down for want of it, or whose header
        was refused, starts again now, not after its backoff (up to a minute)."""
        self._stored[key] = stored_at
        for name in self._using(key):
            self.links[name].retry_now(stored_at)

    async def settle(self, key: str, timeout: float = SETTLE_SECONDS) -> dict[str, str]:
        """After secret_stored(key): how each server using it came out of the start with it (at most
        `timeout` s), so that store_secret can tell its agent whether the tools are there now. Known
        by name: a server whose SDK is being imported gets its link meanwhile, and a reload may replace one."""
        stored_at = self._stored.get(key)
        using = self._using(key)
        if stored_at is None or not using:
            return {}
        deadline = asyncio.get_running_loop().time() + timeout
        while not all(self._started_since(name, stored_at) for name in using):
            if asyncio.get_running_loop().time() >= deadline:
                break
            await asyncio.sleep(SETTLE_POLL)
        return {name: self._outcome(name, timeout) for name in using}

    def _started_since(self, name: str, stored_at: float) -> bool:
        link = self.links.get(name)  # None: removed by a reload since
        return link is None or bool(link.started_since(stored_at))

    def _outcome(self, name: str, waited: float) -> str:
        link = self.links.get(name)
        state = link.state if link is not None else "stopped"
        if state == "ready":
            return f"ready: {len(self.tools.get(name, []))} tool(s)"
        if state == "starting":  # its error is the last start's, from before the secret came
            return (f"starting: not up within {waited:g} s of the secret being stored; it may still "
                    "come up (scvctl status says)")
        return f"{state}: {link.error}" if link is not None and link.error else state

    def _using(self, key: str) -> list[str]:
        """The servers (running, or starting while their SDK is imported) given `key`."""
        return [name for name, link in self.links.items() if key in server_secrets(link.cfg)]

    async def close(self) -> None:
        """Stop every server, and wait for those a reload is still stopping."""
        self._closed = True
        await asyncio.gather(*(link.stop() for link in self.links.values()), *self._stopping,
                             return_exceptions=True)

    def _launch(self, name: str, cfg: McpServerConfig) -> Any:
        """Built at each start, so a secret stored since the last one is picked up."""
        from . import spec

        secrets = getattr(self.host, "secrets", None)
        if cfg.url is not None:
            return spec.http_launch(name, cfg, secrets)
        home = self.host.paths.mcp_dir / name  # its default cwd: a private dir of its own
        home.parent.mkdir(mode=0o700, exist_ok=True)  # each its own: parents=True gives the umask's mode
        home.mkdir(mode=0o700, exist_ok=True)
        cwd = os.path.expanduser(cfg.cwd) if cfg.cwd else None
        if cwd is not None and not os.path.isdir(cwd):  # else it reads as the command being missing
            raise Unavailable(f"mcp server {name}: its cwd {cwd!r} is not a directory; create it, or fix "
                              f"mcp.servers.{name}.cwd")
        return spec.stdio_launch(
            name, cfg, secrets=secrets, sandbox=self.host.sandbox,
            network=bool(self.host.config.sandbox.network), base_env=os.environ, home=home)

    def _on_tools(self, link: Any, specs: list[ToolSpec], listed: int) -> None:
        """`specs`: the first max_tools of the `listed` tools the server lists."""
        if self.links.get(link.name) is not link:
            return  # a link being replaced reported late
        self._listed[link.name] = (specs, listed)
        self._take(link)

    def _take(self, link: Any, reason: str = "") -> None:
        """The server's tools from its last list, as many as its share of a tools.list frame holds;
        `reason` the grants of those it no longer takes end (by default: the server changed them).
        A list scvd fails to turn into tools (its bug) leaves the server none, saying so: the old
        ones may have been redefined in it, and their grants were trust in what they were."""
        try:
            tools, left_out = self._convert(link)
            self.unread.pop(link.name, None)
        except Exception as exc:  # else the server was `ready`, its tools gone or stale, with not a word
            log.exception("mcp server %s: scvd could not take the tools of its tools/list", link.name)
            why = cut_middle(f"{type(exc).__name__}: {exc}", BUG_SHOWN, 0)
            self.unread[link.name] = (
                f"scvd could not take the tools of its tools/list ({why}), a bug in scvd: it lists none of them "
                "until a tools/list it can take (the server's restart, or its list_changed); report it with the "
                "traceback in scvd's log")
            tools, left_out = [], [f"mcp server {link.name}: {self.unread[link.name]}"]
            reason = f"scvd could not take mcp server {link.name}'s tools/list"
        before = {t.name: t.spec.definition for t in self.tools.get(link.name, [])}
        after = {t.name: t.spec.definition for t in tools}
        if (link.name in self.tools and list(after.items()) == list(before.items())
                and left_out == self.left_out.get(link.name) and not self.refused.get(link.name)):
            # listed again as they were (a list_changed, a restart): the registries keep the tools they hold,
            # and no host is told its tools changed (a server sending list_changed each millisecond
            # made `scvctl mcp` send its host hundreds a second)
            return
        self.left_out[link.name], self.tools[link.name] = left_out, tools
        # a grant was a person's trust in the tool as its server described it (a changed
        # description or schema can be a rug pull); a tool that stayed the same keeps its grants
        redefined = sorted(n for n, was in before.items() if n in after and after[n] != was)
        gone = {n for n in before if n not in after}
        if redefined or gone:
            self.host.revoke_grants(set(redefined) | gone,
                                    reason or f"mcp server {link.name} redefined or stopped listing the tool")
        for n in redefined:
            log.warning("mcp server %s: %s was redefined by its server; its session grants are revoked",
                        link.name, n)
        self._register_everywhere(link.name)

    def _convert(self, link: Any) -> tuple[list[McpTool], list[str]]:
        """The tools taken from the server's last list, and the load errors of those left out."""
        from . import cap, spec
        from .tool import schema_too_large

        specs, listed = self._listed[link.name]
        room, servers = cap.share_for(self.host.config)
        self._share[link.name] = room
        cut = [cap.over_max(link.name, listed, len(specs))] if listed > len(specs) else []  # logged too
        dropped: list[tuple[str, str]] = []  # (the kind, the message) of each tool left out
        tools, taken = [], {}
        used = sum(map(cap.error_size, cut))
        for s in specs:
            if (why := schema_too_large(s)) is not None:
                dropped.append(("whose inputSchema is above scvd's limit", why))
            elif (tool := self._tool(link, s)).name in taken:  # `Get-Sum` and `get_sum`: mcp__NAME__get_sum
                dropped.append(("whose scvd name is another's", (
                    f"{spec.named(s.name)}: its scvd name {tool.name} is {spec.named(taken[tool.name])!r}'s "
                    "already; the tool is left out (its server's other tools are not): rename one of them on "
                    "the server")))
            else:
                used += cap.entry_size(s)
                if used > room:
                    cut.append(cap.over_share(link.name, len(tools), room, servers))
                    break
                taken[tool.name] = s.name
                tools.append(tool)
                continue
            if len(dropped) <= cap.LEFT_OUT_NAMED + 1:  # those named, and room for the count of the rest
                used += cap.error_size(dropped[-1][1])
        for why in cut:
            log.warning("%s", why)
        typos = _risk_typos(link.name, link.cfg, specs, listed)
        for typo in typos:  # else seen in `scvctl tools --errors` only; logged once, not at each restart
            if typo not in self.left_out.get(link.name, ()):
                log.warning("%s", typo)
        return tools, cut + cap.left_out(link.name, dropped) + typos

    def _tool(self, link: Any, s: ToolSpec) -> McpTool:
        from .tool import McpTool

        cfg: McpServerConfig = link.cfg
        if s.name in cfg.tool_risk:
            risk, source = cfg.tool_risk[s.name], f"mcp.servers.{link.name}.tool_risk"
        else:
            risk, source = cfg.risk, f"mcp.servers.{link.name}.risk"
        return McpTool(link, s, risk=ToolRisk(risk), risk_from=source, timeout=cfg.timeout_seconds)

    def _register(self, registry: Registry, name: str) -> None:
        refused = registry.replace_source(f"mcp:{name}", self.tools.get(name, []))
        self.refused[name] = [exc.message for exc in refused]

    def _register_everywhere(self, name: str) -> None:
        """A server's current tools into the daemon's registry and every open session's: its tools
        follow the running server (a list_changed, a restart, a removal), whenever the session opened."""
        current = self.host.registry
        self._register(current, name)  # what status reports as refused is the current registry's
        for registry in self.host.session_registries():
            if registry is not current:
                registry.replace_source(f"mcp:{name}", self.tools.get(name, []))

    def register_into(self, registry: Registry) -> None:
        """Put every server's current tools into a registry built afresh (a reload)."""
        for name in self.tools:
            self._register(registry, name)

    def status(self) -> list[McpServerStatus]:
        """Every configured server: those running (or down), and those `enabled = false` keeps parked."""
        shown = [
            McpServerStatus(
                name=name, transport="stdio" if link.cfg.command else "http", state=link.state,
                tools=len(self.tools.get(name, [])), error=link.error or self.unread.get(name), restarts=link.failures)
            for name, link in self.links.items()
        ]
        shown += [McpServerStatus(name=name, transport="stdio" if cfg.command else "http", state=DISABLED)
                  for name, cfg in self._disabled().items()]
        return sorted(shown, key=lambda s: s.name)

    def _disabled(self) -> dict[str, McpServerConfig]:
        """The configured servers `enabled = false` keeps from starting. Read from the configuration, not
        kept as links: nothing of them is started or imported. One a reload just disabled whose link is
        still in place (the apply waits for another) is shown as that link says, once."""
        return {name: cfg for name, cfg in self.host.config.mcp.servers.items()
                if not cfg.enabled and name not in self.links}

    def not_loaded(self, tool: str) -> str | None:
        """Why `tool`, named as one of a server's, is not listed when that server is not up, is disabled, or
        scvd could not take its list (else None)."""
        disabled = self._disabled()
        if not self.links and not disabled:  # a model's typo of a tool name, with no server: spec stays unloaded
            return None
        from .spec import tool_name

        for name in disabled:
            if tool.startswith(tool_name(name, "")):
                return (f"mcp server {name} is disabled (enabled = false in its [mcp.servers.{name}] table): set "
                        "enabled = true there, then reload scvd (`systemctl --user reload scvd`, or SIGHUP to "
                        "scvd); its tools are listed once it is up")
        for name, link in self.links.items():
            if not tool.startswith(tool_name(name, "")):
                continue
            if link.state != "ready" and link.error:
                return f"{link.down_message()}; its tools are listed once it is up"
            if link.state == "starting":  # a first start: it may take CONNECT_TIMEOUT before it fails
                return f"{link.down_message()}; its tools are listed once it is up (see `scvctl status`)"
            if name in self.unread:
                return f"mcp server {name}: {self.unread[name]}"
        return None

    def load_errors(self) -> list[ToolLoadError]:
        errors = []
        for name, link in sorted(self.links.items()):
            if link.error and link.state != "ready":  # down, or starting again after a failure
                errors.append(ToolLoadError(source=f"mcp:{name}", name=name, message=link.error))
            errors += [ToolLoadError(source=f"mcp:{name}", name=name, message=m)
                       for m in self.refused.get(name, []) + self.left_out.get(name, [])]
        return errors

    def waiting_for_secrets(self) -> dict[str, tuple[str, ...]]:
        """Servers not up for want of a secret, and its names: an agent heals them with store_secret
        (their tools are not listed until they start, so no call of theirs can say so)."""
        # starting too: between two tries of its backoff, the next one reads the secrets again
        return {name: link.needs for name, link in sorted(self.links.items())
                if link.needs and link.state in ("down", "starting")}


def _risk_typos(server: str, cfg: McpServerConfig, specs: list[ToolSpec], listed: int) -> list[str]:
    """A tool_risk key that names none of the tools taken leaves its tool at `risk`: what it may have meant."""
    from . import spec  # a server's tools are listed: it is loaded

    names, typos = {s.name for s in specs}, []
    which = (f"not among the first {len(specs)} the server lists" if listed > len(specs)
             else "the server does not list (now)")
    for key in sorted(k for k in cfg.tool_risk if k not in names):
        # the case first: difflib compares characters as they are, so `PING` resembles `ping` not at all
        cased = next((n for n in sorted(names) if n.casefold() == key.casefold()), None)
        close = cased or vt.meant(key, names, cutoff=0.6)
        shown = ", ".join(map(spec.named, sorted(names)[:HINT_NAMES])) + (", ..." if len(names) > HINT_NAMES else "")
        hint = f"did you mean {spec.named(close)!r}?" if close else f"it lists {shown or 'none'}"
        hint += " (a key is the server's name of the tool, its case too)" if cased else ""
        typos.append(f"mcp.servers.{server}.tool_risk names {key!r}, a tool {which}: {hint}")
    return typos
