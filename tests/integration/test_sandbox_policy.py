"""The sandbox-aware policy end to end: a real daemon, real bwrap, real bash calls."""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from scvd import protocol as p
from scvd.proctree import scan_processes

from conftest import ROOT, base_env, reloaded, wait_pending

pytestmark = pytest.mark.bwrap

SANDBOXED = '[approvals]\npolicy = "sandbox-aware"\n[sandbox]\nmode = "bwrap"\n'


@pytest.mark.one_loop
def test_offline_sandboxed_bash_runs_unasked_and_stays_in_the_workspace(make_daemon, workspace: Path, tmp_path):
    d = make_daemon(SANDBOXED)
    outside = tmp_path / "outside.txt"
    with d.client() as c:
        status = c.status()
        assert status.policy == "sandbox-aware"
        assert status.policy_note.startswith("unasked sandboxed calls keep git metadata read-only")
        assert status.sandbox.startswith("active: bwrap works")
        sid = c.open_session(workspace)
        done = c.call(sid, "bash", {"command": f"echo in > inside.txt; echo out > {outside}; "
                                               "echo out > /etc/scvd-policy-probe || echo refused"})
        assert done.ok, done.error
        assert c.request(p.ApprovalsList).approvals == []
    assert "refused" in done.result["output"]
    assert (workspace / "inside.txt").read_text() == "in\n"
    assert not outside.exists()  # it landed in the call's private /tmp, gone with it
    assert not Path("/etc/scvd-policy-probe").exists()


@pytest.fixture
def host_shm() -> Iterator[str]:
    """A 0600 SysV shared memory segment of the host's (the test's user), removed afterwards: its key as
    /proc/sysvipc/shm shows it."""
    libc = ctypes.CDLL(None, use_errno=True)
    key = 0x5CD00000 + os.getpid() % 0xFFFF
    shmid = libc.shmget(key, 1 << 20, 0o1000 | 0o600)  # IPC_CREAT
    assert shmid >= 0, os.strerror(ctypes.get_errno())
    try:
        yield str(key)
    finally:
        libc.shmctl(shmid, 0, None)  # IPC_RMID


def keys(sysvipc: str) -> list[str]:
    return [line.split()[0] for line in sysvipc.splitlines()[1:] if line.split()]


@pytest.mark.one_loop
def test_a_sandboxed_call_does_not_see_the_hosts_shared_memory(make_daemon, workspace: Path, host_shm: str):
    """The IPC namespace was the host's: an unasked call listed the host's SysV segments (ipcs -m),
    attached to a 0600 one and wrote it."""
    assert host_shm in keys(Path("/proc/sysvipc/shm").read_text())  # where the host sees it
    d = make_daemon(SANDBOXED)
    with d.client() as c:
        done = c.call(c.open_session(workspace), "bash", {"command": "echo START; cat /proc/sysvipc/shm"})
        assert c.request(p.ApprovalsList).approvals == []
    assert done.ok and done.result["exit_code"] == 0, done
    seen = done.result["output"].split("START\n", 1)[1]  # a login shell's profile may print first
    assert "shmid" in seen and host_shm not in keys(seen), seen


@pytest.mark.one_loop
def test_with_network_the_sandboxed_call_still_asks_and_says_it_is_sandboxed(make_daemon, workspace: Path):
    d = make_daemon(SANDBOXED + "network = true\n")
    with d.client() as c, d.client(name="owner") as owner:
        sid = c.open_session(workspace)
        call_id = c.start_call(sid, "bash", {"command": "echo hi"})
        pending = wait_pending(owner)[0]
        assert pending.call_id == call_id and pending.sandboxed is True
        owner.request(p.ApprovalDecide, approval_id=pending.approval_id, decision="approve")
        done = c.wait_call(call_id)
    # a login shell's profile may print its own lines first (pyenv does here)
    assert done.ok and done.result["output"].endswith("hi\n")


