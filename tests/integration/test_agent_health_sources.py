"""Health sources under hostile conditions, through the real agent process and the kubelet double."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from kubegpu.sources.spec import load_node
from tests.integration.conftest import AgentProcess
from tests.integration.kubelet_double import KubeletDouble

pytestmark = pytest.mark.integration

GPU = "nvidia.com/gpu"
UUIDS = [g.uuid for g in load_node("builtin:seed-8gpu").gpus]


def _unhealthy(kubelet: KubeletDouble) -> set[str]:
    return {i for i, h in kubelet.device_health(GPU).items() if h != "Healthy"}


@pytest.fixture
def fault_file(plugin_dir: Path):
    path = plugin_dir.parent / f"{plugin_dir.name}-faults.jsonl"
    yield path
    path.unlink(missing_ok=True)
    path.with_suffix(".new").unlink(missing_ok=True)


def test_a_line_that_breaks_the_json_parser_does_not_lose_the_valid_lines_after_it(
    kubelet: KubeletDouble, fault_file: Path, start_agent: Callable[..., AgentProcess]
) -> None:
    fault_file.write_text("")
    agent = start_agent("--node-spec", "builtin:seed-8gpu", "--fault-file", str(fault_file))
    assert kubelet.wait_for(lambda: kubelet.allocatable(GPU) == 8, 20), agent.log
    poison = ["[" * 50_000, '{"gpu": 1, "xid": ' + "9" * 5_000 + "}", "[" * 100_000]
    lines = [poison[0], json.dumps({"gpu": 1, "xid": 79}), poison[1], json.dumps({"gpu": 2, "xid": 79})]
    lines += [poison[2], json.dumps({"gpu": 3, "xid": 79})]
    with fault_file.open("a") as f:
        f.write("\n".join(lines) + "\n")  # one write: the follower sees it in one read
    want = {UUIDS[1], UUIDS[2], UUIDS[3]}
    assert kubelet.wait_for(lambda: _unhealthy(kubelet) == want, 10), agent.log
    assert "Traceback" not in agent.log
    assert agent.proc.poll() is None


def test_a_fault_file_replaced_by_rename_is_followed_from_its_first_line(
    kubelet: KubeletDouble, fault_file: Path, start_agent: Callable[..., AgentProcess]
) -> None:
    fault_file.write_text("# " + "x" * 200 + "\n" + json.dumps({"gpu": 1, "xid": 79}) + "\n")
    agent = start_agent("--node-spec", "builtin:seed-8gpu", "--fault-file", str(fault_file))
    assert kubelet.wait_for(lambda: _unhealthy(kubelet) == {UUIDS[1]}, 20), agent.log
    new = fault_file.with_suffix(".new")
    events = [{"gpu": 1, "healthy": True}, {"gpu": 5, "xid": 79}]
    new.write_text("".join(json.dumps(e) + "\n" for e in events) + "# " + "y" * 400 + "\n")
    new.replace(fault_file)  # write-and-rename, longer than the old file
    assert kubelet.wait_for(lambda: _unhealthy(kubelet) == {UUIDS[5]}, 10), agent.log


FAKE_NVML = Path(__file__).parent / "fake_nvml"
NVML_GPUS = {"GPU-fake-0", "GPU-fake-1"}


@pytest.fixture
def nvml_script(plugin_dir: Path):
    path = plugin_dir.parent / f"{plugin_dir.name}-nvml.json"

    def script(**fail: object) -> dict[str, str]:
        path.write_text(json.dumps({"fail": fail}))
        return {"KUBEGPU_FAKE_NVML": str(path), "PYTHONPATH": str(FAKE_NVML)}

    yield script
    path.unlink(missing_ok=True)


def test_a_failing_nvml_watcher_marks_gpus_unhealthy_retries_and_reports_recovery(
    kubelet: KubeletDouble, nvml_script, start_agent: Callable[..., AgentProcess]
) -> None:
    env = nvml_script(nvmlEventSetCreate=999)  # the watcher cannot even start
    agent = start_agent("--nvml", env=env)
    assert kubelet.wait_for(lambda: set(kubelet.device_health(GPU)) == NVML_GPUS, 20), agent.log
    assert kubelet.wait_for(lambda: _unhealthy(kubelet) == NVML_GPUS, 10), agent.log
    nvml_script()  # NVML works again
    assert kubelet.wait_for(lambda: kubelet.allocatable(GPU) == 2, 20), agent.log
    nvml_script(nvmlEventSetWait_v2="TypeError")  # not even an NVMLError
    assert kubelet.wait_for(lambda: _unhealthy(kubelet) == NVML_GPUS, 10), agent.log
    nvml_script()
    assert kubelet.wait_for(lambda: kubelet.allocatable(GPU) == 2, 20), agent.log
    log = agent.log
    assert "Traceback" not in log
    assert 2 <= log.count("NVML health watcher failed") <= 10  # one line per try, with backoff
    assert agent.proc.poll() is None


def test_watcher_failure_keep_leaves_gpus_healthy_and_still_says_so(
    kubelet: KubeletDouble, nvml_script, plugin_dir: Path, start_agent: Callable[..., AgentProcess]
) -> None:
    config = plugin_dir.parent / f"{plugin_dir.name}-keep.yaml"
    config.write_text("version: v1\nkubegpu:\n  health:\n    watcherFailure: keep\n")
    try:
        agent = start_agent("--nvml", "--config", str(config), env=nvml_script(nvmlEventSetCreate=999))
        assert kubelet.wait_for(lambda: kubelet.allocatable(GPU) == 2, 20), agent.log
        assert kubelet.wait_for(lambda: agent.log.count("NVML health watcher failed") >= 2, 10), agent.log
        assert kubelet.allocatable(GPU) == 2 and not _unhealthy(kubelet)
    finally:
        config.unlink()
