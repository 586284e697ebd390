"""Shares of one GPU on the rig's real node (issue 15): `kubegpu extender` picks the GPU, the agent
(``kubegpu.fractional``) hands exactly that GPU to the container.

The agent serves the seed machine's 8 GPUs and ``kubegpu.io/gpu-milli`` (8,000 devices), publishes
the GPUs' UUIDs on the Node, and reads each admitted pod's ``kubegpu.io/gpu-assignment``; the second
kube-scheduler and the extender run as in ``test_extender.py``. Each container prints its
environment, so the test reads what the container really got.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import AgentProcess, Cluster, in_ns, pod, say, wait_until
from tests.e2e.rig.extender import ExtenderProcess
from tests.e2e.rig.rig import NODE_NAME, Rig
from tests.e2e.test_extender import assignment, scheduler_config

pytestmark = pytest.mark.e2e

GPUS = 8
UUIDS = "kubegpu.io/gpu-uuids"


@dataclass
class Shares:
    uuids: list[str]  # the node's GPUs, as the agent published them
    agent: AgentProcess

    def handouts(self) -> list[dict[str, Any]]:
        """The agent's `share handed out` log records."""
        lines = self.agent.log_path.read_text(errors="replace").splitlines()
        records = [json.loads(line) for line in lines if line.startswith("{")]
        return [r for r in records if r.get("msg") == "share handed out"]


@pytest.fixture
def shares(
    rig: Rig, cluster: Cluster, start_agent: Callable[..., AgentProcess], tmp_path: Path
) -> Iterator[Shares]:
    """The agent with shares on, the extender and its scheduler."""
    config = tmp_path / "agent.yaml"
    config.write_text("version: v1\nkubegpu:\n  fractional: true\n")
    agent = start_agent(
        "builtin:seed-8gpu",
        config=config,
        extra_args=["--node-name", NODE_NAME, "--kubeconfig", str(rig.paths.kubeconfig)],
    )
    cluster.wait_resource("nvidia.com/gpu", allocatable=GPUS)
    wait_until(  # the API server writes 8000 as 8k
        "node kubegpu.io/gpu-milli allocatable 8000",
        lambda: cluster.node_resources()[1].get("kubegpu.io/gpu-milli"),
        60,
        accept=lambda v: v in (str(GPUS * 1000), f"{GPUS}k"),
    )
    node: dict[str, Any] = wait_until(
        f"the agent's {UUIDS} annotation on the node",
        lambda: cluster.get("node", NODE_NAME),
        60,
        accept=lambda n: len((n["metadata"].get("annotations") or {}).get(UUIDS, "").split(",")) == GPUS,
    )
    uuids = node["metadata"]["annotations"][UUIDS].split(",")
    ext = ExtenderProcess(rig.paths.kubeconfig, tmp_path / "extender.log")
    ext.start()
    try:
        rig.start_extra_scheduler(scheduler_config(ext.url))
        yield Shares(uuids=uuids, agent=agent)
    finally:
        rig.stop_extra_scheduler()
        ext.stop()
        print(ext.log_tail(60))


def share_pod(name: str, ns: str, *, milli: int = 0, gpus: int = 0) -> dict[str, Any]:
    resources = {"kubegpu.io/gpu-milli": milli} if milli else {"nvidia.com/gpu": gpus}
    obj = in_ns(pod(name, resources=resources), ns)  # prints its environment, then sleeps
    obj["spec"]["schedulerName"] = "kubegpu"
    return obj


def test_two_half_gpu_pods_get_the_same_gpu_uuid_and_a_third_another(
    cluster: Cluster, shares: Shares, request: pytest.FixtureRequest
) -> None:
    uuids = shares.uuids
    ns = cluster.namespace("shares")
    t0 = time.monotonic()
    for name in ("half-a", "half-b"):
        cluster.apply(share_pod(name, ns, milli=500))
    a, b = assignment(cluster, ns, "half-a"), assignment(cluster, ns, "half-b")
    assert a["gpus"] == b["gpus"] and a["uuids"] == b["uuids"] == [uuids[a["gpus"][0]]]
    shared = a["uuids"][0]
    for name in ("half-a", "half-b"):
        env = cluster.env(ns, name)
        assert env.get("NVIDIA_VISIBLE_DEVICES") == shared, f"{name} got the GPU its assignment names"
        assert env.get("KUBEGPU_GPU_MILLI") == "500"
    say(request.config, f"[e2e] shares: two 500m pods running on {shared} in {time.monotonic() - t0:.1f} s")

    cluster.apply(share_pod("half-c", ns, milli=500))
    c = assignment(cluster, ns, "half-c")
    assert c["uuids"][0] != shared, "a third 500m pod goes to another GPU"
    assert cluster.env(ns, "half-c").get("NVIDIA_VISIBLE_DEVICES") == c["uuids"][0]

    cluster.apply(share_pod("whole-share", ns, milli=1000))
    w = assignment(cluster, ns, "whole-share")
    assert w["uuids"][0] not in (shared, c["uuids"][0]), "a 1000m pod never shares a GPU"
    env = cluster.env(ns, "whole-share")
    assert env.get("NVIDIA_VISIBLE_DEVICES") == w["uuids"][0] and env.get("KUBEGPU_GPU_MILLI") == "1000"

    # a whole-GPU pod: kubelet picks the device, the agent's preferred choice leaves out shared GPUs
    cluster.apply(share_pod("device", ns, gpus=1))
    visible = cluster.env(ns, "device").get("NVIDIA_VISIBLE_DEVICES")
    assert visible in uuids and visible not in (shared, c["uuids"][0], w["uuids"][0])

    # what each container got, as the agent recorded it, and what finding the pod cost (one LIST)
    got = {r["pod"].split("/")[1]: r for r in shares.handouts()}
    assert {n: got[n]["uuid"] for n in ("half-a", "half-b", "half-c")} == {
        "half-a": shared,
        "half-b": shared,
        "half-c": c["uuids"][0],
    }
    # kubelet asks GetPreferredAllocation right before Allocate: that LIST serves both (one per admission)
    assert all(r["list_reused"] for r in got.values()), got
    lists = sorted(float(r["list_ms"]) for r in got.values())
    say(
        request.config,
        f"[e2e] shares: finding the pod in Allocate (the preferred allocation's LIST reused): "
        f"{', '.join(map(str, lists))} ms",
    )


