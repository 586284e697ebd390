"""Per-GPU accounting of the cluster, and the placement decisions the extender makes against it.

Why: kube-scheduler sees ``nvidia.com/gpu`` as a count per node and nothing of shares or of which
GPU; the extender keeps, per GPU, the milli still free, built from the Node and Pod objects the API
server reports and the assignment annotations the extender wrote on pods (``assignment.py``). The
decisions are the simulator's policy objects (``kubegpu.sim.policy``) on a ``ClusterState``: the
same code ``kubegpu sim`` replays the trace with, so the extender decides as the simulator does.

A pod's claim on a node is a ``Holding``:

* ``RESERVED`` -- the filter chose node and GPUs; the GPUs are taken at once, so the next pod's
  filter (kube-scheduler filters pod B while pod A still binds) cannot take them again. A
  reservation no bind confirms within ``reservation_ttl_s`` is given back.
* ``BINDING`` -- the bind is writing the Binding; it does not expire.
* ``UNCERTAIN`` -- the Binding's write failed with no known outcome (5xx, timeout): it may land
  later, so the GPUs stay taken until the pod is seen bound or gone (``end_bind``, ``settle``).
* ``BOUND`` -- the API server shows the pod on the node (from a watch or a list).

Every method holds one lock, so concurrent filters and binds see one sequence of decisions and a
GPU's milli is never promised twice. A pod deleted or finished (``Succeeded``/``Failed``) gives its
share back. Pods bound by another scheduler are accounted too (their CPU and memory; their GPUs,
which nobody recorded, as the lowest-index GPUs with room, and logged).

A pod's recorded GPUs (its annotation) count only if they fit the node and the pod's own ask (its
node, one distinct GPU per GPU asked, each on the node, the ask's milli); otherwise the pod counts as
if nobody had recorded them: never less than it asks. Guesses are made against the state when it is
built (after every recorded GPU, in uid order) and again whenever their node changes or a pod on
it comes or goes, so the accounting depends only on the nodes and the pods' holdings, not on the
order they arrived in: a restarted extender that lists the same objects has the same state
(``snapshot``). A change that fails half-way drops the state, rebuilt from the nodes and holdings on
the next read; a holding the state cannot take is refused alone.

A node joining, leaving or changing touches its own row only (issue 57: a rebuild is seconds at
15,000 nodes, under the lock): the row is made again from the node and the holdings on it, as a
build makes every row (``_derive``); a node that leaves leaves its row empty for the next that
joins, so every row keeps its index (the score cache's change stamps, ``_applied``'s placements).
Rows are in name order after a build and in any order after joins: ties go by the name order
(``_rank``) either way.

Pods arrive as ``PodFacts`` (``kubegpu.extender.podfacts``: the few fields placement reads, made as
each page of a list arrives, so the ledger never holds raw Pod objects) or as raw objects, read at
the door (the filter's pod, tests).
"""

from __future__ import annotations

import logging
import threading
import time
from bisect import bisect_left
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

import numpy as np

from kubegpu.errors import PlacementError
from kubegpu.extender.ask import MAX_GPUS_PER_POD, Ask, ask_of
from kubegpu.extender.assignment import Assignment
from kubegpu.extender.node import GpuNode
from kubegpu.extender.podfacts import PodFacts, facts_of
from kubegpu.sim.policy import ClusterState, Order, Placement, PlacementPolicy, Selector, TieMode
from kubegpu.sim.scoring import MILLI, PodRequest, TypicalShapes, name_tiebreak

__all__ = ["Decision", "HoldKind", "Holding", "Ledger", "NodeUse"]

log = logging.getLogger(__name__)

TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})


class HoldKind(StrEnum):
    RESERVED = "reserved"
    BINDING = "binding"
    UNCERTAIN = "uncertain"  # the Binding's write failed ambiguously (5xx, timeout): it may yet land
    BOUND = "bound"


OWN_KINDS = frozenset({HoldKind.RESERVED, HoldKind.BINDING, HoldKind.UNCERTAIN})  # made by our filter


@dataclass(frozen=True, kw_only=True, slots=True)
class Holding:
    """What one pod takes on one node: its ask and the GPUs claimed for it (``ask.gpu_milli`` each).

    ``claim`` is the assignment this extender's filter chose (``RESERVED``, ``BINDING``,
    ``UNCERTAIN``) or the one the pod's annotation records (``BOUND``); ``None`` when nobody recorded
    one (another scheduler bound the pod). A claim is checked against the node whenever it is counted
    (``Ledger._valid_gpus``); one that does not fit is counted as a guess, never as less.
    """

    uid: str
    pod: str  # namespace/name, for messages
    node: str
    ask: Ask
    claim: Assignment | None
    kind: HoldKind
    expires_s: float = float("inf")  # monotonic deadline of a reservation
    unsure_s: float = 0.0  # monotonic time the bind's outcome became unknown (UNCERTAIN)


