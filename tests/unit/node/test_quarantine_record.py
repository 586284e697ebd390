"""The quarantine's durable record and its reloads: a restart restores every failed GPU however many
there are (the record is an annotation, never truncated; the condition is a human summary), garbage in
the record is refused and the condition read instead, and a reload that turns the quarantine off or
changes its taint key leaves none of kubegpu's old taint or Lease place behind."""

from __future__ import annotations

import json
import logging
from typing import Any, cast

import pytest

from kubegpu.health.policy import HealthPolicy
from kubegpu.health.quarantine import QuarantinePolicy, QuarantineSettings, TaintEffect
from kubegpu.health.tracker import HealthTracker
from kubegpu.kubeapi import KubeApi
from kubegpu.model.event import GpuEvent, GpuEventKind
from kubegpu.node.hygiene import NodeHygiene
from kubegpu.node.quarantine import (
    CONDITION_TYPE,
    MESSAGE_LIMIT,
    RECORD_ANNOTATION,
    condition_for,
    failed_gpus,
    read_record,
    recorded_faults,
)
from tests.unit.node.test_hygiene import KEY, UUIDS, FakeApi, make

BIG = [f"GPU-{i:08x}-1111-2222-3333-{i:012x}" for i in range(16)]  # real UUIDs are this long
DETAIL = "XID 79: GPU has fallen off the bus; " + "the driver reported extra detail " * 4
USER_TAINT = {"key": "team", "value": "a", "effect": "NoSchedule"}


def big(api: FakeApi, **settings: Any) -> tuple[NodeHygiene, HealthTracker]:
    tracker = HealthTracker(gpu_count=16, aliases={u: i for i, u in enumerate(BIG)}, policy=HealthPolicy())
    hygiene = NodeHygiene(
        cast(KubeApi, api),
        node_name="n0",
        tracker=tracker,
        uuids=BIG,
        index_of={u: i for i, u in enumerate(BIG)},
        holders=list,
        quarantine=QuarantineSettings(**settings),
        wall_clock=lambda: 1_767_225_600.0,
    )
    return hygiene, tracker


def storm(tracker: HealthTracker, gpus: range = range(16)) -> None:
    for gpu in gpus:
        tracker.apply(GpuEvent(gpu=gpu, kind=GpuEventKind.XID, xid=79, detail=DETAIL))


def record(api: FakeApi) -> Any:
    return json.loads(api.nodes["n0"]["metadata"]["annotations"][RECORD_ANNOTATION])


# -- finding 9: the durable record ---------------------------------------------------------------


def test_a_restart_after_an_xid_storm_on_16_gpus_restores_every_failed_gpu() -> None:
    api = FakeApi()
    first, tracker = big(api)
    storm(tracker)
    first.sync_once()
    second, fresh = big(api)  # the restart: a new tracker knows nothing
    assert second.read_back() == 16
    assert not any(fresh.is_healthy(i) for i in range(16)), "no failed GPU may come back healthy"
    message = api.condition()["message"]  # type: ignore[index]
    assert len(message) <= MESSAGE_LIMIT and "... and " in message, "the summary is cut, by whole GPUs"
    assert [g["uuid"] for g in record(api)["gpus"]] == BIG
    taints_before = list(api.nodes["n0"]["spec"]["taints"])
    second.sync_once()
    assert api.nodes["n0"]["spec"]["taints"] == taints_before, "the same taint, not a second one"


def test_the_condition_is_a_summary_cut_by_whole_gpus_and_says_how_many_more() -> None:
    tracker = HealthTracker(gpu_count=16, aliases={}, policy=HealthPolicy())
    storm(tracker)
    failed = failed_gpus(tracker.statuses(), BIG, QuarantinePolicy())
    for prefix in ("", "quarantine withheld (fleet cap reached): "):
        cond = condition_for(failed, prefix=prefix)
        assert cond is not None
        message = cond["message"]
        assert len(message) <= MESSAGE_LIMIT and message.startswith(prefix)
        shown = [u for u in BIG if u in message]
        assert shown == BIG[: len(shown)] and 0 < len(shown) < 16
        assert message.endswith(f"... and {16 - len(shown)} more")
    few = condition_for(failed[:2])
    assert few is not None and "... and" not in few["message"] and BIG[1] in few["message"]


