"""Placement policies as objects: each picks a node and the GPUs on it for one pod.

A ``PlacementPolicy`` works on a ``ClusterState`` (the cluster as numpy arrays, one row per node),
so the simulator's replay engine and a scheduler extender call the same code:

* ``score(nodes, pod, shapes)``: one score per candidate row (``-inf`` where the pod does not fit)
  and, for a shared pod, the GPU it would take; vectorised, pure (``kubegpu.sim.scoring``);
* ``select(scores, selector)``: the winning row, by the highest score, then the fixed node order
  (``Order``), then the tie rule (``TieMode``);
* ``gpus(state, node, pod, hint, rng)``: the GPU indices the pod gets on that node;
* ``choose(state, pod, selector)``: the three above on the whole state, a ``Placement`` or ``None``.

``ClusterState.bind`` / ``unbind`` apply or undo a placement (CPU, memory, GPU milli, pod classes,
fragmentation); ``set_row`` / ``append_row`` make one row an empty node again (a node that joined,
left or changed) and leave every other row, and its index, as it was. Policies are registered by
name in ``POLICIES``.

Ordering is not part of any score: ``Order.CRC`` prefers, among the nodes with the best score, the
one with the highest CRC-32 of its name (a fixed order that every scheduler replica and every run
shares); ``TieMode`` then separates what is still tied (first node of the state's row order, or a
uniformly random one). Each policy has a default order (``kubegpu``: ``crc``; the rest: ``none``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from functools import cache, lru_cache
from typing import TYPE_CHECKING, Protocol

import numpy as np

from kubegpu.errors import InputError
from kubegpu.sim.nodescore import FragTable, NodeRows
from kubegpu.sim.scoring import (
    MILLI,
    N_CLASSES,
    FloatArray,
    IntArray,
    NodeArrays,
    PodRequest,
    Policy,
    Scores,
    TypicalShapes,
    feasible,
    fragmentation,
    name_tiebreak,
    pod_class,
    score_bestfit,
    score_clustering,
    score_dotprod,
    score_fgd,
    score_kubegpu,
    score_kubegpu_plan,
    score_packing,
    score_random,
)

if TYPE_CHECKING:
    from kubegpu.model.topology import Topology

__all__ = [
    "POLICIES",
    "ClusterState",
    "Order",
    "Placement",
    "PlacementPolicy",
    "ScoredPolicy",
    "Selector",
    "TieMode",
    "best_group_cost",
    "get_policy",
    "node_topology",
]


class TieMode(StrEnum):
    """How nodes still tied after the score and the order are separated."""

    NODE_ORDER = "node-order"  # the first row of the state (the seed's node order in the replay)
    RANDOM = "random"  # uniformly at random, as kube-scheduler does


class Order(StrEnum):
    """A fixed node order applied to the best-scored nodes before the tie rule."""

    NONE = "none"
    CRC = "crc"  # highest CRC-32(node name) / 2^32 first


@dataclass(frozen=True, kw_only=True)
class Placement:
    """Where a pod goes: a row of the state, and the GPUs it takes there (``milli`` each)."""

    node: int
    gpus: tuple[int, ...]
    milli: int


@dataclass(frozen=True, kw_only=True, eq=False)
class Selector:
    """How ties are settled: the order key per row (``None`` = no order), the tie rule, random streams.

    ``tie_rng`` draws random tie-breaks; ``policy_rng`` is the policy's own stream (the ``random``
    policy's node and GPU picks), kept apart so every policy sees the same tie stream.
    """

    tie: TieMode
    order_key: FloatArray | None
    tie_rng: np.random.Generator
    policy_rng: np.random.Generator


SEED_8GPU = "builtin:seed-8gpu"


@cache
def node_topology(gpus: int) -> Topology:
    """The builtin topology of a node with ``gpus`` GPUs.

    8-GPU nodes are the seed's machine (``builtin:seed-8gpu``: NVLink groups 0-3 and 4-7 of NV6
    links, SYS across, cost 1 inside a group and 4 across, NUMA nodes 0 and 1 by group), built here
    rather than read from the spec file so that the simulator needs no YAML (a test checks that
    the two are equal); other nodes are one NVLink group (cost 1 between any two GPUs).
    """
    from dataclasses import replace

    from kubegpu.model.topology import Link, LinkKind, Topology  # imported when a multi-GPU pod needs it

    if gpus == 8:
        seed = Topology.from_groups(
            8,
            ((0, 1, 2, 3), (4, 5, 6, 7)),
            inside=1.0,
            across=4.0,
            inside_link=Link(kind=LinkKind.NVLINK, nvlinks=6),
            across_link=Link(kind=LinkKind.SYS),
        )
        return replace(seed, numa=(0, 0, 0, 0, 1, 1, 1, 1))
    return Topology.from_groups(gpus, (tuple(range(gpus)),), inside=1.0, across=4.0)


@lru_cache(maxsize=65536)
def allocator_choice(gpus: int, free_mask: int, count: int) -> tuple[tuple[int, ...], float]:
    """The exact allocator's ``count`` GPUs among the free ones (bit mask) and their link cost."""
    from kubegpu.allocate import choose_scored

    available = [g for g in range(gpus) if free_mask >> g & 1]
    choice = choose_scored(node_topology(gpus), available, count)
    return choice.devices, choice.cost


