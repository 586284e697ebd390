"""NVML telemetry reads (the metrics' real-GPU backend) against the fake pynvml, faults included."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

import pytest

from kubegpu.metrics.sampler import NvmlSampler
from kubegpu.model.sample import MemoryUse
from kubegpu.sources.nvml import NvmlSource

pytestmark = pytest.mark.integration

FAKE = Path(__file__).parent / "fake_nvml" / "pynvml.py"


@pytest.fixture
def nvml(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[ModuleType, Path]:
    spec = importlib.util.spec_from_file_location("fake_pynvml_metrics", FAKE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    script = tmp_path / "nvml.json"
    monkeypatch.setenv("KUBEGPU_FAKE_NVML", str(script))
    return module, script


def test_every_reading_of_a_gpu_comes_from_nvml_in_dcgm_exporters_units(
    nvml: tuple[ModuleType, Path],
) -> None:
    source = NvmlSource.open(nvml[0])
    node = source.read_node("n")
    sample = source.read_sample(1)
    assert (sample.gpu_util, sample.mem_copy_util, sample.temperature_c, sample.sm_clock_mhz) == (
        38,
        13,
        42,
        1755,
    )
    assert sample.power_w == pytest.approx(124.456)
    assert sample.memory == MemoryUse(used_mib=2048, free_mib=80 * 1024 - 2048)
    assert (sample.ecc_sbe_volatile, sample.ecc_dbe_volatile) == (2, 1)
    assert (sample.ecc_sbe_aggregate, sample.ecc_dbe_aggregate) == (12, 6)
    assert sample.problems == ()
    assert source.driver_version() == "550.54.15"
    assert set(NvmlSampler(lambda: source).sample(node, {})) == {0, 1}


def test_a_failing_read_leaves_its_series_out_says_why_and_keeps_the_others(
    nvml: tuple[ModuleType, Path], caplog: pytest.LogCaptureFixture
) -> None:
    module, script = nvml
    source = NvmlSource.open(module)
    node = source.read_node("n")
    script.write_text(json.dumps({"fail": {"nvmlDeviceGetPowerUsage": 15, "nvmlDeviceGetTotalEccErrors": 3}}))
    sampler = NvmlSampler(lambda: source)
    for _ in range(3):
        samples = sampler.sample(node, {})
    sample = samples[0]
    assert sample.power_w is None and sample.ecc_sbe_volatile is None  # power failed; ECC not supported
    assert sample.gpu_util == 37 and sample.memory is not None
    assert len(sample.problems) == 1 and "fallen off the bus" in sample.problems[0]
    warnings = [r for r in caplog.records if "telemetry partly unreadable" in r.getMessage()]
    assert len(warnings) == 2  # once per GPU, not once per scrape
