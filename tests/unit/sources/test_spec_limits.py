"""Node spec values that would be published as labels or DRA attributes stay in range; a cost is a
finite number; a key given twice is refused. Each error is one line naming the file, line and key."""

from __future__ import annotations

import pytest

from kubegpu.errors import SpecError
from kubegpu.sources.spec import parse_spec


@pytest.mark.parametrize(
    ("cost", "message"),
    [
        (".nan", "cost nan is out of range"),
        ("0", "cost 0 is out of range"),
        ("-3", "cost -3 is out of range"),
        ("1e308", "cost '1e308' is out of range: costs are from 0.001 to 1000000"),
        ("1.0e+308", "cost 1e+308 is out of range"),
        ("nope", "cost 'nope' is not a number"),
    ],
)
def test_costs_must_be_finite_and_in_range(cost: str, message: str) -> None:
    text = (
        "gpus: [{model: H100-80GB, count: 2}]\ntopology:\n  tiers: [{link: NV18}]\n"
        f"  costs: [[0, {cost}], [{cost}, 0]]\n"
    )
    with pytest.raises(SpecError, match=r"^n\.yaml:4: topology\.costs\[0\]: ") as exc:
        parse_spec(text, origin="n.yaml")
    assert message in str(exc.value)


def test_an_exponent_cost_in_range_is_a_number() -> None:
    node = parse_spec(
        "gpus: [{model: H100-80GB, count: 2}]\ntopology: {tiers: [{link: NV18, cost: 2e0}]}\n",
        origin="n.yaml",
    )
    assert node.topology is not None and node.topology.cost[0][1] == 2.0


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        (
            "numa: 99999999999999999999999999",
            "gpus[0].numa: 99999999999999999999999999 is out of range: expected an integer from 0 to 1023",
        ),
        ("numa: -1", "gpus[0].numa: -1 is out of range: expected an integer from 0 to 1023"),
        (
            "memory_mib: 99999999999999999999999999999999",
            "gpus[0].memory_mib: 99999999999999999999999999999999 is out of range: "
            "expected an integer from 1 to 16777216",
        ),
        (
            'pci_bus_id: "../../etc/passwd\\n☃"',
            "gpus[0].pci_bus_id: '../../etc/passwd\\n☃' is not a PCI bus ID like 00000000:3B:00.0",
        ),
        ("pci_bus_id: 12", "gpus[0].pci_bus_id: 12 is not a PCI bus ID"),
        ('pci_bus_id: "0000:3b:00.8"', "is not a PCI bus ID"),
    ],
)
def test_published_gpu_values_are_checked(entry: str, message: str) -> None:
    with pytest.raises(SpecError) as exc:
        parse_spec(f"gpus:\n  - {{model: H100-80GB, {entry}}}\n", origin="n.yaml")
    assert str(exc.value).startswith("n.yaml:2: ")
    assert message in str(exc.value)


@pytest.mark.parametrize("bus_id", ["00000000:3B:00.0", "0000:3b:00.0", "00000000:9A:00.0"])
def test_real_pci_bus_ids_are_accepted(bus_id: str) -> None:
    node = parse_spec(
        f'gpus:\n  - {{model: H100-80GB, pci_bus_id: "{bus_id}", numa: 1023, memory_mib: 16777216}}\n',
        origin="n.yaml",
    )
    assert node.gpus[0].pci_bus_id == bus_id


def test_a_node_name_is_a_kubernetes_node_name() -> None:
    long_name = "a" * 254
    with pytest.raises(SpecError, match=r"name: .* is 254 characters long; a node name has at most 253"):
        parse_spec(f"name: {long_name}\ngpus: [{{model: T4}}]\n", origin="n.yaml")
    with pytest.raises(SpecError, match=r"n.yaml:1: name: 'a\.\.b' is not a valid node name"):
        parse_spec("name: a..b\ngpus: [{model: T4}]\n", origin="n.yaml")
    assert parse_spec(f"name: {'a' * 253}\ngpus: [{{model: T4}}]\n", origin="n.yaml").name == "a" * 253


def test_a_key_given_twice_is_refused_with_both_lines() -> None:
    text = "gpus:\n  - {model: H100-80GB}\ngpus:\n  - {model: T4}\n"
    with pytest.raises(
        SpecError, match=r"^n.yaml:3: gpus: the key appears twice in one mapping \(first on line 1\)$"
    ):
        parse_spec(text, origin="n.yaml")
    with pytest.raises(SpecError, match=r"n.yaml:1: gpus\[0\].model: the key appears twice"):
        parse_spec("gpus: [{model: T4, model: H100-80GB}]\n", origin="n.yaml")
