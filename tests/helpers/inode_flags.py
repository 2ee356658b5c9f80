"""Files and directories made immutable or append-only (chattr +i, +a) for a test, and put back after."""

from __future__ import annotations

import contextlib
import subprocess
from pathlib import Path
from typing import Iterator

import pytest


@contextlib.contextmanager
def flagged(path: Path, flag: str = "i") -> Iterator[None]:
    """`path` with chattr's `flag` ("i": immutable, "a": append-only): even its owner cannot change
    it as the flag forbids, as for a file root owns; skips where it cannot be set."""
    made = subprocess.run(["chattr", f"+{flag}", str(path)], capture_output=True)
    if made.returncode != 0:
        pytest.skip(f"cannot make a file immutable here (root and an ext4-like file system needed): {made.stderr!r}")
    try:
        yield
    finally:
        subprocess.run(["chattr", f"-{flag}", str(path)], check=True)
