"""PodResources answers are cached briefly; failures give no pod labels, are counted and logged once."""

from __future__ import annotations

import logging

import pytest

from kubegpu.errors import PodResourcesUnavailable
from kubegpu.metrics.holders import CachedHolders
from kubegpu.model.holder import DeviceHolder

HOLDER = DeviceHolder(
    namespace="ns", pod="p", container="c", resource="nvidia.com/gpu", device_ids=("GPU-0",)
)


class Source:
    def __init__(self) -> None:
        self.calls = 0
        self.error: str | None = None

    def holders(self) -> list[DeviceHolder]:
        self.calls += 1
        if self.error is not None:
            raise PodResourcesUnavailable(self.error)
        return [HOLDER]


def test_scrapes_within_the_ttl_share_one_list_call() -> None:
    now = [0.0]
    source = Source()
    cache = CachedHolders(source, ttl_s=1.0, clock=lambda: now[0])
    for _ in range(50):
        assert cache.holders() == (HOLDER,)
    assert source.calls == 1
    now[0] = 1.0
    cache.holders()
    assert source.calls == 2


def test_a_failing_kubelet_means_no_pod_labels_one_count_per_call_and_one_log_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [0.0]
    failures = []
    source = Source()
    source.error = "kubelet's PodResources socket /x does not exist"
    cache = CachedHolders(source, ttl_s=1.0, clock=lambda: now[0], on_failure=lambda: failures.append(1))
    with caplog.at_level(logging.INFO, logger="kubegpu.metrics.holders"):
        for step in range(5):
            now[0] = float(step)
            assert cache.holders() is None
        source.error = None
        now[0] = 10.0
        assert cache.holders() == (HOLDER,)
    assert len(failures) == 5
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "does not exist" in str(warnings[0].__dict__.get("error"))
    assert any("pod labels are back" in r.getMessage() for r in caplog.records)
