"""The agent's CDI spec: what it finds under a driver root, the devices it declares (named as Allocate
names them), MIG's nvidia-caps nodes, and the one file it owns in the CDI directory."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from kubegpu.deviceplugin import nvidia_smi
from kubegpu.deviceplugin.cdi import (
    AgentCdiSpec,
    build_agent_spec,
    find_driver_files,
    read_mig_minors,
    wants_spec,
)
from kubegpu.deviceplugin.config import (
    AgentConfig,
    DeviceIdStrategy,
    DeviceListStrategy,
    MigStrategy,
    SharedResource,
    Sharing,
    SharingKind,
)
from kubegpu.deviceplugin.inventory import Inventory, build_inventory
from kubegpu.deviceplugin.response import build_allocation
from kubegpu.model.cdi import parse_mig_minors
from kubegpu.sources.spec import load_node
from tests.cdi_shape import check_cdi_spec

SEED = load_node("builtin:seed-8gpu")
MIG = load_node("builtin:h100-mig-mixed")
VERSION = "550.54.15"
LIB = "/usr/lib/x86_64-linux-gnu"
CDI = (DeviceListStrategy.CDI_CRI,)

# A mig-minors file as the driver writes it (the start of it, and GPU 0's instances 0-3)
MIG_MINORS = """config 1
monitor 2
gpu0/gi0/access 3
gpu0/gi0/ci0/access 4
gpu0/gi0/ci1/access 5
gpu0/gi1/access 12
gpu0/gi1/ci0/access 13
gpu0/gi2/access 21
gpu0/gi2/ci0/access 22
gpu0/gi3/access 30
gpu0/gi3/ci0/access 31
gpu1/gi0/access 138
gpu1/gi0/ci0/access 139
not a line the driver writes
"""


def _file(root: Path, path: str, text: str = "x") -> Path:
    target = root / path.lstrip("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)
    return target


def _link(root: Path, path: str, to: str) -> None:
    target = root / path.lstrip("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(to, target)


@pytest.fixture
def driver_root(tmp_path: Path) -> Path:
    """A driver installed under a root that is not ``/``, with some of NVIDIA's files missing."""
    root = tmp_path / "driver"
    _file(root, f"{LIB}/libcuda.so.{VERSION}")
    _link(root, f"{LIB}/libcuda.so.1", f"libcuda.so.{VERSION}")
    _link(root, f"{LIB}/libcuda.so", "libcuda.so.1")
    _file(root, f"{LIB}/libnvidia-ml.so.{VERSION}")
    _link(root, f"{LIB}/libnvidia-ml.so.1", f"{LIB}/libnvidia-ml.so.{VERSION}")  # absolute: under the root
    _file(root, f"{LIB}/libnvidia-ptxjitcompiler.so.{VERSION}")
    _file(root, f"{LIB}/vdpau/libvdpau_nvidia.so.{VERSION}")
    _file(root, f"{LIB}/libnvidia-ml.so.535.1.1")  # another version's leftover: not this driver's
    _file(root, f"{LIB}/libz.so.1.2.13")  # not the driver's
    _link(root, f"{LIB}/libz.so.1", "libz.so.1.2.13")
    for binary in ("nvidia-smi", "nvidia-persistenced", "nvidia-cuda-mps-control"):
        _file(root, f"/usr/bin/{binary}")
    _file(root, f"/lib/firmware/nvidia/{VERSION}/gsp_ga10x.bin")
    _file(root, f"/lib/firmware/nvidia/{VERSION}/gsp_tu10x.bin")
    _file(root, "/lib/firmware/nvidia/535.1.1/gsp_ga10x.bin")
    _file(root, "/run/nvidia-persistenced/socket")
    (root / "tmp/nvidia-mps").mkdir(parents=True)
    for node in ("nvidiactl", "nvidia-uvm", *(f"nvidia{i}" for i in range(8))):
        _file(root, f"/dev/{node}")
    _file(root, "/dev/nvidia-caps/nvidia-cap13")
    return root


def _spec_names(inventory: Inventory, config: AgentConfig, root: Path) -> tuple[set[str], dict]:
    spec, warnings = build_agent_spec(inventory, config, find_driver_files(str(root), str(root)))
    assert spec is not None and warnings == []
    check_cdi_spec(spec)
    return {f"{spec['kind']}={d['name']}" for d in spec["devices"]}, spec


def _allocate_names(inventory: Inventory, config: AgentConfig) -> set[str]:
    names: set[str] = set()
    for resource in inventory.resources:
        for device in resource.devices:
            names |= set(build_allocation(resource, [device], config).cdi_devices)
    return names


