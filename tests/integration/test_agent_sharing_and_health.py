"""Sharing, MIG and health through the real agent: names, IDs, fault injection and recovery."""

from __future__ import annotations

import json
import time
from pathlib import Path

import grpc
import pytest

from kubegpu.sources.spec import load_node
from tests.integration.helpers import allocate, plugin_stub, preferred, time_sliced
from tests.integration.kubelet_double import AdmissionError, Container, KubeletDouble, Pod

pytestmark = pytest.mark.integration

GPU = "nvidia.com/gpu"
SHARED = "nvidia.com/gpu.shared"
SEED = load_node("builtin:seed-8gpu")
UUIDS = [g.uuid for g in SEED.gpus]
MIG_NODE = load_node("builtin:h100-mig-mixed")


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


@pytest.fixture
def scratch(plugin_dir: Path):
    made: list[Path] = []

    def make(suffix: str, text: str) -> Path:
        path = plugin_dir.parent / f"{plugin_dir.name}-{len(made)}{suffix}"
        made.append(_write(path, text))
        return path

    yield make
    for p in made:
        p.unlink(missing_ok=True)


TIME_SLICED = """\
version: v1
sharing:
  timeSlicing:
    renameByDefault: true
    failRequestsGreaterThanOne: true
    resources:
    - name: nvidia.com/gpu
      replicas: 4
kubegpu:
  sharing:
    replicas: {"1": 2}
    exclusive: [6, 7]
"""


def test_time_slicing_with_per_gpu_replicas_and_exclusive_gpus(
    kubelet: KubeletDouble, scratch, start_agent
) -> None:
    agent = start_agent("--node-spec", "builtin:seed-8gpu", "--config", str(scratch(".yaml", TIME_SLICED)))
    assert kubelet.wait_for(lambda: kubelet.allocatable(SHARED) == 5 * 4 + 2, 20), agent.log
    assert kubelet.wait_for(lambda: kubelet.allocatable(GPU) == 2, 20), agent.log
    shared = set(kubelet.endpoints[SHARED].devices)
    assert f"{UUIDS[0]}::3" in shared and f"{UUIDS[1]}::1" in shared and f"{UUIDS[1]}::2" not in shared
    assert set(kubelet.endpoints[GPU].devices) == {UUIDS[6], UUIDS[7]}
    channel, stub = plugin_stub(kubelet.endpoints[SHARED].socket)
    with channel:
        with pytest.raises(grpc.RpcError) as too_many:
            allocate(stub, [f"{UUIDS[0]}::0", f"{UUIDS[2]}::0"])
        assert too_many.value.details() == "maximum request size for shared resources is 1"
        response = allocate(stub, [f"{UUIDS[2]}::3"])
        assert response.envs["NVIDIA_VISIBLE_DEVICES"] == UUIDS[2]


def test_distributed_replicas_spread_over_gpus_and_duplicates_collapse(
    kubelet: KubeletDouble, scratch, start_agent
) -> None:
    config = scratch(
        ".yaml",
        time_sliced(10),
    )
    agent = start_agent("--node-spec", "builtin:seed-8gpu", "--config", str(config))
    assert kubelet.wait_for(lambda: kubelet.allocatable(GPU) == 80, 20), agent.log
    ids = sorted(kubelet.endpoints[GPU].devices)
    channel, stub = plugin_stub(kubelet.endpoints[GPU].socket)
    with channel:
        got = preferred(stub, ids, 4)
        assert len({i.split("::")[0] for i in got}) == 4  # four different GPUs
        response = allocate(stub, [f"{UUIDS[3]}::0", f"{UUIDS[3]}::5"])
        assert response.envs["NVIDIA_VISIBLE_DEVICES"] == UUIDS[3]  # mapped back and de-duplicated


