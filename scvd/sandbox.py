"""The optional bubblewrap sandbox: probe it once at start, and build its argv.

Rule: `build_argv()` and `check_guard()` are pure (paths in, a list or a raise out, no
I/O). `probe()` is the only code here that runs anything, once at start, and `Sandbox` only resolves
and filters paths (and finds git metadata, gitmeta.py) before calling
`build_argv()`. A session's workspace is never resolved again: its bind must
be the directory the session holds (open_binds()). Nothing here knows tool names.

Mount order: bwrap mounts in argv order and a later mount covers the earlier
ones at and below its path. So mounts are sorted by depth (a parent before its
children), and at the same depth a hiding tmpfs comes before a read-write bind,
which comes before a read-only bind. A hidden directory that contains the
workspace or an agent home is mounted first and the bind re-exposes them.

--die-with-parent is PR_SET_PDEATHSIG, which fires when the parent *thread*
exits, not the process. The process runner spawns bwrap from the event-loop
thread, which lives as long as the daemon, so a call's bwrap dies only with
scvd itself (or when the runner kills it). Never spawn bwrap from a worker
thread (run_in_executor, asyncio.to_thread) unless that thread waits for it, as
the probe does: the child would be killed when the pool thread retires.
"""

from __future__ import annotations

import errno
import functools
import os
import stat
import subprocess
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Collection, Iterable, Mapping, Sequence

from . import gitmeta
from .errors import Failed, LimitExceeded, Unavailable
from .paths import Paths, lookup_dirs, runtime_base, within
from .tools.containment import open_raw

PROBE_TIMEOUT = 10.0
# what the probe runs: its own pid (1 or 2 in the new pid namespace: bwrap's init is 1) and that
# namespace, printed, so that a program that exits 0 without running it (a wrong sandbox.bwrap) or a
# wrapper that runs it outside bwrap's namespaces is not taken for a working sandbox
PROBE_MARK = "scvd-probe"
PROBE_COMMAND = ["/bin/sh", "-c", f'echo "{PROBE_MARK} $$ $(readlink /proc/self/ns/pid 2>/dev/null)"']
PROBE_SHOWN = "the probe (/bin/sh printing its pid)"
INSTALL_HINT = "install bubblewrap (apt install bubblewrap)"

# What bwrap prints when the kernel or an LSM refuses the user namespace. The first
# is upstream's spelling, Debian's patch says "create"; both start the same.
_USERNS_MARKERS = (
    "No permissions to creat",
    "setting up uid map",
    "Creating new namespace failed",
    "RTM_NEWADDR",  # Ubuntu 23.10+ AppArmor: the loopback of --unshare-net cannot be set up
    "max_user_namespaces",
)
_PROC_MARKER = "Can't mount proc"

USERNS_FIX = (
    "allow unprivileged user namespaces: on Ubuntu 23.10+ `sysctl "
    "kernel.apparmor_restrict_unprivileged_userns=0` or an AppArmor profile for bwrap "
    "with `userns,`; elsewhere `sysctl kernel.unprivileged_userns_clone=1` and a "
    "non-zero user.max_user_namespaces"
)
PROC_FALLBACK = (
    "sandboxed commands get an empty /proc (ps and /proc readers fail; the host's /proc "
    "is not shown: it lists every host process and, where ptrace rules allow, reaches "
    "scvd's hidden files through /proc/PID/root); "
    "for a private /proc run scvd where procfs can be mounted (not in a container that "
    "masks /proc, or docker --security-opt systempaths=unconfined)"
)

# namespaces every sandboxed call gets its own of: without ipc, a call saw the host's SysV shared memory
# (ipcs -m), attached to a 0600 segment and wrote it. uts and cgroup share nothing the call needs; the
# cgroup one hides scvd's cgroup path (-try: a kernel without cgroup namespaces still runs the call)
UNSHARED = ("--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try")

# mount ranks at equal depth: hide first, then read-write, then read-only, masks on top
_TMPFS, _RW, _RO, _MASK = 0, 1, 2, 3

# the git guard's mounts (read-only binds and pins) in one call: bwrap's start grows with their square
# (it reads the mount table at each read-only bind): about 2 s at this many here (docs/security.md)
MAX_GUARD_MOUNTS = 500


