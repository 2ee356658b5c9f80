"""The start-up probe: one-line verdicts for each way bwrap can fail, and the Sandbox modes.

Fake bwraps are bash scripts written here and named in sandbox.bwrap, so each
failure is reproduced without changing the machine. Tests marked `bwrap` run
the real one.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from scvd import paths as paths_mod
from scvd.config import SandboxConfig
from scvd.errors import Failed, Unavailable
from scvd.paths import runtime_base, within
from scvd.sandbox import (PROBE_COMMAND, ProbeResult, Sandbox, _existing, bound_path, build_argv, close_all, describe, hidden_paths,
                          open_binds, probe)

REAL_BWRAP = shutil.which("bwrap") or "/usr/bin/bwrap"

# bwrap's own words (upstream bubblewrap.c, Debian's patch, Ubuntu's AppArmor cases)
USERNS_ERRORS = [
    "bwrap: No permissions to creating new namespace, likely because the kernel does not "
    "allow non-privileged user namespaces. On e.g. debian this can be enabled with "
    "'sysctl kernel.unprivileged_userns_clone=1'.",
    "bwrap: No permissions to create new namespace, likely because the kernel does not allow "
    "non-privileged user namespaces. See <https://deb.li/bubblewrap> or "
    "<file:///usr/share/doc/bubblewrap/README.Debian.gz>.",
    "bwrap: setting up uid map: Permission denied",
    "bwrap: Creating new namespace failed: Operation not permitted",
    "bwrap: loopback: Failed RTM_NEWADDR: Operation not permitted",
]
PROC_ERROR = "bwrap: Can't mount proc on /newroot/proc: Operation not permitted"


@pytest.fixture
def instance(tmp_path):
    env = {"SCV_HOME": str(tmp_path / "home"), "PATH": os.environ.get("PATH", os.defpath),
           "XDG_RUNTIME_DIR": str(tmp_path / "xdg")}
    p = paths_mod.resolve(env)
    paths_mod.prepare(p)
    return p, env


def fake_bwrap(dir: Path, body: str, name: str = "bwrap") -> Path:
    """A bash script standing in for bwrap; closed before anyone runs it."""
    path = dir / name
    path.write_text("#!/bin/bash\n" + body + "\n")
    path.chmod(0o755)
    return path


# what a fake bwrap prints to pass the probe: the probe command's line as bwrap's pid namespace gives it
SANDBOXED = 'echo "scvd-probe 2 pid:[4026530000]"\nexit 0'


def failing(dir: Path, message: str) -> Path:
    return fake_bwrap(dir, f"echo {_sh(message)} >&2\nexit 1")


def _sh(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


def one_line(verdict: str) -> str:
    assert "\n" not in verdict and verdict.strip() == verdict and verdict
    return verdict


def test_mode_off_runs_nothing(instance):
    p, env = instance
    r = probe(SandboxConfig(mode="off", bwrap="/no/such/bwrap"), p, env)
    assert (r.ok, r.bwrap) == (False, None)
    assert one_line(describe(r)).startswith("off:")


def test_a_path_without_bwrap_says_to_install_bubblewrap(instance, tmp_path):
    p, env = instance
    (tmp_path / "empty").mkdir()
    r = probe(SandboxConfig(mode="auto"), p, dict(env, PATH=str(tmp_path / "empty")))
    assert not r.ok and r.bwrap is None
    assert "bwrap not found on PATH" in one_line(r.verdict)
    assert "install bubblewrap (apt install bubblewrap)" in r.verdict


def test_a_missing_configured_path_names_it(instance, tmp_path):
    p, env = instance
    r = probe(SandboxConfig(mode="bwrap", bwrap=str(tmp_path / "nope")), p, env)
    assert not r.ok
    assert f"bwrap not found at {tmp_path / 'nope'}" in one_line(r.verdict)
    assert "apt install bubblewrap" in r.verdict


def test_a_configured_path_under_home_is_found_there(instance, tmp_path, monkeypatch):
    p, env = instance
    monkeypatch.setenv("HOME", str(tmp_path))  # config allows ~/...: it means scvd's HOME, not a dir named ~
    (tmp_path / "bin").mkdir()
    fake_bwrap(tmp_path / "bin", SANDBOXED)
    r = probe(SandboxConfig(mode="bwrap", bwrap="~/bin/bwrap"), p, env)
    assert r.bwrap == str(tmp_path / "bin" / "bwrap")


@pytest.mark.parametrize("message", USERNS_ERRORS)
def test_user_namespace_refusals_name_the_sysctls(instance, tmp_path, message):
    p, env = instance
    fake = failing(tmp_path, message)
    r = probe(SandboxConfig(mode="auto", bwrap=str(fake)), p, env)
    assert not r.ok and r.bwrap == str(fake)
    v = one_line(r.verdict)
    assert v.startswith("user namespaces refused (bwrap: ")
    assert message[len("bwrap: "):][:60] in v
    for fix in ("kernel.apparmor_restrict_unprivileged_userns=0", "AppArmor profile for bwrap",
                "kernel.unprivileged_userns_clone=1", "user.max_user_namespaces"):
        assert fix in v


def test_the_probe_runs_its_command_under_the_real_argv(instance, tmp_path):
    p, env = instance
    log = tmp_path / "argv.log"
    fake = fake_bwrap(tmp_path, f'printf "%s\\n" "$@" > {_sh(str(log))}\n{SANDBOXED}')
    r = probe(SandboxConfig(mode="bwrap", bwrap=str(fake)), p, env)
    assert r.ok and r.proc
    seen = log.read_text().splitlines()
    assert seen[-4:] == ["--", *PROBE_COMMAND]
    assert seen[:8] == ["--new-session", "--die-with-parent", "--unshare-user", "--unshare-pid", "--unshare-ipc",
                        "--unshare-uts", "--unshare-cgroup-try", "--unshare-net"]
    ws = seen[seen.index("--chdir") + 1]
    assert "scvd-probe-" in ws and not Path(ws).exists()  # a temp workspace, removed again
    tmpfs = [seen[i + 1] for i, arg in enumerate(seen) if arg == "--tmpfs"]
    assert any(within(str(p.home), hidden) for hidden in tmpfs), tmpfs  # SCV_HOME, or the /tmp it lies in


def test_the_probe_runs_the_argv_of_an_offline_call(instance, tmp_path):
    """The probe left out an offline call's private /tmp, /var/tmp and /run, and the socket scvd
    listens on, masked: where one of those mounts failed, the sandbox was active and every call failed."""
    p, env = instance
    log = tmp_path / "argv.log"
    fake = fake_bwrap(tmp_path, f'printf "%s\\n" "$@" > {_sh(str(log))}\n'
                      'for a in "$@"; do [ "$prev $a" = "--tmpfs /run" ] && '
                      '{ echo "bwrap: Failed to mount tmpfs: Permission denied" >&2; exit 1; }; prev=$a; done')
    socket = tmp_path / "listening.sock"
    socket.touch()
    r = probe(SandboxConfig(mode="bwrap", bwrap=str(fake)), p, env, listening_on=str(socket))
    assert not r.ok and "bwrap: Failed to mount tmpfs: Permission denied" in r.verdict, r.verdict
    seen = log.read_text().splitlines()
    call = Sandbox(ProbeResult("bwrap", True, "", True, str(fake)), p, env, listening_on=str(socket))
    ws = Path(seen[seen.index("--chdir") + 1])
    ws.mkdir()  # the probe's, removed since: its bind is by fd, of a directory there
    wrapped, fds = open_binds(call.wrap(PROBE_COMMAND, workspace=ws, network=False, git=[]))
    close_all(fds)
    assert any_fd([str(fake), *seen]) == any_fd(wrapped)


def any_fd(argv: list[str]) -> list[str]:
    """`argv` with the fd numbers of its --bind-fd and --ro-bind-fd left out (each open takes its own)."""
    return ["FD" if i and argv[i - 1].endswith("-fd") else arg for i, arg in enumerate(argv)]


def test_a_bwrap_without_bind_fd_passes_the_probe_and_binds_by_path(instance, tmp_path):
    """bubblewrap before 0.10 (unless its distribution backported it) has no --bind-fd."""
    p, env = instance
    fake = fake_bwrap(tmp_path, 'for a in "$@"; do [ "$a" = --bind-fd ] && '
                      '{ echo "bwrap: Unknown option --bind-fd" >&2; exit 1; }; done\n' + SANDBOXED)
    r = probe(SandboxConfig(mode="bwrap", bwrap=str(fake)), p, env)
    assert r.ok and not r.fd_binds, r
    ws = tmp_path / "ws"
    ws.mkdir()
    argv, fds = open_binds(Sandbox(r, p, env).wrap(["/bin/true"], workspace=ws, network=False))
    assert fds == [] and ["--bind", str(ws), str(ws)] == argv[argv.index("--bind"):argv.index("--bind") + 3]
    (tmp_path / "new").mkdir()
    assert probe(SandboxConfig(mode="bwrap", bwrap=str(fake_bwrap(tmp_path / "new", SANDBOXED))), p, env).fd_binds


@pytest.fixture
def held(tmp_path):
    """A session's workspace: its real path and the directory fd the session holds."""
    ws = tmp_path / "ws"
    ws.mkdir()
    fd = os.open(ws, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    yield ws, fd
    os.close(fd)


def replaced(ws: Path, by: str, target: Path) -> None:
    """What a command in a session on the parent can do between the call's check and bwrap's start."""
    ws.rename(ws.with_name("ws.old"))
    if by == "link":
        ws.symlink_to(target)
    else:
        ws.mkdir()


@pytest.mark.parametrize("fd_binds", [True, False])
@pytest.mark.parametrize("by", ["link", "directory"])
def test_a_sessions_workspace_replaced_after_its_check_is_refused_not_bound_where_it_leads(
        instance, tmp_path, held, by, fd_binds):
    """wrap() resolved the workspace's path again and bound what that gave: a link put there after the
    call's check had its target (a home, `/`) bound read-write. It binds the session's path, and only
    while that is the directory the session holds; an older bwrap (by path) is checked at its start."""
    p, env = instance
    ws, fd = held
    target = tmp_path / "target"
    target.mkdir()
    sandbox = Sandbox(ProbeResult("bwrap", True, "", True, REAL_BWRAP, fd_binds), p, env)
    replaced(ws, by, target)
    argv = sandbox.wrap(["/bin/true"], workspace=ws, workspace_fd=fd, network=False, git=[])
    assert str(target) not in argv and ["--chdir", str(ws)] == argv[argv.index("--chdir"):argv.index("--chdir") + 2]
    with pytest.raises(Failed, match=f"^the workspace {ws} was replaced while the call started"):
        open_binds(argv)


@pytest.mark.parametrize("fd_binds", [True, False])
def test_a_sessions_workspace_still_in_place_is_bound_by_fd(instance, held, fd_binds):
    p, env = instance
    ws, fd = held
    argv, fds = open_binds(Sandbox(ProbeResult("bwrap", True, "", True, REAL_BWRAP, fd_binds), p, env).wrap(
        ["/bin/true"], workspace=ws, workspace_fd=fd, network=False, git=[]))
    close_all(fds)
    binds = [argv[i:i + 3] for i, op in enumerate(argv) if op in ("--bind", "--bind-fd") and argv[i + 2] == str(ws)]
    assert binds == [["--bind-fd", binds[0][1], str(ws)] if fd_binds else ["--bind", str(ws), str(ws)]]


def test_a_workspace_that_is_the_root_is_bound_only_as_the_directory_the_session_holds(instance, tmp_path):
    """`/` was never bound by fd: a swap that led the workspace's bind there bound the whole root writable."""
    p, env = instance
    sandbox = Sandbox(ProbeResult("bwrap", True, "", True, REAL_BWRAP), p, env)
    root, other = os.open("/", os.O_RDONLY | os.O_DIRECTORY), os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        argv, fds = open_binds(sandbox.wrap(["/bin/true"], workspace=Path("/"), workspace_fd=root, network=False, git=[]))
        close_all(fds)
        assert argv[argv.index("--bind-fd"):argv.index("--bind-fd") + 3:2] == ["--bind-fd", "/"]
        with pytest.raises(Failed, match="^the workspace / was replaced"):
            open_binds(sandbox.wrap(["/bin/true"], workspace=Path("/"), workspace_fd=other, network=False, git=[]))
    finally:
        os.close(root)
        os.close(other)


def test_proc_that_cannot_be_mounted_at_all_is_a_failure(instance, tmp_path):
    p, env = instance
    fake = failing(tmp_path, PROC_ERROR)
    r = probe(SandboxConfig(mode="bwrap", bwrap=str(fake)), p, env)
    assert not r.ok and not r.proc
    v = one_line(r.verdict)
    assert v.startswith("/proc cannot be mounted (" + PROC_ERROR + ")")
    assert "retry with an empty /proc failed" in v


@pytest.mark.bwrap
def test_proc_failure_falls_back_to_an_empty_proc(instance, tmp_path):
    p, env = instance
    # refuses only --proc, like a container that masks /proc; otherwise the real bwrap
    fake = fake_bwrap(tmp_path, f"""
for a in "$@"; do [ "$a" = --proc ] && {{ echo {_sh(PROC_ERROR)} >&2; exit 1; }}; [ "$a" = -- ] && break; done
exec {REAL_BWRAP} "$@" """)
    r = probe(SandboxConfig(mode="auto", bwrap=str(fake)), p, env)
    assert r.ok and not r.proc
    v = one_line(r.verdict)
    assert PROC_ERROR in v and "empty /proc" in v and "systempaths=unconfined" in v
    sb = Sandbox(r, p, env)
    ws = tmp_path / "ws"
    ws.mkdir()
    argv = sb.wrap(["/bin/sh", "-c", "ls -A /proc | wc -l"], workspace=ws, network=False)
    assert ["--tmpfs", "/proc"] == argv[argv.index("/proc") - 1:argv.index("/proc") + 1]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=30, env=env)
    assert (out.returncode, out.stdout.strip()) == (0, "0"), out.stderr


