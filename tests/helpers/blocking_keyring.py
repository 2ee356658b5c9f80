"""A keyring backend whose every call blocks until the test releases it, as a Secret Service
waiting to be unlocked (a prompt nobody sees) does.

Chosen with PYTHON_KEYRING_BACKEND=helpers.blocking_keyring.Keyring (tests/ on PYTHONPATH), in the
test's own process: `release` ends every wait; `asked` gets "verb key" as each call starts.
"""

from __future__ import annotations

import threading

from keyring.backend import KeyringBackend

BACKEND = "helpers.blocking_keyring.Keyring"

release = threading.Event()
asked: list[str] = []


def _wait(what: str) -> None:
    asked.append(what)
    release.wait()


class Keyring(KeyringBackend):
    priority = 0.5  # type: ignore[assignment]  # used when chosen, never auto-detected

    def get_password(self, service: str, username: str) -> str | None:
        _wait(f"read {username}")
        return None

    def set_password(self, service: str, username: str, password: str) -> None:
        _wait(f"store {username}")

    def delete_password(self, service: str, username: str) -> None:
        _wait(f"delete {username}")
