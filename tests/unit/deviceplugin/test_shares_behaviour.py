"""Share hand-out behaviours the mutation run found unpinned (issue 61): which pods are claims (not
terminating, finished or running ones; a sidecar asking no share is skipped), what a malformed or
foreign assignment, a GPU the node lacks and an unreadable quantity do (a line in ``problems``, the pod
left out, never a crash), which quantities are shares, and which GPUs count as shared."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kubegpu.deviceplugin.inventory import MILLI_RESOURCE
from kubegpu.deviceplugin.shares import (
    HandOut,
    ShareBroker,
    ShareLedger,
    container_milli,
    pick,
    pod_milli,
    share_claims,
)
from kubegpu.errors import DeviceRequestError, KubegpuError
from tests.unit.deviceplugin.test_shares import NODE, SEED, UUIDS, broker, ok, share_pod

ANNOTATION = "kubegpu.io/gpu-assignment"


def claims_of(pods: list[dict[str, Any]], handed: dict[str, frozenset[str]] | None = None) -> list[str]:
    return [
        f"{c.pod}/{c.container}@{c.gpu}"
        for c in share_claims(pods, node_name=NODE, uuids=UUIDS, handed=handed or {})
    ]


def problems_of(pods: list[dict[str, Any]]) -> list[str]:
    out: list[str] = []
    share_claims(pods, node_name=NODE, uuids=UUIDS, handed={}, problems=out)
    return out


def with_assignment(pod: dict[str, Any], doc: object) -> dict[str, Any]:
    pod["metadata"]["annotations"][ANNOTATION] = doc if isinstance(doc, str) else json.dumps(doc)
    return pod


# -- which pods are claims ----------------------------------------------------------------------------


@pytest.mark.parametrize("phase", ["Running", "Succeeded", "Failed", "Unknown"])
def test_only_pending_pods_are_claims(phase: str) -> None:
    assert claims_of([share_pod("a", 1, phase=phase), share_pod("b", 2)]) == ["b/main@2"]


def test_a_terminating_pending_pod_is_not_a_claim() -> None:
    gone = share_pod("a", 1)
    gone["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:09Z"
    assert claims_of([gone, share_pod("b", 2)]) == ["b/main@2"]


def test_a_pod_without_a_phase_yet_is_pending() -> None:
    pod = share_pod("a", 4)
    del pod["status"]["phase"]
    assert claims_of([pod]) == ["a/main@4"]


def test_a_sidecar_asking_no_share_is_skipped_for_the_container_that_asks() -> None:
    pod = share_pod("a", 3, 400)
    pod["spec"]["containers"].insert(0, {"name": "sidecar", "resources": {"limits": {"cpu": "100m"}}})
    pod["spec"]["initContainers"] = [{"name": "init", "resources": {}}]
    claims = share_claims([pod], node_name=NODE, uuids=UUIDS, handed={})
    assert [(c.container, c.milli, c.gpu, c.uuid) for c in claims] == [("main", 400, 3, UUIDS[3])]


def test_a_pod_asking_no_share_at_all_is_no_claim_and_no_problem() -> None:
    pod = share_pod("a", 3)
    pod["spec"]["containers"] = [{"name": "main", "resources": {"limits": {"cpu": "1"}}}]
    assert claims_of([pod]) == [] and problems_of([pod]) == []


def test_containers_already_handed_out_are_skipped_and_a_fully_handed_pod_is_no_claim() -> None:
    pod = share_pod("a", 2, containers=(("one", 300), ("two", 200)))
    assert claims_of([pod], {"uid-a": frozenset({"one"})}) == ["a/two@2"]
    assert claims_of([pod], {"uid-a": frozenset({"one", "two"})}) == []
    started = share_claims([pod], node_name=NODE, uuids=UUIDS, handed={"uid-a": frozenset({"one"})})
    fresh = share_claims([pod], node_name=NODE, uuids=UUIDS, handed={})
    assert started[0].started and not fresh[0].started


def test_a_half_admitted_pod_comes_before_older_bound_ones_then_bind_order() -> None:
    old = share_pod("old", 1, scheduled="2026-01-01T00:00:01Z")
    half = share_pod("half", 2, containers=(("one", 300), ("two", 200)), scheduled="2026-01-01T00:00:05Z")
    new = share_pod("new", 3, scheduled="2026-01-01T00:00:03Z")
    assert claims_of([new, half, old], {"uid-half": frozenset({"one"})}) == [
        "half/two@2",
        "old/main@1",
        "new/main@3",
    ]


def test_without_a_scheduled_time_the_creation_time_orders_pods() -> None:
    a, b = share_pod("a", 1), share_pod("b", 2)
    a["status"]["conditions"] = b["status"]["conditions"] = []
    a["metadata"]["creationTimestamp"] = "2026-01-01T00:00:09Z"
    b["metadata"]["creationTimestamp"] = "2026-01-01T00:00:01Z"
    assert claims_of([a, b]) == ["b/main@2", "a/main@1"]


# -- assignments that cannot be used ------------------------------------------------------------------


@pytest.mark.parametrize("problems", [True, False])
def test_a_malformed_assignment_is_a_problem_line_and_the_other_pods_are_served(problems: bool) -> None:
    bad = with_assignment(share_pod("bad", 1), "{not json")
    out: list[str] = []
    claims = share_claims(
        [bad, share_pod("good", 2)],
        node_name=NODE,
        uuids=UUIDS,
        handed={},
        problems=out if problems else None,
    )
    assert [c.pod for c in claims] == ["good"]
    assert out == (
        ["ns/bad: kubegpu.io/gpu-assignment is not JSON: " + out[0].split("is not JSON: ")[1]]
        if problems
        else []
    )


@pytest.mark.parametrize("problems", [True, False])
def test_an_assignment_for_another_node_or_several_gpus_is_a_problem_line(problems: bool) -> None:
    elsewhere = share_pod("elsewhere", 1, node="gpu-2")
    elsewhere["spec"]["nodeName"] = NODE
    two = with_assignment(
        share_pod("two", 1), {"gpus": [1, 2], "milli": 500, "node": NODE, "uuids": [], "version": 1}
    )
    out: list[str] = []
    claims = share_claims(
        [elsewhere, two, share_pod("good", 5)],
        node_name=NODE,
        uuids=UUIDS,
        handed={},
        problems=out if problems else None,
    )
    assert [c.pod for c in claims] == ["good"]
    expected = [
        f"ns/elsewhere: {ANNOTATION} is for node gpu-2, not one GPU here",
        f"ns/two: {ANNOTATION} is for node {NODE}, not one GPU here",
    ]
    assert out == (expected if problems else [])


def test_a_pod_without_an_assignment_is_no_claim_and_no_problem() -> None:
    pod = share_pod("a", 1)
    pod["metadata"]["annotations"] = {}
    assert claims_of([pod]) == [] and problems_of([pod]) == []


@pytest.mark.parametrize(
    "doc",
    [
        {"gpus": [8], "milli": 500, "node": NODE, "uuids": [], "version": 1},  # index == GPU count
        {"gpus": [9], "milli": 500, "node": NODE, "uuids": [], "version": 1},
        {"gpus": [1], "milli": 500, "node": NODE, "uuids": ["GPU-not-here"], "version": 1},
    ],
)
@pytest.mark.parametrize("problems", [True, False])
def test_an_assignment_naming_a_gpu_the_node_lacks_is_a_problem_line(
    doc: dict[str, Any], problems: bool
) -> None:
    pod = with_assignment(share_pod("a", 1), doc)
    out: list[str] = []
    claims = share_claims(
        [pod, share_pod("good", 7)],
        node_name=NODE,
        uuids=UUIDS,
        handed={},
        problems=out if problems else None,
    )
    assert [c.pod for c in claims] == ["good"]
    assert out == ([f"ns/a: {ANNOTATION} names a GPU this node does not have"] if problems else [])


def test_the_last_gpu_by_index_and_a_uuid_in_any_case_are_found() -> None:
    last = with_assignment(
        share_pod("last", 0), {"gpus": [7], "milli": 500, "node": NODE, "uuids": [], "version": 1}
    )
    upper = with_assignment(
        share_pod("upper", 0),
        {"gpus": [0], "milli": 500, "node": NODE, "uuids": [UUIDS[6].upper()], "version": 1},
    )
    assert sorted(claims_of([last, upper])) == ["last/main@7", "upper/main@6"]


@pytest.mark.parametrize("quantity", ["abc", "0", "-500", "500.5", "0.5", "0.2345k", ""])
@pytest.mark.parametrize("problems", [True, False])
def test_an_unreadable_or_impossible_share_is_a_problem_line(quantity: str, problems: bool) -> None:
    pod = share_pod("a", 1, total=500, containers=(("main", quantity),))
    out: list[str] = []
    claims = share_claims(
        [pod, share_pod("good", 2)],
        node_name=NODE,
        uuids=UUIDS,
        handed={},
        problems=out if problems else None,
    )
    assert [c.pod for c in claims] == ["good"]
    assert out == ([f"ns/a: container main asks an unreadable {MILLI_RESOURCE}"] if problems else [])


# -- quantities ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "milli"),
    [
        ("500", 500),
        (" 250 ", 250),
        ("1k", 1000),
        ("0.5k", 500),
        ("1M", 1_000_000),
        (1, 1),
        ("1000", 1000),
        ("0", None),
        ("-1", None),
        ("500.5", None),
        ("0.0001k", None),
        ("1Ki", None),
        ("k", None),
        ("x", None),
    ],
)
def test_a_share_is_a_whole_positive_number_of_thousandths(value: object, milli: int | None) -> None:
    assert container_milli({"resources": {"limits": {MILLI_RESOURCE: value}}}) == milli


def test_the_request_wins_over_the_limit_and_no_ask_is_none() -> None:
    both = {"resources": {"requests": {MILLI_RESOURCE: "300"}, "limits": {MILLI_RESOURCE: "400"}}}
    assert container_milli(both) == 300
    assert container_milli({"resources": {"limits": {MILLI_RESOURCE: "400"}}}) == 400
    assert container_milli({"resources": {"requests": {"cpu": "1"}}}) is None
    assert container_milli({}) is None


def test_a_pod_holds_its_containers_added_up_or_its_largest_init_container() -> None:
    pod = share_pod("a", 1, total=300, containers=(("one", 300), ("two", "bad")))
    pod["spec"]["initContainers"] = [
        {"name": "i1", "resources": {"limits": {MILLI_RESOURCE: "200"}}},
        {"name": "i2", "resources": {"limits": {MILLI_RESOURCE: "250"}}},
    ]
    assert pod_milli(pod) == 300
    pod["spec"]["initContainers"][0]["resources"]["limits"][MILLI_RESOURCE] = "700"
    assert pod_milli(pod) == 700
    assert pod_milli({"spec": {}}) == 0


def test_pick_takes_the_first_claim_asking_exactly_that_much() -> None:
    claims = share_claims(
        [
            share_pod("a", 1, 300),
            share_pod("b", 2, 500, scheduled="2026-01-01T00:00:01Z"),
            share_pod("c", 3, 500, scheduled="2026-01-01T00:00:02Z"),
        ],
        node_name=NODE,
        uuids=UUIDS,
        handed={},
    )
    chosen = pick(claims, 500)
    assert chosen is not None and chosen.pod == "b"
    assert pick(claims, 400) is None


# -- shared GPUs and the ledger -----------------------------------------------------------------------


def test_shared_gpus_are_those_of_live_share_pods_not_finished_or_terminating_ones(tmp_path: Path) -> None:
    terminating = share_pod("t", 4)
    terminating["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:09Z"
    whole = share_pod("whole", 6)
    whole["spec"]["containers"] = [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]
    pods = [
        share_pod("pending", 1),
        share_pod("running", 2, phase="Running"),
        share_pod("done", 3, phase="Succeeded"),
        share_pod("failed", 5, phase="Failed"),
        terminating,
        whole,
        share_pod("elsewhere", 7, node="gpu-2"),
    ]
    assert broker(tmp_path, pods).shared_gpus() == frozenset({1, 2})


def test_a_gpu_handed_out_stays_shared_while_its_pod_terminates(tmp_path: Path) -> None:
    pod = share_pod("a", 4)
    b = broker(tmp_path, [pod])
    b.hand_out(500, check=ok)
    pod["status"]["phase"] = "Running"
    pod["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:09Z"
    assert b.shared_gpus() == frozenset({4})
    b.peek(500)  # a listing: the terminating pod still holds its GPU, so its hand-out is kept
    assert [h.pod for h in b.ledger.handouts()] == ["a"]
    pod["status"]["phase"] = "Succeeded"
    b.peek(500)
    assert b.ledger.handouts() == () and b.shared_gpus() == frozenset()


def test_a_finished_share_pods_gpu_is_not_shared_even_before_a_listing_prunes_the_ledger(
    tmp_path: Path,
) -> None:
    """The hand-out ledger still names the GPU of a share pod that has just finished (no listing has
    pruned it yet): the GPU is free for a whole-GPU pod at once."""
    pod = share_pod("a", 4)
    b = broker(tmp_path, [pod])
    b.hand_out(500, check=ok)
    pod["status"]["phase"] = "Succeeded"
    assert [h.pod for h in b.ledger.handouts()] == ["a"]  # nothing pruned it yet
    assert b.shared_gpus() == frozenset()


def test_a_listing_forgets_the_hand_outs_of_pods_gone_or_finished_and_keeps_the_others(
    tmp_path: Path,
) -> None:
    ledger = ShareLedger(tmp_path / "shares.json")
    for uid, name in (("uid-gone", "gone"), ("uid-done", "done"), ("uid-live", "live")):
        ledger.record(
            HandOut(pod_uid=uid, namespace="ns", pod=name, container="main", uuid=UUIDS[1], milli=100)
        )
    pods = [share_pod("done", 1, phase="Succeeded"), share_pod("live", 1, phase="Running")]
    b = ShareBroker(node_name=NODE, list_pods=lambda: pods, ledger=ledger, node=lambda: SEED)
    b.peek(100)
    assert [h.pod for h in ledger.handouts()] == ["live"]
    assert [h.pod for h in ShareLedger(tmp_path / "shares.json").handouts()] == ["live"]


def _record(ledger: ShareLedger, uid: str, gpu: int, milli: int, container: str = "main") -> None:
    name = uid.removeprefix("uid-")
    ledger.record(
        HandOut(pod_uid=uid, namespace="ns", pod=name, container=container, uuid=UUIDS[gpu], milli=milli)
    )


def _api_down() -> list[dict[str, Any]]:
    raise KubegpuError("API down")


def test_with_the_api_down_a_whole_gpu_check_counts_each_pod_s_hand_outs_added_up(tmp_path: Path) -> None:
    ledger = ShareLedger(tmp_path / "shares.json")
    _record(ledger, "uid-x", 1, 300, "a")
    _record(ledger, "uid-x", 1, 300, "b")
    b = ShareBroker(node_name=NODE, list_pods=_api_down, ledger=ledger, node=lambda: SEED)
    with pytest.raises(
        DeviceRequestError, match=r"GPU 1 .* is not whole: 600 of 1000 thousandths .*\(ns/x 600\)"
    ):
        b.check_whole("nvidia.com/gpu", [1])


def test_a_whole_gpu_check_covers_gpu_0_and_ignores_indices_the_node_lacks(tmp_path: Path) -> None:
    ledger = ShareLedger(tmp_path / "shares.json")
    _record(ledger, "uid-x", 0, 100)
    b = ShareBroker(node_name=NODE, list_pods=_api_down, ledger=ledger, node=lambda: SEED)
    with pytest.raises(DeviceRequestError, match=r"GPU 0 "):
        b.check_whole("nvidia.com/gpu", [0])
    b.check_whole("nvidia.com/gpu", [1, 8, -1])  # no shares there; 8 and -1 are not GPUs of this node


def test_a_refusal_names_five_holders_and_how_many_more(tmp_path: Path) -> None:
    ledger = ShareLedger(tmp_path / "shares.json")
    for i in range(7):
        _record(ledger, f"uid-h{i}", 2, 100)
    b = ShareBroker(node_name=NODE, list_pods=_api_down, ledger=ledger, node=lambda: SEED)
    with pytest.raises(DeviceRequestError) as whole:
        b.check_whole("nvidia.com/gpu", [2])
    assert "(ns/h0 100, ns/h1 100, ns/h2 100, ns/h3 100, ns/h4 100);" in str(whole.value)
    pods = [share_pod("new", 2, 400), *(share_pod(f"h{i}", 2, 100, phase="Running") for i in range(7))]
    b2 = ShareBroker(node_name=NODE, list_pods=lambda: pods, ledger=ledger, node=lambda: SEED)
    with pytest.raises(DeviceRequestError) as share:
        b2.hand_out(400, check=ok)
    text = str(share.value)
    assert "700 of 1000 thousandths are handed out there already" in text
    assert "(ns/h0 100, ns/h1 100, ns/h2 100, ns/h3 100, ns/h4 100 and 2 more)" in text
    assert "it would hold 1100" in text


def test_a_share_counts_the_whole_pod_not_only_the_container_being_admitted(tmp_path: Path) -> None:
    ledger = ShareLedger(tmp_path / "shares.json")
    _record(ledger, "uid-old", 2, 600)
    pods = [
        share_pod("two", 2, containers=(("one", 300), ("two", 200))),
        share_pod("old", 2, 600, phase="Running"),
    ]
    b = ShareBroker(node_name=NODE, list_pods=lambda: pods, ledger=ledger, node=lambda: SEED)
    # the first container asks 300 (600 + 300 fits) but the pod holds 500: 1100 would not
    with pytest.raises(DeviceRequestError, match=r"ns/two's share of 500 on GPU 2 .* it would hold 1100"):
        b.hand_out(300, check=ok)
    assert [h.pod for h in ledger.handouts()] == ["old"]


def test_shared_gpus_follow_an_assignment_s_uuid_over_its_index(tmp_path: Path) -> None:
    by_uuid = with_assignment(
        share_pod("u", 0), {"gpus": [0], "milli": 500, "node": NODE, "uuids": [UUIDS[5]], "version": 1}
    )
    by_index = with_assignment(
        share_pod("i", 0), {"gpus": [3], "milli": 500, "node": NODE, "uuids": [], "version": 1}
    )
    assert broker(tmp_path, [by_uuid, by_index]).shared_gpus() == frozenset({5, 3})


def test_shared_gpus_skip_pods_without_an_assignment_or_with_a_malformed_one(tmp_path: Path) -> None:
    none = share_pod("none", 1)
    none["metadata"]["annotations"] = {}
    bad = with_assignment(share_pod("bad", 2), "{")
    assert broker(tmp_path, [none, bad, share_pod("good", 3)]).shared_gpus() == frozenset({3})


def test_the_ledger_file_is_versioned_json_read_back_by_a_restarted_agent(tmp_path: Path) -> None:
    path = tmp_path / "state" / "shares.json"
    ledger = ShareLedger(path)
    _record(ledger, "uid-a", 4, 250)
    doc = json.loads(path.read_text())
    assert doc["version"] == 1
    assert doc["handouts"] == [
        {
            "container": "main",
            "milli": 250,
            "namespace": "ns",
            "pod": "a",
            "pod_uid": "uid-a",
            "uuid": UUIDS[4],
        }
    ]
    assert ShareLedger(path).handouts() == ledger.handouts()


def test_an_unreadable_init_container_share_counts_nothing() -> None:
    pod = share_pod("a", 1)
    pod["spec"]["containers"] = [{"name": "main", "resources": {}}]
    pod["spec"]["initContainers"] = [{"name": "init", "resources": {"limits": {MILLI_RESOURCE: "bad"}}}]
    assert pod_milli(pod) == 0


@pytest.mark.parametrize(("holders", "more"), [(5, ""), (6, " and 1 more")])
def test_a_refusal_lists_up_to_five_holders_and_counts_the_rest(
    tmp_path: Path, holders: int, more: str
) -> None:
    ledger = ShareLedger(tmp_path / "shares.json")
    for i in range(holders):
        _record(ledger, f"uid-h{i}", 2, 100)
    pods = [
        share_pod("new", 2, 600),
        *(share_pod(f"h{i}", 2, 100, phase="Running") for i in range(holders)),
    ]
    b = ShareBroker(node_name=NODE, list_pods=lambda: pods, ledger=ledger, node=lambda: SEED)
    with pytest.raises(DeviceRequestError) as err:
        b.hand_out(600, check=ok)
    assert f"(ns/h0 100, ns/h1 100, ns/h2 100, ns/h3 100, ns/h4 100{more}); it would hold" in str(err.value)


def test_a_whole_gpu_check_of_an_index_below_0_is_no_gpu_of_this_node(tmp_path: Path) -> None:
    ledger = ShareLedger(tmp_path / "shares.json")
    _record(ledger, "uid-x", 7, 100)  # the last GPU holds a share
    b = ShareBroker(node_name=NODE, list_pods=_api_down, ledger=ledger, node=lambda: SEED)
    b.check_whole("nvidia.com/gpu", [-1])
    with pytest.raises(DeviceRequestError, match=r"GPU 7 "):
        b.check_whole("nvidia.com/gpu", [7])


class _Clock:
    def __init__(self) -> None:
        self.now = 50.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize(("after_s", "lists"), [(1.0, 1), (1.001, 2)])
def test_an_allocate_reuses_the_preferred_allocation_s_list_for_exactly_one_second(
    tmp_path: Path, after_s: float, lists: int
) -> None:
    calls: list[int] = []
    pods = [share_pod("a", 3)]

    def list_pods() -> list[dict[str, Any]]:
        calls.append(1)
        return pods

    clock = _Clock()
    b = ShareBroker(
        node_name=NODE,
        list_pods=list_pods,
        ledger=ShareLedger(tmp_path / "s.json"),
        node=lambda: SEED,
        clock=clock,
    )
    assert b.peek(500) is not None
    clock.now += after_s
    assert b.hand_out(500, check=ok).pod == "a"
    assert len(calls) == lists


def test_no_matching_pod_lists_the_first_five_pods_waiting(tmp_path: Path) -> None:
    pods = [share_pod(f"w{i}", i, 300, scheduled=f"2026-01-01T00:00:0{i}Z") for i in range(6)]
    with pytest.raises(DeviceRequestError) as err:
        broker(tmp_path, pods).hand_out(500, check=ok)
    assert (
        "(pods waiting for shares: ns/w0 (300), ns/w1 (300), ns/w2 (300), ns/w3 (300), ns/w4 (300));"
        in str(err.value)
    )
