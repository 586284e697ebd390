"""The exact allocator: optimal, valid, deterministic, and the seed's numbers."""

from __future__ import annotations

from dataclasses import replace
from itertools import combinations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kubegpu.allocate import choose, choose_scored, choose_simple
from kubegpu.errors import AllocationError
from kubegpu.model.topology import Link, LinkKind, Topology

SEED = Topology.from_groups(8, [(0, 1, 2, 3), (4, 5, 6, 7)])


def test_seed_case_two_gpus_stays_in_the_partly_used_group() -> None:
    choice = choose_scored(SEED, [2, 3, 4, 5, 6, 7], 2)
    assert choice.devices == (2, 3)
    assert choice.cost == 1


def test_seed_case_four_gpus_takes_the_whole_free_group() -> None:
    choice = choose_scored(SEED, [2, 3, 4, 5, 6, 7], 4)
    assert choice.devices == (4, 5, 6, 7)
    assert choice.cost == 6
    assert SEED.set_cost([2, 3, 4, 5]) == 18


def test_honours_must_include_even_when_it_costs_more() -> None:
    choice = choose_scored(SEED, range(8), 4, must_include=[0, 4])
    assert {0, 4} <= set(choice.devices)
    assert len(choice.devices) == 4
    # three in one group and the forced fourth across: 3 inside pairs + 3 cross pairs = 3 + 12
    assert choice.devices == (0, 1, 2, 4)
    assert choice.cost == 15


@pytest.mark.parametrize(
    ("available", "count", "must", "message"),
    [
        ([0, 1], 3, [], "only 2 are available"),
        ([0, 1], 1, [5], "not among the available"),
        ([0, 9], 1, [], "unknown GPU index 9"),
        ([0, 1, 2], 1, [0, 1], "do not fit"),
        ([0, 1, 2], 0, [], "at least one"),
    ],
)
def test_impossible_requests_raise_a_clear_error(
    available: list[int], count: int, must: list[int], message: str
) -> None:
    with pytest.raises(AllocationError, match=message):
        choose(SEED, available, count, must)


def test_simple_fallback_takes_must_include_then_lowest_indices() -> None:
    assert choose_simple([7, 2, 5, 3], 3, [7]) == (2, 3, 7)
    with pytest.raises(AllocationError):
        choose_simple([1], 2)


def _matrix_topology(n: int, weights: list[int]) -> Topology:
    costs = [[0.0] * n for _ in range(n)]
    it = iter(weights)
    for i in range(n):
        for j in range(i + 1, n):
            costs[i][j] = costs[j][i] = float(next(it))
    links = [
        [Link(kind=LinkKind.SELF) if i == j else Link(kind=LinkKind.SYS) for j in range(n)] for i in range(n)
    ]
    return Topology.from_links(links, costs=costs)


