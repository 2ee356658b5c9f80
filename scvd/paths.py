"""Where an scvd instance keeps its files, and keeping them private (0700 dirs, 0600 files).

With `SCV_HOME` set, everything of the instance lives under it. Without it the
XDG layout from platformdirs is used. `SCV_SOCKET` overrides the socket path.
Every directory comes from the environment `resolve()` is given.
"""

from __future__ import annotations

import errno
import itertools
import logging
import os
import stat
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Mapping

from . import errors
from .keyring_files import keyring_dir, keyring_file

if TYPE_CHECKING:
    import platformdirs

log = logging.getLogger("scvd.paths")

APP = "scv"
DIR_MODE = 0o700
FILE_MODE = 0o600
LOOKUP_TIMEOUT = 30.0  # the child that asks platformdirs in another environment


@dataclass(frozen=True)
class Paths:
    """Every path of one instance; `home` is SCV_HOME when set."""

    home: Path | None
    config_dir: Path
    data_dir: Path
    state_dir: Path
    runtime_dir: Path
    socket: Path
    # not scvd's, but where a file-backed keyring keeps the secrets scvd stores (scvd/keyring_files.py)
    keyring_dir: Path | None = None
    keyring_file: Path | None = None

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
    def tools_dirs(self) -> tuple[Path, ...]:
        """Where the user's tools are: seed 003's `<config dir>/tools`, then `<data dir>/tools`
        (where scvd read them first); one folder once (SCV_HOME is both dirs)."""
        return tuple(dict.fromkeys([self.config_dir / "tools", self.data_dir / "tools"]))

    @property
    def mcp_dir(self) -> Path:
        return self.data_dir / "mcp"  # each stdio server's default cwd: mcp/<name>

    @property
    def chat_dir(self) -> Path:
        return self.state_dir / "chat"  # the chat transcripts

    @property
    def audit_log(self) -> Path:
        return self.state_dir / "audit.log"

    @property
    def lock_file(self) -> Path:
        return self.state_dir / "scvd.lock"

    @property
    def pid_file(self) -> Path:
        return self.state_dir / "scvd.pid"

    def roots(self) -> list[Path]:
        """The directories that hold the instance's files, the one list of them: SCV_HOME (else the
        config and data directories), then the state and runtime (socket) directories, named even
        inside SCV_HOME: the sandbox hides them again below a workspace that is SCV_HOME."""
        found = [self.home] if self.home else [self.config_dir, self.data_dir]
        return list(dict.fromkeys([*found, self.state_dir, self.runtime_dir]))

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
    """XDG_RUNTIME_DIR, else /run/user/<uid>: what the sandbox hides whole, usable or not."""
    value = env.get("XDG_RUNTIME_DIR")
    if value:
        return Path(value)
    return Path(f"/run/user/{os.getuid()}")


@dataclass(frozen=True)
class UserDirs:
    """platformdirs' answers for one environment."""

    config_home: str  # XDG_CONFIG_HOME or ~/.config (systemd's user units live below it)
    config: str
    data: str
    state: str
    runtime: str | None  # None: no usable runtime dir


def user_dirs(env: Mapping[str, str] | None = None) -> UserDirs:
    """platformdirs' answers in `env` (default: os.environ).

    platformdirs reads only os.environ, so another environment is asked of a
    child process that has it; os.environ is never changed for it.
    """
    if env is None or env is os.environ or dict(env) == dict(os.environ):
        return _platform_dirs()
    import json
    import subprocess

    code = "import json, sys; sys.path[:0] = json.loads(sys.argv[1]); " \
        "from dataclasses import asdict; from scvd.paths import _platform_dirs; " \
        "print(json.dumps(asdict(_platform_dirs())))"
    done = subprocess.run([sys.executable, "-I", "-c", code, json.dumps(sys.path)], env=dict(env),
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=LOOKUP_TIMEOUT)
    if done.returncode != 0:
        why = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        raise OSError(f"cannot look up the XDG directories in the given environment: {why}")
    return UserDirs(**json.loads(done.stdout))


def _platform_dirs() -> UserDirs:
    import platformdirs  # only without SCV_HOME: it costs a start some ms (tempfile, shutil)

    dirs = platformdirs.PlatformDirs(APP)
    return UserDirs(config_home=platformdirs.user_config_dir(), config=dirs.user_config_dir,
                    data=dirs.user_data_dir, state=dirs.user_state_dir, runtime=_runtime_dir(dirs))


