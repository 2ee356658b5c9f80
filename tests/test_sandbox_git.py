"""Real bubblewrap, real git: an unasked call cannot plant code that the host's git runs later.

Each attack runs inside Sandbox.wrap()'s argv; then git runs on the host, as the
user would, and a planted command would touch a marker file. The approved-call
controls show that the same attack does plant (today's binds), so the markers
can appear and the unasked checks are not vacuous.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from git_support import IDENTITY, find_unprivileged, git, repo
from scvd.config import McpServerConfig
from scvd.errors import Unavailable
from scvd.mcp import spec
from scvd.errors import LimitExceeded
from scvd.sandbox import MAX_GUARD_MOUNTS
from test_sandbox_bwrap import Box

pytestmark = pytest.mark.bwrap

# the attack from issue 13, then the direct ways to plant
MOVE_AND_COPY = "mv .git .git-moved && cp -a .git-moved .git && git config core.fsmonitor {plant!r}"
DIRECT = ("git config core.fsmonitor {plant!r}; "
          "printf '#!/bin/sh\\n%s\\n' {plant!r} > .git/hooks/pre-commit; chmod +x .git/hooks/pre-commit; "
          "printf '[core]\\n\\tfsmonitor = %s\\n' {plant!r} >> .git/config")


class GitBox(Box):
    """A Box whose workspace is a real repository with one commit."""

    def __init__(self, tmp_path: Path) -> None:
        super().__init__(tmp_path, **IDENTITY)
        shutil.rmtree(self.ws / ".git")
        repo(self.ws)
        self.marker = tmp_path / "planted-ran"

    @property
    def plant(self) -> str:
        return f"touch {self.marker}"

    def host_git(self, cwd: Path, *args: str) -> subprocess.CompletedProcess:
        return git(cwd, *args)


@pytest.fixture
def gbox(tmp_path):
    return GitBox(tmp_path)


def test_the_move_and_copy_attack_plants_under_an_approved_call_as_before(gbox):
    """The control: with today's binds (hooks and config only) the attack works."""
    r = gbox.run(MOVE_AND_COPY.format(plant=gbox.plant), approved=True)
    assert r.returncode == 0, r.stderr
    gbox.host_git(gbox.ws, "status")
    assert gbox.marker.exists()


def test_an_unasked_call_cannot_move_replace_or_edit_git(gbox):
    head = (gbox.ws / ".git/HEAD").read_text()
    r = gbox.run(MOVE_AND_COPY.format(plant=gbox.plant) + "; echo rc=$?; " + DIRECT.format(plant=gbox.plant)
                 + "; rm -rf .git; echo gitdir: /tmp/x > .git; ln -sfn .git-moved .git; ls -A")
    assert "Device or resource busy" in r.stderr  # the mount point cannot be renamed or removed
    assert "Read-only file system" in r.stderr
    assert not (gbox.ws / ".git-moved").exists()
    assert (gbox.ws / ".git").is_dir() and (gbox.ws / ".git/HEAD").read_text() == head
    assert not (gbox.ws / ".git/hooks/pre-commit").exists()
    status = gbox.host_git(gbox.ws, "status")
    assert status.returncode == 0, status.stderr
    gbox.host_git(gbox.ws, "commit", "--allow-empty", "-m", "after")  # runs pre-commit, were it there
    assert not gbox.marker.exists()


def test_an_unasked_call_cannot_rename_a_child_project_to_replace_its_git(gbox):
    child = repo(gbox.ws / "app")
    (child / "src.txt").write_text("v1\n")
    attack = (f"cd app && echo v2 > src.txt && cd .. && mv app app-old; cp -a app-old app2; "
              f"git -C app2 config core.fsmonitor {gbox.plant!r} && rm -rf app && mv app2 app; ls")
    r = gbox.run(attack)
    assert "Device or resource busy" in r.stderr, r.stderr
    assert (child / "src.txt").read_text() == "v2\n"  # the child project itself stays writable
    gbox.host_git(child, "status")
    assert not gbox.marker.exists()


