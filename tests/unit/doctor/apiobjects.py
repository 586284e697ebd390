"""Small edits of recorded API objects, so each test states only what differs from the healthy cluster."""

from __future__ import annotations

from typing import Any

from kubegpu.doctor import RecordedCluster
from kubegpu.doctor.clusterprobe import ApiObject


def node(cluster: RecordedCluster, name: str) -> ApiObject:
    return next(n for n in cluster.nodes if n["metadata"]["name"] == name)


def pod(cluster: RecordedCluster, namespace: str, name: str) -> ApiObject:
    found = cluster.get_pod(namespace, name)
    assert found is not None
    return found


def event(
    namespace: str, kind: str, name: str, reason: str, message: str, *, type_: str = "Warning"
) -> ApiObject:
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{name}.{reason.lower()}", "namespace": namespace},
        "involvedObject": {"kind": kind, "name": name, "namespace": namespace},
        "reason": reason,
        "message": message,
        "type": type_,
        "lastTimestamp": "2026-11-30T06:00:00Z",
    }


def pending_pod(
    namespace: str, name: str, containers: list[dict[str, Any]], *, spec: dict[str, Any] | None = None
) -> ApiObject:
    """A pod the scheduler has not placed."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"containers": containers, **(spec or {})},
        "status": {
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
        },
    }


def gpu_container(
    name: str = "app", *, gpus: int = 1, image: str = "nvidia/cuda:12.4.0-runtime-ubuntu22.04"
) -> dict[str, Any]:
    return {"name": name, "image": image, "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}


def running_pod(
    namespace: str,
    name: str,
    containers: list[dict[str, Any]],
    *,
    node_name: str = "gpu-node-2",
    spec: dict[str, Any] | None = None,
    waiting: str | None = None,
    restarts: int = 0,
) -> ApiObject:
    """A pod running on a node; ``waiting`` puts its containers in that waiting reason instead."""
    state: dict[str, Any] = (
        {"waiting": {"reason": waiting}} if waiting else {"running": {"startedAt": "2026-11-30T06:00:00Z"}}
    )
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"containers": containers, "nodeName": node_name, **(spec or {})},
        "status": {
            "phase": "Running",
            "containerStatuses": [
                {"name": c["name"], "restartCount": restarts, "ready": not waiting, "state": state}
                for c in containers
            ],
        },
    }
