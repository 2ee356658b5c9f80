"""session.open / session.close over the socket: what a client is told, and what a disconnect does."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

import msgspec
import pytest

from scvd import errors, protocol as p

from conftest import wait_pending
from harness import make_wrapped  # noqa: F401 (a fixture)


@pytest.mark.one_loop
def test_open_needs_an_absolute_existing_directory(client, workspace: Path, tmp_path: Path):
    (tmp_path / "file.txt").write_text("x")
    cases = {
        "": "needs `workspace`",
        "relative/dir": "is relative; send an absolute path",
        str(tmp_path / "missing"): "does not exist",
        str(tmp_path / "file.txt"): "is not a directory",
    }
    for path, message in cases.items():
        with pytest.raises(errors.InvalidRequest) as info:
            client.request(p.SessionOpen, workspace=path)
        assert message in info.value.message, (path, info.value.message)
    assert client.status().sessions == 0  # the connection still works, nothing opened


@pytest.mark.one_loop
def test_unopenable_workspaces_are_the_peers_fault_not_internal(daemon, client, tmp_path: Path):
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    for path in (str(tmp_path / "a\x00b"), str(tmp_path / "loop"), "/" + "x" * 5000):
        with pytest.raises(errors.InvalidRequest):
            client.request(p.SessionOpen, workspace=path)
    assert client.status().sessions == 0
    assert "Traceback" not in daemon.log()


@pytest.mark.one_loop
def test_a_relative_workspace_is_told_what_to_do_whatever_scvd_s_own_directory(make_daemon, tmp_path: Path):
    """It suggested a path built from scvd's own directory (not the client's), and once that directory
    was removed the same frame was an internal error with a traceback in the log."""
    gone = tmp_path / "gone"
    gone.mkdir()
    d = make_daemon(cwd=gone)
    gone.rmdir()
    with d.client() as c, pytest.raises(errors.InvalidRequest) as info:
        c.request(p.SessionOpen, workspace="ws")
    assert info.value.message == ("workspace 'ws' is relative; send an absolute path (resolve it against the "
                                  "client's own current directory before sending)")
    assert "Traceback" not in d.log()


@pytest.mark.one_loop
def test_the_client_library_takes_a_relative_workspace_from_its_own_directory(
        make_daemon, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """open_session("project") was sent as given and refused (scvd wants an absolute path): it means
    ./project of the caller, as open() would take it, whatever scvd's own directory, for both clients."""
    from scvctl.client import AsyncClient

    here, elsewhere = tmp_path / "here", tmp_path / "elsewhere"
    for folder in (here / "project", elsewhere / "project", elsewhere / "deep"):
        folder.mkdir(parents=True)
        (folder / "where.txt").write_text(str(folder))
    (here / "link").symlink_to(elsewhere / "deep")
    d = make_daemon(cwd=elsewhere)
    monkeypatch.chdir(here)

    def where(c: Any, session: str) -> str:
        done = c.call(session, "read", {"path": "where.txt"})
        assert done.ok, done.error
        return done.result["content"]

    async def where_async(workspace: str) -> str:
        c = await AsyncClient.connect(d.socket)
        try:
            done = await c.call(await c.open_session(workspace), "read", {"path": "where.txt"})
            assert done.ok, done.error
            return done.result["content"]
        finally:
            await c.close()

    with d.client() as c:
        assert where(c, c.open_session("project")) == str(here / "project")
        assert where(c, c.open_session(Path("project"))) == str(here / "project")
        # `..` after a link is the link's parent, as the kernel walks it, not the folder that holds the link
        assert where(c, c.open_session("link/../project")) == str(elsewhere / "project")
        assert asyncio.run(where_async("project")) == str(here / "project")
        # `~` is the home, as scvctl's --workspace takes it: it was ./~/project ("does not exist")
        monkeypatch.setenv("HOME", str(elsewhere))
        assert where(c, c.open_session("~/project")) == str(elsewhere / "project")
        gone = here / "gone"
        gone.mkdir()
        monkeypatch.chdir(gone)
        gone.rmdir()
        with pytest.raises(errors.InvalidRequest) as info:
            c.open_session("project")
        assert info.value.message == ("workspace 'project' is relative, and this process's current directory no "
                                      "longer exists: pass an absolute path")


