"""The per-node Python scores give exactly the vectorised scores, so the replay may use either.

The replay scores small rescorings one node at a time (``kubegpu.sim.nodescore``) and large ones with
numpy (``kubegpu.sim.scoring``); a difference in one bit of one score could move a tie and change
every later placement, so these tests compare them value for value on many random node states.
"""

from __future__ import annotations

from bisect import bisect_right

import numpy as np
import pytest

import kubegpu.sim.replay as replay_module
from kubegpu.sim.nodescore import FragTable, NodeRows, node_scorer, score_steps
from kubegpu.sim.replay import TieMode, replay
from kubegpu.sim.scoring import (
    MILLI,
    N_CLASSES,
    NodeArrays,
    PodRequest,
    Policy,
    TypicalShapes,
    _sigmoid100,
    fragmentation,
    kubegpu_target,
    score_nodes,
    typical_shapes,
)
from kubegpu.sim.workload import Workload, prepare
from tests.unit.sim.conftest import make_trace
from tests.unit.sim.test_policy import pinned_trace_workload

MODELS = 4


def _numpy_score(x: np.ndarray) -> list[float]:
    out: list[float] = np.floor(_sigmoid100(x)).tolist()
    return out


def test_score_steps_reproduce_numpys_integer_sigmoid_near_every_step_and_elsewhere() -> None:
    steps = np.array([s for s in score_steps() if np.isfinite(s)])
    assert np.all(np.diff(steps) > 0)
    # 400 consecutive doubles on either side of every step, where a last-bit difference would show
    around = [steps]
    lo, hi = steps.copy(), steps.copy()
    for _ in range(400):
        lo, hi = np.nextafter(lo, -np.inf), np.nextafter(hi, np.inf)
        around += [lo, hi]
    xs = np.concatenate([*around, np.random.default_rng(0).uniform(-20_000, 20_000, 50_000), [0.0, -0.0]])
    assert [float(bisect_right(score_steps(), x)) for x in xs.tolist()] == _numpy_score(xs)
    # and numpy's function never steps down inside those windows (what a lookup by steps assumes)
    window = np.sort(np.concatenate(around))
    assert np.all(np.diff(np.floor(_sigmoid100(window))) >= 0)


SHARES = (1000, 810, 470, 320, 650, 230, 50)


def _shapes(rng: np.random.Generator, shares: tuple[int, ...] = SHARES) -> TypicalShapes:
    shapes = []
    counts = []
    for i in range(40):
        num = int(rng.choice([0, 1, 1, 1, 2, 4, 8]))
        milli = int(rng.choice(shares)) if num == 1 else (1000 if num else 0)
        ok = np.ones(MODELS, dtype=bool) if rng.random() < 0.8 else rng.random(MODELS) < 0.5
        shapes.append((int(rng.choice([0, 2000, 3152, 8000, 11300, 24000])), milli, num, ok, f"s{i}"))
        counts.append(int(rng.integers(1, 500)))
    return typical_shapes(shapes, counts, n_models=MODELS)


def _nodes(rng: np.random.Generator, shapes: TypicalShapes, rows: int = 400) -> NodeArrays:
    width = 8
    gpus = rng.choice([0, 1, 2, 4, 8], size=rows)
    free = np.zeros((rows, width), dtype=np.int64)
    levels = np.array([0, 1000, 1000, 1000, 190, 530, 350, 680, 770, 500, 120, 30, 970])
    for r in range(rows):
        for g in range(int(gpus[r])):
            free[r, g] = rng.choice(levels) if rng.random() < 0.8 else rng.integers(0, 101) * 10
    # CPU left: often right at a typical request, where the fit flips
    cpu = np.where(
        rng.random(rows) < 0.3,
        rng.choice(np.concatenate([shapes.cpu_milli, [0]]), size=rows),
        rng.integers(0, 960, size=rows) * 100,
    )
    counts = np.where(rng.random((rows, N_CLASSES)) < 0.1, rng.integers(1, 4, size=(rows, N_CLASSES)), 0)
    counts[rng.random(rows) < 0.3] = 0
    model = rng.integers(0, MODELS, size=rows)
    return NodeArrays(
        cpu_left_milli=cpu.astype(np.int64),
        memory_left_mib=rng.integers(0, 4096, size=rows).astype(np.int64),
        gpu_free_milli=free,
        gpu_count=gpus.astype(np.int64),
        model_index=model.astype(np.int64),
        class_counts=counts.astype(np.int64),
        frag_milli=fragmentation(free, cpu.astype(np.int64), model.astype(np.int64), shapes),
    )


