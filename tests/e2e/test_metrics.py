"""Issue 13, e2e case 2: a real Prometheus scrapes the agent; PromQL finds the GPU pod's own series.

The agent runs as a host process with `--metrics-address`, its pod labels from the rig kubelet's real
PodResources socket (/var/lib/kubelet/pod-resources/kubelet.sock). Prometheus is Debian's package,
started by PID with a generated config (tests/e2e/conftest.py `start_prometheus`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import AgentProcess, Cluster, PrometheusProcess, free_port, in_ns, pod, wait_until

pytestmark = pytest.mark.e2e

SEED = "builtin:seed-8gpu"
GPU = "nvidia.com/gpu"
StartAgent = Callable[..., AgentProcess]
StartPrometheus = Callable[[Sequence[str]], PrometheusProcess]


def _gpu_pod(cluster: Cluster, ns: str, name: str) -> str:
    cluster.apply(in_ns(pod(name, resources={GPU: 1}), ns))
    cluster.wait_running(ns, name)
    ids = [v for v in cluster.env(ns, name).get("NVIDIA_VISIBLE_DEVICES", "").split(",") if v]
    assert len(ids) == 1, ids
    return ids[0]


def _series(prom: PrometheusProcess, promql: str, count: int = 1) -> list[dict[str, Any]]:
    result: list[dict[str, Any]] = wait_until(
        f"Prometheus to return {count} series for {promql}",
        lambda: prom.query(promql),
        60,
        accept=lambda r: len(r) == count,
    )
    return result


def _metrics_agent(start_agent: StartAgent, config: Path | None = None) -> str:
    address = f"127.0.0.1:{free_port()}"
    start_agent(SEED, config=config, extra_args=["--metrics-address", address])
    return address


def test_promql_finds_the_gpu_pods_framebuffer_series_with_its_gpu_uuid(
    cluster: Cluster, start_agent: StartAgent, start_prometheus: StartPrometheus
) -> None:
    address = _metrics_agent(start_agent)
    cluster.wait_resource(GPU, allocatable=8, capacity=8)
    prom = start_prometheus([address])
    ns = cluster.namespace("metrics")
    uuid = _gpu_pod(cluster, ns, "gpu-pod")
    [series] = _series(prom, f'DCGM_FI_DEV_FB_USED{{pod="gpu-pod",namespace="{ns}"}}')
    labels = series["metric"]
    assert labels["UUID"] == uuid
    assert labels["container"] == "main" and labels["modelName"] == "NVIDIA H100 80GB HBM3"
    assert float(series["value"][1]) > 0  # the load model: a held GPU uses framebuffer
    # the other seven GPUs: one series each, without pod labels
    others = prom.query('DCGM_FI_DEV_FB_USED{pod=""}')
    assert len(others) == 7 and uuid not in {s["metric"]["UUID"] for s in others}
    assert prom.query('kubegpu_registrations_total{outcome="success",resource="nvidia.com/gpu"} >= 1')
    assert prom.query('kubegpu_rpc_duration_seconds_count{rpc="Allocate",resource="nvidia.com/gpu"} >= 1')


def test_two_pods_on_replicas_of_one_gpu_get_a_series_each(
    cluster: Cluster, start_agent: StartAgent, start_prometheus: StartPrometheus, tmp_path: Path
) -> None:
    config = tmp_path / "packed.yaml"
    config.write_text(
        "version: v1\nflags:\n  plugin:\n    sharedDevicesAllocationPolicy: packed\n"
        "sharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 2\n"
    )
    address = _metrics_agent(start_agent, config)
    cluster.wait_resource(GPU, allocatable=16, capacity=16)
    prom = start_prometheus([address])
    ns = cluster.namespace("metrics-ts")
    first, second = _gpu_pod(cluster, ns, "share-a"), _gpu_pod(cluster, ns, "share-b")
    assert first == second, "the packed replica policy puts both pods on one GPU"
    series = _series(prom, f'DCGM_FI_DEV_GPU_UTIL{{UUID="{first}",namespace="{ns}"}}', count=2)
    assert sorted(s["metric"]["pod"] for s in series) == ["share-a", "share-b"]
    assert series[0]["value"][1] == series[1]["value"][1]  # each carries the GPU's whole value
