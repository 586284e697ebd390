"""Health: NVIDIA's XID defaults, ECC policy, one entry per physical GPU, recovery without restart."""

from __future__ import annotations

import threading
import time

import pytest

from kubegpu.errors import UnknownGpuError
from kubegpu.health.policy import EccAction, HealthPolicy, VerdictKind, WatcherFailureAction
from kubegpu.health.tracker import HealthTracker
from kubegpu.health.xid import XidPolicy
from kubegpu.model.event import GpuEvent, GpuEventKind


def tracker(policy: HealthPolicy | None = None) -> HealthTracker:
    return HealthTracker(gpu_count=4, aliases={"GPU-a": 0, "MIG-b": 1}, policy=policy or HealthPolicy())


@pytest.mark.parametrize("xid", [13, 31, 43, 45, 68, 109])
def test_application_xids_are_ignored_by_default(xid: int) -> None:
    verdict = HealthPolicy().judge(GpuEvent(gpu=0, kind=GpuEventKind.XID, xid=xid))
    assert verdict.kind is VerdictKind.IGNORE


def test_fatal_xid_reason_says_what_happened() -> None:
    verdict = HealthPolicy().judge(GpuEvent(gpu=0, kind=GpuEventKind.XID, xid=79))
    assert verdict.kind is VerdictKind.UNHEALTHY
    assert "XID 79" in verdict.reason and "fallen off the bus" in verdict.reason


def test_ecc_policy_defaults_and_overrides() -> None:
    dbe = GpuEvent(gpu=0, kind=GpuEventKind.ECC_DOUBLE_BIT)
    sbe = GpuEvent(gpu=0, kind=GpuEventKind.ECC_SINGLE_BIT)
    assert HealthPolicy().judge(dbe).kind is VerdictKind.UNHEALTHY
    assert HealthPolicy().judge(sbe).kind is VerdictKind.IGNORE
    relaxed = HealthPolicy(ecc_double_bit=EccAction.IGNORE, ecc_single_bit=EccAction.FATAL)
    assert relaxed.judge(dbe).kind is VerdictKind.IGNORE
    assert relaxed.judge(sbe).kind is VerdictKind.UNHEALTHY


def test_disabled_xid_checks_still_honour_lost_gpus() -> None:
    policy = HealthPolicy(xid=XidPolicy(disabled=True))
    assert policy.judge(GpuEvent(gpu=0, kind=GpuEventKind.XID, xid=79)).kind is VerdictKind.IGNORE
    assert policy.judge(GpuEvent(gpu=0, kind=GpuEventKind.LOST)).kind is VerdictKind.UNHEALTHY


def test_transitions_happen_once_and_recovery_needs_no_restart() -> None:
    t = tracker()
    before = t.version
    first = t.apply(GpuEvent(gpu="gpu-A", kind=GpuEventKind.XID, xid=48))  # UUIDs match case-insensitively
    assert first is not None and first.gpu == 0 and not first.healthy
    assert t.apply(GpuEvent(gpu=0, kind=GpuEventKind.XID, xid=79)) is None  # already unhealthy
    assert t.apply(GpuEvent(gpu=1, kind=GpuEventKind.XID, xid=13)) is None  # ignored
    assert t.version == before + 1
    assert not t.is_healthy(0) and "XID 48" in t.status(0).reason
    back = t.apply(GpuEvent(gpu=0, kind=GpuEventKind.HEALTHY))
    assert back is not None and back.healthy and t.is_healthy(0)


def test_a_mig_uuid_resolves_to_its_parent_gpu() -> None:
    t = tracker()
    t.apply(GpuEvent(gpu="MIG-b", kind=GpuEventKind.LOST))
    assert not t.is_healthy(1)


def test_unknown_gpus_are_reported_not_guessed() -> None:
    t = tracker()
    with pytest.raises(UnknownGpuError, match="no GPU 9"):
        t.apply(GpuEvent(gpu=9, kind=GpuEventKind.LOST))
    with pytest.raises(UnknownGpuError, match="GPU-zzz"):
        t.apply(GpuEvent(gpu="GPU-zzz", kind=GpuEventKind.LOST))


def test_waiters_wake_immediately_on_a_change() -> None:
    t = tracker()
    seen = t.version
    woke: list[float] = []

    def wait() -> None:
        start = time.monotonic()
        t.wait_for_change(seen, 5.0)
        woke.append(time.monotonic() - start)

    thread = threading.Thread(target=wait)
    thread.start()
    time.sleep(0.05)
    t.apply(GpuEvent(gpu=2, kind=GpuEventKind.LOST))
    thread.join(5)
    assert woke and woke[0] < 1.0


