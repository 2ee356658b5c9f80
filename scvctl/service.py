"""`scvctl service install|uninstall`: scvd as a systemd user service, optionally socket-activated.

The unit texts below are the single source of packaging/systemd/ (a test keeps
the two equal; `write_packaging()` regenerates them). The installer writes them
into the user unit directory with ExecStart pointing at the scvd of this very
Python environment, then drives `systemctl --user`. Where no user manager can
be reached (a container, CI, an ssh session without lingering) it enables the
units on file alone (`--root=/`), so the next manager starts them, says so in
one line and prints what it wrote; with no systemctl at all it says nothing
here starts them, and how to run scvd without systemd. `--dry-run` asks the
manager too, so it shows the steps the real run takes. SCV_HOME and SCV_SOCKET of the installing
shell go into the units (Environment=, and the socket unit's ListenStream=),
so the service serves the instance that shell's scvctl talks to.

Exit codes: 0 done (or written while no user manager was reachable), 1 a
systemctl step failed, SCV_HOME / SCV_SOCKET cannot be written into a unit (or
give a socket path too long to bind), the unit files cannot be written, or the
running user manager does not read their directory.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping

from scvd import errors, paths as paths_mod

EXEC_PLACEHOLDER = "ExecStart=%h/.local/bin/scvd run"
SERVICE = "scvd.service"
SOCKET = "scvd.socket"
SYSTEMCTL_TIMEOUT = 60
DEFAULT_LISTEN = "ListenStream=%t/scv/scvd.sock"
INSTANCE_VARS = ("SCV_HOME", "SCV_SOCKET")  # they choose the instance (scvd/paths.py)

SERVICE_UNIT = f"""\
# scvd: runs an AI agent's tool calls behind approvals, as a systemd user service.
# `scvctl service install` writes this file with ExecStart set to the real scvd.
# Left out on purpose: ProtectHome=, ProtectSystem=strict, PrivateTmp=,
# RestrictNamespaces= and ProcSubset=pid break bubblewrap or hide workspaces.
[Unit]
Description=scvd: AI agent tool calls behind approvals

[Service]
Type=notify
NotifyAccess=main
{EXEC_PLACEHOLDER}
# SIGHUP re-reads config.toml; new sessions use it
ExecReload=/bin/kill -HUP $MAINPID
Restart=on-failure
# exit 2 is a configuration error: a restart every 2 s cannot fix it, and would bury the one
# line saying why (exit 3, cannot start, may be a full disk or a lack of fds, which passes)
RestartPreventExitStatus=2
RestartSec=2
WatchdogSec=30
# scvd cancels its own tool process groups on SIGTERM (TERM, 2 s, KILL) within
# its grace period; whatever is left at TimeoutStopSec gets SIGKILL
KillMode=mixed
TimeoutStopSec=20
UMask=0077
NoNewPrivileges=yes
SyslogIdentifier=scvd

[Install]
WantedBy=default.target
"""

SOCKET_UNIT = f"""\
# Socket activation for scvd: systemd listens, and starts scvd.service on the
# first connection. Installed by `scvctl service install --socket-activated`.
[Unit]
Description=scvd socket

[Socket]
{DEFAULT_LISTEN}
SocketMode=0600
DirectoryMode=0700
RemoveOnStop=yes