def test_other_failures_quote_bwrap_and_say_what_to_try(instance, tmp_path):
    p, env = instance
    fake = fake_bwrap(tmp_path, "echo 'some noise' >&2\necho 'bwrap: Unknown option --frob' >&2\nexit 1")
    r = probe(SandboxConfig(mode="auto", bwrap=str(fake)), p, env)
    assert not r.ok
    assert "(bwrap: Unknown option --frob)" in one_line(r.verdict)
    assert "run it by hand" in r.verdict


def test_a_program_that_exits_0_without_running_the_probe_is_no_sandbox(instance, tmp_path):
    """A wrong sandbox.bwrap (/bin/true, a wrapper that does nothing) made every sandboxed call
    "succeed" with no output, unasked under sandbox-aware, the sandbox said to be active."""
    p, env = instance
    for body in ("exit 0", "echo hello\nexit 0"):
        fake = fake_bwrap(tmp_path, body)
        r = probe(SandboxConfig(mode="bwrap", bwrap=str(fake)), p, env)
        assert not r.ok
        v = one_line(r.verdict)
        assert v.startswith(f"{fake} exited 0 without running the probe (/bin/sh printing its pid) (it printed ")
        assert "sandbox.bwrap must name bubblewrap itself: fix sandbox.bwrap, or set sandbox.mode = off" in v
        assert "nothing" in v if body == "exit 0" else "hello" in v
        with pytest.raises(Unavailable) as info:
            Sandbox(r, p, env).check()
        assert "exited 0 without running the probe" in info.value.message
    r = probe(SandboxConfig(mode="auto", bwrap="/bin/true"), p, env)
    assert not r.ok and one_line(describe(r)).startswith("unsandboxed (sandbox.mode = auto): /bin/true exited 0")