@cache
def best_group_cost(gpus: int, count: int) -> float:
    """The lowest link cost of ``count`` GPUs on an empty node with ``gpus`` GPUs."""
    return allocator_choice(gpus, (1 << gpus) - 1, count)[1]


def bit_mask(bits: np.ndarray) -> int:
    """The set bits' indices of a boolean row as an integer mask."""
    out = 0
    for g in np.flatnonzero(bits):
        out |= 1 << int(g)
    return out


def _full_mask(row: list[int]) -> int:
    """The fully free GPUs of a row of free milli as an integer bit mask."""
    out = 0
    for g, f in enumerate(row):
        if f == MILLI:
            out |= 1 << g
    return out


@dataclass(kw_only=True, eq=False)
class ClusterState:
    """The cluster as arrays (``nodes``, one row per node) and its fragmentation.

    ``nodes.frag_milli`` holds each node's FGD fragmentation under ``typical``; ``frag_total`` their
    sum. Build it with ``ClusterState.build`` and keep it current with ``bind`` / ``bind_at`` and
    ``unbind``. A bind updates the state's Python lists (``rows()``) at once and the arrays when
    ``nodes`` is next read, so a replay that binds thousands of pods between vectorised scorings
    pays a few scalar updates per bind.
    """

    names: tuple[str, ...]
    arrays: NodeArrays  # may lag the latest binds: read ``nodes``
    typical: TypicalShapes
    frag_total: float
    # the node state as Python lists and FGD's memoised node fragmentation (kubegpu.sim.nodescore),
    # built on first use; rows bound since ``arrays`` was last brought up to date
    _rows: NodeRows | None = field(default=None, repr=False)
    _frag: FragTable | None = field(default=None, repr=False)
    _stale: set[int] = field(default_factory=set, repr=False)
    _summary: tuple[IntArray, IntArray] | None = field(default=None, repr=False)

    @classmethod
    def build(
        cls,
        *,
        names: Sequence[str],
        cpu_milli: IntArray,
        memory_mib: IntArray,
        gpu_count: IntArray,
        model_index: IntArray,
        typical: TypicalShapes,
        width: int | None = None,
    ) -> ClusterState:
        """An empty cluster: every GPU fully free, nothing bound."""
        n = len(names)
        gpus = np.asarray(gpu_count, dtype=np.int64)
        cols = width if width is not None else max(1, int(gpus.max()) if n else 1)
        free = np.zeros((n, cols), dtype=np.int64)
        for row, count in enumerate(gpus):
            free[row, :count] = MILLI
        nodes = NodeArrays(
            cpu_left_milli=np.array(cpu_milli, dtype=np.int64),
            memory_left_mib=np.array(memory_mib, dtype=np.int64),
            gpu_free_milli=free,
            gpu_count=gpus,
            model_index=np.asarray(model_index, dtype=np.int64),
            class_counts=np.zeros((n, N_CLASSES), dtype=np.int64),
            frag_milli=np.zeros(n),
        )
        nodes.frag_milli[:] = fragmentation(free, nodes.cpu_left_milli, nodes.model_index, typical)
        return cls(
            names=tuple(names), arrays=nodes, typical=typical, frag_total=float(nodes.frag_milli.sum())
        )

    @property
    def nodes(self) -> NodeArrays:
        """The state as arrays, current with every bind so far (read-only for callers)."""
        if self._stale:
            self._refresh()
        return self.arrays

    def gpu_summary(self) -> tuple[IntArray, IntArray]:
        """Per row: the largest free milli of one GPU, and the number of fully free GPUs (current)."""
        if self._summary is None:
            free = self.nodes.gpu_free_milli
            self._summary = (free.max(axis=1), (free == MILLI).sum(axis=1))
        elif self._stale:
            self._refresh()
        return self._summary

    def _refresh(self) -> None:
        n, rows = self.arrays, self.rows()
        stale = sorted(self._stale)
        self._stale.clear()
        if self._summary is not None:
            largest, full = self._summary
            for r in stale:
                largest[r] = max(rows.free[r])
                full[r] = rows.free[r].count(MILLI)
        if len(stale) < 8:
            for r in stale:
                n.cpu_left_milli[r] = rows.cpu[r]
                n.memory_left_mib[r] = rows.memory[r]
                n.gpu_free_milli[r] = rows.free[r]
                n.class_counts[r] = rows.classes[r]
                n.frag_milli[r] = rows.frag[r]
            return
        at = np.array(stale, dtype=np.int64)
        n.cpu_left_milli[at] = [rows.cpu[r] for r in stale]
        n.memory_left_mib[at] = [rows.memory[r] for r in stale]
        n.gpu_free_milli[at] = [rows.free[r] for r in stale]
        n.class_counts[at] = [rows.classes[r] for r in stale]
        n.frag_milli[at] = [rows.frag[r] for r in stale]

    @property
    def width(self) -> int:
        """GPU columns per row: the widest node the state can hold without a rebuild."""
        return int(self.arrays.gpu_free_milli.shape[1])

    def set_row(
        self, row: int, *, name: str, cpu_milli: int, memory_mib: int, gpu_count: int, model_index: int
    ) -> None:
        """Make row ``row`` the empty node ``name`` (every GPU fully free, nothing bound, no pod
        classes), as ``build`` makes each row; the other rows are untouched. ``gpu_count`` must fit
        the state's ``width``. With ``gpu_count`` 0 and no CPU or memory the row is a node nobody can
        use (a removed node's row, kept so that every other row keeps its index)."""
        if not 0 <= gpu_count <= self.width:
            raise ValueError(f"a node of {gpu_count} GPUs does not fit a state {self.width} GPUs wide")
        rows = self.rows()
        if self.names[row] != name:
            self.names = (*self.names[:row], name, *self.names[row + 1 :])
        free = [MILLI] * gpu_count + [0] * (self.width - gpu_count)
        rows.free[row] = free
        rows.cpu[row], rows.memory[row] = int(cpu_milli), int(memory_mib)
        rows.count[row], rows.model[row] = int(gpu_count), int(model_index)
        rows.classes[row] = [0] * N_CLASSES
        # read directly by the scorers (``_refresh`` copies only what binds change)
        self.arrays.gpu_count[row], self.arrays.model_index[row] = gpu_count, model_index
        frag = self.frag_table().of(int(model_index), int(cpu_milli), tuple(sorted(free)))
        self.frag_total += frag - rows.frag[row]
        rows.frag[row] = frag
        self._stale.add(row)

    def append_row(
        self, *, name: str, cpu_milli: int, memory_mib: int, gpu_count: int, model_index: int
    ) -> int:
        """Add the empty node ``name`` as a new last row (``set_row`` of it) and return its index; the
        other rows keep theirs. Copies the arrays once (a node joining is rare; reuse a removed node's
        row with ``set_row`` where there is one)."""
        n = self.nodes  # current, so that the copies carry every bind so far
        row = len(self.names)
        self.arrays = NodeArrays(
            cpu_left_milli=np.append(n.cpu_left_milli, 0),
            memory_left_mib=np.append(n.memory_left_mib, 0),
            gpu_free_milli=np.vstack([n.gpu_free_milli, np.zeros((1, self.width), dtype=np.int64)]),
            gpu_count=np.append(n.gpu_count, 0),
            model_index=np.append(n.model_index, 0),
            class_counts=np.vstack([n.class_counts, np.zeros((1, N_CLASSES), dtype=np.int64)]),
            frag_milli=np.append(n.frag_milli, 0.0),
        )
        rows = self.rows()
        rows.free.append([0] * self.width)
        rows.cpu.append(0)
        rows.memory.append(0)
        rows.count.append(0)
        rows.model.append(0)
        rows.frag.append(0.0)
        rows.classes.append([0] * N_CLASSES)
        self.names = (*self.names, name)
        self._summary = None  # recomputed on next use, one row longer
        self.set_row(
            row,
            name=name,
            cpu_milli=cpu_milli,
            memory_mib=memory_mib,
            gpu_count=gpu_count,
            model_index=model_index,
        )
        return row

    def crc_key(self) -> FloatArray:
        """The ``Order.CRC`` key of every row: CRC-32(node name) / 2^32."""
        return name_tiebreak(self.names)

    def rows(self) -> NodeRows:
        """The state as Python lists, always current (read-only for callers)."""
        if self._rows is None:
            self._rows = NodeRows(self.arrays)
        return self._rows

    def frag_table(self) -> FragTable:
        """FGD's node fragmentation under ``typical``, memoised per node state."""
        if self._frag is None:
            self._frag = FragTable.of_shapes(self.typical)
        return self._frag

    def _apply(self, node: int, gpus: tuple[int, ...], milli: int, pod: PodRequest, sign: int) -> None:
        rows = self.rows()
        free = rows.free[node]
        if pod.num_gpu:
            delta = sign * milli
            for g in dict.fromkeys(gpus):  # a GPU listed twice changes once, as before
                free[g] -= delta
            rows.classes[node][pod_class(pod.num_gpu, pod.gpu_milli)] += sign
        cpu = rows.cpu[node] = rows.cpu[node] - sign * pod.cpu_milli
        rows.memory[node] -= sign * pod.memory_mib
        new = self.frag_table().of(rows.model[node], cpu, tuple(sorted(free)))
        self.frag_total += new - rows.frag[node]
        rows.frag[node] = new
        self._stale.add(node)

    def bind(self, placement: Placement, pod: PodRequest) -> None:
        """Apply ``placement`` of ``pod``: take its CPU, memory and GPU milli, count its class."""
        self._apply(placement.node, placement.gpus, placement.milli, pod, 1)

    def bind_at(self, node: int, gpus: tuple[int, ...], pod: PodRequest) -> None:
        """``bind`` of ``pod`` on row ``node``, GPUs ``gpus`` (``pod.gpu_milli`` each), without a
        ``Placement`` (the replay's hot path)."""
        self._apply(node, gpus, pod.gpu_milli, pod, 1)

    def unbind(self, placement: Placement, pod: PodRequest) -> None:
        """Undo ``bind`` (a pod deleted): give back what it took."""
        self._apply(placement.node, placement.gpus, placement.milli, pod, -1)


