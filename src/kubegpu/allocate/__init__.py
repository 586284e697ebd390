"""TEMPORARY stand-in for the core's allocator until main lands."""

from __future__ import annotations

from collections.abc import Iterable
from itertools import combinations

from kubegpu.errors import AllocationError
from kubegpu.model.topology import Topology


def choose(
    topology: Topology, available: Iterable[int], count: int, must_include: Iterable[int] = ()
) -> tuple[int, ...]:
    avail = sorted(set(available))
    must = sorted(set(must_include))
    if any(m not in avail for m in must) or count > len(avail) or count < len(must):
        raise AllocationError("cannot")
    rest = [a for a in avail if a not in must]
    best: tuple[float, tuple[int, ...]] | None = None
    for combo in combinations(rest, count - len(must)):
        s = tuple(sorted((*must, *combo)))
        c = topology.set_cost(s)
        if best is None or c < best[0]:
            best = (c, s)
    assert best is not None
    return best[1]
