"""The places outside scvd's folders whose files run outside the sandbox later, and exposes_host by them."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from scvd.approvals import exposes_host
from scvd.config import Config, McpConfig, McpServerConfig
from scvd.host_places import places


@pytest.fixture(autouse=True)
def _fresh_cache(monkeypatch):
    # pytest's start directory is on this process's import path (python -m pytest), and run from /tmp it
    # holds every tmp_path: the places here are those of a daemon run from this checkout
    root = str(Path(__file__).resolve().parents[1])
    monkeypatch.setattr(sys, "path", [root if os.path.abspath(e) == os.getcwd() else e for e in sys.path])
    monkeypatch.setattr("scvd.host_places.started_in", lambda: None)
    monkeypatch.setattr("scvd.host_places.started_env", dict, raising=False)  # pytest's own LD_LIBRARY_PATH is not scvd's
    exposes_host.cache_clear()
    yield
    exposes_host.cache_clear()


def exposed(ws: Path, config: Config, *, bwrap: str | None = None, path: str = "/usr/bin",
            home: Path | None = None, env: dict[str, str] | None = None) -> bool:
    home = home or ws.parent / "user"
    return exposes_host(str(ws), (), str(home), host=places(config, bwrap, {"PATH": path, **(env or {})}, str(home)))


def mcp(command: str, cwd: str | None = None) -> Config:
    return Config(mcp=McpConfig(servers={"x": McpServerConfig(command=command, cwd=cwd)}))


def test_a_workspace_that_holds_a_directory_on_scvds_path_exposes_the_host(tmp_path: Path):
    """scvd finds bwrap, the agent CLIs and MCP commands on its PATH: an unasked call that wrote
    `bin/bwrap` in a workspace holding a PATH directory had every later call run unsandboxed."""
    ws = tmp_path / "ws"
    (ws / "src").mkdir(parents=True)
    for entry in (ws / "bin", ws / "go/bin"):  # there or not yet: a call can make it
        assert exposed(ws, Config(), path=f"{entry}:/usr/bin")
        assert exposed(ws / "go", Config(), path=f"{entry}:/usr/bin") is (entry == ws / "go/bin")
    assert not exposed(ws / "src", Config(), path=f"{ws / 'bin'}:/usr/bin")
    # a PATH entry that leads through a link in the workspace: the link can be replaced
    (tmp_path / "tools/bin").mkdir(parents=True)
    (ws / "tools").symlink_to(tmp_path / "tools")
    assert exposed(ws, Config(), path=f"{ws / 'tools/bin'}:/usr/bin")
    assert not exposed(ws, Config(), path="/usr/bin:/bin")


def test_an_empty_or_relative_path_entry_is_no_place_of_scvds_working_directory(tmp_path: Path, monkeypatch):
    """scvd drops such entries from its environment at start (search_paths.py): no child and no lookup
    of scvd's reads them, and a workspace at scvd's working directory had every call asked."""
    ws = tmp_path / "ws"
    (ws / "bin").mkdir(parents=True)
    monkeypatch.chdir(ws)
    assert not exposed(ws, Config(), path=":/usr/bin:.:bin")
    assert exposed(ws, Config(), path=f":{ws / 'bin'}")


@pytest.mark.parametrize("name, entry", [("LD_LIBRARY_PATH", "build/lib"), ("LD_LIBRARY_PATH", "x/$LIB"),
                                         ("LD_PRELOAD", "hook.so"), ("LD_AUDIT", "build/audit.so")])
def test_a_workspace_that_holds_what_bwraps_loader_loads_exposes_the_host(tmp_path: Path, name: str, entry: str):
    """bwrap starts in the workspace, outside the sandbox, with scvd's environment: an unasked call that
    wrote build/lib/libcap.so.2 under an LD_LIBRARY_PATH entry ran its code in bwrap at the next call."""
    ws = tmp_path / "ws"
    (ws / "src").mkdir(parents=True)
    env = {name: f"/opt/nothing:{ws / entry}"}
    assert exposed(ws, Config(), env=env)
    assert not exposed(ws / "src", Config(), env=env)
    assert not exposed(ws, Config(), env={name: "/opt/nothing/lib:libname.so"})


def test_a_workspace_at_or_above_where_scvds_own_loader_reads_a_relative_entry_exposes_the_host(
        tmp_path: Path, monkeypatch):
    """scvd's own loader keeps the LD_LIBRARY_PATH scvd started with, cleaned or not: an empty entry
    is its working directory, where a module imported later (ssl) finds its libraries."""
    ws = tmp_path / "ws"
    (ws / "run/sub").mkdir(parents=True)
    monkeypatch.chdir(ws / "run")
    monkeypatch.setattr("scvd.host_places.started_env", lambda: {"LD_LIBRARY_PATH": "/opt/x/lib:"})
    assert exposed(ws, Config()) and exposed(ws / "run", Config())
    assert not exposed(ws / "run/sub", Config())  # a call there cannot write in run/ itself
    monkeypatch.setattr("scvd.host_places.started_env", lambda: {"LD_LIBRARY_PATH": "/opt/x/lib"})
    exposes_host.cache_clear()
    assert not exposed(ws, Config())


def test_a_workspace_that_holds_the_program_scvd_runs_or_where_it_leads_exposes_the_host(tmp_path: Path):
    """bwrap as configured, and an MCP server's command and cwd, whether named by path or found on
    PATH through a link into a package directory (`npm i -g`'s bin links)."""
    ws, pkg = tmp_path / "ws", tmp_path / "ws/pkg"
    (pkg / "lib").mkdir(parents=True)
    (pkg / "server.js").write_text("")
    (pkg / "server.js").chmod(0o755)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "srv").symlink_to(pkg / "server.js")
    assert exposed(ws, Config(), bwrap=str(pkg / "bwrap"))
    assert exposed(ws, mcp(str(bin_dir / "srv")))
    assert exposed(ws, mcp("srv"), path=str(bin_dir))
    assert exposed(pkg / "lib", mcp("srv"), path=str(bin_dir))  # inside the program's own directory
    assert exposed(ws, mcp("/usr/bin/env", cwd=str(pkg)))  # `npx` there loads the workspace's code
    assert not exposed(ws, mcp("srv"), path="/usr/bin")  # not found: nothing of it runs
    assert not exposed(ws, Config(), bwrap="/usr/bin/bwrap")


