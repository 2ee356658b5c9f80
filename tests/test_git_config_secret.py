"""Which git config contents count as holding a credential (scvd/tools/git_config_secret.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from scvd.tools.git_config_secret import credential_in, is_git_config

ORIGIN = '[remote "origin"]\n\turl = {}\n\tfetch = +refs/heads/*:refs/remotes/origin/*\n'


@pytest.mark.parametrize("text, found", [
    (ORIGIN.format("https://x-access-token:ghp_0123456789abcdefghij@github.com/o/r"), "a URL with a password"),
    (ORIGIN.format("https://oauth2:glpat-abc@gitlab.com/o/r"), "a URL with a password"),
    ('[http]\n\tproxy = http://me:hunter2@proxy:3128\n', "a URL with a password"),
    (ORIGIN.format("https://ghp_0123456789abcdefghijABCDEFGHIJ@github.com/o/r"), "a URL whose user is a token"),
    ('[url "https://ghp_0123456789abcdefghij@github.com/"]\n\tinsteadOf = https://github.com/\n',
     "a URL whose user is a token"),
    ('[http "https://github.com/"]\n\textraheader = AUTHORIZATION: basic eDp5\n', "a value for 'extraheader'"),
    ('[sendemail]\n\tsmtpPass = "hunter2"\n', "a value for 'smtpPass'"),
    ('[github]\n\toauthtoken = abc\n', "a value for 'oauthtoken'"),
    # what a repository's config holds without a credential: read unasked as before
    (ORIGIN.format("https://github.com/o/r"), None),
    (ORIGIN.format("ssh://git@github.com:22/o/r"), None),
    (ORIGIN.format("https://me@github.com/o/r"), None),  # a user, no password: git asks for one
    # Azure DevOps's clone URL names the organisation as the user: no token, however long a name
    (ORIGIN.format("https://fabrikamfiber2024@dev.azure.com/fabrikamfiber2024/Web/_git/web"), None),
    (ORIGIN.format("https://fabrikamfiber2024-engineering-emea@dev.azure.com/fabrikamfiber2024-engineering-emea/"
                   "Web/_git/web"), None),
    (ORIGIN.format("https://0123456789abcdef0123456789abcdef01234567@github.com/o/r"), "a URL whose user is a token"),
    (ORIGIN.format("https://glpat-abcdefghij0123456789@gitlab.com/o/r"), "a URL whose user is a token"),
    ('[branch "fixBug1234InParserNow"]\n\tmerge = refs/heads/fixBug1234InParserNow\n'
     '[user]\n\tsigningkey = 3AA5C34371567BD2\n[credential]\n\thelper = store\n', None),
    ('[http]\n\textraheader =\n\textraheader = ""\n', None),  # an empty one resets the list
    ('[http]\n\t# extraheader = AUTHORIZATION: basic eDp5\n', None),  # commented out
])
def test_credentials_in_a_git_config(text: str, found: str | None) -> None:
    assert credential_in(text) == found


@pytest.mark.parametrize("path, workspace, git_reads_it", [
    (".git/config", "/home/me/p", True),
    ("config", "/srv/mirror.git", True),
    (".gitconfig", "/home/me", True),
    # git's XDG config, `insteadOf` tokens and extraheaders there read unasked from a session on ~
    (".config/git/config", "/home/me", True),
    ("git/config", "/home/me/.config", True),
    ("config", "/home/me/.config/git", True),
    (".Config/Git/CONFIG", "/home/me", True),  # any case, as `.GIT/config` and the secret-like names
    # a `config` elsewhere is judged by its path alone
    ("app/config", "/home/me/p", False),
    ("git/config", "/home/me/p", False),
    (".config/config", "/home/me", False),
    (".config/git/sub/config", "/home/me", False),
    ("config", "/home/me/git", False),
    (".config/git/config.bak", "/home/me", False),
])
def test_which_files_git_reads_as_a_config(path: str, workspace: str, git_reads_it: bool) -> None:
    assert is_git_config(tuple(path.split("/")), workspace) is git_reads_it


def test_gits_xdg_config_is_where_scvds_environment_puts_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """git reads $XDG_CONFIG_HOME/git/config (git-config(1)), and bash inherits scvd's environment:
    one in a folder not named `.config` was judged by its path alone."""
    xdg, home = tmp_path / "xdgconf", tmp_path / "home"
    (xdg / "git").mkdir(parents=True)
    (home / "dotfiles" / "git").mkdir(parents=True)
    os.symlink("dotfiles", home / ".config")  # ~/.config linked into a dotfiles folder
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(xdg))
    for path, workspace in (("xdgconf/git/config", tmp_path), ("git/config", xdg), ("config", xdg / "git"),
                            ("xdgconf/GIT/config", tmp_path), ("dotfiles/git/config", home)):
        assert is_git_config(tuple(path.split("/")), str(workspace)), path
    for path in ("xdgconf/config", "xdgconf/git/sub/config", "other/git/config", "xdgconf/git/config.bak"):
        assert not is_git_config(tuple(path.split("/")), str(tmp_path)), path
    monkeypatch.setenv("XDG_CONFIG_HOME", "xdgconf")  # relative: invalid (XDG spec), and scvd unsets it
    assert not is_git_config(("xdgconf", "git", "config"), str(tmp_path))
    monkeypatch.setenv("XDG_CONFIG_HOME", "")  # unset or empty: ~/.config/git/config alone
    assert not is_git_config(("xdgconf", "git", "config"), str(tmp_path))


def test_a_bare_repositorys_config_counts_whatever_its_folder_is_named(tmp_path: Path) -> None:
    """A bare repository not named `*.git` (`git init --bare ~/.cfg`, the usual dotfiles setup) is
    a git dir by content (HEAD beside config, objects, refs), as always_ask.py takes it: its
    config was judged by the folder's name alone and read unasked with a token in it."""
    subprocess.run(["git", "init", "-q", "--bare", str(tmp_path / ".cfg")], check=True)
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "config").write_text("[core]\n")  # a config, no HEAD beside it
    assert is_git_config((".cfg", "config"), str(tmp_path))
    assert is_git_config(("config",), str(tmp_path / ".cfg"))  # a session on the bare repository
    assert not is_git_config(("notes", "config"), str(tmp_path))
    assert not is_git_config((".cfg", "hooks", "config"), str(tmp_path))


@pytest.mark.parametrize("text", [
    '"[core]\\n# " + "A" * (1 << 20)',  # a long run of letters: a scheme was looked for at each one
    '"https://" + "u" * (1 << 20) + "@"',  # a user that runs on
    '"a1" * (1 << 19)',
])
def test_a_crafted_git_config_is_judged_in_linear_time(text: str) -> None:
    """read judges a git config on the event loop: its URL patterns, unanchored, cost N^2 steps on a
    long run of letters (64 KiB of them froze every client of scvd for 9 s a read; 1 MiB would run
    for hours, the GIL held, past any pytest-timeout: so in a process of its own). Linear now."""
    code = f"from scvd.tools.git_config_secret import credential_in; print(credential_in({text}))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout) == (0, "None\n"), done.stderr[-2000:]
