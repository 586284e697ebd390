"""Composes a node agent: source -> inventory -> device plugin servers (not built yet)."""
