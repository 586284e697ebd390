"""health layer (see docs/architecture.md)."""
