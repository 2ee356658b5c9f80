"""The MCP manager's view of links waiting for a secret: what store_secret and a chat turn are told."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from scvd.config import McpServerConfig, SecretRef
from scvd.mcp.manager import McpServers

LAST_ERROR = "credential_missing: mcp.servers.raw.env T needs the secret K, which is not set"


def link(state: str, needs: tuple[str, ...] = ("K",)) -> SimpleNamespace:
    cfg = McpServerConfig(command="/bin/true", env={"T": SecretRef(secret="K")})
    return SimpleNamespace(name="raw", cfg=cfg, state=state, needs=needs, error=LAST_ERROR,
                           retry_now=lambda stored_at: None, started_since=lambda stored_at: state != "starting")


def servers_with(one: SimpleNamespace) -> McpServers:
    servers = McpServers(host=None)
    servers.links[one.name] = one
    return servers


def test_a_server_between_two_tries_still_waits_for_its_secret():
    # each backoff retry is `starting` while it reads the secrets: a turn then must not lose the line
    for state in ("down", "starting"):
        assert servers_with(link(state)).waiting_for_secrets() == {"raw": ("K",)}
    assert servers_with(link("ready", needs=())).waiting_for_secrets() == {}
    assert servers_with(link("stopped")).waiting_for_secrets() == {}


def test_a_server_still_starting_after_the_wait_is_not_described_by_its_old_error():
    async def came(state: str) -> dict[str, str]:
        servers = servers_with(link(state))
        servers.secret_stored("K", 1.0)
        return await servers.settle("K", timeout=0.05)

    assert asyncio.run(came("starting")) == {
        "raw": "starting: not up within 0.05 s of the secret being stored; it may still come up (scvctl status says)"}
    assert asyncio.run(came("down")) == {"raw": f"down: {LAST_ERROR}"}