def build_argv(
    inner: list[str],
    *,
    bwrap: str,
    workspace: Path,
    hide: Sequence[Path],
    network: bool,
    rw_binds: Sequence[Path] = (),
    ro_binds: Sequence[Path] = (),
    proc: bool = True,
    chdir: Path | None = None,
    mask: Sequence[Path] = (),
    approved: bool = False,
    git: Sequence[Path] = (),
    tmpdir: str | None = None,
    scratch: Path | None = None,
    resolve: Callable[[str], str | None] = str,
    keep: Sequence[Path] = (),
) -> list[str]:
    """The bwrap argv that runs `inner` confined to `workspace`. Pure: touches no file
    (but through `resolve`).

    Every path must be absolute and should be a real path (symlinks resolved).
    `hide` (directories) gets an empty tmpfs; `mask` (files, such as a socket
    outside scvd's own directories) gets /dev/null bound over it; `rw_binds`
    (agent homes) stay writable; `ro_binds` are visible read-only. `proc=False`
    mounts an empty tmpfs on /proc, for hosts where procfs cannot be mounted.
    `approved`: a person approved this very call, which keeps only WS/.git/hooks
    and WS/.git/config read-only. Otherwise WS/.git and every `git` path (git
    metadata found by gitmeta.find()) that would be writable is read-only, and
    every directory above it inside a writable bind is pinned (bound onto
    itself) so that none can be renamed away and replaced. `tmpdir` (the child's TMPDIR) is
    made, empty, when it lies in a directory the call sees empty (libpam-tmpdir's /tmp/user/UID):
    else mktemp and compilers fail there with "No such file or directory". When the temp
    directory (TMPDIR, else /tmp) would be read-only (an online call keeps the host's /tmp;
    a TMPDIR such as ~/tmp), `scratch` (a host directory, /var/tmp) is made a private tmpfs
    and the child's TMPDIR: else mktemp, Node and compilers fail with "Read-only file system".
    `resolve` (Sandbox.wrap() passes bound_path()) turns each git path into the one bwrap
    would bind, or None where nothing is: bwrap follows a symlink at a bind's source and
    destination alike, and a call may have made WS/.git one (`.git -> ../../..` bound the
    host's root over the sandbox); and it fails on a source below a file (WS/.git/hooks of a
    linked worktree, whose `.git` is a file). Raises LimitExceeded where the guard would take more
    than MAX_GUARD_MOUNTS mounts. `keep` (the folders loaded tools run from) is read-only and
    pinned as the git metadata is, wherever a bind would make it writable, approved or not: what a
    script tool runs must not change under scvd, as its own folders do not.
    """
    ws = _abs(workspace)
    hide, set_tmpdir = _with_scratch(ws, hide, rw_binds, ro_binds, tmpdir, scratch)
    argv = [bwrap, "--new-session", "--die-with-parent", *UNSHARED]
    if not network:
        argv.append("--unshare-net")
    argv += ["--cap-drop", "ALL", "--ro-bind", "/", "/", "--dev", "/dev"]
    argv += ["--proc", "/proc"] if proc else ["--tmpfs", "/proc"]
    for op, src, path in _mounts(ws, hide, rw_binds, ro_binds, mask, approved=approved, git=git, resolve=resolve,
                                 keep=keep):
        argv += [op, path] if op == "--tmpfs" else [op, src, path]
    if tmpdir and os.path.isabs(tmpdir) and _emptied(os.path.normpath(tmpdir), hide, [ws, *rw_binds, *ro_binds]):
        argv += ["--dir", os.path.normpath(tmpdir)]
    if set_tmpdir:
        argv += ["--setenv", "TMPDIR", _abs(scratch)]
    argv += ["--chdir", _abs(chdir) if chdir is not None else ws, "--", *inner]
    return argv


def check_guard(
    *, workspace: Path, hide: Sequence[Path], rw_binds: Sequence[Path] = (), ro_binds: Sequence[Path] = (),
    mask: Sequence[Path] = (), git: Sequence[Path] = (), tmpdir: str | None = None, scratch: Path | None = None,
    resolve: Callable[[str], str | None] = str, keep: Sequence[Path] = (),
) -> None:
    """Raise LimitExceeded where build_argv() with these arguments, for a call nobody approved, would:
    the git guard alone is worked out (what the limit counts), not the pins above hidden places nor the argv."""
    ws = _abs(workspace)
    hide, _ = _with_scratch(ws, hide, rw_binds, ro_binds, tmpdir, scratch)
    _guard(ws, _plain(ws, hide, rw_binds, ro_binds, mask), git=[ws + "/.git", *map(_abs, git)], keep=keep,
           resolve=resolve)


def _with_scratch(ws: str, hide: Sequence[Path], rw: Sequence[Path], ro: Sequence[Path], tmpdir: str | None,
                  scratch: Path | None) -> tuple[Sequence[Path], bool]:
    """`hide` with `scratch` where the temp directory would be read-only, and whether the child's
    TMPDIR must then be `scratch` (build_argv())."""
    temp = os.path.normpath(tmpdir) if tmpdir and os.path.isabs(tmpdir) else "/tmp"
    if scratch is None or _writable(temp, hide, [ws, *rw], ro):
        return hide, False
    hide = [*hide, scratch]  # ordered with the rest: a workspace below it is bound back
    return hide, not _writable(temp, hide, [ws, *rw], ro)  # not for TMPDIR=/var/tmp/x


def _writable(path: str, hide: Iterable[Path], rw: Iterable[Path | str], ro: Iterable[Path | str]) -> bool:
    """Whether `path` is writable in the sandbox: in a read-write bind, or in a hidden
    directory's tmpfs that no read-only bind covers (the rest of / is bound read-only)."""
    at_or_in = lambda p, d: p == _abs(d) or p.startswith(_abs(d).rstrip("/") + "/")  # noqa: E731
    return (any(at_or_in(path, b) for b in rw)
            or (any(at_or_in(path, h) for h in hide) and not any(at_or_in(path, b) for b in ro)))


