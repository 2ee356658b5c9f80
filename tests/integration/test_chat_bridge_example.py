"""examples/bridge/bridge.py runs: a chat's message becomes a turn, the owner approves, the chat resumes later."""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import os
import pty
import re
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

from chat_model import model  # noqa: F401 (a fixture)
from chat_model import Calls, Cut, Text
from test_chat_transcript_faults import full
from scvd.chat.items import Opened, UserText
from scvd.chat.transcript import Transcripts

pytestmark = pytest.mark.one_loop  # a client's behaviour, the same whichever loop the daemon runs on

ROOT = Path(__file__).resolve().parents[2]
BRIDGE = ROOT / "examples" / "bridge" / "bridge.py"


def read_until(proc: subprocess.Popen, pattern: str) -> str:
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if re.search(pattern, line):
            return line
    raise AssertionError(f"{pattern!r} never came; the bridge said: {''.join(seen)}")


def daemon_for(make_daemon, scv_home, m, workspace, tmp_path, config: str = "") -> tuple:
    """A daemon whose chat provider is the scripted model `m`, and the bridge's command line."""
    config += (f'[providers.test]\nmodel = "m"\nbase_url = "{m.base_url}"\nwire_api = "chat"\n'
               '[chat]\nprovider = "test"\n')
    d = make_daemon(config, home=scv_home)
    return d, [sys.executable, str(BRIDGE), "--workspace", str(workspace), "--state", str(tmp_path / "b.json")]


@contextlib.contextmanager
def running(argv: list[str], env: dict[str, str]) -> Iterator[subprocess.Popen]:
    """The bridge, killed however the test ends."""
    with subprocess.Popen(argv, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) as proc:
        try:
            yield proc
        finally:
            proc.kill()


def ends(proc: subprocess.Popen) -> bool:
    """Its input closed, the bridge exits 0."""
    proc.stdin.close()
    return proc.wait(30) == 0


def say(proc: subprocess.Popen, line: str) -> None:
    proc.stdin.write(f"{line}\n")
    proc.stdin.flush()


def test_the_example_bridge(make_daemon, model, scv_home, workspace, tmp_path):
    m = model(Calls(("find_tools", {"query": "write"})),
              Calls(("write", {"path": "hi.txt", "content": "hi\n", "mode": "create"})), Text("wrote hi.txt"),
              Text("yes, hi.txt"))
    d, argv = daemon_for(make_daemon, scv_home, m, workspace, tmp_path)
    with subprocess.Popen(argv, env=d.env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) as proc:
        proc.stdin.write("alice: write hi.txt please\n")
        proc.stdin.flush()
        ask = read_until(proc, r"^\[owner\] alice wants write")
        approval = re.search(r"/approve (\S+),", ask).group(1)
        assert ask == f"[owner] alice wants write (filesystem) -> /approve {approval}, /session {approval} " \
                      f"or /deny {approval}\n"
        shown = []  # the summary and the details, whole, up to the last detail
        while not shown or not shown[-1].startswith("  secret_like:"):
            shown.append(proc.stdout.readline())
        # as scvctl shows them: it printed Python's None and False, and the content's newline as a blank line
        expected = ["  write (create) 'hi.txt': 3 bytes, 1 line\n", "    | hi\n", "  path: hi.txt\n",
                    "  mode: create\n", "  bytes: 3\n", "  content: (3 chars, 1 line, and a newline at the end)\n",
                    "    | hi\n", "    | \n", "  expected_sha256: null\n", "  replaces_link: false\n",
                    "  secret_like: false\n"]
        if shown != expected:
            proc.kill()  # else leaving the `with` waits for a bridge still reading its input
        assert shown == expected
        assert proc.stdout.readline().startswith('  requested by "example-bridge" (pid '), shown
        proc.stdin.write(f"owner: /approve {approval}\n")
        proc.stdin.flush()
        assert read_until(proc, r"^\[alice\] ") == "[alice] wrote hi.txt\n"
        proc.stdin.close()
        assert proc.wait(30) == 0
    assert (workspace / "hi.txt").read_text() == "hi\n"
    # a second run resumes alice's conversation from the state file
    with subprocess.Popen(argv, env=d.env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) as proc:
        proc.stdin.write("alice: did you?\n")
        proc.stdin.flush()
        assert read_until(proc, r"^\[alice\] ") == "[alice] yes, hi.txt\n"
        proc.stdin.close()
        assert proc.wait(30) == 0
    said = [msg["content"] for msg in m.requests[-1]["messages"] if msg["role"] == "user"]
    assert said == ["write hi.txt please", "did you?"]


