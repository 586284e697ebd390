"""``kubegpu labels`` as a user runs it: the agent's label set, without a cluster; clean errors."""

from __future__ import annotations

import json
from pathlib import Path

from tests.unit.cli.conftest import Runner


def test_labels_json_is_the_seed_machines_gfd_set(cli: Runner) -> None:
    res = cli("labels", "builtin:seed-8gpu", "--json")
    assert res.code == 0, res.err
    labels = json.loads(res.out)
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert labels["nvidia.com/gpu.count"] == "8"
    assert labels["kubegpu.io/nvlink-domains"] == "2"
    assert "nvidia.com/gfd.timestamp" not in labels  # only a running agent has a start time


def test_labels_follow_the_config_file(cli: Runner, tmp_path: Path) -> None:
    cfg = tmp_path / "ts.yaml"
    cfg.write_text(
        "version: v1\nsharing:\n  timeSlicing:\n    resources:\n      - {name: gpu, replicas: 4}\n"
    )
    res = cli("labels", "builtin:seed-8gpu", "--config", str(cfg), "--json")
    assert res.code == 0, res.err
    labels = json.loads(res.out)
    assert (labels["nvidia.com/gpu.replicas"], labels["nvidia.com/gpu.sharing-strategy"]) == (
        "4",
        "time-slicing",
    )


def test_labels_table_and_errors(cli: Runner, tmp_path: Path) -> None:
    res = cli("labels", "builtin:seed-8gpu")
    assert res.code == 0 and "nvidia.com/gpu.memory" in res.out and "81559" in res.out  # NVML's total
    bad = cli("labels", "builtin:nope")
    assert bad.code == 2 and bad.err.startswith("kubegpu: error:") and "Traceback" not in bad.err
    cfg = tmp_path / "bad.yaml"
    cfg.write_text("version: v1\nkubegpu:\n  quarantine: {eviction: everything}\n")
    worse = cli("labels", "builtin:seed-8gpu", "--config", str(cfg))
    assert worse.code == 2 and "kubegpu.quarantine.eviction" in worse.err


def test_labels_show_the_configs_warnings_on_stderr_and_keep_json_clean(cli: Runner, tmp_path: Path) -> None:
    cfg = tmp_path / "typo.yaml"
    cfg.write_text("version: v1\nflagz: {migStrategy: mixed}\n")
    res = cli("labels", "builtin:seed-8gpu", "--config", str(cfg), "--json")
    assert res.code == 0, res.err
    assert json.loads(res.out)["nvidia.com/gpu.count"] == "8"
    assert "kubegpu: warning:" in res.err and "flagz: unknown key, ignored" in res.err


def test_labels_refuse_a_node_spec_given_as_the_config(cli: Runner, tmp_path: Path) -> None:
    spec = tmp_path / "node.yaml"
    spec.write_text("nodes:\n  - name: gpu-1\n")
    res = cli("labels", "builtin:seed-8gpu", "--config", str(spec))
    assert res.code == 2 and "is this the agent's config file?" in res.err and not res.out
