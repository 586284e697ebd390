"""Host checks: one fixture root per failure the seeds describe, and a healthy root that passes."""

from __future__ import annotations

import time
from collections.abc import Callable

from kubegpu.doctor import Status, node_report
from kubegpu.doctor.chain import Report
from kubegpu.errors import SourceError
from kubegpu.model.node import Gpu, GpuUuid, Node
from kubegpu.sources.nvml import HostReading, failure
from tests.unit.doctor.fakehost import DRIVER, GPUS, FakeHost


def run(host: FakeHost, **kwargs: float) -> Report:
    return node_report(host.root, **kwargs)


def nvml_of(count: int, *, driver: str = DRIVER) -> Callable[[], HostReading]:
    """What the agent's NVML would read: ``count`` H100s at the fixture's bus IDs."""
    gpus = tuple(
        Gpu(index=i, uuid=GpuUuid(f"GPU-{i:08d}-0000-0000-0000-000000000000"), model="H100-80GB",
            memory_mib=81920, numa_node=None, pci_bus_id=f"0000{GPUS[i % len(GPUS)].upper()}")
        for i in range(count)
    )  # fmt: skip
    return lambda: HostReading(node=Node(name="n", gpus=gpus, topology=None), driver=driver, cuda="12.4")


def test_healthy_root_passes_every_node_check(host: FakeHost) -> None:
    report = node_report(host.root, nvml=nvml_of(len(GPUS)))
    statuses = {f.id: f.status for f in report.findings}
    assert report.exit_code == 0
    assert statuses.pop("runtime.docker") is Status.SKIP  # Docker is not used on this host
    assert set(statuses.values()) == {Status.OK}, [f for f in report.findings if f.status is not Status.OK]


def test_under_a_fixture_root_the_live_nvml_is_not_read(host: FakeHost) -> None:
    finding = run(host).by_id("host.nvml-library")
    assert finding.status is Status.SKIP and "live host only" in finding.summary


def test_the_agents_nvml_failing_is_named_with_its_fix_even_when_nvidia_smi_works(host: FakeHost) -> None:
    def broken() -> HostReading:
        raise SourceError("NVML is not available: " + failure(12).advice)  # type: ignore[union-attr]

    finding = node_report(host.root, nvml=broken).by_id("host.nvml-library")
    assert finding.status is Status.FAIL
    assert "does not start" in finding.summary and "libnvidia-ml.so.1" in finding.summary
    assert "ls /usr/lib/*/libnvidia-ml.so.1" in finding.fix
    assert node_report(host.root, nvml=broken).by_id("host.nvml").status is Status.OK  # nvidia-smi works


def test_the_agents_nvml_seeing_fewer_gpus_than_the_bus_warns(host: FakeHost) -> None:
    finding = node_report(host.root, nvml=nvml_of(1)).by_id("host.nvml-library")
    assert finding.status is Status.WARN and "sees 1 GPU(s), the PCI bus 2" in finding.summary


def test_no_nvidia_gpu_on_pci_fails_and_blocks_every_other_node_check(host: FakeHost) -> None:
    for bus in GPUS:
        host.write(f"sys/bus/pci/devices/{bus}/vendor", "0x1002\n")  # AMD, and the NVSwitch stays
    report = run(host)
    first = report.first_broken
    assert first is not None and first.id == "host.gpu-present"
    assert "lspci" in first.fix
    rest = [f for f in report.findings if f.id != "host.gpu-present"]
    assert all(f.status is Status.SKIP and f.summary == "blocked by host.gpu-present" for f in rest)
    assert report.exit_code == 1


def test_loaded_nouveau_fails_with_the_blacklist_fix(host: FakeHost) -> None:
    host.modules("nouveau", "drm")
    finding = run(host).by_id("host.nouveau")
    assert finding.status is Status.FAIL
    assert "nouveau" in finding.summary
    assert "blacklist nouveau" in finding.fix and "update-initramfs" in finding.fix


def test_nouveau_not_blacklisted_warns(host: FakeHost) -> None:
    host.remove("etc/modprobe.d/blacklist-nouveau.conf")
    finding = run(host).by_id("host.nouveau")
    assert finding.status is Status.WARN
    assert "blacklist nouveau" in finding.fix


def test_nouveau_blacklisted_on_the_kernel_command_line_counts(host: FakeHost) -> None:
    host.remove("etc/modprobe.d/blacklist-nouveau.conf")
    host.write("proc/cmdline", "root=/dev/sda1 modprobe.blacklist=nouveau\n")
    assert run(host).by_id("host.nouveau").status is Status.OK


