"""The real claude, codex and pi CLIs (from .ci/install-agents) in scvd's private homes.

Nothing here signs in anywhere: each CLI is shown to be *not* signed in through
its own status command, an imported API key is shown to reach the real codex,
and each agent_* tool turns the CLI's sign-in failure into the scvctl hint.
codex is pointed at loopback servers: one answers 401, so it fails at once; one
speaks the Responses API, so a whole delegated run succeeds with no network.
"""

from __future__ import annotations

import http.server
import json
import os
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Iterator

import pytest

from conftest import ROOT, DaemonProc, base_env
from scvd import protocol as p

pytestmark = pytest.mark.real_agents

BIN = ROOT / ".agents-cli" / "node_modules" / ".bin"
API_KEY = "sk-test-REALAGENTSECRET0042"


@pytest.fixture(scope="module", autouse=True)
def installed() -> None:
    missing = [name for name in ("claude", "codex", "pi") if not (BIN / name).exists()]
    if missing:
        pytest.skip(f"{', '.join(missing)} not in {BIN}: run bash .ci/install-agents")


@pytest.fixture
def real_daemon(make_daemon, tmp_path: Path) -> DaemonProc:
    return make_daemon(env={
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', os.defpath)}",
        "OPENAI_API_KEY": "sk-planted-never-seen",
        "ANTHROPIC_API_KEY": "sk-ant-planted-never-seen",
    })


def scvctl(d: DaemonProc, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "scvctl", *args], env=base_env(d.home),
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout)


class Always401(http.server.BaseHTTPRequestHandler):
    def _answer(self) -> None:
        self.rfile.read(int(self.headers.get("content-length") or 0))
        body = b'{"error":{"message":"Incorrect API key provided","code":"invalid_api_key"}}'
        self.send_response(401)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def loopback_401() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Always401)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


REPLY = "scvd loopback reply 7f3a"