def _pods(rng: np.random.Generator) -> list[PodRequest]:
    out = []
    for num, milli in [
        (0, 0),
        (1, 1000),
        (2, 1000),
        (4, 1000),
        (8, 1000),
        (1, 810),
        (1, 470),
        (1, 50),
        (1, 990),
    ]:
        for cpu in (0, 3152, 11300, 40000):
            for memory in (0, 2048):
                ok = np.ones(MODELS, dtype=bool) if rng.random() < 0.7 else rng.random(MODELS) < 0.5
                out.append(
                    PodRequest(cpu_milli=cpu, memory_mib=memory, num_gpu=num, gpu_milli=milli, model_ok=ok)
                )
    return out


def assert_per_node_equals_vectorised(
    policy: Policy, shapes: TypicalShapes, nodes: NodeArrays, pods: list[PodRequest]
) -> None:
    """Every row's per-node score and GPU are the vectorised ones, value for value."""
    rows, frag = NodeRows(nodes), FragTable(shapes)
    for pod in pods:
        want = score_nodes(policy, nodes, pod, shapes)
        score = node_scorer(policy, pod, rows, frag)
        got = [score(r) for r in range(len(nodes.gpu_count))]
        assert [s for s, _ in got] == want.score.tolist(), (policy, pod)
        fits = want.score > -np.inf
        assert [g for (_, g), ok in zip(got, fits, strict=True) if ok] == want.gpu[fits].tolist(), (
            policy,
            pod,
        )


@pytest.mark.parametrize("policy", list(Policy))
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_per_node_scores_and_gpus_equal_the_vectorised_ones(policy: Policy, seed: int) -> None:
    rng = np.random.default_rng(seed)
    shapes = _shapes(rng)
    nodes = _nodes(rng, shapes)
    assert_per_node_equals_vectorised(policy, shapes, nodes, _pods(rng))


def sharing_shapes(rng: np.random.Generator, *, whole_share: float = 0.0) -> TypicalShapes:
    """A sharing-heavy target workload: shares carry most of the GPU demand (kubegpu-plan's CPU
    match), or all but ``whole_share`` of it, the rest in two shapes of one whole GPU."""
    shapes, counts = [], []
    for i in range(30):
        num = int(rng.choice([0, 0, 1, 1, 1, 1, 1, 1, 1, 1]))
        milli = int(rng.choice((810, 470, 320, 650, 230, 50))) if num else 0
        cpu = int(rng.choice([0, 1000, 3152, 4000, 8000, 11908, 32000]))
        shapes.append((cpu, milli, num, np.ones(MODELS, dtype=bool), f"s{i}"))
        counts.append(int(rng.integers(1, 500)))
    if whole_share:
        shared = sum(c * s[1] for s, c in zip(shapes, counts, strict=True) if s[2])
        whole_milli = shared * whole_share / (1.0 - whole_share)
        for cpu, part in ((4000, 0.4), (16000, 0.6)):
            shapes.append((cpu, MILLI, 1, np.ones(MODELS, dtype=bool), f"whole-{cpu}"))
            counts.append(round(whole_milli * part / MILLI))
    return typical_shapes(shapes, counts, n_models=MODELS)


