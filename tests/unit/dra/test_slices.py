"""The node's ResourceSlices follow what the driver publishes: generations, create/replace/delete."""

from __future__ import annotations

import copy
from typing import Any

from kubegpu.dra.slices import SliceKeeper, SlicePublisher
from kubegpu.errors import ApiServerError
from kubegpu.model.dra import DRIVER_NAME, dra_devices
from kubegpu.model.node import Gpu, GpuUuid, Node
from kubegpu.sources.spec import load_node


class Api:
    """Stores slices as the API server would, adding a resourceVersion and normalising nothing."""

    def __init__(self) -> None:
        self.slices: dict[str, dict[str, Any]] = {}
        self.writes: list[str] = []
        self.version = 0
        self.down = False

    def get_node(self, name: str, *, quick: bool = False) -> dict[str, Any] | None:
        return {"metadata": {"name": name, "uid": "node-uid"}}

    def list_resource_slices(self, *, node_name: str, driver: str) -> list[dict[str, Any]]:
        if self.down:
            raise ApiServerError("https://api: not reachable")
        return [
            copy.deepcopy(s)
            for s in self.slices.values()
            if s["spec"]["nodeName"] == node_name and s["spec"]["driver"] == driver
        ]

    def _store(self, body: dict[str, Any]) -> dict[str, Any]:
        self.version += 1
        body = copy.deepcopy(body)
        body["metadata"]["resourceVersion"] = str(self.version)
        self.slices[body["metadata"]["name"]] = body
        return body

    def create_resource_slice(self, body: dict[str, Any]) -> dict[str, Any] | None:
        assert body["metadata"]["name"] not in self.slices
        self.writes.append("create " + body["metadata"]["name"])
        return self._store(body)

    def replace_resource_slice(self, body: dict[str, Any]) -> dict[str, Any] | None:
        name = body["metadata"]["name"]
        assert self.slices[name]["metadata"]["resourceVersion"] == body["metadata"]["resourceVersion"]
        self.writes.append("replace " + name)
        return self._store(body)

    def delete_resource_slice(self, name: str) -> None:
        self.writes.append("delete " + name)
        del self.slices[name]


def big(n: int) -> Node:
    gpus = tuple(
        Gpu(
            index=i,
            uuid=GpuUuid(f"GPU-{i:08d}"),
            model="H100-80GB",
            memory_mib=81559,
            numa_node=None,
            pci_bus_id="",
        )
        for i in range(n)
    )
    return Node(name="big", gpus=gpus, topology=None)


def test_first_publish_creates_generation_1_and_repeating_writes_nothing() -> None:
    api = Api()
    publisher = SlicePublisher(api, node_name="n1")
    devices = dra_devices(load_node("builtin:seed-8gpu"))
    assert publisher.publish(devices)
    assert api.writes == [f"create n1-{DRIVER_NAME}-0"]
    (only,) = api.slices.values()
    assert only["spec"]["pool"]["generation"] == 1
    assert only["metadata"]["ownerReferences"][0]["uid"] == "node-uid"
    assert not publisher.publish(devices)
    assert len(api.writes) == 1


def test_a_changed_device_set_bumps_the_generation_of_every_slice() -> None:
    api = Api()
    publisher = SlicePublisher(api, node_name="n1")
    devices = dra_devices(big(200))
    publisher.publish(devices)
    assert len(api.slices) == 2
    publisher.publish(devices[1:])  # one GPU failed
    assert {s["spec"]["pool"]["generation"] for s in api.slices.values()} == {2}
    assert sum(len(s["spec"]["devices"]) for s in api.slices.values()) == 199
    publisher.publish(devices[:100])  # fits one slice now: the second one goes
    assert len(api.slices) == 1
    assert api.writes[-1] == f"delete n1-{DRIVER_NAME}-1"
    assert next(iter(api.slices.values()))["spec"]["pool"] == {
        "name": "n1",
        "generation": 3,
        "resourceSliceCount": 1,
    }


def test_slices_wiped_by_a_kubelet_restart_come_back() -> None:
    api = Api()
    publisher = SlicePublisher(api, node_name="n1")
    devices = dra_devices(load_node("builtin:seed-8gpu"))
    publisher.publish(devices)
    api.slices.clear()
    assert publisher.publish(devices)
    assert len(api.slices) == 1


def test_the_keeper_reports_api_errors_and_recovers() -> None:
    api = Api()
    devices = dra_devices(load_node("builtin:seed-8gpu"))
    keeper = SliceKeeper(SlicePublisher(api, node_name="n1"), lambda: devices, interval_s=60)
    api.down = True
    assert not keeper.reconcile()
    assert "not reachable" in keeper.last_error
    assert not keeper.published.is_set()
    api.down = False
    assert keeper.reconcile()
    assert keeper.last_error == "" and keeper.published.is_set()
