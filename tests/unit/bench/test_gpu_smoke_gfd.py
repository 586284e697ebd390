"""bench/gpu_smoke.py's GFD step: GFD's `key=value` file read as GFD writes it, and one row per
nvidia.com/ label either side writes, the differences docs/compat.md explains marked."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parents[3] / "bench"


def load_smoke() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_smoke", BENCH / "gpu_smoke.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


smoke = load_smoke()


def test_gfd_labels_file_is_read_line_by_line() -> None:
    text = "nvidia.com/gpu.count=8\nnvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3\n\nnot a label\n"
    assert smoke.read_gfd_labels(text) == {
        "nvidia.com/gpu.count": "8",
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
    }


def test_rows_cover_both_sides_and_mark_known_differences() -> None:
    gfd = {"nvidia.com/gpu.count": "8", "nvidia.com/gpu.family": "hopper", "other/x": "1"}
    ours = {
        "nvidia.com/gpu.count": "8",
        "nvidia.com/gpu.family": "ampere",
        "nvidia.com/gpu.present": "true",
        "kubegpu.io/nvlink-domain": "0",
    }
    rows = {r["label"]: r for r in smoke.gfd_rows(gfd, ours)}
    assert set(rows) == {"nvidia.com/gpu.count", "nvidia.com/gpu.family", "nvidia.com/gpu.present"}
    assert rows["nvidia.com/gpu.count"]["agree"]
    assert not rows["nvidia.com/gpu.family"]["agree"] and not rows["nvidia.com/gpu.family"]["known"]
    assert not rows["nvidia.com/gpu.present"]["agree"] and rows["nvidia.com/gpu.present"]["known"]