def test_a_wrapper_that_runs_commands_outside_the_sandbox_is_no_sandbox(instance, tmp_path):
    p, env = instance
    fake = fake_bwrap(tmp_path, 'while [ "$1" != -- ]; do shift; done; shift; exec "$@"')
    r = probe(SandboxConfig(mode="auto", bwrap=str(fake)), p, env)
    assert not r.ok
    v = one_line(r.verdict)
    assert v.startswith(f"{fake} ran the probe (/bin/sh printing its pid) outside a pid namespace of its own (pid ")
    assert v.endswith("sandbox.bwrap must name bubblewrap, not a wrapper that runs commands outside it: "
                      "fix sandbox.bwrap, or set sandbox.mode = off")


@pytest.mark.bwrap
def test_a_wrapper_that_runs_bwrap_itself_passes(instance, tmp_path):
    p, env = instance
    fake = fake_bwrap(tmp_path, f'exec {REAL_BWRAP} "$@"')
    r = probe(SandboxConfig(mode="bwrap", bwrap=str(fake)), p, env)
    assert r.ok and r.proc, r.verdict


def test_a_bwrap_that_cannot_execute_is_reported(instance, tmp_path):
    p, env = instance
    bad = tmp_path / "bwrap"
    bad.write_text("not a program")
    bad.chmod(0o644)
    r = probe(SandboxConfig(mode="auto", bwrap=str(bad)), p, env)
    assert not r.ok
    assert f"cannot execute {bad}: Permission denied" in one_line(r.verdict)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give a file to another owner")
