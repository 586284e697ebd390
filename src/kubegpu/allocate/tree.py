"""The group tree of a topology: the structure that makes exact allocation fast.

Split a set of GPUs at its most expensive link cost ``M``: GPUs joined by cheaper links fall into
components, and every pair across two components costs exactly ``M``. Repeat inside each component.
A set whose cheaper-link graph stays connected cannot be split this way: it becomes a ``Block`` and is
searched by branch and bound. NVLink islands behind PCIe switches behind sockets (DGX, HGX, PCIe
servers, NVL domains) split all the way down to cliques, so the allocator runs a small dynamic
programme instead of a search.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from dataclasses import dataclass

from kubegpu.model.topology import Topology

__all__ = ["Block", "Clique", "Split", "TreeNode", "group_tree"]


@dataclass(frozen=True, kw_only=True)
class Clique:
    """GPUs whose every pair costs ``cost`` units: interchangeable but for their indices."""

    members: tuple[int, ...]
    cost: int


@dataclass(frozen=True, kw_only=True)
class Block:
    """GPUs with no uniform split: searched exactly by branch and bound."""

    members: tuple[int, ...]


@dataclass(frozen=True, kw_only=True)
class Split:
    """Children whose cross pairs all cost ``cost`` units."""

    children: tuple[TreeNode, ...]
    cost: int
    members: tuple[int, ...]


TreeNode = Clique | Block | Split


def _build(members: Sequence[int], units: tuple[tuple[int, ...], ...]) -> TreeNode:
    if len(members) == 1:
        return Clique(members=(members[0],), cost=0)
    top = max(units[a][b] for i, a in enumerate(members) for b in members[i + 1 :])
    parent = {m: m for m in members}

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for i, a in enumerate(members):
        row = units[a]
        for b in members[i + 1 :]:
            if row[b] < top:
                ra, rb = find(a), find(b)
                if ra != rb:
                    parent[ra] = rb
    comps: dict[int, list[int]] = {}
    for m in members:
        comps.setdefault(find(m), []).append(m)
    if len(comps) == 1:
        return Block(members=tuple(members))
    if len(comps) == len(members):
        return Clique(members=tuple(members), cost=top)
    children = tuple(_build(c, units) for c in sorted(comps.values()))
    return Split(children=children, cost=top, members=tuple(members))


_BY_ID: dict[int, tuple[weakref.ref[Topology], TreeNode]] = {}


def group_tree(topology: Topology) -> TreeNode:
    """The group tree of the whole topology, computed once per ``Topology`` object."""
    hit = _BY_ID.get(id(topology))
    if hit is not None and hit[0]() is topology:
        return hit[1]
    tree = _build(list(range(topology.n)), topology.units)
    key = id(topology)
    _BY_ID[key] = (weakref.ref(topology), tree)
    weakref.finalize(topology, _BY_ID.pop, key, None)
    return tree
