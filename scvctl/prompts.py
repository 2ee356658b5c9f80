"""What scvctl asks a person at the terminal: a one-key answer, a masked secret; and the line
ends that input from a pipe (which nothing echoes) needs."""

from __future__ import annotations

import contextlib
import re
import sys
from collections.abc import Callable, Iterator
from typing import IO, Any

from scvd import errors
from scvd.text import printable

# a PEM block's or an OpenSSH key's first line; its label names the END line that closes it
KEY_BEGIN = re.compile(r"\s*-----BEGIN ([^\r\n]+?)-----")


def read_secret(prompt: str) -> str | None:
    """A secret: masked on a terminal, else a line of stdin (a key's lines up to its END line, as
    whole_value reads them). None at the end of the input; UsageError for a key cut short."""
    if sys.stdin.isatty():
        try:
            return masked_input(prompt)
        except EOFError:
            return None
    sys.stdout.write(prompt)
    sys.stdout.flush()
    line = sys.stdin.readline()
    end_prompt_line()
    return whole_value(line, sys.stdin.readline) if line else None


def whole_value(first: str, more: Callable[[], str], note: Callable[[str], None] | None = None) -> str:
    """`first` without its line break; or, when it opens a PEM or OpenSSH key (`-----BEGIN OPENSSH
    PRIVATE KEY-----`), the key: its lines read with `more` up to its `-----END ...-----` line, each
    without the spaces around it and ended by a line break, the last too (OpenSSH requires it).
    One line was read, and a pasted key stored as its first line alone. `note` is told the END line
    awaited; an input that ends before it is a UsageError, and nothing of the key is kept."""
    begun = KEY_BEGIN.match(first)
    end = f"-----END {begun[1]}-----" if begun else ""
    if not begun or end in first:  # no key, or one flattened into a line: nothing more to read
        return first.rstrip("\r\n")
    if note:
        note(end)
    lines = [first.strip()]
    while lines[-1] != end:
        line = more()
        if not line:
            raise errors.UsageError(f"the key ended before its {end} line; nothing of it was kept")
        lines.append(line.strip())
    return "\n".join(lines) + "\n"


def masked_input(prompt: str) -> str:
    """A value typed or pasted on the terminal with its echo off, as getpass reads one: a line, or a
    PEM or OpenSSH key whole (whole_value). getpass read one line, then set the echo back on and
    dropped the input not yet read: a pasted key kept its first line, and lines that came after
    that showed. Here the echo stays off until the key's END line is read, and across Ctrl-Z and
    fg too (the shell puts its own terminal modes back while the command is stopped)."""
    with _terminal() as (tty_in, tty_out), _echo_off(tty_in.fileno()):
        tty_out.write(prompt)
        tty_out.flush()

        def note(end: str) -> None:  # a key typed by hand would otherwise seem not to take Enter
            tty_out.write(f"\n  (a key: read whole, hidden, up to its {end} line; Ctrl-D gives up)")
            tty_out.flush()

        first = _line(tty_in)  # Ctrl-D: EOFError, which the caller says as it likes
        try:
            return whole_value(first, tty_in.readline, note)
        finally:
            tty_out.write("\n")  # the line the echo did not end
            tty_out.flush()


@contextlib.contextmanager
def _terminal() -> Iterator[tuple[IO[str], IO[str]]]:
    """The controlling terminal to read and to write the prompt on, as getpass takes it (the prompt
    shows with stderr redirected); without one, stdin and stderr."""
    import io
    import os

    try:
        fd = os.open("/dev/tty", os.O_RDWR | os.O_NOCTTY)
    except OSError:  # no controlling terminal (a new session's)
        fd = -1
    if fd < 0:
        yield sys.stdin, sys.stderr
        return
    with io.TextIOWrapper(io.FileIO(fd, "w+")) as tty:
        yield tty, tty


@contextlib.contextmanager
def _echo_off(fd: int) -> Iterator[None]:
    """The terminal's echo off, and off again after a SIGCONT (fg); its modes put back at the end. Both
    changes drop the input not yet read, as getpass's do: nothing typed ahead is taken for the value,
    and nothing typed after it is echoed later."""
    import signal
    import termios

    old = termios.tcgetattr(fd)
    hidden = old[:]
    hidden[3] &= ~termios.ECHO  # lflag

    def mask_again(signum: int, frame: Any) -> None:
        try:
            modes = termios.tcgetattr(fd)
            modes[3] &= ~termios.ECHO
            termios.tcsetattr(fd, termios.TCSANOW, modes)
        except termios.error:
            pass

    previous = signal.signal(signal.SIGCONT, mask_again)
    try:
        termios.tcsetattr(fd, termios.TCSAFLUSH, hidden)
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSAFLUSH, old)
        signal.signal(signal.SIGCONT, previous)


def _line(stream: IO[str]) -> str:
    line = stream.readline()
    if not line:  # Ctrl-D
        raise EOFError
    return line


def approve_question(event: Any) -> tuple[str, set[str]]:
    """The one-key question; a request that always asks is approved once only: no [s]ession."""
    if getattr(event, "always_ask", None):
        return "approve once? [y]es / [n]o: ", {"y", "n"}
    return "approve? [y]es / [n]o / [s]ession: ", {"y", "n", "s"}


ANSWERS = {"y": "y", "yes": "y", "n": "n", "no": "n", "s": "s", "session": "s"}


def ask(prompt: str, choices: set[str]) -> str | None:
    """The key chosen: a whole word only (`y`, `yes`, ...); "stop" or "sorry" is asked again, never `s`."""
    drop_typed_ahead()
    while True:
        sys.stdout.write(prompt)
        sys.stdout.flush()
        line = sys.stdin.readline()
        end_prompt_line(printable(line.strip(), keep=""))
        if not line:
            return None
        answer = ANSWERS.get(line.strip().lower())
        if answer in choices:
            return answer


def end_prompt_line(shown: str = "") -> None:
    """After a prompt's answer read from input that is no terminal (a pipe, a file), which nothing
    echoed: end the prompt's line, with `shown` (the answer, never a secret), else the next prompt
    or message went on the same line."""
    if not sys.stdin.isatty():
        print(shown, flush=True)


def drop_typed_ahead() -> None:
    """Forget what was typed on the terminal before this request (or the model's question) was shown:
    a second `y` meant for the one before would otherwise answer this one unread. (masked_input drops it
    for secrets itself.)"""
    if sys.stdin.isatty():
        import termios

        termios.tcflush(sys.stdin.fileno(), termios.TCIFLUSH)
