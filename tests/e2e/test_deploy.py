"""kubegpu deployed as users deploy it: the image (`make image`) imported into the rig's containerd, the
agent as a DaemonSet from the plain manifest and from the Helm chart, in simulated mode (seed-8gpu) on
the rig's node, talking to the real kubelet; GPU pods from the rig's busybox image. The chart's install
also runs `kubegpu extender` (extender.enabled) and a second kube-scheduler from the chart's own
KubeSchedulerConfiguration, which binds a GPU pod through it.

Each test removes what it installed (release, manifest, node label) and waits until the agent's
sockets are gone, so the host-process agent tests that follow start from a clean plugin directory.
"""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.conftest import (
    Cluster,
    free_port,
    in_ns,
    kubegpu_argv,
    pod,
    prebuilt_helm,
    say,
    wait_until,
)
from tests.e2e.rig.rig import APISERVER_PORT, DEVICE_PLUGIN_DIR, NODE_NAME, Rig, node_ip
from tests.e2e.test_extender import assignment, gpu_pod

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

REPO = Path(__file__).resolve().parents[2]
MANIFEST = REPO / "deploy/kubegpu-simulated.yaml"
CHART = REPO / "deploy/helm/kubegpu"
SIM_LABEL = "kubegpu.io/simulated-gpus"
GPU = "nvidia.com/gpu"
SELECTOR = "app.kubernetes.io/name=kubegpu"
AGENT_SELECTOR = f"{SELECTOR},app.kubernetes.io/component=agent"
EXTENDER_SELECTOR = f"{SELECTOR},app.kubernetes.io/component=extender"
SMI_COMMAND = (
    "nvidia-smi -L; echo KUBEGPU_VISIBLE=$NVIDIA_VISIBLE_DEVICES; echo KUBEGPU_ENV_END=1; sleep 3600"
)


def _version() -> str:
    for line in (REPO / "pyproject.toml").read_text().splitlines():
        if line.startswith("version = "):
            return line.split("=", 1)[1].strip().strip('"')
    raise AssertionError("no version in pyproject.toml")


IMAGE = f"kubegpu.local/kubegpu:{_version()}"


@pytest.fixture(scope="module")
def kubegpu_image(rig: Rig, image_archive: Path) -> str:
    """`make image` (the session's one build), imported into containerd's k8s.io namespace."""
    rig.import_image(image_archive, IMAGE)
    return IMAGE


