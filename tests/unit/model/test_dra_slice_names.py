"""A ResourceSlice's name and ``kubegpu.io/node`` label stay valid for any valid node name."""

from __future__ import annotations

import re

from kubegpu.model.dra import DRIVER_NAME, resource_slices, slice_name

_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?")


def test_a_long_node_name_is_cut_to_a_valid_label_value() -> None:
    name = "a" * 62 + "-" + "b" * 100  # cut at 63, it would end with '-'
    (slice_,) = resource_slices(node_name=name, node_uid=None, devices=[], generation=1)
    value = slice_["metadata"]["labels"]["kubegpu.io/node"]
    assert value == "a" * 62


def test_a_usual_node_name_gives_node_driver_index() -> None:
    assert slice_name("gpu-node-1", DRIVER_NAME, 0) == "gpu-node-1-gpu.kubegpu.io-0"


def test_names_stay_object_names_and_unique_for_node_names_near_253_characters() -> None:
    # two node names of 253 characters that differ only at the end: their slices must not collide
    a, b = "n" * 240 + "." + "a" * 12, "n" * 240 + "." + "b" * 12
    names = {slice_name(node, DRIVER_NAME, k) for node in (a, b) for k in range(3)}
    assert len(names) == 6
    for name in names:
        assert len(name) <= 253
        assert _SUBDOMAIN.fullmatch(name), name
    assert slice_name(a, DRIVER_NAME, 1) == slice_name(a, DRIVER_NAME, 1)  # stable: publishing replaces


def test_resource_slices_use_those_names() -> None:
    node = "x" * 253
    (slice_,) = resource_slices(node_name=node, node_uid=None, devices=[], generation=1)
    assert slice_["metadata"]["name"] == slice_name(node, DRIVER_NAME, 0)
    assert len(slice_["metadata"]["name"]) <= 253
