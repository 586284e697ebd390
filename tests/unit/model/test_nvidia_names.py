"""MIG profile names as NVIDIA forms them from NVML's figures, and the catalogue's NVML facts (issue 56)."""

from __future__ import annotations

import pytest

from kubegpu.model.gpu import CATALOGUE, gpu_model
from kubegpu.model.mig import GI_PROFILE_SHAPES, mig_models, nvidia_memory_gb, nvidia_profile_name, profiles
from tests.nvml_standin.machine import nvml_gi_constant, profile_memory_mib

MIB = 2**20


@pytest.mark.parametrize(
    ("total_mib", "mig_mib", "gb"),
    [
        (95830, 11008, 12),  # H100 NVL 1g: 10.75 GiB, 1/8 of 94 GB = 11.75 -> 12 (a GiB table says 11)
        (95830, 44544, 47),  # H100 NVL 3g: 4/8 of 94
        (81559, 40320, 40),  # H100 80GB 3g.40gb, NVML's 40320 MiB
        (81559, 9984, 10),
        (143771, 71000, 71),  # H200 4 slices: 4/8 of 141 = 70.5, rounded half up as NVIDIA does
        (143771, 17000, 18),  # H200 1g.18gb
        (40960, 4864, 5),  # A100 40GB 1g.5gb
        (24576, 5900, 6),  # A30 1g.6gb: a quarter of the memory is 2/8
        (183359, 22000, 23),  # B200 1g.23gb
        (95830, 0, 0),
    ],
)
def test_nvidia_memory_gb_rounds_the_share_up_to_eighths_of_the_whole_gb(
    total_mib: int, mig_mib: int, gb: int
) -> None:
    assert nvidia_memory_gb(total_mib * MIB, mig_mib) == gb


def test_nvidia_profile_names_carry_attributes_and_compute_instance_prefixes() -> None:
    assert nvidia_profile_name(1, 12) == "1g.12gb"
    assert nvidia_profile_name(1, 12, attribute=GI_PROFILE_SHAPES[0x7][1]) == "1g.12gb+me"
    assert nvidia_profile_name(1, 24, attribute=GI_PROFILE_SHAPES[0xD][1]) == "1g.24gb-me"
    assert nvidia_profile_name(1, 24, attribute=GI_PROFILE_SHAPES[0xA][1]) == "1g.24gb+gfx"
    assert nvidia_profile_name(2, 48, attribute=GI_PROFILE_SHAPES[0x10][1]) == "2g.48gb+me.all"
    assert nvidia_profile_name(3, 40, ci_slices=1) == "1c.3g.40gb"
    assert nvidia_profile_name(3, 40, ci_slices=3) == "3g.40gb"
    assert GI_PROFILE_SHAPES[0x9] == (1, "")  # one slice with double memory: told apart by memory


@pytest.mark.parametrize("model", mig_models())
def test_every_simulated_profile_reads_back_under_its_catalogue_name(model: str) -> None:
    total = gpu_model(model).memory_mib
    for p in profiles(model):
        attribute = GI_PROFILE_SHAPES[
            nvml_gi_constant(p.compute_slices, p.memory_slices, p.media_extensions)
        ][1]
        gb = nvidia_memory_gb(total * MIB, profile_memory_mib(p, total))
        assert nvidia_profile_name(p.compute_slices, gb, attribute=attribute) == p.name, (model, p.name)


def test_the_catalogue_has_the_gpus_clusters_run_with_nvmls_names_and_memory() -> None:
    by_product = {m.product: m for m in CATALOGUE.values()}
    want = {
        "NVIDIA L4": (23034, (8, 9)),
        "NVIDIA L40S": (46068, (8, 9)),
        "NVIDIA A10G": (23028, (8, 6)),
        "NVIDIA A30": (24576, (8, 0)),
        "NVIDIA A100-PCIE-40GB": (40960, (8, 0)),
        "NVIDIA A100 80GB PCIe": (81920, (8, 0)),
        "NVIDIA H100 PCIe": (81559, (9, 0)),
        "NVIDIA H100 NVL": (95830, (9, 0)),
        "NVIDIA H100 80GB HBM3": (81559, (9, 0)),
        "NVIDIA H200": (143771, (9, 0)),
        "NVIDIA B200": (183359, (10, 0)),
        "NVIDIA GB200": (189471, (10, 0)),
        "Tesla V100-SXM2-16GB": (16384, (7, 0)),
        "Tesla V100-SXM2-32GB": (32768, (7, 0)),
        "Tesla T4": (15360, (7, 5)),  # NVML's total, not the nominal 16384
    }
    assert {name: (by_product[name].memory_mib, by_product[name].compute_capability) for name in want} == want
    assert gpu_model("h100-nvl").mig_capable and gpu_model("A100-PCIe-80GB").mig_capable
    assert not gpu_model("L4").mig_capable and not gpu_model("A10G").mig_capable