class PlacementPolicy(Protocol):
    """One placement policy; see the module docstring for the contract of each method."""

    @property
    def name(self) -> str: ...

    @property
    def default_order(self) -> Order: ...

    @property
    def caches_scores(self) -> bool:
        """Whether a replay may keep this policy's scores per pod shape and rescore only the nodes
        bound since (``False``: the replay calls ``choose`` on every arrival)."""
        ...

    def score(self, nodes: NodeArrays, pod: PodRequest, shapes: TypicalShapes) -> Scores: ...

    def select(self, scores: FloatArray, selector: Selector) -> int: ...

    def gpus(
        self, state: ClusterState, node: int, pod: PodRequest, hint: int, rng: np.random.Generator
    ) -> tuple[int, ...]: ...

    def choose(self, state: ClusterState, pod: PodRequest, selector: Selector) -> Placement | None: ...


Scorer = Callable[[NodeArrays, PodRequest, TypicalShapes], Scores]


@dataclass(frozen=True, kw_only=True)
class ScoredPolicy:
    """A policy made of a scoring function and the common node and GPU choice.

    Node: highest score, then ``Order``, then ``TieMode``. GPUs: a shared pod takes the score's GPU;
    a whole 1-GPU pod the lowest-index free GPU; a multi-GPU pod the exact allocator's set.
    ``allocator_for_fresh_gpus`` also routes 1-GPU pods and shared pods that open a fresh GPU
    through the allocator (keeps NVLink groups whole).
    """

    name: str
    scorer: Scorer
    default_order: Order = Order.NONE
    allocator_for_fresh_gpus: bool = False
    caches_scores: bool = True

    def score(self, nodes: NodeArrays, pod: PodRequest, shapes: TypicalShapes) -> Scores:
        return self.scorer(nodes, pod, shapes)

    def select(self, scores: FloatArray, selector: Selector) -> int:
        node = int(scores.argmax())
        best = scores[node]
        if best == -np.inf:
            return -1
        key = selector.order_key
        if key is None and selector.tie is TieMode.NODE_ORDER:
            return node
        if key is not None:
            # the best-scored rows' keys, the rest below any key: the first highest key wins
            sub = np.where(scores == best, key, -np.inf)
            node = int(sub.argmax())
            top = sub[node]
            if np.isfinite(top):
                if selector.tie is TieMode.RANDOM:
                    tied = np.flatnonzero(sub == top)
                    if tied.size > 1:
                        node = int(tied[selector.tie_rng.integers(tied.size)])
                return node
            node = int(scores.argmax())
        tied = np.flatnonzero(scores == best)
        if tied.size > 1 and key is not None:
            sub = key[tied]
            tied = tied[sub == sub.max()]
            node = int(tied[0])
        if tied.size > 1 and selector.tie is TieMode.RANDOM:
            node = int(tied[selector.tie_rng.integers(tied.size)])
        return node

    def gpus(
        self, state: ClusterState, node: int, pod: PodRequest, hint: int, rng: np.random.Generator
    ) -> tuple[int, ...]:
        del rng
        k = pod.num_gpu
        if not k:
            return ()
        rows = state.rows()
        row, count = rows.free[node], rows.count[node]
        if pod.shared:
            if self.allocator_for_fresh_gpus and row[hint] == MILLI:
                return allocator_choice(count, _full_mask(row), 1)[0][:1]
            return (hint,)
        if k == 1 and not self.allocator_for_fresh_gpus:
            return (next((g for g, f in enumerate(row) if f == MILLI), 0),)
        return allocator_choice(count, _full_mask(row), k)[0]

    def choose(self, state: ClusterState, pod: PodRequest, selector: Selector) -> Placement | None:
        scores = self.score(state.nodes, pod, state.typical)
        node = self.select(scores.score, selector)
        if node < 0:
            return None
        gpus = self.gpus(state, node, pod, int(scores.gpu[node]), selector.policy_rng)
        return Placement(node=node, gpus=gpus, milli=pod.gpu_milli)