def test_the_record_keeps_every_gpu_and_the_taint_it_wrote() -> None:
    api = FakeApi()
    hygiene, tracker = big(api, taint_effect=TaintEffect.NO_EXECUTE)
    storm(tracker, range(3, 5))
    tracker.apply(GpuEvent(gpu=9, kind=GpuEventKind.ECC_DOUBLE_BIT))
    hygiene.sync_once()
    doc = record(api)
    assert doc["gpus"] == [
        {"index": 3, "uuid": BIG[3], "reason": "Xid79"},
        {"index": 4, "uuid": BIG[4], "reason": "Xid79"},
        {"index": 9, "uuid": BIG[9], "reason": "EccDoubleBit"},
    ]
    assert doc["taint"] == {"key": KEY, "value": "Xid79", "effect": "NoExecute"}
    got = recorded_faults(api.nodes["n0"])
    assert [(u, k, x) for u, k, x, _ in got] == [
        (BIG[3], GpuEventKind.XID, 79),
        (BIG[4], GpuEventKind.XID, 79),
        (BIG[9], GpuEventKind.ECC_DOUBLE_BIT, None),
    ]


GARBAGE = [
    "{not json",
    "[" * 100_000 + "]" * 100_000,
    json.dumps({"version": 2, "gpus": [], "taint": None}),
    json.dumps({"version": 1, "gpus": "all", "taint": None}),
    json.dumps({"version": 1, "gpus": [{"index": "3", "uuid": "GPU-1", "reason": "Xid79"}], "taint": None}),
    json.dumps({"version": 1, "gpus": [{"index": 3, "uuid": "GPU 1; rm", "reason": "Xid79"}], "taint": None}),
    json.dumps({"version": 1, "gpus": [{"index": 3, "uuid": "GPU-1", "reason": "Bogus"}], "taint": None}),
    json.dumps({"version": 1, "gpus": [], "taint": {"key": KEY, "value": "x", "effect": "Evict"}}),
    json.dumps({"version": 1, "gpus": [{"index": 0, "uuid": "GPU-1", "reason": "Xid79"}] * 20_000}),
]


@pytest.mark.parametrize("garbage", GARBAGE, ids=range(len(GARBAGE)))
def test_garbage_in_the_record_is_refused_whole_and_the_condition_read_instead(garbage: str) -> None:
    cond = {"type": CONDITION_TYPE, "status": "True", "message": f"GPU 2 {UUIDS[2]} GpuLost: lost"}
    node = {"metadata": {"annotations": {RECORD_ANNOTATION: garbage}}, "status": {"conditions": [cond]}}
    rec, problem = read_record(node)
    assert rec is None and problem is not None and RECORD_ANNOTATION in problem
    problems: list[str] = []
    assert [u for u, *_ in recorded_faults(node, problems)] == [UUIDS[2]] and problems == [problem]


def test_a_refused_record_is_logged_and_the_restart_still_keeps_the_quarantine(
    caplog: pytest.LogCaptureFixture,
) -> None:
    api = FakeApi()
    first, tracker = make(api)
    tracker.apply(GpuEvent(gpu=2, kind=GpuEventKind.LOST))
    first.sync_once()
    api.nodes["n0"]["metadata"]["annotations"][RECORD_ANNOTATION] = '{"version": 1, "gpus": 7}'
    second, fresh = make(api)
    with caplog.at_level(logging.ERROR, logger="kubegpu.node.hygiene"):
        assert second.read_back() == 1
    assert not fresh.is_healthy(2)
    assert any("quarantine record on the node refused" in r.getMessage() for r in caplog.records)
    second.sync_once()
    assert record(api)["gpus"] == [{"index": 2, "uuid": UUIDS[2], "reason": "GpuLost"}], "written anew"


def test_a_node_quarantined_by_an_older_agent_is_read_from_its_condition_and_gets_a_record() -> None:
    api = FakeApi()
    api.nodes["n0"]["status"]["conditions"].append(
        {"type": CONDITION_TYPE, "status": "True", "reason": "Xid79", "message": f"GPU 1 {UUIDS[1]} Xid79: x"}
    )
    api.nodes["n0"]["spec"]["taints"].append({"key": KEY, "value": "Xid79", "effect": "NoSchedule"})
    hygiene, tracker = make(api)
    assert hygiene.read_back() == 1 and not tracker.is_healthy(1)
    hygiene.sync_once()
    assert record(api)["gpus"] == [{"index": 1, "uuid": UUIDS[1], "reason": "Xid79"}]
    assert len(api.taints()) == 1


def test_a_lifted_quarantine_leaves_an_empty_record_that_outranks_a_leftover_condition() -> None:
    api = FakeApi()
    hygiene, tracker = make(api)
    tracker.apply(GpuEvent(gpu=0, kind=GpuEventKind.XID, xid=79))
    hygiene.sync_once()
    tracker.apply(GpuEvent(gpu=0, kind=GpuEventKind.HEALTHY))
    hygiene.sync_once()
    assert record(api)["gpus"] == [] and api.taints() == []
    # the agent died between the record's write and the condition's removal
    api.nodes["n0"]["status"]["conditions"].append(
        {"type": CONDITION_TYPE, "status": "True", "message": f"GPU 0 {UUIDS[0]} Xid79: x"}
    )
    again, fresh = make(api)
    assert again.read_back() == 0 and fresh.is_healthy(0)


