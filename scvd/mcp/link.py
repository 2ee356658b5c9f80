"""The connection to one MCP server, kept alive: start, list tools, call, restart with backoff.

Imports the MCP SDK (`mcp`, pinned >=2,<3); the manager imports this module only
when a server is configured. The link runs as one asyncio task: connect ->
initialize -> list tools -> wait until the connection is lost -> back off ->
again. While it is down, calls fail at once with `unavailable`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections import deque
from typing import Any, Awaitable, Callable, Collection
from urllib.parse import parse_qsl, urlsplit

import httpx2
import mcp_types as types
from mcp_types.jsonrpc import CONNECTION_CLOSED, INVALID_PARAMS
from mcp.client.session import ClientSession
from mcp.shared.exceptions import MCPError

from .. import __version__, http_fields, passenv
from ..config import McpServerConfig, SecretRef, server_secrets
from ..redact import hide_in_logs, redact, redact_tree
from ..errors import CredentialMissing, Failed, InvalidArguments, LimitExceeded, ScvError, ToolError, Unavailable
from ..secret_like import picked
from ..secrets import off_loop, reads_refused
from ..text import printable_cut, well_formed
from ..tools.runs import redact_text
from . import spec
from .not_mcp import NotMcp, Skipped
from .skim import CLOSED_CODE_KEPT, MESSAGE_LIMIT, TOOLS_OMITTED_KEY, skim_response
from .tool import OMITTED_KEY, TOO_LARGE, CallOutcome, ToolSpec, json_size, omitted, render

log = logging.getLogger("scvd.mcp")

BACKOFF_FIRST, BACKOFF_MAX = 1.0, 60.0  # seconds between restarts: doubles per failure, up to the max
# a run ready this long resets the backoff; one that crashes soon after listing its tools does not
STABLE_UPTIME = 30.0
DOWN_LOG_SECONDS = 3600.0  # once the wait is BACKOFF_MAX, how often a server still down is logged
CONNECT_TIMEOUT = 60.0  # for initialize and the first tools/list
# how long a stopping link may take to close (a stdio server is SIGKILLed at 4 s)
STOP_GRACE = 5.0
KILLED_WAIT = 1.0  # then, cut short (a stdio server SIGKILLed at once), for it to end and be reaped
# an HTTP session's DELETE at a connection's end, which a server may never answer: a stop is done
# within its grace, and a link connecting again (a lost session, a secret stored) does not wait for good
DELETE_TIMEOUT = 3.0
GONE_WAIT = 2.0  # for the exit and stderr of a server whose stdout ended under a call: they say why
SESSION_GONE = (401, 403, 404)  # a revoked token, a session the server forgot: connect again (5xx too)
STATUS_HTTP = "http"
# chars of an error kept (its start says what failed; its end the fix, and the stderr tail of up to 2,000)
ERROR_HEAD, ERROR_TAIL = 1024, 3072


class ServerLink:
    """One configured server: its state for `scvctl status`, its tools, its calls."""

    def __init__(self, name: str, cfg: McpServerConfig, *, launch: Callable[[], Any],
                 on_tools: Callable[["ServerLink", list[ToolSpec], int], None]) -> None:
        self.name, self.cfg = name, cfg
        self.url = http_fields.shown_url(cfg.url) if cfg.url else None  # as printed: no key in its query
        self._launch = launch  # builds the StdioLaunch or HttpLaunch; may raise (a missing secret)
        self._on_tools = on_tools
        self.state = "starting"  # starting -> ready -> down (-> starting again) ; stopped at the end
        self._starting_at = time.monotonic()  # when it last became `starting`: a first start says how long
        self.stopped_why = "scvd is stopping"  # what a call cut off by stop() is told
        self._secrets: dict[str, str] = {}  # the values the current start read from the store, by key
        # literal credentials in its table: a server may echo them, an HTTP library print the url its own way
        self._literals = _literal_credentials(cfg)
        hide_in_logs(self._literals, f"mcp server {name}")  # httpx and the SDK at debug log urls and messages
        self._error: str | None = None
        self._said_refused = False  # the server's own words refused its secrets: `error` says how to heal it
        self.needs: tuple[str, ...] = ()  # the secrets it is down for want of (store_secret heals it)
        self.failures = 0
        self.retry_at: float | None = None
        self.session: _Session | None = None
        self._lost: asyncio.Event = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._http_status: int | None = None  # the last error status that answered a POST
        self._refused_posts = 0  # how many POSTs got an error status, ever
        self._proc: Any = None
        # the messages of the errors of code -32000 the current connection's server sent (stdio.py and
        # skim.py keep them): what tells its own answer from the SDK's word for a closed connection
        self._said_closed: Collection[str] = ()
        self._ready_at: float | None = None  # monotonic time this run became ready
        self._relist_task: asyncio.Task[None] | None = None  # lists the tools again after list_changed
        self._relist_due = False  # a list_changed came since the relist under way sent its tools/list
        self._wake = asyncio.Event()  # set: the backoff's wait ends now (a secret it needs was stored)
        self._again = False  # connect again at once once this connection ends (retry_now while up)
        self._launched_at: float | None = None  # monotonic time the current start read its secrets
        self._awaited = "initialize"  # what a start waits for: its message when that takes too long
        self._down_logged: float | None = None  # monotonic time of the last `is down` line at BACKOFF_MAX
        self._down_unlogged = 0  # failed restarts since that line
        self._skipped = Skipped(name)  # logs its stdout's lines that are not MCP's, a few at most

    @property
    def error(self) -> str | None:
        """Why it is down (or why the last start failed), with the secrets it was given hidden; and
        when its own words refused them, which they are and how to store them (seed 003)."""
        if self._said_refused and self._error:  # after the cut, which would take it in a long error
            return f"{self._error}; {spec.said_refused(self.name, self.needs, f'{spec.PREFIX}{self.name}')}"
        return self._error

    @error.setter
    def error(self, text: str | None) -> None:
        # a server's stderr, or an HTTP library's error, may quote a secret value (a header it refused),
        # hidden before the cut; and a server's words may be of any length (a 1 MB error answering
        # initialize): the error goes into status and every tools.list
        self._error = _shown(self._hide(text)) if text else text
        self._said_refused = False  # whether the new one's words refused them is _record's to say

    def _hide(self, text: str) -> str:
        """`text` with the secrets this start read, and the literal credentials of its table, left out."""
        if self.cfg.url and self.url != self.cfg.url:  # an HTTP library's error may quote the url whole
            text = text.replace(self.cfg.url, self.url or "")
        hidden = self._given()
        return redact(text, hidden) if hidden else text

    def _given(self) -> dict[str, str]:
        """What the current start was given that nothing may show: the secrets it read, by key, and the
        literal credentials of its table, by `url query NAME`, `header NAME` or `env NAME`."""
        return {**self._literals, **self._secrets} if self._literals else self._secrets

    # --- life ---------------------------------------------------------------------

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"mcp:{self.name}")

    async def stop(self, why: str | None = None) -> None:
        """Cancel the link and give its transport STOP_GRACE to close; then its stop is cut short
        (KILLED_WAIT more, for a SIGKILLed server to be reaped), and after that it is abandoned.
        `why` (a reload changed or removed its table) is what calls cut off by the stop are told."""
        self.state = "stopped"
        if why is not None:
            self.stopped_why = why
        task = self._task
        if task is None:
            return
        task.cancel()
        await asyncio.wait([task], timeout=STOP_GRACE)
        if not task.done():
            log.warning("mcp server %s did not close within %g s; abandoning its connection", self.name, STOP_GRACE)
            task.cancel()  # the first cancel's cleanup (the session DELETE) is what waits: cut it short
            await asyncio.wait([task], timeout=KILLED_WAIT)  # else a loop closed after the stop finds it pending
        task.add_done_callback(_quiet)

    async def _run(self) -> None:
        delay = BACKOFF_FIRST
        while True:
            self.state, self._lost, self._ready_at = "starting", asyncio.Event(), None
            self._starting_at = time.monotonic()
            # with the state: a start that has not read its secrets yet reads what is stored by now
            self._proc, self._http_status, self._launched_at, self._said_closed = None, None, None, ()
            try:
                await self._connect_once()
            except asyncio.CancelledError:
                raise
            except BaseException as exc:  # every failure of a server is reported, none ends the daemon
                self._record(exc)
            self.state, self.session = "down", None
            self.failures += 1
            if self._ready_at is not None and time.monotonic() - self._ready_at >= STABLE_UPTIME:
                delay = BACKOFF_FIRST  # it ran for a while: the next start is a fresh one
            if self._again:  # asked to connect again with a secret stored just now: no wait
                self._again, delay = False, BACKOFF_FIRST
                log.info("mcp server %s: connecting again with the secret stored just now", self.name)
                continue
            self.retry_at = time.time() + delay
            self._log_down(delay)
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), delay)
                delay = BACKOFF_FIRST  # woken for a reason: the next failure waits from the start
            except TimeoutError:
                delay = min(delay * 2, BACKOFF_MAX)

    def _log_down(self, delay: float) -> None:
        """`is down`, at each failure while the wait grows; at BACKOFF_MAX once per DOWN_LOG_SECONDS, with
        how many restarts failed meanwhile: a server down for days wrote a line a minute (`scvctl status`
        has its latest error)."""
        now = time.monotonic()
        if delay < BACKOFF_MAX:
            self._down_logged = None
        elif self._down_logged is not None and now < self._down_logged + DOWN_LOG_SECONDS:
            self._down_unlogged += 1
            return
        else:
            self._down_logged = now
        more = f" ({self._down_unlogged} more failed restarts since the last line)" if self._down_unlogged else ""
        self._down_unlogged = 0
        log.warning("mcp server %s is down: %s; restarting in %g s%s", self.name, self.error, delay, more)

    def started_since(self, stored_at: float) -> bool:
        """A start that read the secrets at or after `stored_at` has ended up ready or down."""
        if self.state == "stopped":
            return True
        return self.state in ("ready", "down") and self._launched_at is not None and self._launched_at >= stored_at

    def retry_now(self, stored_at: float) -> None:
        """Connect again at once with the secrets as stored at `stored_at` (monotonic): a down link
        ends its backoff; a starting or ready one that read them before then (it holds the old
        value) closes its connection and starts again. A start yet to read them (`_launched_at`
        None) will read the new value: it goes on."""
        if self.state == "down":
            self._wake.set()
        elif self.state in ("starting", "ready") and self._launched_at is not None and self._launched_at < stored_at:
            self._again = True
            self._lose()

    def _lose(self) -> None:
        """The connection is gone or to be dropped: no longer `ready` while it closes (a status,
        or a call, in that moment took the closing connection for a working one), but `starting`
        again, until its end says whether it is down and why."""
        self._lost.set()
        if self.state == "ready":
            self.state, self._starting_at = "starting", time.monotonic()

    async def _connect_once(self) -> None:
        async with contextlib.AsyncExitStack() as stack:
            read, write = await self._transport(stack)
            session = _Session(
                read, write, message_handler=self._on_message,
                client_info=types.Implementation(name="scvd", version=__version__),
            )
            await stack.enter_async_context(session)
            async with asyncio.timeout(CONNECT_TIMEOUT):
                self._awaited = "initialize"
                await session.initialize()
                self._awaited = "its tools/list"  # a slow one is not a server that does not speak MCP
                self._relist_due = False  # a list_changed from here on is relisted once ready
                tools, listed = await self._list(session)
            self.session, self.state, self.error, self.retry_at, self.needs = session, "ready", None, None, ()
            self._ready_at = time.monotonic()
            log.info("mcp server %s ready: %d tool(s)", self.name, listed)
            self._on_tools(self, tools, listed)
            if self._relist_due:  # it came while that list ran, before there was a session to relist on
                self._relist_task = asyncio.get_running_loop().create_task(self._relist())
            exited = self._proc.exited if self._proc is not None else None
            waits = [asyncio.ensure_future(self._lost.wait())] + ([exited] if exited else [])
            try:
                await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            finally:
                waits[0].cancel()
            died = exited is not None and exited.done()
            self.session = None
        # once the transport closed: a stdio server's exit is known and its last stderr read by then;
        # one scvd drops to connect again (a secret stored since) is stopped by that close, not at fault
        if self._again and not died:
            self.error = "scvd connects again with the secret stored since"
        else:  # it ended, or a call saw its connection break
            self.error = self._why_lost()
            self._said_refused = self._says_refused()  # a token revoked while it ran: it may say so as it exits
            self.needs = self._needs() if self._said_refused else ()
        raise _Lost(self.error)

    async def _transport(self, stack: contextlib.AsyncExitStack) -> tuple[Any, Any]:
        def launch() -> Any:
            self._launched_at = time.monotonic()  # on the thread, as the read begins: what it reads
            return self._launch()  # holds every secret stored before this moment

        target = await off_loop(launch)  # the secret store may talk to a keyring, which may hang
        self._secrets = _secret_values(self.cfg, target)
        if isinstance(target, spec.StdioLaunch):
            from .stdio import open_stdio

            read, write, self._proc = await stack.enter_async_context(open_stdio(target))
            self._said_closed = self._proc.said_closed_code
            return read, write
        from mcp.client.streamable_http import streamable_http_client
        from mcp.shared._httpx_utils import MCP_DEFAULT_TIMEOUT, create_mcp_http_client

        self._proc, self._http_status = None, None
        # no read timeout: a call's answer may take as long as its dispatch timeout (15 min by
        # default), which bounds it; the SDK's 300 s cut longer calls off and took the server down
        client = create_mcp_http_client(headers=target.headers, timeout=httpx2.Timeout(MCP_DEFAULT_TIMEOUT, read=None))
        self._said_closed = said = deque(maxlen=CLOSED_CODE_KEPT)
        # the skim reads each body as stdio.py reads a server's lines, its -32000 errors' words kept too
        client.event_hooks["response"] += [self._on_response, functools.partial(skim_response, said=said.append)]
        await stack.enter_async_context(client)
        read, write = await stack.enter_async_context(
            streamable_http_client(target.url, http_client=client, max_sse_event_size=MESSAGE_LIMIT))
        # unwound just before the transport, whose exit sends the session DELETE (no read timeout else)
        stack.callback(setattr, client, "timeout", httpx2.Timeout(DELETE_TIMEOUT))
        return read, write

    async def _on_response(self, response: Any) -> None:
        # the optional GET stream (405 from many servers) and the session DELETE are not the connection;
        # once ready, a 400 or 422 (a JSON-RPC error in the body: bad params) fails that call only
        status = response.status_code
        if status >= 400 and response.request.method == "POST" and (self.state != "ready" or ends_session(status)):
            self._http_status = status
            self._refused_posts += 1

    def _why_lost(self, proc: Any = None, hide: Callable[[str], str] | None = None) -> str:
        proc = proc or self._proc
        if broken := _broken(proc):
            return broken
        if proc is not None and proc.exited.done():
            code = proc.exited.result()
            how = f"was killed by signal {-code}" if code < 0 else f"exited with status {code}"
            return self._with_tail(f"the server process {how}", proc, hide)
        if self._http_status is not None:
            return self._refused_down() or f"HTTP status {self._http_status} from {self.url}"
        return "the connection was lost"

    def _refused_down(self) -> str | None:
        """Why a server refused for its secrets is down, naming them: store_secret is told the server's
        mcp__NAME, as its tools may not be listed (one never up has none); storing one reconnects it."""
        return self._refusal(f"{spec.PREFIX}{self.name}")

    def _with_tail(self, message: str, proc: Any, hide: Callable[[str], str] | None = None) -> str:
        hide = hide or self._hide
        tail = proc.stderr_tail(hide).strip()  # the secrets out before each cut
        if tail:
            message = f"{message}; stderr: {tail[-1000:]}"
        # a command that prints its usage (or a banner) on stdout said nothing else
        junk = proc.not_mcp_tail(hide).strip()
        if junk:
            message = f"{message}; its stdout had lines that are not MCP's JSON-RPC: {junk[-1000:]}"
        hint = spec.env_hint(self.name, self.cfg, _said(proc))  # `X not set`: its secret under another name?
        return f"{message}; {hint}" if hint else message

    def _record(self, exc: BaseException) -> None:
        if isinstance(exc, _Lost):
            return
        self.error = self._failed(exc)  # once: each set cuts it, and a second cut would say less
        self._said_refused = self._says_refused(exc)
        self.needs = self._needs(exc)

    def _failed(self, exc: BaseException) -> str:
        """Why the start failed with `exc`."""
        if broken := _broken(self._proc):  # scvd ended it: not the server's exit
            error = broken
        elif refused := self._refused_down():  # the SDK's "Server returned an error response" named no key
            return refused
        elif isinstance(exc, ToolError):
            error = f"{exc.kind}: {exc.message}"
        elif isinstance(exc, ScvError):
            error = exc.message
        elif _any(exc, lambda e: isinstance(e, TimeoutError)):  # it may have exited since: scvd closed its stdin
            error = f"no answer to {self._awaited} within {CONNECT_TIMEOUT:g} s"
        elif self._proc is not None and self._proc.exited.done() and _any(exc, lambda e: _broke(e, self._said_closed)):
            return self._why_lost()  # it died while starting: its exit and stderr say why
        elif self._http_status is None and (answer := self._answer(exc)):
            error = self._answered(answer)  # the bare message ("Method not found") said not whose
        else:  # scvd gave up on it (a tools/list it cannot read): that is why, not the exit that followed
            error = _describe(exc, self.url)
        if self._proc is not None:
            error = self._with_tail(error, self._proc)
        if self._http_status is not None and "HTTP status" not in error:
            error = f"HTTP status {self._http_status} from {self.url}: {error}"
        return error

    def _answer(self, exc: BaseException) -> MCPError | None:
        """The JSON-RPC error in `exc` that answered scvd's request, or None (the connection closed)."""
        return _first(exc, lambda e: isinstance(e, MCPError) and not _closed(e, self._said_closed))

    def _answered(self, exc: MCPError) -> str:
        asked = self._awaited.removeprefix("its ")
        said = f"its {asked} was answered with an error: {exc.error.message} (code {exc.error.code})"
        if reads_refused(exc.error.message):  # an MCP server that runs: its credential is the fix (`error` says which)
            return said
        if asked != "initialize":
            fix = "the server's author can tell why"
        elif self.cfg.url:
            fix = f"check that {self.url} is the server's MCP endpoint"
        else:  # /bin/cat, say, echoes scvd's own request, which scvd answers "Method not found"
            fix = "check that `command` and `args` start an MCP server speaking JSON-RPC on its stdin and stdout"
        return f"{said}; {fix}"

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            # one relist at a time, and one more at most once it is done: a server sending thousands
            # of notifications made scvd send as many tools/list
            self._relist_due = True
            if self.session is not None and (self._relist_task is None or self._relist_task.done()):
                self._relist_task = asyncio.get_running_loop().create_task(self._relist())
        elif isinstance(message, NotMcp):
            self._skipped.heard(message, self._hide)
        elif isinstance(message, Exception) and self._http_status is not None:
            self._lose()

    async def _relist(self) -> None:
        """List the tools again, for as long as a list_changed came since the last tools/list was sent."""
        while self._relist_due and (session := self.session) is not None:
            self._relist_due = False
            try:
                async with asyncio.timeout(CONNECT_TIMEOUT):  # as the first list: a server that never answers
                    tools, listed = await self._list(session)  # must not hold this task for good
            except TimeoutError:
                log.warning("mcp server %s: no answer to tools/list after list_changed within %g s; its tools stay "
                            "as they were", self.name, CONNECT_TIMEOUT)
                continue
            except Exception as exc:
                log.warning("mcp server %s: tools/list after list_changed failed: %s", self.name,
                            _shown(self._hide(_describe(exc))))  # the server's words, at each list_changed
                continue
            if self.session is session:
                self._on_tools(self, tools, listed)

    async def _list(self, session: ClientSession) -> tuple[list[ToolSpec], int]:
        """The first max_tools tools the server lists, and how many it lists in all."""
        tools: list[ToolSpec] = []
        cursor, seen, listed = None, set(), 0
        hidden = self._given()  # a description or schema may quote a secret the server was given
        while True:
            params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
            page = await session.list_tools(params=params)
            tools += [_spec(t, hidden) for t in page.tools[:self.cfg.max_tools - len(tools)]]
            listed += len(page.tools) + _omitted(page)
            cursor = page.next_cursor
            if not cursor:
                return tools, listed
            if cursor in seen:  # the same pages again, for ever (and the list growing with them)
                raise ValueError(f"its tools/list repeats the cursor {cursor[:80]!r} after {listed} tools; "
                                 "ask the server's author to fix its pagination")
            seen.add(cursor)

    # --- calls ----------------------------------------------------------------------

    def usable(self, tool: str) -> _Session:
        """The session a call of `tool` goes through now, or what the call fails with: also asked
        before approval, so that nobody approves a call that cannot run."""
        session = self.session
        if self.state == "stopped":  # not down: a reload replaced or removed it, or scvd stops
            raise Unavailable(f"mcp server {self.name} is stopped: {self.stopped_why}")
        if session is None or self.state != "ready":
            if self.needs and self.state == "down":  # a secret heals it (a wrong value typed): say which
                # (while `starting` again, with a new value perhaps, "try again in a moment" is right)
                raise self._needs_secret(tool)
            raise Unavailable(self.down_message())
        return session

    async def call(self, tool: str, arguments: dict[str, Any],
                   progress: Callable[[float, float | None, str | None], Awaitable[None]]) -> CallOutcome:
        session = self.usable(tool)
        refused = self._refused_posts
        # this call's server's: a restart may begin while it ends
        secrets, proc, said_closed = self._given(), self._proc, self._said_closed

        def hide(text: str) -> str:
            # first the secrets this call's server read: a secret stored since may have restarted it with others
            return self._hide(redact(text, secrets))

        async def hidden(done: float, total: float | None, message: str | None) -> None:
            # a progress line may quote the token as a result may ("authenticating with sk-...")
            await progress(done, total, redact(message, secrets) if message and secrets else message)

        try:
            result = await session.call_tool(tool, arguments, progress_callback=hidden)
        except MCPError as exc:
            if self.state == "stopped":  # "scvd restarts it" was wrong for a server a reload removed
                raise Unavailable(self._stopped(tool)) from None
            if exc.error.code == CONNECTION_CLOSED and (broken := _broken(proc)):
                self._lose()  # scvd ended it: the call's answer was too large to read
                # the message may have been another call's answer, or a notification: every call in flight ends
                raise LimitExceeded(f"mcp server {self.name}: {tool}: {broken}, and restarts the "
                                    "server: if this call asked for a lot, ask the tool for less") from None
            if _closed(exc, said_closed):  # the server went away under the call
                self._lose()
                if proc is not None:  # its stdout ends first: what it said as it died comes after
                    await proc.settled(GONE_WAIT)
                said = (f"mcp server {self.name} went away during the call ({tool}): {self._why_lost(proc, hide)}; "
                        "scvd restarts it (see `scvctl status`)")
                # a token revoked while it ran: it may say so as it exits
                raise spec.refused(self.name, self.cfg, tool, said, _said(proc)) or Unavailable(said) from None
            if self._refused_posts != refused:  # an HTTP error status (a lost session, a revoked token, 5xx)
                self._lose()
                self._raise_if_credential_refused(tool)
                # not the SDK's stand-in words ("Server returned an error response") as the call's `failed`
                raise Unavailable(self._refused_call(tool)) from None
            hidden = hide(exc.error.message)
            said = f"mcp server {self.name}: {tool}: {_shown(hidden)}"  # it may quote what it was sent, at any length
            raise spec.refused(self.name, self.cfg, tool, said, hidden) or _call_error(said, exc.error.code) from None
        except (asyncio.CancelledError, ScvError):
            raise
        except Exception as exc:  # the connection broke under the call, or the result was bad
            if self.state == "stopped":
                raise Unavailable(self._stopped(tool)) from None
            if self._refused_posts == refused and _bad_result(exc):  # the connection is fine: keep it
                why = hide(_describe(exc))
                raise Failed(f"mcp server {self.name}: {tool}: its result was not usable ({why}); "
                             "report it to the server's author") from None
            self._lose()
            if self._refused_posts != refused:
                self._raise_if_credential_refused(tool)
                raise Unavailable(self._refused_call(tool)) from None
            why = hide(_describe(exc))
            raise Unavailable(f"mcp server {self.name} failed during the call: {why}") from None
        size = session.measured(result)  # before the walks below: 10 MB held the loop seconds
        dumped = well_formed(result.model_dump(mode="json", exclude_none=True))
        # capped before the secrets are looked for: a 60 MiB text is not walked whole for 1 MiB shown
        text, items = render(dumped.get("content") or [])
        structured = dumped.get("structured_content")
        if secrets:  # a server may quote the token its start was given, in an error or a result
            text, items = redact_text(text, secrets), redact_tree(items, secrets)  # one the cap cut too
            if structured is not None:  # `[secret KEY]` is not its value's length
                structured = redact_tree(structured, secrets)
                size = json_size(structured)
        return CallOutcome(is_error=bool(getattr(result, "is_error", False)), text=text, items=items,
                           structured=structured, structured_size=size)

    def _needs(self, exc: BaseException | None = None) -> tuple[str, ...]:
        """The secrets a failed start (or a stdio server's exit) wants: one not set, the headers' when they
        were refused, or all a stdio server is given when its words refused one."""
        if isinstance(exc, CredentialMissing):
            return exc.keys
        if self._http_status in (401, 403):
            return tuple(self._sent()[0])
        if self._said_refused:  # its env's, refused
            return tuple(sorted(server_secrets(self.cfg)))
        return ()

    def _says_refused(self, exc: BaseException | None = None) -> bool:
        """Whether a stdio server given secrets said a credential was refused (reads_refused) as its start
        failed (`exc`) or it exited: in _said(), or answering initialize."""
        if self._proc is None or not server_secrets(self.cfg):
            return False
        answer = self._answer(exc) if exc is not None else None
        return reads_refused(f"{_said(self._proc)}\n{answer.error.message if answer else ''}")

    def _sent(self) -> tuple[list[str], str]:
        """The secrets an HTTP server is sent, which a 401 or 403 refused, and where they are sent."""
        keys, where = [], []
        for values, place in ((self.cfg.headers, "headers"), (self.cfg.query, "url's query")):
            if found := [v.secret for v in values.values() if isinstance(v, SecretRef)]:
                keys += found
                where.append(place)
        return keys, " and ".join(where)

    def _raise_if_credential_refused(self, tool: str) -> None:
        """A 401 or 403 to a server whose headers carry secrets: credential_missing naming them, so an
        agent can heal it (seed 003): store_secret, then the call again, on the reconnected server."""
        keys = self._sent()[0]
        if (refusal := self._refusal(spec.tool_name(self.name, tool))) is None:
            return
        raise CredentialMissing(
            f"mcp server {self.name}: {tool}: {refusal}, then call the tool again (scvd reconnects with it)",
            hint=f"scvctl secrets set {keys[0] if len(keys) == 1 else 'KEY'}") from None

    def _refused_call(self, tool: str) -> str:
        """A call whose POST was answered with a status that ends the connection (ends_session), not a
        credential refused: scvd connects again, and the call may be made again once it is back."""
        status = f"HTTP status {self._http_status}" if self._http_status is not None else "an HTTP error status"
        return (f"mcp server {self.name}: {tool}: {status} from {self.url}; scvd connects to it again "
                "(see `scvctl status`): call again once it is back")

    def _refusal(self, tool: str) -> str | None:
        """A 401 or 403 from a server sent secrets: which it refused, and how to store a new value (with
        store_secret for `tool`, as scvd names it); None for any other status, or a server sent none."""
        keys, where = self._sent()
        if self._http_status not in (401, 403) or not keys:
            return None
        return (f"HTTP status {self._http_status} from {self.url}: the server refused {spec.secrets_named(keys)} "
                f"sent in its {where}; store a new value with store_secret {spec.store_how(keys, tool)}")

    def _needs_secret(self, tool: str) -> CredentialMissing:
        keys, named = self.needs, spec.tool_name(self.name, tool)
        refusal = (f"{self._error}; {spec.said_refused(self.name, keys, named)}" if self._said_refused
                   else self._refusal(named))
        if refusal:  # its down reason says how already: for this call's tool, once
            return CredentialMissing(f"mcp server {self.name} is down: {refusal}, then call the tool again",
                                     hint=f"scvctl secrets set {keys[0]}", keys=keys)
        down, unset = self.down_message(), spec.store_unset(keys[0], f"{spec.PREFIX}{self.name}")
        if unset in down:  # a secret not set: spec's reason says how already, for the server; here for this call's tool
            return CredentialMissing(f"{down.replace(unset, spec.store_unset(keys[0], named))}, then call the tool "
                                     "again", hint=f"scvctl secrets set {keys[0]}", keys=keys)
        which = f"key {keys[0]!r}" if len(keys) == 1 else f"the key of the one it names ({', '.join(keys)})"
        return CredentialMissing(
            f"{self.down_message()}; it needs {', '.join(keys)}: store a new value with store_secret "
            f"({which}, tool {named!r}) or `scvctl secrets set {keys[0]}`, then call the tool again",
            hint=f"scvctl secrets set {keys[0]}", keys=keys)

    def _stopped(self, tool: str) -> str:
        return f"mcp server {self.name} was stopped during the call ({tool}): {self.stopped_why}"

    def down_message(self) -> str:
        why = f": {self.error}" if self.error else ""
        if self.state == "starting":
            if not why:  # a first start (or one after a clean end): how long, and what it waits for
                why = (f" (since {time.monotonic() - self._starting_at:.0f} s; scvd waits up to "
                       f"{CONNECT_TIMEOUT:g} s for its answer to {self._awaited.removeprefix('its ')})")
            return f"mcp server {self.name} is starting{why}; try again in a moment"
        when = ""
        if self.retry_at is not None:
            when = f"; scvd restarts it in {max(0.0, self.retry_at - time.time()):.0f} s"
        return f"mcp server {self.name} is down{why}{when} (see `scvctl status`)"