def test_a_failed_watcher_makes_its_gpus_unhealthy_by_default_or_keeps_them_by_policy() -> None:
    failed = GpuEvent(gpu=0, kind=GpuEventKind.WATCH_FAILED, detail="NVML: Unknown Error")
    verdict = HealthPolicy().judge(failed)
    assert verdict.kind is VerdictKind.UNHEALTHY and "health watcher failed" in verdict.reason
    kept = HealthPolicy(watcher_failure=WatcherFailureAction.KEEP).judge(failed)
    assert kept.kind is VerdictKind.IGNORE


def test_the_watcher_recovering_undoes_only_what_its_failure_did() -> None:
    t = tracker()
    t.apply(GpuEvent(gpu=0, kind=GpuEventKind.WATCH_FAILED))
    t.apply(GpuEvent(gpu=1, kind=GpuEventKind.XID, xid=79))
    t.apply(GpuEvent(gpu=1, kind=GpuEventKind.WATCH_FAILED))
    assert not t.is_healthy(0) and not t.is_healthy(1)
    assert t.apply(GpuEvent(gpu=0, kind=GpuEventKind.WATCH_RESTORED)) is not None
    assert t.apply(GpuEvent(gpu=1, kind=GpuEventKind.WATCH_RESTORED)) is None
    assert t.is_healthy(0) and not t.is_healthy(1) and "XID 79" in t.status(1).reason
    # a real fault while unwatched is not cleared when the watcher comes back
    t.apply(GpuEvent(gpu=0, kind=GpuEventKind.WATCH_FAILED))
    t.apply(GpuEvent(gpu=0, kind=GpuEventKind.LOST, detail="fell off the bus"))
    assert t.apply(GpuEvent(gpu=0, kind=GpuEventKind.WATCH_RESTORED)) is None
    assert not t.is_healthy(0) and "fell off the bus" in t.status(0).reason


class _Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_quiet_period_recovers_xid_faults_but_not_lost_gpus_and_a_new_fault_restarts_it() -> None:
    clock = _Clock()
    t = HealthTracker(gpu_count=2, aliases={}, policy=HealthPolicy(recover_after_s=60.0), clock=clock)
    t.apply(GpuEvent(gpu=0, kind=GpuEventKind.XID, xid=79))
    t.apply(GpuEvent(gpu=1, kind=GpuEventKind.LOST))
    clock.t += 50
    t.apply(GpuEvent(gpu=0, kind=GpuEventKind.XID, xid=79))  # the GPU keeps failing: the wait restarts
    clock.t += 50
    assert t.recover_quiet() == []
    version = t.version
    clock.t += 11
    back = t.recover_quiet()
    assert [b.gpu for b in back] == [0] and t.is_healthy(0)
    assert not t.is_healthy(1), "a lost GPU waits for an explicit recovery"
    assert t.version == version + 1


def test_without_a_quiet_period_nothing_recovers_by_itself() -> None:
    clock = _Clock()
    t = HealthTracker(gpu_count=1, aliases={}, policy=HealthPolicy(), clock=clock)
    t.apply(GpuEvent(gpu=0, kind=GpuEventKind.XID, xid=79))
    clock.t += 10**6
    assert t.recover_quiet() == [] and not t.is_healthy(0)


def test_an_unhealthy_gpu_remembers_each_kind_of_fault() -> None:
    t = HealthTracker(gpu_count=1, aliases={}, policy=HealthPolicy())
    t.apply(GpuEvent(gpu=0, kind=GpuEventKind.XID, xid=94))
    t.apply(GpuEvent(gpu=0, kind=GpuEventKind.XID, xid=79))
    t.apply(GpuEvent(gpu=0, kind=GpuEventKind.XID, xid=94))
    assert t.status(0).faults == ((GpuEventKind.XID, 94), (GpuEventKind.XID, 79))


def test_restore_marks_a_healthy_gpu_and_leaves_an_unhealthy_one() -> None:
    t = HealthTracker(gpu_count=2, aliases={}, policy=HealthPolicy())
    t.apply(GpuEvent(gpu=1, kind=GpuEventKind.LOST))
    assert t.restore(0, cause=GpuEventKind.XID, xid=79, reason="recorded") is not None
    assert t.restore(1, cause=GpuEventKind.XID, xid=79, reason="recorded") is None
    assert t.status(0).faults == ((GpuEventKind.XID, 79),)
    assert t.status(1).cause is GpuEventKind.LOST
