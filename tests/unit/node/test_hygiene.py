"""NodeHygiene against an in-memory stand-in of the few API-server calls it makes (``KubeApi``'s
methods): restart idempotency, the cap, PDB-refused evictions, label ownership. The real API server's
semantics (server-side apply, status subresource, Eviction API) are exercised by
tests/e2e/test_node_hygiene.py."""

from __future__ import annotations

import copy
import json
from typing import Any, cast

import pytest

from kubegpu.errors import ApiServerError
from kubegpu.health.policy import HealthPolicy
from kubegpu.health.quarantine import EvictionPolicy, QuarantineSettings
from kubegpu.health.tracker import HealthTracker
from kubegpu.kubeapi import KubeApi
from kubegpu.model.event import GpuEvent, GpuEventKind
from kubegpu.model.holder import DeviceHolder
from kubegpu.node.hygiene import NodeHygiene
from kubegpu.node.lease import ANNOTATION

UUIDS = [f"GPU-{i:04d}" for i in range(4)]
KEY = "nvidia.com/gpu.unhealthy"


class FakeApi:
    """One node (plus optional others), pods, one lease; records evictions. Applies replace the
    fields a manager owns (labels: the keys it applied; status: the one condition)."""

    def __init__(self, others: int = 0) -> None:
        self.nodes: dict[str, dict[str, Any]] = {
            name: {
                "metadata": {
                    "name": name,
                    "labels": {"nvidia.com/gpu.present": "true"},
                    "resourceVersion": "1",
                },
                "spec": {"taints": [{"key": "team", "value": "a", "effect": "NoSchedule"}]},
                "status": {"conditions": [{"type": "Ready", "status": "True"}]},
            }
            for name in ["n0", *(f"o{i}" for i in range(others))]
        }
        self.owned: dict[str, set[str]] = {}
        self.pods: dict[tuple[str, str], dict[str, Any]] = {}
        self.lease: dict[str, Any] | None = None
        self.evicted: list[tuple[str, str]] = []
        self.refuse_evictions = 0
        self.foreign_labels: dict[str, str] = {}

    def _bump(self, name: str) -> None:
        meta = self.nodes[name]["metadata"]
        meta["resourceVersion"] = str(int(meta["resourceVersion"]) + 1)

    def get_node(self, name: str, *, quick: bool = False) -> dict[str, Any] | None:
        return copy.deepcopy(self.nodes.get(name))

    def list_nodes(self, *, label_selector: str | None = None) -> list[dict[str, Any]]:
        return [copy.deepcopy(n) for n in self.nodes.values()]

    def apply_node(
        self,
        name: str,
        patch: dict[str, Any],
        *,
        field_manager: str,
        status: bool = False,
        force: bool = False,
    ) -> None:
        node = self.nodes[name]
        if status:
            conds = [c for c in node["status"]["conditions"] if c["type"] != "GPUUnhealthy"]
            node["status"]["conditions"] = conds + patch.get("status", {}).get("conditions", [])
        else:
            labels = patch["metadata"].get("labels", {})
            node["metadata"].setdefault("annotations", {}).update(patch["metadata"].get("annotations", {}))
            clash = [k for k, v in labels.items() if self.foreign_labels.get(k, v) != v]
            if clash and not force:
                raise ApiServerError("conflict", status=409)
            current = node["metadata"]["labels"]
            for key in self.owned.get(field_manager, set()) - set(labels):
                current.pop(key, None)
            current.update(labels)
            self.owned[field_manager] = set(labels)
        self._bump(name)

    def merge_patch_node(self, name: str, patch: dict[str, Any], *, field_manager: str) -> None:
        node = self.nodes[name]
        if patch["metadata"]["resourceVersion"] != node["metadata"]["resourceVersion"]:
            raise ApiServerError("conflict", status=409)
        if "taints" in patch.get("spec", {}):
            node["spec"]["taints"] = patch["spec"]["taints"]
        notes = node["metadata"].setdefault("annotations", {})
        for key, value in patch["metadata"].get("annotations", {}).items():
            if value is None:
                notes.pop(key, None)  # merge patch: null removes the key
            else:
                notes[key] = value
        self._bump(name)

    def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        return copy.deepcopy(self.pods.get((namespace, name)))

    def evict(self, namespace: str, name: str) -> None:
        if self.refuse_evictions:
            self.refuse_evictions -= 1
            raise ApiServerError(
                "Cannot evict pod as it would violate the pod's disruption budget.", status=429
            )
        self.evicted.append((namespace, name))
        self.pods[(namespace, name)]["metadata"]["deletionTimestamp"] = "now"

    def get_lease(self, namespace: str, name: str) -> dict[str, Any] | None:
        return copy.deepcopy(self.lease)

    def create_lease(self, namespace: str, lease: dict[str, Any]) -> None:
        if self.lease is not None:
            raise ApiServerError("exists", status=409)
        self.lease = {**lease, "metadata": {**lease["metadata"], "resourceVersion": "1"}}

    def replace_lease(self, namespace: str, lease: dict[str, Any]) -> None:
        assert self.lease is not None
        if lease["metadata"]["resourceVersion"] != self.lease["metadata"]["resourceVersion"]:
            raise ApiServerError("conflict", status=409)
        rv = str(int(self.lease["metadata"]["resourceVersion"]) + 1)
        self.lease = {**lease, "metadata": {**lease["metadata"], "resourceVersion": rv}}

    # what a test reads
    def taints(self) -> list[dict[str, Any]]:
        return [t for t in self.nodes["n0"]["spec"]["taints"] if t["key"] == KEY]

    def condition(self) -> dict[str, Any] | None:
        return next(
            (c for c in self.nodes["n0"]["status"]["conditions"] if c["type"] == "GPUUnhealthy"), None
        )

    def quarantined(self) -> dict[str, Any]:
        if self.lease is None:
            return {}
        return cast(dict[str, Any], json.loads(self.lease["metadata"]["annotations"][ANNOTATION]))


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def make(
    api: FakeApi, holders: list[DeviceHolder] | None = None, clock: Clock | None = None, **settings: Any
) -> tuple[NodeHygiene, HealthTracker]:
    clock = clock or Clock()
    tracker = HealthTracker(
        gpu_count=4, aliases={u: i for i, u in enumerate(UUIDS)}, policy=HealthPolicy(), clock=clock
    )
    hygiene = NodeHygiene(
        cast(KubeApi, api),
        node_name="n0",
        tracker=tracker,
        uuids=UUIDS,
        index_of={u: i for i, u in enumerate(UUIDS)},
        holders=lambda: list(holders or []),
        quarantine=QuarantineSettings(**settings),
        clock=clock,
        wall_clock=lambda: 1_767_225_600.0,
    )
    return hygiene, tracker


