"""Shares of one GPU (``kubegpu.io/gpu-milli``): which pod kubelet is admitting, the GPU it gets, and
the durable record of what was handed out.

kubelet's Allocate names only device IDs (``m`` tokens of ``kubegpu.io/gpu-milli``, taken by kubelet
from any GPU), never the pod. The GPU a share belongs on is the one ``kubegpu extender`` chose and
wrote on the pod at bind (``kubegpu.io/gpu-assignment``, ``kubegpu.model.assignment``). So, as HAMi
does, the agent finds the pod being admitted among the pods bound to its node:

* **claims** (``share_claims``): pods on this node, not terminating, still ``Pending``, with an
  assignment for this node, and a container asking ``kubegpu.io/gpu-milli`` that has not been handed
  its GPU yet (the ledger says); per pod only its *next* such container, in kubelet's order (init
  containers, then containers). Pods already half handed out (kubelet admits a pod's containers one
  after another) come first, then bind order, oldest first (the PodScheduled condition's time, then
  the creation time, then namespace/name).
* **pick**: the first claim whose container asks exactly as many thousandths as the Allocate names
  devices. kubelet admits one pod at a time, so the oldest bound claim is the pod being admitted.
  Only when kubelet admits two pods asking the same amount out of bind order can they swap GPUs; both
  GPUs then still carry exactly the thousandths the extender accounted. What each container really got
  is logged (``share handed out``) and kept in the ledger.
* **the ledger** (``ShareLedger``): one JSON file, replaced atomically, listing each hand-out (pod UID,
  namespace/name, container, GPU UUID, milli), so a restarted agent never hands a pod twice and knows
  which GPUs hold shares. Hand-outs of pods no longer on the node, or finished (``Succeeded``,
  ``Failed``), are dropped at the next listing; a terminating pod's stay until its containers stop.
* **capacity**: the agent is the last line against an over-committed GPU, whatever the annotations
  say. A hand-out is refused (``DeviceRequestError``, nothing recorded) when the GPU's live share pods
  in the ledger (each counted as the extender counts it, ``pod_milli``) plus the claim's pod would
  exceed ``GPU_MILLI``; so is a whole GPU (``check_whole``) on a GPU holding shares.

``ShareBroker`` joins them to the API (a ``list_pods`` callable: one LIST of the node's pods per call,
which is always fresh, so the pod kubelet is admitting is in it) and is what ``ResourcePlugin`` calls.
kubelet asks GetPreferredAllocation (``peek``) right before Allocate (``hand_out``) for the same
admission, so a hand-out within ``REUSE_S`` of a peek uses the peek's LIST once instead of making
its own; when that list holds no matching pod, a fresh LIST decides.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

from kubegpu.atomicfile import write_atomically
from kubegpu.deviceplugin.inventory import MILLI_RESOURCE
from kubegpu.echo import clip
from kubegpu.errors import DeviceRequestError, DeviceRequestProblem, KubegpuError, PlacementError
from kubegpu.model.assignment import ANNOTATION, assignment_of
from kubegpu.model.node import Node

__all__ = [
    "LEDGER_NAME",
    "HandOut",
    "ShareBroker",
    "ShareClaim",
    "ShareLedger",
    "container_milli",
    "pick",
    "pod_milli",
    "share_claims",
]

log = logging.getLogger(__name__)

LEDGER_NAME = "shares.json"
REUSE_S = 1.0  # a peek's LIST serves the next hand-out if it comes within this many seconds
LEDGER_VERSION = 1
GPU_MILLI = 1000  # thousandths in one GPU: no GPU is handed out beyond this
_SI = {"": 1, "k": 10**3, "M": 10**6}

ApiObject = Mapping[str, Any]


@dataclass(frozen=True, kw_only=True)
class HandOut:
    """One container given a GPU for its share."""

    pod_uid: str
    namespace: str
    pod: str
    container: str
    uuid: str
    milli: int


@dataclass(frozen=True, kw_only=True)
class ShareClaim:
    """A pod's next container waiting for its share: the GPU the pod's assignment names."""

    pod_uid: str
    namespace: str
    pod: str
    container: str
    milli: int  # what this container asks
    uuid: str  # the GPU the assignment names
    gpu: int
    started: bool  # an earlier container of the pod was handed out already
    order: tuple[str, str, str, str]  # (scheduled at, created at, namespace, name)


def _quantity(value: object) -> int | None:
    """An extended-resource quantity as an integer (the API server writes 1000 as ``1k``); None if not."""
    text = str(value).strip()
    suffix = text[-1:] if text[-1:] in ("k", "M") else ""
    try:
        number = Decimal(text[: len(text) - len(suffix)]) * _SI[suffix]
    except (InvalidOperation, ValueError):
        return None
    return int(number) if number == number.to_integral_value() and number > 0 else None


def container_milli(container: Mapping[str, Any]) -> int | None:
    """What one container asks of ``kubegpu.io/gpu-milli`` (request, else limit); None if nothing."""
    res = container.get("resources") or {}
    for section in ("requests", "limits"):
        value = (res.get(section) or {}).get(MILLI_RESOURCE)
        if value is not None:
            return _quantity(value)
    return None


def _milli_containers(pod: ApiObject) -> list[tuple[str, int | None]]:
    spec = pod.get("spec") or {}
    out: list[tuple[str, int | None]] = []
    for c in (*(spec.get("initContainers") or []), *(spec.get("containers") or [])):
        res = c.get("resources") or {}
        if any(MILLI_RESOURCE in (res.get(s) or {}) for s in ("requests", "limits")):
            out.append((str(c.get("name", "")), container_milli(c)))
    return out


def _order(pod: ApiObject) -> tuple[str, str, str, str]:
    meta = pod.get("metadata") or {}
    conditions = (pod.get("status") or {}).get("conditions") or []
    scheduled = next(
        (str(c.get("lastTransitionTime") or "") for c in conditions if c.get("type") == "PodScheduled"), ""
    )
    created = str(meta.get("creationTimestamp") or "")
    return (scheduled or created, created, str(meta.get("namespace", "")), str(meta.get("name", "")))


def _live(pod: ApiObject) -> bool:
    meta = pod.get("metadata") or {}
    return not meta.get("deletionTimestamp") and _holds_gpu(pod)


def _holds_gpu(pod: ApiObject) -> bool:
    """Whether a pod on the node may still run on its GPU: every phase but ``Succeeded``/``Failed``.
    A terminating pod (``deletionTimestamp``) still does until its containers stop (the extender,
    too, counts it until it is gone or finished)."""
    return (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")


def pod_milli(pod: ApiObject) -> int:
    """The thousandths of its GPU a pod holds, as the extender accounts it: its containers' asks
    added up, at least its largest init container's; an unreadable ask counts 0."""
    spec = pod.get("spec") or {}
    regular = sum(container_milli(c) or 0 for c in spec.get("containers") or [])
    init = max((container_milli(c) or 0 for c in spec.get("initContainers") or []), default=0)
    return max(regular, init)