def _runtime_dir(dirs: platformdirs.PlatformDirs) -> str | None:
    """platformdirs' runtime dir when it lies in XDG_RUNTIME_DIR or /run/user/<uid> (DESIGN.md),
    which must exist; None otherwise (its own last resort, /tmp/runtime-<uid>, is not used)."""
    import warnings

    import platformdirs

    with warnings.catch_warnings():
        # it warns when XDG_RUNTIME_DIR is unset or unsafe; MCP hosts start clients without it
        warnings.simplefilter("ignore", platformdirs.RuntimeDirWarning)
        try:
            runtime = Path(dirs.user_runtime_dir)
        except (PermissionError, RuntimeError):
            return None
    accepted = {Path(f"/run/user/{os.getuid()}")}
    if os.environ.get("XDG_RUNTIME_DIR"):
        accepted.add(Path(os.environ["XDG_RUNTIME_DIR"]))
    return str(runtime) if runtime.parent in accepted and runtime.parent.is_dir() else None


def resolve(env: Mapping[str, str] | None = None) -> Paths:
    """The instance's paths from SCV_HOME / SCV_SOCKET / XDG in `env` (default: os.environ)."""
    env = os.environ if env is None else env
    home = env.get("SCV_HOME")
    if home:
        root = _absolute("SCV_HOME", home, env)
        paths = dict(
            home=root,
            config_dir=root,
            data_dir=root,
            state_dir=root / "state",
            runtime_dir=root / "run",
        )
    else:
        dirs = user_dirs(env)
        paths = dict(
            home=None,
            config_dir=Path(dirs.config),
            data_dir=Path(dirs.data),
            state_dir=Path(dirs.state),
            # no usable runtime dir at all: a private one under the state dir
            runtime_dir=Path(dirs.runtime) if dirs.runtime else Path(dirs.state) / "run",
        )
    sock = env.get("SCV_SOCKET")
    socket = _absolute("SCV_SOCKET", sock, env) if sock else paths["runtime_dir"] / "scvd.sock"
    return Paths(socket=socket, keyring_dir=keyring_dir(env), keyring_file=keyring_file(env), **paths)


def _absolute(name: str, value: str, env: Mapping[str, str]) -> Path:
    """`~` from env's HOME, then absolute against the working directory."""
    if value == "~" or value.startswith("~/"):
        # an empty HOME (`env HOME= scvd`) made `~/x` into `/x`, as expanduser() does
        value = (env.get("HOME") or os.environ.get("HOME") or _account_home()) + value[1:]
    try:
        path = Path(value).expanduser()
    except RuntimeError:  # `~bob/x` where no account bob exists: a traceback in scvd and every scvctl command
        raise errors.ConfigError(f"{name}={value}: {value.split('/', 1)[0]} names no user account on this "
                                 "machine; use ~/ (your home) or an absolute path") from None
    return absolute(path, f"{name}={value}")


def absolute(path: Path, what: str) -> Path:
    """`path` made absolute against the working directory; `what` names it when that directory is gone."""
    try:
        return path.absolute()
    except FileNotFoundError:  # os.getcwd() in a removed directory: was a traceback
        raise errors.ConfigError(f"{what} is relative and the current directory no longer exists: cd to a "
                                 "directory that exists, or give an absolute path") from None


def _account_home() -> str:
    """The home directory of this uid's account, where no HOME says one."""
    import pwd

    try:
        return pwd.getpwuid(os.getuid()).pw_dir or "/"
    except KeyError:  # a uid with no account (a container's): what expanduser() gives, too
        return "/"