def responses_stream(text: str) -> bytes:
    """One assistant message as the Responses API streams it (server-sent events)."""
    rid, mid = "resp_scvd_1", "msg_scvd_1"
    message = {"type": "message", "id": mid, "role": "assistant"}
    events = [
        {"type": "response.created", "response": {"id": rid}},
        {"type": "response.output_item.added", "output_index": 0,
         "item": {**message, "status": "in_progress", "content": []}},
        *({"type": "response.output_text.delta", "item_id": mid, "output_index": 0, "content_index": 0,
           "delta": part} for part in (text[:9], text[9:])),
        {"type": "response.output_item.done", "output_index": 0, "item": {
            **message, "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}]}},
        {"type": "response.completed", "response": {"id": rid, "usage": {
            "input_tokens": 5, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 4,
            "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 9}}},
    ]
    return "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events).encode()


class ResponsesAPI(http.server.BaseHTTPRequestHandler):
    """POST /v1/responses answers REPLY as a stream; every request is recorded."""

    protocol_version = "HTTP/1.1"
    seen: list[tuple[str, str, str, bytes]]  # (method, path, authorization, body), set per server

    def _record(self) -> bytes:
        body = self.rfile.read(int(self.headers.get("content-length") or 0))
        self.seen.append((self.command, self.path, self.headers.get("authorization", ""), body))
        return body

    def do_POST(self) -> None:
        self._record()
        if not self.path.endswith("/responses"):
            return self._send(404, "application/json", b'{"error":{"message":"not here"}}')
        self._send(200, "text/event-stream", responses_stream(REPLY))

    def do_GET(self) -> None:
        self._record()
        self._send(404, "application/json", b'{"error":{"message":"not here"}}')

    def _send(self, status: int, kind: str, body: bytes) -> None:
        self.send_response(status)
        self.send_header("content-type", kind)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def loopback_responses() -> Iterator[tuple[str, list]]:
    seen: list[tuple[str, str, str, bytes]] = []
    handler = type("Handler", (ResponsesAPI,), {"seen": seen})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1", seen
    server.shutdown()
    server.server_close()


def assert_private(home: Path) -> None:
    for dirpath, dirnames, filenames in os.walk(home):
        for name, want in [(d, 0o700) for d in dirnames] + [(f, None) for f in filenames]:
            path = Path(dirpath) / name
            st = os.lstat(path)
            if not stat.S_ISLNK(st.st_mode):
                assert stat.S_IMODE(st.st_mode) & 0o077 == 0, f"{path} is {stat.S_IMODE(st.st_mode):o}"


def test_status_says_not_signed_in_through_each_real_cli(real_daemon: DaemonProc) -> None:
    out = scvctl(real_daemon, "agents", "status")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["claude  not signed in", "codex   not signed in",
                                       "pi      not signed in"]
    for name in ("claude", "codex", "pi"):
        assert_private(real_daemon.home / "adapters" / name)


def test_imported_api_key_reaches_the_real_codex(real_daemon: DaemonProc, tmp_path: Path) -> None:
    src = tmp_path / "my-codex"
    src.mkdir()
    (src / "auth.json").write_text(json.dumps({"OPENAI_API_KEY": API_KEY}))
    (src / "config.toml").write_text('model = "gpt-5"\n')
    out = scvctl(real_daemon, "agents", "import", "codex", "--from", str(src))
    assert out.returncode == 0, out.stderr
    own = scvctl(real_daemon, "agents", "status", "codex")
    assert own.returncode == 0 and "API key" in own.stdout + own.stderr
    listed = scvctl(real_daemon, "agents", "status")
    assert "codex   signed in (API key)" in listed.stdout
    assert API_KEY not in out.stdout + listed.stdout + real_daemon.log()


def call_approved(d: DaemonProc, workspace: Path, tool: str, arguments: dict) -> p.CallCompleted:
    with d.client(name="bridge") as agent, d.client(name="person") as person:
        sid = agent.open_session(workspace)
        call_id = agent.start_call(sid, tool, arguments)
        deadline = time.monotonic() + 15
        while not (pending := person.request(p.ApprovalsList).approvals):
            assert time.monotonic() < deadline, "no approval request arrived"
            time.sleep(0.05)
        person.request(p.ApprovalDecide, approval_id=pending[0].approval_id, decision="approve")
        return agent.wait_call(call_id)


def test_agent_codex_not_signed_in_gets_the_hint(real_daemon: DaemonProc, tmp_path: Path,
                                                 workspace: Path, loopback_401: str) -> None:
    src = tmp_path / "relay-codex"
    src.mkdir()
    (src / "config.toml").write_text(
        'model = "gpt-5"\nmodel_provider = "relay"\n\n[model_providers.relay]\nname = "relay"\n'
        f'base_url = "{loopback_401}"\nwire_api = "responses"\n'
        "request_max_retries = 0\nstream_max_retries = 0\n")
    assert scvctl(real_daemon, "agents", "import", "codex", "--from", str(src)).returncode == 0
    done = call_approved(real_daemon, workspace, "agent_codex",
                         {"prompt": "Say hello.", "timeout_seconds": 120})
    assert done.ok, done.error
    assert done.result["exit_code"] != 0 and not done.result["timed_out"]
    assert "401" in done.result["output"]
    assert "scvctl agents login codex" in done.result["hint"]
    assert_private(real_daemon.home / "adapters" / "codex")


@pytest.mark.parametrize("agent", ["claude", "pi"])
def test_agent_not_signed_in_gets_the_hint(real_daemon: DaemonProc, workspace: Path, agent: str) -> None:
    done = call_approved(real_daemon, workspace, f"agent_{agent}",
                         {"prompt": "Say hello.", "timeout_seconds": 120})
    assert done.ok, done.error
    assert done.result["exit_code"] != 0 and not done.result["timed_out"]
    assert f"scvctl agents login {agent}" in done.result["hint"]
    assert_private(real_daemon.home / "adapters" / agent)


def test_agent_codex_runs_outside_git_against_a_loopback_responses_api(
        real_daemon: DaemonProc, tmp_path: Path, workspace: Path,
        loopback_responses: tuple[str, list]) -> None:
    """codex exec outside any git repository: --skip-git-repo-check, since scvd's approval is the trust."""
    url, seen = loopback_responses
    src = tmp_path / "relay-codex"
    src.mkdir()
    (src / "auth.json").write_text(json.dumps({"OPENAI_API_KEY": API_KEY}))
    (src / "config.toml").write_text(
        'model = "gpt-5"\nmodel_provider = "relay"\n\n[model_providers.relay]\nname = "relay"\n'
        f'base_url = "{url}"\nwire_api = "responses"\nrequires_openai_auth = true\n'
        "request_max_retries = 0\nstream_max_retries = 0\n")
    assert scvctl(real_daemon, "agents", "import", "codex", "--from", str(src)).returncode == 0
    assert not any((d / ".git").exists() for d in (workspace, *workspace.parents))
    done = call_approved(real_daemon, workspace, "agent_codex",
                         {"prompt": "Say the loopback words.", "timeout_seconds": 120})
    assert done.ok, done.error
    assert done.result["exit_code"] == 0, done.result["output"]
    assert REPLY in done.result["output"] and "hint" not in done.result
    assert "trusted directory" not in done.result["output"]
    posts = [(path, auth, body) for method, path, auth, body in seen if method == "POST"]
    assert posts and all(path == "/v1/responses" for path, _, _ in posts)
    assert posts[0][1] == f"Bearer {API_KEY}"  # the imported auth.json, not the daemon's planted key
    assert b"Say the loopback words." in posts[0][2]
    assert API_KEY not in real_daemon.log()
    assert_private(real_daemon.home / "adapters" / "codex")
