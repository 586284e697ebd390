"""Exact topology-aware device selection: the set of ``count`` GPUs with the lowest total link cost.

The objective is the seed's ``link_cost``: the sum of pairwise costs of the chosen set, which must
contain every must-include GPU and only available GPUs. Among sets of equal cost the winner is one on
a single NUMA node (when the topology knows NUMA nodes), then the one that leaves the best free groups
behind (the multiset of free GPUs per leaf group of the group tree, largest first, compared
lexicographically: keep whole NVLink islands free), then the one with the lowest indices. The result
is exact on every topology:

* the group tree (``tree.py``) turns hierarchical topologies into a dynamic programme over groups:
  choosing ``k_i`` GPUs from children of a split with cross cost ``c`` costs
  ``sum f_i(k_i) + c * sum_{i<j} k_i k_j``; all three parts of the ranking are preserved when two
  disjoint partial choices are joined, so per-count optima compose;
* a block without such structure is searched by depth-first branch and bound in lexicographic order
  with a lower bound from each candidate's marginal cost, so the first optimum found is the
  lexicographically smallest one;
* the NUMA step: when the best set spans NUMA nodes, the same search is run once per NUMA node with
  only that node's GPUs allowed (free groups still counted over all available GPUs); a single-node set
  of the same cost wins. Each restricted search is exact for the rest of the ranking, so the whole is.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from kubegpu.allocate.request import check_request
from kubegpu.allocate.tree import Block, Clique, Split, TreeNode, group_tree
from kubegpu.errors import AllocationError
from kubegpu.model.topology import Topology

__all__ = ["Choice", "choose", "choose_scored"]

Units = tuple[tuple[int, ...], ...]


@dataclass(frozen=True, order=True)
class _Sol:
    """A partial choice inside one subtree; ordering is the ranking (lower is better)."""

    units: int
    free_key: tuple[int, ...]  # minus the free count of each leaf group, ascending
    chosen: tuple[int, ...]  # sorted GPU indices


@dataclass(frozen=True, kw_only=True)
class Choice:
    """The chosen GPUs (sorted) and their total cost; ``searched`` is the search effort: the nodes the
    branch and bound expanded (0 where the group tree left nothing to search). Not part of equality."""

    devices: tuple[int, ...]
    cost_units: int
    searched: int = field(default=0, compare=False)

    @property
    def cost(self) -> float:
        return self.cost_units / 1000


class _Stats:
    """Search effort of one choice (``Choice.searched``)."""

    __slots__ = ("searched",)

    def __init__(self) -> None:
        self.searched = 0


def _restrict(node: TreeNode, avail: frozenset[int]) -> TreeNode | None:
    if isinstance(node, Split):
        kids = [k for k in (_restrict(c, avail) for c in node.children) if k is not None]
        if not kids:
            return None
        if len(kids) == 1:
            return kids[0]
        members = tuple(sorted(m for k in kids for m in k.members))
        return Split(children=tuple(kids), cost=node.cost, members=members)
    members = tuple(m for m in node.members if m in avail)
    if not members:
        return None
    if isinstance(node, Clique):
        return Clique(members=members, cost=node.cost)
    return Block(members=members)


def _merge(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(sorted(a + b))


def _solve_clique(
    node: Clique, must: frozenset[int], hi: int, allowed: frozenset[int] | None
) -> dict[int, _Sol]:
    pool = [m for m in node.members if allowed is None or m in allowed]
    forced = [m for m in pool if m in must]
    others = [m for m in pool if m not in must]
    size = len(node.members)
    out: dict[int, _Sol] = {}
    for k in range(len(forced), min(len(pool), hi) + 1):
        chosen = tuple(sorted(forced + others[: k - len(forced)]))
        out[k] = _Sol(node.cost * k * (k - 1) // 2, (k - size,), chosen)
    return out


def _greedy_units(forced: list[int], cands: list[int], need: int, units: Units, base: int) -> int:
    """Cost of a greedy set: repeatedly add the candidate with the smallest marginal cost."""
    chosen = list(forced)
    pool = list(cands)
    cost = base
    for _ in range(need):
        if chosen:
            best = min(pool, key=lambda c: sum(units[c][x] for x in chosen))
            cost += sum(units[best][x] for x in chosen)
        else:
            best = min(pool, key=lambda c: min((units[c][x] for x in pool if x != c), default=0))
        chosen.append(best)
        pool.remove(best)
    return cost


def _best_subset(
    members: tuple[int, ...], must: frozenset[int], k: int, units: Units, group_size: int, *, stats: _Stats
) -> _Sol | None:
    """Branch and bound over ``members``: the lexicographically first subset of minimum cost.

    ``group_size`` is the size of the whole leaf group (``members`` may be the allowed part of it).
    """
    forced = [m for m in members if m in must]
    cands = [m for m in members if m not in must]
    need = k - len(forced)
    if need < 0 or need > len(cands):
        return None
    base = sum(units[a][b] for i, a in enumerate(forced) for b in forced[i + 1 :])
    marg = {c: sum(units[c][f] for f in forced) for c in cands}
    # A greedy set gives an early upper bound. It only prunes branches that are strictly worse, so
    # the search still reaches the lexicographically first optimum; once the search has found a set
    # itself, branches that can at best tie are cut too.
    greedy_units = _greedy_units(forced, cands, need, units, base)
    best_units = -1
    best: tuple[int, ...] = ()
    picked: list[int] = []
    ncand = len(cands)
    # Cheapest pair among candidates at or after position i: a bound on pairs still to be added.
    min_pair_from = [0] * (ncand + 1)
    running = 1 << 62
    for i in range(ncand - 1, -1, -1):
        for j in range(i + 1, ncand):
            running = min(running, units[cands[i]][cands[j]])
        min_pair_from[i] = running if running != 1 << 62 else 0

    def dfs(pos: int, cost: int, left: int) -> None:
        nonlocal best_units, best
        stats.searched += 1
        if left == 0:
            if best_units < 0 or cost < best_units:
                best_units = cost
                best = tuple(picked)
            return
        if ncand - pos < left:
            return
        rest = sorted(marg[cands[j]] for j in range(pos, ncand))
        bound = cost + sum(rest[:left]) + min_pair_from[pos] * (left * (left - 1) // 2)
        if best_units >= 0 and bound >= best_units:
            return
        if bound > greedy_units:
            return
        c = cands[pos]
        row = units[c]
        add = marg[c]
        for j in range(pos + 1, ncand):
            marg[cands[j]] += row[cands[j]]
        picked.append(c)
        dfs(pos + 1, cost + add, left - 1)
        picked.pop()
        for j in range(pos + 1, ncand):
            marg[cands[j]] -= row[cands[j]]
        dfs(pos + 1, cost, left)

    dfs(0, base, need)
    if best_units < 0:
        return None
    return _Sol(best_units, (k - group_size,), tuple(sorted(forced + list(best))))


def _solve_block(
    node: Block,
    must: frozenset[int],
    hi: int,
    units: Units,
    *,
    exact: bool,
    allowed: frozenset[int] | None,
    stats: _Stats,
) -> dict[int, _Sol]:
    out: dict[int, _Sol] = {}
    pool = tuple(m for m in node.members if allowed is None or m in allowed)
    lo = hi if exact else sum(1 for m in pool if m in must)
    for k in range(lo, min(len(pool), hi) + 1):
        sol = _best_subset(pool, must, k, units, len(node.members), stats=stats)
        if sol is not None:
            out[k] = sol
    return out


def _solve(
    node: TreeNode,
    must: frozenset[int],
    hi: int,
    units: Units,
    *,
    stats: _Stats,
    exact: bool = False,
    allowed: frozenset[int] | None = None,
) -> dict[int, _Sol]:
    """Best choice of each size ``k <= hi`` inside ``node`` (only ``k == hi`` when ``exact``).

    With ``allowed``, only those GPUs may be chosen; free groups are still counted over ``node``.
    """
    if isinstance(node, Clique):
        return _solve_clique(node, must, hi, allowed)
    if isinstance(node, Block):
        return _solve_block(node, must, hi, units, exact=exact, allowed=allowed, stats=stats)
    table: dict[int, _Sol] = {0: _Sol(0, (), ())}
    for child in node.children:
        options = _solve(child, must, hi, units, allowed=allowed, stats=stats)
        nxt: dict[int, _Sol] = {}
        for total, left in table.items():
            for k, right in options.items():
                size = total + k
                if size > hi:
                    continue
                cost = left.units + right.units + node.cost * total * k
                cur = nxt.get(size)
                if cur is not None and cost > cur.units:
                    continue
                cand = _Sol(cost, _merge(left.free_key, right.free_key), _merge(left.chosen, right.chosen))
                if cur is None or cand < cur:
                    nxt[size] = cand
        table = nxt
    return table


def choose_scored(
    topology: Topology, available: Iterable[int], count: int, must_include: Iterable[int] = ()
) -> Choice:
    """Like ``choose`` but also returns the cost of the chosen set."""
    avail, must = check_request(available, count, must_include, n=topology.n)
    tree = _restrict(group_tree(topology), avail)
    assert tree is not None  # avail is not empty here
    units = topology.units
    stats = _Stats()
    sol = _solve(tree, must, count, units, exact=True, stats=stats).get(count)
    if sol is None:  # pragma: no cover - every size up to len(avail) is reachable
        raise AllocationError(f"no set of {count} GPUs contains the must-include GPUs")
    if topology.numa and not topology.on_one_numa_node(sol.chosen):
        sol = _prefer_one_numa_node(
            topology, tree=tree, avail=avail, must=must, count=count, best=sol, stats=stats
        )
    return Choice(devices=sol.chosen, cost_units=sol.units, searched=stats.searched)


def _prefer_one_numa_node(
    topology: Topology,
    *,
    tree: TreeNode,
    avail: frozenset[int],
    must: frozenset[int],
    count: int,
    best: _Sol,
    stats: _Stats,
) -> _Sol:
    """The best set on one NUMA node that costs as little as ``best``, else ``best`` itself."""
    numa = topology.numa
    found: _Sol | None = None
    nodes: set[int] = {n for n in (numa[g] for g in avail) if n is not None}
    for node in sorted(nodes):
        allowed = frozenset(g for g in avail if numa[g] == node)
        if len(allowed) < count or not must <= allowed:
            continue
        sol = _solve(tree, must, count, topology.units, exact=True, allowed=allowed, stats=stats).get(count)
        if sol is not None and sol.units == best.units and (found is None or sol < found):
            found = sol
    return best if found is None else found


def choose(
    topology: Topology, available: Iterable[int], count: int, must_include: Iterable[int] = ()
) -> tuple[int, ...]:
    """The ``count`` available GPUs (sorted indices) with the lowest total pairwise link cost.

    Contains every ``must_include`` GPU; raises ``AllocationError`` for impossible requests
    (unknown indices, must-include GPUs that are not available, too few GPUs).
    """
    return choose_scored(topology, available, count, must_include).devices
