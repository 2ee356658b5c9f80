"""Which event loop the real daemon runs on: uvloop by default, asyncio on request, a typo a configuration error."""

from __future__ import annotations

import pytest


@pytest.mark.one_loop  # it starts its daemon on each loop itself
@pytest.mark.parametrize("asked, runs_on", [("auto", "uvloop"), ("uvloop", "uvloop"), ("asyncio", "asyncio")])
def test_the_daemon_runs_on_the_loop_asked_for(make_daemon, workspace, asked, runs_on):
    d = make_daemon(env={"SCVD_SERVER__EVENT_LOOP": asked, "SCVD_LOG_LEVEL": "debug"})
    (workspace / "a.txt").write_text("hi\n")
    with d.client() as c:
        done = c.call(c.open_session(workspace), "read", {"path": "a.txt"})
    assert done.ok and done.result["content"] == "hi\n"
    assert d.stop() == 0
    assert f"event loop: {runs_on}" in d.log()


@pytest.mark.one_loop
def test_a_mistyped_loop_is_a_configuration_error(make_daemon):
    d = make_daemon(env={"SCVD_SERVER__EVENT_LOOP": "tokio"}, wait=False)
    assert d.proc.wait(30) == 2
    assert "SCVD_SERVER__EVENT_LOOP" in d.log() and "server.event_loop" in d.log()
    assert not d.socket.exists()

