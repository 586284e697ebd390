"""The chart's MIG manager option: off by default; on, a mig-parted ConfigMap (NVIDIA's named configs
unless `migManager.configs` replaces them) mounted into the agent, `kubegpu.migManager` in the agent's
config file, the PodResources socket, and RBAC for events (plus pods/eviction only with drain)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kubegpu.deviceplugin.config import load_config
from kubegpu.sources.migparted import load_mig_parted, parse_mig_parted
from tests.integration.chart import CHART, REPO, by_kind, helm, render

__all__ = ["helm"]  # the fixture, re-used

ON = "migManager.enabled=true"


def rules(docs: list[dict[str, Any]]) -> set[tuple[str, str]]:
    role = by_kind(docs, "ClusterRole")["kubegpu"]
    return {(r, v) for rule in role.get("rules") or [] for r in rule["resources"] for v in rule["verbs"]}


def test_the_charts_copy_of_the_named_configs_is_kubegpus_builtin_file() -> None:
    shipped = (REPO / "src/kubegpu/sources/builtin_mig/mig-parted-default.yaml").read_text()
    assert (CHART / "files/mig-parted-default.yaml").read_text() == shipped


def test_off_by_default_nothing_mig_manager_is_rendered(helm: Path) -> None:
    docs = render(helm)
    assert "kubegpu-mig-parted" not in by_kind(docs, "ConfigMap")
    assert ("events", "create") not in rules(docs)


def test_on_the_agent_reads_the_named_configs_from_a_mounted_configmap(helm: Path, tmp_path: Path) -> None:
    docs = render(helm, ON, "config.migStrategy=mixed")
    cms = by_kind(docs, "ConfigMap")
    text = cms["kubegpu-mig-parted"]["data"]["config.yaml"]
    assert parse_mig_parted(text).names() == load_mig_parted("builtin:mig-parted-default").names()
    config_path = tmp_path / "config.yaml"
    config_path.write_text(cms["kubegpu-config"]["data"]["config.yaml"])
    settings = load_config(config_path, env={}, cli={}).mig_manager
    assert settings.enabled and not settings.drain
    assert settings.config_file == "/etc/kubegpu/mig-parted/config.yaml" and settings.state_file == ""
    pod = by_kind(docs, "DaemonSet")["kubegpu"]["spec"]["template"]["spec"]
    (agent,) = pod["containers"]
    mounts = {m["name"]: m["mountPath"] for m in agent["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert mounts["mig-parted"] == "/etc/kubegpu/mig-parted"
    assert volumes["mig-parted"]["configMap"]["name"] == "kubegpu-mig-parted"
    assert pod["automountServiceAccountToken"] is True
    granted = rules(docs)
    assert {("nodes", "get"), ("nodes", "patch"), ("events", "create")} <= granted


def test_user_configs_replace_the_named_ones_and_drain_grants_eviction(helm: Path) -> None:
    mine = "version: v1\nmig-configs:\n  mine:\n    - devices: all\n      mig-enabled: false\n"
    base = render(helm, ON, "quarantine.enabled=false")
    assert ("pods/eviction", "create") not in rules(base)
    docs = render(helm, ON, "quarantine.enabled=false", "migManager.drain=true", f"migManager.configs={mine}")
    text = by_kind(docs, "ConfigMap")["kubegpu-mig-parted"]["data"]["config.yaml"]
    assert parse_mig_parted(text).names() == ("mine",)
    assert {("pods", "get"), ("pods/eviction", "create")} <= rules(docs)


def test_simulated_mode_keeps_the_layout_in_a_host_directory(helm: Path, tmp_path: Path) -> None:
    docs = render(helm, ON, "simulated.enabled=true")
    config_path = tmp_path / "config.yaml"
    config_path.write_text(by_kind(docs, "ConfigMap")["kubegpu-config"]["data"]["config.yaml"])
    assert (
        load_config(config_path, env={}, cli={}).mig_manager.state_file == "/var/lib/kubegpu/mig-state.json"
    )
    pod = by_kind(docs, "DaemonSet")["kubegpu"]["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["mig-state"]["hostPath"] == {"path": "/var/lib/kubegpu", "type": "DirectoryOrCreate"}
