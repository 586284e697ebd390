"""The chart's extender option: nothing by default; with extender.enabled a one-replica Deployment of
`kubegpu extender` (Recreate, non-root, read-only root file system), RBAC that grants exactly the API
calls the extender makes, a Service, and a KubeSchedulerConfiguration whose urlPrefix names that
Service (or, with hostNetwork, the node's address); bad values fail `helm template` naming the key."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.integration.chart import CHART, by_kind, helm, render
from tests.unit.plan.k8s_schema import problems

__all__ = ["helm"]  # the fixture, re-used

pytestmark = pytest.mark.integration

ON = "extender.enabled=true"
NAME = "kubegpu-extender"


def extender_objects(docs: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return sorted(
        (d["kind"], d["metadata"]["name"])
        for d in docs
        if d["metadata"].get("labels", {}).get("app.kubernetes.io/component") == "extender"
    )


def scheduler_config(docs: list[dict[str, Any]]) -> dict[str, Any]:
    cm = by_kind(docs, "ConfigMap")[f"{NAME}-scheduler"]
    doc: dict[str, Any] = yaml.safe_load(cm["data"]["scheduler-config.yaml"])
    return doc


def container(docs: list[dict[str, Any]]) -> dict[str, Any]:
    [c] = by_kind(docs, "Deployment")[NAME]["spec"]["template"]["spec"]["containers"]
    return c


def helm_template_error(helm: Path, *sets: str) -> str:
    argv = [str(helm), "template", "kubegpu", str(CHART), "--namespace", "kubegpu"]
    for s in sets:
        argv += ["--set", s]
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    assert proc.returncode != 0, f"helm template accepted {sets}"
    return proc.stderr


def test_nothing_of_the_extender_by_default(helm: Path) -> None:
    assert extender_objects(render(helm)) == []


def test_enabled_renders_the_deployment_its_account_rbac_service_and_scheduler_config(helm: Path) -> None:
    docs = render(helm, ON)
    assert extender_objects(docs) == [
        ("ClusterRole", NAME),
        ("ClusterRoleBinding", NAME),
        ("ConfigMap", f"{NAME}-scheduler"),
        ("Deployment", NAME),
        ("NetworkPolicy", NAME),  # only kube-scheduler may call it (test_chart_extender_security.py)
        ("Service", NAME),
        ("ServiceAccount", NAME),
    ]
    deploy = by_kind(docs, "Deployment")[NAME]
    assert problems(deploy, "V1Deployment") == []
    assert problems(by_kind(docs, "Service")[NAME], "V1Service") == []
    assert deploy["spec"]["replicas"] == 1
    assert deploy["spec"]["strategy"] == {"type": "Recreate"}
    pod = deploy["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == NAME and pod["automountServiceAccountToken"] is True
    assert "hostNetwork" not in pod
    c = container(docs)
    assert c["image"] == "kubegpu.local/kubegpu:0.1.0"
    assert c["args"] == [
        "extender",
        "--listen=0.0.0.0:8888",
        "--policy=kubegpu-plan",
        "--reservation-ttl=30",
        "--log-level=info",
    ]
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert c["ports"] == [{"name": "http", "containerPort": 8888, "protocol": "TCP"}]
    assert set(c["resources"]) == {"requests", "limits"}


def test_the_extender_runs_non_root_read_only_without_privilege_escalation(helm: Path) -> None:
    docs = render(helm, ON)
    pod = by_kind(docs, "Deployment")[NAME]["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 65532  # the image's nonroot user
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    sc = container(docs)["securityContext"]
    assert sc == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }


def test_rbac_grants_exactly_the_extenders_api_calls(helm: Path) -> None:
    docs = render(helm, ON)
    role = by_kind(docs, "ClusterRole")[NAME]
    assert "*" not in json.dumps(role)
    assert all(rule["apiGroups"] == [""] and "resourceNames" not in rule for rule in role["rules"])
    granted = {(r, v) for rule in role["rules"] for r in rule["resources"] for v in rule["verbs"]}
    assert granted == {  # kubegpu.extender.cluster: ClusterSync lists and watches, ApiBinder gets and binds
        ("nodes", "list"),
        ("nodes", "watch"),
        ("pods", "get"),
        ("pods", "list"),
        ("pods", "watch"),
        ("pods/binding", "create"),
    }
    binding = by_kind(docs, "ClusterRoleBinding")[NAME]
    assert binding["roleRef"]["name"] == NAME
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": NAME, "namespace": "kubegpu"}]
    # the agent's own role is not widened by the extender
    agent = by_kind(docs, "ClusterRole")["kubegpu"]
    assert not any("pods/binding" in rule["resources"] for rule in agent["rules"])


def test_the_scheduler_config_names_the_service_and_manages_the_gpu_resources(helm: Path) -> None:
    docs = render(helm, ON)
    config = scheduler_config(docs)
    assert config["apiVersion"] == "kubescheduler.config.k8s.io/v1"
    assert config["kind"] == "KubeSchedulerConfiguration"
    assert config["percentageOfNodesToScore"] == 100
    assert config["profiles"] == [{"schedulerName": "kubegpu"}]
    [ext] = config["extenders"]
    service = by_kind(docs, "Service")[NAME]
    [port] = service["spec"]["ports"]
    assert ext["urlPrefix"] == f"http://{NAME}.kubegpu.svc.cluster.local:{port['port']}/kubegpu"
    assert port["targetPort"] == "http"
    pod_labels = by_kind(docs, "Deployment")[NAME]["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert {k: v for k, v in ext.items() if k != "urlPrefix"} == {
        "filterVerb": "filter",
        "bindVerb": "bind",
        "nodeCacheCapable": True,
        "enableHTTPS": False,
        "httpTimeout": "5s",
        "managedResources": [
            {"name": "nvidia.com/gpu", "ignoredByScheduler": False},
            {"name": "kubegpu.io/gpu-milli", "ignoredByScheduler": True},
        ],
    }
    assert "prioritizeVerb" not in ext  # filter decides (docs/extender.md)


def test_the_agent_daemonset_does_not_select_the_extender_pod(helm: Path) -> None:
    docs = render(helm, ON)
    agent = by_kind(docs, "DaemonSet")["kubegpu"]["spec"]["selector"]["matchLabels"]
    pod_labels = by_kind(docs, "Deployment")[NAME]["spec"]["template"]["metadata"]["labels"]
    assert not agent.items() <= pod_labels.items()


def test_host_network_points_the_scheduler_at_the_node_address_and_port(helm: Path) -> None:
    docs = render(
        helm,
        ON,
        "extender.hostNetwork=true",
        "extender.nodeAddress=10.1.2.3",
        "extender.port=9555",
        "extender.nodeSelector.kubernetes\\.io/hostname=cp-1",
        "extender.policy=fgd",
    )
    [ext] = scheduler_config(docs)["extenders"]
    assert ext["urlPrefix"] == "http://10.1.2.3:9555/kubegpu"
    pod = by_kind(docs, "Deployment")[NAME]["spec"]["template"]["spec"]
    assert pod["hostNetwork"] is True and pod["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert pod["nodeSelector"] == {"kubernetes.io/hostname": "cp-1"}
    c = container(docs)
    assert "--listen=0.0.0.0:9555" in c["args"] and "--policy=fgd" in c["args"]
    assert c["ports"][0]["containerPort"] == 9555


def test_a_workload_configmap_is_mounted_and_passed_as_workload(helm: Path) -> None:
    docs = render(helm, ON, "extender.workload.configMap=month-of-pods", "extender.workload.key=openb.csv")
    c = container(docs)
    assert "--workload=/etc/kubegpu/workload/openb.csv" in c["args"]
    assert {"name": "workload", "mountPath": "/etc/kubegpu/workload", "readOnly": True} in c["volumeMounts"]
    pod = by_kind(docs, "Deployment")[NAME]["spec"]["template"]["spec"]
    [vol] = [v for v in pod["volumes"] if v["name"] == "workload"]
    assert vol["configMap"] == {"name": "month-of-pods", "items": [{"key": "openb.csv", "path": "openb.csv"}]}


@pytest.mark.parametrize(
    ("sets", "message"),
    [
        (["extender.port=80"], "/extender/port"),
        (["extender.port=70000"], "/extender/port"),
        (["extender.policy=best"], "/extender/policy"),
        (["extender.enabled=yes"], "/extender/enabled"),
        (["extender.logLevel=verbose"], "/extender/logLevel"),
        (["extender.httpTimeout=five"], "/extender/httpTimeout"),
        (["extender.workload.configMap=Not_A_Name"], "/extender/workload/configMap"),
        (["extender.replicas=2"], "additional properties 'replicas' not allowed"),
        ([ON, "extender.hostNetwork=true", "extender.nodeSelector.a=b"], "extender.nodeAddress:"),
        ([ON, "extender.hostNetwork=true", "extender.nodeAddress=10.1.2.3"], "extender.nodeSelector:"),
    ],
)
def test_bad_values_fail_helm_template_naming_the_key(helm: Path, sets: list[str], message: str) -> None:
    assert message in helm_template_error(helm, *sets)


def test_the_rendered_arguments_are_what_kubegpu_extender_accepts(helm: Path, tmp_path: Path) -> None:
    """The flags parse (a bad one exits 2); the command then stops at the missing cluster (exit 1)."""
    args = container(render(helm, ON, "extender.policy=bestfit"))["args"]
    env = {k: v for k, v in os.environ.items() if k != "KUBERNETES_SERVICE_HOST"}
    env["KUBECONFIG"] = str(tmp_path / "none")
    proc = subprocess.run(
        [sys.executable, "-m", "kubegpu", *args, "--kubeconfig", str(tmp_path / "none")],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=60,
    )
    assert proc.returncode == 1, proc.stderr
    assert "no usable kubeconfig" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_the_chart_lints_clean_with_the_extender(helm: Path) -> None:
    proc = subprocess.run(
        [str(helm), "lint", "--strict", str(CHART), "--set", ON],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
