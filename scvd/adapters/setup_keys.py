"""Which variables of scvd's environment the imported Codex setup takes credentials from, kept current.

Chat's provider `codex` reads the setup in the codex agent's home at each turn and sends
those variables' values to its base_url (its `env_key`, its `env_http_headers`), so no other
tool or agent gets them (scvd/secret_names.py). bash asks at every call: config.toml is read
again only when a stat says it changed (an import, a codex run, a hand edit), and a daemon
with no imported setup never imports the TOML reader for it.
"""

from __future__ import annotations

import os
from pathlib import Path

AGENT = "codex"  # the agent whose home holds the imported setup
CONFIG = "config.toml"


class SetupKeys:
    """`()` -> the variables the imported setup takes credentials from, each with where it names them."""

    def __init__(self, adapters_dir: Path) -> None:
        self.home = Path(adapters_dir) / AGENT
        self._known: tuple[tuple[int, ...] | None, dict[str, str]] = (None, {})  # one assignment: threads ask too

    def __call__(self) -> dict[str, str]:
        try:
            st = os.stat(self.home / CONFIG)
            seen: tuple[int, ...] | None = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        except OSError:
            seen = None
        if seen != self._known[0]:
            read = self._read() if seen else {}  # read after the stat: never older than it
            # a file that cannot be read keeps the names read last: breaking it (a codex run may write
            # it) must not hand bash the key the setup named a moment ago
            self._known = (seen, self._known[1] if read is None else read)
        return dict(self._known[1])

    def _read(self) -> dict[str, str] | None:
        """The names the setup takes credentials from, or None where its config.toml cannot be read
        (a chat turn cannot use it either, and says why)."""
        from ..errors import NotARegularFile, UnreadableFile
        from .codex_home import read_config
        from .codex_provider import credential_vars

        try:
            found = credential_vars(read_config(self.home))
        except (OSError, ValueError, NotARegularFile, UnreadableFile):
            return None
        return {name: f"the imported Codex setup's {where}" for name, where in found.items()}