@dataclass(frozen=True, kw_only=True)
class RandomPolicy(ScoredPolicy):
    """A uniformly random feasible node and a random fitting GPU, from the policy's own stream.

    With ``Order.CRC`` it becomes first-fit in CRC order (all feasible nodes score alike).
    """

    def choose(self, state: ClusterState, pod: PodRequest, selector: Selector) -> Placement | None:
        # only feasibility matters: checked on the whole state from the per-row GPU summary, which
        # is cheaper on every arrival than keeping per-shape caches current (binds are spread out)
        ok = feasible(state.nodes, pod, state.gpu_summary() if pod.num_gpu else None)
        node = self._pick(np.flatnonzero(ok), selector)
        if node < 0:
            return None
        return Placement(
            node=node, gpus=self.gpus(state, node, pod, -1, selector.policy_rng), milli=pod.gpu_milli
        )

    def select(self, scores: FloatArray, selector: Selector) -> int:
        return self._pick(np.flatnonzero(scores > -np.inf), selector)

    @staticmethod
    def _pick(fits: IntArray, selector: Selector) -> int:
        if not fits.size:
            return -1
        if selector.order_key is not None:
            return int(fits[int(selector.order_key[fits].argmax())])
        return int(fits[selector.policy_rng.integers(fits.size)])

    def gpus(
        self, state: ClusterState, node: int, pod: PodRequest, hint: int, rng: np.random.Generator
    ) -> tuple[int, ...]:
        if pod.shared:
            room = [g for g, f in enumerate(state.rows().free[node]) if f >= pod.gpu_milli]
            return (room[int(rng.integers(len(room)))],)
        return super().gpus(state, node, pod, hint, rng)


