"""scvd: runs an AI agent's tool calls on this machine behind server-enforced approvals."""

__version__ = "0.1.0"