def pod(api: FakeApi, name: str, *ids: str) -> DeviceHolder:
    api.pods[("ml", name)] = {"metadata": {"name": name, "namespace": "ml"}, "spec": {"nodeName": "n0"}}
    return DeviceHolder(namespace="ml", pod=name, container="c", resource="nvidia.com/gpu", device_ids=ids)


def test_a_fatal_xid_taints_conditions_evicts_its_holders_and_recovery_lifts_it() -> None:
    api = FakeApi()
    holders = [pod(api, "on3", "GPU-0003"), pod(api, "on0", "GPU-0000"), pod(api, "rep3", "GPU-0003::1")]
    hygiene, tracker = make(api, holders)
    tracker.apply(GpuEvent(gpu=3, kind=GpuEventKind.XID, xid=79))
    hygiene.sync_once()
    assert api.taints() == [{"key": KEY, "value": "Xid79", "effect": "NoSchedule"}]
    cond = api.condition()
    assert cond is not None and cond["reason"] == "Xid79" and "GPU-0003" in cond["message"]
    assert sorted(api.evicted) == [("ml", "on3"), ("ml", "rep3")]
    assert "n0" in api.quarantined()
    assert {"key": "team", "value": "a", "effect": "NoSchedule"} in api.nodes["n0"]["spec"]["taints"]
    hygiene.sync_once()
    assert len(api.evicted) == 2, "a pod is evicted once"
    tracker.apply(GpuEvent(gpu=3, kind=GpuEventKind.HEALTHY))
    hygiene.sync_once()
    assert api.taints() == [] and api.condition() is None and api.quarantined() == {}
    assert api.nodes["n0"]["spec"]["taints"] == [{"key": "team", "value": "a", "effect": "NoSchedule"}]


