"""kubegpu's DRA driver on the real kubelet, scheduler and containerd of the rig.

`kubegpu dra serve` runs as a host process on the rig's node (simulated seed-8gpu: two NVLink groups of
four). It registers with kubelet through plugins_registry, publishes the node's ResourceSlice, and
prepares claims: the real scheduler's DRA allocator picks devices, kubelet calls NodePrepareResources,
containerd applies the CDI spec the driver wrote, and the pod sees NVIDIA_VISIBLE_DEVICES and the
simulated nvidia-smi.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import (
    AgentProcess,
    Cluster,
    _current_logs,
    gpu_index_by_uuid,
    in_ns,
    kubegpu_argv,
    pod,
    wait_until,
)
from tests.e2e.rig.rig import CDI_SPEC_DIRS, KUBELET_ROOT, NODE_NAME, Rig

pytestmark = pytest.mark.e2e

SEED = "builtin:seed-8gpu"
MIG_SPEC = "builtin:h100-mig-mixed"
DRIVER = "gpu.kubegpu.io"
GROUPS = ({0, 1, 2, 3}, {4, 5, 6, 7})  # seed-8gpu's NVLink groups


@dataclass
class DraProcess(AgentProcess):
    """`kubegpu dra serve` on the rig's node; lines appended to ``faults`` are its GPU health events."""

    faults: Path = Path("/dev/null")

    def fault(self, line: str) -> None:
        with self.faults.open("a") as f:
            f.write(line + "\n")


StartDra = Callable[..., DraProcess]


@pytest.fixture
def start_dra(rig: Rig, cluster: Cluster, tmp_path: Path) -> Iterator[StartDra]:
    """Start `kubegpu dra serve` on the rig's node (DeviceClasses applied first); stopped afterwards,
    after the test's namespaces are gone (kubelet must unprepare their claims through the driver)."""
    classes = subprocess.run(
        kubegpu_argv("dra", "classes"), capture_output=True, text=True, timeout=60, check=True
    )
    rig.kubectl("apply", "-f", "-", input_text=classes.stdout)
    started: list[DraProcess] = []
    faults = tmp_path / "faults.jsonl"
    faults.write_text("")

    def start(
        *extra: str, spec: str = SEED, devices: int = 8, cdi_dir: Path = CDI_SPEC_DIRS[-1]
    ) -> DraProcess:
        argv = kubegpu_argv(
            "dra", "serve", "--node-spec", spec, "--node-name", NODE_NAME,
            "--kubeconfig", str(rig.paths.kubeconfig), "--kubelet-dir", str(KUBELET_ROOT),
            "--cdi-dir", str(cdi_dir), "--simulated-nvidia-smi", "--resync", "2",
            "--fault-file", str(faults), *extra,
        )  # fmt: skip
        log_path = tmp_path / f"dra-{len(started)}.log"
        with log_path.open("wb") as logf:
            proc = subprocess.Popen(argv, stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        driver = DraProcess(argv=argv, log_path=log_path, proc=proc, faults=faults)
        started.append(driver)
        _current_logs.append(driver.log_tail)
        wait_until(
            f"the driver's ResourceSlice with {devices} devices",
            lambda: slices(rig),
            60,
            accept=lambda s: len(s) == 1 and len(s[0]["spec"]["devices"]) == devices,
        )
        return driver

    yield start
    for ns in cluster.namespaces:
        cluster.delete_namespace(ns)
    for driver in started:
        driver.stop()
        _current_logs.remove(driver.log_tail)
    # the next test starts from no slices (kubelet would wipe them 30 s after the driver left)
    rig.kubectl(
        "delete", "resourceslices", "--field-selector", f"spec.nodeName={NODE_NAME},spec.driver={DRIVER}"
    )


def slices(rig: Rig) -> list[dict[str, Any]]:
    out = rig.kubectl(
        "get",
        "resourceslices",
        "--field-selector",
        f"spec.nodeName={NODE_NAME},spec.driver={DRIVER}",
        "-o",
        "json",
    ).stdout
    items: list[dict[str, Any]] = json.loads(out)["items"]
    return items


def claim(name: str, count: int, *, clique: bool = True) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "devices": {"requests": [{"name": "gpus", "exactly": {"deviceClassName": DRIVER, "count": count}}]}
    }
    if clique:
        spec["devices"]["constraints"] = [{"requests": ["gpus"], "matchAttribute": f"{DRIVER}/nvlinkClique"}]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": spec,
    }


