"""The `scvd` command: run the daemon (foreground or --daemon) and check the configuration.

Exit codes: 0 clean stop, 1 unexpected failure, 2 configuration error or bad
usage, 3 the daemon could not start (already running, socket in use, ...).
"""

from __future__ import annotations

import logging
import os
import signal
import stat
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from . import __version__, config as config_mod, errors, eventloop, instance, notify, paths as paths_mod
from . import search_paths, tools
from .redact import for_logs
from .stdio import closed_stdio_as_devnull
from .text import printable
from .toml_write import toml_value

if TYPE_CHECKING:
    import argparse

EXIT_OK, EXIT_FAILURE, EXIT_CONFIG, EXIT_STARTUP = 0, 1, 2, 3
LEFTOVER_SECONDS = 1.0  # after shutdown, how long tasks still running get to end
THREAD_SECONDS = 1.0  # then, how long threads still in a blocking call get to end
_PRIORITY = {"DEBUG": 7, "INFO": 6, "WARNING": 4, "ERROR": 3, "CRITICAL": 2}


# journald splits a line at LineMax (48K bytes) and reads a `<N>` at the start of the next piece as
# its priority: a peer's text padded to the cut would forge a record. 8K chars is less in any UTF-8.
JOURNAL_LINE_CHARS = 8192


class _JournalFormatter(logging.Formatter):
    """One line per record; under journald a `<N>` priority prefix instead of a timestamp.

    A peer's text in a record (a client's name) has its control characters escaped: journald ends a
    record at a NUL too, and reads a `<N>` after it as the next one's priority (`<0>` is broadcast
    to every terminal), and journalctl shows a line with an escape only as `[blob data]`."""

    def __init__(self, journal: bool) -> None:
        fmt = "%(levelname)s %(name)s: %(message)s" if journal else \
            "%(asctime)s %(levelname)s %(name)s: %(message)s"
        super().__init__(fmt)
        self.journal = journal

    def format(self, record: logging.LogRecord) -> str:
        # a secret read (a key in an MCP url's query, which httpx logs at debug) never reaches a log line
        text = printable(for_logs(super().format(record)).replace("\n", " | "), keep="\t")
        if not self.journal:
            return text
        if len(text) > JOURNAL_LINE_CHARS:  # its middle: a traceback's end says what failed
            half = JOURNAL_LINE_CHARS // 2
            text = f"{text[:half]} ... [{len(text) - 2 * half:,} chars cut: journald splits longer lines] ... {text[-half:]}"
        return f"<{_PRIORITY.get(record.levelname, 6)}>{text}"


def _under_journald() -> bool:
    """Whether stderr goes to journald, which reads a leading `<N>` as the line's priority: it is the
    stream JOURNAL_STREAM names (device:inode), as systemd says to check; the variable alone is
    inherited too, e.g. by a shell in a terminal that runs as a user unit."""
    device, _, inode = os.environ.get("JOURNAL_STREAM", "").partition(":")
    try:
        st = os.fstat(2)
    except OSError:
        return False
    return device.isdigit() and inode.isdigit() and (st.st_dev, st.st_ino) == (int(device), int(inode))


NOISY_LIBRARIES = ("httpx2", "mcp")


def setup_logging(level: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_JournalFormatter(journal=_under_journald()))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # the HTTP library logs each request at info (an MCP server's, a chat provider's), the MCP SDK
    # each session's id: a line per call, which `info` does not promise; `-v` (debug) shows them
    for library in NOISY_LIBRARIES:
        logging.getLogger(library).setLevel(logging.NOTSET if root.level <= logging.DEBUG
                                            else max(root.level, logging.WARNING))


def _config_path(text: str) -> Path:
    """--config's value; an empty one (an unset variable in a unit's ExecStart) named the current directory."""
    if not text:
        import argparse

        raise argparse.ArgumentTypeError(
            "an empty path names no config file; give the file's path, or leave --config out to read the "
            "instance's config.toml (scvd check-config shows which)")
    return Path(text)


def _absolute_arg(args: Any, name: str, default: Path) -> Path:
    """The option `name`'s path (or `default`) made absolute; ConfigError when it is relative to a removed directory."""
    given = getattr(args, name, None)
    return paths_mod.absolute(given or default, f"--{name.replace('_', '-')} {given}" if given else str(default))