def test_a_setuid_bwrap_is_refused_without_running_it(instance, tmp_path):
    p, env = instance
    ran = tmp_path / "ran"
    fake = fake_bwrap(tmp_path, f"touch {_sh(str(ran))}")
    os.chown(fake, 65534, 65534)
    fake.chmod(0o4755)
    r = probe(SandboxConfig(mode="bwrap", bwrap=str(fake)), p, env)
    assert not r.ok and not ran.exists()
    v = one_line(r.verdict)
    assert f"{fake} is setuid (owner uid 65534)" in v and "does not support" in v
    assert f"chmod u-s {fake}" in v


@pytest.mark.bwrap
def test_the_real_bwrap_passes(instance):
    p, env = instance
    r = probe(SandboxConfig(mode="auto"), p, env)
    assert r.ok and r.proc, r.verdict
    assert r.bwrap == os.path.realpath(REAL_BWRAP) or r.bwrap == REAL_BWRAP
    assert one_line(describe(r)).startswith("active: bwrap works at ")


def test_required_sandbox_that_failed_refuses_calls_but_describes_itself(instance, tmp_path):
    p, env = instance
    fake = failing(tmp_path, USERNS_ERRORS[2])
    r = probe(SandboxConfig(mode="bwrap", bwrap=str(fake)), p, env)
    sb = Sandbox(r, p, env)
    assert not sb.active and sb.required
    d = one_line(sb.describe())
    assert d.startswith("unavailable (sandbox.mode = bwrap") and "uid map" in d
    for attempt in (sb.check, lambda: sb.wrap(["true"], workspace=tmp_path, network=False)):
        with pytest.raises(Unavailable) as info:
            attempt()
        assert "setting up uid map" in info.value.message and info.value.kind == "unavailable"
        assert "sandbox.mode = auto" in info.value.hint


