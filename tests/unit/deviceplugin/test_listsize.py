"""kubelet reads ListAndWatch with gRPC's 4 MiB limit (issue 57, item 4): the agent computes the
answer's exact size and refuses a resource kubelet could not read, naming what fits instead."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kubegpu.deviceplugin.api import v1beta1_pb2 as pb
from kubegpu.deviceplugin.config import load_config
from kubegpu.deviceplugin.inventory import build_inventory
from kubegpu.deviceplugin.listsize import LIMIT_BYTES, check_inventory, list_size, response_bytes
from kubegpu.errors import ConfigError
from kubegpu.sources.spec import load_node

device = st.tuples(
    st.text(max_size=80),
    st.none() | st.integers(min_value=-(2**63), max_value=2**63 - 1),
)


def serialized(devices: list[tuple[str, int | None]]) -> int:
    """What the servicer sends (``kubegpu.deviceplugin.server._device``), every device unhealthy."""
    message = pb.ListAndWatchResponse()
    for device_id, numa in devices:
        d = message.devices.add(ID=device_id, health="Unhealthy")
        if numa is not None:
            d.topology.nodes.add(ID=numa)
    return len(message.SerializeToString())


@given(st.lists(device, max_size=20))
def test_the_computed_size_is_the_protobuf_messages_own(devices: list[tuple[str, int | None]]) -> None:
    assert response_bytes(devices) == serialized(devices)


def config(tmp_path, text: str):  # type: ignore[no-untyped-def]
    path = tmp_path / "config.yaml"
    path.write_text(text)
    return load_config(path)


def time_sliced(replicas: int) -> str:
    return (
        "version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
        f"    - name: nvidia.com/gpu\n      replicas: {replicas}\n"
    )


def test_a_real_inventorys_size_matches_the_serialized_answer(tmp_path) -> None:  # type: ignore[no-untyped-def]
    inventory = build_inventory(load_node("builtin:dgx-h100"), config(tmp_path, time_sliced(40)))
    (resource,) = inventory.resources
    devices = [(d.id, d.numa_node) for d in resource.devices]
    assert list_size(resource).size_bytes == serialized(devices)


def test_an_nvl72_node_with_1000_replicas_is_refused_naming_resource_count_and_what_fits(
    tmp_path,  # type: ignore[no-untyped-def]
) -> None:
    inventory = build_inventory(load_node("builtin:nvl72-hier"), config(tmp_path, time_sliced(1000)))
    assert len(inventory.resources[0].devices) == 72_000  # > 66,700: kubelet cannot read it
    with pytest.raises(ConfigError) as refused:
        check_inventory(inventory)
    message = str(refused.value)
    assert message.startswith("nvidia.com/gpu: 72,000 devices")
    assert "4 MiB" in message and "\n" not in message
    most = int(message.rsplit("at most ", maxsplit=1)[-1].split(" replicas", maxsplit=1)[0])
    assert 700 < most < 927  # 927 replicas already pass 4 MiB; the margin keeps 3.5 MiB
    # the number named is exact: it fits, one more does not
    fits = build_inventory(load_node("builtin:nvl72-hier"), config(tmp_path, time_sliced(most)))
    check_inventory(fits)
    over = build_inventory(load_node("builtin:nvl72-hier"), config(tmp_path, time_sliced(most + 1)))
    assert list_size(over.resources[0]).size_bytes > LIMIT_BYTES


def test_gpu_milli_shares_on_72_gpus_are_refused_naming_the_gpus_that_fit(tmp_path) -> None:  # type: ignore[no-untyped-def]
    inventory = build_inventory(
        load_node("builtin:nvl72-hier"), config(tmp_path, "version: v1\nkubegpu:\n  fractional: true\n")
    )
    with pytest.raises(ConfigError, match=r"^kubegpu.io/gpu-milli: 72,000 devices .* at most \d+ GPUs"):
        check_inventory(inventory)


def test_ordinary_configs_pass(tmp_path) -> None:  # type: ignore[no-untyped-def]
    for text in ("version: v1\n", time_sliced(100), "version: v1\nkubegpu:\n  fractional: true\n"):
        check_inventory(build_inventory(load_node("builtin:dgx-h100"), config(tmp_path, text)))
