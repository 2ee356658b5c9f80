"""read and write over the socket of a real `scvd run`: results, errors, approvals, escapes, atomicity."""

from __future__ import annotations

import hashlib
import os
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest

from conftest import wait_pending
from scvd import protocol as p
from scvctl.client import Client


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def call(c: Client, sid: str, tool: str, decide: str | None = None, scope: str = "once", **arguments: Any):
    """One call; when it asks for approval, answer `decide` (a test fails if it asks unexpectedly)."""
    call_id = c.start_call(sid, tool, arguments)
    asked = None
    while True:
        event = c.next_event()
        if isinstance(event, p.ApprovalRequested) and event.call_id == call_id:
            assert decide is not None, f"{tool} {arguments} asked for approval: {event.summary}"
            asked = event
            c.request(p.ApprovalDecide, approval_id=event.approval_id, decision=decide, scope=scope)
        elif isinstance(event, p.CallCompleted) and event.call_id == call_id:
            assert decide is None or asked is not None, f"{tool} {arguments} ran without asking"
            return event, asked


@pytest.fixture
def owner(daemon) -> Client:
    with daemon.client(name="pytest-owner", approver=True) as c:
        yield c


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret.txt").write_text("TOP SECRET\n")
    return root


@pytest.mark.one_loop
def test_tools_list_shows_read_and_write(owner: Client) -> None:
    tools = {t.name: t for t in owner.request(p.ToolsList).tools}
    assert tools["read"].risk == "read_only" and tools["read"].flags["concurrent"] is True
    assert tools["write"].risk == "filesystem"
    assert tools["read"].input_schema["properties"]["limit"]["maximum"] == 1 << 20
    assert set(tools["write"].input_schema["required"]) == {"path", "content", "mode"}


@pytest.mark.one_loop
def test_read_runs_without_approval_and_reports_ranges(owner: Client, ws: Path) -> None:
    data = "".join(str(i % 10) for i in range(100)).encode()
    (ws / "d.txt").write_bytes(data)
    sid = owner.open_session(ws)
    done, _ = call(owner, sid, "read", path="d.txt", offset=10, limit=5)
    assert done.ok and done.result == {"path": "d.txt", "content": "01234", "offset": 10, "length": 5,
                                       "total_bytes": 100, "truncated": True, "sha256": sha(data)}


@pytest.mark.one_loop
def test_read_errors_have_their_kinds(owner: Client, ws: Path) -> None:
    (ws / "u.txt").write_bytes("ab€cd".encode())
    sid = owner.open_session(ws)
    done, _ = call(owner, sid, "read", path="u.txt", offset=3)  # inside the €
    assert not done.ok and done.error.kind == "failed" and "offset=2" in done.error.message
    done, _ = call(owner, sid, "read", path="u.txt", limit=(1 << 20) + 1)
    assert done.error.kind == "invalid_arguments" and "limit" in done.error.message
    done, _ = call(owner, sid, "read", path="missing.txt")
    assert done.error.kind == "failed" and "does not exist" in done.error.message


@pytest.mark.one_loop
def test_an_argument_the_tool_lacks_or_a_bad_mode_says_what_to_send(owner: Client, ws: Path) -> None:
    """`file_path` (other agents' read) got "Object contains unknown field `file_path`" and a bad mode
    "Invalid enum value 'overwrite'": neither said what the tool takes, so a model guessed again."""
    (ws / "a.txt").write_text("hi\n")
    sid = owner.open_session(ws)
    done, _ = call(owner, sid, "read", file_path="a.txt")
    assert done.error.kind == "invalid_arguments"
    assert done.error.message == ("read: unknown argument `file_path`; did you mean `path`? "
                                  "(arguments: path, offset, limit)")
    done, _ = call(owner, sid, "write", path="a.txt", content="x", mode="overwrite")
    assert done.error.kind == "invalid_arguments"
    assert done.error.message == ("write: argument `mode`: Invalid enum value 'overwrite'; "
                                  "use one of: create, replace")
    assert (ws / "a.txt").read_text() == "hi\n"


@pytest.mark.one_loop
def test_secret_like_read_asks_for_approval(owner: Client, ws: Path) -> None:
    (ws / ".env").write_text("API_KEY=abc\n")
    sid = owner.open_session(ws)
    done, asked = call(owner, sid, "read", decide="deny", path=".env")
    assert asked.risk == "filesystem" and asked.details["secret_like"] is True
    assert "dotenv" in asked.details["why"] and "API_KEY" not in asked.summary
    # built only once someone is asked (Plan.describe): the approver still sees all of it
    # the range there is to read: it said `bytes 0..65536 of 12`, the limit asked
    assert asked.summary == "read secret-like file '.env', bytes 0..12 of 12"
    assert asked.details["path"] == ".env" and asked.details["size"] == 12
    assert not done.ok and done.error.kind == "denied"
    _, asked = call(owner, sid, "read", decide="deny", path=".env", offset=4, limit=5)
    assert asked.summary == "read secret-like file '.env', bytes 4..9 of 12"
    done, asked = call(owner, sid, "read", decide="approve", path=".env")
    assert done.ok and done.result["content"] == "API_KEY=abc\n"