def test_only_the_driver_files_that_exist_are_found_and_paths_are_the_containers(driver_root: Path) -> None:
    files = find_driver_files(str(driver_root), str(driver_root))
    assert files.version == VERSION
    assert files.control_nodes == ("/dev/nvidiactl", "/dev/nvidia-uvm")  # no uvm-tools, no modeset here
    assert set(files.libraries) == {
        f"{LIB}/libcuda.so.{VERSION}",
        f"{LIB}/libnvidia-ml.so.{VERSION}",
        f"{LIB}/libnvidia-ptxjitcompiler.so.{VERSION}",
        f"{LIB}/vdpau/libvdpau_nvidia.so.{VERSION}",
    }
    # the names the loader asks for, each the library it resolves to on the host
    assert set(files.library_links) == {
        (f"{LIB}/libcuda.so.1", f"{LIB}/libcuda.so.{VERSION}"),
        (f"{LIB}/libcuda.so", f"{LIB}/libcuda.so.{VERSION}"),
        (f"{LIB}/libnvidia-ml.so.1", f"{LIB}/libnvidia-ml.so.{VERSION}"),
    }
    assert files.binaries == (
        "/usr/bin/nvidia-smi",
        "/usr/bin/nvidia-persistenced",
        "/usr/bin/nvidia-cuda-mps-control",
    )
    assert files.firmware == (
        f"/lib/firmware/nvidia/{VERSION}/gsp_ga10x.bin",
        f"/lib/firmware/nvidia/{VERSION}/gsp_tu10x.bin",
    )
    assert files.ipc == ("/run/nvidia-persistenced/socket", "/tmp/nvidia-mps")


def test_a_root_without_a_driver_offers_nothing(tmp_path: Path) -> None:
    files = find_driver_files(str(tmp_path), str(tmp_path))
    assert (files.version, files.libraries, files.binaries, files.firmware, files.ipc) == (
        None,
        (),
        (),
        (),
        (),
    )
    assert files.control_nodes == ()


def test_common_edits_mount_host_files_under_the_root_at_the_containers_paths(driver_root: Path) -> None:
    config = AgentConfig(device_list_strategies=CDI)
    _, spec = _spec_names(build_inventory(SEED, config), config, driver_root)
    common = spec["containerEdits"]
    assert common["env"] == ["NVIDIA_VISIBLE_DEVICES=void"]  # an NVIDIA hook, if any, adds nothing
    assert common["deviceNodes"] == [
        {"path": "/dev/nvidiactl", "hostPath": f"{driver_root}/dev/nvidiactl"},
        {"path": "/dev/nvidia-uvm", "hostPath": f"{driver_root}/dev/nvidia-uvm"},
    ]
    mounts = {m["containerPath"]: (m["hostPath"], m["options"]) for m in common["mounts"]}
    ro = ["ro", "nosuid", "nodev", "bind"]
    assert mounts[f"{LIB}/libcuda.so.{VERSION}"] == (f"{driver_root}{LIB}/libcuda.so.{VERSION}", ro)
    # the soname is the library itself, so dlopen("libcuda.so.1") works without an ldconfig hook
    assert mounts[f"{LIB}/libcuda.so.1"] == (f"{driver_root}{LIB}/libcuda.so.{VERSION}", ro)
    assert mounts["/usr/bin/nvidia-smi"] == (f"{driver_root}/usr/bin/nvidia-smi", ro)
    assert mounts[f"/lib/firmware/nvidia/{VERSION}/gsp_ga10x.bin"][0].startswith(str(driver_root))
    assert mounts["/run/nvidia-persistenced/socket"][1] == ["nosuid", "nodev", "rbind", "rprivate", "noexec"]
    assert not any("libz" in p or "535.1.1" in p for p in mounts)
    assert not any("hooks" in edits for edits in (common, *(d["containerEdits"] for d in spec["devices"])))


@pytest.mark.parametrize("strategy", list(DeviceIdStrategy))
def test_the_spec_declares_exactly_the_names_allocate_gives(
    driver_root: Path, strategy: DeviceIdStrategy
) -> None:
    config = AgentConfig(device_list_strategies=CDI, device_id_strategy=strategy)
    inventory = build_inventory(SEED, config)
    declared, spec = _spec_names(inventory, config, driver_root)
    assert declared == _allocate_names(inventory, config)
    assert len(declared) == 8
    by_name = {d["name"]: d["containerEdits"]["deviceNodes"] for d in spec["devices"]}
    gpu3 = "3" if strategy is DeviceIdStrategy.INDEX else SEED.gpus[3].uuid
    assert by_name[gpu3] == [{"path": "/dev/nvidia3", "hostPath": f"{driver_root}/dev/nvidia3"}]


