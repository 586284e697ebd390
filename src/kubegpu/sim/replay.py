"""One replay: a seed's arrivals placed one by one on the cluster by one placement policy.

The engine has no policy-specific code: it asks the policy object (``kubegpu.sim.policy``) to score
the nodes, select one and pick its GPUs, then binds the pod on the ``ClusterState``. Scores are
cached per pod shape: when a shape arrives again, only the nodes bound since its last scoring are
rescored, a handful one by one in plain Python (``kubegpu.sim.nodescore``, equal bit for bit to the
policy's vectorised score, for the registered policies), many at once with the policy's vectorised
score. Rows where a shape does not fit are not rescored for it again (no departures: they never
fit again).

Protocol (the FGD artifact's): one placement attempt per arrival, no retry, no departures; the
highest score wins; then the fixed node order (``Order``, the policy's default unless given); then
the tie rule: the first node of the seed's fixed node order (``TieMode.NODE_ORDER``) or a uniformly
random tied node (``TieMode.RANDOM``, what kube-scheduler does).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from kubegpu.sim.nodescore import NodeScorer, node_scorer
from kubegpu.sim.policy import (
    ClusterState,
    Order,
    Placement,
    PlacementPolicy,
    ScoredPolicy,
    Selector,
    TieMode,
    best_group_cost,
    get_policy,
    node_topology,
)
from kubegpu.sim.scoring import (
    MILLI,
    SCORERS,
    BoolArray,
    FloatArray,
    IntArray,
    NodeArrays,
    PodRequest,
    Policy,
    TypicalShapes,
)
from kubegpu.sim.workload import STREAM_RANDOM, STREAM_TIES, Workload, arrivals, node_order, seed_stream

__all__ = ["Order", "SeedRun", "TieMode", "best_group_cost", "initial_state", "node_topology", "replay"]


@dataclass(frozen=True, kw_only=True, eq=False)
class SeedRun:
    """Everything one (policy, seed) replay produced, per arrival."""

    policy: Policy
    seed: int
    tie: TieMode
    order: Order
    total_gpu_milli: int
    arrived_milli: IntArray  # cumulative GPU demand after each arrival (failed ones included)
    allocated_milli: IntArray  # allocated GPU milli after each arrival
    frag_milli: FloatArray  # cluster fragmentation after each arrival
    placed: BoolArray  # whether each arrival was placed
    node: IntArray  # node (row of the node file) each arrival went to, -1 if it failed
    shape: IntArray  # shape id of each arrival
    comm_cost: FloatArray  # link cost of each placed multi-GPU pod
    comm_ideal: FloatArray  # the lowest cost that pod could have had on an empty node of its kind
    comm_lowest_index: FloatArray  # the cost the artifact's lowest-index GPUs would have had
    empty_frag_milli: float
    seconds: float
    gpus: tuple[tuple[int, ...], ...] = ()  # GPU indices each arrival got on its node (() if it failed)


class _Cache:
    """One score group's scores per row and the GPU a shared pod would take; ``seen``: binds scored."""

    __slots__ = ("dead", "gpu", "score", "scorer", "seen")

    def __init__(self, n: int, scorer: NodeScorer | None) -> None:
        self.score = np.full(n, -np.inf)
        self.gpu = np.full(n, -1, dtype=np.int64)
        self.seen = -1  # how many entries of the bind log were scored; -1: nothing scored yet
        self.scorer = scorer
        # rows where the group's pod does not fit: pods only arrive (no departures), so a node's
        # free CPU and GPU never grow again and such a row stays -inf for the rest of the replay
        self.dead = bytearray(n)

    def mark_dead(self) -> None:
        self.dead = bytearray((self.score == -np.inf).tobytes())


def _score_groups(shapes: tuple[PodRequest, ...]) -> tuple[list[int], list[PodRequest]]:
    """Shapes that differ only in memory score alike (memory only decides feasibility), so they share
    one score cache, scored with memory 0; the engine applies each pod's memory request itself."""
    index: dict[tuple[int, int, int, bytes], int] = {}
    group_of: list[int] = []
    group_pod: list[PodRequest] = []
    for pod in shapes:
        key = (pod.cpu_milli, pod.num_gpu, pod.gpu_milli, pod.model_ok.tobytes())
        if key not in index:
            index[key] = len(group_pod)
            group_pod.append(
                PodRequest(
                    cpu_milli=pod.cpu_milli,
                    memory_mib=0,
                    num_gpu=pod.num_gpu,
                    gpu_milli=pod.gpu_milli,
                    model_ok=pod.model_ok,
                )
            )
        group_of.append(index[key])
    return group_of, group_pod