@pytest.mark.one_loop
def test_on_risk_policy_asks_even_for_a_sandboxed_call(make_daemon, workspace: Path):
    d = make_daemon('[sandbox]\nmode = "bwrap"\n')
    with d.client() as c, d.client(name="owner") as owner:
        sid = c.open_session(workspace)
        call_id = c.start_call(sid, "bash", {"command": "true"})
        pending = wait_pending(owner)[0]
        assert pending.sandboxed is True and pending.tool == "bash"
        owner.request(p.ApprovalDecide, approval_id=pending.approval_id, decision="deny")
        assert c.wait_call(call_id).error.kind == "denied"


@pytest.mark.one_loop
def test_the_socket_is_not_reachable_from_a_sandboxed_call(make_daemon, workspace: Path):
    d = make_daemon(SANDBOXED)
    with d.client() as c:
        sid = c.open_session(workspace)
        done = c.call(sid, "bash", {"command": f"ls -a {d.socket.parent}; test -S {d.socket} && echo VISIBLE"})
    assert done.ok
    assert "VISIBLE" not in done.result["output"]


@pytest.mark.one_loop
def test_a_missing_bwrap_is_reported_and_refuses_sandboxed_calls_before_approval(make_daemon, workspace, tmp_path):
    d = make_daemon(SANDBOXED.replace('mode = "bwrap"', f'mode = "bwrap"\nbwrap = "{tmp_path}/no-bwrap"'))
    with d.client() as c:
        assert "not" in c.status().sandbox.lower()
        sid = c.open_session(workspace)
        done = c.call(sid, "bash", {"command": "true"})
        assert c.request(p.ApprovalsList).approvals == []
    assert done.error.kind == "unavailable"
    assert "no-bwrap" in done.error.message


@pytest.mark.one_loop
def test_status_and_check_config_show_the_probe_verdict(make_daemon, scv_home: Path):
    d = make_daemon(SANDBOXED, home=scv_home)
    st = subprocess.run([sys.executable, "-m", "scvctl", "status"], env=base_env(scv_home),
                        capture_output=True, text=True, timeout=30)
    line = next(x for x in st.stdout.splitlines() if x.startswith("sandbox: "))
    cc = subprocess.run([sys.executable, "-m", "scvd", "check-config"], env=base_env(scv_home),
                        capture_output=True, text=True, timeout=30)
    assert cc.returncode == 0, cc.stderr
    assert f"# sandbox: {line.removeprefix('sandbox: ')}" in cc.stdout
    d.stop()


@pytest.mark.one_loop
def test_a_session_grant_for_sandboxed_bash_does_not_cover_it_unsandboxed_after_a_reload(
        make_daemon, workspace: Path, tmp_path):
    """The person granted bash sandboxed; a reload that turns the sandbox off must ask again."""
    import signal
    import time

    d = make_daemon('[sandbox]\nmode = "bwrap"\n')
    outside = tmp_path / "outside.txt"
    with d.client() as c, d.client(name="owner") as owner:
        sid = c.open_session(workspace)
        first = c.start_call(sid, "bash", {"command": "true"})
        pending = wait_pending(owner)[0]
        assert pending.sandboxed is True
        owner.request(p.ApprovalDecide, approval_id=pending.approval_id, decision="approve", scope="session")
        assert c.wait_call(first).ok
        assert c.call(sid, "bash", {"command": "true"}).ok  # the grant covers the next sandboxed call
        (d.home / "config.toml").write_text("# the defaults\n")  # sandbox.mode back to off
        d.proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 15
        while not c.status().sandbox.startswith("off") and time.monotonic() < deadline:
            time.sleep(0.05)
        call_id = c.start_call(sid, "bash", {"command": f"echo escaped > {outside}"})
        pending = wait_pending(owner, timeout=5)[0]
        assert pending.call_id == call_id and pending.sandboxed is False
        owner.request(p.ApprovalDecide, approval_id=pending.approval_id, decision="deny")
        assert c.wait_call(call_id).error.kind == "denied"
    assert not outside.exists()  # it landed in the call's private /tmp, gone with it
    assert not Path("/etc/scvd-policy-probe").exists()


