"""The fallback choice when topology is unknown: must-include GPUs first, then the lowest indices."""

from __future__ import annotations

from collections.abc import Iterable

from kubegpu.errors import AllocationError

__all__ = ["choose_simple"]


def choose_simple(available: Iterable[int], count: int, must_include: Iterable[int] = ()) -> tuple[int, ...]:
    """Must-include devices plus the lowest-indexed available ones, sorted; same errors as ``choose``."""
    avail = sorted(set(available))
    must = sorted(set(must_include))
    if count < 1:
        raise AllocationError(f"asked for {count} GPUs; ask for at least one")
    missing = [m for m in must if m not in avail]
    if missing:
        raise AllocationError(f"must-include GPU {missing[0]} is not among the available GPUs")
    if len(must) > count:
        raise AllocationError(f"{len(must)} must-include GPUs do not fit in a request for {count}")
    if count > len(avail):
        raise AllocationError(f"asked for {count} GPUs but only {len(avail)} are available")
    rest = [a for a in avail if a not in must][: count - len(must)]
    return tuple(sorted(must + rest))
