"""A topology's costs are finite numbers in range and NVLink bonds are of a real width, whatever
source built it: ``inf`` would break the integer sums the allocator compares."""

from __future__ import annotations

import math

import pytest

from kubegpu.errors import InputError
from kubegpu.model.topology import Link, LinkKind, Topology


@pytest.mark.parametrize("cost", [math.inf, 1e308, 0.0, 0.0001, -1.0])
def test_a_cost_out_of_range_is_an_input_error(cost: float) -> None:
    links = [
        [Link(kind=LinkKind.SELF), Link(kind=LinkKind.SYS)],
        [Link(kind=LinkKind.SYS), Link(kind=LinkKind.SELF)],
    ]
    with pytest.raises(InputError, match=r"cost GPU0-GPU1 is .*; a cost is a number from 0\.001 to 1000000"):
        Topology.from_links(links, costs=[[0.0, cost], [cost, 0.0]])


@pytest.mark.parametrize("label", ["NV0", "NV65", "NV99999999999999999999", "NV" + "9" * 5000, "NV٣"])
def test_nvlink_widths_outside_1_to_64_are_refused(label: str) -> None:
    with pytest.raises(InputError):
        Link.parse(label)
    assert Link.parse("NV64").nvlinks == 64
