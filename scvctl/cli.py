"""The `scvctl` command: status, sessions, approvals, one-off calls, chat and exec, agents and the service.

Exit codes: 0 success; 1 scvd answered with an error, or the call failed (or, for `tools --errors`,
scvd's last reload did);
2 bad usage; 3 scvd is not running (or accepts but does not answer, or stopped before
it answered or the command was done: the message alone, it says to try again). Errors print as `kind: message`
(a tool error's kind, else the code: errors.shown).

The parser (parser.py) names each command's module; only that one is imported, as the command runs.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from scvd import errors
from scvd.stdio import closed_stdio_as_devnull

from .parser import build_parser  # importing no command's module: each is imported as it runs

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_NOT_RUNNING = 0, 1, 2, 3


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    args, _ = parser.parse_known_args(argv)
    if hasattr(args, "extra") and "--" in argv:  # an agent's own arguments: whole, a `--` among them too
        cut = argv.index("--")  # (argparse drops every `--` it sees there, and refuses all after an option)
        args = parser.parse_args(argv[:cut])
        args.extra = [*args.extra, *argv[cut + 1:]]
    else:
        args = parser.parse_args(argv)
    args.json = getattr(args, "json", False)
    socket = getattr(args, "socket", None)  # `~/` as SCV_SOCKET takes it: an MCP host's args reach us unexpanded
    args.socket = Path(os.path.expanduser(socket)) if socket else None
    if args.command != "mcp":  # its stdin and stdout are the MCP host's: it says when one is closed
        closed_stdio_as_devnull()
    if args.json and getattr(args, "no_json", None):  # silently ignored, a script would parse text
        print(f"usage: --json does not apply to {args.no_json}", file=sys.stderr)
        return EXIT_USAGE
    try:
        code = args.handler(args)
    except errors.DaemonNotRunning as exc:
        print(exc.message, file=sys.stderr)
        return EXIT_NOT_RUNNING
    except errors.ConnectionClosed as exc:  # past the welcome: scvd went or dropped us (a watch, a call waiting)
        from .client import cut_off  # imported already: a command that connected

        print(cut_off("the command was done", exc).message, file=sys.stderr)
        return EXIT_NOT_RUNNING
    except errors.UsageError as exc:
        print(f"usage: {exc.message}", file=sys.stderr)
        return EXIT_USAGE
    except errors.ScvError as exc:  # escaped: scvd's message may carry a peer's name or reason
        from scvd.text import printable

        print(printable(errors.shown(exc)), file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return reader_left(EXIT_OK)
    try:
        if sys.stdout is not None:  # (scvctl mcp's may be closed: it said so)
            sys.stdout.flush()  # what is still buffered: its EPIPE comes here, not at exit ("Exception ignored", 120)
    except BrokenPipeError:
        return reader_left(code)  # the command's own outcome: a failed call stays 1
    return code


def reader_left(code: int) -> int:
    """`scvctl ... | head`: the reader left; exit quietly like other Unix tools (stdout to /dev/null,
    so the interpreter's last flush has nowhere to fail)."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
