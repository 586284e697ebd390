"""The node's ResourceSlices follow what the driver publishes: generations, create/replace/delete."""

from __future__ import annotations

from kubegpu.dra.slices import SliceKeeper, SlicePublisher
from kubegpu.model.dra import DRIVER_NAME, dra_devices
from kubegpu.sources.spec import load_node
from tests.unit.dra.fakes import Api, big


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
