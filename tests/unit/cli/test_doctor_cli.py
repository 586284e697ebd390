"""`kubegpu doctor` on the command line: exit codes, --json shape, and no crash without a cluster."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.unit.doctor.fakehost import FakeHost

RECORDED = Path(__file__).parents[1] / "doctor" / "recorded" / "healthy"
KEYS = {"id", "layer", "status", "summary", "evidence", "fix"}


def kubegpu(*args: str | Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kubegpu", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
    )


def test_doctor_node_json_on_a_healthy_root_exits_0(tmp_path: Path) -> None:
    host = FakeHost.healthy(tmp_path)
    res = kubegpu("doctor", "node", "--host-root", host.root, "--json")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert set(doc) == {"findings"}
    assert all(set(f) == KEYS for f in doc["findings"])
    assert doc["findings"][0]["id"] == "host.gpu-present"


def test_doctor_node_exits_1_and_shows_the_first_broken_link_first(tmp_path: Path) -> None:
    host = FakeHost.healthy(tmp_path)
    host.modules("ext4")
    res = kubegpu("doctor", "node", "--host-root", host.root)
    assert res.returncode == 1
    lines = res.stdout.splitlines()
    assert lines[1].startswith("First broken link: host.driver-loaded")
    assert lines[2].strip().startswith("fix: modprobe nvidia")


def test_bad_usage_exits_2_with_one_line(tmp_path: Path) -> None:
    res = kubegpu("doctor", "pod", "no-slash")
    assert res.returncode == 2
    assert (
        res.stderr.strip() == "kubegpu: error: pod 'no-slash': expected NAMESPACE/NAME, e.g. default/gpu-test"
    )
    res = kubegpu("doctor", "node", "--host-root", tmp_path / "missing")
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert kubegpu("doctor", "node", "--no-such-flag").returncode == 2


def test_bare_doctor_without_a_cluster_runs_node_checks_and_skips_the_cluster(tmp_path: Path) -> None:
    host = FakeHost.healthy(tmp_path / "root")
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "KUBECONFIG": str(tmp_path / "absent")}
    res = kubegpu("doctor", "--host-root", host.root, "--json", env=env)
    assert res.returncode == 0, res.stdout + res.stderr
    findings = {f["id"]: f for f in json.loads(res.stdout)["findings"]}
    assert findings["host.nvml"]["status"] == "ok"
    assert findings["cluster.api"]["status"] == "skip"
    assert "no cluster reachable" in findings["cluster.api"]["summary"]
    assert findings["cluster.taints"]["summary"] == "blocked by cluster.api"


def test_doctor_cluster_and_pod_read_recorded_objects() -> None:
    res = kubegpu("doctor", "cluster", "--from-recorded", RECORDED, "--json")
    assert res.returncode == 0, res.stdout
    statuses = {f["id"]: f["status"] for f in json.loads(res.stdout)["findings"]}
    assert statuses.pop("cluster.gpu-operator") == "skip"
    assert set(statuses.values()) == {"ok"}
    res = kubegpu("doctor", "pod", "ml/missing", "--from-recorded", RECORDED)
    assert res.returncode == 1
    assert "pod ml/missing not found" in res.stdout


def test_bare_doctor_narrows_the_cluster_part_to_this_host(tmp_path: Path) -> None:
    host = FakeHost.healthy(tmp_path / "root")  # /etc/hostname is gpu-node-1
    res = kubegpu("doctor", "--host-root", host.root, "--from-recorded", RECORDED, "--json")
    assert res.returncode == 0, res.stdout
    api = next(f for f in json.loads(res.stdout)["findings"] if f["id"] == "cluster.api")
    assert api["evidence"] == ["in scope: gpu-node-1"]


def test_an_unreadable_recorded_file_is_one_line_naming_it_and_exit_2(tmp_path: Path) -> None:
    for f in RECORDED.glob("*.json"):
        (tmp_path / f.name).write_text(f.read_text())
    (tmp_path / "pods.json").write_text("[" * 100_000 + "]" * 100_000)
    for command in (["cluster"], ["pod", "ml/train-a"]):
        res = kubegpu("doctor", *command, "--from-recorded", tmp_path, "--json")
        assert res.returncode == 2
        assert res.stdout == ""
        assert res.stderr.strip().splitlines() == [
            f"kubegpu: error: {tmp_path / 'pods.json'}: nested too deeply to read"
            " (kubectl get -o json expected)"
        ]
