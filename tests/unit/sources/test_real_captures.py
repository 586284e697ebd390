"""Real ``nvidia-smi topo -m`` captures from public sources (``captures/SOURCES.md``).

Every expectation below was read off the capture by hand: the GPU count, a few links, the NUMA
column, and the best set by the ordering rule (any NVLink path beats any PCIe path, more links beat
fewer, PIX < PXB < PHB < NODE < SYS; on a tie, one NUMA node) — never copied from kubegpu's output.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path

import pytest

from kubegpu.allocate import choose_scored, choose_simple
from kubegpu.sources.smi_topo import parse_topo_matrix
from kubegpu.sources.spec import load_node

CAPTURES = Path(__file__).parent / "captures"

N4 = (0, 0, 0, 0, 1, 1, 1, 1)


@dataclass(frozen=True)
class Case:
    file: str
    gpus: int
    links: tuple[tuple[int, int, str], ...]
    nics: int = 0
    numa: tuple[int | None, ...] | None = None  # None: the capture has no usable NUMA column
    cpu: dict[int, str | None] = field(default_factory=dict)
    pick: tuple[int, tuple[int, ...] | None, tuple[int, ...]] | None = None  # count, available, best
    model: str | None = None  # the catalogue model its ``GPU i: NAME`` lines name


CASES = [
    Case(
        "dgx1-v100-dlperf-report.txt",
        8,
        ((0, 1, "NV1"), (0, 3, "NV2"), (0, 4, "NV2"), (0, 5, "SYS"), (3, 7, "NV1"), (6, 7, "NV2")),
        nics=1,
        cpu={0: "0-11,24-35", 7: "12-23,36-47"},
        pick=(4, None, (0, 1, 2, 3)),  # the two fully NVLinked quads tie; lower indices
    ),
    Case(
        "dgx1-v100-nersc-cgpu-script.txt",
        8,
        ((0, 1, "NV1"), (0, 3, "NV2"), (1, 5, "NV2"), (2, 6, "NV1"), (1, 4, "SYS")),
        nics=9,
        numa=N4,
        cpu={0: "0-19,40-59", 4: "20-39,60-79"},
        pick=(4, (1, 2, 3, 4, 5, 6, 7), (4, 5, 6, 7)),  # 1-2-3 + any SYS loses to the whole other quad
    ),
    Case(
        "dgx1-v100-wechat-yard.txt",
        8,
        ((0, 1, "NV1"), (0, 2, "NV2"), (0, 7, "NV2"), (3, 4, "NV1"), (2, 5, "NV1"), (0, 4, "SYS")),
        pick=(4, None, (0, 1, 2, 3)),
        model="V100-32GB",
    ),
    Case(
        "a100-sxm4-80gb-4gpu-report.txt",
        4,
        ((0, 1, "NV12"), (2, 3, "NV12")),
        nics=1,
        numa=(1, 1, 1, 1),
        cpu={0: "32-63,96-127"},
        pick=(4, None, (0, 1, 2, 3)),
        model="A100-80GB",
    ),
    Case(
        "b300-sglang-26039-env-report.txt",
        8,
        ((0, 7, "NV18"), (3, 4, "NV18")),
        nics=9,
        numa=N4,
        cpu={0: "0-63,128-191", 4: "64-127,192-255"},
        pick=(4, (2, 3, 4, 5, 6, 7), (4, 5, 6, 7)),  # NVSwitch: all equal, 4-7 share NUMA node 1
    ),
    Case(
        "derived-b300-esc-bytes.txt",
        8,
        ((0, 7, "NV18"),),
        nics=9,
        numa=N4,
        pick=(4, (2, 3, 4, 5, 6, 7), (4, 5, 6, 7)),
    ),
    Case(
        "derived-b300-run-together-header.txt",
        8,
        ((0, 7, "NV18"),),
        nics=9,
        numa=N4,
        pick=(4, (2, 3, 4, 5, 6, 7), (4, 5, 6, 7)),
    ),
    Case(
        "derived-b300-run-together-cells.txt",
        8,
        ((0, 7, "NV18"),),
        nics=9,
        numa=N4,
        pick=(4, (2, 3, 4, 5, 6, 7), (4, 5, 6, 7)),
    ),
    Case(
        "h100-vllm-env-report-indented.txt",
        8,
        ((1, 6, "NV18"),),
        nics=1,
        numa=N4,
        cpu={3: "0-103", 4: "104-207"},
        pick=(4, (1, 2, 3, 4, 5, 6, 7), (4, 5, 6, 7)),
    ),
    Case(
        "h100-della-empty-cpu-affinity.txt",
        8,
        ((0, 5, "NV18"),),
        nics=6,
        numa=N4,
        cpu={0: None, 3: None, 4: "1"},  # GPUs 0-3 print an empty CPU Affinity cell
        pick=(4, (2, 3, 4, 5, 6, 7), (4, 5, 6, 7)),
    ),
    Case(
        "h100-nccl-1453-truncated-nic-rows.txt",
        8,
        ((0, 1, "NV18"), (3, 4, "NV18")),
        nics=9,
        numa=N4,
        cpu={0: "0-79", 7: "80-159"},
        pick=(4, (3, 4, 5, 6, 7), (4, 5, 6, 7)),
    ),
    Case(
        "rtx4090-8gpu-go-gpuallocator-17.txt",
        8,
        ((0, 1, "SYS"), (6, 7, "SYS")),
        nics=2,
        numa=N4,
        cpu={0: "0-55,112-167", 6: "56-111,168-223"},
        pick=(4, (2, 3, 4, 5, 6, 7), (4, 5, 6, 7)),  # all SYS: only NUMA separates the sets
    ),
    Case("tesla-p4-1gpu-hami-99.txt", 1, (), numa=(None,), cpu={0: "0-7"}, pick=(1, None, (0,))),
    Case("h200-1gpu-firecracker-vm.txt", 1, (), numa=(0,), cpu={0: "0-15"}, pick=(1, None, (0,))),
    Case(
        "rtx5090-2gpu-club3090-1229.txt",
        2,
        ((0, 1, "PHB"),),
        numa=(0, 0),
        cpu={1: "0-63"},
        pick=(2, None, (0, 1)),
    ),
    Case(
        "five-gpu-workstation-club3090-46.txt",
        5,
        ((0, 1, "SYS"), (1, 2, "PHB"), (1, 3, "NODE"), (3, 4, "PHB")),
        numa=(1, 0, 0, 0, 0),
        cpu={0: "8-15,24-31", 1: "0-7,16-23"},
        pick=(4, None, (1, 2, 3, 4)),  # GPU0 is SYS to everyone
    ),
    Case(
        "rtx-a6000-3gpu-nv4-bridge.txt",
        3,
        ((0, 1, "NV4"), (0, 2, "NODE"), (1, 2, "NODE")),
        numa=(0, 0, 0),
        pick=(2, None, (0, 1)),
    ),
    Case(
        "two-gpu-nv2-bridge-env-report.txt",
        2,
        ((0, 1, "NV2"),),
        numa=(0, 0),
        cpu={0: "0-23"},
        pick=(2, None, (0, 1)),
    ),
    Case(
        "a100-adroit-h11g2-4gpu.txt",
        4,
        ((0, 1, "NODE"), (0, 2, "SYS"), (2, 3, "NODE")),
        nics=1,
        numa=(0, 0, 1, 1),
        cpu={0: "0,2,4,6,8,10", 2: "1,3,5,7,9,11"},
        pick=(2, (1, 2, 3), (2, 3)),
    ),
    Case(
        "v100-traverse-power9-1gpu.txt",
        1,
        (),
        nics=4,
        numa=(None,),  # NUMA Affinity '0,8,252-255' is not one node
        cpu={0: "0-3"},
        pick=(1, None, (0,)),
    ),
    Case(
        "della-i16g1-4gpu-nv4.txt",
        4,
        ((0, 1, "NV4"), (0, 3, "NV4")),
        nics=1,
        numa=(0, 0, 1, 1),
        pick=(2, (1, 2, 3), (2, 3)),  # all NV4: one NUMA node wins over lower indices
    ),
    Case(
        "v100-traverse-power9-4gpu-nv3.txt",
        4,
        ((0, 1, "NV3"), (1, 2, "SYS"), (2, 3, "NV3")),
        nics=4,
        numa=(0, 0, 8, 8),
        pick=(2, (1, 2, 3), (2, 3)),
    ),
    Case(
        "dgx-a100-12-mlx5-numa-3-1-7-5.txt",
        8,
        ((0, 7, "NV12"), (2, 5, "NV12")),
        nics=12,
        numa=(3, 3, 1, 1, 7, 7, 5, 5),
        cpu={0: "48-63,176-191", 6: "80-95,208-223"},
        pick=(2, (1, 2, 3), (2, 3)),
    ),
    Case(
        "a100-delta-4gpu-grep-prefix.txt",
        4,
        ((0, 1, "NV4"), (2, 3, "NV4")),
        nics=1,
        numa=(3, 2, 1, 0),
        cpu={0: "48-63", 3: "0-15"},
        pick=(4, None, (0, 1, 2, 3)),
    ),
]

_RANK = {"PIX": 1, "PXB": 2, "PHB": 3, "NODE": 4, "SYS": 5}


def _order_key(label: str) -> tuple[int, int]:
    """The ordering rule as a sortable key: NVLink first, more links first, then PCIe by distance."""
    if label.startswith("NV"):
        return (0, -int(label[2:]))
    return (1, _RANK[label])


@pytest.mark.parametrize("case", CASES, ids=[c.file for c in CASES])
def test_real_capture_parses_to_what_the_matrix_says(case: Case) -> None:
    topo = parse_topo_matrix((CAPTURES / case.file).read_text(encoding="utf-8"), case.file)
    gpu = topo.gpu_topology()
    assert gpu.n == case.gpus
    assert len(topo.nics) == case.nics
    for i, j, label in case.links:
        assert gpu.links[i][j].label == label, (i, j)
        assert gpu.links[j][i].label == label, (j, i)
    if case.numa is not None:
        assert topo.gpu_numa == case.numa
    for i, value in case.cpu.items():
        assert topo.cpu_affinity[topo.gpu_positions[i]] == value
    detected = topo.detected_model()
    assert (detected.name if detected else None) == case.model


@pytest.mark.parametrize("case", [c for c in CASES if c.pick], ids=[c.file for c in CASES if c.pick])
def test_real_capture_best_pick_and_honest_comparison(case: Case) -> None:
    assert case.pick is not None
    count, available, best = case.pick
    node = load_node(str(CAPTURES / case.file))
    topo = node.topology
    assert topo is not None
    free = list(range(topo.n)) if available is None else list(available)
    choice = choose_scored(topo, free, count)
    assert choice.devices == best
    # the set is minimal by the ordering rule itself (compare sorted link lists, worst link first)
    worst_first = sorted((_order_key(topo.links[a][b].label) for a, b in combinations(best, 2)), reverse=True)
    for other in combinations(free, count):
        other_links = sorted(
            (_order_key(topo.links[a][b].label) for a, b in combinations(other, 2)), reverse=True
        )
        assert topo.set_units(other) >= choice.cost_units or other_links < worst_first
    # the aware pick is never reported cheaper than by-index unless it is
    naive = choose_simple(free, count)
    assert choice.cost_units <= topo.set_units(naive)
    if (
        sorted((_order_key(topo.links[a][b].label) for a, b in combinations(naive, 2)), reverse=True)
        == worst_first
    ):
        assert choice.cost_units == topo.set_units(naive)