@pytest.mark.one_loop
def test_a_read_of_password_txt_asks_and_of_a_tokenizer_does_not(owner: Client, ws: Path) -> None:
    """Seed 000: a lexically secret-like path asks. password.txt was read unasked (on-risk)."""
    (ws / "password.txt").write_text("hunter2\n")
    (ws / "tokenizer.py").write_text("print(1)\n")
    sid = owner.open_session(ws)
    done, asked = call(owner, sid, "read", decide="deny", path="password.txt")
    assert asked.risk == "filesystem" and asked.details["secret_like"] is True
    assert asked.details["why"] == ("filesystem risk: the path looks secret-like: 'password.txt' is named "
                                    "like a secret (the word 'password')")
    assert done.error.kind == "denied" and "hunter2" not in str(asked)
    assert owner.call(sid, "read", {"path": "tokenizer.py"}).result["content"] == "print(1)\n"  # unasked


GIT_CONFIG = '[core]\n\tbare = false\n[remote "origin"]\n\turl = {url}\n\tfetch = +refs/heads/*:refs/remotes/origin/*\n'
TOKEN = "ghp_0123456789abcdefghijABCDEFGHIJ012345"


@pytest.mark.one_loop
def test_a_git_config_that_holds_a_credential_asks_to_be_read_and_one_without_does_not(
        owner: Client, ws: Path) -> None:
    """A `read` of .git/config ran unasked and sent the model the token a person or CI left there
    (a remote's `https://user:TOKEN@`, actions/checkout's persisted extraheader)."""
    for repo, extra in (("", ""), ("ci/", '[http "https://github.com/"]\n\textraheader = AUTHORIZATION: basic eDp5\n')):
        (ws / repo / ".git").mkdir(parents=True)
        url = "https://github.com/o/r" if extra else f"https://x-access-token:{TOKEN}@github.com/o/r"
        (ws / repo / ".git" / "config").write_text(GIT_CONFIG.format(url=url) + extra)
    (ws / "plain" / ".git").mkdir(parents=True)
    plain = GIT_CONFIG.format(url="https://github.com/o/r")
    (ws / "plain" / ".git" / "config").write_text(plain)
    os.symlink(".git/config", ws / "notes")
    config = (ws / ".git" / "config").read_text()
    sid = owner.open_session(ws)
    done, asked = call(owner, sid, "read", decide="approve", path=".git/config")
    assert asked.risk == "filesystem" and asked.details["secret_like"] is True
    assert asked.summary == f"read secret-like file '.git/config', bytes 0..{len(config)} of {len(config)}"
    assert asked.details["why"] == ("filesystem risk: the path looks secret-like: 'config' is a git config "
                                    "that holds a credential (a URL with a password)")
    assert TOKEN not in str(asked)
    assert done.ok and done.result["content"] == config  # from its start: the look at it moved no offset
    _, asked = call(owner, sid, "read", decide="deny", path="notes")
    assert asked.details["why"] == ("filesystem risk: the path looks secret-like: it resolves to '.git/config': "
                                    "'config' is a git config that holds a credential (a URL with a password)")
    _, asked = call(owner, sid, "read", decide="deny", path="ci/.git/config")
    assert asked.details["why"].endswith("holds a credential (a value for 'extraheader')")
    assert "eDp5" not in str(asked)
    done, _ = call(owner, sid, "read", path="plain/.git/config")  # no credential: unasked, as before
    assert done.ok and done.result["content"] == plain


@pytest.mark.one_loop
def test_gits_xdg_config_that_holds_a_credential_asks_to_be_read_and_its_credential_store_always(
        owner: Client, ws: Path) -> None:
    """A session on ~ read ~/.config/git/config unasked, with the token of an `insteadOf` base in it
    (git's XDG config, beside ~/.gitconfig); its credential store asks as ~/.git-credentials does."""
    git = ws / ".config" / "git"
    git.mkdir(parents=True)
    plain = '[user]\n\tname = Me\n[url "git@github.com:"]\n\tinsteadOf = https://github.com/\n'
    (git / "config").write_text(plain)
    (git / "credentials").write_text(f"https://me:{TOKEN}@github.com\n")
    sid = owner.open_session(ws)
    done, _ = call(owner, sid, "read", path=".config/git/config")  # no credential: unasked
    assert done.ok and done.result["content"] == plain
    (git / "config").write_text(f'[url "https://{TOKEN}@github.com/"]\n\tinsteadOf = https://github.com/\n')
    done, asked = call(owner, sid, "read", decide="deny", path=".config/git/config")
    assert asked.risk == "filesystem" and asked.details["secret_like"] is True
    assert asked.details["why"] == ("filesystem risk: the path looks secret-like: 'config' is a git config "
                                    "that holds a credential (a URL whose user is a token)")
    assert TOKEN not in str(asked) and done.error.kind == "denied"
    for tool, args in (("read", {}), ("write", {"content": "", "mode": "replace"})):
        done, asked = call(owner, sid, tool, decide="deny", path=".config/git/credentials", **args)
        assert asked.details["secret_like"] is True and asked.always_ask and done.error.kind == "denied"
        assert TOKEN not in str(asked)


