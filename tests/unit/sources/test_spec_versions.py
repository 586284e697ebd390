"""Node specs name the GPUs clusters run and may carry the driver and CUDA versions (issue 56)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kubegpu.errors import SpecError
from kubegpu.sources.spec import load_reading, parse_spec


def test_a_spec_carries_driver_and_cuda_versions_to_the_reading(tmp_path: Path) -> None:
    path = tmp_path / "g6.yaml"
    path.write_text('driver: "570.86.15"\ncuda: "12.8"\ngpus:\n  - {model: L4, count: 2}\n')
    reading = load_reading(str(path))
    assert (reading.driver, reading.cuda) == ("570.86.15", "12.8")
    assert (reading.node.driver_version, reading.node.cuda_version) == ("570.86.15", "12.8")
    bare = load_reading("builtin:seed-8gpu")
    assert (bare.driver, bare.cuda) == ("", None)


@pytest.mark.parametrize(
    ("versions", "says"),
    [
        ("driver: 570\n", 'not a driver version like "550.54.15"'),
        ('driver: "570.86.15; rm"\n', "not a driver version"),
        ('driver: "570.86.15"\ncuda: 12.8\n', 'not a CUDA version like "12.4" (quote it in YAML)'),
        ('cuda: "12.8"\n', "a CUDA version needs the driver version too"),
    ],
)
def test_bad_versions_are_refused_naming_the_line_and_key(versions: str, says: str) -> None:
    with pytest.raises(SpecError, match=r"^g\.yaml:\d+: (driver|cuda): ") as err:
        parse_spec(versions + "gpus:\n  - {model: L4}\n", origin="g.yaml")
    assert says in str(err.value)


@pytest.mark.parametrize(
    ("model", "product", "memory"),
    [
        ("L4", "NVIDIA L4", 23034),
        ("A10G", "NVIDIA A10G", 23028),
        ("A30", "NVIDIA A30", 24576),
        ("A100-PCIe-40GB", "NVIDIA A100-PCIE-40GB", 40960),
        ("A100-PCIe-80GB", "NVIDIA A100 80GB PCIe", 81920),
        ("H100-PCIe", "NVIDIA H100 PCIe", 81559),
        ("H100-NVL", "NVIDIA H100 NVL", 95830),
        ("B200", "NVIDIA B200", 183359),
        ("GB200", "NVIDIA GB200", 189471),
        ("V100-16GB", "Tesla V100-SXM2-16GB", 16384),
        ("T4", "Tesla T4", 15360),
    ],
)
def test_the_gpus_clusters_run_are_in_the_catalogue(model: str, product: str, memory: int) -> None:
    gpu = parse_spec(f"name: n\ngpus:\n  - {{model: {model}}}\n").gpus[0]
    assert (gpu.product_name, gpu.memory_mib) == (product, memory)


def test_mig_layouts_of_the_new_mig_models_use_nvidias_profile_names() -> None:
    node = parse_spec("name: n\ngpus:\n  - {model: H100-NVL, mig: [3g.47gb, 2g.24gb, 1g.12gb, 1g.12gb]}\n")
    assert sorted(m.profile for m in node.gpus[0].mig_instances) == [
        "1g.12gb",
        "1g.12gb",
        "2g.24gb",
        "3g.47gb",
    ]
    b200 = parse_spec("name: n\ngpus:\n  - {model: B200, mig: [7g.180gb]}\n")
    assert [m.profile for m in b200.gpus[0].mig_instances] == ["7g.180gb"]
    with pytest.raises(SpecError, match="A30 does not support MIG"):  # no simulated A30 profiles yet
        parse_spec("name: n\ngpus:\n  - {model: A30, mig: [1g.6gb]}\n")