def test_a_share_without_an_assignment_fails_with_a_reason(cluster: Cluster, shares: Shares) -> None:
    del shares
    ns = cluster.namespace("shares")
    obj = in_ns(pod("stray", resources={"kubegpu.io/gpu-milli": 300}), ns)
    obj["spec"]["nodeName"] = NODE_NAME  # bound by hand: no extender, no assignment
    cluster.apply(obj)
    status: dict[str, Any] = wait_until(
        "the stray pod refused at admission",
        lambda: cluster.get("pod", "stray", ns).get("status", {}),
        60,
        accept=lambda st: st.get("phase") == "Failed",
    )
    assert status.get("reason") == "UnexpectedAdmissionError"
    message = str(status.get("message", ""))
    assert "no pod on node" in message and NODE_NAME in message and "300" in message, message
    assert "kubegpu extender" in message


@pytest.fixture
def mps_shares(
    rig: Rig, cluster: Cluster, start_agent: Callable[..., AgentProcess], tmp_path: Path
) -> Iterator[tuple[Shares, Path, Path]]:
    """As ``shares``, with MPS for the shares (``kubegpu.mps.shares``): the stand-in
    nvidia-cuda-mps-control (tests/mps_standin) plays the control daemon; yields the MPS root and the
    stand-in's record."""
    from tests.mps_standin import install

    root, record = tmp_path / "mps", tmp_path / "mps-record.jsonl"
    control = install(tmp_path / "bin")
    config = tmp_path / "agent.yaml"
    config.write_text(
        f"version: v1\nflags: {{mpsRoot: {root}}}\n"
        f"kubegpu:\n  fractional: true\n  mps: {{shares: true, control: {control}}}\n"
    )
    os.environ["KUBEGPU_MPS_STANDIN_RECORD"] = str(record)  # the agent and its daemon inherit it
    try:
        agent = start_agent(
            "builtin:seed-8gpu",
            config=config,
            extra_args=["--node-name", NODE_NAME, "--kubeconfig", str(rig.paths.kubeconfig)],
        )
    finally:
        del os.environ["KUBEGPU_MPS_STANDIN_RECORD"]
    cluster.wait_resource("nvidia.com/gpu", allocatable=GPUS)
    node: dict[str, Any] = wait_until(
        f"the agent's {UUIDS} annotation on the node",
        lambda: cluster.get("node", NODE_NAME),
        60,
        accept=lambda n: len((n["metadata"].get("annotations") or {}).get(UUIDS, "").split(",")) == GPUS,
    )
    ext = ExtenderProcess(rig.paths.kubeconfig, tmp_path / "extender.log")
    ext.start()
    try:
        rig.start_extra_scheduler(scheduler_config(ext.url))
        uuids = node["metadata"]["annotations"][UUIDS].split(",")
        yield Shares(uuids=uuids, agent=agent), root, record
    finally:
        rig.stop_extra_scheduler()
        ext.stop()
        agent.stop()  # quits the stand-in daemon
        print(ext.log_tail(60))


def test_a_300_and_a_700_share_of_one_gpu_get_the_mps_pipe_and_their_own_limits(
    cluster: Cluster, mps_shares: tuple[Shares, Path, Path]
) -> None:
    """Issue 60: on the rig, two pods with 300 and 700 milli of one GPU receive the MPS pipe and
    limits in proportion to their share; the (stand-in) control daemon runs over the shared GPUs."""
    from tests.mps_standin import Record

    shares, root, record = mps_shares
    ns = cluster.namespace("mps")
    cluster.apply(share_pod("small", ns, milli=300))
    cluster.apply(share_pod("large", ns, milli=700))
    a, b = assignment(cluster, ns, "small"), assignment(cluster, ns, "large")
    assert a["uuids"] == b["uuids"], "300 + 700 fit one GPU, and the extender packs them"
    pipe = f"{root}/kubegpu.io/gpu-milli/pipe"
    envs = {name: cluster.env(ns, name) for name in ("small", "large")}
    for name, milli in (("small", 300), ("large", 700)):
        env = envs[name]
        assert env.get("NVIDIA_VISIBLE_DEVICES") == a["uuids"][0]
        assert env.get("CUDA_MPS_PIPE_DIRECTORY"), env
        assert env.get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE") == str(milli // 10), env
        assert env.get("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "").startswith("0="), env
    small_mib = int(envs["small"]["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"][2:].rstrip("M"))
    large_mib = int(envs["large"]["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"][2:].rstrip("M"))
    assert 2 * small_mib < large_mib < 3 * small_mib, (small_mib, large_mib)  # 300 : 700
    started = [e for e in Record(record).events("start") if e["env"].get("CUDA_MPS_PIPE_DIRECTORY") == pipe]
    assert started, "the stand-in control daemon was started for the shares"
    assert a["uuids"][0] in started[-1]["env"]["CUDA_VISIBLE_DEVICES"].split(",")
    assert shares.agent.proc.poll() is None
