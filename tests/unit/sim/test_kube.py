"""The kube engine's pure parts: the objects it creates, the device plugin it plays, its results."""

from __future__ import annotations

import numpy as np

from kubegpu.extender.ask import ask_of
from kubegpu.extender.assignment import ANNOTATION
from kubegpu.extender.node import gpu_node_of
from kubegpu.sim.kube import (
    ASSIGNMENT_ANNOTATION,
    KWOK_KEY,
    MODEL_LABEL,
    DevicePlugin,
    KubeRun,
    Outcome,
    _assigned_gpus,
    _unschedulable,
    differences,
    gpu_uuid,
    node_object,
    pod_object,
)
from kubegpu.sim.trace import NodeRecord, PodRecord

NODE = NodeRecord(
    name="openb-node-0007", cpu_milli=96000, memory_mib=786432, gpu_count=8, gpu_model="V100M32"
)


def pod(num_gpu: int, milli: int, spec: tuple[str, ...] = ()) -> PodRecord:
    return PodRecord(
        name="p", cpu_milli=4000, memory_mib=8192, num_gpu=num_gpu, gpu_milli=milli, gpu_spec=spec
    )


def test_a_kwok_node_is_what_the_extender_reads_and_is_tainted_for_kwok_alone() -> None:
    obj = node_object(NODE)
    seen = gpu_node_of(obj)
    assert (seen.cpu_milli, seen.memory_mib, seen.gpu_count) == (96000, 786432, 8)
    assert seen.gpu_model == "V100M32"  # the label pods pin a model by, read back by the extender
    assert seen.uuids == tuple(gpu_uuid(NODE.name, i) for i in range(8))
    assert len(set(seen.uuids)) == 8 and gpu_uuid(NODE.name, 3) == gpu_uuid(NODE.name, 3)
    assert obj["status"]["allocatable"]["kubegpu.io/gpu-milli"] == "8000"
    assert obj["metadata"]["labels"][MODEL_LABEL] == "V100M32"
    assert obj["metadata"]["annotations"][KWOK_KEY] == "fake"
    assert obj["spec"]["taints"] == [{"key": KWOK_KEY, "value": "fake", "effect": "NoSchedule"}]