def claim_pod(name: str, claim_name: str) -> dict[str, Any]:
    p = pod(name, command="env; nvidia-smi -L; echo KUBEGPU_ENV_END=1; sleep 3600")
    p["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimName": claim_name}]
    p["spec"]["containers"][0]["resources"] = {"claims": [{"name": "gpus"}]}
    return p


def doctor_claims(rig: Rig, ns: str, name: str) -> dict[str, Any]:
    """`kubegpu doctor pod NS/NAME --json`: its pod.claims finding."""
    argv = kubegpu_argv("doctor", "pod", f"{ns}/{name}", "--kubeconfig", str(rig.paths.kubeconfig), "--json")
    res = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == 1, res.stderr[-2000:]
    found: dict[str, Any] = {f["id"]: f for f in json.loads(res.stdout)["findings"]}["pod.claims"]
    return found


def resource_health(cluster: Cluster, ns: str, name: str) -> dict[str, str]:
    """resourceID -> health, from the pod's containerStatuses[].allocatedResourcesStatus."""
    out: dict[str, str] = {}
    for status in cluster.get("pod", name, ns).get("status", {}).get("containerStatuses", []):
        for entry in status.get("allocatedResourcesStatus") or []:
            for r in entry.get("resources") or []:
                out[str(r.get("resourceID"))] = str(r.get("health"))
    return out


def allocated(cluster: Cluster, ns: str, name: str) -> list[str]:
    results = cluster.get("resourceclaim", name, ns)["status"]["allocation"]["devices"]["results"]
    return [r["device"] for r in results]


def test_a_claim_for_nvlink_connected_gpus_runs_with_exactly_those_gpus(
    cluster: Cluster, rig: Rig, start_dra: StartDra
) -> None:
    driver = start_dra()
    by_uuid = gpu_index_by_uuid(SEED)
    ns = cluster.namespace("dra")

    # Two GPUs of one NVLink clique: the pod gets exactly the two the scheduler allocated.
    cluster.apply(in_ns(claim("pair", 2), ns))
    cluster.apply(in_ns(claim_pod("pair", "pair"), ns))
    cluster.wait_running(ns, "pair", timeout_s=120)
    env = cluster.env(ns, "pair")
    visible = [by_uuid[u] for u in env["NVIDIA_VISIBLE_DEVICES"].split(",")]
    assert sorted(f"gpu-{i}" for i in visible) == sorted(allocated(cluster, ns, "pair"))
    assert any(set(visible) <= g for g in GROUPS), visible
    listed = [line for line in cluster.logs(ns, "pair").splitlines() if line.startswith("GPU ")]
    assert len(listed) == 2, listed  # the simulated nvidia-smi sees what CDI made visible

    # kubelet shows each device's health in the pod's status (DRAResourceHealth), and an XID 79 on one
    # of the pod's GPUs turns it Unhealthy there, while the GPU leaves the slice.
    uid = cluster.get("resourceclaim", "pair", ns)["metadata"]["uid"]
    ids = {i: f"kubegpu.io/gpu={uid}-dev-gpu-{i}" for i in visible}
    wait_until(
        "the pod's status to show both devices Healthy",
        lambda: resource_health(cluster, ns, "pair"),
        90,
        accept=lambda h: all(h.get(r) == "Healthy" for r in ids.values()),
    )
    failed = visible[0]
    driver.fault(json.dumps({"gpu": failed, "xid": 79}))
    wait_until(
        f"gpu-{failed} Unhealthy in the pod's status",
        lambda: resource_health(cluster, ns, "pair"),
        90,
        accept=lambda h: h.get(ids[failed]) == "Unhealthy" and h.get(ids[visible[1]]) == "Healthy",
    )
    wait_until(
        f"gpu-{failed} to leave the slice",
        lambda: [d["name"] for d in slices(rig)[0]["spec"]["devices"]],
        30,
        accept=lambda names: f"gpu-{failed}" not in names and len(names) == 7,
    )

    # Four in one clique: only the other group has four free, so that is where the claim must land.
    cluster.apply(in_ns(claim("quad", 4), ns))
    cluster.apply(in_ns(claim_pod("quad", "quad"), ns))
    cluster.wait_running(ns, "quad", timeout_s=120)
    quad = {int(d.removeprefix("gpu-")) for d in allocated(cluster, ns, "quad")}
    assert quad in GROUPS and not quad & set(visible)

    # Three in one clique cannot fit anywhere now: the real scheduler says so.
    cluster.apply(in_ns(claim("three", 3), ns))
    cluster.apply(in_ns(claim_pod("three", "three"), ns))
    cluster.wait_event(ns, "three", "FailedScheduling", "", timeout_s=60)
    assert cluster.pod_phase(ns, "three") == "Pending"
    # ... and kubegpu doctor says why: two healthy GPUs are free, three are asked for
    claims = doctor_claims(rig, ns, "three")
    assert claims["status"] == "fail", claims
    assert "needs 3 device(s)" in claims["summary"] and "most: 2 on kubegpu-rig" in claims["summary"]

    # The driver restarts (an upgrade): the running pods' claims stay prepared, from its checkpoint.
    spec_file = CDI_SPEC_DIRS[-1] / f"kubegpu.io-gpu_{uid}.json"
    assert spec_file.exists()
    driver.stop()
    start_dra(devices=7)  # the fault file still says XID 79 for that GPU
    assert spec_file.exists()

    # The pod ends: kubelet unprepares the claim and the restarted driver removes its CDI spec.
    rig.kubectl("delete", "pod", "-n", ns, "pair", "--wait=true", "--timeout=60s")
    wait_until(f"{spec_file} removed after unprepare", lambda: not spec_file.exists(), 60)