def _emptied(path: str, hide: Iterable[Path], binds: Iterable[Path | str]) -> bool:
    """Whether `path` lies in a hidden directory (a fresh tmpfs) and no bind brings it back."""
    inside = lambda p, d: p.startswith(d.rstrip("/") + "/")  # noqa: E731 - below it: the tmpfs holds d itself
    return (any(inside(path, _abs(h)) for h in hide)
            and not any(path == _abs(b) or inside(path, _abs(b)) for b in binds))


_Mount = tuple[int, str, str, str]  # (rank, option, source, path)


def _mounts(
    ws: str, hide: Iterable[Path], rw: Iterable[Path], ro: Iterable[Path], mask: Iterable[Path],
    *, approved: bool = False, git: Iterable[Path] = (), resolve: Callable[[str], str | None] = str,
    keep: Iterable[Path] = (),
) -> list[tuple[str, str, str]]:
    """(option, source, path), parents before children, hide < rw < ro < mask at equal depth."""
    wanted = _plain(ws, hide, rw, ro, mask)
    if approved:
        paths = [_abs(r) for p in (ws + "/.git/hooks", ws + "/.git/config") if (r := resolve(p))]
        tops = [_cover(p, _sorted(wanted)) for p in paths]
        wanted += [(_RO, "--ro-bind-try", p, p) for p, top in zip(paths, tops) if top and top[1] == "--bind"]
    wanted += _guard(ws, wanted, git=[] if approved else [ws + "/.git", *map(_abs, git)], keep=keep, resolve=resolve)
    # a hidden directory or masked socket in a writable bind cannot be renamed (a mount point), but
    # a directory above it could: `mv sub x; mkdir -p sub/scv` left the host a planted SCV_HOME there
    mounted = _sorted(wanted)
    wanted += _pins([m[3] for m in mounted if m[0] in (_TMPFS, _MASK)], mounted)
    return [(op, src, path) for _, op, src, path in _sorted(wanted)]


def _plain(ws: str, hide: Iterable[Path], rw: Iterable[Path], ro: Iterable[Path], mask: Iterable[Path]) -> list[_Mount]:
    """The hides, binds and masks, before any guard or pin."""
    binds = [ws] + [_abs(p) for p in rw] + [_abs(p) for p in ro]
    hides = [_abs(p) for p in hide]
    wanted = [(_TMPFS, "--tmpfs", h, h) for h in hides if not _already_hidden(h, hides, binds)]
    wanted += [(_RW, "--bind", p, p) for p in [ws] + [_abs(p) for p in rw]]
    wanted += [(_RO, "--ro-bind", p, p) for p in map(_abs, ro)]
    masks = [_abs(p) for p in mask]
    wanted += [(_MASK, "--ro-bind", "/dev/null", m) for m in masks if not _already_hidden(m, hides, binds)]
    return wanted


def _guard(ws: str, wanted: list[_Mount], *, git: Iterable[str], keep: Iterable[Path],
           resolve: Callable[[str], str | None]) -> list[_Mount]:
    """_git_guard() of the `git` paths and the `keep` folders, each where it leads.

    git metadata stays read-only: a hook or a core.fsmonitor planted there would run outside the
    sandbox the next time the user runs git. A loaded tool's folder in a writable bind: its `run`
    runs later, unasked if read_only; one guard with the git metadata: guarded after it, a folder
    below a repository's pins stayed writable. Each where it leads: a link out of the writable binds
    needs no guard (all else is read-only or hidden), and bound by its name it would show there what
    it leads to, `/` or scvd's socket."""
    found = [_abs(r) for p in [*git, *map(_abs, keep)] if (r := resolve(p))]
    return _git_guard(ws, found, _sorted(wanted))


def _sorted(mounts: Iterable[_Mount]) -> list[_Mount]:
    return sorted(dict.fromkeys(mounts), key=lambda m: (_depth(m[3]), m[0]))


def _git_guard(ws: str, paths: Iterable[str], mounts: list[_Mount]) -> list[_Mount]:
    """Read-only binds over the git paths that would be writable, and pins above them.

    A read-only bind alone is not enough: its mount point cannot be renamed, but a
    directory above it can, and the host then sees the attacker's copy at the old
    name. So each directory above it that lies inside a writable bind is bound onto
    itself, which makes it a mount point too (rename: EBUSY). A tmpfs above is
    private to the sandbox: what moves there never reaches the host.
    """
    kept: dict[str, None] = {}  # a dict, not a list: each path looks up its ancestors, not every path kept
    for path in sorted(dict.fromkeys(paths), key=_depth):
        top = _cover(path, mounts)
        if top is None or top[1] != "--bind":
            continue  # hidden or already read-only
        if any(k in kept and (top[3] == k or not within(top[3], k)) for k in [*_ancestors(path), path]):
            continue  # inside a git path kept before, with no writable bind in between
        kept[path] = None
    guard = [(_RO, "--ro-bind-try", path, path) for path in kept] + _pins(kept, mounts, guarded=kept)
    if len(guard) > MAX_GUARD_MOUNTS:
        raise LimitExceeded(
            f"keeping the git metadata in {ws} read-only takes {len(guard):,} mounts ({len(kept):,} repositories, "
            f"`.gitmodules` entries and submodule directories, and the directories above them), more than the "
            f"{MAX_GUARD_MOUNTS} one sandbox is given", hint=gitmeta.UNGUARDED_FIX)
    return guard


