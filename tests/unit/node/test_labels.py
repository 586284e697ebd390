"""The node's labels carry GFD's keys and value formats (GFD's label list, docs/node.md)."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from kubegpu.agent import labels_for
from kubegpu.deviceplugin.config import load_config
from kubegpu.node.labels import (
    DriverVersions,
    LabelInputs,
    MigMode,
    SharingMode,
    gpu_family,
    node_labels,
    sanitise,
)
from kubegpu.sources.spec import load_node

SEED = load_node("builtin:seed-8gpu")


def test_the_seed_machine_has_gfds_example_a_labels() -> None:
    labels = node_labels(
        SEED, LabelInputs(), versions=DriverVersions(driver="550.54.15", cuda="12.4"), timestamp=1767225600
    )
    expected = {
        "nvidia.com/cuda.driver-version.full": "550.54.15",
        "nvidia.com/cuda.driver-version.major": "550",
        "nvidia.com/cuda.driver-version.minor": "54",
        "nvidia.com/cuda.driver-version.revision": "15",
        "nvidia.com/cuda.driver.major": "550",
        "nvidia.com/cuda.driver.minor": "54",
        "nvidia.com/cuda.driver.rev": "15",
        "nvidia.com/cuda.runtime-version.full": "12.4",
        "nvidia.com/cuda.runtime-version.major": "12",
        "nvidia.com/cuda.runtime-version.minor": "4",
        "nvidia.com/cuda.runtime.major": "12",
        "nvidia.com/cuda.runtime.minor": "4",
        "nvidia.com/gfd.timestamp": "1767225600",
        "nvidia.com/gpu.compute.major": "9",
        "nvidia.com/gpu.compute.minor": "0",
        "nvidia.com/gpu.count": "8",
        "nvidia.com/gpu.family": "hopper",
        # NVML's total, as in GFD's published output for this GPU (the catalogue's nominal 81920 until
        # issue 56)
        "nvidia.com/gpu.memory": "81559",
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
        "nvidia.com/gpu.replicas": "1",
        "nvidia.com/gpu.sharing-strategy": "none",
        "nvidia.com/mig.capable": "true",
        "nvidia.com/mps.capable": "false",
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.mode": "compute",  # GFD's example has these two too (issue 56)
        "nvidia.com/vgpu.present": "false",
        "kubegpu.io/nvlink-domains": "2",
        "kubegpu.io/nvlink-domain-size.max": "4",
        "kubegpu.io/nvlink-domain-size.min": "4",
    }
    assert labels == expected
    assert "nvidia.com/mig.strategy" not in labels  # absent for none, as GFD


def test_time_slicing_marks_the_product_shared_unless_renamed() -> None:
    shared = node_labels(SEED, LabelInputs(sharing=SharingMode.TIME_SLICING, replicas={"nvidia.com/gpu": 4}))
    assert shared["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3-SHARED"
    assert shared["nvidia.com/gpu.replicas"] == "4"
    assert shared["nvidia.com/gpu.sharing-strategy"] == "time-slicing"
    assert shared["nvidia.com/gpu.count"] == "8"
    renamed = node_labels(
        SEED,
        LabelInputs(
            sharing=SharingMode.TIME_SLICING,
            replicas={"nvidia.com/gpu": 4},
            renamed=frozenset({"nvidia.com/gpu"}),
        ),
    )
    assert renamed["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert renamed["nvidia.com/gpu.replicas"] == "4"


def test_labels_from_an_agent_config_file(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        "version: v1\nsharing:\n  mps:\n    resources:\n      - {name: nvidia.com/gpu, replicas: 2}\n"
        "flags: {mpsRoot: /run/mps}\n"
    )
    labels = labels_for(SEED, load_config(cfg))
    assert labels["nvidia.com/gpu.sharing-strategy"] == "mps"
    assert labels["nvidia.com/mps.capable"] == "true"
    cfg.write_text(
        "version: v1\nsharing:\n  timeSlicing:\n    renameByDefault: true\n    resources:\n"
        "      - {name: nvidia.com/gpu, replicas: 3}\n"
    )
    assert labels_for(SEED, load_config(cfg))["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"


def test_mixed_mig_has_one_key_family_per_profile_and_single_overrides_gpu() -> None:
    node = load_node("builtin:h100-mig-mixed")
    mixed = node_labels(node, LabelInputs(mig=MigMode.MIXED))
    assert mixed["nvidia.com/mig.strategy"] == "mixed"
    assert mixed["nvidia.com/mig-1g.10gb.product"] == "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb"
    assert mixed["nvidia.com/mig-1g.10gb.memory"] == "9984"  # GFD's published figure
    assert mixed["nvidia.com/mig-3g.40gb.multiprocessors"] == "60"
    assert mixed["nvidia.com/mig-2g.20gb.slices.gi"] == "2"
    counts = {k: v for k, v in mixed.items() if k.endswith(".count") and "/mig-" in k}
    total = sum(len(g.mig_instances) for g in node.gpus)
    assert sum(int(v) for v in counts.values()) == total
    single = node_labels(node, LabelInputs(mig=MigMode.SINGLE))
    # this node mixes profiles: GFD's invalid layout
    assert single["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3-MIG-INVALID"
    assert single["nvidia.com/gpu.count"] == "0"


def test_a_node_without_gpus_gets_no_labels() -> None:
    from kubegpu.model.node import Node

    assert node_labels(Node(name="cpu", gpus=(), topology=None), LabelInputs()) == {}


def test_families_follow_the_compute_capability() -> None:
    assert [gpu_family(*cc) for cc in ((7, 0), (7, 5), (8, 0), (8, 9), (9, 0), (10, 0), (4, 0))] == [
        "volta",
        "turing",
        "ampere",
        "ada-lovelace",
        "hopper",
        "blackwell",
        "undefined",
    ]


def test_sanitise_joins_words_and_drops_odd_characters() -> None:
    assert sanitise("NVIDIA H100 80GB HBM3") == "NVIDIA-H100-80GB-HBM3"
    assert sanitise("Tesla  V100-SXM2-32GB (rev) ™") == "Tesla-V100-SXM2-32GB-rev"


@given(st.text(max_size=80))
def test_sanitised_text_is_always_a_valid_label_value_alphabet(text: str) -> None:
    out = sanitise(text)
    assert all(c.isascii() and (c.isalnum() or c in "-_.") for c in out)


def test_every_key_is_kubegpus_own() -> None:
    node = load_node("builtin:h100-mig-mixed")
    for inputs in (LabelInputs(), LabelInputs(mig=MigMode.MIXED), LabelInputs(mig=MigMode.SINGLE)):
        assert all(k.startswith(("nvidia.com/", "kubegpu.io/")) for k in node_labels(node, inputs))
