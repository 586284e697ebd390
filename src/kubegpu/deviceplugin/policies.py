"""Named, registered policies that choose devices for GetPreferredAllocation.

Two registries, both checked when the config is loaded so an unknown name never reaches kubelet:

* allocation policies for whole GPUs: ``topology`` (default; the exact minimum-pairwise-cost subset
  from ``kubegpu.allocate.choose``) and ``simple`` (must-include devices, then lowest indices);
* replica policies for shared devices (time-slicing/MPS replicas ``UUID::i``): ``distributed``
  (default; spread over physical GPUs, as NVIDIA v0.20) and ``packed`` (fill the busiest GPU first).

Every policy takes indices into the caller's candidate list and never returns anything else, and
``topology`` falls back to ``simple`` when the topology is unknown or the allocator cannot answer, so
one lost GPU never fails admission for the whole node (NVIDIA #2038).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Mapping, Sequence

from kubegpu.allocate import choose
from kubegpu.errors import KubegpuError
from kubegpu.model.topology import Topology

__all__ = [
    "ALLOCATION_POLICIES",
    "REPLICA_POLICIES",
    "AllocationPolicy",
    "ReplicaPolicy",
    "choose_simple",
    "choose_topology",
    "replicas_distributed",
    "replicas_packed",
]

log = logging.getLogger(__name__)

# (topology or None, available GPU indices, size, must-include GPU indices) -> chosen GPU indices
AllocationPolicy = Callable[[Topology | None, Sequence[int], int, Sequence[int]], tuple[int, ...]]
# (available replicas as (gpu, replica id), size, must-include ids, replicas in use per gpu) -> ids
ReplicaPolicy = Callable[[Sequence[tuple[int, str]], int, Sequence[str], Mapping[int, int]], tuple[str, ...]]


def choose_simple(
    topology: Topology | None, available: Sequence[int], size: int, must_include: Sequence[int]
) -> tuple[int, ...]:
    """Must-include devices first, then the lowest free indices, up to ``size``."""
    del topology
    chosen = list(dict.fromkeys(must_include))
    for index in sorted(set(available)):
        if len(chosen) >= size:
            break
        if index not in chosen:
            chosen.append(index)
    return tuple(chosen)


def choose_topology(
    topology: Topology | None, available: Sequence[int], size: int, must_include: Sequence[int]
) -> tuple[int, ...]:
    """The exact minimum-cost set; ``simple`` when the topology is unknown or the request impossible."""
    if topology is None or any(not 0 <= i < topology.n for i in available):
        return choose_simple(topology, available, size, must_include)
    count = min(size, len(set(available)))
    if count < len(set(must_include)):
        return choose_simple(topology, available, size, must_include)
    try:
        return tuple(choose(topology, available, count, must_include))
    except (KubegpuError, ValueError) as exc:
        log.warning("topology allocation failed; using simple choice", extra={"error": str(exc)})
        return choose_simple(topology, available, size, must_include)


def _replicas(
    available: Sequence[tuple[int, str]],
    size: int,
    must_include: Sequence[str],
    in_use: Mapping[int, int],
    *,
    packed: bool,
) -> tuple[str, ...]:
    chosen = list(dict.fromkeys(must_include))
    gpu_of = {rid: gpu for gpu, rid in available}
    load = Counter(dict(in_use))
    picked_now: Counter[int] = Counter()
    for rid in chosen:
        if rid in gpu_of:
            load[gpu_of[rid]] += 1
            picked_now[gpu_of[rid]] += 1
    free: dict[int, list[str]] = {}
    for gpu, rid in available:
        if rid not in chosen:
            free.setdefault(gpu, []).append(rid)
    while len(chosen) < size and free:
        sign = -1 if packed else 1
        gpu = min(free, key=lambda g: (sign * load[g], picked_now[g], g))
        rid = free[gpu].pop(0)
        if not free[gpu]:
            del free[gpu]
        chosen.append(rid)
        load[gpu] += 1
        picked_now[gpu] += 1
    return tuple(chosen)


def replicas_distributed(
    available: Sequence[tuple[int, str]], size: int, must_include: Sequence[str], in_use: Mapping[int, int]
) -> tuple[str, ...]:
    """One replica at a time from the GPU with the fewest replicas in use (ties: picked least now)."""
    return _replicas(available, size, must_include, in_use, packed=False)


def replicas_packed(
    available: Sequence[tuple[int, str]], size: int, must_include: Sequence[str], in_use: Mapping[int, int]
) -> tuple[str, ...]:
    """One replica at a time from the GPU with the most replicas in use (ties: picked least now)."""
    return _replicas(available, size, must_include, in_use, packed=True)


ALLOCATION_POLICIES: Mapping[str, AllocationPolicy] = {"topology": choose_topology, "simple": choose_simple}
REPLICA_POLICIES: Mapping[str, ReplicaPolicy] = {
    "distributed": replicas_distributed,
    "packed": replicas_packed,
}