def build_parser() -> argparse.ArgumentParser:
    import argparse

    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--config", type=_config_path, default=argparse.SUPPRESS,
                        help="config file (default: the instance's config.toml)")
    common.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS,
                        help="log at debug level")
    parser = argparse.ArgumentParser(prog="scvd", parents=[common],
                                     description="Run an AI agent's tool calls behind approvals.")
    parser.add_argument("--version", action="version", version=f"scvd {__version__}")
    sub = parser.add_subparsers(dest="command")
    run = sub.add_parser("run", parents=[common], help="run the daemon in the foreground (the default)")
    run.add_argument("--daemon", action="store_true", help="detach (hosts without systemd)")
    run.add_argument("--pid-file", type=Path, help="with --daemon: where to write the pid")
    check = sub.add_parser("check-config", parents=[common],
                           help="print the effective configuration and where each value came from")
    check.add_argument("--strict", action="store_true",
                       help="exit 2 when a warning is printed too (an MCP server's command missing, the sandbox unavailable)")
    return parser


# The service's own command lines, parsed without building the parser (argparse and its
# help formatters cost a start some ms before READY=1); tests/test_cli_args.py holds them equal.
PLAIN_RUN = {(): {"command": None}, ("run",): {"command": "run", "daemon": False, "pid_file": None}}


def parse_args(argv: list[str] | None = None) -> Any:
    argv = sys.argv[1:] if argv is None else argv
    plain = PLAIN_RUN.get(tuple(argv))
    if plain is not None:
        return SimpleNamespace(**plain)
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "pid_file", None) and not args.daemon:
        parser.error("--pid-file needs --daemon: a foreground scvd writes no pid file (under systemd: "
                     "systemctl --user show -p MainPID scvd)")
    return args


def main(argv: list[str] | None = None) -> int:
    # before anything writes or detaches: a stream started closed was None, and check-config's flush
    # or python-daemon's redirect of it a traceback (after the detach, unseen: exit 0, no daemon)
    closed_stdio_as_devnull()
    args = parse_args(argv)
    # before any program is looked up or started: check-config then finds what the daemon finds
    dropped = search_paths.clean_environ()
    try:
        paths = paths_mod.resolve()
        # absolute: --daemon changes to / before a reload reads the file again
        config_file = _absolute_arg(args, "config", paths.config_file)
        pid_file = _absolute_arg(args, "pid_file", paths.pid_file)
    except errors.ConfigError as exc:  # SCV_HOME / SCV_SOCKET / a relative path: before any config file is known
        print(f"{_error_prefix()}scvd: configuration error: {exc.message}", file=sys.stderr)
        return EXIT_CONFIG
    foreground = args.command != "check-config" and not getattr(args, "daemon", False)
    try:
        named = (f"check the path given to --config (without it scvd reads {paths.config_file})"
                 if getattr(args, "config", None) else "")
        loaded = config_mod.load(config_file, missing=named)
        eventloop.check(loaded.config.server.event_loop)
        # the foreground start builds the registry after READY=1 (run()); what it would refuse,
        # config.load refused already. A script tool skipped here is not logged: check-config lists
        # it, and the detached daemon's own build logs it (here, before logging is set up, it was
        # a bare stderr line besides)
        registry = None if foreground else tools.build_registry(loaded.config, paths, log_skipped=False)
    except errors.ConfigError as exc:
        return _config_error(config_file, exc)
    if args.command == "check-config":
        try:
            instance.check_socket_path(paths.socket)  # `run` would refuse it (exit 3): so does the check
        except errors.StartupError as exc:
            print(f"{_error_prefix()}scvd: cannot start: {exc.message}", file=sys.stderr)
            return EXIT_STARTUP
        return _until_the_reader_leaves(lambda: check_config(loaded, paths, registry, strict=args.strict,
                                                             dropped=search_paths.notes(dropped)))
    level = "debug" if getattr(args, "verbose", False) else loaded.config.log_level
    setup_logging(level)
    for warning in loaded.warnings:
        logging.getLogger("scvd.config").warning("%s", warning)
    for note in search_paths.notes(dropped):
        logging.getLogger("scvd").warning("%s", printable(note))
    if not foreground:
        return run_detached(paths, loaded, pid_file, level)
    return run(paths, loaded, config_file)


def _until_the_reader_leaves(print_all: Any) -> int:
    """`scvd check-config | head -1`: a reader that left ends the output quietly, as for other Unix tools."""
    try:
        code = print_all()
        sys.stdout.flush()  # the last lines may still be buffered: their EPIPE comes here, not at exit
        return code
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # the flush at exit must not fail again
        return EXIT_OK