def test_a_restarted_agent_keeps_the_quarantine_without_duplicating_it_then_clears_it() -> None:
    api = FakeApi()
    first, tracker = make(api)
    tracker.apply(GpuEvent(gpu=2, kind=GpuEventKind.LOST))
    first.sync_once()
    before = copy.deepcopy(api.nodes["n0"]["spec"]["taints"])
    second, fresh = make(api)  # the restart: a new tracker knows nothing
    assert second.read_back() == 1
    assert not fresh.is_healthy(2) and fresh.is_healthy(3)
    second.sync_once()
    assert api.nodes["n0"]["spec"]["taints"] == before
    assert len(api.taints()) == 1 and api.condition() is not None
    fresh.apply(GpuEvent(gpu=2, kind=GpuEventKind.HEALTHY))
    second.sync_once()
    assert api.taints() == [] and api.condition() is None
    third, again = make(api)
    assert third.read_back() == 0 and all(again.is_healthy(i) for i in range(4)), (
        "a cleared one stays cleared"
    )


def test_a_pdb_refusal_is_retried_with_backoff_never_deleted() -> None:
    api = FakeApi()
    api.refuse_evictions = 2
    clock = Clock()
    hygiene, tracker = make(api, [pod(api, "guarded", "GPU-0001")], clock)
    tracker.apply(GpuEvent(gpu=1, kind=GpuEventKind.XID, xid=48))
    hygiene.sync_once()
    assert api.evicted == [] and api.refuse_evictions == 1
    hygiene.sync_once()  # too early: backing off
    assert api.refuse_evictions == 1
    clock.t += 1.1
    hygiene.sync_once()
    assert api.refuse_evictions == 0 and api.evicted == []
    clock.t += 2.1
    hygiene.sync_once()
    assert api.evicted == [("ml", "guarded")]


def test_the_cap_withholds_taint_and_evictions_when_the_fleet_share_is_used() -> None:
    api = FakeApi(others=4)  # 5 GPU nodes, 10%: one may be quarantined, and o0 already is
    api.nodes["o0"]["spec"]["taints"].append({"key": KEY, "value": "Xid79", "effect": "NoSchedule"})
    api.create_lease(
        "kube-system",
        {
            "metadata": {
                "name": "kubegpu-quarantine",
                "annotations": {ANNOTATION: json.dumps({"o0": {"reason": "Xid79", "since": 1_767_225_000}})},
            }
        },
    )
    hygiene, tracker = make(api, [pod(api, "p", "GPU-0000")])
    tracker.apply(GpuEvent(gpu=0, kind=GpuEventKind.XID, xid=79))
    hygiene.sync_once()
    assert api.taints() == [] and api.evicted == []
    cond = api.condition()
    assert cond is not None and "withheld" in cond["message"]
    assert set(api.quarantined()) == {"o0"}


def test_a_stale_lease_entry_does_not_block_the_fleet() -> None:
    api = FakeApi(others=4)  # o0 is counted but carries no taint for long: its agent died
    api.create_lease(
        "kube-system",
        {
            "metadata": {
                "name": "kubegpu-quarantine",
                "annotations": {ANNOTATION: json.dumps({"o0": {"reason": "Xid79", "since": 1_767_000_000}})},
            }
        },
    )
    hygiene, tracker = make(api)
    tracker.apply(GpuEvent(gpu=0, kind=GpuEventKind.XID, xid=79))
    hygiene.sync_once()
    assert len(api.taints()) == 1 and set(api.quarantined()) == {"n0"}


def test_eviction_policy_none_quarantines_without_evicting() -> None:
    api = FakeApi()
    hygiene, tracker = make(api, [pod(api, "p", "GPU-0000")], eviction=EvictionPolicy.NONE)
    tracker.apply(GpuEvent(gpu=0, kind=GpuEventKind.XID, xid=79))
    hygiene.sync_once()
    assert len(api.taints()) == 1 and api.evicted == []


def test_labels_replace_kubegpus_own_and_leave_another_managers_keys() -> None:
    api = FakeApi()
    api.foreign_labels = {"nvidia.com/gpu.product": "Set-By-GFD"}
    api.nodes["n0"]["metadata"]["labels"] |= {"nvidia.com/gpu.product": "Set-By-GFD", "team": "ml"}
    hygiene, _ = make(api)
    hygiene.set_labels({"nvidia.com/gpu.product": "NVIDIA-H100", "nvidia.com/mig.strategy": "mixed"})
    hygiene.sync_once()
    labels = api.nodes["n0"]["metadata"]["labels"]
    assert labels["nvidia.com/gpu.product"] == "Set-By-GFD" and labels["nvidia.com/mig.strategy"] == "mixed"
    hygiene.set_labels({"nvidia.com/gpu.count": "8"})
    hygiene.sync_once()
    labels = api.nodes["n0"]["metadata"]["labels"]
    assert "nvidia.com/mig.strategy" not in labels and labels["team"] == "ml"
    assert labels["nvidia.com/gpu.count"] == "8" and labels["nvidia.com/gpu.present"] == "true"


