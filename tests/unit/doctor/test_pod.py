"""Pod checks over recorded API objects: each Pending cause, spec mistake and log message of the seeds."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kubegpu.doctor import RecordedCluster, Status, pod_report
from kubegpu.doctor.chain import Report
from kubegpu.doctor.pod import scheduling_clauses
from tests.unit.doctor.apiobjects import event, gpu_container, pending_pod, pod, running_pod


def report(cluster: RecordedCluster, target: str) -> Report:
    ns, name = target.split("/")
    return pod_report(lambda: cluster, ns, name)


def schedule_fail(cluster: RecordedCluster, message: str, **spec: object) -> Report:
    cluster.pods.append(pending_pod("ml", "big-train", [gpu_container("trainer", gpus=8)], spec=dict(spec)))
    cluster.events.append(event("ml", "Pod", "big-train", "FailedScheduling", message))
    return report(cluster, "ml/big-train")


def test_running_gpu_pod_passes(cluster: RecordedCluster) -> None:
    r = report(cluster, "ml/train-a")
    assert r.exit_code == 0
    assert {f.status for f in r.findings} == {Status.OK}, [f for f in r.findings if f.status is not Status.OK]


def test_missing_pod_fails_and_blocks_the_pod_checks(cluster: RecordedCluster) -> None:
    r = report(cluster, "ml/nope")
    assert r.by_id("pod.found").status is Status.FAIL
    assert all(f.summary == "blocked by pod.found" for f in r.findings[2:])


def test_scheduling_message_splits_into_clauses() -> None:
    msg = (
        "0/3 nodes are available: 1 Insufficient nvidia.com/gpu, 2 node(s) had untolerated taint "
        "{node-role.kubernetes.io/control-plane: }. "
        "preemption: 0/3 nodes are available: 3 No preemption victims."
    )
    assert scheduling_clauses(msg) == [
        "1 Insufficient nvidia.com/gpu",
        "2 node(s) had untolerated taint {node-role.kubernetes.io/control-plane: }",
    ]


def test_insufficient_gpus_names_who_holds_them_on_which_node(cluster: RecordedCluster) -> None:
    f = schedule_fail(
        cluster,
        "0/3 nodes are available: 2 Insufficient nvidia.com/gpu, "
        "1 node(s) didn't match Pod's node affinity/selector.",
    ).by_id("pod.pending")
    assert f.status is Status.FAIL
    assert "not enough free nvidia.com/gpu for 8" in f.summary
    assert "gpu-node-1: 4/8 nvidia.com/gpu allocated, held by ml/train-a (4)" in f.evidence
    assert (
        "gpu-node-2: 2/8 nvidia.com/gpu allocated, held by ml/infer-b (2)" in f.evidence
    )  # the Succeeded pod holds none


def test_a_pod_asking_more_gpus_than_any_node_has_is_told_so_not_to_free_gpus(
    cluster: RecordedCluster,
) -> None:
    """9 GPUs on 8-GPU nodes: freeing GPUs never helps, so the advice is to split the pod."""
    cluster.pods.append(pending_pod("ml", "huge", [gpu_container("trainer", gpus=9)], spec={}))
    cluster.events.append(
        event(
            "ml", "Pod", "huge", "FailedScheduling", "0/3 nodes are available: 2 Insufficient nvidia.com/gpu."
        )
    )
    f = report(cluster, "ml/huge").by_id("pod.pending")
    assert f.status is Status.FAIL
    assert "asks for 9 nvidia.com/gpu and the largest node has 8" in f.summary
    assert "free GPUs" not in f.fix
    assert "at most 8 nvidia.com/gpu per pod" in f.fix
    assert any("gpu-node-1: 8" in line for line in f.evidence)


def test_untolerated_gpu_taint_gives_the_toleration(cluster: RecordedCluster) -> None:
    f = schedule_fail(
        cluster,
        "0/3 nodes are available: 2 node(s) had untolerated taint {nvidia.com/gpu: present}, "
        "1 Insufficient nvidia.com/gpu.",
    ).by_id("pod.pending")
    assert f.status is Status.FAIL
    assert "taint" in f.summary
    assert "tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]" in f.fix


def test_node_selector_mismatch_shows_the_missing_label(cluster: RecordedCluster) -> None:
    f = schedule_fail(
        cluster,
        "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector.",
        nodeSelector={"node-role.kubernetes.io/gpu": "yes"},
    ).by_id("pod.pending")
    assert f.status is Status.FAIL
    assert "nodeSelector" in f.summary
    assert "GPU node gpu-node-1 lacks: node-role.kubernetes.io/gpu=yes" in f.evidence
    assert "kubectl label nodes" in f.fix


def test_cpu_shortage_on_gpu_nodes_is_named(cluster: RecordedCluster) -> None:
    f = schedule_fail(
        cluster, "0/3 nodes are available: 2 Insufficient cpu, 1 Insufficient nvidia.com/gpu."
    ).by_id("pod.pending")
    assert f.status is Status.FAIL
    assert "CPU or memory" in f.summary
    assert "lower the pod's cpu/memory requests" in f.fix


def test_pending_reason_falls_back_to_the_pod_condition(cluster: RecordedCluster) -> None:
    p = pending_pod("ml", "old", [gpu_container()])
    p["status"]["conditions"][0]["message"] = "0/3 nodes are available: 3 node(s) were unschedulable."
    cluster.pods.append(p)
    f = report(cluster, "ml/old").by_id("pod.pending")
    assert f.status is Status.FAIL and "cordoned" in f.summary


def test_pending_without_events_warns(cluster: RecordedCluster) -> None:
    cluster.pods.append(pending_pod("ml", "new", [gpu_container()]))
    assert report(cluster, "ml/new").by_id("pod.pending").status is Status.WARN


def test_missing_nvidia_runtime_handler_is_named_from_the_sandbox_event(cluster: RecordedCluster) -> None:
    p = running_pod(
        "ml", "rc", [gpu_container()], spec={"runtimeClassName": "nvidia"}, waiting="ContainerCreating"
    )
    p["status"]["phase"] = "Pending"
    cluster.pods.append(p)
    cluster.events.append(
        event(
            "ml",
            "Pod",
            "rc",
            "FailedCreatePodSandBox",
            "Failed to create pod sandbox: rpc error: code = Unknown desc = failed to get sandbox runtime: "
            'no runtime for "nvidia" is configured',
        )
    )
    f = report(cluster, "ml/rc").by_id("pod.pending")
    assert f.status is Status.FAIL
    assert "RuntimeClass nvidia" in f.summary
    assert "nvidia-ctk runtime configure" in f.fix


def test_gpu_requests_different_from_limits_fail(cluster: RecordedCluster) -> None:
    c = gpu_container(gpus=2)
    c["resources"]["requests"] = {"nvidia.com/gpu": "1"}
    cluster.pods.append(pending_pod("ml", "bad", [c]))
    f = report(cluster, "ml/bad").by_id("pod.requests")
    assert f.status is Status.FAIL
    assert "requests 1 ≠ limits 2" in f.summary
    assert "limits" in f.fix


def test_gpu_in_requests_only_fails(cluster: RecordedCluster) -> None:
    c = {"name": "app", "image": "busybox", "resources": {"requests": {"nvidia.com/gpu": "1"}}}
    cluster.pods.append(pending_pod("ml", "bad", [c]))
    assert report(cluster, "ml/bad").by_id("pod.requests").status is Status.FAIL


def test_cuda_image_without_gpu_request_warns(cluster: RecordedCluster) -> None:
    c = {
        "name": "app",
        "image": "pytorch/pytorch:2.1.0-cuda12.1-cudnn8-runtime",
        "command": ["python", "train.py"],
    }
    cluster.pods.append(running_pod("ml", "nogpu", [c]))
    f = report(cluster, "ml/nogpu").by_id("pod.requests")
    assert f.status is Status.WARN
    assert "requests no nvidia.com/gpu" in f.summary
    assert '"nvidia.com/gpu": 1' in f.fix


def test_plain_cpu_pod_needs_no_gpu(cluster: RecordedCluster) -> None:
    r = report(cluster, "web/frontend-5d8f")
    assert r.by_id("pod.requests").status is Status.OK
    assert r.by_id("pod.shm").status is Status.SKIP


def test_visible_devices_override_warns_and_void_fails(cluster: RecordedCluster) -> None:
    c = gpu_container()
    c["env"] = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "0"}]
    cluster.pods.append(running_pod("ml", "vis", [c]))
    f = report(cluster, "ml/vis").by_id("pod.visible-devices")
    assert f.status is Status.WARN
    assert "CUDA_VISIBLE_DEVICES" in f.fix
    c["env"][0]["value"] = "void"
    assert report(cluster, "ml/vis").by_id("pod.visible-devices").status is Status.FAIL


def test_visible_devices_without_gpu_request_bypasses_the_scheduler(cluster: RecordedCluster) -> None:
    c = {"name": "app", "image": "busybox", "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]}
    cluster.pods.append(running_pod("ml", "sneaky", [c]))
    f = report(cluster, "ml/sneaky").by_id("pod.visible-devices")
    assert f.status is Status.WARN and "without requesting a GPU" in f.summary


def test_default_dev_shm_warns_with_the_memory_emptydir(cluster: RecordedCluster) -> None:
    cluster.pods.append(running_pod("ml", "noshm", [gpu_container(gpus=2)]))
    f = report(cluster, "ml/noshm").by_id("pod.shm")
    assert f.status is Status.WARN
    assert "64 MB" in f.summary
    assert "medium: Memory" in f.fix and "/dev/shm" in f.fix


LOG_ROWS = [
    (
        "RuntimeError: CUDA error: no kernel image is available for execution on the device",
        "compute capability",
    ),
    ("/bin/sh: 1: nvidia-smi: not found", "has no nvidia-smi"),
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", "GPU memory ran out"),
    ("CUDA driver version is insufficient for CUDA runtime version", "older than the CUDA version"),
    ("ImportError: libcuda.so.1: cannot open shared object file: No such file or directory", "not injected"),
    ("Failed to initialize NVML: Driver/library version mismatch", "old kernel module"),
]


@pytest.mark.parametrize(("line", "cause"), LOG_ROWS)
def test_each_known_log_message_is_mapped_to_its_cause(
    cluster: RecordedCluster, line: str, cause: str
) -> None:
    cluster.pods.append(running_pod("ml", "app", [gpu_container()]))
    cluster.logs["ml/app/app"] = f"starting\n{line}\n"
    f = report(cluster, "ml/app").by_id("pod.logs")
    assert f.status is Status.FAIL
    assert cause in f.summary
    assert f"log: {line}" in f.evidence


def test_oom_advice_covers_batch_size_and_mixed_precision(cluster: RecordedCluster) -> None:
    cluster.pods.append(running_pod("ml", "app", [gpu_container()], restarts=3, waiting="CrashLoopBackOff"))
    cluster.logs["ml/app/app/previous"] = "torch.cuda.OutOfMemoryError: CUDA out of memory."
    f = report(cluster, "ml/app").by_id("pod.logs")
    assert "batch size" in f.fix and "mixed precision" in f.fix and "DCGM_FI_DEV_FB_USED" in f.fix


def test_nvml_unknown_error_lists_the_four_causes_in_the_seed_order(cluster: RecordedCluster) -> None:
    cluster.pods.append(
        running_pod("ml", "app", [gpu_container(image="nvidia/cuda:12.4.0-base-ubuntu22.04")])
    )
    cluster.logs["ml/app/app"] = "Failed to initialize NVML: Unknown Error"
    f = report(cluster, "ml/app").by_id("pod.logs")
    assert f.status is Status.FAIL
    causes = [e for e in f.evidence if e[:3] in ("(1)", "(2)", "(3)", "(4)")]
    assert [c[:3] for c in causes] == ["(1)", "(2)", "(3)", "(4)"]
    assert "nvidia runtime" in causes[0]
    assert "ruled out, it requests 1" in causes[1]
    assert "image CUDA 12.4, node driver 550.90.07" in causes[2]
    assert "cgroup" in causes[3] and "CDI" in causes[3]
    steps = f.fix.splitlines()
    assert "describe pod" in steps[0] and "ls -l /dev/nvidia*" in steps[1] and "nvidia-smi" in steps[2]


def test_nvml_unknown_error_without_gpu_request_blames_the_missing_request(cluster: RecordedCluster) -> None:
    c = {"name": "app", "image": "nvidia/cuda:12.4.0-base-ubuntu22.04", "command": ["nvidia-smi"]}
    cluster.pods.append(running_pod("ml", "app", [c]))
    cluster.logs["ml/app/app"] = "Failed to initialize NVML: Unknown Error"
    f = report(cluster, "ml/app").by_id("pod.logs")
    assert "(2)" in f.summary
    assert any(e.startswith("(2)") and "APPLIES" in e for e in f.evidence)


def test_crash_loop_without_known_message_still_fails(cluster: RecordedCluster) -> None:
    cluster.pods.append(running_pod("ml", "app", [gpu_container()], restarts=5, waiting="CrashLoopBackOff"))
    cluster.logs["ml/app/app/previous"] = "segmentation fault"
    f = report(cluster, "ml/app").by_id("pod.logs")
    assert f.status is Status.FAIL and "crash-loops" in f.summary


def test_pod_that_never_started_has_no_logs_to_read(cluster: RecordedCluster) -> None:
    cluster.pods.append(pending_pod("ml", "waiting", [gpu_container()]))
    assert report(cluster, "ml/waiting").by_id("pod.logs").status is Status.SKIP


def test_a_succeeded_pod_is_not_pending(cluster: RecordedCluster) -> None:
    assert pod(cluster, "default", "gpu-test")["status"]["phase"] == "Succeeded"
    assert report(cluster, "default/gpu-test").by_id("pod.pending").status is Status.OK


REASONS = st.sampled_from(
    [
        "Insufficient nvidia.com/gpu",
        "Insufficient cpu",
        "Insufficient memory",
        "node(s) didn't match Pod's node affinity/selector",
        "node(s) had untolerated taint {nvidia.com/gpu: present}",
        "node(s) had untolerated taint {node-role.kubernetes.io/control-plane: }",
        "node(s) were unschedulable",
    ]
)


@given(st.lists(st.tuples(st.integers(min_value=1, max_value=500), REASONS), min_size=1, max_size=6))
def test_every_clause_of_a_scheduler_message_is_recovered(clauses: list[tuple[int, str]]) -> None:
    total = sum(n for n, _ in clauses)
    body = ", ".join(f"{n} {reason}" for n, reason in clauses)
    preemption = f"preemption: 0/{total} nodes are available: {total} No preemption victims found."
    message = f"0/{total} nodes are available: {body}. {preemption}"
    assert scheduling_clauses(message) == [f"{n} {reason}" for n, reason in clauses]


def test_mig_resource_no_node_advertises_is_named(cluster: RecordedCluster) -> None:
    c = {"name": "app", "image": "x", "resources": {"limits": {"nvidia.com/mig-1g.10gb": "1"}}}
    cluster.pods.append(pending_pod("ml", "small", [c]))
    cluster.events.append(
        event(
            "ml",
            "Pod",
            "small",
            "FailedScheduling",
            "0/3 nodes are available: 3 Insufficient nvidia.com/mig-1g.10gb.",
        )
    )
    f = report(cluster, "ml/small").by_id("pod.pending")
    assert f.status is Status.FAIL
    assert "no node advertises nvidia.com/mig-1g.10gb" in f.summary
    assert "resources advertised in the cluster: nvidia.com/gpu" in f.evidence
    assert "mixed MIG strategy" in f.fix


def share_container(milli: int = 500) -> dict[str, object]:
    return {"name": "main", "image": "busybox", "resources": {"limits": {"kubegpu.io/gpu-milli": str(milli)}}}


def test_a_gpu_share_needs_the_extenders_assignment_and_an_agent_serving_shares(
    cluster: RecordedCluster,
) -> None:
    assert report(cluster, "ml/train-a").by_id("pod.gpu-share").status is Status.OK
    cluster.pods.append(running_pod("ml", "stray", [share_container()]))
    f = report(cluster, "ml/stray").by_id("pod.gpu-share")
    assert f.status is Status.FAIL and "without the kubegpu.io/gpu-assignment annotation" in f.summary
    assert "schedulerName: kubegpu" in f.fix

    doc = '{"gpus":[3],"milli":500,"node":"gpu-node-2","uuids":[],"version":1}'
    placed = running_pod("ml", "placed", [share_container()])
    placed["metadata"]["annotations"] = {"kubegpu.io/gpu-assignment": doc}
    cluster.pods.append(placed)
    f = report(cluster, "ml/placed").by_id("pod.gpu-share")
    assert f.status is Status.FAIL and "does not advertise kubegpu.io/gpu-milli" in f.summary
    assert "fractional.enabled=true" in f.fix
    node = next(n for n in cluster.nodes if n["metadata"]["name"] == "gpu-node-2")
    node["status"]["allocatable"]["kubegpu.io/gpu-milli"] = "8k"
    f = report(cluster, "ml/placed").by_id("pod.gpu-share")
    assert f.status is Status.OK and "GPU 3 on gpu-node-2 (500m)" in f.summary


def test_a_pending_share_left_to_the_default_scheduler_warns(cluster: RecordedCluster) -> None:
    cluster.pods.append(pending_pod("ml", "lost", [share_container()]))
    f = report(cluster, "ml/lost").by_id("pod.gpu-share")
    assert f.status is Status.WARN and "default scheduler" in f.summary