def test_slices_come_back_when_deleted_and_go_when_the_driver_is_uninstalled(
    rig: Rig, start_dra: StartDra
) -> None:
    driver = start_dra()
    selector = f"spec.nodeName={NODE_NAME},spec.driver={DRIVER}"
    rig.kubectl("delete", "resourceslices", "--field-selector", selector)
    back = wait_until("the ResourceSlice re-created", lambda: slices(rig), 30, accept=lambda s: len(s) == 1)
    assert len(back[0]["spec"]["devices"]) == 8
    assert back[0]["metadata"]["ownerReferences"][0]["kind"] == "Node"
    # Uninstall: the registration socket vanishes with the driver; 30 s later kubelet deletes the
    # driver's slices for its node.
    driver.stop()
    wait_until(
        "kubelet to delete the stopped driver's slices", lambda: slices(rig), 75, accept=lambda s: not s
    )


def devices_of(spec: str) -> list[dict[str, Any]]:
    """What the driver publishes for a node spec, from `kubegpu dra devices SPEC --json`."""
    argv = kubegpu_argv("dra", "devices", spec, "--json")
    found: list[dict[str, Any]] = json.loads(
        subprocess.run(argv, capture_output=True, text=True, timeout=60, check=True).stdout
    )
    return found


def test_a_mig_profile_claim_gets_one_mig_device(cluster: Cluster, rig: Rig, start_dra: StartDra) -> None:
    published = devices_of(MIG_SPEC)
    mig = {d["name"]: d for d in published if d["attributes"]["type"]["string"] == "mig"}
    profile = next(iter(mig.values()))["attributes"]["profile"]["string"]
    start_dra(spec=MIG_SPEC, devices=len(published))
    ns = cluster.namespace("dra-mig")
    c = claim("slice", 1, clique=False)
    request = c["spec"]["devices"]["requests"][0]["exactly"]
    request["deviceClassName"] = "mig.kubegpu.io"
    request["selectors"] = [{"cel": {"expression": f'device.attributes["{DRIVER}"].profile == "{profile}"'}}]
    cluster.apply(in_ns(c, ns))
    cluster.apply(in_ns(claim_pod("slice", "slice"), ns))
    cluster.wait_running(ns, "slice", timeout_s=120)
    [device] = allocated(cluster, ns, "slice")
    assert device in mig and mig[device]["attributes"]["profile"]["string"] == profile
    env = cluster.env(ns, "slice")
    assert env["NVIDIA_VISIBLE_DEVICES"] == mig[device]["attributes"]["uuid"]["string"]
    assert env["NVIDIA_VISIBLE_DEVICES"].startswith("MIG-")


