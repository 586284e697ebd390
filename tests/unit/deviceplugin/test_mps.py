"""The MPS plan (deviceplugin/mps.py): which control daemons run with which limits, and a share's
per-client limits, as NVIDIA's mps-control-daemon computes them (reference/nvidia-compat.md §3)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kubegpu.deviceplugin.config import AgentConfig, load_config
from kubegpu.deviceplugin.inventory import build_inventory
from kubegpu.deviceplugin.mps import daemon_plans, share_limits
from kubegpu.deviceplugin.response import build_allocation
from kubegpu.sources.spec import load_node

SEED = load_node("builtin:seed-8gpu")
MEMORY = SEED.gpus[0].memory_mib


def _config(tmp_path: Path, text: str) -> AgentConfig:
    path = tmp_path / "c.yaml"
    path.write_text(text)
    return load_config(path)


MPS = (
    "version: v1\nflags: {mpsRoot: /run/mps}\n"
    "sharing:\n  mps:\n    resources:\n      - {name: gpu, replicas: 4}\n"
)


def test_one_daemon_per_mps_resource_with_nvidias_limits(tmp_path: Path) -> None:
    config = _config(tmp_path, MPS)
    [plan] = daemon_plans(build_inventory(SEED, config), config)
    assert plan.resource == "nvidia.com/gpu"
    assert plan.pipe_dir == "/run/mps/nvidia.com/gpu/pipe" and plan.log_dir == "/run/mps/nvidia.com/gpu/log"
    assert plan.env["CUDA_VISIBLE_DEVICES"] == ",".join(g.uuid for g in SEED.gpus)
    assert plan.commands == (
        "set_default_active_thread_percentage 25",
        *(f"set_default_device_pinned_mem_limit {d} {MEMORY // 4}M" for d in range(8)),
    )


def test_per_gpu_replicas_split_memory_per_gpu_and_threads_by_the_most_replicas(tmp_path: Path) -> None:
    text = MPS + 'kubegpu:\n  sharing:\n    replicas: {"1": 2, "2": 8}\n    exclusive: [7]\n'
    text = text.replace("resources:", "renameByDefault: true\n    resources:")
    config = _config(tmp_path, text)
    [plan] = daemon_plans(build_inventory(SEED, config), config)
    assert plan.resource == "nvidia.com/gpu.shared"
    assert [g.index for g in plan.gpus] == [0, 1, 2, 3, 4, 5, 6], "the exclusive GPU 7 is not shared"
    assert (
        plan.commands[0] == "set_default_active_thread_percentage 12"
    )  # 100 // 8: no replica above its share
    assert plan.commands[1:4] == (
        f"set_default_device_pinned_mem_limit 0 {MEMORY // 4}M",
        f"set_default_device_pinned_mem_limit 1 {MEMORY // 2}M",
        f"set_default_device_pinned_mem_limit 2 {MEMORY // 8}M",
    )


def test_no_daemon_when_another_tool_runs_it_or_without_mps(tmp_path: Path) -> None:
    off = _config(tmp_path, MPS + "kubegpu:\n  mps: {daemon: false}\n")
    assert daemon_plans(build_inventory(SEED, off), off) == ()
    plain = _config(tmp_path, "version: v1\nflags: {mpsRoot: /run/mps}\n")
    assert daemon_plans(build_inventory(SEED, plain), plain) == ()


def test_mps_shares_get_one_daemon_over_the_shared_gpus_without_defaults(tmp_path: Path) -> None:
    text = "version: v1\nflags: {mpsRoot: /m}\nkubegpu:\n  fractional: true\n  mps: {shares: true}\n"
    config = _config(tmp_path, text)
    [plan] = daemon_plans(build_inventory(SEED, config), config)
    assert plan.resource == "kubegpu.io/gpu-milli" and plan.pipe_dir == "/m/kubegpu.io/gpu-milli/pipe"
    assert len(plan.gpus) == 8 and plan.commands == ()
    no_mps = _config(tmp_path, text.replace("shares: true", "shares: false"))
    assert daemon_plans(build_inventory(SEED, no_mps), no_mps) == ()


def test_mps_shares_need_the_mps_root(tmp_path: Path) -> None:
    from kubegpu.errors import ConfigError

    with pytest.raises(ConfigError, match=r"kubegpu\.mps\.shares: .*flags\.mpsRoot"):
        _config(tmp_path, "version: v1\nkubegpu:\n  fractional: true\n  mps: {shares: true}\n")


def test_share_limits_are_its_thousandths_of_threads_and_memory() -> None:
    assert share_limits(300, 81559).envs() == {
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "30",
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=24467M",
    }
    assert share_limits(5, 1000).active_thread_percentage == 1, "never 0: that would be no limit at all"
    assert share_limits(1500, 100).pinned_mem_mib == 100, "never more than the whole GPU"
    with pytest.raises(ValueError, match="positive"):
        share_limits(0, 100)


@given(st.integers(1, 1000), st.integers(1, 200_000))
def test_two_shares_never_hold_more_than_the_gpu(milli: int, memory: int) -> None:
    rest = 1000 - milli
    mine = share_limits(milli, memory)
    if rest:
        other = share_limits(rest, memory)
        # (a share too small for one MiB still gets one)
        assert mine.pinned_mem_mib + other.pinned_mem_mib <= memory or min(milli, rest) * memory < 1000
        assert mine.active_thread_percentage + other.active_thread_percentage <= 100


def test_an_mps_share_allocation_carries_the_pipe_and_its_limits(tmp_path: Path) -> None:
    text = "version: v1\nflags: {mpsRoot: /m}\nkubegpu:\n  fractional: true\n  mps: {shares: true}\n"
    config = _config(tmp_path, text)
    milli = build_inventory(SEED, config).resource("kubegpu.io/gpu-milli")
    assert milli is not None
    out = build_allocation(milli, [milli.devices[0]], config, mps_limits=share_limits(700, MEMORY))
    assert out.envs["CUDA_MPS_PIPE_DIRECTORY"] == "/mps/kubegpu.io/gpu-milli/pipe"
    assert out.envs["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "70"
    assert {(m.container_path, m.host_path) for m in out.mounts} == {
        ("/mps/kubegpu.io/gpu-milli/pipe", "/m/kubegpu.io/gpu-milli/pipe"),
        ("/mps/shm", "/m/shm"),
    }
    plain = build_allocation(milli, [milli.devices[0]], config)
    assert not any(k.startswith("CUDA_MPS_") for k in plain.envs) and not plain.mounts