@pytest.mark.one_loop
def test_a_workspace_scvd_may_not_open_is_refused_saying_so(make_daemon, tmp_path: Path):
    """Another user's directory, or one made 0000: it said "is not readable by scvd", not what to do."""
    # root passes over file permissions: as uid 0 without those capabilities (CI has setpriv)
    drop = ["setpriv", "--bounding-set=-dac_override,-dac_read_search", "--inh-caps=-all"] \
        if os.geteuid() == 0 else []
    d = make_daemon(prefix=drop)
    closed = tmp_path / "closed"
    closed.mkdir(mode=0)
    with d.client() as c, pytest.raises(errors.InvalidRequest) as info:
        c.request(p.SessionOpen, workspace=str(closed))
    assert info.value.message == (f"workspace '{closed}' is not readable by scvd (Permission denied): give the "
                                  "user scvd runs as read and search permission on it and the folders above it, "
                                  "or choose another directory")


@pytest.mark.one_loop
def test_a_symlinked_workspace_is_held_by_its_real_path(client, workspace: Path, tmp_path: Path):
    link = tmp_path / "link"
    link.symlink_to(workspace)
    opened = client.request(p.SessionOpen, workspace=str(link))
    assert opened.workspace == str(workspace)


@pytest.mark.one_loop
def test_an_unsandboxed_call_whose_workspace_a_link_replaced_meanwhile_is_refused(
        make_daemon, workspace: Path, tmp_path: Path):
    """The workspace is checked when the call comes; the command started in whatever its path named by
    then: a link put there meanwhile (here while the call waits for approval) ran it in the link's target."""
    target = tmp_path / "target"
    target.mkdir()
    d = make_daemon()
    with d.client() as c, d.client(name="owner") as owner:
        call_id = c.start_call(c.open_session(workspace), "bash", {"command": "touch here"})
        pending = wait_pending(owner)[0]
        moved = workspace.with_name("ws.old")
        workspace.rename(moved)
        workspace.symlink_to(target)
        owner.request(p.ApprovalDecide, approval_id=pending.approval_id, decision="approve")
        done = c.wait_call(call_id)
    assert not done.ok and done.error.message.startswith(f"the workspace {workspace} was replaced"), done
    assert not (target / "here").exists() and not (moved / "here").exists()


@pytest.mark.one_loop
def test_one_connection_may_hold_many_sessions(client, workspace: Path, tmp_path: Path):
    other = tmp_path / "other"
    other.mkdir()
    a = client.open_session(workspace)
    b = client.open_session(other)
    assert a != b
    listed = {s.session: s.workspace for s in client.request(p.SessionsList).sessions}
    assert listed == {a: str(workspace), b: str(other)}
    client.request(p.SessionClose, session=a)
    assert [s.session for s in client.request(p.SessionsList).sessions] == [b]


@pytest.mark.one_loop
def test_sessions_belong_to_their_connection(daemon, client, workspace: Path):
    sid = client.open_session(workspace)
    with daemon.client(name="intruder") as other:
        with pytest.raises(errors.SessionNotFound, match="open one with session.open"):
            other.request(p.Call, session=sid, tool="read", arguments={"path": "x"})
        with pytest.raises(errors.SessionNotFound):
            other.request(p.SessionClose, session=sid)
    assert client.status().sessions == 1


@pytest.mark.one_loop
def test_closing_twice_is_session_not_found(client, workspace: Path):
    sid = client.open_session(workspace)
    client.request(p.SessionClose, session=sid)
    with pytest.raises(errors.SessionNotFound):
        client.request(p.SessionClose, session=sid)


