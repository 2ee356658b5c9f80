"""What a tool that runs a process reports: one result shape, one deadline error (bash and agents alike).

Seed 000: an agent's "output, timeout, cancellation, and process-group behavior
match bash", so both build their answers here.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

from ..errors import Failed, Timeout
from ..process import RunResult

def result_dict(r: RunResult) -> dict[str, Any]:
    """A finished run as a call result: exit status or signal, bounded output, truncation."""
    return {
        "exit_code": r.exit_code, "signal": r.signal, "output": r.output, "truncated": r.truncated,
        "bytes_seen": r.bytes_seen, "bytes_kept": r.bytes_kept, "timed_out": r.timed_out,
        "duration_s": r.duration_s,
    }


def timeout_error(tool: str, r: RunResult, timeout: float, ceiling: float, *, hint: str | None = None) -> Timeout:
    """The deadline passed: say what happened and how to allow more time; carry the output as a result
    would (head and tail within tools.output_limit_bytes): a hung test run's first failures, an agent's
    report so far (only the last 4 KiB came, which often held neither)."""
    message = (f"{tool}: the command ran past its timeout of {timeout:g} s and its process group was killed "
               f"(SIGKILL); {output_so_far(r)}")
    more_time = (f"pass a larger timeout_seconds (at most {ceiling:g}) or run less per call" if timeout < ceiling
                 else f"run less per call: {ceiling:g} s is the ceiling (tools.max_timeout_seconds in config.toml)")
    return Timeout(message, hint=hint or more_time)


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
