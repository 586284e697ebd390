"""The device script (bench/gpu_smoke.sh): its dry run on the C NVML stand-in runs every step and
compares NVML with nvidia-smi; a broken NVML ends it with exit 1 and the reason in its summary."""

from __future__ import annotations

import json
import subprocess
import sys
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
        "versions": 0, "cli": 0, "nvidia-smi -q -x": 0, "doctor node": 0, "topo": 0, "labels": 0,
        "dra devices": 0, "mig current": 0, "agent": 0, "mps": 0,
    }  # fmt: skip
    assert results["versions"]["nvidia-ml-py"] and results["versions"]["pydantic"]
    rows = results["comparison"]
    assert rows and all(r["agree"] for r in rows), [r for r in rows if not r["agree"]]
    assert {r["field"] for r in rows} >= {"GPU count", "driver version", "CUDA version"}
    agent = results["agent"]
    assert set(agent["devices_at_end"].values()) == {"Healthy"} and agent["metrics_series"] > 0
    assert agent["allocate"]["envs"]["NVIDIA_VISIBLE_DEVICES"].startswith("GPU-")
    every_event = ["xid", "ecc-double-bit", "ecc-single-bit"]
    assert agent["health_watch"] == {"events": {"0": every_event, "1": every_event}, "failing": []}
    host_nvml = [f for f in results["doctor node"]["findings"] if f["id"] == "host.nvml-library"]
    assert host_nvml, "the doctor ran its NVML check"
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == [
        "logs.txt",
        "metrics.txt",
        "mps.json",
        "nvidia-smi.xml",
        "results.json",
        "summary.md",
    ]  # <= 8 come back (gfd.labels too on a GPU machine with GFD carried)


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


def test_an_interpreter_without_kubegpus_packages_stops_before_the_gpu_steps_with_one_reason(
    tmp_path: Path,
) -> None:
    # The first run on a real GPU machine met typer without pydantic: every step then failed with the
    # same traceback. Now the run stops at the preflight and says what is missing and what to do.
    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True, timeout=120)
    out = tmp_path / "out"
    got = _run("--standin", "builtin:seed-8gpu", "--out", str(out), "--python", str(bare / "bin" / "python"))
    assert got.returncode == 1
    results = json.loads((out / "results.json").read_text())
    assert [s["name"] for s in results["steps"]] == ["versions"]
    assert "cannot import pynvml" in results["preflight"] and "gpu_smoke_wheels" in results["preflight"]
    assert "stopped before the GPU steps" in (out / "summary.md").read_text()
    assert got.stderr.count("Traceback") == 0


def test_the_wheels_for_the_gpu_machine_are_the_whole_runtime_closure_at_this_checkouts_versions() -> None:
    import importlib.metadata as md
    import importlib.util

    path = SCRIPT.parent / "gpu_smoke_wheels.py"
    spec = importlib.util.spec_from_file_location("gpu_smoke_wheels", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    pins = module.closure(list(module.ROOTS))
    assert pins["typer"] == md.version("typer")
    assert {"pydantic", "pydantic-core", "grpcio", "protobuf", "nvidia-ml-py"} <= set(pins)
    assert "colorama" not in pins  # typer needs it on Windows only
