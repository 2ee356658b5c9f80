"""Helpers for the adapter tests: the committed fake agent on PATH, a hand-built CallContext.

The fake agent (tests/fake_agent/fake-agent) is never written by a test: symlinks
named claude / codex / pi point at it, so the daemon's PATH lookup finds it and
bash runs it. It records its argv, env and cwd under FAKE_AGENT_LOG. Agents get
only an allow-list of scvd's environment, so FAKE_AGENT_CONFIG passes the fake
agent's own variables on purpose, as a user's config.toml would.
"""

from __future__ import annotations

import asyncio
import os
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import msgspec
import pytest

from scvd import config as config_mod, paths as paths_mod
from scvd.adapters import tools as agent_tools
from scvd.tools.contract import CallContext, Plan

FAKE_AGENT = Path(__file__).resolve().parent / "fake_agent" / "fake-agent"
AGENTS = ("claude", "codex", "pi")
FAKE_AGENT_VARS = ("FAKE_AGENT_LOG", "FAKE_AGENT_MODE", "FAKE_AGENT_READ", "FAKE_AGENT_SLEEP", "FAKE_AGENT_PRINT")


def passing_env(names: list[str]) -> str:
    """The config.toml lines by which each agent gets the variables `names` through pass_env."""
    return "".join(f"[adapters.{agent}]\npass_env = {names!r}\n".replace("'", '"') for agent in AGENTS)


FAKE_AGENT_CONFIG = passing_env(list(FAKE_AGENT_VARS))


def make_fake_bin(directory: Path) -> Path:
    """A folder of symlinks claude / codex / pi -> the committed fake agent."""
    directory.mkdir(parents=True, exist_ok=True)
    for name in AGENTS:
        (directory / name).symlink_to(FAKE_AGENT)
    return directory


def read_log(log: Path) -> tuple[list[str], dict[str, str], str]:
    """argv (without argv[0]), env and cwd the fake agent recorded."""
    argv = log.joinpath("argv").read_bytes().split(b"\0")[:-1]
    env_items = log.joinpath("env").read_bytes().split(b"\0")[:-1]
    env = dict(item.decode().split("=", 1) for item in env_items)
    return [a.decode() for a in argv], env, log.joinpath("cwd").read_text().strip()


def load_config(text: str = "") -> config_mod.Config:
    return msgspec.convert(tomllib.loads(text), config_mod.Config)


@dataclass
class Harness:
    """Runs the agent tools as the pipeline does (decode -> plan -> run), minus approval."""

    workspace: Path
    home: Path
    log: Path
    paths: Any
    config: Any
    fd: int
    sandbox: Any = None

    def tool(self, agent: str) -> agent_tools.AgentTool:
        found = {t.name: t for t in agent_tools.tools(self.config, self.paths)}
        return found[f"agent_{agent}"]  # type: ignore[return-value]

    def ctx(self) -> CallContext:
        return CallContext(call_id="c1", session_id="s1", workspace=self.workspace,
                           workspace_fd=self.fd, config=self.config, paths=self.paths,
                           sandbox=self.sandbox)

    def plan(self, agent: str, **raw: Any) -> Plan:
        t = self.tool(agent)
        return t.plan(t.decode(raw), self.ctx())

    def call(self, agent: str, **raw: Any) -> Any:
        t = self.tool(agent)
        args = t.decode(raw)
        ctx = self.ctx()
        return asyncio.run(t.run(args, t.plan(args, ctx), ctx))

    def recorded(self) -> tuple[list[str], dict[str, str], str]:
        return read_log(self.log)


@pytest.fixture
def fake_bin(tmp_path: Path) -> Path:
    return make_fake_bin(tmp_path / "bin")


@pytest.fixture
def harness(tmp_path: Path, fake_bin: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Harness]:
    """A workspace, an SCV_HOME, and the fake agent first on the daemon's PATH."""
    ws = tmp_path / "ws"
    ws.mkdir()
    home = tmp_path / "scvhome"
    home.mkdir(mode=0o700)
    log = tmp_path / "agent-log"
    monkeypatch.setenv("PATH", f"{fake_bin}{os.pathsep}{os.environ.get('PATH', os.defpath)}")
    monkeypatch.setenv("FAKE_AGENT_LOG", str(log))
    monkeypatch.delenv("FAKE_AGENT_MODE", raising=False)
    paths = paths_mod.resolve({"SCV_HOME": str(home)})
    paths_mod.prepare(paths)
    fd = os.open(ws, os.O_RDONLY | os.O_DIRECTORY)
    yield Harness(workspace=ws.resolve(), home=home, log=log, paths=paths, config=load_config(FAKE_AGENT_CONFIG), fd=fd)
    os.close(fd)
