"""`kubegpu sim kube` refuses bad input and an unreachable API server with one line, no traceback."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from tests.unit.cli.conftest import Runner


@pytest.fixture
def trace(tmp_path: Path) -> tuple[Path, Path]:
    nodes, pods = tmp_path / "nodes.csv", tmp_path / "pods.csv"
    nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\nn0,32000,65536,2,T4\n")
    pods.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np0,1000,1024,1,500\np1,1000,1024,1,1000\n")
    return nodes, pods


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_an_unreachable_api_server_is_one_line_and_exit_1(
    cli: Runner, trace: tuple[Path, Path], tmp_path: Path
) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        f"clusters: [{{name: k, cluster: {{server: 'https://127.0.0.1:{closed_port()}', "
        "insecure-skip-tls-verify: true}}]\n"
        "users: [{name: u, user: {token: t}}]\ncontexts: [{name: c, context: {cluster: k, user: u}}]\n"
    )
    nodes, pods = trace
    result = cli(
        "sim",
        "kube",
        "--nodes",
        str(nodes),
        "--pods",
        str(pods),
        "--kubeconfig",
        str(kubeconfig),
        "--scheduler-name",
        "x",
    )
    assert result.code == 1
    assert "not reachable" in result.err or "Connection refused" in result.err, result.err
    assert "Traceback" not in result.err


def test_bad_input_is_one_line_and_exit_2(cli: Runner, trace: tuple[Path, Path], tmp_path: Path) -> None:
    nodes, pods = trace
    result = cli(
        "sim", "kube", "--nodes", str(nodes), "--pods", str(pods), "--scheduler-name", "x", "--limit", "0"
    )
    assert result.code == 2 and "--limit must be at least 1" in result.err
    for inflate in ("nan", "inf", "-1"):  # refused before the trace is read or a node is created
        result = cli("sim", "kube", "--nodes", str(nodes), "--pods", str(pods), "--scheduler-name", "x",
                     "--inflate", inflate)  # fmt: skip
        assert (
            result.code == 2
            and f"--inflate must be 0 (no inflation) or a multiple of capacity up to 10, got {float(inflate)}"
            in result.err
        )
    bad = tmp_path / "bad.csv"
    bad.write_text("sn,cpu_milli,memory_mib,gpu,model\nn0,lots,65536,2,T4\n")
    result = cli("sim", "kube", "--nodes", str(bad), "--pods", str(pods), "--scheduler-name", "x")
    assert result.code == 2 and "bad.csv:2" in result.err
    assert "Traceback" not in result.err