def asked_and_denied(c, where: Path, command: str) -> None:
    """A sandboxed bash call in a session on `where` is put to a person, who denies it."""
    sid = c.open_session(where)
    call_id = c.start_call(sid, "bash", {"command": command})
    pending = wait_pending(c)[0]
    assert pending.call_id == call_id and pending.sandboxed is True
    c.request(p.ApprovalDecide, approval_id=pending.approval_id, decision="deny")
    assert c.wait_call(call_id).error.kind == "denied"

@pytest.mark.one_loop
def test_a_workspace_that_holds_the_users_home_asks_for_every_call(make_daemon, tmp_path: Path):
    # unasked, bash would append to ~/.bashrc (or ~/.gitconfig, ~/.config/systemd/user),
    # which runs outside any sandbox at the user's next shell, git call or login
    d = make_daemon(SANDBOXED)
    home = tmp_path / "scvhome0-user-home"  # the daemon's HOME (conftest.base_env)
    (home / "project").mkdir(parents=True)
    attack = "echo 'touch ~/pwned' >> ~/.bashrc"
    with d.client() as c:
        for where in (home, tmp_path):  # the home itself, a directory above it
            asked_and_denied(c, where, attack)
        sid = c.open_session(home / "project")  # a project inside the home still runs unasked
        assert c.call(sid, "bash", {"command": "echo inside > f.txt"}).ok
        assert c.request(p.ApprovalsList).approvals == []
    assert not (home / ".bashrc").exists() and (home / "project/f.txt").exists()


@pytest.mark.one_loop
def test_a_workspace_in_scvds_own_folder_or_the_homes_config_asks_for_every_call(make_daemon, tmp_path: Path):
    # unasked, a sandboxed bash there could add an MCP server to scvd's config.toml, or a git
    # fsmonitor to ~/.config/git/config, which run outside any sandbox later
    d = make_daemon(SANDBOXED)
    config = tmp_path / "scvhome0-user-home" / ".config"  # under the daemon's HOME (conftest.base_env)
    config.mkdir(parents=True)
    attack = "echo planted >> config.toml"
    with d.client() as c:
        for where in (d.home, config):
            asked_and_denied(c, where, attack)
    assert b"planted" not in (d.home / "config.toml").read_bytes() and not (config / "config.toml").exists()


@pytest.mark.one_loop
def test_a_workspace_that_holds_the_config_file_given_by_dash_dash_config_asks_for_every_call(
        make_daemon, workspace: Path):
    # the sandbox hides scvd's own folders, not a --config file outside them: unasked, a sandboxed
    # bash could add an MCP server to it, which starts unsandboxed at the next reload
    config = workspace / "scvd.toml"
    config.write_text(SANDBOXED)
    (workspace / "sub").mkdir()
    d = make_daemon(args=["--config", str(config)])
    with d.client() as c:
        asked_and_denied(c, workspace, "echo planted >> scvd.toml")
        sid = c.open_session(workspace / "sub")  # a folder beside it still runs unasked
        assert c.call(sid, "bash", {"command": "echo inside > f.txt"}).ok
        assert c.request(p.ApprovalsList).approvals == []
    assert config.read_text() == SANDBOXED and (workspace / "sub/f.txt").exists()


@pytest.mark.one_loop
def test_the_config_file_given_by_dash_dash_config_reads_empty_in_the_sandbox(make_daemon, workspace: Path):
    # `read` asks for it, but outside scvd's folders the sandbox showed it: an approved bash could
    # cat it (online, as here, or offline when it lies outside /tmp)
    config = workspace.parent / "etc" / "scvd.toml"
    config.parent.mkdir()
    config.write_text(SANDBOXED + "network = true\n# the config's own text\n")
    d = make_daemon(args=["--config", str(config)])
    with d.client() as c:
        call_id = c.start_call(c.open_session(workspace), "bash", {"command": f"cat {config}; echo END"})
        c.request(p.ApprovalDecide, approval_id=wait_pending(c)[0].approval_id, decision="approve")
        done = c.wait_call(call_id)
    assert done.ok and done.result["output"].endswith("END\n"), done
    assert "own text" not in done.result["output"]