def _config_error(config_file: Path, exc: errors.ConfigError) -> int:
    where = "" if str(config_file) in exc.message else f"{config_file}: "
    print(f"{_error_prefix()}scvd: configuration error: {where}{exc.message}", file=sys.stderr)
    return EXIT_CONFIG


def _error_prefix() -> str:
    """For an error printed, not logged (logging may not be set up yet): the priority the log lines
    carry under journald; without it `journalctl -p warning` hid the one line saying why the unit fails."""
    return f"<{_PRIORITY['ERROR']}>" if _under_journald() else ""


def run(paths: paths_mod.Paths, loaded: config_mod.Loaded, config_file: Path) -> int:
    """Run in the foreground until SIGTERM/SIGINT.

    The lock and the socket are claimed and READY=1 is sent before the server, the tools and
    asyncio are imported: a client that connects meanwhile waits in the socket's backlog, as with
    socket activation. Signals that arrive before the loop runs are kept and handled then.
    """
    manager_env = notify.scrub_env()  # children must never inherit the manager's variables
    inherited = notify.inherited_sockets(manager_env)
    notifier = notify.Notifier(manager_env)

    def start() -> None:
        # kept from before the claim: one who saw the socket appear may signal at once (SIGHUP's
        # default action killed a daemon whose handlers came after the socket)
        early: list[int] = []
        for sig in KEPT_SIGNALS:
            signal.signal(sig, lambda signum, _frame: early.append(signum))
        paths_mod.prepare(paths)
        held = instance.claim(paths, inherited)
        held.signals = early  # the same list: signals until the loop's handlers land in it
        notifier.ready()  # queued if the manager's socket is full: the daemon's loop sends it then
        held.ready_sent = True
        try:
            serve(_daemon(paths, loaded, notifier, held), [])
        finally:
            # the loop that waited for room is gone: what a full socket still holds (STOPPING=1)
            # is tried once more, without blocking, instead of vanishing with the process
            notifier.close()

    return _leave(_guarded(config_file, start))


def _leave(code: int) -> int:
    """`code`, once the threads have ended; past THREAD_SECONDS the process exits without them.

    The interpreter's exit joins every thread, without a bound: one blocked in a call (a reload's
    sandbox probe, a keyring lookup on a hung mount) kept scvd from ever exiting.
    """
    import gc
    import threading
    import time

    deadline = time.monotonic() + THREAD_SECONDS
    stuck = []
    for thread in threading.enumerate():
        if thread is not threading.current_thread() and not thread.daemon:
            thread.join(max(0.0, deadline - time.monotonic()))
            if thread.is_alive():
                stuck.append(thread.name)
    if not stuck:
        # the interpreter's exit would run its collections over every object: 0.3 s once chat or MCP
        # libraries are loaded; frozen, they are left to the process's end
        gc.freeze()
        return code
    logging.getLogger("scvd").warning("exiting without waiting for %d thread(s) still in a blocking call: %s",
                                      len(stuck), ", ".join(stuck))
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


KEPT_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)  # before the loop runs: kept, handled then


def _guarded(config_file: Path, start: Any) -> int:
    """Run `start()`; a failure to start is one line, exit 2 (configuration) or 3 (anything else)."""
    try:
        start()
    except errors.ConfigError as exc:  # config.load missed it: said after READY=1, still exit 2
        return _config_error(config_file, exc)
    except (errors.StartupError, OSError) as exc:
        logging.getLogger("scvd").error(
            "cannot start: %s", exc.message if isinstance(exc, errors.StartupError) else exc)
        return EXIT_STARTUP
    return EXIT_OK


def _daemon(paths: paths_mod.Paths, loaded: config_mod.Loaded, notifier: notify.Notifier,
            held: instance.Claim) -> Any:
    """The Daemon, imported only now; the claim is released if it cannot be built."""
    try:
        from .server import Daemon

        return Daemon(paths, loaded, notifier, claim=held)
    except BaseException:
        instance.release(held, paths.socket)
        raise


