"""A small client library for scvd, for scvctl and for chat bridges.

    with Client.connect(name="my-bridge", approver=True) as c:
        session = c.open_session("/home/me/project")
        done = c.call(session, "read", {"path": "README.md"})   # waits for call.completed
        print(done.ok, done.result)

`Client` blocks; `AsyncClient` is the same over asyncio (async_client.py, imported on first
use: scvctl's commands block and need no asyncio). Both sit on `ClientCore`,
which owns ids, framing and matching answers to requests and does no I/O.
Error frames become the matching `scvd.errors` exception (`code: message`).
Events that arrive while waiting for an answer are queued for `next_event()`.
"""

from __future__ import annotations

import collections
import errno
import itertools
import logging
import os
import select
import socket
import stat
import struct
import time
from pathlib import Path
from typing import Any, Iterator

import msgspec

from scvd import __version__, errors, paths as paths_mod, protocol as p
from scvd.instance import MAX_SOCKET_PATH, Holder, file_kind, lock_holder

log = logging.getLogger("scvctl.client")


def __getattr__(name: str) -> Any:
    """`from scvctl.client import AsyncClient` as ever (bridges, tests), its asyncio imported then."""
    if name == "AsyncClient":
        from .async_client import AsyncClient

        return AsyncClient
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

EVENT_TYPES = tuple(p.Event.__args__)  # every pushed event the protocol defines


# the client's side of the error tree (both live in scvd.errors, re-exported here)
DaemonNotRunning = errors.DaemonNotRunning
ConnectionClosed = errors.ConnectionClosed

# Every wire code, and every tool error kind, as the exception the client raises.
# Written out: tests/test_errors.py fails for a code or kind the server may send
# that is missing here.
BY_CODE: dict[str, type[errors.ScvError]] = {
    "invalid_json": errors.InvalidJSON,
    "frame_too_large": errors.FrameTooLarge,
    "not_initialized": errors.NotInitialized,
    "version_mismatch": errors.VersionMismatch,
    "unknown_type": errors.UnknownType,
    "invalid_request": errors.InvalidRequest,
    "session_not_found": errors.SessionNotFound,
    "conversation_not_found": errors.ConversationNotFound,
    "call_not_found": errors.CallNotFound,
    "approval_not_found": errors.ApprovalNotFound,
    "forbidden": errors.Forbidden,
    "internal": errors.InternalError,
    "failed": errors.Failed,
}
BY_KIND: dict[str, type[errors.ToolError]] = {
    "invalid_arguments": errors.InvalidArguments,
    "unknown_tool": errors.UnknownTool,
    "denied": errors.Denied,
    "cancelled": errors.Cancelled,
    "timeout": errors.Timeout,
    "limit": errors.LimitExceeded,
    "failed": errors.Failed,
    "unavailable": errors.Unavailable,
    "credential_missing": errors.CredentialMissing,
}


def error_from_frame(frame: p.Error) -> errors.ScvError:
    """The exception for an `error` frame: by the tool error's kind, else by code.

    A code or kind from a newer server is kept on a plain ScvError. A fatal `unavailable` is scvd
    stopping with the request unanswered: DaemonNotAnswering, which scvctl says as "try again"
    (exit 3) and a bridge's reconnect loop retries on.
    """
    if frame.fatal and frame.kind == errors.Stopping.kind:
        return errors.DaemonNotAnswering(frame.message)
    if frame.kind is not None and frame.kind in BY_KIND:
        exc = BY_KIND[frame.kind](frame.message)
        exc.reason = frame.reason  # STOP_REASON: refused as scvd stops (a turn.start), not a failure
        return exc
    cls = BY_CODE.get(frame.code)
    if cls is None:
        exc = errors.ScvError(frame.message)
        exc.code = frame.code
        return exc
    return cls(frame.message)


def default_socket() -> Path:
    """SCV_SOCKET, else the instance's socket (SCV_HOME or XDG runtime dir)."""
    return paths_mod.resolve().socket


def went_away(path: Path | str, exc: ConnectionClosed) -> errors.DaemonNotAnswering:
    """A connection closed before scvd's welcome (a refusal comes as an error frame): the scvd that
    accepted it is stopping, or died with it queued (a restart). Not DaemonNotRunning itself: the
    scvd about to answer there may own what a caller would otherwise work on alone (agents import)."""
    return errors.DaemonNotAnswering(
        f"scvd on {path} closed the connection before it answered ({exc.message}): it is stopping or "
        "restarting; try again in a moment (`systemctl --user status scvd` shows whether it runs)")