def test_a_node_never_quarantined_gets_no_record() -> None:
    api = FakeApi()
    hygiene, _ = make(api)
    hygiene.sync_once()
    assert RECORD_ANNOTATION not in api.nodes["n0"]["metadata"].get("annotations", {})


# -- finding 10: reloads ----------------------------------------------------------------------------


def quarantined() -> tuple[FakeApi, NodeHygiene, HealthTracker]:
    api = FakeApi()
    hygiene, tracker = make(api)
    tracker.apply(GpuEvent(gpu=3, kind=GpuEventKind.XID, xid=79))
    hygiene.sync_once()
    assert api.taints() == [{"key": KEY, "value": "Xid79", "effect": "NoSchedule"}]
    assert "n0" in api.quarantined()
    return api, hygiene, tracker


def test_a_reload_turning_quarantine_off_removes_its_taint_condition_and_lease_place() -> None:
    api, hygiene, tracker = quarantined()
    hygiene.set_quarantine(QuarantineSettings(enabled=False))
    hygiene.sync_once()
    assert api.taints() == [] and api.condition() is None and api.quarantined() == {}
    assert api.nodes["n0"]["spec"]["taints"] == [USER_TAINT], "other taints stay"
    assert record(api)["gpus"] == []
    hygiene.sync_once()  # nothing more to do, and nothing comes back
    assert api.taints() == [] and api.quarantined() == {}
    assert not tracker.is_healthy(3), "the GPU itself stays unhealthy for kubelet"


def test_a_reload_changing_the_taint_key_moves_kubegpus_taint_and_keeps_the_lease_place() -> None:
    api, hygiene, _ = quarantined()
    hygiene.set_quarantine(QuarantineSettings(taint_key="example.com/gpu-broken"))
    hygiene.sync_once()
    taints = api.nodes["n0"]["spec"]["taints"]
    assert [t for t in taints if t["key"] == KEY] == []
    assert {"key": "example.com/gpu-broken", "value": "Xid79", "effect": "NoSchedule"} in taints
    assert USER_TAINT in taints and "n0" in api.quarantined()
    assert record(api)["taint"]["key"] == "example.com/gpu-broken"
    # and back to the default, then off: every step leaves exactly one taint of kubegpu, then none
    hygiene.set_quarantine(QuarantineSettings())
    hygiene.sync_once()
    assert [t["key"] for t in api.nodes["n0"]["spec"]["taints"]] == ["team", KEY]
    hygiene.set_quarantine(QuarantineSettings(enabled=False))
    hygiene.sync_once()
    assert api.nodes["n0"]["spec"]["taints"] == [USER_TAINT] and api.quarantined() == {}


def test_only_kubegpus_own_taint_under_the_old_key_is_removed() -> None:
    api, hygiene, _ = quarantined()
    theirs = {"key": KEY, "value": "by-hand", "effect": "NoExecute"}
    api.nodes["n0"]["spec"]["taints"].append(theirs)  # an operator's, added after kubegpu's
    hygiene.set_quarantine(QuarantineSettings(taint_key="example.com/gpu-broken"))
    hygiene.sync_once()
    taints = api.nodes["n0"]["spec"]["taints"]
    assert theirs in taints and {"key": KEY, "value": "Xid79", "effect": "NoSchedule"} not in taints
    hygiene.set_quarantine(QuarantineSettings(taint_key="example.com/gpu-broken", enabled=False))
    hygiene.sync_once()
    assert api.nodes["n0"]["spec"]["taints"] == [USER_TAINT, theirs]


def test_an_agent_restarted_with_quarantine_off_cleans_up_what_its_earlier_run_left() -> None:
    api, _, _ = quarantined()
    second, fresh = make(api, enabled=False)
    assert second.read_back() == 0 and fresh.is_healthy(3)
    second.sync_once()
    assert api.taints() == [] and api.condition() is None and api.quarantined() == {}
    assert api.nodes["n0"]["spec"]["taints"] == [USER_TAINT]


def test_a_restart_with_a_new_taint_key_moves_the_taint_it_recorded() -> None:
    api, _, _ = quarantined()
    second, fresh = make(api, taint_key="example.com/gpu-broken")
    assert second.read_back() == 1 and not fresh.is_healthy(3)
    second.sync_once()
    assert [t["key"] for t in api.nodes["n0"]["spec"]["taints"]] == ["team", "example.com/gpu-broken"]


def test_quarantine_turned_on_by_a_reload_quarantines() -> None:
    api = FakeApi()
    hygiene, tracker = make(api, enabled=False)
    hygiene.set_quarantine(QuarantineSettings())
    tracker.apply(GpuEvent(gpu=1, kind=GpuEventKind.XID, xid=79))
    hygiene.sync_once()
    assert len(api.taints()) == 1 and "n0" in api.quarantined()
