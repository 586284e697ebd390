"""The exact allocator where mutation testing found it unpinned (issue 61).

Irregular link groups (no uniform split inside: searched by branch and bound) inside a split, asked
for fewer GPUs than a group holds, with must-include GPUs among them; and the search effort, counted
in nodes expanded (``Choice.searched``), which must stay far below what a search without pruning
expands.
"""

from __future__ import annotations

import random
from functools import cache
from itertools import combinations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kubegpu.allocate import choose, choose_scored
from kubegpu.allocate.tree import Block, Clique, Split, TreeNode, group_tree
from kubegpu.errors import AllocationError
from kubegpu.model.topology import Link, LinkKind, Topology
from kubegpu.sources.spec import load_node


def _matrix(n: int, cost: dict[tuple[int, int], int]) -> Topology:
    costs = [[0.0] * n for _ in range(n)]
    for (i, j), c in cost.items():
        costs[i][j] = costs[j][i] = float(c)
    links = [
        [Link(kind=LinkKind.SELF) if i == j else Link(kind=LinkKind.SYS) for j in range(n)] for i in range(n)
    ]
    return Topology.from_links(links, costs=costs)


def _leaves(node: TreeNode) -> list[tuple[int, ...]]:
    if isinstance(node, Split):
        return [leaf for child in node.children for leaf in _leaves(child)]
    return [node.members]


def _best_by_brute_force(
    topo: Topology, available: list[int], count: int, must: list[int]
) -> tuple[int, ...] | None:
    """The ranking of the module doc, by enumeration: cost, then the free GPUs per leaf group of the
    group tree (largest first), then the lowest indices."""
    leaves = _leaves(group_tree(topo))

    def key(c: tuple[int, ...]) -> tuple[int, tuple[int, ...], tuple[int, ...]]:
        free = sorted(
            (
                sum(1 for g in leaf if g in available and g not in c)
                for leaf in leaves
                if set(leaf) & set(available)
            ),
            reverse=True,
        )
        return topo.set_units(c), tuple(-f for f in free), c

    sets = [c for c in combinations(available, count) if set(must) <= set(c)]
    return min(sets, key=key) if sets else None


@st.composite
def irregular_groups_in_a_split(draw: st.DrawFn) -> tuple[Topology, list[int], int, list[int]]:
    """Two or three groups; inside a group any cost from 1 to 4 (often a block with no uniform
    split), every pair across groups the same higher cost: the tree is a split of blocks."""
    n = draw(st.integers(min_value=3, max_value=8))
    labels = draw(st.lists(st.integers(0, draw(st.integers(1, 2))), min_size=n, max_size=n))
    across = draw(st.integers(5, 9))
    cost = {
        (i, j): draw(st.integers(1, 4)) if labels[i] == labels[j] else across
        for i in range(n)
        for j in range(i + 1, n)
    }
    topo = _matrix(n, cost)
    available = sorted(draw(st.sets(st.integers(0, n - 1), min_size=1)))
    count = draw(st.integers(1, len(available)))
    must = sorted(draw(st.sets(st.sampled_from(available), max_size=min(count, 3))))
    return topo, available, count, must


@settings(max_examples=400, deadline=None)
@given(irregular_groups_in_a_split())
def test_irregular_groups_inside_a_split_give_the_brute_force_best_set(
    req: tuple[Topology, list[int], int, list[int]],
) -> None:
    topo, available, count, must = req
    choice = choose_scored(topo, available, count, must)
    expected = _best_by_brute_force(topo, available, count, must)
    assert expected is not None
    assert choice.cost_units == topo.set_units(expected) == topo.set_units(choice.devices)
    assert choice.devices == expected
    assert choose(topo, list(reversed(available)), count, list(reversed(must))) == expected


# Two groups of three whose inside links are 1, 1 and 2 (no uniform split: each is a block), 5 across.
_TWO_BLOCKS = _matrix(
    6,
    {
        **{(i, j): 5 for i in range(3) for j in range(3, 6)},
        (0, 1): 1,
        (1, 2): 1,
        (0, 2): 2,
        (3, 4): 1,
        (4, 5): 1,
        (3, 5): 2,
    },
)


def test_the_two_blocks_fixture_is_a_split_of_two_blocks() -> None:
    tree = group_tree(_TWO_BLOCKS)
    assert isinstance(tree, Split) and [type(c) for c in tree.children] == [Block, Block]