def test_auto_sandbox_that_failed_runs_unsandboxed(instance, tmp_path):
    p, env = instance
    fake = failing(tmp_path, USERNS_ERRORS[0])
    r = probe(SandboxConfig(mode="auto", bwrap=str(fake)), p, env)
    sb = Sandbox(r, p, env)
    assert not sb.active and not sb.required
    sb.check()
    assert sb.wrap(["true"], workspace=tmp_path, network=False) == ["true"]
    assert one_line(sb.describe()).startswith("unsandboxed (sandbox.mode = auto): user namespaces refused")


def test_active_sandbox_wraps_with_real_paths(instance, tmp_path):
    p, env = instance
    fake = fake_bwrap(tmp_path, SANDBOXED)
    r = probe(SandboxConfig(mode="bwrap", bwrap=str(fake)), p, env)
    sb = Sandbox(r, p, env)
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    argv = sb.wrap(["true"], workspace=tmp_path / "link", network=True)
    assert sb.active
    assert argv == build_argv(["true"], bwrap=str(fake), workspace=real, network=True,
                              # the rest of the hidden dirs lie inside SCV_HOME, or do not exist
                              hide=[p.home, *_existing([runtime_base({})])],
                              tmpdir=env.get("TMPDIR"), scratch=Path("/var/tmp"),  # online: /tmp read-only
                              resolve=bound_path)  # no .git there, so no guard of it


