"""`scvctl mcp`: hands an MCP host's stdio to scvd, which serves MCP on it; then waits.

The host starts `scvctl mcp --workspace DIR`. This process connects to scvd,
sends `mcp.attach` and, on scvd's cue, passes its stdin and stdout over the
socket (SCM_RIGHTS). From then on scvd reads the host's requests and writes
its answers itself (scvd/mcp_host/), in one session on DIR: no process between
the host and scvd. This one puts /dev/null on its own stdin and stdout (so
nothing else writes there) and waits for scvd to close the connection: exit 0
when the host closed its stdin and everything was answered, 1 with a line on
stderr when scvd ended it otherwise. Diagnostics of the MCP server are in
scvd's log.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import socket
import sys
from pathlib import Path
from typing import Callable

from scvd import errors, protocol as p
from scvd.stdio import is_open

from . import usage
from .client import Client

HANDOFF_BYTE = b"\0"  # the one data byte that carries the fds


def cmd_mcp(args: argparse.Namespace) -> int:
    closed = [name for fd, name in ((0, "stdin"), (1, "stdout")) if not is_open(fd)]
    if closed:
        print(f"usage: scvctl mcp speaks MCP on its stdin and stdout, but its {' and '.join(closed)} "
              f"{'is' if len(closed) == 1 else 'are'} closed: let the MCP host start it (with pipes on both)",
              file=sys.stderr)
        return 2  # the usage exit, as cli.EXIT_USAGE
    if args.workspace == "":
        raise errors.UsageError(
            "scvctl mcp was given an empty --workspace (an unset variable in the MCP host's command?); "
            "give the folder the agent is to work in")
    workspace = usage.workspace(Path(args.workspace or "."))
    # a host's default (Claude Desktop's): not the person's choice; resolved, as $PWD may name / through a link
    if args.workspace is None and workspace.resolve() == Path("/"):
        raise errors.UsageError(
            "scvctl mcp was started in / without --workspace, which would let the agent read any file of this "
            "machine without asking; add --workspace DIR (the folder it is to work in) to the MCP host's command")
    # `.` or `..` meant the project, but the host started us in /: only a literal / chooses all of it
    if workspace.resolve() == Path("/") and not _names_root(args.workspace):
        raise errors.UsageError(
            f"scvctl mcp --workspace {args.workspace} resolves to / (some MCP hosts start their servers in /), which "
            "would let the agent read any file of this machine without asking; give the project's absolute path "
            "(--workspace /home/me/project) in the MCP host's command, or --workspace / if you mean all of it")
    # an approver, so the session's own approval requests reach the host (used only for hosts that elicit)
    # not for secrets: MCP forbids eliciting them, so store_secret asks the watchers or fails at once
    with Client.connect(args.socket, name="scvctl-mcp", approver=True, answers_secrets=False) as client:
        terminals = _terminals()
        try:
            attached = hand_over(client, workspace, args.max_tool_name)
            stop_writing_stdio()
            # scvd gone without mcp.detached (killed) could not put the flags back; alive (a detach,
            # or Ctrl-C here) it does that itself once it has let go of the fds
            return wait_detached(client, attached.session, on_lost=lambda: _put_back(terminals))
        except errors.ConnectionClosed as exc:  # before mcp.attached was read: scvd went just as it began
            _put_back(terminals)
            print(f"scvctl mcp: scvd closed the connection before it took over the MCP host's stdio "
                  f"({exc.message}); it stopped or failed: see `journalctl --user -u scvd`, then let the "
                  "host start scvctl mcp again", file=sys.stderr)
            return 1
        finally:
            for dup, _ in terminals:
                os.close(dup)


def _names_root(given: str) -> bool:
    """`--workspace` says / itself: absolute, without `..` (a link to / is a choice as well)."""
    path = Path(os.path.expanduser(given))
    return path.is_absolute() and ".." not in path.parts


def _terminals() -> list[tuple[int, int]]:
    """(a dup, its file status flags) of stdin and stdout where they are a terminal: scvd makes them
    non-blocking while it serves them and puts them back, unless it dies first; a shell shares them."""
    return [(os.dup(fd), fcntl.fcntl(fd, fcntl.F_GETFL)) for fd in (0, 1) if os.isatty(fd)]


def _put_back(terminals: list[tuple[int, int]]) -> None:
    for dup, flags in terminals:
        try:
            fcntl.fcntl(dup, fcntl.F_SETFL, flags)
        except OSError:
            pass


def hand_over(client: Client, workspace: Path, max_tool_name: int) -> p.McpAttached:
    """mcp.attach; on scvd's `ok` (it reads this connection no more), stdin and stdout as one fd message."""
    try:
        cue = client.request(p.McpAttach, workspace=str(workspace), max_tool_name=max_tool_name)
    except errors.UnknownType:
        raise errors.Failed("this scvd is older than scvctl and cannot serve MCP hosts; restart it "
                            "(systemctl --user restart scvd)") from None
    socket.send_fds(client.sock, [HANDOFF_BYTE], [0, 1])  # sys.stdin/stdout may be rebound; the fds are the host's
    return client.wait_answer(cue.id)


def stop_writing_stdio() -> None:
    """scvd holds the host's pipes now: nothing here may read or write them, and ours must not keep
    the host's stdout open once scvd closes it."""
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)


def wait_detached(client: Client, session: str, on_lost: Callable[[], None] = lambda: None) -> int:
    client.sock.settimeout(None)  # the host's session lasts as long as it likes
    try:
        while not isinstance(event := client.next_event(), p.McpDetached):
            pass
    except errors.ConnectionClosed:
        on_lost()
        print(f"scvctl mcp: scvd closed the connection while serving session {session} (it stopped or "
              "failed; see `journalctl --user -u scvd`); once it runs again, reconnect this server in the MCP host",
              file=sys.stderr)
        return 1
    if event.ok:
        return 0
    print(f"scvctl mcp: scvd stopped serving session {session}: {event.reason}", file=sys.stderr)
    return 1