def _shown(text: str) -> str:
    """A server's words (the secrets out), as scvd shows and logs them: escaped, and cut in the middle."""
    return printable_cut(text, ERROR_HEAD, ERROR_TAIL)


def _said(proc: Any) -> str:
    """What a stdio server said besides MCP (its secrets not yet hidden): the tail of its stderr and
    its stdout's lines that are not MCP's; nothing for an HTTP server (None)."""
    return f"{proc.stderr_tail()}\n{proc.not_mcp_tail()}" if proc is not None else ""


def _broken(proc: Any) -> str | None:
    """Why scvd ended a stdio server's connection (a message above its line limit), or None."""
    return proc.broken if proc is not None else None


def _quiet(task: asyncio.Task[None]) -> None:
    """Retrieve a stopped link's outcome: how its connection ended no longer matters."""
    if not task.cancelled():
        task.exception()


class _Session(ClientSession):
    _checked: tuple[Any, int | None] | None = None  # the last result validate_tool_result measured, and its size

    async def validate_tool_result(self, name: str, result: types.CallToolResult) -> None:
        size = _measure(result)
        self._checked = (result, size)
        # what scvd leaves out is not judged against the tool's outputSchema (a walk of it all, on the
        # loop), nor refused as missing
        if result.structured_content is not None or size is None:
            await super().validate_tool_result(name, result)

    def measured(self, result: Any) -> int | None:
        """_measure(result), done once: call_tool's check of a result that is no error did it (up to
        1 MiB of JSON encoded), and returned that result without a pause (no other call's in between)."""
        checked, self._checked = self._checked, None
        return checked[1] if checked is not None and checked[0] is result else _measure(result)