@pytest.mark.one_loop
def test_a_file_backed_keyrings_store_reads_empty_in_the_sandbox(make_daemon, workspace: Path, tmp_path: Path):
    """PlaintextKeyring keeps every stored secret in $XDG_DATA_HOME/python_keyring/keyring_pass.cfg
    (or where KEYRING_PROPERTY_FILE_PATH says): the sandbox hid scvd's folders, not that one, so a
    sandboxed bash printed them all, unasked where it lay outside /tmp, /var/tmp and /run."""
    from test_secret_places_socket import IN_KEYRING, PLAINTEXT, encoded, set_secret, stored_in

    data, elsewhere = tmp_path / "data", tmp_path / "vault" / "store.ini"
    elsewhere.parent.mkdir()
    env = {"PYTHON_KEYRING_BACKEND": PLAINTEXT, "XDG_DATA_HOME": str(data)}
    d = make_daemon(SANDBOXED + "network = true\n", env={**env, "KEYRING_PROPERTY_FILE_PATH": str(elsewhere)})
    set_secret({k: v for k, v in d.env.items() if k != "KEYRING_PROPERTY_FILE_PATH"}, "GH_TOKEN", IN_KEYRING)
    set_secret(d.env, "OTHER_TOKEN", IN_KEYRING)
    store = data / "python_keyring" / "keyring_pass.cfg"
    assert stored_in(store, IN_KEYRING) and stored_in(elsewhere, IN_KEYRING)  # what a cat would show
    with d.client() as c:
        # online, so /tmp (where these are) is the host's, as a home is offline
        call_id = c.start_call(c.open_session(workspace), "bash", {"command": f"cat {store} {elsewhere}; echo END"})
        c.request(p.ApprovalDecide, approval_id=wait_pending(c)[0].approval_id, decision="approve")
        done = c.wait_call(call_id)
    assert done.ok and done.result["output"].endswith("END\n"), done
    assert encoded(IN_KEYRING) not in done.result["output"] and "[scv]" not in done.result["output"], done
    d.stop()
    offline = make_daemon(SANDBOXED, env=env)
    with offline.client() as c:  # one that holds it asks: its bind would show it whole again
        asked_and_denied(c, data, "cat python_keyring/keyring_pass.cfg")


@pytest.mark.one_loop
def test_a_workspace_that_is_a_directory_the_sandbox_hides_asks_for_every_call(make_daemon, tmp_path: Path):
    # an offline call sees /tmp, /var/tmp, /run and XDG_RUNTIME_DIR empty because their sockets
    # (tmux, X11, docker, the user's systemd and D-Bus) lead out of any sandbox; the workspace's
    # bind showed the host's again, so unasked, bash could drive the user's tmux server
    runtime = tmp_path / "rt" / "runtime"
    runtime.mkdir(mode=0o700, parents=True)
    d = make_daemon(SANDBOXED, env={"XDG_RUNTIME_DIR": str(runtime)})
    with d.client() as c:
        for where in (Path("/tmp"), runtime):
            asked_and_denied(c, where, "tmux send-keys 'touch ~/pwned' Enter")
        (runtime / "bus").write_text("")
        # a directory above one: the sandbox keeps that one hidden, but asks (one above it could be renamed)
        sid = c.open_session(runtime.parent)
        call_id = c.start_call(sid, "bash", {"command": "ls -A runtime"})
        c.request(p.ApprovalDecide, approval_id=wait_pending(c)[0].approval_id, decision="approve")
        done = c.wait_call(call_id)
        assert done.ok and done.result["output"] == "", done


PLANT = "mv a b; mkdir -p a/scv && echo '[mcp_servers.x]' > a/scv/config.toml; echo planted"


