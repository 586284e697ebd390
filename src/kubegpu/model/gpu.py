"""The GPU model catalogue: what each NVIDIA data-centre GPU offers the planner and the allocator.

The catalogue describes *simulated* GPUs (node specs, captures); on a real GPU NVML is the source of
truth (``kubegpu.sources.nvml``) and the catalogue only names the model. ``product`` is NVML's name
(``nvmlDeviceGetName``) and ``memory_mib`` NVML's total framebuffer (``nvmlDeviceGetMemoryInfo``,
what ``nvidia-smi`` prints: a T4 has 15360 MiB, not 16384), as published ``nvidia-smi`` outputs show
them; ``memory_gb`` is the marketed size. Bandwidth, NVLink and PCIe figures are nominal datasheet
values; H100-80GB's 3350 GB/s is the figure the seed's arithmetic uses.
"""

from __future__ import annotations

from dataclasses import dataclass

from kubegpu.echo import shorten
from kubegpu.errors import InputError

__all__ = ["CATALOGUE", "GpuModel", "gpu_model", "model_for_product", "model_names"]

# Nominal per-direction bandwidth of one NVLink link by NVLink generation (GB/s).
NVLINK_LINK_GBPS: dict[int, float] = {1: 20.0, 2: 25.0, 3: 25.0, 4: 25.0, 5: 50.0}
# Nominal per-direction bandwidth of a PCIe x16 slot by PCIe generation (GB/s).
PCIE_X16_GBPS: dict[int, float] = {3: 16.0, 4: 32.0, 5: 64.0}


@dataclass(frozen=True, kw_only=True)
class GpuModel:
    """One GPU model as sold; the name is kubegpu's catalogue key (``H100-80GB``)."""

    name: str
    product: str
    memory_gb: int
    memory_mib: int
    memory_bandwidth_gbps: float
    compute_capability: tuple[int, int]
    architecture: str
    mig_capable: bool
    nvlink_generation: int | None
    nvlinks: int
    pcie_generation: int


