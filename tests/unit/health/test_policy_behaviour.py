"""Health behaviours the mutation run found unpinned (issue 61): what a waiter is handed, the exact end
of the quiet period, what ``restore`` and ``recover_quiet`` report, the error for an index one past the
last GPU, the reason for an XID event without a number."""

from __future__ import annotations

import threading

import pytest

from kubegpu.errors import UnknownGpuError
from kubegpu.health.policy import HealthPolicy, VerdictKind
from kubegpu.health.tracker import HealthTracker
from kubegpu.model.event import GpuEvent, GpuEventKind


class _Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def _tracker(
    *, gpus: int = 4, recover_after_s: float | None = None, clock: _Clock | None = None
) -> HealthTracker:
    return HealthTracker(
        gpu_count=gpus,
        aliases={"GPU-a": 0},
        policy=HealthPolicy(recover_after_s=recover_after_s),
        clock=clock or _Clock(),
    )


def test_a_waiter_on_the_current_version_gets_the_version_of_the_change_that_woke_it() -> None:
    t = _tracker()
    seen = t.version
    got: list[int] = []
    started = threading.Event()

    def wait() -> None:
        started.set()
        got.append(t.wait_for_change(seen, 60.0))

    waiter = threading.Thread(target=wait)
    waiter.start()
    started.wait(10)
    t.apply(GpuEvent(gpu=2, kind=GpuEventKind.XID, xid=79))
    waiter.join(60)
    # a waiter that returned before the change would hand back ``seen``: the fault would reach kubelet
    # only on its next poll
    assert got == [seen + 1] == [t.version]


def test_a_waiter_behind_the_current_version_is_answered_with_it() -> None:
    t = _tracker()
    seen = t.version
    t.apply(GpuEvent(gpu=1, kind=GpuEventKind.LOST))
    assert t.wait_for_change(seen, 60.0) == seen + 1


@pytest.mark.parametrize("gpu", [4, -1, 5])
def test_an_event_for_an_index_outside_the_node_is_an_unknown_gpu(gpu: int) -> None:
    t = _tracker(gpus=4)
    with pytest.raises(UnknownGpuError, match=rf"no GPU {gpu} on this node \(GPUs 0\.\.3\)"):
        t.apply(GpuEvent(gpu=gpu, kind=GpuEventKind.LOST))
    with pytest.raises(UnknownGpuError):
        t.resolve(gpu)
    assert all(s.healthy for s in t.statuses())


def test_the_first_and_last_index_resolve() -> None:
    t = _tracker(gpus=4)
    assert (t.resolve(0), t.resolve(3), t.resolve("gpu-A")) == (0, 3, 0)


def test_an_unhealthy_status_names_its_xid_and_when_the_fault_came() -> None:
    clock = _Clock()
    t = _tracker(clock=clock)
    clock.t = 250.0
    t.apply(GpuEvent(gpu=0, kind=GpuEventKind.XID, xid=79))
    st = t.status(0)
    assert (st.healthy, st.cause, st.xid, st.since, st.last_fault_at) == (
        False,
        GpuEventKind.XID,
        79,
        250.0,
        250.0,
    )
    clock.t = 300.0
    t.apply(GpuEvent(gpu=0, kind=GpuEventKind.HEALTHY))
    st = t.status(0)
    assert (st.healthy, st.cause, st.xid, st.faults, st.last_fault_at) == (True, None, None, (), None)


def test_the_quiet_period_ends_exactly_recover_after_seconds_after_the_last_fault() -> None:
    clock = _Clock()
    t = _tracker(recover_after_s=60.0, clock=clock)
    t.apply(GpuEvent(gpu=3, kind=GpuEventKind.ECC_DOUBLE_BIT))
    clock.t += 59.5
    assert t.recover_quiet() == []
    clock.t = 160.0  # exactly 60 s after the fault
    version = t.version
    back = t.recover_quiet()
    assert [(b.gpu, b.healthy, b.at) for b in back] == [(3, True, 160.0)]
    assert back[0].reason.startswith("no fault for 60 s (recoverAfter) after: double-bit")
    assert t.is_healthy(3) and t.version == version + 1


def test_restore_reports_an_unhealthy_transition_and_wakes_waiters() -> None:
    clock = _Clock()
    t = _tracker(clock=clock)
    version = t.version
    back = t.restore(2, cause=GpuEventKind.XID, xid=79, reason="recorded by an earlier run")
    assert back is not None
    assert (back.gpu, back.healthy, back.reason, back.at) == (2, False, "recorded by an earlier run", 100.0)
    assert not t.is_healthy(2) and t.status(2).last_fault_at == 100.0
    assert t.version == version + 1
    assert t.wait_for_change(version, 60.0) == version + 1


def test_statuses_are_every_gpu_in_index_order() -> None:
    t = _tracker(gpus=3)
    t.apply(GpuEvent(gpu=1, kind=GpuEventKind.LOST, detail="gone"))
    assert [s.healthy for s in t.statuses()] == [True, False, True]
    assert t.statuses()[1].reason == "GPU lost (gone)"


def test_the_policy_in_use_is_the_one_given_and_a_reload_replaces_it() -> None:
    first, second = HealthPolicy(), HealthPolicy(recover_after_s=5.0)
    t = HealthTracker(gpu_count=1, aliases={}, policy=first)
    assert t.policy is first
    t.set_policy(second)
    assert t.policy is second


def test_an_xid_event_without_a_number_is_fatal_and_says_the_xid_is_unknown() -> None:
    verdict = HealthPolicy().judge(GpuEvent(gpu=0, kind=GpuEventKind.XID))
    assert verdict.kind is VerdictKind.UNHEALTHY
    assert verdict.reason == "XID -1: see NVIDIA's XID catalogue"
