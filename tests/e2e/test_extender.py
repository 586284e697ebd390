"""`kubegpu extender` run by a real kube-scheduler (issue 15): shares of one GPU, whole GPUs apart, the
assignment on the pod, a restart that forgets nothing, and a deleted pod's share given back.

A second kube-scheduler, built with the rig's binaries, serves the profile ``schedulerName: kubegpu``
with the extender configured exactly as docs/extender.md tells operators to (filter + bind,
``managedResources`` nvidia.com/gpu and kubegpu.io/gpu-milli, ``nodeCacheCapable``); the rig's
default scheduler and every other test are untouched. The agent advertises the seed machine's 8
GPUs; the extender runs as a host process with the rig's admin kubeconfig.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import AgentProcess, Cluster, in_ns, pod, say, wait_until
from tests.e2e.rig.extender import ExtenderProcess, extender_entry
from tests.e2e.rig.rig import NODE_NAME, Rig

pytestmark = pytest.mark.e2e

ANNOTATION = "kubegpu.io/gpu-assignment"
GPUS = 8


MANAGED = [
    {"name": "nvidia.com/gpu", "ignoredByScheduler": False},
    {"name": "kubegpu.io/gpu-milli", "ignoredByScheduler": True},
]


def scheduler_config(url: str) -> dict[str, Any]:
    return {
        "percentageOfNodesToScore": 100,
        "profiles": [{"schedulerName": "kubegpu"}],
        "extenders": [extender_entry(url, http_timeout="5s", managed_resources=MANAGED)],
    }


@pytest.fixture
def extender(
    rig: Rig, cluster: Cluster, start_agent: Callable[..., AgentProcess], tmp_path: Path
) -> Iterator[ExtenderProcess]:
    start_agent("builtin:seed-8gpu")
    cluster.wait_resource("nvidia.com/gpu", allocatable=GPUS)
    ext = ExtenderProcess(rig.paths.kubeconfig, tmp_path / "extender.log")
    ext.start()
    try:
        rig.start_extra_scheduler(scheduler_config(ext.url))
        yield ext
    finally:
        rig.stop_extra_scheduler()
        ext.stop()
        print(ext.log_tail(60))
        print(rig.log_tail(rig.EXTRA_SCHEDULER, 60))


def gpu_pod(name: str, ns: str, *, milli: int = 0, gpus: int = 0) -> dict[str, Any]:
    resources = {"kubegpu.io/gpu-milli": milli} if milli else {"nvidia.com/gpu": gpus}
    obj = in_ns(pod(name, resources=resources, command="sleep 3600"), ns)
    obj["spec"]["schedulerName"] = "kubegpu"
    return obj


def assignment(cluster: Cluster, ns: str, name: str, timeout_s: float = 60) -> dict[str, Any]:
    """The pod's assignment, once it is bound (the annotation arrives with spec.nodeName)."""
    found: dict[str, Any] = wait_until(
        f"{ns}/{name} bound by the kubegpu scheduler",
        lambda: cluster.get("pod", name, ns),
        timeout_s,
        accept=lambda p: bool(p["spec"].get("nodeName")),
    )
    assert found["spec"]["nodeName"] == NODE_NAME
    doc: dict[str, Any] = json.loads(found["metadata"]["annotations"][ANNOTATION])
    assert doc["node"] == NODE_NAME
    return doc


def test_the_extender_places_shares_and_whole_gpus_and_survives_a_restart(
    cluster: Cluster, extender: ExtenderProcess, request: pytest.FixtureRequest
) -> None:
    ns = cluster.namespace("ext")
    t0 = time.monotonic()
    for name in ("half-a", "half-b"):
        cluster.apply(gpu_pod(name, ns, milli=500))
    a, b = assignment(cluster, ns, "half-a"), assignment(cluster, ns, "half-b")
    say(request.config, f"[e2e] extender: two 500m pods bound in {time.monotonic() - t0:.1f} s")
    assert a["gpus"] == b["gpus"] and len(a["gpus"]) == 1, "two 500m pods share one GPU"
    assert a["milli"] == b["milli"] == 500
    cluster.wait_running(ns, "half-a")  # kubelet admits a pod asking for an extender-owned resource

    cluster.apply(gpu_pod("whole", ns, milli=1000))
    cluster.apply(gpu_pod("device", ns, gpus=1))
    whole, device = assignment(cluster, ns, "whole"), assignment(cluster, ns, "device")
    used = {a["gpus"][0]}
    for doc in (whole, device):
        assert doc["milli"] == 1000 and doc["gpus"][0] not in used, "a 1000m pod never shares"
        used.add(doc["gpus"][0])
    cluster.wait_running(ns, "device")

    # a restarted extender rebuilds its accounting from the annotations: nothing is handed out twice
    extender.stop()
    extender.start()
    cluster.apply(gpu_pod("after-restart-e", ns, milli=500))
    e = assignment(cluster, ns, "after-restart-e")
    assert e["gpus"][0] not in used
    cluster.apply(gpu_pod("after-restart-f", ns, milli=600))
    f = assignment(cluster, ns, "after-restart-f")
    assert f["gpus"][0] not in used | {e["gpus"][0]}, "500m + 600m do not fit one GPU"
    used |= {e["gpus"][0], f["gpus"][0]}

    # fill the rest; one more whole GPU does not fit and says why
    rest = GPUS - len(used)
    for i in range(rest):
        cluster.apply(gpu_pod(f"fill-{i}", ns, milli=1000))
    fills = {assignment(cluster, ns, f"fill-{i}")["gpus"][0] for i in range(rest)}
    assert fills.isdisjoint(used) and len(fills) == rest
    cluster.apply(gpu_pod("waiting", ns, milli=1000))
    message = cluster.wait_event(ns, "waiting", "FailedScheduling", "kubegpu")
    assert "1 kubegpu: no GPU with 1000m free" in message
    assert not cluster.get("pod", "waiting", ns)["spec"].get("nodeName")

    # deleting the two shares frees their GPU: the waiting pod is placed on it
    cluster.rig.kubectl("delete", "pod", "-n", ns, "half-a", "half-b", "--wait=true", "--timeout=60s")
    waiting = assignment(cluster, ns, "waiting", timeout_s=90)
    assert waiting["gpus"] == a["gpus"]