def serve(daemon: Any, inherited: list[Any]) -> None:
    """asyncio.run(daemon.serve()) without asyncio.run's unbounded wait for leftover tasks.

    The server already gave in-flight calls their grace period; a tool that
    ignores cancellation must not keep the process from exiting.
    """
    import asyncio

    loop = eventloop.new_event_loop(daemon.config.server.event_loop)
    logging.getLogger("scvd").debug("event loop: %s", eventloop.name(loop))
    asyncio.set_event_loop(loop)
    try:
        loop.run_until_complete(daemon.serve(inherited))
        leftover = asyncio.all_tasks(loop)
        for task in leftover:
            task.cancel()
        if leftover:
            loop.run_until_complete(asyncio.wait(leftover, timeout=LEFTOVER_SECONDS))
        loop.run_until_complete(loop.shutdown_asyncgens())
    finally:
        asyncio.set_event_loop(None)
        loop.close()
        # what waits for threads now is no loop, whose handler made a second Ctrl-C exit at once: asyncio's
        # close puts back KeyboardInterrupt (a traceback), uvloop's leaves its own (the signal is lost)
        signal.signal(signal.SIGINT, lambda _signum, _frame: daemon.exit_at_once())
        from .secrets import stop_threads

        stop_threads()


def run_detached(paths: paths_mod.Paths, loaded: config_mod.Loaded, pid_file: Path, level: str) -> int:
    """Detach with python-daemon (for hosts without systemd), keeping inherited sockets."""
    import daemon
    import daemon.pidfile
    import lockfile

    inherited = notify.inherited_sockets(notify.scrub_env())
    # refused before detaching, where the caller still sees the line and the exit code
    if _guarded(Path(loaded.path), lambda: _free_to_detach(paths, pid_file, inherited)) != EXIT_OK:
        return EXIT_STARTUP
    early: list[int] = []  # from the detach (before the pid file is written) until the loop's handlers
    context = daemon.DaemonContext(
        pidfile=daemon.pidfile.TimeoutPIDLockFile(str(pid_file)),
        files_preserve=[s.fileno() for s in inherited] + [sys.stderr.fileno()],
        stderr=sys.stderr,
        umask=0o077,
        working_directory="/",
        detach_process=True,
        # a SIGHUP's default action would kill the daemon before its loop handles signals
        signal_map={**daemon.daemon.make_default_signal_map(),
                    **{sig: lambda signum, _frame: early.append(signum) for sig in KEPT_SIGNALS}},
    )

    def start() -> None:
        held = instance.claim(paths, inherited)
        held.signals = early  # the same list: signals until the loop's handlers land in it
        serve(_daemon(paths, loaded, notify.Notifier({}), held), [])

    try:
        context.open()
    except lockfile.LockError as exc:  # detached already: said on the stderr kept, as what _guarded says
        if isinstance(exc, lockfile.LockFailed):  # not AlreadyLocked: that file is another start's
            _remove_unwritten(pid_file)
        why = exc.__context__.strerror if isinstance(exc.__context__, OSError) else exc
        logging.getLogger("scvd").error("cannot start: cannot write the pid file %s (%s); check that its disk "
                                        "has room and its directory is writable", pid_file, why)
        return EXIT_STARTUP
    with context:
        setup_logging(level)
        code = _guarded(Path(loaded.path), start)
    return _leave(code)  # the pid file is gone already


def _remove_unwritten(pid_file: Path) -> None:
    """Remove the pid file python-daemon created but could not write (a full disk): left empty, every
    later start refused it as not a pid file, until the person removed it."""
    try:
        if f"{os.getpid()}\n".startswith(pid_file.read_text()):  # ours: empty, or our pid in part
            pid_file.unlink()
    except (OSError, UnicodeDecodeError):
        pass


