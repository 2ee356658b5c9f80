"""`scvctl exec` and `scvctl chat` as a person runs them: real processes, a real daemon, a scripted model."""

from __future__ import annotations

import hashlib
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import daemon_forks
from chat_model import model  # noqa: F401 (a fixture)
from chat_model import Calls, Hang, Status, Text
from harness import make_wrapped  # noqa: F401 (a fixture)
from scvctl.client import AGAIN
from scvd import protocol as p
from scvd.chat.pipeline import NO_APPROVER

ROOT = Path(__file__).resolve().parents[2]
# real scvctl processes and a terminal: about a minute in all; what they show is the client's, the
# same on either loop of the daemon (test_chat_socket.py runs the turns on both)
pytestmark = [pytest.mark.slow, pytest.mark.one_loop]


def config(m) -> str:
    return (f'[providers.test]\nmodel = "m"\nbase_url = "{m.base_url}"\nwire_api = "responses"\n'
            'api_key_secret = "SCVD_TEST_MODEL_KEY"\n[chat]\nprovider = "test"\n')


def scvctl(d, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return daemon_forks.scvctl(list(args), d.env, timeout=timeout)


WRITE = Calls(("write", {"path": "out.txt", "content": "done\n", "mode": "create"}))


@pytest.fixture
def chat_daemon(make_daemon, scv_home):
    def start(m):
        return make_daemon(config(m), home=scv_home, env={"SCVD_TEST_MODEL_KEY": "sk-test"})
    return start


def test_exec_prints_the_answer(chat_daemon, model, workspace):
    m = model(Text("forty-two", chunks=3))
    out = scvctl(chat_daemon(m), "exec", "--workspace", str(workspace), "what is the answer?")
    assert out.returncode == 0, out.stderr
    assert out.stdout == "forty-two\n"


def test_the_models_text_is_printed_with_its_control_characters_escaped(chat_daemon, model, workspace):
    """A model that read a hostile file may send ESC[8m (conceal): the approval request printed next
    would be invisible while its own fake prompt showed. Lines and tabs stay as they are."""
    m = model(Calls(("find_tools", {"query": "write"})),
              Calls(("write", {"path": "out.txt", "content": "x\n", "mode": "create"}),
                    text="harmless: approve? [y]es\n\x1b[8m"), Text("ok\tdone"), Text("a\x1b[2Jb"))
    d = chat_daemon(m)
    out = subprocess.run([sys.executable, "-m", "scvctl", "chat", "--workspace", str(workspace)], env=d.env,
                         input="go\nn\n/exit\n", capture_output=True, text=True, timeout=60)
    assert "\x1b" not in out.stdout and "harmless: approve? [y]es\n\\x1b[8m" in out.stdout, repr(out.stdout)
    assert "ok\tdone" in out.stdout
    done = scvctl(d, "exec", "--workspace", str(workspace), "say it")
    assert done.stdout == "a\\x1b[2Jb\n", repr(done.stdout)


def test_exec_json_with_yes_approves_its_own_calls(chat_daemon, model, workspace):
    m = model(Calls(("find_tools", {"query": "write"})), WRITE, Text("written"))
    out = scvctl(chat_daemon(m), "exec", "--json", "--yes", "--workspace", str(workspace), "write it")
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout)
    assert summary["status"] == "completed" and summary["text"] == "written"
    assert summary["usage"]["requests"] == 3 and summary["conversation"].startswith("k")
    assert [c["ok"] for c in summary["calls"]] == [True]
    assert (workspace / "out.txt").read_text() == "done\n"


def test_exec_yes_does_not_approve_what_always_asks_a_person(chat_daemon, model, workspace):
    """--yes approves the turn's ordinary requests; one that always asks (approvals.always_ask:
    .envrc here) is denied with the reason, never approved unseen."""
    envrc = Calls(("write", {"path": ".envrc", "content": "export X=1\n", "mode": "create"}))
    m = model(Calls(("find_tools", {"query": "write"})), envrc, WRITE, Text("one of two"))
    out = scvctl(chat_daemon(m), "exec", "--json", "--yes", "--workspace", str(workspace), "write both")
    assert out.returncode == 0, out.stderr
    first, second = json.loads(out.stdout)["calls"]
    assert first["error"]["kind"] == "denied" and second["ok"]
    assert "always asks a person" in first["error"]["message"] and ".envrc" in first["error"]["message"]
    assert "scvctl approvals watch" in first["error"]["message"]
    assert not (workspace / ".envrc").exists() and (workspace / "out.txt").read_text() == "done\n"


