"""The device script (bench/gpu_smoke.sh): its dry run on the C NVML stand-in runs every step and
compares NVML with nvidia-smi; a broken NVML ends it with exit 1 and the reason in its summary."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from kubegpu.sources.spec import load_node
from tests.nvml_standin.machine import Machine

pytestmark = pytest.mark.integration

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "gpu_smoke.sh"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, timeout=300, check=False)


def test_help_names_what_it_runs_and_that_it_changes_nothing() -> None:
    got = _run("--help")
    assert got.returncode == 0, got.stderr
    assert "--standin" in got.stdout and "Read-only" in got.stdout


def test_the_dry_run_runs_every_step_and_nvml_agrees_with_nvidia_smi(tmp_path: Path) -> None:
    got = _run("--standin", "builtin:h100-mig-mixed", "--out", str(tmp_path), "--agent-seconds", "3")
    assert got.returncode == 0, got.stdout[-3000:] + got.stderr[-3000:]
    results = json.loads((tmp_path / "results.json").read_text())
    steps = {s["name"]: s["exit"] for s in results["steps"]}
    assert steps == {
        "versions": 0, "nvidia-smi -q -x": 0, "doctor node": 0, "topo": 0, "labels": 0,
        "dra devices": 0, "mig current": 0, "agent": 0,
    }  # fmt: skip
    rows = results["comparison"]
    assert rows and all(r["agree"] for r in rows), [r for r in rows if not r["agree"]]
    assert {r["field"] for r in rows} >= {"GPU count", "driver version", "CUDA version"}
    agent = results["agent"]
    assert set(agent["devices_at_end"].values()) == {"Healthy"} and agent["metrics_series"] > 0
    assert agent["allocate"]["envs"]["NVIDIA_VISIBLE_DEVICES"].startswith("GPU-")
    host_nvml = [f for f in results["doctor node"]["findings"] if f["id"] == "host.nvml-library"]
    assert host_nvml, "the doctor ran its NVML check"
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == [
        "logs.txt",
        "metrics.txt",
        "nvidia-smi.xml",
        "results.json",
        "summary.md",
    ]  # <= 8 come back


def test_an_nvml_that_does_not_start_fails_the_run_with_the_reason(tmp_path: Path) -> None:
    machine = Machine.from_node(load_node("builtin:seed-8gpu"))
    description = tmp_path / "machine.yaml"
    doc = {
        "driver": machine.driver,
        "cuda": machine.cuda,
        "gpus": [
            {"name": g.name, "uuid": g.uuid, "bus_id": g.bus_id, "memory_mib": g.memory_mib}
            for g in machine.gpus
        ],
        "faults": [{"call": "nvmlInitWithFlags", "code": 9}],
    }
    description.write_text(yaml.safe_dump(doc))
    out = tmp_path / "out"
    got = _run("--standin", str(description), "--out", str(out), "--agent-seconds", "2")
    assert got.returncode == 1
    assert "FAILED" in got.stderr
    results = json.loads((out / "results.json").read_text())
    assert "NVIDIA kernel driver is not loaded" in results["topo"]["error"]
    assert "| topo | 1 |" in (out / "summary.md").read_text()