@dataclass(frozen=True, kw_only=True)
class Decision:
    """The filter's answer: the chosen node (or ``None``) and why every other candidate was refused.

    ``unresolvable`` reasons are ones no preemption can fix (a malformed GPU ask, a node kubegpu does
    not know); ``failed`` ones are the rest (no room now; another node chosen).
    """

    node: str | None
    assignment: Assignment | None
    failed: Mapping[str, str]
    unresolvable: Mapping[str, str]


@dataclass(frozen=True, kw_only=True)
class NodeUse:
    """A node's accounting: per GPU the milli still free, and the CPU and memory left."""

    gpu_free_milli: tuple[int, ...]
    cpu_left_milli: int
    memory_left_mib: int


def _field(obj: object, key: str) -> Mapping[str, Any]:
    """``obj[key]`` when both are JSON objects, else ``{}`` (hostile objects have any shape)."""
    value = obj.get(key) if isinstance(obj, Mapping) else None
    return value if isinstance(value, Mapping) else {}


def _uid(pod: object) -> str:
    uid = _field(pod, "metadata").get("uid")
    return uid if isinstance(uid, str) else ""


def _pod_name(pod: object) -> str:
    meta = _field(pod, "metadata")
    return f"{str(meta.get('namespace', ''))[:253]}/{str(meta.get('name', ''))[:253]}"


def _facts(pod: Mapping[str, Any] | PodFacts) -> PodFacts:
    """The ledger's record of a pod: raw objects (the filter's, tests') are read at the door."""
    return pod if isinstance(pod, PodFacts) else facts_of(pod)


FAILED_NODES_LISTED = 1000  # nodes named with a reason when a pod fits nowhere (about 55 KB of JSON)
SCORE_CACHE_SHAPES = 256  # distinct ask shapes whose scores are kept
REQUESTS_KEPT = 4096  # distinct asks whose PodRequest is shared between holdings


def _alike(names: Sequence[str], reason: str, total: int) -> dict[str, str]:
    """``reason`` for every node of ``names`` (of ``total`` candidates); past ``FAILED_NODES_LISTED``
    of them, for that many, with the count (as ``Ledger._why_not`` words a reason that stands for
    more nodes than it names)."""
    if len(names) <= FAILED_NODES_LISTED:
        return dict.fromkeys(names, reason)
    return dict.fromkeys(names[:FAILED_NODES_LISTED], f"{reason} ({len(names):,} of {total:,} nodes)")


@dataclass(kw_only=True, eq=False)
class _ScoreCache:
    score: np.ndarray
    gpu: np.ndarray
    stamp: int  # the ledger's change counter when these scores were last brought up to date


