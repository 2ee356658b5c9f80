"""The systemd user units: `systemd-analyze --user verify` on what we ship and on what install writes.

verify exits 0 on many parse errors (a bad Type= is only "ignoring"), so the
check reads its output: a clean unit prints nothing at all.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from scvctl import service

ROOT = Path(__file__).resolve().parents[1]
PACKAGING = ROOT / "packaging" / "systemd"

pytestmark = pytest.mark.systemd
needs_analyze = pytest.mark.skipif(
    not shutil.which("systemd-analyze"), reason="needs systemd-analyze (bash .ci/setup installs systemd)")


@pytest.fixture
def user_env(tmp_path) -> dict[str, str]:
    """A user with a fresh HOME and a 0700 runtime dir where no user manager runs."""
    home, runtime = tmp_path / "home", tmp_path / "runtime"
    home.mkdir()
    runtime.mkdir(mode=0o700)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("XDG_", "DBUS_", "SCV", "NOTIFY_", "LISTEN_"))}
    env.update(HOME=str(home), XDG_RUNTIME_DIR=str(runtime), XDG_CONFIG_HOME=str(home / ".config"),
               PYTHONPATH=str(ROOT))
    return env


def verify_problems(units: list[Path], env: dict[str, str]) -> list[str]:
    """Every line systemd-analyze prints about the units; [] means clean."""
    done = subprocess.run(["systemd-analyze", "--user", "verify", *map(str, units)],
                          env=env, capture_output=True, text=True, timeout=60)
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    if done.returncode != 0:
        lines.append(f"systemd-analyze exited {done.returncode}")
    return lines


def fake_scvd(env: dict[str, str]) -> None:
    """%h/.local/bin/scvd must be executable for verify to accept the shipped ExecStart."""
    bin_dir = Path(env["HOME"]) / ".local" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "scvd").symlink_to(sys.executable)


def run_service(env: dict[str, str], *args: str, python: str = sys.executable) -> subprocess.CompletedProcess:
    if python != sys.executable:  # an interpreter outside the venv still finds its packages
        env = {**env, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    return subprocess.run([python, "-m", "scvctl.service", *args], env=env,
                          capture_output=True, text=True, timeout=60)


def installed(env: dict[str, str]) -> list[Path]:
    unit_dir = Path(env["XDG_CONFIG_HOME"]) / "systemd" / "user"
    return [unit_dir / "scvd.service", unit_dir / "scvd.socket"]


@pytest.fixture
def stub_systemctl(tmp_path, user_env):
    """A systemctl that records its arguments (exit code per verb from FAIL_VERB) for the success paths."""
    bin_dir = tmp_path / "stub-bin"
    bin_dir.mkdir()
    log = tmp_path / "systemctl.log"
    script = bin_dir / "systemctl"
    script.write_text(
        "#!/bin/bash\n"
        'if [[ -n "$STUB_NO_MANAGER" && "$2" != --root=/ ]]; then echo "Failed to connect to bus: No medium found" >&2; exit 1; fi\n'
        # the user manager's version as systemd prints it (STUB_SYSTEMD), and its unit path: not logged
        'if [[ "$*" == "--user show --property=Version --value" ]]; then echo "${STUB_SYSTEMD:-252}.1-1"; '
        'exit 0; fi\n'
        'if [[ "$*" == "--user show --property=UnitPath --value" ]]; then '
        'echo "${STUB_UNIT_PATH:-$HOME/.config/systemd/user /etc/systemd/user}"; exit 0; fi\n'
        f'echo "$*" >> "{log}"\n'
        'if [[ -n "$FAIL_VERB" && "$2" == "$FAIL_VERB" ]]; then echo "Job failed" >&2; exit 1; fi\n'
        'if [[ -n "$HANG_VERB" && "$2" == "$HANG_VERB" ]]; then exec sleep 60; fi\n'
    )
    script.chmod(0o755)
    user_env["PATH"] = f"{bin_dir}:{user_env['PATH']}"
    return log


def test_packaging_is_generated_from_the_installer():
    for name, text in service.UNITS.items():
        assert (PACKAGING / name).read_text() == text, (
            f"packaging/systemd/{name} is stale: run "
            "python -c 'from scvctl.service import write_packaging; write_packaging()'")


def test_service_unit_has_the_required_options_and_none_of_the_harmful_ones():
    text = (PACKAGING / "scvd.service").read_text()
    settings = {line.split("=", 1)[0]: line.split("=", 1)[1]
                for line in text.splitlines() if "=" in line and not line.startswith("#")}
    assert settings["Type"] == "notify" and settings["NotifyAccess"] == "main"
    assert settings["ExecStart"] == "%h/.local/bin/scvd run"
    assert settings["ExecReload"] == "/bin/kill -HUP $MAINPID"
    assert settings["Restart"] == "on-failure" and settings["UMask"] == "0077"
    assert settings["RestartPreventExitStatus"] == "2"  # a configuration error: no retry fixes it
    assert settings["NoNewPrivileges"] == "yes" and settings["WatchdogSec"] == "30"
    assert "TimeoutStopSec" in settings
    for harmful in ("ProtectHome", "ProtectSystem", "PrivateTmp", "RestrictNamespaces", "ProcSubset"):
        assert harmful not in settings
    sock = (PACKAGING / "scvd.socket").read_text()
    for line in ("ListenStream=%t/scv/scvd.sock", "SocketMode=0600", "DirectoryMode=0700"):
        assert line in sock.splitlines()


@needs_analyze
def test_shipped_units_verify_clean(user_env):
    fake_scvd(user_env)
    assert verify_problems([PACKAGING / "scvd.service", PACKAGING / "scvd.socket"], user_env) == []


@needs_analyze
def test_a_broken_unit_is_caught(user_env, tmp_path):
    fake_scvd(user_env)
    broken = tmp_path / "broken" / "scvd.service"
    broken.parent.mkdir()
    broken.write_text((PACKAGING / "scvd.service").read_text().replace("Type=notify", "Type=bogus"))
    problems = verify_problems([broken], user_env)
    assert any("bogus" in line for line in problems)
    # and the exit code alone would have passed it: that is why the output is read
    assert not any(line.startswith("systemd-analyze exited") for line in problems)


@needs_analyze
def test_a_missing_executable_is_caught(user_env):
    # no %h/.local/bin/scvd: the shipped placeholder must fail until install replaces it
    problems = verify_problems([PACKAGING / "scvd.service"], user_env)
    assert any("is not executable" in line for line in problems)


@needs_analyze
def test_install_without_a_user_manager_says_so_and_writes_units_that_verify(user_env):
    done = run_service(user_env, "install")
    assert done.returncode == 0, done.stderr
    notes = [line for line in done.stdout.splitlines() if "cannot reach a user manager" in line]
    assert len(notes) == 1 and "scvd run --daemon" in notes[0]
    for path in installed(user_env):
        assert f"wrote {path}" in done.stdout
    text = installed(user_env)[0].read_text()
    assert "%h/.local/bin/scvd" not in text
    assert service.exec_start_line(service.scvd_command()) in text.splitlines()
    assert verify_problems(installed(user_env), user_env) == []


needs_systemctl = pytest.mark.skipif(not shutil.which("systemctl"), reason="needs systemctl (bash .ci/setup installs systemd)")


@needs_systemctl
@pytest.mark.parametrize("flags, enabled, other", [
    ((), "default.target.wants/scvd.service", "sockets.target.wants/scvd.socket"),
    (("--socket-activated",), "sockets.target.wants/scvd.socket", "default.target.wants/scvd.service"),
])
def test_install_without_a_user_manager_enables_the_unit_for_the_next_login(user_env, flags, enabled, other):
    """Only written, the unit did not start at the next login (nor with linger): nothing wanted it."""
    unit_dir = installed(user_env)[0].parent
    assert run_service(user_env, "install", *(("--socket-activated",) if not flags else ())).returncode == 0
    done = run_service(user_env, "install", *flags)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (unit_dir / enabled).resolve() == unit_dir / enabled.split("/")[1]
    assert not os.path.lexists(unit_dir / other)  # the other way of starting it is disabled
    assert "are in place and enabled for the next login" in done.stdout
    done = run_service(user_env, "uninstall")
    assert done.returncode == 0, done.stdout + done.stderr
    assert not os.path.lexists(unit_dir / enabled)  # no link left to a removed unit


def test_install_without_a_user_manager_warns_of_an_scvd_running_outside_systemd(user_env, stub_systemctl,
                                                                                 make_daemon, tmp_path):
    """With `scvd run --daemon` running, the units enabled for the next login start a service that
    finds the instance taken and fails (exit 3); install said only that they were in place."""
    d = make_daemon(home=tmp_path / "instance")
    env = {**user_env, "SCV_HOME": str(d.home), "STUB_NO_MANAGER": "1"}
    done = run_service(env, "install")
    assert done.returncode == 0, done.stdout + done.stderr
    assert (f"warning: an scvd started without systemd runs on this instance (pid {d.proc.pid}, on {d.socket}): "
            "the service the next login starts would find it running and fail") in done.stdout
    assert f"kill {d.proc.pid} before then" in done.stdout
    assert d.stop() == 0
    assert "without systemd runs" not in run_service(env, "install").stdout


@needs_analyze
def test_install_quotes_an_odd_path_so_systemd_finds_it(user_env, tmp_path):
    odd = tmp_path / "odd dir %n $HOME" / "bin"
    odd.mkdir(parents=True)
    (odd / "python").symlink_to(sys.executable)
    (odd / "scvd").symlink_to(sys.executable)  # the scvd next to the interpreter wins
    done = run_service(user_env, "install", python=str(odd / "python"))
    assert done.returncode == 0, done.stderr
    text = installed(user_env)[0].read_text()
    line = next(line for line in text.splitlines() if line.startswith("ExecStart="))
    assert line == f'ExecStart="{str(odd).replace("%", "%%")}/scvd" run'
    assert verify_problems(installed(user_env), user_env) == []


def test_install_without_systemctl_says_nothing_here_starts_the_units(user_env, make_daemon, tmp_path):
    """No systemctl at all: install said the units were in place "for the next login" and warned of
    "the service the next login starts", where nothing ever starts them."""
    d = make_daemon(home=tmp_path / "instance")
    env = {**user_env, "SCV_HOME": str(d.home), "PATH": "/nonexistent"}
    for dry in ([], ["--dry-run"]):
        done = run_service(env, "install", *dry)
        assert done.returncode == 0, done.stdout + done.stderr
        are = "would be" if dry else "are"
        assert done.stdout.splitlines()[-1] == (
            f"systemctl is not on PATH, so no systemd runs here: the files above {are} written but unused, as "
            "nothing here starts them; start scvd without systemd: scvd run --daemon (or scvd run in a terminal)")
        assert "next login" not in done.stdout and "run:" not in done.stdout
    done = run_service(env, "uninstall")
    assert done.stdout.splitlines()[-1] == "systemctl is not on PATH, so no systemd runs here: nothing was stopped"


def test_a_dry_run_without_a_user_manager_shows_what_install_does(user_env, stub_systemctl, make_daemon, tmp_path):
    """The dry run printed the steps for a running manager (`disable --now ...`, `restart`), while the
    install runs `--root=/` ones and says no manager answers, and that an scvd runs outside systemd."""
    d = make_daemon(home=tmp_path / "instance")
    env = {**user_env, "SCV_HOME": str(d.home), "STUB_NO_MANAGER": "1"}
    dry = run_service(env, "install", "--dry-run")
    assert dry.returncode == 0 and not stub_systemctl.exists(), dry.stdout + dry.stderr  # it ran none
    real = run_service(env, "install")
    assert real.returncode == 0, real.stdout + real.stderr
    ran = [line[len("ran: "):].removesuffix(" (ok)") for line in real.stdout.splitlines() if line.startswith("ran: ")]
    assert [line[len("would run: "):] for line in dry.stdout.splitlines() if line.startswith("would run: ")] == ran
    assert ran == ["systemctl --user --root=/ disable scvd.socket", "systemctl --user --root=/ enable scvd.service"]
    no_manager = ("systemctl --user cannot reach a user manager (Failed to connect to bus: No medium found); the "
                  "files above {} in place and enabled for the next login, or start scvd without systemd: scvd run "
                  "--daemon (or scvd run in a terminal)")
    assert no_manager.format("would be") in dry.stdout.splitlines()
    assert no_manager.format("are") in real.stdout.splitlines()
    warning = f"warning: an scvd started without systemd runs on this instance (pid {d.proc.pid}, on {d.socket})"
    assert warning in dry.stdout and warning in real.stdout


def test_dry_run_writes_nothing_and_shows_everything(user_env, stub_systemctl):
    done = run_service(user_env, "install", "--socket-activated", "--dry-run")
    assert done.returncode == 0, done.stderr
    assert not any(p.exists() for p in installed(user_env))
    assert "    Type=notify" in done.stdout and "    ListenStream=%t/scv/scvd.sock" in done.stdout
    assert "would run: systemctl --user enable --now scvd.socket" in done.stdout


def test_install_under_umask_000_makes_the_missing_unit_dirs_0700(user_env, stub_systemctl):
    """Under umask 000 install made ~/.config, ~/.config/systemd and its user/ 0777: any local user could
    put a unit there, which the user manager runs as this user."""
    done = subprocess.run([sys.executable, "-m", "scvctl.service", "install"], env=user_env, umask=0,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    config = Path(user_env["XDG_CONFIG_HOME"])
    made = [config, config / "systemd", config / "systemd" / "user"]
    assert {str(d): oct(d.stat().st_mode & 0o777) for d in made} == {str(d): "0o700" for d in made}


def test_install_runs_systemctl_in_order(user_env, stub_systemctl):
    done = run_service(user_env, "install")
    assert done.returncode == 0, done.stdout + done.stderr
    assert stub_systemctl.read_text().splitlines() == [
        "--user daemon-reload",
        "--user disable --now scvd.socket",
        "--user enable scvd.service",
        "--user restart scvd.service",
    ]
    assert "cannot reach" not in done.stdout


@pytest.mark.parametrize("version, kind", [("252", "notify"), ("253", "notify-reload"), ("256", "notify-reload")])
def test_install_lets_a_newer_systemd_wait_for_the_reload(user_env, stub_systemctl, version, kind):
    """With ExecReload=kill -HUP, `systemctl --user reload scvd` returned before scvd had read the
    file; systemd 253's Type=notify-reload sends the SIGHUP itself and waits for READY=1."""
    user_env["STUB_SYSTEMD"] = version
    done = run_service(user_env, "install")
    assert done.returncode == 0, done.stdout + done.stderr
    settings = [line.split("=", 1) for line in installed(user_env)[0].read_text().splitlines()
                if "=" in line and not line.startswith("#")]
    assert ["Type", kind] in settings
    assert any(key == "ExecReload" for key, _ in settings) == (kind == "notify")
    assert ["RestartPreventExitStatus", "2"] in settings  # exit 2 is not restarted every 2 s


