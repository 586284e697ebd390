"""Fixtures for the doctor's tests: a healthy fixture host root per test."""

from __future__ import annotations

from pathlib import Path

import pytest

from kubegpu.doctor import RecordedCluster
from tests.unit.doctor.fakehost import FakeHost


@pytest.fixture
def host(tmp_path: Path) -> FakeHost:
    return FakeHost.healthy(tmp_path / "root")


RECORDED = Path(__file__).parent / "recorded" / "healthy"


@pytest.fixture
def cluster() -> RecordedCluster:
    """A fresh copy of the recorded healthy cluster: two 8-GPU nodes, a CPU node, plugin pods."""
    return RecordedCluster.from_dir(RECORDED)
