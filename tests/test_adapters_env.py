"""The delegated agent's environment (pure) and its private home's modes."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from scvd import paths as paths_mod
from scvd.adapters import spec
from scvd.adapters.env import build_env, is_removed
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
    "OPENROUTER_API_KEY": "or-planted",
    "AZURE_OPENAI_API_KEY": "az-planted",
    "AWS_BEARER_TOKEN_BEDROCK": "bedrock-planted",
    "SCV_HOME": "/home/me/.scv",
    "SCV_SOCKET": "/run/user/1000/scv/scvd.sock",
    "SCVD_TOOLS__MAX_TIMEOUT_SECONDS": "5",
    "NOTIFY_SOCKET": "/run/systemd/notify",
    "LISTEN_FDS": "1",
    "LISTEN_PID": "42",
    "LISTEN_FDNAMES": "scvd.socket",
    "HOME": "/home/me",
    "XDG_CONFIG_HOME": "/home/me/.config",
}
KEPT = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "TERM": "xterm", "GIT_AUTHOR_NAME": "me"}


@pytest.mark.parametrize("adapter", list(spec.ADAPTERS.values()), ids=list(spec.ADAPTERS))
def test_scrubbed_and_private(adapter: spec.Adapter) -> None:
    home = Path("/scv/adapters") / adapter.name
    env = build_env({**PLANTED, **KEPT}, adapter, home)
    for name, value in KEPT.items():
        assert env[name] == value
    assert not any(v.endswith("planted") for v in env.values())
    assert not {"NOTIFY_SOCKET", "LISTEN_FDS", "LISTEN_PID", "LISTEN_FDNAMES", "SCV_SOCKET",
                "CLAUDE_CONFIG_DIR", "PI_CODING_AGENT_DIR", "ANTHROPIC_BASE_URL",
                "SCVD_TOOLS__MAX_TIMEOUT_SECONDS"} & set(env)
    assert env["HOME"] == str(home)
    assert env["SCV_HOME"] == str(home / ".scv")
    assert env["XDG_CONFIG_HOME"] == str(home / ".config")
    assert env["XDG_DATA_HOME"] == str(home / ".local/share")
    assert env["XDG_STATE_HOME"] == str(home / ".local/state")
    assert ("CODEX_HOME" in env) == (adapter is spec.CODEX)
    if adapter is spec.CODEX:
        assert env["CODEX_HOME"] == "/scv/adapters/codex"


@pytest.mark.parametrize("name,removed", [
    ("OPENAI_API_KEY", True), ("my_api_key", True), ("DEEPSEEK_API_KEY", True),
    ("ANTHROPIC_AUTH_TOKEN", True), ("OPENAI_BASE_URL", True), ("PI_OFFLINE", True),
    ("PATH", False), ("GITHUB_TOKEN", False), ("API_KEYRING", False), ("PIP_INDEX_URL", False),
])
def test_is_removed(name: str, removed: bool) -> None:
    assert is_removed(name) is removed


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
    for d in (paths.adapters_dir, home, home / ".config", home / ".local/share",
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