def _measure(result: Any) -> int | None:
    """The bytes of `result`'s structuredContent as compact JSON, or None when it has none. One that
    tool.omitted leaves out is taken out of `result` (if skim.py did not take it out before the SDK
    read it), its size under OMITTED_KEY in the _meta."""
    meta = getattr(result, "meta", None) or {}
    structured = getattr(result, "structured_content", None)
    if structured is None:
        size = meta.get(OMITTED_KEY)
        return size if isinstance(size, int) else None
    size = json_size(structured)
    if (marked := omitted(size, meta)) is not None:
        result.structured_content, result.meta = None, marked
    return size


class _Lost(Exception):
    """The connection ended after it was up; `error` already says why."""


def _call_error(message: str, code: int) -> ToolError:
    """A JSON-RPC error answering one call: that call's failure, the connection stays."""
    if code == TOO_LARGE:
        return LimitExceeded(message)
    return InvalidArguments(message) if code == INVALID_PARAMS else Failed(message)


def _omitted(page: Any) -> int:
    """How many tools skim.py cut off the end of a tools/list answer before the SDK parsed it."""
    left = (page.meta or {}).get(TOOLS_OMITTED_KEY)
    return left if isinstance(left, int) else 0


def _spec(tool: Any, hidden: dict[str, str]) -> ToolSpec:
    """A listed tool as scvd keeps it: its description and schema, which reach hosts, `scvctl tools` and a
    chat's model, without the secrets the server was given (`hidden`); its name as it is (calls use it)."""
    notes = tool.annotations
    description = tool.description or tool.title or tool.name
    schema = tool.input_schema
    if hidden:
        description, schema = redact(description, hidden), redact_tree(schema, hidden)
    return ToolSpec(
        name=tool.name,
        description=description,
        input_schema=schema,
        read_only_hint=notes.read_only_hint if notes else None,
        destructive_hint=notes.destructive_hint if notes else None,
    )