def test_a_workspace_at_inside_or_above_scvds_python_exposes_the_host(tmp_path: Path):
    """scvd imports modules as it goes (a checkout of scvd, its venv's site-packages)."""
    package = Path(__file__).resolve().parents[1] / "scvd"
    for place in (package, Path(sys.prefix), Path(sys.base_prefix)):
        assert exposed(place, Config()) and exposed(place.parent, Config()), place
    assert exposed(Path(os.path.realpath(sys.prefix)) / "lib", Config())
    assert not exposed(tmp_path / "ws", Config())


@pytest.mark.parametrize("entry", [".bashrc", ".gitconfig", ".profile", ".ssh/rc", ".config/systemd",
                                   ".local/bin", ".local/share/applications", "xdg-data/systemd"])
def test_a_workspace_that_a_dotfile_links_into_exposes_the_host(tmp_path: Path, entry: str):
    """~/.bashrc -> a dotfiles repository: unasked, a call there edited what the next shell runs
    (.gitconfig: a core.fsmonitor for every repository; .ssh/rc at the next login; a systemd unit;
    ~/.local/bin on the login shell's PATH; a desktop entry or user unit in XDG_DATA_HOME, by default
    ~/.local/share: those the list of links left out)."""
    home, dots = tmp_path / "home", tmp_path / "dots"
    env = {"XDG_DATA_HOME": str(home / "xdg-data")}
    for folder in (".ssh", ".config", ".local/share", "xdg-data"):
        (home / folder).mkdir(parents=True)
    (dots / "sub").mkdir(parents=True)
    (home / entry).symlink_to(dots / "sub" / "target")
    assert exposed(dots, Config(), home=home, env=env) and exposed(dots / "sub", Config(), home=home, env=env)
    assert not exposed(tmp_path / "project", Config(), home=home, env=env)
    (home / entry).unlink()
    (home / entry).write_text("")  # the file itself, in the home: no repository to protect
    exposes_host.cache_clear()
    assert not exposed(dots, Config(), home=home, env=env)


def test_a_workspace_inside_a_folder_that_a_config_entry_links_to_exposes_the_host(tmp_path: Path):
    """~/.config/nvim -> dots/nvim: its plugins run in the next editor; a link on the way counts."""
    home, dots = tmp_path / "home", tmp_path / "dots"
    (home / ".config").mkdir(parents=True)
    (dots / "nvim/lua").mkdir(parents=True)
    (home / ".config/nvim").symlink_to(dots / "nvim")
    assert exposed(dots / "nvim/lua", Config(), home=home)
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws/dots").symlink_to(dots)
    (home / ".config/nvim").unlink()
    (home / ".config/nvim").symlink_to(tmp_path / "ws/dots/nvim")  # through a link the workspace holds
    assert exposed(tmp_path / "ws", Config(), home=home)
