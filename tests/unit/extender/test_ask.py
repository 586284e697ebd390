"""A pod's ask is read as kube-scheduler sums it, and GPU asks no node can meet are refused."""

from __future__ import annotations

from decimal import Decimal

import pytest

from kubegpu.errors import PlacementError
from kubegpu.extender.ask import Ask, ask_of, parse_quantity
from tests.unit.extender.conftest import gpu_pod


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("500m", "0.5"),
        ("2", "2"),
        ("1.5Gi", str(1.5 * 2**30)),
        ("1e3", "1000"),
        ("64Mi", str(64 * 2**20)),
        ("1k", "1000"),
    ],
)
def test_quantities_read_as_kubernetes_writes_them(text: str, value: str) -> None:
    assert parse_quantity(text) == Decimal(value)


@pytest.mark.parametrize("text", ["", "abc", "-1", "1Zi"])
def test_a_bad_quantity_is_refused_by_name(text: str) -> None:
    with pytest.raises(PlacementError, match="quantity"):
        parse_quantity(text)


def test_a_share_is_one_gpu_of_that_many_milli() -> None:
    assert ask_of(gpu_pod("a", milli=500, cpu_milli=250, memory_mib=100)) == Ask(
        cpu_milli=250, memory_mib=100, num_gpu=1, gpu_milli=500
    )


def test_whole_gpus_take_1000_milli_each() -> None:
    assert ask_of(gpu_pod("a", gpus=4)).gpu_milli == 1000
    assert ask_of(gpu_pod("a", gpus=4)).num_gpu == 4


def test_init_containers_count_as_their_largest_and_overhead_adds() -> None:
    pod = gpu_pod("a", gpus=1, cpu_milli=1000)
    pod["spec"]["initContainers"] = [
        {"name": "i", "resources": {"requests": {"cpu": "3"}}},
        {"name": "j", "resources": {"limits": {"cpu": "2"}}},
    ]
    pod["spec"]["overhead"] = {"cpu": "100m"}
    assert ask_of(pod).cpu_milli == 3100


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"milli": 500, "gpus": 1}, "not both"), ({"milli": 1500}, "1-1000")],
)
def test_gpu_asks_no_node_can_meet_are_refused(kwargs: dict[str, int], message: str) -> None:
    with pytest.raises(PlacementError, match=message):
        ask_of(gpu_pod("a", **kwargs))
