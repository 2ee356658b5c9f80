"""Sensitive targets over the socket of a real `scvd run`: a session grant never covers them."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from scvd import protocol as p
from scvctl.client import Client

pytestmark = pytest.mark.one_loop

SENSITIVE = [
    (".git/hooks/post-checkout", "'.git/hooks/post-checkout' matches approvals.always_ask '.git/**'"),
    (".envrc", "'.envrc' matches approvals.always_ask '.envrc'"),
    (".github/workflows/ci.yml", "'.github/workflows/ci.yml' matches approvals.always_ask '.github/workflows/**'"),
    (".env", "'.env' is secret-like ('.env' is a dotenv file)"),
    # which submodules the git guard keeps read-only: emptied under a grant, an unasked bash
    # could plant a repository in a submodule directory that `git status` runs git in
    (".gitmodules", "'.gitmodules' matches approvals.always_ask '.gitmodules'"),
    ("hooks/pre-commit", "'.git/hooks/pre-commit' matches approvals.always_ask '.git/**'"),  # hooks -> .git/hooks
]


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / ".git" / "hooks").mkdir(parents=True)
    (root / ".github" / "workflows").mkdir(parents=True)
    os.symlink(".git/hooks", root / "hooks")
    return root


@pytest.fixture
def owner(daemon) -> Client:
    with daemon.client(name="pytest-owner", approver=True) as c:
        yield c


def write(c: Client, sid: str, path: str, content: str = "echo planted\n") -> str:
    return c.start_call(sid, "write", {"path": path, "content": content, "mode": "create"})


def next_of(c: Client, call_id: str) -> p.ApprovalRequested | p.CallCompleted:
    """The call's approval request, or its completion when it ran unasked."""
    while True:
        event = c.next_event()
        if isinstance(event, (p.ApprovalRequested, p.CallCompleted)) and event.call_id == call_id:
            return event


def resolved(c: Client, approval_id: str) -> p.ApprovalResolved:
    while True:
        event = c.next_event()
        if isinstance(event, p.ApprovalResolved) and event.approval_id == approval_id:
            return event


def grant_writes(c: Client, sid: str) -> None:
    """Approve one harmless write for the rest of the session."""
    call_id = write(c, sid, "notes.txt", "hello\n")
    asked = next_of(c, call_id)
    assert isinstance(asked, p.ApprovalRequested) and asked.always_ask is None
    c.request(p.ApprovalDecide, approval_id=asked.approval_id, decision="approve", scope="session")
    assert resolved(c, asked.approval_id).scope == "session"
    assert c.wait_call(call_id).ok


def denied_asking(c: Client, sid: str, path: str, mode: str) -> str | None:
    """Write an MCP server into `path`, which must ask though writes are granted; deny it. Its always_ask."""
    call_id = c.start_call(sid, "write", {"path": path, "content": "[mcp.servers.pwn]\n", "mode": mode})
    asked = next_of(c, call_id)
    assert isinstance(asked, p.ApprovalRequested), f"{path} ran unasked under a session grant"
    c.request(p.ApprovalDecide, approval_id=asked.approval_id, decision="deny")
    assert c.wait_call(call_id).error.kind == "denied"
    return asked.always_ask


def test_a_session_grant_for_write_does_not_cover_sensitive_targets(owner: Client, ws: Path) -> None:
    sid = owner.open_session(ws)
    grant_writes(owner, sid)
    done = next_of(owner, write(owner, sid, "other.txt"))  # the grant works for harmless writes
    assert isinstance(done, p.CallCompleted) and done.ok and (ws / "other.txt").exists()

    for path, why in SENSITIVE:
        call_id = write(owner, sid, path)
        asked = next_of(owner, call_id)
        assert isinstance(asked, p.ApprovalRequested), f"{path} ran unasked under a session grant"
        assert asked.always_ask == why
        assert not (ws / path).exists(), f"{path} was written before anyone approved it"
        # approving it "for the session" approves this call only
        owner.request(p.ApprovalDecide, approval_id=asked.approval_id, decision="approve", scope="session")
        assert resolved(owner, asked.approval_id).scope == "once"
        assert owner.wait_call(call_id).ok
        assert (ws / path).read_text() == "echo planted\n"

    # so the next sensitive write asks again, and a denial writes nothing
    call_id = write(owner, sid, ".git/hooks/pre-push")
    asked = next_of(owner, call_id)
    assert isinstance(asked, p.ApprovalRequested) and "'.git/**'" in asked.always_ask
    owner.request(p.ApprovalDecide, approval_id=asked.approval_id, decision="deny", reason="no hooks")
    done = owner.wait_call(call_id)
    assert done.error.kind == "denied" and not (ws / ".git" / "hooks" / "pre-push").exists()
    # and the grant still covers harmless writes
    done = next_of(owner, write(owner, sid, "more.txt"))
    assert isinstance(done, p.CallCompleted) and done.ok


