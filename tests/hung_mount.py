"""A FUSE mount that never answers, as a dead NFS or sshfs mount behaves: any access below it
blocks in the kernel until `release()` (the kernel's requests wait for a server that never reads
them). Needs root and /dev/fuse; mount(2) through ctypes, no FUSE library.
"""

from __future__ import annotations

import ctypes
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest

MNT_DETACH = 2  # umount2: lazily, as `umount -l`


class HungMount:
    """/dev/fuse mounted on `path`, its requests never read."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._libc = ctypes.CDLL(None, use_errno=True)
        self._fd: int | None = os.open("/dev/fuse", os.O_RDWR | os.O_CLOEXEC)
        options = f"fd={self._fd},rootmode=40000,user_id=0,group_id=0".encode()
        if self._libc.mount(b"scvd-test", os.fsencode(path), b"fuse", 0, options) != 0:
            err = ctypes.get_errno()
            os.close(self._fd)
            raise OSError(err, f"cannot mount FUSE on {path}: {os.strerror(err)}")

    def release(self) -> None:
        """Close the server's end: every waiting access fails (ENOTCONN) at once, later ones too."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def unmount(self) -> None:
        self.release()
        self._libc.umount2(os.fsencode(self.path), MNT_DETACH)


@contextmanager
def hung_mount(path: Path) -> Iterator[HungMount]:
    """A hung mount on `path` (made if missing) for the block; released and lazily unmounted after."""
    if os.geteuid() != 0 or not os.path.exists("/dev/fuse"):
        pytest.skip("a hung FUSE mount needs root and /dev/fuse")
    path.mkdir(parents=True, exist_ok=True)
    mount = HungMount(path)
    try:
        yield mount
    finally:
        mount.unmount()