def share_claims(
    pods: Iterable[ApiObject],
    *,
    node_name: str,
    uuids: Sequence[str],
    handed: Mapping[str, frozenset[str]],
    problems: list[str] | None = None,
) -> list[ShareClaim]:
    """The claims among ``pods``, in the order they are served (see the module doc). ``uuids`` are the
    node's GPUs in index order; ``handed`` maps a pod UID to its containers already handed out. Pods
    whose assignment cannot be used add a line to ``problems`` and are left out."""
    by_uuid = {u.lower(): i for i, u in enumerate(uuids)}
    claims: list[ShareClaim] = []
    for pod in pods:
        meta = pod.get("metadata") or {}
        if not _live(pod) or (pod.get("status") or {}).get("phase", "Pending") != "Pending":
            continue
        wanting = _milli_containers(pod)
        if not wanting:
            continue
        uid, ns, name = str(meta.get("uid", "")), str(meta.get("namespace", "")), str(meta.get("name", ""))
        done = handed.get(uid, frozenset())
        todo = [(c, m) for c, m in wanting if c not in done]
        if not todo:
            continue
        try:
            assignment = assignment_of(pod)
        except PlacementError as exc:
            if problems is not None:
                problems.append(f"{ns}/{name}: {exc}")
            continue
        if assignment is None or assignment.node != node_name or len(assignment.gpus) != 1:
            if problems is not None and assignment is not None:
                problems.append(f"{ns}/{name}: {ANNOTATION} is for node {assignment.node}, not one GPU here")
            continue
        if assignment.uuids:
            gpu = by_uuid.get(assignment.uuids[0].lower())
        else:
            gpu = assignment.gpus[0] if assignment.gpus[0] < len(uuids) else None
        if gpu is None:
            if problems is not None:
                problems.append(f"{ns}/{name}: {ANNOTATION} names a GPU this node does not have")
            continue
        container, milli = todo[0]
        if milli is None:
            if problems is not None:
                problems.append(f"{ns}/{name}: container {container} asks an unreadable {MILLI_RESOURCE}")
            continue
        claims.append(
            ShareClaim(
                pod_uid=uid,
                namespace=ns,
                pod=name,
                container=container,
                milli=milli,
                uuid=uuids[gpu],
                gpu=gpu,
                started=bool(done),
                order=_order(pod),
            )
        )
    claims.sort(key=lambda c: (not c.started, c.order))
    return claims


