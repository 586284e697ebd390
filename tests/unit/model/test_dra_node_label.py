"""A ResourceSlice's ``kubegpu.io/node`` label holds the node name cut to a valid label value."""

from __future__ import annotations

from kubegpu.model.dra import resource_slices


def test_a_long_node_name_is_cut_to_a_valid_label_value() -> None:
    name = "a" * 62 + "-" + "b" * 100  # cut at 63, it would end with '-'
    (slice_,) = resource_slices(node_name=name, node_uid=None, devices=[], generation=1)
    value = slice_["metadata"]["labels"]["kubegpu.io/node"]
    assert value == "a" * 62