@pytest.mark.one_loop
@pytest.mark.parametrize("link", [False, True])
def test_a_workspace_two_levels_above_scvds_home_or_holding_a_link_to_it_asks_for_every_call(
        make_daemon, workspace: Path, tmp_path: Path, link: bool):
    # the sandbox hides SCV_HOME with a tmpfs, and only that is a mount point: unasked, bash could
    # rename a directory above it (`mv a b`), or replace a link on the way, and plant the config.toml
    # the daemon reads at its next start, whose MCP servers run unsandboxed
    if link:
        (tmp_path / "elsewhere").mkdir()
        (workspace / "a").symlink_to(tmp_path / "elsewhere")
    home = workspace / "a" / "scv"
    d = make_daemon(SANDBOXED, home=home, env={"HOME": str(tmp_path / "user")})  # not inside the workspace
    with d.client() as c:
        asked_and_denied(c, workspace, PLANT if not link else PLANT.replace("mv a b", "rm a"))
    assert (home / "config.toml").read_text() == SANDBOXED and not (workspace / "b").exists()


PLANT_PROGRAM = {
    # a stand-in that runs outside any sandbox at the next reload's probe, then passes through
    "PATH": "mkdir -p bin && printf '#!/bin/sh\\ntouch ~/pwned\\nexec /usr/bin/bwrap \"$@\"\\n' > bin/bwrap "
            "&& chmod +x bin/bwrap",
    # shadows the standard tempfile, which the daemon imports at its next start's probe
    "PYTHONPATH": "mkdir -p lib && echo 'import os; os.system(\"touch ~/pwned\")' > lib/tempfile.py",
}


@pytest.mark.one_loop
@pytest.mark.parametrize("variable", sorted(PLANT_PROGRAM))
def test_a_workspace_that_holds_a_directory_scvd_runs_programs_from_asks_for_every_call(
        make_daemon, workspace: Path, tmp_path: Path, variable: str):
    # scvd finds bwrap, the agent CLIs and MCP commands on its PATH and imports its modules from
    # sys.path: unasked, bash planted its own bwrap there, and after a reload every call ran unsandboxed
    user = tmp_path / "user"
    env = {"PATH": f"{workspace / 'bin'}:{os.environ['PATH']}", "PYTHONPATH": f"{workspace / 'lib'}:{ROOT}"}
    d = make_daemon(SANDBOXED, env={variable: env[variable], "HOME": str(user)})
    with d.client() as c:
        asked_and_denied(c, workspace, PLANT_PROGRAM[variable])
    reloaded(d, SANDBOXED)
    assert not (user / "pwned").exists() and not list(workspace.iterdir())
    assert f"bwrap works at {shutil.which('bwrap')}" in d.log()


@pytest.mark.one_loop
def test_a_dotfiles_repository_that_the_homes_bashrc_links_into_asks_for_every_call(make_daemon, tmp_path: Path):
    # ~/.bashrc -> dots/bashrc: unasked, bash there appended what the user's next shell runs
    user, dots = tmp_path / "user", tmp_path / "dots"
    user.mkdir()
    dots.mkdir()
    (dots / "bashrc").write_text("")
    (user / ".bashrc").symlink_to(dots / "bashrc")
    d = make_daemon(SANDBOXED, env={"HOME": str(user)})
    with d.client() as c:
        asked_and_denied(c, dots, "echo 'touch ~/pwned' >> bashrc")
    assert (dots / "bashrc").read_text() == ""


@pytest.mark.one_loop
def test_a_workspace_that_is_a_git_directory_or_inside_one_asks_for_every_call(make_daemon, tmp_path: Path):
    # the guard keeps WS/.git read-only, but a bare repository, or a `.git` (or a folder in it)
    # opened as the workspace, is git metadata itself: unasked, bash would plant a hook or a
    # core.fsmonitor that runs outside any sandbox at the user's next git command there
    d = make_daemon(SANDBOXED)
    bare, repo = tmp_path / "bare.git", tmp_path / "repo"
    for argv in (["git", "init", "-q", "--bare", str(bare)], ["git", "init", "-q", str(repo)]):
        subprocess.run(argv, check=True)
    attack = "echo 'touch ~/pwned' > hooks/post-update; git config core.fsmonitor 'touch ~/pwned'"
    with d.client() as c:
        for where in (bare, repo / ".git", repo / ".git" / "hooks"):
            asked_and_denied(c, where, attack)
    assert not (bare / "hooks" / "post-update").exists() and b"fsmonitor" not in (bare / "config").read_bytes()