def _literal_credentials(cfg: McpServerConfig) -> dict[str, str]:
    """The literal values of a server's table that read like a credential (scvd/secret_like.py, the rule a
    chat provider's headers and query obey), by a name for `[secret ...]`: its url's query (in `url`, or
    its `query` table), `headers` and `env`. The url as httpx prints it (`:443` dropped, the host
    lower-cased, a space as %20) is not the one configured, so replacing the url whole missed them."""
    pairs = []
    if cfg.url:
        try:
            pairs = parse_qsl(urlsplit(cfg.url).query)
        except ValueError:
            pass
        pairs += [(name, value) for name, value in cfg.query.items() if isinstance(value, str)]
    named = [(f"url query {name}", name, value) for name, value in pairs]
    for label, table in (("header", cfg.headers), ("env", cfg.env)):
        named += [(f"{label} {name}", name, value) for name, value in table.items() if isinstance(value, str)]
    return picked(named)


def _secret_values(cfg: McpServerConfig, target: Any) -> dict[str, str]:
    """The values a start read from the secret store (its env, headers or query), by key; and for a
    stdio server the password in an allowed proxy URL it was given, as script tools and agents hide it."""
    if isinstance(target, spec.StdioLaunch):
        read = [(target.env, cfg.env)]
    else:
        read = [(target.headers, cfg.headers), (target.query, cfg.query)]
    stored = {ref.secret: given[name] for given, refs in read
              for name, ref in refs.items() if isinstance(ref, SecretRef) and name in given}
    if isinstance(target, spec.StdioLaunch):
        return {**passenv.credentials(target.env, ()), **stored}
    return stored


