"""The environment of a delegated agent: a pure function of the daemon's and the private home.

The agent gets the daemon's environment minus everything that would let it reuse
the parent's configuration or credentials (SCV selectors, provider keys, the
CLIs' own config variables, systemd's notify/activation variables), plus a
HOME, XDG directories and SCV_HOME inside its private home.
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

from ..process import ALWAYS_REMOVED, ALWAYS_REMOVED_PREFIXES, child_env
from .spec import Adapter

# On top of what child_env() keeps from every child (systemd's variables, SCV_*, SCVD_*),
# whole families: socket activation's, the agent CLIs' and the providers' own.
REMOVE_PREFIXES = (
    "LISTEN_",
    "ANTHROPIC_",
    "OPENAI_",
    "AZURE_OPENAI_",
    "CLAUDE_",  # CLAUDE_CODE_OAUTH_TOKEN, CLAUDE_CONFIG_DIR, ...
    "CODEX_",
    "PI_",  # PI_CODING_AGENT_DIR would point pi at the user's own sign-in
)
REMOVE_SUFFIXES = ("_API_KEY", "_AUTH_TOKEN", "_OAUTH_TOKEN")
REMOVE_NAMES = frozenset({"AWS_BEARER_TOKEN_BEDROCK", "PWD", "OLDPWD"})
_NAMES = REMOVE_NAMES | frozenset(ALWAYS_REMOVED)
_PREFIXES = REMOVE_PREFIXES + ALWAYS_REMOVED_PREFIXES


def is_removed(name: str) -> bool:
    """True for a variable a delegated agent must not see (child_env's own rule included)."""
    upper = name.upper()
    return (
        upper in _NAMES
        or upper.startswith(_PREFIXES)
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
