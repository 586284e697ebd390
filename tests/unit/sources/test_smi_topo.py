"""``nvidia-smi topo -m`` captures as users paste them."""

from __future__ import annotations

from pathlib import Path

import pytest

from kubegpu.errors import InputError, SpecError, TopologyParseError
from kubegpu.sources.smi_topo import looks_like_capture, parse_topo_matrix
from kubegpu.sources.spec import load_node

TABBED = (
    "\tGPU0\tGPU1\tGPU2\tGPU3\tNIC0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
    "GPU0\t X \tNV12\tSYS\tSYS\tPXB\t0-31,64-95\t0\t\tN/A\n"
    "GPU1\tNV12\t X \tSYS\tSYS\tPXB\t0-31,64-95\t0\t\tN/A\n"
    "GPU2\tSYS\tSYS\t X \tNV12\tSYS\t32-63,96-127\t1\t\tN/A\n"
    "GPU3\tSYS\tSYS\tNV12\t X \tSYS\t32-63,96-127\t1\t\tN/A\n"
    "NIC0\tPXB\tPXB\tSYS\tSYS\t X \t\t\t\t\n"
    "\n"
    "Legend:\n\n"
    "  X    = Self\n"
    "  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes\n"
    "  NV#  = Connection traversing a bonded set of # NVLinks\n\n"
    "NIC Legend:\n\n  NIC0: mlx5_0\n"
)

SPACED = """        GPU0    GPU1    mlx5_0  CPU Affinity    NUMA Affinity
GPU0     X      PIX     PHB     0-19    0
GPU1    PIX      X      PHB     0-19    0
mlx5_0  PHB     PHB      X

Legend:
  X    = Self
"""

OLD = """\tGPU0\tGPU1\tCPU Affinity
GPU0\t X \tSOC\t0-11
GPU1\tSOC\t X \t12-23
"""


def test_tabbed_capture_with_nic_and_numa_columns() -> None:
    topo = parse_topo_matrix(TABBED)
    assert topo.devices == ("GPU0", "GPU1", "GPU2", "GPU3", "NIC0")
    assert topo.nics == ("NIC0",)
    assert topo.numa_affinity[:4] == (0, 0, 1, 1)
    assert topo.cpu_affinity[2] == "32-63,96-127"
    gpu = topo.gpu_topology()
    assert gpu.n == 4
    assert gpu.links[0][1].label == "NV12"
    assert gpu.nvlink_groups == ((0, 1), (2, 3))


def test_space_separated_capture_with_old_nic_names() -> None:
    topo = parse_topo_matrix(SPACED)
    assert topo.devices == ("GPU0", "GPU1", "mlx5_0")
    assert topo.gpu_topology().links[0][1].label == "PIX"
    assert topo.numa_affinity[:2] == (0, 0)


def test_old_soc_label_and_no_numa_column() -> None:
    topo = parse_topo_matrix(OLD)
    assert topo.gpu_topology().links[0][1].label == "SYS"
    assert topo.numa_affinity == (None, None)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("hello\nworld\n", "no nvidia-smi topology matrix found in cap.txt"),
        ("\tGPU0\tGPU1\nGPU0\t X \tNV4\nGPU1\tNV2\t X \n", ":3: GPU1/GPU0 is NV2 but GPU0/GPU1 is NV4"),
        ("\tGPU0\tGPU1\nGPU0\t X \tNVZ\nGPU1\tNV2\t X \n", ":2: GPU0/GPU1: unknown link type 'NVZ'"),
        ("\tGPU0\tGPU1\nGPU0\t X \nGPU1\tNV2\t X \n", ":2: row GPU0 has 1 link entries, expected 2"),
        ("\tGPU0\tGPU1\nGPU0\t X \tNV2\n", "no row for GPU1"),
        ("\tGPU0\tGPU1\nGPU0\t X \tNV2\nGPU7\tNV2\t X \n", ":3: row 'GPU7' is not one of the columns"),
    ],
)
def test_malformed_captures_name_the_line(text: str, message: str) -> None:
    with pytest.raises(TopologyParseError, match=message):
        parse_topo_matrix(text, "cap.txt")


def test_load_node_detects_a_capture_by_content(tmp_path: Path) -> None:
    path = tmp_path / "topo.txt"
    path.write_text(TABBED)
    assert looks_like_capture(TABBED)
    assert not looks_like_capture("name: x\ngpus: []\n")
    node = load_node(str(path))
    assert len(node.gpus) == 4
    assert node.gpus[3].numa_node == 1
    assert node.topology is not None and node.topology.links[2][3].label == "NV12"


CAPTURES = Path(__file__).parent / "captures"


@pytest.mark.parametrize(
    "text",
    [
        "hello\nworld\n",
        "job 1234 started\nstep: 3\nloss: 0.25\n",  # a log that happens to parse as a YAML mapping
        "GPU0 detected at startup\nGPU0 GPU1 are busy\n",
    ],
)
def test_a_file_without_a_matrix_is_named_not_a_yaml_error(tmp_path: Path, text: str) -> None:
    path = tmp_path / "job.log"
    path.write_text(text)
    with pytest.raises(TopologyParseError, match=f"no nvidia-smi topology matrix found in {path}"):
        load_node(str(path))


def test_a_yaml_file_is_still_a_node_spec(tmp_path: Path) -> None:
    path = tmp_path / "node.yaml"
    path.write_text("gpus: [{model: NOPE}]\n")
    with pytest.raises(SpecError, match="unknown GPU model 'NOPE'"):
        load_node(str(path))
    spec = tmp_path / "node.txt"
    spec.write_text("name: lab\ngpus:\n  - {model: T4, count: 2, numa: 0}\n")
    assert len(load_node(str(spec)).gpus) == 2


def test_gpu_model_prices_a_capture_exactly_and_is_refused_for_a_spec() -> None:
    path = str(CAPTURES / "dgx1-v100-dlperf-report.txt")
    fallback = load_node(path)
    exact = load_node(path, gpu_model_name="v100-32gb")
    assert fallback.gpus[0].model == "unknown"
    assert exact.gpus[0].model == "V100-32GB" and exact.gpus[0].memory_mib == 32768
    assert fallback.topology is not None and exact.topology is not None
    assert fallback.topology.cost[0][5] == 56.25  # SYS, fallback table
    assert exact.topology.cost[0][5] == 70.312  # SYS on PCIe gen 3
    assert exact.topology.cost[0][1] == 18.0  # NV1 on NVLink 2
    with pytest.raises(SpecError, match="--gpu-model is for nvidia-smi captures"):
        load_node("builtin:dgx1-v100", gpu_model_name="V100-32GB")
    with pytest.raises(InputError, match="unknown GPU model 'B9000'"):
        load_node(path, gpu_model_name="B9000")


def test_gpu_lines_beside_a_capture_name_the_model_and_uuids() -> None:
    node = load_node(str(CAPTURES / "a100-sxm4-80gb-4gpu-report.txt"))
    assert [g.model for g in node.gpus] == ["A100-80GB"] * 4
    assert node.gpus[0].uuid == "GPU-e04968e9-3302-841c-b00f-f388d7a8f56f"
    assert node.gpus[3].uuid == "GPU-ca841b49-69a5-890b-d980-1bd4f98161d8"
    # an unknown product (RTX A6000) leaves the model unknown and prices by the fallback table
    other = load_node(str(CAPTURES / "rtx-a6000-3gpu-nv4-bridge.txt"))
    assert other.gpus[0].model == "unknown"
    assert other.gpus[0].uuid == "GPU-5baec991-de63-c196-1766-04c38407e133"
