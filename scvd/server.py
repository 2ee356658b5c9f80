"""The socket server: connections, handshake, dispatch of frames to the core. No tool names here.

Lifecycle: `serve()` = `startup()` -> wait for the stop event -> `shutdown()`.
Signal handlers only set events; SIGHUP reloads the configuration for new
sessions; a second SIGINT forces the exit.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import os
import signal
import socket
import time
from typing import TYPE_CHECKING, Any, Awaitable, Callable

from . import __version__, awake, errors, guardian, heap, limits, notify, protocol as p, session_listing, session_open
from .adapters.setup_keys import AGENT as SETUP_AGENT, SetupKeys
from .audit import AuditLog
from .approvals import Approval, ApprovalGate, approval_event, policy_note, spawned_by_daemon
from .call_budget import FLOOR, SHORT, cost as call_cost
from .calls import CallRegistry
from .chat.expiry import Expiry
from .chat.pipeline import remedy, screen
from .config import Loaded
from .client_protocol import GOES_ON, NOTHING_STARTED, STARTED, ClientProtocol
from .connection import Connection
from .instance import Claim, claim, remove_socket, socket_name
from .listener import Listener
from .mcp.manager import McpServers
from .mcp_host.service import McpHosts
from .own_places import SERVICE as OWN_PLACES, TOOL, of, own_places
from .paths import Paths, unopenable
from .process import kill_every_run, set_child_subreaper
from .reload import Reloader
from .secret_names import PROVIDER_KEYS, SERVICE as SECRET_NAMES, keys_by_all, named_by_all
from .secret_requests import SecretRequests
from .secrets import SecretStore
from .sessions import Owner, Session
from .socket_watch import for_socket as watch_for
from .tools import build_registry
from .tool_listing import Listings, fit_lint
from .tools.contract import Registry

if TYPE_CHECKING:
    from .chat.service import ChatService

log = logging.getLogger("scvd.server")
# as scvd stops: how long its closed connections' peers have to read their last answers, at least (the
# grace's rest when more is left), and how often it looks
DRAIN_SECONDS = 1.0
DRAIN_POLL = 0.01

def error_frame(exc: BaseException, request_id: Any = None) -> p.Error:
    """The `error` frame a peer reads for `exc` (fatal when the exception is: the connection closes)."""
    return p.Error(code=errors.error_code(exc), message=errors.public_message(exc), id=request_id,
                   fatal=getattr(exc, "fatal", False), kind=errors.error_kind(exc), reason=errors.error_reason(exc))


class Daemon:
    """The running service: configuration, registry, sessions, approvals, connections."""

    def __init__(self, paths: Paths, loaded: Loaded, notifier: notify.Notifier | None = None,
                 *, extra_tools: list[Any] | None = None, install_signals: bool = True,
                 registry: Registry | None = None, claim: Claim | None = None) -> None:
        self.paths = paths
        self.loaded = loaded
        self.extra_tools = list(extra_tools or [])  # embedders and tests add their own tools
        self.install_signals = install_signals  # only the main thread may install handlers
        # the caller's, when it already built one from the same configuration (a start builds one, not two)
        self.registry: Registry = registry or build_registry(loaded.config, paths, self.extra_tools)
        self.listings = Listings()  # tools.list's answers
        approvals = loaded.config.approvals
        self.gate = ApprovalGate(approvals.timeout_seconds, self._on_approval, approvals.max_pending,
                                 loaded.config.server.server_frame_bytes)
        self.secrets = SecretStore(paths.secrets_file)  # blocking methods: call them in a thread
        self.setup_keys = SetupKeys(paths.adapters_dir)  # the variables chat's provider `codex` sends
        self.secret_requests = SecretRequests(
            self.secrets, approvers=self._secret_answerers, send=self.send_event,
            timeout=lambda: self.config.approvals.timeout_seconds, audit=self._audit_line,
            on_stored=lambda key, stored_at: self.mcp.secret_stored(key, stored_at))
        # what every session's tools reach through ctx.services, beside what the tools prepare
        self.services: dict[str, Any] = {"secrets": self.secrets, "secret_requests": self.secret_requests,
                                         SECRET_NAMES: self.secret_names, PROVIDER_KEYS: self.provider_keys}
        self.sandbox: Any = None
        self.sandbox_verdict = "off"
        # host_places.places(): whose files run outside any sandbox later; a write there always asks
        self.host: frozenset[Any] = frozenset()
        self.audit: Any = None
        self.notifier = notifier or notify.Notifier({})
        self.connections: set[Connection] = set()
        self.sessions: dict[str, Session] = {}
        self._opening: set[Session] = set()  # session.open requests between their budget check and their session
        self._follow_tools()  # scvd's own places, in services: a reload may load tools from other folders
        self.calls = CallRegistry(self)
        # client_protocol's, once a batch's answers went out (frames_handled held them): the registry's own
        self.answers_written = self.calls.books_after_answers
        self._limit_calls(loaded.config)
        self.started = awake.clock()  # for uptime: a step of the wall clock (NTP, `date -s`) is no time up
        self.stop_event = asyncio.Event()
        self._stopped_by = ""  # what asked the stop first (SIGINT: a second one exits at once)
        self.force_exit = False
        self._listener: Listener | None = None
        self._socket_watch: asyncio.Future[Any] | None = None  # socket_watch.py's, while it listens
        self._claim = claim  # the lock and socket cli.run took before READY=1, else taken in _start
        self._lock_fd: int | None = claim.lock_fd if claim else None
        self._owns_socket = claim.owns_socket if claim else False
        self._socket_id = claim.socket_id if claim else None
        self._last_status = ""
        self._status_soon: asyncio.TimerHandle | None = None
        self.heap_trim = heap.WhenQuiet(lambda: bool(self.calls) or (self._chat is not None and self._chat.busy()))
        self.listening_on = str(paths.socket)
        self._tasks: set[asyncio.Task[Any]] = set()
        self.budget = limits.FdBudget(limit=1024, base=0)  # measured at start, once the listener is open
        self._closing = 0  # connections that ended their stream, open until their cancelled calls say so
        self._refusals = limits.RefusalLog()
        self._chat: ChatService | None = None  # made by the first chat request (the property `chat`)
        self.expiry = Expiry(paths.chat_dir, lambda: self.config.chat.transcript_days,
                             lambda: self._chat.in_use() if self._chat is not None else set())
        self._asides: dict[Connection, set[asyncio.Future[Any]]] = {}  # requests answered out of order
        self._unanswered: dict[asyncio.Future[Any], tuple[Connection, Any]] = {}  # handlers that wait: a stop answers them
        # a call that carries a turn id (a chat's, or a client's own) is refused when nobody could decide it
        self.gate.screen = lambda owner, info: screen(self, owner, info)
        self.mcp = McpServers(self)  # imports no MCP SDK until a server is configured
        self.services["mcp_servers"] = self.mcp  # store_secret tells its agent how they came up
        self.mcp_hosts = McpHosts(self)  # MCP hosts whose stdio `scvctl mcp` handed over
        # neither a turn's model nor an MCP host can send call.cancel: each is told what it can do instead
        self.gate.remedy = lambda info, full: remedy(self, info, full) or self.mcp_hosts.remedy(info, full)
        self.reloader = Reloader(self)  # SIGHUP's
        # a plain function answers in the turn its frame came; an async one runs as a task (client_protocol);
        # None: it answers aside, while the connection's later frames are handled
        self._handlers: dict[type, Callable[[Connection, Any], p.Frame | Awaitable[p.Frame] | None]] = {
            p.Ping: self.on_ping,
            p.Status: self.on_status,
            p.SessionOpen: self.on_session_open,
            p.SessionClose: self.on_session_close,
            p.SessionsList: self.on_sessions_list,
            p.ToolsList: self.on_tools_list,
            p.Call: self.on_call,
            p.CallCancel: self.on_call_cancel,
            p.ApprovalsWatch: self.on_approvals_watch,
            p.ApprovalsList: self.on_approvals_list,
            p.ApprovalDecide: self.on_approval_decide,
            p.SecretProvide: self.on_secret_provide,
            p.SecretDecline: self.on_secret_decline,
            p.AgentsSpec: self.on_agents_spec,
            p.AgentsImport: self.on_agents_import,
            p.ChatOpen: self.on_chat_open,
            p.TurnStart: self._to_chat(lambda chat: chat.start_turn),
            p.TurnCancel: self._to_chat(lambda chat: chat.cancel_turn),
            p.ChatHistory: self._to_chat(lambda chat: chat.history),
            p.ChatClear: self._to_chat(lambda chat: chat.clear),
            p.QuestionAnswer: self._to_chat(lambda chat: chat.answer),
            p.McpAttach: self.mcp_hosts.attach,
        }

    @property
    def config(self) -> Any:
        return self.loaded.config

    @property
    def reload_error(self) -> str:
        return self.reloader.error

    @property
    def chat(self) -> ChatService | None:
        """The model loop's service, once a chat request has made it (chat_service())."""
        return self._chat

    async def chat_service(self) -> ChatService:
        """The model loop's service, made by the first chat request: a daemon nobody chats with does
        without its modules. They are imported on a thread (50-120 ms on the loop held every client)."""
        if self._chat is None:
            service = await asyncio.to_thread(importlib.import_module, f"{__package__}.chat.service")
            if self._chat is None:  # not made by another chat request meanwhile
                self._chat = service.ChatService(self)
                if self.stop_event.is_set():  # made while scvd stops: it takes no turn either
                    self._chat.stop()
        return self._chat

    def _to_chat(self, method: Callable[[ChatService], Callable[[Connection, Any], Awaitable[p.Frame]]]
                 ) -> Callable[[Connection, Any], Awaitable[p.Frame]]:
        """The handler of a chat request: the chat service's `method`."""
        async def handle(conn: Connection, frame: Any) -> p.Frame:
            return await method(await self.chat_service())(conn, frame)
        return handle

    def session_registries(self) -> list[Registry]:
        """The distinct registries of open sessions and those opening (a session opened before a reload
        keeps the old one)."""
        sessions = [*self.sessions.values(), *self._opening]
        return list({id(s.registry): s.registry for s in sessions}.values())

    def secret_names(self, setup: bool = True) -> frozenset[str]:
        """The names of scvd's environment that hold a secret (scvd/secret_names.py) by the configuration
        and tools now and every open session's, and (`setup`) by the imported Codex setup: asked at each
        use, so a reload's new ones, an import's and an MCP server's tools as they come count at once,
        and a closed session's stop counting."""
        sessions = ((s.config, s.registry) for s in self.sessions.values())
        names = named_by_all([(self.config, self.registry), *sessions])
        return names.union(self.setup_keys()) if setup else names

    def provider_keys(self) -> dict[str, str]:
        """The chat providers' key names (config.provider_keys) of the configuration now and every open
        session's, and the imported Codex setup's (chat's provider `codex`), asked at each use as
        secret_names() is."""
        return {**self.setup_keys(), **keys_by_all([self.config, *(s.config for s in self.sessions.values())])}

    def revoke_grants(self, tools: set[str], why: str) -> None:
        """No open session keeps a grant of these tools, and no request of theirs still waiting is
        approved: `why` they changed (a reload replaced their MCP server, or it redefined them)."""
        why = f"{why} while this call waited, so the request no longer shows what would run; call it again"
        for session in self.sessions.values():
            session.revoke(tools, why)  # also voids an approval decided but not yet acted on
        self.gate.withdraw(tools, why)

    # --- lifecycle -------------------------------------------------------------

    async def serve(self, inherited: list[socket.socket] | None = None) -> None:
        await self.startup(inherited or [])
        try:
            await self.stop_event.wait()
        finally:
            await self.shutdown()

    async def startup(self, inherited: list[socket.socket]) -> None:
        heap.one_arena()  # before the workers' threads: an arena each would keep a burst's pages
        try:
            await self._start(inherited)
        except BaseException:
            # nothing may stay behind a failed start: not the socket file, not the lock
            self._release()
            raise
        listed = len(self.registry.visible())  # what `scvctl tools` shows; system tools need --include-system
        system = len(self.registry) - listed
        log.info(
            "scvd %s ready on %s (pid %d, policy %s, sandbox %s, %d tools%s)",
            __version__, self.listening_on, os.getpid(), self.config.approvals.policy,
            self.sandbox_verdict, listed, f" and {system} system tool{'s' if system > 1 else ''}" if system else "",
        )
        heap.trim()  # the start's transient allocations: an idle daemon should not keep their pages

    async def _start(self, inherited: list[socket.socket]) -> None:
        # 1. one daemon per instance: the lock names the pid that holds it; then the socket,
        #    inherited from systemd or bound here (a stale file is replaced); every fd the hard limit allows
        held = self._claim or claim(self.paths, inherited)
        self._lock_fd, self._owns_socket, self._socket_id = held.lock_fd, held.owns_socket, held.socket_id
        before, now = limits.raise_nofile()
        # 2. orphans of tools become our children, so they can be reaped and killed; and should scvd
        #    be killed, the guardian kills what its tools still run
        if not set_child_subreaper():
            log.warning("cannot become a child subreaper; orphans of tools go to init")
        guardian.start()
        # 3. the audit log, what a killed secrets write left, and the sandbox probe
        try:
            self.audit = AuditLog(self.paths.audit_log, self.config.audit.max_bytes, self.config.audit.keep)
        except OSError as exc:  # what to fix, not an errno (a link in its place read as a loop)
            raise errors.StartupError(unopenable("the audit log", self.paths.audit_log, exc)) from None
        self.secrets.sweep()  # a secrets write killed before its rename left every secret in its temp file
        self.listening_on = socket_name(held.sock)  # the sandbox masks it, wherever systemd put it
        self.sandbox, self.sandbox_verdict, self.host = await self.probe_sandbox(self.config)
        # 4. serve the socket, and bind it again should its file be removed (an inherited one is
        #    systemd's: that is only said)
        self._listen(held.sock)
        self._watch_socket()
        self.budget = limits.measure()
        log.info("open-file limit %d (was %d): %s", now, before, self.budget.describe())
        # 5. signals only set events (SIGHUP starts a reload, which serialises itself)
        if self.install_signals:
            loop = asyncio.get_running_loop()
            handlers: dict[int, tuple[Any, ...]] = {
                signal.SIGTERM: (self.request_stop, "SIGTERM"),
                signal.SIGINT: (self._on_sigint,),
                signal.SIGHUP: (self._spawn, self.reload),
            }
            for signum, (handler, *args) in handlers.items():
                loop.add_signal_handler(signum, handler, *args)
            for signum in held.signals:  # came before the loop ran (cli.run sent READY=1 early)
                handler, *args = handlers[signum]
                handler(*args)
        # 6. tell systemd we are ready (unless cli.run did: then send it if it waited for room),
        #    and keep its watchdog fed
        if held.ready_sent:
            self.notifier.retry()
        else:
            self.notifier.ready()
        self._update_status()
        self._spawn(self._watchdog)
        # chat.transcript_days' first pass (then one a day) runs while clients are served: a hung state
        # directory holds only a chat.open resuming a conversation, which waits for it
        self._spawn(self.expiry.run)
        # 7. MCP servers start in the background: a slow or broken one never delays READY=1
        await self.mcp.apply(self.config)

    def _listen(self, sock: socket.socket) -> None:
        self._listener = Listener(sock, self._accepted, self._accept_failed, self._out_of_fds)
        self._listener.start()

    def _watch_socket(self) -> None:
        bound = self._socket_id if self._owns_socket else None
        watch = watch_for(self.paths, bound, self.listening_on, self._check_interval, self._moved)
        if watch is not None:
            self._socket_watch = self.spawn_task(watch.run())

    def _check_interval(self) -> float:
        return self.config.server.socket_check_seconds  # a reload's value applies from the next check

    def _moved(self, sock: socket.socket, ident: tuple[int, int]) -> None:
        """Serve the socket the watch bound in place of the one whose file is gone (nobody reaches it)."""
        old = self._listener
        self._listen(sock)
        self._socket_id = ident  # the stop removes this file
        if old is not None:
            old.close()

    def _release(self) -> None:
        """Close the listener, remove our socket file, release the lock (each at most once)."""
        self._stop_listening()
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def _stop_listening(self) -> None:
        """Close the listener and remove the socket file we bound: nobody listens there any more,
        so the address is free for another scvd at once (not only once the grace is over)."""
        if self._socket_watch is not None:  # first: it would bind the path again
            self._socket_watch.cancel()
            self._socket_watch = None
        if self._listener is not None:
            self._listener.close()
        if self._owns_socket:
            remove_socket(self.paths.socket, self._socket_id)
            self._owns_socket = False

    async def shutdown(self) -> None:
        grace = self.config.server.shutdown_grace_seconds
        if self.install_signals:
            # a reload is moot now; and once the loop has closed (a worker thread may keep the process
            # a moment longer) SIGHUP's default action would kill scvd: systemd would call the stop failed
            asyncio.get_running_loop().remove_signal_handler(signal.SIGHUP)
            signal.signal(signal.SIGHUP, signal.SIG_IGN)
        # 1. tell systemd, stop accepting connections
        if self._status_soon is not None:  # no status line after STOPPING=1
            self._status_soon.cancel()
            self._status_soon = None
        self.heap_trim.close()
        self.notifier.stopping()
        self._stop_listening()
        # 2. end chat turns (they say cancelled_by_shutdown), refuse new calls, cancel in-flight ones,
        #    and give them the grace period to clean up: one deadline for the stop's waits (the MCP
        #    servers' stop aside), not a grace each (a stuck call and a stuck store took twice the grace
        #    the docs promise)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace

        def left() -> float:
            return max(0.0, deadline - loop.time())

        turns = self._chat.stop() if self._chat is not None else []
        if self.calls.table:  # after `stopping (SIGINT)` the log fell silent for the whole grace
            log.info("waiting up to %g s (server.shutdown_grace_seconds) for %d running call(s) to end%s",
                     grace, len(self.calls.table), self._stop_now_note())
        stuck = await self.calls.stop(grace)
        if stuck:
            log.warning("%d call(s) did not stop within server.shutdown_grace_seconds (%g s); "
                        "leaving them behind", stuck, grace)
        if turns:
            await asyncio.wait(turns, timeout=left())
        if self.secret_requests.storing:  # a value a person typed: its store's record goes in the audit log
            await asyncio.wait(set(self.secret_requests.storing), timeout=left())
        # 3. the audit log writes what it buffered (before anything that may wait: systemd's
        #    TimeoutStopSec ends in SIGKILL), stop the MCP servers (each within its stop grace, with
        #    its process group), answer the requests whose handler still waits, close every client and session
        self._flush_audit()
        await self.mcp.close()
        self._answer_unanswered()
        closing = list(self.connections)
        for conn in closing:
            self._drop_connection(conn)
        self.mcp_hosts.close()  # hosts still ending let go of their pipes (and put their flags back)
        if self._chat is not None:  # what closed chat sessions could not write: a last try, or logged as lost
            self._chat.flush()  # no await from here to the tasks' cancel: a chat.open still waiting would
            # resume and write the records flush wrote a second time
        # 4. remove our socket file and release the lock; end the background tasks (the expiry's passes,
        #    a reload, connections closing) within what is left of the grace: a loop closed right after
        #    the stop (an embedder's, a test's) would find them pending
        self._release()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=left())
        # 5. the answers the closed connections hold go out to peers that read them (after the socket
        #    and lock are free: a new scvd may start meanwhile)
        await self._answers_read(closing, max(left(), DRAIN_SECONDS))
        log.info("scvd stopped")

    @staticmethod
    async def _answers_read(closed: list[Connection], bound: float) -> None:
        """Wait, at most `bound` seconds, for the answers the closed connections still hold to be taken
        by their peers: the loop closes next, and would drop them (a call's `call.completed` too, the
        last frame cut mid-line). What a peer has not read by then is dropped, and said so in the log."""
        loop = asyncio.get_running_loop()
        end = loop.time() + bound
        while (waiting := [c for c in closed if c.transport.get_write_buffer_size()]) and loop.time() < end:
            await asyncio.sleep(DRAIN_POLL)
        for conn in waiting:
            log.warning("client %s did not read its last answers as scvd stopped (%d bytes); dropping them",
                        conn.label(), conn.transport.get_write_buffer_size())
            conn.transport.abort()

    def request_stop(self, why: str = "") -> None:
        if not self.stop_event.is_set():
            log.info("stopping (%s)", why or "requested")
            self._stopped_by = why
        self.stop_event.set()

    def _stop_now_note(self) -> str:
        """How to cut the grace short: any SIGINT while stopping exits at once (a second SIGTERM does nothing)."""
        if not self.install_signals:  # an embedder's loop: its signals are not scvd's
            return ""
        if self._stopped_by == "SIGINT":
            return "; press Ctrl-C again to stop now, killing their processes"
        return f"; a SIGINT to scvd (kill -INT {os.getpid()}) stops now, killing their processes"

    def _on_sigint(self) -> None:
        if self.stop_event.is_set():
            self.exit_at_once()
        self.request_stop("SIGINT")

    def exit_at_once(self) -> None:
        """A second SIGINT: exit 1 now, the processes of calls still running killed first (also
        once the loop has closed, while scvd waits for stuck threads: cli.serve)."""
        try:
            killed = kill_every_run()  # the grace's SIGKILL would never come
            log.warning("second SIGINT: exiting at once%s",
                        f" ({killed} process(es) of calls killed)" if killed else "")
            self.calls.record_cut_off()
            self._flush_audit()
        finally:
            os._exit(1)

    async def reload(self) -> None:
        """SIGHUP: read the config again (reload.py); new sessions use it, open ones keep theirs."""
        if await self.reloader.reload():  # after a failure, `reload failed: ...` stays the status line
            self._update_status(force=True)

    async def install(self, loaded: Loaded, registry: Registry, sandbox: Any, verdict: str,
                      host: frozenset[Any]) -> None:
        """Put a reload's configuration, registry and sandbox in place of the running ones."""
        self.mcp.register_into(registry)  # servers left running keep their tools
        if loaded.config.chat.transcript_days != self.config.chat.transcript_days:
            self.expiry.poke()  # set or shortened: not a day later
        # all at once, after the probe: the new config never runs with the old probe's result
        self.loaded, self.registry, self.sandbox, self.sandbox_verdict = loaded, registry, sandbox, verdict
        self.host = host
        self._follow_tools()
        self.gate.timeout_seconds = loaded.config.approvals.timeout_seconds
        self.gate.max_pending = loaded.config.approvals.max_pending
        self._limit_calls(loaded.config)
        self._fit_gate()
        await self.mcp.apply(loaded.config)  # added, removed and changed servers only

    def _limit_calls(self, config: Any) -> None:
        """What calls may hold at once: how many per session and connection, their bytes per connection and in all."""
        server = config.server
        self.calls.max_per_session = server.max_calls_per_session
        self.calls.max_per_connection = server.max_calls_per_connection
        budget = self.calls.budget
        budget.per_owner, budget.total = server.max_call_bytes_per_connection, server.max_call_bytes

    def _follow_tools(self) -> None:
        """scvd's own places take in the folders the tools run from, of this registry and of every open
        session's (a session keeps the tools it opened with): a write there asks, the sandbox keeps
        them read-only (it reads them here: probe_sandbox). Until the next reload, a closed
        session's stay: the safe side."""
        folders = {d for r in [self.registry, *self.session_registries()] for d in r.runs_from()}
        self.own = own_places(self.paths, self.loaded.path, tuple(sorted(folders)))
        self.services[OWN_PLACES] = self.own  # for sessions opened from now on

    async def _watchdog(self) -> None:
        interval = self.notifier.watchdog_interval()
        if not interval:
            return
        while True:
            self.notifier.watchdog()
            await asyncio.sleep(interval)

    async def probe_sandbox(self, config: Any) -> tuple[Any, str, frozenset[Any]]:
        """The Sandbox and its verdict for `config`, and the places whose files run outside any
        sandbox later (sandbox off too: a write there always asks); the caller installs all three."""
        config_file = str(self.loaded.path)  # a reload reads the same file
        result, host = await asyncio.to_thread(self._probe, config, config_file)
        if result is None:
            return None, "off", host
        from . import sandbox as sandbox_mod

        verdict = sandbox_mod.describe(result)
        (log.info if result.ok else log.warning)("sandbox: %s", verdict)
        sandbox = sandbox_mod.Sandbox(result, self.paths, listening_on=self.listening_on, config_file=config_file,
                                      keep=lambda: of(self.own, TOOL))
        return sandbox, verdict, host

    def _probe(self, config: Any, config_file: str) -> tuple[Any, frozenset[Any]]:
        """The probe's result (None with sandbox.mode off) and the places whose files run outside
        the sandbox later. Blocking."""
        from . import host_places

        result = None
        if config.sandbox.mode != "off":
            from . import sandbox as sandbox_mod

            result = sandbox_mod.probe(config.sandbox, self.paths, listening_on=self.listening_on,
                                       config_file=config_file)
        return result, host_places.places(config, result and result.bwrap, os.environ, os.path.expanduser("~"))

    def _spawn(self, fn: Callable[[], Awaitable[Any]]) -> None:
        task = asyncio.ensure_future(fn())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _update_status(self, force: bool = False) -> None:
        """Schedule the STATUS= line: once for every change within the notifier's interval."""
        if not force and (self._status_soon is not None or self.notifier.socket_name is None):
            return  # every call comes here twice: nothing to schedule, without asking stop_event
        if self.stop_event.is_set():  # sessions closing in the shutdown: no STATUS= after STOPPING=1
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self._status_now(force)
            return
        if force:
            self._status_now(True)
        else:  # every call changes the count twice: render the line once per interval, not per change
            self._status_soon = loop.call_later(self.notifier.status_wait(), self._status_now)

    def _status_now(self, force: bool = False) -> None:
        if not force:
            self._status_soon = None
        text = (f"sessions={len(self.sessions)} pending_approvals={len(self.gate.pending)} "
                f"running_calls={self.calls.running()}")
        # only changes: every connect and disconnect lands here (the notifier itself sends
        # at most one STATUS= a second, never blocking)
        if force or text != self._last_status:
            self._last_status = text
            self.notifier.status(text)

    # --- connections -------------------------------------------------------------

    def _accepted(self, client: socket.socket) -> None:
        self._spawn(lambda: self._serve_client(client))

    async def _serve_client(self, client: socket.socket) -> None:
        """A ClientProtocol over the accepted socket: it hands each frame to handle_frame()."""
        loop = asyncio.get_running_loop()
        try:
            await loop.connect_accepted_socket(lambda: ClientProtocol(self), client)
        except OSError:
            client.close()

    def _accept_failed(self, exc: OSError, told: bool, pause: float) -> None:
        outcome = "told the client why and closed it" if told else "clients wait"
        self._refusals.refused(f"connections: accept() failed ({exc.strerror or exc}); {outcome}; "
                               f"accepting again in {pause:g} s", time.monotonic())

    def _out_of_fds(self) -> bytes:
        return p.encode(p.Error(code="failed", kind="limit", fatal=True, message=(
            f"scvd has no file descriptor left for this connection (RLIMIT_NOFILE {self.budget.limit}); "
            "it accepts again once calls or clients release some: close sessions you no longer use, "
            "or raise LimitNOFILE= of the scvd unit")))

    def open_connection(self, transport: asyncio.Transport) -> Connection | None:
        conn = Connection(transport, self.config.server.client_frame_bytes)
        conn.server_frame_bytes = self.config.server.server_frame_bytes
        if conn.uid != os.getuid():
            log.warning("refused peer pid=%d uid=%d: not our uid", conn.pid, conn.uid)
            self._send(conn, p.Error(code="forbidden", fatal=True, message=(
                f"scvd runs as uid {os.getuid()}; peers of uid {conn.uid} may not connect")))
            conn.close()  # sends the error first
            return None
        refusal = limits.refuse_connection(
            self.budget, self._fds_held(), len(self.connections),  # every connection held is of our uid
            self.config.server.max_connections_per_uid, conn.spawned_by_daemon)  # just checked
        if refusal is not None:
            self._refusals.refused(f"a connection from {conn.label()}: {refusal}", time.monotonic())
            self._send(conn, p.Error(code="failed", kind="limit", fatal=True, message=refusal))
            conn.close()
            return None
        self.connections.add(conn)
        deadline = self.config.server.hello_seconds
        conn.hello_timer = asyncio.get_running_loop().call_later(deadline, self._no_hello, conn, deadline)
        return conn

    def _no_hello(self, conn: Connection, deadline: float) -> None:
        """server.hello_seconds after a connection came: close it if it has not said hello (300 connections
        that never said anything once held every slot of the uid, and `scvctl status` was refused meanwhile)."""
        conn.hello_timer = None
        if conn.initialized or conn.closed:
            return
        log.info("closed connection %s: no hello within %g s (server.hello_seconds)", conn.label(), deadline)
        self._send(conn, p.Error(code=errors.NotInitialized.code, fatal=True, message=(
            f"no hello within {deadline:g} s of connecting (server.hello_seconds); connect again and send "
            "`hello` first: {\"type\":\"hello\",\"id\":1,\"protocol\":1,\"client\":{\"name\":\"me\"}}")))
        conn.close()

    def connection_done(self, conn: Connection, lost: bool) -> None:
        self._drop_connection(conn, linger=not lost)

    def spawn_task(self, waiting: Awaitable[None]) -> asyncio.Future[Any]:
        task = asyncio.ensure_future(waiting)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def frames_handled(self) -> int:
        """After a batch of frames read at once: the first steps of the calls they submitted,
        behind their `call.accepted` and any `call.cancel` in the same batch, in this turn, their books
        held (CallRegistry.hold_books) until answers_written(). NOTHING_STARTED (no call: nothing
        held), STARTED, or GOES_ON when one of them goes on in a task, next turn (hold the answers for it)."""
        calls = self.calls
        if not calls.due:
            return NOTHING_STARTED
        calls.hold_books()
        return GOES_ON if calls.start_due() else STARTED

    def frame_too_large(self, conn: Connection, request_id: Any) -> None:
        limit = conn.frames.limit
        self._send_error(conn, errors.FrameTooLarge(
            f"frame exceeds {limit} bytes (server.client_frame_bytes); split it or send less"), request_id)

    def handle_frame(self, conn: Connection, line: bytes) -> asyncio.Future[Any] | None:
        """Answer one frame now, or return the task that answers it once the handler's wait is over."""
        request_id = None
        try:
            frame = p.decode_request(line)
            request_id = frame.id
            conn.frame_cost = FLOOR if len(line) <= SHORT else call_cost(line)  # a call spared: 500 instructions a read
            answer = self._dispatch(conn, frame)
        except errors.ScvError as exc:
            self._send_error(conn, exc, request_id or p.request_id(line))
        except Exception as exc:
            log.exception("internal error handling a frame from %s", conn.label())
            self._send_error(conn, exc, request_id)
        else:
            if isinstance(answer, p.Frame):
                self._send(conn, answer)
            elif answer is not None:
                return self._answer_later(conn, answer, request_id)
        return None

    def _answer_later(self, conn: Connection, waiting: Awaitable[p.Frame], request_id: Any) -> asyncio.Future[Any]:
        """A task that answers the request once `waiting` is over; listed until it is done (even
        cancelled before its first step), so a stop meanwhile answers the request itself."""
        task = self.spawn_task(self._answer_when_done(conn, waiting, request_id))
        self._unanswered[task] = (conn, request_id)
        task.add_done_callback(lambda done: self._unanswered.pop(done, None))
        return task

    async def _answer_when_done(self, conn: Connection, waiting: Awaitable[p.Frame], request_id: Any) -> None:
        try:
            answer = await waiting
        except errors.ScvError as exc:
            self._send_error(conn, exc, request_id)
        except Exception as exc:
            log.exception("internal error handling a frame from %s", conn.label())
            self._send_error(conn, exc, request_id)
        else:
            self._send(conn, answer)

    def _answer_unanswered(self) -> None:
        """At the stop, just before the connections close: requests whose handler still waits (a
        session.open's skill walk on a hung mount) are told why no answer comes, not left to an EOF."""
        stopping = errors.Stopping("scvd is stopping and will not answer this request; "
                                   "send it again once scvd is back")
        for task, (conn, request_id) in self._unanswered.items():  # not _send_error: a connection's second
            if not task.done() or task.cancelled():  # one that answered in this step is unlisted by its callback next step
                self._send(conn, error_frame(stopping, request_id))  # one goes too; all close next
        self._unanswered.clear()
        for conn in self.connections:  # the frames read behind those (or held for the next turn), in order
            for line in conn.take_queued():
                request_id = line.id if isinstance(line, p.TooLarge) else p.request_id(line)
                self._send(conn, error_frame(stopping, request_id))

    def _dispatch(self, conn: Connection, frame: Any) -> p.Frame | Awaitable[p.Frame] | None:
        """The handler's answer: a frame, an awaitable of one for handlers that wait (async ones), or
        None when the handler answers aside."""
        if isinstance(frame, p.Hello):
            return self.on_hello(conn, frame)
        if not conn.initialized:
            raise errors.NotInitialized("send `hello` first: {\"type\":\"hello\",\"id\":1,\"protocol\":1,"
                                        "\"client\":{\"name\":\"me\"}}")
        return self._handlers[type(frame)](conn, frame)

    async def dispatch(self, conn: Connection, frame: Any) -> p.Frame:
        """One request from an in-daemon client (an MCP host's): the socket's path without the bytes."""
        answer = self._dispatch(conn, frame)
        if self.calls.due:  # after the caller has its call.accepted
            asyncio.get_running_loop().call_soon(self.calls.start_due)
        if answer is None:  # answered aside, through conn: no in-daemon client sends such a request
            raise errors.InternalError(f"{type(frame).__name__} is answered aside, which dispatch() cannot wait for")
        return answer if isinstance(answer, p.Frame) else await answer

    def _drop_connection(self, conn: Connection, linger: bool = False) -> None:
        # may come twice (a lost peer whose handler still waited, or a peer lost while its connection
        # lingers): the second drops what it opened, and closes the connection at once
        self.connections.discard(conn)
        _no_hello_wait(conn)
        self.mcp_hosts.connection_dropped(conn)  # an MCP host it handed over goes with it
        self.drop_owner(conn, linger)
        if conn.server_frame_bytes == self.gate.max_bytes:  # it may have been the smallest
            self._fit_gate()

    async def _close_when_ended(self, conn: Connection, ending: list[asyncio.Future[Any]]) -> None:
        """Close `conn` once the calls it had have completed: a tool that ignores its cancellation
        must not hold the connection (and its fd) for good."""
        self._closing += 1  # its fd still counts against the budget
        try:
            await asyncio.wait(ending, timeout=self.config.server.shutdown_grace_seconds)
        finally:
            self._closing -= 1
            conn.close()

    def _fit_gate(self) -> None:
        """Approval requests must fit a frame to every approver: the configured limit, or the smaller
        one that a connection opened before a reload was announced (and keeps)."""
        limit, source = self.config.server.server_frame_bytes, "server.server_frame_bytes"
        smallest = min((c.server_frame_bytes for c in self.connections), default=limit)
        if smallest < limit:
            limit, source = smallest, "the server_frame_bytes of a connection opened before the last reload"
        lowered = limit < self.gate.max_bytes
        self.gate.max_bytes, self.gate.max_bytes_from = limit, source
        if lowered:
            self.gate.refit()

    def drop_owner(self, conn: Connection, linger: bool = False) -> None:
        """Close a connection's sessions (their calls cancelled), approvals and secret requests, then it:
        at once, or with `linger` (its peer ended its stream but may still read) once those calls
        have sent their `call.completed` and its chat turns their last event, within
        server.shutdown_grace_seconds."""
        ending: list[asyncio.Future[Any]] = (
            [c.ending() for c in self.calls.table.values() if c.session.owner is conn]
            + list(self._asides.get(conn, ())) if linger else [])
        self.gate.drop_owner(conn)  # first: its requests end as dropped, not cancelled with their calls
        turns = self._close_sessions(list(conn.sessions.values()))  # a turn's last event comes as it ends
        if linger:
            ending += turns
        self.secret_requests.drop_connection(conn)
        if ending:
            self.spawn_task(self._close_when_ended(conn, ending))
        else:
            conn.close()
        if conn.watcher:  # requests only it could have decided are denied now, not at their timeout
            self.gate.rescreen()
        self._update_status()

    def _send(self, conn: Connection, frame: p.Frame) -> None:
        conn.send(frame, conn.server_frame_bytes)

    def _send_error(self, conn: Connection, exc: BaseException, request_id: Any = None) -> None:
        frame = error_frame(exc, request_id)
        self._send(conn, frame)
        if frame.fatal:
            conn.close()

    def send_event(self, conn: Owner, event: p.Frame) -> None:
        """Push an event; the connection stamps its own sequence number."""
        if isinstance(conn, Connection) and not conn.closed:
            event.seq = conn.next_seq()
            self._send(conn, event)

    def calls_changed(self) -> None:
        self._update_status()
        if not self.calls.table:  # not len(): a Python call
            self.heap_trim.idle()

    # --- handlers ------------------------------------------------------------------

    def on_hello(self, conn: Connection, frame: p.Hello) -> p.Frame:
        if conn.initialized:  # first: a second hello, whatever its protocol, must not end a live connection
            raise errors.InvalidRequest("this connection already said hello")
        if frame.protocol != p.PROTOCOL_VERSION:
            raise errors.VersionMismatch(
                f"this scvd speaks protocol {p.PROTOCOL_VERSION}, the client asked for {frame.protocol}; "
                "upgrade the older side")
        conn.initialized, conn.client, conn.approver = True, frame.client.name, frame.approver
        _no_hello_wait(conn)
        conn.answers_secrets = frame.answers_secrets
        return p.Welcome(
            id=frame.id, protocol=p.PROTOCOL_VERSION, server=p.PeerInfo(name="scvd", version=__version__),
            limits=p.Limits(client_frame_bytes=conn.frames.limit, server_frame_bytes=conn.server_frame_bytes))

    def on_ping(self, conn: Connection, frame: p.Ping) -> p.Frame:
        return p.Pong(id=frame.id, time=time.time())

    def on_status(self, conn: Connection, frame: p.Status) -> p.Frame:
        policy = self.config.approvals.policy
        active = bool(self.sandbox and self.sandbox.active)
        return p.StatusResult(
            id=frame.id, pid=os.getpid(), version=__version__, protocol=p.PROTOCOL_VERSION,
            uptime_seconds=round(awake.clock() - self.started, 3), sessions=len(self.sessions),
            pending_approvals=len(self.gate.pending), running_calls=self.calls.running(), policy=policy,
            policy_note=policy_note(policy, active), sandbox=self.sandbox_verdict,
            socket=self.listening_on, mcp_servers=self.mcp.status(), reload_error=self.reload_error)

    async def on_session_open(self, conn: Connection, frame: p.SessionOpen) -> p.Frame:
        refusal = limits.refuse_session(self.budget, self._fds_held(), len(conn.sessions),
                                        self.config.server.max_sessions_per_connection)
        if refusal is not None:
            self._refusals.refused(f"a session for {conn.label()}: {refusal}", time.monotonic())
            raise errors.LimitExceeded(refusal)
        session = await session_open.prepare(self, conn, frame.workspace, self._opening)
        conn.sessions[session.id] = session
        self.sessions[session.id] = session
        log.info("session %s opened on %s by %s", session.id, session.workspace, conn.label())
        self._update_status()
        return p.SessionOpened(id=frame.id, session=session.id, workspace=str(session.workspace))

    def on_session_close(self, conn: Connection, frame: p.SessionClose) -> p.Frame:
        self._close_session(self._own_session(conn, frame.session))
        return p.Ok(id=frame.id)

    def on_sessions_list(self, conn: Connection, frame: p.SessionsList) -> p.Frame:
        # a tool's process sees its own connection's sessions only, as it hears only their approvals
        own_only = self._spawned(conn)
        shown = (s for s in self.sessions.values() if not own_only or s.owner is conn)
        return session_listing.listing(shown, frame.id, conn.server_frame_bytes)

    def on_tools_list(self, conn: Connection, frame: p.ToolsList) -> p.Frame:
        # a session keeps the registry of its opening (a reload since changes new sessions only)
        registry = self._own_session(conn, frame.session).registry if frame.session is not None else self.registry
        tools = self.listings.tools(registry, frame.include_system, frame.lint)  # built once per state
        load_errors = [p.ToolLoadError(source=e.source, name=e.name, message=e.message)
                       for e in registry.load_errors]
        answer = p.Tools(id=frame.id, tools=tools, errors=load_errors + self.mcp.load_errors())
        return fit_lint(answer, conn.server_frame_bytes) if frame.lint else answer

    def not_loaded(self, name: str, registry: Registry) -> str | None:
        return registry.not_loaded(name) or self.mcp.not_loaded(name) or self._reload_refused()

    def _reload_refused(self) -> str | None:
        """After a refused reload, why a tool added since is not there: the reason itself stays in `scvctl
        status` (a config line it quotes is no text for a model's turn)."""
        if not self.reload_error:
            return None
        return ("scvd's last reload failed (`scvctl status` says why), so a tool added or changed since is not "
                "loaded: fix the configuration (`scvd check-config`), then reload scvd (`systemctl --user reload "
                "scvd`, or SIGHUP to scvd)")

    def on_call(self, conn: Connection, frame: p.Call) -> p.Frame:
        session = self._own_session(conn, frame.session)
        handle = self.calls.submit(
            session, frame.tool, frame.arguments, requester=conn.decider(), call_id=frame.call_id,
            timeout_seconds=frame.timeout_seconds, turn=frame.turn, defer=True, cost=conn.frame_cost)
        return p.CallAccepted(id=frame.id, call_id=handle.call_id, background=handle.background)

    def on_call_cancel(self, conn: Connection, frame: p.CallCancel) -> p.Frame:
        call = self.calls.get(frame.call_id)
        if call is not None and call.session.owner is not conn and self._spawned(conn):
            raise errors.Forbidden(
                "a process started by scvd may cancel only its own session's calls; "
                "cancel from your own terminal instead")
        self.calls.cancel(frame.call_id, f"call.cancel from {conn.label()}")
        return p.Ok(id=frame.id)

    def on_approvals_watch(self, conn: Connection, frame: p.ApprovalsWatch) -> p.Frame:
        if self._spawned(conn):
            # a tool's process (e.g. `scvctl call` run by an agent) hears about its own sessions' requests,
            # as the approver of its own sessions would, and nobody else's: it cannot decide them anyway
            conn.approver = True
            return p.Ok(id=frame.id)
        conn.watcher = True
        if conn.answers_secrets:  # after this `ok` goes out: the secret requests already pending, as events
            asyncio.get_running_loop().call_soon(self.secret_requests.watching, conn)
        return p.Ok(id=frame.id)

    def on_approvals_list(self, conn: Connection, frame: p.ApprovalsList) -> p.Frame:
        if self._spawned(conn):
            log.warning("refused approvals.list from %s: a process started by scvd", conn.label())
            raise errors.Forbidden(
                "this client was started by scvd (a tool or agent), or the process that connected has "
                "exited; it may not list approvals (their summaries are for the person deciding): "
                "list them from your own terminal (scvctl approvals)")
        return p.Approvals(id=frame.id, approvals=self.gate.list())

    def on_approval_decide(self, conn: Connection, frame: p.ApprovalDecide) -> p.Frame:
        if self._spawned(conn):
            log.warning("refused a decision on %s from %s: a process started by scvd",
                        frame.approval_id, conn.label())
            raise errors.Forbidden(
                "this client was started by scvd (a tool or agent), or the process that connected has "
                "exited; it may not decide approvals: decide from your own terminal (scvctl approvals)")
        self.gate.decide(frame.approval_id, frame.decision == "approve", decider=conn.decider(),
                         reason=frame.reason, scope=frame.scope)
        return p.Ok(id=frame.id)

    def on_secret_provide(self, conn: Connection, frame: p.SecretProvide) -> None:
        self._may_answer_secrets(conn, frame.request_id)
        # the store may wait (a keyring over D-Bus, secrets.toml's lock held by `scvctl secrets set`):
        # the approver's other requests (its approvals) are answered meanwhile
        self._aside(conn, self._provide(conn, frame), frame.id)

    async def _provide(self, conn: Connection, frame: p.SecretProvide) -> p.Frame:
        await self.secret_requests.provide(frame.request_id, frame.value, decided_by=conn.decider().label())
        return p.Ok(id=frame.id)

    def on_secret_decline(self, conn: Connection, frame: p.SecretDecline) -> p.Frame:
        self._may_answer_secrets(conn, frame.request_id)
        self.secret_requests.decline(frame.request_id, frame.reason, decided_by=conn.decider().label())
        return p.Ok(id=frame.id)

    def _may_answer_secrets(self, conn: Connection, request_id: str) -> None:
        """The approvals rule: a process started by scvd may not answer (it could plant a credential)."""
        if self._spawned(conn):
            log.warning("refused an answer to secret request %s from %s: a process started by scvd",
                        request_id, conn.label())
            raise errors.Forbidden(
                "this client was started by scvd (a tool or agent), or the process that connected has "
                "exited; it may not answer secret requests: answer from your own terminal "
                "(scvctl approvals watch)")

    def _approvers_of(self, session_id: str) -> list[Connection]:
        """Who is asked for a session: every watcher, and the session's own connection if it approves."""
        targets = [c for c in self.connections if c.watcher]
        session = self.sessions.get(session_id)
        if session is not None and session.owner.approver and session.owner not in targets:
            targets.append(session.owner)
        return targets

    def _secret_answerers(self, session_id: str) -> list[Connection]:
        """Who is asked for a secret: the approvers that may answer one (a process scvd started may
        not) and have someone to type it (hello's answers_secrets, a watcher's too: a bridge that relays
        approvals may still have nowhere private to take a secret)."""
        return [c for c in self._approvers_of(session_id) if c.answers_secrets and not self._spawned(c)]

    def _audit_line(self, event: str, **fields: Any) -> None:
        self.calls.write_audit(event, **fields)  # the one writer of audit lines

    def on_chat_open(self, conn: Connection, frame: p.ChatOpen) -> Awaitable[p.Frame] | None:
        if self._chat is not None and not self._chat.waits(frame.conversation):
            return self._chat.open(conn, frame)
        # it waits for chat's modules (the daemon's first), the start's expiry pass, or the turn of the
        # conversation's closed session to end (up to 25 s): the connection's later requests (a
        # bridge's approvals, its pings) are answered meanwhile
        self._aside(conn, self._to_chat(lambda chat: chat.open)(conn, frame), frame.id)
        return None

    def _aside(self, conn: Connection, waiting: Awaitable[p.Frame], request_id: Any) -> None:
        """Answer a request once `waiting` is over, while the connection's later frames are handled."""
        task = self._answer_later(conn, waiting, request_id)
        self._asides.setdefault(conn, set()).add(task)
        task.add_done_callback(lambda done: self._aside_done(conn, done))

    def _aside_done(self, conn: Connection, task: asyncio.Future[Any]) -> None:
        asides = self._asides.get(conn, set())
        asides.discard(task)
        if not asides:
            self._asides.pop(conn, None)
        if conn not in self.connections:  # dropped while it waited: what it opened (a chat's session) goes too
            self._drop_connection(conn, linger=not conn.closed)

    async def on_agents_spec(self, conn: Connection, frame: p.AgentsSpec) -> p.Frame:
        from .adapters import service

        # not refused to a process scvd started (a chat's bash may check a sign-in): its env is what bash
        # inherits anyway, less what secret_names() withholds from every child; a sandboxed child cannot
        # reach the socket, and an unsandboxed one can read scvd's environ itself (docs/security.md)
        # here: it reads the sessions, which the loop changes; codex's own sign-in keeps its setup's
        # key variables, as its run does (AgentTool._pass_env)
        withheld = self.secret_names(setup=frame.agent != SETUP_AGENT)
        # it creates and repairs the agent's home: a tree walk, kept off the loop
        return await asyncio.to_thread(
            service.answer_spec, frame.agent, frame.action, list(frame.extra_args),
            config=self.config, paths=self.paths, env=os.environ, withheld=withheld, id=frame.id)

    async def on_agents_import(self, conn: Connection, frame: p.AgentsImport) -> p.Frame:
        from .adapters import service

        if self._spawned(conn):  # it would choose the endpoint and credential of every later codex run
            log.warning("refused agents.import from %s: a process started by scvd", conn.label())
            raise errors.Forbidden(
                "this client was started by scvd (a tool or agent), or the process that connected has "
                "exited; it may not import an agent's setup: run `scvctl agents import` from your own terminal")
        return await asyncio.to_thread(
            service.answer_import, frame.agent, frame.source, paths=self.paths, env=os.environ, id=frame.id)

    # --- helpers -------------------------------------------------------------------

    def _spawned(self, conn: Connection) -> bool:
        """A tool's or agent's process (checked at connect and now: the pid may be reused)."""
        return conn.spawned_by_daemon or spawned_by_daemon(conn.pid)

    def may_decide(self, conn: Connection) -> bool:
        """Whether a connection's approval decisions count: not a tool's or agent's process."""
        return not self._spawned(conn)

    def _fds_held(self) -> int:
        """Connections (closing ones too) and sessions held (one fd each), and what plans waiting for a person hold (a
        read's file): what the fd budget counts."""
        return (len(self.connections) + self._closing + len(self.sessions) + len(self._opening)
                + self.mcp_hosts.fds_held() + self.calls.held_while_asking())

    def _own_session(self, conn: Connection, session_id: str) -> Session:
        session = conn.sessions.get(session_id)
        if session is None:
            raise errors.SessionNotFound(
                f"this connection holds no session {session_id!r}; open one with session.open")
        return session

    def _close_session(self, session: Session) -> set[asyncio.Task[Any]]:
        return self._close_sessions([session])

    def _close_sessions(self, sessions: list[Session]) -> set[asyncio.Task[Any]]:
        """Close `sessions` and cancel their calls (one walk of the calls for all: a connection's 64 sessions
        walked them 64 times); returns their chats' cancelled tasks, still ending."""
        ending: set[asyncio.Task[Any]] = set()
        if self._chat is not None:
            for session in sessions:
                ending |= self._chat.session_closed(session)
        self.calls.cancel_sessions(sessions, "its session was closed")
        for session in sessions:
            session.close()
            session.owner.sessions.pop(session.id, None)
            self.sessions.pop(session.id, None)
            log.info("session %s closed", session.id)
        self._update_status()
        return ending

    def _on_approval(self, kind: str, approval: Approval) -> None:
        event = approval_event(kind, approval)
        if kind == "resolved":
            self.calls.record_decision(approval)
        targets = [c for c in self.connections if c.watcher]
        if approval.owner.approver and approval.owner not in targets:
            targets.append(approval.owner)
        for conn in targets:
            self.send_event(conn, event)
        self._update_status()

    def _flush_audit(self) -> None:
        if self.audit is not None:
            # and later records (calls past the grace period) at once; what a full disk refuses is
            # counted lost (the log says how many, the next start writes a records_lost line)
            self.audit.unbuffer()


def _no_hello_wait(conn: Connection) -> None:
    """The hello deadline is over for `conn`: it said hello, or it is gone."""
    if conn.hello_timer is not None:
        conn.hello_timer.cancel()
        conn.hello_timer = None