def reads_ask_as_git_config(owner: Client, reads: tuple[tuple[str, str], ...], found: str) -> None:
    """Each read (session, path) asks, as of a git config that holds `found`, showing no TOKEN; denied."""
    for session, path in reads:
        done, asked = call(owner, session, "read", decide="deny", path=path)
        assert asked.risk == "filesystem" and asked.details["why"] == (
            f"filesystem risk: the path looks secret-like: 'config' is a git config that holds a credential ({found})")
        assert TOKEN not in str(asked) and done.error.kind == "denied"


@pytest.mark.one_loop
def test_gits_xdg_config_in_a_folder_not_named_config_asks_to_be_read_when_it_holds_a_credential(
        make_daemon, tmp_path: Path) -> None:
    """git (run by bash, which inherits scvd's environment) reads $XDG_CONFIG_HOME/git/config; one
    in a folder not named `.config` read unasked, with the token of an `insteadOf` base in it."""
    xdg = tmp_path / "xdgconf"
    (xdg / "git").mkdir(parents=True)
    plain = '[user]\n\tname = Me\n'
    (xdg / "git" / "config").write_text(plain)
    daemon = make_daemon(home=tmp_path / "scvhome", env={"XDG_CONFIG_HOME": str(xdg)})
    with daemon.client(name="pytest-owner", approver=True) as owner:
        sid, on_git = owner.open_session(tmp_path), owner.open_session(xdg / "git")
        done, _ = call(owner, sid, "read", path="xdgconf/git/config")  # no credential: unasked
        assert done.ok and done.result["content"] == plain
        (xdg / "git" / "config").write_text(f'[url "https://{TOKEN}@github.com/"]\n\tinsteadOf = https://github.com/\n')
        reads_ask_as_git_config(owner, ((sid, "xdgconf/git/config"), (on_git, "config")), "a URL whose user is a token")


@pytest.mark.one_loop
def test_a_relative_xdg_config_home_is_dropped_so_git_reads_no_config_an_unasked_write_left(
        make_daemon, tmp_path: Path) -> None:
    """XDG_CONFIG_HOME=rel: git, run by bash in the workspace, took it from there, while the places
    whose writes always ask named only an absolute one; so under a session grant for write, an unasked
    `rel/git/config` set a pager that the next git in the workspace ran. The XDG spec says a relative
    one is invalid: scvd unsets it at start, and says so."""
    ws = tmp_path / "ws"
    (ws / "rel" / "git").mkdir(parents=True)
    daemon = make_daemon(home=tmp_path / "scvhome", env={"XDG_CONFIG_HOME": "rel"})
    with daemon.client(name="pytest-owner", approver=True) as owner:
        sid = owner.open_session(ws)
        done, _ = call(owner, sid, "write", "approve", "session", path="notes.txt", content="n\n", mode="create")
        assert done.ok
        done, _ = call(owner, sid, "write", path="rel/git/config", content="[core]\n\tpager = echo planted\n",
                       mode="create")  # unasked under the grant, and harmless now
        assert done.ok
        ran, _ = call(owner, sid, "bash", "approve",
                      command='echo "xdg=${XDG_CONFIG_HOME-unset}"; git config --get core.pager')
    assert ran.ok and "xdg=unset\n" in ran.result["output"], ran
    assert "planted" not in ran.result["output"], ran
    assert "dropped 'rel' from scvd's XDG_CONFIG_HOME (it is now unset)" in daemon.log()


@pytest.mark.one_loop
def test_a_bare_repositorys_config_that_holds_a_credential_asks_whatever_its_folder_is_named(
        owner: Client, ws: Path) -> None:
    """`git init --bare .cfg` (the usual dotfiles setup): its config, with a token in the remote's URL,
    read unasked, while the same file in `app.git` asked and a write into `.cfg` asked naming it a git
    directory: the git config rule knew a git dir by its name alone."""
    for repo in (".cfg", "plain"):
        subprocess.run(["git", "init", "-q", "--bare", str(ws / repo)], check=True)
    url = f"https://x-access-token:{TOKEN}@github.com/o/dotfiles"
    subprocess.run(["git", "-C", str(ws / ".cfg"), "config", "remote.origin.url", url], check=True)
    sid, on_repo = owner.open_session(ws), owner.open_session(ws / ".cfg")
    reads_ask_as_git_config(owner, ((sid, ".cfg/config"), (on_repo, "config")), "a URL with a password")
    done, _ = call(owner, sid, "read", path="plain/config")  # no credential: unasked, as before
    assert done.ok and "bare = true" in done.result["content"]


