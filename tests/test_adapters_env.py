"""The delegated agent's environment (pure) and its private home's modes."""

from __future__ import annotations

import dataclasses
import os
import stat
from pathlib import Path

import pytest

from helpers.inode_flags import flagged
from scvd import paths as paths_mod
from scvd.adapters import spec
from scvd.adapters.env import PRIVATE_HOME_NAMES, build_env
from scvd.adapters.homes import ensure_home, repair_home
from scvd.errors import Failed

PLANTED = {
    "OPENAI_API_KEY": "sk-planted",
    "ANTHROPIC_API_KEY": "sk-ant-planted",
    "ANTHROPIC_BASE_URL": "https://relay.example",
    "CLAUDE_CODE_OAUTH_TOKEN": "oauth-planted",
    "CLAUDE_CONFIG_DIR": "/home/me/.claude",
    "CODEX_HOME": "/home/me/.codex",
    "PI_CODING_AGENT_DIR": "/home/me/.pi/agent",
    "GEMINI_API_KEY": "g-planted",
    "AWS_ACCESS_KEY_ID": "AKIA-planted",
    "AWS_SECRET_ACCESS_KEY": "aws-planted",
    "AWS_SESSION_TOKEN": "aws-session-planted",
    "GH_TOKEN": "gh-planted",
    "GITHUB_TOKEN": "github-planted",
    "DATABASE_URL": "postgres://u:planted@db/x",
    "SSH_AUTH_SOCK": "/tmp/ssh-planted/agent.1",
    "DBUS_SESSION_BUS_ADDRESS": "unix:path=/run/user/1000/bus-planted",
    "XDG_RUNTIME_DIR": "/run/user/1000-planted",
    "SCV_HOME": "/home/me/.scv",
    "SCV_SOCKET": "/run/user/1000/scv/scvd.sock",
    "SCVD_TOOLS__MAX_TIMEOUT_SECONDS": "5",
    "NOTIFY_SOCKET": "/run/systemd/notify",
    "LISTEN_FDS": "1",
    "HOME": "/home/me",
    "XDG_CONFIG_HOME": "/home/me/.config",
    "PWD": "/home/me/planted",
}
KEPT = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "TERM": "xterm",
        "https_proxy": "http://proxy:3128", "NO_PROXY": "localhost", "NODE_EXTRA_CA_CERTS": "/etc/ca.pem"}


@pytest.mark.parametrize("adapter", list(spec.ADAPTERS.values()), ids=list(spec.ADAPTERS))
def test_allow_list_and_private_home(adapter: spec.Adapter) -> None:
    home = Path("/scv/adapters") / adapter.name
    env = build_env({**PLANTED, **KEPT, "GIT_AUTHOR_NAME": "me"}, adapter, home)
    assert not any("planted" in v for v in env.values())
    private = {"HOME": str(home), "SCV_HOME": str(home / ".scv"), "XDG_CONFIG_HOME": str(home / ".config"),
               "XDG_DATA_HOME": str(home / ".local/share"), "XDG_STATE_HOME": str(home / ".local/state"),
               "XDG_CACHE_HOME": str(home / ".cache")}
    if adapter is spec.CODEX:
        private["CODEX_HOME"] = "/scv/adapters/codex"
    assert env == {**KEPT, **private}  # not even a harmless unlisted name such as GIT_AUTHOR_NAME


def test_pass_env_adds_only_the_names_listed_and_present() -> None:
    adapter = dataclasses.replace(spec.CLAUDE, pass_env=("GH_TOKEN", "AWS_PROFILE"))
    env = build_env({**PLANTED, **KEPT}, adapter, Path("/h"))
    assert env["GH_TOKEN"] == "gh-planted"
    assert "AWS_PROFILE" not in env and "GITHUB_TOKEN" not in env


def test_pass_env_cannot_undo_the_private_home() -> None:
    """config.load refuses such a list; were one to get here, the private home still wins."""
    adapter = dataclasses.replace(spec.CODEX, pass_env=("HOME", "CODEX_HOME", "SCV_SOCKET"))
    env = build_env(PLANTED, adapter, Path("/h"))
    assert env["HOME"] == env["CODEX_HOME"] == "/h" and "SCV_SOCKET" not in env


def test_private_home_names_cover_what_build_env_sets() -> None:
    for adapter in spec.ADAPTERS.values():
        assert set(build_env({}, adapter, Path("/h"))) <= PRIVATE_HOME_NAMES


def mode(p: Path) -> int:
    return stat.S_IMODE(os.lstat(p).st_mode)


@pytest.fixture
def paths(tmp_path: Path) -> paths_mod.Paths:
    return paths_mod.resolve({"SCV_HOME": str(tmp_path / "scv")})