def test_the_example_bridge_starts_afresh_when_a_chats_conversation_was_removed(make_daemon, model, scv_home,
                                                                                 workspace, tmp_path):
    """A transcript chat.transcript_days removed: every message of that chat was `(not sent: no
    conversation ...)`, for good, since the bridge kept the id."""
    m = model(Text("hello again"))
    d, argv = daemon_for(make_daemon, scv_home, m, workspace, tmp_path)
    (tmp_path / "b.json").write_text(json.dumps({"alice": "kremoved"}))
    with running(argv, d.env) as proc:
        say(proc, "alice: hi")
        assert read_until(proc, r"^\[alice\] ") == "[alice] (the earlier conversation is gone from scvd; the " \
                                                    "model starts afresh)\n"
        assert read_until(proc, r"^\[alice\] ") == "[alice] hello again\n"
        assert ends(proc)
    assert json.loads((tmp_path / "b.json").read_text())["alice"] not in ("kremoved", "")


def test_the_example_bridge_goes_on_when_a_chat_writes_while_its_turn_runs(make_daemon, model, scv_home,
                                                                            workspace, tmp_path):
    """A second message before the first one's answer (its write waits for the owner): turn.start's
    invalid_request ended the bridge, every chat with it, instead of telling that chat."""
    m = model(Calls(("find_tools", {"query": "write"})),
              Calls(("write", {"path": "hi.txt", "content": "hi\n", "mode": "create"})), Text("wrote hi.txt"))
    d, argv = daemon_for(make_daemon, scv_home, m, workspace, tmp_path)
    with subprocess.Popen(argv, env=d.env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) as proc:
        say(proc, "alice: write hi.txt please")
        approval = re.search(r"/approve (\S+),", read_until(proc, r"^\[owner\] alice wants write")).group(1)
        say(proc, "alice: are you done?")
        busy = read_until(proc, r"^\[alice\] ")
        assert busy.startswith("[alice] (not sent: turn ") and "is still running" in busy, busy
        say(proc, f"owner: /approve {approval}")
        assert read_until(proc, r"^\[alice\] ") == "[alice] wrote hi.txt\n"
        proc.stdin.close()
        assert proc.wait(30) == 0
    assert (workspace / "hi.txt").read_text() == "hi\n"


def test_the_example_bridge_tells_the_chat_and_exits_when_scvd_dies_mid_turn(make_daemon, model, scv_home,
                                                                               workspace, tmp_path):
    """scvd killed while a turn waited for the owner: the turn stayed "running" in the bridge, which
    then never exited when its input closed, and the chat never heard its message was lost."""
    m = model(Calls(("find_tools", {"query": "write"})),
              Calls(("write", {"path": "hi.txt", "content": "hi\n", "mode": "create"})), Text("wrote hi.txt"))
    d, argv = daemon_for(make_daemon, scv_home, m, workspace, tmp_path)
    with subprocess.Popen(argv, env=d.env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) as proc:
        try:
            say(proc, "alice: write hi.txt please")
            read_until(proc, r"^\[owner\] alice wants write")
            d.proc.kill()
            assert read_until(proc, r"^\[alice\] ") == "[alice] (scvd went away before answering; send your message again)\n"
            proc.stdin.close()
            assert proc.wait(30) == 0
        finally:
            proc.kill()
    assert not (workspace / "hi.txt").exists()



