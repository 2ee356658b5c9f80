"""Where an instance keeps its files (SCV_HOME, XDG, SCV_SOCKET) and keeping them 0700/0600."""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

import pytest

from scvd import paths as paths_mod
from scvd.paths import prepare, repair_tree, resolve, runtime_base


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


@pytest.fixture
def xdg(tmp_path, monkeypatch):
    """A fake HOME with every XDG variable unset; platformdirs reads os.environ."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    for name in ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_RUNTIME_DIR",
                 "SCV_HOME", "SCV_SOCKET"):
        monkeypatch.delenv(name, raising=False)
    return home


def test_scv_home_layout(tmp_path):
    root = tmp_path / "inst"
    p = resolve({"SCV_HOME": str(root)})
    assert p.home == root
    assert p.config_file == root / "config.toml"
    assert p.adapters_dir == root / "adapters" and p.skills_dir == root / "skills"
    assert p.tools_dirs == (root / "tools",)  # the config and data dirs are one: read once
    assert (p.state_dir, p.audit_log, p.lock_file) == (root / "state", root / "state/audit.log",
                                                      root / "state/scvd.lock")
    assert p.runtime_dir == root / "run" and p.socket == root / "run" / "scvd.sock"


def test_scv_home_relative_and_tilde_become_absolute(tmp_path, monkeypatch, xdg):
    monkeypatch.chdir(tmp_path)
    assert resolve({"SCV_HOME": "rel"}).home == tmp_path / "rel"
    assert resolve({"SCV_HOME": "~/inst"}).home == xdg / "inst"


def test_a_tilde_with_an_empty_home_is_the_accounts_home(tmp_path, monkeypatch, xdg):
    """`~/inst` with HOME empty was `/inst`: an instance at the filesystem's root."""
    import pwd

    account = pwd.getpwuid(os.getuid()).pw_dir
    assert resolve({"SCV_HOME": "~/inst", "HOME": ""}).home == xdg / "inst"  # the daemon's own HOME
    monkeypatch.setenv("HOME", "")
    assert resolve({"SCV_HOME": "~/inst", "HOME": ""}).home == Path(account) / "inst"
    assert resolve({"SCV_HOME": str(tmp_path), "SCV_SOCKET": "~/s.sock"}).socket == Path(account) / "s.sock"


