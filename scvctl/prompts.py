"""What scvctl asks a person at the terminal: a one-key answer, a masked secret; and the line
ends that input from a pipe (which nothing echoes) needs."""

from __future__ import annotations

import sys
from typing import Any

from scvd.text import printable


def read_secret(prompt: str) -> str | None:
    if sys.stdin.isatty():
        try:
            return masked_input(prompt)
        except EOFError:
            return None
    sys.stdout.write(prompt)
    sys.stdout.flush()
    line = sys.stdin.readline()
    end_prompt_line()
    return line.rstrip("\r\n") if line else None


def masked_input(prompt: str) -> str:
    """getpass on the terminal, whose echo stays off across Ctrl-Z and fg: the shell puts its own
    terminal modes back while the command is stopped, and the secret typed after fg showed as typed."""
    import getpass
    import signal
    import termios

    def mask_again(signum: int, frame: Any) -> None:
        try:
            modes = termios.tcgetattr(sys.stdin.fileno())
            modes[3] &= ~termios.ECHO  # lflag, as getpass clears it
            termios.tcsetattr(sys.stdin.fileno(), termios.TCSANOW, modes)
        except termios.error:
            pass

    previous = signal.signal(signal.SIGCONT, mask_again)
    try:
        return getpass.getpass(prompt)
    finally:
        signal.signal(signal.SIGCONT, previous)


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
    a second `y` meant for the one before would otherwise answer this one unread. (getpass drops it
    for secrets itself.)"""
    if sys.stdin.isatty():
        import termios

        termios.tcflush(sys.stdin.fileno(), termios.TCIFLUSH)
