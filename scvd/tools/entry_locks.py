"""One lock per directory entry that a write is installing, so that scvd's own writes of one file
check their precondition (expected_sha256, the target's kind) and install it one after another.

Rule: an entry is (device, inode) of its real directory plus its name: one file reached through two
workspaces, or through a symlinked folder, is one entry; a hard link's other names are others (a
write replaces the entry, not the inode's content). A lock exists only while a write holds or waits
for it, so the table holds at most as many as writes run at once. The locks are threading locks: a
write checks and installs on a pool thread (`workers.run_blocking`), never on the event loop.
"""

from __future__ import annotations

import contextlib
import os
import threading
from typing import Callable, Iterator

Entry = tuple[int, int, str]
WAKE_SECONDS = 0.1  # a write waiting for another's looks this often whether its call was cancelled


class _Held:
    __slots__ = ("lock", "users")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.users = 0  # writes holding or waiting for it: the last one out removes it


class EntryLocks:
    """Locks by entry, made on first use and dropped when no write holds or waits for them."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._by_entry: dict[Entry, _Held] = {}

    def __len__(self) -> int:
        return len(self._by_entry)

    @contextlib.contextmanager
    def hold(self, parent: int, name: str, waiting: Callable[[], None] = lambda: None) -> Iterator[None]:
        """Hold the lock of entry `name` in the directory open as `parent`, waiting for another write's;
        `waiting()` is called every WAKE_SECONDS meanwhile, and may raise to stop (a cancelled call: its
        thread is one of the few for file work, which reads need too)."""
        st = os.fstat(parent)
        key = (st.st_dev, st.st_ino, name)
        with self._guard:
            held = self._by_entry.get(key)
            if held is None:
                held = self._by_entry[key] = _Held()
            held.users += 1
        try:
            while not held.lock.acquire(timeout=WAKE_SECONDS):
                waiting()
            try:
                yield
            finally:
                held.lock.release()
        finally:
            with self._guard:
                held.users -= 1
                if not held.users:
                    del self._by_entry[key]