def test_module_built_for_another_kernel_is_named_with_both_kernels(host: FakeHost) -> None:
    host.modules("ext4")
    host.write("proc/sys/kernel/osrelease", "5.15.0-112-generic\n")
    host.write("lib/modules/5.15.0-112-generic/modules.dep", "kernel/fs/ext4/ext4.ko:\n")
    report = run(host)
    finding = report.by_id("host.driver-loaded")
    assert finding.status is Status.FAIL
    assert "5.15.0-105-generic" in finding.summary and "5.15.0-112-generic" in finding.summary
    assert "lsmod | grep nvidia" in finding.fix and "modprobe nvidia" in finding.fix
    assert "linux-headers" in finding.fix
    assert report.by_id("host.driver-version").summary == "blocked by host.driver-loaded"
    assert report.by_id("host.device-nodes").summary == "blocked by host.driver-loaded"


def test_module_installed_but_not_loaded_says_modprobe(host: FakeHost) -> None:
    host.modules("ext4")
    finding = run(host).by_id("host.driver-loaded")
    assert finding.status is Status.FAIL
    assert "not loaded" in finding.summary
    assert finding.fix.startswith("modprobe nvidia")


def test_no_nvidia_module_at_all_says_reinstall(host: FakeHost) -> None:
    host.modules("ext4")
    host.write("lib/modules/5.15.0-105-generic/modules.dep", "kernel/fs/ext4/ext4.ko:\n")
    finding = run(host).by_id("host.driver-loaded")
    assert finding.status is Status.FAIL
    assert "no nvidia.ko" in finding.summary
    assert "nvidia-uninstall" in finding.fix


def test_upgraded_user_space_without_module_reload_is_a_version_mismatch(host: FakeHost) -> None:
    host.write("sys/module/nvidia/version", "550.54.15\n")
    host.command(
        "nvidia-smi",
        stdout=f"Failed to initialize NVML: Driver/library version mismatch\nNVML library version: {DRIVER}",
        exit_code=18,
    )
    report = run(host)
    version = report.by_id("host.driver-version")
    assert version.status is Status.FAIL
    assert "550.54.15" in version.summary and DRIVER in version.summary
    assert "reboot" in version.fix
    nvml = report.by_id("host.nvml")
    assert nvml.status is Status.FAIL and "version mismatch" in nvml.summary


def test_missing_user_space_driver_fails_driver_version_and_nvml(host: FakeHost) -> None:
    host.remove(f"usr/lib/x86_64-linux-gnu/libnvidia-ml.so.{DRIVER}")
    host.remove("usr/bin/nvidia-smi")
    report = run(host)
    assert report.by_id("host.driver-version").status is Status.FAIL
    assert "libnvidia-ml.so" in report.by_id("host.driver-version").summary
    nvml = report.by_id("host.nvml")
    assert nvml.status is Status.FAIL and "not installed" in nvml.summary
    assert report.by_id("host.gpu-count").summary == "blocked by host.nvml"


def test_leftover_user_space_library_of_another_version_is_a_mismatch(host: FakeHost) -> None:
    host.write("usr/lib/x86_64-linux-gnu/libnvidia-ml.so.535.183.01")
    host.write("sys/module/nvidia/version", DRIVER + "\n")
    finding = run(host).by_id("host.driver-version")
    # the stale library is a different version from the module: a mismatch, not a mere leftover
    assert finding.status is Status.FAIL


def test_missing_uvm_device_node_fails(host: FakeHost) -> None:
    host.remove("dev/nvidia-uvm")
    finding = run(host).by_id("host.device-nodes")
    assert finding.status is Status.FAIL
    assert "/dev/nvidia-uvm" in finding.summary
    assert "nvidia-modprobe" in finding.fix


def test_fewer_device_nodes_than_gpus_warns(host: FakeHost) -> None:
    host.remove("dev/nvidia1")
    assert run(host).by_id("host.device-nodes").status is Status.WARN


def test_nvidia_smi_cannot_communicate_maps_to_module_kernel_mismatch(host: FakeHost) -> None:
    host.command(
        "nvidia-smi",
        stdout="NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that "
        "the latest NVIDIA driver is installed and running.",
        exit_code=9,
    )
    report = run(host)
    finding = report.by_id("host.nvml")
    assert finding.status is Status.FAIL
    assert "kernel" in finding.summary
    assert all(step in finding.fix for step in ("lsmod | grep nvidia", "modprobe nvidia", "nvidia-uninstall"))
    assert any("couldn't communicate" in e for e in finding.evidence)
    assert report.by_id("host.persistence-mode").summary == "blocked by host.nvml"
    assert report.by_id("host.gpu-count").summary == "blocked by host.nvml"