def test_exec_without_yes_is_denied_at_once_naming_the_way_out(chat_daemon, model, workspace):
    m = model(Calls(("find_tools", {"query": "write"})), WRITE, Text("could not write"))
    out = scvctl(chat_daemon(m), "exec", "--workspace", str(workspace), "write it")
    assert out.returncode == 0, out.stderr  # the turn itself completed: the model heard the denial
    assert f"denied: {NO_APPROVER}" in out.stderr
    assert "--yes" in out.stderr and "scvctl approvals watch" in out.stderr
    assert out.stdout == "could not write\n" and not (workspace / "out.txt").exists()


STORE_TOKEN = [Calls(("find_tools", {"query": "store_secret", "include_system": True})),
               Calls(("store_secret", {"key": "API_TOKEN", "tool": "script_token"}))]
SECRET_VALUE = "tok-typed-at-the-prompt-77"


@pytest.fixture
def secret_daemon(make_daemon, scv_home):
    from test_script_tools import SHOWS_TOKEN, make_tool

    make_tool(scv_home, "token", SHOWS_TOKEN, risk="read_only", secrets=["API_TOKEN"])

    def start(m):
        return make_daemon(config(m), home=scv_home, env={
            "SCVD_TEST_MODEL_KEY": "sk-test", "PYTHON_KEYRING_BACKEND": "keyring.backends.null.Keyring"})
    return start


def test_exec_yes_has_nobody_to_type_a_secret_so_store_secret_fails_at_once(secret_daemon, model, workspace):
    """Headless: the request is not sent to exec (it would wait out approvals.timeout_seconds,
    900 s, unanswered); the model hears at once how the person can store it."""
    m = model(*STORE_TOKEN, Text("ask the owner"))
    out = scvctl(secret_daemon(m), "exec", "--json", "--yes", "--workspace", str(workspace), "fix the token")
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout)
    assert summary["text"] == "ask the owner"
    failed = summary["calls"][-1]
    assert failed["ok"] is False and failed["error"]["kind"] == "unavailable"
    assert "scvctl secrets set API_TOKEN" in failed["error"]["message"]
    assert "scvctl approvals watch" in failed["error"]["message"]


