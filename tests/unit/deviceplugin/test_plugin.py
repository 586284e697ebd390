"""The resource manager: preferred sets stay inside what kubelet offers; Allocate validates first."""

from __future__ import annotations

import threading
from itertools import combinations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kubegpu.deviceplugin.config import AgentConfig
from kubegpu.deviceplugin.inventory import build_inventory
from kubegpu.deviceplugin.plugin import ResourcePlugin
from kubegpu.errors import DeviceRequestError, DeviceRequestProblem
from kubegpu.health.policy import HealthPolicy
from kubegpu.health.tracker import HealthTracker
from kubegpu.model.event import GpuEvent, GpuEventKind
from kubegpu.sources.spec import load_node
from tests.unit.deviceplugin.test_inventory import _shared

SEED = load_node("builtin:seed-8gpu")
HGX = load_node("builtin:hgx-16")
UUIDS = [g.uuid for g in SEED.gpus]


def make(
    node=SEED, config: AgentConfig | None = None, index: int = 0
) -> tuple[ResourcePlugin, HealthTracker]:
    config = config or AgentConfig()
    inventory = build_inventory(node, config)
    tracker = HealthTracker(
        gpu_count=len(node.gpus), aliases={g.uuid: g.index for g in node.gpus}, policy=HealthPolicy()
    )
    plugin = ResourcePlugin(
        resource=inventory.resources[index],
        topology=node.topology,
        config=config,
        tracker=tracker,
        annotation_id=lambda: "fixed",
    )
    return plugin, tracker


def test_seed_case_prefers_gpus_4_to_7_from_2_to_7() -> None:
    plugin, _ = make()
    assert sorted(plugin.preferred(UUIDS[2:], [], 4)) == sorted(UUIDS[4:])


def test_preferred_is_the_minimum_cost_set() -> None:
    plugin, _ = make(HGX)
    uuids = [g.uuid for g in HGX.gpus]
    available = [0, 3, 5, 8, 9, 10, 14]
    got = plugin.preferred([uuids[i] for i in available], [], 3)
    chosen = sorted(uuids.index(u) for u in got)
    topo = HGX.topology
    assert topo is not None
    best = min(topo.set_cost(c) for c in combinations(available, 3))
    assert topo.set_cost(chosen) == best


@settings(max_examples=60, deadline=None)
@given(
    available=st.lists(st.integers(0, 15), min_size=1, max_size=16, unique=True),
    size=st.integers(1, 16),
    data=st.data(),
)
def test_preferred_only_returns_offered_ids_and_keeps_must_include(available, size, data) -> None:
    plugin, _ = make(HGX)
    uuids = [g.uuid for g in HGX.gpus]
    offered = [uuids[i] for i in available]
    must = data.draw(st.lists(st.sampled_from(offered), max_size=min(size, len(available)), unique=True))
    got = plugin.preferred(offered, must, size)
    assert set(got) <= set(offered)
    assert set(must) <= set(got)
    assert len(got) == len(set(got)) == min(size, len(available))


def test_preferred_skips_gpus_it_knows_are_unhealthy_unless_required() -> None:
    plugin, tracker = make()
    tracker.apply(GpuEvent(gpu=5, kind=GpuEventKind.XID, xid=79))
    assert UUIDS[5] not in plugin.preferred(UUIDS[4:], [], 3)
    assert UUIDS[5] in plugin.preferred(UUIDS[4:], [UUIDS[5]], 3)


def test_unknown_topology_falls_back_to_simple_choice() -> None:
    config = AgentConfig()
    inventory = build_inventory(SEED, config)
    tracker = HealthTracker(gpu_count=8, aliases={}, policy=HealthPolicy())
    plugin = ResourcePlugin(resource=inventory.resources[0], topology=None, config=config, tracker=tracker)
    assert plugin.preferred(UUIDS[3:], [], 2) == (UUIDS[3], UUIDS[4])


def test_allocate_rejects_unknown_ids_before_anything_else() -> None:
    plugin, _ = make()
    with pytest.raises(DeviceRequestError) as err:
        plugin.allocate([UUIDS[0], "GPU-elsewhere"])
    assert err.value.problem is DeviceRequestProblem.UNKNOWN_DEVICE
    assert "GPU-elsewhere" in str(err.value)
    with pytest.raises(DeviceRequestError) as empty:
        plugin.allocate([])
    assert empty.value.problem is DeviceRequestProblem.EMPTY


