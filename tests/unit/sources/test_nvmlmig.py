"""The NVML MIG backend against a fake NVML that keeps GPU and compute instances per GPU.

The fake enforces what the driver enforces and the backend must cope with: a GPU instance is created
only with MIG on, at a valid start slot of its profile and without overlapping another (memory
slices, as ``nvidia-smi mig -lgipp`` reports them); a GPU instance with compute instances cannot be
destroyed; a compute instance a process uses cannot be destroyed ("in use"); a MIG mode change can be
left pending until a GPU reset. These tests never touch a real GPU.
"""

from __future__ import annotations

import ctypes
from types import SimpleNamespace
from typing import Any

import pytest

from kubegpu.errors import MigApplyError
from kubegpu.model.mig import profiles
from kubegpu.model.migplan import plan_transition
from kubegpu.sources.migparted import load_mig_parted, parse_mig_parted
from kubegpu.sources.nvml import NvmlSource
from kubegpu.sources.nvmlmig import GI_PROFILE_CONSTANTS, NvmlMigBackend
from tests.unit.sources.test_nvml import FakeNvml, NVMLError

DEFAULT = load_mig_parted("builtin:mig-parted-default")
H100 = {p.gi_profile_id: p for p in profiles("H100-80GB")}
CONSTANT_TO_ID = {c: i for i, c in GI_PROFILE_CONSTANTS.items()}
NOT_FOUND, INVALID, IN_USE, INSUFFICIENT, NOT_SUPPORTED = 6, 2, 19, 23, 3


