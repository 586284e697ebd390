"""The MIG manager's NVML backend on the C stand-in through the real pynvml, in this process.

The stand-in enforces what the driver enforces: GPU instances only with MIG on, at a valid start slot
of their profile and size, without overlap and within the profile's count; a GPU instance with a
compute instance, or one a process uses, cannot be destroyed ("In use by another client"); a MIG mode
change on a board that needs a reset stays pending. The backend goes through pynvml's versioned
profile-info calls (``nvmlDeviceGetGpuInstanceProfileInfoV`` with its version word), its ctypes
placement struct and its arrays of instance handles.
"""

from __future__ import annotations

import pytest

from kubegpu.errors import MigApplyError, SourceError
from kubegpu.model.migplan import plan_transition
from kubegpu.sources.migparted import load_mig_parted
from kubegpu.sources.nvml import NvmlSource
from kubegpu.sources.nvmlmig import NvmlMigBackend
from kubegpu.sources.spec import load_node
from tests.nvml_standin.machine import Machine

pytestmark = pytest.mark.integration

DEFAULT = load_mig_parted("builtin:mig-parted-default")


def _layout(node, gpu: int) -> list[tuple[str, int]]:  # type: ignore[no-untyped-def]
    return sorted((m.profile, m.start_slot) for m in node.gpus[gpu].mig_instances)


def test_the_mixed_node_reads_back_with_its_profiles_slots_and_uuids(in_process) -> None:
    in_process("builtin:h100-mig-mixed")
    source = NvmlSource.open()
    try:
        node = source.read_node("n")
        spec = load_node("builtin:h100-mig-mixed")
        assert node.gpus[0].mig_instances and sorted(node.gpus[0].mig_instances, key=str) == sorted(
            spec.gpus[0].mig_instances, key=str
        )
        assert source.device_ids() == {0: 0x233010DE, 1: 0x233010DE}
    finally:
        source.close()


@pytest.mark.parametrize("config", ["all-1g.10gb", "all-balanced", "all-3g.40gb", "all-disabled"])
def test_a_named_layout_is_created_through_nvml_and_reads_back(in_process, config: str) -> None:
    in_process("builtin:h100-mig-mixed")
    source = NvmlSource.open()
    try:
        node = source.read_node("n")
        transition = plan_transition(node, DEFAULT.config(config), device_ids=source.device_ids())
        after = NvmlMigBackend(source).apply(node, transition)
        targets = {t.index: t for t in transition.targets}
        for gpu in (0, 1):
            target = targets.get(gpu)
            if target is None:  # already as asked: left alone, instances and UUIDs kept
                assert after.gpus[gpu] == node.gpus[gpu]
                continue
            assert after.gpus[gpu].mig_enabled == target.mig_enabled
            want = (
                []
                if target.placement is None
                else sorted((p.profile.name, p.start_slot) for p in target.placement.instances)
            )
            assert _layout(after, gpu) == want
        assert source.read_node("n") == after  # what NVML reports now, not what the backend remembers
    finally:
        source.close()


def test_an_instance_a_process_uses_is_refused_naming_the_gpu_and_the_step(in_process) -> None:
    machine = Machine.from_node(load_node("builtin:h100-mig-mixed"))
    machine.gpus[0].mig_instances[0].busy = True
    in_process(machine)
    source = NvmlSource.open()
    try:
        node = source.read_node("n")
        with pytest.raises(
            MigApplyError, match=r"GPU 0: destroying a compute instance failed: .*a process still"
        ):
            NvmlMigBackend(source).apply(node, plan_transition(node, DEFAULT.config("all-1g.10gb")))
    finally:
        source.close()


def test_a_mode_change_that_needs_a_reset_is_refused_and_the_gpu_is_not_reset(in_process) -> None:
    machine = Machine.from_node(load_node("builtin:h100-mig-mixed"))
    machine.gpus[1].reset_needed = True
    in_process(machine)
    source = NvmlSource.open()
    try:
        node = source.read_node("n")
        with pytest.raises(MigApplyError, match=r"GPU 1: MIG on is pending until the GPU is reset"):
            NvmlMigBackend(source).apply(node, plan_transition(node, DEFAULT.config("all-1g.10gb")))
        assert not source.read_node("n").gpus[1].mig_enabled
    finally:
        source.close()


def test_a_failed_creation_leaves_the_gpu_empty_not_half_built(in_process) -> None:
    in_process("builtin:h100-mig-mixed", faults=[("nvmlGpuInstanceCreateComputeInstance", 23, 1)])
    source = NvmlSource.open()
    try:
        node = source.read_node("n")
        backend = NvmlMigBackend(source)
        with pytest.raises(MigApplyError, match=r"GPU 1: creating the compute instance"):
            backend.apply(node, plan_transition(node, DEFAULT.config("all-1g.10gb")))
        assert backend.current(node).gpus[1].mig_instances == ()
    finally:
        source.close()


def test_nvml_errors_in_process_are_source_errors_with_the_explanation(in_process) -> None:
    in_process("builtin:seed-8gpu", faults=[("nvmlDeviceGetCount_v2", 4, -1)])
    source = NvmlSource.open()
    try:
        with pytest.raises(SourceError, match="no permission to talk to the NVIDIA driver"):
            source.read_node("n")
    finally:
        source.close()


def test_readings_come_through_pynvml_in_dcgm_units(in_process) -> None:
    machine = in_process("builtin:h100-mig-mixed")
    source = NvmlSource.open()
    try:
        source.read_node("n")
        whole = source.read_sample(1)
        s = machine.gpus[1].sample
        assert (whole.gpu_util, whole.mem_copy_util, whole.temperature_c) == (
            s.gpu_util,
            s.mem_util,
            s.temperature_c,
        )
        assert whole.power_w == pytest.approx(s.power_mw / 1000)
        assert (
            whole.ecc_sbe_volatile,
            whole.ecc_dbe_volatile,
            whole.ecc_sbe_aggregate,
            whole.ecc_dbe_aggregate,
        ) == (tuple(s.ecc))
        assert whole.problems == ()
        mig = source.read_sample(0)  # MIG on: no utilisation (NVML: not supported), memory per instance
        assert mig.gpu_util is None and mig.problems == ()
        assert len(mig.mig_memory) == 4
    finally:
        source.close()


def test_placements_nvml_withholds_from_an_unprivileged_caller_are_named_not_invented(
    in_process, caplog: pytest.LogCaptureFixture
) -> None:
    # NVML answers GPU-instance queries (nvmlDeviceGetGpuInstanceById) to privileged callers only
    in_process("builtin:h100-mig-mixed", faults=[("nvmlDeviceGetGpuInstanceById", 4, -1)])
    source = NvmlSource.open()
    try:
        with caplog.at_level("WARNING", logger="kubegpu.sources.nvml"):
            node = source.read_node("n")
        assert len(node.gpus[0].mig_instances) == 4  # the MIG devices are still served, by UUID
        [record] = [r for r in caplog.records if "placements unreadable" in r.getMessage()]
        assert "privileged" in record.getMessage()
        assert any("no permission" in line for line in record.instances)  # type: ignore[attr-defined]
    finally:
        source.close()
