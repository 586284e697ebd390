"""The real agent under hostile input and environments: modes under umask 000, oversized text, long
resource names and paths, IDs the plugin does not own, duplicate and empty requests (issue 11)."""

from __future__ import annotations

import json
import os
import shutil
import stat
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest

from kubegpu.deviceplugin.api import v1beta1_pb2 as pb
from kubegpu.sources.spec import load_node
from tests.integration.conftest import AgentProcess
from tests.integration.helpers import allocate, plugin_stub, preferred, time_sliced
from tests.integration.kubelet_double import KubeletDouble

pytestmark = pytest.mark.integration

GPU = "nvidia.com/gpu"
UUIDS = [g.uuid for g in load_node("builtin:seed-8gpu").gpus]
HUGE_ID = "GPU-" + "x" * (16 * 1024)


def _wait(predicate: Callable[[], bool], timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return predicate()


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_sockets_are_0600_and_created_directories_0750_under_umask_000(
    plugin_dir: Path, start_agent: Callable[..., AgentProcess]
) -> None:
    nested = plugin_dir / "made" / "by-agent"
    old = os.umask(0)
    try:  # the child inherits the umask at fork; the last --device-plugin-dir wins
        agent = start_agent(
            "--node-spec", "builtin:seed-8gpu", "--kubelet-socket", "", "--device-plugin-dir", str(nested)
        )
    finally:
        os.umask(old)
    assert _wait(lambda: nested.is_dir() and any(p.suffix == ".sock" for p in nested.iterdir())), agent.log
    [sock] = [p for p in nested.iterdir() if p.suffix == ".sock"]
    assert stat.S_ISSOCK(os.lstat(sock).st_mode)
    assert _mode(sock) == 0o600
    assert _mode(nested) == 0o750
    assert _mode(nested.parent) == 0o750
    assert _mode(plugin_dir) == 0o700  # an existing directory (kubelet's) is left as it is


def test_a_16kb_unknown_id_is_invalid_argument_with_a_short_message_and_log_line(
    kubelet: KubeletDouble, start_agent: Callable[..., AgentProcess]
) -> None:
    agent = start_agent("--node-spec", "builtin:seed-8gpu")
    assert kubelet.wait_for(lambda: kubelet.allocatable(GPU) == 8, 20), agent.log
    channel, stub = plugin_stub(kubelet.endpoints[GPU].socket)
    with channel:
        with pytest.raises(grpc.RpcError) as refused:
            allocate(stub, [HUGE_ID])
        assert refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        details = refused.value.details()
        assert len(details) < 400
        assert "GPU-xxxx" in details and "16388 bytes" in details
        with pytest.raises(grpc.RpcError) as preferred_refused:
            preferred(stub, [UUIDS[0], HUGE_ID], 1)
        assert preferred_refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        assert len(preferred_refused.value.details()) < 400
    assert _wait(lambda: '"msg": "request refused", "rpc": "Allocate"' in agent.log), agent.log
    assert max(len(line) for line in agent.log.splitlines()) < 2000


def test_fault_file_text_is_not_echoed_unbounded_into_logs_or_grpc_errors(
    kubelet: KubeletDouble, plugin_dir: Path, start_agent: Callable[..., AgentProcess]
) -> None:
    faults = plugin_dir.parent / f"{plugin_dir.name}-faults.jsonl"
    # Each line stays under the follower's 64 KiB line limit (longer lines are skipped unread), so
    # every value reaches the parser and the health tracker and must be shortened there.
    faults.write_text(
        json.dumps({"gpu": "GPU-" + "u" * 60_000, "xid": 79})
        + "\n"
        + json.dumps({"gpu": 0, "xid": "x" * 60_000})
        + "\n"
        + json.dumps({"gpu": 0, "xid": 79, "detail": "d" * 60_000})
        + "\n"
    )
    try:
        agent = start_agent("--node-spec", "builtin:seed-8gpu", "--fault-file", str(faults))
        assert kubelet.wait_for(lambda: kubelet.allocatable(GPU) == 7, 20), agent.log
        channel, stub = plugin_stub(kubelet.endpoints[GPU].socket)
        with channel, pytest.raises(grpc.RpcError) as unhealthy:
            allocate(stub, [UUIDS[0]])
        assert unhealthy.value.code() is grpc.StatusCode.FAILED_PRECONDITION
        assert "XID 79" in unhealthy.value.details() and len(unhealthy.value.details()) < 600
        assert _wait(lambda: agent.log.count("bad fault line") + agent.log.count("unknown GPU") >= 2)
        assert max(len(line) for line in agent.log.splitlines()) < 2000
    finally:
        faults.unlink()


def test_a_63_character_resource_name_fits_under_a_kubelet_length_plugin_dir() -> None:
    base = Path(tempfile.mkdtemp(prefix="kg-", dir="/tmp"))
    # as long as /var/lib/kubelet/device-plugins (31 bytes)
    plugin_dir = base / ("d" * (31 - len(str(base)) - 1))
    assert len(str(plugin_dir)) == 31
    plugin_dir.mkdir()
    name = "nvidia.com/" + "a" * 52  # 63 characters: the longest name NVIDIA's rule allows
    config = base / "cfg.yaml"
    config.write_text(time_sliced(2) + f"kubegpu:\n  sharing:\n    rename:\n      nvidia.com/gpu: {name}\n")
    kubelet = KubeletDouble(plugin_dir)
    kubelet.start()
    log = base / "agent.log"
    agent = AgentProcess(
        ["--node-spec", "builtin:seed-8gpu", "--device-plugin-dir", str(plugin_dir), "--config", str(config)],
        log,
        {k: v for k, v in os.environ.items() if k != "CONFIG_FILE"},
    )
    try:
        assert kubelet.wait_for(lambda: kubelet.allocatable(name) == 16, 20), agent.log
        socket = kubelet.endpoints[name].socket
        assert len(os.fsencode(socket)) <= 107
        assert socket.name.startswith("kubegpu-")
    finally:
        agent.kill()
        kubelet.stop()
        shutil.rmtree(base, ignore_errors=True)


def test_a_plugin_dir_too_long_for_unix_sockets_is_named_with_the_limit(
    plugin_dir: Path, start_agent: Callable[..., AgentProcess]
) -> None:
    deep = plugin_dir / ("p" * 100)
    agent = start_agent(
        "--node-spec", "builtin:seed-8gpu", "--kubelet-socket", "", "--device-plugin-dir", str(deep)
    )
    assert agent.proc.wait(30) == 2, agent.log
    text = agent.log
    assert str(deep) in text and "107" in text, text
    assert "writable" not in text and "permission" not in text.lower()
    assert "Traceback" not in text


def test_preferred_allocation_refuses_ids_the_plugin_does_not_own(
    kubelet: KubeletDouble, start_agent: Callable[..., AgentProcess]
) -> None:
    agent = start_agent("--node-spec", "builtin:seed-8gpu")
    assert kubelet.wait_for(lambda: kubelet.allocatable(GPU) == 8, 20), agent.log
    channel, stub = plugin_stub(kubelet.endpoints[GPU].socket)
    with channel:
        for available, must in (
            ([UUIDS[0], "GPU-not-ours"], ["GPU-not-ours"]),  # available and must-include
            ([UUIDS[0], UUIDS[1], "GPU-not-ours"], []),  # available only
            ([UUIDS[0]], ["GPU-not-ours"]),  # must-include only
        ):
            with pytest.raises(grpc.RpcError) as refused:
                preferred(stub, available, 1, must=must)
            assert refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT
            assert "GPU-not-ours" in refused.value.details()
        assert preferred(stub, UUIDS[:4], 1, must=[UUIDS[2]]) == [UUIDS[2]]


def test_allocate_refuses_duplicate_ids_and_empty_requests(
    kubelet: KubeletDouble, start_agent: Callable[..., AgentProcess]
) -> None:
    agent = start_agent("--node-spec", "builtin:seed-8gpu")
    assert kubelet.wait_for(lambda: kubelet.allocatable(GPU) == 8, 20), agent.log
    channel, stub = plugin_stub(kubelet.endpoints[GPU].socket)
    with channel:
        with pytest.raises(grpc.RpcError) as duplicate:
            allocate(stub, [UUIDS[1], UUIDS[2], UUIDS[1]])
        assert duplicate.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        assert UUIDS[1] in duplicate.value.details() and "twice" in duplicate.value.details()
        with pytest.raises(grpc.RpcError) as no_containers:
            stub.Allocate(pb.AllocateRequest(), timeout=10)
        assert no_containers.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        with pytest.raises(grpc.RpcError) as no_devices:
            allocate(stub, [])
        assert no_devices.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        assert allocate(stub, [UUIDS[1]]).envs["NVIDIA_VISIBLE_DEVICES"] == UUIDS[1]


def test_a_node_spec_uuid_that_would_escape_the_mount_root_stops_the_agent(
    plugin_dir: Path, start_agent: Callable[..., AgentProcess]
) -> None:
    spec = plugin_dir.parent / f"{plugin_dir.name}-spec.yaml"
    spec.write_text("name: lab\ngpus:\n  - model: T4\n    uuid: GPU-../../etc\n")
    try:
        agent = start_agent("--node-spec", str(spec), "--kubelet-socket", "")
        assert agent.proc.wait(30) == 2, agent.log
        assert f"{spec}:4: gpus[0].uuid: UUID 'GPU-../../etc'" in agent.log
        assert not any(p.suffix == ".sock" for p in plugin_dir.iterdir())
    finally:
        spec.unlink()