class Ledger:
    """The extender's accounting and decisions; thread-safe (one lock). ``clock`` is monotonic seconds."""

    def __init__(
        self,
        *,
        policy: PlacementPolicy,
        typical: TypicalShapes,
        reservation_ttl_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
        seed: int = 0,
    ) -> None:
        self.policy = policy
        self._typical = typical
        self._n_models = typical.model_ok.shape[1]
        # a node's model, by its label, onto the shapes' model table; unnamed models are column 0
        self._model_column = {m: i for i, m in enumerate(typical.models) if m}
        self._ttl_s = reservation_ttl_s
        self._clock = clock
        self._seed = seed
        self._lock = threading.RLock()
        self._nodes: dict[str, GpuNode] = {}
        self._holdings: dict[str, Holding] = {}
        self._next_expiry_s = float("inf")  # no reservation lapses before this (scans are skipped)
        self._state: ClusterState | None = None
        self._rows: dict[str, int] = {}  # a known node's row in the state (stable while the state lives)
        self._rank = np.zeros(0, dtype=np.int64)  # per row: its node's place in name order (dead: n)
        self._names: list[str] = []  # the rows' node names, sorted (the fixed node order of ties)
        self._dead: list[int] = []  # rows of removed nodes, reused by nodes that join
        self._on_node: dict[str, set[str]] = {}  # node name -> uids of the holdings on it
        self._guessing: set[str] = set()  # nodes where some holding's GPUs are counted as a guess
        self.builds = 0  # full builds of the state (a width growth, a failed change, a pods list)
        self.rows_derived = 0  # single rows made again from their node and holdings (node events)
        # holdings bound into the current state, with exactly what was bound (unbound the same way)
        self._applied: dict[str, tuple[Placement, PodRequest]] = {}
        self._guessed: set[str] = set()  # pods whose GPUs are counted as a guess (logged once each)
        self._order_key: np.ndarray | None = None
        # scores per ask shape for every row, rescored only where a row changed since (as the replay does)
        self._scores: OrderedDict[tuple[int, int, int, int], _ScoreCache] = OrderedDict()
        self._version = 0
        self._changed = np.zeros(0, dtype=np.int64)
        # one PodRequest per distinct (ask, counts GPUs): 450,000 pods share a few dozen
        self._requests: dict[tuple[Ask, bool], PodRequest] = {}
        self._tie_rng = np.random.default_rng([seed, 0])
        self._policy_rng = np.random.default_rng([seed, 1])

    @contextmanager
    def _mutating(self) -> Iterator[None]:
        """The lock, and should anything fail half-way, the cached state is dropped: it is rebuilt
        from the nodes and holdings (``_build``) on the next read, so no half-applied change stays."""
        with self._lock:
            try:
                yield
            except BaseException:
                self._state = None
                raise

    # -- the cluster state -------------------------------------------------------------------------

    def _build(self) -> ClusterState:
        self.builds += 1
        names = sorted(self._nodes)
        nodes = [self._nodes[n] for n in names]
        width = max([1, *(n.gpu_count for n in nodes)])
        state = ClusterState.build(
            names=names,
            cpu_milli=np.array([n.cpu_milli for n in nodes], dtype=np.int64),
            memory_mib=np.array([n.memory_mib for n in nodes], dtype=np.int64),
            gpu_count=np.array([n.gpu_count for n in nodes], dtype=np.int64),
            model_index=np.array([self._model_column.get(n.gpu_model, 0) for n in nodes], dtype=np.int64),
            typical=self._typical,
            width=width,
        )
        self._state, self._rows, self._applied = state, {n: i for i, n in enumerate(names)}, {}
        self._names, self._dead, self._guessing = names, [], set()
        self._rank = np.arange(len(names), dtype=np.int64)
        self._order_key = state.crc_key() if self.policy.default_order is Order.CRC else None
        self._scores.clear()
        self._version, self._changed = 0, np.zeros(len(names), dtype=np.int64)
        # recorded GPUs first, then the guesses (lowest GPUs with room after every recorded one), each
        # in uid order: the same state whatever order the nodes and pods arrived in
        ordered = sorted(self._holdings.values(), key=lambda h: h.uid)
        recorded = [h for h in ordered if not h.ask.num_gpu or self._valid_gpus(h) is not None]
        known = {h.uid for h in recorded}
        for holding in recorded + [h for h in ordered if h.uid not in known]:
            try:
                self._apply(holding)
            except Exception:  # a holding the state cannot take is refused alone, not the whole ledger
                log.exception("pod cannot be counted; left out: %s on %s", holding.pod, holding.node)
                self._forget(holding.uid)
        return state

    def _current(self) -> ClusterState:
        return self._state if self._state is not None else self._build()

    def _valid_gpus(self, holding: Holding) -> tuple[int, ...] | None:
        """The claimed GPUs as indices on the holding's node, if the claim fits the node and the pod's
        own ask: its node, one distinct GPU per GPU asked, each on the node, the ask's milli."""
        claim, info = holding.claim, self._nodes.get(holding.node)
        if claim is None or info is None or claim.node != holding.node:
            return None
        if claim.milli != holding.ask.gpu_milli:
            return None
        gpus = claim.gpus
        if claim.uuids and info.uuids:
            index = {u: i for i, u in enumerate(info.uuids)}
            if all(u in index for u in claim.uuids):
                gpus = tuple(index[u] for u in claim.uuids)
        if len(gpus) != holding.ask.num_gpu or len(set(gpus)) != len(gpus):
            return None
        if not all(0 <= g < info.gpu_count for g in gpus):
            return None
        return gpus

    def _guess_gpus(self, row: int, holding: Holding) -> tuple[int, ...]:
        """GPUs of a pod whose claim is missing or does not fit: the lowest-index ones with room now,
        then those with the most left (every GPU of the node when it has fewer than the pod asks)."""
        assert self._state is not None
        count = self._nodes[holding.node].gpu_count
        free = self._state.rows().free[row][:count]
        ask = holding.ask
        need = ask.gpu_milli if ask.num_gpu == 1 and ask.gpu_milli < MILLI else MILLI
        room = [g for g in range(count) if free[g] >= need]
        rest = sorted((g for g in range(count) if free[g] < need), key=lambda g: (-free[g], g))
        chosen = tuple((room + rest)[: ask.num_gpu])
        if holding.uid not in self._guessed:
            self._guessed.add(holding.uid)
            why = "a GPU assignment that does not fit the node" if holding.claim else "no kubegpu assignment"
            log.warning(
                "pod bound with %s; counting GPUs %s: %s on %s", why, list(chosen), holding.pod, holding.node
            )
        return chosen

    def _placement(self, holding: Holding) -> Placement | None:
        row = self._rows.get(holding.node)
        if row is None:
            return None  # counted once its node is known (its row is made then)
        if not holding.ask.num_gpu:
            return Placement(node=row, gpus=(), milli=0)
        gpus = self._valid_gpus(holding)
        if gpus is None:
            self._guessing.add(holding.node)
            gpus = self._guess_gpus(row, holding)
        return Placement(node=row, gpus=gpus, milli=holding.ask.gpu_milli)

    def _is_guess(self, holding: Holding) -> bool:
        return bool(holding.ask.num_gpu) and self._valid_gpus(holding) is None

    def _request(self, ask: Ask, placement: Placement) -> PodRequest:
        """The ask as the simulator's state takes it: its GPU class column is at most ``MAX_GPUS_PER_POD``
        (the GPUs themselves are the placement's); no GPUs when the node has none to count."""
        key = (ask, bool(placement.gpus))
        found = self._requests.get(key)
        if found is not None:
            return found
        if not placement.gpus:
            request = replace(ask, num_gpu=0, gpu_milli=0).request(self._n_models)
        else:
            request = replace(ask, num_gpu=min(ask.num_gpu, MAX_GPUS_PER_POD)).request(self._n_models)
        if len(self._requests) >= REQUESTS_KEPT:
            self._requests.clear()
        self._requests[key] = request
        return request

    def _apply(self, holding: Holding) -> None:
        if self._state is None:
            return
        placement = self._placement(holding)
        if placement is None:
            return
        request = self._request(holding.ask, placement)
        free = self._state.rows().free[placement.node]
        if any(free[g] < placement.milli for g in placement.gpus):
            log.warning(
                "GPU over-committed (the API shows more than it holds): %s on %s", holding.pod, holding.node
            )
        self._state.bind(placement, request)
        self._touch(placement.node)
        self._applied[holding.uid] = (placement, request)

    def _unapply(self, holding: Holding) -> None:
        applied = self._applied.pop(holding.uid, None)
        if self._state is None or applied is None:
            return
        self._state.unbind(*applied)
        self._touch(applied[0].node)

    def _touch(self, row: int) -> None:
        self._version += 1
        self._changed[row] = self._version

    def _scored(self, state: ClusterState, ask: Ask) -> _ScoreCache:
        """Every row's score for ``ask``; rows unchanged since the shape was last scored are reused
        (a row's score depends on that row alone)."""
        key = (ask.cpu_milli, ask.memory_mib, ask.num_gpu, ask.gpu_milli)
        entry = self._scores.get(key)
        if entry is None:
            result = self.policy.score(state.nodes, ask.request(self._n_models), state.typical)
            entry = _ScoreCache(score=result.score.copy(), gpu=result.gpu.copy(), stamp=self._version)
            self._scores[key] = entry
            if len(self._scores) > SCORE_CACHE_SHAPES:
                self._scores.popitem(last=False)
            return entry
        self._scores.move_to_end(key)
        grown = len(self._changed) - entry.score.size
        if grown > 0:  # rows appended since (nodes joined): touched, so rescored just below
            entry.score = np.append(entry.score, np.full(grown, -np.inf))
            entry.gpu = np.append(entry.gpu, np.full(grown, -1, dtype=entry.gpu.dtype))
        dirty = np.flatnonzero(self._changed > entry.stamp)
        if dirty.size:
            result = self.policy.score(state.nodes.take(dirty), ask.request(self._n_models), state.typical)
            entry.score[dirty] = result.score
            entry.gpu[dirty] = result.gpu
            entry.stamp = self._version
        return entry

    def _put(self, holding: Holding) -> None:
        old = self._holdings.get(holding.uid)
        if old is not None:
            self._on_node.get(old.node, set()).discard(old.uid)
        self._holdings[holding.uid] = holding
        self._on_node.setdefault(holding.node, set()).add(holding.uid)
        self._next_expiry_s = min(self._next_expiry_s, holding.expires_s)
        self._count(old, holding)

    def _drop(self, uid: str) -> Holding | None:
        old = self._forget(uid)
        if old is not None:
            self._count(old, None)
        return old

    def _forget(self, uid: str) -> Holding | None:
        """``uid``'s holding out of the books (not out of the state: ``_count`` does that)."""
        old = self._holdings.pop(uid, None)
        self._guessed.discard(uid)
        if old is not None:
            on = self._on_node.get(old.node)
            if on is not None:
                on.discard(uid)
                if not on:
                    del self._on_node[old.node]
        return old

    def _count(self, old: Holding | None, new: Holding | None) -> None:
        """The state after ``old`` was replaced by ``new`` (either may be ``None``). A bind or unbind
        of that pod alone, except on a node where some GPUs are a guess (before or after): guesses
        come after every recorded GPU, in uid order, so that node's row is made again
        (``_derive``), as a full build would make it."""
        if self._state is None:
            return
        again = {
            h.node
            for h in (old, new)
            if h is not None and h.node in self._rows and (h.node in self._guessing or self._is_guess(h))
        }
        if old is not None:
            if old.node in again:
                self._applied.pop(old.uid, None)
            else:
                self._unapply(old)
        if new is not None and new.node not in again:
            self._apply(new)
        for node in sorted(again):
            self._derive(node)

    def _derive(self, name: str) -> None:
        """Make ``name``'s row again from the node and the holdings on it, as ``_build`` makes every
        row: the empty node, then the recorded GPUs, then the guesses, each in uid order."""
        assert self._state is not None
        row, info = self._rows[name], self._nodes[name]
        self.rows_derived += 1
        self._guessing.discard(name)
        held = sorted((self._holdings[u] for u in self._on_node.get(name, ())), key=lambda h: h.uid)
        for h in held:
            self._applied.pop(h.uid, None)
        self._state.set_row(
            row,
            name=name,
            cpu_milli=info.cpu_milli,
            memory_mib=info.memory_mib,
            gpu_count=info.gpu_count,
            model_index=self._model_column.get(info.gpu_model, 0),
        )
        self._touch(row)
        recorded = [h for h in held if not self._is_guess(h)]
        for holding in recorded + [h for h in held if self._is_guess(h)]:
            try:
                self._apply(holding)
            except Exception:  # a holding the state cannot take is refused alone, not the whole ledger
                log.exception("pod cannot be counted; left out: %s on %s", holding.pod, holding.node)
                self._forget(holding.uid)

    def _expire(self) -> None:
        now = self._clock()
        if not self._holdings or now < self._next_expiry_s:
            return
        reserved = [h for h in self._holdings.values() if h.kind is HoldKind.RESERVED]
        self._next_expiry_s = min([float("inf"), *(h.expires_s for h in reserved if h.expires_s > now)])
        for h in [h for h in reserved if h.expires_s <= now]:
            log.info("reservation expired unbound; GPUs given back: %s on %s", h.pod, h.node)
            self._drop(h.uid)

    # -- nodes -------------------------------------------------------------------------------------

    def upsert_node(self, node: GpuNode) -> None:
        """A node joined or changed: its row alone is made again (a node wider than every row so far
        rebuilds the state, on the next read)."""
        with self._mutating():
            if self._nodes.get(node.name) != node:
                self._nodes[node.name] = node
                self._node_changed(node.name)

    def remove_node(self, name: str) -> None:
        """A node left: its row is emptied and kept for the next node that joins; its pods' holdings
        stay (counted again if it comes back)."""
        with self._mutating():
            if self._nodes.pop(name, None) is not None:
                self._node_changed(name)

    def replace_nodes(self, nodes: Iterable[GpuNode]) -> None:
        """A full list of the nodes: those gone, new or changed are taken one by one as events are
        (a list that changes most nodes rebuilds the state instead)."""
        with self._mutating():
            fresh = {n.name: n for n in nodes}
            if fresh == self._nodes:
                return
            changed = [n for n in self._nodes if n not in fresh]
            changed += [name for name, n in fresh.items() if self._nodes.get(name) != n]
            self._nodes = fresh
            if len(changed) > max(64, len(fresh) // 4):
                self._state = None  # most rows change: one build is cheaper
                return
            for name in sorted(changed):
                self._node_changed(name)

    def _node_changed(self, name: str) -> None:
        """``self._nodes[name]`` is new, changed or gone: the state follows, that row alone."""
        state = self._state
        if state is None:
            return
        info = self._nodes.get(name)
        row = self._rows.get(name)
        if info is None:
            if row is not None:
                self._retire(name, row)
            return
        if info.gpu_count > state.width:
            self._state = None  # wider than every row: rebuilt on the next read
            return
        if row is None:
            self._admit(name)
        self._derive(name)

    def _admit(self, name: str) -> None:
        """A row for the new node ``name`` (a removed node's, or a new last one), in the node order."""
        assert self._state is not None
        place = bisect_left(self._names, name)
        self._names.insert(place, name)
        self._rank[self._rank >= place] += 1
        if self._dead:
            row = self._dead.pop()
        else:
            row = self._state.append_row(name=name, cpu_milli=0, memory_mib=0, gpu_count=0, model_index=0)
            self._rank = np.append(self._rank, 0)
            self._changed = np.append(self._changed, 0)
            if self._order_key is not None:
                self._order_key = np.append(self._order_key, 0.0)
        self._rank[row] = place
        if self._order_key is not None:
            self._order_key[row] = name_tiebreak([name])[0]
        self._rows[name] = row

    def _retire(self, name: str, row: int) -> None:
        """The removed node ``name``'s row: its holdings uncounted, the row an empty node of nothing."""
        assert self._state is not None
        for uid in self._on_node.get(name, ()):
            self._applied.pop(uid, None)
        del self._rows[name]
        self._guessing.discard(name)
        place = bisect_left(self._names, name)
        del self._names[place]
        self._rank[self._rank > place] -= 1
        self._rank[row] = len(self._rank)  # after every live row (never a candidate anyway)
        self._state.set_row(row, name=name, cpu_milli=0, memory_mib=0, gpu_count=0, model_index=0)
        self._touch(row)
        self._dead.append(row)

    # -- pods as the API server reports them -------------------------------------------------------

    def observe_pod(self, pod: Mapping[str, Any] | PodFacts) -> None:
        """A pod listed or watched (a raw object, or its ``PodFacts``): account it where the API says
        it is (nothing if not bound). A pod whose resources cannot be read is left out (logged); its
        earlier holding is dropped."""
        facts = _facts(pod)
        with self._mutating():
            self._observe(facts)

    def _observe(self, pod: PodFacts) -> None:
        uid, node = pod.uid, pod.node
        if not uid:
            return
        if pod.phase in TERMINAL_PHASES:
            self._drop(uid)
            return
        if not node:
            return  # pending: only a reservation of ours (if any) holds anything for it
        old = self._holdings.get(uid)
        if old is not None and old.node == node and old.kind in OWN_KINDS:
            # our bind landed: the GPUs our filter chose stay (the annotation is what we wrote)
            self._holdings[uid] = replace(old, kind=HoldKind.BOUND, expires_s=float("inf"))
            return
        ask = pod.ask
        if ask is None:
            log.warning("pod's resources unreadable; not counted: %s: %s", pod.pod, pod.ask_error)
            self._drop(uid)
            return
        claim = pod.claim
        if pod.claim_error:
            log.warning("unreadable GPU assignment on %s: %s", pod.pod, pod.claim_error)
        holding = Holding(uid=uid, pod=pod.pod, node=node, ask=ask, claim=claim, kind=HoldKind.BOUND)
        if (
            old is not None
            and old.kind is HoldKind.BOUND
            and (old.node, old.ask, old.claim)
            == (
                node,
                ask,
                claim,
            )
        ):
            return  # nothing changed (a status update)
        self._put(holding)

    def remove_pod(self, uid: str) -> None:
        """A pod deleted: its share is free again."""
        with self._mutating():
            self._drop(uid)

    def replace_pods(self, pods: Iterable[Mapping[str, Any] | PodFacts]) -> None:
        """A full list (raw objects, or their ``PodFacts``, as the list streams them): pods no longer
        there are forgotten (our reservations are kept; a bind whose outcome was unknown is resolved:
        the pod is bound, or gone). The state is rebuilt after, so that guessed GPUs come after every
        recorded one whatever the list's order."""
        facts = [_facts(p) for p in pods]  # outside the lock: reading raw objects takes time
        with self._mutating():
            present = {p.uid for p in facts}
            for uid, h in list(self._holdings.items()):
                if uid not in present and h.kind in (HoldKind.BOUND, HoldKind.UNCERTAIN):
                    self._drop(uid)
            self._state = None
            for p in facts:
                try:
                    self._observe(p)
                except Exception:  # one object the ledger cannot take is refused alone
                    log.exception("pod cannot be counted; left out: %s", p.pod)
                    self._drop(p.uid)

    def settle(self, pod: Mapping[str, Any]) -> None:
        """``pod`` as just read from the API: a bind of it whose outcome was unknown is resolved. Bound:
        counted where it is. Not bound ``reservation_ttl_s`` after the failed write: the write did not
        land (the API server gives up on a write long before), and its GPUs are given back."""
        uid = _uid(pod)
        with self._mutating():
            h = self._holdings.get(uid)
            if h is None or h.kind is not HoldKind.UNCERTAIN:
                return
            if _field(pod, "spec").get("nodeName"):
                self._observe(facts_of(pod))
            elif self._clock() >= h.unsure_s + self._ttl_s:
                log.info("bind did not land; GPUs given back: %s on %s", h.pod, h.node)
                self._drop(uid)

    # -- decisions ---------------------------------------------------------------------------------

    def decide(self, pod: Mapping[str, Any], candidates: Sequence[str]) -> Decision:
        """The filter: choose a node among ``candidates`` and GPUs on it, and reserve them."""
        uid = _uid(pod)
        with self._mutating():
            self._expire()
            old = self._holdings.get(uid)
            if old is not None and old.kind is not HoldKind.RESERVED:  # bound, or its bind in flight
                node = old.node if old.node in candidates else None
                others = {n: f"kubegpu: pod is placed on {old.node}" for n in candidates if n != old.node}
                if node:
                    self._current()  # a guessed claim's GPUs are known once the state is built
                assignment = self._assignment(old) if node else None
                return Decision(node=node, assignment=assignment, failed=others, unresolvable={})
            if old is not None:
                self._drop(uid)  # a new attempt: the earlier choice is void
            try:
                if not uid:
                    raise PlacementError("the pod has no metadata.uid")
                ask = ask_of(pod)
            except PlacementError as exc:
                reason = f"kubegpu: {exc}"
                refused = _alike(candidates, reason, len(candidates))
                return Decision(node=None, assignment=None, failed={}, unresolvable=refused)
            choice = self._choose(ask, candidates)
            if choice.node is None:
                return choice
            name, gpus = choice.node, choice.assignment.gpus if choice.assignment else ()
            info = self._nodes[name]
            claim = Assignment(
                node=name,
                gpus=gpus,
                uuids=tuple(info.uuids[g] for g in gpus) if info.uuids else (),
                milli=ask.gpu_milli,
            )
            holding = Holding(
                uid=uid,
                pod=_pod_name(pod),
                node=name,
                ask=ask,
                claim=claim,
                kind=HoldKind.RESERVED,
                expires_s=self._clock() + self._ttl_s,
            )
            self._put(holding)
            return replace(choice, assignment=self._assignment(holding))

    def preview(self, pod: Mapping[str, Any], candidates: Sequence[str]) -> str | None:
        """The node ``decide`` would choose now, reserving nothing (for prioritize)."""
        with self._lock:
            try:
                ask = ask_of(pod)
            except PlacementError:
                return None
            return self._choose(ask, candidates).node

    def warm_up(self) -> None:
        """Score a share and 1, 2, 4, 8 whole GPUs once on every node, reserving nothing: the first
        real filter then pays neither the lazy imports nor the allocator's first searches."""
        with self._lock:
            names = list(self._nodes)
            for num, milli in ((1, 500), (1, MILLI), (2, MILLI), (4, MILLI), (8, MILLI)):
                self._choose(Ask(cpu_milli=0, memory_mib=0, num_gpu=num, gpu_milli=milli), names)

    def _choose(self, ask: Ask, candidates: Sequence[str]) -> Decision:
        state = self._current()
        known = [n for n in candidates if n in self._rows]
        missing = [n for n in candidates if n not in self._rows]
        unknown = _alike(missing, "kubegpu: node not known to the extender yet", len(candidates))
        if not known:
            return Decision(node=None, assignment=None, failed={}, unresolvable=unknown)
        # the candidates' rows in node-name order (a fresh state's row order: ties go to the first)
        rows = np.array([self._rows[n] for n in known], dtype=np.int64)
        rows = rows[np.argsort(self._rank[rows], kind="stable")]
        request = ask.request(self._n_models)
        cached = self._scored(state, ask)
        score, hint = cached.score[rows], cached.gpu[rows]
        selector = Selector(
            tie=TieMode.NODE_ORDER,
            order_key=None if self._order_key is None else self._order_key[rows],
            tie_rng=self._tie_rng,
            policy_rng=self._policy_rng,
        )
        pick = self.policy.select(score, selector)
        if pick < 0:
            return Decision(node=None, assignment=None, failed=self._why_not(rows, ask), unresolvable=unknown)
        row = int(rows[pick])
        gpus = self.policy.gpus(state, row, request, int(hint[pick]), self._policy_rng)
        name = state.names[row]
        # the other candidates need no reason: a node left out of the answer is simply not feasible,
        # and with one feasible node the pod is placed (a thousand reasons would only cost JSON)
        chosen = Assignment(node=name, gpus=tuple(int(g) for g in gpus), uuids=(), milli=ask.gpu_milli)
        return Decision(node=name, assignment=chosen, failed={}, unresolvable=unknown)

    def _why_not(self, rows: np.ndarray, ask: Ask) -> dict[str, str]:
        """Why the pod fits none of ``rows``, per node: the first reason that applies, worded without
        the node's own numbers so that kube-scheduler's event counts nodes per reason
        ("0/1213 nodes are available: 900 kubegpu: no GPU with 1000m free, ...").

        At most ``FAILED_NODES_LISTED`` nodes are named (15,000 reasons are 800 KB of JSON for every
        retry of a pending pod): past that, each reason names some of its nodes and carries its
        count, "kubegpu: no GPU with 1000m free (14,812 of 15,000 nodes)", so the event still says
        why and for how many. A node left out is still not feasible (only ``NodeNames`` pass); it
        carries no reason of ours, so preemption may skip it (recent kube-schedulers treat a node
        without a status as unresolvable): the nodes named are the ones it is sure to try, and
        DefaultPreemption samples only 10% of the nodes (at least 100) per attempt anyway."""
        state = self._current()
        n = state.nodes
        need = ask.gpu_milli if ask.num_gpu == 1 else MILLI
        room = f"no GPU with {need}m free" if ask.num_gpu == 1 else f"fewer than {ask.num_gpu} free GPUs"
        reasons = (
            f"kubegpu: node has fewer than {ask.num_gpu} GPUs",
            f"kubegpu: {room}",
            f"kubegpu: less than the pod's {ask.cpu_milli}m CPU left",
            f"kubegpu: less than the pod's {ask.memory_mib} MiB memory left",
            "kubegpu: the placement policy rejected the node",
        )
        code = np.select(
            [
                n.gpu_count[rows] < ask.num_gpu,
                (n.gpu_free_milli[rows] >= need).sum(axis=1) < ask.num_gpu,
                n.cpu_left_milli[rows] < ask.cpu_milli,
                n.memory_left_mib[rows] < ask.memory_mib,
            ],
            [0, 1, 2, 3],
            default=4,
        )
        names = state.names
        if rows.size <= FAILED_NODES_LISTED:
            return {names[int(r)]: reasons[int(c)] for r, c in zip(rows, code, strict=True)}
        # too many to list: each reason names some of its nodes (the first in node order; every reason
        # at least one, the cap shared out evenly) and says how many nodes it stands for
        counts = np.bincount(code, minlength=len(reasons))
        present = sorted((int(c) for c in np.flatnonzero(counts)), key=lambda c: (counts[c], c))
        out: dict[str, str] = {}
        left = FAILED_NODES_LISTED
        for i, c in enumerate(present):
            quota = min(int(counts[c]), left // (len(present) - i))
            left -= quota
            reason = f"{reasons[c]} ({int(counts[c]):,} of {rows.size:,} nodes)"
            out.update((names[int(r)], reason) for r in rows[code == c][:quota])
        return out

    def _assignment(self, holding: Holding) -> Assignment:
        """The GPUs counted for ``holding`` (its claim, or the guess), by index and UUID."""
        applied = self._applied.get(holding.uid)
        claimed = holding.claim.gpus if holding.claim is not None else ()
        gpus = applied[0].gpus if applied is not None else claimed
        info = self._nodes.get(holding.node)
        ok = info is not None and info.uuids and all(g < len(info.uuids) for g in gpus)
        uuids = tuple(info.uuids[g] for g in gpus) if ok and info is not None else ()
        return Assignment(node=holding.node, gpus=gpus, uuids=uuids, milli=holding.ask.gpu_milli)

    def begin_bind(self, uid: str, node: str) -> Assignment | None:
        """The bind starts: the reservation this extender's filter made for the pod on ``node``
        (``RESERVED``, or ``UNCERTAIN``: a bind tried before with no known outcome) stops expiring and
        its assignment is returned. ``None`` when there is none: no filter of ours placed the pod
        there, a bind of it is already in flight, it is bound, or its GPUs no longer fit the node."""
        with self._mutating():
            self._expire()
            h = self._holdings.get(uid)
            if h is None or h.node != node or h.kind not in (HoldKind.RESERVED, HoldKind.UNCERTAIN):
                return None
            if h.ask.num_gpu and self._valid_gpus(h) is None:
                return None
            self._holdings[uid] = h = replace(h, kind=HoldKind.BINDING, expires_s=float("inf"))
            return self._assignment(h)

    def end_bind(self, uid: str, *, ok: bool, certain: bool = True) -> None:
        """The Binding was written (``ok``), refused (``certain``: the GPUs are given back at once), or
        its outcome is unknown (a 5xx or a timeout: the write may land later). Then the GPUs stay held
        (``UNCERTAIN``) until the pod is seen bound (a watch event, ``settle``) or gone (deleted, or
        missing from a list)."""
        with self._mutating():
            h = self._holdings.get(uid)
            if h is None or h.kind is not HoldKind.BINDING:
                return
            if ok:
                self._holdings[uid] = replace(h, kind=HoldKind.BOUND)
            elif certain:
                self._drop(uid)
            else:
                self._holdings[uid] = replace(h, kind=HoldKind.UNCERTAIN, unsure_s=self._clock())

    # -- reads -------------------------------------------------------------------------------------

    def holding(self, uid: str) -> Holding | None:
        with self._lock:
            return self._holdings.get(uid)

    def snapshot(self) -> dict[str, NodeUse]:
        """Every node's accounting (what a restarted extender must rebuild exactly)."""
        with self._lock:
            state = self._current()
            n = state.nodes
            return {
                name: NodeUse(
                    gpu_free_milli=tuple(int(f) for f in n.gpu_free_milli[row, : int(n.gpu_count[row])]),
                    cpu_left_milli=int(n.cpu_left_milli[row]),
                    memory_left_mib=int(n.memory_left_mib[row]),
                )
                for name, row in ((name, self._rows[name]) for name in self._names)
            }

    def node_count(self) -> int:
        with self._lock:
            return len(self._nodes)