@pytest.mark.one_loop
def test_scvds_own_sensitive_files_ask_to_be_read_and_its_tool_sources_do_not(make_daemon, ws: Path) -> None:
    """A session on ~ (here: SCV_HOME inside the workspace) read scvd's config.toml (MCP header
    tokens), audit log, chat transcripts and the agents' homes unasked: none is named like a secret."""
    home = ws / ".scv"
    daemon = make_daemon(home=home)
    files = {".scv/config.toml": "[mcp.servers.x.headers]\nAuthorization = 'Bearer abc'\n",
             ".scv/state/audit.log.1": "{}\n", ".scv/state/chat/c1.jsonl": "{}\n",
             ".scv/adapters/claude/projects/p/s.jsonl": "{}\n", ".scv/mcp/fs/state.json": "{}\n",
             ".scv/tools/script/x/run.sh": "echo hi\n", ".scv/skills/s/SKILL.md": "# s\n"}
    for path, text in files.items():
        (ws / path).parent.mkdir(parents=True, exist_ok=True)
        (ws / path).write_text(text)
    os.symlink(".scv/config.toml", ws / "cfg")
    with daemon.client(name="pytest-owner", approver=True) as owner:
        sid = owner.open_session(ws)
        for path in [*list(files)[:5], "cfg", ".scv/state/audit.log"]:  # the live log, written by now
            done, asked = call(owner, sid, "read", decide="deny", path=path)
            assert asked.risk == "filesystem" and asked.details["secret_like"] is True and asked.always_ask
            assert "scvd's" in asked.details["why"] or "private homes" in asked.details["why"]
            assert done.error.kind == "denied"
            if path == "cfg":
                assert "may hold MCP servers' header tokens" in asked.details["why"]
        # a wrong hash failed at once, unasked, which told whether a guess was config.toml's content
        done, asked = call(owner, sid, "write", decide="deny", path=".scv/config.toml", content="",
                           mode="replace", expected_sha256="0" * 64)
        assert asked.details["secret_like"] is True and done.error.kind == "denied"
        for path in list(files)[5:]:  # what a person editing their own tools reads often
            done, _ = call(owner, sid, "read", path=path)
            assert done.result["content"] == files[path]
        # a workspace inside one of those folders: all of it
        done, asked = call(owner, owner.open_session(home / "state" / "chat"), "read", decide="approve", path="c1.jsonl")
        assert done.ok and asked.details["why"].endswith("the workspace lies in scvd's chat transcripts folder "
                                                         "(all a conversation said, tool outputs too)")


@pytest.mark.one_loop
def test_a_config_file_given_by_dash_dash_config_in_the_workspace_asks_to_be_read(make_daemon, tmp_path: Path,
                                                                                  ws: Path) -> None:
    """`scvd --config ws/deploy/scvd.toml`: the read rule knew only the config.toml in scvd's own
    folder, so the file the daemon really reads (its MCP servers' tokens) was read unasked."""
    config = ws / "deploy" / "scvd.toml"
    config.parent.mkdir()
    config.write_text("log_level = 'info'  # beside MCP header tokens\n")
    (config.parent / "other.toml").write_text("x = 1\n")
    os.symlink("deploy/scvd.toml", ws / "cfg")
    daemon = make_daemon(home=tmp_path / "scvhome", args=["--config", str(config)])
    with daemon.client(name="pytest-owner", approver=True) as owner:
        sid = owner.open_session(ws)
        for path in ("deploy/scvd.toml", "cfg"):
            done, asked = call(owner, sid, "read", decide="deny", path=path)
            assert asked.risk == "filesystem" and asked.details["secret_like"] is True
            assert "scvd's configuration, which may hold MCP servers' header tokens" in asked.details["why"]
            assert done.error.kind == "denied"
        done, asked = call(owner, owner.open_session(config.parent), "read", decide="approve", path="scvd.toml")
        assert done.ok and asked.details["why"].endswith("'scvd.toml' is scvd's configuration, which may hold "
                                                         "MCP servers' header tokens in plain text")
        done, _ = call(owner, sid, "read", path="deploy/other.toml")  # its folder's other files read unasked
        assert done.result["content"] == "x = 1\n"


@pytest.mark.one_loop
@pytest.mark.parametrize("folder,name", [(".kube", "config"), (".docker", "config.json"),
                                         (".azure", "azureProfile.json")])  # msal_token_cache.json: its name says it
