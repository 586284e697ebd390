"""Fixtures of the oracle tests: NVIDIA's binaries (built once into the rig cache), the stand-in, the
list of deliberate differences.

Without root, ``unshare`` or a Go toolchain the tests cannot run: they say ``NOT RUN`` and why, and under
``CI=true`` that is a failure (CI runs as root and builds the binaries), never a silent skip.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.nvml_standin.build import Standin, StandinBuildError, build
from tests.oracle.harness import Allowed, OracleUnavailable, load_allowed, namespace_problem, nvidia_binaries

HERE = Path(__file__).resolve().parent
ALLOWED_FILE = HERE / "allowed_differences.yaml"


def not_run(reason: str) -> None:
    reason = f"NOT RUN: {reason}"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(reason, pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def nvidia_bin() -> Path:
    """The folder of NVIDIA's nvidia-device-plugin and gpu-feature-discovery (tests/oracle/build.sh)."""
    problem = namespace_problem()
    if problem is not None:
        not_run(problem)
    try:
        return nvidia_binaries()
    except OracleUnavailable as exc:
        reason = str(exc)
    not_run(f"NVIDIA's binaries cannot be built (tests/oracle/build.sh): {reason}")
    raise AssertionError("unreachable")


@pytest.fixture(scope="session")
def oracle_standin() -> Standin:
    try:
        return build()
    except StandinBuildError as exc:
        pytest.fail(f"NOT RUN: the NVML stand-in cannot be built: {exc}", pytrace=False)


@pytest.fixture(scope="session")
def allowed() -> list[Allowed]:
    return load_allowed(ALLOWED_FILE)


@pytest.fixture
def oracle_dir() -> Iterator[Path]:
    """A short folder under /tmp (unix socket paths stay under 108 bytes), removed afterwards."""
    base = Path(tempfile.mkdtemp(prefix="kgo-", dir="/tmp"))
    yield base
    shutil.rmtree(base, ignore_errors=True)
