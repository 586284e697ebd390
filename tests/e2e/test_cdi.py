"""CDI device injection works in the rig's containerd: what kubegpu's DRA driver will rely on.

How it is triggered here: `kubegpu agent` with `deviceListStrategy: cdi-cri` answers the kubelet's
Allocate with CDI device names only (`ContainerAllocateResponse.cdi_devices`, kind `kubegpu.io/test`);
the kubelet passes them on in the CRI `CreateContainerRequest.config.CDI_devices` field — the same field
its DRA manager fills from a driver's NodePrepareResources `cdi_device_ids` — and containerd 2.x resolves
each name against the spec files in its `cdi_spec_dirs` (/etc/cdi, /var/run/cdi) and applies their
container edits to the OCI spec. The test writes a throwaway spec into /var/run/cdi (where a DRA driver
writes its own) whose edits are environment variables, so the pod's `env` shows what was injected.
Debian's containerd 1.6 has no CDI: there the variables would be missing.
"""

from __future__ import annotations

import json
import os
import stat
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.e2e.conftest import AgentProcess, Cluster, gpu_index_by_uuid, in_ns, pod
from tests.e2e.rig.rig import CDI_SPEC_DIRS

pytestmark = pytest.mark.e2e

SEED = "builtin:seed-8gpu"
KIND = "kubegpu.io/test"
StartAgent = Callable[..., AgentProcess]


@pytest.fixture
def cdi_spec() -> Iterator[dict[str, int]]:
    """A CDI spec naming each seed GPU (by UUID) as `kubegpu.io/test=<uuid>`, whose edit sets
    KUBEGPU_CDI_GPU_<index>=<uuid>; removed afterwards. Yields UUID -> index."""
    by_uuid = gpu_index_by_uuid(SEED)
    spec_dir = CDI_SPEC_DIRS[-1]
    spec_dir.mkdir(parents=True, exist_ok=True)
    path = spec_dir / f"kubegpu.io-test_e2e-{uuid.uuid4().hex[:8]}.json"
    spec = {
        "cdiVersion": "0.3.0",
        "kind": KIND,
        "devices": [
            {"name": u, "containerEdits": {"env": [f"KUBEGPU_CDI_GPU_{i}={u}"]}} for u, i in by_uuid.items()
        ],
    }
    path.write_text(json.dumps(spec, indent=2) + "\n")
    yield by_uuid
    path.unlink(missing_ok=True)


def test_a_cdi_device_named_by_the_device_plugin_is_injected_by_containerd(
    cluster: Cluster, start_agent: StartAgent, cdi_spec: dict[str, int], tmp_path: Path
) -> None:
    config = tmp_path / "agent-cdi.json"
    config.write_text(
        json.dumps(
            {
                "version": "v1",
                "flags": {"plugin": {"deviceListStrategy": "cdi-cri"}},
                # the throwaway spec above declares KIND: the agent must not write its own as well
                # (two specs declaring one device name make the runtime refuse it)
                "kubegpu": {"cdiKind": KIND, "cdiSpecDir": ""},
            }
        )
    )
    start_agent(SEED, config=config)
    cluster.wait_resource("nvidia.com/gpu", allocatable=8)
    ns = cluster.namespace()
    cluster.apply(in_ns(pod("cdi", resources={"nvidia.com/gpu": 2}), ns))
    cluster.wait_running(ns, "cdi")
    env = cluster.env(ns, "cdi")
    injected = {k: v for k, v in env.items() if k.startswith("KUBEGPU_CDI_GPU_")}
    assert len(injected) == 2, env
    for key, gpu_uuid in injected.items():
        assert key == f"KUBEGPU_CDI_GPU_{cdi_spec[gpu_uuid]}"
    assert "NVIDIA_VISIBLE_DEVICES" not in env  # CDI only: nothing came from the plugin's own envs


AGENT_KIND = "k8s.device-plugin.kubegpu.io/gpu"
AGENT_SPEC = CDI_SPEC_DIRS[-1] / "k8s.device-plugin.kubegpu.io-gpu_kubegpu-agent.json"


def test_a_cdi_only_container_gets_its_gpus_from_the_agents_own_spec(
    cluster: Cluster, start_agent: StartAgent, tmp_path: Path
) -> None:
    """Issue 56: with `cdi-cri` and no spec written by anyone else, the agent's own spec (in
    /var/run/cdi, kind k8s.device-plugin.kubegpu.io/gpu) gives the container its two GPUs' device nodes
    and the control node, and the stand-in nvidia-smi lists exactly those GPUs; nothing comes from the
    plugin's env. Stopping the agent removes the spec. The device nodes are stand-ins under a dev root
    of the test's own (character devices 1:3, /dev/null's numbers)."""
    dev = tmp_path / "devroot" / "dev"
    dev.mkdir(parents=True)
    for name in [*(f"nvidia{i}" for i in range(8)), "nvidiactl"]:
        os.mknod(dev / name, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    config = tmp_path / "agent-own-cdi.json"
    config.write_text(json.dumps({"version": "v1", "flags": {"plugin": {"deviceListStrategy": "cdi-cri"}}}))
    agent = start_agent(
        SEED,
        config=config,
        extra_args=["--nvidia-dev-root", str(dev.parent), "--simulated-nvidia-smi"],
    )
    cluster.wait_resource("nvidia.com/gpu", allocatable=8)
    spec = json.loads(AGENT_SPEC.read_text())
    assert spec["kind"] == AGENT_KIND
    by_uuid = gpu_index_by_uuid(SEED)
    assert {d["name"] for d in spec["devices"]} == set(by_uuid)
    ns = cluster.namespace()
    command = "ls /dev; nvidia-smi -L; env; echo KUBEGPU_ENV_END=1; sleep 3600"
    cluster.apply(in_ns(pod("own-cdi", resources={"nvidia.com/gpu": 2}, command=command), ns))
    cluster.wait_running(ns, "own-cdi")
    env = cluster.env(ns, "own-cdi")
    out = cluster.logs(ns, "own-cdi")
    listed = out.split()
    gpus = sorted(n for n in listed if n.startswith("nvidia") and n[6:].isdigit())
    assert len(gpus) == 2 and "nvidiactl" in listed, out
    smi = [line for line in out.splitlines() if line.startswith("GPU ") and "(UUID: " in line]
    uuids = {line.split("(UUID: ")[1].rstrip(")") for line in smi}
    assert len(smi) == 2 and uuids <= set(by_uuid), out
    assert sorted(f"nvidia{by_uuid[u]}" for u in uuids) == gpus, out  # the nodes are those GPUs'
    assert "NVIDIA_VISIBLE_DEVICES" not in env
    agent.stop()
    assert not AGENT_SPEC.exists(), "the agent's CDI spec outlived the agent"