def test_a_workspace_that_is_a_credentials_folder_asks_for_its_files(
        owner: Client, tmp_path: Path, ws: Path, folder: str, name: str) -> None:
    """The rule looked only at the path in the workspace: a session opened on ~/.kube read its
    `config` unasked, where the same file from a workspace of ~ (`.kube/config`) asked."""
    creds = tmp_path / folder
    creds.mkdir()
    (creds / name).write_text("token: abc\n")
    (ws / name).write_text("plain\n")
    sid = owner.open_session(creds)
    done, asked = call(owner, sid, "read", decide="approve", scope="session", path=name)
    assert done.ok and asked.risk == "filesystem" and asked.details["secret_like"] is True
    assert asked.summary.startswith(f"read secret-like file '{name}'")
    _, again = call(owner, sid, "read", decide="deny", path=name)  # approved once only, like any secret
    assert again.details["secret_like"] is True
    done, _ = call(owner, owner.open_session(ws), "read", path=name)  # an ordinary folder's: unasked
    assert done.ok and done.result["content"] == "plain\n"


@pytest.mark.one_loop
def test_a_secret_like_file_answers_no_hash_guess_unasked(owner: Client, ws: Path) -> None:
    """write's early stale-hash check told, before anyone was asked, whether a guessed sha256 of
    .env was right, and printed 16 hex digits of the real one: a secret read through no approval."""
    secret = b"PIN=1234\n"
    (ws / ".env").write_bytes(secret)
    sid = owner.open_session(ws)
    guess = sha(b"PIN=0000\n")
    done, asked = call(owner, sid, "write", decide="deny", path=".env", content="PIN=9999\n", mode="replace",
                       expected_sha256=guess)
    assert asked.details["secret_like"] is True and done.error.kind == "denied"
    done, _ = call(owner, sid, "write", decide="approve", path=".env", content="PIN=9999\n", mode="replace",
                   expected_sha256=guess)  # approved as a write, not as a read: still no hash of it
    assert done.error.kind == "failed" and "read it again and pass its sha256" in done.error.message
    assert sha(secret)[:16] not in done.error.message and (ws / ".env").read_bytes() == secret


@pytest.mark.one_loop
def test_a_git_config_that_holds_a_credential_answers_no_hash_guess_unasked(owner: Client, ws: Path) -> None:
    """write's early stale-hash check skipped secret-like names only: of a .git/config holding a
    token (a read of it asks) a wrong guess failed at once and a right one asked, unasked oracle."""
    (ws / ".git").mkdir()
    config = GIT_CONFIG.format(url=f"https://x-access-token:{TOKEN}@github.com/o/r").encode()
    (ws / ".git" / "config").write_bytes(config)
    wrong, right = sha(config + b"#"), sha(config)
    # a session each: a session's writes run one after another
    ids = {owner.start_call(owner.open_session(ws), "write", {
        "path": ".git/config", "content": "[core]\n", "mode": "replace", "expected_sha256": guess}): guess
        for guess in (wrong, right)}
    asked: set[str] = set()
    while len(asked) < 2:  # both wait for a person: neither says `changed since it was read` first
        event = owner.next_event()
        assert not (isinstance(event, p.CallCompleted) and event.call_id in ids), event
        if isinstance(event, p.ApprovalRequested):
            asked.add(event.call_id)
    pending = owner.request(p.ApprovalsList).approvals
    assert asked == set(ids) == {a.call_id for a in pending}
    assert all(a.details["secret_like"] is True and "holds a credential" in a.details["why"] for a in pending)
    for a in pending:
        owner.request(p.ApprovalDecide, approval_id=a.approval_id, decision="approve", scope="once")
    done = {}
    while len(done) < 2:
        event = owner.next_event()
        if isinstance(event, p.CallCompleted) and event.call_id in ids:
            done[ids[event.call_id]] = event
    assert done[wrong].error.kind == "failed" and "read it again and pass its sha256" in done[wrong].error.message
    assert sha(config)[:16] not in done[wrong].error.message
    assert done[right].ok and (ws / ".git" / "config").read_text() == "[core]\n"


@pytest.mark.one_loop
def test_under_policy_always_a_write_answers_no_hash_guess_unasked(make_daemon, owner: Client, ws: Path) -> None:
    """Under approvals.policy = "always" every read asks, yet write compared an ordinary file with its
    expected_sha256 before approval: failing at once told the agent its guess of the content was
    wrong, and nobody was asked. Under the default policy a stale hash still fails at once."""
    content = b"PIN=1234\n"
    (ws / "notes.txt").write_bytes(content)
    wrong = sha(b"PIN=0000\n")
    guess = {"path": "notes.txt", "content": "x\n", "mode": "replace", "expected_sha256": wrong}
    done, _ = call(owner, owner.open_session(ws), "write", **guess)  # on-risk: unasked (else call() fails)
    assert done.error.kind == "failed" and "read it again and pass its sha256" in done.error.message
    with make_daemon('[approvals]\npolicy = "always"\n').client(name="pytest-owner", approver=True) as c:
        call_id = c.start_call(c.open_session(ws), "write", guess)
        [asked] = wait_pending(c)
        assert (asked.call_id, asked.tool, asked.details["expected_sha256"]) == (call_id, "write", wrong)
        c.request(p.ApprovalDecide, approval_id=asked.approval_id, decision="approve")
        done = c.wait_call(call_id)  # compared once approved
        assert done.error.kind == "failed" and "read it again and pass its sha256" in done.error.message
    assert (ws / "notes.txt").read_bytes() == content


