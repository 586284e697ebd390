"""`kubegpu extender` refuses bad input with one line and exit 2, before it listens or calls the API."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.cli.conftest import Runner


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--policy", "nope"], "unknown placement policy 'nope'"),
        (["--listen", "nowhere"], "--listen 'nowhere': give HOST:PORT"),
        (["--tls-cert-file", "/etc/x.crt"], "--tls-cert-file and --tls-private-key-file go together"),
        (["--client-ca-file", "/etc/ca.crt"], "--client-ca-file needs --tls-cert-file"),
        (
            ["--tls-cert-file", "/nonexistent.crt", "--tls-private-key-file", "/nonexistent.key"],
            "--tls-cert-file /nonexistent.crt / --tls-private-key-file /nonexistent.key: cannot use them",
        ),
    ],
)
def test_bad_flags_are_one_line_and_exit_2(cli: Runner, args: list[str], message: str) -> None:
    result = cli("extender", *args, "--kubeconfig", "/nonexistent")
    assert result.code == 2
    assert message in result.err
    assert "Traceback" not in result.err


def test_a_bad_workload_file_names_the_line(cli: Runner, tmp_path: Path) -> None:
    bad = tmp_path / "pods.csv"
    bad.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np1,100,10,1,2000\n")
    result = cli("extender", "--workload", str(bad), "--kubeconfig", "/nonexistent")
    assert result.code == 2
    assert "pods.csv:2" in result.err


def test_no_cluster_is_one_line_and_exit_1(cli: Runner, tmp_path: Path) -> None:
    result = cli("extender", "--listen", "127.0.0.1:0", "--kubeconfig", str(tmp_path / "missing"))
    assert result.code == 1
    assert "no usable kubeconfig" in result.err