@pytest.mark.parametrize("command, code", [(["scvd", "check-config"], 2), (["scvctl", "status"], 1)])
def test_a_tilde_naming_no_account_is_one_line_saying_so_not_a_traceback(tmp_path, command, code):
    """`SCV_HOME=~nobodyhere/scv`: expanduser() raised RuntimeError, a traceback in scvd and every scvctl."""
    import subprocess
    import sys

    env = dict(os.environ, SCV_HOME="~nobodyhere-scv/inst", HOME=str(tmp_path),
               PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    out = subprocess.run([sys.executable, "-m", *command], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == code and "Traceback" not in out.stderr, out.stderr
    assert "SCV_HOME=~nobodyhere-scv/inst: ~nobodyhere-scv names no user account on this machine; use ~/ " \
           "(your home) or an absolute path" in out.stderr


@pytest.mark.parametrize("command, env_extra, code, named", [
    (["scvd", "check-config"], {"SCV_HOME": "rel"}, 2, "SCV_HOME=rel"),
    (["scvd", "run"], {"SCV_SOCKET": "rel.sock"}, 2, "SCV_SOCKET=rel.sock"),
    (["scvd", "--config", "rel.toml", "check-config"], {}, 2, "--config rel.toml"),
    (["scvd", "run", "--daemon", "--pid-file", "x.pid"], {}, 2, "--pid-file x.pid"),
    (["scvctl", "status"], {"SCV_HOME": "rel"}, 1, "SCV_HOME=rel"),
])
def test_a_relative_path_in_a_removed_current_directory_is_one_line_saying_so(tmp_path, command, env_extra, code,
                                                                             named):
    """A shell whose directory was removed (rm -rf of a build dir): os.getcwd() raised, a traceback."""
    import subprocess
    import sys

    gone = tmp_path / "gone"
    gone.mkdir()
    env = {**os.environ, "HOME": str(tmp_path), "SCV_HOME": str(tmp_path / "inst"),
           "PYTHONPATH": str(Path(__file__).resolve().parents[1]), **env_extra}
    out = subprocess.run(["sh", "-c", 'cd "$1" && rmdir "$1" && shift && exec "$@"', "sh", str(gone),
                          sys.executable, "-m", *command], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == code and "Traceback" not in out.stderr, out.stderr
    assert f"{named} is relative and the current directory no longer exists: cd to a directory that exists, " \
           "or give an absolute path" in out.stderr


def test_xdg_layout_from_home(xdg):
    p = resolve(dict(os.environ))
    assert p.home is None
    assert p.config_dir == xdg / ".config" / "scv"
    assert p.data_dir == xdg / ".local" / "share" / "scv"
    assert p.state_dir == xdg / ".local" / "state" / "scv"
    assert p.adapters_dir == xdg / ".local" / "share" / "scv" / "adapters"
    assert p.lock_file == xdg / ".local" / "state" / "scv" / "scvd.lock"


def test_xdg_layout_from_xdg_variables(xdg, tmp_path, monkeypatch):
    for name in ("config", "data", "state", "runtime"):
        d = tmp_path / f"xdg-{name}"
        d.mkdir(mode=0o700)
        monkeypatch.setenv(f"XDG_{name.upper()}_{'DIR' if name == 'runtime' else 'HOME'}", str(d))
    p = resolve()
    assert p.config_file == tmp_path / "xdg-config" / "scv" / "config.toml"
    assert p.data_dir == tmp_path / "xdg-data" / "scv"
    assert p.state_dir == tmp_path / "xdg-state" / "scv"
    assert p.runtime_dir == tmp_path / "xdg-runtime" / "scv"
    assert p.socket == tmp_path / "xdg-runtime" / "scv" / "scvd.sock"


def test_the_roots_are_scvds_folders_in_both_layouts(xdg, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "rt"))
    (tmp_path / "rt").mkdir(mode=0o700)
    p = resolve()
    assert p.roots() == [p.config_dir, p.data_dir, p.state_dir, tmp_path / "rt" / "scv"]
    home = resolve({"SCV_HOME": str(tmp_path / "i")})
    assert home.roots() == [tmp_path / "i", tmp_path / "i" / "state", tmp_path / "i" / "run"]


def test_scv_socket_overrides_both_layouts(xdg, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert resolve({"SCV_SOCKET": "/srv/s.sock"}).socket == Path("/srv/s.sock")
    assert resolve({"SCV_HOME": str(tmp_path / "i"), "SCV_SOCKET": "x.sock"}).socket == tmp_path / "x.sock"
    p = resolve({"SCV_HOME": str(tmp_path / "i"), "SCV_SOCKET": str(tmp_path / "elsewhere" / "s.sock")})
    assert p.runtime_dir not in p.private_dirs()  # scvd makes no run dir it does not use


def test_runtime_fallback_without_xdg_runtime_dir(xdg):
    uid = os.getuid()
    assert runtime_base({}) == Path(f"/run/user/{uid}")
    assert runtime_base({"XDG_RUNTIME_DIR": ""}) == Path(f"/run/user/{uid}")
    p = resolve(dict(os.environ))
    if Path(f"/run/user/{uid}").is_dir():  # as a systemd login gives it: the daemon's own socket
        assert p.socket == Path(f"/run/user/{uid}/scv/scvd.sock")
        assert resolve({**os.environ, "XDG_RUNTIME_DIR": f"/run/user/{uid}"}).socket == p.socket
    else:  # no runtime dir at all: a private one under the state dir
        assert p.socket == xdg / ".local" / "state" / "scv" / "run" / "scvd.sock"


def test_missing_runtime_dir_falls_back_to_state(xdg, tmp_path):
    p = resolve({**os.environ, "XDG_RUNTIME_DIR": str(tmp_path / "gone")})
    assert p.runtime_dir == xdg / ".local" / "state" / "scv" / "run"


def test_client_and_daemon_agree_on_the_socket(xdg, monkeypatch, tmp_path):
    from scvctl.client import default_socket

    monkeypatch.setenv("SCV_HOME", str(tmp_path / "i"))
    assert default_socket() == resolve().socket == tmp_path / "i" / "run" / "scvd.sock"
    monkeypatch.setenv("SCV_SOCKET", str(tmp_path / "s.sock"))
    assert default_socket() == tmp_path / "s.sock"


# --- private modes -------------------------------------------------------------------------


@pytest.fixture
def umask022():
    old = os.umask(0o022)
    yield
    os.umask(old)


def test_prepare_creates_everything_0700(tmp_path, umask022):
    p = resolve({"SCV_HOME": str(tmp_path / "fresh")})
    assert prepare(p) == []
    for d in (p.home, p.state_dir, p.runtime_dir, p.adapters_dir):
        assert mode(d) == 0o700, d


def test_loose_modes_are_repaired_and_logged(tmp_path, caplog, umask022):
    root = tmp_path / "inst"
    p = resolve({"SCV_HOME": str(root)})
    for d in (root, root / "state", root / "run", root / "adapters" / "codex" / "sessions"):
        d.mkdir(parents=True, exist_ok=True)
        d.chmod(0o755)
    files = {root / "config.toml": 0o644, root / "state" / "audit.log": 0o640,
             root / "adapters" / "codex" / "auth.json": 0o666,
             root / "adapters" / "codex" / "sessions" / "run.sh": 0o755}
    for f, m in files.items():
        f.write_text("x")
        f.chmod(m)
    outside = tmp_path / "outside.txt"
    outside.write_text("not ours")
    outside.chmod(0o644)
    (root / "adapters" / "codex" / "link").symlink_to(outside)

    with caplog.at_level(logging.WARNING, logger="scvd.paths"):
        notes = prepare(p)
    for d in (root, root / "state", root / "run", root / "adapters", root / "adapters" / "codex",
              root / "adapters" / "codex" / "sessions"):
        assert mode(d) == 0o700, d
    assert mode(root / "config.toml") == 0o600 and mode(root / "state" / "audit.log") == 0o600
    assert mode(root / "adapters" / "codex" / "auth.json") == 0o600
    assert mode(root / "adapters" / "codex" / "sessions" / "run.sh") == 0o700  # still executable
    assert mode(outside) == 0o644  # a symlink's target is not ours to change
    logged = "\n".join(r.getMessage() for r in caplog.records)
    for path in [root, root / "config.toml", root / "adapters" / "codex" / "auth.json"]:
        assert any(str(path) + " from" in n for n in notes), path
        assert f"repaired permissions: tightened {path} from" in logged
    assert prepare(p) == []  # nothing left to repair


def test_repair_tree_is_a_no_op_on_a_symlinked_root(tmp_path):
    real = tmp_path / "real"
    real.mkdir(mode=0o755)
    (tmp_path / "link").symlink_to(real)
    assert repair_tree(tmp_path / "link") == []
    assert mode(real) == 0o755


@pytest.mark.parametrize("kind", ["file", "dir"])
def test_an_entry_swapped_for_a_symlink_mid_repair_leaves_its_target_alone(tmp_path, monkeypatch, kind):
    """An agent in its home swaps an entry for a symlink after the repair looked at it: a chmod by
    path followed the link and set a file outside the home to the owner bits the agent chose."""
    home, outside = tmp_path / "home", tmp_path / "outside"
    home.mkdir(mode=0o700)
    outside.mkdir() if kind == "dir" else outside.write_text("the user's own")
    outside.chmod(0o755)
    entry = home / "entry"
    entry.mkdir() if kind == "dir" else entry.write_text("the agent's")
    entry.chmod(0o077)  # repaired to 0000: no access left for the owner either
    real_lstat, swapped = os.lstat, []

    def lstat_then_swap(path, *, dir_fd=None):  # the agent acts right after scvd's look
        seen = real_lstat(path, dir_fd=dir_fd)
        if os.path.basename(path) == "entry" and not swapped:
            entry.rmdir() if kind == "dir" else entry.unlink()
            entry.symlink_to(outside)
            swapped.append(path)
        return seen

    monkeypatch.setattr(os, "lstat", lstat_then_swap)
    notes = repair_tree(home)
    monkeypatch.undo()
    assert swapped, "the repair never looked at the entry"
    assert mode(outside) == 0o755
    assert not any("entry" in note for note in notes)


def test_ensure_private_dir_tightens(tmp_path):
    d = tmp_path / "d"
    d.mkdir(mode=0o777)
    d.chmod(0o775)
    assert paths_mod.ensure_private_dir(d) == f"tightened {d} from 0775 to 0700"
    assert paths_mod.ensure_private_dir(d) is None


def test_daemon_start_repairs_and_logs(make_daemon, tmp_path):
    home = tmp_path / "loose"
    home.mkdir()
    home.chmod(0o755)
    (home / "config.toml").write_text('log_level = "info"\n')
    (home / "config.toml").chmod(0o644)
    d = make_daemon(home=home)
    assert mode(home) == 0o700 and mode(home / "config.toml") == 0o600
    log = d.log()
    assert f"repaired permissions: tightened {home} from 0755 to 0700" in log
    assert f"repaired permissions: tightened {home / 'config.toml'} from 0644 to 0600" in log


# --- the environment given, not os.environ -------------------------------------------------


def test_resolve_honours_the_env_it_is_given_for_every_directory(tmp_path):
    before = dict(os.environ)
    runtime = tmp_path / "rt"
    runtime.mkdir(mode=0o700)
    plain = resolve({"HOME": str(tmp_path / "a")})
    xdg = resolve({"HOME": str(tmp_path / "b"), "XDG_CONFIG_HOME": str(tmp_path / "cfg"),
                   "XDG_DATA_HOME": str(tmp_path / "data"), "XDG_STATE_HOME": str(tmp_path / "state"),
                   "XDG_RUNTIME_DIR": str(runtime)})
    assert os.environ == before
    assert (plain.config_dir, plain.data_dir, plain.state_dir) == (
        tmp_path / "a/.config/scv", tmp_path / "a/.local/share/scv", tmp_path / "a/.local/state/scv")
    if not Path(f"/run/user/{os.getuid()}").is_dir():
        assert plain.socket == tmp_path / "a/.local/state/scv/run/scvd.sock"
    assert (xdg.config_file, xdg.adapters_dir, xdg.audit_log, xdg.socket) == (
        tmp_path / "cfg/scv/config.toml", tmp_path / "data/scv/adapters", tmp_path / "state/scv/audit.log",
        runtime / "scv" / "scvd.sock")
    assert xdg.tools_dirs == (tmp_path / "cfg/scv/tools", tmp_path / "data/scv/tools")  # seed 003's first


def test_a_runtime_dir_others_may_enter_is_not_used(xdg, tmp_path, monkeypatch):
    """platformdirs' check: XDG_RUNTIME_DIR must be ours and 0700, or the socket goes elsewhere."""
    loose = tmp_path / "loose"
    loose.mkdir()
    loose.chmod(0o755)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(loose))
    assert resolve().runtime_dir != loose / "scv"
    loose.chmod(0o700)
    assert resolve().runtime_dir == loose / "scv"


def test_unit_dir_follows_xdg_config_home(tmp_path):
    from scvctl.service import unit_dir

    assert unit_dir({"HOME": str(tmp_path)}) == tmp_path / ".config/systemd/user"
    assert unit_dir({"HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path / "c")}) == \
        tmp_path / "c/systemd/user"
    assert unit_dir({"HOME": str(tmp_path), "XDG_CONFIG_HOME": "relative"}) == \
        tmp_path / ".config/systemd/user"  # the XDG spec ignores a relative value