@pytest.mark.one_loop
def test_a_git_config_that_holds_a_credential_always_asks_whatever_grant(owner: Client, ws: Path) -> None:
    """Where no other rule named it (a `.gitconfig` kept in a project, `always_ask = []`), a session
    grant for read or write covered a git config holding a token: a read showed it, a write with an
    expected_sha256 answered a guess of it, and nobody was asked."""
    for repo in ("a", "b"):
        (ws / repo).mkdir()
        (ws / repo / ".gitconfig").write_text(f'[url "https://{TOKEN}@github.com/"]\n\tinsteadOf = https://github.com/\n')
    (ws / "notes.txt").write_text("plain\n")
    sid = owner.open_session(ws)
    done, asked = call(owner, sid, "read", decide="approve", scope="session", path="a/.gitconfig")
    assert done.ok and asked.always_ask == ("'a/.gitconfig' is secret-like ('.gitconfig' is a git config that "
                                            "holds a credential (a URL whose user is a token))")
    _, asked = call(owner, sid, "read", decide="deny", path="b/.gitconfig")  # approved once only: asks again
    assert asked.always_ask and TOKEN not in str(asked)
    call(owner, sid, "write", decide="approve", scope="session", path="notes.txt", content="x\n", mode="replace")
    done, _ = call(owner, sid, "write", path="notes.txt", content="y\n", mode="replace")  # the grant holds
    assert done.ok
    done, asked = call(owner, sid, "write", decide="deny", path="b/.gitconfig", content="", mode="replace",
                       expected_sha256="0" * 64)
    assert asked.always_ask and asked.details["secret_like"] is True and done.error.kind == "denied"


@pytest.mark.one_loop
def test_links_inside_the_workspace(owner: Client, ws: Path) -> None:
    """CLAUDE.md -> AGENTS.md reads; notes -> .env asks; a hard link is replaced, never written through."""
    (ws / "AGENTS.md").write_text("# Agents\n")
    os.symlink("AGENTS.md", ws / "CLAUDE.md")
    (ws / ".env").write_text("API_KEY=abc\n")
    os.symlink(".env", ws / "notes")
    outside = ws.parent / "outside"
    os.link(outside / "secret.txt", ws / "hard.txt")
    sid = owner.open_session(ws)
    done, _ = call(owner, sid, "read", path="CLAUDE.md")  # `call` fails the test if it asks
    assert done.ok and done.result["content"] == "# Agents\n" and done.result["resolved_path"] == "AGENTS.md"
    done, asked = call(owner, sid, "read", decide="deny", path="notes")
    assert asked.risk == "filesystem" and asked.details["secret_like"] is True
    assert "resolves to '.env'" in asked.details["why"] and asked.details["resolved_path"] == ".env"
    assert "(-> '.env')" in asked.summary and not done.ok and done.error.kind == "denied"
    done, _ = call(owner, sid, "read", path="hard.txt")
    assert done.ok and done.result["content"] == "TOP SECRET\n"
    done, asked = call(owner, sid, "write", decide="approve", path="hard.txt", content="mine\n", mode="replace")
    assert asked.details["replaces_link"] is True
    assert done.ok and done.result["replaced_link"] is True
    assert (ws / "hard.txt").read_text() == "mine\n" and (outside / "secret.txt").read_text() == "TOP SECRET\n"
    for path in ("link", "abs"):
        os.symlink("../outside" if path == "link" else "/etc/passwd", ws / path)
        done, _ = call(owner, sid, "read", path=f"{path}/secret.txt" if path == "link" else path)
        assert done.error.kind == "invalid_arguments" and "leaves the workspace via symlink" in done.error.message


@pytest.mark.one_loop
def test_write_asks_and_shows_what_it_writes(owner: Client, ws: Path) -> None:
    sid = owner.open_session(ws)
    done, asked = call(owner, sid, "write", decide="approve", path="hello.py", content="print('hi')\n", mode="create")
    assert asked.risk == "filesystem"
    assert asked.summary.splitlines() == ["write (create) 'hello.py': 12 bytes, 1 line", "  | print('hi')"]
    assert done.ok and done.result == {"path": "hello.py", "bytes_written": 12,
                                       "sha256": sha(b"print('hi')\n"), "created": True, "replaced_link": False}
    assert (ws / "hello.py").read_text() == "print('hi')\n"