@pytest.fixture(scope="module")
def helm() -> str:
    built = prebuilt_helm()  # built before the first test (conftest), outside any test's timeout
    if built is not None:
        return built
    proc = subprocess.run(
        [str(REPO / "deploy/tools/build-helm.sh")], capture_output=True, text=True, check=False, timeout=1800
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.strip()


@pytest.fixture
def sim_node(rig: Rig) -> Iterator[None]:
    rig.kubectl("label", "node", NODE_NAME, f"{SIM_LABEL}=true", "--overwrite")
    yield
    rig.kubectl("label", "node", NODE_NAME, f"{SIM_LABEL}-", check=False)


def _agent_sockets() -> list[str]:
    return sorted(
        p.name
        for p in DEVICE_PLUGIN_DIR.iterdir()
        if p.name != "kubelet.sock" and stat.S_ISSOCK(p.lstat().st_mode)
    )


def _agent_pods(cluster: Cluster, ns: str, selector: str = AGENT_SELECTOR) -> list[dict[str, Any]]:
    out = cluster.rig.kubectl("get", "pods", "-n", ns, "-l", selector, "-o", "json").stdout
    items: list[dict[str, Any]] = json.loads(out)["items"]
    return [p for p in items if not p["metadata"].get("deletionTimestamp")]


def _ready(p: dict[str, Any]) -> bool:
    conds = p.get("status", {}).get("conditions", [])
    return p.get("status", {}).get("phase") == "Running" and any(
        c["type"] == "Ready" and c["status"] == "True" for c in conds
    )


def wait_agent_ready(cluster: Cluster, ns: str, timeout_s: float = 180) -> dict[str, Any]:
    pods = wait_until(
        f"the kubegpu DaemonSet pod in {ns} Running and Ready",
        lambda: _agent_pods(cluster, ns),
        timeout_s,
        accept=lambda ps: len(ps) == 1 and _ready(ps[0]),
    )
    agent: dict[str, Any] = pods[0]
    return agent


def gpu_pod_smi(cluster: Cluster, ns: str, name: str) -> tuple[list[str], list[str]]:
    """(UUIDs `nvidia-smi -L` printed, NVIDIA_VISIBLE_DEVICES) of a running one-GPU busybox pod."""
    cluster.apply(in_ns(pod(name, resources={GPU: 1}, command=SMI_COMMAND), ns))
    cluster.wait_running(ns, name)
    out = wait_until(
        f"nvidia-smi output of {ns}/{name}",
        lambda: cluster.logs(ns, name),
        60,
        accept=lambda text: "KUBEGPU_ENV_END=1" in text,
    )
    listed = re.findall(r"^GPU \d+: .* \(UUID: (\S+)\)$", out, re.MULTILINE)
    visible = re.search(r"^KUBEGPU_VISIBLE=(.*)$", out, re.MULTILINE)
    assert visible is not None, out
    return listed, [v for v in visible.group(1).split(",") if v]


def wait_gone(cluster: Cluster) -> None:
    wait_until("the agent's sockets removed", _agent_sockets, 60, accept=lambda s: s == [])
    cluster.wait_resource(GPU, allocatable=0, timeout_s=90)


def test_plain_manifest_runs_the_agent_and_a_gpu_pod_sees_its_gpu_in_nvidia_smi(
    cluster: Cluster, kubegpu_image: str, sim_node: None, request: pytest.FixtureRequest
) -> None:
    del kubegpu_image, sim_node
    rig = cluster.rig
    t0 = time.monotonic()
    rig.kubectl("apply", "-f", str(MANIFEST))
    try:
        wait_agent_ready(cluster, "kubegpu")
        t_ready = time.monotonic() - t0
        cluster.wait_resource(GPU, allocatable=8, capacity=8, timeout_s=90)
        say(
            request.config,
            f"[e2e] deploy: kubectl apply -> agent pod Ready {t_ready:.1f} s, "
            f"-> allocatable nvidia.com/gpu: 8 {time.monotonic() - t0:.1f} s",
        )
        ns = cluster.namespace()
        listed, visible = gpu_pod_smi(cluster, ns, "gpu-test")
        assert len(visible) == 1 and listed == visible, (listed, visible)
        cluster.delete_namespace(ns)
    finally:
        rig.kubectl(
            "delete", "-f", str(MANIFEST), "--wait=true", "--timeout=120s", check=False, timeout_s=150
        )
    wait_gone(cluster)


def node_label(cluster: Cluster, key: str) -> str | None:
    labels: dict[str, str] = cluster.get("node", NODE_NAME)["metadata"].get("labels", {})
    return labels.get(key)


def wait_label(cluster: Cluster, key: str, value: str, timeout_s: float = 60) -> None:
    """The in-cluster agent wrote ``key=value`` on the node: its token, the chart's RBAC and the image's
    API client work (docs/node.md)."""
    wait_until(
        f"node label {key}={value}", lambda: node_label(cluster, key), timeout_s, accept=lambda v: v == value
    )


def _helm(helm: str, rig: Rig, *args: str) -> str:
    env = {**os.environ, "KUBECONFIG": str(rig.paths.kubeconfig), "HOME": os.environ.get("HOME", "/root")}
    proc = subprocess.run([helm, *args], capture_output=True, text=True, env=env, check=False, timeout=300)
    assert proc.returncode == 0, f"helm {' '.join(args)}: {proc.stderr}"
    return proc.stdout


def extender_values(port: int, api: list[dict[str, str]]) -> list[str]:
    """The chart's extender as a kubeadm-like cluster needs it: the rig's kube-scheduler runs on the host
    without cluster DNS or kube-proxy (no Service name or ClusterIP reaches a pod), so the extender
    takes the host network on the rig's node and the scheduler config names the node's address."""
    return [
        "--set",
        "extender.enabled=true",
        "--set",
        "extender.hostNetwork=true",
        "--set",
        f"extender.nodeAddress={node_ip()}",
        "--set",
        f"extender.port={port}",
        "--set",
        f"extender.nodeSelector.kubernetes\\.io/hostname={NODE_NAME}",
        "--set-json",
        f"extender.extraEnv={json.dumps(api)}",
    ]


def check_extender_binds_a_gpu_pod(cluster: Cluster, ns: str, request: pytest.FixtureRequest) -> None:
    """The chart's extender, Ready, run by a kube-scheduler with the chart's own scheduler config, binds
    a `schedulerName: kubegpu` GPU pod with its assignment (its RBAC and image are enough for that)."""
    t0 = time.monotonic()
    wait_until(
        "the kubegpu extender pod Running and Ready (its first list of nodes and pods in)",
        lambda: _agent_pods(cluster, ns, EXTENDER_SELECTOR),
        120,
        accept=lambda ps: len(ps) == 1 and _ready(ps[0]),
    )
    t_ready = time.monotonic() - t0
    cm = cluster.get("configmap", "kubegpu-extender-scheduler", ns)
    config = yaml.safe_load(cm["data"]["scheduler-config.yaml"])
    rig = cluster.rig
    rig.start_extra_scheduler(config)  # unchanged: the urlPrefix is the chart's
    try:
        pods_ns = cluster.namespace("ext")
        cluster.apply(gpu_pod("via-chart", pods_ns, gpus=1))
        doc = assignment(cluster, pods_ns, "via-chart")
        assert doc["milli"] == 1000 and len(doc["gpus"]) == 1, doc
        cluster.apply(gpu_pod("share-via-chart", pods_ns, milli=500))
        share = assignment(cluster, pods_ns, "share-via-chart")
        assert share["milli"] == 500 and share["gpus"] != doc["gpus"], (share, doc)
        say(
            request.config,
            f"[e2e] deploy: chart extender Ready {t_ready:.1f} s after the agent's labels; "
            f"two GPU pods bound through it in {time.monotonic() - t0 - t_ready:.1f} s",
        )
        cluster.delete_namespace(pods_ns)
    except BaseException:
        print(rig.kubectl("logs", "-n", ns, "-l", EXTENDER_SELECTOR, "--tail=60", check=False).stdout)
        print(rig.log_tail(rig.EXTRA_SCHEDULER, 60))
        raise
    finally:
        rig.stop_extra_scheduler()


def test_helm_install_time_slices_upgrade_changes_replicas_live_and_uninstall_leaves_nothing(
    cluster: Cluster, kubegpu_image: str, helm: str, sim_node: None, request: pytest.FixtureRequest
) -> None:
    del kubegpu_image, sim_node
    rig = cluster.rig
    ns = "kubegpu-helm"
    base = ["--namespace", ns, "--set", "simulated.enabled=true"]
    four = ["--set", "sharing.timeSlicing.replicas=4"]
    # the rig has no kube-proxy: the agent reaches the API server at the node's address, not the ClusterIP
    api = [
        {"name": "KUBERNETES_SERVICE_HOST", "value": node_ip()},
        {"name": "KUBERNETES_SERVICE_PORT", "value": str(APISERVER_PORT)},
    ]
    base += ["--set-json", f"extraEnv={json.dumps(api)}", *extender_values(free_port(), api)]
    _helm(helm, rig, "install", "kubegpu", str(CHART), "--create-namespace", *base, *four)
    try:
        agent = wait_agent_ready(cluster, ns)
        cluster.wait_resource(GPU, allocatable=32, timeout_s=90)
        wait_label(cluster, "nvidia.com/gpu.replicas", "4")
        check_extender_binds_a_gpu_pod(cluster, ns, request)
        # the agent watches its mounted ConfigMap; kubelet syncs the volume at the pod's next sync (the
        # rig's syncFrequency: 10 s)
        _helm(helm, rig, "upgrade", "kubegpu", str(CHART), *base, "--set", "sharing.timeSlicing.replicas=2")
        cluster.wait_resource(GPU, allocatable=16, timeout_s=240)
        wait_label(cluster, "nvidia.com/gpu.replicas", "2", timeout_s=30)
        [same] = _agent_pods(cluster, ns)
        assert same["metadata"]["uid"] == agent["metadata"]["uid"], "the upgrade restarted the agent pod"
        assert same["status"]["containerStatuses"][0]["restartCount"] == 0
    finally:
        _helm(helm, rig, "uninstall", "kubegpu", "--namespace", ns, "--wait")
    wait_gone(cluster)

    def left() -> list[str]:  # the extender's pod is deleted after its Deployment (garbage collection)
        return rig.kubectl(
            "get",
            "all,configmap,serviceaccount",
            "-n",
            ns,
            "-l",
            "app.kubernetes.io/instance=kubegpu",
            "-o",
            "name",
        ).stdout.split()

    wait_until("nothing of the release left in its namespace", left, 60, accept=lambda names: names == [])
    roles = rig.kubectl("get", "clusterrole,clusterrolebinding", "-l", SELECTOR, "-o", "name").stdout.split()
    assert roles == [], roles
    rig.kubectl("delete", "namespace", ns, "--wait=true", check=False, timeout_s=150)


def test_a_killed_agent_pod_is_replaced_and_running_gpu_pods_keep_their_gpus(
    cluster: Cluster, kubegpu_image: str, sim_node: None
) -> None:
    del kubegpu_image, sim_node
    rig = cluster.rig
    rig.kubectl("apply", "-f", str(MANIFEST))
    try:
        first = wait_agent_ready(cluster, "kubegpu")
        cluster.wait_resource(GPU, allocatable=8, capacity=8, timeout_s=90)
        ns = cluster.namespace()
        listed, visible = gpu_pod_smi(cluster, ns, "keeps-gpu")
        assert listed == visible and len(visible) == 1
        rig.kubectl("delete", "pod", "-n", "kubegpu", first["metadata"]["name"], "--wait=false")
        second = wait_until(
            "a new agent pod Ready",
            lambda: _agent_pods(cluster, "kubegpu"),
            180,
            accept=lambda ps: (
                len(ps) == 1 and ps[0]["metadata"]["uid"] != first["metadata"]["uid"] and _ready(ps[0])
            ),
        )[0]
        assert second["metadata"]["uid"] != first["metadata"]["uid"]
        cluster.wait_resource(GPU, allocatable=8, capacity=8, timeout_s=90)
        assert cluster.pod_phase(ns, "keeps-gpu") == "Running"
        assert cluster.env(ns, "keeps-gpu").get("KUBEGPU_VISIBLE") == visible[0]
        # a new pod gets another GPU: the kept pod's GPU is still counted as in use
        _, other = gpu_pod_smi(cluster, ns, "second")
        assert other != visible
        # `kubegpu doctor cluster` recognises kubegpu's DaemonSet pod as the device plugin
        env = {**os.environ, "KUBECONFIG": str(rig.paths.kubeconfig)}
        doctor = subprocess.run(
            kubegpu_argv("doctor", "cluster", "--node", NODE_NAME, "--json", "-v"),
            capture_output=True,
            text=True,
            env=env,
            check=False,
        )
        assert second["metadata"]["name"] in doctor.stdout, doctor.stdout[-3000:] + doctor.stderr[-2000:]
        cluster.delete_namespace(ns)
    finally:
        rig.kubectl(
            "delete", "-f", str(MANIFEST), "--wait=true", "--timeout=120s", check=False, timeout_s=150
        )
    wait_gone(cluster)
