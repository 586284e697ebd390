"""The checks every device choice makes before choosing: one place, one set of messages."""

from __future__ import annotations

from collections.abc import Iterable

from kubegpu.errors import AllocationError

__all__ = ["check_request"]


def check_request(
    available: Iterable[int], count: int, must_include: Iterable[int] = (), *, n: int | None = None
) -> tuple[frozenset[int], frozenset[int]]:
    """Validate a request and return ``(available, must_include)`` as sets.

    Raises ``AllocationError`` for indices outside ``0..n-1`` (when ``n`` is known), a count below one,
    must-include GPUs that are not available or do not fit, and requests larger than the free set.
    """
    avail = frozenset(available)
    must = frozenset(must_include)
    if n is not None:
        bad = sorted(d for d in avail | must if not 0 <= d < n)
        if bad:
            raise AllocationError(f"unknown GPU index {bad[0]}: this node has GPUs 0..{n - 1}")
    if count < 1:
        raise AllocationError(f"asked for {count} GPUs; ask for at least one")
    missing = sorted(must - avail)
    if missing:
        raise AllocationError(f"must-include GPU {missing[0]} is not among the available GPUs")
    if len(must) > count:
        raise AllocationError(f"{len(must)} must-include GPUs do not fit in a request for {count}")
    if count > len(avail):
        raise AllocationError(f"asked for {count} GPUs but only {len(avail)} are available")
    return avail, must