POLICIES: dict[Policy, PlacementPolicy] = {
    Policy.RANDOM: RandomPolicy(name="random", scorer=score_random, caches_scores=False),
    Policy.DOTPROD: ScoredPolicy(name="dotprod", scorer=score_dotprod),
    Policy.CLUSTERING: ScoredPolicy(name="clustering", scorer=score_clustering),
    Policy.PACKING: ScoredPolicy(name="packing", scorer=score_packing),
    Policy.BESTFIT: ScoredPolicy(name="bestfit", scorer=score_bestfit),
    Policy.FGD: ScoredPolicy(name="fgd", scorer=score_fgd),
    Policy.KUBEGPU: ScoredPolicy(
        name="kubegpu", scorer=score_kubegpu, default_order=Order.CRC, allocator_for_fresh_gpus=True
    ),
    Policy.KUBEGPU_PLAN: ScoredPolicy(
        name="kubegpu-plan", scorer=score_kubegpu_plan, default_order=Order.CRC, allocator_for_fresh_gpus=True
    ),
}


def get_policy(name: str | Policy) -> PlacementPolicy:
    """The registered policy called ``name``; raises ``InputError`` naming the known ones."""
    try:
        return POLICIES[Policy(name)]
    except ValueError:
        raise InputError(
            f"unknown placement policy {str(name)!r}; choose from {', '.join(p.value for p in Policy)}"
        ) from None
