"""Fixtures for the doctor's tests: a healthy fixture host root per test."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.doctor.fakehost import FakeHost


@pytest.fixture
def host(tmp_path: Path) -> FakeHost:
    return FakeHost.healthy(tmp_path / "root")
