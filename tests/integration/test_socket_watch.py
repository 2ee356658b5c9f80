"""A socket file removed while scvd runs (a logout's cleanup of /run/user, a /tmp cleaner): scvd says so
and binds it again, so clients reach it without a restart; what is not its own socket it leaves alone."""

from __future__ import annotations

import os
import shutil
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import DaemonProc
from harness import make_wrapped  # noqa: F401 (fixture)

QUICK = "[server]\nsocket_check_seconds = 0.1\n"
GONE = "WARNING scvd.server: the socket file {path} is gone, so clients cannot reach this scvd; " \
    "binding a new one there"


def reachable(path: Path) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        try:
            probe.connect(str(path))
        except OSError:
            return False
        return True


def wait_for_log(d: DaemonProc, text: str) -> None:
    while text not in d.log():  # the test's timeout is the bound
        assert d.proc.poll() is None, d.log()
        time.sleep(0.05)


def wait_reachable(d: DaemonProc) -> None:
    while not reachable(d.socket):
        assert d.proc.poll() is None, d.log()
        time.sleep(0.05)


@pytest.mark.parametrize("removed", ["the file", "its directory"])
def test_a_removed_socket_file_is_said_and_bound_again_at_the_same_path(make_daemon, removed):
    d = make_daemon(QUICK)
    before = os.lstat(d.socket).st_ino
    with d.client() as held:
        if removed == "the file":
            d.socket.unlink()
        else:  # as logind empties /run/user/UID at logout (moved first: gone at once, whole)
            d.socket.parent.rename(d.home / "run-gone")
            shutil.rmtree(d.home / "run-gone")
        wait_reachable(d)
        assert stat.S_IMODE(os.lstat(d.socket.parent).st_mode) == 0o700
        with d.client() as again:  # a new client reaches the same scvd
            assert again.status().pid == d.proc.pid
        assert held.status().pid == d.proc.pid  # a connection made before keeps working
    st = os.lstat(d.socket)
    assert stat.S_ISSOCK(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600 and st.st_ino != before
    log = d.log()
    assert log.count(GONE.format(path=d.socket)) == 1, log
    assert f"INFO scvd.server: listening again on {d.socket}" in log
    assert d.stop() == 0
    assert not os.path.lexists(d.socket)  # the stop removes the file it bound last


def test_a_file_put_in_the_sockets_place_is_left_alone_until_it_goes(make_daemon, tmp_path):
    path = tmp_path / "scvd.sock"
    d = make_daemon(QUICK, env={"SCV_SOCKET": str(path)})
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes")
    notes.replace(path)  # at once: a check between a removal and the write would bind there first
    wait_for_log(d, f"WARNING scvd.server: cannot bind {path} again ({path} exists and is a regular file, "
                    "not a socket; scvd leaves it alone: move it away, or set SCV_SOCKET to another path); "
                    "clients cannot reach this scvd until that changes (it checks every 0.1 s, "
                    "server.socket_check_seconds) or it is restarted (systemctl --user restart scvd, or kill "
                    f"{d.proc.pid} and scvd run)")
    assert path.read_text() == "my notes"
    path.unlink()  # moved away: the next check binds there
    wait_reachable(d)
    with d.client() as c:
        assert c.status().pid == d.proc.pid
    assert d.log().count("cannot bind") == 1, d.log()  # said once, though it checked on meanwhile


def test_a_live_socket_put_in_its_place_is_never_taken_over(make_daemon, tmp_path):
    path = tmp_path / "scvd.sock"
    d = make_daemon(QUICK, env={"SCV_SOCKET": str(path)})
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as other:  # another server took the path
        other.bind(str(tmp_path / "other.sock"))
        other.listen(8)
        (tmp_path / "other.sock").replace(path)
        assert reachable(path)
        inode = os.lstat(path).st_ino
        wait_for_log(d, f"WARNING scvd.server: cannot bind {path} again (another server answers on {path}; ")
        assert os.lstat(path).st_ino == inode
    assert d.stop() == 0
    assert os.lstat(path).st_ino == inode  # the stop leaves the other server's file too


def test_a_directory_it_cannot_make_again_is_said_once_and_tried_at_each_check(make_daemon, tmp_path):
    """As /run/user/UID until the next login: scvd cannot make its socket's directory for a while."""
    path = tmp_path / "sockets" / "scvd.sock"
    d = make_daemon(QUICK, env={"SCV_SOCKET": str(path)})
    (tmp_path / "notes.txt").write_text("my notes")
    path.parent.rename(tmp_path / "sockets-gone")
    (tmp_path / "notes.txt").rename(path.parent)  # a file where the directory went: no mkdir there
    wait_for_log(d, f"WARNING scvd.server: cannot bind {path} again (cannot create {path.parent}, the directory "
                    f"of the socket {path}: ")
    time.sleep(0.5)  # a few checks fail meanwhile, saying nothing more
    before = d.log()
    (tmp_path / "sockets").unlink()  # the path is still missing: a check after this one makes the directory
    wait_reachable(d)
    assert stat.S_IMODE(os.lstat(path.parent).st_mode) == 0o700
    log = d.log()
    # said once in the checks that failed alike; the check the unlink falls in may say its changed
    # reason (the file gone between the mkdir's failure and the look at why), which is no repeat
    assert before.count("cannot bind") == 1 and log.count("binding a new one there") == 1, log[len(before):]


# --- socket activation --------------------------------------------------------------------

SYSTEMDS = ("systemd made that socket (scvd.socket), and scvd does not make it again: restart both, "
            "systemctl --user restart scvd.socket scvd")


def test_an_inherited_socket_removed_is_said_once_with_the_restart_that_makes_it_again(make_wrapped, tmp_path):
    """scvd cannot make systemd's socket again, and `systemctl --user restart scvd` hands it the same fd:
    scvd's log said nothing, and scvctl told to wait for scvd to bind it, or to restart scvd alone."""
    home = tmp_path / "home"
    path = home / "run" / "scvd.sock"
    path.parent.mkdir(parents=True, mode=0o700)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.bind(str(path))
        sock.listen(8)
        d = make_wrapped(QUICK, home=home, activate=sock)
        path.unlink()
        gone = f"WARNING scvd.server: the socket file {path} is gone, so clients cannot reach this scvd; {SYSTEMDS}"
        wait_for_log(d, gone)
        out = subprocess.run([sys.executable, "-m", "scvctl", "status"], env=d.env, capture_output=True,
                             text=True, timeout=30)
        assert (out.returncode, out.stderr) == (3, f"scvd (pid {d.proc.pid}) is running but its socket {path} is "
                                                   f"gone (No such file or directory); {SYSTEMDS}\n")
        (tmp_path / "notes.txt").write_text("my notes")
        (tmp_path / "notes.txt").replace(path)
        wait_for_log(d, f"the socket file {path} names another file now")  # checks went on meanwhile
        assert d.log().count(gone) == 1, d.log()
        assert path.read_text() == "my notes"  # not replaced by a socket of scvd's own
        second = subprocess.run([sys.executable, "-m", "scvd", "run"], env=d.env, capture_output=True, text=True,
                                timeout=30)  # the lock file says the socket is inherited, after the pid it names
        assert second.returncode == 3 and f"already running on this instance (pid {d.proc.pid}, lock " in second.stderr
        assert d.stop() == 0
