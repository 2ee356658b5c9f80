"""Reads of files that hold secrets by what or where they are, not by their names, over a real daemon's
socket: procfs (a process's environment, command line, memory) and a file-backed keyring's store."""

from __future__ import annotations

import base64
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ROOT
from scvd import protocol as p
from scvd.proctree import descendants, scan_processes
from scvd.secrets import SecretStore
from test_fs_socket import call

pytestmark = pytest.mark.one_loop

QUIRKS = ROOT / "tests" / "helpers" / "mcp_stdio_quirks.py"
STORED = "tok-stored-for-the-mcp-server-0611"  # in secrets.toml: only the MCP server's environment has it
IN_ENV = "sk-in-scvds-environment-0611"  # a chat provider's key, say: bash is denied it


def server_pid(daemon_pid: int, marker: str, timeout: float = 30.0) -> int:
    """The pid of the process below scvd whose command line holds `marker` (an MCP server's script)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for pid in descendants(scan_processes(), [daemon_pid]):
            try:
                if marker in Path(f"/proc/{pid}/cmdline").read_text(errors="replace"):
                    return pid
            except OSError:
                continue
        time.sleep(0.1)
    raise AssertionError(f"no process below {daemon_pid} runs {marker}")


def asks_as_procfs(owner, sid: str, path: str) -> None:
    """A read of `path` asks, as a secret-like read that always asks, and is denied."""
    done, asked = call(owner, sid, "read", decide="deny", path=path)
    assert asked.risk == "filesystem" and asked.details["secret_like"] is True, (path, asked)
    assert "procfs" in asked.details["why"] and "procfs" in asked.always_ask, (path, asked)
    assert done.error.kind == "denied"


def test_a_read_on_procfs_asks_whatever_it_is_called_and_is_never_granted(make_daemon, tmp_path: Path) -> None:
    """In a session on `/`, `read proc/<pid>/environ` showed a stdio MCP server's stored secret unasked,
    `proc/self/environ` scvd's whole environment (a provider's key, which bash is denied), and a
    session on /proc/<scvd's pid> its `environ`, `cmdline` and `maps`: no rule knew procfs."""
    home = tmp_path / "scvhome"
    home.mkdir(mode=0o700)
    SecretStore(home / "secrets.toml", env={}, use_keyring=False).set("LEAK_TOKEN", STORED)
    config = (f'[mcp.servers.raw]\ncommand = "{sys.executable}"\nargs = ["{QUIRKS}", "results", '
              f'"{tmp_path / "starts"}"]\nsandbox = false\nenv = {{LEAK_TOKEN = {{secret = "LEAK_TOKEN"}}}}\n')
    daemon = make_daemon(config, home=home, env={"PROVIDER_KEY": IN_ENV,
                                                 "PYTHON_KEYRING_BACKEND": "keyring.backends.null.Keyring"},
                         fork=False)  # /proc/<scvd>/environ is the environment it was exec'd with
    with daemon.client(name="pytest-owner", approver=True) as owner:
        pid = owner.request(p.Status).pid
        mcp = server_pid(pid, str(QUIRKS))
        assert STORED.encode() in Path(f"/proc/{mcp}/environ").read_bytes()  # what the read would show
        root = owner.open_session(Path("/"))
        for path in (f"proc/{mcp}/environ", "proc/self/environ", f"proc/{pid}/cmdline", "proc/self/maps",
                     f"proc/{pid}/task/{pid}/environ"):
            asks_as_procfs(owner, root, path)
        own = owner.open_session(Path(f"/proc/{pid}"))
        for path in ("environ", "cmdline", "status"):
            asks_as_procfs(owner, own, path)
        # approved, it reads; a session grant covers no other read of it, as for any secret-like file
        done, asked = call(owner, own, "read", decide="approve", scope="session", path="environ")
        assert done.ok and f"PROVIDER_KEY={IN_ENV}" in done.result["content"]
        asks_as_procfs(owner, own, "environ")
        done, _ = call(owner, owner.open_session(tmp_path), "read", path="starts")  # an ordinary file: unasked
        assert done.ok


