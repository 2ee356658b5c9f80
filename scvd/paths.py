"""Where an scvd instance keeps its files, and keeping them private (0700 dirs, 0600 files).

With `SCV_HOME` set, everything of the instance lives under it. Without it the
XDG layout from platformdirs is used. `SCV_SOCKET` overrides the socket path.
"""

from __future__ import annotations

import logging
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

import platformdirs

log = logging.getLogger("scvd.paths")

APP = "scv"
DIR_MODE = 0o700
FILE_MODE = 0o600


@dataclass(frozen=True)
class Paths:
    """Every path of one instance; `home` is SCV_HOME when set."""

    home: Path | None
    config_dir: Path
    data_dir: Path
    state_dir: Path
    runtime_dir: Path
    socket: Path

    @property
    def config_file(self) -> Path:
        return self.config_dir / "config.toml"

    @property
    def secrets_file(self) -> Path:
        return self.config_dir / "secrets.toml"

    @property
    def adapters_dir(self) -> Path:
        return self.data_dir / "adapters"

    @property
    def skills_dir(self) -> Path:
        return self.data_dir / "skills"

    @property
    def tools_dir(self) -> Path:
        return self.data_dir / "tools"

    @property
    def audit_log(self) -> Path:
        return self.state_dir / "audit.log"

    @property
    def lock_file(self) -> Path:
        return self.state_dir / "scvd.lock"

    @property
    def pid_file(self) -> Path:
        return self.state_dir / "scvd.pid"

    def private_dirs(self) -> list[Path]:
        """Directories scvd creates and keeps at 0700."""
        dirs = [self.config_dir, self.data_dir, self.state_dir, self.adapters_dir]
        if self.socket.parent == self.runtime_dir:
            dirs.append(self.runtime_dir)
        seen: list[Path] = []
        for d in dirs:
            if d not in seen:
                seen.append(d)
        return seen


def runtime_base(env: Mapping[str, str]) -> Path:
    """XDG_RUNTIME_DIR, else /run/user/<uid> as platformdirs does (MCP hosts may not set it)."""
    value = env.get("XDG_RUNTIME_DIR")
    if value:
        return Path(value)
    return Path(f"/run/user/{os.getuid()}")


def resolve(env: Mapping[str, str] | None = None) -> Paths:
    """The instance's paths from SCV_HOME / SCV_SOCKET / XDG."""
    env = os.environ if env is None else env
    home = env.get("SCV_HOME")
    if home:
        root = Path(home).expanduser().absolute()
        paths = dict(
            home=root,
            config_dir=root,
            data_dir=root,
            state_dir=root / "state",
            runtime_dir=root / "run",
        )
    else:
        base = runtime_base(env)
        state = Path(platformdirs.user_state_dir(APP))
        runtime = base / APP if base.is_dir() else state / "run"
        paths = dict(
            home=None,
            config_dir=Path(platformdirs.user_config_dir(APP)),
            data_dir=Path(platformdirs.user_data_dir(APP)),
            state_dir=state,
            runtime_dir=runtime,
        )
    sock = env.get("SCV_SOCKET")
    socket = Path(sock).expanduser().absolute() if sock else paths["runtime_dir"] / "scvd.sock"
    return Paths(socket=socket, **paths)


def ensure_private_dir(path: Path) -> str | None:
    """Create `path` (and parents) 0700, or tighten it; return a repair note or None."""
    path.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    st = path.stat()
    if stat.S_IMODE(st.st_mode) & 0o077:
        old = stat.S_IMODE(st.st_mode)
        os.chmod(path, DIR_MODE)
        return f"tightened {path} from {old:04o} to 0700"
    return None


def repair_tree(root: Path) -> list[str]:
    """Make every directory under `root` 0700 and every file 0600; symlinks are left alone.

    Agent CLIs create their own folders 0755, so this runs after each agent run too.
    """
    notes: list[str] = []
    if not root.is_dir() or root.is_symlink():
        return notes
    for dirpath, dirnames, filenames in os.walk(root):
        for name, want in [(d, DIR_MODE) for d in dirnames] + [(f, FILE_MODE) for f in filenames]:
            p = os.path.join(dirpath, name)
            notes += _fix_mode(p, want)
    notes += _fix_mode(str(root), DIR_MODE)
    return notes


def _fix_mode(p: str, want: int) -> list[str]:
    try:
        st = os.lstat(p)
    except FileNotFoundError:
        return []
    if stat.S_ISLNK(st.st_mode):
        return []
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o077 == 0:
        return []
    # keep the owner's bits (an executable stays executable), drop group and other
    fixed = mode & 0o700 | (want & 0o700 if stat.S_ISDIR(st.st_mode) else 0)
    os.chmod(p, fixed)
    return [f"tightened {p} from {mode:04o} to {fixed:04o}"]


def prepare(paths: Paths) -> list[str]:
    """Create the instance's directories 0700 and repair loose modes; return what was repaired."""
    notes: list[str] = []
    for d in paths.private_dirs():
        note = ensure_private_dir(d)
        if note:
            notes.append(note)
    for f in (paths.config_file, paths.secrets_file, paths.audit_log, paths.lock_file, paths.pid_file):
        notes += _fix_mode(str(f), FILE_MODE)
    notes += repair_tree(paths.adapters_dir)
    for note in notes:
        log.warning("repaired permissions: %s", note)
    return notes


def within(path: str, root: str) -> bool:
    """True when `path` is `root` or below it; both absolute and normalized (the one such check)."""
    return path == root or path.startswith(root.rstrip("/") + "/")
