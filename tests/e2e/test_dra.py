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
    after the test's pods and claims are gone (kubelet must unprepare their claims through the driver)."""
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


def gpus_of(cluster: Cluster, ns: str, name: str) -> set[int]:
    return {int(d.removeprefix("gpu-")) for d in allocated(cluster, ns, name)}


def run_claim(cluster: Cluster, ns: str, name: str, count: int, *, clique: bool = True) -> set[int]:
    """A claim and a pod using it; waits until the pod runs and returns the GPUs allocated."""
    cluster.apply(in_ns(claim(name, count, clique=clique), ns))
    cluster.apply(in_ns(claim_pod(name, name), ns))
    cluster.wait_running(ns, name, timeout_s=120)
    return gpus_of(cluster, ns, name)


def release(rig: Rig, ns: str, name: str) -> None:
    rig.kubectl("delete", "pod", "-n", ns, name, "--wait=true", "--timeout=60s")
    rig.kubectl("delete", "resourceclaim", "-n", ns, name, "--wait=true", "--timeout=60s")


def spec_file(cluster: Cluster, ns: str, name: str) -> Path:
    uid = cluster.get("resourceclaim", name, ns)["metadata"]["uid"]
    return CDI_SPEC_DIRS[-1] / f"kubegpu.io-gpu_{uid}.json"


def test_nvlink_claims_on_seed_8gpu(cluster: Cluster, rig: Rig, start_dra: StartDra) -> None:
    start_dra()
    by_uuid = gpu_index_by_uuid(SEED)
    ns = cluster.namespace("dra")

    # (6) Five GPUs all pairwise NVLink-connected do not exist on this node: Pending, and the doctor
    # says which constraint no node can meet.
    cluster.apply(in_ns(claim("five", 5), ns))
    cluster.apply(in_ns(claim_pod("five", "five"), ns))
    cluster.wait_event(ns, "five", "FailedScheduling", "", timeout_s=60)
    assert cluster.pod_phase(ns, "five") == "Pending"
    why = doctor_claims(rig, ns, "five")
    assert "matchAttribute gpu.kubegpu.io/nvlinkClique cannot be met" in why["summary"], why
    assert "most free devices sharing one is 4" in why["summary"]
    release(rig, ns, "five")

    # GPUs 0 and 1 held by a claim: the pod sees exactly those two (CDI env), as does its nvidia-smi.
    held = run_claim(cluster, ns, "held", 2)
    assert held == {0, 1}
    env = cluster.env(ns, "held")
    assert {by_uuid[u] for u in env["NVIDIA_VISIBLE_DEVICES"].split(",")} == held
    listed = [line for line in cluster.logs(ns, "held").splitlines() if line.startswith("GPU ")]
    assert len(listed) == 2, listed

    # (3) GPUs 2-7 free, a claim for 2 in one clique: a pair inside one group (the fuller one).
    pair = run_claim(cluster, ns, "pair", 2)
    assert any(pair <= g for g in GROUPS) and pair == {2, 3}, pair

    # (8) The pod ends: kubelet unprepares the claim, the driver removes its CDI spec, and the devices
    # go to the next claim.
    pair_spec = spec_file(cluster, ns, "pair")
    assert pair_spec.exists()
    release(rig, ns, "pair")
    wait_until(f"{pair_spec} removed after unprepare", lambda: not pair_spec.exists(), 60)

    # (2) GPUs 0 and 1 held, a claim for 4 NVLink-connected GPUs: 4, 5, 6, 7.
    assert run_claim(cluster, ns, "quad", 4) == {4, 5, 6, 7}
    assert run_claim(cluster, ns, "again", 2) == {2, 3}  # (8) the freed pair, reused


def test_driver_and_kubelet_restarts_keep_prepared_claims(
    cluster: Cluster, rig: Rig, start_dra: StartDra
) -> None:
    driver = start_dra()
    ns = cluster.namespace("dra-restart")
    kept = run_claim(cluster, ns, "kept", 2)
    env = cluster.env(ns, "kept")["NVIDIA_VISIBLE_DEVICES"]
    container = cluster.get("pod", "kept", ns)["status"]["containerStatuses"][0]["containerID"]
    kept_spec = spec_file(cluster, ns, "kept")

    driver.stop()  # an upgrade of the driver: its checkpoint keeps the claim
    start_dra()
    assert kept_spec.exists()

    # (7) kubelet restarts: it wipes the node's slices (the driver re-creates them) and registers the
    # driver again; the running pod keeps its GPUs, and new claims still work.
    rig.restart_kubelet()
    rig.wait_node_ready(timeout_s=60)
    wait_until(
        "the slice back after kubelet's restart",
        lambda: slices(rig),
        60,
        accept=lambda s: len(s) == 1 and len(s[0]["spec"]["devices"]) == 8,
    )
    status = cluster.get("pod", "kept", ns)["status"]
    assert status["phase"] == "Running"
    assert status["containerStatuses"][0]["containerID"] == container
    assert status["containerStatuses"][0]["restartCount"] == 0
    assert cluster.env(ns, "kept")["NVIDIA_VISIBLE_DEVICES"] == env
    fresh = run_claim(cluster, ns, "fresh", 4)
    assert not fresh & kept and fresh in GROUPS

    release(rig, ns, "kept")  # unprepared through the restarted driver
    wait_until(f"{kept_spec} removed", lambda: not kept_spec.exists(), 60)


