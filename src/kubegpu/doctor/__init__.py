"""doctor layer (see docs/architecture.md)."""
