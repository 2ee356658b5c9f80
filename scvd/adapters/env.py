"""The environment of a delegated agent: a pure function of the daemon's and the private home.

The agent gets only the allow-list of scvd/passenv.py from scvd's environment
(PATH, locale, terminal, proxies, CA bundles, ...), the names its
`adapters.<name>.pass_env` lists, and a HOME, XDG directories and SCV_HOME
(CODEX_HOME for codex) inside its private home. Nothing else reaches it: not
the parent's keys or sign-ins, not cloud or git tokens, not the ssh agent.
"""

from __future__ import annotations

from pathlib import Path
from typing import Collection, Iterable, Mapping

from .. import passenv
from .spec import ADAPTERS, Adapter


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


# what build_env() sets itself, so `pass_env` may not name it
PRIVATE_HOME_NAMES = frozenset(home_layout(Path("/"))) | {k for a in ADAPTERS.values() for k in a.set_env}
# what moves an agent's configuration and sign-in out of its private home (its CLI reads them), so
# `pass_env` may not name it either: the agent would use your own ~/.claude or ~/.pi/agent and rotate
# the tokens your own login holds (seed 000: agent_claude does not read ~/.claude)
OTHER_HOME_NAMES = frozenset({"CLAUDE_CONFIG_DIR", "PI_CODING_AGENT_DIR"})


def passed_names(adapter: Adapter, withheld: Collection[str]) -> list[str]:
    """The adapter's pass_env less `withheld`, what scvd gives none of its children (scvd/secret_names.py):
    the one rule for a run's environment and a sign-in command's."""
    return [name for name in adapter.pass_env if name not in withheld]


def build_env(base: Mapping[str, str], adapter: Adapter, home: Path,
              pass_env: Iterable[str] | None = None) -> dict[str, str]:
    """The agent's environment: `base`'s allowed and passed names (`pass_env`, else the adapter's), plus
    its private home's variables."""
    extra = {k: str(v) for k, v in home_layout(home).items()}
    extra.update({k: t.replace("{home}", str(home)) for k, t in adapter.set_env.items()})
    return passenv.build(base, adapter.pass_env if pass_env is None else pass_env, set=extra)