@pytest.mark.parametrize(
    ("available", "count", "must", "devices", "cost"),
    [
        (range(6), 2, [], (0, 1), 1),  # fewer GPUs than a block holds
        (range(6), 2, [2], (1, 2), 1),  # a must-include GPU inside a block
        (range(6), 2, [5], (4, 5), 1),  # ... in the second block
        (range(6), 2, [0, 5], (0, 5), 5),  # must-include GPUs in both blocks
        (range(6), 3, [3], (3, 4, 5), 4),  # a whole block, named by one of its GPUs
        (range(6), 4, [0], (0, 1, 2, 3), 19),  # a block and one GPU of the other
        ([0, 2, 3, 4, 5], 2, [], (3, 4), 1),  # the broken block's pair costs 2: the whole one is used
    ],
)
def test_asking_fewer_gpus_than_a_block_holds_inside_a_split(
    available: range | list[int], count: int, must: list[int], devices: tuple[int, ...], cost: int
) -> None:
    choice = choose_scored(_TWO_BLOCKS, available, count, must)
    assert (choice.devices, choice.cost) == (devices, cost)


def test_must_include_gpus_all_in_one_block_still_allocate() -> None:
    # every GPU of the first block is a must-include one: nothing of it is left to search
    assert choose(_TWO_BLOCKS, range(6), 4, must_include=[0, 1, 2]) == (0, 1, 2, 3)
    with pytest.raises(AllocationError, match="do not fit"):
        choose(_TWO_BLOCKS, range(6), 2, must_include=[0, 1, 2])


# -- search effort ----------------------------------------------------------------------------------


def _random_16(seed: int) -> Topology:
    """16 GPUs, every pair an arbitrary link: one block, the branch and bound's worst case."""
    rng = random.Random(seed)
    labels = ["NV18", "NV12", "NV6", "NV2", "NV1", "PIX", "SYS"]
    links = [[Link.parse("X")] * 16 for _ in range(16)]
    for i in range(16):
        for j in range(i + 1, 16):
            links[i][j] = links[j][i] = Link.parse(rng.choice(labels))
    return Topology.from_links([list(row) for row in links])


@cache
def _unpruned(n: int, left: int, pos: int = 0) -> int:
    """Nodes a depth-first include/exclude search over ``n`` candidates expands with no bound at all."""
    if left == 0 or n - pos < left:
        return 1
    return 1 + _unpruned(n, left - 1, pos + 1) + _unpruned(n, left, pos + 1)


# measured nodes for all 13 sizes (2..14 of 16 GPUs): 9,287 (seed 16) and 10,965 (seed 2); without the
# bound on pairs still to add 11,307 and 13,057; without any pruning 261,787 (``_unpruned``)
@pytest.mark.parametrize(("seed", "most"), [(16, 10_500), (2, 12_000)])
def test_branch_and_bound_expands_a_small_part_of_the_search_on_16_gpus(seed: int, most: int) -> None:
    topo = _random_16(seed)
    assert isinstance(group_tree(topo), Block)
    total = unpruned = 0
    for count in range(2, 15):
        choice = choose_scored(topo, range(16), count)
        assert 0 < choice.searched <= _unpruned(16, count) // 2
        total += choice.searched
        unpruned += _unpruned(16, count)
    assert unpruned == 261_787
    assert total <= most


def test_branch_and_bound_with_must_include_gpus_searches_little_on_16_gpus() -> None:
    topo = _random_16(16)
    rng = random.Random(7)
    for _ in range(20):
        count = rng.randint(6, 12)
        must = rng.sample(range(16), rng.randint(1, 2))
        choice = choose_scored(topo, range(16), count, must)
        assert set(must) <= set(choice.devices)
        # measured: at most 1/9 of the unpruned search (967 of 8,735 nodes)
        assert 0 < choice.searched <= _unpruned(16 - len(must), count - len(must)) // 5


@pytest.mark.parametrize("spec", ["hgx-16", "nvl72-hier"])
def test_hierarchical_nodes_are_solved_by_the_group_tree_without_search(spec: str) -> None:
    topo = load_node(f"builtin:{spec}").topology
    assert topo is not None
    rng = random.Random(3)
    for count in (1, 2, 4, 8, 12, 16):
        free = sorted(rng.sample(range(topo.n), rng.randint(count, topo.n)))
        choice = choose_scored(topo, free, count)
        assert len(choice.devices) == count and choice.searched == 0


def test_search_effort_is_not_part_of_a_choice_s_equality() -> None:
    topo = _random_16(16)
    choice = choose_scored(topo, range(16), 8)
    assert choice.searched > 0
    built = type(choice)(devices=choice.devices, cost_units=choice.cost_units)
    assert choice == built and built.searched == 0
    assert isinstance(group_tree(_matrix(2, {(0, 1): 1})), Clique)
