"""A keyring backend in a JSON file that a test can lock, as a Secret Service collection locks.

Chosen the way a user chooses a backend: PYTHON_KEYRING_BACKEND=helpers.lockable_keyring.Keyring
(with tests/ on PYTHONPATH). LOCKABLE_KEYRING names the file; while `<file>.locked` exists every
call raises keyring.errors.KeyringLocked, so a running daemon sees the lock come and go.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from keyring.backend import KeyringBackend
from keyring.errors import KeyringLocked, PasswordDeleteError

BACKEND = "helpers.lockable_keyring.Keyring"


def store_file() -> Path:
    return Path(os.environ["LOCKABLE_KEYRING"])


def lock(path: Path, locked: bool = True) -> None:
    flag = path.with_name(path.name + ".locked")
    flag.touch() if locked else flag.unlink(missing_ok=True)


class Keyring(KeyringBackend):
    # used when chosen, never auto-detected (needs 1): importing this module must not change other tests
    priority = 0.5  # type: ignore[assignment]

    def _entries(self) -> dict[str, str]:
        path = store_file()
        if path.with_name(path.name + ".locked").exists():
            raise KeyringLocked("the collection is locked")
        return json.loads(path.read_text()) if path.exists() else {}

    def _save(self, entries: dict[str, str]) -> None:
        store_file().write_text(json.dumps(entries))

    def get_password(self, service: str, username: str) -> str | None:
        return self._entries().get(f"{service}/{username}")

    def set_password(self, service: str, username: str, password: str) -> None:
        entries = self._entries()
        entries[f"{service}/{username}"] = password
        self._save(entries)

    def delete_password(self, service: str, username: str) -> None:
        entries = self._entries()
        if entries.pop(f"{service}/{username}", None) is None:
            raise PasswordDeleteError("no such password")
        self._save(entries)
