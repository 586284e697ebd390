"""The chart's pre-pull option: nothing by default; with `prepull.images` set, a DaemonSet whose init
containers pull each image (running the static `true` the first one copies from the kubegpu image),
then a pause container, tolerating the GPU taints, on the agent's nodes unless told otherwise."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.integration.chart import CHART, helm, render
from tests.unit.plan.k8s_schema import problems

__all__ = ["helm"]  # the fixture, re-used

pytestmark = pytest.mark.integration

IMAGES = ["nvcr.io/nvidia/pytorch:24.05-py3", "registry.example/team/vllm:0.6"]


def daemonsets(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == "DaemonSet"}


def images_set(images: list[str]) -> str:
    return "prepull.images={" + ",".join(images) + "}"


def test_no_prepull_daemonset_by_default(helm: Path) -> None:
    assert set(daemonsets(render(helm))) == {"kubegpu"}


def test_listed_images_are_pulled_by_init_containers_then_a_pause_container(helm: Path) -> None:
    ds = daemonsets(render(helm, images_set(IMAGES)))["kubegpu-prepull"]
    assert problems(ds, "V1DaemonSet") == []
    spec = ds["spec"]["template"]["spec"]
    copy, *pulls = spec["initContainers"]
    assert copy["image"] == "kubegpu.local/kubegpu:0.1.0"
    assert copy["command"] == ["/bin/busybox", "cp", "/bin/busybox", "/prepull/true"]
    assert [p["image"] for p in pulls] == IMAGES
    for p in pulls:
        assert p["command"] == ["/prepull/true"] and p["imagePullPolicy"] == "IfNotPresent"
        assert {"name": "prepull", "mountPath": "/prepull", "readOnly": True} in p["volumeMounts"]
    [pause] = spec["containers"]
    assert pause["image"] == "registry.k8s.io/pause:3.10"
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec["tolerations"]
    assert {"key": "nvidia.com/gpu.unhealthy", "operator": "Exists"} in spec["tolerations"]
    [term] = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert term["matchExpressions"] == [{"key": "nvidia.com/gpu.present", "operator": "Exists"}]
    assert spec["securityContext"]["runAsNonRoot"] is True


def test_the_agent_daemonset_does_not_select_the_prepull_pods(helm: Path) -> None:
    sets = daemonsets(render(helm, images_set(IMAGES)))
    agent_selector = sets["kubegpu"]["spec"]["selector"]["matchLabels"]
    prepull_labels = sets["kubegpu-prepull"]["spec"]["template"]["metadata"]["labels"]
    assert not agent_selector.items() <= prepull_labels.items()


def test_simulated_mode_and_an_explicit_node_selector_pick_the_nodes(helm: Path) -> None:
    sim = daemonsets(render(helm, images_set(IMAGES[:1]), "simulated.enabled=true"))["kubegpu-prepull"]
    [term] = sim["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    assert term["matchExpressions"][0]["key"] == "kubegpu.io/simulated-gpus"
    picked = daemonsets(render(helm, images_set(IMAGES[:1]), "prepull.nodeSelector.pool=gpu-a"))
    spec = picked["kubegpu-prepull"]["spec"]["template"]["spec"]
    assert spec["nodeSelector"] == {"pool": "gpu-a"} and "affinity" not in spec


def test_the_chart_lints_clean_with_images(helm: Path) -> None:
    proc = subprocess.run(
        [str(helm), "lint", "--strict", str(CHART), "--set", images_set(IMAGES)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