def _any(exc: BaseException, test: Any) -> bool:
    """Whether `exc`, or one in it (the SDK's task groups wrap what they raise), passes `test`."""
    return _first(exc, test) is not None


def _first(exc: BaseException, test: Any) -> Any:
    """The first exception in `exc` (or `exc` itself) that passes `test`, or None."""
    if isinstance(exc, BaseExceptionGroup):
        return next((found for e in exc.exceptions if (found := _first(e, test)) is not None), None)
    return exc if test(exc) else None


def _closed(exc: MCPError, said: Collection[str]) -> bool:
    """Whether `exc` is the SDK's word for the connection closing, not the server's own error with its code
    (-32000, which JSON-RPC leaves to servers: one answers initialize `invalid api key` so, and exits; one
    answers a call it rate-limits so), whose messages are `said`."""
    return exc.error.code == CONNECTION_CLOSED and exc.error.message not in said


def _bad_result(exc: BaseException) -> bool:
    """Whether the SDK refused a result it read whole (against the tool's outputSchema, or of a kind
    scvd did not ask for): the server's bug, not a broken connection."""
    import pydantic
    from mcp.client.extension import UnexpectedClaimedResult

    if isinstance(exc, (pydantic.ValidationError, UnexpectedClaimedResult)):
        return True
    # ClientSession.validate_tool_result's and call_tool's own words; any other RuntimeError may be a break
    return isinstance(exc, RuntimeError) and str(exc).startswith(_BAD_RESULT)


_BAD_RESULT = ("Invalid structured content", "Invalid schema for tool", "Server returned InputRequiredResult",
               "Tool ")  # "Tool X has an output schema but did not return structured content"


def _broke(exc: BaseException, said: Collection[str]) -> bool:
    """Whether `exc` is the connection breaking (the server went away), not scvd refusing what it sent;
    `said`: the messages of the server's own errors of code -32000."""
    import anyio

    if isinstance(exc, MCPError):
        return _closed(exc, said)
    return isinstance(exc, (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError))


def _describe(exc: BaseException, url: str | None = None) -> str:
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_describe(e, url) for e in exc.exceptions)
    if isinstance(exc, httpx2.ConnectError):
        return f"cannot connect to {url}: {exc}"
    if isinstance(exc, MCPError):
        return exc.error.message
    if isinstance(exc, FileNotFoundError | PermissionError):
        return f"cannot start the server: {exc.strerror}: {exc.filename}"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def ends_session(status: int) -> bool:
    """An HTTP status on a call's POST that means the connection must start over (and may not come back)."""
    return status in SESSION_GONE or status >= 500