def _pins(paths: Iterable[str], mounts: list[_Mount], guarded: Collection[str] = ()) -> list[_Mount]:
    """Each directory above `paths` that lies inside a writable bind, bound onto itself (a mount
    point cannot be renamed); up through the workspace too, should it sit in an agent home.
    `guarded` is looked up by each directory (a set or dict: many git paths share their pins)."""
    out: dict[str, _Mount] = {}
    for path in paths:
        inside = "/" in guarded
        for d in _ancestors(path):  # top down: below a guarded path, every pin is inside it
            inside = inside or d in guarded
            if d in out:  # pinned for a path before (as it is now: `inside` depends on d alone)
                continue
            top = _cover(d, mounts)
            if top is not None and top[1] in ("--bind", "--bind-try") and top[3] != d:
                # a pin inside a guarded path must stay read-only: a writable one would
                # bind the host directory back over the guard
                out[d] = (_RO, "--ro-bind-try", d, d) if inside else (_RW, "--bind-try", d, d)
    return list(out.values())


def _cover(path: str, mounts: list[_Mount]) -> _Mount | None:
    """The mount `path` ends up on: the last one at or above it in (sorted) mount order."""
    found = [m for m in mounts if within(path, m[3])]
    return found[-1] if found else None


def _ancestors(path: str) -> list[str]:
    """The directories strictly above `path`, but `/`, top down."""
    parts = path.strip("/").split("/")
    return ["/" + "/".join(parts[:i]) for i in range(1, len(parts))]


def _already_hidden(path: str, hides: list[str], binds: list[str]) -> bool:
    """True if a hide above `path` covers it with no bind in between re-exposing it."""
    for above in hides:
        if above != path and within(path, above):
            if not any(within(b, above) and within(path, b) for b in binds):
                return True
    return False


def _abs(p: Path | str) -> str:
    text = "/" + os.path.normpath(str(p)).lstrip("/") if str(p).startswith("/") else str(p)
    if not os.path.isabs(text):
        raise ValueError(f"sandbox paths must be absolute: {p}")
    return text


def _depth(path: str) -> int:
    return 0 if path == "/" else path.count("/")


def bound_path(path: str) -> str | None:
    """Where `path` leads (symlinks resolved), or None when nothing is there."""
    real = os.path.realpath(path)
    return real if os.path.lexists(real) else None


_BY_FD = {"--bind": "--bind-fd", "--bind-try": "--bind-fd", "--ro-bind": "--ro-bind-fd", "--ro-bind-try": "--ro-bind-fd"}


class BwrapArgv(list):
    """Sandbox.wrap()'s argv: the process runner makes its binds (open_binds()) as it starts bwrap.
    As a plain list it still runs, binding by path.

    `by_fd`: bwrap has --bind-fd. `workspace` and `held`: a session's workspace and the (st_dev,
    st_ino) of the directory the session holds open, the only one its bind may show."""

    def __init__(self, argv: Iterable[str], *, by_fd: bool = True, workspace: str | None = None,
                 held: tuple[int, int] | None = None) -> None:
        super().__init__(argv)
        self.by_fd, self.workspace, self.held = by_fd, workspace, held


def open_binds(argv: list[str]) -> tuple[list[str], list[int]]:
    """`argv` with each bind of a path onto itself (the workspace, the git guard and its pins,
    an agent home) made from an O_PATH fd opened following no symlink, and those fds (the
    caller closes them once bwrap started; bwrap closes its copies before the command runs).

    bwrap follows a symlink where it binds by path: a concurrent call that swapped a guarded
    `.git` for a link to `/` between gitmeta's look and the mount had the host's root bound over
    the sandbox, scvd's socket included. By fd, bwrap binds the directory looked at, and fails
    the call (`Race condition binding dirfd`) if the path no longer leads there. A session's
    workspace is bound only if that fd is the directory the session holds (`_open_held`), `/` too."""
    if not isinstance(argv, BwrapArgv):
        return argv, []
    if not argv.by_fd:  # an older bwrap binds by path: the workspace is checked as late as scvd can
        if argv.workspace is not None and argv.held is not None:
            os.close(_open_held(argv.workspace, argv.held))
        return list(argv), []
    out, fds, i, end = [], [], 0, argv.index("--")
    try:
        while i < end:
            op = argv[i]
            held = argv.held if op == "--bind" and argv[i + 1] == argv[i + 2] == argv.workspace else None
            if op not in _BY_FD or argv[i + 1] != argv[i + 2] or (argv[i + 1] == "/" and held is None):
                out.append(op)
                i += 1
                continue
            path = argv[i + 1]
            fd = _open_bound(path) if held is None else _open_held(path, held)
            if fd is not None:
                fds.append(fd)
                out += [_BY_FD[op], str(fd), path]
            elif not op.endswith("-try") or os.path.lexists(path):
                out += [op, path, path]  # what scvd cannot open (no permission): bwrap says why
            i += 3
    except BaseException:
        close_all(fds)
        raise
    return out + argv[end:], fds


def close_all(fds: Iterable[int]) -> None:
    for fd in fds:
        os.close(fd)


