"""How a JSON value is named in a message: what a file held where something else was expected."""

from __future__ import annotations

from typing import Any

__all__ = ["describe_json"]


def describe_json(value: Any) -> str:
    """``null``, ``a boolean``, ``the number 5``, ``a string``, ``an object`` or ``a list``."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return f"the number {value}"
    if isinstance(value, str):
        return "a string"
    return "an object" if isinstance(value, dict) else "a list"
