"""The MIG manager against an in-memory stand-in of the API calls it makes and a simulated node.

What a user sees is asserted: the node's ``nvidia.com/mig.config.state`` label, the Node events (type,
reason, message), which pods were evicted, and which node the agent was asked to serve. The real API
server and kubelet are exercised by tests/e2e/test_mig_manager.py.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, cast

from kubegpu.errors import ApiServerError, MigApplyError, PodResourcesUnavailable
from kubegpu.kubeapi import KubeApi
from kubegpu.model.holder import DeviceHolder
from kubegpu.model.migplan import MigManagerSettings, MigTransition
from kubegpu.model.node import Node
from kubegpu.node.migmanager import MigManager
from kubegpu.sources.migsim import SimulatedMigBackend
from kubegpu.sources.spec import load_node

SPEC = load_node("builtin:h100-mig-mixed")
STATE = "nvidia.com/mig.config.state"
BAD_FILE = """version: v1
mig-configs:
  four-2g:
    - devices: all
      mig-enabled: true
      mig-devices: {"2g.20gb": 4}
  gpu1-balanced:
    - devices: [1]
      mig-enabled: true
      mig-devices: {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}
"""


class FakeApi:
    def __init__(self) -> None:
        self.labels: dict[str, str] = {}
        self.events: list[dict[str, Any]] = []
        self.pods: dict[tuple[str, str], dict[str, Any]] = {}
        self.evicted: list[tuple[str, str]] = []
        self.state_writes: list[str] = []

    def get_node(self, name: str, *, quick: bool = False) -> dict[str, Any]:
        return {"metadata": {"name": name, "uid": "uid-1", "labels": copy.deepcopy(self.labels)}}

    def apply_node(
        self, name: str, patch: dict[str, Any], *, field_manager: str, force: bool = False
    ) -> None:
        assert field_manager == "kubegpu-mig-manager" and force
        self.labels.update(patch["metadata"]["labels"])
        self.state_writes.append(patch["metadata"]["labels"][STATE])

    def create_event(self, namespace: str, event: dict[str, Any]) -> None:
        assert namespace == "default" and event["involvedObject"] == {
            "apiVersion": "v1",
            "kind": "Node",
            "name": "n0",
            "uid": "uid-1",
        }
        self.events.append(event)

    def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        return copy.deepcopy(self.pods.get((namespace, name)))

    def evict(self, namespace: str, name: str) -> None:
        self.evicted.append((namespace, name))
        self.pods[(namespace, name)]["metadata"]["deletionTimestamp"] = "now"


class Harness:
    def __init__(
        self, tmp_path: Path, *, drain: bool = False, config_file: str = "builtin:mig-parted-default"
    ) -> None:
        self.api = FakeApi()
        self.node: Node = SPEC
        self.served: list[Node] = []
        self.holders: list[DeviceHolder] = []
        self.holders_error: Exception | None = None
        self.backend = SimulatedMigBackend(tmp_path / "mig.json")
        self.serve_ok = True
        self.serve_problem: str | None = None
        self.manager = MigManager(
            cast(KubeApi, self.api),
            node_name="n0",
            settings=MigManagerSettings(enabled=True, drain=drain, config_file=config_file),
            backend=self.backend,
            node=lambda: self.node,
            index_of=self.index_of,
            holders=self.get_holders,
            on_applied=self.serve,
            can_serve=lambda node: self.serve_problem,
        )

    def index_of(self) -> dict[str, int]:
        return {str(g.uuid): g.index for g in self.node.gpus} | {
            str(m.uuid): g.index for g in self.node.gpus for m in g.mig_instances
        }

    def get_holders(self) -> list[DeviceHolder]:
        if self.holders_error is not None:
            raise self.holders_error
        return list(self.holders)

    def serve(self, node: Node) -> bool:
        self.served.append(node)
        if self.serve_ok:
            self.node = node
        return self.serve_ok

    def hold(self, pod: str, uuid: str) -> None:
        self.holders.append(
            DeviceHolder(
                namespace="ml", pod=pod, container="c", resource="nvidia.com/mig-1g.10gb", device_ids=(uuid,)
            )
        )
        self.api.pods[("ml", pod)] = {"metadata": {"name": pod}, "spec": {"nodeName": "n0"}}

    def reasons(self) -> list[tuple[str, str]]:
        return [(e["type"], e["reason"]) for e in self.api.events]


def test_a_relabel_repartitions_serves_the_new_node_and_reports_success(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    assert h.manager.sync_once() is None  # no label: nothing to do, nothing written
    assert h.api.state_writes == [] and h.api.events == []
    h.api.labels["nvidia.com/mig.config"] = "all-1g.10gb"
    outcome = h.manager.sync_once()
    assert outcome is not None and outcome.state.value == "success"
    assert h.api.state_writes == ["pending", "success"]
    assert [sorted({m.profile for m in g.mig_instances}) for g in h.node.gpus] == [["1g.10gb"], ["1g.10gb"]]
    assert sum(len(g.mig_instances) for g in h.node.gpus) == 14
    assert h.reasons() == [("Normal", "MigConfigApplied")]
    assert "GPU 0: 1g.10gb@0" in h.api.events[0]["message"] and "applied in" in h.api.events[0]["message"]
    assert h.manager.sync_once() is None  # settled: not applied again
    assert len(h.served) == 1 and len(h.api.events) == 1


def test_a_config_name_the_file_lacks_fails_with_the_reason_and_keeps_the_layout(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    h.api.labels["nvidia.com/mig.config"] = "all-9g.99gb"
    h.manager.sync_once()
    assert h.api.labels[STATE] == "failed"
    assert h.reasons() == [("Warning", "MigConfigFailed")]
    assert "has no config 'all-9g.99gb'" in h.api.events[0]["message"]
    assert h.served == [] and h.node == SPEC


def test_a_layout_the_agent_could_not_advertise_is_refused_before_anything_changes(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    h.serve_problem = "migStrategy single: GPU 1 mixes MIG profiles"
    h.api.labels["nvidia.com/mig.config"] = "all-balanced"
    h.manager.sync_once()
    assert h.api.labels[STATE] == "failed" and h.served == [] and h.node == SPEC
    assert "could not serve it: migStrategy single" in h.api.events[0]["message"]
    assert not (tmp_path / "mig.json").exists()  # the backend was never called


def test_a_layout_breaking_a_placement_rule_fails_with_the_rule(tmp_path: Path) -> None:
    file = tmp_path / "cm.yaml"
    file.write_text(BAD_FILE)
    h = Harness(tmp_path, config_file=str(file))
    h.api.labels["nvidia.com/mig.config"] = "four-2g"
    h.manager.sync_once()
    assert h.api.labels[STATE] == "failed" and h.served == []
    assert "at most 3" in h.api.events[0]["message"]
    h.api.labels["nvidia.com/mig.config"] = "gpu1-balanced"  # a valid one afterwards works
    h.manager.sync_once()
    assert h.api.labels[STATE] == "success" and len(h.served) == 1


def test_a_pod_on_an_affected_gpu_holds_the_change_pending_until_it_ends(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    h.hold("trainer", str(SPEC.gpus[0].mig_instances[2].uuid))
    h.api.labels["nvidia.com/mig.config"] = "all-1g.10gb"
    for _ in range(3):
        outcome = h.manager.sync_once()
        assert (
            outcome is not None
            and outcome.state.value == "pending"
            and outcome.blocking == (("ml", "trainer"),)
        )
    assert h.api.labels[STATE] == "pending" and h.served == [] and h.api.evicted == []
    assert h.reasons() == [("Normal", "MigConfigPending")]  # told once, not every pass
    assert "ml/trainer" in h.api.events[0]["message"] and "drain is off" in h.api.events[0]["message"]
    h.holders.clear()  # the pod ended
    h.manager.sync_once()
    assert h.api.labels[STATE] == "success" and len(h.served) == 1
    assert "after waiting" in h.api.events[-1]["message"] or "applied in" in h.api.events[-1]["message"]


def test_a_pod_on_an_unaffected_gpu_does_not_block(tmp_path: Path) -> None:
    file = tmp_path / "cm.yaml"
    file.write_text(BAD_FILE)
    h = Harness(tmp_path, config_file=str(file))
    h.hold("on-gpu0", str(SPEC.gpus[0].mig_instances[0].uuid))
    h.api.labels["nvidia.com/mig.config"] = "gpu1-balanced"  # changes GPU 1 only
    h.manager.sync_once()
    assert h.api.labels[STATE] == "success" and h.node.gpus[0] == SPEC.gpus[0]


def test_with_drain_the_blocking_pods_are_evicted_then_the_change_applies(tmp_path: Path) -> None:
    h = Harness(tmp_path, drain=True)
    h.hold("trainer", str(SPEC.gpus[0].mig_instances[2].uuid))
    h.api.labels["nvidia.com/mig.config"] = "all-1g.10gb"
    h.manager.sync_once()
    assert h.api.evicted == [("ml", "trainer")] and h.api.labels[STATE] == "pending"
    h.manager.sync_once()
    assert h.api.evicted == [("ml", "trainer")]  # evicted once, now terminating
    h.holders.clear()
    h.manager.sync_once()
    assert h.api.labels[STATE] == "success"


def test_unknown_holders_keep_it_pending_rather_than_repartition_under_a_pod(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    h.holders_error = PodResourcesUnavailable("kubelet's PodResources socket is missing")
    h.api.labels["nvidia.com/mig.config"] = "all-1g.10gb"
    h.manager.sync_once()
    assert h.api.labels[STATE] == "pending" and h.served == []


def test_a_node_that_already_has_the_layout_succeeds_without_touching_it(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    h.api.labels["nvidia.com/mig.config"] = "all-balanced"
    h.node = SimulatedMigBackend().apply(SPEC, _transition(SPEC, "all-balanced"))
    h.manager.sync_once()
    assert h.api.labels[STATE] == "success" and h.served == []


def test_a_backend_failure_fails_and_serves_what_the_gpus_have(tmp_path: Path) -> None:
    h = Harness(tmp_path)

    class Broken(SimulatedMigBackend):
        def apply(self, node: Node, transition: MigTransition) -> Node:
            raise MigApplyError("GPU 1: creating a GPU instance failed: insufficient resources")

    h.manager._backend = Broken()
    h.api.labels["nvidia.com/mig.config"] = "all-1g.10gb"
    h.manager.sync_once()
    assert h.api.labels[STATE] == "failed" and "insufficient resources" in h.api.events[-1]["message"]
    assert h.served == [SPEC]


def test_a_changed_config_file_is_planned_again(tmp_path: Path) -> None:
    file = tmp_path / "cm.yaml"
    file.write_text(BAD_FILE)
    h = Harness(tmp_path, config_file=str(file))
    h.api.labels["nvidia.com/mig.config"] = "four-2g"
    h.manager.sync_once()
    assert h.api.labels[STATE] == "failed"
    file.write_text(BAD_FILE.replace('"2g.20gb": 4', '"2g.20gb": 3'))  # the ConfigMap is fixed
    h.manager.sync_once()
    assert h.api.labels[STATE] == "success"


def test_an_event_the_api_refuses_does_not_stop_the_change(tmp_path: Path) -> None:
    h = Harness(tmp_path)

    def refuse(namespace: str, event: dict[str, Any]) -> None:
        raise ApiServerError("forbidden", status=403)

    h.api.create_event = refuse  # type: ignore[method-assign]
    h.api.labels["nvidia.com/mig.config"] = "all-1g.10gb"
    h.manager.sync_once()
    assert h.api.labels[STATE] == "success"


def _transition(node: Node, name: str) -> MigTransition:
    from kubegpu.model.migplan import plan_transition
    from kubegpu.sources.migparted import load_mig_parted

    return plan_transition(node, load_mig_parted("builtin:mig-parted-default").config(name))
