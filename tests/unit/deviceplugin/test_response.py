"""Allocate responses per device-list strategy, shaped as NVIDIA's plugin shapes them."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from kubegpu.deviceplugin.config import (
    AgentConfig,
    DeviceIdStrategy,
    DeviceListStrategy,
    MigStrategy,
    SharedResource,
    Sharing,
    SharingKind,
)
from kubegpu.deviceplugin.inventory import build_inventory
from kubegpu.deviceplugin.response import build_allocation
from kubegpu.sources.spec import load_node

SEED = load_node("builtin:seed-8gpu")
MIG = load_node("builtin:h100-mig-mixed")


def respond(config: AgentConfig, ids: list[int], node=SEED, resource_index: int = 0):
    resource = build_inventory(node, config).resources[resource_index]
    devices = [resource.devices[i] for i in ids]
    return build_allocation(resource, devices, config, annotation_id=lambda: "0000")


def test_envvar_with_uuids_is_the_default() -> None:
    response = respond(AgentConfig(), [3, 1])
    assert response.envs == {"NVIDIA_VISIBLE_DEVICES": f"{SEED.gpus[3].uuid},{SEED.gpus[1].uuid}"}
    assert response.mounts == () and response.devices == () and response.cdi_devices == ()


def test_index_strategy_and_replicas_collapse_to_one_gpu() -> None:
    sharing = Sharing(
        kind=SharingKind.TIME_SLICING,
        rename_by_default=False,
        fail_requests_greater_than_one=False,
        resources=(SharedResource(name="nvidia.com/gpu", replicas=2),),
    )
    config = AgentConfig(sharing=sharing, device_id_strategy=DeviceIdStrategy.INDEX)
    assert respond(config, [0, 1, 2]).envs["NVIDIA_VISIBLE_DEVICES"] == "0,1"


def test_mig_index_ids_are_gpu_colon_position() -> None:
    config = AgentConfig(mig_strategy=MigStrategy.MIXED, device_id_strategy=DeviceIdStrategy.INDEX)
    resource = build_inventory(MIG, config).resource("nvidia.com/mig-1g.10gb")
    assert resource is not None
    response = build_allocation(resource, list(resource.devices), config)
    assert response.envs["NVIDIA_VISIBLE_DEVICES"] == "0:2,0:3"


def test_volume_mounts_point_dev_null_at_one_path_per_device() -> None:
    config = AgentConfig(device_list_strategies=(DeviceListStrategy.VOLUME_MOUNTS,))
    response = respond(config, [2])
    uuid = SEED.gpus[2].uuid
    assert response.envs == {"NVIDIA_VISIBLE_DEVICES": "/var/run/nvidia-container-devices"}
    assert [(m.container_path, m.host_path) for m in response.mounts] == [
        (f"/var/run/nvidia-container-devices/{uuid}", "/dev/null")
    ]


def test_cdi_annotations_use_the_prefix_and_the_cdi_kind() -> None:
    config = AgentConfig(
        device_list_strategies=(DeviceListStrategy.CDI_ANNOTATIONS,),
        cdi_annotation_prefix="cdi.k8s.io/",
        cdi_kind="k8s.device-plugin.nvidia.com/gpu",
        device_id_strategy=DeviceIdStrategy.INDEX,
    )
    response = respond(config, [0, 5])
    kind = "k8s.device-plugin.nvidia.com/gpu"
    assert response.annotations == {"cdi.k8s.io/nvidia-device-plugin_0000": f"{kind}=0,{kind}=5"}
    assert response.envs == {}  # CDI only: the runtime injects the rest


def test_cdi_cri_lists_fully_qualified_names() -> None:
    config = AgentConfig(device_list_strategies=(DeviceListStrategy.CDI_CRI, DeviceListStrategy.ENVVAR))
    response = respond(config, [7])
    # the default kind is kubegpu's own: the spec the agent writes declares it (deviceplugin/cdi.py)
    assert response.cdi_devices == (f"k8s.device-plugin.kubegpu.io/gpu={SEED.gpus[7].uuid}",)
    assert "NVIDIA_VISIBLE_DEVICES" in response.envs


def test_pass_device_specs_lists_control_nodes_that_exist_and_every_gpu_node(tmp_path: Path) -> None:
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev" / "nvidiactl").touch()
    (tmp_path / "dev" / "nvidia-uvm").touch()
    config = AgentConfig(pass_device_specs=True, nvidia_dev_root=str(tmp_path))
    response = respond(config, [1, 4])
    assert [(d.container_path, d.host_path, d.permissions) for d in response.devices] == [
        ("/dev/nvidiactl", f"{tmp_path}/dev/nvidiactl", "rw"),
        ("/dev/nvidia-uvm", f"{tmp_path}/dev/nvidia-uvm", "rw"),
        ("/dev/nvidia1", f"{tmp_path}/dev/nvidia1", "rw"),
        ("/dev/nvidia4", f"{tmp_path}/dev/nvidia4", "rw"),
    ]


def test_mps_adds_pipe_directory_and_mounts_and_features_add_envs() -> None:
    sharing = Sharing(
        kind=SharingKind.MPS,
        rename_by_default=False,
        fail_requests_greater_than_one=True,
        resources=(SharedResource(name="nvidia.com/gpu", replicas=2),),
    )
    config = replace(AgentConfig(sharing=sharing, mps_root="/run/nvidia/mps"), gds_enabled=True)
    response = respond(config, [0])
    assert response.envs["CUDA_MPS_PIPE_DIRECTORY"] == "/mps/nvidia.com/gpu/pipe"
    assert response.envs["NVIDIA_GDS"] == "enabled"
    assert [(m.container_path, m.host_path) for m in response.mounts] == [
        ("/mps/nvidia.com/gpu/pipe", "/run/nvidia/mps/nvidia.com/gpu/pipe"),
        ("/mps/shm", "/run/nvidia/mps/shm"),
    ]
