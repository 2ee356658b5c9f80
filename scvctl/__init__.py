"""scvctl: the control client of scvd (approvals, agents, status) and a client library for bridges."""
