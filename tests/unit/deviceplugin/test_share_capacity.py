"""The agent is the last line against an over-committed GPU: whatever the assignment annotations say, a
share hand-out that would put a GPU over 1000 thousandths is refused (nothing recorded), and so is a
whole GPU on a GPU holding shares."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kubegpu.deviceplugin.inventory import GPU_RESOURCE, MILLI_RESOURCE
from kubegpu.deviceplugin.shares import HandOut, ShareBroker, pod_milli
from kubegpu.errors import DeviceRequestError, DeviceRequestProblem, KubegpuError
from tests.unit.deviceplugin.test_shares import SEED, UUIDS, broker, ok, plugin_for, share_pod, tokens


def admitted(pod: dict[str, Any]) -> None:
    """kubelet started the pod: it is no longer a claim, but still holds its GPU."""
    pod["status"]["phase"] = "Running"


def on_disk(b: ShareBroker) -> list[tuple[str, str]]:
    doc = json.loads(b.ledger.path.read_text())
    return [(h["pod"], h["uuid"]) for h in doc["handouts"]]


def test_a_third_half_gpu_share_on_one_gpu_is_refused_naming_pod_gpu_and_milli(tmp_path: Path) -> None:
    pods = [share_pod(n, 3, 500, scheduled=f"2026-01-01T00:00:0{i}Z") for i, n in enumerate("abc")]
    b = broker(tmp_path, pods)
    for pod in pods[:2]:
        assert b.hand_out(500, check=ok).uuid == UUIDS[3]
        admitted(pod)
    with pytest.raises(DeviceRequestError) as err:
        b.hand_out(500, check=ok)
    assert err.value.problem is DeviceRequestProblem.NO_SHARE
    text = str(err.value)
    assert "ns/c" in text and f"GPU 3 ({UUIDS[3]})" in text
    assert "1000 of 1000" in text and "ns/a 500" in text and "ns/b 500" in text and "1500" in text
    # nothing half-applied: neither memory nor disk holds c
    assert [h.pod for h in b.ledger.handouts()] == ["a", "b"]
    assert on_disk(b) == [("a", UUIDS[3]), ("b", UUIDS[3])]


def test_a_share_over_what_is_left_is_refused_even_when_the_annotation_asks_less(tmp_path: Path) -> None:
    big = share_pod("big", 2, 700)
    b = broker(tmp_path, [big])
    b.hand_out(700, check=ok)
    admitted(big)
    # a forged annotation says the pod asks 100 in all; its container asks 400: 700 + 400 > 1000
    sneaky = share_pod("sneaky", 2, 400, total=100, scheduled="2026-01-01T00:00:05Z")
    b2 = ShareBroker(
        node_name=b.node_name, list_pods=lambda: [big, sneaky], ledger=b.ledger, node=lambda: SEED
    )
    with pytest.raises(DeviceRequestError, match=r"ns/sneaky's share of 400 on GPU 2 .* 700 of 1000"):
        b2.hand_out(400, check=ok)
    assert [h.pod for h in b.ledger.handouts()] == ["big"]


def test_finished_pods_free_their_share_and_terminating_ones_do_not(tmp_path: Path) -> None:
    a, b_pod = share_pod("a", 4, 500), share_pod("b", 4, 500, scheduled="2026-01-01T00:00:01Z")
    pods = [a, b_pod]
    b = broker(tmp_path, pods)
    b.hand_out(500, check=ok)
    b.hand_out(500, check=ok)
    admitted(a)
    admitted(b_pod)
    a["status"]["phase"] = "Succeeded"  # a finished: its 500 are free again
    pods.append(share_pod("c", 4, 500, scheduled="2026-01-01T00:00:02Z"))
    assert b.hand_out(500, check=ok).pod == "c"
    admitted(pods[-1])
    # b is being deleted but still runs (grace period): it keeps its 500 until it is gone or finished
    b_pod["metadata"]["deletionTimestamp"] = "2026-01-01T00:01:00Z"
    pods.append(share_pod("d", 4, 500, scheduled="2026-01-01T00:00:03Z"))
    with pytest.raises(DeviceRequestError, match=r"ns/d's share of 500 on GPU 4 .*1000 of 1000"):
        b.hand_out(500, check=ok)
    pods.remove(b_pod)  # gone from the API: d fits
    assert b.hand_out(500, check=ok).pod == "d"


def test_a_pod_counts_as_the_extender_counts_it_containers_added_init_at_most(tmp_path: Path) -> None:
    with_init = share_pod("init", 1, containers=(("main", 500),))
    with_init["spec"]["initContainers"] = [{"name": "warm", "resources": {"limits": {MILLI_RESOURCE: "500"}}}]
    assert pod_milli(with_init) == 500
    pair = share_pod("pair", 1, containers=(("x", 250), ("y", 250)), scheduled="2026-01-01T00:00:05Z")
    assert pod_milli(pair) == 500
    b = broker(tmp_path, [with_init, pair])
    # the init container, then the main one, then both of pair's: 500 + 500 on GPU 1, never 1500
    assert [(c.pod, c.container) for c in (b.hand_out(500, check=ok), b.hand_out(500, check=ok))] == [
        ("init", "warm"),
        ("init", "main"),
    ]
    assert {b.hand_out(250, check=ok).container, b.hand_out(250, check=ok).container} == {"x", "y"}


def test_a_whole_gpu_is_refused_on_a_gpu_holding_shares(tmp_path: Path) -> None:
    share = share_pod("s", 3, 300)
    b = broker(tmp_path, [share])
    b.hand_out(300, check=ok)
    admitted(share)
    plugin, _ = plugin_for(GPU_RESOURCE, b)
    with pytest.raises(DeviceRequestError) as err:
        plugin.allocate([UUIDS[2], UUIDS[3]])
    assert f"GPU 3 ({UUIDS[3]})" in str(err.value) and "300 of 1000" in str(err.value)
    assert "ns/s 300" in str(err.value)
    assert plugin.allocate([UUIDS[2]]).envs["NVIDIA_VISIBLE_DEVICES"] == UUIDS[2]
    share["status"]["phase"] = "Failed"  # the share ended: the GPU is whole again
    assert plugin.allocate([UUIDS[3]]).envs["NVIDIA_VISIBLE_DEVICES"] == UUIDS[3]


def test_a_whole_gpu_check_uses_the_ledger_when_the_api_cannot_be_read(tmp_path: Path) -> None:
    b = broker(tmp_path, [share_pod("s", 5, 200)])
    b.hand_out(200, check=ok)

    def broken() -> list[dict[str, Any]]:
        raise KubegpuError("API down")

    failing = ShareBroker(node_name=b.node_name, list_pods=broken, ledger=b.ledger, node=lambda: SEED)
    plugin, _ = plugin_for(GPU_RESOURCE, failing)
    with pytest.raises(DeviceRequestError, match=r"GPU 5 .*200 of 1000"):
        plugin.allocate([UUIDS[5]])


def test_an_allocate_refused_for_its_second_container_records_neither(tmp_path: Path) -> None:
    b = broker(tmp_path, [share_pod("x", 1, 500)])
    plugin, _ = plugin_for(MILLI_RESOURCE, b)
    with pytest.raises(DeviceRequestError, match="no pod on node gpu-1 waits for a share of 600"):
        plugin.allocate_containers([tokens(0, 500), tokens(0, 600)])
    assert b.ledger.handouts() == ()
    assert on_disk(b) == []
    # the pod can still be admitted afterwards
    assert plugin.allocate(tokens(0, 500)).envs["NVIDIA_VISIBLE_DEVICES"] == UUIDS[1]


def test_forgetting_a_hand_out_keeps_the_others(tmp_path: Path) -> None:
    b = broker(tmp_path, [])
    one = HandOut(pod_uid="u1", namespace="ns", pod="p", container="c", uuid=UUIDS[0], milli=100)
    two = HandOut(pod_uid="u2", namespace="ns", pod="q", container="c", uuid=UUIDS[0], milli=100)
    b.ledger.record(one)
    b.ledger.record(two)
    b.ledger.forget(one)
    b.ledger.forget(one)  # already gone: nothing happens
    assert b.ledger.handouts() == (two,)
    assert on_disk(b) == [("q", UUIDS[0])]
