"""Node specs: builtins load, YAML errors name file, line and key, UUIDs are stable."""

from __future__ import annotations

from pathlib import Path

import pytest

from kubegpu.allocate import choose
from kubegpu.errors import SpecError
from kubegpu.model.topology import LinkKind
from kubegpu.sources.spec import builtin_names, load_node, parse_spec

REQUIRED_BUILTINS = {"seed-8gpu", "dgx-h100", "dgx-a100", "dgx1-v100", "pcie-8gpu", "hgx-16"}


def test_every_required_builtin_loads_with_a_topology() -> None:
    assert set(builtin_names()) >= REQUIRED_BUILTINS
    for name in builtin_names():
        node = load_node(f"builtin:{name}")
        assert node.topology is not None
        assert node.topology.n == len(node.gpus)
        assert len({g.uuid for g in node.gpus}) == len(node.gpus)


def test_seed_builtin_is_the_seeds_machine() -> None:
    node = load_node("builtin:seed-8gpu")
    topo = node.topology
    assert topo is not None
    assert topo.cost[0][3] == 1 and topo.cost[3][4] == 4
    assert choose(topo, [2, 3, 4, 5, 6, 7], 4) == (4, 5, 6, 7)


def test_builtin_shapes() -> None:
    h100 = load_node("builtin:dgx-h100")
    assert h100.topology is not None
    assert {link.label for row in h100.topology.links for link in row} == {"X", "NV18"}
    assert [g.numa_node for g in h100.gpus] == [0, 0, 0, 0, 1, 1, 1, 1]
    v100 = load_node("builtin:dgx1-v100").topology
    assert v100 is not None
    assert {link.label for row in v100.links for link in row} == {"X", "NV1", "NV2", "SYS"}
    pcie = load_node("builtin:pcie-8gpu").topology
    assert pcie is not None
    assert (pcie.links[0][1].label, pcie.links[0][2].label, pcie.links[0][4].label) == ("PIX", "PHB", "SYS")
    hgx = load_node("builtin:hgx-16")
    assert hgx.topology is not None and len(hgx.gpus) == 16
    assert hgx.topology.nvlink_groups == (
        tuple(range(4)),
        tuple(range(4, 8)),
        tuple(range(8, 12)),
        tuple(range(12, 16)),
    )


def test_uuids_are_stable_and_differ_between_nodes() -> None:
    a = load_node("builtin:seed-8gpu")
    b = load_node("builtin:seed-8gpu")
    c = load_node("builtin:seed-8gpu", node_name="other")
    assert [g.uuid for g in a.gpus] == [g.uuid for g in b.gpus]
    assert a.gpus[0].uuid != c.gpus[0].uuid
    assert a.gpus[0].uuid.startswith("GPU-")


def test_mig_layout_is_placed_and_mig_uuids_are_given() -> None:
    node = load_node("builtin:h100-mig-mixed")
    gpu = node.gpus[0]
    assert gpu.mig_enabled
    assert sorted(m.profile for m in gpu.mig_instances) == ["1g.10gb", "1g.10gb", "2g.20gb", "3g.40gb"]
    assert all(m.uuid.startswith("MIG-") for m in gpu.mig_instances)
    assert not node.gpus[1].mig_enabled


SPEC = """\
name: lab
gpus:
  - {model: A100-80GB, count: 2, numa: 0}
  - model: A100-80GB
    uuid: GPU-fixed
topology:
  matrix:
    - X NV12 SYS
    - NV12 X SYS
    - SYS SYS X
"""


def test_explicit_matrix_and_uuid() -> None:
    node = parse_spec(SPEC, origin="lab.yaml")
    assert node.gpus[2].uuid == "GPU-fixed"
    assert node.topology is not None
    assert node.topology.links[0][1].kind is LinkKind.NVLINK
    assert node.topology.cost[0][1] < node.topology.cost[0][2]