@pytest.mark.parametrize(
    ("available", "must"),
    [
        ([UUIDS[0], "GPU-stranger"], ["GPU-stranger"]),  # once returned: available and must-include
        ([UUIDS[0], UUIDS[1], "GPU-stranger"], []),
        ([UUIDS[0]], ["GPU-stranger"]),
    ],
)
def test_preferred_refuses_ids_the_plugin_never_advertised(available: list[str], must: list[str]) -> None:
    plugin, _ = make()
    with pytest.raises(DeviceRequestError, match="GPU-stranger") as err:
        plugin.preferred(available, must, 1)
    assert err.value.problem is DeviceRequestProblem.UNKNOWN_DEVICE


def test_allocate_refuses_an_id_named_twice_and_a_request_without_containers() -> None:
    plugin, _ = make()
    with pytest.raises(DeviceRequestError, match="named twice") as twice:
        plugin.allocate([UUIDS[1], UUIDS[2], UUIDS[1]])
    assert twice.value.problem is DeviceRequestProblem.DUPLICATE_DEVICE
    assert UUIDS[1] in str(twice.value)
    with pytest.raises(DeviceRequestError) as none:
        plugin.allocate_containers([])
    assert none.value.problem is DeviceRequestProblem.EMPTY
    with pytest.raises(DeviceRequestError) as second_bad:  # nothing is built if any container is bad
        plugin.allocate_containers([[UUIDS[0]], ["GPU-elsewhere"]])
    assert second_bad.value.problem is DeviceRequestProblem.UNKNOWN_DEVICE
    assert [a.envs["NVIDIA_VISIBLE_DEVICES"] for a in plugin.allocate_containers([[UUIDS[0]]])] == [UUIDS[0]]


def test_a_16kb_unknown_id_is_echoed_short() -> None:
    plugin, _ = make()
    with pytest.raises(DeviceRequestError) as err:
        plugin.allocate(["GPU-" + "x" * 16_380])
    assert len(str(err.value)) < 250 and "(16384 bytes)" in str(err.value)


def test_allocate_rejects_a_replica_of_a_failed_gpu() -> None:
    plugin, tracker = make(config=_shared(3))
    tracker.apply(GpuEvent(gpu=2, kind=GpuEventKind.ECC_DOUBLE_BIT))
    with pytest.raises(DeviceRequestError, match="double-bit") as err:
        plugin.allocate([f"{UUIDS[2]}::1"])
    assert err.value.problem is DeviceRequestProblem.UNHEALTHY
    assert plugin.allocate([f"{UUIDS[3]}::1"]).envs["NVIDIA_VISIBLE_DEVICES"] == UUIDS[3]


def test_fail_requests_greater_than_one_applies_to_shared_resources() -> None:
    config = _shared(3)
    assert config.sharing is not None
    from dataclasses import replace

    strict = replace(config, sharing=replace(config.sharing, fail_requests_greater_than_one=True))
    plugin, _ = make(config=strict)
    with pytest.raises(DeviceRequestError, match="maximum request size for shared resources is 1"):
        plugin.allocate([f"{UUIDS[0]}::0", f"{UUIDS[0]}::1"])
    plugin.allocate([f"{UUIDS[0]}::0"])


def test_replica_policy_distributed_spreads_and_counts_replicas_in_use() -> None:
    plugin, _ = make(config=_shared(3))
    all_ids = [d.id for d in plugin.resource.devices]
    got = plugin.preferred(all_ids, [], 8)
    assert len({i.split("::")[0] for i in got}) == 8
    # GPU 0 already has two replicas in use (not offered): the next single replica comes elsewhere
    offered = [i for i in all_ids if i not in (f"{UUIDS[0]}::0", f"{UUIDS[0]}::1")]
    assert not plugin.preferred(offered, [], 1)[0].startswith(UUIDS[0])


def test_watch_sends_a_new_snapshot_when_a_gpu_fails_and_every_replica_follows() -> None:
    plugin, tracker = make(config=_shared(4))
    stop = threading.Event()
    stream = plugin.watch(lambda: True, stop, poll_s=0.05)
    first = next(stream)
    assert all(s.healthy for s in first)
    tracker.apply(GpuEvent(gpu=UUIDS[6], kind=GpuEventKind.LOST))
    second = next(stream)
    assert {s.id for s in second if not s.healthy} == {f"{UUIDS[6]}::{i}" for i in range(4)}
    tracker.apply(GpuEvent(gpu=6, kind=GpuEventKind.HEALTHY))
    assert all(s.healthy for s in next(stream))
    stop.set()
    plugin.wake()
    assert list(stream) == []
