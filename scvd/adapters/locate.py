"""Finding what a delegated run needs on disk: the executable and the working directory."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import Mapping

from ..errors import InvalidArguments, NotARegularFile, PathMissing, ToolError, Unavailable
from ..paths import read_regular_file
from ..tools import containment
from ..tools.containment import show
from .argv import check_text
from .spec import Adapter

FIRST_LINE_BYTES = 512  # of a script read for its #! line: the kernel reads fewer


def resolve_executable(adapter: Adapter, env: Mapping[str, str]) -> str:
    """The absolute path of the adapter's executable on the daemon's PATH, or Unavailable."""
    import shutil  # here: it imports bz2 and lzma, which the idle daemon does without

    search = env.get("PATH", os.defpath)
    found = shutil.which(adapter.executable, path=search)
    if not found:
        raise Unavailable(not_executable(adapter, search) or adapter.install_hint())
    return os.path.abspath(found)


def not_executable(adapter: Adapter, search: str) -> str | None:
    """Why the first regular file named as the CLI on `search` (a PATH value) is none that which
    finds, when there is one: said as not installed, it sent a person to install again a CLI whose
    copy had lost its execute bit (mode 0644)."""
    for folder in search.split(os.pathsep):
        path = os.path.abspath(os.path.join(folder, adapter.executable))
        try:
            st = os.stat(path)
        except OSError:
            continue
        if not stat.S_ISREG(st.st_mode):
            continue
        if not st.st_mode & 0o111:
            return f"{path} is not executable: chmod +x {path}"
        # its mode lets someone run it, but not scvd: another user only, or a noexec mount
        return (f"{path} is not executable for scvd's user (mode {stat.S_IMODE(st.st_mode):04o}, owner uid "
                f"{st.st_uid}; or its file system is mounted noexec): make it executable for uid {os.getuid()}, "
                f"or install it where scvd can run it: npm install -g {adapter.package}")
    return None


def missing_interpreter(executable: str, env: Mapping[str, str]) -> str | None:
    """The program a script's first line names when it is not there: the absolute interpreter itself
    (`#!/usr/local/bin/node`, an npm install made with another node), or the PROGRAM of
    `#!/usr/bin/env PROGRAM` that `env`'s PATH lacks. What env or the exec says names neither."""
    import shutil

    try:  # never opened blocking: a FIFO in the CLI's place held the daemon's loop until a writer came
        first = read_regular_file(Path(executable), FIRST_LINE_BYTES).partition(b"\n")[0]
    except (OSError, NotARegularFile):
        return None
    if not first.startswith(b"#!"):
        return None
    words = first[2:].decode(errors="replace").split()
    if not words:
        return None
    if not os.path.exists(words[0]):  # the exec fails naming the script, as if it were the one missing
        return words[0]
    if os.path.basename(words[0]) != "env":
        return None
    # env's own options (-S, -i) and VAR=value settings come before the program
    named = [w for w in words[1:] if not w.startswith("-") and "=" not in w]
    if not named or shutil.which(named[0], path=env.get("PATH", os.defpath)):
        return None
    return named[0]


def resolve_cwd(workspace: Path, workspace_fd: int, cwd: str | None, given: str = "") -> Path:
    """The real directory a run starts in (open_cwd's, not held): for the check before approval."""
    where, fd = open_cwd(workspace, workspace_fd, cwd, given)
    if fd is not None:
        os.close(fd)
    return where


def open_cwd(workspace: Path, workspace_fd: int, cwd: str | None, given: str = "") -> tuple[Path, int | None]:
    """The real directory a run starts in, the workspace or `cwd` inside it, and an O_PATH fd of it
    opened beneath `workspace_fd` (None for the workspace itself, which the session holds): a run
    enters it by that fd, so a swap of its path since (the workspace moved and a link put in its
    place while the approval waited) cannot move the run. The caller closes the fd.

    `workspace` is the session's real path and `workspace_fd` the directory it holds: `cwd`
    is looked up beneath that fd as `read` looks up a path (containment.resolve), symlinks
    followed only while they stay inside, so nothing outside is ever looked at (a realpath()
    of a dead NFS mount froze scvd, and named where any host link leads). An absolute `cwd`
    must name the workspace lexically, by its real path or as session.open was `given` it (through
    a link: /home -> /var/home); `..` is taken back as the kernel does, never past the root.
    """
    root = Path(workspace)
    if not cwd:
        return root, None
    if "\x00" in cwd:
        raise InvalidArguments("cwd contains a NUL character, which no path can hold; remove it")
    check_text("cwd", cwd)
    names = _names(cwd)
    if cwd.startswith("/"):
        names = _below(names, root, given, cwd)
    try:
        real = containment.resolve(workspace_fd, tuple(names), cwd)
    except PathMissing:
        raise _not_a_directory(cwd, root) from None
    except ToolError as exc:  # a symlink leading out, `..` past the root, a file on the way
        raise _cwd_error(cwd, exc) from None
    if not real:
        return root, None
    try:  # the real path, opened following no symlink: a missing one, or a file
        return root.joinpath(*real), containment.open_raw(workspace_fd, real, os.O_PATH | os.O_DIRECTORY)
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            raise _not_a_directory(cwd, root) from None
        raise _cwd_error(cwd, containment.translate(workspace_fd, real, cwd, exc)) from None


def _names(path: str) -> list[str]:
    return [p for p in path.split("/") if p not in ("", ".")]


def _below(names: list[str], root: Path, given: str, cwd: str) -> list[str]:
    """An absolute cwd's `names` after the workspace's, compared as text with its real path, then with
    the path session.open was given; refused, never looked up, when it starts with neither."""
    tops = [list(root.parts[1:])]  # parts[0] is the "/"
    if given and _names(given) != tops[0]:
        tops.append(_names(given))
    for top in tops:
        if names[:len(top)] == top:
            return names[len(top):]
    opened = f" (opened as {given})" if len(tops) > 1 else ""
    raise InvalidArguments(f"cwd {show(cwd)} is outside the workspace {root}{opened}; give a directory "
                           f"inside it, relative to the workspace root, e.g. 'src'")


def _not_a_directory(cwd: str, root: Path) -> InvalidArguments:
    return InvalidArguments(f"cwd {show(cwd)} is not an existing directory in the workspace {root}; "
                            "give an existing directory inside it")


def _cwd_error(cwd: str, exc: Exception) -> InvalidArguments:
    """Containment's refusal as one of `cwd` (it names a `path`): an argument to change, not a failure."""
    text = str(exc)
    named = f"path {show(cwd)} "
    return InvalidArguments(f"cwd {show(cwd)} {text[len(named):]}" if text.startswith(named)
                            else f"cwd {show(cwd)}: {text}")
