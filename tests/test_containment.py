"""Containment of read/write: no absolute path, `..`, symlink, hard link or /proc trick leaves the workspace.

Every escape runs against both resolvers (openat2 and the O_NOFOLLOW walk) and
through read, write create and write replace, with real symlinks and links.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Iterator

import pytest

from fs_support import Workspace, backend, ws  # noqa: F401  (fixtures)
from scvd.errors import Failed, InvalidArguments, ToolError
from scvd.tools import containment
from scvd.tools.fs import read_file, write_file

# --- lexical ------------------------------------------------------------------


@pytest.mark.parametrize(
    "path, parts",
    [("a", ("a",)), ("./a//b/", ("a", "b")), ("a/./b", ("a", "b")), (".", ()), ("~/x", ("~", "x")),
     ("a\\..\\b", ("a\\..\\b",)), ("...", ("...",)), ("..a/b..", ("..a", "b.."))],
)
def test_split_accepts_relative_paths(path: str, parts: tuple[str, ...]) -> None:
    assert containment.split(path) == parts


@pytest.mark.parametrize(
    "path, says",
    [("", "empty"), ("/etc/passwd", "absolute"), ("..", "'..'"), ("a/../b", "'..'"), ("a/..", "'..'"),
     ("a\x00b", "NUL"), ("/proc/self/root/etc/passwd", "absolute"), ("\ud800", "UTF-8")],
)
def test_split_refuses(path: str, says: str) -> None:
    with pytest.raises(InvalidArguments, match=says):
        containment.split(path)


def test_openat2_is_used_on_kernels_that_have_it() -> None:
    major, minor = (int(x) for x in os.uname().release.split(".")[:2])
    if (major, minor) < (5, 6):
        pytest.skip("kernel older than 5.6 has no openat2")
    assert containment.openat2_available()


# --- the escape matrix ---------------------------------------------------------
# Each case builds its trap in the workspace and returns the path to try. The
# target outside is outside/secret.txt (for read/replace) or outside/new.txt (create).

Case = Callable[[Workspace, pytest.MonkeyPatch], str]
_OPEN_FDS: list[int] = []


@pytest.fixture(autouse=True)
def _close_trap_fds() -> Iterator[None]:
    yield
    while _OPEN_FDS:
        os.close(_OPEN_FDS.pop())


def absolute_outside(w: Workspace, mp: pytest.MonkeyPatch) -> str:
    return str(w.outside / "secret.txt")


def absolute_inside(w: Workspace, mp: pytest.MonkeyPatch) -> str:
    (w.root / "secret.txt").write_text("in")
    return str(w.root / "secret.txt")  # absolute is refused even when it points inside


def dotdot(w: Workspace, mp: pytest.MonkeyPatch) -> str:
    return "../outside/secret.txt"


def dotdot_inner(w: Workspace, mp: pytest.MonkeyPatch) -> str:
    (w.root / "sub").mkdir()
    return "sub/../../outside/secret.txt"


def symlink_file_out(w: Workspace, mp: pytest.MonkeyPatch) -> str:
    os.symlink(w.outside / "secret.txt", w.root / "secret.txt")
    return "secret.txt"


def symlink_parent_out(w: Workspace, mp: pytest.MonkeyPatch) -> str:
    os.symlink(w.outside, w.root / "out")
    return "out/secret.txt"


def symlinked_subdir_out(w: Workspace, mp: pytest.MonkeyPatch) -> str:
    (w.root / "a").mkdir()
    os.symlink(w.outside, w.root / "a" / "b")
    return "a/b/secret.txt"


def relative_symlink_up(w: Workspace, mp: pytest.MonkeyPatch) -> str:
    os.symlink("../outside", w.root / "up")
    return "up/secret.txt"


def symlink_to_symlink(w: Workspace, mp: pytest.MonkeyPatch) -> str:
    os.symlink(w.outside / "secret.txt", w.root / "l2")
    os.symlink("l2", w.root / "secret.txt")
    return "secret.txt"


def dangling_symlink(w: Workspace, mp: pytest.MonkeyPatch) -> str:
    os.symlink(w.outside / "new.txt", w.root / "secret.txt")  # create through it would make outside/new.txt
    return "secret.txt"


def hard_link_out(w: Workspace, mp: pytest.MonkeyPatch) -> str:
    os.link(w.outside / "secret.txt", w.root / "secret.txt")
    return "secret.txt"


def proc_self_root(w: Workspace, mp: pytest.MonkeyPatch) -> str:
    return "/proc/self/root" + str(w.outside / "secret.txt")


def proc_self_cwd(w: Workspace, mp: pytest.MonkeyPatch) -> str:
    mp.chdir(w.outside)
    return "/proc/self/cwd/secret.txt"


def symlink_to_proc_root(w: Workspace, mp: pytest.MonkeyPatch) -> str:
    os.symlink("/proc/self/root", w.root / "p")
    return "p" + str(w.outside / "secret.txt")


def symlink_to_proc_cwd(w: Workspace, mp: pytest.MonkeyPatch) -> str:
    mp.chdir(w.outside)
    os.symlink("/proc/self/cwd", w.root / "c")
    return "c/secret.txt"


def symlink_to_proc_fd(w: Workspace, mp: pytest.MonkeyPatch) -> str:
    fd = os.open(w.outside, os.O_RDONLY | os.O_DIRECTORY)
    _OPEN_FDS.append(fd)  # the trap needs it open during the call
    os.symlink("/proc/self/fd", w.root / "fds")
    return f"fds/{fd}/secret.txt"


def workspace_root_symlink(w: Workspace, mp: pytest.MonkeyPatch) -> str:
    os.symlink(w.root, w.root / "self")  # a way back in that then walks out with the next component
    os.symlink(w.outside, w.root / "out")
    return "self/out/secret.txt"


def symlink_loop(w: Workspace, mp: pytest.MonkeyPatch) -> str:
    os.symlink("loop", w.root / "loop")
    return "loop/secret.txt"


def proc_magic_link_in_tree(w: Workspace, mp: pytest.MonkeyPatch) -> str:
    os.symlink(f"/proc/{os.getpid()}", w.root / "me")  # then root/ is a magic link
    return "me/root" + str(w.outside / "secret.txt")


ESCAPES: list[Case] = [
    absolute_outside, absolute_inside, dotdot, dotdot_inner, symlink_file_out, symlink_parent_out,
    symlinked_subdir_out, relative_symlink_up, symlink_to_symlink, dangling_symlink, hard_link_out,
    proc_self_root, proc_self_cwd, symlink_to_proc_root, symlink_to_proc_cwd, symlink_to_proc_fd,
    workspace_root_symlink, symlink_loop, proc_magic_link_in_tree,
]


# the trap is the workspace entry itself: create must try that very name
LEAF_TRAPS = {symlink_file_out, symlink_to_symlink, dangling_symlink, hard_link_out}


def _create_path(case: Case, path: str) -> str:
    return path if case in LEAF_TRAPS else path.replace("secret.txt", "new.txt")


@pytest.mark.parametrize("case", ESCAPES, ids=lambda c: c.__name__)
@pytest.mark.parametrize("op", ["read", "create", "replace"])
def test_escape_is_refused(ws: Workspace, backend: str, monkeypatch: pytest.MonkeyPatch, case: Case, op: str) -> None:
    path = case(ws, monkeypatch)
    before = ws.outside_listing()
    with pytest.raises(ToolError) as info:
        if op == "read":
            ws.call("read", path=path)
        elif op == "create":
            ws.call("write", path=_create_path(case, path), content="pwned\n", mode="create")
        else:
            ws.call("write", path=path, content="pwned\n", mode="replace")
    assert isinstance(info.value, (InvalidArguments, Failed))
    assert "TOP SECRET" not in info.value.message
    assert ws.outside_listing() == before
    assert not (ws.outside / "new.txt").exists()


@pytest.mark.parametrize("case", [symlink_parent_out, symlinked_subdir_out, dangling_symlink, hard_link_out],
                         ids=lambda c: c.__name__)
def test_run_checks_again_without_plan(ws: Workspace, backend: str, monkeypatch: pytest.MonkeyPatch, case: Case) -> None:
    """The tree can change between approval and run; run() must refuse on its own."""
    path = case(ws, monkeypatch)
    with pytest.raises(ToolError):
        ws.run_only("read", path=path)
    with pytest.raises(ToolError):
        ws.run_only("write", path=_create_path(case, path), content="x", mode="create")
    assert ws.outside_listing() == {"secret.txt": b"TOP SECRET\n"}


def test_symlink_error_names_the_component(ws: Workspace, backend: str) -> None:
    (ws.root / "a").mkdir()
    os.symlink(ws.outside, ws.root / "a" / "b")
    with pytest.raises(InvalidArguments) as info:
        ws.call("read", path="a/b/secret.txt")
    msg = info.value.message
    assert "leaves the workspace via symlink 'a/b'" in msg
    assert str(ws.outside) in msg and "real path inside the workspace" in msg


def test_inside_symlink_is_refused_but_worded_as_inside(ws: Workspace, backend: str) -> None:
    (ws.root / "real").mkdir()
    (ws.root / "real" / "f.txt").write_text("hi")
    os.symlink("real", ws.root / "alias")
    with pytest.raises(InvalidArguments, match="goes through symlink 'alias'"):
        ws.call("read", path="alias/f.txt")
    assert ws.call("read", path="real/f.txt")["content"] == "hi"


def test_hard_link_inside_the_workspace_is_refused_too(ws: Workspace, backend: str) -> None:
    (ws.root / "a.txt").write_text("a")
    os.link(ws.root / "a.txt", ws.root / "b.txt")
    with pytest.raises(InvalidArguments, match="2 hard links"):
        ws.call("read", path="a.txt")
    with pytest.raises(InvalidArguments, match="hard links"):
        ws.call("write", path="b.txt", content="x", mode="replace")
    assert (ws.root / "a.txt").read_text() == "a"


def test_file_used_as_directory(ws: Workspace, backend: str) -> None:
    (ws.root / "f").write_text("x")
    with pytest.raises(Failed, match="'f' in path 'f/x' is a file, not a directory"):
        ws.call("read", path="f/x")


def test_missing_component_is_named(ws: Workspace, backend: str) -> None:
    (ws.root / "a").mkdir()
    with pytest.raises(containment.Missing) as info:
        containment.open_dir(ws.fd, ("a", "b", "c"), "a/b/c")
    assert info.value.missing == "a/b"


def test_resolution_uses_the_fd_not_the_path(ws: Workspace, backend: str, tmp_path: Path) -> None:
    """Resolution is from the fd, not the path: renaming the workspace does not redirect it."""
    (ws.root / "f.txt").write_text("mine")
    ws.root.rename(tmp_path / "moved")
    os.symlink(ws.outside, tmp_path / "ws")  # the old path now leads outside
    assert ws.call("read", path="f.txt")["content"] == "mine"
    ws.call("write", path="g.txt", content="new", mode="create")
    assert (tmp_path / "moved" / "g.txt").read_text() == "new"
    assert ws.outside_listing() == {"secret.txt": b"TOP SECRET\n"}


# --- a directory swapped for a symlink while calls run ---------------------------
# The swapper is a separate process so it really runs alongside (a thread would
# fall into step with the caller through the GIL and hide the race).

SWAPPER = """
import os, sys, time
root, outside, stop = sys.argv[1:]
d, real = os.path.join(root, "d"), os.path.join(root, "d.real")
while not os.path.exists(stop):
    os.rename(d, real)
    os.symlink(outside, d)
    time.sleep(0.0001)
    os.unlink(d)
    os.rename(real, d)
    time.sleep(0.0002)
