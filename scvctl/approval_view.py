"""How a person sees an approval request: every line of it, paged when it is taller than the terminal.

Rule: what a person can approve with one key is shown whole first (issue 13). A
request's summary may be cut (its first line then says `[cut: ...]`); its
details carry the command, prompt, arguments or content whole, and they are
printed too. Every line is indented under the request's header and escaped, so
an agent's text cannot pass for another request or for the prompt.
"""

from __future__ import annotations

import os
import shutil
import sys
from typing import Any

from scvd.text import format_request  # noqa: F401 (scvctl's commands import it from here)

DEFAULT_PAGER = "less"
LESS_OPTIONS = "-X"  # leave the last page on the screen above the prompt


def first_lines(a: Any) -> str:
    """The header and the summary's first line: what the prompt is about, after a pager closed."""
    return "\n".join(format_request(a).split("\n")[:2])


def present(text: str) -> bool:
    """Print `text` whole; on a terminal, text taller than the screen goes through the pager instead (True)."""
    if sys.stdout.isatty() and sys.stdin.isatty():
        size = shutil.get_terminal_size()  # a pty that reports 0 x 0 counts as 80 x 24
        if _rows(text, size.columns) > size.lines - 2 and _page(fold(text, size.columns)):
            return True
    print(text, flush=True)
    return False


def _rows(text: str, width: int) -> int:
    """Terminal rows `text` takes, long lines wrapped: counted in cells, as `fold` cuts them (a CJK
    character takes two; counted as one, a tall request went unpaged and scrolled off)."""
    return fold(text, width).count("\n") + 1


def fold(text: str, width: int) -> str:
    """Every line cut into rows of at most `width` terminal cells: a pager that chops long
    lines (LESS=-S, most) would otherwise hide a line's tail past the screen's edge."""
    import unicodedata  # only for a tall request on a terminal

    width = max(width, 2)
    rows: list[str] = []
    for line in text.expandtabs().split("\n"):  # a tab takes up to 8 cells: counted as one, a line went unfolded
        if len(line) * 2 <= width:  # fits whatever its characters are
            rows.append(line)
            continue
        row, cells = "", 0
        for c in line:
            w = 2 if unicodedata.east_asian_width(c) in "WF" else 1
            if cells + w > width:
                rows.append(row)
                row, cells = "", 0
            row, cells = row + c, cells + w
        rows.append(row)
    return "\n".join(rows)


def _page(text: str) -> bool:
    """Show `text` in $PAGER (default less); False when there is no pager to run or it failed (it may
    have shown nothing), so the caller prints it."""
    import shlex  # only on a terminal, for a tall request: every scvctl command imports this module
    import subprocess

    argv = shlex.split(os.environ.get("PAGER") or DEFAULT_PAGER)
    if not argv or shutil.which(argv[0]) is None:
        return False
    env = dict(os.environ)
    env.setdefault("LESS", LESS_OPTIONS)
    sys.stdout.flush()
    try:
        pager = subprocess.Popen(argv, stdin=subprocess.PIPE, text=True, env=env)
    except OSError:
        return False
    try:
        pager.communicate(text + "\n")
    except KeyboardInterrupt:  # leave (exit 130), but only once the pager has put the terminal back
        _end(pager)
        raise
    if pager.returncode != 0:  # less quit with q exits 0; anything else may have shown nothing
        print(f"(the pager ({argv[0]}) exited with status {pager.returncode}; the request follows whole)",
              flush=True)
        return False
    return True


def _end(pager: Any) -> None:
    """Ask the pager to go (SIGTERM: less restores the terminal it set raw) and wait for it.

    Not SIGKILL, as subprocess.run does on Ctrl-C: a pager killed leaves the terminal without
    echo or line editing for the shell that follows. A further Ctrl-C does not cut the wait short.
    """
    pager.terminate()
    while True:
        try:
            pager.wait()
            break
        except KeyboardInterrupt:
            continue
    try:
        pager.stdin.close()  # what it did not read: nobody will
    except OSError:
        pass
