"""gitmeta.find(): the git metadata of a workspace, on real repositories made by git."""

from __future__ import annotations

import os
from pathlib import Path

from git_support import find_unprivileged, git, repo
from scvd import gitmeta


def real(p: Path) -> str:
    return os.path.realpath(p)


def test_a_workspace_without_git_has_nothing(tmp_path):
    (tmp_path / "src").mkdir()
    assert gitmeta.find(real(tmp_path)) == []


def test_the_workspace_git_dir_and_its_child_projects(tmp_path):
    ws = repo(tmp_path / "ws")
    repo(ws / "app")
    repo(ws / ".hidden-child")
    repo(ws / "deep" / "er")  # two levels down: not a child project
    (ws / "notes.txt").write_text("x")
    found = gitmeta.find(real(ws))
    assert found[0] == real(ws / ".git")
    assert set(found) == {real(ws / ".git"), real(ws / "app/.git"), real(ws / ".hidden-child/.git")}


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