def test_a_gpu_fault_withdraws_it_and_recovery_restores_it(
    cluster: Cluster, rig: Rig, start_dra: StartDra
) -> None:
    driver = start_dra()
    ns = cluster.namespace("dra-health")
    watched = sorted(run_claim(cluster, ns, "watched", 2))
    uid = cluster.get("resourceclaim", "watched", ns)["metadata"]["uid"]
    ids = {i: f"kubegpu.io/gpu={uid}-dev-gpu-{i}" for i in watched}

    def health() -> dict[str, str]:
        return resource_health(cluster, ns, "watched")

    def published() -> list[str]:
        return [d["name"] for d in slices(rig)[0]["spec"]["devices"]]

    # kubelet shows each device's health in the pod's status (DRAResourceHealth).
    wait_until("both devices Healthy in the pod's status", health, 90,
               accept=lambda h: all(h.get(r) == "Healthy" for r in ids.values()))  # fmt: skip
    # (9) an XID 79 on one of them: Unhealthy there, and it leaves the slice ...
    failed, other = watched
    driver.fault(json.dumps({"gpu": failed, "xid": 79}))
    wait_until(
        f"gpu-{failed} Unhealthy",
        health,
        90,
        accept=lambda h: h.get(ids[failed]) == "Unhealthy" and h.get(ids[other]) == "Healthy",
    )
    wait_until(f"gpu-{failed} out of the slice", published, 30,
               accept=lambda n: f"gpu-{failed}" not in n and len(n) == 7)  # fmt: skip
    # ... and recovery restores both.
    driver.fault(json.dumps({"gpu": failed, "healthy": True}))
    wait_until(f"gpu-{failed} back in the slice", published, 30, accept=lambda n: len(n) == 8)
    wait_until(f"gpu-{failed} Healthy again", health, 90, accept=lambda h: h.get(ids[failed]) == "Healthy")


def test_dgx1_claim_for_four_fully_nvlinked_gpus_gets_one_quad(
    cluster: Cluster, rig: Rig, start_dra: StartDra
) -> None:
    # (4) The hybrid cube mesh is one NVLink domain of 8, but only its quads are fully connected.
    start_dra(spec="builtin:dgx1-v100")
    ns = cluster.namespace("dra-dgx1")
    assert run_claim(cluster, ns, "quad", 4) in ({0, 1, 2, 3}, {4, 5, 6, 7})


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


def test_mig_profile_and_memory_claims_on_h100_mig_mixed(
    cluster: Cluster, rig: Rig, start_dra: StartDra
) -> None:
    published = {d["name"]: d for d in devices_of(MIG_SPEC)}
    start_dra(spec=MIG_SPEC, devices=len(published))
    ns = cluster.namespace("dra-mig")

    def selected(name: str, device_class: str, expression: str) -> dict[str, Any]:
        c = claim(name, 1, clique=False)
        request = c["spec"]["devices"]["requests"][0]["exactly"]
        request["deviceClassName"] = device_class
        request["selectors"] = [{"cel": {"expression": expression}}]
        cluster.apply(in_ns(c, ns))
        cluster.apply(in_ns(claim_pod(name, name), ns))
        cluster.wait_running(ns, name, timeout_s=120)
        [device] = allocated(cluster, ns, name)
        got = published[device]
        # (1) the pod sees exactly the allocated device's UUID
        assert cluster.env(ns, name)["NVIDIA_VISIBLE_DEVICES"] == got["attributes"]["uuid"]["string"]
        return got

    # (5) a 2g.20gb MIG device by CEL selector
    mig = selected("mig", "mig.kubegpu.io", f'device.attributes["{DRIVER}"].profile == "2g.20gb"')
    assert mig["attributes"]["profile"]["string"] == "2g.20gb"
    assert mig["attributes"]["uuid"]["string"].startswith("MIG-")
    # (5) and a device with at least 40 GiB: the whole H100 (the 3g.40gb instance has 39.5 GiB)
    big = selected(
        "big", "gpu.kubegpu.io", f'device.capacity["{DRIVER}"].memory.compareTo(quantity("40Gi")) >= 0'
    )
    assert big["attributes"]["type"]["string"] == "gpu"


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


# two driver runs of four claims each and two namespace deletions (kubelet unprepares every claim
# through the driver): about 100 s on 2 idle cores, more than the suite's 120 s when they are busy
@pytest.mark.timeout(300)
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