class FakeMigNvml(FakeNvml):
    """Two H100 SXM5s; GPU 0 starts with MIG on and 3g.40gb@4 + 1g.10gb@0, GPU 1 with MIG off."""

    NVML_DEVICE_MIG_DISABLE = 0
    NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED = 0
    c_uint = ctypes.c_uint
    c_nvmlGpuInstance_t = ctypes.c_void_p
    c_nvmlComputeInstance_t = ctypes.c_void_p

    class c_nvmlGpuInstancePlacement_t:
        start = 0
        size = 0

    def __init__(self) -> None:
        super().__init__()
        self.mode = [1, 0]
        self.pending = [1, 0]
        self.needs_reset = False
        self.gis: list[dict[int, dict[str, Any]]] = [{}, {}]  # per GPU: gi id -> {profile, start, cis, busy}
        self.serial = 0
        self.calls: list[str] = []
        self.fail_create_at: int | None = None  # the n-th GPU-instance creation fails (insufficient)
        self.report_profile_id = True
        self._gi(0, 9, 4)
        self._gi(0, 19, 0)

    @staticmethod
    def byref(x: Any) -> Any:
        return x

    # -- the model --------------------------------------------------------------------------------

    def _gi(self, gpu: int, profile_id: int, start: int) -> int:
        p = H100[profile_id]
        if start not in p.start_slots:
            raise NVMLError(INVALID)
        taken = {
            s
            for g in self.gis[gpu].values()
            for s in range(g["start"], g["start"] + H100[g["profile"]].memory_slices)
        }
        if taken & set(range(start, start + p.memory_slices)):
            raise NVMLError(INSUFFICIENT)
        gi_id = min(set(range(1, 15)) - set(self.gis[gpu]))
        self.serial += 1
        self.gis[gpu][gi_id] = {"profile": profile_id, "start": start, "cis": {1: self.serial}, "busy": False}
        return gi_id

    def profiles_of(self, gpu: int) -> list[str]:
        return sorted(H100[g["profile"]].name for g in self.gis[gpu].values())

    # -- MIG mode ---------------------------------------------------------------------------------

    def nvmlDeviceGetMigMode(self, h: int) -> tuple[int, int]:
        return (self.mode[h], self.pending[h])

    def nvmlDeviceSetMigMode(self, h: int, mode: int) -> int:
        self.calls.append(f"mode {h} {mode}")
        if mode == 0 and self.gis[h]:
            raise NVMLError(IN_USE)
        self.pending[h] = mode
        if not self.needs_reset:
            self.mode[h] = mode
        return 0

    def nvmlDeviceGetPciInfo(self, h: int) -> SimpleNamespace:
        return SimpleNamespace(busId=self.buses[h].encode(), pciDeviceId=0x233010DE)

    # -- GPU instances ----------------------------------------------------------------------------

    def nvmlDeviceGetGpuInstanceProfileInfo(self, h: int, constant: int) -> SimpleNamespace:
        if self.mode[h] != 1 or constant not in CONSTANT_TO_ID:  # NVML: a profile the GPU lacks
            raise NVMLError(NOT_SUPPORTED)
        return SimpleNamespace(id=CONSTANT_TO_ID[constant])

    def nvmlDeviceCreateGpuInstanceWithPlacement(self, h: int, profile_id: int, placement: Any) -> int:
        if self.mode[h] != 1:
            raise NVMLError(NOT_SUPPORTED)
        if placement.size != H100[profile_id].memory_slices:
            raise NVMLError(INVALID)
        if self.fail_create_at is not None:
            self.fail_create_at -= 1
            if self.fail_create_at == 0:
                raise NVMLError(INSUFFICIENT)
        gi_id = self._gi(h, profile_id, placement.start)
        self.gis[h][gi_id]["cis"] = {}
        self.calls.append(f"create {h} {H100[profile_id].name}@{placement.start}")
        return h * 100 + gi_id

    def _owner(self, gi: int) -> tuple[int, int]:
        gpu, gi_id = divmod(int(gi), 100)
        if gi_id not in self.gis[gpu]:
            raise NVMLError(NOT_FOUND)
        return gpu, gi_id

    def nvmlDeviceGetGpuInstances(self, h: int, profile_id: int, array: Any, count: Any) -> None:
        found = [h * 100 + i for i, g in sorted(self.gis[h].items()) if g["profile"] == profile_id]
        for k, v in enumerate(found):
            array[k] = v
        count.value = len(found)

    def nvmlGpuInstanceDestroy(self, gi: int) -> None:
        gpu, gi_id = self._owner(gi)
        if self.gis[gpu][gi_id]["cis"]:
            raise NVMLError(IN_USE)
        self.calls.append(f"destroy {gpu} {H100[self.gis[gpu][gi_id]['profile']].name}")
        del self.gis[gpu][gi_id]

    def nvmlDeviceGetGpuInstanceById(self, h: int, gi_id: int) -> int:
        return self._owner(h * 100 + gi_id) and h * 100 + gi_id

    def nvmlGpuInstanceGetInfo(self, gi: int) -> SimpleNamespace:
        gpu, gi_id = self._owner(gi)
        g = self.gis[gpu][gi_id]
        if not self.report_profile_id:  # older drivers' structs: placement only
            return SimpleNamespace(placement=SimpleNamespace(start=g["start"]))
        return SimpleNamespace(placement=SimpleNamespace(start=g["start"]), profileId=g["profile"])

    # -- compute instances ------------------------------------------------------------------------

    def nvmlGpuInstanceGetComputeInstanceProfileInfo(
        self, gi: int, constant: int, eng: int
    ) -> SimpleNamespace:
        gpu, gi_id = self._owner(gi)
        slices = H100[self.gis[gpu][gi_id]["profile"]].compute_slices
        if constant > {1: 0, 2: 1, 3: 2, 4: 3, 7: 4}[slices]:
            raise NVMLError(NOT_SUPPORTED)
        return SimpleNamespace(id=constant)

    def nvmlGpuInstanceCreateComputeInstance(self, gi: int, profile_id: int) -> int:
        gpu, gi_id = self._owner(gi)
        self.serial += 1
        self.gis[gpu][gi_id]["cis"][1] = self.serial
        return int(gi) * 100 + 1

    def nvmlGpuInstanceGetComputeInstances(self, gi: int, profile_id: int, array: Any, count: Any) -> None:
        gpu, gi_id = self._owner(gi)
        g = self.gis[gpu][gi_id]
        full = {1: 0, 2: 1, 3: 2, 4: 3, 7: 4}[H100[g["profile"]].compute_slices]
        cis = list(g["cis"]) if profile_id == full else []
        for k, ci in enumerate(cis):
            array[k] = int(gi) * 100 + ci
        count.value = len(cis)

    def nvmlComputeInstanceDestroy(self, ci: int) -> None:
        gi, ci_id = divmod(int(ci), 100)
        gpu, gi_id = self._owner(gi)
        if self.gis[gpu][gi_id]["busy"]:
            raise NVMLError(IN_USE)
        del self.gis[gpu][gi_id]["cis"][ci_id]

    # -- MIG devices as NvmlSource.read_node sees them -------------------------------------------

    def _devices(self, h: int) -> list[tuple[int, int]]:
        return [(h, i) for i, g in sorted(self.gis[h].items()) if g["cis"]]

    def nvmlDeviceGetMaxMigDeviceCount(self, h: int) -> int:
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, h: int, j: int) -> tuple[int, int]:
        devices = self._devices(h)
        if j >= len(devices):
            raise NVMLError(NOT_FOUND)
        return devices[j]

    def nvmlDeviceGetAttributes(self, mig: tuple[int, int]) -> SimpleNamespace:
        p = H100[self.gis[mig[0]][mig[1]]["profile"]]
        memory_mb = int((p.memory_gib or p.memory_gb) * 1024)  # what -lgip reports: 79.25 GiB for 7g.80gb
        return SimpleNamespace(gpuInstanceSliceCount=p.compute_slices, memorySizeMB=memory_mb)

    def nvmlDeviceGetGpuInstanceId(self, mig: tuple[int, int]) -> int:
        return mig[1]

    def nvmlDeviceGetUUID(self, h: Any) -> bytes:
        if isinstance(h, tuple):
            return f"MIG-{h[0]}-{h[1]}-{self.gis[h[0]][h[1]]['cis'][1]}".encode()
        return super().nvmlDeviceGetUUID(h)


def setup() -> tuple[FakeMigNvml, NvmlSource, NvmlMigBackend]:
    fake = FakeMigNvml()
    source = NvmlSource.open(fake)
    return fake, source, NvmlMigBackend(source)


