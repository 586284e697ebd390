"""One replay: a seed's arrivals placed one by one on the cluster under one policy.

The cluster state is a set of numpy arrays updated in place (only the node that received a pod
changes). Scores are cached per pod shape: when a shape arrives again, only the nodes that changed
since its last scoring are rescored, so a replay costs about one vectorised scoring of a handful of
nodes per arrival, not a scan of the cluster.

Protocol (the FGD artifact's): one placement attempt per arrival, no retry, no departures; the
highest score wins; ties go to the first node of the seed's fixed node order (``TieMode.NODE_ORDER``)
or to a uniformly random tied node (``TieMode.RANDOM``, what kube-scheduler does).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from functools import cache, lru_cache

import numpy as np

from kubegpu.allocate import choose_scored
from kubegpu.model.topology import Topology
from kubegpu.sim.scoring import (
    MILLI,
    N_CLASSES,
    BoolArray,
    FloatArray,
    IntArray,
    NodeArrays,
    Policy,
    fragmentation,
    name_tiebreak,
    pod_class,
    score_nodes,
)
from kubegpu.sim.workload import STREAM_RANDOM, STREAM_TIES, Workload, arrivals, node_order, seed_stream
from kubegpu.sources.spec import load_node

__all__ = ["SeedRun", "TieMode", "best_group_cost", "node_topology", "replay"]


class TieMode(StrEnum):
    """How equally scored nodes are separated."""

    NODE_ORDER = "node-order"
    RANDOM = "random"


@dataclass(frozen=True, kw_only=True, eq=False)
class SeedRun:
    """Everything one (policy, seed) replay produced, per arrival."""

    policy: Policy
    seed: int
    tie: TieMode
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


SEED_8GPU = "builtin:seed-8gpu"


@cache
def node_topology(gpus: int) -> Topology:
    """The builtin topology of a node with ``gpus`` GPUs.

    8-GPU nodes are the seed's machine (``builtin:seed-8gpu``: NVLink groups 0-3 and 4-7, cost 1
    inside a group and 4 across); other nodes are one NVLink group (cost 1 between any two GPUs).
    """
    if gpus == 8:
        topology = load_node(SEED_8GPU).topology
        if topology is not None:
            return topology
    return Topology.from_groups(gpus, (tuple(range(gpus)),), inside=1.0, across=4.0)


@lru_cache(maxsize=65536)
def _choose(gpus: int, free_mask: int, count: int) -> tuple[tuple[int, ...], float]:
    available = [g for g in range(gpus) if free_mask >> g & 1]
    choice = choose_scored(node_topology(gpus), available, count)
    return choice.devices, choice.cost


@cache
def best_group_cost(gpus: int, count: int) -> float:
    """The lowest link cost of ``count`` GPUs on an empty node with ``gpus`` GPUs."""
    return _choose(gpus, (1 << gpus) - 1, count)[1]


class _Cache:
    __slots__ = ("gpu", "score", "stamp")

    def __init__(self, n: int) -> None:
        self.score = np.full(n, -np.inf)
        self.gpu = np.full(n, -1, dtype=np.int64)
        self.stamp = -1


def replay(
    workload: Workload,
    policy: Policy,
    seed: int,
    *,
    inflate: float = 1.3,
    tie: TieMode = TieMode.NODE_ORDER,
    on_progress: Callable[[int, int], None] | None = None,
) -> SeedRun:
    """Replay ``seed``'s arrivals under ``policy``; see the module docstring for the protocol."""
    started = time.perf_counter()
    seq = arrivals(workload, seed, inflate)
    order = node_order(len(workload.node_names), seed)
    n = len(order)
    width = workload.gpu_width
    gpus = workload.node_gpus[order]
    free = np.zeros((n, width), dtype=np.int64)
    for row, count in enumerate(gpus):
        free[row, :count] = MILLI
    model = workload.node_model[order]
    state = NodeArrays(
        cpu_left_milli=workload.node_cpu_milli[order].copy(),
        memory_left_mib=workload.node_memory_mib[order].copy(),
        gpu_free_milli=free,
        gpu_count=gpus,
        model_index=model,
        class_counts=np.zeros((n, N_CLASSES), dtype=np.int64),
        frag_milli=np.zeros(n),
        tiebreak=name_tiebreak([workload.node_names[i] for i in order]),
    )
    typical = workload.typical
    state.frag_milli[:] = fragmentation(free, state.cpu_left_milli, model, typical)
    empty_frag = float(state.frag_milli.sum())
    tie_rng = seed_stream(seed, STREAM_TIES)
    pick_rng = seed_stream(seed, STREAM_RANDOM)
    changed = np.zeros(n, dtype=np.int64)
    caches: dict[int, _Cache] = {}
    shapes = workload.shape_requests
    shape_of = workload.pod_shape[seq]
    total_of = workload.shape_total_milli()

    count = len(seq)
    arrived = np.cumsum(total_of[shape_of])
    allocated = np.zeros(count, dtype=np.int64)
    frag_curve = np.zeros(count)
    placed = np.zeros(count, dtype=bool)
    node_of = np.full(count, -1, dtype=np.int64)
    comm: list[float] = []
    ideal: list[float] = []
    naive: list[float] = []
    topology_aware = policy is Policy.KUBEGPU
    alloc_milli = 0
    frag_total = empty_frag
    report_every = max(1, count // 100)

    for step in range(count):
        sid = int(shape_of[step])
        pod = shapes[sid]
        cache = caches.get(sid)
        if cache is None:
            cache = caches[sid] = _Cache(n)
        dirty = np.flatnonzero(changed > cache.stamp) if cache.stamp >= 0 else np.arange(n)
        if dirty.size:
            result = score_nodes(policy, state.take(dirty), pod, typical)
            cache.score[dirty] = result.score
            cache.gpu[dirty] = result.gpu
        cache.stamp = step
        scores = cache.score
        if policy is Policy.RANDOM:
            fits = np.flatnonzero(scores > -np.inf)
            node = int(fits[pick_rng.integers(fits.size)]) if fits.size else -1
        else:
            node = int(scores.argmax())
            best = scores[node]
            if best == -np.inf:
                node = -1
            elif tie is TieMode.RANDOM:
                tied = np.flatnonzero(scores == best)
                if tied.size > 1:
                    node = int(tied[tie_rng.integers(tied.size)])
        if node >= 0:
            row = free[node]
            k = pod.num_gpu
            if k:
                if pod.shared:
                    if policy is Policy.RANDOM:
                        room = np.flatnonzero(row >= pod.gpu_milli)
                        g = int(room[pick_rng.integers(room.size)])
                    else:
                        g = int(cache.gpu[node])
                        if topology_aware and row[g] == MILLI:
                            g = _choose(int(gpus[node]), _mask(row == MILLI), 1)[0][0]
                    row[g] -= pod.gpu_milli
                else:
                    fully = row == MILLI
                    if k == 1 and not topology_aware:
                        chosen: tuple[int, ...] = (int(np.argmax(fully)),)
                    else:
                        chosen, cost = _choose(int(gpus[node]), _mask(fully), k)
                        if k > 1:
                            comm.append(cost)
                            ideal.append(best_group_cost(int(gpus[node]), k))
                            first = tuple(int(g) for g in np.flatnonzero(fully)[:k])
                            naive.append(node_topology(int(gpus[node])).set_cost(first))
                    row[list(chosen)] = 0
                state.class_counts[node, pod_class(k, pod.gpu_milli)] += 1
            state.cpu_left_milli[node] -= pod.cpu_milli
            state.memory_left_mib[node] -= pod.memory_mib
            new_frag = float(
                fragmentation(
                    free[node : node + 1],
                    state.cpu_left_milli[node : node + 1],
                    model[node : node + 1],
                    typical,
                )[0]
            )
            frag_total += new_frag - state.frag_milli[node]
            state.frag_milli[node] = new_frag
            changed[node] = step + 1
            alloc_milli += int(total_of[sid])
            placed[step] = True
            node_of[step] = order[node]
        allocated[step] = alloc_milli
        frag_curve[step] = frag_total
        if on_progress is not None and (step % report_every == 0 or step == count - 1):
            on_progress(step + 1, count)

    return SeedRun(
        policy=policy,
        seed=seed,
        tie=tie,
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
    )


def _mask(bits: np.ndarray) -> int:
    out = 0
    for g in np.flatnonzero(bits):
        out |= 1 << int(g)
    return out