def test_an_unasked_call_cannot_plant_a_hook_in_a_bare_repository_in_the_workspace(gbox, tmp_path):
    """A push into a bare repository runs its hooks on the host: one in the workspace (a local
    remote, `app.git`) is guarded like a child project's `.git`; an approved call still plants."""
    bare = gbox.ws / "app.git"
    assert git(gbox.ws, "init", "-q", "--bare", str(bare)).returncode == 0
    hook = f"printf '#!/bin/sh\\n%s\\n' {gbox.plant!r} > app.git/hooks/post-receive; chmod +x app.git/hooks/post-receive"
    r = gbox.run(hook)
    assert "Read-only file system" in r.stderr, r.stderr
    clone = tmp_path / "clone"
    assert git(tmp_path, "clone", "-q", str(bare), str(clone)).returncode == 0
    (clone / "f.txt").write_text("x\n")
    git(clone, "add", "f.txt")
    git(clone, "commit", "-q", "-m", "x")
    assert git(clone, "push", "-q", "origin", "HEAD").returncode == 0  # the user, on the host
    assert not gbox.marker.exists()
    assert gbox.run(hook, approved=True).returncode == 0  # the control: the same call, approved
    (clone / "f.txt").write_text("y\n")
    git(clone, "commit", "-q", "-am", "y")
    git(clone, "push", "-q", "origin", "HEAD")
    assert gbox.marker.exists()


def test_a_child_project_made_unreadable_stays_guarded_as_a_whole(gbox):
    """One unasked call closes `app` (allowed: the workspace is writable); the next call's look
    cannot see app/.git, so app is kept read-only whole and cannot be opened again to plant."""
    child = repo(gbox.ws / "app")
    closed = gbox.run("chmod 000 app && echo closed")
    assert closed.stdout.strip() == "closed", closed.stderr
    argv = gbox.sandbox.wrap(["/bin/bash", "-c", f"chmod 755 app; git -C app config core.fsmonitor {gbox.plant!r}"],
                             workspace=gbox.ws, network=False, git=find_unprivileged(gbox.ws))
    r = subprocess.run(argv, cwd=gbox.ws, env=gbox.env, text=True, capture_output=True, timeout=30)
    assert "Read-only file system" in r.stderr, r.stderr
    child.chmod(0o755)  # the user, on the host
    assert gbox.host_git(child, "status").returncode == 0
    assert not gbox.marker.exists()


def test_a_worktree_git_file_and_its_common_dir_inside_the_workspace_are_read_only(gbox):
    main = repo(gbox.ws / "main")
    git(main, "worktree", "add", "-q", str(gbox.ws / "wt"))
    pointer = (gbox.ws / "wt/.git").read_text()
    attack = (f"cd wt; git config core.fsmonitor {gbox.plant!r}; "
              f"git config --worktree core.fsmonitor {gbox.plant!r}; "
              f"echo 'gitdir: ../evil' > .git; mv .git .git-old; "
              f"printf '#!/bin/sh\\n%s\\n' {gbox.plant!r} > ../main/.git/hooks/post-checkout; "
              f"mv ../main ../main-old; echo done")
    r = gbox.run(attack)
    assert r.stdout.strip().endswith("done")
    assert r.stderr.count("Read-only file system") >= 3 and "Device or resource busy" in r.stderr, r.stderr
    assert (gbox.ws / "wt/.git").read_text() == pointer and (gbox.ws / "main/.git").is_dir()
    gbox.host_git(gbox.ws / "wt", "status")
    gbox.host_git(gbox.ws / "wt", "checkout", "-q", "-b", "other")  # runs post-checkout, were it there
    assert not gbox.marker.exists()


def test_a_worktree_whose_common_dir_is_outside_the_workspace_stays_intact(gbox, tmp_path):
    main = repo(tmp_path / "elsewhere" / "main")
    wt = gbox.ws / "wt"
    git(main, "worktree", "add", "-q", str(wt))
    gbox.ws = wt  # the worktree is the workspace
    pointer = (wt / ".git").read_text()
    r = gbox.run(f"rm -f .git; echo 'gitdir: {wt}/evil' > .git; mkdir -p evil; "
                f"git init -q evil2 && mv evil2/.git .git; echo done")
    assert "Device or resource busy" in r.stderr or "Read-only file system" in r.stderr, r.stderr
    assert (wt / ".git").read_text() == pointer
    gbox.host_git(wt, "status")
    assert not gbox.marker.exists()


def test_an_approved_call_can_still_commit(gbox):
    r = gbox.run("echo hi > f.txt && git add f.txt && git commit -q -m 'from the sandbox' && git log --oneline",
                 approved=True)
    assert r.returncode == 0, r.stderr
    assert "from the sandbox" in gbox.host_git(gbox.ws, "log", "--oneline").stdout


def test_an_unasked_commit_fails_and_says_why(gbox):
    r = gbox.run("echo hi > f.txt && git add f.txt")
    assert r.returncode != 0 and "Read-only file system" in r.stderr
    assert (gbox.ws / "f.txt").read_text() == "hi\n"
    assert os.path.isdir(gbox.ws / ".git")


