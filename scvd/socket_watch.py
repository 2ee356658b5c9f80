"""The socket's path keeps reaching scvd: a socket file removed while scvd runs is bound again,
or, when systemd made it, said with what to do.

logind removes /run/user/UID at logout (`scvd run --daemon` runs on), a /tmp cleaner removes an
SCV_SOCKET there: scvd ran on unreachable, and `scvd run` refused to start for the lock it held.

Rules:
- Every server.socket_check_seconds, one lstat() of the path on the loop: no thread, no inotify,
  so an idle scvd wakes for it once in that while and does nothing more. No event says a file went.
- The path must name the file this process bound (its st_dev and st_ino). When it does not, one
  warning; then a fresh socket is bound there off the loop, as at start (instance.bind_owned:
  0600 from birth; a live socket, or a file that is no socket, is never replaced), and `moved`
  serves it. Failing, why and what to do, once per reason; a check tries again once the path
  changed (a live server there is not probed at each check: its queue would fill).
- The instance lock stays held throughout: no other scvd of this instance binds there meanwhile.
- An inherited socket is systemd's socket unit's: its path is watched too, but only said (once per
  reason) with the restart that makes it again (`scvd.socket` with scvd: restarting scvd alone hands
  it the same fd); a socket scvd bound there itself would be gone again at that restart.
"""

from __future__ import annotations

import abc
import asyncio
import logging
import os
import socket
from pathlib import Path
from typing import Callable

from . import errors
from .instance import bind_owned, file_id, remove_socket
from .paths import Paths

log = logging.getLogger("scvd.server")

Ident = tuple[int, int]


class _Watch(abc.ABC):
    """Checks that a socket path still names `ident`; `_changed` acts when it does not."""

    def __init__(self, path: Path, ident: Ident, interval: Callable[[], float]) -> None:
        self.path = path
        self.ident = ident
        self.interval = interval  # read at each wait: a reload's value applies from the next one
        self._said = ""  # the last warning logged, until it listens again: none is said at every check
        self._refused: Ident | None = None  # a file there that a bind refused: tried again once it changes

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.interval())
            found = file_id(self.path)
            if found != self.ident and (found is None or found != self._refused):
                await self._changed(found)

    @abc.abstractmethod
    async def _changed(self, found: Ident | None) -> None:
        """What the watch does when the path no longer names its socket (`found`: what it names, or None)."""

    def _gone(self, found: Ident | None) -> str:
        what = "is gone" if found is None else "names another file now"
        return f"the socket file {self.path} {what}, so clients cannot reach this scvd"

    def _say(self, text: str) -> None:
        if text != self._said:
            self._said = text
            log.warning("%s", text)


class InheritedWatch(_Watch):
    """Says when the path of the socket systemd passed no longer names it, and what makes it again."""

    async def _changed(self, found: Ident | None) -> None:
        self._say(f"{self._gone(found)}; systemd made that socket (scvd.socket), and scvd does not make it "
                  "again: restart both, systemctl --user restart scvd.socket scvd")


class SocketWatch(_Watch):
    """Checks that the instance's socket path still names `ident`, and binds it again when not."""

    def __init__(self, paths: Paths, ident: Ident, interval: Callable[[], float],
                 moved: Callable[[socket.socket, Ident], None]) -> None:
        super().__init__(paths.socket, ident, interval)
        self.paths = paths
        self.moved = moved  # serve the new socket in place of the old one (whose file is gone)

    async def _changed(self, found: Ident | None) -> None:
        path = self.paths.socket
        if not self._said:  # the first check that finds it: later ones only say a new reason it fails
            self._say(f"{self._gone(found)}; binding a new one there")
        job = asyncio.ensure_future(asyncio.to_thread(bind_owned, self.paths))
        try:
            sock, ident = await asyncio.shield(job)
        except asyncio.CancelledError:  # scvd stops: a socket the thread still binds goes too
            job.add_done_callback(lambda done: _discard(done, path))
            raise
        except (errors.StartupError, OSError) as exc:
            why = exc.message if isinstance(exc, errors.StartupError) else exc.strerror or str(exc)
            self._refused = found  # a live server there is not probed again and again (its queue filled)
            self._say(f"cannot bind {path} again ({why}); clients cannot reach this scvd until that changes (it "
                      f"checks every {self.interval():g} s, server.socket_check_seconds) or it is restarted "
                      f"(systemctl --user restart scvd, or kill {os.getpid()} and scvd run)")
            return
        self.ident, self._refused = ident, None
        self.moved(sock, ident)
        self._said = ""
        log.info("listening again on %s", path)


def for_socket(paths: Paths, bound: Ident | None, listening_on: str, interval: Callable[[], float],
               moved: Callable[[socket.socket, Ident], None]) -> _Watch | None:
    """The watch of the socket scvd bound (its file's `bound` id), else of the one systemd passed it,
    listening on `listening_on`; None for an abstract name, or a path naming nothing already."""
    if bound is not None:
        return SocketWatch(paths, bound, interval, moved)
    path = Path(listening_on)
    ident = file_id(path) if path.is_absolute() else None
    return None if ident is None else InheritedWatch(path, ident, interval)


def _discard(done: asyncio.Future[tuple[socket.socket, Ident]], path: Path) -> None:
    """A socket bound after the stop began: closed, and its file removed, as the stop did the first's."""
    if done.cancelled() or done.exception() is not None:
        return
    sock, ident = done.result()
    sock.close()
    remove_socket(path, ident)
