"""A lockable keyring whose writes are slow, as a Secret Service answering late over D-Bus is.

Chosen with PYTHON_KEYRING_BACKEND=helpers.slow_keyring.Keyring (tests/ on PYTHONPATH);
LOCKABLE_KEYRING names the file, SLOW_KEYRING_SECONDS how long each set_password sleeps first,
SLOW_KEYRING_READ_SECONDS each get_password (none by default); SLOW_KEYRING_READS, if set, a
file that gets a line per get_password; SLOW_KEYRING_WRITES likewise per set_password, as it starts.
"""

from __future__ import annotations

import os
import time

from helpers import lockable_keyring

BACKEND = "helpers.slow_keyring.Keyring"


class Keyring(lockable_keyring.Keyring):
    def set_password(self, service: str, username: str, password: str) -> None:
        _mark("SLOW_KEYRING_WRITES", username)
        time.sleep(float(os.environ.get("SLOW_KEYRING_SECONDS", "2")))
        super().set_password(service, username, password)

    def get_password(self, service: str, username: str) -> str | None:
        _mark("SLOW_KEYRING_READS", username)  # a line per read: how many threads a hang holds
        time.sleep(float(os.environ.get("SLOW_KEYRING_READ_SECONDS", "0")))
        return super().get_password(service, username)


def _mark(variable: str, username: str) -> None:
    if os.environ.get(variable):
        with open(os.environ[variable], "a") as log:
            log.write(f"{username}\n")
