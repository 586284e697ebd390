"""Shares of one GPU: the Allocate of kubegpu.io/gpu-milli finds the pod being admitted and hands it the
GPU its assignment names; the ledger keeps hand-outs across restarts; whole GPUs avoid shared ones."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kubegpu.deviceplugin.config import AgentConfig, load_config
from kubegpu.deviceplugin.inventory import GPU_RESOURCE, MILLI_RESOURCE, build_inventory
from kubegpu.deviceplugin.plugin import MILLI_ENV, ResourcePlugin
from kubegpu.deviceplugin.shares import HandOut, ShareBroker, ShareLedger, pick, share_claims
from kubegpu.errors import ConfigError, DeviceRequestError, DeviceRequestProblem, KubegpuError
from kubegpu.health.policy import HealthPolicy
from kubegpu.health.tracker import HealthTracker
from kubegpu.model.event import GpuEvent, GpuEventKind
from kubegpu.model.node import Node
from kubegpu.sources.spec import load_node

SEED = load_node("builtin:seed-8gpu")
UUIDS = [g.uuid for g in SEED.gpus]
NODE = "gpu-1"


def share_pod(
    name: str,
    gpu: int,
    milli: int | str = 500,
    *,
    scheduled: str = "2026-01-01T00:00:00Z",
    node: str = NODE,
    phase: str = "Pending",
    containers: tuple[tuple[str, int | str], ...] | None = None,
    uuids: bool = True,
    total: int | None = None,
) -> dict[str, Any]:
    conts = containers or (("main", milli),)
    doc = {
        "gpus": [gpu],
        "milli": total if total is not None else sum(int(str(m).replace("k", "000")) for _, m in conts),
        "node": node,
        "uuids": [UUIDS[gpu]] if uuids else [],
        "version": 1,
    }
    return {
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": f"uid-{name}",
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "annotations": {"kubegpu.io/gpu-assignment": json.dumps(doc)},
        },
        "spec": {
            "nodeName": node,
            "containers": [{"name": c, "resources": {"limits": {MILLI_RESOURCE: str(m)}}} for c, m in conts],
        },
        "status": {
            "phase": phase,
            "conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": scheduled}],
        },
    }


def broker(tmp_path: Path, pods: list[dict[str, Any]], node: Node = SEED) -> ShareBroker:
    return ShareBroker(
        node_name=NODE,
        list_pods=lambda: pods,
        ledger=ShareLedger(tmp_path / "state" / "shares.json"),
        node=lambda: node,
    )


def ok(claim: object) -> None:
    return None


def test_the_oldest_bound_pod_asking_that_much_is_served_first(tmp_path: Path) -> None:
    pods = [
        share_pod("late", 3, scheduled="2026-01-01T00:00:09Z"),
        share_pod("early", 1, scheduled="2026-01-01T00:00:01Z"),
        share_pod("small", 5, 300, scheduled="2026-01-01T00:00:00Z"),
    ]
    b = broker(tmp_path, pods)
    first = b.hand_out(500, check=ok)
    second = b.hand_out(500, check=ok)
    assert (first.pod, first.uuid) == ("early", UUIDS[1])
    assert (second.pod, second.uuid) == ("late", UUIDS[3])
    assert b.hand_out(300, check=ok).pod == "small", "the size must match, not only the order"


class CountingPods:
    """A node's pods behind a LIST that counts its calls; ``now`` is the broker's clock."""

    def __init__(self, pods: list[dict[str, Any]]) -> None:
        self.pods, self.lists, self.now = pods, 0, 100.0

    def __call__(self) -> list[dict[str, Any]]:
        self.lists += 1
        return list(self.pods)

    def broker(self, tmp_path: Path) -> ShareBroker:
        return ShareBroker(
            node_name=NODE,
            list_pods=self,
            ledger=ShareLedger(tmp_path / "state" / "shares.json"),
            node=lambda: SEED,
            clock=lambda: self.now,
        )


def test_an_allocate_right_after_its_preferred_allocation_reuses_that_list(tmp_path: Path) -> None:
    api = CountingPods([share_pod("a", 2), share_pod("b", 4, scheduled="2026-01-01T00:00:09Z")])
    b = api.broker(tmp_path)
    peeked = b.peek(500)
    api.now += 0.05
    got = b.hand_out(500, check=ok)
    assert peeked is not None and (got.pod, got.uuid) == (peeked.pod, peeked.uuid) == ("a", UUIDS[2])
    assert api.lists == 1, "GetPreferredAllocation's LIST serves the Allocate that follows it"
    # the next pod: its own peek and hand-out, again one LIST; a hand-out without a peek lists itself
    assert b.peek(500) is not None and b.hand_out(500, check=ok).pod == "b" and api.lists == 2
    api.pods.append(share_pod("c", 5, scheduled="2026-01-01T00:00:10Z"))
    assert b.hand_out(500, check=ok).pod == "c" and api.lists == 3


def test_a_stale_or_unmatched_preferred_list_is_not_reused(tmp_path: Path) -> None:
    api = CountingPods([share_pod("a", 2)])
    b = api.broker(tmp_path)
    b.peek(500)
    api.now += 5.0  # too long since the peek: kubelet is admitting another pod by now
    api.pods = [share_pod("other", 6, scheduled="2026-01-01T00:00:05Z")]
    assert b.hand_out(500, check=ok).pod == "other" and api.lists == 2
    # the peek's list holds no pod for this size: a fresh LIST decides (and finds the new pod)
    b.peek(300)
    api.pods.append(share_pod("small", 1, 300, scheduled="2026-01-01T00:00:06Z"))
    assert b.hand_out(300, check=ok).pod == "small" and api.lists == 4


def test_no_matching_pod_names_the_node_the_size_and_the_likely_cause(tmp_path: Path) -> None:
    b = broker(tmp_path, [share_pod("a", 0, 500)])
    with pytest.raises(DeviceRequestError) as err:
        b.hand_out(300, check=ok)
    assert err.value.problem is DeviceRequestProblem.NO_SHARE
    text = str(err.value)
    assert NODE in text and "300" in text and "kubegpu.io/gpu-assignment" in text
    assert "kubegpu extender" in text and "ns/a (500)" in text


def test_a_restarted_agent_never_hands_a_pod_twice(tmp_path: Path) -> None:
    pods = [
        share_pod("a", 2, scheduled="2026-01-01T00:00:01Z"),
        share_pod("b", 2, scheduled="2026-01-01T00:00:02Z"),
    ]
    assert broker(tmp_path, pods).hand_out(500, check=ok).pod == "a"
    again = broker(tmp_path, pods)  # a new process, the same ledger file
    assert again.hand_out(500, check=ok).pod == "b"
    with pytest.raises(DeviceRequestError):
        again.hand_out(500, check=ok)
    assert {h.pod for h in again.ledger.handouts()} == {"a", "b"}


def test_running_pods_other_nodes_and_foreign_pods_are_not_claims(tmp_path: Path) -> None:
    plain = share_pod("plain", 0)
    del plain["metadata"]["annotations"]
    pods = [
        share_pod("running", 0, phase="Running"),
        share_pod("elsewhere", 1, node="gpu-2"),
        plain,
        share_pod("gone", 2, phase="Failed"),
    ]
    assert share_claims(pods, node_name=NODE, uuids=UUIDS, handed={}) == []


def test_a_pods_containers_get_the_same_gpu_and_a_half_admitted_pod_comes_first(tmp_path: Path) -> None:
    pods = [
        share_pod("older", 6, scheduled="2026-01-01T00:00:00Z"),
        share_pod("pair", 4, containers=(("x", 500), ("y", 500)), scheduled="2026-01-01T00:00:05Z"),
    ]
    b = broker(tmp_path, pods)
    b.ledger.record(
        HandOut(pod_uid="uid-pair", namespace="ns", pod="pair", container="x", uuid=UUIDS[4], milli=500)
    )
    claim = b.hand_out(500, check=ok)
    assert (claim.pod, claim.container, claim.uuid) == ("pair", "y", UUIDS[4])


def test_quantities_as_the_api_server_writes_them_and_index_only_assignments(tmp_path: Path) -> None:
    b = broker(tmp_path, [share_pod("whole", 7, "1k", uuids=False, total=1000)])
    claim = b.hand_out(1000, check=ok)
    assert (claim.milli, claim.gpu, claim.uuid) == (1000, 7, UUIDS[7])


def test_ended_pods_are_forgotten_and_shared_gpus_follow_the_live_pods(tmp_path: Path) -> None:
    pods = [share_pod("a", 2), share_pod("b", 5)]
    b = broker(tmp_path, pods)
    b.hand_out(500, check=ok)
    assert b.shared_gpus() == {2, 5}, "a share bound but not yet admitted holds its GPU too"
    pods[:] = [pods[1]]  # pod a ended
    assert b.peek(500) is not None  # a listing prunes the ledger
    assert b.ledger.handouts() == ()
    assert b.shared_gpus() == {5}


def test_shared_gpus_fall_back_to_the_ledger_when_the_api_fails(tmp_path: Path) -> None:
    b = broker(tmp_path, [share_pod("a", 3)])
    b.hand_out(500, check=ok)

    def broken() -> list[dict[str, Any]]:
        raise KubegpuError("API down")

    failing = ShareBroker(node_name=NODE, list_pods=broken, ledger=b.ledger, node=lambda: SEED)
    assert failing.shared_gpus() == {3}
    with pytest.raises(DeviceRequestError, match="cannot list the pods on node gpu-1"):
        failing.hand_out(500, check=ok)


def test_a_check_refusal_records_nothing(tmp_path: Path) -> None:
    b = broker(tmp_path, [share_pod("a", 3)])
    with pytest.raises(DeviceRequestError, match=r"GPU 3 .* which is unhealthy"):
        b.hand_out(500, check=lambda c: "is unhealthy")
    assert b.ledger.handouts() == ()
    assert pick(share_claims([share_pod("a", 3)], node_name=NODE, uuids=UUIDS, handed={}), 500) is not None


def test_an_unreadable_ledger_is_moved_aside(tmp_path: Path) -> None:
    path = tmp_path / "shares.json"
    path.write_text("{not json")
    assert ShareLedger(path).handouts() == ()
    assert path.with_suffix(".corrupt").exists()


# -- the inventory and the plugin ----------------------------------------------------------------


def fractional() -> AgentConfig:
    return AgentConfig(fractional=True)


def test_fractional_serves_1000_devices_per_whole_gpu_not_mig_not_dra() -> None:
    inv = build_inventory(SEED, fractional())
    milli = inv.resource(MILLI_RESOURCE)
    assert milli is not None and len(milli.devices) == 8000
    assert milli.replicas_per_gpu == dict.fromkeys(range(8), 1000)
    assert len({d.id for d in milli.devices}) == 8000 and all(len(d.id) <= 63 for d in milli.devices)
    dra = build_inventory(
        SEED, AgentConfig(fractional=True, dra_gpus=load_config(cli={"dra_gpus": "6,7"}).dra_gpus)
    )
    got = dra.resource(MILLI_RESOURCE)
    assert got is not None and set(got.replicas_per_gpu) == set(range(6))
    assert build_inventory(SEED, AgentConfig()).resource(MILLI_RESOURCE) is None
    mig = load_node("builtin:h100-mig-mixed")
    served = build_inventory(mig, load_config(cli={"mig_strategy": "mixed", "fractional": "true"}))
    plain = {g.index for g in mig.gpus if not g.mig_enabled}
    shares = served.resource(MILLI_RESOURCE)
    assert shares is not None and set(shares.replicas_per_gpu) == plain


def test_fractional_with_time_slicing_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(
        "version: v1\nkubegpu:\n  fractional: true\n"
        "sharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 2\n"
    )
    with pytest.raises(
        ConfigError, match=r"kubegpu.fractional: .* cannot be combined with sharing.timeSlicing"
    ):
        load_config(path)


def plugin_for(resource: str, b: ShareBroker | None) -> tuple[ResourcePlugin, HealthTracker]:
    inv = build_inventory(SEED, fractional())
    tracker = HealthTracker(gpu_count=8, aliases={g.uuid: g.index for g in SEED.gpus}, policy=HealthPolicy())
    res = inv.resource(resource)
    assert res is not None
    plugin = ResourcePlugin(
        resource=res,
        topology=SEED.topology,
        config=fractional(),
        tracker=tracker,
        annotation_id=lambda: "x",
        shares=b,
    )
    return plugin, tracker


def tokens(gpu: int, n: int) -> list[str]:
    return [f"{UUIDS[gpu]}::{i}" for i in range(n)]


def test_allocate_gives_the_assigned_gpu_whatever_tokens_kubelet_picked(tmp_path: Path) -> None:
    plugin, _ = plugin_for(MILLI_RESOURCE, broker(tmp_path, [share_pod("a", 6, 250)]))
    answer = plugin.allocate(tokens(0, 250))  # kubelet took GPU 0's tokens
    assert answer.envs["NVIDIA_VISIBLE_DEVICES"] == UUIDS[6]
    assert answer.envs[MILLI_ENV] == "250"


def test_allocate_refuses_a_share_on_an_unhealthy_gpu_and_without_a_broker(tmp_path: Path) -> None:
    plugin, tracker = plugin_for(MILLI_RESOURCE, broker(tmp_path, [share_pod("a", 6, 250)]))
    tracker.apply(GpuEvent(gpu=6, kind=GpuEventKind.XID, xid=79, detail="fell off the bus"))
    with pytest.raises(DeviceRequestError, match=r"GPU 6 .*unhealthy"):
        plugin.allocate(tokens(0, 250))
    bare, _ = plugin_for(MILLI_RESOURCE, None)
    with pytest.raises(DeviceRequestError, match="--node-name and API access"):
        bare.allocate(tokens(0, 250))


def test_a_gpus_share_devices_go_unhealthy_with_it(tmp_path: Path) -> None:
    plugin, tracker = plugin_for(MILLI_RESOURCE, None)
    tracker.apply(GpuEvent(gpu=2, kind=GpuEventKind.XID, xid=79, detail="fell off the bus"))
    bad = {s.id for s in plugin.snapshot() if not s.healthy}
    assert bad == set(tokens(2, 1000))


def test_preferred_share_tokens_come_from_the_assigned_gpu(tmp_path: Path) -> None:
    plugin, _ = plugin_for(MILLI_RESOURCE, broker(tmp_path, [share_pod("a", 5, 100)]))
    available = tokens(0, 200) + tokens(5, 200)
    got = plugin.preferred(available, [], 100)
    assert len(got) == 100 and set(got) <= set(tokens(5, 200))


def test_whole_gpus_avoid_gpus_holding_shares_while_others_are_free(tmp_path: Path) -> None:
    b = broker(tmp_path, [share_pod("a", 4), share_pod("b", 5), share_pod("c", 6), share_pod("d", 7)])
    plugin, _ = plugin_for(GPU_RESOURCE, b)
    got = plugin.preferred(UUIDS[2:], [], 2)
    assert set(got) <= set(UUIDS[2:4]), "the seed's topology would pick from 4-7 otherwise"
    # too few unshared GPUs free: the request is still answered (kubelet would fill it anyway)
    assert len(plugin.preferred(UUIDS[3:], [], 3)) == 3
