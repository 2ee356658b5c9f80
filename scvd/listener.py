"""Accepting clients: a shortage of fds pauses the accept loop and tells the client why.

Rules:
- accept() failing for want of resources (EMFILE, ENFILE, ENOBUFS, ENOMEM) or
  for any other reason pauses the loop, doubling from PAUSE_MIN to PAUSE_MAX,
  instead of retrying at once; the caller logs it (one line per interval).
- One spare fd is held. When accept() fails with EMFILE or ENFILE, the spare
  is given up to accept the waiting client, send it one `error` frame saying
  why and close it, then taken back: the client hears what to do, not silence.

Why not start_unix_server: asyncio's retries an EMFILE each second and logs a
traceback each time, leaving the client hanging; uvloop's (libuv) accepts and
closes the client without a word, and closes the listener for good on an
error its own spare fd cannot absorb (ENOBUFS, ENOMEM).
"""

from __future__ import annotations

import asyncio
import errno
import os
import socket
from typing import Callable

SHORT_OF_FDS = frozenset({errno.EMFILE, errno.ENFILE})
HARMLESS = frozenset({errno.ECONNABORTED, errno.EPROTO, errno.EINTR, errno.EAGAIN})  # the client gave up
PAUSE_MIN, PAUSE_MAX = 0.05, 2.0


class Listener:
    """Accepts on a listening socket and hands each client socket to `on_client`."""

    def __init__(self, sock: socket.socket, on_client: Callable[[socket.socket], None],
                 on_failure: Callable[[OSError, bool, float], None], refusal: Callable[[], bytes]) -> None:
        self.sock = sock
        self.on_client = on_client
        self.on_failure = on_failure  # (the error, whether the client was told, the pause that follows)
        self.refusal = refusal  # the `error` frame a client gets when no fd is left for it
        self._spare = _open_spare()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self.sock.setblocking(False)
        self._task = asyncio.ensure_future(self._run())

    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None
        self.sock.close()
        if self._spare is not None:
            os.close(self._spare)
            self._spare = None

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        pause = PAUSE_MIN
        while True:
            try:
                client, _ = await loop.sock_accept(self.sock)
            except OSError as exc:
                if exc.errno in HARMLESS:
                    continue
                told = exc.errno in SHORT_OF_FDS and self._tell_one()
                self.on_failure(exc, told, pause)
                await asyncio.sleep(pause)
                pause = min(pause * 2, PAUSE_MAX)
                continue
            pause = PAUSE_MIN
            self.on_client(client)

    def _tell_one(self) -> bool:
        """With the spare fd: accept one waiting client, send it the refusal, close it."""
        if self._spare is None:
            self._spare = _open_spare()
            return False
        os.close(self._spare)
        self._spare = None
        try:
            client, _ = self.sock.accept()  # takes the number the spare gave up
        except OSError:
            self._spare = _open_spare()
            return False
        try:
            client.send(self.refusal(), socket.MSG_DONTWAIT)
        except OSError:
            pass
        finally:
            client.close()
            self._spare = _open_spare()
        return True


def _open_spare() -> int | None:
    try:
        return os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
