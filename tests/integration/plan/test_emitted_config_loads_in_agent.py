"""What `kubegpu plan --emit` writes for the device plugin is what `kubegpu agent` accepts."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

from kubegpu.deviceplugin.config import load_config


def _emit(tmp_path: Path, *args: str) -> Path:
    out = tmp_path / "out"
    res = subprocess.run(
        [sys.executable, "-m", "kubegpu", "plan", *args, "--emit", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert res.returncode == 0, res.stderr
    return out


def test_pools_configs_load_with_the_planned_replicas(tmp_path: Path) -> None:
    out = _emit(tmp_path, "pools", "--gpus", "4", "--gpu", "A100-80GB", "--users", "20", "--exclusive", "2")
    shared = load_config(out / "device-plugin-config-time-sliced.yaml")
    assert shared.sharing is not None
    assert [r.replicas for r in shared.sharing.resources] == [4]
    exclusive = load_config(out / "device-plugin-config-exclusive.yaml")
    assert exclusive.sharing is None
    configmap = yaml.safe_load((out / "device-plugin-configmap.yaml").read_text())
    for key, text in configmap["data"].items():
        path = tmp_path / f"{key}.yaml"
        path.write_text(text)
        load_config(path)


def test_serve_config_loads(tmp_path: Path) -> None:
    out = _emit(tmp_path, "serve", "--model-gb", "3", "--instances", "4", "--gpu", "H100-80GB")
    load_config(out / "device-plugin-config.yaml")