def test_hung_nvidia_smi_is_cut_off_by_the_timeout(host: FakeHost) -> None:
    host.command("nvidia-smi", body="sleep 30\n")
    start = time.monotonic()
    finding = run(host, command_timeout_s=0.5).by_id("host.nvml")
    assert time.monotonic() - start < 10
    assert finding.status is Status.FAIL
    assert "timed out" in finding.summary


def test_nvml_finding_no_devices_fails(host: FakeHost) -> None:
    host.command("nvidia-smi", stdout="No devices were found", exit_code=6)
    finding = run(host).by_id("host.nvml")
    assert finding.status is Status.FAIL and "no GPU" in finding.summary


def test_nvml_finding_says_what_the_nvml_funnel_says(host: FakeHost) -> None:
    host.command("nvidia-smi", stdout="Failed to initialize NVML: Insufficient Permissions", exit_code=4)
    finding = run(host).by_id("host.nvml")
    known = failure(4)
    assert known is not None
    assert finding.status is Status.FAIL and known.meaning in finding.summary
    assert finding.fix.splitlines() == list(known.fix)


def test_persistence_mode_off_warns_with_the_seed_command(host: FakeHost) -> None:
    host.nvidia_smi([("0", GPUS[0], "Disabled"), ("1", GPUS[1], "Enabled")])
    finding = run(host).by_id("host.persistence-mode")
    assert finding.status is Status.WARN
    assert "nvidia-smi -pm 1" in finding.fix
    assert any(GPUS[0] in e for e in finding.evidence)


def test_gpu_fallen_off_the_bus_is_a_disappeared_gpu_and_a_fatal_xid(host: FakeHost) -> None:
    host.nvidia_smi([("0", GPUS[0], "Enabled")])
    host.kern_log(
        "Nov 30 06:10:00 gpu-node-1 kernel: [ 600.1] "
        "NVRM: Xid (PCI:0000:86:00): 79, pid=0, GPU has fallen off the bus."
    )
    report = run(host)
    count = report.by_id("host.gpu-count")
    assert count.status is Status.FAIL
    assert GPUS[1] in count.summary
    assert any("Xid (PCI:0000:86:00): 79" in e for e in count.evidence)
    xid = report.by_id("host.xid")
    assert xid.status is Status.FAIL
    assert "79" in xid.summary and "fallen off the bus" in xid.summary
    assert "drain" in xid.fix and "NoSchedule" in xid.fix


def test_double_bit_ecc_xid_fails_with_reset_advice(host: FakeHost) -> None:
    host.kern_log("kernel: NVRM: Xid (PCI:0000:3b:00): 48, pid=1234, DBE (double bit error) ECC error")
    finding = run(host).by_id("host.xid")
    assert finding.status is Status.FAIL
    assert "48" in finding.summary
    assert "nvidia-smi -r" in finding.fix


def test_application_xid_only_warns(host: FakeHost) -> None:
    host.kern_log("kernel: NVRM: Xid (PCI:0000:3b:00): 13, pid=4242, Graphics Exception")
    finding = run(host).by_id("host.xid")
    assert finding.status is Status.WARN
    assert "13" in finding.summary and "not of the GPU" in finding.summary


def test_missing_kernel_log_skips_the_xid_check_with_the_reason(host: FakeHost) -> None:
    host.remove("var/log/kern.log")
    finding = run(host).by_id("host.xid")
    assert finding.status is Status.SKIP
    assert "kernel log" in finding.summary


def test_module_version_falls_back_to_proc_driver_version(host: FakeHost) -> None:
    host.remove("sys/module/nvidia/version")
    finding = run(host).by_id("host.driver-version")
    assert finding.status is Status.OK
    assert f"kernel module: {DRIVER}" in finding.evidence


def test_xids_from_before_the_last_boot_are_history(host: FakeHost) -> None:
    old = "Nov 29 23:00:00 gpu-node-1 kernel: [ 9.0] NVRM: Xid (PCI:0000:3b:00): 79, pid=0, fell off the bus."
    text = (host.root / "var/log/kern.log").read_text()
    host.write("var/log/kern.log", old + "\n" + text)
    finding = run(host).by_id("host.xid")
    assert finding.status is Status.OK
    assert "since the last boot" in finding.summary
    host.write("var/log/kern.log", text + old + "\n")
    assert run(host).by_id("host.xid").status is Status.FAIL