def test_a_watcher_sees_why_and_the_audit_log_records_the_ask(daemon, owner: Client, ws: Path) -> None:
    sid = owner.open_session(ws)
    grant_writes(owner, sid)
    with daemon.client(name="watcher") as w:
        w.request(p.ApprovalsWatch)
        call_id = write(owner, sid, ".vscode-not-yet")  # harmless: runs on the grant
        assert owner.wait_call(call_id).ok
        (ws / ".vscode").mkdir()
        call_id = write(owner, sid, ".vscode/tasks.json", '{"tasks": []}\n')
        asked = next_of(w, call_id)
        assert asked.always_ask == "'.vscode/tasks.json' matches approvals.always_ask '.vscode/**'"
        listed = w.request(p.ApprovalsList).approvals
        assert [a.always_ask for a in listed] == [asked.always_ask]
        w.request(p.ApprovalDecide, approval_id=asked.approval_id, decision="deny")
        assert owner.wait_call(call_id).error.kind == "denied"
    records = [json.loads(line) for line in (daemon.home / "state" / "audit.log").read_text().splitlines()]
    proposal = [r for r in records if r["event"] == "proposal" and r["call_id"] == call_id]
    assert [r["decision"] for r in proposal] == ["ask"]


def test_the_list_is_configurable(make_daemon, tmp_path: Path, ws: Path) -> None:
    daemon = make_daemon('[approvals]\nalways_ask = ["/Makefile"]\n')
    with daemon.client(name="pytest-owner", approver=True) as owner:
        sid = owner.open_session(ws)
        grant_writes(owner, sid)
        asked = next_of(owner, write(owner, sid, "Makefile"))
        assert asked.always_ask == "'Makefile' matches approvals.always_ask '/Makefile'"
        owner.request(p.ApprovalDecide, approval_id=asked.approval_id, decision="deny")
        # `.envrc` is off this list but secret-like, so it still asks; `.github/workflows` is off it
        asked = next_of(owner, write(owner, sid, ".envrc"))
        assert "is secret-like" in asked.always_ask
        owner.request(p.ApprovalDecide, approval_id=asked.approval_id, decision="deny")
        done = next_of(owner, write(owner, sid, ".github/workflows/ci.yml"))
        assert isinstance(done, p.CallCompleted) and done.ok


def test_a_grant_for_write_does_not_cover_scvds_own_folders_in_the_workspace(make_daemon, ws: Path) -> None:
    # SCV_HOME inside the workspace (a session on ~ holds ~/.config/scv the same way): its config.toml
    # starts MCP servers unsandboxed, so a write there must be a person's decision every time
    home = ws / ".scv"
    daemon = make_daemon(home=home)
    config = home / "config.toml"
    if not config.exists():
        config.write_text("")
    (home / "tools" / "script" / "x").mkdir(parents=True)
    before = config.read_bytes()
    with daemon.client(name="pytest-owner", approver=True) as owner:
        sid = owner.open_session(ws)
        grant_writes(owner, sid)
        for path, mode in ((".scv/config.toml", "replace"), (".scv/tools/script/x/tool.json", "create")):
            assert denied_asking(owner, sid, path, mode) == (f"{path!r} is inside scvd's own folder "
                                                             f"{home.resolve()} (its configuration, tools or state)")
    assert config.read_bytes() == before
    assert not (home / "tools" / "script" / "x" / "tool.json").exists()


