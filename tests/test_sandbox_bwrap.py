"""The real bubblewrap: what a sandboxed command can and cannot reach.

Each test runs Sandbox.wrap()'s argv with subprocess, on a throwaway SCV_HOME.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from scvd import paths as paths_mod
from scvd.config import SandboxConfig
from scvd.process import run_process
from scvd.sandbox import Sandbox, probe

from scan_support import HeldScans

pytestmark = pytest.mark.bwrap


class Box:
    """A probed sandbox on a temporary instance, with a workspace that has a .git."""

    def __init__(self, tmp_path: Path, **env: str) -> None:
        self.env = {
            "SCV_HOME": str(tmp_path / "home"), "XDG_RUNTIME_DIR": str(tmp_path / "xdg"),
            "PATH": os.environ.get("PATH", os.defpath), "LC_ALL": "C", **env,
        }
        self.paths = paths_mod.resolve(self.env)
        paths_mod.prepare(self.paths)
        (tmp_path / "xdg" / "systemd").mkdir(parents=True)
        self.ws = tmp_path / "ws"
        (self.ws / ".git" / "hooks").mkdir(parents=True)
        (self.ws / ".git" / "config").write_text("[core]\n")
        config = SandboxConfig(mode="bwrap")
        result = probe(config, self.paths, self.env)
        assert result.ok, result.verdict
        self.sandbox = Sandbox(result, self.paths, self.env)

    def argv(self, script: str, *, network: bool = False, rw_binds=(), approved: bool = False) -> list[str]:
        return self.sandbox.wrap(["/bin/bash", "-c", script], workspace=self.ws,
                                 network=network, rw_binds=rw_binds, approved=approved)

    def run(self, script: str, **kw) -> subprocess.CompletedProcess:
        return subprocess.run(self.argv(script, **kw), cwd=self.ws, env=self.env, text=True,
                              stdin=subprocess.DEVNULL, capture_output=True, timeout=30)


@pytest.fixture
def box(tmp_path):
    return Box(tmp_path)


def test_the_workspace_is_writable_and_the_rest_is_not(box, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    r = box.run(f"echo in > inside.txt && echo out > {outside}/escaped.txt")
    assert r.returncode != 0  # outside is under the private /tmp: not even there
    assert (box.ws / "inside.txt").read_text() == "in\n"
    assert not (outside / "escaped.txt").exists()
    r = box.run("touch /etc/scvd-probe-file")
    assert r.returncode != 0 and "Read-only file system" in r.stderr
    assert not Path("/etc/scvd-probe-file").exists()


def test_an_approved_call_keeps_git_hooks_and_config_read_only(box):
    r = box.run("echo evil > .git/hooks/post-checkout; echo x >> .git/config; echo ok > .git/HEAD",
                approved=True)
    assert r.stderr.count("Read-only file system") == 2, r.stderr
    assert not (box.ws / ".git/hooks/post-checkout").exists()
    assert (box.ws / ".git/config").read_text() == "[core]\n"
    assert (box.ws / ".git/HEAD").read_text() == "ok\n"  # the rest of .git stays usable


def test_an_unasked_call_cannot_write_anywhere_in_git(box):
    r = box.run("echo evil > .git/hooks/post-checkout; echo x >> .git/config; echo ok > .git/HEAD")
    assert r.stderr.count("Read-only file system") == 3, r.stderr
    assert not (box.ws / ".git/HEAD").exists()


def test_the_network_is_unreachable_unless_allowed(box):
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(4)
        port = server.getsockname()[1]
        probe_script = (
            f"python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", {port}), 5); print(\"reached\")'"
        )
        cut = box.run(probe_script + "; cut -d: -f1 /proc/net/dev | tail -n +3 | tr -d ' '")
        assert "reached" not in cut.stdout
        assert "ConnectionRefusedError" in cut.stderr
        assert cut.stdout.split() == ["lo"]  # a fresh network namespace: only loopback
        kept = box.run(probe_script, network=True)
        assert kept.stdout.strip() == "reached", kept.stderr


def test_scvd_socket_state_and_runtime_dirs_are_hidden(box):
    sock = box.paths.socket
    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind(str(sock))
        listener.listen(1)
        marker = box.paths.state_dir / "audit.log"
        marker.write_text("secret\n")
        private = Path(box.env["XDG_RUNTIME_DIR"]) / "systemd" / "private"
        private.write_text("")
        r = box.run(
            f"for f in {sock} {marker} {private} {box.paths.config_file}; do "
            f"test -e $f && echo visible $f; done; ls -A {box.paths.runtime_dir} | wc -l; "
            f"python3 -c 'import socket; socket.socket(socket.AF_UNIX).connect(\"{sock}\")'"
        )
    assert "visible" not in r.stdout
    assert r.stdout.split()[0] == "0"
    assert "FileNotFoundError" in r.stderr


def test_a_socket_moved_by_scv_socket_is_masked_but_its_directory_stays(tmp_path):
    shared = tmp_path / "ws" / "shared"  # inside the workspace: /tmp as a whole is private
    shared.mkdir(parents=True)
    (shared / "neighbour.txt").write_text("still here\n")
    box = Box(tmp_path, SCV_SOCKET=str(shared / "scvd.sock"))
    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind(str(shared / "scvd.sock"))
        listener.listen(1)
        r = box.run(
            f"cat {shared}/neighbour.txt; test -S {shared}/scvd.sock && echo still-a-socket; "
            f"python3 -c 'import socket; socket.socket(socket.AF_UNIX).connect(\"{shared}/scvd.sock\")'"
        )
    assert r.stdout == "still here\n"
    assert "ConnectionRefusedError" in r.stderr


def test_scvds_own_dirs_below_the_workspace_cannot_be_moved_away_and_replaced(tmp_path):
    """A directory above a hidden one could be renamed: `mv sub x; mkdir -p sub/scv` left
    the host an SCV_HOME of the call's making (config.toml, the next start's MCP servers)."""
    home = tmp_path / "ws" / "sub" / "scv"
    box = Box(tmp_path, SCV_HOME=str(home))
    box.paths.config_file.write_text("# mine\n")
    r = box.run("mv sub moved; echo mv=$?; mkdir -p sub/scv && echo planted > sub/scv/config.toml")
    assert "mv=0" not in r.stdout and "Device or resource busy" in r.stderr, (r.stdout, r.stderr)
    assert box.paths.config_file.read_text() == "# mine\n" and not (box.ws / "moved").exists()


def _listen(path: Path) -> socket.socket:
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(path))
    s.listen(1)
    return s


CONNECT = "python3 -c 'import socket,sys; socket.socket(socket.AF_UNIX).connect(sys.argv[1]); print(\"REACHED\")' {}"


def test_unix_sockets_in_tmp_do_not_lead_out_of_an_offline_sandbox(box, tmp_path):
    """A tmux, X11 or ssh-agent socket in /tmp would run commands outside: /tmp is private."""
    tmux_dir = tmp_path / "tmux-0"  # beside the workspace, as /tmp/tmux-UID would be
    tmux_dir.mkdir()
    marker = f"scvd-private-{uuid.uuid4().hex[:8]}"
    with _listen(tmux_dir / "default"):
        r = box.run(CONNECT.format(tmux_dir / "default") + f"; touch /tmp/{marker} && echo tmp-writable")
        with socket.socket(socket.AF_UNIX) as c:
            c.connect(str(tmux_dir / "default"))  # the socket works from outside
    assert "REACHED" not in r.stdout and "FileNotFoundError" in r.stderr
    assert "tmp-writable" in r.stdout  # a private, writable /tmp
    assert not Path("/tmp", marker).exists()


def test_a_tmpdir_below_a_hidden_directory_is_there_empty(tmp_path):
    """libpam-tmpdir's TMPDIR=/tmp/user/UID, or one under XDG_RUNTIME_DIR: the sandbox hides those
    directories, so without this mktemp, compilers and builds fail inside only."""
    tmpdir = tmp_path / "xdg" / "tmp"  # under the hidden runtime dir (and the private /tmp)
    tmpdir.mkdir(parents=True)
    (tmpdir / "host-file").write_text("not for the sandbox\n")
    box = Box(tmp_path, TMPDIR=str(tmpdir))
    r = box.run('f=$(mktemp) && echo "made $f"; ls -A "$TMPDIR"')
    assert r.returncode == 0, r.stderr
    made = r.stdout.splitlines()[0]
    assert made.startswith(f"made {tmpdir}/tmp.") and "host-file" not in r.stdout


@pytest.mark.parametrize("network", [False, True])
def test_a_read_only_temp_directory_is_replaced_by_a_private_one(tmp_path, network):
    """An online call keeps the host's /tmp (read-only), and a TMPDIR like ~/tmp is read-only even
    offline: mktemp, Node and compilers failed with "Read-only file system". /var/tmp is then a
    private tmpfs, and the TMPDIR; what is made there never reaches the host."""
    marker = f"scvd-scratch-{uuid.uuid4().hex[:8]}"
    tmpdir = Path.home() / marker  # ~/tmp: outside /tmp, the workspace and all else made writable
    tmpdir.mkdir()
    try:
        box = Box(tmp_path, **({} if network else {"TMPDIR": str(tmpdir)}))  # online: unset, so /tmp
        r = box.run(f'f=$(mktemp) && echo "made $f" && touch "$TMPDIR/{marker}" && echo "TMPDIR=$TMPDIR"',
                    network=network)
        assert r.returncode == 0, r.stderr
        assert r.stdout.startswith("made /var/tmp/tmp.") and "TMPDIR=/var/tmp\n" in r.stdout, r.stdout
        assert not Path("/var/tmp", marker).exists() and not list(tmpdir.iterdir())
    finally:
        tmpdir.rmdir()


def test_run_is_private_for_offline_calls_only(box):
    """/run holds docker's and the system bus's sockets; online calls keep it (DNS) and are asked."""
    run_dir = Path("/run") / f"scvd-test-{uuid.uuid4().hex[:8]}"
    run_dir.mkdir()
    try:
        with _listen(run_dir / "docker.sock"):
            offline = box.run(CONNECT.format(run_dir / "docker.sock"))
            online = box.run(CONNECT.format(run_dir / "docker.sock"), network=True)
    finally:
        (run_dir / "docker.sock").unlink(missing_ok=True)
        run_dir.rmdir()
    assert "REACHED" not in offline.stdout and "FileNotFoundError" in offline.stderr
    assert "REACHED" in online.stdout, online.stderr


def test_an_agent_home_inside_the_hidden_home_stays_writable(box):
    home = box.paths.adapters_dir / "codex"
    home.mkdir(parents=True)
    (box.paths.adapters_dir / "claude").mkdir()
    (box.paths.adapters_dir / "claude" / "creds").write_text("x")
    r = box.run(f"echo tok > {home}/auth.json && ls -A {box.paths.adapters_dir}", rw_binds=[home])
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["codex"]  # the other agent's home is not there
    assert (home / "auth.json").read_text() == "tok\n"


def test_no_capabilities_and_a_private_pid_namespace(box):
    r = box.run("grep CapEff /proc/self/status; cat /proc/1/comm; ls /proc | grep -c '^[0-9]'")
    lines = r.stdout.split("\n")
    assert lines[0].split() == ["CapEff:", "0000000000000000"]
    assert lines[1] == "bwrap"
    assert int(lines[2]) < 10  # only the sandbox's own processes


def _find(marker: str) -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmd = Path(f"/proc/{entry}/cmdline").read_bytes()
            except OSError:
                continue
            if marker.encode() in cmd:
                pids.append(int(entry))
    return pids


def _wait_for(predicate, seconds: float = 10.0):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    return predicate()


def test_a_background_process_dies_when_the_call_ends(box):
    marker = f"scvd-bg-{uuid.uuid4().hex}"
    script = f"(exec -a {marker} sleep 1000) & while [ ! -e go ]; do sleep 0.05; done"
    proc = subprocess.Popen(box.argv(script), cwd=box.ws, env=box.env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        pids = _wait_for(lambda: _find(marker))
        assert pids, "the background sleep never started"
        (box.ws / "go").touch()  # the call's own command exits now
        assert proc.wait(timeout=10) == 0
        assert _wait_for(lambda: not _find(marker)), f"{pids} outlived the call"
    finally:
        proc.kill()
        proc.wait()


# through the daemon's own process runner, as the bash tool runs it

def _run(box: Box, script: str, timeout: float | None = 30):
    from scvd.process import run_process

    return run_process(box.argv(script), cwd=box.ws, env=box.env, timeout=timeout, output_limit=1 << 16)


def test_runner_a_background_sleep_does_not_outlive_a_sandboxed_call(box):
    marker = f"scvd-bg-{uuid.uuid4().hex}"
    result = asyncio.run(_run(box, f"(exec -a {marker} sleep 1000) & echo started"))
    assert (result.exit_code, result.output, result.timed_out) == (0, "started\n", False)
    assert _wait_for(lambda: not _find(marker)), "the background sleep outlived the call"


def test_runner_deadline_kills_the_whole_sandbox(box):
    marker = f"scvd-dl-{uuid.uuid4().hex}"
    result = asyncio.run(_run(box, f"(exec -a {marker} sleep 1000) & touch started; wait", timeout=1))
    assert (box.ws / "started").exists()
    assert result.timed_out and result.signal == "SIGKILL"
    assert _wait_for(lambda: not _find(marker)), "the sandboxed sleep outlived the deadline"


def test_runner_cancel_ends_the_sandbox(box):
    marker = f"scvd-cx-{uuid.uuid4().hex}"

    async def cancel_after_start() -> None:
        task = asyncio.create_task(_run(box, f"(exec -a {marker} sleep 1000) & wait"))
        for _ in range(200):
            if _find(marker):
                break
            await asyncio.sleep(0.05)
        assert _find(marker), "the sandboxed sleep never started"
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancel_after_start())
    assert _wait_for(lambda: not _find(marker)), "the sandboxed sleep outlived the cancellation"


def test_runner_cancel_terms_what_runs_in_the_sandbox_before_a_slow_scan_comes(box, monkeypatch):
    """The command in the sandbox leads a session of its own (bwrap --new-session), and bwrap itself
    gets no TERM: the command, which a scan before the cancel found, hears it at once, not once the
    next scan of /proc (seconds among many processes) has come."""
    ready, got = box.ws / "ready", box.ws / "got-term"
    scans = HeldScans(monkeypatch, after=ready.exists, until=got.exists)

    async def scenario() -> None:
        script = "trap 'echo cleaned > got-term; exit' TERM; touch ready; while :; do sleep 0.05; done"
        task = asyncio.ensure_future(run_process(box.argv(script), cwd=box.ws, env=box.env, timeout=None,
                                                 output_limit=1 << 16, wrapper=True))
        await asyncio.to_thread(scans.wait_holding)  # a scan after `ready` saw the command: it is known
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, 60)

    asyncio.run(scenario())
    assert scans.released and all(scans.released)  # the TERM came while the scan was held
    assert got.read_text() == "cleaned\n"  # by its trap: bwrap did not take the sandbox down first
