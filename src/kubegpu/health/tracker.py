"""The health of every physical GPU on the node, shared by all device plugin servers.

Health is kept per *physical* GPU: every device backed by a GPU (the GPU itself, its replicas, its
MIG instances) reads the same entry, so one failure turns all of them Unhealthy (NVIDIA's plugin
misses siblings, #1929) and one recovery brings all of them back without restarting the agent.
Watchers block on ``wait_for_change``; every transition bumps ``version`` and wakes them at once, which
is what keeps fault-to-snapshot latency far below kubelet's expectations. A GPU that is already
unhealthy remembers each further kind of fault (``faults``) without a transition, so that the node's
quarantine (``kubegpu.node``) sees it on its next look; ``restore`` re-applies a quarantine an earlier
agent run recorded, and ``recover_quiet`` is the policy's automatic recovery after a quiet period.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from kubegpu.echo import shorten
from kubegpu.errors import UnknownGpuError
from kubegpu.health.policy import HealthPolicy, VerdictKind
from kubegpu.model.event import GpuEvent, GpuEventKind, GpuRef

__all__ = ["GpuStatus", "HealthTracker", "Transition"]

log = logging.getLogger(__name__)


_WATCH = (GpuEventKind.WATCH_FAILED, GpuEventKind.WATCH_RESTORED)
_QUIET_RECOVERABLE = (GpuEventKind.XID, GpuEventKind.ECC_DOUBLE_BIT, GpuEventKind.ECC_SINGLE_BIT)


@dataclass(frozen=True, kw_only=True)
class GpuStatus:
    healthy: bool
    reason: str
    since: float
    cause: GpuEventKind | None = None  # the kind of event that made the GPU unhealthy
    xid: int | None = None  # the XID, when ``cause`` is an XID
    # every distinct fatal fault (kind, XID) seen since the GPU became unhealthy, first one first
    faults: tuple[tuple[GpuEventKind, int | None], ...] = ()
    last_fault_at: float | None = None  # when the last fatal event about this GPU arrived


@dataclass(frozen=True, kw_only=True)
class Transition:
    """A GPU changed health; ``at`` is the monotonic time the event was applied."""

    gpu: int
    healthy: bool
    reason: str
    at: float


class HealthTracker:
    """Thread-safe health per GPU index; ``aliases`` maps UUIDs (GPU and MIG) to their GPU's index."""

    def __init__(
        self,
        *,
        gpu_count: int,
        aliases: dict[str, int],
        policy: HealthPolicy,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._gpu_count = gpu_count
        self._aliases = {k.lower(): v for k, v in aliases.items()}
        self._clock = clock
        self._policy = policy
        self._cond = threading.Condition()
        self._version = 0
        now = clock()
        self._status = [GpuStatus(healthy=True, reason="", since=now) for _ in range(gpu_count)]

    @property
    def policy(self) -> HealthPolicy:
        return self._policy

    def set_policy(self, policy: HealthPolicy) -> None:
        """Use ``policy`` for future events (a config reload); current health is kept."""
        with self._cond:
            self._policy = policy

    def set_aliases(self, aliases: dict[str, int]) -> None:
        """New UUID -> GPU index map (a MIG repartition replaced the MIG UUIDs); health is kept per GPU."""
        with self._cond:
            self._aliases = {k.lower(): v for k, v in aliases.items()}

    def resolve(self, gpu: GpuRef) -> int:
        """The index of the GPU named by index or UUID; raises ``UnknownGpuError``."""
        if isinstance(gpu, int):
            if 0 <= gpu < self._gpu_count:
                return gpu
            raise UnknownGpuError(f"no GPU {gpu} on this node (GPUs 0..{self._gpu_count - 1})")
        index = self._aliases.get(gpu.lower())
        if index is None:
            raise UnknownGpuError(f"no GPU with UUID {shorten(gpu)} on this node")
        return index

    def apply(self, event: GpuEvent) -> Transition | None:
        """Judge ``event`` and apply it; returns the transition, or ``None`` if health did not change."""
        index = self.resolve(event.gpu)
        with self._cond:
            verdict = self._policy.judge(event)
            if verdict.kind is VerdictKind.IGNORE:
                log.info("health event ignored", extra={"gpu": index, "reason": verdict.reason})
                return None
            healthy = verdict.kind is VerdictKind.HEALTHY
            current = self._status[index]
            if event.kind is GpuEventKind.WATCH_RESTORED and current.cause is not GpuEventKind.WATCH_FAILED:
                return None  # a watcher coming back only undoes what its failure did
            now = self._clock()
            if current.healthy == healthy:
                if not healthy and current.cause is GpuEventKind.WATCH_FAILED and event.kind not in _WATCH:
                    # a real fault while unwatched: the watcher's recovery must not clear it
                    self._status[index] = GpuStatus(
                        healthy=False,
                        reason=verdict.reason,
                        since=current.since,
                        cause=event.kind,
                        xid=event.xid,
                        faults=((event.kind, event.xid),),
                        last_fault_at=now,
                    )
                elif not healthy:
                    # another fatal event: the quiet period (recoverAfter) starts again; a new kind
                    # of fault is remembered (a later XID 94 must not hide an earlier XID 79)
                    fault = (event.kind, event.xid)
                    faults = current.faults if fault in current.faults else (*current.faults, fault)
                    self._status[index] = dataclasses.replace(current, faults=faults, last_fault_at=now)
                return None
            cause = None if healthy else event.kind
            self._status[index] = GpuStatus(
                healthy=healthy,
                reason=verdict.reason,
                since=now,
                cause=cause,
                xid=None if healthy else event.xid,
                faults=() if healthy else ((event.kind, event.xid),),
                last_fault_at=None if healthy else now,
            )
            self._version += 1
            self._cond.notify_all()
        log.warning(
            "GPU health changed",
            extra={"gpu": index, "healthy": healthy, "reason": verdict.reason},
        )
        return Transition(gpu=index, healthy=healthy, reason=verdict.reason, at=now)

    def restore(self, gpu: int, *, cause: GpuEventKind, xid: int | None, reason: str) -> Transition | None:
        """Mark a healthy GPU unhealthy for a fault an earlier agent run recorded (the node's
        quarantine read back at start); a GPU already unhealthy is left as it is."""
        with self._cond:
            if not self._status[gpu].healthy:
                return None
            now = self._clock()
            self._status[gpu] = GpuStatus(
                healthy=False,
                reason=reason,
                since=now,
                cause=cause,
                xid=xid,
                faults=((cause, xid),),
                last_fault_at=now,
            )
            self._version += 1
            self._cond.notify_all()
        log.warning("GPU health restored from the node's quarantine", extra={"gpu": gpu, "reason": reason})
        return Transition(gpu=gpu, healthy=False, reason=reason, at=now)

    def recover_quiet(self) -> list[Transition]:
        """The policy's ``recover_after_s``: GPUs made unhealthy by XID or ECC events and quiet for that
        long are healthy again (devices and the node's quarantine recover together). A lost GPU, or one
        whose watcher failed, waits for an explicit recovery."""
        after = self._policy.recover_after_s
        if after is None:
            return []
        out: list[Transition] = []
        with self._cond:
            now = self._clock()
            for i, st in enumerate(self._status):
                if st.healthy or st.cause not in _QUIET_RECOVERABLE or st.last_fault_at is None:
                    continue
                if now - st.last_fault_at < after:
                    continue
                reason = f"no fault for {after:g} s (recoverAfter) after: {st.reason}"
                self._status[i] = GpuStatus(healthy=True, reason=reason, since=now)
                out.append(Transition(gpu=i, healthy=True, reason=reason, at=now))
            if out:
                self._version += 1
                self._cond.notify_all()
        for t in out:
            log.warning("GPU health changed", extra={"gpu": t.gpu, "healthy": True, "reason": t.reason})
        return out

    def is_healthy(self, gpu: int) -> bool:
        return self._status[gpu].healthy

    def status(self, gpu: int) -> GpuStatus:
        return self._status[gpu]

    def statuses(self) -> Sequence[GpuStatus]:
        with self._cond:
            return tuple(self._status)

    @property
    def version(self) -> int:
        return self._version

    def wake(self) -> None:
        """Wake every waiter without a change (used on shutdown)."""
        with self._cond:
            self._cond.notify_all()

    def wait_for_change(self, seen: int, timeout: float) -> int:
        """Block until ``version`` differs from ``seen`` or ``timeout`` passes; return the version."""
        with self._cond:
            if self._version == seen:
                self._cond.wait(timeout)
            return self._version
