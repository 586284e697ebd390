"""The real agent serving /metrics: pods from PodResources, RPC latencies, registrations, XIDs, no kubelet."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.integration.conftest import AgentProcess
from tests.integration.helpers import free_port, scrape, scrape_until, time_sliced
from tests.integration.kubelet_double import Container, KubeletDouble, Pod
from tests.integration.podresources_double import FakeContainer, FakePod, PodResourcesDouble

pytestmark = pytest.mark.integration

GPU = "nvidia.com/gpu"


def _wait_scrape(port: int, agent: AgentProcess, accept: Callable[[str], bool], timeout: float = 20) -> str:
    return scrape_until(port, lambda: agent.log, accept, timeout)


def _lines(text: str, name: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith(name + "{")]


@pytest.fixture
def pod_resources(plugin_dir: Path) -> Iterator[PodResourcesDouble]:
    double = PodResourcesDouble(plugin_dir.parent / f"{plugin_dir.name}-pr" / "kubelet.sock").start()
    yield double
    double.stop()


def test_pods_on_replicas_get_their_own_series_and_the_agent_reports_its_rpcs(
    kubelet: KubeletDouble,
    pod_resources: PodResourcesDouble,
    plugin_dir: Path,
    start_agent: Callable[..., AgentProcess],
) -> None:
    config = plugin_dir / "ts.yaml"
    config.write_text(time_sliced(4))
    faults = plugin_dir / "faults.jsonl"
    port = free_port()
    agent = start_agent(
        "--node-spec",
        "builtin:seed-8gpu",
        "--config",
        str(config),
        "--fault-file",
        str(faults),
        "--metrics-address",
        f"127.0.0.1:{port}",
        "--pod-resources-socket",
        str(pod_resources.socket_path),
    )
    assert kubelet.wait_for(lambda: kubelet.allocatable(GPU) == 32, 20), agent.log
    ids = []
    for uid in ("a", "b"):
        env = kubelet.admit_pod(Pod(uid=uid, containers=[Container(name="main", requests={GPU: 1})]))
        ids.append(env["main"].envs["NVIDIA_VISIBLE_DEVICES"])
    pod_resources.pods = [
        FakePod(
            namespace="ml",
            name=f"pod-{uid}",
            containers=(FakeContainer(name="main", devices={GPU: (device,)}),),
        )
        for uid, device in (
            ("a", kubelet.allocations[("a", "main", GPU)][0][0]),
            ("b", kubelet.allocations[("b", "main", GPU)][0][0]),
        )
    ]
    text = _wait_scrape(port, agent, lambda t: 'pod="pod-b"' in t)
    used = _lines(text, "DCGM_FI_DEV_FB_USED")
    for uid, uuid in zip(("a", "b"), ids, strict=True):
        mine = [line for line in used if f'pod="pod-{uid}"' in line]
        assert len(mine) == 1 and f'UUID="{uuid}"' in mine[0] and 'namespace="ml"' in mine[0]
    assert len(used) == 8 - len(set(ids)) + 2  # held GPUs: one series per pod; the others one each
    text = _wait_scrape(
        port, agent, lambda t: "kubegpu_registrations_total{" in t
    )  # Register may still be returning
    assert 'kubegpu_registrations_total{outcome="success",resource="nvidia.com/gpu"} 1.0' in text
    assert (
        'kubegpu_rpc_duration_seconds_count{outcome="ok",resource="nvidia.com/gpu",rpc="Allocate"} 2.0'
        in text
    )

    faults.write_text(json.dumps({"gpu": 5, "xid": 79}) + "\n")
    text = _wait_scrape(port, agent, lambda t: 'err_code="79"' in t)
    assert any('gpu="5"' in line and line.endswith(" 79") for line in _lines(text, "DCGM_FI_DEV_XID_ERRORS"))
    assert 'kubegpu_health_transitions_total{gpu="5",to="unhealthy"} 1.0' in text


def test_without_a_cluster_the_endpoint_serves_every_gpu_without_pod_labels(
    plugin_dir: Path, start_agent: Callable[..., AgentProcess]
) -> None:
    port = free_port()
    agent = start_agent(
        "--node-spec",
        "builtin:seed-8gpu",
        "--kubelet-socket",
        "",
        "--metrics-address",
        f"127.0.0.1:{port}",
        "--pod-resources-socket",
        str(plugin_dir / "absent.sock"),
    )
    text = _wait_scrape(port, agent, lambda t: "DCGM_FI_DEV_GPU_UTIL{" in t)
    scrape(port)
    for name in (
        "DCGM_FI_DEV_GPU_UTIL",
        "DCGM_FI_DEV_FB_USED",
        "DCGM_FI_DEV_POWER_USAGE",
        "DCGM_FI_DEV_XID_ERRORS",
    ):
        lines = _lines(text, name)
        assert len(lines) == 8 and not any("pod=" in line for line in lines)
    assert 'Hostname="' in text and 'DCGM_FI_DRIVER_VERSION="simulated"' in text
    assert agent.log.count("metrics without pod labels") == 1
    assert "kubegpu_pod_resources_failures_total" in text and "Traceback" not in agent.log