# unshare(CLONE_NEWUSER | CLONE_NEWNS) gives the call every capability in a namespace of its own;
# then it tries to take the guard off: unmount it, remount it read-write, bind the workspace
# elsewhere without the mounts below it
UNDO = """
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
def tried(name, result):
    print(name, "ok" if result == 0 else os.strerror(ctypes.get_errno()))
ws = os.getcwd().encode()
tried("unshare", libc.unshare(0x10000000 | 0x00020000))
tried("umount", libc.umount2(ws + b"/.git", 2))
tried("remount", libc.mount(None, ws + b"/.git", None, 32 | 4096, None))
os.makedirs("/tmp/view", exist_ok=True)
tried("bind", libc.mount(ws, b"/tmp/view", None, 4096, None))
for target in (ws + b"/.git/config", b"/tmp/view/.git/config"):
    try:
        open(target, "ab").write(b"[core]\\n\\tfsmonitor = touch " + sys.argv[1].encode() + b"\\n")
        print("WROTE", target)
    except OSError as exc:
        print("write", exc.strerror)
"""


def test_a_nested_namespace_cannot_take_the_guard_off(gbox):
    config = (gbox.ws / ".git/config").read_text()
    # the base interpreter (UNDO needs only the standard library): a checkout under /tmp, as a CI
    # clone may be, puts the venv's own python under the sandbox's private /tmp
    python = os.path.realpath(sys.executable)
    r = gbox.run(f"{python} -I -c '{UNDO}' {gbox.marker}")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert "unshare ok" in lines, r.stdout  # the attempt is real: the call holds every capability
    assert "umount Invalid argument" in lines and "remount Operation not permitted" in lines
    assert "bind Invalid argument" in lines  # a bind without what lies below would show .git writable
    assert "WROTE" not in r.stdout and (gbox.ws / ".git/config").read_text() == config
    gbox.host_git(gbox.ws, "status")
    assert not gbox.marker.exists()


def test_an_unasked_call_cannot_plant_in_a_repository_deep_in_the_workspace(gbox):
    """A ghq or GOPATH tree, a monorepo with nested clones: `git config -f .../.git/config
    core.fsmonitor` in github.com/org/repo ran at the user's next `git status` there."""
    deep = repo(gbox.ws / "github.com" / "org" / "repo")
    attack = (f"git config -f github.com/org/repo/.git/config core.fsmonitor '{gbox.plant}; false'; "
              "mv github.com/org/repo github.com/org/old; mv github.com gh; echo tried")
    r = gbox.run(attack)
    assert r.stdout.strip() == "tried"
    assert "Read-only file system" in r.stderr and r.stderr.count("Device or resource busy") == 2, r.stderr
    assert gbox.host_git(deep, "status").returncode == 0
    assert not gbox.marker.exists()
    assert gbox.run(attack, approved=True).returncode == 0  # the control: approved, it plants
    gbox.host_git(gbox.ws / "gh/org/old", "status")
    assert gbox.marker.exists()


def test_a_workspace_whose_guard_would_not_fit_one_sandbox_is_refused_unasked(gbox):
    """A `.gitmodules` listing thousands of empty directories (one unasked call can write it in a
    repository it made) once took a minute to wrap on scvd's loop, then bwrap refused the argv."""
    made = repo(gbox.ws / "x")
    names = [f"m{n}" for n in range(MAX_GUARD_MOUNTS + 1)]
    (made / ".gitmodules").write_text("".join(f'[submodule "{n}"]\n\tpath = {n}\n' for n in names))
    for name in names:
        (made / name).mkdir()
    with pytest.raises(LimitExceeded, match=f"more than the {MAX_GUARD_MOUNTS} one sandbox is given"):
        gbox.sandbox.look(gbox.ws, network=False)
    with pytest.raises(LimitExceeded):
        gbox.run("true")
    assert gbox.run("echo ran", approved=True).stdout == "ran\n"  # a person's approval keeps hooks and config only
    with pytest.raises(Unavailable, match="mcp server fs: keeping the git metadata in .* more than the") as caught:  # serves many calls
        spec.stdio_launch("fs", McpServerConfig(command="/bin/cat", cwd=str(gbox.ws)), secrets=None,
                          sandbox=gbox.sandbox, network=False, base_env=gbox.env, home=gbox.ws)
    assert "mcp.servers.fs.cwd" in caught.value.hint
