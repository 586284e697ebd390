"""Listing the e2e tests (``pytest --collect-only -m e2e``) lists them and builds nothing.

Why: the e2e session builds the rig's binaries (about 20 minutes cold) before its first test; listing the
tests must not start that. The listing runs in a subprocess with the rig's cache and state pointed at
empty temporary folders and a stand-in ``go`` that records every build and fails it, so a build that
starts anyway is seen (and ends at once) instead of running for real.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.rig.test_build_script import FakeToolchain

ROOT = Path(__file__).resolve().parents[3]

pytestmark = pytest.mark.integration


def test_collect_only_lists_the_e2e_tests_without_checking_the_host_or_building(tmp_path: Path) -> None:
    go = FakeToolchain(tmp_path)
    env = {
        **os.environ,
        **{k: v for k, v in go.env.items() if k not in ("PATH", "HOME")},
        "CI": "true",
        "KUBEGPU_RIG_STATE": str(tmp_path / "state"),
        "FAKE_GO_FAIL": "kube-apiserver",
    }
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--collect-only",
            "-q",
            "-p",
            "no:cacheprovider",
            "-m",
            "e2e",
            "tests/e2e",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=100,
        check=False,
    )
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    collected = re.search(r"^(\d+) tests? collected", result.stdout, re.MULTILINE)
    assert collected is not None and int(collected.group(1)) > 0, out
    assert "E2E NOT RUN" not in out and "[e2e] building" not in out, out
    assert not go.build_log.exists(), "a build was started: " + go.build_log.read_text()
    assert not go.cache.exists() or not any(go.cache.iterdir()), "the rig's cache was written"
    assert not (tmp_path / "state").exists(), "something was started"
