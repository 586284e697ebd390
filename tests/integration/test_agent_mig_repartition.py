"""A MIG repartition served without restarting the agent: ``Agent.reload(node=...)`` against the kubelet
double over real gRPC sockets (the MIG manager calls exactly this after a backend applied a layout).

The resources of the new layout are registered on fresh sockets, the old MIG resources' servers stop
(kubelet then reports them with no allocatable devices), an unchanged resource keeps its socket, a pod
admitted afterwards gets a new MIG device, health events name the new MIG UUIDs, and the simulated
nvidia-smi shows the new instances.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from kubegpu.agent import Agent, AgentOptions
from kubegpu.model.event import GpuEvent, GpuEventKind
from kubegpu.model.migplan import plan_transition
from kubegpu.sources.migparted import load_mig_parted, parse_mig_parted
from kubegpu.sources.migsim import SimulatedMigBackend
from tests.integration.kubelet_double import Container, KubeletDouble, Pod

pytestmark = pytest.mark.integration

MIXED = "version: v1\nflags: {migStrategy: mixed}\n"
DEFAULT = load_mig_parted("builtin:mig-parted-default")


@pytest.fixture
def agent(kubelet: KubeletDouble, plugin_dir: Path) -> Iterator[Agent]:
    config = plugin_dir.parent / f"{plugin_dir.name}-mig.yaml"
    config.write_text(MIXED)
    a = Agent(
        AgentOptions(
            node_spec="builtin:h100-mig-mixed",
            device_plugin_dir=plugin_dir,
            config_file=config,
            simulated_nvidia_smi=True,
        )
    )
    a.start()
    yield a
    a.stop()
    config.unlink(missing_ok=True)


def test_a_repartition_is_served_on_fresh_sockets_without_a_restart(
    kubelet: KubeletDouble, agent: Agent
) -> None:
    assert kubelet.wait_for(
        lambda: (
            kubelet.allocatable("nvidia.com/mig-3g.40gb") == 1
            and kubelet.allocatable("nvidia.com/mig-1g.10gb") == 2
            and kubelet.allocatable("nvidia.com/gpu") == 1
        ),
        20,
    )
    assert agent.node is not None
    new = SimulatedMigBackend().apply(agent.node, plan_transition(agent.node, DEFAULT.config("all-1g.10gb")))
    assert agent.reload(node=new)
    assert kubelet.wait_for(
        lambda: (
            kubelet.allocatable("nvidia.com/mig-1g.10gb") == 14
            and kubelet.allocatable("nvidia.com/mig-3g.40gb") == 0
            and kubelet.allocatable("nvidia.com/mig-2g.20gb") == 0
            and kubelet.allocatable("nvidia.com/gpu") == 0
        ),
        20,
    ), {r: kubelet.allocatable(r) for r in kubelet.endpoints}
    new_ids = {str(m.uuid) for g in new.gpus for m in g.mig_instances}
    assert kubelet.healthy("nvidia.com/mig-1g.10gb") == new_ids
    assert agent.node is new

    configs = kubelet.admit_pod(
        Pod(uid="p1", containers=[Container(name="c", requests={"nvidia.com/mig-1g.10gb": 1})])
    )
    visible = configs["c"].envs["NVIDIA_VISIBLE_DEVICES"]
    assert visible in new_ids

    # health follows the new UUIDs: an XID on a new MIG device fails its GPU's devices
    gpu1_mig = next(str(m.uuid) for m in new.gpus[1].mig_instances)
    agent.apply_event(GpuEvent(gpu=gpu1_mig, kind=GpuEventKind.XID, xid=79))
    assert kubelet.wait_for(lambda: kubelet.allocatable("nvidia.com/mig-1g.10gb") == 7, 10)

    smi = (Path(agent.options.device_plugin_dir) / "kubegpu-sim" / "nvidia-smi").read_text()
    assert smi.count("1g.10gb") >= 14 and "3g.40gb" not in smi


def test_an_unchanged_resource_keeps_its_socket(kubelet: KubeletDouble, agent: Agent) -> None:
    assert kubelet.wait_for(lambda: kubelet.allocatable("nvidia.com/mig-3g.40gb") == 1, 20)
    before = kubelet.endpoints["nvidia.com/mig-3g.40gb"].socket
    assert agent.node is not None
    gpu1_only = parse_mig_parted(
        "version: v1\nmig-configs:\n  gpu1:\n    - devices: [1]\n      mig-enabled: true\n"
        '      mig-devices: {"4g.40gb": 1}\n'
    )
    new = SimulatedMigBackend().apply(agent.node, plan_transition(agent.node, gpu1_only.config("gpu1")))
    assert agent.reload(node=new)
    assert kubelet.wait_for(
        lambda: (
            kubelet.allocatable("nvidia.com/mig-4g.40gb") == 1 and kubelet.allocatable("nvidia.com/gpu") == 0
        ),
        20,
    )
    assert kubelet.endpoints["nvidia.com/mig-3g.40gb"].socket == before  # GPU 0's resources untouched
    assert kubelet.allocatable("nvidia.com/mig-3g.40gb") == 1
