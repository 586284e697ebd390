"""``pod.mps-env``: a share pod whose spec sets CUDA_MPS_* overrides the limits the agent gives it (the
spec's env wins over the device plugin's), so the doctor flags it."""

from __future__ import annotations

from typing import Any

from kubegpu.doctor import RecordedCluster, Status, pod_report
from tests.unit.doctor.apiobjects import running_pod


def _share(name: str, milli: str, env: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "image": "nvidia/cuda:12.4.0-runtime-ubuntu22.04",
        "resources": {"limits": {"kubegpu.io/gpu-milli": milli}},
        "env": env,
        **extra,
    }


def _finding(cluster: RecordedCluster, containers: list[dict[str, Any]]) -> Any:
    cluster.pods.append(running_pod("ml", "share", containers))
    return pod_report(lambda: cluster, "ml", "share").by_id("pod.mps-env")


def test_a_share_pod_without_mps_variables_passes(cluster: RecordedCluster) -> None:
    assert (
        _finding(cluster, [_share("main", "300", [{"name": "HF_HOME", "value": "/x"}])]).status is Status.OK
    )


def test_raising_the_thread_percentage_or_moving_the_pipe_fails(cluster: RecordedCluster) -> None:
    f = _finding(
        cluster,
        [
            _share("main", "300", [{"name": "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "value": "100"}]),
            _share("side", "200", [{"name": "CUDA_MPS_PIPE_DIRECTORY", "value": "/tmp/nvidia-mps"}]),
        ],
    )
    assert f.status is Status.FAIL
    assert "container main (300m): env CUDA_MPS_ACTIVE_THREAD_PERCENTAGE='100'" in f.evidence
    assert "container side (200m): env CUDA_MPS_PIPE_DIRECTORY='/tmp/nvidia-mps'" in f.evidence
    assert "remove CUDA_MPS_*" in f.fix


def test_a_memory_cap_from_the_spec_fails(cluster: RecordedCluster) -> None:
    env = [{"name": "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "value": "0=80G"}]
    assert _finding(cluster, [_share("main", "500", env)]).status is Status.FAIL


def test_a_lower_thread_percentage_only_warns(cluster: RecordedCluster) -> None:
    f = _finding(
        cluster,
        [_share("main", "500", [{"name": "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "value": "20"}], envFrom=[{}])],
    )
    assert f.status is Status.WARN
    assert "container main: envFrom may set CUDA_MPS_* too (not read here)" in f.evidence


def test_whole_gpu_pods_are_not_concerned(cluster: RecordedCluster) -> None:
    f = pod_report(lambda: cluster, "ml", "train-a").by_id("pod.mps-env")
    assert f.status is Status.OK and "no share" in f.summary
