"""XID policy: NVIDIA's default ignore list, overrides, and kernel-log parsing."""

from __future__ import annotations

from kubegpu.health.xid import DEFAULT_IGNORED_XIDS, XidPolicy, XidVerdict, parse_xid_line


def test_default_policy_ignores_nvidias_application_xids() -> None:
    policy = XidPolicy()
    for xid in (13, 31, 43, 45, 68, 109):
        assert policy.classify(xid) is XidVerdict.IGNORED
    assert policy.classify(79) is XidVerdict.FATAL
    assert policy.classify(48) is XidVerdict.FATAL


def test_forced_fatal_wins_over_ignored_and_disabled_ignores_rest() -> None:
    assert XidPolicy(forced_fatal=frozenset({13})).classify(13) is XidVerdict.FATAL
    assert XidPolicy(disabled=True).classify(79) is XidVerdict.IGNORED
    assert XidPolicy(all_fatal=True).classify(13) is XidVerdict.FATAL
    assert frozenset({13, 31, 43, 45, 68, 109}) == DEFAULT_IGNORED_XIDS


def test_parse_kernel_log_line() -> None:
    line = "[ 1234.5] NVRM: Xid (PCI:0000:3B:00): 79, pid=0, GPU has fallen off the bus."
    event = parse_xid_line(line)
    assert event is not None
    assert event.xid == 79
    assert event.pci_bus_id == "0000:3b:00"
    assert "fallen off the bus" in event.meaning
    assert parse_xid_line("kernel: eth0 link up") is None
