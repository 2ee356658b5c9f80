"""session.open's preparation: the Session on its workspace, with what its tools prepare once (a
skill walk) done off the loop. No tool names here.

An open whose client hung up, or whose handler was cancelled (scvd stops), while it was prepared
ends without a session: what was prepared may have stopped halfway, and the workspace fd is closed.
The Daemon checks the budget before and registers the session after (`Daemon.on_session_open`).
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any, Callable

from . import errors
from .sessions import Session, new_session_id, open_workspace
from .workers import run_opening

if TYPE_CHECKING:
    from .connection import Connection
    from .paths import Paths
    from .server import Daemon

log = logging.getLogger("scvd.server")  # its lines keep the logger name they had in server.py


async def prepare(daemon: Daemon, conn: Connection, requested: str, opening: set[Session]) -> Session:
    """A prepared session on `requested` for `conn`, in `opening` while it is prepared; not yet registered."""
    workspace, fd = open_workspace(requested)
    session = Session(id=new_session_id(), workspace=workspace, workspace_fd=fd, owner=conn,
                      config=daemon.config, registry=daemon.registry, given=requested)
    hung_up, stopped = conn.hung_up(), threading.Event()  # stopped: this handler was cancelled (scvd stops)

    def gone() -> bool:
        return stopped.is_set() or hung_up()

    # counted from its fd on, so opens waiting below cannot overrun the budget; its registry's tool
    # folders stay scvd's own if a reload comes meanwhile (Daemon._follow_tools)
    opening.add(session)
    base = dict(daemon.services)  # taken now: a reload during the wait for a thread must not change it
    try:
        services = await run_opening(lambda: session_services(session, base, daemon.paths, gone))
        if gone():  # what it prepared may have stopped halfway: no session is made of it
            raise errors.Cancelled("session.open was cancelled: its client hung up while the session was "
                                   "being prepared; open it again")
        session.services.update(services)
    except BaseException:
        try:
            if gone():  # said here, whatever step the open ended at, so nobody wonders where it went
                log.info("session.open on %s by %s ended without a session: the client hung up, or scvd "
                         "is stopping", workspace, conn.label())
        finally:
            stopped.set()
            session.close()
        raise
    finally:
        opening.discard(session)
    return session


def session_services(session: Session, base: dict[str, Any], paths: Paths,
                     gone: Callable[[], bool]) -> dict[str, Any]:
    """What the session's tools prepare once (a tree walk for skills), added to `base` (the daemon's
    services as the open began): from its own snapshot, which a reload during the walk does not
    change; each stops early once `gone()`. Blocking."""
    services = base
    for tool in session.registry.visible(include_system=True):
        services.update(tool.session_services(session.workspace, session.config, paths, gone))
    return services