def _handout(claim: ShareClaim) -> HandOut:
    return HandOut(
        pod_uid=claim.pod_uid,
        namespace=claim.namespace,
        pod=claim.pod,
        container=claim.container,
        uuid=claim.uuid,
        milli=claim.milli,
    )


def pick(claims: Sequence[ShareClaim], milli: int) -> ShareClaim | None:
    """The claim an Allocate of ``milli`` devices is for: the first asking exactly that much."""
    return next((c for c in claims if c.milli == milli), None)


class ShareLedger:
    """The hand-outs on disk (``path``), kept in memory too; thread-safe. A file that cannot be read is
    moved aside (``.corrupt``) and the ledger starts empty: only pods still Pending can be claimed, so
    a lost ledger can at worst re-serve a pod whose earlier container was handed out."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._items: list[HandOut] = self._load()

    def _load(self) -> list[HandOut]:
        try:
            doc = json.loads(self.path.read_text())
            return [HandOut(**item) for item in doc["handouts"]]
        except FileNotFoundError:
            return []
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.error(
                "share ledger unreadable; starting empty", extra={"file": str(self.path), "error": str(exc)}
            )
            with contextlib.suppress(OSError):
                os.replace(self.path, self.path.with_suffix(".corrupt"))
            return []

    def _save(self) -> None:
        doc = {"version": LEDGER_VERSION, "handouts": [asdict(h) for h in self._items]}
        write_atomically(self.path, json.dumps(doc, sort_keys=True, indent=1) + "\n")

    def handouts(self) -> tuple[HandOut, ...]:
        with self._lock:
            return tuple(self._items)

    def handed(self) -> dict[str, frozenset[str]]:
        """Pod UID -> its containers handed out."""
        out: dict[str, set[str]] = {}
        with self._lock:
            for h in self._items:
                out.setdefault(h.pod_uid, set()).add(h.container)
        return {uid: frozenset(cs) for uid, cs in out.items()}

    def record(self, handout: HandOut) -> None:
        """Add one hand-out, on disk before this returns (``OSError`` if it cannot be written)."""
        with self._lock:
            self._items.append(handout)
            try:
                self._save()
            except OSError:
                self._items.pop()
                raise

    def forget(self, handout: HandOut) -> None:
        """Take back one hand-out just recorded (the Allocate it was part of failed); on disk before this
        returns (``OSError`` if it cannot be written)."""
        with self._lock:
            at = [i for i, h in enumerate(self._items) if h == handout]
            if not at:
                return
            before = list(self._items)
            del self._items[at[-1]]  # the latest such entry
            try:
                self._save()
            except OSError:
                self._items = before
                raise

    def keep_only(self, live_uids: frozenset[str]) -> int:
        """Forget the hand-outs of pods not in ``live_uids``; how many were dropped."""
        with self._lock:
            kept = [h for h in self._items if h.pod_uid in live_uids]
            dropped = len(self._items) - len(kept)
            if dropped:
                self._items = kept
                self._save()
            return dropped


class ShareBroker:
    """Finds the pod an Allocate of ``kubegpu.io/gpu-milli`` is for, and records the hand-out."""

    def __init__(
        self,
        *,
        node_name: str,
        list_pods: Callable[[], Sequence[ApiObject]],
        ledger: ShareLedger,
        node: Callable[[], Node],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.node_name = node_name
        self._list_pods = list_pods
        self.ledger = ledger
        self._node = node
        self._clock = clock
        self._lock = threading.Lock()
        self._peeked: tuple[float, Sequence[ApiObject]] | None = None  # (when, pods) of the last peek

    def _uuids(self) -> list[str]:
        return [str(g.uuid) for g in self._node().gpus]

    def _pods(self) -> Sequence[ApiObject]:
        """The node's pods (one LIST); the ledger forgets pods gone from it or finished."""
        pods = self._list_pods()
        live = frozenset(str((p.get("metadata") or {}).get("uid", "")) for p in pods if _holds_gpu(p))
        dropped = self.ledger.keep_only(live)
        if dropped:
            log.info("share hand-outs of ended pods forgotten", extra={"count": dropped})
        return pods

    def _claims(self, pods: Sequence[ApiObject]) -> list[ShareClaim]:
        problems: list[str] = []
        claims = share_claims(
            pods,
            node_name=self.node_name,
            uuids=self._uuids(),
            handed=self.ledger.handed(),
            problems=problems,
        )
        for line in problems:
            log.warning("pod's share cannot be served", extra={"problem": line})
        return claims

    def _held(self, pods: Sequence[ApiObject]) -> dict[str, dict[str, tuple[str, int]]]:
        """What the ledger says each GPU holds: GPU UUID (lower case) -> pod UID -> (namespace/name,
        thousandths). A pod in ``pods`` counts as the extender accounts it (``pod_milli``), a finished
        one not at all; a pod missing from ``pods`` counts the sum of its hand-outs."""
        by_uid = {str((p.get("metadata") or {}).get("uid", "")): p for p in pods}
        out: dict[str, dict[str, tuple[str, int]]] = {}
        for h in self.ledger.handouts():
            pod = by_uid.get(h.pod_uid)
            if pod is not None and not _holds_gpu(pod):
                continue
            on_gpu = out.setdefault(h.uuid.lower(), {})
            label, milli = on_gpu.get(h.pod_uid, (f"{h.namespace}/{h.pod}", 0))
            on_gpu[h.pod_uid] = (label, pod_milli(pod) if pod is not None else milli + h.milli)
        return out

    def _over_capacity(self, claim: ShareClaim, pods: Sequence[ApiObject]) -> str | None:
        """Why ``claim`` would put its GPU over ``GPU_MILLI`` (None: it fits). Counted: the pods the
        ledger says hold a share of that GPU (``_held``), and the claim's pod as a whole."""
        on_gpu = self._held(pods).get(claim.uuid.lower(), {})
        others = {uid: held for uid, held in on_gpu.items() if uid != claim.pod_uid}
        used = sum(m for _, m in others.values())
        pod = next((p for p in pods if str((p.get("metadata") or {}).get("uid", "")) == claim.pod_uid), None)
        mine = max(pod_milli(pod) if pod is not None else 0, claim.milli)
        if used + mine <= GPU_MILLI:
            return None
        holders = ", ".join(f"{label} {m}" for label, m in sorted(others.values())[:5])
        more = f" and {len(others) - 5} more" if len(others) > 5 else ""
        return (
            f"{MILLI_RESOURCE}: {claim.namespace}/{claim.pod}'s share of {mine} on GPU {claim.gpu} "
            f"({claim.uuid}) refused: {used} of {GPU_MILLI} thousandths are handed out there already "
            f"({holders}{more}); it would hold {used + mine}. The {ANNOTATION} annotation puts more on "
            "this GPU than it has: was the pod scheduled by kubegpu extender, and does the extender "
            "see every share pod of this node?"
        )

    def check_whole(self, resource: str, gpus: Iterable[int]) -> None:
        """Refuse (``DeviceRequestError``) whole GPUs among ``gpus`` that hold shares now (live share
        pods in the ledger; the ledger alone when the API cannot be read): a whole GPU there would put
        it over ``GPU_MILLI``."""
        with self._lock:
            uuids = self._uuids()
            try:
                pods: Sequence[ApiObject] = self._pods()
            except KubegpuError as exc:
                log.warning("cannot list pods; shares held from the ledger", extra={"error": str(exc)})
                pods = ()
            held = self._held(pods)
        for gpu in gpus:
            on_gpu = held.get(uuids[gpu].lower()) if 0 <= gpu < len(uuids) else None
            if not on_gpu:
                continue
            used = sum(m for _, m in on_gpu.values())
            holders = ", ".join(f"{label} {m}" for label, m in sorted(on_gpu.values())[:5])
            raise DeviceRequestError(
                DeviceRequestProblem.NO_SHARE,
                f"{resource}: GPU {gpu} ({uuids[gpu]}) is not whole: {used} of {GPU_MILLI} thousandths "
                f"are handed out there as shares ({holders}); a whole GPU on it would put it over "
                f"{GPU_MILLI}",
            )

    def peek(self, milli: int) -> ShareClaim | None:
        """The claim an Allocate of ``milli`` devices would serve now (GetPreferredAllocation's guess)."""
        with self._lock:
            pods = self._pods()
            self._peeked = (self._clock(), pods)
            return pick(self._claims(pods), milli)

    def _recent(self) -> Sequence[ApiObject] | None:
        """The last peek's pods if it was less than ``REUSE_S`` ago (each peek serves one hand-out)."""
        peeked, self._peeked = self._peeked, None
        if peeked is not None and self._clock() - peeked[0] <= REUSE_S:
            return peeked[1]
        return None

    def hand_out(self, milli: int, *, check: Callable[[ShareClaim], str | None]) -> ShareClaim:
        """Claim the GPU for the pod being admitted and record it; ``DeviceRequestError`` when no pod
        matches (the message reaches the pod's events), or ``check(claim)`` says why its GPU cannot
        be given (unhealthy, not shared by this agent); nothing is recorded then."""
        with self._lock:
            started = time.perf_counter()
            recent = self._recent()
            claims = self._claims(recent) if recent is not None else []
            claim = pick(claims, milli)
            reused = claim is not None
            if reused:
                assert recent is not None
                pods = recent
            else:
                try:
                    pods = self._pods()
                except KubegpuError as exc:
                    raise DeviceRequestError(
                        DeviceRequestProblem.NO_SHARE,
                        f"{MILLI_RESOURCE}: cannot list the pods on node {self.node_name} to find whose "
                        f"share this is: {clip(str(exc), limit=300)}",
                    ) from exc
                claims = self._claims(pods)
                claim = pick(claims, milli)
            listed_s = time.perf_counter() - started
            if claim is None:
                waiting = ", ".join(f"{c.namespace}/{c.pod} ({c.milli})" for c in claims[:5]) or "none"
                raise DeviceRequestError(
                    DeviceRequestProblem.NO_SHARE,
                    f"{MILLI_RESOURCE}: no pod on node {self.node_name} waits for a share of {milli} "
                    f"with a {ANNOTATION} annotation (pods waiting for shares: {waiting}); was the pod "
                    "scheduled by kubegpu extender (schedulerName kubegpu)?",
                )
            why = check(claim)
            if why is not None:
                raise DeviceRequestError(
                    DeviceRequestProblem.NO_SHARE,
                    f"{MILLI_RESOURCE}: {claim.namespace}/{claim.pod}'s share is on GPU {claim.gpu} "
                    f"({claim.uuid}), which {why}",
                )
            over = self._over_capacity(claim, pods)
            if over is not None:
                log.error("share refused: its GPU would be over-committed", extra={"problem": over})
                raise DeviceRequestError(DeviceRequestProblem.NO_SHARE, over)
            self.ledger.record(_handout(claim))
            tied = [c for c in claims if c is not claim and c.milli == milli and c.uuid != claim.uuid]
            log.info(
                "share handed out",
                extra={
                    "pod": f"{claim.namespace}/{claim.pod}",
                    "container": claim.container,
                    "gpu": claim.gpu,
                    "uuid": claim.uuid,
                    "milli": claim.milli,
                    "same_milli_waiting_elsewhere": [f"{c.namespace}/{c.pod}" for c in tied],
                    "pods_listed": len(pods),
                    "list_reused": reused,
                    "list_ms": round(listed_s * 1000, 2),
                },
            )
            return claim

    def take_back(self, claim: ShareClaim) -> None:
        """Forget ``claim``'s hand-out: the Allocate it was part of is refused as a whole."""
        with self._lock:
            try:
                self.ledger.forget(_handout(claim))
            except OSError as exc:  # memory and disk both keep it: it ends when the pod does
                log.error(
                    "cannot take back a share hand-out",
                    extra={"pod": f"{claim.namespace}/{claim.pod}", "error": str(exc)},
                )

    def shared_gpus(self) -> frozenset[int]:
        """GPUs holding (or promised) shares: those the live share pods' assignments name, else, when the
        API cannot be read, those of the ledger's hand-outs."""
        uuids = self._uuids()
        by_uuid = {u.lower(): i for i, u in enumerate(uuids)}
        try:
            pods = self._list_pods()
        except KubegpuError as exc:
            log.warning("cannot list pods; shared GPUs from the ledger", extra={"error": str(exc)})
            return frozenset(
                by_uuid[h.uuid.lower()] for h in self.ledger.handouts() if h.uuid.lower() in by_uuid
            )
        out: set[int] = set()
        holding = {str((p.get("metadata") or {}).get("uid", "")) for p in pods if _holds_gpu(p)}
        for pod in pods:
            if not _live(pod) or not _milli_containers(pod):
                continue
            try:
                assignment = assignment_of(pod)
            except PlacementError:
                continue
            if assignment is None or assignment.node != self.node_name:
                continue
            for i, index in enumerate(assignment.gpus):
                gpu = by_uuid.get(assignment.uuids[i].lower()) if assignment.uuids else index
                if gpu is not None:
                    out.add(gpu)
        # hand-outs whose pod still runs on its GPU (terminating included): a finished or deleted share
        # pod's GPU is free again at once, not at the next listing that prunes the ledger
        out |= {
            by_uuid[h.uuid.lower()]
            for h in self.ledger.handouts()
            if h.uuid.lower() in by_uuid and h.pod_uid in holding
        }
        return frozenset(out)