def test_pods_ask_as_the_extender_reads_them_and_carry_their_model_constraint() -> None:
    shared = pod_object("a", pod(1, 460, ("V100M16", "V100M32")), step=3, scheduler_name="kubegpu")
    ask = ask_of(shared)
    assert (ask.cpu_milli, ask.memory_mib, ask.num_gpu, ask.gpu_milli) == (4000, 8192, 1, 460)
    terms = shared["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    (_, expr_model) = terms["nodeSelectorTerms"][0]["matchExpressions"]
    assert expr_model == {"key": MODEL_LABEL, "operator": "In", "values": ["V100M16", "V100M32"]}
    assert shared["spec"]["schedulerName"] == "kubegpu"
    assert shared["spec"]["tolerations"][0]["key"] == KWOK_KEY
    whole = ask_of(pod_object("b", pod(2, 1000), step=4, scheduler_name="x"))
    assert (whole.num_gpu, whole.gpu_milli) == (2, 1000)
    requests = pod_object("c", pod(1, 1000), step=5, scheduler_name="x")["spec"]["containers"][0]["resources"]
    assert (
        requests["requests"]["nvidia.com/gpu"] == "1" and "kubegpu.io/gpu-milli" not in requests["requests"]
    )
    assert ask_of(pod_object("d", pod(0, 0), step=6, scheduler_name="x")).num_gpu == 0
    both = pod_object("e", pod(2, 1000), step=7, scheduler_name="x", milli_on_whole=True)
    asked = both["spec"]["containers"][0]["resources"]["requests"]
    assert asked["nvidia.com/gpu"] == "2" and asked["kubegpu.io/gpu-milli"] == "2000"


def test_the_device_plugin_gives_whole_gpus_lowest_first_and_shares_best_fit() -> None:
    plugin = DevicePlugin([NodeRecord(name="n", cpu_milli=1, memory_mib=1, gpu_count=4, gpu_model="T4")])
    assert plugin.assign("n", 1, 1000) == (0,)
    assert plugin.assign("n", 1, 300) == (1,)
    assert plugin.assign("n", 1, 600) == (1,), "the fullest GPU with room"
    assert plugin.assign("n", 1, 200) == (2,), "GPU 1 has 100 left"
    assert plugin.assign("n", 2, 1000) is None, "only GPU 3 is fully free"
    assert plugin.assign("n", 1, 1000) == (3,)
    assert plugin.assign("n", 1, 900) is None
    assert plugin.assign("n", 0, 0) == ()


def test_gpus_chosen_elsewhere_are_taken_only_where_they_have_room() -> None:
    plugin = DevicePlugin([NodeRecord(name="n", cpu_milli=1, memory_mib=1, gpu_count=2, gpu_model="T4")])
    assert plugin.take("n", (1,), 500)
    assert plugin.take("n", (1,), 500)
    assert not plugin.take("n", (1,), 1), "GPU 1 is full"
    assert not plugin.take("n", (0, 5), 1000), "no GPU 5 on the node"
    assert plugin.assign("n", 1, 1000) == (0,), "the refused take left GPU 0 free"


def test_the_assignment_is_read_in_the_extenders_format_and_unschedulable_from_the_condition() -> None:
    assert ASSIGNMENT_ANNOTATION == ANNOTATION
    text = '{"gpus":[2,3],"milli":1000,"node":"n","uuids":[],"version":1}'
    assert _assigned_gpus({"metadata": {"annotations": {ANNOTATION: text}}}) == ("n", (2, 3))
    assert _assigned_gpus({"metadata": {"annotations": {ANNOTATION: "{oops"}}}) is None
    cond = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
    assert _unschedulable({"status": {"conditions": [cond]}})
    assert not _unschedulable({"status": {"conditions": [{**cond, "reason": "SchedulerError"}]}})


def test_a_run_gives_the_sims_curve_and_counts_differences_per_pod() -> None:
    totals = np.array([1000, 500, 2000, 1000])
    placed = np.array([True, True, False, True])
    run = KubeRun(
        scheduler_name="s",
        seed=42,
        total_gpu_milli=4000,
        pods=("a", "b", "c", "d"),
        arrived_milli=np.cumsum(totals),
        allocated_milli=np.cumsum(np.where(placed, totals, 0)),
        placed=placed,
        outcome=(Outcome.PLACED, Outcome.PLACED, Outcome.UNSCHEDULABLE, Outcome.PLACED),
        node=("n1", "n1", None, "n2"),
        gpus=((0,), (1,), (), (0,)),
        seconds=2.0,
    )
    assert run.allocated_pct == 62.5 and run.placed_count == 3 and run.pods_per_second == 2.0
    assert run.failed(Outcome.UNSCHEDULABLE) == 1 and run.failed(Outcome.ADMISSION) == 0
    assert run.curve()[112] == 62.5  # 4500 of 4000 arrived -> 112.5 % rounds to 112
    assert differences(run, ["n1", "n1", None, "n2"], [(0,), (1,), (), (0,)]) == 0
    assert differences(run, ["n1", "n1", None, "n2"], [(0,), (0,), (), (1,)]) == 2


def test_the_cli_compares_a_run_with_the_sim_and_reports_it_as_json() -> None:
    from kubegpu.cli.simkube import compare_with_sim, run_json
    from kubegpu.sim.replay import replay
    from kubegpu.sim.scoring import Policy
    from kubegpu.sim.trace import Trace
    from kubegpu.sim.workload import prepare

    nodes = tuple(
        NodeRecord(name=f"n{i}", cpu_milli=32000, memory_mib=65536, gpu_count=2, gpu_model="T4")
        for i in range(3)
    )
    pods = tuple(
        PodRecord(name=f"p{i}", cpu_milli=1000, memory_mib=1024, num_gpu=1, gpu_milli=m, gpu_spec=())
        for i, m in enumerate((500, 1000, 300, 1000, 700))
    )
    workload = prepare(Trace(nodes=nodes, pods=pods))
    sim = replay(workload, Policy("kubegpu"), 7, inflate=1.3)
    totals = sim.arrived_milli - np.concatenate([[0], sim.arrived_milli[:-1]])
    run = KubeRun(
        scheduler_name="kubegpu",
        seed=7,
        total_gpu_milli=workload.total_gpu_milli,
        pods=tuple(str(i) for i in range(len(sim.placed))),
        arrived_milli=sim.arrived_milli,
        allocated_milli=np.cumsum(np.where(sim.placed, totals, 0)),
        placed=sim.placed,
        outcome=tuple(Outcome.PLACED if ok else Outcome.UNSCHEDULABLE for ok in sim.placed),
        node=tuple(
            workload.node_names[int(r)] if ok else None for r, ok in zip(sim.node, sim.placed, strict=True)
        ),
        gpus=sim.gpus,
        seconds=1.0,
    )
    figures = compare_with_sim(run, workload, "kubegpu", 1.3)
    assert figures["different_placements"] == 0 and figures["placed"] == run.placed_count
    doc = run_json(run)
    assert doc["placed"] == run.placed_count and doc["allocated_pct_end"] == figures["allocated_pct_end"]
