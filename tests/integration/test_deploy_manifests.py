"""The checked-in manifests (deploy/kubegpu.yaml, deploy/kubegpu-simulated.yaml): current with the
chart, shaped as the seed's DaemonSet with the hardening docs/deploy.md promises, and runnable: the
simulated one's agent arguments and ConfigMaps start the real agent, which becomes ready."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from kubegpu.deviceplugin.config import load_config
from kubegpu.sources.spec import load_node
from tests.integration.chart import helm
from tests.integration.conftest import AgentProcess
from tests.integration.kubelet_double import KubeletDouble

__all__ = ["helm"]  # the fixture, re-used

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
MANIFESTS = {"real": REPO / "deploy/kubegpu.yaml", "simulated": REPO / "deploy/kubegpu-simulated.yaml"}
PLUGIN_DIR = "/var/lib/kubelet/device-plugins"


def _objects(which: str) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for doc in yaml.safe_load_all(MANIFESTS[which].read_text()):
        if doc:
            out.setdefault(doc["kind"], []).append(doc)
    return out


def _container(which: str) -> dict[str, Any]:
    [ds] = _objects(which)["DaemonSet"]
    [container] = ds["spec"]["template"]["spec"]["containers"]
    return container


def test_the_checked_in_manifests_are_what_the_chart_renders_and_the_chart_lints_clean(helm: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(REPO / "deploy/tools/manifests.py"), "check", "--helm", str(helm)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr


def test_the_check_fails_when_the_chart_changed_but_the_manifest_was_not_rendered(
    tmp_path: Path, helm: Path
) -> None:
    shutil.copytree(REPO / "deploy", tmp_path / "deploy")
    values = tmp_path / "deploy/helm/kubegpu/values.yaml"
    values.write_text(values.read_text().replace("logLevel: info", "logLevel: debug"))
    proc = subprocess.run(
        [
            sys.executable,
            str(REPO / "deploy/tools/manifests.py"),
            "check",
            "--helm",
            str(helm),
            "--root",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 1
    assert "deploy/kubegpu.yaml is stale (run `make manifests`)" in proc.stderr
    assert "+            - --log-level=debug" in proc.stderr


@pytest.mark.parametrize("which", ["real", "simulated"])
def test_the_daemonset_is_the_seeds_with_the_hardening(which: str) -> None:
    objects = _objects(which)
    assert {
        "Namespace",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "ConfigMap",
        "DaemonSet",
    } <= set(objects)
    [ds] = objects["DaemonSet"]
    spec = ds["spec"]["template"]["spec"]
    assert ds["spec"]["updateStrategy"]["type"] == "RollingUpdate"
    assert spec["priorityClassName"] == "system-node-critical"
    assert spec["automountServiceAccountToken"] is True  # node labels and quarantine (docs/node.md)
    env = {e["name"]: e for e in _container(which)["env"]}
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert env["KUBEGPU_QUARANTINE_LEASE"]["value"] == "kubegpu/kubegpu-quarantine"
    [pr] = [v for v in spec["volumes"] if v["name"] == "pod-resources"]
    assert pr["hostPath"]["path"] == "/var/lib/kubelet/pod-resources"
    [pr_mount] = [m for m in _container(which)["volumeMounts"] if m["name"] == "pod-resources"]
    assert pr_mount["readOnly"] is True
    tolerations = {(t["key"], t.get("effect")) for t in spec["tolerations"]}
    assert {("nvidia.com/gpu", "NoSchedule"), ("CriticalAddonsOnly", None)} <= tolerations
    [term] = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    key = "kubegpu.io/simulated-gpus" if which == "simulated" else "nvidia.com/gpu.present"
    assert term["matchExpressions"] == [{"key": key, "operator": "Exists"}]
    c = _container(which)
    sc = c["securityContext"]
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["runAsUser"] == 0  # the plugin dir is root-owned 0750
    assert set(c["resources"]) == {"requests", "limits"}
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert "--fail-on-init-error=false" in c["args"]
    [dp] = [v for v in spec["volumes"] if v["name"] == "device-plugin"]
    assert dp["hostPath"]["path"] == PLUGIN_DIR
    [mount] = [m for m in c["volumeMounts"] if m["name"] == "device-plugin"]
    assert mount["mountPath"] == PLUGIN_DIR  # Allocate's mounts name host paths
    assert ("--nvml" in c["args"]) is (which == "real")
    assert ("--simulated-nvidia-smi" in c["args"]) is (which == "simulated")


@pytest.mark.parametrize("which", ["real", "simulated"])
def test_rbac_has_no_wildcards_and_grants_nothing_the_agent_does_not_use(which: str) -> None:
    objects = _objects(which)
    [role] = objects["ClusterRole"]
    assert "*" not in json.dumps(role)
    granted = {(r, v) for rule in role["rules"] for r in rule["resources"] for v in rule["verbs"]}
    assert all(rule["apiGroups"] == [""] for rule in role["rules"])
    assert granted == {  # each one's reason: templates/rbac.yaml, docs/node.md
        ("nodes", "get"),
        ("nodes", "patch"),
        ("nodes", "list"),
        ("nodes/status", "patch"),
        ("pods", "get"),
        ("pods/eviction", "create"),
    }
    [lease_role] = objects["Role"]
    assert lease_role["metadata"]["namespace"] == "kubegpu"
    assert lease_role["rules"] == [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "resourceNames": ["kubegpu-quarantine"],
            "verbs": ["get", "update"],
        },
    ]


def test_with_labels_and_quarantine_off_the_agent_gets_no_token_and_no_rules(helm: Path) -> None:
    proc = subprocess.run(
        [
            str(helm),
            "template",
            "kubegpu",
            str(REPO / "deploy/helm/kubegpu"),
            "--namespace",
            "kubegpu",
            "--set",
            "node.labels=false",
            "--set",
            "quarantine.enabled=false",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    docs = [d for d in yaml.safe_load_all(proc.stdout) if d]
    [role] = [d for d in docs if d["kind"] == "ClusterRole"]
    assert role["rules"] == []
    assert not [d for d in docs if d["kind"] == "Role"]
    [ds] = [d for d in docs if d["kind"] == "DaemonSet"]
    assert ds["spec"]["template"]["spec"]["automountServiceAccountToken"] is False


@pytest.mark.parametrize("which", ["real", "simulated"])
def test_the_configmaps_load_with_the_agents_own_parsers(which: str, tmp_path: Path) -> None:
    configs = {c["metadata"]["name"]: c["data"] for c in _objects(which)["ConfigMap"]}
    path = tmp_path / "config.yaml"
    path.write_text(configs["kubegpu-config"]["config.yaml"])
    load_config(path, env={}, cli={})
    if which == "simulated":
        spec = tmp_path / "node.yaml"
        spec.write_text(configs["kubegpu-node-spec"]["node.yaml"])
        assert [str(g.uuid) for g in load_node(str(spec)).gpus] == [
            str(g.uuid) for g in load_node("builtin:seed-8gpu").gpus
        ]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as resp:
            return resp.status == 200
    except (urllib.error.URLError, OSError):
        return False


def test_the_simulated_manifests_agent_arguments_start_a_ready_agent(
    kubelet: KubeletDouble, plugin_dir: Path, start_agent: Callable[..., AgentProcess]
) -> None:
    """The container's args, with the pod's paths mapped to temporary ones, start the real agent."""
    configs = {c["metadata"]["name"]: c["data"] for c in _objects("simulated")["ConfigMap"]}
    etc = plugin_dir.parent / f"{plugin_dir.name}-etc"
    (etc / "config").mkdir(parents=True)
    (etc / "node-spec").mkdir()
    (etc / "config/config.yaml").write_text(configs["kubegpu-config"]["config.yaml"])
    (etc / "node-spec/node.yaml").write_text(configs["kubegpu-node-spec"]["node.yaml"])
    port = _free_port()
    args = []
    for given in _container("simulated")["args"][1:]:  # [0] is the subcommand
        arg = given.replace("/etc/kubegpu", str(etc)).replace(PLUGIN_DIR, str(plugin_dir))
        args.append(f"--health-address=127.0.0.1:{port}" if arg.startswith("--health-address") else arg)
    try:
        agent = start_agent(*args)
        assert kubelet.wait_for(lambda: kubelet.allocatable("nvidia.com/gpu") == 8, 20), agent.log
        deadline = time.monotonic() + 20
        while not _ready(port) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _ready(port), agent.log
        assert (plugin_dir / "kubegpu-sim/nvidia-smi").exists()
        assert agent.terminate() == 0
    finally:
        shutil.rmtree(etc, ignore_errors=True)
