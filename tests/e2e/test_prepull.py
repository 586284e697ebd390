"""The chart's pre-pull DaemonSet pulls a listed image onto the node (issue 17, e2e case 4).

The rig has no registry and no internet, so the test brings its own: Debian's ``docker-registry`` (the
CNCF distribution registry) on 127.0.0.1, started and stopped by PID, with a fresh single-layer busybox
image pushed into it by ``skopeo``; containerd reaches it over plain HTTP through a ``hosts.toml`` in
the rig's ``config_path``. The image is absent from containerd's ``k8s.io`` namespace before the chart's
DaemonSet (``helm template --set prepull.images={...}``, applied with kubectl) runs, and present after.
"""

from __future__ import annotations

import json
import socket
import subprocess
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import Cluster, prebuilt_helm, say, wait_until
from tests.e2e.rig import images
from tests.e2e.rig.rig import NODE_NAME, Rig

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "deploy/helm/kubegpu"


def _version() -> str:
    for line in (REPO / "pyproject.toml").read_text().splitlines():
        if line.startswith("version = "):
            return line.split("=", 1)[1].strip().strip('"')
    raise AssertionError("no version in pyproject.toml")


KUBEGPU_IMAGE = f"kubegpu.local/kubegpu:{_version()}"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _registry_up(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/", timeout=2) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False


@pytest.fixture
def registry(tmp_path: Path) -> Iterator[str]:
    """A plain-HTTP registry on 127.0.0.1:PORT, stopped by PID afterwards; yields ``127.0.0.1:PORT``."""
    port = _free_port()
    config = tmp_path / "registry.yml"
    config.write_text(
        "version: 0.1\nlog:\n  level: warn\n"
        f"storage:\n  filesystem:\n    rootdirectory: {tmp_path / 'data'}\n"
        f"http:\n  addr: 127.0.0.1:{port}\n"
    )
    log = (tmp_path / "registry.log").open("w")
    proc = subprocess.Popen(["/usr/bin/docker-registry", "serve", str(config)], stdout=log, stderr=log)
    try:
        wait_until("the local registry", lambda: proc.poll() is None and _registry_up(port), 30)
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        log.close()


@pytest.fixture
def plain_http(rig: Rig, registry: str) -> Iterator[None]:
    """containerd's hosts.toml for the registry: plain HTTP, pull and resolve."""
    host_dir = rig.paths.component_dir("containerd") / "certs.d" / registry
    host_dir.mkdir(parents=True, exist_ok=True)
    (host_dir / "hosts.toml").write_text(
        f'server = "http://{registry}"\n\n[host."http://{registry}"]\n  capabilities = ["pull", "resolve"]\n'
    )
    yield
    (host_dir / "hosts.toml").unlink()
    host_dir.rmdir()


@pytest.fixture
def kubegpu_image(rig: Rig, image_archive: Path) -> str:
    """`make image` (the session's one build; it holds the busybox the DaemonSet copies), imported."""
    rig.import_image(image_archive, KUBEGPU_IMAGE)
    return KUBEGPU_IMAGE


def _helm() -> str:
    built = prebuilt_helm()
    if built is not None:
        return built
    proc = subprocess.run(
        [str(REPO / "deploy/tools/build-helm.sh")], capture_output=True, text=True, check=False, timeout=1800
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.strip()


def _images(rig: Rig) -> list[str]:
    return rig.ctr("images", "ls", "-q").stdout.split()


def _prepull_pod(rig: Rig, ns: str) -> dict[str, Any] | None:
    out = rig.kubectl(
        "get", "pods", "-n", ns, "-l", "app.kubernetes.io/component=prepull", "-o", "json"
    ).stdout
    items = json.loads(out)["items"]
    return items[0] if items else None


def _running(pod: dict[str, Any] | None) -> bool:
    if pod is None or pod.get("status", {}).get("phase") != "Running":
        return False
    return all(s.get("ready") for s in pod["status"].get("containerStatuses", []))


@pytest.mark.usefixtures("plain_http", "kubegpu_image")
def test_the_prepull_daemonset_pulls_a_listed_image_onto_the_node(
    request: pytest.FixtureRequest, cluster: Cluster, registry: str, tmp_path: Path
) -> None:
    rig = cluster.rig
    ref = f"{registry}/kubegpu-e2e/prepull:{uuid.uuid4().hex[:8]}"
    archive = tmp_path / "prepull.tar"
    archive.write_bytes(
        images.docker_archive(tag=ref, layer=images.busybox_layer(), entrypoint=None, cmd=["/bin/sh"])
    )
    subprocess.run(
        [
            "skopeo",
            "copy",
            "--insecure-policy",
            "--dest-tls-verify=false",
            f"docker-archive:{archive}",
            f"docker://{ref}",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    assert ref not in _images(rig), "the image must not be in containerd before the DaemonSet runs"

    ns = cluster.namespace("prepull")
    rendered = subprocess.run(
        [
            _helm(),
            "template",
            "kubegpu",
            str(CHART),
            "--namespace",
            ns,
            "--show-only",
            "templates/serviceaccount.yaml",
            "--show-only",
            "templates/prepull.yaml",
            "--set",
            f"prepull.images={{{ref}}}",
            "--set",
            f"prepull.pauseImage={images.PAUSE_IMAGE}",
            "--set",
            f"prepull.nodeSelector.kubernetes\\.io/hostname={NODE_NAME}",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    start = time.monotonic()
    rig.kubectl("apply", "-n", ns, "-f", "-", input_text=rendered)
    try:
        pod = wait_until("the pre-pull pod Running", lambda: _prepull_pod(rig, ns), 240, accept=_running)
        took = time.monotonic() - start
        assert ref in _images(rig), f"{ref} is not in containerd's k8s.io namespace after the pre-pull"
        statuses = {s["name"]: s for s in pod["status"]["initContainerStatuses"]}
        assert statuses["pull-0"]["state"]["terminated"]["exitCode"] == 0
        assert statuses["pull-0"]["image"].endswith(ref.split("/", 1)[1])
        say(request.config, f"[e2e] prepull: {ref} pulled by the DaemonSet, pod Running in {took:.1f} s")
    finally:
        rig.kubectl("delete", "daemonset", "--all", "-n", ns, "--wait=true", check=False, timeout_s=120)
        rig.ctr("images", "rm", ref, check=False)
