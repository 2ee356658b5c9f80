"""Masked input on a real terminal: `scvctl secrets set` and `scvctl approvals watch` under a pty.

The value is typed into the pty's master side; a terminal that echoed it would
send it back on the master. Neither command may let it show.
"""

from __future__ import annotations

import errno
import os
import select
import signal
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest

from scvd.secrets import SecretStore

from conftest import base_env
from harness import wait_until
from test_script_tools import SHOWS_TOKEN, make_tool

pytestmark = pytest.mark.one_loop

TYPED = "typed-s3cr3t-4242"
NO_KEYRING = {"PYTHON_KEYRING_BACKEND": "keyring.backends.null.Keyring"}


class Terminal:
    """A child process whose stdin, stdout and stderr are a pty; we hold the master side."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        self.master, slave = os.openpty()
        self.proc = subprocess.Popen(argv, env=env, stdin=slave, stdout=slave, stderr=slave,
                                     start_new_session=True)
        os.close(slave)
        self.seen = b""

    def read_until(self, text: bytes, timeout: float = 30.0) -> bytes:
        deadline = time.monotonic() + timeout
        while text not in self.seen:
            left = deadline - time.monotonic()
            assert left > 0, f"no {text!r} on the terminal; it showed {self.seen!r}"
            if not self._read(min(left, 0.5)):
                assert self.proc.poll() is None, f"exited {self.proc.returncode}: {self.seen!r}"
        return self.seen

    def type(self, text: str) -> None:
        os.write(self.master, text.encode())

    def finish(self, timeout: float = 30.0) -> bytes:
        """Everything up to the child's end (EIO on the master once the slave is gone)."""
        deadline = time.monotonic() + timeout
        while self.proc.poll() is None or self._read(0.1):
            assert time.monotonic() < deadline, f"still running: {self.seen!r}"
        return self.seen

    def _read(self, wait: float) -> bool:
        ready, _, _ = select.select([self.master], [], [], wait)
        if not ready:
            return False
        try:
            data = os.read(self.master, 4096)
        except OSError as exc:
            if exc.errno == errno.EIO:
                return False
            raise
        self.seen += data
        return bool(data)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(15)
        os.close(self.master)


def test_scvctl_secrets_set_on_a_terminal_reads_without_echo(tmp_path: Path):
    home = tmp_path / "home"
    term = Terminal([sys.executable, "-m", "scvctl", "secrets", "set", "API_TOKEN"], base_env(home, **NO_KEYRING))
    try:
        term.read_until(b"value for API_TOKEN (input hidden): ")
        term.type(TYPED + "\n")
        shown = term.finish()
    finally:
        term.close()
    assert term.proc.returncode == 0, shown
    assert b"stored API_TOKEN in the file" in shown
    assert TYPED.encode() not in shown
    assert SecretStore(home / "secrets.toml", env={}).get("API_TOKEN") == TYPED


def test_scvctl_approvals_watch_asks_for_a_secret_without_echo(make_daemon, scv_home: Path, workspace: Path):
    make_tool(scv_home, "token", SHOWS_TOKEN, risk="read_only", secrets=["API_TOKEN"])
    d = make_daemon(home=scv_home, env=NO_KEYRING)
    term = Terminal([sys.executable, "-m", "scvctl", "approvals", "watch"], d.env)
    try:
        with d.client(name="agent") as agent:
            sid = agent.open_session(workspace)
            # a request shown on the terminal proves the watcher is connected; deny it
            bash = agent.start_call(sid, "bash", {"command": "true"})
            term.read_until(b"approve? [y]es / [n]o / [s]ession: ")
            term.type("n\n")
            assert agent.wait_call(bash).error.kind == "denied"
            call_id = agent.start_call(sid, "store_secret", {"key": "API_TOKEN", "tool": "script_token"})
            term.read_until(b"value for API_TOKEN (input hidden; empty to decline): ")
            term.type(TYPED + "\n")
            done = agent.wait_call(call_id)
            assert done.ok, done.error
            term.read_until(b'(API_TOKEN) stored by "scvctl"')
    finally:
        term.close()
    assert TYPED.encode() not in term.seen
    assert SecretStore(scv_home / "secrets.toml", env={}).get("API_TOKEN") == TYPED


def test_scvctl_secrets_set_keeps_the_echo_off_after_ctrl_z_and_fg(tmp_path: Path):
    """Ctrl-Z at the masked prompt stops scvctl, and the shell puts its own terminal modes (echo on)
    back; after `fg` getpass read on with the echo on, and the secret showed as it was typed."""
    home = tmp_path / "home"
    term = Terminal([sys.executable, "-m", "scvctl", "secrets", "set", "API_TOKEN"], base_env(home, **NO_KEYRING))
    try:
        term.read_until(b"value for API_TOKEN (input hidden): ")
        os.kill(term.proc.pid, signal.SIGSTOP)  # as Ctrl-Z's SIGTSTP does (an orphaned group ignores that)
        wait_until(lambda: _state(term.proc.pid) == "T", what="scvctl stopped")
        modes = termios.tcgetattr(term.master)  # the shell's own modes, back while the job is stopped
        modes[3] |= termios.ECHO
        termios.tcsetattr(term.master, termios.TCSANOW, modes)
        os.kill(term.proc.pid, signal.SIGCONT)  # fg
        wait_until(lambda: not termios.tcgetattr(term.master)[3] & termios.ECHO, what="the echo off again after fg")
        term.type(TYPED + "\n")
        shown = term.finish()
    finally:
        term.close()
    assert term.proc.returncode == 0, shown
    assert TYPED.encode() not in shown
    assert SecretStore(home / "secrets.toml", env={}).get("API_TOKEN") == TYPED


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


