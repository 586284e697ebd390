"""The simulated nvidia-smi: run the generated script with /bin/sh (and busybox) and read its output."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from kubegpu.deviceplugin import nvidia_smi
from kubegpu.deviceplugin.config import AgentConfig
from kubegpu.deviceplugin.inventory import build_inventory
from kubegpu.deviceplugin.response import MountSpec, build_allocation
from kubegpu.sources.spec import load_node

NODE = load_node("builtin:seed-8gpu")
UUIDS = [str(g.uuid) for g in NODE.gpus]
# The image's shell is busybox (Debian's busybox-static, deploy/image/build.py); `make test` installs
# it on the host before anything runs (`make rig-packages`). Always collected: without busybox the
# busybox cases say so (skipped here, failed in CI), never vanish from the count.
SHELLS = ("/bin/sh", "busybox")


def _shell(name: str) -> list[str]:
    """The argv prefix that runs a script with ``name`` ("/bin/sh" or "busybox")."""
    if name != "busybox":
        return [name]
    found = shutil.which("busybox")
    if found is None:
        reason = "NOT RUN: busybox is not installed (Debian's busybox-static: `make rig-packages`)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)
    return [found, "sh"]


@pytest.fixture(params=SHELLS)
def smi(request, tmp_path: Path):
    script = nvidia_smi.install(NODE, tmp_path / "kubegpu-sim")
    shell = _shell(request.param)

    def run(visible: str | None, *args: str) -> subprocess.CompletedProcess[str]:
        env = {"PATH": os.environ["PATH"]}
        if visible is not None:
            env["NVIDIA_VISIBLE_DEVICES"] = visible
        return subprocess.run(
            [*shell, str(script), *args], check=False, capture_output=True, text=True, env=env, timeout=10
        )

    return run


def test_list_shows_exactly_the_visible_gpus_numbered_from_zero(smi) -> None:
    res = smi(f"{UUIDS[5]},{UUIDS[2]}", "-L")
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines() == [
        f"GPU 0: NVIDIA H100 80GB HBM3 (UUID: {UUIDS[2]})",
        f"GPU 1: NVIDIA H100 80GB HBM3 (UUID: {UUIDS[5]})",
    ]


def test_indices_and_all_select_gpus_too(smi) -> None:
    assert smi("3", "-L").stdout.splitlines() == [f"GPU 0: NVIDIA H100 80GB HBM3 (UUID: {UUIDS[3]})"]
    assert len(smi("all", "--list-gpus").stdout.splitlines()) == 8


@pytest.mark.parametrize("visible", [None, "", "void", "none", "GPU-not-on-this-node"])
def test_no_visible_gpu_says_no_devices_and_exits_6_like_nvidia_smi(smi, visible: str | None) -> None:
    res = smi(visible, "-L")
    assert res.returncode == 6
    assert res.stdout.strip() == "No devices were found"


def test_volume_mounts_directory_names_the_devices(smi, tmp_path: Path) -> None:
    devices = tmp_path / "nvidia-container-devices"
    devices.mkdir()
    (devices / UUIDS[7]).touch()
    assert smi(str(devices), "-L").stdout.splitlines() == [f"GPU 0: NVIDIA H100 80GB HBM3 (UUID: {UUIDS[7]})"]


def test_query_gpu_csv_reports_the_specs_memory(smi) -> None:
    res = smi(UUIDS[1], "--query-gpu=index,name,uuid,memory.total", "--format=csv,noheader,nounits")
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines() == [f"0, NVIDIA H100 80GB HBM3, {UUIDS[1]}, 81559"]  # NVML's total
    res = smi(UUIDS[1], "--query-gpu=uuid,memory.total", "--format=csv")
    assert res.stdout.splitlines() == ["uuid, memory.total", f"{UUIDS[1]}, 81559 MiB"]


def test_plain_table_and_unknown_arguments(smi) -> None:
    table = smi(UUIDS[0]).stdout
    assert UUIDS[0] in table and "81559 MiB" in table and UUIDS[1] not in table
    res = smi(UUIDS[0], "--bogus")
    assert res.returncode == 2 and "unsupported" in res.stderr


def test_install_is_idempotent_world_executable_and_atomic(tmp_path: Path) -> None:
    path = nvidia_smi.install(NODE, tmp_path / "d")
    assert path.stat().st_mode & 0o777 == 0o755
    inode = path.stat().st_ino
    assert nvidia_smi.install(NODE, tmp_path / "d") == path
    assert path.stat().st_ino == inode  # unchanged content: not rewritten
    assert [p.name for p in (tmp_path / "d").iterdir()] == ["nvidia-smi"]


def test_allocation_carries_extra_mounts_for_every_strategy() -> None:
    config = AgentConfig()
    resource = build_inventory(NODE, config).resources[0]
    mount = MountSpec(container_path="/usr/bin/nvidia-smi", host_path="/x/nvidia-smi", read_only=True)
    answer = build_allocation(resource, resource.devices[:1], config, extra_mounts=(mount,))
    assert answer.mounts == (mount,)
    assert answer.envs["NVIDIA_VISIBLE_DEVICES"] == UUIDS[0]
    assert build_allocation(resource, resource.devices[:1], config).mounts == ()


@pytest.mark.parametrize("shell", SHELLS)
def test_a_visible_mig_instance_is_listed_under_its_parent_gpu(shell: str, tmp_path: Path) -> None:
    node = load_node("builtin:h100-mig-mixed")
    script = nvidia_smi.install(node, tmp_path)
    gpu, mig = node.gpus[0], node.gpus[0].mig_instances[1]
    argv = [*_shell(shell), str(script), "-L"]
    env = {"PATH": os.environ["PATH"], "NVIDIA_VISIBLE_DEVICES": str(mig.uuid)}
    out = subprocess.run(argv, capture_output=True, text=True, env=env, check=True).stdout
    assert out.splitlines() == [
        f"GPU 0: NVIDIA H100 80GB HBM3 (UUID: {gpu.uuid})",
        f"  MIG {mig.profile} Device {mig.gi_index}: (UUID: {mig.uuid})",
    ]