def test_the_example_bridge_shows_the_models_text_escaped(make_daemon, model, scv_home, workspace, tmp_path):
    """The terminal is both the chats and the owner's channel: a model's answer carrying ANSI escapes
    (from a file it read, say) went out raw, and `ESC[8m` hid the approval printed after it."""
    m = model(Calls(("find_tools", {"query": "write"}), text="\x1b[8mreading\u202e"),
              Calls(("write", {"path": "hi.txt", "content": "hi\n", "mode": "create"})), Text("wrote\x1b[2J"))
    d, argv = daemon_for(make_daemon, scv_home, m, workspace, tmp_path)
    with subprocess.Popen(argv, env=d.env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) as proc:
        try:
            say(proc, "alice: write hi.txt please")
            assert read_until(proc, r"^\[alice\] ") == "[alice] \\x1b[8mreading\\u202e\n"
            approval = re.search(r"/approve (\S+),", read_until(proc, r"^\[owner\] alice wants write")).group(1)
            say(proc, f"owner: /approve {approval}")
            assert read_until(proc, r"^\[alice\] ") == "[alice] wrote\\x1b[2J\n"
            proc.stdin.close()
            assert proc.wait(30) == 0
        finally:
            proc.kill()


def test_the_example_bridge_keeps_its_chats_when_its_state_cannot_be_written(make_daemon, model, scv_home,
                                                                             workspace, tmp_path):
    """A state file write cut short (a full disk; here a file size limit): write_text had truncated the
    file first, so every chat lost its conversation, and the OSError ended the bridge mid-message."""
    m = model(Text("hello alice"), Text("hello bob"), Text("still here, alice"))
    d, argv = daemon_for(make_daemon, scv_home, m, workspace, tmp_path)
    state = tmp_path / "b.json"
    with subprocess.Popen(argv, env=d.env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) as proc:
        say(proc, "alice: hi")
        assert read_until(proc, r"^\[alice\] ") == "[alice] hello alice\n"
        proc.stdin.close()
        assert proc.wait(30) == 0
    stored = json.loads(state.read_text())
    limit = len(state.read_bytes()) + 8  # room for alice's, not for bob's too

    def small_files() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    with subprocess.Popen(argv, env=d.env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          preexec_fn=small_files) as proc:
        try:
            say(proc, "bob: hi")
            assert read_until(proc, r"^\[bob\] ") == "[bob] hello bob\n"
            say(proc, "alice: still there?")
            assert read_until(proc, r"^\[alice\] ") == "[alice] still here, alice\n"
            proc.stdin.close()
            assert proc.wait(30) == 0
        finally:
            proc.kill()
    assert json.loads(state.read_text()) == stored
    said = [msg["content"] for msg in m.requests[-1]["messages"] if msg["role"] == "user"]
    assert said == ["hi", "still there?"]
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("b.json")] == ["b.json"]


def test_the_example_bridge_answers_a_mistyped_owner_command_with_its_usage(make_daemon, model, scv_home,
                                                                            workspace, tmp_path):
    """`/answer q1 yes` (the question id without its session): the owner was told `ValueError: not
    enough values to unpack (expected 2, got 1)`, not what to type."""
    d, argv = daemon_for(make_daemon, scv_home, model(), workspace, tmp_path)
    with subprocess.Popen(argv, env=d.env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) as proc:
        try:
            say(proc, "owner: /answer q1 yes")
            assert read_until(proc, r"^\[owner\] ") == \
                "[owner] commands: /approve ID, /session ID, /deny ID [reason], /answer ID text\n"
            proc.stdin.close()
            assert proc.wait(30) == 0
        finally:
            proc.kill()


def test_the_example_bridge_shows_what_a_failed_turn_streamed(make_daemon, model, scv_home, workspace, tmp_path):
    """A provider that stops mid-answer fails the turn: the text it streamed before was kept in a buffer
    and dropped, so the chat got only `(failed: ...)`, none of the answer it had."""
    m = model(Cut("half of the answer"))
    d, argv = daemon_for(make_daemon, scv_home, m, workspace, tmp_path)
    with subprocess.Popen(argv, env=d.env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) as proc:
        try:
            say(proc, "alice: explain")
            assert read_until(proc, r"^\[alice\] ") == "[alice] half of the answer (cut short)\n"
            assert read_until(proc, r"^\[alice\] ").startswith("[alice] (failed: provider 'test' ")
            proc.stdin.close()
            assert proc.wait(30) == 0
        finally:
            proc.kill()