@pytest.mark.one_loop
def test_a_workspace_whose_git_is_a_link_asks_for_every_call(make_daemon, workspace: Path, tmp_path: Path):
    # the guard keeps read-only where `.git` leads, not the link: unasked, bash replaced it with a
    # `.git` of its own whose core.fsmonitor the user's next `git status` there ran
    repo = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (workspace / ".git").symlink_to(repo / ".git")
    d = make_daemon(SANDBOXED)
    with d.client() as c:
        asked_and_denied(c, workspace, "rm .git && git init -q && git config core.fsmonitor 'touch ~/pwned'")
    assert (workspace / ".git").is_symlink()


@pytest.mark.one_loop
def test_a_session_grant_does_not_cover_a_call_in_a_workspace_whose_git_is_a_link(
        make_daemon, workspace: Path, tmp_path: Path):
    """A granted call gets the git guard as an unasked one does, and the guard cannot keep a `.git`
    link: each call there asks, once only, saying why."""
    repo = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    d = make_daemon('[sandbox]\nmode = "bwrap"\n')
    with d.client() as c, d.client(name="owner") as owner:
        sid = c.open_session(workspace)
        first = c.start_call(sid, "bash", {"command": "true"})
        owner.request(p.ApprovalDecide, approval_id=wait_pending(owner)[0].approval_id, decision="approve",
                      scope="session")
        assert c.wait_call(first).ok
        (workspace / ".git").symlink_to(repo / ".git")
        call_id = c.start_call(sid, "bash", {"command": "rm .git && git init -q"})
        pending = wait_pending(owner, timeout=10)[0]
        assert pending.call_id == call_id and "is a symbolic link" in (pending.always_ask or ""), pending
        owner.request(p.ApprovalDecide, approval_id=pending.approval_id, decision="deny")
        assert c.wait_call(call_id).error.kind == "denied"
    assert (workspace / ".git").is_symlink()


def _to_root(link: Path) -> Path:
    """A relative symlink target from `link`'s directory up to `/`."""
    return Path(*[".."] * len(link.parent.parts[1:]))


PEEK = "test -S {socket} && echo SOCKET; touch inside.txt && echo WRITABLE"


@pytest.mark.one_loop
def test_an_unasked_call_cannot_make_the_next_ones_git_guard_bind_the_hosts_root(make_daemon, workspace: Path):
    """bwrap follows a symlink where it binds: `.git -> ../../..` (to `/`), planted by an unasked
    call, had the next unasked call's guard of `.git` bind the host's root over its sandbox,
    scvd's socket, /tmp and $XDG_RUNTIME_DIR (systemd-run --user) included. A `.git` that is a
    link now makes the next call ask; approved, it sees no more than any call."""
    d = make_daemon(SANDBOXED)
    with d.client() as c:
        sid = c.open_session(workspace)
        planted = c.call(sid, "bash", {"command": f"ln -s {_to_root(workspace / '.git')} .git && echo planted"})
        assert planted.ok and "planted" in planted.result["output"], planted
        call_id = c.start_call(sid, "bash", {"command": PEEK.format(socket=d.socket)})
        c.request(p.ApprovalDecide, approval_id=wait_pending(c)[0].approval_id, decision="approve")
        after = c.wait_call(call_id)
    assert after.ok, after
    assert "SOCKET" not in after.result["output"]
    assert "WRITABLE" in after.result["output"]  # the host's read-only root did not cover the workspace