def test_disconnect_closes_the_connections_sessions_and_their_fds(daemon, workspace: Path):
    def fd_count() -> int:
        return len(os.listdir(f"/proc/{daemon.proc.pid}/fd"))

    with daemon.client() as watcher:
        before = fd_count()
        with daemon.client() as c:
            for _ in range(5):
                c.open_session(workspace)
            assert watcher.status().sessions == 5
        deadline = time.monotonic() + 5
        while watcher.status().sessions and time.monotonic() < deadline:
            time.sleep(0.02)
        assert watcher.status().sessions == 0
        assert fd_count() <= before, "workspace fds were not released"


@pytest.mark.one_loop
def test_status_counts_sessions(client, workspace: Path):
    assert client.status().sessions == 0
    client.open_session(workspace)
    assert client.status().sessions == 1


def test_a_client_that_pauses_above_the_bound_then_reads_gets_every_answer(make_inproc, monkeypatch, workspace):
    """A client that queues many large reads and reads their answers a little later: it was cut off
    (no answer, no reason) as soon as more than the bound waited for it."""
    from harness import RawConn
    from scvd import connection

    monkeypatch.setattr(connection, "WRITE_BUFFER_LIMIT", 256 * 1024)
    d = make_inproc()
    (workspace / "big.txt").write_text("x" * 60_000)
    with RawConn(d.socket) as c:
        c.hello()
        sid = c.request({"type": "session.open", "workspace": str(workspace)}).session
        c.send_raw(b"".join(msgspec.json.encode({"type": "call", "id": i, "session": sid, "tool": "read",
                                                 "arguments": {"path": "big.txt"}}) + b"\n" for i in range(40)))
        time.sleep(1.0)  # some 2.4 MB of answers wait meanwhile, reading nothing
        done = []
        while len(done) < 40:
            frame = c.frame()
            if isinstance(frame, p.CallCompleted):
                done.append(frame)
    assert [(f.ok, len(f.result["content"])) for f in done] == [(True, 60_000)] * 40


def test_a_client_that_stops_reading_is_cut_off_and_its_sessions_closed(make_wrapped, workspace: Path):
    """Past the write-buffer bound, a connection that reads nothing for STALL_SECONDS (1 s here
    instead of 10) goes: its sessions close, its buffer is freed."""
    import socket

    import msgspec

    daemon = make_wrapped(env={"HARNESS_STALL_SECONDS": "1"})
    (workspace / "big.txt").write_text("a" * (1 << 20))

    def frame(**fields: object) -> bytes:
        return msgspec.json.encode(fields) + b"\n"

    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as slow, daemon.client() as c:
        slow.connect(str(daemon.socket))
        slow.sendall(frame(type="hello", id=1, protocol=1, client={"name": "slow"}))
        slow.sendall(frame(type="session.open", id=2, workspace=str(workspace)))
        deadline = time.monotonic() + 5
        while not c.request(p.SessionsList).sessions and time.monotonic() < deadline:
            time.sleep(0.02)
        sid = c.request(p.SessionsList).sessions[0].session
        # 100 results of 1 MiB that this client never reads: more than the 64 MiB bound
        slow.sendall(b"".join(frame(type="call", id=10 + i, session=sid, tool="read",
                                    arguments={"path": "big.txt", "limit": 1 << 20}) for i in range(100)))
        # 100 MiB of reads: under a loaded CI machine this took over 20 s; pytest-timeout still bounds it
        deadline = time.monotonic() + 60
        while "stopped reading" not in daemon.log() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert "stopped reading" in daemon.log()
        deadline = time.monotonic() + 5
        while c.status().sessions and time.monotonic() < deadline:
            time.sleep(0.02)
        assert c.status().sessions == 0, "the cut-off connection still holds its session"
    assert "Traceback" not in daemon.log()