@pytest.mark.parametrize("strategy", list(DeviceIdStrategy))
def test_mig_devices_carry_their_gpu_and_compute_instance_caps_nodes(
    driver_root: Path, strategy: DeviceIdStrategy
) -> None:
    _file(driver_root, "/proc/driver/nvidia-caps/mig-minors", MIG_MINORS)
    minors = read_mig_minors(driver_root / "proc")
    for n in (3, 4, 12, 13, 21, 22, 30, 31):
        _file(driver_root, f"/dev/nvidia-caps/nvidia-cap{n}")
    config = AgentConfig(
        device_list_strategies=CDI, device_id_strategy=strategy, mig_strategy=MigStrategy.MIXED
    )
    inventory = build_inventory(MIG, config, mig_minors=minors)
    declared, spec = _spec_names(inventory, config, driver_root)
    assert declared == _allocate_names(inventory, config)
    nodes = {d["name"]: [n["path"] for n in d["containerEdits"]["deviceNodes"]] for d in spec["devices"]}
    second = MIG.gpus[0].mig_instances[1]  # GPU instance 1
    name = "0:1" if strategy is DeviceIdStrategy.INDEX else second.uuid
    assert nodes[name] == ["/dev/nvidia0", "/dev/nvidia-caps/nvidia-cap12", "/dev/nvidia-caps/nvidia-cap13"]
    whole = "1" if strategy is DeviceIdStrategy.INDEX else MIG.gpus[1].uuid
    assert nodes[whole] == ["/dev/nvidia1"]


def test_pass_device_specs_gives_a_mig_device_its_caps_nodes(driver_root: Path) -> None:
    minors = parse_mig_minors(MIG_MINORS)
    config = AgentConfig(
        mig_strategy=MigStrategy.MIXED, pass_device_specs=True, nvidia_dev_root=str(driver_root)
    )
    inventory = build_inventory(MIG, config, mig_minors=minors)
    resource = inventory.resource("nvidia.com/mig-3g.40gb")
    assert resource is not None
    response = build_allocation(resource, list(resource.devices), config)
    assert [(d.container_path, d.host_path) for d in response.devices] == [
        ("/dev/nvidiactl", f"{driver_root}/dev/nvidiactl"),
        ("/dev/nvidia-uvm", f"{driver_root}/dev/nvidia-uvm"),
        ("/dev/nvidia0", f"{driver_root}/dev/nvidia0"),
        ("/dev/nvidia-caps/nvidia-cap3", f"{driver_root}/dev/nvidia-caps/nvidia-cap3"),
        ("/dev/nvidia-caps/nvidia-cap4", f"{driver_root}/dev/nvidia-caps/nvidia-cap4"),
    ]


def test_mig_minors_lines_other_than_instance_access_are_skipped() -> None:
    minors = parse_mig_minors(MIG_MINORS)
    assert minors.caps_paths(0, 1) == ("/dev/nvidia-caps/nvidia-cap12", "/dev/nvidia-caps/nvidia-cap13")
    assert minors.caps_paths(1, 0, ci=0) == (
        "/dev/nvidia-caps/nvidia-cap138",
        "/dev/nvidia-caps/nvidia-cap139",
    )
    assert minors.caps_paths(0, 0, ci=1) == ("/dev/nvidia-caps/nvidia-cap3", "/dev/nvidia-caps/nvidia-cap5")
    assert minors.caps_paths(5, 0) == ()
    assert read_mig_minors(Path("/nonexistent-proc")).caps_paths(0, 0) == ()


def test_replicas_are_declared_once_as_their_gpu(driver_root: Path) -> None:
    sharing = Sharing(
        kind=SharingKind.TIME_SLICING,
        rename_by_default=False,
        fail_requests_greater_than_one=False,
        resources=(SharedResource(name="nvidia.com/gpu", replicas=4),),
    )
    config = AgentConfig(device_list_strategies=CDI, sharing=sharing)
    inventory = build_inventory(SEED, config)
    declared, _ = _spec_names(inventory, config, driver_root)
    assert (
        declared == {f"{config.cdi_kind}={g.uuid}" for g in SEED.gpus} == _allocate_names(inventory, config)
    )


def test_a_real_gpu_whose_device_node_is_missing_is_left_out_with_a_warning(driver_root: Path) -> None:
    (driver_root / "dev/nvidia5").unlink()
    config = AgentConfig(device_list_strategies=CDI)
    spec, warnings = build_agent_spec(
        build_inventory(SEED, config), config, find_driver_files(str(driver_root), str(driver_root))
    )
    assert spec is not None
    assert SEED.gpus[5].uuid not in {d["name"] for d in spec["devices"]}
    assert len(spec["devices"]) == 7
    assert len(warnings) == 1 and "/dev/nvidia5" in warnings[0]