[Install]
WantedBy=sockets.target
"""

UNITS = {SERVICE: SERVICE_UNIT, SOCKET: SOCKET_UNIT}


def unit_dir(env: Mapping[str, str] | None = None) -> Path:
    """The user unit directory systemd reads: $XDG_CONFIG_HOME/systemd/user (platformdirs)."""
    return Path(paths_mod.user_dirs(env).config_home) / "systemd" / "user"


def unread_unit_dir(directory: Path) -> str | None:
    """Why the user manager may not read units written into `directory`, or None. XDG_CONFIG_HOME set
    in a shell profile moves `directory` (unit_dir() reads this shell's environment) but not the
    manager's unit path: it does not read that profile. Raises ConfigError when a running manager
    says it does not read `directory`; a warning when none answers to say."""
    default = Path.home() / ".config" / "systemd" / "user"
    if directory == default:
        return None
    read = manager_unit_path()
    if read is not None and os.path.realpath(directory) in map(os.path.realpath, read):  # ~/.config a link
        return None
    moved = f"XDG_CONFIG_HOME={os.environ.get('XDG_CONFIG_HOME', '')} of this shell puts the units in {directory}"
    fix = "install from a shell without it: env -u XDG_CONFIG_HOME scvctl service install"
    if read is not None:
        raise errors.ConfigError(f"{moved}, which the systemd user manager does not read (its environment is not "
                                 f"this shell's: it reads {default}); nothing was written; {fix}")
    return (f"{moved}; a user manager reads them there only if its own environment sets the same (a shell "
            f"profile does not reach it), else it reads {default}: if so, {fix}")


def manager_unit_path() -> list[str] | None:
    """The directories the running user manager reads units from; None when none answers."""
    done = systemctl(["show", "--property=UnitPath", "--value"])
    if done is None or done.returncode != 0:
        return None
    return done.stdout.split()


def scvd_command(executable: str = sys.executable,
                 which: Callable[[str], str | None] = shutil.which) -> list[str]:
    """The scvd of this Python environment: next to the interpreter, on PATH, or `python -P -m scvd`.

    -P: a unit starts in the home, which `-m` alone puts first on the import path, so a module
    planted there would run in scvd (and the whole home would count as a place whose files run later)."""
    sibling = Path(executable).parent / "scvd"
    if sibling.is_file() and os.access(sibling, os.X_OK):
        return [str(sibling), "run"]
    found = which("scvd")
    if found:
        return [os.path.abspath(found), "run"]
    return [os.path.abspath(executable), "-P", "-m", "scvd", "run"]


def quote_exec_arg(arg: str, *, executable: bool = False) -> str:
    """One word of an Exec*= line, quoted if needed, `%` doubled against specifier expansion.

    `$` is doubled against variable expansion in arguments only: the executable
    path is never expanded, so there `$$` would stay two characters.
    """
    text = arg.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%")
    if not executable:
        text = text.replace("$", "$$")
    if not arg or any(c.isspace() for c in arg) or text != arg:
        return f'"{text}"'
    return text


def exec_start_line(command: list[str]) -> str:
    words = [quote_exec_arg(command[0], executable=True), *map(quote_exec_arg, command[1:])]
    return "ExecStart=" + " ".join(words)


@dataclass(frozen=True)
class Instance:
    """What the units carry of the installing shell: SCV_HOME / SCV_SOCKET as set, and the socket."""

    env: dict[str, str]  # absolute, as scvd resolves them (against this cwd); {}: the default instance
    socket: str | None = None  # where the socket unit listens; None: the default, %t/scv/scvd.sock

    @classmethod
    def of(cls, env: Mapping[str, str]) -> Instance:
        if not any(env.get(name) for name in INSTANCE_VARS):
            return cls({})
        paths = paths_mod.resolve(env)
        chosen = {"SCV_HOME": str(paths.home), "SCV_SOCKET": str(paths.socket)}
        return cls({name: chosen[name] for name in INSTANCE_VARS if env.get(name)}, str(paths.socket))


def unit_value(name: str, value: str) -> str:
    """`value` for a unit file line, `%` doubled; a control character or an edge space cannot be written."""
    if value != value.strip() or any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise errors.ConfigError(
            f"{name}={value!r} cannot be written into a systemd unit (a control character, or a space at "
            f"an end); choose another path, or install from a shell without {name}")
    return value.replace("%", "%%")


def environment_line(name: str, value: str) -> str:
    """`Environment="NAME=value"`: quoted so spaces stay, backslash and quote escaped; `$` is literal there."""
    text = unit_value(name, value).replace("\\", "\\\\").replace('"', '\\"')
    return f'Environment="{name}={text}"'


RELOAD_BY_KILL = ("Type=notify\n",
                  "# SIGHUP re-reads config.toml; new sessions use it\nExecReload=/bin/kill -HUP $MAINPID\n")
RELOAD_BY_NOTIFY = ("Type=notify-reload\n",
                    "# systemd sends SIGHUP and waits for scvd's RELOADING=1 ... READY=1: config.toml\n"
                    "# is re-read, and new sessions use it, when `systemctl --user reload` returns\n")
NOTIFY_RELOAD_SINCE = 253  # systemd's first version with Type=notify-reload


def render_units(command: list[str], instance: Instance | None = None, systemd: int | None = None) -> dict[str, str]:
    """The unit files with ExecStart= set to `command`, serving `instance` (default: the default one),
    for the user manager of version `systemd` (None: unknown, so what every version reads)."""
    instance = instance or Instance({})
    lines = [environment_line(name, value) for name, value in instance.env.items()]
    service = SERVICE_UNIT.replace(EXEC_PLACEHOLDER, "\n".join([*lines, exec_start_line(command)]))
    if systemd is not None and systemd >= NOTIFY_RELOAD_SINCE:  # a reload that waits for its end
        for old, new in zip(RELOAD_BY_KILL, RELOAD_BY_NOTIFY):
            service = service.replace(old, new)
    socket = SOCKET_UNIT
    if instance.socket:  # systemd must listen where scvd and this shell's clients look
        socket = socket.replace(DEFAULT_LISTEN, f"ListenStream={unit_value('SCV_SOCKET', instance.socket)}")
    return {SERVICE: service, SOCKET: socket}


def write_packaging(dest: Path | None = None) -> None:
    """Regenerate packaging/systemd/ from the texts above."""
    dest = dest or Path(__file__).resolve().parents[1] / "packaging" / "systemd"
    for name, text in UNITS.items():
        (dest / name).write_text(text)


def install_steps(socket_activated: bool) -> list[list[str]]:
    """The systemctl --user arguments, in order, after the unit files are written."""
    if socket_activated:
        # stop a daemon that bound the socket itself: systemd takes the path over
        # and start it on demand only
        return [["daemon-reload"], ["stop", SERVICE], ["disable", SERVICE], ["enable", "--now", SOCKET]]
    return [["daemon-reload"], ["disable", "--now", SOCKET], ["enable", SERVICE], ["restart", SERVICE]]


UNINSTALL_STEPS = [["disable", "--now", SOCKET], ["disable", "--now", SERVICE]]
TOLERATED = {"disable", "stop"}  # may fail when the unit was never installed or loaded


@dataclass
class Report:
    """What a run did, for the text and the --json output."""

    action: str
    dry_run: bool
    unit_dir: str
    wrote: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    exec_start: str | None = None
    instance: dict[str, str] = field(default_factory=dict)  # SCV_HOME / SCV_SOCKET the units carry
    contents: dict[str, str] = field(default_factory=dict)  # dry run: the unit texts by path
    manager: bool | None = None  # None: not known (the run ended before it asked)
    manager_error: str | None = None
    systemctl: bool = True  # False: none on PATH, so no systemd starts anything here
    ran: list[dict] = field(default_factory=list)
    planned: list[str] = field(default_factory=list)
    failed: bool = False
    warnings: list[str] = field(default_factory=list)


NO_SYSTEMCTL = "systemctl is not installed"


@dataclass(frozen=True)
class Manager:
    """The running user manager as `systemctl --user show` tells: its version, or why none answers."""

    version: int | None  # `255.4-1` -> 255; None: none answers, or a version not read
    error: str | None = None  # None: it answers; NO_SYSTEMCTL: no systemctl on PATH


def ask_manager() -> Manager:
    """The user manager that reads the units. Not `systemctl --version`: after an upgrade the old
    manager runs until the next login."""
    done = systemctl(["show", "--property=Version", "--value"])
    if done is None:
        return Manager(None, NO_SYSTEMCTL)
    if done.returncode != 0:
        return Manager(None, _first_line(done.stderr) or f"exit {done.returncode}")
    head = done.stdout.strip().split(".", 1)[0].split("-", 1)[0].split("~", 1)[0]
    return Manager(int(head) if head.isdigit() else None)


def systemctl(args: list[str]) -> subprocess.CompletedProcess[str] | None:
    """Run `systemctl --user ARGS`; None when systemctl is not installed. One that does not return
    within SYSTEMCTL_TIMEOUT (a restart waits for READY=1) is stopped: its returncode is None."""
    exe = shutil.which("systemctl")
    if exe is None:
        return None
    try:
        return subprocess.run([exe, "--user", *args], capture_output=True, text=True,
                              stdin=subprocess.DEVNULL, timeout=SYSTEMCTL_TIMEOUT)
    except subprocess.TimeoutExpired as exc:
        return subprocess.CompletedProcess(exc.cmd, None, "",  # type: ignore[arg-type]
                                           f"no answer within {SYSTEMCTL_TIMEOUT:g} s; stopped")


def run_steps(report: Report, steps: list[list[str]]) -> None:
    """Run the steps; the first one tells whether a user manager answers at all. Without one,
    the enable and disable steps still run on the unit files (what the next login reads)."""
    for i, args in enumerate(steps):
        done = systemctl(args)
        if i == 0 and (done is None or done.returncode != 0):
            why = NO_SYSTEMCTL if done is None else _first_line(done.stderr) or f"exit {done.returncode}"
            _no_manager(report, why)
            if done is not None:
                _run_each(report, offline_steps(steps[1:]))
            return
        report.manager = True
        assert done is not None
        if not _ran(report, args, done):
            return


def _no_manager(report: Report, why: str) -> None:
    report.manager, report.manager_error, report.systemctl = False, why, why != NO_SYSTEMCTL


def plan_steps(report: Report, steps: list[list[str]], manager: Manager) -> None:
    """A dry run's plan: the steps run_steps() would run, given what `manager` says."""
    if manager.error is None:
        report.manager = True
    else:
        _no_manager(report, manager.error)
        steps = offline_steps(steps[1:]) if report.systemctl else []
    report.planned = [" ".join(["systemctl", "--user", *s]) for s in steps]


def offline_steps(steps: list[list[str]]) -> list[list[str]]:
    """The enable and disable steps as `--root=/` runs them with no manager: links in the unit
    directory only, nothing started or stopped."""
    return [["--root=/", *(a for a in args if a != "--now")] for args in steps if args[0] in ("enable", "disable")]


def _run_each(report: Report, steps: list[list[str]]) -> None:
    for args in steps:
        done = systemctl(args)
        if done is None or not _ran(report, args, done):
            return


def _ran(report: Report, args: list[str], done: subprocess.CompletedProcess[str]) -> bool:
    """Note a step that ran; False when it failed and ends the run."""
    report.ran.append({"argv": ["systemctl", "--user", *args], "returncode": done.returncode,
                       "stderr": done.stderr.strip()})
    verb = args[1] if args[0] == "--root=/" else args[0]
    if done.returncode != 0 and verb not in TOLERATED:
        report.failed = True
        return False
    return True


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def install(*, socket_activated: bool, dry_run: bool, socket: Path | str | None = None) -> Report:
    """`socket`: scvctl's --socket, which stands for SCV_SOCKET of this shell."""
    directory = unit_dir()
    command = scvd_command()
    instance = Instance.of(dict(os.environ, SCV_SOCKET=str(socket)) if socket else os.environ)
    check_listenable(instance, "give --socket a shorter path" if socket else None)
    manager = ask_manager()
    units = render_units(command, instance, manager.version)
    report = Report("install", dry_run, str(directory), exec_start=exec_start_line(command),
                    instance=instance.env)
    unread = unread_unit_dir(directory)
    if unread:
        report.warnings.append(unread)
    steps = install_steps(socket_activated)
    if dry_run:
        report.wrote = [str(directory / name) for name in units]
        report.contents = {str(directory / name): text for name, text in units.items()}
        plan_steps(report, steps, manager)
    else:
        _write_units(report, directory, units)
        run_steps(report, steps)
    if report.manager is False and report.systemctl:  # without systemd no login starts the service
        running = running_outside(dict(os.environ, SCV_SOCKET=str(socket)) if socket else os.environ)
        if running:
            report.warnings.append(running)
    return report


def check_listenable(instance: Instance, remedy: str | None = None) -> None:
    """Refuse a socket path scvd cannot bind (too long), as `scvd run` refuses it, before anything is
    written: the units would be enabled, and the service fail each start (the default %t path is the
    manager's, unknown here). `remedy`: what to change, when not SCV_SOCKET or SCV_HOME (--socket)."""
    if instance.socket is None:
        return
    from scvd.instance import check_socket_path

    try:
        check_socket_path(Path(instance.socket), *([remedy] if remedy else []))
    except errors.StartupError as exc:
        raise errors.ConfigError(f"{exc.message}; scvd would refuse to start on it (cannot start, exit 3), "
                                 "so nothing was written") from None


def _write_units(report: Report, directory: Path, units: dict[str, str]) -> None:
    try:
        paths_mod.make_dirs(directory)  # 0700, as ~/.config when it is missing
        for name, text in units.items():
            _write_atomic(directory / name, text)
            report.wrote.append(str(directory / name))
    except OSError as exc:  # ~/.config left to root by a sudo, a full disk
        raise errors.ConfigError(
            f"cannot write the units into {directory} ({exc.strerror}): make it a directory of yours with "
            "room to write, then run install again") from None


def running_outside(env: Mapping[str, str]) -> str | None:
    """A warning when, with no user manager, something already listens on the instance's socket (an
    `scvd run --daemon`): the service the next login starts would find the instance taken and fail."""
    from scvd.instance import probe, written_pid

    paths = paths_mod.resolve(env)
    if probe(paths.socket) is not None:
        return None
    try:
        pid = written_pid(paths.lock_file.read_bytes()).decode(errors="replace")
    except OSError:
        pid = ""
    who, stop = (f"pid {pid}, ", f"kill {pid}") if pid.isdigit() else ("", "stop it")
    return (f"an scvd started without systemd runs on this instance ({who}on {paths.socket}): the service "
            f"the next login starts would find it running and fail (cannot start: scvd is already running); "
            f"{stop} before then, so the service can take over")


def uninstall(*, dry_run: bool) -> Report:
    directory = unit_dir()
    present = [directory / name for name in UNITS if (directory / name).exists()]
    report = Report("uninstall", dry_run, str(directory))
    if dry_run:
        report.removed = [str(p) for p in present]
        plan_steps(report, [["daemon-reload"], *UNINSTALL_STEPS, ["daemon-reload"]], ask_manager())
        return report
    # disable while the unit files still exist, then remove them, then reload
    run_steps(report, [["daemon-reload"], *UNINSTALL_STEPS])
    for path in present:
        try:
            path.unlink()
        except OSError as exc:  # units a sudo install left to root, a directory in a unit's place
            raise errors.ConfigError(
                f"cannot remove {path} ({exc.strerror}): remove it yourself (as its owner), then run "
                "uninstall again") from None
        report.removed.append(str(path))
    if report.manager:
        run_steps(report, [["daemon-reload"]])
    return report


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except OSError:  # a full disk: no half-written .tmp left beside the units
        tmp.unlink(missing_ok=True)
        raise


def print_report(report: Report, as_json: bool, out=sys.stdout) -> None:
    if as_json:
        print(json.dumps(report.__dict__, indent=2), file=out)
        return
    would = "would " if report.dry_run else ""
    for path in report.wrote:
        print(f"{would}write {path}" if would else f"wrote {path}", file=out)
        if path in report.contents:
            print("    " + report.contents[path].rstrip("\n").replace("\n", "\n    "), file=out)
    for path in report.removed:
        print(f"{would}remove {path}" if would else f"removed {path}", file=out)
    if report.exec_start and not report.dry_run:
        print(f"with {report.exec_start}", file=out)
    if report.instance:
        names = " and ".join(report.instance)
        print(f"the units carry {names} of this shell, so the service is the instance this shell's scvctl "
              f"talks to ({', '.join(f'{k}={v}' for k, v in report.instance.items())}); for the default "
              f"instance, run install from a shell without {names}", file=out)
    for line in report.planned:
        print(f"would run: {line}", file=out)
    for step in report.ran:
        status = "ok" if step["returncode"] == 0 else step["stderr"] if step["returncode"] is None \
            else f"exit {step['returncode']}: {step['stderr']}"
        print(f"ran: {' '.join(step['argv'])} ({status})", file=out)
    if report.manager is False:
        print(_without_manager(report), file=out)
    elif report.failed:
        print("a systemctl step failed; see: journalctl --user -u scvd", file=out)
    for warning in report.warnings:
        print(f"warning: {warning}", file=out)


WITHOUT_SYSTEMD = "start scvd without systemd: scvd run --daemon (or scvd run in a terminal)"


def _without_manager(report: Report) -> str:
    """The line saying what a run without a user manager did (or would do), and what starts scvd then."""
    are = "would be" if report.dry_run else "are"
    if not report.systemctl:
        unused = f"the files above {are} written but unused, as nothing here starts them; {WITHOUT_SYSTEMD}" \
            if report.action == "install" else "nothing was stopped"
        return f"systemctl is not on PATH, so no systemd runs here: {unused}"
    enabled = " and enabled" if (report.planned or report.ran) and not report.failed else ""
    then = f"the files above {are} in place{enabled} for the next login, or {WITHOUT_SYSTEMD}" \
        if report.action == "install" else "nothing was stopped"
    return f"systemctl --user cannot reach a user manager ({report.manager_error}); {then}"


def cmd_install(args: argparse.Namespace) -> int:
    report = install(socket_activated=args.socket_activated, dry_run=args.dry_run,
                     socket=getattr(args, "socket", None))
    print_report(report, getattr(args, "json", False))
    return 1 if report.failed else 0


def cmd_uninstall(args: argparse.Namespace) -> int:
    report = uninstall(dry_run=args.dry_run)
    print_report(report, getattr(args, "json", False))
    return 1 if report.failed else 0


def main(argv: list[str] | None = None) -> int:
    """`python -m scvctl.service install ...`: the same as `scvctl service install ...`."""
    from .parser import add_service

    parser = argparse.ArgumentParser(prog="scvctl")
    add_service(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["service", *(sys.argv[1:] if argv is None else argv)])
    return args.handler(args)


if __name__ == "__main__":
    sys.exit(main())
