"""What the chart tests share: the chart, helm from the rig cache (the ``helm`` fixture), rendering."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

__all__ = ["CACHE", "CHART", "HELM", "REPO", "by_kind", "helm", "render"]

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "deploy/helm/kubegpu"
CACHE = Path(os.environ.get("KUBEGPU_RIG_CACHE") or Path.home() / ".cache/kubegpu-rig")
HELM = next(iter(sorted(CACHE.glob("bin/helm-*/helm"))), None)


@pytest.fixture
def helm() -> Path:
    """helm from the rig cache (`make helm`; `make test` builds it first): skip loudly, fail in CI."""
    if HELM is None:
        reason = f"NOT RUN: helm is not built in {CACHE}: run `make helm` (deploy/tools/build-helm.sh)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)
    return HELM


def render(helm: Path, *sets: str) -> list[dict[str, Any]]:
    """`helm template` of the chart as release "kubegpu" in namespace "kubegpu", with ``--set``s."""
    argv = [str(helm), "template", "kubegpu", str(CHART), "--namespace", "kubegpu"]
    for s in sets:
        argv += ["--set", s]
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


def by_kind(docs: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}
