"""allocate layer (see docs/architecture.md)."""
