"""Containment of read/write: no absolute path, `..`, symlink or /proc trick leaves the workspace.

Every escape runs against both resolvers (openat2 and the O_NOFOLLOW walk) and
through read, write create and write replace, with real symlinks and links.
Symlinks that stay inside are followed, and hard-linked files are read and
replaced (never written through).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Iterator

import pytest

from fs_support import TOOLS, Workspace, backend, ws  # noqa: F401  (fixtures)
from scvd.errors import Failed, InvalidArguments, PathMissing, ToolError
from scvd.tools import containment
from scvd.tools.fs import inspect_target, read_file, write_file

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


def test_openat2_is_used_exactly_on_kernels_that_have_it() -> None:
    """No skip: on 5.6+ the probe must find openat2 (so fs_support's openat2 runs cannot be skipped
    there), and below it the probe must settle on the walk."""
    major, minor = (int(x) for x in os.uname().release.split(".")[:2])
    assert containment.openat2_available() is ((major, minor) >= (5, 6))


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


def inside_link_then_out(w: Workspace, mp: pytest.MonkeyPatch) -> str:
    (w.root / "real").mkdir()
    os.symlink("real", w.root / "alias")  # followed: it stays inside
    os.symlink("../../outside", w.root / "real" / "up")  # refused: from real/, ../.. is past the root
    return "alias/up/secret.txt"


def link_climbing_past_root(w: Workspace, mp: pytest.MonkeyPatch) -> str:
    (w.root / "a").mkdir()
    os.symlink("../../ws/../outside/secret.txt", w.root / "a" / "secret.txt")  # even if it came back in
    return "a/secret.txt"


def absolute_link_to_inside(w: Workspace, mp: pytest.MonkeyPatch) -> str:
    (w.root / "secret.txt").write_text("in")
    os.symlink(w.root / "secret.txt", w.root / "abs")  # absolute targets are refused, as RESOLVE_BENEATH does
    return "abs"


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
    symlinked_subdir_out, relative_symlink_up, symlink_to_symlink, dangling_symlink, inside_link_then_out,
    link_climbing_past_root, absolute_link_to_inside,
    proc_self_root, proc_self_cwd, symlink_to_proc_root, symlink_to_proc_cwd, symlink_to_proc_fd,
    workspace_root_symlink, symlink_loop, proc_magic_link_in_tree,
]


# the trap is the workspace entry itself: create must try that very name
LEAF_TRAPS = {symlink_file_out, symlink_to_symlink, dangling_symlink, link_climbing_past_root}


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


@pytest.mark.parametrize("case", [symlink_parent_out, symlinked_subdir_out, dangling_symlink, inside_link_then_out],
                         ids=lambda c: c.__name__)
def test_run_checks_again_without_plan(ws: Workspace, backend: str, monkeypatch: pytest.MonkeyPatch, case: Case) -> None:
    """The tree can change between approval and run; run() must refuse on its own."""
    path = case(ws, monkeypatch)
    with pytest.raises(ToolError):
        ws.run_only("read", path=path)
    with pytest.raises(ToolError):
        ws.run_only("write", path=_create_path(case, path), content="x", mode="create")
    assert ws.outside_listing() == {"secret.txt": b"TOP SECRET\n"}


@pytest.mark.parametrize("change", ["retarget", "new_link", "dir_to_link"])
def test_a_write_lands_only_where_it_was_approved(ws: Workspace, backend: str, change: str) -> None:
    """A link retargeted, or one that appears, between plan (the approval) and run: nothing is written."""
    (ws.root / "a.txt").write_text("a")
    (ws.root / "b.txt").write_text("b")
    (ws.root / "d").mkdir()
    os.symlink("a.txt", ws.root / "notes")
    path = {"retarget": "notes", "new_link": "a.txt", "dir_to_link": "d/a.txt"}[change]
    if change == "dir_to_link":
        (ws.root / "d" / "a.txt").write_text("d")
    t = TOOLS["write"]
    args = t.decode({"path": path, "content": "new", "mode": "replace"})
    plan = t.plan(args, ws.ctx)  # what the approver saw
    if change == "retarget":
        os.replace(ws.root / "notes", ws.root / "notes.old")
        os.symlink("b.txt", ws.root / "notes")
    elif change == "new_link":
        os.replace(ws.root / "a.txt", ws.root / "a.old")
        os.symlink("b.txt", ws.root / "a.txt")
    else:
        os.rename(ws.root / "d", ws.root / "d.real")
        os.symlink(".", ws.root / "d")  # d/a.txt is now the top-level a.txt
    with pytest.raises(InvalidArguments) as info:
        asyncio.run(t.run(args, plan, ws.ctx))
    assert f"path {path!r} changed since it was approved" in info.value.message
    assert "nothing was written" in info.value.message
    assert (ws.root / "b.txt").read_text() == "b" and not (ws.root / "a.txt").read_text() == "new"


@pytest.mark.parametrize("size", ["small", "big"])  # read on the loop, or on a pool thread
def test_a_read_judged_not_secret_like_cannot_read_where_a_link_leads_later(ws: Workspace, backend: str,
                                                                            size: str) -> None:
    """plan() decided read_only for notes -> README.md; after a swap to notes -> .env, run() never reads .env."""
    body = "x" * (10 << 20 if size == "big" else 10)
    (ws.root / "README.md").write_text(body)
    (ws.root / ".env").write_text("API_KEY=" + body)
    os.symlink("README.md", ws.root / "notes")
    t = TOOLS["read"]
    args = t.decode({"path": "notes"})
    plan = t.plan(args, ws.ctx)
    assert plan.risk.value == "read_only"
    os.replace(ws.root / "notes", ws.root / "notes.old")
    os.symlink(".env", ws.root / "notes")
    if size == "small":  # plan() held it open: run() reads that very file
        assert asyncio.run(t.run(args, plan, ws.ctx))["content"] == body
        return
    with pytest.raises(InvalidArguments) as info:  # resolved again on the pool: refused
        asyncio.run(t.run(args, plan, ws.ctx))
    assert "path 'notes' changed since scvd checked it: it led to 'README.md', now to '.env'" in info.value.message


def test_symlink_error_names_the_component(ws: Workspace, backend: str) -> None:
    (ws.root / "a").mkdir()
    os.symlink(ws.outside, ws.root / "a" / "b")
    with pytest.raises(InvalidArguments) as info:
        ws.call("read", path="a/b/secret.txt")
    msg = info.value.message
    assert "leaves the workspace via symlink 'a/b'" in msg
    assert str(ws.outside) in msg and "real path inside the workspace" in msg


@pytest.mark.parametrize("link, target, says", [
    ("link", "../outside", "leaves the workspace via symlink 'link' (-> '../outside')"),
    ("abs", "/etc/passwd", "leaves the workspace via symlink 'abs' (-> '/etc/passwd')"),
])
def test_links_leading_outside_are_refused_naming_them(ws: Workspace, backend: str, link: str, target: str,
                                                       says: str) -> None:
    os.symlink(target, ws.root / link)
    path = link if target.startswith("/") else f"{link}/secret.txt"
    for call in (lambda: ws.call("read", path=path),
                 lambda: ws.call("write", path=path, content="x", mode="replace")):
        with pytest.raises(InvalidArguments) as info:
            call()
        assert says in info.value.message and "real path inside the workspace" in info.value.message
    assert ws.outside_listing() == {"secret.txt": b"TOP SECRET\n"}


def test_claude_md_linked_to_agents_md_reads_and_writes_the_target(ws: Workspace, backend: str) -> None:
    (ws.root / "AGENTS.md").write_text("# Agents\n")
    os.symlink("AGENTS.md", ws.root / "CLAUDE.md")
    got = ws.call("read", path="CLAUDE.md")
    assert got["content"] == "# Agents\n" and got["path"] == "CLAUDE.md" and got["resolved_path"] == "AGENTS.md"
    plan = ws.plan("write", path="CLAUDE.md", content="# New\n", mode="replace")
    assert plan.summary.startswith("write (replace) 'CLAUDE.md' (-> 'AGENTS.md'): 6 bytes")
    done = ws.call("write", path="CLAUDE.md", content="# New\n", mode="replace",
                   expected_sha256=got["sha256"])
    assert done["resolved_path"] == "AGENTS.md" and done["replaced_link"] is False
    assert os.readlink(ws.root / "CLAUDE.md") == "AGENTS.md"  # the link stays a link
    assert (ws.root / "AGENTS.md").read_text() == "# New\n"


def test_symlinked_directories_inside_are_followed(ws: Workspace, backend: str) -> None:
    (ws.root / "pkg" / "docs").mkdir(parents=True)
    (ws.root / "pkg" / "docs" / "a.md").write_text("A")
    os.symlink("pkg/docs", ws.root / "docs")  # docs -> pkg/docs
    os.symlink("../docs/a.md", ws.root / "pkg" / "b.md")  # .. inside a link's target, then a link again
    assert ws.call("read", path="docs/a.md")["resolved_path"] == "pkg/docs/a.md"
    assert ws.call("read", path="pkg/b.md")["content"] == "A"
    ws.call("write", path="docs/new.md", content="N", mode="create")
    assert (ws.root / "pkg" / "docs" / "new.md").read_text() == "N"


def test_symlink_loop_is_refused(ws: Workspace, backend: str) -> None:
    os.symlink("b", ws.root / "a")
    os.symlink("a", ws.root / "b")
    with pytest.raises(InvalidArguments, match="more than 40 symlinks"):
        ws.call("read", path="a")


def test_hard_linked_file_reads_and_a_write_replaces_only_its_own_name(ws: Workspace, backend: str) -> None:
    """The other name is outside the workspace here: it is read, never written."""
    os.link(ws.outside / "secret.txt", ws.root / "shared.txt")
    got = ws.call("read", path="shared.txt")
    assert got["content"] == "TOP SECRET\n"
    assert ws.plan("write", path="shared.txt", content="mine\n", mode="replace").details["replaces_link"] is True
    done = ws.call("write", path="shared.txt", content="mine\n", mode="replace", expected_sha256=got["sha256"])
    assert done["replaced_link"] is True
    assert (ws.root / "shared.txt").read_text() == "mine\n"
    assert ws.outside_listing() == {"secret.txt": b"TOP SECRET\n"}  # the other link is unchanged
    assert os.stat(ws.root / "shared.txt").st_nlink == 1


def test_hard_link_inside_the_workspace(ws: Workspace, backend: str) -> None:
    (ws.root / "a.txt").write_text("a")
    os.link(ws.root / "a.txt", ws.root / "b.txt")
    assert ws.call("read", path="a.txt")["content"] == "a"
    assert ws.call("write", path="b.txt", content="b", mode="replace")["replaced_link"] is True
    assert (ws.root / "a.txt").read_text() == "a" and (ws.root / "b.txt").read_text() == "b"


def test_link_swapped_in_after_resolution_is_refused_as_changed(ws: Workspace, backend: str) -> None:
    """What the second step sees when a directory resolve() found becomes a symlink before the open."""
    (ws.root / "real").mkdir()
    os.symlink("real", ws.root / "d")  # inside, but resolve() said `d` was a directory
    os.symlink("real", ws.root / "f")
    with pytest.raises(InvalidArguments) as info:
        containment.open_dir(ws.fd, ("d",), "d/x.txt")
    assert info.value.message.startswith("path 'd/x.txt' changed while scvd resolved it")
    parent = containment.open_dir(ws.fd, (), "f")
    try:
        with pytest.raises(InvalidArguments, match="'f' changed while scvd resolved it"):
            inspect_target(parent, ("f",), "f", "replace")
    finally:
        os.close(parent)


def test_file_used_as_directory(ws: Workspace, backend: str) -> None:
    (ws.root / "f").write_text("x")
    with pytest.raises(Failed, match="'f' in path 'f/x' is a file, not a directory"):
        ws.call("read", path="f/x")


def test_missing_component_is_named(ws: Workspace, backend: str) -> None:
    (ws.root / "a").mkdir()
    with pytest.raises(PathMissing) as info:
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
root, target, stop = sys.argv[1:]
d, real = os.path.join(root, "d"), os.path.join(root, "d.real")
while not os.path.exists(stop):
    os.rename(d, real)
    os.symlink(target, d)
    time.sleep(0.0001)
    os.unlink(d)
    os.rename(real, d)
    time.sleep(0.0002)
"""