def stopped(before: str, why: str) -> errors.DaemonNotAnswering:
    """scvd stopped (or restarted, or died) with a command under way: a watch whose connection it
    closed, a call it cancelled as it stopped. Said as "try again" (exit 3), as a request it left
    unanswered is, not as a failure of what the command asked."""
    return errors.DaemonNotAnswering(f"scvd stopped before {before} ({why}): {AGAIN}")


def cut_off(before: str, closed: ConnectionClosed) -> errors.DaemonNotAnswering:
    """scvd closed the connection past the welcome and said nothing: it stopped, restarted or died, or
    dropped this client (one that stopped reading, say); scvctl cannot tell which. The detail the
    socket gave (a reset) is kept."""
    detail = closed.detail
    return errors.DaemonNotAnswering(
        f"scvd closed the connection before {before} ({detail + '; ' if detail else ''}it stopped, or dropped "
        f"this client: its log says which): {AGAIN}")


AGAIN = ("run it again once scvd is back (`systemctl --user status scvd` shows whether it runs; "
         "`systemctl --user start scvd` starts it)")


def not_scvd(path: Path | str, what: str) -> errors.NotScvd:
    """`path` holds no scvd (`what` says what it holds): starting scvd or waiting would not help."""
    return errors.NotScvd(f"{path} is not an scvd socket ({what}); set SCV_SOCKET (or --socket) to scvd's "
                          "socket, or unset it to reach this user's scvd")


def not_running(path: Path | str, exc: OSError) -> DaemonNotRunning:
    size = len(os.fsencode(path))
    if size > MAX_SOCKET_PATH:  # no scvd can listen there: starting one would not help
        return DaemonNotRunning(
            f"the socket path {path} is {size} bytes, more than a Unix socket's {MAX_SOCKET_PATH}; "
            "set SCV_SOCKET to a shorter path (or a shorter SCV_HOME), for scvd and scvctl alike")
    if exc.errno in (errno.EACCES, errno.EPERM):  # a socket is there, but not one this user may use
        return DaemonNotRunning(
            f"cannot connect to {path} ({exc.strerror}){_owner_note(path)}: it is another user's scvd (one "
            "started with sudo?), or a directory on the way is not yours; run scvctl as the user scvd runs "
            "as, or set SCV_SOCKET to your own scvd's socket")
    kind = _not_a_socket(path)
    if kind:  # refused as no listener is: a file there (`scvd run` refuses that path too)
        return not_scvd(path, f"it is {kind}, not a socket")
    holder = _running_without(path) if exc.errno in (errno.ENOENT, errno.ECONNREFUSED) else None
    if holder is not None and holder.socket is not None and _another_live_socket(holder.socket, path):
        return _listens_elsewhere(path, exc, holder.pid, holder.socket)
    if holder is not None:  # "start it" went in a circle: `scvd run` refuses, naming this pid
        return _socket_gone(holder.socket or path, exc, holder)
    return DaemonNotRunning(
        f"scvd is not running on {path} ({exc.strerror or exc}); "
        "start it with `systemctl --user start scvd` or `scvd run`"
    )


def _listens_elsewhere(path: Path | str, exc: OSError, pid: int, where: str) -> errors.SocketElsewhere:
    """This instance's scvd runs on another socket than this environment computes: started where
    XDG_RUNTIME_DIR or SCV_SOCKET differed (an ssh session without a runtime dir, say)."""
    return errors.SocketElsewhere(
        f"nothing listens on {path} ({exc.strerror}), but this instance's scvd runs (pid {pid}) and listens on "
        f"{where}: it was started where XDG_RUNTIME_DIR or SCV_SOCKET differed from here; reach it with "
        f"SCV_SOCKET={where} (or scvctl --socket {where}), or restart it from this environment "
        f"(systemctl --user restart scvd, or kill {pid} and scvd run)")


def _another_live_socket(where: str, path: Path | str) -> bool:
    """Whether scvd's own socket (`where`, from its lock file) is a socket and another file than `path`:
    one gone too, or `path` itself by another name (a link on the way), is no place to send a user."""
    try:
        there = os.stat(where)
    except OSError:
        return False
    if not stat.S_ISSOCK(there.st_mode):
        return False
    try:
        here = os.stat(path)
    except OSError:  # nothing at `path`
        return True
    return (here.st_dev, here.st_ino) != (there.st_dev, there.st_ino)