@pytest.fixture
def proc_bound(tmp_path: Path) -> Path:
    """A workspace holding `p`, where the daemon's own mount namespace binds /proc."""
    if shutil.which("unshare") is None or subprocess.run(["unshare", "-rm", "true"], capture_output=True).returncode:
        pytest.skip("needs unshare -rm (user and mount namespaces) to bind /proc elsewhere")
    ws = tmp_path / "ws"
    (ws / "p").mkdir(parents=True)
    return ws


def test_procfs_bound_elsewhere_asks_as_proc_does(make_daemon, proc_bound: Path) -> None:
    """A bind mount of procfs is not named `proc`: what asks is the file's filesystem, not its path."""
    bind = 'mount --bind /proc "$1" && shift && exec "$@"'
    daemon = make_daemon(prefix=["unshare", "-rm", "sh", "-c", bind, "sh", str(proc_bound / "p")])
    with daemon.client(name="pytest-owner", approver=True) as owner:
        sid = owner.open_session(proc_bound)
        for path in ("p/self/environ", "p/self/cmdline", "p/1/status"):
            asks_as_procfs(owner, sid, path)


PLAINTEXT = "keyrings.alt.file.PlaintextKeyring"
IN_KEYRING = "ghp-in-a-file-backed-keyring-0611"


def keyring_env(user_home: Path, **extra: str) -> dict[str, str]:
    """A file-backed keyring, as tests/test_secrets.py chooses it: in `user_home`'s XDG data folder."""
    return {"PYTHON_KEYRING_BACKEND": PLAINTEXT, "XDG_DATA_HOME": str(user_home / ".local" / "share"), **extra}


def set_secret(env: dict[str, str], key: str, value: str) -> None:
    done = subprocess.run([sys.executable, "-m", "scvctl", "secrets", "set", key], env=env, input=f"{value}\n",
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def encoded(value: str) -> str:
    """`value` as PlaintextKeyring writes it."""
    return base64.b64encode(value.encode()).decode()


def stored_in(path: Path, value: str) -> bool:
    return path.is_file() and encoded(value) in path.read_text()


def test_a_read_of_a_file_backed_keyrings_store_asks(make_daemon, tmp_path: Path) -> None:
    """PlaintextKeyring keeps every secret `scvctl secrets set` stores in
    $XDG_DATA_HOME/python_keyring/keyring_pass.cfg (base64): neither one of scvd's places nor a
    secret-like name, so a session on the home read them all unasked. So did one on the file that
    KEYRING_PROPERTY_FILE_PATH names."""
    home = tmp_path / "scvhome"
    user = tmp_path / "scvhome-user-home"  # the daemon's HOME (conftest.base_env)
    elsewhere = tmp_path / "vault" / "store.ini"
    elsewhere.parent.mkdir()
    daemon = make_daemon(home=home, env=keyring_env(user, KEYRING_PROPERTY_FILE_PATH=str(elsewhere)))
    env = {k: v for k, v in daemon.env.items() if k != "KEYRING_PROPERTY_FILE_PATH"}
    set_secret(env, "GH_TOKEN", IN_KEYRING)
    set_secret(daemon.env, "OTHER_TOKEN", IN_KEYRING)
    store = user / ".local/share/python_keyring/keyring_pass.cfg"
    assert stored_in(store, IN_KEYRING) and stored_in(elsewhere, IN_KEYRING)  # what a read would show
    (store.parent / "keyring_pass.cfg.bak").write_bytes(store.read_bytes())  # named like no secret
    with daemon.client(name="pytest-owner", approver=True) as owner:
        for where, path in [(user, ".local/share/python_keyring/keyring_pass.cfg"),
                            (user, ".local/share/python_keyring/keyring_pass.cfg.bak"),
                            (store.parent, "keyring_pass.cfg.bak"), (tmp_path, "vault/store.ini")]:
            done, asked = call(owner, owner.open_session(where), "read", decide="deny", path=path)
            assert asked.risk == "filesystem" and asked.details["secret_like"] is True, (path, asked)
            assert "keyring" in asked.details["why"] and asked.always_ask, (path, asked)
            assert done.error.kind == "denied"
        (tmp_path / "vault" / "notes.txt").write_text("plain\n")
        done, _ = call(owner, owner.open_session(tmp_path), "read", path="vault/notes.txt")  # beside it: unasked
        assert done.result["content"] == "plain\n"