def read_regular_file(path: Path, limit: int = -1) -> bytes:
    """The bytes of the regular file at `path` (up to `limit` + 1 with a limit, to tell it was larger).

    A FIFO, socket or device in its place raises NotARegularFile instead of blocking the reader
    for good (a FIFO opened for reading waits for a writer); FileNotFoundError when there is none.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = ("a FIFO" if stat.S_ISFIFO(mode) else "a directory" if stat.S_ISDIR(mode)
                    else "a socket" if stat.S_ISSOCK(mode) else "a device")
            raise errors.NotARegularFile(path, kind)
        with os.fdopen(os.dup(fd), "rb") as f:
            return f.read() if limit < 0 else f.read(limit + 1)
    finally:
        os.close(fd)


def make_dirs(path: Path) -> None:
    """Create `path` and each missing parent 0700, as the XDG base directory spec asks of a missing
    one; one there already is left as it is. The one way scvd and scvctl create a directory chain:
    mkdir(parents=True) gives the parents the umask's mode, and under umask 000 a fresh ~/.local was
    0777, where any user could plant ~/.local/bin/*."""
    missing = itertools.takewhile(lambda d: not os.path.lexists(d), path.parents)
    for d in reversed(list(missing)):  # a file on the way fails below it, as mkdir says (Not a directory)
        d.mkdir(mode=DIR_MODE, exist_ok=True)  # exist_ok: another process may make it meanwhile
    path.mkdir(mode=DIR_MODE, exist_ok=True)


def ensure_private_dir(path: Path) -> str | None:
    """Create `path` (and parents) 0700, or tighten it; return a repair note or None."""
    make_dirs(path)
    st = path.stat()
    if stat.S_IMODE(st.st_mode) & 0o077:
        old = stat.S_IMODE(st.st_mode)
        os.chmod(path, DIR_MODE)
        return f"tightened {path} from {old:04o} to 0700"
    return None


def repair_tree(root: Path) -> list[str]:
    """Make every directory under `root` 0700 and every file 0600; symlinks are left alone.

    Agent CLIs create their own folders 0755, so this runs after each agent run too. The
    walk holds each directory open and looks at its entries through it, so an agent that
    swaps a folder or file of its home for a symlink never has scvd change what it leads to.
    """
    notes: list[str] = []
    if not root.is_dir() or root.is_symlink():
        return notes
    for dirpath, dirnames, filenames, dir_fd in os.fwalk(root):
        for name, want in [(d, DIR_MODE) for d in dirnames] + [(f, FILE_MODE) for f in filenames]:
            notes += _fix_mode(os.path.join(dirpath, name), want, name=name, dir_fd=dir_fd)
    notes += _fix_mode(str(root), DIR_MODE)
    return notes


def _fix_mode(p: str, want: int, *, name: str | None = None, dir_fd: int | None = None) -> list[str]:
    """Tighten `p` (or `name` in the directory `dir_fd`); the note of what changed."""
    try:
        st = os.lstat(name or p, dir_fd=dir_fd)
    except FileNotFoundError:
        return []
    if stat.S_ISLNK(st.st_mode):
        return []
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o077 == 0:
        return []
    # keep the owner's bits (an executable stays executable), drop group and other
    fixed = mode & 0o700 | (want & 0o700 if stat.S_ISDIR(st.st_mode) else 0)
    try:
        if not _chmod_seen(name or p, st, fixed, dir_fd):
            return []
    except OSError as exc:  # named by the path, not by the descriptor it went through
        raise OSError(exc.errno, exc.strerror, p) from None
    return [f"tightened {p} from {mode:04o} to {fixed:04o}"]


def _chmod_seen(p: str, seen: os.stat_result, mode: int, dir_fd: int | None) -> bool:
    """chmod the very file `seen` describes; False when `p` is something else by now.

    An agent may swap the entry for a symlink between the look and the chmod: a chmod by
    path would then follow it out of the home. The file is opened without following (O_PATH
    needs no permission on it) and changed through that descriptor, /proc/self/fd/N.
    """
    try:
        fd = os.open(p, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    except FileNotFoundError:  # gone since: another run of the same agent renamed its temp file
        return False
    try:
        now = os.fstat(fd)
        # a symlink (or another file) in its place; a symlink made at once may reuse the inode number
        if not os.path.samestat(seen, now) or stat.S_IFMT(seen.st_mode) != stat.S_IFMT(now.st_mode):
            return False
        os.chmod(f"/proc/self/fd/{fd}", mode)
    finally:
        os.close(fd)
    return True


def why_not(path: Path, exc: OSError) -> str:
    """Why `path` cannot be made or read: the one that is no directory where `path` needs one (a
    file, SCV_HOME naming config.toml), not the OS's `File exists` / `Not a directory`; else its words."""
    if isinstance(exc, (FileExistsError, NotADirectoryError)):
        for p in [*reversed(path.parents), path]:
            if os.path.lexists(p) and not p.is_dir():
                return f"{p} is not a directory"
    return exc.strerror or str(exc)


def unopenable(what: str, path: Path, exc: OSError) -> str:
    """Why `what` (the audit log, the lock file) at `path` cannot be opened, and what to do."""
    if exc.errno == errno.ELOOP:  # O_NOFOLLOW: scvd never writes where a link points
        return (f"{what} {path} is a symbolic link, which scvd does not follow; put the file itself "
                "there (or remove the link), or give the instance another state directory (SCV_HOME)")
    if exc.errno == errno.EISDIR:
        return f"{what} {path} is a directory; move it away, so scvd can make the file there"
    return (f"cannot open {what} {path} ({exc.strerror or exc}); check that it and {path.parent} are yours "
            "and writable (one a `sudo scvd` left is root's: remove it), with room to write")


def _not_private(d: Path, exc: OSError) -> str:
    """Why the directory `d` of this scvd is not there, 0700: not made, or there and its chmod failed."""
    if not d.is_dir():
        return (f"cannot create {d}, a directory of this scvd: {why_not(d, exc)}; move that away, or set "
                "SCV_HOME to another directory")
    # there: its chmod 0700 failed (a read-only file system; root's, after a `sudo scvd`)
    return (f"{d}, a directory of this scvd, is open to others and chmod 0700 failed ({exc.strerror or exc}): "
            f"make it yours and private (sudo chown -R $USER {d}; chmod 0700 {d}), or set SCV_HOME to another "
            "directory")


def prepare(paths: Paths) -> list[str]:
    """Create the instance's directories 0700 and repair loose modes; return what was repaired."""
    notes: list[str] = []
    for d in paths.private_dirs():
        try:
            note = ensure_private_dir(d)
        except OSError as exc:
            raise errors.StartupError(_not_private(d, exc)) from exc
        if note:
            notes.append(note)
    for f in (paths.config_file, paths.secrets_file, paths.audit_log, paths.lock_file, paths.pid_file):
        notes += _fix_mode(str(f), FILE_MODE)
    try:
        notes += repair_tree(paths.adapters_dir)
    except OSError as exc:  # one agent's home: that agent's calls are refused (adapters/homes.py), not scvd
        log.warning("cannot make %s private (%s); the agent whose home holds it is refused until that is fixed",
                    exc.filename, exc.strerror or exc)
    for note in notes:
        log.warning("repaired permissions: %s", note)
    return notes


def within(path: str, root: str) -> bool:
    """True when `path` is `root` or below it; both absolute and normalized (the one such check)."""
    return path == root or path.startswith(root.rstrip("/") + "/")


def lookup_dirs(path: Path | str) -> frozenset[str]:
    """The real directories in which a lookup of `path` (absolute) reads an entry, each link on the
    way followed as the kernel does, through its target's own directories too, and the real path
    `path` leads to. Whoever can write in one of them can put a directory, file or link of their
    own where `path` leads (`mv a b; mkdir -p a/scv`, or a link replaced)."""
    found: set[str] = set()
    _walk(os.fspath(path), found, LINKS_FOLLOWED)
    return frozenset(found)


LINKS_FOLLOWED = 40  # as the kernel's ELOOP limit


def _walk(path: str, found: set[str], links: int) -> str:
    """Resolve `path` one entry at a time from `/`, adding each directory looked in to `found`."""
    cur = "/"
    for part in path.split("/"):
        if part in ("", "."):
            continue
        found.add(cur)
        nxt = os.path.dirname(cur) if part == ".." else os.path.join(cur, part)
        target = _link(nxt) if part != ".." else None
        if target is None:
            cur = nxt
        elif links <= 0:  # a loop: what realpath makes of it
            cur = os.path.realpath(nxt)
        else:
            cur = _walk(os.path.join(cur, target), found, links - 1)
    found.add(cur)
    return cur


def _link(path: str) -> str | None:
    try:
        return os.readlink(path)
    except OSError:  # not a link, or not there
        return None


def find_program(name: str, path: str) -> str | None:
    """Where a lookup of `name` on `path` (a PATH value) finds an executable file, as shutil.which
    does; without shutil, which brings bz2 and lzma that the idle daemon does without."""
    for folder in path.split(os.pathsep):
        found = os.path.join(folder or ".", name)
        if os.access(found, os.X_OK) and not os.path.isdir(found):
            return found
    return None