@pytest.mark.one_loop
def test_write_edge_cases_of_seed_000(owner: Client, ws: Path) -> None:
    (ws / "a.txt").write_text("v1")
    sid = owner.open_session(ws)
    # refused before approval: nobody is asked about a write that cannot work
    done, _ = call(owner, sid, "write", path="a.txt", content="x", mode="create")
    assert done.error.kind == "failed" and "already exists" in done.error.message
    done, _ = call(owner, sid, "write", path="b.txt", content="x", mode="replace")
    assert done.error.kind == "failed" and "mode='create'" in done.error.message
    done, _ = call(owner, sid, "write", path="no/dir/c.txt", content="x", mode="create")
    assert done.error.kind == "failed" and "parent directory 'no'" in done.error.message
    # a stale expected_sha256 of a small file: refused before anyone is asked (it was asked, then failed)
    seen = call(owner, sid, "read", path="a.txt")[0].result["sha256"]
    (ws / "a.txt").write_text("v2")
    done, _ = call(owner, sid, "write", path="a.txt", content="mine", mode="replace", expected_sha256=seen)
    assert done.error.kind == "failed" and "read it again and pass its sha256" in done.error.message
    assert (ws / "a.txt").read_text() == "v2"
    # of a big one: found right before install, after approval (hashing it would hold the loop)
    (ws / "big.txt").write_text("x" * 100_000)
    seen = call(owner, sid, "read", path="big.txt")[0].result["sha256"]
    (ws / "big.txt").write_text("y" * 100_000)
    done, _ = call(owner, sid, "write", decide="approve", path="big.txt", content="mine", mode="replace",
                   expected_sha256=seen)
    assert done.error.kind == "failed" and "read it again and pass its sha256" in done.error.message
    assert (ws / "big.txt").read_text() == "y" * 100_000
    fresh = call(owner, sid, "read", path="a.txt")[0].result["sha256"]
    done, _ = call(owner, sid, "write", decide="approve", path="a.txt", content="mine", mode="replace",
                   expected_sha256=fresh)
    assert done.ok and (ws / "a.txt").read_text() == "mine"
    assert owner.request(p.ApprovalsList).approvals == []


def files_of_at_most_64_kib() -> None:
    """A write past 64 KiB fails with EFBIG (for root too), as on a full disk; SIGXFSZ stays ignored
    (Python ignores it), so the write is told, not killed. The daemon's own small files fit."""
    import resource

    resource.setrlimit(resource.RLIMIT_FSIZE, (64 << 10, 64 << 10))


@pytest.mark.one_loop
def test_a_write_the_filesystem_refuses_says_why_and_leaves_the_old_file_and_no_temp_file(make_daemon,
                                                                                        ws: Path) -> None:
    d = make_daemon(preexec_fn=files_of_at_most_64_kib)
    (ws / "a.txt").write_text("old\n")
    with d.client(name="pytest-owner", approver=True) as owner:
        sid = owner.open_session(ws)
        done, _ = call(owner, sid, "write", decide="approve", path="a.txt", content="x" * (100 << 10),
                       mode="replace")
    assert done.error.kind == "failed"
    assert done.error.message == "writing 'a.txt' failed: File too large; the old file, if any, is unchanged"
    assert (ws / "a.txt").read_text() == "old\n"
    assert sorted(p.name for p in ws.iterdir()) == ["a.txt"]  # the temp file beside it was removed


def _escapes(ws: Path) -> list[str]:
    outside = ws.parent / "outside"
    os.symlink(outside, ws / "out")
    os.symlink(outside / "secret.txt", ws / "link.txt")
    (ws / "a").mkdir()
    os.symlink("../../outside", ws / "a" / "up")
    os.symlink("/proc/self/root", ws / "root")
    return [str(outside / "secret.txt"), "../outside/secret.txt", "out/secret.txt", "link.txt",
            "a/up/secret.txt", "/proc/self/root" + str(outside / "secret.txt"),
            "root" + str(outside / "secret.txt"), "/proc/self/cwd/secret.txt"]


@pytest.mark.one_loop
def test_a_workspace_moved_or_made_again_refuses_calls_until_a_new_session(owner: Client, ws: Path) -> None:
    """A re-clone, a restore, `mv ws ws.bak && mkdir ws`: the file tools held the old directory open
    (a write landed in ws.bak, a read said a file bash could cat "does not exist"), commands ran in
    the new one. Every call now says what happened and what to do."""
    (ws / "a.txt").write_text("old\n")
    sid = owner.open_session(ws)
    assert call(owner, sid, "read", path="a.txt")[0].ok
    ws.rename(ws.with_name("ws.bak"))
    ws.mkdir()
    (ws / "a.txt").write_text("new\n")
    message = (f"the workspace {ws} is another directory now: it was moved, or deleted and made again, "
               "since this session opened; open a new session on it (session.open) to work there")
    for tool, args in (("read", {"path": "a.txt"}), ("write", {"path": "b.txt", "content": "x", "mode": "create"})):
        done, asked = call(owner, sid, tool, **args)  # refused before anyone is asked
        assert (done.error.kind, done.error.message) == ("failed", message), done.error
    assert not (ws / "b.txt").exists() and not ws.with_name("ws.bak").joinpath("b.txt").exists()
    fresh = owner.open_session(ws)
    assert call(owner, fresh, "read", path="a.txt")[0].result["content"] == "new\n"
    (ws / "a.txt").unlink()
    ws.rmdir()
    gone, _ = call(owner, fresh, "read", path="a.txt")
    assert gone.error.message.startswith(f"the workspace {ws} is gone: it was moved"), gone.error


