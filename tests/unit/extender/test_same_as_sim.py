"""One placement code, two engines: the extender places a pod sequence exactly as ``kubegpu sim`` does."""

from __future__ import annotations

import numpy as np
import pytest

from kubegpu.extender.node import gpu_node_of
from kubegpu.extender.workload import typical_of
from kubegpu.sim.kube import node_object
from kubegpu.sim.plan import value_plan_of
from kubegpu.sim.replay import replay
from kubegpu.sim.scoring import Policy
from kubegpu.sim.workload import arrivals, prepare
from tests.unit.extender.conftest import Clock, gpu_pod, ledger
from tests.unit.sim.conftest import make_trace

MODELS = ("G2", "V100M32", "T4")
PINS = ("V100M32", "T4|V100M32", "P100")  # P100: a model no node has (such a pod never fits)


SHARING = [(500, 1, 500), (3000, 1, 810), (12_000, 1, 470), (2000, 1, 470), (4000, 1, 320), (1000, 0, 0)]


def synthetic_trace(seed: int, *, pinned: float = 0.0, sharing: bool = False) -> tuple:
    """14 nodes (one model, or three when ``pinned``) and 90 pods, ``pinned`` of them asking for a
    GPU model (the openb trace's ``gpu_spec``; on a cluster, node affinity on the product label).
    ``sharing``: 160 pods, every GPU pod a share (kubegpu-plan's CPU match is on)."""
    rng = np.random.default_rng(seed)
    nodes = [
        (
            f"node-{i:02d}",
            int(rng.choice([16_000, 32_000, 96_000])),
            1 << 18,
            int(rng.choice([1, 2, 4, 8])),
            str(rng.choice(MODELS)) if pinned else "G2",
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
    if sharing:
        shapes = SHARING
    pods = []
    for i in range(160 if sharing else 90):
        cpu, k, milli = shapes[int(rng.integers(len(shapes)))]
        spec = str(rng.choice(PINS)) if k and float(rng.random()) < pinned else ""
        pods.append((f"pod-{i:03d}", cpu, int(rng.choice([0, 1024, 4096])), k, milli, spec))
    return make_trace(nodes, pods)


@pytest.mark.parametrize(
    ("seed", "pinned", "policy", "sharing"),
    [(1, 0.0, Policy.KUBEGPU, False), (2, 0.0, Policy.KUBEGPU, False), (3, 0.0, Policy.KUBEGPU, False),
     (1, 0.3, Policy.KUBEGPU, False), (2, 0.3, Policy.KUBEGPU, False), (3, 0.3, Policy.KUBEGPU, False),
     (4, 0.3, Policy.KUBEGPU_PLAN, False), (5, 0.3, Policy.KUBEGPU_PLAN, False),
     (6, 0.0, Policy.KUBEGPU_PLAN, True), (7, 0.3, Policy.KUBEGPU_PLAN, True)],
)  # fmt: skip
def test_the_policy_places_every_pod_where_the_simulator_does(
    seed: int, pinned: float, policy: Policy, sharing: bool
) -> None:
    # With pods pinned to GPU models kube-scheduler sends the extender only the nodes of those models;
    # the extender must still score fragmentation against the workload's model-pinned shapes as the
    # simulator does (before, it merged them with the unpinned ones: 88 of 644 pods went elsewhere in
    # the kwok replay).
    trace = synthetic_trace(seed, pinned=pinned, sharing=sharing)
    workload = prepare(trace)
    assert value_plan_of(typical_of(trace.pods)).cpu_match is sharing
    run = replay(workload, policy, seed, inflate=0)
    book = ledger(
        [gpu_node_of(node_object(n)) for n in trace.nodes],  # as the extender reads the kwok nodes
        policy=policy.value,
        typical=typical_of(trace.pods),
        clock=Clock(),
    )
    model_of = {n.name: n.gpu_model for n in trace.nodes}
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
        names = [n for n, m in model_of.items() if not record.gpu_spec or m in record.gpu_spec]
        got.append(book.decide(pod, names).node)  # the nodes kube-scheduler's affinity filter leaves
    assert sum(n is None for n in expected) > 0, "the sequence should fill the cluster"
    if pinned:
        assert any(p.gpu_spec for p in trace.pods)
    assert got == expected
