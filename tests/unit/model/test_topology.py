"""Topology: link labels, the bandwidth-derived cost table, validation of matrices."""

from __future__ import annotations

import pytest

from kubegpu.errors import InputError
from kubegpu.model.gpu import NVLINK_LINK_GBPS, PCIE_X16_GBPS
from kubegpu.model.topology import Link, LinkKind, Topology, default_link_cost, fallback_link_cost


@pytest.mark.parametrize("label", ["X", "NV1", "NV12", "NV18", "PIX", "PXB", "PHB", "NODE", "SYS"])
def test_labels_round_trip(label: str) -> None:
    assert Link.parse(label).label == label


def test_soc_is_the_old_name_of_sys_and_garbage_is_rejected() -> None:
    assert Link.parse("SOC").kind is LinkKind.SYS
    with pytest.raises(InputError, match="unknown link type"):
        Link.parse("NVX")


def test_more_nvlinks_cost_less_and_pcie_hops_cost_more() -> None:
    nv = [default_link_cost(Link(kind=LinkKind.NVLINK, nvlinks=k)) for k in (1, 2, 4, 6, 12, 18)]
    assert nv == sorted(nv, reverse=True)
    assert default_link_cost(Link.parse("NV18")) == 1.0  # the reference: H100's 450 GB/s
    pcie = [default_link_cost(Link.parse(x)) for x in ("PIX", "PXB", "PHB", "NODE", "SYS")]
    assert pcie == sorted(pcie)
    # on H100 (PCIe gen 5) even one PIX hop is slower than four bonded NVLinks
    assert default_link_cost(Link.parse("PIX")) > default_link_cost(Link.parse("NV4"))


def test_older_generations_never_cost_less_for_the_same_path() -> None:
    for label in ("PIX", "PXB", "PHB", "NODE", "SYS"):
        gen3 = default_link_cost(Link.parse(label), nvlink_generation=2, pcie_generation=3)
        gen4 = default_link_cost(Link.parse(label), nvlink_generation=2, pcie_generation=4)
        assert gen3 > gen4


_PCIE = ("PIX", "PXB", "PHB", "NODE", "SYS")


def _ordered(cost: dict[str, float]) -> None:
    nv = [cost[f"NV{k}"] for k in range(1, 19)]
    assert nv == sorted(nv, reverse=True) and len(set(nv)) == 18, "more NVLinks must cost less"
    pcie = [cost[x] for x in _PCIE]
    assert pcie == sorted(pcie) and len(set(pcie)) == 5, "PIX < PXB < PHB < NODE < SYS"
    assert max(nv) < min(pcie), "any NVLink path must cost less than any PCIe path"


@pytest.mark.parametrize("nvlink_generation", [*NVLINK_LINK_GBPS, None])
@pytest.mark.parametrize("pcie_generation", [*PCIE_X16_GBPS, None])
def test_link_ordering_holds_for_every_generation(
    nvlink_generation: int | None, pcie_generation: int | None
) -> None:
    labels = [f"NV{k}" for k in range(1, 19)] + list(_PCIE)
    _ordered(
        {
            x: default_link_cost(
                Link.parse(x), nvlink_generation=nvlink_generation, pcie_generation=pcie_generation
            )
            for x in labels
        }
    )


def test_fallback_table_keeps_the_ordering_and_its_documented_values() -> None:
    labels = [f"NV{k}" for k in range(1, 19)] + list(_PCIE)
    table = {x: fallback_link_cost(Link.parse(x)) for x in labels}
    _ordered(table)
    assert (table["NV1"], table["NV18"], table["PIX"], table["SYS"]) == (18.0, 1.0, 22.5, 56.25)
    # the DGX-1 case: one NVLink is cheaper than a cross-socket PCIe path
    assert table["NV1"] < table["SYS"]


def test_numa_nodes_must_cover_every_gpu() -> None:
    x, nv = Link.parse("X"), Link.parse("NV2")
    with pytest.raises(InputError, match="NUMA nodes given for 1 GPUs"):
        Topology(n=2, links=((x, nv), (nv, x)), cost=((0, 1), (1, 0)), numa=(0,))
    topo = Topology.from_links([[x, nv], [nv, x]], numa=[0, 0])
    assert topo.on_one_numa_node([0, 1])
    assert Topology.from_links([[x, nv], [nv, x]], numa=[None, None]).numa == ()


def test_seed_groups_give_the_seeds_costs() -> None:
    topo = Topology.from_groups(8, [(0, 1, 2, 3), (4, 5, 6, 7)])
    assert topo.set_cost([2, 3, 4, 5]) == 18
    assert topo.set_cost([4, 5, 6, 7]) == 6
    assert topo.nvlink_groups == ((0, 1, 2, 3), (4, 5, 6, 7))


def test_asymmetric_link_matrix_is_rejected_naming_the_pair() -> None:
    x, nv, sys_ = Link.parse("X"), Link.parse("NV2"), Link.parse("SYS")
    with pytest.raises(InputError, match="GPU0-GPU1"):
        Topology.from_links([[x, nv], [sys_, x]])


def test_a_gpu_in_two_groups_is_rejected() -> None:
    with pytest.raises(InputError, match="GPU 1 is in NVLink groups 0 and 1"):
        Topology.from_groups(4, [(0, 1), (1, 2)])