def test_the_users_runtime_dir_is_hidden_whatever_xdg_runtime_dir_names(instance):
    """With XDG_RUNTIME_DIR inherited from another user (su), /run/user/<uid> and its systemd
    and D-Bus sockets (systemd-run --user) stayed visible to sandboxed calls that keep /run."""
    p, env = instance
    hidden = hidden_paths(p, {**env, "XDG_RUNTIME_DIR": "/run/user/4242"})
    assert Path("/run/user/4242") in hidden and Path(f"/run/user/{os.getuid()}") in hidden


def test_a_workspace_that_holds_what_the_sandbox_hides_or_masks_reaches_it(tmp_path):
    """Only the hidden folder and the masked socket are mount points (rename: EBUSY); a directory
    above them pinned too, but a link on the way is not: `rm link; mkdir -p link/scv` gave the
    daemon the call's own SCV_HOME at its next start, and a socket of its own took scvd's name."""
    ws, elsewhere = tmp_path / "ws", tmp_path / "elsewhere"
    for d in (ws / "a", ws / "beside", elsewhere / "scv", elsewhere / "run"):
        d.mkdir(parents=True)
    (ws / "link").symlink_to(elsewhere)
    r = ProbeResult("bwrap", True, "", True, REAL_BWRAP)
    for layout in [{"SCV_HOME": str(ws / "a/b/scv")}, {"SCV_HOME": str(ws / "link/scv")},
                   {"SCV_HOME": str(elsewhere / "scv"), "SCV_SOCKET": str(ws / "a/run/scvd.sock")},
                   {"SCV_HOME": str(elsewhere / "scv"), "SCV_SOCKET": str(ws / "link/run/scvd.sock")},
                   {"SCV_HOME": str(elsewhere / "scv"), "XDG_RUNTIME_DIR": str(ws / "link/run")}]:
        env = {"XDG_RUNTIME_DIR": str(elsewhere / "xdg"), **layout}
        sb = Sandbox(r, paths_mod.resolve(env), env)
        assert sb.reaches_hidden(str(ws)) and sb.reaches_hidden(str(elsewhere)), layout
        assert not sb.reaches_hidden(str(ws / "beside")), layout
    env = {"SCV_HOME": str(elsewhere / "scv"), "XDG_RUNTIME_DIR": str(elsewhere / "xdg")}
    assert not Sandbox(r, paths_mod.resolve(env), env).reaches_hidden(str(ws))
