"""What a tool that runs a process reports: one result shape, one deadline error (bash and agents alike).

Seed 000: an agent's "output, timeout, cancellation, and process-group behavior
match bash", so both build their answers here; and a run's output with the
secrets it was given taken out (script tools and agents alike, and an MCP
server's result text, capped as output is).
"""

from __future__ import annotations

import errno
import itertools
import os
from pathlib import Path
from typing import Any, Iterable, Mapping

from .. import passenv
from ..errors import Failed, Timeout
from ..process import CUT_MARKER, RunResult
from ..redact import LOG_MIN, forms, hide_in_logs, redact



def hidden_values(pass_env: Iterable[str], secrets: Mapping[str, str] | None = None) -> dict[str, str]:
    """What a run's output, its timeout's message and scvd's log must not show, by label: the tool's
    `secrets`, and the `pass_env` values that read like a credential (a passed GH_TOKEN is as much one)."""
    hidden = {**passenv.credentials(os.environ, pass_env), **(secrets or {})}
    hide_in_logs(hidden)
    return hidden


def result_dict(r: RunResult) -> dict[str, Any]:
    """A finished run as a call result: exit status or signal, bounded output, truncation."""
    return {
        "exit_code": r.exit_code, "signal": r.signal, "output": r.output, "truncated": r.truncated,
        "bytes_seen": r.bytes_seen, "bytes_kept": r.bytes_kept, "timed_out": r.timed_out,
        "duration_s": r.duration_s,
    }


def timeout_error(tool: str, r: RunResult, timeout: float, ceiling: float, *, asked: float | None = None,
                  frame: float | None = None, hint: str | None = None) -> Timeout:
    """The deadline passed: say what happened and how to allow more time; carry the output as a result
    would (head and tail within tools.output_limit_bytes): a hung test run's first failures, an agent's
    report so far (only the last 4 KiB came, which often held neither). `asked`: the tool's timeout_seconds
    argument; `frame`: the call frame's timeout_seconds, which cuts a larger argument (own_deadline)."""
    message = (f"{tool}: the command ran past its timeout of {timeout:g} s and its process group was killed "
               f"(SIGKILL); {output_so_far(r)}")
    return Timeout(message, hint=hint or more_time(timeout, ceiling, asked, frame))


def more_time(timeout: float, ceiling: float, asked: float | None, frame: float | None) -> str:
    """How to allow a run more time, naming the limit that cut it: the argument and the call frame are both
    `timeout_seconds`, and a larger argument changes nothing while the frame's is the smaller."""
    if timeout >= ceiling:
        return f"run less per call: {ceiling:g} s is the ceiling (tools.max_timeout_seconds in config.toml)"
    if frame is None or asked is None or frame > asked:
        return f"pass a larger timeout_seconds (at most {ceiling:g}) or run less per call"
    if frame < asked:
        return (f"the call's own timeout_seconds ({frame:g} s, in the call frame) cut the run before the "
                f"argument's {asked:g} s: send the call with a larger timeout_seconds (at most {ceiling:g}) or "
                "none, or run less per call")
    return (f"the call frame's timeout_seconds and the argument are both {frame:g} s: raise both (at most "
            f"{ceiling:g}), or run less per call")


def workspace_error(tool: str, exc: OSError, workspace: Path) -> Failed | None:
    """What to tell of a process that did not start because its cwd, the workspace, could not be
    entered; None when `exc` is about something else (the program, bwrap)."""
    if exc.filename is None or os.fspath(exc.filename) != str(workspace):
        return None
    if exc.errno in (errno.EACCES, errno.EPERM):  # there, but `chmod 000` (a command may do it to its own)
        return Failed(f"{tool}: cannot enter the workspace {workspace} ({exc.strerror}): give it back its "
                      f"permissions (chmod u+rwx {workspace})")
    return Failed(f"{tool}: the workspace {workspace} is gone ({exc.strerror or exc}): open a session on a "
                  "directory that exists")


def output_so_far(r: RunResult, output: str | None = None) -> str:
    """A killed run's output, for its error message: how much came, and what was kept of it
    (`output`: that text as shown, its secrets taken out)."""
    if not r.bytes_seen:  # else "0 bytes of output, they follow:" and then nothing
        return "no output"
    kept = f"the first and last of them follow ({r.bytes_kept} kept)" if r.truncated else "they follow"
    return f"{r.bytes_seen} bytes of output, {kept}:\n{r.output if output is None else output}"


def redact_text(text: str, secrets: dict[str, str]) -> str:
    """`redact`, and where the output cap cut `text` (its marker line), a value's start before the cut
    or its end after it. A program printing a marker of its own only costs it a few characters there."""
    if not secrets:
        return text
    text = redact(text, secrets)
    return _redact_cuts(text, forms(secrets)) if CUT_MARKER.search(text) else text


def _redact_cuts(text: str, forms: dict[str, str]) -> str:
    pieces = CUT_MARKER.split(text)
    marks = CUT_MARKER.findall(text)
    for i in range(len(marks)):  # around each marker: what precedes it, what follows it
        before, after = pieces[i], pieces[i + 1]
        for form, standin in forms.items():
            k = _cut_part(form, lambda n, f=form: before.endswith(f[:n]))
            if k:
                before = before[:-k] + standin
            k = _cut_part(form, lambda n, f=form: after.startswith(f[-n:]))
            if k:
                after = standin + after[k:]
        pieces[i], pieces[i + 1] = before, after
    return "".join(p + m for p, m in itertools.zip_longest(pieces, marks, fillvalue=""))


def _cut_part(form: str, present: Any) -> int:
    """The longest proper part of `form` that `present(n)` finds, if long enough to matter: at least
    LOG_MIN characters or half the value (a 1-character match would blot out ordinary text)."""
    for n in range(len(form) - 1, 0, -1):
        if n < LOG_MIN and 2 * n < len(form):
            return 0
        if present(n):
            return n
    return 0
