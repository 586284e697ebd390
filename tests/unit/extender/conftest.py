"""Pods and nodes as the API server serves them (plain dicts), and a ledger with a hand-driven clock."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kubegpu.extender.ledger import Ledger
from kubegpu.extender.node import GpuNode
from kubegpu.extender.workload import default_typical
from kubegpu.sim.policy import get_policy
from kubegpu.sim.scoring import TypicalShapes


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def gpu_pod(
    name: str,
    *,
    milli: int = 0,
    gpus: int = 0,
    cpu_milli: int = 1000,
    memory_mib: int = 1024,
    node: str = "",
    annotations: dict[str, str] | None = None,
    phase: str = "Pending",
) -> dict[str, Any]:
    requests: dict[str, str] = {"cpu": f"{cpu_milli}m", "memory": f"{memory_mib}Mi"}
    if milli:
        requests["kubegpu.io/gpu-milli"] = str(milli)
    if gpus:
        requests["nvidia.com/gpu"] = str(gpus)
    return {
        "metadata": {
            "name": name,
            "namespace": "default",
            "uid": f"uid-{name}",
            "annotations": annotations or {},
        },
        "spec": {
            "schedulerName": "kubegpu",
            **({"nodeName": node} if node else {}),
            "containers": [{"name": "main", "resources": {"requests": requests, "limits": dict(requests)}}],
        },
        "status": {"phase": phase},
    }


def gpu_node(name: str, gpus: int, *, cpu_milli: int = 64_000, memory_mib: int = 1 << 18) -> GpuNode:
    return GpuNode(name=name, cpu_milli=cpu_milli, memory_mib=memory_mib, gpu_count=gpus, uuids=())


def ledger(
    nodes: Sequence[GpuNode],
    *,
    policy: str = "kubegpu",
    typical: TypicalShapes | None = None,
    clock: Clock | None = None,
) -> Ledger:
    book = Ledger(
        policy=get_policy(policy),
        typical=typical if typical is not None else default_typical(),
        clock=clock or Clock(),
    )
    book.replace_nodes(nodes)
    return book


def place(book: Ledger, pod: dict[str, Any], nodes: Sequence[str]) -> str | None:
    """filter then bind, as kube-scheduler calls them; the chosen node or None."""
    decision = book.decide(pod, nodes)
    if decision.node is None:
        return None
    assert book.begin_bind(pod["metadata"]["uid"], decision.node) is not None
    book.end_bind(pod["metadata"]["uid"], ok=True)
    return decision.node
