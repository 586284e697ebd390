"""The pool planner reproduces the seed's exercise 3 and keeps pools to whole nodes."""

from __future__ import annotations

from pathlib import Path

import pytest

from kubegpu.deviceplugin import config as agent_config
from kubegpu.errors import InputError
from kubegpu.model.gpu import gpu_model
from kubegpu.plan.emit import emit_pools, write_files
from kubegpu.plan.pools import (
    GPU_TAINT,
    MAX_REPLICAS,
    POOL_LABEL,
    PoolKind,
    PoolsPlan,
    PoolsRequest,
    plan_pools,
)

A100 = gpu_model("A100-80GB")


def exercise3(**overrides: object) -> PoolsPlan:
    args: dict[str, object] = {"gpus": 4, "gpu": A100, "users": 20}
    args.update(overrides)
    return plan_pools(PoolsRequest(**args))  # type: ignore[arg-type]


def test_exercise3_two_time_sliced_cards_give_eight_virtual_gpus_and_two_stay_exclusive() -> None:
    plan = exercise3(exclusive=2, replicas=4)
    shared = plan.pool(PoolKind.TIME_SLICED)
    exclusive = plan.pool(PoolKind.EXCLUSIVE)
    assert shared is not None and exclusive is not None
    assert (shared.gpus, shared.replicas, shared.virtual_gpus) == (2, 4, 8)
    assert (exclusive.gpus, exclusive.virtual_gpus) == (2, 2)
    assert plan.users_per_virtual_gpu == pytest.approx(2.5)


def test_default_split_is_half_and_half() -> None:
    plan = exercise3()
    assert [(p.kind, p.gpus) for p in plan.pools] == [(PoolKind.TIME_SLICED, 2), (PoolKind.EXCLUSIVE, 2)]


def test_warns_that_time_slicing_isolates_no_memory() -> None:
    plan = exercise3()
    assert any("isolates no memory" in w for w in plan.warnings)
    assert plan.memory_fraction_per_replica == pytest.approx(0.25)


def test_pools_are_kept_apart_by_label_and_taint() -> None:
    plan = exercise3()
    for pool in plan.pools:
        assert pool.node_labels[POOL_LABEL] == pool.kind.value
        assert GPU_TAINT in pool.taints
        assert any(t.key == POOL_LABEL and t.value == pool.kind.value for t in pool.taints)


def test_experiments_get_a_deadline_and_a_low_non_preempting_priority() -> None:
    plan = exercise3(deadline_hours=2)
    assert plan.active_deadline_seconds == 7200
    low = next(pc for pc in plan.priority_classes if pc.name == plan.pools[0].priority_class)
    high = next(pc for pc in plan.priority_classes if pc.name == plan.pools[1].priority_class)
    assert low.value < high.value and not low.preempt


def test_all_exclusive_leaves_no_shared_pool_and_says_so() -> None:
    plan = exercise3(exclusive=4)
    assert [p.kind for p in plan.pools] == [PoolKind.EXCLUSIVE]
    assert plan.users_per_virtual_gpu is None
    assert any("no time-sliced pool" in w for w in plan.warnings)


@pytest.mark.parametrize(
    ("overrides", "flag"),
    [
        ({"gpus": 0}, "--gpus"),
        ({"users": 0}, "--users"),
        ({"replicas": 1}, "--replicas"),
        ({"exclusive": 5}, "--exclusive"),
        ({"exclusive": -1}, "--exclusive"),
        ({"gpus_per_node": 3}, "--gpus 4 is not a whole number"),
        ({"gpus": 8, "gpus_per_node": 4, "exclusive": 2}, "--exclusive 2"),
        ({"deadline_hours": 0}, "--deadline-hours"),
        ({"replicas": MAX_REPLICAS + 1}, "--replicas"),
        ({"gpus": 10**20}, "--gpus"),
        ({"users": 10**20}, "--users"),
        ({"gpus_per_node": 10**20}, "--gpus-per-node"),
    ],
)
def test_bad_input_names_the_flag(overrides: dict[str, object], flag: str) -> None:
    with pytest.raises(InputError, match=flag):
        exercise3(**overrides)


def test_the_replica_limit_is_the_agents_and_its_largest_plan_loads_in_the_agent(tmp_path: Path) -> None:
    assert agent_config.MAX_REPLICAS == MAX_REPLICAS
    write_files(tmp_path, emit_pools(exercise3(replicas=MAX_REPLICAS)))
    loaded = agent_config.load_config(tmp_path / "device-plugin-config-time-sliced.yaml")
    assert loaded.sharing is not None
    assert [r.replicas for r in loaded.sharing.resources] == [MAX_REPLICAS]
