"""Finding what a delegated run needs on disk: the executable and the working directory."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping

from ..errors import InvalidArguments, Unavailable
from ..paths import within
from .argv import check_text
from .spec import Adapter


def resolve_executable(adapter: Adapter, env: Mapping[str, str]) -> str:
    """The absolute path of the adapter's executable on the daemon's PATH, or Unavailable."""
    import shutil  # here: it imports bz2 and lzma, which the idle daemon does without

    found = shutil.which(adapter.executable, path=env.get("PATH", os.defpath))
    if not found:
        raise Unavailable(adapter.install_hint())
    return os.path.abspath(found)


def missing_interpreter(executable: str, env: Mapping[str, str]) -> str | None:
    """The program a script's first line names when it is not there: the absolute interpreter itself
    (`#!/usr/local/bin/node`, an npm install made with another node), or the PROGRAM of
    `#!/usr/bin/env PROGRAM` that `env`'s PATH lacks. What env or the exec says names neither."""
    import shutil

    try:
        with open(executable, "rb") as script:
            first = script.readline(512)
    except OSError:
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


def resolve_cwd(workspace: Path, cwd: str | None) -> Path:
    """The real directory a run starts in: the workspace, or `cwd` inside it.

    `workspace` is the session's real path, not resolved again: a link put in its place
    since the call's check would move the run where it leads. `cwd` is relative to the
    workspace or absolute; it is resolved following symlinks and must end up an existing
    directory under the workspace.
    """
    root = Path(workspace)
    if not cwd:
        return root
    if "\x00" in cwd:
        raise InvalidArguments("cwd contains a NUL character, which no path can hold; remove it")
    check_text("cwd", cwd)
    target = Path(os.path.realpath(root / cwd))  # an absolute cwd replaces root here
    if not within(str(target), str(root)):
        raise InvalidArguments(
            f"cwd {cwd!r} resolves to {target}, outside the workspace {root}; "
            f"give a directory inside the workspace"
        )
    try:
        found = target.is_dir()
    except OSError as exc:  # a name too long, a folder on the way scvd may not enter
        raise InvalidArguments(
            f"cwd {cwd!r} cannot be looked up in the workspace {root} ({exc.strerror or exc}); "
            f"give an existing directory inside it"
        ) from None
    if not found:
        raise InvalidArguments(f"cwd {cwd!r} is not an existing directory in the workspace {root}")
    return target