@pytest.mark.parametrize(
    ("text", "where", "what"),
    [
        ("name: x\ngpus:\n  - {model: Z100}\n", "spec.yaml:3: gpus[0].model", "unknown GPU model 'Z100'"),
        (
            "name: x\ngpus:\n  - {model: T4, colour: red}\n",
            "spec.yaml:3: gpus[0].colour",
            "unknown key 'colour'",
        ),
        ("name: x\ngpus: []\n", "spec.yaml:2: gpus", "non-empty list"),
        (
            "name: x\ngpus:\n  - {model: T4, count: 2}\n"
            "topology:\n  tiers:\n    - {link: NV9, groups: ['0-5']}\n",
            "spec.yaml:6: topology.tiers[0].groups[0]",
            "GPU 2 does not exist",
        ),
        (
            "name: x\ngpus:\n  - {model: T4, count: 2}\n"
            "topology:\n  tiers:\n    - {link: NV2, groups: [[0]]}\n",
            "spec.yaml:5: topology.tiers",
            "share no tier",
        ),
        (
            "name: x\ngpus:\n  - {model: T4, mig: [1g.10gb]}\n",
            "spec.yaml:3: gpus[0].mig",
            "T4 does not support MIG",
        ),
        (
            "name: x\ngpus:\n  - {model: H100-80GB, mig: [3g.40gb, 3g.40gb, 2g.20gb]}\n",
            "spec.yaml:3: gpus[0].mig",
            "needs 8 compute slices",
        ),
        ("name: x\ngpus:\n  - {model: T4\n", "spec.yaml:", "not valid YAML"),
        (
            "name: x\ngpus:\n  - {model: T4, count: 2}\ntopology:\n  matrix:\n    - X NV1\n    - SYS X\n",
            "spec.yaml:7: topology.matrix[1]",
            "not symmetric",
        ),
        (  # a T4 has no NVLink: a capture typed by hand or a copied spec must not invent one
            "name: x\ngpus:\n  - {model: T4, count: 2}\ntopology:\n  matrix:\n    - X NV2\n    - NV2 X\n",
            "spec.yaml:6: topology.matrix[0]",
            "GPU0-GPU1 is NV2 but T4 GPUs have no NVLink",
        ),
        (
            "name: x\ngpus:\n  - {model: A100-40GB, count: 4}\n"
            "topology:\n  tiers:\n    - {link: NV13, groups: ['0-3']}\n",
            "spec.yaml:5: topology.tiers",
            "A100-40GB GPUs have at most 12 NVLink links",
        ),
        (
            "name: x\ngpus:\n  - {model: H100-80GB}\n  - {model: T4}\n"
            "topology:\n  matrix:\n    - X NV1\n    - NV1 X\n",
            "spec.yaml:7: topology.matrix[0]",
            "H100-80GB and T4 GPUs have no NVLink",
        ),
    ],
)
def test_bad_specs_name_file_line_and_key(text: str, where: str, what: str) -> None:
    with pytest.raises(SpecError) as info:
        parse_spec(text, origin="spec.yaml")
    assert str(info.value).startswith(where), str(info.value)
    assert what in str(info.value)


def test_huge_counts_and_ranges_are_refused_before_they_are_expanded() -> None:
    with pytest.raises(SpecError, match=r"spec.yaml:3: gpus\[0\].count: the node would have over 1024 GPUs"):
        parse_spec("name: x\ngpus:\n  - {model: T4, count: 99999999999}\n", origin="spec.yaml")
    text = (
        "name: x\ngpus:\n  - {model: T4, count: 2}\n"
        "topology:\n  tiers:\n    - {link: NV2, groups: ['0-99999999999']}\n"
    )
    with pytest.raises(SpecError, match="GPU 2 does not exist"):
        parse_spec(text, origin="spec.yaml")


def test_missing_file_and_unknown_builtin(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="no such file"):
        load_node(str(tmp_path / "nope.yaml"))
    with pytest.raises(SpecError, match="builtins: "):
        load_node("builtin:nope")


@pytest.mark.parametrize(
    ("uuid", "what"),
    [
        ("GPU-../../etc", "letters, digits and '-'"),  # would reach a volume-mount path
        ("GPU-a,b", "letters, digits and '-'"),  # would split NVIDIA_VISIBLE_DEVICES
        ("'GPU-a b'", "letters, digits and '-'"),
        ("MIG-0b6b0b0b", "does not start with GPU-"),
        ("'0b6b0b0b'", "does not start with GPU-"),
        ("GPU-" + "a" * 60, "at most 63"),
    ],
)
def test_gpu_uuids_are_validated_at_load_with_file_line_and_key(uuid: str, what: str) -> None:
    text = f"name: x\ngpus:\n  - model: T4\n    uuid: {uuid}\n"
    with pytest.raises(SpecError) as info:
        parse_spec(text, origin="spec.yaml")
    assert str(info.value).startswith("spec.yaml:4: gpus[0].uuid: UUID "), str(info.value)
    assert what in str(info.value)


def test_real_looking_gpu_uuids_load() -> None:
    uuid = "GPU-0b6b0b0b-1c2d-3e4f-5a6b-7c8d9e0f1a2b"
    assert parse_spec(f"name: x\ngpus:\n  - {{model: T4, uuid: {uuid}}}\n").gpus[0].uuid == uuid


def test_nvswitch_systems_show_every_gpus_full_link_count_to_every_other() -> None:
    # behind NVSwitch nvidia-smi shows NV18 between every pair of H100s: per pair, not per GPU
    node = parse_spec(
        "name: x\ngpus:\n  - {model: H100-80GB, count: 8}\n"
        "topology:\n  tiers:\n    - {link: NV18, groups: ['0-7']}\n"
    )
    assert node.topology is not None and str(node.topology.links[0][7]) == "NV18"