def test_chat_asks_for_a_secret_at_its_prompt_and_never_shows_it(secret_daemon, model, workspace):
    """seed 003's credential auto-heal in the terminal chat: the person types the value there."""
    use = Calls(("script_token", {"text": "x"}))  # the first call of a tool loads its schema
    m = model(*STORE_TOKEN, use, use, Text("the token works"))
    d = secret_daemon(m)
    out = subprocess.run([sys.executable, "-m", "scvctl", "chat", "--workspace", str(workspace)], env=d.env,
                         input=f"fix the token\n{SECRET_VALUE}\n/exit\n", capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert "secret API_TOKEN for script_token" in out.stdout and "input hidden" in out.stdout
    assert "the token works" in out.stdout
    assert SECRET_VALUE not in out.stdout + out.stderr
    assert SECRET_VALUE in (d.home / "secrets.toml").read_text()
    sent = json.dumps(m.requests)
    assert SECRET_VALUE not in sent  # the model heard "stored", then the script's answer
    assert hashlib.sha256(SECRET_VALUE.encode()).hexdigest() in sent  # which had the typed value


def test_chat_ctrl_d_at_the_models_question_declines_it(chat_daemon, model, workspace):
    """The end of input at `answer>` (Ctrl-D) sent the model an empty answer, as if the person had
    replied with nothing: the question is declined instead, and the model is told so."""
    m = model(Calls(("ask_user", {"question": "The tests fail; shall I force-push over main?"})),
              Text("then I will not"))
    d = chat_daemon(m)
    out = subprocess.run([sys.executable, "-m", "scvctl", "chat", "--workspace", str(workspace)], env=d.env,
                         input="fix the tests\n", capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "answer> (declined)" in out.stdout and "then I will not" in out.stdout
    told = json.loads(m.outputs(1)[0])["result"]["answer"]
    assert told == "(no answer: the person declined to answer (Ctrl-D); go on without one)"


def test_chat_with_its_input_piped_in_prints_each_line_after_its_prompt(chat_daemon, model, workspace):
    """Nothing echoes a line read from a pipe: `you> model> forty-two` came out on one line, and the
    answer said nothing of what was asked. Each prompt's line now ends with what was read, escaped."""
    m = model(Text("forty-two"), Calls(("ask_user", {"question": "which book?"})), Text("that one"))
    out = subprocess.run([sys.executable, "-m", "scvctl", "chat", "--workspace", str(workspace)],
                         env=chat_daemon(m).env, input="what is the answer?\nand the \x1b[8mquestion?\nthe guide\n",
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("Ctrl-C stops a turn)\n", 1)[1] == (
        "you> what is the answer?\nmodel> forty-two\n"
        "you> and the \\x1b[8mquestion?\nmodel> \nquestion: which book?\nanswer> the guide\nthat one\n"
        "you> \n")
    assert json.loads(m.outputs(2)[0])["result"]["answer"] == "the guide"


def test_chat_with_its_input_piped_in_exits_1_when_a_turn_failed(chat_daemon, model, workspace):
    """`printf 'hi\\n' | scvctl chat` printed `turn failed (auth)` and exited 0, while `exec` exits 1:
    a script read success. The lines after the failed one are still read and run."""
    m = model(Status(401, "bad key"), Text("forty-two"), Text("fine"))
    d = chat_daemon(m)
    out = subprocess.run([sys.executable, "-m", "scvctl", "chat", "--workspace", str(workspace)], env=d.env,
                         input="hi\nwhat is the answer?\n", capture_output=True, text=True, timeout=60)
    assert out.returncode == 1, out.stderr
    assert "turn failed (auth):" in out.stderr and "model> forty-two\n" in out.stdout
    out = subprocess.run([sys.executable, "-m", "scvctl", "chat", "--workspace", str(workspace)], env=d.env,
                         input="hi\n", capture_output=True, text=True, timeout=60)
    assert (out.returncode, out.stdout.endswith("model> fine\nyou> \n")) == (0, True), out


def test_chat_help_and_quit_are_its_own_commands_not_prompts_the_model_is_paid_for(chat_daemon, model, workspace):
    """`/help` and `/quit` (pi's way out, which docs/operations.md teaches) went to the model as user
    turns: only /clear and /exit were chat's. /help lists the commands; /quit leaves as /exit does."""
    m = model(Text("a paid answer"))
    out = subprocess.run([sys.executable, "-m", "scvctl", "chat", "--workspace", str(workspace)],
                         env=chat_daemon(m).env, input="/help\n  /quit \nnever read\n", capture_output=True,
                         text=True, timeout=60)
    assert (out.returncode, out.stderr) == (0, "")
    assert "/help lists the commands, /clear forgets, /exit leaves, Ctrl-C stops a turn)" in out.stdout
    assert out.stdout.split("Ctrl-C stops a turn)\n", 1)[1] == (
        "you> /help\ncommands, each on a line alone:\n"
        "  /help  this list\n"
        "  /clear forget the conversation's history (what you approved for the session stays approved)\n"
        "  /exit  leave (so does Ctrl-D)\n"
        "  /quit  leave, as /exit does\n"
        "a line that is one /word alone is a command; any other line goes to the model (/etc/hosts too); "
        "Ctrl-C stops a running turn\n"
        "you>   /quit \n")
    assert m.requests == []


def test_chat_refuses_an_unknown_slash_word_but_sends_a_line_starting_with_a_path(chat_daemon, model, workspace):
    """`/hlep` became a turn; a prompt that starts with a path is still one. Piped in, the refused
    line makes the exit 1, as a turn that failed does (the script's line did not run)."""
    m = model(Text("the hosts file"), Text("a directory"))
    out = subprocess.run([sys.executable, "-m", "scvctl", "chat", "--workspace", str(workspace)],
                         env=chat_daemon(m).env, input="/hlep\n/etc/hosts what is this?\n/tmp/x\n",
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 1, out
    assert out.stderr == ("unknown command /hlep: nothing was sent to the model; the commands are /help, /clear, "
                          "/exit, /quit (a line that is one /word alone is a command; any other line goes to the "
                          "model (/etc/hosts too))\n")
    assert "you> /etc/hosts what is this?\nmodel> the hosts file\nyou> /tmp/x\nmodel> a directory\n" in out.stdout
    said = [i["content"] for i in m.requests[-1]["input"] if i.get("role") == "user"]
    assert said == ["/etc/hosts what is this?", "/tmp/x"]


def test_exec_exits_1_on_turn_failed(chat_daemon, model, workspace):
    m = model(Status(401, "bad key"))
    out = scvctl(chat_daemon(m), "exec", "--workspace", str(workspace), "hi")
    assert out.returncode == 1
    assert "turn failed (auth):" in out.stderr and "bad key" in out.stderr
    assert "hint: store a valid key with `scvctl secrets set SCVD_TEST_MODEL_KEY`" in out.stderr




def mid_turn(d, m, *args: str, then, stdin: str = "", shown: str = "") -> subprocess.CompletedProcess:
    """`scvctl ARGS` to whose turn `then(scvctl's process)` happens while the model is answering, once
    scvctl printed `shown` (the model's words reached it: the model having sent them is not enough)."""
    proc = subprocess.Popen([sys.executable, "-m", "scvctl", *args], env=d.env, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        proc.stdin.write(stdin)
        proc.stdin.flush()
        assert m.hung.wait(30)
        seen = b""
        while shown.encode() not in seen:  # before the text wrapper reads anything
            assert select.select([proc.stdout], [], [], 60)[0], f"scvctl printed no {shown!r} in 60 s: {seen!r}"
            chunk = os.read(proc.stdout.fileno(), 4096)
            assert chunk, f"scvctl ended before it printed {shown!r}: {seen!r}"
            seen += chunk
        then(proc)
        out, err = proc.communicate(timeout=60)  # closes stdin: the chat's next prompt would read its end
    finally:
        proc.kill()
    return subprocess.CompletedProcess(proc.args, proc.returncode, seen.decode() + out, err)


def stopped_mid_turn(d, m, *args: str, stdin: str = "", shown: str = "") -> subprocess.CompletedProcess:
    """`scvctl ARGS` whose turn scvd's SIGTERM cuts off while the model is answering."""
    out = mid_turn(d, m, *args, then=lambda _: d.proc.terminate(), stdin=stdin, shown=shown)
    assert d.proc.wait(15) == 0
    return out


@pytest.mark.parametrize("json_out", [False, True])
def test_exec_stopped_by_ctrl_c_exits_130(chat_daemon, model, workspace, json_out):
    """Ctrl-C cancelled the turn and exec exited 1, as for a turn that failed: 130 says interrupted."""
    m = model(Hang("thinking"))
    out = mid_turn(chat_daemon(m), m, "exec", *(["--json"] if json_out else []), "--workspace", str(workspace),
                   "think hard", then=lambda proc: proc.send_signal(signal.SIGINT),
                   shown="" if json_out else "thinking")
    assert out.returncode == 130, out.stderr
    if json_out:
        assert json.loads(out.stdout)["status"] == "cancelled"
    else:
        assert (out.stdout, out.stderr) == ("thinking\n", "\n(turn cancelled)\n")


@pytest.mark.parametrize("json_out", [False, True])
def test_exec_cut_off_by_scvds_stop_exits_3_saying_run_it_again(chat_daemon, model, workspace, json_out):
    """scvd's stop did not fail the turn: as a call it cancelled as it stopped, exec says to run it
    again once scvd is back (exit 3), not `turn failed` (exit 1, as for a bad key)."""
    m = model(Hang("deleting"))
    out = stopped_mid_turn(chat_daemon(m), m, "exec", *(["--json"] if json_out else []), "--workspace",
                           str(workspace), "delete the logs", shown="" if json_out else "deleting")
    assert out.returncode == 3, out.stderr
    assert out.stderr.strip().startswith("scvd stopped before turn t1-") and f": {AGAIN}" in out.stderr, out.stderr
    assert "was done (scvd stopped during the turn)" in out.stderr and "turn failed" not in out.stderr
    if json_out:
        summary = json.loads(out.stdout)
        assert summary["status"] == "failed" and summary["reason"] == "cancelled_by_shutdown"
    else:
        assert out.stdout == "deleting"


def test_chat_cut_off_by_scvds_stop_exits_3_naming_the_conversation(chat_daemon, model, workspace):
    """The chat went back to its prompt with no scvd behind it, and Ctrl-D there exited 0."""
    m = model(Hang("deleting"))
    out = stopped_mid_turn(chat_daemon(m), m, "chat", "--workspace", str(workspace), stdin="delete the logs\n",
                           shown="model> deleting")
    assert out.returncode == 3, out.stderr
    conversation = out.stdout.split("started conversation ")[1].split()[0]
    assert out.stdout.endswith("model> deleting\n"), out.stdout
    assert out.stderr.startswith("scvd stopped before turn t1-"), out.stderr
    assert (f"(scvd stopped during the turn; resume the conversation with --conversation {conversation})"
            f": {AGAIN}") in out.stderr


def test_exec_on_an_unreachable_imported_codex_setup_points_at_that_setup(make_daemon, scv_home, workspace):
    """The hint said `check providers.codex.base_url`: no such key exists, and a [providers.codex] table
    would replace the import. The base_url is in the Codex setup `scvctl agents import codex` copied."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]  # nothing listens there once closed
    codex = scv_home / "adapters" / "codex"
    codex.mkdir(parents=True)
    (codex / "config.toml").write_text(
        f'model = "m"\nmodel_provider = "relay"\n[model_providers.relay]\nbase_url = "http://127.0.0.1:{dead}/v1"\n'
        'requires_openai_auth = true\n')
    (codex / "auth.json").write_text('{"OPENAI_API_KEY": "sk-test"}')
    out = scvctl(make_daemon(home=scv_home), "exec", "--workspace", str(workspace), "hi")
    assert out.returncode == 1 and "turn failed (provider_error): cannot reach provider 'codex'" in out.stderr
    assert "hint: check the base_url of the imported Codex setup (`scvctl agents import codex`)" in out.stderr, \
        out.stderr
    assert "providers.codex" not in out.stderr


# --- scvctl chat in tmux --------------------------------------------------------------------


class Tmux:
    """A private tmux server (its own socket) running one command; the pane is read as a person sees it."""

    def __init__(self, tmp: Path, command: list[str], env: dict[str, str]) -> None:
        self.sock = str(tmp / "tmux.sock")
        cmdline = " ".join(f"'{a}'" for a in command)
        exports = " ".join(f"{k}='{v}'" for k, v in env.items() if k.startswith(("SCV", "PYTHON", "PATH")))
        self.run("new-session", "-d", "-x", "160", "-y", "50", f"env {exports} {cmdline}; sleep 60")

    def run(self, *args: str) -> str:
        return subprocess.run(["tmux", "-S", self.sock, *args], check=True, capture_output=True, text=True,
                              timeout=15).stdout

    def send(self, *keys: str) -> None:
        self.run("send-keys", "-t", "0", *keys)

    def pane(self) -> str:
        return self.run("capture-pane", "-p", "-t", "0", "-S", "-100")

    def wait_for(self, text: str, timeout: float = 30) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pane = self.pane()
            if text in pane:
                return pane
            time.sleep(0.1)
        raise AssertionError(f"{text!r} never appeared; the pane:\n{self.pane()}")

    def close(self) -> None:
        subprocess.run(["tmux", "-S", self.sock, "kill-server"], capture_output=True, timeout=15)


@pytest.fixture
def tmux(tmp_path):
    assert shutil.which("tmux"), "tmux is missing: .ci/setup installs it"
    started: list[Tmux] = []

    def start(command: list[str], env: dict[str, str]) -> Tmux:
        started.append(Tmux(tmp_path, command, env))
        return started[-1]

    yield start
    for t in started:
        t.close()


def test_chat_in_tmux_prompt_inline_approval_and_streamed_answer(chat_daemon, model, tmux, workspace):
    m = model(Calls(("find_tools", {"query": "write"})), WRITE, Text("I wrote out.txt for you", chunks=4))
    d = chat_daemon(m)
    t = tmux([sys.executable, "-m", "scvctl", "chat", "--workspace", str(workspace)], d.env)
    t.wait_for("you>")
    t.send("please write out.txt", "Enter")
    t.wait_for("approve? [y]es / [n]o / [s]ession:")
    t.send("y", "Enter")
    pane = t.wait_for("I wrote out.txt for you")
    assert "started conversation k" in pane
    assert "you> please write out.txt" in pane
    assert "write (filesystem) in" in pane and "write (create) 'out.txt'" in pane, pane
    assert "approve? [y]es / [n]o / [s]ession: y" in pane
    assert "\nmodel>" in pane
    assert (workspace / "out.txt").read_text() == "done\n"
    t.wait_for("you>", 10)
    t.send("/exit", "Enter")


def test_chat_ctrl_c_at_the_approval_prompt_cancels_the_turn_not_the_program(chat_daemon, model, tmux, workspace):
    m = model(Calls(("find_tools", {"query": "write"})), WRITE, Text("still here"))
    d = chat_daemon(m)
    t = tmux([sys.executable, "-m", "scvctl", "chat", "--workspace", str(workspace)], d.env)
    t.wait_for("you>")
    t.send("please write out.txt", "Enter")
    t.wait_for("approve? [y]es / [n]o / [s]ession:")
    t.send("C-c")
    t.wait_for("(turn cancelled)")
    t.wait_for("you>", 15)
    assert not (workspace / "out.txt").exists()
    with d.client() as c:
        assert c.request(p.ApprovalsList).approvals == []  # the cancelled call's request went with it
    t.send("are you there?", "Enter")
    t.wait_for("still here")
    t.send("/exit", "Enter")


def test_chat_ctrl_c_cancels_the_turn_not_the_program_and_clear_forgets(chat_daemon, model, tmux, workspace):
    m = model(Hang("thinking about it"), Text("still here"), Text("fresh start"))
    d = chat_daemon(m)
    t = tmux([sys.executable, "-m", "scvctl", "chat", "--workspace", str(workspace)], d.env)
    t.wait_for("you>")
    t.send("think hard", "Enter")
    t.wait_for("thinking about it")
    t.send("C-c")
    t.wait_for("(turn cancelled)")
    assert m.hung_up.wait(15), "the model's stream stayed open after Ctrl-C"
    t.send("are you there?", "Enter")
    t.wait_for("still here")
    t.send("/clear", "Enter")
    t.wait_for("(history cleared)")
    t.send("hello again", "Enter")
    t.wait_for("fresh start")
    assert [i["content"] for i in m.requests[-1]["input"]] == ["hello again"]
    t.send("/exit", "Enter")


def test_chat_drops_a_line_typed_ahead_before_the_models_question(chat_daemon, model, tmux, workspace):
    """A `yes` typed during the turn (meant for an approval, say) answered the model's question at
    `answer>` before the person could read it, as a typed-ahead `y` once approved a request unread."""
    typed = threading.Event()
    question = Calls(("ask_user", {"question": "The tests fail; shall I force-push over main?"}))
    m = model(lambda body: typed.wait(30) and question, Text("then I will not"))
    d = chat_daemon(m)
    t = tmux([sys.executable, "-m", "scvctl", "chat", "--workspace", str(workspace)], d.env)
    t.wait_for("you>")
    t.send("fix the tests", "Enter")
    t.wait_for("model>")
    t.send("yes", "Enter")  # typed ahead: the terminal holds it until something reads it
    t.wait_for("model> yes")
    typed.set()
    t.wait_for("question: The tests fail; shall I force-push over main?")
    deadline = time.monotonic() + 30
    while not t.pane().rstrip().endswith("answer>"):  # waiting for the person, the `yes` gone
        assert time.monotonic() < deadline and len(m.requests) < 2, t.pane()
        time.sleep(0.1)
    t.send("no", "Enter")  # the person's own answer, once the question is on the screen
    t.wait_for("then I will not")
    assert m.outputs(1) == ['{"ok":true,"result":{"answer":"no"}}']
    t.send("/exit", "Enter")


def test_chat_whose_line_scvd_will_not_start_as_it_stops_exits_3_saying_run_it_again(make_wrapped, model,
                                                                                     scv_home, workspace):
    """A line typed while scvd stops (a call still in its grace) was refused as invalid_request,
    and the chat went back to its prompt, talking to an scvd that was going away."""
    from harness import RawConn, wait_until
    from test_lifecycle import start_call

    m = model(Text("never"))
    d = make_wrapped(config(m) + "[server]\nshutdown_grace_seconds = 60\n", home=scv_home,
                     env={"SCVD_TEST_MODEL_KEY": "sk-test"})
    proc = subprocess.Popen([sys.executable, "-m", "scvctl", "chat", "--workspace", str(workspace)], env=d.env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        with RawConn(d.socket) as busy:
            busy.hello()
            start_call(busy, workspace, "test_stubborn")  # holds the stop in its grace
            seen = b""
            while b"you> " not in seen:  # connected, at its prompt
                assert select.select([proc.stdout], [], [], 60)[0], seen
                assert (chunk := os.read(proc.stdout.fileno(), 4096)), seen
                seen += chunk
            d.proc.terminate()
            wait_until(lambda: "stopping (SIGTERM)" in d.log(), what="the stop")
            out, err = proc.communicate("hello\n", timeout=60)
    finally:
        proc.kill()
        d.proc.kill()
    assert proc.returncode == 3, err
    conversation = seen.decode().split("started conversation ")[1].split()[0]
    assert err.strip() == (f"scvd stopped before the turn started (scvd is stopping; resume the conversation "
                           f"with --conversation {conversation}): {AGAIN}"), err