def run_sequence(cluster: Cluster, rig: Rig, ns: str, *, reorders: bool) -> dict[str, set[int]]:
    """Claims a (4 in a clique), b (1), a leaves, c (2 in a clique), d (4 in a clique); returns what each
    placed claim got. Each pod runs before the next arrives, as in a cluster under light load."""
    got: dict[str, set[int]] = {}

    def place(name: str, count: int) -> None:
        cluster.apply(in_ns(claim(name, count), ns))
        cluster.apply(in_ns(claim_pod(name, name), ns))

    for name, count in (("a", 4), ("b", 1)):
        place(name, count)
        cluster.wait_running(ns, name, timeout_s=120)
        got[name] = {int(d.removeprefix("gpu-")) for d in allocated(cluster, ns, name)}
    rig.kubectl("delete", "pod", "-n", ns, "a", "--wait=true", "--timeout=60s")
    rig.kubectl("delete", "resourceclaim", "-n", ns, "a", "--wait=true", "--timeout=60s")
    if reorders:  # the driver sees the freed clique and moves the fuller one (b's) to the front
        b_gpu = next(iter(got["b"]))
        wait_until(
            "the slice re-ordered after claim a left",
            lambda: slices(rig)[0]["spec"]["devices"][0]["name"],
            30,
            accept=lambda first: first == f"gpu-{b_gpu}",
        )
    place("c", 2)
    cluster.wait_running(ns, "c", timeout_s=120)
    got["c"] = {int(d.removeprefix("gpu-")) for d in allocated(cluster, ns, "c")}
    place("d", 4)
    return got


def test_topology_order_places_a_claim_that_stock_index_order_strands(
    cluster: Cluster, rig: Rig, start_dra: StartDra
) -> None:
    # Stock order (what every other driver publishes): c breaks the only whole clique, d cannot fit.
    driver = start_dra("--device-order", "index")
    ns = cluster.namespace("dra-index")
    stock = run_sequence(cluster, rig, ns, reorders=False)
    assert stock["c"] <= GROUPS[0] and stock["b"] <= GROUPS[1], stock
    cluster.wait_event(ns, "d", "FailedScheduling", "", timeout_s=60)
    assert cluster.pod_phase(ns, "d") == "Pending"
    claims = doctor_claims(rig, ns, "d")  # 5 GPUs free, but at most 3 in one clique
    assert "matchAttribute gpu.kubegpu.io/nvlinkClique cannot be met" in claims["summary"], claims
    assert "most free devices sharing one is 3" in claims["summary"]
    cluster.delete_namespace(ns)
    driver.stop()
    rig.kubectl(
        "delete", "resourceslices", "--field-selector", f"spec.nodeName={NODE_NAME},spec.driver={DRIVER}"
    )

    # kubegpu's order: c goes to the fuller clique, beside b, and d gets the whole other one.
    start_dra()
    ns = cluster.namespace("dra-topology")
    ours = run_sequence(cluster, rig, ns, reorders=True)
    group_b = next(g for g in GROUPS if ours["b"] <= g)
    assert ours["c"] <= group_b, ours
    cluster.wait_running(ns, "d", timeout_s=120)
    d = {int(x.removeprefix("gpu-")) for x in allocated(cluster, ns, "d")}
    assert d in GROUPS and d != group_b


def test_a_claim_the_driver_cannot_prepare_says_why_in_the_pods_events(
    cluster: Cluster, rig: Rig, start_dra: StartDra, tmp_path: Path
) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    start_dra(cdi_dir=blocker / "cdi")  # every CDI spec write fails: a per-claim error, not an RPC error
    ns = cluster.namespace("dra-fail")
    cluster.apply(in_ns(claim("one", 1, clique=False), ns))
    cluster.apply(in_ns(claim_pod("one", "one"), ns))
    message = cluster.wait_event(ns, "one", "FailedPrepareDynamicResources", "cannot write its CDI spec", 90)
    assert f"ResourceClaim {ns}/one" in message
    claims = doctor_claims(rig, ns, "one")
    assert "could not prepare it" in claims["summary"] and "cannot write its CDI spec" in claims["summary"]