@st.composite
def requests(draw: st.DrawFn) -> tuple[Topology, list[int], int, list[int]]:
    n = draw(st.integers(min_value=1, max_value=10))
    weights = draw(st.lists(st.integers(1, 6), min_size=n * (n - 1) // 2, max_size=n * (n - 1) // 2))
    topo = _matrix_topology(n, weights)
    available = sorted(draw(st.sets(st.integers(0, n - 1), min_size=1)))
    count = draw(st.integers(1, len(available)))
    must = sorted(draw(st.sets(st.sampled_from(available), max_size=count)))
    return topo, available, count, must


@settings(max_examples=300, deadline=None)
@given(requests())
def test_cost_equals_brute_force_minimum_on_any_matrix(
    req: tuple[Topology, list[int], int, list[int]],
) -> None:
    topo, available, count, must = req
    choice = choose_scored(topo, available, count, must)
    assert len(choice.devices) == count
    assert len(set(choice.devices)) == count
    assert set(choice.devices) <= set(available)
    assert set(must) <= set(choice.devices)
    brute = min(topo.set_units(c) for c in combinations(available, count) if set(must) <= set(c))
    assert choice.cost_units == brute == topo.set_units(choice.devices)
    assert choose(topo, list(reversed(available)), count, must) == choice.devices


@st.composite
def grouped(draw: st.DrawFn) -> tuple[Topology, list[tuple[int, ...]], list[int], int, list[int]]:
    n = draw(st.integers(min_value=2, max_value=10))
    labels = draw(st.lists(st.integers(0, 3), min_size=n, max_size=n))
    groups = [tuple(i for i in range(n) if labels[i] == g) for g in sorted(set(labels))]
    inside = draw(st.integers(1, 3))
    across = draw(st.integers(inside + 1, 8))
    topo = Topology.from_groups(n, groups, inside=inside, across=across)
    available = sorted(draw(st.sets(st.integers(0, n - 1), min_size=1)))
    count = draw(st.integers(1, len(available)))
    must = sorted(draw(st.sets(st.sampled_from(available), max_size=count)))
    return topo, groups, available, count, must


@settings(max_examples=300, deadline=None)
@given(grouped())
def test_ties_keep_the_largest_free_groups_then_lowest_indices(
    req: tuple[Topology, list[tuple[int, ...]], list[int], int, list[int]],
) -> None:
    topo, groups, available, count, must = req

    def key(c: tuple[int, ...]) -> tuple[int, tuple[int, ...], tuple[int, ...]]:
        free = sorted(
            (
                sum(1 for g in group if g in available and g not in c)
                for group in groups
                if set(group) & set(available)
            ),
            reverse=True,
        )
        return topo.set_units(c), tuple(-f for f in free), c

    expected = min((c for c in combinations(available, count) if set(must) <= set(c)), key=key)
    assert choose(topo, available, count, must) == expected


def _numa_key(topo: Topology, c: tuple[int, ...]) -> int:
    nodes = {topo.numa[g] for g in c}
    return 0 if len(nodes) == 1 and None not in nodes else 1


@st.composite
def grouped_numa(draw: st.DrawFn) -> tuple[Topology, list[tuple[int, ...]], list[int], int, list[int]]:
    topo, groups, available, count, must = draw(grouped())
    numa = draw(st.lists(st.one_of(st.none(), st.integers(0, 2)), min_size=topo.n, max_size=topo.n))
    return replace(topo, numa=tuple(numa)), groups, available, count, must


@settings(max_examples=300, deadline=None)
@given(grouped_numa())
def test_ties_prefer_one_numa_node_then_free_groups_then_indices(
    req: tuple[Topology, list[tuple[int, ...]], list[int], int, list[int]],
) -> None:
    topo, groups, available, count, must = req

    def key(c: tuple[int, ...]) -> tuple[int, int, tuple[int, ...], tuple[int, ...]]:
        free = sorted(
            (
                sum(1 for g in group if g in available and g not in c)
                for group in groups
                if set(group) & set(available)
            ),
            reverse=True,
        )
        return topo.set_units(c), _numa_key(topo, c), tuple(-f for f in free), c

    expected = min((c for c in combinations(available, count) if set(must) <= set(c)), key=key)
    assert choose(topo, available, count, must) == expected


@st.composite
def matrix_numa(draw: st.DrawFn) -> tuple[Topology, list[int], int, list[int]]:
    topo, available, count, must = draw(requests())
    numa = draw(st.lists(st.one_of(st.none(), st.integers(0, 1)), min_size=topo.n, max_size=topo.n))
    return replace(topo, numa=tuple(numa)), available, count, must


@settings(max_examples=200, deadline=None)
@given(matrix_numa())
def test_numa_never_costs_more_and_wins_every_cost_tie(
    req: tuple[Topology, list[int], int, list[int]],
) -> None:
    topo, available, count, must = req
    choice = choose_scored(topo, available, count, must)
    sets = [c for c in combinations(available, count) if set(must) <= set(c)]
    brute = min(topo.set_units(c) for c in sets)
    assert choice.cost_units == brute
    if any(topo.set_units(c) == brute and _numa_key(topo, c) == 0 for c in sets):
        assert topo.on_one_numa_node(choice.devices)


def test_numa_breaks_a_tie_between_equal_nvswitch_sets() -> None:
    nv, x = Link.parse("NV18"), Link.parse("X")
    links = [[x if i == j else nv for j in range(8)] for i in range(8)]
    topo = Topology.from_links(links, numa=[0, 0, 0, 0, 1, 1, 1, 1])
    # every 4-set costs the same; 4-7 sit on one NUMA node, the lowest indices 2-5 do not
    assert choose(topo, range(2, 8), 4) == (4, 5, 6, 7)
    assert choose(Topology.from_links(links), range(2, 8), 4) == (2, 3, 4, 5)
