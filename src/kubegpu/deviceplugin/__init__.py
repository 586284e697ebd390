"""deviceplugin layer (see docs/architecture.md)."""
