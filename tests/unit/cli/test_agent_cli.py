"""`kubegpu agent`'s command-line contract: NVIDIA's flag names, one-line errors, exit 2 on bad input."""

from __future__ import annotations

import subprocess
import sys


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kubegpu", "agent", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_help_lists_the_contract_and_nvidias_flags(cli) -> None:
    res = cli("agent", "--help")
    assert res.code == 0
    for flag in (
        "--node-spec",
        "--device-plugin-dir",
        "--config",
        "--fault-file",
        "--mig-strategy",
        "--device-list-strategy",
        "--device-id-strategy",
        "--pass-device-specs",
        "--kubelet-socket",
    ):
        assert flag in res.out


def test_real_and_simulated_gpus_are_mutually_exclusive(tmp_path) -> None:
    res = run("--nvml", "--node-spec", "builtin:seed-8gpu", "--device-plugin-dir", str(tmp_path))
    assert res.returncode == 2
    assert "mutually exclusive" in res.stderr
    assert "Traceback" not in res.stderr


def test_bad_flag_value_names_the_flag_and_starts_nothing(tmp_path) -> None:
    res = run(
        "--node-spec", "builtin:seed-8gpu", "--device-plugin-dir", str(tmp_path), "--mig-strategy", "most"
    )
    assert res.returncode == 2
    assert (
        res.stderr.strip()
        .splitlines()[-1]
        .startswith("kubegpu: error: --mig-strategy: 'most' is not allowed")
    )
    assert list(tmp_path.iterdir()) == []
