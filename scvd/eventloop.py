"""Which event loop the daemon runs on: uvloop when installed, else asyncio's own.

`server.event_loop = auto | uvloop | asyncio` chooses (auto is the default;
read at start only). Asking for uvloop by name where it is not installed is a
configuration error, not a silent fallback.
"""

from __future__ import annotations

import asyncio
from typing import Any, Coroutine, TypeVar

from . import errors

T = TypeVar("T")


def check(kind: str) -> None:
    """Raise ConfigError when `kind` names a loop this host cannot run."""
    if kind == "uvloop" and _uvloop() is None:
        raise errors.ConfigError(
            "server.event_loop = \"uvloop\" but uvloop is not installed: pip install uvloop, "
            "or set server.event_loop = \"auto\" to fall back to asyncio")


def new_event_loop(kind: str = "auto") -> asyncio.AbstractEventLoop:
    """A new loop of `kind`: uvloop for auto when it is installed, asyncio's own otherwise."""
    if kind != "asyncio":
        check(kind)
        uvloop = _uvloop()
        if uvloop is not None:
            return uvloop.new_event_loop()
    return asyncio.new_event_loop()


def run(main: Coroutine[Any, Any, T], kind: str = "auto") -> T:
    """asyncio.run() on a loop of `kind`: what short-lived clients (scvctl mcp) use."""
    with asyncio.Runner(loop_factory=lambda: new_event_loop(kind)) as runner:
        return runner.run(main)


def name(loop: asyncio.AbstractEventLoop) -> str:
    """'uvloop' or 'asyncio': what a log line or a test says about `loop`."""
    return "uvloop" if type(loop).__module__.startswith("uvloop") else "asyncio"


def _uvloop():  # type: ignore[no-untyped-def]
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop
