"""Which event loop the daemon runs on: uvloop when installed, else asyncio's own.

`server.event_loop = auto | uvloop | asyncio` chooses (auto is the default;
read at start only). Asking for uvloop by name where it is not installed is a
configuration error, not a silent fallback.
"""

from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING, Any

from . import errors

if TYPE_CHECKING:
    import asyncio

NO_UVLOOP = ("server.event_loop = \"uvloop\" but uvloop is not installed: pip install uvloop, "
             "or set server.event_loop = \"auto\" to fall back to asyncio")


def check(kind: str) -> None:
    """Raise ConfigError when `kind` names a loop this host cannot run (imports nothing: the start
    checks this before READY=1, and asyncio is imported after it)."""
    if kind == "uvloop" and _find_spec("uvloop") is None:
        raise errors.ConfigError(NO_UVLOOP)


def new_event_loop(kind: str = "auto") -> asyncio.AbstractEventLoop:
    """A new loop of `kind`: uvloop for auto when it is installed, asyncio's own otherwise."""
    import asyncio

    if kind != "asyncio":
        uvloop = _uvloop()
        if uvloop is not None:
            return uvloop.new_event_loop()
        if kind == "uvloop":
            raise errors.ConfigError(NO_UVLOOP)
    return asyncio.new_event_loop()


def name(loop: asyncio.AbstractEventLoop) -> str:
    """'uvloop' or 'asyncio': what a log line or a test says about `loop`."""
    return "uvloop" if type(loop).__module__.startswith("uvloop") else "asyncio"


def _find_spec(name: str) -> Any:
    try:
        return importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None


def _uvloop():  # type: ignore[no-untyped-def]
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop
