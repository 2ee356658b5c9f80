"""The delegated agents' names, for a command line built without importing the adapters (spec.py
holds each agent whole; tests/test_scvctl_parser.py keeps the two alike)."""

AGENTS = ("claude", "codex", "pi")