def _socket_gone(path: Path | str, exc: OSError, holder: Holder) -> errors.SocketGone:
    """What to do about an scvd that runs with its socket gone: wait or restart it, or restart its socket unit."""
    gone = f"scvd (pid {holder.pid}) is running but its socket {path} is gone ({exc.strerror})"
    if holder.inherited:  # systemd's socket unit made it: scvd cannot, and restarting scvd alone keeps the old fd
        return errors.SocketGone(f"{gone}; systemd made that socket (scvd.socket), and scvd does not make it "
                                 "again: restart both, systemctl --user restart scvd.socket scvd")
    return errors.SocketGone(
        f"{gone}; it listens there again within server.socket_check_seconds unless its log says why not; "
        f"else restart it: systemctl --user restart scvd (or kill {holder.pid} and scvd run)")


def _running_without(path: Path | str) -> Holder | None:
    """The scvd that holds the instance lock of `path`, found without taking the lock: that of this
    environment's instance when `path` is its socket, or when its scvd wrote that it listens on `path`
    (`scvctl --socket PATH`, which the environment does not carry: as SCV_SOCKET=PATH would say it).
    Another path's instance is unknown."""
    try:
        instance = paths_mod.resolve()
    except (errors.ScvError, OSError):
        return None
    holder = lock_holder(instance.lock_file)
    if holder is not None and os.path.abspath(path) in (str(instance.socket), holder.socket):
        return holder
    return None


def open_socket(path: Path, timeout: float | None) -> socket.socket:
    """A socket connected to `path`, with `timeout` set. The connect waits up to `timeout` while the
    queue of connections scvd has not accepted yet is full (a hung or busy scvd), as a blocking
    connect does: with Python's timeout the socket is non-blocking, and it failed at once with EAGAIN,
    said as "scvd is not running; start it" (and `agents import` went on without it)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        sock = _connect(path, timeout if deadline is None else deadline - time.monotonic())
        if sock is not None:
            sock.settimeout(timeout)
            return sock
        if deadline is None or time.monotonic() >= deadline:
            raise errors.DaemonNotAnswering(
                f"scvd accepted no connection on {path} for {timeout:g} s (its queue of connections is full): "
                "it may be hung, or a socket-activated scvd failed to start; see `journalctl --user -u scvd`")


def _connect(path: Path, wait: float | None) -> socket.socket | None:
    """One connect waiting up to `wait` for room in scvd's queue: the socket, or None when it found none."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        if wait is not None:  # the kernel's own bound on that wait (0 would mean none)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, _timeval(max(wait, 1e-6)))
        sock.connect(str(path))
        # a signal during that wait: Python then waits for the socket to be writable and takes that
        # for a connection, which the full queue never made (the first send failed ENOTCONN)
        sock.getpeername()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, _timeval(0))
        return sock
    except BaseException as exc:  # a ^C during that wait too: the socket is ours to close
        sock.close()
        if not isinstance(exc, OSError):
            raise
        if exc.errno in (errno.EAGAIN, errno.ENOTCONN):
            return None
        raise not_running(path, exc) from None


def _timeval(seconds: float) -> bytes:
    return struct.pack("ll", int(seconds), int(seconds % 1 * 1_000_000))


