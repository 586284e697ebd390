"""End to end: concurrent pod admissions through the kubelet double, against the real agent.

Pods of random sizes are admitted from many threads at once, for whole GPUs and for time-sliced
replicas, while a fault comes and goes. What this checks is the admission path as a node runs it:
the double's bookkeeping (like kubelet, it chooses devices and reserves them under its device-manager
lock, so no two pods get the same device, and a failed admission is rolled back) together with the
agent's Allocate answers, each of which must name exactly the GPUs granted to its pod.

It cannot catch an agent that answers GetPreferredAllocation wrongly: the double intersects the answer
with its own free devices and fills any shortfall, exactly as kubelet does. The agent's own invariants,
called directly and concurrently, are in test_agent_invariants.py.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.integration.conftest import AgentProcess
from tests.integration.helpers import time_sliced
from tests.integration.kubelet_double import AdmissionError, Container, KubeletDouble, Pod

pytestmark = pytest.mark.integration

GPU = "nvidia.com/gpu"
SHARED_CONFIG = time_sliced(3)


@pytest.fixture(params=["whole", "replicas"])
def node(
    request, kubelet: KubeletDouble, plugin_dir: Path, start_agent
) -> Iterator[tuple[KubeletDouble, Path, int]]:
    faults = plugin_dir.parent / f"{plugin_dir.name}-faults.jsonl"
    faults.write_text("")
    args = ["--node-spec", "builtin:hgx-16", "--fault-file", str(faults)]
    total = 16
    config = plugin_dir.parent / f"{plugin_dir.name}-cfg.yaml"
    if request.param == "replicas":
        config.write_text(SHARED_CONFIG)
        args += ["--config", str(config)]
        total = 48
    agent: AgentProcess = start_agent(*args)
    assert kubelet.wait_for(lambda: kubelet.allocatable(GPU) == total, 20), agent.log
    yield kubelet, faults, total
    faults.unlink(missing_ok=True)
    config.unlink(missing_ok=True)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    sizes=st.lists(st.integers(min_value=1, max_value=6), min_size=2, max_size=12),
    fault_gpu=st.integers(0, 15),
)
def test_concurrent_admissions_through_the_double_are_disjoint_and_allocate_names_their_gpus(
    node, sizes: list[int], fault_gpu: int
) -> None:
    kubelet, faults, _total = node
    admitted: dict[str, list[str]] = {}
    visible: dict[str, str] = {}
    errors: list[BaseException] = []
    lock = threading.Lock()

    def admit(i: int, size: int) -> None:
        pod = Pod(uid=f"pod-{i}", containers=[Container(name="c", requests={GPU: size})])
        try:
            config = kubelet.admit_pod(pod)
        except AdmissionError:
            return
        except BaseException as exc:
            errors.append(exc)
            return
        with lock:
            admitted[pod.uid] = kubelet.allocations[(pod.uid, "c", GPU)][0]
            visible[pod.uid] = config["c"].envs["NVIDIA_VISIBLE_DEVICES"]

    with faults.open("a") as f:
        f.write(json.dumps({"gpu": fault_gpu, "xid": 79}) + "\n")
    threads = [threading.Thread(target=admit, args=(i, s)) for i, s in enumerate(sizes)]
    for t in threads:
        t.start()
    with faults.open("a") as f:
        f.write(json.dumps({"gpu": fault_gpu, "healthy": True}) + "\n")
    for t in threads:
        t.join(60)
    try:
        assert not errors, errors
        granted = [d for ids in admitted.values() for d in ids]
        assert len(granted) == len(set(granted)), "a device was given to two pods"
        for uid, ids in admitted.items():
            assert len(ids) == sizes[int(uid.split("-")[1])]
            assert set(visible[uid].split(",")) == {d.split("::")[0] for d in ids}
        assert set(kubelet.allocations) == {(uid, "c", GPU) for uid in admitted}
    finally:
        for uid in list(admitted):
            kubelet.remove_pod(uid)
        assert kubelet.wait_for(lambda: kubelet.allocatable(GPU) == _total, 10)