def test_home_created_private(paths: paths_mod.Paths, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level("INFO", logger="scvd.adapters"):
        home = ensure_home(paths, "codex")
    assert "repaired" not in caplog.text  # created right, nothing to repair
    assert home == paths.adapters_dir / "codex"
    for d in (paths.data_dir, paths.adapters_dir, home, home / ".config", home / ".local/share",
              home / ".local/state", home / ".scv"):
        assert d.is_dir() and mode(d) == 0o700, d


def test_loose_modes_repaired_and_logged(paths: paths_mod.Paths, caplog: pytest.LogCaptureFixture) -> None:
    home = ensure_home(paths, "claude")
    (home / ".claude" / "projects").mkdir(parents=True)
    os.chmod(home / ".claude", 0o755)
    os.chmod(home / ".claude" / "projects", 0o777)
    (home / ".claude.json").write_text("{}")
    os.chmod(home / ".claude.json", 0o644)
    os.chmod(home, 0o755)
    (home / "link").symlink_to("/etc/passwd")
    with caplog.at_level("INFO", logger="scvd.adapters"):
        notes = repair_home(paths, "claude")
    assert len(notes) == 4
    assert "repaired 4 loose modes in the claude home" in caplog.text
    assert mode(home) == mode(home / ".claude") == mode(home / ".claude" / "projects") == 0o700
    assert mode(home / ".claude.json") == 0o600
    assert mode(Path("/etc/passwd")) == 0o644  # a symlink's target is never touched
    assert repair_home(paths, "claude") == []


def test_symlinked_home_refused(paths: paths_mod.Paths, tmp_path: Path) -> None:
    paths.adapters_dir.mkdir(parents=True)
    (tmp_path / "elsewhere").mkdir()
    (paths.adapters_dir / "pi").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(Failed, match="pi home .* must be a directory owned by scvd, not a link"):
        ensure_home(paths, "pi")


def test_a_folder_linked_out_of_the_home_is_left_alone(paths: paths_mod.Paths, tmp_path: Path) -> None:
    """A user's link (`.config` to a shared folder) is theirs: its target keeps its mode."""
    home = ensure_home(paths, "codex")
    shared = tmp_path / "shared-config"
    shared.mkdir(mode=0o755)
    shared.chmod(0o755)
    (home / ".config").rmdir()
    (home / ".config").symlink_to(shared)
    assert ensure_home(paths, "codex") == home
    assert mode(shared) == 0o755 and not any(shared.iterdir())


def test_a_home_folder_swapped_for_a_link_while_checked_leaves_its_target_alone(
        paths: paths_mod.Paths, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another run of the agent (a second session) swaps `.config` for a symlink right after
    ensure_home found it a folder: its chmod by path tightened the user's own folder to 0700."""
    home = ensure_home(paths, "codex")
    users = tmp_path / "users-own"
    users.mkdir()
    users.chmod(0o755)
    (home / ".config").chmod(0o755)
    real_mkdir, swapped = os.mkdir, []

    def mkdir_then_swap(path, mode=0o777, *, dir_fd=None):  # the other run acts right after the look
        try:
            real_mkdir(path, mode, dir_fd=dir_fd)
        finally:
            if Path(path) == home / ".config" and not swapped:
                (home / ".config").rmdir()
                (home / ".config").symlink_to(users)
                swapped.append(path)

    monkeypatch.setattr(os, "mkdir", mkdir_then_swap)
    ensure_home(paths, "codex")
    monkeypatch.undo()
    assert swapped, "ensure_home never made .config"
    assert mode(users) == 0o755


@pytest.mark.parametrize("what", ["a link to nothing", "not a directory"])
def test_a_home_folder_that_is_no_directory_is_refused_saying_which(paths: paths_mod.Paths, tmp_path: Path,
                                                                     what: str) -> None:
    home = ensure_home(paths, "codex")
    (home / ".cache").rmdir()
    if what == "not a directory":
        (home / ".cache").write_text("")
    else:
        (home / ".cache").symlink_to(tmp_path / "gone")
    with pytest.raises(Failed, match=rf"\.cache in the codex home is {what}; move it away"):
        ensure_home(paths, "codex")


def test_a_home_it_cannot_make_private_is_refused_saying_which_path(paths: paths_mod.Paths) -> None:
    """It was `agent_claude failed unexpectedly: PermissionError` (scvctl: a traceback)."""
    home = ensure_home(paths, "claude")
    stuck = home / ".claude.json"
    stuck.write_text("{}")
    stuck.chmod(0o644)
    with flagged(stuck), pytest.raises(Failed) as info:
        ensure_home(paths, "claude")
    assert info.value.message == (
        f"cannot make the claude home {home} private ({stuck}: Operation not permitted); "
        "give that path back to your user (chown) or move it away, then retry")


def test_a_path_the_repair_after_a_run_cannot_fix_is_logged_not_raised(paths: paths_mod.Paths,
                                                                        caplog: pytest.LogCaptureFixture) -> None:
    """After a run, raising would lose its result; the next run's ensure_home refuses instead."""
    home = ensure_home(paths, "codex")
    stuck = home / "auth.json"
    stuck.write_text("{}")
    stuck.chmod(0o644)
    with flagged(stuck), caplog.at_level("WARNING", logger="scvd.adapters"):
        assert repair_home(paths, "codex") == []
    assert f"cannot make {stuck} in the codex home private (Operation not permitted)" in caplog.text


def test_a_home_it_cannot_make_private_does_not_stop_scvd_starting(paths: paths_mod.Paths,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    """At start it was `cannot start: [Errno 1] Operation not permitted: ...`, exit 3: one agent's home
    kept bash, read and every other tool down. That agent alone is refused now (ensure_home)."""
    home = ensure_home(paths, "pi")
    stuck = home / "auth.json"
    stuck.write_text("{}")
    stuck.chmod(0o644)
    with flagged(stuck), caplog.at_level("WARNING", logger="scvd.paths"):
        paths_mod.prepare(paths)
        with pytest.raises(Failed, match="cannot make the pi home"):
            ensure_home(paths, "pi")
    assert f"cannot make {stuck} private (Operation not permitted)" in caplog.text
