"""The chart's shares option: off by default; on, `kubegpu.fractional: true` in the agent's config file
and RBAC to list pods (the agent finds whose share kubelet admits), even with labels and quarantine off."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kubegpu.deviceplugin.config import load_config
from tests.integration.chart import by_kind, helm, render

__all__ = ["helm"]  # the fixture, re-used


def rules(docs: list[dict[str, Any]]) -> set[tuple[str, str]]:
    role = by_kind(docs, "ClusterRole")["kubegpu"]
    return {(r, v) for rule in role.get("rules") or [] for r in rule["resources"] for v in rule["verbs"]}


def agent_config(docs: list[dict[str, Any]], tmp_path: Path) -> Any:
    path = tmp_path / "config.yaml"
    path.write_text(by_kind(docs, "ConfigMap")["kubegpu-config"]["data"]["config.yaml"])
    return load_config(path)


def test_off_by_default(helm: Path, tmp_path: Path) -> None:
    docs = render(helm)
    assert not agent_config(docs, tmp_path).fractional
    assert ("pods", "list") not in rules(docs)


def test_on_the_agent_serves_shares_and_may_list_pods(helm: Path, tmp_path: Path) -> None:
    docs = render(helm, "fractional.enabled=true", "node.labels=false", "quarantine.enabled=false")
    assert agent_config(docs, tmp_path).fractional
    assert ("pods", "list") in rules(docs)
    assert ("nodes", "patch") in rules(docs), "the gpu-uuids annotation is applied with the labels"