@pytest.mark.parametrize("swap_to", ["outside", "inside"])
def test_directory_swapped_for_symlink_in_a_loop(ws: Workspace, backend: str, tmp_path: Path, swap_to: str) -> None:
    """0 bytes outside, and the writes still succeed, through an in-workspace link (`lnk -> .`) too.

    `outside`: d becomes a link out of the workspace, so some writes are refused.
    `inside`: d becomes `d -> d.real`, the same directory renamed, so writes may follow it.
    """
    (ws.root / "d").mkdir()
    (ws.root / "d" / "known.txt").write_text("inside")
    (ws.outside / "known.txt").write_text("OUTSIDE")
    os.symlink(".", ws.root / "lnk")
    stop = tmp_path / "stop"
    target = str(ws.outside) if swap_to == "outside" else "d.real"
    swapper = subprocess.Popen([sys.executable, "-c", SWAPPER, str(ws.root), target, str(stop)])
    written, refused, via_swapped_link = set(), 0, 0
    try:
        deadline = time.monotonic() + 20
        for i in range(5000):
            try:
                done = write_file(ws.fd, f"{'lnk/' if i % 2 else ''}d/f{i}.txt", b"x", "create")
                written.add(f"f{i}.txt")
                via_swapped_link += done.get("resolved_path", "").startswith("d.real/")
                assert read_file(ws.fd, "d/known.txt")["content"] == "inside"
            except ToolError:
                refused += 1
            raced = refused if swap_to == "outside" else via_swapped_link
            if (i >= 300 and written and raced) or time.monotonic() > deadline:
                break
    finally:
        stop.touch()
        assert swapper.wait(timeout=10) == 0
    assert sorted(p.name for p in ws.outside.iterdir()) == ["known.txt", "secret.txt"]
    assert (ws.outside / "known.txt").read_text() == "OUTSIDE"
    assert written, "no write succeeded while the directory was being swapped"
    if swap_to == "outside":
        assert refused, "the swap never caught a write"  # the race really happened
    else:
        assert via_swapped_link, "no write followed the swapped-in link"
    assert {p.name for p in (ws.root / "d").iterdir()} == written | {"known.txt"}  # no temp file left