def test_the_gpus_uuids_are_published_with_the_labels_and_follow_a_new_node() -> None:
    api = FakeApi()
    hygiene, _ = make(api)
    hygiene.sync_once()
    assert "kubegpu.io/gpu-uuids" not in api.nodes["n0"]["metadata"].get("annotations", {}), (
        "nothing is applied before the labels are known: an apply without them would remove them"
    )
    hygiene.set_labels({"nvidia.com/gpu.count": "4"})
    hygiene.sync_once()
    meta = api.nodes["n0"]["metadata"]
    assert meta["annotations"]["kubegpu.io/gpu-uuids"] == ",".join(UUIDS)
    assert meta["labels"]["nvidia.com/gpu.count"] == "4"
    hygiene.set_uuids(UUIDS[::-1])
    hygiene.sync_once()
    assert meta["annotations"]["kubegpu.io/gpu-uuids"] == ",".join(UUIDS[::-1])


def test_with_labels_off_the_uuids_are_still_published() -> None:
    api = FakeApi()
    tracker = HealthTracker(gpu_count=4, aliases={u: i for i, u in enumerate(UUIDS)}, policy=HealthPolicy())
    hygiene = NodeHygiene(
        cast(KubeApi, api),
        node_name="n0",
        tracker=tracker,
        uuids=UUIDS,
        index_of={u: i for i, u in enumerate(UUIDS)},
        holders=list,
        quarantine=None,
        labels_enabled=False,
    )
    hygiene.sync_once()
    assert api.nodes["n0"]["metadata"]["annotations"]["kubegpu.io/gpu-uuids"] == ",".join(UUIDS)
    assert api.nodes["n0"]["metadata"]["labels"] == {"nvidia.com/gpu.present": "true"}


def test_a_failing_label_write_never_holds_the_quarantine_back() -> None:
    api = FakeApi()
    api.foreign_labels = {"x": "y"}

    def refuse(*args: Any, **kwargs: Any) -> None:
        if not kwargs.get("status"):
            raise ApiServerError("forbidden", status=403)
        FakeApi.apply_node(api, *args, **kwargs)

    api.apply_node = refuse  # type: ignore[method-assign]
    hygiene, tracker = make(api)
    hygiene.set_labels({"nvidia.com/gpu.count": "8"})
    tracker.apply(GpuEvent(gpu=0, kind=GpuEventKind.XID, xid=79))
    with pytest.raises(ApiServerError, match="forbidden"):
        hygiene.sync_once()  # reported, for the loop's backoff
    assert len(api.taints()) == 1 and api.condition() is not None


def test_a_capped_node_asks_again_and_is_quarantined_once_a_place_is_free() -> None:
    api = FakeApi(others=4)
    api.nodes["o0"]["spec"]["taints"].append({"key": KEY, "value": "Xid79", "effect": "NoSchedule"})
    api.create_lease(
        "kube-system",
        {
            "metadata": {
                "name": "kubegpu-quarantine",
                "annotations": {ANNOTATION: json.dumps({"o0": {"reason": "Xid79", "since": 1_767_225_000}})},
            }
        },
    )
    clock = Clock()
    hygiene, tracker = make(api, clock=clock)
    tracker.apply(GpuEvent(gpu=0, kind=GpuEventKind.XID, xid=79))
    hygiene.sync_once()
    assert api.taints() == []
    lease = api.get_lease("kube-system", "kubegpu-quarantine")
    assert lease is not None
    lease["metadata"]["annotations"][ANNOTATION] = "{}"  # o0 recovered and gave its place back
    api.replace_lease("kube-system", lease)
    hygiene.sync_once()
    assert api.taints() == [], "not before the retry interval"
    clock.t += 31
    hygiene.sync_once()
    assert len(api.taints()) == 1 and "withheld" not in (api.condition() or {}).get("message", "withheld")