def _open_bound(path: str) -> int | None:
    """An O_PATH fd of `path` (a real path), no symlink followed on the way; None if it cannot be opened."""
    root = os.open("/", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    parts = tuple(part for part in path.split("/") if part)
    if not parts:
        return root
    try:
        fd = open_raw(root, parts, os.O_PATH | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
            return None
        fd = -1
    finally:
        os.close(root)
    if fd < 0 or stat.S_ISLNK(os.fstat(fd).st_mode):
        if fd >= 0:
            os.close(fd)
        raise Failed(f"{path} changed while scvd set up the sandbox (a symlink or a file stands where a "
                     "directory was a moment before): another command is moving it; nothing ran: retry the call")
    return fd


def _open_held(path: str, held: tuple[int, int]) -> int:
    """_open_bound() of a session's workspace: an fd of the very directory the session holds, else
    Failed. The call checked it as it came, but a command (one in a session on the parent) may have
    replaced it since: bound by what its path led to then, a link there had its target bound read-write."""
    try:
        fd = _open_bound(path)
    except Failed:  # a link or a file there now
        fd = None
    if fd is not None:
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) == held:
            return fd
        os.close(fd)
    raise workspace_replaced(path)


def workspace_replaced(path: str) -> Failed:
    """A session's workspace that names another directory (or none) as its call starts."""
    return Failed(f"the workspace {path} was replaced while the call started (moved away, or a link or another "
                  "directory put in its place): nothing ran; retry the call once it is back, or open a new session "
                  "on the directory you mean", hint="a command in another session may be moving it")


@dataclass(frozen=True)
class ProbeResult:
    """What the start-up probe found. `verdict` is one line that says what to do."""

    mode: str  # sandbox.mode: off | auto | bwrap
    ok: bool  # bwrap ran PROBE_COMMAND under the real argv, in a pid namespace of its own
    verdict: str
    proc: bool = True  # False: /proc could not be mounted, an empty tmpfs is used
    bwrap: str | None = None  # the resolved bwrap path
    fd_binds: bool = True  # bwrap has --bind-fd (0.10, or a distribution's backport): binds by fd


def hidden_paths(paths: Paths, env: Mapping[str, str]) -> list[Path]:
    """scvd's own directories (Paths.roots()), hidden inside the sandbox (candidates; may not exist),
    and keyring's folder, where a file-backed keyring keeps every secret scvd stores in it.

    The whole XDG_RUNTIME_DIR goes too: it holds the systemd user manager's and
    the D-Bus session sockets, through which a process could start commands
    outside the sandbox (systemd-run --user). So does /run/user/<uid>, where those
    sockets are when XDG_RUNTIME_DIR names another directory (one inherited from
    another user through `su`, which platformdirs skips for scvd's socket too).
    """
    keyring = [paths.keyring_dir] if paths.keyring_dir else []
    return [*paths.roots(), *keyring, runtime_base(env), runtime_base({})]


# Unix sockets that lead out of a sandbox live here: tmux, screen, X11 and ssh-agent in
# /tmp; docker, the D-Bus system bus and systemd in /run. --unshare-net does not cover
# sockets reached by path, so an offline call (the kind the sandbox-aware policy may run
# unasked) gets empty ones. Online calls keep them: resolv.conf often points into /run,
# and agent CLIs may be installed under /tmp; they are always asked first.
PRIVATE_OFFLINE = (Path("/tmp"), Path("/var/tmp"), Path("/run"))


# made a private tmpfs, and the child's TMPDIR, when its temp directory would be read-only
SCRATCH = Path("/var/tmp")


def private_dirs(network: bool) -> list[Path]:
    """Host directories a sandboxed call sees empty (its own tmpfs instead)."""
    return [] if network else list(PRIVATE_OFFLINE)


def masked_files(paths: Paths, listening_on: str | None = None, config_file: str | None = None) -> list[Path]:
    """A socket moved out of scvd's runtime dir (SCV_SOCKET) is masked by itself,
    rather than hiding whatever directory it sits in (/tmp, a home). So is the one
    scvd really listens on, when systemd handed over another (a ListenStream= of
    the user's choosing): through it a sandboxed process could run scvd's tools.
    So is the config file scvd reads (`--config`) wherever it lies: a read of it asks; and the
    file KEYRING_PROPERTY_FILE_PATH gives a file-backed keyring (every secret scvd stores there)."""
    found = [] if paths.socket.parent == paths.runtime_dir else [paths.socket]
    if listening_on and listening_on.startswith("/"):  # not an abstract name
        real = Path(listening_on)
        if real != paths.socket and real.parent != paths.runtime_dir:
            found.append(real)
    if config_file:  # inside scvd's folders it is hidden with them (build_argv leaves the mask out)
        found.append(Path(config_file))
    if paths.keyring_file:
        found.append(paths.keyring_file)
    return found


def probe(sandbox_config: Any, paths: Paths, env: Mapping[str, str] | None = None,
          listening_on: str | None = None, config_file: str | None = None) -> ProbeResult:
    """Run PROBE_COMMAND under the real argv once and classify what went wrong. Blocking.
    The argv is Sandbox.wrap()'s for an unasked call in an empty workspace (`listening_on` and
    `config_file` as Sandbox's)."""
    env = dict(os.environ if env is None else env)
    mode = sandbox_config.mode
    if mode == "off":
        return ProbeResult(mode, False, "sandbox.mode = off: tools run unsandboxed")
    bwrap, problem = locate(sandbox_config.bwrap, env)
    if problem:
        return ProbeResult(mode, False, problem, bwrap=bwrap)
    assert bwrap is not None
    env["LC_ALL"] = "C"  # bwrap's messages carry strerror text; keep it matchable
    import tempfile  # here: it imports shutil, bz2, lzma and random, which the idle daemon does without

    # in scvd's own state directory, made at start: a full /tmp or a TMPDIR that is gone kept scvd
    # from starting. `check-config` of an instance that never ran has none yet: the temp directory.
    where = paths.state_dir if paths.state_dir.is_dir() else None
    try:
        probe_dir = tempfile.TemporaryDirectory(prefix="scvd-probe-", dir=where)
    except OSError as exc:
        return ProbeResult(mode, False, (
            f"cannot make an empty directory for the probe in {where or 'the temp directory'} "
            f"({exc.strerror or exc}): make room there, or set sandbox.mode = off"), bwrap=bwrap)
    fd_binds = True
    with probe_dir as ws:
        def attempt(proc: bool) -> str | None:
            nonlocal fd_binds
            trial = Sandbox(ProbeResult(mode, True, "", proc, bwrap, fd_binds), paths, env, listening_on,
                            config_file=config_file)
            argv = trial.wrap(PROBE_COMMAND, workspace=Path(ws), network=sandbox_config.network, git=[])
            error = _run_probe(argv, env)
            if error is not None and fd_binds and "Unknown option --bind-fd" in error:
                fd_binds = False  # an older bwrap: binds by path, which a concurrent call can race
                return attempt(proc)
            return error

        return replace(_classify(mode, bwrap, sandbox_config.network, attempt), fd_binds=fd_binds)


def _classify(mode: str, bwrap: str, network: bool, attempt: Any) -> ProbeResult:
    error = attempt(True)
    if error is None:
        return ProbeResult(mode, True, _works(bwrap, network, proc=True), True, bwrap)
    if _PROC_MARKER in error:
        retry = attempt(False)
        if retry is None:
            verdict = f"{_works(bwrap, network, proc=False)}: {error}; {PROC_FALLBACK}"
            return ProbeResult(mode, True, verdict, False, bwrap)
        verdict = f"/proc cannot be mounted ({error}) and the retry with an empty /proc failed: "
        return ProbeResult(mode, False, verdict + _explain(retry, bwrap), False, bwrap)
    return ProbeResult(mode, False, _explain(error, bwrap), True, bwrap)


def _works(bwrap: str, network: bool, *, proc: bool) -> str:
    net = "network unshared" if not network else "network kept (sandbox.network = true)"
    proc_text = "private /proc" if proc else "no private /proc"
    return f"bwrap works at {bwrap} (user, pid, ipc and uts namespaces, {proc_text}, {net})"


class _Verdict(str):
    """A probe failure that is a whole verdict already (not bwrap's line to be explained)."""


def _explain(error: str, bwrap: str) -> str:
    if isinstance(error, _Verdict):
        return error
    if any(marker in error for marker in _USERNS_MARKERS):
        return f"user namespaces refused ({error}): {USERNS_FIX}"
    if _PROC_MARKER in error:
        return f"/proc cannot be mounted ({error})"
    return f"{bwrap} cannot run {PROBE_SHOWN} ({error}): run it by hand to see why, or set sandbox.mode = off"


def locate(name: str, env: Mapping[str, str]) -> tuple[str | None, str | None]:
    """(path, None) for a usable bwrap, else (path or None, a one-line verdict)."""
    if "/" in name:
        path: str | None = os.path.abspath(os.path.expanduser(name))  # config allows only / and ~/
        if not os.path.isfile(path):
            return path, f"bwrap not found at {path} (sandbox.bwrap): {INSTALL_HINT} or fix sandbox.bwrap"
    else:
        import shutil  # here: it imports bz2 and lzma, which the idle daemon does without

        path = shutil.which(name, path=env.get("PATH", os.defpath))
        if path is None:
            return None, (
                f"bwrap not found on PATH ({name}): {INSTALL_HINT}, "
                "or set sandbox.bwrap to its full path"
            )
    st = os.stat(path)
    if st.st_mode & stat.S_ISUID and st.st_uid != os.geteuid():
        return path, (
            f"{path} is setuid (owner uid {st.st_uid}), which scvd does not support: a setuid "
            "bwrap sets up the sandbox with its owner's privileges; install a non-setuid "
            f"bubblewrap (chmod u-s {path}) and {USERNS_FIX}"
        )
    return path, None


def _run_probe(argv: list[str], env: Mapping[str, str]) -> str | None:
    """None when the probe command succeeded, else bwrap's complaint in one line."""
    argv, fds = open_binds(argv)
    try:
        # no new session: the process runner takes scvd's children in other sessions for
        # orphans of a call, and a call ending during a reload's probe would kill the probe
        done = subprocess.run(
            argv, stdin=subprocess.DEVNULL, capture_output=True, env=env, timeout=PROBE_TIMEOUT, pass_fds=fds,
        )
    except subprocess.TimeoutExpired:
        return f"bwrap did not finish {PROBE_SHOWN} within {PROBE_TIMEOUT:g} s"
    except OSError as exc:
        return f"cannot execute {argv[0]}: {exc.strerror or exc}"
    finally:
        close_all(fds)
        # bwrap leaves its pid namespace's init to scvd (the subreaper), a zombie once it exits: a
        # reload's probe of an idle daemon has no call whose end would reap it
        from .process import reap_orphans  # here: process imports this module

        reap_orphans()
    if done.returncode == 0:
        return _isolated(argv[0], done.stdout)
    return first_line(done.stderr.decode("utf-8", "replace")) or f"exit status {done.returncode}"


def _isolated(bwrap: str, out: bytes) -> str | None:
    """None when the probe's output shows it ran in a pid namespace of its own, else the verdict."""
    words = out.decode("utf-8", "replace").split("\n", 1)[0].split()
    fix = "fix sandbox.bwrap, or set sandbox.mode = off"
    if not words or words[0] != PROBE_MARK or len(words) < 2:
        return _Verdict(f"{bwrap} exited 0 without running {PROBE_SHOWN} (it printed "
                        f"{first_line(out.decode('utf-8', 'replace')) or 'nothing'}): sandbox.bwrap must name "
                        f"bubblewrap itself: {fix}")
    try:
        ours = os.readlink("/proc/self/ns/pid")
    except OSError:
        ours = None
    # bwrap's init is pid 1 and the command 2 (1 with --as-pid-1); the namespace is unreadable only
    # where /proc is an empty tmpfs (the fallback)
    if words[1] not in ("1", "2") or len(words) > 2 and words[2] == ours:
        return _Verdict(f"{bwrap} ran {PROBE_SHOWN} outside a pid namespace of its own (pid {words[1]}): "
                        f"sandbox.bwrap must name bubblewrap, not a wrapper that runs commands outside it: {fix}")
    return None


def first_line(text: str, limit: int = 240) -> str:
    """The first meaningful line of bwrap's stderr, bounded: preferably one saying `bwrap:`."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    chosen = next((line for line in lines if line.startswith("bwrap:")), lines[0] if lines else "")
    return chosen if len(chosen) <= limit else chosen[: limit - 3] + "..."


@functools.lru_cache(maxsize=256)  # asked at every call: one answer per workspace (a frozenset keeps its hash)
def _holds(workspace: str, places: frozenset[str]) -> bool:
    return any(within(place, workspace) for place in places)


def _existing(candidates: Iterable[Path]) -> list[Path]:
    """Real paths of the directories that exist; never `/` (that would hide everything)."""
    out: list[Path] = []
    for p in candidates:
        real = Path(os.path.realpath(p))
        if real != Path("/") and real.is_dir() and real not in out:
            out.append(real)
    return out


def _real(path: Path | str) -> Path:
    return Path(os.path.realpath(path))


def _present(files: Iterable[Path]) -> list[Path]:
    """Real paths of the files that exist now (a mount needs an existing target)."""
    return [_real(f) for f in files if os.path.lexists(f)]


def describe(probe: ProbeResult) -> str:
    """One line for `scvctl status` and `scvd check-config`."""
    if probe.mode == "off":
        return "off: tools run unsandboxed (sandbox.mode = off)"
    if probe.ok:
        return f"active: {probe.verdict}"
    if probe.mode == "auto":
        return f"unsandboxed (sandbox.mode = auto): {probe.verdict}"
    return (
        f"unavailable (sandbox.mode = bwrap, sandboxed calls fail): {probe.verdict}; "
        "fix it and reload or restart scvd, or set sandbox.mode = auto"
    )


class Sandbox:
    """The sandbox of a running daemon: the probe's result plus the paths to hide.

    `active` is true only when sandbox.mode is not off and the probe passed.
    With mode `bwrap` and a failed probe the daemon still starts (status shows
    the verdict), but `check()` and `wrap()` raise Unavailable for every call
    that would run sandboxed. With mode `auto` they run unsandboxed.
    """

    def __init__(self, probe: ProbeResult, paths: Paths, env: Mapping[str, str] | None = None,
                 listening_on: str | None = None, *, config_file: str | None = None,
                 keep: Callable[[], Iterable[str]] = tuple) -> None:
        # no network setting here: each call passes its session's sandbox.network to wrap()
        self.probe = probe
        self.active = probe.mode != "off" and probe.ok
        self.required = probe.mode == "bwrap"
        env = os.environ if env is None else env
        self._hide = hidden_paths(paths, env)
        self._tmpdir = env.get("TMPDIR")  # what the children get (the allow-lists pass it on)
        self._scratch = next(iter(_existing([SCRATCH])), None)  # a tmpfs needs an existing mount point
        self._mask = masked_files(paths, listening_on, config_file)
        self._hidden_real = frozenset(os.path.realpath(p) for p in [*self._hide, *PRIVATE_OFFLINE])
        self._guarded = frozenset().union(*map(lookup_dirs, [*self._hide, *self._mask]))
        self._hidden_always = frozenset(os.path.realpath(p) for p in self._hide)  # online calls see PRIVATE_OFFLINE
        self._keep = keep  # the folders loaded tools run from, as the daemon has them now (own_places)

    def describe(self) -> str:
        return describe(self.probe)

    def reaches_hidden(self, workspace: str) -> bool:
        """Whether an unasked call in `workspace` (a real path) could see or swap what the sandbox
        hides: it is itself a directory an offline call sees empty (/tmp, /run, XDG_RUNTIME_DIR, one
        of scvd's; its bind shows the host's again, sockets and all), or it holds, at any depth, one
        of those the sandbox hides for scvd or a socket it masks, or a directory a lookup of one
        passes through (a link on the way: `ws/link -> /srv/scv`). The tmpfs deeper down keeps the
        call from seeing it, not from renaming what lies above it or replacing the link, and the
        daemon finds the call's own folder there at its next start (docs/security.md)."""
        return workspace in self._hidden_real or _holds(workspace, self._guarded)

    def check(self) -> None:
        """Raise Unavailable when calls must be sandboxed but cannot be (call it in plan())."""
        if self.required and not self.active:
            raise Unavailable(
                f"the sandbox is required (sandbox.mode = bwrap) but unavailable: {self.probe.verdict}",
                hint="fix the sandbox and reload or restart scvd, or set sandbox.mode = auto",
            )

    def wrap(
        self,
        inner: list[str],
        *,
        workspace: Path,
        network: bool,
        rw_binds: Sequence[Path] = (),
        chdir: Path | None = None,
        ro_binds: Sequence[Path] = (),
        approved: bool = False,
        git: Sequence[str] | None = None,
        workspace_fd: int | None = None,
    ) -> list[str]:
        """`inner` wrapped in bwrap when active; unchanged in auto mode when not; else raises.

        `approved`: a person approved this very call (CallContext.approved). Any
        other call, or a process that serves many calls, gets the workspace's git
        metadata read-only (build_argv): `git` as found by look(), found here when
        not given; raises LimitExceeded where that metadata cannot all be kept read-only.
        `workspace_fd`: a session's workspace, the fd it holds: `workspace` (its real path,
        checked against the fd as the call came) is not resolved again, and bound only while
        it is that directory (open_binds()).
        """
        self.check()
        if not self.active:
            return list(inner)
        assert self.probe.bwrap is not None
        ws = _real(workspace) if workspace_fd is None else Path(_abs(workspace))
        argv = build_argv(
            inner,
            bwrap=self.probe.bwrap,
            network=network,
            proc=self.probe.proc,
            chdir=_real(chdir) if chdir is not None else None,
            approved=approved,
            **self._layout(ws, network, [] if approved else (self._find(str(ws)) if git is None else git),
                           rw_binds, ro_binds),
        )
        held = None
        if workspace_fd is not None:
            st = os.fstat(workspace_fd)
            held = (st.st_dev, st.st_ino)
        return BwrapArgv(argv, by_fd=self.probe.fd_binds, workspace=str(ws), held=held)

    async def wrap_call(self, inner: list[str], ctx: Any, *, network: bool, **binds: Any) -> list[str]:
        """wrap() for a tool call in a session, from its CallContext: the workspace as the session
        holds it (path and fd), whether a person approved this very call, and the git metadata
        look() found before the gate (else found here). An unasked call's is made on a worker thread.

        gitmeta.find() walks the whole workspace, and the argv of many guarded paths takes tens
        of ms to build: on the loop, either would hold every other client.
        """
        where = dict(workspace=Path(ctx.workspace), workspace_fd=ctx.workspace_fd, network=network)
        if not self.active or ctx.approved:
            return self.wrap(inner, approved=ctx.approved, **where, **binds)
        import asyncio

        return await asyncio.to_thread(self.wrap, inner, approved=False, git=ctx.git, **where, **binds)

    def look(self, workspace: Path, network: bool) -> list[str]:
        """The git metadata a call in `workspace` that nobody approved gets read-only; raises
        LimitExceeded (its message says why, for the approver) where it cannot all be kept so.
        Blocking: it walks the whole workspace."""
        self.check()
        ws = Path(_abs(workspace))  # a session's real path, not resolved again
        git = self._find(str(ws))
        if self.active:  # the guard's mounts counted as wrap() would make them, without its argv
            check_guard(**self._layout(ws, network, git))
        return git

    def _layout(self, ws: Path, network: bool, git: Sequence[str], rw_binds: Sequence[Path] = (),
                ro_binds: Sequence[Path] = ()) -> dict[str, Any]:
        """What build_argv() and check_guard() both take: the places hidden, bound and guarded now."""
        return dict(
            workspace=ws, hide=_existing([*self._hide, *private_dirs(network)]),
            rw_binds=[_real(p) for p in rw_binds],
            ro_binds=[_real(p) for p in ro_binds],  # e.g. a script tool's folder, inside hidden SCV_HOME
            mask=_present(self._mask), git=[Path(p) for p in git], tmpdir=self._tmpdir, scratch=self._scratch,
            resolve=bound_path, keep=[Path(p) for p in self._keep()])

    def _find(self, workspace: str) -> list[str]:
        # what the sandbox hides is a fresh tmpfs: nothing planted there reaches the host
        return gitmeta.find(workspace, skip=self._hidden_always)
