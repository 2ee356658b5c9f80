"""Where a file-backed keyring keeps the secrets scvd stores in it, known without importing keyring.

With a file backend (PYTHON_KEYRING_BACKEND=keyrings.alt.file.PlaintextKeyring, its EncryptedKeyring,
keyrings.cryptfile's CryptFileKeyring) `scvctl secrets set` and store_secret put every value in one
file in keyring's data folder, `$XDG_DATA_HOME/python_keyring` (else `~/.local/share/python_keyring`):
`keyring_pass.cfg` holds them in base64. That folder is none of scvd's, so an unasked `read` showed
them all, and so did an unasked sandboxed `cat`. It is worked out from the environment here, as
keyring works it out (keyring.util.platform_.data_root), not asked of the backend: scvd imports keyring
only when the store is first used, and a read before that must ask already. The folder holds keyring
stores only, so it counts whatever the backend; KEYRING_PROPERTY_FILE_PATH (keyring gives the backend
that `file_path`) names a file elsewhere. scvd/own_places.py and scvd/sandbox.py take both.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any, Mapping

log = logging.getLogger("scvd.keyring_files")

FOLDER = "python_keyring"  # keyring's data folder, in XDG_DATA_HOME
FILE_PATH = "KEYRING_PROPERTY_FILE_PATH"  # keyring sets the backend's `file_path` from it


def keyring_dir(env: Mapping[str, str]) -> Path:
    """keyring's data folder in `env`: where its file backends keep their stores by default."""
    data = env.get("XDG_DATA_HOME") or os.path.join(env.get("HOME") or os.path.expanduser("~"), ".local", "share")
    return Path(os.path.abspath(os.path.join(data, FOLDER)))


def keyring_file(env: Mapping[str, str]) -> Path | None:
    """The store file that KEYRING_PROPERTY_FILE_PATH gives a file backend, if any."""
    value = env.get(FILE_PATH)
    return Path(os.path.abspath(value)) if value else None


def check_backend(backend: Any, env: Mapping[str, str]) -> None:
    """Warn when `backend` keeps its secrets in a file scvd does not know (a backend of its own
    with its own place): a read of it does not ask, and the sandbox shows it."""
    path = getattr(backend, "file_path", None)
    if not isinstance(path, str) or not path:
        return
    from .paths import within  # which imports this module
    real = os.path.realpath(path)
    known = [keyring_dir(env), keyring_file(env)]
    if not any(place is not None and within(real, os.path.realpath(place)) for place in known):
        log.warning("secret store: the keyring %s keeps secrets in %s, which scvd does not know as a keyring's "
                    "file: an unasked read or sandboxed command may show it; keep it in %s or name it in %s",
                    type(backend).__name__, path, keyring_dir(env), FILE_PATH)