CATALOGUE: dict[str, GpuModel] = {
    m.name: m
    for m in (
        GpuModel(
            name="A100-40GB",
            product="NVIDIA A100-SXM4-40GB",
            memory_gb=40,
            memory_mib=40960,
            memory_bandwidth_gbps=1555.0,
            compute_capability=(8, 0),
            architecture="ampere",
            mig_capable=True,
            nvlink_generation=3,
            nvlinks=12,
            pcie_generation=4,
        ),
        GpuModel(
            name="A100-80GB",
            product="NVIDIA A100-SXM4-80GB",
            memory_gb=80,
            memory_mib=81920,
            memory_bandwidth_gbps=2039.0,
            compute_capability=(8, 0),
            architecture="ampere",
            mig_capable=True,
            nvlink_generation=3,
            nvlinks=12,
            pcie_generation=4,
        ),
        GpuModel(
            name="H100-80GB",
            product="NVIDIA H100 80GB HBM3",
            memory_gb=80,
            memory_mib=81559,
            memory_bandwidth_gbps=3350.0,
            compute_capability=(9, 0),
            architecture="hopper",
            mig_capable=True,
            nvlink_generation=4,
            nvlinks=18,
            pcie_generation=5,
        ),
        GpuModel(
            name="H200-141GB",
            product="NVIDIA H200",
            memory_gb=141,
            memory_mib=143771,
            memory_bandwidth_gbps=4800.0,
            compute_capability=(9, 0),
            architecture="hopper",
            mig_capable=True,
            nvlink_generation=4,
            nvlinks=18,
            pcie_generation=5,
        ),
        GpuModel(
            name="L40S",
            product="NVIDIA L40S",
            memory_gb=48,
            memory_mib=46068,
            memory_bandwidth_gbps=864.0,
            compute_capability=(8, 9),
            architecture="ada-lovelace",
            mig_capable=False,
            nvlink_generation=None,
            nvlinks=0,
            pcie_generation=4,
        ),
        GpuModel(
            name="T4",
            product="Tesla T4",
            memory_gb=16,
            memory_mib=15360,
            memory_bandwidth_gbps=320.0,
            compute_capability=(7, 5),
            architecture="turing",
            mig_capable=False,
            nvlink_generation=None,
            nvlinks=0,
            pcie_generation=3,
        ),
        GpuModel(
            name="V100-32GB",
            product="Tesla V100-SXM2-32GB",
            memory_gb=32,
            memory_mib=32768,
            memory_bandwidth_gbps=900.0,
            compute_capability=(7, 0),
            architecture="volta",
            mig_capable=False,
            nvlink_generation=2,
            nvlinks=6,
            pcie_generation=3,
        ),
        GpuModel(
            name="V100-16GB",
            product="Tesla V100-SXM2-16GB",
            memory_gb=16,
            memory_mib=16384,
            memory_bandwidth_gbps=900.0,
            compute_capability=(7, 0),
            architecture="volta",
            mig_capable=False,
            nvlink_generation=2,
            nvlinks=6,
            pcie_generation=3,
        ),
        GpuModel(
            name="L4",
            product="NVIDIA L4",
            memory_gb=24,
            memory_mib=23034,
            memory_bandwidth_gbps=300.0,
            compute_capability=(8, 9),
            architecture="ada-lovelace",
            mig_capable=False,
            nvlink_generation=None,
            nvlinks=0,
            pcie_generation=4,
        ),
        GpuModel(
            name="A10G",
            product="NVIDIA A10G",
            memory_gb=24,
            memory_mib=23028,
            memory_bandwidth_gbps=600.0,
            compute_capability=(8, 6),
            architecture="ampere",
            mig_capable=False,
            nvlink_generation=None,
            nvlinks=0,
            pcie_generation=4,
        ),
        GpuModel(
            name="A30",
            product="NVIDIA A30",
            memory_gb=24,
            memory_mib=24576,
            memory_bandwidth_gbps=933.0,
            compute_capability=(8, 0),
            architecture="ampere",
            # MIG-capable (NVML says so on a real one), but no simulated MIG profiles yet: docs/compat.md
            mig_capable=False,
            nvlink_generation=3,
            nvlinks=4,
            pcie_generation=4,
        ),
        GpuModel(
            name="A100-PCIe-40GB",
            product="NVIDIA A100-PCIE-40GB",
            memory_gb=40,
            memory_mib=40960,
            memory_bandwidth_gbps=1555.0,
            compute_capability=(8, 0),
            architecture="ampere",
            mig_capable=True,
            nvlink_generation=3,
            nvlinks=12,
            pcie_generation=4,
        ),
        GpuModel(
            name="A100-PCIe-80GB",
            product="NVIDIA A100 80GB PCIe",
            memory_gb=80,
            memory_mib=81920,
            memory_bandwidth_gbps=1935.0,
            compute_capability=(8, 0),
            architecture="ampere",
            mig_capable=True,
            nvlink_generation=3,
            nvlinks=12,
            pcie_generation=4,
        ),
        GpuModel(
            name="H100-PCIe",
            product="NVIDIA H100 PCIe",
            memory_gb=80,
            memory_mib=81559,
            memory_bandwidth_gbps=2000.0,
            compute_capability=(9, 0),
            architecture="hopper",
            mig_capable=True,
            nvlink_generation=4,
            nvlinks=12,
            pcie_generation=5,
        ),
        GpuModel(
            name="H100-NVL",
            product="NVIDIA H100 NVL",
            memory_gb=94,
            memory_mib=95830,
            memory_bandwidth_gbps=3900.0,
            compute_capability=(9, 0),
            architecture="hopper",
            mig_capable=True,
            nvlink_generation=4,
            nvlinks=12,
            pcie_generation=5,
        ),
        GpuModel(
            name="B200",
            product="NVIDIA B200",
            memory_gb=180,
            memory_mib=183359,
            memory_bandwidth_gbps=8000.0,
            compute_capability=(10, 0),
            architecture="blackwell",
            mig_capable=True,
            nvlink_generation=5,
            nvlinks=18,
            pcie_generation=5,
        ),
        GpuModel(
            name="GB200",
            product="NVIDIA GB200",
            memory_gb=186,
            memory_mib=189471,
            memory_bandwidth_gbps=8000.0,
            compute_capability=(10, 0),
            architecture="blackwell",
            # MIG-capable (NVML says so on a real one), but no simulated MIG profiles yet: docs/compat.md
            mig_capable=False,
            nvlink_generation=5,
            nvlinks=18,
            pcie_generation=5,
        ),
    )
}


def model_names() -> tuple[str, ...]:
    """Catalogue keys in a stable order."""
    return tuple(CATALOGUE)


def gpu_model(name: str) -> GpuModel:
    """Look a model up by catalogue name (case-insensitive); unknown names list the known ones."""
    for key, model in CATALOGUE.items():
        if key.lower() == name.strip().lower():
            return model
    raise InputError(f"unknown GPU model {shorten(name)}; known models: {', '.join(CATALOGUE)}")


def model_for_product(product: str) -> GpuModel | None:
    """The catalogue model whose product name is ``product`` (as ``nvidia-smi -L`` prints it), if any."""
    wanted = product.strip().lower()
    for model in CATALOGUE.values():
        if model.product.lower() == wanted:
            return model
    return None
