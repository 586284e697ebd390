"""One placement code, two engines: the extender places a pod sequence exactly as ``kubegpu sim`` does."""

from __future__ import annotations

import numpy as np
import pytest

from kubegpu.extender.node import GpuNode
from kubegpu.extender.workload import typical_of
from kubegpu.sim.replay import replay
from kubegpu.sim.scoring import Policy
from kubegpu.sim.workload import arrivals, prepare
from tests.unit.extender.conftest import Clock, gpu_pod, ledger
from tests.unit.sim.conftest import make_trace


def synthetic_trace(seed: int) -> tuple:
    rng = np.random.default_rng(seed)
    nodes = [
        (
            f"node-{i:02d}",
            int(rng.choice([16_000, 32_000, 96_000])),
            1 << 18,
            int(rng.choice([1, 2, 4, 8])),
            "G2",
        )
        for i in range(14)
    ]
    shapes = [
        (500, 1, 500),
        (3000, 1, 810),
        (8000, 1, 1000),
        (2000, 1, 470),
        (12_000, 2, 1000),
        (1000, 0, 0),
        (20_000, 8, 1000),
    ]
    pods = []
    for i in range(90):
        cpu, k, milli = shapes[int(rng.integers(len(shapes)))]
        pods.append((f"pod-{i:03d}", cpu, int(rng.choice([0, 1024, 4096])), k, milli, ""))
    return make_trace(nodes, pods)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_kubegpu_policy_places_every_pod_where_the_simulator_does(seed: int) -> None:
    trace = synthetic_trace(seed)
    workload = prepare(trace)
    run = replay(workload, Policy.KUBEGPU, seed, inflate=0)
    book = ledger(
        [
            GpuNode(
                name=n.name, cpu_milli=n.cpu_milli, memory_mib=n.memory_mib, gpu_count=n.gpu_count, uuids=()
            )
            for n in trace.nodes
        ],
        typical=typical_of(trace.pods),
        clock=Clock(),
    )
    names = [n.name for n in trace.nodes]
    by_name = {p.name: p for p in trace.pods}
    expected, got = [], []
    for step, index in enumerate(arrivals(workload, seed, 0)):
        record = by_name[workload.pod_names[int(index)]]
        pod = gpu_pod(
            f"{record.name}-{step}",
            cpu_milli=record.cpu_milli,
            memory_mib=record.memory_mib,
            **(
                {"gpus": record.num_gpu}
                if record.gpu_milli == 1000
                else {"milli": record.gpu_milli}
                if record.num_gpu
                else {}
            ),
        )
        expected.append(workload.node_names[run.node[step]] if run.placed[step] else None)
        got.append(book.decide(pod, names).node)
    assert sum(n is None for n in expected) > 0, "the sequence should fill the cluster"
    assert got == expected
