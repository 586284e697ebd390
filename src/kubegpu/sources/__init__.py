"""sources layer (see docs/architecture.md)."""
