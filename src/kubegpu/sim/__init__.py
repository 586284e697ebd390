"""sim layer (see docs/architecture.md)."""