def test_a_grant_for_write_does_not_cover_the_config_file_given_by_dash_dash_config(make_daemon, tmp_path: Path,
                                                                                    ws: Path) -> None:
    # `scvd --config ws/scvd.toml`: outside scvd's own folders, so a granted write added an MCP
    # server to the file the daemon reads, which starts it unsandboxed at the next reload
    config = ws / "scvd.toml"
    config.write_text("log_level = 'info'\n")
    os.symlink("scvd.toml", ws / "cfg")
    daemon = make_daemon(home=tmp_path / "scvhome", args=["--config", str(config)])
    with daemon.client(name="pytest-owner", approver=True) as owner:
        sid = owner.open_session(ws)
        grant_writes(owner, sid)
        for path in ("scvd.toml", "cfg"):  # a link is judged by where it leads: its target is named
            assert denied_asking(owner, sid, path, "replace") == (
                f"'scvd.toml' is the configuration file scvd reads, {config.resolve()} (it starts MCP servers unsandboxed)")
    assert config.read_text() == "log_level = 'info'\n"


def test_a_grant_for_write_does_not_cover_a_git_directory_not_named_dot_git(owner: Client, tmp_path: Path) -> None:
    # `git init --separate-git-dir=.gd`: its config and hooks run at the next git command, and no
    # glob names them; a write there ran unasked under a session grant
    root = tmp_path / "separate"
    root.mkdir()
    subprocess.run(["git", "init", "-q", "--separate-git-dir", str(root / ".gd"), str(root)], check=True)
    sid = owner.open_session(root)
    grant_writes(owner, sid)
    call_id = write(owner, sid, ".gd/hooks/pre-commit")
    asked = next_of(owner, call_id)
    assert isinstance(asked, p.ApprovalRequested), ".gd/hooks/pre-commit ran unasked under a session grant"
    assert asked.always_ask == ("'.gd/hooks/pre-commit' is inside '.gd', a git directory: its config and hooks "
                                "run at the next git command")
    owner.request(p.ApprovalDecide, approval_id=asked.approval_id, decision="deny")
    assert owner.wait_call(call_id).error.kind == "denied"
    assert not (root / ".gd" / "hooks" / "pre-commit").exists()
    done = next_of(owner, write(owner, sid, "gd-notes.txt"))  # the grant still covers harmless writes
    assert isinstance(done, p.CallCompleted) and done.ok


def test_a_grant_for_write_does_not_cover_a_bare_repository_opened_as_the_workspace(owner: Client, tmp_path: Path) -> None:
    # the workspace is itself the git directory: `config` and `hooks/` at its root run at the next git command
    root = tmp_path / "project.git"
    root.mkdir()
    sid = owner.open_session(root)
    grant_writes(owner, sid)  # granted before it became a repository: every write there asks now
    subprocess.run(["git", "init", "-q", "--bare", str(root)], check=True)
    call_id = write(owner, sid, "hooks/post-update")
    asked = next_of(owner, call_id)
    assert isinstance(asked, p.ApprovalRequested), "hooks/post-update ran unasked under a session grant"
    assert asked.always_ask == ("'hooks/post-update' is inside the workspace, itself a git directory: its config "
                                "and hooks run at the next git command")
    owner.request(p.ApprovalDecide, approval_id=asked.approval_id, decision="deny")
    assert owner.wait_call(call_id).error.kind == "denied"
    assert not (root / "hooks" / "post-update").exists()


@pytest.mark.parametrize("inside", [".git/hooks", "project.git/hooks"])
def test_a_workspace_inside_a_git_directory_asks_for_every_write_and_grants_nothing(owner: Client, tmp_path: Path,
                                                                                     inside: str) -> None:
    # the workspace lies in a repository's `.git` or in a bare repository: a hook written there runs at
    # the next git command, and its workspace-relative path (`post-checkout`) names no git directory;
    # a session grant for write let the next hook be planted unasked
    repo = tmp_path / "repo"
    if inside.startswith(".git"):
        subprocess.run(["git", "init", "-q", str(repo)], check=True)
    else:
        subprocess.run(["git", "init", "-q", "--bare", str(repo / "project.git")], check=True)
    root = repo / inside
    why = (f"is inside the workspace, which lies in the git directory {str(root.parent.resolve())!r}: "
           "its config and hooks run at the next git command")
    sid = owner.open_session(root)
    call_id = write(owner, sid, "pre-commit")
    asked = next_of(owner, call_id)
    assert isinstance(asked, p.ApprovalRequested) and asked.always_ask == f"'pre-commit' {why}"
    owner.request(p.ApprovalDecide, approval_id=asked.approval_id, decision="approve", scope="session")
    assert resolved(owner, asked.approval_id).scope == "once"  # recorded as once: no grant
    assert owner.wait_call(call_id).ok

    call_id = write(owner, sid, "post-checkout")
    asked = next_of(owner, call_id)
    assert isinstance(asked, p.ApprovalRequested), "post-checkout ran unasked under a session grant"
    assert asked.always_ask == f"'post-checkout' {why}"
    owner.request(p.ApprovalDecide, approval_id=asked.approval_id, decision="deny")
    assert owner.wait_call(call_id).error.kind == "denied"
    assert not (root / "post-checkout").exists()


