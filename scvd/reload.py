"""SIGHUP's reload: read config.toml and the tool definitions again, off the loop and bounded, one
reload at a time; the Daemon installs what was read (`Daemon.install`). No tool names here.

A reload that fails keeps the old configuration and says why (`error`, status's `reload_error`).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import errors, eventloop
from .config import Loaded, load
from .tools import build_registry
from .workers import in_own_thread

if TYPE_CHECKING:
    from .server import Daemon
    from .tools.contract import Registry

log = logging.getLogger("scvd.server")  # its lines keep the logger name they had in server.py

RELOAD_READ_SECONDS = 30.0  # a reload reading config.toml and tool.json files past this gives up
START_ONLY = ("log_level", "server.event_loop", "audit.max_bytes", "audit.keep")  # read at start only
STUCK_READS_MAX = 4  # reloads whose read never returned (each holds a thread): then reloads are refused


def setting(config: Any, key: str) -> Any:
    for part in key.split("."):
        config = getattr(config, part)
    return config


def gone_hint(loaded: Loaded) -> str:
    """Why a reload refuses a missing file: the defaults would silently replace what it said."""
    if not loaded.file_read:
        return ""  # started without one: the defaults are what runs already
    return "put it back, then reload again (without it every setting would fall back to its default)"


def emptied_hint(loaded: Loaded) -> str:
    """Why a reload refuses a file found empty (emptied by mistake, cut short as it was saved): the
    defaults would silently replace what it said. One that set nothing meant the defaults already."""
    if "file" not in loaded.sources.values():
        return ""
    return ("every setting would fall back to its default: put the settings back, or, if you mean the "
            "defaults, put a comment in it (# defaults), then reload again")


class Reloader:
    """The daemon's reloads: serialised, their reads bounded, their refusals kept in `error`."""

    def __init__(self, daemon: Daemon) -> None:
        self.daemon = daemon
        self._start_only = [setting(daemon.loaded.config, key) for key in START_ONLY]  # runs until a restart
        self._lock = asyncio.Lock()
        self._waiting = False  # a reload waits for the running one; later SIGHUPs merge into it
        self._reads: list[threading.Thread] = []  # reloads' reads, kept to count those that never returned
        self.error = ""  # why the last reload was refused, for `status`; "" after one that took

    async def reload(self) -> bool:
        """SIGHUP: read the config again; new sessions use it, open ones keep theirs. True once it took.

        One reload runs at a time. A SIGHUP during one waits for it; further
        SIGHUPs meanwhile merge into that waiting one, which reads the file last.
        """
        daemon = self.daemon
        if daemon.stop_event.is_set():  # no RELOADING=1 nor READY=1 after STOPPING=1, no server started
            log.info("reload requested while scvd stops; ignored")
            return False
        if self._waiting:
            log.info("reload requested again; merged into the one waiting to run")
            return False
        if self._lock.locked():
            log.info("reload requested while one runs; it runs when that one ends")
        self._waiting = True
        async with self._lock:
            self._waiting = False
            if daemon.stop_event.is_set():  # it waited for one that ran as the stop came
                return False
            daemon.notifier.reloading()
            try:
                reloaded = await self._once()
            finally:
                if not daemon.stop_event.is_set():  # READY=1 after STOPPING=1 would tell systemd it runs again
                    daemon.notifier.ready()
        return reloaded

    async def _once(self) -> bool:
        daemon = self.daemon
        try:
            loaded, registry = await self._read(Path(daemon.loaded.path))
            sandbox, verdict, host = await daemon.probe_sandbox(loaded.config)
        except errors.ScvError as exc:
            log.error("reload failed, keeping the old configuration: %s", exc.message)
            daemon.notifier.status(f"reload failed: {exc.message}")
            self.error = exc.message
            return False
        except Exception as exc:
            log.exception("reload failed, keeping the old configuration")
            daemon.notifier.status(f"reload failed: {exc}")
            self.error = f"{type(exc).__name__}: {exc} (a bug in scvd: its log has the traceback)"
            return False
        if daemon.stop_event.is_set():  # stopping while the file was read or the sandbox probed
            log.info("reload not applied: scvd is stopping")
            return False
        # against what the start read, not the last reload: a value put back as it runs waits for nothing
        unapplied = [key for key, now in zip(START_ONLY, self._start_only) if setting(loaded.config, key) != now]
        if unapplied:  # the file says so now, the daemon does not: say when it will
            log.warning("reload: %s changed; it takes effect at the next start of scvd", ", ".join(unapplied))
        for warning in loaded.warnings:  # what the edit brought (an unused [providers.X]); not the start's again
            if warning not in daemon.loaded.warnings:
                logging.getLogger("scvd.config").warning("%s", warning)
        await daemon.install(loaded, registry, sandbox, verdict, host)
        # as check-config says it: there was no file to reload from
        log.info("configuration reloaded from %s%s", loaded.path, "" if loaded.file_read else " (missing: defaults)")
        self.error = ""
        return True

    async def _read(self, path: Path) -> tuple[Loaded, Registry]:
        """config.toml and the tool.json files (and the first jsonschema import) are read off the loop, on a
        thread of its own, and bounded: a hung mount would hold every later reload behind this one."""
        daemon = self.daemon
        missing, empty = gone_hint(daemon.loaded), emptied_hint(daemon.loaded)

        def read() -> tuple[Loaded, Registry]:
            loaded = load(path, missing=missing, empty=empty)
            eventloop.check(loaded.config.server.event_loop)  # read at start only: the next start would fail
            return loaded, build_registry(loaded.config, daemon.paths, daemon.extra_tools)

        stuck = [t for t in self._reads if t.is_alive()]
        if len(stuck) >= STUCK_READS_MAX:
            raise errors.ConfigError(
                f"the last {len(stuck)} reloads' reads of {path} and the tool definitions never returned "
                "(a hung mount?); fix that, or restart scvd")
        reading, thread = in_own_thread(read, "scvd-reload-read")
        self._reads = [*stuck, thread]
        try:
            return await asyncio.wait_for(reading, RELOAD_READ_SECONDS)
        except TimeoutError:
            raise errors.ConfigError(
                f"reading {path} and the tool definitions took longer than {RELOAD_READ_SECONDS:g} s "
                "(a file on a hung mount?); fix that, then reload again") from None