def _not_a_socket(path: Path | str) -> str | None:
    """What stands at `path` when it is there and no socket ("a regular file"), else None."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    return None if stat.S_ISSOCK(mode) else file_kind(mode)


def _owner_note(path: Path | str) -> str:
    try:
        uid = os.stat(path).st_uid
    except OSError:
        return ""
    return f"; it belongs to uid {uid}, and you are uid {os.getuid()}" if uid != os.getuid() else ""


class ClientCore:
    """Ids, framing and answer matching, with no I/O.

    scvd answers a connection's requests in the order they came, so an error without an id
    (invalid_json, or frame_too_large of a line whose id scvd could not find) is the answer to
    the oldest request sent that has none yet: `feed()` files it under that request's id when it
    comes, whether or not anyone waits for that answer (a request only sent, or one whose waiter
    gave up). The requests scvd may answer later than the next ones (`p.ANSWERED_ASIDE`) stand
    outside that order: matched by their id alone.
    """

    def __init__(self, frame_limit: int = p.DEFAULT_SERVER_FRAME_LIMIT) -> None:
        self._ids = itertools.count(1)
        self._reader = p.FrameReader(frame_limit)
        self.events: collections.deque[p.Frame] = collections.deque()
        self.answers: dict[Any, p.Frame] = {}
        self.orphan_errors: collections.deque[p.Error] = collections.deque()  # came while no request was out
        self._unanswered: collections.deque[Any] = collections.deque()  # ids sent, in order, not answered yet
        self._aside: set[Any] = set()  # ids sent of requests answered out of order (p.ANSWERED_ASIDE)
        self._abandoned: set[Any] = set()  # of those and these, ids nobody waits for: their answers are dropped
        self._greeting = False  # hello sent, no welcome yet: a line no scvd sends means the peer is not scvd

    def build(self, frame: p.Frame | type, **fields: Any) -> p.Frame:
        """A request frame with a fresh id (or the frame given, as is)."""
        if isinstance(frame, type):
            frame = frame(id=next(self._ids), **fields)
        return frame

    def sent(self, frame: p.Frame) -> None:
        """`frame` went out: its answer comes after those of the requests sent before it."""
        request_id = getattr(frame, "id", None)
        if request_id is None:
            return
        if isinstance(frame, p.ANSWERED_ASIDE):  # its answer may come after the next requests'
            self._aside.add(request_id)
        else:
            self._unanswered.append(request_id)

    def hello(self, name: str, approver: bool, answers_secrets: bool = True) -> p.Frame:
        self._greeting = True
        return self.build(p.Hello, protocol=p.PROTOCOL_VERSION, client=p.PeerInfo(name=name, version=__version__),
                          approver=approver, answers_secrets=answers_secrets)

    def feed(self, data: bytes) -> None:
        """Sort incoming frames into answers (by id), events, and errors without an id."""
        for line in self._reader.feed(data):
            if isinstance(line, p.TooLarge):
                self._over_limit(line)
                continue
            try:
                frame = p.decode_server_frame(line)
            except (msgspec.ValidationError, msgspec.DecodeError) as exc:
                self._unreadable(line, exc)  # a newer scvd's frame: not a crash of this client
                continue
            if isinstance(frame, EVENT_TYPES):
                self.events.append(frame)
            elif getattr(frame, "id", None) is not None:
                self._answer(frame.id, frame)
            elif self._unanswered:
                self._answer(self._unanswered[0], frame)
            else:
                self.orphan_errors.append(frame)  # type: ignore[arg-type]

    def _over_limit(self, line: p.TooLarge) -> None:
        """A server frame over our limit: its request's error when its id could be read (no event has one)."""
        if self._greeting:  # scvd's welcome is a short line
            raise errors.NotScvd(f"it answered with a line of over {self._reader.limit} bytes, not scvd's welcome")
        error = p.Error(code="frame_too_large", message="server frame over limit", id=line.id)
        if error.id is None:
            self.orphan_errors.append(error)  # maybe an event: not filed under a request
        else:
            self._answer(error.id, error)

    def _unreadable(self, line: bytes, exc: Exception) -> None:
        """An answer becomes that request's error; an event this client does not know is skipped."""
        if self._greeting and not _frame_shaped(line):  # a newer scvd's welcome would still be a frame
            raise errors.NotScvd(f"it answered {line[:80].decode('utf-8', 'replace').strip()!r}, "
                                 "not scvd's welcome")
        request = p.request_id(line)
        if request is None:
            log.info("skipped a frame from scvd this client cannot read (%s); scvd may be newer", exc)
            return
        self._answer(request, p.Error(id=request, code="internal", message=(
            f"scvd answered with a frame this client cannot read ({exc}); use the scvctl of scvd's version")))

    def _answer(self, request_id: Any, frame: p.Frame) -> None:
        if request_id in self._aside:
            self._aside.discard(request_id)
        elif request_id in self._unanswered:
            # answers come in order: one older still unanswered was lost (unreadable, without an id)
            while (older := self._unanswered.popleft()) != request_id:
                self._abandoned.discard(older)
        if request_id in self._abandoned:
            self._abandoned.discard(request_id)
        else:
            self.answers[request_id] = frame

    def abandon(self, request_id: Any) -> None:
        """Nobody waits for `request_id`'s answer any more (its waiter was cancelled or timed out)."""
        if request_id in self._unanswered or request_id in self._aside:
            self._abandoned.add(request_id)
        self.answers.pop(request_id, None)

    def welcomed(self, welcome: p.Welcome) -> p.Welcome:
        """Read frames up to the size the server announced (its server_frame_bytes may be raised)."""
        self._reader.limit = max(self._reader.limit, welcome.limits.server_frame_bytes)
        self._greeting = False
        return welcome

    def take_answer(self, request_id: Any) -> p.Frame | None:
        """The answer to `request_id` if it came; raises its error. An error without an id that
        came while no request was out (a refusal as the connection opened) is the first asker's."""
        answer = self.answers.pop(request_id, None)
        if answer is None and self.orphan_errors:
            answer = self.orphan_errors.popleft()
        if isinstance(answer, p.Error):
            raise error_from_frame(answer)
        return answer