def test_a_grant_for_write_in_the_home_does_not_cover_its_dotfiles(make_daemon, tmp_path: Path) -> None:
    # a session on the home (`scvctl mcp` started there), sandbox off: after one harmless write was
    # granted for the session, `.bashrc`, `.gitconfig` (core.fsmonitor) and `.local/bin/git` were
    # written unasked, and ran at the next shell or git command outside any sandbox
    home = tmp_path / "userhome"
    (home / ".local" / "bin").mkdir(parents=True)
    (home / ".config" / "systemd" / "user").mkdir(parents=True)
    daemon = make_daemon(env={"HOME": str(home)})
    with daemon.client(name="pytest-owner", approver=True) as owner:
        sid = owner.open_session(home)
        grant_writes(owner, sid)
        for path in (".bashrc", ".local/bin/x", ".gitconfig", ".config/systemd/user/x.service"):
            call_id = write(owner, sid, path)
            asked = next_of(owner, call_id)
            assert isinstance(asked, p.ApprovalRequested), f"{path} ran unasked under a session grant"
            place = str(home.resolve() / path.split("/")[0])
            assert asked.always_ask == (f"{path!r} is in the home's {place!r}, whose files run code later outside "
                                        "any sandbox (at the next shell, login, git command or service start)")
            assert not (home / path).exists(), f"{path} was written before anyone approved it"
            # approved "for the session": this call only, so the next dotfile asks again
            owner.request(p.ApprovalDecide, approval_id=asked.approval_id, decision="approve", scope="session")
            assert resolved(owner, asked.approval_id).scope == "once"
            assert owner.wait_call(call_id).ok
        done = next_of(owner, write(owner, sid, "notes2.txt"))  # the grant still covers an ordinary file
        assert isinstance(done, p.CallCompleted) and done.ok and (home / "notes2.txt").exists()


def test_the_directory_python_m_scvd_was_started_in_is_named_as_the_cause(make_daemon, ws: Path) -> None:
    # `python -m scvd` puts its working directory first on scvd's import path: a module planted there
    # runs at scvd's next start, so it asks; the request blamed PATH, scvd's Python, programs or dotfiles
    (ws / "proj").mkdir()
    daemon = make_daemon(cwd=ws / "proj", fork=False)  # what `python -m` itself puts on sys.path
    with daemon.client(name="pytest-owner", approver=True) as owner:
        sid = owner.open_session(ws)
        grant_writes(owner, sid)
        assert denied_asking(owner, sid, "proj/json.py", "create") == (
            f"'proj/json.py' is inside {str(ws.resolve() / 'proj')!r}, the directory scvd was started in, which "
            "`python -m scvd` put on scvd's import path: a module written there runs outside any sandbox at scvd's "
            "next start; start scvd as installed (its `scvd` command, e.g. `.venv/bin/scvd run`, or the systemd "
            "unit) and this directory is not one")
    assert not (ws / "proj" / "json.py").exists()


def test_a_grant_for_write_does_not_cover_a_directory_on_scvds_path(make_daemon, tmp_path: Path, ws: Path) -> None:
    # a workspace holding a directory on scvd's PATH (sandbox off): a `git` planted there runs in
    # the stead of the real one, outside any sandbox, whenever scvd or the person looks one up
    (ws / "bin").mkdir()
    daemon = make_daemon(env={"PATH": f"{ws / 'bin'}:{os.environ['PATH']}"})
    with daemon.client(name="pytest-owner", approver=True) as owner:
        sid = owner.open_session(ws)
        grant_writes(owner, sid)
        assert denied_asking(owner, sid, "bin/git", "create") == (
            f"'bin/git' is inside {str(ws.resolve() / 'bin')!r}, whose files run outside any sandbox later "
            "(a directory on PATH, a library the loader outside the sandbox reads, scvd's Python, a program scvd starts or "
            "a dotfile's link target)")
        done = next_of(owner, write(owner, sid, "notes2.txt"))
        assert isinstance(done, p.CallCompleted) and done.ok
    assert not (ws / "bin" / "git").exists()
