"""The environment of a delegated agent: a pure function of the daemon's and the private home.

The agent gets the daemon's environment minus everything that would let it reuse
the parent's configuration or credentials (SCV selectors, provider keys, the
CLIs' own config variables, systemd's notify/activation variables), plus a
HOME, XDG directories and SCV_HOME inside its private home.
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

from ..process import child_env
from .spec import Adapter

# Removed whole families: SCV selectors, systemd's, the agent CLIs' and the providers' own.
REMOVE_PREFIXES = (
    "SCV_",
    "SCVD_",
    "LISTEN_",
    "ANTHROPIC_",
    "OPENAI_",
    "AZURE_OPENAI_",
    "CLAUDE_",  # CLAUDE_CODE_OAUTH_TOKEN, CLAUDE_CONFIG_DIR, ...
    "CODEX_",
    "PI_",  # PI_CODING_AGENT_DIR would point pi at the user's own sign-in
)
REMOVE_SUFFIXES = ("_API_KEY", "_AUTH_TOKEN", "_OAUTH_TOKEN")
REMOVE_NAMES = frozenset({"NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID", "AWS_BEARER_TOKEN_BEDROCK",
                          "PWD", "OLDPWD"})


def is_removed(name: str) -> bool:
    """True for a variable a delegated agent must not see."""
    upper = name.upper()
    return (
        upper in REMOVE_NAMES
        or upper.startswith(REMOVE_PREFIXES)
        or upper.endswith(REMOVE_SUFFIXES)
    )


def home_layout(home: Path) -> dict[str, Path]:
    """The variables that place an agent's state inside its private home."""
    return {
        "HOME": home,
        "XDG_CONFIG_HOME": home / ".config",
        "XDG_DATA_HOME": home / ".local" / "share",
        "XDG_STATE_HOME": home / ".local" / "state",
        "XDG_CACHE_HOME": home / ".cache",
        "SCV_HOME": home / ".scv",
    }


def build_env(base: Mapping[str, str], adapter: Adapter, home: Path) -> dict[str, str]:
    """The agent's environment: `base` scrubbed, plus its private home's variables."""
    extra = {k: str(v) for k, v in home_layout(home).items()}
    extra.update({k: t.replace("{home}", str(home)) for k, t in adapter.set_env.items()})
    return child_env(base, remove=[k for k in base if is_removed(k)], set=extra)
