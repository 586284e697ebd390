"""The NVML symbols NVIDIA's device plugin and GFD call, answered by the stand-in with nvml.h's codes.

NVIDIA's plugin dies at start without ``nvmlDeviceGetMinorNumber``; its MIG and CDI code walks MIG
devices by UUID, parent handle, compute instance and profile; GFD asks for the compute capability and
the fabric (clique) of each GPU. Each call here goes through the real pynvml, as those binaries' calls
go through go-nvml, and each error is the one nvml.h documents for the case.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pynvml
import pytest

from kubegpu.sources.spec import load_node
from tests.nvml_standin.machine import Machine

pytestmark = pytest.mark.integration


@pytest.fixture
def nv(in_process) -> Iterator[Any]:  # type: ignore[no-untyped-def]
    """NVML on ``builtin:h100-mig-mixed`` (GPU 0: MIG on, 4 instances; GPU 1: MIG-capable, MIG off),
    GPU 0 attached to a fabric."""
    machine = Machine.from_node(load_node("builtin:h100-mig-mixed"))
    machine.gpus[0].fabric = {"cluster_uuid": "00112233445566778899aabbccddeeff", "clique": 7}
    machine.gpus[1].minor = 5
    in_process(machine)
    pynvml.nvmlInit()
    yield pynvml
    pynvml.nvmlShutdown()


def _code(call: Any, *args: Any) -> int:
    with pytest.raises(pynvml.NVMLError) as err:
        call(*args)
    return int(err.value.value)


def test_minor_numbers_and_compute_capability(nv: Any) -> None:
    gpu0, gpu1 = nv.nvmlDeviceGetHandleByIndex(0), nv.nvmlDeviceGetHandleByIndex(1)
    assert nv.nvmlDeviceGetMinorNumber(gpu0) == 0  # /dev/nvidia0
    assert nv.nvmlDeviceGetMinorNumber(gpu1) == 5  # as the machine says
    assert nv.nvmlDeviceGetCudaComputeCapability(gpu0) == (9, 0)  # H100


def test_handles_by_uuid_for_gpus_and_mig_devices(nv: Any) -> None:
    spec = load_node("builtin:h100-mig-mixed")
    gpu0 = nv.nvmlDeviceGetHandleByUUID(str(spec.gpus[0].uuid).encode())
    assert nv.nvmlDeviceGetUUID(gpu0) == str(spec.gpus[0].uuid)
    mig_uuid = str(spec.gpus[0].mig_instances[0].uuid)
    mig = nv.nvmlDeviceGetHandleByUUID(mig_uuid.encode())
    assert nv.nvmlDeviceGetUUID(mig) == mig_uuid
    assert nv.nvmlDeviceIsMigDeviceHandle(mig).value == 1
    assert nv.nvmlDeviceIsMigDeviceHandle(gpu0).value == 0
    parent = nv.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(mig)
    assert nv.nvmlDeviceGetUUID(parent) == str(spec.gpus[0].uuid)
    assert _code(nv.nvmlDeviceGetHandleByUUID, b"GPU-00000000-0000-0000-0000-000000000000") == 6  # NOT_FOUND
    assert _code(nv.nvmlDeviceGetDeviceHandleFromMigDeviceHandle, gpu0) == 2  # INVALID_ARGUMENT: no MIG


def test_compute_instances_by_id_with_their_info_and_v1_profile_info(nv: Any) -> None:
    gpu0 = nv.nvmlDeviceGetHandleByIndex(0)
    mig = nv.nvmlDeviceGetMigDeviceHandleByIndex(gpu0, 0)
    gi = nv.nvmlDeviceGetGpuInstanceById(gpu0, nv.nvmlDeviceGetGpuInstanceId(mig))
    ci_id = nv.nvmlDeviceGetComputeInstanceId(mig)
    ci = nv.nvmlGpuInstanceGetComputeInstanceById(gi, ci_id)
    info = nv.nvmlComputeInstanceGetInfo_v2(ci)
    assert info.id == ci_id and info.placement.start == 0
    slices = nv.nvmlDeviceGetAttributes(mig).computeInstanceSliceCount
    assert info.placement.size == slices
    full = {1: 0, 2: 1, 3: 2, 4: 3, 7: 4}[slices]  # NVML_COMPUTE_INSTANCE_PROFILE_<n>_SLICE
    assert info.profileId == full
    v1 = nv.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, full, 0, version=1)  # the unversioned symbol
    assert (v1.id, v1.sliceCount) == (full, slices)
    assert _code(nv.nvmlGpuInstanceGetComputeInstanceById, gi, 99) == 6  # NOT_FOUND


def test_mig_device_walks_on_a_gpu_with_mig_off_see_none(nv: Any) -> None:
    gpu1 = nv.nvmlDeviceGetHandleByIndex(1)
    assert nv.nvmlDeviceGetMigMode(gpu1)[0] == 0  # MIG-capable, MIG off
    # nvml.h: the max MIG device count "Returns zero if MIG is not supported or enabled", so NVIDIA's
    # walk (go-nvlib VisitMigDevices) asks for no handle; one asked anyway is NOT_SUPPORTED ("If device
    # doesn't have MIG mode enabled").
    assert nv.nvmlDeviceGetMaxMigDeviceCount(gpu1) == 0
    assert _code(nv.nvmlDeviceGetMigDeviceHandleByIndex, gpu1, 0) == 3
    gpu0 = nv.nvmlDeviceGetHandleByIndex(0)
    assert nv.nvmlDeviceGetMaxMigDeviceCount(gpu0) == 7
    assert _code(nv.nvmlDeviceGetMigDeviceHandleByIndex, gpu0, 6) == 6  # NOT_FOUND: an empty slot


def test_fabric_info_for_a_fabric_attached_gpu_and_not_supported_otherwise(nv: Any) -> None:
    info = nv.c_nvmlGpuFabricInfo_t()
    nv.nvmlDeviceGetGpuFabricInfo(nv.nvmlDeviceGetHandleByIndex(0), nv.byref(info))
    assert bytes(info.clusterUuid).hex() == "00112233445566778899aabbccddeeff"
    assert (info.cliqueId, info.state, info.status) == (7, nv.NVML_GPU_FABRIC_STATE_COMPLETED, 0)
    v2 = nv.c_nvmlGpuFabricInfo_v2_t()
    nv.nvmlDeviceGetGpuFabricInfoV(nv.nvmlDeviceGetHandleByIndex(0), nv.byref(v2))
    assert v2.cliqueId == 7
    other = nv.c_nvmlGpuFabricInfo_t()
    assert _code(nv.nvmlDeviceGetGpuFabricInfo, nv.nvmlDeviceGetHandleByIndex(1), nv.byref(other)) == 3
