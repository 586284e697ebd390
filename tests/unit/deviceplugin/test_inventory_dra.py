"""kubegpu.dra.gpus: the GPUs the DRA driver serves are left out of the device plugin's inventory."""

from __future__ import annotations

import dataclasses

import pytest

from kubegpu.deviceplugin.config import AgentConfig
from kubegpu.deviceplugin.inventory import build_inventory
from kubegpu.errors import ConfigError
from kubegpu.model.dra import DraGpus, dra_devices
from kubegpu.sources.spec import load_node


def gpus_of(config: AgentConfig, spec: str = "builtin:seed-8gpu") -> set[int]:
    inventory = build_inventory(load_node(spec), config)
    return {d.gpu for r in inventory.resources for d in r.devices}


def test_by_default_the_device_plugin_serves_every_gpu() -> None:
    assert gpus_of(AgentConfig()) == set(range(8))


def test_gpus_given_to_dra_are_not_advertised_and_dra_publishes_exactly_them() -> None:
    dra = DraGpus(indexes=frozenset({6, 7}))
    assert gpus_of(dataclasses.replace(AgentConfig(), dra_gpus=dra)) == set(range(6))
    node = load_node("builtin:seed-8gpu")
    assert {d.gpu_index for d in dra_devices(node, include=lambda g: dra.serves(g.index))} == {6, 7}


def test_all_to_dra_leaves_the_device_plugin_nothing_to_advertise() -> None:
    inventory = build_inventory(
        load_node("builtin:h100-mig-mixed"), dataclasses.replace(AgentConfig(), dra_gpus=DraGpus(all=True))
    )
    assert inventory.resources == ()


def test_an_index_the_node_does_not_have_is_refused_naming_the_key() -> None:
    with pytest.raises(ConfigError, match=r"kubegpu.dra.gpus: GPU 9 is not on this node"):
        build_inventory(
            load_node("builtin:seed-8gpu"),
            dataclasses.replace(AgentConfig(), dra_gpus=DraGpus(indexes=frozenset({9}))),
        )
