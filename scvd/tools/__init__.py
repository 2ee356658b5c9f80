"""Built-in tools. `build_registry()` is the one place that lists them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .contract import Registry, Tool


def builtin_tools(config: Any, paths: Any) -> list[Tool]:
    """Every built-in tool, built for this configuration (some schemas depend on it)."""
    from . import bash, fs, skill, store_secret
    from ..adapters import tools as agent_tools

    tools: list[Tool] = []
    # one line per tool module; each module exposes tools(config, paths) -> list[Tool]
    tools += fs.tools(config, paths)
    tools += skill.tools(config, paths)
    tools += bash.tools(config, paths)
    tools += agent_tools.tools(config, paths)
    tools += store_secret.tools(config, paths)
    return tools


def build_registry(config: Any, paths: Any, extra: list[Tool] | None = None, *, log_skipped: bool = True) -> Registry:
    """A registry of the built-in tools plus `extra` (tests add their own), then the user's
    script tools; a script tool that fails to load is kept in `registry.load_errors` (and logged,
    unless the caller shows them itself)."""
    from . import bash, store_secret
    from .contract import Registry

    registry = Registry()
    for tool in builtin_tools(config, paths):
        # built-ins are linted by tests/test_contract_lint.py, not at every start: the lint
        # generates each tool's JSON schema, a few ms per start for a result fixed in the code
        registry.register(tool, enforce_lint=False)
    for tool in extra or ():
        registry.register(tool)
    if paths is not None:
        from .script import register_scripts

        register_scripts(registry, paths, granted=config.tools.script, log_skipped=log_skipped)
    asker = registry.get(store_secret.StoreSecret.name)
    if isinstance(asker, store_secret.StoreSecret):
        asker.known = registry.get  # its `tool` argument must name a tool of this registry
    shell = registry.get(bash.Bash.name)
    if isinstance(shell, bash.Bash):
        shell.tools_secrets = registry.secret_keys  # their keys stay out of its environment
    return registry
