"""Error codes of the control agents (in addition to the protocol's and training's, docs/protocol.md)."""

AGENT_NOT_FOUND = "AGENT_NOT_FOUND"
"""No agent of that name in this worker (``control_create`` first, or it was closed)."""
AGENT_EXISTS = "AGENT_EXISTS"
"""An agent of that name already exists (pass ``replace``)."""