def absolute_workspace(workspace: str | os.PathLike[str]) -> str:
    """`workspace` for session.open, which takes only an absolute path: `absolute()`'s; "" stays "" for
    scvd to refuse."""
    path = os.fspath(workspace)
    try:
        return absolute(path) if path else path
    except FileNotFoundError:  # the directory was removed under this process
        raise errors.InvalidRequest(
            f"workspace {path!r} is relative, and this process's current directory no longer exists: "
            "pass an absolute path") from None


def absolute(path: str) -> str:
    """`path` made absolute as open() would take it: a leading `~` expanded (else `~/proj` named
    `./~/proj`), a relative one joined to the current directory as the shell shows it ($PWD while it
    names that directory: /home/me/proj through /home -> /var/home), scvd's own not being the caller's.
    Links and `..` are left for scvd to resolve: it keeps the path as given beside the real one (an
    agent's absolute `cwd` may start with either). FileNotFoundError: the current directory is gone."""
    given = os.path.expanduser(path)
    return given if os.path.isabs(given) else str(Path(_here()) / given)


def _here() -> str:
    """The current directory as the shell shows it: $PWD while it names this very directory (`pwd -L`),
    else the kernel's real path."""
    here, shown = os.stat("."), os.environ.get("PWD", "")
    try:
        if os.path.isabs(shown) and os.path.samestat(os.stat(shown), here):
            return shown
    except OSError:  # $PWD names nothing now
        pass
    return os.getcwd()


def _frame_shaped(line: bytes) -> bool:
    """A JSON object with a text `type`: what every frame of scvd, of any version, is."""
    try:
        value = msgspec.json.decode(line)
    except msgspec.DecodeError:
        return False
    return isinstance(value, dict) and isinstance(value.get("type"), str)


def _wait_unless_gone(sock: socket.socket, output: int) -> None:
    """Until `sock` has something to read; BrokenPipeError once `output`'s reader has left (on Linux
    a pipe's or socket's write end polls POLLERR or POLLHUP then; a file or a terminal never does)."""
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    poller.register(output, 0)  # asks for nothing: only POLLERR, POLLHUP and POLLNVAL come
    while True:
        for fd, _ in poller.poll():
            if fd != output:
                return
        raise BrokenPipeError(errno.EPIPE, "the reader of the output left")