def _free_to_detach(paths: paths_mod.Paths, pid_file: Path, inherited: list[Any]) -> None:
    """Raise StartupError (or OSError) for what would fail after detaching, unseen.

    When no scvd holds the instance lock, a pid file left by a crash is stale:
    python-daemon would refuse it forever, so it is removed; but only a file that
    holds a pid and nothing else (a typo'd --pid-file must never cost a file).
    """
    from .instance import acquire_lock

    paths_mod.prepare(paths)
    os.close(acquire_lock(paths.lock_file))
    if not inherited:  # an activated socket is bound already, whatever its path
        instance.check_socket_path(paths.socket)
    if pid_file.is_dir():  # `--pid-file /run/user/1000`: a file in it was meant, which scvd will not guess
        raise errors.StartupError(f"--pid-file {pid_file} is a directory; give the path of a file, e.g. "
                                  f"--pid-file {pid_file / 'scvd.pid'}")  # first: /run/user is not writable
    if not pid_file.parent.is_dir() or not os.access(pid_file.parent, os.W_OK | os.X_OK):
        raise errors.StartupError(f"--pid-file {pid_file}: its directory {pid_file.parent} does not exist or is "
                                  "not writable; create it, or give another path")
    if pid_file.is_symlink() or pid_file.exists():
        if not _holds_a_pid(pid_file):
            raise errors.StartupError(f"--pid-file {pid_file} exists and is not a pid file (a pid and a newline); "
                                      "give the path of a pid file, or remove that file yourself")
        pid = int(pid_file.read_text())
        if _running(pid):  # an scvd that wrote it a moment ago and is about to take the lock
            raise errors.StartupError(
                f"--pid-file {pid_file} names pid {pid}, which is running: an scvd starting right now? try "
                "again in a moment; if that process is no scvd (a pid reused after a crash), remove the file")
        logging.getLogger("scvd").warning("removing stale pid file %s (no scvd holds %s)", pid_file, paths.lock_file)
        pid_file.unlink()


def _running(pid: int) -> bool:
    """Whether `pid` is a live process (a zombie that no init reaped yet is not)."""
    from .proctree import read_stat

    found = read_stat(pid) if pid > 0 else None
    return found is not None and found.alive


def _holds_a_pid(path: Path) -> bool:
    """A regular file of a few bytes that are a number (what python-daemon writes)."""
    try:
        st = path.lstat()
        if not stat.S_ISREG(st.st_mode) or st.st_size > 32:
            return False
        return path.read_text().strip().isdigit()
    except (OSError, UnicodeDecodeError):
        return False


def check_config(loaded: config_mod.Loaded, paths: paths_mod.Paths, registry: Any, strict: bool = False,
                 dropped: list[str] | None = None) -> int:
    """Print every setting with its source, then the paths, the tools and the sandbox verdict.

    A script tool that fails to load does not fail the check (the daemon starts without it),
    but each one is printed with why, as `scvctl tools --errors` would show it. Nor does a
    warning, unless `strict` (a CI check on the machine that runs scvd). `dropped`: what the
    start's cleaning of scvd's own environment logs (search_paths.notes), a warning each too.
    """
    print(f"# config file: {loaded.path}{'' if loaded.file_read else ' (missing: defaults)'}")
    warnings = [*(printable(note) for note in dropped or []), *loaded.warnings]  # as the start logs them
    for warning in warnings:
        print(f"# warning: {warning}")
    for key, value, source in config_mod.effective(loaded):
        if value is None:  # TOML has no null: an unset optional key reads as a comment
            print(f"# {key} is not set  # {source}")
        elif value is config_mod.HIDDEN:
            print(f"# {key} = <a literal value, not shown>  # {source}")
        elif isinstance(value, config_mod.Masked):
            print(f"# {key} = {toml_value(str(value))}  (its query and user:password@ not shown)  # {source}")
        else:
            print(f"{key} = {toml_value(value)}  # {source}")
    print(f"# socket: {paths.socket}")
    print(f"# state: {paths.state_dir}")
    print(f"# adapters: {paths.adapters_dir}")
    skipped = registry.load_errors
    print(f"# tools: {len(registry)} registered" + (f", {len(skipped)} skipped:" if skipped else ""))
    for e in skipped:
        print(f"#   {e.name}: {e.source}: {e.message}")
    verdict = sandbox_verdict(loaded.config, paths, str(loaded.path))
    warned = len(warnings)
    if verdict.startswith("unavailable"):  # mode bwrap: scvd starts, and every sandboxed call fails
        warned += 1
        print("# warning: sandbox.mode = \"bwrap\" and the sandbox is unavailable (below): every bash call, "
              "script tool, agent and sandboxed stdio MCP server fails `unavailable` until it works")
    print(f"# sandbox: {verdict}")
    if strict and warned:
        print(f"{_error_prefix()}scvd: check-config --strict: {warned} warning(s), the `# warning:` lines",
              file=sys.stderr)
        return EXIT_CONFIG
    return EXIT_OK


def sandbox_verdict(config: config_mod.Config, paths: paths_mod.Paths, config_file: str | None = None) -> str:
    if config.sandbox.mode == "off":
        return "off (sandbox.mode = off)"
    from . import sandbox

    return sandbox.describe(sandbox.probe(config.sandbox, paths, config_file=config_file))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