def test_socket_activated_install_enables_the_socket(user_env, stub_systemctl):
    done = run_service(user_env, "install", "--socket-activated", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    assert stub_systemctl.read_text().splitlines() == [
        "--user daemon-reload",
        "--user stop scvd.service",
        "--user disable scvd.service",
        "--user enable --now scvd.socket",
    ]
    assert '"manager": true' in done.stdout


def test_a_failing_step_fails_the_install(user_env, stub_systemctl):
    user_env["FAIL_VERB"] = "restart"
    done = run_service(user_env, "install")
    assert done.returncode == 1
    assert "exit 1: Job failed" in done.stdout and "journalctl --user -u scvd" in done.stdout


def test_a_systemctl_step_that_never_returns_fails_the_install_saying_so(user_env, stub_systemctl, monkeypatch):
    """`systemctl --user restart` waits for READY=1 (up to systemd's 90 s start timeout): past
    scvctl's own bound it was a TimeoutExpired traceback."""
    import io

    for name in [name for name in os.environ if name not in user_env]:
        monkeypatch.delenv(name)
    for name, value in {**user_env, "HANG_VERB": "restart"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(service, "SYSTEMCTL_TIMEOUT", 0.5)  # 60 s is the real bound
    report = service.install(socket_activated=False, dry_run=False)
    out = io.StringIO()
    service.print_report(report, False, out)
    assert report.failed and report.manager
    assert "ran: systemctl --user restart scvd.service (no answer within 0.5 s; stopped)" in out.getvalue()
    assert out.getvalue().endswith("a systemctl step failed; see: journalctl --user -u scvd\n")


def test_uninstall_disables_then_removes(user_env, stub_systemctl):
    assert run_service(user_env, "install").returncode == 0
    stub_systemctl.write_text("")
    done = run_service(user_env, "uninstall")
    assert done.returncode == 0, done.stdout + done.stderr
    assert not any(p.exists() for p in installed(user_env))
    assert stub_systemctl.read_text().splitlines() == [
        "--user daemon-reload",
        "--user disable --now scvd.socket",
        "--user disable --now scvd.service",
        "--user daemon-reload",
    ]


@pytest.mark.parametrize("arg, word", [
    ("/usr/bin/scvd", "/usr/bin/scvd"),
    ("/opt/my tools/scvd", '"/opt/my tools/scvd"'),
    ("50%", '"50%%"'),
    ("$HOME", '"$$HOME"'),
    ('say "hi"', '"say \\"hi\\""'),
    ("", '""'),
])
def test_exec_quoting(arg, word):
    assert service.quote_exec_arg(arg) == word


def test_the_executable_keeps_its_dollar_signs():
    assert service.quote_exec_arg("/opt/$x/scvd", executable=True) == "/opt/$x/scvd"
    assert service.exec_start_line(["/opt/a b/scvd", "run", "$X"]) == 'ExecStart="/opt/a b/scvd" run "$$X"'


def test_scvctl_mounts_the_service_commands(user_env, stub_systemctl):
    done = subprocess.run([sys.executable, "-m", "scvctl", "--json", "service", "install", "--dry-run"],
                          env=user_env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["dry_run"] is True and report["manager"] is True
    assert report["planned"][-1] == "systemctl --user restart scvd.service"
    assert not any(p.exists() for p in installed(user_env))


def unit_lines(path: Path, key: str) -> list[str]:
    return [line for line in path.read_text().splitlines() if line.startswith(key + "=")]


@needs_analyze
def test_install_carries_scv_home_of_this_shell_into_the_units(user_env, tmp_path):
    # a relative SCV_HOME means this shell's cwd; under systemd the cwd is ~, so the unit gets it absolute
    shell_cwd = tmp_path / "shell"
    shell_cwd.mkdir()
    user_env["SCV_HOME"] = "inst"
    done = subprocess.run([sys.executable, "-m", "scvctl.service", "install", "--socket-activated"],
                          env=user_env, cwd=shell_cwd, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    home = shell_cwd / "inst"
    service_unit, socket_unit = installed(user_env)
    assert unit_lines(service_unit, "Environment") == [f'Environment="SCV_HOME={home}"']
    assert unit_lines(socket_unit, "ListenStream") == [f"ListenStream={home}/run/scvd.sock"]
    assert "the units carry SCV_HOME of this shell" in done.stdout and f"SCV_HOME={home}" in done.stdout
    assert verify_problems(installed(user_env), user_env) == []


@needs_analyze
def test_install_escapes_an_odd_scv_home_and_scv_socket(user_env, tmp_path):
    odd = tmp_path / 'my "scv" 50% $HOME \\x'
    user_env.update(SCV_HOME=str(odd), SCV_SOCKET=str(tmp_path / "s %n.sock"))
    done = run_service(user_env, "install", "--socket-activated")
    assert done.returncode == 0, done.stderr
    service_unit, socket_unit = installed(user_env)
    quoted = str(odd).replace("%", "%%").replace("\\", "\\\\").replace('"', '\\"')
    assert unit_lines(service_unit, "Environment") == [
        f'Environment="SCV_HOME={quoted}"', f'Environment="SCV_SOCKET={tmp_path}/s %%n.sock"']
    assert unit_lines(socket_unit, "ListenStream") == [f"ListenStream={tmp_path}/s %%n.sock"]
    assert verify_problems(installed(user_env), user_env) == []


def test_install_refuses_an_scv_home_no_unit_can_hold(user_env):
    user_env["SCV_HOME"] = "/tmp/line\nbreak"
    done = subprocess.run([sys.executable, "-m", "scvctl", "service", "install", "--dry-run"],
                          env=user_env, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and "cannot be written into a systemd unit" in done.stderr
    assert "install from a shell without SCV_HOME" in done.stderr


@pytest.mark.parametrize("dry_run", [False, True])
def test_install_refuses_a_socket_path_too_long_to_bind_before_writing_anything(user_env, stub_systemctl,
                                                                                   tmp_path, dry_run):
    """An SCV_HOME with a 100-character name: `scvd run` refuses its socket path (exit 3), but install
    wrote and enabled units whose every start failed so."""
    home = tmp_path / ("x" * 100)
    user_env["SCV_HOME"] = str(home)
    done = subprocess.run([sys.executable, "-m", "scvctl", "service", "install", *(["--dry-run"] if dry_run else [])],
                          env=user_env, capture_output=True, text=True, timeout=60)
    daemon = subprocess.run([sys.executable, "-m", "scvd", "check-config"], env=user_env, capture_output=True,
                            text=True, timeout=60)
    refused = daemon.stderr.removeprefix("scvd: cannot start: ").rstrip("\n")
    assert daemon.returncode == 3 and refused.startswith(f"the socket path {home}/run/scvd.sock is "), daemon.stderr
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == f"config: {refused}; scvd would refuse to start on it (cannot start, exit 3), so nothing " \
                          "was written\n"
    assert not (Path(user_env["XDG_CONFIG_HOME"]) / "systemd").exists()
    assert not stub_systemctl.exists()  # no systemctl step ran


def test_install_refuses_a_too_long_socket_flag_naming_the_flag(user_env, stub_systemctl, tmp_path):
    sock = tmp_path / ("x" * 100) / "s.sock"
    done = subprocess.run([sys.executable, "-m", "scvctl", "--socket", str(sock), "service", "install", "--dry-run"],
                          env=user_env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and done.stderr.startswith(f"config: the socket path {sock} is "), done.stderr
    assert "; give --socket a shorter path; scvd would refuse to start on it" in done.stderr
    assert "SCV_SOCKET" not in done.stderr and not stub_systemctl.exists()


def test_install_takes_the_socket_flag_as_scv_socket(user_env, tmp_path):
    sock = tmp_path / "elsewhere.sock"
    done = subprocess.run([sys.executable, "-m", "scvctl", "--socket", str(sock), "service", "install",
                           "--socket-activated", "--dry-run"], env=user_env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert f'    Environment="SCV_SOCKET={sock}"' in done.stdout
    assert f"    ListenStream={sock}" in done.stdout


def test_install_without_scv_home_keeps_the_default_instance(user_env):
    done = run_service(user_env, "install", "--socket-activated", "--dry-run")
    assert "Environment=" not in done.stdout and "carry" not in done.stdout
    assert "    ListenStream=%t/scv/scvd.sock" in done.stdout


def test_uninstall_says_why_it_cannot_remove_a_unit_instead_of_a_traceback(user_env, tmp_path):
    # what stands in a unit's place cannot be unlinked (as a root-owned one a sudo install left cannot)
    user_env["XDG_CONFIG_HOME"] = str(tmp_path / "config")
    unit = tmp_path / "config" / "systemd" / "user" / "scvd.service"
    (unit / "keep").mkdir(parents=True)
    done = subprocess.run([sys.executable, "-m", "scvctl", "service", "uninstall"],
                          env=user_env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert f"config: cannot remove {unit} (Is a directory): remove it yourself (as its owner)" in done.stderr


def test_install_refuses_a_unit_dir_the_user_manager_does_not_read(user_env, stub_systemctl, tmp_path):
    """XDG_CONFIG_HOME set in a shell profile moved the units where the user manager (which does not
    read that profile) never looks: `enable` failed with a bare `see: journalctl`, or enabled and
    restarted an older unit left in ~/.config/systemd/user."""
    user_env["XDG_CONFIG_HOME"] = str(tmp_path / "dotfiles")
    done = subprocess.run([sys.executable, "-m", "scvctl", "service", "install"],
                          env=user_env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    home = user_env["HOME"]
    assert done.stderr == (
        f"config: XDG_CONFIG_HOME={tmp_path}/dotfiles of this shell puts the units in {tmp_path}/dotfiles/systemd/user, "
        f"which the systemd user manager does not read (its environment is not this shell's: it reads "
        f"{home}/.config/systemd/user); nothing was written; install from a shell without it: "
        "env -u XDG_CONFIG_HOME scvctl service install\n")
    assert not (tmp_path / "dotfiles").exists() and not stub_systemctl.exists()


def test_install_into_a_moved_unit_dir_the_user_manager_reads(user_env, stub_systemctl, tmp_path):
    user_env.update(XDG_CONFIG_HOME=str(tmp_path / "dotfiles"),
                    STUB_UNIT_PATH=f"{tmp_path}/dotfiles/systemd/user /etc/systemd/user")
    done = run_service(user_env, "install")
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "dotfiles" / "systemd" / "user" / "scvd.service").exists()
    assert "warning" not in done.stdout


def test_install_into_a_moved_unit_dir_without_a_user_manager_warns(user_env, stub_systemctl, tmp_path):
    user_env.update(XDG_CONFIG_HOME=str(tmp_path / "dotfiles"), STUB_NO_MANAGER="1")
    done = run_service(user_env, "install")
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "dotfiles" / "systemd" / "user" / "scvd.service").exists()
    assert done.stdout.splitlines()[-1] == (
        f"warning: XDG_CONFIG_HOME={tmp_path}/dotfiles of this shell puts the units in "
        f"{tmp_path}/dotfiles/systemd/user; a user manager reads them there only if its own environment sets "
        f"the same (a shell profile does not reach it), else it reads {user_env['HOME']}/.config/systemd/user: "
        "if so, install from a shell without it: env -u XDG_CONFIG_HOME scvctl service install")


def test_install_says_why_it_cannot_write_the_units_instead_of_a_traceback(user_env, tmp_path):
    # ~/.config left to root by a sudo, a full disk, a file where the unit dir should be
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    user_env["XDG_CONFIG_HOME"] = str(blocker)
    done = subprocess.run([sys.executable, "-m", "scvctl", "service", "install"],
                          env=user_env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.startswith(f"config: cannot write the units into {blocker}/systemd/user (Not a directory): ")


def test_the_python_m_fallback_does_not_import_from_the_directory_the_unit_starts_in(tmp_path):
    """With no scvd script installed the unit ran `python -m scvd`, which puts its start directory
    (the home, for a user unit) first on the import path: a module planted there ran inside scvd."""
    argv = service.scvd_command(executable=str(tmp_path / "bin" / "python3"), which=lambda _: None)
    assert argv[1:] == ["-P", "-m", "scvd", "run"]
    home = tmp_path / "home"
    home.mkdir()
    marker = tmp_path / "planted-ran"
    (home / "msgspec.py").write_text(f"open({str(marker)!r}, 'w').close()\nraise SystemExit(9)\n")
    env = {**os.environ, "SCV_HOME": str(tmp_path / "scv")}
    env.pop("PYTHONPATH", None)  # what the unit has: the installed package only
    if os.environ.get("PYTHONPATH"):  # a checkout run: keep it importable, after the start directory's place
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    done = subprocess.run([sys.executable, *argv[1:-1], "check-config"], cwd=home, env=env,
                          capture_output=True, text=True, timeout=60)
    assert not marker.exists(), "a module in the start directory was imported"
    assert done.returncode == 0, done.stderr