DEDUPE_ROWS = 128  # above this many rows to rescore, identical node states are scored once
PER_NODE_ROWS = 128  # below this many rows to rescore, rows are scored one by one in Python
NEG_INF = float("-inf")


def _rescore(
    placer: PlacementPolicy,
    nodes: NodeArrays,
    *,
    dirty: IntArray,
    pod: PodRequest,
    typical: TypicalShapes,
    cache: _Cache,
) -> None:
    """Rescore ``dirty`` rows into ``cache``; scores are row-wise, so equal rows are scored once."""
    sub = nodes.take(dirty)
    if dirty.size >= DEDUPE_ROWS:
        key = np.column_stack(
            (
                sub.cpu_left_milli,
                sub.memory_left_mib,
                sub.gpu_count,
                sub.model_index,
                sub.frag_milli.view(np.int64),
                sub.gpu_free_milli,
                sub.class_counts,
            )
        )
        # group rows by a 64-bit hash of their values, then check every row against its group's first
        # row, so a hash collision can only cost speed, never give a row another row's score
        weights = np.random.default_rng(0).integers(1, 2**62, size=key.shape[1], dtype=np.int64)
        _, first, inverse = np.unique(key @ weights, return_index=True, return_inverse=True)
        inverse = inverse.reshape(-1)
        if first.size < dirty.size // 2 and (key[first][inverse] == key).all():
            result = placer.score(sub.take(first), pod, typical)
            cache.score[dirty] = result.score[inverse]
            cache.gpu[dirty] = result.gpu[inverse]
            return
    result = placer.score(sub, pod, typical)
    cache.score[dirty] = result.score
    cache.gpu[dirty] = result.gpu


def _fits_memory(scores: FloatArray, nodes: NodeArrays, memory_mib: int) -> FloatArray:
    """``scores`` with ``-inf`` where the node has less free memory than ``memory_mib``."""
    out: FloatArray = np.where(nodes.memory_left_mib >= memory_mib, scores, -np.inf)
    return out


def initial_state(workload: Workload, rows: IntArray) -> ClusterState:
    """The empty cluster with its nodes in the order ``rows`` (indices into the node file)."""
    return ClusterState.build(
        names=[workload.node_names[i] for i in rows],
        cpu_milli=workload.node_cpu_milli[rows],
        memory_mib=workload.node_memory_mib[rows],
        gpu_count=workload.node_gpus[rows],
        model_index=workload.node_model[rows],
        typical=workload.typical,
        width=workload.gpu_width,
    )


