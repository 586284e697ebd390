"""nvidia-smi captures: NUMA cells, NVLink counts and the GPU count are checked, and every error names
the file and the line (and the cell)."""

from __future__ import annotations

import pytest

from kubegpu.errors import InputError, TopologyParseError
from kubegpu.sources.smi_topo import node_from_capture, parse_topo_matrix


def _capture(numa0: str, numa1: str) -> str:
    return (
        "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\n"
        f"GPU0\t X \tNV2\t0-7\t{numa0}\n"
        f"GPU1\tNV2\t X \t8-15\t{numa1}\n"
    )


@pytest.mark.parametrize("cell", ["-5", "99999999999999999999999", "1024", "abc", "٣"])
def test_a_bad_numa_affinity_names_the_file_line_and_gpu(cell: str) -> None:
    with pytest.raises(TopologyParseError, match=r"^cap\.txt:3: GPU1: NUMA Affinity .* is not a NUMA node"):
        parse_topo_matrix(_capture("0", cell), "cap.txt")


def test_real_numa_affinity_forms_are_kept_or_unknown() -> None:
    assert parse_topo_matrix(_capture("1023", "N/A")).numa_affinity == (1023, None)
    assert parse_topo_matrix(_capture("0,8,252-255", "")).numa_affinity == (None, None)


def test_an_absurd_nvlink_count_names_the_file_and_cell() -> None:
    text = "\tGPU0\tGPU1\nGPU0\t X \tNV99999999999999999999\nGPU1\tNV99999999999999999999\t X \n"
    with pytest.raises(
        TopologyParseError, match=r"^cap\.txt:2: GPU0/GPU1: an NVLink link bonds 1 to 64 links"
    ):
        node_from_capture(text, origin="cap.txt")


def test_a_capture_over_1024_gpus_is_refused_on_its_header() -> None:
    n = 1025
    header = "\t" + "\t".join(f"GPU{i}" for i in range(n))
    text = header + "\n" + "GPU0\t X \n"  # the rows are never read
    with pytest.raises(
        TopologyParseError, match=r"^cap\.txt:1: the matrix has 1025 GPUs; a node has at most 1024$"
    ):
        parse_topo_matrix(text, "cap.txt")


def test_a_bad_node_name_for_a_capture_is_refused() -> None:
    text = "\tGPU0\tGPU1\nGPU0\t X \tNV2\nGPU1\tNV2\t X \n"
    with pytest.raises(InputError, match="node name 'BAD NAME' is not a valid node name"):
        node_from_capture(text, origin="cap.txt", node_name="BAD NAME")