def test_simulated_devices_name_their_gpu_for_the_stand_in_nvidia_smi(tmp_path: Path) -> None:
    config = AgentConfig(device_list_strategies=CDI)
    script = nvidia_smi.install(SEED, tmp_path / "sim")
    mounts = [(str(script), p) for p in nvidia_smi.CONTAINER_PATHS]
    spec, warnings = build_agent_spec(
        build_inventory(SEED, config), config, find_driver_files(str(tmp_path), str(tmp_path)),
        simulated=True, mounts=mounts,
    )  # fmt: skip
    assert spec is not None and warnings == []
    check_cdi_spec(spec)
    assert spec["containerEdits"] == {
        "mounts": [
            {"hostPath": str(script), "containerPath": p, "options": ["ro", "nosuid", "nodev", "bind"]}
            for p in nvidia_smi.CONTAINER_PATHS
        ]
    }
    # what a container given GPUs 2 and 6 by CDI alone sees: the stand-in lists exactly those
    env = {"PATH": os.environ["PATH"]}
    for device in spec["devices"]:
        if device["name"] in (SEED.gpus[2].uuid, SEED.gpus[6].uuid):
            env.update(e.split("=", 1) for e in device["containerEdits"]["env"])
    out = subprocess.run(
        ["/bin/sh", str(script), "-L"], check=False, env=env, capture_output=True, text=True, timeout=10
    )
    assert [line.split("UUID: ")[1].rstrip(")") for line in out.stdout.splitlines()] == [
        SEED.gpus[2].uuid,
        SEED.gpus[6].uuid,
    ]


def test_no_spec_without_a_cdi_strategy_or_a_directory() -> None:
    assert not wants_spec(AgentConfig())
    assert not wants_spec(AgentConfig(device_list_strategies=CDI, cdi_spec_dir=""))
    assert wants_spec(AgentConfig(device_list_strategies=(DeviceListStrategy.CDI_ANNOTATIONS,)))


def test_the_spec_file_is_the_agents_own_and_follows_the_config(tmp_path: Path) -> None:
    cdi = tmp_path / "cdi"
    cdi.mkdir()
    other = cdi / "nvidia.com-gpu.json"
    other.write_text("{}")  # another tool's spec: never touched
    config = AgentConfig(device_list_strategies=CDI, cdi_spec_dir=str(cdi))
    spec, _ = build_agent_spec(
        build_inventory(SEED, config), config, find_driver_files(str(tmp_path)), simulated=True
    )
    keeper = AgentCdiSpec()
    path = keeper.apply(config, spec)
    assert path == cdi / "k8s.device-plugin.kubegpu.io-gpu_kubegpu-agent.json"
    assert json.loads(path.read_text()) == spec
    assert sorted(p.name for p in cdi.iterdir()) == sorted([path.name, other.name])  # no temporary left
    # a new kind moves the file; turning the CDI strategies off removes it; so does a stop
    renamed = AgentConfig(device_list_strategies=CDI, cdi_spec_dir=str(cdi), cdi_kind="example.com/gpu")
    moved = keeper.apply(renamed, {**spec, "kind": "example.com/gpu"})
    assert moved == cdi / "example.com-gpu_kubegpu-agent.json" and not path.exists()
    assert keeper.apply(AgentConfig(cdi_spec_dir=str(cdi)), spec) is None and not moved.exists()
    keeper.apply(config, spec)
    keeper.remove()
    assert [p.name for p in cdi.iterdir()] == [other.name] and other.read_text() == "{}"


def test_in_a_pod_files_are_searched_where_the_root_is_mounted_and_named_by_host_paths(
    driver_root: Path,
) -> None:
    # the host's /run/nvidia/driver seen at driver_root inside the agent's container
    files = find_driver_files("/run/nvidia/driver", "/run/nvidia/driver", seen_at=str(driver_root))
    assert files.version == VERSION and files.control_nodes == ("/dev/nvidiactl", "/dev/nvidia-uvm")
    config = AgentConfig(device_list_strategies=CDI)
    spec, warnings = build_agent_spec(build_inventory(SEED, config), config, files)
    assert spec is not None and warnings == []
    mounts = {m["containerPath"]: m["hostPath"] for m in spec["containerEdits"]["mounts"]}
    assert mounts[f"{LIB}/libcuda.so.1"] == f"/run/nvidia/driver{LIB}/libcuda.so.{VERSION}"
    assert spec["devices"][0]["containerEdits"]["deviceNodes"][0]["hostPath"].startswith(
        "/run/nvidia/driver/dev/"
    )
