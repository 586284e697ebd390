"""The agent's work on its Node through the real API server: GFD-compatible labels, and the quarantine
of a failed GPU (condition, taint, eviction) and its recovery (issue 13, cases 1, 3 and 4).

Each test asserts what an operator reads with kubectl: the node's labels, conditions and taints, which
pods were evicted and which kept running, allocatable. The agent runs as a host process with
``--node-name kubegpu-rig --kubeconfig <rig admin kubeconfig>`` and reads kubelet's PodResources
socket. Fault-to-taint and fault-to-eviction times are printed for docs/node.md.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import (
    AgentProcess,
    Cluster,
    gpu_index_by_uuid,
    in_ns,
    kubegpu_argv,
    pod,
    say,
    wait_until,
)
from tests.e2e.rig.rig import NODE_NAME, Rig

pytestmark = pytest.mark.e2e

SEED = "builtin:seed-8gpu"
GPU = "nvidia.com/gpu"
TAINT_KEY = "nvidia.com/gpu.unhealthy"
StartAgent = Callable[..., AgentProcess]
OURS = ("nvidia.com/", "kubegpu.io/")
FOREIGN = {"nvidia.com/gpu.deploy.user-choice": "keep-me", "example.com/team": "ml"}  # not kubegpu's


def hygiene_args(rig: Rig) -> list[str]:
    return ["--node-name", NODE_NAME, "--kubeconfig", str(rig.paths.kubeconfig)]


def expected_labels(config: Path | None = None) -> dict[str, str]:
    argv = kubegpu_argv("labels", SEED, "--json", *(["--config", str(config)] if config else []))
    out = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=True).stdout
    labels: dict[str, str] = json.loads(out)
    return labels


def node(cluster: Cluster) -> dict[str, Any]:
    return cluster.get("node", NODE_NAME)


def kubegpu_labels(cluster: Cluster) -> dict[str, str]:
    labels = node(cluster)["metadata"].get("labels", {})
    return {
        k: v
        for k, v in labels.items()
        if k.startswith(OURS) and k not in FOREIGN and k != "nvidia.com/gfd.timestamp"
    }


def our_taints(n: dict[str, Any]) -> list[dict[str, Any]]:
    return [t for t in n["spec"].get("taints", []) or [] if t.get("key") == TAINT_KEY]


def our_conditions(n: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for c in n["status"].get("conditions", []) if c.get("type") == "GPUUnhealthy"]


def fault(path: Path, event: dict[str, object]) -> float:
    with path.open("a") as f:
        f.write(json.dumps(event) + "\n")
    return time.monotonic()


def clear_quarantine(rig: Rig) -> None:
    """Remove kubegpu's taint and condition by hand (a failed test must not leave the next one a
    quarantine to read back)."""
    rig.kubectl("taint", "node", NODE_NAME, f"{TAINT_KEY}-", check=False)
    conditions = json.loads(rig.kubectl("get", "node", NODE_NAME, "-o", "json").stdout)["status"][
        "conditions"
    ]
    for i, c in reversed(list(enumerate(conditions))):
        if c.get("type") == "GPUUnhealthy":
            ops = [
                {"op": "test", "path": f"/status/conditions/{i}/type", "value": "GPUUnhealthy"},
                {"op": "remove", "path": f"/status/conditions/{i}"},
            ]
            rig.kubectl(
                "patch", "node", NODE_NAME, "--subresource=status", "--type=json", "-p", json.dumps(ops)
            )


@pytest.fixture(autouse=True)
def no_leftover_quarantine(rig: Rig) -> Any:
    clear_quarantine(rig)
    yield
    clear_quarantine(rig)  # after the test's agents stopped (this fixture was set up first)


@pytest.fixture
def foreign_labels(rig: Rig) -> Any:
    """Labels set by someone else (a user, GFD): kubegpu must never touch them."""
    rig.kubectl("label", "node", NODE_NAME, "--overwrite", *(f"{k}={v}" for k, v in FOREIGN.items()))
    yield
    rig.kubectl("label", "node", NODE_NAME, *(f"{k}-" for k in FOREIGN), check=False)


def test_labels_match_kubegpu_labels_follow_sharing_and_lose_stale_keys(
    rig: Rig, cluster: Cluster, start_agent: StartAgent, tmp_path: Path, foreign_labels: None
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("version: v1\n")
    start_agent(SEED, config=config, extra_args=hygiene_args(rig))
    plain = expected_labels()
    assert plain["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    wait_until(
        "the node's kubegpu labels to equal `kubegpu labels`",
        lambda: kubegpu_labels(cluster),
        30,
        accept=lambda seen: seen == plain,
    )
    assert node(cluster)["metadata"]["labels"].get("nvidia.com/gfd.timestamp", "").isdigit()

    shared = tmp_path / "shared.yaml"
    shared.write_text(
        "version: v1\nflags: {migStrategy: mixed}\n"
        "sharing:\n  timeSlicing:\n    resources:\n      - {name: nvidia.com/gpu, replicas: 4}\n"
    )
    want_shared = expected_labels(shared)
    assert want_shared["nvidia.com/gpu.replicas"] == "4"
    assert want_shared["nvidia.com/gpu.sharing-strategy"] == "time-slicing"
    assert want_shared["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3-SHARED"
    assert want_shared["nvidia.com/mig.strategy"] == "mixed"
    config.write_text(shared.read_text())  # the agent follows its config file
    wait_until("time-slicing labels", lambda: kubegpu_labels(cluster), 30, accept=lambda s: s == want_shared)

    config.write_text("version: v1\n")
    wait_until(
        "labels back to plain, mig.strategy gone",
        lambda: kubegpu_labels(cluster),
        30,
        accept=lambda s: s == plain,
    )
    labels = node(cluster)["metadata"]["labels"]
    assert "nvidia.com/mig.strategy" not in labels
    for key, value in FOREIGN.items():
        assert labels.get(key) == value, f"kubegpu touched {key}, which is not its label"


def test_fatal_xid_quarantines_evicts_its_pod_only_survives_restart_and_recovers(
    rig: Rig, cluster: Cluster, start_agent: StartAgent, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    faults = tmp_path / "faults.jsonl"
    faults.write_text("")
    agent = start_agent(SEED, fault_file=faults, extra_args=hygiene_args(rig))
    cluster.wait_resource(GPU, allocatable=8, capacity=8)
    index = gpu_index_by_uuid(SEED)
    uuid_of = {i: u for u, i in index.items()}
    ns = cluster.namespace("hygiene")
    cluster.apply(in_ns(pod("on-gpu0", resources={GPU: 1}), ns))
    cluster.wait_running(ns, "on-gpu0")
    cluster.apply(in_ns(pod("on-gpu3", resources={GPU: 3}), ns))
    cluster.wait_running(ns, "on-gpu3")
    got = {
        n: {index[u] for u in cluster.env(ns, n)["NVIDIA_VISIBLE_DEVICES"].split(",")}
        for n in ("on-gpu0", "on-gpu3")
    }
    assert got == {"on-gpu0": {0}, "on-gpu3": {1, 2, 3}}, got

    t0 = fault(faults, {"gpu": 3, "xid": 79})
    seen: dict[str, float] = {}

    def progress() -> dict[str, float]:
        n = node(cluster)
        now = time.monotonic() - t0
        if our_taints(n):
            seen.setdefault("taint", now)
        if our_conditions(n):
            seen.setdefault("condition", now)
        p = cluster.get("pod", "on-gpu3", ns)
        if p["metadata"].get("deletionTimestamp") or p["status"].get("phase") in ("Failed", "Succeeded"):
            seen.setdefault("eviction", now)
        return seen

    wait_until("taint, condition and eviction", progress, 10, accept=lambda s: len(s) == 3, interval_s=0.1)
    say(request.config, "[e2e] fault -> " + ", ".join(f"{k} {v:.2f} s" for k, v in sorted(seen.items())))
    n = node(cluster)
    (taint,) = our_taints(n)
    assert (taint["value"], taint["effect"]) == ("Xid79", "NoSchedule")
    (cond,) = our_conditions(n)
    assert cond["status"] == "True" and cond["reason"] == "Xid79"
    assert uuid_of[3] in cond["message"] and "GPU 3" in cond["message"]
    wait_until(
        "the evicted pod to be gone",
        lambda: cluster.rig.kubectl("get", "pod", "-n", ns, "on-gpu3", check=False).returncode != 0,
        60,
    )
    assert cluster.pod_phase(ns, "on-gpu0") == "Running", "the pod on a healthy GPU must keep running"
    cluster.wait_resource(GPU, allocatable=7, capacity=8, timeout_s=15)

    # A restart neither forgets nor duplicates the quarantine: the new agent (whose fault file is
    # empty) reads it back from the node.
    agent.stop()
    fresh = tmp_path / "faults-after-restart.jsonl"
    fresh.write_text("")
    start_agent(SEED, fault_file=fresh, extra_args=hygiene_args(rig))
    cluster.wait_resource(GPU, allocatable=7, capacity=8, timeout_s=45)
    n = node(cluster)
    assert len(our_taints(n)) == 1 and len(our_conditions(n)) == 1, (n["spec"], our_conditions(n))
    assert cluster.pod_phase(ns, "on-gpu0") == "Running"

    t1 = fault(fresh, {"gpu": 3, "healthy": True})
    wait_until(
        "condition and taint gone",
        lambda: node(cluster),
        15,
        accept=lambda n: not our_taints(n) and not our_conditions(n),
        interval_s=0.1,
    )
    say(request.config, f"[e2e] recovery -> taint and condition gone {time.monotonic() - t1:.2f} s")
    cluster.wait_resource(GPU, allocatable=8, capacity=8, timeout_s=15)
    assert cluster.pod_phase(ns, "on-gpu0") == "Running"


def test_non_fatal_xid_changes_nothing(
    rig: Rig, cluster: Cluster, start_agent: StartAgent, tmp_path: Path
) -> None:
    faults = tmp_path / "faults.jsonl"
    faults.write_text("")
    start_agent(SEED, fault_file=faults, extra_args=hygiene_args(rig))
    cluster.wait_resource(GPU, allocatable=8, capacity=8)
    ns = cluster.namespace("hygiene")
    cluster.apply(in_ns(pod("holder", resources={GPU: 4}), ns))
    cluster.wait_running(ns, "holder")
    fault(faults, {"gpu": 3, "xid": 13})  # the catalog's RESTART_APP: an application's fault
    fault(faults, {"gpu": 2, "xid": 94})  # device Unhealthy (NVIDIA's rule) but RESTART_APP: no quarantine
    cluster.wait_resource(GPU, allocatable=7, capacity=8, timeout_s=15)  # XID 94 reached the agent
    time.sleep(3)
    n = node(cluster)
    assert not our_taints(n) and not our_conditions(n), (n["spec"], our_conditions(n))
    assert cluster.pod_phase(ns, "holder") == "Running"
    assert not cluster.get("pod", "holder", ns)["metadata"].get("deletionTimestamp")
