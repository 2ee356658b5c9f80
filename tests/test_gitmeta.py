"""gitmeta.find(): the git metadata of a workspace, on real repositories made by git."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from git_support import find_unprivileged, git, repo
from scvd import gitmeta
from scvd.errors import LimitExceeded


def real(p: Path) -> str:
    return os.path.realpath(p)


def test_a_workspace_without_git_has_nothing(tmp_path):
    (tmp_path / "src").mkdir()
    assert gitmeta.find(real(tmp_path)) == []


def test_the_workspace_git_dir_and_its_child_projects(tmp_path):
    ws = repo(tmp_path / "ws")
    repo(ws / "app")
    repo(ws / ".hidden-child")
    (ws / "notes.txt").write_text("x")
    found = gitmeta.find(real(ws))
    assert found[0] == real(ws / ".git")
    assert set(found) == {real(ws / ".git"), real(ws / "app/.git"), real(ws / ".hidden-child/.git")}


def test_repositories_at_any_depth_are_found(tmp_path):
    """A ghq or GOPATH tree (github.com/org/repo), a clone nested in a project's working tree, a
    bare repository and a linked worktree deep down: git run there uses their config and hooks."""
    ws = tmp_path / "ws"
    ghq = repo(ws / "github.com" / "org" / "repo")
    nested = repo(ghq / "vendor" / "tools" / "clone")
    bare = ws / "remotes" / "deep" / "app.git"
    assert git(tmp_path, "init", "-q", "--bare", str(bare)).returncode == 0
    git(ghq, "worktree", "add", "-q", str(ws / "a" / "b" / "wt"))
    found = gitmeta.find(real(ws))
    assert {real(ghq / ".git"), real(nested / ".git"), real(bare), real(ws / "a/b/wt/.git")} <= set(found), found
    assert not any(p.startswith(real(bare) + "/") for p in found)  # a git dir is kept whole, not entered


def test_symlinked_and_skipped_directories_are_not_entered(tmp_path):
    ws = tmp_path / "ws"
    outside = repo(tmp_path / "elsewhere" / "repo")
    (ws / "hidden").mkdir(parents=True)
    repo(ws / "hidden" / "repo")
    (ws / "link").symlink_to(outside.parent)  # outside the workspace's bind: read-only anyway
    assert gitmeta.find(real(ws), skip={real(ws / "hidden")}) == []


def test_a_look_past_its_budget_says_so(tmp_path):
    """The walk lists at most `budget` entries: past that it cannot tell where a repository
    hides, so it says so (the call asks) rather than report less than there is."""
    ws = tmp_path / "ws"
    repo(ws / "a" / "b" / "c")
    assert gitmeta.find(real(ws), budget=50) == [real(ws / "a/b/c/.git")]
    for n in range(60):
        (ws / "a" / f"f{n}").touch()
    with pytest.raises(LimitExceeded, match="more than 50 files, directories and submodule entries") as caught:
        gitmeta.find(real(ws), budget=50)
    assert "approve the call itself" in caught.value.hint


def test_gitmodules_entries_count_against_the_budget(tmp_path):
    ws = repo(tmp_path / "ws")
    (ws / ".gitmodules").write_text("".join(f'[submodule "m{n}"]\n\tpath = m{n}\n' for n in range(100)))
    with pytest.raises(LimitExceeded):
        gitmeta.find(real(ws), budget=50)



def test_a_gitmodules_path_key_of_any_case_is_read(tmp_path):
    """git reads config keys in any case: `Path = m` names a submodule as `path = m` does."""
    ws = repo(tmp_path / "ws")
    (ws / "m").mkdir()
    (ws / ".gitmodules").write_text('[submodule "m"]\n\tPath = m\n')
    assert real(ws / "m") in gitmeta.find(real(ws))


def test_a_gitmodules_of_blank_lines_is_read_in_linear_time(tmp_path):
    """Its path pattern took N^2 steps on blank lines (a 1 MiB .gitmodules: minutes before every
    unasked sandboxed call, the GIL held, past any pytest-timeout: so in a process of its own)."""
    ws = repo(tmp_path / "ws")
    (ws / ".gitmodules").write_text("\n" * (1 << 20))
    code = f"from scvd import gitmeta; print(len(gitmeta.find({real(ws)!r})))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout) == (0, "2\n"), done.stderr[-2000:]  # .git and .gitmodules

def test_a_worktree_git_file_brings_its_git_dir_and_common_dir(tmp_path):
    main = repo(tmp_path / "main")
    git(main, "worktree", "add", "-q", str(tmp_path / "ws"))
    found = gitmeta.find(real(tmp_path / "ws"))
    assert found == [real(tmp_path / "ws/.git"), real(main / ".git/worktrees/ws"), real(main / ".git")]


def test_a_submodule_style_git_file_without_commondir(tmp_path):
    ws = tmp_path / "ws"
    gitdir = repo(tmp_path / "modules" / "sub") / ".git"
    ws.mkdir()
    (ws / ".git").write_text("gitdir: ../modules/sub/.git\n")
    assert gitmeta.find(real(ws)) == [real(ws / ".git"), real(gitdir)]


def test_a_symlinked_git_dir_is_reported_by_its_target(tmp_path):
    target = repo(tmp_path / "elsewhere") / ".git"
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / ".git").symlink_to(target)
    assert gitmeta.find(real(ws)) == [real(target)]


def test_broken_pointers_report_only_what_exists(tmp_path):
    ws = tmp_path / "ws"
    (ws / "a").mkdir(parents=True)
    (ws / "b").mkdir()
    (ws / ".git").write_text("gitdir: /no/such/dir\n")
    (ws / "a" / ".git").write_text("not a pointer\n")
    (ws / "b" / ".git").mkdir()
    (ws / "b" / ".git" / "commondir").write_text("../../nowhere\n")
    found = gitmeta.find(real(ws))  # child projects come in directory order
    assert found[0] == real(ws / ".git")
    assert sorted(found) == sorted([real(ws / ".git"), real(ws / "a/.git"), real(ws / "b/.git")])


def test_a_missing_workspace_finds_nothing(tmp_path):
    assert gitmeta.find(str(tmp_path / "gone")) == []


def test_a_child_project_it_cannot_look_into_is_reported_whole(tmp_path):
    """`chmod 000 app` (or 600: listable, not searchable) by one call must not hide app/.git
    from the next call's look: app itself is then kept read-only."""
    ws = tmp_path / "ws"
    for name, mode in (("closed", 0o000), ("unsearchable", 0o600), ("open", 0o755)):
        repo(ws / name).chmod(mode)
    found = find_unprivileged(ws)
    assert sorted(found) == sorted([real(ws / "closed"), real(ws / "unsearchable"), real(ws / "open/.git")])