def half_sharing_shapes(rng: np.random.Generator) -> TypicalShapes:
    """Shares carry 60 % of the GPU demand: between ``PLAN_RESERVE_SHARED`` and
    ``PLAN_CPU_MATCH_SHARED``, so kubegpu-plan's partner reserve is on without its CPU match."""
    return sharing_shapes(rng, whole_share=0.4)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_kubegpu_plan_per_node_scores_equal_the_vectorised_ones_with_only_its_reserve_on(seed: int) -> None:
    from kubegpu.sim.plan import value_plan_of

    rng = np.random.default_rng(seed)
    shapes = half_sharing_shapes(rng)
    plan = value_plan_of(shapes)
    assert plan.reserve and not plan.cpu_match
    nodes = _nodes(rng, shapes)
    assert_per_node_equals_vectorised(Policy.KUBEGPU_PLAN, shapes, nodes, _pods(rng))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_kubegpu_plan_per_node_scores_equal_the_vectorised_ones_with_its_cpu_match_on(seed: int) -> None:
    from kubegpu.sim.plan import value_plan_of

    rng = np.random.default_rng(seed)
    shapes = sharing_shapes(rng)
    assert value_plan_of(shapes).cpu_match
    nodes = _nodes(rng, shapes)
    assert_per_node_equals_vectorised(Policy.KUBEGPU_PLAN, shapes, nodes, _pods(rng))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_kubegpu_per_node_scores_equal_the_vectorised_ones_when_its_target_is_not_fgds(seed: int) -> None:
    # without 50-milli shapes nothing fills an 810 pod's leftover: kubegpu's target differs from FGD's
    rng = np.random.default_rng(seed)
    shapes = _shapes(rng, shares=(1000, 810, 470, 320, 650, 230))
    assert kubegpu_target(shapes) is not shapes
    nodes = _nodes(rng, shapes)
    assert FragTable(shapes).target() is not FragTable(shapes)
    assert_per_node_equals_vectorised(Policy.KUBEGPU, shapes, nodes, _pods(rng))


def test_frag_table_equals_the_vectorised_fragmentation_of_each_row() -> None:
    rng = np.random.default_rng(5)
    shapes = _shapes(rng)
    nodes = _nodes(rng, shapes, rows=1000)
    table = FragTable(shapes)
    got = [
        table.of(m, c, tuple(sorted(f)))
        for m, c, f in zip(
            nodes.model_index.tolist(),
            nodes.cpu_left_milli.tolist(),
            nodes.gpu_free_milli.tolist(),
            strict=True,
        )
    ]
    assert got == nodes.frag_milli.tolist()


_RUN_FIELDS = ("allocated_milli", "frag_milli", "placed", "node", "comm_cost")


def _memory_tight_workload() -> Workload:
    """Nodes whose memory runs out before their GPUs: the best-scored node often lacks a pod's memory."""
    kinds = [(96000, 8, "G2"), (64000, 4, "V100M16"), (16000, 2, "T4")]
    nodes = [
        (f"node-{i:02d}", *kinds[i % 3][:1], 6000 + 4000 * (i % 5), *kinds[i % 3][1:]) for i in range(30)
    ]
    millis = [1000, 810, 470, 320, 650, 230, 500]
    pods = [
        (f"pod-{i:03d}", 1000 + 700 * (i % 5), 1024 * (1 + i % 7), 1, millis[i % len(millis)], "")
        for i in range(400)
    ]
    return prepare(make_trace(nodes, pods))


