"""`kubegpu doctor` and `kubegpu plan --emit` against the real API server of the rig.

Doctor: the broken links the seeds' tables describe, produced for real (a pod asking for more GPUs
than the node has, a GPU taint the pod does not tolerate, the agent stopped), must be named by the
right check with the right cause. Plan: every Kubernetes object it emits must pass the API server's
own validation (server-side dry-run).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.conftest import AgentProcess, Cluster, in_ns, kubegpu_argv, pod
from tests.e2e.rig.rig import NODE_NAME, Rig

pytestmark = pytest.mark.e2e

SEED = "builtin:seed-8gpu"
GPU = "nvidia.com/gpu"
StartAgent = Callable[..., AgentProcess]


def doctor(rig: Rig, *args: str) -> tuple[int, dict[str, dict[str, Any]]]:
    res = subprocess.run(
        kubegpu_argv("doctor", *args, "--kubeconfig", str(rig.paths.kubeconfig), "--json"),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert res.returncode in (0, 1), f"doctor exited {res.returncode}: {res.stderr[-2000:]}"
    findings = {f["id"]: f for f in json.loads(res.stdout)["findings"]}
    return res.returncode, findings


def text_of(finding: dict[str, Any]) -> str:
    return " ".join([finding["summary"], *finding["evidence"], finding["fix"]])


def test_doctor_names_insufficient_gpus_for_a_pending_pod(cluster: Cluster, start_agent: StartAgent) -> None:
    start_agent(SEED)
    cluster.wait_resource(GPU, allocatable=8, capacity=8)
    ns = cluster.namespace()
    cluster.apply(in_ns(pod("too-big", resources={GPU: 9}), ns))
    cluster.wait_event(ns, "too-big", "FailedScheduling", f"Insufficient {GPU}")
    code, findings = doctor(cluster.rig, "pod", f"{ns}/too-big")
    assert code == 1
    pending = findings["pod.pending"]
    assert pending["status"] == "fail"
    assert f"Insufficient {GPU}" in text_of(pending)


def test_doctor_names_the_untolerated_gpu_taint(cluster: Cluster, start_agent: StartAgent) -> None:
    rig = cluster.rig
    start_agent(SEED)
    cluster.wait_resource(GPU, allocatable=8, capacity=8)
    rig.kubectl("taint", "node", NODE_NAME, f"{GPU}=present:NoSchedule")
    try:
        ns = cluster.namespace()
        cluster.apply(in_ns(pod("no-toleration", resources={GPU: 1}), ns))
        cluster.wait_event(ns, "no-toleration", "FailedScheduling", "untolerated taint")
        code, findings = doctor(rig, "pod", f"{ns}/no-toleration")
        assert code == 1
        pending = findings["pod.pending"]
        assert pending["status"] == "fail"
        assert "taint" in pending["summary"].lower()
        assert "toleration" in pending["fix"].lower()
    finally:
        rig.kubectl("taint", "node", NODE_NAME, f"{GPU}-", check=False)


def test_doctor_reports_no_allocatable_gpus_when_the_agent_is_stopped(
    cluster: Cluster, start_agent: StartAgent
) -> None:
    agent = start_agent(SEED)
    cluster.wait_resource(GPU, allocatable=8, capacity=8)
    code, findings = doctor(cluster.rig, "cluster", "--node", NODE_NAME)
    assert findings["cluster.allocatable"]["status"] == "ok", findings["cluster.allocatable"]
    agent.stop()
    cluster.wait_resource(GPU, allocatable=0, timeout_s=60)
    code, findings = doctor(cluster.rig, "cluster", "--node", NODE_NAME)
    assert code == 1
    allocatable = findings["cluster.allocatable"]
    assert allocatable["status"] == "fail"
    assert NODE_NAME in allocatable["summary"]
    assert "device plugin" in allocatable["summary"]


def _objects(directory: Path) -> list[dict[str, Any]]:
    objs: list[dict[str, Any]] = []
    for path in sorted(directory.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict) and "apiVersion" in doc and "kind" in doc:
                objs.append(doc)
    return objs


@pytest.mark.parametrize(
    "plan_args",
    [
        ("serve", "--model-gb", "14", "--instances", "5", "--gpu", "H100-80GB", "--multi-tenant"),
        ("serve", "--model-gb", "3", "--instances", "4", "--gpu", "H100-80GB"),
        ("pools", "--gpus", "4", "--gpu", "A100-80GB", "--users", "20", "--exclusive", "2"),
    ],
    ids=["serve-mig", "serve-shared", "pools"],
)
def test_every_object_plan_emits_passes_server_side_dry_run(
    cluster: Cluster, tmp_path: Path, plan_args: tuple[str, ...]
) -> None:
    rig = cluster.rig
    out = tmp_path / "emit"
    res = subprocess.run(
        kubegpu_argv("plan", *plan_args, "--emit", str(out)),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert res.returncode == 0, res.stderr
    objects = _objects(out)
    kinds = {o["kind"] for o in objects}
    assert {"Namespace", "ResourceQuota"} <= kinds or {"Namespace", "LimitRange"} <= kinds, kinds
    # Objects others depend on (Namespaces, PriorityClasses) are dry-run first, then created for real
    # so that the objects that reference them can be validated; they are removed afterwards.
    prerequisites = [o for o in objects if o["kind"] in ("Namespace", "PriorityClass")]
    for obj in prerequisites:
        rig.kubectl("create", "--dry-run=server", "-f", "-", input_text=json.dumps(obj))
    namespaces = {o["metadata"]["name"] for o in prerequisites if o["kind"] == "Namespace"} | {
        o["metadata"]["namespace"] for o in objects if o.get("metadata", {}).get("namespace")
    }
    created: list[tuple[str, str]] = []
    try:
        for name in sorted(namespaces):
            if rig.kubectl("get", "namespace", name, check=False).returncode != 0:
                rig.kubectl("create", "namespace", name)
                created.append(("namespace", name))
        for obj in prerequisites:
            if obj["kind"] == "PriorityClass":
                rig.kubectl("create", "-f", "-", input_text=json.dumps(obj))
                created.append(("priorityclass", obj["metadata"]["name"]))
        for obj in objects:
            if obj in prerequisites:
                continue
            check = rig.kubectl(
                "create", "--dry-run=server", "-f", "-", input_text=json.dumps(obj), check=False
            )
            assert check.returncode == 0, f"{obj['kind']} {obj['metadata'].get('name')}: {check.stderr}"
    finally:
        # wait, so that the next case can create them again; one call per kind, so that the
        # namespaces' deletions (each at least 5 s in kube-controller-manager) overlap
        for kind in ("priorityclass", "namespace"):
            names = [name for k, name in created if k == kind]
            if names:
                rig.kubectl(
                    "delete", kind, *names, "--wait=true", "--timeout=90s", check=False, timeout_s=120
                )
