"""``kubegpu.quarantine``, ``kubegpu.node.labels`` and ``kubegpu.health.recoverAfter`` as the agent's
config reads them: defaults, every key, errors naming the key, the Lease from the environment."""

from __future__ import annotations

from pathlib import Path

import pytest

from kubegpu.deviceplugin.config import load_config
from kubegpu.errors import ConfigError
from kubegpu.health.quarantine import EvictionPolicy, QuarantineSettings, TaintEffect


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text("version: v1\n" + text)
    return path


def test_defaults_are_on_noschedule_pods_on_failed_gpu_and_a_tenth_of_the_fleet() -> None:
    config = load_config(env={})
    assert config.node_labels is True
    q = config.quarantine
    assert q == QuarantineSettings()
    assert (q.taint_key, q.taint_effect, q.eviction, q.max_share) == (
        "nvidia.com/gpu.unhealthy",
        TaintEffect.NO_SCHEDULE,
        EvictionPolicy.PODS_ON_FAILED_GPU,
        0.1,
    )
    assert config.health.recover_after_s is None


def test_every_key_is_read(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "kubegpu:\n  node: {labels: false}\n  health: {recoverAfter: 300}\n  quarantine:\n"
        "    enabled: false\n    taintKey: example.com/gpu-bad\n    taintEffect: NoExecute\n"
        "    eviction: all-gpu-pods\n    maxShare: 0.25\n    lease: gpu-system/q\n    xids: [13]\n"
        "    neverXids: [79]\n",
    )
    config = load_config(path, env={})
    q = config.quarantine
    assert not config.node_labels and not q.enabled
    assert (q.taint_key, q.taint_effect, q.eviction, q.max_share, q.lease) == (
        "example.com/gpu-bad",
        TaintEffect.NO_EXECUTE,
        EvictionPolicy.ALL_GPU_PODS,
        0.25,
        "gpu-system/q",
    )
    assert q.policy.extra_xids == {13} and q.policy.never_xids == {79}
    assert config.health.recover_after_s == 300.0


@pytest.mark.parametrize(
    ("section", "key"),
    [
        ("quarantine: {eviction: drain}", "kubegpu.quarantine.eviction"),
        ("quarantine: {taintEffect: PreferNoSchedule}", "kubegpu.quarantine.taintEffect"),
        ("quarantine: {maxShare: 0}", "kubegpu.quarantine.maxShare"),
        ("quarantine: {maxShare: 2}", "kubegpu.quarantine.maxShare"),
        ("quarantine: {lease: just-a-name}", "kubegpu.quarantine.lease"),
        ("quarantine: {taintKey: 'not a key'}", "kubegpu.quarantine.taintKey"),
        ("quarantine: {xids: [-1]}", "kubegpu.quarantine.xids[0]"),
        ("quarantine: {cap: 3}", "kubegpu.quarantine.cap"),
        ("health: {recoverAfter: -5}", "kubegpu.health.recoverAfter"),
        ("node: {labels: maybe}", "kubegpu.node.labels"),
    ],
)
def test_bad_values_name_their_key(tmp_path: Path, section: str, key: str) -> None:
    with pytest.raises(ConfigError, match=key.replace(".", r"\.").replace("[", r"\[")):
        load_config(write(tmp_path, f"kubegpu:\n  {section}\n"), env={})


def test_the_lease_and_labels_come_from_the_environment_over_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, "kubegpu:\n  quarantine: {lease: a/b, maxShare: 0.5}\n")
    config = load_config(
        path, env={"KUBEGPU_QUARANTINE_LEASE": "kubegpu/kubegpu-quarantine", "KUBEGPU_NODE_LABELS": "false"}
    )
    assert config.quarantine.lease == "kubegpu/kubegpu-quarantine"
    assert config.quarantine.max_share == 0.5  # the rest of the file's section stays
    assert config.node_labels is False
    with pytest.raises(ConfigError, match="env KUBEGPU_QUARANTINE_LEASE"):
        load_config(path, env={"KUBEGPU_QUARANTINE_LEASE": "no-slash"})
    assert load_config(path, env={}, cli={"node_labels": "false"}).node_labels is False