def test_the_fake_reads_back_as_the_node_the_backend_starts_from() -> None:
    _, source, _ = setup()
    node = source.read_node("n")
    assert node.gpus[0].mig_enabled and sorted(m.profile for m in node.gpus[0].mig_instances) == [
        "1g.10gb",
        "3g.40gb",
    ]
    assert not node.gpus[1].mig_enabled
    assert source.device_ids() == {0: 0x233010DE, 1: 0x233010DE}


def test_all_1g_10gb_destroys_enables_and_creates_with_explicit_placements() -> None:
    fake, source, backend = setup()
    node = source.read_node("n")
    t = plan_transition(node, DEFAULT.config("all-1g.10gb"), device_ids=source.device_ids())
    after = backend.apply(node, t)
    assert fake.profiles_of(0) == ["1g.10gb"] * 7 and fake.profiles_of(1) == ["1g.10gb"] * 7
    assert [m.start_slot for m in after.gpus[1].mig_instances] == list(range(7))
    assert fake.mode == [1, 1]
    # the old instances went first, then GPU 1's MIG mode, then instances at their slots
    assert fake.calls.index("destroy 0 3g.40gb") < fake.calls.index("create 0 1g.10gb@0")
    assert fake.calls.index("mode 1 1") < fake.calls.index("create 1 1g.10gb@0")
    old = {str(m.uuid) for m in node.gpus[0].mig_instances}
    assert old.isdisjoint(str(m.uuid) for m in after.gpus[0].mig_instances)  # new instances, new UUIDs


def test_a_balanced_layout_is_created_in_an_order_that_strands_nothing() -> None:
    fake, source, backend = setup()
    node = source.read_node("n")
    t = plan_transition(node, DEFAULT.config("all-balanced"), device_ids=source.device_ids())
    backend.apply(node, t)
    assert fake.profiles_of(1) == ["1g.10gb", "1g.10gb", "2g.20gb", "3g.40gb"]
    starts = sorted((H100[g["profile"]].name, g["start"]) for g in fake.gis[1].values())
    assert starts == [("1g.10gb", 2), ("1g.10gb", 3), ("2g.20gb", 0), ("3g.40gb", 4)]


def test_all_disabled_destroys_the_instances_and_turns_mig_off() -> None:
    fake, source, backend = setup()
    node = source.read_node("n")
    after = backend.apply(node, plan_transition(node, DEFAULT.config("all-disabled")))
    assert fake.mode == [0, 0] and fake.gis[0] == {}
    assert not after.gpus[0].mig_enabled


def test_an_instance_in_use_is_refused_naming_gpu_and_step() -> None:
    fake, source, backend = setup()
    next(iter(fake.gis[0].values()))["busy"] = True
    node = source.read_node("n")
    with pytest.raises(
        MigApplyError, match=r"GPU 0: destroying a compute instance failed: .*a process still uses"
    ):
        backend.apply(node, plan_transition(node, DEFAULT.config("all-1g.10gb")))


def test_a_mode_change_left_pending_is_refused_and_never_resets_the_gpu() -> None:
    fake, source, backend = setup()
    fake.needs_reset = True
    node = source.read_node("n")
    with pytest.raises(
        MigApplyError, match=r"GPU 1: MIG on is pending until the GPU is reset .*never resets"
    ):
        backend.apply(node, plan_transition(node, DEFAULT.config("all-1g.10gb")))
    assert fake.mode[1] == 0 and fake.pending[1] == 1


def test_a_creation_failure_leaves_the_gpu_empty_not_half_built() -> None:
    fake, source, backend = setup()
    fake.fail_create_at = 3  # the third GPU instance of the layout
    node = source.read_node("n")
    single = parse_mig_parted(
        "version: v1\nmig-configs:\n  gpu0:\n    - devices: [0]\n      mig-enabled: true\n"
        '      mig-devices: {"1g.10gb": 7}\n'
    )
    with pytest.raises(MigApplyError, match="GPU 0: creating a GPU instance"):
        backend.apply(node, plan_transition(node, single.config("gpu0")))
    assert fake.gis[0] == {} and fake.mode[0] == 1
    assert backend.current(node).gpus[0].mig_instances == ()  # what the agent then advertises


@pytest.mark.parametrize("report_profile_id", [True, False])
@pytest.mark.parametrize("config", ["all-7g.80gb", "all-1g.20gb", "all-1g.10gb.me"])
def test_profiles_read_back_under_their_catalogue_names(config: str, report_profile_id: bool) -> None:
    fake, source, backend = setup()
    fake.report_profile_id = report_profile_id
    node = source.read_node("n")
    t = plan_transition(node, DEFAULT.config(config), device_ids=source.device_ids())
    if config.endswith(".me") and not report_profile_id:
        # without the GPU-instance profile ID a 1g+me instance reads back as a plain 1g: refused, named
        with pytest.raises(MigApplyError, match="other MIG instances than were created"):
            backend.apply(node, t)
        return
    after = backend.apply(node, t)
    wanted = config.removeprefix("all-").replace(".me", "+me")
    assert {m.profile for g in after.gpus for m in g.mig_instances} == {wanted}
