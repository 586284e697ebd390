"""Small pieces every command shares: JSON output, index-list parsing, the console."""

from __future__ import annotations

import json
import sys
from typing import Any

from rich.console import Console

from kubegpu.errors import InputError

__all__ = ["console", "parse_indices", "print_json"]

console = Console(highlight=False)
MAX_GPU_INDEX = 4095  # far above any node; bounds a range like 0-99999999 before it is expanded


def print_json(payload: Any) -> None:
    """Print one JSON object on stdout (machine-readable output of every ``--json``)."""
    sys.stdout.write(json.dumps(payload, indent=2, sort_keys=False) + "\n")


def parse_indices(text: str, flag: str) -> list[int]:
    """Parse ``0,2,3`` or ``2-7`` or a mix; errors name the flag."""
    out: list[int] = []
    for part in text.split(","):
        item = part.strip()
        if not item:
            continue
        lo, sep, hi = item.partition("-")
        try:
            if sep:
                a, b = int(lo), int(hi)
                if a > b:
                    raise InputError(f"{flag}: range {item!r} runs backwards")
                if b > MAX_GPU_INDEX:
                    raise InputError(
                        f"{flag}: GPU {b} in {item!r} is beyond any node (at most {MAX_GPU_INDEX})"
                    )
                out.extend(range(a, b + 1))
            else:
                out.append(int(item))
        except ValueError as exc:
            raise InputError(f"{flag}: {item!r} is not a GPU index or range like 2-7") from exc
    if any(i < 0 for i in out):
        raise InputError(f"{flag}: GPU indices are not negative")
    return out
