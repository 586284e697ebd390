"""Curves: the artifact's discretisation (rounding, averaging, the +-1 fallback) and seed averages."""

from __future__ import annotations

import numpy as np
import pytest

from kubegpu.sim.curves import alloc_at, discrete_curve, summarise
from kubegpu.sim.replay import replay
from kubegpu.sim.scoring import Policy
from kubegpu.sim.workload import prepare
from tests.unit.sim.conftest import make_trace


def test_value_at_x_is_the_mean_of_the_rounded_values_of_arrivals_rounding_to_x() -> None:
    arrived = np.array([0.2, 0.4, 0.6, 1.4, 3.0])
    value = np.array([0.111, 0.222, 0.5, 1.0, 2.0])
    curve = discrete_curve(arrived, value, 5)
    assert curve[0] == pytest.approx(round((0.11 + 0.22) / 2, 2))
    assert curve[1] == pytest.approx((0.5 + 1.0) / 2)
    # nothing rounds to 2: the arrivals within 1 point (1.4 -> 1, 3.0 -> 3) are used
    assert curve[2] == pytest.approx((0.5 + 1.0 + 2.0) / 3, abs=0.006)
    assert curve[3] == 2.0
    assert curve[4] == 2.0  # only 3 is within one point of 4


def test_points_with_no_arrival_nearby_are_missing() -> None:
    curve = discrete_curve(np.array([0.0, 1.0]), np.array([1.0, 2.0]), 6)
    assert np.isnan(curve[3:]).all()


def test_half_points_round_to_even_like_the_artifact() -> None:
    curve = discrete_curve(np.array([0.5, 2.5]), np.array([7.0, 9.0]), 4)
    assert curve[0] == 7.0 and curve[2] == 9.0  # 0.5 -> 0 and 2.5 -> 2


def test_summary_averages_seeds_and_counts_failures_by_shape() -> None:
    nodes = [(f"n{i}", 16000, 1 << 20, 2, "G") for i in range(3)]
    pods = [(f"p{i}", 4000, 10, 1, 1000, "") for i in range(4)] + [("big", 1000, 10, 2, 1000, "")]
    w = prepare(make_trace(nodes, pods))
    runs = [replay(w, Policy.FGD, seed, inflate=1.3) for seed in (1, 2, 3)]
    s = summarise(runs, w.shape_labels, points=131)
    assert s.seeds == (1, 2, 3)
    mean_100, std_100 = s.at(100)
    assert mean_100 is not None and 0 < mean_100 <= 100 and std_100 is not None
    failed = sum(n for _, n in s.failed_by_shape)
    assert failed == pytest.approx(np.mean([(~r.placed).sum() for r in runs]))
    assert s.unallocated_gpus(100) == pytest.approx((1 - mean_100 / 100) * 6, abs=0.06)


def test_one_seeds_allocation_at_a_point_is_what_the_summary_averages() -> None:
    nodes = [(f"n{i}", 64000, 1 << 20, 2, "G") for i in range(8)]
    pods = [(f"p{i}", 1000, 10, 1, (100, 150, 250, 1000)[i % 4], "") for i in range(40)]
    w = prepare(make_trace(nodes, pods))
    runs = [replay(w, Policy.FGD, seed, inflate=1.3) for seed in (1, 2, 3)]
    s = summarise(runs, w.shape_labels, points=131)
    points = 0
    for pct in range(131):
        values = [v for run in runs if (v := alloc_at(run, pct)) is not None]
        mean, _ = s.at(pct)
        if values:  # the summary averages the seeds that have a point there
            points += 1
            assert mean == pytest.approx(float(np.mean(values)), abs=0.005 + 1e-9)  # rounded to 2 decimals
        else:
            assert mean is None
    assert points > 100
    assert alloc_at(runs[0], 131) is None  # past the curve's last point
    assert alloc_at(runs[0], -1) is None


def _curve_by_mask(arrived_pct: np.ndarray, value_pct: np.ndarray, points: int) -> np.ndarray:
    """The definition: the mean of the (2-decimal) values whose arrived % rounds to x, else x +- 1."""
    bucket, values = np.round(arrived_pct), np.round(value_pct, 2)
    out = np.full(points, np.nan)
    for x in range(points):
        sel = bucket == x
        if not sel.any():
            sel = (bucket >= x - 1) & (bucket <= x + 1)
        if sel.any():
            out[x] = round(float(values[sel].mean()), 2)
    return out


@pytest.mark.parametrize("seed", range(5))
def test_curve_of_growing_demand_equals_the_per_point_definition_bit_for_bit(seed: int) -> None:
    rng = np.random.default_rng(seed)
    steps = rng.choice([0.0, 0.01, 0.3, 1.7, 3.2], size=3000, p=[0.2, 0.4, 0.3, 0.07, 0.03])
    arrived = np.cumsum(steps)  # demand only grows; big steps leave points with no arrival
    values = rng.uniform(0, 100, size=arrived.size) / 3.0
    got = discrete_curve(arrived, values, 140)
    want = _curve_by_mask(arrived, values, 140)
    assert np.array_equal(got, want, equal_nan=True)
    assert np.isnan(got).any() and not np.isnan(got).all()
    shuffled = rng.permutation(arrived.size)  # not monotone: the general path, same definition
    assert np.array_equal(
        discrete_curve(arrived[shuffled], values[shuffled], 140),
        _curve_by_mask(arrived[shuffled], values[shuffled], 140),
        equal_nan=True,
    )
