"""Topology: link labels, the bandwidth-derived cost table, validation of matrices."""

from __future__ import annotations

import pytest

from kubegpu.errors import InputError
from kubegpu.model.topology import Link, LinkKind, Topology, default_link_cost


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


def test_older_generations_cost_more_for_the_same_path() -> None:
    gen3 = default_link_cost(Link.parse("PIX"), pcie_generation=3)
    gen5 = default_link_cost(Link.parse("PIX"), pcie_generation=5)
    assert gen3 == pytest.approx(4 * gen5, rel=0.01)


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
