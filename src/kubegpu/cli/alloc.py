"""`kubegpu alloc`: not built yet."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Register nothing until the command exists."""
    del app
