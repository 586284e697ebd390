"""The communication planner reproduces the seed's exercise 2 and rejects meaningless input."""

from __future__ import annotations

import pytest

from kubegpu.errors import InputError
from kubegpu.plan.comm import CommRequest, plan_comm


def seed(**overrides: object) -> CommRequest:
    args: dict[str, object] = {
        "tp": 4,
        "layers": 80,
        "allreduce_mb": 1.0,
        "per_layer": 2,
        "link_gbs": 450.0,
        "cross_gbs": 60.0,
    }
    args.update(overrides)
    return CommRequest(**args)  # type: ignore[arg-type]


def test_exercise2_ring_sends_one_and_a_half_mb_per_gpu() -> None:
    plan = plan_comm(seed())
    assert plan.bytes_per_gpu == pytest.approx(1.5e6)
    assert plan.allreduces_per_step == 160


def test_exercise2_all_reduce_takes_3_3_us_inside_and_25_us_across() -> None:
    plan = plan_comm(seed())
    assert plan.inside.allreduce_us == pytest.approx(3.33, abs=0.01)
    assert plan.across.allreduce_us == pytest.approx(25.0, abs=0.01)


def test_exercise2_step_costs_0_53_ms_inside_and_4_ms_across() -> None:
    plan = plan_comm(seed())
    assert plan.inside.step_comm_ms == pytest.approx(0.533, abs=0.001)
    assert plan.across.step_comm_ms == pytest.approx(4.0, abs=0.001)
    assert plan.comm_ratio == pytest.approx(7.5)


def test_a_few_ms_decode_step_more_than_doubles_across_groups() -> None:
    plan = plan_comm(seed(base_step_ms=3.0))
    assert plan.inside.step_ms == pytest.approx(3.533, abs=0.001)
    assert plan.across.step_ms == pytest.approx(7.0, abs=0.001)
    assert plan.across.slowdown is not None and plan.across.slowdown > 2


@pytest.mark.parametrize(
    ("overrides", "flag"),
    [
        ({"tp": 1}, "--tp"),
        ({"layers": 0}, "--layers"),
        ({"per_layer": 0}, "--per-layer"),
        ({"allreduce_mb": -1.0}, "--allreduce-mb"),
        ({"link_gbs": 0.0}, "--link-gbs"),
        ({"cross_gbs": float("nan")}, "--cross-gbs"),
        ({"tp": 10**20}, "--tp"),
        ({"layers": 10**9}, "--layers"),
        ({"allreduce_mb": 1e308}, "--allreduce-mb"),
        ({"link_gbs": 1e-320}, "--link-gbs"),
        ({"cross_gbs": float("inf")}, "--cross-gbs"),
        ({"base_step_ms": float("inf")}, "--step-ms"),
    ],
)
def test_meaningless_input_names_the_flag(overrides: dict[str, object], flag: str) -> None:
    with pytest.raises(InputError, match=flag):
        plan_comm(seed(**overrides))