def queued(pid: int) -> int:
    """Bytes that wait unread on the Unix stream sockets of process `pid`."""
    out = subprocess.run(["ss", "-xnpH"], capture_output=True, text=True, check=True).stdout
    return sum(int(line.split()[2]) for line in out.splitlines() if f"pid={pid}," in line)


def test_the_example_bridge_exits_after_a_turn_whose_end_came_with_its_acceptance(make_daemon, scv_home,
                                                                                  workspace, tmp_path):
    """A turn that fails at once (a provider without its key), its turn.failed read in the same chunk
    as its turn.accepted (a busy bridge): the relay took the end first, then the turn was recorded as
    running and stayed so, and the bridge never exited when its input closed."""
    config = ('[providers.test]\nmodel = "m"\nbase_url = "http://127.0.0.1:9"\napi_key_env = "SCV_TEST_NO_KEY"\n'
              '[chat]\nprovider = "test"\n')
    d = make_daemon(config, home=scv_home)
    argv = [sys.executable, str(BRIDGE), "--workspace", str(workspace), "--state", str(tmp_path / "b.json")]
    with subprocess.Popen(argv, env=d.env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) as proc:
        try:
            say(proc, "alice: hello")  # opens alice's session: the next message sends turn.start alone
            failed = "[alice] (failed: provider 'test' has no API key (env SCV_TEST_NO_KEY is not set))\n"
            assert read_until(proc, r"^\[alice\] ") == failed
            d.proc.send_signal(signal.SIGSTOP)
            say(proc, "alice: again")
            while queued(d.proc.pid) == 0:  # turn.start waits for scvd
                time.sleep(0.05)
            proc.send_signal(signal.SIGSTOP)  # the bridge reads nothing until scvd answered and failed the turn
            d.proc.send_signal(signal.SIGCONT)
            while queued(proc.pid) < 250:  # turn.accepted and turn.started are smaller; turn.failed came
                time.sleep(0.05)
            proc.send_signal(signal.SIGCONT)
            assert read_until(proc, r"^\[alice\] ") == failed
            proc.stdin.close()
            assert proc.wait(30) == 0
        finally:
            d.proc.send_signal(signal.SIGCONT)
            proc.send_signal(signal.SIGCONT)
            proc.kill()


def test_the_example_bridge_serves_more_chats_than_a_connection_holds_sessions(make_daemon, model, scv_home,
                                                                               workspace, tmp_path):
    """One session per chat, never closed: past server.max_sessions_per_connection every new chat was
    answered `(not sent: this connection already holds N sessions ...)`, until the bridge restarted."""
    m = model(Text("hi alice"), Text("hi bob"), Text("hi carol"), Text("alice again"))
    d, argv = daemon_for(make_daemon, scv_home, m, workspace, tmp_path, "[server]\nmax_sessions_per_connection = 2\n")
    with running(argv, d.env) as proc:
        for chat in ("alice", "bob", "carol"):
            say(proc, f"{chat}: hello")
            assert read_until(proc, rf"^\[{chat}\] ") == f"[{chat}] hi {chat}\n"
        say(proc, "alice: me again")
        assert read_until(proc, r"^\[alice\] ") == "[alice] alice again\n"
        assert ends(proc)
    said = [msg["content"] for msg in m.requests[-1]["messages"] if msg["role"] == "user"]
    assert said == ["hello", "me again"]  # alice's conversation, reopened


