"""The agent's metrics: dcgm-exporter's GPU series plus its own ``kubegpu_*`` series, on one endpoint.

``MetricsExporter`` owns the registry, the ``/metrics`` server, the PodResources cache and the event
ledger; the agent calls its three hooks (``observe_rpc``, ``observe_registration``,
``observe_event``) and never imports prometheus-client itself. The agent's own series:

- ``kubegpu_rpc_duration_seconds{rpc,resource,outcome}`` histogram of the device plugin's unary RPCs
  (``Allocate``, ``GetPreferredAllocation``, ``PreStartContainer``, ``GetDevicePluginOptions``);
- ``kubegpu_health_transitions_total{gpu,to}`` (``to`` = ``healthy`` | ``unhealthy``);
- ``kubegpu_registrations_total{resource,outcome}`` (``success`` | ``failure``);
- ``kubegpu_pod_resources_failures_total``: PodResources ``List`` calls that failed;
- ``process_*`` (prometheus-client's process collector: RSS, CPU, open files).
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import Counter, Histogram, disable_created_metrics
from prometheus_client.exposition import generate_latest
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import CollectorRegistry

from kubegpu.metrics.dcgm import DcgmCollector
from kubegpu.metrics.holders import CachedHolders, HolderSource
from kubegpu.metrics.ledger import EventLedger
from kubegpu.metrics.sampler import GpuSampler
from kubegpu.metrics.server import MetricsServer
from kubegpu.model.event import GpuEvent
from kubegpu.model.node import Node

__all__ = ["RPC_BUCKETS_S", "MetricsExporter"]

RPC_BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


class MetricsExporter:
    """Build with the node (a callable: it changes when GPUs appear late), a sampler and, when there is
    a kubelet, a PodResources client; ``start()`` listens on ``address``."""

    def __init__(
        self,
        *,
        address: str,
        node: Callable[[], Node | None],
        sampler: GpuSampler,
        holders: HolderSource | None,
        hostname: str,
        ledger: EventLedger | None = None,
        cache_ttl_s: float = 1.0,
    ) -> None:
        disable_created_metrics()  # type: ignore[no-untyped-call]  # no ``*_created`` series: dcgm-exporter has none, they double the scrape
        self.registry = CollectorRegistry()
        self.ledger = ledger if ledger is not None else EventLedger()
        self._rpc = Histogram(
            "kubegpu_rpc_duration_seconds",
            "Device plugin unary RPC latency (in s), by RPC, resource and outcome (ok, error).",
            ["rpc", "resource", "outcome"],
            buckets=RPC_BUCKETS_S,
            registry=self.registry,
        )
        self._transitions = Counter(
            "kubegpu_health_transitions",
            "GPU health changes, by GPU index and new state (healthy, unhealthy).",
            ["gpu", "to"],
            registry=self.registry,
        )
        self._registrations = Counter(
            "kubegpu_registrations",
            "Registrations with kubelet, by resource and outcome (success, failure).",
            ["resource", "outcome"],
            registry=self.registry,
        )
        self._pod_resources_failures = Counter(
            "kubegpu_pod_resources_failures",
            "kubelet PodResources List calls that failed (series went out without pod labels).",
            registry=self.registry,
        )
        ProcessCollector(registry=self.registry)
        cached = None
        if holders is not None:
            cached = CachedHolders(holders, ttl_s=cache_ttl_s, on_failure=self._pod_resources_failures.inc)
        self.gpus = DcgmCollector(
            node=node, sampler=sampler, holders=cached, ledger=self.ledger, hostname=hostname
        )
        self._server = MetricsServer(address, self.body)

    def body(self) -> bytes:
        """One scrape: dcgm-exporter's GPU families, then the agent's own."""
        return self.gpus.render().encode() + generate_latest(self.registry)

    @property
    def port(self) -> int:
        return self._server.port

    def start(self) -> None:
        self._server.start()

    def stop(self) -> None:
        self._server.stop()

    # -- hooks the agent calls --------------------------------------------------------------------

    def observe_rpc(self, rpc: str, resource: str, seconds: float, ok: bool) -> None:
        self._rpc.labels(rpc, resource, "ok" if ok else "error").observe(seconds)

    def observe_registration(self, resource: str, ok: bool) -> None:
        self._registrations.labels(resource, "success" if ok else "failure").inc()

    def observe_event(self, gpu: int, event: GpuEvent, became_healthy: bool | None) -> None:
        """An applied health event of GPU ``gpu``; ``became_healthy`` is its transition, if any."""
        self.ledger.record(gpu, event)
        if became_healthy is not None:
            self._transitions.labels(str(gpu), "healthy" if became_healthy else "unhealthy").inc()