"""


def test_directory_swapped_for_symlink_in_a_loop(ws: Workspace, backend: str, tmp_path: Path) -> None:
    (ws.root / "d").mkdir()
    (ws.root / "d" / "known.txt").write_text("inside")
    (ws.outside / "known.txt").write_text("OUTSIDE")
    stop = tmp_path / "stop"
    swapper = subprocess.Popen([sys.executable, "-c", SWAPPER, str(ws.root), str(ws.outside), str(stop)])
    written, refused = set(), 0
    try:
        deadline = time.monotonic() + 20
        for i in range(5000):
            try:
                write_file(ws.fd, f"d/f{i}.txt", b"x", "create")
                written.add(f"f{i}.txt")
                assert read_file(ws.fd, "d/known.txt")["content"] == "inside"
            except ToolError:
                refused += 1
            if (i >= 300 and written and refused) or time.monotonic() > deadline:
                break
    finally:
        stop.touch()
        assert swapper.wait(timeout=10) == 0
    assert sorted(p.name for p in ws.outside.iterdir()) == ["known.txt", "secret.txt"]
    assert (ws.outside / "known.txt").read_text() == "OUTSIDE"
    assert written and refused, (len(written), refused)  # the race really happened
    assert {p.name for p in (ws.root / "d").iterdir()} == written | {"known.txt"}  # no temp file left