@pytest.mark.parametrize("policy", list(Policy))
@pytest.mark.parametrize("tie", list(TieMode))
def test_replay_gives_the_same_run_whichever_way_it_finds_and_rescores_the_bound_rows(
    policy: Policy, tie: TieMode, monkeypatch: pytest.MonkeyPatch
) -> None:
    workload = _memory_tight_workload()
    runs = []
    # never / always per node (rescoring), in Python / with numpy (finding the rows bound since a
    # shape's last arrival), masking the memory at once / looking past every best row without it
    for limit in (0, 1 << 30):
        monkeypatch.setattr(replay_module, "PER_NODE_ROWS", limit)
        monkeypatch.setattr(replay_module, "SET_ROWS", limit)
        monkeypatch.setattr(replay_module, "MEMORY_TRIES", limit)
        runs.append(replay(workload, policy, 3, tie=tie))
    a, b = runs
    for field in _RUN_FIELDS:
        assert getattr(a, field).tolist() == getattr(b, field).tolist(), field
    assert a.gpus == b.gpus
    assert a.placed.any() and not a.placed.all()  # the trace overflows: fits and misfits both happen
    assert int(a.allocated_milli[-1]) <= MILLI * int(workload.node_gpus.sum())


@pytest.mark.parametrize("policy", [Policy.FGD, Policy.KUBEGPU, Policy.CLUSTERING])
def test_a_replay_does_not_depend_on_the_replays_before_it_in_the_process(policy: Policy) -> None:
    # the empty cluster's scores and the fragmentation memo are kept per workload across replays
    workload = pinned_trace_workload()
    replay_module._EMPTY.pop(workload, None)
    first = replay(workload, policy, 4)
    replay(workload, policy, 5)
    replay(workload, policy, 6, tie=TieMode.RANDOM)
    again = replay(workload, policy, 4)
    for field in _RUN_FIELDS:
        assert getattr(first, field).tolist() == getattr(again, field).tolist(), field


def test_looking_past_rows_without_memory_picks_the_masked_argmax_and_restores_the_scores() -> None:
    rng = np.random.default_rng(11)
    checked = 0
    for _ in range(300):
        rows = int(rng.integers(1, 40))
        scores = rng.integers(0, 4, size=rows).astype(np.float64)  # many ties
        scores[rng.random(rows) < 0.2] = -np.inf
        memory = rng.integers(0, 5, size=rows).tolist()
        mem = int(rng.integers(1, 5))
        before = scores.copy()
        masked = np.where(np.array(memory) >= mem, scores, -np.inf)
        want = int(masked.argmax()) if masked.max() > -np.inf else -1
        first = int(scores.argmax()) if scores.max() > -np.inf else -1
        got = replay_module._first_with_memory(scores, first, memory, mem)
        assert scores.tolist() == before.tolist()
        if got >= 0 and memory[got] < mem:  # gave up after MEMORY_TRIES rows: the caller masks
            continue
        assert got == want
        checked += 1
    assert checked > 200


def test_bind_and_unbind_keep_the_lists_the_arrays_and_the_fragmentation_in_step() -> None:
    from kubegpu.sim.policy import Placement, Selector, get_policy
    from kubegpu.sim.replay import initial_state

    w = pinned_trace_workload()
    state = initial_state(w, np.arange(len(w.node_names)))
    selector = Selector(
        tie=TieMode.RANDOM,
        order_key=None,
        tie_rng=np.random.default_rng(1),
        policy_rng=np.random.default_rng(2),
    )
    done: list[tuple[Placement, PodRequest]] = []
    for step in range(60):
        pod = w.shape_requests[int(w.pod_shape[step % len(w.pod_shape)])]
        choice = get_policy(Policy.KUBEGPU).choose(state, pod, selector)
        if choice is not None:
            state.bind(choice, pod)
            done.append((choice, pod))
        if step % 7 == 6 and done:  # a departure now and then
            state.unbind(*done.pop(0))
        n, rows = state.nodes, state.rows()
        assert rows.free == n.gpu_free_milli.tolist() and rows.cpu == n.cpu_left_milli.tolist()
        assert rows.memory == n.memory_left_mib.tolist() and rows.classes == n.class_counts.tolist()
        exact = fragmentation(n.gpu_free_milli, n.cpu_left_milli, n.model_index, w.typical)
        assert n.frag_milli.tolist() == exact.tolist() == rows.frag
        assert state.frag_total == pytest.approx(float(exact.sum()))
    assert len(done) > 10