def replay(
    workload: Workload,
    policy: Policy,
    seed: int,
    *,
    inflate: float = 1.3,
    tie: TieMode = TieMode.NODE_ORDER,
    order: Order | None = None,
    on_progress: Callable[[int, int], None] | None = None,
) -> SeedRun:
    """Replay ``seed``'s arrivals under ``policy``; ``order=None`` takes the policy's default order."""
    started = time.perf_counter()
    placer = get_policy(policy)
    used_order = placer.default_order if order is None else order
    seq = arrivals(workload, seed, inflate)
    perm = node_order(len(workload.node_names), seed)
    state = initial_state(workload, perm)
    nodes = state.nodes
    n = len(perm)
    typical = workload.typical
    empty_frag = state.frag_total
    selector = Selector(
        tie=tie,
        order_key=state.crc_key() if used_order is Order.CRC else None,
        tie_rng=seed_stream(seed, STREAM_TIES),
        policy_rng=seed_stream(seed, STREAM_RANDOM),
    )
    caches: dict[int, _Cache] = {}
    shapes = workload.shape_requests
    group_of, group_pod = _score_groups(shapes)
    shape_of = workload.pod_shape[seq]
    total_of = workload.shape_total_milli()
    total_list = total_of.tolist()
    rows = state.rows()
    memory_left = rows.memory
    frag = state.frag_table()
    # ScoredPolicy's select under node-order ties is deterministic: the winner of all rows, when the
    # pod's memory fits there, is also the winner of the rows where it fits, so the memory mask is
    # built only when the winner lacks memory; with no order either, the winner is the first best row
    deterministic = type(placer).select is ScoredPolicy.select and tie is TieMode.NODE_ORDER
    plain_select = deterministic and selector.order_key is None
    scorer_policy = policy if isinstance(placer, ScoredPolicy) and placer.scorer is SCORERS[policy] else None

    count = len(seq)
    arrived = np.cumsum(total_of[shape_of])
    allocated = np.zeros(count, dtype=np.int64)
    frag_curve = np.zeros(count)
    placed = np.zeros(count, dtype=bool)
    node_of = np.full(count, -1, dtype=np.int64)
    comm: list[float] = []
    ideal: list[float] = []
    naive: list[float] = []
    alloc_milli = 0
    report_every = max(1, count // 100)
    bound_log: list[int] = []  # the row of every bind so far, in order
    gpus_of: list[tuple[int, ...]] = [()] * count

    for step, sid in enumerate(shape_of.tolist()):
        pod = shapes[sid]
        gid = group_of[sid]
        cache = caches.get(gid)
        if cache is None:
            scorer = (
                node_scorer(scorer_policy, group_pod[gid], rows, frag) if scorer_policy is not None else None
            )
            cache = caches[gid] = _Cache(n, scorer)
        if cache.seen < 0:
            _rescore(placer, nodes, dirty=np.arange(n), pod=group_pod[gid], typical=typical, cache=cache)
            cache.mark_dead()
        elif cache.seen < len(bound_log):
            dead = cache.dead
            dirty_rows = [r for r in set(bound_log[cache.seen :]) if not dead[r]]
            if cache.scorer is not None and len(dirty_rows) < PER_NODE_ROWS:
                score_row, score_arr, gpu_arr = cache.scorer, cache.score, cache.gpu
                for r in dirty_rows:
                    value, gpu_arr[r] = score_row(r)
                    score_arr[r] = value
                    if value == NEG_INF:
                        dead[r] = 1
            elif dirty_rows:
                dirty_rows.sort()
                dirty = np.fromiter(dirty_rows, dtype=np.int64, count=len(dirty_rows))
                _rescore(placer, nodes, dirty=dirty, pod=group_pod[gid], typical=typical, cache=cache)
                cache.mark_dead()
        cache.seen = len(bound_log)
        scores = cache.score
        mem = pod.memory_mib
        if plain_select:
            node = int(scores.argmax())
            if scores[node] == -np.inf:
                node = -1
        else:
            masked = mem and not deterministic
            node = placer.select(_fits_memory(scores, nodes, mem) if masked else scores, selector)
        if mem and node >= 0 and memory_left[node] < mem:  # only after a deterministic select
            masked_scores = _fits_memory(scores, nodes, mem)
            if plain_select:
                node = int(masked_scores.argmax())
                if masked_scores[node] == -np.inf:
                    node = -1
            else:
                node = placer.select(masked_scores, selector)
        if node >= 0:
            gpus = placer.gpus(state, node, pod, int(cache.gpu[node]), selector.policy_rng)
            k = pod.num_gpu
            if k > 1:
                width = int(nodes.gpu_count[node])
                topology = node_topology(width)
                comm.append(topology.set_cost(gpus))
                ideal.append(best_group_cost(width, k))
                first = np.flatnonzero(nodes.gpu_free_milli[node] == MILLI)[:k]
                naive.append(topology.set_cost(tuple(int(g) for g in first)))
            state.bind(Placement(node=node, gpus=gpus, milli=pod.gpu_milli), pod)
            gpus_of[step] = tuple(int(g) for g in gpus)
            bound_log.append(node)
            alloc_milli += total_list[sid]
            placed[step] = True
            node_of[step] = perm[node]
        allocated[step] = alloc_milli
        frag_curve[step] = state.frag_total
        if on_progress is not None and (step % report_every == 0 or step == count - 1):
            on_progress(step + 1, count)

    return SeedRun(
        policy=policy,
        seed=seed,
        tie=tie,
        order=used_order,
        total_gpu_milli=workload.total_gpu_milli,
        arrived_milli=arrived.astype(np.int64),
        allocated_milli=allocated,
        frag_milli=frag_curve,
        placed=placed,
        node=node_of,
        shape=shape_of.astype(np.int64),
        comm_cost=np.array(comm, dtype=np.float64),
        comm_ideal=np.array(ideal, dtype=np.float64),
        comm_lowest_index=np.array(naive, dtype=np.float64),
        empty_frag_milli=empty_frag,
        seconds=time.perf_counter() - started,
        gpus=tuple(gpus_of),
    )