# a key's body as a terminal gets it pasted: carriage returns, lines of 70
KEY_LINES = ["-----BEGIN OPENSSH PRIVATE KEY-----",
             "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW",
             "QyNTUxOQAAACDfakefakefakefakefakefakefakefakefakefakefakeAAAAJgfakeKEY0",
             "-----END OPENSSH PRIVATE KEY-----"]
KEY = "\n".join(KEY_LINES) + "\n"


def controlling(argv: list[str]) -> list[str]:
    """`argv` run with the pty as its controlling terminal (as in a shell), so that /dev/tty opens."""
    take = "import fcntl, os, sys, termios; fcntl.ioctl(0, termios.TIOCSCTTY, 0); os.execv(sys.argv[1], sys.argv[1:])"
    return [sys.executable, "-c", take, *argv]


def paste_key(term: Terminal) -> None:
    """The key as a paste reaches scvctl: its first line alone, then the rest a moment later."""
    term.type(KEY_LINES[0] + "\r")
    time.sleep(0.3)
    term.type("\r".join(KEY_LINES[1:]) + "\r")


def shows_none_of_the_key(shown: bytes) -> bool:
    return not any(line.encode() in shown for line in KEY_LINES[1:3])


@pytest.mark.parametrize("tty", ["controlling", "stdin"])
def test_scvctl_secrets_set_reads_a_pasted_key_whole_without_echo(tmp_path: Path, tty: str):
    """A key pasted at the prompt was stored as its first line, `-----BEGIN OPENSSH PRIVATE KEY-----`,
    and reported stored: the tool it was for failed later on a broken key."""
    home = tmp_path / "home"
    argv = [sys.executable, "-m", "scvctl", "secrets", "set", "SSH_KEY"]
    term = Terminal(controlling(argv) if tty == "controlling" else argv, base_env(home, **NO_KEYRING))
    try:
        term.read_until(b"value for SSH_KEY (input hidden): ")
        paste_key(term)
        shown = term.finish()
    finally:
        term.close()
    assert term.proc.returncode == 0, shown
    assert b"(a key: read whole, hidden, up to its -----END OPENSSH PRIVATE KEY----- line; Ctrl-D gives up)" in shown
    assert b"stored SSH_KEY in the file" in shown
    assert shows_none_of_the_key(shown), shown
    assert SecretStore(home / "secrets.toml", env={}).get("SSH_KEY") == KEY


def test_scvctl_secrets_set_stores_nothing_of_a_key_cut_short(tmp_path: Path):
    """Ctrl-D before the key's END line: nothing is stored, and it says how to give the key whole."""
    home = tmp_path / "home"
    term = Terminal([sys.executable, "-m", "scvctl", "secrets", "set", "SSH_KEY"], base_env(home, **NO_KEYRING))
    try:
        term.read_until(b"value for SSH_KEY (input hidden): ")
        term.type("\r".join(KEY_LINES[:2]) + "\r")
        term.read_until(b"Ctrl-D gives up)")
        term.type("\x04")
        shown = term.finish()
    finally:
        term.close()
    assert term.proc.returncode == 2, shown
    assert (b"usage: the key ended before its -----END OPENSSH PRIVATE KEY----- line; nothing of it was kept: "
            b"paste it whole, or give the file on stdin: scvctl secrets set SSH_KEY < key.pem") in shown
    assert shows_none_of_the_key(shown), shown
    assert not (home / "secrets.toml").exists()


def test_scvctl_approvals_watch_reads_a_pasted_key_whole_without_echo(make_daemon, scv_home: Path, workspace: Path):
    make_tool(scv_home, "token", SHOWS_TOKEN, risk="read_only", secrets=["API_TOKEN"])
    d = make_daemon(home=scv_home, env=NO_KEYRING)
    term = Terminal(controlling([sys.executable, "-m", "scvctl", "approvals", "watch"]), d.env)
    try:
        with d.client(name="agent") as agent:
            sid = agent.open_session(workspace)
            bash = agent.start_call(sid, "bash", {"command": "true"})  # shown: the watcher is connected
            term.read_until(b"approve? [y]es / [n]o / [s]ession: ")
            term.type("n\r")
            assert agent.wait_call(bash).error.kind == "denied"
            call_id = agent.start_call(sid, "store_secret", {"key": "API_TOKEN", "tool": "script_token"})
            term.read_until(b"value for API_TOKEN (input hidden; empty to decline): ")
            paste_key(term)
            done = agent.wait_call(call_id)
            assert done.ok, done.error
            term.read_until(b'(API_TOKEN) stored by "scvctl"')
    finally:
        term.close()
    assert b"(a key: read whole, hidden, up to its -----END OPENSSH PRIVATE KEY----- line" in term.seen
    assert shows_none_of_the_key(term.seen), term.seen
    assert SecretStore(scv_home / "secrets.toml", env={}).get("API_TOKEN") == KEY
