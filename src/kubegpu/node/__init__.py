"""node layer: what the agent does to its Node object (see docs/node.md and docs/architecture.md)."""
