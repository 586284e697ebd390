"""TEMPORARY stand-in for the core's topology until main lands; deleted before merging."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum
from itertools import combinations


class LinkKind(Enum):
    SELF = "X"
    NVLINK = "NV"
    PIX = "PIX"
    PXB = "PXB"
    PHB = "PHB"
    NODE = "NODE"
    SYS = "SYS"


@dataclass(frozen=True, kw_only=True)
class Link:
    kind: LinkKind
    nvlinks: int = 0


@dataclass(frozen=True, kw_only=True)
class Topology:
    n: int
    links: tuple[tuple[Link, ...], ...]
    cost: tuple[tuple[float, ...], ...]

    def pair_cost(self, a: int, b: int) -> float:
        return self.cost[a][b]

    def set_cost(self, devices: Iterable[int]) -> float:
        return sum(self.cost[a][b] for a, b in combinations(sorted(devices), 2))

    @classmethod
    def from_links(cls, links: list[list[Link]]) -> Topology:
        n = len(links)
        cost = tuple(
            tuple(0.0 if i == j else 1.0 if links[i][j].kind is LinkKind.NVLINK else 4.0 for j in range(n))
            for i in range(n)
        )
        return cls(n=n, links=tuple(tuple(r) for r in links), cost=cost)

    @classmethod
    def from_groups(cls, n: int, groups: Iterable[Iterable[int]]) -> Topology:
        g = {x: i for i, grp in enumerate(groups) for x in grp}
        links = tuple(
            tuple(
                Link(kind=LinkKind.SELF)
                if i == j
                else Link(kind=LinkKind.NVLINK, nvlinks=4)
                if g[i] == g[j]
                else Link(kind=LinkKind.SYS)
                for j in range(n)
            )
            for i in range(n)
        )
        cost = tuple(
            tuple(0.0 if i == j else 1.0 if g[i] == g[j] else 4.0 for j in range(n)) for i in range(n)
        )
        return cls(n=n, links=links, cost=cost)
