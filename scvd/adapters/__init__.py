"""Native agent adapters: claude, codex and pi as data, their private homes and sign-in.

Nothing outside this package and `scvd/tools/` knows an agent by name. The server
calls `service.launch_spec` / `service.import_setup`; the tools come from
`tools.tools(config, paths)`.
"""