@pytest.mark.one_loop
def test_escapes_are_refused_before_approval(owner: Client, ws: Path) -> None:
    paths = _escapes(ws)
    sid = owner.open_session(ws)
    for path in paths:
        for tool, args in [("read", {}), ("write", {"content": "pwned", "mode": "replace"}),
                           ("write", {"content": "pwned", "mode": "create"})]:
            target = path if tool == "read" or args["mode"] == "replace" else path.replace("secret.txt", "new.txt")
            done, _ = call(owner, sid, tool, path=target, **args)  # `call` fails the test if it asks
            assert not done.ok and done.error.kind in ("invalid_arguments", "failed"), (path, done)
            assert "TOP SECRET" not in done.error.message
    outside = ws.parent / "outside"
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]
    assert (outside / "secret.txt").read_text() == "TOP SECRET\n"


def test_reader_on_another_connection_never_sees_a_partial_write(daemon, owner: Client, ws: Path) -> None:
    versions = ["a" * 300_000, "b" * 600_000 + "\n", "c" * 10]
    digests = {sha(v.encode()) for v in versions}
    (ws / "f.txt").write_text(versions[0])
    sid = owner.open_session(ws)
    done, _ = call(owner, sid, "write", decide="approve", scope="session", path="f.txt", content=versions[1],
                   mode="replace")
    assert done.ok
    stop = threading.Event()
    seen: list[str] = []

    problems: list[object] = []

    def reader() -> None:
        with daemon.client(name="reader") as r:
            rsid = r.open_session(ws)
            while not stop.is_set():
                res = r.call(rsid, "read", {"path": "f.txt", "limit": 1 << 20})
                if not res.ok or res.result["content"] not in versions:
                    problems.append(res.error or res.result["length"])
                    return
                seen.append(res.result["sha256"])

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        for i in range(30):  # the session grant lets these run unasked
            done, _ = call(owner, sid, "write", path="f.txt", content=versions[i % 3], mode="replace")
            assert done.ok, done.error
    finally:
        stop.set()
        thread.join(30)
    assert not problems and seen and set(seen) <= digests
    assert not [n for n in os.listdir(ws) if n.startswith(".scvd-")]


def test_writers_with_the_same_expected_sha256_one_wins_and_the_others_are_told(daemon, owner: Client,
                                                                                 ws: Path) -> None:
    """Writes of scvd's own, from sessions on other connections, approved at once: each checks
    expected_sha256 and installs as one step per file, so one lands and the rest fail the check
    (all of them passed it before, and all but one update were lost without a word)."""
    (ws / "sub").mkdir()
    old = b"x" * (48 << 20)  # hashing it takes a while: unserialized, every writer's check passes
    (ws / "sub" / "big.txt").write_bytes(old)
    writers = [daemon.client(name=f"writer{i}") for i in range(4)]
    try:
        calls = []
        for i, w in enumerate(writers):
            # one file through two workspaces: the folder, and its subfolder opened as one of its own
            root, path = (ws, "sub/big.txt") if i % 2 else (ws / "sub", "big.txt")
            calls.append(w.start_call(w.open_session(root), "write", {
                "path": path, "content": f"writer {i}\n", "mode": "replace", "expected_sha256": sha(old)}))
        sent = [owner.send(p.ApprovalDecide, approval_id=a.approval_id, decision="approve")
                for a in wait_pending(owner, len(writers))]  # all together, without waiting for answers
        for frame in sent:
            owner.wait_answer(frame.id)
        done = [w.wait_call(c) for w, c in zip(writers, calls)]
    finally:
        for w in writers:
            w.close()
    won = [i for i, d in enumerate(done) if d.ok]
    assert len(won) == 1, [d.result or d.error for d in done]
    for d in done:
        assert d.ok or (d.error.kind == "failed" and "changed since it was read" in d.error.message
                        and "read it again and pass its sha256 as expected_sha256" in d.error.message), d.error
    assert (ws / "sub" / "big.txt").read_text() == f"writer {won[0]}\n"
    assert not [n for n in os.listdir(ws / "sub") if n.startswith(".scvd-")]