class Client:
    """A blocking client over the Unix socket."""

    def __init__(self, sock: socket.socket, core: ClientCore | None = None) -> None:
        self.sock = sock
        self.core = core or ClientCore()
        self.welcome: p.Welcome | None = None

    @classmethod
    def connect(cls, path: Path | str | None = None, *, name: str = "scvctl", approver: bool = False,
                timeout: float | None = 30.0, answers_secrets: bool = True) -> Client:
        path = Path(path) if path else default_socket()
        client = cls(open_socket(path, timeout))
        try:
            client.welcome = client.core.welcomed(client.request(client.core.hello(name, approver, answers_secrets)))
        except ConnectionClosed as exc:
            client.close()
            raise went_away(path, exc) from None
        except errors.NotScvd as exc:
            client.close()
            raise not_scvd(path, exc.message) from None
        except BaseException:  # refused, or no answer: the socket is ours to close
            client.close()
            raise
        return client

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.sock.close()

    def send(self, frame: p.Frame | type, **fields: Any) -> p.Frame:
        frame = self.core.build(frame, **fields)
        try:
            self.sock.sendall(p.encode(frame))
        except ConnectionError as exc:  # EPIPE: scvd is gone; not scvctl's stdout closing
            self._raise_parting_error()
            raise ConnectionClosed(detail=exc.strerror or str(exc)) from None
        self.core.sent(frame)
        return frame

    def _raise_parting_error(self) -> None:
        """Raise the error scvd sent before it closed (e.g. a refused connection), if it is still unread."""
        try:
            while data := self.sock.recv(1 << 16, socket.MSG_DONTWAIT):
                self.core.feed(data)
        except OSError:
            pass
        if self.core.orphan_errors:
            raise error_from_frame(self.core.orphan_errors.popleft())

    def request(self, frame: p.Frame | type, **fields: Any) -> Any:
        """Send a request and wait for its answer; error frames raise."""
        sent = self.send(frame, **fields)
        return self.wait_answer(sent.id)  # type: ignore[attr-defined]

    def wait_answer(self, request_id: Any) -> Any:
        """The (next) answer to a request already sent; error frames raise."""
        try:
            while True:
                answer = self.core.take_answer(request_id)
                if answer is not None:
                    return answer
                self._read()
        except BaseException:  # a timeout or ^C too: an answer coming later is nobody's
            self.core.abandon(request_id)
            raise

    def next_event(self, output: int | None = None) -> Any:
        """The next pushed event, however long it takes: a call may wait for a person, and quiet
        is no sign of a hung scvd (`timeout` bounds only the answers to requests). `output`, the fd
        the events go to: once its reader has left, BrokenPipeError at once, not at the next write."""
        while not self.core.events:
            if self.core.orphan_errors:
                raise error_from_frame(self.core.orphan_errors.popleft())
            if output is not None:
                _wait_unless_gone(self.sock, output)
            self._read(answer=False)
        return self.core.events.popleft()

    def events(self, output: int | None = None) -> Iterator[Any]:
        while True:
            yield self.next_event(output)

    def _read(self, answer: bool = True) -> None:
        """Take what scvd sent; waiting for an answer, at most the connection's timeout."""
        timeout = self.sock.gettimeout()
        try:
            if not answer:
                self.sock.settimeout(None)
            try:
                data = self.sock.recv(1 << 16)
            finally:
                self.sock.settimeout(timeout)
        except ConnectionError as exc:  # a reset after scvd closed with our frames unread
            raise ConnectionClosed(detail=exc.strerror or str(exc)) from None
        except TimeoutError:
            raise self._not_answering() from None
        if not data:
            raise ConnectionClosed()
        self.core.feed(data)

    def _not_answering(self) -> errors.DaemonNotAnswering:
        try:
            where = self.sock.getpeername() or "its socket"
        except OSError:
            where = "its socket"
        return errors.DaemonNotAnswering(
            f"scvd accepted the connection on {where} but sent nothing for {self.sock.gettimeout():g} s: "
            "it may be hung, or a socket-activated scvd failed to start; see `journalctl --user -u scvd`")

    # --- conveniences -------------------------------------------------------------

    def status(self) -> p.StatusResult:
        return self.request(p.Status)

    def open_session(self, workspace: str | os.PathLike[str]) -> str:
        """Open a session on `workspace`; a relative path is this process's, as open() takes it."""
        return self.request(p.SessionOpen, workspace=absolute_workspace(workspace)).session

    def start_call(self, session: str, tool: str, arguments: dict[str, Any] | None = None,
                   **fields: Any) -> str:
        """Queue a call; return its call_id. Its events arrive through next_event()."""
        return self.request(p.Call, session=session, tool=tool, arguments=arguments or {}, **fields).call_id

    def wait_call(self, call_id: str) -> p.CallCompleted:
        """Wait for a call's completion; other events stay queued, in order."""
        skipped: list[p.Frame] = []
        try:
            while True:
                event = self.next_event()
                if isinstance(event, p.CallCompleted) and event.call_id == call_id:
                    return event
                skipped.append(event)
        finally:
            self.core.events.extendleft(reversed(skipped))

    def call(self, session: str, tool: str, arguments: dict[str, Any] | None = None,
             **fields: Any) -> p.CallCompleted:
        return self.wait_call(self.start_call(session, tool, arguments, **fields))
