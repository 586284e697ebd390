"""The device check's MPS step (bench/gpu_smoke_mps.py) in its dry run: the agent's daemon code starts
the stand-in control daemon under a private pipe directory and quits it; the GPU clients are skipped."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "gpu_smoke_mps.py"


def test_the_dry_run_starts_and_quits_the_daemon_under_a_private_pipe(tmp_path: Path) -> None:
    got = subprocess.run(
        [sys.executable, str(SCRIPT), "--standin", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert got.returncode == 0, got.stdout + got.stderr
    report = json.loads((tmp_path / "mps.json").read_text())
    assert report["checks"] == {"daemon started": True, "daemon stopped": True}
    assert report["clients"] == [] and report["standin"] is True
    assert any("Starting control daemon" in line for line in report["control_log"])
    assert any(line.endswith("quit") for line in report["control_log"])