def load_bridge():
    """examples/bridge/bridge.py as a module, to run its Bridge on a chat app of the test's."""
    spec = importlib.util.spec_from_file_location("example_bridge", BRIDGE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class ScriptedApp:
    """A chat app whose messages come from a script (an async generator of the test's) and whose
    output is kept: each (chat, text) the bridge sent, in order."""

    def __init__(self) -> None:
        self.said: list[tuple[str, str]] = []
        self.news = asyncio.Event()
        self.script: Any = None

    async def messages(self):
        async for message in self.script(self):
            yield message

    def send(self, chat: str, text: str) -> None:
        self.said.append((chat, text))
        self.news.set()

    async def heard(self, chat: str, start: str) -> str:
        while True:
            for said_chat, text in self.said:
                if said_chat == chat and text.startswith(start):
                    return text
            self.news.clear()
            await self.news.wait()


def test_the_example_bridge_tells_the_chat_when_a_message_meets_scvd_gone_first(make_daemon, model, scv_home,
                                                                                workspace, tmp_path, monkeypatch):
    """scvd went away while alice's turn waited for the owner, and bob's message met the closed
    connection before the relay did: the relay was cancelled unheard, so alice never learnt her message
    was lost, and her turn stayed running: the bridge never exited when its input closed."""
    m = model(Calls(("find_tools", {"query": "write"})),
              Calls(("write", {"path": "hi.txt", "content": "hi\n", "mode": "create"})), Text("hi bob"))
    d, _ = daemon_for(make_daemon, scv_home, m, workspace, tmp_path)
    monkeypatch.setenv("SCV_HOME", str(scv_home))
    bridge_mod = load_bridge()
    app = ScriptedApp()

    async def script(app: ScriptedApp):
        yield "alice", "write hi.txt please"
        await app.heard(bridge_mod.OWNER, "alice wants write")
        d.proc.kill()
        await bridge.client.link.closed  # the connection is lost; the relay has not read that yet
        make_daemon(home=scv_home)  # blocks the loop: bob's message comes before the relay runs
        yield "bob", "hello"
        await app.heard("bob", "hi bob")
        assert ("alice", "(scvd went away before answering; send your message again)") in app.said

    app.script = script
    bridge = bridge_mod.Bridge(app, str(workspace), tmp_path / "b.json")
    asyncio.run(asyncio.wait_for(bridge.run(), 60))  # it ends: no turn is left running
    assert not (workspace / "hi.txt").exists()


def test_the_example_bridge_declines_what_waits_for_the_owner_once_its_input_closed(make_daemon, model, scv_home,
                                                                                    workspace, tmp_path):
    """Input closed while a turn waited for the owner: nobody could type /approve or /answer any more,
    yet the bridge waited for the turn, out approvals.timeout_seconds (15 minutes) for an approval and
    for ever for a question. Both are declined now, and the model's answer still reaches the chat."""
    m = model(Calls(("find_tools", {"query": "write"})),
              Calls(("write", {"path": "hi.txt", "content": "hi\n", "mode": "create"})),
              Calls(("ask_user", {"question": "which file, then?"})), Text("nothing written"))
    d, argv = daemon_for(make_daemon, scv_home, m, workspace, tmp_path)
    with running(argv, d.env) as proc:
        say(proc, "alice: write hi.txt please")
        read_until(proc, r"^\[owner\] alice wants write")
        assert ends(proc)
        assert proc.stdout.read().endswith("[alice] nothing written\n")
    denied, answered = m.outputs(2)[-1], m.outputs(3)[-1]
    assert json.loads(denied)["error"]["kind"] == "denied" and "the owner's console closed" in denied
    assert json.loads(answered)["result"]["answer"] == \
        "(no answer: the owner's console closed: nobody is left to decide this)"
    assert not (workspace / "hi.txt").exists()


def test_the_example_bridge_tells_the_owner_what_a_chats_transcript_lost_or_could_not_keep(make_daemon, model,
                                                                                           scv_home, workspace,
                                                                                           tmp_path):
    """A damaged transcript line, a full disk: scvd says so in chat.opened and the turn's end, and the
    owner, who can look at the disk, hears it."""
    m = model(Text("one"), Text("two"))
    d, argv = daemon_for(make_daemon, scv_home, m, workspace, tmp_path)
    path = scv_home / "state" / "chat" / "kdamaged.jsonl"
    Transcripts(path.parent).append("kdamaged", [Opened(workspace=str(workspace), provider="test"),
                                                 UserText(text="hi", turn="t1")])
    with path.open("ab") as f:
        f.write(b"\xff damaged\n")
    (tmp_path / "b.json").write_text(json.dumps({"alice": "kdamaged"}))
    with running(argv, d.env) as proc:
        say(proc, "alice: hello")
        told = read_until(proc, r"^\[owner\] ")
        assert told.startswith("[owner] alice: 1 line(s) of this conversation's transcript could not be read back "
                               "(line 3; damaged)"), told
        assert read_until(proc, r"^\[alice\] ") == "[alice] one\n"
        with full(path):
            say(proc, "alice: again")
            assert read_until(proc, r"^\[alice\] ") == "[alice] two\n"
            told = read_until(proc, r"^\[owner\] ")
        assert told.startswith("[owner] alice: the transcript of conversation kdamaged could not be written"), told
        assert ends(proc)



def ctrl_c_in_a_terminal(argv: list[str], env: dict[str, str], typed: str, shown: str) -> tuple[int, str]:
    """Run `argv` in a terminal of its own, as from a shell: type `typed`, and once its output holds
    `shown`, Ctrl-C (the terminal sends SIGINT). Its exit status and all it showed."""
    pid, fd = pty.fork()
    if pid == 0:  # the child: on the pty, its controlling terminal
        try:
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.execve(argv[0], argv, env)
        finally:
            os._exit(127)
    out = b""
    try:
        os.write(fd, typed.encode())
        while shown.encode() not in out:
            out += os.read(fd, 65536)
        os.write(fd, b"\x03")
        for _ in range(300):  # 30 s: it may not end at all
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                with contextlib.suppress(OSError):  # what it wrote before it ended; EIO once all is read
                    while chunk := os.read(fd, 65536):
                        out += chunk
                return os.waitstatus_to_exitcode(status), out.decode(errors="replace")
            time.sleep(0.1)
        raise AssertionError(f"still running 30 s after Ctrl-C; it showed: {out.decode(errors='replace')}")
    finally:
        with contextlib.suppress(ProcessLookupError, ChildProcessError):
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        os.close(fd)


def test_the_example_bridge_exits_quietly_with_130_on_ctrl_c_waiting_for_scvd(scv_home, workspace, tmp_path):
    """Ctrl-C while no scvd answered printed a KeyboardInterrupt and CancelledError traceback."""
    from conftest import base_env

    env = base_env(scv_home, SCV_SOCKET=str(tmp_path / "none.sock"))
    argv = [sys.executable, str(BRIDGE), "--workspace", str(workspace), "--state", str(tmp_path / "b.json")]
    status, shown = ctrl_c_in_a_terminal(argv, env, "", "waiting for scvd: ")
    assert status == 130 and "Traceback" not in shown, shown


def test_the_example_bridge_exits_saying_so_when_its_socket_is_no_scvds(scv_home, workspace, tmp_path):
    """SCV_SOCKET names a regular file: no scvd will ever answer there, so the bridge exits with the
    reason instead of printing "waiting for scvd" for good."""
    from conftest import base_env

    (tmp_path / "plain").write_text("not a socket")
    env = base_env(scv_home, SCV_SOCKET=str(tmp_path / "plain"))
    argv = [sys.executable, str(BRIDGE), "--workspace", str(workspace), "--state", str(tmp_path / "b.json")]
    done = subprocess.run(argv, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "is not an scvd socket" in done.stderr, done.stderr
    assert "waiting for scvd" not in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_the_example_bridge_exits_quietly_with_130_on_ctrl_c_while_it_waits_for_input(make_daemon, model, scv_home,
                                                                                      workspace, tmp_path):
    """Connected, a Ctrl-C printed a traceback and left the bridge running, a second one too: the
    readline waiting for input sat in asyncio's default executor, whose threads asyncio.run waits for."""
    d, argv = daemon_for(make_daemon, scv_home, model(), workspace, tmp_path)
    # answered: connected, and reading the next line
    status, shown = ctrl_c_in_a_terminal(argv, d.env, "owner: /nope\n", "[owner] commands: ")
    assert status == 130 and "Traceback" not in shown, shown
