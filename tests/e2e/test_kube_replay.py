"""A scaled-down openb replay on the real control plane (issue 15): kwok nodes, a real kube-scheduler with
`kubegpu extender`, and every placement equal to `kubegpu sim`'s for the same arrivals.

122 kwok nodes and the arrivals of seed 42 from 819 pods, inflated to 100 % of the nodes' GPUs (the
last ones find no room), go through the rig's
API server to a second kube-scheduler configured with the extender (filter + bind,
percentageOfNodesToScore 100, every pod sent to it), policy `kubegpu`, the subset's pods as its
workload. Each pod's node and GPUs (indices, and the UUIDs the node publishes) must be the ones the
simulator picks, the pods the simulator drops must be refused, and kwok must turn the placed pods
Running. The trace is synthetic, in the openb schema (``synthetic_trace``: the openb trace is not
redistributed with kubegpu); `bench/kube_replay.py` replays the real one on 1,213 kwok nodes.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import Cluster, say, wait_until
from tests.e2e.rig.extender import ExtenderProcess, extender_entry
from tests.e2e.rig.rig import NODE_NAME, Rig

pytestmark = pytest.mark.e2e

SEED, INFLATE = 42, 1.0
SCHEDULER = "kubegpu-replay"


def synthetic_trace(n_nodes: int = 122, n_pods: int = 819, seed: int = 7) -> tuple[list[Any], list[Any]]:
    """A cluster and pod list in the openb schema, drawn from a fixed seed: a mix of 8-, 4- and 2-GPU
    nodes of four models, and CPU-only pods, shares, whole GPUs and multi-GPU pods, about openb's mix
    (the trace itself is not redistributed, and placement equality does not depend on its numbers),
    5 % of them pinned to V100M32 (node affinity on the product label; the extender scores against
    the pinned shapes as the simulator does)."""
    import numpy as np

    from kubegpu.sim.trace import NodeRecord, PodRecord

    rng = np.random.default_rng(seed)
    kinds = [(8, "V100M32", 96000), (8, "G2", 128000), (4, "T4", 64000), (2, "P100", 64000)]
    nodes = []
    for i in range(n_nodes):
        gpus, model, cpu = kinds[int(rng.choice(4, p=[0.35, 0.3, 0.2, 0.15]))]
        nodes.append(NodeRecord(name=f"syn-node-{i:04d}", cpu_milli=cpu, memory_mib=1 << 19, gpu_count=gpus,
                                gpu_model=model))  # fmt: skip
    shares = (100, 250, 300, 460, 500, 810)
    pods = []
    for i in range(n_pods):
        kind = float(rng.random())
        if kind < 0.08:
            num, milli = 0, 0
        elif kind < 0.60:
            num, milli = 1, int(rng.choice(shares))
        elif kind < 0.85:
            num, milli = 1, 1000
        else:
            num, milli = int(rng.choice([2, 4, 8])), 1000
        spec: tuple[str, ...] = ("V100M32",) if float(rng.random()) < 0.05 else ()
        pods.append(PodRecord(name=f"syn-pod-{i:04d}", cpu_milli=int(rng.choice([2000, 4000, 8000, 12000])),
                              memory_mib=int(rng.choice([4096, 16384])), num_gpu=num, gpu_milli=milli,
                              gpu_spec=spec))  # fmt: skip
    return nodes, pods


@pytest.fixture
def subset(tmp_path: Path) -> tuple[Path, Path]:
    from kubegpu.sim.trace import write_nodes, write_pods

    node_list, pod_list = synthetic_trace()
    nodes, pods = tmp_path / "nodes.csv", tmp_path / "pods.csv"
    write_nodes(nodes, node_list)
    write_pods(pods, pod_list)
    return nodes, pods


def replay_config(url: str) -> dict[str, object]:
    return {
        "clientConnection": {"qps": 500, "burst": 1000},
        "percentageOfNodesToScore": 100,
        "profiles": [
            {
                "schedulerName": SCHEDULER,
                "plugins": {"postFilter": {"disabled": [{"name": "DefaultPreemption"}]}},
            }
        ],
        "extenders": [extender_entry(url)],
    }


@pytest.fixture
def kwok(rig: Rig) -> Iterator[Rig]:
    rig.start_kwok()
    try:
        yield rig
    finally:
        rig.stop_kwok()
        print(rig.log_tail(rig.KWOK, 30))


def test_the_extender_in_kube_scheduler_places_every_pod_where_the_sim_does(
    cluster: Cluster, kwok: Rig, subset: tuple[Path, Path], tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    from kubegpu.kubeapi import KubeApi
    from kubegpu.sim.kube import KubeReplay, KubeReplayConfig, Outcome, gpu_uuid
    from kubegpu.sim.replay import replay
    from kubegpu.sim.scoring import Policy
    from kubegpu.sim.trace import load_trace
    from kubegpu.sim.workload import prepare

    nodes_csv, pods_csv = subset
    trace = load_trace(nodes_csv, pods_csv)
    workload = prepare(trace)
    api = KubeApi(kubeconfig=str(kwok.paths.kubeconfig))
    engine = KubeReplay(api, trace, workload, say=lambda line: say(request.config, line))
    ext = ExtenderProcess(
        kwok.paths.kubeconfig,
        tmp_path / "extender.log",
        *("--policy", "kubegpu", "--workload", str(pods_csv), "--scheduler-name", SCHEDULER),
    )
    namespace = cluster.namespace("replay")
    t0 = time.monotonic()
    try:
        nodes_s = engine.create_nodes(ready_timeout_s=90)
        ext.start()
        kwok.start_extra_scheduler(replay_config(ext.url))
        config = KubeReplayConfig(scheduler_name=SCHEDULER, seed=SEED, inflate=INFLATE, namespace=namespace)
        run = engine.run(config, extender=True)
        say(
            request.config,
            f"[e2e] kube replay: {len(trace.nodes)} kwok nodes Ready in {nodes_s:.1f} s, {run.count} pods in "
            f"{run.seconds:.1f} s ({run.pods_per_second:.1f} pods/s), {run.placed_count} placed",
        )

        sim = replay(workload, Policy("kubegpu"), SEED, inflate=INFLATE)
        assert run.count == len(sim.placed)
        expected = [
            workload.node_names[int(r)] if ok else None for r, ok in zip(sim.node, sim.placed, strict=True)
        ]
        wrong = [
            (step, (run.node[step], run.gpus[step]), (expected[step], sim.gpus[step]))
            for step in range(run.count)
            if (run.node[step], run.gpus[step]) != (expected[step], sim.gpus[step])
        ]
        assert not wrong, f"{len(wrong)} pods placed unlike the sim; first: {wrong[:5]}"
        assert run.failed(Outcome.ADMISSION) == 0, "the extender over-committed a GPU"
        assert run.failed(Outcome.UNSCHEDULABLE) == int((~sim.placed).sum()) > 0

        # the assignment names the GPUs by the UUIDs the node publishes; every placed pod runs on kwok
        def placed_pods() -> list[dict[str, object]]:
            items, _ = api.list_objects(f"/api/v1/namespaces/{namespace}/pods")
            return items

        pods = wait_until(
            f"{run.placed_count} replay pods Running",
            placed_pods,
            60,
            accept=lambda items: (
                sum((p.get("status") or {}).get("phase") == "Running" for p in items) == run.placed_count
            ),
        )
        assert len(pods) == run.placed_count, "refused pods were deleted"
        for obj in pods:
            meta = obj["metadata"]
            step = int(meta["annotations"]["kubegpu.io/replay-step"])
            node = obj["spec"]["nodeName"]
            assert node != NODE_NAME
            assert node == expected[step]
            text = meta["annotations"].get("kubegpu.io/gpu-assignment")
            if run.gpus[step]:  # a GPU pod: the extender wrote its GPUs, by index and by the node's UUIDs
                doc = json.loads(text)
                assert doc["node"] == node and tuple(doc["gpus"]) == run.gpus[step]
                assert doc["uuids"] == [gpu_uuid(node, g) for g in doc["gpus"]]
    finally:
        kwok.stop_extra_scheduler()
        ext.stop()
        engine.clear_pods(namespace)
        engine.delete_nodes()
        print(ext.log_tail(40))
        print(kwok.log_tail(kwok.EXTRA_SCHEDULER, 40))
    say(request.config, f"[e2e] kube replay test body: {time.monotonic() - t0:.1f} s")