def test_packed_replicas_fill_one_gpu_first(kubelet: KubeletDouble, scratch, start_agent) -> None:
    config = scratch(
        ".yaml",
        time_sliced(4),
    )
    agent = start_agent(
        "--node-spec",
        "builtin:seed-8gpu",
        "--config",
        str(config),
        "--shared-devices-allocation-policy",
        "packed",
    )
    assert kubelet.wait_for(lambda: kubelet.allocatable(GPU) == 32, 20), agent.log
    kubelet.admit_pod(Pod(uid="a", containers=[Container(name="c", requests={GPU: 1})]))
    [first] = kubelet.allocations[("a", "c", GPU)][0]
    kubelet.admit_pod(Pod(uid="b", containers=[Container(name="c", requests={GPU: 1})]))
    [second] = kubelet.allocations[("b", "c", GPU)][0]
    assert first.split("::")[0] == second.split("::")[0]


def test_mig_mixed_advertises_one_resource_per_profile_with_mig_uuids(
    kubelet: KubeletDouble, start_agent
) -> None:
    agent = start_agent(
        "--node-spec", "builtin:h100-mig-mixed", "--mig-strategy", "mixed", "--device-id-strategy", "index"
    )
    mig_gpu = next(g for g in MIG_NODE.gpus if g.mig_enabled)
    profiles = {m.profile for m in mig_gpu.mig_instances}
    names = {f"nvidia.com/mig-{p}" for p in profiles}
    assert kubelet.wait_for(lambda: names <= set(kubelet.endpoints), 20), agent.log
    for profile in profiles:
        expected = {m.uuid for m in mig_gpu.mig_instances if m.profile == profile}
        assert kubelet.wait_for(
            lambda n=f"nvidia.com/mig-{profile}", e=expected: set(kubelet.healthy(n)) == e, 10
        )
    plain = [g for g in MIG_NODE.gpus if not g.mig_enabled]
    if plain:
        assert kubelet.wait_for(lambda: kubelet.allocatable(GPU) == len(plain), 10)
    [first] = list(mig_gpu.mig_instances[:1])
    channel, stub = plugin_stub(kubelet.endpoints[f"nvidia.com/mig-{first.profile}"].socket)
    with channel:
        response = allocate(stub, [first.uuid])
    assert response.envs["NVIDIA_VISIBLE_DEVICES"] == f"{mig_gpu.index}:0"


def test_mig_single_refuses_a_node_mixing_mig_and_full_gpus(plugin_dir: Path, start_agent) -> None:
    if all(g.mig_enabled for g in MIG_NODE.gpus):
        pytest.fail("builtin:h100-mig-mixed is expected to mix MIG and non-MIG GPUs")
    agent = start_agent("--node-spec", "builtin:h100-mig-mixed", "--mig-strategy", "single")
    assert agent.proc.wait(20) == 2
    assert "migStrategy" in agent.log and "mixed" in agent.log


def test_fault_marks_every_device_of_the_gpu_unhealthy_and_recovery_brings_them_back(
    kubelet: KubeletDouble, scratch, start_agent
) -> None:
    config = scratch(
        ".yaml",
        time_sliced(3),
    )
    faults = scratch(".jsonl", "")
    agent = start_agent(
        "--node-spec", "builtin:seed-8gpu", "--config", str(config), "--fault-file", str(faults)
    )
    assert kubelet.wait_for(lambda: kubelet.allocatable(GPU) == 24, 20), agent.log
    replicas_of_3 = {f"{UUIDS[3]}::{i}" for i in range(3)}

    def append(event: dict[str, object]) -> float:
        with faults.open("a") as f:
            f.write(json.dumps(event) + "\n")
        return time.monotonic()

    append({"gpu": 3, "xid": 13})  # an application fault: ignored by default
    append({"gpu": UUIDS[3], "xid": 79})
    assert kubelet.wait_for(lambda: kubelet.allocatable(GPU) == 21, 5), agent.log
    health = kubelet.device_health(GPU)
    assert {i for i, h in health.items() if h != "Healthy"} == replicas_of_3
    with pytest.raises(AdmissionError):
        kubelet.admit_pod(Pod(uid="x", containers=[Container(name="c", requests={GPU: 22})]))
    append({"gpu": 3, "healthy": True})
    assert kubelet.wait_for(lambda: kubelet.allocatable(GPU) == 24, 5), agent.log
    assert agent.proc.poll() is None
