"""The health of every physical GPU on the node, shared by all device plugin servers.

Health is kept per *physical* GPU: every device backed by a GPU (the GPU itself, its replicas, its
MIG instances) reads the same entry, so one failure turns all of them Unhealthy (NVIDIA's plugin
misses siblings, #1929) and one recovery brings all of them back without restarting the agent.
Watchers block on ``wait_for_change``; every transition bumps ``version`` and wakes them at once, which
is what keeps fault-to-snapshot latency far below kubelet's expectations.
"""

from __future__ import annotations

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


@dataclass(frozen=True, kw_only=True)
class GpuStatus:
    healthy: bool
    reason: str
    since: float
    cause: GpuEventKind | None = None  # the kind of event that made the GPU unhealthy


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
            if current.healthy == healthy:
                if not healthy and current.cause is GpuEventKind.WATCH_FAILED and event.kind not in _WATCH:
                    # a real fault while unwatched: the watcher's recovery must not clear it
                    self._status[index] = GpuStatus(
                        healthy=False, reason=verdict.reason, since=current.since, cause=event.kind
                    )
                return None
            now = self._clock()
            cause = None if healthy else event.kind
            self._status[index] = GpuStatus(healthy=healthy, reason=verdict.reason, since=now, cause=cause)
            self._version += 1
            self._cond.notify_all()
        log.warning(
            "GPU health changed",
            extra={"gpu": index, "healthy": healthy, "reason": verdict.reason},
        )
        return Transition(gpu=index, healthy=healthy, reason=verdict.reason, at=now)

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
