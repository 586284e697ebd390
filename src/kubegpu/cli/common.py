"""Small pieces every command shares: JSON output, index-list parsing, the console."""

from __future__ import annotations

import json
import re
import sys
from typing import Any

from rich.console import Console

from kubegpu.echo import shorten
from kubegpu.errors import InputError

__all__ = ["console", "parse_indices", "print_json"]

console = Console(highlight=False)
MAX_GPU_INDEX = 4095  # far above any node; bounds a range like 0-99999999 before it is expanded
_ITEM_RE = re.compile(r"(?P<lo>[0-9]+)(?:\s*-\s*(?P<hi>[0-9]+))?")  # ASCII digits only: not '٣'


def print_json(payload: Any) -> None:
    """Print one JSON object on stdout (machine-readable output of every ``--json``)."""
    sys.stdout.write(json.dumps(payload, indent=2, sort_keys=False) + "\n")


def parse_indices(text: str, flag: str) -> list[int]:
    """Parse ``0,2,3`` or ``2-7`` or a mix (ASCII digits); errors name the flag. An empty list, an
    empty item (``1,,2``) and a GPU named twice (``0,0`` or ``0-3,2``) are refused."""
    if not text.strip():
        raise InputError(f"{flag}: empty; give GPU indices or ranges like 0,2,3 or 2-7")
    out: list[int] = []
    for part in text.split(","):
        item = part.strip()
        match = _ITEM_RE.fullmatch(item)
        if match is None:
            what = "an empty item" if not item else f"{shorten(item)} is not a GPU index or range like 2-7"
            raise InputError(f"{flag}: {what} in {shorten(text)}")
        lo, hi = match["lo"], match["hi"] if match["hi"] is not None else match["lo"]
        if len(hi) > 4 or int(hi) > MAX_GPU_INDEX:
            raise InputError(
                f"{flag}: GPU {shorten(hi)} in {item!r} is beyond any node (at most {MAX_GPU_INDEX})"
            )
        a, b = int(lo), int(hi)
        if a > b:
            raise InputError(f"{flag}: range {item!r} runs backwards")
        out.extend(range(a, b + 1))
    seen: set[int] = set()
    for i in out:
        if i in seen:
            raise InputError(f"{flag}: GPU {i} is named twice in {shorten(text)}")
        seen.add(i)
    return out
