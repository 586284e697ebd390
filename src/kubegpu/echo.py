"""Bounded echoes: how a message quotes text that a client, a file or the environment supplied.

kubegpu names the offending value in every error, but a value can be anything a client sent or a
file held: a 16 KB device ID echoed whole makes the gRPC status larger than the client accepts (it
sees RESOURCE_EXHAUSTED instead of the refusal), and a 4 MB fault-file value makes a 4 MB log line.
Every echo of such text goes through ``shorten`` (a quoted ``repr``, so control characters cannot
forge log lines either) or ``clip`` (plain text carried into a sentence, such as a fault's detail).
"""

from __future__ import annotations

__all__ = ["ECHO_LIMIT", "clip", "shorten"]

ECHO_LIMIT = 64  # characters of the value kept; real GPU/MIG UUIDs are 40


def _size(value: str) -> str:
    return f"{len(value.encode('utf-8', 'replace'))} bytes"


def shorten(value: object, *, limit: int = ECHO_LIMIT) -> str:
    """``repr(value)``, or its first ``limit`` characters then ``…(N bytes)`` when it is longer."""
    text = repr(value)
    if len(text) <= limit + 2:  # the quotes do not count against the limit
        return text
    size = _size(value) if isinstance(value, str) else f"{len(text)} characters"
    return f"{text[: limit + 1]}…({size})"


def clip(text: str, *, limit: int = 2 * ECHO_LIMIT) -> str:
    """``text`` unquoted, cut to ``limit`` characters then ``…(N bytes)``; newlines become spaces."""
    flat = " ".join(text.splitlines()) if "\n" in text or "\r" in text else text
    if len(flat) <= limit:
        return flat
    return f"{flat[:limit]}…({_size(text)})"
