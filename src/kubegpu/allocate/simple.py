"""The fallback choice when topology is unknown: must-include GPUs first, then the lowest indices."""

from __future__ import annotations

from collections.abc import Iterable

from kubegpu.allocate.request import check_request

__all__ = ["choose_simple"]


def choose_simple(available: Iterable[int], count: int, must_include: Iterable[int] = ()) -> tuple[int, ...]:
    """Must-include devices plus the lowest-indexed available ones, sorted; same errors as ``choose``."""
    avail, must = check_request(available, count, must_include)
    rest = sorted(avail - must)[: count - len(must)]
    return tuple(sorted(must | set(rest)))
