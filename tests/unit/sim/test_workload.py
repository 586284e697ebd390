"""Arrivals: the shuffle, the inflation loop with the artifact's stop check, determinism per seed."""

from __future__ import annotations

import numpy as np
import pytest

from kubegpu.errors import InputError
from kubegpu.sim.workload import arrivals, node_order, prepare
from tests.unit.sim.conftest import make_trace

TEN_GPUS = [("n0", 64_000, 1 << 20, 8, "G"), ("n1", 64_000, 1 << 20, 2, "G")]


def demand(workload: object, seq: np.ndarray) -> int:
    return int(workload.shape_total_milli()[workload.pod_shape[seq]].sum())  # type: ignore[attr-defined]


def test_inflation_stops_on_per_gpu_milli_so_a_multi_gpu_pod_can_overshoot() -> None:
    pods = [(f"p{i}", 1000, 10, 2, 1000, "") for i in range(3)]  # 6 of 10 GPUs
    w = prepare(make_trace(TEN_GPUS, pods))
    seq = arrivals(w, 42, 1.3)
    # accepted while total + 1000 <= 13000: 6000, 8000, 10000, 12000 -> 14000, then the next stops
    assert len(seq) == 7
    assert demand(w, seq) == 14_000
    assert sorted(seq[:3].tolist()) == [0, 1, 2]


def test_cpu_only_samples_never_stop_the_inflation() -> None:
    pods = [("cpu", 1000, 10, 0, 0, ""), ("gpu", 1000, 10, 1, 1000, "")]
    w = prepare(make_trace(TEN_GPUS, pods))
    for seed in range(5):
        seq = arrivals(w, seed, 1.3)
        assert demand(w, seq) == 13_000  # stops only when a GPU sample would exceed 13000
        assert (w.pod_shape[seq[2:]] == w.pod_shape[0]).any()  # CPU-only pods were sampled too


def test_inflation_below_the_trace_demand_removes_pods_and_zero_replays_as_is() -> None:
    pods = [(f"p{i}", 1000, 10, 1, 1000, "") for i in range(9)]
    w = prepare(make_trace(TEN_GPUS, pods))
    assert demand(w, arrivals(w, 1, 0.5)) <= 5000
    assert sorted(arrivals(w, 1, 0).tolist()) == list(range(9))
    with pytest.raises(InputError):
        arrivals(w, 1, -1)


@pytest.mark.parametrize("inflate", [float("nan"), float("inf"), -1.0])
def test_an_inflate_that_is_not_a_finite_number_of_zero_or_more_is_refused(inflate: float) -> None:
    w = prepare(make_trace(TEN_GPUS, [("p", 1000, 10, 1, 1000, "")]))
    with pytest.raises(InputError, match="--inflate must be 0"):  # NaN once looped forever here
        arrivals(w, 1, inflate)


def test_a_pod_list_without_gpu_demand_cannot_be_inflated() -> None:
    w = prepare(make_trace(TEN_GPUS, [("cpu", 1000, 10, 0, 0, "")]))
    with pytest.raises(InputError, match="without GPU demand"):
        arrivals(w, 1, 1.3)


def test_arrivals_and_node_order_are_deterministic_per_seed() -> None:
    pods = [(f"p{i:02d}", 1000 + i, 10, 1, 500, "") for i in range(40)]
    w = prepare(make_trace(TEN_GPUS, pods))
    assert arrivals(w, 7, 1.3).tolist() == arrivals(w, 7, 1.3).tolist()
    assert arrivals(w, 7, 1.3).tolist() != arrivals(w, 8, 1.3).tolist()
    assert node_order(50, 3).tolist() == node_order(50, 3).tolist()
    assert sorted(node_order(50, 3).tolist()) == list(range(50))


def test_pods_are_sorted_by_name_before_the_shuffle() -> None:
    pods = [("b", 1000, 10, 1, 500, ""), ("a", 2000, 10, 1, 500, "")]
    w1 = prepare(make_trace(TEN_GPUS, pods))
    w2 = prepare(make_trace(TEN_GPUS, list(reversed(pods))))
    assert w1.pod_names == w2.pod_names == ("a", "b")
    assert arrivals(w1, 3, 0).tolist() == arrivals(w2, 3, 0).tolist()
