"""The guardian: when scvd dies without cleaning up (SIGKILL, the OOM killer, a crash), a small
shell it started SIGKILLs the process groups of the tools that still run.

Without it, a SIGKILLed scvd that systemd does not run (`scvd run --daemon`, a foreground
scvd) left its calls' commands and unsandboxed stdio MCP servers running for good, secrets
in their environment. (Under systemd the unit's cgroup is killed anyway; in the sandbox
bwrap's --die-with-parent ends the whole pid namespace.)

Rules: the guardian learns each group as its leader starts (`watch`) and forgets it once
the leader is reaped (`forget`), one line each over a pipe whose only writer is scvd
(close-on-exec: no child holds it). The pipe's end of file is scvd's exit, however it
came: the guardian then kills every group it still knows and exits. It ignores the
terminal's and the group's signals (Ctrl-C, a hang-up, a TERM to scvd's group), so it
outlives scvd. It is no thread's child in particular (nothing here is PR_SET_PDEATHSIG,
which fires when the spawning *thread* exits). It runs in scvd's session, where no call's
orphan sweep looks. Processes that left their call's group (setsid) are not in it.
Only the daemon starts it; without it (tests, scvctl) watch() and forget() do nothing.
"""

from __future__ import annotations

import logging
import os
import subprocess
import threading

log = logging.getLogger("scvd.guardian")

NAME = "scvd-guardian"  # its $0, so ps shows what it is
# `+ PGID` watches a group, `- PGID` forgets it; at end of file every group left gets SIGKILL
SCRIPT = r"""
trap '' HUP INT QUIT TERM TSTP TTIN TTOU PIPE
groups=' '
while read -r op pgid; do
  case $pgid in ''|*[!0-9]*|0|1) continue ;; esac
  case $op in
    +) groups="$groups$pgid " ;;
    -) case $groups in *" $pgid "*) groups="${groups%%" $pgid "*} ${groups#*" $pgid "}" ;; esac ;;
  esac
done
for pgid in $groups; do kill -s KILL -- "-$pgid" 2>/dev/null; done
"""

_lock = threading.Lock()  # runs may start on another thread's loop (process.py)
_fd: int | None = None  # the pipe's write end
_proc: subprocess.Popen | None = None


def start() -> bool:
    """Start the guardian, once per process; False (logged) when it cannot be started."""
    global _fd, _proc
    with _lock:
        if _fd is not None:
            return True
        read_fd, write_fd = os.pipe()  # both close-on-exec: only the guardian gets the read end, as stdin
        try:
            _proc = subprocess.Popen(
                ["/bin/sh", "-c", SCRIPT, NAME], stdin=read_fd, stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL, cwd="/", env={"PATH": os.defpath}, close_fds=True,
            )
        except OSError as exc:
            os.close(write_fd)
            log.warning("cannot start the guardian (/bin/sh: %s): should scvd be killed, the processes "
                        "of its calls will keep running", exc.strerror or exc)
            return False
        finally:
            os.close(read_fd)
        os.set_blocking(write_fd, False)  # a guardian that stops reading must never stall the loop
        _fd = write_fd
        return True


def watch(pgid: int) -> None:
    """Kill this process group should scvd die before `forget(pgid)`."""
    _say(f"+ {pgid}\n")


def forget(pgid: int) -> None:
    """Its leader is reaped: the group is no longer scvd's to kill."""
    _say(f"- {pgid}\n")


def _say(line: str) -> None:
    global _fd
    with _lock:
        if _fd is None:
            return
        try:
            os.write(_fd, line.encode())  # a few bytes: atomic, never a partial line
            return
        except OSError as exc:  # EPIPE: it is gone; EAGAIN: it stopped reading (SIGSTOP?)
            why = exc.strerror or str(exc)
        # what it knows is stale now: it must not act on it at scvd's exit
        assert _proc is not None
        _proc.kill()
        _proc.wait()
        os.close(_fd)
        _fd = None
    log.warning("the guardian stopped listening (%s); should scvd be killed, the processes of its calls "
                "will keep running (restart scvd to have them guarded again)", why)
