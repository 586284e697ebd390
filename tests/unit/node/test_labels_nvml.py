"""Labels from what NVML says of a real GPU, and from the catalogue for a simulated one (issue 56)."""

from __future__ import annotations

from kubegpu.model.node import Gpu, GpuUuid, MigAttributes, MigInstance, Node
from kubegpu.node.labels import LabelInputs, MigMode, node_labels
from kubegpu.sources.spec import load_reading, parse_spec


def _gfd(node: Node, inputs: LabelInputs | None = None) -> dict[str, str]:
    labels = node_labels(node, inputs or LabelInputs())
    return {k.removeprefix("nvidia.com/"): v for k, v in labels.items() if k.startswith("nvidia.com/")}


def _real(index: int, **nvml: object) -> Gpu:
    return Gpu(
        index=index,
        uuid=GpuUuid(f"GPU-0000000{index}-aaaa-bbbb-cccc-dddddddddddd"),
        model=str(nvml.pop("model")),
        memory_mib=int(nvml.pop("memory_mib")),  # type: ignore[call-overload]
        numa_node=0,
        pci_bus_id=f"00000000:{0x18 + index:02X}:00.0",
        **nvml,  # type: ignore[arg-type]
    )


def test_nvml_name_capability_and_mig_capability_win_over_the_catalogue() -> None:
    # A GPU the catalogue does not know: everything labelled comes from NVML.
    gpu = _real(
        0,
        model="RTX-PRO-6000-Blackwell-Server-Edition",
        memory_mib=97887,
        product="NVIDIA RTX PRO 6000 Blackwell Server Edition",
        compute_capability=(12, 0),
        mig_capable=True,
    )
    labels = _gfd(Node(name="n", gpus=(gpu,), topology=None))
    assert labels["gpu.product"] == "NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition"
    assert (labels["gpu.family"], labels["gpu.compute.major"], labels["gpu.compute.minor"]) == (
        "blackwell",
        "12",
        "0",
    )
    assert labels["mig.capable"] == "true"
    assert labels["gpu.memory"] == "97887"
    # A catalogue model whose NVML answers differ (a MIG query the board refuses): NVML decides.
    refused = _real(
        0, model="H100-80GB", memory_mib=81559, product="NVIDIA H100 80GB HBM3", mig_capable=False
    )
    assert _gfd(Node(name="n", gpus=(refused,), topology=None))["mig.capable"] == "false"


def test_without_a_compute_capability_family_and_compute_are_left_out() -> None:
    gpu = _real(0, model="Some-GPU", memory_mib=1024, product="NVIDIA Some GPU")
    labels = _gfd(Node(name="n", gpus=(gpu,), topology=None))
    assert labels["gpu.product"] == "NVIDIA-Some-GPU"
    assert not {"gpu.family", "gpu.compute.major", "gpu.compute.minor"} & set(labels)
    assert labels["mig.capable"] == "false"


def test_mig_labels_come_from_nvmls_attributes_of_the_mig_devices() -> None:
    attrs = MigAttributes(
        memory_mib=11008, multiprocessors=16, gi_slices=1, ci_slices=1, copy_engines=1, decoders=1, jpegs=1
    )
    instances = tuple(
        MigInstance(
            profile="1g.12gb",
            start_slot=k,
            uuid=GpuUuid(f"MIG-0000000{k}-aaaa-bbbb-cccc-dddddddddddd"),
            gi_index=k + 1,
            attributes=attrs,
        )
        for k in range(7)
    )
    gpu = _real(0, model="H100-NVL", memory_mib=95830, product="NVIDIA H100 NVL", compute_capability=(9, 0),
                mig_capable=True, mig_enabled=True, mig_instances=instances)  # fmt: skip
    node = Node(name="n", gpus=(gpu,), topology=None)
    single = _gfd(node, LabelInputs(mig=MigMode.SINGLE))
    assert single["gpu.product"] == "NVIDIA-H100-NVL-MIG-1g.12gb"
    assert (single["gpu.count"], single["gpu.memory"], single["gpu.multiprocessors"]) == ("7", "11008", "16")
    assert (single["gpu.engines.copy"], single["gpu.engines.decoder"], single["gpu.engines.encoder"]) == (
        "1",
        "1",
        "0",
    )
    mixed = _gfd(node, LabelInputs(mig=MigMode.MIXED))
    assert mixed["mig-1g.12gb.memory"] == "11008" and mixed["mig-1g.12gb.slices.ci"] == "1"
    assert mixed["gpu.replicas"] == "0"


def test_an_all_mig_node_under_strategy_none_has_zero_replicas_as_gfd() -> None:
    node = load_reading("builtin:h100-mig-mixed").node
    all_mig = Node(name=node.name, gpus=(node.gpus[0],), topology=None)
    assert _gfd(all_mig)["gpu.replicas"] == "0"
    assert _gfd(node)["gpu.replicas"] == "1"  # one GPU is not MIG-enabled: it is advertised whole


def test_simulated_cloud_gpus_get_nvidias_labels_and_a_specs_versions_become_cuda_labels() -> None:
    spec = 'name: g6\ndriver: "570.86.15"\ncuda: "12.8"\ngpus:\n  - {model: L4, count: 4}\n'
    labels = _gfd(parse_spec(spec))
    assert labels["gpu.product"] == "NVIDIA-L4"
    assert (labels["gpu.family"], labels["gpu.compute.major"], labels["gpu.compute.minor"]) == (
        "ada-lovelace",
        "8",
        "9",
    )
    assert labels["gpu.memory"] == "23034"  # NVML's total for an L4
    assert labels["cuda.driver-version.full"] == "570.86.15" and labels["cuda.runtime-version.full"] == "12.8"
    nvl = _gfd(parse_spec("name: nvl\ngpus:\n  - {model: H100-NVL, count: 2}\n"))
    assert (nvl["gpu.product"], nvl["mig.capable"], nvl["gpu.memory"]) == ("NVIDIA-H100-NVL", "true", "95830")
    assert "cuda.driver-version.full" not in nvl  # a spec without versions names no driver
    t4 = _gfd(parse_spec("name: t4\ngpus:\n  - {model: T4}\n"))
    assert (t4["gpu.product"], t4["gpu.memory"], t4["gpu.family"]) == ("Tesla-T4", "15360", "turing")


def test_a_specs_machine_type_becomes_gpu_machine_sanitised_as_gfd_does() -> None:
    labels = _gfd(parse_spec('name: n\nmachine: "DGX H100 (rev 2)"\ngpus:\n  - {model: H100-80GB}\n'))
    assert labels["gpu.machine"] == "DGX-H100-rev-2"
    assert (labels["gpu.mode"], labels["vgpu.present"]) == ("compute", "false")
    assert "gpu.machine" not in _gfd(parse_spec("name: n\ngpus:\n  - {model: H100-80GB}\n"))


def test_simulated_mig_profiles_without_nvml_figures_leave_memory_and_engines_out() -> None:
    node = parse_spec("name: n\ngpus:\n  - {model: H200-141GB, mig: [3g.71gb, 2g.35gb, 1g.18gb, 1g.18gb]}\n")
    labels = _gfd(node, LabelInputs(mig=MigMode.MIXED))
    assert labels["mig-3g.71gb.count"] == "1" and labels["mig-3g.71gb.slices.gi"] == "3"
    assert not any(
        k.endswith((".memory", ".multiprocessors")) or ".engines." in k for k in labels if "mig-" in k
    )
