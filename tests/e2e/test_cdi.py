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