def test_a_workspace_it_cannot_list_is_reported_whole(tmp_path):
    ws = tmp_path / "ws"
    repo(ws / "app")
    ws.chmod(0o300)  # searchable, not listable: app/.git cannot be found
    assert find_unprivileged(ws) == [real(ws)]


def test_a_workspace_it_cannot_list_still_reports_the_git_dir_its_git_file_names(tmp_path):
    ws = tmp_path / "ws"
    gitdir = repo(tmp_path / "modules" / "sub") / ".git"
    ws.mkdir()
    (ws / ".git").write_text("gitdir: ../modules/sub/.git\n")
    ws.chmod(0o300)  # an unasked call's chmod: the git dir outside must not lose its guard
    assert find_unprivileged(ws) == [real(ws), real(ws / ".git"), real(gitdir)]


def test_a_directory_it_cannot_list_at_any_depth_is_reported_whole(tmp_path):
    ws = tmp_path / "ws"
    repo(ws / "src" / "vendor" / "lib")
    (ws / "src" / "vendor").chmod(0o300)  # searchable, not listable: lib/.git cannot be found
    assert find_unprivileged(ws) == [real(ws / "src/vendor")]


def test_a_git_dir_or_submodule_behind_a_closed_directory_reports_that_directory(tmp_path):
    ws = repo(tmp_path / "ws")
    main = repo(ws / "deep" / "er" / "main")
    git(main, "worktree", "add", "-q", str(ws / "wt"))
    (ws / ".gitmodules").write_text('[submodule "m"]\n\tpath = mods/in/lib\n')
    repo(ws / "mods" / "in" / "lib")
    for closed in (ws / "deep" / "er", ws / "mods" / "in"):
        closed.chmod(0o000)
    found = find_unprivileged(ws)
    assert real(ws / "deep/er") in found and real(ws / "mods/in") in found, found


def test_a_git_symlink_loop_is_nothing_to_guard(tmp_path):
    ws = tmp_path / "ws"
    (ws / "app").mkdir(parents=True)
    (ws / "app" / ".git").symlink_to(ws / "app" / ".git")
    assert find_unprivileged(ws) == []
