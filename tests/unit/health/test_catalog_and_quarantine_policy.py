"""Which faults quarantine a node: NVIDIA's XID catalog actions, and the configured exceptions."""

from __future__ import annotations

from kubegpu.health.catalog import QUARANTINE_ACTIONS, XID_CATALOG, CatalogAction, fault_reason
from kubegpu.health.quarantine import QuarantinePolicy
from kubegpu.health.xid import DEFAULT_IGNORED_XIDS
from kubegpu.model.event import GpuEventKind

XID = GpuEventKind.XID


def test_the_catalog_holds_the_reference_table_rows() -> None:
    assert XID_CATALOG[79].action is CatalogAction.RESTART_BM
    assert XID_CATALOG[13].action is CatalogAction.RESTART_APP
    assert XID_CATALOG[48].action is CatalogAction.WORKFLOW_XID_48
    assert XID_CATALOG[109].action is CatalogAction.RESET_GPU
    assert len(XID_CATALOG) == 20


def test_reset_and_reboot_actions_quarantine_application_faults_do_not() -> None:
    policy = QuarantinePolicy()
    for xid in (48, 61, 62, 64, 74, 79, 95, 109, 119, 120, 140):
        assert policy.quarantines(XID, xid), xid
    for xid in (13, 31, 43, 45, 63, 68, 92, 94, 154):
        assert not policy.quarantines(XID, xid), xid


def test_every_xid_nvidia_ignores_for_health_except_109_is_no_quarantine() -> None:
    # 109 (context switch timeout) is ignored by NVIDIA's device health but the catalog says RESET_GPU
    policy = QuarantinePolicy()
    assert {x for x in DEFAULT_IGNORED_XIDS if policy.quarantines(XID, x)} == {109}


def test_unknown_xids_do_not_quarantine_unless_listed_and_never_list_wins() -> None:
    assert not QuarantinePolicy().quarantines(XID, 999)
    assert QuarantinePolicy(extra_xids=frozenset({999, 13})).quarantines(XID, 13)
    assert not QuarantinePolicy(never_xids=frozenset({79}), extra_xids=frozenset({79})).quarantines(XID, 79)


def test_lost_gpus_and_double_bit_ecc_quarantine_watcher_failures_do_not() -> None:
    policy = QuarantinePolicy()
    assert policy.quarantines(GpuEventKind.LOST, None)
    assert policy.quarantines(GpuEventKind.ECC_DOUBLE_BIT, None)
    assert not policy.quarantines(GpuEventKind.ECC_SINGLE_BIT, None)
    assert not policy.quarantines(GpuEventKind.WATCH_FAILED, None)


def test_fault_reasons_are_taint_values() -> None:
    assert fault_reason(XID, 79) == "Xid79"
    assert fault_reason(GpuEventKind.LOST, None) == "GpuLost"
    assert fault_reason(GpuEventKind.ECC_DOUBLE_BIT, None) == "EccDoubleBit"
    assert CatalogAction.RESTART_APP not in QUARANTINE_ACTIONS
