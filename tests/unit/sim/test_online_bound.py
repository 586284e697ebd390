"""The online bound: below the offline bound where arrival order forces a share in, never below a
policy that places every pod that fits."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kubegpu.errors import InputError
from kubegpu.sim.bound import Column, arrival_counts, bound_problem, placed_per_shape, solve_bound
from kubegpu.sim.online_bound import (
    box_search,
    choose_pivot,
    dominates,
    fits_wherever,
    joint_pivot_bound,
    lp_at_bound,
    online_bound,
    pivot_bound,
    pivot_interval_lp,
    second_pivots,
)
from kubegpu.sim.replay import replay
from kubegpu.sim.scoring import Policy
from kubegpu.sim.workload import Workload, arrivals
from tests.unit.sim.test_bound import greedy, random_workload, small_cluster, workload_of


def two_gpus() -> Workload:
    # one node, two GPUs: an 810-milli share and two whole-GPU pods
    return workload_of(
        [("a", 16000, 1 << 16, 2, "T4")],
        [("p0", 1000, 1024, 1, 810, ""), ("p1", 2000, 2048, 1, 1000, ""), ("p2", 2000, 2048, 1, 1000, "")],
    )


def shape_of(wl: Workload, milli: int) -> int:
    return next(i for i, r in enumerate(wl.shape_requests) if r.num_gpu == 1 and r.gpu_milli == milli)


def test_a_share_that_arrives_first_is_placed_and_costs_what_it_leaves() -> None:
    wl = two_gpus()
    pivot = shape_of(wl, 810)
    whole = shape_of(wl, 1000)
    offline = solve_bound(bound_problem(wl, np.bincount(wl.pod_shape, minlength=2))).bound_milli
    assert offline == pytest.approx(2000)  # leaving the share out, both whole GPUs fit
    # first the share: every such policy places it, then one whole GPU fits and the other does not
    first = pivot_bound(wl, np.array([pivot, whole, whole]), pivot)
    assert first[0] == pytest.approx(1810)
    assert (first[1], first[2]) == (1, 1)
    # last: the whole GPUs take both GPUs first and the share is refused, as offline
    last = pivot_bound(wl, np.array([whole, whole, pivot]), pivot)
    assert last[0] == pytest.approx(2000)


def test_dominating_shapes_are_those_that_fit_only_where_the_pivot_fits() -> None:
    wl = workload_of(
        [("a", 16000, 1 << 16, 2, "T4"), ("b", 16000, 1 << 16, 2, "G2")],
        [
            ("p0", 2000, 2048, 1, 810, ""),
            ("p1", 2000, 2048, 1, 1000, ""),  # more milli, same CPU and memory
            ("p2", 1000, 2048, 1, 1000, ""),  # less CPU: may fit where the pivot does not
            ("p3", 2000, 2048, 1, 1000, "T4"),  # fewer models: still dominates
            ("p4", 4000, 4096, 2, 1000, ""),  # two whole GPUs
            ("p5", 2000, 2048, 1, 500, ""),  # a smaller share
        ],
    )
    by_name = {wl.pod_names[i]: wl.shape_requests[int(wl.pod_shape[i])] for i in range(len(wl.pod_names))}
    pivot = by_name["p0"]
    assert [dominates(by_name[p], pivot) for p in ("p1", "p2", "p3", "p4", "p5")] == [
        True,
        False,
        True,
        True,
        False,
    ]
    assert not dominates(pivot, by_name["p3"])  # the pivot runs on G2, which p3 does not allow


def test_shares_that_arrive_while_the_pivot_fits_are_placed() -> None:
    # one node of two GPUs: a 300 arrives, then the 810 pivot, then two whole GPUs. Every policy
    # puts the 300 and the 810 on different GPUs and refuses both whole ones: 1,110 milli. The
    # pivot's caps alone let the LP leave the 300 out for a whole GPU (1,810); the 300 arrived
    # before the placed pivot and fits wherever it fits, so the LP must place it too
    milli = [300, 810, 1000, 1000]
    wl = workload_of(
        [("a", 64000, 1 << 18, 2, "G2")], [(f"p{i}", 2000, 1024, 1, m, "") for i, m in enumerate(milli)]
    )
    sequence = wl.pod_shape[np.arange(len(milli))]
    shape = {wl.shape_requests[s].gpu_milli: s for s in set(sequence.tolist())}
    reqs = wl.shape_requests
    assert fits_wherever(reqs[shape[300]], reqs[shape[810]])
    assert not fits_wherever(reqs[shape[1000]], reqs[shape[810]])
    assert not fits_wherever(reqs[shape[810]], reqs[shape[300]])
    value, low, high, _ = pivot_bound(wl, sequence, shape[810])
    assert value == pytest.approx(1110, abs=1e-6)
    assert (low, high) == (1, 1)
    assert greedy(wl, np.arange(len(milli))) == 1110  # a real policy reaches it: exact


def test_a_share_with_more_cpu_or_fewer_models_may_not_fit_where_the_pivot_fits() -> None:
    wl = workload_of(
        [("a", 16000, 1 << 16, 2, "T4"), ("b", 16000, 1 << 16, 2, "G2")],
        [
            ("p0", 2000, 2048, 1, 810, "T4"),  # the pivot: T4 only
            ("p1", 1000, 1024, 1, 500, ""),  # less of everything, any model: fits wherever it does
            ("p2", 3000, 1024, 1, 500, ""),  # more CPU
            ("p3", 1000, 4096, 1, 500, ""),  # more memory
            ("p4", 1000, 1024, 1, 500, "G2"),  # a model the pivot does not run on
            ("p5", 1000, 1024, 1, 810, "T4"),  # the same milli and models, less CPU
            ("c", 1000, 1024, 0, 0, ""),  # no GPU: not a share (the LP leaves CPU-only pods out)
        ],
    )
    by_name = {wl.pod_names[i]: wl.shape_requests[int(wl.pod_shape[i])] for i in range(len(wl.pod_names))}
    pivot = by_name["p0"]
    assert [fits_wherever(by_name[p], pivot) for p in ("p1", "p2", "p3", "p4", "p5", "c")] == [
        True,
        False,
        False,
        False,
        True,
        False,
    ]


def test_the_pivot_is_the_largest_common_share() -> None:
    wl = small_cluster()  # shares of 250, 470, 810 and 300 milli, 1000s and 4-GPU pods
    counts = arrival_counts(wl, 1, 1.3)
    pivot = choose_pivot(wl, counts)
    assert pivot is not None
    assert wl.shape_requests[pivot].gpu_milli == 810
    none = workload_of([("a", 16000, 1 << 16, 2, "T4")], [("p", 1000, 1024, 1, 1000, "")])
    assert choose_pivot(none, np.ones(1, dtype=np.int64)) is None


@settings(max_examples=30, deadline=None)
@given(
    node_specs=st.lists(
        st.tuples(st.sampled_from([1, 2, 4]), st.integers(4, 48), st.sampled_from(["G2", "T4"])),
        min_size=1,
        max_size=3,
    ),
    pod_specs=st.lists(
        st.tuples(
            st.sampled_from([0, 1, 1, 1, 1, 2]),
            st.sampled_from([230, 470, 650, 810, 810, 1000]),
            st.integers(1, 12),
            st.sampled_from(["", "", "T4"]),
        ),
        min_size=1,
        max_size=20,
    ),
    order=st.randoms(use_true_random=False),
)
def test_no_policy_that_places_every_fitting_pod_beats_it(
    node_specs: list[tuple[int, int, str]], pod_specs: list[tuple[int, int, int, str]], order: object
) -> None:
    wl, seq = random_workload(node_specs, pod_specs, order)
    sequence = wl.pod_shape[seq]
    offline = solve_bound(
        bound_problem(wl, np.bincount(sequence, minlength=len(wl.shape_requests)))
    ).bound_milli
    placed = greedy(wl, seq)  # first fit places every pod that fits somewhere, in arrival order
    # any share, and any 1-GPU whole-GPU shape, may be the pivot: each gives a valid bound
    for pivot, request in enumerate(wl.shape_requests):
        if request.num_gpu == 1 and (sequence == pivot).any():
            value = pivot_bound(wl, sequence, pivot)[0]
            assert placed <= value + 1e-6, wl.shape_labels[pivot]
            assert value <= offline + 1e-6
            node_level = pivot_bound(wl, sequence, pivot, cpu_step=0.5)[0]
            assert placed <= node_level + 1e-6, wl.shape_labels[pivot]
            assert node_level <= value + 1e-5 * wl.total_gpu_milli
    # the two largest shares as joint pivots: still a valid bound
    shares = sorted(
        (s for s, r in enumerate(wl.shape_requests) if r.shared and (sequence == s).any()),
        key=lambda s: -wl.shape_requests[s].gpu_milli,
    )
    if len(shares) >= 2:
        counts = np.bincount(sequence, minlength=len(wl.shape_requests))
        joint = joint_pivot_bound(
            wl, sequence, tuple(shares[:2]), problem=bound_problem(wl, counts), pool=[]
        )[0]
        assert placed <= joint + 1e-6


def test_two_pivots_together_are_exact_where_each_alone_is_not() -> None:
    # two 1-GPU nodes; a 470 comes first, then an 810 (each must be placed: a GPU is free), then
    # three whole GPUs (none fits), then two 300s (one fits beside the 470): every policy ends at
    # 1,580. The 470 asks more CPU than the 810 (the whole GPUs as much), so it may not fit
    # wherever the 810 does: the 810 alone as pivot lets the LP leave the 470 out (1,810), the 470
    # alone lets it leave the 810 out (1,770); together they are exact
    milli = [470, 810, 1000, 1000, 1000, 300, 300]
    wl = workload_of(
        [("a", 64000, 1 << 18, 1, "G2"), ("b", 64000, 1 << 18, 1, "G2")],
        [(f"p{i}", 3000 if m in (470, 1000) else 2000, 1024, 1, m, "") for i, m in enumerate(milli)],
    )
    sequence = wl.pod_shape[np.arange(len(milli))]
    shape = {wl.shape_requests[s].gpu_milli: s for s in set(sequence.tolist())}
    counts = np.bincount(sequence, minlength=len(wl.shape_requests))
    problem = bound_problem(wl, counts)
    assert pivot_bound(wl, sequence, shape[810])[0] == pytest.approx(1810, abs=1e-6)
    assert pivot_bound(wl, sequence, shape[470])[0] == pytest.approx(1770, abs=1e-6)
    joint, box, _ = joint_pivot_bound(wl, sequence, (shape[810], shape[470]), problem=problem, pool=[])
    assert joint == pytest.approx(1580, abs=1e-6)
    assert box == ((1, 1), (1, 1))  # one of each placed
    assert second_pivots(wl, counts, shape[810]) == [shape[470], shape[300]]


def three_shares() -> Workload:
    # three 1-GPU nodes: a 470, an 810 and a 650 (no two fit one GPU), three whole GPUs, two 300s;
    # the 470 asks more CPU than the 650, the 650 more than the 810, so neither fits wherever the
    # shares it follows fit (``fits_wherever``) and none of them forces another in; the whole GPUs
    # ask the most, so they fit only where each share fits (``dominates``)
    milli = [470, 810, 650, 1000, 1000, 1000, 300, 300]
    cpu = {470: 3000, 650: 2500, 1000: 3000}
    return workload_of(
        [(name, 64000, 1 << 18, 1, "G2") for name in "abc"],
        [(f"p{i}", cpu.get(m, 2000), 1024, 1, m, "") for i, m in enumerate(milli)],
    )


def test_three_pivots_together_are_exact_where_no_two_are() -> None:
    # in this order the 470, 810 and 650 each take a GPU on arrival, the whole GPUs find none, and
    # a 300 joins the 470 and the 650: every policy ends at 2,530 of 3,000 milli. The 810 alone
    # lets the LP leave the 470 and the 650 out for whole GPUs (2,810); with the 470 too it leaves
    # the 650 out (2,580), with the 650 the 470 (2,760); all three together are exact
    wl = three_shares()
    sequence = wl.pod_shape[np.arange(8)]
    shape = {wl.shape_requests[s].gpu_milli: s for s in set(sequence.tolist())}
    problem = bound_problem(wl, np.bincount(sequence, minlength=len(wl.shape_requests)))
    assert pivot_bound(wl, sequence, shape[810])[0] == pytest.approx(2810, abs=1e-6)
    pairs = {
        m: joint_pivot_bound(wl, sequence, (shape[810], shape[m]), problem=problem, pool=[])[0]
        for m in (470, 650)
    }
    assert pairs == pytest.approx({470: 2580, 650: 2760}, abs=1e-6)
    three, box, _ = joint_pivot_bound(
        wl, sequence, (shape[810], shape[470], shape[650]), problem=problem, pool=[], start=3
    )
    assert three == pytest.approx(2530, abs=1e-6)
    assert box == ((1, 1), (1, 1), (1, 1))


def test_online_bound_with_three_pivots_picks_the_two_lowest_pairs() -> None:
    # seed 27 (no inflation) orders the pods 810, 470, 650, 300, 1000, 1000, 300, 1000: as above,
    # every policy ends at 2,530; the pairs with the 470 (2,580) and the 650 come lowest, and the
    # three together reach 2,530
    wl = three_shares()
    bounds = [online_bound(wl, 27, inflate=0, pivots=k).bound_milli for k in (1, 2, 3)]
    assert bounds == pytest.approx([2810, 2580, 2530], abs=1e-6)
    three = online_bound(wl, 27, inflate=0, pivots=3)
    assert (three.second_pivot, three.third_pivot) == ("3c/1x470m", "2.5c/1x650m")
    assert three.joint_placed == ((1, 1), (1, 1), (1, 1))
    for policy in Policy:
        assert replay(wl, policy, 27, inflate=0).allocated_milli[-1] == 2530, policy
    with pytest.raises(InputError, match="pivots must be 1 to 5"):
        online_bound(wl, 27, inflate=0, pivots=6)


def shares_before_whole_gpus() -> Workload:
    # two 1-GPU nodes; the 810 asks the most cores, the whole GPUs 2.5 like the 470s, the 650 2
    milli = [470, 650, 300, 470, 1000, 810, 1000, 470]
    cpu = {1000: 2500, 650: 2000, 810: 3000, 300: 2500, 470: 2500}
    return workload_of(
        [(f"n{k}", 64000, 1 << 18, 1, "G2") for k in range(2)],
        [(f"p{i}", cpu[m], 1024, 1, m, "") for i, m in enumerate(milli)],
    )


def test_a_whole_gpu_pivot_is_exact_where_the_share_pivots_are_not() -> None:
    # seed 32 orders them 470, 650, 1000, 300, 470, 810, 470, 1000: the 470 and the 650 take a GPU
    # each, so neither whole GPU nor the 810 ever fits, and every policy ends at 1,890 of 2,000 milli
    # at best (470 + 470, 650 + 300). With shares as pivots the LP can still place a whole GPU (the
    # 810 refused at once, the 470s and the 650 as it likes): 1,920 with up to five of them. With the
    # first whole GPU as a pivot: if it was placed, the 470 and the 650 before it (no more cores than
    # it, so they fit wherever it fits) were too, and three GPUs do not fit on two; if it was refused,
    # no whole GPU is placed after: 1,890, exact
    wl = shares_before_whole_gpus()
    shares = [online_bound(wl, 32, inflate=0, pivots=k).bound_milli for k in (1, 2, 3, 5)]
    assert shares == pytest.approx([2000, 1945, 1920, 1920], abs=1e-6)
    whole = online_bound(wl, 32, inflate=0, pivots=2, whole_pivots=True)
    assert whole.bound_milli == pytest.approx(1890, abs=1e-6)
    assert (whole.pivot, whole.second_pivot) == ("3c/1x810m", "2.5c/1x1000m")
    assert whole.joint_placed == ((0, 0), (0, 0))  # both refused at their first arrival
    assert online_bound(wl, 32, inflate=0, pivots=5, whole_pivots=True).bound_milli == pytest.approx(1890)
    placed = [replay(wl, policy, 32, inflate=0).allocated_milli[-1] for policy in Policy]
    assert max(placed) == 1890
    sequence = wl.pod_shape[arrivals(wl, 32, 0)]
    counts = np.bincount(sequence, minlength=len(wl.shape_requests))
    labels = [wl.shape_labels[s] for s in second_pivots(wl, counts, shape_of(wl, 810), whole=True)]
    assert labels[-1] == "2.5c/1x1000m" and "2.5c/1x1000m" not in [
        wl.shape_labels[s] for s in second_pivots(wl, counts, shape_of(wl, 810))
    ]


def test_up_to_five_pivots_only_tighten_and_every_policy_stays_under() -> None:
    wl = small_cluster()
    for seed in (4, 5):
        found = [online_bound(wl, seed, inflate=1.3, pivots=k, whole_pivots=True) for k in (1, 2, 3, 4, 5)]
        values = [r.bound_milli for r in found]
        assert all(b <= a + 1e-6 for a, b in itertools.pairwise(values)), values
        shares_only = online_bound(wl, seed, inflate=1.3, pivots=5).bound_milli
        assert values[-1] < shares_only - 50  # its whole-GPU pods are forced in early too
        for policy in Policy:
            assert replay(wl, policy, seed, inflate=1.3).allocated_milli[-1] <= values[-1] + 1e-6, policy
        if seed == 5:  # the lowest comes with five: the 810 and four whole-GPU shapes
            five = found[-1]
            assert len(five.more_pivots) == 2 and len(five.joint_placed) == 5
            assert all(
                p.endswith("1x1000m") for p in (five.second_pivot, five.third_pivot, *five.more_pivots)
            )


def test_every_policy_stays_under_the_online_bound_of_its_own_arrivals() -> None:
    wl = small_cluster()
    for seed in (1, 2, 3):
        result = online_bound(wl, seed, inflate=1.3)
        joint = online_bound(wl, seed, inflate=1.3, pivots=2)
        three = online_bound(wl, seed, inflate=1.3, pivots=3)
        assert three.bound_milli <= joint.bound_milli + 1e-6 <= result.bound_milli + 2e-6
        if seed == 1:  # a second of its three 810-milli shapes (4.1, 3.4 and 4.8 cores) tightens it
            assert joint.bound_milli < result.bound_milli - 50 and joint.second_pivot
        for policy in Policy:
            run = replay(wl, policy, seed, inflate=1.3)
            assert run.allocated_milli[-1] <= three.bound_milli + 1e-6, policy
        assert result.bound_milli <= result.offline_milli + 1e-6
        if seed == 1:  # its 810-milli shares are forced in early: below the offline bound
            assert result.pivot.endswith("1x810m")
            assert result.bound_milli < result.offline_milli - 100
        for policy in Policy:
            run = replay(wl, policy, seed, inflate=1.3)
            assert run.allocated_milli[-1] <= result.bound_milli + 1e-6, policy


def test_the_interval_lp_at_the_maximum_is_the_online_bound() -> None:
    # bench/gpu_contents.py reads the LP at the online bound's interval: the same value
    wl = small_cluster()
    for seed in (1, 4):  # seeds whose arrivals have a pivot
        result = online_bound(wl, seed, inflate=1.3)
        assert result.pivot
        sequence = wl.pod_shape[arrivals(wl, seed, 1.3)]
        counts = np.bincount(sequence, minlength=len(wl.shape_requests)).astype(np.int64)
        pivot = choose_pivot(wl, counts)
        assert pivot is not None
        problem = bound_problem(wl, counts)
        lp = pivot_interval_lp(
            wl, sequence, pivot, result.placed_low, result.placed_high, problem=problem, pool=[]
        )
        assert lp.bound_milli == pytest.approx(min(result.bound_milli, result.offline_milli), rel=1e-6)
        assert len(lp.column_use) > 0


def test_the_lp_at_the_bound_has_its_value_and_places_its_pivots_within_the_box() -> None:
    # bench/gpu_contents.py --pivots N compares a replay with this LP: one pivot (seed 1) and the
    # five of seed 5 (the 810 and four whole-GPU shapes)
    wl = small_cluster()
    num_gpu = np.array([r.num_gpu for r in wl.shape_requests], dtype=np.int64)
    milli = wl.shape_total_milli()
    for seed, pivots in ((1, 1), (5, 5)):
        bound = online_bound(wl, seed, inflate=1.3, pivots=pivots, whole_pivots=True)
        assert len(bound.pivot_shapes) == pivots
        labels = [wl.shape_labels[s] for s in bound.pivot_shapes]
        assert labels == [bound.pivot, bound.second_pivot, bound.third_pivot, *bound.more_pivots][:pivots]
        pool: list[Column] = []
        problem, lp = lp_at_bound(wl, seed, bound, inflate=1.3, pool=pool)
        assert lp.bound_milli == pytest.approx(bound.bound_milli, rel=1e-6)
        placed = placed_per_shape(problem, pool, lp, num_gpu)
        arrived = np.bincount(wl.pod_shape[arrivals(wl, seed, 1.3)], minlength=len(wl.shape_requests))
        assert all(-1e-6 <= n <= arrived[s] + 1e-6 for s, n in placed.items())
        assert sum(n * milli[s] for s, n in placed.items()) == pytest.approx(lp.lp_milli, rel=1e-6)
        box = bound.joint_placed or ((bound.placed_low, bound.placed_high),)
        for shape, (low, high) in zip(bound.pivot_shapes, box, strict=True):
            assert low - 1e-6 <= placed[shape] <= high + 1e-6


def test_without_a_pivot_the_lp_at_the_bound_is_the_offline_one() -> None:
    # two whole-GPU pods on one node of two GPUs: no share, so no pivot, and both are placed
    whole_only = workload_of(
        [("a", 16000, 1 << 16, 2, "T4")], [("p1", 2000, 2048, 1, 1000, ""), ("p2", 2000, 2048, 1, 1000, "")]
    )
    bound = online_bound(whole_only, 0, inflate=0.0)
    assert not bound.pivot_shapes and not bound.pivot
    pool: list[Column] = []
    problem, lp = lp_at_bound(whole_only, 0, bound, inflate=0.0, pool=pool)
    assert lp.bound_milli == pytest.approx(bound.offline_milli) == pytest.approx(2000.0)
    num_gpu = np.array([r.num_gpu for r in whole_only.shape_requests], dtype=np.int64)
    assert sum(placed_per_shape(problem, pool, lp, num_gpu).values()) == pytest.approx(2.0)


def test_the_online_bound_given_a_replays_cpu_only_pods_still_holds_that_replay() -> None:
    # forcing in the CPU-only pods a replay placed lowers the bound (their cores are gone) but
    # never below that replay: its own end state places them and every GPU pod it placed
    # four nodes of two GPUs and 16 cores: the 4-core shares need every core, the 8-core CPU-only
    # pods that arrive first take some
    nodes = [(f"n{i}", 16000, 1 << 18, 2, "G2") for i in range(4)]
    pods = [(f"s{i:02d}", 4000, 1024, 1, (500, 300, 470)[i % 3], "") for i in range(24)]
    wl = workload_of(nodes, pods + [(f"c{i}", 8000, 1024, 0, 0, "") for i in range(6)])
    lowered = False
    for seed in (1, 2, 3):
        plain = online_bound(wl, seed, inflate=1.3)
        for policy in (Policy.FGD, Policy.KUBEGPU, Policy.KUBEGPU_PLAN):
            run = replay(wl, policy, seed, inflate=1.3)
            placed = np.bincount(run.shape[run.placed], minlength=len(wl.shape_requests))
            given_them = online_bound(wl, seed, inflate=1.3, cpu_only_placed=placed)
            assert run.allocated_milli[-1] <= given_them.bound_milli + 1e-6, (seed, policy)
            assert given_them.bound_milli <= plain.bound_milli + 1e-6
            assert given_them.offline_milli <= plain.offline_milli + 1e-6
            lowered |= given_them.bound_milli < plain.bound_milli - 1
    assert lowered  # the small cluster's CPU-only pods do cost GPU pods their cores


def test_the_box_search_splits_a_common_pivot_past_a_rare_one() -> None:
    # a stand-in for the box LPs: a box's value is 1000 less its distance from (500, 5), plus a
    # tenth of its widths (a wider box bounds more loosely), so only narrow boxes come near 1000.
    # The rare pivot (10 arrivals) is narrow at a width of one, while its share of them (10 %) is
    # still above the common one's: the search must go on splitting the common one.
    def solve(box: tuple[tuple[int, int], ...]) -> float:
        gap = sum(max(low - t, 0, t - high) for (low, high), t in zip(box, (500, 5), strict=True))
        return 1000.0 - gap + 0.1 * sum(high - low for low, high in box)

    value, box, solves = box_search([1000, 10], solve, start=6, splits=200)
    (low, high), (rare_low, rare_high) = box
    assert low <= 500 <= high and high - low <= 5  # NARROW of 1,000 arrivals
    assert rare_low <= 5 <= rare_high and rare_high - rare_low <= 1
    assert value == pytest.approx(1000.0 + 0.1 * (high - low + rare_high - rare_low))
    assert solves < 200
