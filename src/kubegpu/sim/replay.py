"""One replay: a seed's arrivals placed one by one on the cluster by one placement policy.

The engine has no policy-specific code: it asks the policy object (``kubegpu.sim.policy``) to score
the nodes, select one and pick its GPUs, then binds the pod on the ``ClusterState``. Scores are
cached per pod shape (policies with ``caches_scores``; the others are asked to ``choose`` afresh
on every arrival): a shape's first arrival starts from its scores on the empty cluster (computed
once per workload and process, in file order, and reordered), and whenever a shape arrives only
the nodes bound since its last scoring are rescored, up to a few hundred one by one in plain Python
(``kubegpu.sim.nodescore``, equal bit for bit to the policy's vectorised score, for the registered
policies), more at once with the policy's vectorised score. Rows where a shape does not fit are not
rescored for it again (no departures: they never fit again), nor are rows with less memory left
than any of the cache's shapes asks. The best row is found from per-block maxima (``_Cache.best``),
so an arrival's work grows with the rows rescored, not with the cluster (issue 57). None of this
changes a result: every way of finding and rescoring the rows gives the same run (tested).

Protocol (the FGD artifact's): one placement attempt per arrival, no retry, no departures; the
highest score wins; then the fixed node order (``Order``, the policy's default unless given); then
the tie rule: the first node of the seed's fixed node order (``TieMode.NODE_ORDER``) or a uniformly
random tied node (``TieMode.RANDOM``, what kube-scheduler does).
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from kubegpu.sim.nodescore import NodeScorer, node_scorer
from kubegpu.sim.policy import (
    ClusterState,
    Order,
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
    name_tiebreak,
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


BLOCK = 256  # rows per block of the best-row index (``_Cache.best``)


class _Cache:
    """One score group's scores per row and the GPU a shared pod would take; ``seen``: binds scored.

    With ``blocks`` it also keeps, per block of ``BLOCK`` rows, the best score and its first row, so
    that the best row of all (``best``: ``score.argmax()``) costs a scan of the blocks, not of every
    row: a replay's per-arrival work then grows with the rows rescored, not with the cluster.
    """

    __slots__ = ("_arg", "_buf", "_max", "_stale", "dead", "gpu", "score", "scorer", "seen")

    def __init__(self, n: int, scorer: NodeScorer | None, *, blocks: bool = False) -> None:
        n_blocks = -(-n // BLOCK) if blocks else 0
        # the scores, padded with -inf to whole blocks; ``score`` is the first n (a view)
        self._buf = np.full(max(n, n_blocks * BLOCK), -np.inf)
        self.score = self._buf[:n]
        self.gpu = np.full(n, -1, dtype=np.int64)
        self.seen = -1  # how many entries of the bind log were scored; -1: nothing scored yet
        self.scorer = scorer
        # rows where the group's pod does not fit: pods only arrive (no departures), so a node's
        # free CPU and GPU never grow again and such a row stays -inf for the rest of the replay
        self.dead = bytearray(n)
        self._max = np.full(n_blocks, -np.inf)  # per block: the best score ...
        self._arg = np.zeros(n_blocks, dtype=np.int64)  # ... and the first row that has it
        self._stale: set[int] = set()  # blocks whose rows were rescored since

    def mark_dead(self) -> None:
        self.dead = bytearray((self.score == -np.inf).tobytes())

    def rescored(self, rows: list[int]) -> None:
        """``rows`` have new scores (block index kept, if any)."""
        if self._max.size:
            self._stale.update(r // BLOCK for r in rows)

    def rescored_all(self) -> None:
        if self._max.size:
            self._stale = set(range(self._max.size))

    def _refresh(self) -> None:
        stale, self._stale = self._stale, set()
        buf = self._buf
        if len(stale) * 8 > self._max.size:
            table = buf.reshape(-1, BLOCK)
            arg = table.argmax(axis=1)
            self._max = table[np.arange(len(arg)), arg]
            self._arg = arg + np.arange(0, buf.size, BLOCK)
            return
        for b in stale:
            lo = b * BLOCK
            i = int(buf[lo : lo + BLOCK].argmax())
            self._max[b] = buf[lo + i]
            self._arg[b] = lo + i

    def best(self) -> int:
        """``score.argmax()``, or -1 when no row scores above ``-inf`` (needs ``blocks``)."""
        if self._stale:
            self._refresh()
        b = int(self._max.argmax())
        return int(self._arg[b]) if self._max[b] != NEG_INF else -1

    def best_with_memory(self, memory: IntArray, mem: int) -> int:
        """The first best row where ``memory >= mem`` (the argmax of the scores with ``-inf`` where
        memory is short), or -1: the best blocks are searched first, every row past a few."""
        if self._stale:
            self._refresh()
        order = np.lexsort((np.arange(self._max.size), -self._max))
        best, row = NEG_INF, -1
        buf = self._buf
        for tries, b in enumerate(order.tolist()):
            top = self._max[b]
            if top == NEG_INF or top < best:
                return row
            if tries >= MEMORY_TRIES:
                masked = np.where(memory >= mem, self.score, NEG_INF)
                row = int(masked.argmax())
                return row if masked[row] != NEG_INF else -1
            lo = b * BLOCK
            part = buf[lo : lo + BLOCK]
            room = memory[lo : lo + BLOCK] >= mem
            masked = np.where(room, part[: room.size], NEG_INF)
            i = int(masked.argmax())
            value = float(masked[i])
            if value > best or (value == best and lo + i < row):  # equal scores: the first row
                best, row = value, lo + i
        return row


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


@dataclass(eq=False)
class _EmptyCluster:
    """One workload's empty cluster (nodes in file order) and its score groups' scores there."""

    nodes: NodeArrays
    scores: dict[tuple[PlacementPolicy, int], tuple[FloatArray, IntArray]]  # (policy, score group)


_EMPTY: weakref.WeakKeyDictionary[Workload, _EmptyCluster] = weakref.WeakKeyDictionary()


def _empty_scores(
    workload: Workload, placer: PlacementPolicy, gid: int, pod: PodRequest
) -> tuple[FloatArray, IntArray]:
    """A score group's scores and GPUs on the empty cluster, per node in file order.

    Every replay of a workload starts from the same empty cluster in another row order, so a
    group's first arrival takes these (reordered) and rescores only the rows bound before it;
    kept per workload for the life of the process (each worker computes them once).
    """
    empty = _EMPTY.get(workload)
    if empty is None:
        rows = np.arange(len(workload.node_names))
        empty = _EMPTY[workload] = _EmptyCluster(nodes=initial_state(workload, rows).nodes, scores={})
    found = empty.scores.get((placer, gid))
    if found is None:
        n = len(workload.node_names)
        cache = _Cache(n, None)
        _rescore(placer, empty.nodes, dirty=np.arange(n), pod=pod, typical=workload.typical, cache=cache)
        found = empty.scores[(placer, gid)] = (cache.score, cache.gpu)
    return found


DEDUPE_ROWS = 128  # above this many rows to rescore, identical node states are scored once
SET_ROWS = 128  # up to this many binds since a group's last arrival, its dirty rows are found in Python
MEMORY_TRIES = 4  # best blocks searched for a pod's memory before every row is masked
PER_NODE_ROWS = 384  # below this many rows to rescore, rows are scored one by one in Python
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


def _first_with_memory(scores: FloatArray, node: int, memory_left: list[int], mem: int) -> int:
    """The first best row with ``mem`` free, by looking past a few best rows that lack it (then -1
    if the scores ran out, or a row that still lacks it: the caller masks the memory then).

    The same row as the argmax of the memory-masked scores: each step drops the current first best
    row, which the mask would have dropped too. ``scores`` is restored before returning. The replay
    now searches blocks instead (``_Cache.best_with_memory``); this row-by-row form is unused
    (kept with its unit test for now).
    """
    dropped: list[tuple[int, float]] = []
    while node >= 0 and memory_left[node] < mem and len(dropped) < MEMORY_TRIES:
        dropped.append((node, float(scores[node])))
        scores[node] = NEG_INF
        node = int(scores.argmax())
        if scores[node] == NEG_INF:
            node = -1
    for row, value in dropped:
        scores[row] = value
    return node


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
    # ScoredPolicy's select under node-order ties is deterministic: the winner of all rows, when the
    # pod's memory fits there, is also the winner of the rows where it fits, so the memory mask is
    # built only when the winner lacks memory
    deterministic = type(placer).select is ScoredPolicy.select and tie is TieMode.NODE_ORDER
    crc = used_order is Order.CRC
    if crc and deterministic:
        # the best-scored row with the highest CRC key, then the first in the seed's order, is the
        # first best row once the rows are sorted by key (stably): a plain argmax picks it
        key = name_tiebreak([workload.node_names[i] for i in perm])
        perm = perm[np.argsort(-key, kind="stable")]
    state = initial_state(workload, perm)
    n = len(perm)
    perm_list = perm.tolist()
    typical = workload.typical
    empty_frag = state.frag_total
    selector = Selector(
        tie=tie,
        order_key=state.crc_key() if crc and not deterministic else None,
        tie_rng=seed_stream(seed, STREAM_TIES),
        policy_rng=seed_stream(seed, STREAM_RANDOM),
    )
    caches: dict[int, _Cache] = {}
    shapes = workload.shape_requests
    group_of, group_pod = _score_groups(shapes)
    # per score group, the least memory any of its shapes asks: a row with less left can never take
    # one of its pods again (memory only goes down), so it is dropped from the group's scores
    group_memory = [1 << 62] * len(group_pod)
    for sid, gid in enumerate(group_of):
        group_memory[gid] = min(group_memory[gid], shapes[sid].memory_mib)
    shape_of = workload.pod_shape[seq]
    total_of = workload.shape_total_milli()
    total_list = total_of.tolist()
    rows = state.rows()
    memory_left, free_of, count_of = rows.memory, rows.free, rows.count
    frag = state.frag_table()
    # with no order key left either, the winner is the first best row
    plain_select = deterministic and selector.order_key is None
    scorer_policy = policy if isinstance(placer, ScoredPolicy) and placer.scorer is SCORERS[policy] else None

    count = len(seq)
    arrived = np.cumsum(total_of[shape_of])
    allocated = [0] * count
    frag_curve = [0.0] * count
    node_of = [-1] * count
    comm: list[float] = []
    ideal: list[float] = []
    naive: list[float] = []
    alloc_milli = 0
    report_every = max(1, count // 100)
    bound_log: list[int] = []  # the row of every bind so far, in order
    gpus_of: list[tuple[int, ...]] = [()] * count
    bind_at = state.bind_at
    place_gpus = placer.gpus
    policy_rng = selector.policy_rng

    fresh_choice = not placer.caches_scores
    last_bind = np.full(n, -1, dtype=np.int64)  # per row: its last entry in bound_log
    for step, sid in enumerate(shape_of.tolist()):
        pod = shapes[sid]
        if fresh_choice:
            choice = placer.choose(state, pod, selector)
            node, gpus = (-1, ()) if choice is None else (choice.node, choice.gpus)
        else:
            gid = group_of[sid]
            cache = caches.get(gid)
            if cache is None:
                scorer = (
                    node_scorer(scorer_policy, group_pod[gid], rows, frag)
                    if scorer_policy is not None
                    else None
                )
                cache = caches[gid] = _Cache(n, scorer, blocks=plain_select)
                empty_score, empty_gpu = _empty_scores(workload, placer, gid, group_pod[gid])
                cache.score[:] = empty_score[perm]
                if group_memory[gid]:
                    cache.score[state.nodes.memory_left_mib < group_memory[gid]] = NEG_INF
                cache.gpu, cache.seen = empty_gpu[perm], 0
                cache.rescored_all()
                cache.mark_dead()
            seen = cache.seen
            logged = len(bound_log)
            if seen < logged:
                dead = cache.dead
                if logged - seen == 1:
                    last = bound_log[seen]
                    dirty_rows = [] if dead[last] else [last]
                elif logged - seen <= SET_ROWS:
                    dirty_rows = [r for r in set(bound_log[seen:]) if not dead[r]]
                else:
                    alive = np.frombuffer(dead, dtype=np.uint8) == 0
                    dirty_rows = np.flatnonzero((last_bind >= seen) & alive).tolist()
                need = group_memory[gid]
                if cache.scorer is not None and len(dirty_rows) < PER_NODE_ROWS:
                    score_row, score_arr, gpu_arr = cache.scorer, cache.score, cache.gpu
                    for r in dirty_rows:
                        value, gpu_arr[r] = score_row(r)
                        if memory_left[r] < need:
                            value = NEG_INF
                        score_arr[r] = value
                        if value == NEG_INF:
                            dead[r] = 1
                    cache.rescored(dirty_rows)
                elif dirty_rows:
                    dirty_rows.sort()
                    dirty = np.fromiter(dirty_rows, dtype=np.int64, count=len(dirty_rows))
                    _rescore(
                        placer, state.nodes, dirty=dirty, pod=group_pod[gid], typical=typical, cache=cache
                    )
                    if need:
                        cache.score[dirty[state.nodes.memory_left_mib[dirty] < need]] = NEG_INF
                    cache.rescored(dirty_rows)
                    cache.mark_dead()
            cache.seen = logged
            scores = cache.score
            mem = pod.memory_mib
            if plain_select:
                node = cache.best()
                if mem and node >= 0 and memory_left[node] < mem:
                    node = cache.best_with_memory(state.nodes.memory_left_mib, mem)
            else:
                masked = mem and not deterministic
                node = placer.select(_fits_memory(scores, state.nodes, mem) if masked else scores, selector)
                if mem and node >= 0 and memory_left[node] < mem:  # only after a deterministic select
                    node = placer.select(_fits_memory(scores, state.nodes, mem), selector)
            if node >= 0:
                gpus = place_gpus(state, node, pod, int(cache.gpu[node]), policy_rng)
        if node >= 0:
            k = pod.num_gpu
            if k > 1:
                width = count_of[node]
                topology = node_topology(width)
                comm.append(topology.set_cost(gpus))
                ideal.append(best_group_cost(width, k))
                first = [g for g, f in enumerate(free_of[node]) if f == MILLI][:k]
                naive.append(topology.set_cost(tuple(first)))
            bind_at(node, gpus, pod)
            last_bind[node] = len(bound_log)
            gpus_of[step] = gpus
            bound_log.append(node)
            alloc_milli += total_list[sid]
            node_of[step] = perm_list[node]
        allocated[step] = alloc_milli
        frag_curve[step] = state.frag_total
        if on_progress is not None and (step % report_every == 0 or step == count - 1):
            on_progress(step + 1, count)

    node_arr = np.array(node_of, dtype=np.int64)
    return SeedRun(
        policy=policy,
        seed=seed,
        tie=tie,
        order=used_order,
        total_gpu_milli=workload.total_gpu_milli,
        arrived_milli=arrived.astype(np.int64),
        allocated_milli=np.array(allocated, dtype=np.int64),
        frag_milli=np.array(frag_curve, dtype=np.float64),
        placed=node_arr >= 0,
        node=node_arr,
        shape=shape_of.astype(np.int64),
        comm_cost=np.array(comm, dtype=np.float64),
        comm_ideal=np.array(ideal, dtype=np.float64),
        comm_lowest_index=np.array(naive, dtype=np.float64),
        empty_frag_milli=empty_frag,
        seconds=time.perf_counter() - started,
        gpus=tuple(gpus_of),
    )