@pytest.mark.one_loop
def test_a_git_dir_swapped_for_a_link_as_the_sandbox_is_set_up_fails_the_call_and_shows_nothing(
        make_daemon, workspace: Path):
    """A concurrent unasked call can swap a guarded `.git` for a link to `/` between scvd's look
    and bwrap's mounts (here the stand-in bwrap does it first); bound by path, bwrap followed it
    and showed the host's root. Bound by fd, bwrap refuses: nothing runs."""
    swapper = Path(__file__).resolve().parents[1] / "helpers" / "swapping-bwrap"
    d = make_daemon(SANDBOXED + f'bwrap = "{swapper}"\n', env={"SWAP_GIT": str(workspace / ".git")})
    with d.client() as c:
        assert c.status().sandbox.startswith("active")
        (workspace / ".git").mkdir()  # after the start-up probe, which would swap it too
        done = c.call(c.open_session(workspace), "bash", {"command": PEEK.format(socket=d.socket)})
    assert (workspace / ".git").is_symlink()  # the swap happened
    assert done.ok, done
    assert "SOCKET" not in done.result["output"] and "WRITABLE" not in done.result["output"]
    assert done.result["exit_code"] != 0 and "bwrap:" in done.result["output"]


def swap_for_link(workspace: Path, target: Path) -> Path:
    """`mv ws ws.old; ln -s target ws`, as a call in a session on the parent may do; where ws went."""
    moved = workspace.with_name(workspace.name + ".old")
    workspace.rename(moved)
    workspace.symlink_to(target)
    return moved


@pytest.mark.one_loop
def test_a_workspace_swapped_for_a_link_while_its_call_starts_is_never_bound_where_the_link_leads(
        make_daemon, workspace: Path, tmp_path: Path):
    """The workspace was checked against the directory the session holds when the call came, then the
    sandbox resolved its path again and bound what that gave: a call in a session on the parent that put
    a link there in between had the link's target bound read-write (a home: .bashrc; `/`: the whole
    root). Here the window is the approval's, where it is the same code path without the timing."""
    target = tmp_path / "target"
    target.mkdir()
    d = make_daemon('[sandbox]\nmode = "bwrap"\n')
    with d.client() as c, d.client(name="owner") as owner:
        call_id = c.start_call(c.open_session(workspace), "bash", {"command": "touch pwned; pwd"})
        pending = wait_pending(owner)[0]
        moved = swap_for_link(workspace, target)
        owner.request(p.ApprovalDecide, approval_id=pending.approval_id, decision="approve")
        done = c.wait_call(call_id)
    assert not (target / "pwned").exists()
    assert not done.ok and done.error.kind == "failed", done
    assert done.error.message.startswith(f"the workspace {workspace} was replaced"), done.error
    assert not (moved / "pwned").exists()  # nothing ran


@pytest.mark.one_loop
def test_an_approved_calls_guard_of_git_hooks_does_not_follow_a_link_out(make_daemon, workspace: Path):
    """An approved sandboxed call keeps `.git/hooks` read-only; a `.git/hooks` that an earlier
    command made a link to `/` had that bind show the host's root, scvd's socket included."""
    (workspace / ".git").mkdir()
    (workspace / ".git/hooks").symlink_to(_to_root(workspace / ".git/hooks"))
    d = make_daemon('[sandbox]\nmode = "bwrap"\n')
    with d.client() as c, d.client(name="owner") as owner:
        call_id = c.start_call(c.open_session(workspace), "bash", {"command": PEEK.format(socket=d.socket)})
        pending = wait_pending(owner)[0]
        owner.request(p.ApprovalDecide, approval_id=pending.approval_id, decision="approve")
        after = c.wait_call(call_id)
    assert after.ok, after
    assert "SOCKET" not in after.result["output"]
    assert "WRITABLE" in after.result["output"]


def test_reloads_that_probe_the_sandbox_leave_no_zombies_behind(make_daemon):
    """Each probe's bwrap left its namespace's init to scvd (the subreaper) as a zombie that only
    the end of some call reaped: an idle daemon reloaded now and then collected them for weeks."""
    d = make_daemon('[sandbox]\nmode = "bwrap"\n')
    for _ in range(5):
        reloaded(d, '[sandbox]\nmode = "bwrap"\n')
    zombies = [q.pid for q in scan_processes().values() if q.ppid == d.proc.pid and not q.alive]
    assert len(zombies) <= 1, f"{len(zombies)} zombie children after 6 probes"  # the last may die after its reap
